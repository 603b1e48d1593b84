//! What `scratchfs ground` checks a reply against (issue 13): every value the scratchpad
//! holds now, read from the database (the store's questions,
//! [`crate::store::sql::lineage`]), so the command line and the daemon (the MCP tool
//! `ground`) share it through [`crate::store::History::ground_sources`].
//!
//! - a JSON file (an object or an array, at most [`SOURCE_FILE_MAX`]): each scalar at any
//!   depth is a key source (dotted key, `items.0.sku`), with the version, writer and step
//!   that last changed its top-level key (`fields`; the file's current version for a
//!   file over 1 MiB, whose keys are not tracked);
//! - any other text file: each line holding a digit is a line source, with the file's
//!   current version, writer and step.
//!
//! Binary files and files over [`SOURCE_FILE_MAX`] are left out, at most
//! [`SOURCE_BYTES_MAX`] bytes are read, and at most [`SOURCES_MAX`] sources are returned.

use crate::store::sql::Conn;
use crate::store::sql::lineage::{field_setters, live_files};
use std::collections::HashSet;

use super::ground::Source;
use crate::store::error::Result;
use crate::store::read_all;

/// Largest file whose values are sources (4 MiB).
pub const SOURCE_FILE_MAX: u64 = 4 << 20;

/// Most sources gathered (500,000).
pub const SOURCES_MAX: usize = 500_000;

/// Most bytes of content read to gather them (256 MiB): files past it are left out.
pub const SOURCE_BYTES_MAX: u64 = 256 << 20;

/// The writers the stored rules mark `"model": true` (the rules of the last mount).
pub fn model_writers(conn: &dyn Conn) -> Result<HashSet<String>> {
    let text = crate::store::sql::read::rules_text(conn)?;
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Ok(HashSet::new());
    };
    Ok(crate::rules::Rules::parse(&text)
        .map(|r| {
            r.writers
                .into_iter()
                .filter(|(_, m)| m.model)
                .map(|(n, _)| n)
                .collect()
        })
        .unwrap_or_default())
}

/// Each scalar of `v` with its dotted key.
fn leaves(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                leaves(&join(k), x, out);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                leaves(&join(&i.to_string()), x, out);
            }
        }
        _ => out.push((prefix.to_string(), v.to_string())),
    }
}

/// What the scratchpad holds now, for grounding: the sources, and the files not searched.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Sources {
    /// The values and lines found.
    pub sources: Vec<Source>,
    /// Files left out for their size (over [`SOURCE_FILE_MAX`], or past
    /// [`SOURCE_BYTES_MAX`] in all), as stored: a value they hold reads as unsourced.
    pub skipped: Vec<String>,
    /// The writers the rules mark `"model": true` (what `Source::model` was judged by).
    #[serde(skip)]
    pub model: HashSet<String>,
}

/// Every source the scratchpad holds now (see the module's docs). Files under a `.git`
/// directory are not sources (a repository's logs and refs hold numbers nobody asserted).
pub fn sources(conn: &dyn Conn) -> Result<Sources> {
    let model = model_writers(conn)?;
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    let mut budget = SOURCE_BYTES_MAX;
    for f in live_files(conn)? {
        if out.len() >= SOURCES_MAX {
            break;
        }
        if f.path.split('/').any(|c| c == ".git") {
            // A repository's own files (logs, refs, packed objects) hold numbers nobody
            // asserted.
            continue;
        }
        if f.content.len > SOURCE_FILE_MAX || f.content.len > budget {
            skipped.push(f.path);
            continue;
        }
        if f.content.len == 0 {
            continue;
        }
        budget -= f.content.len;
        let bytes = read_all(conn, f.content)?;
        if crate::views::is_binary(&bytes, true) {
            continue;
        }
        let json = match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(v @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) => Some(v),
            _ => None,
        };
        if let Some(doc) = json {
            let setters = field_setters(conn, f.file_id)?;
            let mut found = Vec::new();
            leaves("", &doc, &mut found);
            // Keys a rollback or restore brought back (a setter id other than 0) are
            // credited to the version that set them (issue 35), asked once per key.
            let mut followed = std::collections::HashMap::new();
            for (key, text) in found {
                let top = key.split('.').next().unwrap_or_default();
                let (mut version, mut writer, mut step, id) = setters
                    .get(top)
                    .cloned()
                    .unwrap_or_else(|| (f.version, f.writer.clone(), f.step, 0));
                let mut brought_back_by = None;
                if id != 0 && !followed.contains_key(top) {
                    let value = doc.get(top).cloned().unwrap_or_default();
                    let found = super::why::brought_back_setter(conn, id, top, &value)?;
                    followed.insert(top.to_string(), found);
                }
                if let Some(Some((set_by, by))) = followed.get(top) {
                    version = set_by.version;
                    writer = set_by.writer.clone();
                    step = set_by.step;
                    brought_back_by = by
                        .first()
                        .map(|b| format!("{} v{} by {}", b.op, b.version, b.writer));
                }
                // A value that came from another scratchpad: where, to follow there.
                let mut adopted_from = None;
                let mut origin = None;
                if id != 0 {
                    let setter = match followed.get(top) {
                        Some(Some((set_by, _))) => Some(set_by.clone()),
                        _ => crate::store::sql::lineage::version_facts(conn, id)?,
                    };
                    if let Some(v) = setter
                        && let Some(o) = v.origin.clone()
                    {
                        adopted_from = Some(format!(
                            "{} v{} by {} from {} {}@{}",
                            v.op, v.version, v.writer, o.source, o.path, o.version
                        ));
                        origin = Some(super::ground::AdoptedFrom {
                            origin: o,
                            blake3: v.blake3.clone(),
                            key: top.to_string(),
                        });
                    }
                }
                out.push(Source {
                    path: f.path.clone(),
                    model: model.contains(&writer),
                    key: Some(key),
                    line: None,
                    text,
                    version,
                    writer,
                    step,
                    brought_back_by,
                    adopted_from,
                    origin,
                });
            }
            continue;
        }
        let text = String::from_utf8_lossy(&bytes);
        for (i, line) in text.lines().enumerate() {
            if !line.bytes().any(|b| b.is_ascii_digit()) {
                continue;
            }
            out.push(Source {
                path: f.path.clone(),
                key: None,
                line: Some(i as u64 + 1),
                text: line.to_string(),
                version: f.version,
                writer: f.writer.clone(),
                step: f.step,
                model: model.contains(&f.writer),
                brought_back_by: None,
                adopted_from: None,
                origin: None,
            });
        }
    }
    out.truncate(SOURCES_MAX);
    Ok(Sources {
        sources: out,
        skipped,
        model,
    })
}
