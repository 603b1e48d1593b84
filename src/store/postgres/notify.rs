//! Invalidation between daemons (issue 15): each change a daemon commits sends
//! `pg_notify('scratchfs', PAYLOAD)` in its own transaction, so PostgreSQL delivers it to
//! every listening daemon when, and only when, the change is committed. Each daemon
//! listens on a connection of its own ([`listen`]) and, for a change another daemon made,
//! brings its inode table and views to the database's state and drops the kernel's
//! caches of what changed (`Fs::refresh`). PAYLOAD is `DAEMON KIND` (PostgreSQL limits a
//! payload to 8000 bytes; this one is under 64).

use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;

use crate::error::Result;

/// The channel every scratchfs daemon of a database listens on.
pub const CHANNEL: &str = "scratchfs";

/// What a committed change touched, as its notification says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The namespace or attributes (create, unlink, rename, setattr, rollback, gc).
    Tree,
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
}

impl Change {
    /// The notification payload for a change by daemon `daemon`; `None` for what other
    /// daemons need not hear of.
    pub fn payload(&self, daemon: &str) -> Option<String> {
        Some(match self {
            Change::Tree => format!("{daemon} tree"),
            Change::File { ino, file_id } => format!("{daemon} file {ino} {file_id}"),
            Change::Events => format!("{daemon} events"),
            Change::Rules => format!("{daemon} rules"),
            Change::Reads => return None,
        })
    }

    /// Parses a payload: the daemon that sent it and what changed (`None`: not ours).
    pub fn parse(payload: &str) -> Option<(&str, Change)> {
        let mut w = payload.split(' ');
        let daemon = w.next()?;
        let c = match w.next()? {
            "tree" => Change::Tree,
            "file" => Change::File {
                ino: w.next()?.parse().ok()?,
                file_id: w.next()?.parse().ok()?,
            },
            "events" => Change::Events,
            "rules" => Change::Rules,
            _ => return None,
        };
        Some((daemon, c))
    }
}

/// Listens for the changes other daemons commit, on a connection of its own, in a thread
/// named `scratchfs-listen`: each batch of notifications that arrived together (other
/// than `daemon`'s own) is passed to `on`; after the connection is lost (and again when it
/// is back), `on` gets `[Change::Tree]`, since notifications may have been missed. Ends
/// when `on` returns `false`.
pub fn listen(
    url: String,
    daemon: String,
    on: impl Fn(&[Change]) -> bool + Send + 'static,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("scratchfs-listen".into())
        .spawn(move || {
            let mut backoff = Duration::ZERO;
            loop {
                let started = std::time::Instant::now();
                match listen_once(&url, &daemon, &on) {
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

/// One connection's worth of [`listen`]: `Ok` when `on` asked to stop.
fn listen_once(url: &str, daemon: &str, on: &impl Fn(&[Change]) -> bool) -> Result<()> {
    let mut client = super::conn::connect_listener(url)?;
    client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
    // What happened while not listening.
    if !on(&[Change::Tree]) {
        return Ok(());
    }
    loop {
        let mut batch = Vec::new();
        {
            let mut n = client.notifications();
            // Blocks for the first; the rest that are already here come with it.
            let mut it = n.timeout_iter(Duration::from_secs(30));
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
            // A quiet 30 s: make sure the connection is still there.
            client.batch_execute("SELECT 1")?;
            continue;
        }
        let changes: Vec<Change> = batch
            .iter()
            .filter_map(|m| Change::parse(m.payload()))
            .filter(|(d, _)| *d != daemon)
            .map(|(_, c)| c)
            .collect();
        if !changes.is_empty() && !on(&changes) {
            return Ok(());
        }
    }
}
