//! Requests counted by kind: how many of each FUSE opcode the adapter answered since the
//! process started. A test reads them to pin the requests an operation costs
//! (`tests/requests.rs`: a create + write + close, an append), so that a change adding a
//! round trip to the kernel fails a test rather than a stopwatch (issue 32). One relaxed
//! atomic increment per request.

use std::sync::atomic::{AtomicU64, Ordering};

/// The FUSE requests the adapter implements (FUSE protocol opcodes, `fuse_opcode` in
/// `linux/fuse.h`), in the order [`Opcode::ALL`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Opcode {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Rename,
    Open,
    Read,
    Write,
    Statfs,
    Release,
    Fsync,
    Setxattr,
    Getxattr,
    Listxattr,
    Removexattr,
    Flush,
    Opendir,
    Readdir,
    Fsyncdir,
    Create,
    Fallocate,
    Readdirplus,
}

impl Opcode {
    /// Every kind, in declaration order.
    pub const ALL: [Opcode; 26] = [
        Opcode::Lookup,
        Opcode::Forget,
        Opcode::Getattr,
        Opcode::Setattr,
        Opcode::Mknod,
        Opcode::Mkdir,
        Opcode::Unlink,
        Opcode::Rmdir,
        Opcode::Rename,
        Opcode::Open,
        Opcode::Read,
        Opcode::Write,
        Opcode::Statfs,
        Opcode::Release,
        Opcode::Fsync,
        Opcode::Setxattr,
        Opcode::Getxattr,
        Opcode::Listxattr,
        Opcode::Removexattr,
        Opcode::Flush,
        Opcode::Opendir,
        Opcode::Readdir,
        Opcode::Fsyncdir,
        Opcode::Create,
        Opcode::Fallocate,
        Opcode::Readdirplus,
    ];

    /// The request's name as the FUSE protocol spells it, lower case (`create`, `flush`).
    pub fn name(self) -> &'static str {
        match self {
            Opcode::Lookup => "lookup",
            Opcode::Forget => "forget",
            Opcode::Getattr => "getattr",
            Opcode::Setattr => "setattr",
            Opcode::Mknod => "mknod",
            Opcode::Mkdir => "mkdir",
            Opcode::Unlink => "unlink",
            Opcode::Rmdir => "rmdir",
            Opcode::Rename => "rename",
            Opcode::Open => "open",
            Opcode::Read => "read",
            Opcode::Write => "write",
            Opcode::Statfs => "statfs",
            Opcode::Release => "release",
            Opcode::Fsync => "fsync",
            Opcode::Setxattr => "setxattr",
            Opcode::Getxattr => "getxattr",
            Opcode::Listxattr => "listxattr",
            Opcode::Removexattr => "removexattr",
            Opcode::Flush => "flush",
            Opcode::Opendir => "opendir",
            Opcode::Readdir => "readdir",
            Opcode::Fsyncdir => "fsyncdir",
            Opcode::Create => "create",
            Opcode::Fallocate => "fallocate",
            Opcode::Readdirplus => "readdirplus",
        }
    }
}

static COUNTS: [AtomicU64; 26] = [const { AtomicU64::new(0) }; 26];

/// Counts one request of kind `r`.
pub(super) fn count(r: Opcode) {
    COUNTS[r as usize].fetch_add(1, Ordering::Relaxed);
}

/// The requests answered so far in this process, by kind (kinds never seen left out).
pub fn requests() -> Vec<(Opcode, u64)> {
    Opcode::ALL
        .iter()
        .map(|&r| (r, COUNTS[r as usize].load(Ordering::Relaxed)))
        .filter(|&(_, n)| n > 0)
        .collect()
}
