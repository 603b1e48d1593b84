//! Operations on names: create, mkdir, unlink, rmdir and rename (SPEC §3, §4). Each
//! change passes the gate ([`super::gate`]) before the store is asked.

use super::gate::{Change, Move, check_not_reserved, check_not_view};
use super::tree::{Node, check_name};
use super::{Attr, Ctx, Fs, OpenFlags, ROOT, now_ns};
use crate::error::{Error, Result};
use crate::identity::Caller;
use crate::store::{Attrs, Build, ErrorKind, Kind, RenameRequest};

impl Fs {
    pub(super) fn new_attrs(
        &self,
        ctx: Ctx,
        mode: u32,
        umask: u32,
        parent: &Node,
        kind: Kind,
    ) -> Attrs {
        let now = now_ns();
        // A setgid parent directory passes its group on, and to directories its setgid
        // bit too (inode(7), "The set-group-ID bit").
        let setgid = parent.attrs.mode & 0o2000 != 0;
        let gid = if setgid { parent.attrs.gid } else { ctx.gid };
        let inherit = if setgid && kind == Kind::Dir {
            0o2000
        } else {
            0
        };
        Attrs {
            mode: (mode & !umask & 0o7777) | inherit,
            uid: ctx.uid,
            gid,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
        }
    }

    /// A file deleted at `name` in `parent` whose handles are still open (the kernel
    /// sends a release after close(2) returns: vim closes its swap file, unlinks it and
    /// makes it again at once) commits what they hold now, before a new file there
    /// continues its lineage (issue 11): a commit of the deleted file after the new file's
    /// birth would read as the new file's version (the new file's first commit was then
    /// refused as a lost update).
    fn settle_orphans_at(&self, parent: u64, name: &[u8]) {
        // Almost always none: a create then touches no handle.
        let any = {
            let tree = self.tree.read();
            tree.orphans.iter().any(|i| {
                tree.nodes
                    .get(i)
                    .is_some_and(|n| n.parent == parent && *n.name == *name)
            })
        };
        if !any {
            return;
        }
        // The map's lock is let go before any handle's (the lock order, src/sync.rs).
        let open: Vec<(u64, _)> = self
            .handles
            .lock()
            .iter()
            .map(|(&fh, h)| (fh, h.clone()))
            .collect();
        let handles: Vec<(u64, u64)> = open.into_iter().map(|(fh, h)| (fh, h.lock().ino)).collect();
        let due: Vec<u64> = {
            let tree = self.tree.read();
            handles
                .into_iter()
                .filter(|&(_, ino)| {
                    tree.nodes
                        .get(&ino)
                        .is_some_and(|n| n.orphan && n.parent == parent && *n.name == *name)
                })
                .map(|(fh, _)| fh)
                .collect()
        };
        for fh in due {
            if let Err(e) = self.commit_handle(fh, false, true) {
                log::debug!("settling deleted file's handle {fh}: {e}");
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn make(
        &self,
        parent: u64,
        name: &[u8],
        kind: Kind,
        mode: u32,
        umask: u32,
        ctx: Ctx,
        caller: &Caller,
    ) -> Result<Attr> {
        check_name(name)?;
        check_not_reserved(parent, name)?;
        check_not_view(parent)?;
        if kind == Kind::File {
            self.settle_orphans_at(parent, name);
        }
        let mut tree = self.tree.write();
        let pnode = tree.dir(parent)?;
        if pnode.orphan {
            return Err(Error::new(libc::ENOENT, "parent directory was removed"));
        }
        if pnode.child(name).is_some() {
            return Err(Error::new(
                libc::EEXIST,
                format!("{}: file exists", tree.child_path(parent, name)),
            ));
        }
        let attrs = self.new_attrs(ctx, mode, umask, pnode, kind);
        let path = tree.child_path(parent, name);
        let wal_index = kind == Kind::File && tree.is_sqlite_wal_index(parent, name);
        let change = Change::Create {
            path: &path,
            kind,
            wal_index,
        };
        self.admit(caller, &change, || None)?;
        // Files and directories alike: inodes (issue 36; a pad of empty directories grew
        // 24 MB past a full quota), and the create's record.
        self.quota_allows_file(caller, &path)?;
        let what = if kind == Kind::Dir { "mkdir" } else { "create" };
        let _quota_hold = self.quota_allows_event(caller, &path, what)?;
        let rec = match self.store.create(parent, name, &path, kind, attrs, caller) {
            Ok(rec) => rec,
            Err(e) if e.is(ErrorKind::Exists) => {
                // The store has the name and this core did not: another daemon made it
                // (PostgreSQL). It becomes visible here before the EEXIST is returned, so
                // that what the caller does next (mkdir -p's stat, an open without
                // O_EXCL) finds it.
                drop(tree);
                if let Err(r) = self.refresh_in_request() {
                    log::warn!("refreshing after {path} was made elsewhere: {r}");
                }
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        let ino = rec.ino;
        self.usage_added(path.len() as u64, 0, 1, 1);
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut node = Node::from_record(rec);
        node.nlookup = 1;
        tree.nodes.insert(ino, node);
        tree.attach(parent, ino, name, kind);
        self.views.changed(&[ino]);
        tree.attr(ino)
    }

    /// `mkdir`.
    pub fn mkdir(&self, parent: u64, name: &[u8], mode: u32, umask: u32, ctx: Ctx) -> Result<Attr> {
        self.make(parent, name, Kind::Dir, mode, umask, ctx, &self.caller(ctx))
    }

    /// `create`: a new empty file and an open handle on it, which owes the file's first
    /// version (op `create`: empty, or what the handle writes before its release).
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        flags: i32,
        ctx: Ctx,
    ) -> Result<(Attr, u64, OpenFlags)> {
        let caller = self.caller(ctx);
        let made = self.make(parent, name, Kind::File, mode, umask, ctx, &caller);
        let attr = match made {
            // open(2) without O_EXCL opens the file that is there: another daemon of the
            // same database made the name meanwhile (PostgreSQL, docs/SEMANTICS.md), or
            // the kernel's negative entry was stale.
            Err(e) if e.errno == libc::EEXIST && flags & libc::O_EXCL == 0 => {
                return self.open_existing(parent, name, flags, ctx, e);
            }
            made => made?,
        };
        // The handle is opened as the caller just resolved (one resolution per request,
        // issue 32: it was two reads of `/proc/PID/stat` per create).
        match self.acting_as(caller, || self.open_inner(attr.ino, flags, ctx, false)) {
            Ok((fh, of)) => Ok((attr, fh, of)),
            Err(e) => {
                self.forget(attr.ino, 1);
                Err(e)
            }
        }
    }

    /// The rest of a `create` without `O_EXCL` whose name exists (`exists`, the error
    /// that said so): the file there is looked up (the tree refreshed from the store first
    /// when this core does not know the name yet) and opened as `open(2)` would, with the
    /// access checks the kernel makes for an open (`EACCES`), `EISDIR` for a directory.
    /// The reply counts one kernel reference, as a create's entry does.
    fn open_existing(
        &self,
        parent: u64,
        name: &[u8],
        flags: i32,
        ctx: Ctx,
        exists: Error,
    ) -> Result<(Attr, u64, OpenFlags)> {
        let known = self.tree.read().child(parent, name)?.is_some();
        if !known {
            self.refresh_in_request()?;
        }
        let attr = match self.lookup(parent, name) {
            Ok(a) => a,
            Err(_) => return Err(exists),
        };
        let out = (|| {
            if attr.kind == Kind::Dir {
                return Err(Error::new(
                    libc::EISDIR,
                    format!("{}: is a directory", self.tree.read().path(attr.ino)),
                ));
            }
            let acc = flags & libc::O_ACCMODE;
            let mut mask = 0;
            if acc == libc::O_RDONLY || acc == libc::O_RDWR {
                mask |= libc::R_OK;
            }
            if acc == libc::O_WRONLY || acc == libc::O_RDWR || flags & libc::O_TRUNC != 0 {
                mask |= libc::W_OK;
            }
            self.access(attr.ino, mask, ctx)?;
            self.open_inner(attr.ino, flags, ctx, true)
        })();
        match out {
            Ok((fh, of)) => Ok((attr, fh, of)),
            Err(e) => {
                self.forget(attr.ino, 1);
                Err(e)
            }
        }
    }

    /// Creates the default layout of a new scratchpad (SPEC §3) as the internal writer
    /// `scratchfs`, owned by `owner` (uid, gid): each `(name, content)` becomes a file
    /// with mode 0644 and one version (op `create`) holding the content.
    pub fn seed(&self, files: &[(&str, &[u8])], owner: (u32, u32)) -> Result<()> {
        let caller = Caller::internal("scratchfs");
        let ctx = Ctx {
            pid: 0,
            uid: owner.0,
            gid: owner.1,
        };
        for (name, content) in files {
            let a = self.make(ROOT, name.as_bytes(), Kind::File, 0o644, 0, ctx, &caller)?;
            self.forget(a.ino, 1);
            let mut src = |off: u64, buf: &mut [u8]| {
                buf.copy_from_slice(&content[off as usize..off as usize + buf.len()]);
                Ok(())
            };
            let build = Build::Append {
                len: content.len() as u64,
            };
            self.commit(a.ino, "create", None, build, &mut src, &caller, false)?;
        }
        Ok(())
    }

    /// `unlink` (files) and `rmdir` (empty directories, else `ENOTEMPTY`). Every version
    /// is kept; the node stays while the kernel or a handle refers to it.
    pub fn remove(&self, parent: u64, name: &[u8], dir: bool, ctx: Ctx) -> Result<()> {
        check_not_view(parent)?;
        if self.view_by_name(parent, name)?.is_some() {
            return Err(Error::new(libc::EACCES, "views are read-only"));
        }
        let caller = self.caller(ctx);
        let mut tree = self.tree.write();
        let path = tree.child_path(parent, name);
        let ino = tree
            .child(parent, name)?
            .ok_or_else(|| Error::not_found(&path))?;
        let node = tree.get(ino)?;
        match (dir, node.kind) {
            (true, Kind::File) => {
                return Err(Error::new(
                    libc::ENOTDIR,
                    format!("{path}: not a directory"),
                ));
            }
            (false, Kind::Dir) => {
                return Err(Error::new(libc::EISDIR, format!("{path}: is a directory")));
            }
            (true, Kind::Dir) if node.has_children() => {
                return Err(Error::new(
                    libc::ENOTEMPTY,
                    format!("{path}: directory not empty"),
                ));
            }
            _ => {}
        }
        let (kind, file_id) = (node.kind, node.file_id);
        let content = match &node.head {
            Some(h) if self.gate.has_fields(&path) => Some(self.bytes_of(h.content)?),
            _ => None,
        };
        let change = Change::Remove {
            path: &path,
            kind,
            content: content.as_deref(),
        };
        self.admit(&caller, &change, || None)?;
        let recorded = self.recorded_caller(&caller);
        self.store
            .unlink(ino, file_id, &path, &recorded, now_ns())?;
        self.usage_added(path.len() as u64, 0, 1, -1);
        tree.detach(parent, ino, name, kind);
        tree.get_mut(ino)?.attrs.ctime_ns = now_ns();
        tree.make_orphan(ino);
        self.views.changed(&[ino]);
        Ok(())
    }

    /// `rename`. `flags` are renameat2 flags: `RENAME_NOREPLACE` is honoured,
    /// `RENAME_EXCHANGE` and others get `EINVAL`. Replacing a file gives the target path a
    /// new version (op `rename`) on the target's lineage.
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: u32,
        ctx: Ctx,
    ) -> Result<()> {
        match self.rename_once(parent, name, new_parent, new_name, flags, ctx) {
            // Without RENAME_NOREPLACE only the store says EEXIST: another daemon of the
            // same database made the target name meanwhile (PostgreSQL). Once this core
            // knows it, the rename replaces it, as rename(2) does.
            Err(e) if e.errno == libc::EEXIST && flags & libc::RENAME_NOREPLACE == 0 => {
                self.refresh_in_request()?;
                self.rename_once(parent, name, new_parent, new_name, flags, ctx)
            }
            out => out,
        }
    }

    /// [`Fs::rename`], once.
    fn rename_once(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: u32,
        ctx: Ctx,
    ) -> Result<()> {
        const NOREPLACE: u32 = libc::RENAME_NOREPLACE;
        if flags & !NOREPLACE != 0 {
            return Err(Error::new(
                libc::EINVAL,
                "rename flags other than RENAME_NOREPLACE are not supported",
            ));
        }
        check_name(new_name)?;
        check_not_view(parent)?;
        check_not_view(new_parent)?;
        if self.view_by_name(parent, name)?.is_some() {
            return Err(Error::new(libc::EACCES, "views are read-only"));
        }
        check_not_reserved(new_parent, new_name)?;
        let caller = self.caller(ctx);
        // No commit is between its gate check and its store transaction meanwhile.
        let _ns = self.ns_guard.write();
        let mut tree = self.tree.write();
        let old_path = tree.child_path(parent, name);
        let new_path = tree.child_path(new_parent, new_name);
        let ino = tree
            .child(parent, name)?
            .ok_or_else(|| Error::not_found(&old_path))?;
        let (kind, file_id) = {
            let n = tree.get(ino)?;
            (n.kind, n.file_id)
        };
        let existing = tree.child(new_parent, new_name)?;
        if existing == Some(ino) {
            return Ok(());
        }
        if kind == Kind::Dir {
            // A directory may not move below itself.
            let mut at = new_parent;
            while at != ROOT {
                if at == ino {
                    return Err(Error::new(
                        libc::EINVAL,
                        format!("{old_path}: cannot move a directory into itself"),
                    ));
                }
                at = tree.get(at)?.parent;
            }
        }
        let mut replaced = None;
        if let Some(old) = existing {
            if flags & NOREPLACE != 0 {
                return Err(Error::new(libc::EEXIST, format!("{new_path}: file exists")));
            }
            let o = tree.get(old)?;
            match (kind, o.kind) {
                (Kind::File, Kind::Dir) => {
                    return Err(Error::new(
                        libc::EISDIR,
                        format!("{new_path}: is a directory"),
                    ));
                }
                (Kind::Dir, Kind::File) => {
                    return Err(Error::new(
                        libc::ENOTDIR,
                        format!("{new_path}: not a directory"),
                    ));
                }
                (Kind::Dir, Kind::Dir) if o.has_children() => {
                    return Err(Error::new(
                        libc::ENOTEMPTY,
                        format!("{new_path}: directory not empty"),
                    ));
                }
                _ => {}
            }
            replaced = Some((old, o.file_id));
        }
        // What moves: the node itself, and for a directory every path under it, each
        // judged by the gate as a delete at the old path and a create at the new one.
        let mut moves = vec![Move {
            from: old_path.clone(),
            to: new_path.clone(),
            kind,
            content: None,
        }];
        let mut moved_files = Vec::new();
        if kind == Kind::Dir {
            let mut stack = vec![(ino, old_path.clone(), new_path.clone())];
            while let Some((d, from, to)) = stack.pop() {
                for (cname, c) in tree.get(d)?.children() {
                    let cname = crate::store::paths::encode(cname);
                    let (cf, ct) = (format!("{from}/{cname}"), format!("{to}/{cname}"));
                    let cn = tree.get(c)?;
                    if cn.kind == Kind::Dir {
                        stack.push((c, cf.clone(), ct.clone()));
                    } else if let Some(f) = cn.file_id {
                        moved_files.push((f, ct.clone()));
                    }
                    moves.push(Move {
                        content: self.move_content(cn.head.as_ref(), &cf, &ct)?,
                        from: cf,
                        to: ct,
                        kind: cn.kind,
                    });
                }
            }
        } else {
            moves[0].content =
                self.move_content(tree.get(ino)?.head.as_ref(), &old_path, &new_path)?;
        }
        let replaced_content = match replaced {
            Some((old, _)) if kind == Kind::File && self.gate.has_fields(&new_path) => {
                match &tree.get(old)?.head {
                    Some(h) => Some(self.bytes_of(h.content)?),
                    None => None,
                }
            }
            _ => None,
        };
        let change = Change::Rename {
            moves: &moves,
            replaces: replaced.is_some(),
            replaced: replaced_content.as_deref(),
        };
        self.admit(&caller, &change, || {
            moves.first().and_then(|m| m.content.clone())
        })?;
        // A rename is an event and a file's a version too (issue 36: their records count
        // against the quota).
        let versioned = kind == Kind::File && tree.get(ino)?.head.is_some();
        let _quota_hold =
            self.quota_allows_rename(&caller, &new_path, old_path.len(), versioned)?;
        let t = now_ns();
        let renamed = self.store.rename(RenameRequest {
            ino,
            kind,
            file_id,
            new_parent,
            new_name,
            old_path: &old_path,
            new_path: &new_path,
            replaced,
            moved_files,
            caller: &caller,
            time_ns: t,
            lost_update_check: !self.overwrites_path(&new_path),
        });
        // A lost update refused (`ESTALE`) is on record: its event counts against the
        // quota as any refusal's (attack round of session 33).
        if let Err(e) = &renamed
            && e.is(ErrorKind::Stale)
        {
            self.usage_added((new_path.len() + e.reason.len()) as u64, 0, 1, 0);
        }
        let (lineage, version) = renamed?;
        if let Some((old, old_fid)) = replaced {
            let okind = tree.get(old)?.kind;
            // The replaced node's row in the namespace log, and one live node fewer.
            self.usage_added(new_path.len() as u64, 0, 1, -1);
            tree.detach(new_parent, old, new_name, okind);
            tree.get_mut(old)?.file_id = None;
            tree.make_orphan(old);
            if kind == Kind::File {
                tree.get_mut(ino)?.file_id = old_fid;
            }
        }
        tree.detach(parent, ino, name, kind);
        tree.attach(new_parent, ino, new_name, kind);
        let paths =
            old_path.len() + new_path.len() + version.as_ref().map_or(0, |_| new_path.len());
        self.usage_added(paths as u64, u64::from(version.is_some()), 1, 0);
        let n = tree.get_mut(ino)?;
        n.parent = new_parent;
        n.name = new_name.into();
        n.attrs.ctime_ns = t;
        if kind == Kind::File && lineage.is_some() {
            n.file_id = lineage;
        }
        if let Some(v) = version
            && n.head.as_ref().is_none_or(|h| h.id < v.id)
        {
            if let Some(fid) = n.file_id {
                self.note_write(&caller, fid, v.id);
            }
            n.head = Some(v);
            n.step = caller.step;
        }
        match replaced {
            Some((old, _)) => self.views.changed(&[ino, old]),
            None => self.views.changed(&[ino]),
        }
        Ok(())
    }

    /// The content of a file that moves from `from` to `to`, when the gate needs it.
    fn move_content(
        &self,
        head: Option<&crate::store::VersionInfo>,
        from: &str,
        to: &str,
    ) -> Result<Option<Vec<u8>>> {
        match head {
            Some(h) if self.gate.move_needs_content(from, to) => {
                Ok(Some(self.bytes_of(h.content)?))
            }
            _ => Ok(None),
        }
    }
}
