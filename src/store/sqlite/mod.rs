//! The embedded SQLite store: one file in WAL mode (SPEC §8), one writer connection and a
//! few reader connections (WAL readers never block the writer).
//!
//! Here: the [`Sqlite`] store, its batch and redo log (acknowledged changes folded into
//! SQLite), and the `Store` implementation. Beside it: `file.rs` (telling a scratchfs
//! database from a foreign file, connections, file modes), `content.rs` (streams, extents
//! and blobs), `write.rs` (the rows and transactions of create, commit and unlink),
//! `admin.rs` (gc and redact).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::redo::{LoggedBuild, MAX_PAYLOAD, Op, Pieces, RedoLog};
use super::{
    Attrs, CommitRequest, Committed, ForgetBatch, Forgot, GcReport, GcRequest, Kind, NodeRecord,
    RedactReport, RenameRequest, Store, VersionInfo,
};
use crate::identity::Caller;
use crate::p;
use crate::store::Refused;
use crate::store::digest::ContentHasher;
use crate::store::error::{ErrorKind, Result, StoreError};
use crate::store::sql::{Conn, ConnExt};
use crate::sync::Mutex;

use crate::store::sql::{admin, checkpoint, history_index, text_index};
pub use checkpoint::list as list_checkpoints;
mod conn;
mod file;
mod fork;
pub use fork::{build_new, create_with, fork_file};

use admin::*;

/// [`admin::gc_in`] in a transaction of its own on `conn` (a dry run rolled back).
pub fn gc(
    conn: &mut Connection,
    req: &GcRequest,
    shown: &[i64],
    protected: &[(i64, u64)],
    caller: &Caller,
) -> Result<GcReport> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let report = gc_in(&tx, req, shown, protected, caller)?;
    if req.dry_run {
        tx.rollback()?;
        note_gc(conn, &report)?;
    } else {
        crate::failpoint::hit("gc");
        tx.commit()?;
    }
    Ok(report)
}

pub use crate::store::sql::content::{ContentReader, READ_CHUNK};
pub use crate::store::sql::content::{digest_of, for_each_data, read_all, stream_end};
use crate::store::sql::write::*;
pub use crate::store::sql::write::{inputs_of, live_lineage};
use file::*;
pub use file::{Probe, cannot_open, companions, make_private, open_read_only, probe};

const SCHEMA: &str = include_str!("../schema.sql");

/// Whether `table` has a column named `column` (a migration's test, docs/schema.md).
fn has_column(conn: &Connection, table: &str, column: &str) -> Result<bool> {
    conn.one(
        "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
        p![table, column],
        |r| r.get::<i64>(0).map(|n| n > 0),
    )
}

/// A database made before issue 12 gets `processes.transport` and `processes.client`,
/// one made before issue 31 `processes.user_ns` and `own_ns` (NULL in its rows), and the
/// views `version_log` and `event_log` that show them (made
/// again by [`SCHEMA`]). Nothing else changes (docs/schema.md, "Migrations").
fn migrate_processes(conn: &Connection) -> Result<()> {
    let has_table: bool = conn.one(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'processes'",
        p![],
        |r| r.get::<i64>(0).map(|n| n > 0),
    )?;
    if !has_table {
        return Ok(());
    }
    if !has_column(conn, "processes", "transport")? {
        conn.execute_batch(
            "ALTER TABLE processes ADD COLUMN transport TEXT;
             ALTER TABLE processes ADD COLUMN client TEXT;
             ALTER TABLE processes ADD COLUMN client_version TEXT;
             DROP VIEW IF EXISTS version_log;
             DROP VIEW IF EXISTS event_log;",
        )?;
    }
    if !has_column(conn, "processes", "user_ns")? {
        // Issue 31: the caller's user namespace, and whether it was the daemon's.
        conn.execute_batch(
            "ALTER TABLE processes ADD COLUMN user_ns INTEGER;
             ALTER TABLE processes ADD COLUMN own_ns INTEGER;
             DROP VIEW IF EXISTS version_log;
             DROP VIEW IF EXISTS event_log;",
        )?;
    }
    Ok(())
}
/// A database made before issue 31 gets `versions.ino` (NULL in its rows: such a
/// version is guarded by its lineage's only carrier, or kept to admins,
/// [`crate::store::History::version_guard`]), one made before issue 35
/// `versions.restored_from` (NULL: its rollbacks and restores point nowhere), one made
/// before issue 36 `forgotten.event_id` (NULL: forgotten by a gc of then).
fn migrate_versions(conn: &Connection) -> Result<()> {
    let has_table: bool = conn.one(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'versions'",
        p![],
        |r| r.get::<i64>(0).map(|n| n > 0),
    )?;
    if has_table && !has_column(conn, "versions", "ino")? {
        conn.execute_batch("ALTER TABLE versions ADD COLUMN ino INTEGER;")?;
    }
    if has_table && !has_column(conn, "versions", "restored_from")? {
        // Issue 35: what a rollback or restore brought back.
        conn.execute_batch("ALTER TABLE versions ADD COLUMN restored_from INTEGER;")?;
    }
    let has_forgotten: bool = conn.one(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'forgotten'",
        p![],
        |r| r.get::<i64>(0).map(|n| n > 0),
    )?;
    if has_forgotten && !has_column(conn, "forgotten", "event_id")? {
        // Issue 36: the run that forgot the version.
        conn.execute_batch("ALTER TABLE forgotten ADD COLUMN event_id INTEGER;")?;
    }
    Ok(())
}

/// The refusal to open a retired pad for writing (issue 36, `scratchfs retire`).
pub(crate) fn retired(name: &str, when: &str) -> StoreError {
    StoreError::new(
        ErrorKind::ReadOnly,
        format!(
            "{name} was retired ({when}, scratchfs retire): it is read-only for good; \
             scratchfs log, show, export and mount --at TIME read it"
        ),
    )
}

/// Schema version written to `meta.schema_version`.
pub const SCHEMA_VERSION: &str = "1";
/// `PRAGMA application_id` of a scratchfs database (docs/schema.md): the ASCII bytes
/// `SCRF`, 0x53435246 = 1396920902, at offset 68 of the file's header.
pub const APPLICATION_ID: i32 = 0x5343_5246;
const READERS: usize = 3;

/// How long the batch (creates, unlinks and small commits acknowledged through the redo
/// log, see [`super::redo`]) may stay open before the fold thread commits it to SQLite.
pub const FOLD_DELAY: std::time::Duration = std::time::Duration::from_millis(5);
/// Operations a batch may hold; one more folds it first.
const BATCH_OPS: usize = 1024;
/// Bytes the redo log may hold; a batch that grows it past this folds first, and a fold
/// empties a log this long (otherwise the log is emptied when the database is closed).
const REDO_BYTES: u64 = 1 << 20;

/// The redo log and the batch it backs (see [`super::redo`]).
struct Redo {
    log: RedoLog,
    /// The last sequence number given out (a record appended, replayed, or reserved by an
    /// operation that then stored nothing: sequence numbers may have gaps).
    last_seq: u64,
    /// Sequence number SQLite holds every record up to (`meta.redo_seq`).
    folded: u64,
    /// Records since the last fold.
    ops: usize,
    /// Unlinks and rmdirs logged and answered but not applied to the batch yet; applied,
    /// in order, before any other operation and at every fold (so that SQLite sees every
    /// change in sequence order), off the FUSE request's path.
    pending: Vec<(u64, Op)>,
    /// SQLite dropped a batch whose records the log holds (a failed commit or write):
    /// the next fold rebuilds it from the log before anything else.
    lost: bool,
}

/// A savepoint around one operation of the batch, through cached statements (rusqlite's
/// `Savepoint` parses its SQL each time); rolled back when dropped unless released.
struct Savepoint<'a> {
    conn: &'a Connection,
    released: bool,
}

impl<'a> Savepoint<'a> {
    fn new(conn: &'a Connection) -> Result<Savepoint<'a>> {
        conn.exec("SAVEPOINT op", p![])?;
        Ok(Savepoint {
            conn,
            released: false,
        })
    }

    fn release(mut self) -> Result<()> {
        self.released = true;
        self.conn.exec("RELEASE op", p![])?;
        Ok(())
    }
}

impl Drop for Savepoint<'_> {
    fn drop(&mut self) {
        if !self.released {
            // Fails harmlessly when SQLite already rolled the whole transaction back.
            for sql in ["ROLLBACK TO op", "RELEASE op"] {
                let _ = self
                    .conn
                    .prepare_cached(sql)
                    .and_then(|mut s| s.execute([]));
            }
        }
    }
}

/// What `scratchfs recover --accept-loss` gave up: the damage and where the whole damaged
/// log was kept.
#[derive(Debug, Clone)]
pub struct RedoLoss {
    /// Where the log was damaged.
    pub damage: super::redo::Damage,
    /// The copy of the whole damaged log.
    pub copy: PathBuf,
}

/// The SQLite implementation of [`Store`].
pub struct Sqlite {
    path: PathBuf,
    writer: Mutex<Connection>,
    /// `processes` row ids by caller facts.
    processes: Processes,
    /// Wakes the fold thread when a batch opens.
    kick: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    /// The redo log; locked after `writer`.
    redo: Mutex<Redo>,
    /// Set while the writer connection holds changes SQLite has not committed (an open
    /// batch, or one a failed fold lost and the log still holds); readers then use the
    /// writer connection.
    batched: AtomicBool,
    /// Set when opening failed after the log was opened (a damaged log, a replay that
    /// failed): dropping the store then leaves the log exactly as it was.
    keep_log: AtomicBool,
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
    /// Opened to read the past ([`Sqlite::open_frozen`]): every change is refused with
    /// `EROFS` before it touches a connection or a log.
    frozen: bool,
}

/// The refusal of a change to a store opened to read the past.
fn frozen_refusal() -> StoreError {
    StoreError::new(
        ErrorKind::ReadOnly,
        "this scratchpad is opened to read the past (mount --at): it is read-only",
    )
}

/// A new scratchpad's id: 32 hex digits of blake3 over its path, the time and the pid.
pub(crate) fn new_scratchpad_id(path: &Path) -> String {
    crate::store::sql::new_scratchpad_id(&path.to_string_lossy())
}

pub use crate::store::sql::now_ns;

impl Sqlite {
    /// Opens (creating if missing) the database at `path`. A new database gets the schema
    /// and a root directory owned by `owner` (uid, gid) with mode 0755. A new database is
    /// created only where no file is, or the file is empty ([`probe`]): mode 0600, with
    /// [`APPLICATION_ID`] written before anything else. Any other file that is not a
    /// scratchfs database is refused (`EINVAL`) and left untouched; an older scratchfs
    /// database without the application id gets it. A file that cannot be opened for
    /// reading and writing is refused with `cannot open database PATH: CAUSE` and the OS's
    /// errno (`ENOENT`, `EISDIR`, `EACCES`, `EROFS`, ...: `open_refusal`).
    ///
    /// A redo log damaged before its tail refuses the open (`EIO`,
    /// [`super::redo::Damage::error`]).
    pub fn open(path: &Path, owner: (u32, u32)) -> Result<(Sqlite, bool)> {
        let (store, fresh, _) = Self::open_with(path, owner, None)?;
        Ok((store, fresh))
    }

    /// [`Sqlite::open`], accepting the loss of a damaged redo log's tail when `accept_loss`
    /// names who accepts it (`scratchfs recover --accept-loss`): the intact records before
    /// the damage are applied, the whole log is kept as `<db>-redo.damaged-<ns>`, and an
    /// event (op `redo-loss`, errno `EIO`, the reason naming offset, bytes and the copy)
    /// records the loss. Returns what was lost, if anything.
    pub fn open_with(
        path: &Path,
        owner: (u32, u32),
        accept_loss: Option<&Caller>,
    ) -> Result<(Sqlite, bool, Option<RedoLoss>)> {
        let probed = probe(path)?;
        if matches!(probed, Probe::Missing | Probe::Empty) {
            use std::os::unix::fs::OpenOptionsExt;
            // Mode 0600 before SQLite opens it: its -wal and -shm take the same mode.
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(path)
                .map_err(|e| cannot_open(path, &e))?;
            // In the file's header before it becomes a WAL database, so that the header
            // read by `probe` always shows it.
            let c = Connection::open(path).map_err(opening(path, true))?;
            // Before any table: pages a policy pass frees can go back to the file system
            // (issue 36, `PRAGMA incremental_vacuum`).
            c.pragma_update(None, "auto_vacuum", "INCREMENTAL")
                .map_err(opening(path, true))?;
            c.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(opening(path, true))?;
        }
        let conn = open_conn(path)?;
        if probed == (Probe::Scratchfs { stamped: false }) {
            conn.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(opening(path, true))?;
        }
        migrate_processes(&conn)
            .and_then(|()| migrate_versions(&conn))
            .map_err(|e| e.context(format_args!("cannot open database {}", path.display())))?;
        conn.execute_batch(SCHEMA).map_err(opening(path, true))?;
        if let Some(when) =
            conn.opt_value::<String>("SELECT value FROM meta WHERE key = 'retired'", p![])?
        {
            return Err(retired(&path.display().to_string(), &when));
        }
        let fresh: bool = conn.value::<i64>("SELECT COUNT(*) FROM nodes", p![])? == 0;
        if fresh {
            let now = now_ns();
            conn.exec("INSERT INTO nodes(ino, parent, name, kind, mode, uid, gid, atime_ns, mtime_ns, ctime_ns)
                 VALUES (1, NULL, x'', 'dir', 493, ?1, ?2, ?3, ?3, ?3)", p![owner.0, owner.1, now])?;
            conn.exec("INSERT INTO meta(key, value) VALUES ('schema_version', ?1) ON CONFLICT(key) DO UPDATE SET value = excluded.value", p![SCHEMA_VERSION])?;
        }
        // Its identity, which `adopt` records as where content came from (issue 14).
        conn.exec(
            "INSERT OR IGNORE INTO meta(key, value) VALUES ('scratchpad_id', ?1)",
            p![&new_scratchpad_id(path)],
        )?;
        // Namespace history (issue 14) for a new database or one made before it.
        checkpoint::seed_tree_log(&conn)
            .map_err(|e| e.context(format_args!("opening {}", path.display())))?;
        let folded: u64 = conn
            .opt("SELECT value FROM meta WHERE key = 'redo_seq'", p![], |r| {
                r.get::<String>(0)
            })?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let log = RedoLog::open(path)
            .map_err(|e| e.context(format_args!("cannot open database {}", path.display())))?;
        let mut readers = Vec::new();
        for _ in 0..READERS {
            readers.push(Mutex::new(open_conn(path)?));
        }
        let store = Sqlite {
            path: path.to_path_buf(),
            writer: Mutex::new(conn),
            processes: Processes::default(),
            kick: Mutex::new(None),
            redo: Mutex::new(Redo {
                log,
                last_seq: folded,
                folded,
                ops: 0,
                pending: Vec::new(),
                lost: false,
            }),
            batched: AtomicBool::new(false),
            keep_log: AtomicBool::new(false),
            readers,
            next_reader: AtomicUsize::new(0),
            frozen: false,
        };
        match store.recover(accept_loss) {
            Ok(loss) => Ok((store, fresh, loss)),
            Err(e) => {
                store.keep_log.store(true, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    /// Opens the database at `path` to read only, while a mount of it may be live (issue
    /// 14, `mount --at`): read-only connections (WAL readers never block the live
    /// writer), no schema change, no redo log (the live daemon's is its own: what it has
    /// not folded yet is newer than any checkpoint, and a time travel mount only shows
    /// what SQLite holds). Every change is refused with `EROFS`; `load` returns the live
    /// tree as SQLite has it, which the caller does not use (it serves a
    /// [`crate::checkpoint::Snapshot`]). `ENOENT`, `EINVAL` for a missing or foreign file;
    /// a database without namespace history (never opened by a scratchfs that keeps it)
    /// fails with `ENOENT` when asked for a point.
    pub fn open_frozen(path: &Path) -> Result<Sqlite> {
        let writer = open_read_only(path)?;
        let mut readers = Vec::new();
        for _ in 0..READERS {
            readers.push(Mutex::new(open_read_only(path)?));
        }
        Ok(Sqlite {
            path: path.to_path_buf(),
            writer: Mutex::new(writer),
            processes: Processes::default(),
            kick: Mutex::new(None),
            redo: Mutex::new(Redo {
                log: RedoLog::detached()?,
                last_seq: 0,
                folded: 0,
                ops: 0,
                pending: Vec::new(),
                lost: false,
            }),
            batched: AtomicBool::new(false),
            keep_log: AtomicBool::new(true),
            readers,
            next_reader: AtomicUsize::new(0),
            frozen: true,
        })
    }

    /// Applies the records of the redo log that SQLite does not hold yet (a daemon killed
    /// after acknowledging them), folds them and empties the log.
    fn recover(&self, accept_loss: Option<&Caller>) -> Result<Option<RedoLoss>> {
        let mut conn = self.writer.lock();
        let mut loss = None;
        let pending = {
            let mut redo = self.redo.lock();
            if redo.log.is_empty() {
                return Ok(None);
            }
            let folded = redo.folded;
            let (records, damage) = redo.log.read_checked()?;
            if let Some(damage) = damage {
                if accept_loss.is_none() {
                    return Err(damage.error(&self.path));
                }
                let copy = redo.log.cut_at_damage(&damage)?;
                loss = Some(RedoLoss { damage, copy });
            }
            redo.last_seq = records.iter().map(|r| r.seq).fold(folded, u64::max);
            let n = records.into_iter().filter(|r| r.seq > folded).count();
            // `fold` rebuilds the batch from the log.
            redo.lost = n > 0;
            n
        };
        if let Err(e) = self.fold(&mut conn) {
            let log = RedoLog::path_for(&self.path);
            return Err(StoreError::new(
                e.kind,
                format!(
                    "applying the redo log {} ({pending} acknowledged changes): {} \
                     (the log is kept; moving it aside opens the database without them)",
                    log.display(),
                    e.reason
                ),
            ));
        }
        self.redo.lock().log.clear()?;
        if pending > 0 {
            log::info!(
                "{}: applied {pending} acknowledged changes from the redo log",
                self.path.display()
            );
        }
        if let (Some(l), Some(caller)) = (&loss, accept_loss) {
            let proc_ = self.process(&conn, caller)?;
            let reason = format!(
                "redo log {} damaged at byte {} of {}: {} intact records applied, {} bytes \
                 after the damage lost (the whole log is kept as {})",
                l.damage.path.display(),
                l.damage.offset,
                l.damage.len,
                l.damage.records,
                l.damage.len - l.damage.offset,
                l.copy.display()
            );
            insert_event(
                &conn,
                "redo-loss",
                "",
                None,
                None,
                None,
                Some(libc::EIO),
                Some(&reason),
                None,
                &proc_,
                now_ns(),
            )?;
            log::warn!("{reason}");
        }
        Ok(loss)
    }

    /// Commits the batch to SQLite with `meta.redo_seq`: first rebuilding it from the redo
    /// log if SQLite dropped it, then applying the pending unlinks. Errors keep their
    /// errno (`ENOSPC` for a full disk); the log keeps every record until a fold succeeds.
    /// The redo lock is released during the commit itself, so that unlinks can be logged
    /// meanwhile (they belong to the next batch).
    fn fold(&self, conn: &mut Connection) -> Result<()> {
        let (seq, pending) = {
            let mut redo = self.redo.lock();
            if redo.lost {
                self.rebuild(conn, &mut redo)?;
            }
            if conn.is_autocommit() && redo.pending.is_empty() {
                self.batched.store(false, Ordering::SeqCst);
                return Ok(());
            }
            (redo.last_seq, std::mem::take(&mut redo.pending))
        };
        if let Err(e) = self.apply_pending(conn, pending) {
            self.drop_batch(conn, &mut self.redo.lock());
            return Err(e);
        }
        let done = (|| -> Result<()> {
            conn.exec("INSERT INTO meta(key, value) VALUES ('redo_seq', ?1) ON CONFLICT(key) DO UPDATE SET value = excluded.value", p![&seq.to_string()])?;
            conn.exec("COMMIT", p![])?;
            Ok(())
        })();
        let mut redo = self.redo.lock();
        if let Err(e) = done {
            self.drop_batch(conn, &mut redo);
            log::error!("writing acknowledged changes to SQLite (kept in the redo log): {e}");
            return Err(e);
        }
        redo.folded = seq;
        redo.ops = redo.pending.len();
        self.batched.store(false, Ordering::SeqCst);
        if redo.last_seq == seq
            && redo.log.len() >= REDO_BYTES
            && let Err(e) = redo.log.clear()
        {
            log::warn!("emptying the redo log: {e}");
        }
        Ok(())
    }

    /// Rolls back what is left of a batch SQLite could not write and marks it for a
    /// rebuild from the log (the process rows inserted in it are gone too).
    fn drop_batch(&self, conn: &Connection, redo: &mut Redo) {
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        self.processes.clear();
        redo.lost = true;
        // Readers go to the writer, which rebuilds the batch before reading.
        self.batched.store(true, Ordering::SeqCst);
    }

    /// Rebuilds, in a new transaction, the batch SQLite dropped: every logged record after
    /// `redo.folded`, pending unlinks included.
    fn rebuild(&self, conn: &mut Connection, redo: &mut Redo) -> Result<()> {
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        self.processes.clear();
        conn.execute_batch("BEGIN IMMEDIATE")?;
        self.batched.store(true, Ordering::SeqCst);
        if let Err(e) = self.replay(conn, redo) {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
        redo.pending.clear();
        redo.lost = false;
        // The fold thread tries to commit it again.
        self.kick();
        Ok(())
    }

    /// Applies, inside the open transaction, the logged records after `redo.folded`, in
    /// sequence order.
    fn replay(&self, conn: &mut Connection, redo: &mut Redo) -> Result<()> {
        let mut records = redo.log.read_all()?;
        records.sort_by_key(|r| r.seq);
        for rec in records {
            if rec.seq <= redo.folded {
                continue;
            }
            self.apply_in_savepoint(conn, &rec.op, &rec.payload, None)?;
            redo.last_seq = redo.last_seq.max(rec.seq);
        }
        Ok(())
    }

    /// Applies unlinks taken from `Redo::pending` to the batch (beginning one if needed),
    /// in order. On failure the caller drops the batch: the log holds them.
    fn apply_pending(&self, conn: &Connection, pending: Vec<(u64, Op)>) -> Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        if conn.is_autocommit() {
            conn.exec("BEGIN IMMEDIATE", p![])?;
            self.batched.store(true, Ordering::SeqCst);
        }
        for (_, op) in pending {
            self.apply_in_savepoint(conn, &op, &[], None)?;
        }
        Ok(())
    }

    /// [`Self::apply`] in a savepoint, released unless nothing changed.
    fn apply_in_savepoint(
        &self,
        conn: &Connection,
        op: &Op,
        payload: &[u8],
        prefix_hasher: Option<(i64, ContentHasher)>,
    ) -> Result<Applied> {
        let proc = self.process(conn, op.caller())?;
        let sp = Savepoint::new(conn)?;
        let applied = self.apply(conn, op, payload, &proc, prefix_hasher)?;
        if !matches!(applied, Applied::Unchanged(_)) {
            sp.release()?;
        }
        Ok(applied)
    }

    /// Applies `op` to `conn` (the writer, inside a savepoint): the work of a create or a
    /// commit, shared by the live path and replay. `payload` is a commit's source bytes;
    /// `proc` is the caller's `processes` row, resolved before the savepoint (a rolled
    /// back savepoint must not take a row the cache of process ids still names).
    fn apply(
        &self,
        conn: &Connection,
        op: &Op,
        payload: &[u8],
        proc: &Proc,
        prefix_hasher: Option<(i64, ContentHasher)>,
    ) -> Result<Applied> {
        match op {
            Op::Create {
                parent,
                name,
                path,
                kind,
                attrs,
                caller: _,
            } => create_in(
                conn,
                *parent,
                name,
                path,
                *kind,
                *attrs,
                proc,
                LineageLookup::InsertUnlessDeleted,
            )
            .map(Applied::Node),
            Op::Unlink {
                ino,
                file_id,
                path,
                caller: _,
                time_ns,
            } => unlink_in(conn, *ino, *file_id, path, proc, *time_ns).map(|()| Applied::Unlinked),
            Op::Commit {
                ino,
                path,
                op,
                expect_head,
                build,
                caller,
                time_ns,
                set_mtime,
                pieces,
                inputs,
                origin,
                restores,
            } => {
                let pieces = Pieces::new(pieces, payload)?;
                let mut source = |off: u64, buf: &mut [u8]| pieces.read(off, buf);
                commit_in(
                    conn,
                    CommitRequest {
                        ino: *ino,
                        path,
                        op,
                        expect_head: *expect_head,
                        build: build.as_build(),
                        source: &mut source,
                        prefix_hasher,
                        caller,
                        time_ns: *time_ns,
                        set_mtime: *set_mtime,
                        durable: false,
                        inputs,
                        origin: origin.as_ref(),
                        restores: *restores,
                    },
                    proc,
                )
            }
            Op::Read {
                file_id,
                version_id,
                version,
                caller: _,
                time_ns,
            } => {
                note_read_in(conn, *file_id, *version_id, *version, proc, *time_ns)?;
                Ok(Applied::Noted)
            }
        }
    }

    /// Applies `op` inside the batch and appends it to the redo log; the change is then
    /// acknowledged (it survives `kill -9`) though SQLite has not committed it yet. Its
    /// sequence number is taken before its work, after the pending unlinks are applied, so
    /// that SQLite sees the changes in sequence order.
    fn apply_logged(
        &self,
        op: Op,
        payload: &[u8],
        prefix_hasher: Option<(i64, ContentHasher)>,
    ) -> Result<Applied> {
        let mut conn = self.batch_lock()?;
        // Counted after the batch's own statements (its BEGIN, a fold of a full batch),
        // which depend on the time, not on the change.
        let _counted = crate::store::count::change();
        let (seq, pending) = {
            let mut redo = self.redo.lock();
            redo.last_seq += 1;
            (redo.last_seq, std::mem::take(&mut redo.pending))
        };
        if let Err(e) = self.apply_pending(&conn, pending) {
            self.drop_batch(&conn, &mut self.redo.lock());
            return Err(e);
        }
        let proc = self.process(&conn, op.caller())?;
        let sp = Savepoint::new(&conn)?;
        let applied = match self.apply(&conn, &op, payload, &proc, prefix_hasher) {
            Ok(Applied::Unchanged(c)) => {
                drop(sp);
                return Ok(Applied::Unchanged(c));
            }
            Ok(a) => a,
            Err(e) => {
                drop(sp);
                if conn.is_autocommit() {
                    // SQLite dropped the whole batch (a failed write while spilling pages).
                    self.drop_batch(&conn, &mut self.redo.lock());
                }
                return Err(e);
            }
        };
        {
            let mut redo = self.redo.lock();
            if let Err(e) = redo.log.append(seq, &op, payload) {
                drop(redo);
                drop(sp);
                return Err(e);
            }
            redo.ops += 1;
        }
        sp.release()?;
        if self.kick.lock().is_none() {
            // No fold thread (the CLI, unit tests): write it now.
            self.fold(&mut conn)?;
        }
        Ok(applied)
    }

    /// Logs an unlink (or rmdir) and queues it for the batch: the SQL work is done later,
    /// before any other operation or by the fold thread, so `rm -rf` does not wait for it
    /// nor for the folds of its earlier unlinks. With a batch to rebuild it goes the
    /// synchronous way, so that a failure reaches the caller.
    fn log_unlink(&self, op: Op) -> Result<()> {
        if self.frozen {
            return Err(frozen_refusal());
        }
        let first = {
            let mut redo = self.redo.lock();
            if redo.lost || self.kick.lock().is_none() {
                drop(redo);
                return self.apply_logged(op, &[], None).map(|_| ());
            }
            let seq = redo.last_seq + 1;
            let _counted = crate::store::count::change();
            redo.log.append(seq, &op, &[])?;
            redo.last_seq = seq;
            redo.ops += 1;
            redo.pending.push((seq, op));
            redo.pending.len() == 1
        };
        if first {
            self.kick();
        }
        Ok(())
    }

    /// The writer connection inside the open batch (beginning one if needed), after
    /// folding a batch that is full or rebuilding one SQLite dropped.
    fn batch_lock(&self) -> Result<crate::sync::MutexGuard<'_, Connection>> {
        if self.frozen {
            return Err(frozen_refusal());
        }
        let mut conn = self.writer.lock();
        let refold = {
            let redo = self.redo.lock();
            redo.ops >= BATCH_OPS || redo.log.len() >= REDO_BYTES || redo.lost
        };
        if refold {
            drop(conn);
            conn = self.write_lock()?;
        }
        if conn.is_autocommit() {
            conn.exec("BEGIN IMMEDIATE", p![])?;
            self.batched.store(true, Ordering::SeqCst);
            self.kick();
        }
        Ok(conn)
    }

    /// Sets a `meta` row (e.g. `mountpoint`, which `scratchfs restore` uses to reach a
    /// mounted scratchpad).
    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.write_lock()?.exec("INSERT INTO meta(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value", p![key, value])?;
        Ok(())
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts the thread that folds the batch within `FOLD_DELAY` (5 ms) of its first change.
    /// It ends when the store is dropped.
    pub fn start_flusher(store: &std::sync::Arc<Sqlite>) {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        *store.kick.lock() = Some(tx);
        let weak = std::sync::Arc::downgrade(store);
        let _ = std::thread::Builder::new()
            .name("scratchfs-fold".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    std::thread::sleep(FOLD_DELAY);
                    // Kicks that came meanwhile are answered by this fold.
                    while rx.try_recv().is_ok() {}
                    crate::failpoint::hit("fold-thread");
                    let Some(store) = weak.upgrade() else { break };
                    if let Err(e) = store.write_lock() {
                        log::error!("writing answered changes: {e}");
                    }
                }
            });
    }

    /// Wakes the fold thread, if there is one.
    fn kick(&self) {
        if let Some(k) = self.kick.lock().as_ref() {
            let _ = k.send(());
        }
    }

    /// The writer connection outside any transaction, after folding the batch (so that
    /// every change is stored in the order the filesystem made it).
    fn write_lock(&self) -> Result<crate::sync::MutexGuard<'_, Connection>> {
        if self.frozen {
            return Err(frozen_refusal());
        }
        let mut conn = self.writer.lock();
        self.fold(&mut conn)?;
        Ok(conn)
    }

    /// The `processes` row for `c`, inserted (in its own transaction) on first use.
    fn process(&self, conn: &Connection, c: &Caller) -> Result<Proc> {
        self.processes.of(conn, c)
    }

    /// A connection to read with: the writer while it holds changes SQLite has not
    /// committed (so reads see every acknowledged change), else a free reader. A batch
    /// SQLite dropped (a failed commit) is rebuilt from the log first, so that a read never
    /// sees less than what was acknowledged; if that fails, so does the read (`EIO` or
    /// the rebuild's errno), rather than return bytes that are not there.
    fn reader(&self) -> Result<crate::sync::MutexGuard<'_, Connection>> {
        if self.batched.load(Ordering::SeqCst) {
            let mut w = self.writer.lock();
            {
                let mut redo = self.redo.lock();
                if redo.lost {
                    self.rebuild(&mut w, &mut redo)?;
                }
            }
            if self.batched.load(Ordering::SeqCst) {
                return Ok(w);
            }
        }
        for r in &self.readers {
            if let Some(g) = r.try_lock() {
                return Ok(g);
            }
        }
        let i = self.next_reader.fetch_add(1, Ordering::Relaxed) % self.readers.len();
        Ok(self.readers[i].lock())
    }
}

impl Sqlite {
    /// A commit written to SQLite in its own transaction, after folding the batch: one
    /// made by `fsync` (`synchronous = FULL`, so it is on disk) or one too large for the
    /// redo log.
    fn commit_now(&self, req: CommitRequest<'_>) -> Result<Committed> {
        let durable = req.durable;
        let mut conn = self.write_lock()?;
        let caller = &self.process(&conn, req.caller)?;
        if durable {
            conn.pragma_update(None, "synchronous", "FULL")?;
        }
        let result = (|| -> Result<Committed> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            match commit_in(&tx, req, caller)? {
                Applied::Committed(c) => {
                    crate::failpoint::hit("commit-now");
                    tx.commit()?;
                    Ok(c)
                }
                Applied::Unchanged(c) => Ok(c),
                Applied::Stale(e) => {
                    tx.commit()?;
                    Err(e)
                }
                Applied::Node(_) | Applied::Unlinked | Applied::Noted => Err(StoreError::new(
                    ErrorKind::Failed,
                    "store: a commit did something else",
                )),
            }
        })();
        if durable {
            conn.pragma_update(None, "synchronous", "NORMAL")?;
        }
        result
    }
}

impl Drop for Sqlite {
    fn drop(&mut self) {
        if self.keep_log.load(Ordering::SeqCst) {
            return;
        }
        match self.write_lock() {
            Ok(conn) => {
                drop(conn);
                if let Err(e) = self.redo.lock().log.clear() {
                    log::warn!("emptying the redo log: {e}");
                }
            }
            Err(e) => log::error!("writing answered changes (the redo log keeps them): {e}"),
        }
    }
}

impl super::Reading for Sqlite {
    fn reading<T>(&self, f: impl FnOnce(&dyn Conn) -> Result<T>) -> Result<T> {
        f(&*self.reader()?)
    }
}

impl Store for Sqlite {
    fn text_index_rows(&self) -> Result<Option<Vec<(i64, i64)>>> {
        if self.frozen {
            return Ok(None);
        }
        let conn = self.write_lock()?;
        if !text_index::prepare(&*conn)? {
            return Ok(None);
        }
        text_index::rows(&*conn).map(Some)
    }

    fn text_index_put(&self, entries: &[text_index::TextEntry]) -> Result<()> {
        let conn = self.write_lock()?;
        conn.transaction(|c| text_index::put(c, entries))
    }

    fn text_index_query(&self, literals: &[String], ignore_case: bool) -> Result<Vec<i64>> {
        super::Reading::reading(self, |c| text_index::query(c, literals, ignore_case))
    }

    fn history_index_heads(&self) -> Result<Option<Vec<history_index::HistoryRow>>> {
        if self.frozen {
            return Ok(None);
        }
        let conn = self.write_lock()?;
        if !history_index::prepare(&*conn)? {
            return Ok(None);
        }
        history_index::heads(&*conn).map(Some)
    }

    fn history_index_rows(&self, file_id: i64) -> Result<Vec<history_index::HistoryRow>> {
        super::Reading::reading(self, |c| history_index::rows_of(c, file_id))
    }

    fn history_index_put(&self, entries: &[history_index::HistoryEntry]) -> Result<()> {
        let conn = self.write_lock()?;
        conn.transaction(|c| history_index::put(c, entries))
    }

    fn history_index_query(
        &self,
        literals: &[String],
        ignore_case: bool,
    ) -> Result<Vec<(i64, i64)>> {
        super::Reading::reading(self, |c| history_index::query(c, literals, ignore_case))
    }

    fn history_guards(&self) -> Result<Vec<(u32, u32, u32)>> {
        super::Reading::reading(self, history_index::guards)
    }

    fn legacy_versions(&self) -> Result<bool> {
        super::Reading::reading(self, history_index::legacy_versions)
    }

    fn finish(&self) -> Result<()> {
        if self.frozen {
            return Ok(());
        }
        let conn = self.write_lock()?;
        {
            let mut redo = self.redo.lock();
            if redo.pending.is_empty() && redo.folded == redo.last_seq && conn.is_autocommit() {
                redo.log.clear()?;
            }
        }
        let busy: i64 = conn.value("PRAGMA wal_checkpoint(TRUNCATE)", p![])?;
        if busy != 0 {
            log::warn!(
                "{}: a reader kept the WAL from being checkpointed into the database file at unmount",
                self.path.display()
            );
        }
        Ok(())
    }

    fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        Sqlite::set_meta(self, key, value)
    }

    fn load(&self) -> Result<Vec<NodeRecord>> {
        crate::store::sql::read::load(&*self.writer.lock())
    }

    fn create(
        &self,
        parent: u64,
        name: &[u8],
        path: &str,
        kind: Kind,
        attrs: Attrs,
        caller: &Caller,
    ) -> Result<NodeRecord> {
        let op = Op::Create {
            parent,
            name: name.to_vec(),
            path: path.to_string(),
            kind,
            attrs,
            caller: caller.clone(),
        };
        match self.apply_logged(op, &[], None)? {
            Applied::Node(n) => Ok(n),
            _ => Err(StoreError::new(
                ErrorKind::Failed,
                "store: a create made no node",
            )),
        }
    }

    fn commit(&self, req: CommitRequest<'_>) -> Result<Committed> {
        let build = LoggedBuild::of(&req.build);
        let pieces = build.source_ranges();
        let bytes: u64 = pieces.iter().map(|&(_, n)| n).sum();
        if req.durable || bytes > MAX_PAYLOAD {
            return self.commit_now(req);
        }
        let payload = Pieces::capture(&pieces, req.source)
            .map_err(|e| StoreError::new(ErrorKind::of_io(&e), e.to_string()))?;
        let op = Op::Commit {
            ino: req.ino,
            path: req.path.to_string(),
            op: req.op.to_string(),
            expect_head: req.expect_head,
            build,
            caller: req.caller.clone(),
            time_ns: req.time_ns,
            set_mtime: req.set_mtime,
            pieces,
            inputs: req.inputs.to_vec(),
            origin: req.origin.cloned(),
            restores: req.restores,
        };
        match self.apply_logged(op, &payload, req.prefix_hasher)? {
            Applied::Committed(c) | Applied::Unchanged(c) => Ok(c),
            Applied::Stale(e) => Err(e),
            Applied::Node(_) | Applied::Unlinked | Applied::Noted => Err(StoreError::new(
                ErrorKind::Failed,
                "store: a commit did something else",
            )),
        }
    }

    fn set_attrs(
        &self,
        ino: u64,
        a: Attrs,
        mtime_pinned: bool,
        path: &str,
        caller: &Caller,
    ) -> Result<()> {
        let mut conn = self.write_lock()?;
        let caller = &self.process(&conn, caller)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        set_attrs_in(&tx, ino, a, mtime_pinned, path, caller)?;
        tx.commit()?;
        Ok(())
    }

    fn unlink(
        &self,
        ino: u64,
        file_id: Option<i64>,
        path: &str,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<()> {
        self.log_unlink(Op::Unlink {
            ino,
            file_id,
            path: path.to_string(),
            caller: caller.clone(),
            time_ns,
        })
    }

    /// Redacts `path@number` (`redact_in`) by `caller`, then leaves no byte of the
    /// secrets in the database's files: the file is rewritten (`VACUUM`, so no freed page
    /// keeps them), the WAL checkpointed and truncated, and the redo log, every record of
    /// which SQLite then holds, emptied. Fails with `EBUSY` when a reader keeps the WAL
    /// from being truncated.
    fn redact(
        &self,
        file_id: i64,
        number: i64,
        path: &str,
        why: &str,
        caller: &Caller,
    ) -> Result<RedactReport> {
        let mut conn = self.write_lock()?;
        let proc_ = self.process(&conn, caller)?;
        let report = {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let report = redact_in(&tx, file_id, number, path, why, &proc_)?;
            tx.commit()?;
            report
        };
        loop {
            self.fold(&mut conn)?;
            let mut redo = self.redo.lock();
            if redo.pending.is_empty() && redo.folded == redo.last_seq && conn.is_autocommit() {
                redo.log.clear()?;
                break;
            }
        }
        conn.batch("VACUUM")?;
        for _ in 0..50 {
            let busy: i64 = conn.value("PRAGMA wal_checkpoint(TRUNCATE)", p![])?;
            if busy == 0 {
                return Ok(report);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Err(StoreError::new(
            ErrorKind::Busy,
            format!(
                "{}: redacted, but a reader keeps the WAL from being emptied: run `scratchfs redact` again when it is done",
                self.path.display()
            ),
        ))
    }

    fn gc(
        &self,
        req: &GcRequest,
        shown: &[i64],
        protected: &[(i64, u64)],
        caller: &Caller,
    ) -> Result<GcReport> {
        let mut conn = self.write_lock()?;
        gc(&mut conn, req, shown, protected, caller)
    }

    fn note_event(&self, op: &str, path: &str, reason: &str, caller: &Caller) -> Result<()> {
        let mut conn = self.write_lock()?;
        let caller = &self.process(&conn, caller)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        insert_event(
            &tx,
            op,
            path,
            None,
            None,
            None,
            None,
            Some(reason),
            None,
            caller,
            now_ns(),
        )?;
        tx.commit()?;
        Ok(())
    }

    fn forget(&self, batch: &ForgetBatch<'_>, caller: &Caller) -> Result<Forgot> {
        let mut conn = self.write_lock()?;
        let caller = &self.process(&conn, caller)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = crate::store::sql::policy::forget_in(&tx, batch, caller)?;
        tx.commit()?;
        Ok(out)
    }

    fn reclaim(&self) -> Result<()> {
        // The pages a pass freed go back to the file system (a no-op in a database made
        // without `auto_vacuum = INCREMENTAL`, docs/schema.md), 512 (2 MiB) at a time,
        // the write lock let go and as long again waited between them, then the WAL is
        // written back into the file (PASSIVE: never waits for a reader).
        loop {
            let started = std::time::Instant::now();
            let left: i64 = {
                let conn = self.write_lock()?;
                // Each step of the statement frees one page: stepped to its end.
                conn.each("PRAGMA incremental_vacuum(512)", p![], &mut |_| {
                    Ok(crate::store::sql::Flow::Next)
                })?;
                conn.value("PRAGMA freelist_count", p![])?
            };
            if left == 0 {
                break;
            }
            std::thread::sleep(started.elapsed());
        }
        let conn = self.write_lock()?;
        let _: i64 = conn.value("PRAGMA wal_checkpoint(PASSIVE)", p![])?;
        Ok(())
    }

    fn reject(
        &self,
        path: &str,
        errno: i32,
        reason: &str,
        caller: &Caller,
        content: Refused<'_>,
    ) -> Result<()> {
        let mut conn = self.write_lock()?;
        let caller = &self.process(&conn, caller)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        reject_in(&tx, path, errno, reason, caller, content)?;
        tx.commit()?;
        Ok(())
    }

    fn record_rules(&self, text: &str, caller: &Caller) -> Result<()> {
        let conn = self.write_lock()?;
        let caller = &self.process(&conn, caller)?;
        record_rules_in(&*conn, text, caller)?;
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        if self.frozen {
            // Nothing was acknowledged here.
            return Ok(());
        }
        drop(self.write_lock()?);
        Ok(())
    }

    fn sync_to_disk(&self) -> Result<()> {
        if self.frozen {
            return Ok(());
        }
        let conn = self.write_lock()?;
        // Committed frames are in the WAL (`synchronous = NORMAL` does not sync it).
        let mut wal = self.path.as_os_str().to_owned();
        wal.push("-wal");
        match std::fs::File::open(&wal) {
            Ok(f) => f
                .sync_data()
                .map_err(|e| StoreError::new(ErrorKind::of_io(&e), e.to_string()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(StoreError::new(
                    ErrorKind::Failed,
                    format!("{}: {e}", wal.display()),
                ));
            }
        }
        drop(conn);
        Ok(())
    }

    fn rename(&self, req: RenameRequest<'_>) -> Result<(Option<i64>, Option<VersionInfo>)> {
        let mut conn = self.write_lock()?;
        let caller = &self.process(&conn, req.caller)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = rename_in(&tx, req, caller)?;
        tx.commit()?;
        out
    }

    fn process_record_cost(&self, caller: &Caller) -> u64 {
        self.processes.cost(caller)
    }
    fn take_process_bytes(&self) -> u64 {
        self.processes.take_added()
    }
    fn note_read(
        &self,
        file_id: i64,
        version_id: i64,
        version: i64,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<()> {
        let op = Op::Read {
            file_id,
            version_id,
            version,
            caller: caller.clone(),
            time_ns,
        };
        self.apply_logged(op, &[], None).map(|_| ())
    }

    fn checkpoint(
        &self,
        name: &str,
        note: Option<&str>,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<crate::checkpoint::Checkpoint> {
        let mut conn = self.write_lock()?;
        let caller = &self.process(&conn, caller)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let cp = checkpoint::take(&tx, name, note, false, caller, time_ns)?;
        tx.commit()?;
        Ok(cp)
    }

    fn drop_checkpoint(
        &self,
        name: &str,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<crate::checkpoint::Checkpoint> {
        let mut conn = self.write_lock()?;
        let caller = &self.process(&conn, caller)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let cp = checkpoint::drop_named(&tx, name, caller, time_ns)?;
        tx.commit()?;
        Ok(cp)
    }

    fn rollback(
        &self,
        name: &str,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<crate::checkpoint::RollbackReport> {
        let mut conn = self.write_lock()?;
        let caller = &self.process(&conn, caller)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let report = checkpoint::rollback_named(&tx, name, caller, time_ns)?;
        tx.commit()?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::History;
    use crate::store::sql::content::EMPTY_STREAM;
    use crate::store::{Build, ContentRef};

    fn store() -> (tempfile::TempDir, Sqlite) {
        let dir = tempfile::tempdir().unwrap();
        let (s, fresh) = Sqlite::open(&dir.path().join("t.db"), (0, 0)).unwrap();
        assert!(fresh);
        (dir, s)
    }

    /// A new process's row counts what the daemon was told it would
    /// ([`Store::process_record_cost`]), in bytes when counted again from the store: a
    /// count in characters counted a 4-byte character as one.
    #[test]
    fn a_process_row_counts_its_bytes_in_the_usage() {
        let (_dir, s) = store();
        let before = s.usage().unwrap().bytes;
        let c = Caller {
            writer: "r\u{e9}dacteur".into(),
            exe: "/opt/\u{1f980}/tool".into(),
            argv: vec!["tool".into(), "\u{1f980}".repeat(100)],
            env_writer: Some("\u{e9}t\u{e9}".into()),
            ..Caller::default()
        };
        let cost = s.process_record_cost(&c);
        assert!(cost > 256 + 400, "{cost}");
        s.processes.of(&*s.writer.lock(), &c).unwrap();
        assert_eq!(s.take_process_bytes(), cost);
        assert_eq!(s.take_process_bytes(), 0);
        assert_eq!(s.process_record_cost(&c), 0, "a known row adds nothing");
        assert_eq!(s.usage().unwrap().bytes - before, cost);
    }

    #[test]
    fn probe_knows_new_old_and_foreign_databases() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        assert_eq!(probe(&db).unwrap(), Probe::Missing);
        drop(Sqlite::open(&db, (0, 0)).unwrap());
        assert_eq!(
            std::fs::metadata(&db).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(probe(&db).unwrap(), Probe::Scratchfs { stamped: true });
        // An older scratchfs database (no application id) is known by its meta row and
        // tables, and stamped when opened read-write.
        Connection::open(&db)
            .unwrap()
            .pragma_update(None, "application_id", 0)
            .unwrap();
        assert_eq!(probe(&db).unwrap(), Probe::Scratchfs { stamped: false });
        let (s, fresh) = Sqlite::open(&db, (0, 0)).unwrap();
        assert!(!fresh);
        drop(s);
        assert_eq!(probe(&db).unwrap(), Probe::Scratchfs { stamped: true });
        // An empty file may become a database; other files are refused.
        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(probe(&empty).unwrap(), Probe::Empty);
        assert!(open_read_only(&empty).is_err());
        let text = dir.path().join("text.db");
        std::fs::write(&text, b"hello").unwrap();
        let other = dir.path().join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch(
                "CREATE TABLE meta(key, value); INSERT INTO meta VALUES ('schema_version', '1')",
            )
            .unwrap();
        for p in [&text, &other] {
            let e = Sqlite::open(p, (0, 0)).err().unwrap();
            assert_eq!(e.kind, ErrorKind::Invalid);
            assert_eq!(
                e.reason,
                format!("{} is not a scratchfs database", p.display())
            );
            assert_eq!(open_read_only(p).err().unwrap().reason, e.reason);
        }
        // What cannot be opened at all: the path and the OS's reason.
        let d = dir.path();
        let missing = d.join("no/such/x.db");
        for (p, errno, why) in [
            (d, libc::EISDIR, "Is a directory (os error 21)"),
            (
                &missing,
                libc::ENOENT,
                "No such file or directory (os error 2)",
            ),
        ] {
            let want = format!("cannot open database {}: {why}", p.display());
            let e = open_read_only(p).err().unwrap();
            assert_eq!((e.errno(), &e.reason), (errno, &want));
            let e = Sqlite::open(p, (0, 0)).err().unwrap();
            assert_eq!((e.errno(), &e.reason), (errno, &want));
        }
        assert_eq!(std::fs::read(&text).unwrap(), b"hello");
    }

    fn file(s: &Sqlite, name: &str) -> NodeRecord {
        let a = Attrs {
            mode: 0o644,
            uid: 0,
            gid: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
        };
        s.create(1, name.as_bytes(), name, Kind::File, a, &Caller::default())
            .unwrap()
    }

    fn read_all(s: &Sqlite, c: ContentRef) -> Vec<u8> {
        let mut buf = vec![0u8; c.len as usize];
        let n = s.read(c, 0, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    fn append(s: &Sqlite, n: &NodeRecord, data: &[u8]) -> Committed {
        append_with(s, n, data, None)
    }

    fn append_with(
        s: &Sqlite,
        n: &NodeRecord,
        data: &[u8],
        prefix_hasher: Option<(i64, ContentHasher)>,
    ) -> Committed {
        let mut src = |off: u64, buf: &mut [u8]| {
            buf.copy_from_slice(&data[off as usize..off as usize + buf.len()]);
            Ok(())
        };
        s.commit(CommitRequest {
            ino: n.ino,
            path: "f",
            op: "append",
            expect_head: None,
            build: Build::Append {
                len: data.len() as u64,
            },
            source: &mut src,
            prefix_hasher,
            caller: &Caller::default(),
            time_ns: 1,
            set_mtime: true,
            durable: false,
            inputs: &[],
            origin: None,
            restores: None,
        })
        .unwrap()
    }

    /// `redact` finds a copy of the secret in another file, across the end of a piece
    /// of the store it reads (admin::SCAN_PIECE, 1 MiB), and moves it out.
    #[test]
    fn redact_finds_a_copy_across_the_pieces_it_reads() {
        let (_d, s) = store();
        let secret: &[u8] = b"AKIAIOSFODNN7EXAMPLE";
        let a = file(&s, "a");
        append(&s, &a, &[b"key ", secret, b"\n"].concat());
        let b = file(&s, "b");
        let mut data = vec![b'x'; (1 << 20) - 7];
        data.extend_from_slice(secret);
        data.push(b'\n');
        let vb = append(&s, &b, &data).version;
        let report = s
            .redact(a.file_id.unwrap(), 1, "a", "test", &Caller::default())
            .unwrap();
        assert_eq!(report.versions, 2, "{report:?}");
        assert!(report.files.contains(&b.file_id.unwrap()), "{report:?}");
        let now = read_all(&s, s.version(vb.id).unwrap().content);
        assert!(!now.windows(secret.len()).any(|w| w == secret));
        assert_eq!(&now[..(1 << 20) - 7], &data[..(1 << 20) - 7]);
        assert!(
            now.ends_with(b"blake3:94cd92109cadee5a]\n"),
            "{:?}",
            &now[(1 << 20) - 10..]
        );
    }

    #[test]
    fn appends_extend_one_stream_and_hash_matches() {
        let (_d, s) = store();
        let n = file(&s, "f");
        let mut expect = Vec::new();
        let mut last: Option<VersionInfo> = None;
        for i in 0..50 {
            let line = format!("line {i}\n");
            expect.extend_from_slice(line.as_bytes());
            let c = append(&s, &n, line.as_bytes());
            // The first append leaves the shared empty stream; the others extend its stream.
            match &last {
                None => assert_ne!(c.version.content.stream, EMPTY_STREAM),
                Some(l) => assert_eq!(c.version.content.stream, l.content.stream),
            }
            assert_eq!(
                c.hasher.finalize(),
                blake3::hash(&expect).to_hex().to_string()
            );
            last = Some(c.version);
        }
        assert_eq!(read_all(&s, last.unwrap().content), expect);
    }

    #[test]
    fn overlay_rewrites_middle_and_truncation_is_free() {
        let (_d, s) = store();
        let n = file(&s, "f");
        let data = vec![7u8; 200_000];
        let v1 = append(&s, &n, &data).version;
        let patch = b"XYZ";
        let mut src = |off: u64, buf: &mut [u8]| {
            let o = (off - 100_000) as usize;
            buf.copy_from_slice(&patch[o..o + buf.len()]);
            Ok(())
        };
        let c = s
            .commit(CommitRequest {
                ino: n.ino,
                path: "f",
                op: "write",
                expect_head: Some(v1.id),
                build: Build::Overlay {
                    base: v1.content,
                    base_limit: v1.content.len,
                    size: 200_000,
                    dirty: &[(100_000, 100_003)],
                },
                source: &mut src,
                prefix_hasher: None,
                caller: &Caller::default(),
                time_ns: 2,
                set_mtime: true,
                durable: false,
                inputs: &[],
                origin: None,
                restores: None,
            })
            .unwrap();
        let mut expect = data.clone();
        expect[100_000..100_003].copy_from_slice(patch);
        assert_eq!(read_all(&s, c.version.content), expect);
        assert_eq!(
            c.hasher.finalize(),
            blake3::hash(&expect).to_hex().to_string()
        );
        // Stale base: refused with ESTALE, head unchanged.
        let mut none = |_: u64, _: &mut [u8]| Ok(());
        let err = s
            .commit(CommitRequest {
                ino: n.ino,
                path: "f",
                op: "truncate",
                expect_head: Some(v1.id),
                build: Build::Overlay {
                    base: v1.content,
                    base_limit: 10,
                    size: 10,
                    dirty: &[],
                },
                source: &mut none,
                prefix_hasher: None,
                caller: &Caller::default(),
                time_ns: 3,
                set_mtime: true,
                durable: false,
                inputs: &[],
                origin: None,
                restores: None,
            })
            .err()
            .unwrap();
        assert_eq!(err.kind, ErrorKind::Stale);
        let t = s
            .commit(CommitRequest {
                ino: n.ino,
                path: "f",
                op: "truncate",
                expect_head: Some(c.version.id),
                build: Build::Overlay {
                    base: c.version.content,
                    base_limit: 10,
                    size: 10,
                    dirty: &[],
                },
                source: &mut none,
                prefix_hasher: None,
                caller: &Caller::default(),
                time_ns: 4,
                set_mtime: true,
                durable: false,
                inputs: &[],
                origin: None,
                restores: None,
            })
            .unwrap();
        assert_eq!(t.version.content.stream, c.version.content.stream);
        assert_eq!(read_all(&s, t.version.content), vec![7u8; 10]);
        assert_eq!(
            t.version.number, 3,
            "a file's first version is its first commit"
        );
    }

    #[test]
    fn ten_thousand_small_appends_stay_small() {
        let (d, s) = store();
        let n = file(&s, "f");
        let line = [b'a'; 100];
        let mut prev = None;
        for _ in 0..10_000 {
            let c = append_with(&s, &n, &line, prev);
            prev = Some((c.version.id, c.hasher));
        }
        let expect = vec![b'a'; 1_000_000];
        assert_eq!(
            prev.unwrap().1.finalize(),
            blake3::hash(&expect).to_hex().to_string()
        );
        drop(s);
        let size = std::fs::metadata(d.path().join("t.db")).unwrap().len()
            + std::fs::metadata(d.path().join("t.db-wal"))
                .map(|m| m.len())
                .unwrap_or(0);
        assert!(size < 10 << 20, "database is {size} bytes");
    }
}
