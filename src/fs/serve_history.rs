//! Serving `.history/<path>/<N>` and `.archive/<path>` (SPEC §7; docs/views.md): read-only
//! trees computed from the store's lineages on each lookup and listing. Directory inodes
//! are registered by path for the life of the mount; version and archived-file inodes
//! carry their `versions.id` or `files.id`.

use std::collections::{BTreeMap, HashMap};

use super::{Attr, DirEntry, Fs, ROOT};
use crate::error::{Error, Result};
use crate::store::{Attrs, ContentRef, Kind, Lineage, paths};
use crate::sync::Mutex;
use crate::views::{self, View};

/// Paths of the history and archive directories, by id (id 0 is the tree's root, "").
/// Paths are the exact bytes of the names looked up. The store keeps them losslessly
/// ([`crate::store::paths`]), but a database written by an older scratchfs holds each
/// byte that is not UTF-8 as U+FFFD, so there two names can share a stored path, and
/// only the bytes tell which live file a `.history/<name>/` means.
#[derive(Default)]
pub struct DirRegistry {
    ids: HashMap<Vec<u8>, u64>,
    paths: Vec<Vec<u8>>,
}

impl DirRegistry {
    fn id(&mut self, path: &[u8]) -> u64 {
        if path.is_empty() {
            return 0;
        }
        if let Some(&id) = self.ids.get(path) {
            return id;
        }
        if self.paths.is_empty() {
            self.paths.push(Vec::new());
        }
        let id = self.paths.len() as u64;
        self.paths.push(path.to_vec());
        self.ids.insert(path.to_vec(), id);
        id
    }

    fn path(&self, id: u64) -> Option<Vec<u8>> {
        if id == 0 {
            return Some(Vec::new());
        }
        self.paths.get(id as usize).cloned()
    }
}

/// The history directory registry of a mount.
pub type Registry = Mutex<DirRegistry>;

fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        name.to_vec()
    } else {
        [prefix, b"/", name].concat()
    }
}

/// The path as the store records it ([`crate::store::paths::encode`]).
fn stored(path: &[u8]) -> String {
    paths::encode(path).into_owned()
}

/// The lineage shown for `path`: the live one, else the one deleted last.
fn chosen<'a>(lineages: &'a [Lineage], path: &str) -> Option<&'a Lineage> {
    lineages
        .iter()
        .filter(|l| l.path == path)
        .max_by_key(|l| (l.deleted_ns.is_none(), l.deleted_ns, l.file_id))
}

/// The attributes of a read-only view node: `size` bytes, its three times `t` (ns),
/// `perm` (mode, uid, gid); `volatile`: never cached by the kernel.
pub(super) fn view_attr(
    view: View,
    kind: Kind,
    size: u64,
    t: i64,
    (mode, uid, gid): (u32, u32, u32),
    nlink: u32,
    volatile: bool,
) -> Attr {
    Attr {
        ino: view.ino(),
        kind,
        size,
        attrs: Attrs {
            mode,
            uid,
            gid,
            atime_ns: t,
            mtime_ns: t,
            ctime_ns: t,
        },
        nlink,
        volatile,
        synthesized: true,
    }
}

/// `000042`.
pub fn version_name(n: i64) -> String {
    format!("{n:0width$}", width = views::VERSION_NAME_WIDTH)
}

impl Fs {
    /// The lineages at or below the exact path `exact` (`""`: all), with the stored path
    /// they were found under: its lossless form ([`stored`]), or, for a name that is not
    /// UTF-8 under which nothing is stored, the form a database written by an older
    /// scratchfs has (each such byte as U+FFFD), if anything is stored under that.
    fn lineages_at(&self, exact: &[u8]) -> Result<(String, Vec<Lineage>)> {
        let key = stored(exact);
        let found = self.store.lineages(&key)?;
        if found.is_empty() && std::str::from_utf8(exact).is_err() {
            let lossy = String::from_utf8_lossy(exact).into_owned();
            let old = self.store.lineages(&lossy)?;
            if !old.is_empty() {
                return Ok((lossy, old));
            }
        }
        Ok((key, found))
    }

    /// The lineage shown for the exact `path`, found under the stored path `key`
    /// ([`Fs::lineages_at`]): that of the live file at `path` if there is one (in a
    /// database written by an older scratchfs, names that differ only in non-UTF-8 bytes
    /// share a stored path), else [`chosen`] by `key`.
    fn chosen_exact<'a>(
        &self,
        lineages: &'a [Lineage],
        path: &[u8],
        key: &str,
    ) -> Option<&'a Lineage> {
        let live = self
            .live_ino_at(path)
            .and_then(|i| self.tree.read().get(i).ok().and_then(|n| n.file_id));
        live.and_then(|fid| lineages.iter().find(|l| l.file_id == fid))
            .or_else(|| chosen(lineages, key))
    }

    /// The inode at `path` (a path's exact bytes, `/`-separated) in the live tree.
    fn live_ino_at(&self, path: &[u8]) -> Option<u64> {
        let tree = self.tree.read();
        path.split(|&b| b == b'/')
            .try_fold(ROOT, |at, name| tree.child(at, name).ok().flatten())
    }

    fn dir_path(&self, id: u64) -> Result<Vec<u8>> {
        self.views
            .dirs
            .lock()
            .path(id)
            .ok_or_else(|| Error::new(libc::ENOENT, "history directory gone"))
    }

    /// The child `name` of a history or archive directory.
    pub(super) fn history_child(&self, dir: View, name: &[u8]) -> Result<Option<View>> {
        if let View::CheckpointDir(id) = dir {
            return self.checkpoint_child(id, name);
        }
        // Changes answered but not yet in SQLite (pending unlinks) must show (views are
        // never stale).
        self.store.sync()?;
        match dir {
            View::HistoryDir(id) => {
                let prefix = self.dir_path(id)?;
                if let Some(n) = std::str::from_utf8(name)
                    .ok()
                    .and_then(|n| n.parse::<i64>().ok())
                    && !prefix.is_empty()
                {
                    let (key, lineages) = self.lineages_at(&prefix)?;
                    if let Some(l) = self.chosen_exact(&lineages, &prefix, &key) {
                        let v = self.store.versions(l.file_id)?;
                        return Ok(v
                            .iter()
                            .find(|v| v.number == n)
                            .map(|v| View::Version(v.id as u64)));
                    }
                }
                let child = join(&prefix, name);
                if self.lineages_at(&child)?.1.is_empty() {
                    return Ok(None);
                }
                Ok(Some(View::HistoryDir(self.views.dirs.lock().id(&child))))
            }
            View::ArchiveDir(id) => {
                let child = join(&self.dir_path(id)?, name);
                let (key, all) = self.lineages_at(&child)?;
                let deleted: Vec<Lineage> = all
                    .into_iter()
                    .filter(|l| l.deleted_ns.is_some() && !l.merged)
                    .collect();
                if let Some(l) = chosen(&deleted, &key) {
                    return Ok(Some(View::Archived(l.file_id as u64)));
                }
                if deleted.is_empty() {
                    return Ok(None);
                }
                Ok(Some(View::ArchiveDir(self.views.dirs.lock().id(&child))))
            }
            _ => Err(Error::new(libc::ENOTDIR, "not a directory")),
        }
    }

    /// Entries of a history or archive directory, sorted by name; the cookie of an entry
    /// is its position + 3 (these trees only grow, and only between listings).
    pub(super) fn history_readdir(&self, dir: View, offset: u64) -> Result<Vec<DirEntry>> {
        if let View::CheckpointDir(id) = dir {
            return self.checkpoint_readdir(id, offset);
        }
        self.store.sync()?;
        // By the names' exact bytes (stored paths decoded).
        let mut names: BTreeMap<Vec<u8>, (View, Kind)> = BTreeMap::new();
        let (exact, archive) = match dir {
            View::HistoryDir(id) => (self.dir_path(id)?, false),
            View::ArchiveDir(id) => (self.dir_path(id)?, true),
            _ => return Err(Error::new(libc::ENOTDIR, "not a directory")),
        };
        // A file's own history: a change its handles owe (a create or an O_TRUNC closed
        // without a write, committed at the release that follows close(2)) is waited for
        // as an open waits for it, so `exec 3>f; exec 3>&-; ls .history/f` lists it.
        if !archive
            && !exact.is_empty()
            && let Some(ino) = self.live_ino_at(&exact)
        {
            self.settle_owed(ino);
        }
        let (prefix, mut lineages) = self.lineages_at(&exact)?;
        if archive {
            lineages.retain(|l| l.deleted_ns.is_some() && !l.merged);
        }
        if !archive
            && !prefix.is_empty()
            && let Some(l) = self.chosen_exact(&lineages, &exact, &prefix)
        {
            for v in self.store.versions(l.file_id)? {
                names.insert(
                    version_name(v.number).into_bytes(),
                    (View::Version(v.id as u64), Kind::File),
                );
            }
        }
        let below = if prefix.is_empty() {
            0
        } else {
            prefix.len() + 1
        };
        for l in &lineages {
            if l.path.len() <= below || (below > 0 && !l.path.starts_with(&format!("{prefix}/"))) {
                continue;
            }
            let rest = &l.path[below..];
            let first_stored = rest.split('/').next().unwrap_or(rest);
            let first = paths::decode(first_stored).into_owned();
            let child = join(&exact, &first);
            if archive && !rest.contains('/') {
                if let Some(c) = chosen(&lineages, &l.path) {
                    names.insert(first, (View::Archived(c.file_id as u64), Kind::File));
                }
                continue;
            }
            names.entry(first).or_insert_with(|| {
                let id = self.views.dirs.lock().id(&child);
                let v = if archive {
                    View::ArchiveDir(id)
                } else {
                    View::HistoryDir(id)
                };
                (v, Kind::Dir)
            });
        }
        let mut out = Vec::new();
        let me = dir.ino();
        for (i, (name, ino, kind)) in [
            (b".".to_vec(), me, Kind::Dir),
            (b"..".to_vec(), ROOT, Kind::Dir),
        ]
        .into_iter()
        .chain(names.into_iter().map(|(n, (v, k))| (n, v.ino(), k)))
        .enumerate()
        {
            let cookie = i as u64 + 1;
            if cookie > offset {
                out.push(DirEntry {
                    ino,
                    next_offset: cookie,
                    kind,
                    name,
                });
            }
        }
        Ok(out)
    }

    /// Attributes of a history view (docs/views.md, "Who may read a view"): a version or
    /// an archived file has its version's size and time (an archived file: its last
    /// version, at the time it was deleted), the owner and read bits of the inode that
    /// carried that version ([`Fs::version_perm`], issue 31); a directory mirrors the
    /// live directory or file at its path (read bits, and search where read is given), or
    /// is 0555 and the root's owner's when nothing lives there.
    pub(super) fn history_attr(&self, view: View) -> Result<Attr> {
        if matches!(view, View::CheckpointDir(_) | View::CheckpointFile(_)) {
            return self.checkpoint_attr(view);
        }
        let root = self.tree.read().get(ROOT)?.attrs;
        let (kind, size, t, nlink, (mode, uid, gid)) = match view {
            View::HistoryDir(id) | View::ArchiveDir(id) => (
                Kind::Dir,
                0,
                root.mtime_ns,
                2,
                self.dir_perm(&self.dir_path(id)?),
            ),
            View::Version(id) => {
                let v = self.store.version(id as i64)?;
                (
                    Kind::File,
                    v.content.len,
                    v.time_ns,
                    1,
                    self.version_perm(id as i64)?,
                )
            }
            View::Archived(fid) => {
                let v = self
                    .store
                    .versions(fid as i64)?
                    .pop()
                    .ok_or_else(|| Error::new(libc::ENOENT, "no version"))?;
                let t = self
                    .store
                    .deletion(fid as i64)?
                    .map(|d| d.1)
                    .unwrap_or(v.time_ns);
                (Kind::File, v.content.len, t, 1, self.version_perm(v.id)?)
            }
            _ => return Err(Error::new(libc::EINVAL, "not a history view")),
        };
        Ok(view_attr(
            view,
            kind,
            size,
            t,
            (mode, uid, gid),
            nlink,
            true,
        ))
    }

    /// Mode, uid and gid of the history or archive directory for `path`: a live directory
    /// there lends its read and search bits, a live file its read bits (search where read
    /// is given, so that its versions can be reached by whoever can read it); with nothing
    /// live there, 0555 and the root's owner (its files carry their own owners).
    fn dir_perm(&self, path: &[u8]) -> (u32, u32, u32) {
        let tree = self.tree.read();
        let mut ino = Some(ROOT);
        if !path.is_empty() {
            for name in path.split(|&b| b == b'/') {
                ino = ino.and_then(|i| tree.child(i, name).ok().flatten());
            }
        }
        match ino.and_then(|i| tree.get(i).ok()) {
            Some(n) if n.kind == Kind::Dir => (n.attrs.mode & 0o555, n.attrs.uid, n.attrs.gid),
            Some(n) => {
                let r = n.attrs.mode & 0o444;
                (r | (r >> 2), n.attrs.uid, n.attrs.gid)
            }
            None => {
                let root = tree.get(ROOT).map(|n| n.attrs);
                root.map_or((0o555, 0, 0), |a| (0o555, a.uid, a.gid))
            }
        }
    }

    /// Content and version id of a history file view.
    pub(super) fn history_content(&self, view: View) -> Result<(ContentRef, i64)> {
        let v = match view {
            View::Version(id) => self.store.version(id as i64)?,
            View::Archived(fid) => self
                .store
                .versions(fid as i64)?
                .pop()
                .ok_or_else(|| Error::new(libc::ENOENT, "no version"))?,
            View::CheckpointFile(id) => return self.checkpoint_content(id),
            _ => return Err(Error::new(libc::EISDIR, "is a directory")),
        };
        Ok((v.content, v.id))
    }
}
