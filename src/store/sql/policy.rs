//! The policy pass's SQL (issue 36, docs/rules.md "Retention and quotas"): the versions
//! and refusals the pass judges, read page by page on a reader, and forgetting what it
//! chose in short transactions, each of which touches only the streams and blobs of what
//! it forgets (found by `versions_by_stream`, `events_by_stream` and `extents_by_blob`),
//! so that a transaction costs what its batch holds, not what the store holds.

use std::collections::HashSet;

use super::now_ns;
use crate::p;
use crate::store::error::Result;
use crate::store::sql::admin::{analyze, temp_table};
use crate::store::sql::write::Proc;
use crate::store::sql::{Conn, ConnExt, Dialect, Param};
use crate::store::{
    DuRow, ForgetBatch, Forgot, PolicyFile, PolicyRefusal, PolicyRow, Protected, Usage,
};

/// Up to `limit` versions after `after` (file id, version number), in that order: a
/// lineage's versions oldest first, lineages by id. Read by the primary key's order of
/// `UNIQUE (file_id, version)`, so a page costs its own rows.
pub(crate) fn rows_after(
    conn: &dyn Conn,
    after: (i64, i64),
    limit: usize,
) -> Result<Vec<PolicyRow>> {
    conn.all(
        "SELECT id, file_id, version, size, time_ns FROM versions
         WHERE (file_id, version) > (?1, ?2) ORDER BY file_id, version LIMIT ?3",
        p![after.0, after.1, limit as i64],
        |r| {
            Ok(PolicyRow {
                id: r.get(0)?,
                file_id: r.get(1)?,
                version: r.get(2)?,
                size: r.get::<i64>(3)?.max(0) as u64,
                time_ns: r.get(4)?,
            })
        },
    )
}

/// The lineages with a version whose id is above `after` and which is not their first,
/// by id (read by the primary key: the versions committed since). A lineage of one
/// version has nothing a pass between full ones could forget (its live version), and
/// judging each file created since cost two queries a file (20,000 creates between
/// passes: 40,000 queries on the reader, 6% of the create rate on PostgreSQL).
pub(crate) fn changed(conn: &dyn Conn, after: i64) -> Result<Vec<i64>> {
    // `id < MAX` for PostgreSQL's generic plan: a range is read by key, `> $1` alone by a
    // scan of every version (121 ms a pass at 1,000,000 versions, measured).
    conn.all(
        "SELECT DISTINCT file_id FROM versions WHERE id > ?1 AND id < ?2 AND version > 1
         ORDER BY file_id",
        p![after, i64::MAX],
        |r| r.get(0),
    )
}

/// The lineages with ids from `lo` to `hi`: path, whether live (neither deleted nor
/// renamed over another), and when a lineage that is not live ended (its deletion, or
/// its last version).
pub(crate) fn files(conn: &dyn Conn, lo: i64, hi: i64) -> Result<Vec<PolicyFile>> {
    conn.all(
        "SELECT f.id, f.path, f.deleted_ns IS NULL AND f.merged_into IS NULL,
                COALESCE(f.deleted_ns, (SELECT MAX(v.time_ns) FROM versions v WHERE v.file_id = f.id))
         FROM files f WHERE f.id >= ?1 AND f.id <= ?2 ORDER BY f.id",
        p![lo, hi],
        |r| {
            let live: bool = r.get(2)?;
            Ok(PolicyFile {
                file_id: r.get(0)?,
                path: r.get(1)?,
                live,
                ended_ns: if live { None } else { r.get(3)? },
            })
        },
    )
}

/// What the pass keeps whatever the limits say, read once at its start. With `after` (an
/// earlier read's snapshot), the inputs only of the versions committed since, by key (a
/// pass between full ones: reading every live file's head each time cost the server
/// 520 ms a pass at 1,000,000 versions and 100,000 files, measured).
pub(crate) fn protected(conn: &dyn Conn, after: Option<i64>) -> Result<Protected> {
    let snapshot: i64 = conn.value("SELECT COALESCE(MAX(id), 0) FROM versions", p![])?;
    let mut fields = HashSet::new();
    conn.each("SELECT DISTINCT version_id FROM fields", p![], &mut |r| {
        fields.insert(r.get::<i64>(0)?);
        Ok(crate::store::sql::Flow::Next)
    })?;
    let mut inputs = HashSet::new();
    if let Some(after) = after {
        // Bounded on both sides for PostgreSQL's generic plan (see `changed`).
        conn.each(
            "SELECT input_id FROM inputs WHERE version_id > ?1 AND version_id <= ?2
             UNION SELECT restored_from FROM versions
                   WHERE id > ?1 AND id <= ?2 AND restored_from IS NOT NULL",
            p![after, snapshot],
            &mut |r| {
                inputs.insert(r.get::<i64>(0)?);
                Ok(crate::store::sql::Flow::Next)
            },
        )?;
        let checkpoints = checkpoints(conn)?;
        return Ok(Protected {
            snapshot,
            fields,
            inputs,
            checkpoints,
        });
    }
    for sql in [
        // Both driven from the live files, each head found by the key (file_id, version):
        // a join let SQLite, then PostgreSQL, read every version (0.46 s at 900,000).
        "SELECT i.input_id FROM files f JOIN inputs i ON i.version_id =
             (SELECT w.id FROM versions w WHERE w.file_id = f.id ORDER BY w.version DESC LIMIT 1)
         WHERE f.deleted_ns IS NULL AND f.merged_into IS NULL",
        "SELECT (SELECT w.restored_from FROM versions w WHERE w.file_id = f.id
                 ORDER BY w.version DESC LIMIT 1)
         FROM files f WHERE f.deleted_ns IS NULL AND f.merged_into IS NULL",
    ] {
        conn.each(sql, p![], &mut |r| {
            if let Some(id) = r.get::<Option<i64>>(0)? {
                inputs.insert(id);
            }
            Ok(crate::store::sql::Flow::Next)
        })?;
    }
    let checkpoints = checkpoints(conn)?;
    Ok(Protected {
        snapshot,
        fields,
        inputs,
        checkpoints,
    })
}

/// `version_seq` of each checkpoint not dropped, ascending.
fn checkpoints(conn: &dyn Conn) -> Result<Vec<i64>> {
    conn.all(
        "SELECT version_seq FROM checkpoints WHERE dropped_ns IS NULL ORDER BY version_seq",
        p![],
        |r| r.get::<i64>(0),
    )
}

/// Up to `limit` refusals that kept content, after event `after`, oldest first.
pub(crate) fn refusals_after(
    conn: &dyn Conn,
    after: i64,
    limit: usize,
) -> Result<Vec<PolicyRefusal>> {
    conn.all(
        "SELECT id, path, COALESCE(size, 0), time_ns FROM events
         WHERE op = 'rejected' AND stream IS NOT NULL AND id > ?1 ORDER BY id LIMIT ?2",
        p![after, limit as i64],
        |r| {
            Ok(PolicyRefusal {
                event: r.get(0)?,
                path: r.get(1)?,
                size: r.get::<i64>(2)?.max(0) as u64,
                time_ns: r.get(3)?,
            })
        },
    )
}

/// The transaction-level advisory lock of a policy batch on PostgreSQL: the keys "poli"
/// and the scratchpad's schema (as the change lock's, `postgres::conn::change_lock_sql`).
const POLICY_LOCK: &str = "SELECT pg_advisory_xact_lock(1886350441, hashtext(current_schema()))";

/// Inserts `rows` (each `width` values) into `table(columns)`, 100 rows a statement.
fn insert_rows(
    tx: &dyn Conn,
    table: &str,
    columns: &str,
    width: usize,
    rows: &[Vec<Param<'_>>],
) -> Result<()> {
    for chunk in rows.chunks(100) {
        let mut sql = format!("INSERT INTO {table}({columns}) VALUES ");
        let mut params = Vec::with_capacity(chunk.len() * width);
        for (i, row) in chunk.iter().enumerate() {
            let marks: Vec<String> = (1..=width).map(|k| format!("?{}", i * width + k)).collect();
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push('(');
            sql.push_str(&marks.join(", "));
            sql.push(')');
            params.extend(row.iter().cloned());
        }
        sql.push_str(" ON CONFLICT DO NOTHING");
        tx.exec(&sql, &params)?;
    }
    Ok(())
}

/// Forgets one batch of what the pass chose, in the caller's transaction: the versions
/// still forgettable now (not a JSON key's provenance, not the newest version of a live
/// lineage, not named by a version committed since the pass read what it protects) and
/// the content of the refusals, then the bytes only they held. The run's event (op
/// `policy`, by `caller`: the daemon) is made by the first batch and its reason updated
/// by each (`batch.totals` before this batch, plus what it forgot), so that what is on
/// record is always what was committed, even when the pass is killed between batches.
/// Each forgotten version gets a `forgotten` row naming that event.
pub(crate) fn forget_in(tx: &dyn Conn, batch: &ForgetBatch<'_>, caller: &Proc) -> Result<Forgot> {
    let now = now_ns();
    if tx.dialect() == Dialect::Postgres {
        // Each statement here touches a few rows by key; compiling one took 80-120 ms
        // (measured: most of a batch) whenever an estimate crossed `jit_above_cost`.
        // And no NOTICE for each `DROP TABLE IF EXISTS` in the daemon's log.
        tx.batch("SET LOCAL jit = off; SET LOCAL client_min_messages = warning")?;
        // One batch at a time per scratchpad, whichever daemon runs it: every daemon of a
        // PostgreSQL scratchpad runs the pass, and the change lock is shared, so two
        // batches choosing the same versions both counted them in their events (the
        // second's deletes waited for the first's, then found nothing). Taken before the
        // rechecks below, which then see what the other batch committed.
        tx.batch(POLICY_LOCK)?;
    }
    temp_table(
        tx,
        "policy_drop",
        "(id BIGINT PRIMARY KEY, inputs_go BIGINT NOT NULL)",
    )?;
    let rows: Vec<Vec<Param>> = batch
        .versions
        .iter()
        .map(|&(id, inputs_go)| vec![Param::from(id), Param::from(i64::from(inputs_go))])
        .collect();
    insert_rows(tx, "policy_drop", "id, inputs_go", 2, &rows)?;
    analyze(tx, &["policy_drop"])?;
    // Each row judged by a scalar subquery, which neither planner flattens into a join: a
    // version that is its live lineage's newest has no newer one. (A join let PostgreSQL
    // start from the live files and read every version of each, per batch.)
    tx.batch(
        "DELETE FROM policy_drop WHERE NOT EXISTS (SELECT 1 FROM versions v WHERE v.id = policy_drop.id);
         DELETE FROM policy_drop WHERE id IN (SELECT version_id FROM fields);
         DELETE FROM policy_drop WHERE (SELECT f.deleted_ns IS NULL AND f.merged_into IS NULL
             AND NOT EXISTS (SELECT 1 FROM versions w WHERE w.file_id = v.file_id AND w.version > v.version)
             FROM versions v JOIN files f ON f.id = v.file_id WHERE v.id = policy_drop.id);",
    )?;
    // A version committed since the pass read what it protects may have been read from
    // one of these (what was live then was protected then; a checkpoint taken since holds
    // only what was then the newest, which the pass never chooses).
    // Bounded above too: PostgreSQL plans a bound statement once for any value
    // (`plan_cache_mode = force_generic_plan`, docs/deploy.md), and for `> $1` alone it
    // guessed a third of the rows and read every row of `versions` (54-120 ms a batch at
    // 1,000,000 versions, measured); for a range it reads the versions since by key.
    tx.exec(
        "DELETE FROM policy_drop WHERE inputs_go = 0 AND id IN (
             SELECT input_id FROM inputs WHERE version_id > ?1 AND version_id < ?2
             UNION SELECT restored_from FROM versions
                   WHERE id > ?1 AND id < ?2 AND restored_from IS NOT NULL)",
        p![batch.snapshot, i64::MAX],
    )?;
    let versions: i64 = tx.value("SELECT COUNT(*) FROM policy_drop", p![])?;
    // The streams whose references go.
    temp_table(tx, "policy_streams", "(stream BIGINT PRIMARY KEY)")?;
    tx.exec(
        "INSERT INTO policy_streams SELECT DISTINCT stream FROM versions
         WHERE id IN (SELECT id FROM policy_drop) AND stream != 0 ON CONFLICT DO NOTHING",
        p![],
    )?;
    analyze(tx, &["policy_streams"])?;
    let mut refusals = 0i64;
    if !batch.refusals.is_empty() {
        temp_table(tx, "policy_refused", "(id BIGINT PRIMARY KEY)")?;
        let rows: Vec<Vec<Param>> = batch
            .refusals
            .iter()
            .map(|&id| vec![Param::from(id)])
            .collect();
        insert_rows(tx, "policy_refused", "id", 1, &rows)?;
        analyze(tx, &["policy_refused"])?;
        tx.exec(
            "INSERT INTO policy_streams SELECT DISTINCT stream FROM events
             WHERE id IN (SELECT id FROM policy_refused) AND stream IS NOT NULL AND stream != 0
             ON CONFLICT DO NOTHING",
            p![],
        )?;
        refusals = tx.value(
            "SELECT COUNT(*) FROM events WHERE id IN (SELECT id FROM policy_refused) AND stream IS NOT NULL",
            p![],
        )?;
        tx.exec(
            "UPDATE events SET stream = NULL WHERE id IN (SELECT id FROM policy_refused) AND op = 'rejected'",
            p![],
        )?;
    }
    if versions == 0 && refusals == 0 {
        return Ok(Forgot {
            event: batch.event,
            ..Default::default()
        });
    }
    let event = match batch.event {
        Some(id) => id,
        None => tx.insert(
            "INSERT INTO events(time_ns, op, path, reason, writer, process, pid)
             VALUES (?1, 'policy', '', ?2, ?3, ?4, ?5) RETURNING id",
            p![now, "", &caller.writer, caller.id, caller.pid],
        )?,
    };
    tx.exec(
        "INSERT INTO forgotten(version_id, file_id, version, time_ns, event_id)
         SELECT id, file_id, version, time_ns, ?1 FROM versions WHERE id IN (SELECT id FROM policy_drop)
         ON CONFLICT DO NOTHING",
        p![event],
    )?;
    tx.batch(
        "DELETE FROM versions WHERE id IN (SELECT id FROM policy_drop);
         DELETE FROM inputs WHERE version_id IN (SELECT id FROM policy_drop);",
    )?;
    crate::store::sql::history_index::forget(tx, "policy_drop")?;
    let bytes = sweep_streams(tx, batch.protected)?;
    let (v, r, b) = (
        batch.totals.0 + versions as u64,
        batch.totals.1 + refusals as u64,
        batch.totals.2 + bytes,
    );
    let reason = format!(
        "policy {}: forgot {v} version{}{} and {b} bytes of content",
        batch.rule,
        if v == 1 { "" } else { "s" },
        if r > 0 {
            format!(
                ", the content of {r} refusal{}",
                if r == 1 { "" } else { "s" }
            )
        } else {
            String::new()
        },
    );
    tx.exec(
        "UPDATE events SET reason = ?1, time_ns = ?2 WHERE id = ?3",
        p![&reason, now, event],
    )?;
    crate::failpoint::hit("policy");
    Ok(Forgot {
        event: Some(event),
        versions: versions as u64,
        refusals: refusals as u64,
        bytes,
    })
}

/// Cuts each stream of `policy_streams` back to its longest reference left (a version,
/// a refusal, or `protected` content an open handle reads), deletes a stream nothing
/// references, marks a cut stream's end (see `admin::END_MARKERS`) and deletes the blobs
/// only the cut extents held. Returns the bytes of content deleted.
fn sweep_streams(tx: &dyn Conn, protected: &[(i64, u64)]) -> Result<u64> {
    temp_table(
        tx,
        "policy_lens",
        "(stream BIGINT PRIMARY KEY, len BIGINT NOT NULL)",
    )?;
    tx.exec(
        "INSERT INTO policy_lens(stream, len)
         SELECT s.stream, COALESCE((SELECT MAX(r.size) FROM (
             SELECT size FROM versions WHERE stream = s.stream
             UNION ALL SELECT size FROM events WHERE stream = s.stream) r), 0)
         FROM policy_streams s",
        p![],
    )?;
    for &(stream, len) in protected {
        tx.exec(
            "UPDATE policy_lens SET len = ?2 WHERE stream = ?1 AND len < ?2",
            p![stream, len as i64],
        )?;
    }
    analyze(tx, &["policy_lens"])?;
    temp_table(tx, "policy_blobs", "(id BIGINT PRIMARY KEY)")?;
    // Both driven from the few streams of the batch, each read by the primary key of
    // `extents` (stream, offset): a join let SQLite's planner scan every extent.
    tx.exec(
        r#"INSERT INTO policy_blobs SELECT DISTINCT e.blob FROM extents e
           WHERE e.stream IN (SELECT stream FROM policy_lens) AND e.blob IS NOT NULL
             AND e."offset" >= (SELECT l.len FROM policy_lens l WHERE l.stream = e.stream)
           ON CONFLICT DO NOTHING"#,
        p![],
    )?;
    analyze(tx, &["policy_blobs"])?;
    let inline: i64 = tx.value(
        r#"SELECT CAST(COALESCE(SUM((SELECT COALESCE(SUM(e.len), 0) FROM extents e
               WHERE e.stream = l.stream AND e."offset" >= l.len AND e.blob IS NULL)), 0) AS BIGINT)
           FROM policy_lens l"#,
        p![],
    )?;
    tx.batch(
        r#"DELETE FROM extents WHERE stream IN (SELECT stream FROM policy_lens)
             AND "offset" >= (SELECT l.len FROM policy_lens l WHERE l.stream = extents.stream);
           DELETE FROM streams WHERE id IN (SELECT stream FROM policy_lens WHERE len = 0);"#,
    )?;
    tx.exec(
        r#"INSERT INTO extents(stream, "offset", len, blob, blob_off, data)
           SELECT l.stream, l.len - 1, 1, NULL, 0, ?1 FROM policy_lens l
           WHERE l.len > 0
             AND COALESCE((SELECT MAX(e."offset" + e.len) FROM extents e WHERE e.stream = l.stream), 0) < l.len"#,
        p![&[0u8][..]],
    )?;
    let blobs: i64 = tx.value(
        "SELECT CAST(COALESCE(SUM(b.size), 0) AS BIGINT) FROM blobs b WHERE b.id IN (SELECT id FROM policy_blobs)
         AND NOT EXISTS (SELECT 1 FROM extents e WHERE e.blob = b.id)",
        p![],
    )?;
    tx.exec(
        "DELETE FROM blobs WHERE id IN (SELECT id FROM policy_blobs)
         AND NOT EXISTS (SELECT 1 FROM extents e WHERE e.blob = blobs.id)",
        p![],
    )?;
    Ok((inline + blobs).max(0) as u64)
}

/// Why version `n` of lineage `file_id` is gone, if a gc or a policy pass forgot it:
/// (the run's event id, when it ran in ns, its reason up to `: forgot`), or (None, the
/// version's own time, "gc") for a row older than `forgotten.event_id`.
pub(crate) fn forgotten(
    conn: &dyn Conn,
    file_id: i64,
    n: i64,
) -> Result<Option<(Option<i64>, i64, String)>> {
    conn.opt(
        "SELECT f.event_id, COALESCE(e.time_ns, f.time_ns), e.reason FROM forgotten f
         LEFT JOIN events e ON e.id = f.event_id WHERE f.file_id = ?1 AND f.version = ?2",
        p![file_id, n],
        |r| {
            let reason: Option<String> = r.get(2)?;
            let by = reason
                .as_deref()
                .map(|r| r.split(": forgot").next().unwrap_or(r).to_string())
                .unwrap_or_else(|| "gc".to_string());
            Ok((r.get(0)?, r.get(1)?, by))
        },
    )
}

/// What forgot version `version_id` (`versions.id`): a policy run's rule (`policy
/// paths[2] logs/** (versions 3)`), or `gc`; `None` when no gc or pass forgot it.
pub(crate) fn forgotten_by(conn: &dyn Conn, version_id: i64) -> Result<Option<String>> {
    conn.opt(
        "SELECT e.reason FROM forgotten f LEFT JOIN events e ON e.id = f.event_id
         WHERE f.version_id = ?1",
        p![version_id],
        |r| {
            let reason: Option<String> = r.get(0)?;
            Ok(reason
                .as_deref()
                .filter(|r| r.starts_with("policy "))
                .map_or_else(
                    || "gc".to_string(),
                    |r| r.split(": forgot").next().unwrap_or(r).to_string(),
                ))
        },
    )
}

/// What the pad holds ([`Usage`]): the bytes of every stream (its extents' lengths, each
/// counted in every stream that has it, as written: not the blobs, which a store keeps
/// once for every file whose content has them), the versions, the versions a policy pass
/// forgot, the live files and directories. The bytes include each version's record
/// ([`crate::store::VERSION_RECORD_BYTES`]), each namespace change's, refusal's and
/// checkpoint's ([`crate::store::EVENT_RECORD_BYTES`]: the rows of `tree_log`, the
/// `rejected` events, the checkpoints), each checkpoint's note twice (its row and its
/// event keep it), and the texts of every version's and event's record (paths and
/// reasons: 599 refusals with 3.8 KB paths held 4.6 MB, attack round of session 33), and
/// each `processes` row's record and texts ([`super::write::process_record_bytes`]: a
/// reader with long arguments added one a process, uncounted until session 34).
pub(crate) fn usage(conn: &dyn Conn) -> Result<Usage> {
    conn.one(
        // Each table read once (`versions` twice was a scan more of the largest one).
        // Texts in bytes (`octet_length`, as the daemon counts them: `LENGTH` counts
        // characters, and a path of 4-byte characters counted a quarter of its bytes).
        "SELECT CAST(x.content AS BIGINT) + ?1 * v.n + v.paths
                    + ?2 * (t.n + e.rejected + c.n + p.n) + 2 * c.notes + e.texts + p.texts,
                v.n,
                (SELECT COUNT(*) FROM forgotten f JOIN events e ON e.id = f.event_id WHERE e.op = 'policy'),
                (SELECT COUNT(*) FROM nodes WHERE parent IS NOT NULL)
         FROM (SELECT COALESCE(SUM(len), 0) AS content FROM extents) x,
              (SELECT COUNT(*) AS n, COALESCE(SUM(octet_length(path)), 0) AS paths FROM versions) v,
              (SELECT COUNT(*) AS n FROM tree_log) t,
              (SELECT COALESCE(SUM(CASE WHEN op = 'rejected' THEN 1 ELSE 0 END), 0) AS rejected,
                      COALESCE(SUM(octet_length(path) + COALESCE(octet_length(new_path), 0)
                                   + COALESCE(octet_length(reason), 0)), 0) AS texts
               FROM events) e,
              (SELECT COUNT(*) AS n, COALESCE(SUM(octet_length(note)), 0) AS notes FROM checkpoints) c,
              (SELECT COUNT(*) AS n,
                      COALESCE(SUM(octet_length(writer) + octet_length(exe) + octet_length(argv)
                                   + COALESCE(octet_length(env_writer), 0) + COALESCE(octet_length(transport), 0)
                                   + COALESCE(octet_length(client), 0) + COALESCE(octet_length(client_version), 0)), 0) AS texts
               FROM processes) p",
        p![
            crate::store::VERSION_RECORD_BYTES as i64,
            crate::store::EVENT_RECORD_BYTES as i64
        ],
        |r| {
            let n = |i: usize| -> Result<u64> { Ok(r.get::<i64>(i)?.max(0) as u64) };
            Ok(Usage {
                bytes: n(0)?,
                versions: n(1)?,
                forgotten: n(2)?,
                files: n(3)?,
            })
        },
    )
}

/// `files.path` is `prefix` or under it (`?1` the prefix, `?2` the prefix and `/`; an
/// empty prefix: every path). A `LIKE` would read `%` and `_` in a name as wildcards.
const UNDER: &str = "(?1 = '' OR f.path = ?1 OR substr(f.path, 1, length(?2)) = ?2)";

/// Every lineage under `prefix`: versions, newest size, sizes added up.
pub(crate) fn du_rows(conn: &dyn Conn, prefix: &str) -> Result<Vec<DuRow>> {
    let dir = format!("{prefix}/");
    conn.all(
        &format!(
            "SELECT f.id, f.path, f.deleted_ns IS NULL AND f.merged_into IS NULL, COUNT(v.id),
                    CAST(COALESCE(SUM(v.size), 0) AS BIGINT),
                    COALESCE((SELECT w.size FROM versions w WHERE w.file_id = f.id ORDER BY w.version DESC LIMIT 1), 0)
             FROM files f JOIN versions v ON v.file_id = f.id
             WHERE {UNDER} GROUP BY f.id, f.path, f.deleted_ns, f.merged_into ORDER BY f.path, f.id"
        ),
        p![prefix, &dir],
        |r| {
            Ok(DuRow {
                file_id: r.get(0)?,
                path: r.get(1)?,
                live: r.get(2)?,
                versions: r.get::<i64>(3)?.max(0) as u64,
                total: r.get::<i64>(4)?.max(0) as u64,
                newest: r.get::<i64>(5)?.max(0) as u64,
            })
        },
    )
}

/// The versions under `prefix` by writer: (writer, versions, bytes as files).
pub(crate) fn du_writers(conn: &dyn Conn, prefix: &str) -> Result<Vec<(String, u64, u64)>> {
    let dir = format!("{prefix}/");
    conn.all(
        &format!(
            "SELECT v.writer, COUNT(*), CAST(COALESCE(SUM(v.size), 0) AS BIGINT)
             FROM versions v JOIN files f ON f.id = v.file_id
             WHERE {UNDER} GROUP BY v.writer ORDER BY 3 DESC, 1"
        ),
        p![prefix, &dir],
        |r| {
            Ok((
                r.get(0)?,
                r.get::<i64>(1)?.max(0) as u64,
                r.get::<i64>(2)?.max(0) as u64,
            ))
        },
    )
}
