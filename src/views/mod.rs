//! Read-only views synthesized from the store (SPEC §7): `MANIFEST` at the root and
//! `<file>.outline` beside every regular file. Views have inode numbers of their own
//! (with [`VIEW_BIT`] set), mode 0444, a content snapshot taken at open, direct I/O and a
//! zero attribute TTL, so they are never stale (FUSE-TRAPS §1). Writes to them are refused
//! with `EACCES`, and their names are reserved (SPEC §3).

pub mod manifest;
pub mod outline;

use crate::fs::ROOT;

/// Set in the inode number of every view.
pub const VIEW_BIT: u64 = 1 << 62;
/// Set, with [`VIEW_BIT`], in the inode number of an outline; the low bits are the
/// inode of the file it describes.
pub const OUTLINE_BIT: u64 = 1 << 61;
/// Inode of `MANIFEST`.
pub const MANIFEST_INO: u64 = VIEW_BIT | 1;
/// Name of the manifest at the root.
pub const MANIFEST: &[u8] = b"MANIFEST";
/// Suffix of outline names.
pub const OUTLINE_SUFFIX: &[u8] = b".outline";
/// Names reserved at the root for the history views.
pub const HISTORY_NAMES: &[&[u8]] = &[b".history", b".archive"];

/// A view inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// `MANIFEST`.
    Manifest,
    /// The outline of the file with this inode.
    Outline(u64),
}

impl View {
    /// The view an inode number denotes, if any.
    pub fn of(ino: u64) -> Option<View> {
        if ino & VIEW_BIT == 0 {
            None
        } else if ino == MANIFEST_INO {
            Some(View::Manifest)
        } else if ino & OUTLINE_BIT != 0 {
            Some(View::Outline(ino & !(VIEW_BIT | OUTLINE_BIT)))
        } else {
            None
        }
    }

    /// Its inode number.
    pub fn ino(self) -> u64 {
        match self {
            View::Manifest => MANIFEST_INO,
            View::Outline(target) => VIEW_BIT | OUTLINE_BIT | target,
        }
    }
}

/// For `<name>.outline`, the name of the file it describes.
pub fn outline_target(name: &[u8]) -> Option<&[u8]> {
    name.strip_suffix(OUTLINE_SUFFIX).filter(|n| !n.is_empty())
}

/// Whether `name` in directory `parent` is reserved for a view (SPEC §3): `MANIFEST`,
/// `.history` and `.archive` at the root, and any name ending in `.outline`.
pub fn is_reserved(parent: u64, name: &[u8]) -> bool {
    (parent == ROOT && (name == MANIFEST || HISTORY_NAMES.contains(&name)))
        || name.ends_with(OUTLINE_SUFFIX)
}
