//! The scratchpad as MCP resources (issue 33 item 3; MCP 2025-11-25 "Resources"):
//! `scratchpad://MANIFEST`, and by template each file, its outline and each of its
//! versions. Reading one is the matching tool call (`read`, `outline`, `read_version`)
//! on the same backend, so the caller's modes and the gate's views apply as to the tools;
//! nothing here reads the store. [`Watch`] tells which subscribed resources changed,
//! from the `list` tool's structured result (each file's version and size, and the count
//! of refusals), not from MANIFEST's text, whose ages change with time alone.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// MANIFEST's URI.
pub const MANIFEST: &str = "scratchpad://MANIFEST";
/// A file's URI is this followed by its path.
pub const FILE: &str = "scratchpad://file/";
/// A file's outline's URI is this followed by its path.
pub const OUTLINE: &str = "scratchpad://outline/";
/// Version N of a file: this, N, `/`, its path.
pub const VERSION: &str = "scratchpad://version/";

/// Most bytes a resource read returns (1 MiB); a longer file is cut, saying so, and is
/// read whole with the `read` tool's `offset`.
pub const READ_MAX: usize = 1 << 20;

/// What a resource URI names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// MANIFEST.
    Manifest,
    /// The live file at this path.
    File(String),
    /// The outline of the file at this path.
    Outline(String),
    /// This version of the file at this path.
    Version(String, i64),
}

/// A path as it goes into a URI: `%`, space, `#` and `?` percent-encoded, the rest as it
/// is (RFC 3986 allows `/` in a path; RFC 6570 `{+path}` keeps it).
pub fn encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            '%' => out.push_str("%25"),
            ' ' => out.push_str("%20"),
            '#' => out.push_str("%23"),
            '?' => out.push_str("%3F"),
            c => out.push(c),
        }
    }
    out
}

/// [`encode`] undone: every `%XX` decoded. `EINVAL` for a bad escape or a path that is
/// not UTF-8 once decoded.
fn decode(text: &str) -> Result<String> {
    let bad = || {
        Error::new(
            libc::EINVAL,
            format!("{text:?}: a bad %-escape in a resource URI"),
        )
    };
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = text.get(i + 1..i + 3).ok_or_else(bad)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// The target of `uri`. `ENOENT` for a URI that is not one of this server's.
pub fn parse(uri: &str) -> Result<Target> {
    if uri == MANIFEST {
        return Ok(Target::Manifest);
    }
    if let Some(p) = uri.strip_prefix(FILE) {
        return Ok(Target::File(decode(p)?));
    }
    if let Some(p) = uri.strip_prefix(OUTLINE) {
        return Ok(Target::Outline(decode(p)?));
    }
    if let Some(rest) = uri.strip_prefix(VERSION)
        && let Some((n, p)) = rest.split_once('/')
        && let Ok(n) = n.parse::<i64>()
    {
        return Ok(Target::Version(decode(p)?, n));
    }
    Err(Error::new(
        libc::ENOENT,
        format!(
            "{uri:?}: not a resource of this server ({MANIFEST}, {FILE}PATH, {OUTLINE}PATH, \
             {VERSION}N/PATH)"
        ),
    ))
}

/// What the `list` tool's structured result says changed, as compared by [`Watch`]:
/// each file's (version, bytes), and the refusals on record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    files: BTreeMap<String, (i64, u64)>,
    refusals: u64,
}

impl State {
    /// The state in a `list` result's structured content.
    pub fn of(listing: &serde_json::Value) -> State {
        let files = listing["files"]
            .as_array()
            .map(|fs| {
                fs.iter()
                    .filter_map(|f| {
                        Some((
                            f["path"].as_str()?.to_string(),
                            (f["version"].as_i64()?, f["bytes"].as_u64().unwrap_or(0)),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        State {
            files,
            refusals: listing["refusals_total"].as_u64().unwrap_or(0),
        }
    }

    /// The files whose entry differs between `self` and `then` (added, removed, changed).
    fn changed_files<'a>(&'a self, then: &'a State) -> Vec<&'a str> {
        let mut out: Vec<&str> = self
            .files
            .iter()
            .filter(|(p, v)| then.files.get(*p) != Some(v))
            .map(|(p, _)| p.as_str())
            .collect();
        out.extend(
            then.files
                .keys()
                .filter(|p| !self.files.contains_key(*p))
                .map(String::as_str),
        );
        out
    }
}

/// The subscribed URIs that a change from `then` to `now` updates: MANIFEST on any
/// change (a file, or a refusal); a file's and its outline's when that file changed.
/// Versions never change.
pub fn updated<'u>(then: &State, now: &State, subscribed: &'u [String]) -> Vec<&'u str> {
    if then == now {
        return Vec::new();
    }
    let changed = now.changed_files(then);
    subscribed
        .iter()
        .filter(|uri| match parse(uri) {
            Ok(Target::Manifest) => true,
            Ok(Target::File(p) | Target::Outline(p)) => changed.contains(&p.as_str()),
            _ => false,
        })
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_files_outlines_and_versions() {
        assert_eq!(parse(MANIFEST).unwrap(), Target::Manifest);
        assert_eq!(
            parse("scratchpad://file/notes/a%20b.md").unwrap(),
            Target::File("notes/a b.md".into())
        );
        assert_eq!(
            parse(&format!("{FILE}{}", encode("x%#?.md"))).unwrap(),
            Target::File("x%#?.md".into())
        );
        assert_eq!(
            parse("scratchpad://version/3/plan.md").unwrap(),
            Target::Version("plan.md".into(), 3)
        );
        assert_eq!(parse("file:///etc/passwd").unwrap_err().errno, libc::ENOENT);
        assert_eq!(
            parse("scratchpad://file/%zz").unwrap_err().errno,
            libc::EINVAL
        );
    }

    #[test]
    fn a_change_updates_manifest_and_that_file_only() {
        let list = |v: i64, refusals: u64| {
            State::of(&serde_json::json!({
                "files": [{ "path": "a.md", "version": v, "bytes": 1 },
                          { "path": "b.md", "version": 1, "bytes": 1 }],
                "refusals_total": refusals }))
        };
        let subs: Vec<String> = [MANIFEST, "scratchpad://file/a.md", "scratchpad://file/b.md"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(updated(&list(1, 0), &list(1, 0), &subs).is_empty());
        assert_eq!(
            updated(&list(1, 0), &list(2, 0), &subs),
            [MANIFEST, "scratchpad://file/a.md"]
        );
        assert_eq!(updated(&list(1, 0), &list(1, 1), &subs), [MANIFEST]);
    }
}
