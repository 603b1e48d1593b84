//! The commit path (SPEC §4): a write handle's private copy becomes a version on flush,
//! fsync or release ([`Fs::flush`] → `commit_handle` → [`Fs::commit`] →
//! [`crate::store::Store::commit`]). Content is checked by the gate
//! ([`super::gate`]) before the store is asked; the store checks for a lost update
//! (`ESTALE`) in the same transaction; then the in-memory inode is updated and the
//! kernel's cached attributes invalidated.

use super::gate::{Change, Content};
use super::handle::{HandleKind, WriteState};
use super::{CONTENT_CHECK_MAX, Fs, HASHER_CACHE, Invalidation, now_ns};
use crate::error::{Error, Result};
use crate::identity::Caller;
use crate::store::{Build, CommitRequest, Committed, Kind, VersionInfo};

/// The name of a file removed after a refused create (parent inode, name), for the
/// kernel to forget.
pub(super) type Gone = Option<(u64, Vec<u8>)>;

/// At most this many other writers' versions a commit that keeps bytes of its base names
/// besides the base ([`Fs::name_kept`]).
pub const KEPT_WRITERS: usize = 16;

impl Fs {
    /// The bytes of the file's current version.
    pub(super) fn current_bytes(&self, ino: u64) -> Result<Vec<u8>> {
        match self.tree.read().get(ino)?.head.clone() {
            Some(h) => self.bytes_of(h.content),
            None => Ok(Vec::new()),
        }
    }

    /// The bytes of `content` (a version's), read whole.
    pub(super) fn bytes_of(&self, content: crate::store::ContentRef) -> Result<Vec<u8>> {
        let mut b = vec![0u8; content.len as usize];
        let n = self.store.read(content, 0, &mut b)?;
        b.truncate(n);
        Ok(b)
    }

    /// A write by a caller other than root clears the file's S_ISUID (and S_ISGID with
    /// group execute), as the kernel's filesystems do at write (`file_remove_privs`;
    /// pjdfstest chmod/12.t). Recorded as a `setattr` event by that caller.
    fn drop_privileges_after_write(&self, ino: u64, caller: &Caller) {
        if caller.uid == 0
            || self
                .tree
                .read()
                .get(ino)
                .ok()
                .is_none_or(|n| n.attrs.mode & 0o6000 == 0)
        {
            return;
        }
        let mut tree = self.tree.write();
        let path = tree.path(ino);
        let Some(n) = tree.nodes.get_mut(&ino) else {
            return;
        };
        let mode = super::clear_suid_sgid(n.attrs.mode);
        if mode == n.attrs.mode {
            return;
        }
        let mut a = n.attrs;
        a.mode = mode;
        let pinned = n.mtime_pinned;
        match self.store.set_attrs(ino, a, pinned, &path, caller) {
            Ok(()) => n.attrs = a,
            Err(e) => log::error!("{path}: clearing set-user-ID: {e}"),
        }
        drop(tree);
        self.invalidate(Invalidation::Attr(ino));
    }

    /// The current version's bytes from `from` to its end.
    pub(super) fn window_of_current(&self, ino: u64, from: u64) -> Result<Vec<u8>> {
        let Some(h) = self.tree.read().get(ino)?.head.clone() else {
            return Ok(Vec::new());
        };
        let mut b = vec![0u8; h.content.len.saturating_sub(from) as usize];
        let n = self.store.read(h.content, from, &mut b)?;
        b.truncate(n);
        Ok(b)
    }

    /// The bytes a commit of `w` would give the file: its private copy, or for an
    /// `O_APPEND` handle the current version followed by its pending bytes.
    /// Errors: `EFBIG` when it would be over [`CONTENT_CHECK_MAX`] (checks that need the
    /// whole content read it into memory: the daemon's memory stays bounded).
    pub(super) fn content_after(&self, ino: u64, w: &WriteState) -> Result<Vec<u8>> {
        let len = if w.append {
            self.tree
                .read()
                .get(ino)?
                .head
                .as_ref()
                .map_or(0, |h| h.content.len)
                + w.size
        } else {
            w.size
        };
        if len > CONTENT_CHECK_MAX {
            return Err(Error::new(
                libc::EFBIG,
                format!(
                    "{len} bytes: too large to check against the path's rules (content checks read at most {CONTENT_CHECK_MAX} bytes)"
                ),
            ));
        }
        if !w.append {
            return self.read_private(w, 0, u32::try_from(w.size).unwrap_or(u32::MAX));
        }
        let mut bytes = self.current_bytes(ino)?;
        let mut pending = vec![0u8; w.size as usize];
        w.spill.read_at(0, &mut pending)?;
        bytes.extend_from_slice(&pending);
        Ok(bytes)
    }

    /// The verdict on a commit of `new_len` bytes too large for the content checks
    /// ([`CONTENT_CHECK_MAX`]): what its size alone decides first (the writer, an
    /// `append-only` cut, `max_bytes`: the gate's [`Change::Truncate`] verdict without
    /// content), else `EFBIG`, so the reason given is the rule's when a rule says no.
    fn too_large_to_check(
        &self,
        caller: &Caller,
        path: &str,
        old_len: u64,
        new_len: u64,
    ) -> Result<()> {
        let sized = Change::Truncate {
            path,
            size: new_len,
            committed_len: old_len,
            current: None,
        };
        self.gate.check(caller, &sized)?;
        Err(Error::new(
            libc::EFBIG,
            format!(
                "{new_len} bytes: too large to check against the path's rules (content checks read at most {CONTENT_CHECK_MAX} bytes)"
            ),
        ))
    }

    /// After a content refusal (SPEC §6): drops the handle's private copy so the file
    /// keeps its current version, and clears its pending size and owed truncation. The
    /// caller invalidates the inode's attributes once it has let go of the handle.
    pub(super) fn drop_private(&self, fh: u64, ino: u64, w: &mut WriteState) -> Result<()> {
        let (id, content) = self.tree.read().get(ino)?.content();
        w.committed(id, content);
        if let Some(n) = self.tree.write().nodes.get_mut(&ino) {
            n.pending_size = None;
            if n.owed_by == Some(fh) {
                n.owed_by = None;
                self.owed_settled();
            }
            // Pages written through mmap hold the refused bytes: the next reader's open
            // drops the page cache (no FOPEN_KEEP_CACHE), and the caller invalidates it.
            n.cached_version = 0;
        }
        Ok(())
    }

    /// A refusal at `write` (the gate's verdict `e`): recorded; for content (`EINVAL`,
    /// certain already) with the content the handle would have committed, its private
    /// copy dropped and its later writes refused, so nothing of it is committed at close,
    /// and a file this handle `created` removed again. Returns the error to reply with and
    /// the name removed, for `Fs::invalidate_after_refusal`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn refuse_write(
        &self,
        fh: u64,
        ino: u64,
        w: &mut WriteState,
        path: &str,
        caller: &Caller,
        created: bool,
        e: Error,
    ) -> Result<(Error, Gone)> {
        if e.errno != libc::EINVAL {
            self.record_refusal(path, caller, &e, None);
            return Ok((e, None));
        }
        let content = self.content_after(ino, w).ok();
        self.record_refusal(path, caller, &e, content.as_deref());
        self.drop_private(fh, ino, w)?;
        w.poisoned = Some(e.clone());
        let gone = if created {
            self.forget_refused_create(ino, caller)
        } else {
            None
        };
        Ok((e, gone))
    }

    /// After a refused change, with no lock held: the kernel drops the inode's cached
    /// attributes and pages (bytes written through mmap and refused must not be read
    /// back), and the name of a refused create (`gone`, parent and name).
    pub(super) fn invalidate_after_refusal(&self, ino: u64, gone: Gone) {
        self.invalidate(Invalidation::Attr(ino));
        self.invalidate(Invalidation::Data(ino));
        if let Some((parent, name)) = gone {
            self.invalidate(Invalidation::Entry(parent, name));
        }
    }

    /// A file whose creating handle's first content was refused (it has no version) is
    /// removed again, so that a refused create leaves no file
    /// behind (issue 9: no empty file stays in a `format: json` path). Recorded as an
    /// `unlink` by the same caller; every version is kept as always. Returns the name the
    /// kernel must forget.
    pub(super) fn forget_refused_create(&self, ino: u64, caller: &Caller) -> Gone {
        let mut tree = self.tree.write();
        let n = tree.nodes.get(&ino)?;
        if n.orphan || n.kind != Kind::File || n.head.is_some() {
            return None;
        }
        let (parent, name, file_id) = (n.parent, n.name.to_vec(), n.file_id);
        let path = tree.path(ino);
        let recorded = self.recorded_caller(caller);
        if let Err(e) = self.store.unlink(ino, file_id, &path, &recorded, now_ns()) {
            log::error!("{path}: removing a refused create: {e}");
            return None;
        }
        tree.detach(parent, ino, &name, Kind::File);
        self.usage_added(path.len() as u64, 0, 1, -1);
        if let Some(n) = tree.nodes.get_mut(&ino) {
            n.attrs.ctime_ns = now_ns();
        }
        tree.make_orphan(ino);
        self.views.changed(&[ino]);
        Some((parent, name))
    }

    pub(super) fn read_private(&self, w: &WriteState, offset: u64, size: u32) -> Result<Vec<u8>> {
        // An append handle sees its base followed by its pending bytes.
        let (total, pending_at) = if w.append {
            (w.base.len + w.size, w.base.len)
        } else {
            (w.size, 0)
        };
        let end = total.min(offset + size as u64);
        if offset >= end {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; (end - offset) as usize];
        let mut at = offset;
        while at < end {
            let i = (at - offset) as usize;
            if at < pending_at {
                let n = (pending_at.min(end) - at) as usize;
                self.store.read(w.base, at, &mut buf[i..i + n])?;
                at += n as u64;
                continue;
            }
            let rel = at - pending_at;
            let (inside, bound) = w.dirty.locate(rel);
            let seg_end = end.min(bound.saturating_add(pending_at));
            let n = (seg_end - at) as usize;
            if inside {
                w.spill.read_at(rel, &mut buf[i..i + n])?;
            } else if rel < w.base_limit && !w.append {
                let m = n.min((w.base_limit - rel) as usize);
                self.store.read(w.base, rel, &mut buf[i..i + m])?;
            }
            at += n as u64;
        }
        Ok(buf)
    }

    /// `flush` (each `close()` of a descriptor): commits if modified; idempotent.
    ///
    /// One exception: a handle whose only change is the `O_TRUNC` of its open owes the
    /// truncation instead of committing it, because the shell flushes `echo x > f` (its
    /// dup2) before writing. The owed truncation is committed by the handle's next flush
    /// after a write, by its release, or before anyone else opens the file, so no other
    /// process can observe the difference: the file reads as empty (stat size 0) meanwhile.
    pub fn flush(&self, fh: u64) -> Result<()> {
        self.commit_handle(fh, false, false)
    }

    /// `fsync`: commits if modified, durably (the commit's SQLite transaction is synced);
    /// with nothing to commit, writes every change already answered and syncs the store
    /// ([`crate::store::Store::sync_to_disk`]).
    pub fn fsync(&self, fh: u64) -> Result<()> {
        let modified = self
            .handle(fh)
            .map(|h| matches!(&h.lock().kind, HandleKind::Write(w) if w.modified))
            .unwrap_or(false);
        self.commit_handle(fh, true, true)?;
        if !modified {
            self.store.sync_to_disk()?;
        }
        Ok(())
    }

    /// `release`: commits any leftover (errors cannot reach the application any more, so
    /// they are only logged and recorded) and drops the handle.
    pub fn release(&self, fh: u64) -> Result<()> {
        let result = self.commit_handle(fh, false, true);
        self.live.cancel(fh);
        let h = self.handles.lock().remove(&fh);
        if let Some(h) = h {
            let (ino, cached, writer) = {
                let h = h.lock();
                (
                    h.ino,
                    matches!(h.kind, HandleKind::Read(_, true)),
                    matches!(h.kind, HandleKind::Write(_)).then_some(h.caller.tgid),
                )
            };
            let mut tree = self.tree.write();
            // The last page-cache reader of a version older than the current one: the
            // kernel's cached size may still be theirs (a size held for them, or cut by
            // a short read of theirs), and the next reader through the page cache would
            // be bounded by it.
            let mut stale_size = false;
            if let Some(n) = tree.nodes.get_mut(&ino) {
                n.open_handles = n.open_handles.saturating_sub(1);
                if let Some(t) = writer
                    && let Some(i) = n.writer_tgids.iter().position(|&x| x == t)
                {
                    n.writer_tgids.swap_remove(i);
                }
                if cached {
                    n.cache_readers = n.cache_readers.saturating_sub(1);
                    if n.cache_readers == 0 {
                        let older = n.head.as_ref().is_some_and(|h| h.id != n.cached_version);
                        stale_size = n.held.take().is_some() || older;
                        if n.draining > 0 {
                            self.owed_settled();
                        }
                    }
                }
                if n.open_handles == 0 {
                    n.pending_size = None;
                }
            }
            tree.reap(ino);
            drop(tree);
            if stale_size {
                self.invalidate(Invalidation::Attr(ino));
            }
        }
        result
    }

    /// Commits a write handle's private copy if modified. `force`: also an owed
    /// `O_TRUNC`-only truncation (see [`Fs::flush`]).
    pub(super) fn commit_handle(&self, fh: u64, durable: bool, force: bool) -> Result<()> {
        let h = match self.handle(fh) {
            Ok(h) => h,
            Err(e) if force => {
                log::debug!("{e}");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let mut guard = h.lock();
        let h = &mut *guard;
        let ino = h.ino;
        let HandleKind::Write(w) = &mut h.kind else {
            return Ok(());
        };
        // The release (or fsync) of a create's handle that wrote nothing, on a file that
        // got a version from elsewhere meanwhile: the empty first version it owed is
        // behind that version, as a `touch` before another process's write is (issue 31
        // item 5; it was refused as a lost update, on record). An `O_TRUNC` create (a
        // shell's `: > f`) still commits its truncation.
        if force && !w.touched && !w.replaces && w.owes_create_only() {
            self.rebase_if_untouched(fh, ino, w)?;
        }
        if !w.modified {
            return match &w.refused {
                Some(e) if !force => Err(e.clone()),
                _ => Ok(()),
            };
        }
        if w.open_trunc_only && !force {
            self.tree.write().get_mut(ino)?.owed_by = Some(fh);
            return Ok(());
        }
        // From the gate's verdict to the store's commit, no rename moves the file.
        let ns = self.ns_guard.read();
        let path = if self.gate.has_rules() {
            self.tree.read().path(ino)
        } else {
            String::new()
        };
        // The bytes this commit holds against the quota, until it has counted them.
        let mut _quota_hold = None;
        if self.gate.has_rules() {
            let (old_len, first) = {
                let tree = self.tree.read();
                let head = tree.get(ino)?.head.as_ref();
                (
                    head.map_or(0, |h| h.content.len),
                    // The first content of a file this handle created (its create was
                    // checked); anything later is a change of an existing file.
                    h.created && head.is_none(),
                )
            };
            // The creating handle still writing a write-once file, only extending it.
            let growing = h.created && !first && self.gate.is_write_once(&path) && {
                let current = self.current_bytes(ino)?;
                // Too large to compare: not known to be growing (the rule then judges).
                self.content_after(ino, w)
                    .is_ok_and(|content| content.starts_with(&current))
            };
            let new_len = if w.append { old_len + w.size } else { w.size };
            // The bytes a content check reads: an append's own, or the whole content.
            let read_len = if w.append && !self.gate.append_needs_whole(&path) {
                w.size
            } else {
                new_len
            };
            let verdict = if !self.gate.needs_content(&path) {
                let change = Change::Commit {
                    path: &path,
                    first,
                    growing,
                    current: None,
                    new: Content::Unchecked,
                };
                self.gate.check(&h.caller, &change)
            } else if read_len > CONTENT_CHECK_MAX {
                self.too_large_to_check(&h.caller, &path, old_len, new_len)
            } else if w.append && !self.gate.append_needs_whole(&path) {
                // An append: its new bytes, with the overlap a secret could span.
                let window_at = old_len.saturating_sub(super::gate::SECRET_OVERLAP as u64);
                let mut window = self.window_of_current(ino, window_at)?;
                let mut pending = vec![0u8; w.size as usize];
                w.spill.read_at(0, &mut pending)?;
                window.extend_from_slice(&pending);
                let change = Change::Commit {
                    path: &path,
                    first,
                    growing,
                    current: None,
                    new: Content::Appended {
                        old_len,
                        new_len: old_len + w.size,
                        window_at,
                        window: &window,
                    },
                };
                self.gate.check(&h.caller, &change)
            } else {
                let current = if self.gate.has_fields(&path) {
                    Some(self.current_bytes(ino)?)
                } else {
                    None
                };
                let content = self.content_after(ino, w)?;
                let change = Change::Commit {
                    path: &path,
                    first,
                    growing,
                    current: current.as_deref(),
                    new: Content::Whole(&content),
                };
                self.gate.check(&h.caller, &change)
            };
            // The pad's quota (issue 36): the commit stores at most its new bytes.
            let verdict = verdict.and_then(|()| {
                let adds = if w.append { w.size } else { new_len };
                self.quota_allows_bytes(&h.caller, &path, adds, || {
                    (new_len <= CONTENT_CHECK_MAX)
                        .then(|| self.content_after(ino, w).ok())
                        .flatten()
                        .map(|c| (c.len() as u64, blake3::hash(&c).to_hex().to_string()))
                })
                .map(|hold| _quota_hold = Some(hold))
            });
            if let Err(e) = verdict {
                // A refusal over the quota recorded itself, without the content.
                if e.errno != libc::EDQUOT {
                    let content = self.content_after(ino, w).ok();
                    self.record_refusal(&path, &h.caller, &e, content.as_deref());
                }
                self.drop_private(fh, ino, w)?;
                w.poisoned = Some(e.clone());
                w.refused = Some(e.clone());
                let gone = if h.created {
                    self.forget_refused_create(ino, &h.caller)
                } else {
                    None
                };
                drop(guard);
                self.invalidate_after_refusal(ino, gone);
                return Err(e);
            }
        }
        let kept = w.kept_base();
        let spill = &w.spill;
        let mut source = |off: u64, buf: &mut [u8]| spill.read_at(off, buf);
        let (build, expect, op) = if w.append {
            (Build::Append { len: w.size }, None, "append")
        } else {
            (
                Build::Overlay {
                    base: w.base,
                    base_limit: w.base_limit,
                    size: w.size,
                    dirty: &w.dirty.0,
                },
                // `"on_conflict": "overwrite"`: the later commit wins (SPEC §4). Else the
                // base is what the handle opened, or for a write-only handle what the
                // process had read before (issue 13: a read-modify-write with two opens).
                // A shell's `>` replaces the whole content without reading it, and the
                // shell does not report an error of its close: two at once (`echo a > f &
                // echo b > f`) are last-writer-wins, not a refusal nobody sees
                // (docs/SEMANTICS.md "Lineage").
                if self.overwrites(ino) || (Self::is_shell(&h.caller) && w.base_limit == 0) {
                    None
                } else {
                    Some(w.lost_update_base())
                },
                w.op,
            )
        };
        // The size the kernel believes (it updates i_size as direct-I/O writes extend the
        // file): when the commit lands elsewhere (an append onto a newer version, or a
        // refusal), its cached attributes must go.
        let kernel_size = if w.append {
            w.base.len + w.size
        } else {
            w.size
        };
        // A commit of the same bytes makes no version (SPEC §4): it returns the head, and
        // counts nothing against the quota.
        let before = self
            .tree
            .read()
            .get(ino)
            .ok()
            .and_then(|n| n.head.as_ref().map(|v| v.id));
        let result = self.commit_from(
            h.ino,
            op,
            expect,
            build,
            &mut source,
            &h.caller,
            durable,
            None,
            None,
            kept,
        );
        drop(ns);
        // Only now, with the commit done (and this handle still locked), may an opener
        // that waited for the owed truncation go on.
        let settled = if let Some(n) = self.tree.write().nodes.get_mut(&ino)
            && n.owed_by == Some(fh)
        {
            n.owed_by = None;
            true
        } else {
            false
        };
        if settled {
            self.owed_settled();
        }
        match result {
            Ok(v) => {
                if Some(v.id) != before {
                    let stored = if w.append { w.size } else { v.content.len };
                    self.usage_added(stored + path.len() as u64, 1, 0, 0);
                }
                w.committed(v.id, v.content);
                let caller = h.caller.clone();
                drop(guard);
                self.drop_privileges_after_write(ino, &caller);
                if v.content.len != kernel_size {
                    self.invalidate(Invalidation::Attr(ino));
                }
                Ok(())
            }
            Err(e) if e.errno != libc::ESTALE => {
                // The store failed (a full disk, a lost connection, a lock held too
                // long): nothing was decided about these bytes, and the rules passed
                // them above. The private copy stays as it is, dirty, so that the next
                // fsync, flush or release commits it: fsync(2) retried after ENOSPC must
                // not return 0 over bytes that were dropped (helper finding).
                drop(guard);
                log::warn!("commit failed, the bytes kept for a retry: {e}");
                Err(e)
            }
            Err(e) => {
                // Refused (a lost update): the private copy is dropped (the store kept
                // the refused content with the reason); the handle goes on from the
                // current version so that repeated flushes do not repeat the refusal.
                // What the store kept counts against the quota (within what the verdict
                // above held: the content and a record), as any refusal's: uncounted, a
                // flood of lost updates stored 130 MB on a 200 KB pad in a second
                // (attack round of session 33).
                let kept = if w.append { 0 } else { w.size };
                self.usage_added(kept + (path.len() + e.reason.len()) as u64, 0, 1, 0);
                if let Some((id, content)) = self.tree.read().nodes.get(&h.ino).map(|n| n.content())
                {
                    w.committed(id, content);
                }
                // Like an NFS stale handle, it stays stale: later writes through it would
                // rest on the same outdated content (SQLite would roll back over another
                // process's commit).
                if e.errno == libc::ESTALE {
                    w.poisoned = Some(e.clone());
                }
                if let Some(n) = self.tree.write().nodes.get_mut(&h.ino) {
                    n.pending_size = None;
                    n.cached_version = 0;
                }
                drop(guard);
                self.invalidate(Invalidation::Attr(ino));
                self.invalidate(Invalidation::Data(ino));
                log::warn!("commit refused: {e}");
                Err(e)
            }
        }
    }

    /// The commit path: one store transaction, then the inode and the kernel's caches.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn commit(
        &self,
        ino: u64,
        op: &str,
        expect_head: Option<i64>,
        build: Build<'_>,
        source: &mut dyn FnMut(u64, &mut [u8]) -> std::io::Result<()>,
        caller: &Caller,
        durable: bool,
    ) -> Result<VersionInfo> {
        self.commit_from(
            ino,
            op,
            expect_head,
            build,
            source,
            caller,
            durable,
            None,
            None,
            None,
        )
    }

    /// Adds to `inputs` version `k`, whose bytes a commit keeps, and the earlier versions
    /// of its lineage `k` was made from, the newest of each other writer's (a writer: a
    /// name and a uid; [`crate::store::History::lineage_inputs`], at most
    /// [`KEPT_WRITERS`]): a partial overwrite of a partial overwrite still names the
    /// writer of the bytes both kept, so `why` leads to it and the policy keeps it (Known
    /// open of session 33: after two one-byte overwrites by the agent, `keep: {versions:
    /// 1}` forgot root's version).
    /// Bounded by the writers, not by the chain's length: each version names at most one
    /// version of each other writer, other users' (uids other than `caller_uid`) first.
    fn name_kept(&self, inputs: &mut Vec<crate::store::Input>, k: i64, caller_uid: u32) {
        let now = now_ns();
        let mut add = |version_id: i64| {
            if !inputs.iter().any(|i| i.version_id == version_id) {
                inputs.push(crate::store::Input {
                    version_id,
                    read_ns: now,
                });
            }
        };
        add(k);
        match self.store.lineage_inputs(k) {
            Ok(mut earlier) => {
                // Other users' versions first (a stable sort keeps each group newest
                // first): the cap is reached by writers of the committer's own uid last,
                // so that an agent claiming 16 writer names cannot push root's version out
                // (attack round of session 34).
                earlier.sort_by_key(|(_, _, uid)| *uid == caller_uid);
                let mut writers: Vec<(String, u32)> = Vec::new();
                for (id, writer, uid) in earlier {
                    if writers.len() >= KEPT_WRITERS {
                        break;
                    }
                    let who = (writer, uid);
                    if !writers.contains(&who) {
                        writers.push(who);
                        add(id);
                    }
                }
            }
            Err(e) => log::warn!("reading what version {k} was made from: {e}"),
        }
    }

    /// [`Fs::commit`] of content brought from another scratchpad, `origin` naming the
    /// version it copies (`adopt`, issue 14), or brought back from this one, `restores`
    /// naming the version whose bytes it brings back (`restore`, issue 35); `kept` names
    /// a version whose bytes the content keeps without the caller having read it (a
    /// partial overwrite through a write-only handle, a truncation to a shorter length),
    /// an input of the new version as a read is (docs/SEMANTICS.md "Lineage").
    #[allow(clippy::too_many_arguments)]
    pub(super) fn commit_from(
        &self,
        ino: u64,
        op: &str,
        expect_head: Option<i64>,
        build: Build<'_>,
        source: &mut dyn FnMut(u64, &mut [u8]) -> std::io::Result<()>,
        caller: &Caller,
        durable: bool,
        origin: Option<&crate::store::Origin>,
        restores: Option<i64>,
        kept: Option<i64>,
    ) -> Result<VersionInfo> {
        let (path, file_id, pinned) = {
            let tree = self.tree.read();
            let n = tree.get(ino)?;
            (tree.path(ino), n.file_id, n.mtime_pinned)
        };
        let prefix_hasher = file_id.and_then(|f| self.hashers.lock().get(&f).cloned());
        let mut inputs = self.inputs_of(caller);
        if let Some(k) = kept {
            self.name_kept(&mut inputs, k, caller.uid);
        }
        let Committed {
            file_id,
            version,
            hasher,
        } = self.store.commit(CommitRequest {
            ino,
            path: &path,
            op,
            expect_head,
            build,
            source,
            prefix_hasher,
            caller,
            time_ns: now_ns(),
            set_mtime: !pinned,
            durable,
            inputs: &inputs,
            origin,
            restores,
        })?;
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.note_write(caller, file_id, version.id);
        {
            let mut hashers = self.hashers.lock();
            if hashers.len() >= HASHER_CACHE {
                hashers.clear();
            }
            hashers.insert(file_id, (version.id, hasher));
        }
        {
            let mut tree = self.tree.write();
            if let Some(n) = tree.nodes.get_mut(&ino) {
                if n.head.as_ref().is_none_or(|h| h.id < version.id) {
                    n.head = Some(version.clone());
                    // An explicit mtime set while this commit ran stays.
                    if !pinned && !n.mtime_pinned {
                        n.attrs.mtime_ns = version.time_ns;
                    }
                    n.attrs.ctime_ns = version.time_ns;
                    n.step = caller.step;
                }
                n.pending_size = None;
            }
        }
        self.views.changed(&[ino]);
        Ok(version)
    }
}
