//! Per-operation POSIX tests on a real mount (SPEC §3 and §4).

mod common;
use common::*;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;

#[test]
fn new_database_has_the_default_layout() {
    let m = Mount::new();
    let out = m.sh_ok("ls");
    assert_eq!(out, "MANIFEST\nfindings.md\nplan.md\nstate.json\n");
    assert_eq!(read(m.path("state.json")).trim(), "{}");
    assert_eq!(
        m.sql("SELECT writer FROM versions WHERE path = 'state.json' ORDER BY id DESC LIMIT 1"),
        "scratchfs"
    );
    let me = unsafe { libc::getuid() };
    assert_eq!(
        m.sh_ok("stat -c %u plan.md .").trim(),
        format!("{me}\n{me}")
    );
}

/// The executable `bash` resolves to, as /proc/<pid>/exe names it.
fn bash_exe() -> String {
    let out = std::process::Command::new("bash")
        .args(["-c", "readlink /proc/$$/exe; true"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn create_write_read_and_provenance() {
    let m = Mount::new();
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg("printf 'hello' > notes.txt")
        .current_dir(&m.mnt)
        .env("SCRATCHFS_WRITER", "tool-x")
        .env("SCRATCHFS_STEP", "7")
        .status()
        .unwrap();
    assert!(out.success());
    assert_eq!(read(m.path("notes.txt")), "hello");
    let row = m.sql(
        "SELECT version, op, size, writer, env_writer, step, uid, exe, tgid > 0, start_time > 0, blake3
         FROM version_log WHERE path = 'notes.txt' ORDER BY id DESC LIMIT 1",
    );
    let f: Vec<&str> = row.split('|').collect();
    assert_eq!(
        &f[..8],
        [
            "1",
            "create",
            "5",
            "tool-x",
            "tool-x",
            "7",
            &unsafe { libc::getuid() }.to_string(),
            // The bash that ran (wherever PATH finds it: /usr/bin, /bin, /usr/local/bin).
            &bash_exe()
        ]
    );
    assert_eq!(&f[8..10], ["1", "1"]);
    assert_eq!(f[10], blake3::hash(b"hello").to_hex().as_str());
}

/// Tests that hold write handles open run their steps in one Python process: in this
/// multi-threaded test binary, another test may fork a child at any moment, and the
/// child's close of its inherited copy of a descriptor (at exec) is a FUSE flush that
/// commits early (FUSE-TRAPS §5; docs/SEMANTICS.md).
fn py(m: &Mount, script: &str) -> String {
    m.sh_ok(&format!(
        "python3 - <<'PYEOF'\nimport os, errno\n{script}\nPYEOF"
    ))
}

#[test]
fn partial_overwrite_and_read_at_offsets() {
    let m = Mount::new();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.path("f"), &data).unwrap();
    let out = py(
        &m,
        r#"f = os.open("f", os.O_RDWR)
os.pwrite(f, b"PATCH", 150000)
print(os.pread(f, 5, 150000).decode())           # a write handle reads its own writes
other = os.open("f", os.O_RDONLY)
print(os.pread(other, 5, 150000) == bytes((150000 + i) % 251 for i in range(5)))
os.close(other); os.close(f)"#,
    );
    assert_eq!(out, "PATCH\nTrue\n", "others do not see uncommitted bytes");
    let mut expect = data.clone();
    expect[150_000..150_005].copy_from_slice(b"PATCH");
    assert_eq!(fs::read(m.path("f")).unwrap(), expect);
    assert_eq!(m.head_hash("f"), blake3::hash(&expect).to_hex().as_str());
    let mut r = fs::File::open(m.path("f")).unwrap();
    r.seek(SeekFrom::Start(299_990)).unwrap();
    let mut tail = Vec::new();
    r.read_to_end(&mut tail).unwrap();
    assert_eq!(tail, expect[299_990..]);
}

#[test]
fn ftruncate_and_truncate() {
    let m = Mount::new();
    let p = m.path("f");
    fs::write(&p, "0123456789").unwrap();
    let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(4).unwrap();
    f.set_len(6).unwrap();
    drop(f);
    assert_eq!(fs::read(&p).unwrap(), b"0123\0\0");
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::truncate(c.as_ptr(), 2) }, 0);
    assert_eq!(fs::read(&p).unwrap(), b"01");
    let v = m.versions("f");
    assert_eq!(v.last().unwrap().1, "truncate");
    assert_eq!(v.last().unwrap().2, 2);
}

#[test]
fn fsync_commits_before_close() {
    let m = Mount::new();
    let out = py(
        &m,
        &format!(
            r#"import subprocess
f = os.open("f", os.O_WRONLY | os.O_CREAT, 0o644)
os.write(f, b"durable"); os.fsync(f)
print(subprocess.run(["sqlite3", "{}", "SELECT size FROM versions WHERE path = 'f' ORDER BY id DESC LIMIT 1"], capture_output=True, text=True, check=True).stdout.strip())
os.write(f, b"!"); os.close(f)"#,
            m.db.display()
        ),
    );
    assert_eq!(out, "7\n", "fsync committed a version");
    assert_eq!(read(m.path("f")), "durable!");
    let sizes: Vec<u64> = m.versions("f").into_iter().map(|v| v.2).collect();
    assert_eq!(sizes, [7, 8], "fsync (the first commit), close");
}

#[test]
fn repeated_flushes_commit_once() {
    let m = Mount::new();
    m.sh_ok("exec 3>f; printf a >&3; exec 4>&3; exec 4>&-; exec 5>&3; exec 5>&-; exec 3>&-");
    let v = m.versions("f");
    assert_eq!(v, vec![(1, "create".to_string(), 1)]);
}

#[test]
fn o_append_handles_append_at_commit_time() {
    let m = Mount::new();
    fs::write(m.path("log"), "start\n").unwrap();
    py(
        &m,
        r#"a = os.open("log", os.O_WRONLY | os.O_APPEND)
b = os.open("log", os.O_WRONLY | os.O_APPEND)
os.write(a, b"from a\n"); os.write(b, b"from b\n")
os.close(b); os.close(a)"#,
    );
    assert_eq!(read(m.path("log")), "start\nfrom b\nfrom a\n");
    let ops: Vec<String> = m.versions("log").into_iter().map(|v| v.1).collect();
    assert_eq!(ops, ["create", "append", "append"]);
}

#[test]
fn lost_update_is_estale_and_keeps_the_refused_content() {
    let m = Mount::new();
    fs::write(m.path("f"), "base").unwrap();
    let out = py(
        &m,
        r#"a = os.open("f", os.O_RDWR); b = os.open("f", os.O_RDWR)
os.read(a, 10); os.read(b, 10)
os.write(a, b"+a"); os.write(b, b"+b")
os.close(a)
try:
    os.fsync(b); print("committed")
except OSError as e:
    print(errno.errorcode[e.errno])
os.close(b)"#,
    );
    assert_eq!(out, "ESTALE\n");
    assert_eq!(read(m.path("f")), "base+a");
    let row = m.sql("SELECT op, errno, size, blake3 FROM events WHERE op = 'rejected'");
    assert_eq!(
        row,
        format!(
            "rejected|{}|6|{}",
            libc::ESTALE,
            blake3::hash(b"base+b").to_hex()
        )
    );
    let reason = m.sql("SELECT reason FROM events WHERE op = 'rejected'");
    assert!(reason.contains("lost update"), "{reason}");
}

#[test]
fn rename_of_directories_and_open_files() {
    let m = Mount::new();
    m.sh_ok("mkdir -p a/b && printf x > a/b/f && printf y > a/g");
    let mut open = fs::OpenOptions::new()
        .append(true)
        .open(m.path("a/b/f"))
        .unwrap();
    m.sh_ok("mv a z");
    open.write_all(b"z").unwrap();
    drop(open);
    assert_eq!(read(m.path("z/b/f")), "xz");
    assert_eq!(m.sql("SELECT path FROM files WHERE id = (SELECT file_id FROM versions WHERE path = 'z/b/f' LIMIT 1)"), "z/b/f");
    // rename over an existing file gives the target a new version on its own lineage
    m.sh_ok("printf new > t && mv t z/g");
    let v = m.versions("z/g");
    assert_eq!(v.last().unwrap().1, "rename");
    let lineage =
        m.sql("SELECT COUNT(DISTINCT file_id) FROM versions WHERE path IN ('a/g', 'z/g')");
    assert_eq!(lineage, "1", "history follows the renames of a/g");
    let e = m.sh("mkdir -p q/r && mv q q/r/s");
    assert!(!e.status.success());
    let e = m.sh("mkdir -p d1/x d2 && mv -T d2 d1");
    assert!(
        String::from_utf8_lossy(&e.stderr).contains("not empty"),
        "{}",
        String::from_utf8_lossy(&e.stderr)
    );
}

#[test]
fn unlink_keeps_every_version() {
    let m = Mount::new();
    m.sh_ok("printf 1 > f; printf 22 > f; rm f");
    assert!(!m.path("f").exists());
    let ops: Vec<String> = m.versions("f").into_iter().map(|v| v.1).collect();
    assert_eq!(ops, ["create", "write"]);
    assert_eq!(
        m.sql("SELECT deleted_ns IS NOT NULL FROM files WHERE path = 'f'"),
        "1"
    );
    // unlink of an open file: the reader keeps reading
    let out = m.sh_ok("printf keep > g; exec 3<g; rm g; cat <&3");
    assert_eq!(out, "keep");
}

#[test]
fn mkdir_rmdir_and_enotempty() {
    let m = Mount::new();
    m.sh_ok("mkdir -p d/e");
    let e = m.sh("rmdir d");
    assert!(String::from_utf8_lossy(&e.stderr).contains("Directory not empty"));
    m.sh_ok("rmdir d/e d");
    assert!(!m.path("d").exists());
    let e = m.sh("mkdir plan.md");
    assert!(String::from_utf8_lossy(&e.stderr).contains("File exists"));
}

#[test]
fn readdir_lists_every_entry_once() {
    let m = Mount::new();
    m.sh_ok("mkdir d && cd d && for i in $(seq 1 3000); do : > f$i; done");
    let mut names: Vec<String> = fs::read_dir(m.path("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut expect: Vec<String> = (1..=3000).map(|i| format!("f{i}")).collect();
    expect.sort();
    assert_eq!(names, expect);
}

/// Listings carry attributes (READDIRPLUS): `ls -l` of a directory larger than one reply
/// shows every entry's size, a size another process changes after the listing shows at
/// once (the commit invalidates what the listing cached), and after `rm -rf` of the
/// listed entries the names resolve to nothing (no reference kept by the listing leaks a
/// node back into the tree).
#[test]
fn listings_with_attributes_stay_coherent() {
    let m = Mount::new();
    m.sh_ok("mkdir d && cd d && for i in $(seq 1 2500); do printf %0${i}d 0 > file-with-a-long-name-$i; done");
    let out = m.sh_ok("ls -l d | awk 'NR > 1 { sum += $5; n++ } END { print n, sum }'");
    assert_eq!(out, format!("2500 {}\n", (1..=2500u64).sum::<u64>()));
    m.sh_ok("ls -l d > /dev/null && python3 -c \"open('d/file-with-a-long-name-7', 'w').write('x' * 100000)\"");
    assert_eq!(
        m.sh_ok("ls -l d/file-with-a-long-name-7 | awk '{ print $5 }'"),
        "100000\n"
    );
    assert_eq!(m.sh_ok("stat -c %s d/file-with-a-long-name-7"), "100000\n");
    m.sh_ok("ls -l d > /dev/null && rm -rf d && mkdir d && ls -la d > /dev/null");
    assert_eq!(m.sh_ok("ls d | wc -l"), "0\n");
    assert!(!m.path("d/file-with-a-long-name-1").exists());
    assert_eq!(
        m.sql("SELECT COUNT(*) FROM events WHERE op = 'unlink' AND path LIKE 'd/file-with-%'"),
        "2500"
    );
}

#[test]
fn getattr_and_setattr_mode_times_owner() {
    let m = Mount::new();
    m.sh_ok("printf x > f && chmod 600 f && touch -m -d '2020-05-05 00:00:00 UTC' f");
    let meta = fs::metadata(m.path("f")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert_eq!(m.sh_ok("date -u -r f +%F"), "2020-05-05\n");
    m.sh_ok("chown 1234:1234 f");
    assert_eq!(m.sh_ok("stat -c '%u:%g' f"), "1234:1234\n");
    assert_eq!(
        m.sql("SELECT mode, uid FROM nodes WHERE name = CAST('f' AS BLOB)"),
        "384|1234"
    );
    // a non-owner is refused by the kernel (default_permissions)
    let e = m.sh("setpriv --reuid 4321 --regid 4321 --clear-groups cat f");
    assert!(!e.status.success());
}

#[test]
fn symlink_link_and_mknod_are_refused_with_eperm() {
    let m = Mount::new();
    m.sh_ok("printf x > f");
    for cmd in ["ln -s f l", "ln f h", "mkfifo p", "mknod n c 1 3"] {
        let e = m.sh(cmd);
        assert!(!e.status.success(), "{cmd} succeeded");
        let err = String::from_utf8_lossy(&e.stderr);
        assert!(err.contains("Operation not permitted"), "{cmd}: {err}");
    }
}

#[test]
fn names_up_to_255_bytes_and_non_utf8() {
    let m = Mount::new();
    let long = "n".repeat(255);
    fs::write(m.path(&long), "x").unwrap();
    assert_eq!(read(m.path(&long)), "x");
    let too_long = "n".repeat(256);
    assert!(fs::write(m.path(&too_long), "x").is_err());
    use std::os::unix::ffi::OsStrExt;
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9");
    fs::write(m.mnt.join(odd), "y").unwrap();
    assert_eq!(fs::read(m.mnt.join(odd)).unwrap(), b"y");
}

#[test]
fn sigterm_unmounts_cleanly_and_data_survives_remount() {
    let mut m = Mount::new();
    m.sh_ok("printf keep > f");
    let pid = m.daemon_pid();
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while m.sh("mountpoint -q $MNT").status.success() {
        assert!(
            std::time::Instant::now() < deadline,
            "still mounted after SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    m.unmount_after_exit();
    m.start();
    assert_eq!(read(m.path("f")), "keep");
}

/// An explicit mtime (`touch -d`) stays until the next write, which the store records:
/// after a remount the pinned time is still there, and after a write and a remount the
/// mtime is the write's (a commit unpins it only when it is pinned).
#[test]
fn an_explicit_mtime_lasts_until_the_next_write_across_remounts() {
    let mut m = Mount::new();
    m.sh_ok("echo a > f && echo b >> f && touch -m -d '2001-01-01 UTC' f");
    m.unmount();
    m.start();
    assert_eq!(m.sh_ok("date -u -r f +%Y"), "2001\n");
    m.sh_ok("echo c >> f && echo d >> f");
    m.unmount();
    m.start();
    assert_ne!(
        m.sh_ok("date -u -r f +%Y"),
        "2001\n",
        "a write unpins the mtime"
    );
    m.sh_ok("touch -m -d '2002-01-01 UTC' f");
    m.unmount();
    m.start();
    assert_eq!(m.sh_ok("date -u -r f +%Y"), "2002\n");
}

#[test]
fn directory_mtime_follows_its_entries_and_survives_remount() {
    let mut m = Mount::new();
    m.sh_ok("mkdir d && touch -d '2000-01-01' d");
    assert_eq!(m.sh_ok("date -u -r d +%Y"), "2000\n");
    m.sh_ok("touch d/f");
    let after_create = m.sh_ok("date -u -r d +%Y");
    assert_ne!(after_create, "2000\n", "create updates the parent's mtime");
    m.sh_ok("touch -d '2001-01-01' d && rm d/f");
    assert_ne!(
        m.sh_ok("date -u -r d +%Y"),
        "2001\n",
        "unlink updates the parent's mtime"
    );
    m.sh_ok("touch -d '2002-01-01' d && touch e && mv e d/e");
    assert_ne!(
        m.sh_ok("date -u -r d +%Y"),
        "2002\n",
        "rename updates the parent's mtime"
    );
    // A listing cached by the kernel shows new entries at once.
    assert_eq!(m.sh_ok("ls d; touch d/g; ls d"), "e\ne\ng\n");
    let before = m.sh_ok("stat -c %Y d");
    m.unmount();
    m.start();
    assert_eq!(m.sh_ok("stat -c %Y d"), before);
}

/// SQLite (rollback journal) databases inside the mount: processes that share a file
/// under fcntl locks see each other's commits, and no acknowledged insert is lost.
#[test]
fn sqlite_database_in_the_mount_with_concurrent_writers() {
    let m = Mount::new();
    let out = m.sh_ok(
        "sqlite3 app.db 'create table t(v)' && \
         python3 -c '
import sqlite3, subprocess
a = sqlite3.connect(\"app.db\", isolation_level=None)
a.execute(\"insert into t values (1)\")
subprocess.run([\"sqlite3\", \"app.db\", \"insert into t values (2)\"], check=True)
print(a.execute(\"select count(*) from t\").fetchone()[0])
a.execute(\"insert into t values (3)\")
' && \
         for p in 1 2 3; do (for i in $(seq 1 25); do \
           sqlite3 -cmd '.timeout 20000' app.db \"insert into t values ($p$i)\" || echo fail; done) & done; wait; \
         sqlite3 app.db 'select count(*) from t'",
    );
    assert_eq!(
        out, "2\n78\n",
        "a connection sees another's commit; 3 + 75 rows"
    );
}

/// After a lost update is refused, the handle stays stale: later writes fail with ESTALE
/// instead of landing on content the writer never saw.
#[test]
fn a_refused_handle_stays_stale() {
    let m = Mount::new();
    let out = m.sh_ok(
        "printf base > f && python3 -c '
import errno, os
a = os.open(\"f\", os.O_RDWR); os.read(a, 10)
b = os.open(\"f\", os.O_RDWR); os.read(b, 10)
os.write(a, b\"+a\"); os.fsync(a)
os.write(b, b\"+b\")
try: os.fsync(b)
except OSError as e: print(errno.errorcode[e.errno])
try: os.write(b, b\"again\"); print(\"written\")
except OSError as e: print(errno.errorcode[e.errno])
os.close(b); os.close(a)
'",
    );
    assert_eq!(out, "ESTALE\nESTALE\n");
    assert_eq!(read(m.path("f")), "base+a");
}

#[test]
fn setgid_directories_pass_on_group_and_bit() {
    let m = Mount::with_args(&["--allow-other"]);
    m.sh_ok("mkdir d && chown 0:4321 d && chmod 2777 d");
    m.sh_ok("setpriv --reuid 1000 --regid 1000 --clear-groups bash -c 'mkdir d/sub && touch d/f'");
    assert_eq!(
        m.sh_ok("stat -c '%A %g' d/sub d/f"),
        "drwxr-sr-x 4321\n-rw-r--r-- 4321\n"
    );
}

#[test]
fn writing_the_same_bytes_again_makes_no_version() {
    let m = Mount::new();
    m.sh_ok("echo same > f; echo same > f; cp f g; cp f g");
    assert_eq!(m.versions("f").len(), 1, "{:?}", m.versions("f"));
    assert_eq!(m.versions("g").len(), 1, "{:?}", m.versions("g"));
    m.sh_ok("echo other > f");
    assert_eq!(m.versions("f").len(), 2);
}

/// Issue 10 item 11 (pjdfstest): a name longer than 255 bytes gets ENAMETOOLONG from every
/// operation, not ENOENT.
#[test]
fn names_past_255_bytes_get_enametoolong_everywhere() {
    let m = Mount::new();
    let long = "n".repeat(256);
    let out = m.sh_ok(&format!(
        "python3 -c '
import os, errno
n = \"{long}\"
ops = [(\"stat\", os.stat), (\"chmod\", lambda p: os.chmod(p, 0o600)), (\"unlink\", os.unlink),
       (\"rmdir\", os.rmdir), (\"truncate\", lambda p: os.truncate(p, 0)),
       (\"rename from\", lambda p: os.rename(p, \"x\")), (\"rename to\", lambda p: os.rename(\"plan.md\", p)),
       (\"open\", lambda p: os.open(p, os.O_RDONLY)), (\"create\", lambda p: os.open(p, os.O_CREAT | os.O_WRONLY)),
       (\"mkdir\", os.mkdir), (\"utime\", lambda p: os.utime(p, None))]
for name, f in ops:
    try:
        f(n); print(name, \"succeeded\")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
'"
    ));
    for l in out.lines() {
        assert!(l.ends_with(" ENAMETOOLONG"), "{out}");
    }
    assert_eq!(out.lines().count(), 11, "{out}");
    assert!(m.path("plan.md").exists());
}

/// Issue 10 item 11 (xfstests generic/258): timestamps before 1970 are kept, to the
/// nanosecond.
#[test]
fn timestamps_before_1970_are_kept() {
    let m = Mount::new();
    m.sh_ok("touch -d '1901-01-01 00:00:00 UTC' old && echo x > f");
    assert_eq!(m.sh_ok("stat -c %Y old"), "-2177452800\n");
    let out = m.sh_ok(
        "python3 -c 'import os; os.utime(\"f\", ns=(-1500000001, -1500000001)); s = os.stat(\"f\"); print(s.st_mtime_ns, s.st_atime_ns)'",
    );
    assert_eq!(out, "-1500000001 -1500000001\n");
    // And after a remount (stored, not only cached).
    let mut m = m;
    m.unmount();
    m.start();
    assert_eq!(m.sh_ok("stat -c %Y old"), "-2177452800\n");
    assert_eq!(
        m.sh_ok("python3 -c 'import os; print(os.stat(\"f\").st_mtime_ns)'"),
        "-1500000001\n"
    );
}

/// Issue 10 item 11 (xfstests generic/035): a directory replaced by a rename, still open,
/// reports nlink 0 (like one removed by rmdir).
#[test]
fn an_open_directory_replaced_by_a_rename_has_nlink_0() {
    let m = Mount::new();
    let out = m.sh_ok(
        "mkdir a b && python3 -c '
import os
fd = os.open(\"b\", os.O_RDONLY | os.O_DIRECTORY)
before = os.fstat(fd).st_nlink
os.rename(\"a\", \"b\")
after = os.fstat(fd).st_nlink
os.mkdir(\"c\"); fc = os.open(\"c\", os.O_RDONLY | os.O_DIRECTORY); os.rmdir(\"c\")
print(before, after, os.fstat(fc).st_nlink)
'",
    );
    assert_eq!(out, "2 0 0\n");
}

/// Issue 10 item 11: right after `open(O_TRUNC)` and close, stat shows size 0 with new
/// mtime and ctime (open(2): O_TRUNC sets them), never the old ones.
#[test]
fn o_trunc_sets_mtime_and_ctime_at_once() {
    let m = Mount::new();
    m.sh_ok("echo content > f && touch -d '2001-01-01 UTC' f");
    for _ in 0..20 {
        let out = m.sh_ok(
            "python3 -c '
import os, time
t = time.time_ns()
os.close(os.open(\"f\", os.O_WRONLY | os.O_TRUNC))
s = os.stat(\"f\")
print(s.st_size, s.st_mtime_ns >= t - 10**9, s.st_ctime_ns >= t - 10**9)
'",
        );
        assert_eq!(out, "0 True True\n");
        m.sh_ok("echo content > f && touch -d '2001-01-01 UTC' f");
    }
}

/// An `O_TRUNC` handle that has written nothing yet when another process commits (a
/// shell's `cmd > f` whose dup2 flushed before the command wrote): its truncation stays
/// owed on the version it then follows, so what it writes replaces the file whole (helper
/// finding: the truncation was dropped, and "short" landed on the old content and the other
/// writer's line). The other writer's version stays in the history. With and without the
/// flush of the owed truncation in between.
#[test]
fn an_o_trunc_handle_overtaken_before_it_writes_still_replaces_the_file() {
    let m = Mount::new();
    for flush in [true, false] {
        m.sh_ok("printf '0123456789ABCDEFGHIJ\n' > f");
        let out = m.sh_ok(&format!(
            "python3 -c '
import os, subprocess
fd = os.open(\"f\", os.O_WRONLY | os.O_TRUNC)
if {flush}:
    os.close(os.dup(fd))
subprocess.run([\"sh\", \"-c\", \"echo appended >> f\"], check=True)
os.write(fd, b\"short\\n\")
os.close(fd)
print(open(\"f\", \"rb\").read())
'",
            flush = if flush { "True" } else { "False" }
        ));
        assert_eq!(out, "b'short\\n'\n", "flush {flush}");
        assert_eq!(read(m.path("f")), "short\n", "flush {flush}");
        let versions = m.sh_ok("ls .history/f | tail -2 | xargs -I{} cat .history/f/{}");
        assert_eq!(
            versions, "0123456789ABCDEFGHIJ\nappended\nshort\n",
            "flush {flush}"
        );
    }
}

/// Issue 10 item 11: the mount's source names the database (or --fsname), so tools tell
/// two scratchpads apart.
#[test]
fn the_mount_source_is_the_database_or_fsname() {
    let m = Mount::new();
    let field = |m: &Mount| {
        let mnt = m.mnt.to_string_lossy().to_string();
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .find(|l| l.split(' ').nth(1) == Some(mnt.as_str()))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(field(&m), m.db.to_string_lossy());
    let mut m = m;
    m.unmount();
    m.restart_with(&["--fsname", "agent-7-scratch"]);
    assert_eq!(field(&m), "agent-7-scratch");
    assert!(m.sh_ok("df --output=source .").contains("agent-7-scratch"));
}
