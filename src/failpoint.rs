//! Failpoints for the crash and race tests: a named point where the daemon can be made
//! to stop ([`hit`]), so that a test kills it at that exact moment instead of after a
//! fixed sleep, or to slow down ([`delay`]), so that a race the test is about is lost
//! every time instead of now and then.
//!
//! With `SCRATCHFS_FAILPOINT=NAME` and `SCRATCHFS_FAILPOINT_FLAG=FILE` in the daemon's
//! environment, the first thread that reaches a [`hit`] point `NAME` creates `FILE` and
//! then sleeps until the process is killed. Without them (always, outside tests) a point
//! is one comparison against a value read once. Points of [`hit`]: `commit-now` (a commit
//! written straight to SQLite, e.g. past the redo log's limit, after its content and
//! before the transaction commits), `gc` (after gc's deletes, before its commit),
//! `commit` (a commit's content written, its version not yet, inside its transaction, on
//! either backend), `fork` (a new SQLite database built under its temporary name, not
//! yet named), `rename` (after a rename's rows moved, before its commit), `fold-thread`
//! (the thread that commits the batch, before its first fold: acknowledged changes then
//! stay in the redo log only), `policy` (a policy batch's deletes done, before its
//! commit, on either backend). Points of [`delay`]: `notify-entry`, `teardown`.

use std::sync::OnceLock;

fn armed() -> &'static Option<(String, String)> {
    static ARMED: OnceLock<Option<(String, String)>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let name = std::env::var("SCRATCHFS_FAILPOINT").ok()?;
        let flag = std::env::var("SCRATCHFS_FAILPOINT_FLAG").ok()?;
        Some((name, flag))
    })
}

/// Slows the calling thread at point `name` if it is the armed one: each time it passes,
/// it sleeps `how_long` (and the flag file is written). Points: `notify-entry` (the
/// notifier thread, before each entry invalidation it sends: a kernel slow to drop a
/// cached name), `teardown` (a daemon whose session ended, before it writes what it holds
/// and lets go of its database: a slow last fold).
pub fn delay(name: &str, how_long: std::time::Duration) {
    if let Some((armed, flag)) = armed()
        && armed == name
    {
        let _ = std::fs::write(flag, name);
        std::thread::sleep(how_long);
    }
}

/// Stops the calling thread for good at point `name` if it is the armed one.
pub fn hit(name: &str) {
    if let Some((armed, flag)) = armed()
        && armed == name
    {
        let _ = std::fs::write(flag, name);
        loop {
            std::thread::park();
        }
    }
}
