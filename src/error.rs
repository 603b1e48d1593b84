//! The one error type of the filesystem core: every failure carries the errno the FUSE
//! adapter replies with (SPEC §6) and a one-line human reason.

use std::fmt;

/// A failed filesystem operation.
///
/// `errno` is a positive `libc` errno value (e.g. `libc::ESTALE`); `reason` is the one-line
/// explanation recorded in provenance and shown in logs. Displayed as `reason (strerror)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", shown(reason, *errno))]
pub struct Error {
    /// Positive errno value the FUSE reply carries.
    pub errno: i32,
    /// One line: what failed and why.
    pub reason: String,
}

/// `reason (strerror)`, as both error types display: the reason and the OS's text for
/// `errno` ("No such file or directory (os error 2)"), which is left out when the reason
/// holds it already (an I/O error's own text, as a failed connect's reason does).
pub fn shown(reason: &str, errno: i32) -> String {
    let os = std::io::Error::from_raw_os_error(errno).to_string();
    if reason.contains(&os) {
        reason.to_string()
    } else {
        format!("{reason} ({os})")
    }
}

/// Result alias for the core.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error with the given errno and reason.
    pub fn new(errno: i32, reason: impl Into<String>) -> Self {
        Error {
            errno,
            reason: reason.into(),
        }
    }
    /// `ENOENT`: no such file or directory.
    pub fn not_found(what: impl fmt::Display) -> Self {
        Self::new(libc::ENOENT, format!("{what}: no such file or directory"))
    }
    /// `EIO` from a storage failure that is not a SQLite error (SPEC §6 "database full or
    /// failed").
    pub fn store(e: impl fmt::Display) -> Self {
        Self::new(libc::EIO, format!("store: {e}"))
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        Error::new(errno, format!("io: {e}"))
    }
}
