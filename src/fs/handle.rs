//! Open file handles. A read handle reads the version that was current at open (a
//! snapshot). A write handle works on a private copy (SPEC §4): the bytes it writes go to
//! a [`Spill`] buffer at their file offsets, and the ranges written are tracked, so the
//! private copy of a large file costs only what was written, never the whole file.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::error::Result;
use crate::identity::Caller;
use crate::store::ContentRef;

/// Bytes kept in memory before a write handle spills to an unlinked temporary file
/// (bounds the daemon's memory at 256 KiB per open write handle).
pub const SPILL_THRESHOLD: u64 = 256 << 10;

/// Bytes written through a handle, addressed by offset: in memory while small, then in an
/// unlinked temporary file (sparse, so a write at a large offset costs only its bytes).
pub enum Spill {
    /// `data[i]` is the byte at offset `i`.
    Mem(Vec<u8>),
    /// Temporary file in the spill directory (never under the mount, FUSE-TRAPS §16).
    File(File),
}

impl Spill {
    fn write_at(&mut self, dir: &Path, offset: u64, data: &[u8]) -> Result<()> {
        let end = offset + data.len() as u64;
        if let Spill::Mem(v) = self {
            if end <= SPILL_THRESHOLD {
                if v.len() < end as usize {
                    v.resize(end as usize, 0);
                }
                v[offset as usize..end as usize].copy_from_slice(data);
                return Ok(());
            }
            let f = tempfile::tempfile_in(dir)?;
            f.write_all_at(v, 0)?;
            *self = Spill::File(f);
        }
        if let Spill::File(f) = self {
            f.write_all_at(data, offset)?;
        }
        Ok(())
    }

    /// Fills `buf` with the bytes at `offset` (zeros where nothing was written).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        match self {
            Spill::Mem(v) => {
                let start = (offset as usize).min(v.len());
                let end = (offset as usize + buf.len()).min(v.len());
                buf[..end - start].copy_from_slice(&v[start..end]);
                buf[end - start..].fill(0);
                Ok(())
            }
            Spill::File(f) => {
                let mut done = 0;
                while done < buf.len() {
                    let n = f.read_at(&mut buf[done..], offset + done as u64)?;
                    if n == 0 {
                        buf[done..].fill(0);
                        break;
                    }
                    done += n;
                }
                Ok(())
            }
        }
    }

    fn truncate(&mut self, size: u64) -> Result<()> {
        match self {
            Spill::Mem(v) => v.truncate(size as usize),
            Spill::File(f) => f.set_len(size)?,
        }
        Ok(())
    }
}

/// Sorted, disjoint, non-adjacent `[start, end)` ranges.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RangeSet(pub Vec<(u64, u64)>);

impl RangeSet {
    /// Adds `[start, end)`, merging with overlapping or adjacent ranges.
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        let mut out = Vec::with_capacity(self.0.len() + 1);
        let mut placed = false;
        for &(a, b) in &self.0 {
            if b < s {
                out.push((a, b));
            } else if a > e {
                if !placed {
                    out.push((s, e));
                    placed = true;
                }
                out.push((a, b));
            } else {
                s = s.min(a);
                e = e.max(b);
            }
        }
        if !placed {
            out.push((s, e));
        }
        self.0 = out;
    }

    /// Whether `[start, end)` is inside one range (ranges are merged, so inside the
    /// set); an empty range is.
    pub fn covers(&self, start: u64, end: u64) -> bool {
        start >= end || self.0.iter().any(|&(s, e)| s <= start && end <= e)
    }

    /// Drops everything at or past `size`.
    pub fn clip(&mut self, size: u64) {
        self.0.retain(|&(s, _)| s < size);
        if let Some(last) = self.0.last_mut() {
            last.1 = last.1.min(size);
        }
    }

    /// Whether `offset` is inside a range, and the end of that range, or else the start
    /// of the next range (`u64::MAX` if none).
    pub fn locate(&self, offset: u64) -> (bool, u64) {
        for &(s, e) in &self.0 {
            if offset < s {
                return (false, s);
            }
            if offset < e {
                return (true, e);
            }
        }
        (false, u64::MAX)
    }
}

/// The private copy of a write handle.
pub struct WriteState {
    /// Opened with `O_APPEND`: the pending bytes go after whatever is current at commit.
    pub append: bool,
    /// Version id the copy is based on (the lost-update check, SPEC §4).
    pub base_version: i64,
    /// Content of that version.
    pub base: ContentRef,
    /// Bytes of `base` still visible (lowered by truncation).
    pub base_limit: u64,
    /// Size of the private copy in bytes (for append handles: pending bytes).
    pub size: u64,
    /// Ranges written since the last commit (file offsets; pending offsets when appending).
    pub dirty: RangeSet,
    /// The written bytes.
    pub spill: Spill,
    /// Anything to commit?
    pub modified: bool,
    /// Has the handle read or written anything? An untouched handle may be rebased
    /// silently when another commit lands, since it cannot have based anything on the
    /// old content.
    pub touched: bool,
    /// Op name for the next version: `write`, `append` or `truncate` (`truncate` only
    /// when the handle only truncated since its last commit).
    pub op: &'static str,
    /// Bytes were written since the last commit.
    pub wrote: bool,
    /// Set when a commit through this handle was refused as a lost update (`ESTALE`), or a
    /// write as certainly invalid content (`EINVAL`): every later write fails with the same
    /// errno and reason.
    pub poisoned: Option<crate::error::Error>,
    /// A commit of this handle was refused (content or writer, at a flush that may have
    /// been a forked child's close): every later flush returns the same error, so the
    /// process that wrote learns that nothing was saved (FUSE-TRAPS §5).
    pub refused: Option<crate::error::Error>,
    /// The only change is what the open did: the truncation asked for by `O_TRUNC`, or the
    /// creation of a file without a version. A flush of such a handle owes a commit instead
    /// of making one (see `Fs::flush`), so that the shell's `echo x > f` (whose dup2
    /// flushes before the write) records one version, not two.
    pub open_trunc_only: bool,
    /// For a handle opened without read access (`O_WRONLY`): the version of the file the
    /// process had last read (or committed) before this open, if it had read it
    /// (issue 13). A commit replacing the content checks for a lost update from it when
    /// it is older than `base_version`: read with one open, written with another.
    pub read_before: Option<i64>,
    /// Opened with `O_TRUNC` and neither read, written nor truncated since: a later
    /// version it follows ([`super::Fs`]'s `rebase_if_untouched`) is replaced whole, as
    /// the version it opened would have been, whether or not that one was empty (or the
    /// file had no version): docs/SEMANTICS.md, `O_TRUNC`.
    pub replaces: bool,
}

impl WriteState {
    /// A fresh private copy of `base` (version id `base_version`).
    pub fn new(append: bool, base_version: i64, base: ContentRef) -> Self {
        WriteState {
            append,
            base_version,
            base,
            base_limit: base.len,
            size: if append { 0 } else { base.len },
            dirty: RangeSet::default(),
            spill: Spill::Mem(Vec::new()),
            modified: false,
            touched: false,
            op: if append { "append" } else { "write" },
            wrote: false,
            poisoned: None,
            refused: None,
            open_trunc_only: false,
            read_before: None,
            replaces: false,
        }
    }

    /// The version a commit replacing the content is checked against (SPEC §6 lost
    /// update): the base this handle opened, or the older version the process had read
    /// before it opened ([`WriteState::read_before`]). Versions of one lineage have
    /// increasing ids.
    pub fn lost_update_base(&self) -> i64 {
        match self.read_before {
            Some(read) if read > 0 && read < self.base_version => read,
            _ => self.base_version,
        }
    }

    /// The version whose bytes a commit of this copy keeps, which the commit names as an
    /// input (docs/SEMANTICS.md "Lineage"): `base_version` when some of its bytes below
    /// `base_limit` were not overwritten (a `pwrite` through a write-only handle); `None`
    /// for an append (its bytes go after the current version's), a copy that keeps none
    /// (truncated to zero, or written over whole), or a base that is no version.
    pub fn kept_base(&self) -> Option<i64> {
        let keep_to = self.size.min(self.base_limit);
        (!self.append && self.base_version > 0 && !self.dirty.covers(0, keep_to))
            .then_some(self.base_version)
    }

    /// The private copy of a handle opened with `O_TRUNC`: empty, and owing a truncation
    /// if the base was not empty.
    pub fn new_truncated(base_version: i64, base: ContentRef) -> Self {
        let mut w = WriteState::new(false, base_version, base);
        w.replaces = true;
        if base.len > 0 {
            w.base_limit = 0;
            w.size = 0;
            w.modified = true;
            w.op = "truncate";
            w.open_trunc_only = true;
        }
        w
    }

    /// The handle of a `create` on a file without a version: it owes the first version
    /// (op `create`), committed at its release (or an earlier flush after a write, or
    /// before another open), like an `O_TRUNC`-only change.
    pub fn owe_create(&mut self) {
        self.modified = true;
        self.open_trunc_only = true;
        self.op = "create";
    }

    /// Whether the only thing this handle would commit is the first version its create
    /// owes ([`WriteState::owe_create`]): it has written nothing, so the file is, for it,
    /// a file whose current version is empty, and a version committed meanwhile by
    /// another handle, process or daemon is the one it follows (issue 31 item 5).
    pub fn owes_create_only(&self) -> bool {
        self.modified && self.open_trunc_only && self.op == "create"
    }

    /// Writes `data` at `offset` (ignored for append handles, which append in order).
    /// Returns the size of the private copy afterwards.
    pub fn write(&mut self, spill_dir: &Path, offset: u64, data: &[u8]) -> Result<u64> {
        let at = if self.append { self.size } else { offset };
        self.spill.write_at(spill_dir, at, data)?;
        let end = at + data.len() as u64;
        self.dirty.insert(at, end);
        self.size = self.size.max(end);
        self.modified = true;
        self.touched = true;
        self.wrote = true;
        self.open_trunc_only = false;
        self.replaces = false;
        if !self.append && self.op != "create" {
            self.op = "write";
        }
        Ok(self.size)
    }

    /// Truncates (or extends with zeros) the private copy to `size` bytes (ftruncate,
    /// or the setattr that follows an `O_TRUNC` open, FUSE-TRAPS §4).
    pub fn truncate(&mut self, size: u64) -> Result<()> {
        self.open_trunc_only = false;
        self.replaces = false;
        if !self.append && size == self.size && self.dirty.0.is_empty() && self.base_limit == size {
            // Nothing changes (e.g. ftruncate to the current size): not a modification.
            self.touched = true;
            return Ok(());
        }
        if self.append {
            // ftruncate on an O_APPEND handle truncates the file itself; model it as the
            // base limit so that the commit drops the tail.
            self.append = false;
            self.size = self.base.len;
            self.dirty = RangeSet::default();
            self.spill = Spill::Mem(Vec::new());
        }
        self.dirty.clip(size);
        self.spill.truncate(size)?;
        self.base_limit = self.base_limit.min(size);
        self.size = size;
        self.modified = true;
        self.touched = true;
        // `truncate` only when the handle only truncated: a write then an ftruncate (or
        // the other way round) is a `write`.
        if !self.wrote && self.op != "create" {
            self.op = "truncate";
        }
        Ok(())
    }

    /// After a successful commit: the new version is the base and nothing is pending.
    pub fn committed(&mut self, version: i64, content: ContentRef) {
        let poisoned = self.poisoned.take();
        *self = WriteState::new(self.append, version, content);
        self.touched = true;
        self.poisoned = poisoned;
    }
}

/// What a handle is for.
pub enum HandleKind {
    /// Reads the snapshot taken at open; `true` when it reads through the page cache.
    Read(ContentRef, bool),
    /// Reads a view's content, rendered at open.
    View(Arc<Vec<u8>>),
    /// A private copy that commits on flush, fsync and release.
    Write(WriteState),
}

/// An open file handle (FUSE `fh`).
pub struct Handle {
    /// The inode it was opened on (handles follow renames, FUSE-TRAPS §7).
    pub ino: u64,
    /// Who opened it: provenance is taken at open (SPEC §4).
    pub caller: Arc<Caller>,
    /// Read snapshot or private copy.
    pub kind: HandleKind,
    /// The handle of the `create` that made the file: a refusal of its first content
    /// leaves no file behind (issue 9).
    pub created: bool,
}

impl Handle {
    /// The stored content this handle reads: a reader's version, a writer's base (`None`
    /// for a view's rendered bytes).
    fn pin(&self) -> Option<ContentRef> {
        match &self.kind {
            HandleKind::Read(c, _) => Some(*c),
            HandleKind::Write(w) => Some(w.base),
            HandleKind::View(_) => None,
        }
    }
}

/// An open handle in the table of handles, with a copy of the content it reads
/// ([`Handle`]'s version or base) that is brought up to date whenever an operation on the
/// handle lets go of it: a gc (another daemon's, asking over PostgreSQL) learns what the
/// handle reads without waiting for the operation in progress (a commit of a large file
/// holds the handle for as long as it takes). During an operation the copy is what the
/// handle read when the operation began, which the operation may still read.
pub struct Slot {
    handle: crate::sync::Mutex<Handle>,
    pin: crate::sync::Mutex<Option<ContentRef>>,
}

impl Slot {
    /// A slot for `handle`.
    pub fn new(handle: Handle) -> Slot {
        Slot {
            pin: crate::sync::Mutex::new(handle.pin()),
            handle: crate::sync::Mutex::new(handle),
        }
    }

    /// The handle, locked for one operation.
    pub fn lock(&self) -> SlotGuard<'_> {
        SlotGuard {
            slot: self,
            handle: self.handle.lock(),
        }
    }

    /// The content the handle reads, as of the end of its last operation; never waits
    /// for one in progress.
    pub fn pin(&self) -> Option<ContentRef> {
        *self.pin.lock()
    }
}

/// A [`Slot`]'s handle while one operation holds it; letting go updates the slot's pin.
pub struct SlotGuard<'a> {
    slot: &'a Slot,
    handle: crate::sync::MutexGuard<'a, Handle>,
}

impl std::ops::Deref for SlotGuard<'_> {
    type Target = Handle;
    fn deref(&self) -> &Handle {
        &self.handle
    }
}

impl std::ops::DerefMut for SlotGuard<'_> {
    fn deref_mut(&mut self) -> &mut Handle {
        &mut self.handle
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        // Still holding the handle: the pin never runs ahead of it.
        *self.slot.pin.lock() = self.handle.pin();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_keeps_its_base_unless_written_over_whole_or_appended() {
        let base = ContentRef {
            stream: 3,
            len: 100,
        };
        let mut w = WriteState::new(false, 7, base);
        w.dirty.insert(0, 1);
        assert_eq!(w.kept_base(), Some(7), "one byte written over");
        w.dirty.insert(1, 100);
        assert_eq!(w.kept_base(), None, "written over whole");
        let mut w = WriteState::new(false, 7, base);
        w.base_limit = 40;
        w.size = 40;
        assert_eq!(w.kept_base(), Some(7), "truncated to 40");
        w.base_limit = 0;
        w.size = 10;
        w.dirty.insert(0, 10);
        assert_eq!(w.kept_base(), None, "truncated to zero, then written");
        assert_eq!(WriteState::new(true, 7, base).kept_base(), None, "append");
        assert_eq!(
            WriteState::new(false, 0, ContentRef::default()).kept_base(),
            None
        );
        let mut r = RangeSet::default();
        r.insert(5, 10);
        assert!(r.covers(5, 10) && r.covers(6, 9) && r.covers(3, 3));
        assert!(!r.covers(4, 10) && !r.covers(5, 11));
    }

    #[test]
    fn rangeset_merges_and_clips() {
        let mut r = RangeSet::default();
        r.insert(10, 20);
        r.insert(30, 40);
        r.insert(20, 25);
        assert_eq!(r.0, vec![(10, 25), (30, 40)]);
        r.insert(5, 35);
        assert_eq!(r.0, vec![(5, 40)]);
        r.clip(12);
        assert_eq!(r.0, vec![(5, 12)]);
        assert_eq!(r.locate(0), (false, 5));
        assert_eq!(r.locate(6), (true, 12));
        assert_eq!(r.locate(12), (false, u64::MAX));
    }

    #[test]
    fn spill_moves_to_a_file_past_the_threshold() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spill::Mem(Vec::new());
        s.write_at(dir.path(), 0, b"abc").unwrap();
        assert!(matches!(s, Spill::Mem(_)));
        s.write_at(dir.path(), SPILL_THRESHOLD * 3, b"xyz").unwrap();
        assert!(matches!(s, Spill::File(_)));
        let mut buf = [1u8; 3];
        s.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"abc");
        s.read_at(SPILL_THRESHOLD * 3, &mut buf).unwrap();
        assert_eq!(&buf, b"xyz");
        s.read_at(100, &mut buf).unwrap();
        assert_eq!(buf, [0, 0, 0]);
    }

    #[test]
    fn truncate_then_extend_reads_zeros_not_old_bytes() {
        let mut w = WriteState::new(
            false,
            1,
            ContentRef {
                stream: 1,
                len: 100,
            },
        );
        let dir = tempfile::tempdir().unwrap();
        w.write(dir.path(), 50, b"hello").unwrap();
        w.truncate(52).unwrap();
        assert_eq!(w.base_limit, 52);
        assert_eq!(w.dirty.0, vec![(50, 52)]);
        w.write(dir.path(), 60, b"x").unwrap();
        assert_eq!(w.size, 61);
        let mut b = [9u8; 3];
        w.spill.read_at(52, &mut b).unwrap();
        assert_eq!(b, [0, 0, 0]);
    }
}
