//! Transactions that erase history: gc (forgetting versions) and redact (removing a
//! secret from every version that holds it); the latest such events for MANIFEST.

use std::collections::{BTreeSet, HashMap};

use super::now_ns;
use crate::identity::Caller;
use crate::p;
use crate::store::error::{ErrorKind, Result, StoreError};
use crate::store::sql::Dialect;
use crate::store::sql::content::*;
use crate::store::sql::write::*;
use crate::store::sql::{Conn, ConnExt};
use crate::store::{ContentRef, GcReport, GcRequest, RedactReport, RefusalInfo};

/// After a stream was cut back to its longest reference (`temp.gc_streams`): a stream whose
/// kept content ends in a hole gets its one-byte zero extent at its last byte again, so
/// that its last extent still ends at its longest version (docs/schema.md, "Content
/// model"; an append must never extend a stream a longer version still reads as zeros).
const END_MARKERS: &str = r#"INSERT INTO extents(stream, "offset", len, blob, blob_off, data)
     SELECT s.stream, s.len - 1, 1, NULL, 0, ?1
     FROM (SELECT stream, MAX(len) AS len FROM gc_streams GROUP BY stream) s
     WHERE s.len > 0 AND s.stream != 0
       AND COALESCE((SELECT MAX(e."offset" + e.len) FROM extents e WHERE e.stream = s.stream), 0) < s.len"#;

/// (Re)creates the temporary table `name` of this connection with `definition` (the
/// column list in parentheses, or `AS SELECT ...`), for the open transaction: on SQLite a
/// connection that lives on keeps an earlier run's (a committed gc keeps them, a rolled
/// back dry run does not); on PostgreSQL it is dropped at the transaction's end
/// (`ON COMMIT DROP`), since through a pooler in transaction mode the server's session
/// serves other clients next (`store::postgres::pooler`).
pub(super) fn temp_table(tx: &dyn Conn, name: &str, definition: &str) -> Result<()> {
    match tx.dialect() {
        Dialect::Sqlite => tx.batch(&format!(
            "DROP TABLE IF EXISTS temp.{name}; CREATE TEMP TABLE {name} {definition}"
        )),
        Dialect::Postgres => {
            let d = definition.trim_start();
            let (columns, query) = match d.strip_prefix("AS") {
                Some(q) if q.starts_with(char::is_whitespace) => ("", format!(" AS{q}")),
                _ => (definition, String::new()),
            };
            tx.batch(&format!(
                "DROP TABLE IF EXISTS pg_temp.{name}; \
                 CREATE TEMP TABLE {name} {columns} ON COMMIT DROP{query}"
            ))
        }
    }
}

/// Gives PostgreSQL's planner the row counts of the temporary `tables` once filled
/// (autovacuum never analyzes a temporary table: without statistics the planner guesses
/// thousands of rows, and chose a scan of every extent, and JIT compilation, for each of
/// the policy's batches). No-op on SQLite.
pub(super) fn analyze(tx: &dyn Conn, tables: &[&str]) -> Result<()> {
    if tx.dialect() == Dialect::Postgres {
        tx.batch(&format!("ANALYZE {}", tables.join(", ")))?;
    }
    Ok(())
}

/// Marks the end of each stream cut back by a sweep ([`END_MARKERS`]).
fn end_markers(tx: &dyn Conn) -> Result<()> {
    tx.exec(END_MARKERS, p![&[0u8][..]])?;
    Ok(())
}

/// Forgets old versions and the content only they held (see `scratchfs gc`). Never: the
/// current version of any file, the versions `shown` (ids: those MANIFEST's `restorable:`
/// list points at, which only the caller knows: it leaves temporaries out), versions
/// per-key provenance names, the content of every file at every checkpoint not dropped
/// (issue 14), and the bytes of `protected` `(stream, len)` (content open handles still
/// read).
/// The report is also stored as `meta.last_gc` (JSON), and a run that is not a dry run is
/// an event (op `gc`) by `caller`, whose reason says what it forgot (issue 9: every gc
/// run is on record). Runs inside the caller's transaction, which commits it (or rolls a
/// dry run back and then stores the report with [`note_gc`]).
pub(crate) fn gc_in(
    tx: &dyn Conn,
    req: &GcRequest,
    shown: &[i64],
    protected: &[(i64, u64)],
    caller: &Caller,
) -> Result<GcReport> {
    if tx.dialect() == Dialect::Postgres {
        // As the policy's batches (`policy::forget_in`): no JIT compilation of statements
        // whose estimates cross `jit_above_cost`, no NOTICE per `DROP TABLE IF EXISTS`.
        tx.batch("SET LOCAL jit = off; SET LOCAL client_min_messages = warning")?;
    }
    temp_table(tx, "gc_keep", "(id BIGINT PRIMARY KEY)")?;
    temp_table(tx, "gc_drop", "(id BIGINT PRIMARY KEY)")?;
    // Protected versions.
    tx.exec("INSERT INTO gc_keep
         SELECT id FROM versions v WHERE version = (SELECT MAX(version) FROM versions w WHERE w.file_id = v.file_id)
         UNION SELECT version_id FROM fields", p![])?;
    for id in shown {
        tx.exec(
            "INSERT INTO gc_keep(id) VALUES (?1) ON CONFLICT DO NOTHING",
            p![id],
        )?;
    }
    // Each checkpoint's content (issue 14): what every file held at it.
    crate::store::sql::checkpoint::gc_keep_checkpoints(tx)?;
    analyze(tx, &["gc_keep"])?;
    // A version's rank in its lineage, newest first, by one sort of the versions (a count
    // of the newer versions of each was quadratic in a lineage's length: a log of 20,000
    // appends cost 200,000,000 index reads). `NOT EXISTS`, not `NOT IN`: PostgreSQL
    // hashes a `NOT IN` list only while it fits `work_mem`, else reads it once a row.
    tx.exec(
        "INSERT INTO gc_drop
         SELECT r.id FROM (
             SELECT v.id, v.time_ns,
                    ROW_NUMBER() OVER (PARTITION BY v.file_id ORDER BY v.version DESC) AS rank
             FROM versions v) r
         WHERE NOT EXISTS (SELECT 1 FROM gc_keep k WHERE k.id = r.id)
           AND ((CAST(?1 AS BIGINT) IS NOT NULL AND r.rank > ?1)
             OR (CAST(?2 AS BIGINT) IS NOT NULL AND r.time_ns < ?2))",
        p![req.keep_last.map(|n| n as i64), req.before_ns],
    )?;
    analyze(tx, &["gc_drop"])?;
    let versions: i64 = tx.value("SELECT COUNT(*) FROM gc_drop", p![])?;
    // What the tree at a past time can no longer show (issue 14).
    tx.exec(
        "INSERT INTO forgotten(version_id, file_id, version, time_ns)
         SELECT id, file_id, version, time_ns FROM versions WHERE id IN (SELECT id FROM gc_drop)
         ON CONFLICT DO NOTHING",
        p![],
    )?;
    tx.exec(
        "DELETE FROM versions WHERE id IN (SELECT id FROM gc_drop)",
        p![],
    )?;
    // What a forgotten version was made from goes with it; a kept version's input that
    // gc forgot stays named by its id (`why` says "forgotten by gc").
    tx.exec(
        "DELETE FROM inputs WHERE version_id IN (SELECT id FROM gc_drop)",
        p![],
    )?;
    // The history index holds a copy of what gc forgets.
    crate::store::sql::history_index::forget(tx, "gc_drop")?;
    let (blob_bytes, inline_bytes) = sweep_content(tx, protected)?;
    let report = GcReport {
        versions: versions as u64,
        blob_bytes: blob_bytes as u64,
        inline_bytes: inline_bytes as u64,
        dry_run: req.dry_run,
    };
    tx.exec("INSERT INTO meta(key, value) VALUES ('last_gc', ?1) ON CONFLICT(key) DO UPDATE SET value = excluded.value", p![&serde_json::to_string(&report).unwrap_or_default()])?;
    let proc_ = Proc {
        id: process_id(tx, caller)?,
        pid: caller.pid,
        writer: caller.writer.clone(),
    };
    let mut selected = Vec::new();
    if let Some(n) = req.keep_last {
        selected.push(format!("keep_last {n}"));
    }
    if let Some(t) = req.before_ns {
        selected.push(format!("before_ns {t}"));
    }
    insert_event(
        tx,
        "gc",
        "",
        None,
        None,
        None,
        None,
        Some(&format!(
            "gc ({}) by uid {}: forgot {} version{} and {} bytes of content",
            selected.join(", "),
            caller.uid,
            report.versions,
            if report.versions == 1 { "" } else { "s" },
            report.blob_bytes + report.inline_bytes
        )),
        None,
        &proc_,
        now_ns(),
    )?;
    // What each forgotten version's `forgotten` row names as the run that forgot it
    // (issue 36: `restore` of it says which and when). This transaction's event: the
    // newest gc event it can see is its own.
    tx.exec(
        "UPDATE forgotten SET event_id = (SELECT MAX(id) FROM events WHERE op = 'gc')
         WHERE version_id IN (SELECT id FROM gc_drop)",
        p![],
    )?;
    Ok(report)
}

/// Stores `report` as `meta.last_gc` (after a dry run, whose transaction was rolled back).
pub(crate) fn note_gc(conn: &dyn Conn, report: &GcReport) -> Result<()> {
    conn.exec(
        "INSERT INTO meta(key, value) VALUES ('last_gc', ?1)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        p![&serde_json::to_string(report).unwrap_or_default()],
    )?;
    Ok(())
}

/// Redacts version `number` of file `file_id` (SPEC §10 `redact`): every well-known
/// secret in it is replaced by a marker naming the pattern and the secret's blake3
/// ([`crate::rules::enforce::redact_secrets`]), and so is every secret the patterns know
/// in the other versions of that file and the refusals recorded at `path`, and every
/// copy, byte for byte, of one of those secrets anywhere else in the store (another
/// lineage's version, a refusal at another path: a file renamed over another keeps its
/// content, a copy repeats it). Every version and refusal whose content shares a stream
/// with such a secret moves to a stream of its own, so that no byte of one stays
/// referenced; content no longer referenced is deleted, and the rows get their content's
/// size and blake3. An event (op `redact`) records who did it and `why`. `EINVAL` when
/// the version holds no secret, `ENOENT` when there is no such version. The caller then
/// rewrites the file (VACUUM) and empties the WAL and the redo log ([`Sqlite::redact`]).
/// Reads every stream of the store once (step 2). Runs inside the caller's transaction.
pub(crate) fn redact_in(
    tx: &dyn Conn,
    file_id: i64,
    number: i64,
    path: &str,
    why: &str,
    caller: &Proc,
) -> Result<RedactReport> {
    let (stream, size): (i64, i64) = tx
        .opt(
            "SELECT stream, size FROM versions WHERE file_id = ?1 AND version = ?2",
            p![file_id, number],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        .ok_or_else(|| {
            StoreError::new(
                ErrorKind::NotFound,
                format!("{path}@{number}: no such version"),
            )
        })?;
    let content = read_all(
        tx,
        ContentRef {
            stream,
            len: size as u64,
        },
    )?;
    let secrets = crate::rules::enforce::secrets_found(&content);
    if secrets.is_empty() {
        return Err(StoreError::new(
            ErrorKind::Invalid,
            format!("{path}@{number}: holds no secret the deny_secrets patterns know"),
        ));
    }
    // 1. The file's versions and the refusals at its path: each stream that holds a
    //    secret the patterns know anywhere in its bytes (a shorter version shares its
    //    stream with a longer one, whose bytes stay past its end).
    let own: BTreeSet<i64> = tx
        .all(
            "SELECT stream FROM versions WHERE file_id = ?1
             UNION SELECT stream FROM events WHERE path = ?2 AND stream IS NOT NULL",
            p![file_id, path],
            |r| r.get::<i64>(0),
        )?
        .into_iter()
        .collect();
    let mut dirty: BTreeSet<i64> = BTreeSet::new();
    let mut found = secrets.clone();
    for &stream in own.iter().filter(|&&s| s != EMPTY_STREAM) {
        let len = stream_end(tx, stream)?;
        let in_it =
            crate::rules::enforce::secrets_found(&read_all(tx, ContentRef { stream, len })?);
        if !in_it.is_empty() {
            dirty.insert(stream);
            found.extend(in_it);
        }
    }
    // 2. Every other stream holding one of those secrets, byte for byte: the same content
    //    on another lineage (a file renamed over another keeps its stream), a copy, a
    //    refusal at another path. The whole store is read, a piece at a time.
    let known = crate::rules::enforce::KnownSecrets::new(found);
    // The reason given may quote the secret (`--why "leaked AKIA..."`).
    let why = String::from_utf8_lossy(&known.redact(why.as_bytes())).into_owned();
    let all: Vec<i64> = tx.all(
        "SELECT stream FROM versions UNION SELECT stream FROM events WHERE stream IS NOT NULL",
        p![],
        |r| r.get::<i64>(0),
    )?;
    for stream in all {
        if stream != EMPTY_STREAM && !own.contains(&stream) && stream_holds(tx, stream, &known)? {
            dirty.insert(stream);
        }
    }
    // The text indexes (`text_index.rs`, `history_index.rs`) hold their text, a copy too:
    // dropped whole (the daemons notice, and the next search builds it again).
    tx.batch("DROP TABLE IF EXISTS text_index; DROP TABLE IF EXISTS text_indexed")?;
    crate::store::sql::history_index::drop_all(tx)?;
    // 3. Every version and refusal on such a stream, whoever's, gets its content redacted
    //    into a new stream (one per stream and length), so that nothing refers to the old
    //    one: a version whose own bytes hold no secret moves too.
    let mut report = RedactReport {
        kinds: secrets.iter().map(|(k, _)| k.to_string()).collect(),
        ..Default::default()
    };
    report.kinds.dedup();
    // (stream, length) -> (new stream, new length, its blake3, whether bytes changed).
    let mut redacted: HashMap<(i64, i64), (i64, i64, String, bool)> = HashMap::new();
    for &stream in &dirty {
        let rows = tx.all(
            "SELECT 'versions', id, size, file_id FROM versions WHERE stream = ?1
             UNION ALL SELECT 'events', id, size, file_id FROM events WHERE stream = ?1",
            p![stream],
            |r| {
                Ok((
                    r.get::<String>(0)? == "versions",
                    r.get::<i64>(1)?,
                    r.get::<i64>(2)?,
                    r.get::<Option<i64>>(3)?,
                ))
            },
        )?;
        for (is_version, id, size, fid) in rows {
            let (into, new_size, hash, changed) = match redacted.entry((stream, size)) {
                std::collections::hash_map::Entry::Occupied(e) => e.get().clone(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let bytes = read_all(
                        tx,
                        ContentRef {
                            stream,
                            len: size as u64,
                        },
                    )?;
                    let clean = known.redact(&bytes);
                    let changed = clean.as_ref() != bytes.as_slice();
                    let into = new_stream(tx)?;
                    let hash = write_bytes(tx, into, &clean)?;
                    e.insert((into, clean.len() as i64, hash, changed)).clone()
                }
            };
            let table = if is_version { "versions" } else { "events" };
            tx.exec(
                &format!("UPDATE {table} SET stream = ?1, size = ?2, blake3 = ?3 WHERE id = ?4"),
                p![into, new_size, &hash, id],
            )?;
            if let Some(f) = fid.filter(|f| is_version && !report.files.contains(f)) {
                report.files.push(f);
            }
            match (changed, is_version) {
                (false, _) => {}
                (true, true) => report.versions += 1,
                (true, false) => report.refusals += 1,
            }
        }
    }
    // 4. A JSON file's keys are kept by name (per-key provenance, `fields`): a key that
    //    holds a secret is renamed to its redacted form.
    let keys = tx.all("SELECT file_id, key, version_id FROM fields", p![], |r| {
        Ok((r.get::<i64>(0)?, r.get::<String>(1)?, r.get::<i64>(2)?))
    })?;
    for (fid, key, vid) in keys {
        let clean = known.redact(key.as_bytes());
        if clean.as_ref() == key.as_bytes() {
            continue;
        }
        let clean = String::from_utf8_lossy(&clean).into_owned();
        tx.exec(
            "DELETE FROM fields WHERE file_id = ?1 AND key = ?2",
            p![fid, &key],
        )?;
        tx.exec(
            "INSERT INTO fields(file_id, key, version_id) VALUES (?1, ?2, ?3)
             ON CONFLICT(file_id, key) DO NOTHING",
            p![fid, &clean, vid],
        )?;
    }
    // 5. Text recorded beside the content: command lines and executables (stored with
    //    what the patterns know redacted; a secret's bare value passes them), reasons,
    //    checkpoint notes.
    for (table, column) in [
        ("processes", "exe"),
        ("processes", "argv"),
        ("events", "reason"),
        ("checkpoints", "note"),
    ] {
        redact_column(tx, table, column, &known)?;
    }
    // Content no longer referenced goes, as in gc.
    temp_table(tx, "gc_streams", STREAM_LENGTHS)?;
    tx.batch(
        r#"DELETE FROM extents WHERE NOT EXISTS
             (SELECT 1 FROM gc_streams s WHERE s.stream = extents.stream AND extents."offset" < s.len);
         DELETE FROM streams WHERE NOT EXISTS (SELECT 1 FROM gc_streams s WHERE s.stream = streams.id) AND id != 0;
         DELETE FROM blobs WHERE NOT EXISTS (SELECT 1 FROM extents e WHERE e.blob = blobs.id);"#,
    )?;
    end_markers(tx)?;
    insert_event(
        tx,
        "redact",
        path,
        None,
        Some(file_id),
        None,
        None,
        Some(&format!(
            "redact {path}@{number}: {} ({} versions, {} refusals redacted): {why}",
            report.kinds.join(", "),
            report.versions,
            report.refusals
        )),
        None,
        caller,
        now_ns(),
    )?;
    Ok(report)
}

/// Rewrites `column` (text) of each row of `table` (with an `id`) that holds one of
/// `known`, redacted. `table` and `column` are this module's constants, never input.
fn redact_column(
    tx: &dyn Conn,
    table: &str,
    column: &str,
    known: &crate::rules::enforce::KnownSecrets,
) -> Result<()> {
    let rows = tx.all(
        &format!("SELECT id, {column} FROM {table} WHERE {column} IS NOT NULL"),
        p![],
        |r| Ok((r.get::<i64>(0)?, r.get::<String>(1)?)),
    )?;
    for (id, text) in rows {
        if known.found_in(text.as_bytes()) {
            let clean = String::from_utf8_lossy(&known.redact(text.as_bytes())).into_owned();
            tx.exec(
                &format!("UPDATE {table} SET {column} = ?1 WHERE id = ?2"),
                p![&clean, id],
            )?;
        }
    }
    Ok(())
}

/// How many bytes of a stream [`stream_holds`] reads at a time.
const SCAN_PIECE: u64 = 1 << 20;

/// Whether `stream`'s stored bytes (to its end, past any version's length) hold one of
/// `known`, read [`SCAN_PIECE`] bytes at a time; each piece keeps the end of the one
/// before it, so a secret across two pieces is found.
fn stream_holds(
    tx: &dyn Conn,
    stream: i64,
    known: &crate::rules::enforce::KnownSecrets,
) -> Result<bool> {
    let end = stream_end(tx, stream)?;
    let content = ContentRef { stream, len: end };
    let keep = known.longest().saturating_sub(1);
    let mut buf: Vec<u8> = Vec::new();
    let mut at = 0u64;
    while at < end {
        let n = (end - at).min(SCAN_PIECE) as usize;
        let start = buf.len();
        buf.resize(start + n, 0);
        let got = read_at(tx, content, at, &mut buf[start..])?;
        // Holes read as zeros.
        buf[start + got..].fill(0);
        if known.found_in(&buf) {
            return Ok(true);
        }
        at += n as u64;
        buf.drain(..buf.len().saturating_sub(keep));
    }
    Ok(false)
}

/// The longest reference of each stream (by a version or a refusal), as a temporary
/// table's definition.
const STREAM_LENGTHS: &str = "AS
     SELECT stream, MAX(size) AS len FROM (
         SELECT stream, size FROM versions
         UNION ALL SELECT stream, size FROM events WHERE stream IS NOT NULL) refs
     GROUP BY stream";

/// The latest `limit` events matching `filter` (an SQL condition on `events`; constant
/// text, never user input): reason, writer and time, newest first, and how many match.
pub(crate) fn events_of(
    conn: &dyn Conn,
    filter: &str,
    limit: usize,
) -> Result<(Vec<RefusalInfo>, u64)> {
    let count: i64 = conn.value(&format!("SELECT COUNT(*) FROM events WHERE {filter}"), p![])?;
    let rows = conn.all(
        &format!(
            "SELECT reason, writer, time_ns, path FROM events WHERE {filter}
             ORDER BY id DESC LIMIT ?1"
        ),
        p![limit as i64],
        |r| {
            Ok(RefusalInfo {
                reason: r.get::<Option<String>>(0)?.unwrap_or_default(),
                writer: r.get(1)?,
                time_ns: r.get(2)?,
                path: r.get(3)?,
            })
        },
    )?;
    Ok((rows, count as u64))
}

/// Drops the content nothing refers to any more, inside `tx`: the bytes of each stream
/// past its longest reference (by a version or a refusal, or one of `protected`
/// `(stream, len)`: content open handles still read), unreferenced streams, and the
/// blobs no extent uses. Returns the bytes of blob content and of inline content (extents
/// without a blob) dropped. Used by gc, and by a fork for what it left out.
pub(crate) fn sweep_content(tx: &dyn Conn, protected: &[(i64, u64)]) -> Result<(i64, i64)> {
    // Content: the bytes of each stream still referenced (by a version or a refusal) end
    // at the longest reference; the rest of the stream, and unreferenced streams, go.
    temp_table(tx, "gc_streams", STREAM_LENGTHS)?;
    // Content that open handles of the mount still read stays too.
    for &(stream, len) in protected {
        tx.exec(
            "INSERT INTO gc_streams(stream, len) VALUES (?1, ?2)",
            p![stream, len as i64],
        )?;
    }
    analyze(tx, &["gc_streams"])?;
    let inline_bytes: i64 = tx.value(
        r#"SELECT CAST(COALESCE(SUM(len), 0) AS BIGINT) FROM extents WHERE blob IS NULL AND NOT EXISTS
             (SELECT 1 FROM gc_streams s WHERE s.stream = extents.stream AND extents."offset" < s.len)"#,
        p![],
    )?;
    tx.batch(
        r#"DELETE FROM extents WHERE NOT EXISTS
             (SELECT 1 FROM gc_streams s WHERE s.stream = extents.stream AND extents."offset" < s.len);
         DELETE FROM streams WHERE NOT EXISTS (SELECT 1 FROM gc_streams s WHERE s.stream = streams.id);"#,
    )?;
    end_markers(tx)?;
    let blob_bytes: i64 = tx
        .value("SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM blobs WHERE NOT EXISTS (SELECT 1 FROM extents e WHERE e.blob = blobs.id)", p![])
        ?;
    tx.exec(
        "DELETE FROM blobs WHERE NOT EXISTS (SELECT 1 FROM extents e WHERE e.blob = blobs.id)",
        p![],
    )?;
    Ok((blob_bytes, inline_bytes))
}
