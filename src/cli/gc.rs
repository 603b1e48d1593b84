//! `scratchfs gc --keep-last N | --before TIME [--dry-run]`: forgets old versions and the
//! content only they held (SPEC §2). Nothing is selected without one of the two flags, and
//! these are never deleted: the current version of every file (deleted files included, so
//! `.archive` stays whole), the versions MANIFEST points at (its `restorable:` list), and
//! the versions that per-key provenance of a JSON file names, nor (when mounted) the
//! content that open handles still read.

use std::path::Path;

use super::Failure;
use crate::identity::Caller;
use crate::store::{GcReport, GcRequest};

/// Runs gc. `keep_last`: keep the newest N versions of every file; `before_ns`: forget
/// versions committed before this time (ns since the epoch, [`super::time::parse_ns`]; a
/// time not after the first version forgets nothing, which a note on stderr says). With
/// both, a version goes if either says so.
/// While the database is mounted, the daemon runs it (through the attribute
/// `user.scratchfs.gc` on the mount's root), keeping what open handles still read.
///
/// `drop`: checkpoints released first (`--drop-checkpoint NAME`, issue 14; each recorded,
/// root or the user who mounted only); with neither selector, that is all gc does.
pub fn gc(
    db: &Path,
    drop: &[String],
    keep_last: Option<u64>,
    before_ns: Option<i64>,
    dry_run: bool,
    json: bool,
) -> Result<(), Failure> {
    if keep_last.is_none() && before_ns.is_none() && drop.is_empty() {
        return Err(
            "gc: nothing selected: give --keep-last N, --before TIME or --drop-checkpoint NAME"
                .into(),
        );
    }
    for name in drop {
        drop_checkpoint(db, name, dry_run)?;
        if !json {
            println!(
                "gc: checkpoint {} {}",
                crate::views::quote_path(name),
                if dry_run {
                    "would be released (dry run)"
                } else {
                    "released"
                }
            );
        }
    }
    if keep_last.is_none() && before_ns.is_none() {
        if json {
            println!(
                "{}",
                serde_json::json!({ "dropped_checkpoints": drop, "dry_run": dry_run })
            );
        }
        return Ok(());
    }
    let req = GcRequest {
        keep_last,
        before_ns,
        dry_run,
        policy: false,
    };
    let report = match crate::mount::lock_database_now(db) {
        Ok(_lock) => {
            // The same gate and the same list MANIFEST shows as on the mount: the
            // scratchpad opened here (a killed daemon's redo log replayed first: its records
            // replay onto the state they were made on, which deleting rows would change).
            // Erasing history is for root and the user who mounted, whom the database file
            // belongs to (it is created 0600 by that user).
            let fs = super::offline_fs(db)?.with_admins(&[db_owner(db)?]);
            let ctx = crate::fs::Ctx {
                pid: std::process::id(),
                uid: unsafe { libc::getuid() },
                gid: unsafe { libc::getgid() },
            };
            fs.gc(&req, ctx).map_err(|e| e.reason)?
        }
        Err(_) => through_mount(db, &req)?,
    };
    if report.versions == 0
        && let Some(before) = before_ns
    {
        // A TIME is accepted whatever it selects; say so when it selects nothing.
        let store = super::open_history(db)?;
        if let Some(first) = super::time::first_version_ns(&*store)?
            && before <= first
        {
            eprintln!(
                "scratchfs: note: --before {} is not after the first version ({}): no version is that old",
                super::time::utc_exact(before),
                super::time::utc_exact(first)
            );
        }
    }
    if json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "gc: {} {} versions and {} bytes of content{}",
            if dry_run { "would delete" } else { "deleted" },
            report.versions,
            report.blob_bytes + report.inline_bytes,
            if dry_run {
                " (dry run: nothing changed)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// Releases checkpoint `name` (a dry run only checks that it exists).
fn drop_checkpoint(db: &Path, name: &str, dry_run: bool) -> Result<(), Failure> {
    let q = format!("gc: checkpoint {}", crate::views::quote_path(name));
    if dry_run {
        let all = super::open_history(db)?
            .checkpoints()
            .map_err(|e| e.reason)?;
        return match all.iter().any(|c| c.name == name) {
            true => Ok(()),
            false => Err(format!("{q}: no such checkpoint")),
        };
    }
    match crate::mount::lock_database_now(db) {
        Ok(_lock) => {
            let fs = super::offline_fs(db)?.with_admins(&[db_owner(db)?]);
            let ctx = crate::fs::Ctx {
                pid: std::process::id(),
                uid: unsafe { libc::getuid() },
                gid: unsafe { libc::getgid() },
            };
            fs.drop_checkpoint(name, ctx)
                .map(|_| ())
                .map_err(|e| format!("{q}: {}", e.reason))
        }
        Err(_) => {
            let mnt = super::live_mountpoint(db)?
                .ok_or("gc: the database is in use, but not mounted where it says")?;
            super::set_xattr(
                Path::new(&mnt),
                crate::fs::serve::DROP_CHECKPOINT_XATTR,
                name.as_bytes(),
            )
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT) => format!("{q}: no such checkpoint"),
                Some(libc::EPERM) => {
                    format!("{q}: {e} (releasing a checkpoint is for root or the user who mounted)")
                }
                _ => format!("{q}: {e}"),
            })
        }
    }
}

fn through_mount(db: &Path, req: &GcRequest) -> Result<GcReport, Failure> {
    let mnt = super::live_mountpoint(db)?
        .ok_or("gc: the database is in use, but not mounted where it says")?;
    let value = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    let asked = crate::store::sql::now_ns();
    super::set_xattr(Path::new(&mnt), crate::fs::serve::GC_XATTR, &value).map_err(|e| {
        match e.raw_os_error() {
            Some(libc::EBUSY) if super::postgres_url(db).is_some() => {
                // The daemon's reason names the daemons that did not answer.
                match gc_failure(db, asked) {
                    Some(reason) => format!("{reason} ({e})"),
                    None => format!(
                        "gc: {e}: another daemon of the database did not say what it has \
                         open within 30 s (the log of the daemon at {mnt} names it); nothing \
                         was deleted"
                    ),
                }
            }
            _ => format!("gc: {e}"),
        }
    })?;
    let report = super::meta(db, "last_gc")?.ok_or("gc: the daemon left no report")?;
    serde_json::from_str(&report).map_err(|e| e.to_string())
}

/// The reason the mount's daemon left for a gc it could not begin
/// ([`crate::fs::GC_FAILURE`]), if it left it at `since` (ns) or later.
fn gc_failure(db: &Path, since: i64) -> Option<String> {
    let note = super::meta(db, crate::fs::GC_FAILURE).ok()??;
    let (time, reason) = note.split_once(' ')?;
    (time.parse::<i64>().ok()? >= since).then(|| reason.to_string())
}

/// The CLI's own caller: this process, writer `SCRATCHFS_WRITER` or `anonymous`.
pub(crate) fn cli_caller() -> Caller {
    let writer = std::env::var(crate::identity::WRITER_ENV).unwrap_or_else(|_| "anonymous".into());
    Caller::internal(&writer)
}

/// The uid the database file belongs to (the user who mounts it). A PostgreSQL database
/// has no file: its scratchpad's owner is the owner of its root directory (the user the
/// first mount made it for), so that a command run there without a mount of this host
/// lets root and that user erase or roll back, as the mount would, not whoever holds the
/// URL (the database role is a second boundary, docs/deploy.md).
pub(crate) fn db_owner(db: &Path) -> Result<u32, Failure> {
    use std::os::unix::fs::MetadataExt;
    if super::postgres_url(db).is_some() {
        let root = super::open_history(db)?
            .node(crate::fs::ROOT)
            .map_err(|e| e.to_string())?
            .ok_or("the scratchpad has no root directory")?;
        return Ok(root.attrs.uid);
    }
    std::fs::metadata(db)
        .map(|m| m.uid())
        .map_err(|e| format!("{}: {e}", db.display()))
}

/// The rules a database was last mounted with, compiled (`None`: the defaults, or rules
/// without a limit, which forget nothing).
pub(crate) fn stored_limits(
    history: &dyn crate::store::History,
    db: &Path,
) -> Result<Option<crate::rules::enforce::Compiled>, Failure> {
    let Some(text) = history.rules_text().map_err(|e| e.reason)? else {
        return Ok(None);
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    let rules = crate::rules::Rules::parse(&text)
        .map_err(|p| format!("{}: the stored rules do not parse: {}", db.display(), p[0]))?;
    let compiled = crate::rules::enforce::Compiled::new(rules);
    Ok(crate::fs::policy::has_limits(&compiled).then_some(compiled))
}

/// `scratchfs gc --policy [--dry-run] [--json]` (issue 36): runs the retention policy of
/// the rules the database was last mounted with now, as the daemon's pass does (through
/// the mount while mounted: root or the user who mounted only, `EPERM`); with
/// `--dry-run`, lists what it would forget, one line each (path, version, size, time,
/// the limit and the rule), and changes nothing: a read of the history, allowed to
/// whoever may read the database.
pub fn policy(db: &Path, dry_run: bool, json: bool) -> Result<(), Failure> {
    use crate::fs::policy::Chosen;
    use crate::views::quote_stored;
    super::check_db(db)?;
    let history = super::open_history(db)?;
    let Some(rules) = stored_limits(&*history, db)? else {
        let text = "gc --policy: the rules set no limit (no `keep` with versions, days or bytes): nothing is forgotten by policy";
        if json {
            println!(
                "{}",
                serde_json::json!({ "versions": 0, "refusals": 0, "bytes": 0, "dry_run": dry_run, "limits": false })
            );
        } else {
            println!("{text}");
        }
        return Ok(());
    };
    if dry_run {
        let (mut versions, mut refusals, mut bytes) = (0u64, 0u64, 0u64);
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let now = crate::store::sql::now_ns();
        crate::fs::policy::preview(&*history, &rules, now, &mut |c| {
            use std::io::Write;
            let line = match &c {
                Chosen::Version {
                    rule,
                    path,
                    row,
                    limit,
                    ..
                } => {
                    versions += 1;
                    bytes += row.size;
                    let label = crate::fs::policy::label(*rule, &rules.rules.paths[*rule]);
                    if json {
                        let mut o = serde_json::json!({
                            "path": path, "version": row.version, "size": row.size,
                            "time": super::time::utc(row.time_ns), "limit": limit, "rule": label,
                        });
                        super::json_paths(&mut o, &["path"]);
                        o.to_string()
                    } else {
                        format!(
                            "{}@{}  {} B  {}  {}  {label}",
                            quote_stored(path),
                            row.version,
                            row.size,
                            super::time::utc(row.time_ns),
                            serde_json::to_value(limit)
                                .ok()
                                .and_then(|v| v.as_str().map(String::from))
                                .unwrap_or_default()
                        )
                    }
                }
                Chosen::Refusal {
                    rule,
                    event,
                    path,
                    size,
                    time_ns,
                } => {
                    refusals += 1;
                    let label = crate::fs::policy::label(*rule, &rules.rules.paths[*rule]);
                    if json {
                        let mut o = serde_json::json!({
                            "refusal": event, "path": path, "size": size,
                            "time": super::time::utc(*time_ns), "limit": "days", "rule": label,
                        });
                        super::json_paths(&mut o, &["path"]);
                        o.to_string()
                    } else {
                        format!(
                            "refused content of {} (event {event})  {size} B  {}  days  {label}",
                            quote_stored(path),
                            super::time::utc(*time_ns),
                        )
                    }
                }
            };
            writeln!(out, "{line}").map_err(|e| crate::error::Error::new(libc::EIO, e.to_string()))
        })
        .map_err(|e| e.reason)?;
        drop(out);
        if json {
            println!(
                "{}",
                serde_json::json!({ "versions": versions, "refusals": refusals, "bytes": bytes, "dry_run": true })
            );
        } else {
            println!(
                "gc --policy: would forget {versions} version{} ({bytes} bytes as files; the \
                 content freed can be less, versions share bytes){} (dry run: nothing changed)",
                if versions == 1 { "" } else { "s" },
                if refusals > 0 {
                    format!(" and the content of {refusals} refusals")
                } else {
                    String::new()
                }
            );
        }
        return Ok(());
    }
    drop(history);
    let report: crate::fs::policy::PassReport = match crate::mount::lock_database_now(db) {
        Ok(_lock) => {
            let fs = super::offline_fs(db)?.with_admins(&[db_owner(db)?]);
            let ctx = crate::fs::Ctx {
                pid: std::process::id(),
                uid: unsafe { libc::getuid() },
                gid: unsafe { libc::getgid() },
            };
            fs.policy_pass_for(ctx).map_err(|e| e.reason)?
        }
        Err(_) => {
            let mnt = super::live_mountpoint(db)?
                .ok_or("gc: the database is in use, but not mounted where it says")?;
            let req = GcRequest {
                policy: true,
                ..Default::default()
            };
            let value = serde_json::to_vec(&req).map_err(|e| e.to_string())?;
            super::set_xattr(Path::new(&mnt), crate::fs::serve::GC_XATTR, &value).map_err(|e| {
                match e.raw_os_error() {
                    Some(libc::EPERM) => format!(
                        "gc --policy: {e} (erasing history is for root or the user who mounted)"
                    ),
                    _ => format!("gc --policy: {e}"),
                }
            })?;
            let text = super::meta(db, crate::fs::policy::LAST_POLICY)?
                .ok_or("gc --policy: the daemon left no report")?;
            serde_json::from_str(&text).map_err(|e| e.to_string())?
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        println!("gc --policy: {}", report.summary());
        for (label, v, r, b, event) in &report.rules {
            println!(
                "  {label}: {v} versions, {r} refusals, {b} bytes{}",
                event.map(|e| format!(" (event {e})")).unwrap_or_default()
            );
        }
    }
    Ok(())
}
