//! Test harness: a real scratchfs mount on a temporary directory, served by a child
//! `scratchfs mount` process (so a test can kill -9 it), unmounted on drop. A test that
//! cannot mount fails with the reason; nothing is skipped.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_scratchfs");

/// A mounted scratchpad.
pub struct Mount {
    /// Holds the mountpoint and the database (the database is outside the mount).
    pub dir: tempfile::TempDir,
    /// The mountpoint.
    pub mnt: PathBuf,
    /// The database file.
    pub db: PathBuf,
    child: Option<Child>,
    extra: Vec<String>,
    /// Environment of the next [`Mount::start`] only (e.g. a failpoint, src/failpoint.rs).
    env: Vec<(String, String)>,
    /// A small tmpfs holding the database ([`Mount::with_db_on_tmpfs`]), unmounted on drop.
    disk: Option<PathBuf>,
    /// Another mount owns the database ([`Mount::on_db`]): not dropped with this one.
    keep_db: bool,
}

/// Whether the integration tests run against PostgreSQL: `SCRATCHFS_TEST_BACKEND` is
/// `postgres` (scripts/test's second pass); else (unset or `sqlite`) the embedded SQLite.
/// Any other value fails the test, saying so.
pub fn on_postgres() -> bool {
    match std::env::var("SCRATCHFS_TEST_BACKEND").as_deref() {
        Err(_) | Ok("") | Ok("sqlite") => false,
        Ok("postgres") => true,
        Ok(other) => panic!("SCRATCHFS_TEST_BACKEND={other}: use sqlite or postgres"),
    }
}

/// The PostgreSQL server of the tests (`SCRATCHFS_PG_URL`, from `scripts/pg start`): a
/// test that needs it and has none fails, saying how to get one.
pub fn pg_url() -> String {
    std::env::var("SCRATCHFS_PG_URL").unwrap_or_else(|_| {
        panic!(
            "SCRATCHFS_PG_URL is not set: this test needs a PostgreSQL server. Run \
             `scripts/pg start` (as root), then `export SCRATCHFS_PG_URL=$(scripts/pg url)`"
        )
    })
}

/// The tests' PostgreSQL server through its pooler in transaction mode
/// (`SCRATCHFS_PG_POOLER_URL`, from `scripts/pg url --pooler`: PgBouncer, its URL with
/// `pooler=transaction` and the server's own port): a test that needs it and has none
/// fails, saying how to get one.
pub fn pg_pooler_url() -> String {
    std::env::var("SCRATCHFS_PG_POOLER_URL").unwrap_or_else(|_| {
        panic!(
            "SCRATCHFS_PG_POOLER_URL is not set: this test needs PostgreSQL behind PgBouncer. \
             Run `scripts/pg start` (as root: it starts both), then \
             `export SCRATCHFS_PG_POOLER_URL=$(scripts/pg url --pooler)`"
        )
    })
}

/// A new, empty PostgreSQL database on the tests' server; returns its URL. Dropped by
/// [`drop_pg_database`] (a [`Mount`] does it when dropped).
pub fn new_pg_database() -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let base = pg_url();
    let name = format!(
        "t_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let mut c = pg_client(&base);
    c.batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap_or_else(|e| panic!("cannot create a test database on PostgreSQL: {e:?}"));
    pg_url_of(&base, &name)
}

/// A blocking client for `url`, through scratchfs' own connection code (so that the
/// URL's TLS parameters, `sslrootcert` and the rest, mean what they mean to the store).
pub fn pg_client(url: &str) -> postgres::Client {
    scratchfs::store::postgres::connect_listener(url)
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL: {e}"))
}

/// The database name of a `postgres://` URL (its path, before any `?query`).
pub fn pg_database_of(url: &str) -> &str {
    let path = url.split_once('?').map_or(url, |(p, _)| p);
    path.rsplit_once('/').expect("a URL with a database name").1
}

/// `url` naming the database `name` instead, its query (TLS parameters) kept.
pub fn pg_url_of(url: &str, name: &str) -> String {
    let (path, query) = url
        .split_once('?')
        .map_or((url, None), |(p, q)| (p, Some(q)));
    let (server, _) = path.rsplit_once('/').expect("a URL with a database name");
    match query {
        Some(q) => format!("{server}/{name}?{q}"),
        None => format!("{server}/{name}"),
    }
}

/// Runs `query` on the PostgreSQL database `url` and prints its rows as the sqlite3 shell
/// does: one line per row, columns joined by `|`, NULL empty, booleans 1 and 0, bytes as
/// (lossy) text. SQLite's `CAST(x AS BLOB)` is read as `CAST(x AS BYTEA)`.
pub fn pg_query(url: &str, query: &str) -> String {
    use postgres::types::Type;
    let query = query.replace(" AS BLOB)", " AS BYTEA)");
    let mut c = pg_client(url);
    // The column types from the statement; the values as PostgreSQL prints them (numeric
    // sums included), then booleans as 1/0 and bytes as text.
    let types: Vec<Type> = if query
        .trim_start()
        .to_ascii_uppercase()
        .starts_with("SELECT")
    {
        c.prepare(&query)
            .unwrap_or_else(|e| panic!("{query}: {e:?}"))
            .columns()
            .iter()
            .map(|col| col.type_().clone())
            .collect()
    } else {
        Vec::new()
    };
    let messages = c
        .simple_query(&query)
        .unwrap_or_else(|e| panic!("{query}: {e:?}"));
    let mut out = Vec::new();
    for m in messages {
        let postgres::SimpleQueryMessage::Row(r) = m else {
            continue;
        };
        let cols: Vec<String> = (0..r.len())
            .map(|i| {
                let Some(v) = r.get(i) else {
                    return String::new();
                };
                match types.get(i) {
                    Some(t) if *t == Type::BOOL => (if v == "t" { "1" } else { "0" }).to_string(),
                    Some(t) if *t == Type::BYTEA => {
                        let hex = v.trim_start_matches("\\x");
                        let bytes: Vec<u8> = (0..hex.len() / 2)
                            .map(|k| u8::from_str_radix(&hex[2 * k..2 * k + 2], 16).unwrap())
                            .collect();
                        String::from_utf8_lossy(&bytes).into_owned()
                    }
                    _ => v.to_string(),
                }
            })
            .collect();
        out.push(cols.join("|"));
    }
    out.join("\n")
}

/// Asserts that the server refuses `sql` on `client` for want of a privilege ("permission
/// denied"); `what` says what the statement tries.
pub fn pg_refuses(client: &mut postgres::Client, sql: &str, what: &str) {
    let e = client.simple_query(sql).map(|_| ()).expect_err(what);
    assert!(
        format!("{e:?}").contains("permission denied"),
        "{what}: {e:?}"
    );
}

/// Drops the PostgreSQL database of the URL it holds when it goes out of scope (also when
/// the test fails): `let _db = DropPgDatabase(url.clone());`.
pub struct DropPgDatabase(pub String);

impl Drop for DropPgDatabase {
    fn drop(&mut self) {
        drop_pg_database(&self.0);
    }
}

/// Drops a database [`new_pg_database`] made (its connections closed first).
pub fn drop_pg_database(url: &str) {
    let name = pg_database_of(url);
    if let Ok(mut c) = scratchfs::store::postgres::connect_listener(&pg_url()) {
        let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    }
}

fn mounted(mnt: &Path) -> bool {
    let want = mnt.to_string_lossy().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_str()) && l.contains(" - fuse"))
}

impl Mount {
    /// Mounts a fresh scratchpad with the default layout.
    pub fn new() -> Mount {
        Self::with_args(&[])
    }

    /// Mounts with extra `scratchfs mount` arguments.
    pub fn with_args(extra: &[&str]) -> Mount {
        assert!(
            Path::new("/dev/fuse").exists(),
            "cannot mount: /dev/fuse does not exist on this machine"
        );
        let dir = tempfile::Builder::new()
            .prefix("scratchfs-test-")
            .tempdir()
            .unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let db = if on_postgres() {
            PathBuf::from(new_pg_database())
        } else {
            dir.path().join("scratch.db")
        };
        let mut m = Mount {
            dir,
            mnt,
            db,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
            disk: None,
            keep_db: false,
        };
        m.start();
        m
    }

    /// Mounts the scratchpad in database `db` (a path or a `postgres://` URL) on a fresh
    /// mountpoint of its own: a second daemon of a PostgreSQL scratchpad (issue 15). The
    /// database is not dropped when this mount is.
    pub fn on_db(db: &str) -> Mount {
        Self::on_db_with(db, &[])
    }

    /// [`Mount::on_db`] with the daemon's environment extended by `env` (e.g.
    /// `RUST_LOG`, to read what it logs in [`Mount::daemon_log`]).
    pub fn on_db_with_env(db: &str, env: &[(&str, &str)]) -> Mount {
        Self::on_db_env(db, &[], env)
    }

    /// What the daemon has written to its standard error so far.
    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// [`Mount::on_db`] with extra `scratchfs mount` arguments.
    pub fn on_db_with(db: &str, extra: &[&str]) -> Mount {
        Self::on_db_env(db, extra, &[])
    }

    /// [`Mount::on_db`] with extra `scratchfs mount` arguments and the daemon's
    /// environment extended by `env`.
    pub fn on_db_env(db: &str, extra: &[&str], env: &[(&str, &str)]) -> Mount {
        let dir = tempfile::Builder::new()
            .prefix("scratchfs-test-")
            .tempdir()
            .unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let mut m = Mount {
            dir,
            mnt,
            db: PathBuf::from(db),
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            disk: None,
            keep_db: true,
        };
        m.start();
        m
    }

    /// Mounts a fresh scratchpad whose database lives on a tmpfs of `size` (as `mount -o
    /// size=`, e.g. "4m"), so a test can fill it (SPEC §6 "database full").
    pub fn with_db_on_tmpfs(size: &str) -> Mount {
        assert!(
            !on_postgres(),
            "this test fills the disk of an SQLite database: it runs in the SQLite pass only"
        );
        let dir = tempfile::Builder::new()
            .prefix("scratchfs-test-")
            .tempdir()
            .unwrap();
        let mnt = dir.path().join("mnt");
        let disk = dir.path().join("disk");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::create_dir(&disk).unwrap();
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&disk)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "cannot mount a tmpfs for the database (needs root): {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mut m = Mount {
            db: disk.join("scratch.db"),
            dir,
            mnt,
            child: None,
            extra: Vec::new(),
            env: Vec::new(),
            disk: Some(disk),
            keep_db: false,
        };
        m.start();
        m
    }

    /// Starts the daemon and waits until the mount answers. Panics while the last daemon
    /// still runs: a second mount over a live one outlived the test (the leftover mounts
    /// of earlier sessions: a remount without `unmount` first).
    pub fn start(&mut self) {
        if let Some(c) = self.child.as_mut() {
            assert!(
                c.try_wait().unwrap().is_some(),
                "start: the daemon of {} still runs: unmount (or kill9) it first",
                self.mnt.display()
            );
        }
        let log = std::fs::File::create(self.dir.path().join("daemon.log")).unwrap();
        let child = Command::new(BIN)
            .arg("mount")
            .arg(&self.mnt)
            .arg("--db")
            .arg(&self.db)
            .args(&self.extra)
            .envs(std::mem::take(&mut self.env))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn scratchfs mount");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(120);
        // MANIFEST answers only through a live scratchfs mount: not through a killed
        // daemon's dead mount (ENOTCONN), nor through the bare directory a starting daemon
        // exposes for a moment when it clears that dead mount before mounting.
        while !(mounted(&self.mnt) && self.mnt.join("MANIFEST").exists()) {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "cannot mount {}: scratchfs exited with {st}: {}",
                    self.mnt.display(),
                    std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "cannot mount {}: no answer within 120 s",
                self.mnt.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts the daemon (after [`Mount::unmount`] or [`Mount::kill9`]) armed to stop at
    /// failpoint `name` (src/failpoint.rs); returns the file it creates when it stops there.
    pub fn start_with_failpoint(&mut self, name: &str) -> PathBuf {
        let flag = self.dir.path().join(format!("failpoint-{name}"));
        let _ = std::fs::remove_file(&flag);
        self.env = vec![
            ("SCRATCHFS_FAILPOINT".into(), name.into()),
            (
                "SCRATCHFS_FAILPOINT_FLAG".into(),
                flag.to_string_lossy().into_owned(),
            ),
        ];
        self.start();
        flag
    }

    /// Starts the daemon (after [`Mount::unmount`] or [`Mount::kill9`]) with `env` added
    /// to its environment.
    pub fn start_with_env(&mut self, env: &[(&str, &str)]) {
        self.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.start();
    }

    /// Starts the daemon again (after [`Mount::unmount`]) with other `scratchfs mount`
    /// arguments, on the same database.
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.extra = extra.iter().map(|s| s.to_string()).collect();
        self.start();
    }

    /// Path of `rel` inside the mount.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Runs a bash script with the mount as working directory.
    pub fn sh(&self, script: &str) -> Output {
        Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(&self.mnt)
            .env("MNT", &self.mnt)
            .env("DB", &self.db)
            .output()
            .expect("run bash")
    }

    /// Runs a bash script that must succeed; returns its stdout.
    pub fn sh_ok(&self, script: &str) -> String {
        let o = self.sh(script);
        assert!(
            o.status.success(),
            "script failed ({}):\n{script}\nstdout: {}\nstderr: {}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Runs a query with the sqlite3 shell against the database while it is mounted.
    /// First it fsyncs the mount's root directory, which writes every change already
    /// answered (the daemon may otherwise commit it to SQLite a few ms later,
    /// docs/SEMANTICS.md).
    pub fn sql(&self, query: &str) -> String {
        if self.child.is_some()
            && let Ok(d) = std::fs::File::open(&self.mnt)
        {
            let _ = d.sync_all();
        }
        if on_postgres() {
            return pg_query(self.db.to_str().expect("a URL"), query);
        }
        let o = {
            Command::new("sqlite3")
                .arg("-batch")
                .arg(&self.db)
                .arg(query)
                .output()
                .expect("run sqlite3 (apt-get install sqlite3)")
        };
        assert!(
            o.status.success(),
            "{query}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim_end().to_string()
    }

    /// `(version, op, size)` of every version recorded under `path`, oldest first.
    pub fn versions(&self, path: &str) -> Vec<(i64, String, u64)> {
        let out = self.sql(&format!(
            "SELECT version, op, size FROM versions WHERE path = '{}' ORDER BY id",
            path.replace('\'', "''")
        ));
        out.lines()
            .filter(|l| !l.is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                (
                    f[0].parse().unwrap(),
                    f[1].to_string(),
                    f[2].parse().unwrap(),
                )
            })
            .collect()
    }

    /// The blake3 (hex) of the current version of `path`.
    pub fn head_hash(&self, path: &str) -> String {
        self.sql(&format!(
            "SELECT blake3 FROM heads WHERE current_path = '{}' AND deleted_ns IS NULL",
            path.replace('\'', "''")
        ))
    }

    /// Reaps a daemon a test killed itself (see [`Mount::daemon_pid`]), leaving the dead
    /// mount behind as [`Mount::kill9`] does.
    pub fn reap(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            c.wait().unwrap();
        }
    }

    /// Kills the daemon with SIGKILL, leaving a dead mount behind.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Unmounts cleanly and waits for the daemon to exit; returns its exit status code.
    pub fn unmount(&mut self) -> Option<i32> {
        let st = Command::new(BIN)
            .arg("unmount")
            .arg(&self.mnt)
            .status()
            .unwrap();
        assert!(st.success(), "scratchfs unmount failed");
        let mut c = self.child.take()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st.code();
            }
            assert!(
                Instant::now() < deadline,
                "daemon did not exit after unmount"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for a daemon that was told to stop (signal) to exit.
    pub fn unmount_after_exit(&mut self) {
        if let Some(mut c) = self.child.take() {
            let st = c.wait().unwrap();
            assert!(st.success(), "daemon exited with {st}");
        }
    }

    /// Bytes of the database, its WAL and its redo log.
    pub fn db_bytes(&self) -> u64 {
        ["", "-wal", "-redo"]
            .iter()
            .map(|s| {
                std::fs::metadata(format!("{}{s}", self.db.display()))
                    .map(|x| x.len())
                    .unwrap_or(0)
            })
            .sum()
    }

    /// Pid of the daemon.
    pub fn daemon_pid(&self) -> u32 {
        self.child.as_ref().expect("daemon running").id()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        if let Some(mut c) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(disk) = &self.disk {
            let _ = Command::new("umount").arg("-l").arg(disk).status();
        }
        if let Some(url) = self
            .db
            .to_str()
            .filter(|d| !self.keep_db && d.starts_with("postgres://"))
        {
            drop_pg_database(url);
        }
    }
}

/// A command run as the agent, the adversary of docs/security.md: uid and gid 1000, no
/// supplementary groups (`setpriv`); add the program and its arguments.
pub fn as_agent() -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid", "1000", "--regid", "1000", "--clear-groups"]);
    c
}

/// Runs `scratchfs ARGS` on the mount's database: (exit code, stdout, stderr).
pub fn cli(m: &Mount, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(BIN)
        .args(args)
        .env("SCRATCHFS_DB", &m.db)
        .output()
        .expect("run scratchfs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Polls `cond` every 10 ms until it holds: a test waits for an event, never for a fixed
/// time. Panics naming `what` after 300 s (a hang, not a slow machine).
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !cond() {
        assert!(Instant::now() < deadline, "waited 300 s for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `cmd` to its end with its output captured, as `Command::output` does, but kills it
/// and panics naming `what` when it has not ended within `limit`: a test that runs a
/// command which could hang (a mount that was expected to be refused) never waits
/// without a bound.
pub fn output_within(what: &str, cmd: &mut Command, limit: Duration) -> Output {
    use std::io::Read;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut pipes = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = pipes.1.read_to_end(&mut v);
        v
    });
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = pipes.0.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// Lines of a file, 0 if it does not exist yet.
pub fn count_lines(p: impl AsRef<Path>) -> usize {
    std::fs::read_to_string(p)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// Reads a file to a string, panicking with the path on error.
pub fn read(p: impl AsRef<Path>) -> String {
    let p = p.as_ref();
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// The virtual environment's python3 (scripts/deps) with the official MCP Python SDK.
pub const MCP_PYTHON: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python3");
/// The MCP client the tests drive (tests/mcp_client.py).
pub const MCP_CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_client.py");

/// Runs `calls` through the Python SDK against `target` (`["stdio", CMD...]` or
/// `["http", URL]`) as client `name`; the client's JSON report.
pub fn mcp_session(name: &str, target: &[&str], calls: serde_json::Value) -> serde_json::Value {
    mcp_session_at(ERA_HANDSHAKE, name, target, calls)
}

/// The MCP revision with an `initialize` handshake and sessions, spoken by the Python SDK.
pub const ERA_HANDSHAKE: &str = "2025-11-25";
/// The stateless MCP revision (each request carries the client in `_meta`), spoken by
/// fastmcp 4.
pub const ERA_STATELESS: &str = "2026-07-28";

/// [`mcp_session`] by a client of MCP revision `era` ([`ERA_HANDSHAKE`] or
/// [`ERA_STATELESS`]).
pub fn mcp_session_at(
    era: &str,
    name: &str,
    target: &[&str],
    calls: serde_json::Value,
) -> serde_json::Value {
    assert!(
        Path::new(MCP_PYTHON).exists(),
        "{MCP_PYTHON} is missing: run scripts/deps (it makes the virtual environment and installs mcp)"
    );
    let mut child = Command::new(MCP_PYTHON)
        .arg(MCP_CLIENT)
        .arg(name)
        .args(target)
        .env("MCP_ERA", era)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the virtual environment's python3");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(calls.to_string().as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "MCP client failed (is the mcp package in .venv? scripts/deps installs it):\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&o.stdout));
    });
    assert_eq!(
        report["protocol"].as_str(),
        Some(era),
        "the client did not speak MCP {era}"
    );
    report
}

/// A child process killed and reaped when dropped (a server a test started: a failed
/// assertion must not leave it running, holding the test runner's output open).
pub struct KillOnDrop(pub Child);

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `scratchfs mcp --db DB --listen 127.0.0.1:0 EXTRA...`; the server, its URL
/// (`https://` with `--tls-cert`) and its token file, from the two lines it prints on
/// stderr once it listens.
pub fn http_server(db: &Path, extra: &[&str]) -> (KillOnDrop, String, String) {
    http_server_on("127.0.0.1:0", db, extra)
}

/// [`http_server`] listening on `addr`.
pub fn http_server_on(addr: &str, db: &Path, extra: &[&str]) -> (KillOnDrop, String, String) {
    let mut server = KillOnDrop(
        Command::new(BIN)
            .args(["mcp", "--db", db.to_str().unwrap(), "--listen", addr])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    use std::io::BufRead;
    let mut err = std::io::BufReader::new(server.stderr.take().unwrap());
    let (mut line, mut token_line) = (String::new(), String::new());
    err.read_line(&mut line).unwrap();
    err.read_line(&mut token_line).unwrap();
    let url = line
        .trim()
        .rsplit(' ')
        .next()
        .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    let token = token_line
        .trim()
        .strip_suffix('>')
        .and_then(|l| l.rsplit(' ').next())
        .filter(|t| t.starts_with('/'))
        .unwrap_or_else(|| panic!("no token file in {token_line:?}"))
        .to_string();
    (server, url, token)
}
