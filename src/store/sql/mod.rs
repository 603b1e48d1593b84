//! The store code both backends share (issue 15): written once, in the SQL SQLite and
//! PostgreSQL both accept, against [`Conn`]. Each backend (`store::sqlite`,
//! `store::postgres`) owns only what differs: opening and locking, transactions and
//! durability (SQLite's redo log and batch; PostgreSQL's commits and notifications), its
//! schema text, and the [`Conn`] implementation.
//!
//! - [`content`]: the content model: streams of extents, blobs deduplicated by blake3,
//!   reading a version's bytes and writing new ones.

mod conn;
pub mod content;

pub use conn::{Column, Conn, Dialect, Flow, Param, Row, Value};
