//! `scratchfs log [PATH] [--rejected] [--json]`: every version and event, oldest first.
//! Paths, writers and executables are quoted as git does when they could break the line
//! ([`crate::views::quote_stored`], [`crate::views::quote_path`]); `--json` carries them
//! as JSON strings, a path that is not UTF-8 with its exact bytes in `path_hex`
//! ([`super::json_name`]).

use std::ffi::OsStr;
use std::path::Path;

use super::{Failure, open_history};
use crate::store::{LogFilter, paths};
use crate::views::{one_line_stored, quote_path, quote_stored};

/// One line of the log.
pub use crate::store::LogEntry as Entry;

/// Prints the log, filtered to one path (as it was or became; raw bytes) and/or to
/// refusals. A path that is not UTF-8 also matches the rows a database written by an
/// older scratchfs holds for it (each such byte as U+FFFD).
pub fn log(db: &Path, path: Option<&OsStr>, rejected: bool, json: bool) -> Result<(), Failure> {
    let store = open_history(db)?;
    let path = path.map(|p| super::arg(p).trim_start_matches('/').to_string());
    let filter = LogFilter {
        lossy: path.as_deref().and_then(paths::lossy),
        path,
        rejected,
    };
    let rows = store.log(&filter).map_err(|e| e.to_string())?;
    for e in rows {
        if json {
            println!("{}", crate::report::log_entry_json(&*store, e));
            continue;
        }
        // A rename's line joins its two names with ` -> `: a name holding it is quoted,
        // so the line reads one way.
        let name = |p: &str| {
            let q = quote_stored(p);
            if e.new_path.is_some() && !q.starts_with('"') && q.contains(" -> ") {
                format!("\"{q}\"")
            } else {
                q.into_owned()
            }
        };
        let mut line = format!(
            "{}  {:<8} {}",
            super::time::utc(e.time_ns),
            e.op,
            name(&e.path)
        );
        if let Some(n) = &e.new_path {
            line += &format!(" -> {}", name(n));
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
        if e.own_ns == Some(false) {
            // A sandbox's process: the uid is the kernel's in the mount's namespace.
            line += &format!(
                "  in another namespace (uid {}, user:[{}])",
                e.uid,
                e.user_ns.unwrap_or_default()
            );
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
