//! What people and agents see while a file changes (issue 11): followers (`tail -f`), live
//! appenders, readers that never see what was never committed, and versions that mean
//! something (one version per commit, continuous history per path).

mod common;
use common::*;
use std::process::{Command, Stdio};

/// Runs the Python `script` (written to a file beside the mount) in the mount with
/// `args`; returns its stdout, panicking with its stderr if it fails.
fn py(m: &Mount, name: &str, script: &str, args: &[&str]) -> String {
    let file = m.dir.path().join(format!("{name}.py"));
    std::fs::write(&file, script).unwrap();
    let o = Command::new("python3")
        .arg(&file)
        .args(args)
        .current_dir(&m.mnt)
        .env("DB", &m.db)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{name}.py failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Appends `n` lines `line1..` to `file` from another process, one per 100 ms, each with
/// its own `>>` (open, write, close).
fn append_lines(m: &Mount, file: &str, n: usize) {
    m.sh_ok(&format!(
        "for i in $(seq 1 {n}); do echo line$i >> {file}; sleep 0.1; done"
    ));
}

fn follower_sees_every_appended_line(follow_flag: &str) {
    let m = Mount::new();
    m.sh_ok("echo start > findings.md");
    let out = m.dir.path().join(format!("tail{follow_flag}.out"));
    let mut tail = Command::new("tail")
        .args([follow_flag, "-n", "+1", "-s", "0.1"])
        .arg(m.path("findings.md"))
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("tail to print the first line", || count_lines(&out) >= 1);
    append_lines(&m, "findings.md", 10);
    wait_for("tail to print the 10 appended lines", || {
        count_lines(&out) >= 11
    });
    let _ = tail.kill();
    let _ = tail.wait();
    let got = read(&out);
    let want: String = std::iter::once("start\n".to_string())
        .chain((1..=10).map(|i| format!("line{i}\n")))
        .collect();
    assert_eq!(got, want, "tail {follow_flag} shows every line, in order");
}

#[test]
fn tail_f_shows_lines_appended_by_another_process() {
    follower_sees_every_appended_line("-f");
}

#[test]
fn tail_capital_f_shows_lines_appended_by_another_process() {
    follower_sees_every_appended_line("-F");
}

#[test]
fn an_open_reader_keeps_its_snapshot_across_a_rewrite_but_follows_an_append() {
    let m = Mount::new();
    m.sh_ok("printf 'one\\n' > f");
    let script = r#"
import os, subprocess, sys
fd = os.open('f', os.O_RDONLY)
assert os.read(fd, 100) == b'one\n'
subprocess.run(['bash', '-c', 'printf "two\\n" >> f'], check=True)
# An append: the same bytes, longer; the reader follows.
got = os.read(fd, 100)
assert got == b'two\n', got
subprocess.run(['bash', '-c', 'printf "REWRITTEN\\n" > f'], check=True)
# A rewrite: the reader keeps its snapshot (whole, then EOF).
os.lseek(fd, 0, 0)
got = os.read(fd, 100)
assert got == b'one\ntwo\n', got
print('ok')
"#;
    assert_eq!(py(&m, "snapshot", script, &[]), "ok\n");
}

/// Versions of `path` as the database has them, after an fsync of the mount's root
/// (every answered change written to SQLite).
fn version_count(m: &Mount, path: &str) -> usize {
    m.sql(&format!(
        "SELECT COUNT(*) FROM versions v JOIN files f ON f.id = v.file_id WHERE f.path = '{path}'"
    ))
    .parse()
    .unwrap()
}

#[test]
fn a_long_lived_appender_is_visible_while_it_runs_and_grouped() {
    let m = Mount::new();
    // Python's logging.FileHandler keeps one O_APPEND descriptor open: 20 records over
    // 3 s. It forks nothing (a child's exit would flush its copy of the descriptor,
    // FUSE-TRAPS §5), and this test, which reads, is not its child: only the live commit
    // can show the records before the handler closes.
    let stop = m.dir.path().join("stop");
    let script = format!(
        r#"
import logging, os, time
h = logging.FileHandler('app.log')
log = logging.getLogger('agent')
log.addHandler(h)
log.setLevel(logging.INFO)
for i in range(20):
    log.info('record %d', i)
    time.sleep(0.15)
while not os.path.exists('{}'):
    time.sleep(0.05)
h.close()
"#,
        stop.display()
    );
    let file = m.dir.path().join("logger.py");
    std::fs::write(&file, script).unwrap();
    let mut logger = Command::new("python3")
        .arg(&file)
        .current_dir(&m.mnt)
        .spawn()
        .unwrap();
    let want: String = (0..20).map(|i| format!("record {i}\n")).collect();
    let mut partial = false;
    wait_for(
        "a reader to see the 20 records while the handler is open",
        || {
            let seen = std::fs::read_to_string(m.path("app.log")).unwrap_or_default();
            partial |= !seen.is_empty() && seen.len() < want.len();
            seen == want
        },
    );
    assert!(
        partial,
        "the records were visible while they were being written"
    );
    // Idle: no further version while the handle stays open (checked after twice the
    // delay: waiting to see that nothing happens).
    let n1 = version_count(&m, "app.log");
    std::thread::sleep(
        2 * scratchfs::fs::LIVE_APPEND_DELAY + std::time::Duration::from_millis(500),
    );
    assert_eq!(
        version_count(&m, "app.log"),
        n1,
        "an idle handle makes no version"
    );
    std::fs::write(&stop, "").unwrap();
    assert!(logger.wait().unwrap().success());
    let versions = version_count(&m, "app.log");
    // Grouped: far fewer than one version per record (about one per second), but more
    // than one (it was visible before close).
    assert!(
        (2..=10).contains(&versions),
        "{versions} versions for 20 records over 3 s"
    );
    let ops = m.sql("SELECT group_concat(op) FROM (SELECT v.op FROM versions v JOIN files f ON f.id = v.file_id WHERE f.path = 'app.log' ORDER BY v.version)");
    assert!(ops.starts_with("create,append"), "{ops}");
    // `exec 3>>log; echo … >&3` in a shell that runs no child meanwhile (its `read` from a
    // FIFO is a builtin): visible to another process before the shell closes it.
    let fifo = m.dir.path().join("go");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let mut shell = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "exec 3>>shell.log; echo first >&3; read -r x < {}; exec 3>&-",
            fifo.display()
        ))
        .current_dir(&m.mnt)
        .spawn()
        .unwrap();
    wait_for("the shell's line to be visible", || {
        std::fs::read_to_string(m.path("shell.log")).is_ok_and(|s| s == "first\n")
    });
    std::fs::write(&fifo, "go\n").unwrap();
    assert!(shell.wait().unwrap().success());
}

/// `contents` rewritten 200 times by one process (`mode`: `trunc` = open with O_TRUNC,
/// `ftrunc` = ftruncate then write, `shell` = `echo > f`) while another makes at least
/// 1,000 fresh reads: returns the reads that were not exactly one committed version.
fn torn_reads(m: &Mount, mode: &str) -> String {
    let script = r#"
import os, subprocess, sys
p, mode = 'rw.txt', sys.argv[1]
contents = [('version %d ' % i + 'x' * (50 + i * 7) + '\n').encode() for i in range(200)]
open(p, 'wb').write(contents[0])
pid = os.fork()
if pid == 0:
    for c in contents[1:]:
        if mode == 'trunc':
            with open(p, 'wb') as f: f.write(c)
        elif mode == 'ftrunc':
            with open(p, 'r+b') as f: f.truncate(0); f.write(c)
        else:
            subprocess.run(['bash', '-c', 'echo -n "$1" > rw.txt', '-', c.decode()], check=True)
    os._exit(0)
valid = set(contents)
bad, n, done = [], 0, False
while not (done and n >= 1000):
    if not done and os.waitpid(pid, os.WNOHANG)[0] != 0:
        done = True
    with open(p, 'rb') as f: d = f.read()
    n += 1
    if d not in valid:
        bad.append(d[:30])
print(len(bad), bad[:5])
"#;
    py(m, "rewrites", script, &[mode]).trim().to_string()
}

#[test]
fn readers_never_see_an_uncommitted_state_of_a_file_being_rewritten() {
    let m = Mount::new();
    for mode in ["trunc", "ftrunc", "shell"] {
        assert_eq!(
            torn_reads(&m, mode),
            "0 []",
            "{mode}: every read is one committed version"
        );
    }
}

/// (version number, op, size) of `path`'s versions, oldest first, from `scratchfs
/// history --json` (one JSON object per line).
fn history(m: &Mount, path: &str) -> Vec<(i64, String, u64)> {
    let (code, out, err) = cli(m, &["history", path, "--json"]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|x| {
            (
                x["version"].as_i64().unwrap(),
                x["op"].as_str().unwrap().to_string(),
                x["size"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_new_files_first_version_is_its_first_commit() {
    let m = Mount::new();
    m.sh_ok("echo v1 > f; touch t; python3 -c \"open('p', 'w').write('hello')\"");
    assert_eq!(history(&m, "f"), vec![(1, "create".into(), 3)]);
    assert_eq!(read(m.path(".history/f/000001")), "v1\n");
    assert_eq!(history(&m, "t"), vec![(1, "create".into(), 0)]);
    assert_eq!(history(&m, "p"), vec![(1, "create".into(), 5)]);
    // Op labels: what the handle did.
    m.sh_ok("echo abcdef > f; python3 -c \"f = open('f', 'r+'); f.write('XY'); f.truncate(4)\"");
    m.sh_ok("truncate -s 2 f; echo more >> f");
    let ops: Vec<String> = history(&m, "f").into_iter().map(|v| v.1).collect();
    assert_eq!(ops, ["create", "write", "write", "truncate", "append"]);
    assert_eq!(read(m.path("f")), "XYmore\n");
}

#[test]
fn a_paths_history_is_continuous_across_delete_and_recreate() {
    let m = Mount::new();
    m.sh_ok("echo a > f.md; echo b > f.md; echo c >> f.md; mv f.md g.md; rm g.md");
    assert_eq!(history(&m, "g.md").len(), 4, "3 writes + the rename");
    // The documented way back: copy from .archive.
    m.sh_ok("cp .archive/g.md g.md && echo d >> g.md");
    let h = history(&m, "g.md");
    let numbers: Vec<i64> = h.iter().map(|v| v.0).collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5, 6], "{h:?}");
    assert_eq!(h[4].1, "create");
    let listing = m.sh_ok("ls .history/g.md");
    assert_eq!(listing.lines().count(), 6, "{listing}");
    assert_eq!(read(m.path(".history/g.md/000001")), "a\n");
    assert_eq!(read(m.path(".history/g.md/000006")), "b\nc\nd\n");
    let (code, out, err) = cli(&m, &["show", "g.md@2"]);
    assert_eq!((code, out.as_str()), (0, "b\n"), "{err}");
    let (code, out, err) = cli(&m, &["diff", "g.md@1", "g.md@6"]);
    assert!(code == 0 || code == 1, "{err}");
    assert!(out.contains("+d"), "{out}");
    // A re-create with a new create (not a copy) numbers on too; restore reaches v1.
    m.sh_ok("rm g.md; echo new > g.md");
    let (code, _, err) = cli(&m, &["restore", "g.md@1"]);
    assert_eq!(code, 0, "{err}");
    wait_for("the restored content", || read(m.path("g.md")) == "a\n");
    let h = history(&m, "g.md");
    assert_eq!(h.len(), 8, "{h:?}");
    assert_eq!(h[6], (7, "create".into(), 4));
    // A rename onto the deleted path continues it as well.
    m.sh_ok("echo x > s.md; rm s.md; echo y > tmp && mv tmp s.md");
    let h = history(&m, "s.md");
    assert_eq!(h.iter().map(|v| v.0).collect::<Vec<_>>(), [1, 2], "{h:?}");
    assert_eq!(read(m.path(".history/s.md/000001")), "x\n");
}

#[test]
fn a_recreated_file_is_empty_until_it_commits_and_history_survives_a_remount() {
    let mut m = Mount::new();
    m.sh_ok("echo one > k; rm k; echo two > k");
    m.unmount();
    m.start();
    assert_eq!(read(m.path("k")), "two\n");
    let h = history(&m, "k");
    assert_eq!(
        h,
        [(1, "create".into(), 4), (2, "create".into(), 4)],
        "{h:?}"
    );
    // A file created and not yet committed (its creating handle still open) is empty,
    // also after the deleted file at that path had content; its close commits version 3.
    m.sh_ok("rm k");
    let out = m.sh_ok("exec 3>k; cat k | wc -c; stat -c %s k; exec 3>&-; ls .history/k");
    assert_eq!(out, "0\n0\n000001\n000002\n000003\n");
    assert_eq!(
        std::fs::metadata(m.path(".history/k/000003"))
            .unwrap()
            .len(),
        0
    );
}
