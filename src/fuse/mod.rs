//! The FUSE adapter: implements `fuser::Filesystem` over [`crate::fs::Fs`]. It translates
//! types, logs, catches panics (replying `EIO`, FUSE-TRAPS §15) and replies; it makes no
//! decision of its own.

mod count;
mod notifier;

pub use count::{Opcode, requests};

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

pub use notifier::spawn_notifier;

use crate::error::Error;
use crate::fs::{Attr, Ctx, Fs, SetAttr};
use crate::store::Kind;

/// How long the kernel may cache entries and attributes of nodes. Commits invalidate the
/// attributes explicitly, so this only bounds what a change behind the kernel's back
/// (none today) could leave stale.
const TTL: Duration = Duration::from_secs(1);

/// The `fuser::Filesystem` implementation.
pub struct Adapter {
    fs: Arc<Fs>,
}

impl Adapter {
    /// Wraps the core.
    pub fn new(fs: Arc<Fs>) -> Self {
        Adapter { fs }
    }
}

fn ctx(req: &Request) -> Ctx {
    Ctx {
        pid: req.pid(),
        uid: req.uid(),
        gid: req.gid(),
    }
}

fn errno(e: &Error) -> Errno {
    Errno::from_i32(e.errno)
}

/// A time in ns since the epoch, before 1970 too (xfstests generic/258).
fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn ns(t: TimeOrNow) -> i64 {
    let t = match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    };
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        // fuser 0.18 (src/time.rs, `system_time_from_time`) turns the kernel's
        // (secs < 0, nsec) into EPOCH - (|secs| + nsec) instead of EPOCH - |secs| + nsec:
        // undone here, so 1969-12-31T23:59:58.5 stays that (tests/posix.rs pins it).
        Err(e) => {
            let d = e.duration();
            -(d.as_secs() as i64) * 1_000_000_000 + i64::from(d.subsec_nanos())
        }
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: time(a.attrs.atime_ns),
        mtime: time(a.attrs.mtime_ns),
        ctime: time(a.attrs.ctime_ns),
        crtime: time(a.attrs.ctime_ns),
        kind: match a.kind {
            Kind::Dir => FileType::Directory,
            Kind::File => FileType::RegularFile,
        },
        perm: a.attrs.mode as u16,
        nlink: a.nlink,
        uid: a.attrs.uid,
        gid: a.attrs.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn ttl(a: &Attr) -> Duration {
    if a.volatile { Duration::ZERO } else { TTL }
}

fn entry_ttl(a: &Attr) -> Duration {
    if a.synthesized { Duration::ZERO } else { TTL }
}

fn fopen(of: crate::fs::OpenFlags) -> FopenFlags {
    let mut f = FopenFlags::empty();
    if of.direct_io {
        f |= FopenFlags::FOPEN_DIRECT_IO;
    }
    if of.keep_cache {
        f |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    if of.noflush {
        f |= FopenFlags::FOPEN_NOFLUSH;
    }
    if of.cache_dir {
        f |= FopenFlags::FOPEN_CACHE_DIR;
    }
    f
}

/// Replies to getxattr/listxattr: the size when asked for it (`size` 0), `ERANGE` when
/// the caller's buffer is too small (getxattr(2)).
fn xattr_reply(r: crate::error::Result<Vec<u8>>, size: u32, reply: ReplyXattr) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(errno(&e)),
    }
}

/// Runs `f`, turning a panic into `EIO` so that one bad request cannot wedge the mount.
fn guard<T>(op: Opcode, f: impl FnOnce() -> crate::error::Result<T>) -> crate::error::Result<T> {
    count::count(op);
    let op = op.name();
    let t0 = std::time::Instant::now();
    let r = catch_unwind(AssertUnwindSafe(f));
    log::trace!("{op} took {} us", t0.elapsed().as_micros());
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            log::debug!("{op}: {e}");
            Err(e)
        }
        Err(_) => {
            log::error!("{op}: panicked; replying EIO");
            Err(Error::new(libc::EIO, format!("{op}: internal error")))
        }
    }
}

impl Filesystem for Adapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Shared mmap on direct-I/O (write) handles; not fatal on older kernels.
        let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // Listings carry attributes (READDIRPLUS), so `rm -rf`, `ls -l`, `find` and
        // `git status` need no LOOKUP per entry; AUTO lets the kernel use plain READDIR
        // when no lookups follow.
        let _ = config
            .add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        // O_TRUNC arrives with the open instead of as a separate setattr without a handle
        // (FUSE-TRAPS §4), so the truncation belongs to the handle's private copy.
        let _ = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC);
        Ok(())
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        match guard(Opcode::Readdirplus, || {
            self.fs.readdirplus(ino.0, offset, 4096)
        }) {
            Ok(entries) => {
                let mut sent = true;
                for (e, a) in entries {
                    let counted = e.name != b"." && e.name != b"..";
                    if sent {
                        // One TTL for the entry and its attributes: the shorter.
                        let t = ttl(&a).min(entry_ttl(&a));
                        sent = !reply.add(
                            INodeNo(e.ino),
                            e.next_offset,
                            OsStr::from_bytes(&e.name),
                            &t,
                            &file_attr(&a),
                            Generation(0),
                        );
                    }
                    if !sent && counted {
                        // Not sent (the buffer is full): the kernel holds no reference.
                        self.fs.forget(e.ino, 1);
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match guard(Opcode::Lookup, || {
            self.fs.lookup_for(parent.0, name.as_bytes(), ctx(req))
        }) {
            Ok(a) => reply.entry_with_ttls(&ttl(&a), &entry_ttl(&a), &file_attr(&a), Generation(0)),
            // A negative entry (node id 0, FUSE protocol) lets the kernel cache "no such
            // file" for the entry TTL; creating the name through the mount replaces it.
            Err(e) if e.errno == libc::ENOENT => {
                let mut none = file_attr(&Attr {
                    ino: 0,
                    kind: Kind::File,
                    size: 0,
                    attrs: crate::store::Attrs {
                        mode: 0,
                        uid: 0,
                        gid: 0,
                        atime_ns: 0,
                        mtime_ns: 0,
                        ctime_ns: 0,
                    },
                    nlink: 0,
                    volatile: true,
                    synthesized: false,
                });
                none.ino = INodeNo(0);
                // A view name (`x.outline`) appears with its file: never cache its absence.
                let ttl = if !self.fs.absence_cacheable(parent.0, name.as_bytes()) {
                    Duration::ZERO
                } else {
                    TTL
                };
                reply.entry_with_ttls(&Duration::ZERO, &ttl, &none, Generation(0))
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _ = guard(Opcode::Forget, || {
            self.fs.forget(ino.0, nlookup);
            Ok(())
        });
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match guard(Opcode::Getattr, || self.fs.getattr_for(ino.0, ctx(req))) {
            Ok(a) => reply.attr(&ttl(&a), &file_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime_ns: atime.map(ns),
            mtime_ns: mtime.map(ns),
        };
        match guard(Opcode::Setattr, || {
            self.fs.setattr(ino.0, set, fh.map(|f| f.0), ctx(req))
        }) {
            Ok(a) => reply.attr(&ttl(&a), &file_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match guard(Opcode::Fallocate, || {
            self.fs.fallocate(fh.0, offset, length, mode, ctx(req))
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        match guard(Opcode::Mknod, || self.fs.mknod()) {
            Ok(never) => match never {},
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        match guard(Opcode::Mkdir, || {
            self.fs
                .mkdir(parent.0, name.as_bytes(), mode, umask, ctx(req))
        }) {
            Ok(a) => reply.entry_with_ttls(&ttl(&a), &TTL, &file_attr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match guard(Opcode::Unlink, || {
            self.fs.remove(parent.0, name.as_bytes(), false, ctx(req))
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match guard(Opcode::Rmdir, || {
            self.fs.remove(parent.0, name.as_bytes(), true, ctx(req))
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match guard(Opcode::Rename, || {
            self.fs.rename(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                flags.bits(),
                ctx(req),
            )
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match guard(Opcode::Open, || self.fs.open(ino.0, flags.0, ctx(req))) {
            Ok((fh, of)) => reply.opened(FileHandle(fh), fopen(of)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match guard(Opcode::Read, || self.fs.read(fh.0, offset, size)) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match guard(Opcode::Write, || self.fs.write(fh.0, offset, data)) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        match guard(Opcode::Flush, || self.fs.flush(fh.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        match guard(Opcode::Release, || self.fs.release(fh.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match guard(Opcode::Fsync, || self.fs.fsync(fh.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match guard(Opcode::Opendir, || self.fs.opendir(ino.0)) {
            Ok(of) => reply.opened(FileHandle(0), fopen(of)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match guard(Opcode::Readdir, || self.fs.readdir(ino.0, offset, 4096)) {
            Ok(entries) => {
                for e in entries {
                    let kind = match e.kind {
                        Kind::Dir => FileType::Directory,
                        Kind::File => FileType::RegularFile,
                    };
                    if reply.add(
                        INodeNo(e.ino),
                        e.next_offset,
                        kind,
                        OsStr::from_bytes(&e.name),
                    ) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match guard(Opcode::Fsyncdir, || self.fs.fsyncdir()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match guard(Opcode::Statfs, || self.fs.statfs()) {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        xattr_reply(
            guard(Opcode::Getxattr, || {
                self.fs.getxattr(ino.0, name.as_bytes(), ctx(req))
            }),
            size,
            reply,
        );
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        xattr_reply(
            guard(Opcode::Listxattr, || self.fs.listxattr(ino.0)),
            size,
            reply,
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        match guard(Opcode::Setxattr, || {
            self.fs.setxattr(ino.0, name.as_bytes(), value, ctx(req))
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        match guard(Opcode::Removexattr, || {
            self.fs.setxattr(ino.0, b"", b"", ctx(req))
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match guard(Opcode::Create, || {
            self.fs
                .create(parent.0, name.as_bytes(), mode, umask, flags, ctx(req))
        }) {
            Ok((a, fh, of)) => reply.created(
                &ttl(&a),
                &file_attr(&a),
                Generation(0),
                FileHandle(fh),
                fopen(of),
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
