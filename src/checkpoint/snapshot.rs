//! The tree at a [`super::Point`]: every node live then, with its place, owner, mode and
//! (files) the version that was its content. Built from the rows the store computes
//! (`tree_log` and `versions`, docs/schema.md "Checkpoints"); read-only.

use std::collections::{BTreeMap, HashMap};

use crate::store::{ContentRef, Kind, paths};

/// The version a file had at the point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapVersion {
    /// `versions.id`.
    pub id: i64,
    /// Its number in its lineage.
    pub number: i64,
    /// Its content.
    pub content: ContentRef,
    /// blake3 of the content, hex.
    pub blake3: String,
    /// Commit time, ns since the Unix epoch.
    pub time_ns: i64,
    /// Its writer (SPEC §5).
    pub writer: String,
    /// The writer's agent step, if it had one.
    pub step: Option<i64>,
}

/// One node of the tree at a point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapNode {
    /// `nodes.ino` (stable: the same node now, if it still exists).
    pub ino: u64,
    /// Parent inode; 0 for the root.
    pub parent: u64,
    /// Name in the parent, raw bytes (empty for the root).
    pub name: Vec<u8>,
    /// File or directory.
    pub kind: Kind,
    /// Permission bits.
    pub mode: u32,
    /// Owner uid.
    pub uid: u32,
    /// Owner gid.
    pub gid: u32,
    /// The file's lineage (`files.id`); `None` for a directory.
    pub file_id: Option<i64>,
    /// Versions of the lineage at or below this id belong to files that were on it before
    /// this one (`tree_log.floor`).
    pub floor: i64,
    /// When the node took this state (its `tree_log` row), ns.
    pub changed_ns: i64,
    /// The file's content then; `None`: empty (created, nothing committed yet), or a
    /// directory.
    pub version: Option<SnapVersion>,
    /// gc forgot the version that was its content then (`forgotten`): `version` is an
    /// older one, or none, and not what it held.
    pub forgotten: bool,
}

impl SnapNode {
    /// Content length in bytes (0 for a directory or a file with no version).
    pub fn size(&self) -> u64 {
        self.version.as_ref().map_or(0, |v| v.content.len)
    }

    /// The content reference (the empty stream when the file had no version).
    pub fn content(&self) -> ContentRef {
        self.version
            .as_ref()
            .map_or(ContentRef::default(), |v| v.content)
    }

    /// blake3 of the content, hex (that of no bytes for a file with no version).
    pub fn blake3(&self) -> String {
        match &self.version {
            Some(v) => v.blake3.clone(),
            None => blake3::hash(b"").to_hex().to_string(),
        }
    }
}

/// The whole tree at a point. Nodes not reachable from the root are left out.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    nodes: HashMap<u64, SnapNode>,
    children: HashMap<u64, BTreeMap<Vec<u8>, u64>>,
}

/// Inode of the root directory (`nodes.ino` 1).
pub const ROOT: u64 = 1;

impl Snapshot {
    /// Builds the tree from the store's rows (any order).
    pub fn from_nodes(rows: Vec<SnapNode>) -> Snapshot {
        let mut all: HashMap<u64, SnapNode> = rows.into_iter().map(|n| (n.ino, n)).collect();
        let mut by_parent: HashMap<u64, Vec<u64>> = HashMap::new();
        for n in all.values() {
            if n.ino != ROOT {
                by_parent.entry(n.parent).or_default().push(n.ino);
            }
        }
        let mut snap = Snapshot::default();
        let Some(root) = all.remove(&ROOT) else {
            return snap;
        };
        snap.nodes.insert(ROOT, root);
        let mut stack = vec![ROOT];
        while let Some(dir) = stack.pop() {
            let mut names = BTreeMap::new();
            for ino in by_parent.remove(&dir).unwrap_or_default() {
                if let Some(n) = all.remove(&ino) {
                    if n.kind == Kind::Dir {
                        stack.push(ino);
                    }
                    names.insert(n.name.clone(), ino);
                    snap.nodes.insert(ino, n);
                }
            }
            if snap.nodes.get(&dir).is_some_and(|n| n.kind == Kind::Dir) {
                snap.children.insert(dir, names);
            }
        }
        snap
    }

    /// The node with inode `ino`.
    pub fn get(&self, ino: u64) -> Option<&SnapNode> {
        self.nodes.get(&ino)
    }

    /// The child `name` of directory `parent`.
    pub fn child(&self, parent: u64, name: &[u8]) -> Option<&SnapNode> {
        self.children
            .get(&parent)
            .and_then(|c| c.get(name))
            .and_then(|ino| self.nodes.get(ino))
    }

    /// The children of directory `dir`, by name.
    pub fn children(&self, dir: u64) -> impl Iterator<Item = &SnapNode> {
        self.children
            .get(&dir)
            .into_iter()
            .flat_map(|c| c.values())
            .filter_map(|ino| self.nodes.get(ino))
    }

    /// Number of nodes (the root included).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there is no root (an empty store).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The path of `ino` as the store records paths ([`crate::store::paths::encode`] of
    /// each name, `/`-separated, no leading slash; `""` for the root).
    pub fn path(&self, ino: u64) -> String {
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

    /// The node at the exact bytes `path` (`/`-separated, relative to the root).
    pub fn lookup(&self, path: &[u8]) -> Option<&SnapNode> {
        let mut at = self.nodes.get(&ROOT)?;
        for part in path.split(|&b| b == b'/').filter(|p| !p.is_empty()) {
            at = self.child(at.ino, part)?;
        }
        Some(at)
    }

    /// Every node but the root with its stored path, parents before children, siblings
    /// by name.
    pub fn walk(&self) -> Vec<(String, &SnapNode)> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut stack: Vec<(u64, String)> = vec![(ROOT, String::new())];
        while let Some((dir, prefix)) = stack.pop() {
            let mut dirs = Vec::new();
            for n in self.children(dir) {
                let name = paths::encode(&n.name);
                let p = if prefix.is_empty() {
                    name.into_owned()
                } else {
                    format!("{prefix}/{name}")
                };
                if n.kind == Kind::Dir {
                    dirs.push((n.ino, p.clone()));
                }
                out.push((p, n));
            }
            // Depth first, in name order.
            stack.extend(dirs.into_iter().rev());
        }
        out
    }

    /// The stored paths of the files whose content then gc forgot.
    pub fn forgotten(&self) -> Vec<String> {
        self.walk()
            .into_iter()
            .filter(|(_, n)| n.forgotten)
            .map(|(p, _)| p)
            .collect()
    }

    /// Every file with its stored path, by path.
    pub fn files(&self) -> BTreeMap<String, &SnapNode> {
        self.walk()
            .into_iter()
            .filter(|(_, n)| n.kind == Kind::File)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ino: u64, parent: u64, name: &str, kind: Kind) -> SnapNode {
        SnapNode {
            ino,
            parent,
            name: name.as_bytes().to_vec(),
            kind,
            mode: 0o644,
            uid: 0,
            gid: 0,
            file_id: (kind == Kind::File).then_some(ino as i64),
            floor: 0,
            changed_ns: 0,
            version: None,
            forgotten: false,
        }
    }

    #[test]
    fn builds_paths_and_drops_the_unreachable() {
        let snap = Snapshot::from_nodes(vec![
            node(3, 2, "b.md", Kind::File),
            node(1, 0, "", Kind::Dir),
            node(2, 1, "notes", Kind::Dir),
            node(4, 1, "a.md", Kind::File),
            // Its parent is not in the tree at this point.
            node(9, 8, "orphan.md", Kind::File),
        ]);
        assert_eq!(snap.len(), 4);
        assert_eq!(snap.path(3), "notes/b.md");
        assert_eq!(snap.lookup(b"notes/b.md").map(|n| n.ino), Some(3));
        assert!(snap.lookup(b"orphan.md").is_none());
        let paths: Vec<String> = snap.walk().into_iter().map(|(p, _)| p).collect();
        assert_eq!(paths, ["a.md", "notes", "notes/b.md"]);
        assert_eq!(
            snap.files().keys().cloned().collect::<Vec<_>>(),
            ["a.md", "notes/b.md"]
        );
        assert!(Snapshot::from_nodes(vec![node(3, 2, "x", Kind::File)]).is_empty());
    }
}
