//! `scratchfs export DIR [--at TIME]`: writes the tree as it was at TIME (default: now)
//! into a plain directory, each name with its exact bytes ([`crate::store::paths`]): the
//! tree the namespace log gives (issue 14, as `mount --at` shows it), empty directories
//! included.
//! Only what the database holds is written, and only inside DIR: a stored path with an
//! empty, `.` or `..` component, a NUL byte, or an absolute one, is skipped with a warning
//! (SPEC §2; a crafted database cannot write elsewhere).

use std::ffi::OsStr;
use std::io::IsTerminal;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::Failure;
use crate::store::{ContentRef, paths};
use crate::views::quote_stored;

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

/// Exports the tree at `at_ns` (ns since the epoch, [`super::time::parse_ns`]; default:
/// now, as any time after the last change) into `dir`, which must not exist or be empty.
/// When nothing is exported for a given time, a note on stderr says why (before the first
/// version, or no file then).
pub fn export(db: &Path, dir: &Path, at_ns: Option<i64>, json: bool) -> Result<(), Failure> {
    // Opened first: nothing is made for a database that cannot be read.
    let frozen = super::open_history(db)?;
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
    // The tree at `at` from the namespace log (issue 14), as `mount --at` shows it: empty
    // directories and files with no version yet included, a file whose version then gc
    // forgot left out with a warning. A time before the log begins (a database made
    // before it) falls back to what versions and events say.
    let (rows, dirs, forgotten) = {
        match frozen.point_at(at) {
            Ok(point) => {
                let snap = frozen.snapshot(point).map_err(|e| e.reason)?;
                let mut rows = Vec::new();
                let mut dirs = Vec::new();
                let mut forgotten = Vec::new();
                for (path, n) in snap.walk() {
                    if n.kind == crate::store::Kind::Dir {
                        dirs.push(path);
                    } else if n.forgotten {
                        forgotten.push(path);
                    } else {
                        let c = n.content();
                        let t = n.version.as_ref().map_or(n.changed_ns, |v| v.time_ns);
                        rows.push((path, c.stream, c.len as i64, t));
                    }
                }
                (rows, dirs, forgotten)
            }
            Err(e) if e.is(crate::store::ErrorKind::NotFound) => {
                // The files at `at` as versions and events say (a database made before
                // the namespace log): directories only as the files' paths make them.
                let rows = frozen
                    .files_by_versions(at)
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .map(|(path, c, t)| (path, c.stream, c.len as i64, t))
                    .collect();
                (rows, Vec::new(), Vec::new())
            }
            Err(e) => return Err(e.reason),
        }
    };
    for path in &forgotten {
        eprintln!(
            "scratchfs: export: skipped {}: its version then was forgotten by gc",
            quote_stored(path)
        );
    }
    let mut skipped = forgotten.len();
    for path in &dirs {
        if let Some(rel) = safe(path) {
            let _ = std::fs::create_dir_all(dir.join(rel));
        }
    }
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
            skipped += 1;
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
        let f = match std::fs::OpenOptions::new()
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
        // Extent by extent: memory stays bounded whatever the size, and holes stay holes
        // (a 1 TiB sparse file exports as a sparse file, docs/schema.md "Content model").
        let content = ContentRef {
            stream,
            len: size as u64,
        };
        {
            use std::os::unix::fs::FileExt;
            frozen
                .for_each_data(content, &mut |off, bytes| {
                    f.write_all_at(bytes, off)
                        .map_err(crate::store::StoreError::from)
                })
                .map_err(|e| format!("{}: {}", shown(&target), e.reason))?;
            f.set_len(content.len)
                .map_err(|e| format!("{}: {e}", shown(&target)))?;
        }
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(time_ns.max(0) as u64);
        let _ = f.set_modified(t);
        written += 1;
    }
    bar.finish_and_clear();
    if written == 0
        && let Some(at) = at_ns
    {
        // Say why nothing came out: a TIME is accepted whatever it selects.
        match super::time::first_version_ns(&*frozen)? {
            Some(first) if at < first => eprintln!(
                "scratchfs: note: --at {} is before the first version ({}): nothing existed then",
                super::time::utc_exact(at),
                super::time::utc_exact(first)
            ),
            _ if skipped == 0 => eprintln!(
                "scratchfs: note: no file existed at {}",
                super::time::utc_exact(at)
            ),
            _ => {}
        }
    }
    if json {
        let mut o = serde_json::json!({ "files": written, "skipped": skipped });
        super::json_name(&mut o, "dir", dir.as_os_str().as_bytes());
        println!("{o}");
    } else if skipped > 0 {
        // Said again at the end: the warnings above may have scrolled away.
        eprintln!(
            "scratchfs: exported {written} files to {}; skipped {skipped} (warnings above)",
            shown(dir)
        );
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
}
