//! The text index of every version, kept for `search` with `history` (issue 33 item 4;
//! the store's side, and what a row indexes, is [`crate::store::sql::history_index`]).
//! Before a search asks it, the versions the live files gained since it was last asked
//! are read and added, for up to a second (what is left is read by the search, and
//! indexed by the `scratchfs-history` thread), so the cost is paid after a change, bounded
//! by the bytes those versions added, and never by a commit. The daemon remembers the
//! newest row of each file (about 64 bytes a file) once a search has asked.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak, mpsc};
use std::time::{Duration, Instant};

use super::Fs;
use super::text_index::{BATCH_BYTES, INDEX_MAX, Ids};
use crate::error::Result;
use crate::store::sql::history_index::{self as store_index, HistoryEntry};
pub use crate::store::sql::history_index::{HistoryRow, Tail};
use crate::store::{ContentRef, Kind};

/// Versions added to the index in one store transaction, at most (and text up to
/// [`BATCH_BYTES`], as the live index): each transaction holds the store's write lock,
/// which commits wait for.
const BATCH_VERSIONS: usize = 2048;

/// How long a search spends bringing the index up to date before it answers; what is
/// left is read by the search itself, and indexed by the `scratchfs-history` thread
/// ([`Fs::start_history_indexer`]). A first index of 1,270,000 versions (316 MB of text)
/// took about 4 minutes on the bench machine: no client waits for that.
pub(super) const IN_SEARCH: Duration = Duration::from_secs(1);

/// The `scratchfs-history` thread's steps: this long indexing (one batch at least),
/// then as long idle, so that commits waiting for the store's write lock wait one batch
/// at most, and the machine keeps half a core for the agent.
const STEP: Duration = Duration::from_millis(250);

/// What the daemon knows of the store's history index.
#[derive(Default)]
pub(super) enum HistoryIndexState {
    /// Not asked yet since the mount (or since a gc or a redaction).
    #[default]
    Unknown,
    /// This store has none (PostgreSQL without `pg_trgm`; a read-only store).
    Unavailable,
    /// The newest row of each file the index holds.
    Known(Ids<HistoryRow>),
}

/// What a history search reads, from the index ([`Fs::history_candidates`]).
pub struct HistoryCandidates {
    /// The live files that have a version the index names, or versions it does not hold
    /// yet: `(inode, path, file id)`, in path order. Not yet checked against any caller's
    /// permissions.
    pub files: Vec<(u64, String, i64)>,
    /// The versions named (ids).
    pub versions: HashSet<i64>,
    /// For each file in `files`, the newest version the index held when it was asked
    /// (0: none): only a version up to it that the index did not name holds no match; a
    /// later one (indexed since, by another search or thread) is read.
    pub indexed_upto: HashMap<i64, i64>,
}

/// What a history search reads of a version with content `content`, the version before
/// it (the caller may read) having left `prev`: from where, and that line's number. A
/// version of the same stream (whose bytes at an offset never change) that reaches the
/// start of the earlier one's last line, from there: an append, or a truncation within
/// that line, holds no other line the earlier one did not (helper finding of session 24:
/// `truncate -s -1` repeated on a 1 MB file made each version read, and indexed, whole);
/// any other version whole (from 0, line 1).
pub fn part_read(prev: Option<Tail>, content: ContentRef) -> (u64, u64) {
    match prev {
        Some(t) if t.stream == content.stream && content.len >= t.off => (t.off, t.line),
        _ => (0, 1),
    }
}

/// Where the last line of a version with content `content` begins, `bytes` being what
/// was read of it from `from` (line `first_line`).
pub fn tail_of(content: ContentRef, from: u64, first_line: u64, bytes: &[u8]) -> Tail {
    let last_nl = bytes.iter().rposition(|&b| b == b'\n');
    let lines_before_tail = bytes[..last_nl.map_or(0, |i| i + 1)]
        .iter()
        .filter(|&&b| b == b'\n')
        .count() as u64;
    Tail {
        stream: content.stream,
        len: content.len,
        off: from + last_nl.map_or(0, |i| i as u64 + 1),
        line: first_line + lines_before_tail,
    }
}

impl Fs {
    /// The versions of live files whose text may hold any of `literals` (as
    /// [`Fs::text_candidates`] takes them), from the history index brought up to date
    /// first: the versions too large to index are among them, binary ones and those over
    /// `max_bytes` never are. `None`: no index to ask (the store has none, or bringing it
    /// up to date failed: logged), or a caller the index may not serve: the caller then
    /// reads every version it may.
    ///
    /// Only for a caller who may read every version the store holds, of live files and
    /// deleted ones (root, or anyone every file inode's read bits let read), and list
    /// every directory: how long asking the index takes depends on all it holds (the
    /// timing oracle of [`Fs::text_candidates`]).
    pub fn history_candidates(
        &self,
        literals: &[String],
        ignore_case: bool,
        max_bytes: u64,
        ctx: super::Ctx,
    ) -> Result<Option<HistoryCandidates>> {
        if ctx.uid != 0 && !(self.reads_everything(ctx) && self.reads_every_version(ctx)?) {
            return Ok(None);
        }
        let mut state = self.history_index.lock();
        if matches!(*state, HistoryIndexState::Unknown) {
            *state = match self.store.history_index_heads() {
                Ok(Some(rows)) => {
                    HistoryIndexState::Known(rows.into_iter().map(|r| (r.file_id, r)).collect())
                }
                Ok(None) => HistoryIndexState::Unavailable,
                Err(e) => {
                    log::warn!("history search reads every version: the index: {e}");
                    return Ok(None);
                }
            };
        }
        let HistoryIndexState::Known(heads) = &mut *state else {
            return Ok(None);
        };
        let budget = Duration::from_micros(self.history_budget_us.load(Ordering::Relaxed));
        let deadline = Instant::now() + budget;
        let asked = self
            .catch_up_history(heads, max_bytes, Some(deadline))
            .and_then(|complete| {
                Ok((
                    complete,
                    self.store.history_index_query(literals, ignore_case)?,
                ))
            });
        let (complete, named) = match asked {
            Ok(asked) => asked,
            Err(e) => {
                // Dropped by a redaction (here or on another daemon), or unreadable: asked
                // for again from the start next time.
                log::warn!("history search reads every version: the index: {e}");
                *state = HistoryIndexState::Unknown;
                return Ok(None);
            }
        };
        if !complete {
            self.want_history_index(max_bytes);
        }
        let mut versions = HashSet::with_capacity(named.len());
        let mut by_file: Ids<()> = Ids::default();
        for (file_id, version_id) in named {
            versions.insert(version_id);
            by_file.insert(file_id, ());
        }
        let upto = |f: i64| heads.get(&f).map_or(0, |h| h.version_id);
        let tree = self.tree.read();
        let mut indexed_upto = HashMap::new();
        let mut files: Vec<(u64, String, i64)> = Vec::new();
        for (&ino, n) in tree.nodes.iter() {
            if n.kind != Kind::File || n.orphan {
                continue;
            }
            let Some(f) = n.file_id else { continue };
            // Named by the index, or with versions it does not hold yet (read whole).
            if by_file.contains_key(&f) || n.content().0 > upto(f) {
                files.push((ino, tree.path(ino), f));
                indexed_upto.insert(f, upto(f));
            }
        }
        files.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(Some(HistoryCandidates {
            files,
            versions,
            indexed_upto,
        }))
    }

    /// Starts the `scratchfs-history` thread, which brings the history index up to date in
    /// steps (250 ms of work, 250 ms idle) when a search left versions behind; it ends when the filesystem is
    /// dropped. Without it (a command on an unmounted database), each search takes the
    /// index one second further.
    pub fn start_history_indexer(fs: &Arc<Fs>) -> std::io::Result<()> {
        let weak: Weak<Fs> = Arc::downgrade(fs);
        let (tx, rx) = mpsc::channel::<u64>();
        *fs.history_indexer.lock() = Some(tx);
        std::thread::Builder::new()
            .name("scratchfs-history".into())
            .spawn(move || {
                while let Ok(mut max_bytes) = rx.recv() {
                    loop {
                        let Some(fs) = weak.upgrade() else { return };
                        match fs.history_index_step(max_bytes) {
                            Ok(false) => {}
                            Ok(true) => break,
                            Err(e) => {
                                log::warn!("indexing history: {e}");
                                break;
                            }
                        }
                        drop(fs);
                        std::thread::sleep(STEP);
                        // Asked again meanwhile: answered by this work.
                        while let Ok(m) = rx.try_recv() {
                            max_bytes = m;
                        }
                    }
                }
            })
            .map(|_| ())
    }

    /// Sets how long a history search spends bringing the index up to date before it
    /// answers (one second unless set): for tests of an index a search leaves behind
    /// (tests/search_core.rs), which a test's small scratchpad never is in one second.
    pub fn set_history_search_budget(&self, budget: Duration) {
        self.history_budget_us
            .store(budget.as_micros() as u64, Ordering::Relaxed);
    }

    /// Tells the `scratchfs-history` thread, if there is one, that versions are behind
    /// (`max_bytes`: the largest version a search reads).
    fn want_history_index(&self, max_bytes: u64) {
        if let Some(tx) = self.history_indexer.lock().as_ref() {
            let _ = tx.send(max_bytes);
        }
    }

    /// One step of the `scratchfs-history` thread: `Ok(true)` when nothing is left (or
    /// the index is not known: a gc or redaction reset it; the next search asks again).
    fn history_index_step(&self, max_bytes: u64) -> Result<bool> {
        let mut state = self.history_index.lock();
        let HistoryIndexState::Known(heads) = &mut *state else {
            return Ok(true);
        };
        let done = self.catch_up_history(heads, max_bytes, Some(Instant::now() + STEP));
        if done.is_err() {
            *state = HistoryIndexState::Unknown;
        }
        done
    }

    /// Whether the caller of `ctx` may read every version the store holds: every file
    /// inode's read bits, linked or not, let it (one query; what
    /// [`Fs::may_read_version`] asks of each version), and so does the guard of versions
    /// from before `versions.ino` (0400, the daemon's user) if there are any (asked once
    /// a mount: 200 ms at 1,270,000 versions).
    fn reads_every_version(&self, ctx: super::Ctx) -> Result<bool> {
        let mut guards = self.store.history_guards()?;
        let legacy = match self.legacy_versions.get() {
            Some(&l) => l,
            None => {
                let l = self.store.legacy_versions()?;
                *self.legacy_versions.get_or_init(|| l)
            }
        };
        if legacy {
            let root_gid = self.tree.read().get(super::ROOT)?.attrs.gid;
            guards.push((0o400, unsafe { libc::geteuid() }, root_gid));
        }
        let groups = crate::identity::groups_of(ctx.pid);
        let in_group = |g: u32| groups.contains(&g);
        Ok(guards.into_iter().all(|g| {
            let (want, allowed) = super::permitted_among(g, Kind::File, libc::R_OK, ctx, &in_group);
            want & !allowed == 0
        }))
    }

    /// Adds to the index the versions each live file gained since its newest row in
    /// `heads` (which follows what was stored), until `deadline` if any (checked after each
    /// version; what was read is stored first). `Ok(true)`: nothing is left.
    fn catch_up_history(
        &self,
        heads: &mut Ids<HistoryRow>,
        max_bytes: u64,
        deadline: Option<Instant>,
    ) -> Result<bool> {
        let behind: Vec<(i64, i64)> = {
            let tree = self.tree.read();
            tree.nodes
                .values()
                .filter(|n| n.kind == Kind::File && !n.orphan)
                .filter_map(|n| {
                    let file_id = n.file_id?;
                    let (id, _) = n.content();
                    let head = heads.get(&file_id).map_or(0, |h| h.version_id);
                    (id > head).then_some((file_id, head))
                })
                .collect()
        };
        let mut batch: Vec<HistoryEntry> = Vec::new();
        let mut bytes = 0usize;
        // A file reached through two links is behind once.
        let mut done: HashSet<i64> = HashSet::new();
        for (file_id, head) in behind {
            if !done.insert(file_id) {
                continue;
            }
            let mut prev = heads.get(&file_id).and_then(|h| h.tail);
            for v in self.store.versions(file_id)? {
                if v.id <= head {
                    continue;
                }
                let entry = self.history_entry(file_id, &v, prev, max_bytes)?;
                prev = entry.row.tail;
                bytes += entry.text.as_ref().map_or(0, String::len);
                batch.push(entry);
                if bytes >= BATCH_BYTES || batch.len() >= BATCH_VERSIONS {
                    self.store_history_entries(heads, &mut batch)?;
                    bytes = 0;
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    self.store_history_entries(heads, &mut batch)?;
                    return Ok(false);
                }
            }
        }
        self.store_history_entries(heads, &mut batch)?;
        Ok(true)
    }

    /// The row of version `v` of file `file_id`, the version before it having left
    /// `prev` (what a history search reads of it: `crate::mcp::search`).
    fn history_entry(
        &self,
        file_id: i64,
        v: &crate::store::VersionInfo,
        prev: Option<Tail>,
        max_bytes: u64,
    ) -> Result<HistoryEntry> {
        let skip = |from_off, first_line| HistoryEntry {
            row: HistoryRow {
                version_id: v.id,
                file_id,
                kind: store_index::Kind::Skip,
                from_off,
                first_line,
                tail: None,
            },
            text: None,
        };
        if v.content.len > max_bytes {
            return Ok(skip(0, 1));
        }
        let (from, first_line) = part_read(prev, v.content);
        let mut bytes = vec![0u8; (v.content.len - from) as usize];
        let got = self.store.read(v.content, from, &mut bytes)?;
        bytes.truncate(got);
        if from == 0 && bytes[..bytes.len().min(8192)].contains(&0) {
            return Ok(skip(from, first_line));
        }
        let tail = tail_of(v.content, from, first_line, &bytes);
        let (kind, text) = if bytes.len() as u64 > INDEX_MAX {
            (store_index::Kind::Scan, None)
        } else {
            for b in bytes.iter_mut().filter(|b| **b == 0) {
                *b = b' ';
            }
            (
                store_index::Kind::Text,
                Some(String::from_utf8_lossy(&bytes).into_owned()),
            )
        };
        Ok(HistoryEntry {
            row: HistoryRow {
                version_id: v.id,
                file_id,
                kind,
                from_off: from,
                first_line,
                tail: Some(tail),
            },
            text,
        })
    }

    /// Stores `batch` (emptied) and notes each file's newest row in `heads`.
    fn store_history_entries(
        &self,
        heads: &mut Ids<HistoryRow>,
        batch: &mut Vec<HistoryEntry>,
    ) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.store.history_index_put(batch)?;
        for e in batch.drain(..) {
            let newer = heads
                .get(&e.row.file_id)
                .is_none_or(|h| h.version_id < e.row.version_id);
            if newer {
                heads.insert(e.row.file_id, e.row);
            }
        }
        Ok(())
    }
}
