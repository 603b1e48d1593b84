//! Views (SPEC §7): MANIFEST, `<file>.outline`, provenance xattrs; never stale.

mod common;
use common::*;

fn manifest_row(m: &Mount, path: &str) -> Vec<String> {
    let text = read(m.path("MANIFEST"));
    text.lines()
        .find(|l| l.starts_with(&format!("{path} ")))
        .unwrap_or_else(|| panic!("{path} not in MANIFEST:\n{text}"))
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// stat size equals what read returns, for MANIFEST and an outline.
fn sizes_agree(m: &Mount, file: &str) {
    for v in ["MANIFEST".to_string(), format!("{file}.outline")] {
        let out = m.sh_ok(&format!("stat -c %s {v}; wc -c < {v}"));
        let n: Vec<&str> = out.lines().collect();
        assert_eq!(n[0], n[1].trim(), "{v}: stat size vs bytes read");
    }
}

#[test]
fn manifest_is_listed_outlines_resolve_by_name_only() {
    let m = Mount::new();
    assert_eq!(
        m.sh_ok("ls"),
        "MANIFEST\nfindings.md\nplan.md\nstate.json\n"
    );
    assert!(m.path("plan.md.outline").exists());
    assert_eq!(m.sh_ok("find . -name '*.outline' | wc -l").trim(), "0");
    assert_eq!(m.sh_ok("ls -A | grep -c outline || true").trim(), "0");
    let m2 = Mount::with_args(&["--list-views"]);
    assert_eq!(
        m2.sh_ok("ls"),
        "MANIFEST\nfindings.md\nfindings.md.outline\nplan.md\nplan.md.outline\nstate.json\nstate.json.outline\n"
    );
    let text = read(m.path("MANIFEST"));
    assert!(text.starts_with("MANIFEST as of "), "{text}");
    assert!(text.contains("not listed: <file>.outline"), "{text}");
}

#[test]
fn views_follow_every_kind_of_change() {
    let m = Mount::new();
    // An outline looked up before its file exists appears with the file. (The text is
    // long enough for an outline: an outline is never larger than its file.)
    assert!(!m.path("f.md.outline").exists());
    let words = "w=$(printf 'word %.0s' $(seq 40)); ";
    m.sh_ok(&format!("{words} printf '# A\\n%s\\n' \"$w\" > f.md"));
    assert_eq!(manifest_row(&m, "f.md")[1], "205");
    assert!(read(m.path("f.md.outline")).contains("1-2 "));
    sizes_agree(&m, "f.md");
    // append
    m.sh_ok(&format!("{words} printf '## B\\n%s\\n' \"$w\" >> f.md"));
    assert_eq!(manifest_row(&m, "f.md")[1], "411");
    assert!(
        read(m.path("f.md.outline")).contains("3-4 "),
        "{}",
        read(m.path("f.md.outline"))
    );
    sizes_agree(&m, "f.md");
    // truncate: too small for an outline, the file is its own
    m.sh_ok("truncate -s 4 f.md");
    assert_eq!(manifest_row(&m, "f.md")[1], "4");
    assert_eq!(read(m.path("f.md.outline")), "# A\n");
    sizes_agree(&m, "f.md");
    // rename
    m.sh_ok(&format!(
        "{words} printf '%s\\n' \"$w\" >> f.md && mv f.md g.md"
    ));
    let listed = |name: &str| {
        read(m.path("MANIFEST"))
            .lines()
            .any(|l| l.starts_with(&format!("{name} ")))
    };
    assert!(!listed("f.md"));
    assert_eq!(manifest_row(&m, "g.md")[1], "205");
    assert!(!m.path("f.md.outline").exists());
    assert!(read(m.path("g.md.outline")).starts_with("g.md: markdown"));
    sizes_agree(&m, "g.md");
    // rename over an existing file
    m.sh_ok("printf '# New\\n' > n.md && mv n.md g.md");
    assert_eq!(manifest_row(&m, "g.md")[1], "6");
    assert!(read(m.path("g.md.outline")).contains("# New"));
    sizes_agree(&m, "g.md");
    // unlink
    m.sh_ok("rm g.md");
    assert!(!listed("g.md"));
    assert!(read(m.path("MANIFEST")).contains(": .archive/g.md"));
    assert!(!m.path("g.md.outline").exists());
    // the writer is named
    let out = std::process::Command::new("bash")
        .args(["-c", "echo x > t.txt"])
        .current_dir(&m.mnt)
        .env("SCRATCHFS_WRITER", "tool7")
        .status()
        .unwrap();
    assert!(out.success());
    assert_eq!(manifest_row(&m, "t.txt")[4], "tool7");
}

#[test]
fn reading_manifest_through_1000_commits_never_hangs_or_tears() {
    let m = Mount::new();
    // The reader runs until the writer is done; a failed read (exit 3) or a read that is
    // not one whole MANIFEST (`bad`) fails it, and its exit status is checked below.
    let reader = m.sh(
        "( n=0; bad=0; end=$((SECONDS+120)); while [ ! -e stop.flag ] && [ $SECONDS -lt $end ]; do \
           t=$(cat MANIFEST) || { echo \"read $n failed\"; exit 3; }; \
           case \"$t\" in 'MANIFEST as of '*'not listed: <file>.outline'*) ;; *) bad=$((bad+1));; esac; \
           n=$((n+1)); done; \
           echo \"reads=$n bad=$bad\"; [ $bad -eq 0 ] && [ $n -gt 0 ] ) & \
         pid=$!; \
         python3 -c '
import os
for i in range(1000):
    with open(\"w%d\" % (i % 20), \"a\") as f: f.write(\"x\" * (i % 7 + 1))
'; touch stop.flag; wait $pid; echo \"reader exit $?\"",
    );
    let out = String::from_utf8_lossy(&reader.stdout);
    assert!(
        reader.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&reader.stderr)
    );
    assert!(out.contains(" bad=0\n"), "torn MANIFEST reads: {out}");
    assert!(out.ends_with("reader exit 0\n"), "the reader failed: {out}");
    // One version per append; the first to each file creates it.
    let count = m.sql("SELECT COUNT(*) FROM versions WHERE path LIKE 'w%'");
    assert_eq!(count, "1000");
    // Whole reads only: every read above parsed; the final one adds up.
    let text = read(m.path("MANIFEST"));
    let total: u64 = text
        .lines()
        .filter(|l| l.starts_with('w') && l[1..].starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| {
            l.split_whitespace()
                .nth(1)
                .unwrap()
                .replace(',', "")
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(total, (0..1000u64).map(|i| i % 7 + 1).sum::<u64>());
}

#[test]
fn manifest_reports_torn_reads_as_failures() {
    // The loop above must be able to fail: a truncated MANIFEST does not match.
    let m = Mount::new();
    let out = m.sh("t=$(head -c 40 MANIFEST); case \"$t\" in 'MANIFEST as of '*'not listed: <file>.outline'*) echo whole;; *) echo torn;; esac");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "torn");
}

#[test]
fn markdown_outline_ranges_print_exact_sections_with_sed() {
    let m = Mount::new();
    m.sh_ok(
        "cat > notes.md <<'EOF'
---
title: not a heading
---
Intro
=====
text of the introduction, long enough for the outline to be smaller than the file
```
# not a heading
```
## Part one
alpha: what the first part says, at some length so that the file is worth outlining
### Detail
beta: the detail of the first part, with enough words to make its section count
## Part two
gamma: the second part, closing the notes with a last line of reasonable length
EOF",
    );
    let o = read(m.path("notes.md.outline"));
    let rows: Vec<&str> = o.lines().skip(2).collect();
    assert_eq!(rows.len(), 4, "{o}");
    for r in rows {
        let f: Vec<&str> = r.split_whitespace().collect();
        let (a, b) = f[0].split_once('-').unwrap();
        let section = m.sh_ok(&format!("sed -n {a},{b}p notes.md"));
        assert_eq!(section.len().to_string(), f[1], "{r}");
        let title = f[3..].join(" ");
        assert!(
            section.starts_with(&title) || section.starts_with("Intro"),
            "{r}: {section}"
        );
    }
    assert!(
        o.contains("  ## Part one") && o.contains("    ### Detail"),
        "{o}"
    );
    assert!(!o.contains("not a heading"), "{o}");
}

#[test]
fn provenance_xattrs_are_readable_and_not_writable() {
    let m = Mount::new();
    let status = std::process::Command::new("bash")
        .args(["-c", "printf data > f"])
        .current_dir(&m.mnt)
        .env("SCRATCHFS_WRITER", "get_order")
        .env("SCRATCHFS_STEP", "4")
        .status()
        .unwrap();
    assert!(status.success());
    let out = m.sh_ok("getfattr -d --absolute-names f");
    assert!(out.contains("user.scratchfs.version=\"1\""), "{out}");
    assert!(out.contains("user.scratchfs.writer=\"get_order\""), "{out}");
    assert!(out.contains("user.scratchfs.step=\"4\""), "{out}");
    assert!(
        out.contains(&format!(
            "user.scratchfs.blake3=\"{}\"",
            blake3::hash(b"data").to_hex()
        )),
        "{out}"
    );
    assert!(out.contains("user.scratchfs.committed=\"20"), "{out}");
    let e = m.sh("setfattr -n user.scratchfs.writer -v me f");
    assert!(String::from_utf8_lossy(&e.stderr).contains("Operation not supported"));
    let e = m.sh("getfattr -n user.other f");
    assert!(String::from_utf8_lossy(&e.stderr).contains("No such attribute"));
    // cp -a both ways still works.
    m.sh_ok(&format!(
        "cp -a f {0}/out && cp -a {0}/out back",
        m.dir.path().display()
    ));
    assert_eq!(read(m.path("back")), "data");
}

#[test]
fn views_are_read_only_and_their_names_reserved() {
    let m = Mount::new();
    for (cmd, err) in [
        ("echo x > MANIFEST", "Permission denied"),
        ("echo x >> plan.md.outline", "Permission denied"),
        ("rm MANIFEST", "Permission denied"),
        ("mv MANIFEST m2", "Permission denied"),
        ("touch new.outline", "Permission denied"),
        ("mv plan.md p.outline", "Permission denied"),
        ("mkdir .history", "File exists"),
        ("mkdir .archive", "File exists"),
        ("truncate -s 0 MANIFEST", "Permission denied"),
        ("chmod 666 MANIFEST", "Permission denied"),
    ] {
        let e = m.sh(cmd);
        assert!(!e.status.success(), "{cmd} succeeded");
        let stderr = String::from_utf8_lossy(&e.stderr);
        assert!(stderr.contains(err), "{cmd}: {stderr}");
    }
    assert_eq!(m.sh_ok("stat -c %a MANIFEST plan.md.outline"), "444\n444\n");
    assert!(m.path("plan.md").exists());
    // Below the root no view lives at these names: they are ordinary files and
    // directories, listed in MANIFEST and versioned; `*.outline` stays reserved.
    m.sh_ok("mkdir -p d/.history && echo mine > d/MANIFEST && echo x > d/.history/h");
    assert_eq!(read(m.path("d/MANIFEST")), "mine\n");
    assert_eq!(read(m.path(".history/d/MANIFEST/1")), "mine\n");
    let manifest = read(m.path("MANIFEST"));
    assert!(
        manifest.contains("d/MANIFEST") && manifest.contains("d/.history/h"),
        "{manifest}"
    );
    let e = m.sh("touch d/x.outline");
    assert!(String::from_utf8_lossy(&e.stderr).contains("Permission denied"));
}

#[test]
fn manifest_stays_under_600_tokens_for_12_files() {
    let m = Mount::new();
    m.sh_ok(
        "mkdir -p notes && for i in 1 2 3 4 5; do echo note $i > notes/n$i.md; done; \
         echo '{\"ticket_id\":\"T1\"}' > state.json; printf '# Plan\\n' > plan.md; \
         echo finding >> findings.md; echo a > a.txt; echo b > b.txt; echo c > c.log; echo d > data.jsonl",
    );
    let text = read(m.path("MANIFEST"));
    assert!(
        text.lines().filter(|l| l.contains("  ")).count() >= 12,
        "{text}"
    );
    assert!(text.len() / 4 <= 600, "{} tokens:\n{text}", text.len() / 4);
}

/// Issue 4 item 7: with the refund scenario's files and 50 KB of findings, MANIFEST, the
/// outline of state.json and one section of plan.md cost at most 1/20 of the tokens of
/// all the files together.
#[test]
fn context_economy_manifest_outline_and_one_section() {
    let m = Mount::new();
    let plan = "# Plan: refund for ticket T-881
## Goal
Decide whether the customer was double-charged for order 1042 and refund the difference.
## Steps
1. Read the ticket (trigger) and the order (get_order).
2. Compare the charges with the order total.
3. Ask compute_credit for the credit; wait for the human approval.
## Risks
- Refunding twice. Check approval before issuing.
- Currency rounding: amounts are integer cents.
## Status
Waiting for compute_credit.
";
    std::fs::write(m.path("plan.md"), plan).unwrap();
    std::fs::write(
        m.path("state.json"),
        r#"{"ticket_id":"T-881","order_id":"1042","order_total_cents":18000,"credit_cents":18000,"approval":{"by":"human","at":"2026-11-30T18:00:00Z"}}"#,
    )
    .unwrap();
    let mut findings = String::new();
    let mut i = 0;
    while findings.len() < 50_000 {
        findings.push_str(&format!(
            "- finding {i}: charge {i} of order 1042 checked against the ledger, no anomaly.\n"
        ));
        i += 1;
    }
    std::fs::write(m.path("findings.md"), &findings).unwrap();
    let total = plan.len()
        + findings.len()
        + std::fs::metadata(m.path("state.json")).unwrap().len() as usize;
    let outline = read(m.path("plan.md.outline"));
    let steps = outline
        .lines()
        .find(|l| l.ends_with("## Steps"))
        .expect("Steps section");
    let range = steps.split_whitespace().next().unwrap().replace('-', ",");
    let section = m.sh_ok(&format!("sed -n {range}p plan.md"));
    assert!(
        section.starts_with("## Steps") && section.contains("compute_credit"),
        "{section}"
    );
    let read_bytes =
        read(m.path("MANIFEST")).len() + read(m.path("state.json.outline")).len() + section.len();
    assert!(
        read_bytes.div_ceil(4) * 20 <= total.div_ceil(4),
        "read {read_bytes} bytes of {total}: more than 1/20"
    );
}

/// Each top-level key of a JSON file keeps its own provenance: the version that last
/// changed its value; reformatting or reordering changes nothing.
#[test]
fn json_outline_shows_per_key_provenance() {
    let m = Mount::new();
    let run = |env: &[(&str, &str)], script: &str| {
        let st = std::process::Command::new("bash")
            .args(["-c", script])
            .current_dir(&m.mnt)
            .envs(env.iter().copied())
            .status()
            .unwrap();
        assert!(st.success(), "{script}");
    };
    // A long note keeps the file larger than its outline.
    run(
        &[("SCRATCHFS_WRITER", "trigger"), ("SCRATCHFS_STEP", "1")],
        &format!(
            r#"echo '{{"ticket_id": "T1", "notes": "{}"}}' > state.json"#,
            "n".repeat(1000)
        ),
    );
    run(
        &[("SCRATCHFS_WRITER", "get_order"), ("SCRATCHFS_STEP", "2")],
        r#"jq '.order_id = "1042" | .order_total_cents = 18000' state.json > t && mv t state.json"#,
    );
    // Reordered and reformatted by another writer: no key changes hands.
    run(
        &[("SCRATCHFS_WRITER", "formatter")],
        r#"jq -S . state.json > t && mv t state.json"#,
    );
    let o = read(m.path("state.json.outline"));
    // The provenance line (`by WRITER, vN, step S, TIME:`) of the group a key is in.
    let prov = |key: &str| -> String {
        let mut label = "";
        for l in o.lines() {
            if l.starts_with("by ") {
                label = l;
            } else if l.starts_with(&format!("  {key} ")) {
                return label.to_string();
            }
        }
        panic!("{key} missing:\n{o}")
    };
    assert!(prov("ticket_id").starts_with("by trigger, v"), "{o}");
    assert!(prov("ticket_id").contains(", step 1, "), "{o}");
    assert!(prov("order_id").starts_with("by get_order, v"), "{o}");
    assert!(prov("order_id").contains(", step 2, "), "{o}");
    assert_eq!(prov("order_total_cents"), prov("order_id"), "{o}");
    assert!(o.contains("  order_id = \"1042\"\n"), "{o}");
    assert!(o.contains("  notes (string, 1002 bytes)\n"), "{o}");
    assert!(o.lines().next().unwrap().ends_with(" by formatter"), "{o}");
    // A removed key is gone from the table too.
    run(
        &[],
        r#"jq 'del(.order_id)' state.json > t && mv t state.json"#,
    );
    assert_eq!(
        m.sql("SELECT key FROM fields ORDER BY key"),
        "notes\norder_total_cents\nticket_id"
    );
}

/// Issue 4 item 1: with the SPEC example rules and 12 files, MANIFEST stays under 600
/// estimated tokens and says who may write what.
#[test]
fn manifest_with_the_spec_example_rules_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.json");
    // The SPEC §5 example, plus editor swap files marked ephemeral.
    let mut example: serde_json::Value =
        serde_json::from_str(include_str!("../examples/spec-rules.json")).unwrap();
    example["ephemeral"] = serde_json::json!(["*.swp", "*~"]);
    std::fs::write(&rules, example.to_string()).unwrap();
    let m = Mount::with_args(&["--rules", rules.to_str().unwrap()]);
    m.sh_ok(
        "mkdir -p notes && for i in 1 2 3 4 5 6; do echo note $i > notes/n$i.md; done; \
         echo a > a.txt; echo b > b.txt; echo d > data.jsonl; echo swap > .plan.md.swp",
    );
    // Every file read by a writer with a long name (the longest `read` cells), one
    // written again since (`unread since v2`), and a stale line (issue 13).
    m.sh_ok(
        "SCRATCHFS_WRITER=compute_credit SCRATCHFS_STEP=3 bash -c \
           'for f in notes/* a.txt b.txt data.jsonl plan.md findings.md state.json; do cat $f > /dev/null; done'; \
         SCRATCHFS_STEP=1 bash -c 'echo x > notes/n1.md'; SCRATCHFS_STEP=60 cat a.txt > /dev/null",
    );
    let text = read(m.path("MANIFEST"));
    assert!(text.contains("by compute_credit"), "{text}");
    assert!(text.contains("unread since v2"), "{text}");
    assert!(
        text.contains("stale (unchanged for 10+ steps, now step 60)"),
        "{text}"
    );
    let files = text
        .lines()
        .filter(|l| l.contains("  ") && !l.starts_with(' ') && !l.starts_with("path"))
        .count();
    assert!(files >= 12, "{files} file lines:\n{text}");
    assert!(
        text.len().div_ceil(4) <= 600,
        "{} tokens:\n{text}",
        text.len().div_ceil(4)
    );
    assert!(text.contains("findings.md: agent, append-only"), "{text}");
    assert!(text.contains("order_total_cents by get_order"), "{text}");
    assert!(
        !text.contains(".plan.md.swp"),
        "ephemeral files stay out:\n{text}"
    );
}

/// A name holding a newline and text shaped like another row is one row, quoted as git
/// quotes paths (docs/views.md); so is its outline's header.
#[test]
fn a_file_name_cannot_forge_manifest_rows() {
    let m = Mount::new();
    let evil = "a\nfake.md    999  9  1  root  0s";
    let hello = "hello ".repeat(40) + "\n";
    std::fs::write(m.path(evil), &hello).unwrap();
    let text = read(m.path("MANIFEST"));
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("fake.md")).collect();
    assert_eq!(rows.len(), 1, "{text}");
    let rest = rows[0]
        .strip_prefix(r#""a\nfake.md    999  9  1  root  0s""#)
        .unwrap_or_else(|| panic!("not quoted:\n{text}"));
    let fields: Vec<&str> = rest.split_whitespace().collect();
    assert_eq!(fields[..2], ["241", "61"], "{text}");
    assert!(!text.lines().any(|l| l.starts_with("fake.md")), "{text}");
    let outline = read(m.path(&format!("{evil}.outline")));
    assert!(
        outline.starts_with(r#""a\nfake.md    999  9  1  root  0s": text, 1 line, 241 bytes"#),
        "{outline}"
    );
    assert_eq!(outline.lines().count(), 2, "{outline}");
    // Deleted, it is one `restorable:` row, with the path that brings it back.
    std::fs::remove_file(m.path(evil)).unwrap();
    let text = read(m.path("MANIFEST"));
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("fake.md")).collect();
    assert_eq!(
        rows,
        [
            r#"  "a\nfake.md    999  9  1  root  0s" deleted by anonymous 0s ago (241 B): ".archive/a\nfake.md    999  9  1  root  0s""#
        ],
        "{text}"
    );
}

/// What a file holds is for those who may read it, through its views too: an outline, a
/// version under `.history` and an archived copy take the owner and read bits of the file
/// (of the file as it was when deleted), and `.history/<dir>/` those of the directory, so
/// that another uid on an `--allow-other` mount reads no more there than on the file.
#[test]
fn views_of_a_file_are_as_readable_as_the_file() {
    let m = Mount::with_args(&["--allow-other"]);
    m.sh_ok(
        "umask 022
         echo secret one > s.md && echo '# secret two' > s.md && chmod 600 s.md
         mkdir -p priv/sub && echo inside > priv/sub/f.md && chmod 700 priv
         echo gone > g.md && chmod 600 g.md && rm g.md
         mkdir open && chmod 777 open",
    );
    let as_user = |uid: u32, script: &str| {
        m.sh(&format!(
            "setpriv --reuid {uid} --regid {uid} --clear-groups bash -c '{}'",
            script.replace('\'', r"'\''")
        ))
    };
    let denied = |uid: u32, script: &str| {
        let o = as_user(uid, script);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            !o.status.success() && err.contains("Permission denied"),
            "uid {uid} ran `{script}`: {} stdout {:?} stderr {err:?}",
            o.status,
            String::from_utf8_lossy(&o.stdout)
        );
    };
    let allowed = |uid: u32, script: &str| {
        let o = as_user(uid, script);
        assert!(
            o.status.success(),
            "uid {uid} could not run `{script}`: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for view in [
        "s.md.outline",
        ".history/s.md/000001",
        ".history/s.md/000002",
        ".archive/g.md",
        ".history/priv/sub/f.md/000001",
    ] {
        denied(1000, &format!("cat {view}"));
    }
    denied(1000, "ls .history/priv");
    // MANIFEST lists every file, for every reader.
    assert!(allowed(1000, "cat MANIFEST").contains("s.md"));
    let st =
        m.sh_ok("stat -c '%a %u' .history/s.md/000001 s.md.outline .archive/g.md .history/priv");
    assert_eq!(st, "400 0\n400 0\n400 0\n500 0\n", "modes of the views");
    // A chmod of the file opens its views at once (they are never cached).
    m.sh_ok("chmod 644 s.md && chmod 755 priv");
    assert_eq!(allowed(1000, "cat .history/s.md/000001"), "secret one\n");
    assert!(allowed(1000, "cat s.md.outline").contains("secret two"));
    assert_eq!(
        allowed(1000, "cat .history/priv/sub/f.md/000001"),
        "inside\n"
    );
    // A deleted file's archive is its owner's, as the file was.
    allowed(
        1000,
        "cd open && echo mine > m.md && chmod 600 m.md && rm m.md",
    );
    assert_eq!(allowed(1000, "cat .archive/open/m.md"), "mine\n");
    denied(1001, "cat .archive/open/m.md");
    assert_eq!(m.sh_ok("cat .archive/open/m.md"), "mine\n");
}
