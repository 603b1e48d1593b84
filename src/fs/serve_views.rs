//! Serving the views (SPEC §7) from the core: which name or inode is a view, its
//! attributes, its content snapshot at open, the caches that make reading MANIFEST cheap
//! and commits independent of it, and the provenance extended attributes.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::manifest_rows::{FxMap, Rows, Seen, Touched, mix};
use super::tree::{Node, Tree, ViewMemo};
use super::{Attr, Ctx, Fs, OpenFlags, ROOT, now_ns};
use crate::error::{Error, Result};
use crate::fs::handle::{Handle, HandleKind, Slot};
use crate::identity::Caller;
use crate::store::{Attrs, ContentRef, Kind, paths};
use crate::sync::Mutex;
use crate::views::manifest::{self, Refusal};
use crate::views::{self, View, outline};

/// Outlines kept rendered (by the inode of the file they describe).
const OUTLINE_CACHE: usize = 1024;
/// Bytes of rendered outlines kept (8 MiB; an outline is at most ~100 KiB): the cache is
/// emptied when one more would pass either bound.
const OUTLINE_CACHE_BYTES: usize = 8 << 20;

/// Renderings of MANIFEST kept for readers who cannot list every directory (8): one per
/// set of directories hidden, so that readers of a few uids share theirs.
const PER_READER_KEPT: usize = 8;

/// Most files the MCP tool `list` returns (10,000).
const LIST_MAX: usize = 10_000;

/// Most deletions and shrinking commits MANIFEST looks through for the latest ones that
/// are not temporaries (4,096).
const RESTORABLE_SCAN: usize = 4096;

/// Files whose start MANIFEST reads while it holds the tree (a few changed since the last
/// rendering); more are read without it, before the tree is walked again.
const SNIFF_UNDER_LOCK: usize = 64;

/// A reader, as MANIFEST and `list` judge what it may find (issue 31 item 4): what `ls`
/// would show it, a name in a directory on which it has read and search, under
/// directories on which it has search (access(2) `R_OK | X_OK`, the mount's own check),
/// its supplementary groups read once.
pub(super) struct Listable {
    ctx: Ctx,
    groups: std::sync::OnceLock<Vec<u32>>,
}

impl Listable {
    fn new(ctx: Ctx) -> Listable {
        Listable {
            ctx,
            groups: std::sync::OnceLock::new(),
        }
    }

    /// Whether the reader has read and search on a directory with attributes `a`.
    fn lists(&self, a: &Attrs) -> bool {
        let in_group = |gid: u32| {
            self.groups
                .get_or_init(|| crate::identity::groups_of(self.ctx.pid))
                .contains(&gid)
        };
        let (want, allowed) = super::permitted_among(
            (a.mode, a.uid, a.gid),
            Kind::Dir,
            libc::R_OK | libc::X_OK,
            self.ctx,
            &in_group,
        );
        want & !allowed == 0
    }
}

/// What MANIFEST reads of a file in its pass over the inodes, besides its row.
struct Extra<'t> {
    /// Its index in the rows.
    at: usize,
    ino: u64,
    node: &'t Node,
    /// Digest of its name and place, but for its directory's path.
    placed: u64,
    /// Whether its memo knows if its content is binary.
    known: bool,
}

/// A file's MANIFEST row, its `dir` unset ([`Rows`] sets it).
fn row(n: &Node, h: &crate::store::VersionInfo, binary: bool) -> manifest::File {
    manifest::File {
        dir: usize::MAX,
        name: manifest::Name::Raw(n.name.clone()),
        pinned: n.parent == ROOT
            && manifest::PINNED.iter().any(|p| p.len() == n.name.len())
            && manifest::PINNED.iter().any(|p| p.as_bytes() == &*n.name),
        bytes: h.content.len,
        version: h.number,
        writer: h.writer.clone(),
        time_ns: h.time_ns,
        binary,
        read: n.last_read.as_ref().map(|m| m.read.clone()),
        step: n.step,
    }
}

/// What decides whether content `c` is binary: its first [`views::SNIFF_BYTES`], and
/// whether there is more (a UTF-8 sequence cut at the end of a whole file is binary, at
/// the end of the window it is not, [`views::is_binary`]). An append, a truncation or a
/// restore keeps the stream, so the memo's key is this length: at most `SNIFF_BYTES + 1`.
fn judged_len(c: ContentRef) -> u64 {
    c.len.min(views::SNIFF_BYTES as u64 + 1)
}

/// Records in a file's memo whether content `c` is binary.
fn remember(memo: &ViewMemo, c: ContentRef, binary: bool) {
    memo.set_binary(c.stream, judged_len(c), binary);
}

/// Prefix of the provenance extended attributes.
pub const XATTR_PREFIX: &str = "user.scratchfs.";
/// The provenance extended attributes of every file (SPEC §7), in listing order.
pub const XATTRS: &[&str] = &[
    "version",
    "writer",
    "blake3",
    "step",
    "committed",
    "inputs",
    "origin",
];
/// The mount's root has this attribute (read-only): its scratchpad's id
/// (`meta.scratchpad_id`, docs/schema.md), by which a command that found a mount of its
/// database by the mount table (a PostgreSQL mount's fsname, an SQLite database's last
/// mountpoint) makes sure the mount there is that scratchpad's before asking it anything
/// ([`crate::cli::live_mountpoint`]).
pub const SCRATCHPAD_XATTR: &str = "user.scratchfs.scratchpad";
/// Reading this attribute of the root (not listed) returns `settled` once the kernel has
/// acted on every cache invalidation the daemon sent before the read ([`Fs::settle`]):
/// a rollback through the mount invalidates the names in the directory its request was
/// made on without waiting (the kernel holds that directory locked until the request is
/// answered), so `scratchfs rollback` reads this after it, and a name the rollback
/// pointed at another file resolves to that file as soon as the command returns.
/// `EAGAIN` after 10 s without (a request holding that directory locked meanwhile);
/// `EPERM` for a caller who may not roll back (the wait holds one of the daemon's
/// workers: readers in a loop could hold them all).
pub const SETTLED_XATTR: &str = "user.scratchfs.settled";
/// Setting this attribute on the root to a JSON `GcRequest` runs gc in the daemon.
pub const GC_XATTR: &str = "user.scratchfs.gc";
/// Setting this attribute to N restores version N (see [`Fs::setxattr`]).
pub const RESTORE_XATTR: &str = "user.scratchfs.restore";
/// Setting this attribute on the root to a JSON [`RedactRequest`] redacts a version in the
/// daemon (`scratchfs redact`).
pub const REDACT_XATTR: &str = "user.scratchfs.redact";

/// Setting this attribute on any directory or file of the mount to `NAME`, or to `NAME`,
/// a newline and a note, takes a checkpoint (issue 14; `setfattr -n
/// user.scratchfs.checkpoint -v NAME .`). Checkpoint names hold no control character, so
/// the first line is always the name.
pub const CHECKPOINT_XATTR: &str = "user.scratchfs.checkpoint";
/// Setting this attribute on any file or directory of the mount (the kernel lets a process
/// set one only where it may write) to a checkpoint's name rolls back to it in the daemon
/// (`scratchfs rollback NAME` while mounted); the report is `meta.last_rollback`.
pub const ROLLBACK_XATTR: &str = "user.scratchfs.rollback";
/// Setting this attribute on the root to a checkpoint's name releases it
/// (`scratchfs gc --drop-checkpoint NAME` while mounted).
pub const DROP_CHECKPOINT_XATTR: &str = "user.scratchfs.drop-checkpoint";

/// Setting this attribute on the root to a JSON `{"from": DB, "paths": [...]}` brings
/// those files of the scratchpad `DB` (an absolute path) into this one (`scratchfs adopt`
/// while mounted; [`super::Fs::adopt_through_mount`]: root and the user who mounted).
pub const ADOPT_XATTR: &str = "user.scratchfs.adopt";

/// Set on the root to `{"path": P, "reason": R}`: records that the caller promoted the
/// file at P of this scratchpad elsewhere (`scratchfs promote` while this, its source,
/// is mounted; [`super::Fs::note_promoted`]: an event naming the caller, op `promote`;
/// root and the user who mounted only).
pub const PROMOTED_XATTR: &str = "user.scratchfs.promoted";

/// What `scratchfs redact PATH@N` asks the daemon for (the value of [`REDACT_XATTR`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RedactRequest {
    /// The file's path from the mount's root.
    pub path: String,
    /// The version to redact.
    pub version: i64,
    /// Why (recorded with the event).
    pub why: String,
}

/// Also on `.archive/<path>`: who deleted the file and when.
pub const ARCHIVE_XATTRS: &[&str] = &["deleted_by", "deleted"];

/// View state: options, the change counter and the caches.
#[derive(Default)]
pub struct ViewState {
    /// List the outlines in readdir (mount option `--list-views`).
    pub listed: bool,
    /// MANIFEST's budget in estimated tokens from the command line
    /// (`--manifest-tokens`); 0: the rules' `manifest_tokens`, else the default.
    budget_tokens: usize,

    /// Bumped by every change to the tree or to a file's content.
    generation: AtomicU64,
    /// Time of the last change, ns: MANIFEST's "as of".
    last_change_ns: AtomicI64,
    /// MANIFEST as rendered at a generation.
    manifest: Mutex<Option<(u64, Arc<Vec<u8>>)>>,
    /// MANIFEST as rendered at a generation for readers who cannot list some directories
    /// (issue 31), by a digest of which ones: at most [`PER_READER_KEPT`].
    per_reader: Mutex<Vec<ReaderManifest>>,
    /// Held while MANIFEST renders: one rendering at a time (the others then find it
    /// cached), and one writer of the files' [`ViewMemo`]s; holds MANIFEST's rows
    /// between renderings (`manifest_rows.rs`; `None` until the first).
    rendering: Mutex<Option<Rows>>,
    /// The inodes changed since the rows were brought up to date.
    touched: Mutex<Touched>,
    /// Outlines by file inode.
    outlines: Mutex<HashMap<u64, CachedOutline>>,
    /// Directories of `.history` and `.archive`, by path.
    pub(super) dirs: super::serve_history::Registry,
    /// Nodes of `.checkpoints/NAME/` and the checkpoint trees computed last.
    pub(super) checkpoints: super::serve_checkpoints::Registry,
}

/// MANIFEST as rendered for a set of hidden directories: (generation, digest of the set,
/// text).
type ReaderManifest = (u64, u64, Arc<Vec<u8>>);

/// An outline as rendered for (version id, path).
type CachedOutline = (i64, String, Arc<Vec<u8>>);

impl ViewState {
    /// Something changed, at inodes `inos` (a file's content or place, a directory's
    /// name or place, a creation or a removal; none for a change of no inode's row, such
    /// as a refusal): views render afresh when next read (never at commit time, so a
    /// commit costs the same with 10 files or 10,000). Call it after the tree changed.
    pub fn changed(&self, inos: &[u64]) {
        self.touched.lock().add(inos);
        self.generation.fetch_add(1, Ordering::Release);
        self.last_change_ns.store(now_ns(), Ordering::Release);
    }
}

impl Fs {
    /// A number that changes whenever the tree, a file's content or the events MANIFEST
    /// shows may have changed (MANIFEST's cache key; any change by this daemon, or one
    /// another daemon made that this one applied). Equal numbers: nothing changed.
    pub fn change_generation(&self) -> u64 {
        self.views.generation.load(Ordering::Acquire)
    }

    /// The time MANIFEST is "as of" (ns), also its mtime: a mount of the past's point,
    /// else the last change to the tree (at least the root's ctime, `root_ctime`).
    fn manifest_as_of(&self, root_ctime: i64) -> i64 {
        self.past_ns.unwrap_or_else(|| {
            self.views
                .last_change_ns
                .load(Ordering::Acquire)
                .max(root_ctime)
        })
    }

    /// Lists the outlines in readdir (they always resolve by name).
    pub fn with_views_listed(mut self, listed: bool) -> Self {
        self.views.listed = listed;
        self
    }

    /// MANIFEST's budget in estimated tokens (`--manifest-tokens`); `None`: the rules'
    /// `manifest_tokens`, else [`manifest::DEFAULT_BUDGET_TOKENS`].
    pub fn with_manifest_budget(mut self, tokens: Option<usize>) -> Self {
        self.views.budget_tokens = tokens.unwrap_or(0);
        self
    }

    /// MANIFEST's budget in estimated tokens: the command line's, else the rules', else
    /// the default.
    fn manifest_budget(&self) -> usize {
        if self.views.budget_tokens > 0 {
            return self.views.budget_tokens;
        }
        self.gate
            .rules
            .load()
            .as_deref()
            .and_then(|r| r.rules.manifest_tokens)
            .map(|t| t as usize)
            .unwrap_or(manifest::DEFAULT_BUDGET_TOKENS)
    }

    /// Whether the file at `path` (as stored) is a temporary that MANIFEST leaves out: a
    /// built-in name ([`views::ephemeral`]) or the rules' `ephemeral` globs.
    fn is_ephemeral(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        views::ephemeral::is_builtin(name)
            || self
                .gate
                .rules
                .load()
                .as_deref()
                .is_some_and(|r| r.is_ephemeral(path))
    }

    /// The latest deletions and shrinking commits MANIFEST shows: neither of a
    /// temporary nor of a deleted file that lives again. gc keeps their versions.
    pub(crate) fn restorable_shown(&self) -> Result<Vec<crate::store::RestorableInfo>> {
        restorable_shown(&*self.store, &|p| self.is_ephemeral(p))
    }

    /// Whether content is binary ([`views::is_binary`]), from its first
    /// [`views::SNIFF_BYTES`].
    fn sniff(&self, c: ContentRef) -> Result<bool> {
        if c.len == 0 {
            return Ok(false);
        }
        let mut buf = vec![0u8; c.len.min(views::SNIFF_BYTES as u64) as usize];
        let n = self.store.read(c, 0, &mut buf)?;
        Ok(views::is_binary(&buf[..n], c.len == n as u64))
    }

    /// "who may write" lines of MANIFEST: one per path rule that restricts something.
    fn rules_summary(&self) -> Vec<String> {
        let Some(r) = self.gate.rules.load() else {
            return vec!["anyone may write any file (no writer rules)".into()];
        };
        r.summary()
    }

    /// The view `name` in `parent` denotes, if any.
    pub(super) fn view_by_name(&self, parent: u64, name: &[u8]) -> Result<Option<View>> {
        if let Some(dir) = View::of(parent) {
            return self.history_child(dir, name);
        }
        if parent == ROOT && name == views::MANIFEST {
            return Ok(Some(View::Manifest));
        }
        if parent == ROOT && name == views::HISTORY {
            return Ok(Some(View::HistoryDir(0)));
        }
        if parent == ROOT && name == views::ARCHIVE {
            return Ok(Some(View::ArchiveDir(0)));
        }
        if parent == ROOT && name == views::CHECKPOINTS {
            return Ok(Some(View::CheckpointDir(0)));
        }
        let Some(target) = views::outline_target(name) else {
            return Ok(None);
        };
        let tree = self.tree.read();
        let Ok(Some(ino)) = tree.child(parent, target) else {
            return Ok(None);
        };
        Ok((tree.get(ino)?.kind == Kind::File).then_some(View::Outline(ino)))
    }

    /// Attributes of a view: size of its current rendering, never cached by the kernel;
    /// MANIFEST is mode 0444 and the root's owner's, an outline has its file's owner and
    /// read bits (what a file holds is for those who may read it; docs/views.md), history
    /// views [`Fs::history_attr`].
    pub(super) fn view_attr(&self, view: View) -> Result<Attr> {
        self.view_attr_for(view, None)
    }

    /// [`Fs::view_attr`] as reader `ctx` sees it: MANIFEST's size is that of the text it
    /// reads ([`Fs::manifest_for`]).
    pub(super) fn view_attr_for(&self, view: View, ctx: Option<Ctx>) -> Result<Attr> {
        if !matches!(view, View::Manifest | View::Outline(_)) {
            return self.history_attr(view);
        }
        let bytes = match (view, ctx) {
            (View::Manifest, Some(ctx)) => self.manifest_for(ctx)?,
            _ => self.view_content(view)?,
        };
        let tree = self.tree.read();
        let root = tree.get(ROOT)?.attrs;
        let (t, mode, uid, gid) = match view {
            View::Manifest => (
                self.manifest_as_of(root.ctime_ns),
                0o444,
                root.uid,
                root.gid,
            ),
            View::Outline(target) => {
                let a = tree.get(target)?.attrs;
                (a.mtime_ns, a.mode & 0o444, a.uid, a.gid)
            }
            _ => unreachable!("history views are handled above"),
        };
        Ok(Attr {
            ino: view.ino(),
            kind: Kind::File,
            size: bytes.len() as u64,
            attrs: Attrs {
                mode,
                uid,
                gid,
                atime_ns: t,
                mtime_ns: t,
                ctime_ns: t,
            },
            nlink: 1,
            volatile: true,
            synthesized: true,
        })
    }

    /// `open` of a view: `EACCES` for writing; else a snapshot of its content, served with
    /// direct I/O so that size and content always agree (FUSE-TRAPS §1).
    pub(super) fn open_view(
        &self,
        view: View,
        writable: bool,
        ctx: Ctx,
    ) -> Result<(u64, OpenFlags)> {
        if writable {
            return Err(Error::new(libc::EACCES, "views are read-only"));
        }
        let kind = match view {
            View::Manifest => HandleKind::View(self.manifest_for(ctx)?),
            View::Outline(_) => HandleKind::View(self.view_content(view)?),
            // Versions never change: read them from the store as they are needed.
            _ => HandleKind::Read(self.history_content(view)?.0, false),
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().insert(
            fh,
            Arc::new(Slot::new(Handle {
                ino: view.ino(),
                caller: Arc::new(Caller::default()),
                kind,
                created: false,
            })),
        );
        Ok((
            fh,
            OpenFlags {
                direct_io: true,
                keep_cache: false,
                noflush: true,
                cache_dir: false,
            },
        ))
    }

    fn view_content(&self, view: View) -> Result<Arc<Vec<u8>>> {
        match view {
            View::Manifest => self.manifest(),
            View::Outline(target) => self.outline(target),
            _ => Err(Error::new(libc::EISDIR, "not a rendered view")),
        }
    }

    /// MANIFEST as read now, and MANIFEST rendered from a walk of the whole tree, for
    /// tests that the rows kept between renderings follow every change
    /// (tests/manifest_rows.rs). Both at the same state: no change may run meanwhile.
    #[doc(hidden)]
    pub fn manifest_and_walked(&self) -> Result<(Vec<u8>, Vec<u8>)> {
        let read = self.manifest()?.to_vec();
        let _one = self.views.rendering.lock();
        let mut fresh = None;
        let (refusals, restorable, erasures) = self.manifest_events(None)?;
        let walked = self.render_manifest(&mut fresh, restorable, refusals, erasures)?;
        Ok((read, walked.into_bytes()))
    }

    fn manifest(&self) -> Result<Arc<Vec<u8>>> {
        let generation = self.views.generation.load(Ordering::Acquire);
        if let Some((g, bytes)) = self.views.manifest.lock().as_ref()
            && *g == generation
        {
            return Ok(bytes.clone());
        }
        let mut rows = self.views.rendering.lock();
        // Another rendering may have finished meanwhile; a change after this load makes
        // the next read render again.
        let generation = self.views.generation.load(Ordering::Acquire);
        if let Some((g, bytes)) = self.views.manifest.lock().as_ref()
            && *g == generation
        {
            return Ok(bytes.clone());
        }
        let (refusals, restorable, erasures) = self.manifest_events(None)?;
        let text = self.render_manifest(&mut rows, restorable, refusals, erasures)?;
        let bytes = Arc::new(text.into_bytes());
        *self.views.manifest.lock() = Some((generation, bytes.clone()));
        Ok(bytes)
    }

    /// MANIFEST as reader `ctx` may see it (issue 31 item 4): the shared rendering when
    /// it can list every directory (root, or a tree open to it), else one of its own, in
    /// which the files of directories it cannot list are only counted and the refusals,
    /// restorable content and erasures under them are left out ([`Listable`]).
    fn manifest_for(&self, ctx: Ctx) -> Result<Arc<Vec<u8>>> {
        if ctx.uid == 0 {
            return self.manifest();
        }
        let generation = self.views.generation.load(Ordering::Acquire);
        let mut slot = self.views.rendering.lock();
        let listable = Listable::new(ctx);
        let rows = self.rows_now(&mut slot)?;
        let Some(closed) = self.closed_dirs(rows, &listable) else {
            drop(slot);
            return self.manifest();
        };
        let key = {
            let mut h = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(&closed, &mut h);
            std::hash::Hasher::finish(&h)
        };
        if let Some((_, _, bytes)) = self
            .views
            .per_reader
            .lock()
            .iter()
            .find(|(g, k, _)| *g == generation && *k == key)
        {
            return Ok(bytes.clone());
        }
        let (refusals, restorable, erasures) = self.manifest_events(Some(&listable))?;
        let text = self.render_rows(rows, restorable, refusals, erasures, Some(&closed))?;
        let bytes = Arc::new(text.into_bytes());
        let mut kept = self.views.per_reader.lock();
        kept.retain(|(g, _, _)| *g == generation);
        if kept.len() >= PER_READER_KEPT {
            kept.remove(0);
        }
        kept.push((generation, key, bytes.clone()));
        Ok(bytes)
    }

    /// The directories of `rows` (by index in [`Rows::dirs`]) whose files `listable`'s
    /// reader cannot find with `ls`: it lacks read or search on the directory or on one
    /// above it. `None` when it can list every one.
    fn closed_dirs(&self, rows: &Rows, listable: &Listable) -> Option<Vec<bool>> {
        let tree = self.tree.read();
        let inos = rows.dir_inos();
        let mut closed = vec![false; inos.len()];
        let mut any = false;
        for (i, ino) in inos.iter().enumerate() {
            let parent = rows.dirs[i].parent;
            let above = i != 0 && parent < i && closed[parent];
            let own = tree.get(*ino).is_ok_and(|n| listable.lists(&n.attrs));
            closed[i] = above || !own;
            any |= closed[i];
        }
        any.then_some(closed)
    }

    /// Whether `listable`'s reader can find something at `path` (as stored) with `ls`:
    /// it can list every directory of the path that lives now. Directories gone are not
    /// judged, as `.archive` judges them (SPEC §7: 0555 where nothing lives).
    fn path_listed(&self, path: &str, listable: &Listable) -> bool {
        let tree = self.tree.read();
        let Ok(root) = tree.get(ROOT) else {
            return false;
        };
        if !listable.lists(&root.attrs) {
            return false;
        }
        let raw = paths::decode(path);
        let mut dirs: Vec<&[u8]> = raw.split(|&b| b == b'/').collect();
        dirs.pop();
        let mut ino = ROOT;
        for name in dirs {
            match tree.child(ino, name).ok().flatten() {
                Some(next) => match tree.get(next) {
                    Ok(n) if n.kind == Kind::Dir => {
                        if !listable.lists(&n.attrs) {
                            return false;
                        }
                        ino = next;
                    }
                    _ => return true,
                },
                None => return true,
            }
        }
        true
    }

    /// The refusals, restorable content and erasures MANIFEST shows (after writing the
    /// store's batch); with `reader`, only those of paths it can list
    /// ([`Fs::path_listed`]), as `ls .archive/` and `ls .history/` show them (a deleted
    /// file's name is listed there whoever may read its bytes). The totals stay the
    /// store's. What a reader sees depends only on which directories it cannot list, so
    /// readers who cannot list the same ones share a rendering.
    #[allow(clippy::type_complexity)]
    fn manifest_events(
        &self,
        reader: Option<&Listable>,
    ) -> Result<(
        (Vec<Refusal>, u64),
        Vec<manifest::Restorable>,
        (Vec<Refusal>, u64),
    )> {
        self.store.sync()?;
        let shown = |path: &str| reader.is_none_or(|l| self.path_listed(path, l));
        let (mut refusals, count) = self.store.refusals(manifest::REFUSALS_SHOWN)?;
        refusals.retain(|r| shown(&r.path));
        let restorable: Vec<manifest::Restorable> = self
            .restorable_shown()?
            .into_iter()
            .filter(|r| shown(&r.path))
            .map(|r| manifest::Restorable {
                deleted: r.deleted,
                path: r.path,
                writer: r.writer,
                time_ns: r.time_ns,
                version: r.version,
                bytes: r.size,
            })
            .collect();
        let erasures = {
            let (runs, n) = self.store.erasures(manifest::REFUSALS_SHOWN)?;
            (
                runs.into_iter()
                    .filter(|r| shown(&r.path))
                    .map(|r| Refusal {
                        reason: r.reason,
                        writer: r.writer,
                        time_ns: r.time_ns,
                    })
                    .collect(),
                n,
            )
        };
        let refusals = (
            refusals
                .into_iter()
                .map(|r| Refusal {
                    reason: r.reason,
                    writer: r.writer,
                    time_ns: r.time_ns,
                })
                .collect(),
            count,
        );
        Ok((refusals, restorable, erasures))
    }

    /// MANIFEST's rows (`slot`; made by a walk when `None`) brought up to date with the
    /// changes since they last were.
    fn rows_now<'s>(&self, slot: &'s mut Option<Rows>) -> Result<&'s mut Rows> {
        let globs = self
            .gate
            .rules
            .load()
            .as_deref()
            .is_some_and(|r| r.has_ephemeral());
        // Taken before the tree is read: a change made meanwhile is in the next set (its
        // inodes are added after the tree changed, and bump the generation after that).
        let touched = std::mem::take(&mut *self.views.touched.lock());
        let kept = match slot.take() {
            Some(mut rows) if !touched.all => {
                let tree = self.tree.read();
                let mut whole = true;
                for &ino in &touched.inos {
                    let seen = self.seen(&tree, ino, globs)?;
                    if !rows.update(ino, seen, globs) {
                        whole = false;
                        break;
                    }
                }
                whole.then_some(rows)
            }
            _ => None,
        };
        let rows = match kept {
            Some(rows) => slot.insert(rows),
            None => slot.insert(self.walk_rows(globs)?),
        };
        rows.index_dirs(ROOT);
        Ok(rows)
    }

    /// The newest [`manifest::CHECKPOINTS_SHOWN`] checkpoints, newest first, and how many
    /// there are.
    fn checkpoint_lines(&self) -> Result<(Vec<manifest::CheckpointLine>, u64)> {
        let all = self.store.checkpoints()?;
        let n = all.len() as u64;
        Ok((
            all.into_iter()
                .rev()
                .take(manifest::CHECKPOINTS_SHOWN)
                .map(|c| manifest::CheckpointLine {
                    name: c.name,
                    writer: c.writer,
                    time_ns: c.point.time_ns,
                })
                .collect(),
            n,
        ))
    }

    /// MANIFEST's data, structured, for the MCP tool `list` (issue 12): the files it
    /// knows of (temporaries left out), at most `LIST_MAX` (10,000) of them, the newest
    /// first; the latest refusals, restorable content and history erasures it shows.
    ///
    /// As MANIFEST does for reader `ctx` ([`Fs::manifest_for`]): files in directories it
    /// cannot list are counted in `unlisted`, not named.
    pub fn listing(&self, ctx: Ctx) -> Result<serde_json::Value> {
        let listable = Listable::new(ctx);
        let (files, unlisted, reader) = {
            let mut slot = self.views.rendering.lock();
            let rows = self.rows_now(&mut slot)?;
            let closed = (ctx.uid != 0)
                .then(|| self.closed_dirs(rows, &listable))
                .flatten();
            match closed {
                None => (
                    manifest::listing(&rows.dirs, &rows.files, LIST_MAX, now_ns()),
                    0,
                    None,
                ),
                Some(closed) => {
                    let (files, hidden) = rows.files_outside(&closed);
                    (
                        manifest::listing(&rows.dirs, &files, LIST_MAX, now_ns()),
                        hidden,
                        Some(&listable),
                    )
                }
            }
        };
        let (refusals, restorable, erasures) = self.manifest_events(reader)?;
        Ok(serde_json::json!({
            "files": files,
            "unlisted": unlisted,
            "refusals": refusals.0,
            "refusals_total": refusals.1,
            "restorable": restorable,
            "history_erased": erasures.0,
            "checkpoints": self.checkpoint_lines()?.0,
            "usage": self.pad()?.map(|p| serde_json::json!({
                "bytes": p.bytes,
                "quota_bytes": p.quota_bytes,
                "versions": p.versions,
                "forgotten_by_policy": p.forgotten,
                "files": p.files,
                "quota_files": p.quota_files,
            })),
        }))
    }

    /// MANIFEST's `pad` part of the header ([`Fs::usage`] against the quota).
    fn pad(&self) -> Result<Option<manifest::Pad>> {
        let quota = self.quota().unwrap_or_default();
        Ok(self.usage()?.map(|u| manifest::Pad {
            bytes: u.bytes,
            quota_bytes: quota.bytes,
            versions: u.versions,
            forgotten: u.forgotten,
            files: u.files,
            quota_files: quota.files,
        }))
    }

    /// Renders MANIFEST: its rows brought up to date from the inodes touched since the
    /// last rendering (`manifest_rows.rs`), or from a walk of the tree ([`Fs::walk_rows`])
    /// the first time and after changes too many or too wide to follow one by one.
    fn render_manifest(
        &self,
        slot: &mut Option<Rows>,
        restorable: Vec<manifest::Restorable>,
        refusals: (Vec<Refusal>, u64),
        erasures: (Vec<Refusal>, u64),
    ) -> Result<String> {
        let mut current = slot.take();
        let rows = self.rows_now(&mut current)?;
        let text = self.render_rows(rows, restorable, refusals, erasures, None);
        *slot = current;
        text
    }

    /// Renders MANIFEST from `rows` (brought up to date), leaving out the files of the
    /// directories `closed` marks (by index in [`Rows::dirs`]) but for their count.
    fn render_rows(
        &self,
        rows: &mut Rows,
        restorable: Vec<manifest::Restorable>,
        refusals: (Vec<Refusal>, u64),
        erasures: (Vec<Refusal>, u64),
        closed: Option<&[bool]>,
    ) -> Result<String> {
        let rules_now = self.gate.rules.load();
        let rules = rules_now.as_deref();
        let caps = |path: &str| {
            rules
                .and_then(|r| r.rule_for(path))
                .and_then(|r| r.max_bytes)
        };
        let root_ctime = self.tree.read().get(ROOT)?.attrs.ctime_ns;
        let (files, unlisted) = match closed {
            Some(closed) => rows.files_outside(closed),
            None => (std::mem::take(&mut rows.files), 0),
        };
        let mut input = manifest::Input {
            dirs: std::mem::take(&mut rows.dirs),
            files,
            temporaries: rows.temporaries(),
            unlisted,
            restorable,
            refusals,
            erasures,
            checkpoints: self.checkpoint_lines()?,
            rules: self.rules_summary(),
            as_of_ns: self.manifest_as_of(root_ctime),
            budget_tokens: self.manifest_budget(),
            caps: rules.is_some().then_some(&caps as manifest::Caps),
            step_now: Some(self.step_now.load(Ordering::Relaxed)).filter(|&s| s != i64::MIN),
            pad: self.pad()?,
        };
        let text = manifest::render(&input);
        rows.dirs = std::mem::take(&mut input.dirs);
        if closed.is_none() {
            rows.files = std::mem::take(&mut input.files);
        }
        Ok(text)
    }

    /// What inode `ino` is for MANIFEST now (one file or directory, after a change).
    fn seen(&self, tree: &Tree, ino: u64, globs: bool) -> Result<Seen> {
        let Some(n) = tree.nodes.get(&ino).filter(|n| !n.orphan) else {
            return Ok(Seen::Nothing);
        };
        let h = match (n.kind, &n.head) {
            (Kind::Dir, _) if ino != ROOT => return Ok(Seen::Dir(n.parent, n.name.clone())),
            (Kind::File, Some(h)) => h,
            _ => return Ok(Seen::Nothing),
        };
        let name = paths::encode(&n.name);
        let temporary = views::ephemeral::is_builtin(&name)
            || (globs
                && self
                    .gate
                    .rules
                    .load()
                    .as_deref()
                    .is_some_and(|r| r.is_ephemeral(&tree.path(ino))));
        if temporary {
            return Ok(Seen::Temporary);
        }
        let c = h.content;
        let binary = match n.memo.binary(c.stream, judged_len(c)) {
            _ if c.len == 0 => false,
            Some(b) => b,
            None => {
                let b = self.sniff(c)?;
                remember(&n.memo, c, b);
                b
            }
        };
        Ok(Seen::File(n.parent, row(n, h, binary)))
    }

    /// MANIFEST's rows from one pass over the inodes, reading the name and the start of
    /// the content only of files whose [`ViewMemo`] does not know them yet.
    fn walk_rows(&self, globs: bool) -> Result<Rows> {
        let rules_now = self.gate.rules.load();
        let rules = rules_now.as_deref();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let tree = self.tree.read();
            // One pass over the inodes: the directories, and what MANIFEST needs of each
            // file (its name is read only if its memo does not know it).
            let mut dir_nodes: Vec<(u64, &Node)> = Vec::new();
            // The rows (inode, directory inode, row), and what else each file needs (the
            // same index).
            let mut files: Vec<(u64, u64, manifest::File)> = Vec::with_capacity(tree.nodes.len());
            // Files whose memo must be looked at again, by index in `files` (without the
            // rules' globs, only those whose name, place or content changed).
            let mut extra: Vec<Extra<'_>> = Vec::new();
            let mut temporaries: Vec<u64> = Vec::new();
            for (&ino, n) in &tree.nodes {
                if n.orphan {
                    continue;
                }
                match (n.kind, n.head.as_ref()) {
                    (Kind::Dir, _) if ino != ROOT => dir_nodes.push((ino, n)),
                    (Kind::File, Some(h)) => {
                        let c = h.content;
                        let memo = &n.memo;
                        let binary = if c.len == 0 {
                            Some(false)
                        } else {
                            memo.binary(c.stream, judged_len(c))
                        };
                        let placed = mix(
                            mix(n.attrs.ctime_ns as u64, n.parent),
                            mix(n.name.as_ptr() as u64, n.name.len() as u64),
                        );
                        // Without the rules' globs the digest is whole here.
                        let judged = if globs { None } else { memo.ephemeral(placed) };
                        if judged.is_none() || binary.is_none() {
                            extra.push(Extra {
                                at: files.len(),
                                ino,
                                node: n,
                                placed,
                                known: binary.is_some(),
                            });
                        } else if judged == Some(true) {
                            temporaries.push(ino);
                            continue;
                        }
                        files.push((ino, n.parent, row(n, h, binary == Some(true))));
                    }
                    _ => {}
                }
            }
            // Each directory's path (only to match the rules' globs) and its digest,
            // parents first (by depth).
            let parents: FxMap<u64, u64> = dir_nodes.iter().map(|(i, n)| (*i, n.parent)).collect();
            let depth = |mut ino: u64| {
                let mut d = 0usize;
                while ino != ROOT && d <= dir_nodes.len() {
                    ino = parents.get(&ino).copied().unwrap_or(ROOT);
                    d += 1;
                }
                d
            };
            let mut order: Vec<(usize, u64, &Node)> =
                dir_nodes.iter().map(|&(i, n)| (depth(i), i, n)).collect();
            order.sort_unstable_by_key(|&(d, i, _)| (d, i));
            let mut dir_paths: FxMap<u64, (String, u64)> = FxMap::default();
            dir_paths.insert(ROOT, (String::new(), 0));
            if globs {
                for &(_, ino, n) in &order {
                    let Some((parent, _)) = dir_paths.get(&n.parent) else {
                        continue;
                    };
                    let name = paths::encode(&n.name);
                    let p = if parent.is_empty() {
                        name.to_string()
                    } else {
                        format!("{parent}/{name}")
                    };
                    let mut h = std::hash::DefaultHasher::new();
                    std::hash::Hash::hash(&p, &mut h);
                    let digest = std::hash::Hasher::finish(&h);
                    dir_paths.insert(ino, (p, digest));
                }
            }
            let mut unsniffed: Vec<(usize, u64, &Node)> = Vec::new();
            let mut gone: Vec<usize> = Vec::new();
            for x in &extra {
                let parent = files[x.at].1;
                // The name and place this file had when last judged a temporary or not.
                let (dir_path, placed) = match (globs, dir_paths.get(&parent)) {
                    (false, _) => ("", x.placed),
                    (true, Some((p, digest))) => (p.as_str(), mix(x.placed, *digest)),
                    // In no directory reachable from the root: no row.
                    (true, None) => continue,
                };
                let n = x.node;
                let ephemeral = match n.memo.ephemeral(placed) {
                    Some(e) => e,
                    None => {
                        let name = paths::encode(&n.name);
                        let e = views::ephemeral::is_builtin(&name)
                            || (globs
                                && rules.is_some_and(|rules| {
                                    rules.is_ephemeral(&if dir_path.is_empty() {
                                        name.to_string()
                                    } else {
                                        format!("{dir_path}/{name}")
                                    })
                                }));
                        n.memo.set_ephemeral(placed, e);
                        e
                    }
                };
                if ephemeral {
                    temporaries.push(x.ino);
                    gone.push(x.at);
                } else if !x.known {
                    unsniffed.push((x.at, x.ino, x.node));
                }
            }
            if unsniffed.len() > SNIFF_UNDER_LOCK && attempt == 1 {
                // Many files not seen yet (the first rendering of a large tree): their
                // starts are read without holding the tree, then the tree is walked again.
                let todo: Vec<(u64, ContentRef)> = unsniffed
                    .iter()
                    .filter_map(|(_, ino, n)| n.head.as_ref().map(|h| (*ino, h.content)))
                    .collect();
                drop(files);
                drop(extra);
                drop(unsniffed);
                drop(order);
                drop(dir_nodes);
                drop(tree);
                let mut found = Vec::with_capacity(todo.len());
                for (ino, c) in todo {
                    found.push((ino, c, self.sniff(c)?));
                }
                let tree = self.tree.read();
                for (ino, c, binary) in found {
                    if let Some(n) = tree.nodes.get(&ino) {
                        remember(&n.memo, c, binary);
                    }
                }
                continue;
            }
            // A few files changed since the last rendering: read their starts now.
            for (i, _, n) in unsniffed {
                let Some(c) = n.head.as_ref().map(|h| h.content) else {
                    continue;
                };
                let binary = self.sniff(c)?;
                remember(&n.memo, c, binary);
                files[i].2.binary = binary;
            }
            // The temporaries found among the files, out (highest index first).
            gone.sort_unstable();
            for i in gone.into_iter().rev() {
                files.swap_remove(i);
            }
            let dirs = order
                .into_iter()
                .map(|(_, ino, n)| (ino, n.parent, n.name.clone()))
                .collect();
            return Ok(Rows::from_walk(files, temporaries, dirs));
        }
    }

    fn outline(&self, target: u64) -> Result<Arc<Vec<u8>>> {
        let (path, head, file_id) = {
            let tree = self.tree.read();
            let n = tree.get(target)?;
            if n.orphan || n.kind != Kind::File {
                return Err(Error::new(libc::ENOENT, "the file of this outline is gone"));
            }
            // A file without a version yet is empty.
            let head = n.head.clone().unwrap_or(crate::store::VersionInfo {
                id: 0,
                number: 0,
                content: crate::store::ContentRef::default(),
                time_ns: n.attrs.ctime_ns,
                writer: "".into(),
            });
            (tree.path(target), head, n.file_id)
        };
        if let Some((v, p, bytes)) = self.views.outlines.lock().get(&target)
            && *v == head.id
            && *p == path
        {
            return Ok(bytes.clone());
        }
        // A bounded prefix: an outline reads at most OUTLINE_MAX bytes of any file.
        let mut content = vec![0u8; head.content.len.min(outline::OUTLINE_MAX as u64) as usize];
        let n = self.store.read(head.content, 0, &mut content)?;
        content.truncate(n);
        // And the last bytes, for the last line of a file read in part.
        let mut tail = Vec::new();
        if (n as u64) < head.content.len {
            let from = head
                .content
                .len
                .saturating_sub(outline::TAIL_MAX as u64)
                .max(n as u64);
            tail = vec![0u8; (head.content.len - from) as usize];
            let t = self.store.read(head.content, from, &mut tail)?;
            tail.truncate(t);
        }
        let (blake3, line) = if head.id == 0 {
            (
                crate::store::digest::of_bytes(b""),
                "no version yet (created, not committed)".to_string(),
            )
        } else {
            (
                self.store.version_meta(head.id)?.blake3,
                format!("version {} by {}", head.number, head.writer),
            )
        };
        let mut fields = outline::Fields::new();
        if let Some(fid) = file_id.filter(|_| head.id != 0) {
            for f in self.store.fields(fid)? {
                fields.insert(
                    f.key,
                    outline::KeyProvenance {
                        writer: f.writer,
                        version: f.version,
                        step: f.step,
                        time_ns: f.time_ns,
                    },
                );
            }
        }
        let input = outline::Input {
            path: &path,
            head: &content,
            tail: &tail,
            size: head.content.len,
            blake3: &blake3,
            version_line: &line,
        };
        let bytes = Arc::new(outline::outline(input, &fields));
        let mut cache = self.views.outlines.lock();
        let held: usize = cache.values().map(|(_, _, b)| b.len()).sum();
        if cache.len() >= OUTLINE_CACHE || held + bytes.len() > OUTLINE_CACHE_BYTES {
            cache.clear();
        }
        cache.insert(target, (head.id, path, bytes.clone()));
        Ok(bytes)
    }

    /// `listxattr`: the provenance attributes of a regular file (none elsewhere), as
    /// NUL-terminated names.
    pub fn listxattr(&self, ino: u64) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        if ino == ROOT {
            out.extend_from_slice(SCRATCHPAD_XATTR.as_bytes());
            out.push(0);
            return Ok(out);
        }
        let Some((id, _)) = self.xattr_version(ino)? else {
            return Ok(out);
        };
        let meta = self.store.version_meta(id)?;
        let archived = matches!(View::of(ino), Some(View::Archived(_)));
        for name in XATTRS
            .iter()
            .chain(if archived { ARCHIVE_XATTRS } else { &[] })
        {
            if *name == "step" && meta.step.is_none() {
                continue;
            }
            if *name == "inputs" && self.store.inputs(id)?.is_empty() {
                continue;
            }
            if *name == "origin" && self.store.origin(id)?.is_none() {
                continue;
            }
            out.extend_from_slice(XATTR_PREFIX.as_bytes());
            out.extend_from_slice(name.as_bytes());
            out.push(0);
        }
        Ok(out)
    }

    /// The version whose provenance an inode's xattrs show, with its number: a file's
    /// current version, a history version, an archived file's last version.
    fn xattr_version(&self, ino: u64) -> Result<Option<(i64, i64)>> {
        Ok(match View::of(ino) {
            None => self
                .tree
                .read()
                .get(ino)?
                .head
                .as_ref()
                .map(|h| (h.id, h.number)),
            Some(v @ (View::Version(_) | View::Archived(_))) => {
                let (_, id) = self.history_content(v)?;
                Some((id, self.store.version(id)?.number))
            }
            Some(View::CheckpointFile(cid)) => match self.checkpoint_content(cid)? {
                (_, 0) => None,
                (_, id) => Some((id, self.store.version(id)?.number)),
            },
            Some(_) => None,
        })
    }

    /// `getxattr`: `user.scratchfs.version`, `.writer`, `.blake3`, `.step`, `.committed`
    /// (RFC 3339 UTC) and `.inputs` (issue 13: a JSON array of what the writer had read,
    /// [`crate::lineage::inputs_json`]) of a file's current version; on the root,
    /// [`SCRATCHPAD_XATTR`] and [`SETTLED_XATTR`] (which waits). Any other name, or `.step`
    /// or `.inputs` of a version without one: `ENODATA`.
    pub fn getxattr(&self, ino: u64, name: &[u8], ctx: super::Ctx) -> Result<Vec<u8>> {
        let nodata = || Error::new(libc::ENODATA, "no such attribute");
        let name = std::str::from_utf8(name).map_err(|_| nodata())?;
        let Some(key) = name.strip_prefix(XATTR_PREFIX) else {
            return Err(nodata());
        };
        if ino == ROOT && name == SETTLED_XATTR {
            // A wait holds one of the daemon's few workers: only for those who may roll
            // back (a read, not a change: nothing to put on record).
            if !self.gate.may_roll_back(&self.caller(ctx)) {
                return Err(Error::new(
                    libc::EPERM,
                    "user.scratchfs.settled is for those who may roll back (root, the user \
                     who mounted, the writers the rules' checkpoints.rollback names)",
                ));
            }
            return if self.settle() {
                Ok(b"settled".to_vec())
            } else {
                Err(Error::new(
                    libc::EAGAIN,
                    "the kernel has not dropped the caches this daemon invalidated (10 s)",
                ))
            };
        }
        if ino == ROOT && name == SCRATCHPAD_XATTR {
            let id = self.store.meta("scratchpad_id")?.ok_or_else(nodata)?;
            return Ok(id.into_bytes());
        }
        let (id, number) = self.xattr_version(ino)?.ok_or_else(nodata)?;
        let meta = self.store.version_meta(id)?;
        let deletion = || -> Result<(String, i64)> {
            match View::of(ino) {
                Some(View::Archived(fid)) => self.store.deletion(fid as i64)?.ok_or_else(nodata),
                _ => Err(nodata()),
            }
        };
        let value = match key {
            "deleted_by" => deletion()?.0,
            "deleted" => manifest::utc(deletion()?.1).replace(' ', "T"),
            "version" => number.to_string(),
            "writer" => meta.writer,
            "blake3" => meta.blake3,
            "step" => meta.step.ok_or_else(nodata)?.to_string(),
            "committed" => manifest::utc(meta.time_ns).replace(' ', "T"),
            "inputs" => {
                let inputs = self.store.inputs(id)?;
                if inputs.is_empty() {
                    return Err(nodata());
                }
                crate::lineage::inputs_json(&inputs).to_string()
            }
            "origin" => {
                let o = self.store.origin(id)?.ok_or_else(nodata)?;
                serde_json::to_string(&o).unwrap_or_default()
            }
            _ => return Err(nodata()),
        };
        Ok(value.into_bytes())
    }

    /// `setxattr` and `removexattr`: refused with `EOPNOTSUPP` ("Operation not
    /// supported"), which `cp -a` and `rsync -a` tolerate; provenance is not writable.
    /// One name is a command: setting [`RESTORE_XATTR`] to a version number N on a file
    /// makes version N its current version again, as a new version with op `restore`
    /// (how `scratchfs restore PATH@N` works while mounted).
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], ctx: super::Ctx) -> Result<()> {
        if name == GC_XATTR.as_bytes() && ino == ROOT {
            // The gate first: an attempt to erase history is on record even when its
            // value does not parse.
            let change = super::gate::Change::Erase {
                what: "gc",
                path: "",
            };
            self.admit(&self.caller(ctx), &change, || None)?;
            let req: crate::store::GcRequest = serde_json::from_slice(value)
                .map_err(|e| Error::new(libc::EINVAL, format!("gc: {e}")))?;
            if req.policy {
                let report = self.policy_pass(false)?;
                let text = serde_json::to_string(&report).unwrap_or_default();
                self.store.set_meta(super::policy::LAST_POLICY, &text)?;
                return Ok(());
            }
            return self.gc(&req, ctx).map(|_| ());
        }
        if name == REDACT_XATTR.as_bytes() && ino == ROOT {
            let change = super::gate::Change::Erase {
                what: "redact",
                path: "",
            };
            self.admit(&self.caller(ctx), &change, || None)?;
            let req: RedactRequest = serde_json::from_slice(value)
                .map_err(|e| Error::new(libc::EINVAL, format!("redact: {e}")))?;
            return self
                .redact(&req.path, req.version, &req.why, ctx)
                .map(|_| ());
        }
        // A checkpoint's name is UTF-8 (printable, checked by the core).
        let utf8 = |what: &str| {
            std::str::from_utf8(value).map_err(|_| {
                Error::new(
                    libc::EINVAL,
                    format!("{what}: a checkpoint name is UTF-8 text"),
                )
            })
        };
        if name == CHECKPOINT_XATTR.as_bytes() && View::of(ino).is_none() {
            let text = utf8("checkpoint")?;
            let (cp, note) = match text.split_once('\n') {
                Some((cp, note)) => (cp, Some(note).filter(|n| !n.is_empty())),
                None => (text, None),
            };
            return self.checkpoint(cp, note, ctx).map(|_| ());
        }
        if name == ROLLBACK_XATTR.as_bytes() && View::of(ino).is_none() {
            return self
                .rollback_in(utf8("rollback")?, ctx, Some(ino))
                .map(|_| ());
        }
        if name == ADOPT_XATTR.as_bytes() && ino == ROOT {
            let req: crate::cli::fork::AdoptRequest = serde_json::from_slice(value)
                .map_err(|e| Error::new(libc::EINVAL, format!("adopt: {e}")))?;
            let items: Vec<(String, Option<String>)> = req
                .paths
                .iter()
                .enumerate()
                .map(|(i, p)| (p.clone(), req.keys.get(i).cloned().flatten()))
                .collect();
            let op = match req.op.as_deref() {
                None | Some("adopt") => "adopt",
                Some("promote") => "promote",
                Some(other) => {
                    return Err(Error::new(
                        libc::EINVAL,
                        format!("adopt: unknown op {other:?}"),
                    ));
                }
            };
            return self
                .adopt_through_mount(&req.from, &items, op, ctx)
                .map(|_| ());
        }
        if name == PROMOTED_XATTR.as_bytes() && ino == ROOT {
            #[derive(serde::Deserialize)]
            struct Note {
                path: String,
                reason: String,
            }
            let n: Note = serde_json::from_slice(value)
                .map_err(|e| Error::new(libc::EINVAL, format!("promoted: {e}")))?;
            return self.note_promoted(&n.path, &n.reason, &self.caller(ctx));
        }
        if name == DROP_CHECKPOINT_XATTR.as_bytes() && ino == ROOT {
            return self
                .drop_checkpoint(utf8("drop-checkpoint")?, ctx)
                .map(|_| ());
        }
        if name == RESTORE_XATTR.as_bytes() && View::of(ino).is_none() {
            let n: i64 = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| Error::new(libc::EINVAL, "restore: expected a version number"))?;
            return self.restore(ino, n, ctx);
        }
        Err(Error::new(
            libc::EOPNOTSUPP,
            "extended attributes are read-only provenance",
        ))
    }
}

/// What MANIFEST's `restorable:` list shows ([`Fs::restorable_shown`]), for any reader
/// of the history: temporaries (`ephemeral`) and deleted files that live again left out,
/// at most [`manifest::REFUSALS_SHOWN`].
pub(crate) fn restorable_shown<H: crate::store::History + ?Sized>(
    history: &H,
    ephemeral: &dyn Fn(&str) -> bool,
) -> Result<Vec<crate::store::RestorableInfo>> {
    let mut limit = manifest::REFUSALS_SHOWN;
    loop {
        let found = history.restorable(limit)?;
        let scanned = found.len();
        let kept: Vec<_> = found
            .into_iter()
            // A deleted file that lives again needs no pointer to its archive.
            .filter(|r| !(ephemeral(&r.path) || r.deleted && r.live))
            .take(manifest::REFUSALS_SHOWN)
            .collect();
        if kept.len() == manifest::REFUSALS_SHOWN || scanned < limit || limit >= RESTORABLE_SCAN {
            return Ok(kept);
        }
        limit = (limit * 8).min(RESTORABLE_SCAN);
    }
}
