//! The filesystem core: the operations the adapters call, readdir cookies. It knows
//! nothing of fuser; every operation returns [`crate::error::Result`], whose error carries
//! the errno the adapter replies with. The adapter (`crate::fuse`) only translates.
//!
//! Where things are: [`gate`] decides whether any change is allowed (and records every
//! refusal); `commit.rs` is the commit path; `namespace.rs` create, unlink and rename;
//! `admin.rs` restore, gc and redact; `tree.rs` the inodes; [`handle`] private copies;
//! `serve_views.rs` and `serve_history.rs` the views.
//!
//! Commit path (SPEC §4): a write handle's private copy ([`handle::WriteState`]) becomes a
//! version on flush/fsync when modified, and at release for any leftover
//! ([`Fs::flush`] → `commit_handle` → `commit` → [`Store::commit`]), after the gate's
//! verdict. The store checks for a lost update (`ESTALE`) in the same transaction; then
//! the in-memory inode is updated.
//! The kernel already knows the size a handle wrote (direct-I/O writes update its
//! `i_size`); when the committed size differs (an append landing on a newer version, a
//! refusal) the kernel's cached attributes are invalidated through the notifier thread
//! before the flush is answered, so a stat after `close()` is right at once.

mod admin;
mod checkpoint;
mod commit;
pub mod gate;
pub mod handle;
pub mod history_index;
mod lifecycle;
mod live;
mod manifest_rows;
mod namespace;
pub mod policy;
pub mod quota;
mod reads;
mod serve_checkpoints;
mod serve_history;
mod serve_views;
mod text_index;
mod tree;

/// Names the views' serving code exports (the restore attribute, the xattr names).
pub use text_index::INDEX_MAX;

pub mod serve {
    pub use super::serve_views::{
        ADOPT_XATTR, ARCHIVE_XATTRS, CHECKPOINT_XATTR, DROP_CHECKPOINT_XATTR, GC_XATTR,
        PROMOTED_XATTR, REDACT_XATTR, RESTORE_XATTR, ROLLBACK_XATTR, RedactRequest,
        SCRATCHPAD_XATTR, SETTLED_XATTR, XATTR_PREFIX, XATTRS,
    };
}

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::identity::{Caller, Resolver};
use crate::store::{Attrs, Build, Kind, Store};
use crate::sync::{Mutex, RwLock};
use crate::views::{self, View};
pub use admin::GC_FAILURE;
pub use checkpoint::Adopted;
use gate::Change;
use handle::{Handle, HandleKind, Slot, WriteState};
pub use live::LIVE_APPEND_DELAY;
use tree::{Node, Tree, now_ns};

/// Inode number of the root directory (FUSE protocol `FUSE_ROOT_ID`).
pub const ROOT: u64 = 1;
/// Longest name, in bytes (SPEC §8).
pub const NAME_MAX: usize = 255;

/// Bytes up to which a `json` path's content is re-parsed at each write that ends at the
/// handle's end, to refuse a syntax error at `write` (SPEC §6); larger files are checked
/// at commit only (each check reads and parses the whole private copy).
pub const JSON_PREFIX_CHECK_MAX: u64 = 1 << 20;

/// Most bytes of content a commit's rule checks read into memory (64 MiB): a larger
/// commit on a path whose rule checks content (`deny_secrets`, `format`, `fields`,
/// `max_bytes` with those) is refused with `EFBIG` and recorded (without its content), so
/// the daemon's memory stays bounded (docs/rules.md).
pub const CONTENT_CHECK_MAX: u64 = 64 << 20;

/// The caller of a request as the FUSE header gives it.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    /// Request pid (a thread id, may be 0).
    pub pid: u32,
    /// fsuid.
    pub uid: u32,
    /// fsgid.
    pub gid: u32,
}

/// Attributes as replied to `lookup`/`getattr` (the adapter turns them into `FileAttr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// File or directory.
    pub kind: Kind,
    /// Size in bytes (a dirty handle's pending size while one is open, FUSE-TRAPS §3).
    pub size: u64,
    /// Permissions, uid, gid and times (ns).
    pub attrs: Attrs,
    /// Link count: 1 for files, 2 + subdirectories for directories.
    pub nlink: u32,
    /// Attributes that may change without the kernel knowing (pending writes): reply
    /// with a zero TTL.
    pub volatile: bool,
    /// A view (SPEC §7): neither its name nor its attributes may be cached by the
    /// kernel (zero entry and attribute TTL), since it changes with every commit.
    pub synthesized: bool,
}

/// How an open handle must be served (FUSE `FOPEN_*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFlags {
    /// `FOPEN_DIRECT_IO`: reads and writes bypass the page cache (write handles: their
    /// private copy must not leak into the shared page cache, FUSE-TRAPS §3).
    pub direct_io: bool,
    /// `FOPEN_KEEP_CACHE`: the page cache still holds this exact version.
    pub keep_cache: bool,
    /// `FOPEN_NOFLUSH`: closing needs no `flush` (read handles have nothing to commit).
    pub noflush: bool,
    /// `FOPEN_CACHE_DIR`: the kernel may cache this directory's listing (it drops the
    /// cache itself when the directory changes through the mount).
    pub cache_dir: bool,
}

/// One directory entry from [`Fs::readdir`].
#[derive(Debug, Clone)]
pub struct DirEntry {
    /// Inode.
    pub ino: u64,
    /// Cookie to resume after this entry (stable across changes, FUSE-TRAPS §8).
    pub next_offset: u64,
    /// Kind.
    pub kind: Kind,
    /// Name.
    pub name: Vec<u8>,
}

/// Figures for `statfs` (FUSE-TRAPS §10).
#[derive(Debug, Clone, Copy)]
pub struct StatFs {
    /// Blocks of `bsize` bytes in all, free, and free for unprivileged users.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks for unprivileged users.
    pub bavail: u64,
    /// Inodes in all.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Block size in bytes.
    pub bsize: u32,
    /// Longest name in bytes.
    pub namelen: u32,
}

/// A request to invalidate kernel caches, sent by the adapter's notifier thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalidation {
    /// Cached attributes of an inode (attribute-only: never waits on page locks).
    Attr(u64),
    /// A cached name (parent inode, name): the core removed it on its own (a refused
    /// create that leaves no file behind).
    Entry(u64, Vec<u8>),
    /// Every cached page of an inode: after a refused change, pages written through
    /// `mmap` must not stay visible to readers (sent without waiting).
    Data(u64),
    /// Nothing to send: done once every invalidation queued before it is (the notifier
    /// sends in order), waited for longer than the others ([`Fs::settle`]).
    Barrier,
}

/// Called (with no lock held) to have the kernel drop cached state; returns once sent,
/// `true` if the kernel acted on it before the invalidator stopped waiting (`false` when
/// it was not waited for, or the wait timed out).
pub type Invalidator = Box<dyn Fn(Invalidation) -> bool + Send + Sync>;

thread_local! {
    /// Set while this thread refreshes inside a request ([`Fs::refresh_in_request`]).
    static NO_WAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether an invalidator may wait for the kernel to act on what this thread sends now:
/// not inside a request whose directory the kernel holds locked (a create, a rename),
/// where an entry's invalidation waits for that very lock (FUSE-TRAPS: notify from a
/// dedicated thread, never wait inside a related handler).
pub fn invalidations_may_wait() -> bool {
    !NO_WAIT.with(|c| c.get())
}

/// The access bits `mask` asks for (of `R_OK`, `W_OK`, `X_OK`) and those the process of
/// `ctx` has on a file of `kind` with mode, uid and gid `perm`, as the kernel decides for
/// a mount with `default_permissions` (access(2), path_resolution(7)): root has all but
/// execute of a file no one may execute; then the owner's, the group's (the primary or a
/// supplementary group, `/proc/<pid>/status`) or the others' bits.
fn permitted(perm: (u32, u32, u32), kind: Kind, mask: i32, ctx: Ctx) -> (u32, u32) {
    permitted_among(perm, kind, mask, ctx, &|gid| {
        crate::identity::groups_of(ctx.pid).contains(&gid)
    })
}

/// [`permitted`], with the caller's supplementary groups asked of `in_group` (only when
/// neither its uid nor its gid decides), for a check repeated over many inodes.
fn permitted_among(
    perm: (u32, u32, u32),
    kind: Kind,
    mask: i32,
    ctx: Ctx,
    in_group: &dyn Fn(u32) -> bool,
) -> (u32, u32) {
    let (mode, uid, gid) = perm;
    let want = (mask & 7) as u32;
    let allowed = if ctx.uid == 0 {
        let x_ok = kind == Kind::Dir || mode & 0o111 != 0;
        if want & libc::X_OK as u32 != 0 && !x_ok {
            0o6
        } else {
            0o7
        }
    } else if ctx.uid == uid {
        (mode >> 6) & 7
    } else if ctx.gid == gid || in_group(gid) {
        (mode >> 3) & 7
    } else {
        mode & 7
    };
    (want, allowed)
}

thread_local! {
    /// The caller of the core calls this thread makes for a call that did not come
    /// through the mount ([`Fs::acting_as`]).
    static ACTING: std::cell::RefCell<Option<Arc<Caller>>> = const { std::cell::RefCell::new(None) };
}

/// A process's facts and command name, taken at one moment ([`Fs::process`]).
#[derive(Debug, Clone)]
pub struct Process {
    /// What `/proc` said of it.
    pub facts: Arc<Caller>,
    /// `/proc/<tgid>/comm` then.
    pub comm: String,
}

/// Who makes a call that does not come through the mount (issue 12).
#[derive(Debug, Clone, Default)]
pub struct Remote {
    /// How it arrived: `mcp`.
    pub transport: &'static str,
    /// The writer named by the server's configuration (`scratchfs mcp --writer`).
    pub writer: Option<String>,
    /// The client's name and version from its handshake.
    pub client: Option<String>,
    pub client_version: Option<String>,
    /// The call's agent step.
    pub step: Option<i64>,
}

/// The largest file size, bytes: 2^53 − 1 (8 PiB), so that every size and offset is exact
/// in JSON (jq, JavaScript). A write, truncate or fallocate past it gets `EFBIG` (write(2),
/// truncate(2), fallocate(2): "the resulting file size exceeds the maximum").
pub const MAX_FILE_SIZE: u64 = (1 << 53) - 1;

/// `EFBIG` unless `end` (an offset + length, or a size) is at most [`MAX_FILE_SIZE`].
fn check_size(end: Option<u64>) -> Result<u64> {
    match end {
        Some(e) if e <= MAX_FILE_SIZE => Ok(e),
        _ => Err(Error::new(
            libc::EFBIG,
            format!("file size past the maximum of {MAX_FILE_SIZE} bytes (docs/SEMANTICS.md)"),
        )),
    }
}

/// New attributes for `setattr`; `None` leaves a field as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttr {
    /// New permission bits.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate).
    pub size: Option<u64>,
    /// New atime, ns.
    pub atime_ns: Option<i64>,
    /// New mtime, ns.
    pub mtime_ns: Option<i64>,
}

/// `mode` without S_ISUID, and without S_ISGID when group execute is set (with it clear,
/// S_ISGID marks mandatory locking and stays): what the kernel's
/// `setattr_should_drop_suidgid` drops on a write or chown by an unprivileged caller.
pub(crate) fn clear_suid_sgid(mode: u32) -> u32 {
    let mut m = mode & !0o4000;
    if m & 0o010 != 0 {
        m &= !0o2000;
    }
    m
}

/// The mounted filesystem's state.
pub struct Fs {
    store: Arc<dyn Store>,
    tree: RwLock<Tree>,
    handles: Mutex<HashMap<u64, Arc<Slot>>>,
    next_fh: AtomicU64,
    resolver: Resolver,
    spill_dir: PathBuf,
    /// blake3 state after each file's latest version, so appends hash only what they add.
    hashers: Mutex<HashMap<i64, (i64, crate::store::digest::ContentHasher)>>,
    invalidator: RwLock<Option<Invalidator>>,
    /// The synthesized views and their caches.
    views: serve_views::ViewState,
    /// The policy gate: the writer rules the mount was started with (SPEC §5; `None`: the
    /// defaults) and who may erase history.
    gate: gate::Gate,
    /// Held (read) by a restore from its lookup of the version to its commit, and
    /// (write) by gc, which could otherwise collect that version in between.
    gc_guard: RwLock<()>,
    /// The pad's usage as last counted, plus what this daemon added since, and what the
    /// commits under way hold against the quota (issue 36; [`Fs::usage`]): a leaf lock.
    usage: Mutex<policy::UsageCount>,
    /// Refusals past the quota counted, not yet on record ([`quota::Unrecorded`]): a leaf
    /// lock.
    unrecorded: Mutex<quota::Unrecorded>,
    /// Changes this daemon made (commits and creates), counted so that the policy pass
    /// knows the pad is being written and paces itself harder (issue 36).
    writes: AtomicU64,
    /// What the last policy pass protected (issue 36): the next pass between full ones
    /// adds what the versions since name instead of reading it all again. A leaf lock.
    protected: Mutex<Option<crate::store::Protected>>,
    /// Held (read) by a commit from its gate check to its store transaction, and (write)
    /// by a rename: a commit's content is judged under the path it lands at, never under
    /// a path a concurrent rename is moving it away from.
    ns_guard: RwLock<()>,
    /// Opens waiting for an owed change to be settled ([`Fs::settle_owed`]) wait here.
    owed: (Mutex<()>, crate::sync::Condvar),
    /// Open `O_APPEND` handles with uncommitted bytes (`live.rs`).
    live: Arc<live::LiveAppends>,
    /// What each process read (issue 13; `reads.rs`).
    reads: crate::lineage::ReadLog,
    /// The agent step of the latest caller that had one (`SCRATCHFS_STEP`, an MCP call's
    /// `step`; negative steps are not taken), `i64::MIN` for none: MANIFEST's "now step
    /// N". At mount: the highest step of the files' current versions.
    step_now: std::sync::atomic::AtomicI64,
    /// A mount of the past (issue 14): the files whose content then gc forgot (opening
    /// one: `ENODATA`). Empty otherwise.
    forgotten: std::collections::HashSet<u64>,
    /// A mount of the past: the point's time (ns), which MANIFEST is as of. `None` for
    /// the live tree.
    past_ns: Option<i64>,
    /// A listing left out a view whose attributes failed (MANIFEST while the store fails):
    /// the next `opendir` drops the kernel's cached listing, so the view is back once the
    /// store is.
    listing_short: std::sync::atomic::AtomicBool,
    /// What the store's text index holds, once a search asked (`text_index.rs`).
    text_index: Mutex<text_index::TextIndexState>,
    /// What the store's history index holds, once a history search asked
    /// (`history_index.rs`).
    history_index: Mutex<history_index::HistoryIndexState>,
    /// Tells the `scratchfs-history` thread that versions are behind, once started.
    history_indexer: Mutex<Option<std::sync::mpsc::Sender<u64>>>,
    /// How long a history search brings the index up to date, µs
    /// ([`Fs::set_history_search_budget`]).
    history_budget_us: std::sync::atomic::AtomicU64,
    /// Whole refreshes done ([`Fs::refresh`]), for [`Fs::whole_refreshes`].
    whole_refreshes: AtomicU64,
    /// Whether the store holds versions from before `versions.ino`, once asked
    /// (`history_index.rs`).
    legacy_versions: std::sync::OnceLock<bool>,
    /// A spill directory of this core's own ([`Fs::owning_spill_dir`]), removed with it.
    _spill_owned: Option<tempfile::TempDir>,
}

/// Longest an open waits for a handle that owes an `O_TRUNC` truncation or a create's
/// first version to write or be released ([`Fs::settle_owed`]).
pub const OWED_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Longest a write handle's open waits for readers reading through the page cache to
/// finish ([`Fs::drain_cached_readers`]).
pub const CACHED_READERS_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Hasher states kept (about 2 KiB each).
const HASHER_CACHE: usize = 256;

impl Fs {
    /// Loads the tree from `store`. Write handles spill into `spill_dir`, which must not be
    /// under the mount (FUSE-TRAPS §16).
    pub fn new(store: Arc<dyn Store>, spill_dir: PathBuf) -> Result<Fs> {
        let records = store.load()?;
        Fs::from_records(store, records, spill_dir)
    }

    /// A core whose tree is `records` (parents before children) rather than the store's
    /// live tree: [`Fs::of_past`] serves the tree at a point this way.
    fn from_records(
        store: Arc<dyn Store>,
        records: Vec<crate::store::NodeRecord>,
        spill_dir: PathBuf,
    ) -> Result<Fs> {
        let mut tree = Tree::default();
        for r in records {
            let (ino, parent, name, kind) = (r.ino, r.parent, r.name.clone(), r.kind);
            tree.nodes.insert(ino, Node::from_record(r));
            if ino != ROOT {
                tree.link(parent, ino, &name, kind);
            }
        }
        if !tree.nodes.contains_key(&ROOT) {
            return Err(Error::new(libc::EIO, "store has no root directory"));
        }
        let step_now = tree
            .nodes
            .values()
            .filter_map(|n| n.step)
            .max()
            .unwrap_or(i64::MIN);
        Ok(Fs {
            store,
            tree: RwLock::new(tree),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            resolver: Resolver::new(),
            spill_dir,
            hashers: Mutex::new(HashMap::new()),
            invalidator: RwLock::new(None),
            gc_guard: RwLock::new(()),
            usage: Mutex::new(policy::UsageCount::default()),
            unrecorded: Mutex::new(quota::Unrecorded::default()),
            writes: AtomicU64::new(0),
            protected: Mutex::new(None),
            ns_guard: RwLock::new(()),
            owed: (Mutex::new(()), crate::sync::Condvar::new()),
            live: Arc::default(),
            views: serve_views::ViewState::default(),
            gate: gate::Gate::new(),
            reads: crate::lineage::ReadLog::default(),
            step_now: std::sync::atomic::AtomicI64::new(step_now),
            forgotten: Default::default(),
            past_ns: None,
            listing_short: Default::default(),
            text_index: Default::default(),
            history_index: Default::default(),
            history_indexer: Default::default(),
            history_budget_us: (history_index::IN_SEARCH.as_micros() as u64).into(),
            whole_refreshes: AtomicU64::new(0),
            legacy_versions: Default::default(),
            _spill_owned: None,
        })
    }

    /// Makes `dir` (the spill directory this core was made with) this core's own: it is
    /// removed, with what is left in it, when the core is dropped (a PostgreSQL mount's
    /// private spill directory, which has no database directory to live in).
    pub fn owning_spill_dir(mut self, dir: tempfile::TempDir) -> Fs {
        debug_assert_eq!(dir.path(), self.spill_dir);
        self._spill_owned = Some(dir);
        self
    }

    /// Installs the function that asks the kernel to drop cached state.
    pub fn set_invalidator(&self, f: Invalidator) {
        *self.invalidator.write() = Some(f);
    }

    /// Has the kernel drop what it cached of a name or an inode that a change made
    /// outside the mount touched (an MCP call, issue 12), so that processes on the mount
    /// see it at once rather than after the attribute and entry timeouts (1 s). Call it
    /// with no lock held. Without a mount, nothing happens.
    pub fn invalidate_kernel(&self, inv: Invalidation) {
        self.invalidate(inv);
    }

    fn invalidate(&self, inv: Invalidation) {
        if let Some(f) = self.invalidator.read().as_ref() {
            f(inv);
        }
    }

    /// Waits until the kernel has acted on every invalidation this core sent before
    /// (those sent without waiting included: a rollback's names in the directory the
    /// kernel held locked for its request); `false` if that took longer than the
    /// notifier waits for a barrier (10 s). `true` at once without a kernel (no
    /// invalidator). Read through the mount as [`serve::SETTLED_XATTR`].
    pub fn settle(&self) -> bool {
        match self.invalidator.read().as_ref() {
            Some(f) => f(Invalidation::Barrier),
            None => true,
        }
    }

    fn caller(&self, ctx: Ctx) -> Arc<Caller> {
        let c = self.caller_unseen(ctx);
        // The latest step seen, not the highest: one process started with a wrong step
        // (a timestamp) is corrected by the next one.
        if let Some(step) = c.step.filter(|&s| s >= 0) {
            self.step_now.store(step, Ordering::Relaxed);
        }
        c
    }

    fn caller_unseen(&self, ctx: Ctx) -> Arc<Caller> {
        if let Some(c) = ACTING.with(|a| a.borrow().clone()) {
            return c;
        }
        let c = self.resolver.resolve(ctx.pid, ctx.uid, ctx.gid);
        match self.gate.rules.load().as_deref() {
            // With writer rules, the writer is the first whose matchers all match.
            Some(r) => {
                let comm =
                    std::fs::read_to_string(format!("/proc/{}/comm", c.tgid)).unwrap_or_default();
                let writer = r.writer_for(&c, comm.trim_end());
                if writer == c.writer {
                    c
                } else {
                    Arc::new(Caller {
                        writer,
                        ..(*c).clone()
                    })
                }
            }
            None => c,
        }
    }

    /// The caller of a call that did not come through the mount (an MCP tool call, issue
    /// 12): the process facts of `ctx` (the MCP server, or the peer of the daemon's MCP
    /// socket), with `transport`, the client's name and version from its handshake, and
    /// the call's `step`. The writer is `writer` when given (`scratchfs mcp --writer`;
    /// under rules it names one of theirs, checked at start), else under rules the first
    /// whose matchers all match (the `mcp_client` matcher against the client's name),
    /// else the process's `SCRATCHFS_WRITER` tag or `anonymous` (SPEC §5).
    /// `EACCES` when `writer` is not one of the rules' writers, or is one whose process
    /// matchers (uid, gid, user, exe, comm) the process of `ctx` does not satisfy.
    pub fn remote_caller(&self, ctx: Ctx, remote: &Remote) -> Result<Arc<Caller>> {
        self.remote_caller_of(&self.process(ctx), remote)
    }

    /// The facts of the process of `ctx` and its command name (`/proc/<tgid>/comm`), as a
    /// caller's writer is resolved from them: what the MCP socket takes once, when a
    /// process connects, so that what the process execs later gains the connection
    /// nothing (issue 31).
    pub fn process(&self, ctx: Ctx) -> Process {
        let facts = self.resolver.resolve(ctx.pid, ctx.uid, ctx.gid);
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", facts.tgid))
            .unwrap_or_default()
            .trim_end()
            .to_string();
        Process { facts, comm }
    }

    /// [`Fs::remote_caller`] for a process whose facts were taken before ([`Fs::process`]).
    pub fn remote_caller_of(&self, p: &Process, remote: &Remote) -> Result<Arc<Caller>> {
        let facts = &p.facts;
        // A client's name and version are its own words, stored with every version it
        // makes: redacted as a command line is (issue 31, "No secret at rest").
        // At most 256 bytes each: a name, not a document (100 KB were stored whole).
        let said = |t: &Option<String>| {
            t.as_ref().map(|t| {
                gate::cut(
                    String::from_utf8_lossy(&crate::rules::enforce::redact_secrets(t.as_bytes()))
                        .into_owned(),
                    256,
                )
            })
        };
        let mut c = Caller {
            transport: Some(remote.transport.to_string()),
            client: said(&remote.client),
            client_version: said(&remote.client_version),
            step: remote.step.or(facts.step),
            ..(**facts).clone()
        };
        let comm = || p.comm.clone();
        c.writer = match (&remote.writer, self.gate.rules.load().as_deref()) {
            (Some(w), Some(r)) => match r.claim(w, &c, &comm()) {
                Some(Ok(())) => w.clone(),
                Some(Err(is)) => {
                    return Err(Error::new(
                        libc::EACCES,
                        format!(
                            "writer {w:?}: this MCP server's process (uid {}, {}) is writer {is:?} by the rules, whatever it claims (the first writer whose matchers all match; a claim counts as the writer's env tag)",
                            c.uid, c.exe
                        ),
                    ));
                }
                None => {
                    return Err(Error::new(
                        libc::EACCES,
                        format!("writer {w:?} is not one of the rules' writers"),
                    ));
                }
            },
            (Some(w), None) => w.clone(),
            (None, Some(r)) => r.writer_for(&c, &comm()),
            (None, None) => c.writer,
        };
        Ok(Arc::new(c))
    }

    /// Whether the process of `ctx` may read (`R_OK`), write (`W_OK`) or search/execute
    /// (`X_OK`) inode `ino`, by its mode bits, owner and group, as the kernel decides for a
    /// mount with `default_permissions` (access(2), path_resolution(7)): root passes
    /// except for executing a file no one may execute; the caller's supplementary groups
    /// come from `/proc/<pid>/status`. The mount never needs this (the kernel checks
    /// first); a change that does not come through the kernel (an MCP call, issue 12)
    /// does. `EACCES`, naming the path, the mode and the owner.
    pub fn access(&self, ino: u64, mask: i32, ctx: Ctx) -> Result<()> {
        self.access_named(ino, mask, ctx, None)
    }

    /// [`Fs::access`], the refusal naming `shown` (the path the caller asked for: a view's
    /// inode has none in the tree) when given.
    pub fn access_named(&self, ino: u64, mask: i32, ctx: Ctx, shown: Option<&str>) -> Result<()> {
        let a = self.getattr(ino)?;
        let mode = a.attrs.mode;
        let (want, allowed) = permitted((mode, a.attrs.uid, a.attrs.gid), a.kind, mask, ctx);
        if want & !allowed == 0 {
            return Ok(());
        }
        let path = match shown {
            Some(p) => p.trim_matches('/').to_string(),
            None if a.synthesized => format!("inode {ino}"),
            None => self.tree.read().path(ino),
        };
        Err(Error::new(
            libc::EACCES,
            format!(
                "{}: permission denied (mode {:04o}, owner uid {} gid {}; caller uid {})",
                if path.is_empty() { "/" } else { &path },
                mode & 0o7777,
                a.attrs.uid,
                a.attrs.gid,
                ctx.uid
            ),
        ))
    }

    /// Whether the process of `ctx` may read the bytes of version `id` (`versions.id`):
    /// the one answer every view, MCP tool and command that serves old bytes gives
    /// (issue 31, docs/security.md "History keeps its owner"). A version is guarded by
    /// the owner and read bits of the inode that carried it when it was committed, as
    /// that inode is now, or was when it was unlinked ([`Fs::version_perm`]), not by
    /// whatever file carries the lineage later: a file renamed over another, or made
    /// again at a deleted file's path, reads its own versions, not those before it.
    /// `EACCES` naming `shown` (the path and version asked for), the mode and the owner.
    pub fn may_read_version(&self, id: i64, ctx: Ctx, shown: &str) -> Result<()> {
        let (mode, uid, gid) = self.version_perm(id)?;
        let (want, allowed) = permitted((mode, uid, gid), Kind::File, libc::R_OK, ctx);
        if want & !allowed == 0 {
            return Ok(());
        }
        Err(Error::new(
            libc::EACCES,
            format!(
                "{shown}: permission denied (the version's file: mode {:04o}, owner uid {uid} \
                 gid {gid}; caller uid {})",
                mode & 0o7777,
                ctx.uid
            ),
        ))
    }

    /// Read bits, uid and gid that guard version `id` ([`Fs::may_read_version`]): those of
    /// the inode that carried it (the tree's attributes while it is linked, a `chmod` a
    /// moment ago included; its last ones once unlinked), or 0400 and the daemon's user's
    /// when no inode can be named ([`crate::store::History::version_guard`]).
    pub fn version_perm(&self, id: i64) -> Result<(u32, u32, u32)> {
        let Some(guard) = self.store.version_guard(id)? else {
            let root = self.tree.read().get(ROOT)?.attrs;
            return Ok((0o400, unsafe { libc::geteuid() }, root.gid));
        };
        let live = if guard.linked {
            self.tree.read().get(guard.ino).ok().map(|n| n.attrs)
        } else {
            None
        };
        Ok(match live {
            Some(a) => (a.mode & 0o444, a.uid, a.gid),
            None => (guard.mode & 0o444, guard.uid, guard.gid),
        })
    }

    /// Records a refusal decided before any core call, by `caller` (an MCP call's own
    /// checks: its paths, its size, `--read-only`, a writer it may not claim; issue 12),
    /// as the gate records its own (SPEC §6), in the one place refusals go.
    pub fn record_remote_refusal(&self, path: &str, caller: &Caller, e: &Error) {
        self.record_refusal(path, caller, e, None);
    }

    /// Runs `f` on this thread with every core call made as `caller` (from
    /// [`Fs::remote_caller`]) instead of the process of the call's [`Ctx`]: the gate, the
    /// refusals on record and the versions' provenance name it.
    pub fn acting_as<R>(&self, caller: Arc<Caller>, f: impl FnOnce() -> R) -> R {
        struct Reset(Option<Arc<Caller>>);
        impl Drop for Reset {
            fn drop(&mut self) {
                let before = self.0.take();
                ACTING.with(|a| *a.borrow_mut() = before);
            }
        }
        let before = ACTING.with(|a| a.borrow_mut().replace(caller));
        let _reset = Reset(before);
        f()
    }

    /// Whether the rule of the file at `ino` says `"on_conflict": "overwrite"`.
    fn overwrites(&self, ino: u64) -> bool {
        if !self.gate.rules.is_some() {
            return false;
        }
        let path = self.tree.read().path(ino);
        self.overwrites_path(&path)
    }

    /// Whether the rule of `path` says `"on_conflict": "overwrite"`.
    fn overwrites_path(&self, path: &str) -> bool {
        let Some(r) = self.gate.rules.load() else {
            return false;
        };
        r.rule_for(path)
            .is_some_and(|p| p.on_conflict == crate::rules::OnConflict::Overwrite)
    }

    /// Mounts with these writer rules (they replace the defaults of SPEC §3).
    pub fn with_rules(self, rules: crate::rules::enforce::Compiled) -> Self {
        self.gate.rules.set(Some(rules));
        self
    }

    /// Who may erase history (gc, redact): root and these uids (default: root and the
    /// user this process runs as, i.e. the user who mounted).
    pub fn with_admins(mut self, uids: &[u32]) -> Self {
        self.gate.admins = std::iter::once(0).chain(uids.iter().copied()).collect();
        self.gate.admins.dedup();
        self
    }

    /// The policy gate this filesystem asks.
    pub fn gate(&self) -> &gate::Gate {
        &self.gate
    }

    /// The store behind this filesystem.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// `lookup` by the requester `ctx`: [`Fs::lookup`] with the size it may see
    /// ([`Fs::getattr_for`]).
    pub fn lookup_for(&self, parent: u64, name: &[u8], ctx: Ctx) -> Result<Attr> {
        let a = self.lookup(parent, name)?;
        if View::of(a.ino) == Some(View::Manifest) {
            return self.view_attr_for(View::Manifest, Some(ctx));
        }
        if a.volatile && a.kind == Kind::File && !a.synthesized {
            let tgid = self.pending_viewer(a.ino, ctx);
            if let Ok(b) = self.tree.read().attr_as(a.ino, tgid) {
                return Ok(b);
            }
        }
        Ok(a)
    }

    /// `lookup`: the child `name` of `parent`; counts one kernel reference.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        // Every operation on a path looks its last name up first: stat, chmod, unlink,
        // rmdir, truncate and rename of a name past NAME_MAX get ENAMETOOLONG here.
        if name.len() > NAME_MAX {
            return Err(Error::new(
                libc::ENAMETOOLONG,
                format!("name of {} bytes: longer than {NAME_MAX}", name.len()),
            ));
        }
        if let Some(view) = self.view_by_name(parent, name)? {
            return self.view_attr(view);
        }
        let mut tree = self.tree.write();
        let ino = tree.child(parent, name)?.ok_or_else(|| {
            Error::new(
                libc::ENOENT,
                format!(
                    "{}: no such file or directory",
                    tree.child_path(parent, name)
                ),
            )
        })?;
        tree.get_mut(ino)?.nlookup += 1;
        tree.attr(ino)
    }

    /// `forget`: the kernel dropped `n` references.
    pub fn forget(&self, ino: u64, n: u64) {
        let mut tree = self.tree.write();
        if let Some(node) = tree.nodes.get_mut(&ino) {
            node.nlookup = node.nlookup.saturating_sub(n);
        }
        tree.reap(ino);
    }

    /// `getattr`.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        if let Some(view) = View::of(ino) {
            return self.view_attr(view);
        }
        self.tree.read().attr(ino)
    }

    /// The attributes a caller that does not come through the kernel (MCP) is shown:
    /// MANIFEST's size is that of the text `ctx` reads ([`Fs::view_attr_for`]); anything
    /// else as [`Fs::getattr`] answers (without telling the kernel anything).
    pub fn attr_seen_by(&self, ino: u64, ctx: Ctx) -> Result<Attr> {
        if View::of(ino) == Some(View::Manifest) {
            return self.view_attr_for(View::Manifest, Some(ctx));
        }
        self.getattr(ino)
    }

    /// `getattr` as the requesting process sees it: while a write handle holds uncommitted
    /// changes, only processes with a write handle on the file get its pending size
    /// (FUSE-TRAPS §3); any other gets the committed size, so that a reader reading through
    /// the page cache after another process's `O_TRUNC` open (which sets the kernel's
    /// i_size to 0) asks for the bytes of its snapshot instead of seeing an empty file.
    pub fn getattr_for(&self, ino: u64, ctx: Ctx) -> Result<Attr> {
        if let Some(view) = View::of(ino) {
            return self.view_attr_for(view, Some(ctx));
        }
        let tgid = self.pending_viewer(ino, ctx);
        // An answer that tells the kernel the head's size (not a held or pending one)
        // ends `size_untold` for that head.
        let (attr, telling) = {
            let tree = self.tree.read();
            let attr = tree.attr_as(ino, tgid)?;
            let n = tree.get(ino)?;
            let telling = n.size_untold && n.pending_size.is_none() && n.held_size().is_none();
            (attr, telling.then(|| n.content().0))
        };
        if let Some(head) = telling {
            let mut tree = self.tree.write();
            if let Ok(n) = tree.get_mut(ino)
                && n.content().0 == head
            {
                n.size_untold = false;
            }
        }
        Ok(attr)
    }

    /// The requester's tgid when the file has a pending size (resolving it costs a read of
    /// `/proc/<pid>/stat`, so only then).
    fn pending_viewer(&self, ino: u64, ctx: Ctx) -> Option<u32> {
        let pending = self
            .tree
            .read()
            .get(ino)
            .is_ok_and(|n| n.pending_size.is_some());
        (pending && ctx.pid != 0).then(|| self.resolver.resolve(ctx.pid, ctx.uid, ctx.gid).tgid)
    }

    /// `mknod`: device nodes and FIFOs are refused with `EPERM` (SPEC §3; regular files
    /// come through `create`).
    pub fn mknod(&self) -> Result<std::convert::Infallible> {
        Err(Error::new(
            libc::EPERM,
            "device nodes and FIFOs are not supported (SPEC §3)",
        ))
    }

    /// `setattr` (chmod, chown, truncate, utimens). A size change through a write handle
    /// `fh` truncates its private copy; without one it commits a `truncate` version at once.
    pub fn setattr(&self, ino: u64, set: SetAttr, fh: Option<u64>, ctx: Ctx) -> Result<Attr> {
        if View::of(ino).is_some() {
            return Err(Error::new(libc::EACCES, "views are read-only"));
        }
        // A change another handle owes (its create's first version, its O_TRUNC) is made
        // first: its commit, at that handle's release, could otherwise land after these
        // attributes and stamp its own mtime over an explicit one (rsync: close, then
        // utimensat, while the release is still queued).
        let owed = self.tree.read().get(ino).ok().and_then(|n| n.owed_by);
        if let Some(ofh) = owed
            && fh != Some(ofh)
        {
            let _ = self.commit_handle(ofh, false, true);
        }
        if set.mode.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || set.atime_ns.is_some()
            || set.mtime_ns.is_some()
        {
            let (path, kind) = {
                let tree = self.tree.read();
                (tree.path(ino), tree.get(ino)?.kind)
            };
            self.admit(
                &self.caller(ctx),
                &Change::SetAttr { path: &path, kind },
                || None,
            )?;
        }
        if let Some(size) = set.size {
            check_size(Some(size))?;
            let handle = fh.and_then(|fh| self.handles.lock().get(&fh).cloned().map(|h| (fh, h)));
            let mut done = false;
            if let Some((fh, h)) = handle {
                let mut h = h.lock();
                let caller = h.caller.clone();
                if let HandleKind::Write(w) = &mut h.kind {
                    if let Some(e) = &w.poisoned {
                        return Err(e.clone());
                    }
                    self.rebase_if_untouched(fh, ino, w)?;
                    let path = self.tree.read().path(ino);
                    let change = Change::TruncateHandle {
                        path: &path,
                        size,
                        committed_len: w.base.len,
                    };
                    self.admit(&caller, &change, || None)?;
                    w.truncate(size)?;
                    let pending = w.size;
                    self.tree.write().get_mut(ino)?.pending_size = Some(pending);
                    done = true;
                }
            }
            if !done {
                {
                    let tree = self.tree.read();
                    let n = tree.get(ino)?;
                    if n.kind == Kind::Dir {
                        return Err(Error::new(libc::EISDIR, "truncate of a directory"));
                    }
                    // The truncation the kernel sends after an O_TRUNC open carries no
                    // handle (fuser 0.18, FUSE-TRAPS §4); one that changes nothing is no
                    // version.
                    done = n.content().1.len == size;
                }
            }
            if !done {
                let caller = self.caller(ctx);
                let _ns = self.ns_guard.read();
                let (path, committed_len) = {
                    let tree = self.tree.read();
                    let n = tree.get(ino)?;
                    (tree.path(ino), n.head.as_ref().map_or(0, |h| h.content.len))
                };
                let current = if self.gate.needs_content(&path) {
                    Some(self.current_bytes(ino)?)
                } else {
                    None
                };
                let change = Change::Truncate {
                    path: &path,
                    size,
                    committed_len,
                    current: current.as_deref(),
                };
                self.admit(&caller, &change, || {
                    current.as_ref().map(|c| {
                        let mut c = c.clone();
                        c.resize(size.min(1 << 20) as usize, 0);
                        c
                    })
                })?;
                // The pad's quota (issue 36): a truncation is a version (its record) and
                // may add up to the bytes it grows by, as a commit through a handle.
                let adds = size.saturating_sub(committed_len);
                let _quota_hold = self.quota_allows_bytes(&caller, &path, adds, || None)?;
                let before = self.tree.read().get(ino)?.head.as_ref().map(|v| v.id);
                let mut none = |_: u64, _: &mut [u8]| Ok(());
                // A truncation that keeps bytes of the current version names it as an
                // input (docs/SEMANTICS.md "Lineage").
                let kept = before.filter(|_| size > 0 && committed_len > 0);
                let v = self.commit_from(
                    ino,
                    "truncate",
                    None,
                    Build::Truncate { size },
                    &mut none,
                    &caller,
                    false,
                    None,
                    None,
                    kept,
                )?;
                if Some(v.id) != before {
                    self.usage_added(adds + path.len() as u64, 1, 0, 0);
                }
            }
        }
        if set.mode.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || set.atime_ns.is_some()
            || set.mtime_ns.is_some()
        {
            let caller = self.caller(ctx);
            let mut tree = self.tree.write();
            let path = tree.path(ino);
            // A change of mode, owner or times is an event (issue 36: its record counts
            // against the quota).
            let _quota_hold = self.quota_allows_event(&caller, &path, "change of attributes")?;
            let node = tree.get_mut(ino)?;
            let mut a = node.attrs;
            if let Some(m) = set.mode {
                a.mode = m & 0o7777;
            }
            if let Some(u) = set.uid {
                a.uid = u;
            }
            if let Some(g) = set.gid {
                a.gid = g;
            }
            // chown(2): "When the owner or group of an executable file is changed by an
            // unprivileged user, the S_ISUID and S_ISGID mode bits are cleared" (S_ISGID
            // only with group execute, as the kernel's setattr_should_drop_suidgid does).
            if (set.uid.is_some() || set.gid.is_some())
                && set.mode.is_none()
                && ctx.uid != 0
                && node.kind == Kind::File
            {
                a.mode = clear_suid_sgid(a.mode);
            }
            if let Some(t) = set.atime_ns {
                a.atime_ns = t;
            }
            if let Some(t) = set.mtime_ns {
                a.mtime_ns = t;
            }
            a.ctime_ns = now_ns();
            let pinned = set.mtime_ns.is_some() || node.mtime_pinned;
            self.store.set_attrs(ino, a, pinned, &path, &caller)?;
            self.usage_added(path.len() as u64, 0, 1, 0);
            let node = tree.get_mut(ino)?;
            node.attrs = a;
            if set.mtime_ns.is_some() {
                node.mtime_pinned = true;
            }
        }
        self.getattr(ino)
    }

    /// `open`. Write handles get a private copy and direct I/O; read handles a snapshot of
    /// the current version, keeping the page cache while that version is unchanged.
    pub fn open(&self, ino: u64, flags: i32, ctx: Ctx) -> Result<(u64, OpenFlags)> {
        self.open_inner(ino, flags, ctx, true)
    }

    /// A read-only core (a mount of the past) took its files' versions from the store when
    /// it was mounted, and hears of no change since; a redaction moves a version's content
    /// (same version, other bytes). At each open the version is read again: when its
    /// content moved, the node takes it and the kernel's pages and size of the old bytes
    /// are dropped. A version the store no longer has (a gc since the mount) is
    /// `ENODATA`, as one forgotten before it ([`serve_checkpoints::forgotten_by_gc`]);
    /// other store failures are left to the read to report.
    fn follow_rewritten_head(&self, ino: u64) -> Result<()> {
        let Some(id) = self
            .tree
            .read()
            .get(ino)
            .ok()
            .and_then(|n| n.head.as_ref().map(|h| h.id))
        else {
            return Ok(());
        };
        let now = match self.store.version(id) {
            Ok(now) => now,
            Err(e) if e.is(crate::store::ErrorKind::NotFound) => {
                return Err(serve_checkpoints::forgotten_by_gc(
                    &self.tree.read().path(ino),
                ));
            }
            Err(_) => return Ok(()),
        };
        {
            let mut tree = self.tree.write();
            let Ok(node) = tree.get_mut(ino) else {
                return Ok(());
            };
            match node.head.as_mut() {
                Some(h) if h.id == id && h.content != now.content => h.content = now.content,
                _ => return Ok(()),
            }
            node.forget_old_bytes();
        }
        self.views.changed(&[ino]);
        // Inside the open's request: sent, not waited for (FUSE-TRAPS).
        NO_WAIT.with(|c| c.set(true));
        self.invalidate(Invalidation::Attr(ino));
        self.invalidate(Invalidation::Data(ino));
        NO_WAIT.with(|c| c.set(false));
        Ok(())
    }

    /// `open`; `check`: apply the writer rules (not for the handle of a `create`, whose
    /// creation was checked).
    fn open_inner(&self, ino: u64, flags: i32, ctx: Ctx, check: bool) -> Result<(u64, OpenFlags)> {
        let acc = flags & libc::O_ACCMODE;
        let writable = acc == libc::O_WRONLY || acc == libc::O_RDWR;
        if !self.forgotten.is_empty() && self.forgotten.contains(&ino) {
            return Err(serve_checkpoints::forgotten_by_gc(
                &self.tree.read().path(ino),
            ));
        }
        if self.gate.read_only && View::of(ino).is_none() {
            self.follow_rewritten_head(ino)?;
        }
        if let Some(view) = View::of(ino) {
            let opened = self.open_view(view, writable || flags & libc::O_TRUNC != 0, ctx)?;
            if ctx.pid != 0
                && matches!(view, View::Version(_) | View::Archived(_))
                && let Ok((_, id)) = self.history_content(view)
            {
                self.note_version_read(id, &self.caller(ctx));
            }
            return Ok(opened);
        }
        // A reader is resolved too: its read is provenance (issue 13), unless the kernel
        // opened on its own (pid 0).
        let readable = acc == libc::O_RDONLY || acc == libc::O_RDWR;
        let caller = if writable || (readable && ctx.pid != 0) {
            self.caller(ctx)
        } else {
            Arc::new(Caller {
                pid: ctx.pid,
                uid: ctx.uid,
                gid: ctx.gid,
                ..Default::default()
            })
        };
        if check && (writable || flags & libc::O_TRUNC != 0) {
            let (path, committed_len, wal_index) = {
                let tree = self.tree.read();
                let n = tree.get(ino)?;
                (
                    tree.path(ino),
                    n.head.as_ref().map_or(0, |h| h.content.len),
                    writable && tree.is_sqlite_wal_index(n.parent, &n.name),
                )
            };
            let change = Change::Open {
                path: &path,
                trunc: flags & libc::O_TRUNC != 0,
                committed_len,
                wal_index,
            };
            self.admit(&caller, &change, || None)?;
        }
        self.settle_owed(ino);
        // The first appender too (issue 31 item 5): its direct writes extend the kernel's
        // i_size under page-cache readers, who would read zeros where the appended bytes
        // go. From its open on, readers of the file bypass the page cache
        // (`Node::appended`): a later appender finds no reader to wait for but those the
        // first one waited for already (a `tail -f` opened before it delays one append,
        // not each).
        let append = writable && flags & libc::O_APPEND != 0;
        // Looked up under the read lock first: every later append open (a shell's `>>` in
        // a loop) takes no write lock of the tree here.
        let first_append = append
            && !self.tree.read().get(ino).is_ok_and(|n| n.appended)
            && self
                .tree
                .write()
                .get_mut(ino)
                .is_ok_and(|n| !std::mem::replace(&mut n.appended, true));
        let draining = writable && (!append || first_append);
        if draining {
            self.drain_cached_readers(ino);
        }
        let trunc = flags & libc::O_TRUNC != 0;
        if trunc && !writable {
            // O_RDONLY|O_TRUNC truncates on Linux: commit it at once.
            self.setattr(
                ino,
                SetAttr {
                    size: Some(0),
                    ..Default::default()
                },
                None,
                ctx,
            )?;
        }
        let read_before = if acc == libc::O_WRONLY && !Self::is_shell(&caller) {
            self.read_before(ino, &caller)
        } else {
            None
        };
        let mut tree = self.tree.write();
        let node = tree.get_mut(ino)?;
        if draining {
            node.draining = node.draining.saturating_sub(1);
        }
        if node.kind == Kind::Dir {
            return Err(Error::new(libc::EISDIR, "is a directory"));
        }
        let (head_id, head_content) = node.content();
        let (kind, of) = if writable {
            let mut w = if trunc {
                WriteState::new_truncated(head_id, head_content)
            } else {
                WriteState::new(flags & libc::O_APPEND != 0, head_id, head_content)
            };
            if acc == libc::O_WRONLY {
                w.read_before = read_before;
            }
            if !check && node.head.is_none() {
                // The handle of a `create` owes the file's first version, empty unless it
                // writes: `touch f` records one empty version, `echo v1 > f` one holding
                // "v1" (its first flush, the shell's dup2, comes before the write).
                w.owe_create();
            }
            if w.open_trunc_only {
                node.pending_size = Some(0);
                // open(2): "If O_TRUNC ... the st_ctime and st_mtime fields of the file are
                // set to the current time": a stat before the truncation's commit (at
                // release) shows size 0 with the new times, not the old ones.
                let now = now_ns();
                node.attrs.mtime_ns = now;
                node.attrs.ctime_ns = now;
            }
            (
                HandleKind::Write(w),
                OpenFlags {
                    direct_io: true,
                    keep_cache: false,
                    noflush: false,
                    cache_dir: false,
                },
            )
        } else {
            // The page cache is per inode, so it may hold one version at a time. A reader
            // uses it when it holds (or may be switched to) the current version; else it
            // bypasses it and reads its snapshot whole (SPEC §4): while a write handle holds
            // uncommitted changes (the kernel's i_size is then the writer's, FUSE-TRAPS §3),
            // or while readers of an older version still read through the cache.
            // Only while no write handle is open (or about to open, `draining`): a writer
            // changes the kernel's i_size for every reader of the inode (its O_TRUNC open
            // sets it to 0, its direct writes extend it), and a reader reading through the
            // page cache is bounded by it: it would see an empty or cut file.
            // Nor on a file an appender opened (`Node::appended`): one may open again at
            // any moment, and its writes would extend the size under this reader.
            let quiet = node.writer_tgids.is_empty() && node.draining == 0 && !node.appended;
            let pending = node.pending_size.is_some();
            // Nor while the kernel may still hold another version's size
            // (`size_untold`: a version from another daemon or a rollback, no getattr yet).
            let cached = quiet
                && !pending
                && !node.size_untold
                && (node.cached_version == head_id || node.cache_readers == 0);
            let keep = cached && node.cached_version == head_id;
            if cached {
                node.cached_version = head_id;
                node.cache_readers += 1;
            }
            (
                HandleKind::Read(head_content, cached),
                OpenFlags {
                    direct_io: !cached,
                    keep_cache: keep || !cached,
                    noflush: true,
                    cache_dir: false,
                },
            )
        };
        node.open_handles += 1;
        if writable {
            node.writer_tgids.push(caller.tgid);
        }
        let read = if readable && ctx.pid != 0 {
            self.mark_read(node, &caller)
        } else {
            None
        };
        drop(tree);
        if let Some(r) = read {
            self.store_read(ino, &caller, r);
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().insert(
            fh,
            Arc::new(Slot::new(Handle {
                ino,
                caller,
                kind,
                created: !check,
            })),
        );
        Ok((fh, of))
    }

    /// Before an open: a change another handle owes (an `O_TRUNC`-only truncation or a
    /// create's empty first version, flushed but not committed, see [`Fs::flush`]) is
    /// settled first when it is about to be. Usually the owing handle's release is already
    /// on its way (`: > f; cat f`: close queues the release before it returns, and the
    /// release commits): the open waits for it, or for the owing handle's first write
    /// (then its whole rewrite commits later). An owing handle that does neither within
    /// [`OWED_WAIT`] is still open (a shell's `exec 3>f` whose child exited, flushing its
    /// copy of the descriptor): its change stays uncommitted and the open reads the current
    /// version, since readers never see what was never committed.
    fn settle_owed(&self, ino: u64) {
        let deadline = std::time::Instant::now() + OWED_WAIT;
        loop {
            if self
                .tree
                .read()
                .get(ino)
                .ok()
                .and_then(|n| n.owed_by)
                .is_none()
                || std::time::Instant::now() >= deadline
            {
                return;
            }
            let mut g = self.owed.0.lock();
            // Woken when an owed change is settled; the slice bounds a missed wake-up.
            self.owed
                .1
                .wait_for(&mut g, std::time::Duration::from_millis(5));
        }
    }

    /// Before a write handle opens (an `O_APPEND` one only if it is the file's first since
    /// the mount, `Node::appended`): readers reading through the
    /// page cache (opened while no writer was) are let finish first, up to
    /// [`CACHED_READERS_WAIT`], because the writer's `O_TRUNC` or direct writes change the
    /// kernel's i_size under them (they would read an empty or cut file). Readers that
    /// open meanwhile bypass the page cache. A reader still open after the wait (`less`,
    /// `tail -f`) is left as it is (docs/SEMANTICS.md).
    fn drain_cached_readers(&self, ino: u64) {
        let mut waiting = false;
        let deadline = std::time::Instant::now() + CACHED_READERS_WAIT;
        loop {
            {
                let mut tree = self.tree.write();
                let Ok(n) = tree.get_mut(ino) else { return };
                if !waiting {
                    n.draining += 1;
                    waiting = true;
                }
                if n.cache_readers == 0 || std::time::Instant::now() >= deadline {
                    return;
                }
            }
            let mut g = self.owed.0.lock();
            self.owed
                .1
                .wait_for(&mut g, std::time::Duration::from_millis(5));
        }
    }

    /// Wakes opens waiting in [`Fs::settle_owed`] and [`Fs::drain_cached_readers`].
    pub(super) fn owed_settled(&self) {
        let _g = self.owed.0.lock();
        self.owed.1.notify_all();
    }

    fn handle(&self, fh: u64) -> Result<Arc<Slot>> {
        self.handles
            .lock()
            .get(&fh)
            .cloned()
            .ok_or_else(|| Error::new(libc::EBADF, format!("no open handle {fh}")))
    }

    /// A write handle `fh` that has neither read nor written follows the current version,
    /// so that e.g. a `truncate(2)` between its open and first write is not a lost update.
    /// An `O_TRUNC` open's truncation, owed until the handle's commit, stays owed on the
    /// version followed: the handle replaces that version whole, as it would have replaced
    /// the one it opened (helper finding: the truncation was dropped, and the handle's
    /// bytes landed on the other writer's content); so does an `O_TRUNC` open of an empty
    /// file or of one without a version ([`WriteState::replaces`]).
    ///
    /// A file without a version is a file whose current version is empty: the handle of
    /// its create, which owes that first version ([`WriteState::owes_create_only`]),
    /// follows a version another handle, process or daemon committed meanwhile like any
    /// other handle, and no longer owes anything (issue 31 item 5: its `pwrite`,
    /// `ftruncate` or `posix_fallocate` replaced that version with zeros and its bytes).
    /// A handle that has written is not moved: its commit is checked against the version
    /// it had (none: `ESTALE` when the file has one now).
    pub(super) fn rebase_if_untouched(&self, fh: u64, ino: u64, w: &mut WriteState) -> Result<()> {
        if w.touched {
            return Ok(());
        }
        let settled = {
            let tree = self.tree.read();
            let Some(head) = &tree.get(ino)?.head else {
                return Ok(());
            };
            if head.id == w.base_version {
                return Ok(());
            }
            let truncated = w.replaces && !w.append;
            let (poisoned, refused) = (w.poisoned.take(), w.refused.take());
            let read_before = w.read_before;
            *w = if truncated {
                WriteState::new_truncated(head.id, head.content)
            } else {
                WriteState::new(w.append, head.id, head.content)
            };
            // A refusal sticks to the handle whatever it follows, and what its process
            // had read before it opened still counts (issue 13).
            w.poisoned = poisoned;
            w.refused = refused;
            w.read_before = read_before;
            // A change this handle owed (flushed, not committed) that it owes no more
            // (a create's first version, a truncation of what is empty now): opens
            // waiting for it go on.
            !w.modified && tree.get(ino)?.owed_by == Some(fh)
        };
        if settled {
            let mut tree = self.tree.write();
            if let Ok(n) = tree.get_mut(ino)
                && n.owed_by == Some(fh)
            {
                n.owed_by = None;
            }
            drop(tree);
            self.owed_settled();
        }
        Ok(())
    }

    /// `read`: up to `size` bytes at `offset` (short at EOF).
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let h = self.handle(fh)?;
        let mut guard = h.lock();
        let h = &mut *guard;
        let ino = h.ino;
        match &mut h.kind {
            HandleKind::View(bytes) => {
                let start = (offset as usize).min(bytes.len());
                let end = (start + size as usize).min(bytes.len());
                Ok(bytes[start..end].to_vec())
            }
            HandleKind::Read(content, cached) => {
                // A follower (tail -f): a read past the snapshot's end picks up a later
                // version that only extends it (an append: the same stream, longer), so
                // the bytes already read stay true. A rewrite keeps the snapshot. Every
                // version extends an empty one (`touch log; tail -f log`, or a file
                // without a version: issue 31 item 5, the follower read nothing, forever).
                if offset.saturating_add(size as u64) > content.len {
                    let mut tree = self.tree.write();
                    let mut followed = None;
                    if let Ok(node) = tree.get_mut(ino)
                        && let Some(head) = &node.head
                        && (content.len == 0 || head.content.stream == content.stream)
                        && head.content.len > content.len
                    {
                        *content = head.content;
                        if *cached {
                            // The page cache holds a prefix of the head now.
                            node.cached_version = head.id;
                        }
                        // The process reads that version now: what it writes later is
                        // made from it (issue 13), not from the one it opened (helper
                        // finding: a later `open(p, "w")` was refused as a lost update).
                        followed = self.mark_read(node, &h.caller);
                    }
                    drop(tree);
                    if let Some(r) = followed {
                        self.store_read(ino, &h.caller, r);
                    }
                }
                let mut buf =
                    vec![0u8; (size as u64).min(content.len.saturating_sub(offset)) as usize];
                let n = self.store.read(*content, offset, &mut buf)?;
                buf.truncate(n);
                Ok(buf)
            }
            HandleKind::Write(w) => {
                // A handle with nothing uncommitted reads the current version, as on a
                // local filesystem: processes that share a file under locks (SQLite in
                // rollback-journal mode) see each other's commits. The version it read
                // becomes its base, so writing on stale data is still a lost update.
                // The handle of a create that has written nothing holds nothing either:
                // the first version it owes is the empty file, which another commit
                // replaced (issue 31 item 5: a second process creating one SQLite
                // database read its own empty copy, "file is not a database"). A handle
                // that reads bases what it writes on what it read, not on its `O_TRUNC`.
                if !w.modified || w.owes_create_only() {
                    w.touched = false;
                    w.replaces = false;
                    self.rebase_if_untouched(fh, ino, w)?;
                }
                w.touched = true;
                self.read_private(w, offset, size)
            }
        }
    }

    /// `write`: into the handle's private copy. Returns the bytes accepted.
    ///
    /// With rules, `EPERM` for an append-only path's committed bytes, and `EINVAL` already
    /// here when the content is certainly invalid (SPEC §6): bytes that cannot become
    /// UTF-8 in a path with a `format`, or a JSON syntax error in what a handle writing at
    /// its end has written so far (up to [`JSON_PREFIX_CHECK_MAX`] bytes).
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        check_size(offset.checked_add(data.len() as u64))?;
        let h = self.handle(fh)?;
        let mut h = h.lock();
        let ino = h.ino;
        let caller = h.caller.clone();
        let created = h.created;
        let HandleKind::Write(w) = &mut h.kind else {
            return Err(Error::new(libc::EBADF, "handle not open for writing"));
        };
        if let Some(e) = &w.poisoned {
            return Err(e.clone());
        }
        self.rebase_if_untouched(fh, ino, w)?;
        let at = if w.append {
            w.base.len + w.size
        } else {
            offset
        };
        let Some(path) = self.gate.has_rules().then(|| self.tree.read().path(ino)) else {
            let size = w.write(&self.spill_dir, offset, data)?;
            let pending = if w.append { w.base.len + size } else { size };
            self.wrote(fh, ino, pending, w.append)?;
            return Ok(data.len() as u32);
        };
        // Before the bytes land: the append-only rule, and what these bytes make certain
        // (a secret in them or across their start, the size past max_bytes).
        let committed_len = self
            .tree
            .read()
            .get(ino)?
            .head
            .as_ref()
            .map_or(0, |h| h.content.len);
        let end = at + data.len() as u64;
        let size_after = if w.append { end } else { w.size.max(end) };
        // An append handle's window stays within its own bytes: the overlap with the
        // committed content is searched at commit (so an append reads no committed bytes
        // here).
        let floor = if w.append { w.base.len } else { 0 };
        let window_at = at.saturating_sub(gate::SECRET_OVERLAP as u64).max(floor);
        let mut window = Vec::new();
        if self.gate.checks_secrets(&path) {
            window = self.read_private(w, window_at, (at - window_at) as u32)?;
            window.extend_from_slice(data);
        }
        let change = Change::Write {
            path: &path,
            at,
            data,
            size_after,
            committed_len,
            append: w.append,
            window: &window,
            window_at,
            whole: None,
            current: None,
        };
        if let Err(e) = self.gate.check(&caller, &change) {
            if e.errno == libc::EINVAL {
                w.write(&self.spill_dir, offset, data)?;
            }
            let (e, gone) = self.refuse_write(fh, ino, w, &path, &caller, created, e)?;
            drop(h);
            self.invalidate_after_refusal(ino, gone);
            return Err(e);
        }
        let size = w.write(&self.spill_dir, offset, data)?;
        let pending = if w.append { w.base.len + size } else { size };
        // A `json` path written in order: a syntax error, or a complete object breaking
        // `fields`, is certain now.
        let at_end = w.append || offset + data.len() as u64 == size;
        if at_end && pending <= JSON_PREFIX_CHECK_MAX && self.gate.write_needs_whole(&path) {
            let whole = self.content_after(ino, w)?;
            let current = if self.gate.has_fields(&path) {
                Some(self.current_bytes(ino)?)
            } else {
                None
            };
            let change = Change::Write {
                path: &path,
                at,
                data,
                size_after: pending,
                committed_len,
                append: w.append,
                window: &[],
                window_at: at,
                whole: Some(&whole),
                current: current.as_deref(),
            };
            if let Err(e) = self.gate.check(&caller, &change) {
                let (e, gone) = self.refuse_write(fh, ino, w, &path, &caller, created, e)?;
                drop(h);
                self.invalidate_after_refusal(ino, gone);
                return Err(e);
            }
        }
        self.wrote(fh, ino, pending, w.append)?;
        Ok(data.len() as u32)
    }

    /// After bytes landed in handle `fh`'s private copy: the inode's pending size, an
    /// owed change that is now part of the handle's rewrite, and for an `O_APPEND` handle
    /// its live commit ([`LIVE_APPEND_DELAY`]).
    fn wrote(&self, fh: u64, ino: u64, pending: u64, append: bool) -> Result<()> {
        let settled = {
            let mut tree = self.tree.write();
            let node = tree.get_mut(ino)?;
            node.pending_size = Some(pending);
            node.mtime_pinned = false;
            let owed = node.owed_by == Some(fh);
            if owed {
                node.owed_by = None;
            }
            owed
        };
        if settled {
            self.owed_settled();
        }
        if append {
            self.live.schedule(fh);
        }
        Ok(())
    }

    /// `fallocate(2)` on write handle `fh`. The default mode extends the private copy to
    /// `offset + length` bytes when it is shorter (a hole: nothing is stored, and no space
    /// is reserved, so a later write may still get `ENOSPC`); `FALLOC_FL_KEEP_SIZE`
    /// changes nothing. Errors: `EFBIG` past [`MAX_FILE_SIZE`], `EOPNOTSUPP` for every
    /// other mode (punch hole, zero range, collapse, insert, unshare), `EBADF` on a handle
    /// not open for writing; the extension is judged by the gate like `ftruncate`
    /// (docs/SEMANTICS.md).
    pub fn fallocate(&self, fh: u64, offset: u64, length: u64, mode: i32, ctx: Ctx) -> Result<()> {
        if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return Err(Error::new(
                libc::EOPNOTSUPP,
                format!("fallocate mode {mode:#x}: only the default mode and FALLOC_FL_KEEP_SIZE"),
            ));
        }
        let end = check_size(offset.checked_add(length))?;
        let ino = {
            let h = self.handle(fh)?;
            let h = h.lock();
            if !matches!(h.kind, HandleKind::Write(_)) {
                return Err(Error::new(libc::EBADF, "handle not open for writing"));
            }
            h.ino
        };
        if mode & libc::FALLOC_FL_KEEP_SIZE != 0 || end <= self.getattr(ino)?.size {
            return Ok(());
        }
        let set = SetAttr {
            size: Some(end),
            ..SetAttr::default()
        };
        self.setattr(ino, set, Some(fh), ctx).map(|_| ())
    }

    /// `fsyncdir`: every change answered so far is written to SQLite and synced
    /// ([`Store::sync_to_disk`]).
    pub fn fsyncdir(&self) -> Result<()> {
        Ok(self.store.sync_to_disk()?)
    }

    /// The end of a clean unmount ([`Store::finish`]): the database file alone holds the
    /// whole scratchpad.
    pub fn finish(&self) -> Result<()> {
        self.record_unrecorded();
        Ok(self.store.finish()?)
    }

    /// `opendir`: checks that `ino` is a directory; its listing may be cached by the
    /// kernel, which invalidates it on every change made through the mount.
    pub fn opendir(&self, ino: u64) -> Result<OpenFlags> {
        if let Some(v) = View::of(ino) {
            if !v.is_dir() {
                return Err(Error::new(libc::ENOTDIR, "not a directory"));
            }
            return Ok(OpenFlags {
                direct_io: false,
                keep_cache: false,
                noflush: true,
                cache_dir: false,
            });
        }
        self.tree.read().dir(ino)?;
        let short = self
            .listing_short
            .swap(false, std::sync::atomic::Ordering::Relaxed);
        Ok(OpenFlags {
            direct_io: false,
            keep_cache: !short,
            noflush: true,
            cache_dir: true,
        })
    }

    /// `readdirplus` (FUSE protocol 7.21): the entries of [`Fs::readdir`] with their
    /// attributes. Like a `lookup`, each entry other than `.` and `..` counts one kernel
    /// reference (views count none); the caller gives back, with [`Fs::forget`], the
    /// references of entries it could not send. An entry removed since the listing is
    /// left out.
    pub fn readdirplus(&self, ino: u64, offset: u64, max: usize) -> Result<Vec<(DirEntry, Attr)>> {
        let dir = self.getattr(ino)?;
        let mut out = Vec::new();
        for e in self.readdir(ino, offset, max)? {
            let attr = match e.name.as_slice() {
                b"." => dir,
                b".." => match self.getattr(e.ino) {
                    Ok(a) => a,
                    Err(_) => dir,
                },
                name => match self.lookup(ino, name) {
                    Ok(a) => a,
                    Err(err) if err.errno == libc::ENOENT => continue,
                    // A view whose size needs the store (MANIFEST) while the store
                    // fails (a full disk): the listing of the files goes on without it,
                    // and opening it reports the failure.
                    Err(err) if View::of(e.ino).is_some() => {
                        log::warn!("listing {}: {err}", String::from_utf8_lossy(name));
                        self.listing_short
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        continue;
                    }
                    Err(err) => return Err(err),
                },
            };
            out.push((e, attr));
        }
        Ok(out)
    }

    /// `readdir`: entries after cookie `offset` (0 = start). Cookies never change while
    /// an entry exists, so removals between calls skip nothing (FUSE-TRAPS §8): `.` is 1,
    /// `..` 2, `MANIFEST` (root only) 3, a child with inode `c` is `2c + 4` and, when views
    /// are listed, its outline `2c + 5`.
    pub fn readdir(&self, ino: u64, offset: u64, max: usize) -> Result<Vec<DirEntry>> {
        if let Some(v) = View::of(ino) {
            let mut all = self.history_readdir(v, offset)?;
            all.truncate(max);
            return Ok(all);
        }
        let tree = self.tree.read();
        let dir = tree.dir(ino)?;
        let mut out = Vec::new();
        let push = |out: &mut Vec<DirEntry>, ino, cookie, kind, name: &[u8]| {
            if cookie > offset {
                out.push(DirEntry {
                    ino,
                    next_offset: cookie,
                    kind,
                    name: name.to_vec(),
                });
            }
        };
        push(&mut out, ino, 1, Kind::Dir, b".");
        let parent = if ino == ROOT { ROOT } else { dir.parent };
        push(&mut out, parent, 2, Kind::Dir, b"..");
        if ino == ROOT {
            push(
                &mut out,
                views::MANIFEST_INO,
                3,
                Kind::File,
                views::MANIFEST,
            );
            if self.views.listed {
                // Children's cookies start at 8 (2 * 2 + 4): 4 and 5 are free.
                push(
                    &mut out,
                    View::HistoryDir(0).ino(),
                    4,
                    Kind::Dir,
                    views::HISTORY,
                );
                push(
                    &mut out,
                    View::ArchiveDir(0).ino(),
                    5,
                    Kind::Dir,
                    views::ARCHIVE,
                );
                push(
                    &mut out,
                    View::CheckpointDir(0).ino(),
                    6,
                    Kind::Dir,
                    views::CHECKPOINTS,
                );
            }
        }
        for c in dir.cookies_from(offset.saturating_sub(4) / 2) {
            if out.len() >= max {
                break;
            }
            let n = tree.get(c)?;
            push(&mut out, c, 2 * c + 4, n.kind, &n.name);
            if self.views.listed && n.kind == Kind::File {
                let mut name = n.name.to_vec();
                name.extend_from_slice(views::OUTLINE_SUFFIX);
                push(
                    &mut out,
                    View::Outline(c).ino(),
                    2 * c + 5,
                    Kind::File,
                    &name,
                );
            }
        }
        Ok(out)
    }

    /// `statfs`: the space of the filesystem holding the database, and the node count.
    pub fn statfs(&self) -> Result<StatFs> {
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        let dir = std::ffi::CString::new(self.spill_dir.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::new(libc::EIO, "spill directory path has a NUL byte"))?;
        if unsafe { libc::statvfs(dir.as_ptr(), &mut s) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        let files = self.tree.read().nodes.len() as u64;
        let scale = (s.f_frsize as u64).max(1) as f64 / 4096.0;
        let blocks = |b: u64| (b as f64 * scale) as u64;
        Ok(StatFs {
            blocks: blocks(s.f_blocks as u64).max(1),
            bfree: blocks(s.f_bfree as u64),
            bavail: blocks(s.f_bavail as u64),
            files: files + 1_000_000,
            ffree: 1_000_000,
            bsize: 4096,
            namelen: NAME_MAX as u32,
        })
    }
}
