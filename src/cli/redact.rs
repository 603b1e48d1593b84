//! `scratchfs redact PATH@N [--why TEXT]`: replaces every well-known secret in version N
//! of a file (and wherever else that file's versions and refusals hold the same secret)
//! with a marker naming the pattern and the secret's blake3, so that afterwards no byte
//! of the secret remains in the database file, its WAL or the redo log (SPEC §10,
//! issue 9). Only root and the user who mounted may (the gate, `EPERM`); the run is an
//! event (op `redact`) with who and why. While mounted, the daemon does it (through the
//! attribute `user.scratchfs.redact` on the mount's root); otherwise this process.

use std::path::Path;

use super::gc::{cli_caller, db_owner};
use super::{Failure, parse_spec};
use crate::fs::gate::{Change, Gate};
use crate::fs::serve::{REDACT_XATTR, RedactRequest};
use crate::store::{Sqlite, Store};

/// Redacts `spec` (`PATH@N`), recording `why`.
pub fn redact(db: &Path, spec: &str, why: &str, json: bool) -> Result<(), Failure> {
    let (path, n) = parse_spec(spec)?;
    let n = n.ok_or_else(|| format!("{spec}: expected PATH@N"))?;
    let path = path.trim_start_matches('/').to_string();
    if let Err(e) = std::fs::metadata(db) {
        return Err(crate::store::cannot_open(db, &e).reason);
    }
    let req = RedactRequest {
        path: path.clone(),
        version: n,
        why: why.to_string(),
    };
    match crate::mount::lock_database_now(db) {
        Ok(lock) => {
            let r = offline(db, &req);
            drop(lock);
            r?
        }
        Err(_) => {
            let mnt = super::live_mountpoint(db)?
                .ok_or("redact: the database is in use, but not mounted where it says")?;
            let value = serde_json::to_vec(&req).map_err(|e| e.to_string())?;
            super::set_xattr(Path::new(&mnt), REDACT_XATTR, &value).map_err(|e| {
                match e.raw_os_error() {
                    Some(libc::EINVAL) => {
                        format!("{path}@{n}: holds no secret the deny_secrets patterns know")
                    }
                    Some(libc::ENOENT) => format!("{path}@{n}: no such file or version"),
                    _ => format!("{path}@{n}: {e}"),
                }
            })?;
        }
    }
    let reason = last_redact(db)?;
    if json {
        println!(
            "{}",
            serde_json::json!({ "path": path, "version": n, "redacted": reason })
        );
    } else {
        println!(
            "{}",
            reason.unwrap_or_else(|| format!("{path}@{n}: redacted"))
        );
    }
    Ok(())
}

fn offline(db: &Path, req: &RedactRequest) -> Result<(), Failure> {
    let me = unsafe { (libc::geteuid(), libc::getegid()) };
    let (store, _) = Sqlite::open(db, me).map_err(|e| e.reason)?;
    let caller = cli_caller();
    let gate = Gate {
        rules: None,
        admins: vec![0, db_owner(db)?],
    };
    let change = Change::Erase {
        what: "redact",
        path: &req.path,
    };
    if let Err(e) = gate.check(&caller, &change) {
        if let Err(se) = store.reject(&req.path, e.errno, &e.reason, &caller, None) {
            log::error!("recording a refusal: {se}");
        }
        return Err(e.reason);
    }
    let lineages = store.lineages(&req.path).map_err(|e| e.reason)?;
    let file_id = lineages
        .iter()
        .filter(|l| l.path == req.path)
        .max_by_key(|l| (l.deleted_ns.is_none(), l.deleted_ns, l.file_id))
        .map(|l| l.file_id)
        .ok_or_else(|| format!("{}: no such file", req.path))?;
    store
        .redact(file_id, req.version, &req.path, &req.why, &caller)
        .map_err(|e| e.reason)?;
    Ok(())
}

/// The reason of the newest `redact` event (what it redacted).
fn last_redact(db: &Path) -> Result<Option<String>, Failure> {
    use rusqlite::OptionalExtension;
    let conn = crate::store::open_read_only(db).map_err(|e| e.reason)?;
    conn.query_row(
        "SELECT reason FROM events WHERE op = 'redact' ORDER BY id DESC LIMIT 1",
        [],
        |r| r.get::<_, String>(0),
    )
    .optional()
    .map_err(|e| format!("{}: {e}", db.display()))
}
