//! The inspection commands (SPEC §2), run while the database is mounted.

mod common;
use common::*;
use std::process::Command;

fn cli(m: &Mount, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(BIN)
        .args(args)
        .env("SCRATCHFS_DB", &m.db)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn log_history_show_and_diff_while_mounted() {
    let m = Mount::new();
    m.sh_ok(
        "printf 'a\\nb\\n' > notes.md && printf 'a\\nB\\nc\\n' > notes.md && mv notes.md n2.md",
    );
    let (rc, out, _) = cli(&m, &["history", "n2.md"]);
    assert_eq!(rc, 0);
    let ops: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().nth(3).unwrap())
        .collect();
    assert_eq!(ops, ["create", "write", "write", "rename"], "{out}");
    assert!(out.contains("notes.md") && out.contains("n2.md"));
    assert_eq!(cli(&m, &["show", "n2.md@2"]).1, "a\nb\n");
    assert_eq!(cli(&m, &["show", "n2.md"]).1, "a\nB\nc\n");
    let (rc, diff, _) = cli(&m, &["diff", "n2.md@2"]);
    assert_eq!(rc, 0);
    assert!(diff.contains("-b\n+B\n+c\n"), "{diff}");
    let (_, log, _) = cli(&m, &["log", "--json"]);
    let rename = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["kind"] == "event" && v["op"] == "rename")
        .expect("rename event");
    assert_eq!(rename["new_path"], "n2.md");
    assert!(rename["exe"].as_str().unwrap().ends_with("/mv"));
    let (rc, _, err) = cli(&m, &["show", "n2.md@9"]);
    assert_eq!(rc, 1);
    assert_eq!(err.trim(), "scratchfs: n2.md@9: no such version");
}

#[test]
fn log_rejected_shows_the_reason() {
    let m = Mount::new();
    m.sh_ok(
        "printf base > f && python3 -c '
import os
a = os.open(\"f\", os.O_RDWR); b = os.open(\"f\", os.O_RDWR); os.read(a, 4); os.read(b, 4)
os.write(a, b\"A\"); os.fsync(a); os.write(b, b\"B\")
try: os.fsync(b)
except OSError: pass'",
    );
    let (rc, out, _) = cli(&m, &["log", "--rejected"]);
    assert_eq!(rc, 0);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.contains("rejected f") && out.contains("lost update"),
        "{out}"
    );
}

#[test]
fn fsck_is_clean_then_finds_one_corrupted_byte() {
    let m = Mount::new();
    m.sh_ok("head -c 100000 /dev/urandom > big && echo small > s");
    let (rc, out, _) = cli(&m, &["fsck"]);
    assert_eq!(rc, 0, "{out}");
    assert!(out.starts_with("fsck: clean"));
    // Flip one byte inside a stored blob (the mount keeps running).
    m.sql(
        "UPDATE blobs SET data = CAST(substr(data, 1, 99)
           || (CASE WHEN substr(data, 100, 1) = x'00' THEN x'01' ELSE x'00' END)
           || substr(data, 101) AS BLOB)
         WHERE id = (SELECT MIN(id) FROM blobs)",
    );
    assert_eq!(
        m.sql("SELECT MIN(size = length(data)) FROM blobs"),
        "1",
        "one byte changed, none added"
    );
    let (rc, out, err) = cli(&m, &["fsck"]);
    assert_eq!(rc, 1, "{out}{err}");
    assert!(out.contains("content does not match its blake3"), "{out}");
    assert!(err.contains("faults"), "{err}");
}
