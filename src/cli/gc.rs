//! `scratchfs gc --keep-last N | --before TIME [--dry-run]`: forgets old versions and the
//! content only they held (SPEC §2). Nothing is selected without one of the two flags, and
//! these are never deleted: the current version of every file (deleted files included, so
//! `.archive` stays whole), the versions MANIFEST points at (its `restorable:` list), and
//! the versions that per-key provenance of a JSON file names. It runs only while the
//! database is not mounted (open handles may be reading old versions).

use std::path::Path;

use rusqlite::{Connection, params};

use super::Failure;
use crate::views::manifest::REFUSALS_SHOWN;

/// What gc did (or would do).
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// Versions deleted.
    pub versions: u64,
    /// Bytes of blob content no longer referenced, deleted.
    pub blob_bytes: u64,
    /// Nothing was changed.
    pub dry_run: bool,
}

/// Runs gc. `keep_last`: keep the newest N versions of every file; `before_ns`: forget
/// versions committed before this time. With both, a version goes if either says so.
pub fn gc(
    db: &Path,
    keep_last: Option<u64>,
    before_ns: Option<i64>,
    dry_run: bool,
    json: bool,
) -> Result<(), Failure> {
    if keep_last.is_none() && before_ns.is_none() {
        return Err("gc: nothing selected: give --keep-last N or --before TIME".into());
    }
    // Open handles of a mount may still read versions that gc would forget.
    let _lock = crate::mount::lock_database_now(db)
        .map_err(|_| "gc: the database is mounted: unmount it first".to_string())?;
    let mut conn = Connection::open(db).map_err(|e| format!("{}: {e}", db.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    let tx = conn.transaction().map_err(|e| e.to_string())?;
    let e = |e: rusqlite::Error| e.to_string();
    tx.execute_batch(
        "CREATE TEMP TABLE gc_keep(id INTEGER PRIMARY KEY);
         CREATE TEMP TABLE gc_drop(id INTEGER PRIMARY KEY);",
    )
    .map_err(e)?;
    // Protected versions.
    tx.execute(
        "INSERT OR IGNORE INTO gc_keep
         SELECT id FROM versions v WHERE version = (SELECT MAX(version) FROM versions w WHERE w.file_id = v.file_id)
         UNION SELECT version_id FROM fields
         UNION SELECT version_id FROM events WHERE id IN (SELECT id FROM events_restorable ORDER BY id DESC LIMIT ?1)",
        [REFUSALS_SHOWN as i64],
    )
    .map_err(e)?;
    tx.execute(
        "INSERT OR IGNORE INTO gc_drop
         SELECT v.id FROM versions v
         WHERE v.id NOT IN (SELECT id FROM gc_keep)
           AND ((?1 IS NOT NULL AND (SELECT COUNT(*) FROM versions w WHERE w.file_id = v.file_id AND w.version > v.version) >= ?1)
             OR (?2 IS NOT NULL AND v.time_ns < ?2))",
        params![keep_last.map(|n| n as i64), before_ns],
    )
    .map_err(e)?;
    let versions: i64 = tx
        .query_row("SELECT COUNT(*) FROM gc_drop", [], |r| r.get(0))
        .map_err(e)?;
    tx.execute(
        "DELETE FROM versions WHERE id IN (SELECT id FROM gc_drop)",
        [],
    )
    .map_err(e)?;
    // Content: the bytes of each stream still referenced (by a version or a refusal) end
    // at the longest reference; the rest of the stream, and unreferenced streams, go.
    tx.execute_batch(
        "CREATE TEMP TABLE gc_streams AS
             SELECT stream, MAX(size) AS len FROM (
                 SELECT stream, size FROM versions
                 UNION ALL SELECT stream, size FROM events WHERE stream IS NOT NULL)
             GROUP BY stream;
         DELETE FROM extents WHERE NOT EXISTS
             (SELECT 1 FROM gc_streams s WHERE s.stream = extents.stream AND extents.offset < s.len);
         DELETE FROM streams WHERE id NOT IN (SELECT stream FROM gc_streams);",
    )
    .map_err(e)?;
    let blob_bytes: i64 = tx
        .query_row(
            "SELECT COALESCE(SUM(size), 0) FROM blobs WHERE id NOT IN (SELECT blob FROM extents WHERE blob IS NOT NULL)",
            [],
            |r| r.get(0),
        )
        .map_err(e)?;
    tx.execute(
        "DELETE FROM blobs WHERE id NOT IN (SELECT blob FROM extents WHERE blob IS NOT NULL)",
        [],
    )
    .map_err(e)?;
    if dry_run {
        tx.rollback().map_err(e)?;
    } else {
        tx.commit().map_err(e)?;
    }
    let report = Report {
        versions: versions as u64,
        blob_bytes: blob_bytes as u64,
        dry_run,
    };
    if json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "gc: {} {} versions and {} bytes of content{}",
            if dry_run { "would delete" } else { "deleted" },
            report.versions,
            report.blob_bytes,
            if dry_run {
                " (dry run: nothing changed)"
            } else {
                ""
            }
        );
    }
    Ok(())
}
