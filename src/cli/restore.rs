//! `scratchfs restore PATH@N`: makes version N current again, as a new version with op
//! `restore` (SPEC §2). While the database is mounted, the restore goes through the
//! mount (setting `user.scratchfs.restore` on the file), so that the daemon commits it
//! and drops the kernel's cached size and pages; otherwise it opens the store itself.
//! A deleted file is made again first (an empty file, which continues its lineage:
//! SPEC §4), as the caller, through the gate, then restored.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{Failure, arg, resolve_spec};
use crate::fs::serve::RESTORE_XATTR;
use crate::fs::{Ctx, ROOT};
use crate::store::paths;
use crate::views::quote_stored;

/// Restores `spec` (`PATH@N`, raw bytes).
pub fn restore(db: &Path, spec: &OsStr, json: bool) -> Result<(), Failure> {
    match restore_spec(db, &arg(spec))? {
        Restored::Done { path, n } => report(&path, n, json),
        Restored::Already { path, n, current } => {
            if json {
                let mut o =
                    serde_json::json!({ "path": path, "restored": null, "current": current });
                super::json_paths(&mut o, &["path"]);
                println!("{o}");
            } else {
                println!(
                    "{}: holds the bytes of version {n} already (version {current}): nothing \
                     restored",
                    quote_stored(&path),
                )
            }
        }
    }
    Ok(())
}

/// What [`restore_spec`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    /// Version `n` of `path` (stored form) is the current content again, as a new version.
    Done {
        /// The file.
        path: String,
        /// The version restored.
        n: i64,
    },
    /// The file holds those bytes already (version `current`): nothing done.
    Already {
        /// The file.
        path: String,
        /// The version asked for.
        n: i64,
        /// The current version, which holds the same bytes.
        current: i64,
    },
}

/// Restores `spec` (`PATH@N`, stored form) as this process's caller: through the mount's
/// daemon when the database is mounted, else on the database itself, through the gate
/// either way (`scratchfs restore`, and the review page's action).
pub fn restore_spec(db: &Path, spec: &str) -> Result<Restored, Failure> {
    super::check_db(db)?;
    let history = super::open_history(db)?;
    let (path, n) = resolve_spec(&*history, spec)?;
    let n = n.ok_or_else(|| format!("{}: expected PATH@N", quote_stored(spec)))?;
    let path = path.trim_start_matches('/').to_string();
    let wanted = super::version_in(&*history, &path, Some(n), spec)?;
    if let Some((_, head)) = history.live_head(&path).map_err(|e| e.to_string())?
        && let Ok(current) = super::version_in(&*history, &path, None, spec)
        && current.id == head
        && (&current.blake3, current.size) == (&wanted.blake3, wanted.size)
    {
        return Ok(Restored::Already {
            path,
            n,
            current: current.version,
        });
    }
    drop(history);
    let lock = match crate::mount::lock_database_now(db) {
        Ok(lock) => lock,
        Err(_) => match super::live_mountpoint(db)? {
            Some(mnt) => {
                return through_mount(&mnt, &path, n).map(|()| Restored::Done { path, n });
            }
            None => crate::mount::lock_database(db)?,
        },
    };
    let r = offline(db, &path, n);
    drop(lock);
    r.map(|()| Restored::Done { path, n })
}

fn report(path: &str, n: i64, json: bool) {
    if json {
        let mut o = serde_json::json!({ "path": path, "restored": n });
        super::json_paths(&mut o, &["path"]);
        println!("{o}");
    } else {
        println!("{}: version {n} restored", quote_stored(path));
    }
}

fn through_mount(mnt: &str, path: &str, n: i64) -> Result<(), Failure> {
    let target = Path::new(mnt).join(OsStr::from_bytes(&paths::decode(path)));
    let set = || super::set_xattr(&target, RESTORE_XATTR, n.to_string().as_bytes());
    match set() {
        Err(e)
            if e.raw_os_error() == Some(libc::ENOENT)
                && std::fs::symlink_metadata(&target).is_err() =>
        {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&target)
                .map_err(|e| format!("{}: making it again: {e}", quote_stored(path)))?;
            set()
        }
        r => r,
    }
    .map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => format!(
            "{}: no such file or version",
            quote_stored(&format!("{path}@{n}"))
        ),
        _ => format!("{}: {e}", quote_stored(&format!("{path}@{n}"))),
    })
}

fn offline(db: &Path, path: &str, n: i64) -> Result<(), Failure> {
    let me = unsafe { (libc::getuid(), libc::getgid()) };
    let fs = super::offline_fs(db)?;
    let ctx = Ctx {
        pid: std::process::id(),
        uid: me.0,
        gid: me.1,
    };
    let mut ino = ROOT;
    let raw = paths::decode(path);
    let parts: Vec<&[u8]> = raw
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty())
        .collect();
    for (i, part) in parts.iter().enumerate() {
        ino = match fs.lookup(ino, part) {
            Ok(a) => a.ino,
            // A deleted file: made again, which continues its lineage (SPEC §4).
            Err(e) if e.errno == libc::ENOENT && i + 1 == parts.len() => {
                let (a, fh, _) = fs
                    .create(ino, part, 0o644, 0o022, libc::O_WRONLY, ctx)
                    .map_err(|e| {
                        format!("{}: making it again: {}", quote_stored(path), e.reason)
                    })?;
                fs.release(fh).map_err(|e| e.reason)?;
                a.ino
            }
            Err(_) => {
                return Err(format!(
                    "{}: its directory is gone: make it again (mkdir -p), then restore",
                    quote_stored(path)
                ));
            }
        };
    }
    fs.restore(ino, n, ctx).map_err(|e| e.reason)
}
