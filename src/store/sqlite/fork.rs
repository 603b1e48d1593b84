//! `scratchfs fork` with history (issue 14; docs/checkpoints.md): a copy of the source
//! database (`VACUUM INTO`, from a read-only connection, so a live mount of it goes on)
//! cut back to a point: everything made after it goes (versions, events, namespace rows,
//! checkpoints, rules), the live tree becomes the tree at the point, and the content
//! nothing refers to any more is dropped. The copy keeps the history up to the point, with
//! the same ids, so `.history`, `log`, `why` and the checkpoints before it read the same.

use super::*;
use crate::checkpoint::Point;

/// Makes the new database `dst` (it must not exist) a fork of `src` at `point`: its
/// history up to the point, its tree the tree then. `max_checkpoint`: checkpoints with a
/// higher id are left out (a fork at a checkpoint keeps it and the ones before it).
/// `forked_from` is kept as `meta.forked_from` (JSON: where it came from). `EEXIST` when
/// `dst` exists.
pub fn fork_full(
    src: &Path,
    dst: &Path,
    point: Point,
    max_checkpoint: Option<i64>,
    forked_from: &str,
) -> Result<()> {
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Private from the start: VACUUM INTO writes into the empty file.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dst)
            .map_err(|e| cannot_open(dst, &e))?;
    }
    let done = (|| -> Result<()> {
        let from = open_read_only(src)?;
        from.execute("VACUUM INTO ?1", [dst.to_string_lossy()])?;
        drop(from);
        let mut conn = open_conn(dst)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        trim(
            &tx,
            point,
            max_checkpoint.unwrap_or(i64::MAX),
            forked_from,
            dst,
        )?;
        tx.commit()?;
        conn.execute_batch("VACUUM")?;
        Ok(())
    })();
    if done.is_err() {
        for p in companions(dst) {
            let _ = std::fs::remove_file(p);
        }
    }
    done
}

/// Cuts the copy back to `point` (inside `tx`).
fn trim(tx: &Connection, p: Point, max_cp: i64, forked_from: &str, dst: &Path) -> Result<()> {
    let (t, v, e, seq) = (p.time_ns, p.version_seq, p.event_seq, p.tree_seq);
    // Lineages whose per-key provenance names versions that go.
    let touched: Vec<i64> = {
        let mut stmt = tx.prepare("SELECT DISTINCT file_id FROM versions WHERE id > ?1")?;
        let rows = stmt.query_map([v], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    tx.execute("DELETE FROM versions WHERE id > ?1", [v])?;
    tx.execute("DELETE FROM forgotten WHERE version_id > ?1", [v])?;
    tx.execute("DELETE FROM inputs WHERE version_id > ?1", [v])?;
    tx.execute("DELETE FROM origins WHERE version_id > ?1", [v])?;
    tx.execute("DELETE FROM reads WHERE version_id > ?1", [v])?;
    tx.execute("DELETE FROM events WHERE id > ?1", [e])?;
    tx.execute("DELETE FROM tree_log WHERE id > ?1", [seq])?;
    tx.execute(
        "DELETE FROM checkpoints WHERE id > ?1 OR time_ns > ?2",
        params![max_cp, t],
    )?;
    tx.execute(
        "UPDATE checkpoints SET dropped_ns = NULL WHERE dropped_ns > ?1",
        [t],
    )?;
    tx.execute("DELETE FROM rules WHERE time_ns > ?1", [t])?;
    // Nodes: those made after the point go; every other takes its state then.
    tx.execute(
        "DELETE FROM nodes WHERE ino NOT IN (SELECT ino FROM tree_log)
             AND (unlinked_ns IS NULL OR unlinked_ns > ?1)",
        [t],
    )?;
    tx.execute(
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
        [],
    )?;
    // Lineages: those begun after the point go; those live then are live, under their
    // path then; the others end as they had by then.
    tx.execute(
        "DELETE FROM files WHERE id NOT IN (SELECT file_id FROM versions)
             AND id NOT IN (SELECT file_id FROM tree_log WHERE file_id IS NOT NULL)",
        [],
    )?;
    let snap = crate::checkpoint::Snapshot::from_nodes(super::checkpoint::snapshot_rows(tx, p)?);
    let mut live = std::collections::HashSet::new();
    for (path, n) in snap.walk() {
        if let Some(fid) = n.file_id {
            live.insert(fid);
            tx.prepare_cached(
                "UPDATE files SET deleted_ns = NULL, merged_into = NULL, path = ?1 WHERE id = ?2",
            )?
            .execute(params![path, fid])?;
        }
    }
    let ended: Vec<i64> = {
        let mut stmt =
            tx.prepare("SELECT id FROM files WHERE deleted_ns IS NULL OR deleted_ns > ?1")?;
        let rows = stmt.query_map([t], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for fid in ended.into_iter().filter(|f| !live.contains(f)) {
        tx.prepare_cached(
            "UPDATE files SET merged_into = NULL,
                 deleted_ns = COALESCE((SELECT MAX(time_ns) FROM events
                                        WHERE file_id = ?1 AND op = 'unlink'), ?2)
             WHERE id = ?1",
        )?
        .execute(params![fid, t])?;
    }
    // Per-key provenance of the lineages that lost versions, from their versions left.
    for fid in touched {
        tx.execute("DELETE FROM fields WHERE file_id = ?1", [fid])?;
        let versions: Vec<(i64, String, ContentRef)> = {
            let mut stmt = tx.prepare(
                "SELECT id, path, stream, size FROM versions WHERE file_id = ?1 ORDER BY version",
            )?;
            let rows = stmt.query_map([fid], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    ContentRef {
                        stream: r.get(2)?,
                        len: r.get::<_, i64>(3)? as u64,
                    },
                ))
            })?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        let mut before = None;
        for (id, path, content) in versions {
            update_fields(tx, fid, &path, before, content, id)?;
            before = Some(content);
        }
    }
    sweep_content(tx, &[])?;
    tx.execute(
        "DELETE FROM meta WHERE key IN ('mountpoint', 'mcp_socket', 'last_gc', 'last_rollback')",
        [],
    )?;
    for (k, val) in [
        ("redo_seq", "0".to_string()),
        ("scratchpad_id", new_scratchpad_id(dst)),
        ("forked_from", forked_from.to_string()),
    ] {
        tx.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
            params![k, val],
        )?;
    }
    Ok(())
}
