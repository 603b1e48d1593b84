//! Serving `.checkpoints/NAME/` (issue 14; docs/views.md, docs/checkpoints.md): each
//! checkpoint's whole tree as it was, read-only, with the provenance attributes of the
//! versions that were current then. `.checkpoints` resolves but is not listed (like
//! `.history`); listing it gives the checkpoints' names. A node is registered by
//! (checkpoint, inode) for the life of the mount; a checkpoint's tree is computed once
//! ([`crate::store::Store::snapshot`]) and kept while it is among the last few used.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Attr, DirEntry, Fs, ROOT};
use crate::checkpoint::{SnapNode, Snapshot, snapshot};
use crate::error::{Error, Result};
use crate::store::{ContentRef, Kind};
use crate::views::View;

/// Checkpoint trees kept in memory.
const TREES_KEPT: usize = 4;

/// The registered nodes of checkpoint trees and the trees computed last.
#[derive(Default)]
pub struct CheckpointViews {
    /// `(checkpoints.id, inode in its tree)` by registered id (id `i` at index `i - 1`).
    keys: Vec<(i64, u64)>,
    ids: HashMap<(i64, u64), u64>,
    /// Trees by checkpoint id, with the use that last touched them.
    trees: HashMap<i64, (u64, Arc<Snapshot>)>,
    uses: u64,
}

impl CheckpointViews {
    fn id(&mut self, key: (i64, u64)) -> u64 {
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        self.keys.push(key);
        let id = self.keys.len() as u64;
        self.ids.insert(key, id);
        id
    }

    fn key(&self, id: u64) -> Option<(i64, u64)> {
        id.checked_sub(1)
            .and_then(|i| self.keys.get(i as usize))
            .copied()
    }
}

/// The registry of a mount.
pub type Registry = crate::sync::Mutex<CheckpointViews>;

/// The refusal to serve a file whose content at a point gc forgot: `ENODATA` ("No data
/// available"), never another version's bytes.
pub(super) fn forgotten_by_gc(path: &str) -> Error {
    Error::new(
        libc::ENODATA,
        format!("{path}: its version at that point was forgotten by gc"),
    )
}

fn gone() -> Error {
    Error::new(libc::ENOENT, "checkpoint node gone")
}

impl Fs {
    /// The tree of checkpoint `cp_id`.
    fn checkpoint_tree(&self, cp_id: i64) -> Result<Arc<Snapshot>> {
        {
            let mut reg = self.views.checkpoints.lock();
            reg.uses += 1;
            let now = reg.uses;
            if let Some(entry) = reg.trees.get_mut(&cp_id) {
                entry.0 = now;
                return Ok(entry.1.clone());
            }
        }
        // A dropped checkpoint's registered nodes still resolve (its tree is history).
        let point = self.store.checkpoint_point(cp_id)?.ok_or_else(gone)?;
        let tree = Arc::new(self.store.snapshot(point)?);
        let mut reg = self.views.checkpoints.lock();
        if reg.trees.len() >= TREES_KEPT
            && let Some((&oldest, _)) = reg.trees.iter().min_by_key(|(_, (used, _))| *used)
        {
            reg.trees.remove(&oldest);
        }
        let now = reg.uses;
        reg.trees.insert(cp_id, (now, tree.clone()));
        Ok(tree)
    }

    /// The node a registered id names, with its tree.
    fn checkpoint_node(&self, id: u64) -> Result<(i64, Arc<Snapshot>, u64)> {
        let (cp, ino) = self.views.checkpoints.lock().key(id).ok_or_else(gone)?;
        let tree = self.checkpoint_tree(cp)?;
        if tree.get(ino).is_none() {
            return Err(gone());
        }
        Ok((cp, tree, ino))
    }

    fn register(&self, cp: i64, n: &SnapNode) -> View {
        let id = self.views.checkpoints.lock().id((cp, n.ino));
        if n.kind == Kind::Dir {
            View::CheckpointDir(id)
        } else {
            View::CheckpointFile(id)
        }
    }

    /// The child `name` of a `.checkpoints` directory: a checkpoint by name under
    /// `.checkpoints`, else the node of the checkpoint's tree.
    pub(super) fn checkpoint_child(&self, dir: u64, name: &[u8]) -> Result<Option<View>> {
        if dir == 0 {
            let Ok(name) = std::str::from_utf8(name) else {
                return Ok(None);
            };
            // Its tree is computed when something under it is asked for, not here (a
            // listing of `.checkpoints` looks every name up).
            let Some(cp) = self.store.checkpoint_named(name)? else {
                return Ok(None);
            };
            let id = self.views.checkpoints.lock().id((cp.id, snapshot::ROOT));
            return Ok(Some(View::CheckpointDir(id)));
        }
        let (cp, tree, ino) = self.checkpoint_node(dir)?;
        Ok(tree.child(ino, name).map(|n| self.register(cp, n)))
    }

    /// Entries of a `.checkpoints` directory, by name; cookies are positions + 1.
    pub(super) fn checkpoint_readdir(&self, dir: u64, offset: u64) -> Result<Vec<DirEntry>> {
        let me = View::CheckpointDir(dir).ino();
        let mut entries: Vec<(Vec<u8>, u64, Kind)> = vec![
            (b".".to_vec(), me, Kind::Dir),
            (b"..".to_vec(), ROOT, Kind::Dir),
        ];
        if dir == 0 {
            let mut cps = self.store.checkpoints()?;
            cps.sort_by(|a, b| a.name.cmp(&b.name));
            for cp in cps {
                let id = self.views.checkpoints.lock().id((cp.id, snapshot::ROOT));
                entries.push((
                    cp.name.into_bytes(),
                    View::CheckpointDir(id).ino(),
                    Kind::Dir,
                ));
            }
        } else {
            let (cp, tree, ino) = self.checkpoint_node(dir)?;
            for n in tree.children(ino) {
                entries.push((n.name.clone(), self.register(cp, n).ino(), n.kind));
            }
        }
        Ok(entries
            .into_iter()
            .enumerate()
            .filter(|(i, _)| *i as u64 + 1 > offset)
            .map(|(i, (name, ino, kind))| DirEntry {
                ino,
                next_offset: i as u64 + 1,
                kind,
                name,
            })
            .collect())
    }

    /// Attributes of a `.checkpoints` view: `.checkpoints` is 0555 and the root's owner's;
    /// a node of a checkpoint's tree has the owner it had then and its read (and, for a
    /// directory, search) bits then; a file its version's size and time.
    pub(super) fn checkpoint_attr(&self, view: View) -> Result<Attr> {
        let root = self.tree.read().get(ROOT)?.attrs;
        let (kind, size, t, (mode, uid, gid)) = match view {
            View::CheckpointDir(0) => (Kind::Dir, 0, root.mtime_ns, (0o555, root.uid, root.gid)),
            View::CheckpointDir(id)
                if self
                    .views
                    .checkpoints
                    .lock()
                    .key(id)
                    .is_some_and(|k| k.1 == snapshot::ROOT) =>
            {
                // `.checkpoints/NAME` itself, without computing its tree: the live root's
                // owner and read and search bits, the checkpoint's time.
                let (cp, _) = self.views.checkpoints.lock().key(id).ok_or_else(gone)?;
                let point = self.store.checkpoint_point(cp)?.ok_or_else(gone)?;
                (
                    Kind::Dir,
                    0,
                    point.time_ns,
                    (root.mode & 0o555, root.uid, root.gid),
                )
            }
            View::CheckpointDir(id) | View::CheckpointFile(id) => {
                let (_, tree, ino) = self.checkpoint_node(id)?;
                let n = tree.get(ino).ok_or_else(gone)?;
                let t = n.version.as_ref().map_or(n.changed_ns, |v| v.time_ns);
                let bits = if n.kind == Kind::Dir { 0o555 } else { 0o444 };
                (n.kind, n.size(), t, (n.mode & bits, n.uid, n.gid))
            }
            _ => return Err(Error::new(libc::EINVAL, "not a checkpoint view")),
        };
        let nlink = if kind == Kind::Dir { 2 } else { 1 };
        Ok(super::serve_history::view_attr(
            view,
            kind,
            size,
            t,
            (mode, uid, gid),
            nlink,
            false,
        ))
    }

    /// Content and version id of a file of a checkpoint's tree (id 0: it had no version,
    /// it was empty).
    pub(super) fn checkpoint_content(&self, id: u64) -> Result<(ContentRef, i64)> {
        let (_, tree, ino) = self.checkpoint_node(id)?;
        let n = tree.get(ino).ok_or_else(gone)?;
        if n.forgotten {
            return Err(forgotten_by_gc(&tree.path(ino)));
        }
        Ok((n.content(), n.version.as_ref().map_or(0, |v| v.id)))
    }
}
