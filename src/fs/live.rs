//! Live appenders (issue 11): an `O_APPEND` handle that stays open (a logger, `exec
//! 3>>log`) commits what it has written as an `append` version [`LIVE_APPEND_DELAY`] after
//! its first uncommitted write, so that `cat`, followers (`tail -f`) and MANIFEST see a
//! running log while it runs. Its writes in that time are grouped into one version, so a
//! handle makes at most one version per [`LIVE_APPEND_DELAY`] (3,600 an hour), and an idle
//! handle none. Other write handles keep commit-at-close (SPEC §4).
//!
//! The commits are made by one thread (`scratchfs-live`), which holds only a weak
//! reference to the filesystem and ends with it.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::Fs;
use crate::sync::{Condvar, Mutex};

/// How long after its first uncommitted write an open `O_APPEND` handle commits (1 s).
pub const LIVE_APPEND_DELAY: Duration = Duration::from_secs(1);

/// The open `O_APPEND` handles with uncommitted bytes, by handle, with the time each
/// commits.
#[derive(Default)]
pub(super) struct LiveAppends {
    due: Mutex<Due>,
    wake: Condvar,
}

/// The scheduled handles, and until when the thread sleeps (`None`: it is not waiting).
#[derive(Default)]
struct Due {
    at: BTreeMap<u64, Instant>,
    sleeping_until: Option<Instant>,
}

impl LiveAppends {
    /// Handle `fh` has uncommitted appended bytes: it commits [`LIVE_APPEND_DELAY`] after
    /// the first of them (a later write does not postpone it).
    pub(super) fn schedule(&self, fh: u64) {
        let mut due = self.due.lock();
        if let std::collections::btree_map::Entry::Vacant(e) = due.at.entry(fh) {
            let at = Instant::now() + LIVE_APPEND_DELAY;
            e.insert(at);
            // Woken only if it would sleep past this handle's time: its idle sleep is no
            // longer than the delay, so a burst of short-lived appenders (one `>>` per
            // line) never wakes it (it was a context switch per append, issue 32).
            if due.sleeping_until.is_some_and(|until| until > at) {
                self.wake.notify_one();
            }
        }
    }

    /// Handle `fh` is gone (released): nothing to commit for it.
    pub(super) fn cancel(&self, fh: u64) {
        self.due.lock().at.remove(&fh);
    }

    /// Takes every scheduled handle, due or not.
    fn take_all(&self) -> Vec<u64> {
        std::mem::take(&mut self.due.lock().at)
            .into_keys()
            .collect()
    }

    /// Waits (at most `idle`) until a handle is due, and returns the handles due.
    fn wait_due(&self, idle: Duration) -> Vec<u64> {
        let mut due = self.due.lock();
        let now = Instant::now();
        let next = due.at.values().min().copied();
        let until = match next {
            Some(t) if t <= now => None,
            Some(t) => Some(t),
            None => Some(now + idle),
        };
        if let Some(until) = until {
            due.sleeping_until = Some(until);
            self.wake.wait_until(&mut due, until);
            due.sleeping_until = None;
        }
        let now = Instant::now();
        let ready: Vec<u64> = due
            .at
            .iter()
            .filter(|&(_, &t)| t <= now)
            .map(|(&fh, _)| fh)
            .collect();
        for fh in &ready {
            due.at.remove(fh);
        }
        ready
    }
}

impl Fs {
    /// Starts the thread that commits live appenders ([`LIVE_APPEND_DELAY`]); it ends when
    /// the filesystem is dropped. Without it, `O_APPEND` handles commit at flush only.
    pub fn start_live_appends(fs: &Arc<Fs>) -> std::io::Result<()> {
        let weak: Weak<Fs> = Arc::downgrade(fs);
        let live = fs.live.clone();
        std::thread::Builder::new()
            .name("scratchfs-live".into())
            .spawn(move || {
                loop {
                    let ready = live.wait_due(Duration::from_secs(1));
                    let Some(fs) = weak.upgrade() else { break };
                    fs.commit_live(ready);
                }
            })
            .map(|_| ())
    }

    /// Commits now what every open `O_APPEND` handle has written and not committed, as
    /// the `scratchfs-live` thread does when their time comes: for tests of the core
    /// without a clock (tests/gate_attack.rs).
    pub fn commit_live_appends_now(&self) {
        self.commit_live(self.live.take_all());
    }

    fn commit_live(&self, fhs: Vec<u64>) {
        for fh in fhs {
            // A refusal stays on the handle: its next write or flush reports it.
            if let Err(e) = self.commit_handle(fh, false, false) {
                log::debug!("live append commit of handle {fh}: {e}");
            }
        }
    }
}
