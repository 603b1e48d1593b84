//! Mounting a scratchpad: open the store, seed a new one, start the FUSE session with the
//! notifier thread, and unmount cleanly on SIGINT/SIGTERM/SIGHUP. Also the recovery of a
//! stale mount left by a killed daemon (FUSE-TRAPS §15) and the check that the database is
//! not under the mount (FUSE-TRAPS §16).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{Config, MountOption, SessionACL};

use crate::fs::Fs;
use crate::fuse::{Adapter, spawn_notifier};
use crate::store::{Sqlite, Store};

/// What a mount needs.
#[derive(Debug, Clone)]
pub struct MountSpec {
    /// Directory to mount on.
    pub mountpoint: PathBuf,
    /// Database file (created if missing).
    pub db: PathBuf,
    /// Owner (uid, gid) of the root and of the default layout of a new database.
    pub owner: (u32, u32),
    /// `owner` was given (`--owner`), not the mounting user by default: on an existing
    /// database whose root another owner holds, the mount is refused ([`check_owner`]).
    pub owner_given: bool,
    /// Let users other than the mounting one in (FUSE `allow_other`).
    pub allow_other: bool,
    /// List the `<file>.outline` views in readdir (they always resolve by name).
    pub list_views: bool,
    /// Writer rules file (SPEC §5); `None`: the defaults of SPEC §3.
    pub rules: Option<PathBuf>,
    /// MANIFEST's budget in estimated tokens (`--manifest-tokens`); `None`: the rules'
    /// `manifest_tokens`, else [`crate::views::manifest::DEFAULT_BUDGET_TOKENS`].
    pub manifest_tokens: Option<usize>,
    /// The mount's source name (/proc/mounts' first field); `None`: the database's absolute
    /// path, its commas (which separate mount options) replaced by `_`.
    pub fsname: Option<String>,
    /// Mount the tree as it was at this checkpoint name or time (`--at NAME|TIME`, issue
    /// 14): read-only (`EROFS`), beside a live mount of the same database; `None`: the
    /// live scratchpad.
    pub at: Option<String>,
}

/// A runtime failure with a one-line message (exit status 1).
pub type Failure = String;

/// Refuses `--owner` on an existing scratchpad whose root another owner holds: the option
/// sets the owner of a new scratchpad's root and layout, and silently changing nothing
/// left the agent with unrecorded `Permission denied` from the kernel. Says what the
/// root's owner is and how to change it.
pub fn check_owner(fs: &Fs, spec: &MountSpec, name: &str) -> Result<(), Failure> {
    if !spec.owner_given {
        return Ok(());
    }
    let root = fs
        .getattr(crate::fs::ROOT)
        .map_err(|e| format!("database {name}: {e}"))?;
    if (root.attrs.uid, root.attrs.gid) == spec.owner {
        return Ok(());
    }
    Err(format!(
        "--owner {}:{}: database {name} already exists and its root is owned by {}:{}; \
         --owner sets the owner of a new scratchpad only. Leave it out, or change the \
         owner once mounted (as root: chown {}:{} {}, recorded like any change)",
        spec.owner.0,
        spec.owner.1,
        root.attrs.uid,
        root.attrs.gid,
        spec.owner.0,
        spec.owner.1,
        spec.mountpoint.display()
    ))
}

/// The files of a new scratchpad (SPEC §3).
pub const DEFAULT_LAYOUT: &[(&str, &[u8])] = &[
    ("plan.md", b""),
    ("findings.md", b""),
    ("state.json", b"{}\n"),
];

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// Whether a FUSE filesystem is mounted exactly at `mp` (an absolute path), read from
/// `/proc/self/mountinfo` without touching the mount itself.
pub fn fuse_mounted_at(mp: &Path) -> bool {
    mounted_at(mp).is_some_and(|t| t.starts_with("fuse"))
}

/// The type of the filesystem mounted exactly at `mp` (an absolute path), the topmost
/// when several are stacked there (`fuse`, `fuse.scratchfs`, `tmpfs`, ...), read from
/// `/proc/self/mountinfo` without touching the mount itself; `None` when nothing is.
pub fn mounted_at(mp: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mp.as_os_str().as_bytes();
    info.lines()
        .filter(|l| l.split(' ').nth(4).map(unescape_mountinfo).as_deref() == Some(want))
        .filter_map(|l| l.split(" - ").nth(1)?.split(' ').next().map(str::to_string))
        .next_back()
}

/// The FUSE mounts of this host whose source (their `fsname`) is `source` exactly, in
/// `/proc/self/mountinfo` order, each with the uid that mounted it (the `user_id=`
/// option the kernel records for FUSE), found without touching any mount: how a command
/// finds a mount of a PostgreSQL database here (a mount's default fsname is the
/// database's [`crate::store::postgres::display_name`]). Anyone may give a mount any
/// fsname: [`crate::cli::live_mountpoint`] checks what it finds.
pub fn mounted_from(source: &str) -> Vec<(PathBuf, Option<u32>)> {
    use std::os::unix::ffi::OsStringExt;
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|l| {
            let mut after = l.split(" - ").nth(1)?.split(' ');
            let (fstype, src) = (after.next()?, after.next()?);
            if !(fstype.starts_with("fuse") && unescape_mountinfo(src) == source.as_bytes()) {
                return None;
            }
            let mp = unescape_mountinfo(l.split(' ').nth(4)?);
            Some((
                PathBuf::from(std::ffi::OsString::from_vec(mp)),
                fuse_owner(after.next().unwrap_or_default()),
            ))
        })
        .collect()
}

/// The FUSE mount that holds `path` (an absolute path): the one mounted at the longest
/// mountpoint that is `path` or one of its parents, with its source (`fsname`: a
/// scratchfs mount's database unless `--fsname` said otherwise). Read from
/// `/proc/self/mountinfo` without touching any mount. `None` when `path` is on no FUSE
/// filesystem.
pub fn fuse_mount_holding(path: &Path) -> Option<(PathBuf, PathBuf)> {
    use std::os::unix::ffi::OsStringExt;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(PathBuf, Option<PathBuf>)> = None;
    for l in info.lines() {
        let Some(mp) = l.split(' ').nth(4).map(unescape_mountinfo) else {
            continue;
        };
        let mp = PathBuf::from(std::ffi::OsString::from_vec(mp));
        if !path.starts_with(&mp)
            || best
                .as_ref()
                .is_some_and(|(b, _)| b.as_os_str().len() > mp.as_os_str().len())
        {
            continue;
        }
        let mut after = l.split(" - ").nth(1).unwrap_or_default().split(' ');
        let fuse = after.next().is_some_and(|t| t.starts_with("fuse"));
        let source = after
            .next()
            .map(|s| PathBuf::from(std::ffi::OsString::from_vec(unescape_mountinfo(s))));
        best = Some((mp, source.filter(|_| fuse)));
    }
    let (mp, source) = best?;
    Some((mp, source?))
}

/// The uid that mounted the FUSE filesystem at `mp` (an absolute path), the topmost
/// there: its `user_id=` super option in `/proc/self/mountinfo`.
pub fn mounted_by(mp: &Path) -> Option<u32> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mp.as_os_str().as_bytes();
    info.lines()
        .filter(|l| l.split(' ').nth(4).map(unescape_mountinfo).as_deref() == Some(want))
        .filter_map(|l| fuse_owner(l.split(" - ").nth(1)?.split(' ').nth(2)?))
        .next_back()
}

/// The `user_id=N` of a FUSE mount's super options (mountinfo's last field).
fn fuse_owner(options: &str) -> Option<u32> {
    options
        .split(',')
        .find_map(|o| o.strip_prefix("user_id="))
        .and_then(|u| u.parse().ok())
}

/// A path as /proc/self/mountinfo writes it, decoded: space, tab, newline and backslash
/// are written as `\ooo` octal escapes (the kernel's `mangle`).
fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && let Some(d) = b.get(i + 1..i + 4)
            && d.iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push(d.iter().fold(0u32, |a, c| a * 8 + u32::from(c - b'0')) as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// How long a mountpoint may take to become free (a killed daemon's mount dying).
const MOUNTPOINT_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Makes `mountpoint` ready for a mount and returns its canonical path: a dead FUSE
/// mount left by a killed daemon ("Transport endpoint is not connected", or "Software
/// caused connection abort" while its connection is being aborted; FUSE-TRAPS §15) is
/// lazily unmounted; a live mount is refused, after waiting up to 3 s in case its
/// daemon is just dying.
pub fn check_mountpoint(mountpoint: &Path) -> Result<PathBuf, Failure> {
    let abs = absolute(mountpoint)?;
    let deadline = std::time::Instant::now() + MOUNTPOINT_WAIT;
    loop {
        match std::fs::metadata(&abs) {
            // A killed daemon's mount answers ENOTCONN, or ECONNABORTED while the kernel
            // is still aborting its connection: either way it is dead.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)) => {
                let c = cstr(&abs);
                let cleared = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0
                    || std::process::Command::new("fusermount3")
                        .args(["-u", "-z"])
                        .arg(&abs)
                        .status()
                        .is_ok_and(|s| s.success());
                if cleared {
                    // Look again at once, however long the dead mount took to answer (a
                    // request in flight when the daemon died waits for the abort).
                    continue;
                }
            }
            Err(e) => return Err(format!("mountpoint {}: {e}", abs.display())),
            Ok(m) if !fuse_mounted_at(&abs) => {
                if !m.is_dir() {
                    return Err(format!("mountpoint {}: not a directory", abs.display()));
                }
                return std::fs::canonicalize(&abs)
                    .map_err(|e| format!("mountpoint {}: {e}", abs.display()));
            }
            Ok(_) if std::time::Instant::now() > deadline => {
                return Err(format!(
                    "mountpoint {}: already mounted (unmount it first)",
                    abs.display()
                ));
            }
            Ok(_) => {}
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "mountpoint {}: a dead mount would not clear",
                abs.display()
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `mountpoint` as /proc/self/mountinfo names a mount there, found without touching a
/// mount: the absolute path without `.` components or a trailing `/`, else with its
/// parent directory's links resolved; else (nothing is mounted at either, so looking
/// is safe) the whole path resolved (a link to a mountpoint).
fn mountinfo_path(mountpoint: &Path) -> Result<PathBuf, Failure> {
    let abs: PathBuf = absolute(mountpoint)?.components().collect();
    if mounted_at(&abs).is_some() {
        return Ok(abs);
    }
    if let (Some(parent), Some(name)) = (abs.parent(), abs.file_name())
        && let Ok(p) = std::fs::canonicalize(parent)
    {
        let p = p.join(name);
        if mounted_at(&p).is_some() {
            return Ok(p);
        }
    }
    Ok(std::fs::canonicalize(&abs).unwrap_or(abs))
}

/// Unmounts the scratchfs mount at `mountpoint`: a plain unmount, lazily if it is busy;
/// falls back to `fusermount3 -u` when not privileged. A mountpoint where nothing is
/// mounted, or another kind of filesystem (any but `fuse` and `fuse.scratchfs`, the
/// types a scratchfs mount has), is refused, naming what is there (exit status 1); a
/// missing directory with the OS's reason. Only the mount table is read, so a dead mount
/// (its daemon killed) is unmounted too. Returns without waiting for the daemon (the
/// daemon's own use, on a signal); `scratchfs unmount` is [`unmount_and_wait`].
pub fn unmount(mountpoint: &Path) -> Result<(), Failure> {
    unmount_how(mountpoint).map(|_| ())
}

/// [`unmount`], saying whether the mount was only detached.
fn unmount_how(mountpoint: &Path) -> Result<Unmounted, Failure> {
    let mp = mountinfo_path(mountpoint)?;
    let shown = mountpoint.display();
    match mounted_at(&mp).as_deref() {
        Some("fuse" | "fuse.scratchfs") => {}
        Some(other) => {
            return Err(format!(
                "unmount {shown}: not a scratchfs mount (a {other} filesystem is mounted there)"
            ));
        }
        None => {
            return Err(match std::fs::metadata(&mp) {
                Err(e) => format!("unmount {shown}: {e}"),
                Ok(_) => {
                    format!("unmount {shown}: not a scratchfs mount (nothing is mounted there)")
                }
            });
        }
    }
    let mountpoint = mp.as_path();
    let c = cstr(mountpoint);
    if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
        return Ok(Unmounted::Gone);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EBUSY) => {
            if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
                return Ok(Unmounted::Detached);
            }
            Err(format!(
                "unmount {}: {}",
                mountpoint.display(),
                std::io::Error::last_os_error()
            ))
        }
        Some(libc::EPERM) => {
            let st = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg(mountpoint)
                .status()
                .map_err(|e| format!("fusermount3: {e}"))?;
            if st.success() {
                Ok(Unmounted::Gone)
            } else {
                Err(format!(
                    "unmount {}: fusermount3 failed",
                    mountpoint.display()
                ))
            }
        }
        _ => Err(format!("unmount {}: {err}", mountpoint.display())),
    }
}

/// `scratchfs unmount`: [`unmount`], then waits until the daemon has let go of its SQLite
/// database ([`released`]), so that a command right after it does not find the database
/// `in use`. A busy mount that could only be detached (`MNT_DETACH`) is not waited for:
/// its daemon serves until the last open file on it is closed.
pub fn unmount_and_wait(mountpoint: &Path) -> Result<(), Failure> {
    let mp = mountinfo_path(mountpoint)?;
    let source = mount_source(&mp);
    match unmount_how(mountpoint)? {
        Unmounted::Gone => released(source.as_deref(), &mp),
        Unmounted::Detached => Ok(()),
    }
}

/// How [`unmount_how`] took a mount away.
enum Unmounted {
    /// Unmounted: the daemon's session ends now.
    Gone,
    /// Busy, so only detached (`MNT_DETACH`): the daemon serves the files still open.
    Detached,
}

/// The source (`fsname`) of the mount exactly at `mp`, the topmost there, from
/// `/proc/self/mountinfo`: a scratchfs mount's is its SQLite database's absolute path
/// unless `--fsname` said otherwise.
pub fn mount_source(mp: &Path) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mp.as_os_str().as_bytes();
    info.lines()
        .filter(|l| l.split(' ').nth(4).map(unescape_mountinfo).as_deref() == Some(want))
        .filter_map(|l| {
            l.split(" - ")
                .nth(1)?
                .split(' ')
                .nth(1)
                .map(unescape_mountinfo)
        })
        .next_back()
        .map(|b| PathBuf::from(std::ffi::OsString::from_vec(b)))
}

/// How long `unmount` waits for the daemon to let go of its database (its last commits
/// and the fold of its redo log).
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// After a mount at `mountpoint` from `source` is gone: waits until its daemon has let go
/// of the database (its `flock`), so that a command right after `unmount` finds the
/// database free rather than `in use`. A source that is not an existing regular file (a
/// PostgreSQL mount, an `--fsname`) is not waited for; a file is only opened for reading
/// and locked, never changed. Says so when the daemon still holds it after
/// [`RELEASE_WAIT`].
fn released(source: Option<&Path>, mountpoint: &Path) -> Result<(), Failure> {
    use std::os::fd::AsRawFd;
    let Some(db) = source.filter(|p| p.is_absolute() && p.is_file()) else {
        return Ok(());
    };
    let Ok(f) = std::fs::File::open(db) else {
        return Ok(());
    };
    let deadline = std::time::Instant::now() + RELEASE_WAIT;
    while unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } != 0 {
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "unmount {}: unmounted, but its daemon still holds {} after {} s (still \
                 writing; wait, or see its log)",
                mountpoint.display(),
                db.display(),
                RELEASE_WAIT.as_secs()
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Ok(())
}

/// Checks where the database may live for a mount at `mp` (canonical): not on a FUSE
/// filesystem and not under the mountpoint (FUSE-TRAPS §16). Its directory must exist
/// (ENOENT otherwise: a typo never makes a new scratchpad); returns the database's absolute path and its directory's canonical path.
///
/// A PostgreSQL URL is refused here (`mount --at`, `--background`, and the commands that
/// take only an SQLite file so far: docs/deploy.md), before anything is created.
pub fn check_database(db: &Path, mp: &Path) -> Result<(PathBuf, PathBuf), Failure> {
    if let Some(url) = crate::cli::postgres_url(db) {
        return Err(format!(
            "{}: this takes only an SQLite database file so far (docs/deploy.md says what \
             works on PostgreSQL)",
            crate::store::postgres::display_name(url)
        ));
    }
    let db = absolute(db)?;
    let db_dir = db
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| "/".into());
    // A directory that is not there is a typo more often than a wish: refused (ENOENT),
    // never made, so that a wrong --db never becomes a new, empty scratchpad.
    match std::fs::metadata(&db_dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "cannot open database {}: {} is not a directory",
                db.display(),
                db_dir.display()
            ));
        }
        Err(e) => {
            return Err(format!(
                "cannot open database {}: its directory {} does not exist ({e}); check the \
                 path, or make the directory first (mkdir -p {})",
                db.display(),
                db_dir.display(),
                db_dir.display()
            ));
        }
    }
    let db_dir =
        std::fs::canonicalize(&db_dir).map_err(|e| format!("{}: {e}", db_dir.display()))?;
    if on_fuse(&db_dir) {
        return Err(format!(
            "database {}: its directory is on a FUSE filesystem; SQLite's WAL needs a local \
             filesystem (and the daemon must never touch a mount, FUSE-TRAPS §16)",
            db.display()
        ));
    }
    if db_dir.starts_with(mp) {
        return Err(format!(
            "database {} is under the mountpoint {}: it must live outside the mount",
            db.display(),
            mp.display()
        ));
    }
    Ok((db, db_dir))
}

/// The mount's source name when `--fsname` is not given: the database's absolute path,
/// commas (the mount options' separator) and control characters as `_`, its last 1,024
/// bytes if longer (the kernel takes the options in one page).
fn default_fsname(db: &Path) -> String {
    let s: String = db
        .to_string_lossy()
        .chars()
        .map(|c| if c == ',' || c.is_control() { '_' } else { c })
        .collect();
    let mut cut = s.len().saturating_sub(1024);
    while !s.is_char_boundary(cut) {
        cut += 1;
    }
    s[cut..].to_string()
}

/// A mount of the past (`mount --at NAME|TIME`, issue 14): the database is opened to
/// read only ([`Sqlite::open_frozen`], [`crate::store::postgres::Postgres::open_frozen`]:
/// no lock, no redo log, nothing written), so a live mount of it keeps working; the kernel
/// mount is read-only and the core's gate refuses every change with `EROFS` (its MCP
/// socket is not started). An SQLite database whose live mount holds changes SQLite does
/// not have yet is asked to write them first (`fsync` of its mountpoint), so a time a
/// moment ago shows them; on PostgreSQL every acknowledged change is committed already.
fn prepare_past(spec: &MountSpec, at: &str) -> Result<(Arc<Fs>, Config), Failure> {
    let mp = check_mountpoint(&spec.mountpoint)?;
    let (store, db_dir, shown): (Arc<dyn Store>, PathBuf, String) =
        match crate::cli::postgres_url(&spec.db) {
            Some(url) => {
                let name = crate::store::postgres::display_name(url);
                let store = crate::store::postgres::Postgres::open_frozen(url)
                    .map_err(|e| format!("database {name}: {e}"))?;
                // Nothing is written to a past: no spill, the directory is never used.
                (Arc::new(store), std::env::temp_dir(), name)
            }
            None => {
                let (db, db_dir) = check_database(&spec.db, &mp)?;
                drop(crate::cli::open_sqlite(&db)?);
                let store = Sqlite::open_frozen(&db)
                    .map_err(|e| format!("database {}: {e}", db.display()))?;
                (Arc::new(store), db_dir, db.display().to_string())
            }
        };
    let (point, label) = crate::checkpoint::resolve_at(&*store, at)
        .map_err(|e| format!("database {shown}: {}", e.reason))?;
    let snap = store
        .snapshot(point)
        .map_err(|e| format!("database {shown}: {e}"))?;
    log::info!(
        "{}: mounting {shown} as it was at {label}, read-only",
        mp.display()
    );
    let fs = Fs::of_past(store, &snap, point.time_ns, db_dir)
        .map_err(|e| format!("database {shown}: {e}"))?
        .with_views_listed(spec.list_views)
        .with_manifest_budget(spec.manifest_tokens);
    let mut config = Config::default();
    let name = spec
        .fsname
        .clone()
        .unwrap_or_else(|| default_fsname(&PathBuf::from(format!("{shown}@{at}"))));
    config.mount_options = vec![
        MountOption::FSName(name),
        MountOption::Subtype("scratchfs".into()),
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::RO,
    ];
    if spec.allow_other {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(2);
    config.clone_fd = true;
    Ok((Arc::new(fs), config))
}

/// Validates the spec, opens (or creates) the store and builds the core.
pub fn prepare(spec: &MountSpec) -> Result<(Arc<Fs>, Config), Failure> {
    if let Some(url) = spec
        .db
        .to_str()
        .filter(|d| crate::store::postgres::is_url(d))
        && spec.at.is_none()
    {
        return prepare_postgres(spec, url);
    }
    if let Some(at) = &spec.at {
        return prepare_past(spec, at);
    }
    let mp = check_mountpoint(&spec.mountpoint)?;
    let (db, db_dir) = check_database(&spec.db, &mp)?;
    // A file that is not a scratchfs database is left as it is: refused before the lock
    // (which creates a missing database, mode 0600) and before SQLite opens it.
    crate::store::probe(&db).map_err(|e| e.reason)?;
    let lock = lock_database(&db)?;
    let (store, fresh) = Sqlite::open(&db, spec.owner).map_err(|e| {
        if e.reason.starts_with("cannot open database ") {
            // Already names the database and the OS's reason.
            e.reason
        } else {
            format!("database {}: {e}", db.display())
        }
    })?;
    // An existing database (and its -wal, -shm, redo log, daemon log) with looser modes.
    crate::store::make_private(&db);
    // Held for the life of the process: one mount per database.
    std::mem::forget(lock);
    store
        .set_meta("mountpoint", &mp.to_string_lossy())
        .map_err(|e| format!("database {}: {e}", db.display()))?;
    let store = Arc::new(store);
    Sqlite::start_flusher(&store);
    let sqlite = store.clone();
    let store: Arc<dyn Store> = store;
    let mut fs = Fs::new(store.clone(), db_dir)
        .map_err(|e| format!("database {}: {e}", db.display()))?
        .with_views_listed(spec.list_views)
        .with_manifest_budget(spec.manifest_tokens);
    // The default layout is created before any rules apply.
    if fresh {
        fs.seed(DEFAULT_LAYOUT, spec.owner)
            .map_err(|e| format!("database {}: {e}", db.display()))?;
    } else {
        check_owner(&fs, spec, &db.display().to_string())?;
    }
    if let Some(path) = &spec.rules {
        // Problems on stderr (the daemon's log when in the background; `mount
        // --background` checks and prints them before it starts the daemon).
        let (text, rules) = crate::rules::load(path)?;
        store
            .record_rules(&text, &crate::identity::Caller::internal("scratchfs"))
            .map_err(|e| format!("database {}: {e}", db.display()))?;
        fs = fs.with_rules(crate::rules::enforce::Compiled::new(rules));
    } else {
        // An empty text: this mount runs with the defaults (what `scratchfs restore` on
        // an unmounted database checks against: the rules of the last mount).
        store
            .record_rules("", &crate::identity::Caller::internal("scratchfs"))
            .map_err(|e| format!("database {}: {e}", db.display()))?;
    }
    let config = live_config(
        spec,
        spec.fsname.clone().unwrap_or_else(|| default_fsname(&db)),
    );
    let fs = Arc::new(fs);
    Fs::start_live_appends(&fs).map_err(|e| format!("live-append thread: {e}"))?;
    Fs::start_history_indexer(&fs).map_err(|e| format!("history-index thread: {e}"))?;
    // `scratchfs mcp` runs its calls here while the database is mounted (issue 12). A
    // mount without it still serves the mount; `scratchfs mcp` then says why it cannot.
    // Without --allow-other, only root and the user who mounted get in, as through FUSE.
    let mounter = unsafe { libc::geteuid() };
    match crate::mcp::socket::listen(fs.clone(), &db, mounter, spec.allow_other) {
        Ok(path) => sqlite
            .set_meta("mcp_socket", &path.to_string_lossy())
            .map_err(|e| format!("database {}: {e}", db.display()))?,
        // A runtime directory another user made first: a mount without its socket would
        // be a silent loss of MCP (issue 31), so it does not start.
        Err(e) if e.errno == libc::EPERM => {
            return Err(format!("the MCP socket: {}", e.reason));
        }
        Err(e) => {
            log::warn!("no MCP socket: {}", e.reason);
            sqlite
                .set_meta("mcp_socket", "")
                .map_err(|e| format!("database {}: {e}", db.display()))?;
        }
    }
    Ok((fs, config))
}

/// The FUSE configuration of a live (read-write) mount named `fsname`: worker threads
/// serving /dev/fuse, each with its own cloned fd (`SCRATCHFS_THREADS` overrides the
/// default of 4).
fn live_config(spec: &MountSpec, fsname: String) -> Config {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(fsname),
        MountOption::Subtype("scratchfs".into()),
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::RW,
    ];
    if spec.allow_other {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(
        std::env::var("SCRATCHFS_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(4),
    );
    config.clone_fd = true;
    config
}

/// The writer rules the database holds (the text recorded last), compiled; `None` when it
/// holds none or an empty text (the defaults). A text that does not parse is an error
/// naming its first problem (never silently the defaults).
fn stored_rules(store: &dyn Store) -> Result<Option<crate::rules::enforce::Compiled>, Failure> {
    let Some(text) = store.rules_text().map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    let rules = crate::rules::Rules::parse(&text).map_err(|problems| {
        let first = problems
            .first()
            .map(|p| format!("line {}, column {}: {}", p.line, p.column, p.message))
            .unwrap_or_default();
        format!("the stored rules do not parse: {first}")
    })?;
    Ok(Some(crate::rules::enforce::Compiled::new(rules)))
}

/// A mount of a scratchpad in PostgreSQL (issue 15, docs/deploy.md): no file lock, since
/// several daemons (on several hosts) mount one database at once; each listens for the
/// changes the others commit and refreshes its tree, views and the kernel's caches
/// ([`crate::store::postgres::notify`]).
fn prepare_postgres(spec: &MountSpec, url: &str) -> Result<(Arc<Fs>, Config), Failure> {
    check_mountpoint(&spec.mountpoint)?;
    let fs = open_postgres(url, spec.owner, spec.rules.as_deref(), |fs| {
        fs.with_views_listed(spec.list_views)
            .with_manifest_budget(spec.manifest_tokens)
    })?;
    let name = crate::store::postgres::display_name(url);
    // A new database's root is the owner's already; an existing one's may not be.
    check_owner(&fs, spec, &name)?;
    let config = live_config(spec, spec.fsname.clone().unwrap_or(name));
    Ok((fs, config))
}

/// How a PostgreSQL daemon's spill directory is named in the temporary directory:
/// `scratchfs-spill-<pid>-<random>` (mode 0700, removed with the daemon's core).
const SPILL_PREFIX: &str = "scratchfs-spill-";

/// Removes the spill directories in `tmp` that daemons killed before they could remove
/// them left (their pid names no live process; only this user's): what they hold was
/// never acknowledged (a write in progress), so nothing is lost.
fn remove_dead_spill_dirs(tmp: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    let me = unsafe { libc::geteuid() };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SPILL_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if meta.is_dir() && meta.uid() == me && !alive {
            match std::fs::remove_dir_all(e.path()) {
                Ok(()) => log::info!("removed {} (left by a killed daemon)", e.path().display()),
                Err(err) => log::warn!("{}: {err}", e.path().display()),
            }
        }
    }
}

/// The filesystem core of a scratchpad in PostgreSQL, as one more daemon on it (a mount's,
/// or `scratchfs mcp`'s): the store opened (schema and default layout made on first use,
/// owned by `owner`), the rules (`rules` recorded as the database's, which reaches the
/// other daemons; else the ones stored), the live appends' thread, and a listener that
/// refreshes this core when other daemons commit. Large writes spill to a private
/// temporary directory, removed with the core. `tune` sets options before it is shared.
pub fn open_postgres(
    url: &str,
    owner: (u32, u32),
    rules: Option<&Path>,
    tune: impl FnOnce(Fs) -> Fs,
) -> Result<Arc<Fs>, Failure> {
    use crate::store::postgres::{Postgres, display_name, notify};
    let name = display_name(url);
    let (store, fresh) = Postgres::open(url, owner).map_err(|e| format!("database {name}: {e}"))?;
    remove_dead_spill_dirs(&std::env::temp_dir());
    let spill = tempfile::Builder::new()
        .prefix(&format!("{SPILL_PREFIX}{}-", std::process::id()))
        .tempdir()
        .map_err(|e| format!("a spill directory for large writes: {e}"))?;
    // The daemon's own: what is being written is nobody else's to read.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(spill.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("a spill directory for large writes: {e}"))?;
    }
    let daemon = store.daemon().to_string();
    let keys = store.keys().clone();
    let listener_pid = store.listener_pid();
    let listener_stop = store.listener_stop();
    let heads = store.heads();
    let store: Arc<dyn Store> = Arc::new(store);
    let mut fs = Fs::new(store.clone(), spill.path().to_path_buf())
        .map_err(|e| format!("database {name}: {e}"))?
        .owning_spill_dir(spill);
    fs = tune(fs);
    if fresh {
        fs.seed(DEFAULT_LAYOUT, owner)
            .map_err(|e| format!("database {name}: {e}"))?;
    }
    // The rules are the database's: a rules file given here becomes them (and reaches
    // the other daemons); without one, this daemon enforces the ones stored.
    let caller = crate::identity::Caller::internal("scratchfs");
    if let Some(path) = rules {
        let (text, rules) = crate::rules::load(path)?;
        store
            .record_rules(&text, &caller)
            .map_err(|e| format!("database {name}: {e}"))?;
        fs = fs.with_rules(crate::rules::enforce::Compiled::new(rules));
    } else if let Some(rules) =
        stored_rules(&*store).map_err(|e| format!("database {name}: {e}"))?
    {
        fs = fs.with_rules(rules);
    }
    let fs = Arc::new(fs);
    Fs::start_live_appends(&fs).map_err(|e| format!("live-append thread: {e}"))?;
    Fs::start_history_indexer(&fs).map_err(|e| format!("history-index thread: {e}"))?;
    let weak = Arc::downgrade(&fs);
    let handles = Arc::downgrade(&fs);
    let me = notify::Listener {
        pid: listener_pid,
        stop: listener_stop,
        open_contents: Box::new(move || {
            handles
                .upgrade()
                .map(|fs| fs.open_contents())
                .unwrap_or_default()
        }),
    };
    notify::listen(
        url.to_string(),
        daemon,
        keys,
        me,
        move |changes: &[notify::Change]| {
            let Some(fs) = weak.upgrade() else {
                return false;
            };
            log::debug!("changes by other daemons: {changes:?}");
            heads.forget(changes);
            if changes
                .iter()
                .any(|c| matches!(c, notify::Change::Rules | notify::Change::Tree))
            {
                // Another daemon recorded rules (or this one was not listening): enforce
                // what the database holds. Rules that do not parse keep the ones in force.
                match stored_rules(&**fs.store()) {
                    Ok(rules) => fs.gate().rules.set(rules),
                    Err(e) => {
                        log::error!("the rules in the database: {e} (the rules in force stay)")
                    }
                }
            }
            // The nodes a create, unlink, rename or attribute change moved are read again
            // (the namespace feed, issue 34), then a file's new version reloads that file;
            // a change of the tree as a whole (a rollback, a gc, a redaction), of the
            // rules, or a lost connection reloads the whole inode table.
            let whole = changes
                .iter()
                .any(|c| matches!(c, notify::Change::Rules | notify::Change::Tree));
            let refreshed = if whole {
                log::info!("refresh: reloading the whole tree ({changes:?})");
                fs.refresh()
            } else {
                let mut nodes = Vec::new();
                for c in changes {
                    if let notify::Change::Node { ino, replaced } = *c {
                        nodes.push(ino);
                        if replaced != 0 {
                            nodes.push(replaced);
                        }
                    }
                }
                let mut done = std::collections::HashSet::new();
                let moved = if nodes.is_empty() {
                    Ok(())
                } else {
                    log::debug!("refresh: {} node(s) from the feed", nodes.len());
                    done.extend(nodes.iter().copied());
                    fs.refresh_nodes(&nodes)
                };
                moved.and_then(|()| {
                    changes.iter().try_for_each(|c| match *c {
                        notify::Change::File { ino, .. } if done.insert(ino) => {
                            fs.refresh_file(ino)
                        }
                        notify::Change::Events => {
                            fs.refresh_events();
                            Ok(())
                        }
                        _ => Ok(()),
                    })
                })
            };
            if let Err(e) = refreshed {
                log::warn!("refreshing after other daemons' changes: {e}");
            }
            true
        },
    )
    .map_err(|e| format!("listener thread: {e}"))?;
    Ok(fs)
}

/// The log of a daemon that `mount --background` starts on a PostgreSQL database (which
/// has no file to put `<db>.log` beside): `mount-<blake3 of the mountpoint, 16 hex>.log`
/// in the user's runtime directory ([`crate::mcp::socket::runtime_dir`]), appended to by
/// every mount there.
pub fn daemon_log_path(mountpoint: &Path) -> Result<PathBuf, Failure> {
    let dir =
        crate::mcp::socket::runtime_dir().map_err(|e| format!("the daemon's log: {}", e.reason))?;
    let hash = blake3::hash(mountpoint.as_os_str().as_encoded_bytes()).to_hex();
    Ok(dir.join(format!("mount-{}.log", &hash[..16])))
}

/// Takes an exclusive `flock(2)` on the database file, so that a second mount of the same
/// database fails at once instead of diverging from the first (SQLite's own locks are
/// `fcntl` locks, which `flock` does not touch, so `sqlite3` readers are unaffected).
pub fn lock_database(db: &Path) -> Result<std::fs::File, Failure> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // Never a file named after a URL (docs/deploy.md: PostgreSQL takes no file lock).
    if crate::cli::postgres_url(db).is_some() {
        return std::fs::File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(db)
        .map_err(|e| crate::store::cannot_open(db, &e).reason)?;
    // A daemon killed a moment ago may still be closing its files: wait for it a little.
    let deadline = std::time::Instant::now() + MOUNTPOINT_WAIT;
    while unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        if std::time::Instant::now() > deadline {
            // Where: the mount that holds it, when one of this host does (its
            // mountpoint as the database records it, checked against the mount table).
            let at = match crate::cli::live_mountpoint(db) {
                Ok(Some(m)) => format!(
                    "in use by the scratchfs mount at {m} (unmount it first: scratchfs \
                     unmount {m}; or work through it)"
                ),
                _ => "in use by another scratchfs process (a mount, or an MCP server on it)"
                    .to_string(),
            };
            return Err(format!("database {}: {at}", db.display()));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(f)
}

/// Takes the database's `flock` if no mount holds it (no waiting): `Err` means mounted.
///
/// A PostgreSQL database takes no file lock (several daemons and commands use it at once;
/// the database serializes them): `Err` when a mount of this host serves it (see
/// [`crate::cli::live_mountpoint`]), else `Ok` with a handle of `/dev/null`.
pub fn lock_database_now(db: &Path) -> Result<std::fs::File, Failure> {
    use std::os::fd::AsRawFd;
    if let Some(url) = crate::cli::postgres_url(db) {
        // A mount of this host on it: the command goes through it (as it would through
        // the mount holding an SQLite file's lock), so that its change is seen there at
        // once and the mount's open handles are known to it.
        if let Some(m) = crate::cli::live_mountpoint(db)? {
            return Err(format!(
                "database {}: mounted at {m}",
                crate::store::postgres::display_name(url)
            ));
        }
        return std::fs::File::open("/dev/null").map_err(|e| format!("/dev/null: {e}"));
    }
    let f = std::fs::File::open(db).map_err(|e| crate::store::cannot_open(db, &e).reason)?;
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(format!("database {}: mounted", db.display()));
    }
    Ok(f)
}

/// Whether `dir` lies on a FUSE filesystem (statfs(2) `f_type` FUSE_SUPER_MAGIC).
pub fn on_fuse(dir: &Path) -> bool {
    const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
    let c = cstr(dir);
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    unsafe { libc::statfs(c.as_ptr(), &mut s) == 0 && s.f_type as i64 == FUSE_SUPER_MAGIC }
}

/// Absolute form of `p` (relative to the current directory), without resolving links.
pub fn absolute(p: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// Why the kernel mount failed: `mount MNT: CAUSE`, with what to do when a user other
/// than root was refused (FUSE needs `/dev/fuse`, or `fusermount3` set-uid root).
fn mount_failed(mountpoint: &Path, e: &std::io::Error) -> String {
    let mut msg = format!("mount {}: {e}", mountpoint.display());
    if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM))
        && unsafe { libc::geteuid() } != 0
    {
        msg.push_str(
            " (a user other than root mounts FUSE through /dev/fuse, which must be readable \
             and writable by it, or through fusermount3 set-uid root; else mount as root \
             with --owner UID:GID for the agent: docs/sandbox.md)",
        );
    }
    msg
}

/// The SQLite database a mount of `spec` would make, when it is not there yet: a mount
/// that then fails removes it ([`NewDatabase::forget`]), so a refused mount leaves no empty
/// scratchpad behind (helper finding). `None` for a database that exists, a URL, or a
/// mount of the past (which makes nothing).
struct NewDatabase(Option<PathBuf>);

impl NewDatabase {
    fn of(spec: &MountSpec) -> NewDatabase {
        let url = spec.db.to_str().is_some_and(crate::store::postgres::is_url);
        let new = spec.at.is_none() && !url && std::fs::symlink_metadata(&spec.db).is_err();
        NewDatabase(new.then(|| spec.db.clone()))
    }

    /// Drops `fs` (its connections) and removes the database this mount made, with its
    /// `-wal`, `-shm` and redo log ([`crate::store::companions`] but the daemon's log,
    /// which only a `--background` parent makes); a database that was there before is left
    /// as it is.
    fn forget(&self, fs: Arc<Fs>) {
        drop(fs);
        if let Some(db) = &self.0 {
            for p in made_with(db) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// The files a mount makes when it makes the database `db`: the database, `-wal`, `-shm`
/// and the redo log ([`crate::store::companions`] without the daemon's log).
pub fn made_with(db: &Path) -> Vec<PathBuf> {
    let mut log = db.as_os_str().to_owned();
    log.push(".log");
    let mut files = crate::store::companions(db);
    files.retain(|p| *p.as_os_str() != *log);
    files
}

/// The FUSE requests this process answered, by kind: `create 10, flush 10, ...`.
fn requests_served() -> String {
    crate::fuse::requests()
        .iter()
        .map(|(r, n)| format!("{} {n}", r.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Keeps freed memory in the daemon's heaps up to 4 MiB each rather than returning it to
/// the kernel at once (glibc `M_TRIM_THRESHOLD`, default 128 KiB and moving; mallopt(3)):
/// a create gave memory back and took it again at every request (0.7 `brk` or `madvise`
/// per create, and the page faults after them), 7% of the daemon's CPU per create (issue
/// 32). Setting it also stops glibc from raising the mmap threshold as it goes, so that is
/// set too: 2 MiB, above a write request's data (1 MiB: 256 pages, FUSE's `max_pages`),
/// which would otherwise be mapped and unmapped at every write (`git commit` was 15%
/// slower, a sequential write 3%), and below fuser's 16 MiB request buffers, which stay
/// mapped and untouched but for what requests fill.
fn tune_allocator() {
    // SAFETY: mallopt only sets glibc's malloc parameters; called before the threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 2 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TOP_PAD, 1 << 20);
    }
}

/// Raises the daemon's soft limit of open files to its hard limit (getrlimit(2)): a
/// daemon holds a file per write handle that spilled, the databases', and up to 256
/// callers' `/proc/PID/stat` (src/identity.rs); a soft limit of 1,024 (the usual default)
/// would refuse handles an agent may open. Not fatal when it cannot.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write `lim`.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                log::warn!(
                    "raising the open files limit to {}: {}",
                    lim.rlim_max,
                    std::io::Error::last_os_error()
                );
            }
        }
    }
}

/// Mounts and serves in the foreground until unmounted or signalled.
pub fn run_foreground(spec: &MountSpec) -> Result<(), Failure> {
    tune_allocator();
    raise_open_files_limit();
    let new = NewDatabase::of(spec);
    let (fs, config) = prepare(spec)?;
    let session = match fuser::Session::new(Adapter::new(fs.clone()), &spec.mountpoint, &config) {
        Ok(s) => s,
        Err(e) => {
            new.forget(fs);
            return Err(mount_failed(&spec.mountpoint, &e));
        }
    };
    fs.set_invalidator(spawn_notifier(session.notifier()));
    if spec.at.is_none() {
        crate::fs::policy::spawn(&fs);
    }
    let mp = spec.mountpoint.clone();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| format!("signals: {e}"))?;
    std::thread::Builder::new()
        .name("scratchfs-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                log::info!("signal {sig}: unmounting {}", mp.display());
                if let Err(e) = unmount(&mp) {
                    log::error!("{e}");
                }
            }
        })
        .map_err(|e| format!("signal thread: {e}"))?;
    let served = session
        .run()
        .map_err(|e| format!("session {}: {e}", spec.mountpoint.display()));
    log::info!("requests served: {}", requests_served());
    // A mount of the past has no socket; the one there is a live mount's.
    if spec.at.is_none()
        && let Ok(db) = absolute(&spec.db)
    {
        crate::mcp::socket::remove(&db);
    }
    // Write what the redo log holds, empty it and checkpoint the WAL into the database
    // file (dropping the store would, if nothing else held it), so that the file alone is
    // the scratchpad (helper finding: a copy of it after an unmount was an empty shell).
    crate::failpoint::delay("teardown", std::time::Duration::from_secs(2));
    if let Err(e) = fs.finish() {
        log::error!("writing acknowledged changes at unmount (the redo log keeps them): {e}");
    }
    served
}

/// A mount served by background threads of this process (for `scratchfs run` and tests).
pub struct Background {
    session: Option<fuser::BackgroundSession>,
    fs: Arc<Fs>,
    mountpoint: PathBuf,
    /// The database (absolute), whose MCP socket goes at the end (`None`: a mount of the
    /// past, which has none).
    db: Option<PathBuf>,
}

impl Background {
    /// Mounts `spec` and serves it from background threads.
    pub fn start(spec: &MountSpec) -> Result<Background, Failure> {
        let new = NewDatabase::of(spec);
        let (fs, config) = prepare(spec)?;
        let session = match fuser::Session::new(Adapter::new(fs.clone()), &spec.mountpoint, &config)
        {
            Ok(s) => s,
            Err(e) => {
                new.forget(fs);
                return Err(mount_failed(&spec.mountpoint, &e));
            }
        };
        fs.set_invalidator(spawn_notifier(session.notifier()));
        if spec.at.is_none() {
            crate::fs::policy::spawn(&fs);
        }
        let session = session
            .spawn()
            .map_err(|e| format!("mount {}: {e}", spec.mountpoint.display()))?;
        Ok(Background {
            session: Some(session),
            fs,
            mountpoint: spec.mountpoint.clone(),
            db: if spec.at.is_none() {
                Some(absolute(&spec.db)?)
            } else {
                None
            },
        })
    }

    /// The filesystem this mount serves.
    pub fn fs(&self) -> &Arc<Fs> {
        &self.fs
    }

    /// Unmounts and waits for the session to end.
    pub fn stop(mut self) -> Result<(), Failure> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<(), Failure> {
        if let Some(s) = self.session.take() {
            unmount(&self.mountpoint)?;
            s.join().map_err(|e| format!("session: {e}"))?;
            if let Some(db) = &self.db {
                crate::mcp::socket::remove(db);
            }
            self.fs
                .finish()
                .map_err(|e| format!("writing acknowledged changes: {e}"))?;
        }
        Ok(())
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}
