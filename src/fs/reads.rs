//! Read provenance in the core (issue 13; [`crate::lineage`]): an `open` for reading
//! notes the version the process got ([`Fs::mark_read`]), in the process's read log and as
//! the file's last read (MANIFEST's `read` column); a commit records the process's reads
//! as the new version's inputs, and a handle opened write-only takes the version the
//! process last read of the file as the base of its lost-update check
//! ([`Fs::read_before`]). What counts as a read:
//! docs/SEMANTICS.md "Lineage".

use super::tree::{Node, ReadMark};
use super::{Fs, now_ns};
use crate::identity::Caller;
use crate::lineage::ProcessKey;
use crate::store::{Input, LastRead};

/// A read noted by [`Fs::mark_read`], for [`Fs::store_read`].
pub(super) struct StoredRead {
    file_id: i64,
    id: i64,
    number: i64,
    time_ns: i64,
    /// The last read changed: write it.
    store: bool,
}

/// A file's last read is written to the store when the version read changes, when the
/// reader changes (at most once a second, [`READ_MARK_MIN_NS`]), and else at most once a
/// minute (60 s, in ns): `cat plan.md` in a loop writes one row, and readers taking turns
/// one a second; what the store holds may lag that much behind MANIFEST.
pub const READ_MARK_REFRESH_NS: i64 = 60_000_000_000;

/// The least time between two writes of one file's last read for the same version
/// (1 s, in ns).
pub const READ_MARK_MIN_NS: i64 = 1_000_000_000;

impl Fs {
    /// Notes that `caller` opened the file `n` for reading (a file with a version; one
    /// without has nothing to read yet), with the tree locked: in its process's read log,
    /// and as the file's last read. Returns what [`Fs::store_read`] must write once the
    /// lock is let go: the lineage, version id and number, when the last read changed
    /// ([`READ_MARK_REFRESH_NS`]).
    pub(super) fn mark_read(&self, n: &mut Node, caller: &Caller) -> Option<StoredRead> {
        if self.gate.read_only {
            // A mount of the past (mount --at) writes nothing, reads included.
            return None;
        }
        let key = ProcessKey::of(caller)?;
        let (file_id, head) = (n.file_id?, n.head.as_ref()?);
        let (id, number) = (head.id, head.number);
        let now = now_ns();
        self.reads.note_read(key, file_id, id, now);
        let stored_ns = match &n.last_read {
            Some(m)
                if m.read.version == number
                    && (now - m.stored_ns < READ_MARK_MIN_NS
                        || (*m.read.writer == *caller.writer
                            && now - m.stored_ns < READ_MARK_REFRESH_NS)) =>
            {
                m.stored_ns
            }
            _ => now,
        };
        n.last_read = Some(Box::new(ReadMark {
            read: LastRead {
                version: number,
                writer: caller.writer.as_str().into(),
                time_ns: now,
            },
            stored_ns,
        }));
        Some(StoredRead {
            file_id,
            id,
            number,
            time_ns: now,
            store: stored_ns == now,
        })
    }

    /// After [`Fs::mark_read`] of `ino`, with no lock held: writes the last read to the
    /// store when it changed, and tells MANIFEST.
    ///
    /// A read of a caller the pad's quota binds is not written while the pad is at its
    /// quota and the read would add its process's row ([`Fs::process_row_fits`]); the
    /// file's mark then says nothing was stored, so the next reader's read is (before, the
    /// agent's unwritten read kept root's read a second later from the store, attack
    /// round of session 34).
    pub(super) fn store_read(&self, ino: u64, caller: &Caller, r: StoredRead) {
        if r.store {
            match self.process_row_fits(caller) {
                Some(_hold) => {
                    if let Err(e) = self
                        .store
                        .note_read(r.file_id, r.id, r.number, caller, r.time_ns)
                    {
                        log::warn!("noting a read of inode {ino}: {e}");
                    }
                }
                None => {
                    let mut tree = self.tree.write();
                    if let Some(m) = tree
                        .nodes
                        .get_mut(&ino)
                        .and_then(|n| n.last_read.as_mut())
                        .filter(|m| m.stored_ns == r.time_ns)
                    {
                        m.stored_ns = 0;
                    }
                }
            }
        }
        self.views.changed(&[ino]);
    }

    /// Notes that `caller` opened version `id` (`versions.id`) under `.history` or
    /// `.archive` for reading: a read of that version (`cp .history/f/3 g` makes `g` from
    /// `f`'s version 3), not of the live file.
    pub(super) fn note_version_read(&self, id: i64, caller: &Caller) {
        let Some(key) = ProcessKey::of(caller) else {
            return;
        };
        match self.store.version_lineage(id) {
            Ok(file_id) => self.reads.note_input(key, file_id, id, now_ns()),
            Err(e) => log::warn!("noting a read of version {id}: {e}"),
        }
    }

    /// The inputs of a commit by `caller`: the versions its process read (at most
    /// [`crate::lineage::READS_PER_PROCESS`]).
    pub(super) fn inputs_of(&self, caller: &Caller) -> Vec<Input> {
        ProcessKey::of(caller).map_or_else(Vec::new, |k| self.reads.inputs(k))
    }

    /// After `caller` committed version `id` of lineage `file_id`: its process knows it.
    pub(super) fn note_write(&self, caller: &Caller, file_id: i64, id: i64) {
        if let Some(k) = ProcessKey::of(caller) {
            self.reads.note_write(k, file_id, id);
        }
    }

    /// Whether `caller` is a shell (bash, sh, dash, zsh, ksh, mksh, ash, fish, busybox, by
    /// its executable's name): its `>` redirections are not checked for lost updates
    /// across opens, because shells do not report an error of `close(2)` on a
    /// redirection (bash's `echo c > f` exits 0 whatever close says), so a refusal there
    /// would lose the write without a word (docs/SEMANTICS.md "Lineage").
    pub(super) fn is_shell(caller: &Caller) -> bool {
        const SHELLS: &[&str] = &[
            "bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "fish", "busybox",
        ];
        let name = caller.exe.rsplit('/').next().unwrap_or_default();
        SHELLS.contains(&name)
    }

    /// The version of `ino`'s lineage `caller`'s process last read (or committed after
    /// reading it), if it read it: [`super::handle::WriteState::read_before`] of a handle
    /// it opens write-only.
    pub(super) fn read_before(&self, ino: u64, caller: &Caller) -> Option<i64> {
        let key = ProcessKey::of(caller)?;
        let file_id = self.tree.read().nodes.get(&ino).and_then(|n| n.file_id)?;
        self.reads.known(key, file_id)
    }
}
