//! `scratchfs fork` with history on SQLite (issue 14; docs/checkpoints.md): between two
//! SQLite files, a copy of the source database (`VACUUM INTO`, from a read-only
//! connection, so a live mount of it goes on) cut back to the point by the shared
//! [`crate::store::sql::fork::trim`]; a fork from PostgreSQL into a new SQLite file fills
//! it row by row ([`create_with`]).

use super::*;
use crate::checkpoint::Point;

/// Makes the new database `dst` (it must not exist) a fork of `src` at `point`: its
/// history up to the point, its tree the tree then. `max_checkpoint`: checkpoints with a
/// higher id are left out (a fork at a checkpoint keeps it and the ones before it).
/// `forked_from` is kept as `meta.forked_from` (JSON: where it came from). `EEXIST` when
/// `dst` exists.
pub fn fork_file(
    src: &Path,
    dst: &Path,
    point: Point,
    max_checkpoint: Option<i64>,
    forked_from: &str,
) -> Result<()> {
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Private from the start: VACUUM INTO writes into the empty file.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dst)
            .map_err(|e| cannot_open(dst, &e))?;
    }
    let done = (|| -> Result<()> {
        let from = open_read_only(src)?;
        from.execute("VACUUM INTO ?1", [dst.to_string_lossy()])?;
        drop(from);
        let mut conn = open_conn(dst)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        crate::store::sql::fork::trim(
            &*tx,
            point,
            max_checkpoint.unwrap_or(i64::MAX),
            forked_from,
            &dst.to_string_lossy(),
        )?;
        tx.commit()?;
        conn.execute_batch("VACUUM")?;
        Ok(())
    })();
    if done.is_err() {
        for p in companions(dst) {
            let _ = std::fs::remove_file(p);
        }
    }
    done
}

/// Makes the new SQLite database `dst` (it must not exist: `EEXIST`): created private
/// (0600) with its schema, then in one transaction emptied and filled by `fill` (a fork
/// from PostgreSQL: [`crate::store::fork_full`]). When anything fails the new files are
/// removed.
pub fn create_with(dst: &Path, fill: impl FnOnce(&dyn Conn) -> Result<()>) -> Result<()> {
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dst)
            .map_err(|e| cannot_open(dst, &e))?;
    }
    let done = (|| -> Result<()> {
        let owner = unsafe { (libc::geteuid(), libc::getegid()) };
        drop(Sqlite::open(dst, owner)?);
        let mut conn = open_conn(dst)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        fill(&*tx)?;
        tx.commit()?;
        conn.execute_batch("VACUUM")?;
        Ok(())
    })();
    if done.is_err() {
        for p in companions(dst) {
            let _ = std::fs::remove_file(p);
        }
    }
    done
}
