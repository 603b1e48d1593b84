//! Serving the views (SPEC §7) from the core: which name or inode is a view, its
//! attributes, its content snapshot at open, the caches that make reading MANIFEST cheap
//! and commits independent of it, and the provenance extended attributes.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::tree::{Node, ViewMemo};
use super::{Attr, Fs, OpenFlags, ROOT, now_ns};
use crate::error::{Error, Result};
use crate::fs::handle::{Handle, HandleKind};
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

/// Most deletions and shrinking commits MANIFEST looks through for the latest ones that
/// are not temporaries (4,096).
const RESTORABLE_SCAN: usize = 4096;

/// Files whose start MANIFEST reads while it holds the tree (a few changed since the last
/// rendering); more are read without it, before the tree is walked again.
const SNIFF_UNDER_LOCK: usize = 64;

/// A hash map keyed by inode numbers, with a cheap hash (FxHash's multiply and rotate):
/// MANIFEST looks up every file's directory.
type FxMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fx>>;

/// FxHash (rustc's): enough for inode numbers, many times faster than SipHash.
#[derive(Default)]
struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = mix(self.0, u64::from(*b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = mix(self.0, n);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// One step of FxHash.
fn mix(h: u64, n: u64) -> u64 {
    (h.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95)
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

/// Records in a file's memo whether content `c` is binary.
fn remember(memo: &ViewMemo, c: ContentRef, binary: bool) {
    memo.set_binary(c.stream, c.len.min(views::SNIFF_BYTES as u64), binary);
}

/// Prefix of the provenance extended attributes.
pub const XATTR_PREFIX: &str = "user.scratchfs.";
/// The provenance extended attributes of every file (SPEC §7), in listing order.
pub const XATTRS: &[&str] = &["version", "writer", "blake3", "step", "committed"];
/// Setting this attribute on the root to a JSON `GcRequest` runs gc in the daemon.
pub const GC_XATTR: &str = "user.scratchfs.gc";
/// Setting this attribute to N restores version N (see [`Fs::setxattr`]).
pub const RESTORE_XATTR: &str = "user.scratchfs.restore";
/// Setting this attribute on the root to a JSON [`RedactRequest`] redacts a version in the
/// daemon (`scratchfs redact`).
pub const REDACT_XATTR: &str = "user.scratchfs.redact";

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
    /// Held while MANIFEST renders: one rendering at a time (the others then find it
    /// cached), and one writer of the files' [`ViewMemo`]s.
    rendering: Mutex<()>,
    /// Outlines by file inode.
    outlines: Mutex<HashMap<u64, CachedOutline>>,
    /// Directories of `.history` and `.archive`, by path.
    pub(super) dirs: super::serve_history::Registry,
}

/// An outline as rendered for (version id, path).
type CachedOutline = (i64, String, Arc<Vec<u8>>);

impl ViewState {
    /// Something changed: views render afresh when next read (never at commit time, so a
    /// commit costs the same with 10 files or 10,000).
    pub fn changed(&self) {
        self.generation.fetch_add(1, Ordering::Release);
        self.last_change_ns.store(now_ns(), Ordering::Release);
    }
}

impl Fs {
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
            .as_ref()
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
                .as_ref()
                .is_some_and(|r| r.is_ephemeral(path))
    }

    /// The latest deletions and shrinking commits MANIFEST shows: neither of a
    /// temporary nor of a deleted file that lives again.
    fn restorable_shown(&self) -> Result<Vec<manifest::Restorable>> {
        let mut limit = manifest::REFUSALS_SHOWN;
        loop {
            let found = self.store.restorable(limit)?;
            let scanned = found.len();
            let kept: Vec<manifest::Restorable> = found
                .into_iter()
                // A deleted file that lives again needs no pointer to its archive.
                .filter(|r| !(self.is_ephemeral(&r.path) || r.deleted && r.live))
                .take(manifest::REFUSALS_SHOWN)
                .map(|r| manifest::Restorable {
                    deleted: r.deleted,
                    path: r.path,
                    writer: r.writer,
                    time_ns: r.time_ns,
                    version: r.version,
                    bytes: r.size,
                })
                .collect();
            if kept.len() == manifest::REFUSALS_SHOWN || scanned < limit || limit >= RESTORABLE_SCAN
            {
                return Ok(kept);
            }
            limit = (limit * 8).min(RESTORABLE_SCAN);
        }
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
        let Some(r) = &self.gate.rules else {
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
        let Some(target) = views::outline_target(name) else {
            return Ok(None);
        };
        let tree = self.tree.read();
        let Ok(Some(ino)) = tree.child(parent, target) else {
            return Ok(None);
        };
        Ok((tree.get(ino)?.kind == Kind::File).then_some(View::Outline(ino)))
    }

    /// Attributes of a view: mode 0444, owned by the root's owner, size of its current
    /// rendering, never cached by the kernel.
    pub(super) fn view_attr(&self, view: View) -> Result<Attr> {
        if !matches!(view, View::Manifest | View::Outline(_)) {
            return self.history_attr(view);
        }
        let bytes = self.view_content(view)?;
        let tree = self.tree.read();
        let root = tree.get(ROOT)?.attrs;
        let t = match view {
            View::Manifest => self
                .views
                .last_change_ns
                .load(Ordering::Acquire)
                .max(root.ctime_ns),
            View::Outline(target) => tree.get(target)?.attrs.mtime_ns,
            _ => unreachable!("history views are handled above"),
        };
        Ok(Attr {
            ino: view.ino(),
            kind: Kind::File,
            size: bytes.len() as u64,
            attrs: Attrs {
                mode: 0o444,
                uid: root.uid,
                gid: root.gid,
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
    pub(super) fn open_view(&self, view: View, writable: bool) -> Result<(u64, OpenFlags)> {
        if writable {
            return Err(Error::new(libc::EACCES, "views are read-only"));
        }
        let kind = match view {
            View::Manifest | View::Outline(_) => HandleKind::View(self.view_content(view)?),
            // Versions never change: read them from the store as they are needed.
            _ => HandleKind::Read(self.history_content(view)?.0, false),
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().insert(
            fh,
            Arc::new(Mutex::new(Handle {
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

    fn manifest(&self) -> Result<Arc<Vec<u8>>> {
        let generation = self.views.generation.load(Ordering::Acquire);
        if let Some((g, bytes)) = self.views.manifest.lock().as_ref()
            && *g == generation
        {
            return Ok(bytes.clone());
        }
        let _one = self.views.rendering.lock();
        // Another rendering may have finished meanwhile; a change after this load makes
        // the next read render again.
        let generation = self.views.generation.load(Ordering::Acquire);
        if let Some((g, bytes)) = self.views.manifest.lock().as_ref()
            && *g == generation
        {
            return Ok(bytes.clone());
        }
        self.store.sync()?;
        let (refusals, count) = self.store.refusals(manifest::REFUSALS_SHOWN)?;
        let restorable = self.restorable_shown()?;
        let erasures = {
            let (runs, n) = self.store.erasures(manifest::REFUSALS_SHOWN)?;
            (
                runs.into_iter()
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
        let text = self.render_manifest(restorable, refusals, erasures)?;
        let bytes = Arc::new(text.into_bytes());
        *self.views.manifest.lock() = Some((generation, bytes.clone()));
        Ok(bytes)
    }

    /// Renders MANIFEST from the tree: one pass over the inodes, reading the name and the
    /// start of the content only of files whose [`ViewMemo`] does not know them yet.
    fn render_manifest(
        &self,
        restorable: Vec<manifest::Restorable>,
        refusals: (Vec<Refusal>, u64),
        erasures: (Vec<Refusal>, u64),
    ) -> Result<String> {
        let rules = self.gate.rules.as_ref();
        let globs = rules.is_some_and(|r| r.has_ephemeral());
        let caps = |path: &str| {
            rules
                .and_then(|r| r.rule_for(path))
                .and_then(|r| r.max_bytes)
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let tree = self.tree.read();
            // One pass over the inodes: the directories, and what MANIFEST needs of each
            // file (its name is read only if its memo does not know it).
            let mut dir_nodes: Vec<(u64, &Node)> = Vec::new();
            // The rows, their `dir` the directory's inode until it has an index, and
            // what else each file needs (the same index).
            let mut files: Vec<manifest::File<'_>> = Vec::with_capacity(tree.nodes.len());
            // Files whose memo must be looked at again, by index in `files` (without the
            // rules' globs, only those whose name, place or content changed).
            let mut extra: Vec<Extra<'_>> = Vec::new();
            let mut early_temporaries = 0;
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
                            memo.binary(c.stream, c.len.min(views::SNIFF_BYTES as u64))
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
                            early_temporaries += 1;
                            continue;
                        }
                        files.push(manifest::File {
                            dir: n.parent as usize,
                            name: manifest::Name::Raw(&n.name),
                            pinned: n.parent == ROOT
                                && manifest::PINNED.iter().any(|p| p.len() == n.name.len())
                                && manifest::PINNED.iter().any(|p| p.as_bytes() == n.name),
                            bytes: c.len,
                            version: h.number,
                            writer: &h.writer,
                            time_ns: h.time_ns,
                            binary: binary == Some(true),
                        });
                    }
                    _ => {}
                }
            }
            // Directories get indices parents first (by depth).
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
            let mut index: FxMap<u64, usize> = FxMap::default();
            index.insert(ROOT, 0);
            let mut dirs = vec![manifest::Dir {
                parent: 0,
                name: "".into(),
            }];
            // Each directory's path (only to match the rules' globs) and its digest.
            let mut dir_paths: Vec<String> = vec![String::new()];
            let mut dir_digest: Vec<u64> = vec![0];
            for &(_, ino, n) in &order {
                let Some(&parent) = index.get(&n.parent) else {
                    continue;
                };
                let name = paths::encode(&n.name);
                if globs {
                    let p = if parent == 0 {
                        name.to_string()
                    } else {
                        format!("{}/{name}", dir_paths[parent])
                    };
                    let mut h = std::hash::DefaultHasher::new();
                    std::hash::Hash::hash(&p, &mut h);
                    dir_digest.push(std::hash::Hasher::finish(&h));
                    dir_paths.push(p);
                }
                index.insert(ino, dirs.len());
                dirs.push(manifest::Dir { parent, name });
            }
            let mut unsniffed: Vec<(usize, u64, &Node)> = Vec::new();
            let mut temporaries = early_temporaries;
            let mut kept = 0;
            let mut work = extra.iter().peekable();
            for i in 0..files.len() {
                let parent = files[i].dir as u64;
                let x = work.next_if(|x| x.at == i);
                let Some(&dir) = index.get(&parent) else {
                    continue;
                };
                if let Some(x) = x {
                    // The name and place this file had when last judged a temporary or not.
                    let placed = if globs {
                        mix(x.placed, dir_digest[dir])
                    } else {
                        x.placed
                    };
                    let n = x.node;
                    let ephemeral = match n.memo.ephemeral(placed) {
                        Some(e) => e,
                        None => {
                            let name = paths::encode(&n.name);
                            let e = views::ephemeral::is_builtin(&name)
                                || (globs
                                    && rules.is_some_and(|rules| {
                                        rules.is_ephemeral(&if dir == 0 {
                                            name.to_string()
                                        } else {
                                            format!("{}/{name}", dir_paths[dir])
                                        })
                                    }));
                            n.memo.set_ephemeral(placed, e);
                            e
                        }
                    };
                    if ephemeral {
                        temporaries += 1;
                        continue;
                    }
                    if !x.known {
                        unsniffed.push((kept, x.ino, x.node));
                    }
                }
                files[i].dir = dir;
                files.swap(kept, i);
                kept += 1;
            }
            files.truncate(kept);
            drop(extra);
            let mut input = manifest::Input {
                dirs,
                files,
                temporaries,
                ..Default::default()
            };
            if unsniffed.len() > SNIFF_UNDER_LOCK && attempt == 1 {
                // Many files not seen yet (the first rendering of a large tree): their
                // starts are read without holding the tree, then the tree is walked again.
                let todo: Vec<(u64, ContentRef)> = unsniffed
                    .iter()
                    .filter_map(|(_, ino, n)| n.head.as_ref().map(|h| (*ino, h.content)))
                    .collect();
                drop(input);
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
                input.files[i].binary = binary;
            }
            input.restorable = restorable;
            input.refusals = refusals;
            input.erasures = erasures;
            input.rules = self.rules_summary();
            input.as_of_ns = self
                .views
                .last_change_ns
                .load(Ordering::Acquire)
                .max(tree.get(ROOT)?.attrs.ctime_ns);
            input.budget_tokens = self.manifest_budget();
            input.caps = rules.is_some().then_some(&caps as manifest::Caps);
            return Ok(manifest::render(&input));
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
            Some(_) => None,
        })
    }

    /// `getxattr`: `user.scratchfs.version`, `.writer`, `.blake3`, `.step` and
    /// `.committed` (RFC 3339 UTC) of a file's current version. Any other name, or `.step`
    /// of a version without one: `ENODATA`.
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        let nodata = || Error::new(libc::ENODATA, "no such attribute");
        let name = std::str::from_utf8(name).map_err(|_| nodata())?;
        let Some(key) = name.strip_prefix(XATTR_PREFIX) else {
            return Err(nodata());
        };
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
