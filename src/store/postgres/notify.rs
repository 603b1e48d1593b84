//! Invalidation between daemons (issue 15): each change a daemon commits sends
//! `pg_notify('scratchfs', PAYLOAD)` in its own transaction, so PostgreSQL delivers it to
//! every listening daemon when, and only when, the change is committed. Each daemon
//! listens on a connection of its own ([`listen`]) and, for a change another daemon made,
//! brings its inode table and views to the database's state and drops the kernel's
//! caches of what changed. PAYLOAD is `DAEMON KIND [NUMBERS]` (PostgreSQL limits a
//! payload to 8000 bytes; this one is under 100: [`PAYLOAD_MAX`]).
//!
//! The namespace is sent by the node (issue 34): a create, unlink, rename or attribute
//! change names the inode it moved (and the one a rename replaced), and the listening
//! daemons re-read those rows alone (`Fs::refresh_nodes`); only what changes the tree as
//! a whole (a rollback, a gc, a redaction) or a listener that may have missed
//! notifications (a lost connection) reloads the whole inode table (`Fs::refresh`).

use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;

use crate::store::error::Result;

/// The channel the daemons of the scratchpad in a database's `public` schema listen on
/// (that of every scratchpad before issue 34; a scratchpad in another schema has its own:
/// [`PadKeys`]).
pub const CHANNEL: &str = "scratchfs";

/// What keeps the daemons of one scratchpad apart from those of another in the same
/// database (a schema each, issue 34): the notification channel they listen on, and the
/// advisory lock a listening daemon holds (a gc counts the live daemons of its
/// scratchpad by it). The `public` schema keeps [`CHANNEL`] and [`DAEMONS_LOCK`], so
/// daemons of an earlier scratchfs on a single-pad database still hear and are heard.
/// Another schema's are `scratchfs_` and 16 hex digits of blake3 of its name and its
/// `meta.scratchpad_id`, and a second key taken from the same hash (never 1): a secret
/// only the roles that may read the scratchpad know, so that the role of another
/// scratchpad in the database can neither listen to its changes nor send its daemons
/// notifications (PostgreSQL checks no privilege on `LISTEN` and `NOTIFY`; the uid-1000
/// attack round of session 26 did both with channels taken from the schema's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PadKeys {
    /// The `LISTEN`/`pg_notify` channel.
    pub channel: String,
    /// The keys of `pg_advisory_lock_shared(KEY1, KEY2)`.
    pub daemons_lock: (i32, i32),
}

impl PadKeys {
    /// The keys of the scratchpad in schema `schema` (as `current_schema()` names it)
    /// whose `meta.scratchpad_id` is `secret`.
    pub fn of_pad(schema: &str, secret: &str) -> PadKeys {
        if schema == "public" {
            return PadKeys {
                channel: CHANNEL.to_owned(),
                daemons_lock: DAEMONS_LOCK,
            };
        }
        let mut h = blake3::Hasher::new();
        h.update(b"scratchfs pad keys\0");
        h.update(schema.as_bytes());
        h.update(b"\0");
        h.update(secret.as_bytes());
        let h = h.finalize();
        let key = i32::from_le_bytes(h.as_bytes()[..4].try_into().expect("4 bytes")) | 2;
        PadKeys {
            channel: format!("scratchfs_{}", &h.to_hex()[..16]),
            daemons_lock: (DAEMONS_LOCK.0, key),
        }
    }
}

impl Default for PadKeys {
    fn default() -> Self {
        PadKeys::of_pad("public", "")
    }
}

/// What a committed change touched, as its notification says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The tree as a whole (rollback, gc, redact), or anything that may have been missed
    /// (a listener's lost connection): every node is read again.
    Tree,
    /// One node's place or attributes (create, unlink, rename, setattr): node `ino`, and
    /// `replaced` (0: none), the one a rename put out of its place.
    Node {
        /// The inode created, unlinked, renamed or changed.
        ino: u64,
        /// The inode a rename replaced, or 0.
        replaced: u64,
    },
    /// A new version of lineage `file_id` on inode `ino`.
    File {
        /// The inode.
        ino: u64,
        /// Its lineage.
        file_id: i64,
    },
    /// Events only (a refusal, a checkpoint): MANIFEST's sections.
    Events,
    /// The writer rules text.
    Rules,
    /// A lineage's last read (MANIFEST's `read` column): not sent to other daemons.
    Reads,
    /// A gc asks what every daemon's open handles read; the listener answers it itself
    /// (`gc_pins`, `gc_acks`), and never passes it on.
    Gc {
        /// The gc's token (`gc_pins.token`, `gc_acks.token`).
        token: i64,
    },
}

/// The advisory lock every daemon's listening connection holds, shared, for as long as it
/// listens (`pg_advisory_lock_shared(KEY1, KEY2)`; in `pg_locks`: `classid` KEY1, `objid`
/// KEY2, `objsubid` 2): a gc knows the live daemons by it, and waits for each one's answer.
pub const DAEMONS_LOCK: (i32, i32) = (0x7363_7266, 1);

/// How a daemon answers a gc: the (stream, len) its open handles read as `gc_pins` rows,
/// then its `gc_acks` row, in one transaction on its listening connection (`$1` the
/// token, `$2` and `$3` the streams and lengths).
const GC_ANSWER: &str = "WITH pins AS (
        INSERT INTO gc_pins(token, pid, stream, len)
        SELECT $1, pg_backend_pid(), s, l FROM unnest($2::BIGINT[], $3::BIGINT[]) AS t(s, l)
    )
    INSERT INTO gc_acks(token, pid, time_ns) VALUES ($1, pg_backend_pid(), $4)
    ON CONFLICT DO NOTHING";

/// The longest payload [`Change::payload`] makes, in bytes, for a daemon name of at most
/// [`DAEMON_NAME_MAX`] bytes: PostgreSQL refuses a payload of 8000 bytes or more (docs,
/// NOTIFY), which would fail the change that sends it.
pub const PAYLOAD_MAX: usize = DAEMON_NAME_MAX + " node ".len() + 2 * 20 + 1;

/// The longest daemon name a store makes (`Postgres::daemon`).
pub const DAEMON_NAME_MAX: usize = 64;

impl Change {
    /// The notification payload for a change by daemon `daemon`; `None` for what other
    /// daemons need not hear of.
    pub fn payload(&self, daemon: &str) -> Option<String> {
        Some(match self {
            Change::Tree => format!("{daemon} tree"),
            Change::Node { ino, replaced: 0 } => format!("{daemon} node {ino}"),
            Change::Node { ino, replaced } => format!("{daemon} node {ino} {replaced}"),
            Change::File { ino, file_id } => format!("{daemon} file {ino} {file_id}"),
            Change::Events => format!("{daemon} events"),
            Change::Rules => format!("{daemon} rules"),
            Change::Gc { token } => format!("{daemon} gc {token}"),
            Change::Reads => return None,
        })
    }

    /// Parses a payload: the daemon that sent it and what changed (`None`: not ours).
    pub fn parse(payload: &str) -> Option<(&str, Change)> {
        let mut w = payload.split(' ');
        let daemon = w.next()?;
        let c = match w.next()? {
            "tree" => Change::Tree,
            "node" => Change::Node {
                ino: w.next()?.parse().ok()?,
                replaced: w.next().map_or(Some(0), |r| r.parse().ok())?,
            },
            "file" => Change::File {
                ino: w.next()?.parse().ok()?,
                file_id: w.next()?.parse().ok()?,
            },
            "events" => Change::Events,
            "rules" => Change::Rules,
            "gc" => Change::Gc {
                token: w.next()?.parse().ok()?,
            },
            _ => return None,
        };
        Some((daemon, c))
    }
}

/// The payload that stops `daemon`'s own listener ([`super::Postgres`]'s `finish`); other
/// daemons read it as no change of theirs ([`Change::parse`]: `None`).
pub fn stop_payload(daemon: &str) -> String {
    format!("{daemon} stop")
}

/// How long an unmount waits for its listener to end its session.
pub const STOP_WAIT: Duration = Duration::from_secs(2);

/// What a daemon's listener needs besides its callback: where it says which PostgreSQL
/// session it is (so that the daemon's own gc does not wait for itself), and what the
/// daemon's open handles read (a gc's question).
pub struct Listener {
    /// The backend pid of the listening connection while it is up, else 0.
    pub pid: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// Set when the daemon asked its listener to stop ([`stop_payload`]): a `stop`
    /// notification is obeyed only then (any session of the role may send one).
    pub stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The (stream, len) of every content an open handle of the daemon reads.
    pub open_contents: Box<dyn Fn() -> Vec<(i64, u64)> + Send>,
}

/// Listens for the changes other daemons commit, on a connection of its own, in a thread
/// named `scratchfs-listen`: each batch of notifications that arrived together (other
/// than `daemon`'s own) is passed to `on`; after the connection is lost (and again when it
/// is back), `on` gets `[Change::Tree]`, since notifications may have been missed. Ends
/// when `on` returns `false`. While connected it holds [`DAEMONS_LOCK`] and answers
/// every other daemon's gc with [`Listener::open_contents`] at once: `on` runs in a
/// thread of its own (`scratchfs-refresh`, batches that queue up while it works are
/// passed together), so a refresh waiting for this daemon's store (a long commit holds
/// its connection) never keeps another daemon's gc waiting for an answer.
pub fn listen(
    url: String,
    daemon: String,
    keys: PadKeys,
    me: Listener,
    on: impl Fn(&[Change]) -> bool + Send + 'static,
) -> std::io::Result<()> {
    let (to_refresh, batches) = std::sync::mpsc::channel::<Vec<Change>>();
    std::thread::Builder::new()
        .name("scratchfs-refresh".into())
        .spawn(move || {
            while let Ok(mut changes) = batches.recv() {
                gather(&batches, &mut changes);
                if !on(&changes) {
                    // Dropping the receiver ends the listener at its next batch.
                    return;
                }
            }
        })?;
    let on = move |changes: &[Change]| to_refresh.send(changes.to_vec()).is_ok();
    std::thread::Builder::new()
        .name("scratchfs-listen".into())
        .spawn(move || {
            let mut backoff = Duration::ZERO;
            let mut connecting = Connecting::default();
            loop {
                let started = std::time::Instant::now();
                let out = connecting.client(&url).and_then(|mut client| {
                    let out = listen_once(&mut client, &daemon, &keys, &me, &on);
                    if out.is_ok() {
                        // Stopped (or the daemon is gone): the server answered a moment
                        // ago, and takes the goodbye (Terminate) now.
                        drop(client);
                    } else {
                        // Dropping the blocking client waits for the server to take its
                        // goodbye, which a server that stopped answering never does:
                        // that wait is left to a thread of its own.
                        let _ = std::thread::Builder::new()
                            .name("scratchfs-close".into())
                            .spawn(move || drop(client));
                    }
                    out
                });
                me.pid.store(0, std::sync::atomic::Ordering::Relaxed);
                match out {
                    Ok(()) => return,
                    Err(e) => {
                        log::warn!("listening for other daemons' changes: {e}");
                        if !on(&[Change::Tree]) {
                            return;
                        }
                        // A connection that had been up is made again at once (a restart
                        // of the server, a connection cut): the changes made meanwhile
                        // are read by the refresh that follows LISTEN. Failures to connect
                        // back off, up to 2 s.
                        if started.elapsed() > Duration::from_secs(1) {
                            backoff = Duration::ZERO;
                        }
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2)
                            .max(Duration::from_millis(50))
                            .min(Duration::from_secs(2));
                    }
                }
            }
        })
        .map(|_| ())
}

/// How long the refresh waits for the next notification of a burst before it applies
/// what it has ([`gather`]).
const GATHER_GAP: Duration = Duration::from_millis(1);

/// The longest a notification waits for others to be applied with it ([`gather`]).
const GATHER_MAX: Duration = Duration::from_millis(10);

/// Adds to `changes` the batches that follow the first of a burst: those already queued,
/// then each one that arrives within [`GATHER_GAP`] of the last, for at most
/// [`GATHER_MAX`] after the first. A burst of commits on another daemon (a loop of
/// creates, a `cp -r`: a create is two commits, its node and its content) is then
/// applied as one, with one read of its nodes and one wakeup of each thread, rather than
/// one per commit (issue 34: a listener's CPU per remote create); a lone change waits
/// at most [`GATHER_GAP`] more to be seen.
fn gather(batches: &std::sync::mpsc::Receiver<Vec<Change>>, changes: &mut Vec<Change>) {
    let first = std::time::Instant::now();
    loop {
        while let Ok(more) = batches.try_recv() {
            changes.extend(more);
        }
        let left = GATHER_MAX.saturating_sub(first.elapsed());
        if left.is_zero() {
            return;
        }
        match batches.recv_timeout(GATHER_GAP.min(left)) {
            Ok(more) => changes.extend(more),
            Err(_) => return,
        }
    }
}

/// The listening connection's connect, bounded: the blocking client bounds only the
/// socket's connect, not the TLS handshake and login after it, so it runs in a thread
/// of its own and is waited for at most the round-trip timeout. One that has not
/// answered yet is waited for again at the next attempt rather than started anew, so a
/// long partition leaves at most one such thread.
#[derive(Default)]
struct Connecting(Option<std::sync::mpsc::Receiver<Result<postgres::Client>>>);

impl Connecting {
    fn client(&mut self, url: &str) -> Result<postgres::Client> {
        let rx = match self.0.take() {
            Some(rx) => rx,
            None => {
                let (tx, rx) = std::sync::mpsc::channel();
                let url = url.to_owned();
                std::thread::Builder::new()
                    .name("scratchfs-connect".into())
                    .spawn(move || {
                        let _ = tx.send(super::conn::connect_listener(&url));
                    })
                    .map_err(|e| {
                        crate::store::error::StoreError::failed(format!("a thread: {e}"))
                    })?;
                rx
            }
        };
        let timeout = super::conn::round_trip_timeout();
        match rx.recv_timeout(timeout) {
            Ok(out) => out,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                self.0 = Some(rx);
                Err(crate::store::error::StoreError::new(
                    crate::store::error::ErrorKind::Unavailable,
                    format!(
                        "the listening connection got no answer within {:.1} s \
                         (SCRATCHFS_PG_TIMEOUT)",
                        timeout.as_secs_f64()
                    ),
                ))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(
                crate::store::error::StoreError::failed("the connecting thread ended"),
            ),
        }
    }
}

/// One connection's worth of [`listen`]: `Ok` when `on` asked to stop.
fn listen_once(
    client: &mut postgres::Client,
    daemon: &str,
    keys: &PadKeys,
    me: &Listener,
    on: &impl Fn(&[Change]) -> bool,
) -> Result<()> {
    client.batch_execute(&format!(
        "LISTEN {}; SELECT pg_advisory_lock_shared({}, {}); \
         SET application_name = '{}'",
        keys.channel,
        keys.daemons_lock.0,
        keys.daemons_lock.1,
        application_name(daemon)
    ))?;
    let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[])?.get(0);
    me.pid
        .store(i64::from(pid), std::sync::atomic::Ordering::Relaxed);
    register(client, daemon, keys)?;
    // What happened while not listening (or before registering).
    if !on(&[Change::Tree]) {
        return Ok(());
    }
    // A quiet connection is checked this often, and must answer within the round-trip
    // timeout: a server that stopped answering (a partition) is found within twice it.
    let timeout = super::conn::round_trip_timeout();
    let quiet = timeout.min(Duration::from_secs(30));
    loop {
        let mut batch = Vec::new();
        {
            let mut n = client.notifications();
            // Blocks for the first; the rest that are already here come with it.
            let mut it = n.timeout_iter(quiet);
            if let Some(first) = it.next()? {
                batch.push(first);
            }
            drop(it);
            let mut more = n.iter();
            while let Some(m) = more.next()? {
                batch.push(m);
            }
        }
        if batch.is_empty() {
            // A quiet while: make sure the connection is still there, and answers.
            client.is_valid(timeout).map_err(|e| {
                crate::store::error::StoreError::new(
                    crate::store::error::ErrorKind::Unavailable,
                    format!("the listening connection did not answer: {e}"),
                )
            })?;
            continue;
        }
        let stop = stop_payload(daemon);
        if me.stop.load(std::sync::atomic::Ordering::Relaxed)
            && batch.iter().any(|m| m.payload() == stop)
        {
            return Ok(());
        }
        let mut changes = Vec::new();
        for (_, c) in batch
            .iter()
            .filter_map(|m| Change::parse(m.payload()))
            .filter(|(d, _)| *d != daemon)
        {
            match c {
                Change::Gc { token } => answer_gc(client, token, me)?,
                c => changes.push(c),
            }
        }
        if !changes.is_empty() && !on(&changes) {
            return Ok(());
        }
    }
}

/// Registers `daemon` in `daemons`, on its listening session, which is LISTENing already:
/// the other daemons (and the CLI) notify their changes only while a daemon other than
/// themselves is registered (`Postgres::notify`). In a transaction holding the change lock
/// ([`super::change_lock_sql`]) exclusively: every change then either committed before it,
/// and the refresh that follows sees it, or makes its notification after it, and sees the
/// row. Rows of daemons whose listening session no longer holds [`DAEMONS_LOCK`] (gone,
/// or reconnecting: they register again) are dropped with it. `EACCES` for a role that
/// may not write `daemons` (docs/deploy.md, roles).
fn register(client: &mut postgres::Client, daemon: &str, keys: &PadKeys) -> Result<()> {
    let mut tx = client.transaction()?;
    tx.batch_execute(super::change_lock_sql(true))?;
    tx.execute(
        "DELETE FROM daemons WHERE name = $1 OR pid NOT IN (
             SELECT CAST(l.pid AS BIGINT) FROM pg_locks l
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND CAST(l.classid AS BIGINT) = $2 AND CAST(l.objid AS BIGINT) = $3)",
        &[
            &daemon,
            &i64::from(keys.daemons_lock.0),
            &i64::from(keys.daemons_lock.1),
        ],
    )?;
    tx.execute(
        "INSERT INTO daemons(name, pid, since_ns) VALUES ($1, pg_backend_pid(), $2)",
        &[&daemon, &crate::store::sql::now_ns()],
    )?;
    tx.commit()?;
    Ok(())
}

/// Answers gc `token` with what this daemon's open handles read ([`GC_ANSWER`]).
fn answer_gc(client: &mut postgres::Client, token: i64, me: &Listener) -> Result<()> {
    let open = (me.open_contents)();
    let streams: Vec<i64> = open.iter().map(|o| o.0).collect();
    let lens: Vec<i64> = open.iter().map(|o| o.1 as i64).collect();
    client.execute(
        GC_ANSWER,
        &[&token, &streams, &lens, &crate::store::sql::now_ns()],
    )?;
    log::debug!("gc {token}: answered with {} open contents", open.len());
    Ok(())
}

/// The listening connection's `application_name` (as `pg_stat_activity` shows it, and a
/// gc that waits for this daemon names it): `scratchfs HOST pid PID DAEMON`, at most 63
/// bytes of letters, digits, `.`, `-` and spaces.
fn application_name(daemon: &str) -> String {
    let mut host = [0u8; 256];
    let host = if unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) } == 0 {
        let end = host.iter().position(|&b| b == 0).unwrap_or(host.len());
        String::from_utf8_lossy(&host[..end]).into_owned()
    } else {
        String::new()
    };
    let name = format!("scratchfs {host} pid {} {daemon}", std::process::id());
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ' '))
        .take(63)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_payload_parses_back_and_stays_far_under_postgresqls_limit() {
        let daemon = crate::store::sql::new_scratchpad_id("daemon 1");
        assert!(daemon.len() <= DAEMON_NAME_MAX);
        let all = [
            Change::Tree,
            Change::Node {
                ino: u64::MAX,
                replaced: 0,
            },
            Change::Node {
                ino: u64::MAX,
                replaced: u64::MAX,
            },
            Change::File {
                ino: u64::MAX,
                file_id: i64::MAX,
            },
            Change::Events,
            Change::Rules,
            Change::Gc { token: i64::MAX },
        ];
        for c in all {
            let p = c.payload(&daemon).unwrap();
            assert!(p.len() <= PAYLOAD_MAX && PAYLOAD_MAX < 8000, "{p}");
            assert_eq!(Change::parse(&p), Some((daemon.as_str(), c)), "{p}");
        }
        assert_eq!(Change::parse("d node x"), None);
        assert_eq!(Change::parse("d node 5 x"), None);
    }
}
