//! Storage grows with the bytes written (SPEC §4, §8): appends store only what they add,
//! identical chunks are stored once, and large files are not held in memory.

mod common;
use common::*;

#[test]
fn ten_thousand_appends_of_100_bytes_stay_under_10_mb() {
    let m = Mount::new();
    m.sh_ok(
        "python3 -c '
import os
line = b\"x\" * 99 + b\"\\n\"
for i in range(10000):
    fd = os.open(\"log\", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, line)
    os.close(fd)
'",
    );
    assert_eq!(std::fs::metadata(m.path("log")).unwrap().len(), 1_000_000);
    assert_eq!(
        m.sql("SELECT COUNT(*), MAX(size) FROM versions WHERE path = 'log' AND op IN ('create', 'append')"),
        "10000|1000000"
    );
    // Every append is on one stream: appends extended it in place.
    assert_eq!(
        m.sql("SELECT COUNT(DISTINCT stream) FROM versions WHERE path = 'log' AND op = 'append'"),
        "1"
    );
    let bytes = m.db_bytes();
    assert!(
        bytes < 10 << 20,
        "database is {bytes} bytes after 10,000 appends"
    );
    // Any version reads back exactly: the 5,000th holds 5,000 lines.
    let v5000 = m.sql(
        "SELECT SUM(min(e.len, v.size - e.offset)) FROM versions v JOIN extents e
         ON e.stream = v.stream AND e.offset < v.size WHERE v.path = 'log' AND v.version = 5000",
    );
    assert_eq!(v5000, "500000");
}

#[test]
fn rewriting_a_large_file_with_one_change_stores_one_chunk() {
    let m = Mount::new();
    let stored = || -> u64 {
        m.sql("SELECT COALESCE(SUM(size), 0) FROM blobs")
            .parse()
            .unwrap()
    };
    let empty = stored();
    m.sh_ok("head -c 8000000 /dev/urandom > big && cp big copy");
    // Same bytes under another name: no new blob bytes at all.
    assert_eq!(stored() - empty, 8_000_000);
    // One byte changed in the middle, whole file rewritten (as an editor does).
    m.sh_ok(
        "python3 -c '
d = bytearray(open(\"big\", \"rb\").read()); d[4000000] ^= 0xff
open(\"big\", \"wb\").write(d)'",
    );
    assert_eq!(
        stored() - empty - 8_000_000,
        65_536,
        "only the changed 64 KiB chunk is new"
    );
}

#[test]
fn a_large_write_does_not_sit_in_the_daemons_memory() {
    let m = Mount::new();
    m.sh_ok("head -c 200000000 /dev/zero | tr '\\0' 'a' > big");
    assert_eq!(std::fs::metadata(m.path("big")).unwrap().len(), 200_000_000);
    let status = std::fs::read_to_string(format!("/proc/{}/status", m.daemon_pid())).unwrap();
    let hwm_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .parse()
        .unwrap();
    assert!(
        hwm_kb < 100_000,
        "daemon peak RSS {hwm_kb} kB after a 200 MB write"
    );
}

/// SPEC §6 "database full": with the database on a small tmpfs, shell tools and Python
/// writing until the disk is full get `ENOSPC` ("No space left on device") where it
/// happens, and what was committed before stays intact and readable.
#[test]
fn a_full_database_is_enospc_and_harms_nothing_committed() {
    let m = Mount::with_db_on_tmpfs("6m");
    m.sh_ok("head -c 100000 /dev/urandom > kept");
    let kept = std::fs::read(m.path("kept")).unwrap();
    // Shell: cp of incompressible files until one fails.
    let o = m.sh(
        "head -c 400000 /dev/urandom > /tmp/scratchfs-blob.$$
         for i in $(seq 1 40); do cp /tmp/scratchfs-blob.$$ f$i || break; head -c 400000 /dev/urandom > /tmp/scratchfs-blob.$$; done
         rm -f /tmp/scratchfs-blob.$$",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("No space left on device"), "shell: {err}");
    // Python, once the store is full.
    let out = m.sh_ok(
        "python3 -c '
import errno, os
try:
    with open(\"py\", \"wb\") as f:
        f.write(os.urandom(400000))
    print(\"committed\")
except OSError as e:
    print(errno.errorcode[e.errno], e.strerror)'",
    );
    assert_eq!(out.trim(), "ENOSPC No space left on device");
    assert_eq!(std::fs::read(m.path("kept")).unwrap(), kept);
    assert_eq!(
        m.head_hash("kept"),
        blake3::hash(&kept).to_hex().to_string(),
        "the committed version is untouched"
    );
}

/// An fsync that fails with ENOSPC keeps what the handle wrote: retried once there is
/// room, it commits the bytes (helper finding: the first fsync failed with EIO, "FOREIGN
/// KEY constraint failed", over a `processes` row whose insert SQLite had rolled back;
/// the retry returned 0 and the bytes were gone, the file unchanged, nothing on record).
#[test]
fn an_fsync_retried_after_enospc_commits_the_bytes() {
    let m = Mount::with_db_on_tmpfs("8m");
    m.sh_ok("echo '{}' > state.json");
    let fill = m.db.parent().unwrap().join("fill");
    let out = m.sh_ok(&format!(
        "python3 -c '
import os, subprocess
subprocess.run([\"dd\", \"if=/dev/zero\", \"of={fill}\", \"bs=64k\"], stderr=subprocess.DEVNULL)
fd = os.open(\"state.json\", os.O_WRONLY | os.O_TRUNC)
os.write(fd, b\"{{\\\"y\\\": 3}}\\n\")
try:
    os.fsync(fd)
    print(\"first fsync ok\")
except OSError as e:
    print(\"first fsync\", e.strerror)
os.unlink(\"{fill}\")
os.fsync(fd)
os.close(fd)
print(\"retried\")
'",
        fill = fill.display()
    ));
    assert_eq!(
        out, "first fsync No space left on device\nretried\n",
        "{out}"
    );
    assert_eq!(read(m.path("state.json")), "{\"y\": 3}\n");
    let versions = m.sql("SELECT COUNT(*) FROM versions v JOIN files f ON f.id = v.file_id WHERE f.path = 'state.json'");
    assert_eq!(versions, "2", "the default {{}}, then the retried commit");
}

/// With the disk full, `ls` still lists the files (MANIFEST, whose size needs the store,
/// is left out and fails when read), and once there is room MANIFEST is listed again
/// (helper finding: `ls` failed with ENOSPC).
#[test]
fn a_full_disk_leaves_the_files_listable() {
    let m = Mount::with_db_on_tmpfs("8m");
    let fill = m.db.parent().unwrap().join("fill");
    m.sh_ok("echo a > a");
    let o = m.sh(&format!(
        "dd if=/dev/zero of={} bs=64k 2>/dev/null; \
         for i in 1 2 3; do head -c 300000 /dev/urandom | base64 > f$i.txt || true; done",
        fill.display()
    ));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("No space left on device"),
        "the disk is full"
    );
    let listed = m.sh_ok("ls");
    assert!(listed.lines().any(|l| l == "a"), "{listed}");
    let e = m.sh("cat MANIFEST");
    assert!(
        String::from_utf8_lossy(&e.stderr).contains("No space left on device"),
        "{}",
        String::from_utf8_lossy(&e.stderr)
    );
    assert_eq!(read(m.path("a")), "a\n");
    std::fs::remove_file(&fill).unwrap();
    let listed = m.sh_ok("ls");
    assert!(listed.lines().any(|l| l == "MANIFEST"), "{listed}");
    assert!(read(m.path("MANIFEST")).contains("a "));
}

/// After a clean unmount the database file alone is the scratchpad: the redo log is
/// empty and the WAL checkpointed into it, so a copy of just that file reads back every
/// change (helper finding: the copy was an empty shell, "no such table: meta").
#[test]
fn after_an_unmount_the_database_file_alone_holds_everything() {
    let mut m = Mount::new();
    m.sh_ok("echo important > plan.md && for i in $(seq 50); do echo $i >> log.md; done");
    assert_eq!(m.unmount(), Some(0));
    let len = |suffix: &str| {
        let mut p = m.db.clone().into_os_string();
        p.push(suffix);
        std::fs::metadata(&p).map_or(0, |md| md.len())
    };
    assert_eq!(
        (len("-wal"), len("-redo")),
        (0, 0),
        "WAL and redo log empty"
    );
    let copy = m.dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    std::fs::copy(&m.db, copy.join("s.db")).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["show", "plan.md", "--db"])
        .arg(copy.join("s.db"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "important\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// When the batch cannot be committed (the disk holding the database is full), a later
/// change either fails with ENOSPC or is kept: an unlink is never answered and then
/// forgotten (docs/SEMANTICS.md, Durability). After the disk grows, a kill -9 and a
/// remount show every change that was answered, and `rm` did what it said.
#[test]
fn with_the_batch_unwritable_an_unlink_is_refused_not_forgotten() {
    let mut m = Mount::with_db_on_tmpfs("8m");
    m.sh_ok("echo keep > victim && sync .");
    // Small commits (acknowledged through the redo log) until `sync` (fsyncdir, which
    // commits the batch) fails: the batch cannot be written; then at once `rm`.
    let acks = m.dir.path().join("acked");
    let src = m.dir.path().join("src");
    let o = m.sh(&format!(
        "i=0; while sync . 2>/dev/null; do i=$((i+1)); [ $i -gt 4000 ] && break
           head -c $(( (i * 7919) % 3000 + 10 )) /dev/urandom | base64 > {src}
           /usr/bin/cp {src} f$i 2>/dev/null && echo f$i >> {acks}; done
         echo filled=$i; rm victim; echo rm=$?",
        src = src.display(),
        acks = acks.display()
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!out.contains("filled=4001"), "the disk never filled: {out}");
    let removed = out.contains("rm=0");
    assert!(
        removed || err.contains("rm: cannot remove 'victim': No space left on device"),
        "{out} {err}"
    );
    assert_eq!(m.path("victim").exists(), !removed);
    // Room again, then a kill: every answered change is there after the remount.
    let disk = m.db.parent().unwrap().to_path_buf();
    let grown = std::process::Command::new("mount")
        .args(["-o", "remount,size=64m"])
        .arg(&disk)
        .status()
        .unwrap();
    assert!(grown.success());
    m.kill9();
    m.start();
    assert_eq!(m.path("victim").exists(), !removed, "rm said {removed}");
    let mut n = 0;
    for f in read(&acks).lines() {
        assert!(m.path(f).exists(), "acknowledged {f} lost");
        n += 1;
    }
    assert!(n > 10, "only {n} files acknowledged before the disk filled");
    let (code, out, err) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "fsck: {out} {err}");
}

/// While SQLite cannot commit the batch (here: a reader pins the WAL, so it must grow, on a
/// full disk), files whose commits were acknowledged read back what was written, never
/// zeros: a read rebuilds the batch SQLite dropped from the redo log. Once there is room,
/// the changes are committed and the page cache holds nothing stale.
#[test]
fn acknowledged_files_read_back_while_the_batch_cannot_be_committed() {
    let m = Mount::with_db_on_tmpfs("64m");
    let disk = m.db.parent().unwrap().to_path_buf();
    let out = m.sh_ok(&format!(
        r#"python3 - <<'PY'
import os, sqlite3, subprocess
disk, db = "{disk}", "{db}"
# A reader holding a read transaction: the WAL cannot restart, it must grow.
hold = sqlite3.connect(db, isolation_level=None)
hold.execute("BEGIN")
hold.execute("SELECT count(*) FROM versions").fetchone()
# Fill the disk but for ~600 KB.
fill = os.path.join(disk, "fill")
subprocess.run(["dd", "if=/dev/zero", "of=" + fill, "bs=64k"], stderr=subprocess.DEVNULL)
os.truncate(fill, os.path.getsize(fill) - 600000)
acked, failed_fold = [], False
for i in range(3000):
    try:
        with open(f"f{{i}}", "w") as f:
            f.write(f"content {{i}}\n")
        acked.append(i)
    except OSError:
        pass
    if i % 50 == 49:
        try:
            fd = os.open(".", os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        except OSError:
            failed_fold = True
            break
wrong = 0
for i in acked:
    try:
        if open(f"f{{i}}").read() != f"content {{i}}\n":
            wrong += 1
    except OSError:
        pass
hold.rollback(); hold.close()
os.remove(fill)
with open("trigger", "w") as f:
    f.write("x")
fd = os.open(".", os.O_RDONLY); os.fsync(fd); os.close(fd)
after = sum(open(f"f{{i}}").read() != f"content {{i}}\n" for i in acked)
print(failed_fold, len(acked), wrong, after)
PY"#,
        disk = disk.display(),
        db = m.db.display()
    ));
    let f: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(f[0], "True", "the fold never failed: {out}");
    let acked: usize = f[1].parse().unwrap();
    assert!(acked > 10, "{out}");
    assert_eq!(
        f[2], "0",
        "acknowledged files read back wrong while the batch was lost: {out}"
    );
    assert_eq!(
        f[3], "0",
        "acknowledged files read back wrong afterwards: {out}"
    );
    // And SQLite has every one of them now.
    let n: usize = m
        .sql("SELECT COUNT(*) FROM heads WHERE current_path LIKE 'f%' AND size > 0")
        .parse()
        .unwrap();
    assert!(n >= acked, "{n} < {acked}");
}
