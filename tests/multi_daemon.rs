//! Several daemons, one scratchpad (issue 15): mounts of one PostgreSQL database on
//! different mountpoints, standing in for different hosts. Needs `SCRATCHFS_PG_URL`
//! (`scripts/pg start`); without it every test fails saying so. Nothing here waits a fixed
//! time: each check polls for what it expects until a generous deadline.

mod common;

use std::time::{Duration, Instant};

use common::Mount;

/// A database of the tests' PostgreSQL server, dropped at the end of the test.
struct Db(String);

impl Db {
    fn new() -> Db {
        Db(common::new_pg_database())
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        common::drop_pg_database(&self.0);
    }
}

/// Polls `f` until it returns `Some`, for at most 30 s (a loaded machine), then fails
/// naming `what`.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "within 30 s: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_commit_on_one_daemon_is_seen_on_the_others() {
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let b = Mount::on_db(&db.0);
    let c = Mount::on_db(&db.0);
    for round in 0..5 {
        let text = format!("round {round} from a\n");
        std::fs::write(a.path("notes.md"), &text).unwrap();
        for m in [&b, &c] {
            // Content and size, through the kernel: no stale page or attribute cache.
            wait_for("the other daemons read the new content", || {
                (std::fs::read_to_string(m.path("notes.md")).ok()? == text).then_some(())
            });
            assert_eq!(
                std::fs::metadata(m.path("notes.md")).unwrap().len(),
                text.len() as u64
            );
        }
    }
    // MANIFEST, .history and the outline on another daemon.
    let manifest = std::fs::read_to_string(b.path("MANIFEST")).unwrap();
    assert!(manifest.contains("notes.md"), "{manifest}");
    let versions: Vec<String> = std::fs::read_dir(c.path(".history/notes.md"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(versions.len(), 5, "{versions:?}");
    std::fs::write(b.path("plan.md"), "# Goal\nship\n# Steps\none\n").unwrap();
    let outline = wait_for("the outline of b's file on a", || {
        let o = std::fs::read_to_string(a.path("plan.md.outline")).ok()?;
        o.contains("Steps").then_some(o)
    });
    assert!(outline.contains("Goal"), "{outline}");
    // A directory, a rename and a delete by one daemon show on the others.
    std::fs::create_dir(c.path("d")).unwrap();
    std::fs::rename(c.path("notes.md"), c.path("d/notes.md")).unwrap();
    std::fs::remove_file(c.path("plan.md")).unwrap();
    for m in [&a, &b] {
        wait_for("the rename and the delete on the others", || {
            (m.path("d/notes.md").exists()
                && !m.path("notes.md").exists()
                && !m.path("plan.md").exists())
            .then_some(())
        });
    }
}

#[test]
fn a_lost_update_across_daemons_is_estale() {
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let b = Mount::on_db(&db.0);
    std::fs::write(a.path("state.json"), "{\"n\": 1}\n").unwrap();
    wait_for("b sees version 1", || {
        (std::fs::read_to_string(b.path("state.json")).ok()? == "{\"n\": 1}\n").then_some(())
    });
    // a's writer opens version 1; b commits version 2; a's commit at close is refused.
    let out = a.sh_ok(&format!(
        r#"python3 - <<'PYEOF'
import errno, os
f = os.open("state.json", os.O_RDWR)
os.read(f, 100)
with open("{}/state.json", "w") as g:
    g.write('{{"n": 2}}\n')
os.lseek(f, 0, 0)
os.write(f, b'{{"n": 3}}\n')
try:
    os.close(f)
    print("closed")
except OSError as e:
    print(errno.errorcode[e.errno])
PYEOF"#,
        b.mnt.display()
    ));
    assert_eq!(out.trim(), "ESTALE");
    // b's version stands, on both; a's refused content is on record.
    for m in [&a, &b] {
        wait_for("b's version on both", || {
            (std::fs::read_to_string(m.path("state.json")).ok()? == "{\"n\": 2}\n").then_some(())
        });
    }
    let refused = common::pg_query(
        &db.0,
        "SELECT COUNT(*) FROM events WHERE op = 'rejected' AND errno = 116 AND path = 'state.json'",
    );
    assert_eq!(refused, "1");
    // Gap-free numbers (b's `open(..., "w")` truncates, then writes: two versions), and
    // none of them is a's refused content.
    let numbers = common::pg_query(
        &db.0,
        "SELECT version FROM versions WHERE path = 'state.json' ORDER BY id",
    );
    let n: Vec<i64> = numbers.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(n, (1..=n.len() as i64).collect::<Vec<_>>(), "{numbers}");
    let refused_hash = blake3::hash(b"{\"n\": 3}\n").to_hex().to_string();
    let as_version = common::pg_query(
        &db.0,
        &format!("SELECT COUNT(*) FROM versions WHERE blake3 = '{refused_hash}'"),
    );
    assert_eq!(as_version, "0", "a's refused content is no version");
    let as_refusal = common::pg_query(
        &db.0,
        &format!("SELECT COUNT(*) FROM events WHERE op = 'rejected' AND blake3 = '{refused_hash}'"),
    );
    assert_eq!(as_refusal, "1", "a's refused content is on record");
}

#[test]
fn appends_from_eight_daemons_lose_no_line() {
    const DAEMONS: usize = 8;
    let db = Db::new();
    let mounts: Vec<Mount> = (0..DAEMONS).map(|_| Mount::on_db(&db.0)).collect();
    std::fs::write(mounts[0].path("log.txt"), "").unwrap();
    for m in &mounts[1..] {
        wait_for("log.txt everywhere", || {
            m.path("log.txt").exists().then_some(())
        });
    }
    // 8 daemons x 2 writers x 500 lines, each line its own open, append and close.
    let writers: Vec<_> = mounts
        .iter()
        .enumerate()
        .flat_map(|(d, m)| {
            (0..2).map(move |w| {
                std::process::Command::new("bash")
                    .arg("-c")
                    .arg(format!(
                        "for i in $(seq 1 500); do echo \"d{d} w{w} $i\" >> log.txt || exit 1; done"
                    ))
                    .current_dir(&m.mnt)
                    .spawn()
                    .unwrap()
            })
        })
        .collect();
    for mut w in writers {
        assert!(w.wait().unwrap().success(), "a writer failed");
    }
    let mut expected: Vec<String> = (0..DAEMONS)
        .flat_map(|d| (0..2).flat_map(move |w| (1..=500).map(move |i| format!("d{d} w{w} {i}"))))
        .collect();
    expected.sort();
    for m in &mounts {
        let text = wait_for("8000 lines on every daemon", || {
            let t = std::fs::read_to_string(m.path("log.txt")).ok()?;
            (t.lines().count() >= DAEMONS * 1000).then_some(t)
        });
        let mut got: Vec<String> = text.lines().map(str::to_string).collect();
        // Each writer's lines stay in its order.
        for d in 0..DAEMONS {
            for w in 0..2 {
                let prefix = format!("d{d} w{w} ");
                let mine: Vec<u32> = got
                    .iter()
                    .filter_map(|l| l.strip_prefix(&prefix)?.parse().ok())
                    .collect();
                assert_eq!(mine, (1..=500).collect::<Vec<u32>>(), "{prefix}");
            }
        }
        got.sort();
        assert_eq!(got, expected, "every line once, none lost");
    }
    // Version numbers gap-free and ordered.
    let gaps = common::pg_query(
        &db.0,
        "SELECT COUNT(*), MIN(version), MAX(version) FROM versions WHERE path = 'log.txt'",
    );
    let f: Vec<i64> = gaps.split('|').map(|x| x.parse().unwrap()).collect();
    assert_eq!(f[0], f[2], "versions {gaps}");
    assert_eq!(f[1], 1);
}

#[test]
fn one_name_created_from_two_daemons_at_once_has_one_winner() {
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let b = Mount::on_db(&db.0);
    let script = |m: &Mount| {
        std::process::Command::new("python3")
            .arg("-c")
            .arg(
                r#"
import errno, os
won = 0
for i in range(100):
    try:
        os.close(os.open("n%d" % i, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        won += 1
    except OSError as e:
        assert e.errno == errno.EEXIST, e
print(won)
"#,
            )
            .current_dir(&m.mnt)
            .spawn()
            .unwrap()
    };
    let (pa, pb) = (script(&a), script(&b));
    let (oa, ob) = (
        pa.wait_with_output().unwrap(),
        pb.wait_with_output().unwrap(),
    );
    assert!(oa.status.success() && ob.status.success());
    let nodes = common::pg_query(
        &db.0,
        "SELECT COUNT(*), COUNT(DISTINCT name) FROM nodes
         WHERE parent = 1 AND get_byte(name, 0) = 110",
    );
    assert_eq!(nodes, "100|100", "one node per name");
    for m in [&a, &b] {
        wait_for("100 files on both", || {
            let n = std::fs::read_dir(&m.mnt)
                .ok()?
                .filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().starts_with('n'))
                })
                .count();
            (n == 100).then_some(())
        });
    }
}

#[test]
fn a_killed_daemon_loses_nothing_and_the_others_go_on() {
    let db = Db::new();
    let mut a = Mount::on_db(&db.0);
    let b = Mount::on_db(&db.0);
    for i in 0..20 {
        std::fs::write(a.path(&format!("f{i}")), format!("acknowledged {i}\n")).unwrap();
    }
    a.kill9();
    for i in 0..20 {
        let got = wait_for("a's files on b", || {
            std::fs::read_to_string(b.path(&format!("f{i}"))).ok()
        });
        assert_eq!(got, format!("acknowledged {i}\n"));
    }
    std::fs::write(b.path("after"), "b goes on\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(b.path("after")).unwrap(),
        "b goes on\n"
    );
}

#[test]
fn lost_connections_fail_with_eio_then_recover_without_a_remount() {
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    std::fs::write(a.path("before"), "kept\n").unwrap();
    // Every connection to this database is cut, as a restart of PostgreSQL would.
    let name = common::pg_database_of(&db.0).to_string();
    let cut = || {
        common::pg_query(
            &common::pg_url(),
            &format!(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE datname = '{name}' AND pid <> pg_backend_pid()"
            ),
        )
    };
    // The server processes of the daemon's connections, to see them gone.
    let backends = || {
        common::pg_query(
            &common::pg_url(),
            &format!(
                "SELECT COALESCE(string_agg(pid::text, ',' ORDER BY pid), '') FROM pg_stat_activity
                 WHERE datname = '{name}' AND pid <> pg_backend_pid()"
            ),
        )
    };
    let before = backends();
    assert_ne!(cut(), "0", "the daemon had connections to cut");
    // Once those processes are gone (their sockets closed), a write finds its connection
    // closed before sending anything and connects again: it succeeds, without a remount.
    wait_for("the cut connections' server processes exit", || {
        let now = backends();
        let now: Vec<&str> = now.split(',').collect();
        before
            .split(',')
            .all(|pid| !now.contains(&pid))
            .then_some(())
    });
    std::fs::write(a.path("during"), "x\n")
        .expect("a write after the server closed idle connections");
    // Cut again, and write at once: EIO (the connection was cut as the change went) or
    // success; then writes work again.
    cut();
    let first = std::fs::write(a.path("during2"), "x\n");
    if let Err(e) = &first {
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    }
    wait_for("writes work again", || {
        std::fs::write(a.path("after"), "back\n").ok()
    });
    assert_eq!(std::fs::read_to_string(a.path("before")).unwrap(), "kept\n");
    assert_eq!(std::fs::read_to_string(a.path("after")).unwrap(), "back\n");
    // Another daemon started now sees everything acknowledged.
    let b = Mount::on_db(&db.0);
    assert_eq!(std::fs::read_to_string(b.path("after")).unwrap(), "back\n");
}

#[test]
fn the_rules_are_the_databases_and_a_change_reaches_every_daemon() {
    let db = Db::new();
    let dir = tempfile::tempdir().unwrap();
    let strict = dir.path().join("strict.json");
    std::fs::write(
        &strict,
        r#"{"writers": {"tool": {"env": "tool"}},
            "paths": [{"path": "facts/**", "writers": ["tool"]},
                      {"path": "**", "writers": ["*"]}]}"#,
    )
    .unwrap();
    let open = dir.path().join("open.json");
    std::fs::write(&open, r#"{"paths": [{"path": "**", "writers": ["*"]}]}"#).unwrap();
    let mut a = Mount::on_db(&db.0);
    a.unmount();
    a.restart_with(&["--rules", strict.to_str().unwrap()]);
    a.sh_ok("mkdir facts && SCRATCHFS_WRITER=tool bash -c 'echo 42 > facts/n'");
    // b was started without rules: it enforces the database's.
    let b = Mount::on_db(&db.0);
    let o = b.sh("echo 41 > facts/n");
    assert!(
        !o.status.success(),
        "b let an untagged writer write facts/n"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read_to_string(b.path("facts/n")).unwrap(), "42\n");
    // A daemon started with other rules records them: b enforces them from then on.
    let mut c = Mount::on_db(&db.0);
    c.unmount();
    c.restart_with(&["--rules", open.to_str().unwrap()]);
    wait_for("b enforces the new rules", || {
        b.sh("echo 43 > facts/n").status.success().then_some(())
    });
    wait_for("a reads b's write", || {
        (std::fs::read_to_string(a.path("facts/n")).ok()? == "43\n").then_some(())
    });
}

#[test]
fn commands_on_an_unreachable_url_fail_and_create_nothing() {
    // No server there: every command fails connecting (recover, which is about SQLite's
    // redo log, refuses a URL before). The password must never be printed, and nothing
    // may appear where the URL would be a relative path.
    let url = "postgres://scratchfs:s3cret-pw@127.0.0.1:1/nowhere";
    let cwd = tempfile::tempdir().unwrap();
    let mnt = cwd.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mnt = mnt.to_str().unwrap();
    // A command that wrongly mounts is unmounted, even when an assertion fails.
    struct Unmount(String);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .args(["-l", &self.0])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
    let _unmount = Unmount(mnt.to_string());
    let other = cwd.path().join("other.db");
    let other = other.to_str().unwrap();
    for (args, file_only) in [
        (vec!["mount", mnt, "--db", url, "--background"], false),
        (vec!["mcp", "--db", url], false),
        (vec!["mount", mnt, "--db", url, "--at", "c1"], false),
        (vec!["fork", "--db", url, "--to", other], false),
        (
            vec!["fork", "--db", url, "--to", other, "--tree-only"],
            false,
        ),
        (vec!["compare", "--db", url, "--with", other], false),
        (vec!["adopt", "--db", other, "--from", url, "x"], false),
        (vec!["recover", "--db", url], true),
    ] {
        let o = std::process::Command::new(common::BIN)
            .args(&args)
            .current_dir(cwd.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        if file_only {
            assert!(err.contains("docs/deploy.md"), "{args:?}: {err}");
        } else {
            assert!(
                err.contains("127.0.0.1:1/nowhere") && err.contains("onnect"),
                "{args:?}: {err}"
            );
        }
        assert!(
            !err.contains("s3cret"),
            "{args:?} printed the password: {err}"
        );
        let left: Vec<_> = std::fs::read_dir(cwd.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != "mnt")
            .collect();
        assert!(left.is_empty(), "{args:?} created {left:?}");
        assert!(
            !std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap()
                .contains(mnt),
            "{args:?} mounted"
        );
    }
}

#[test]
fn a_name_renamed_or_removed_on_one_daemon_is_stale_on_the_other() {
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let b = Mount::on_db(&db.0);
    for i in 0..20 {
        let f = format!("q{i}");
        std::fs::write(a.path(&f), "x\n").unwrap();
        wait_for("b knows the name", || b.path(&f).exists().then_some(()));
        // The same file renamed on both daemons at once: one wins, the other gets ENOENT.
        let ta = {
            let (from, to) = (a.path(&f), a.path(&format!("{f}A")));
            std::thread::spawn(move || std::fs::rename(from, to))
        };
        let rb = std::fs::rename(b.path(&f), b.path(&format!("{f}B")));
        let ra = ta.join().unwrap();
        assert!(ra.is_ok() != rb.is_ok(), "round {i}: {ra:?} {rb:?}");
        let loser = if ra.is_ok() { &rb } else { &ra };
        assert_eq!(
            loser.as_ref().unwrap_err().raw_os_error(),
            Some(libc::ENOENT),
            "round {i}"
        );
        let names = common::pg_query(
            &db.0,
            &format!(
                "SELECT COUNT(*) FROM nodes WHERE parent = 1 AND name IN ('{f}A'::bytea, '{f}B'::bytea)"
            ),
        );
        assert_eq!(names, "1", "round {i}: exactly one name");
    }
    // Removed on one, renamed on the other: the rename of the stale name fails.
    std::fs::write(a.path("u"), "y\n").unwrap();
    wait_for("b knows u", || b.path("u").exists().then_some(()));
    std::fs::remove_file(a.path("u")).unwrap();
    let r = std::fs::rename(b.path("u"), b.path("uB"));
    if r.is_ok() {
        panic!("a removed file was renamed back to life on b");
    }
}

#[test]
fn mount_background_takes_a_url_and_logs_in_the_runtime_directory() {
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("bg");
    std::fs::create_dir(&mnt).unwrap();
    // The daemon's log: XDG_RUNTIME_DIR/scratchfs-<euid>/mount-<16 hex of the mountpoint>.log.
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let o = std::process::Command::new(common::BIN)
        .args([
            "mount",
            mnt.to_str().unwrap(),
            "--db",
            &db.0,
            "--background",
        ])
        .env("XDG_RUNTIME_DIR", &run)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "mount --background: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let guard = Unmount(mnt.clone());
    std::fs::write(mnt.join("from-bg.md"), "background daemon\n").unwrap();
    wait_for(
        "the other daemon reads what the background one committed",
        || {
            (std::fs::read_to_string(a.path("from-bg.md")).ok()? == "background daemon\n")
                .then_some(())
        },
    );
    let logs: Vec<_> =
        std::fs::read_dir(run.join(format!("scratchfs-{}", unsafe { libc::geteuid() })))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("mount-") && n.ends_with(".log"))
            .collect();
    assert_eq!(logs.len(), 1, "one log in the runtime directory: {logs:?}");
    // The daemon's command line (which any user may read) does not hold the URL, which
    // may hold a password: it is in the daemon's environment.
    let pids = std::process::Command::new("pgrep")
        .args(["-f", &format!("mount {}", mnt.display())])
        .output()
        .unwrap();
    let pids = String::from_utf8_lossy(&pids.stdout).into_owned();
    assert!(!pids.trim().is_empty(), "the daemon is not found");
    for pid in pids.split_whitespace() {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&cmdline).contains("postgres"),
            "the URL is on the daemon's command line: {}",
            String::from_utf8_lossy(&cmdline)
        );
    }
    let o = std::process::Command::new(common::BIN)
        .args(["unmount", mnt.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    drop(guard);
    // A second background mount on a mountpoint in use is refused before it starts.
    let o = std::process::Command::new(common::BIN)
        .args([
            "mount",
            a.mnt.to_str().unwrap(),
            "--db",
            &db.0,
            "--background",
        ])
        .env("XDG_RUNTIME_DIR", &run)
        .output()
        .unwrap();
    assert!(!o.status.success(), "mounted over a live mount");
}

#[test]
fn mcp_on_a_url_is_one_more_daemon() {
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    std::fs::write(a.path("plan.md"), "# Plan\n\nfrom the mount\n").unwrap();
    let session = |calls: serde_json::Value| {
        common::mcp_session(
            "pg-test",
            &["stdio", common::BIN, "mcp", "--db", &db.0],
            calls,
        )
    };
    let report = session(serde_json::json!([
        {"tool": "read", "args": {"path": "plan.md"}},
        {"tool": "write", "args": {"path": "notes/mcp.md", "content": "# From MCP\n"}},
    ]));
    let results = &report["results"];
    assert_eq!(results[0]["is_error"], false, "{report}");
    assert!(
        results[0]["text"]
            .as_str()
            .unwrap()
            .contains("from the mount"),
        "{report}"
    );
    assert_eq!(results[1]["is_error"], false, "{report}");
    wait_for("the mount reads what the MCP server committed", || {
        (std::fs::read_to_string(a.path("notes/mcp.md")).ok()? == "# From MCP\n").then_some(())
    });
    // On record as an MCP call, in the one database.
    let transport = common::pg_query(
        &db.0,
        "SELECT p.transport FROM versions v JOIN processes p ON p.id = v.process
         WHERE v.path = 'notes/mcp.md'",
    );
    assert_eq!(transport, "mcp");
}

#[test]
fn open_without_o_excl_mkdir_p_and_rename_over_a_name_made_elsewhere_succeed() {
    use std::os::unix::fs::OpenOptionsExt;
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let b = Mount::on_db(&db.0);
    for i in 0..20 {
        // open(O_CREAT|O_WRONLY) of one new name on both daemons at once: both open it
        // (the loser of the store's race opens the file the winner made).
        let f = format!("shared{i}.log");
        let (pa, pb) = (a.path(&f), b.path(&f));
        let open = |p: std::path::PathBuf| {
            std::thread::spawn(move || {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .mode(0o644)
                    .open(&p)
                    .map(|_| ())
            })
        };
        let (ta, tb) = (open(pa), open(pb));
        let (ra, rb) = (ta.join().unwrap(), tb.join().unwrap());
        assert!(ra.is_ok() && rb.is_ok(), "round {i}: {ra:?} {rb:?}");
        // mkdir -p of one tree on both daemons at once: both succeed.
        let tree = format!("d{i}/e/f");
        let mk = |m: &Mount| {
            let p = m.path(&tree);
            std::thread::spawn(move || std::fs::create_dir_all(p))
        };
        let (ta, tb) = (mk(&a), mk(&b));
        let (ra, rb) = (ta.join().unwrap(), tb.join().unwrap());
        assert!(
            ra.is_ok() && rb.is_ok(),
            "round {i}: mkdir -p: {ra:?} {rb:?}"
        );
        // A rename onto a name the other daemon has just made: it replaces it.
        let target = format!("state{i}.json");
        std::fs::write(b.path("tmp.json"), format!("{{\"round\": {i}}}\n")).unwrap();
        std::fs::write(a.path(&target), "{\"from\": \"a\"}\n").unwrap();
        let r = std::fs::rename(b.path("tmp.json"), b.path(&target));
        assert!(
            r.is_ok(),
            "round {i}: rename over a name made elsewhere: {r:?}"
        );
    }
    for i in 0..20 {
        for (what, name) in [
            ("file", format!("shared{i}.log")),
            ("dir", format!("d{i}")),
            ("renamed", format!("state{i}.json")),
        ] {
            let n = common::pg_query(
                &db.0,
                &format!("SELECT COUNT(*) FROM nodes WHERE parent = 1 AND name = '{name}'::bytea"),
            );
            assert_eq!(n, "1", "{what} {name}: one node");
        }
        wait_for("a sees b's rename", || {
            (std::fs::read_to_string(a.path(&format!("state{i}.json"))).ok()?
                == format!("{{\"round\": {i}}}\n"))
            .then_some(())
        });
    }
}

#[test]
fn a_checkpoint_waits_for_the_changes_in_flight_on_every_daemon() {
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    std::fs::write(a.path("f"), "one\n").unwrap();
    // A change in flight on another daemon: its transaction holds the change lock shared,
    // as every change's does, and has taken a version id it has not committed.
    let mut other = common::pg_client(&db.0);
    let mut tx = other.transaction().unwrap();
    tx.batch_execute(&format!(
        "SELECT pg_advisory_xact_lock_shared({})",
        scratchfs::store::postgres::CHANGE_LOCK
    ))
    .unwrap();
    let mnt = a.mnt.clone();
    let taking = std::thread::spawn(move || {
        std::process::Command::new("setfattr")
            .args(["-n", "user.scratchfs.checkpoint", "-v", "c1"])
            .arg(&mnt)
            .output()
            .unwrap()
    });
    // The checkpoint waits for it (its exclusive request is queued behind the shared lock).
    wait_for("the checkpoint waits for the change lock", || {
        (common::pg_query(
            &db.0,
            "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
        ) != "0")
            .then_some(())
    });
    assert!(!taking.is_finished(), "the checkpoint did not wait");
    tx.commit().unwrap();
    let o = taking.join().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        common::pg_query(&db.0, "SELECT COUNT(*) FROM checkpoints WHERE name = 'c1'"),
        "1"
    );
}

/// Runs `scratchfs gc --db URL ARGS` (through this host's first mount of it, when there
/// is one): (exit code, stdout and stderr).
fn gc(db: &str, args: &[&str]) -> (Option<i32>, String) {
    let o = std::process::Command::new(common::BIN)
        .args(["gc", "--db", db])
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn gc_keeps_what_a_reader_on_another_daemon_has_open() {
    use std::os::unix::fs::FileExt;
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let b = Mount::on_db(&db.0);
    let body = |n: u8| -> Vec<u8> {
        (0..2_000_000u32)
            .map(|i| b'a' + ((i as u8) ^ n) % 26)
            .collect()
    };
    std::fs::write(a.path("big.txt"), body(1)).unwrap();
    std::fs::write(a.path("big.txt"), body(2)).unwrap();
    wait_for("b has version 2", || {
        (std::fs::read(b.path("big.txt")).ok()? == body(2)).then_some(())
    });
    // b's reader holds version 2; a third version makes it old; gc keeps only the last,
    // through a's mount (the first of this host's): a asks b what it has open.
    let reader = std::fs::File::open(b.path("big.txt")).unwrap();
    let mut first = [0u8; 16];
    reader.read_exact_at(&mut first, 0).unwrap();
    let stream = common::pg_query(
        &db.0,
        "SELECT v.stream FROM versions v JOIN files f ON f.id = v.file_id
         WHERE f.path = 'big.txt' ORDER BY v.version DESC LIMIT 1",
    );
    let extents = |s: &str| {
        common::pg_query(
            &db.0,
            &format!("SELECT COUNT(*) FROM extents WHERE stream = {s}"),
        )
    };
    std::fs::write(a.path("big.txt"), body(3)).unwrap();
    let (code, out) = gc(&db.0, &["--keep-last", "1"]);
    assert_eq!(code, Some(0), "gc: {out}");
    assert_ne!(
        extents(&stream),
        "0",
        "the open version's content was swept"
    );
    // Far from what the kernel may have read ahead: the version's own bytes.
    let mut buf = vec![0u8; 4096];
    reader.read_exact_at(&mut buf, 1_500_000).unwrap();
    assert_eq!(&buf[..], &body(2)[1_500_000..1_504_096]);
    // A sweep this daemon did not hear of (here: the stream deleted by hand, as gc's
    // sweep does) is an error to the reader, never zeros or other bytes. (Read where
    // neither read so far has made the kernel read ahead.)
    common::pg_query(
        &db.0,
        &format!(
            "DELETE FROM extents WHERE stream = {stream}; DELETE FROM streams WHERE id = {stream}"
        ),
    );
    match reader.read_exact_at(&mut buf, 1_000_000) {
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}"),
        Ok(()) => panic!("a swept version read as bytes"),
    }
    // Once closed, the next gc may sweep what it kept.
    drop(reader);
    let held = common::pg_query(
        &db.0,
        "SELECT v.stream FROM versions v JOIN files f ON f.id = v.file_id
         WHERE f.path = 'big.txt' ORDER BY v.version DESC LIMIT 1",
    );
    std::fs::write(a.path("big.txt"), body(4)).unwrap();
    // (A close's release reaches the daemons after close returns: until then the
    // handle still counts as open, so gc is run until it sweeps.)
    wait_for("gc sweeps a version nobody has open", || {
        let (code, out) = gc(&db.0, &["--keep-last", "1"]);
        assert_eq!(code, Some(0), "gc: {out}");
        (extents(&held) == "0").then_some(())
    });
}

/// A redaction reaches every daemon: another daemon that had read the file (its pages and
/// size in the kernel's cache) reads the redacted content, and its listing and MANIFEST
/// stay readable (helper finding: it served the secret from its cache, then EIO, since
/// a redacted version keeps its id and only its content moves).
#[test]
fn a_redaction_reaches_the_other_daemons_caches() {
    let secret = "AKIAIOSFODNN7EXAMPLE";
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let b = Mount::on_db(&db.0);
    std::fs::write(a.path("u.md"), format!("k {secret}\n")).unwrap();
    wait_for("b reads u.md", || {
        (std::fs::read_to_string(b.path("u.md")).ok()? == format!("k {secret}\n")).then_some(())
    });
    // b's kernel holds the pages; a reader keeps them in use.
    let held = std::fs::File::open(b.path("u.md")).unwrap();
    let o = std::process::Command::new(common::BIN)
        .args(["redact", "--db", &db.0, "u.md@1", "--why", "test"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let h = blake3::hash(secret.as_bytes()).to_hex();
    let redacted = format!("k [REDACTED an AWS access key id blake3:{}]\n", &h[..16]);
    // (The command went through one of the two mounts; the other hears of it.)
    for m in [&a, &b] {
        wait_for("each daemon reads the redacted content", || {
            (std::fs::read_to_string(m.path("u.md")).ok()? == redacted).then_some(())
        });
    }
    drop(held);
    assert!(std::fs::read_dir(&b.mnt).unwrap().count() > 0);
    let manifest = std::fs::read_to_string(b.path("MANIFEST")).unwrap();
    assert!(
        manifest.contains("u.md") && !manifest.contains(secret),
        "{manifest}"
    );
}

#[test]
fn a_stopped_daemon_holds_gc_up_with_ebusy_and_nothing_is_deleted() {
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let b = Mount::on_db(&db.0);
    for n in 1..=3 {
        std::fs::write(a.path("f.txt"), format!("v{n}\n")).unwrap();
    }
    wait_for("b has version 3", || {
        (std::fs::read_to_string(b.path("f.txt")).ok()? == "v3\n").then_some(())
    });
    let versions = || common::pg_query(&db.0, "SELECT COUNT(*) FROM versions");
    let before = versions();
    // b cannot answer (its listener is stopped with it).
    let pid = b.daemon_pid() as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    struct Resume(i32);
    impl Drop for Resume {
        fn drop(&mut self) {
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    let resume = Resume(pid);
    let (code, out) = gc(&db.0, &["--keep-last", "1"]);
    assert_ne!(code, Some(0), "gc went on without b's answer: {out}");
    assert!(
        out.contains("Device or resource busy") && out.contains("did not say"),
        "{out}"
    );
    // The command names the daemon that did not answer (its listener's application_name
    // holds its pid), as the mount's daemon found it.
    assert!(
        out.contains(&format!(" pid {pid} ")),
        "b (pid {pid}) not named: {out}"
    );
    assert_eq!(versions(), before, "gc deleted versions without b's answer");
    drop(resume);
    let (code, out) = gc(&db.0, &["--keep-last", "1"]);
    assert_eq!(code, Some(0), "gc after b resumed: {out}");
    assert_ne!(versions(), before);
}

#[test]
fn a_file_lock_held_elsewhere_fails_a_commit_with_eagain_after_lock_timeout() {
    // A write whose commit's error is seen (a plain close drops it; fsync commits too).
    let write = |p: std::path::PathBuf, text: &str| {
        use std::io::Write;
        let mut f = std::fs::File::create(p)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()
    };
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    write(a.path("held.txt"), "one\n").unwrap();
    // A session that is not a daemon holds the file's lineage row (anyone with the URL).
    let mut other = common::pg_client(&db.0);
    let mut tx = other.transaction().unwrap();
    tx.batch_execute("SELECT id FROM files WHERE path = 'held.txt' FOR UPDATE")
        .unwrap();
    // The commit waits for the row at most lock_timeout (30 s), then fails: EAGAIN.
    let e = write(a.path("held.txt"), "two\n").expect_err("a commit went through a held lock");
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "{e}");
    // The daemon's connection is clean after it: another file's write commits.
    write(a.path("other.txt"), "free\n").expect("a write after a lock timeout");
    tx.rollback().unwrap();
    // Once the row is free, writes to it commit again (the refused handle's own release
    // may commit its content too, before or after: not checked here).
    write(a.path("held.txt"), "three\n").expect("a write once the row is free");
}

/// Durability on PostgreSQL mirrors SQLite's (docs/deploy.md "Durability"): a close
/// commits asynchronously (committed and visible at once, its WAL flushed by the server
/// moments later), an `fsync` commits synchronously: each fsync'd commit waits for a WAL
/// flush, which the server counts (`pg_stat_wal.wal_sync`, cluster-wide: other sessions
/// only add to it).
#[test]
fn an_fsync_waits_for_the_wal_to_be_flushed() {
    use std::io::Write;
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let syncs = || -> i64 {
        common::pg_query(&db.0, "SELECT wal_sync FROM pg_stat_wal")
            .trim()
            .parse()
            .unwrap()
    };
    let before = syncs();
    const N: i64 = 30;
    for i in 0..N {
        let mut f = std::fs::File::create(a.path(&format!("d{i}.txt"))).unwrap();
        f.write_all(b"durable\n").unwrap();
        f.sync_all().unwrap();
    }
    // The server publishes a backend's counts within seconds (when it is idle).
    wait_for("the server counts a WAL flush per fsync", || {
        (syncs() - before >= N).then_some(())
    });
    // And an fsync of the mountpoint (nothing to commit) flushes the WAL too.
    let before = syncs();
    std::fs::File::open(&a.mnt).unwrap().sync_all().unwrap();
    wait_for("a directory's fsync flushes the WAL", || {
        (syncs() > before).then_some(())
    });
}

/// A daemon killed with `kill -9` cannot remove its spill directory; the next daemon on
/// the host removes it (only a dead process's, only its own user's), never a live one's.
#[test]
fn a_killed_daemons_spill_directory_is_removed_by_the_next() {
    let dead = {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    let tmp = std::env::temp_dir();
    let left = tmp.join(format!("scratchfs-spill-{dead}-test{}", std::process::id()));
    let live = tmp.join(format!("scratchfs-spill-{}-test-live", std::process::id()));
    std::fs::create_dir_all(left.join("inner")).unwrap();
    std::fs::write(left.join("inner/part"), b"never acknowledged").unwrap();
    std::fs::create_dir_all(&live).unwrap();
    let db = Db::new();
    let _a = Mount::on_db(&db.0);
    assert!(!left.exists(), "{} is still there", left.display());
    assert!(
        live.exists(),
        "a live process's spill directory was removed"
    );
    std::fs::remove_dir_all(&live).unwrap();
}

/// Content `n` of the rewrite test: its number on every line, 1,000 to 200,000 bytes.
fn numbered(n: u64) -> Vec<u8> {
    let len = 1000 + (n * 7919) as usize % 200_000;
    let line = format!("{n:08}\n");
    line.as_bytes().iter().copied().cycle().take(len).collect()
}

#[test]
fn readers_on_another_daemon_read_whole_versions_while_the_file_is_rewritten() {
    // A reader that opened a version through the page cache just before another daemon's
    // rewrite arrived must still read that version whole: not its bytes followed by
    // zeros up to the new size, and not cut short (the kernel keeps one size per inode).
    // That holds for a reader that closes within CACHED_READERS_WAIT of the rewrite's
    // arrival (docs/SEMANTICS.md, "Several daemons"), so for every read (open to close)
    // shorter than that; a read that took longer on a loaded machine is outside the
    // guarantee and not counted (CI once had 1 of 4,402).
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let b = Mount::on_db(&db.0);
    std::fs::write(a.path("r.bin"), numbered(0)).unwrap();
    // Its first version, not only its name: a file created and not yet committed is empty
    // (the create and the commit at close are two transactions).
    wait_for("b reads the file", || {
        (std::fs::read(b.path("r.bin")).ok()? == numbered(0)).then_some(())
    });
    let done = std::sync::atomic::AtomicBool::new(false);
    let (reads, bad) = std::thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let (mut reads, mut bad) = (0u64, Vec::new());
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        let started = Instant::now();
                        let data = std::fs::read(b.path("r.bin")).unwrap();
                        if started.elapsed() >= scratchfs::fs::CACHED_READERS_WAIT {
                            continue;
                        }
                        reads += 1;
                        let n: u64 = std::str::from_utf8(&data[..8]).unwrap().parse().unwrap();
                        if data != numbered(n) {
                            bad.push((n, data.len(), numbered(n).len()));
                        }
                    }
                    (reads, bad)
                })
            })
            .collect();
        for n in 1..=300 {
            std::fs::write(a.path("r.bin"), numbered(n)).unwrap();
        }
        // The last rewrite reaches b before the readers stop.
        wait_for("b reads the last rewrite", || {
            (std::fs::read(b.path("r.bin")).ok()? == numbered(300)).then_some(())
        });
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        readers.into_iter().map(|r| r.join().unwrap()).fold(
            (0, Vec::new()),
            |(r, mut b), (r2, b2)| {
                b.extend(b2);
                (r + r2, b)
            },
        )
    });
    assert!(
        bad.is_empty(),
        "{} of {reads} reads on b were not a whole version (version, bytes read, its size): {:?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
    // The readers did their work: reads within the bound while the file was rewritten.
    assert!(reads >= 100, "only {reads} reads within the bound");
}

/// The source (fsname) /proc/self/mountinfo gives the mount at `mnt`.
fn mount_source(mnt: &std::path::Path) -> String {
    let want = mnt.to_string_lossy().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(want.as_str()))
        .and_then(|l| l.split(" - ").nth(1)?.split(' ').nth(1).map(str::to_string))
        .unwrap_or_else(|| panic!("{want} is not in the mount table"))
}

#[test]
fn a_mount_named_after_another_database_is_not_asked_for_it() {
    // Anyone may name a mount anything (`--fsname`): a command on database Y never acts
    // through a mount of scratchpad X that calls itself Y; it works on Y itself.
    let (x, y) = (Db::new(), Db::new());
    let name_of_y = {
        let m = Mount::on_db(&y.0);
        std::fs::write(m.path("y.md"), "y\n").unwrap();
        mount_source(&m.mnt)
    };
    let impostor = Mount::on_db_with(&x.0, &["--fsname", &name_of_y]);
    assert_eq!(mount_source(&impostor.mnt), name_of_y);
    let o = std::process::Command::new(common::BIN)
        .args(["checkpoint", "cp1", "--db", &y.0])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        common::pg_query(&y.0, "SELECT name FROM checkpoints WHERE name = 'cp1'").trim(),
        "cp1"
    );
    assert_eq!(
        common::pg_query(&x.0, "SELECT COUNT(*) FROM checkpoints WHERE name = 'cp1'").trim(),
        "0",
        "the checkpoint of Y was taken in X, through the mount that called itself Y"
    );
    // The impostor's root says which scratchpad it is.
    let id = common::pg_query(&x.0, "SELECT value FROM meta WHERE key = 'scratchpad_id'");
    let o = std::process::Command::new("getfattr")
        .args(["--only-values", "-n", "user.scratchfs.scratchpad"])
        .arg(&impostor.mnt)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), id.trim());
}

#[test]
fn a_daemon_in_the_middle_of_a_commit_answers_gc_at_once() {
    // A commit holds its handle (and the daemon's store connection) for as long as it
    // takes; the daemon still answers another daemon's gc with what its handles read.
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let mut b = Mount::on_db(&db.0);
    std::fs::write(a.path("kept.md"), "one\n").unwrap();
    std::fs::write(a.path("kept.md"), "two\n").unwrap();
    // b again, after a in the mount table (gc goes through a), stopping in its next
    // commit's transaction, handle held.
    b.unmount();
    let flag = b.start_with_failpoint("commit");
    let path = b.path("stuck.md");
    std::thread::spawn(move || {
        let _ = std::fs::write(path, "never committed\n");
    });
    wait_for("b stops inside its commit", || flag.exists().then_some(()));
    // A change b hears of first: its refresh waits for b's store, its gc answer must not.
    std::fs::write(a.path("other.md"), "x\n").unwrap();
    let (code, out) = gc(&db.0, &["--keep-last", "1"]);
    assert_eq!(code, Some(0), "gc waited for the daemon in a commit: {out}");
    assert_eq!(std::fs::read_to_string(a.path("kept.md")).unwrap(), "two\n");
    b.kill9();
}

/// One name created and deleted over and over from two daemons at once keeps one history:
/// every version at the path is in one lineage (helper finding: a create that looked for
/// the deleted lineage to continue while the other daemon's unlink was committing made a
/// second lineage, whose history cut the first one off).
#[test]
fn a_name_created_and_deleted_on_two_daemons_at_once_keeps_one_history() {
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let b = Mount::on_db(&db.0);
    let script = |m: &Mount, tag: &str| {
        std::process::Command::new("python3")
            .arg("-c")
            .arg(format!(
                r#"
import errno, os
for i in range(150):
    try:
        with open("loop", "w") as f:
            f.write("{tag} %d\n" % i)
    except OSError as e:
        # The other daemon's create and delete of the name race this one's.
        assert e.errno in (errno.EEXIST, errno.ENOENT, errno.ESTALE), e
    try:
        os.unlink("loop")
    except OSError as e:
        assert e.errno in (errno.ENOENT, errno.ESTALE), e
"#
            ))
            .current_dir(&m.mnt)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (pa, pb) = (script(&a, "a"), script(&b, "b"));
    let (oa, ob) = (
        pa.wait_with_output().unwrap(),
        pb.wait_with_output().unwrap(),
    );
    for o in [&oa, &ob] {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let lineages = common::pg_query(
        &db.0,
        "SELECT COUNT(DISTINCT file_id), COUNT(*) FROM versions WHERE path = 'loop'",
    );
    let (n, versions) = lineages.split_once('|').unwrap();
    assert_eq!(
        n, "1",
        "versions at the path in more than one lineage: {lineages}"
    );
    // The history of the path is all of them, numbered on without a gap.
    let numbers = common::pg_query(
        &db.0,
        "SELECT MIN(version) || '-' || MAX(version) FROM versions WHERE path = 'loop'",
    );
    assert_eq!(numbers, format!("1-{versions}"));
}

/// The inode of `p` (the store's: the filesystem passes it through).
fn ino_of(p: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().ino()
}

/// A daemon alone sends no notification at its changes (a signal to every listening
/// session, and a wakeup of its own listener, for nothing), and a daemon that mounts later
/// hears every change made after it registered (the table `daemons`). Notifications come
/// in commit order, so everything sent before the change after the second mount comes
/// before its notification: none is the change made alone.
#[test]
fn a_daemon_alone_notifies_nobody_and_one_that_joins_hears_every_change() {
    let db = Db::new();
    let mut listener = common::pg_client(&db.0);
    listener.batch_execute("LISTEN scratchfs").unwrap();
    let mut probe = common::pg_client(&db.0);
    let registered = |probe: &mut postgres::Client| -> i64 {
        probe
            .query_one("SELECT COUNT(*) FROM daemons", &[])
            .unwrap()
            .get(0)
    };
    let a = Mount::on_db(&db.0);
    wait_for("a registered", || {
        (registered(&mut probe) == 1).then_some(())
    });
    std::fs::write(a.path("alone.md"), "made alone\n").unwrap();
    std::fs::write(a.path("alone.md"), "changed alone\n").unwrap();
    let alone = ino_of(&a.path("alone.md"));
    let b = Mount::on_db(&db.0);
    wait_for("b registered", || {
        (registered(&mut probe) == 2).then_some(())
    });
    std::fs::write(a.path("seen.md"), "made with b there\n").unwrap();
    let seen = ino_of(&a.path("seen.md"));
    let file_of = |payload: &str| -> Option<u64> {
        let mut w = payload.split(' ');
        w.next()?;
        (w.next()? == "file").then_some(())?;
        w.next()?.parse().ok()
    };
    let mut got = Vec::new();
    {
        use postgres::fallible_iterator::FallibleIterator;
        let mut n = listener.notifications();
        let mut it = n.timeout_iter(Duration::from_secs(30));
        loop {
            let m = it
                .next()
                .unwrap()
                .unwrap_or_else(|| panic!("within 30 s: seen.md's commit notified; got {got:?}"));
            got.push(m.payload().to_string());
            if file_of(m.payload()) == Some(seen) {
                break;
            }
        }
    }
    assert!(
        !got.iter().any(|p| file_of(p) == Some(alone)),
        "a change made alone was notified: {got:?}"
    );
    // And b, which registered after alone.md was written, reads both.
    wait_for("b reads seen.md", || {
        (std::fs::read_to_string(b.path("seen.md")).ok()? == "made with b there\n").then_some(())
    });
    assert_eq!(
        std::fs::read_to_string(b.path("alone.md")).unwrap(),
        "changed alone\n"
    );
    // b's change reaches a, which is not alone either.
    std::fs::write(b.path("alone.md"), "changed by b\n").unwrap();
    wait_for("a reads b's change", || {
        (std::fs::read_to_string(a.path("alone.md")).ok()? == "changed by b\n").then_some(())
    });
}

/// Appends `line` to inode `ino` through `store`, as a daemon's flush of an `O_APPEND`
/// handle does; returns the version's number and id.
fn append_through(store: &dyn scratchfs::store::Store, ino: u64, line: &[u8]) -> (i64, i64) {
    let caller = scratchfs::identity::Caller::internal("test");
    let mut source = |off: u64, buf: &mut [u8]| -> std::io::Result<()> {
        let off = off as usize;
        buf.copy_from_slice(&line[off..off + buf.len()]);
        Ok(())
    };
    let c = store
        .commit(scratchfs::store::CommitRequest {
            ino,
            path: "log",
            op: "append",
            expect_head: None,
            build: scratchfs::store::Build::Append {
                len: line.len() as u64,
            },
            source: &mut source,
            prefix_hasher: None,
            caller: &caller,
            time_ns: 1,
            set_mtime: true,
            durable: false,
            inputs: &[],
            origin: None,
            restores: None,
        })
        .unwrap();
    (c.version.number, c.version.id)
}

/// Two stores of one database that hear nothing of each other (no listener: as two
/// daemons between a commit and its notification). Each keeps the head it committed last
/// and sends its next commit of the file on it in one round trip; a guard after the
/// lineage's lock finds a kept head that another committed over, and the commit is made
/// again on the real one: version numbers stay gap-free, every appended line stays, and
/// a version's id is the one the database gave it.
#[test]
fn a_commit_on_a_kept_head_that_another_daemon_moved_is_made_again_on_the_real_one() {
    use scratchfs::store::{Attrs, Kind, Store, postgres::Postgres};
    let db = Db::new();
    let (one, _) = Postgres::open(&db.0, (0, 0)).unwrap();
    let (two, _) = Postgres::open(&db.0, (0, 0)).unwrap();
    let caller = scratchfs::identity::Caller::internal("test");
    let attrs = Attrs {
        mode: 0o644,
        uid: 0,
        gid: 0,
        atime_ns: 1,
        mtime_ns: 1,
        ctime_ns: 1,
    };
    let ino = one
        .create(1, b"log", "log", Kind::File, attrs, &caller)
        .unwrap()
        .ino;
    let mut versions = Vec::new();
    let mut text = String::new();
    for round in 0..3 {
        for (name, store) in [("one", &one), ("two", &two), ("one", &one)] {
            let line = format!("{round} {name}\n");
            versions.push(append_through(store, ino, line.as_bytes()));
            text.push_str(&line);
        }
    }
    let numbers: Vec<i64> = versions.iter().map(|v| v.0).collect();
    assert_eq!(numbers, (1..=9).collect::<Vec<i64>>());
    // The ids the commits returned are the rows', in the order of their numbers.
    let rows = common::pg_query(
        &db.0,
        &format!(
            "SELECT v.version, v.id FROM versions v JOIN nodes n ON n.file_id = v.file_id
             WHERE n.ino = {ino} ORDER BY v.id"
        ),
    );
    let stored: Vec<String> = rows.lines().map(String::from).collect();
    let returned: Vec<String> = versions.iter().map(|(n, id)| format!("{n}|{id}")).collect();
    assert_eq!(stored, returned);
    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_scratchfs"))
        .args(["show", "log", "--db", &db.0])
        .output()
        .unwrap();
    assert!(shown.status.success(), "{shown:?}");
    assert_eq!(String::from_utf8_lossy(&shown.stdout), text);
}

/// Issue 31 item 5 across daemons: a handle opened by `O_CREAT` on one daemon, on a file
/// that has no version yet, follows the version another daemon's process commits: once
/// the daemon has heard of it, the handle's `pwrite` lands on it (as POSIX gives), and
/// before that its commit is refused with `ESTALE` by the store; never a silent overwrite
/// of the other's bytes with zeros (it was, close() returning 0). Twenty rounds without
/// waiting, then one that waits for the daemon to hear of the other's commit.
#[test]
fn a_create_handle_follows_or_is_refused_never_overwrites_another_daemons_version() {
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let b = Mount::on_db(&db.0);
    let out = a.sh_ok(&format!(
        r#"python3 - <<'PYEOF'
import os, subprocess, sys, time
B = "{b}"
# Waits, in a process started before any descriptor is open (a fork or exec while one
# is open would flush it, FUSE-TRAPS §5), until a path has b's size on a.
waiter = subprocess.Popen([sys.executable, "-c", """
import os, sys, time
for name in sys.stdin:
    deadline = time.time() + 30
    while os.stat(name.strip()).st_size != 1234 and time.time() < deadline:
        time.sleep(0.005)
    print(os.stat(name.strip()).st_size, flush=True)
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
want = b"x" * 1234 + bytes(23455 - 1234) + b"y"
def round(name, wait):
    fd = os.open(name, os.O_CREAT | os.O_RDWR, 0o644)
    deadline = time.time() + 30
    while not os.path.exists(os.path.join(B, name)):
        assert time.time() < deadline, "b never heard of the name"
        time.sleep(0.005)
    with open(os.path.join(B, name), "r+b") as f:
        f.write(b"x" * 1234)
    if wait:
        waiter.stdin.write(name + "\n")
        waiter.stdin.flush()
        assert waiter.stdout.readline() == "1234\n", "a never heard of b's version"
        # The creator's own stat too (its handle's pending size was the empty file's).
        deadline = time.time() + 30
        while os.fstat(fd).st_size != 1234:
            assert time.time() < deadline, "the creator's fstat: " + str(os.fstat(fd).st_size)
            time.sleep(0.005)
    os.pwrite(fd, b"y", 23455)
    try:
        os.close(fd)
        outcome = "followed"
    except OSError as e:
        assert e.errno == 116, e
        outcome = "ESTALE"
    # Refused before a heard of b's version: it reads that version once it has.
    expected = want if outcome == "followed" else b"x" * 1234
    deadline = time.time() + 30
    while (got := open(name, "rb").read()) != expected and time.time() < deadline:
        time.sleep(0.005)
    assert got == expected, (name, outcome, len(got), got[:8])
    return outcome
print(sorted(set(round(f"n{{i}}", False) for i in range(20))))
print(round("waited", True))
PYEOF"#,
        b = b.mnt.display()
    ));
    let mut lines = out.lines();
    let quick = lines.next().unwrap();
    assert!(
        quick.contains("followed") || quick.contains("ESTALE"),
        "{out}"
    );
    assert_eq!(lines.next(), Some("followed"), "{out}");
    // b sees what a committed.
    let want_len = 23456;
    wait_for("b sees a's version built on its own", || {
        (std::fs::metadata(b.path("waited")).ok()?.len() == want_len).then_some(())
    });
    let bytes = std::fs::read(b.path("waited")).unwrap();
    assert!(bytes.starts_with(&[b'x'; 1234]) && bytes.ends_with(b"\0y"));
}

/// A follower on one daemon of a file that starts empty (`touch log; tail -f log`) reads
/// the line another daemon's process appends (issue 31 item 5: it read nothing).
#[test]
fn a_follower_of_an_empty_file_reads_another_daemons_append() {
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let b = Mount::on_db(&db.0);
    std::fs::write(a.path("log"), "").unwrap();
    wait_for("b sees the file", || b.path("log").exists().then_some(()));
    let out = a.sh_ok(&format!(
        r#"python3 - <<'PYEOF'
import os, time
r = open("log", "rb", buffering=0)
got = r.read()
with open("{b}/log", "ab") as f:
    f.write(b"appended line\n")
deadline = time.time() + 30
while b"\n" not in got and time.time() < deadline:
    got += r.read()
    time.sleep(0.01)
print(repr(got))
PYEOF"#,
        b = b.mnt.display()
    ));
    assert_eq!(out, "b'appended line\\n'\n");
}

/// Names, kinds and modes under `root`, sorted: what `ls -lR` shows of a tree.
fn listing(root: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if rel == "MANIFEST" || rel.ends_with(".outline") || rel.starts_with('.') {
                continue;
            }
            out.push(format!(
                "{rel} {} {:o} {}",
                if meta.is_dir() { "d" } else { "f" },
                meta.permissions().mode() & 0o7777,
                if meta.is_dir() { 0 } else { meta.len() }
            ));
            if meta.is_dir() {
                dirs.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// How many times a daemon's log says it reloaded its whole inode table.
fn whole_reloads(m: &Mount) -> usize {
    m.daemon_log().matches("reloading the whole tree").count()
}

#[test]
fn namespace_changes_reach_the_other_daemon_by_the_node_not_by_a_whole_reload() {
    let db = Db::new();
    let a = Mount::on_db(&db.0);
    let log = [("RUST_LOG", "warn,scratchfs=info")];
    let b = Mount::on_db_with_env(&db.0, &log);
    // b reloads its tree once when it starts listening (it may have missed changes).
    wait_for("b listening", || (whole_reloads(&b) >= 1).then_some(()));
    std::fs::create_dir(a.path("first")).unwrap();
    wait_for("b sees a's directory", || {
        b.path("first").is_dir().then_some(())
    });
    let reloads_before = whole_reloads(&b);
    // b looks names up, so that the kernel holds entries the changes must drop.
    assert!(!b.path("d/f0.md").exists());
    std::fs::create_dir(a.path("d")).unwrap();
    for i in 0..50 {
        std::fs::write(a.path(&format!("d/f{i}.md")), format!("file {i}\n")).unwrap();
    }
    wait_for("b sees a's creates", || {
        b.path("d/f49.md").exists().then_some(())
    });
    assert_eq!(common::read(b.path("d/f0.md")), "file 0\n");
    // A rename, a rename over another file, a chmod, an unlink, an rmdir, a directory
    // moved with its files.
    std::fs::rename(a.path("d/f1.md"), a.path("first/moved.md")).unwrap();
    std::fs::rename(a.path("d/f2.md"), a.path("d/f3.md")).unwrap();
    std::fs::set_permissions(
        a.path("d/f4.md"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    std::fs::remove_file(a.path("d/f5.md")).unwrap();
    std::fs::create_dir(a.path("gone")).unwrap();
    std::fs::remove_dir(a.path("gone")).unwrap();
    std::fs::create_dir_all(a.path("first/sub")).unwrap();
    std::fs::write(a.path("first/sub/deep.md"), "deep\n").unwrap();
    std::fs::rename(a.path("first"), a.path("d/first")).unwrap();
    // The last change, which b sees after all the others.
    std::fs::write(a.path("done.md"), "done\n").unwrap();
    wait_for("b sees a's last change", || {
        b.path("done.md").exists().then_some(())
    });
    wait_for("b's tree equals a's", || {
        (listing(&b.mnt) == listing(&a.mnt)).then_some(())
    });
    assert_eq!(common::read(b.path("d/f3.md")), "file 2\n");
    assert_eq!(common::read(b.path("d/first/sub/deep.md")), "deep\n");
    assert!(!b.path("d/f5.md").exists() && !b.path("first").exists());
    assert_eq!(
        whole_reloads(&b),
        reloads_before,
        "b reloaded its whole tree for a create, rename, chmod or unlink:\n{}",
        b.daemon_log()
    );
    assert!(
        !b.daemon_log().contains("did not settle"),
        "{}",
        b.daemon_log()
    );
    // A rollback is a change of the whole tree: b reloads it (and agrees after).
    let (code, _, err) = common::cli(&a, &["checkpoint", "before-rm"]);
    assert_eq!(code, 0, "{err}");
    std::fs::remove_file(a.path("done.md")).unwrap();
    let (code, _, err) = common::cli(&a, &["rollback", "before-rm"]);
    assert_eq!(code, 0, "{err}");
    wait_for("b reloads its tree after the rollback", || {
        (whole_reloads(&b) > reloads_before && b.path("done.md").exists()).then_some(())
    });
}

#[test]
fn read_modify_writes_from_eight_daemons_lose_no_update() {
    // Each of 8 daemons increments a counter 15 times: read it, write it back plus one,
    // close; a close that finds another daemon's version committed since the read gets
    // ESTALE (a lost update refused, as within one daemon), and the writer reads again.
    // No increment is lost: the counter ends at 120, and each value was written once.
    const DAEMONS: usize = 8;
    const EACH: usize = 15;
    let db = Db::new();
    let mounts: Vec<Mount> = (0..DAEMONS).map(|_| Mount::on_db(&db.0)).collect();
    std::fs::write(mounts[0].path("counter"), "0\n").unwrap();
    for m in &mounts[1..] {
        wait_for("the counter everywhere", || {
            m.path("counter").exists().then_some(())
        })
    }
    let script = format!(
        r#"
import errno, os, sys
done, stale = 0, 0
while done < {EACH}:
    f = os.open("counter", os.O_RDWR)
    try:
        n = int(os.read(f, 100).decode() or "0")
        os.lseek(f, 0, 0)
        os.ftruncate(f, 0)
        os.write(f, f"{{n + 1}}\n".encode())
    except OSError as e:
        os.close(f)
        raise
    try:
        os.close(f)
        done += 1
        print(n + 1, flush=True)
    except OSError as e:
        if e.errno != errno.ESTALE:
            raise
        stale += 1
print("stale", stale, file=sys.stderr)
"#
    );
    let writers: Vec<_> = mounts
        .iter()
        .map(|m| {
            std::process::Command::new("python3")
                .args(["-c", &script])
                .current_dir(&m.mnt)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut written: Vec<u64> = Vec::new();
    let mut stale = 0;
    for w in writers {
        let out = w.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "a writer failed: {err}");
        written.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| l.parse::<u64>().unwrap()),
        );
        stale += err
            .lines()
            .find_map(|l| l.strip_prefix("stale "))
            .map_or(0, |n| n.parse::<u64>().unwrap());
    }
    written.sort();
    let total = (DAEMONS * EACH) as u64;
    assert_eq!(
        written,
        (1..=total).collect::<Vec<u64>>(),
        "each value written once"
    );
    for m in &mounts {
        wait_for("the final count on every daemon", || {
            (std::fs::read_to_string(m.path("counter")).ok()? == format!("{total}\n")).then_some(())
        });
    }
    // The refusals are on record, one ESTALE event each.
    let refused = common::pg_query(
        &db.0,
        "SELECT COUNT(*) FROM events WHERE op = 'rejected' AND errno = 116 AND path = 'counter'",
    );
    assert_eq!(
        refused,
        stale.to_string(),
        "one ESTALE refusal recorded per lost update"
    );
}

/// `url` with the connection parameter `options=-csearch_path=SCHEMA` added: the
/// scratchpad in that schema.
fn in_schema(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-csearch_path%3D{schema}")
}

/// How many notifications from other daemons a daemon's debug log shows: the changes
/// of its "changes by other daemons: [...]" lines (a burst is applied as one line).
fn heard(m: &Mount) -> usize {
    m.daemon_log()
        .lines()
        .filter_map(|l| l.split_once("changes by other daemons: ["))
        .map(|(_, list)| {
            ["Tree", "Node {", "File {", "Events", "Rules"]
                .iter()
                .map(|k| list.matches(k).count())
                .sum::<usize>()
        })
        .sum()
}

#[test]
fn scratchpads_in_two_schemas_hear_only_their_own_daemons_with_three_connections_each() {
    use std::os::unix::fs::MetadataExt;
    let db = Db::new();
    common::pg_query(&db.0, "CREATE SCHEMA pad_a");
    common::pg_query(&db.0, "CREATE SCHEMA pad_b");
    let log = [("RUST_LOG", "warn,scratchfs::mount=debug")];
    let (url_a, url_b) = (in_schema(&db.0, "pad_a"), in_schema(&db.0, "pad_b"));
    let a1 = Mount::on_db(&url_a);
    let a2 = Mount::on_db_with_env(&url_a, &log);
    let b1 = Mount::on_db(&url_b);
    let b2 = Mount::on_db_with_env(&url_b, &log);
    std::fs::write(a1.path("only-a.md"), "a\n").unwrap();
    wait_for("a2 sees a1's file", || {
        a2.path("only-a.md").exists().then_some(())
    });
    for i in 0..20 {
        std::fs::write(b1.path(&format!("b{i}.md")), "b\n").unwrap();
    }
    wait_for("b2 sees b1's files", || {
        b2.path("b19.md").exists().then_some(())
    });
    wait_for("b2 hears b1's 20 commits", || {
        (heard(&b2) >= 20).then_some(())
    });
    // One more change in a, committed after b's 20. a2 may see the file by a lookup
    // before its notification arrives, so wait for the notification itself (it names
    // the file's inode): had a2 heard b's 20, they came before it on the one channel.
    std::fs::write(a1.path("last-a.md"), "a\n").unwrap();
    let ino = wait_for("a2 sees a1's last file", || {
        std::fs::metadata(a2.path("last-a.md"))
            .ok()
            .map(|m| m.ino())
    });
    let own = format!("File {{ ino: {ino},");
    wait_for("a2 hears last-a.md's commit", || {
        a2.daemon_log().contains(&own).then_some(())
    });
    // Everything a2 heard: its start (a reload), two changes in a of at most two
    // notifications each; b's 20 changes would add 20 to 40.
    let a2_heard = heard(&a2);
    assert!(
        (2..=8).contains(&a2_heard),
        "a2 heard {a2_heard} notifications for 2 changes in its scratchpad and 20 in another:\n{}",
        a2.daemon_log()
    );
    assert!(!a2.path("b0.md").exists() && !b2.path("only-a.md").exists());
    // A gc of one scratchpad asks its own daemons only (b's would never answer it).
    let (code, err) = gc(&url_a, &["--keep-last", "1"]);
    assert_eq!(code, Some(0), "{err}");
    // Every daemon holds at most three connections (writer, reader, listener), after
    // reads and writes through it.
    for m in [&a1, &a2, &b1, &b2] {
        std::fs::write(m.path("touch.md"), "x\n").unwrap();
        let _ = std::fs::read_to_string(m.path("MANIFEST")).unwrap();
    }
    let sessions = common::pg_query(
        &db.0,
        &format!(
            "SELECT COUNT(*) FROM pg_stat_activity
             WHERE datname = '{}' AND pid <> pg_backend_pid()",
            common::pg_database_of(&db.0)
        ),
    );
    let n: usize = sessions.parse().unwrap();
    assert!(n <= 4 * 3, "{n} sessions for 4 daemons");
}

/// The grants docs/deploy.md gives a host role on the scratchpad in `schema`.
fn grant_host_role(owner_url: &str, schema: &str, role: &str) {
    for sql in [
        format!("GRANT USAGE ON SCHEMA {schema} TO {role}"),
        format!("GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA {schema} TO {role}"),
        format!("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role}"),
        format!("GRANT DELETE ON {schema}.fields, {schema}.daemons TO {role}"),
    ] {
        common::pg_query(owner_url, &sql);
    }
}

#[test]
fn a_host_role_with_the_documented_grants_writes_its_scratchpad_and_cannot_reach_another() {
    let db = Db::new();
    common::pg_query(&db.0, "CREATE SCHEMA pad_a");
    common::pg_query(&db.0, "CREATE SCHEMA pad_b");
    // The owner makes both scratchpads' tables; b holds a secret.
    {
        let a0 = Mount::on_db(&in_schema(&db.0, "pad_a"));
        std::fs::write(a0.path("plan.md"), "made by the owner\n").unwrap();
        let b0 = Mount::on_db(&in_schema(&db.0, "pad_b"));
        std::fs::write(b0.path("secret.md"), "b's secret\n").unwrap();
    }
    grant_host_role(&db.0, "pad_a", "scratchfs_pad_a");
    grant_host_role(&db.0, "pad_b", "scratchfs_pad_b");
    let as_a =
        |schema: &str| in_schema(&db.0.replacen("scratchfs@", "scratchfs_pad_a@", 1), schema);
    assert!(
        as_a("pad_a").contains("scratchfs_pad_a@"),
        "{}",
        as_a("pad_a")
    );
    // Host role a works its scratchpad: writes, appends, renames, deletes, JSON, history.
    let a = Mount::on_db(&as_a("pad_a"));
    assert_eq!(common::read(a.path("plan.md")), "made by the owner\n");
    a.sh_ok(
        "echo step >> plan.md && echo '{\"n\": 1}' > state.json && mkdir d && \
         mv plan.md d/plan.md && echo x > tmp.md && rm tmp.md && cat d/plan.md >/dev/null",
    );
    assert_eq!(
        common::read(a.path("d/plan.md")),
        "made by the owner\nstep\n"
    );
    assert!(a.path(".history/d/plan.md").exists() || a.path(".history").exists());
    // It cannot erase history (no DELETE): a gc as that role is refused by the server.
    let (code, out) = gc(&as_a("pad_a"), &["--keep-last", "1"]);
    assert_ne!(code, Some(0), "a gc by a host role: {out}");
    assert!(out.contains("ermission denied"), "{out}");
    // Nor reach b's scratchpad: a mount is refused, creating nothing ...
    let dir = tempfile::tempdir().unwrap();
    let o = common::output_within(
        "a mount of another scratchpad",
        std::process::Command::new(common::BIN)
            .arg("mount")
            .arg(dir.path())
            .arg("--db")
            .arg(as_a("pad_b")),
        Duration::from_secs(60),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no schema of the search path (pad_b) exists that this role may use"),
        "{err}"
    );
    // ... nor a mistyped one (no schema is created by a mount).
    let o = std::process::Command::new(common::BIN)
        .arg("mount")
        .arg(dir.path())
        .arg("--db")
        .arg(as_a("pad_aa"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let schemas = common::pg_query(
        &db.0,
        "SELECT string_agg(nspname, ',' ORDER BY nspname) FROM pg_namespace
         WHERE nspname LIKE 'pad%'",
    );
    assert_eq!(schemas, "pad_a,pad_b");
    // ... nor read or write its rows with SQL of its own.
    let mut c = common::pg_client(&as_a("pad_a"));
    common::pg_refuses(
        &mut c,
        "SELECT COUNT(*) FROM pad_b.versions",
        "host role a reads b's versions",
    );
    common::pg_refuses(
        &mut c,
        "INSERT INTO pad_b.meta(key, value) VALUES ('x', 'y')",
        "host role a writes b's rows",
    );
    assert_eq!(
        common::pg_query(
            &db.0,
            "SELECT COUNT(*) FROM pad_b.versions WHERE path = 'secret.md'"
        ),
        "1"
    );
}

#[test]
fn a_checkpoint_in_one_scratchpad_does_not_hold_back_the_commits_of_another() {
    // Each scratchpad of a database has its own change lock: one held exclusively in b's
    // schema (as a checkpoint or rollback holds it) stalls b's commits, not a's.
    let db = Db::new();
    common::pg_query(&db.0, "CREATE SCHEMA pad_a");
    common::pg_query(&db.0, "CREATE SCHEMA pad_b");
    let (url_a, url_b) = (in_schema(&db.0, "pad_a"), in_schema(&db.0, "pad_b"));
    let a = Mount::on_db(&url_a);
    let b = Mount::on_db(&url_b);
    let mut holder = common::pg_client(&url_b);
    let mut tx = holder.transaction().unwrap();
    tx.batch_execute(scratchfs::store::postgres::change_lock_sql(true))
        .unwrap();
    let write = |m: &Mount, name: &str| {
        let p = m.path(name);
        std::thread::spawn(move || std::fs::write(p, "x\n"))
    };
    let in_a = write(&a, "a.md");
    wait_for("a's commit while b's change lock is held", || {
        in_a.is_finished().then_some(())
    });
    in_a.join().unwrap().unwrap();
    let in_b = write(&b, "b.md");
    wait_for("b's commit waiting for its change lock", || {
        (common::pg_query(
            &db.0,
            "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
        ) != "0")
            .then_some(())
    });
    assert!(!in_b.is_finished(), "b's commit did not wait for its lock");
    tx.commit().unwrap();
    in_b.join().unwrap().unwrap();
    assert_eq!(common::read(b.path("b.md")), "x\n");
}
