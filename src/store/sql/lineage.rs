//! The questions lineage asks of the store (issue 13; `why` and `ground`,
//! [`crate::lineage`]): a version with its provenance, a live file's head, the versions
//! before one, the live files and who set each key of a JSON file. Queries both backends
//! run (docs/schema.md).

use std::collections::HashMap;

use super::{Conn, ConnExt};
use crate::lineage::why::VersionFacts;
use crate::p;
use crate::store::ContentRef;
use crate::store::error::Result;

/// Version `id` (`versions.id`) with its provenance, `None` when there is no such version.
pub(crate) fn version_facts(conn: &dyn Conn, id: i64) -> Result<Option<VersionFacts>> {
    conn.opt(
        "SELECT v.id, v.file_id, v.path, v.version, v.op, v.writer, p.exe, p.step, p.tgid,
                    v.time_ns, v.stream, v.size, v.restored_from, v.blake3,
                    o.source, o.source_id, o.source_version_id, o.path, o.version, o.writer
             FROM versions v JOIN processes p ON p.id = v.process
             LEFT JOIN origins o ON o.version_id = v.id
             WHERE v.id = ?1",
        p![id],
        |r| {
            Ok(VersionFacts {
                id: r.get(0)?,
                file_id: r.get(1)?,
                path: r.get(2)?,
                version: r.get(3)?,
                op: r.get(4)?,
                writer: r.get(5)?,
                exe: r.get(6)?,
                step: r.get(7)?,
                tgid: r.get(8)?,
                time_ns: r.get(9)?,
                content: ContentRef {
                    stream: r.get(10)?,
                    len: r.get::<i64>(11)? as u64,
                },
                restored_from: r.get(12)?,
                blake3: r.get(13)?,
                origin: match r.get::<Option<String>>(14)? {
                    Some(source) => Some(crate::store::Origin {
                        source,
                        source_id: r.get(15)?,
                        source_version_id: r.get(16)?,
                        path: r.get(17)?,
                        version: r.get(18)?,
                        writer: r.get(19)?,
                    }),
                    None => None,
                },
            })
        },
    )
}

/// The live lineage at `path` (stored form, [`crate::store::live_lineage`]) and its
/// current version (`versions.id`).
pub(crate) fn live_head(conn: &dyn Conn, path: &str) -> Result<Option<(i64, i64)>> {
    let Some(file_id) = crate::store::live_lineage(conn, path)? else {
        return Ok(None);
    };
    Ok(conn
        .opt_value(
            "SELECT id FROM versions WHERE file_id = ?1 ORDER BY version DESC LIMIT 1",
            p![file_id],
        )?
        .map(|id| (file_id, id)))
}

/// The ids of the versions of lineage `file_id` before number `version`, newest first, at
/// most `limit`.
pub(crate) fn earlier_versions(
    conn: &dyn Conn,
    file_id: i64,
    version: i64,
    limit: usize,
) -> Result<Vec<i64>> {
    conn.all(
        "SELECT id FROM versions WHERE file_id = ?1 AND version < ?2
             ORDER BY version DESC LIMIT ?3",
        p![file_id, version, limit as i64],
        |r| r.get(0),
    )
}

/// A live file with its current version, for grounding.
pub(crate) struct LiveFile {
    pub(crate) file_id: i64,
    pub(crate) path: String,
    pub(crate) version: i64,
    pub(crate) writer: String,
    pub(crate) step: Option<i64>,
    pub(crate) content: ContentRef,
}

/// Every live file that has a version, by path.
pub(crate) fn live_files(conn: &dyn Conn) -> Result<Vec<LiveFile>> {
    let rows = conn.all(
        "SELECT f.id, f.path, v.version, v.writer, p.step, v.stream, v.size
         FROM nodes n JOIN files f ON f.id = n.file_id
         JOIN versions v ON v.file_id = n.file_id
             AND v.version = (SELECT MAX(version) FROM versions WHERE file_id = n.file_id)
         JOIN processes p ON p.id = v.process
         WHERE n.parent IS NOT NULL AND n.kind = 'file' AND f.deleted_ns IS NULL
         ORDER BY f.path",
        p![],
        |r| {
            Ok(LiveFile {
                file_id: r.get(0)?,
                path: r.get(1)?,
                version: r.get(2)?,
                writer: r.get(3)?,
                step: r.get(4)?,
                content: ContentRef {
                    stream: r.get(5)?,
                    len: r.get::<i64>(6)? as u64,
                },
            })
        },
    )?;
    Ok(rows)
}

/// Who last changed a key: version number, writer, step, and for a version that brought
/// back earlier bytes (a rollback, a restore: `versions.restored_from` set) or came from
/// another scratchpad (an `origins` row: adopt) its id, else 0.
pub(crate) type Setter = (i64, String, Option<i64>, i64);

/// Per top-level key of a JSON lineage: the version number, writer and step that last
/// changed it, and whether that version brought back earlier bytes or came from another
/// scratchpad ([`Setter`]).
pub(crate) fn field_setters(conn: &dyn Conn, file_id: i64) -> Result<HashMap<String, Setter>> {
    let rows = conn.all(
        "SELECT f.key, v.version, v.writer, p.step,
                CASE WHEN v.restored_from IS NULL
                      AND NOT EXISTS (SELECT 1 FROM origins o WHERE o.version_id = v.id)
                     THEN 0 ELSE v.id END FROM fields f
         JOIN versions v ON v.id = f.version_id JOIN processes p ON p.id = v.process
         WHERE f.file_id = ?1",
        p![file_id],
        |r| {
            Ok((
                r.get::<String>(0)?,
                (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?),
            ))
        },
    )?;
    Ok(rows.into_iter().collect())
}
