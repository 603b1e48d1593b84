//! `scratchfs checkpoint NAME [--note TEXT]`, `scratchfs checkpoints` and `scratchfs
//! rollback NAME` (issue 14; docs/checkpoints.md). While the database is mounted the
//! daemon does the work (through the attributes `user.scratchfs.checkpoint` and
//! `user.scratchfs.rollback`, as `gc` and `redact` do), so every reader of the mount sees
//! a rollback at once; otherwise this process opens the scratchpad, with the writer rules
//! of its last mount. Both pass the gate either way.

use std::path::Path;

use super::Failure;
use super::gc::db_owner;
use crate::checkpoint::{Checkpoint, RollbackReport};
use crate::fs::Ctx;
use crate::fs::serve::{CHECKPOINT_XATTR, ROLLBACK_XATTR, SETTLED_XATTR};
use crate::views::quote_path;

/// This process as the core's caller.
fn me() -> Ctx {
    Ctx {
        pid: std::process::id(),
        uid: unsafe { libc::getuid() },
        gid: unsafe { libc::getgid() },
    }
}

/// The message for a refusal by errno when the daemon gave only the errno.
fn refused(what: &str, errno: Option<i32>, e: &std::io::Error) -> String {
    match errno {
        Some(libc::EEXIST) => format!("{what}: a checkpoint has that name already"),
        Some(libc::ENOENT) => {
            format!("{what}: no such checkpoint (scratchfs checkpoints lists them)")
        }
        Some(libc::EINVAL) => format!(
            "{what}: not a checkpoint name (1 to 255 bytes, printable, no '/', not . or ..)"
        ),
        Some(libc::EACCES) | Some(libc::EPERM) => {
            format!("{what}: {e} (refused by the gate; scratchfs log --rejected says why)")
        }
        _ => format!("{what}: {e}"),
    }
}

/// Runs `f` on the scratchpad of `db` opened by this process if no mount holds it
/// (`admins`: the database's owner may also roll back), else `through` the mount.
fn offline_or_mounted<T>(
    db: &Path,
    offline: impl FnOnce(&crate::fs::Fs) -> crate::error::Result<T>,
    through: impl FnOnce(&Path) -> Result<T, Failure>,
) -> Result<T, Failure> {
    super::check_db(db)?;
    match crate::mount::lock_database_now(db) {
        Ok(lock) => {
            let fs = super::offline_fs(db)?.with_admins(&[db_owner(db)?]);
            let r = offline(&fs).map_err(|e| e.reason);
            drop(fs);
            drop(lock);
            r
        }
        Err(_) => {
            let mnt = super::live_mountpoint(db)?
                .ok_or("the database is in use, but not mounted where it says")?;
            through(Path::new(&mnt))
        }
    }
}

/// `scratchfs checkpoint NAME [--note TEXT]`.
pub fn checkpoint(db: &Path, name: &str, note: Option<&str>, json: bool) -> Result<(), Failure> {
    let cp = take(db, name, note)?;
    if json {
        println!("{}", serde_json::to_string(&cp).map_err(|e| e.to_string())?);
    } else {
        println!(
            "checkpoint {}: {} (last version {}, {} namespace changes)",
            quote_path(&cp.name),
            super::time::utc_exact(cp.point.time_ns),
            cp.point.version_seq,
            cp.point.tree_seq
        );
    }
    Ok(())
}

/// Takes checkpoint `name` (with `note`) as this process's caller, through the mount's
/// daemon when the database is mounted (`scratchfs checkpoint`, the review page's
/// action); returns it as listed.
pub fn take(db: &Path, name: &str, note: Option<&str>) -> Result<Checkpoint, Failure> {
    crate::checkpoint::check_name(name).map_err(|e| e.reason)?;
    if note.is_some_and(|n| n.contains('\0')) {
        return Err("--note: a NUL byte".into());
    }
    // Checked here too, so that a bad note is named as such, not as a bad name (the
    // daemon answers both with EINVAL alone).
    if let Some(n) = note {
        crate::checkpoint::check_note(n).map_err(|e| format!("--note: {}", e.reason))?;
    }
    let q = format!("checkpoint {}", quote_path(name));
    let cp = offline_or_mounted(
        db,
        |fs| fs.checkpoint(name, note, me()),
        |mnt| {
            let mut value = name.as_bytes().to_vec();
            if let Some(n) = note {
                value.push(b'\n');
                value.extend_from_slice(n.as_bytes());
            }
            super::set_xattr(mnt, CHECKPOINT_XATTR, &value)
                .map_err(|e| refused(&q, e.raw_os_error(), &e))?;
            list(db)?
                .into_iter()
                .find(|c| c.name == name)
                .ok_or_else(|| format!("{q}: the daemon took it, but it is not listed"))
        },
    )?;
    Ok(cp)
}

/// The checkpoints of `db` (not dropped), oldest first, with every change acknowledged.
fn list(db: &Path) -> Result<Vec<Checkpoint>, Failure> {
    super::open_history(db)?.checkpoints().map_err(|e| e.reason)
}

/// `scratchfs checkpoints [--json]`: name, time, writer, note; `auto` for a rollback's
/// safety checkpoint.
pub fn checkpoints(db: &Path, json: bool) -> Result<(), Failure> {
    let all = list(db)?;
    if json {
        for cp in &all {
            println!("{}", serde_json::to_string(cp).map_err(|e| e.to_string())?);
        }
        return Ok(());
    }
    if all.is_empty() {
        println!("no checkpoints (take one with: scratchfs checkpoint NAME)");
        return Ok(());
    }
    for cp in &all {
        let mut line = format!(
            "{}  {}  {} (uid {})",
            super::time::utc(cp.point.time_ns),
            quote_path(&cp.name),
            crate::views::one_line(&cp.writer),
            cp.uid
        );
        if cp.auto {
            line.push_str("  [safety, taken by a rollback]");
        }
        if let Some(n) = &cp.note {
            line.push_str("  ");
            line.push_str(&crate::views::one_line(n));
        }
        println!("{line}");
    }
    Ok(())
}

/// `scratchfs rollback NAME [--json]`.
pub fn rollback(db: &Path, name: &str, json: bool) -> Result<(), Failure> {
    let report = roll_back(db, name)?;
    if json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "rolled back to {}: {} changed, {} restored, {} removed, {} moved, {} re-attributed",
            quote_path(&report.checkpoint),
            report.changed,
            report.restored,
            report.removed,
            report.moved,
            report.reattributed
        );
        println!(
            "the state before is checkpoint {} (scratchfs rollback {} undoes this)",
            quote_path(&report.safety),
            quote_path(&report.safety)
        );
    }
    Ok(())
}

/// Rolls back to checkpoint `name` as this process's caller, through the mount's daemon
/// when the database is mounted (`scratchfs rollback`, the review page's action).
pub fn roll_back(db: &Path, name: &str) -> Result<RollbackReport, Failure> {
    let q = format!("rollback to {}", quote_path(name));
    offline_or_mounted(
        db,
        |fs| fs.rollback(name, me()),
        |mnt| {
            super::set_xattr(mnt, ROLLBACK_XATTR, name.as_bytes())
                .map_err(|e| refused(&q, e.raw_os_error(), &e))?;
            // Returns once the kernel has dropped every name the rollback changed (those
            // in the root were invalidated without waiting: the kernel held it locked).
            match super::get_xattr(mnt, SETTLED_XATTR) {
                Ok(_) => {}
                // A daemon from before the attribute.
                Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
                Err(e) => eprintln!(
                    "scratchfs: {q}: done, but the kernel may show names from before it for \
                     a moment: {e}"
                ),
            }
            let text = super::meta(db, "last_rollback")?
                .ok_or_else(|| format!("{q}: the daemon left no report"))?;
            serde_json::from_str(&text).map_err(|e| e.to_string())
        },
    )
}
