//! The inspection commands (SPEC §2), run while the database is mounted.

mod common;
use common::*;
use std::process::Command;

#[test]
fn log_history_show_and_diff_while_mounted() {
    let m = Mount::new();
    m.sh_ok(
        "printf 'a\\nb\\n' > notes.md && printf 'a\\nB\\nc\\n' > notes.md && mv notes.md n2.md",
    );
    let (rc, out, _) = cli(&m, &["history", "n2.md"]);
    assert_eq!(rc, 0);
    assert!(
        out.starts_with("   v  time (UTC)"),
        "a header line first: {out}"
    );
    let ops: Vec<&str> = out
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(3).unwrap())
        .collect();
    assert_eq!(ops, ["create", "write", "rename"], "{out}");
    assert!(out.contains("notes.md") && out.contains("n2.md"));
    assert_eq!(cli(&m, &["show", "n2.md@1"]).1, "a\nb\n");
    assert_eq!(cli(&m, &["show", "n2.md"]).1, "a\nB\nc\n");
    let (rc, diff, _) = cli(&m, &["diff", "n2.md@1"]);
    assert_eq!(rc, 0);
    assert!(diff.contains("-b\n+B\n+c\n"), "{diff}");
    // A bare path is its last change (issue 33 item 9: it printed nothing): here the
    // rename, the same content; the write before it, against its create.
    let (rc, diff, err) = cli(&m, &["diff", "n2.md"]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        diff.starts_with("--- n2.md@2\n+++ n2.md@3\n") || diff.is_empty(),
        "{diff}"
    );
    m.sh_ok("printf 'a\nB\nc\nd\n' > n2.md");
    let (rc, diff, err) = cli(&m, &["diff", "n2.md"]);
    assert_eq!(rc, 0, "{err}");
    assert!(diff.contains("+d\n"), "{diff}");
    m.sh_ok("echo one > single.md");
    let (rc, _, err) = cli(&m, &["diff", "single.md"]);
    assert_eq!(rc, 1);
    assert!(err.contains("has one version"), "{err}");
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

#[test]
fn export_at_three_times() {
    let m = Mount::new();
    let t = |m: &Mount| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let _ = m;
        // @SECONDS.FRACTION, to the nanosecond.
        format!("@{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
    };
    m.sh_ok("echo one > a && mkdir d && echo x > d/x");
    let t1 = t(&m);
    m.sh_ok("echo two > a && mv d/x d/y && echo b > b");
    let t2 = t(&m);
    m.sh_ok("rm a && echo three > b");
    let out = tempfile::tempdir().unwrap();
    for (i, at) in [Some(&t1), Some(&t2), None].iter().enumerate() {
        let dir = out.path().join(i.to_string());
        let mut args = vec!["export", dir.to_str().unwrap()];
        if let Some(at) = at {
            args.extend(["--at", at.as_str()]);
        }
        let (rc, _, err) = cli(&m, &args);
        assert_eq!(rc, 0, "{err}");
    }
    let tree = |i: usize| {
        let o = Command::new("bash")
            .args([
                "-c",
                "find . -type f | sort | while read f; do echo \"$f=$(cat $f)\"; done",
            ])
            .current_dir(out.path().join(i.to_string()))
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(
        tree(0),
        "./a=one\n./d/x=x\n./findings.md=\n./plan.md=\n./state.json={}\n"
    );
    assert_eq!(
        tree(1),
        "./a=two\n./b=b\n./d/y=x\n./findings.md=\n./plan.md=\n./state.json={}\n"
    );
    assert_eq!(
        tree(2),
        "./b=three\n./d/y=x\n./findings.md=\n./plan.md=\n./state.json={}\n"
    );
}

#[test]
fn export_and_show_never_leave_their_target_with_a_crafted_database() {
    let m = Mount::new();
    m.sh_ok("echo evil > e1 && echo evil > e2 && echo fine > ok");
    let outside = tempfile::tempdir().unwrap();
    let abs = outside.path().join("abs-evil");
    // export writes the namespace log's names (issue 14): crafted there too.
    m.sql(&format!(
        "UPDATE versions SET path = '../evil' WHERE path = 'e1';
         UPDATE versions SET path = '{}' WHERE path = 'e2';
         UPDATE files SET path = '../evil' WHERE path = 'e1';
         UPDATE tree_log SET name = CAST('..' AS BLOB) WHERE name = CAST('e1' AS BLOB);
         UPDATE tree_log SET name = CAST('{}' AS BLOB) WHERE name = CAST('e2' AS BLOB);",
        abs.display(),
        abs.display()
    ));
    let target = outside.path().join("export");
    let (rc, _, err) = cli(&m, &["export", target.to_str().unwrap()]);
    assert_eq!(rc, 0, "{err}");
    assert!(err.contains("skipped unsafe path \"..\""), "{err}");
    assert!(err.contains("skipped unsafe path"), "{err}");
    assert!(!outside.path().join("evil").exists());
    assert!(!abs.exists());
    assert_eq!(read(target.join("ok")), "fine\n");
    // show prints to stdout only, whatever the name.
    let (rc, out, _) = cli(&m, &["show", "../evil"]);
    assert_eq!((rc, out.as_str()), (0, "evil\n"));
    assert!(!outside.path().join("evil").exists());
}

#[test]
fn gc_forgets_old_versions_only_when_asked_and_keeps_what_matters() {
    let mut m = Mount::new();
    m.sh_ok(
        "for i in 1 2 3 4 5 6; do head -c 200000 /dev/urandom > big; done; \
         seq 1 5000 > shrunk && echo short > shrunk; echo '{\"k\": 1}' > state.json; \
         for t in .a.swp .b.swp .c.swp .d.swp; do seq 1 5000 > $t && echo s > $t; done",
    );
    // The latest shrinking commits are of temporaries, which MANIFEST leaves out: it still
    // points at `shrunk`, and gc (on the mount and off it) keeps what it points at.
    assert!(
        read(m.path("MANIFEST")).contains("shrunk shrunk"),
        "{}",
        read(m.path("MANIFEST"))
    );
    // Neither flag: a usage error.
    let (rc, _, err) = cli(&m, &["gc"]);
    assert_eq!(rc, 2);
    assert!(
        err.contains("required arguments were not provided")
            && err.contains("--keep-last")
            && err.contains("--before"),
        "{err}"
    );
    let count = |m: &Mount| {
        m.sql("SELECT COUNT(*), (SELECT COALESCE(SUM(size), 0) FROM blobs) FROM versions")
    };
    let before = count(&m);
    let (rc, out, _) = cli(&m, &["gc", "--keep-last", "1", "--dry-run", "--json"]);
    assert_eq!(rc, 0);
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(r["versions"].as_u64().unwrap() > 5, "{out}");
    assert!(r["blob_bytes"].as_u64().unwrap() >= 900_000, "{out}");
    assert_eq!(count(&m), before, "dry run changed nothing");
    // While mounted, the daemon runs it and keeps what an open reader still reads.
    let out = m.sh_ok(&format!(
        "export SCRATCHFS_DB='{}'; exec 3<big; sum1=$({BIN} show big | md5sum); \
         head -c 200000 /dev/urandom > big; {BIN} gc --keep-last 1 --json >&2; \
         sum2=$(md5sum <&3); [ \"$sum1\" = \"$sum2\" ] && echo same",
        m.db.display()
    ));
    assert_eq!(
        out, "same\n",
        "an open reader of a forgotten version reads it whole"
    );
    assert_ne!(count(&m), before);
    // Again through the same daemon (its writer connection lives on between runs).
    m.sh_ok("echo one > again && echo two > again && echo three > again");
    let (rc, out, err) = cli(&m, &["gc", "--keep-last", "1"]);
    assert_eq!(rc, 0, "second gc while mounted: {out} {err}");
    assert_eq!(m.sh_ok("ls .history/again"), "000003\n");
    m.unmount();
    let (rc, out, _) = cli(&m, &["fsck"]);
    assert_eq!(rc, 0, "{out}");
    let (rc, out, _) = cli(&m, &["gc", "--before", "2100-01-01"]);
    assert_eq!(rc, 0, "{out}");
    m.start();
    assert_eq!(m.sh_ok("wc -c < big").trim(), "200000");
    assert_eq!(read(m.path("shrunk")), "short\n");
    // MANIFEST still points at the shrunk version, and it is still there.
    let manifest = read(m.path("MANIFEST"));
    let path = manifest
        .lines()
        .find(|l| l.contains("shrunk shrunk"))
        .and_then(|l| l.rsplit(": ").next())
        .unwrap_or_else(|| panic!("{manifest}"))
        .to_string();
    assert_eq!(m.sh_ok(&format!("tail -1 {path}")), "5000\n");
    assert_eq!(
        m.sh_ok("ls .history/big"),
        "000007\n",
        "only the current version of big is left"
    );
}

/// gc counts the content it drops whatever its form: an appended log's lines are pieces
/// kept inline (under 4 KiB), which the report counted as 0 bytes of content (the
/// 1,000,003-version pad of session 31: `0 bytes of content`).
#[test]
fn gc_counts_the_inline_content_it_drops() {
    let m = Mount::new();
    // Rewritten longer, not shorter (MANIFEST points at what a shrink replaced, which gc
    // keeps).
    m.sh_ok("for i in $(seq 1 200); do echo line-$i >> log; done && seq 1 2000 > log");
    let old: u64 = m
        .sql("SELECT MAX(size) FROM versions v JOIN files f ON f.id = v.file_id WHERE f.path = 'log' AND v.op != 'write'")
        .parse()
        .unwrap();
    assert_eq!(
        old,
        (1..=200)
            .map(|i| format!("line-{i}\n").len() as u64)
            .sum::<u64>()
    );
    let (rc, out, err) = cli(&m, &["gc", "--keep-last", "1", "--json"]);
    assert_eq!(rc, 0, "{out} {err}");
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["versions"], 200, "{out}");
    assert_eq!(r["blob_bytes"], 0, "{out}");
    assert_eq!(r["inline_bytes"].as_u64(), Some(old), "{out}");
    let reason = m.sql("SELECT reason FROM events WHERE op = 'gc'");
    assert!(
        reason.ends_with(&format!("forgot 200 versions and {old} bytes of content")),
        "{reason}"
    );
}

#[test]
fn every_command_speaks_json() {
    let m = Mount::new();
    m.sh_ok("printf 'a\\n' > f && printf 'b\\n' > f");
    let one = |args: &[&str]| -> serde_json::Value {
        let (rc, out, err) = cli(&m, args);
        assert_eq!(rc, 0, "{args:?}: {err}");
        serde_json::from_str(out.lines().last().unwrap())
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    };
    assert_eq!(one(&["show", "f@1", "--json"])["content"], "a\n");
    assert_eq!(one(&["history", "f", "--json"])["op"], "write");
    assert!(
        one(&["diff", "f@1", "--json"])["diff"]
            .as_str()
            .unwrap()
            .contains("-a\n+b\n")
    );
    assert_eq!(one(&["fsck", "--json"])["faults"], serde_json::json!([]));
    assert_eq!(one(&["restore", "f@1", "--json"])["restored"], 1);
    let dir = m.dir.path().join("exported");
    assert_eq!(
        one(&["export", dir.to_str().unwrap(), "--json"])["files"],
        4
    );
    assert_eq!(one(&["log", "--json"])["kind"], "version");
}
