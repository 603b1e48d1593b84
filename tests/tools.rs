//! Ordinary tools on a real mount: shell redirections and coreutils, python3, jq, vim,
//! git, rsync, tar, the inspection tools, sqlite3 on the live database, and many
//! concurrent appenders. Every test checks what the mount shows AND what the database
//! recorded (versions: number, op, size; for most, the blake3 of the head version and the
//! bytes reassembled from `extents`/`blobs` with the sqlite3 shell).

mod common;
use common::*;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// Runs a bash script (with `set -euo pipefail`) in the mount; it must succeed.
fn run(m: &Mount, script: &str) -> String {
    m.sh_ok(&format!("set -euo pipefail\nexport TZ=UTC\n{script}"))
}

fn b3(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

fn q(s: &str) -> String {
    s.replace('\'', "''")
}

fn v(version: i64, op: &str, size: u64) -> (i64, String, u64) {
    (version, op.to_string(), size)
}

/// The head version of a live path: (versions.id, op, size, blake3, file_id).
fn head_row(m: &Mount, path: &str) -> (i64, String, u64, String, i64) {
    let out = m.sql(&format!(
        "SELECT id, op, size, blake3, file_id FROM heads
         WHERE current_path = '{}' AND deleted_ns IS NULL",
        q(path)
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "expected one live file row for {path:?}, got {out:?}"
    );
    let f: Vec<&str> = lines[0].split('|').collect();
    (
        f[0].parse().unwrap(),
        f[1].to_string(),
        f[2].parse().unwrap(),
        f[3].to_string(),
        f[4].parse().unwrap(),
    )
}

/// The content of version row `vid`, reassembled from its stream's extents with the
/// sqlite3 shell (independent of scratchfs's own read path). Gaps between extents are
/// holes (zeros, docs/schema.md "Content model"); extents never overlap, and the last one
/// reaches the version's end.
fn version_bytes(m: &Mount, vid: i64) -> Vec<u8> {
    let size: usize = m
        .sql(&format!("SELECT size FROM versions WHERE id = {vid}"))
        .parse()
        .unwrap();
    let out = m.sql(&format!(
        "SELECT e.offset, e.len, hex(substr(COALESCE(e.data, b.data), e.blob_off + 1, e.len))
         FROM versions v JOIN extents e ON e.stream = v.stream LEFT JOIN blobs b ON b.id = e.blob
         WHERE v.id = {vid} AND e.offset < v.size ORDER BY e.offset"
    ));
    let mut buf = vec![0u8; size];
    let mut covered = 0usize;
    let mut reached = 0usize;
    for l in out.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = l.split('|').collect();
        let off: usize = f[0].parse().unwrap();
        let bytes: Vec<u8> = (0..f[2].len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&f[2][i..i + 2], 16).unwrap())
            .collect();
        assert!(off >= covered, "extents of version {vid} overlap at {off}");
        reached = off + bytes.len();
        let end = reached.min(size);
        buf[off..end].copy_from_slice(&bytes[..end - off]);
        covered = end;
    }
    assert!(
        size == 0 || reached >= size,
        "the extents of version {vid} end at {reached}, before its {size} bytes"
    );
    buf
}

/// The mount shows `expected` at `path`, and the head version recorded for `path` has
/// that size, that blake3, and those bytes in the store.
fn assert_content(m: &Mount, path: &str, expected: &[u8]) {
    let seen = std::fs::read(m.path(path)).unwrap_or_else(|e| panic!("read {path}: {e}"));
    assert_eq!(
        String::from_utf8_lossy(&seen),
        String::from_utf8_lossy(expected),
        "content of {path} through the mount"
    );
    assert_eq!(seen, expected, "bytes of {path} through the mount");
    let (vid, _op, size, hash, _) = head_row(m, path);
    assert_eq!(
        size,
        expected.len() as u64,
        "versions.size of the head of {path}"
    );
    assert_eq!(hash, b3(expected), "versions.blake3 of the head of {path}");
    assert_eq!(m.head_hash(path), b3(expected));
    assert_eq!(
        version_bytes(m, vid),
        expected,
        "bytes of {path}'s head in the store"
    );
}

fn count(m: &Mount, query: &str) -> i64 {
    m.sql(query).parse().unwrap()
}

/// Rows of the events table for `path`: (op, new_path).
fn events(m: &Mount, path: &str) -> Vec<(String, String)> {
    m.sql(&format!(
        "SELECT op, ifnull(new_path, '') FROM events WHERE path = '{}' ORDER BY id",
        q(path)
    ))
    .lines()
    .filter(|l| !l.is_empty())
    .map(|l| {
        let (a, b) = l.split_once('|').unwrap();
        (a.to_string(), b.to_string())
    })
    .collect()
}

/// A directory outside the mount with a small tree: text, an empty file, a binary file
/// of 100 KB, a subdirectory two levels deep, non-default modes and old mtimes.
fn outside_tree() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("scratchfs-src-")
        .tempdir()
        .unwrap();
    let p = d.path();
    std::fs::create_dir_all(p.join("sub/deeper")).unwrap();
    std::fs::write(p.join("a.txt"), "alpha\nbeta\n").unwrap();
    std::fs::write(p.join("empty"), "").unwrap();
    let bin: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(p.join("sub/data.bin"), &bin).unwrap();
    std::fs::write(p.join("sub/deeper/notes.md"), "# notes\n\n- one\n- two\n").unwrap();
    let st = Command::new("bash")
        .arg("-c")
        .arg(
            "set -e; chmod 600 a.txt; chmod 755 sub/deeper/notes.md; \
             touch -d '2021-02-03 04:05:06' a.txt empty sub/data.bin sub/deeper/notes.md sub/deeper sub; \
             touch -d '2021-02-03 04:05:07' .",
        )
        .current_dir(p)
        .status()
        .unwrap();
    assert!(st.success());
    d
}

/// Files under `dir` (relative path → bytes).
fn tree_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, d: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                walk(base, &p, out);
            } else {
                let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

// ---------------------------------------------------------------------------------------
// Shell
// ---------------------------------------------------------------------------------------

#[test]
fn shell_echo_redirect_creates_and_double_redirect_appends() {
    let m = Mount::new();
    run(&m, "echo hello > e.txt; echo world >> e.txt");
    assert_content(&m, "e.txt", b"hello\nworld\n");
    assert_eq!(
        m.versions("e.txt"),
        vec![v(1, "create", 6), v(2, "append", 12)]
    );
    // `>>` on a file that does not exist yet: one version, its first commit.
    run(&m, "echo first >> new.log");
    assert_content(&m, "new.log", b"first\n");
    assert_eq!(m.versions("new.log"), vec![v(1, "create", 6)]);
    // Provenance: the shell wrote it.
    let exe = m.sql("SELECT exe FROM version_log WHERE path = 'e.txt' AND version = 2");
    assert!(exe.ends_with("bash"), "exe of the append: {exe:?}");
}

/// `> f` on a file that already has content: SPEC §4 says a write handle commits at close
/// as one version ("if anything changed, as one SQLite transaction"). The shell, cp, tee
/// and python's open('w') all open an existing file with O_TRUNC; each such write must
/// add exactly one version holding the new content, with no intermediate empty version.
#[test]
fn overwrite_of_existing_file_with_o_trunc_commits_one_version() {
    let m = Mount::new();
    let src = tempfile::Builder::new()
        .prefix("scratchfs-src-")
        .tempdir()
        .unwrap();
    std::fs::write(src.path().join("c"), "copied in\n").unwrap();
    let s = src.path().display();
    run(&m, "printf 'old content\\n' > f");
    assert_eq!(m.versions("f"), vec![v(1, "create", 12)]);
    run(&m, "echo replaced > f");
    assert_content(&m, "f", b"replaced\n");
    run(&m, &format!("cp {s}/c f"));
    assert_content(&m, "f", b"copied in\n");
    run(&m, "echo teed | tee f > /dev/null");
    assert_content(&m, "f", b"teed\n");
    run(&m, "python3 -c \"open('f', 'w').write('python\\n')\"");
    assert_content(&m, "f", b"python\n");
    let vs = m.versions("f");
    // One version per close: 9, 10, 5 and 7 bytes; no empty version in between.
    assert_eq!(
        vs.iter().map(|x| (x.0, x.2)).collect::<Vec<_>>(),
        vec![(1, 12), (2, 9), (3, 10), (4, 5), (5, 7)],
        "versions of f (version, size); all: {vs:?}"
    );
    for x in &vs[2..] {
        assert_eq!(x.1, "write", "op of {x:?}");
    }
}

/// SPEC §4: until a write handle commits, other openers see the previous version. An
/// O_TRUNC open that has not closed yet must not empty the file for readers.
#[test]
fn o_trunc_open_keeps_previous_version_visible_until_close() {
    let m = Mount::new();
    run(&m, "printf 'old content\\n' > f");
    let out = run(
        &m,
        r#"python3 - <<'EOF'
w = open('f', 'w')
print(repr(open('f').read()))
w.write('new\n')
print(repr(open('f').read()))
w.close()
print(repr(open('f').read()))
EOF"#,
    );
    assert_eq!(
        out, "'old content\\n'\n'old content\\n'\n'new\\n'\n",
        "reads of f: after open(O_TRUNC), after write, after close"
    );
    assert_content(&m, "f", b"new\n");
    let vs = m.versions("f");
    assert_eq!(
        vs.iter().map(|x| (x.0, x.2)).collect::<Vec<_>>(),
        vec![(1, 12), (2, 4)],
        "versions of f (version, size); all: {vs:?}"
    );
}

#[test]
fn shell_heredoc_writes_file() {
    let m = Mount::new();
    run(
        &m,
        "cat > notes.md <<'EOF'\n# Title\n\nsome $text with `ticks`\nEOF\n",
    );
    let want = b"# Title\n\nsome $text with `ticks`\n";
    assert_content(&m, "notes.md", want);
    assert_eq!(
        m.versions("notes.md"),
        vec![v(1, "create", want.len() as u64)]
    );
}

#[test]
fn shell_printf_writes_formatted_file() {
    let m = Mount::new();
    run(
        &m,
        r"printf '%s=%d\n' a 1 b 22 > kv.txt; printf 'no newline' > raw",
    );
    assert_content(&m, "kv.txt", b"a=1\nb=22\n");
    assert_content(&m, "raw", b"no newline");
    assert_eq!(m.versions("kv.txt"), vec![v(1, "create", 9)]);
    assert_eq!(m.versions("raw"), vec![v(1, "create", 10)]);
}

#[test]
fn tee_writes_and_passes_through() {
    let m = Mount::new();
    let out = run(&m, "printf 'one\\ntwo\\n' | tee t.txt");
    assert_eq!(out, "one\ntwo\n");
    assert_content(&m, "t.txt", b"one\ntwo\n");
    assert_eq!(m.versions("t.txt"), vec![v(1, "create", 8)]);
    let exe = m.sql("SELECT exe FROM version_log WHERE path = 't.txt' AND version = 1");
    assert!(exe.ends_with("/tee"), "exe of tee's version: {exe:?}");
}

#[test]
fn tee_a_appends() {
    let m = Mount::new();
    run(
        &m,
        "echo one | tee -a log.txt >/dev/null; echo two | tee -a log.txt >/dev/null",
    );
    assert_content(&m, "log.txt", b"one\ntwo\n");
    assert_eq!(
        m.versions("log.txt"),
        vec![v(1, "create", 4), v(2, "append", 8)]
    );
}

#[test]
fn cp_copies_a_file_into_the_mount() {
    let m = Mount::new();
    let src = outside_tree();
    let s = src.path().display();
    run(
        &m,
        &format!("cp {s}/sub/data.bin copy.bin; cp {s}/a.txt a.txt; cp a.txt a2.txt"),
    );
    let bin = std::fs::read(src.path().join("sub/data.bin")).unwrap();
    assert_content(&m, "copy.bin", &bin);
    assert_content(&m, "a.txt", b"alpha\nbeta\n");
    assert_content(&m, "a2.txt", b"alpha\nbeta\n");
    assert_eq!(m.versions("copy.bin"), vec![v(1, "create", 100_000)]);
    assert_eq!(m.versions("a.txt"), vec![v(1, "create", 11)]);
    assert_eq!(m.versions("a2.txt"), vec![v(1, "create", 11)]);
    // Copy mode: plain cp applies the umask-ed source mode.
    let mode = run(&m, "stat -c %a a.txt");
    assert_eq!(mode.trim(), "600");
}

#[test]
fn cp_a_copies_a_tree_into_the_mount_preserving_modes_and_times() {
    let m = Mount::new();
    let src = outside_tree();
    let s = src.path().display();
    // xattrs are unsupported (EOPNOTSUPP): cp -a must tolerate it silently.
    let out = m.sh(&format!("cp -a {s} tree"));
    assert!(
        out.status.success(),
        "cp -a failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "cp -a printed warnings"
    );
    run(&m, &format!("diff -r {s} tree"));
    let stats_src = run(
        &m,
        &format!("cd {s} && find . -printf '%p %y %m %T@\\n' | sort"),
    );
    let stats_mnt = run(&m, "cd tree && find . -printf '%p %y %m %T@\\n' | sort");
    assert_eq!(
        stats_mnt, stats_src,
        "paths, types, modes and mtimes after cp -a"
    );
    for (rel, bytes) in tree_files(src.path()) {
        let p = format!("tree/{rel}");
        assert_content(&m, &p, &bytes);
        let vs = m.versions(&p);
        if bytes.is_empty() {
            assert_eq!(vs, vec![v(1, "create", 0)], "versions of {p}");
        } else {
            assert_eq!(
                vs,
                vec![v(1, "create", bytes.len() as u64)],
                "versions of {p}"
            );
        }
    }
    // Directories: a mkdir event, then the attribute changes cp -a makes (setattr).
    for d in ["tree", "tree/sub", "tree/sub/deeper"] {
        let ev = events(&m, d);
        assert_eq!(
            ev.first().map(|e| e.0.as_str()),
            Some("mkdir"),
            "events of {d}: {ev:?}"
        );
        assert!(
            ev[1..].iter().all(|e| e.0 == "setattr"),
            "events of {d}: {ev:?}"
        );
        assert!(m.versions(d).is_empty(), "versions of directory {d}");
    }
}

#[test]
fn cp_a_copies_a_tree_out_of_the_mount() {
    let m = Mount::new();
    run(
        &m,
        "mkdir -p proj/src && printf 'fn main() {}\\n' > proj/src/main.rs && echo '# p' > proj/README.md \
         && chmod 640 proj/README.md && touch -d '2022-01-01 00:00:00' proj/README.md",
    );
    let before = count(&m, "SELECT count(*) FROM versions");
    let out = tempfile::Builder::new()
        .prefix("scratchfs-out-")
        .tempdir()
        .unwrap();
    let o = out.path().display();
    run(&m, &format!("cp -a proj {o}/proj && diff -r proj {o}/proj"));
    let a = run(&m, "cd proj && find . -printf '%p %y %m %T@\\n' | sort");
    let b = run(
        &m,
        &format!("cd {o}/proj && find . -printf '%p %y %m %T@\\n' | sort"),
    );
    assert_eq!(
        a, b,
        "paths, types, modes and mtimes after cp -a out of the mount"
    );
    assert_eq!(read(out.path().join("proj/src/main.rs")), "fn main() {}\n");
    assert_content(&m, "proj/src/main.rs", b"fn main() {}\n");
    assert_content(&m, "proj/README.md", b"# p\n");
    // Reading creates no version.
    assert_eq!(count(&m, "SELECT count(*) FROM versions"), before);
    assert_eq!(m.versions("proj/README.md"), vec![v(1, "create", 4)]);
}

#[test]
fn xattrs_are_read_only_provenance_and_links_and_fifos_are_refused() {
    let m = Mount::new();
    run(&m, "echo x > f");
    let o = m.sh("getfattr -d f");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("user.scratchfs.version=\"1\""),
        "getfattr: {:?}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = m.sh("setfattr -n user.k -v v f");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("Operation not supported"));
    for cmd in ["ln -s f sl", "ln f hl", "mkfifo ff"] {
        let o = m.sh(cmd);
        assert!(!o.status.success(), "{cmd} succeeded");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("Operation not permitted"),
            "{cmd}: {:?}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert_eq!(
        run(&m, "ls -A | sort"),
        "MANIFEST\nf\nfindings.md\nplan.md\nstate.json\n"
    );
    assert_content(&m, "f", b"x\n");
    assert_eq!(m.versions("f"), vec![v(1, "create", 2)]);
    for p in ["sl", "hl", "ff"] {
        assert!(
            m.versions(p).is_empty(),
            "versions recorded for refused {p}"
        );
    }
}

#[test]
fn mv_renames_and_the_history_follows_the_file() {
    let m = Mount::new();
    run(&m, "echo data > a; mkdir d; mv a d/b");
    assert!(!m.path("a").exists());
    assert_content(&m, "d/b", b"data\n");
    assert_eq!(m.versions("a"), vec![v(1, "create", 5)]);
    assert_eq!(m.versions("d/b"), vec![v(2, "rename", 5)]);
    let lineage = m.sql("SELECT DISTINCT file_id FROM versions WHERE path IN ('a', 'd/b')");
    assert_eq!(
        lineage.lines().count(),
        1,
        "a and d/b on one lineage: {lineage}"
    );
    assert_eq!(head_row(&m, "d/b").4.to_string(), lineage);
    assert_eq!(
        events(&m, "a"),
        vec![("rename".to_string(), "d/b".to_string())]
    );
    assert_eq!(count(&m, "SELECT count(*) FROM files WHERE path = 'a'"), 0);
    // Moving the directory moves the file's path; its versions keep their paths.
    run(&m, "mv d e && cat e/b");
    assert_content(&m, "e/b", b"data\n");
    assert_eq!(head_row(&m, "e/b").4.to_string(), lineage);
    assert_eq!(m.versions("d/b"), vec![v(2, "rename", 5)]);
    assert_eq!(
        events(&m, "d"),
        vec![
            ("mkdir".to_string(), String::new()),
            ("rename".to_string(), "e".to_string())
        ]
    );
}

#[test]
fn mv_over_existing_file_continues_the_target_history() {
    let m = Mount::new();
    run(
        &m,
        "echo v1 > target; echo v2 >> target; printf 'replacement\\n' > src",
    );
    let target_fid = head_row(&m, "target").4;
    let src_fid = head_row(&m, "src").4;
    run(&m, "mv src target");
    assert!(!m.path("src").exists());
    assert_content(&m, "target", b"replacement\n");
    assert_eq!(
        m.versions("target"),
        vec![v(1, "create", 3), v(2, "append", 6), v(3, "rename", 12)]
    );
    let (_, op, _, _, fid) = head_row(&m, "target");
    assert_eq!(op, "rename");
    assert_eq!(
        fid, target_fid,
        "the rename over target continues target's lineage"
    );
    assert_eq!(
        m.sql("SELECT DISTINCT file_id FROM versions WHERE path = 'target'"),
        target_fid.to_string()
    );
    // The source's own versions are kept under its path.
    assert_eq!(m.versions("src"), vec![v(1, "create", 12)]);
    assert_eq!(
        m.sql("SELECT DISTINCT file_id FROM versions WHERE path = 'src'"),
        src_fid.to_string()
    );
    assert_eq!(
        events(&m, "src"),
        vec![("rename".to_string(), "target".to_string())]
    );
    // The replaced content is still there: version 2 of target.
    let vid3: i64 = m
        .sql(&format!(
            "SELECT id FROM versions WHERE file_id = {target_fid} AND version = 2"
        ))
        .parse()
        .unwrap();
    assert_eq!(version_bytes(&m, vid3), b"v1\nv2\n");
}

#[test]
fn rm_keeps_versions_and_records_an_unlink_event() {
    let m = Mount::new();
    run(
        &m,
        "echo keep me > gone; echo more >> gone; rm gone; test ! -e gone",
    );
    assert!(!run(&m, "ls -A").contains("gone"));
    assert_eq!(
        m.versions("gone"),
        vec![v(1, "create", 8), v(2, "append", 13)]
    );
    assert_eq!(
        count(
            &m,
            "SELECT count(*) FROM files WHERE path = 'gone' AND deleted_ns IS NOT NULL"
        ),
        1
    );
    assert_eq!(
        events(&m, "gone"),
        vec![("unlink".to_string(), String::new())]
    );
    assert_eq!(m.head_hash("gone"), "", "no live file at a removed path");
    let vid: i64 = m
        .sql("SELECT id FROM versions WHERE path = 'gone' AND version = 2")
        .parse()
        .unwrap();
    assert_eq!(version_bytes(&m, vid), b"keep me\nmore\n");
    let hash = m.sql("SELECT blake3 FROM versions WHERE path = 'gone' AND version = 2");
    assert_eq!(hash, b3(b"keep me\nmore\n"));
    // The path can be reused, and its history goes on (issue 11): the same lineage,
    // the next number.
    run(&m, "echo again > gone");
    assert_content(&m, "gone", b"again\n");
    assert_eq!(
        count(
            &m,
            "SELECT count(DISTINCT file_id) FROM versions WHERE path = 'gone'"
        ),
        1
    );
    assert_eq!(
        m.versions("gone"),
        vec![v(1, "create", 8), v(2, "append", 13), v(3, "create", 6)]
    );
}

#[test]
fn mkdir_p_and_rmdir() {
    let m = Mount::new();
    run(
        &m,
        "mkdir -p a/b/c; mkdir -p a/b/c; test -d a/b/c; echo x > a/b/c/f",
    );
    assert_content(&m, "a/b/c/f", b"x\n");
    assert_eq!(m.versions("a/b/c/f"), vec![v(1, "create", 2)]);
    // rmdir of a non-empty directory fails.
    let o = m.sh("rmdir a/b/c");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("Directory not empty"));
    run(&m, "rm a/b/c/f; rmdir a/b/c; rmdir -p a/b; test ! -e a");
    assert_eq!(
        run(&m, "ls -A | sort"),
        "MANIFEST\nfindings.md\nplan.md\nstate.json\n"
    );
    for d in ["a", "a/b", "a/b/c"] {
        assert_eq!(
            events(&m, d),
            vec![
                ("mkdir".to_string(), String::new()),
                ("rmdir".to_string(), String::new())
            ],
            "events of {d}"
        );
        assert!(m.versions(d).is_empty(), "directories have no versions");
    }
    assert_eq!(
        count(&m, "SELECT count(*) FROM events WHERE op = 'mkdir'"),
        3
    );
}

#[test]
fn touch_creates_one_version_and_touching_again_adds_none() {
    let m = Mount::new();
    run(&m, "touch t");
    assert_content(&m, "t", b"");
    assert_eq!(m.versions("t"), vec![v(1, "create", 0)]);
    run(&m, "touch t; touch -d '2020-05-06 07:08:09' t");
    assert_eq!(
        run(&m, "stat -c %y t").trim(),
        "2020-05-06 07:08:09.000000000 +0000"
    );
    assert_eq!(m.versions("t"), vec![v(1, "create", 0)]);
    // The same on a file with content, and on a default-layout file.
    run(&m, "echo c > u; touch u plan.md state.json");
    assert_eq!(m.versions("u"), vec![v(1, "create", 2)]);
    assert_eq!(m.versions("plan.md"), vec![v(1, "create", 0)]);
    assert_eq!(m.versions("state.json"), vec![v(1, "create", 3)]);
    assert_content(&m, "u", b"c\n");
    assert_content(&m, "state.json", b"{}\n");
}

#[test]
fn truncate_s_shrinks_and_extends() {
    let m = Mount::new();
    run(&m, "printf 'hello world' > f; truncate -s 5 f");
    assert_content(&m, "f", b"hello");
    run(&m, "truncate -s 8 f");
    assert_content(&m, "f", b"hello\0\0\0");
    run(&m, "truncate -s 0 f");
    assert_content(&m, "f", b"");
    assert_eq!(
        m.versions("f"),
        vec![
            v(1, "create", 11),
            v(2, "truncate", 5),
            v(3, "truncate", 8),
            v(4, "truncate", 0)
        ]
    );
    // On a missing file truncate creates it.
    run(&m, "truncate -s 3 z");
    assert_content(&m, "z", b"\0\0\0");
    assert_eq!(m.versions("z"), vec![v(1, "create", 3)]);
    assert_eq!(run(&m, "stat -c %s f z"), "0\n3\n");
}

#[test]
fn sed_i_replaces_the_file_as_a_new_version_of_its_path() {
    let m = Mount::new();
    run(
        &m,
        "printf 'apple\\nbanana\\n' > fruit.txt; chmod 640 fruit.txt",
    );
    let fid = head_row(&m, "fruit.txt").4;
    run(&m, "sed -i 's/an/AN/g' fruit.txt");
    assert_content(&m, "fruit.txt", b"apple\nbANANa\n");
    assert_eq!(
        m.versions("fruit.txt"),
        vec![v(1, "create", 13), v(2, "rename", 13)]
    );
    assert_eq!(
        head_row(&m, "fruit.txt").4,
        fid,
        "sed -i continues the file's lineage"
    );
    assert_eq!(run(&m, "stat -c %a fruit.txt").trim(), "640");
    // sed's temporary file is gone from the tree (its versions are kept).
    assert_eq!(
        run(&m, "ls -A | sort"),
        "MANIFEST\nfindings.md\nfruit.txt\nplan.md\nstate.json\n"
    );
    let tmp = m.sql("SELECT DISTINCT path FROM versions WHERE path LIKE 'sed%'");
    assert_eq!(tmp.lines().count(), 1, "sed's temporary: {tmp:?}");
    let exe = m.sql("SELECT exe FROM version_log WHERE path = 'fruit.txt' AND version = 2");
    assert!(exe.ends_with("/sed"), "exe of the rename version: {exe:?}");
}

// ---------------------------------------------------------------------------------------
// python3
// ---------------------------------------------------------------------------------------

#[test]
fn python_write() {
    let m = Mount::new();
    run(
        &m,
        "python3 -c \"open('p.txt', 'w').write('x' * 5000 + '\\n')\"",
    );
    let want = format!("{}\n", "x".repeat(5000));
    assert_content(&m, "p.txt", want.as_bytes());
    assert_eq!(m.versions("p.txt"), vec![v(1, "create", 5001)]);
    let exe = m.sql("SELECT exe FROM version_log WHERE path = 'p.txt' AND version = 1");
    assert!(exe.contains("python"), "exe: {exe:?}");
}

#[test]
fn python_append() {
    let m = Mount::new();
    run(
        &m,
        r#"python3 - <<'EOF'
for i in range(3):
    with open('a.log', 'a') as f:
        f.write(f'line {i}\n')
EOF"#,
    );
    assert_content(&m, "a.log", b"line 0\nline 1\nline 2\n");
    assert_eq!(
        m.versions("a.log"),
        vec![v(1, "create", 7), v(2, "append", 14), v(3, "append", 21)]
    );
}

#[test]
fn python_fsync_then_os_replace_gives_target_a_rename_version() {
    let m = Mount::new();
    run(&m, "echo '{\"v\": 1}' > cfg.json");
    let fid = head_row(&m, "cfg.json").4;
    run(
        &m,
        r#"python3 - <<'EOF'
import os
with open('cfg.json.tmp', 'w') as f:
    f.write('{"v": 2, "items": [1, 2, 3]}\n')
    f.flush()
    os.fsync(f.fileno())
os.replace('cfg.json.tmp', 'cfg.json')
EOF"#,
    );
    let want = b"{\"v\": 2, \"items\": [1, 2, 3]}\n";
    assert_content(&m, "cfg.json", want);
    assert!(!m.path("cfg.json.tmp").exists());
    assert_eq!(
        m.versions("cfg.json"),
        vec![v(1, "create", 9), v(2, "rename", want.len() as u64)]
    );
    assert_eq!(head_row(&m, "cfg.json").4, fid);
    // fsync committed the temporary once; the close after it had nothing new.
    assert_eq!(
        m.versions("cfg.json.tmp"),
        vec![v(1, "create", want.len() as u64)]
    );
}

#[test]
fn python_50mb_file_in_1mb_chunks() {
    let m = Mount::new();
    let out = run(
        &m,
        r#"python3 - <<'EOF'
import hashlib, os, random
rng = random.Random(42)
h = hashlib.sha256()
with open('big.bin', 'wb') as f:
    for i in range(50):
        chunk = rng.randbytes(1 << 20)
        h.update(chunk)
        assert f.write(chunk) == 1 << 20
print(h.hexdigest())
print(os.stat('big.bin').st_size)
EOF"#,
    );
    let mut lines = out.lines();
    let written_sha = lines.next().unwrap().to_string();
    assert_eq!(lines.next().unwrap(), "52428800");
    let read_sha = run(&m, "sha256sum < big.bin | cut -d' ' -f1");
    assert_eq!(
        read_sha.trim(),
        written_sha,
        "sha256 of big.bin read back through the mount"
    );
    assert_eq!(run(&m, "stat -c %s big.bin").trim(), "52428800");
    assert_eq!(m.versions("big.bin"), vec![v(1, "create", 52_428_800)]);
    let bytes = std::fs::read(m.path("big.bin")).unwrap();
    assert_eq!(bytes.len(), 52_428_800);
    assert_eq!(
        m.head_hash("big.bin"),
        b3(&bytes),
        "versions.blake3 of big.bin"
    );
    let stored: i64 = count(
        &m,
        "SELECT sum(e.len) FROM versions v JOIN extents e ON e.stream = v.stream
         WHERE v.path = 'big.bin' AND v.version = 1",
    );
    assert_eq!(stored, 52_428_800, "extents of big.bin's version 2");
}

// ---------------------------------------------------------------------------------------
// jq, vim, git, rsync, tar
// ---------------------------------------------------------------------------------------

#[test]
fn jq_to_temp_then_mv_over_state_json() {
    let m = Mount::new();
    assert_content(&m, "state.json", b"{}\n");
    let fid = head_row(&m, "state.json").4;
    run(&m, "jq '.x = 1' state.json > t && mv t state.json");
    run(&m, "jq -c '.y = [1,2]' state.json > t && mv t state.json");
    assert_content(&m, "state.json", b"{\"x\":1,\"y\":[1,2]}\n");
    assert_eq!(run(&m, "jq -r .x state.json"), "1\n");
    let first = b"{\n  \"x\": 1\n}\n";
    assert_eq!(
        m.versions("state.json"),
        vec![
            v(1, "create", 3),
            v(2, "rename", first.len() as u64),
            v(3, "rename", 18)
        ]
    );
    assert_eq!(head_row(&m, "state.json").4, fid);
    let vid3: i64 = m
        .sql(&format!(
            "SELECT id FROM versions WHERE file_id = {fid} AND version = 2"
        ))
        .parse()
        .unwrap();
    assert_eq!(version_bytes(&m, vid3), first);
    assert!(!m.path("t").exists());
    // Each `> t` made a new t (one `create` version) that mv then moved away.
    assert_eq!(
        count(
            &m,
            "SELECT count(*) FROM versions WHERE path = 't' AND op = 'create'"
        ),
        2
    );
}

#[test]
fn vim_es_substitute_and_write() {
    let m = Mount::new();
    run(&m, "printf 'banana\\nalpha\\n' > f");
    // `-i NONE`: no ~/.viminfo. Vims of tests running at once write that one file, and
    // one that cannot exits 1 without a word in -es mode (E138, 1 run in 16 under load).
    let o = m.sh("vim -es -i NONE -c '%s/a/b/' -c 'wq' f 2>&1");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "vim -es failed ({}): {text}", o.status);
    assert!(
        !text.contains("E667"),
        "vim reported an fsync failure: {text}"
    );
    assert!(
        !text
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w.len() > 1
                && w.starts_with('E')
                && w[1..].chars().all(|c| c.is_ascii_digit())),
        "vim printed an error: {text}"
    );
    assert_content(&m, "f", b"bbnana\nblpha\n");
    let vs = m.versions("f");
    assert_eq!(vs.len(), 2, "one new version from vim's :wq: {vs:?}");
    assert_eq!(vs[..1], [v(1, "create", 13)]);
    // vim writes in place: open(O_WRONLY|O_CREAT), ftruncate(0), write, fsync, close:
    // one version, op 'write' (a handle that wrote after truncating wrote its content).
    assert_eq!(vs[1], v(2, "write", 13));
    // No swap file left behind.
    assert_eq!(
        run(&m, "ls -A | sort"),
        "MANIFEST\nf\nfindings.md\nplan.md\nstate.json\n"
    );
}

#[test]
fn vim_capital_es_normal_mode_append_and_write() {
    let m = Mount::new();
    run(&m, "printf 'first\\nsecond\\n' > f");
    let o = m.sh("vim -Es -u NONE -i NONE +'normal Ahello' +wq f 2>&1");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "vim -Es failed ({}): {text}", o.status);
    assert!(
        !text.contains("E667"),
        "vim reported an fsync failure: {text}"
    );
    // Ex mode starts on the last line.
    assert_content(&m, "f", b"first\nsecondhello\n");
    let vs = m.versions("f");
    assert_eq!(vs, vec![v(1, "create", 13), v(2, "write", 18)]);
    assert_eq!(
        run(&m, "ls -A | sort"),
        "MANIFEST\nf\nfindings.md\nplan.md\nstate.json\n"
    );
    // A new file written by vim: one version, its first commit.
    let o = m.sh("vim -Es -u NONE -i NONE +'normal ihi' +wq newfile 2>&1");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    assert_content(&m, "newfile", b"hi\n");
    let vs = m.versions("newfile");
    assert_eq!(vs, vec![v(1, "create", 3)]);
}

#[test]
fn git_init_add_commit_status_clean() {
    let m = Mount::new();
    let git =
        "git -c user.name=t -c user.email=t@t -c safe.directory='*' -c init.defaultBranch=main";
    run(
        &m,
        &format!(
            "mkdir repo && cd repo && {git} init -q . && echo hello > a.txt && mkdir -p src/x \
             && printf 'fn main() {{}}\\n' > src/x/main.rs && {git} add -A && {git} commit -qm first"
        ),
    );
    let status = run(&m, &format!("cd repo && {git} status --porcelain"));
    assert_eq!(status, "", "git status after commit");
    let log = run(&m, &format!("cd repo && {git} log --format=%s"));
    assert_eq!(log, "first\n");
    // A second commit after a change, and status is clean again.
    run(
        &m,
        &format!(
            "cd repo && echo more >> a.txt && test -n \"$({git} status --porcelain)\" \
             && {git} commit -qam second && {git} fsck --no-progress"
        ),
    );
    assert_eq!(run(&m, &format!("cd repo && {git} status --porcelain")), "");
    assert_eq!(
        run(&m, &format!("cd repo && {git} show HEAD:a.txt")),
        "hello\nmore\n"
    );
    assert_content(&m, "repo/a.txt", b"hello\nmore\n");
    assert_eq!(
        m.versions("repo/a.txt"),
        vec![v(1, "create", 6), v(2, "append", 11)]
    );
    assert_content(&m, "repo/.git/HEAD", b"ref: refs/heads/main\n");
    // The index and the branch ref are replaced by lock file + rename.
    let index_ops = m.sql("SELECT DISTINCT op FROM versions WHERE path = 'repo/.git/index'");
    assert!(
        index_ops.lines().any(|l| l == "rename"),
        "index ops: {index_ops}"
    );
    let head_commit = run(&m, &format!("cd repo && {git} rev-parse HEAD"));
    assert_content(&m, "repo/.git/refs/heads/main", head_commit.as_bytes());
}

#[test]
fn rsync_a_into_the_mount() {
    let m = Mount::new();
    let src = outside_tree();
    let s = src.path().display();
    run(&m, &format!("rsync -a {s}/ dst/ && diff -r {s} dst"));
    let a = run(
        &m,
        &format!("cd {s} && find . -printf '%p %y %m %T@\\n' | sort"),
    );
    let b = run(&m, "cd dst && find . -printf '%p %y %m %T@\\n' | sort");
    assert_eq!(a, b, "paths, types, modes and mtimes after rsync -a");
    for (rel, bytes) in tree_files(src.path()) {
        let p = format!("dst/{rel}");
        assert_content(&m, &p, &bytes);
        let vs = m.versions(&p);
        // rsync writes .name.XXXXXX and renames it over name (an empty file may be
        // created directly).
        let last = vs.last().unwrap_or_else(|| panic!("no version for {p}"));
        assert_eq!(
            last.2,
            bytes.len() as u64,
            "size of the last version of {p}: {vs:?}"
        );
        if !bytes.is_empty() {
            assert_eq!(last.1, "rename", "last op of {p}: {vs:?}");
        }
    }
    // No temporary left behind.
    assert_eq!(run(&m, "cd dst && find . -name '.?*' | wc -l").trim(), "0");
    // A second rsync changes nothing and records no version.
    let before = count(&m, "SELECT count(*) FROM versions");
    run(&m, &format!("rsync -a {s}/ dst/"));
    assert_eq!(count(&m, "SELECT count(*) FROM versions"), before);
    // After a change at the source, one new version for that file only.
    std::fs::write(src.path().join("a.txt"), "alpha\nBETA\n").unwrap();
    run(&m, &format!("rsync -a {s}/ dst/ && diff -r {s} dst"));
    // rsync's temporary (its one version) renamed over the file (a version of it).
    assert_eq!(count(&m, "SELECT count(*) FROM versions"), before + 2);
    assert_content(&m, "dst/a.txt", b"alpha\nBETA\n");
    assert_eq!(head_row(&m, "dst/a.txt").1, "rename");
}

#[test]
fn tar_extract_into_and_create_from_the_mount_round_trip() {
    let m = Mount::new();
    let src = outside_tree();
    let work = tempfile::Builder::new()
        .prefix("scratchfs-tar-")
        .tempdir()
        .unwrap();
    let (s, w) = (src.path().display(), work.path().display());
    run(
        &m,
        &format!(
            "tar -C {s} -cf {w}/in.tar . && mkdir x && tar -C x -xf {w}/in.tar && diff -r {s} x \
             && tar -C x -cf {w}/out.tar . && mkdir {w}/back && tar -C {w}/back -xf {w}/out.tar \
             && diff -r {s} {w}/back"
        ),
    );
    let a = run(
        &m,
        &format!("cd {s} && find . -printf '%p %y %m %T@\\n' | sort"),
    );
    let b = run(
        &m,
        &format!("cd {w}/back && find . -printf '%p %y %m %T@\\n' | sort"),
    );
    assert_eq!(
        a, b,
        "paths, types, modes and mtimes after the tar round trip"
    );
    // The archive listings agree too.
    let la = run(
        &m,
        &format!("tar -tvf {w}/in.tar | awk '{{print $1, $3, $6}}' | sort"),
    );
    let lb = run(
        &m,
        &format!("tar -tvf {w}/out.tar | awk '{{print $1, $3, $6}}' | sort"),
    );
    assert_eq!(la, lb);
    for (rel, bytes) in tree_files(src.path()) {
        let p = format!("x/{rel}");
        assert_content(&m, &p, &bytes);
        let vs = m.versions(&p);
        if bytes.is_empty() {
            assert_eq!(vs, vec![v(1, "create", 0)], "versions of {p}");
        } else {
            assert_eq!(
                vs,
                vec![v(1, "create", bytes.len() as u64)],
                "versions of {p}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Reading and inspecting
// ---------------------------------------------------------------------------------------

#[test]
fn inspection_tools_ls_stat_find_grep_du_df_head_tail_wc_diff() {
    let m = Mount::new();
    run(
        &m,
        "mkdir -p docs/deep && seq 1 100 > docs/numbers.txt && printf 'needle here\\nhay\\n' > docs/deep/a.md \
         && printf 'hay\\nneedle again\\n' > b.md && head -c 100000 /dev/zero > zeros",
    );
    let before = count(&m, "SELECT count(*) FROM versions");

    let ls = run(&m, "ls -l docs/numbers.txt b.md zeros");
    let sizes: Vec<(String, String)> = ls
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[8].to_string(), f[4].to_string())
        })
        .collect();
    assert_eq!(
        sizes,
        vec![
            ("b.md".to_string(), "17".to_string()),
            ("docs/numbers.txt".to_string(), "292".to_string()),
            ("zeros".to_string(), "100000".to_string())
        ]
    );
    assert!(ls.lines().all(|l| l.starts_with("-rw-r--r-- 1 ")), "{ls}");
    assert_eq!(
        run(&m, "ls -A | sort"),
        "MANIFEST\nb.md\ndocs\nfindings.md\nplan.md\nstate.json\nzeros\n"
    );
    assert_eq!(run(&m, "ls docs"), "deep\nnumbers.txt\n");

    assert_eq!(
        run(&m, "stat -c '%s %F %a %h' b.md docs"),
        "17 regular file 644 1\n0 directory 755 3\n"
    );

    assert_eq!(
        run(&m, "find . -type f | sort"),
        "./MANIFEST\n./b.md\n./docs/deep/a.md\n./docs/numbers.txt\n./findings.md\n./plan.md\n./state.json\n./zeros\n"
    );
    assert_eq!(run(&m, "find . -type d | sort"), ".\n./docs\n./docs/deep\n");
    assert_eq!(
        run(&m, "find . -name '*.md' -size -1k -empty | sort"),
        "./findings.md\n./plan.md\n"
    );

    assert_eq!(
        run(&m, "grep -rn needle . | sort"),
        "./b.md:2:needle again\n./docs/deep/a.md:1:needle here\n"
    );
    assert_eq!(
        run(&m, "grep -rl hay --include='*.md' . | sort"),
        "./b.md\n./docs/deep/a.md\n"
    );

    assert_eq!(run(&m, "du -b zeros"), "100000\tzeros\n");
    let du_k: u64 = run(&m, "du -sk . | cut -f1").trim().parse().unwrap();
    assert!(du_k >= 98, "du -sk . = {du_k}");

    let df = run(&m, "df -k --output=size,avail . | tail -1");
    let nums: Vec<u64> = df.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert!(nums[0] > 0 && nums[1] > 0, "df: {df}");
    assert_eq!(run(&m, "stat -f -c '%S %l' ."), "4096 255\n");

    assert_eq!(run(&m, "head -n 3 docs/numbers.txt"), "1\n2\n3\n");
    assert_eq!(run(&m, "tail -n 2 docs/numbers.txt"), "99\n100\n");
    assert_eq!(run(&m, "head -c 5 docs/deep/a.md"), "needl");
    assert_eq!(run(&m, "tail -c 4 b.md"), "ain\n");
    assert_eq!(run(&m, "wc -l < docs/numbers.txt").trim(), "100");
    assert_eq!(run(&m, "wc -c < zeros").trim(), "100000");
    assert_eq!(run(&m, "cat docs/numbers.txt | wc -w").trim(), "100");

    let o = m.sh("diff docs/deep/a.md b.md");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "1d0\n< needle here\n2a2\n> needle again\n"
    );
    run(&m, "cp b.md c.md && diff b.md c.md && cmp b.md c.md");

    // Reading made no version; the cp made exactly one.
    assert_eq!(count(&m, "SELECT count(*) FROM versions"), before + 1);
    assert_eq!(m.versions("c.md"), vec![v(1, "create", 17)]);
    let seq: String = (1..=100).map(|i| format!("{i}\n")).collect();
    assert_content(&m, "docs/numbers.txt", seq.as_bytes());
    assert_content(&m, "zeros", &vec![0u8; 100_000]);
}

#[test]
fn sqlite3_reads_the_database_while_mounted() {
    let m = Mount::new();
    assert_eq!(m.sql("PRAGMA journal_mode"), "wal");
    assert_eq!(
        count(&m, "SELECT count(*) FROM versions"),
        3,
        "default layout versions"
    );
    // The writer holds its handle in a background process; the sqlite3 processes are
    // started by the shell, not by the writer (a child of the writer would inherit the
    // descriptor, and its exec or exit would flush, i.e. commit, the handle).
    let w = m.dir.path().display().to_string();
    let out = run(
        &m,
        &format!(
            r#"export W={w}
cat > $W/writer.py <<'EOF'
import os, time
W = os.environ['W']
f = open('live.txt', 'w')
f.write('abc\n')
f.flush()
open(W + '/ready', 'w').close()
while not os.path.exists(W + '/go'):
    time.sleep(0.01)
f.close()
EOF
python3 $W/writer.py & pid=$!
for i in $(seq 1000); do [ -e $W/ready ] && break; sleep 0.01; done
[ -e $W/ready ]
n() {{ sync .; sqlite3 "$DB" "SELECT count(*) || ':' || ifnull(max(size), -1) FROM versions WHERE path = 'live.txt'"; }}
n
cat live.txt | wc -c
touch $W/go
wait $pid
n
python3 -c "open('live.txt', 'a').write('def\n')"
n"#
        ),
    );
    // While the writer's handle is open: no version yet (a file's first version is its
    // first commit), and a reader sees an empty file; the close committed; the append too.
    assert_eq!(out, "0:-1\n0\n1:4\n2:8\n");
    assert_content(&m, "live.txt", b"abc\ndef\n");
    assert_eq!(
        m.versions("live.txt"),
        vec![v(1, "create", 4), v(2, "append", 8)]
    );
    // The latest commit is seen by a fresh sqlite3 process once `sync` (fsync of the
    // mount's root) asked the daemon to write what it acknowledged (`m.sql` does that).
    run(&m, "echo ghi >> live.txt");
    assert_eq!(
        m.sql("SELECT version || ' ' || op || ' ' || size FROM versions WHERE path = 'live.txt' ORDER BY id DESC LIMIT 1"),
        "3 append 12"
    );
    assert_eq!(
        count(
            &m,
            "SELECT count(*) FROM heads WHERE current_path = 'live.txt' AND version = 3"
        ),
        1
    );
    // The schema answers a provenance question.
    let by_exe =
        m.sql("SELECT count(*) FROM version_log WHERE path = 'live.txt' AND exe LIKE '%python%'");
    assert_eq!(by_exe, "2");
}

// ---------------------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------------------

#[test]
fn concurrent_appenders_16_processes_200_files() {
    const PROCS: usize = 16;
    const FILES: usize = 200;
    const PER_ROUND: usize = 50;
    const ROUNDS: usize = 4;
    let m = Mount::new();
    std::fs::create_dir(m.path("c")).unwrap();
    // Process p appends, in each round, one line to each of files (p*13+i) % 200.
    let script = format!(
        "for p in $(seq 0 {}); do
           ( for r in $(seq 0 {}); do
               for i in $(seq 0 {}); do
                 echo \"p$p r$r i$i\" >> c/f$(( (p*13+i) % {FILES} )) || exit 1
               done
             done ) &
         done
         fail=0
         for j in $(jobs -p); do wait $j || fail=1; done
         exit $fail",
        PROCS - 1,
        ROUNDS - 1,
        PER_ROUND - 1
    );
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(&m.mnt)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            panic!("16 concurrent appenders did not finish within 120 s (deadlock?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "an appender failed: {status}");

    let mut expected: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for p in 0..PROCS {
        for r in 0..ROUNDS {
            for i in 0..PER_ROUND {
                expected
                    .entry((p * 13 + i) % FILES)
                    .or_default()
                    .push(format!("p{p} r{r} i{i}"));
            }
        }
    }
    let total = PROCS * ROUNDS * PER_ROUND;
    let names = run(&m, "ls c | sort -V");
    assert_eq!(names.lines().count(), expected.len(), "files created");

    // Per file: its lines (each process's in its own order), and its versions: one
    // `create` (the first `>>` created it empty) then exactly one `append` per line,
    // growing by one line each, the last one being the head.
    let rows = m.sql(
        "SELECT path, version, op, size FROM versions WHERE path LIKE 'c/%' ORDER BY file_id, version",
    );
    let mut by_path: BTreeMap<String, Vec<(i64, String, u64)>> = BTreeMap::new();
    for l in rows.lines() {
        let f: Vec<&str> = l.split('|').collect();
        by_path.entry(f[0].to_string()).or_default().push((
            f[1].parse().unwrap(),
            f[2].to_string(),
            f[3].parse().unwrap(),
        ));
    }
    assert_eq!(by_path.len(), expected.len());
    for (file, want_lines) in &expected {
        let path = format!("c/f{file}");
        let content = read(m.path(&path));
        let mut got: Vec<String> = content.lines().map(str::to_string).collect();
        assert_eq!(got.len(), want_lines.len(), "line count of {path}");
        // Lines of one process arrive in its order.
        for p in 0..PROCS {
            let mine: Vec<&String> = got
                .iter()
                .filter(|l| l.starts_with(&format!("p{p} ")))
                .collect();
            let want: Vec<&String> = want_lines
                .iter()
                .filter(|l| l.starts_with(&format!("p{p} ")))
                .collect();
            assert_eq!(mine, want, "order of p{p}'s lines in {path}");
        }
        got.sort();
        let mut want = want_lines.clone();
        want.sort();
        assert_eq!(got, want, "lines of {path}");

        let vs = &by_path[&path];
        // One version per `>>`: the first creates the file.
        assert_eq!(vs.len(), want_lines.len(), "versions of {path}: {vs:?}");
        assert_eq!(vs[0].1, "create", "first version of {path}");
        let mut prev = 0;
        for (k, x) in vs.iter().enumerate() {
            assert_eq!(x.0, k as i64 + 1, "version numbers of {path}");
            let op = if k == 0 { "create" } else { "append" };
            assert_eq!(x.1, op, "op of {path} v{}", x.0);
            assert!(x.2 > prev, "sizes of {path} grow: {vs:?}");
            prev = x.2;
        }
        assert_eq!(prev, content.len() as u64, "last version size of {path}");
        let (_, op, size, hash, _) = head_row(&m, &path);
        assert_eq!((op.as_str(), size), ("append", content.len() as u64));
        assert_eq!(hash, b3(content.as_bytes()), "blake3 of {path}'s head");
    }
    assert_eq!(
        count(&m, "SELECT count(*) FROM versions WHERE path LIKE 'c/%'"),
        total as i64,
        "one version per line appended"
    );
    assert_eq!(
        count(
            &m,
            "SELECT count(*) FROM versions WHERE path LIKE 'c/%' AND op <> 'append'"
        ),
        expected.len() as i64,
        "each file's first append is its create"
    );
    assert_eq!(run(&m, "cat c/* | wc -l").trim(), total.to_string());
}
