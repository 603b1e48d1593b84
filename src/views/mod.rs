//! Read-only views synthesized from the store (SPEC §7): `MANIFEST` at the root,
//! `<file>.outline` beside every regular file, and the history trees `.history/<path>/<N>`
//! (every version of every file, deleted ones included, following renames) and
//! `.archive/<path>` (the last content of every deleted file). Views have inode numbers of their own
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
/// Set, with [`VIEW_BIT`], in the inode of a directory of `.history` (low bits: its id).
pub const HISTORY_DIR_BIT: u64 = 1 << 60;
/// Set, with [`VIEW_BIT`], in the inode of a directory of `.archive` (low bits: its id).
pub const ARCHIVE_DIR_BIT: u64 = 1 << 59;
/// Set, with [`VIEW_BIT`], in the inode of `.history/<path>/<N>` (low bits: `versions.id`).
pub const VERSION_BIT: u64 = 1 << 58;
/// Set, with [`VIEW_BIT`], in the inode of `.archive/<path>` (low bits: `files.id`).
pub const ARCHIVED_BIT: u64 = 1 << 57;
/// Inode of `MANIFEST`.
pub const MANIFEST_INO: u64 = VIEW_BIT | 1;
/// Name of the history tree at the root.
pub const HISTORY: &[u8] = b".history";
/// Name of the archive tree at the root.
pub const ARCHIVE: &[u8] = b".archive";
/// Width of the zero-padded version names in `.history/<path>/` (`000003`), so that
/// `ls` lists them in numeric order; any decimal form (`3`) resolves too.
pub const VERSION_NAME_WIDTH: usize = 6;
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
    /// A directory of `.history`; id 0 is `.history` itself.
    HistoryDir(u64),
    /// A directory of `.archive`; id 0 is `.archive` itself.
    ArchiveDir(u64),
    /// One version (`versions.id`) under `.history`.
    Version(u64),
    /// The last content of a deleted file (`files.id`) under `.archive`.
    Archived(u64),
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
        } else if ino & HISTORY_DIR_BIT != 0 {
            Some(View::HistoryDir(ino & !(VIEW_BIT | HISTORY_DIR_BIT)))
        } else if ino & ARCHIVE_DIR_BIT != 0 {
            Some(View::ArchiveDir(ino & !(VIEW_BIT | ARCHIVE_DIR_BIT)))
        } else if ino & VERSION_BIT != 0 {
            Some(View::Version(ino & !(VIEW_BIT | VERSION_BIT)))
        } else if ino & ARCHIVED_BIT != 0 {
            Some(View::Archived(ino & !(VIEW_BIT | ARCHIVED_BIT)))
        } else {
            None
        }
    }

    /// Whether it is a directory.
    pub fn is_dir(self) -> bool {
        matches!(self, View::HistoryDir(_) | View::ArchiveDir(_))
    }

    /// Its inode number.
    pub fn ino(self) -> u64 {
        match self {
            View::Manifest => MANIFEST_INO,
            View::Outline(target) => VIEW_BIT | OUTLINE_BIT | target,
            View::HistoryDir(id) => VIEW_BIT | HISTORY_DIR_BIT | id,
            View::ArchiveDir(id) => VIEW_BIT | ARCHIVE_DIR_BIT | id,
            View::Version(id) => VIEW_BIT | VERSION_BIT | id,
            View::Archived(id) => VIEW_BIT | ARCHIVED_BIT | id,
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
