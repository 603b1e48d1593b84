//! The embedded SQLite store: one file in WAL mode (SPEC §8), one writer connection and a
//! few reader connections (WAL readers never block the writer).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::redo::{LoggedBuild, MAX_PAYLOAD, Op, Pieces, RedoLog};
use super::{
    Attrs, Build, CHUNK, CommitRequest, Committed, ContentRef, FieldInfo, GcReport, GcRequest,
    Kind, Lineage, NodeRecord, RedactReport, RefusalInfo, RenameRequest, RestorableInfo, Store,
    VersionInfo, VersionMeta,
};
use crate::error::{Error, Result};
use crate::identity::Caller;
use crate::sync::Mutex;
use crate::views::manifest::REFUSALS_SHOWN;

const SCHEMA: &str = include_str!("schema.sql");
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
        conn.prepare_cached("SAVEPOINT op")?.execute([])?;
        Ok(Savepoint {
            conn,
            released: false,
        })
    }

    fn release(mut self) -> Result<()> {
        self.released = true;
        self.conn.prepare_cached("RELEASE op")?.execute([])?;
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

/// What applying an operation did.
enum Applied {
    /// A create: the new node.
    Node(NodeRecord),
    /// An unlink or rmdir.
    Unlinked,
    /// A commit that made a version.
    Committed(Committed),
    /// A commit of the same bytes as the current version: nothing to store or log.
    Unchanged(Committed),
    /// A lost update: the refusal is recorded (and logged); the caller gets the error.
    Stale(Error),
}

/// The SQLite implementation of [`Store`].
pub struct Sqlite {
    path: PathBuf,
    writer: Mutex<Connection>,
    /// `processes` row ids by caller facts (rows are never deleted, so ids stay valid).
    processes: Mutex<HashMap<Caller, i64>>,
    /// Wakes the fold thread when a batch opens.
    kick: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    /// The redo log; locked after `writer`.
    redo: Mutex<Redo>,
    /// Set while the writer connection holds changes SQLite has not committed (an open
    /// batch, or one a failed fold lost and the log still holds); readers then use the
    /// writer connection.
    batched: AtomicBool,
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
}

/// Current time in ns since the Unix epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

fn open_conn(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "cache_size", -4096)?;
    conn.set_prepared_statement_cache_capacity(128);
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(conn)
}

/// What a database path holds, as [`probe`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// No file: a new database may be created there.
    Missing,
    /// An empty file (as `scratchfs mount` leaves when it takes the database's lock
    /// before creating it, or `touch`): a new database may be made of it.
    Empty,
    /// A scratchfs database; `stamped`: it carries [`APPLICATION_ID`] (older ones are
    /// known by their `meta.schema_version` and tables, and get it when opened read-write).
    Scratchfs {
        /// Whether `PRAGMA application_id` is [`APPLICATION_ID`].
        stamped: bool,
    },
}

/// The refusal of a file that is not a scratchfs database.
fn not_ours(path: &Path) -> Error {
    Error::new(
        libc::EINVAL,
        format!("{} is not a scratchfs database", path.display()),
    )
}

/// Tells, without writing anything, whether `path` may be used as a scratchfs database:
/// missing, empty, or a scratchfs database. Anything else (not SQLite, another
/// application's SQLite database, a SQLite database without scratchfs's `meta` row and
/// tables) is refused with `EINVAL` "FILE is not a scratchfs database". The header is read
/// first; only a database without the application id is opened with SQLite, read-only and
/// as `immutable` unless a `-wal` file exists, so that no `-wal` or `-shm` file is created
/// beside a foreign database.
pub fn probe(path: &Path) -> Result<Probe> {
    use std::io::Read;
    let io = |e: std::io::Error| {
        Error::new(
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("{}: {e}", path.display()),
        )
    };
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Probe::Missing),
        Err(e) => return Err(io(e)),
    };
    let meta = f.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(not_ours(path));
    }
    if meta.len() == 0 {
        return Ok(Probe::Empty);
    }
    let mut head = [0u8; 100];
    if f.read_exact(&mut head).is_err() || &head[..16] != b"SQLite format 3\0" {
        return Err(not_ours(path));
    }
    if i32::from_be_bytes([head[68], head[69], head[70], head[71]]) == APPLICATION_ID {
        return Ok(Probe::Scratchfs { stamped: true });
    }
    drop(f);
    let conn = if wal_path(path).exists() {
        // In use (e.g. a mount of an older scratchfs database): read through its WAL.
        Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?
    } else {
        Connection::open_with_flags(
            immutable_uri(path),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                | rusqlite::OpenFlags::SQLITE_OPEN_URI
                | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?
    };
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let looked = (|| -> rusqlite::Result<Option<Probe>> {
        let id: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        if id == APPLICATION_ID {
            return Ok(Some(Probe::Scratchfs { stamped: true }));
        }
        if id != 0 {
            return Ok(None);
        }
        let tables: i64 = conn.query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'
             AND name IN ('meta', 'nodes', 'files', 'versions')",
            [],
            |r| r.get(0),
        )?;
        if tables != 4 {
            return Ok(None);
        }
        let version: Option<String> = conn
            .query_row(
                "SELECT CAST(value AS TEXT) FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        Ok(version.map(|_| Probe::Scratchfs { stamped: false }))
    })();
    match looked {
        Ok(Some(p)) => Ok(p),
        Ok(None) => Err(not_ours(path)),
        // A damaged header, or columns of other types: not ours either.
        Err(rusqlite::Error::SqliteFailure(e, _))
            if matches!(
                e.code,
                rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt
            ) =>
        {
            Err(not_ours(path))
        }
        Err(
            rusqlite::Error::InvalidColumnType(..) | rusqlite::Error::FromSqlConversionFailure(..),
        ) => Err(not_ours(path)),
        Err(e) => Err(Error::store(format!("{}: {e}", path.display()))),
    }
}

/// `<db>-wal`.
fn wal_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-wal");
    PathBuf::from(p)
}

/// `file:PATH?immutable=1`, PATH percent-encoded: SQLite then reads the file without
/// locks, without its `-wal` and without creating a `-shm`.
fn immutable_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// The files of the database at `db` that may hold its data or its provenance: the
/// database, `-wal`, `-shm`, the redo log `-redo` and the daemon's log `.log`.
pub fn companions(db: &Path) -> Vec<PathBuf> {
    ["", "-wal", "-shm", "-redo", ".log"]
        .iter()
        .map(|suffix| {
            let mut p = db.as_os_str().to_owned();
            p.push(suffix);
            PathBuf::from(p)
        })
        .collect()
}

/// Makes the database and its [`companions`] that exist private (mode 0600) when their
/// mode allows more; a failure (a file of another owner) is logged, not fatal.
pub fn make_private(db: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for p in companions(db) {
        let Ok(meta) = std::fs::metadata(&p) else {
            continue;
        };
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            match std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)) {
                Ok(()) => log::info!("{}: mode {:o} -> 0600", p.display(), mode & 0o777),
                Err(e) => log::warn!("{}: cannot make it private (mode 0600): {e}", p.display()),
            }
        }
    }
}

impl Sqlite {
    /// Opens (creating if missing) the database at `path`. A new database gets the schema
    /// and a root directory owned by `owner` (uid, gid) with mode 0755. A new database is
    /// created only where no file is, or the file is empty ([`probe`]): mode 0600, with
    /// [`APPLICATION_ID`] written before anything else. Any other file that is not a
    /// scratchfs database is refused (`EINVAL`) and left untouched; an older scratchfs
    /// database without the application id gets it.
    pub fn open(path: &Path, owner: (u32, u32)) -> Result<(Sqlite, bool)> {
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
                .map_err(|e| {
                    Error::new(
                        e.raw_os_error().unwrap_or(libc::EIO),
                        format!("{}: {e}", path.display()),
                    )
                })?;
            // In the file's header before it becomes a WAL database, so that the header
            // read by `probe` always shows it.
            let c = Connection::open(path)?;
            c.pragma_update(None, "application_id", APPLICATION_ID)?;
        }
        let conn = open_conn(path)?;
        if probed == (Probe::Scratchfs { stamped: false }) {
            conn.pragma_update(None, "application_id", APPLICATION_ID)?;
        }
        conn.execute_batch(SCHEMA)?;
        let fresh: bool =
            conn.query_row("SELECT COUNT(*) FROM nodes", [], |r| r.get::<_, i64>(0))? == 0;
        if fresh {
            let now = now_ns();
            conn.execute(
                "INSERT INTO nodes(ino, parent, name, kind, mode, uid, gid, atime_ns, mtime_ns, ctime_ns)
                 VALUES (1, NULL, x'', 'dir', 493, ?1, ?2, ?3, ?3, ?3)",
                params![owner.0, owner.1, now],
            )?;
            conn.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?1)",
                [SCHEMA_VERSION],
            )?;
        }
        let folded: u64 = conn
            .query_row("SELECT value FROM meta WHERE key = 'redo_seq'", [], |r| {
                r.get::<_, String>(0)
            })
            .optional()?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let log = RedoLog::open(path)?;
        let mut readers = Vec::new();
        for _ in 0..READERS {
            readers.push(Mutex::new(open_conn(path)?));
        }
        let store = Sqlite {
            path: path.to_path_buf(),
            writer: Mutex::new(conn),
            processes: Mutex::new(HashMap::new()),
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
            readers,
            next_reader: AtomicUsize::new(0),
        };
        store.recover()?;
        Ok((store, fresh))
    }

    /// Applies the records of the redo log that SQLite does not hold yet (a daemon killed
    /// after acknowledging them), folds them and empties the log.
    fn recover(&self) -> Result<()> {
        let mut conn = self.writer.lock();
        let pending = {
            let mut redo = self.redo.lock();
            if redo.log.is_empty() {
                return Ok(());
            }
            let folded = redo.folded;
            let records = redo.log.read_all()?;
            redo.last_seq = records.iter().map(|r| r.seq).fold(folded, u64::max);
            let n = records.into_iter().filter(|r| r.seq > folded).count();
            // `fold` rebuilds the batch from the log.
            redo.lost = n > 0;
            n
        };
        if let Err(e) = self.fold(&mut conn) {
            let log = RedoLog::path_for(&self.path);
            return Err(Error::new(
                e.errno,
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
        Ok(())
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
            conn.prepare_cached("INSERT OR REPLACE INTO meta(key, value) VALUES ('redo_seq', ?1)")?
                .execute([seq.to_string()])?;
            conn.prepare_cached("COMMIT")?.execute([])?;
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
        self.processes.lock().clear();
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
        self.processes.lock().clear();
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
            conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
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
        prefix_hasher: Option<(i64, blake3::Hasher)>,
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
        prefix_hasher: Option<(i64, blake3::Hasher)>,
    ) -> Result<Applied> {
        match op {
            Op::Create {
                parent,
                name,
                path,
                kind,
                attrs,
                caller: _,
            } => create_in(conn, *parent, name, path, *kind, *attrs, proc).map(Applied::Node),
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
                    },
                    proc,
                )
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
        prefix_hasher: Option<(i64, blake3::Hasher)>,
    ) -> Result<Applied> {
        let mut conn = self.batch_lock()?;
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
        let first = {
            let mut redo = self.redo.lock();
            if redo.lost || self.kick.lock().is_none() {
                drop(redo);
                return self.apply_logged(op, &[], None).map(|_| ());
            }
            let seq = redo.last_seq + 1;
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
            conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
            self.batched.store(true, Ordering::SeqCst);
            self.kick();
        }
        Ok(conn)
    }

    /// Redacts `path@number` ([`redact_in`]) by `caller`, then leaves no byte of the
    /// secrets in the database's files: the file is rewritten (`VACUUM`, so no freed page
    /// keeps them), the WAL checkpointed and truncated, and the redo log, every record of
    /// which SQLite then holds, emptied. Fails with `EBUSY` when a reader keeps the WAL
    /// from being truncated.
    pub fn redact_version(
        &self,
        file_id: i64,
        number: i64,
        path: &str,
        why: &str,
        caller: &Caller,
    ) -> Result<RedactReport> {
        let mut conn = self.write_lock()?;
        let proc_ = self.process(&conn, caller)?;
        let report = redact_in(&mut conn, file_id, number, path, why, &proc_)?;
        loop {
            self.fold(&mut conn)?;
            let mut redo = self.redo.lock();
            if redo.pending.is_empty() && redo.folded == redo.last_seq && conn.is_autocommit() {
                redo.log.clear()?;
                break;
            }
        }
        conn.execute_batch("VACUUM")?;
        for _ in 0..50 {
            let busy: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
            if busy == 0 {
                return Ok(report);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Err(Error::new(
            libc::EBUSY,
            format!(
                "{}: redacted, but a reader keeps the WAL from being emptied: run `scratchfs redact` again when it is done",
                self.path.display()
            ),
        ))
    }

    /// Sets a `meta` row (e.g. `mountpoint`, which `scratchfs restore` uses to reach a
    /// mounted scratchpad).
    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.write_lock()?.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
            params![key, value],
        )?;
        Ok(())
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts the thread that folds the batch within [`FOLD_DELAY`] of its first change.
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
        let mut conn = self.writer.lock();
        self.fold(&mut conn)?;
        Ok(conn)
    }

    /// The `processes` row for `c`, inserted (in its own transaction) on first use.
    fn process(&self, conn: &Connection, c: &Caller) -> Result<Proc> {
        let key = process_key(c);
        let cached = self.processes.lock().get(&key).copied();
        let id = match cached {
            Some(id) => id,
            None => {
                let id = process_id(conn, c)?;
                let mut cache = self.processes.lock();
                if cache.len() >= 4096 {
                    cache.clear();
                }
                cache.insert(key, id);
                id
            }
        };
        Ok(Proc {
            id,
            pid: c.pid,
            writer: c.writer.clone(),
        })
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

/// The `processes` row of these caller facts, inserted when new.
fn process_id(conn: &Connection, c: &Caller) -> Result<i64> {
    let argv = argv_json(c);
    let facts = params![
        c.writer,
        c.tgid,
        c.start_time as i64,
        c.uid,
        c.gid,
        c.exe,
        argv,
        c.env_writer,
        c.step
    ];
    let found: Option<i64> = conn
        .prepare_cached(
            "SELECT id FROM processes WHERE writer = ?1 AND tgid = ?2 AND start_time = ?3
             AND uid = ?4 AND gid = ?5 AND exe = ?6 AND argv = ?7 AND env_writer IS ?8
             AND step IS ?9",
        )?
        .query_row(facts, |r| r.get(0))
        .optional()?;
    Ok(match found {
        Some(id) => id,
        None => {
            conn.prepare_cached(
                "INSERT INTO processes(writer, tgid, start_time, uid, gid, exe, argv,
                    env_writer, step) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(facts)?;
            conn.last_insert_rowid()
        }
    })
}

/// Forgets old versions and the content only they held (see `scratchfs gc`). Never: the
/// current version of any file, versions MANIFEST points at, versions per-key provenance
/// names, and the bytes of `protected` `(stream, len)` (content open handles still read).
/// The report is also stored as `meta.last_gc` (JSON), and a run that is not a dry run is
/// an event (op `gc`) by `caller`, whose reason says what it forgot (issue 9: every gc
/// run is on record).
pub fn gc(
    conn: &mut Connection,
    req: &GcRequest,
    protected: &[(i64, u64)],
    caller: &Caller,
) -> Result<GcReport> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // The daemon's writer connection lives on: a previous gc's temporary tables are still
    // there (a committed gc keeps them, a rolled back dry run does not).
    tx.execute_batch(
        "DROP TABLE IF EXISTS temp.gc_keep;
         DROP TABLE IF EXISTS temp.gc_drop;
         DROP TABLE IF EXISTS temp.gc_streams;
         CREATE TEMP TABLE gc_keep(id INTEGER PRIMARY KEY);
         CREATE TEMP TABLE gc_drop(id INTEGER PRIMARY KEY);",
    )?;
    // Protected versions.
    tx.execute(
        "INSERT OR IGNORE INTO gc_keep
         SELECT id FROM versions v WHERE version = (SELECT MAX(version) FROM versions w WHERE w.file_id = v.file_id)
         UNION SELECT version_id FROM fields
         UNION SELECT version_id FROM events WHERE id IN (SELECT id FROM events_restorable ORDER BY id DESC LIMIT ?1)",
        [REFUSALS_SHOWN as i64],
    )
    ?;
    tx.execute(
        "INSERT OR IGNORE INTO gc_drop
         SELECT v.id FROM versions v
         WHERE v.id NOT IN (SELECT id FROM gc_keep)
           AND ((?1 IS NOT NULL AND (SELECT COUNT(*) FROM versions w WHERE w.file_id = v.file_id AND w.version > v.version) >= ?1)
             OR (?2 IS NOT NULL AND v.time_ns < ?2))",
        params![req.keep_last.map(|n| n as i64), req.before_ns],
    )
    ?;
    let versions: i64 = tx.query_row("SELECT COUNT(*) FROM gc_drop", [], |r| r.get(0))?;
    tx.execute(
        "DELETE FROM versions WHERE id IN (SELECT id FROM gc_drop)",
        [],
    )?;
    // Content: the bytes of each stream still referenced (by a version or a refusal) end
    // at the longest reference; the rest of the stream, and unreferenced streams, go.
    tx.execute_batch(
        "CREATE TEMP TABLE gc_streams AS
             SELECT stream, MAX(size) AS len FROM (
                 SELECT stream, size FROM versions
                 UNION ALL SELECT stream, size FROM events WHERE stream IS NOT NULL)
             GROUP BY stream;",
    )?;
    // Content that open handles of the mount still read stays too.
    for &(stream, len) in protected {
        tx.execute(
            "INSERT INTO gc_streams(stream, len) VALUES (?1, ?2)",
            params![stream, len as i64],
        )?;
    }
    tx.execute_batch(
        "DELETE FROM extents WHERE NOT EXISTS
             (SELECT 1 FROM gc_streams s WHERE s.stream = extents.stream AND extents.offset < s.len);
         DELETE FROM streams WHERE id NOT IN (SELECT stream FROM gc_streams);",
    )?;
    let blob_bytes: i64 = tx
        .query_row(
            "SELECT COALESCE(SUM(size), 0) FROM blobs WHERE id NOT IN (SELECT blob FROM extents WHERE blob IS NOT NULL)",
            [],
            |r| r.get(0),
        )
        ?;
    tx.execute(
        "DELETE FROM blobs WHERE id NOT IN (SELECT blob FROM extents WHERE blob IS NOT NULL)",
        [],
    )?;
    let report = GcReport {
        versions: versions as u64,
        blob_bytes: blob_bytes as u64,
        dry_run: req.dry_run,
    };
    tx.execute(
        "INSERT OR REPLACE INTO meta(key, value) VALUES ('last_gc', ?1)",
        [serde_json::to_string(&report).unwrap_or_default()],
    )?;
    let proc_ = Proc {
        id: process_id(&tx, caller)?,
        pid: caller.pid,
        writer: caller.writer.clone(),
    };
    let mut selected = Vec::new();
    if let Some(n) = req.keep_last {
        selected.push(format!("keep_last {n}"));
    }
    if let Some(t) = req.before_ns {
        selected.push(format!("before_ns {t}"));
    }
    insert_event(
        &tx,
        "gc",
        "",
        None,
        None,
        None,
        None,
        Some(&format!(
            "gc ({}) by uid {}: forgot {} version{} and {} bytes of content",
            selected.join(", "),
            caller.uid,
            report.versions,
            if report.versions == 1 { "" } else { "s" },
            report.blob_bytes
        )),
        None,
        &proc_,
        now_ns(),
    )?;
    if req.dry_run {
        tx.rollback()?;
        conn.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('last_gc', ?1)",
            [serde_json::to_string(&report).unwrap_or_default()],
        )?;
    } else {
        tx.commit()?;
    }
    Ok(report)
}

/// Redacts version `number` of file `file_id` (SPEC §10 `redact`): every well-known
/// secret in it is replaced by a marker naming the pattern and the secret's blake3
/// ([`crate::rules::enforce::redact_secrets`]), and so is every other version of that file
/// and every refusal recorded at `path` that holds a secret, so that no byte of one stays
/// referenced. Content no longer referenced is deleted, and the
/// version rows get the redacted content's size and blake3. An event (op `redact`)
/// records who did it and `why`. `EINVAL` when the version holds no secret, `ENOENT`
/// when there is no such version. The caller then rewrites the file (VACUUM) and empties
/// the WAL and the redo log ([`Sqlite::redact`]).
fn redact_in(
    conn: &mut Connection,
    file_id: i64,
    number: i64,
    path: &str,
    why: &str,
    caller: &Proc,
) -> Result<RedactReport> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (stream, size): (i64, i64) = tx
        .query_row(
            "SELECT stream, size FROM versions WHERE file_id = ?1 AND version = ?2",
            params![file_id, number],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
        .ok_or_else(|| Error::new(libc::ENOENT, format!("{path}@{number}: no such version")))?;
    let content = read_all(
        &tx,
        ContentRef {
            stream,
            len: size as u64,
        },
    )?;
    let secrets = crate::rules::enforce::secrets_found(&content);
    if secrets.is_empty() {
        return Err(Error::new(
            libc::EINVAL,
            format!("{path}@{number}: holds no secret the deny_secrets patterns know"),
        ));
    }
    // Every version and refusal of the file that holds a secret the patterns know: the
    // one asked for, where the later versions often still carry it, and any other.
    let holds = |bytes: &[u8]| crate::rules::enforce::secret_in(bytes).is_some();
    // Every version of the file and every refusal at its path holding one of them.
    let mut targets: Vec<(&str, i64, i64, i64)> = Vec::new();
    {
        let mut stmt = tx.prepare(
            "SELECT 'versions', id, stream, size FROM versions WHERE file_id = ?1
             UNION ALL SELECT 'events', id, stream, size FROM events
                 WHERE path = ?2 AND stream IS NOT NULL",
        )?;
        let rows = stmt.query_map(params![file_id, path], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })?;
        for row in rows {
            let (table, id, stream, size) = row?;
            let table = if table == "versions" {
                "versions"
            } else {
                "events"
            };
            targets.push((table, id, stream, size));
        }
    }
    let mut report = RedactReport {
        kinds: secrets.iter().map(|(k, _)| k.to_string()).collect(),
        ..Default::default()
    };
    report.kinds.dedup();
    let mut redacted_streams: std::collections::HashMap<i64, (i64, i64, String)> =
        std::collections::HashMap::new();
    for (table, id, stream, size) in targets {
        let bytes = read_all(
            &tx,
            ContentRef {
                stream,
                len: size as u64,
            },
        )?;
        if !holds(&bytes) {
            continue;
        }
        let clean = crate::rules::enforce::redact_secrets(&bytes).into_owned();
        let key = stream * 1_000_003 + size;
        let (new_stream, new_size, hash) = match redacted_streams.get(&key) {
            Some(v) => v.clone(),
            None => {
                let new_stream = new_stream(&tx)?;
                let mut hasher = blake3::Hasher::new();
                let mut fill = |off: u64, buf: &mut [u8]| -> Result<()> {
                    buf.copy_from_slice(&clean[off as usize..off as usize + buf.len()]);
                    Ok(())
                };
                write_range(
                    &tx,
                    new_stream,
                    0,
                    clean.len() as u64,
                    &mut hasher,
                    &mut fill,
                    &mut Vec::new(),
                )?;
                let v = (
                    new_stream,
                    clean.len() as i64,
                    hasher.finalize().to_hex().to_string(),
                );
                redacted_streams.insert(key, v.clone());
                v
            }
        };
        tx.execute(
            &format!("UPDATE {table} SET stream = ?1, size = ?2, blake3 = ?3 WHERE id = ?4"),
            params![new_stream, new_size, hash, id],
        )?;
        if table == "versions" {
            report.versions += 1;
        } else {
            report.refusals += 1;
        }
    }
    // Content no longer referenced goes, as in gc.
    tx.execute_batch(
        "DROP TABLE IF EXISTS temp.gc_streams;
         CREATE TEMP TABLE gc_streams AS
             SELECT stream, MAX(size) AS len FROM (
                 SELECT stream, size FROM versions
                 UNION ALL SELECT stream, size FROM events WHERE stream IS NOT NULL)
             GROUP BY stream;
         DELETE FROM extents WHERE NOT EXISTS
             (SELECT 1 FROM gc_streams s WHERE s.stream = extents.stream AND extents.offset < s.len);
         DELETE FROM streams WHERE id NOT IN (SELECT stream FROM gc_streams) AND id != 0;
         DELETE FROM blobs WHERE id NOT IN (SELECT blob FROM extents WHERE blob IS NOT NULL);",
    )?;
    insert_event(
        &tx,
        "redact",
        path,
        None,
        Some(file_id),
        None,
        None,
        Some(&format!(
            "redact {path}@{number}: {} ({} versions, {} refusals redacted): {why}",
            report.kinds.join(", "),
            report.versions,
            report.refusals
        )),
        None,
        caller,
        now_ns(),
    )?;
    tx.commit()?;
    Ok(report)
}

/// Opens the database read-only, for inspection while it may be mounted (a WAL reader
/// never blocks the daemon). `ENOENT`-style failures name the file; a file that is not a
/// scratchfs database (an empty one included) is refused with `EINVAL` ([`probe`]).
pub fn open_read_only(path: &Path) -> Result<Connection> {
    match probe(path)? {
        Probe::Missing => {
            return Err(Error::new(
                libc::ENOENT,
                format!("{}: no such database", path.display()),
            ));
        }
        Probe::Empty => return Err(not_ours(path)),
        Probe::Scratchfs { .. } => {}
    }
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    Ok(conn)
}

/// The whole content of `content`, read through `conn`.
pub fn read_all(conn: &Connection, content: ContentRef) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; content.len as usize];
    let n = read_at(conn, content, 0, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Reads `buf.len()` bytes (or fewer at EOF) of `content` at `offset` through `conn`.
fn read_at(conn: &Connection, content: ContentRef, offset: u64, buf: &mut [u8]) -> Result<usize> {
    if offset >= content.len || buf.is_empty() {
        return Ok(0);
    }
    let end = content.len.min(offset + buf.len() as u64);
    let first: Option<i64> = conn
        .prepare_cached(
            "SELECT offset FROM extents WHERE stream = ?1 AND offset <= ?2 ORDER BY offset DESC LIMIT 1",
        )?
        .query_row(params![content.stream, offset as i64], |r| r.get(0))
        .optional()?;
    let from = first.unwrap_or(0);
    let mut stmt = conn.prepare_cached(
        "SELECT e.offset, e.len, e.blob_off, COALESCE(e.data, b.data) FROM extents e
         LEFT JOIN blobs b ON b.id = e.blob
         WHERE e.stream = ?1 AND e.offset >= ?2 AND e.offset < ?3 ORDER BY e.offset",
    )?;
    let mut rows = stmt.query(params![content.stream, from, end as i64])?;
    let mut covered = offset;
    while let Some(row) = rows.next()? {
        let e_off = row.get::<_, i64>(0)? as u64;
        let e_len = row.get::<_, i64>(1)? as u64;
        let b_off = row.get::<_, i64>(2)? as u64;
        let data = row.get_ref(3)?.as_blob().map_err(Error::store)?;
        let lo = e_off.max(offset);
        let hi = (e_off + e_len).min(end);
        if lo >= hi {
            continue;
        }
        if lo > covered {
            buf[(covered - offset) as usize..(lo - offset) as usize].fill(0);
        }
        let src = (b_off + lo - e_off) as usize..(b_off + hi - e_off) as usize;
        let src = data
            .get(src)
            .ok_or_else(|| Error::new(libc::EIO, "store: extent points past its blob"))?;
        buf[(lo - offset) as usize..(hi - offset) as usize].copy_from_slice(src);
        covered = hi;
    }
    if covered < end {
        buf[(covered - offset) as usize..(end - offset) as usize].fill(0);
    }
    Ok((end - offset) as usize)
}

/// Stores one chunk as a blob (deduplicated) and returns its id.
fn put_blob(tx: &Connection, data: &[u8]) -> Result<i64> {
    let hash = blake3::hash(data);
    let id: Option<i64> = tx
        .prepare_cached("SELECT id FROM blobs WHERE hash = ?1")?
        .query_row([hash.as_bytes().as_slice()], |r| r.get(0))
        .optional()?;
    if let Some(id) = id {
        return Ok(id);
    }
    tx.prepare_cached("INSERT INTO blobs(hash, size, data) VALUES (?1, ?2, ?3)")?
        .execute(params![hash.as_bytes().as_slice(), data.len() as i64, data])?;
    Ok(tx.last_insert_rowid())
}

/// Pieces smaller than this are stored inline in their extent, not as a blob: deduplicating
/// them would cost more than it saves (and a small append then dirties fewer pages).
const INLINE_MAX: usize = 4096;

/// The empty stream, shared by every empty version; it never grows.
const EMPTY_STREAM: i64 = 0;

fn new_stream(tx: &Connection) -> Result<i64> {
    tx.prepare_cached("INSERT INTO streams DEFAULT VALUES")?
        .execute([])?;
    Ok(tx.last_insert_rowid())
}

/// Length of a stream: the end of its last extent.
fn stream_end(tx: &Connection, stream: i64) -> Result<u64> {
    Ok(tx
        .prepare_cached(
            "SELECT offset + len FROM extents WHERE stream = ?1 ORDER BY offset DESC LIMIT 1",
        )?
        .query_row([stream], |r| r.get::<_, i64>(0))
        .optional()?
        .unwrap_or(0) as u64)
}

/// Appends bytes `[from, to)` of the new content to `stream` at stream offset `from`,
/// in chunks of at most [`CHUNK`], feeding `hasher`. `fill(offset, buf)` supplies bytes.
fn write_range(
    tx: &Connection,
    stream: i64,
    from: u64,
    to: u64,
    hasher: &mut blake3::Hasher,
    fill: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let mut at = from;
    while at < to {
        let n = ((to - at) as usize).min(CHUNK);
        buf.resize(n, 0);
        fill(at, &mut buf[..n])?;
        hasher.update(&buf[..n]);
        if n < INLINE_MAX {
            tx.prepare_cached(
                "INSERT INTO extents(stream, offset, len, blob, blob_off, data)
                 VALUES (?1, ?2, ?3, NULL, 0, ?4)",
            )?
            .execute(params![stream, at as i64, n as i64, &buf[..n]])?;
        } else {
            let blob = put_blob(tx, &buf[..n])?;
            tx.prepare_cached(
                "INSERT INTO extents(stream, offset, len, blob, blob_off) VALUES (?1, ?2, ?3, ?4, 0)",
            )?
            .execute(params![stream, at as i64, n as i64, blob])?;
        }
        at += n as u64;
    }
    Ok(())
}

fn version_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<VersionInfo> {
    Ok(VersionInfo {
        id: r.get(0)?,
        number: r.get(1)?,
        content: ContentRef {
            stream: r.get(2)?,
            len: r.get::<_, i64>(3)? as u64,
        },
        time_ns: r.get(4)?,
        writer: r.get::<_, String>(5)?.into(),
    })
}

fn head_of(tx: &Connection, file_id: i64) -> Result<Option<VersionInfo>> {
    Ok(tx
        .prepare_cached(
            "SELECT id, version, stream, size, time_ns, writer FROM versions WHERE file_id = ?1
             ORDER BY version DESC LIMIT 1",
        )?
        .query_row([file_id], version_from_row)
        .optional()?)
}

/// JSON files up to this size keep per-key provenance.
const FIELDS_MAX: u64 = 1 << 20;

/// Parses a stored JSON object, if `content` is one.
fn json_object(
    tx: &Connection,
    content: ContentRef,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>> {
    let mut buf = vec![0u8; content.len as usize];
    let n = read_at(tx, content, 0, &mut buf)?;
    buf.truncate(n);
    Ok(match serde_json::from_slice(&buf) {
        Ok(serde_json::Value::Object(m)) => Some(m),
        _ => None,
    })
}

/// Per-key provenance of a JSON file (SPEC §5 "each key keeps its own provenance"):
/// every top-level key whose value changed from `old` to `new` (compared as JSON values,
/// so reformatting or reordering is no change) is attributed to `version_id`; keys that
/// are gone lose their row.
fn update_fields(
    tx: &Connection,
    file_id: i64,
    path: &str,
    old: Option<ContentRef>,
    new: ContentRef,
    version_id: i64,
) -> Result<()> {
    if !path.ends_with(".json") {
        return Ok(());
    }
    let new_obj = if new.len <= FIELDS_MAX {
        json_object(tx, new)?
    } else {
        None
    };
    let Some(new_obj) = new_obj else {
        tx.prepare_cached("DELETE FROM fields WHERE file_id = ?1")?
            .execute([file_id])?;
        return Ok(());
    };
    let old_obj = match old {
        Some(o) if o.len <= FIELDS_MAX => json_object(tx, o)?,
        _ => None,
    }
    .unwrap_or_default();
    for (k, v) in &new_obj {
        if old_obj.get(k) != Some(v) {
            tx.prepare_cached(
                "INSERT INTO fields(file_id, key, version_id) VALUES (?1, ?2, ?3)
                 ON CONFLICT(file_id, key) DO UPDATE SET version_id = excluded.version_id",
            )?
            .execute(params![file_id, k, version_id])?;
        }
    }
    for k in old_obj.keys().filter(|k| !new_obj.contains_key(*k)) {
        tx.prepare_cached("DELETE FROM fields WHERE file_id = ?1 AND key = ?2")?
            .execute(params![file_id, k])?;
    }
    Ok(())
}

/// A directory's entries changed: its mtime and ctime become `time_ns` (POSIX).
fn touch_dir(tx: &Connection, dir: u64, time_ns: i64) -> Result<()> {
    tx.prepare_cached("UPDATE nodes SET mtime_ns = ?1, ctime_ns = ?1 WHERE ino = ?2")?
        .execute(params![time_ns, dir as i64])?;
    Ok(())
}

fn argv_json(c: &Caller) -> String {
    serde_json::to_string(&c.argv).unwrap_or_else(|_| "[]".into())
}

/// A caller as rows refer to it: its `processes` row, plus the per-request pid and the
/// resolved writer name kept on each row for plain queries.
pub(crate) struct Proc {
    id: i64,
    pid: u32,
    writer: String,
}

/// The facts that identify a `processes` row (a caller without its request pid).
fn process_key(c: &Caller) -> Caller {
    Caller {
        pid: 0,
        ..c.clone()
    }
}

/// Inserts the next version of lineage `file_id` (its number: the highest so far + 1).
#[allow(clippy::too_many_arguments)]
fn insert_version(
    tx: &Connection,
    file_id: i64,
    path: &str,
    op: &str,
    content: ContentRef,
    hash: &blake3::Hash,
    c: &Proc,
    time_ns: i64,
) -> Result<VersionInfo> {
    let number: i64 = tx
        .prepare_cached("SELECT COALESCE(MAX(version), 0) + 1 FROM versions WHERE file_id = ?1")?
        .query_row([file_id], |r| r.get(0))?;
    insert_version_numbered(tx, file_id, number, path, op, content, hash, c, time_ns)
}

/// Inserts version `number` of lineage `file_id`.
#[allow(clippy::too_many_arguments)]
fn insert_version_numbered(
    tx: &Connection,
    file_id: i64,
    number: i64,
    path: &str,
    op: &str,
    content: ContentRef,
    hash: &blake3::Hash,
    c: &Proc,
    time_ns: i64,
) -> Result<VersionInfo> {
    tx.prepare_cached(
        "INSERT INTO versions(file_id, version, path, op, size, blake3, stream, writer, process,
            pid, time_ns)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        file_id,
        number,
        path,
        op,
        content.len as i64,
        hash.to_hex().as_str(),
        content.stream,
        c.writer,
        c.id,
        c.pid,
        time_ns
    ])?;
    let id = tx.last_insert_rowid();
    Ok(VersionInfo {
        id,
        number,
        content,
        time_ns,
        writer: c.writer.as_str().into(),
    })
}

/// An event row. `extra` = (new_path, file_id, version_id, errno, reason, content+hash).
#[allow(clippy::too_many_arguments)]
fn insert_event(
    tx: &Connection,
    op: &str,
    path: &str,
    new_path: Option<&str>,
    file_id: Option<i64>,
    version_id: Option<i64>,
    errno: Option<i32>,
    reason: Option<&str>,
    content: Option<(ContentRef, &blake3::Hash)>,
    c: &Proc,
    time_ns: i64,
) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO events(time_ns, op, path, new_path, file_id, version_id, errno, reason, stream,
            size, blake3, writer, process, pid)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )?
    .execute(params![
        time_ns,
        op,
        path,
        new_path,
        file_id,
        version_id,
        errno,
        reason,
        content.map(|(r, _)| r.stream),
        content.map(|(r, _)| r.len as i64),
        content.map(|(_, h)| h.to_hex().to_string()),
        c.writer,
        c.id,
        c.pid
    ])?;
    Ok(())
}

fn node_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<NodeRecord> {
    let mut n = node_columns(r)?;
    // Commits do not rewrite the node row: mtime and ctime follow the current version
    // unless mtime was set explicitly since.
    if let Some(h) = &n.head {
        if !n.mtime_pinned {
            n.attrs.mtime_ns = n.attrs.mtime_ns.max(h.time_ns);
        }
        n.attrs.ctime_ns = n.attrs.ctime_ns.max(h.time_ns);
    }
    Ok(n)
}

fn node_columns(r: &rusqlite::Row<'_>) -> rusqlite::Result<NodeRecord> {
    let kind: String = r.get(3)?;
    let head_id: Option<i64> = r.get(11)?;
    Ok(NodeRecord {
        ino: r.get::<_, i64>(0)? as u64,
        parent: r.get::<_, Option<i64>>(1)?.unwrap_or(0) as u64,
        name: r.get(2)?,
        kind: if kind == "dir" { Kind::Dir } else { Kind::File },
        attrs: Attrs {
            mode: r.get(4)?,
            uid: r.get(5)?,
            gid: r.get(6)?,
            atime_ns: r.get(7)?,
            mtime_ns: r.get(8)?,
            ctime_ns: r.get(9)?,
        },
        file_id: r.get(10)?,
        mtime_pinned: r.get::<_, i64>(16)? != 0,
        head: match head_id {
            Some(id) => Some(VersionInfo {
                id,
                number: r.get(12)?,
                content: ContentRef {
                    stream: r.get(13)?,
                    len: r.get::<_, i64>(14)? as u64,
                },
                time_ns: r.get(15)?,
                writer: r.get::<_, String>(17)?.into(),
            }),
            None => None,
        },
    })
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
                    tx.commit()?;
                    Ok(c)
                }
                Applied::Unchanged(c) => Ok(c),
                Applied::Stale(e) => {
                    tx.commit()?;
                    Err(e)
                }
                Applied::Node(_) | Applied::Unlinked => {
                    Err(Error::new(libc::EIO, "store: a commit did something else"))
                }
            }
        })();
        if durable {
            conn.pragma_update(None, "synchronous", "NORMAL")?;
        }
        result
    }
}

/// The rows of an unlink (`file_id` set) or rmdir, inside the caller's transaction: the
/// node leaves its parent, the lineage is marked deleted (every version stays) and an
/// event records it.
fn unlink_in(
    tx: &Connection,
    ino: u64,
    file_id: Option<i64>,
    path: &str,
    caller: &Proc,
    time_ns: i64,
) -> Result<()> {
    tx.prepare_cached(
        "UPDATE nodes SET mtime_ns = ?1, ctime_ns = ?1
         WHERE ino = (SELECT parent FROM nodes WHERE ino = ?2)",
    )?
    .execute(params![time_ns, ino as i64])?;
    tx.prepare_cached("UPDATE nodes SET parent = NULL, unlinked_ns = ?1 WHERE ino = ?2")?
        .execute(params![time_ns, ino as i64])?;
    let mut version_id = None;
    if let Some(fid) = file_id {
        tx.prepare_cached("UPDATE files SET deleted_ns = ?1 WHERE id = ?2")?
            .execute(params![time_ns, fid])?;
        version_id = head_of(tx, fid)?.map(|v| v.id);
    }
    let op = if file_id.is_some() { "unlink" } else { "rmdir" };
    insert_event(
        tx, op, path, None, file_id, version_id, None, None, None, caller, time_ns,
    )?;
    Ok(())
}

/// The rows of a new file (with its `create` version) or directory (with its `mkdir`
/// event), inside the caller's transaction.
#[allow(clippy::too_many_arguments)]
fn create_in(
    tx: &Connection,
    parent: u64,
    name: &[u8],
    path: &str,
    kind: Kind,
    attrs: Attrs,
    caller: &Proc,
) -> Result<NodeRecord> {
    let mut file_id = None;
    let mut head = None;
    if kind == Kind::File {
        tx.prepare_cached("INSERT INTO files(path) VALUES (?1)")?
            .execute([path])?;
        let fid = tx.last_insert_rowid();
        let v = insert_version(
            tx,
            fid,
            path,
            "create",
            ContentRef {
                stream: EMPTY_STREAM,
                len: 0,
            },
            &blake3::hash(b""),
            caller,
            attrs.mtime_ns,
        )?;
        file_id = Some(fid);
        head = Some(v);
    }
    tx.prepare_cached(
        "INSERT INTO nodes(parent, name, kind, mode, uid, gid, atime_ns, mtime_ns, ctime_ns, file_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        parent as i64,
        name,
        if kind == Kind::Dir { "dir" } else { "file" },
        attrs.mode,
        attrs.uid,
        attrs.gid,
        attrs.atime_ns,
        attrs.mtime_ns,
        attrs.ctime_ns,
        file_id
    ])?;
    let ino = tx.last_insert_rowid() as u64;
    touch_dir(tx, parent, attrs.ctime_ns)?;
    if kind == Kind::Dir {
        insert_event(
            tx,
            "mkdir",
            path,
            None,
            None,
            None,
            None,
            None,
            None,
            caller,
            attrs.ctime_ns,
        )?;
    }
    Ok(NodeRecord {
        ino,
        parent,
        name: name.to_vec(),
        kind,
        attrs,
        file_id,
        head,
        mtime_pinned: false,
    })
}

/// The work of a commit (SPEC §4), inside the caller's transaction: the new content, its
/// version and per-key provenance, or the lost-update refusal (`ESTALE`), or nothing when
/// the bytes are those of the current version. `req.caller` and `req.durable` are not
/// used (the caller resolved `caller` and owns the transaction).
fn commit_in(tx: &Connection, req: CommitRequest<'_>, caller: &Proc) -> Result<Applied> {
    let CommitRequest {
        ino,
        path,
        op,
        expect_head,
        build,
        source,
        prefix_hasher,
        caller: _,
        time_ns,
        set_mtime,
        durable: _,
    } = req;
    let file_id: i64 = tx
        .prepare_cached("SELECT file_id FROM nodes WHERE ino = ?1")?
        .query_row([ino as i64], |r| r.get::<_, Option<i64>>(0))
        .optional()?
        .flatten()
        .ok_or_else(|| {
            Error::new(
                libc::ESTALE,
                format!("{path}: the file was replaced by a rename while open"),
            )
        })?;
    let head = head_of(tx, file_id)?
        .ok_or_else(|| Error::new(libc::EIO, format!("store: {path} has no version")))?;
    let stale = expect_head.is_some_and(|e| e != head.id);
    // Normalise both builds to: base, base_limit, size, dirty ranges, source shift.
    let (base, base_limit, size, dirty, shift): (ContentRef, u64, u64, Vec<(u64, u64)>, u64) =
        match build {
            Build::Overlay {
                base,
                base_limit,
                size,
                dirty,
            } => (base, base_limit.min(base.len), size, dirty.to_vec(), 0),
            Build::Append { len } => (
                head.content,
                head.content.len,
                head.content.len + len,
                vec![(head.content.len, head.content.len + len)],
                head.content.len,
            ),
            Build::Truncate { size } => (
                head.content,
                head.content.len.min(size),
                size,
                Vec::new(),
                0,
            ),
        };
    // The content built on must still be there: `gc` may have collected the version a
    // restore names between its lookup and this commit, and a replay on a database that
    // was changed before the log was applied would find other rows (never zeros instead).
    // The current version's content is never collected, so appends skip the query.
    if base_limit > 0 && base.stream != EMPTY_STREAM && base != head.content {
        let present: bool = tx
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM streams WHERE id = ?1)")?
            .query_row([base.stream], |r| r.get(0))?;
        if !present {
            return Err(Error::new(
                libc::ENOENT,
                format!("{path}: the content this commit builds on was collected (gc)"),
            ));
        }
    }
    let extends = base.stream != EMPTY_STREAM
        && base_limit == base.len
        && base.len == stream_end(tx, base.stream)?
        && dirty.iter().all(|&(s, _)| s >= base.len)
        && size >= base.len;
    // Source of byte `off` of the new content: dirty → source; base → stored; else 0.
    let mut fill = |off: u64, buf: &mut [u8]| -> Result<()> {
        let mut pos = 0usize;
        while pos < buf.len() {
            let at = off + pos as u64;
            let remaining = buf.len() - pos;
            if let Some(&(_, e)) = dirty.iter().find(|&&(s, e)| s <= at && at < e) {
                let n = ((e - at) as usize).min(remaining);
                source(at - shift, &mut buf[pos..pos + n])?;
                pos += n;
                continue;
            }
            let next_dirty = dirty
                .iter()
                .map(|&(s, _)| s)
                .filter(|&s| s > at)
                .min()
                .unwrap_or(u64::MAX);
            let limit = ((next_dirty - at).min(remaining as u64)) as usize;
            if at < base_limit {
                let n = limit.min((base_limit - at) as usize);
                let got = read_at(tx, base, at, &mut buf[pos..pos + n])?;
                buf[pos + got..pos + n].fill(0);
                pos += n;
            } else {
                buf[pos..pos + limit].fill(0);
                pos += limit;
            }
        }
        Ok(())
    };
    let mut scratch = Vec::with_capacity(CHUNK);
    let (content, hasher) = if extends {
        let mut hasher = match prefix_hasher {
            Some((vid, h)) if vid == head.id && base == head.content => h,
            _ => hash_prefix(tx, base, base.len)?,
        };
        write_range(
            tx,
            base.stream,
            base.len,
            size,
            &mut hasher,
            &mut fill,
            &mut scratch,
        )?;
        (
            ContentRef {
                stream: base.stream,
                len: size,
            },
            hasher,
        )
    } else if dirty.is_empty() && size <= base_limit {
        // A pure truncation: a shorter view of the same stream stores nothing.
        (
            ContentRef {
                stream: if size == 0 { EMPTY_STREAM } else { base.stream },
                len: size,
            },
            hash_prefix(tx, base, size)?,
        )
    } else {
        let stream = new_stream(tx)?;
        let mut hasher = blake3::Hasher::new();
        write_range(tx, stream, 0, size, &mut hasher, &mut fill, &mut scratch)?;
        (ContentRef { stream, len: size }, hasher)
    };
    let hash = hasher.finalize();
    if !stale && content.len == head.content.len {
        // The same bytes again: nothing changed, so no version (SPEC §4).
        let same: bool = tx
            .prepare_cached("SELECT blake3 = ?2 FROM versions WHERE id = ?1")?
            .query_row(params![head.id, hash.to_hex().as_str()], |r| r.get(0))?;
        if same {
            return Ok(Applied::Unchanged(Committed {
                file_id,
                version: head,
                hasher,
            }));
        }
    }
    if stale {
        let reason = format!(
            "{path}: lost update: written from version {}, but the current version is {} (on_conflict: refuse)",
            expect_head.unwrap_or_default(),
            head.number
        );
        let base_number: Option<i64> = tx
            .query_row(
                "SELECT version FROM versions WHERE id = ?1",
                [expect_head.unwrap_or_default()],
                |r| r.get(0),
            )
            .optional()?;
        let reason = match base_number {
            Some(n) => reason.replace(
                &format!("from version {}", expect_head.unwrap_or_default()),
                &format!("from version {n}"),
            ),
            None => reason,
        };
        insert_event(
            tx,
            "rejected",
            path,
            None,
            Some(file_id),
            None,
            Some(libc::ESTALE),
            Some(&reason),
            Some((content, &hash)),
            caller,
            time_ns,
        )?;
        return Ok(Applied::Stale(Error::new(libc::ESTALE, reason)));
    }
    // The head is the highest version (`head_of`), so the new one is the next number.
    let version = insert_version_numbered(
        tx,
        file_id,
        head.number + 1,
        path,
        op,
        content,
        &hash,
        caller,
        time_ns,
    )?;
    update_fields(tx, file_id, path, Some(head.content), content, version.id)?;
    if content.len * 2 < head.content.len {
        // Compaction or a wipe: MANIFEST names the version dropped (SPEC §7).
        insert_event(
            tx,
            "shrink",
            path,
            None,
            Some(file_id),
            Some(head.id),
            None,
            Some(&format!(
                "{path} shrank from {} to {} bytes; version {} is .history/{path}/{}",
                head.content.len, content.len, head.number, head.number
            )),
            None,
            caller,
            time_ns,
        )?;
    }
    // The node row is not rewritten: its mtime and ctime follow the current version
    // (see `node_from_row`), except for an explicit mtime, which a write unpins.
    if set_mtime {
        tx.prepare_cached(
            "UPDATE nodes SET mtime_ns = ?1, mtime_pinned = 0 WHERE ino = ?2 AND mtime_pinned = 1",
        )?
        .execute(params![time_ns, ino as i64])?;
    }
    Ok(Applied::Committed(Committed {
        file_id,
        version,
        hasher,
    }))
}

impl Drop for Sqlite {
    fn drop(&mut self) {
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

impl Store for Sqlite {
    fn load(&self) -> Result<Vec<NodeRecord>> {
        let conn = self.writer.lock();
        let mut stmt = conn.prepare(
            "WITH RECURSIVE tree(ino, depth) AS (
                SELECT 1, 0
                UNION ALL
                SELECT n.ino, t.depth + 1 FROM nodes n JOIN tree t ON n.parent = t.ino
             )
             SELECT n.ino, n.parent, n.name, n.kind, n.mode, n.uid, n.gid, n.atime_ns, n.mtime_ns,
                    n.ctime_ns, n.file_id, v.id, v.version, v.stream, v.size, v.time_ns,
                    n.mtime_pinned, v.writer
             FROM tree t JOIN nodes n ON n.ino = t.ino
             LEFT JOIN versions v ON v.file_id = n.file_id
                 AND v.version = (SELECT MAX(version) FROM versions WHERE file_id = n.file_id)
             ORDER BY t.depth, n.ino",
        )?;
        let rows = stmt.query_map([], node_from_row)?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r?);
        }
        Ok(out)
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
            _ => Err(Error::new(libc::EIO, "store: a create made no node")),
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
            .map_err(|e| Error::new(e.raw_os_error().unwrap_or(libc::EIO), e.to_string()))?;
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
        };
        match self.apply_logged(op, &payload, req.prefix_hasher)? {
            Applied::Committed(c) | Applied::Unchanged(c) => Ok(c),
            Applied::Stale(e) => Err(e),
            Applied::Node(_) | Applied::Unlinked => {
                Err(Error::new(libc::EIO, "store: a commit did something else"))
            }
        }
    }

    fn read(&self, content: ContentRef, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let conn = self.reader()?;
        read_at(&conn, content, offset, buf)
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
        tx.prepare_cached(
            "UPDATE nodes SET mode = ?1, uid = ?2, gid = ?3, atime_ns = ?4, mtime_ns = ?5, ctime_ns = ?6,
                 mtime_pinned = ?7
             WHERE ino = ?8",
        )?
        .execute(params![
            a.mode,
            a.uid,
            a.gid,
            a.atime_ns,
            a.mtime_ns,
            a.ctime_ns,
            mtime_pinned,
            ino as i64
        ])?;
        insert_event(
            &tx, "setattr", path, None, None, None, None, None, None, caller, a.ctime_ns,
        )?;
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

    fn redact(
        &self,
        file_id: i64,
        number: i64,
        path: &str,
        why: &str,
        caller: &Caller,
    ) -> Result<RedactReport> {
        self.redact_version(file_id, number, path, why, caller)
    }

    fn gc(&self, req: &GcRequest, protected: &[(i64, u64)], caller: &Caller) -> Result<GcReport> {
        let mut conn = self.write_lock()?;
        gc(&mut conn, req, protected, caller)
    }

    fn reject(
        &self,
        path: &str,
        errno: i32,
        reason: &str,
        caller: &Caller,
        content: Option<&[u8]>,
    ) -> Result<()> {
        let mut conn = self.write_lock()?;
        let caller = &self.process(&conn, caller)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // The refused content is kept (SPEC §6: nothing is lost, not even a refused write).
        let stored = match content {
            Some(bytes) => {
                let stream = new_stream(&tx)?;
                let mut hasher = blake3::Hasher::new();
                let mut fill = |off: u64, buf: &mut [u8]| -> Result<()> {
                    buf.copy_from_slice(&bytes[off as usize..off as usize + buf.len()]);
                    Ok(())
                };
                let mut scratch = Vec::new();
                write_range(
                    &tx,
                    stream,
                    0,
                    bytes.len() as u64,
                    &mut hasher,
                    &mut fill,
                    &mut scratch,
                )?;
                Some((
                    ContentRef {
                        stream,
                        len: bytes.len() as u64,
                    },
                    hasher.finalize(),
                ))
            }
            None => None,
        };
        insert_event(
            &tx,
            "rejected",
            path,
            None,
            None,
            None,
            Some(errno),
            Some(reason),
            stored.as_ref().map(|(c, h)| (*c, h)),
            caller,
            now_ns(),
        )?;
        tx.commit()?;
        Ok(())
    }

    fn record_rules(&self, text: &str, caller: &Caller) -> Result<()> {
        let conn = self.write_lock()?;
        let caller = &self.process(&conn, caller)?;
        let hash = blake3::hash(text.as_bytes()).to_hex().to_string();
        let last: Option<String> = conn
            .query_row(
                "SELECT blake3 FROM rules ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()?;
        if last.as_deref() != Some(hash.as_str()) {
            conn.execute(
                "INSERT INTO rules(version, text, blake3, writer, process, time_ns)
                 VALUES ((SELECT COUNT(*) + 1 FROM rules), ?1, ?2, ?3, ?4, ?5)",
                params![text, hash, caller.writer, caller.id, now_ns()],
            )?;
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        drop(self.write_lock()?);
        Ok(())
    }

    fn sync_to_disk(&self) -> Result<()> {
        let conn = self.write_lock()?;
        // Committed frames are in the WAL (`synchronous = NORMAL` does not sync it).
        let mut wal = self.path.as_os_str().to_owned();
        wal.push("-wal");
        match std::fs::File::open(&wal) {
            Ok(f) => f
                .sync_data()
                .map_err(|e| Error::new(e.raw_os_error().unwrap_or(libc::EIO), e.to_string()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::new(libc::EIO, format!("{}: {e}", wal.display()))),
        }
        drop(conn);
        Ok(())
    }

    fn rename(&self, req: RenameRequest<'_>) -> Result<Option<VersionInfo>> {
        let mut conn = self.write_lock()?;
        let caller = &self.process(&conn, req.caller)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let t = req.time_ns;
        tx.prepare_cached(
            "UPDATE nodes SET mtime_ns = ?1, ctime_ns = ?1
             WHERE ino = (SELECT parent FROM nodes WHERE ino = ?2)",
        )?
        .execute(params![t, req.ino as i64])?;
        touch_dir(&tx, req.new_parent, t)?;
        if let Some((old_ino, old_fid)) = req.replaced {
            tx.prepare_cached(
                "UPDATE nodes SET parent = NULL, unlinked_ns = ?1, file_id = NULL WHERE ino = ?2",
            )?
            .execute(params![t, old_ino as i64])?;
            if old_fid.is_none() {
                insert_event(
                    &tx,
                    "rmdir",
                    req.new_path,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    caller,
                    t,
                )?;
            }
        }
        // The lineage the moving file lands in: the replaced file's, or its own.
        let target_fid = match (req.kind, req.replaced) {
            (Kind::File, Some((_, Some(fid)))) => Some(fid),
            (Kind::File, _) => req.file_id,
            (Kind::Dir, _) => None,
        };
        tx.prepare_cached(
            "UPDATE nodes SET parent = ?1, name = ?2, ctime_ns = ?3, file_id = COALESCE(?4, file_id)
             WHERE ino = ?5",
        )?
        .execute(params![
            req.new_parent as i64,
            req.new_name,
            t,
            target_fid,
            req.ino as i64
        ])?;
        if let Some(fid) = target_fid {
            tx.prepare_cached("UPDATE files SET path = ?1 WHERE id = ?2")?
                .execute(params![req.new_path, fid])?;
        }
        for (fid, p) in &req.moved_files {
            tx.prepare_cached("UPDATE files SET path = ?1 WHERE id = ?2")?
                .execute(params![p, fid])?;
        }
        let mut version = None;
        let content = match req.file_id {
            Some(src) => head_of(&tx, src)?.map(|v| v.content),
            None => None,
        };
        if let (Some(fid), Some(content)) = (target_fid, content) {
            let before = head_of(&tx, fid)?.map(|v| v.content);
            if req.file_id != Some(fid) {
                // The source lineage ends here; its history stays under its old path.
                if let Some(src) = req.file_id {
                    tx.prepare_cached(
                        "UPDATE files SET deleted_ns = ?1, merged_into = ?3 WHERE id = ?2",
                    )?
                    .execute(params![t, src, fid])?;
                }
            }
            // The content renamed is the source's current version, whose hash is known.
            let hash: Option<String> = match req.file_id {
                Some(src) => tx
                    .prepare_cached(
                        "SELECT blake3 FROM versions WHERE file_id = ?1 ORDER BY version DESC LIMIT 1",
                    )?
                    .query_row([src], |r| r.get(0))
                    .optional()?,
                None => None,
            };
            let hash = match hash {
                Some(h) => blake3::Hash::from_hex(&h).map_err(Error::store)?,
                None => hash_prefix(&tx, content, content.len)?.finalize(),
            };
            let v = insert_version(&tx, fid, req.new_path, "rename", content, &hash, caller, t)?;
            update_fields(&tx, fid, req.new_path, before, content, v.id)?;
            version = Some(v);
        }
        insert_event(
            &tx,
            "rename",
            req.old_path,
            Some(req.new_path),
            target_fid,
            version.as_ref().map(|v| v.id),
            None,
            None,
            None,
            caller,
            t,
        )?;
        tx.commit()?;
        Ok(version)
    }

    fn version_meta(&self, id: i64) -> Result<VersionMeta> {
        let conn = self.reader()?;
        Ok(conn
            .prepare_cached(
                "SELECT v.writer, v.blake3, p.step, v.time_ns FROM versions v
                 JOIN processes p ON p.id = v.process WHERE v.id = ?1",
            )?
            .query_row([id], |r| {
                Ok(VersionMeta {
                    writer: r.get(0)?,
                    blake3: r.get(1)?,
                    step: r.get(2)?,
                    time_ns: r.get(3)?,
                })
            })?)
    }

    fn lineages(&self, prefix: &str) -> Result<Vec<Lineage>> {
        let conn = self.reader()?;
        // Paths below `prefix`: from "prefix/" up to (not including) "prefix0" ('0' follows '/').
        let (lo, hi) = if prefix.is_empty() {
            (String::new(), "\u{10FFFF}".to_string())
        } else {
            (format!("{prefix}/"), format!("{prefix}0"))
        };
        let mut stmt = conn.prepare_cached(
            "SELECT id, path, deleted_ns, merged_into IS NOT NULL FROM files
             WHERE path = ?1 OR (path >= ?2 AND path < ?3) ORDER BY path, id",
        )?;
        let rows = stmt.query_map(params![prefix, lo, hi], |r| {
            Ok(Lineage {
                file_id: r.get(0)?,
                path: r.get(1)?,
                deleted_ns: r.get(2)?,
                merged: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    fn versions(&self, file_id: i64) -> Result<Vec<VersionInfo>> {
        let conn = self.reader()?;
        let mut stmt = conn.prepare_cached(
            "SELECT id, version, stream, size, time_ns, writer FROM versions WHERE file_id = ?1
             ORDER BY version",
        )?;
        let rows = stmt.query_map([file_id], version_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    fn version(&self, id: i64) -> Result<VersionInfo> {
        let conn = self.reader()?;
        Ok(conn
            .prepare_cached(
                "SELECT id, version, stream, size, time_ns, writer FROM versions WHERE id = ?1",
            )?
            .query_row([id], version_from_row)?)
    }

    fn deletion(&self, file_id: i64) -> Result<Option<(String, i64)>> {
        let conn = self.reader()?;
        Ok(conn
            .prepare_cached(
                "SELECT writer, time_ns FROM events WHERE file_id = ?1 AND op = 'unlink'
                 ORDER BY id DESC LIMIT 1",
            )?
            .query_row([file_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    fn fields(&self, file_id: i64) -> Result<Vec<FieldInfo>> {
        let conn = self.reader()?;
        let mut stmt = conn.prepare_cached(
            "SELECT f.key, v.version, v.writer, p.step, v.time_ns FROM fields f
             JOIN versions v ON v.id = f.version_id JOIN processes p ON p.id = v.process
             WHERE f.file_id = ?1",
        )?;
        let rows = stmt.query_map([file_id], |r| {
            Ok(FieldInfo {
                key: r.get(0)?,
                version: r.get(1)?,
                writer: r.get(2)?,
                step: r.get(3)?,
                time_ns: r.get(4)?,
            })
        })?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r?);
        }
        Ok(out)
    }

    fn restorable(&self, limit: usize) -> Result<Vec<RestorableInfo>> {
        let conn = self.reader()?;
        let mut stmt = conn.prepare_cached(
            "SELECT e.op, e.path, e.writer, e.time_ns, v.version, v.size,
                    (SELECT COUNT(*) FROM files f WHERE f.path = e.path AND f.deleted_ns IS NULL)
             FROM events e JOIN versions v ON v.id = e.version_id
             WHERE e.id IN (SELECT id FROM events_restorable ORDER BY id DESC LIMIT ?1)
               AND NOT (e.op = 'unlink' AND v.size = 0)
             ORDER BY e.id DESC",
        )?;
        let rows = stmt.query_map([limit as i64], |r| {
            Ok(RestorableInfo {
                deleted: r.get::<_, String>(0)? == "unlink",
                path: r.get(1)?,
                writer: r.get(2)?,
                time_ns: r.get(3)?,
                version: r.get(4)?,
                size: r.get::<_, i64>(5)? as u64,
                live: r.get::<_, i64>(6)? > 0,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    fn erasures(&self, limit: usize) -> Result<(Vec<RefusalInfo>, u64)> {
        events_of(&*self.reader()?, "op IN ('gc', 'redact')", limit)
    }

    fn refusals(&self, limit: usize) -> Result<(Vec<RefusalInfo>, u64)> {
        events_of(&*self.reader()?, "op = 'rejected'", limit)
    }
}

/// The latest `limit` events matching `filter` (an SQL condition on `events`; constant
/// text, never user input): reason, writer and time, newest first, and how many match.
fn events_of(conn: &Connection, filter: &str, limit: usize) -> Result<(Vec<RefusalInfo>, u64)> {
    let count: i64 = conn
        .prepare_cached(&format!("SELECT COUNT(*) FROM events WHERE {filter}"))?
        .query_row([], |r| r.get(0))?;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT reason, writer, time_ns FROM events WHERE {filter} ORDER BY id DESC LIMIT ?1"
    ))?;
    let rows = stmt.query_map([limit as i64], |r| {
        Ok(RefusalInfo {
            reason: r.get::<_, Option<String>>(0)?.unwrap_or_default(),
            writer: r.get(1)?,
            time_ns: r.get(2)?,
        })
    })?;
    Ok((rows.collect::<rusqlite::Result<Vec<_>>>()?, count as u64))
}

/// blake3 state after the first `len` bytes of `content`.
fn hash_prefix(conn: &Connection, content: ContentRef, len: u64) -> Result<blake3::Hasher> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    let view = ContentRef {
        stream: content.stream,
        len: len.min(content.len),
    };
    while at < view.len {
        let n = read_at(conn, view, at, &mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hasher)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Sqlite) {
        let dir = tempfile::tempdir().unwrap();
        let (s, fresh) = Sqlite::open(&dir.path().join("t.db"), (0, 0)).unwrap();
        assert!(fresh);
        (dir, s)
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
        for p in [&text, &other, &dir.path().to_path_buf()] {
            let e = Sqlite::open(p, (0, 0)).err().unwrap();
            assert_eq!(e.errno, libc::EINVAL);
            assert_eq!(
                e.reason,
                format!("{} is not a scratchfs database", p.display())
            );
            assert_eq!(open_read_only(p).err().unwrap().reason, e.reason);
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
        prefix_hasher: Option<(i64, blake3::Hasher)>,
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
        })
        .unwrap()
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
            assert_eq!(c.hasher.finalize(), blake3::hash(&expect));
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
            })
            .unwrap();
        let mut expect = data.clone();
        expect[100_000..100_003].copy_from_slice(patch);
        assert_eq!(read_all(&s, c.version.content), expect);
        assert_eq!(c.hasher.finalize(), blake3::hash(&expect));
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
            })
            .err()
            .unwrap();
        assert_eq!(err.errno, libc::ESTALE);
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
            })
            .unwrap();
        assert_eq!(t.version.content.stream, c.version.content.stream);
        assert_eq!(read_all(&s, t.version.content), vec![7u8; 10]);
        assert_eq!(t.version.number, 4);
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
        assert_eq!(prev.unwrap().1.finalize(), blake3::hash(&expect));
        drop(s);
        let size = std::fs::metadata(d.path().join("t.db")).unwrap().len()
            + std::fs::metadata(d.path().join("t.db-wal"))
                .map(|m| m.len())
                .unwrap_or(0);
        assert!(size < 10 << 20, "database is {size} bytes");
    }
}
