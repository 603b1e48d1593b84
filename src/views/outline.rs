//! `<file>.outline`: what is in a file, for a handful of tokens (SPEC §7).
//!
//! Format (plain text, one header line, then one line per item):
//!
//! ```text
//! plan.md: markdown, 12 lines, 345 bytes, ~87 tokens; version 3 by agent
//! lines    bytes  ~tokens  heading
//! 1-12       345       87  # Plan
//! 2-3         70       18    ## Goal
//! ```
//!
//! - Markdown (by extension `.md`/`.markdown`): every CommonMark heading (ATX and setext;
//!   none from code blocks, HTML blocks or front matter) with its 1-based inclusive line
//!   range: the heading line up to the line before the next heading of the same or a
//!   higher level, so `sed -n A,Bp FILE` prints exactly that section, subsections
//!   included.
//! - JSON object: each top-level key with its type and the bytes of its value as written
//!   compactly.
//! - JSONL: the line count and the top-level keys seen, with how many lines have each.
//! - Other UTF-8 text: lines and bytes. Binary (not UTF-8, or a NUL byte): size and blake3.
//!
//! Tokens are estimated as bytes / 4, rounded up. The file's name (its exact bytes) and
//! JSON keys are quoted when they could break a row or are not UTF-8
//! ([`super::quote_stored`], [`super::quote_path`]); headings and the version
//! line have their control characters escaped ([`super::one_line`]).

use std::fmt::Write;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// Estimated tokens of `bytes` bytes (bytes / 4, rounded up).
pub fn tokens(bytes: usize) -> usize {
    bytes.div_ceil(4)
}

/// Most bytes of a file an outline reads (4 MiB): a larger file is outlined from its
/// first `OUTLINE_MAX` bytes, cut after their last newline (docs/views.md), so that an
/// outline costs bounded memory and time whatever the file's size.
pub const OUTLINE_MAX: usize = 4 << 20;

/// Largest JSON object whose keys an outline lists (1 MiB, the bound of per-key
/// provenance): it is parsed whole, which costs several times its size.
pub const JSON_OUTLINE_MAX: u64 = 1 << 20;

/// A file as an outline sees it.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// Path from the root, as stored ([`crate::store::paths`]).
    pub path: &'a str,
    /// The file's first bytes: all of it, or its first [`OUTLINE_MAX`] bytes at least.
    pub head: &'a [u8],
    /// The file's size in bytes.
    pub size: u64,
    /// blake3 of the whole content, hex (the version's, as recorded).
    pub blake3: &'a str,
    /// What the header says of the current version, e.g. "version 3 by agent".
    pub version_line: &'a str,
}

/// The outline of a file. `fields` gives, for a JSON object, the provenance of each
/// top-level key (e.g. "v3 get_order step 2 2026-11-30 18:20:11Z"). Only the first
/// [`OUTLINE_MAX`] bytes of `input.head` are looked at.
pub fn outline(input: Input<'_>, fields: &std::collections::HashMap<String, String>) -> String {
    let Input {
        path,
        head,
        size,
        blake3,
        version_line,
    } = input;
    let mut out = String::new();
    // The header names the file: quoted if its name could break the line.
    let shown = super::quote_stored(path);
    let version_line = &*super::one_line(version_line);
    let head = &head[..head.len().min(OUTLINE_MAX)];
    let partial = (head.len() as u64) < size;
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        // A character cut by the end of what was read.
        Err(e) if partial && e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return binary(path, size, blake3, version_line),
    };
    if text.contains('\0') {
        return binary(path, size, blake3, version_line);
    }
    // Of a partial read, whole lines only (unless it holds no newline at all).
    let text = match text.rfind('\n') {
        Some(i) if partial => &text[..=i],
        _ => text,
    };
    let lines = line_starts(text)
        .len()
        .saturating_sub(usize::from(text.ends_with('\n') || text.is_empty()));
    let head_line = |kind: &str, out: &mut String| {
        let s = if lines == 1 { "" } else { "s" };
        let _ = if partial {
            writeln!(
                out,
                "{shown}: {kind}, {size} bytes, ~{} tokens, outlined from its first {lines} \
                 line{s} ({} bytes); {version_line}",
                tokens(size as usize),
                text.len()
            )
        } else {
            writeln!(
                out,
                "{shown}: {kind}, {lines} line{s}, {size} bytes, ~{} tokens; {version_line}",
                tokens(size as usize)
            )
        };
    };
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".md") || lower.ends_with(".markdown") {
        head_line("markdown", &mut out);
        markdown(text, partial.then_some(size), &mut out);
    } else if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") {
        head_line("jsonl", &mut out);
        jsonl(text, &mut out);
    } else if size > JSON_OUTLINE_MAX && lower.ends_with(".json") {
        head_line("json", &mut out);
        let _ = writeln!(
            out,
            "(keys not listed: outlines parse JSON of up to {} MiB)",
            JSON_OUTLINE_MAX >> 20
        );
    } else if let Some(serde_json::Value::Object(map)) = (size <= JSON_OUTLINE_MAX)
        .then(|| serde_json::from_str(text).ok())
        .flatten()
    {
        head_line("json object", &mut out);
        let _ = writeln!(
            out,
            "{:<24} {:<7} {:>7}  last changed",
            "key", "type", "bytes"
        );
        for (k, v) in &map {
            let bytes = serde_json::to_string(v).map(|s| s.len()).unwrap_or(0);
            let prov = fields.get(k).map(String::as_str).unwrap_or("-");
            let _ = writeln!(
                out,
                "{:<24} {:<7} {:>7}  {}",
                super::quote_path(k),
                type_name(v),
                bytes,
                super::one_line(prov)
            );
        }
    } else {
        head_line("text", &mut out);
    }
    out
}

fn binary(path: &str, size: u64, blake3: &str, version_line: &str) -> String {
    format!(
        "{}: binary, {size} bytes, blake3 {blake3}; {version_line}\n",
        super::quote_stored(path),
    )
}

fn type_name(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// Byte offset of the start of every line (a final empty line after a trailing newline
/// included).
fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

/// 1-based line number of byte offset `at`.
fn line_of(starts: &[usize], at: usize) -> usize {
    match starts.binary_search(&at) {
        Ok(i) => i + 1,
        Err(i) => i,
    }
}

struct Heading {
    level: usize,
    line: usize,
    title: String,
}

/// The headings of a Markdown text, parsed as CommonMark (with YAML front matter).
fn headings(text: &str, starts: &[usize]) -> Vec<Heading> {
    let mut out: Vec<Heading> = Vec::new();
    let mut current: Option<Heading> = None;
    let opts = Options::ENABLE_YAML_STYLE_METADATA_BLOCKS | Options::ENABLE_TABLES;
    for (event, range) in Parser::new_ext(text, opts).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                current = Some(Heading {
                    level: level as usize,
                    line: line_of(starts, range.start),
                    title: String::new(),
                });
            }
            Event::End(TagEnd::Heading(_)) => out.extend(current.take()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = current.as_mut() {
                    h.title.push_str(&t);
                }
            }
            _ => {}
        }
    }
    out
}

/// The headings of `text` with their sections. `Some(size)`: `text` is only the start of
/// a file of `size` bytes, so a section that runs to its end runs to the end of the file
/// as far as the outline knows: `A-$` (sed's last line), bytes to the end of the file.
fn markdown(text: &str, partial: Option<u64>, out: &mut String) {
    let starts = line_starts(text);
    // Lines of the file; a trailing newline does not start another line.
    let last_line = line_of(&starts, text.len().saturating_sub(1)).max(1);
    let hs = headings(text, &starts);
    if hs.is_empty() {
        out.push_str("(no headings)\n");
        return;
    }
    let _ = writeln!(
        out,
        "{:<11} {:>7} {:>7}  heading",
        "lines", "bytes", "~tokens"
    );
    for (i, h) in hs.iter().enumerate() {
        let next = hs[i + 1..]
            .iter()
            .find(|n| n.level <= h.level)
            .map(|n| n.line - 1);
        let end = next.unwrap_or(last_line);
        let from = starts[h.line - 1];
        let to = starts.get(end).copied().unwrap_or(text.len());
        let (range, bytes) = match partial {
            Some(size) if next.is_none() => (format!("{}-$", h.line), size as usize - from),
            _ => (format!("{}-{}", h.line, end), to - from),
        };
        let _ = writeln!(
            out,
            "{:<11} {:>7} {:>7}  {}{} {}",
            range,
            bytes,
            tokens(bytes),
            "  ".repeat(h.level - 1),
            "#".repeat(h.level),
            super::one_line(h.title.trim())
        );
    }
}

fn jsonl(text: &str, out: &mut String) {
    let mut keys: Vec<(String, usize)> = Vec::new();
    let (mut lines, mut bad) = (0usize, 0usize);
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        lines += 1;
        match serde_json::from_str::<serde_json::Value>(l) {
            Ok(serde_json::Value::Object(m)) => {
                for k in m.keys() {
                    match keys.iter_mut().find(|(n, _)| n == k) {
                        Some((_, c)) => *c += 1,
                        None => keys.push((k.clone(), 1)),
                    }
                }
            }
            Ok(_) => {}
            Err(_) => bad += 1,
        }
    }
    let _ = writeln!(out, "{lines} records, {bad} not JSON");
    for (k, c) in keys {
        let _ = writeln!(out, "{:<24} in {c} records", super::quote_path(&k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outline of a whole file.
    fn ol(
        path: &str,
        content: &[u8],
        version_line: &str,
        fields: &std::collections::HashMap<String, String>,
    ) -> String {
        let hash = blake3::hash(content).to_hex();
        let input = Input {
            path,
            head: content,
            size: content.len() as u64,
            blake3: &hash,
            version_line,
        };
        outline(input, fields)
    }

    /// The line range of each heading, printed with `sed -n A,Bp`, is exactly its section.
    #[test]
    fn markdown_sections_match_sed_ranges() {
        let text = "---\ntitle: x\n# not a heading\n---\n# Plan\nintro\n\n## Goal\nrefund\n\
                    ```\n# not a heading either\n```\nSetext\n------\nbody\n<div>\n# html?\n</div>\n\n## Last\nend\n";
        let o = ol(
            "plan.md",
            text.as_bytes(),
            "version 1 by a",
            &Default::default(),
        );
        let rows: Vec<&str> = o.lines().skip(2).collect();
        let titles: Vec<String> = rows
            .iter()
            .map(|r| r.split_whitespace().skip(3).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(titles, ["# Plan", "## Goal", "## Setext", "## Last"], "{o}");
        let lines: Vec<&str> = text.lines().collect();
        for r in rows {
            let range = r.split_whitespace().next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
            let section = lines[a - 1..b].join("\n") + "\n";
            let bytes: usize = r.split_whitespace().nth(1).unwrap().parse().unwrap();
            assert_eq!(section.len(), bytes, "{r}");
            assert!(
                section.starts_with('#') || section.starts_with("Setext"),
                "{r}: {section}"
            );
        }
        assert!(o.starts_with("plan.md: markdown, 21 lines,"), "{o}");
    }

    #[test]
    fn json_jsonl_text_and_binary() {
        let fields = [("total".to_string(), "v2 get_order".to_string())].into();
        let o = ol(
            "state.json",
            br#"{"order_id":"1042","total":18000,"ok":true}"#,
            "v",
            &fields,
        );
        assert!(
            o.contains("order_id                 string        6  -"),
            "{o}"
        );
        assert!(
            o.contains("total                    integer       5  v2 get_order"),
            "{o}"
        );
        let none = Default::default();
        let o = ol(
            "log.jsonl",
            b"{\"a\":1}\n{\"a\":2,\"b\":3}\nnope\n",
            "v",
            &none,
        );
        assert!(
            o.contains("3 records, 1 not JSON")
                && o.contains("b                        in 1 records"),
            "{o}"
        );
        let o = ol("notes.txt", b"a\nb\n", "v", &none);
        assert_eq!(o, "notes.txt: text, 2 lines, 4 bytes, ~1 tokens; v\n");
        let o = ol("x.bin", &[0, 159, 146, 150], "v", &none);
        assert!(o.starts_with("x.bin: binary, 4 bytes, blake3 "), "{o}");
    }

    /// A file larger than [`OUTLINE_MAX`] is outlined from its first whole lines; the
    /// last section runs to the end of the file (`A-$`).
    #[test]
    fn a_huge_file_is_outlined_from_its_start() {
        let mut text = String::from("# Top\nintro\n## One\n");
        while text.len() < OUTLINE_MAX {
            text.push_str("line of text é\n");
        }
        let head = &text.as_bytes()[..OUTLINE_MAX];
        let size = 3u64 << 30;
        let none = Default::default();
        let input = Input {
            path: "big.md",
            head,
            size,
            blake3: "ab",
            version_line: "v",
        };
        let o = outline(input, &none);
        let cut = text[..OUTLINE_MAX].rfind('\n').unwrap() + 1;
        let lines = text[..cut].lines().count();
        assert_eq!(
            o,
            format!(
                "big.md: markdown, {size} bytes, ~{} tokens, outlined from its first {lines} \
                 lines ({cut} bytes); v\n\
                 lines         bytes ~tokens  heading\n\
                 1-$         {size} {}  # Top\n\
                 3-$         {} {}    ## One\n",
                size / 4,
                size / 4,
                size - 12,
                (size - 12) / 4
            )
        );
        // A large JSON file: no parse, no keys; a large binary file: the recorded hash.
        let input = Input {
            path: "big.json",
            head: b"{\"a\": [1, 2,",
            ..input
        };
        assert!(
            outline(input, &none).contains("(keys not listed: outlines parse JSON of up to 1 MiB)")
        );
        let input = Input {
            path: "big.bin",
            head: &[0, 1, 2],
            ..input
        };
        assert_eq!(
            outline(input, &none),
            format!("big.bin: binary, {size} bytes, blake3 ab; v\n")
        );
    }

    #[test]
    fn names_and_keys_cannot_forge_rows() {
        let o = ol(
            "a\nb.json",
            br#"{"k\nfake string 1  v1 root": 1}"#,
            "version 1 by w\nx",
            &Default::default(),
        );
        assert_eq!(
            o,
            "\"a\\nb.json\": json object, 1 line, 32 bytes, ~8 tokens; version 1 by w\\nx\n\
             key                      type      bytes  last changed\n\
             \"k\\nfake string 1  v1 root\" integer       1  -\n"
        );
    }
}
