//! What the store did, counted since the process started: changes, SQL statements and
//! PostgreSQL round trips. A test reads them around one operation through a mount to pin
//! its cost (`tests/requests.rs`, issue 32): a change that adds a statement or a round
//! trip to a create or an append fails a test, not a stopwatch. Relaxed atomics, one
//! increment each.

use std::sync::atomic::{AtomicU64, Ordering};

static CHANGES: AtomicU64 = AtomicU64::new(0);
static STATEMENTS: AtomicU64 = AtomicU64::new(0);
static ROUND_TRIPS: AtomicU64 = AtomicU64::new(0);

/// The store's counts at one moment (subtract two to count what happened between them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreCounts {
    /// Changes made: a logged change applied to SQLite (a create, a commit, an unlink
    /// queued for the batch), a PostgreSQL transaction ended.
    pub changes: u64,
    /// SQL statements SQLite ran for the changes (each `exec`, query or batch text,
    /// savepoints included); not the fold's (the batch's `COMMIT`, the WAL checkpoint),
    /// which runs every 5 ms whatever the operations were.
    pub statements: u64,
    /// Messages sent to PostgreSQL whose answer was waited for (what is pipelined into
    /// one counts once). Zero on SQLite.
    pub round_trips: u64,
}

impl std::ops::Sub for StoreCounts {
    type Output = StoreCounts;
    fn sub(self, before: StoreCounts) -> StoreCounts {
        StoreCounts {
            changes: self.changes - before.changes,
            statements: self.statements - before.statements,
            round_trips: self.round_trips - before.round_trips,
        }
    }
}

/// The counts now.
pub fn counts() -> StoreCounts {
    StoreCounts {
        changes: CHANGES.load(Ordering::Relaxed),
        statements: STATEMENTS.load(Ordering::Relaxed),
        round_trips: ROUND_TRIPS.load(Ordering::Relaxed),
    }
}

thread_local! {
    /// Statements this thread ran, counted or not.
    static HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// One SQLite statement ran on this thread.
pub(crate) fn statement() {
    HERE.with(|h| h.set(h.get() + 1));
}

/// Counts a change, and the statements this thread runs until the value is dropped.
pub(crate) fn change() -> ChangeCount {
    CHANGES.fetch_add(1, Ordering::Relaxed);
    ChangeCount(HERE.with(|h| h.get()))
}

/// A change being counted ([`change`]): its statements are added when it is dropped.
pub(crate) struct ChangeCount(u64);

impl Drop for ChangeCount {
    fn drop(&mut self) {
        let n = HERE.with(|h| h.get()) - self.0;
        STATEMENTS.fetch_add(n, Ordering::Relaxed);
    }
}

/// One message sent to PostgreSQL and its answer waited for.
pub(crate) fn round_trip() {
    ROUND_TRIPS.fetch_add(1, Ordering::Relaxed);
}
