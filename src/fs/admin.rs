//! Changes to a file's history rather than its content: restore (a commit of an old
//! version's bytes) and gc (forgetting versions). Both pass the gate.

use std::sync::Arc;

use super::gate::Change;
use super::handle::{Handle, HandleKind};
use super::{Ctx, Fs, Invalidation};
use crate::error::{Error, Result};
use crate::store::Build;
use crate::sync::Mutex;

impl Fs {
    /// Makes version `n` of the file at `ino` its current version again, as a new version
    /// with op `restore` that shares the old version's content (SPEC §2 `restore`).
    /// `ENOENT` when the file has no version `n`.
    pub fn restore(&self, ino: u64, n: i64, ctx: Ctx) -> Result<()> {
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
        // A commit of old content by the caller: the same checks as a write of it.
        let path = self.tree.read().path(ino);
        if self.gate.has_rules() {
            let current = self.current_bytes(ino)?;
            let restored = self.bytes_of(v.content)?;
            let change = Change::Restore {
                path: &path,
                current: &current,
                restored: &restored,
            };
            self.admit(&caller, &change, || Some(restored.clone()))?;
        }
        let mut none = |_: u64, _: &mut [u8]| Ok(());
        let build = Build::Overlay {
            base: v.content,
            base_limit: v.content.len,
            size: v.content.len,
            dirty: &[],
        };
        self.commit(ino, "restore", None, build, &mut none, &caller, false)?;
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
        let _restores = self.gc_guard.write();
        let handles: Vec<Arc<Mutex<Handle>>> = self.handles.lock().values().cloned().collect();
        let mut protected = Vec::new();
        for h in handles {
            match &h.lock().kind {
                HandleKind::Read(c, _) => protected.push((c.stream, c.len)),
                HandleKind::Write(w) => protected.push((w.base.stream, w.base.len)),
                HandleKind::View(_) => {}
            }
        }
        let report = self.store.gc(req, &protected, &caller)?;
        self.views.changed();
        Ok(report)
    }
}
