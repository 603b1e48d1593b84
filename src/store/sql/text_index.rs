//! The text index of the live files (issue 33 item 4, `search`): for each live file, the
//! version whose text is indexed, and a trigram index of that text, so that a search for
//! a literal reads only the files that may hold it. SQLite: an FTS5 table with the
//! `trigram` tokenizer (SQLite 3.34; it keeps its own copy of the text, so that an older
//! `sqlite3` shell than ours reads it too). PostgreSQL: the text in a table with a GIN
//! `pg_trgm` index (the extension is created if it is missing; without it there is no
//! index and searches read every file). Both hold a copy of the live text: a redaction
//! drops the index whole ([`super::admin::redact_in`]).
//!
//! The index is a filter, never an answer: the caller reads each candidate through the
//! core and matches it there, so an index that holds more than a file's text (a version
//! since replaced, a file since deleted) costs a read, never a wrong result. It is brought
//! up to date by the core before each search ([`crate::fs::Fs::text_candidates`]), from
//! the versions the tree holds: the commit path pays nothing for it.
//!
//! Tables (created on first use, so a pad never searched carries none): `text_indexed
//! (file_id, version_id, scan)` and SQLite's `text_index` (FTS5, rowid = file id) or
//! PostgreSQL's `text_index (file_id, body)`.

use super::{Conn, ConnExt, Dialect, Param};
use crate::p;
use crate::store::error::Result;

/// What the index holds for one live file ([`put`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextEntry {
    /// The file's version `version_id` holds `text` (UTF-8, NULs made spaces).
    Text {
        file_id: i64,
        version_id: i64,
        text: String,
    },
    /// The file's version `version_id` is not indexed: too large to index, so every
    /// search reads it (`scan`), or binary or too large to search, so none does.
    Unindexed {
        file_id: i64,
        version_id: i64,
        scan: bool,
    },
    /// The file is gone: its rows go, if they are still of version `version_id` or older.
    Gone { file_id: i64, version_id: i64 },
}

impl TextEntry {
    /// The file's id and the version id the entry is about.
    pub fn ids(&self) -> (i64, i64) {
        match self {
            TextEntry::Text {
                file_id,
                version_id,
                ..
            }
            | TextEntry::Unindexed {
                file_id,
                version_id,
                ..
            }
            | TextEntry::Gone {
                file_id,
                version_id,
            } => (*file_id, *version_id),
        }
    }
}

/// Creates the index's tables if missing, on a connection outside any transaction.
/// `Ok(false)`: this database cannot have one (PostgreSQL without `pg_trgm`, which the
/// role may not create); the reason is logged once by the caller.
pub fn prepare(conn: &dyn Conn) -> Result<bool> {
    match conn.dialect() {
        Dialect::Sqlite => {
            conn.batch(
                "CREATE TABLE IF NOT EXISTS text_indexed (
                     file_id INTEGER PRIMARY KEY, version_id INTEGER NOT NULL,
                     scan INTEGER NOT NULL DEFAULT 0);
                 CREATE INDEX IF NOT EXISTS text_indexed_scanned
                     ON text_indexed(file_id) WHERE scan = 1;
                 CREATE VIRTUAL TABLE IF NOT EXISTS text_index USING fts5(
                     body, tokenize = 'trigram');",
            )?;
            Ok(true)
        }
        Dialect::Postgres => {
            if !has_pg_trgm(conn)? {
                return Ok(false);
            }
            conn.batch(
                "CREATE TABLE IF NOT EXISTS text_indexed (
                     file_id BIGINT PRIMARY KEY, version_id BIGINT NOT NULL,
                     scan BIGINT NOT NULL DEFAULT 0);
                 CREATE INDEX IF NOT EXISTS text_indexed_scanned
                     ON text_indexed(file_id) WHERE scan = 1;
                 CREATE TABLE IF NOT EXISTS text_index (
                     file_id BIGINT PRIMARY KEY, body TEXT NOT NULL);
                 CREATE INDEX IF NOT EXISTS text_index_trgm
                     ON text_index USING gin (body gin_trgm_ops);",
            )?;
            Ok(true)
        }
    }
}

/// Whether PostgreSQL's `pg_trgm` is there, created if missing (`false`: this role may
/// not create it); on a connection outside any transaction. Both text indexes need it.
pub(super) fn has_pg_trgm(conn: &dyn Conn) -> Result<bool> {
    let has: bool = conn.value(
        "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')",
        &[],
    )?;
    Ok(has || conn.batch("CREATE EXTENSION IF NOT EXISTS pg_trgm").is_ok())
}

/// Every indexed file: `(file_id, version_id)`.
pub fn rows(conn: &dyn Conn) -> Result<Vec<(i64, i64)>> {
    conn.all("SELECT file_id, version_id FROM text_indexed", &[], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
}

/// Applies `entries`, in the caller's transaction. A row is replaced only by a newer
/// version of its file (two daemons of one PostgreSQL scratchpad may index one file at
/// once, one of them a moment behind).
pub fn put(conn: &dyn Conn, entries: &[TextEntry]) -> Result<()> {
    for e in entries {
        let (file_id, version_id) = e.ids();
        let newer: Option<i64> = match e {
            TextEntry::Gone { .. } => conn.opt_value(
                "DELETE FROM text_indexed WHERE file_id = ?1 AND version_id <= ?2
                 RETURNING file_id",
                p![file_id, version_id],
            )?,
            TextEntry::Text { .. } | TextEntry::Unindexed { .. } => {
                let scan = matches!(e, TextEntry::Unindexed { scan: true, .. });
                conn.opt_value(
                    "INSERT INTO text_indexed (file_id, version_id, scan) VALUES (?1, ?2, ?3)
                     ON CONFLICT (file_id) DO UPDATE
                       SET version_id = excluded.version_id, scan = excluded.scan
                       WHERE excluded.version_id > text_indexed.version_id
                     RETURNING file_id",
                    p![file_id, version_id, i64::from(scan)],
                )?
            }
        };
        if newer.is_none() {
            continue;
        }
        let text = match e {
            TextEntry::Text { text, .. } => Some(text.as_str()),
            _ => None,
        };
        match conn.dialect() {
            Dialect::Sqlite => {
                conn.exec("DELETE FROM text_index WHERE rowid = ?1", p![file_id])?;
                if let Some(text) = text {
                    conn.exec(
                        "INSERT INTO text_index (rowid, body) VALUES (?1, ?2)",
                        p![file_id, text],
                    )?;
                }
            }
            Dialect::Postgres => match text {
                Some(text) => conn.exec(
                    "INSERT INTO text_index (file_id, body) VALUES (?1, ?2)
                     ON CONFLICT (file_id) DO UPDATE SET body = excluded.body",
                    p![file_id, text],
                )?,
                None => conn.exec("DELETE FROM text_index WHERE file_id = ?1", p![file_id])?,
            },
        }
    }
    Ok(())
}

/// The files whose indexed text may hold any of `literals` (each at least 3 characters,
/// no NUL), and those every search reads (`scan`). `ignore_case`: the literals match in
/// either case (ASCII letters; the caller gives no other letters then). The index folds
/// case in SQLite, so a case-sensitive query gets more candidates there, never fewer.
pub fn query(conn: &dyn Conn, literals: &[String], ignore_case: bool) -> Result<Vec<i64>> {
    let (matching, patterns) = match_clause(conn.dialect(), "text_index", literals, ignore_case);
    let params: Vec<Param<'_>> = patterns.iter().map(|p| Param::Text(p)).collect();
    let sql = format!(
        "SELECT file_id FROM text_indexed WHERE scan = 1
         UNION SELECT {} FROM text_index WHERE {matching}",
        match conn.dialect() {
            Dialect::Sqlite => "rowid",
            Dialect::Postgres => "file_id",
        }
    );
    conn.all(&sql, &params, |r| r.get(0))
}

/// The condition on the trigram-indexed `table` (its column `body`) that any of
/// `literals` is in a row, and its parameters (`?1`, `?2`, ... in order): SQLite's FTS5
/// `MATCH` of the literals as phrases, PostgreSQL's `LIKE` (`ILIKE` when `ignore_case`)
/// with `%`, `_` and `\` escaped, which `pg_trgm`'s GIN index answers.
pub(super) fn match_clause(
    dialect: Dialect,
    table: &str,
    literals: &[String],
    ignore_case: bool,
) -> (String, Vec<String>) {
    match dialect {
        Dialect::Sqlite => {
            let phrases: Vec<String> = literals
                .iter()
                .map(|l| format!("\"{}\"", l.replace('"', "\"\"")))
                .collect();
            (format!("{table} MATCH ?1"), vec![phrases.join(" OR ")])
        }
        Dialect::Postgres => {
            let patterns: Vec<String> = literals
                .iter()
                .map(|l| {
                    let mut p = String::from("%");
                    for c in l.chars() {
                        if matches!(c, '%' | '_' | '\\') {
                            p.push('\\');
                        }
                        p.push(c);
                    }
                    p.push('%');
                    p
                })
                .collect();
            let like = if ignore_case { "ILIKE" } else { "LIKE" };
            let clause = (1..=patterns.len())
                .map(|i| format!("body {like} ?{i}"))
                .collect::<Vec<_>>()
                .join(" OR ");
            (clause, patterns)
        }
    }
}
