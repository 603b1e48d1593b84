//! Every lock in scratchfs comes from here, so that a concurrency checker (e.g. shuttle or
//! loom) can swap the implementation in one place.
//!
//! Lock order, outermost first (never take an outer lock while holding an inner one):
//! 1. the store's writer connection (`store::Sqlite::writer`),
//! 2. the inode table (`fs::Fs::tree`),
//! 3. one write handle (`fs::handle::Handle`),
//! 4. leaf maps (handle table, identity cache, hasher cache).

pub use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
