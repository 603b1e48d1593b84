//! The PostgreSQL backend (issue 15): a store on a shared PostgreSQL server, for several
//! machines' mounts of one scratchpad. The backend-neutral code (src/store/sql) runs on
//! it through [`PgConn`], its [`Conn`](crate::store::sql::Conn) implementation over the
//! `tokio-postgres` client (a current-thread runtime per connection, statements
//! pipelined); this folder owns only what differs from SQLite: the connection (URL, libpq
//! environment defaults, errors as errnos, the change lock), notifications between
//! daemons ([`notify`]), and the schema text [`SCHEMA`].
//!
//! TLS to the server: libpq's `sslmode`, `sslrootcert`, `sslcert`, `sslkey` on rustls
//! ([`tls`]). Through a pooler in transaction mode: [`pooler`].

mod conn;
pub mod notify;
pub mod pads;
pub mod pooler;
mod store;
pub mod tls;

pub use conn::{
    CHANGE_LOCK, CHANGE_LOCK_CLASS, PENDING_VERSION_ID, PgConn, SYNCED_COMMIT, change_lock_sql,
    connect_listener, is_guard, pg_error,
};
pub use store::{Heads, Postgres, display_name, is_url};

/// The PostgreSQL schema: the translation of src/store/schema.sql, created with
/// `CREATE ... IF NOT EXISTS` and `CREATE OR REPLACE VIEW`, so running it again changes
/// nothing. Its header says what the open code must seed besides (the root node).
pub const SCHEMA: &str = include_str!("schema.sql");
