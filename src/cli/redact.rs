//! `scratchfs redact PATH@N [--why TEXT]`: replaces every well-known secret in version N
//! of a file (and wherever else that file's versions and refusals hold the same secret)
//! with a marker naming the pattern and the secret's blake3, so that afterwards no byte
//! of the secret remains in the database file, its WAL or the redo log (SPEC §10,
//! issue 9). Only root and the user who mounted may (the gate, `EPERM`); the run is an
//! event (op `redact`) with who and why. While mounted, the daemon does it (through the
//! attribute `user.scratchfs.redact` on the mount's root); otherwise this process.

use std::ffi::OsStr;
use std::path::Path;

use super::gc::{cli_caller, db_owner};
use super::{Failure, arg, resolve_spec};
use crate::fs::gate::{Change, Gate};
use crate::fs::serve::{REDACT_XATTR, RedactRequest};
use crate::store::{Sqlite, Store};
use crate::views::{one_line_stored, quote_stored};

/// Redacts `spec` (`PATH@N`, raw bytes), recording `why`.
pub fn redact(db: &Path, spec: &OsStr, why: &str, json: bool) -> Result<(), Failure> {
    let spec = arg(spec);
    super::check_db(db)?;
    let (path, n) = resolve_spec(&*super::open_history(db)?, &spec)?;
    let n = n.ok_or_else(|| format!("{}: expected PATH@N", quote_stored(&spec)))?;
    let path = path.trim_start_matches('/').to_string();
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
                let q = quote_stored(&format!("{path}@{n}")).into_owned();
                match e.raw_os_error() {
                    Some(libc::EINVAL) => {
                        format!("{q}: holds no secret the deny_secrets patterns know")
                    }
                    Some(libc::ENOENT) => format!("{q}: no such file or version"),
                    _ => format!("{q}: {e}"),
                }
            })?;
        }
    }
    let reason = last_redact(db)?;
    if json {
        let mut o = serde_json::json!({ "path": path, "version": n, "redacted": reason });
        super::json_paths(&mut o, &["path"]);
        println!("{o}");
    } else {
        match reason {
            Some(r) => println!("{}", one_line_stored(&r)),
            None => println!("{}: redacted", quote_stored(&format!("{path}@{n}"))),
        }
    }
    Ok(())
}

fn offline(db: &Path, req: &RedactRequest) -> Result<(), Failure> {
    let me = unsafe { (libc::geteuid(), libc::getegid()) };
    let store: Box<dyn Store> = match super::postgres_url(db) {
        Some(url) => Box::new(
            crate::store::postgres::Postgres::open(url, me)
                .map_err(|e| e.reason)?
                .0,
        ),
        None => Box::new(Sqlite::open(db, me).map_err(|e| e.reason)?.0),
    };
    let caller = cli_caller();
    let gate = Gate {
        rules: Default::default(),
        admins: vec![0, db_owner(db)?],
        read_only: false,
    };
    let change = Change::Erase {
        what: "redact",
        path: &req.path,
    };
    if let Err(e) = gate.check(&caller, &change) {
        if let Err(se) = store.reject(
            &req.path,
            e.errno,
            &e.reason,
            &caller,
            crate::store::Refused::Nothing,
        ) {
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
        .ok_or_else(|| format!("{}: no such file", quote_stored(&req.path)))?;
    store
        .redact(file_id, req.version, &req.path, &req.why, &caller)
        .map_err(|e| e.reason)?;
    Ok(())
}

/// The reason of the newest `redact` event (what it redacted).
fn last_redact(db: &Path) -> Result<Option<String>, Failure> {
    super::open_history(db)?
        .last_reason("redact")
        .map_err(|e| format!("{}: {e}", db.display()))
}
