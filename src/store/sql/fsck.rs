//! The store's own checks (`scratchfs fsck`, docs/schema.md): every stored byte re-hashed
//! with blake3, and the invariants of the schema, in queries both backends run.

use super::{Conn, ConnExt};
use crate::p;
use crate::store::error::Result;
use crate::store::{ContentRef, FsckProgress, FsckReport};
use crate::views::quote_stored;

/// [`crate::store::History::fsck`]: one blob and one version in memory at a time
/// (a version's bytes streamed, holes not read), whatever the backend.
pub(crate) fn check(conn: &dyn Conn, progress: &mut dyn FnMut(FsckProgress)) -> Result<FsckReport> {
    let mut faults: Vec<String> = Vec::new();
    let total: i64 = conn.value(
        "SELECT (SELECT COUNT(*) FROM blobs) + (SELECT COUNT(*) FROM versions)",
        p![],
    )?;
    progress(FsckProgress::Total(total as u64));
    // 1. Every blob's bytes hash to its name.
    {
        // One blob (at most 64 KiB, `CHUNK`) in memory at a time, whichever the backend.
        let ids: Vec<i64> = conn.all("SELECT id FROM blobs ORDER BY id", p![], |r| r.get(0))?;
        for id in ids {
            let (hash, size, data): (Vec<u8>, i64, Vec<u8>) = conn.one(
                "SELECT hash, size, data FROM blobs WHERE id = ?1",
                p![id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            if blake3::hash(&data).as_bytes().as_slice() != hash.as_slice() {
                faults.push(format!("blob {id}: content does not match its blake3"));
            }
            if data.len() as i64 != size {
                faults.push(format!("blob {id}: {} bytes, recorded {size}", data.len()));
            }
            progress(FsckProgress::Checked);
        }
    }
    // 2. Every extent points at bytes that exist.
    for (sql, what) in [
        (
            "SELECT COUNT(*) FROM extents e LEFT JOIN blobs b ON b.id = e.blob
             WHERE e.blob IS NOT NULL AND (b.id IS NULL OR e.blob_off + e.len > b.size)",
            "extents pointing past or outside their blob",
        ),
        (
            "SELECT COUNT(*) FROM extents WHERE blob IS NULL AND (data IS NULL OR length(data) != len)",
            "inline extents whose bytes are missing or of the wrong length",
        ),
        (
            r#"SELECT COUNT(*) FROM extents a JOIN extents b ON a.stream = b.stream
             AND b."offset" > a."offset" AND b."offset" < a."offset" + a.len"#,
            "overlapping extents",
        ),
        (
            "SELECT COUNT(*) FROM nodes n LEFT JOIN nodes p ON p.ino = n.parent
             WHERE n.parent IS NOT NULL AND (p.ino IS NULL OR p.kind != 'dir')",
            "nodes whose parent is missing or not a directory",
        ),
        (
            // A file may have no version (created, its first commit not made: the daemon
            // was killed meanwhile), but never no lineage.
            "SELECT COUNT(*) FROM nodes n WHERE n.kind = 'file' AND n.parent IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM files f WHERE f.id = n.file_id)",
            "live files without a lineage",
        ),
        (
            "SELECT COUNT(*) FROM versions v LEFT JOIN processes p ON p.id = v.process
             WHERE p.id IS NULL",
            "versions without their process row",
        ),
        (
            "SELECT COUNT(*) FROM versions WHERE version < 1",
            "versions numbered below 1",
        ),
        (
            // The namespace log (issue 14) ends where the tree is: each live node's last
            // row is its state now.
            "SELECT COUNT(*) FROM nodes n
             LEFT JOIN tree_log t ON t.id = (SELECT MAX(id) FROM tree_log WHERE ino = n.ino)
             WHERE (n.parent IS NOT NULL OR n.ino = 1)
               AND (t.id IS NULL OR t.parent IS DISTINCT FROM COALESCE(n.parent, 0)
                    OR t.name != n.name OR t.mode != n.mode OR t.uid != n.uid
                    OR t.gid != n.gid OR t.file_id IS DISTINCT FROM n.file_id)",
            "live nodes whose state the namespace log does not end with",
        ),
        (
            "SELECT COUNT(*) FROM checkpoints c WHERE c.dropped_ns IS NULL
             AND (c.tree_seq > (SELECT COALESCE(MAX(id), 0) FROM tree_log)
                  OR c.version_seq > (SELECT COALESCE(MAX(id), 0) FROM versions))",
            "checkpoints pointing past the end of history",
        ),
        (
            "SELECT COUNT(*) FROM versions v LEFT JOIN streams s ON s.id = v.stream
             WHERE v.stream != 0 AND s.id IS NULL",
            "versions whose stream is missing",
        ),
    ] {
        let n: i64 = conn.value(sql, p![])?;
        if n > 0 {
            faults.push(format!("{n} {what}"));
        }
    }
    // 3. Every version's bytes hash to its recorded blake3, read in chunks (memory stays
    // bounded whatever the size), one row at a time.
    {
        type Row = (i64, String, i64, i64, i64, String);
        let rows: Vec<Row> = conn.all(
            "SELECT id, path, version, stream, size, blake3 FROM versions ORDER BY id",
            p![],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            },
        )?;
        for (id, path, version, stream, size, hash) in rows {
            let path = quote_stored(&path);
            let content = ContentRef {
                stream,
                len: size as u64,
            };
            // Streamed, one extent at a time (holes are not read): bounded memory.
            let end = super::content::stream_end(conn, content.stream);
            match (end, super::content::digest_of(conn, content)) {
                (Ok(end), _) if size > 0 && end < size as u64 => faults.push(format!(
                    "{path}@{version} (version {id}): its stream ends at byte {end} of {size}"
                )),
                (_, Ok(d)) if d != hash => faults.push(format!(
                    "{path}@{version} (version {id}): content does not match its blake3"
                )),
                (Ok(_), Ok(_)) => {}
                (Err(e), _) | (_, Err(e)) => {
                    faults.push(format!("{path}@{version} (version {id}): {}", e.reason))
                }
            }
            progress(FsckProgress::Checked);
        }
    }
    Ok(FsckReport {
        checked: total as u64,
        faults,
    })
}
