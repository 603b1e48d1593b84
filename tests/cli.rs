//! The command line (SPEC §2): mount options, run, unmount, exit statuses.

mod common;
use common::*;
use std::process::Command;

#[test]
fn run_mounts_runs_and_unmounts_with_the_commands_status() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let out = Command::new(BIN)
        .args(["run", "--db"])
        .arg(&db)
        .args(["--", "bash", "-c", "echo hi > note && cat plan.md && test \"$PWD\" = \"$SCRATCHFS_MOUNT\" && ls && echo $PWD >&2; exit 7"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "MANIFEST\nfindings.md\nnote\nplan.md\nstate.json\n"
    );
    let n = Command::new("sqlite3")
        .arg(&db)
        .arg("SELECT size FROM versions WHERE path = 'note' ORDER BY id DESC LIMIT 1")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&n.stdout).trim(), "3");
    let mnt = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert!(mnt.contains("scratchfs-"), "{mnt}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&format!(" {mnt} ")),
        "run left a mount behind:\n{mounts}"
    );
    assert!(
        !std::path::Path::new(&mnt).exists(),
        "run left its mountpoint behind"
    );
}

#[test]
fn background_returns_once_the_mount_answers_and_unmount_ends_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let o = Command::new(BIN)
        .arg("mount")
        .arg(&mnt)
        .arg("--db")
        .arg(dir.path().join("s.db"))
        .arg("--background")
        .output()
        .unwrap();
    assert!(o.status.success());
    // It says what it mounted, where the database and the log are, and how to unmount
    // (issue 33 item 9); stdout stays empty.
    let said = String::from_utf8_lossy(&o.stderr);
    let db = dir.path().join("s.db");
    for part in [
        format!("mounted {} at {}", db.display(), mnt.display()),
        format!("log {}.log", db.display()),
        // The command as it was run (a path here: `scratchfs` may not be on PATH).
        format!(
            "unmount with: {} unmount {}",
            std::fs::canonicalize(BIN).unwrap().display(),
            mnt.display()
        ),
    ] {
        assert!(said.contains(&part), "{part:?} not in {said}");
    }
    assert!(o.stdout.is_empty());
    // Answers at once: no sleep between the command and the first access.
    assert_eq!(read(mnt.join("state.json")).trim(), "{}");
    let st = Command::new(BIN).arg("unmount").arg(&mnt).status().unwrap();
    assert!(st.success());
    assert!(
        std::fs::read_dir(&mnt).unwrap().next().is_none(),
        "still mounted"
    );
}

#[test]
fn usage_errors_exit_2_and_runtime_failures_exit_1_with_one_line() {
    let o = Command::new(BIN).args(["mount"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = Command::new(BIN).args(["frobnicate"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .arg("mount")
        .arg(dir.path().join("missing"))
        .arg("--db")
        .arg(dir.path().join("s.db"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("missing"), "{err}");
}

/// A TIME argument (`export --at`, `gc --before`) is one of the forms docs list: RFC 3339
/// as `date` prints it, a date, `@SECONDS`; anything else, or a field out of range, is a
/// usage error (exit 2) whose message lists the forms, and nothing is done. A time before
/// the first version is accepted, with a note saying it selects nothing; a time far in
/// the future exports the current tree.
#[test]
fn time_arguments_are_checked_and_far_times_still_work() {
    let m = Mount::new();
    m.sh_ok("echo one > a");
    let out = tempfile::tempdir().unwrap();
    let dir = |name: &str| out.path().join(name).to_string_lossy().into_owned();
    for (args, why) in [
        (vec!["export", &dir("x1"), "--at", "20261201"], "not a time"),
        (vec!["export", &dir("x2"), "--at", "2026-13-01"], "month"),
        (vec!["export", &dir("x3"), "--at", "2026-13-45"], "month"),
        (vec!["export", &dir("x4"), "--at", "2026-02-30"], "day"),
        (
            vec!["export", &dir("x5"), "--at", "yesterday"],
            "not a time",
        ),
        (
            vec!["export", &dir("x6"), "--at", "1796083200000000000"],
            "not a time",
        ),
        (vec!["gc", "--before", "2026-12-01T25:00:00Z"], "hour"),
        (vec!["gc", "--before", "@1e9"], "not a time"),
    ] {
        let (rc, stdout, err) = cli(&m, &args);
        assert_eq!(rc, 2, "{args:?}: {stdout} {err}");
        let value = args[args.len() - 1];
        assert!(
            err.contains(&format!("invalid value '{value}' for '--")),
            "{args:?}: {err}"
        );
        assert!(err.contains(why), "{args:?}: {err}");
        for form in ["YYYY-MM-DD", "RFC 3339", "Z or +HH:MM", "@SECONDS"] {
            assert!(err.contains(form), "{args:?}: {err}");
        }
        assert!(
            !out.path().join(args[1]).exists(),
            "{args:?}: did something"
        );
    }
    let (rc, _, err) = cli(&m, &["gc"]);
    assert_eq!(rc, 2, "gc selects nothing without a flag: {err}");
    // What `date` prints, as the docs say (some to the second: a second after the write).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    for (i, date_args) in [
        vec!["-u", "+%Y-%m-%dT%H:%M:%S.%NZ"],
        vec!["--rfc-3339=ns"],
        vec!["-Ins"],
        vec!["-Iseconds"],
        vec!["+@%s.%N"],
    ]
    .into_iter()
    .enumerate()
    {
        let o = Command::new("date").args(&date_args).output().unwrap();
        let now = String::from_utf8(o.stdout).unwrap().trim().to_string();
        let d = dir(&format!("date{i}"));
        let (rc, _, err) = cli(&m, &["export", &d, "--at", &now]);
        assert_eq!(rc, 0, "{now}: {err}");
        assert_eq!(
            read(std::path::Path::new(&d).join("a")),
            "one\n",
            "{now}: {err}"
        );
    }
    // Far in the future: the current tree.
    let (rc, _, err) = cli(&m, &["export", &dir("future"), "--at", "9999-12-31"]);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(read(out.path().join("future/a")), "one\n");
    assert!(!err.contains("note"), "{err}");
    // Before the first version: accepted, nothing exported, and a note saying why.
    let (rc, _, err) = cli(
        &m,
        &["export", &dir("past"), "--at", "1999-12-31T23:00:00-01:00"],
    );
    assert_eq!(rc, 0, "{err}");
    assert!(
        err.contains("note: --at 2000-01-01 00:00:00Z is before the first version ("),
        "{err}"
    );
    assert!(err.contains("exported 0 files"), "{err}");
    let (rc, stdout, err) = cli(&m, &["gc", "--before", "@0", "--dry-run"]);
    assert_eq!(rc, 0, "{err}");
    assert!(stdout.contains("would delete 0 versions"), "{stdout}");
    assert!(
        err.contains("note: --before 1970-01-01 00:00:00Z is not after the first version ("),
        "{err}"
    );
}

/// A database path that cannot be opened is named, with the OS's reason, by every
/// command, in one line, exit status 1: a database uid 1000 may read in a directory it
/// may not write (readers cannot create `-shm`; writers may not write the file), a path
/// under a directory that does not exist, a directory, and a read-only file system.
#[test]
fn a_database_that_cannot_be_opened_is_named_with_the_os_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path();
    std::fs::set_permissions(top, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mnt = top.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::set_permissions(&mnt, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = top.join("export").display().to_string();
    let mnt = mnt.display().to_string();
    let readers: Vec<Vec<&str>> = vec![
        vec!["log"],
        vec!["history", "plan.md"],
        vec!["show", "plan.md"],
        vec!["diff", "plan.md@1"],
        vec!["fsck"],
        vec!["export", &out],
    ];
    let writers: Vec<Vec<&str>> = vec![
        vec!["gc", "--keep-last", "1"],
        vec!["restore", "plan.md@1"],
        vec!["redact", "plan.md@1"],
        vec!["mount", &mnt],
        vec!["mount", &mnt, "--background"],
    ];
    // Runs a command on `db` (as uid 1000 if `agent`); asserts exit 1 and one line.
    let run = |agent: bool, args: &[&str], db: &std::path::Path| -> String {
        let mut cmd = Command::new("timeout");
        cmd.arg("20");
        if agent {
            cmd.args([
                "setpriv",
                "--reuid",
                "1000",
                "--regid",
                "1000",
                "--clear-groups",
            ]);
        }
        let o = cmd
            .arg(BIN)
            .args(args)
            .arg("--db")
            .arg(db)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "{args:?} {}: {err}", db.display());
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        err
    };
    let made = |db: &std::path::Path| {
        let (store, _) = scratchfs::store::Sqlite::open(db, (0, 0)).unwrap();
        drop(store);
        std::fs::set_permissions(db, std::fs::Permissions::from_mode(0o644)).unwrap();
        for side in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{side}", db.display()));
        }
    };

    // Readable by uid 1000, in a directory it may not write.
    let db = top.join("x.db");
    made(&db);
    let (d, f) = (top.display(), db.display());
    for args in &readers {
        let err = run(true, args, &db);
        assert_eq!(
            err,
            format!(
                "scratchfs: cannot open database {f}: cannot create x.db-shm in {d}: \
                 Permission denied (os error 13)\n"
            ),
            "{args:?}"
        );
    }
    for args in &writers {
        let err = run(true, args, &db);
        // restore and redact read the history first (to resolve PATH@N): a reader's refusal.
        let why = if matches!(args[0], "restore" | "redact") {
            format!("cannot create x.db-shm in {d}: Permission denied (os error 13)")
        } else {
            "Permission denied (os error 13)".to_string()
        };
        assert_eq!(
            err,
            format!("scratchfs: cannot open database {f}: {why}\n"),
            "{args:?}"
        );
    }

    // Owned by uid 1000, in a directory it may not write: SQLite cannot create `-shm`
    // (`mount --background` first creates the daemon's log there).
    let db = top.join("own.db");
    made(&db);
    std::os::unix::fs::chown(&db, Some(1000), Some(1000)).unwrap();
    let f = db.display();
    for args in readers.iter().chain(&writers) {
        let err = run(true, args, &db);
        let why = if args.contains(&"--background") {
            format!("its log {f}.log: Permission denied (os error 13)")
        } else {
            format!("cannot create own.db-shm in {d}: Permission denied (os error 13)")
        };
        assert_eq!(
            err,
            format!("scratchfs: cannot open database {f}: {why}\n"),
            "{args:?}"
        );
    }

    // Under a directory that does not exist (refused by a mount too: tested below).
    let missing = top.join("no/such/dir/x.db");
    for args in readers.iter().chain(&writers[..3]) {
        let err = run(false, args, &missing);
        assert_eq!(
            err,
            format!(
                "scratchfs: cannot open database {}: No such file or directory (os error 2); \
                 its directory {} does not exist (a typo?)\n",
                missing.display(),
                missing.parent().unwrap().display()
            ),
            "{args:?}"
        );
    }

    // A directory.
    let is_dir = top.join("dir.db");
    std::fs::create_dir(&is_dir).unwrap();
    for args in readers.iter().chain(&writers) {
        let err = run(false, args, &is_dir);
        assert_eq!(
            err,
            format!(
                "scratchfs: cannot open database {}: Is a directory (os error 21)\n",
                is_dir.display()
            ),
            "{args:?}"
        );
    }

    // A read-only file system (a tmpfs remounted read-only).
    let ro = top.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let sh = |script: &str| {
        let o = Command::new("sh").arg("-c").arg(script).output().unwrap();
        assert!(
            o.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    sh(&format!("mount -t tmpfs -o size=4m tmpfs {}", ro.display()));
    let db = ro.join("x.db");
    made(&db);
    sh(&format!("mount -o remount,ro {}", ro.display()));
    let f = db.display();
    let result = std::panic::catch_unwind(|| {
        for args in &readers {
            let err = run(false, args, &db);
            assert_eq!(
                err,
                format!(
                    "scratchfs: cannot open database {f}: cannot create x.db-shm in {}: \
                     Read-only file system (os error 30)\n",
                    ro.display()
                ),
                "{args:?}"
            );
        }
        for args in &writers {
            let err = run(false, args, &db);
            // restore and redact read the history first: a reader's refusal.
            let why = if matches!(args[0], "restore" | "redact") {
                format!("cannot create x.db-shm in {}: ", ro.display())
            } else {
                String::new()
            };
            assert_eq!(
                err,
                format!(
                    "scratchfs: cannot open database {f}: {why}Read-only file system (os error 30)\n"
                ),
                "{args:?}"
            );
        }
    });
    sh(&format!("umount -l {}", ro.display()));
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn database_under_the_mountpoint_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .arg("mount")
        .arg(dir.path())
        .arg("--db")
        .arg(dir.path().join("inside.db"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("outside the mount"));
    assert!(!dir.path().join("inside.db").exists());
}

#[test]
fn owner_hands_the_scratchpad_to_another_uid() {
    let m = Mount::with_args(&["--owner", "4242:4242"]);
    assert_eq!(
        m.sh_ok("stat -c '%u:%g' . plan.md state.json"),
        "4242:4242\n4242:4242\n4242:4242\n"
    );
    // The agent's uid writes its files and creates new ones, which belong to it.
    m.sh_ok("setpriv --reuid 4242 --regid 4242 --clear-groups bash -c 'echo step > plan.md && echo n > mine'");
    assert_eq!(m.sh_ok("stat -c '%u' mine"), "4242\n");
    assert_eq!(
        m.sql("SELECT uid FROM version_log WHERE path = 'mine' ORDER BY id DESC LIMIT 1"),
        "4242"
    );
    // Another uid may read (allow_other is implied) but the kernel refuses its writes.
    assert_eq!(
        m.sh_ok("setpriv --reuid 5000 --regid 5000 --clear-groups cat plan.md"),
        "step\n"
    );
    let o = m.sh("setpriv --reuid 5000 --regid 5000 --clear-groups bash -c 'echo x > plan.md'");
    assert!(String::from_utf8_lossy(&o.stderr).contains("Permission denied"));
    assert_eq!(read(m.path("plan.md")), "step\n");
}

#[test]
fn a_new_database_holds_the_default_layout_once() {
    let mut m = Mount::new();
    m.sh_ok("rm findings.md");
    m.unmount();
    m.start();
    assert_eq!(
        m.sh_ok("ls"),
        "MANIFEST\nplan.md\nstate.json\n",
        "remount must not re-create the layout"
    );
}

#[test]
fn a_live_mount_or_a_database_in_use_is_refused_and_a_dead_one_is_cleared() {
    let mut m = Mount::new();
    let other = tempfile::tempdir().unwrap();
    let mount = |mnt: &std::path::Path, db: &std::path::Path| {
        Command::new(BIN)
            .arg("mount")
            .arg(mnt)
            .arg("--db")
            .arg(db)
            .arg("--background")
            .output()
            .unwrap()
    };
    // Another database over the live mount.
    let o = mount(&m.mnt, &other.path().join("x.db"));
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("already mounted"));
    // The same database on a second mountpoint.
    let o = mount(other.path(), &m.db);
    assert_eq!(o.status.code(), Some(1));
    // Saying where (issue 33 item 9).
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "in use by the scratchfs mount at {}",
            m.mnt.display()
        )),
        "{err}"
    );
    assert_eq!(
        read(m.path("state.json")).trim(),
        "{}",
        "the live mount is untouched"
    );
    // Killed, then mounted again at once: the dead mount is cleared.
    m.sh_ok("echo kept > f");
    let pid = m.daemon_pid();
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let o = mount(&m.mnt, &m.db);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(read(m.path("f")), "kept\n");
    let st = Command::new(BIN)
        .arg("unmount")
        .arg(&m.mnt)
        .status()
        .unwrap();
    assert!(st.success());
    m.kill9();
}

#[test]
fn rules_check_names_line_column_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("rules.json");
    std::fs::write(
        &f,
        "{\n  \"writers\": { \"agent\": { \"uid\": 1000 } },\n  \"paths\": [\n    { \"path\": \"plan.md\", \"writers\": [\"agnt\"] },\n    { \"path\": \"**\", \"writers\": [\"*\"], \"mdoe\": \"read-only\" }\n  ]\n}\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .args(["rules", "check"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(":5:") && out.contains("unknown key \"mdoe\""),
        "{out}"
    );
    std::fs::write(
        &f,
        "{\n  \"writers\": { \"agent\": { \"uid\": 1000 } },\n  \"paths\": [\n    { \"path\": \"plan.md\", \"writers\": [\"agnt\"] }\n  ]\n}\n",
    )
    .unwrap();
    let o = Command::new(BIN)
        .args(["rules", "check"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("rules.json:4:38: paths[0].writers[0]: unknown writer \"agnt\""),
        "{out}"
    );
    std::fs::write(&f, "{\"writers\": {\"agent\": {\"uid\": 1000}}, \"paths\": [{\"path\": \"**\", \"writers\": [\"agent\"]}]}").unwrap();
    let o = Command::new(BIN)
        .args(["rules", "check"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// `log`, `history` and `fsck` print a name holding a newline quoted, on one line, as git
/// quotes paths; `--json` carries it as a JSON string.
#[test]
fn log_and_history_print_a_forged_name_quoted_on_one_line() {
    let m = Mount::new();
    let evil = "a\nfake.md    999  9  1  root  0s";
    std::fs::write(m.path(evil), "hello\n").unwrap();
    let quoted = r#""a\nfake.md    999  9  1  root  0s""#;
    let (code, out, err) = cli(&m, &["log"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = out.lines().filter(|l| l.contains("fake.md")).collect();
    assert_eq!(rows.len(), 1, "its one version, on one line:\n{out}");
    for r in &rows {
        assert!(r.contains(&format!(" {quoted}  v")), "{out}");
    }
    assert!(!out.lines().any(|l| l.starts_with("fake.md")), "{out}");
    let (code, out, err) = cli(&m, &["history", evil]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "a header and its version: {out}");
    assert!(out.lines().skip(1).all(|l| l.contains(quoted)), "{out}");
    let (code, out, _) = cli(&m, &["log", "--json", evil]);
    assert_eq!(code, 0);
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["path"], evil);
    let (code, _, err) = cli(&m, &["show", "no\nsuch"]);
    assert_eq!(code, 1);
    assert_eq!(err, "scratchfs: \"no\\nsuch\": no such file in the store\n");
    // A rename's line joins its names with ` -> `: a name holding it is quoted.
    std::fs::write(m.path("a -> b.md"), "x\n").unwrap();
    std::fs::rename(m.path("a -> b.md"), m.path("c.md")).unwrap();
    let (code, out, err) = cli(&m, &["log", "c.md"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(r#"rename   "a -> b.md" -> c.md"#), "{out}");
}

fn sha256(p: &std::path::Path) -> String {
    let o = Command::new("sha256sum").arg(p).output().unwrap();
    assert!(o.status.success(), "sha256sum {}", p.display());
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// Files beside `p` whose names start with its name (`-wal`, `-shm`, `-redo`, `.log`).
fn companions(p: &std::path::Path) -> Vec<String> {
    let name = p.file_name().unwrap().to_string_lossy().to_string();
    let mut v: Vec<String> = std::fs::read_dir(p.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(&name) && *n != name)
        .collect();
    v.sort();
    v
}

/// A file that is not a scratchfs database (a SQLite database of another application,
/// one with a clashing `meta(key, value)` table, one in WAL mode, plain text) is refused
/// by `mount` (foreground and --background) and every command, with exit status 1 and
/// "FILE is not a scratchfs database", and left byte for byte as it was, with nothing
/// created beside it.
#[test]
fn a_foreign_database_is_refused_and_left_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let sql = |db: &std::path::Path, q: &str| {
        let o = Command::new("sqlite3").arg(db).arg(q).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let clash = dir.path().join("clash.db");
    sql(
        &clash,
        "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT); \
         INSERT INTO meta VALUES ('schema_version', '7'), ('owner', 'someone else');",
    );
    let plain = dir.path().join("plain.db");
    sql(
        &plain,
        "CREATE TABLE orders(id INTEGER PRIMARY KEY, total INTEGER); INSERT INTO orders VALUES (1, 18000);",
    );
    let wal = dir.path().join("wal.db");
    sql(
        &wal,
        "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);",
    );
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database at all\n").unwrap();
    for db in [&clash, &plain, &wal, &text] {
        let before = sha256(db);
        let want = format!("scratchfs: {} is not a scratchfs database\n", db.display());
        let runs: Vec<Vec<&str>> = vec![
            vec!["mount", mnt.to_str().unwrap()],
            vec!["mount", mnt.to_str().unwrap(), "--background"],
            vec!["log"],
            vec!["history", "plan.md"],
            vec!["show", "plan.md"],
            vec!["fsck"],
            vec!["gc", "--keep-last", "1"],
            vec!["restore", "plan.md@1"],
        ];
        for args in runs {
            // A mount that wrongly starts would serve until killed: `timeout` ends it
            // (SIGTERM unmounts) and the test fails instead of hanging.
            let o = Command::new("timeout")
                .arg("20")
                .arg(BIN)
                .args(&args)
                .arg("--db")
                .arg(db)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(
                o.status.code(),
                Some(1),
                "{args:?} on {}: {err}",
                db.display()
            );
            assert_eq!(err, want, "{args:?}");
            assert_eq!(sha256(db), before, "{args:?} changed {}", db.display());
            assert_eq!(
                companions(db),
                Vec::<String>::new(),
                "{args:?} left files beside {}",
                db.display()
            );
        }
        assert!(std::fs::read_dir(&mnt).unwrap().next().is_none(), "mounted");
    }
}

/// The database, its -wal, -shm, redo log and daemon log are mode 0600, unreadable to
/// another user; an existing database with looser modes is made private at mount.
#[test]
fn the_database_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let db = dir.path().join("s.db");
    let files =
        ["s.db", "s.db-wal", "s.db-shm", "s.db-redo", "s.db.log"].map(|n| dir.path().join(n));
    let check = |when: &str| {
        for f in &files {
            let mode = std::fs::metadata(f)
                .unwrap_or_else(|e| panic!("{when}: {}: {e}", f.display()))
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{when}: {}", f.display());
            let o = Command::new("setpriv")
                .args([
                    "--reuid",
                    "1000",
                    "--regid",
                    "1000",
                    "--clear-groups",
                    "cat",
                ])
                .arg(f)
                .output()
                .unwrap();
            assert!(!o.status.success(), "{when}: uid 1000 read {}", f.display());
            assert!(
                String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
                "{when}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    };
    /// Unmounts on drop, so that a failed assertion leaves no mount behind.
    struct Unmount<'a>(&'a std::path::Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
    let _guard = Unmount(&mnt);
    // The temporary directory is 0700: open it up so that only the files' modes decide.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mount = || {
        let st = Command::new(BIN)
            .arg("mount")
            .arg(&mnt)
            .arg("--db")
            .arg(&db)
            .arg("--background")
            .status()
            .unwrap();
        assert!(st.success());
    };
    mount();
    std::fs::write(mnt.join("notes.md"), "secret findings\n").unwrap();
    std::fs::write(mnt.join("state.json"), "{\"k\": 1}\n").unwrap();
    check("mounted");
    let st = Command::new(BIN).arg("unmount").arg(&mnt).status().unwrap();
    assert!(st.success());
    // After unmount SQLite removes -wal; the others stay private. Loosen them all, as an
    // older scratchfs (or a umask 000 copy) would have left them: the next mount fixes them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::File::open(&mnt).is_ok_and(|_| std::fs::read_dir(&mnt).unwrap().next().is_some())
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for f in &files {
        if f.exists() {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    mount();
    std::fs::write(mnt.join("notes.md"), "more\n").unwrap();
    check("remounted");
    let st = Command::new(BIN).arg("unmount").arg(&mnt).status().unwrap();
    assert!(st.success());
}

/// Issue 10 item 3: a full disk at mount, in the foreground and with --background: a
/// clear message on the caller's stderr and exit status 1, never a panic (the daemon's
/// stderr is its log file, on the same full disk).
#[test]
fn a_full_disk_at_mount_is_reported_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let o = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&disk)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cannot mount a tmpfs (needs root): {o:?}"
    );
    struct Umount(std::path::PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _u = Umount(disk.clone());
    // Fill it.
    let _ = std::process::Command::new("dd")
        .args(["if=/dev/zero", "bs=4k"])
        .arg(format!("of={}", disk.join("fill").display()))
        .output();
    let db = disk.join("s.db");
    for background in [false, true] {
        let mut cmd = std::process::Command::new(BIN);
        cmd.arg("mount").arg(&mnt).arg("--db").arg(&db);
        if background {
            cmd.arg("--background");
        }
        let o = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "background {background}: {err}");
        assert!(
            err.contains("No space left on device") && err.contains(&db.display().to_string()),
            "background {background}: {err}"
        );
        assert!(
            !err.contains("panicked") && !err.contains("exit status"),
            "{err}"
        );
    }
}

/// Issue 10 item 3: while another process holds the database's write lock, a write that
/// must reach SQLite gets EBUSY after a bounded wait, and the daemon's log names the
/// process holding the lock.
#[test]
fn a_database_locked_by_another_process_gives_ebusy_and_names_the_holder() {
    let m = Mount::new();
    let flags = m.dir.path().join("flags");
    std::fs::create_dir(&flags).unwrap();
    let holder = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys, os, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute('BEGIN IMMEDIATE')
open(os.path.join(sys.argv[2], 'locked'), 'w').close()
while not os.path.exists(os.path.join(sys.argv[2], 'release')):
    time.sleep(0.05)
c.execute('ROLLBACK')",
        )
        .arg(&m.db)
        .arg(&flags)
        .spawn()
        .unwrap();
    wait_for("the other process to lock the database", || {
        flags.join("locked").exists()
    });
    // Over the redo log's limit: this commit goes to SQLite at once.
    let o = m.sh("head -c 1000000 /dev/urandom > big");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "the write succeeded while the database was locked"
    );
    assert!(err.contains("Device or resource busy"), "{err}");
    let log = read(m.dir.path().join("daemon.log"));
    assert!(
        log.contains(&format!("lock holders: pid {} (python3)", holder.id())),
        "{log}"
    );
    std::fs::write(flags.join("release"), "").unwrap();
    let mut holder = holder;
    holder.wait().unwrap();
    m.sh_ok("head -c 1000000 /dev/urandom > big2");
    assert_eq!(std::fs::metadata(m.path("big2")).unwrap().len(), 1_000_000);
}

/// Issue 10 item 3: a log file that cannot be written stops `mount --background` with a
/// message naming it, before anything is mounted.
#[test]
fn an_unwritable_log_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let db = dir.path().join("s.db");
    let log = dir.path().join("s.db.log");
    std::fs::create_dir(&log).unwrap();
    let o = std::process::Command::new(BIN)
        .arg("mount")
        .arg(&mnt)
        .arg("--db")
        .arg(&db)
        .arg("--background")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{}: Is a directory", log.display())),
        "{err}"
    );
    assert!(
        !std::process::Command::new("mountpoint")
            .arg("-q")
            .arg(&mnt)
            .status()
            .unwrap()
            .success()
    );
}

/// A name with `@` in it is a path, unless what follows the last `@` is a version number.
#[test]
fn an_at_sign_in_a_name_is_part_of_the_path() {
    let m = Mount::new();
    m.sh_ok("echo hi > 'notes@home.md' && echo a > f && echo b > f");
    assert_eq!(cli(&m, &["show", "notes@home.md"]).1, "hi\n");
    assert_eq!(cli(&m, &["show", "f@1"]).1, "a\n");
    let (code, _, err) = cli(&m, &["show", "f@x"]);
    assert_eq!(code, 1);
    assert!(err.contains("f@x: no such file"), "{err}");
    // `x@3` with no file `x`: the (deleted) file named `x@3`.
    m.sh_ok("echo deleted > 'x@3' && rm 'x@3'");
    assert_eq!(cli(&m, &["show", "x@3"]).1, "deleted\n");
    // `PATH@` is the current version.
    assert_eq!(cli(&m, &["show", "f@"]).1, "b\n");
    // Both `f` and a file `f@1`: `f@1` is version 1 of `f`, with a note naming the other
    // forms; `f@1@` and `f@1@N` name the file `f@1`, for show, diff and restore alike.
    m.sh_ok("echo one > 'f@1' && echo two > 'f@1'");
    let (code, out, err) = cli(&m, &["show", "f@1"]);
    assert_eq!((code, out.as_str()), (0, "a\n"), "{err}");
    assert!(
        err.contains("a file is named f@1 too: name it f@1@"),
        "{err}"
    );
    let (code, out, err) = cli(&m, &["show", "f@1@"]);
    assert_eq!((code, out.as_str(), err.as_str()), (0, "two\n", ""));
    assert_eq!(cli(&m, &["show", "f@1@1"]).1, "one\n");
    let (_, out, _) = cli(&m, &["diff", "f@1@1"]);
    assert!(out.contains("-one\n+two"), "{out}");
    let (code, _, err) = cli(&m, &["restore", "f@1@1"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(read(m.path("f@1")), "one\n");
    assert_eq!(read(m.path("f")), "b\n");
    // A file without a version is nothing to restore.
    let (code, _, err) = cli(&m, &["restore", "f@1@"]);
    assert_eq!(code, 1);
    assert!(err.contains("expected PATH@N"), "{err}");
}

/// `run` takes `--rules`, `--owner` and `--allow-other` as `mount` does: the rules are
/// enforced (and a rules file with errors refuses the run before CMD starts), the owner
/// gets the root and the default layout of a new database, and other users get in.
#[test]
fn run_takes_rules_owner_and_allow_other_like_mount() {
    let dir = tempfile::tempdir().unwrap();
    let run = |db: &str, args: &[&str], script: &str| {
        let o = Command::new(BIN)
            .arg("run")
            .arg("--db")
            .arg(dir.path().join(db))
            .args(args)
            .args(["--", "bash", "-c", script])
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{"paths": [{"path": "state.json", "format": "json"}, {"path": "**", "writers": ["*"]}]}"#,
    )
    .unwrap();
    let rules = rules.to_str().unwrap();
    let (code, out, err) = run(
        "r.db",
        &["--rules", rules],
        "/usr/bin/printf 'not json' > state.json; echo $?; cat state.json",
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "1\n{}\n", "the rules refused the write: {err}");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"paths": [{"path": "x", "mdoe": 1}]}"#).unwrap();
    let (code, out, err) = run("r.db", &["--rules", bad.to_str().unwrap()], "echo ran");
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    assert!(err.contains("unknown key \"mdoe\""), "{err}");
    // An owner other than the caller: the agent's uid owns the layout, writes it and is
    // let in (allow_other implied).
    let (code, out, err) = run(
        "o.db",
        &["--owner", "4242:4242"],
        "stat -c %u:%g . plan.md; setpriv --reuid 4242 --regid 4242 --clear-groups bash -c 'echo step >> plan.md && cat plan.md'",
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "4242:4242\n4242:4242\nstep\n");
    // --allow-other lets another uid read; without it the kernel keeps it out.
    let other = "setpriv --reuid 5000 --regid 5000 --clear-groups cat state.json";
    let (code, _, err) = run("a.db", &[], other);
    assert_eq!(code, Some(1), "without --allow-other: {err}");
    assert!(err.contains("Permission denied"), "{err}");
    let (code, out, err) = run("a.db", &["--allow-other"], other);
    assert_eq!((code, out.as_str()), (Some(0), "{}\n"), "{err}");
}

/// `rules check --json`: one object per problem with line, column, severity and message,
/// then a summary; the exit status is the same as without `--json`.
#[test]
fn rules_check_json_gives_one_object_per_problem_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("rules.json");
    let check = || {
        let o = Command::new(BIN)
            .args(["rules", "check", "--json"])
            .arg(&f)
            .output()
            .unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        (o.status.code(), lines)
    };
    std::fs::write(
        &f,
        "{\n  \"paths\": [\n    { \"path\": \"**\", \"writers\": [\"*\"], \"mdoe\": \"read-only\" }\n  ]\n}\n",
    )
    .unwrap();
    let (code, lines) = check();
    assert_eq!(code, Some(1), "{lines:?}");
    assert_eq!(lines.len(), 2, "{lines:?}");
    let p = &lines[0];
    assert_eq!(
        (&p["line"], &p["severity"], &p["file"]),
        (
            &serde_json::json!(3),
            &serde_json::json!("error"),
            &serde_json::json!(f.to_str().unwrap())
        ),
        "{p}"
    );
    assert!(p["column"].as_u64().unwrap() > 0, "{p}");
    assert!(
        p["message"]
            .as_str()
            .unwrap()
            .contains("unknown key \"mdoe\""),
        "{p}"
    );
    assert_eq!(
        lines[1],
        serde_json::json!({"file": f.to_str().unwrap(), "ok": false, "errors": 1,
            "warnings": 0, "writers": null, "paths": null})
    );
    std::fs::write(
        &f,
        r#"{"writers": {"agent": {"uid": 1000}}, "paths": [{"path": "**", "writers": ["agent"]}]}"#,
    )
    .unwrap();
    let (code, lines) = check();
    assert_eq!(code, Some(0), "{lines:?}");
    assert_eq!(
        lines,
        vec![
            serde_json::json!({"file": f.to_str().unwrap(), "ok": true, "errors": 0,
            "warnings": 0, "writers": 1, "paths": 1})
        ]
    );
}

/// `unmount` of a directory where no scratchfs is mounted says so, exit status 1, and
/// leaves another filesystem mounted there alone; a scratchfs mount named with a relative
/// path and a trailing slash is unmounted.
#[test]
fn unmount_refuses_what_is_not_a_scratchfs_mount() {
    let dir = tempfile::tempdir().unwrap();
    let unmount = |p: &str| {
        let o = Command::new(BIN)
            .args(["unmount", p])
            .current_dir(dir.path())
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    std::fs::create_dir(dir.path().join("plain")).unwrap();
    let (code, err) = unmount("plain");
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err,
        "scratchfs: unmount plain: not a scratchfs mount (nothing is mounted there)\n"
    );
    let (code, err) = unmount("missing");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("No such file or directory"), "{err}");
    let tmpfs = dir.path().join("t");
    std::fs::create_dir(&tmpfs).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "scratchfs-test"])
        .arg(&tmpfs)
        .status()
        .unwrap();
    assert!(st.success(), "cannot mount a tmpfs (needs root)");
    let (code, err) = unmount("t/");
    let still = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .contains(&format!(" {} ", tmpfs.display()));
    let _ = Command::new("umount").arg(&tmpfs).status();
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("not a scratchfs mount (a tmpfs filesystem is mounted there)"),
        "{err}"
    );
    assert!(still, "the tmpfs was unmounted");
    // A scratchfs mount: by a relative path with a trailing slash.
    let mut m = Mount::new();
    let o = Command::new(BIN)
        .args(["unmount", "mnt/"])
        .current_dir(m.dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    m.unmount_after_exit();
}

/// The minor device number of the FUSE mount at `mnt`: its connection's directory under
/// /sys/fs/fuse/connections (mounting the fusectl filesystem there if it is not).
fn fuse_connection(mnt: &std::path::Path) -> std::path::PathBuf {
    let conns = std::path::Path::new("/sys/fs/fuse/connections");
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    if !info.lines().any(|l| l.contains(" - fusectl ")) {
        let st = Command::new("mount")
            .args(["-t", "fusectl", "fusectl"])
            .arg(conns)
            .status()
            .unwrap();
        assert!(
            st.success(),
            "cannot mount fusectl on {} (needs root)",
            conns.display()
        );
    }
    let want = format!(" {} ", mnt.display());
    let line = info
        .lines()
        .find(|l| l.contains(&want) && l.contains(" - fuse"))
        .unwrap_or_else(|| panic!("{} is not mounted:\n{info}", mnt.display()));
    let dev = line.split(' ').nth(2).unwrap();
    conns.join(dev.split(':').nth(1).unwrap())
}

/// `mount` right after `kill -9` of the daemon, while one of its own requests is still
/// waiting on the dead connection: the kernel ends that request with ECONNABORTED
/// ("Software caused connection abort") rather than ENOTCONN, and the dead mount is
/// cleared all the same.
#[test]
fn a_mount_racing_a_killed_daemon_clears_it_on_econnaborted() {
    let mut m = Mount::new();
    m.sh_ok("echo kept > f");
    let waiting = fuse_connection(&m.mnt).join("waiting");
    let count = || {
        std::fs::read_to_string(&waiting)
            .map(|s| s.trim().parse::<u64>().unwrap_or(0))
            .unwrap_or(0)
    };
    // The kernel sends `echo`'s RELEASE after close(2) returns: it may still be waiting.
    wait_for("the connection to have no request waiting", || count() == 0);
    // A stopped daemon answers nothing: the new mount's look at the mountpoint waits.
    unsafe { libc::kill(m.daemon_pid() as i32, libc::SIGSTOP) };
    let log = m.dir.path().join("second.log");
    let mut second = Command::new(BIN)
        .arg("mount")
        .arg(&m.mnt)
        .arg("--db")
        .arg(&m.db)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for(
        "the second mount's request to wait on the stopped daemon",
        || {
            assert!(
                second.try_wait().unwrap().is_none(),
                "the second mount exited: {}",
                read(&log)
            );
            count() > 0
        },
    );
    // Killed: the connection is aborted and the waiting request ends with ECONNABORTED.
    m.kill9();
    wait_for("the second mount to answer", || {
        if let Some(st) = second.try_wait().unwrap() {
            panic!("the second mount exited with {st}: {}", read(&log));
        }
        m.path("MANIFEST").exists()
    });
    assert_eq!(read(m.path("f")), "kept\n");
    let st = Command::new(BIN)
        .arg("unmount")
        .arg(&m.mnt)
        .status()
        .unwrap();
    assert!(st.success());
    assert!(second.wait().unwrap().success(), "{}", read(&log));
}

/// `restore PATH@N` of a deleted file makes it again (continuing its lineage) and
/// restores version N, mounted or not (helper finding: "no such file or version"); a
/// version that is not there makes nothing.
#[test]
fn restore_brings_back_a_deleted_file() {
    let mut m = Mount::new();
    m.sh_ok("echo one > gone.md && echo two > gone.md && rm gone.md");
    let (code, _, err) = cli(&m, &["restore", "gone.md@1"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(read(m.path("gone.md")), "one\n");
    // Again: it holds those bytes already, and says so rather than "restored".
    let (code, out, err) = cli(&m, &["restore", "gone.md@1"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("holds the bytes of version 1 already"),
        "{out}"
    );
    m.sh_ok("rm gone.md");
    m.unmount();
    let (code, _, err) = cli(&m, &["restore", "gone.md@2"]);
    assert_eq!(code, 0, "{err}");
    m.start();
    assert_eq!(read(m.path("gone.md")), "two\n");
    let history = cli(&m, &["history", "gone.md"]).1;
    assert!(history.contains("restore"), "{history}");
    m.sh_ok("rm gone.md");
    let (code, _, err) = cli(&m, &["restore", "gone.md@99"]);
    assert_eq!(code, 1);
    assert!(err.contains("no such version"), "{err}");
    assert!(!m.path("gone.md").exists());
}

/// A mount the kernel refuses (a user other than root without access to /dev/fuse)
/// leaves no new empty scratchpad behind (helper finding: the database, its -wal, -shm and
/// redo log stayed); a database that was there before stays as it was.
#[test]
fn a_refused_mount_leaves_no_new_database_and_keeps_an_old_one() {
    let dir = tempfile::Builder::new()
        .prefix("scratchfs-test-")
        .tempdir()
        .unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    for p in [dir.path(), mnt.as_path()] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    }
    // The conditions this test asserts, made here rather than assumed of the machine: on
    // stock Debian uid 1000 may mount FUSE (/dev/fuse 0666, fusermount3 set-uid root). The
    // attempt runs in a mount namespace of its own where /dev/fuse and every fusermount in
    // PATH are an unreadable, unexecutable file, so the kernel refuses uid 1000 whatever the
    // machine allows; the namespace and its mounts end with the command.
    let blocked = tempfile::tempdir().unwrap();
    let blocker = blocked.path().join("blocked");
    std::fs::write(&blocker, b"").unwrap();
    std::fs::set_permissions(
        &blocker,
        std::os::unix::fs::PermissionsExt::from_mode(0o000),
    )
    .unwrap();
    let mut hide = format!("mount --bind {} /dev/fuse", blocker.display());
    for d in std::env::var("PATH").unwrap_or_default().split(':') {
        for name in ["fusermount3", "fusermount"] {
            let p = std::path::Path::new(d).join(name);
            if p.exists() {
                hide += &format!(" && mount --bind {} {}", blocker.display(), p.display());
            }
        }
    }
    let mount_as_agent = |db: &std::path::Path, background: bool| {
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!("{hide} && exec \"$@\""))
            .args([
                "sh",
                "setpriv",
                "--reuid",
                "1000",
                "--regid",
                "1000",
                "--clear-groups",
                BIN,
                "mount",
            ])
            .arg(&mnt)
            .arg("--db")
            .arg(db);
        if background {
            cmd.arg("--background");
        }
        let o = output_within(
            "a mount the agent may not make",
            &mut cmd,
            std::time::Duration::from_secs(120),
        );
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_ne!(o.status.code(), Some(0), "the agent mounted: {err}");
        assert!(err.contains("Permission denied"), "{err}");
    };
    let left = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "mnt")
            .collect();
        names.sort();
        names
    };
    for background in [false, true] {
        mount_as_agent(&dir.path().join("new.db"), background);
        assert_eq!(left(), Vec::<String>::new(), "background {background}");
    }
    // One the agent made before (as root would, with --owner): kept, rows and all.
    let old = dir.path().join("old.db");
    let (store, _) = scratchfs::store::Sqlite::open(&old, (1000, 1000)).unwrap();
    drop(store);
    for name in left() {
        std::os::unix::fs::chown(dir.path().join(name), Some(1000), Some(1000)).unwrap();
    }
    mount_as_agent(&old, false);
    assert!(left().contains(&"old.db".to_string()), "{:?}", left());
    let (store, fresh) = scratchfs::store::Sqlite::open(&old, (0, 0)).unwrap();
    assert!(!fresh, "the old database lost its rows");
    drop(store);
}

#[test]
fn the_daemon_raises_its_open_files_limit_to_the_hard_one() {
    // Started with a soft limit of 256 open files: it holds a file per spilled write
    // handle and up to 256 callers' /proc/PID/stat, so it raises the soft limit itself.
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    /// The daemon, unmounted and ended when the test ends, passed or not.
    struct Daemon(std::process::Child, std::path::PathBuf);
    impl Drop for Daemon {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.1).status();
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let daemon = Daemon(
        Command::new("sh")
            .arg("-c")
            .arg(r#"ulimit -Sn 256 && exec "$0" mount "$1" --db "$2""#)
            .arg(BIN)
            .arg(&mnt)
            .arg(dir.path().join("s.db"))
            .spawn()
            .unwrap(),
        mnt.clone(),
    );
    common::wait_for("the mount", || mnt.join("state.json").exists());
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", daemon.0.id())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("no open files limit in {limits}"));
    let n: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert!(
        n[1] == "unlimited" || n[1].parse::<u64>().unwrap() > 256,
        "the hard limit must be above 256 for this test to tell anything: {line}"
    );
    assert_eq!(n[0], n[1], "soft limit not raised to the hard one: {line}");
    let st = Command::new(BIN).arg("unmount").arg(&mnt).status().unwrap();
    assert!(st.success());
}

/// Issue 33 item 7: a `--db` whose directory does not exist is a typo, not a new
/// scratchpad: `mount`, `mcp` and `log` refuse it, naming the path, and make nothing.
#[test]
fn a_database_in_a_missing_directory_is_refused_and_nothing_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("typo/s.db");
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    for args in [
        vec!["mount", mnt.to_str().unwrap()],
        vec!["mcp"],
        vec!["log"],
    ] {
        // A refusal is at once; a mount made there would serve until killed.
        let o = output_within(
            &format!("{args:?}"),
            Command::new(BIN)
                .args(&args)
                .arg("--db")
                .arg(&db)
                .stdin(std::process::Stdio::null()),
            std::time::Duration::from_secs(60),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&*dir.path().join("typo").to_string_lossy())
                && err.contains("No such file"),
            "{args:?}: {err}"
        );
        assert!(
            !dir.path().join("typo").exists(),
            "{args:?} made the directory"
        );
    }
}

/// Issue 33 item 7: `scratchfs unmount` returns once the daemon has let go of its
/// database, so that a command right after it finds the database free. The daemon is made
/// slow to let go (failpoint `teardown`: 2 s after its session ends).
#[test]
fn unmount_returns_once_the_daemon_let_go_of_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let flag = dir.path().join("flag");
    let mut daemon = KillOnDrop(
        Command::new(BIN)
            .arg("mount")
            .arg(&mnt)
            .arg("--db")
            .arg(&db)
            .env("SCRATCHFS_FAILPOINT", "teardown")
            .env("SCRATCHFS_FAILPOINT_FLAG", &flag)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the mount", || mnt.join("MANIFEST").exists());
    std::fs::write(mnt.join("note.md"), "kept\n").unwrap();
    let st = Command::new(BIN).arg("unmount").arg(&mnt).status().unwrap();
    assert!(st.success());
    assert!(
        flag.exists(),
        "the daemon did not pass its teardown failpoint"
    );
    // Free at once: a lock no one holds is taken without waiting.
    let o = Command::new("flock")
        .args(["-n", "-x"])
        .arg(&db)
        .arg("true")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "the database is still held right after unmount returned: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = daemon.0.wait();
    let (code, out, err) = {
        let o = Command::new(BIN)
            .args(["log", "--db"])
            .arg(&db)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("note.md"), "{out}");
}

/// Issue 33 item 4: `scratchfs grep PATTERN [PATH]` prints `PATH:LINE:TEXT` as `grep -rn`
/// would, through the mount's daemon while mounted and on the database itself after;
/// exit 0 with matches, 1 with none; `--json` is the `search` tool's structured result.
#[test]
fn grep_searches_the_live_files_mounted_or_not() {
    let mut m = Mount::new();
    m.sh_ok("mkdir -p notes && printf 'a\\nTotal 42\\n' > notes/a.md && printf '42\\n' > b.txt");
    let (code, out, err) = cli(&m, &["grep", "42"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "b.txt:1:42\nnotes/a.md:2:Total 42\n");
    let (code, out, _) = cli(&m, &["grep", "-i", "total", "notes/**"]);
    assert_eq!(code, 0);
    assert_eq!(out, "notes/a.md:2:Total 42\n");
    let (code, out, _) = cli(&m, &["grep", "nothing-here"]);
    assert_eq!((code, out.as_str()), (1, ""));
    m.unmount();
    let (code, out, err) = cli(&m, &["grep", "--json", "-E", "^\\d+$"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["matches"][0]["path"], "b.txt", "{v}");
    assert_eq!(v["matches"].as_array().unwrap().len(), 1, "{v}");
    let (code, _, err) = cli(&m, &["grep", "-E", "("]);
    assert_eq!(code, 1);
    assert!(err.contains("regex parse error"), "{err}");
}

/// Issue 33 item 4: a search for a literal of 3 characters or more asks the text index and
/// reads only the files it names and the files changed since it was last brought up to
/// date (`files_searched`), and follows every change: a rewrite, a rename, an unlink, a
/// rollback, a bulk import, a remount; mounted and on the database.
#[test]
fn grep_asks_the_text_index_and_follows_every_change() {
    let mut m = Mount::new();
    m.sh_ok("for i in $(seq 40); do echo \"filler line $i\" > f$i.md; done; echo 'x needle-alpha y' > f7.md");
    let grep = |m: &Mount, args: &[&str]| -> (Vec<String>, u64) {
        let mut all = vec!["grep", "--json"];
        all.extend_from_slice(args);
        let (_, out, err) = cli(m, &all);
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
        let found = v["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| format!("{}:{}", x["path"].as_str().unwrap(), x["line"]))
            .collect();
        (found, v["files_searched"].as_u64().unwrap())
    };
    let (found, _) = grep(&m, &["needle-alpha"]);
    assert_eq!(found, ["f7.md:1"]);
    let (found, read) = grep(&m, &["needle-alpha"]);
    assert_eq!(
        (found.as_slice(), read),
        (&["f7.md:1".to_string()][..], 1),
        "the index named one file"
    );
    // A rewrite: the old text no longer found, the new found; the changed files are read.
    m.sh_ok("echo 'gone now' > f7.md && echo 'second needle-alpha' > f9.md");
    let (found, read) = grep(&m, &["needle-alpha"]);
    assert_eq!((found.as_slice(), read), (&["f9.md:1".to_string()][..], 2));
    assert_eq!(grep(&m, &["needle-alpha"]).1, 1);
    // Case ignored, and a regular expression that begins with a literal.
    assert_eq!(grep(&m, &["-i", "NEEDLE-ALPHA"]).0, ["f9.md:1"]);
    let (found, read) = grep(&m, &["-E", "needle-a[a-z]+"]);
    assert_eq!((found.as_slice(), read), (&["f9.md:1".to_string()][..], 1));
    // A rename, an unlink, a rollback to before the unlink.
    m.sh_ok("mkdir sub && mv f9.md sub/g9.md");
    assert_eq!(grep(&m, &["needle-alpha"]).0, ["sub/g9.md:1"]);
    m.sh_ok(&format!(
        "setfattr -n user.scratchfs.checkpoint -v before-rm {}",
        m.mnt.display()
    ));
    m.sh_ok("rm sub/g9.md");
    assert!(grep(&m, &["needle-alpha"]).0.is_empty());
    m.sh_ok(&format!(
        "setfattr -n user.scratchfs.rollback -v before-rm {}",
        m.mnt.display()
    ));
    assert_eq!(grep(&m, &["needle-alpha"]).0, ["sub/g9.md:1"]);
    // A bulk import (more changed files than a search reads whole) is indexed first.
    m.sh_ok("mkdir bulk && for i in $(seq 300); do echo \"bulk $i\" > bulk/b$i.md; done; echo 'bulk needle-beta' >> bulk/b150.md");
    let (found, read) = grep(&m, &["needle-beta"]);
    assert_eq!(
        (found.as_slice(), read),
        (&["bulk/b150.md:2".to_string()][..], 1)
    );
    // Remounted, and on the database itself: the index is the database's.
    m.unmount();
    let (found, read) = grep(&m, &["needle-alpha"]);
    assert_eq!(
        (found.as_slice(), read),
        (&["sub/g9.md:1".to_string()][..], 1)
    );
    m.restart_with(&[]);
    m.sh_ok("echo 'third needle-alpha' > f1.md");
    assert_eq!(grep(&m, &["needle-alpha"]).0, ["f1.md:1", "sub/g9.md:1"]);
}

/// Issue 33 item 4: `grep --history` (the `search` tool's `history: true`) searches every
/// version of the live files: each matching line once, at the first version that held it,
/// with its writer and time; an appended version is searched in what it added. (A version
/// the caller may not read: `search_glob_delete_and_move_as_uid_1000...` in tests/mcp.rs.)
#[test]
fn grep_history_finds_where_each_line_came_in() {
    let m = Mount::new();
    m.sh_ok(
        "echo 'total: 1' > n.md && echo 'total: 2' > n.md && echo 'other' >> n.md \
         && echo 'total: 3' >> n.md && echo 'no number' > n.md && echo 'total: 9' > o.md",
    );
    let (code, out, err) = cli(&m, &["grep", "--history", "--json", "total: "]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let got: Vec<String> = v["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            format!(
                "{}@{}:{}:{}",
                x["path"].as_str().unwrap(),
                x["version"],
                x["line"],
                x["text"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            "n.md@1:1:total: 1",
            "n.md@2:1:total: 2",
            "n.md@4:3:total: 3",
            "o.md@1:1:total: 9"
        ],
        "{v}"
    );
    assert!(
        v["matches"][0]["writer"]
            .as_str()
            .unwrap()
            .contains("anonymous"),
        "{v}"
    );
    assert!(v["matches"][0]["time_ns"].as_i64().unwrap() > 0, "{v}");
    // Without --history: only the current versions.
    let (_, out, _) = cli(&m, &["grep", "total: "]);
    assert_eq!(out, "o.md:1:total: 9\n");
    // The text form names the version, the writer and the time.
    let (_, out, _) = cli(&m, &["grep", "--history", "total: 3"]);
    assert!(out.starts_with("n.md@v4:3:total: 3  [anonymous"), "{out}");
}

/// Issue 33 item 4: `grep --history` for a literal asks the history index and reads only
/// the files and versions it names (`files_searched`), finding what the unindexed search
/// finds (a pattern that begins anywhere, `.*`, reads every version): in an appended log
/// (indexed from the line each version continues), in a file rewritten, after more
/// appends, after a gc (whose forgotten versions leave no row), remounted.
#[test]
fn grep_history_asks_the_history_index_and_finds_what_a_full_read_finds() {
    let mut m = Mount::new();
    m.sh_ok(
        "for i in $(seq 30); do echo \"filler $i\" > f$i.md; echo \"more $i\" >> f$i.md; done; \
         for i in $(seq 40); do echo \"step $i ok\" >> log.txt; done; \
         echo 'step 41 hit-omega' >> log.txt; for i in $(seq 42 60); do echo \"step $i ok\" >> log.txt; done; \
         printf 'half a line hit-om' >> log.txt; printf 'ega done\\n' >> log.txt; \
         echo 'v1' > s.md; echo 'v2 hit-omega' > s.md; echo 'v3' > s.md; echo 'v4 hit-omega' > s.md",
    );
    let grep = |m: &Mount, pattern: &str| -> (Vec<String>, u64) {
        let (code, out, err) = cli(m, &["grep", "--history", "--json", "-E", pattern]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
        let found = v["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                format!(
                    "{}@{}:{}:{}",
                    x["path"].as_str().unwrap(),
                    x["version"],
                    x["line"],
                    x["text"].as_str().unwrap()
                )
            })
            .collect();
        (found, v["files_searched"].as_u64().unwrap())
    };
    let expect = |m: &Mount, files: u64| {
        let (all, read_all) = grep(m, ".*hit-omega");
        assert!(
            read_all >= 32,
            "the unindexed search reads every file: {read_all}"
        );
        let (indexed, read) = grep(m, "hit-omega");
        assert_eq!(indexed, all, "the index found what a full read finds");
        assert_eq!(read, files, "the files the index named");
        all
    };
    assert_eq!(
        expect(&m, 2),
        [
            "log.txt@41:41:step 41 hit-omega",
            "log.txt@62:61:half a line hit-omega done",
            "s.md@2:1:v2 hit-omega",
            "s.md@4:1:v4 hit-omega",
        ]
    );
    // More versions after the index was made: an append, a rewrite, a new file.
    m.sh_ok(
        "echo 'step 62 hit-omega again' >> log.txt; echo 'v5 hit-omega x' > s.md; \
         echo 'new hit-omega' > new.md",
    );
    let found = expect(&m, 3);
    assert!(
        found.contains(&"new.md@1:1:new hit-omega".to_string()),
        "{found:?}"
    );
    assert!(
        found.contains(&"log.txt@63:62:step 62 hit-omega again".to_string()),
        "{found:?}"
    );
    assert!(
        found.contains(&"s.md@5:1:v5 hit-omega x".to_string()),
        "{found:?}"
    );
    // gc forgets versions: the index keeps no row of them, and finds what is left.
    let (code, _, err) = cli(&m, &["gc", "--keep-last", "3"]);
    assert_eq!(code, 0, "{err}");
    let stale = m.sql(
        "SELECT COUNT(*) FROM history_indexed WHERE version_id NOT IN (SELECT id FROM versions)",
    );
    assert_eq!(stale.trim(), "0", "rows of versions gc forgot");
    let found = expect(&m, 3);
    assert!(
        found.contains(&"s.md@5:1:v5 hit-omega x".to_string()),
        "{found:?}"
    );
    assert!(
        !found.iter().any(|f| f.starts_with("log.txt@41:")),
        "the log's version 41 is forgotten: {found:?} {}",
        m.sql("SELECT path, version FROM versions WHERE path = 's.md'")
    );
    // Remounted: the index is the database's.
    m.unmount();
    m.restart_with(&[]);
    m.sh_ok("echo 'step 63 hit-omega last' >> log.txt");
    let found = expect(&m, 3);
    assert!(
        found.contains(&"log.txt@64:63:step 63 hit-omega last".to_string()),
        "{found:?}"
    );
}

/// Issue 33 item 4, the history index's size (helper finding of session 24: each of 300
/// one-byte truncations of a 1 MB file was indexed whole, 4 MB of index a version, and a
/// planted 1 MiB of random text held every commit 4 to 10 s while FTS5 indexed it): a
/// truncation within the last line indexes that line only, and a version's part over 64
/// KiB is not indexed (every history search reads it); the index still finds what a full
/// read finds.
#[test]
fn the_history_index_holds_no_copy_per_truncation_nor_a_large_version() {
    let m = Mount::new();
    m.sh_ok(
        "seq -f 'line %05g abcdefghijklmnopqrstuvwxyz abcdefghijklmnopqrstuvwxyz abcdefghijklmnopqrst' \
         1 400 > t.txt && for i in $(seq 30); do truncate -s -1 t.txt; done && \
         head -c 200000 /dev/urandom | base64 -w100 > big.txt && echo 'line 00400 elsewhere' >> big.txt",
    );
    let text = std::fs::read_to_string(m.path("t.txt")).unwrap();
    assert_eq!(
        text.len(),
        400 * 86 - 30,
        "the test makes the file it means to"
    );
    let grep = |pattern: &str| {
        let (code, out, err) = cli(&m, &["grep", "--history", "--json", "-E", pattern]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["matches"].clone()
    };
    let indexed = grep("line 00400");
    assert_eq!(
        indexed,
        grep(".*line 00400"),
        "the index finds what a full read finds"
    );
    assert!(
        indexed.as_array().unwrap().len() >= 30,
        "each cut of the last line is a line of its own: {indexed}"
    );
    let body: i64 = m
        .sql("SELECT COALESCE(SUM(LENGTH(body)), 0) FROM history_index")
        .trim()
        .parse()
        .unwrap();
    // The file whole twice (its first version, and the first truncation, which cuts the
    // last newline: a cut before the last line's start reads the version whole), then
    // each cut line once: 30 x 85.
    assert!(
        body < 75_000,
        "indexed text: {body} bytes for one 34,400-byte file, 30 truncations and a large file"
    );
    assert_eq!(
        m.sql("SELECT COUNT(*) FROM history_indexed WHERE kind = 1")
            .trim(),
        "1",
        "big.txt's version is read by every search, not indexed"
    );
}

/// Issue 33 item 9: a command that cannot find its database says what to do: give
/// `--db` or `SCRATCHFS_DB`, or, standing in a mount, that mount's database; `--db`
/// naming a mountpoint names the database the mount serves.
#[test]
fn a_database_not_found_says_where_to_look() {
    let m = Mount::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let run = |dir: &std::path::Path, args: &[&str]| {
        let o = Command::new(BIN)
            .args(args)
            .current_dir(dir)
            .env_remove("SCRATCHFS_DB")
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(elsewhere.path(), &["log"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("give the database with --db FILE, or set SCRATCHFS_DB"),
        "{err}"
    );
    if !on_postgres() {
        let db = m.db.display().to_string();
        let (code, err) = run(&m.mnt, &["log"]);
        assert_eq!(code, Some(1));
        assert!(
            err.contains(&format!(
                "this directory is in the mount at {}",
                m.mnt.display()
            )) && err.contains(&format!("--db {db}")),
            "{err}"
        );
        let mnt = m.mnt.display().to_string();
        let (code, err) = run(elsewhere.path(), &["log", "--db", &mnt]);
        assert_eq!(code, Some(1));
        assert!(
            err.contains(&format!(
                "{mnt} is a mountpoint, not a database: the database it serves is {db}"
            )),
            "{err}"
        );
    } else {
        // A PostgreSQL mount's source is the URL's display name, not a file: the hint
        // for a mountpoint still says it is one.
        let mnt = m.mnt.display().to_string();
        let (code, err) = run(elsewhere.path(), &["log", "--db", &mnt]);
        assert_eq!(code, Some(1));
        assert!(
            err.contains(&format!("{mnt} is a mountpoint, not a database")),
            "{err}"
        );
    }
}

/// Issue 33 item 9: `mount --owner` on an existing scratchpad whose root another owner
/// holds is refused, saying whose it is and how to change it (it changed nothing and said
/// nothing); the same owner again, or no `--owner`, mounts.
#[test]
fn owner_on_an_existing_scratchpad_of_another_owner_is_refused_loudly() {
    let mut m = Mount::new();
    m.sh_ok("echo kept > a.md");
    m.unmount();
    let other = tempfile::tempdir().unwrap();
    let mount = |extra: &[&str]| {
        Command::new(BIN)
            .arg("mount")
            .arg(&m.mnt)
            .arg("--db")
            .arg(&m.db)
            .arg("--background")
            .args(extra)
            .current_dir(other.path())
            .output()
            .unwrap()
    };
    let o = mount(&["--owner", "1000:1000"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("already exists and its root is owned by 0:0")
            && err.contains(&format!("chown 1000:1000 {}", m.mnt.display())),
        "{err}"
    );
    assert!(!m.mnt.join("a.md").exists(), "mounted anyway");
    let o = mount(&["--owner", "0:0"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(read(m.mnt.join("a.md")), "kept\n");
    let st = Command::new(BIN)
        .arg("unmount")
        .arg(&m.mnt)
        .status()
        .unwrap();
    assert!(st.success());
}
