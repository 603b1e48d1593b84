//! [`Conn`] over a PostgreSQL connection ([`PgConn`], the asynchronous `tokio-postgres`
//! client driven by a runtime of its own): the shared SQL's `?N` placeholders rewritten
//! to `$N`, each statement prepared once per connection and cached by its original text;
//! parameters adapted to the type PostgreSQL inferred for their placeholder ([`PgParam`]);
//! column values read by their column's type; failures turned into errnos by SQLSTATE
//! ([`pg_error`]).
//!
//! Transactions: the store opens them with `BEGIN` / `COMMIT` through [`Conn::batch`].
//! Pipelining: inside a transaction, `BEGIN` and each [`Conn::exec`] (no rows) are not
//! sent at once but queued, and go out together with the next statement whose result is
//! needed (a query, `COMMIT`), in order, in one round trip; their results are checked
//! then, the first failure being that call's error (the transaction is then aborted, so
//! nothing after it takes effect). `ROLLBACK` drops what was never sent. Outside a
//! transaction every statement is sent at once.
//!
//! What is queued goes as few protocol messages as it can, because the server flushes
//! its output, one send and one wakeup of this process, at the end of each (at each
//! `Sync` of the extended protocol, which tokio-postgres sends after every statement):
//! on the reference machine those wakeups were most of a change's CPU
//! (docs/benchmarks.md). So a queued statement whose parameters are small
//! ([`LITERAL_MAX`]) is sent as `EXECUTE name(literals)` of the same statement prepared
//! by name with SQL's `PREPARE` (once per connection: the plan is kept as with the
//! protocol's prepare), and consecutive such texts, with the `BEGIN` before them, the
//! query after them (its rows read from their text form, [`TextRow`]) or the `COMMIT`,
//! are one simple-query message. A change of one lineage (the lock, the head, the
//! inserts, the notification, `COMMIT`) is then two messages, one round trip each.
//! Larger parameters (a blob of a large file) and queries that select bytes go in the
//! extended protocol, in binary. The named statements are visible as
//! `pg_prepared_statements` rows `scratchfs_N` of the session.
//!
//! Every transaction opened here holds its scratchpad's change lock shared
//! ([`change_lock_sql`]), which a checkpoint takes exclusively ([`PgConn::begin_exclusive`]).
//!
//! Through a pooler in transaction mode (`pooler=transaction` in the URL,
//! [`super::pooler`]) nothing outlives a transaction: no statement is prepared by name
//! (statements go as text with typed literals, or as the protocol's unnamed statement,
//! [`Prepared`] keeping only their types), every transaction sets what the session would
//! have ([`PgConn::opening`]), and a statement outside a transaction goes in one of its
//! own ([`PgConn::alone`]).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;

use bytes::BytesMut;
use tokio_postgres::config::Host;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Config, SimpleQueryMessage, Statement};

use crate::store::error::{ErrorKind, Result, StoreError};
use crate::store::sql::{Conn, ConnExt, Dialect, Flow, IdOf, Param, Row, Value};

/// The advisory lock every scratchfs transaction on the scratchpad in a database's
/// `public` schema holds (module docs): shared by every change, exclusive for a
/// checkpoint or a rollback ([`PgConn::begin_exclusive`]). The key spells "scratchf".
/// A scratchpad in another schema has a change lock of its own ([`change_lock_sql`]).
pub const CHANGE_LOCK: i64 = 0x7363_7261_7463_6866;

/// The first key of the change lock of a scratchpad in a schema other than `public`
/// (the second is `hashtext(SCHEMA)`): "scra".
pub const CHANGE_LOCK_CLASS: i32 = 0x7363_7261;

/// The SQL statement that takes the change lock of the scratchpad in the session's
/// current schema (issue 34): for `public`, [`CHANGE_LOCK`] (the key of every scratchpad
/// before, so that earlier daemons of a single-scratchpad database take the same lock);
/// for another schema, the pair ([`CHANGE_LOCK_CLASS`], `hashtext(current_schema())`),
/// so that a checkpoint in one scratchpad does not hold back the commits of the others
/// in the database. The server computes the key: every daemon of one scratchpad, on one
/// server, takes the same. `exclusive`: `pg_advisory_xact_lock`, else `_shared`.
pub fn change_lock_sql(exclusive: bool) -> &'static str {
    if exclusive {
        "SELECT CASE WHEN current_schema() = 'public' \
         THEN pg_advisory_xact_lock(8314615099946133606) \
         ELSE pg_advisory_xact_lock(1935897185, hashtext(current_schema())) END"
    } else {
        LOCK_SHARED
    }
}

/// The change lock, shared, which every transaction of this crate but a checkpoint's
/// takes after its `BEGIN` ([`PgConn::begin_text`], [`change_lock_sql`]).
const LOCK_SHARED: &str = "SELECT CASE WHEN current_schema() = 'public' \
     THEN pg_advisory_xact_lock_shared(8314615099946133606) \
     ELSE pg_advisory_xact_lock_shared(1935897185, hashtext(current_schema())) END";

/// One PostgreSQL connection as the shared store code uses it.
///
/// Not `Sync` (the statement cache and the queue are in `RefCell`s): the store holds each
/// connection behind its own mutex. It is `Send`. Never use it from a thread that runs a
/// tokio runtime (its calls block on a runtime of their own).
pub struct PgConn {
    /// Drives the connection: a current-thread runtime, running only inside this
    /// connection's calls.
    runtime: tokio::runtime::Runtime,
    /// Dropped first when the connection is ([`Drop`]), so that the connection's task,
    /// polled once more, ends the session with a Terminate message.
    client: std::mem::ManuallyDrop<Client>,
    /// The task that drives the connection (spawned on `runtime`).
    driver: Option<tokio::task::JoinHandle<()>>,
    /// How long a round trip may wait for its answer ([`round_trip_timeout`]).
    timeout: std::time::Duration,
    /// A round trip went unanswered: the connection's state is unknown, and it is
    /// treated as closed ([`PgConn::client_closed`]).
    broken: Cell<bool>,
    /// Prepared statements by their text as the shared code wrote it (with `?N`).
    statements: RefCell<HashMap<String, Prepared>>,
    /// Through a pooler in transaction mode ([`super::pooler`]): what each transaction
    /// sets, and the schema its statements run in.
    pooled: Option<Pooled>,
    /// The open transaction is one [`PgConn::alone`] opened for a query, whose `COMMIT`
    /// goes with it.
    ends_alone: Cell<bool>,
    /// The same statements prepared by name with SQL's `PREPARE` (for
    /// [`Queued::Text`]'s `EXECUTE`), by that text: the name.
    named: RefCell<HashMap<String, String>>,
    /// Statements to send with the next one whose result is needed (module docs).
    queued: RefCell<Vec<Queued>>,
    /// Bytes of parameters in `queued` ([`QUEUE_MAX`]).
    queued_bytes: Cell<usize>,
    /// A transaction is open (`BEGIN` queued or sent, no `COMMIT`/`ROLLBACK` since).
    in_transaction: Cell<bool>,
    /// Its `BEGIN` went to the server.
    begun: Cell<bool>,
    /// Ids taken from the identity sequences in advance, per [`IdOf`] (streams, files,
    /// nodes): [`Conn::reserved_id`].
    reserved: RefCell<[Vec<i64>; 3]>,
    /// The version id the open transaction took with its locks ([`PgConn::begin_commit`]),
    /// until [`Conn::reserved_id`] hands it out.
    version_id: Cell<Option<i64>>,
    /// The open transaction was opened by [`PgConn::begin_commit`] on a guess: its version
    /// id is handed out as [`PENDING_VERSION_ID`] and spelled `currval` of the sequence.
    guessing: Cell<bool>,
    /// The version id such a transaction took, once its answer is in
    /// ([`PgConn::taken_version_id`]).
    taken_id: Cell<Option<i64>>,
    /// The name of `versions.id`'s sequence, looked up once ([`PgConn::begin_commit`]).
    versions_seq: RefCell<Option<String>>,
    /// The rows of the last [`Queued::Query`] sent, until [`Conn::each`] takes them.
    text_rows: RefCell<Option<Vec<tokio_postgres::SimpleQueryRow>>>,
}

/// A statement's types, and the statement prepared in the protocol where it may be kept.
#[derive(Clone)]
struct Prepared {
    /// `None` through a pooler in transaction mode, where no statement outlives the
    /// transaction it was prepared in ([`super::pooler`]).
    stmt: Option<Statement>,
    /// The types PostgreSQL inferred for its placeholders, in order.
    params: Arc<[Type]>,
    /// Its columns' names and types.
    columns: Arc<[(String, Type)]>,
}

impl Prepared {
    fn of(stmt: Statement, keep: bool) -> Prepared {
        Prepared {
            params: stmt.params().into(),
            columns: stmt
                .columns()
                .iter()
                .map(|c| (c.name().to_owned(), c.type_().clone()))
                .collect(),
            stmt: keep.then_some(stmt),
        }
    }

    /// Whether every placeholder's values are spelled as literals ([`literal_type`]).
    fn literal(&self) -> bool {
        self.params.iter().all(|t| literal_type(t).is_some())
    }
}

/// A connection through a pooler in transaction mode ([`super::pooler`]).
struct Pooled {
    /// The statement that opens each transaction's settings
    /// ([`super::pooler::set_config_sql`]).
    settings: String,
    /// The schema the settings' search path leads to (`current_schema()`), which a
    /// `VACUUM` names ([`super::pooler::qualified_vacuum`]).
    schema: String,
}

/// How a transaction through a pooler in transaction mode opens ([`PgConn::opening`]):
/// its isolation and that it may write said, not left to the session's defaults, which
/// another client of the pool may have changed (`default_transaction_read_only`).
const POOLED_BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED, READ WRITE";

/// Makes the open transaction's `COMMIT` wait for its WAL to be flushed (and for the
/// synchronous standbys the server's own setting asks for): an `fsync`'s commit, durable
/// against a crash of the server or the host when it returns. Sent with the `COMMIT`.
pub const SYNCED_COMMIT: &str = "SET LOCAL synchronous_commit = on";

/// Bytes of queued parameters past which the queue is sent without waiting for a
/// statement whose result is needed (4 MiB): a commit of a large file (its blobs are
/// inserts without rows) must not hold all of it in memory.
const QUEUE_MAX: usize = 4 << 20;

/// How many ids [`Conn::reserved_id`] takes from a sequence at a time (one round trip
/// for this many inserts; the ids a connection never uses are skipped, as a rolled-back
/// insert's are).
const RESERVE: i64 = 32;

/// Bytes of parameters up to which a statement without rows goes as simple-query text
/// (an `EXECUTE` of the statement prepared by name, its parameters spelled as literals:
/// [`Queued::Text`]) rather than in the extended protocol (64 KiB). Consecutive texts go
/// in one message, which the server answers with one send (it flushes its output at each
/// `Sync`, and the extended protocol as tokio-postgres speaks it has one per statement):
/// on a loopback connection each send costs both processes a wakeup, which on the
/// reference machine was most of a change's CPU (docs/benchmarks.md). A larger value (a
/// blob of a large file) goes in binary, as spelling it in hex would double it.
const LITERAL_MAX: usize = 64 << 10;

/// The version id [`Conn::reserved_id`] hands out in a transaction opened on a guess
/// ([`PgConn::begin_commit`]), before the server has answered with the real one: a
/// statement sent as text spells it `currval` of the versions sequence (the value the
/// transaction's `nextval` took, on this session); one sent in binary is sent after the
/// answer, with the real id. The store puts the real id into what it returns
/// ([`PgConn::taken_version_id`]). A negative number no id is ("-scrversi" in ASCII).
pub const PENDING_VERSION_ID: i64 = -0x7363_7276_6572_7369;

/// Where the row of the version id a transaction took is in the answer to the message
/// that opens it ([`PgConn::begin_commit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdRow {
    /// No id taken.
    None,
    /// The last statement's (but for a query after it): statements after it spell the id
    /// as a literal, so the message ends there.
    Last,
    /// Statement `n`'s (0-based; a `BEGIN` message is always the first of its message):
    /// statements after it spell the id as `currval` ([`PENDING_VERSION_ID`]), so the
    /// message goes on.
    At(usize),
}

/// A statement waiting to be sent.
enum Queued {
    /// `BEGIN` with the change lock, shared ([`PgConn::begin_text`]), and what
    /// [`PgConn::begin_commit`] adds, if any: the whole text (simple-query), and where its
    /// version id's row is.
    Begin(String, IdRow),
    /// Simple-query text (an `EXECUTE`, or what ends the transaction), and the statement
    /// as the shared code wrote it (for messages).
    Text(String, String),
    /// A statement without rows, its text as the shared code wrote it (for messages).
    Exec(Prepared, Vec<OwnedParam>, String),
    /// A query's `EXECUTE` (as [`Queued::Text`]), last in the queue: its rows go to
    /// [`PgConn::text_rows`].
    Query(String, String),
}

/// Queued statements as they go out: consecutive simple-query texts joined into one
/// message ([`LITERAL_MAX`]).
enum Message<'q> {
    /// The text; the statements in it, for messages; where the transaction's version id
    /// is in its answer (after [`IdRow::Last`] only a query joins); whether its last
    /// statement is a query ([`Queued::Query`]).
    Text(String, Vec<&'q str>, IdRow, bool),
    /// A statement in the extended protocol, its parameters, its text.
    Exec(&'q Prepared, &'q [OwnedParam], &'q str),
}

/// `queued` as the messages that carry it, in order.
fn messages(queued: &[Queued]) -> Vec<Message<'_>> {
    let mut out: Vec<Message<'_>> = Vec::new();
    for q in queued {
        let (sql, shown, id, query) = match q {
            Queued::Begin(sql, id) => {
                // First in its message, where `IdRow::At` counts from.
                out.push(Message::Text(sql.clone(), vec!["BEGIN"], *id, false));
                continue;
            }
            Queued::Text(sql, shown) => (sql, shown.as_str(), IdRow::None, false),
            Queued::Query(sql, shown) => (sql, shown.as_str(), IdRow::None, true),
            Queued::Exec(stmt, params, sql) => {
                out.push(Message::Exec(stmt, params, sql));
                continue;
            }
        };
        match out.last_mut() {
            Some(Message::Text(text, statements, at, has_query))
                if !*has_query && (*at != IdRow::Last || query) =>
            {
                text.push_str("; ");
                text.push_str(sql);
                statements.push(shown);
                *has_query = query;
            }
            _ => out.push(Message::Text(sql.clone(), vec![shown], id, query)),
        }
    }
    out
}

// The store moves connections between threads (each behind a mutex).
const _: fn() = || {
    fn send<T: Send>() {}
    send::<PgConn>();
};

/// How long a closing connection waits for its Terminate message to go out.
const TERMINATE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Drop for PgConn {
    /// Ends the session as the protocol says (a Terminate message, PostgreSQL's
    /// "Termination" in the frontend/backend protocol), so that the server logs no
    /// `Connection reset by peer` at each unmount: the client goes first, and the
    /// connection's task, polled once more, sends Terminate and closes the socket; at most
    /// [`TERMINATE_WAIT`], and not at all when a round trip went unanswered.
    fn drop(&mut self) {
        // SAFETY: `client` is dropped here once and never used again: `drop` is the last
        // use of `self`, and no other field's drop reaches it.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.client) };
        if let Some(driver) = self.driver.take()
            && !self.broken.get()
        {
            let _ = self
                .runtime
                .block_on(async { tokio::time::timeout(TERMINATE_WAIT, driver).await });
        }
    }
}

impl std::fmt::Debug for PgConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConn")
            .field("statements", &self.statements.borrow().len())
            .field("queued", &self.queued.borrow().len())
            .finish_non_exhaustive()
    }
}

impl PgConn {
    /// Connects to the PostgreSQL server `url` names: `postgres://` or `postgresql://`
    /// (or a `key=value` connection string), as libpq reads it, with libpq's environment
    /// defaults for what the URL leaves out (the URL wins): `PGHOST` (a comma-separated
    /// list; a path is a Unix socket directory), `PGPORT`, `PGUSER` (else the OS user),
    /// `PGPASSWORD`, `PGDATABASE` (else the user name), and TLS's `PGSSLMODE`,
    /// `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`. `~/.pgpass` and `PGSERVICE` are not read.
    ///
    /// TLS ([`super::tls`]): libpq's `sslmode` (`disable`, `prefer` the default, `require`,
    /// `verify-ca`, `verify-full`), `sslrootcert` (a PEM file or `system`), `sslcert` and
    /// `sslkey`, on rustls; the files are read before connecting.
    ///
    /// A pooler in transaction mode ([`super::pooler`]): `pooler=transaction`, with
    /// `direct_host`, `direct_port` and/or `direct_dbname` for the listener
    /// ([`connect_listener`]); its `EINVAL`s are [`super::pooler::of`]'s.
    ///
    /// Errors never repeat the URL (it may hold a password): `EINVAL` for a URL or
    /// environment value that does not parse, an unknown parameter, or a certificate or key
    /// file that is missing, unreadable or holds none; the socket's errno when the server
    /// cannot be reached (e.g. `ECONNREFUSED`); `EACCES` when it refuses the login, or when
    /// TLS refuses the server (no TLS offered where the mode needs it, a certificate not
    /// signed by the root certificates, or not valid for the host name); else `EIO`.
    pub fn connect(url: &str) -> Result<PgConn> {
        let (config, tls) = config_from(url, |k| std::env::var(k).ok())?;
        let pooler = super::pooler::of(&super::tls::params(url), &config)?;
        let connector = super::tls::connector(&tls)?;
        let timeout = round_trip_timeout();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::failed(format!("a runtime for the PostgreSQL client: {e}")))?;
        // The URL's `connect_timeout` (or this timeout) bounds only the socket's connect
        // in tokio-postgres: the TLS handshake and the login are bounded here, so that a
        // server that accepts but never answers fails the connection too.
        let (client, connection) = runtime
            .block_on(async { tokio::time::timeout(timeout, config.connect(connector)).await })
            .map_err(|_| unanswered(timeout))?
            .map_err(|e| not_connected(&config, &tls, &e))?;
        let driver = runtime.spawn(async move {
            // Its error (a closed socket) is the next round trip's.
            let _ = connection.await;
        });
        // Prepared statements keep one generic plan: the store's statements are short
        // index lookups whose plan does not depend on the values, so planning each
        // execution afresh (the server's default for a statement's first five runs, and
        // for any whose generic plan looks costlier) is work the server need not do (no
        // difference in the bench's wall times on the reference machine, whose noise is
        // larger).
        //
        // A lock waited for longer than `lock_timeout` (30 s, or less with a shorter
        // round-trip timeout: [`lock_timeout`]) fails the change (EAGAIN): another
        // daemon's commit of the same file, or a session holding its row, cannot hold
        // this daemon's changes back for long, and the answer comes before the client
        // gives the round trip up. A session of ours idle inside a
        // transaction for 10 s (a daemon stopped mid-change: SIGSTOP, a frozen host) is
        // ended by the server, which frees the rows it locked for the other daemons; our
        // transactions never sit idle that long.
        //
        // Commits are asynchronous (`synchronous_commit = off`), as SQLite's close-only
        // commits are (its redo log is not synced): a `COMMIT` returns once the change is
        // committed and visible to every session, before its WAL reaches the disk, which
        // the server's WAL writer does within 3 x `wal_writer_delay` (600 ms by default).
        // So an acknowledged change survives the daemon's kill -9 and a restart of the
        // server, not a crash of the server or the host in that moment; an `fsync` makes it
        // durable ([`SYNCED_COMMIT`], docs/deploy.md "Durability").
        //
        // Through a pooler in transaction mode, the same settings (but the plans': no
        // statement is kept) are set in each transaction, after the URL's own.
        let pooled = match pooler {
            None => {
                let settings = format!(
                    "SET plan_cache_mode = force_generic_plan; SET lock_timeout = '{}ms'; \
                     SET idle_in_transaction_session_timeout = '10s'; \
                     SET synchronous_commit = off",
                    lock_timeout(timeout).as_millis()
                );
                runtime
                    .block_on(async {
                        tokio::time::timeout(timeout, client.batch_execute(&settings)).await
                    })
                    .map_err(|_| unanswered(timeout))?
                    .map_err(|e| not_connected(&config, &tls, &e))?;
                None
            }
            Some(pooler) => {
                // The pool's sessions serve other clients of the role between our
                // transactions, and what they leave there must not steer ours (attack
                // round of session 32): the search path is always set, the URL's or the
                // role's and database's default (`reset_val`, which no session's `SET`
                // changes), with `pg_temp` named last (else a temporary table named as
                // one of ours hides it); `statement_timeout` is the default too; every
                // transaction says its isolation and that it writes
                // ([`PgConn::opening`]).
                let run = |text: String| {
                    runtime
                        .block_on(async {
                            tokio::time::timeout(timeout, client.simple_query(&text)).await
                        })
                        .map_err(|_| unanswered(timeout))?
                        .map_err(|e| not_connected(&config, &tls, &e))
                };
                let rows = |answer: Vec<SimpleQueryMessage>| -> Vec<Vec<String>> {
                    answer
                        .into_iter()
                        .filter_map(|m| match m {
                            SimpleQueryMessage::Row(r) => Some(
                                (0..r.len())
                                    .map(|i| r.get(i).unwrap_or_default().to_owned())
                                    .collect(),
                            ),
                            _ => None,
                        })
                        .collect()
                };
                let defaults = rows(run("SELECT name, reset_val FROM pg_settings \
                     WHERE name IN ('search_path', 'statement_timeout')"
                    .to_owned())?);
                let default = |name: &str| {
                    defaults
                        .iter()
                        .find(|r| r.first().is_some_and(|n| n == name))
                        .and_then(|r| r.get(1).cloned())
                        .unwrap_or_default()
                };
                let mut all = pooler.settings;
                let path = match all.iter().position(|(k, _)| k == "search_path") {
                    Some(i) => all.remove(i).1,
                    None => default("search_path"),
                };
                let path = if path.contains("pg_temp") {
                    path
                } else if path.trim().is_empty() {
                    "pg_temp".to_owned()
                } else {
                    format!("{path}, pg_temp")
                };
                if !all.iter().any(|(k, _)| k == "statement_timeout") {
                    all.push(("statement_timeout".to_owned(), default("statement_timeout")));
                }
                all.push(("search_path".to_owned(), path));
                all.push((
                    "lock_timeout".to_owned(),
                    format!("{}ms", lock_timeout(timeout).as_millis()),
                ));
                all.push((
                    "idle_in_transaction_session_timeout".to_owned(),
                    "10s".to_owned(),
                ));
                all.push(("synchronous_commit".to_owned(), "off".to_owned()));
                let settings = super::pooler::set_config_sql(&all);
                let answer = run(format!(
                    "{POOLED_BEGIN}; {settings}; SELECT current_schema(); COMMIT"
                ))?;
                let schema = rows(answer)
                    .into_iter()
                    .filter(|r| r.len() == 1)
                    .map(|r| r[0].clone())
                    .next_back()
                    .unwrap_or_default();
                Some(Pooled { settings, schema })
            }
        };
        Ok(PgConn {
            runtime,
            client: std::mem::ManuallyDrop::new(client),
            driver: Some(driver),
            timeout,
            broken: Cell::new(false),
            statements: RefCell::new(HashMap::new()),
            pooled,
            ends_alone: Cell::new(false),
            named: RefCell::new(HashMap::new()),
            queued: RefCell::new(Vec::new()),
            queued_bytes: Cell::new(0),
            in_transaction: Cell::new(false),
            begun: Cell::new(false),
            reserved: RefCell::new([Vec::new(), Vec::new(), Vec::new()]),
            version_id: Cell::new(None),
            guessing: Cell::new(false),
            taken_id: Cell::new(None),
            versions_seq: RefCell::new(None),
            text_rows: RefCell::new(None),
        })
    }

    /// Whether the connection is closed (the server went away, or the network to it):
    /// the store then connects again. The connection is first given a moment to read
    /// what arrived while it was idle, so that one the server closed meanwhile (a restart,
    /// `pg_terminate_backend`) is found closed before a change is sent on it, rather than
    /// failing that change with `EIO`.
    pub fn client_closed(&self) -> bool {
        if self.broken.get() {
            return true;
        }
        if !self.client.is_closed() {
            self.runtime.block_on(async {
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
            });
        }
        self.client.is_closed()
    }

    /// Runs `last` after what is queued, all sent at once (pipelined), and returns its
    /// result; the first queued statement that failed is the error instead.
    fn run<T>(
        &self,
        last: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        crate::store::count::round_trip();
        let queued = std::mem::take(&mut *self.queued.borrow_mut());
        self.queued_bytes.set(0);
        if queued.is_empty() {
            return self.within(last)?.map_err(|e| pg_error(&e));
        }
        let client = &self.client;
        type Sent<'a> = Pin<Box<dyn Future<Output = Result<()>> + 'a>>;
        let in_text = |e: &tokio_postgres::Error, statements: &[&str]| {
            let mut err = pg_error(e);
            err.reason.push_str(&format!(
                " (in `{}`)",
                one_line(&statements.join("; "), 240)
            ));
            err
        };
        let sent: Vec<Sent<'_>> = messages(&queued)
            .into_iter()
            .map(|m| -> Sent<'_> {
                match m {
                    Message::Text(sql, statements, IdRow::None, false) => Box::pin(async move {
                        client
                            .batch_execute(&sql)
                            .await
                            .map_err(|e| in_text(&e, &statements))
                    }),
                    Message::Text(sql, statements, id_row, query) => Box::pin(async move {
                        let answer = client
                            .simple_query(&sql)
                            .await
                            .map_err(|e| in_text(&e, &statements))?;
                        // The rows of each statement, in order (a statement's end is its
                        // `CommandComplete`).
                        let mut done: Vec<Vec<tokio_postgres::SimpleQueryRow>> = Vec::new();
                        let mut rows = Vec::new();
                        for m in answer {
                            match m {
                                SimpleQueryMessage::Row(r) => rows.push(r),
                                SimpleQueryMessage::CommandComplete(_) => {
                                    done.push(std::mem::take(&mut rows));
                                }
                                _ => {}
                            }
                        }
                        if query {
                            *self.text_rows.borrow_mut() = done.pop();
                        }
                        let rows = match id_row {
                            IdRow::None => return Ok(()),
                            IdRow::Last => done.last(),
                            IdRow::At(n) => done.get(n),
                        };
                        let id = rows
                            .and_then(|rows| rows.last())
                            .and_then(|r| r.get(0)?.parse::<i64>().ok())
                            .ok_or_else(|| {
                                StoreError::failed(format!(
                                    "no version id from `{}`",
                                    one_line(&sql, 160)
                                ))
                            })?;
                        match id_row {
                            IdRow::At(_) => self.taken_id.set(Some(id)),
                            _ => self.version_id.set(Some(id)),
                        }
                        Ok(())
                    }),
                    Message::Exec(prepared, params, sql) => Box::pin(async move {
                        let done = match &prepared.stmt {
                            Some(stmt) => {
                                let refs: Vec<&(dyn ToSql + Sync)> =
                                    params.iter().map(|p| p as _).collect();
                                client.execute(stmt, &refs).await.map(|_| ())
                            }
                            // The protocol's unnamed statement, its types given.
                            None => {
                                let typed: Vec<(&(dyn ToSql + Sync), Type)> = params
                                    .iter()
                                    .zip(prepared.params.iter())
                                    .map(|(p, t)| (p as _, t.clone()))
                                    .collect();
                                client
                                    .query_typed(&rewrite_placeholders(sql), &typed)
                                    .await
                                    .map(|_| ())
                            }
                        };
                        done.map_err(|e| {
                            let mut err = pg_error(&e);
                            err.reason
                                .push_str(&format!(" (in `{}`)", one_line(sql, 160)));
                            err
                        })
                    }),
                }
            })
            .collect();
        if queued.iter().any(|q| matches!(q, Queued::Begin(..))) {
            self.begun.set(true);
        }
        let (earlier, last) = self.within(futures_util::future::join(
            futures_util::future::join_all(sent),
            last,
        ))?;
        for r in earlier {
            r?;
        }
        last.map_err(|e| pg_error(&e))
    }

    /// Runs `f` (a round trip) to its end, or for at most the connection's timeout: then
    /// the connection is marked broken (the store connects again at its next call) and
    /// the error is `EIO` ([`ErrorKind::Unavailable`]), saying how long it waited. An
    /// unanswered `COMMIT` may have committed or not: the caller was told `EIO`, never
    /// that it was done.
    fn within<F: Future>(&self, f: F) -> Result<F::Output> {
        self.runtime
            .block_on(async { tokio::time::timeout(self.timeout, f).await })
            .map_err(|_| {
                self.broken.set(true);
                unanswered(self.timeout)
            })
    }

    /// Sends what is queued, if anything; its first failure is the error.
    fn flush(&self) -> Result<()> {
        if self.queued.borrow().is_empty() {
            return Ok(());
        }
        self.run(std::future::ready(Ok::<(), tokio_postgres::Error>(())))
    }

    /// The prepared statement for `sql` (with `?N` placeholders), from the cache or
    /// prepared now. A statement that fails to prepare is not cached, and its error
    /// names the statement (where PostgreSQL could not infer a placeholder's type, say).
    ///
    /// Through a pooler in transaction mode only its types are kept: it is prepared in
    /// the open transaction (or in one opened for it and rolled back), and closed there
    /// (dropping the last [`Statement`] sends its `Close`, which goes before anything
    /// sent after it).
    fn statement(&self, sql: &str) -> Result<Prepared> {
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        // What is queued goes first, its failure its own (not blamed on this statement).
        self.flush()?;
        let text = rewrite_placeholders(sql);
        let alone = self.pooled.is_some() && !self.in_transaction.get();
        if alone {
            self.run(self.client.batch_execute(&self.opening("BEGIN")))?;
        }
        let prepared = self.clear_leftovers().and_then(|()| {
            self.run(self.client.prepare(&text))
                .map(|stmt| Prepared::of(stmt, self.pooled.is_none()))
        });
        if alone {
            crate::store::count::round_trip();
            self.within(self.client.batch_execute("ROLLBACK"))?
                .map_err(|e| pg_error(&e))?;
        }
        let prepared = prepared.map_err(|mut err| {
            err.reason
                .push_str(&format!(" (preparing `{}`)", one_line(sql, 160)));
            err
        })?;
        self.statements
            .borrow_mut()
            .insert(sql.to_owned(), prepared.clone());
        Ok(prepared)
    }

    /// Through a pooler in transaction mode, before a statement is prepared (in a
    /// transaction, so on the server session it will be prepared on): the statements
    /// another client left prepared on that session under the names tokio-postgres gives
    /// (`s` and a number, counted from 0 in every process), which would make this prepare
    /// fail ("prepared statement \"s0\" already exists": the attack round of session 32
    /// left 401 to keep every daemon's new statements from preparing) are deallocated. A
    /// client that follows transaction mode's rules leaves none; PgBouncer's own tracking
    /// (1.21+) names its statements otherwise. No-op on a direct session.
    fn clear_leftovers(&self) -> Result<()> {
        if self.pooled.is_none() {
            return Ok(());
        }
        let answer = self
            .run(self.client.simple_query(
                "SELECT name FROM pg_prepared_statements WHERE name ~ '^s[0-9]+$'",
            ))?;
        let names: Vec<String> = answer
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => r.get(0).map(|n| format!("DEALLOCATE \"{n}\"")),
                _ => None,
            })
            .collect();
        if names.is_empty() {
            return Ok(());
        }
        log::warn!(
            "{} prepared statements left by another client on a pooled session deallocated",
            names.len()
        );
        self.run(self.client.batch_execute(&names.join("; ")))
    }

    /// `begin` (a `BEGIN`), and through a pooler in transaction mode the settings each
    /// transaction makes ([`Pooled::settings`]): one statement more.
    fn opening(&self, begin: &str) -> String {
        match &self.pooled {
            Some(p) if begin == "BEGIN" => format!("{POOLED_BEGIN}; {}", p.settings),
            Some(p) => format!("{begin}; {}", p.settings),
            None => begin.to_owned(),
        }
    }

    /// How many statements [`PgConn::opening`] makes of a `BEGIN`.
    fn opening_statements(&self) -> usize {
        if self.pooled.is_some() { 2 } else { 1 }
    }

    /// `f` (one statement), in a transaction of its own when none is open and the
    /// connection goes through a pooler in transaction mode (where a statement alone would
    /// run with whatever the session has, the search path included): `BEGIN` and the
    /// settings, without the change lock (a statement outside a transaction takes none),
    /// then the statement, then `COMMIT`, in one round trip (a query sends the `COMMIT`
    /// with itself, [`PgConn::ends_alone`]). Rolled back when `f` fails.
    fn alone<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if self.pooled.is_none() || self.in_transaction.get() {
            return f();
        }
        self.in_transaction.set(true);
        self.begun.set(false);
        self.version_id.set(None);
        self.guessing.set(false);
        self.taken_id.set(None);
        self.ends_alone.set(true);
        self.queued
            .borrow_mut()
            .push(Queued::Begin(self.opening("BEGIN"), IdRow::None));
        let out = f();
        self.ends_alone.set(false);
        if !self.in_transaction.get() {
            // Ended with the query's answer.
            return out;
        }
        match out {
            Ok(v) => {
                self.end("COMMIT")?;
                Ok(v)
            }
            Err(e) => {
                let _ = self.batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// After a query sent with the `COMMIT` of its transaction of its own
    /// ([`PgConn::alone`]): the transaction is over, or, when the round trip failed,
    /// rolled back.
    fn ended_alone<T>(&self, out: Result<T>) -> Result<T> {
        if out.is_err() {
            let _ = self.batch("ROLLBACK");
        }
        self.in_transaction.set(false);
        self.begun.set(false);
        out
    }

    /// Whether the last queued statement is simple-query text, which a query can follow
    /// in one message.
    fn text_follows(&self) -> bool {
        matches!(
            self.queued.borrow().last(),
            Some(Queued::Begin(..) | Queued::Text(..))
        )
    }

    /// The name `sql` is prepared under with SQL's `PREPARE` on this connection, its
    /// parameters of the types `stmt` (the same text prepared in the protocol) has:
    /// prepared now (one round trip, with what is queued) on its first use. A `PREPARE`
    /// lasts as long as the session, whatever becomes of the transaction it was sent in.
    fn named(&self, sql: &str, stmt: &Prepared) -> Result<String> {
        if let Some(name) = self.named.borrow().get(sql) {
            return Ok(name.clone());
        }
        let name = format!("scratchfs_{}", self.named.borrow().len() + 1);
        let types: Vec<&str> = stmt
            .params
            .iter()
            .map(|t| literal_type(t).unwrap_or("unknown"))
            .collect();
        let types = if types.is_empty() {
            String::new()
        } else {
            format!("({})", types.join(", "))
        };
        let text = format!("PREPARE {name}{types} AS {}", rewrite_placeholders(sql));
        self.flush()?;
        self.run(self.client.batch_execute(&text))
            .map_err(|mut err| {
                err.reason
                    .push_str(&format!(" (preparing `{}`)", one_line(sql, 160)));
                err
            })?;
        self.named.borrow_mut().insert(sql.to_owned(), name.clone());
        Ok(name)
    }
}

/// The SQL name of a parameter type whose values [`execute_text`] spells as literals (as
/// [`PgParam`] sends them), or `None`: such a statement goes in the extended protocol.
fn literal_type(ty: &Type) -> Option<&'static str> {
    Some(match *ty {
        Type::INT8 => "int8",
        Type::INT4 => "int4",
        Type::INT2 => "int2",
        Type::BOOL => "bool",
        Type::TEXT => "text",
        Type::VARCHAR => "varchar",
        Type::NAME => "name",
        Type::BPCHAR => "bpchar",
        Type::BYTEA => "bytea",
        _ => return None,
    })
}

/// What stands for a NUL in text stored on PostgreSQL, whose text cannot hold one:
/// U+2400 SYMBOL FOR NULL. Text reaches the store with NULs in a JSON key (`\u0000`), a
/// refusal's reason that quotes one, an MCP client's name; refusing it would lose the
/// write or the refusal's record (helper finding), so it is stored with this instead
/// (docs/SEMANTICS.md). File contents are bytes and keep their NULs.
pub const NUL_SHOWN: &str = "\u{2400}";

/// Appends `t` to `out` as an escape string literal, `E'...'`: `'` and `\` doubled (its
/// meaning does not depend on `standard_conforming_strings`), a NUL as [`NUL_SHOWN`].
pub(super) fn quote_text(out: &mut String, t: &str) {
    out.push_str("E'");
    for c in t.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str(NUL_SHOWN),
            c => out.push(c),
        }
    }
    out.push('\'');
}

/// How [`execute_text`] sends a statement.
enum Form<'a> {
    /// `EXECUTE name(...)` of the statement prepared by name.
    Execute(&'a str),
    /// The statement's own text (as the shared code wrote it, `?N`), each placeholder a
    /// typed literal, `CAST(literal AS type)`: through a pooler in transaction mode.
    Inline(&'a str),
}

/// The statement whose placeholders have the types `types`, with `params` spelled as
/// literals of those types, paired as [`PgParam`] pairs them (the same errors for a value
/// that does not fit): NULL, an integer in decimal, a boolean as `true`/`false`, text as
/// an escape string ([`quote_text`]), bytes as `E'\\x` and hex; [`PENDING_VERSION_ID`]
/// as `pending` (`currval` of the versions sequence) when given. In the `form` given.
fn execute_text(
    form: Form<'_>,
    types: &[Type],
    params: &[Param<'_>],
    pending: Option<&str>,
) -> Result<String> {
    use std::fmt::Write;
    if types.len() != params.len() {
        return Err(StoreError::failed(format!(
            "{} parameters for {} placeholders",
            params.len(),
            types.len()
        )));
    }
    // Every literal in one string, each ending at its offset in `ends`.
    let mut spelled = String::new();
    let mut ends: Vec<usize> = Vec::with_capacity(params.len());
    for (p, ty) in params.iter().zip(types) {
        let out = &mut spelled;
        let refused = |e: Box<dyn StdError + Sync + Send>| StoreError::failed(e);
        match *p {
            Param::Null => out.push_str("NULL"),
            Param::Int(PENDING_VERSION_ID) if *ty == Type::INT8 && pending.is_some() => {
                out.push_str(pending.unwrap_or_default());
            }
            Param::Int(v) => match *ty {
                Type::INT8 => write!(out, "{v}").expect("a String takes it"),
                Type::INT4 => write!(
                    out,
                    "{}",
                    i32::try_from(v).map_err(|_| refused(out_of_range(v, ty)))?
                )
                .expect("a String takes it"),
                Type::INT2 => write!(
                    out,
                    "{}",
                    i16::try_from(v).map_err(|_| refused(out_of_range(v, ty)))?
                )
                .expect("a String takes it"),
                Type::BOOL => match v {
                    0 => out.push_str("false"),
                    1 => out.push_str("true"),
                    _ => return Err(refused(out_of_range(v, ty))),
                },
                _ => return Err(refused(mismatch("an integer", ty))),
            },
            Param::Text(t) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => {
                    quote_text(out, t);
                }
                _ => return Err(refused(mismatch("text", ty))),
            },
            Param::Blob(b) => match *ty {
                Type::BYTEA => {
                    out.reserve(b.len() * 2 + 8);
                    out.push_str("E'\\\\x");
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    for &byte in b {
                        out.push(char::from(HEX[usize::from(byte >> 4)]));
                        out.push(char::from(HEX[usize::from(byte & 15)]));
                    }
                    out.push('\'');
                }
                _ => return Err(refused(mismatch("bytes", ty))),
            },
        }
        ends.push(spelled.len());
    }
    let literal = |i: usize| &spelled[if i == 0 { 0 } else { ends[i - 1] }..ends[i]];
    match form {
        Form::Execute(name) => {
            let mut out = String::with_capacity(16 + name.len() + spelled.len() + 2 * ends.len());
            out.push_str("EXECUTE ");
            out.push_str(name);
            for i in 0..ends.len() {
                out.push_str(if i == 0 { "(" } else { ", " });
                out.push_str(literal(i));
            }
            if !ends.is_empty() {
                out.push(')');
            }
            Ok(out)
        }
        Form::Inline(sql) => substitute(sql, |out, n| {
            let i = n.checked_sub(1).filter(|&i| i < ends.len())?;
            let ty = literal_type(&types[i])?;
            write!(out, "CAST({} AS {ty})", literal(i)).expect("a String takes it");
            Some(())
        }),
    }
}

impl PgConn {
    /// Opens a transaction whose first statement, after the change lock, is `sql` with
    /// `params` (a statement of the shared code's kind, `?N` placeholders: it is
    /// prepared by name and its parameters spelled as literals, [`execute_text`]), then
    /// takes the id of the version the transaction will insert, after its locks. All of
    /// it is queued, as a `BEGIN` is: sent with the next statement whose result is
    /// needed, in its message; a failure (a lock not had within `lock_timeout`: `EAGAIN`)
    /// is that statement's error. The store's lock of a lineage row opens a commit this
    /// way.
    ///
    /// The id: [`Conn::reserved_id`] of [`IdOf::Versions`] hands it out (once), so the
    /// version's insert needs no answer and goes with the `COMMIT`. Taken after the change
    /// lock (a checkpoint's point has every lower id committed) and after `sql`'s locks (a
    /// lineage's versions' ids grow with their numbers). A transaction that inserts no
    /// version leaves a gap in the ids, as a rolled-back insert does; version numbers are
    /// not ids and have none.
    ///
    /// `guess`: the commit is built on what the store guessed (`write::commit_guessing`),
    /// and needs no answer before its `COMMIT`: the id is handed out as
    /// [`PENDING_VERSION_ID`], which statements sent as text spell `currval` of the
    /// sequence, so the whole transaction is one message; [`PgConn::taken_version_id`]
    /// says the id after it. Else the message ends at the id, whose answer the inserts
    /// wait for (they spell it as a literal).
    ///
    /// Errors: as [`Conn::exec`]'s (a statement that does not prepare, a parameter that
    /// does not fit its placeholder), at this call; `EIO` when a transaction is open.
    pub fn begin_commit(&self, sql: &str, params: &[Param<'_>], guess: bool) -> Result<()> {
        if self.in_transaction.get() {
            return Err(StoreError::failed(
                "begin_commit: a transaction is already open",
            ));
        }
        let seq = self.versions_seq()?;
        // `BEGIN` (and a pooler's settings), the change lock, `sql`, `nextval`: the id is
        // the 4th (5th) statement's row.
        let text = format!(
            "{}; {}; {}",
            self.begin_text()?,
            self.execute(sql, params)?,
            self.execute(&format!("SELECT nextval({seq})"), &[])?
        );
        self.in_transaction.set(true);
        self.begun.set(false);
        self.version_id.set(None);
        self.guessing.set(guess);
        self.taken_id.set(None);
        let at = if guess {
            IdRow::At(self.opening_statements() + 2)
        } else {
            IdRow::Last
        };
        self.queued.borrow_mut().push(Queued::Begin(text, at));
        Ok(())
    }

    /// The version id the last transaction opened on a guess took
    /// ([`PgConn::begin_commit`]), once the server has answered its message: what
    /// [`PENDING_VERSION_ID`] stood for. `None` before that, or when it took none.
    pub fn taken_version_id(&self) -> Option<i64> {
        self.taken_id.get()
    }

    /// `params` with [`PENDING_VERSION_ID`] made the id the transaction took, for a
    /// statement sent in binary, which cannot spell it `currval`: what is queued (the
    /// transaction's first message) is sent first, so that the id is known. `EIO` when the
    /// answer had none.
    fn resolved<'p>(&self, params: &[Param<'p>]) -> Result<Vec<Param<'p>>> {
        let pending = |p: &Param<'_>| matches!(p, Param::Int(PENDING_VERSION_ID));
        if !self.guessing.get() || !params.iter().any(pending) {
            return Ok(params.to_vec());
        }
        self.flush()?;
        let id = self
            .taken_id
            .get()
            .ok_or_else(|| StoreError::failed("no version id from the transaction's BEGIN"))?;
        Ok(params
            .iter()
            .map(|p| if pending(p) { Param::Int(id) } else { *p })
            .collect())
    }

    /// `BEGIN` and the change lock, shared ([`LOCK_SHARED`], prepared by name): how
    /// every transaction of this crate but a checkpoint's opens.
    fn begin_text(&self) -> Result<String> {
        Ok(format!(
            "{}; {}",
            self.opening("BEGIN"),
            self.execute(LOCK_SHARED, &[])?
        ))
    }

    /// `EXECUTE` of `sql` (prepared by name now if it is not yet, [`PgConn::named`]) with
    /// `params` spelled as literals ([`execute_text`]); `EIO` for a statement whose
    /// placeholders are of a type not spelled so.
    fn execute(&self, sql: &str, params: &[Param<'_>]) -> Result<String> {
        let stmt = self.statement(sql)?;
        if let Some(t) = stmt.params.iter().find(|t| literal_type(t).is_none()) {
            return Err(StoreError::failed(format!(
                "a placeholder of type {t} in `{}`",
                one_line(sql, 160)
            )));
        }
        let name;
        let form = if self.pooled.is_some() {
            Form::Inline(sql)
        } else {
            name = self.named(sql, &stmt)?;
            Form::Execute(&name)
        };
        let seq;
        let pending = if self.guessing.get() {
            seq = format!("currval({})", self.versions_seq()?);
            Some(seq.as_str())
        } else {
            None
        };
        execute_text(form, &stmt.params, params, pending).map_err(|mut err| {
            err.reason
                .push_str(&format!(" (in `{}`)", one_line(sql, 160)));
            err
        })
    }

    /// The name of `versions.id`'s sequence, schema-qualified and quoted as an identifier
    /// by the server, as a string literal ([`quote_text`]): looked up on the first call
    /// (one round trip per connection), then kept.
    fn versions_seq(&self) -> Result<String> {
        if let Some(s) = self.versions_seq.borrow().as_ref() {
            return Ok(s.clone());
        }
        let name: Option<String> =
            self.value("SELECT pg_get_serial_sequence('versions', 'id')", &[])?;
        let name = name.ok_or_else(|| StoreError::failed("versions.id has no sequence"))?;
        let mut quoted = String::new();
        quote_text(&mut quoted, &name);
        let name = quoted;
        *self.versions_seq.borrow_mut() = Some(name.clone());
        Ok(name)
    }

    /// Opens a transaction holding the change lock exclusively, at once: it waits for
    /// every change of every daemon in flight to commit and holds the next ones back until
    /// it ends. A checkpoint takes one, so that its point (the highest ids) has every
    /// change below it committed: an identity value is taken at insert, and a change that
    /// took one before the checkpoint could otherwise commit after it.
    pub fn begin_exclusive(&self) -> Result<()> {
        if self.in_transaction.get() {
            return Err(StoreError::failed(
                "begin_exclusive: a transaction is already open",
            ));
        }
        self.begin_as(&format!(
            "{}; {}",
            self.opening("BEGIN"),
            change_lock_sql(true)
        ))
    }

    /// Opens a read-only transaction that sees one snapshot of the database throughout
    /// (`REPEATABLE READ`): a fork copies every table from one point in time. It takes no
    /// change lock: changes of other daemons go on, unseen by it.
    pub fn begin_snapshot(&self) -> Result<()> {
        if self.in_transaction.get() {
            return Err(StoreError::failed(
                "begin_snapshot: a transaction is already open",
            ));
        }
        // It holds no lock a change waits for, and may wait for the other side of the fork
        // (a large table written into the new database) longer than the idle limit that
        // frees a stopped daemon's locks.
        self.begin_as(&format!(
            "{}; SET LOCAL idle_in_transaction_session_timeout = 0",
            self.opening("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        ))
    }

    /// Sends `sql`, which opens a transaction, now. When a statement after its `BEGIN`
    /// fails (a lock not had within `lock_timeout`), the server's transaction stays open
    /// and aborted: it is rolled back here, so that the connection takes the next change.
    fn begin_as(&self, sql: &str) -> Result<()> {
        self.in_transaction.set(true);
        self.begun.set(true);
        self.run(self.client.batch_execute(sql)).inspect_err(|_| {
            crate::store::count::round_trip();
            let _ = self.within(self.client.batch_execute("ROLLBACK"));
            self.in_transaction.set(false);
            self.begun.set(false);
        })
    }

    /// Sends what is queued, then `sql` and `COMMIT` in one round trip (simple-query
    /// text, as [`PgConn::begin_with`]): a change's notification goes this way. Its error
    /// is the first failure; the transaction is then not committed.
    pub fn commit_with(&self, sql: &str) -> Result<()> {
        self.end(&format!("{sql}; COMMIT"))
    }

    /// Sends what is queued and then `sql`, which ends the transaction when it succeeds;
    /// after a failure the transaction counts as open, so that `ROLLBACK` is sent (the
    /// server may still be in it: a statement before the `COMMIT` failed).
    fn end(&self, sql: &str) -> Result<()> {
        self.begun.set(true);
        self.queued
            .borrow_mut()
            .push(Queued::Text(sql.to_owned(), sql.to_owned()));
        let out = self.run(std::future::ready(Ok::<(), tokio_postgres::Error>(())));
        drop(crate::store::count::change());
        if out.is_ok() {
            self.in_transaction.set(false);
            self.begun.set(false);
            self.version_id.set(None);
            self.guessing.set(false);
        }
        out
    }
}

/// The error of a connection that could not be made.
fn not_connected(
    config: &Config,
    tls: &super::tls::Settings,
    e: &tokio_postgres::Error,
) -> StoreError {
    let host = config
        .get_hosts()
        .iter()
        .find_map(|h| match h {
            Host::Tcp(name) => Some(name.as_str()),
            Host::Unix(_) => None,
        })
        .unwrap_or("");
    if let Some(why) = super::tls::explain(e, tls, host) {
        return StoreError::new(
            why.kind,
            format!(
                "cannot connect to PostgreSQL at {}: {}",
                target(config),
                why.reason
            ),
        );
    }
    let err = pg_error(e);
    // Not "lost": it never was connected.
    let kind = match io_source(e) {
        Some(io) => ErrorKind::of_io(io),
        None => err.kind,
    };
    StoreError::new(
        kind,
        format!(
            "cannot connect to PostgreSQL at {}: {}",
            target(config),
            describe(e)
        ),
    )
}

/// How long the client waits for the answer to a round trip (and to connect, unless the
/// URL says `connect_timeout`) before it gives the connection up: `SCRATCHFS_PG_TIMEOUT`
/// seconds (a positive number, fractions allowed), 40 s by default. A server that stopped
/// answering (stopped, frozen, or cut off by the network without a reset) then costs a
/// change `EIO` after this long, not a hang (docs/deploy.md "Partitions"). A value that
/// does not parse is ignored with a warning.
pub fn round_trip_timeout() -> std::time::Duration {
    const DEFAULT: std::time::Duration = std::time::Duration::from_secs(40);
    match std::env::var("SCRATCHFS_PG_TIMEOUT") {
        Err(_) => DEFAULT,
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s < 86_400.0 => {
                std::time::Duration::from_secs_f64(s)
            }
            _ => {
                log::warn!("SCRATCHFS_PG_TIMEOUT {v:?} is not a number of seconds: 40 s");
                DEFAULT
            }
        },
    }
}

/// The server's `lock_timeout` for a round-trip timeout `t`: 10 s less (30 s by
/// default), at least half of it, so that a change waiting for a lock is answered
/// `EAGAIN` before the client gives the round trip up.
fn lock_timeout(t: std::time::Duration) -> std::time::Duration {
    t.saturating_sub(std::time::Duration::from_secs(10))
        .max(t / 2)
}

/// The error of a round trip that got no answer within `t`.
fn unanswered(t: std::time::Duration) -> StoreError {
    StoreError::new(
        ErrorKind::Unavailable,
        format!(
            "PostgreSQL did not answer within {:.1} s (SCRATCHFS_PG_TIMEOUT): the connection \
             is given up and made again at the next change",
            t.as_secs_f64()
        ),
    )
}

/// A blocking connection for what [`Conn`] does not cover: LISTEN and its notifications
/// ([`super::notify`]), and tools and tests that need a plain client. Same URL,
/// environment (TLS included) and errors as [`PgConn::connect`]; for a URL through a
/// pooler in transaction mode, to the server itself (its `direct_*` parameters,
/// [`super::pooler`]), since a `LISTEN` and a session's advisory lock last the session.
pub fn connect_listener(url: &str) -> Result<postgres::Client> {
    let (mut config, tls) = config_from(url, |k| std::env::var(k).ok())?;
    if let Some(pooler) = super::pooler::of(&super::tls::params(url), &config)? {
        config = pooler.direct;
    }
    let connector = super::tls::connector(&tls)?;
    postgres::Config::from(config.clone())
        .connect(connector)
        .map_err(|e| not_connected(&config, &tls, &e))
}

/// For a connection `conn` to `url` through a pooler in transaction mode: the URL's
/// `direct_*` address must reach the same server and database (same `current_database()`,
/// `pg_postmaster_start_time()` and `inet_server_port()`), else the daemon's listener would
/// hear nothing of the other daemons, for as long as it runs (attack round of session 32:
/// a mount with `direct_port=1` ran on, its listener failing in its log only). `EINVAL`
/// naming which, or the direct connection's own error; no-op without a pooler.
pub fn check_direct(url: &str, conn: &PgConn) -> Result<()> {
    if conn.pooled.is_none() {
        return Ok(());
    }
    const WHO: &str = "SELECT CAST(current_database() AS TEXT), \
         CAST(pg_postmaster_start_time() AS TEXT), CAST(inet_server_port() AS TEXT)";
    let pooled: (String, String, Option<String>) =
        conn.one(WHO, &[], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    let mut direct = connect_listener(url).map_err(|mut e| {
        e.reason = format!(
            "the server behind the pooler (direct_host, direct_port): {}",
            e.reason
        );
        e
    })?;
    let row = direct.query_one(WHO, &[]).map_err(StoreError::from)?;
    let seen: (String, String, Option<String>) = (row.get(0), row.get(1), row.get(2));
    if seen != pooled {
        return Err(StoreError::new(
            ErrorKind::Invalid,
            format!(
                "direct_host/direct_port/direct_dbname reach database {} of a server started \
                 {}, the pooler database {} of a server started {}: the listener must be on \
                 the pooler's server and database",
                seen.0, seen.1, pooled.0, pooled.1
            ),
        ));
    }
    Ok(())
}

impl Conn for PgConn {
    fn each(
        &self,
        sql: &str,
        params: &[Param<'_>],
        f: &mut dyn FnMut(&dyn Row) -> Result<Flow>,
    ) -> Result<()> {
        if self.pooled.is_some() && !self.in_transaction.get() {
            return self.alone(|| self.each(sql, params, f));
        }
        let stmt = self.statement(sql)?;
        if self.text_follows()
            && stmt.literal()
            && stmt.columns.iter().all(|(_, ty)| text_column(ty))
        {
            // In the message of the queued text before it (module docs).
            let text = self.execute(sql, params)?;
            self.queued
                .borrow_mut()
                .push(Queued::Query(text, sql.to_owned()));
            self.text_rows.borrow_mut().take();
            if self.ends_alone.replace(false) {
                let commit = "COMMIT".to_owned();
                self.queued
                    .borrow_mut()
                    .push(Queued::Text(commit.clone(), commit));
                let sent = self.run(std::future::ready(Ok::<(), tokio_postgres::Error>(())));
                self.ended_alone(sent)?;
            } else {
                self.run(std::future::ready(Ok::<(), tokio_postgres::Error>(())))?;
            }
            let rows = self.text_rows.borrow_mut().take().ok_or_else(|| {
                StoreError::failed(format!("no result from `{}`", one_line(sql, 160)))
            })?;
            for r in &rows {
                let row = TextRow::new(&stmt.columns, r)?;
                if f(&row)? == Flow::Stop {
                    break;
                }
            }
            return Ok(());
        }
        let params: Vec<PgParam<'_>> = self.resolved(params)?.into_iter().map(PgParam).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        // All rows first, then the visitor: it may run statements of its own on this
        // connection.
        let rows = match &stmt.stmt {
            Some(s) => self.run(self.client.query(s, &refs))?,
            // The protocol's unnamed statement, its types given (a pooler's connection).
            None => {
                let typed: Vec<(&(dyn ToSql + Sync), Type)> = refs
                    .iter()
                    .zip(stmt.params.iter())
                    .map(|(p, t)| (*p, t.clone()))
                    .collect();
                let text = rewrite_placeholders(sql);
                if self.ends_alone.replace(false) {
                    // Both sent before either answer is read: one round trip.
                    let both = futures_util::future::join(
                        self.client.query_typed(&text, &typed),
                        self.client.batch_execute("COMMIT"),
                    );
                    let sent = self.run(async move {
                        let (rows, commit) = both.await;
                        let rows = rows?;
                        commit?;
                        Ok(rows)
                    });
                    self.ended_alone(sent)?
                } else {
                    self.run(self.client.query_typed(&text, &typed))?
                }
            }
        };
        for r in &rows {
            if f(r)? == Flow::Stop {
                break;
            }
        }
        Ok(())
    }

    /// In a transaction, queued: sent with the next statement whose result is needed
    /// (module docs), which then reports its failure.
    fn exec(&self, sql: &str, params: &[Param<'_>]) -> Result<()> {
        if self.pooled.is_some() && !self.in_transaction.get() {
            return self.alone(|| self.exec(sql, params));
        }
        let stmt = self.statement(sql)?;
        if self.in_transaction.get() {
            let bytes: usize = params
                .iter()
                .map(|p| match p {
                    Param::Text(t) => t.len(),
                    Param::Blob(b) => b.len(),
                    _ => 8,
                })
                .sum();
            let queued = if bytes <= LITERAL_MAX && stmt.literal() {
                Queued::Text(self.execute(sql, params)?, sql.to_owned())
            } else {
                Queued::Exec(
                    stmt,
                    self.resolved(params)?
                        .iter()
                        .map(OwnedParam::from)
                        .collect(),
                    sql.to_owned(),
                )
            };
            let bytes = self.queued_bytes.get() + bytes;
            self.queued_bytes.set(bytes);
            self.queued.borrow_mut().push(queued);
            if bytes >= QUEUE_MAX {
                // Sent now; a failure is this call's (the transaction fails whole).
                self.flush()?;
            }
            return Ok(());
        }
        let params: Vec<PgParam<'_>> = params.iter().copied().map(PgParam).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        let Some(s) = &stmt.stmt else {
            return Err(StoreError::failed(
                "a statement outside a transaction through a pooler",
            ));
        };
        self.run(self.client.execute(s, &refs)).map(|_| ())
    }

    /// `BEGIN` is queued; `ROLLBACK` drops what was never sent (and is not sent when the
    /// transaction never was); anything else is sent with what is queued.
    fn batch(&self, sql: &str) -> Result<()> {
        let word = sql.trim().trim_end_matches(';').trim().to_ascii_uppercase();
        match word.as_str() {
            "BEGIN" if !self.in_transaction.get() => {
                let text = self.begin_text()?;
                self.in_transaction.set(true);
                self.begun.set(false);
                self.version_id.set(None);
                self.guessing.set(false);
                self.taken_id.set(None);
                self.queued
                    .borrow_mut()
                    .push(Queued::Begin(text, IdRow::None));
                Ok(())
            }
            "ROLLBACK" => {
                self.version_id.set(None);
                self.guessing.set(false);
                self.queued.borrow_mut().clear();
                self.queued_bytes.set(0);
                self.in_transaction.set(false);
                if self.begun.replace(false) {
                    self.run(self.client.batch_execute(sql))
                } else {
                    Ok(())
                }
            }
            "COMMIT" => self.end(sql),
            _ => match &self.pooled {
                Some(p) if !self.in_transaction.get() => {
                    match super::pooler::qualified_vacuum(sql, &p.schema) {
                        Some(vacuum) => self.run(self.client.batch_execute(&vacuum)),
                        None => self.alone(|| self.batch(sql)),
                    }
                }
                _ => self.run(self.client.batch_execute(sql)),
            },
        }
    }

    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn reserved_id(&self, table: IdOf) -> Result<Option<i64>> {
        if table == IdOf::Versions {
            if self.guessing.get() {
                return Ok(Some(PENDING_VERSION_ID));
            }
            return Ok(self.version_id.take());
        }
        let slot = table as usize;
        if let Some(id) = self.reserved.borrow_mut()[slot].pop() {
            return Ok(Some(id));
        }
        let (t, c) = table.column();
        let mut ids: Vec<i64> = self.all(
            &format!(
                "SELECT nextval(pg_get_serial_sequence('{t}', '{c}'))
                 FROM generate_series(1, {RESERVE})"
            ),
            &[],
            |r| r.get(0),
        )?;
        // Handed out lowest first.
        ids.sort_unstable_by(|a, b| b.cmp(a));
        let id = ids.pop();
        self.reserved.borrow_mut()[slot] = ids;
        Ok(id)
    }
}

/// A parameter kept until its statement is sent ([`Queued`]).
#[derive(Debug, Clone)]
enum OwnedParam {
    Null,
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

impl From<&Param<'_>> for OwnedParam {
    fn from(p: &Param<'_>) -> Self {
        match *p {
            Param::Null => OwnedParam::Null,
            Param::Int(i) => OwnedParam::Int(i),
            Param::Text(s) => OwnedParam::Text(s.to_owned()),
            Param::Blob(b) => OwnedParam::Blob(b.to_vec()),
        }
    }
}

impl ToSql for OwnedParam {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn StdError + Sync + Send>> {
        PgParam(match self {
            OwnedParam::Null => Param::Null,
            OwnedParam::Int(i) => Param::Int(*i),
            OwnedParam::Text(s) => Param::Text(s),
            OwnedParam::Blob(b) => Param::Blob(b),
        })
        .to_sql(ty, out)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// `sql` with each `?N` outside string literals, quoted identifiers and comments turned
/// into `$N`. (The shared SQL has no `?` of its own, and no `E'...'` or dollar-quoted
/// strings, whose quoting this does not follow.)
fn rewrite_placeholders(sql: &str) -> String {
    use std::fmt::Write;
    substitute(sql, |out, n| {
        write!(out, "${n}").expect("a String takes it");
        Some(())
    })
    .expect("every placeholder is written")
}

/// `sql` with each `?N` outside string literals, quoted identifiers and comments replaced
/// by what `put` writes for `N` (see [`rewrite_placeholders`]). `EIO` when `put` says
/// `None` (no value for `N`).
fn substitute(sql: &str, mut put: impl FnMut(&mut String, usize) -> Option<()>) -> Result<String> {
    #[derive(PartialEq)]
    enum In {
        Code,
        /// `'...'` (a doubled `''` leaves and re-enters at once).
        Literal,
        /// `"..."`.
        Identifier,
        /// `-- ...` to the end of the line.
        LineComment,
        /// `/* ... */`.
        BlockComment,
    }
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut copied = 0;
    let mut state = In::Code;
    let mut i = 0;
    while i < b.len() {
        let next = b.get(i + 1).copied();
        match state {
            In::Code => match b[i] {
                b'\'' => state = In::Literal,
                b'"' => state = In::Identifier,
                b'-' if next == Some(b'-') => {
                    state = In::LineComment;
                    i += 1;
                }
                b'/' if next == Some(b'*') => {
                    state = In::BlockComment;
                    i += 1;
                }
                b'?' if next.is_some_and(|c| c.is_ascii_digit()) => {
                    // `?` and digits are ASCII, so these are character boundaries.
                    out.push_str(&sql[copied..i]);
                    let end = (i + 1..b.len())
                        .find(|&j| !b[j].is_ascii_digit())
                        .unwrap_or(b.len());
                    let n: usize = sql[i + 1..end].parse().unwrap_or(0);
                    put(&mut out, n).ok_or_else(|| {
                        StoreError::failed(format!("no value for ?{n} in `{}`", one_line(sql, 160)))
                    })?;
                    copied = end;
                    i = end;
                    continue;
                }
                _ => {}
            },
            In::Literal if b[i] == b'\'' => state = In::Code,
            In::Identifier if b[i] == b'"' => state = In::Code,
            In::LineComment if b[i] == b'\n' => state = In::Code,
            In::BlockComment if b[i] == b'*' && next == Some(b'/') => {
                state = In::Code;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push_str(&sql[copied..]);
    Ok(out)
}

/// A [`Param`] sent as the type PostgreSQL inferred for its placeholder.
///
/// The shared code passes every integer as an `i64`, but PostgreSQL types a placeholder
/// from its context: `INT8` against a BIGINT column, `INT4` in `?1 + 1` or against an
/// `int4` expression such as `length(...)`, `BOOL` in `WHERE ?1` or `?1 AND ...`. So an
/// integer is sent as `INT8`, `INT4` or `INT2` (refused if out of range) or `BOOL` (0 or 1
/// only); text as any text type (`TEXT`, `VARCHAR`, `NAME`, `BPCHAR`, `UNKNOWN`), a NUL in
/// it as [`NUL_SHOWN`]; bytes as
/// `BYTEA`; NULL as any type. Any other pairing (an integer where PostgreSQL inferred
/// `numeric` or `text`, say) is an error saying to `CAST` the placeholder.
///
/// [`ToSql::accepts`] says yes to every type because it cannot see the value (a NULL
/// fits any type); [`ToSql::to_sql`] checks the pairing per value.
#[derive(Debug, Clone, Copy)]
pub struct PgParam<'a>(pub Param<'a>);

impl ToSql for PgParam<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self.0 {
            Param::Null => Ok(IsNull::Yes),
            Param::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(i)
                    .map_err(|_| out_of_range(i, ty))?
                    .to_sql(ty, out),
                Type::INT2 => i16::try_from(i)
                    .map_err(|_| out_of_range(i, ty))?
                    .to_sql(ty, out),
                Type::BOOL => match i {
                    0 => false.to_sql(ty, out),
                    1 => true.to_sql(ty, out),
                    _ => Err(out_of_range(i, ty)),
                },
                _ => Err(mismatch("an integer", ty)),
            },
            Param::Text(s) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR | Type::UNKNOWN => {
                    if s.contains('\0') {
                        s.replace('\0', NUL_SHOWN).to_sql(ty, out)
                    } else {
                        s.to_sql(ty, out)
                    }
                }
                _ => Err(mismatch("text", ty)),
            },
            Param::Blob(b) => match *ty {
                Type::BYTEA => b.to_sql(ty, out),
                _ => Err(mismatch("bytes", ty)),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn out_of_range(i: i64, ty: &Type) -> Box<dyn StdError + Sync + Send> {
    format!(
        "the integer {i} does not fit the type {ty} PostgreSQL inferred for the placeholder \
         (CAST it AS BIGINT)"
    )
    .into()
}

fn mismatch(what: &str, ty: &Type) -> Box<dyn StdError + Sync + Send> {
    format!(
        "the parameter is {what}, but PostgreSQL inferred the type {ty} for its placeholder \
         (CAST the placeholder to the type of the value)"
    )
    .into()
}

/// A column's raw bytes, whatever its type (to tell NULL apart before decoding).
struct Raw<'a>(&'a [u8]);

impl<'a> FromSql<'a> for Raw<'a> {
    fn from_sql(
        _: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn StdError + Sync + Send>> {
        Ok(Raw(raw))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Column values by the column's type: `INT2`, `INT4`, `INT8` as integers, `BOOL` as 0
/// or 1, `TEXT`, `VARCHAR`, `NAME`, `BPCHAR` (and an untyped literal, `UNKNOWN`) as text,
/// `BYTEA` as bytes, NULL as NULL. Any other type is `EIO` even when the value is NULL,
/// so that a statement selecting it fails on its first run, not only once it returns a
/// value: `NUMERIC` (what `SUM` over a BIGINT gives) with a message saying to CAST the
/// sum to BIGINT, others naming the type.
impl Row for tokio_postgres::Row {
    fn value(&self, i: usize) -> Result<Value<'_>> {
        let Some(col) = self.columns().get(i) else {
            return Err(StoreError::failed(format!(
                "column {i}: no such column (the row has {})",
                self.len()
            )));
        };
        let ty = col.type_();
        match *ty {
            Type::BYTEA => {}
            ref t if text_column(t) => {}
            Type::NUMERIC => {
                return Err(StoreError::failed(format!(
                    "column {i} ({}) is numeric: CAST the sum (or expression) AS BIGINT",
                    col.name()
                )));
            }
            _ => {
                return Err(StoreError::failed(format!(
                    "column {i} ({}) has the type {ty}, which the store never reads",
                    col.name()
                )));
            }
        }
        let Some(Raw(raw)) = self.try_get::<_, Option<Raw<'_>>>(i)? else {
            return Ok(Value::Null);
        };
        let bad = |e: Box<dyn StdError + Sync + Send>| {
            StoreError::failed(format!("column {i} ({}): {e}", col.name()))
        };
        Ok(match *ty {
            Type::INT2 => Value::Int(i16::from_sql(ty, raw).map_err(bad)?.into()),
            Type::INT4 => Value::Int(i32::from_sql(ty, raw).map_err(bad)?.into()),
            Type::INT8 => Value::Int(i64::from_sql(ty, raw).map_err(bad)?),
            Type::BOOL => Value::Int(bool::from_sql(ty, raw).map_err(bad)?.into()),
            Type::BYTEA => Value::Blob(raw),
            _ => Value::Text(<&str>::from_sql(ty, raw).map_err(bad)?),
        })
    }
}

/// Whether a column of type `ty` is read from its text form ([`TextRow`]): the types
/// [`Row`] reads, but for `BYTEA` (whose text form is twice its size: a query selecting
/// bytes goes in the extended protocol, in binary).
fn text_column(ty: &Type) -> bool {
    matches!(
        *ty,
        Type::INT2
            | Type::INT4
            | Type::INT8
            | Type::BOOL
            | Type::TEXT
            | Type::VARCHAR
            | Type::NAME
            | Type::BPCHAR
            | Type::UNKNOWN
    )
}

/// A row of a query sent as simple-query text ([`Queued::Query`]): its values in their
/// text form, read by the types the statement's columns have ([`text_column`]): an
/// integer in decimal, a boolean `t` or `f` (1 or 0), text as it is, NULL as NULL.
struct TextRow<'a> {
    /// The statement's columns: names and types.
    columns: &'a [(String, Type)],
    row: &'a tokio_postgres::SimpleQueryRow,
}

impl<'a> TextRow<'a> {
    /// `EIO` when the row does not have the statement's columns.
    fn new(columns: &'a [(String, Type)], row: &'a tokio_postgres::SimpleQueryRow) -> Result<Self> {
        if row.len() != columns.len() {
            return Err(StoreError::failed(format!(
                "a row of {} columns from a statement of {}",
                row.len(),
                columns.len()
            )));
        }
        Ok(TextRow { columns, row })
    }
}

impl Row for TextRow<'_> {
    fn value(&self, i: usize) -> Result<Value<'_>> {
        let Some((name, ty)) = self.columns.get(i) else {
            return Err(StoreError::failed(format!(
                "column {i}: no such column (the row has {})",
                self.columns.len()
            )));
        };
        let Some(text) = self.row.get(i) else {
            return Ok(Value::Null);
        };
        let bad = || {
            StoreError::failed(format!(
                "column {i} ({}): `{}` is not a {}",
                name,
                one_line(text, 40),
                ty
            ))
        };
        Ok(match *ty {
            Type::INT2 | Type::INT4 | Type::INT8 => {
                Value::Int(text.parse::<i64>().map_err(|_| bad())?)
            }
            Type::BOOL => match text {
                "t" => Value::Int(1),
                "f" => Value::Int(0),
                _ => return Err(bad()),
            },
            ref ty if text_column(ty) => Value::Text(text),
            _ => return Err(bad()),
        })
    }
}

/// The store's error for a PostgreSQL failure, its kind by SQLSTATE (never by message;
/// the errno is the kind's, [`ErrorKind::errno`]):
///
/// - `23505` unique_violation → [`ErrorKind::Exists`] (`EEXIST`; the shared code's
///   unique-key conflict);
/// - `40001` serialization_failure, `40P01` deadlock_detected → [`ErrorKind::Conflict`]
///   (`EAGAIN`): the transaction lost to a concurrent one and may be retried from its
///   start;
/// - `55P03` lock_not_available (a lock waited for longer than `lock_timeout`) →
///   [`ErrorKind::Conflict`];
/// - `53100` disk_full → [`ErrorKind::Full`] (`ENOSPC`);
/// - `3D000` invalid_catalog_name (the URL's database does not exist) →
///   [`ErrorKind::NotFound`] (`ENOENT`);
/// - `25006` read_only_sql_transaction → [`ErrorKind::ReadOnly`] (`EROFS`; a read-only
///   standby, say);
/// - `42501` insufficient_privilege, `28000` invalid_authorization_specification,
///   `28P01` invalid_password → [`ErrorKind::Denied`] (`EACCES`);
/// - `57P01` admin_shutdown, `57P02` crash_shutdown, `57P03` cannot_connect_now, a
///   closed connection or an I/O error → [`ErrorKind::Unavailable`] (`EIO`), the reason
///   saying the connection to PostgreSQL was lost;
/// - anything else → [`ErrorKind::Failed`] (`EIO`), "store: " and the server's message.
pub fn pg_error(e: &tokio_postgres::Error) -> StoreError {
    let lost = || {
        StoreError::new(
            ErrorKind::Unavailable,
            format!(
                "store: the connection to PostgreSQL was lost: {}",
                describe(e)
            ),
        )
    };
    let Some(db) = e.as_db_error() else {
        if e.is_closed() || io_source(e).is_some() {
            return lost();
        }
        return StoreError::failed(describe(e));
    };
    let (kind, note) = match db.code().code() {
        "23505" => (ErrorKind::Exists, ""),
        "40001" | "40P01" => (
            ErrorKind::Conflict,
            " (a concurrent transaction conflicted with this one: retry the transaction)",
        ),
        "55P03" => (
            ErrorKind::Conflict,
            " (another daemon or session held the lock longer than lock_timeout, 30 s)",
        ),
        "53100" => (ErrorKind::Full, ""),
        "3D000" => (ErrorKind::NotFound, ""),
        "25006" => (ErrorKind::ReadOnly, ""),
        "42501" | "28000" | "28P01" => (ErrorKind::Denied, ""),
        "57P01" | "57P02" | "57P03" => return lost(),
        "22012" => (ErrorKind::Guessed, ""),
        _ => (ErrorKind::Failed, ""),
    };
    StoreError::new(kind, format!("store: {}{note}", describe(e)))
}

/// Whether `e` is a guard's failure ([`ErrorKind::Guessed`]): PostgreSQL's
/// `division_by_zero` (SQLSTATE 22012), which the store's guards raise to fail a
/// transaction sent in one round trip on a guess that turned out wrong
/// (`write::NO_DELETED_LINEAGE`, `write::HEAD_IS`); the store then makes the change again
/// the long way. (An actual division by zero elsewhere would be made again the same way,
/// and fail there as itself: [`ErrorKind::Guessed`] too, which is `EIO`.)
pub fn is_guard(e: &StoreError) -> bool {
    e.kind == ErrorKind::Guessed
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        pg_error(&e)
    }
}

/// The I/O error under `e`, if it is one (a broken or refused socket).
fn io_source(e: &tokio_postgres::Error) -> Option<&std::io::Error> {
    e.source()?.downcast_ref::<std::io::Error>()
}

/// One line saying what failed: the server's message, SQLSTATE, detail and hint for a
/// server error; else the client's message and its cause (the client's `Display` alone
/// says only "db error" or "error serializing parameter 1").
fn describe(e: &tokio_postgres::Error) -> String {
    let s = match e.as_db_error() {
        Some(db) => {
            let mut s = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(d) = db.detail() {
                s.push_str(&format!(": {d}"));
            }
            if let Some(h) = db.hint() {
                s.push_str(&format!(" (hint: {h})"));
            }
            s
        }
        None => match e.source() {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    };
    one_line(&s, usize::MAX)
}

/// `s` on one line (newlines and runs of spaces as one space), at most `max` characters.
fn one_line(s: &str, max: usize) -> String {
    let words: Vec<&str> = s.split_whitespace().collect();
    let line = words.join(" ");
    match line.char_indices().nth(max) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

/// `host:port/dbname as user` for messages (never the password).
fn target(config: &Config) -> String {
    let ports = config.get_ports();
    let port = |i: usize| {
        ports
            .get(i)
            .or_else(|| ports.first())
            .copied()
            .unwrap_or(5432)
    };
    let mut hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| match h {
            Host::Tcp(name) => format!("{name}:{}", port(i)),
            Host::Unix(dir) => format!("{}/.s.PGSQL.{}", dir.display(), port(i)),
        })
        .collect();
    if hosts.is_empty() {
        hosts = config
            .get_hostaddrs()
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{a}:{}", port(i)))
            .collect();
    }
    let mut s = hosts.join(",");
    if let Some(db) = config.get_dbname() {
        s.push_str(&format!("/{db}"));
    }
    if let Some(user) = config.get_user() {
        s.push_str(&format!(" as {user}"));
    }
    s
}

/// The client configuration for `url`, with libpq's environment defaults (`env` reads a
/// variable) for what the URL does not give, and its TLS settings; see
/// [`PgConn::connect`].
fn config_from(
    url: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(Config, super::tls::Settings)> {
    let invalid = |what: String| StoreError::new(ErrorKind::Invalid, what);
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let (rest, tls) = super::tls::split(url, &env, home.as_deref())?;
    let env = |k: &str| env(k).filter(|v| !v.is_empty());
    let mut config = Config::from_str(&super::store::with_lower_scheme(&rest))
        .map_err(|e| invalid(format!("invalid PostgreSQL URL: {}", describe(&e))))?;
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        let Some(hosts) = env("PGHOST") else {
            return Err(invalid(
                "the PostgreSQL URL names no host and PGHOST is not set".to_owned(),
            ));
        };
        for h in hosts.split(',') {
            config.host(h.trim());
        }
    }
    if config.get_ports().is_empty()
        && let Some(ports) = env("PGPORT")
    {
        for p in ports.split(',') {
            let port = p
                .trim()
                .parse::<u16>()
                .map_err(|_| invalid(format!("PGPORT {p:?} is not a port number")))?;
            config.port(port);
        }
    }
    if config.get_user().is_none()
        && let Some(user) = env("PGUSER")
    {
        config.user(&user);
    }
    if config.get_password().is_none()
        && let Some(password) = env("PGPASSWORD")
    {
        config.password(password);
    }
    if config.get_dbname().is_none()
        && let Some(db) = env("PGDATABASE")
    {
        config.dbname(&db);
    }
    config.ssl_mode(tls.mode.ssl_mode());
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(round_trip_timeout());
    }
    Ok((config, tls))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_postgres::config::SslMode;

    #[test]
    fn placeholders_are_rewritten_outside_quotes_and_comments() {
        assert_eq!(
            rewrite_placeholders("SELECT ?1, ?12 FROM t WHERE a = ?2"),
            "SELECT $1, $12 FROM t WHERE a = $2"
        );
        assert_eq!(
            rewrite_placeholders(r#"SELECT '?1', 'it''s ?2', "odd?3" FROM t WHERE x = ?3"#),
            r#"SELECT '?1', 'it''s ?2', "odd?3" FROM t WHERE x = $3"#
        );
        assert_eq!(
            rewrite_placeholders("SELECT ?1 -- not ?2\n, ?3 /* nor ?4 */ , ?5"),
            "SELECT $1 -- not ?2\n, $3 /* nor ?4 */ , $5"
        );
        assert_eq!(
            rewrite_placeholders("SELECT 'é?1' || ?1"),
            "SELECT 'é?1' || $1"
        );
        assert_eq!(rewrite_placeholders("a ? b ?"), "a ? b ?");
    }

    #[test]
    fn statements_through_a_pooler_carry_typed_literals_and_by_name_the_same_values() {
        let types = [Type::INT8, Type::TEXT, Type::BYTEA, Type::BOOL];
        let params = [
            Param::Int(PENDING_VERSION_ID),
            Param::Text("it's ?2"),
            Param::Blob(&[0, 255]),
            Param::Int(1),
        ];
        let sql =
            "INSERT INTO t(a, b, c, d) VALUES (?1, ?2, ?3, ?4) -- not ?9\n RETURNING '?1', ?1";
        assert_eq!(
            execute_text(Form::Inline(sql), &types, &params, Some("currval('s')")).unwrap(),
            "INSERT INTO t(a, b, c, d) VALUES (CAST(currval('s') AS int8), \
             CAST(E'it''s ?2' AS text), CAST(E'\\\\x00ff' AS bytea), CAST(true AS bool)) \
             -- not ?9\n RETURNING '?1', CAST(currval('s') AS int8)"
        );
        assert_eq!(
            execute_text(Form::Execute("scratchfs_1"), &types, &params, None).unwrap(),
            format!("EXECUTE scratchfs_1({PENDING_VERSION_ID}, E'it''s ?2', E'\\\\x00ff', true)")
        );
        assert_eq!(
            execute_text(Form::Execute("scratchfs_2"), &[], &[], None).unwrap(),
            "EXECUTE scratchfs_2"
        );
        // A placeholder without a value, a value that does not fit: refused.
        let e = execute_text(
            Form::Inline("SELECT ?2"),
            &[Type::INT8],
            &[Param::Int(1)],
            None,
        )
        .unwrap_err();
        assert!(e.reason.contains("no value for ?2"), "{}", e.reason);
        let e = execute_text(
            Form::Inline("SELECT ?1"),
            &[Type::INT2],
            &[Param::Int(1 << 20)],
            None,
        )
        .unwrap_err();
        assert!(
            e.reason.contains("does not fit the type int2"),
            "{}",
            e.reason
        );
    }

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| vars.get(k).cloned()
    }

    #[test]
    fn the_url_wins_over_the_environment() {
        let env = env_of(&[
            ("PGHOST", "elsewhere"),
            ("PGPORT", "1"),
            ("PGUSER", "u2"),
            ("PGDATABASE", "d2"),
            ("PGPASSWORD", "p2"),
            ("PGSSLMODE", "require"),
        ]);
        let c = config_from("postgresql://u:pw@db.example:6000/d?sslmode=disable", &env)
            .unwrap()
            .0;
        assert_eq!(c.get_hosts(), &[Host::Tcp("db.example".into())]);
        assert_eq!(c.get_ports(), &[6000]);
        assert_eq!(c.get_user(), Some("u"));
        assert_eq!(c.get_password(), Some(&b"pw"[..]));
        assert_eq!(c.get_dbname(), Some("d"));
        assert_eq!(c.get_ssl_mode(), SslMode::Disable);
        assert_eq!(target(&c), "db.example:6000/d as u");
    }

    #[test]
    fn the_environment_fills_in() {
        let env = env_of(&[
            ("PGHOST", "h1,/run/pg"),
            ("PGPORT", "5433"),
            ("PGUSER", "u2"),
            ("PGDATABASE", "d2"),
            ("PGPASSWORD", "p2"),
            ("PGSSLMODE", "disable"),
        ]);
        let c = config_from("postgres://", &env).unwrap().0;
        assert_eq!(
            c.get_hosts(),
            &[Host::Tcp("h1".into()), Host::Unix("/run/pg".into())]
        );
        assert_eq!(c.get_ports(), &[5433]);
        assert_eq!(c.get_user(), Some("u2"));
        assert_eq!(c.get_password(), Some(&b"p2"[..]));
        assert_eq!(c.get_dbname(), Some("d2"));
        assert_eq!(c.get_ssl_mode(), SslMode::Disable);
    }

    #[test]
    fn tls_and_bad_values_are_refused() {
        let (c, tls) = config_from("postgres://h/d?sslmode=require", env_of(&[])).unwrap();
        assert_eq!(c.get_ssl_mode(), SslMode::Require);
        assert_eq!(tls.mode, super::super::tls::Mode::Require);
        let e = config_from("postgres://h/d", env_of(&[("PGSSLMODE", "verify-full")])).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert!(e.reason.contains("needs a root certificate"), "{e}");
        let e = config_from("postgres://h/d", env_of(&[("PGSSLMODE", "allow")])).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid);
        let e = config_from("postgres://h/d?sslmod=require", env_of(&[])).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert!(e.reason.contains("sslmod"), "{e}");
        let e = config_from("postgres:///d", env_of(&[])).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert!(e.reason.contains("PGHOST"), "{e}");
        let e = config_from("postgres://u:secret@h:notaport/d", env_of(&[])).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert!(!e.reason.contains("secret"), "{e}");
        let e =
            config_from("postgres:///d", env_of(&[("PGHOST", "h"), ("PGPORT", "x")])).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid);
    }

    #[test]
    fn transactions_take_the_change_lock_a_checkpoint_takes() {
        for exclusive in [false, true] {
            let sql = change_lock_sql(exclusive);
            let f = if exclusive {
                "pg_advisory_xact_lock("
            } else {
                "pg_advisory_xact_lock_shared("
            };
            assert!(sql.contains(&format!("{f}{CHANGE_LOCK})")), "{sql}");
            assert!(
                sql.contains(&format!("{f}{CHANGE_LOCK_CLASS}, hashtext(")),
                "{sql}"
            );
        }
    }

    #[test]
    fn the_lock_timeout_stays_under_the_round_trip_timeout() {
        use std::time::Duration;
        assert_eq!(
            lock_timeout(Duration::from_secs(40)),
            Duration::from_secs(30)
        );
        assert_eq!(lock_timeout(Duration::from_secs(4)), Duration::from_secs(2));
        assert_eq!(
            lock_timeout(Duration::from_secs(16)),
            Duration::from_secs(8)
        );
        for s in [1, 3, 10, 25, 40, 600] {
            assert!(lock_timeout(Duration::from_secs(s)) < Duration::from_secs(s));
        }
    }

    #[test]
    fn one_line_cuts() {
        assert_eq!(one_line("a\n  b\tc", 10), "a b c");
        assert_eq!(one_line("abcdef", 3), "abc...");
    }
}
