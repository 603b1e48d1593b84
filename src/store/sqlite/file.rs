//! The database file: telling ours from a foreign file before SQLite touches it, opening
//! connections, and keeping the files private (mode 0600).

use super::*;

/// A read-write connection to the database at `path`, in WAL mode; a file the OS does not
/// let SQLite open is refused as [`opening`] says.
pub(super) fn open_conn(path: &Path) -> Result<Connection> {
    let mut conn = Connection::open(path).map_err(opening(path, true))?;
    // SQLite opens a file it may not write read-only, silently: say why now rather than
    // at the first write.
    if conn
        .is_readonly(rusqlite::MAIN_DB)
        .map_err(opening(path, true))?
    {
        return Err(open_refusal(path, true).unwrap_or_else(|| {
            StoreError::new(
                ErrorKind::ReadOnly,
                format!(
                    "cannot open database {}: SQLite opened it read-only",
                    path.display()
                ),
            )
        }));
    }
    *BUSY_DB.lock() = Some(path.to_path_buf());
    conn.busy_handler(Some(busy))?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(opening(path, true))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "cache_size", -4096)?;
    conn.set_prepared_statement_cache_capacity(128);
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(conn)
}

/// How long a statement waits for a lock another process holds on the database before
/// it fails with `SQLITE_BUSY`, which becomes `EBUSY` ([`crate::error::sqlite_errno`]).
pub const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The database whose locks [`busy`] describes (a process opens one read-write).
static BUSY_DB: crate::sync::Mutex<Option<PathBuf>> = crate::sync::Mutex::new(None);

/// SQLite's busy handler for read-write connections (sqlite3_busy_handler): waits with a
/// growing sleep (1 ms to 50 ms) up to [`BUSY_WAIT`]; when it gives up it logs who holds
/// locks on the database, from /proc/locks, so the daemon's log says why a write failed.
fn busy(count: i32) -> bool {
    thread_local! {
        static START: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
    }
    let now = std::time::Instant::now();
    if count == 0 {
        START.set(Some(now));
    }
    let waited = START.get().map_or(std::time::Duration::ZERO, |s| now - s);
    if waited >= BUSY_WAIT {
        let db = BUSY_DB.lock().clone().unwrap_or_default();
        log::warn!(
            "database {}: locked by another process for {} s, giving up (EBUSY); lock holders: {}",
            db.display(),
            waited.as_secs(),
            lock_holders(&db)
        );
        return false;
    }
    std::thread::sleep(
        std::time::Duration::from_millis(1 << count.clamp(0, 5) as u64)
            .min(std::time::Duration::from_millis(50)),
    );
    true
}

/// Who holds POSIX locks on `db`, its `-wal` or its `-shm` (other than this process), from
/// /proc/locks: `pid N (comm) WRITE|READ on FILE`, or `unknown` if none is listed.
pub fn lock_holders(db: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let me = std::process::id().to_string();
    let mut files = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        let p = PathBuf::from(format!("{}{suffix}", db.display()));
        if let Ok(m) = std::fs::metadata(&p) {
            files.push((m.ino(), p));
        }
    }
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    for l in locks.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        // "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        if f.len() < 6 || f[1] != "POSIX" || f[4] == me {
            continue;
        }
        let ino = f[5].rsplit(':').next().and_then(|i| i.parse::<u64>().ok());
        if let Some((_, p)) = files.iter().find(|(i, _)| Some(*i) == ino) {
            let comm = std::fs::read_to_string(format!("/proc/{}/comm", f[4])).unwrap_or_default();
            let line = format!("pid {} ({}) {} on {}", f[4], comm.trim(), f[3], p.display());
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    if out.is_empty() {
        "unknown".into()
    } else {
        out.join(", ")
    }
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
pub(super) fn not_ours(path: &Path) -> StoreError {
    StoreError::new(
        ErrorKind::Invalid,
        format!("{} is not a scratchfs database", path.display()),
    )
}

/// `cannot open database PATH: CAUSE`, with the errno of `e` (`EIO` if it has none):
/// how every failure to open the database file is reported, by every command.
pub fn cannot_open(path: &Path, e: &std::io::Error) -> StoreError {
    StoreError::new(
        ErrorKind::of_io(e),
        format!("cannot open database {}: {e}", path.display()),
    )
}

/// Why the OS refuses `path` as a SQLite database in WAL mode, found by doing what SQLite
/// does with std::fs (SQLite itself only says "unable to open database file" or "attempt
/// to write a readonly database"): the file must exist and not be a directory, open for
/// reading (and writing when `write`), and its `-shm` and `-wal` must open for reading
/// and writing (even a reader writes the shared-memory index), or, missing, be creatable
/// in its directory. `None` when nothing is refused (then SQLite's own message stands).
/// SQLite can sometimes do with less (a reader through a read-only `-shm`), so this is
/// asked only once SQLite has failed.
pub(super) fn open_refusal(path: &Path, write: bool) -> Option<StoreError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return Some(cannot_open(path, &e)),
    };
    if meta.is_dir() {
        return Some(cannot_open(
            path,
            &std::io::Error::from_raw_os_error(libc::EISDIR),
        ));
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .open(path)
    {
        return Some(cannot_open(path, &e));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    for side in [shm_path(path), wal_path(path)] {
        let name = side.file_name().unwrap_or_default().to_string_lossy();
        let refused = if side.exists() {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&side)
                .err()
                .map(|e| (format!("{}", side.display()), e))
        } else {
            writable_dir(&dir)
                .err()
                .map(|e| (format!("cannot create {name} in {}", dir.display()), e))
        };
        if let Some((what, e)) = refused {
            return Some(StoreError::new(
                ErrorKind::of_io(&e),
                format!("cannot open database {}: {what}: {e}", path.display()),
            ));
        }
    }
    None
}

/// Whether this process may create files in `dir` (faccessat(2) `W_OK | X_OK` with the
/// effective ids: `EACCES`, `EROFS`, ...).
fn writable_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    let rc = unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::W_OK | libc::X_OK,
            libc::AT_EACCESS,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Maps a SQLite error met while opening the database at `path` (for writing when
/// `write`): when SQLite could not open a file (`SQLITE_CANTOPEN`), or found it read-only
/// (`SQLITE_READONLY`, `SQLITE_PERM`, `SQLITE_IOERR` of the shared-memory file), the OS's
/// reason from [`open_refusal`], else `cannot open database PATH: <SQLite's message>`;
/// other errors as the store reports them.
pub(super) fn opening(path: &Path, write: bool) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |e| match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(
                f.code,
                rusqlite::ErrorCode::CannotOpen
                    | rusqlite::ErrorCode::ReadOnly
                    | rusqlite::ErrorCode::PermissionDenied
                    | rusqlite::ErrorCode::SystemIoFailure
            ) =>
        {
            open_refusal(path, write).unwrap_or_else(|| {
                StoreError::new(
                    ErrorKind::Failed,
                    format!("cannot open database {}: {e}", path.display()),
                )
            })
        }
        _ => StoreError::from(e),
    }
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
    let io = |e: std::io::Error| cannot_open(path, &e);
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Probe::Missing),
        Err(e) => return Err(io(e)),
    };
    let meta = f.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(io(std::io::Error::from_raw_os_error(libc::EISDIR)));
    }
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
        )
        .map_err(opening(path, false))?
    } else {
        Connection::open_with_flags(
            immutable_uri(path),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                | rusqlite::OpenFlags::SQLITE_OPEN_URI
                | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(opening(path, false))?
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
        Err(e) => Err(opening(path, false)(e)),
    }
}

/// `<db>-wal`.
pub(super) fn wal_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-wal");
    PathBuf::from(p)
}

/// `<db>-shm`.
fn shm_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-shm");
    PathBuf::from(p)
}

/// `file:PATH?immutable=1`, PATH percent-encoded: SQLite then reads the file without
/// locks, without its `-wal` and without creating a `-shm`.
pub(super) fn immutable_uri(path: &Path) -> String {
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

/// Opens the database read-only, for inspection while it may be mounted (a WAL reader
/// never blocks the daemon). A file that cannot be opened is refused with
/// `cannot open database PATH: CAUSE` and the OS's errno (`ENOENT` for a missing
/// database, `EISDIR`, `EACCES`, `EROFS` when its `-shm` cannot be created, ...:
/// `open_refusal`); a file that is not a scratchfs database (an empty one included) with
/// `EINVAL` ([`probe`]). The database is read once here, so that such failures come now,
/// not at the caller's first query.
pub fn open_read_only(path: &Path) -> Result<Connection> {
    match probe(path)? {
        Probe::Missing => {
            return Err(cannot_open(
                path,
                &std::io::Error::from_raw_os_error(libc::ENOENT),
            ));
        }
        Probe::Empty => return Err(not_ours(path)),
        Probe::Scratchfs { .. } => {}
    }
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(opening(path, false))?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    })
    .map_err(opening(path, false))?;
    Ok(conn)
}
