//! `scratchfs recover [--accept-loss]`: what to do when the redo log is damaged before its
//! tail (src/store/redo.rs). Without `--accept-loss` it only says whether the log is
//! intact (exit 0) or damaged (exit 1, with the offset). With it (root or the database
//! file's owner, like other history-erasing commands: `EPERM` otherwise, recorded), the
//! intact records before the damage are applied, the whole damaged log is kept as
//! `<db>-redo.damaged-<ns>`, and the loss is recorded as an event (op `redo-loss`).
//! Needs the database unmounted (it takes the database lock).

use std::path::Path;

use super::Failure;
use super::gc::{cli_caller, db_owner};
use crate::fs::gate::{Change, Gate};
use crate::store::{RedoLog, Sqlite};

/// Runs the command; `json` prints one object.
pub fn recover(db: &Path, accept_loss: bool, json: bool) -> Result<(), Failure> {
    super::sqlite_only(db, "recover")?;
    let _lock = crate::mount::lock_database_now(db).map_err(|e| {
        if e.ends_with(": mounted") {
            format!("recover: {e} (unmount it first)")
        } else {
            format!("recover: {e}")
        }
    })?;
    let mut log = RedoLog::open(db).map_err(|e| e.reason)?;
    let (records, damage) = log.read_checked().map_err(|e| e.reason)?;
    drop(log);
    let Some(damage) = damage else {
        let msg = format!(
            "{}: intact ({} records to apply at the next open)",
            RedoLog::path_for(db).display(),
            records.len()
        );
        print(
            json,
            serde_json::json!({ "damaged": false, "records": records.len() }),
            &msg,
        );
        return Ok(());
    };
    if !accept_loss {
        return Err(damage.error(db).reason);
    }
    let caller = cli_caller();
    let gate = Gate {
        rules: Default::default(),
        admins: vec![0, db_owner(db)?],
        read_only: false,
    };
    let change = Change::Erase {
        what: "recover --accept-loss",
        path: "",
    };
    if let Err(e) = gate.check(&caller, &change) {
        // Not recorded: the database cannot be opened until the loss is accepted (the
        // refusal is the caller's exit status 1 and this message).
        return Err(e.reason);
    }
    let me = unsafe { (libc::geteuid(), libc::getegid()) };
    let (_store, _, loss) = Sqlite::open_with(db, me, Some(&caller)).map_err(|e| e.reason)?;
    let Some(loss) = loss else {
        return Err("recover: the damage was gone when the database was opened".into());
    };
    let msg = format!(
        "{}: applied the {} intact records before byte {}; lost {} bytes after it; the whole \
         damaged log is kept as {}; the loss is recorded (scratchfs log shows op redo-loss)",
        loss.damage.path.display(),
        loss.damage.records,
        loss.damage.offset,
        loss.damage.len - loss.damage.offset,
        loss.copy.display()
    );
    print(
        json,
        serde_json::json!({
            "damaged": true,
            "offset": loss.damage.offset,
            "log_bytes": loss.damage.len,
            "records_applied": loss.damage.records,
            "bytes_lost": loss.damage.len - loss.damage.offset,
            "copy": loss.copy.to_string_lossy(),
        }),
        &msg,
    );
    Ok(())
}

fn print(json: bool, v: serde_json::Value, msg: &str) {
    if json {
        println!("{v}");
    } else {
        println!("{msg}");
    }
}
