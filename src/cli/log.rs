//! `scratchfs log [PATH] [--rejected] [--json]`: every version and event, oldest first.
//! Paths, writers and executables are quoted as git does when they could break the line
//! ([`crate::views::quote_stored`], [`crate::views::quote_path`]); `--json` carries them
//! as JSON strings, a path that is not UTF-8 with its exact bytes in `path_hex`
//! ([`super::json_name`]).

use crate::p;
use crate::store::sql::{Conn, ConnExt};
use std::ffi::OsStr;
use std::path::Path;

use super::{Failure, open};
use crate::store::paths;
use crate::views::{one_line_stored, quote_path, quote_stored};

/// One line of the log.
#[derive(Debug, serde::Serialize)]
pub struct Entry {
    /// Time, ns since the epoch.
    pub time_ns: i64,
    /// `version` or `event`.
    pub kind: String,
    /// The version's or the event's op.
    pub op: String,
    /// Path, as stored ([`crate::store::paths`]).
    pub path: String,
    /// New path of a rename, as stored.
    pub new_path: Option<String>,
    /// Version number (versions).
    pub version: Option<i64>,
    /// Bytes (versions, refusals).
    pub size: Option<i64>,
    /// Writer.
    pub writer: String,
    /// Agent step.
    pub step: Option<i64>,
    /// Process id.
    pub tgid: u32,
    /// Executable.
    pub exe: String,
    /// errno of a refusal.
    pub errno: Option<i32>,
    /// One-line reason of a refusal.
    pub reason: Option<String>,
    /// `mcp` for a change made through the MCP server (issue 12), else none.
    pub transport: Option<String>,
    /// The MCP client's name and version.
    pub client: Option<String>,
    pub client_version: Option<String>,
    /// What the writer had read before the commit (versions only; issue 13):
    /// [`crate::lineage::inputs_json`].
    pub inputs: Option<serde_json::Value>,
    #[serde(skip)]
    id: Option<i64>,
}

/// Prints the log, filtered to one path (as it was or became; raw bytes) and/or to
/// refusals. A path that is not UTF-8 also matches the rows a database written by an
/// older scratchfs holds for it (each such byte as U+FFFD).
pub fn log(db: &Path, path: Option<&OsStr>, rejected: bool, json: bool) -> Result<(), Failure> {
    let conn = open(db)?;
    let path = path.map(|p| super::arg(p).trim_start_matches('/').to_string());
    let lossy = path.as_deref().and_then(paths::lossy);
    // A database no scratchfs since issue 12 has opened has no transport and client.
    let via = match conn.dialect() {
        crate::store::sql::Dialect::Postgres => "transport, client, client_version",
        crate::store::sql::Dialect::Sqlite => match conn.value::<i64>(
            "SELECT COUNT(*) FROM pragma_table_info('version_log') WHERE name = 'transport'",
            p![],
        ) {
            Ok(n) if n > 0 => "transport, client, client_version",
            _ => "NULL, NULL, NULL",
        },
    };
    let rows = conn
        .all(
            &format!(
                "SELECT time_ns, 'version', op, path, NULL, version, size, writer, step, tgid, exe,
                    NULL, NULL, {via}, id
             FROM version_log WHERE ?2 = 0 AND (CAST(?1 AS TEXT) IS NULL OR path IN (?1, ?3))
             UNION ALL
             SELECT time_ns, 'event', op, path, new_path, NULL, size, writer, step, tgid, exe,
                    errno, reason, {via}, NULL
             FROM event_log WHERE (?2 = 0 OR op = 'rejected')
                 AND (CAST(?1 AS TEXT) IS NULL OR path IN (?1, ?3) OR new_path IN (?1, ?3))
             ORDER BY 1"
            ),
            p![&path, rejected, &lossy],
            |r| {
                Ok(Entry {
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
                    inputs: None,
                    id: r.get(16)?,
                })
            },
        )
        .map_err(|e| e.to_string())?;
    for mut e in rows {
        if json {
            if let Some(id) = e.id {
                e.inputs = Some(super::inputs_json(&conn, id));
            }
            let mut o = serde_json::to_value(&e).map_err(|e| e.to_string())?;
            super::json_paths(&mut o, &["path", "new_path"]);
            println!("{o}");
            continue;
        }
        let mut line = format!(
            "{}  {:<8} {}",
            super::time::utc(e.time_ns),
            e.op,
            quote_stored(&e.path)
        );
        if let Some(n) = &e.new_path {
            line += &format!(" -> {}", quote_stored(n));
        }
        if let Some(v) = e.version {
            line += &format!("  v{v}");
        }
        if let Some(s) = e.size {
            line += &format!("  {s} B");
        }
        line += &format!("  {}", quote_path(&e.writer));
        if let Some(s) = e.step {
            line += &format!(" step {s}");
        }
        match (&e.transport, &e.client) {
            (Some(t), Some(c)) => {
                let v = e.client_version.as_deref().unwrap_or_default();
                line += &format!("  ({t}: {})", quote_path(&format!("{c} {v}").trim_end()))
            }
            (Some(t), None) => line += &format!("  ({t})"),
            _ => {
                line += &format!(
                    "  ({} {})",
                    e.tgid,
                    quote_path(e.exe.rsplit('/').next().unwrap_or_default())
                )
            }
        }
        if let Some(r) = &e.reason {
            let errno = e
                .errno
                .map(|n| std::io::Error::from_raw_os_error(n).to_string());
            line += &format!("  {}: {}", errno.unwrap_or_default(), one_line_stored(r));
        }
        println!("{line}");
    }
    Ok(())
}
