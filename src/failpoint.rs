//! Failpoints for the crash tests (tests/crash.rs): a named point inside a transaction
//! where the daemon can be made to stop, so that a test kills it at that exact moment
//! instead of after a fixed sleep.
//!
//! With `SCRATCHFS_FAILPOINT=NAME` and `SCRATCHFS_FAILPOINT_FLAG=FILE` in the daemon's
//! environment, the first thread that reaches point `NAME` creates `FILE` and then sleeps
//! until the process is killed. Without them (always, outside tests) [`hit`] is one
//! comparison against a value read once. Points: `commit-now` (a commit written straight
//! to SQLite, e.g. past the redo log's limit, after its content and before the
//! transaction commits), `gc` (after gc's deletes, before its commit), `commit` (a commit's content written, its
//! version not yet, inside its transaction, on either backend), `fork` (a new SQLite
//! database built under its temporary name, not yet named), `rename` (after a
//! rename's rows moved, before its commit), `fold-thread` (the thread that commits the
//! batch, before its first fold: acknowledged changes then stay in the redo log only).

use std::sync::OnceLock;

fn armed() -> &'static Option<(String, String)> {
    static ARMED: OnceLock<Option<(String, String)>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let name = std::env::var("SCRATCHFS_FAILPOINT").ok()?;
        let flag = std::env::var("SCRATCHFS_FAILPOINT_FLAG").ok()?;
        Some((name, flag))
    })
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
