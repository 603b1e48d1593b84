//! The text index of every version (`search` with `history`, issue 33 item 4), beside
//! [`super::text_index`] of the live files. A version is immutable, so its row is written
//! once and stays until gc forgets the version (or a redaction drops the index whole).
//!
//! What a row indexes is what a history search reads of that version
//! ([`crate::fs::history_index::part_read`]): a version of the same stream that reaches
//! the start of the earlier one's last line (an append, or a truncation within that
//! line) only from there (`from_off`, that line's number `first_line`), any other version
//! whole; at most [`crate::fs::INDEX_MAX`] of it as text. So an appended log of 10,000
//! versions indexes its bytes about once, not 10,000 times, and a search reads the
//! versions whose indexed part may match. Each row also keeps where its own last line
//! begins (`tail_off`, `tail_line`), so that the next version's row is made without
//! reading this one again.
//!
//! The index is a filter, never an answer: the caller reads each candidate through the
//! core, as the caller, and matches it there ([`crate::fs::Fs::history_candidates`]).
//!
//! Tables (created on first use, so a pad never searched carries none):
//! `history_indexed (version_id, file_id, stream, len, from_off, first_line, tail_off,
//! tail_line, kind)`, and SQLite's `history_index` (FTS5 `trigram`, rowid = version id)
//! or PostgreSQL's `history_index (version_id, body)` with a GIN `pg_trgm` index. Both
//! hold a copy of every version's text: gc deletes the rows of what it forgets
//! ([`forget`]), a redaction and a fork's cut drop them whole ([`drop_all`]).

use super::{Conn, ConnExt, Dialect, Param};
use crate::p;
use crate::store::error::Result;

/// What a history search does with one version, as the index recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Its text from `from_off` is indexed: read only when the index names it.
    Text,
    /// Its text from `from_off` is larger than the index takes: read by every search.
    Scan,
    /// Binary (a NUL in the first 8 KiB of a version read whole) or over the size a
    /// search reads: never read, and the next version is read whole.
    Skip,
}

impl Kind {
    fn code(self) -> i64 {
        match self {
            Kind::Text => 0,
            Kind::Scan => 1,
            Kind::Skip => 2,
        }
    }
    fn from_code(c: i64) -> Kind {
        match c {
            0 => Kind::Text,
            1 => Kind::Scan,
            _ => Kind::Skip,
        }
    }
}

/// Where a version's last line begins: what the next version, if it appends, is read
/// from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tail {
    /// The version's stream and length.
    pub stream: i64,
    pub len: u64,
    /// Byte offset of its last (maybe unfinished) line, and that line's number (1-based).
    pub off: u64,
    pub line: u64,
}

/// One version's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRow {
    pub version_id: i64,
    pub file_id: i64,
    pub kind: Kind,
    /// Where the part read begins (0 for a version read whole), and its first line's
    /// number.
    pub from_off: u64,
    pub first_line: u64,
    /// `None` after a [`Kind::Skip`]: the next version is read whole.
    pub tail: Option<Tail>,
}

/// A row and, for [`Kind::Text`], the text indexed (UTF-8, NULs made spaces).
#[derive(Debug, Clone)]
pub struct HistoryEntry {
    pub row: HistoryRow,
    pub text: Option<String>,
}

/// Creates the index's tables if missing, on a connection outside any transaction.
/// `Ok(false)`: PostgreSQL without `pg_trgm`, which the role may not create.
pub fn prepare(conn: &dyn Conn) -> Result<bool> {
    let rows = "CREATE TABLE IF NOT EXISTS history_indexed (
                    version_id BIGINT PRIMARY KEY, file_id BIGINT NOT NULL,
                    kind BIGINT NOT NULL, from_off BIGINT NOT NULL,
                    first_line BIGINT NOT NULL, stream BIGINT, len BIGINT,
                    tail_off BIGINT, tail_line BIGINT);
                CREATE INDEX IF NOT EXISTS history_indexed_by_file
                    ON history_indexed(file_id, version_id);
                CREATE INDEX IF NOT EXISTS history_indexed_scanned
                    ON history_indexed(version_id) WHERE kind = 1;";
    match conn.dialect() {
        Dialect::Sqlite => {
            conn.batch(rows)?;
            conn.batch(
                "CREATE VIRTUAL TABLE IF NOT EXISTS history_index USING fts5(
                     body, tokenize = 'trigram');",
            )?;
            Ok(true)
        }
        Dialect::Postgres => {
            if !super::text_index::has_pg_trgm(conn)? {
                return Ok(false);
            }
            conn.batch(rows)?;
            conn.batch(
                "CREATE TABLE IF NOT EXISTS history_index (
                     version_id BIGINT PRIMARY KEY, body TEXT NOT NULL);
                 CREATE INDEX IF NOT EXISTS history_index_trgm
                     ON history_index USING gin (body gin_trgm_ops);",
            )?;
            Ok(true)
        }
    }
}

fn row_of(r: &dyn super::Row) -> Result<HistoryRow> {
    let stream: Option<i64> = r.get(5)?;
    let tail = match stream {
        Some(stream) => Some(Tail {
            stream,
            len: r.get::<i64>(6)? as u64,
            off: r.get::<i64>(7)? as u64,
            line: r.get::<i64>(8)? as u64,
        }),
        None => None,
    };
    Ok(HistoryRow {
        version_id: r.get(0)?,
        file_id: r.get(1)?,
        kind: Kind::from_code(r.get(2)?),
        from_off: r.get::<i64>(3)? as u64,
        first_line: r.get::<i64>(4)? as u64,
        tail,
    })
}

const COLUMNS: &str =
    "version_id, file_id, kind, from_off, first_line, stream, len, tail_off, tail_line";

/// The newest row of each file the index holds (the version the next one continues).
pub fn heads(conn: &dyn Conn) -> Result<Vec<HistoryRow>> {
    conn.all(
        &format!(
            "SELECT {COLUMNS} FROM history_indexed
             WHERE version_id IN (SELECT MAX(version_id) FROM history_indexed GROUP BY file_id)"
        ),
        &[],
        row_of,
    )
}

/// Every row of file `file_id`, oldest first.
pub fn rows_of(conn: &dyn Conn, file_id: i64) -> Result<Vec<HistoryRow>> {
    conn.all(
        &format!("SELECT {COLUMNS} FROM history_indexed WHERE file_id = ?1 ORDER BY version_id"),
        p![file_id],
        row_of,
    )
}

/// Adds `entries`, in the caller's transaction; a version already indexed (by another
/// daemon of the same PostgreSQL scratchpad) is left as it is.
pub fn put(conn: &dyn Conn, entries: &[HistoryEntry]) -> Result<()> {
    for e in entries {
        let r = &e.row;
        let t = r.tail;
        let added: Option<i64> = conn.opt_value(
            "INSERT INTO history_indexed
                 (version_id, file_id, kind, from_off, first_line, stream, len, tail_off,
                  tail_line)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (version_id) DO NOTHING RETURNING version_id",
            p![
                r.version_id,
                r.file_id,
                r.kind.code(),
                r.from_off as i64,
                r.first_line as i64,
                t.map(|t| t.stream),
                t.map(|t| t.len as i64),
                t.map(|t| t.off as i64),
                t.map(|t| t.line as i64)
            ],
        )?;
        let (Some(_), Some(text)) = (added, &e.text) else {
            continue;
        };
        match conn.dialect() {
            Dialect::Sqlite => conn.exec(
                "INSERT INTO history_index (rowid, body) VALUES (?1, ?2)",
                p![r.version_id, text],
            )?,
            Dialect::Postgres => conn.exec(
                "INSERT INTO history_index (version_id, body) VALUES (?1, ?2)
                 ON CONFLICT (version_id) DO NOTHING",
                p![r.version_id, text],
            )?,
        }
    }
    Ok(())
}

/// The versions whose indexed text may hold any of `literals` (as
/// [`super::text_index::query`] takes them), and those every search reads: `(file_id,
/// version_id)`, unordered.
pub fn query(conn: &dyn Conn, literals: &[String], ignore_case: bool) -> Result<Vec<(i64, i64)>> {
    let (matching, patterns) =
        super::text_index::match_clause(conn.dialect(), "history_index", literals, ignore_case);
    let params: Vec<Param<'_>> = patterns.iter().map(|p| Param::Text(p)).collect();
    let sql = format!(
        "SELECT file_id, version_id FROM history_indexed WHERE kind = 1
         UNION ALL
         SELECT h.file_id, h.version_id FROM history_indexed h
         WHERE h.version_id IN (SELECT {} FROM history_index WHERE {matching})",
        match conn.dialect() {
            Dialect::Sqlite => "rowid",
            Dialect::Postgres => "version_id",
        }
    );
    conn.all(&sql, &params, |r| Ok((r.get(0)?, r.get(1)?)))
}

/// Read bits, uid and gid of every file inode the store holds, linked or not, each once
/// (what guards the versions they carried, [`super::read::version_guard`]). A caller
/// every one of these lets read may read every version, if [`legacy_versions`] is false.
pub fn guards(conn: &dyn Conn) -> Result<Vec<(u32, u32, u32)>> {
    conn.all(
        "SELECT DISTINCT mode & 292, uid, gid FROM nodes WHERE kind = 'file'",
        &[],
        |r| {
            Ok((
                r.get::<i64>(0)? as u32,
                r.get::<i64>(1)? as u32,
                r.get::<i64>(2)? as u32,
            ))
        },
    )
}

/// Whether some version names no inode (from before `versions.ino`; its guard may be the
/// daemon's user): one pass over `versions` when there are none, so asked once a mount
/// (every version made since carries its inode).
pub fn legacy_versions(conn: &dyn Conn) -> Result<bool> {
    conn.value(
        "SELECT EXISTS (SELECT 1 FROM versions WHERE ino IS NULL)",
        &[],
    )
}

/// Deletes the rows of the versions whose ids are in the table `dropped` (one column
/// `id`), in the caller's transaction; nothing when the index was never made.
pub fn forget(conn: &dyn Conn, dropped: &str) -> Result<()> {
    let exists: bool = match conn.dialect() {
        Dialect::Sqlite => conn.value(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'history_indexed')",
            &[],
        )?,
        Dialect::Postgres => {
            conn.value("SELECT to_regclass('history_indexed') IS NOT NULL", &[])?
        }
    };
    if !exists {
        return Ok(());
    }
    let key = match conn.dialect() {
        Dialect::Sqlite => "rowid",
        Dialect::Postgres => "version_id",
    };
    conn.batch(&format!(
        "DELETE FROM history_index WHERE {key} IN (SELECT id FROM {dropped});
         DELETE FROM history_indexed WHERE version_id IN (SELECT id FROM {dropped});"
    ))
}

/// Drops the index whole (a redaction: it holds a copy of every version's text).
pub fn drop_all(conn: &dyn Conn) -> Result<()> {
    conn.batch("DROP TABLE IF EXISTS history_index; DROP TABLE IF EXISTS history_indexed")
}
