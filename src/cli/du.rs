//! `scratchfs du [PATH] [--json]` (issue 36): what each file under PATH holds (live,
//! history, archive: version sizes added up, as `ls` would show each version), by
//! writer, the pad's usage against its quota (each stored byte counted once), and what
//! the rules' retention policy would forget next ([`crate::fs::policy::preview`]). A read
//! of the history: allowed to whoever may read the database.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;

use super::{Failure, arg};
use crate::views::manifest::human_bytes;
use crate::views::quote_stored;

/// Prints `du` for PATH (`None`: the whole pad).
pub fn du(db: &Path, path: Option<&OsStr>, json: bool) -> Result<(), Failure> {
    super::check_db(db)?;
    let history = super::open_history(db)?;
    let prefix = path
        .map(|p| arg(p).trim_matches('/').to_string())
        .unwrap_or_default();
    let rows = history.du_rows(&prefix).map_err(|e| e.reason)?;
    if rows.is_empty() && !prefix.is_empty() {
        return Err(format!(
            "du: {}: no file there, now or before",
            quote_stored(&prefix)
        ));
    }
    let writers = history.du_writers(&prefix).map_err(|e| e.reason)?;
    let usage = history.usage().map_err(|e| e.reason)?;
    let rules = super::gc::stored_limits(&*history, db)?;
    let quota = history
        .rules_text()
        .ok()
        .flatten()
        .and_then(|t| crate::rules::Rules::parse(&t).ok())
        .and_then(|r| r.quota);
    // What the policy would forget next, by lineage: (versions, bytes as files).
    let mut next: HashMap<i64, (u64, u64)> = HashMap::new();
    let mut next_refusals = 0u64;
    if let Some(rules) = &rules {
        let ids: std::collections::HashSet<i64> = rows.iter().map(|r| r.file_id).collect();
        crate::fs::policy::preview(&*history, rules, crate::store::sql::now_ns(), &mut |c| {
            match c {
                crate::fs::policy::Chosen::Version { row, .. } if ids.contains(&row.file_id) => {
                    let e = next.entry(row.file_id).or_default();
                    e.0 += 1;
                    e.1 += row.size;
                }
                crate::fs::policy::Chosen::Refusal { .. } => next_refusals += 1,
                _ => {}
            }
            Ok(())
        })
        .map_err(|e| e.reason)?;
    }
    let split = |r: &crate::store::DuRow| {
        let (live, archive) = if r.live { (r.newest, 0) } else { (0, r.newest) };
        (live, r.total - r.newest, archive)
    };
    if json {
        let files: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                let (live, history, archive) = split(r);
                let (fv, fb) = next.get(&r.file_id).copied().unwrap_or_default();
                let mut o = serde_json::json!({
                    "path": r.path, "live": r.live, "versions": r.versions,
                    "live_bytes": live, "history_bytes": history, "archive_bytes": archive,
                    "policy_next": { "versions": fv, "bytes": fb },
                });
                super::json_paths(&mut o, &["path"]);
                o
            })
            .collect();
        let by_writer: Vec<serde_json::Value> = writers
            .iter()
            .map(|(w, n, b)| serde_json::json!({ "writer": w, "versions": n, "bytes": b }))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "path": prefix,
                "files": files,
                "writers": by_writer,
                "pad": {
                    "bytes": usage.bytes, "quota_bytes": quota.as_ref().and_then(|q| q.bytes),
                    "versions": usage.versions, "forgotten_by_policy": usage.forgotten,
                    "files": usage.files, "quota_files": quota.as_ref().and_then(|q| q.files),
                },
                "policy": rules.is_some().then(|| serde_json::json!({
                    "versions": next.values().map(|v| v.0).sum::<u64>(),
                    "bytes": next.values().map(|v| v.1).sum::<u64>(),
                    "refusals": next_refusals,
                })),
            })
        );
        return Ok(());
    }
    let width = rows
        .iter()
        .map(|r| quote_stored(&r.path).chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 60);
    println!(
        "{:<width$}  {:>9}  {:>9}  {:>9}  {:>8}  policy would forget",
        "path", "live", "history", "archive", "versions"
    );
    let (mut tl, mut th, mut ta, mut tv) = (0, 0, 0, 0);
    for r in &rows {
        let (live, history, archive) = split(r);
        let show = |n: u64| {
            if n == 0 {
                "-".to_string()
            } else {
                human_bytes(n)
            }
        };
        let forget = match (rules.is_some(), next.get(&r.file_id)) {
            (false, _) => "-".to_string(),
            (true, None) => "nothing".to_string(),
            (true, Some((n, b))) => format!(
                "{n} version{} ({})",
                if *n == 1 { "" } else { "s" },
                human_bytes(*b)
            ),
        };
        println!(
            "{:<width$}  {:>9}  {:>9}  {:>9}  {:>8}  {forget}",
            quote_stored(&r.path),
            show(live),
            show(history),
            show(archive),
            r.versions
        );
        (tl, th, ta, tv) = (tl + live, th + history, ta + archive, tv + r.versions);
    }
    println!(
        "{:<width$}  {:>9}  {:>9}  {:>9}  {:>8}",
        "total",
        human_bytes(tl),
        human_bytes(th),
        human_bytes(ta),
        tv
    );
    println!("(bytes as files: each version's size; versions share what they have in common)");
    println!("by writer:");
    for (w, n, b) in &writers {
        println!(
            "  {}  {n} version{}, {}",
            crate::views::quote_path(w),
            if *n == 1 { "" } else { "s" },
            human_bytes(*b)
        );
    }
    let pad = crate::views::manifest::Pad {
        bytes: usage.bytes,
        quota_bytes: quota.as_ref().and_then(|q| q.bytes),
        versions: usage.versions,
        forgotten: usage.forgotten,
        files: usage.files,
        quota_files: quota.as_ref().and_then(|q| q.files),
    };
    println!("{pad} (stored: each byte once)");
    match &rules {
        None => println!("policy: the rules set no limit (keep): nothing is forgotten by policy"),
        Some(_) => println!(
            "policy would forget next: {} versions ({} as files){}; the list: scratchfs gc --policy --dry-run",
            next.values().map(|v| v.0).sum::<u64>(),
            human_bytes(next.values().map(|v| v.1).sum::<u64>()),
            if next_refusals > 0 {
                format!(" and the content of {next_refusals} refusals")
            } else {
                String::new()
            }
        ),
    }
    Ok(())
}
