//! Views worth their cost (issue 11, items 5 and 6): MANIFEST leaves temporaries out and
//! keeps to its budget whatever the tree; binary files get no token estimate; a file under
//! `max_bytes` shows its size against its cap; outlines are never larger than their
//! files, and at most 5% of them past 4 KiB.

mod common;
use common::*;

use std::io::Write;
use std::process::{Command, Stdio};

/// Estimated tokens of a text (bytes / 4, rounded up), as MANIFEST counts them.
fn tokens(text: &str) -> usize {
    text.len().div_ceil(4)
}

/// The rows of MANIFEST's file table (between the column header and `who may write:`).
fn table(manifest: &str) -> Vec<&str> {
    manifest
        .lines()
        .skip(2)
        .take_while(|l| !l.starts_with("who may write"))
        .collect()
}

/// The `restorable:` lines of MANIFEST.
fn restorable(manifest: &str) -> Vec<&str> {
    manifest
        .lines()
        .skip_while(|l| *l != "restorable:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect()
}

/// Mounts with `rules` (JSON text) and more mount arguments.
fn mount_with(rules: &str, args: &[&str]) -> Mount {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.json");
    std::fs::write(&path, rules).unwrap();
    let mut all = vec!["--rules", path.to_str().unwrap()];
    all.extend_from_slice(args);
    let m = Mount::with_args(&all);
    // The rules file is read at mount time only.
    drop(dir);
    m
}

/// vim editing plan.md in a terminal: its swap file is in the mount while MANIFEST is
/// read, and MANIFEST for the default layout stays under 600 estimated tokens without
/// it. After `:wq`, neither the swap file nor vim's other temporaries are "restorable",
/// and their versions are still in `.history`.
#[test]
fn vim_open_on_plan_md_leaves_manifest_small_and_clean() {
    let m = Mount::new();
    std::fs::write(m.path("plan.md"), "# Plan\n\n## Goal\nrefund order 1042\n").unwrap();
    // The edit is made by a command at startup (typed keys can arrive while vim still
    // waits for the terminal's answers, and be taken for them); only `:wq` is typed, again
    // until vim exits.
    let mut vim = Command::new("script")
        .args([
            "-q",
            "-c",
            "vim -u NONE -N -i NONE -c 'normal Goadded by vim' plan.md",
            "/dev/null",
        ])
        .current_dir(&m.mnt)
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run vim in a terminal (script, from util-linux)");
    wait_for("vim's swap file", || m.path(".plan.md.swp").exists());
    let text = read(m.path("MANIFEST"));
    assert!(
        tokens(&text) < 600,
        "{} tokens with vim open:\n{text}",
        tokens(&text)
    );
    // (The swap file has no version yet while vim holds it open, so it is not even
    // counted as a temporary left out: a file's first version is its first commit.)
    assert!(!text.contains(".swp"), "{text}");
    for f in ["plan.md ", "findings.md ", "state.json "] {
        assert!(
            table(&text).iter().any(|r| r.starts_with(f)),
            "{f}:\n{text}"
        );
    }
    // Append a line and save; vim then removes its swap file.
    let mut status = None;
    wait_for("vim to write and quit", || {
        status = vim.try_wait().unwrap();
        if status.is_none() {
            // Ignored once vim has gone (the pipe may then be closed).
            let _ = vim.stdin.as_mut().unwrap().write_all(b"\x1b:wq\r");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        status.is_some()
    });
    let status = status.unwrap();
    assert!(status.success(), "vim: {status}");
    wait_for("vim's swap file to go", || !m.path(".plan.md.swp").exists());
    assert!(read(m.path("plan.md")).ends_with("added by vim\n"));
    let text = read(m.path("MANIFEST"));
    assert!(
        !text.contains(".swp") && !text.contains("plan.md~") && !text.contains("4913"),
        "{text}"
    );
    assert!(!text.contains("temporar"), "{text}");
    assert!(
        restorable(&text).iter().all(|l| !l.contains("plan.md")),
        "{text}"
    );
    // The swap file's versions are kept.
    assert!(
        m.sh_ok("ls .history/.plan.md.swp/ | wc -l").trim() != "0",
        "the swap file has a history"
    );
}

/// Every built-in temporary name, and a name matched by the rules' `ephemeral` globs:
/// versioned and in `.history`, but neither in MANIFEST's file list nor `restorable:`.
#[test]
fn temporaries_are_versioned_but_not_listed_nor_restorable() {
    let rules = r#"{ "paths": [ { "path": "**", "writers": ["*"] } ],
                    "ephemeral": ["scratch/**"] }"#;
    let m = mount_with(rules, &[]);
    let names = [
        ".plan.md.swp",
        ".plan.md.swo",
        "plan.md~",
        "4913",
        ".#plan.md",
        "#plan.md#",
        "sedX1b2c3",
        "tmpk2j_9x1q",
        "tmpab_cd123.json",
        ".tmp-memory-42",
        "db.sqlite-journal",
        "db.sqlite-wal",
        "db.sqlite-shm",
        "notes/.draft.md.swp",
        "scratch/work.md",
    ];
    m.sh_ok("mkdir -p notes scratch");
    for n in names {
        std::fs::write(m.path(n), format!("temporary content of {n}\n")).unwrap();
    }
    std::fs::write(m.path("keep.md"), "a file that is not a temporary\n").unwrap();
    let text = read(m.path("MANIFEST"));
    let rows = table(&text);
    for n in names {
        assert!(!text.contains(n), "{n} listed:\n{text}");
    }
    assert!(rows.iter().any(|r| r.starts_with("keep.md ")), "{text}");
    assert!(
        text.contains(&format!("{} temporaries not listed", names.len())),
        "{text}"
    );
    // Deleted: none of them is restorable; a file that is not a temporary still is.
    for n in names {
        std::fs::remove_file(m.path(n)).unwrap();
    }
    std::fs::remove_file(m.path("keep.md")).unwrap();
    let text = read(m.path("MANIFEST"));
    assert_eq!(
        restorable(&text),
        ["  keep.md deleted by anonymous 0s ago (31 B): .archive/keep.md"],
        "{text}"
    );
    // Nothing is lost: every temporary has its history and its archive.
    for n in names {
        assert_eq!(
            read(m.path(&format!(".archive/{n}"))),
            format!("temporary content of {n}\n")
        );
        assert!(m.path(&format!(".history/{n}")).is_dir(), "{n}");
    }
}

/// A rename moves a file in or out of the temporaries, by its name or (the rules'
/// globs) its directory's: MANIFEST judges it again (it remembers its judgement per
/// name and place); so does a content that turns binary.
#[test]
fn renames_move_files_in_and_out_of_the_temporaries() {
    let rules = r#"{ "paths": [ { "path": "**", "writers": ["*"] } ],
                    "ephemeral": ["scratch/**"] }"#;
    let m = mount_with(rules, &[]);
    let listed = |name: &str| {
        table(&read(m.path("MANIFEST")))
            .iter()
            .any(|r| r.starts_with(&format!("{name} ")))
    };
    m.sh_ok(
        "echo draft > .tmp-memory-1 && echo plan > keep.md && mkdir work && echo w > work/a.md",
    );
    assert!(!listed(".tmp-memory-1") && listed("keep.md") && listed("work/a.md"));
    // sed -i and the memory tool: a temporary renamed into place is a file like any other.
    m.sh_ok("mv .tmp-memory-1 final.md && mv keep.md keep.md~");
    assert!(
        listed("final.md") && !listed("keep.md~"),
        "{}",
        read(m.path("MANIFEST"))
    );
    // A directory renamed under a glob of the rules takes its files along.
    m.sh_ok("mkdir scratch && mv work scratch/work");
    assert!(!listed("scratch/work/a.md"), "{}", read(m.path("MANIFEST")));
    m.sh_ok("mv scratch/work back");
    assert!(listed("back/a.md"), "{}", read(m.path("MANIFEST")));
    // Text that turns binary.
    let row = |name: &str| {
        let text = read(m.path("MANIFEST"));
        table(&text)
            .iter()
            .find(|r| r.starts_with(&format!("{name} ")))
            .map(|r| r.split_whitespace().nth(2).unwrap().to_string())
            .unwrap_or_else(|| panic!("{name}:\n{text}"))
    };
    assert_eq!(row("final.md"), "2");
    std::fs::write(m.path("final.md"), b"\0\x01\x02 binary now").unwrap();
    assert_eq!(row("final.md"), "binary");
}

/// 1,000 top-level directories: MANIFEST keeps to its default budget of 2,000 tokens,
/// lists the default layout and the newest file, and folds the rest into summary rows
/// that count every file once.
#[test]
fn a_thousand_top_level_directories_fold_into_the_budget() {
    let m = Mount::new();
    m.sh_ok(
        "python3 -c '
import os
for d in range(1000):
    os.mkdir(\"dir%04d\" % d)
    with open(\"dir%04d/notes.md\" % d, \"w\") as f:
        f.write(\"note %d\\n\" % d)
'; echo newest > dir0500/latest.txt",
    );
    let text = read(m.path("MANIFEST"));
    assert!(tokens(&text) <= 2000, "{} tokens:\n{text}", tokens(&text));
    assert!(
        text.starts_with("MANIFEST as of ") && text.contains(": 1,004 files, "),
        "{text}"
    );
    assert!(text.contains("; folded to fit ~2,000 tokens\n"), "{text}");
    let rows = table(&text);
    for f in [
        "plan.md ",
        "findings.md ",
        "state.json ",
        "dir0500/latest.txt ",
    ] {
        assert!(rows.iter().any(|r| r.starts_with(f)), "{f}:\n{text}");
    }
    assert!(
        rows.iter()
            .any(|r| r.starts_with("./… (") && r.contains(" more directories: ")),
        "{text}"
    );
    // Every file is counted once: on its own row or in one summary row.
    let mut counted = 0;
    for r in &rows {
        match r.split_once(" (") {
            Some((_, rest)) if rest.contains(" file") => {
                let n = rest.split(" file").next().unwrap();
                let n = n
                    .rsplit(": ")
                    .next()
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap();
                counted += n.replace(',', "").parse::<usize>().unwrap();
            }
            _ => counted += 1,
        }
    }
    assert_eq!(counted, 1004, "{text}");
    assert!(text.ends_with("(deleted files)\n"), "{text}");
}

/// The budget is a mount option (`--manifest-tokens`) or a rules setting
/// (`manifest_tokens`, checked by `rules check`); the option wins.
#[test]
fn the_budget_is_configurable() {
    let rules = r#"{ "paths": [ { "path": "**", "writers": ["*"] } ], "manifest_tokens": 700 }"#;
    let fill = "mkdir -p a b c && for i in $(seq 1 150); do echo $i > a/f$i.txt; echo $i > b/g$i.txt; echo $i > c/h$i.txt; done";
    let m = mount_with(rules, &[]);
    m.sh_ok(fill);
    let text = read(m.path("MANIFEST"));
    assert!(tokens(&text) <= 700, "{} tokens:\n{text}", tokens(&text));
    assert!(tokens(&text) > 350, "{} tokens:\n{text}", tokens(&text));
    assert!(text.contains("folded to fit ~700 tokens"), "{text}");
    drop(m);
    let m = mount_with(rules, &["--manifest-tokens", "300"]);
    m.sh_ok(fill);
    let text = read(m.path("MANIFEST"));
    assert!(tokens(&text) <= 300, "{} tokens:\n{text}", tokens(&text));
    assert!(text.contains("folded to fit ~300 tokens"), "{text}");
    // The checker knows the key and its range; the option is range-checked too.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{ "manifest_tokens": 5 }"#).unwrap();
    let o = Command::new(BIN)
        .args(["rules", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("1:22: manifest_tokens: expected an integer from 100 to 1000000"),
        "{out}"
    );
    let good = dir.path().join("good.json");
    std::fs::write(&good, rules).unwrap();
    let o = Command::new(BIN)
        .args(["rules", "check"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let o = Command::new(BIN)
        .args(["mount", "/nonexistent", "--manifest-tokens", "7"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("an integer from 100 to 1000000"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A binary file (a NUL byte or bytes that are not UTF-8 in its first 8 KiB) shows
/// `binary` instead of a token estimate, in MANIFEST and in its outline.
#[test]
fn binary_files_show_binary_and_bytes() {
    let m = Mount::new();
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    png.resize(5000, 7);
    std::fs::write(m.path("logo.png"), &png).unwrap();
    std::fs::write(m.path("latin1.txt"), b"caf\xe9 au lait\n").unwrap();
    m.sh_ok("sqlite3 data.db 'CREATE TABLE t(x); INSERT INTO t VALUES (1);'");
    std::fs::write(m.path("notes.txt"), "plain text\n").unwrap();
    let text = read(m.path("MANIFEST"));
    let row = |name: &str| -> Vec<String> {
        table(&text)
            .iter()
            .find(|r| r.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name}:\n{text}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    assert_eq!(row("logo.png")[1..3], ["5,000", "binary"], "{text}");
    assert_eq!(row("latin1.txt")[2], "binary", "{text}");
    assert_eq!(row("data.db")[2], "binary", "{text}");
    assert_eq!(row("notes.txt")[2], "3", "{text}");
    let o = read(m.path("logo.png.outline"));
    assert!(
        o.starts_with("logo.png: binary, 5000 bytes, blake3 "),
        "{o}"
    );
    assert!(!o.contains("tokens"), "{o}");
}

/// A file under a `max_bytes` rule shows its size against its cap.
#[test]
fn max_bytes_files_show_size_against_cap() {
    let rules = r#"{ "paths": [
        { "path": "notes/**", "writers": ["*"], "max_bytes": 4096 },
        { "path": "**", "writers": ["*"] } ] }"#;
    let m = mount_with(rules, &[]);
    m.sh_ok("mkdir notes");
    std::fs::write(m.path("notes/a.md"), "x".repeat(3172)).unwrap();
    std::fs::write(m.path("free.md"), "x".repeat(3172)).unwrap();
    let text = read(m.path("MANIFEST"));
    let row = |name: &str| {
        table(&text)
            .into_iter()
            .find(|r| r.starts_with(name))
            .unwrap_or_else(|| panic!("{name}:\n{text}"))
    };
    assert!(
        row("notes/a.md ").ends_with("  max_bytes: 3.1 KB of 4 KB"),
        "{text}"
    );
    assert!(!row("free.md ").contains("max_bytes"), "{text}");
}

/// An outline is never larger than its file, and at most 5% of it for a file over
/// 4 KiB: JSON, Markdown (with and without headings), plain text and CSV, small and
/// large; each still says what its kind says.
#[test]
fn outlines_are_never_larger_than_their_files() {
    let m = Mount::new();
    let write = |name: &str, content: &str| std::fs::write(m.path(name), content).unwrap();
    // A 20-key state.json, each key written by its own tool, then the whole reformatted.
    let mut state = serde_json::Map::new();
    for i in 0..20 {
        state.insert(format!("key_{i}"), serde_json::json!(format!("value {i}")));
    }
    write("state.json", &serde_json::Value::Object(state).to_string());
    for i in 0..4 {
        let st = Command::new("bash")
            .args([
                "-c",
                &format!("jq '.key_{i} = \"tool {i}\"' state.json > t && mv t state.json"),
            ])
            .current_dir(&m.mnt)
            .env("SCRATCHFS_WRITER", format!("tool{i}"))
            .status()
            .unwrap();
        assert!(st.success());
    }
    let mut plan = String::from("# Plan\n");
    let mut findings = String::new();
    let mut log = String::new();
    let mut csv = String::from("id,order,amount_cents,currency\n");
    for i in 0..400 {
        if i % 40 == 0 {
            plan.push_str(&format!("## Step {i}\n"));
        }
        plan.push_str(&format!("- check charge {i} against the ledger\n"));
        findings.push_str(&format!(
            "- finding {i}: charge {i} of order 1042 matches\n"
        ));
        log.push_str(&format!("{i}: request served in {} ms\n", i % 17));
        csv.push_str(&format!("{i},1042,{},EUR\n", i * 100));
    }
    write("plan.md", &plan);
    write("findings.md", &findings);
    write("server.log", &log);
    write("charges.csv", &csv);
    write(
        "small.md",
        "# Small\n\nOne line of text under a heading that says little.\n",
    );
    write("tiny.txt", "ok\n");
    for name in [
        "state.json",
        "plan.md",
        "findings.md",
        "server.log",
        "charges.csv",
        "small.md",
        "tiny.txt",
    ] {
        let size = std::fs::metadata(m.path(name)).unwrap().len() as usize;
        let outline = std::fs::read(m.path(&format!("{name}.outline"))).unwrap();
        assert!(
            outline.len() <= size,
            "{name}: outline {} bytes, file {size}:\n{}",
            outline.len(),
            String::from_utf8_lossy(&outline)
        );
        if size > 4096 {
            assert!(
                outline.len() * 20 <= size,
                "{name}: outline {} bytes, file {size}:\n{}",
                outline.len(),
                String::from_utf8_lossy(&outline)
            );
        }
    }
    let o = read(m.path("state.json.outline"));
    assert!(o.starts_with("state.json: json object of 20 keys,"), "{o}");
    // Each key under the writer that last changed it (too small a file for the values).
    for i in 0..4 {
        assert!(
            o.lines()
                .any(|l| l.starts_with(&format!("by tool{i}, v"))
                    && l.ends_with(&format!(": key_{i}"))),
            "{o}"
        );
    }
    assert_eq!(o.matches("key_").count(), 20, "{o}");
    let o = read(m.path("plan.md.outline"));
    assert!(o.contains("# Plan") && o.contains("  ## Step 0"), "{o}");
    let o = read(m.path("findings.md.outline"));
    assert!(
        o.contains("no headings, 400 lines")
            && o.contains("\n1: - finding 0: ")
            && o.contains("\n400: - finding 399"),
        "{o}"
    );
    let o = read(m.path("server.log.outline"));
    assert!(
        o.contains("text, 400 lines") && o.contains("\n400: 399: request"),
        "{o}"
    );
    let o = read(m.path("charges.csv.outline"));
    assert!(
        o.ends_with("\nheader (4 columns): id,order,amount_cents,currency\n400 rows\n"),
        "{o}"
    );
    // Too small for an outline: the file is its own.
    assert_eq!(read(m.path("tiny.txt.outline")), "ok\n");
}
