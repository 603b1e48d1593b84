//! Durability: a commit acknowledged by close or fsync survives kill -9 of the daemon
//! and a remount (SPEC §4, §8); the next mount clears the dead mount (FUSE-TRAPS §15).

mod common;
use common::*;
use std::collections::HashMap;

#[test]
fn acknowledged_commits_survive_kill_9_during_a_write_storm() {
    let mut m = Mount::new();
    let acks = m.dir.path().join("acks");
    std::fs::create_dir(&acks).unwrap();
    // Four writer processes: each writes files w<p>-<n> (close acknowledges) and appends
    // lines to a shared log (fsync acknowledges), recording each acknowledgement outside
    // the mount only after the call returned success.
    let script = r#"
import os, sys
p, mnt, acks = sys.argv[1], sys.argv[2], sys.argv[3]
ack = open(os.path.join(acks, p), 'a', buffering=1)
n = 0
while True:
    try:
        name = f"w{p}-{n}"
        with open(os.path.join(mnt, name), 'w') as f:
            f.write(f"{name} " * (1 + n % 50))
        ack.write(f"file {name} {1 + n % 50}\n")
        fd = os.open(os.path.join(mnt, "log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, f"line {p} {n}\n".encode())
        os.fsync(fd)
        ack.write(f"line {p} {n}\n")
        os.close(fd)
        n += 1
    except OSError:
        break
"#;
    let mut kids = Vec::new();
    for p in 0..4 {
        kids.push(
            std::process::Command::new("python3")
                .arg("-c")
                .arg(script)
                .arg(p.to_string())
                .arg(&m.mnt)
                .arg(&acks)
                .spawn()
                .unwrap(),
        );
    }
    // Kill once every writer has had more than 10 of each kind acknowledged (an event,
    // not a time: a loaded machine only makes the wait longer).
    wait_for(
        "more than 10 acknowledged files and appends per writer",
        || {
            (0..4).all(|p| {
                let t = std::fs::read_to_string(acks.join(p.to_string())).unwrap_or_default();
                t.lines().filter(|l| l.starts_with("file ")).count() > 10
                    && t.lines().filter(|l| l.starts_with("line ")).count() > 10
            })
        },
    );
    m.kill9();
    for mut k in kids {
        k.wait().unwrap();
    }
    // The dead mount answers ENOTCONN until the next mount clears it (asked with a
    // listing, which always reaches the daemon: `stat` of the root may be answered from
    // attributes the kernel still caches for up to 1 s).
    let e = std::fs::read_dir(&m.mnt).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN), "{e}");
    m.start();
    let log = read(m.path("log"));
    let lines: std::collections::HashSet<&str> = log.lines().collect();
    let mut files = 0;
    let mut appends = 0;
    let mut per_writer: HashMap<String, usize> = HashMap::new();
    for p in 0..4 {
        for l in read(acks.join(p.to_string())).lines() {
            let f: Vec<&str> = l.split(' ').collect();
            match f[0] {
                "file" => {
                    let content = read(m.path(f[1]));
                    assert_eq!(content, format!("{} ", f[1]).repeat(f[2].parse().unwrap()));
                    files += 1;
                }
                "line" => {
                    assert!(lines.contains(l), "acknowledged line {l:?} lost");
                    appends += 1;
                }
                _ => unreachable!(),
            }
            *per_writer.entry(p.to_string()).or_default() += 1;
        }
    }
    assert!(
        files > 20 && appends > 20,
        "storm too small: {files} files, {appends} appends"
    );
    assert_eq!(per_writer.len(), 4);
    // Every acknowledged file has its version recorded.
    let recorded: usize = m
        .sql("SELECT COUNT(DISTINCT path) FROM versions WHERE path LIKE 'w%' AND size > 0")
        .parse()
        .unwrap();
    assert!(
        recorded >= files,
        "{recorded} recorded < {files} acknowledged"
    );
}

/// An answered unlink or rmdir survives kill -9, like a create: it goes through the redo
/// log (docs/SEMANTICS.md, Durability), in order with the changes around it.
#[test]
fn unlinks_survive_kill_9_once_answered() {
    let mut m = Mount::new();
    m.sh_ok("mkdir d e && touch d/a d/b d/c");
    m.sh_ok("rm d/a && rmdir e");
    m.kill9();
    m.start();
    assert_eq!(m.sh_ok("ls d"), "b\nc\n");
    assert!(!m.path("e").exists());
    assert_eq!(
        m.sql("SELECT COUNT(*) FROM events WHERE op = 'unlink' AND path = 'd/a'"),
        "1"
    );
    // Interleaved with creates and writes, killed at once: the order holds.
    m.sh_ok("rm d/b && rm d/c && touch d/c && printf x > d/e && rm d/e && printf y > d/e");
    m.kill9();
    m.start();
    assert_eq!(m.sh_ok("ls d"), "c\ne\n");
    assert_eq!(read(m.path("d/e")), "y");
    assert_eq!(
        m.sql("SELECT COUNT(*) FROM events WHERE op = 'unlink'"),
        "4"
    );
    assert_eq!(m.sql("SELECT COUNT(*) FROM events WHERE op = 'rmdir'"), "1");
}

/// Closes are acknowledged through the redo log (docs/SEMANTICS.md, "Durability"): a
/// storm of creates, writes and appends without any fsync, killed, leaves acknowledged
/// changes that only the log holds; the CLI (offline) and the next mount apply them, each
/// with its version, and the log is emptied.
#[test]
fn closes_acknowledged_through_the_redo_log_survive_kill_9() {
    let mut m = Mount::new();
    let script = r#"
import os, sys
mnt, acks, round = sys.argv[1], sys.argv[2], sys.argv[3]
ack = open(acks, 'a', buffering=1)
n = 0
while True:
    try:
        name = f"r{round}-{n}"
        with open(os.path.join(mnt, name), 'w') as f:
            f.write(f"{name} " * (1 + n % 7))
        with open(os.path.join(mnt, "log"), 'a') as f:
            f.write(f"line {round} {n}\n")
        ack.write(f"{name} {1 + n % 7} {n}\n")
        n += 1
    except OSError:
        break
"#;
    let redo = {
        let mut p = m.db.clone().into_os_string();
        p.push("-redo");
        std::path::PathBuf::from(p)
    };
    // A kill can land just after the fold thread wrote everything (the log then holds
    // nothing to replay, which proves nothing here): try again, up to five rounds.
    let mut round = 0;
    let acks = loop {
        round += 1;
        let acks = m.dir.path().join(format!("acks-{round}"));
        let mut kid = std::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&m.mnt)
            .arg(&acks)
            .arg(round.to_string())
            .spawn()
            .unwrap();
        // Kill once more than 20 closes were acknowledged and the log holds records (an
        // event: the fold thread empties the log within ms, so wait for a moment when it
        // is not empty).
        wait_for("more than 20 acknowledged closes", || {
            count_lines(&acks) > 20
        });
        wait_for("a record in the redo log", || {
            std::fs::metadata(&redo).map(|x| x.len()).unwrap_or(0) > 0
        });
        m.kill9();
        kid.wait().unwrap();
        if std::fs::metadata(&redo).map(|x| x.len()).unwrap_or(0) > 0 {
            break acks;
        }
        assert!(
            round < 5,
            "five kills left nothing in {} (does a close still wait for SQLite?)",
            redo.display()
        );
        m.start();
    };
    let acked: Vec<(String, usize, usize)> = read(&acks)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect();
    assert!(acked.len() > 20, "storm too small: {}", acked.len());
    let (last, _, _) = acked.last().unwrap().clone();
    // Offline, the CLI applies the log first (the database is free): the last
    // acknowledged file has its version.
    let (code, out, err) = cli(&m, &["history", &last]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("create"), "history of {last}: {out}");
    assert_eq!(std::fs::metadata(&redo).unwrap().len(), 0, "log emptied");
    m.start();
    let log = read(m.path("log"));
    for (name, reps, n) in &acked {
        assert_eq!(read(m.path(name)), format!("{name} ").repeat(*reps));
        assert!(
            log.contains(&format!("line {round} {n}\n")),
            "acknowledged append {n} of round {round} lost"
        );
    }
    let recorded: usize = m
        .sql(&format!(
            "SELECT COUNT(DISTINCT path) FROM versions WHERE path LIKE 'r{round}-%' AND size > 0"
        ))
        .parse()
        .unwrap();
    assert!(recorded >= acked.len(), "{recorded} < {}", acked.len());
    let appends: usize = m
        .sql("SELECT COUNT(*) FROM versions WHERE path = 'log' AND op IN ('create', 'append')")
        .parse()
        .unwrap();
    assert!(
        appends >= acked.len(),
        "{appends} appends < {}",
        acked.len()
    );
}

/// An offline command that changes the database (`gc`) after a kill -9 applies the redo
/// log first: the log's records replay onto the state they were made on. (Before, gc
/// deleted the newest stream, a replayed commit took its id, and the next one read
/// zeros where its base had been.) The writer kills the daemon itself right after its
/// last close, well within the 5 ms before the batch would be committed.
#[test]
fn offline_gc_after_kill_9_applies_the_redo_log_first() {
    let mut m = Mount::new();
    m.sh_ok("echo a > f; echo b > f; setfattr -n user.scratchfs.restore -v 2 f; : > f; sync .");
    m.sh_ok(&format!(
        "python3 -c \"
import os, signal
fd = os.open('g', os.O_WRONLY | os.O_CREAT, 0o644); os.write(fd, b'hello world\\n'); os.close(fd)
fd = os.open('g', os.O_WRONLY); os.pwrite(fd, b'HELLO', 0); os.close(fd)
os.kill({}, signal.SIGKILL)\"",
        m.daemon_pid()
    ));
    m.reap();
    let (code, out, err) = cli(&m, &["gc", "--keep-last", "1"]);
    assert_eq!(code, 0, "{out} {err}");
    m.start();
    assert_eq!(read(m.path("g")), "HELLO world\n");
    let (code, out, err) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "{out} {err}");
}

/// Runs `script` (Python) with the mountpoint and a flag directory outside the mount as
/// arguments; the script touches flag files to say how far it got.
fn spawn_py(m: &Mount, script: &str, flags: &std::path::Path) -> std::process::Child {
    std::fs::create_dir_all(flags).unwrap();
    std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&m.mnt)
        .arg(flags)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Restarts the daemon armed to stop at failpoint `name` (src/failpoint.rs), runs
/// `script` ([`spawn_py`]), and kills the daemon once it stopped there, inside the
/// operation's transaction; returns the script's flag directory. The daemon is left dead.
fn kill_at_failpoint(m: &mut Mount, name: &str, script: &str) -> std::path::PathBuf {
    m.kill9();
    let stop = m.start_with_failpoint(name);
    let flags = m.dir.path().join(format!("flags-{name}"));
    let mut kid = spawn_py(m, script, &flags);
    wait_for(&format!("the daemon to stop at failpoint {name}"), || {
        stop.exists()
    });
    m.kill9();
    kid.wait().unwrap();
    flags
}

fn fsck_clean(m: &Mount) {
    let (code, out, err) = cli(m, &["fsck"]);
    assert_eq!(code, 0, "fsck after the kill: {out} {err}");
}

/// Issue 10 item 8: a kill while a commit larger than the redo log's limit (256 KiB) is
/// being written to SQLite leaves the old content or the new one, whole, and the new one
/// if the close was acknowledged.
#[test]
fn a_kill_during_a_commit_past_the_redo_log_leaves_old_or_new_whole() {
    let mut m = Mount::new();
    let script = r#"
import os, sys
mnt, flags, n = sys.argv[1], sys.argv[2], 8 << 20
f = open(os.path.join(mnt, "big"), "wb")
f.write(bytes((i * 7 + 1) % 251 for i in range(65536)) * (n // 65536))
open(os.path.join(flags, "closing"), "w").close()
try:
    f.close()
    open(os.path.join(flags, "acked"), "w").close()
except OSError:
    pass
"#;
    let pattern: Vec<u8> = (0..65536u32).map(|i| ((i * 7 + 1) % 251) as u8).collect();
    let new: Vec<u8> = pattern.repeat(128);
    for round in 0..3 {
        m.sh_ok(&format!("echo old {round} > big; sync big"));
        let flags = m.dir.path().join(format!("flags-{round}"));
        let mut kid = spawn_py(&m, script, &flags);
        wait_for("the writer to reach close()", || {
            flags.join("closing").exists()
        });
        m.kill9();
        kid.wait().unwrap();
        m.start();
        let got = std::fs::read(m.path("big")).unwrap();
        eprintln!(
            "round {round}: acked {}, new content {}",
            flags.join("acked").exists(),
            got == new
        );
        if flags.join("acked").exists() {
            assert!(
                got == new,
                "round {round}: acknowledged 8 MiB commit lost or torn"
            );
        } else {
            assert!(
                got == new || got == format!("old {round}\n").as_bytes(),
                "round {round}: neither the old nor the new content ({} bytes)",
                got.len()
            );
        }
        fsck_clean(&m);
    }
    // Killed for certain inside the commit's transaction (failpoint): the old content.
    m.sh_ok("echo old > big; sync big");
    let flags = kill_at_failpoint(&mut m, "commit-now", script);
    assert!(
        !flags.join("acked").exists(),
        "acknowledged before its transaction committed"
    );
    m.start();
    assert_eq!(read(m.path("big")), "old\n");
    fsck_clean(&m);
}

/// Issue 10 item 8: gc is one transaction: a kill while it runs leaves every version or
/// the gc's result, never a part, and the current content is intact.
#[test]
fn a_kill_during_gc_leaves_all_or_nothing() {
    let mut m = Mount::new();
    m.sh_ok("for i in $(seq 1 300); do echo v$i > f; echo w$i > g; done; sync .");
    let before: usize = m
        .sql("SELECT COUNT(*) FROM versions WHERE path IN ('f', 'g')")
        .parse()
        .unwrap();
    let script = r#"
import os, sys
mnt, flags = sys.argv[1], sys.argv[2]
open(os.path.join(flags, "started"), "w").close()
try:
    os.setxattr(mnt, "user.scratchfs.gc", b'{"keep_last":1,"before_ns":null,"dry_run":false}')
    open(os.path.join(flags, "done"), "w").close()
except OSError:
    pass
"#;
    let flags = m.dir.path().join("flags");
    let mut kid = spawn_py(&m, script, &flags);
    wait_for("the gc call to start", || flags.join("started").exists());
    m.kill9();
    kid.wait().unwrap();
    m.start();
    assert_eq!(read(m.path("f")), "v300\n");
    assert_eq!(read(m.path("g")), "w300\n");
    let after: usize = m
        .sql("SELECT COUNT(*) FROM versions WHERE path IN ('f', 'g')")
        .parse()
        .unwrap();
    eprintln!(
        "gc acknowledged: {}, versions {before} -> {after}",
        flags.join("done").exists()
    );
    if flags.join("done").exists() {
        assert_eq!(after, 2, "acknowledged gc not kept");
    } else {
        assert!(
            after == before || after == 2,
            "a part of gc: {after} of {before}"
        );
    }
    fsck_clean(&m);
    // Killed for certain inside gc's transaction (failpoint): every version is kept.
    m.sh_ok("for i in $(seq 1 50); do echo x$i > f; done; sync .");
    let before: usize = m.sql("SELECT COUNT(*) FROM versions").parse().unwrap();
    kill_at_failpoint(&mut m, "gc", script);
    m.start();
    assert_eq!(
        m.sql("SELECT COUNT(*) FROM versions")
            .parse::<usize>()
            .unwrap(),
        before
    );
    assert_eq!(read(m.path("f")), "x50\n");
    fsck_clean(&m);
}

/// Issue 10 item 8: a directory rename is one transaction: after a kill during `mv d e`
/// exactly one of the two names holds every file, with its content.
#[test]
fn a_kill_during_a_directory_rename_leaves_one_whole_tree() {
    let mut m = Mount::new();
    m.sh_ok("mkdir d && for i in $(seq 1 400); do echo c$i > d/f$i; done; sync .");
    let script = r#"
import os, sys
mnt, flags = sys.argv[1], sys.argv[2]
open(os.path.join(flags, "started"), "w").close()
try:
    os.rename(os.path.join(mnt, "d"), os.path.join(mnt, "e"))
    open(os.path.join(flags, "done"), "w").close()
except OSError:
    pass
"#;
    let flags = m.dir.path().join("flags");
    let mut kid = spawn_py(&m, script, &flags);
    wait_for("the rename to start", || flags.join("started").exists());
    m.kill9();
    kid.wait().unwrap();
    m.start();
    let (d, e) = (m.path("d").exists(), m.path("e").exists());
    assert!(d != e, "d exists: {d}, e exists: {e}");
    eprintln!(
        "rename acknowledged: {}, renamed: {e}",
        flags.join("done").exists()
    );
    if flags.join("done").exists() {
        assert!(e, "an acknowledged rename was lost");
    }
    let dir = if d { "d" } else { "e" };
    for i in 1..=400 {
        assert_eq!(read(m.path(&format!("{dir}/f{i}"))), format!("c{i}\n"));
    }
    assert_eq!(std::fs::read_dir(m.path(dir)).unwrap().count(), 400);
    fsck_clean(&m);
    // Killed for certain inside the rename's transaction (failpoint): the old name.
    if e {
        m.sh_ok("mv e d; sync .");
    }
    kill_at_failpoint(&mut m, "rename", script);
    m.start();
    assert!(m.path("d").exists() && !m.path("e").exists());
    assert_eq!(std::fs::read_dir(m.path("d")).unwrap().count(), 400);
    assert_eq!(read(m.path("d/f400")), "c400\n");
    fsck_clean(&m);
}

/// Issue 10 item 8: bytes written through a handle that was never flushed are not
/// acknowledged: after a kill they are gone, never half there, and the file keeps its
/// last committed version (a rewrite, a pwrite and an append handle, each open).
#[test]
fn a_kill_with_write_handles_open_keeps_the_last_committed_versions() {
    let mut m = Mount::new();
    m.sh_ok("echo committed-a > a; echo committed-b > b; echo committed-c > c; sync .");
    let script = r#"
import os, sys, time
mnt, flags = sys.argv[1], sys.argv[2]
fa = os.open(os.path.join(mnt, "a"), os.O_WRONLY | os.O_TRUNC)
os.write(fa, b"unflushed " * 100000)
fb = os.open(os.path.join(mnt, "b"), os.O_WRONLY)
os.pwrite(fb, b"XX", 3)
fc = os.open(os.path.join(mnt, "c"), os.O_WRONLY | os.O_APPEND)
os.write(fc, b"appended, not closed\n")
open(os.path.join(flags, "written"), "w").close()
time.sleep(3600)
"#;
    let flags = m.dir.path().join("flags");
    let mut kid = spawn_py(&m, script, &flags);
    wait_for("the writes", || flags.join("written").exists());
    m.kill9();
    kid.kill().unwrap();
    kid.wait().unwrap();
    m.start();
    assert_eq!(read(m.path("a")), "committed-a\n");
    assert_eq!(read(m.path("b")), "committed-b\n");
    assert_eq!(read(m.path("c")), "committed-c\n");
    // The mount works: a new write commits.
    m.sh_ok("echo after >> c");
    assert_eq!(read(m.path("c")), "committed-c\nafter\n");
    fsck_clean(&m);
}

/// Issue 10 item 4: a redo log damaged before its tail is never dropped silently: mount
/// and every command refuse with the file, the offset and what to do; `scratchfs recover
/// --accept-loss` (root or the owner only) applies the intact records, keeps the damaged
/// log and records the loss.
#[test]
fn a_redo_log_damaged_in_the_middle_refuses_the_mount_until_the_loss_is_accepted() {
    let mut m = Mount::new();
    m.kill9();
    // The fold thread stops before its first fold: every answered change stays in the log.
    let stop = m.start_with_failpoint("fold-thread");
    m.sh_ok("echo a > f1; echo b > f2; echo c > f3");
    wait_for("the fold thread to stop", || stop.exists());
    m.kill9();
    let redo = std::path::PathBuf::from(format!("{}-redo", m.db.display()));
    let mut bytes = std::fs::read(&redo).unwrap();
    // Records: create f1, commit f1, create f2, ...: damage the second one.
    let first = 4 + u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize + 16;
    assert!(
        bytes.len() > first * 3,
        "the log holds {} bytes",
        bytes.len()
    );
    bytes[first + 10] ^= 0x40;
    std::fs::write(&redo, &bytes).unwrap();
    let expect = format!("damaged at byte {first} of {}", bytes.len());
    // The mount refuses (foreground: its exit status and stderr).
    let o = std::process::Command::new(BIN)
        .arg("mount")
        .arg(&m.mnt)
        .arg("--db")
        .arg(&m.db)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "mounted a damaged log: {err}");
    assert!(err.contains(&expect), "{err}");
    assert!(err.contains(&redo.display().to_string()), "{err}");
    assert!(err.contains("scratchfs recover --accept-loss"), "{err}");
    // So do the commands, and `recover` without --accept-loss.
    for args in [&["log"][..], &["recover"]] {
        let (code, out, err) = cli(&m, args);
        assert_eq!(code, 1, "{args:?}: {out} {err}");
        assert!(err.contains(&expect), "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(&redo).unwrap(), bytes, "the log was changed");
    // Accepting the loss is for root or the owner of the database only.
    let o = std::process::Command::new("setpriv")
        .args([
            "--reuid",
            "1000",
            "--regid",
            "1000",
            "--clear-groups",
            BIN,
            "recover",
            "--accept-loss",
            "--db",
        ])
        .arg(&m.db)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert_eq!(
        std::fs::read(&redo).unwrap(),
        bytes,
        "an unprivileged user cut the log"
    );
    let (code, out, err) = cli(&m, &["recover", "--accept-loss"]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("applied the 1 intact records"), "{out}");
    // Nothing is deleted: the whole damaged log is kept beside the database.
    let copy = out
        .split("kept as ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .unwrap()
        .to_string();
    assert_eq!(std::fs::read(&copy).unwrap(), bytes);
    m.start();
    // The intact record (f1's create) is applied; what followed the damage is not.
    assert!(m.path("f1").exists());
    assert!(!m.path("f2").exists());
    assert_eq!(
        m.sql("SELECT COUNT(*) FROM events WHERE op = 'redo-loss' AND errno = 5"),
        "1"
    );
    assert!(
        m.sql("SELECT reason FROM events WHERE op = 'redo-loss'")
            .contains(&expect)
    );
    fsck_clean(&m);
}
