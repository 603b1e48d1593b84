//! `scratchfs restore PATH@N`: makes version N current again, as a new version with op
//! `restore` (SPEC §2). While the database is mounted, the restore goes through the
//! mount (setting `user.scratchfs.restore` on the file), so that the daemon commits it
//! and drops the kernel's cached size and pages; otherwise it opens the store itself.

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
    let spec = arg(spec);
    super::check_db(db)?;
    let (path, n) = resolve_spec(&*super::open_history(db)?, &spec)?;
    let n = n.ok_or_else(|| format!("{}: expected PATH@N", quote_stored(&spec)))?;
    let path = path.trim_start_matches('/').to_string();
    let lock = match crate::mount::lock_database_now(db) {
        Ok(lock) => lock,
        Err(_) => match super::live_mountpoint(db)? {
            Some(mnt) => return through_mount(&mnt, &path, n).map(|()| report(&path, n, json)),
            // A daemon that was just unmounted may still be closing the database.
            None => crate::mount::lock_database(db)?,
        },
    };
    let r = offline(db, &path, n);
    drop(lock);
    r.map(|()| report(&path, n, json))
}

/// `path` is in its stored form.
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
    super::set_xattr(
        &Path::new(mnt).join(OsStr::from_bytes(&paths::decode(path))),
        RESTORE_XATTR,
        n.to_string().as_bytes(),
    )
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
    let mut ino = ROOT;
    let raw = paths::decode(path);
    for part in raw.split(|&b| b == b'/').filter(|p| !p.is_empty()) {
        ino = fs
            .lookup(ino, part)
            .map_err(|_| {
                let (q, archived) = (
                    quote_stored(path),
                    quote_stored(&format!(".archive/{path}")).into_owned(),
                );
                format!("{q}: no such file (a deleted file comes back with cp {archived} {q})")
            })?
            .ino;
    }
    let ctx = Ctx {
        pid: std::process::id(),
        uid: me.0,
        gid: me.1,
    };
    fs.restore(ino, n, ctx).map_err(|e| e.reason)
}
