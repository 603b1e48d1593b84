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
    build_new(
        dst,
        |tmp| {
            let from = open_read_only(src)?;
            from.execute("VACUUM INTO ?1", [tmp.to_string_lossy()])?;
            drop(from);
            let mut conn = open_conn(tmp)?;
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
        },
        |e| e,
    )
}

/// Makes the new SQLite database `dst` (it must not exist: `EEXIST`): created private
/// (0600) with its schema, then in one transaction emptied and filled by `fill` (a fork
/// from PostgreSQL: [`crate::store::fork_full`]). When anything fails the new files are
/// removed.
pub fn create_with(dst: &Path, fill: impl FnOnce(&dyn Conn) -> Result<()>) -> Result<()> {
    build_new(
        dst,
        |tmp| {
            let owner = unsafe { (libc::geteuid(), libc::getegid()) };
            drop(Sqlite::open(tmp, owner)?);
            let mut conn = open_conn(tmp)?;
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            fill(&*tx)?;
            tx.commit()?;
            conn.execute_batch("VACUUM")?;
            Ok(())
        },
        |e| e,
    )
}

/// The files SQLite and scratchfs may keep beside the database `db` while it is built
/// (`-wal`, `-shm`, `-redo`, `.log`, and `-journal`, the rollback journal of `VACUUM
/// INTO`), the database first.
fn build_files(db: &Path) -> Vec<PathBuf> {
    let mut journal = db.as_os_str().to_owned();
    journal.push("-journal");
    let mut files = companions(db);
    files.push(journal.into());
    files
}

/// The prefix of the temporary names new databases are built under beside `dst`
/// ([`build_new`]): `.NAME.new-`, followed by the building process's pid.
fn build_prefix(dst: &Path) -> Option<String> {
    Some(format!(".{}.new-", dst.file_name()?.to_string_lossy()))
}

/// Makes the new SQLite database `dst` by `build`, which gets a temporary path beside it
/// (`.NAME.new-PID`, created empty and private, 0600) to build it in and must close every
/// connection to it; complete, it takes the name `dst` at once, by a hard link that never
/// replaces anything (`EEXIST` if `dst` appeared meanwhile), and the temporary names go.
/// A fork killed half-way leaves only temporary files, which the next build of the same
/// name removes (those of processes that are gone), so a retry is never refused because
/// of them. `io` turns this function's own errors into the caller's.
pub fn build_new<E>(
    dst: &Path,
    build: impl FnOnce(&Path) -> std::result::Result<(), E>,
    io: impl Fn(StoreError) -> E,
) -> std::result::Result<(), E> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match dst.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let prefix = build_prefix(dst).ok_or_else(|| {
        io(StoreError::new(
            ErrorKind::Invalid,
            format!("{}: not a file name", dst.display()),
        ))
    })?;
    remove_dead_builds(&dir, &prefix);
    let tmp = dir.join(format!("{prefix}{}", std::process::id()));
    for p in build_files(&tmp) {
        let _ = std::fs::remove_file(p);
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io(cannot_open(&tmp, &e)))?;
    let done = build(&tmp).and_then(|()| {
        crate::failpoint::hit("fork");
        std::fs::hard_link(&tmp, dst).map_err(|e| io(cannot_open(dst, &e)))
    });
    for p in build_files(&tmp) {
        let _ = std::fs::remove_file(p);
    }
    done
}

/// Removes what builds of a database named by `prefix` in `dir` left when killed
/// ([`build_new`]): regular files of this user named `PREFIX<pid>` (and their
/// [`build_files`]) whose process is gone. Nothing else is touched.
fn remove_dead_builds(dir: &Path, prefix: &str) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let me = unsafe { libc::geteuid() };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() || digits.len() != rest.len() {
            continue;
        }
        let gone = !Path::new("/proc").join(&digits).exists();
        let ours = std::fs::symlink_metadata(e.path())
            .is_ok_and(|m| m.file_type().is_file() && m.uid() == me);
        if gone && ours {
            for p in build_files(&e.path()) {
                if std::fs::symlink_metadata(&p)
                    .is_ok_and(|m| m.file_type().is_file() && m.uid() == me)
                {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
    }
}
