//! A file without a version (a fresh `O_CREAT` whose handle has committed nothing yet)
//! behaves as one whose current version is empty (issue 31 item 5): a handle on it follows
//! a version committed afterwards by another handle or process, as docs/SEMANTICS.md
//! promises for every other file, and a handle that has already written or read is refused
//! with `ESTALE`, never a silent overwrite. Runs on SQLite and on PostgreSQL
//! (`SCRATCHFS_TEST_BACKEND=postgres`); the same across two daemons is in
//! tests/multi_daemon.rs. Nothing here waits a fixed time: each wait polls with a deadline.

mod common;

use std::process::Command;

use common::{Mount, cli, read};

/// What each script starts with: `other(code)` runs a line of Python in a helper process
/// started before the script opens anything, so the other process's open, write and close
/// are its own (a fork or an exec while a descriptor is open would flush that descriptor,
/// FUSE-TRAPS §5, committing the file's first version before the other process writes).
const PRELUDE: &str = r#"
import os, sys, subprocess, time
_helper = subprocess.Popen([sys.executable, "-c", """
import os, sys
for line in sys.stdin:
    try:
        exec(line)
        print("ok", flush=True)
    except Exception as e:
        print(repr(e).replace(chr(10), " "), flush=True)
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def other(code):
    _helper.stdin.write(code + "\n")
    _helper.stdin.flush()
    answer = _helper.stdout.readline()
    assert answer == "ok\n", f"the other process: {code}: {answer}"
def close(fd):
    try:
        os.close(fd)
        return "0"
    except OSError as e:
        return f"errno {e.errno}"
"#;

/// Runs `script` (after [`PRELUDE`]) with python3 in the mount; its stdout.
fn py(m: &Mount, script: &str) -> String {
    let file = m.dir.path().join("script.py");
    std::fs::write(&file, format!("{PRELUDE}\n{script}")).unwrap();
    let o = Command::new("python3")
        .arg(&file)
        .current_dir(&m.mnt)
        .output()
        .expect("run python3");
    assert!(
        o.status.success(),
        "script failed ({}):\n{script}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The refusals on record, as `scratchfs log --rejected` prints them.
fn rejected(m: &Mount) -> String {
    let (code, out, err) = cli(m, &["log", "--rejected"]);
    assert_eq!(code, 0, "{err}");
    out
}

/// The issue's first case and its two siblings: a handle opened by `O_CREAT` on a new
/// file, another process writes 1,234 bytes of `x`, then the handle's `pwrite` at 23,455,
/// `ftruncate` to 5,000 or `posix_fallocate` to 5,000 lands on those bytes, as POSIX
/// gives, and `close()` returns 0 with nothing refused. (It replaced them with zeros.)
/// Write-only and read-write handles.
#[test]
fn a_create_handle_follows_a_version_committed_before_it_changes_anything() {
    let m = Mount::new();
    for (i, (op, call)) in [
        ("pwrite", "os.pwrite(fd, b'y', 23455)"),
        ("ftruncate", "os.ftruncate(fd, 5000)"),
        ("posix_fallocate", "os.posix_fallocate(fd, 0, 5000)"),
    ]
    .iter()
    .enumerate()
    {
        for (j, acc) in ["os.O_RDWR", "os.O_WRONLY"].iter().enumerate() {
            let name = format!("f{i}{j}");
            let out = py(
                &m,
                &format!(
                    "fd = os.open('{name}', os.O_CREAT | {acc}, 0o644)\n\
                     other(\"f = open('{name}', 'r+b'); f.write(b'x' * 1234); f.close()\")\n\
                     {call}\n\
                     print(close(fd))"
                ),
            );
            assert_eq!(out, "0\n", "{op} {acc}: close()");
            let bytes = std::fs::read(m.path(&name)).unwrap();
            let mut want = vec![b'x'; 1234];
            if *op == "pwrite" {
                want.resize(23455, 0);
                want.push(b'y');
            } else {
                want.resize(5000, 0);
            }
            assert_eq!(bytes.len(), want.len(), "{op} {acc}: size");
            assert!(bytes == want, "{op} {acc}: {:?}...", &bytes[..16]);
            // The other process's version, then the handle's, built on it.
            let versions = m.versions(&name);
            assert_eq!(versions.len(), 2, "{op} {acc}: {versions:?}");
        }
    }
    let refused = rejected(&m);
    assert!(
        !refused.contains("rejected f"),
        "nothing refused: {refused}"
    );
}

/// The issue's log: created `O_CREAT|O_EXCL|O_WRONLY`, another process appends a line,
/// the creator writes `header\n` at offset 0 and closes: the header overlays the start of
/// the appended line, as on a local filesystem (`header\nom appender\n`); the line was
/// gone, the file `header\n`.
#[test]
fn a_log_created_with_o_excl_keeps_a_line_appended_before_its_header() {
    let m = Mount::new();
    let out = py(
        &m,
        "fd = os.open('log', os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)\n\
         other(\"f = open('log', 'ab'); f.write(b'line from appender\\\\n'); f.close()\")\n\
         os.write(fd, b'header\\n')\n\
         print(close(fd))",
    );
    assert_eq!(out, "0\n");
    assert_eq!(read(m.path("log")), "header\nom appender\n");
    let versions = m.versions("log");
    assert_eq!(versions.len(), 2, "{versions:?}");
}

/// A handle that has written before the other process's version (or read the empty file
/// it created) built on the empty file: its commit is a lost update, `ESTALE` at
/// `close()`, recorded with its content; the other process's version stays.
#[test]
fn a_create_handle_that_wrote_or_read_before_another_commit_gets_estale() {
    let m = Mount::new();
    for (name, before) in [
        ("wrote", "os.write(fd, b'mine')"),
        ("read", "assert os.read(fd, 10) == b''"),
    ] {
        let out = py(
            &m,
            &format!(
                "fd = os.open('{name}', os.O_CREAT | os.O_RDWR, 0o644)\n\
                 {before}\n\
                 other(\"f = open('{name}', 'r+b'); f.write(b'x' * 10); f.close()\")\n\
                 os.pwrite(fd, b'y', 20)\n\
                 print(close(fd))"
            ),
        );
        assert_eq!(out, format!("errno {}\n", libc::ESTALE), "{name}");
        assert_eq!(read(m.path(name)), "x".repeat(10), "{name}");
        let refused = rejected(&m);
        assert!(
            refused.contains(&format!("rejected {name}"))
                && refused.contains("the file had no version when the writer opened it"),
            "{name}: {refused}"
        );
    }
}

/// A create's handle closed without writing after another process wrote the file (`touch`
/// racing a writer): the empty first version it owed is behind the other's, nothing is
/// committed and nothing refused (it was refused as a lost update, on record).
#[test]
fn a_create_handle_closed_without_writing_after_another_commit_commits_nothing() {
    let m = Mount::new();
    let out = py(
        &m,
        "fd = os.open('t', os.O_CREAT | os.O_WRONLY, 0o644)\n\
         other(\"f = open('t', 'r+b'); f.write(b'x' * 10); f.close()\")\n\
         print(close(fd))",
    );
    assert_eq!(out, "0\n");
    assert_eq!(read(m.path("t")), "x".repeat(10));
    // The close's release is answered after close() returns: wait for it (a new open
    // waits for an owed change), then look at the history.
    let _ = read(m.path("t"));
    let refused = rejected(&m);
    assert!(!refused.contains("rejected t "), "{refused}");
    assert_eq!(m.versions("t").len(), 1, "{:?}", m.versions("t"));
}

/// An `O_TRUNC` open of a file without a version (or with an empty one) overtaken by
/// another commit before it writes replaces that version whole, as an `O_TRUNC` open of a
/// file with content does (docs/SEMANTICS.md): its `b\n` was laid over the other
/// process's `aaaa\n` (`b\naa\n`).
#[test]
fn an_o_trunc_open_of_a_file_without_a_version_still_replaces_what_it_follows() {
    let m = Mount::new();
    for (name, make) in [
        // Created and held open by this script: no version.
        (
            "none",
            "keep = os.open('none', os.O_CREAT | os.O_WRONLY, 0o644)",
        ),
        // An empty version.
        ("empty", "open('empty', 'wb').close(); keep = None"),
    ] {
        let out = py(
            &m,
            &format!(
                "{make}\n\
                 fd = os.open('{name}', os.O_WRONLY | os.O_TRUNC)\n\
                 other(\"f = open('{name}', 'ab'); f.write(b'aaaa\\\\n'); f.close()\")\n\
                 os.write(fd, b'b\\n')\n\
                 print(close(fd))\n\
                 if keep is not None: print(close(keep))"
            ),
        );
        assert!(out.starts_with("0\n"), "{name}: {out}");
        assert_eq!(read(m.path(name)), "b\n", "{name}");
    }
}

/// Two processes creating one new SQLite database in the mount (rollback journal,
/// `journal_mode=DELETE`; WAL is refused by design): both succeed and both tables are
/// there, as on tmpfs. The first failed with "file is not a database": its handle, the
/// create's, read its own empty copy instead of the other's committed database.
#[test]
fn two_processes_creating_one_sqlite_database_both_succeed() {
    let m = Mount::new();
    let out = py(
        &m,
        r#"
import multiprocessing, sqlite3
def work(i, barrier, q):
    try:
        c = sqlite3.connect("t.db", timeout=30)
        c.execute("PRAGMA journal_mode=DELETE")
        barrier.wait()
        c.execute(f"CREATE TABLE IF NOT EXISTS t{i}(x)")
        c.execute(f"INSERT INTO t{i} VALUES (1)")
        c.commit()
        c.close()
        q.put((i, "ok"))
    except Exception as e:
        q.put((i, repr(e)))
for trial in range(12):
    for suffix in ["", "-journal"]:
        try:
            os.unlink("t.db" + suffix)
        except FileNotFoundError:
            pass
    b = multiprocessing.Barrier(2)
    q = multiprocessing.Queue()
    ps = [multiprocessing.Process(target=work, args=(i, b, q)) for i in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    res = sorted(q.get() for _ in ps)
    c = sqlite3.connect("t.db")
    tables = sorted(r[0] for r in c.execute("SELECT name FROM sqlite_master"))
    rows = [c.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables]
    c.close()
    print(trial, res, tables, rows)
"#,
    );
    for line in out.lines() {
        assert!(
            line.ends_with("[(0, 'ok'), (1, 'ok')] ['t0', 't1'] [1, 1]"),
            "{out}"
        );
    }
    assert_eq!(out.lines().count(), 12, "{out}");
}

/// A follower of a file that starts empty (`touch log; tail -f log`, or a file created and
/// still without a version) reads the lines another process appends: it saw the size grow
/// and read zero bytes, forever (with a non-empty file it worked). Python's reader and
/// coreutils' `tail -f`; each polls for the line with a deadline.
#[test]
fn a_follower_of_an_empty_file_reads_what_is_appended() {
    let m = Mount::new();
    for (name, make) in [
        ("touched", "open('touched', 'wb').close(); keep = None"),
        (
            "unversioned",
            "keep = os.open('unversioned', os.O_CREAT | os.O_WRONLY, 0o644)",
        ),
    ] {
        let out = py(
            &m,
            &format!(
                "{make}\n\
                 r = open('{name}', 'rb', buffering=0)\n\
                 got = r.read()\n\
                 other(\"f = open('{name}', 'ab'); f.write(b'appended line\\\\n'); f.close()\")\n\
                 deadline = time.time() + 20\n\
                 while b'\\n' not in got and time.time() < deadline:\n\
                 \x20   got += r.read()\n\
                 \x20   time.sleep(0.01)\n\
                 print(repr(got))\n\
                 if keep is not None: print(close(keep))"
            ),
        );
        assert!(out.starts_with("b'appended line\\n'\n"), "{name}: {out}");
    }
    // coreutils' tail -f (it polls a FUSE file's size once a second).
    let out = m.sh_ok(
        "o=$(mktemp); touch tailed; tail -f tailed > $o & t=$!; \
         for i in $(seq 2000); do ls -l /proc/$t/fd | grep -q tailed && break; sleep 0.01; done; \
         echo appended line >> tailed; \
         for i in $(seq 2000); do grep -q appended $o && break; sleep 0.01; done; \
         kill $t; cat $o; rm $o",
    );
    assert_eq!(out, "appended line\n");
}

/// The page cache and appenders (issue 31 item 5): a reader that opened through the page
/// cache before an appender opened read zeros where the appended bytes go (0.1 to 0.7% of
/// whole-file reads in this loop): the appender's direct writes extend the kernel's one
/// `i_size` under the reader, whose cached last page holds zeros past its version's end.
/// Now the first appender waits for such readers, and readers of a file opened for
/// appending bypass the page cache. Under load: one process appending with a fresh
/// `open(O_APPEND)` per line, two reading the whole file with a fresh `open` per read;
/// every read is a committed version, lines whole, never a NUL.
#[test]
fn readers_never_see_zeros_while_an_appender_opens_and_closes_under_load() {
    let m = Mount::new();
    let out = py(
        &m,
        r#"
import multiprocessing, re
name = "race.log"
open(name, "wb").write(b"start line\n")
line = re.compile(rb"(start line|line \d{6} from the appender)\n")
def appender(stop):
    i = 0
    while not stop.is_set():
        fd = os.open(name, os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"line %06d from the appender\n" % i)
        os.close(fd)
        i += 1
def reader(stop, q):
    reads = bad = 0
    example = None
    while not stop.is_set():
        with open(name, "rb") as f:
            b = f.read()
        reads += 1
        if b"\0" in b or line.sub(b"", b) != b"":
            bad += 1
            example = example or (len(b), b[-60:])
    q.put((reads, bad, example))
stop = multiprocessing.Event()
q = multiprocessing.Queue()
ps = [multiprocessing.Process(target=reader, args=(stop, q)) for _ in range(2)]
ps.append(multiprocessing.Process(target=appender, args=(stop,)))
for p in ps:
    p.start()
# 15 s, or 20,000 reads' worth of appends on a fast machine.
deadline = time.time() + 15
while time.time() < deadline and os.stat(name).st_size < 29 * 20000:
    time.sleep(0.05)
stop.set()
for p in ps:
    p.join()
results = [q.get() for _ in range(2)]
print(sum(r[0] for r in results), sum(r[1] for r in results), [r[2] for r in results if r[2]])
"#,
    );
    let fields: Vec<&str> = out.trim().splitn(3, ' ').collect();
    let (reads, bad): (u64, u64) = (fields[0].parse().unwrap(), fields[1].parse().unwrap());
    assert_eq!(bad, 0, "reads with bytes no version held: {out}");
    assert!(reads >= 1000, "too few reads to tell: {out}");
}

/// A reader through the page cache that stays open (`tail -f` opened before any writer)
/// delays the file's first appender by at most `CACHED_READERS_WAIT` (1 s), not every
/// append after it: a shell's `>>` in a loop goes on at its own pace.
#[test]
fn a_reader_left_open_delays_only_the_first_appender() {
    let m = Mount::new();
    let out = m.sh_ok(
        "echo start > log; exec 3< log; read -r first <&3; \
         s=$(date +%s%N); for i in $(seq 10); do echo line $i >> log; done; \
         e=$(date +%s%N); exec 3<&-; echo $(( (e - s) / 1000000 )) $(wc -l < log)",
    );
    let fields: Vec<u64> = out.split_whitespace().map(|f| f.parse().unwrap()).collect();
    assert_eq!(fields[1], 11, "{out}");
    assert!(fields[0] < 6000, "10 appends took {} ms", fields[0]);
}
