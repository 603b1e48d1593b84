//! Changes to a file's history rather than its content: restore (a commit of an old
//! version's bytes) and gc (forgetting versions). Both pass the gate.

use std::sync::Arc;

use super::gate::Change;
use super::handle::Slot;
use super::{Ctx, Fs, Invalidation};
use crate::error::{Error, Result};
use crate::store::Build;

/// The `meta` row where a gc that failed before it began (on PostgreSQL: a daemon that
/// did not say what it has open, `EBUSY`) leaves `TIME_NS REASON` for the command that
/// asked through the mount, which gets only the errno back (docs/schema.md).
pub const GC_FAILURE: &str = "last_gc_failure";

impl Fs {
    /// Makes version `n` of the file at `ino` its current version again, as a new version
    /// with op `restore` that shares the old version's content (SPEC §2 `restore`).
    /// `ENOENT` when the file has no version `n`. Reads no content unless the path's rule
    /// judges content (`format`, `max_bytes`, `deny_secrets`, `fields`) or is
    /// `append-only`: then the gate gets both versions whole, as a write's commit does.
    pub fn restore(&self, ino: u64, n: i64, ctx: Ctx) -> Result<()> {
        if n < 1 {
            return Err(Error::new(
                libc::EINVAL,
                format!("restore: version numbers start at 1, not {n}"),
            ));
        }
        let _gc = self.gc_guard.read();
        let file_id = self
            .tree
            .read()
            .get(ino)?
            .file_id
            .ok_or_else(|| Error::new(libc::EISDIR, "restore: not a file"))?;
        let v = self
            .store
            .versions(file_id)?
            .into_iter()
            .find(|v| v.number == n)
            .ok_or_else(|| Error::new(libc::ENOENT, format!("restore: no version {n}")))?;
        let caller = self.caller(ctx);
        // Old bytes brought back into a file its caller may read: only bytes the caller
        // could read where they were written (issue 31); refused on record, as the gate's
        // refusals are.
        let at = self.tree.read().path(ino);
        if let Err(e) = self.may_read_version(v.id, ctx, &format!("restore: {at}@{n}")) {
            self.record_remote_refusal(&at, &caller, &e);
            return Err(e);
        }
        let _ns = self.ns_guard.read();
        // A commit of old content by the caller: the same checks as a write of it.
        let path = self.tree.read().path(ino);
        if self.gate.has_rules() {
            let append_only = self
                .gate
                .rules
                .load()
                .as_deref()
                .and_then(|r| r.rule_for(&path))
                .is_some_and(|r| r.mode == crate::rules::Mode::AppendOnly);
            let (current, restored) = if append_only || self.gate.needs_content(&path) {
                (self.current_bytes(ino)?, self.bytes_of(v.content)?)
            } else {
                // Nothing in the rule looks at the bytes.
                (Vec::new(), Vec::new())
            };
            let change = Change::Restore {
                path: &path,
                current: &current,
                restored: &restored,
            };
            self.admit(&caller, &change, || Some(restored.clone()))?;
        }
        // The pad's quota (issue 36): a restore is a version (its record) and may store
        // the restored bytes again.
        let _quota_hold = self.quota_allows_bytes(&caller, &path, v.content.len, || None)?;
        let before = self.tree.read().get(ino)?.head.as_ref().map(|h| h.id);
        let mut none = |_: u64, _: &mut [u8]| Ok(());
        let build = Build::Overlay {
            base: v.content,
            base_limit: v.content.len,
            size: v.content.len,
            dirty: &[],
        };
        let made = self.commit_from(
            ino,
            "restore",
            None,
            build,
            &mut none,
            &caller,
            false,
            None,
            Some(v.id),
            None,
        )?;
        if Some(made.id) != before {
            self.usage_added(v.content.len + path.len() as u64, 1, 0, 0);
        }
        // The kernel's size and pages are those of the version restored over.
        self.invalidate(Invalidation::Attr(ino));
        Ok(())
    }

    /// Runs `gc` in the store for the caller of `ctx`, keeping the content every open
    /// handle still reads. Only root and the user who mounted may (`EPERM`, recorded);
    /// the run is an event in the log.
    pub fn gc(&self, req: &crate::store::GcRequest, ctx: Ctx) -> Result<crate::store::GcReport> {
        let caller = self.caller(ctx);
        self.admit(
            &caller,
            &Change::Erase {
                what: "gc",
                path: "",
            },
            || None,
        )?;
        // What other daemons of a shared database have open is kept too, asked first
        // (it may take a while; this daemon goes on meanwhile). A version another daemon
        // opens after answering was live then (gc keeps those), or is read through
        // `.history`, where a read of a swept version fails with EIO, never other bytes.
        let elsewhere = self.store.open_elsewhere().inspect_err(|e| {
            // A setxattr carries back only the errno: the command line reads the reason
            // (the daemons that did not answer) here.
            let note = format!("{} {}", crate::store::sql::now_ns(), e.reason);
            if let Err(m) = self.store.set_meta(GC_FAILURE, &note) {
                log::warn!("gc: recording why it failed: {m}");
            }
        })?;
        let _restores = self.gc_guard.write();
        let mut protected = self.open_contents();
        protected.extend(elsewhere);
        let shown: Vec<i64> = self
            .restorable_shown()?
            .iter()
            .map(|r| r.version_id)
            .collect();
        let report = self.store.gc(req, &shown, &protected, &caller)?;
        // The history index's rows of what gc forgot went with them: its newest rows are
        // asked for again.
        if !req.dry_run {
            *self.history_index.lock() = Default::default();
        }
        self.views.changed(&[]);
        Ok(report)
    }

    /// The content every open handle reads, as (stream, len): a reader's version, a
    /// writer's base. gc keeps them (`Store::gc`'s `protected`); on PostgreSQL a gc in
    /// another daemon asks for them ([`crate::store::postgres::notify::Listener`]).
    pub fn open_contents(&self) -> Vec<(i64, u64)> {
        // The pins, not the handles: an operation in progress (a long commit) must not
        // hold up the answer ([`Slot`]).
        let slots: Vec<Arc<Slot>> = self.handles.lock().values().cloned().collect();
        slots
            .iter()
            .filter_map(|s| s.pin())
            .map(|c| (c.stream, c.len))
            .collect()
    }

    /// Redacts version `n` of the file at `path` (live, or the latest deleted file that
    /// was there) for the caller of `ctx`: only root and the user who mounted (`EPERM`,
    /// recorded). The in-memory versions and the kernel's caches of the file, and of
    /// every other file whose content the redaction changed or moved, follow the
    /// redacted content. See [`crate::store::Store::redact`].
    pub fn redact(
        &self,
        path: &str,
        n: i64,
        why: &str,
        ctx: Ctx,
    ) -> Result<crate::store::RedactReport> {
        let caller = self.caller(ctx);
        self.admit(
            &caller,
            &Change::Erase {
                what: "redact",
                path,
            },
            || None,
        )?;
        let lineages = self.store.lineages(path)?;
        let lineage = lineages
            .iter()
            .filter(|l| l.path == path)
            .max_by_key(|l| (l.deleted_ns.is_none(), l.deleted_ns, l.file_id))
            .ok_or_else(|| Error::new(libc::ENOENT, format!("{path}: no such file")))?;
        let file_id = lineage.file_id;
        let _gc = self.gc_guard.write();
        // The reason is a caller's own text, kept with the event: no secret at rest in it
        // either (issue 31).
        let why = String::from_utf8_lossy(&crate::rules::enforce::redact_secrets(why.as_bytes()))
            .into_owned();
        let report = self.store.redact(file_id, n, path, &why, &caller)?;
        // The store dropped the text index (it held the live text).
        *self.text_index.lock() = Default::default();
        *self.history_index.lock() = Default::default();
        // The file's versions, and those of every other file that held a copy.
        let mut files = report.files.clone();
        files.push(file_id);
        {
            let mut hashers = self.hashers.lock();
            for f in &files {
                hashers.remove(f);
            }
        }
        let mut touched = Vec::new();
        {
            let mut tree = self.tree.write();
            for (&ino, node) in tree.nodes.iter_mut() {
                if !node.file_id.is_some_and(|f| files.contains(&f)) {
                    continue;
                }
                if let Some(h) = &node.head {
                    node.head = Some(self.store.version(h.id)?);
                }
                // The page cache may hold the secret: the next open drops it.
                node.forget_old_bytes();
                touched.push(ino);
            }
        }
        self.views.changed(&touched);
        for ino in touched {
            self.invalidate(Invalidation::Attr(ino));
            self.invalidate(Invalidation::Data(ino));
        }
        Ok(report)
    }
}
