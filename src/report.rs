//! What the command line's `--json` outputs and the review page's JSON endpoints
//! (`scratchfs web`, issue 35, docs/web.md) both are: the store's answers as JSON, paths
//! lossless, and the lookups of a file's versions both make. Below `cli/` and `web/`,
//! above the store.

use crate::store::paths;
use crate::store::{ContentRef, History, VersionRow};
use crate::views::quote_stored;

/// An error of these lookups: the message a command prints (exit 1) and the page shows.
pub type Failure = String;

/// The lineage now at `path` (stored form), or else the one most recently at `path`
/// (deleted) ([`crate::store::History::lineage_at`]).
pub fn file_id(store: &dyn History, path: &str) -> Result<i64, Failure> {
    let path = path.trim_start_matches('/');
    store
        .lineage_at(path)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{}: no such file in the store", quote_stored(path)))
}

/// Sets `o[key]` to a name given as raw bytes, losslessly: the name as a JSON string when
/// it is UTF-8; otherwise the name with each byte that is not UTF-8 as U+FFFD, and beside
/// it `o[key + "_hex"]`, the exact bytes in lowercase hex (`"k\xff"` →
/// `"key": "k\u{fffd}", "key_hex": "6bff"`). `o` must be an object.
pub fn json_name(o: &mut serde_json::Value, key: &str, raw: &[u8]) {
    match std::str::from_utf8(raw) {
        Ok(text) => o[key] = text.into(),
        Err(_) => {
            o[key] = String::from_utf8_lossy(raw).into_owned().into();
            let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
            o[format!("{key}_hex")] = hex.into();
        }
    }
}

/// [`json_name`] for each of `keys` of `o` that holds a stored path (a string; `null`
/// stays `null`).
pub fn json_paths(o: &mut serde_json::Value, keys: &[&str]) {
    for key in keys {
        if let Some(stored) = o.get(*key).and_then(|v| v.as_str()).map(str::to_string) {
            json_name(o, key, &paths::decode(&stored));
        }
    }
}

/// `v` as one JSON object, its path lossless ([`json_paths`]), with its `inputs`.
pub fn version_json(store: &dyn History, v: &VersionRow) -> Result<serde_json::Value, Failure> {
    let mut o = serde_json::to_value(v).map_err(|e| e.to_string())?;
    json_paths(&mut o, &["path"]);
    o["inputs"] = inputs_json(store, v.id);
    Ok(o)
}

/// The inputs of version `id` as JSON ([`crate::lineage::inputs_json`]); none in a
/// database no scratchfs since issue 13 has mounted.
pub fn inputs_json(store: &dyn History, id: i64) -> serde_json::Value {
    crate::lineage::inputs_json(&store.inputs(id).unwrap_or_default())
}

/// Every version of a lineage, oldest first.
pub fn versions(store: &dyn History, file_id: i64) -> Result<Vec<VersionRow>, Failure> {
    store.version_rows(file_id).map_err(|e| e.to_string())
}

/// Version `n` (`None`: the current one) of the file at `path`, as resolved from `spec`
/// (named in the error when there is no such version).
pub fn version_in(
    store: &dyn History,
    path: &str,
    n: Option<i64>,
    spec: &str,
) -> Result<VersionRow, Failure> {
    store
        .version_row(file_id(store, path)?, n)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{}: no such version", quote_stored(spec)))
}

/// Calls `f` with the bytes of `content` in order, in pieces of at most
/// [`crate::store::READ_CHUNK`] bytes (1 MiB: the most of it ever held); returns the
/// byte count. A store failure is its reason; `f`'s failure is returned as it is.
pub fn each_chunk(
    store: &dyn History,
    content: ContentRef,
    mut f: impl FnMut(&[u8]) -> Result<(), Failure>,
) -> Result<u64, Failure> {
    let mut buf = vec![0u8; crate::store::READ_CHUNK.min(content.len as usize)];
    let mut at = 0u64;
    loop {
        let n = store
            .read(content, at, &mut buf)
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(at);
        }
        at += n as u64;
        f(&buf[..n])?;
    }
}

/// Largest version `diff` compares, in bytes (8 MiB): both sides are held in memory.
pub const DIFF_MAX: u64 = 8 << 20;

/// Most lines a version `diff` compares may have (100,000).
pub const DIFF_MAX_LINES: usize = 100_000;

/// The content of `v` (at most [`DIFF_MAX`] bytes) as text, or the failure saying it is
/// not text or has more than [`DIFF_MAX_LINES`] lines (`label` names it, `hint` says what
/// to do instead).
pub fn version_text(
    store: &dyn History,
    v: &VersionRow,
    label: &str,
    hint: &str,
) -> Result<String, Failure> {
    content_text(store, v.content(), label, hint)
}

/// [`version_text`] of any content (a refusal's: [`History::refused_content`]), `label`
/// naming it in a failure; content over [`DIFF_MAX`] bytes is refused unread.
pub fn content_text(
    store: &dyn History,
    content: ContentRef,
    label: &str,
    hint: &str,
) -> Result<String, Failure> {
    if content.len > DIFF_MAX {
        return Err(format!(
            "{} is {} bytes: too large to show here (limit {} MiB); {hint}",
            quote_stored(label),
            content.len,
            DIFF_MAX >> 20
        ));
    }
    let mut bytes = Vec::with_capacity(content.len as usize);
    each_chunk(store, content, |chunk| {
        bytes.extend_from_slice(chunk);
        Ok(())
    })?;
    let text = match String::from_utf8(bytes) {
        Ok(t) if !t.contains('\0') => t,
        _ => {
            return Err(format!(
                "diff: {} is not text (not UTF-8, or it holds a NUL byte); {hint}",
                quote_stored(label)
            ));
        }
    };
    let lines = text.lines().count();
    if lines > DIFF_MAX_LINES {
        return Err(format!(
            "diff: {} has {lines} lines: too many to diff in memory (limit {DIFF_MAX_LINES} \
             lines); {hint}",
            quote_stored(label)
        ));
    }
    Ok(text)
}

/// A line of `scratchfs log --json` (and an entry of the review page's timeline): `e` with
/// its paths lossless ([`json_paths`]), its reason's paths shown as the paths are (bytes
/// that are not UTF-8 as U+FFFD), and a version's `inputs`.
pub fn log_entry_json(store: &dyn History, mut e: crate::store::LogEntry) -> serde_json::Value {
    if let Some(id) = e.id {
        e.inputs = Some(inputs_json(store, id));
    }
    let mut o = serde_json::to_value(&e).unwrap_or_default();
    json_paths(&mut o, &["path", "new_path"]);
    if let Some(r) = o.get("reason").and_then(|r| r.as_str()) {
        o["reason"] = String::from_utf8_lossy(&paths::decode(r))
            .into_owned()
            .into();
    }
    o
}

/// `scratchfs diff --json` of versions `a` and `b` of a file, whole:
/// `{"a": "PATH@A", "b": "PATH@B", "diff": UNIFIED}` (3 lines of context), labels lossless
/// ([`json_paths`]); the failure of [`version_text`] for a side that is not text or too
/// large, unless both have the same blake3 (an empty diff).
pub fn diff_json(
    store: &dyn History,
    a: &VersionRow,
    b: &VersionRow,
) -> Result<serde_json::Value, Failure> {
    let (ha, hb) = (
        format!("{}@{}", a.path, a.version),
        format!("{}@{}", b.path, b.version),
    );
    let (ta, tb) = if a.blake3 == b.blake3 && a.size == b.size {
        (String::new(), String::new())
    } else {
        for (v, h) in [(a, &ha), (b, &hb)] {
            if v.size > DIFF_MAX {
                return Err(format!(
                    "diff: {} is {} bytes: too large to diff in memory (limit {} MiB)",
                    quote_stored(h),
                    v.size,
                    DIFF_MAX >> 20
                ));
            }
        }
        let hint = "see scratchfs show";
        (
            version_text(store, a, &ha, hint)?,
            version_text(store, b, &hb, hint)?,
        )
    };
    let text = |h: &str| String::from_utf8_lossy(&paths::decode(h)).into_owned();
    let d = similar::TextDiff::from_lines(&ta, &tb);
    let unified = d
        .unified_diff()
        .context_radius(3)
        .header(&text(&ha), &text(&hb))
        .to_string();
    let mut o = serde_json::json!({ "a": ha, "b": hb });
    json_paths(&mut o, &["a", "b"]);
    o["diff"] = unified.into();
    Ok(o)
}

/// What changed between two points of history (checkpoints, or a checkpoint and now):
/// `{"added": [{"path", "version"}], "removed": [{"path", "version"}], "changed":
/// [{"path", "from", "to", "same_lineage"}]}`, files only, by path, paths lossless
/// ([`json_paths`]); `from`/`to` are version numbers (`null`: empty, no version), and
/// `same_lineage` says whether `diff` of the two numbers on that path compares them.
pub fn compare(
    store: &dyn History,
    a: crate::checkpoint::Point,
    b: crate::checkpoint::Point,
) -> Result<serde_json::Value, Failure> {
    use std::collections::BTreeMap;
    type Files = BTreeMap<String, (Option<i64>, Option<i64>, String)>;
    let files = |p: crate::checkpoint::Point| -> Result<Files, Failure> {
        let snap = store.snapshot(p).map_err(|e| e.to_string())?;
        Ok(snap
            .walk()
            .into_iter()
            .filter(|(_, n)| n.kind == crate::store::Kind::File)
            .map(|(path, n)| {
                let number = n.version.as_ref().map(|v| v.number);
                (path, (n.file_id, number, n.blake3()))
            })
            .collect())
    };
    let (fa, fb) = (files(a)?, files(b)?);
    let entry = |path: &str, o: serde_json::Value| {
        let mut o = o;
        o["path"] = path.into();
        json_paths(&mut o, &["path"]);
        o
    };
    let mut added = Vec::new();
    let mut removed = Vec::new();
    let mut changed = Vec::new();
    for (path, (lineage, number, hash)) in &fb {
        match fa.get(path) {
            None => added.push(entry(path, serde_json::json!({ "version": number }))),
            Some((la, na, ha)) if ha != hash => changed.push(entry(
                path,
                serde_json::json!({ "from": na, "to": number, "same_lineage": la == lineage }),
            )),
            Some(_) => {}
        }
    }
    for (path, (_, number, _)) in &fa {
        if !fb.contains_key(path) {
            removed.push(entry(path, serde_json::json!({ "version": number })));
        }
    }
    Ok(serde_json::json!({ "added": added, "removed": removed, "changed": changed }))
}

/// Widths a span of [`activity`] may have, ns: the smallest that makes at most the spans
/// asked for (a round number, so that "versions per minute" reads plainly).
const SPAN_WIDTHS_NS: &[i64] = &[
    1_000_000,
    10_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
    15_000_000_000,
    30_000_000_000,
    60_000_000_000,
    120_000_000_000,
    300_000_000_000,
    600_000_000_000,
    900_000_000_000,
    1_800_000_000_000,
    3_600_000_000_000,
    7_200_000_000_000,
    21_600_000_000_000,
    43_200_000_000_000,
    86_400_000_000_000,
    604_800_000_000_000,
];

/// Most spans [`activity`] makes (500).
pub const SPANS_MAX: usize = 500;

/// How many of the busiest files [`activity`] gives a row of versions per span (20).
pub const BUSIEST_FILES: usize = 20;

/// How many of the busiest writers [`activity`] gives a row of versions per span (7); the
/// rest share one (`other_writers`), so that neither its memory nor its answer grows with
/// the number of writers (an agent may name a writer per commit: attack round, session
/// 28: 100,000 writers cost 54 s and 622 MB before).
pub const BUSIEST_WRITERS: usize = 7;

/// The run over time, replayed from the store ([`History::each_change`]), for the review
/// page's plots and `scratchfs log --activity --json`:
///
/// ```text
/// {"from_ns": NS, "span_ns": NS, "spans": N,            (at most `spans`, <= SPANS_MAX)
///  "writers": [{"writer": W, "versions": TOTAL, "per_span": [COUNT; N]}],  most first,
///      at most BUSIEST_WRITERS
///  "other_writers": {"writers": K, "versions": TOTAL, "per_span": [COUNT; N]} or null,
///  "bytes": {"live": [B; N], "history": [B; N], "archive": [B; N]},   at each span's end
///  "files": [{"path": P, "versions": TOTAL, "per_span": [COUNT; N]}]}  BUSIEST_FILES
/// ```
///
/// Bytes are content lengths as files have them (before chunks are shared): `live` the
/// current versions of live files, `archive` the last versions of unlinked files (what
/// `.archive/` shows), `history` every other version kept. Spans are equal, of a round
/// width ([`SPAN_WIDTHS_NS`]), from the first change's span. Memory: one entry per
/// lineage (its size now), whatever the number of versions.
pub fn activity(store: &dyn History, spans: usize) -> Result<serde_json::Value, Failure> {
    let spans = spans.clamp(1, SPANS_MAX);
    let e = |e: crate::store::StoreError| e.to_string();
    let Some((first, last)) = store.time_span().map_err(e)? else {
        return Ok(serde_json::json!({
            "from_ns": null, "span_ns": null, "spans": 0, "writers": [], "other_writers": null,
            "bytes": {"live": [], "history": [], "archive": []}, "files": [],
        }));
    };
    let range = last - first + 1;
    let width = SPAN_WIDTHS_NS
        .iter()
        .copied()
        .find(|w| (range + w - 1) / w <= spans as i64)
        .unwrap_or_else(|| (range + spans as i64 - 1) / spans as i64);
    let from = first - first.rem_euclid(width);
    let n = ((last - from) / width + 1) as usize;
    let span_of = |t: i64| (((t - from) / width).clamp(0, n as i64 - 1)) as usize;
    let busiest = store.busiest_files(BUSIEST_FILES).map_err(e)?;
    let mut file_rows: std::collections::HashMap<i64, Vec<u64>> =
        busiest.iter().map(|(id, _, _)| (*id, vec![0; n])).collect();
    let (top, all_writers) = store.busiest_writers(BUSIEST_WRITERS).map_err(e)?;
    let mut writers: Vec<(String, u64, Vec<u64>)> =
        top.into_iter().map(|(w, _)| (w, 0, vec![0; n])).collect();
    let mut others: (u64, Vec<u64>) = (0, vec![0; n]);
    // Per lineage: (size of its newest version, whether it is live).
    let mut state: std::collections::HashMap<i64, (i64, bool)> = Default::default();
    let (mut live, mut archive, mut total) = (0i64, 0i64, 0i64);
    let mut bytes = [vec![0i64; n], vec![0i64; n], vec![0i64; n]];
    let mut at = 0usize;
    let mut close = |upto: usize, live: i64, archive: i64, total: i64, at: &mut usize| {
        while *at < upto {
            bytes[0][*at] = live;
            bytes[1][*at] = total - live - archive;
            bytes[2][*at] = archive;
            *at += 1;
        }
    };
    store
        .each_change(&mut |c| {
            use crate::store::Change;
            let t = match c {
                Change::Version { time_ns, .. }
                | Change::Unlink { time_ns, .. }
                | Change::Merged { time_ns, .. } => time_ns,
            };
            close(span_of(t), live, archive, total, &mut at);
            match c {
                Change::Version {
                    file,
                    size,
                    writer,
                    time_ns,
                } => {
                    total += size;
                    match state.insert(file, (size, true)) {
                        Some((old, true)) => live += size - old,
                        Some((old, false)) => {
                            archive -= old;
                            live += size;
                        }
                        None => live += size,
                    }
                    let s = span_of(time_ns);
                    if let Some(row) = file_rows.get_mut(&file) {
                        row[s] += 1;
                    }
                    let (count, per) = match writers.iter_mut().find(|w| w.0 == writer) {
                        Some(w) => (&mut w.1, &mut w.2),
                        None => (&mut others.0, &mut others.1),
                    };
                    *count += 1;
                    per[s] += 1;
                }
                Change::Unlink { file, .. } => {
                    if let Some((size, alive @ true)) = state.get_mut(&file) {
                        *alive = false;
                        live -= *size;
                        archive += *size;
                    }
                }
                Change::Merged { file, .. } => {
                    // Its content lives on as the other lineage's version: neither live
                    // nor archived under this lineage.
                    if let Some((size, alive)) = state.remove(&file) {
                        if alive {
                            live -= size;
                        } else {
                            archive -= size;
                        }
                    }
                }
            }
            Ok(())
        })
        .map_err(e)?;
    close(n, live, archive, total, &mut at);
    writers.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let files: Vec<serde_json::Value> = busiest
        .iter()
        .map(|(id, path, count)| {
            let mut o = serde_json::json!({
                "path": path, "versions": count, "per_span": file_rows.get(id),
            });
            json_paths(&mut o, &["path"]);
            o
        })
        .collect();
    let [live, history, archive] = bytes;
    Ok(serde_json::json!({
        "from_ns": from,
        "span_ns": width,
        "spans": n,
        "writers": writers.iter().map(|(w, total, per)| serde_json::json!({
            "writer": w, "versions": total, "per_span": per,
        })).collect::<Vec<_>>(),
        "other_writers": (others.0 > 0).then(|| serde_json::json!({
            "writers": all_writers - writers.len() as i64,
            "versions": others.0,
            "per_span": others.1,
        })),
        "bytes": {"live": live, "history": history, "archive": archive},
        "files": files,
    }))
}

/// The content a refusal kept (`scratchfs show --refused EVENT --json`, the review page's
/// refusals): `{"event": ID, "size": BYTES, "blake3": HEX, "text": TEXT}`, or `"not_text"`
/// with why in place of `text` (not UTF-8, over [`DIFF_MAX`]); the failure "no content
/// kept" when event `event` is not a refusal that kept content.
pub fn refused_json(store: &dyn History, event: i64) -> Result<serde_json::Value, Failure> {
    let (content, blake3) = store
        .refused_content(event)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("event {event}: not a refusal that kept content"))?;
    let label = format!("refusal {event}");
    let mut o = serde_json::json!({ "event": event, "size": content.len, "blake3": blake3 });
    match content_text(store, content, &label, "see scratchfs show --refused") {
        Ok(t) => o["text"] = t.into(),
        Err(e) => o["not_text"] = e.into(),
    }
    Ok(o)
}

/// How many scratchpads [`follow_origins`] goes through (an adoption of an adoption...).
pub const ORIGIN_HOPS: usize = 4;

/// Whether the SQLite file at `path` (absolute) may be trusted to say who wrote what,
/// read by this process: no symbolic link on the way (the path is its own canonical
/// form); every directory on the way owned by root or by this process's user and
/// writable by no one else, or, above the file's own directory, sticky (`/tmp`: others
/// may not rename or remove what is not theirs there); the file, and its `-wal` and `-shm` beside it when they exist (SQLite
/// reads them too: a journal planted there would rewrite what the file says), regular
/// files owned by root or by this user and writable by no one else. So nobody else can
/// have put, swapped or amended what is read (attack round, session 28: a planted
/// `-wal`, a symbolic link to a device, a swap between the check and the open).
fn trusted_file(path: &str) -> Result<(), Failure> {
    use std::os::unix::fs::MetadataExt;
    let me = unsafe { libc::geteuid() };
    let ours = |uid: u32| uid == 0 || uid == me;
    let who = if me == 0 {
        "root's".to_string()
    } else {
        format!("root's or uid {me}'s")
    };
    let real = std::fs::canonicalize(path).map_err(|e| format!("{path}: {e}"))?;
    if real.as_os_str() != std::ffi::OsStr::new(path) {
        return Err(format!(
            "{path}: reached through a symbolic link (to {}): not trusted",
            real.display()
        ));
    }
    // `sticky_ok`: a sticky directory others may write is trusted above the file's own
    // (no one may rename what is not theirs there), never as the file's own (anyone may
    // create a missing `-wal` in it).
    let check = |p: &std::path::Path, file: bool, sticky_ok: bool| -> Result<(), Failure> {
        let m = std::fs::symlink_metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let kind_ok = if file {
            m.file_type().is_file()
        } else {
            m.file_type().is_dir()
        };
        let sticky = sticky_ok && m.mode() & 0o1000 != 0;
        if !kind_ok || !ours(m.uid()) || (m.mode() & 0o022 != 0 && !sticky) {
            return Err(format!(
                "{}: owned by uid {} with mode {:o}: not trusted (the file, its -wal and \
                 -shm and the directories above must be {who}, writable by their owner only)",
                p.display(),
                m.uid(),
                m.mode() & 0o7777
            ));
        }
        Ok(())
    };
    check(&real, true, false)?;
    for side in ["-wal", "-shm"] {
        let mut p = real.clone().into_os_string();
        p.push(side);
        let p = std::path::PathBuf::from(p);
        if std::fs::symlink_metadata(&p).is_ok() {
            check(&p, true, false)?;
        }
    }
    let mut dir = real.parent();
    let mut own = true;
    while let Some(d) = dir {
        check(d, false, !own)?;
        own = false;
        dir = d.parent();
    }
    Ok(())
}

/// Opens the scratchpad `o` came from, if it may be trusted to say who wrote what: an
/// SQLite file no one but root or this process's user could have put or amended
/// ([`trusted_file`]), or a PostgreSQL URL (connected with this process's own
/// credentials: the environment, `~/.pgpass`); whose `scratchpad_id` is the one
/// recorded, and whose version `o.source_version_id` holds the bytes `blake3` (what was
/// adopted). The error says which of these failed.
pub fn open_origin(o: &crate::store::Origin, blake3: &str) -> Result<Box<dyn History>, Failure> {
    if !crate::store::postgres::is_url(&o.source) {
        trusted_file(&o.source)?;
    }
    let store = crate::store::open_frozen(&o.source).map_err(|e| e.reason)?;
    if let Some(id) = &o.source_id {
        let there = store.meta("scratchpad_id").map_err(|e| e.reason)?;
        if there.as_deref() != Some(id.as_str()) {
            return Err(format!("{}: another scratchpad now", o.source));
        }
    }
    let v = store
        .why_at(o.source_version_id, None, 0)
        .map_err(|e| format!("{}: {}", o.source, e.reason))?;
    if v.lineage.version.blake3 != blake3 {
        return Err(format!(
            "{}: its {}@{} holds other bytes than were adopted",
            o.source, o.path, o.version
        ));
    }
    Ok(store)
}

/// Follows the answer of `why` (`w`, asked `depth` deep) to the scratchpad its version
/// came from, when it was adopted ([`crate::lineage::why::VersionFacts::origin`]): asks
/// there the same question of the version it came from, and puts the answer in
/// `w.lineage.adopted` (or why not in `adopted_not_followed`); again from there, at most
/// [`ORIGIN_HOPS`] scratchpads.
pub fn follow_origins(w: &mut crate::lineage::why::Why, depth: usize) {
    follow_origins_hops(w, depth, ORIGIN_HOPS);
}

fn follow_origins_hops(w: &mut crate::lineage::why::Why, depth: usize, hops: usize) {
    let Some(o) = w.lineage.version.origin.clone() else {
        return;
    };
    if hops == 0 {
        w.lineage.adopted_not_followed = Some(format!("{}: too many hops", o.source));
        return;
    }
    let there = open_origin(&o, &w.lineage.version.blake3).and_then(|store| {
        store
            .why_at(o.source_version_id, w.key.as_deref(), depth)
            .map_err(|e| format!("{}: {}", o.source, e.reason))
    });
    match there {
        Ok(mut b) => {
            follow_origins_hops(&mut b, depth, hops - 1);
            w.lineage.adopted = Some(Box::new(b));
        }
        Err(e) => w.lineage.adopted_not_followed = Some(e),
    }
}

/// Who set `key` (top-level) in the version `o` names, in the scratchpad it came from,
/// and on through that version's own origin (an adoption of an adoption), at most `hops`
/// scratchpads: (writer, step), or why it could not be followed.
fn setter_across(
    o: &crate::store::Origin,
    blake3: &str,
    key: &str,
    hops: usize,
) -> Result<(String, Option<i64>), Failure> {
    let store = open_origin(o, blake3)?;
    let w = store
        .why_at(o.source_version_id, Some(key), 0)
        .map_err(|e| format!("{}: {}", o.source, e.reason))?;
    let v = &w.lineage.version;
    match &v.origin {
        // An adopt whose origin is not recorded there (a fork does not carry `origins`):
        // the adopter is no tool vouching for the value.
        None if v.op == "adopt" => Err(format!(
            "{}: {}@{} was adopted from elsewhere, not recorded there",
            o.source, v.path, v.version
        )),
        None => Ok((v.writer.clone(), v.step)),
        Some(_) if hops == 0 => Err(format!("{}: too many hops", o.source)),
        Some(next) => setter_across(next, &v.blake3, key, hops - 1),
    }
}

/// For each source of `found` whose value came from another scratchpad
/// ([`crate::lineage::ground::Source::origin`]): the version that set it there, and on
/// through adoptions of adoptions ([`ORIGIN_HOPS`]): its writer and step, and whether the
/// rules mark that writer a model. When that cannot be followed ([`open_origin`]), no
/// tool vouches for the value: it counts as asserted (`model`), under the writer
/// recorded there (`origins.writer`), and `adopted_from` says why it was not followed
/// (crediting the adopter, root or the user who mounted, would make every adopted number
/// read as sourced; so would the recorded writer when it is itself an adopter). Each
/// database is opened once per key.
pub fn follow_ground_origins(found: &mut crate::lineage::sources::Sources) {
    use std::collections::HashMap;
    // (database, version there, key) to (writer, step) or why not.
    type Setters = HashMap<(String, i64, String), Result<(String, Option<i64>), Failure>>;
    let mut setters: Setters = HashMap::new();
    for s in found.sources.iter_mut() {
        let Some(a) = s.origin.clone() else {
            continue;
        };
        let o = &a.origin;
        let setter = setters
            .entry((o.source.clone(), o.source_version_id, a.key.clone()))
            .or_insert_with(|| setter_across(o, &a.blake3, &a.key, ORIGIN_HOPS));
        match setter {
            Ok((writer, step)) => {
                s.writer = writer.clone();
                s.step = *step;
                s.model = found.model.contains(writer);
            }
            Err(e) => {
                s.writer = o.writer.clone();
                s.step = None;
                s.model = true;
                if let Some(text) = &mut s.adopted_from {
                    text.push_str(&format!(" (not followed: {e}; counted as asserted)"));
                }
            }
        }
    }
}

/// Who `why` credits a key with when that is not the version that last changed it in
/// this file (a rollback or restore brought the value back, or it was adopted from a
/// fork that could be followed): `{"version", "writer", "step", "path", "source", "via"}`
/// (`source`: the other database, for an adopted value; `via`: `"brought back by rollback
/// v4"`, `"adopted from /w/fork.db state.json@4"`); `None` when `w`'s setter is that
/// version itself. The review page shows it beside the key's last change.
pub fn credited_json(w: &crate::lineage::why::Why) -> Option<serde_json::Value> {
    let mut at = w;
    let mut source: Option<String> = None;
    let mut via = Vec::new();
    if let Some(b) = w.brought_back_by.first() {
        via.push(format!("brought back by {} v{}", b.op, b.version));
    }
    while let Some(there) = &at.lineage.adopted {
        let o = at.lineage.version.origin.as_ref()?;
        via.push(format!(
            "adopted from {} {}@{}",
            o.source, o.path, o.version
        ));
        source = Some(o.source.clone());
        at = there;
        if let Some(b) = at.brought_back_by.first() {
            via.push(format!("brought back by {} v{} there", b.op, b.version));
        }
    }
    if via.is_empty() {
        return None;
    }
    let v = &at.lineage.version;
    let mut o = serde_json::json!({
        "version": v.version, "writer": v.writer, "step": v.step, "path": v.path,
        "source": source, "via": via.join(", "),
    });
    json_paths(&mut o, &["path"]);
    Some(o)
}
