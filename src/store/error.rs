//! The store's one error type (issue 15, item 1): every backend failure and every refusal
//! the store decides (a lost update, a missing version, a frozen database) is a
//! [`StoreError`] of one [`ErrorKind`], and [`ErrorKind::errno`] is the one table that
//! turns a kind into the errno the filesystem replies with (SPEC §6). Backends classify
//! their own failures here: SQLite by primary result code ([`From<rusqlite::Error>`]),
//! PostgreSQL by SQLSTATE (`postgres::conn::pg_error`). Code above the store matches the
//! kind, never an errno or a message.

use std::fmt;

/// What went wrong, as the store's callers need to tell it apart. Each kind has one errno
/// ([`ErrorKind::errno`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// What was asked for is not there (a path, version, checkpoint, database file):
    /// `ENOENT`.
    NotFound,
    /// A name or row that must be unique already exists (a checkpoint name, a unique key
    /// another daemon inserted first): `EEXIST`.
    Exists,
    /// A lost update: the commit's base is no longer the file's head, or a redaction moved
    /// it (SPEC §4): `ESTALE`.
    Stale,
    /// Another process held a lock for the whole wait (SQLite's busy timeout, a daemon
    /// that did not answer a gc): `EBUSY`.
    Busy,
    /// A concurrent transaction conflicted with this one, or held a row past
    /// `lock_timeout` (PostgreSQL SQLSTATE 40001, 40P01, 55P03); retrying may succeed:
    /// `EAGAIN`.
    Conflict,
    /// The database's disk is full (`SQLITE_FULL`, SQLSTATE 53100): `ENOSPC`.
    Full,
    /// The database may not be written (a frozen copy, a read-only file or standby):
    /// `EROFS`.
    ReadOnly,
    /// The database refused this user or role (`SQLITE_PERM`, SQLSTATE 42501, 28000,
    /// 28P01): `EACCES`.
    Denied,
    /// A value too big for the database (`SQLITE_TOOBIG`): `EFBIG`.
    TooBig,
    /// Bad input: a URL, a database that is not a scratchpad, an argument out of range:
    /// `EINVAL`.
    Invalid,
    /// Asked of a backend or URL that does not support it: `ENOTSUP`.
    Unsupported,
    /// A record without the data asked for (a checkpoint without a note): `ENODATA`.
    NoData,
    /// The connection to the database was lost or never made (a restarted PostgreSQL, a
    /// broken socket): `EIO`. The PostgreSQL backend connects again at the next call.
    Unavailable,
    /// The stored data breaks an invariant of docs/schema.md (an extent past its blob, a
    /// statement without its row): `EIO`.
    Corrupt,
    /// An operating-system call failed with this errno (opening the database file, the
    /// redo log): that errno.
    Os(i32),
    /// A guard found wrong what a change sent in one round trip was built on (PostgreSQL:
    /// the store's own `division_by_zero`, SQLSTATE 22012, `write::HEAD_IS` and
    /// `write::NO_DELETED_LINEAGE`): the store makes the change again without the guess.
    /// It does not leave the store; `EIO` if it did.
    Guessed,
    /// Any other failure of the backend (a query the database refused): `EIO`.
    Failed,
}

impl ErrorKind {
    /// The errno this kind becomes at the filesystem's edge (SPEC §6): positive, a `libc`
    /// constant.
    pub fn errno(self) -> i32 {
        match self {
            ErrorKind::NotFound => libc::ENOENT,
            ErrorKind::Exists => libc::EEXIST,
            ErrorKind::Stale => libc::ESTALE,
            ErrorKind::Busy => libc::EBUSY,
            ErrorKind::Conflict => libc::EAGAIN,
            ErrorKind::Full => libc::ENOSPC,
            ErrorKind::ReadOnly => libc::EROFS,
            ErrorKind::Denied => libc::EACCES,
            ErrorKind::TooBig => libc::EFBIG,
            ErrorKind::Invalid => libc::EINVAL,
            ErrorKind::Unsupported => libc::ENOTSUP,
            ErrorKind::NoData => libc::ENODATA,
            ErrorKind::Unavailable
            | ErrorKind::Corrupt
            | ErrorKind::Guessed
            | ErrorKind::Failed => libc::EIO,
            ErrorKind::Os(errno) => errno,
        }
    }

    /// The kind of an I/O error's errno ([`ErrorKind::of_errno`]; [`ErrorKind::Failed`]
    /// when it has none).
    pub fn of_io(e: &std::io::Error) -> ErrorKind {
        e.raw_os_error()
            .map_or(ErrorKind::Failed, ErrorKind::of_errno)
    }

    /// The kind of an operating-system errno (an `std::io::Error`'s, a filesystem error
    /// passed through the store): the named kinds for theirs, [`ErrorKind::Os`] otherwise.
    pub fn of_errno(errno: i32) -> ErrorKind {
        match errno {
            libc::ENOENT => ErrorKind::NotFound,
            libc::EEXIST => ErrorKind::Exists,
            libc::ESTALE => ErrorKind::Stale,
            libc::EBUSY => ErrorKind::Busy,
            libc::ENOSPC => ErrorKind::Full,
            libc::EROFS => ErrorKind::ReadOnly,
            libc::EACCES => ErrorKind::Denied,
            libc::EFBIG => ErrorKind::TooBig,
            libc::EINVAL => ErrorKind::Invalid,
            libc::ENOTSUP => ErrorKind::Unsupported,
            libc::ENODATA => ErrorKind::NoData,
            libc::EIO => ErrorKind::Failed,
            other => ErrorKind::Os(other),
        }
    }
}

/// A failed store operation: its [`ErrorKind`] and one line saying what failed and why
/// (recorded with a refusal, printed by the CLI). Displayed as `reason (strerror)`, as the
/// filesystem's [`crate::error::Error`] it becomes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", crate::error::shown(reason, self.errno()))]
pub struct StoreError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// One line: what failed and why.
    pub reason: String,
}

/// Result alias for the store.
pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// An error of `kind` saying `reason`.
    pub fn new(kind: ErrorKind, reason: impl Into<String>) -> Self {
        StoreError {
            kind,
            reason: reason.into(),
        }
    }
    /// [`ErrorKind::NotFound`]: "`what`: no such file or directory".
    pub fn not_found(what: impl fmt::Display) -> Self {
        Self::new(
            ErrorKind::NotFound,
            format!("{what}: no such file or directory"),
        )
    }
    /// [`ErrorKind::Failed`]: "store: `e`", a backend failure with nothing more specific.
    pub fn failed(e: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Failed, format!("store: {e}"))
    }
    /// [`ErrorKind::Corrupt`]: "store: `what`", stored data breaking an invariant.
    pub fn corrupt(what: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Corrupt, format!("store: {what}"))
    }
    /// The errno this error becomes ([`ErrorKind::errno`]).
    pub fn errno(&self) -> i32 {
        self.kind.errno()
    }
    /// The same error with `prefix` before its reason ("opening DB: ...").
    pub fn context(self, prefix: impl fmt::Display) -> Self {
        StoreError {
            kind: self.kind,
            reason: format!("{prefix}: {}", self.reason),
        }
    }
    /// Whether this is of `kind`.
    pub fn is(&self, kind: ErrorKind) -> bool {
        self.kind == kind
    }
}

/// The kind a SQLite failure is, by its primary result code (sqlite.org/rescode.html),
/// never by its message: `SQLITE_FULL` → [`ErrorKind::Full`], `SQLITE_BUSY` and
/// `SQLITE_LOCKED` (another process held the database past the busy timeout) →
/// [`ErrorKind::Busy`], `SQLITE_READONLY` → [`ErrorKind::ReadOnly`], `SQLITE_PERM` and
/// `SQLITE_AUTH` → [`ErrorKind::Denied`], `SQLITE_TOOBIG` → [`ErrorKind::TooBig`],
/// `SQLITE_CORRUPT` and `SQLITE_NOTADB` → [`ErrorKind::Corrupt`]; anything else (`SQLITE_CANTOPEN` included: the OS errno is not kept) →
/// [`ErrorKind::Failed`].
pub fn sqlite_kind(e: &rusqlite::Error) -> ErrorKind {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(C::DiskFull) => ErrorKind::Full,
        Some(C::DatabaseBusy | C::DatabaseLocked) => ErrorKind::Busy,
        Some(C::ReadOnly) => ErrorKind::ReadOnly,
        Some(C::PermissionDenied | C::AuthorizationForStatementDenied) => ErrorKind::Denied,
        Some(C::TooBig) => ErrorKind::TooBig,
        Some(C::DatabaseCorrupt | C::NotADatabase) => ErrorKind::Corrupt,
        _ => ErrorKind::Failed,
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        let kind = sqlite_kind(&e);
        let mut reason = format!("store: {e}");
        if kind == ErrorKind::Busy {
            reason.push_str(
                " (another process held a lock on the database for the whole busy timeout of 10 s)",
            );
        }
        Self::new(kind, reason)
    }
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError::new(ErrorKind::of_io(&e), format!("io: {e}"))
    }
}

impl From<StoreError> for crate::error::Error {
    fn from(e: StoreError) -> Self {
        crate::error::Error::new(e.errno(), e.reason)
    }
}

impl From<StoreError> for std::io::Error {
    fn from(e: StoreError) -> Self {
        std::io::Error::new(
            std::io::Error::from_raw_os_error(e.errno()).kind(),
            e.reason,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind named for an errno comes back from that errno, so an OS error passed
    /// through the store keeps its errno and its kind.
    #[test]
    fn errno_and_kind_agree() {
        for kind in [
            ErrorKind::NotFound,
            ErrorKind::Exists,
            ErrorKind::Stale,
            ErrorKind::Busy,
            ErrorKind::Full,
            ErrorKind::ReadOnly,
            ErrorKind::Denied,
            ErrorKind::TooBig,
            ErrorKind::Invalid,
            ErrorKind::Unsupported,
            ErrorKind::NoData,
            ErrorKind::Os(libc::ECONNREFUSED),
        ] {
            assert_eq!(ErrorKind::of_errno(kind.errno()), kind, "{kind:?}");
        }
        assert_eq!(ErrorKind::Conflict.errno(), libc::EAGAIN);
        for kind in [
            ErrorKind::Unavailable,
            ErrorKind::Corrupt,
            ErrorKind::Failed,
        ] {
            assert_eq!(kind.errno(), libc::EIO);
        }
    }

    /// The display adds the errno's text once: not again after a reason that holds it
    /// (helper finding: "Connection refused (os error 111) (Connection refused ...)").
    #[test]
    fn the_errno_text_shows_once() {
        let refused = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        let e = StoreError::new(
            ErrorKind::of_io(&refused),
            format!("cannot connect: {refused}"),
        );
        assert_eq!(
            e.to_string(),
            "cannot connect: Connection refused (os error 111)"
        );
        let e = StoreError::new(ErrorKind::Stale, "plan.md: a newer version");
        assert_eq!(
            e.to_string(),
            "plan.md: a newer version (Stale file handle (os error 116))"
        );
    }

    /// The filesystem's error keeps the errno and the reason.
    #[test]
    fn becomes_the_filesystem_error() {
        let e = StoreError::new(ErrorKind::Stale, "plan.md: a newer version").context("commit");
        let fs: crate::error::Error = e.into();
        assert_eq!(fs.errno, libc::ESTALE);
        assert_eq!(fs.reason, "commit: plan.md: a newer version");
    }

    /// SQLite's result codes, not its messages, decide the kind.
    #[test]
    fn sqlite_codes_decide_the_kind() {
        use rusqlite::ffi;
        let err = |code| rusqlite::Error::SqliteFailure(ffi::Error::new(code), Some("x".into()));
        for (code, kind) in [
            (ffi::SQLITE_FULL, ErrorKind::Full),
            (ffi::SQLITE_BUSY, ErrorKind::Busy),
            (ffi::SQLITE_LOCKED, ErrorKind::Busy),
            (ffi::SQLITE_READONLY, ErrorKind::ReadOnly),
            (ffi::SQLITE_PERM, ErrorKind::Denied),
            (ffi::SQLITE_TOOBIG, ErrorKind::TooBig),
            (ffi::SQLITE_CORRUPT, ErrorKind::Corrupt),
            (ffi::SQLITE_NOTADB, ErrorKind::Corrupt),
            (ffi::SQLITE_IOERR, ErrorKind::Failed),
        ] {
            assert_eq!(sqlite_kind(&err(code)), kind, "code {code}");
        }
        let busy = StoreError::from(err(ffi::SQLITE_BUSY));
        assert_eq!(busy.errno(), libc::EBUSY);
        assert!(busy.reason.contains("busy timeout"), "{busy}");
    }
}
