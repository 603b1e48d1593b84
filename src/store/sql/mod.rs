//! The store code both backends share (issue 15): written once, in the SQL SQLite and
//! PostgreSQL both accept, against [`Conn`]. Each backend (`store::sqlite`,
//! `store::postgres`) owns only what differs: opening and locking, transactions and
//! durability (SQLite's redo log and batch; PostgreSQL's commits and notifications), its
//! schema text, and the [`Conn`] implementation.
//!
//! - [`content`]: the content model: streams of extents, blobs deduplicated by blake3,
//!   reading a version's bytes and writing new ones.
//! - [`write`]: the rows of every change (processes, versions, events, nodes, per-key
//!   provenance) and the product rules of a commit: same bytes make no version, a lost
//!   update is refused with `ESTALE` (its content kept), a shrink by over half is an
//!   event, a JSON file's keys keep their own provenance.
//! - [`checkpoint`]: the namespace log, checkpoints, the tree at a point, rollback.
//! - [`admin`]: gc and redact.
//! - [`fork`]: a fork with history: the rows copied, then cut back to a point.
//! - [`fsck`]: the store's own checks; [`lineage`]: the questions `why` and `ground` ask.
//! - [`read`]: the read side ([`crate::store::History`]).

pub mod admin;
pub mod checkpoint;
mod conn;
pub mod content;
pub mod fork;
pub mod fsck;
pub mod history_index;
pub mod lineage;
pub mod policy;
pub mod read;
pub mod text_index;
pub mod write;

pub use conn::{Column, Conn, ConnExt, Dialect, Flow, IdOf, Param, Row, Value};

/// Current time in ns since the Unix epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// A new scratchpad's id (`meta.scratchpad_id`, issue 14): 32 hex digits of blake3 over
/// where it is (`place`: a path or a server's name), the time and the process id.
pub fn new_scratchpad_id(place: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(place.as_bytes());
    h.update(&now_ns().to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    h.finalize().to_hex()[..32].to_string()
}
