//! `scratchfs export DIR [--at TIME]`: writes the tree as it was at TIME (default: now)
//! into a plain directory, each name with its exact bytes ([`crate::store::paths`]).
//! Only what the database holds is written, and only inside DIR: a stored path with an
//! empty, `.` or `..` component, a NUL byte, or an absolute one, is skipped with a warning
//! (SPEC §2; a crafted database cannot write elsewhere).

use std::ffi::OsStr;
use std::io::IsTerminal;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::{Failure, open};
use crate::store::{ContentRef, paths};
use crate::views::quote_stored;

/// Parses a time: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM:SS[Z]` (or with a space; UTC), `@SECONDS`
/// since the epoch, or plain nanoseconds since the epoch. Returns ns.
pub fn parse_time(s: &str) -> Result<i64, Failure> {
    let bad = || format!("{s}: expected YYYY-MM-DD[THH:MM:SS[Z]], @SECONDS or nanoseconds");
    if let Some(secs) = s.strip_prefix('@') {
        let f: f64 = secs.parse().map_err(|_| bad())?;
        return Ok((f * 1e9) as i64);
    }
    if s.chars().all(|c| c.is_ascii_digit()) {
        return s.parse().map_err(|_| bad());
    }
    let s2 = s.trim_end_matches('Z').replace('T', " ");
    let (date, time) = s2.split_once(' ').unwrap_or((&s2, "00:00:00"));
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let t: Vec<i64> = time
        .split(':')
        .map(|x| x.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    if d.len() != 3 || t.is_empty() || t.len() > 3 {
        return Err(bad());
    }
    let (y, m, day) = (d[0] - i64::from(d[1] <= 2), d[1], d[2]);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86400 + t[0] * 3600 + t.get(1).unwrap_or(&0) * 60 + t.get(2).unwrap_or(&0);
    Ok(secs * 1_000_000_000)
}

/// A local path as messages show it: quoted if it could break the line.
fn shown(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    crate::views::quote_path_bytes(p.as_os_str().as_bytes()).into_owned()
}

/// The relative path a stored path names (its exact bytes), if it is safe to write under
/// the export root.
fn safe(path: &str) -> Option<PathBuf> {
    let raw = paths::decode(path);
    let parts: Vec<&[u8]> = raw.split(|&b| b == b'/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == b"." || *p == b".." || p.contains(&0))
    {
        return None;
    }
    let out: PathBuf = parts.iter().map(|p| OsStr::from_bytes(p)).collect();
    out.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then_some(out)
}

/// Exports the tree at `at_ns` (default now) into `dir`, which must not exist or be empty.
pub fn export(db: &Path, dir: &Path, at_ns: Option<i64>, json: bool) -> Result<(), Failure> {
    let conn = open(db)?;
    let at = at_ns.unwrap_or(i64::MAX);
    if dir.exists()
        && std::fs::read_dir(dir)
            .map_err(|e| e.to_string())?
            .next()
            .is_some()
    {
        return Err(format!("{}: not empty", shown(dir)));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", shown(dir)))?;
    // The state of each file at `at`: its last version by then, unless it was deleted by
    // then (an unlink event, or its lineage ended by being renamed over another).
    let mut stmt = conn
        .prepare(
            "SELECT v.path, v.stream, v.size, v.time_ns FROM versions v
             JOIN files f ON f.id = v.file_id
             WHERE v.time_ns <= ?1
               AND v.version = (SELECT MAX(version) FROM versions w
                                WHERE w.file_id = v.file_id AND w.time_ns <= ?1)
               AND NOT EXISTS (SELECT 1 FROM events e WHERE e.file_id = f.id
                               AND e.op = 'unlink' AND e.time_ns <= ?1 AND e.time_ns >= v.time_ns)
               AND NOT (f.merged_into IS NOT NULL AND f.deleted_ns <= ?1)
             ORDER BY v.path",
        )
        .map_err(|e| e.to_string())?;
    let rows: Vec<(String, i64, i64, i64)> = stmt
        .query_map([at], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .map_err(|e| e.to_string())?
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(rows.len() as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut written = 0;
    for (path, stream, size, time_ns) in rows {
        bar.inc(1);
        let Some(rel) = safe(&path) else {
            bar.suspend(|| {
                // Always in quotes: the name is the point of the message.
                let q = match quote_stored(&path) {
                    std::borrow::Cow::Borrowed(p) => format!("\"{p}\""),
                    std::borrow::Cow::Owned(q) => q,
                };
                eprintln!("scratchfs: export: skipped unsafe path {q}")
            });
            continue;
        };
        let target = dir.join(&rel);
        // A database written by an older scratchfs stored each byte that is not UTF-8 as
        // U+FFFD (3 bytes): two such names can clash, and a long one can be too long.
        // Such a file is skipped with a warning; any other failure ends the export.
        let lossy = |e: &std::io::Error| {
            e.kind() == std::io::ErrorKind::AlreadyExists
                || e.raw_os_error() == Some(libc::ENAMETOOLONG)
        };
        let skip = |e: std::io::Error| {
            bar.suspend(|| {
                eprintln!(
                    "scratchfs: export: skipped {}: {e} (a name stored lossily by an older \
                     scratchfs)",
                    shown(&target)
                )
            })
        };
        if let Some(parent) = target.parent()
            && let Err(e) = std::fs::create_dir_all(parent)
        {
            if lossy(&e) {
                skip(e);
                continue;
            }
            return Err(format!("{}: {e}", shown(parent)));
        }
        // create_new: never through an existing file or link.
        let mut f = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)
        {
            Ok(f) => f,
            Err(e) if lossy(&e) => {
                skip(e);
                continue;
            }
            Err(e) => return Err(format!("{}: {e}", shown(&target))),
        };
        // In chunks: memory stays bounded whatever the size.
        let content = ContentRef {
            stream,
            len: size as u64,
        };
        super::copy_content(&conn, content, &mut f, &shown(&target))?;
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(time_ns.max(0) as u64);
        let _ = f.set_modified(t);
        written += 1;
    }
    bar.finish_and_clear();
    if json {
        let mut o = serde_json::json!({ "files": written });
        super::json_name(&mut o, "dir", dir.as_os_str().as_bytes());
        println!("{o}");
    } else {
        eprintln!("scratchfs: exported {written} files to {}", shown(dir));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_paths_are_refused() {
        for p in ["../x", "/etc/passwd", "a/../../b", "a//b", "", ".", "a/./b"] {
            assert!(safe(p).is_none(), "{p}");
        }
        assert_eq!(safe("notes/a.md"), Some(PathBuf::from("notes/a.md")));
        assert!(safe("a\0b").is_none());
        // The exact bytes of a name that is not UTF-8.
        assert_eq!(
            safe(&paths::encode(b"d/k\xff")),
            Some(PathBuf::from(OsStr::from_bytes(b"d/k\xff")))
        );
    }

    #[test]
    fn times_parse() {
        assert_eq!(parse_time("1970-01-02").unwrap(), 86_400_000_000_000);
        assert_eq!(
            parse_time("2026-11-30T17:56:55Z").unwrap(),
            1_796_061_415_000_000_000
        );
        assert_eq!(parse_time("@1.5").unwrap(), 1_500_000_000);
        assert!(parse_time("yesterday").is_err());
    }
}
