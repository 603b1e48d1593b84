//! The end of a task (issue 36 item 5): `scratchfs promote --to DB ITEM...` copies chosen
//! files, or one JSON key of a file, from this scratchpad into a long-lived one, as new
//! versions (op `promote`) judged by that one's rules as the promoting caller, their
//! provenance naming this pad, the version and its writer (the `origins` of `adopt`,
//! across databases and backends), each promotion recorded here too (an event, op
//! `promote`); `scratchfs retire [--export FILE.tar]` then writes the pad with its whole
//! history to a tar file and makes it read-only for good (an event, op `retire`, and
//! `meta.retired`): no mount, `scratchfs mcp` or command opens it for writing again.

use std::ffi::OsString;
use std::path::Path;

use super::Failure;
use super::fork::{absolute, adopted_report, heads, me, shown, tree_now};
use crate::cli::fork::AdoptRequest;
use crate::views::quote_stored;

/// `promote --to TARGET --db SOURCE ITEM...`: ITEM is a file's path, or `PATH:KEY` (a
/// top-level key of a JSON object file) when PATH is a file of SOURCE and ITEM is not.
pub fn promote(
    source: &Path,
    target: &Path,
    items: &[OsString],
    json: bool,
) -> Result<(), Failure> {
    super::check_db(source)?;
    let source = absolute(source)?;
    let (_, theirs) = tree_now(&source)?;
    let is_file = |p: &str| {
        theirs
            .lookup(&crate::store::paths::decode(p))
            .is_some_and(|n| n.kind == crate::store::Kind::File)
    };
    let mut parsed: Vec<(String, Option<String>)> = Vec::new();
    for item in items {
        use std::os::unix::ffi::OsStrExt;
        let stored = crate::store::paths::encode(item.as_bytes())
            .trim_matches('/')
            .to_string();
        if is_file(&stored) {
            parsed.push((stored, None));
            continue;
        }
        match stored.rsplit_once(':') {
            Some((p, k)) if !k.is_empty() && is_file(p.trim_end_matches('/')) => {
                parsed.push((p.trim_end_matches('/').to_string(), Some(k.to_string())));
            }
            _ => {
                return Err(format!(
                    "promote: {}: no such file in {} (PATH, or PATH:KEY for one key of a JSON file)",
                    quote_stored(&stored),
                    shown(&source)
                ));
            }
        }
    }
    super::check_db(target)?;
    let paths: Vec<String> = parsed.iter().map(|(p, _)| p.clone()).collect();
    let done = match crate::mount::lock_database_now(target) {
        Ok(lock) => {
            let fs = super::offline_fs(target)?;
            let r = fs
                .bring_from(&source.to_string_lossy(), &parsed, "promote", me())
                .map_err(|e| e.reason);
            drop(fs);
            drop(lock);
            r?
        }
        Err(_) => {
            let mnt = super::live_mountpoint(target)?
                .ok_or("promote: the target is in use, but not mounted where it says")?;
            let before = heads(target, &paths)?;
            let req = AdoptRequest {
                from: source.to_string_lossy().into_owned(),
                paths: paths.clone(),
                keys: parsed.iter().map(|(_, k)| k.clone()).collect(),
                op: Some("promote".into()),
            };
            let value = serde_json::to_vec(&req).map_err(|e| e.to_string())?;
            super::set_xattr(Path::new(&mnt), crate::fs::serve::ADOPT_XATTR, &value).map_err(
                |e| match e.raw_os_error() {
                    Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EINVAL) => format!(
                        "promote: {e} (refused by the target's gate; scratchfs log --rejected \
                         --db {} says why)",
                        shown(target)
                    ),
                    _ => format!("promote: {e}"),
                },
            )?;
            let mut done = adopted_report(target, &source, &paths, &before)?;
            for (d, (_, k)) in done.iter_mut().zip(&parsed) {
                d.key = k.clone();
            }
            done
        }
    };
    // Recorded in this pad too: what went where.
    for d in &done {
        let what = match &d.key {
            Some(k) => format!("{}:{k}", quote_stored(&d.path)),
            None => quote_stored(&d.path).into_owned(),
        };
        let reason = match d.version {
            Some(v) => format!(
                "promoted version {} of {what} to {} as version {v}",
                d.from_version,
                shown(target)
            ),
            None => format!(
                "promoted version {} of {what} to {}: the same there already",
                d.from_version,
                shown(target)
            ),
        };
        note(&source, &d.path, &reason)?;
    }
    for d in &done {
        if json {
            let mut o = serde_json::to_value(d).map_err(|e| e.to_string())?;
            o["to"] = serde_json::json!(shown(target));
            super::json_paths(&mut o, &["path"]);
            println!("{o}");
        } else {
            let what = match &d.key {
                Some(k) => format!("{}:{k}", quote_stored(&d.path)),
                None => quote_stored(&d.path).into_owned(),
            };
            match d.version {
                Some(v) => println!(
                    "{what}: promoted version {} by {} to {} as version {v}",
                    d.from_version,
                    crate::views::one_line(&d.from_writer),
                    shown(target)
                ),
                None => println!(
                    "{what}: the same in {} already (no new version)",
                    shown(target)
                ),
            }
        }
    }
    Ok(())
}

/// Records `reason` as an event (op `promote`) at `path` in `db`, by this process:
/// through its daemon when it is mounted (`user.scratchfs.promoted` on the mount's
/// root), else in the store.
fn note(db: &Path, path: &str, reason: &str) -> Result<(), Failure> {
    let caller = super::gc::cli_caller();
    if super::postgres_url(db).is_some() {
        let fs = super::offline_fs(db)?;
        return fs
            .note_promoted(path, reason, &caller)
            .map_err(|e| e.reason);
    }
    match crate::mount::lock_database_now(db) {
        Ok(_lock) => {
            let fs = super::offline_fs(db)?;
            fs.note_promoted(path, reason, &caller)
                .map_err(|e| e.reason)
        }
        Err(_) => {
            let mnt = super::live_mountpoint(db)?
                .ok_or("promote: the source is in use, but not mounted where it says")?;
            let value = serde_json::to_vec(&serde_json::json!({ "path": path, "reason": reason }))
                .map_err(|e| e.to_string())?;
            super::set_xattr(Path::new(&mnt), crate::fs::serve::PROMOTED_XATTR, &value)
                .map_err(|e| format!("promote: recording it in {}: {e}", shown(db)))
        }
    }
}

/// `retire [--export FILE.tar]`: the pad, not mounted, exported with its history when
/// asked, then made read-only for good.
pub fn retire(db: &Path, export: Option<&Path>, json: bool) -> Result<(), Failure> {
    super::check_db(db)?;
    let _lock = match super::postgres_url(db) {
        Some(_) => None,
        None => Some(crate::mount::lock_database_now(db).map_err(|_| {
            format!(
                "retire: {} is mounted (or another command holds it): unmount it first",
                shown(db)
            )
        })?),
    };
    let fs = super::offline_fs(db)?;
    if let Some(when) = fs.retired().map_err(|e| e.reason)? {
        return Err(format!(
            "retire: {} was retired already ({when})",
            shown(db)
        ));
    }
    let exported = match export {
        Some(file) => Some(export_tar(&*super::open_history(db)?, file)?),
        None => None,
    };
    let caller = super::gc::cli_caller();
    let what = match (&exported, export) {
        (Some(n), Some(f)) => format!(
            "retired; exported with its history to {} ({n} versions)",
            f.display()
        ),
        _ => "retired".to_string(),
    };
    let when = fs.retire(&what, &caller).map_err(|e| e.reason)?;
    if json {
        println!(
            "{}",
            serde_json::json!({ "retired": when, "exported": export.map(|f| f.display().to_string()), "versions": exported })
        );
    } else {
        println!("{}: {what} ({when}); read-only from now on", shown(db));
    }
    Ok(())
}

/// Writes `history` to the tar file `file` (a new file): `tree/PATH` each live file as
/// it is now, `history/FILE_ID/N` every version kept, `versions.jsonl` one line per
/// version (path, lineage, number, op, size, blake3, writer, time) and `log.jsonl` the
/// log as `log --json` prints it, `rules.json` the rules last mounted with. Returns the
/// versions written. Each version is read whole (the largest file's size in memory).
fn export_tar(history: &dyn crate::store::History, file: &Path) -> Result<u64, Failure> {
    use std::io::Write;
    let out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file)
        .map_err(|e| format!("retire --export {}: {e}", file.display()))?;
    let mut tar = tar::Builder::new(std::io::BufWriter::new(out));
    let now = (crate::store::sql::now_ns() / 1_000_000_000) as u64;
    let add = |tar: &mut tar::Builder<_>, name: &[u8], bytes: &[u8]| -> Result<(), Failure> {
        let mut h = tar::Header::new_gnu();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(now);
        h.set_entry_type(tar::EntryType::Regular);
        let name = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name));
        tar.append_data(&mut h, &name, bytes)
            .map_err(|e| format!("retire --export: {}: {e}", name.display()))
    };
    use std::os::unix::ffi::OsStrExt;
    let read = |c: crate::store::ContentRef| -> Result<Vec<u8>, Failure> {
        let mut b = vec![0u8; c.len as usize];
        let n = history.read(c, 0, &mut b).map_err(|e| e.reason)?;
        b.truncate(n);
        Ok(b)
    };
    let snap = history
        .snapshot(history.point_at(i64::MAX).map_err(|e| e.reason)?)
        .map_err(|e| e.reason)?;
    for (path, n) in snap.walk() {
        if n.kind == crate::store::Kind::File && !n.forgotten {
            let mut name = b"tree/".to_vec();
            name.extend_from_slice(&crate::store::paths::decode(&path));
            add(&mut tar, &name, &read(n.content())?)?;
        }
    }
    let mut index = Vec::new();
    let mut count = 0u64;
    for l in history.lineages("").map_err(|e| e.reason)? {
        for v in history.version_rows(l.file_id).map_err(|e| e.reason)? {
            let name = format!("history/{}/{}", l.file_id, v.version);
            add(&mut tar, name.as_bytes(), &read(v.content())?)?;
            let mut o = serde_json::json!({
                "path": v.path, "file_id": l.file_id, "version": v.version, "op": v.op,
                "size": v.size, "blake3": v.blake3, "writer": v.writer, "time_ns": v.time_ns,
                "content": name,
            });
            super::json_paths(&mut o, &["path"]);
            writeln!(index, "{o}").map_err(|e| e.to_string())?;
            count += 1;
        }
    }
    add(&mut tar, b"versions.jsonl", &index)?;
    let mut log = Vec::new();
    for e in history.log(&Default::default()).map_err(|e| e.reason)? {
        writeln!(log, "{}", crate::report::log_entry_json(history, e))
            .map_err(|e| e.to_string())?;
    }
    add(&mut tar, b"log.jsonl", &log)?;
    // An empty text is the defaults: no file.
    if let Some(rules) = history.rules_text().map_err(|e| e.reason)?
        && !rules.trim().is_empty()
    {
        add(&mut tar, b"rules.json", rules.as_bytes())?;
    }
    let mut w = tar
        .into_inner()
        .map_err(|e| format!("retire --export: {e}"))?;
    w.flush().map_err(|e| format!("retire --export: {e}"))?;
    w.get_ref()
        .sync_all()
        .map_err(|e| format!("retire --export: {e}"))?;
    Ok(count)
}
