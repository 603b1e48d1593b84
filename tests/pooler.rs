//! Daemons through a pooler in transaction mode (issue 34 item 3; src/store/postgres/
//! pooler.rs): PgBouncer (`scripts/pg start` runs it, `pool_mode = transaction`, 2 server
//! sessions per database and role) in front of the tests' server, the daemons' URL with
//! `pooler=transaction` and the server's own port for their listeners. Eight daemons
//! share two server sessions and lose no line; two scratchpads share them and see only
//! their own; and what the next client of a server session finds there is nothing of
//! theirs: no prepared statement, no setting, no temporary table. Bad pooler parameters
//! are refused, saying which, with nothing created.
//!
//! Needs `SCRATCHFS_PG_URL` and `SCRATCHFS_PG_POOLER_URL` (`scripts/pg url --pooler`);
//! fails, never skips, without them. Nothing waits a fixed time: each check polls for
//! what it expects until a generous deadline.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::Mount;

/// A database of the tests' server, dropped at the end of the test: its direct URL and
/// its URL through the pooler.
struct Db {
    direct: String,
    pooled: String,
}

impl Db {
    fn new() -> Db {
        let direct = common::new_pg_database();
        let pooled = common::pg_url_of(&common::pg_pooler_url(), common::pg_database_of(&direct));
        Db { direct, pooled }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        common::drop_pg_database(&self.direct);
    }
}

/// Polls `f` until it returns `Some`, for at most 60 s (a loaded machine), then fails
/// naming `what`.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "within 60 s: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs each bash `script` in its mount's directory, all at once, and waits for them:
/// every one must succeed.
fn run_writers<'m>(jobs: impl IntoIterator<Item = (&'m Mount, String)>) {
    let writers: Vec<_> = jobs
        .into_iter()
        .map(|(m, script)| {
            Command::new("bash")
                .arg("-c")
                .arg(script)
                .current_dir(&m.mnt)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut w in writers {
        assert!(w.wait().unwrap().success(), "a writer failed");
    }
}

/// The server sessions of `db` but the caller's: `(listeners, others)`. A daemon's
/// listener names itself (`application_name` `scratchfs ...`); the others are the
/// pooler's server sessions.
fn sessions(db: &Db) -> (i64, i64) {
    let out = common::pg_query(
        &db.direct,
        "SELECT COUNT(*) FILTER (WHERE application_name LIKE 'scratchfs%'),
                COUNT(*) FILTER (WHERE application_name NOT LIKE 'scratchfs%')
         FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
    );
    let f: Vec<i64> = out.trim().split('|').map(|x| x.parse().unwrap()).collect();
    (f[0], f[1])
}

#[test]
fn eight_daemons_through_a_transaction_pooler_share_two_sessions_and_lose_no_line() {
    const DAEMONS: usize = 8;
    const LINES: usize = 200;
    let db = Db::new();
    let mounts: Vec<Mount> = (0..DAEMONS).map(|_| Mount::on_db(&db.pooled)).collect();
    std::fs::write(mounts[0].path("log.txt"), "").unwrap();
    for m in &mounts[1..] {
        wait_for(
            "log.txt everywhere (a namespace change reaches every listener)",
            || m.path("log.txt").exists().then_some(()),
        );
    }
    // 8 daemons x 2 writers, each line its own open, append and close.
    run_writers(mounts.iter().enumerate().flat_map(|(d, m)| {
        (0..2).map(move |w| {
            (
                m,
                format!(
                    "for i in $(seq 1 {LINES}); do echo \"d{d} w{w} $i\" >> log.txt || exit 1; done"
                ),
            )
        })
    }));
    let mut expected: Vec<String> = (0..DAEMONS)
        .flat_map(|d| (0..2).flat_map(move |w| (1..=LINES).map(move |i| format!("d{d} w{w} {i}"))))
        .collect();
    expected.sort();
    for m in &mounts {
        let text = wait_for("every line on every daemon", || {
            let t = std::fs::read_to_string(m.path("log.txt")).ok()?;
            (t.lines().count() >= DAEMONS * 2 * LINES).then_some(t)
        });
        let mut got: Vec<String> = text.lines().map(str::to_string).collect();
        got.sort();
        assert_eq!(got, expected, "every line once, none lost");
    }
    // A lost update across daemons is still refused (the lock of a lineage row is taken
    // in the transaction, which the pooler keeps on one server session).
    std::fs::write(mounts[0].path("state.json"), "{\"n\": 1}").unwrap();
    wait_for("state.json v2 on the second daemon", || {
        (std::fs::read_to_string(mounts[1].path("state.json")).ok()? == "{\"n\": 1}").then_some(())
    });
    // 16 clients of the pooler, 2 server sessions of it, a direct listener per daemon.
    let (listeners, pooled) = sessions(&db);
    assert_eq!(listeners, DAEMONS as i64, "a listener per daemon, direct");
    assert!(
        (1..=2).contains(&pooled),
        "{pooled} server sessions for the daemons' statements (default_pool_size 2)"
    );
    // Version numbers gap-free and ordered: the commits took their locks as without it.
    let f: Vec<i64> = common::pg_query(
        &db.direct,
        "SELECT COUNT(*), MIN(version), MAX(version) FROM versions WHERE path = 'log.txt'",
    )
    .trim()
    .split('|')
    .map(|x| x.parse().unwrap())
    .collect();
    assert_eq!(f[0], f[2], "versions {f:?}");
    assert_eq!(f[1], 1);
}

/// What the agent (uid 1000, `psql` through the pooler as the daemons' role) finds on
/// each of the pool's two server sessions: prepared statements, the settings the daemons
/// set, and temporary tables, as text, a line per session. Two clients each hold a
/// session in a transaction while the other asks (they take turns through files), so
/// both sessions are seen. `psql` sends simple-query messages only.
fn what_the_next_client_finds(pooled_plain: &str) -> Vec<String> {
    let check = "SELECT (SELECT COUNT(*) FROM pg_prepared_statements) || ' prepared, ' || \
                 'search_path ' || current_setting('search_path') || ', ' || \
                 'lock_timeout ' || current_setting('lock_timeout') || ', ' || \
                 'synchronous_commit ' || current_setting('synchronous_commit') || ', ' || \
                 (SELECT COUNT(*) FROM pg_class \
                   WHERE relpersistence = 't' AND pg_table_is_visible(oid)) || ' temporary, ' || \
                 'backend ' || pg_backend_pid();";
    on_each_session(pooled_plain, check)
}

/// Runs `sql` (statements ending in `;`) as uid 1000 with `psql` through the pooler, in a
/// transaction on each of the pool's two server sessions at once (two clients, each
/// holding its session until the other has run it), then commits; what it printed, a
/// line per row. What `sql` sets for the session (`SET` without `LOCAL`, `PREPARE`,
/// temporary tables) stays on both sessions.
fn on_each_session(pooled_plain: &str, check: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let d = dir.path().display();
    // Each waits for the other's file for at most 60 s.
    let wait =
        |f: &str| format!("\\! for i in $(seq 6000); do [ -e {d}/{f} ] && break; sleep 0.01; done");
    let first = format!("BEGIN;\n{check}\n\\! touch {d}/a\n{}\nCOMMIT;\n", wait("b"));
    let second = format!("{}\nBEGIN;\n{check}\n\\! touch {d}/b\nCOMMIT;\n", wait("a"));
    let spawn = |script: String| {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            "1000",
            "--regid",
            "1000",
            "--clear-groups",
            "psql",
        ])
        .args([
            pooled_plain,
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
        ])
        .env("HOME", "/nonexistent")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().expect("psql (postgresql-client) as uid 1000");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        child
    };
    let a = spawn(first);
    let b = spawn(second);
    let mut out = Vec::new();
    for child in [a, b] {
        let o = child.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "psql as uid 1000: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        out.extend(
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_owned),
        );
    }
    out
}

#[test]
fn scratchpads_sharing_a_pools_sessions_see_only_their_own_and_leave_nothing_there() {
    let db = Db::new();
    // Two scratchpads of one role, created and used through the pooler: their
    // transactions take turns on the same two server sessions.
    let mut urls = Vec::new();
    for pad in ["pa", "pb"] {
        let o = common::output_within(
            "scratchfs pads create",
            Command::new(common::BIN).args(["pads", "create", pad, "--db", &db.pooled]),
            Duration::from_secs(60),
        );
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "{out} {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let url = out
            .split('\'')
            .nth(1)
            .unwrap_or_else(|| panic!("no URL in {out}"))
            .to_owned();
        assert!(
            url.contains("pooler=transaction") && url.contains("search_path%3D"),
            "{url}"
        );
        urls.push(url);
    }
    let a = Mount::on_db(&urls[0]);
    let b = Mount::on_db(&urls[1]);
    run_writers([(&a, "a"), (&b, "b")].into_iter().map(|(m, who)| {
        (
            m,
            format!(
                "for i in $(seq 1 150); do echo \"{who} $i\" >> log.txt || exit 1; \
                 echo \"{who} $i\" > last.txt || exit 1; done"
            ),
        )
    }));
    for (m, who, other) in [(&a, "a", "b"), (&b, "b", "a")] {
        let log = std::fs::read_to_string(m.path("log.txt")).unwrap();
        let want: Vec<String> = (1..=150).map(|i| format!("{who} {i}")).collect();
        assert_eq!(
            log.lines().collect::<Vec<_>>(),
            want,
            "{who}'s log, only its own"
        );
        assert_eq!(
            std::fs::read_to_string(m.path("last.txt")).unwrap(),
            format!("{who} 150\n")
        );
        let history = std::fs::read_dir(m.path(".history/last.txt"))
            .unwrap()
            .count();
        assert_eq!(history, 150, "{who}: its own versions only");
        assert!(
            !log.contains(&format!("{other} ")),
            "{other}'s lines in {who}'s pad"
        );
    }
    // Temporary tables (gc's) and a checkpoint's exclusive lock through the pooler too.
    let gc = common::output_within(
        "scratchfs gc",
        Command::new(common::BIN).args(["gc", "--keep-last", "2", "--db", &urls[0]]),
        Duration::from_secs(60),
    );
    assert!(
        gc.status.success() && String::from_utf8_lossy(&gc.stdout).contains("deleted"),
        "{} {}",
        String::from_utf8_lossy(&gc.stdout),
        String::from_utf8_lossy(&gc.stderr)
    );
    let versions = common::pg_query(
        &db.direct,
        "SELECT COUNT(*) FROM pa.versions WHERE path = 'last.txt'",
    );
    assert_eq!(
        versions.trim(),
        "2",
        "gc kept the newest 2 of pa's last.txt"
    );
    let versions = common::pg_query(
        &db.direct,
        "SELECT COUNT(*) FROM pb.versions WHERE path = 'last.txt'",
    );
    assert_eq!(versions.trim(), "150", "pb untouched by pa's gc");
    let cp = common::output_within(
        "scratchfs checkpoint",
        Command::new(common::BIN).args(["checkpoint", "cp1", "--db", &urls[1]]),
        Duration::from_secs(60),
    );
    assert!(
        cp.status.success(),
        "{}",
        String::from_utf8_lossy(&cp.stderr)
    );
    wait_for("the checkpoint on pb's mount", || {
        b.path(".checkpoints/cp1/last.txt").exists().then_some(())
    });
    assert!(
        !a.path(".checkpoints/cp1").exists(),
        "pb's checkpoint in pa"
    );
    // No temporary table of any session is left on the server.
    let temporary = common::pg_query(
        &db.direct,
        "SELECT COUNT(*) FROM pg_class WHERE relpersistence = 't'",
    );
    assert_eq!(temporary.trim(), "0", "temporary tables left on the server");
    drop(a);
    drop(b);
    // The next client of each server session finds nothing of the daemons'.
    let plain = plain_pooler_url(&db);
    let found = what_the_next_client_finds(&plain);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_ne!(
        found[0].rsplit(' ').next(),
        found[1].rsplit(' ').next(),
        "two server sessions: {found:?}"
    );
    for f in &found {
        assert!(
            f.starts_with(
                "0 prepared, search_path \"$user\", public, lock_timeout 0, \
                 synchronous_commit on, 0 temporary"
            ),
            "a server session the daemons used: {f}"
        );
    }
}

#[test]
fn bad_pooler_parameters_are_refused_naming_them_and_create_nothing() {
    let db = Db::new();
    let cases: Vec<(String, &str)> = vec![
        (
            db.pooled.split("&direct_port=").next().unwrap().to_owned(),
            "pooler=transaction needs the server's own address",
        ),
        (
            db.pooled.replace("pooler=transaction", "pooler=session"),
            "pooler=\"session\": the only value is transaction",
        ),
        (
            db.direct.clone()
                + if db.direct.contains('?') { "&" } else { "?" }
                + "direct_port=5432",
            "need pooler=transaction",
        ),
        (
            db.pooled.clone() + "&options=-f%20x",
            "cannot be set through a pooler",
        ),
    ];
    for (url, says) in &cases {
        let o = common::output_within(
            "scratchfs fsck",
            Command::new(common::BIN).args(["fsck", "--db", url]),
            Duration::from_secs(60),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{url}: {err}");
        assert!(err.contains(says), "{url}: wanted {says:?} in {err}");
        assert!(!err.contains("sslrootcert="), "the URL repeated: {err}");
    }
    let tables = common::pg_query(
        &db.direct,
        "SELECT COUNT(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
    );
    assert_eq!(tables.trim(), "0", "nothing created");
}

/// `db`'s URL through the pooler as a plain client connects (no TLS, no pooler
/// parameters): what uid 1000's `psql` uses.
fn plain_pooler_url(db: &Db) -> String {
    common::pg_url_of(
        &format!(
            "postgres://scratchfs@127.0.0.1:{}/x?sslmode=disable",
            common::pg_pooler_url()
                .split(':')
                .nth(2)
                .and_then(|p| p.split('/').next())
                .expect("the pooler's port")
        ),
        common::pg_database_of(&db.direct),
    )
}

#[test]
fn what_a_client_of_the_pool_leaves_on_its_sessions_steers_no_daemon() {
    // The attack round of session 32, as uid 1000 with the daemons' role through the
    // pooler, on both of the pool's server sessions: a schema with the store's tables and
    // the sessions' search path set to it, temporary tables named as the store's (which
    // PostgreSQL searches first unless the path names pg_temp), every transaction
    // read-only by default, and 401 statements prepared under the names tokio-postgres
    // gives (s0, s1, ...). Before the fix: writes went into the attacker's tables and were
    // lost with them, EROFS, and EIO ("prepared statement \"s46\" already exists").
    let db = Db::new();
    let m = Mount::on_db(&db.pooled);
    std::fs::write(m.path("before.txt"), "kept\n").unwrap();
    let before: i64 = common::pg_query(&db.direct, "SELECT COUNT(*) FROM public.versions")
        .trim()
        .parse()
        .unwrap();
    let plain = plain_pooler_url(&db);
    let tables = [
        "versions", "files", "nodes", "events", "extents", "blobs", "tree_log",
    ];
    let mut setup = String::from("CREATE SCHEMA IF NOT EXISTS evil;\n");
    for t in tables {
        setup.push_str(&format!(
            "CREATE TABLE IF NOT EXISTS evil.{t} (LIKE public.{t} INCLUDING ALL);\n"
        ));
    }
    common::pg_query(&db.direct, &setup.replace('\n', " "));
    let mut plant = String::new();
    for t in tables {
        plant.push_str(&format!(
            "CREATE TEMP TABLE {t} (LIKE public.{t} INCLUDING ALL);\n"
        ));
    }
    plant.push_str(
        "SET search_path = evil;\n\
         SET default_transaction_read_only = on;\n\
         DO $$ BEGIN FOR i IN 0..400 LOOP EXECUTE format('PREPARE s%s AS SELECT 1', i); \
         END LOOP; END $$;\n\
         SELECT current_setting('search_path') || ' ' || \
                (SELECT COUNT(*) FROM pg_prepared_statements) || ' ' || pg_backend_pid();",
    );
    let planted = on_each_session(&plain, &plant);
    assert_eq!(planted.len(), 2, "{planted:?}");
    assert!(
        planted.iter().all(|l| l.starts_with("evil 401 ")),
        "planted on both sessions: {planted:?}"
    );
    // A second daemon, whose every statement is new on the sessions, and the first.
    let m2 = Mount::on_db(&db.pooled);
    std::fs::write(m2.path("after.txt"), "written after\n").unwrap();
    std::fs::write(m.path("before.txt"), "kept, then changed\n").unwrap();
    std::fs::create_dir(m.path("d")).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(m2.path("before.txt"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"appended\n").unwrap();
    drop(f);
    let after: i64 = common::pg_query(&db.direct, "SELECT COUNT(*) FROM public.versions")
        .trim()
        .parse()
        .unwrap();
    assert!(
        after >= before + 3,
        "the writes are in the scratchpad's own tables: {before} -> {after} versions"
    );
    let evil = common::pg_query(&db.direct, "SELECT COUNT(*) FROM evil.versions");
    assert_eq!(
        evil.trim(),
        "0",
        "versions written into the attacker's schema"
    );
    // What was acknowledged is what a fresh daemon reads, whatever the sessions hold.
    drop(m);
    drop(m2);
    let fresh = Mount::on_db(&db.direct);
    assert_eq!(
        std::fs::read_to_string(fresh.path("before.txt")).unwrap(),
        "kept, then changed\nappended\n"
    );
    assert_eq!(
        std::fs::read_to_string(fresh.path("after.txt")).unwrap(),
        "written after\n"
    );
    assert!(fresh.path("d").is_dir());
}

#[test]
fn a_direct_address_that_is_not_the_poolers_server_is_refused() {
    let db = Db::new();
    for (url, says) in [
        (
            db.pooled
                .split("&direct_port=")
                .next()
                .map(|u| format!("{u}&direct_port=1"))
                .unwrap(),
            "the server behind the pooler",
        ),
        (
            format!("{}&direct_dbname=postgres", db.pooled),
            "the listener must be on the pooler's server and database",
        ),
    ] {
        let mnt = tempfile::tempdir().unwrap();
        let o = common::output_within(
            "scratchfs mount",
            Command::new(common::BIN).args([
                "mount",
                "--db",
                &url,
                &mnt.path().display().to_string(),
                "--background",
            ]),
            Duration::from_secs(60),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{url}: {err}");
        assert!(err.contains(says), "{url}: wanted {says:?} in {err}");
        assert!(
            !std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap()
                .contains(&mnt.path().display().to_string()),
            "mounted anyway"
        );
    }
    let tables = common::pg_query(
        &db.direct,
        "SELECT COUNT(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
    );
    assert_eq!(tables.trim(), "0", "nothing created");
}
