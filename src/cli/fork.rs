//! `scratchfs fork`, `compare` and `adopt` (issue 14; docs/checkpoints.md): a new
//! scratchpad whose tree is another's at a point, for a sub-agent or a retry; what differs
//! between two; and bringing chosen files from one into the other, through the gate, with
//! provenance naming where they came from.

use crate::store::History;
use std::collections::BTreeSet;
use std::path::Path;

use super::Failure;
use crate::checkpoint::{Snapshot, resolve_at};
use crate::fs::Ctx;
use crate::store::{Sqlite, Store};
use crate::views::quote_stored;

pub(super) fn me() -> Ctx {
    Ctx {
        pid: std::process::id(),
        uid: unsafe { libc::getuid() },
        gid: unsafe { libc::getgid() },
    }
}

/// `db` opened to read ([`super::open_history`]: on SQLite every acknowledged change made
/// visible first, a mount's batch written, a killed daemon's redo log applied) and its
/// tree now.
pub(super) fn tree_now(db: &Path) -> Result<(Box<dyn History>, Snapshot), Failure> {
    let store = super::open_history(db)?;
    let snap = store
        .snapshot(store.point_at(i64::MAX).map_err(|e| e.reason)?)
        .map_err(|e| e.reason)?;
    Ok((store, snap))
}

/// A scratchpad as messages and provenance name it: a PostgreSQL URL without its
/// credentials ([`crate::store::postgres::display_name`]), an SQLite file as given.
pub(super) fn shown(db: &Path) -> String {
    match super::postgres_url(db) {
        Some(url) => crate::store::postgres::display_name(url),
        None => db.display().to_string(),
    }
}

/// An SQLite path made absolute; a PostgreSQL URL as it is.
pub(super) fn absolute(db: &Path) -> Result<std::path::PathBuf, Failure> {
    match super::postgres_url(db) {
        Some(_) => Ok(db.to_path_buf()),
        None => crate::mount::absolute(db),
    }
}

/// Refuses a fork's destination that is not new: an SQLite path where anything is (even
/// a link, or a file a database would take as its own: redo log, WAL, journal) or whose
/// directory is on a FUSE filesystem; a PostgreSQL database that holds a scratchpad
/// already (it may exist, empty: creating databases is the administrator's, docs/deploy.md).
fn check_new(dst: &Path) -> Result<(), Failure> {
    if let Some(url) = super::postgres_url(dst) {
        return match crate::store::postgres::Postgres::open_frozen(url) {
            Ok(_) => Err(format!(
                "fork: {}: holds a scratchpad already (a fork makes a new one: give an empty \
                 database)",
                shown(dst)
            )),
            Err(e) if e.is(crate::store::ErrorKind::NotFound) => Ok(()),
            Err(e) => Err(format!("fork: {e}")),
        };
    }
    let mut journal = dst.to_path_buf().into_os_string();
    journal.push("-journal");
    for p in crate::store::companions(dst)
        .into_iter()
        .chain([std::path::PathBuf::from(journal)])
    {
        if std::fs::symlink_metadata(&p).is_ok() {
            return Err(format!(
                "fork: {}: exists (a fork makes a new database; remove it first)",
                p.display()
            ));
        }
    }
    // Not inside a mount (SQLite's WAL needs a local filesystem, FUSE-TRAPS §16).
    if let Some(dir) = dst.parent()
        && crate::mount::on_fuse(dir)
    {
        return Err(format!(
            "fork: {}: its directory is on a FUSE filesystem (a mount, say); a database must \
             live on a local filesystem",
            dst.display()
        ));
    }
    Ok(())
}

/// `scratchfs fork --db SRC --to DST [--at NAME|TIME] [--tree-only]`.
pub fn fork(
    src: &Path,
    dst: &Path,
    at: Option<&str>,
    tree_only: bool,
    json: bool,
) -> Result<(), Failure> {
    let src = absolute(src)?;
    let dst = absolute(dst)?;
    check_new(&dst)?;
    let store = tree_now(&src)?.0;
    let store = &*store;
    let (point, label, max_cp) = match at {
        Some(at) => {
            let (p, label) = resolve_at(store, at).map_err(|e| e.reason)?;
            let cp = store
                .checkpoints()
                .map_err(|e| e.reason)?
                .into_iter()
                .find(|c| c.name == at)
                .map(|c| c.id);
            (p, label, cp)
        }
        None => (
            store.point_at(i64::MAX).map_err(|e| e.reason)?,
            "now".to_string(),
            None,
        ),
    };
    let lost = store.snapshot(point).map_err(|e| e.reason)?.forgotten();
    if !lost.is_empty() {
        let shown: Vec<String> = lost
            .iter()
            .take(5)
            .map(|p| quote_stored(p).into_owned())
            .collect();
        return Err(format!(
            "fork: at {label}, gc had forgotten the version of {} file{} then ({}{}): a fork \
             would hold other bytes; choose a checkpoint (gc keeps what they need) or a later time",
            lost.len(),
            if lost.len() == 1 { "" } else { "s" },
            shown.join(", "),
            if lost.len() > 5 { ", ..." } else { "" }
        ));
    }
    let from = serde_json::json!({
        "source": shown(&src),
        "source_id": store.meta("scratchpad_id").map_err(|e| e.reason)?,
        "at": label,
        "point": point,
        "tree_only": tree_only,
    });
    let files;
    if tree_only {
        let snap = store.snapshot(point).map_err(|e| e.reason)?;
        files = snap.files().len();
        let tree = |at: &Path| fork_tree(store, &snap, &shown(&src), at, &from.to_string());
        match super::postgres_url(&dst) {
            Some(_) => tree(&dst)?,
            // Built under a temporary name, named `dst` when complete.
            None => crate::store::build_new(&dst, tree, |e| format!("fork: {e}"))?,
        }
    } else {
        crate::store::fork_full(&src, &dst, point, max_cp, &from.to_string())
            .map_err(|e| format!("fork: {}", e.reason))?;
        files = store.snapshot(point).map_err(|e| e.reason)?.files().len();
    }
    if json {
        println!(
            "{}",
            serde_json::json!({ "fork": shown(&dst), "from": from, "files": files })
        );
    } else {
        println!(
            "fork {}: {} as it was at {label} ({files} files{})",
            shown(&dst),
            shown(&src),
            if tree_only {
                ", without history"
            } else {
                ", with its history up to then"
            }
        );
    }
    Ok(())
}

/// A fork without history: a new scratchpad with one version (op `fork`) per file, each
/// naming the version it copies (`origins`), directories as they were.
fn fork_tree(
    src: &dyn History,
    snap: &Snapshot,
    src_name: &str,
    dst: &Path,
    from: &str,
) -> Result<(), Failure> {
    let me = me();
    let source_id = src.meta("scratchpad_id").map_err(|e| e.reason)?;
    let (store, dir): (std::sync::Arc<dyn Store>, std::path::PathBuf) =
        match super::postgres_url(dst) {
            Some(url) => {
                let (store, fresh) = crate::store::postgres::Postgres::open(url, (me.uid, me.gid))
                    .map_err(|e| format!("fork: {e}"))?;
                if !fresh {
                    // Another process made a scratchpad there since `check_new`.
                    return Err(format!(
                        "fork: {}: holds a scratchpad already",
                        crate::store::postgres::display_name(url)
                    ));
                }
                store.set_meta("forked_from", from).map_err(|e| e.reason)?;
                (std::sync::Arc::new(store), std::env::temp_dir())
            }
            None => {
                // `dst` is the empty, private file `build_new` made to build in.
                let (store, _) = Sqlite::open(dst, (me.uid, me.gid)).map_err(|e| e.reason)?;
                store.set_meta("forked_from", from).map_err(|e| e.reason)?;
                let dir = dst
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| ".".into());
                (std::sync::Arc::new(store), dir)
            }
        };
    let fs = crate::fs::Fs::new(store.clone(), dir).map_err(|e| e.reason)?;
    let mut new_ino = std::collections::HashMap::new();
    new_ino.insert(crate::checkpoint::snapshot::ROOT, crate::fs::ROOT);
    for (path, n) in snap.walk() {
        let Some(&parent) = new_ino.get(&n.parent) else {
            continue;
        };
        let ino = if n.kind == crate::store::Kind::Dir {
            fs.mkdir(parent, &n.name, n.mode, 0, me)
                .map_err(|e| format!("fork: {}: {}", quote_stored(&path), e.reason))?
                .ino
        } else {
            // One read fills the buffer across the content's extents (as `Fs::bytes_of`).
            let mut bytes = vec![0u8; n.size() as usize];
            let got = src.read(n.content(), 0, &mut bytes).map_err(|e| e.reason)?;
            bytes.truncate(got);
            let v = n.version.as_ref();
            let origin = crate::store::Origin {
                source: src_name.to_string(),
                source_id: source_id.clone(),
                source_version_id: v.map_or(0, |v| v.id),
                path: path.clone(),
                version: v.map_or(0, |v| v.number),
                writer: v.map_or(String::new(), |v| v.writer.clone()),
            };
            fs.adopt(&path, &bytes, n.mode, "fork", &origin, me)
                .map_err(|e| format!("fork: {}: {}", quote_stored(&path), e.reason))?;
            fs.lookup(parent, &n.name).map_err(|e| e.reason)?.ino
        };
        new_ino.insert(n.ino, ino);
        if me.uid == 0 && (n.uid, n.gid) != (me.uid, me.gid) {
            let set = crate::fs::SetAttr {
                uid: Some(n.uid),
                gid: Some(n.gid),
                ..Default::default()
            };
            fs.setattr(ino, set, None, me).map_err(|e| e.reason)?;
        }
    }
    drop(fs);
    store.sync_to_disk().map_err(|e| e.reason)?;
    Ok(())
}

/// One difference between two scratchpads.
#[derive(Debug, serde::Serialize)]
struct Difference {
    path: String,
    /// `added` (only in B), `removed` (only in A), `changed`.
    what: &'static str,
    a: Option<Side>,
    b: Option<Side>,
}

#[derive(Debug, serde::Serialize)]
struct Side {
    version: i64,
    writer: String,
    bytes: u64,
    blake3: String,
}

fn side(n: &crate::checkpoint::SnapNode) -> Side {
    Side {
        version: n.version.as_ref().map_or(0, |v| v.number),
        writer: n
            .version
            .as_ref()
            .map_or_else(String::new, |v| v.writer.clone()),
        bytes: n.size(),
        blake3: n.blake3(),
    }
}

/// `scratchfs compare --db A --with B [--json]`: the files added in B, removed from it
/// and changed, with versions and writers on both sides.
pub fn compare(a: &Path, b: &Path, json: bool) -> Result<(), Failure> {
    let (_sa, ta) = tree_now(a)?;
    let (_sb, tb) = tree_now(b)?;
    let (fa, fb) = (ta.files(), tb.files());
    let paths: BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    let mut diffs = Vec::new();
    for p in paths {
        let d = match (fa.get(p), fb.get(p)) {
            (Some(x), Some(y)) if x.blake3() == y.blake3() => continue,
            (Some(x), Some(y)) => ("changed", Some(side(x)), Some(side(y))),
            (Some(x), None) => ("removed", Some(side(x)), None),
            (None, Some(y)) => ("added", None, Some(side(y))),
            (None, None) => continue,
        };
        diffs.push(Difference {
            path: p.clone(),
            what: d.0,
            a: d.1,
            b: d.2,
        });
    }
    if json {
        for d in &diffs {
            let mut o = serde_json::to_value(d).map_err(|e| e.to_string())?;
            super::json_paths(&mut o, &["path"]);
            println!("{o}");
        }
        return Ok(());
    }
    if diffs.is_empty() {
        println!(
            "no differences: the files of {} and {} are the same",
            shown(a),
            shown(b)
        );
        return Ok(());
    }
    let show = |s: &Option<Side>| {
        s.as_ref().map_or_else(String::new, |s| {
            format!(
                "v{} by {} ({} B)",
                s.version,
                crate::views::one_line(&s.writer),
                s.bytes
            )
        })
    };
    for d in &diffs {
        let line = match d.what {
            "added" => format!("+ {}  only in B: {}", quote_stored(&d.path), show(&d.b)),
            "removed" => format!("- {}  only in A: {}", quote_stored(&d.path), show(&d.a)),
            _ => format!(
                "~ {}  A: {}; B: {}",
                quote_stored(&d.path),
                show(&d.a),
                show(&d.b)
            ),
        };
        println!("{line}");
    }
    println!(
        "{} difference{} (A: {}, B: {})",
        diffs.len(),
        if diffs.len() == 1 { "" } else { "s" },
        shown(a),
        shown(b)
    );
    Ok(())
}

/// Each path's current version in `a` (`versions.id`), before an adopt.
pub(super) fn heads(a: &Path, paths: &[String]) -> Result<Vec<Option<i64>>, Failure> {
    let (_, ta) = tree_now(a)?;
    Ok(paths
        .iter()
        .map(|p| {
            let raw = crate::store::paths::decode(p).into_owned();
            ta.lookup(&raw)
                .and_then(|n| n.version.as_ref().map(|v| v.id))
        })
        .collect())
}

/// What the daemon did for `adopt`, read back from A: each path's current version and,
/// when it came from B and is new (not `before`, the version it had), the version there.
pub(super) fn adopted_report(
    a: &Path,
    b: &Path,
    paths: &[String],
    before: &[Option<i64>],
) -> Result<Vec<crate::fs::Adopted>, Failure> {
    let (sa, ta) = tree_now(a)?;
    let (_, tb) = tree_now(b)?;
    let mut out = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let raw = crate::store::paths::decode(p).into_owned();
        let theirs = tb.lookup(&raw).and_then(|n| n.version.clone());
        let ours = ta
            .lookup(&raw)
            .and_then(|n| n.version.clone())
            .filter(|v| Some(v.id) != before.get(i).copied().flatten());
        let origin = match &ours {
            Some(v) => sa.origin(v.id).map_err(|e| e.reason)?,
            None => None,
        };
        let from_b = origin
            .as_ref()
            .is_some_and(|o| Some(o.source_version_id) == theirs.as_ref().map(|t| t.id));
        out.push(crate::fs::Adopted {
            path: p.clone(),
            key: None,
            from_version: theirs.as_ref().map_or(0, |t| t.number),
            from_writer: theirs.map_or_else(String::new, |t| t.writer),
            version: ours.filter(|_| from_b).map(|v| v.number),
        });
    }
    Ok(out)
}

/// What `adopt` asks a daemon for (the value of [`crate::fs::serve::ADOPT_XATTR`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct AdoptRequest {
    /// The other scratchpad: an SQLite file's absolute path, or a PostgreSQL URL.
    pub from: String,
    /// The files, as stored paths.
    pub paths: Vec<String>,
    /// For each path, the one JSON key to bring (`promote PATH:KEY`, issue 36), if any.
    #[serde(default)]
    pub keys: Vec<Option<String>>,
    /// `adopt` (absent) or `promote`.
    #[serde(default)]
    pub op: Option<String>,
}

/// `scratchfs adopt --db A --from B PATH…`: each file of B as it is now becomes a new
/// version of the same path in A (op `adopt`), through A's gate, its provenance naming B
/// and the version there.
pub fn adopt(a: &Path, b: &Path, paths: &[std::ffi::OsString], json: bool) -> Result<(), Failure> {
    let b = absolute(b)?;
    // B's acknowledged changes made visible (it may be mounted), and each path a file there.
    let (_, theirs) = tree_now(&b)?;
    let stored: Vec<String> = paths
        .iter()
        .map(|p| {
            use std::os::unix::ffi::OsStrExt;
            crate::store::paths::encode(p.as_bytes())
                .trim_matches('/')
                .to_string()
        })
        .collect();
    for p in &stored {
        let raw = crate::store::paths::decode(p);
        if !theirs
            .lookup(&raw)
            .is_some_and(|n| n.kind == crate::store::Kind::File)
        {
            return Err(format!(
                "adopt: {}: no such file in {}",
                quote_stored(p),
                shown(&b)
            ));
        }
    }
    super::check_db(a)?;
    let done = match crate::mount::lock_database_now(a) {
        Ok(lock) => {
            let fs = super::offline_fs(a)?;
            let r = fs
                .adopt_from(&b.to_string_lossy(), &stored, me())
                .map_err(|e| e.reason);
            drop(fs);
            drop(lock);
            r?
        }
        Err(_) => {
            let mnt = super::live_mountpoint(a)?
                .ok_or("adopt: the database is in use, but not mounted where it says")?;
            let before = heads(a, &stored)?;
            let req = AdoptRequest {
                from: b.to_string_lossy().into_owned(),
                paths: stored.clone(),
                keys: Vec::new(),
                op: None,
            };
            let value = serde_json::to_vec(&req).map_err(|e| e.to_string())?;
            super::set_xattr(Path::new(&mnt), crate::fs::serve::ADOPT_XATTR, &value).map_err(
                |e| match e.raw_os_error() {
                    Some(libc::ENOENT) => {
                        format!("adopt: a path is no file in {}", shown(&b))
                    }
                    Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EINVAL) => format!(
                        "adopt: {e} (refused by the gate; scratchfs log --rejected says why)"
                    ),
                    _ => format!("adopt: {e}"),
                },
            )?;
            adopted_report(a, &b, &stored, &before)?
        }
    };
    for d in &done {
        if json {
            let mut o = serde_json::to_value(d).map_err(|e| e.to_string())?;
            super::json_paths(&mut o, &["path"]);
            println!("{o}");
        } else {
            match d.version {
                Some(v) => println!(
                    "{}: adopted version {} by {} of {} as version {v}",
                    quote_stored(&d.path),
                    d.from_version,
                    crate::views::one_line(&d.from_writer),
                    shown(&b)
                ),
                None => println!(
                    "{}: already the same as version {} of {} (no new version)",
                    quote_stored(&d.path),
                    d.from_version,
                    shown(&b)
                ),
            }
        }
    }
    Ok(())
}
