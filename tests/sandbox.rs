//! The sandbox recipes of docs/sandbox.md ("Mounting into an agent's sandbox") and
//! docs/security.md, each run for real (issue 31 item 6): the agent's write goes through
//! the recipe, and the test reads back the uid, writer and namespace recorded with the
//! version.
//!
//! - bubblewrap started as the agent (`setpriv ... bwrap ...`): uid 1000, writer `agent`,
//!   recorded as in another namespace; and the trap the recipe avoids, root's `bwrap
//!   --uid 1000`, whose "agent" is root to the kernel and is recorded so (uid 0, writer
//!   `human`, another namespace);
//! - a container (new mount, pid, ipc, uts and network namespaces, as a container
//!   runtime makes them, by unshare(1)): a host mount bound into it, and a scratchpad
//!   mounted inside it through its own /dev/fuse;
//! - `scratchfs run --owner` with the harness dropping to the agent's uid.
//!
//! They need bubblewrap (scripts/deps installs it) and run on both backends.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const RULES: &str = r#"{
  "writers": { "agent": { "uid": 1000 }, "human": { "uid": 0 } },
  "paths": [
    { "path": "state.json", "format": "json",
      "fields": { "approval": { "writers": ["human"] } } },
    { "path": "**", "writers": ["*"] }
  ]
}"#;

/// The rules above in a file of a directory that lives as long as the value.
fn rules() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("rules.json");
    std::fs::write(&p, RULES).unwrap();
    (d, p)
}

/// bwrap's arguments for a sandbox that sees the host read-only and `mnt` read-write at
/// its own path, its working directory, with every namespace of its own.
fn bwrap(mnt: &Path) -> Vec<String> {
    assert!(
        Path::new("/usr/bin/bwrap").exists(),
        "bubblewrap is not installed (scripts/deps installs it)"
    );
    [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--bind",
        mnt.to_str().unwrap(),
        mnt.to_str().unwrap(),
        "--chdir",
        mnt.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

const AS_AGENT: [&str; 6] = [
    "setpriv",
    "--reuid",
    "1000",
    "--regid",
    "1000",
    "--clear-groups",
];

/// Runs `argv` (bounded), asserting it succeeded; its stdout.
fn run_ok(what: &str, argv: &[String]) -> String {
    let o = output_within(
        what,
        Command::new(&argv[0]).args(&argv[1..]),
        Duration::from_secs(120),
    );
    assert!(
        o.status.success(),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `uid|writer|own_ns|user_ns` of the process that wrote `path`'s newest version.
fn recorded(sql: impl Fn(&str) -> String, path: &str) -> String {
    sql(&format!(
        "SELECT p.uid || '|' || p.writer || '|' || COALESCE(CAST(p.own_ns AS TEXT), '?') \
         || '|' || COALESCE(CAST(p.user_ns AS TEXT), '?') \
         FROM versions v JOIN processes p ON p.id = v.process \
         WHERE v.path = '{path}' ORDER BY v.id DESC LIMIT 1"
    ))
}

/// The user namespace this process runs in (the daemon's too), by inode number.
fn own_user_ns() -> String {
    let l = std::fs::read_link("/proc/self/ns/user").unwrap();
    let l = l.to_string_lossy();
    l.trim_start_matches("user:[")
        .trim_end_matches(']')
        .to_string()
}

#[test]
fn bubblewrap_started_as_the_agent_records_the_agent_and_its_namespace() {
    let (_d, rules) = rules();
    let m = Mount::with_args(&["--rules", rules.to_str().unwrap(), "--owner", "1000:1000"]);
    let mut argv: Vec<String> = AS_AGENT.iter().map(|s| s.to_string()).collect();
    argv.extend(bwrap(&m.mnt));
    argv.extend(
        [
            "sh",
            "-c",
            "echo from the box > notes.md && readlink /proc/self/ns/user && id -u \
             && { echo '{\"approval\": true}' > state.json; echo refused=$?; }",
        ]
        .map(String::from),
    );
    let out = run_ok("bwrap as the agent", &argv);
    assert_eq!(read(m.path("notes.md")), "from the box\n");
    // Inside: uid 1000 in a user namespace of its own; the approval key is the human's.
    assert!(out.contains("\n1000\n"), "{out}");
    assert!(out.contains("refused=1"), "the agent wrote approval: {out}");
    let box_ns = out.lines().next().unwrap().trim_start_matches("user:[");
    let box_ns = box_ns.trim_end_matches(']');
    assert_ne!(box_ns, own_user_ns());
    assert_eq!(
        recorded(|q| m.sql(q), "notes.md"),
        format!("1000|agent|0|{box_ns}"),
        "uid|writer|own_ns|user_ns"
    );
    // `scratchfs log` says so too.
    let (code, log, err) = cli(&m, &["log", "notes.md"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        log.contains(&format!("in another namespace (uid 1000, user:[{box_ns}])")),
        "{log}"
    );
    // A write from the harness's own namespace is recorded as such.
    m.sh_ok("echo by hand > hand.md");
    assert_eq!(
        recorded(|q| m.sql(q), "hand.md"),
        format!("0|human|1|{}", own_user_ns())
    );
}

/// The trap: root's `bwrap --uid 1000` gives the box uid 1000 inside a user namespace
/// that maps it to root outside. The kernel, and so scratchfs, see root (without its
/// capabilities: root's own files, as the mount's are without `--owner`): the write is
/// the human's, and the approval key goes through. What is recorded tells it apart from
/// a write made outside the box.
#[test]
fn roots_bwrap_uid_1000_is_root_and_is_recorded_as_root_in_another_namespace() {
    let (_d, rules) = rules();
    let m = Mount::with_args(&["--rules", rules.to_str().unwrap(), "--allow-other"]);
    let mut argv = bwrap(&m.mnt);
    argv.extend(
        [
            "--uid",
            "1000",
            "--gid",
            "1000",
            "sh",
            "-c",
            "id -u && echo '{\"approval\": true}' > state.json",
        ]
        .map(String::from),
    );
    let out = run_ok("root's bwrap --uid 1000", &argv);
    assert_eq!(out.trim(), "1000", "the box thinks it is uid 1000");
    assert_eq!(read(m.path("state.json")), "{\"approval\": true}\n");
    let r = recorded(|q| m.sql(q), "state.json");
    assert!(
        r.starts_with("0|human|0|"),
        "uid|writer|own_ns|user_ns: {r}"
    );
    assert_ne!(r.rsplit('|').next().unwrap(), own_user_ns());
}

/// A container (namespaces of its own, as a container runtime makes them) with the
/// host's mount bound into it, its agent running as uid 1000; and one that mounts its
/// own scratchpad through /dev/fuse inside it.
#[test]
fn a_container_reaches_a_host_mount_bound_into_it_and_mounts_its_own() {
    let (_d, rules) = rules();
    let m = Mount::with_args(&["--rules", rules.to_str().unwrap(), "--owner", "1000:1000"]);
    let inside = tempfile::tempdir().unwrap();
    let point = inside.path().join("scratch");
    std::fs::create_dir(&point).unwrap();
    let script = format!(
        "mount --bind '{mnt}' '{point}' && cd '{point}' && \
         setpriv --reuid 1000 --regid 1000 --clear-groups sh -c 'echo from the container > c.md'",
        mnt = m.mnt.display(),
        point = point.display()
    );
    in_container("a container with the host mount bound in", &script, true);
    assert_eq!(read(m.path("c.md")), "from the container\n");
    // Same user namespace, another mount namespace: not the daemon's own.
    assert_eq!(
        recorded(|q| m.sql(q), "c.md"),
        format!("1000|agent|0|{}", own_user_ns())
    );

    // The scratchpad mounted inside the container (the container has /dev/fuse).
    let db = if on_postgres() {
        new_pg_database()
    } else {
        inside
            .path()
            .join("inner.db")
            .to_string_lossy()
            .into_owned()
    };
    let own = inside.path().join("own");
    std::fs::create_dir(&own).unwrap();
    let script = format!(
        "'{bin}' mount '{own}' --db '{db}' --rules '{rules}' --owner 1000:1000 --background \
         && setpriv --reuid 1000 --regid 1000 --clear-groups sh -c 'echo inner > {own}/i.md' \
         && '{bin}' unmount '{own}' \
         && while pgrep -f '[s]cratchfs mount {own}' >/dev/null; do sleep 0.1; done",
        bin = BIN,
        own = own.display(),
        rules = rules.display(),
    );
    // The host's network (`docker run --network host`): the PostgreSQL pass's server
    // listens on the host's loopback. The container waits for its daemon to end after
    // the unmount (it writes its redo log into the database as it ends): the end of the
    // container's pid namespace would kill it first, leaving the version in the redo log
    // (safe, applied at the next open, but not in the table this test reads).
    in_container("a container that mounts its own scratchpad", &script, false);
    let q = |sql: &str| db_query(&db, sql);
    // The daemon and the agent share the container's namespaces: its own.
    assert_eq!(
        recorded(q, "i.md"),
        format!("1000|agent|1|{}", own_user_ns())
    );
    if on_postgres() {
        drop_pg_database(&db);
    }
}

/// `scratchfs run --owner 1000:1000 -- setpriv ... bwrap ...`: the harness's whole run in
/// one command.
#[test]
fn scratchfs_run_with_the_agents_sandbox_records_the_agent() {
    let (d, rules) = rules();
    let db = if on_postgres() {
        new_pg_database()
    } else {
        d.path().join("run.db").to_string_lossy().into_owned()
    };
    let sandbox = bwrap(Path::new("/SCRATCHFS_MOUNT"))
        .into_iter()
        .map(|a| {
            if a == "/SCRATCHFS_MOUNT" {
                "\"$SCRATCHFS_MOUNT\"".to_string()
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    let script = format!(
        "exec setpriv --reuid 1000 --regid 1000 --clear-groups {sandbox} \
         sh -c 'echo ran > run.md'"
    );
    run_ok(
        "scratchfs run with a sandbox",
        &[
            BIN,
            "run",
            "--db",
            &db,
            "--rules",
            rules.to_str().unwrap(),
            "--owner",
            "1000:1000",
            "--",
            "sh",
            "-c",
            &script,
        ]
        .map(String::from),
    );
    let r = recorded(|q| db_query(&db, q), "run.md");
    assert!(
        r.starts_with("1000|agent|0|"),
        "uid|writer|own_ns|user_ns: {r}"
    );
    assert_ne!(r.rsplit('|').next().unwrap(), own_user_ns());
    if on_postgres() {
        drop_pg_database(&db);
    }
}

/// Runs `script` with `sh` in namespaces of its own, as a container runtime makes them
/// (mount with its own /proc, pid, ipc, uts, and with `net` a network of its own),
/// asserting it succeeded.
fn in_container(what: &str, script: &str, net: bool) {
    let mut argv: Vec<String> = ["unshare", "--mount", "--pid", "--ipc", "--uts"]
        .map(String::from)
        .to_vec();
    if net {
        argv.push("--net".into());
    }
    argv.extend(["--fork", "--mount-proc", "sh", "-c", script].map(String::from));
    run_ok(what, &argv);
}

/// A query on a database that is not mounted (a path or a PostgreSQL URL).
fn db_query(db: &str, sql: &str) -> String {
    if on_postgres() {
        return pg_query(db, sql);
    }
    let o = Command::new("sqlite3")
        .args(["-batch", db, sql])
        .output()
        .expect("sqlite3");
    assert!(
        o.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim_end().to_string()
}

/// A database from before namespaces were recorded has no `processes.user_ns` and
/// `own_ns`: `scratchfs log` still reads it, and the next mount adds them (NULL in the
/// old rows, docs/schema.md "Migrations"), after which writes are recorded with them.
#[test]
fn a_database_from_before_namespaces_were_recorded_gets_the_columns_when_mounted() {
    let mut m = Mount::new();
    m.sh_ok("echo old > old.md");
    m.unmount();
    if on_postgres() {
        // The views go with the columns; the next mount makes them again. A database
        // from before has no `schema_sql` either (the text that made its tables), so the
        // next mount runs the schema's statements.
        m.sql(
            "ALTER TABLE processes DROP COLUMN user_ns CASCADE;
             ALTER TABLE processes DROP COLUMN own_ns CASCADE;
             DELETE FROM meta WHERE key = 'schema_sql';",
        );
    } else {
        m.sql(
            "DROP VIEW version_log; DROP VIEW event_log;
             ALTER TABLE processes DROP COLUMN own_ns;
             ALTER TABLE processes DROP COLUMN user_ns;
             CREATE VIEW version_log AS
               SELECT v.id, v.file_id, v.version, v.path, v.op, v.size, v.blake3, v.stream,
                      v.writer, v.pid, p.tgid, p.start_time, p.uid, p.gid, p.exe, p.argv,
                      p.env_writer, p.step, v.time_ns, v.process, p.transport, p.client,
                      p.client_version
               FROM versions v JOIN processes p ON p.id = v.process;
             CREATE VIEW event_log AS
               SELECT e.id, e.time_ns, e.op, e.path, e.new_path, e.file_id, e.version_id,
                      e.errno, e.reason, e.stream, e.size, e.blake3, e.writer, e.pid, p.tgid,
                      p.start_time, p.uid, p.gid, p.exe, p.argv, p.env_writer, p.step,
                      e.process, p.transport, p.client, p.client_version
               FROM events e JOIN processes p ON p.id = e.process;",
        );
        let (rc, out, err) = cli(&m, &["log", "old.md"]);
        assert_eq!(rc, 0, "{err}");
        assert!(out.contains("create   old.md"), "{out}");
    }
    m.start();
    m.sh_ok("echo new >> old.md");
    assert_eq!(
        recorded(|q| m.sql(q), "old.md"),
        format!("0|anonymous|1|{}", own_user_ns())
    );
    assert_eq!(
        m.sql("SELECT COUNT(*) FROM processes WHERE user_ns IS NULL"),
        m.sql("SELECT COUNT(*) FROM processes WHERE own_ns IS NULL"),
    );
    let (rc, out, err) = cli(&m, &["log", "--json", "old.md"]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("\"own_ns\":true"), "{out}");
}
