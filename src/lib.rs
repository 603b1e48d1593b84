//! scratchfs: a FUSE filesystem that gives an AI agent an external working memory, where
//! every committed write is a version with provenance in one SQLite file.
//!
//! Where things are:
//! - [`fs`]: the filesystem core (inodes, handles, the commit path), no fuser types;
//! - [`fuse`]: the thin `fuser::Filesystem` adapter and the invalidation notifier;
//! - [`store`]: the store's port and its backends, SQLite and PostgreSQL (schemas in
//!   docs/schema.md);
//! - [`identity`]: who is calling, from `/proc`;
//! - [`mount`]: mounting, unmounting and stale-mount recovery;
//! - [`sync`]: every lock, and the lock order;
//! - [`error`]: the one error type, carrying an errno;
//! - [`failpoint`]: named points where crash tests stop the daemon;
//! - [`cli`]: the commands on a database (log, history, show, diff, fsck, restore, export,
//!   gc);
//! - [`rules`]: writer rules (the file format, its check, writer resolution);
//! - [`mcp`]: the MCP tools over the core (issue 12);
//! - [`checkpoint`]: checkpoints, the tree at a point, rollback's report (issue 14);
//! - [`tls`]: rustls server (and later client) configurations from PEM files, for the
//!   transports that speak TLS (`mcp --listen --tls-cert`, issue 31).

pub mod checkpoint;
pub mod cli;
pub mod error;
pub mod failpoint;
pub mod fs;
pub mod fuse;
pub mod http;
pub mod identity;
pub mod lineage;
pub mod mcp;
pub mod mount;
pub mod pressure;
pub mod report;
pub mod rules;
pub mod store;
pub mod sync;
#[cfg(test)]
mod test_alloc;
pub mod text;
pub mod tls;
pub mod views;
pub mod web;
