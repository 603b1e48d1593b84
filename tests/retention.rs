//! Issue 36: retention by the rules' `keep` limits, forgotten by the daemon's own pass
//! (docs/rules.md, "Retention and quotas"), on both backends.

mod common;
use common::*;

use std::collections::BTreeSet;

/// Writes `rules` to a file of the mount's directory and remounts with it, the daemon's
/// policy pass running every 0.2 s.
fn remount_with_rules(m: &mut Mount, rules: &str, env: &[(&str, &str)]) {
    restart_with_rules(m, rules, &[]);
    m.unmount();
    let mut env = env.to_vec();
    env.push(("SCRATCHFS_POLICY_INTERVAL", "0.2"));
    m.start_with_env(&env);
}

/// Writes `rules` to a file of the mount's directory and starts the daemon again with
/// `extra` arguments and those rules; returns the file.
fn restart_with_rules(m: &mut Mount, rules: &str, extra: &[&str]) -> std::path::PathBuf {
    let file = m.dir.path().join("rules.json");
    std::fs::write(&file, rules).unwrap();
    m.unmount();
    let mut args = extra.to_vec();
    args.extend(["--rules", file.to_str().unwrap()]);
    m.restart_with(&args);
    file
}

/// Mounts a fresh pad of the agent's (uid 1000) with `rules`.
fn agents_pad_with_rules(rules: &str) -> Mount {
    let mut m = Mount::with_args(&["--owner", "1000:1000"]);
    restart_with_rules(&mut m, rules, &["--owner", "1000:1000"]);
    m
}

/// `setfattr -n NAME -v VALUE` on the root of `m`, as the agent (uid 1000).
fn agent_setfattr(m: &Mount, name: &str, value: &str) -> std::process::Output {
    as_agent()
        .args(["setfattr", "-n", name, "-v", value])
        .arg(&m.mnt)
        .output()
        .unwrap()
}

/// `python3 -c SCRIPT` in the mount of `m`, as the agent (uid 1000).
fn agent_python(m: &Mount, script: &str) -> std::process::Output {
    agent_python_with(m, script, &[], None)
}

/// [`agent_python`] with more arguments (`sys.argv[1:]`, kept in its process's row) and,
/// when given, `SCRATCHFS_WRITER` set to `tag`.
fn agent_python_with(
    m: &Mount,
    script: &str,
    args: &[String],
    tag: Option<&str>,
) -> std::process::Output {
    let mut c = as_agent();
    if let Some(tag) = tag {
        c.env("SCRATCHFS_WRITER", tag);
    }
    c.args(["/usr/bin/python3", "-c", script])
        .args(args)
        .current_dir(&m.mnt)
        .output()
        .unwrap()
}

/// What the pad holds by the store's rows, as the quota counts it (docs/rules.md
/// "Retention and quotas"), `processes` rows included.
fn usage_by_rows(m: &Mount) -> u64 {
    m.sql(
        "SELECT (SELECT COALESCE(SUM(len), 0) FROM extents)
              + (SELECT 512 * COUNT(*) + COALESCE(SUM(LENGTH(path)), 0) FROM versions)
              + 256 * ((SELECT COUNT(*) FROM tree_log) + (SELECT COUNT(*) FROM checkpoints)
                       + (SELECT COUNT(*) FROM events WHERE op = 'rejected'))
              + (SELECT COALESCE(SUM(LENGTH(path) + COALESCE(LENGTH(new_path), 0) + COALESCE(LENGTH(reason), 0)), 0) FROM events)
              + (SELECT 2 * COALESCE(SUM(LENGTH(note)), 0) FROM checkpoints)
              + (SELECT 256 * COUNT(*) + COALESCE(SUM(LENGTH(writer) + LENGTH(exe) + LENGTH(argv)
                        + COALESCE(LENGTH(env_writer), 0) + COALESCE(LENGTH(transport), 0)
                        + COALESCE(LENGTH(client), 0) + COALESCE(LENGTH(client_version), 0)), 0)
                 FROM processes)",
    )
    .parse()
    .unwrap()
}

/// The version numbers of `path` the store holds.
fn kept(m: &Mount, path: &str) -> Vec<i64> {
    m.versions(path).into_iter().map(|(n, _, _)| n).collect()
}

const RULES: &str = r#"{"paths": [
  {"path": "logs/**", "keep": {"versions": 3}},
  {"path": "**", "keep": {"bytes": 100}}
]}"#;

/// The daemon forgets, by itself, what each rule's limits say (the newest 3 versions of
/// each log, 100 bytes of history of the rest), and keeps what they never forget: a
/// version a checkpoint holds, a version a live file was read from; every run is an event
/// MANIFEST shows, `restore` of a forgotten version names the rule, `.history` lists what
/// is kept, fsck is clean, and the database gives the space back.
#[test]
fn the_daemon_forgets_what_the_limits_say_and_keeps_what_they_protect() {
    let mut m = Mount::new();
    m.sh_ok(
        "mkdir -p logs
         for i in $(seq 1 10); do echo \"line $i\" > logs/a.txt; echo \"n $i\" >> notes.md; done
         echo c1 > logs/c.txt; echo c2 > logs/c.txt",
    );
    let (code, out, err) = cli(&m, &["checkpoint", "cp1"]);
    assert_eq!(code, 0, "{out} {err}");
    m.sh_ok(
        "for i in $(seq 3 8); do echo c$i > logs/c.txt; done
         echo d1 > logs/d.txt
         python3 -c \"open('out.md', 'w').write(open('logs/d.txt').read())\"
         for i in $(seq 2 8); do echo d$i > logs/d.txt; done
         for i in $(seq 1 20); do head -c 262144 /dev/urandom > logs/big.bin; done",
    );
    m.unmount();
    let before = if on_postgres() {
        0
    } else {
        std::fs::metadata(&m.db).unwrap().len()
    };
    m.start();
    remount_with_rules(&mut m, RULES, &[]);
    wait_for("the policy pass to forget big.bin's old versions", || {
        kept(&m, "logs/big.bin") == [18, 19, 20]
    });
    wait_for("the policy pass to forget the rest", || {
        kept(&m, "logs/a.txt") == [8, 9, 10] && kept(&m, "notes.md") == [7, 8, 9, 10]
    });
    // The checkpoint's version of c.txt (2) and the version out.md was read from (d 1)
    // stay; the newest 3 of each do.
    assert_eq!(kept(&m, "logs/c.txt"), [2, 6, 7, 8]);
    assert_eq!(kept(&m, "logs/d.txt"), [1, 6, 7, 8]);
    let listed: BTreeSet<String> = std::fs::read_dir(m.path(".history/logs/a.txt"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        listed,
        ["000008", "000009", "000010"].map(String::from).into()
    );
    assert_eq!(read(m.path("logs/a.txt")), "line 10\n");
    assert_eq!(read(m.path(".checkpoints/cp1/logs/c.txt")), "c2\n");
    let manifest = read(m.path("MANIFEST"));
    assert!(
        manifest.contains("history erased")
            && manifest.contains("scratchfs: policy paths[0] logs/** (versions 3): forgot"),
        "{manifest}"
    );
    let (code, _, err) = cli(&m, &["restore", "logs/a.txt@2"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("logs/a.txt@2: forgotten by policy paths[0] logs/** (versions 3) at "),
        "{err}"
    );
    let events = m.sql("SELECT COUNT(*) FROM events WHERE op = 'policy' AND writer = 'scratchfs'");
    assert!(events.parse::<u32>().unwrap() >= 2, "{events}");
    let (code, out, err) = cli(&m, &["gc", "--policy", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("would forget 0 versions"), "{out}");
    let (code, out, err) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "fsck: {out} {err}");
    if on_postgres() {
        // PostgreSQL's equivalent: the rows and blobs are gone and VACUUM made their
        // space reusable; the same bytes written again take no more room than they left.
        assert_eq!(
            m.sql("SELECT COUNT(*) FROM versions WHERE path = 'logs/big.bin'"),
            "3"
        );
        let size = || -> i64 {
            m.sql("SELECT pg_total_relation_size('blobs')")
                .parse()
                .unwrap()
        };
        let was = size();
        m.sh_ok("for i in $(seq 1 10); do head -c 262144 /dev/urandom > logs/big.bin; done");
        wait_for("the pass to forget the new versions", || {
            kept(&m, "logs/big.bin") == [28, 29, 30]
        });
        assert!(
            size() < was + 2 * 262_144 * 10 / 2,
            "blobs grew from {was} to {} bytes: the space forgotten was not reused",
            size()
        );
    } else {
        // SQLite: the file itself shrinks (incremental vacuum), not only its free list.
        m.unmount();
        let after = std::fs::metadata(&m.db).unwrap().len();
        assert!(
            after + 17 * 262_144 / 2 < before,
            "the database file went from {before} to {after} bytes after forgetting 17 x 256 KiB"
        );
        m.start();
    }
}

/// A kill -9 in the middle of a policy pass (inside a batch's transaction) loses nothing
/// the policy keeps, leaves fsck clean, and the next pass finishes the work.
#[test]
fn a_kill_in_the_middle_of_a_policy_pass_loses_nothing_kept() {
    let mut m = Mount::new();
    m.sh_ok("for f in a b c d; do for i in $(seq 1 400); do echo $f$i > $f; done; done");
    let newest = |m: &Mount| {
        m.sql(
            "SELECT path, version, blake3 FROM versions v WHERE version > (SELECT MAX(version) FROM versions w WHERE w.file_id = v.file_id) - 2 AND path IN ('a','b','c','d') ORDER BY path, version",
        )
    };
    let want = newest(&m);
    assert_eq!(want.lines().count(), 8, "{want}");
    let flag = m.dir.path().join("failpoint-policy");
    let flag_s = flag.to_string_lossy().into_owned();
    remount_with_rules(
        &mut m,
        r#"{"paths": [{"path": "**", "keep": {"versions": 2}}]}"#,
        &[
            ("SCRATCHFS_FAILPOINT", "policy"),
            ("SCRATCHFS_FAILPOINT_FLAG", &flag_s),
        ],
    );
    wait_for("the pass to stop inside a batch", || flag.exists());
    m.kill9();
    m.start();
    assert_eq!(newest(&m), want, "a version the policy keeps was lost");
    for f in ["a", "b", "c", "d"] {
        assert_eq!(read(m.path(f)), format!("{f}400\n"));
    }
    let (code, out, err) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "fsck after the kill: {out} {err}");
    // The killed batch was rolled back whole: no event names versions still there.
    let (code, out, err) = cli(&m, &["gc", "--policy"]);
    assert_eq!(code, 0, "{out} {err}");
    for f in ["a", "b", "c", "d"] {
        assert_eq!(kept(&m, f), [399, 400], "{f}");
    }
    let (code, out, err) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "fsck after the pass: {out} {err}");
}

/// The agent (uid 1000) cannot run the policy (the gate's refusal of erasing history,
/// recorded) nor read what it would forget (the database is not its to read).
#[test]
fn the_agent_cannot_run_the_policy_nor_list_it() {
    let m = agents_pad_with_rules(r#"{"paths": [{"path": "**", "keep": {"versions": 1}}]}"#);
    m.sh_ok("for i in 1 2 3; do echo $i > f; done");
    let value = r#"{"keep_last":null,"before_ns":null,"dry_run":false,"policy":true}"#;
    let o = as_agent()
        .args(["setfattr", "-n", "user.scratchfs.gc", "-v", value])
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(!o.status.success(), "the agent ran the policy");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Operation not permitted"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(kept(&m, "f"), [1, 2, 3]);
    let refused = m.sql("SELECT COUNT(*) FROM events WHERE op = 'rejected' AND reason LIKE '%gc%'");
    assert_eq!(refused, "1");
    if !on_postgres() {
        let o = as_agent()
            .args([BIN, "gc", "--policy", "--dry-run", "--db"])
            .arg(&m.db)
            .output()
            .unwrap();
        assert!(
            !o.status.success(),
            "the agent listed the policy: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}

/// The pad's quota (issue 36 item 3): MANIFEST's header says the usage against it; a
/// write by the agent (uid 1000) past `bytes` fails with EDQUOT, recorded with its size
/// and digest and without its content; a create past `files` fails the same way;
/// deleting and writing within the quota still work; root (the harness) is not bound by
/// it, so the agent cannot silence it by filling the pad.
#[test]
fn a_write_past_the_quota_fails_with_edquot_and_keeps_no_content() {
    let m = agents_pad_with_rules(
        r#"{"paths": [{"path": "**"}], "quota": {"bytes": 20480, "files": 6}}"#,
    );
    let agent = |script: &str| {
        as_agent()
            .args(["sh", "-c"])
            .arg(script)
            .current_dir(&m.mnt)
            .output()
            .unwrap()
    };
    let ok = |o: std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    ok(agent("head -c 8000 /dev/urandom > a.bin"));
    // 8,003 bytes of content, 4 versions' records of 512 bytes and 5 namespace changes'
    // of 256 (the root's first row and four creates): 11,331 bytes; and the rows of the
    // processes that made them (the daemon's seeds, the agent's `sh` and `head`: 12 KB on
    // SQLite, 13 on PostgreSQL: the daemon's own row keeps its arguments, the URL among them).
    let header = read(m.path("MANIFEST")).lines().next().unwrap().to_string();
    assert!(
        ["12", "13"].iter().any(|kb| header.contains(&format!(
            "; pad {kb} KB of 20 KB, 4 versions kept, 0 forgotten by policy, 4 of 6 files"
        ))),
        "{header}"
    );
    let script = r#"
import errno, os
try:
    with open("b.bin", "wb") as f:
        f.write(os.urandom(15000))
    print("written")
except OSError as e:
    print("refused", e.errno == errno.EDQUOT)
print(os.path.exists("b.bin"))
"#;
    let out = ok(agent(&format!(
        "python3 -c '{}'",
        script.replace('\'', "'\\''")
    )));
    assert_eq!(out.trim(), "refused True\nFalse", "{out}");
    // Its size and digest in the record's columns, not in the reason the agent reads (a
    // digest of content with bytes the agent cannot read lets it guess them).
    let refusal = m.sql(
        "SELECT errno, stream IS NULL, size, LENGTH(blake3), reason FROM events WHERE op = 'rejected' AND path = 'b.bin'",
    );
    assert!(
        refusal.starts_with("122|1|15000|64|")
            && refusal.contains("up to 15000 bytes and its record would pass it")
            && !refusal.contains("blake3"),
        "{refusal}"
    );
    ok(agent("touch c d"));
    let o = agent("touch e");
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("quota"),
        "{o:?}"
    );
    // Deleting and rewriting within the quota still work.
    ok(agent("rm c && touch e && echo small > d"));
    let header = read(m.path("MANIFEST")).lines().next().unwrap().to_string();
    assert!(header.contains(", 6 of 6 files"), "{header}");
    // Root, the harness, writes past it.
    m.sh_ok("head -c 30000 /dev/urandom > harness.bin && touch harness2");
    let header = read(m.path("MANIFEST")).lines().next().unwrap().to_string();
    assert!(header.contains(", 8 of 6 files"), "{header}");
    // MCP `list` carries the same figures, structured.
    let r = mcp_session(
        "quota-client",
        &["stdio", BIN, "mcp", "--db", m.db.to_str().unwrap()],
        serde_json::json!([{ "tool": "list", "args": {} }]),
    );
    let usage = &r["results"][0]["structured"]["usage"];
    assert_eq!(usage["quota_bytes"], 20480, "{r}");
    assert_eq!(usage["quota_files"], 6, "{r}");
    assert_eq!(usage["files"], 8, "{r}");
    assert!(usage["bytes"].as_u64().unwrap() > 38_000, "{r}");
}

/// `scratchfs du` and `gc --policy --dry-run` (issue 36 item 4) say what each file
/// holds and what the policy would forget next, and change nothing; `gc --policy` then
/// forgets exactly that.
#[test]
fn du_and_a_dry_run_say_what_the_policy_would_forget_and_change_nothing() {
    let mut m = Mount::new();
    // The daemon's own pass waits a minute: only the commands below run the policy.
    restart_with_rules(&mut m, RULES, &[]);
    m.sh_ok(
        "mkdir -p logs; for i in $(seq 1 5); do echo \"line $i\" > logs/a.txt; done
         for i in $(seq 1 30); do echo \"note $i\" >> notes.md; done",
    );
    let (code, out, err) = cli(&m, &["du", "logs", "--json"]);
    assert_eq!(code, 0, "{err}");
    let du: serde_json::Value = serde_json::from_str(&out).unwrap();
    let a = &du["files"][0];
    assert_eq!(a["path"], "logs/a.txt");
    assert_eq!(a["versions"], 5);
    assert_eq!(a["live_bytes"], 7);
    assert_eq!(a["history_bytes"], 28);
    assert_eq!(a["policy_next"]["versions"], 2);
    let (code, out, err) = cli(&m, &["gc", "--policy", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    let listed: Vec<&str> = out
        .lines()
        .filter(|l| l.contains('@'))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    // notes.md: 30 appends; 100 bytes of history beyond the live version keep 7 + ... :
    // the sizes before the live one (8 x 29 + ...) are summed newest first.
    let notes_sizes: Vec<u64> = m.versions("notes.md").iter().map(|v| v.2).collect();
    let mut kept_bytes = 0;
    let mut notes_kept = 1;
    for s in notes_sizes.iter().rev().skip(1) {
        if kept_bytes + s > 100 {
            break;
        }
        kept_bytes += s;
        notes_kept += 1;
    }
    let mut want: Vec<String> = vec!["logs/a.txt@1".into(), "logs/a.txt@2".into()];
    want.extend((1..=(30 - notes_kept)).map(|n| format!("notes.md@{n}")));
    assert_eq!(listed, want, "{out}");
    assert!(
        out.contains(&format!("would forget {} versions", want.len())),
        "{out}"
    );
    assert_eq!(
        kept(&m, "logs/a.txt"),
        [1, 2, 3, 4, 5],
        "the dry run changed something"
    );
    let (code, out, err) = cli(&m, &["gc", "--policy"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("forgot {} versions", want.len())),
        "{out}"
    );
    assert_eq!(kept(&m, "logs/a.txt"), [3, 4, 5]);
    let (_, out, _) = cli(&m, &["du"]);
    assert!(
        out.contains("policy would forget next: 0 versions"),
        "{out}"
    );
    assert!(
        out.contains(&format!("{} forgotten by policy", want.len())),
        "{out}"
    );
}

/// The end of a task (issue 36 item 5): `promote` copies a file and one JSON key into a
/// long-lived scratchpad (mounted, then not) as versions (op `promote`) whose origin names
/// the source pad, version and writer, judged by that pad's rules (a read-only path is
/// refused there, on record), recorded in both; `retire --export` writes the pad with
/// its history to a tar file and no mount opens it for writing again.
#[test]
fn promote_keeps_the_origin_and_retire_makes_the_pad_read_only() {
    let mut src = Mount::new();
    src.sh_ok(
        "echo 'keep me' > notes.md
         SCRATCHFS_WRITER=get_order sh -c 'printf \"{\\\"order_total_cents\\\": 1234, \\\"tmp\\\": 1}\" > state.json'
         echo draft > draft.md",
    );
    let mut long = Mount::new();
    let rules = long.dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{"paths": [{"path": "draft.md", "mode": "read-only"}, {"path": "**"}]}"#,
    )
    .unwrap();
    long.unmount();
    long.restart_with(&["--rules", rules.to_str().unwrap()]);
    long.sh_ok("echo '{\"customer\": \"ada\"}' > state.json");
    let to = long.db.to_str().unwrap().to_string();
    // Into the mounted long-lived pad, through its daemon.
    let (code, out, err) = cli(
        &src,
        &[
            "promote",
            "--to",
            &to,
            "notes.md",
            "state.json:order_total_cents",
        ],
    );
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("notes.md: promoted version 1 by "), "{out}");
    assert_eq!(read(long.path("notes.md")), "keep me\n");
    let state: serde_json::Value = serde_json::from_str(&read(long.path("state.json"))).unwrap();
    assert_eq!(
        state,
        serde_json::json!({"customer": "ada", "order_total_cents": 1234})
    );
    let origins = long.sql(
        "SELECT v.path, v.op, o.path, o.version, o.writer FROM origins o JOIN versions v ON v.id = o.version_id ORDER BY v.id",
    );
    let state_v = src.sql("SELECT MAX(version) FROM versions WHERE path = 'state.json'");
    assert_eq!(
        origins,
        format!(
            "notes.md|promote|notes.md|1|anonymous\nstate.json|promote|state.json|{state_v}|get_order"
        ),
        "{origins}"
    );
    // The key's provenance follows the origin to its writer in the source pad.
    let (code, out, err) = cli(&long, &["why", "state.json:order_total_cents"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("get_order"), "{out}");
    // Judged by the long-lived pad's rules: its draft.md is read-only.
    let (code, _, err) = cli(&src, &["promote", "--to", &to, "draft.md"]);
    assert_eq!(code, 1, "{err}");
    assert!(!long.path("draft.md").exists());
    assert_eq!(
        long.sql("SELECT COUNT(*) FROM events WHERE op = 'rejected' AND path = 'draft.md'"),
        "1"
    );
    // A typo names no file: nothing is made anywhere.
    let (code, _, err) = cli(&src, &["promote", "--to", &to, "nope.md"]);
    assert_eq!(code, 1);
    assert!(err.contains("nope.md: no such file"), "{err}");
    // Into the long-lived pad unmounted, on the command's own store.
    long.unmount();
    src.sh_ok("echo 'second' >> notes.md");
    let (code, out, err) = cli(&src, &["promote", "--to", &to, "notes.md"]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("as version 2"), "{out}");
    long.start();
    assert_eq!(read(long.path("notes.md")), "keep me\nsecond\n");
    // Recorded in the source too.
    let promoted = src.sql("SELECT path, reason FROM events WHERE op = 'promote' ORDER BY id");
    assert_eq!(promoted.lines().count(), 3, "{promoted}");
    assert!(
        promoted.contains(&format!(
            "promoted version {state_v} of state.json:order_total_cents to "
        )),
        "{promoted}"
    );
    // Retire: mounted, refused; unmounted, exported and read-only for good.
    let tar = src.dir.path().join("pad.tar");
    let (code, _, err) = cli(&src, &["retire", "--export", tar.to_str().unwrap()]);
    if !on_postgres() {
        assert_eq!(code, 1, "retired while mounted");
        assert!(err.contains("unmount it first"), "{err}");
    }
    let kept = src.sql("SELECT COUNT(*) FROM versions");
    src.unmount();
    if on_postgres() {
        assert_eq!(code, 0, "{err}");
    } else {
        let (code, out, err) = cli(&src, &["retire", "--export", tar.to_str().unwrap()]);
        assert_eq!(code, 0, "{out} {err}");
        assert!(out.contains("read-only from now on"), "{out}");
    }
    let listing = std::process::Command::new("tar")
        .arg("-tf")
        .arg(&tar)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    for want in [
        "tree/notes.md",
        "tree/state.json",
        "versions.jsonl",
        "log.jsonl",
    ] {
        assert!(
            listing.lines().any(|l| l == want),
            "{want} not in {listing}"
        );
    }
    assert_eq!(
        listing
            .lines()
            .filter(|l| l.starts_with("history/"))
            .count()
            .to_string(),
        kept,
        "{listing}"
    );
    let o = std::process::Command::new(BIN)
        .args([
            "mount",
            src.mnt.to_str().unwrap(),
            "--db",
            src.db.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!o.status.success(), "a retired pad mounted");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("retired"),
        "{o:?}"
    );
    let (code, out, _) = cli(&src, &["log"]);
    assert_eq!(code, 0);
    assert!(out.contains("retire"), "{out}");
    let (code, _, err) = cli(&src, &["retire"]);
    assert_eq!(code, 1);
    assert!(err.contains("retired"), "{err}");
}

/// The agent (uid 1000) cannot promote into a mounted pad through its daemon (the
/// daemon would read the source with its own rights: `EPERM`, recorded), nor promote
/// from or retire a database it cannot open.
#[test]
fn the_agent_cannot_promote_through_a_mount_nor_retire() {
    let mut src = Mount::with_args(&["--owner", "1000:1000"]);
    src.sh_ok("echo secret-plan > notes.md");
    // Nor forge a promotion's record in a pad it may write (root's or the mounting
    // user's only: EPERM, recorded).
    let note = r#"{"path": "notes.md", "reason": "promoted version 1 of notes.md to /srv/long.db as version 9"}"#;
    let o = agent_setfattr(&src, "user.scratchfs.promoted", note);
    assert!(!o.status.success(), "the agent recorded a promotion");
    assert_eq!(
        src.sql("SELECT COUNT(*) FROM events WHERE op = 'promote'"),
        "0"
    );
    // Nor grow the refusal's record by the path it names (60,000 bytes): a record keeps
    // PATH_MAX (4,096) bytes of a path.
    let note = serde_json::json!({"path": "a/".repeat(30_000), "reason": "x"}).to_string();
    let o = agent_setfattr(&src, "user.scratchfs.promoted", &note);
    assert!(!o.status.success(), "the agent recorded a promotion");
    assert_eq!(
        src.sql("SELECT LENGTH(path) FROM events WHERE op = 'rejected' ORDER BY id DESC LIMIT 1"),
        "4096"
    );
    // Nor by the reason, which quotes what it sent (a 60,000-byte rollback point): a
    // record keeps 8,192 bytes of a reason.
    let o = agent_setfattr(&src, "user.scratchfs.rollback", &"x".repeat(60_000));
    assert!(!o.status.success(), "the agent rolled back");
    let longest: u64 = src
        .sql("SELECT MAX(LENGTH(reason)) FROM events WHERE op = 'rejected'")
        .parse()
        .unwrap();
    assert!(longest <= 8192, "a refusal's reason of {longest} bytes");
    let mut long = Mount::with_args(&["--owner", "1000:1000"]);
    let value = serde_json::json!({
        "from": src.db.to_str().unwrap(), "paths": ["notes.md"], "op": "promote",
    })
    .to_string();
    let o = agent_setfattr(&long, "user.scratchfs.adopt", &value);
    assert!(!o.status.success(), "the agent promoted through the daemon");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Operation not permitted"),
        "{o:?}"
    );
    assert!(!long.path("notes.md").exists());
    assert_eq!(
        long.sql("SELECT COUNT(*) FROM events WHERE op = 'rejected' AND errno = 1"),
        "1"
    );
    if !on_postgres() {
        long.unmount();
        src.unmount();
        for args in [
            vec![
                "promote",
                "--db",
                src.db.to_str().unwrap(),
                "--to",
                long.db.to_str().unwrap(),
                "notes.md",
            ],
            vec!["retire", "--db", src.db.to_str().unwrap()],
        ] {
            let o = as_agent().args([BIN]).args(&args).output().unwrap();
            assert!(!o.status.success(), "the agent ran {args:?}");
        }
        src.start();
        long.start();
        assert!(!long.path("notes.md").exists());
        assert_eq!(
            src.sql("SELECT COUNT(*) FROM events WHERE op IN ('retire', 'promote')"),
            "0"
        );
    }
}

/// `promote` across backends (issue 36 item 5): from an SQLite pad to a PostgreSQL one,
/// the origin naming the SQLite file by its canonical path (run in both passes of
/// scripts/test: the SQLite file and the test cluster are there in each).
#[test]
fn promote_crosses_backends_from_sqlite_to_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("task.db");
    let src = Mount::on_db(task.to_str().unwrap());
    src.sh_ok("echo kept > notes.md");
    let url = new_pg_database();
    let _drop = DropPgDatabase(url.clone());
    let long = Mount::on_db(&url);
    let o = std::process::Command::new(BIN)
        .args([
            "promote",
            "--db",
            task.to_str().unwrap(),
            "--to",
            &url,
            "notes.md",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(read(long.path("notes.md")), "kept\n");
    let origin = pg_query(&url, "SELECT source, path, version FROM origins");
    let canonical = std::fs::canonicalize(&task).unwrap();
    assert_eq!(origin, format!("{}|notes.md|1", canonical.display()));
}

/// On PostgreSQL each batch of a policy pass reads what it forgets by key: the pass as a
/// whole reads `versions` and `extents` whole about once (its usage count), never once
/// per batch. (Before: the batch's temporary tables had no statistics, so the planner
/// scanned every extent and compiled each statement with JIT, per batch, and each batch
/// found the live heads by reading every version: 62 versions forgotten a second at
/// 100,000.) Counted from PostgreSQL's own statistics (`seq_tup_read`: rows read by
/// sequential scans) on a pad large enough that reading by key is the planner's choice
/// (20,000 versions; at a few thousand a scan is cheaper, and chosen). Run in both passes
/// of scripts/test.
#[test]
fn a_policy_pass_on_postgresql_reads_each_batch_by_key() {
    let url = new_pg_database();
    let _drop = DropPgDatabase(url.clone());
    // The daemon's own pass not before the test runs one.
    let mut m = Mount::on_db_with_env(&url, &[("SCRATCHFS_POLICY_INTERVAL", "100000")]);
    // 10 versions of each of 100 files to forget, a batch at a time, among 20,000.
    restart_with_rules(
        &mut m,
        r#"{"paths": [{"path": "**", "keep": {"versions": 190}}]}"#,
        &[],
    );
    m.sh_ok("for i in $(seq 1 200); do for f in $(seq 1 100); do echo $i >> f$f; done; done");
    m.unmount();
    let stat = |what: &str| -> i64 {
        let q = format!(
            "SELECT COALESCE(SUM({what}), 0) FROM pg_stat_user_tables WHERE relname IN ('versions', 'extents')"
        );
        pg_query(&url, &q).trim().parse().unwrap()
    };
    // What autovacuum does in its own time.
    pg_query(&url, "ANALYZE versions, extents, files, inputs");
    // The daemon's counts reach the server's statistics as its connections close.
    wait_for("the writes in PostgreSQL's statistics", || {
        stat("n_tup_ins") >= 40_000
    });
    let rows = stat("n_tup_ins");
    let scanned = stat("seq_tup_read");
    let (code, out, err) = cli(&m, &["gc", "--policy"]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("forgot 1000 versions"), "{out}");
    let batches: i64 = out
        .split(" in ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no transactions counted: {out}"));
    assert!(batches >= 4, "the test needs several batches: {out}");
    wait_for("the pass in PostgreSQL's statistics", || {
        stat("n_tup_del") >= 1_000
    });
    let read = stat("seq_tup_read") - scanned;
    assert!(
        read <= rows * 2,
        "the pass read {read} rows of versions and extents by sequential scans in {batches} batches; the tables hold {rows}: batches scanned them"
    );
}

/// Every daemon of a PostgreSQL scratchpad runs the policy pass; two running at once
/// forget each version once and count it once: the policy events' counts add up to the
/// versions forgotten. (Before: the change lock is shared, so two batches chose the same
/// versions, both counted them, and the second's deletes found nothing; a batch now
/// holds the policy's own advisory lock and judges again once it has it.) Run in both
/// passes of scripts/test.
#[test]
fn two_daemons_passes_count_each_forgotten_version_once() {
    let url = new_pg_database();
    let _drop = DropPgDatabase(url.clone());
    let mut first = Mount::on_db_with_env(&url, &[("SCRATCHFS_POLICY_INTERVAL", "100000")]);
    first.sh_ok("for i in $(seq 1 100); do for f in $(seq 1 40); do echo $i >> f$f; done; done");
    let rules = first.dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{"paths": [{"path": "**", "keep": {"versions": 1}}]}"#,
    )
    .unwrap();
    first.unmount();
    let args = ["--rules", rules.to_str().unwrap()];
    let env = [("SCRATCHFS_POLICY_INTERVAL", "0.05")];
    let a = Mount::on_db_env(&url, &args, &env);
    let b = Mount::on_db_env(&url, &args, &env);
    wait_for("the passes to forget all but each file's newest", || {
        pg_query(
            &url,
            "SELECT COUNT(*) FROM (SELECT file_id FROM versions GROUP BY file_id HAVING COUNT(*) > 1) x",
        ) == "0"
    });
    let forgotten: u64 = pg_query(
        &url,
        "SELECT COUNT(*) FROM forgotten f JOIN events e ON e.id = f.event_id WHERE e.op = 'policy'",
    )
    .parse()
    .unwrap();
    assert_eq!(forgotten, 3960);
    let reasons = pg_query(&url, "SELECT reason FROM events WHERE op = 'policy'");
    let counted: u64 = reasons
        .lines()
        .map(|r| {
            r.split("forgot ")
                .nth(1)
                .and_then(|s| s.split(' ').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no count in {r:?}"))
        })
        .sum();
    assert_eq!(
        counted, forgotten,
        "the policy events count {counted} versions forgotten, {forgotten} were:\n{reasons}"
    );
    drop((a, b));
}

/// Commits judged at once cannot each fit the quota alone and pass it together: each
/// holds its bytes against the quota from its verdict until it is counted. (Helper
/// finding, issue 36 attack round: 40 handles of 990,000 bytes each, closed at once by
/// the agent, stored 3,960,000 bytes against a quota of 1,000,000.)
#[test]
fn commits_at_once_cannot_pass_the_quota_together() {
    let m = agents_pad_with_rules(
        r#"{"paths": [{"path": "**"}], "quota": {"bytes": 1000000, "files": 100}}"#,
    );
    let script = r#"
import errno, os, threading
n = 40
fds = [os.open("c%02d.bin" % i, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for i in range(n)]
for fd in fds:
    data = os.urandom(990000)
    assert os.write(fd, data) == len(data)
barrier = threading.Barrier(n)
results = []
def close(fd):
    barrier.wait()
    try:
        os.close(fd)
        results.append("ok")
    except OSError as e:
        results.append("edquot" if e.errno == errno.EDQUOT else "errno %d" % e.errno)
threads = [threading.Thread(target=close, args=(fd,)) for fd in fds]
for t in threads: t.start()
for t in threads: t.join()
print(results.count("ok"), results.count("edquot"), len(results))
"#;
    let o = agent_python(&m, script);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(
        out == "1 39 40" || out == "0 40 40",
        "closes ok, refused with EDQUOT, in all: {out}"
    );
    let kept: u64 = m
        .sql("SELECT COALESCE(SUM(size), 0) FROM versions WHERE path LIKE 'c%.bin'")
        .parse()
        .unwrap();
    assert!(kept <= 1_000_000, "{kept} bytes kept past the quota");
}

/// The quota counts content as written: a file whose content matches a file the agent
/// cannot read counts as much as one that does not, so the usage figures cannot tell
/// the agent whether its guess of that content is right (helper finding: guesses of a
/// PIN in a root file of a 0700 directory, read off MCP `list`'s `usage` after each
/// count, found it). And `quota.files` counts directories: a pad of empty directories
/// grew 24 MB past a full quota.
#[test]
fn the_quota_counts_bytes_as_written_and_directories_as_files() {
    let mut m = agents_pad_with_rules(
        r#"{"paths": [{"path": "**"}], "quota": {"bytes": 1000000, "files": 8}}"#,
    );
    let secret: String = (0..500)
        .map(|i| format!("PIN={:05}\n", 4821 + i % 2))
        .collect();
    m.sh_ok(&format!(
        "mkdir -m 0700 private && printf '%s' '{secret}' > private/secret.txt"
    ));
    let guess = |name: &str, content: &str| {
        let o = as_agent()
            .args(["sh", "-c", &format!("printf '%s' '{content}' > {name}")])
            .current_dir(&m.mnt)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    guess("right.txt", &secret);
    guess("wrong.txt", &secret.replace("4821", "4700"));
    // Counted again from the store, as after a full pass: a new daemon counts once.
    m.unmount();
    m.start();
    let r = mcp_session(
        "quota-client",
        &["stdio", BIN, "mcp", "--db", m.db.to_str().unwrap()],
        serde_json::json!([{ "tool": "list", "args": {} }]),
    );
    let usage = &r["results"][0]["structured"]["usage"];
    let written: u64 = m
        .sql("SELECT COALESCE(SUM(size), 0) FROM versions")
        .parse()
        .unwrap();
    assert_eq!(written, 3 * 5000 + 3, "each file written once");
    // And each version's record (VERSION_RECORD_BYTES, 512), each namespace change's and
    // refusal's (EVENT_RECORD_BYTES, 256).
    let versions: u64 = m.sql("SELECT COUNT(*) FROM versions").parse().unwrap();
    let changes: u64 = m
        .sql("SELECT (SELECT COUNT(*) FROM tree_log) + (SELECT COUNT(*) FROM events WHERE op = 'rejected')")
        .parse()
        .unwrap();
    assert_eq!(
        changes, 8,
        "the root, 3 seeds, private/, its file, 2 guesses"
    );
    // And the texts of the records: the versions' paths, the events' paths and reasons.
    let texts: u64 = m
        .sql(
            "SELECT (SELECT COALESCE(SUM(LENGTH(path)), 0) FROM versions)
                  + (SELECT COALESCE(SUM(LENGTH(path) + COALESCE(LENGTH(new_path), 0)
                                         + COALESCE(LENGTH(reason), 0)), 0) FROM events)",
        )
        .parse()
        .unwrap();
    assert!(texts > 0);
    // And the rows of the processes that changed the pad (their records and texts).
    let counted = usage_by_rows(&m);
    assert!(counted > written + 512 * versions + 256 * changes + texts + 3 * 256);
    assert_eq!(usage["bytes"].as_u64(), Some(counted), "{usage}");
    // Seeds (3), private/, its file, the two guesses: 7 of 8.
    assert_eq!(usage["files"], 7, "{usage}");
    let o = as_agent()
        .args(["sh", "-c", "mkdir d1 && mkdir d2"])
        .current_dir(&m.mnt)
        .output()
        .unwrap();
    assert!(!o.status.success(), "a directory past the quota was made");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("quota"), "{err}");
    assert!(m.path("d1").is_dir() && !m.path("d2").exists());
}

/// `why` of a file whose input the policy forgot (`including: ["inputs"]`) names the
/// rule, as `show` does, where it said "forgotten by gc" (helper finding).
#[test]
fn why_names_the_rule_that_forgot_an_input() {
    let mut m = Mount::new();
    m.sh_ok(
        "echo one > a.txt
         python3 -c \"open('out.md', 'w').write(open('a.txt').read())\"
         echo two > a.txt",
    );
    restart_with_rules(
        &mut m,
        r#"{"paths": [{"path": "a.txt", "keep": {"versions": 1, "including": ["inputs"]}}, {"path": "**"}]}"#,
        &[],
    );
    let (code, out, err) = cli(&m, &["gc", "--policy"]);
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(kept(&m, "a.txt"), [2]);
    let (code, out, err) = cli(&m, &["why", "out.md"]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(
        out.contains("(forgotten by policy paths[0] a.txt (versions 1"),
        "{out}"
    );
}

/// Content renamed back and forth by the agent stays credited to its writer: a rename's
/// version names the version that wrote its content, so that version is an input of the
/// live one and no `versions` limit forgets it (attack round of session 30: after `mv f
/// g; mv g f` and `keep: {versions: 2}`, only the agent's rename versions were left).
#[test]
fn content_renamed_back_and_forth_keeps_its_writers_version() {
    let mut m = agents_pad_with_rules(r#"{"paths": [{"path": "**"}]}"#);
    m.sh_ok("echo '{\"total\": 41}' > tool.json");
    let agent = |script: &str| {
        let o = as_agent()
            .args(["sh", "-c", script])
            .current_dir(&m.mnt)
            .output()
            .unwrap();
        assert!(o.status.success(), "{script}: {o:?}");
    };
    agent(
        "mv tool.json x.json && mv x.json tool.json && mv tool.json y.json && mv y.json tool.json",
    );
    restart_with_rules(
        &mut m,
        r#"{"paths": [{"path": "**", "keep": {"versions": 2}}]}"#,
        &["--owner", "1000:1000"],
    );
    let (code, out, err) = cli(&m, &["gc", "--policy"]);
    assert_eq!(code, 0, "{out} {err}");
    // The lineage's first version (root's write) and the two newest renames are kept.
    let versions = m.sql(
        "SELECT v.version, v.op FROM versions v JOIN files f ON f.id = v.file_id
         WHERE f.path = 'tool.json' ORDER BY v.version",
    );
    assert_eq!(
        versions.trim(),
        "1|create\n4|rename\n5|rename",
        "{versions}"
    );
    let (code, out, err) = cli(&m, &["why", "tool.json"]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(!out.contains("forgotten"), "{out}");
    assert!(
        out.contains("<- renamed from tool.json@1 (create by"),
        "{out}"
    );
}

/// A rename of a file makes a version, whose record counts against the quota: renames
/// back and forth by the agent stop with `EDQUOT` at the quota, recorded, where 10,000 of
/// them grew a full pad by 7.7 MB (attack round of session 30).
#[test]
fn renames_at_the_quota_fail_with_edquot() {
    let m = agents_pad_with_rules(r#"{"paths": [{"path": "**"}], "quota": {"bytes": 20000}}"#);
    let o = as_agent()
        .args([
            "sh",
            "-c",
            "head -c 10000 /dev/urandom > f && for i in $(seq 100); do mv f g || exit 3; mv g f || exit 4; done",
        ])
        .current_dir(&m.mnt)
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(3 | 4)),
        "200 renames passed the quota: {o:?}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("quota"), "{err}");
    // At most what fits: (20,000 - 10,000 bytes of content) / 512 bytes a record.
    let versions: u64 = m.sql("SELECT COUNT(*) FROM versions").parse().unwrap();
    assert!(versions <= 20, "{versions} versions");
    let refusal = m.sql("SELECT errno, reason FROM events WHERE op = 'rejected'");
    assert!(
        refusal.starts_with("122|") && refusal.contains("this rename's version"),
        "{refusal}"
    );
}

/// A pass between full ones keeps what a version committed since the pass before was
/// read from: it adds the inputs of those versions to what the last pass protected
/// instead of reading every live file's head again (every pass after the first is one
/// here: `SCRATCHFS_POLICY_FULL_EVERY`).
#[test]
fn a_pass_between_full_ones_keeps_what_a_new_version_was_read_from() {
    let mut m = Mount::new();
    m.sh_ok("echo one > a.txt && echo two > a.txt");
    remount_with_rules(
        &mut m,
        r#"{"paths": [{"path": "a.txt", "keep": {"versions": 1}}, {"path": "**"}]}"#,
        &[("SCRATCHFS_POLICY_FULL_EVERY", "1000000")],
    );
    wait_for("the first (full) pass to forget a.txt@1", || {
        kept(&m, "a.txt") == [2]
    });
    m.sh_ok(
        "python3 -c \"open('out.md', 'w').write(open('a.txt').read())\"
         echo three > a.txt && echo four > a.txt",
    );
    wait_for("a pass between full ones to forget a.txt@3", || {
        !kept(&m, "a.txt").contains(&3)
    });
    assert_eq!(kept(&m, "a.txt"), [2, 4], "out.md was read from a.txt@2");
    let (code, out, err) = cli(&m, &["why", "out.md"]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(!out.contains("forgotten"), "{out}");
}

/// `gc --keep-last` reads each version a few times, not once per newer version of its
/// lineage: it ranks a lineage's versions with one window (before: a count of the newer
/// versions of each, 4,500,000 index entries for a log of 3,000 versions). Counted from
/// PostgreSQL's own statistics (index entries and rows read on `versions`). Run in both
/// passes of scripts/test.
#[test]
fn gc_keep_last_reads_each_version_a_few_times() {
    let url = new_pg_database();
    let _drop = DropPgDatabase(url.clone());
    let mut m = Mount::on_db(&url);
    m.sh_ok("for i in $(seq 1 3000); do echo $i >> log; done");
    m.unmount();
    let read = || -> i64 {
        let q = "SELECT (SELECT COALESCE(SUM(idx_tup_read), 0) FROM pg_stat_user_indexes WHERE relname = 'versions')
                      + (SELECT COALESCE(SUM(seq_tup_read), 0) FROM pg_stat_user_tables WHERE relname = 'versions')";
        pg_query(&url, q).trim().parse().unwrap()
    };
    let deleted = || -> i64 {
        pg_query(
            &url,
            "SELECT n_tup_del FROM pg_stat_user_tables WHERE relname = 'versions'",
        )
        .trim()
        .parse()
        .unwrap()
    };
    pg_query(&url, "ANALYZE versions, extents, files, inputs");
    let before = read();
    let (code, out, err) = cli(&m, &["gc", "--keep-last", "1"]);
    assert_eq!(code, 0, "{out} {err}");
    wait_for("gc's deletes in PostgreSQL's statistics", || {
        deleted() >= 2_999
    });
    let entries = read() - before;
    assert!(
        entries <= 20 * 3_000,
        "gc --keep-last read {entries} rows and index entries of versions for 3,000 versions"
    );
}

/// A truncation without a handle (`truncate(2)`) is a version like a commit: past the
/// quota it fails with `EDQUOT`, recorded, and it is counted (attack round of session
/// 31: 400 truncations of a 50,000-byte file by the agent were neither judged nor
/// counted, and took the pad to 50 times its quota).
#[test]
fn truncates_at_the_quota_fail_with_edquot() {
    let m = agents_pad_with_rules(r#"{"paths": [{"path": "**"}], "quota": {"bytes": 30000}}"#);
    let script = r#"
import errno, os
open("t", "w").write("z" * 10000)
for i in range(200):
    try:
        os.truncate("t", 10000 if i % 2 else 9999)
    except OSError as e:
        print("refused", i, e.errno == errno.EDQUOT)
        break
else:
    print("all passed")
"#;
    let o = agent_python(&m, script);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("refused ") && out.trim().ends_with(" True"),
        "{out} {o:?}"
    );
    // At most what fits: (30,000 - 10,000 bytes of content) / 512 bytes a record.
    let versions: u64 = m.sql("SELECT COUNT(*) FROM versions").parse().unwrap();
    assert!(versions <= 45, "{versions} versions");
    let header = read(m.path("MANIFEST")).lines().next().unwrap().to_string();
    assert!(header.contains(" KB of 29 KB"), "{header}");
}

/// Records that are not versions count against the quota too (a namespace change, a
/// refusal: 256 bytes each), so an agent at its quota cannot grow the pad by `chmod`,
/// `utime`, `mkdir`+`rmdir`, directory renames or being refused (attack rounds of
/// sessions 30 and 31: 5,000 refused creates 660 KB; per 1,000 operations 100 to 370 KB).
/// Past the quota a refusal keeps its content's size and digest, not the content; past
/// it by 64 records, refusals are counted, and one record (at unmount here) says how
/// many. Deleting still works. (The agent's process has 800 KB of arguments: its row
/// counts 4 KB of them.)
#[test]
fn records_without_a_version_count_against_the_quota_and_refusals_past_it_are_counted() {
    let mut m = agents_pad_with_rules(
        r#"{"paths": [{"path": "*.json", "format": "json"}, {"path": "**"}], "quota": {"bytes": 25000}}"#,
    );
    let script = r#"
import errno, json, os
out = {}
def tally(name, n, f):
    c = out.setdefault(name, {})
    for i in range(n):
        try:
            f(i)
            k = "ok"
        except OSError as e:
            k = errno.errorcode[e.errno]
        c[k] = c.get(k, 0) + 1
open("s.json", "w").write("{}")
os.mkdir("e")
open("big", "wb").write(os.urandom(12000))
def bad_json(i):
    with open("s.json", "w") as f:
        f.write("x" * (10 if i == 0 else 9000))
tally("json", 2, bad_json)
tally("chmod", 300, lambda i: os.chmod("big", 0o600 if i % 2 else 0o644))
tally("utime", 300, lambda i: os.utime("big", (i, i)))
def mkrm(i):
    os.mkdir("d")
    os.rmdir("d")
tally("mkdir", 300, mkrm)
cur = ["e"]
def mvdir(i):
    new = "f" if cur[0] == "e" else "e"
    os.rename(cur[0], new)
    cur[0] = new
tally("rename_dir", 300, mvdir)
tally("create", 2000, lambda i: open("n%d" % i, "w").close())
tally("refused_json", 2000, bad_json)
os.remove("big")
print(json.dumps(out))
"#;
    // 800 KB of arguments, which each process's row would keep whole.
    let o = agent_python_with(&m, script, &vec!["x".repeat(100_000); 8], None);
    assert!(o.status.success(), "{o:?}");
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out["json"]["EINVAL"], 2, "{out}");
    let argv: u64 = m
        .sql("SELECT MAX(LENGTH(argv)) FROM processes")
        .parse()
        .unwrap();
    // 4,096 bytes of arguments, and their JSON quotes and escapes.
    assert!(
        argv <= 5_000,
        "a process's row kept {argv} bytes of arguments"
    );
    for op in ["chmod", "utime", "mkdir", "rename_dir", "create"] {
        assert!(
            out[op]["EDQUOT"].as_u64().unwrap_or(0) > 0,
            "{op} never met the quota: {out}"
        );
    }
    // The first refused JSON was kept whole; the second (9,000 bytes) did not fit: its
    // size and digest only.
    let refused = m.sql(
        "SELECT size, stream IS NULL, LENGTH(blake3), reason LIKE '%not kept: the pad is at its quota%',
                reason LIKE '%blake3%'
         FROM events WHERE op = 'rejected' AND path = 's.json' ORDER BY id LIMIT 2",
    );
    assert_eq!(refused, "10|0|64|0|0\n9000|1|64|1|0", "{refused}");
    m.unmount();
    let usage = usage_by_rows(&m);
    // The quota, the refusals' slack past it (64 records, 16 KiB), the count's record
    // and the deletion's, with their texts.
    assert!(
        usage <= 25_000 + 64 * 256 + 2 * 256 + 1_000,
        "{usage} bytes after 5,000 tries at a quota of 25,000: {out}"
    );
    let rejected: u64 = m
        .sql("SELECT COUNT(*) FROM events WHERE op = 'rejected'")
        .parse()
        .unwrap();
    assert!(rejected <= 70, "{rejected} refusals on record");
    // By the daemon's own writer, so that no caller's refusal passes for it.
    let count = m.sql(
        "SELECT reason FROM events WHERE op = 'rejected' AND writer = 'scratchfs'
           AND reason LIKE '% refusals past the pad''s quota not recorded one by one%'",
    );
    let n: u64 = count
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of the refusals not recorded: {count:?}"));
    assert!(n >= 3_000, "{count}");
    assert!(count.contains("(by writer: "), "{count}");
}

/// A commit of the same bytes makes no version and counts nothing against the quota
/// (before, each counted a version and its bytes until the next count, so rewriting a
/// file unchanged at 10,000 bytes of a 25,000-byte quota failed with `EDQUOT` by the
/// third time); a restore is judged like a commit (200 restores back and forth by the
/// agent each made a version past a full quota).
#[test]
fn a_commit_of_the_same_bytes_counts_nothing_and_restores_meet_the_quota() {
    let m = agents_pad_with_rules(r#"{"paths": [{"path": "**"}], "quota": {"bytes": 25000}}"#);
    let script = r#"
import errno, os
data = os.urandom(10000)
for i in range(20):
    open("f", "wb").write(data)
print("rewrote")
open("g", "w").write("one\n")
open("g", "w").write("two\n")
for i in range(200):
    try:
        os.setxattr("g", "user.scratchfs.restore", b"1" if i % 2 == 0 else b"2")
    except OSError as e:
        print("restore refused", i, e.errno == errno.EDQUOT)
        break
else:
    print("all restored")
"#;
    let o = agent_python(&m, script);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("rewrote\n"), "{out} {o:?}");
    assert!(
        out.contains("restore refused ") && out.trim().ends_with(" True"),
        "{out} {o:?}"
    );
    assert_eq!(kept(&m, "f"), [1], "a version per unchanged rewrite");
    let versions: u64 = m.sql("SELECT COUNT(*) FROM versions").parse().unwrap();
    assert!(versions <= 40, "{versions} versions");
}

/// A commit that keeps bytes of the version its handle opened without having read them
/// (a `pwrite` through a write-only handle) and a `truncate(2)` to a shorter length name
/// that version as an input: after a `keep: {versions: 1}` pass, root's version is kept
/// and `why` leads to it (Known open of session 31: the content was almost all root's,
/// and `why` said its writer read nothing), after a second partial overwrite too (Known
/// open of session 33: the input went one level deep, and root's version was forgotten).
/// A write over the whole content names none.
#[test]
fn a_partial_overwrite_and_a_truncation_name_the_version_they_keep() {
    let mut m = agents_pad_with_rules(r#"{"paths": [{"path": "**"}]}"#);
    m.sh_ok(
        "for f in p.txt t.txt w.txt; do head -c 2000 /dev/zero | tr '\\0' r > $f; done && chmod 666 p.txt t.txt w.txt",
    );
    let script = r#"
import os
fd = os.open("p.txt", os.O_WRONLY)
os.pwrite(fd, b"A", 0)
os.close(fd)
os.truncate("t.txt", 1000)
fd = os.open("w.txt", os.O_WRONLY)
os.pwrite(fd, b"W" * 2000, 0)
os.close(fd)
"#;
    let o = agent_python(&m, script);
    assert!(o.status.success(), "{o:?}");
    // A second partial overwrite, by another process: its base is the agent's version,
    // and root's bytes are still most of the file.
    let o = agent_python(
        &m,
        "import os\nfd = os.open('p.txt', os.O_WRONLY)\nos.pwrite(fd, b'B', 1)\nos.close(fd)",
    );
    assert!(o.status.success(), "{o:?}");
    restart_with_rules(
        &mut m,
        r#"{"paths": [{"path": "**", "keep": {"versions": 1}}]}"#,
        &["--owner", "1000:1000"],
    );
    let (code, out, err) = cli(&m, &["gc", "--policy"]);
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(
        kept(&m, "p.txt"),
        [1, 2, 3],
        "the pwrite's base and what that was made from"
    );
    assert_eq!(kept(&m, "t.txt"), [1, 2], "the truncation's base");
    assert_eq!(
        kept(&m, "w.txt"),
        [2],
        "a write over the whole content keeps nothing"
    );
    for f in ["p.txt", "t.txt"] {
        let (code, out, err) = cli(&m, &["why", f]);
        assert_eq!(code, 0, "{out} {err}");
        assert!(out.contains(&format!("<- read {f}@1 (")), "{out}");
    }
}

/// A commit refused as a lost update (`ESTALE`) keeps its content on record, and that
/// counts against the quota like any refusal's: the next commits past it fail with
/// `EDQUOT` (attack round of session 33: 2,000 such refusals by the agent stored 130 MB on
/// a pad of 200 KB in a second, MANIFEST still saying 134 KB).
#[test]
fn lost_updates_refused_count_against_the_quota() {
    let m = agents_pad_with_rules(r#"{"paths": [{"path": "**"}], "quota": {"bytes": 200000}}"#);
    let script = r#"
import errno, json, os, subprocess
open("st", "w").write("v1\n")
open("st").read()
subprocess.run(["sh", "-c", "echo v2 > st"], check=True)
out = {}
for i in range(100):
    try:
        fd = os.open("st", os.O_WRONLY)
        try:
            os.write(fd, b"x" * 20000)
        finally:
            os.close(fd)
        k = "ok"
    except OSError as e:
        k = errno.errorcode[e.errno]
    out[k] = out.get(k, 0) + 1
print(json.dumps(out))
"#;
    let o = agent_python(&m, script);
    assert!(o.status.success(), "{o:?}");
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(out["ESTALE"].as_u64().unwrap_or(0) > 0, "{out}");
    assert!(out["EDQUOT"].as_u64().unwrap_or(0) > 0, "{out}");
    let stored: u64 = m
        .sql("SELECT COALESCE(SUM(len), 0) FROM extents")
        .parse()
        .unwrap();
    assert!(
        stored <= 200_000 + 20_000,
        "{stored} bytes of content at a quota of 200,000: {out}"
    );
}

/// A checkpoint (its record and its note, kept twice) counts against the quota, and a
/// caller the quota binds may take one, or start a rollback, only while the pad is
/// within it (attack round of session 33: 1,000 checkpoints with 4 KB notes took a full
/// pad 8.7 MB past it; 50 rollbacks back and forth by the agent, 226 KB to 4 MB).
#[test]
fn checkpoints_and_rollbacks_meet_the_quota() {
    let m = agents_pad_with_rules(
        r#"{"paths": [{"path": "**"}], "quota": {"bytes": 60000},
            "checkpoints": {"rollback": ["*"]}}"#,
    );
    let script = r#"
import errno, json, os
out = {}
def tally(name, f):
    c = out.setdefault(name, {})
    try:
        f()
        k = "ok"
    except OSError as e:
        k = errno.errorcode[e.errno]
    c[k] = c.get(k, 0) + 1
open("f", "w").write("one\n")
os.setxattr(".", "user.scratchfs.checkpoint", b"a")
open("f", "w").write("two\n")
os.setxattr(".", "user.scratchfs.checkpoint", b"b")
for i in range(100):
    tally("checkpoint", lambda: os.setxattr(".", "user.scratchfs.checkpoint", ("c%d\n" % i).encode() + b"n" * 4000))
for i in range(100):
    tally("rollback", lambda: os.setxattr(".", "user.scratchfs.rollback", b"a" if i % 2 == 0 else b"b"))
print(json.dumps(out))
"#;
    let o = agent_python(&m, script);
    assert!(o.status.success(), "{o:?}");
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        out["checkpoint"]["EDQUOT"].as_u64().unwrap_or(0) > 0,
        "{out}"
    );
    assert!(out["rollback"]["EDQUOT"].as_u64().unwrap_or(0) > 0, "{out}");
    let notes: u64 = m
        .sql("SELECT COALESCE(SUM(LENGTH(note)), 0) FROM checkpoints")
        .parse()
        .unwrap();
    assert!(notes <= 60_000 / 2, "{notes} bytes of notes: {out}");
    let rollbacks: u64 = m
        .sql("SELECT COUNT(*) FROM events WHERE op = 'rollback'")
        .parse()
        .unwrap();
    assert!(rollbacks < 100, "{rollbacks} rollbacks: {out}");
}

/// A record counts its texts (paths, reasons) against the quota besides its 256 or 512
/// bytes: refusals of creates with 3.9 KB paths stop being recorded one by one within the
/// slack (attack round of session 33: 599 such refusals held 4.6 MB at a quota of
/// 200 KB, each counted 256 bytes).
#[test]
fn long_paths_count_against_the_quota() {
    let m = agents_pad_with_rules(r#"{"paths": [{"path": "**"}], "quota": {"bytes": 100000}}"#);
    let script = r#"
import errno, os
deep = "/".join(["d%03d" % i + "x" * 236 for i in range(16)])
os.makedirs(deep)
try:
    open("fill", "wb").write(os.urandom(100000))
except OSError:
    pass
refused = 0
for i in range(300):
    try:
        open(deep + "/n%03d" % i, "w").close()
    except OSError as e:
        refused += e.errno == errno.EDQUOT
print(refused)
"#;
    let o = agent_python(&m, script);
    assert!(o.status.success(), "{o:?}");
    let refused: u32 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    assert!(refused >= 250, "{o:?}");
    let texts: u64 = m
        .sql(
            "SELECT COALESCE(SUM(LENGTH(path) + COALESCE(LENGTH(new_path), 0) + COALESCE(LENGTH(reason), 0)), 0)
             FROM events",
        )
        .parse()
        .unwrap();
    // The quota, the slack (16 KiB) and one record of each kind past it.
    assert!(
        texts <= 100_000 + 16_384 + 2 * 12_500,
        "{texts} bytes of paths and reasons at a quota of 100,000"
    );
}

/// A process's row (its arguments, up to 4 KB of them) counts against the quota: a new
/// process whose row does not fit cannot commit, and its reads, which the quota cannot
/// refuse, are not written to the store while the pad is at its quota (before, 64
/// readers a minute with long arguments added 1.5 MB a minute to a full pad, attack
/// round of session 31), nor do they keep root's from it; its deletions, which never
/// fail, are recorded by a row without its arguments (before, 20 deletions with 130 KB
/// tags took a pad of 60,000 bytes to 2.7 MB, attack round of session 34).
#[test]
fn new_processes_count_against_the_quota_and_reads_at_it_add_no_rows() {
    let m = agents_pad_with_rules(r#"{"paths": [{"path": "**"}], "quota": {"bytes": 60000}}"#);
    m.sh_ok(
        "for i in $(seq 10 39); do echo \"notes $i\" > r$i.md; done; echo w > w.md; chmod 666 w.md",
    );
    // Files the agent makes while there is room, to delete at the quota.
    let o = agent_python(&m, "for i in range(10): open('e%d' % i, 'w').close()");
    assert!(o.status.success(), "{o:?}");
    let free = 60_000 - usage_by_rows(&m);
    // The agent fills the pad to 3,000 bytes of it (the fill's version record, 512 + its
    // path, and the writer's process row, under 400, fit in that).
    let fill = format!("open('fill', 'wb').write(b'x' * {})", free - 3_000);
    let o = agent_python(&m, &fill);
    assert!(o.status.success(), "{o:?}");
    let long = vec!["a".repeat(4_000)];
    let write = "open('w.md', 'w').write('changed')";
    // A process with short arguments may commit.
    let o = agent_python(&m, write);
    assert!(o.status.success(), "{o:?}");
    // One whose row is 4 KB: its commit of 13 bytes would pass the quota.
    let o = agent_python_with(
        &m,
        "with open('w.md', 'w') as f: f.write('changed again')",
        &long,
        None,
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Disk quota exceeded"),
        "a new process with 4 KB of arguments committed at 3 KB from the quota: {o:?}"
    );
    // 30 readers with 4 KB of arguments, each of another file (a file's last read is
    // written at most once a second for the same version).
    for i in 10..40 {
        let o = agent_python_with(&m, &format!("open('r{i}.md').read()"), &long, None);
        assert!(o.status.success(), "{o:?}");
    }
    // The agent's read, not written at the quota, does not keep root's read right after
    // it from the store.
    m.sh_ok("cat r39.md > /dev/null");
    let root_read = m.sql(
        "SELECT COUNT(*) FROM reads r JOIN files f ON f.id = r.file_id WHERE f.path = 'r39.md'",
    );
    assert_eq!(
        root_read, "1",
        "root's read after the agent's was not stored"
    );
    // Deletions never fail; a new process with 4 KB of arguments and a 100 KB
    // SCRATCHFS_WRITER deleting at the quota is recorded by a smaller row.
    for i in 0..10 {
        let o = agent_python_with(
            &m,
            &format!("import os; os.unlink('e{i}')"),
            &long,
            Some(&"W".repeat(100_000)),
        );
        assert!(o.status.success(), "{o:?}");
    }
    let slim = m.sql(
        "SELECT COUNT(*) FROM processes WHERE argv LIKE '%arguments not kept: the pad was at its quota%'",
    );
    assert_eq!(slim, "10", "the deleters' rows");
    let tag: u64 = m
        .sql("SELECT MAX(LENGTH(env_writer)) FROM processes")
        .parse()
        .unwrap();
    assert!(tag <= 256, "a SCRATCHFS_WRITER of {tag} bytes kept");
    let usage = usage_by_rows(&m);
    // The quota, the refused commit's record within the refusals' slack (16 KiB), and the
    // ten deletions' records (256 bytes each, and their rows of a few hundred bytes).
    assert!(
        usage <= 60_000 + 16_384 + 10 * 1_000,
        "{usage} bytes at a quota of 60,000 after 30 readers and 10 deleters with long arguments"
    );
}

/// A partial overwrite names the earlier versions of other users first: an agent that
/// may claim 17 writer names (`env`) and overwrites one byte of root's file with each
/// in turn cannot push root's version out of the inputs the policy keeps (attack round
/// of session 34: 20 names, root's version forgotten).
#[test]
fn many_writer_names_of_the_agent_keep_roots_version_named() {
    let writers: Vec<String> = (1..=17)
        .map(|i| format!(r#""w{i}": {{"env": "w{i}"}}"#))
        .collect();
    let mut m = agents_pad_with_rules(&format!(
        r#"{{"writers": {{{}}}, "paths": [{{"path": "**"}}]}}"#,
        writers.join(", ")
    ));
    m.sh_ok("head -c 2000 /dev/zero | tr '\\0' r > f.txt && chmod 666 f.txt");
    for round in 0..2 {
        for i in 1..=17 {
            let script = format!(
                "import os\nfd = os.open('f.txt', os.O_WRONLY)\nos.pwrite(fd, b'x', {})\nos.close(fd)",
                round * 17 + i
            );
            let o = agent_python_with(&m, &script, &[], Some(&format!("w{i}")));
            assert!(o.status.success(), "{o:?}");
        }
    }
    restart_with_rules(
        &mut m,
        &format!(
            r#"{{"writers": {{{}}}, "paths": [{{"path": "**", "keep": {{"versions": 1}}}}]}}"#,
            writers.join(", ")
        ),
        &["--owner", "1000:1000"],
    );
    let (code, out, err) = cli(&m, &["gc", "--policy"]);
    assert_eq!(code, 0, "{out} {err}");
    let kept = kept(&m, "f.txt");
    assert_eq!(kept.first(), Some(&1), "root's version: {kept:?}");
    // The base, at most 16 other writers' versions, and the live one.
    assert!(kept.len() <= 18, "{kept:?}");
}
