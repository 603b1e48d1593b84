//! History views (SPEC §7) and restore (SPEC §2): nothing is lost.

mod common;
use common::*;
use std::process::Command;

#[test]
fn history_lists_every_version_in_order_and_follows_renames() {
    let m = Mount::new();
    m.sh_ok("for i in $(seq 1 11); do echo v$i > a; done; mv a b; mkdir -p d && echo x > d/n");
    assert_eq!(
        m.sh_ok("ls -A | grep -c history || true").trim(),
        "0",
        "hidden from ls"
    );
    let listing = m.sh_ok("ls .history/b");
    let names: Vec<&str> = listing.lines().collect();
    assert_eq!(
        names.len(),
        12,
        "11 writes (the first creates), rename: {listing}"
    );
    assert_eq!(names[0], "000001");
    assert_eq!(names[11], "000012");
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "ls order is numeric order");
    assert_eq!(read(m.path(".history/b/000010")), "v10\n");
    assert_eq!(
        read(m.path(".history/b/10")),
        "v10\n",
        "unpadded numbers resolve too"
    );
    assert_eq!(m.sh_ok("ls .history/d"), "n\n");
    let x = m.sh_ok("getfattr -n user.scratchfs.version --only-values .history/b/000003");
    assert_eq!(x, "3");
    for cmd in [
        "echo x > .history/b/000001",
        "rm .history/b/000001",
        "mkdir .history/z",
    ] {
        let e = m.sh(cmd);
        assert!(
            String::from_utf8_lossy(&e.stderr).contains("Permission denied"),
            "{cmd}"
        );
    }
    // Copying a version back makes it current again.
    m.sh_ok("cp .history/b/000004 b");
    assert_eq!(read(m.path("b")), "v4\n");
    let listed = Mount::with_args(&["--list-views"]);
    assert!(listed.sh_ok("ls -A").contains(".history\n"));
}

#[test]
fn archive_keeps_deleted_files_with_who_and_when() {
    let m = Mount::new();
    m.sh_ok("mkdir -p notes && echo keep me > notes/old.md && echo bye > g");
    let status = Command::new("bash")
        .args(["-c", "rm notes/old.md g"])
        .current_dir(&m.mnt)
        .env("SCRATCHFS_WRITER", "cleaner")
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(m.sh_ok("ls .archive"), "g\nnotes\n");
    assert_eq!(read(m.path(".archive/notes/old.md")), "keep me\n");
    let x = m.sh_ok("getfattr -d .archive/g");
    assert!(x.contains("user.scratchfs.deleted_by=\"cleaner\""), "{x}");
    assert!(x.contains("user.scratchfs.deleted=\"20"), "{x}");
    // History of the deleted file is there too.
    assert_eq!(m.sh_ok("ls .history/g"), "000001\n");
    // Restoring both ways.
    m.sh_ok("cp .archive/notes/old.md notes/old.md && cp .history/g/000001 g");
    assert_eq!(read(m.path("notes/old.md")), "keep me\n");
    assert_eq!(read(m.path("g")), "bye\n");
    // Temporary files renamed over their target (sed -i) are not "deleted".
    m.sh_ok("echo abc > s && sed -i s/a/b/ s");
    assert!(!m.sh_ok("ls .archive").contains("sed"));
}

#[test]
fn restore_while_mounted_leaves_no_stale_cache_and_offline_too() {
    let mut m = Mount::new();
    m.sh_ok("echo one > f && echo 'two two' > f && cat f > /dev/null");
    // A reader holds the file open across the restore.
    let out = m.sh_ok(&format!(
        "exec 3<f; head -c 3 <&3 >/dev/null; SCRATCHFS_DB='{}' {BIN} restore f@1 && cat f && stat -c %s f",
        m.db.display()
    ));
    assert_eq!(out, "f: version 1 restored\none\n4\n");
    let ops: Vec<String> = m.versions("f").into_iter().map(|v| v.1).collect();
    assert_eq!(ops, ["create", "write", "restore"]);
    let (rc, _, err) = cli(&m, &["restore", "f@9"]);
    assert_eq!(rc, 1);
    assert!(err.contains("no such version"), "{err}");
    m.unmount();
    let (rc, _, err) = cli(&m, &["restore", "f@2"]);
    assert_eq!(rc, 0, "{err}");
    m.start();
    assert_eq!(read(m.path("f")), "two two\n");
    assert_eq!(m.versions("f").last().unwrap().1, "restore");
}

/// MANIFEST names deleted content and commits that dropped more than half a file, with
/// the path that gives the content back.
#[test]
fn manifest_points_at_what_deletion_and_compaction_dropped() {
    let m = Mount::new();
    m.sh_ok("seq 1 1000 > big.txt && echo tiny > big.txt && echo bye > g && rm g");
    let text = read(m.path("MANIFEST"));
    assert!(text.contains("g deleted by anonymous"), "{text}");
    assert!(text.contains(": .archive/g"), "{text}");
    let shrunk = text
        .lines()
        .find(|l| l.contains("big.txt shrunk"))
        .unwrap_or_else(|| panic!("{text}"));
    let path = shrunk.rsplit(": ").next().unwrap();
    assert_eq!(path, ".history/big.txt/1");
    assert_eq!(m.sh_ok(&format!("tail -1 {path}")), "1000\n");
    // Restored files drop out of the list.
    m.sh_ok("cp .archive/g g");
    assert!(!read(m.path("MANIFEST")).contains("g deleted"));
}

/// Names that differ only in non-UTF-8 bytes (which an older store kept as the same
/// `k\u{FFFD}`): each `.history/<name>/` shows that file's own versions.
#[test]
fn history_of_names_with_non_utf8_bytes_is_their_own() {
    let m = Mount::new();
    m.sh_ok(r#"a=$(printf 'k\377'); b=$(printf 'k\376'); echo one > "$a"; echo two > "$b"; echo three >> "$a""#);
    assert_eq!(
        m.sh_ok(r#"a=$(printf 'k\377'); cat .history/"$a"/1 .history/"$a"/2"#),
        "one\none\nthree\n"
    );
    assert_eq!(
        m.sh_ok(r#"b=$(printf 'k\376'); cat .history/"$b"/1; ls .history/"$b""#),
        "two\n000001\n"
    );
}
