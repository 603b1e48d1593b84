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
                line += &format!("  ({t}: {})", quote_path(format!("{c} {v}").trim_end()))
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
        if let (Some(id), "rejected") = (e.event, e.op.as_str()) {
            // What `show --refused` takes.
            line += &format!("  event {id}");
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

/// `scratchfs log --activity [--spans N] [--json]`: the run over time
/// ([`crate::report::activity`]): with `--json` that object on one line; else one line per
/// span that saw a change (its start, UTC; versions by writer; bytes live, in history
/// and archived at its end), then the busiest files with their version counts.
pub fn activity(db: &Path, spans: usize, json: bool) -> Result<(), Failure> {
    let store = open_history(db)?;
    let a = crate::report::activity(&*store, spans)?;
    if json {
        println!("{a}");
        return Ok(());
    }
    let (Some(from), Some(width)) = (a["from_ns"].as_i64(), a["span_ns"].as_i64()) else {
        println!("nothing recorded yet");
        return Ok(());
    };
    let n = a["spans"].as_u64().unwrap_or(0) as usize;
    let writers = a["writers"].as_array().cloned().unwrap_or_default();
    let bytes = |kind: &str, i: usize| a["bytes"][kind][i].as_u64().unwrap_or(0);
    println!(
        "{n} spans of {} from {}",
        width_text(width),
        super::time::utc(from)
    );
    for i in 0..n {
        let mut by: Vec<String> = writers
            .iter()
            .filter_map(|w| {
                let c = w["per_span"][i].as_u64()?;
                (c > 0).then(|| {
                    format!(
                        "{} {c}",
                        quote_path(w["writer"].as_str().unwrap_or_default())
                    )
                })
            })
            .collect();
        if let Some(c) = a["other_writers"]["per_span"][i]
            .as_u64()
            .filter(|c| *c > 0)
        {
            by.push(format!("others {c}"));
        }
        if by.is_empty() {
            continue;
        }
        println!(
            "{}  {}  live {}, history {}, archive {}",
            super::time::utc(from + i as i64 * width),
            by.join(", "),
            crate::views::manifest::human_bytes(bytes("live", i)),
            crate::views::manifest::human_bytes(bytes("history", i)),
            crate::views::manifest::human_bytes(bytes("archive", i)),
        );
    }
    for f in a["files"].as_array().into_iter().flatten() {
        println!(
            "{:>8} versions  {}",
            f["versions"],
            quote_path(f["path"].as_str().unwrap_or_default())
        );
    }
    Ok(())
}

/// A span's width as a person reads it: `250 ms`, `5 s`, `15 min`, `6 h`, `7 d`.
fn width_text(ns: i64) -> String {
    const UNITS: &[(i64, &str)] = &[
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "min"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
    ];
    for (unit, name) in UNITS {
        if ns >= *unit && ns % unit == 0 {
            return format!("{} {name}", ns / unit);
        }
    }
    format!("{ns} ns")
}
