//! The invalidation notifier: a dedicated thread that sends `FUSE_NOTIFY_INVAL_*` to the
//! kernel while no filesystem lock is held (FUSE-TRAPS §2). Only attribute-only
//! invalidations (negative offset) and entry invalidations are sent, which never wait on
//! page locks, so the
//! committing handler may wait for the send to finish: a `stat` after `close()` returns
//! then always sees the committed size.

use std::sync::mpsc;
use std::time::Duration;

use crate::fs::{Invalidation, Invalidator};

/// How long a committing handler waits for its invalidation to be sent.
const WAIT: Duration = Duration::from_millis(500);

/// How long [`Invalidation::Barrier`] is waited for (10 s): the invalidations before it
/// may include entries of a directory another request holds locked until it is answered.
const BARRIER_WAIT: Duration = Duration::from_secs(10);

type Job = (Invalidation, mpsc::SyncSender<()>);

/// Starts the notifier thread over `notifier` and returns the function the core calls.
pub fn spawn_notifier(notifier: fuser::Notifier) -> Invalidator {
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("scratchfs-notify".into())
        .spawn(move || {
            for (inv, done) in rx {
                match inv {
                    Invalidation::Attr(ino) => {
                        // ENOENT: the kernel does not know the inode; nothing to drop.
                        let _ = notifier.inval_inode(fuser::INodeNo(ino), -1, 0);
                    }
                    Invalidation::Data(ino) => {
                        // The whole page cache of the inode (offset 0, length 0: to the end).
                        let _ = notifier.inval_inode(fuser::INodeNo(ino), 0, 0);
                    }
                    Invalidation::Entry(parent, name) => {
                        use std::os::unix::ffi::OsStrExt;
                        crate::failpoint::delay("notify-entry", Duration::from_secs(1));
                        let name = std::ffi::OsStr::from_bytes(&name);
                        let _ = notifier.inval_entry(fuser::INodeNo(parent), name);
                    }
                    Invalidation::Barrier => {}
                }
                let _ = done.try_send(());
            }
        })
        .expect("spawn notifier thread");
    let tx = std::sync::Mutex::new(tx);
    Box::new(move |inv| {
        // A data invalidation may wait on pages under writeback, which may wait for the
        // very request being answered (a write from mmap): it is sent, never waited for;
        // nor is anything sent from inside a request that holds its directory locked.
        let wait = match inv {
            Invalidation::Data(_) => None,
            _ if !crate::fs::invalidations_may_wait() => None,
            Invalidation::Barrier => Some(BARRIER_WAIT),
            _ => Some(WAIT),
        };
        let (done_tx, done_rx) = mpsc::sync_channel(1);
        let sent = tx
            .lock()
            .map(|t| t.send((inv, done_tx)).is_ok())
            .unwrap_or(false);
        match wait {
            Some(wait) if sent => done_rx.recv_timeout(wait).is_ok(),
            _ => false,
        }
    })
}
