//! Every lock in scratchfs comes from here, so that a concurrency checker (e.g. shuttle or
//! loom) can swap the implementation in one place.
//!
//! Lock order, outermost first (never take an outer lock while holding an inner one):
//! 0. the gc guard (`fs::Fs::gc_guard`: a restore reads it across its lookup and commit,
//!    gc writes it), so gc never collects the version a restore is copying,
//! 1. one open handle (`fs::handle::Slot`, held across its commit; its pin is a leaf
//!    map, level 5, set while the handle is held),
//! 2. the namespace guard (`fs::Fs::ns_guard`: a commit reads it from its gate check to
//!    its store transaction, a rename writes it), so a rename never moves a file between
//!    the verdict on a commit and the commit,
//! 3. the inode table (`fs::Fs::tree`; namespace operations hold it across their store
//!    transaction; a commit takes it only before and after its transaction),
//! 4. the store's connections (`store::Sqlite` writer and readers),
//! 5. leaf maps, taken and released without calling out (handle table, identity cache,
//!    hasher cache, the notifier's queue, the read log `lineage::ReadLog`).
//!
//! Kernel invalidations are sent by the notifier thread while the requesting handler
//! holds none of these (FUSE-TRAPS §2).

pub use parking_lot::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
