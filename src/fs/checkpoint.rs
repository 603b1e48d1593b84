//! Checkpoints and rollback in the core (issue 14; docs/checkpoints.md): both pass the
//! gate ([`super::gate::Change::Checkpoint`], [`super::gate::Change::Rollback`]); a
//! rollback is one store transaction, after which the inode table is brought to the
//! store's tree and the kernel drops what it cached of every node that changed, so every
//! reader sees the rolled-back tree at once.

use std::collections::HashMap;

use super::gate::Change;
use super::tree::{Node, Tree};
use super::{Ctx, Fs, Invalidation, ROOT};
use crate::checkpoint::{Checkpoint, RollbackReport, check_name};
use crate::error::Result;
use crate::store::NodeRecord;

impl Fs {
    /// A read-only core serving `snap`, the tree at a point (`scratchfs mount --at`,
    /// issue 14): every change is refused with `EROFS` by the gate, reads are not noted,
    /// and each file shows the version it had then (its provenance attributes too). A
    /// file that had no version is empty. Times: a file's version's, a directory's last
    /// change of place, owner or mode before the point; MANIFEST's is the point's,
    /// `point_ns` (ns since the Unix epoch).
    pub fn of_past(
        store: std::sync::Arc<dyn crate::store::Store>,
        snap: &crate::checkpoint::Snapshot,
        point_ns: i64,
        spill_dir: std::path::PathBuf,
    ) -> Result<Fs> {
        let mut records = Vec::with_capacity(snap.len());
        let root = snap
            .get(crate::checkpoint::snapshot::ROOT)
            .ok_or_else(|| crate::error::Error::new(libc::ENOENT, "no tree at that point"))?;
        let mut nodes = vec![root];
        nodes.extend(snap.walk().into_iter().map(|(_, n)| n));
        for n in nodes {
            let t = n.version.as_ref().map_or(n.changed_ns, |v| v.time_ns);
            records.push(NodeRecord {
                ino: n.ino,
                parent: n.parent,
                name: n.name.clone(),
                kind: n.kind,
                attrs: crate::store::Attrs {
                    mode: n.mode,
                    uid: n.uid,
                    gid: n.gid,
                    atime_ns: t,
                    mtime_ns: t,
                    ctime_ns: t,
                },
                file_id: n.file_id,
                head: n.version.as_ref().map(|v| crate::store::VersionInfo {
                    id: v.id,
                    number: v.number,
                    content: v.content,
                    time_ns: v.time_ns,
                    writer: v.writer.as_str().into(),
                }),
                mtime_pinned: false,
                step: n.version.as_ref().and_then(|v| v.step),
                last_read: None,
            });
        }
        let mut fs = Fs::from_records(store, records, spill_dir)?;
        fs.gate.read_only = true;
        fs.past_ns = Some(point_ns);
        fs.forgotten = snap
            .walk()
            .into_iter()
            .filter(|(_, n)| n.forgotten)
            .map(|(_, n)| n.ino)
            .collect();
        Ok(fs)
    }

    /// Takes checkpoint `name` (with `note`) of the committed state now, for the caller
    /// of `ctx`. `EINVAL` for a bad name ([`check_name`]), `EEXIST` for a name taken,
    /// `EACCES` when the rules' `checkpoints.take` leaves the writer out (recorded).
    /// Uncommitted writes of open handles are not in it.
    pub fn checkpoint(&self, name: &str, note: Option<&str>, ctx: Ctx) -> Result<Checkpoint> {
        let caller = self.caller(ctx);
        if let Some(n) = note {
            crate::checkpoint::check_note(n)?;
        }
        let kept = self.store.checkpoints()?.len();
        // Before the gate, whose refusal would record the name.
        check_name(name)?;
        self.admit(&caller, &Change::Checkpoint { name, kept }, || None)?;
        // The pad's quota (issue 36): its record, and its note, which the checkpoint's row
        // and its event both keep (attack round of session 33: 1,000 checkpoints with
        // 4 KB notes took a full pad 8.7 MB past it).
        let adds = 2 * note.map_or(0, |n| n.len() as u64);
        let _quota_hold = self.quota_allows_record(&caller, name, "checkpoint", adds)?;
        let cp = self
            .store
            .checkpoint(name, note, &caller, super::tree::now_ns())?;
        self.usage_added(adds + name.len() as u64, 0, 1, 0);
        self.views.changed(&[]);
        Ok(cp)
    }

    /// Releases checkpoint `name` (`gc --drop-checkpoint`): root or the user who mounted
    /// (`EPERM`, recorded: it lets gc erase what only the checkpoint kept). `ENOENT` when
    /// there is none.
    pub fn drop_checkpoint(&self, name: &str, ctx: Ctx) -> Result<Checkpoint> {
        let caller = self.caller(ctx);
        self.admit(
            &caller,
            &Change::Erase {
                what: "drop-checkpoint",
                path: "",
            },
            || None,
        )?;
        let _gc = self.gc_guard.write();
        let cp = self
            .store
            .drop_checkpoint(name, &caller, super::tree::now_ns())?;
        self.views.changed(&[]);
        Ok(cp)
    }

    /// Rolls the whole tree back to checkpoint `name` for the caller of `ctx`
    /// ([`crate::store::Store::rollback`]: a safety checkpoint first, then one
    /// transaction). Root, the user who mounted, or a writer the rules'
    /// `checkpoints.rollback` names (`EPERM`, recorded); `ENOENT` for no such checkpoint.
    /// No commit, create, rename or unlink runs meanwhile; afterwards the inode table is
    /// the store's tree and the kernel's caches of every changed node are dropped.
    pub fn rollback(&self, name: &str, ctx: Ctx) -> Result<RollbackReport> {
        self.rollback_in(name, ctx, None)
    }

    /// [`Fs::rollback`] asked from inside a request on inode `held` (an attribute set on
    /// it), which the kernel keeps locked until the request is answered: the kernel's
    /// caches are dropped before the answer (so that what the caller reads next is the
    /// rolled-back tree), except the names inside `held`, whose invalidation waits for that
    /// very lock and is sent without waiting (FUSE-TRAPS).
    pub(super) fn rollback_in(
        &self,
        name: &str,
        ctx: Ctx,
        held: Option<u64>,
    ) -> Result<RollbackReport> {
        let caller = self.caller(ctx);
        self.admit(&caller, &Change::Rollback { name }, || None)?;
        // The pad's quota (issue 36): a rollback stores a record of each node it changes,
        // a version of each file it brings back and a safety checkpoint, counted after it;
        // a caller the quota binds may not start one with the pad at its quota (attack
        // round of session 33: 50 rollbacks back and forth by the agent took a full pad
        // from 226 KB to 4 MB).
        let _quota_hold = self.quota_allows_record(&caller, name, "rollback", 0)?;
        let (report, invalidations, touched) = {
            let _gc = self.gc_guard.write();
            let _ns = self.ns_guard.write();
            let mut tree = self.tree.write();
            let report = self.store.rollback(name, &caller, super::tree::now_ns())?;
            let (inv, touched) = self.reload(&mut tree)?;
            (report, inv, touched)
        };
        self.hashers.lock().clear();
        // The files and bytes a rollback changed: counted again (issue 36).
        if self.usage.lock().counted.is_some()
            && let Err(e) = self.recount_usage()
        {
            log::warn!("counting the pad's usage after a rollback: {e}");
        }
        self.views.changed(&touched);
        // With no lock held. Waited for (the notifier sends in order, so once an
        // attribute invalidation sent last is done, every one before it is), except the
        // names in the inode the kernel holds locked for this request.
        let (inside_held, rest): (Vec<Invalidation>, Vec<Invalidation>) = invalidations
            .into_iter()
            .partition(|i| matches!(i, Invalidation::Entry(p, _) if Some(*p) == held));
        let any = !rest.is_empty();
        for inv in rest {
            self.invalidate(inv);
        }
        if any {
            self.invalidate(Invalidation::Attr(ROOT));
        }
        super::NO_WAIT.with(|c| c.set(true));
        for inv in inside_held {
            self.invalidate(inv);
        }
        super::NO_WAIT.with(|c| c.set(false));
        Ok(report)
    }

    /// Brings the inode table, the views and the kernel's caches to the store's state
    /// after changes another daemon committed to the same database (PostgreSQL, issue 15):
    /// [`Fs::reload`] under the same locks as a rollback, so no local commit, create,
    /// rename or unlink runs meanwhile. The digest states cached for appends are dropped
    /// (their versions may no longer be the heads).
    pub fn refresh(&self) -> Result<()> {
        // Not under the locks: a server that does not answer must not hold every lookup
        // back for its timeout (docs/deploy.md "Partitions").
        self.store.ping()?;
        let (invalidations, touched) = {
            let _gc = self.gc_guard.write();
            let _ns = self.ns_guard.write();
            let mut tree = self.tree.write();
            self.reload(&mut tree)?
        };
        self.hashers.lock().clear();
        self.views.changed(&touched);
        // With no lock held (FUSE-TRAPS): the kernel may be waiting, in a request on a
        // directory it holds locked, for a lock this refresh held.
        for inv in invalidations {
            self.invalidate(inv);
        }
        self.whole_refreshes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// How many whole refreshes ([`Fs::refresh`]) this daemon has done: on PostgreSQL the
    /// first follows the listener's first connection (a few round trips, at a moment the
    /// mount does not wait for), so a test that counts round trips waits for it first.
    pub fn whole_refreshes(&self) -> u64 {
        self.whole_refreshes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Brings nodes `inos` to the store's state after another daemon's creates, unlinks,
    /// renames or attribute changes of them (PostgreSQL `node` notifications, issue 34):
    /// their rows are read, with those of their parents (old and new: attributes, the
    /// listing) and of any node here that sits where one of them now is (a rename's
    /// victim), and each takes its place and state as [`Fs::refresh`] would give it; the
    /// kernel's caches of them are dropped. Cost: one store read per 500 nodes and round,
    /// whatever the tree's size. When the rows do not settle within 4 rounds (moves that
    /// displace each other in a chain), or a node's new parent is not known here, the
    /// whole tree is reloaded instead ([`Fs::refresh`]). Errors: the store's.
    pub fn refresh_nodes(&self, inos: &[u64]) -> Result<()> {
        let outcome = {
            let _gc = self.gc_guard.write();
            let _ns = self.ns_guard.write();
            let mut tree = self.tree.write();
            self.reload_some(&mut tree, inos)?
        };
        let Some((invalidations, touched, file_ids)) = outcome else {
            log::info!("refresh: the namespace feed did not settle; reloading the whole tree");
            return self.refresh();
        };
        {
            let mut hashers = self.hashers.lock();
            for f in file_ids {
                hashers.remove(&f);
            }
        }
        self.views.changed(&touched);
        for inv in invalidations {
            self.invalidate(inv);
        }
        Ok(())
    }

    /// [`Fs::refresh_nodes`] under its locks: `None` when the whole tree must be reloaded.
    #[allow(clippy::type_complexity)]
    fn reload_some(
        &self,
        tree: &mut Tree,
        inos: &[u64],
    ) -> Result<Option<(Vec<Invalidation>, Vec<u64>, Vec<i64>)>> {
        use std::collections::{BTreeSet, HashSet};
        let live = |r: &NodeRecord| r.ino == ROOT || r.parent != 0;
        let mut moved: BTreeSet<u64> = inos.iter().copied().collect();
        let mut records: HashMap<u64, NodeRecord> = HashMap::new();
        let mut fetched: HashSet<u64> = HashSet::new();
        let mut settled = false;
        for _round in 0..4 {
            // The moved nodes and their parents, here and in the store.
            let mut need: BTreeSet<u64> = BTreeSet::new();
            for &ino in &moved {
                need.insert(ino);
                if let Some(n) = tree.nodes.get(&ino)
                    && !n.orphan
                    && ino != ROOT
                {
                    need.insert(n.parent);
                }
                if let Some(r) = records.get(&ino)
                    && live(r)
                    && ino != ROOT
                {
                    need.insert(r.parent);
                }
            }
            let need: Vec<u64> = need.into_iter().filter(|i| !fetched.contains(i)).collect();
            if need.is_empty() {
                settled = true;
                break;
            }
            for r in self.store.nodes(&need)? {
                records.insert(r.ino, r);
            }
            fetched.extend(need);
            // A node here at a place one of them now takes moves too (replaced by a
            // rename, or unlinked and re-created by the other daemon).
            let mut displaced = Vec::new();
            for &ino in &moved {
                if let Some(r) = records.get(&ino).filter(|r| live(r) && r.ino != ROOT)
                    && let Some(other) = tree.nodes.get(&r.parent).and_then(|p| p.child(&r.name))
                    && other != ino
                {
                    displaced.push(other);
                }
            }
            moved.extend(displaced);
        }
        if !settled {
            return Ok(None);
        }
        let mut inv = Vec::new();
        let mut touched = Vec::new();
        let mut file_ids = Vec::new();
        // 1. What is no longer live, or moves, leaves its place.
        for &ino in &fetched {
            let Some(n) = tree.nodes.get(&ino) else {
                continue;
            };
            if ino == ROOT || n.orphan {
                continue;
            }
            let (parent, name, kind) = (n.parent, n.name.clone(), n.kind);
            file_ids.extend(n.file_id);
            let r = records.get(&ino).filter(|r| live(r));
            if r.is_some_and(|r| r.parent == parent && *r.name == *name) {
                continue;
            }
            unplace(
                tree,
                (ino, parent, &name, kind),
                r.is_none(),
                &mut inv,
                &mut touched,
            );
        }
        // 2. Each live one at its place with its state, parents first; one whose parent
        // is not here (a directory this daemon never heard of) needs the whole tree.
        let mut pending: Vec<NodeRecord> = records.into_values().filter(|r| live(r)).collect();
        pending.sort_by_key(|r| r.ino);
        while !pending.is_empty() {
            let before = pending.len();
            let mut later = Vec::new();
            for r in pending {
                let ready = r.ino == ROOT
                    || tree
                        .nodes
                        .get(&r.parent)
                        .is_some_and(|p| !p.orphan && p.kind == crate::store::Kind::Dir);
                if ready {
                    file_ids.extend(r.file_id);
                    place(tree, r, &mut inv, &mut touched);
                } else {
                    later.push(r);
                }
            }
            if later.len() == before {
                return Ok(None);
            }
            pending = later;
        }
        Ok(Some((inv, touched, file_ids)))
    }

    /// [`Fs::refresh`] from inside a request (a create or rename that found a name only
    /// the store knew): the kernel's caches are told, without waiting for it to act (it
    /// may hold the directory of this very request locked).
    pub(super) fn refresh_in_request(&self) -> Result<()> {
        super::NO_WAIT.with(|c| c.set(true));
        let out = self.refresh();
        super::NO_WAIT.with(|c| c.set(false));
        out
    }

    /// Brings one file to the version another daemon committed to it (a `file`
    /// notification, PostgreSQL): its record is read from the store and, when it is still
    /// the node this core has at that place and its head is newer than the one here, takes
    /// its place; the kernel's cached attributes and pages of it and the views that show it
    /// are dropped. A head never moves back (a local commit may have landed since the store
    /// was read). Anything else (the node moved, went, or is unknown here) falls back to
    /// [`Fs::refresh`]. Errors: the store's.
    pub fn refresh_file(&self, ino: u64) -> Result<()> {
        let Some(r) = self.store.node(ino)? else {
            return self.refresh();
        };
        {
            let mut tree = self.tree.write();
            let Some(n) = tree.nodes.get_mut(&ino) else {
                drop(tree);
                return self.refresh();
            };
            if n.orphan || n.parent != r.parent || *n.name != *r.name || n.file_id != r.file_id {
                drop(tree);
                return self.refresh();
            }
            let newer = match (&n.head, &r.head) {
                (Some(here), Some(there)) => there.id > here.id,
                (None, Some(_)) => true,
                _ => false,
            };
            if !newer {
                return Ok(());
            }
            n.take_head(r.head);
            n.step = r.step;
            n.mtime_pinned = r.mtime_pinned;
            n.attrs = r.attrs;
        }
        if let Some(file_id) = r.file_id {
            self.hashers.lock().remove(&file_id);
        }
        self.views.changed(&[ino]);
        self.invalidate(Invalidation::Attr(ino));
        self.invalidate(Invalidation::Data(ino));
        Ok(())
    }

    /// Another daemon recorded events only (a refusal, a checkpoint): the views that list
    /// them (MANIFEST) render afresh.
    pub fn refresh_events(&self) {
        self.views.changed(&[]);
    }

    /// Brings the inode table to the store's tree after a change made in the store as a
    /// whole (a rollback, or another daemon's changes): nodes no longer live become orphans (still open or known to the
    /// kernel) or go; nodes that moved, came back, or changed content, owner or mode take
    /// their new state. Returns the kernel invalidations to send (with no lock held) and
    /// the inodes touched.
    fn reload(&self, tree: &mut Tree) -> Result<(Vec<Invalidation>, Vec<u64>)> {
        let records: Vec<NodeRecord> = self.store.load()?;
        let live: HashMap<u64, usize> = records
            .iter()
            .enumerate()
            .map(|(i, r)| (r.ino, i))
            .collect();
        let mut inv = Vec::new();
        let mut touched = Vec::new();
        // 1. What is no longer live, and what moves, leaves its place.
        let placed: Vec<(u64, u64, std::sync::Arc<[u8]>, crate::store::Kind)> = tree
            .nodes
            .iter()
            .filter(|(ino, n)| **ino != ROOT && !n.orphan)
            .map(|(&ino, n)| (ino, n.parent, n.name.clone(), n.kind))
            .collect();
        for (ino, parent, name, kind) in placed {
            let stays = live.get(&ino).is_some_and(|&i| {
                let r = &records[i];
                r.parent == parent && *r.name == *name
            });
            if stays {
                continue;
            }
            let gone = !live.contains_key(&ino);
            unplace(
                tree,
                (ino, parent, &name, kind),
                gone,
                &mut inv,
                &mut touched,
            );
        }
        // 2. Every live node at its place with its state (parents come first).
        for r in records {
            place(tree, r, &mut inv, &mut touched);
        }
        Ok((inv, touched))
    }
}

/// Takes node `ino` out of its place (`parent`, `name`, of `kind`) in `tree`, as
/// [`Fs::reload`] and [`Fs::refresh_nodes`] do for a node that moved or is no longer live
/// (`gone`: then it becomes an orphan, kept while open or known to the kernel): the
/// kernel is to forget the name, the parent's attributes and its cached listing
/// (FOPEN_CACHE_DIR), added to `inv`; `ino` is added to `touched`.
fn unplace(
    tree: &mut Tree,
    (ino, parent, name, kind): (u64, u64, &[u8], crate::store::Kind),
    gone: bool,
    inv: &mut Vec<Invalidation>,
    touched: &mut Vec<u64>,
) {
    tree.detach(parent, ino, name, kind);
    inv.push(Invalidation::Entry(parent, name.to_vec()));
    inv.push(Invalidation::Attr(parent));
    inv.push(Invalidation::Data(parent));
    touched.push(ino);
    if gone {
        tree.make_orphan(ino);
    }
}

/// Puts record `r` of a live node in `tree` at its place with its state (its parent is
/// there already): what [`Fs::reload`] and [`Fs::refresh_nodes`] do for each node they
/// bring to the store's state, adding the kernel invalidations to send to `inv` and the
/// inode to `touched` when anything of it changed.
fn place(tree: &mut Tree, r: NodeRecord, inv: &mut Vec<Invalidation>, touched: &mut Vec<u64>) {
    let ino = r.ino;
    let linked = match tree.nodes.get_mut(&ino) {
        Some(n) => {
            let was_linked =
                !n.orphan && (ino == ROOT || n.parent == r.parent && *n.name == *r.name);
            // A new version, or the same one with other content (a redaction
            // moved it: the pages and sizes the kernel holds are not its bytes).
            let content_changed = n.head.as_ref().map(|h| (h.id, h.content))
                != r.head.as_ref().map(|h| (h.id, h.content));
            let rewritten =
                content_changed && n.head.as_ref().map(|h| h.id) == r.head.as_ref().map(|h| h.id);
            if content_changed
                || n.attrs.mode != r.attrs.mode
                || n.attrs.uid != r.attrs.uid
                || n.attrs.gid != r.attrs.gid
            {
                inv.push(Invalidation::Attr(ino));
                touched.push(ino);
            }
            if content_changed {
                inv.push(Invalidation::Data(ino));
                n.take_head(r.head.clone());
                n.step = r.step;
                n.mtime_pinned = r.mtime_pinned;
                if rewritten {
                    n.forget_old_bytes();
                }
            }
            if n.orphan {
                n.orphan = false;
                tree.orphans.remove(&ino);
            }
            let n = tree.nodes.get_mut(&ino).expect("present above");
            n.parent = r.parent;
            n.name = r.name.clone().into();
            n.file_id = r.file_id;
            n.attrs = r.attrs;
            was_linked
        }
        None => {
            touched.push(ino);
            tree.nodes.insert(ino, Node::from_record(r.clone()));
            false
        }
    };
    if !linked && ino != ROOT {
        let kind = tree.nodes[&ino].kind;
        tree.attach(r.parent, ino, &r.name, kind);
        // A negative entry the kernel may hold for the name.
        inv.push(Invalidation::Entry(r.parent, r.name.clone()));
        inv.push(Invalidation::Attr(r.parent));
        inv.push(Invalidation::Data(r.parent));
    }
}

/// One file brought by [`Fs::adopt_from`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Adopted {
    /// Its path, as stored.
    pub path: String,
    /// The JSON key brought (`promote PATH:KEY`), if only one key was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The version it was in the other scratchpad.
    pub from_version: i64,
    /// Its writer there.
    pub from_writer: String,
    /// The version it is here now (`None`: the content was the same already, no version).
    pub version: Option<i64>,
}

impl Fs {
    /// Brings `content` into the file at the stored path `path` for the caller of `ctx`,
    /// as a version with op `op` (`adopt`, or `fork` for a tree-only fork) whose
    /// provenance names `origin` (`origins`); missing parent directories are made (each
    /// a create the gate judges), a missing file is created with permission bits `mode`.
    /// The gate judges the whole as [`Change::Adopt`] (the writer rules of the path,
    /// its content rules), recording a refusal with the content (redacted). Returns the
    /// new version, or `None` when the file held these bytes already.
    pub fn adopt(
        &self,
        path: &str,
        content: &[u8],
        mode: u32,
        op: &str,
        origin: &crate::store::Origin,
        ctx: Ctx,
    ) -> Result<Option<crate::store::VersionInfo>> {
        use crate::error::Error;
        use crate::store::{Build, Kind, paths};
        let caller = self.caller(ctx);
        let raw = paths::decode(path).into_owned();
        let parts: Vec<&[u8]> = raw
            .split(|&b| b == b'/')
            .filter(|p| !p.is_empty())
            .collect();
        let Some((name, dirs)) = parts.split_last() else {
            return Err(Error::new(libc::EINVAL, "adopt: an empty path"));
        };
        let mut parent = ROOT;
        for d in dirs {
            let found = self.tree.read().child(parent, d)?;
            if found.is_none() {
                // What open(2) would check: write and search on the directory it is made in.
                self.access(parent, libc::W_OK | libc::X_OK, ctx)?;
            } else {
                self.access(parent, libc::X_OK, ctx)?;
            }
            parent = match found {
                Some(ino) => {
                    if self.tree.read().get(ino)?.kind != Kind::Dir {
                        return Err(Error::new(
                            libc::ENOTDIR,
                            format!("{path}: a parent is not a directory"),
                        ));
                    }
                    ino
                }
                None => {
                    let a = self.make(parent, d, Kind::Dir, 0o755, 0o022, ctx, &caller)?;
                    self.forget(a.ino, 1);
                    a.ino
                }
            };
        }
        let existing = self.tree.read().child(parent, name)?;
        if let Some(ino) = existing
            && self.tree.read().get(ino)?.kind == Kind::Dir
        {
            return Err(Error::new(libc::EISDIR, format!("{path}: a directory")));
        }
        // As open(O_WRONLY) or creat(2) would: write on the file, or on its directory.
        match existing {
            Some(ino) => self.access(ino, libc::W_OK, ctx)?,
            None => self.access(parent, libc::W_OK | libc::X_OK, ctx)?,
        }
        let current = match existing {
            Some(ino) => Some(self.current_bytes(ino)?),
            None => None,
        };
        let _ns = self.ns_guard.read();
        self.admit(
            &caller,
            &Change::Adopt {
                path,
                current: current.as_deref(),
                adopted: content,
            },
            || Some(content.to_vec()),
        )?;
        // The pad's quota (issue 36) binds what is brought in as it binds a write.
        let _quota_hold = self.quota_allows_bytes(&caller, path, content.len() as u64, || {
            Some((
                content.len() as u64,
                blake3::hash(content).to_hex().to_string(),
            ))
        })?;
        let ino = match existing {
            Some(ino) => ino,
            None => {
                let a = self.make(parent, name, Kind::File, mode & 0o7777, 0, ctx, &caller)?;
                self.forget(a.ino, 1);
                a.ino
            }
        };
        let before = self.tree.read().get(ino)?.head.as_ref().map(|h| h.id);
        let mut src = |off: u64, buf: &mut [u8]| {
            buf.copy_from_slice(&content[off as usize..off as usize + buf.len()]);
            Ok(())
        };
        let len = content.len() as u64;
        let build = Build::Overlay {
            base: crate::store::ContentRef::default(),
            base_limit: 0,
            size: len,
            dirty: &[(0, len)],
        };
        let v = self.commit_from(
            ino,
            op,
            None,
            build,
            &mut src,
            &caller,
            false,
            Some(origin),
            None,
            None,
        )?;
        self.invalidate(Invalidation::Attr(ino));
        self.invalidate(Invalidation::Data(ino));
        if Some(v.id) != before {
            self.usage_added((content.len() + path.len()) as u64, 1, 0, 0);
        }
        Ok((Some(v.id) != before).then_some(v))
    }

    /// This scratchpad's file at `path` (stored form) as it would be with top-level key
    /// `key` set to its value in `theirs` (the source's bytes of that file): `{}` when
    /// the file is missing or empty, every other key kept (the keys then sorted, the
    /// text pretty-printed). `EINVAL` when either is not a JSON object, or `theirs` has
    /// no such key.
    fn with_key_of(&self, path: &str, key: &str, theirs: &[u8], source: &str) -> Result<Vec<u8>> {
        use crate::error::Error;
        let q = crate::views::quote_stored(path);
        let object =
            |bytes: &[u8], whose: &str| -> Result<serde_json::Map<String, serde_json::Value>> {
                if bytes.iter().all(u8::is_ascii_whitespace) {
                    return Ok(serde_json::Map::new());
                }
                match serde_json::from_slice::<serde_json::Value>(bytes) {
                    Ok(serde_json::Value::Object(m)) => Ok(m),
                    _ => Err(Error::new(
                        libc::EINVAL,
                        format!("promote {q}:{key}: {whose} file is not a JSON object"),
                    )),
                }
            };
        let theirs = object(theirs, &format!("{source}'s"))?;
        let value = theirs.get(key).cloned().ok_or_else(|| {
            Error::new(
                libc::EINVAL,
                format!("promote {q}:{key}: {source}'s file has no key {key:?}"),
            )
        })?;
        let raw = crate::store::paths::decode(path).into_owned();
        let mut ino = Some(ROOT);
        for part in raw.split(|&b| b == b'/').filter(|p| !p.is_empty()) {
            ino = match ino {
                Some(i) => self.tree.read().child(i, part).ok().flatten(),
                None => None,
            };
        }
        let ours = match ino.filter(|&i| i != ROOT) {
            Some(ino) => self.current_bytes(ino)?,
            None => Vec::new(),
        };
        let mut ours = object(&ours, "this scratchpad's")?;
        ours.insert(key.to_string(), value);
        let mut text = serde_json::to_vec_pretty(&serde_json::Value::Object(ours))
            .map_err(|e| Error::new(libc::EINVAL, e.to_string()))?;
        text.push(b'\n');
        Ok(text)
    }

    /// [`Fs::adopt_from`] asked through the mount (`user.scratchfs.adopt`): the daemon
    /// reads `source` with its own privileges, so the gate lets only root and the user
    /// who mounted ([`Change::AdoptFrom`], `EPERM`, recorded; a URL's password never).
    pub fn adopt_through_mount(
        &self,
        source: &str,
        items: &[(String, Option<String>)],
        op: &str,
        ctx: Ctx,
    ) -> Result<Vec<Adopted>> {
        let caller = self.caller(ctx);
        let shown = if crate::store::postgres::is_url(source) {
            crate::store::postgres::display_name(source)
        } else {
            source.to_string()
        };
        self.admit(&caller, &Change::AdoptFrom { source: &shown }, || None)?;
        self.bring_from(source, items, op, ctx)
    }

    /// `scratchfs adopt --from SOURCE PATH…`: brings each file at `paths` (stored form)
    /// of the scratchpad `source` (another database: an SQLite file's absolute path or a
    /// PostgreSQL URL; a fork, say), as it is now, into this one with [`Fs::adopt`]; each
    /// new version's provenance names `source` (an SQLite file by its canonical path, a
    /// URL without credentials) and the version there. `source` is opened by this
    /// process: the command's own user's rights (through the mount,
    /// [`Fs::adopt_through_mount`] lets only root and the user who mounted); a path that
    /// is no file there: `ENOENT`; a relative path: `EINVAL`. Stops at the first refusal
    /// (the files before it are adopted).
    pub fn adopt_from(&self, source: &str, paths: &[String], ctx: Ctx) -> Result<Vec<Adopted>> {
        let items: Vec<(String, Option<String>)> =
            paths.iter().map(|p| (p.clone(), None)).collect();
        self.bring_from(source, &items, "adopt", ctx)
    }

    /// [`Fs::adopt_from`] with the op `op` (`adopt`, or `promote`: issue 36), each item a
    /// file (`(path, None)`) or one top-level key of a JSON object file (`(path,
    /// Some(key))`: the key's value there set in this scratchpad's file at `path`, made
    /// `{}` first when missing, every other key kept; `EINVAL` when either file is not a
    /// JSON object or the source's holds no such key).
    pub fn bring_from(
        &self,
        source: &str,
        items: &[(String, Option<String>)],
        op: &str,
        ctx: Ctx,
    ) -> Result<Vec<Adopted>> {
        use crate::error::Error;
        use crate::store::History;
        let (theirs, source): (Box<dyn History>, String) = if crate::store::postgres::is_url(source)
        {
            (
                Box::new(crate::store::postgres::Postgres::open_frozen(source)?),
                crate::store::postgres::display_name(source),
            )
        } else {
            let path = std::path::Path::new(source);
            if !path.is_absolute() {
                return Err(Error::new(
                    libc::EINVAL,
                    format!("adopt: {source}: give the database's absolute path"),
                ));
            }
            // Provenance names the database itself, not the path it was reached by.
            let path = std::fs::canonicalize(path).map_err(|e| {
                Error::new(
                    e.raw_os_error().unwrap_or(libc::ENOENT),
                    format!("adopt: {source}: {e}"),
                )
            })?;
            (
                Box::new(crate::store::Sqlite::open_frozen(&path)?),
                path.to_string_lossy().into_owned(),
            )
        };
        let source_id = theirs.meta("scratchpad_id")?;
        let snap = theirs.snapshot(theirs.point_at(i64::MAX)?)?;
        let mut out = Vec::new();
        for (p, key) in items {
            let p = p.trim_matches('/');
            let raw = crate::store::paths::decode(p).into_owned();
            let n = snap
                .lookup(&raw)
                .filter(|n| n.kind == crate::store::Kind::File)
                .ok_or_else(|| {
                    Error::new(
                        libc::ENOENT,
                        format!(
                            "adopt: {}: no such file in {} (at its current state)",
                            crate::views::quote_stored(p),
                            source
                        ),
                    )
                })?;
            let mut bytes = vec![0u8; n.size() as usize];
            let got = theirs.read(n.content(), 0, &mut bytes)?;
            bytes.truncate(got);
            let (from_version, from_writer, from_id) =
                n.version.as_ref().map_or((0, String::new(), 0), |v| {
                    (v.number, v.writer.clone(), v.id)
                });
            let origin = crate::store::Origin {
                source: source.clone(),
                source_id: source_id.clone(),
                source_version_id: from_id,
                path: p.to_string(),
                version: from_version,
                writer: from_writer.clone(),
            };
            let bytes = match key {
                None => bytes,
                Some(key) => self.with_key_of(p, key, &bytes, &source)?,
            };
            let v = self.adopt(p, &bytes, n.mode, op, &origin, ctx)?;
            out.push(Adopted {
                path: p.to_string(),
                key: key.clone(),
                from_version,
                from_writer,
                version: v.map(|v| v.number),
            });
        }
        Ok(out)
    }
}
