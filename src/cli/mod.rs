//! The commands of SPEC §2 that work on the database (usable while it is mounted):
//! `log`, `history`, `show`, `diff`, `fsck`, `restore`, `redact`, `export`, `gc`, `why`,
//! `ground`, `pads`. One file per command; each returns
//! `Err(message)` for a runtime failure (exit status 1). Usage errors (exit status 2) are
//! clap's: malformed arguments, such as a TIME ([`time::parse_ns`]), are refused before a
//! command runs.
//!
//! Names: a PATH argument is taken as raw bytes (any name works, UTF-8 or not) and looked
//! up in its stored form ([`crate::store::paths`]). Text output prints every path as its
//! exact bytes, quoted when it could break a line or is not UTF-8 ([`quote_stored`]);
//! `--json` output is lossless ([`json_name`]).

pub mod checkpoint;
pub mod diff;
pub mod du;
pub mod export;
pub mod fork;
pub mod fsck;
pub mod gc;
pub mod ground;
pub mod log;
pub mod mcp;
pub mod pads;
pub mod promote;
pub mod recover;
pub mod redact;
pub mod restore;
pub mod time;
pub mod web;
pub mod why;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::store::History;

use crate::store::{ContentRef, paths};
use crate::views::{quote_path, quote_stored};

/// A runtime failure, one line.
pub type Failure = String;

pub use crate::report::{
    each_chunk, file_id, inputs_json, json_name, json_paths, version_in, version_json, versions,
};
pub use crate::store::VersionRow;

/// A `meta` value of the database (e.g. `mountpoint`, `last_gc`).
pub fn meta(db: &Path, key: &str) -> Result<Option<String>, Failure> {
    Ok(metas(db, &[key])?.pop().flatten())
}

/// `meta` values of the database, one per key in order, from one opening of it.
pub fn metas(db: &Path, keys: &[&str]) -> Result<Vec<Option<String>>, Failure> {
    match postgres_url(db) {
        Some(url) => {
            let s =
                crate::store::postgres::Postgres::open_frozen(url).map_err(|e| e.to_string())?;
            keys.iter()
                .map(|k| s.meta(k).map_err(|e| e.to_string()))
                .collect()
        }
        None => {
            // Not through `open_history`, which asks a live mount (found by this) first.
            let conn = crate::store::open_read_only(db).map_err(|e| e.reason)?;
            keys.iter()
                .map(|k| crate::store::sql::read::meta(&conn, k).map_err(|e| e.to_string()))
                .collect()
        }
    }
}

/// What to do about a failure to open a database (`msg`, which names it as `cannot
/// open database PATH: ...`), for a new user: a database that is not there is given with
/// `--db` or `SCRATCHFS_DB` (and the database of the mount the current directory is in,
/// if any); a directory that is a mountpoint names the database that mount serves.
/// `None` when `msg` is another failure.
pub fn open_hint(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("cannot open database ")?;
    let (path, why) = rest.rsplit_once(": ")?;
    let path = crate::mount::absolute(Path::new(path)).ok()?;
    if path.is_dir() {
        // "Is a directory" says it already, unless it is a mount's.
        return match crate::mount::fuse_mount_holding(&path) {
            Some((mp, source)) if mp == path => Some(format!(
                "{} is a mountpoint, not a database: the database it serves is {} (--db {})",
                path.display(),
                source.display(),
                source.display()
            )),
            _ => None,
        };
    }
    if !why.contains("No such file") {
        return None;
    }
    if let Some(dir) = path.parent().filter(|d| !d.exists()) {
        return Some(format!(
            "its directory {} does not exist (a typo?)",
            dir.display()
        ));
    }
    let here = std::env::current_dir()
        .ok()
        .and_then(|d| crate::mount::fuse_mount_holding(&d))
        .filter(|(_, source)| source.is_file());
    Some(match here {
        Some((mp, source)) => format!(
            "this directory is in the mount at {} of {}: give --db {} (or set SCRATCHFS_DB)",
            mp.display(),
            source.display(),
            source.display()
        ),
        None => "give the database with --db FILE, or set SCRATCHFS_DB (the default is \
                 ./scratchpad.db, in the current directory)"
            .to_string(),
    })
}

/// Refuses a database that is not there: an SQLite file that cannot be looked at (the
/// OS's reason); a PostgreSQL URL is checked when connecting.
pub fn check_db(db: &Path) -> Result<(), Failure> {
    if postgres_url(db).is_none()
        && let Err(e) = std::fs::metadata(db)
    {
        return Err(crate::store::cannot_open(db, &e).reason);
    }
    Ok(())
}

/// Refuses a PostgreSQL URL for `what`, a command that takes only an SQLite file so far
/// (docs/deploy.md), before anything is created where the URL would be a path.
pub fn sqlite_only(db: &Path, what: &str) -> Result<(), Failure> {
    match postgres_url(db) {
        Some(url) => Err(format!(
            "{what}: {}: takes only an SQLite database file so far (docs/deploy.md)",
            crate::store::postgres::display_name(url)
        )),
        None => Ok(()),
    }
}

/// The URL `db` is, when it names a PostgreSQL database (`postgres://`, `postgresql://`;
/// docs/deploy.md).
pub fn postgres_url(db: &Path) -> Option<&str> {
    db.to_str().filter(|d| crate::store::postgres::is_url(d))
}

/// The mountpoint where the database is mounted now, if it is: a FUSE mount of this
/// host that the mount table names (a PostgreSQL database may be mounted on many hosts:
/// one whose source is the database's default fsname, [`crate::mount::mounted_from`], so
/// a mount given another `--fsname` is not found; an SQLite database: its last
/// mountpoint, `meta.mountpoint`), mounted by root, by this user or (SQLite) by the
/// database file's owner, and whose root says it is this database's scratchpad
/// ([`crate::fs::serve::SCRATCHPAD_XATTR`] equal to `meta.scratchpad_id`). Any other
/// mount (another scratchpad given this database's name as its fsname, another user's
/// filesystem there) is not asked: the command then works on the database itself.
pub fn live_mountpoint(db: &Path) -> Result<Option<String>, Failure> {
    let euid = unsafe { libc::geteuid() };
    // The database is opened once (a PostgreSQL database only if it may be mounted here).
    let (candidates, id): (Vec<(std::path::PathBuf, Option<u32>)>, _) = match postgres_url(db) {
        Some(url) => {
            let found = crate::mount::mounted_from(&crate::store::postgres::display_name(url));
            if found.is_empty() {
                return Ok(None);
            }
            (found, meta(db, "scratchpad_id")?)
        }
        None => {
            let mut values = metas(db, &["mountpoint", "scratchpad_id"])?.into_iter();
            let (mountpoint, id) = (values.next().flatten(), values.next().flatten());
            match mountpoint {
                Some(m) if crate::mount::fuse_mounted_at(Path::new(&m)) => {
                    let by = crate::mount::mounted_by(Path::new(&m));
                    (vec![(m.into(), by)], id)
                }
                _ => return Ok(None),
            }
        }
    };
    let file_owner = match postgres_url(db) {
        Some(_) => None,
        None => std::fs::metadata(db).ok().map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.uid()
        }),
    };
    let Some(id) = id else {
        return Ok(None);
    };
    Ok(candidates
        .into_iter()
        .filter(|(_, by)| by.is_some_and(|u| u == 0 || u == euid || Some(u) == file_owner))
        .find(|(mp, _)| {
            get_xattr(mp, crate::fs::serve::SCRATCHPAD_XATTR).is_ok_and(|v| v == id.as_bytes())
        })
        .map(|(mp, _)| mp.to_string_lossy().into_owned()))
}

/// An extended attribute of `file` (following links), at most 256 bytes of it; the
/// error is getxattr(2)'s (`ENODATA`: no attribute by that name).
pub fn get_xattr(file: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(file.as_os_str().as_bytes())?;
    let name = std::ffi::CString::new(name)?;
    let mut buf = vec![0u8; 256];
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// Sets an extended attribute on `file` (inside a mount): how a command asks the daemon
/// to act (`user.scratchfs.restore`, `user.scratchfs.gc`).
pub fn set_xattr(file: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(file.as_os_str().as_bytes())?;
    let name = std::ffi::CString::new(name)?;
    let rc = unsafe {
        libc::setxattr(
            c.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// How long a command waits for the database lock to apply a killed daemon's redo log.
const REDO_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The read side of the database `db` ([`crate::store::History`]), opened to read only
/// (no lock taken, nothing written): SQLite's after [`open_sqlite`] made every acknowledged
/// change visible in it, PostgreSQL's at once.
pub fn open_history(db: &Path) -> Result<Box<dyn crate::store::History>, Failure> {
    if let Some(url) = postgres_url(db) {
        return Ok(Box::new(
            crate::store::postgres::Postgres::open_frozen(url).map_err(|e| e.reason)?,
        ));
    }
    drop(open_sqlite(db)?);
    Ok(Box::new(
        crate::store::Sqlite::open_frozen(db).map_err(|e| e.reason)?,
    ))
}

/// Opens an SQLite database read-only, after making every change the daemon
/// acknowledged visible in it: while the database is mounted, `fsync` of the mountpoint
/// asks the daemon to write its batch (`fsyncdir`, docs/SEMANTICS.md); when it is not, a
/// redo log left by a killed daemon is applied, as the next mount would. If another
/// process holds the database lock (a mount starting, another command applying the log),
/// this waits for it up to `REDO_LOCK_WAIT` (10 s), then reads what SQLite has, with a
/// warning on stderr. (On PostgreSQL every acknowledged change is committed already.)
pub fn open_sqlite(db: &Path) -> Result<rusqlite::Connection, Failure> {
    let start = std::time::Instant::now();
    loop {
        let asked = live_mountpoint(db)?
            .is_some_and(|m| std::fs::File::open(m).and_then(|d| d.sync_all()).is_ok());
        // A dead mount (a killed daemon) answers ENOTCONN: then the log is applied here.
        let log = std::fs::metadata(crate::store::RedoLog::path_for(db)).map_or(0, |m| m.len());
        if asked || log == 0 {
            break;
        }
        if let Ok(_lock) = crate::mount::lock_database_now(db) {
            let owner = (unsafe { libc::geteuid() }, unsafe { libc::getegid() });
            crate::store::Sqlite::open(db, owner).map_err(|e| e.reason)?;
            break;
        }
        if start.elapsed() >= REDO_LOCK_WAIT {
            eprintln!(
                "scratchfs: warning: {} holds {log} bytes of changes not yet in the database, \
                 and another process holds its lock; the latest changes may be missing",
                crate::store::RedoLog::path_for(db).display()
            );
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    crate::store::open_read_only(db).map_err(|e| e.reason)
}

/// The stored form ([`crate::store::paths::encode`]) of a PATH or PATH@N argument, taken
/// as the raw bytes the user gave.
pub fn arg(a: &OsStr) -> String {
    paths::encode(a.as_bytes()).into_owned()
}

/// `PATH[@N]` (stored form) as written → the path and the version (`None`: current),
/// before the store is asked ([`resolve_spec`] asks it). The last `@` splits when digits
/// or nothing follow it: `f@3` is version 3 of `f`, `f@` the current version of `f`
/// (`f@1@` the current version of a file named `f@1`, `f@1@2` its version 2). An `@`
/// followed by anything else belongs to the name (`notes@home.md`).
pub fn parse_spec(spec: &str) -> Result<(String, Option<i64>), Failure> {
    match spec.rsplit_once('@') {
        Some((p, "")) if !p.is_empty() => Ok((p.to_string(), None)),
        Some((p, n)) if !p.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            let n: i64 = n
                .parse()
                .map_err(|_| format!("{}: version number out of range", quote_stored(spec)))?;
            Ok((p.to_string(), Some(n)))
        }
        _ => Ok((spec.to_string(), None)),
    }
}

/// `PATH[@N]` resolved against the store (docs/cli.md, "Versions"): as
/// [`parse_spec`] splits it when a file (live or deleted) ever had the path before the
/// `@`, else the whole argument as a file's name when a file had that (`x@3` with no file
/// `x`: the file named `x@3`, current version). When both had, the split wins and a note
/// on stderr says how to name the other (`x@3@`).
pub fn resolve_spec(store: &dyn History, spec: &str) -> Result<(String, Option<i64>), Failure> {
    let (path, n) = parse_spec(spec)?;
    if path == spec {
        return Ok((path, n));
    }
    let whole = file_id(store, spec).is_ok();
    match file_id(store, &path) {
        Err(_) if whole => Ok((spec.to_string(), None)),
        Ok(_) if whole => {
            let what = match n {
                Some(n) => format!("version {n} of {}", quote_stored(&path)),
                None => format!("the current version of {}", quote_stored(&path)),
            };
            eprintln!(
                "scratchfs: note: {} names {what}; a file is named {} too: name it {} \
                 (its current version) or {} (its version N)",
                quote_stored(spec),
                quote_stored(spec),
                quote_stored(&format!("{spec}@")),
                quote_stored(&format!("{spec}@N")),
            );
            Ok((path, n))
        }
        _ => Ok((path, n)),
    }
}

/// The version `spec` (`PATH[@N]`, stored form) names ([`resolve_spec`]).
pub fn version_of(store: &dyn History, spec: &str) -> Result<VersionRow, Failure> {
    let (path, n) = resolve_spec(store, spec)?;
    version_in(store, &path, n, spec)
}

/// `scratchfs history PATH [--json]`: the versions of the file now (or last) at PATH,
/// through its renames.
pub fn history(db: &Path, path: &OsStr, json: bool) -> Result<(), Failure> {
    let store = open_history(db)?;
    let store = &*store;
    let all = versions(store, file_id(store, &arg(path))?)?;
    if !json && !all.is_empty() {
        // The columns' names (issue 33 item 9: a table without them read as noise).
        println!(
            "{:>4}  {:<20}  {:<8} {:>9}  {:<14} {:<6} {:<12}  path  exe",
            "v", "time (UTC)", "op", "bytes", "writer", "step", "blake3"
        );
    }
    for v in all {
        if json {
            println!("{}", version_json(store, &v)?);
        } else {
            println!(
                "{:>4}  {}  {:<8} {:>9}  {:<14} {:<6} {}  {}  {}",
                v.version,
                time::utc(v.time_ns),
                v.op,
                v.size,
                quote_path(&v.writer),
                v.step.map(|s| format!("step {s}")).unwrap_or_default(),
                &v.blake3[..12.min(v.blake3.len())],
                quote_stored(&v.path),
                quote_path(v.exe.rsplit('/').next().unwrap_or_default())
            );
        }
    }
    Ok(())
}

/// `scratchfs show PATH[@N] [--json]`: the bytes of a version on stdout; with `--json`
/// one object with the version's provenance and, last, its content (`content` when
/// UTF-8, else `content_hex`). Streams: memory stays bounded whatever the size (the JSON
/// form reads the version twice, to learn whether it is UTF-8 before writing it).
pub fn show(db: &Path, spec: &OsStr, json: bool) -> Result<(), Failure> {
    use std::io::Write;
    let store = open_history(db)?;
    let store = &*store;
    let v = version_of(store, &arg(spec))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    let io = |e: std::io::Error| format!("stdout: {e}");
    if !json {
        copy_content(store, v.content(), &mut out, "stdout")?;
        return out.flush().map_err(io);
    }
    let meta = version_json(store, &v)?.to_string();
    let meta = meta.strip_suffix('}').unwrap_or(&meta);
    let utf8 = utf8_pieces(store, v.content(), |_| Ok(()))?;
    let key = if utf8 { "content" } else { "content_hex" };
    let sep = if meta.ends_with('{') { "" } else { "," };
    write!(out, "{meta}{sep}\"{key}\":\"").map_err(io)?;
    if utf8 {
        utf8_pieces(store, v.content(), |piece| {
            let quoted = serde_json::to_string(piece).map_err(|e| e.to_string())?;
            out.write_all(&quoted.as_bytes()[1..quoted.len() - 1])
                .map_err(io)
        })?;
    } else {
        let mut hex = String::new();
        each_chunk(store, v.content(), |chunk| {
            use std::fmt::Write;
            hex.clear();
            for b in chunk {
                let _ = write!(hex, "{b:02x}");
            }
            out.write_all(hex.as_bytes()).map_err(io)
        })?;
    }
    out.write_all(b"\"}\n").map_err(io)?;
    out.flush().map_err(io)
}

/// `scratchfs show --refused EVENT [--json]`: the content refusal `EVENT` kept (secrets
/// redacted, SPEC §6) on stdout, whole and streamed; with `--json` the object of
/// [`crate::report::refused_json`]. Exit 1 when `EVENT` is not a refusal that kept content.
pub fn show_refused(db: &Path, event: i64, json: bool) -> Result<(), Failure> {
    use std::io::Write;
    let store = open_history(db)?;
    if json {
        println!("{}", crate::report::refused_json(&*store, event)?);
        return Ok(());
    }
    let (content, _) = store
        .refused_content(event)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("event {event}: not a refusal that kept content"))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    copy_content(&*store, content, &mut out, "stdout")?;
    out.flush().map_err(|e| format!("stdout: {e}"))
}

/// Writes the bytes of `content` to `out` in chunks ([`each_chunk`]); `what` names `out`
/// in a write failure (`stdout: Broken pipe`). Returns the byte count.
pub fn copy_content(
    store: &dyn History,
    content: ContentRef,
    out: &mut dyn std::io::Write,
    what: &str,
) -> Result<u64, Failure> {
    each_chunk(store, content, |chunk| {
        out.write_all(chunk).map_err(|e| format!("{what}: {e}"))
    })
}

/// Whether `content` is UTF-8, read in chunks ([`each_chunk`]): calls `f` with its text
/// in order, one piece per chunk (a character split between two chunks goes with the
/// second). `Ok(true)` when all of it is UTF-8 (the pieces then make up the whole
/// content); `Ok(false)` at the first chunk holding a byte that is not (`f` has then seen
/// only the text before that chunk).
pub fn utf8_pieces(
    store: &dyn History,
    content: ContentRef,
    mut f: impl FnMut(&str) -> Result<(), Failure>,
) -> Result<bool, Failure> {
    let mut carry: Vec<u8> = Vec::new();
    let mut ok = true;
    // A failure of `f` ends the reading; `Err("")` marks an invalid byte.
    let r = each_chunk(store, content, |chunk| {
        let joined;
        let bytes = if carry.is_empty() {
            chunk
        } else {
            carry.extend_from_slice(chunk);
            joined = std::mem::take(&mut carry);
            &joined[..]
        };
        let valid = match std::str::from_utf8(bytes) {
            Ok(s) => s,
            // An incomplete character at the end (at most 3 bytes) waits for the next chunk.
            Err(e) if e.error_len().is_none() => {
                let (v, rest) = bytes.split_at(e.valid_up_to());
                carry = rest.to_vec();
                std::str::from_utf8(v).unwrap_or_default()
            }
            Err(_) => {
                ok = false;
                return Err(String::new());
            }
        };
        f(valid)
    });
    match r {
        Ok(_) => Ok(carry.is_empty()),
        Err(e) if e.is_empty() && !ok => Ok(false),
        Err(e) => Err(e),
    }
}

/// The scratchpad of an unmounted database `db`, opened by this process (the caller holds
/// the database's lock, [`crate::mount::lock_database_now`]), with the writer rules of
/// its last mount (stored in the database; an empty text: the defaults), so that an
/// offline command passes the same gate as on the mount. A killed daemon's redo log is
/// replayed first ([`crate::store::Sqlite::open`]).
pub(crate) fn offline_fs(db: &Path) -> Result<crate::fs::Fs, Failure> {
    offline_fs_fresh(db).map(|(fs, _)| fs)
}

/// [`offline_fs`], and whether the database was created just now (then it holds the
/// default layout, as a first mount's does).
pub(crate) fn offline_fs_fresh(db: &Path) -> Result<(crate::fs::Fs, bool), Failure> {
    offline_fs_owned(db, unsafe { (libc::getuid(), libc::getgid()) })
}

/// [`offline_fs_fresh`], a new scratchpad's root and default layout owned by `owner`
/// (uid, gid), as `mount --owner` makes them (`scratchfs mcp --listen --as UID`: the
/// user every call acts as may then write its new scratchpad).
pub(crate) fn offline_fs_owned(
    db: &Path,
    owner: (u32, u32),
) -> Result<(crate::fs::Fs, bool), Failure> {
    let me = owner;
    let (store, fresh, dir): (std::sync::Arc<dyn crate::store::Store>, bool, _) =
        match postgres_url(db) {
            Some(url) => {
                let (store, fresh) =
                    crate::store::postgres::Postgres::open(url, me).map_err(|e| e.reason)?;
                (std::sync::Arc::new(store), fresh, std::env::temp_dir())
            }
            None => {
                let (store, fresh) = crate::store::Sqlite::open(db, me).map_err(|e| e.reason)?;
                let dir = db
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| ".".into());
                (std::sync::Arc::new(store), fresh, dir)
            }
        };
    let text = store
        .rules_text()
        .map_err(|e| format!("{}: {e}", db.display()))?;
    let mut fs = crate::fs::Fs::new(store, dir).map_err(|e| e.to_string())?;
    if let Some(text) = text
        && !text.trim().is_empty()
    {
        let rules = crate::rules::Rules::parse(&text)
            .map_err(|p| format!("{}: the stored rules do not parse: {}", db.display(), p[0]))?;
        fs = fs.with_rules(crate::rules::enforce::Compiled::new(rules));
    }
    if fresh {
        fs.seed(crate::mount::DEFAULT_LAYOUT, me)
            .map_err(|e| format!("{}: {e}", db.display()))?;
    }
    Ok((fs, fresh))
}
