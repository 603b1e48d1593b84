//! MANIFEST's rows, kept between renderings (issue 11: rendering after a change stays
//! cheap at 100,000 files). A change names the inodes it touched
//! ([`super::serve_views::ViewState::changed`]); the next rendering brings only their
//! rows up to date, instead of reading every inode again. The first rendering, and any
//! after a change that could touch many rows at once, walk the whole tree
//! (`Fs::build_rows`, serve_views.rs).
//!
//! Pure bookkeeping: no tree, no store, no policy.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::views::manifest;

/// A hash builder for inode numbers: FxHash's multiply and rotate, many times faster than
/// SipHash (MANIFEST maps every file's directory).
pub(super) type FxBuild = std::hash::BuildHasherDefault<Fx>;
/// A hash map keyed by inode numbers.
pub(super) type FxMap<K, V> = HashMap<K, V, FxBuild>;

/// FxHash (rustc's): enough for inode numbers.
#[derive(Default)]
pub(super) struct Fx(u64);

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
pub(super) fn mix(h: u64, n: u64) -> u64 {
    (h.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95)
}

/// More inodes touched than this between two renderings: the next one walks the tree
/// (4,096; a walk costs about what this many single updates do).
pub(super) const TOUCHED_MAX: usize = 4096;

/// The inodes changed since MANIFEST's rows were last brought up to date.
#[derive(Default)]
pub(super) struct Touched {
    /// The inodes (a file's content or place, a directory's name or place, a creation
    /// or a removal), in no order, possibly repeated.
    pub(super) inos: Vec<u64>,
    /// Too many, or a change that names none: the next rendering walks the tree.
    pub(super) all: bool,
}

impl Touched {
    /// Adds `inos`; past [`TOUCHED_MAX`], the next rendering walks the tree.
    pub(super) fn add(&mut self, inos: &[u64]) {
        if self.all {
            return;
        }
        self.inos.extend_from_slice(inos);
        if self.inos.len() > TOUCHED_MAX {
            self.all = true;
            self.inos = Vec::new();
        }
    }
}

/// What one inode is for MANIFEST, as the tree has it now.
pub(super) enum Seen {
    /// Gone, an orphan, or a file without a version yet: no row.
    Nothing,
    /// A directory other than the root: its parent inode and name.
    Dir(u64, Arc<[u8]>),
    /// A temporary ([`crate::views::ephemeral`], or the rules' `ephemeral` globs):
    /// counted, not listed.
    Temporary,
    /// A file to list, in directory `parent` (its `dir` is set here).
    File(u64, manifest::File),
}

/// MANIFEST's rows: every live file with a version (the temporaries counted apart) and
/// every directory, indexed by inode.
#[derive(Default)]
pub(super) struct Rows {
    /// The files to list, in no order; `File::dir` is an index in `dirs`.
    pub(super) files: Vec<manifest::File>,
    /// Per file row (same index): its inode and its directory's inode.
    inos: Vec<u64>,
    parents: Vec<u64>,
    /// Row index by inode.
    at: FxMap<u64, usize>,
    /// The live temporaries, by inode.
    temporaries: HashSet<u64, FxBuild>,
    /// The directories but the root, by inode: parent inode and name.
    dir_nodes: FxMap<u64, (u64, Arc<[u8]>)>,
    /// The directories in [`manifest::Input::dirs`] order (the root first, parents before
    /// children), and each one's index there by inode.
    pub(super) dirs: Vec<manifest::Dir>,
    index: FxMap<u64, usize>,
    /// A directory came, went or moved since `dirs` was built.
    dirs_stale: bool,
}

impl Rows {
    /// How many live temporaries MANIFEST leaves out.
    pub(super) fn temporaries(&self) -> usize {
        self.temporaries.len()
    }

    /// The inode of each directory of [`Rows::dirs`], in that order (the root first).
    pub(super) fn dir_inos(&self) -> Vec<u64> {
        let mut inos = vec![0; self.dirs.len()];
        for (&ino, &i) in &self.index {
            if let Some(slot) = inos.get_mut(i) {
                *slot = ino;
            }
        }
        inos
    }

    /// The rows whose directory `closed` (by index in [`Rows::dirs`]) does not mark, and
    /// how many it does.
    pub(super) fn files_outside(&self, closed: &[bool]) -> (Vec<manifest::File>, usize) {
        let kept: Vec<manifest::File> = self
            .files
            .iter()
            .filter(|f| !closed.get(f.dir).copied().unwrap_or(false))
            .cloned()
            .collect();
        let hidden = self.files.len() - kept.len();
        (kept, hidden)
    }

    /// Brings inode `ino`'s row up to date with what the tree has (`seen`). Returns
    /// `false` when that needs a walk of the tree instead: a directory whose path
    /// changed while `paths_matter` (the rules' globs judge its files by path).
    pub(super) fn update(&mut self, ino: u64, seen: Seen, paths_matter: bool) -> bool {
        if !matches!(seen, Seen::Dir(..))
            && let Some(_) = self.dir_nodes.remove(&ino)
        {
            self.dirs_stale = true;
        }
        if !matches!(seen, Seen::Temporary) {
            self.temporaries.remove(&ino);
        }
        if !matches!(seen, Seen::File(..)) {
            self.remove_file(ino);
        }
        match seen {
            Seen::Nothing => {}
            Seen::Dir(parent, name) => {
                let moved = match self.dir_nodes.get(&ino) {
                    Some((p, n)) if *p == parent && **n == *name => false,
                    Some(_) if paths_matter => return false,
                    _ => true,
                };
                if moved {
                    self.dir_nodes.insert(ino, (parent, name));
                    self.dirs_stale = true;
                }
            }
            Seen::Temporary => {
                self.temporaries.insert(ino);
            }
            Seen::File(parent, mut file) => {
                file.dir = self.index.get(&parent).copied().unwrap_or(usize::MAX);
                if file.dir == usize::MAX {
                    self.dirs_stale = true;
                }
                match self.at.get(&ino) {
                    Some(&i) => {
                        self.files[i] = file;
                        self.parents[i] = parent;
                    }
                    None => {
                        self.at.insert(ino, self.files.len());
                        self.files.push(file);
                        self.inos.push(ino);
                        self.parents.push(parent);
                    }
                }
            }
        }
        true
    }

    fn remove_file(&mut self, ino: u64) {
        let Some(i) = self.at.remove(&ino) else {
            return;
        };
        self.files.swap_remove(i);
        self.inos.swap_remove(i);
        self.parents.swap_remove(i);
        if let Some(&moved) = self.inos.get(i) {
            self.at.insert(moved, i);
        }
    }

    /// Builds [`Rows::dirs`] again if a directory changed, and points every file at its
    /// directory's new index. A file whose directory is not reachable from the root gets
    /// no row (as in a walk of the tree).
    pub(super) fn index_dirs(&mut self, root: u64) {
        if !self.dirs_stale {
            return;
        }
        self.dirs_stale = false;
        let depth = |mut ino: u64| {
            let mut d = 0usize;
            while ino != root && d <= self.dir_nodes.len() {
                ino = self.dir_nodes.get(&ino).map_or(root, |(p, _)| *p);
                d += 1;
            }
            d
        };
        let mut order: Vec<(usize, u64)> = self
            .dir_nodes
            .keys()
            .map(|&ino| (depth(ino), ino))
            .collect();
        order.sort_unstable();
        self.index.clear();
        self.index.insert(root, 0);
        self.dirs.clear();
        self.dirs.push(manifest::Dir {
            parent: 0,
            name: String::new(),
        });
        for (_, ino) in order {
            let (parent, name) = &self.dir_nodes[&ino];
            let Some(&p) = self.index.get(parent) else {
                continue;
            };
            self.index.insert(ino, self.dirs.len());
            self.dirs.push(manifest::Dir {
                parent: p,
                name: crate::store::paths::encode(name).into_owned(),
            });
        }
        let mut i = 0;
        while i < self.files.len() {
            match self.index.get(&self.parents[i]) {
                Some(&d) => {
                    self.files[i].dir = d;
                    i += 1;
                }
                None => {
                    let ino = self.inos[i];
                    self.remove_file(ino);
                }
            }
        }
    }

    /// Rows from a walk of the tree: the files (`File::dir` unset) with their inode and
    /// directory inode, the temporaries, and the directories but the root.
    pub(super) fn from_walk(
        files: Vec<(u64, u64, manifest::File)>,
        temporaries: Vec<u64>,
        dirs: Vec<(u64, u64, Arc<[u8]>)>,
    ) -> Rows {
        let mut rows = Rows {
            dirs_stale: true,
            ..Rows::default()
        };
        rows.files.reserve_exact(files.len());
        rows.inos.reserve_exact(files.len());
        rows.parents.reserve_exact(files.len());
        rows.at.reserve(files.len());
        for (ino, parent, file) in files {
            rows.at.insert(ino, rows.files.len());
            rows.files.push(file);
            rows.inos.push(ino);
            rows.parents.push(parent);
        }
        rows.temporaries.extend(temporaries);
        rows.dir_nodes
            .extend(dirs.into_iter().map(|(ino, p, name)| (ino, (p, name))));
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, bytes: u64) -> manifest::File {
        manifest::File {
            dir: 0,
            name: manifest::Name::Raw(name.as_bytes().into()),
            pinned: false,
            bytes,
            version: 1,
            writer: "w".into(),
            time_ns: 0,
            binary: false,
            read: None,
            step: None,
        }
    }

    fn listing(rows: &Rows) -> Vec<String> {
        let mut out: Vec<String> = rows
            .files
            .iter()
            .map(|f| {
                let mut d = f.dir;
                let mut path = f.name.stored().into_owned();
                while d != 0 {
                    path = format!("{}/{path}", rows.dirs[d].name);
                    d = rows.dirs[d].parent;
                }
                format!("{path} {}", f.bytes)
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn updates_follow_creates_moves_and_removals() {
        let mut rows = Rows::from_walk(
            vec![(10, 1, file("a", 1)), (11, 2, file("b", 2))],
            vec![12],
            vec![(2, 1, b"d".as_slice().into())],
        );
        rows.index_dirs(1);
        assert_eq!(listing(&rows), ["a 1", "d/b 2"]);
        assert_eq!(rows.temporaries(), 1);
        // A commit, a new directory with a file, a removal, a temporary renamed to a
        // listed name, a directory renamed into another.
        assert!(rows.update(10, Seen::File(1, file("a", 5)), false));
        assert!(rows.update(3, Seen::Dir(1, b"e".as_slice().into()), false));
        assert!(rows.update(13, Seen::File(3, file("c", 3)), false));
        assert!(rows.update(11, Seen::Nothing, false));
        assert!(rows.update(12, Seen::File(1, file("t", 4)), false));
        assert!(rows.update(2, Seen::Dir(3, b"d".as_slice().into()), false));
        assert!(rows.update(14, Seen::File(2, file("f", 6)), false));
        rows.index_dirs(1);
        assert_eq!(listing(&rows), ["a 5", "e/c 3", "e/d/f 6", "t 4"]);
        assert_eq!(rows.temporaries(), 0);
        // With path globs, a directory's move needs a walk.
        assert!(!rows.update(3, Seen::Dir(1, b"g".as_slice().into()), true));
        // A directory removed: its files (none may be left, but should one be) go.
        assert!(rows.update(3, Seen::Nothing, false));
        rows.index_dirs(1);
        assert_eq!(listing(&rows), ["a 5", "t 4"]);
        assert_eq!(rows.at.len(), rows.files.len());
        for (i, ino) in rows.inos.iter().enumerate() {
            assert_eq!(rows.at[ino], i);
        }
    }
}
