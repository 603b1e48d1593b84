//! A fork with its history, backend-neutral (issues 14 and 15; docs/checkpoints.md): every
//! row of the source copied into the new database's empty schema ([`copy_tables`]), then
//! cut back to the point ([`trim`]): everything made after it goes (versions, events,
//! namespace rows, checkpoints, rules), the live tree becomes the tree at the point, and
//! the content nothing refers to any more is dropped. Ids are kept, so `.history`, `log`,
//! `why` and the checkpoints before the point read the same in the fork.
//!
//! SQLite to SQLite copies the file instead (`VACUUM INTO`, `store::sqlite::fork`) and
//! trims with the same [`trim`]; a fork from or to PostgreSQL copies rows.

use super::{Conn, ConnExt, Dialect, Flow, Param, Value};
use crate::checkpoint::Point;
use crate::p;
use crate::store::ContentRef;
use crate::store::error::{Result, StoreError};

/// Every table of the schema (docs/schema.md), in an order that inserts a row after the
/// rows it references (`processes` first: PostgreSQL enforces `REFERENCES processes(id)`).
/// [`copy_tables`] refuses a schema with a table this list lacks: it would be lost.
pub const TABLES: &[&str] = &[
    "meta",
    "processes",
    "nodes",
    "files",
    "blobs",
    "streams",
    "extents",
    "versions",
    "events",
    "fields",
    "inputs",
    "reads",
    "rules",
    "tree_log",
    "checkpoints",
    "forgotten",
    "origins",
];

/// Tables that hold no history, only what one operation needs for a moment (PostgreSQL's
/// gc asking the daemons what they have open, `gc_pins` and `gc_acks`) or who is there now
/// (PostgreSQL's `daemons`): never copied.
pub const TRANSIENT: &[&str] = &["gc_pins", "gc_acks", "daemons"];

/// Rows sent before the copy waits for the server (PostgreSQL queues statements without
/// results: the queue is drained this often, and after [`FLUSH_BYTES`] of values).
const FLUSH_ROWS: usize = 2_000;
/// Bytes of values sent before the copy waits for the server.
const FLUSH_BYTES: usize = 16 << 20;

/// The base tables of `conn`'s schema, by name.
fn tables_of(conn: &dyn Conn) -> Result<Vec<String>> {
    let sql = match conn.dialect() {
        Dialect::Sqlite => {
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
             ORDER BY name"
        }
        Dialect::Postgres => {
            "SELECT CAST(table_name AS TEXT) FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
             ORDER BY table_name"
        }
    };
    conn.all(sql, p![], |r| r.get(0))
}

/// The columns of `table` in `conn`'s schema, in order: (name, declared type, lowercase).
fn columns_of(conn: &dyn Conn, table: &str) -> Result<Vec<(String, String)>> {
    let sql = match conn.dialect() {
        Dialect::Sqlite => "SELECT name, lower(type) FROM pragma_table_info(?1) ORDER BY cid",
        Dialect::Postgres => {
            "SELECT CAST(column_name AS TEXT), CAST(data_type AS TEXT)
             FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name = ?1
             ORDER BY ordinal_position"
        }
    };
    conn.all(sql, p![table], |r| Ok((r.get(0)?, r.get(1)?)))
}

/// Copies every row of every table of `src` into the same table of `dst`, whose schema is
/// there and whose tables this empties first; both inside the transactions the caller
/// opened (`src`'s a consistent snapshot). Returns the rows copied. Errors: `EIO` when
/// `dst`'s schema has a table [`TABLES`] lacks or lacks one of them, when a column of
/// `dst` is not in `src`, or when a value does not fit its column (an integer column
/// holding text); the backends' errors otherwise. Memory: a window of rows of `src` at a
/// time ([`each_row`]) and the destination's queue (bounded).
pub fn copy_tables(src: &dyn Conn, dst: &dyn Conn) -> Result<u64> {
    let mut have = tables_of(dst)?;
    have.retain(|t| !TRANSIENT.contains(&t.as_str()));
    have.sort();
    let mut want: Vec<String> = TABLES.iter().map(|t| t.to_string()).collect();
    want.sort();
    if have != want {
        return Err(StoreError::failed(format!(
            "fork: the new database's tables ({}) are not the ones a fork copies ({})",
            have.join(", "),
            want.join(", ")
        )));
    }
    for t in TABLES.iter().rev() {
        dst.exec(&format!("DELETE FROM {t}"), p![])?;
    }
    let mut copied = 0u64;
    for t in TABLES {
        let cols = columns_of(dst, t)?;
        let names: Vec<String> = cols.iter().map(|(n, _)| format!("\"{n}\"")).collect();
        let select = format!("SELECT {} FROM {t}", names.join(", "));
        let holes: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
        let insert = format!(
            "INSERT INTO {t}({}) VALUES ({})",
            names.join(", "),
            holes.join(", ")
        );
        let (mut rows, mut bytes) = (0usize, 0usize);
        each_row(src, t, &select, &mut |r| {
            let mut params = Vec::with_capacity(cols.len());
            for (i, (name, ty)) in cols.iter().enumerate() {
                let v = r.value(i)?;
                bytes += match v {
                    Value::Text(s) => s.len(),
                    Value::Blob(b) => b.len(),
                    _ => 8,
                };
                params.push(
                    fit(v, ty)
                        .map_err(|why| StoreError::failed(format!("fork: {t}.{name}: {why}")))?,
                );
            }
            dst.exec(&insert, &params)?;
            rows += 1;
            copied += 1;
            if rows % FLUSH_ROWS == 0 || bytes >= FLUSH_BYTES {
                bytes = 0;
                dst.value::<i64>("SELECT 1", p![])?;
            }
            Ok(Flow::Next)
        })?;
    }
    Ok(copied)
}

/// Rows a PostgreSQL source is read in at a time: a client reads a statement's rows
/// whole, so the source is read through a cursor, [`CURSOR_ROWS`] rows a fetch, and
/// [`CURSOR_BLOB_ROWS`] from `blobs` (rows of up to a chunk, 1 MiB, each: 16 MiB).
const CURSOR_ROWS: usize = 512;
/// See [`CURSOR_ROWS`].
const CURSOR_BLOB_ROWS: usize = 16;

/// Visits every row `select` (of table `table`) gives on `src`: from SQLite as the rows
/// come; from PostgreSQL through a cursor in the snapshot transaction, a window of rows
/// at a time ([`CURSOR_ROWS`]), so memory stays bounded whatever the table holds.
fn each_row(
    src: &dyn Conn,
    table: &str,
    select: &str,
    f: &mut dyn FnMut(&dyn super::Row) -> Result<Flow>,
) -> Result<()> {
    if src.dialect() == Dialect::Sqlite {
        return src.each(select, p![], f);
    }
    let window = if table == "blobs" {
        CURSOR_BLOB_ROWS
    } else {
        CURSOR_ROWS
    };
    // A cursor named by its table: the client prepares each statement once by its text,
    // with the columns it gave then, so each table's FETCH must be a text of its own.
    let cursor = format!("fork_{table}");
    src.batch(&format!("DECLARE {cursor} NO SCROLL CURSOR FOR {select}"))?;
    loop {
        let (mut got, mut stop) = (0usize, false);
        src.each(&format!("FETCH {window} FROM {cursor}"), p![], &mut |r| {
            got += 1;
            let flow = f(r)?;
            stop = matches!(flow, Flow::Stop);
            Ok(flow)
        })?;
        if got < window || stop {
            break;
        }
    }
    src.batch(&format!("CLOSE {cursor}"))
}

/// `v` as a parameter for a column of declared type `ty` (lowercase): SQLite's dynamic
/// types meet PostgreSQL's declared ones (text in a `bytea` column is its bytes).
fn fit<'a>(v: Value<'a>, ty: &str) -> std::result::Result<Param<'a>, String> {
    Ok(match (v, ty) {
        (Value::Null, _) => Param::Null,
        (Value::Text(s), "bytea") => Param::Blob(s.as_bytes()),
        (Value::Blob(b), "text") => Param::Text(
            std::str::from_utf8(b).map_err(|_| "bytes that are not UTF-8 in a text column")?,
        ),
        (Value::Text(_) | Value::Blob(_), "bigint") => {
            return Err("a text or bytes value in an integer column".into());
        }
        (Value::Int(i), _) => Param::Int(i),
        (Value::Text(s), _) => Param::Text(s),
        (Value::Blob(b), _) => Param::Blob(b),
    })
}

/// Moves every identity's sequence of `tx`'s schema past the highest value copied into
/// it (PostgreSQL; docs/schema.md: an identity does not move past explicit values). Does
/// nothing on SQLite, which numbers from the highest row.
pub fn move_identities(tx: &dyn Conn) -> Result<()> {
    if tx.dialect() != Dialect::Postgres {
        return Ok(());
    }
    let ids: Vec<(String, String)> = tx.all(
        "SELECT CAST(table_name AS TEXT), CAST(column_name AS TEXT)
         FROM information_schema.columns
         WHERE table_schema = current_schema() AND is_identity = 'YES'",
        p![],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    for (t, c) in ids {
        tx.each(
            &format!(
                "SELECT setval(pg_get_serial_sequence('{t}', '{c}'), MAX(\"{c}\"))
                 FROM {t} HAVING MAX(\"{c}\") IS NOT NULL"
            ),
            p![],
            &mut |_| Ok(Flow::Next),
        )?;
    }
    Ok(())
}

/// Cuts a full copy of a scratchpad back to `p` (inside `tx`): what was made after it
/// goes, the tree becomes the tree then, checkpoints with an id above `max_cp` (or made
/// after it) go, and `meta` is the fork's: a new `scratchpad_id` (from `place`, where the
/// fork is), `forked_from` (JSON), no mountpoint, socket, gc or rollback marks.
pub fn trim(tx: &dyn Conn, p: Point, max_cp: i64, forked_from: &str, place: &str) -> Result<()> {
    let (t, v, e, seq) = (p.time_ns, p.version_seq, p.event_seq, p.tree_seq);
    // Lineages whose per-key provenance names versions that go.
    let touched: Vec<i64> = tx.all(
        "SELECT DISTINCT file_id FROM versions WHERE id > ?1",
        p![v],
        |r| r.get(0),
    )?;
    tx.exec("DELETE FROM versions WHERE id > ?1", p![v])?;
    // The text indexes name versions by id, and SQLite numbers the fork's next versions
    // from its highest row: an index row of a version cut here would be taken for a
    // later version's. Dropped; the fork's first search builds them again.
    tx.batch("DROP TABLE IF EXISTS text_index; DROP TABLE IF EXISTS text_indexed")?;
    crate::store::sql::history_index::drop_all(tx)?;
    tx.exec("DELETE FROM forgotten WHERE version_id > ?1", p![v])?;
    tx.exec("DELETE FROM inputs WHERE version_id > ?1", p![v])?;
    tx.exec("DELETE FROM origins WHERE version_id > ?1", p![v])?;
    tx.exec("DELETE FROM reads WHERE version_id > ?1", p![v])?;
    tx.exec("DELETE FROM events WHERE id > ?1", p![e])?;
    tx.exec("DELETE FROM tree_log WHERE id > ?1", p![seq])?;
    tx.exec(
        "DELETE FROM checkpoints WHERE id > ?1 OR time_ns > ?2",
        p![max_cp, t],
    )?;
    tx.exec(
        "UPDATE checkpoints SET dropped_ns = NULL WHERE dropped_ns > ?1",
        p![t],
    )?;
    tx.exec("DELETE FROM rules WHERE time_ns > ?1", p![t])?;
    // Nodes: those made after the point go; every other takes its state then.
    tx.exec(
        "DELETE FROM nodes WHERE NOT EXISTS (SELECT 1 FROM tree_log t WHERE t.ino = nodes.ino)
             AND (unlinked_ns IS NULL OR unlinked_ns > ?1)",
        p![t],
    )?;
    tx.exec(
        "INSERT INTO nodes(ino, parent, name, kind, mode, uid, gid, atime_ns, mtime_ns, ctime_ns,
             file_id, unlinked_ns)
         SELECT ino, CASE WHEN parent = 0 THEN NULL ELSE parent END, name, kind, mode, uid, gid,
                time_ns, time_ns, time_ns, file_id,
                CASE WHEN parent IS NULL THEN time_ns END
         FROM tree_log WHERE id IN (SELECT MAX(id) FROM tree_log GROUP BY ino)
         ON CONFLICT(ino) DO UPDATE SET parent = excluded.parent, name = excluded.name,
             mode = excluded.mode, uid = excluded.uid, gid = excluded.gid,
             atime_ns = excluded.atime_ns, mtime_ns = excluded.mtime_ns,
             ctime_ns = excluded.ctime_ns, file_id = excluded.file_id,
             unlinked_ns = excluded.unlinked_ns, mtime_pinned = 0",
        p![],
    )?;
    // Lineages: those begun after the point go; those live then are live, under their
    // path then; the others end as they had by then.
    tx.exec(
        // `NOT EXISTS`, not `NOT IN`: PostgreSQL hashes a `NOT IN` list only while it
        // fits `work_mem`, else reads the list again for each row.
        "DELETE FROM files WHERE NOT EXISTS (SELECT 1 FROM versions v WHERE v.file_id = files.id)
             AND NOT EXISTS (SELECT 1 FROM tree_log t WHERE t.file_id = files.id)",
        p![],
    )?;
    let snap = crate::checkpoint::Snapshot::from_nodes(super::checkpoint::snapshot_rows(tx, p)?);
    let mut live = std::collections::HashSet::new();
    for (path, n) in snap.walk() {
        if let Some(fid) = n.file_id {
            live.insert(fid);
            tx.exec(
                "UPDATE files SET deleted_ns = NULL, merged_into = NULL, path = ?1 WHERE id = ?2",
                p![&path, fid],
            )?;
        }
    }
    let ended: Vec<i64> = tx.all(
        "SELECT id FROM files WHERE deleted_ns IS NULL OR deleted_ns > ?1",
        p![t],
        |r| r.get(0),
    )?;
    for fid in ended.into_iter().filter(|f| !live.contains(f)) {
        tx.exec(
            "UPDATE files SET merged_into = NULL,
                 deleted_ns = COALESCE((SELECT MAX(time_ns) FROM events
                                        WHERE file_id = ?1 AND op = 'unlink'), ?2)
             WHERE id = ?1",
            p![fid, t],
        )?;
    }
    // Per-key provenance of the lineages that lost versions, from their versions left.
    for fid in touched {
        tx.exec("DELETE FROM fields WHERE file_id = ?1", p![fid])?;
        let versions: Vec<(i64, String, ContentRef)> = tx.all(
            "SELECT id, path, stream, size FROM versions WHERE file_id = ?1 ORDER BY version",
            p![fid],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    ContentRef {
                        stream: r.get(2)?,
                        len: r.get::<i64>(3)? as u64,
                    },
                ))
            },
        )?;
        let mut before = None;
        for (id, path, content) in versions {
            super::write::update_fields(tx, fid, &path, before, content, id)?;
            before = Some(content);
        }
    }
    super::admin::sweep_content(tx, &[])?;
    tx.exec(
        "DELETE FROM meta WHERE key IN ('mountpoint', 'mcp_socket', 'last_gc', 'last_rollback')",
        p![],
    )?;
    let mut keys = vec![
        ("scratchpad_id", super::new_scratchpad_id(place)),
        ("forked_from", forked_from.to_string()),
    ];
    if tx.dialect() == Dialect::Sqlite {
        // The fork's redo log starts empty.
        keys.push(("redo_seq", "0".to_string()));
    }
    for (k, val) in keys {
        tx.exec(
            "INSERT INTO meta(key, value) VALUES (?1, ?2)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            p![k, &val],
        )?;
    }
    Ok(())
}
