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
    let file = file_id(store, path)?;
    if let Some(row) = store.version_row(file, n).map_err(|e| e.to_string())? {
        return Ok(row);
    }
    // A version a gc or the policy forgot says so, by which run and when.
    if let Some(n) = n
        && let Some((event, at, by)) = store
            .forgotten_version(file, n)
            .map_err(|e| e.to_string())?
    {
        return Err(format!(
            "{}: forgotten by {} at {}{}",
            quote_stored(spec),
            crate::views::one_line_stored(&by),
            crate::views::utc(at),
            event.map(|e| format!(" (event {e})")).unwrap_or_default()
        ));
    }
    Err(format!("{}: no such version", quote_stored(spec)))
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

/// The content of `v` as text: [`content_text`].
pub fn version_text(
    store: &dyn History,
    v: &VersionRow,
    label: &str,
    purpose: &str,
    hint: &str,
) -> Result<String, Failure> {
    content_text(store, v.content(), label, purpose, hint)
}

/// Content (a version's, a refusal's: [`History::refused_content`]) as text, held whole
/// in memory to be `purpose`d (`diff`, `show`): the failure, naming `label`, `purpose`
/// and ending with `hint` (what to do instead), when it is over [`DIFF_MAX`] bytes
/// (refused unread), not text, or has more than [`DIFF_MAX_LINES`] lines.
pub fn content_text(
    store: &dyn History,
    content: ContentRef,
    label: &str,
    purpose: &str,
    hint: &str,
) -> Result<String, Failure> {
    if content.len > DIFF_MAX {
        return Err(format!(
            "{purpose}: {} is {} bytes: too large to {purpose} in memory (limit {} MiB); {hint}",
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
                "{purpose}: {} is not text (not UTF-8, or it holds a NUL byte); {hint}",
                quote_stored(label)
            ));
        }
    };
    let lines = text.lines().count();
    if lines > DIFF_MAX_LINES {
        return Err(format!(
            "{purpose}: {} has {lines} lines: too many to {purpose} in memory (limit \
             {DIFF_MAX_LINES} lines); {hint}",
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
        let hint = "see scratchfs show";
        (
            version_text(store, a, &ha, "diff", hint)?,
            version_text(store, b, &hb, "diff", hint)?,
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
    match content_text(
        store,
        content,
        &label,
        "show",
        "see scratchfs show --refused",
    ) {
        Ok(t) => o["text"] = t.into(),
        Err(e) => o["not_text"] = e.into(),
    }
    Ok(o)
}

mod activity;
mod origins;

pub use activity::{BUSIEST_FILES, BUSIEST_WRITERS, SPANS_MAX, activity};
pub use origins::{ORIGIN_HOPS, credited_json, follow_ground_origins, follow_origins, open_origin};
