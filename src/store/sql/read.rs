//! The read side of the store (issue 15): every question the views, the MCP tools and the
//! CLI ask of a scratchpad's history, as queries both backends run. [`crate::store::History`]
//! is implemented once, over these, for any backend that hands out a reading connection.

use crate::p;
use crate::store::error::{ErrorKind, Result, StoreError};
use crate::store::sql::admin::events_of;
use crate::store::sql::checkpoint;
use crate::store::sql::write::{inputs_of, node_from_row, version_from_row};
use crate::store::sql::{Conn, ConnExt, Dialect};
use crate::store::{
    ContentRef, FieldInfo, InputInfo, LastRead, Lineage, LineageOwner, LogCursor, LogEntry,
    LogFilter, NodeRecord, PageFilter, RefusalInfo, RestorableInfo, VersionInfo, VersionMeta,
    VersionRow,
};

pub(crate) fn version_meta(conn: &dyn Conn, id: i64) -> Result<VersionMeta> {
    conn.one(
        "SELECT v.writer, v.blake3, p.step, v.time_ns FROM versions v
             JOIN processes p ON p.id = v.process WHERE v.id = ?1",
        p![id],
        |r| {
            Ok(VersionMeta {
                writer: r.get(0)?,
                blake3: r.get(1)?,
                step: r.get(2)?,
                time_ns: r.get(3)?,
            })
        },
    )
}

pub(crate) fn lineages(conn: &dyn Conn, prefix: &str) -> Result<Vec<Lineage>> {
    // Paths below `prefix`: from "prefix/" up to (not including) "prefix0" ('0' follows '/').
    let (lo, hi) = if prefix.is_empty() {
        (String::new(), "\u{10FFFF}".to_string())
    } else {
        (format!("{prefix}/"), format!("{prefix}0"))
    };
    let rows = conn.all(
        "SELECT id, path, deleted_ns, merged_into IS NOT NULL FROM files
         WHERE path = ?1 OR (path >= ?2 AND path < ?3) ORDER BY path, id",
        p![prefix, &lo, &hi],
        |r| {
            Ok(Lineage {
                file_id: r.get(0)?,
                path: r.get(1)?,
                deleted_ns: r.get(2)?,
                merged: r.get(3)?,
            })
        },
    )?;
    Ok(rows)
}

pub(crate) fn versions(conn: &dyn Conn, file_id: i64) -> Result<Vec<VersionInfo>> {
    let rows = conn.all(
        "SELECT id, version, stream, size, time_ns, writer FROM versions WHERE file_id = ?1
         ORDER BY version",
        p![file_id],
        version_from_row,
    )?;
    Ok(rows)
}

pub(crate) fn lineage_owner(conn: &dyn Conn, file_id: i64) -> Result<Option<LineageOwner>> {
    conn.opt(
        "WITH RECURSIVE chain(id, depth) AS (
                 SELECT CAST(?1 AS BIGINT), CAST(0 AS BIGINT)
                 UNION ALL
                 SELECT f.merged_into, c.depth + 1 FROM files f JOIN chain c ON f.id = c.id
                 WHERE f.merged_into IS NOT NULL AND c.depth < 64
             )
             SELECT n.ino, n.parent IS NOT NULL, n.mode, n.uid, n.gid
             FROM chain c JOIN nodes n ON n.file_id = c.id
             ORDER BY c.depth, n.parent IS NOT NULL DESC, n.unlinked_ns DESC, n.ino DESC
             LIMIT 1",
        p![file_id],
        owner_of,
    )
}

/// A [`LineageOwner`] from a row `(ino, linked, mode, uid, gid)` of `nodes`.
fn owner_of(r: &dyn super::Row) -> Result<LineageOwner> {
    Ok(LineageOwner {
        ino: r.get::<i64>(0)? as u64,
        linked: r.get(1)?,
        mode: r.get(2)?,
        uid: r.get(3)?,
        gid: r.get(4)?,
    })
}

pub(crate) fn version_guard(conn: &dyn Conn, id: i64) -> Result<Option<LineageOwner>> {
    if let Some(o) = conn.opt(
        "SELECT n.ino, n.parent IS NOT NULL, n.mode, n.uid, n.gid
         FROM versions v JOIN nodes n ON n.ino = v.ino WHERE v.id = ?1",
        p![id],
        owner_of,
    )? {
        return Ok(Some(o));
    }
    // A version from before versions.ino: its lineage's carrier, when it had only one.
    let (file_id, known): (i64, bool) = conn.one(
        "SELECT file_id, ino IS NOT NULL FROM versions WHERE id = ?1",
        p![id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if known {
        return Ok(None);
    }
    let carriers: i64 = conn.value("SELECT COUNT(*) FROM nodes WHERE file_id = ?1", p![file_id])?;
    if carriers != 1 {
        return Ok(None);
    }
    lineage_owner(conn, file_id)
}

pub(crate) fn inputs(conn: &dyn Conn, id: i64) -> Result<Vec<InputInfo>> {
    inputs_of(conn, id)
}

pub(crate) fn why(
    conn: &dyn Conn,
    path: &str,
    key: Option<&str>,
    depth: usize,
) -> Result<crate::lineage::why::Why> {
    crate::lineage::why::why(conn, path, key, depth)
}

pub(crate) fn ground_sources(conn: &dyn Conn) -> Result<crate::lineage::sources::Sources> {
    crate::lineage::sources::sources(conn)
}

/// The earlier versions of its own lineage that version `id` names as inputs (read or
/// renamed from) and that another writer than its own wrote (another writer name, or
/// the same name by another uid: without writer rules root and the agent are both
/// `anonymous`): (`versions.id`, writer, uid), newest first. What a partial overwrite of
/// `id` names besides `id` itself ([`crate::store::History::lineage_inputs`]).
pub(crate) fn lineage_inputs(conn: &dyn Conn, id: i64) -> Result<Vec<(i64, String, u32)>> {
    conn.all(
        "SELECT v.id, v.writer, p.uid FROM versions b
         JOIN processes bp ON bp.id = b.process
         JOIN inputs i ON i.version_id = b.id
         JOIN versions v ON v.id = i.input_id AND v.file_id = b.file_id
         JOIN processes p ON p.id = v.process
         WHERE b.id = ?1 AND (v.writer <> b.writer OR p.uid <> bp.uid)
         ORDER BY v.id DESC",
        p![id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get::<i64>(2)? as u32)),
    )
}

pub(crate) fn version_lineage(conn: &dyn Conn, id: i64) -> Result<i64> {
    conn.value("SELECT file_id FROM versions WHERE id = ?1", p![id])
}

pub(crate) fn version(conn: &dyn Conn, id: i64) -> Result<VersionInfo> {
    conn.opt(
        "SELECT id, version, stream, size, time_ns, writer FROM versions WHERE id = ?1",
        p![id],
        version_from_row,
    )?
    .ok_or_else(|| {
        StoreError::new(
            ErrorKind::NotFound,
            format!("version id {id}: not in the store (gc forgot it)"),
        )
    })
}

pub(crate) fn deletion(conn: &dyn Conn, file_id: i64) -> Result<Option<(String, i64)>> {
    conn.opt(
        "SELECT writer, time_ns FROM events WHERE file_id = ?1 AND op = 'unlink'
             ORDER BY id DESC LIMIT 1",
        p![file_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

pub(crate) fn fields(conn: &dyn Conn, file_id: i64) -> Result<Vec<FieldInfo>> {
    let rows = conn.all(
        "SELECT f.key, v.version, v.writer, p.step, v.time_ns FROM fields f
         JOIN versions v ON v.id = f.version_id JOIN processes p ON p.id = v.process
         WHERE f.file_id = ?1",
        p![file_id],
        |r| {
            Ok(FieldInfo {
                key: r.get(0)?,
                version: r.get(1)?,
                writer: r.get(2)?,
                step: r.get(3)?,
                time_ns: r.get(4)?,
            })
        },
    )?;
    let mut out = Vec::new();
    for r in rows {
        out.push(r);
    }
    Ok(out)
}

pub(crate) fn checkpoints(conn: &dyn Conn) -> Result<Vec<crate::checkpoint::Checkpoint>> {
    checkpoint::list(conn)
}

pub(crate) fn origin(conn: &dyn Conn, id: i64) -> Result<Option<crate::store::Origin>> {
    conn.opt(
        "SELECT source, source_id, source_version_id, path, version, writer FROM origins
             WHERE version_id = ?1",
        p![id],
        |r| {
            Ok(crate::store::Origin {
                source: r.get(0)?,
                source_id: r.get(1)?,
                source_version_id: r.get(2)?,
                path: r.get(3)?,
                version: r.get(4)?,
                writer: r.get(5)?,
            })
        },
    )
}

pub(crate) fn checkpoint_named(
    conn: &dyn Conn,
    name: &str,
) -> Result<Option<crate::checkpoint::Checkpoint>> {
    match checkpoint::by_name(conn, name) {
        Ok(c) => Ok(Some(c)),
        Err(e) if e.is(ErrorKind::NotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

pub(crate) fn checkpoint_point(
    conn: &dyn Conn,
    id: i64,
) -> Result<Option<crate::checkpoint::Point>> {
    conn.opt(
        "SELECT tree_seq, version_seq, time_ns, event_seq FROM checkpoints WHERE id = ?1",
        p![id],
        |r| {
            Ok(crate::checkpoint::Point {
                tree_seq: r.get(0)?,
                version_seq: r.get(1)?,
                event_seq: r.get(3)?,
                time_ns: r.get(2)?,
            })
        },
    )
}

pub(crate) fn point_at(conn: &dyn Conn, time_ns: i64) -> Result<crate::checkpoint::Point> {
    checkpoint::point_at_time(conn, time_ns)
}

pub(crate) fn snapshot(
    conn: &dyn Conn,
    point: crate::checkpoint::Point,
) -> Result<crate::checkpoint::Snapshot> {
    let rows = checkpoint::snapshot_rows(conn, point)?;
    Ok(crate::checkpoint::Snapshot::from_nodes(rows))
}

pub(crate) fn restorable(conn: &dyn Conn, limit: usize) -> Result<Vec<RestorableInfo>> {
    let rows = conn.all(
        "SELECT e.op, e.path, e.writer, e.time_ns, v.version, v.size, v.id,
                (SELECT COUNT(*) FROM files f WHERE f.path = e.path AND f.deleted_ns IS NULL)
         FROM events e JOIN versions v ON v.id = e.version_id
         WHERE e.op IN ('unlink', 'shrink')
           AND NOT (e.op = 'unlink' AND v.size = 0)
           AND NOT EXISTS (SELECT 1 FROM files f JOIN versions h ON h.file_id = f.id
                           WHERE f.path = e.path AND f.deleted_ns IS NULL
                             AND h.version = (SELECT MAX(version) FROM versions
                                              WHERE file_id = f.id)
                             AND h.blake3 = v.blake3)
         ORDER BY e.id DESC LIMIT ?1",
        p![limit as i64],
        |r| {
            Ok(RestorableInfo {
                deleted: r.get::<String>(0)? == "unlink",
                path: r.get(1)?,
                writer: r.get(2)?,
                time_ns: r.get(3)?,
                version: r.get(4)?,
                size: r.get::<i64>(5)? as u64,
                version_id: r.get(6)?,
                live: r.get::<i64>(7)? > 0,
            })
        },
    )?;
    Ok(rows)
}

pub(crate) fn erasures(conn: &dyn Conn, limit: usize) -> Result<(Vec<RefusalInfo>, u64)> {
    events_of(conn, "op IN ('gc', 'redact', 'policy')", limit)
}

pub(crate) fn refusals(conn: &dyn Conn, limit: usize) -> Result<(Vec<RefusalInfo>, u64)> {
    events_of(conn, "op = 'rejected'", limit)
}

pub(crate) fn read(
    conn: &dyn Conn,
    content: ContentRef,
    offset: u64,
    buf: &mut [u8],
) -> Result<usize> {
    crate::store::sql::content::read_at(conn, content, offset, buf)
}

/// The columns of a node record with its current version, its writer's step and its last
/// read, over `nodes n` (joined by the caller's `FROM`), for [`node_with_head`].
const NODE_WITH_HEAD: &str = "SELECT n.ino, n.parent, n.name, n.kind, n.mode, n.uid, n.gid,
                n.atime_ns, n.mtime_ns, n.ctime_ns, n.file_id, v.id, v.version, v.stream,
                v.size, v.time_ns, n.mtime_pinned, v.writer, p.step, r.version, r.writer,
                r.time_ns";

/// The joins that go with [`NODE_WITH_HEAD`]: the current version (a re-created file
/// without a commit yet has no version of its own), its process, the last read.
const NODE_HEAD_JOINS: &str = "LEFT JOIN versions v ON v.file_id = n.file_id
             AND v.version = (SELECT MAX(version) FROM versions WHERE file_id = n.file_id)
             AND v.id > COALESCE((SELECT MAX(version_id) FROM events
                                  WHERE file_id = n.file_id AND op = 'create'), 0)
         LEFT JOIN processes p ON p.id = v.process
         LEFT JOIN reads r ON r.file_id = n.file_id";

/// A row of [`NODE_WITH_HEAD`].
fn node_with_head(r: &dyn crate::store::sql::Row) -> Result<NodeRecord> {
    let mut n = node_from_row(r)?;
    n.step = r.get(18)?;
    if let Some(version) = r.get::<Option<i64>>(19)? {
        n.last_read = Some(LastRead {
            version,
            writer: r.get::<String>(20)?.into(),
            time_ns: r.get(21)?,
        });
    }
    Ok(n)
}

/// Every live node, parents before children, with its current version, its writer's
/// step and its last read ([`crate::store::Store::load`]).
pub(crate) fn load(conn: &dyn Conn) -> Result<Vec<NodeRecord>> {
    conn.all(
        &format!(
            "WITH RECURSIVE tree(ino, depth) AS (
                SELECT CAST(1 AS BIGINT), CAST(0 AS BIGINT)
                UNION ALL
                SELECT n.ino, t.depth + 1 FROM nodes n JOIN tree t ON n.parent = t.ino
             )
             {NODE_WITH_HEAD}
             FROM tree t JOIN nodes n ON n.ino = t.ino
             {NODE_HEAD_JOINS}
             ORDER BY t.depth, n.ino"
        ),
        p![],
        node_with_head,
    )
}

/// Node `ino` as [`load`] gives it, if it is in the store's tree (`nodes`): what a
/// daemon reloads of one file another daemon committed to ([`crate::fs::Fs::refresh_file`]).
pub(crate) fn load_node(conn: &dyn Conn, ino: u64) -> Result<Option<NodeRecord>> {
    conn.opt(
        &format!("{NODE_WITH_HEAD} FROM nodes n {NODE_HEAD_JOINS} WHERE n.ino = ?1"),
        p![ino],
        node_with_head,
    )
}

/// Nodes `inos` as [`load_node`] gives each (an inode not in the store left out). Read
/// 500 at a time, each time by a statement of 1, 8, 64 or 500 placeholders (the list
/// padded with its first inode), so that a connection prepares at most four texts.
pub(crate) fn load_nodes(conn: &dyn Conn, inos: &[u64]) -> Result<Vec<NodeRecord>> {
    let mut out = Vec::with_capacity(inos.len());
    for chunk in inos.chunks(500) {
        let size = [1, 8, 64, 500]
            .into_iter()
            .find(|&k| k >= chunk.len())
            .unwrap_or(500);
        let marks: Vec<String> = (1..=size).map(|i| format!("?{i}")).collect();
        let params: Vec<crate::store::sql::Param<'_>> = (0..size)
            .map(|i| crate::store::sql::Param::Int(*chunk.get(i).unwrap_or(&chunk[0]) as i64))
            .collect();
        out.extend(conn.all(
            &format!(
                "{NODE_WITH_HEAD} FROM nodes n {NODE_HEAD_JOINS} WHERE n.ino IN ({})",
                marks.join(",")
            ),
            &params,
            node_with_head,
        )?);
    }
    Ok(out)
}

/// The text of the rules recorded last (`rules`), if any (`""`: a mount without rules).
pub(crate) fn rules_text(conn: &dyn Conn) -> Result<Option<String>> {
    conn.opt_value("SELECT text FROM rules ORDER BY id DESC LIMIT 1", p![])
}

/// [`crate::store::History::meta`].
pub(crate) fn meta(conn: &dyn Conn, key: &str) -> Result<Option<String>> {
    conn.opt_value("SELECT value FROM meta WHERE key = ?1", p![key])
}

/// [`crate::store::History::lineage_at`].
pub(crate) fn lineage_at(conn: &dyn Conn, path: &str) -> Result<Option<i64>> {
    let path = path.trim_start_matches('/');
    if let Some(id) = crate::store::sql::write::live_lineage(conn, path)? {
        return Ok(Some(id));
    }
    let lossy = crate::store::paths::lossy(path);
    for p in std::iter::once(path).chain(lossy.as_deref()) {
        let found = conn.opt_value(
            "SELECT id FROM files WHERE path = ?1
             ORDER BY deleted_ns IS NOT NULL, deleted_ns DESC, id DESC LIMIT 1",
            p![p],
        )?;
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

/// [`crate::store::History::version_rows`].
/// The columns of a [`VersionRow`], from `version_log`.
const VERSION_ROW: &str =
    "SELECT version, path, op, size, blake3, writer, step, tgid, exe, time_ns, stream, id
     FROM version_log";

fn version_row_of(r: &dyn crate::store::sql::Row) -> Result<VersionRow> {
    Ok(VersionRow {
        version: r.get(0)?,
        path: r.get(1)?,
        op: r.get(2)?,
        size: r.get::<i64>(3)? as u64,
        blake3: r.get(4)?,
        writer: r.get(5)?,
        step: r.get(6)?,
        tgid: r.get(7)?,
        exe: r.get(8)?,
        time_ns: r.get(9)?,
        stream: r.get(10)?,
        id: r.get(11)?,
    })
}

pub(crate) fn version_rows(conn: &dyn Conn, file_id: i64) -> Result<Vec<VersionRow>> {
    conn.all(
        &format!("{VERSION_ROW} WHERE file_id = ?1 ORDER BY version"),
        p![file_id],
        version_row_of,
    )
}

/// [`crate::store::History::version_rows_page`].
pub(crate) fn version_rows_page(
    conn: &dyn Conn,
    file_id: i64,
    before: i64,
    limit: usize,
) -> Result<Vec<VersionRow>> {
    conn.all(
        &format!(
            "{VERSION_ROW} WHERE file_id = ?1 AND version < ?2 ORDER BY version DESC LIMIT ?3"
        ),
        p![file_id, before, limit as i64],
        version_row_of,
    )
}

/// [`crate::store::History::version_row`].
pub(crate) fn version_row(
    conn: &dyn Conn,
    file_id: i64,
    n: Option<i64>,
) -> Result<Option<VersionRow>> {
    match n {
        Some(n) => conn.opt(
            &format!("{VERSION_ROW} WHERE file_id = ?1 AND version = ?2"),
            p![file_id, n],
            version_row_of,
        ),
        None => conn.opt(
            &format!("{VERSION_ROW} WHERE file_id = ?1 ORDER BY version DESC LIMIT 1"),
            p![file_id],
            version_row_of,
        ),
    }
}

/// The events that change names. Rows of one change share its time; in the log they come
/// before its versions, and its other events (a shrink, a rollback's summary) after
/// them, each kind in the order written: a rollback that removes a file and brings back
/// the one at its path reads `unlink`, then the version `rollback`.
const NAMESPACE_OPS: &str = "'create', 'unlink', 'rename', 'mkdir', 'rmdir'";

/// [`crate::store::History::log`]: versions and events, oldest first ([`NAMESPACE_OPS`]
/// for the rows of one change).
/// The columns of the provenance views a database may lack: (transport, client,
/// client_version) and (uid, user_ns, own_ns), or NULLs in their place.
fn log_columns(conn: &dyn Conn) -> (&'static str, &'static str) {
    // A database no scratchfs since issue 12 has opened has no transport and client.
    let via = match conn.dialect() {
        Dialect::Postgres => "transport, client, client_version",
        Dialect::Sqlite => match conn.value::<i64>(
            "SELECT COUNT(*) FROM pragma_table_info('version_log') WHERE name = 'transport'",
            p![],
        ) {
            Ok(n) if n > 0 => "transport, client, client_version",
            _ => "NULL, NULL, NULL",
        },
    };
    // One from before issue 31 has no user namespace.
    let ns = match conn.dialect() {
        Dialect::Postgres => "uid, user_ns, own_ns",
        Dialect::Sqlite => match conn.value::<i64>(
            "SELECT COUNT(*) FROM pragma_table_info('version_log') WHERE name = 'user_ns'",
            p![],
        ) {
            Ok(n) if n > 0 => "uid, user_ns, own_ns",
            _ => "uid, NULL, NULL",
        },
    };
    (via, ns)
}

/// A row of the log's columns (see [`log`]).
fn log_row(r: &dyn crate::store::sql::Row) -> Result<LogEntry> {
    Ok(LogEntry {
        time_ns: r.get(0)?,
        kind: r.get(1)?,
        op: r.get(2)?,
        path: r.get(3)?,
        new_path: r.get(4)?,
        version: r.get(5)?,
        size: r.get(6)?,
        writer: r.get(7)?,
        step: r.get(8)?,
        tgid: r.get(9)?,
        exe: r.get(10)?,
        errno: r.get(11)?,
        reason: r.get(12)?,
        transport: r.get(13)?,
        client: r.get(14)?,
        client_version: r.get(15)?,
        uid: r.get(16)?,
        user_ns: r.get(17)?,
        own_ns: r.get::<Option<i64>>(18)?.map(|o| o != 0),
        inputs: None,
        id: r.get(19)?,
        event: if r.get::<String>(1)? == "event" {
            Some(r.get(21)?)
        } else {
            None
        },
    })
}

pub(crate) fn log(conn: &dyn Conn, filter: &LogFilter) -> Result<Vec<LogEntry>> {
    let (via, ns) = log_columns(conn);
    conn.all(
        &format!(
            "SELECT time_ns, 'version', op, path, NULL, version, size, writer, step, tgid, exe,
                    NULL, NULL, {via}, {ns}, id, 1, id
             FROM version_log WHERE ?2 = 0 AND (CAST(?1 AS TEXT) IS NULL OR path IN (?1, ?3))
             UNION ALL
             SELECT time_ns, 'event', op, path, new_path, NULL, size, writer, step, tgid, exe,
                    errno, reason, {via}, {ns}, NULL,
                    CASE WHEN op IN ({NAMESPACE_OPS}) THEN 0 ELSE 2 END, id
             FROM event_log WHERE (?2 = 0 OR op = 'rejected')
                 AND (CAST(?1 AS TEXT) IS NULL OR path IN (?1, ?3) OR new_path IN (?1, ?3))
             ORDER BY 1, 21, 22"
        ),
        p![&filter.path, filter.rejected, &filter.lossy],
        log_row,
    )
}

/// [`crate::store::History::log_page`]: the newest `limit` versions below `before.version`
/// and events below `before.event` that pass `filter` (each by its primary key, newest
/// first), merged by time (then versions after the events of the same instant, as
/// [`log`] orders them, reversed), cut to `limit`.
pub(crate) fn log_page(
    conn: &dyn Conn,
    filter: &PageFilter,
    before: LogCursor,
    limit: usize,
) -> Result<(Vec<LogEntry>, Option<LogCursor>)> {
    let (via, ns) = log_columns(conn);
    let f = &filter.log;
    let n = limit as i64 + 1;
    // ?1 path, ?2 lossy path, ?3 writer, ?4 op, ?5 step, ?6 below this id, ?7 rows.
    let versions: Vec<(LogEntry, i64, i64)> =
        if f.rejected || filter.op.as_deref().is_some_and(|o| o == "rejected") {
            Vec::new()
        } else {
            conn.all(
                &format!(
                    "SELECT time_ns, 'version', op, path, NULL, version, size, writer, step, tgid,
                        exe, NULL, NULL, {via}, {ns}, id, 1, id
                 FROM version_log
                 WHERE id < ?6 AND (CAST(?1 AS TEXT) IS NULL OR path IN (?1, ?2))
                   AND (CAST(?3 AS TEXT) IS NULL OR writer = ?3)
                   AND (CAST(?4 AS TEXT) IS NULL OR op = ?4)
                   AND (CAST(?5 AS BIGINT) IS NULL OR step = ?5)
                 ORDER BY id DESC LIMIT ?7"
                ),
                p![
                    &f.path,
                    &f.lossy,
                    &filter.writer,
                    &filter.op,
                    filter.step,
                    before.version,
                    n
                ],
                |r| Ok((log_row(r)?, r.get(20)?, r.get(21)?)),
            )?
        };
    let events: Vec<(LogEntry, i64, i64)> = conn.all(
        &format!(
            "SELECT time_ns, 'event', op, path, new_path, NULL, size, writer, step, tgid, exe,
                    errno, reason, {via}, {ns}, NULL,
                    CASE WHEN op IN ({NAMESPACE_OPS}) THEN 0 ELSE 2 END, id
             FROM event_log
             WHERE id < ?6 AND (?8 = 0 OR op = 'rejected')
               AND (CAST(?1 AS TEXT) IS NULL OR path IN (?1, ?2) OR new_path IN (?1, ?2))
               AND (CAST(?3 AS TEXT) IS NULL OR writer = ?3)
               AND (CAST(?4 AS TEXT) IS NULL OR op = ?4)
               AND (CAST(?5 AS BIGINT) IS NULL OR step = ?5)
             ORDER BY id DESC LIMIT ?7"
        ),
        p![
            &f.path,
            &f.lossy,
            &filter.writer,
            &filter.op,
            filter.step,
            before.event,
            n,
            f.rejected
        ],
        |r| Ok((log_row(r)?, r.get(20)?, r.get(21)?)),
    )?;
    let more = versions.len() > limit || events.len() > limit;
    let mut all: Vec<(LogEntry, i64, i64)> = versions.into_iter().chain(events).collect();
    all.sort_by_key(|e| std::cmp::Reverse((e.0.time_ns, e.1, e.2)));
    let more = more || all.len() > limit;
    all.truncate(limit);
    let mut next = before;
    for (e, _, id) in &all {
        if e.kind == "version" {
            next.version = next.version.min(*id);
        } else {
            next.event = next.event.min(*id);
        }
    }
    let page = all.into_iter().map(|(e, _, _)| e).collect();
    Ok((page, more.then_some(next)))
}

/// [`crate::store::History::log_head`].
pub(crate) fn log_head(conn: &dyn Conn) -> Result<LogCursor> {
    Ok(LogCursor {
        version: conn.value("SELECT COALESCE(MAX(id), 0) FROM versions", p![])?,
        event: conn.value("SELECT COALESCE(MAX(id), 0) FROM events", p![])?,
    })
}

/// [`crate::store::History::first_version_ns`].
pub(crate) fn first_version_ns(conn: &dyn Conn) -> Result<Option<i64>> {
    conn.value("SELECT MIN(time_ns) FROM versions", p![])
}

/// [`crate::store::History::files_by_versions`].
pub(crate) fn files_by_versions(
    conn: &dyn Conn,
    at: i64,
) -> Result<Vec<(String, ContentRef, i64)>> {
    conn.all(
        "SELECT v.path, v.stream, v.size, v.time_ns FROM versions v
             JOIN files f ON f.id = v.file_id
             WHERE v.time_ns <= ?1
               AND v.version = (SELECT MAX(version) FROM versions w
                                WHERE w.file_id = v.file_id AND w.time_ns <= ?1)
               AND NOT EXISTS (SELECT 1 FROM events e WHERE e.file_id = f.id
                               AND e.op = 'unlink' AND e.time_ns <= ?1 AND e.time_ns >= v.time_ns)
               AND NOT (f.merged_into IS NOT NULL AND f.deleted_ns <= ?1)
             ORDER BY v.path",
        p![at],
        |r| {
            Ok((
                r.get(0)?,
                ContentRef {
                    stream: r.get(1)?,
                    len: r.get::<i64>(2)? as u64,
                },
                r.get(3)?,
            ))
        },
    )
}

/// [`crate::store::History::refused_content`].
pub(crate) fn refused_content(conn: &dyn Conn, event: i64) -> Result<Option<(ContentRef, String)>> {
    conn.opt(
        "SELECT stream, size, blake3 FROM events
             WHERE id = ?1 AND op = 'rejected' AND stream IS NOT NULL",
        p![event],
        |r| {
            Ok((
                ContentRef {
                    stream: r.get(0)?,
                    len: r.get::<i64>(1)? as u64,
                },
                r.get::<Option<String>>(2)?.unwrap_or_default(),
            ))
        },
    )
}

/// [`crate::store::History::time_span`].
pub(crate) fn time_span(conn: &dyn Conn) -> Result<Option<(i64, i64)>> {
    let span = |table: &str| -> Result<Option<(i64, i64)>> {
        conn.one(
            &format!("SELECT MIN(time_ns), MAX(time_ns) FROM {table}"),
            p![],
            |r| Ok(r.get::<Option<i64>>(0)?.zip(r.get::<Option<i64>>(1)?)),
        )
    };
    Ok(match (span("versions")?, span("events")?) {
        (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
        (a, b) => a.or(b),
    })
}

/// [`crate::store::History::busiest_files`].
pub(crate) fn busiest_files(conn: &dyn Conn, limit: usize) -> Result<Vec<(i64, String, i64)>> {
    conn.all(
        "SELECT f.id, f.path, b.n FROM
             (SELECT file_id, COUNT(*) AS n FROM versions GROUP BY file_id
              ORDER BY n DESC, file_id LIMIT ?1) b
         JOIN files f ON f.id = b.file_id ORDER BY b.n DESC, f.id",
        p![limit as i64],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
}

/// Rows [`each_change`] reads at a time from each table (5,000): a PostgreSQL
/// connection holds a whole result before it is visited, so the replay reads pages.
const CHANGE_PAGE: i64 = 5_000;

/// One row of [`each_change`]'s streams: (time, kind: 0 unlink, 1 merged, 2 version, id,
/// lineage, size, writer).
type ChangeRow = (i64, i64, i64, i64, i64, String);

/// A row of [`ChangeRow`]'s columns; a lineage no longer known (an unlink of a version gc
/// forgot) is -1.
fn change_row(r: &dyn crate::store::sql::Row) -> Result<ChangeRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get::<Option<i64>>(3)?.unwrap_or(-1),
        r.get(4)?,
        r.get(5)?,
    ))
}

/// [`crate::store::History::busiest_writers`].
pub(crate) fn busiest_writers(conn: &dyn Conn, limit: usize) -> Result<(Vec<(String, i64)>, i64)> {
    let top = conn.all(
        "SELECT writer, COUNT(*) AS n FROM versions GROUP BY writer ORDER BY n DESC, writer
         LIMIT ?1",
        p![limit as i64],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let all = conn.value("SELECT COUNT(DISTINCT writer) FROM versions", p![])?;
    Ok((top, all))
}

/// [`crate::store::History::each_change`]: versions and unlink events, each read by its
/// primary key a page at a time, and the lineages merged by a rename (few: read at once),
/// merged in order of (time, kind: the namespace change before the versions of the same
/// instant, id). Memory: three pages, whatever the length of the log.
pub(crate) fn each_change(
    conn: &dyn Conn,
    f: &mut dyn FnMut(crate::store::Change<'_>) -> Result<()>,
) -> Result<()> {
    use crate::store::Change;
    use std::collections::VecDeque;
    let page = |sql: &str, after: i64| -> Result<VecDeque<ChangeRow>> {
        Ok(conn.all(sql, p![after, CHANGE_PAGE], change_row)?.into())
    };
    const VERSIONS: &str = "SELECT time_ns, CAST(2 AS BIGINT), id, file_id, size, writer
         FROM versions WHERE id > ?1 ORDER BY id LIMIT ?2";
    const UNLINKS: &str = "SELECT e.time_ns, CAST(0 AS BIGINT), e.id,
                COALESCE(e.file_id, (SELECT v.file_id FROM versions v WHERE v.id = e.version_id)),
                CAST(0 AS BIGINT), ''
         FROM events e WHERE e.op = 'unlink' AND e.id > ?1 ORDER BY e.id LIMIT ?2";
    let mut merged: VecDeque<ChangeRow> = conn
        .all(
            "SELECT deleted_ns, CAST(1 AS BIGINT), id, id, CAST(0 AS BIGINT), '' FROM files
             WHERE merged_into IS NOT NULL AND deleted_ns IS NOT NULL
             ORDER BY deleted_ns, id",
            p![],
            change_row,
        )?
        .into();
    let mut versions = page(VERSIONS, 0)?;
    let mut unlinks = page(UNLINKS, 0)?;
    let key = |r: &ChangeRow| (r.0, r.1, r.2);
    loop {
        let next = [&versions, &unlinks, &merged]
            .iter()
            .enumerate()
            .filter_map(|(i, q)| q.front().map(|r| (key(r), i)))
            .min();
        let Some((_, i)) = next else {
            return Ok(());
        };
        let row = match i {
            0 => versions.pop_front(),
            1 => unlinks.pop_front(),
            _ => merged.pop_front(),
        }
        .expect("a front row");
        // Refill a paged stream that just emptied, after the id last taken.
        if i == 0 && versions.is_empty() {
            versions = page(VERSIONS, row.2)?;
        }
        if i == 1 && unlinks.is_empty() {
            unlinks = page(UNLINKS, row.2)?;
        }
        let (time_ns, kind, _, file, size, writer) = row;
        if file < 0 {
            continue;
        }
        match kind {
            0 => f(Change::Unlink { time_ns, file })?,
            1 => f(Change::Merged { time_ns, file })?,
            _ => f(Change::Version {
                time_ns,
                file,
                size,
                writer: &writer,
            })?,
        }
    }
}

/// [`crate::store::History::last_reason`].
pub(crate) fn last_reason(conn: &dyn Conn, op: &str) -> Result<Option<String>> {
    Ok(conn
        .opt_value::<Option<String>>(
            "SELECT reason FROM events WHERE op = ?1 ORDER BY id DESC LIMIT 1",
            p![op],
        )?
        .flatten())
}
