//! The text index kept for `search` (issue 33 item 4; the store's side is
//! [`crate::store::sql::text_index`]): before a search asks it, the core brings it up to
//! date with the versions the tree holds (the files whose current version is not the one
//! indexed are read and indexed, the files gone are dropped), so the cost is paid by the
//! search that follows a change, bounded by the bytes changed, and never by a commit.
//! The daemon remembers what the index holds (file id to version id, 16 bytes a file)
//! once a search has asked.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::Fs;
use crate::error::Result;
use crate::store::sql::text_index::TextEntry;
use crate::store::{ContentRef, Kind};

/// Largest text indexed as one row (64 KiB; a file, or the part of a version a history
/// search reads): a larger one is read by every search that asks the index, so that an
/// append to a large log re-indexes nothing. FTS5's cost of one row grows faster than
/// its size when the text has many distinct trigrams (random printable text: 64 KiB in
/// 37 ms, 1 MiB in 3.6 s, against 59 ms for 1 MiB of words), and the store's write lock
/// is held meanwhile (helper finding of session 24: a planted 1 MiB of random text held
/// every commit 4 to 10 s).
pub const INDEX_MAX: u64 = 64 << 10;

/// Most files changed since the index was last brought up to date that a search reads
/// whole (and indexes after); with more, it indexes them first and asks again.
const CHANGED_READ_WHOLE: usize = 256;

/// What one pass over the tree found ([`Fs::scan_for_text_index`]).
#[derive(Default)]
struct Scan {
    /// Live files whose current version is not the one indexed: (file id, version id,
    /// content).
    changed: Vec<(i64, i64, ContentRef)>,
    /// Indexed files no longer live: (file id, version id indexed).
    gone: Vec<(i64, i64)>,
    /// Inodes a search reads: the changed files and the indexed files the index named.
    candidates: Vec<u64>,
}

/// Bytes of text indexed in one store transaction, at most (plus one file), and files:
/// each transaction holds the store's write lock, which commits wait for, so a first
/// index of a large tree goes in short steps (at most about 0.2 s for text made to be
/// slow to index, [`INDEX_MAX`]) rather than one long stall.
pub(super) const BATCH_BYTES: usize = 128 << 10;
const BATCH_FILES: usize = 512;

/// A map keyed by file id (ids the store hands out, not chosen by a caller), hashed by
/// one multiplication: the pass over the tree before each search looks up every file
/// (about a third of its time with SipHash).
pub(super) type Ids<V> = HashMap<i64, V, BuildHasherDefault<IdHasher>>;

/// [`Ids`]' hasher: Fibonacci hashing of the one `i64` written.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_i64(&mut self, v: i64) {
        self.0 = (v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// What the daemon knows of the store's text index.
#[derive(Default)]
pub(super) enum TextIndexState {
    /// Not asked yet since the mount.
    #[default]
    Unknown,
    /// This store has none (PostgreSQL without `pg_trgm`; a read-only store).
    Unavailable,
    /// The indexed version of each indexed file (file id to version id).
    Known(Ids<i64>),
}

impl Fs {
    /// The live files whose current version may hold any of `literals` (each at least 3
    /// characters, no NUL; ASCII only when `ignore_case`), as `(inode, path)` in path
    /// order, from the text index brought up to date first. Files too large to index are
    /// always among them; binary files (a NUL in the first 8 KiB) and files over
    /// `max_bytes` never are. `None`: no index to ask (the store has none, or bringing it
    /// up to date failed: logged), so the caller reads every file. The candidates are
    /// not yet checked against any caller's permissions.
    ///
    /// Only for a caller who may read every live file and list every directory (root,
    /// or anyone when nothing is closed to them): the index holds everyone's text, and
    /// how long asking it takes depends on what it holds, so a caller with files closed
    /// to it could time searches to learn their content (helper finding, the attack
    /// round of session 23: `AKIA...` read out of root's 0600 file, 50 µs a guess).
    /// For such a caller `None`, before the index is asked: the walk it then makes
    /// passes closed files and directories over without reading them.
    pub fn text_candidates(
        &self,
        literals: &[String],
        ignore_case: bool,
        max_bytes: u64,
        ctx: super::Ctx,
    ) -> Result<Option<Vec<(u64, String)>>> {
        if ctx.uid != 0 && !self.reads_everything(ctx) {
            return Ok(None);
        }
        let mut state = self.text_index.lock();
        if matches!(*state, TextIndexState::Unknown) {
            *state = match self.store.text_index_rows() {
                Ok(Some(rows)) => TextIndexState::Known(rows.into_iter().collect()),
                Ok(None) => TextIndexState::Unavailable,
                Err(e) => {
                    log::warn!("search reads every file: the text index: {e}");
                    return Ok(None);
                }
            };
        }
        let TextIndexState::Known(known) = &mut *state else {
            return Ok(None);
        };
        // Asked before it is brought up to date, so that one pass over the tree finds
        // both the files changed since (read whole by this search, indexed for the next)
        // and the indexed files that may match.
        let asked = |known: &Ids<i64>| -> Result<Scan> {
            let ids: Ids<()> = self
                .store
                .text_index_query(literals, ignore_case)?
                .into_iter()
                .map(|f| (f, ()))
                .collect();
            Ok(self.scan_for_text_index(known, &ids))
        };
        let mut scan = match asked(known) {
            Ok(scan) => scan,
            Err(e) => {
                // Dropped by a redaction (here or on another daemon), or unreadable: asked
                // for again from the start next time.
                log::warn!("search reads every file: asking the text index: {e}");
                *state = TextIndexState::Unknown;
                return Ok(None);
            }
        };
        if scan.changed.len() > CHANGED_READ_WHOLE {
            // Many changed (the first search of a pad, a bulk import): indexed first, then
            // asked again, so this search reads only the candidates.
            if let Err(e) = self
                .store_text_index(known, &scan, max_bytes)
                .and_then(|()| asked(known))
                .map(|again| scan = again)
            {
                log::warn!("search reads every file: indexing: {e}");
                *state = TextIndexState::Unknown;
                return Ok(None);
            }
        } else if let Err(e) = self.store_text_index(known, &scan, max_bytes) {
            // The changed files are candidates anyway: this search is whole without them.
            log::warn!("the text index is behind: {e}");
            *state = TextIndexState::Unknown;
        }
        let tree = self.tree.read();
        let mut out: Vec<(u64, String)> = scan
            .candidates
            .into_iter()
            .map(|ino| (ino, tree.path(ino)))
            .collect();
        out.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(Some(out))
    }

    /// Whether the caller of `ctx` may read every live file and read and search every
    /// directory (file modes only: what the kernel would decide; one pass over the
    /// inodes, its supplementary groups read once).
    pub(super) fn reads_everything(&self, ctx: super::Ctx) -> bool {
        let groups = crate::identity::groups_of(ctx.pid);
        let in_group = |g: u32| groups.contains(&g);
        let tree = self.tree.read();
        tree.nodes.values().all(|n| {
            if n.orphan {
                return true;
            }
            let mask = match n.kind {
                Kind::Dir => libc::R_OK | libc::X_OK,
                _ => libc::R_OK,
            };
            let (want, allowed) = super::permitted_among(
                (n.attrs.mode, n.attrs.uid, n.attrs.gid),
                n.kind,
                mask,
                ctx,
                &in_group,
            );
            want & !allowed == 0
        })
    }

    /// One pass over the tree: the live files whose current version is not the one
    /// `known` says is indexed (`changed`), the files `known` holds that are gone, and
    /// the candidates: the changed files and the indexed files in `ids`.
    fn scan_for_text_index(&self, known: &Ids<i64>, ids: &Ids<()>) -> Scan {
        let tree = self.tree.read();
        let mut scan = Scan::default();
        let mut still_known = 0usize;
        for (&ino, n) in tree.nodes.iter() {
            if n.kind != Kind::File || n.orphan {
                continue;
            }
            let Some(file_id) = n.file_id else { continue };
            let (id, content) = n.content();
            if id == 0 {
                continue;
            }
            match known.get(&file_id) {
                Some(&k) if k == id => {
                    still_known += 1;
                    if ids.contains_key(&file_id) {
                        scan.candidates.push(ino);
                    }
                }
                k => {
                    still_known += usize::from(k.is_some());
                    scan.changed.push((file_id, id, content));
                    scan.candidates.push(ino);
                }
            }
        }
        if still_known < known.len() {
            // Some indexed files are no longer live (deleted, or replaced by a rename).
            let live: Ids<()> = tree
                .nodes
                .values()
                .filter(|n| n.kind == Kind::File && !n.orphan && n.content().0 != 0)
                .filter_map(|n| n.file_id.map(|f| (f, ())))
                .collect();
            scan.gone.extend(
                known
                    .iter()
                    .filter(|(f, _)| !live.contains_key(f))
                    .map(|(&f, &v)| (f, v)),
            );
        }
        scan
    }

    /// Stores what `scan` found changed and gone; `known` follows what was stored.
    fn store_text_index(&self, known: &mut Ids<i64>, scan: &Scan, max_bytes: u64) -> Result<()> {
        let mut batch: Vec<TextEntry> = scan
            .gone
            .iter()
            .map(|&(file_id, version_id)| TextEntry::Gone {
                file_id,
                version_id,
            })
            .collect();
        let mut bytes = 0usize;
        for &(file_id, version_id, content) in &scan.changed {
            let entry = if content.len > max_bytes {
                TextEntry::Unindexed {
                    file_id,
                    version_id,
                    scan: false,
                }
            } else if content.len > INDEX_MAX {
                TextEntry::Unindexed {
                    file_id,
                    version_id,
                    scan: true,
                }
            } else {
                let mut buf = vec![0u8; content.len as usize];
                let n = self.store.read(content, 0, &mut buf)?;
                buf.truncate(n);
                if buf[..n.min(8192)].contains(&0) {
                    TextEntry::Unindexed {
                        file_id,
                        version_id,
                        scan: false,
                    }
                } else {
                    bytes += buf.len();
                    for b in buf.iter_mut().filter(|b| **b == 0) {
                        *b = b' ';
                    }
                    TextEntry::Text {
                        file_id,
                        version_id,
                        text: String::from_utf8_lossy(&buf).into_owned(),
                    }
                }
            };
            batch.push(entry);
            if bytes >= BATCH_BYTES || batch.len() >= BATCH_FILES {
                self.store_text_entries(known, &mut batch)?;
                bytes = 0;
            }
        }
        self.store_text_entries(known, &mut batch)
    }

    /// Stores `batch` (emptied) and notes it in `known`.
    fn store_text_entries(&self, known: &mut Ids<i64>, batch: &mut Vec<TextEntry>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.store.text_index_put(batch)?;
        for e in batch.drain(..) {
            let (file_id, version_id) = e.ids();
            if matches!(e, TextEntry::Gone { .. }) {
                known.remove(&file_id);
            } else {
                known.insert(file_id, version_id);
            }
        }
        Ok(())
    }
}
