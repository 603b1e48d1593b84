//! SQLite databases inside the mount (issue 11, item 7; docs/SEMANTICS.md "SQLite
//! databases in the mount"): with several processes, every commit SQLite acknowledged is
//! in the database, or the program got an SQLite error it can report; no process is
//! killed by a signal. The rollback journal works; WAL mode fails cleanly, because its
//! `-shm` index is refused.

mod common;
use common::*;

use std::collections::BTreeMap;

/// The driver: `python3 DRIVER MODE DB PROCS TXNS`. Creates table `t` (rollback journal),
/// switches to journal mode MODE, then forks PROCS workers that each run TXNS
/// transactions (`BEGIN IMMEDIATE; INSERT; COMMIT`), counting the commits that succeeded
/// and stopping at the first error. Prints one JSON object per line: the mode SQLite
/// answered, each worker's count and error, or the signal that killed it, and then,
/// read back with the database switched to the rollback journal (the way out of WAL
/// mode that docs/SEMANTICS.md gives), the rows of each worker.
const DRIVER: &str = r#"
import json, os, sqlite3, sys
mode, db, procs, txns = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
# One write(2) per line, shorter than PIPE_BUF: the forked workers' lines never mix
# (print() may split a line in two writes, which another worker's can land between).
def say(**o): os.write(1, (json.dumps(o) + "\n").encode())
c = sqlite3.connect(db, isolation_level=None, timeout=120)
c.execute("CREATE TABLE t(worker INTEGER, i INTEGER)")
try:
    say(mode=c.execute(f"PRAGMA journal_mode={mode}").fetchone()[0])
except sqlite3.Error as e:
    say(mode=None, error=f"{type(e).__name__}: {e}")
c.close()
def work(p):
    ok, err = 0, None
    try:
        w = sqlite3.connect(db, isolation_level=None, timeout=120)
        for i in range(txns):
            w.execute("BEGIN IMMEDIATE")
            w.execute("INSERT INTO t VALUES (?, ?)", (p, i))
            w.execute("COMMIT")
            ok += 1
    except sqlite3.Error as e:
        err = f"{type(e).__name__}: {e}"
    say(worker=p, ok=ok, error=err)
    os._exit(0)
pids = {}
for p in range(procs):
    pid = os.fork()
    if pid == 0:
        work(p)
    pids[pid] = p
for pid, p in pids.items():
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st):
        say(worker=p, signal=os.WTERMSIG(st))
    elif os.WEXITSTATUS(st) != 0:
        say(worker=p, exit=os.WEXITSTATUS(st))
r = sqlite3.connect(db, isolation_level=None, timeout=120)
r.execute("PRAGMA locking_mode=EXCLUSIVE")
say(after=r.execute("PRAGMA journal_mode=DELETE").fetchone()[0])
say(rows={str(p): n for p, n in r.execute("SELECT worker, count(*) FROM t GROUP BY worker")},
    integrity=r.execute("PRAGMA integrity_check").fetchone()[0])
"#;

/// What the driver reported.
#[derive(Debug, Default)]
struct Run {
    /// The journal mode SQLite answered to the PRAGMA.
    mode: String,
    /// Per worker: commits acknowledged, and the error that stopped it.
    workers: BTreeMap<u64, (u64, Option<String>)>,
    /// Workers killed by a signal or exiting with a status (worker, what).
    died: Vec<(u64, String)>,
    /// Rows in the table per worker, read back afterwards.
    rows: BTreeMap<u64, u64>,
    /// `PRAGMA integrity_check`.
    integrity: String,
}

/// Runs the driver in the mount on `db` with `procs` × `txns`.
fn drive(m: &Mount, mode: &str, db: &str, procs: u32, txns: u32) -> Run {
    let driver = m.dir.path().join("sqlite_driver.py");
    std::fs::write(&driver, DRIVER).unwrap();
    let o = std::process::Command::new("python3")
        .arg(&driver)
        .args([mode, db, &procs.to_string(), &txns.to_string()])
        .current_dir(&m.mnt)
        .output()
        .expect("run python3");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "the driver failed ({}):\n{out}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let mut run = Run::default();
    for line in out.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if let Some(mode) = v.get("mode") {
            run.mode = mode.as_str().unwrap_or("(error)").to_string();
        } else if let Some(rows) = v.get("rows") {
            for (k, n) in rows.as_object().unwrap() {
                run.rows.insert(k.parse().unwrap(), n.as_u64().unwrap());
            }
            run.integrity = v["integrity"].as_str().unwrap().to_string();
        } else if let Some(w) = v.get("worker").and_then(|w| w.as_u64()) {
            if let Some(s) = v.get("signal") {
                run.died.push((w, format!("killed by signal {s}")));
            } else if let Some(s) = v.get("exit") {
                run.died.push((w, format!("exited with status {s}")));
            } else {
                let err = v["error"].as_str().map(str::to_string);
                run.workers.insert(w, (v["ok"].as_u64().unwrap(), err));
            }
        }
    }
    run
}

/// The contract for any journal mode: no worker died, each one either committed every
/// transaction or reports an SQLite error, and every commit it saw succeed is in the
/// table (a failed COMMIT may still have committed: at most one row more).
fn assert_nothing_lost(run: &Run, procs: u64, txns: u64) {
    assert!(
        run.died.is_empty(),
        "workers died: {:?} ({run:?})",
        run.died
    );
    assert_eq!(run.workers.len() as u64, procs, "{run:?}");
    assert_eq!(run.integrity, "ok", "{run:?}");
    for (w, (ok, err)) in &run.workers {
        assert!(
            *ok == txns || err.as_deref().is_some_and(|e| e.contains("Error: ")),
            "worker {w} stopped after {ok} commits without an SQLite error ({run:?})"
        );
        let rows = run.rows.get(w).copied().unwrap_or(0);
        assert!(
            rows >= *ok && rows <= ok + 1,
            "worker {w}: {ok} commits acknowledged, {rows} rows in the table ({run:?})"
        );
    }
}

/// The rollback journal (SQLite's default, and its other on-disk variants) with 4
/// processes × 50 transactions: every acknowledged commit is there.
#[test]
fn rollback_journal_with_four_processes_keeps_every_commit() {
    let m = Mount::new();
    for mode in ["delete", "truncate"] {
        let run = drive(&m, mode, &format!("{mode}.db"), 4, 50);
        assert_eq!(run.mode, mode, "{run:?}");
        assert_nothing_lost(&run, 4, 50);
        for (w, (ok, err)) in &run.workers {
            assert_eq!((*ok, err), (50, &None), "{mode}: worker {w} ({run:?})");
        }
        assert_eq!(run.rows.values().sum::<u64>(), 200, "{mode}: {run:?}");
    }
}

/// WAL mode with 4 processes × 50 transactions: the `-shm` index is refused, so every
/// worker gets SQLite's "unable to open database file" at its first statement, nothing
/// is lost, nobody is killed (before: SIGBUS in two of four, rows missing). The refusal
/// is on record with the way out, which works.
#[test]
fn wal_mode_with_four_processes_fails_with_an_sqlite_error_and_loses_nothing() {
    let m = Mount::new();
    let run = drive(&m, "wal", "app.db", 4, 50);
    assert_nothing_lost(&run, 4, 50);
    for (w, (ok, err)) in &run.workers {
        assert_eq!(
            (*ok, err.as_deref()),
            (0, Some("OperationalError: unable to open database file")),
            "worker {w} ({run:?})"
        );
    }
    // The driver's way out (locking_mode=EXCLUSIVE, then journal_mode=DELETE) worked; the
    // database is an ordinary rollback-journal one again.
    assert_eq!(
        m.sh_ok("python3 -c 'import sqlite3; c = sqlite3.connect(\"app.db\", isolation_level=None); c.execute(\"INSERT INTO t VALUES (9, 9)\"); print(c.execute(\"PRAGMA journal_mode\").fetchone()[0], c.execute(\"SELECT count(*) FROM t\").fetchone()[0])'"),
        "delete 1\n"
    );
    assert!(
        !m.path("app.db-shm").exists(),
        "no -shm index was ever created"
    );
    let (code, out, err) = cli(&m, &["log", "--rejected"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("app.db-shm")
            && out.contains("Operation not supported")
            && out.contains("PRAGMA journal_mode=DELETE"),
        "the refusal and the way out are on record: {out}"
    );
}

/// A database already in WAL mode, copied in: without an index its first statement fails
/// with SQLite's error; with an index copied in too (opened read-only, since opening it
/// for writing is refused), it reads, and a write fails with SQLite's "readonly" error.
/// A file named like an index beside no database is an ordinary file.
#[test]
fn a_wal_database_copied_in_reads_or_fails_cleanly() {
    let m = Mount::new();
    let src = m.dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let o = m.sh_ok(&format!(
        "cd {src} && python3 -c '
import sqlite3
c = sqlite3.connect(\"w.db\", isolation_level=None)
c.execute(\"PRAGMA journal_mode=WAL\"); c.execute(\"CREATE TABLE t(a)\"); c.execute(\"INSERT INTO t VALUES (1)\")
c.close()' && cp w.db \"$MNT/a.db\" && cp w.db \"$MNT/b.db\" && : > \"$MNT/b.db-shm\" && : > \"$MNT/b.db-wal\" && \
         echo plain > \"$MNT/notes-shm\" && echo more >> \"$MNT/notes-shm\" && cat \"$MNT/notes-shm\"",
        src = src.display()
    ));
    assert_eq!(o, "plain\nmore\n");
    let probe = |db: &str| {
        m.sh_ok(&format!(
            "python3 -c '
import sqlite3
c = sqlite3.connect(\"{db}\", isolation_level=None)
for q in [\"SELECT count(*) FROM t\", \"INSERT INTO t VALUES (2)\"]:
    try: print(c.execute(q).fetchall())
    except sqlite3.Error as e: print(type(e).__name__, e)'"
        ))
    };
    assert_eq!(
        probe("a.db"),
        "OperationalError unable to open database file\nOperationalError unable to open database file\n"
    );
    assert_eq!(
        probe("b.db"),
        "[(1,)]\nOperationalError attempt to write a readonly database\n"
    );
}
