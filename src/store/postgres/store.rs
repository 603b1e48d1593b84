//! The [`Postgres`] store: a scratchpad in a PostgreSQL database, for mounts on several
//! hosts (issue 15). Every change is one PostgreSQL transaction that runs the shared store
//! code (src/store/sql) and is committed before the change is answered: acknowledged =
//! committed (no redo log). After each commit the daemon sends `NOTIFY scratchfs` with
//! what changed, so the other daemons drop what they cached ([`super::notify`]).
//!
//! Concurrency between daemons: a commit first locks its lineage's `files` row (`FOR
//! UPDATE`), so commits to one file are serialized across daemons, its version numbers
//! stay gap-free and ordered, and the lost-update check sees the real head; two creates of
//! one name meet the unique index `nodes_by_name` (the loser gets `EEXIST`); a lost
//! connection (PostgreSQL restarted, the network down) fails the change with `EIO` and the
//! next change connects again, without a remount.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::conn::PENDING_VERSION_ID;
use super::{PgConn, is_guard};
use crate::identity::Caller;
use crate::p;
use crate::store::error::{ErrorKind, Result, StoreError};
use crate::store::sql::write::{
    Applied, LineageLookup, NodeHead, Proc, Processes, commit_guessing, create_in, ino_at,
    note_read_in, record_rules_in, reject_in, rename_in, set_attrs_in, unlink_in,
};
use crate::store::sql::{Conn, ConnExt, admin, checkpoint, history_index, now_ns, text_index};
use crate::store::{
    Attrs, CommitRequest, Committed, GcReport, GcRequest, Kind, NodeRecord, Reading, RedactReport,
    RenameRequest, Store, VersionInfo,
};
use crate::store::{ForgetBatch, Forgot, Refused};
use crate::sync::Mutex;

/// Reading connections per store (besides the writer). One: a daemon holds at most
/// three connections while mounted (the writer, this reader, the listener; a gc opens a
/// fourth for its wait), so that 1,000 mounted scratchpads fit a server's
/// `max_connections` behind a pooler (docs/deploy.md "Many scratchpads", issue 34). A
/// read waits for another daemon thread's read on it.
const READERS: usize = 1;

/// An advisory lock key (`SCRF` in ASCII) that serializes schema creation between
/// daemons opening one fresh database at once: alone for the `public` schema's
/// scratchpad (as before, so earlier daemons take the same), and with `hashtext(NAME)`
/// as its second key for the scratchpad in schema NAME ([`SCHEMA_LOCK_SQL`]), so that a
/// role that holds one scratchpad's (advisory locks carry no privilege) stalls the
/// mounts of that scratchpad only, not of every one in the database.
pub(super) const SCHEMA_LOCK: i32 = 0x5343_5246;

/// Takes [`SCHEMA_LOCK`] for the session's current schema, until the transaction ends.
const SCHEMA_LOCK_SQL: &str = "SELECT CASE WHEN COALESCE(current_schema() = 'public', TRUE) \
     THEN pg_advisory_xact_lock(1396920902) \
     ELSE pg_advisory_xact_lock(1396920902, hashtext(current_schema())) END";

/// Takes [`SCHEMA_LOCK`] for the scratchpad in schema `name` (not `public`), until the
/// transaction ends: what `scratchfs pads` takes.
pub(super) fn lock_schema(c: &dyn Conn, name: &str) -> Result<()> {
    c.exec(
        "SELECT pg_advisory_xact_lock(?1, hashtext(CAST(?2 AS TEXT)))",
        p![SCHEMA_LOCK, name],
    )
}

/// Schema version written to `meta.schema_version` (as SQLite's).
pub(super) const SCHEMA_VERSION: &str = "1";

/// A connection slot: `None` until connected, and again after the connection was lost.
type Slot = Mutex<Option<PgConn>>;

/// The PostgreSQL implementation of [`Store`].
pub struct Postgres {
    /// The URL as given (never printed: it may hold a password).
    url: String,
    /// Where the database is, for messages: host, port and database name.
    name: String,
    writer: Slot,
    readers: Vec<Slot>,
    next_reader: AtomicUsize,
    /// `processes` row ids by caller facts.
    processes: Processes,
    /// Opened to read the past (`mount --at`): every change is refused with `EROFS`.
    frozen: bool,
    /// This store's name in notifications (random per open), so its listener can tell
    /// its own changes from other daemons'.
    daemon: String,
    /// The backend pid of this daemon's listening connection while it is up (0: none;
    /// [`super::notify::Listener::pid`]): its own gc does not wait for it.
    listener_pid: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// Set by [`Store::finish`] before it sends its listener the `stop` notification:
    /// the listener stops at that notification only then, so that another session of the
    /// role that sends the same text cannot end this daemon's listening
    /// ([`super::notify::Listener::stop`]).
    listener_stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The heads of the files this daemon committed or made last, that their next commit
    /// is built on in one round trip.
    heads: std::sync::Arc<Heads>,
    /// This scratchpad's channel and daemons' lock ([`super::notify::PadKeys`]).
    keys: super::notify::PadKeys,
}

/// How many files' heads [`Heads`] keeps (all are dropped past it): a few MB at most.
const HEADS_MAX: usize = 4096;

/// The heads of the files a daemon committed (or made) last, by inode, as
/// `write::node_head` would read them: its next commit of such a file is built on this
/// guess, and sent in one round trip with a guard that fails it when the guess is wrong
/// (`write::commit_guessing`), after which it is made again the long way (two round
/// trips). A commit takes its file's entry and puts back the head it made. What may move
/// a head is dropped from here: this daemon's unlinks, renames, attribute changes (one
/// file), redactions, rollbacks and gcs (all), and what its listener hears of other
/// daemons' changes ([`Heads::forget`]). Whatever is missed costs a round trip, never a
/// wrong commit: the guard checks every column the head is made of.
#[derive(Debug, Default)]
pub struct Heads(Mutex<std::collections::HashMap<u64, NodeHead>>);

impl Heads {
    /// The head kept for inode `ino`, taken out.
    fn take(&self, ino: u64) -> Option<NodeHead> {
        self.0.lock().remove(&ino)
    }

    /// Keeps `head` as inode `ino`'s.
    fn keep(&self, ino: u64, head: NodeHead) {
        let mut heads = self.0.lock();
        if heads.len() >= HEADS_MAX {
            heads.clear();
        }
        heads.insert(ino, head);
    }

    /// Drops inode `ino`'s head.
    fn drop_one(&self, ino: u64) {
        self.0.lock().remove(&ino);
    }

    /// Drops every head.
    fn clear(&self) {
        self.0.lock().clear();
    }

    /// Drops what changes another daemon committed may have moved: a file's new version,
    /// its head; a change of the tree (or a lost connection, which may have missed some),
    /// all.
    pub fn forget(&self, changes: &[super::notify::Change]) {
        for c in changes {
            match *c {
                Touched::File { ino, .. } => self.drop_one(ino),
                Touched::Node { ino, replaced } => {
                    self.drop_one(ino);
                    self.drop_one(replaced);
                }
                Touched::Tree => return self.clear(),
                _ => {}
            }
        }
    }
}

/// How long a gc waits for every other live daemon to say what its open handles read
/// (30 s; then `EBUSY`, naming the silent ones, and nothing is deleted).
const GC_ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether `db` names a PostgreSQL database (`postgres://` or `postgresql://`, the
/// scheme in any case, as RFC 3986 §3.1 has it: `POSTGRES://` is a URL, not a file name).
pub fn is_url(db: &str) -> bool {
    scheme_len(db).is_some()
}

/// The length of `db`'s `postgres://` or `postgresql://` (any case), if it starts so.
fn scheme_len(db: &str) -> Option<usize> {
    ["postgres://", "postgresql://"].into_iter().find_map(|s| {
        let head = db.as_bytes().get(..s.len())?;
        head.eq_ignore_ascii_case(s.as_bytes()).then_some(s.len())
    })
}

/// `url` with its scheme in lower case, as the client library parses it.
pub(crate) fn with_lower_scheme(url: &str) -> std::borrow::Cow<'_, str> {
    match scheme_len(url) {
        Some(n) if !url[..n].bytes().all(|b| !b.is_ascii_uppercase()) => {
            format!("{}{}", url[..n].to_ascii_lowercase(), &url[n..]).into()
        }
        _ => url.into(),
    }
}

/// `host:port/dbname` of a URL, without user or password, for messages.
pub fn display_name(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    format!("postgres://{rest}")
}

/// blake3 of the PostgreSQL schema text ([`super::SCHEMA`]), 16 hex digits: `meta`'s
/// `schema_sql` says which text made (or last updated) a scratchpad's tables.
pub(super) fn schema_hash() -> String {
    blake3::hash(super::SCHEMA.as_bytes()).to_hex()[..16].to_string()
}

/// Whether the scratchpad's tables were made by this build's schema text.
fn schema_is_current(c: &dyn Conn) -> Result<bool> {
    let stored: Option<String> =
        c.opt_value("SELECT value FROM meta WHERE key = 'schema_sql'", p![])?;
    Ok(stored.as_deref() == Some(schema_hash().as_str()))
}

/// Whether the current schema holds a scratchpad: a table `meta` with columns `key` and
/// `value` and the row `schema_version` (written with the tables, in their transaction).
fn holds_scratchpad(c: &dyn Conn) -> Result<bool> {
    let meta: i64 = c.value(
        "SELECT COUNT(*) FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = 'meta'
           AND column_name IN ('key', 'value')",
        p![],
    )?;
    if meta < 2 {
        return Ok(false);
    }
    c.value(
        "SELECT EXISTS (SELECT 1 FROM meta WHERE key = 'schema_version')",
        p![],
    )
}

/// The tables schema.sql creates, by name.
fn store_tables() -> Vec<&'static str> {
    super::SCHEMA
        .lines()
        .filter_map(|l| l.strip_prefix("CREATE TABLE IF NOT EXISTS "))
        .filter_map(|rest| rest.split([' ', '(']).next())
        .collect()
}

/// Refuses a schema without a scratchpad that has tables by the names of the store's
/// (another application's: `CREATE TABLE IF NOT EXISTS` would leave them as they are, and
/// the store would then fail on them with an error about their columns). `EINVAL`,
/// naming them (`name`: the database, without credentials).
fn refuse_foreign_tables(c: &dyn Conn, name: &str) -> Result<()> {
    let ours = store_tables();
    let present: Vec<String> = c.all(
        "SELECT table_name FROM information_schema.tables
         WHERE table_schema = current_schema() ORDER BY 1",
        p![],
        |r| r.get(0),
    )?;
    let clash: Vec<&str> = present
        .iter()
        .map(String::as_str)
        .filter(|t| ours.contains(t))
        .collect();
    if clash.is_empty() {
        return Ok(());
    }
    Err(StoreError::new(
        ErrorKind::Invalid,
        format!(
            "{name}: its schema has tables named as scratchfs's ({}) but holds no scratchpad \
             (no meta row schema_version): give scratchfs an empty database, or a schema of \
             its own (?options=-csearch_path%3DNAME in the URL)",
            clash.join(", ")
        ),
    ))
}

impl Postgres {
    /// Connects to the database `url` names (libpq's URL and environment variables,
    /// [`PgConn::connect`]), creates the schema when it is not there (several daemons at
    /// once take turns: an advisory lock), and gives a new scratchpad its root directory
    /// owned by `owner` (uid, gid). Returns the store and whether the scratchpad is new.
    /// Errors: `ECONNREFUSED` and the like when the server cannot be reached, `EACCES`
    /// when it refuses the login or the role may not create the tables, else `EIO`.
    pub fn open(url: &str, owner: (u32, u32)) -> Result<(Postgres, bool)> {
        let name = display_name(url);
        let conn = PgConn::connect(url)?;
        super::conn::check_direct(url, &conn)?;
        let fresh = conn
            .transaction(|c| {
                c.batch(SCHEMA_LOCK_SQL)?;
                // No schema of the search path that this role may use (a name mistyped,
                // or another scratchpad's schema): nothing is created, whatever the role.
                let schema: Option<String> =
                    c.value("SELECT CAST(current_schema() AS TEXT)", p![])?;
                if schema.is_none() {
                    let path: String = c.value("SELECT current_setting('search_path')", p![])?;
                    return Err(StoreError::new(
                        ErrorKind::Denied,
                        format!(
                            "no schema of the search path ({path}) exists that this \
                             role may use; nothing was created (a scratchpad's schema is \
                             made and granted by its owner: docs/deploy.md \"Many \
                             scratchpads\")"
                        ),
                    ));
                }
                // A session's temporary schema (search_path pg_temp) would hold tables
                // that go with the session.
                if schema.as_deref().is_some_and(|s| s.starts_with("pg_")) {
                    return Err(StoreError::new(
                        ErrorKind::Invalid,
                        format!(
                            "the search path's first schema, {}, is PostgreSQL's own (a \
                             temporary or system schema); nothing was created",
                            schema.unwrap_or_default()
                        ),
                    ));
                }
                let holds = holds_scratchpad(c)?;
                if holds {
                    super::pads::refuse_archived(c)?;
                } else {
                    refuse_foreign_tables(c, &name)?;
                }
                // The schema's statements need the right to create in the schema (and
                // to own its views); a host role has only rows (docs/deploy.md "Roles"):
                // they run when the schema text differs from the one that made the
                // tables (a new scratchpad, or a scratchfs that changed it), and only
                // then need the owner.
                if !(holds && schema_is_current(c)?) {
                    let public = schema.as_deref() == Some("public");
                    c.batch(super::SCHEMA).map_err(|e| {
                        if e.is(ErrorKind::Denied) && public && !holds {
                            // Most likely a host role's URL without its scratchpad's
                            // search path: mounting as the owner is not the answer.
                            StoreError::new(
                                ErrorKind::Denied,
                                format!(
                                    "{}; the search path is public, which holds no \
                                     scratchpad: a scratchpad made by `scratchfs pads \
                                     create NAME` is mounted with \
                                     options=-csearch_path%3DNAME in the URL \
                                     (docs/deploy.md \"Many scratchpads\")",
                                    e.reason
                                ),
                            )
                        } else if e.is(ErrorKind::Denied) {
                            StoreError::new(
                                ErrorKind::Denied,
                                format!(
                                    "{}; the tables of this scratchpad must be made or \
                                     brought up to date by a role that may create in its \
                                     schema (mount once as its owner: docs/deploy.md \
                                     \"Roles\")",
                                    e.reason
                                ),
                            )
                        } else {
                            e
                        }
                    })?;
                    c.exec(
                        "INSERT INTO meta(key, value) VALUES ('schema_sql', ?1)
                         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        p![&schema_hash()],
                    )?;
                }
                let fresh = c.value::<i64>("SELECT COUNT(*) FROM nodes", p![])? == 0;
                if fresh {
                    let now = now_ns();
                    c.exec(
                        "INSERT INTO nodes(ino, parent, name, kind, mode, uid, gid, atime_ns,
                             mtime_ns, ctime_ns)
                         VALUES (1, NULL, ?1, 'dir', 493, ?2, ?3, ?4, ?4, ?4)",
                        p![&b""[..], owner.0, owner.1, now],
                    )?;
                    c.exec(
                        "INSERT INTO meta(key, value) VALUES ('schema_version', ?1)
                         ON CONFLICT(key) DO NOTHING",
                        p![SCHEMA_VERSION],
                    )?;
                }
                c.exec(
                    "INSERT INTO meta(key, value) VALUES ('scratchpad_id', ?1)
                     ON CONFLICT(key) DO NOTHING",
                    p![&crate::store::sql::new_scratchpad_id(&name)],
                )?;
                Ok(fresh)
            })
            .map_err(|e| e.context(format_args!("opening {name}")))?;
        checkpoint::seed_tree_log(&conn).map_err(|e| e.context(format_args!("opening {name}")))?;
        if let Some(when) =
            conn.opt_value::<String>("SELECT value FROM meta WHERE key = 'retired'", p![])?
        {
            return Err(crate::store::sqlite::retired(&name, &when));
        }
        let (schema, secret): (String, String) = conn.one(
            "SELECT CAST(current_schema() AS TEXT),
                    (SELECT value FROM meta WHERE key = 'scratchpad_id')",
            p![],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let mut store = Self::with_writer(url, name, Some(conn), false);
        store.keys = super::notify::PadKeys::of_pad(&schema, &secret);
        Ok((store, fresh))
    }

    /// Makes a new scratchpad in the database `url` names, in one transaction: the schema,
    /// then `fill` writes its rows (a fork with history: [`crate::store::fork_full`]).
    /// Nothing stays when `fill` fails. `EEXIST` when the database holds a scratchpad
    /// already (creating the database itself is the administrator's: docs/deploy.md).
    pub fn create_with(url: &str, fill: impl FnOnce(&dyn Conn) -> Result<()>) -> Result<()> {
        let name = display_name(url);
        let conn = PgConn::connect(url)?;
        conn.transaction(|c| {
            c.batch(SCHEMA_LOCK_SQL)?;
            if holds_scratchpad(c)? {
                return Err(StoreError::new(
                    ErrorKind::Exists,
                    format!("{name}: holds a scratchpad already"),
                ));
            }
            refuse_foreign_tables(c, &name)?;
            c.batch(super::SCHEMA)?;
            // A new database nobody else uses: its transaction may wait on the source
            // (a large table read) past the idle limit meant for stopped daemons.
            c.batch("SET LOCAL idle_in_transaction_session_timeout = 0")?;
            fill(c)
        })
    }

    /// Opens the database to read only (`mount --at`, issue 14): nothing is created or
    /// written; every change is refused with `EROFS`. `ENOENT` when it holds no
    /// scratchpad.
    pub fn open_frozen(url: &str) -> Result<Postgres> {
        let name = display_name(url);
        let conn = PgConn::connect(url)?;
        let has: bool = conn.value(
            "SELECT EXISTS (SELECT 1 FROM information_schema.tables
                            WHERE table_schema = current_schema() AND table_name = 'nodes')",
            p![],
        )?;
        if !has {
            return Err(StoreError::new(
                ErrorKind::NotFound,
                format!("{name}: holds no scratchpad (no table nodes)"),
            ));
        }
        Ok(Self::with_writer(url, name, None, true))
    }

    fn with_writer(url: &str, name: String, writer: Option<PgConn>, frozen: bool) -> Postgres {
        Postgres {
            url: url.to_string(),
            name,
            writer: Mutex::new(writer),
            readers: (0..READERS).map(|_| Mutex::new(None)).collect(),
            next_reader: AtomicUsize::new(0),
            processes: Processes::default(),
            frozen,
            daemon: crate::store::sql::new_scratchpad_id(&format!("daemon {}", std::process::id()))
                [..16]
                .to_string(),
            listener_pid: Default::default(),
            listener_stop: Default::default(),
            heads: Default::default(),
            keys: Default::default(),
        }
    }

    /// The notification channel and daemons' lock of this scratchpad (its schema's).
    pub fn keys(&self) -> &super::notify::PadKeys {
        &self.keys
    }

    /// The heads this daemon's commits are built on ([`Heads`]), for its listener to drop
    /// what other daemons changed.
    pub fn heads(&self) -> std::sync::Arc<Heads> {
        self.heads.clone()
    }

    /// One commit ([`Store::commit`]): on `guess`, the head of the file this daemon kept,
    /// in one round trip (failed with [`ErrorKind::Guessed`] when the guess is wrong), or
    /// without one, reading the head first. The head after it is kept ([`Heads`]).
    fn commit_on(&self, req: CommitRequest<'_>, guess: Option<NodeHead>) -> Result<Committed> {
        let ino = req.ino;
        let durable = req.durable;
        let caller = req.caller.clone();
        let guessed = guess.is_some();
        let (applied, after, taken) = self.in_slot(&self.writer, |conn| {
            let proc_ = self.process(conn, &caller)?;
            // Commits to one lineage take turns across daemons (module docs): the lock
            // opens the transaction, in the same round trip.
            // Its version id is taken there too (`reserved_id`).
            conn.begin_commit(
                "SELECT id FROM files WHERE id = (SELECT file_id FROM nodes WHERE ino = ?1)
                 FOR UPDATE",
                p![ino as i64],
                guessed,
            )?;
            let applied = commit_guessing(conn, req, &proc_, guess);
            match &applied {
                Ok((Applied::Committed(c), _)) => self.commit_as(
                    conn,
                    Touched::File {
                        ino,
                        file_id: c.file_id,
                    },
                    durable,
                )?,
                // A lost update is on record (its content kept): committed, nothing new
                // for the other daemons but the refusal.
                Ok((Applied::Stale(_), _)) => self.commit_notifying(conn, Touched::Events)?,
                _ => conn.batch("ROLLBACK")?,
            }
            let (applied, after) = applied?;
            Ok((applied, after, conn.taken_version_id()))
        })?;
        // The id the version took, where the commit handed out a stand-in.
        let real = |v: &mut VersionInfo| -> Result<()> {
            if v.id == PENDING_VERSION_ID {
                v.id = taken.ok_or_else(|| {
                    StoreError::failed("store: a commit's answer held no version id")
                })?;
            }
            Ok(())
        };
        let mut c = match applied {
            Applied::Committed(c) | Applied::Unchanged(c) => c,
            Applied::Stale(e) => return Err(e),
            Applied::Node(_) | Applied::Unlinked | Applied::Noted => {
                return Err(StoreError::new(
                    ErrorKind::Failed,
                    "store: a commit did something else",
                ));
            }
        };
        real(&mut c.version)?;
        if let Some(mut head) = after {
            for v in [&mut head.live, &mut head.lineage_head]
                .into_iter()
                .flatten()
            {
                real(v)?;
            }
            self.heads.keep(ino, head);
        }
        Ok(c)
    }

    /// Where this daemon's listener says which session it is
    /// ([`super::notify::Listener::pid`]).
    pub fn listener_pid(&self) -> std::sync::Arc<std::sync::atomic::AtomicI64> {
        self.listener_pid.clone()
    }

    /// Whether this daemon asked its listener to stop
    /// ([`super::notify::Listener::stop`]).
    pub fn listener_stop(&self) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        self.listener_stop.clone()
    }

    /// Where the database is (`postgres://host:port/db`, without credentials).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL the store was opened with (it may hold a password: never print it).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// This store's name in the notifications it sends ([`super::notify`]).
    pub fn daemon(&self) -> &str {
        &self.daemon
    }

    /// Sends what `what` touched to the other daemons, inside the open transaction (so it
    /// is delivered at its commit, and never for a change rolled back): when one is there,
    /// that is, a daemon other than this one is registered in `daemons`
    /// ([`super::notify::listen`]). A daemon alone spares the server the signal to its
    /// own listener and that listener its wakeup, at each change (docs/benchmarks.md). A
    /// daemon that registers takes the change lock exclusively, so a change either
    /// committed before it (and its refresh after registering sees it) or sees its row.
    fn notify(&self, tx: &dyn Conn, what: Touched) -> Result<()> {
        if let Some(payload) = what.payload(&self.daemon) {
            tx.exec(
                "SELECT pg_notify(?1, ?2) FROM daemons WHERE name <> ?3 LIMIT 1",
                p![&self.keys.channel, &payload, &self.daemon],
            )?;
        }
        Ok(())
    }

    /// Commits the open transaction on `conn`, with the notification of `what` in the
    /// same round trip; rolls back when that fails (its error returned).
    fn commit_notifying(&self, conn: &PgConn, what: Touched) -> Result<()> {
        self.commit_as(conn, what, false)
    }

    /// [`Postgres::commit_notifying`], `durable` (an `fsync`'s commit): the `COMMIT` then
    /// waits for its WAL to be flushed ([`super::SYNCED_COMMIT`]); else it is asynchronous
    /// (the session's setting, [`PgConn::connect`]). Same round trip either way.
    fn commit_as(&self, conn: &PgConn, what: Touched, durable: bool) -> Result<()> {
        // The notification is queued, and goes with the `COMMIT` in its message.
        let end = self.notify(conn, what).and_then(|()| {
            if durable {
                conn.commit_with(super::SYNCED_COMMIT)
            } else {
                conn.batch("COMMIT")
            }
        });
        if end.is_err() {
            let _ = conn.batch("ROLLBACK");
        }
        end
    }

    /// Sets a `meta` row.
    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.in_slot(&self.writer, |c| {
            c.exec(
                "INSERT INTO meta(key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                p![key, value],
            )
            .map(|_| ())
        })
    }

    /// Runs `f` on the connection of `slot`, connecting first when it has none (never
    /// connected, or lost); a failure that lost the connection ([`ErrorKind::Unavailable`],
    /// or a client that closed) empties the slot, so the next call connects again (a
    /// restarted server is back without a remount).
    fn in_slot<T>(&self, slot: &Slot, f: impl FnOnce(&PgConn) -> Result<T>) -> Result<T> {
        let mut g = slot.lock();
        if g.as_ref().is_none_or(|c| c.client_closed()) {
            // To the filesystem a server it cannot reach is an I/O error (docs/deploy.md),
            // whatever the socket said; the reason keeps it.
            *g = Some(
                PgConn::connect(&self.url)
                    .map_err(|e| StoreError::new(ErrorKind::Unavailable, e.reason))?,
            );
        }
        let conn = g.as_ref().expect("connected above");
        let out = f(conn);
        if let Err(e) = &out {
            if matches!(
                e.kind,
                ErrorKind::Unavailable | ErrorKind::Corrupt | ErrorKind::Failed
            ) {
                // The daemon's log says what the caller only sees as EIO.
                log::error!("{}: {e}", self.name);
            }
            if e.is(ErrorKind::Unavailable) || conn.client_closed() {
                *g = None;
            }
        }
        out
    }

    /// The `processes` row of `c` (inserted on first use, outside any transaction).
    fn process(&self, conn: &PgConn, c: &Caller) -> Result<Proc> {
        self.processes.of(conn, c)
    }

    /// Runs `f` in one transaction on the writer connection, by `caller`: committed when
    /// `f` returns `Ok(Ok(_))` or `Ok(Err(_))` (a refusal on record, whose error is then
    /// returned), rolled back when it returns `Err`. `EROFS` on a store of the past.
    fn change<T>(
        &self,
        caller: &Caller,
        what: super::notify::Change,
        f: impl FnOnce(&dyn Conn, &Proc) -> Result<Result<T>>,
    ) -> Result<T> {
        self.change_as(caller, move |_| what, |conn| conn.batch("BEGIN"), f)
    }

    /// [`Postgres::change`] whose notification depends on its result (a create names the
    /// inode it made).
    fn change_then<T>(
        &self,
        caller: &Caller,
        what: impl FnOnce(&Result<T>) -> super::notify::Change,
        f: impl FnOnce(&dyn Conn, &Proc) -> Result<Result<T>>,
    ) -> Result<T> {
        self.change_as(caller, what, |conn| conn.batch("BEGIN"), f)
    }

    /// [`Postgres::change`] in a transaction that holds the change lock exclusively
    /// ([`PgConn::begin_exclusive`]): a checkpoint's point, a rollback's.
    fn change_exclusive<T>(
        &self,
        caller: &Caller,
        what: super::notify::Change,
        f: impl FnOnce(&dyn Conn, &Proc) -> Result<Result<T>>,
    ) -> Result<T> {
        self.change_as(caller, move |_| what, PgConn::begin_exclusive, f)
    }

    /// A change whose transaction `begin` opens.
    fn change_as<T>(
        &self,
        caller: &Caller,
        what: impl FnOnce(&Result<T>) -> super::notify::Change,
        begin: impl FnOnce(&PgConn) -> Result<()>,
        f: impl FnOnce(&dyn Conn, &Proc) -> Result<Result<T>>,
    ) -> Result<T> {
        if self.frozen {
            return Err(frozen_refusal());
        }
        self.in_slot(&self.writer, |conn| {
            let proc_ = self.process(conn, caller)?;
            begin(conn)?;
            match f(conn, &proc_) {
                Ok(out) => {
                    let what = what(&out);
                    self.commit_notifying(conn, what)?;
                    Ok(out)
                }
                Err(e) => {
                    let _ = conn.batch("ROLLBACK");
                    Err(e)
                }
            }
        })?
    }
}

/// The class of the advisory locks [`lock_paths`] takes (`pg_locks.classid`; the key is
/// `hashtext` of the path, `objsubid` 2). "scrp".
const PATH_LOCK_CLASS: i32 = 0x7363_7270;

/// Takes, for the open transaction, the lock of each of `paths` (in the order of the
/// paths, so that two renames never wait for each other crosswise), queued with the
/// transaction's next statements. Creates, unlinks and renames of one path take turns
/// across daemons this way: a create's look for the deleted lineage it continues then
/// comes after the unlink that deleted it is committed, not during it, which made a
/// second lineage at the path, its history cut off from the first (helper finding:
/// create and delete loops of one name on two daemons). Paths whose `hashtext` is the
/// same take turns too, which is only slower.
fn lock_paths(tx: &dyn Conn, paths: &[&str]) -> Result<()> {
    let mut paths = paths.to_vec();
    paths.sort_unstable();
    paths.dedup();
    for path in paths {
        tx.exec(
            "SELECT pg_advisory_xact_lock(CAST(?1 AS INTEGER), hashtext(?2))",
            p![i64::from(PATH_LOCK_CLASS), path],
        )?;
    }
    Ok(())
}

/// The refusal of a change to a store opened to read the past.
fn frozen_refusal() -> StoreError {
    StoreError::new(
        ErrorKind::ReadOnly,
        "this scratchpad is mounted as it was in the past: read-only",
    )
}

impl Reading for Postgres {
    fn reading<T>(&self, f: impl FnOnce(&dyn Conn) -> Result<T>) -> Result<T> {
        for slot in &self.readers {
            if let Some(g) = slot.try_lock() {
                drop(g);
                return self.in_slot(slot, |c| f(c));
            }
        }
        let i = self.next_reader.fetch_add(1, Ordering::Relaxed) % self.readers.len();
        self.in_slot(&self.readers[i], |c| f(c))
    }
}

use super::notify::Change as Touched;

impl Store for Postgres {
    fn text_index_rows(&self) -> Result<Option<Vec<(i64, i64)>>> {
        if self.frozen {
            return Ok(None);
        }
        self.in_slot(&self.writer, |c| {
            if !text_index::prepare(c)? {
                log::warn!("search is not indexed: the extension pg_trgm is missing and this role may not create it");
                return Ok(None);
            }
            text_index::rows(c).map(Some)
        })
    }

    fn text_index_put(&self, entries: &[text_index::TextEntry]) -> Result<()> {
        self.in_slot(&self.writer, |c| {
            c.transaction(|c| text_index::put(c, entries))
        })
    }

    fn text_index_query(&self, literals: &[String], ignore_case: bool) -> Result<Vec<i64>> {
        self.reading(|c| text_index::query(c, literals, ignore_case))
    }

    fn history_index_heads(&self) -> Result<Option<Vec<history_index::HistoryRow>>> {
        if self.frozen {
            return Ok(None);
        }
        self.in_slot(&self.writer, |c| {
            if !history_index::prepare(c)? {
                log::warn!("history search is not indexed: the extension pg_trgm is missing and this role may not create it");
                return Ok(None);
            }
            history_index::heads(c).map(Some)
        })
    }

    fn history_index_rows(&self, file_id: i64) -> Result<Vec<history_index::HistoryRow>> {
        self.reading(|c| history_index::rows_of(c, file_id))
    }

    fn history_index_put(&self, entries: &[history_index::HistoryEntry]) -> Result<()> {
        self.in_slot(&self.writer, |c| {
            c.transaction(|c| history_index::put(c, entries))
        })
    }

    fn history_index_query(
        &self,
        literals: &[String],
        ignore_case: bool,
    ) -> Result<Vec<(i64, i64)>> {
        self.reading(|c| history_index::query(c, literals, ignore_case))
    }

    fn history_guards(&self) -> Result<Vec<(u32, u32, u32)>> {
        self.reading(history_index::guards)
    }

    fn legacy_versions(&self) -> Result<bool> {
        self.reading(history_index::legacy_versions)
    }

    fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        Postgres::set_meta(self, key, value)
    }

    fn load(&self) -> Result<Vec<NodeRecord>> {
        self.reading(crate::store::sql::read::load)
    }

    fn ping(&self) -> Result<()> {
        self.reading(|c| c.value::<i64>("SELECT 1", p![]).map(|_| ()))
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
        // A new file's transaction goes in one round trip, sure that no deleted lineage
        // is at its path; made again asking for it when one is (a path re-created).
        let create = |lookup| {
            let made = |rec: &Result<NodeRecord>| Touched::Node {
                ino: rec.as_ref().map_or(parent, |r| r.ino),
                replaced: 0,
            };
            self.change_then(caller, made, |tx, proc_| {
                lock_paths(tx, &[path])?;
                create_in(tx, parent, name, path, kind, attrs, proc_, lookup).map(Ok)
            })
        };
        match create(LineageLookup::Guarded) {
            Err(e) if kind == Kind::File && is_guard(&e) => create(LineageLookup::Ask),
            Ok(rec) => {
                // A new lineage: its first commit is built on its head now.
                if let Some(file_id) = rec.file_id {
                    self.heads.keep(rec.ino, NodeHead::of_new_file(file_id));
                }
                Ok(rec)
            }
            out => out,
        }
    }

    fn commit(&self, mut req: CommitRequest<'_>) -> Result<Committed> {
        if self.frozen {
            return Err(frozen_refusal());
        }
        // On the head this daemon kept of the file, in one round trip; the long way when
        // it has none, or the guess was wrong.
        if let Some(guess) = self.heads.take(req.ino) {
            match self.commit_on(req.again(), Some(guess)) {
                Err(e) if is_guard(&e) => {}
                out => return out,
            }
        }
        self.commit_on(req, None)
    }

    fn set_attrs(
        &self,
        ino: u64,
        attrs: Attrs,
        mtime_pinned: bool,
        path: &str,
        caller: &Caller,
    ) -> Result<()> {
        self.heads.drop_one(ino);
        let what = Touched::Node { ino, replaced: 0 };
        self.change(caller, what, |tx, proc_| {
            set_attrs_in(tx, ino, attrs, mtime_pinned, path, proc_).map(Ok)
        })
    }

    fn unlink(
        &self,
        ino: u64,
        file_id: Option<i64>,
        path: &str,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<()> {
        self.heads.drop_one(ino);
        self.change(caller, Touched::Node { ino, replaced: 0 }, |tx, proc_| {
            // Gone or moved already (another host unlinked or renamed it): the name this
            // daemon saw is stale, as the kernel would say.
            // Renames and unlinks of one node take turns across daemons, and each
            // checks the name after the one before it committed.
            lock_paths(tx, &[path])?;
            tx.exec("SELECT ino FROM nodes WHERE ino = ?1 FOR UPDATE", p![ino])?;
            if ino_at(tx, path)? != Some(ino) {
                return Err(StoreError::not_found(path));
            }
            unlink_in(tx, ino, file_id, path, proc_, time_ns).map(Ok)
        })
    }

    fn reject(
        &self,
        path: &str,
        errno: i32,
        reason: &str,
        caller: &Caller,
        content: Refused<'_>,
    ) -> Result<()> {
        self.change(caller, Touched::Events, |tx, proc_| {
            reject_in(tx, path, errno, reason, proc_, content).map(Ok)
        })
    }

    fn record_rules(&self, text: &str, caller: &Caller) -> Result<()> {
        self.change(caller, Touched::Rules, |tx, proc_| {
            record_rules_in(tx, text, proc_).map(Ok)
        })
    }

    fn sync(&self) -> Result<()> {
        // Every change was committed before it was answered.
        Ok(())
    }

    /// Every change was committed before it was answered: the sessions are ended as the
    /// protocol says (a Terminate message each, so the server logs no `Connection reset
    /// by peer` at an unmount): the listener's, which stops at this daemon's `stop`
    /// notification (waited for at most [`super::notify::STOP_WAIT`]; it does not listen
    /// again), then the writer's and readers' ([`PgConn`]'s drop), which are made again
    /// if the store is used after.
    fn finish(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        if self.listener_pid.load(Ordering::Relaxed) != 0 {
            let stop = super::notify::stop_payload(&self.daemon);
            self.listener_stop.store(true, Ordering::Relaxed);
            let sent = self.in_slot(&self.writer, |c| {
                c.exec("SELECT pg_notify(?1, ?2)", p![&self.keys.channel, &stop])
                    .map(|_| ())
            });
            match sent {
                Ok(()) => {
                    let until = std::time::Instant::now() + super::notify::STOP_WAIT;
                    while self.listener_pid.load(Ordering::Relaxed) != 0
                        && std::time::Instant::now() < until
                    {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                }
                Err(e) => log::warn!("stopping the listener: {e}"),
            }
        }
        for slot in std::iter::once(&self.writer).chain(&self.readers) {
            let conn = slot.lock().take();
            drop(conn);
        }
        Ok(())
    }

    fn sync_to_disk(&self) -> Result<()> {
        // Commits are asynchronous (`PgConn::connect`): a transaction that takes an id
        // and commits synchronously waits for the WAL up to its commit record, which
        // holds every commit before it (the WAL is one sequence), this daemon's and
        // everyone's.
        self.in_slot(&self.writer, |conn| {
            conn.batch("BEGIN")?;
            conn.value::<i64>("SELECT CAST(txid_current() AS BIGINT)", p![])?;
            let end = conn.commit_with(super::SYNCED_COMMIT);
            if end.is_err() {
                let _ = conn.batch("ROLLBACK");
            }
            end
        })
    }

    fn note_event(&self, op: &str, path: &str, reason: &str, caller: &Caller) -> Result<()> {
        self.change(caller, Touched::Events, |tx, proc_| {
            crate::store::sql::write::insert_event(
                tx,
                op,
                path,
                None,
                None,
                None,
                None,
                Some(reason),
                None,
                proc_,
                now_ns(),
            )
            .map(Ok)
        })
    }

    fn forget(&self, batch: &ForgetBatch<'_>, caller: &Caller) -> Result<Forgot> {
        self.change(caller, Touched::Events, |tx, proc_| {
            crate::store::sql::policy::forget_in(tx, batch, proc_).map(Ok)
        })
    }

    fn reclaim(&self) -> Result<()> {
        // The space of the content forgotten (`blobs`, whose TOAST holds the large pieces),
        // for reuse; pages left empty at the table's end go back to the file system
        // (VACUUM(7): not FULL, which would lock the table). The rows of `versions`,
        // `extents`, `events` and `inputs` are left to autovacuum, which paces itself:
        // vacuuming them after every pass (their indexes read whole each time) cost the
        // writers 6 to 15% of their rate at 1,000,000 versions (docs/benchmarks.md).
        self.in_slot(&self.writer, |c| c.batch("VACUUM blobs"))
    }

    fn redact(
        &self,
        file_id: i64,
        number: i64,
        path: &str,
        why: &str,
        caller: &Caller,
    ) -> Result<RedactReport> {
        self.heads.clear();
        let report = self.change(caller, Touched::Tree, |tx, proc_| {
            admin::redact_in(tx, file_id, number, path, why, proc_).map(Ok)
        })?;
        // Frees the old rows' space for reuse (docs/deploy.md: what stays in
        // PostgreSQL's files, WAL and backups until they are rewritten).
        self.in_slot(&self.writer, |c| {
            c.batch("VACUUM extents, blobs, versions, events")
        })?;
        Ok(report)
    }

    /// What every other live daemon's open handles read, as (stream, len): asked with a
    /// notification (`DAEMON gc TOKEN`), answered by each daemon's listener
    /// ([`super::notify::listen`]); the live daemons are the sessions holding
    /// [`super::notify::DAEMONS_LOCK`], this daemon's own listener left out (the caller
    /// knows its own handles). Waits for every answer up to [`GC_ANSWER_WAIT`], on a
    /// connection of its own (this daemon's writes go on meanwhile). `EBUSY` when a daemon
    /// did not answer in time (a stopped process, a hung host), naming it; `EIO` when the
    /// server cannot be reached.
    fn open_elsewhere(&self) -> Result<Vec<(i64, u64)>> {
        use super::notify::Change;
        let (channel, lock) = (&self.keys.channel, self.keys.daemons_lock);
        let conn = PgConn::connect(&self.url)
            .map_err(|e| StoreError::new(ErrorKind::Unavailable, e.reason))?;
        let token = i64::from_le_bytes(
            blake3::hash(format!("{} {} {}", self.daemon, std::process::id(), now_ns()).as_bytes())
                .as_bytes()[..8]
                .try_into()
                .expect("8 bytes"),
        ) & i64::MAX;
        let me = self.listener_pid.load(std::sync::atomic::Ordering::Relaxed);
        // Old answers of gcs that stopped half-way.
        let stale = now_ns() - 3_600_000_000_000;
        conn.exec(
            "DELETE FROM gc_pins WHERE token IN (SELECT token FROM gc_acks WHERE time_ns < ?1)",
            p![stale],
        )?;
        conn.exec("DELETE FROM gc_acks WHERE time_ns < ?1", p![stale])?;
        let payload = Change::Gc { token }
            .payload(&self.daemon)
            .expect("a gc request has a payload");
        conn.batch(&format!("SELECT pg_notify('{channel}', '{payload}')"))?;
        let deadline = std::time::Instant::now() + GC_ANSWER_WAIT;
        loop {
            let silent: Vec<(i64, String, String)> = conn.all(
                "SELECT CAST(l.pid AS BIGINT), COALESCE(a.application_name, ''),
                        COALESCE(host(a.client_addr), 'local')
                 FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
                 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                   AND l.database = (SELECT oid FROM pg_database
                                     WHERE datname = current_database())
                   AND CAST(l.classid AS BIGINT) = ?1 AND CAST(l.objid AS BIGINT) = ?2
                   AND CAST(l.pid AS BIGINT) <> ?3
                   AND NOT EXISTS (SELECT 1 FROM gc_acks k WHERE k.token = ?4 AND k.pid = l.pid)
                 ORDER BY 1",
                p![i64::from(lock.0), i64::from(lock.1), me, token],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            if silent.is_empty() {
                break;
            }
            if std::time::Instant::now() >= deadline {
                let named: Vec<String> = silent
                    .iter()
                    .map(|(pid, app, host)| format!("'{app}' from {host} (backend pid {pid})"))
                    .collect();
                let _ = conn.exec("DELETE FROM gc_pins WHERE token = ?1", p![token]);
                let _ = conn.exec("DELETE FROM gc_acks WHERE token = ?1", p![token]);
                let _ = conn.value::<i64>("SELECT 1", p![]);
                log::warn!("gc: no answer from {}", named.join(", "));
                return Err(StoreError::new(
                    ErrorKind::Busy,
                    format!(
                        "gc: {} daemon{} did not say within {} s what {} open handles read: {}; \
                         nothing was deleted (a stopped daemon holds gc up: resume or end it)",
                        silent.len(),
                        if silent.len() == 1 { "" } else { "s" },
                        GC_ANSWER_WAIT.as_secs(),
                        if silent.len() == 1 { "its" } else { "their" },
                        named.join(", ")
                    ),
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let pins: Vec<(i64, u64)> = conn.all(
            "SELECT DISTINCT stream, len FROM gc_pins WHERE token = ?1",
            p![token],
            |r| Ok((r.get(0)?, r.get::<i64>(1)? as u64)),
        )?;
        conn.exec("DELETE FROM gc_pins WHERE token = ?1", p![token])?;
        conn.exec("DELETE FROM gc_acks WHERE token = ?1", p![token])?;
        conn.value::<i64>("SELECT 1", p![])?;
        Ok(pins)
    }

    fn gc(
        &self,
        req: &GcRequest,
        shown: &[i64],
        protected: &[(i64, u64)],
        caller: &Caller,
    ) -> Result<GcReport> {
        if self.frozen {
            return Err(frozen_refusal());
        }
        self.heads.clear();
        let report = self.in_slot(&self.writer, |conn| {
            conn.batch("BEGIN")?;
            let out = admin::gc_in(conn, req, shown, protected, caller)
                .and_then(|r| self.notify(conn, Touched::Tree).map(|_| r));
            match (&out, req.dry_run) {
                (Ok(_), false) => conn.batch("COMMIT")?,
                _ => conn.batch("ROLLBACK")?,
            }
            let report = out?;
            if req.dry_run {
                admin::note_gc(conn, &report)?;
            }
            Ok(report)
        })?;
        Ok(report)
    }

    fn rename(&self, req: RenameRequest<'_>) -> Result<(Option<i64>, Option<VersionInfo>)> {
        let caller = req.caller.clone();
        let (ino, old_path) = (req.ino, req.old_path.to_string());
        let new_path = req.new_path.to_string();
        self.heads.drop_one(ino);
        if let Some((replaced, _)) = req.replaced {
            self.heads.drop_one(replaced);
        }
        let what = Touched::Node {
            ino,
            replaced: req.replaced.map_or(0, |(r, _)| r),
        };
        self.change(&caller, what, |tx, proc_| {
            lock_paths(tx, &[&old_path, &new_path])?;
            // Removed or moved by another host meanwhile: the name this daemon saw is
            // stale, as the kernel would say.
            // Renames and unlinks of one node take turns across daemons, and each
            // checks the name after the one before it committed.
            tx.exec("SELECT ino FROM nodes WHERE ino = ?1 FOR UPDATE", p![ino])?;
            if ino_at(tx, &old_path)? != Some(ino) {
                return Err(StoreError::not_found(&old_path));
            }
            rename_in(tx, req, proc_)
        })
    }

    fn process_record_cost(&self, caller: &Caller) -> u64 {
        self.processes.cost(caller)
    }
    fn take_process_bytes(&self) -> u64 {
        self.processes.take_added()
    }
    fn note_read(
        &self,
        file_id: i64,
        version_id: i64,
        version: i64,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<()> {
        self.change(caller, Touched::Reads, |tx, proc_| {
            note_read_in(tx, file_id, version_id, version, proc_, time_ns).map(Ok)
        })
    }

    fn checkpoint(
        &self,
        name: &str,
        note: Option<&str>,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<crate::checkpoint::Checkpoint> {
        self.change_exclusive(caller, Touched::Events, |tx, proc_| {
            checkpoint::take(tx, name, note, false, proc_, time_ns).map(Ok)
        })
    }

    fn drop_checkpoint(
        &self,
        name: &str,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<crate::checkpoint::Checkpoint> {
        self.change(caller, Touched::Events, |tx, proc_| {
            checkpoint::drop_named(tx, name, proc_, time_ns).map(Ok)
        })
    }

    fn rollback(
        &self,
        name: &str,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<crate::checkpoint::RollbackReport> {
        self.heads.clear();
        self.change_exclusive(caller, Touched::Tree, |tx, proc_| {
            checkpoint::rollback_named(tx, name, proc_, time_ns).map(Ok)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_lock_sql_takes_the_schema_lock() {
        assert!(SCHEMA_LOCK_SQL.contains(&format!("pg_advisory_xact_lock({SCHEMA_LOCK})")));
        assert!(
            SCHEMA_LOCK_SQL.contains(&format!("pg_advisory_xact_lock({SCHEMA_LOCK}, hashtext("))
        );
    }
}
