//! The PostgreSQL connection of the store (src/store/postgres, issue 15) against a real
//! server: the schema's text runs (twice), and statements of the shared SQL's kind go
//! through the [`Conn`] helpers: `?N` placeholders, `INSERT ... RETURNING`, integers
//! wherever PostgreSQL inferred `int4` or `bool` for a placeholder, NULLs, bytes that are
//! not UTF-8, `"offset"`, a visitor that stops early or runs statements of its own,
//! transactions, and failures as errnos (a unique violation is `EEXIST`, a lost
//! connection `EIO` saying so, a server that is not there the socket's errno).
//!
//! Needs a server: `scripts/pg start` (as root) and `export SCRATCHFS_PG_URL=$(scripts/pg
//! url)`. Without `SCRATCHFS_PG_URL` the test fails (never skips). It works in a schema of
//! its own, `t_<pid>_<ns>`, dropped at the end (also when it fails).

use scratchfs::p;
use scratchfs::store::ErrorKind;
use scratchfs::store::postgres::{PENDING_VERSION_ID, PgConn, SCHEMA};
// A glob: the helpers (`insert`, `value`, `all`, ...) are in scope however the sql module
// offers them.
use scratchfs::store::sql::*;

fn url() -> String {
    std::env::var("SCRATCHFS_PG_URL").unwrap_or_else(|_| {
        panic!(
            "SCRATCHFS_PG_URL is not set: this test needs a PostgreSQL server. Run \
             `scripts/pg start` (as root), then `export SCRATCHFS_PG_URL=$(scripts/pg url)`"
        )
    })
}

/// Drops the test's schema when the test ends, through a connection of its own (the
/// test's may be broken or mid-transaction).
struct DropSchema(String);

impl Drop for DropSchema {
    fn drop(&mut self) {
        match PgConn::connect(&url()) {
            Ok(c) => {
                if let Err(e) = c.batch(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.0)) {
                    eprintln!("dropping schema {}: {e}", self.0);
                }
            }
            Err(e) => eprintln!("dropping schema {}: {e}", self.0),
        }
    }
}

/// A connection whose `search_path` is a new, empty schema with the store's tables.
fn fresh() -> (PgConn, DropSchema) {
    let pg = PgConn::connect(&url()).expect("connect to SCRATCHFS_PG_URL");
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    // Tests run in parallel threads of one process, and two may read the same clock:
    // a counter keeps their schemas apart (two once collided, 23505 on the schema name).
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let schema = format!("t_{}_{ns}_{n}", std::process::id());
    pg.batch(&format!(
        "CREATE SCHEMA {schema}; SET search_path TO {schema}"
    ))
    .unwrap();
    let guard = DropSchema(schema);
    pg.batch(SCHEMA).expect("schema.sql runs");
    pg.batch(SCHEMA)
        .expect("schema.sql runs again on its own tables");
    (pg, guard)
}

/// An extent row: offset, length, blob, inline data.
type Extent = (i64, i64, Option<i64>, Option<Vec<u8>>);

fn new_process(c: &dyn Conn) -> i64 {
    c.insert(
        "INSERT INTO processes(writer, tgid, start_time, uid, gid, exe, argv, env_writer,
             step, transport, client, client_version)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) RETURNING id",
        p![
            "agent",
            1234u32,
            99i64,
            0u32,
            0u32,
            "/bin/sh",
            r#"["sh","-c","true"]"#,
            None::<&str>,
            None::<i64>,
            None::<&str>,
            None::<&str>,
            None::<&str>
        ],
    )
    .unwrap()
}

#[test]
fn the_shared_sql_runs_on_postgresql() {
    let (pg, _guard) = fresh();
    let c: &dyn Conn = &pg;
    assert_eq!(c.dialect(), Dialect::Postgres);

    // RETURNING ids; NULL parameters; NULLs read back.
    let proc = new_process(c);
    assert_eq!(proc, 1);
    assert_eq!(
        new_process(c),
        2,
        "the same statement again, from the cache"
    );
    let (env_writer, step): (Option<String>, Option<i64>) = c
        .one(
            "SELECT env_writer, step FROM processes WHERE id = ?1",
            p![proc],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((env_writer, step), (None, None));
    let argv: String = c
        .value("SELECT argv FROM processes WHERE id = ?1", p![proc])
        .unwrap();
    assert_eq!(argv, r#"["sh","-c","true"]"#);
    // Unlike SQLite, PostgreSQL text cannot hold a NUL character: it is stored as U+2400
    // (argv is stored as JSON, which escapes it anyway).
    c.exec(
        "UPDATE processes SET argv = ?1 WHERE id = ?2",
        p!["a\0b", proc],
    )
    .unwrap();
    let argv: String = c
        .value("SELECT argv FROM processes WHERE id = ?1", p![proc])
        .unwrap();
    assert_eq!(argv, "a\u{2400}b");

    // Streams: numbered from 1 (0 is the empty stream, never a row).
    let s1 = c
        .insert("INSERT INTO streams DEFAULT VALUES RETURNING id", p![])
        .unwrap();
    let s2 = c
        .insert("INSERT INTO streams DEFAULT VALUES RETURNING id", p![])
        .unwrap();
    assert_eq!((s1, s2), (1, 2));

    // Bytes that are not UTF-8, both ways; every byte value.
    let hash: &[u8] = &[0xff, 0x00, 0xfe, 0x80, b'?', b'1'];
    let data: Vec<u8> = (0..=255u8).rev().collect();
    let blob = c
        .insert(
            "INSERT INTO blobs(hash, size, data) VALUES (?1, ?2, ?3) RETURNING id",
            p![hash, data.len(), &data],
        )
        .unwrap();
    let back: Option<Vec<u8>> = c
        .opt_value("SELECT data FROM blobs WHERE hash = ?1", p![hash])
        .unwrap();
    assert_eq!(back.as_deref(), Some(&data[..]));
    let got_hash: Vec<u8> = c
        .value("SELECT hash FROM blobs WHERE id = ?1", p![blob])
        .unwrap();
    assert_eq!(got_hash, hash);

    // A unique-key conflict is EEXIST (and leaves the connection usable: autocommit).
    let e = c
        .insert(
            "INSERT INTO blobs(hash, size, data) VALUES (?1, ?2, ?3) RETURNING id",
            p![hash, 1, &b"x"[..]],
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exists, "{e}");
    assert!(e.reason.contains("23505"), "{e}");
    // ON CONFLICT, as the shared SQL writes `INSERT OR IGNORE`.
    c.exec(
        "INSERT INTO blobs(hash, size, data) VALUES (?1, ?2, ?3) ON CONFLICT (hash) DO NOTHING",
        p![hash, 1, &b"x"[..]],
    )
    .unwrap();
    assert_eq!(
        c.value::<i64>("SELECT COUNT(*) FROM blobs WHERE hash = ?1", p![hash])
            .unwrap(),
        1
    );

    // Extents: "offset", NULL blob or NULL data, a visitor that stops, one that queries.
    for i in 0..5i64 {
        let inline = i % 2 == 0;
        c.exec(
            r#"INSERT INTO extents(stream, "offset", len, blob, blob_off, data)
               VALUES (?1, ?2, ?3, ?4, ?5, ?6)"#,
            p![
                s1,
                i * 10,
                10,
                (!inline).then_some(blob),
                0,
                inline.then_some(&b"\x00\xffinline!!"[..])
            ],
        )
        .unwrap();
    }
    let rows: Vec<Extent> = c
        .all(
            r#"SELECT "offset", len, blob, data FROM extents WHERE stream = ?1 ORDER BY "offset""#,
            p![s1],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[0], (0, 10, None, Some(b"\x00\xffinline!!".to_vec())));
    assert_eq!(rows[1], (10, 10, Some(blob), None));
    let end: Option<u64> = c
        .opt_value(
            r#"SELECT "offset" + len FROM extents WHERE stream = ?1 ORDER BY "offset" DESC LIMIT 1"#,
            p![s1],
        )
        .unwrap();
    assert_eq!(end, Some(50));
    assert_eq!(
        c.opt_value::<i64>(r#"SELECT "offset" FROM extents WHERE stream = ?1"#, p![s2])
            .unwrap(),
        None,
        "no row"
    );
    let mut seen = Vec::new();
    c.each(
        r#"SELECT "offset" FROM extents WHERE stream = ?1 ORDER BY "offset""#,
        p![s1],
        &mut |r| {
            seen.push(r.get::<i64>(0)?);
            Ok(if seen.len() == 2 {
                Flow::Stop
            } else {
                Flow::Next
            })
        },
    )
    .unwrap();
    assert_eq!(seen, [0, 10], "the visitor stopped after two rows");
    let mut nested = 0;
    c.each(
        r#"SELECT "offset" FROM extents WHERE stream = ?1"#,
        p![s1],
        &mut |r| {
            let off: i64 = r.get(0)?;
            nested += c.value::<i64>(
                r#"SELECT len FROM extents WHERE stream = ?1 AND "offset" = ?2"#,
                p![s1, off],
            )?;
            Ok(Flow::Next)
        },
    )
    .unwrap();
    assert_eq!(nested, 50, "statements inside a visitor");

    // Sums are numeric in PostgreSQL: read only cast to BIGINT; the error says so (even
    // over no rows, where the sum is NULL).
    let total: i64 = c
        .value(
            "SELECT CAST(SUM(len) AS BIGINT) FROM extents WHERE stream = ?1",
            p![s1],
        )
        .unwrap();
    assert_eq!(total, 50);
    for s in [s1, s2] {
        let e = c
            .value::<Option<i64>>("SELECT SUM(len) FROM extents WHERE stream = ?1", p![s])
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Failed);
        assert!(e.reason.contains("CAST"), "{e}");
    }

    // Placeholders PostgreSQL types int4, int2 or bool; int4 results.
    assert_eq!(c.value::<i64>("SELECT ?1 + 1", p![41]).unwrap(), 42);
    let e = c.value::<i64>("SELECT ?1 + 1", p![1i64 << 40]).unwrap_err();
    assert!(e.reason.contains("CAST"), "out of int4's range: {e}");
    assert_eq!(
        c.value::<i64>("SELECT CAST(?1 AS BIGINT) + 1", p![1i64 << 40])
            .unwrap(),
        (1 << 40) + 1
    );
    assert_eq!(
        c.value::<i64>("SELECT CAST(?1 AS SMALLINT) * 2", p![300])
            .unwrap(),
        600
    );
    assert_eq!(
        c.value::<i64>("SELECT length(data) FROM blobs WHERE id = ?1", p![blob])
            .unwrap(),
        256
    );
    assert_eq!(
        c.value::<i64>("SELECT COUNT(*) FROM extents WHERE ?1", p![true])
            .unwrap(),
        5
    );
    assert_eq!(
        c.value::<i64>("SELECT COUNT(*) FROM extents WHERE ?1", p![false])
            .unwrap(),
        0
    );
    let e = c
        .value::<i64>("SELECT COUNT(*) FROM extents WHERE ?1", p![2])
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Failed, "2 is no boolean: {e}");
    assert!(
        c.value::<bool>(
            "SELECT EXISTS (SELECT 1 FROM streams WHERE id = ?1)",
            p![s2]
        )
        .unwrap()
    );
    assert!(
        !c.value::<bool>("SELECT EXISTS (SELECT 1 FROM streams WHERE id = ?1)", p![0])
            .unwrap()
    );
    // A placeholder whose type PostgreSQL inferred as something else than the value.
    let e = c
        .value::<i64>("SELECT COUNT(*) FROM processes WHERE writer = ?1", p![7])
        .unwrap_err();
    assert!(e.reason.contains("inferred the type text"), "{e}");

    // `?N` inside a string literal or quoted name stays; text that is not ASCII.
    assert_eq!(
        c.value::<String>("SELECT '?1' || ?1 AS \"a?2\"", p!["é ☃"])
            .unwrap(),
        "?1é ☃"
    );

    // Nodes: the root at ino 1 given explicitly (an empty name as bytes), the next one
    // from the identity (which starts at 2).
    c.exec(
        "INSERT INTO nodes(ino, parent, name, kind, mode, uid, gid, atime_ns, mtime_ns, ctime_ns)
         VALUES (1, NULL, ?1, 'dir', 493, ?2, ?3, ?4, ?4, ?4)",
        p![&b""[..], 0u32, 0u32, 1i64],
    )
    .unwrap();
    let ino = c
        .insert(
            "INSERT INTO nodes(parent, name, kind, mode, uid, gid, atime_ns, mtime_ns, ctime_ns,
                 file_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) RETURNING ino",
            p![1, &b"f\xff"[..], "file", 420, 0, 0, 2, 2, 2, None::<i64>],
        )
        .unwrap();
    assert_eq!(ino, 2);
    let e = c
        .exec(
            "INSERT INTO nodes(parent, name, kind, mode, uid, gid, atime_ns, mtime_ns, ctime_ns)
             VALUES (?1, ?2, 'file', 420, 0, 0, 3, 3, 3)",
            p![1, &b"f\xff"[..]],
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exists, "nodes_by_name: {e}");

    // A transaction through batch: rolled back, nothing stays; committed, it stays.
    c.batch("BEGIN").unwrap();
    c.exec("INSERT INTO meta(key, value) VALUES (?1, ?2)", p!["k", "v"])
        .unwrap();
    assert_eq!(
        c.opt_value::<String>("SELECT value FROM meta WHERE key = ?1", p!["k"])
            .unwrap()
            .as_deref(),
        Some("v")
    );
    c.batch("ROLLBACK").unwrap();
    assert_eq!(
        c.opt_value::<String>("SELECT value FROM meta WHERE key = ?1", p!["k"])
            .unwrap(),
        None
    );
    c.batch("BEGIN").unwrap();
    c.exec(
        "INSERT INTO meta(key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        p!["k", "w"],
    )
    .unwrap();
    c.batch("COMMIT").unwrap();
    assert_eq!(
        c.value::<String>("SELECT value FROM meta WHERE key = ?1", p!["k"])
            .unwrap(),
        "w"
    );

    // The views: a version and an event, with their process.
    let file = c
        .insert(
            "INSERT INTO files(path) VALUES (?1) RETURNING id",
            p!["a/b.json"],
        )
        .unwrap();
    c.exec(
        "INSERT INTO versions(file_id, version, path, op, size, blake3, stream, writer,
             process, pid, time_ns)
         VALUES (?1, 1, ?2, 'write', 50, 'h', ?3, 'agent', ?4, 7, 5)",
        p![file, "a/b.json", s1, proc],
    )
    .unwrap();
    let head: (i64, String, i64) = c
        .one(
            "SELECT file_id, current_path, version FROM heads WHERE file_id = ?1",
            p![file],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(head, (file, "a/b.json".to_owned(), 1));
    assert_eq!(
        c.value::<String>("SELECT exe FROM version_log WHERE file_id = ?1", p![file])
            .unwrap(),
        "/bin/sh"
    );
    assert_eq!(
        c.value::<i64>("SELECT COUNT(*) FROM event_log", p![])
            .unwrap(),
        0
    );
    // REFERENCES processes(id) holds in PostgreSQL.
    let e = c
        .exec(
            "INSERT INTO events(time_ns, op, path, writer, process, pid)
             VALUES (1, 'unlink', 'x', 'agent', ?1, 1)",
            p![999],
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Failed, "a foreign key violation: {e}");
    assert!(e.reason.contains("23503"), "{e}");

    // A statement that does not prepare: not cached, its error names it.
    let e = c.exec("SELEC 1", p![]).unwrap_err();
    assert!(e.reason.contains("SELEC 1"), "{e}");
    let e = c.exec("SELECT no_such_column FROM meta", p![]).unwrap_err();
    assert!(e.reason.contains("42703"), "{e}");
}

#[test]
fn a_lost_connection_is_eio_saying_so() {
    let (pg, _guard) = fresh();
    let c: &dyn Conn = &pg;
    let pid: i64 = c
        .value("SELECT CAST(pg_backend_pid() AS BIGINT)", p![])
        .unwrap();
    // Ended from another connection of the same role (the server's admin shutdown of
    // one backend: 57P01, then a closed connection).
    let other = PgConn::connect(&url()).unwrap();
    let ended: bool = (&other as &dyn Conn)
        .value("SELECT pg_terminate_backend(CAST(?1 AS INT))", p![pid])
        .unwrap();
    assert!(ended);
    let mut last = None;
    for _ in 0..2 {
        let e = c.value::<i64>("SELECT 1", p![]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
        assert!(
            e.reason.contains("connection to PostgreSQL was lost"),
            "{e}"
        );
        last = Some(e);
    }
    eprintln!("after the backend was ended: {}", last.unwrap());
}

#[test]
fn a_server_that_is_not_there_is_the_sockets_errno() {
    // Port 1 on the loopback: nothing listens (connection refused at once).
    let e = PgConn::connect("postgres://someone:secretpw@127.0.0.1:1/nowhere?sslmode=disable")
        .unwrap_err();
    assert_eq!(e.errno(), libc::ECONNREFUSED, "{e}");
    assert!(e.reason.contains("127.0.0.1:1/nowhere"), "{e}");
    assert!(!e.reason.contains("secretpw"), "{e}");
}

#[test]
fn a_refused_login_is_eacces() {
    // scripts/pg's server refuses every role but scratchfs over TCP; another server may
    // accept it, so only a refusal is checked.
    let url = url();
    let Some(rest) = url.strip_prefix("postgres://scratchfs@") else {
        eprintln!("not the URL scripts/pg prints: login refusal not checked");
        return;
    };
    match PgConn::connect(&format!("postgres://postgres@{rest}")) {
        Ok(_) => eprintln!("the server let postgres in: login refusal not checked"),
        Err(e) => assert_eq!(e.kind, ErrorKind::Denied, "{e}"),
    }
}

/// A commit's version id comes with the round trip that opens its transaction
/// (`PgConn::begin_commit`): handed out once, only in that transaction, never one of an
/// earlier transaction, and the version's insert with it needs no answer.
#[test]
fn a_commit_takes_its_version_id_with_its_locks() {
    let (pg, _guard) = fresh();
    let c = &pg;
    // Before anything is sent there is none; after the first query there is one, once.
    c.begin_commit("SELECT CAST(?1 AS BIGINT)", p![1i64], false)
        .unwrap();
    assert_eq!(c.reserved_id(IdOf::Versions).unwrap(), None);
    let _: i64 = c.value("SELECT 1", p![]).unwrap();
    let id1 = c
        .reserved_id(IdOf::Versions)
        .unwrap()
        .expect("an id after the first query");
    assert_eq!(
        c.reserved_id(IdOf::Versions).unwrap(),
        None,
        "handed out twice"
    );
    c.batch("ROLLBACK").unwrap();
    // Taken but not used, then rolled back: the next transaction's is its own.
    c.begin_commit("SELECT CAST(?1 AS BIGINT)", p![1i64], false)
        .unwrap();
    let _: i64 = c.value("SELECT 1", p![]).unwrap();
    c.batch("ROLLBACK").unwrap();
    c.begin_commit("SELECT CAST(?1 AS BIGINT)", p![1i64], false)
        .unwrap();
    assert_eq!(
        c.reserved_id(IdOf::Versions).unwrap(),
        None,
        "an earlier transaction's id"
    );
    let _: i64 = c.value("SELECT 1", p![]).unwrap();
    let id2 = c.reserved_id(IdOf::Versions).unwrap().unwrap();
    assert!(id2 > id1 + 1, "{id1} then {id2}");
    // The insert with it is queued, and the row has that id once committed.
    let proc_ = new_process(c);
    c.exec(
        "INSERT INTO versions(id, file_id, version, path, op, size, blake3, stream, writer,
             process, pid, time_ns)
         VALUES (?1, 1, 1, 'a', 'create', 0, 'h', 0, 'agent', ?2, 1, 1)",
        p![id2, proc_],
    )
    .unwrap();
    c.batch("COMMIT").unwrap();
    let path: String = c
        .value("SELECT path FROM versions WHERE id = ?1", p![id2])
        .unwrap();
    assert_eq!(path, "a");
    // A transaction opened otherwise takes none.
    c.batch("BEGIN").unwrap();
    let _: i64 = c.value("SELECT 1", p![]).unwrap();
    assert_eq!(c.reserved_id(IdOf::Versions).unwrap(), None);
    c.batch("ROLLBACK").unwrap();
}

/// A commit opened on a guess (`PgConn::begin_commit(.., true)`) needs no answer before
/// its `COMMIT`: its version id is handed out as a stand-in, which a statement sent as
/// text spells `currval` of the sequence and one sent in binary (a value over 64 KiB)
/// gets as the real id, after what is queued was sent. The rows name the id the
/// transaction took, which `taken_version_id` says after the `COMMIT`.
#[test]
fn a_commit_on_a_guess_names_the_version_id_it_takes_before_the_answer() {
    let (pg, _guard) = fresh();
    let c = &pg;
    let proc_ = new_process(c);
    let insert = "INSERT INTO versions(id, file_id, version, path, op, size, blake3, stream,
             writer, process, pid, time_ns)
         VALUES (?1, 1, ?2, ?3, 'write', 0, 'h', 0, 'agent', ?4, 1, 1)";
    // An id taken and dropped first: `currval` must not name an earlier transaction's.
    // (The insert is prepared there: a statement's first use is a round trip of its own.)
    c.begin_commit("SELECT CAST(?1 AS BIGINT)", p![1i64], false)
        .unwrap();
    let _: i64 = c.value("SELECT 1", p![]).unwrap();
    let before = c.reserved_id(IdOf::Versions).unwrap().unwrap();
    c.exec(insert, p![before, 1, "dropped", proc_]).unwrap();
    c.batch("ROLLBACK").unwrap();
    // Text only: nothing is sent before the COMMIT.
    c.begin_commit("SELECT CAST(?1 AS BIGINT)", p![1i64], true)
        .unwrap();
    let id = c.reserved_id(IdOf::Versions).unwrap().unwrap();
    assert_eq!(id, PENDING_VERSION_ID);
    c.exec(insert, p![id, 1, "text", proc_]).unwrap();
    assert_eq!(c.taken_version_id(), None, "sent before the COMMIT");
    c.batch("COMMIT").unwrap();
    let taken = c.taken_version_id().expect("the id, after the COMMIT");
    assert!(taken > before, "{before} then {taken}");
    let path: String = c
        .value("SELECT path FROM versions WHERE id = ?1", p![taken])
        .unwrap();
    assert_eq!(path, "text");
    // A value too large for text goes in binary, with the real id.
    c.begin_commit("SELECT CAST(?1 AS BIGINT)", p![1i64], true)
        .unwrap();
    let id = c.reserved_id(IdOf::Versions).unwrap().unwrap();
    c.exec(insert, p![id, 2, "binary", proc_]).unwrap();
    let big = "r".repeat(70_000);
    c.exec(
        "INSERT INTO events(time_ns, op, path, version_id, reason, writer, process, pid)
         VALUES (1, 'note', 'binary', ?1, ?2, 'agent', ?3, 1)",
        p![id, big.as_str(), proc_],
    )
    .unwrap();
    let sent = c
        .taken_version_id()
        .expect("known once the binary statement is sent");
    c.batch("COMMIT").unwrap();
    assert_eq!(c.taken_version_id(), Some(sent));
    assert!(sent > taken, "{taken} then {sent}");
    let (path, reason): (String, i64) = c
        .one(
            "SELECT v.path, length(e.reason) FROM versions v JOIN events e ON e.version_id = v.id
             WHERE v.id = ?1",
            p![sent],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((path.as_str(), reason), ("binary", 70_000));
    let strays: i64 = c
        .value("SELECT COUNT(*) FROM versions WHERE id < 0", p![])
        .unwrap();
    assert_eq!(strays, 0);
}

#[test]
fn statements_of_a_transaction_are_pipelined_in_order_and_fail_it_whole() {
    let (pg, _guard) = fresh();
    let c = &pg;
    // Queued statements run before the query that sends them, in order.
    c.batch("BEGIN").unwrap();
    c.exec(
        "INSERT INTO meta(key, value) VALUES (?1, ?2)",
        p!["p1", "a"],
    )
    .unwrap();
    c.exec("UPDATE meta SET value = ?1 WHERE key = ?2", p!["b", "p1"])
        .unwrap();
    let v: String = c
        .value("SELECT value FROM meta WHERE key = ?1", p!["p1"])
        .unwrap();
    assert_eq!(v, "b");
    c.batch("COMMIT").unwrap();
    // A queued statement that fails: the next call that sends it is the error, naming
    // it, and nothing of the transaction stays.
    c.batch("BEGIN").unwrap();
    c.exec(
        "INSERT INTO meta(key, value) VALUES (?1, ?2)",
        p!["p2", "x"],
    )
    .unwrap();
    c.exec(
        "INSERT INTO meta(key, value) VALUES (?1, ?2)",
        p!["p1", "dup"],
    )
    .unwrap();
    let e = c.batch("COMMIT").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exists, "{e}");
    assert!(e.reason.contains("INSERT INTO meta"), "{e}");
    let _ = c.batch("ROLLBACK");
    let n: i64 = c
        .value("SELECT COUNT(*) FROM meta WHERE key = ?1", p!["p2"])
        .unwrap();
    assert_eq!(n, 0, "a failed transaction left a row");
    // The same failure before a query: the query's call is the error.
    c.batch("BEGIN").unwrap();
    c.exec(
        "INSERT INTO meta(key, value) VALUES (?1, ?2)",
        p!["p1", "dup"],
    )
    .unwrap();
    let e = c
        .value::<i64>("SELECT COUNT(*) FROM meta", p![])
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exists, "{e}");
    c.batch("ROLLBACK").unwrap();
    // ROLLBACK drops what was never sent; the connection is clean after it.
    c.batch("BEGIN").unwrap();
    c.exec(
        "INSERT INTO meta(key, value) VALUES (?1, ?2)",
        p!["p3", "never"],
    )
    .unwrap();
    c.batch("ROLLBACK").unwrap();
    let n: i64 = c
        .value("SELECT COUNT(*) FROM meta WHERE key = ?1", p!["p3"])
        .unwrap();
    assert_eq!(n, 0);
    // Outside a transaction a statement is sent at once: its error is its own call's.
    let e = c
        .exec(
            "INSERT INTO meta(key, value) VALUES (?1, ?2)",
            p!["p1", "dup"],
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exists, "{e}");
}

#[test]
fn values_spelled_as_literals_in_a_transaction_come_back_exactly() {
    let (pg, _guard) = fresh();
    let c = &pg;
    let texts = [
        "it's",
        "back\\slash",
        "\\x41",
        "'); DROP TABLE meta; --",
        "E'\\'",
        "ünïcødé ☃ 𝄞",
        "$1 ?1 $$",
        "line\nfeed\ttab\r",
        "",
    ];
    let before: i64 = c.value("SELECT COUNT(*) FROM meta", p![]).unwrap();
    // A statement's first use prepares it, which sends what is queued: these are used once
    // before the transaction, so that in it each query follows queued statements.
    let _: Option<String> = c
        .opt_value("SELECT value FROM meta WHERE key = ?1", p!["k0"])
        .unwrap();
    // Queued inside a transaction (small parameters: simple-query text), then read by a
    // query that follows them in the same message, then read again outside it.
    c.batch("BEGIN").unwrap();
    for (i, t) in texts.iter().enumerate() {
        c.exec(
            "INSERT INTO meta(key, value) VALUES (?1, ?2)",
            p![format!("k{i}").as_str(), *t],
        )
        .unwrap();
    }
    // Each value read back as it was written.
    let read_back = |when: &str| {
        for (i, t) in texts.iter().enumerate() {
            let v: String = c
                .value(
                    "SELECT value FROM meta WHERE key = ?1",
                    p![format!("k{i}").as_str()],
                )
                .unwrap();
            assert_eq!(v, *t, "{when}");
        }
    };
    read_back("in the transaction");
    // Integers where PostgreSQL inferred int4 and bool, NULL, and each column type read
    // from its text form (after a queued statement, so in its message).
    let row_of = |r: &dyn Row| {
        Ok((
            r.get::<i64>(0)?,
            r.get::<i64>(1)?,
            r.get::<Option<String>>(2)?,
            r.get::<i64>(3)?,
            r.get::<i64>(4)?,
            r.get::<String>(5)?,
        ))
    };
    let _ = c.all(
        "SELECT ?1 + 1, ?2::bigint, NULL::text, ?3 AND true, 7::smallint, 'lit'",
        p![41i64, i64::MIN, 1i64],
        row_of,
    );
    c.exec("UPDATE meta SET value = value WHERE key = ?1", p!["k0"])
        .unwrap();
    let row = c
        .all(
            "SELECT ?1 + 1, ?2::bigint, NULL::text, ?3 AND true, 7::smallint, 'lit'",
            p![41i64, i64::MIN, 1i64],
            row_of,
        )
        .unwrap();
    assert_eq!(
        row,
        vec![(42, i64::MIN, None, 1, 7, "lit".to_owned())],
        "in the transaction"
    );
    // Every byte value, as bytes.
    let bytes: Vec<u8> = (0..=255u8).collect();
    c.exec(
        "INSERT INTO blobs(hash, size, data) VALUES (?1, ?2, ?3)",
        p![b"all".as_slice(), 256i64, bytes.as_slice()],
    )
    .unwrap();
    c.batch("COMMIT").unwrap();
    // The path above was the named statements' (what the test is about).
    let named: i64 = c
        .value(
            "SELECT COUNT(*) FROM pg_prepared_statements WHERE name LIKE 'scratchfs_%'
             AND statement NOT LIKE '%pg_advisory_xact_lock_shared%'",
            p![],
        )
        .unwrap();
    let statements: Vec<String> = c
        .all(
            "SELECT statement FROM pg_prepared_statements WHERE name LIKE 'scratchfs_%'",
            p![],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(named, 5, "statements prepared by name: {statements:?}");
    read_back("committed");
    let back: Vec<u8> = c
        .value(
            "SELECT data FROM blobs WHERE hash = ?1",
            p![b"all".as_slice()],
        )
        .unwrap();
    assert_eq!(back, bytes);
    let n: i64 = c.value("SELECT COUNT(*) FROM meta", p![]).unwrap();
    assert_eq!(n, before + texts.len() as i64);
    // What does not fit is refused at the call, as in the extended protocol, and the
    // transaction can still be rolled back.
    c.batch("BEGIN").unwrap();
    let e = c
        .exec(
            "UPDATE meta SET value = 'x' WHERE length(value) = ?1",
            p![i64::from(i32::MAX) + 1],
        )
        .unwrap_err();
    assert!(e.reason.contains("does not fit"), "{e}");
    c.batch("ROLLBACK").unwrap();
    let n: i64 = c.value("SELECT COUNT(*) FROM meta", p![]).unwrap();
    assert_eq!(n, before + texts.len() as i64);
    // PostgreSQL's text cannot hold a NUL: it is stored as U+2400, in a transaction
    // (spelled as a literal) and outside one (sent in binary) alike, not refused (the
    // write, or a refusal's record, would be lost).
    c.batch("BEGIN").unwrap();
    c.exec(
        "INSERT INTO meta(key, value) VALUES (?1, ?2)",
        p!["nul1", "a\0b'\0"],
    )
    .unwrap();
    c.batch("COMMIT").unwrap();
    c.exec(
        "INSERT INTO meta(key, value) VALUES (?1, ?2)",
        p!["nul2", "a\0b'\0"],
    )
    .unwrap();
    for key in ["nul1", "nul2"] {
        let v: String = c
            .value("SELECT value FROM meta WHERE key = ?1", p![key])
            .unwrap();
        assert_eq!(v, "a\u{2400}b'\u{2400}", "{key}");
    }
}
