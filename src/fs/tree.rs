//! The inode table: nodes, their names and children, lookup counts and orphans
//! (FUSE protocol: lookup/forget). No policy and no store access.

use std::collections::{BTreeSet, HashMap};

use super::{Attr, NAME_MAX, ROOT};
use crate::error::{Error, Result};
use crate::store::{Attrs, Kind, NodeRecord, VersionInfo, paths};

pub(super) struct Node {
    pub(super) parent: u64,
    pub(super) name: std::sync::Arc<[u8]>,
    pub(super) kind: Kind,
    pub(super) attrs: Attrs,
    pub(super) file_id: Option<i64>,
    pub(super) head: Option<VersionInfo>,
    /// Kernel lookup count (FUSE protocol: lookup/create/mkdir add, forget subtracts).
    pub(super) nlookup: u64,
    pub(super) open_handles: u32,
    /// Pending size of the most recent write through a handle, until it commits.
    pub(super) pending_size: Option<u64>,
    /// Processes (tgid) with a write handle open on the file, once per handle: they are
    /// told the pending size, every other process the committed one (`Fs::getattr_for`).
    pub(super) writer_tgids: Vec<u32>,
    /// Write handles waiting in their open for page-cache readers to finish: readers
    /// opening meanwhile bypass the page cache.
    pub(super) draining: u32,
    /// An `O_APPEND` write handle was opened on the file (since the mount): readers of it
    /// bypass the page cache from then on (`Fs::open`). An appender's direct writes
    /// extend the kernel's one `i_size` for every reader of the inode, and a reader
    /// through the page cache then reads the cached last page's zeros where the appended
    /// bytes go, which no version held (issue 31 item 5).
    pub(super) appended: bool,
    /// mtime was set explicitly (utimens) after the last write: a commit keeps it, so
    /// that `cp -a` and `touch -d` on an open file are not overridden at close.
    pub(super) mtime_pinned: bool,
    /// A handle whose `O_TRUNC`-only change was flushed but not yet committed: the next
    /// open of this inode, or the handle's release, commits it first.
    pub(super) owed_by: Option<u64>,
    /// Open read handles that read through the page cache (all of `cached_version`).
    pub(super) cache_readers: u32,
    /// Version whose bytes the kernel page cache may hold (decides `FOPEN_KEEP_CACHE`).
    pub(super) cached_version: i64,
    /// The size the kernel is told while page-cache readers of the previous version
    /// finish, after another daemon rewrote the file ([`Node::take_head`]).
    pub(super) held: Option<Box<HeldSize>>,
    /// The current version came from another daemon (or a rollback: [`Node::take_head`])
    /// and the kernel has not been told its size by a `getattr` since: its cached size
    /// may still be the previous version's, which bounds a reader through the page cache,
    /// so opens bypass the page cache until a `getattr` answers
    /// ([`super::Fs::getattr_for`]).
    pub(super) size_untold: bool,
    /// A directory's entries; `None` for a file, which so pays one pointer for them
    /// instead of their 80 bytes (issue 32: the table holds a `Node` per inode).
    entries: Option<Box<Entries>>,
    /// Unlinked (or replaced by a rename) but still referenced by the kernel or a handle.
    pub(super) orphan: bool,
    /// What MANIFEST learned of this file, kept for its next rendering.
    pub(super) memo: ViewMemo,
    /// The agent step of the current version's writer, if it had one (MANIFEST's stale
    /// files, issue 13).
    pub(super) step: Option<i64>,
    /// The file's last read through the mount (MANIFEST's `read` column, issue 13).
    pub(super) last_read: Option<Box<ReadMark>>,
}

/// A directory's entries ([`Node::entries`]).
#[derive(Debug, Default)]
struct Entries {
    /// Children by name.
    children: HashMap<Vec<u8>, u64>,
    /// The children's inodes, in cookie (readdir offset) order.
    cookies: BTreeSet<u64>,
    /// How many children are directories (a directory's link count is 2 + this).
    subdirs: u32,
}

/// A file's last read, and when the store last recorded one ([`super::Fs::mark_read`]).
#[derive(Debug, Clone)]
pub(super) struct ReadMark {
    pub(super) read: crate::store::LastRead,
    /// When the store's `reads` row was written, ns (0: never by this mount).
    pub(super) stored_ns: i64,
}

/// What MANIFEST learned of a file (serve_views.rs): whether it is a temporary, for the
/// name and place it had, and whether its content is binary, for the content it had.
/// Atomics, since MANIFEST renders under the tree's read lock; so a rendering reads no
/// file name and no content that it has read before. Two words, to keep the inode small
/// (a rendering reads every inode).
#[derive(Debug, Default)]
pub(super) struct ViewMemo {
    /// The digest of the name and place judged (bit 0 cleared), with bit 0 set for a
    /// temporary; 0: not judged yet.
    placed: std::sync::atomic::AtomicU64,
    /// The content judged: its stream + 1 (from bit 16), bit 15 set when binary, and the
    /// length of the start that decided (bits 0 to 14); 0: not judged yet.
    content: std::sync::atomic::AtomicU64,
}

impl ViewMemo {
    /// Whether the file was judged a temporary with its name and place as `digest`.
    pub(super) fn ephemeral(&self, digest: u64) -> Option<bool> {
        let w = self.placed.load(std::sync::atomic::Ordering::Relaxed);
        (w != 0 && w & !1 == (digest | 2) & !1).then_some(w & 1 == 1)
    }

    /// Records that the file is a temporary (or not) with its name and place as `digest`.
    pub(super) fn set_ephemeral(&self, digest: u64, ephemeral: bool) {
        let w = ((digest | 2) & !1) | u64::from(ephemeral);
        self.placed.store(w, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the start of `len` bytes of `stream` was judged binary.
    pub(super) fn binary(&self, stream: i64, len: u64) -> Option<bool> {
        let key = Self::key(stream, len)?;
        let w = self.content.load(std::sync::atomic::Ordering::Relaxed);
        (w & !(1 << 15) == key).then_some(w & (1 << 15) != 0)
    }

    /// Records whether the start of `len` bytes of `stream` is binary.
    pub(super) fn set_binary(&self, stream: i64, len: u64, binary: bool) {
        if let Some(key) = Self::key(stream, len) {
            let w = key | (u64::from(binary) << 15);
            self.content.store(w, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The content word without its binary bit; `None` for what it cannot hold (a
    /// stream id past 2^47, a start past 16 KiB: then nothing is remembered).
    fn key(stream: i64, len: u64) -> Option<u64> {
        let s = u64::try_from(stream).ok()?.checked_add(1)?;
        (s < 1 << 47 && len < 1 << 15).then_some((s << 16) | len)
    }
}

impl Node {
    /// The node of a record as the store loaded or made it, boxed as the table holds it.
    pub(super) fn from_record(r: NodeRecord) -> Box<Node> {
        Box::new(Node {
            parent: r.parent,
            name: r.name.into(),
            kind: r.kind,
            attrs: r.attrs,
            file_id: r.file_id,
            head: r.head,
            nlookup: 0,
            open_handles: 0,
            pending_size: None,
            writer_tgids: Vec::new(),
            draining: 0,
            appended: false,
            mtime_pinned: r.mtime_pinned,
            owed_by: None,
            cached_version: 0,
            cache_readers: 0,
            held: None,
            size_untold: false,
            entries: (r.kind == Kind::Dir).then(Box::default),
            orphan: false,
            memo: ViewMemo::default(),
            step: r.step,
            last_read: r.last_read.map(|read| {
                Box::new(ReadMark {
                    stored_ns: read.time_ns,
                    read,
                })
            }),
        })
    }
    /// The inode of child `name` (a directory's; `None` for a file).
    pub(super) fn child(&self, name: &[u8]) -> Option<u64> {
        self.entries.as_ref()?.children.get(name).copied()
    }
    /// Whether the node is a directory with at least one child.
    pub(super) fn has_children(&self) -> bool {
        self.entries
            .as_ref()
            .is_some_and(|e| !e.children.is_empty())
    }
    /// The children, by name (none for a file), in no order.
    pub(super) fn children(&self) -> impl Iterator<Item = (&[u8], u64)> {
        self.entries
            .iter()
            .flat_map(|e| e.children.iter().map(|(n, &i)| (n.as_slice(), i)))
    }
    /// The children's inodes from inode `from` on, in cookie order (none for a file).
    pub(super) fn cookies_from(&self, from: u64) -> impl Iterator<Item = u64> {
        self.entries
            .iter()
            .flat_map(move |e| e.cookies.range(from..).copied())
    }
    /// The current version's id and content; a file without a version yet (created, not
    /// committed) is empty, id 0.
    pub(super) fn content(&self) -> (i64, crate::store::ContentRef) {
        self.head
            .as_ref()
            .map_or((0, crate::store::ContentRef::default()), |h| {
                (h.id, h.content)
            })
    }
    /// The current version's bytes changed in place (a redaction moved the version to
    /// other content): no page, held size or size the kernel was told of the old bytes is
    /// used again.
    pub(super) fn forget_old_bytes(&mut self) {
        self.cached_version = 0;
        self.held = None;
        self.size_untold = true;
    }
    /// Takes `head`, a version another daemon committed (or a rollback made), as the
    /// file's current version. Readers reading the previous version through the page
    /// cache may still be open: the kernel keeps one `i_size` per inode, which bounds
    /// their reads, so unless `head` only extends their version (an append, which they
    /// follow), the kernel is told their version's size until they close, for at most
    /// [`super::CACHED_READERS_WAIT`], as a local writer's open waits for them
    /// (docs/SEMANTICS.md). Opens meanwhile get `head`, bypassing the page cache, so
    /// they read it whole whatever size `stat` says.
    ///
    /// A file without a version whose pending size is the empty first version a create's
    /// handle owes (it has written nothing) is a file whose current version is empty: that
    /// handle follows `head` at its next operation, so the size its process sees is
    /// `head`'s, as after a commit on this daemon (issue 31 item 5).
    pub(super) fn take_head(&mut self, head: Option<VersionInfo>) {
        if head.as_ref().map(|h| h.id) != self.head.as_ref().map(|h| h.id) {
            self.size_untold = true;
        }
        if self.head.is_none() && head.is_some() && self.pending_size == Some(0) {
            self.pending_size = None;
        }
        if self.cache_readers == 0 {
            self.cached_version = 0;
            self.held = None;
        } else if self.held.is_none()
            && let Some(old) = &self.head
            && old.id == self.cached_version
        {
            // Every version extends an empty one (its followers read on into it).
            let extends = head.as_ref().is_some_and(|h| {
                (old.content.len == 0 || h.content.stream == old.content.stream)
                    && h.content.len >= old.content.len
            });
            if !extends {
                self.held = Some(Box::new(HeldSize {
                    len: old.content.len,
                    until: std::time::Instant::now() + super::CACHED_READERS_WAIT,
                }));
            }
        }
        self.head = head;
    }
    /// The size held for page-cache readers of a previous version ([`Node::take_head`]),
    /// while it holds.
    pub(super) fn held_size(&self) -> Option<u64> {
        self.held
            .as_ref()
            .filter(|h| self.cache_readers > 0 && std::time::Instant::now() < h.until)
            .map(|h| h.len)
    }
    pub(super) fn size(&self) -> u64 {
        self.pending_size
            .or(self.head.as_ref().map(|h| h.content.len))
            .unwrap_or(0)
    }
}

/// A size the kernel is told instead of the current version's ([`Node::take_head`]).
#[derive(Debug)]
pub(super) struct HeldSize {
    /// The previous version's size, bytes.
    pub(super) len: u64,
    /// When the hold ends whoever is still reading.
    pub(super) until: std::time::Instant,
}

#[derive(Default)]
pub(super) struct Tree {
    /// Every inode the daemon knows, boxed: the table's slots (a power of two of them,
    /// never given back when nodes go) then cost 16 bytes each instead of a node's size,
    /// and a rehash moves pointers (issue 32, the daemon's resident size).
    pub(super) nodes: HashMap<u64, Box<Node>>,
    /// The orphans still in `nodes` (a kernel lookup or a handle holds them), so that a
    /// create looks at them without a pass over the handles ([`Tree::make_orphan`]).
    pub(super) orphans: BTreeSet<u64>,
}

impl Tree {
    pub(super) fn get(&self, ino: u64) -> Result<&Node> {
        self.nodes
            .get(&ino)
            .map(|n| &**n)
            .ok_or_else(|| Error::new(libc::ENOENT, format!("inode {ino}: not found")))
    }
    pub(super) fn get_mut(&mut self, ino: u64) -> Result<&mut Node> {
        self.nodes
            .get_mut(&ino)
            .map(|n| &mut **n)
            .ok_or_else(|| Error::new(libc::ENOENT, format!("inode {ino}: not found")))
    }
    pub(super) fn dir(&self, ino: u64) -> Result<&Node> {
        let n = self.get(ino)?;
        if n.kind != Kind::Dir {
            return Err(Error::new(
                libc::ENOTDIR,
                format!("inode {ino}: not a directory"),
            ));
        }
        Ok(n)
    }
    pub(super) fn child(&self, parent: u64, name: &[u8]) -> Result<Option<u64>> {
        Ok(self.dir(parent)?.child(name))
    }
    /// Path from the root, `/`-separated, no leading slash, as the store records it: each
    /// name's exact bytes, losslessly as text ([`crate::store::paths::encode`]). An orphan
    /// (unlinked, or replaced by a rename, while open) keeps the path it had, under its
    /// directory as that is named now: a commit through a handle on it is judged by that
    /// path's rules and recorded at it (helper finding: it was its bare name, so `vault/x`
    /// unlinked while open escaped `vault/**`'s rules, judged as a file `x` at the root).
    pub(super) fn path(&self, ino: u64) -> String {
        let mut parts = Vec::new();
        let mut at = ino;
        while at != ROOT {
            let Some(n) = self.nodes.get(&at) else { break };
            parts.push(paths::encode(&n.name).into_owned());
            at = n.parent;
        }
        parts.reverse();
        parts.join("/")
    }
    /// [`Tree::path`] of `name` in `parent`.
    pub(super) fn child_path(&self, parent: u64, name: &[u8]) -> String {
        let p = self.path(parent);
        let n = paths::encode(name);
        if p.is_empty() {
            n.into_owned()
        } else {
            format!("{p}/{n}")
        }
    }
    /// Whether `name` in directory `parent` is the shared-memory index of an SQLite
    /// database in WAL mode: a name `N-shm` beside files `N` (the database) and `N-wal`
    /// (its log), which SQLite creates, in that order, before the index. The gate refuses
    /// it (`EOPNOTSUPP`, docs/SEMANTICS.md "SQLite databases in the mount").
    pub(super) fn is_sqlite_wal_index(&self, parent: u64, name: &[u8]) -> bool {
        let Some(db) = name.strip_suffix(b"-shm").filter(|db| !db.is_empty()) else {
            return false;
        };
        let Some(dir) = self.nodes.get(&parent) else {
            return false;
        };
        let is_file = |n: &[u8]| {
            dir.child(n)
                .and_then(|ino| self.nodes.get(&ino))
                .is_some_and(|node| node.kind == Kind::File)
        };
        is_file(db) && is_file(&[db, b"-wal".as_slice()].concat())
    }
    /// Links `ino` into `parent` (updating the parent's mtime and ctime, POSIX).
    pub(super) fn attach(&mut self, parent: u64, ino: u64, name: &[u8], kind: Kind) {
        if let Some(p) = self.nodes.get_mut(&parent) {
            let now = now_ns();
            p.attrs.mtime_ns = now;
            p.attrs.ctime_ns = now;
        }
        self.link(parent, ino, name, kind);
    }

    /// Links `ino` into `parent`'s listing, times untouched (loading the tree).
    pub(super) fn link(&mut self, parent: u64, ino: u64, name: &[u8], kind: Kind) {
        if let Some(p) = self.nodes.get_mut(&parent).and_then(|p| p.entries.as_mut()) {
            p.children.insert(name.to_vec(), ino);
            p.cookies.insert(ino);
            if kind == Kind::Dir {
                p.subdirs += 1;
            }
        }
    }
    /// Unlinks `ino` from `parent` (updating the parent's mtime and ctime, POSIX).
    pub(super) fn detach(&mut self, parent: u64, ino: u64, name: &[u8], kind: Kind) {
        if let Some(p) = self.nodes.get_mut(&parent) {
            let now = now_ns();
            p.attrs.mtime_ns = now;
            p.attrs.ctime_ns = now;
            if let Some(e) = p.entries.as_mut() {
                e.children.remove(name);
                e.cookies.remove(&ino);
                if kind == Kind::Dir {
                    e.subdirs = e.subdirs.saturating_sub(1);
                }
            }
        }
    }
    /// Marks `ino` (already detached from its parent) an orphan, and drops it at once if
    /// neither the kernel nor a handle refers to it.
    pub(super) fn make_orphan(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.orphan = true;
            self.orphans.insert(ino);
        }
        self.reap(ino);
    }
    /// Drops an orphan once neither the kernel nor a handle refers to it.
    pub(super) fn reap(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get(&ino)
            && n.orphan
            && n.nlookup == 0
            && n.open_handles == 0
        {
            self.nodes.remove(&ino);
            self.orphans.remove(&ino);
        }
    }
    pub(super) fn attr(&self, ino: u64) -> Result<Attr> {
        self.attr_as(ino, None)
    }
    /// [`Tree::attr`] as process `tgid` sees it: a process without a write handle on the
    /// file gets the committed size, not the pending one (readers never see a size nobody
    /// committed). `None`: the pending size.
    pub(super) fn attr_as(&self, ino: u64, tgid: Option<u32>) -> Result<Attr> {
        let n = self.get(ino)?;
        let size = match tgid {
            Some(t) if n.pending_size.is_some() && !n.writer_tgids.contains(&t) => {
                n.held_size().unwrap_or(n.content().1.len)
            }
            _ if n.pending_size.is_none() => n.held_size().unwrap_or_else(|| n.size()),
            _ => n.size(),
        };
        Ok(Attr {
            ino,
            kind: n.kind,
            size,
            attrs: n.attrs,
            nlink: match n.kind {
                // A directory removed (rmdir, or replaced by a rename) but still open.
                Kind::Dir if n.orphan => 0,
                Kind::Dir => 2 + n.entries.as_ref().map_or(0, |e| e.subdirs),
                Kind::File if n.orphan => 0,
                Kind::File => 1,
            },
            // Uncommitted writes, or readers of an older version reading through the page
            // cache (a short read of theirs makes the kernel cut i_size to their version's
            // size): the kernel must ask for the size every time.
            volatile: n.pending_size.is_some()
                || (n.cache_readers > 0
                    && n.head.as_ref().is_some_and(|h| h.id != n.cached_version)),
            synthesized: false,
        })
    }
}

pub(super) fn now_ns() -> i64 {
    crate::store::sqlite_now_ns()
}

pub(super) fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(Error::new(libc::ENAMETOOLONG, "name longer than 255 bytes"));
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return Err(Error::new(libc::EINVAL, "invalid name"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ino: u64, kind: Kind) -> NodeRecord {
        NodeRecord {
            ino,
            parent: 1,
            name: b"x".to_vec(),
            kind,
            attrs: Attrs {
                mode: 0o644,
                uid: 0,
                gid: 0,
                atime_ns: 0,
                mtime_ns: 0,
                ctime_ns: 0,
            },
            file_id: (kind == Kind::File).then_some(1),
            head: None,
            mtime_pinned: false,
            step: None,
            last_read: None,
        }
    }

    /// The daemon holds a node per inode (issue 32: its resident size): a file's carries
    /// no directory's entries, and a node stays within the size it was brought down to.
    #[test]
    fn a_file_node_is_small_and_carries_no_directory_entries() {
        let file = Node::from_record(record(2, Kind::File));
        assert!(file.entries.is_none(), "a file has no entries");
        assert!(Node::from_record(record(3, Kind::Dir)).entries.is_some());
        let size = std::mem::size_of::<Node>();
        assert!(
            size <= 288,
            "a node is {size} bytes (was 352 with entries inline)"
        );
    }
}
