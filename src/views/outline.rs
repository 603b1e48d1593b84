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
//! Bounded whatever the file's size (docs/views.md, "Large files"): at most the first
//! [`OUTLINE_MAX`] bytes are read, at most [`OUTLINE_ROWS`] rows listed, and Markdown is
//! parsed a piece at a time.
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

/// Most bytes of a file an outline reads (1 MiB, the bound of per-key provenance too): a
/// larger file is outlined from its first `OUTLINE_MAX` bytes, cut after their last
/// newline, and a JSON object's keys are listed only for a file of at most this size (it
/// is parsed whole). Parsing costs many times the bytes parsed (a Markdown parser's tree,
/// JSON values, line offsets), so this keeps an outline's memory and time bounded
/// whatever the file's size (docs/views.md).
pub const OUTLINE_MAX: usize = 1 << 20;

/// Most rows (headings, keys) an outline lists (1,000); it says how many it left out.
pub const OUTLINE_ROWS: usize = 1000;

/// Most characters of a heading's title an outline shows (the rest is `…`).
pub const TITLE_MAX: usize = 200;

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
    let lines = text.bytes().filter(|&b| b == b'\n').count() + 1
        - usize::from(text.ends_with('\n') || text.is_empty());
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
    } else if partial && lower.ends_with(".json") {
        head_line("json", &mut out);
        let _ = writeln!(
            out,
            "(keys not listed: outlines parse JSON of up to {} MiB)",
            OUTLINE_MAX >> 20
        );
    } else if let Some(serde_json::Value::Object(map)) = (!partial)
        .then(|| serde_json::from_str(text).ok())
        .flatten()
    {
        head_line("json object", &mut out);
        let _ = writeln!(
            out,
            "{:<24} {:<7} {:>7}  last changed",
            "key", "type", "bytes"
        );
        for (k, v) in map.iter().take(OUTLINE_ROWS) {
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
        more(map.len(), "keys", &mut out);
    } else {
        head_line("text", &mut out);
    }
    out
}

/// The row saying how many of `n` items were left out, if any.
fn more(n: usize, what: &str, out: &mut String) {
    if n > OUTLINE_ROWS {
        let _ = writeln!(
            out,
            "(… {} more {what}: an outline lists {OUTLINE_ROWS})",
            n - OUTLINE_ROWS
        );
    }
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

/// Markdown is parsed in pieces of about this many bytes (16 KiB), cut at blank lines
/// outside code fences, HTML blocks and front matter ([`pieces`]): a Markdown parser's tree
/// costs many times the text it holds (up to ~70 times, for a paragraph of one-letter
/// lines), so a piece at a time keeps an outline's memory bounded.
const PIECE: usize = 16 << 10;

/// A piece with no such blank line is cut at a line boundary once it reaches this many
/// bytes (64 KiB), and a code fence, HTML block or front matter open there is skipped to
/// its end (it holds no heading); of a longer line, only the first 64 KiB are parsed.
const PIECE_MAX: usize = 64 << 10;

/// A block whose lines are not Markdown and may hold blank lines: cutting a piece inside
/// one would make its lines parse as Markdown.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verbatim {
    /// A code fence of `len` `char`s (backticks or tildes).
    Fence(u8, usize),
    /// YAML front matter (`---` on the first line, to `---` or `...`).
    FrontMatter,
    /// An HTML block of CommonMark's kinds 1 to 5, to the line holding one of these end
    /// markers (lowercase).
    Html(&'static [&'static str]),
}

/// The verbatim block open after `line` (without its newline), given the one open before
/// it; `first`: the text's first line.
fn verbatim(open: Option<Verbatim>, line: &str, first: bool) -> Option<Verbatim> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let body = &line[indent..];
    match open {
        Some(Verbatim::Fence(c, n)) => {
            let run = body.bytes().take_while(|&b| b == c).count();
            let closes = indent < 4 && run >= n && body[run..].trim().is_empty();
            (!closes).then_some(Verbatim::Fence(c, n))
        }
        Some(Verbatim::FrontMatter) => {
            (!matches!(line.trim_end(), "---" | "...")).then_some(Verbatim::FrontMatter)
        }
        Some(Verbatim::Html(ends)) => {
            let lower = line.to_ascii_lowercase();
            (!ends.iter().any(|e| lower.contains(e))).then_some(Verbatim::Html(ends))
        }
        None if first && line.trim_end() == "---" => Some(Verbatim::FrontMatter),
        None if indent < 4 => {
            for c in [b'`', b'~'] {
                let run = body.bytes().take_while(|&b| b == c).count();
                if run >= 3 && !(c == b'`' && body[run..].contains('`')) {
                    return Some(Verbatim::Fence(c, run));
                }
            }
            const RAW: &[&str] = &["</script>", "</pre>", "</style>", "</textarea>"];
            let lower = body.to_ascii_lowercase();
            let opens = |start: &str| lower.starts_with(start);
            let (skip, ends): (usize, &'static [&'static str]) =
                if ["<script", "<pre", "<style", "<textarea"].iter().any(|t| {
                    opens(t)
                        && matches!(
                            lower.as_bytes().get(t.len()),
                            None | Some(b' ' | b'\t' | b'>')
                        )
                }) {
                    (1, RAW)
                } else if opens("<!--") {
                    (4, &["-->"])
                } else if opens("<?") {
                    (2, &["?>"])
                } else if opens("<![cdata[") {
                    (9, &["]]>"])
                } else if opens("<!")
                    && lower.as_bytes().get(2).is_some_and(u8::is_ascii_alphabetic)
                {
                    (2, &[">"])
                } else {
                    return None;
                };
            // A block whose end is on its first line is over.
            let end = (!ends.iter().any(|e| lower[skip..].contains(e))).then_some(ends);
            end.map(Verbatim::Html)
        }
        None => None,
    }
}

/// The byte ranges of `text` to parse as Markdown one at a time: each about `piece` bytes,
/// cut after a blank line outside any [`Verbatim`] block (a piece then parses alone as it
/// does in place); a piece that reaches `piece_max` bytes without one is cut at a line
/// boundary, and a verbatim block open there is left out to its end. No range is longer
/// than `piece_max` (a longer line is cut short).
fn pieces(text: &str, piece: usize, piece_max: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut push = |r: std::ops::Range<usize>| {
        let mut end = r.end.min(r.start.saturating_add(piece_max));
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        out.push(r.start..end);
    };
    let (mut start, mut at) = (0, 0);
    let mut open = None;
    let mut skipping = false;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let end = at + line.len();
        at = end;
        let body = line.trim_end_matches(['\n', '\r']);
        open = verbatim(open, body, i == 0);
        if skipping {
            if open.is_none() {
                skipping = false;
                start = end;
            }
            continue;
        }
        let len = end - start;
        if (len >= piece && open.is_none() && body.trim().is_empty()) || len >= piece_max {
            push(start..end);
            start = end;
            skipping = open.is_some();
        }
    }
    if !skipping && start < text.len() {
        push(start..text.len());
    }
    out
}

/// The headings of a Markdown text, parsed as CommonMark (with YAML front matter) in
/// [`pieces`]: the level and 1-based line of each, and the titles of the first `titles`
/// (at most [`TITLE_MAX`] characters each).
fn headings(
    text: &str,
    starts: &[usize],
    titles: usize,
    piece: usize,
    piece_max: usize,
) -> (Vec<(usize, usize)>, Vec<String>) {
    let mut marks: Vec<(usize, usize)> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for range in pieces(text, piece, piece_max) {
        // Front matter only opens a document.
        let opts = if range.start == 0 {
            Options::ENABLE_YAML_STYLE_METADATA_BLOCKS | Options::ENABLE_TABLES
        } else {
            Options::ENABLE_TABLES
        };
        let base = range.start;
        for (event, at) in Parser::new_ext(&text[range], opts).into_offset_iter() {
            match event {
                Event::Start(Tag::Heading { level, .. }) => {
                    marks.push((level as usize, line_of(starts, base + at.start)));
                    current = (names.len() < titles).then(String::new);
                }
                Event::End(TagEnd::Heading(_)) => names.extend(current.take()),
                Event::Text(t) | Event::Code(t) => {
                    if let Some(title) = current.as_mut()
                        && title.len() < 4 * TITLE_MAX
                    {
                        title.push_str(&t);
                    }
                }
                _ => {}
            }
        }
    }
    (marks, names)
}

/// The headings of `text` with their sections (the first [`OUTLINE_ROWS`]). `Some(size)`:
/// `text` is only the start of a file of `size` bytes, so a section that runs to its end
/// runs to the end of the file as far as the outline knows: `A-$` (sed's last line),
/// bytes to the end of the file.
fn markdown(text: &str, partial: Option<u64>, out: &mut String) {
    let starts = line_starts(text);
    // Lines of the file; a trailing newline does not start another line.
    let last_line = line_of(&starts, text.len().saturating_sub(1)).max(1);
    let (marks, titles) = headings(text, &starts, OUTLINE_ROWS, PIECE, PIECE_MAX);
    if marks.is_empty() {
        out.push_str("(no headings)\n");
        return;
    }
    // Where each listed section ends: the line before the next heading of the same or a
    // higher level (found walking backwards, by level), if there is one.
    let mut next_at = [None::<usize>; 7];
    let mut ends = vec![None; marks.len().min(OUTLINE_ROWS)];
    for (i, &(level, line)) in marks.iter().enumerate().rev() {
        if i < ends.len() {
            ends[i] = next_at[1..=level].iter().flatten().min().map(|n| n - 1);
        }
        next_at[level] = Some(line);
    }
    let _ = writeln!(
        out,
        "{:<11} {:>7} {:>7}  heading",
        "lines", "bytes", "~tokens"
    );
    for ((&(level, line), next), title) in marks.iter().zip(ends).zip(&titles) {
        let end = next.unwrap_or(last_line);
        let from = starts[line - 1];
        let to = starts.get(end).copied().unwrap_or(text.len());
        let (range, bytes) = match partial {
            Some(size) if next.is_none() => (format!("{line}-$"), size as usize - from),
            _ => (format!("{line}-{end}"), to - from),
        };
        let title = title.trim();
        let title = match title.char_indices().nth(TITLE_MAX) {
            Some((cut, _)) => format!("{}…", &title[..cut]),
            None => title.to_string(),
        };
        let _ = writeln!(
            out,
            "{:<11} {:>7} {:>7}  {}{} {}",
            range,
            bytes,
            tokens(bytes),
            "  ".repeat(level - 1),
            "#".repeat(level),
            super::one_line(&title)
        );
    }
    more(marks.len(), "headings", out);
}

fn jsonl(text: &str, out: &mut String) {
    // Keys in the order first seen, with how many records have each.
    let mut keys: Vec<(String, usize)> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let (mut lines, mut bad) = (0usize, 0usize);
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        lines += 1;
        match serde_json::from_str::<serde_json::Value>(l) {
            Ok(serde_json::Value::Object(m)) => {
                for k in m.keys() {
                    match index.get(k) {
                        Some(&i) => keys[i].1 += 1,
                        None => {
                            index.insert(k.clone(), keys.len());
                            keys.push((k.clone(), 1));
                        }
                    }
                }
            }
            Ok(_) => {}
            Err(_) => bad += 1,
        }
    }
    let _ = writeln!(out, "{lines} records, {bad} not JSON");
    for (k, c) in keys.iter().take(OUTLINE_ROWS) {
        let _ = writeln!(out, "{:<24} in {c} records", super::quote_path(k));
    }
    more(keys.len(), "keys", out);
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

    /// Parsed a piece at a time (cut at every blank line that allows it), a document has
    /// the headings it has parsed whole: fences, HTML blocks and front matter that hold
    /// blank lines are never cut.
    #[test]
    fn markdown_in_pieces_has_the_headings_of_the_whole() {
        let text = "---\ntitle: x\n\n# not a heading\n---\n# Plan\nintro\n\n## Goal\n\
                    ```sh\n# comment\n\n# more\n```\n\n<!-- notes\n\n# hidden\n-->\n\n\
                    <pre>\n\n# raw\n</pre>\n\nSetext\n------\n\n~~~~\n\n## in tildes\n~~~\n\
                    ## still in\n~~~~\n\n    # indented code\n\n    # more code\n\n\
                    > # quoted\n>\n> text\n\n- item\n\n  # in the item\n\n### Last\nend\n";
        let starts = line_starts(text);
        let whole = headings(text, &starts, 100, usize::MAX, usize::MAX);
        let titles: Vec<&str> = whole.1.iter().map(|t| t.trim()).collect();
        assert_eq!(
            titles,
            ["Plan", "Goal", "Setext", "quoted", "in the item", "Last"],
            "{whole:?}"
        );
        assert!(pieces(text, 1, usize::MAX).len() > 10);
        assert_eq!(headings(text, &starts, 100, 1, usize::MAX), whole);
        // A line longer than a piece is cut short.
        let long = format!("# {}\n## B\n", "t".repeat(100));
        assert_eq!(pieces(&long, 1, 64), [0..64, 103..108]);
        // Cut by force inside a fence: its lines are left out, never read as headings.
        let fenced = format!("# A\n```\n{}```\n# B\n", "# no\n".repeat(100));
        let starts = line_starts(&fenced);
        let (marks, titles) = headings(&fenced, &starts, 10, 1, 64);
        assert_eq!(
            (marks, titles),
            (vec![(1, 1), (1, 104)], vec!["A".into(), "B".into()])
        );
    }

    /// At most OUTLINE_ROWS rows, then how many were left out; ranges still right.
    #[test]
    fn rows_are_capped() {
        let mut text = String::new();
        for i in 0..1500 {
            text.push_str(&format!("# H{i}\n## Sub {i}\nbody\n"));
        }
        let o = ol("many.md", text.as_bytes(), "v", &Default::default());
        let rows: Vec<&str> = o.lines().skip(2).collect();
        assert_eq!(rows.len(), OUTLINE_ROWS + 1, "{}", &o[..300]);
        assert_eq!(rows[0].split_whitespace().next(), Some("1-3"));
        assert_eq!(rows[1].split_whitespace().next(), Some("2-3"));
        assert!(rows[999].starts_with("1499-1500 "), "{}", rows[999]);
        assert_eq!(rows[1000], "(… 2000 more headings: an outline lists 1000)");
        let long = format!("# {}\n", "t".repeat(5000));
        let o = ol("long.md", long.as_bytes(), "v", &Default::default());
        assert!(
            o.ends_with(&format!("# {}…\n", "t".repeat(TITLE_MAX))),
            "{o}"
        );
        let json: String = (0..1200).map(|i| format!(",\"k{i}\":{i}")).collect();
        let o = ol(
            "s.json",
            format!("{{{}}}", &json[1..]).as_bytes(),
            "v",
            &Default::default(),
        );
        assert_eq!(o.lines().count(), 2 + OUTLINE_ROWS + 1, "{}", &o[..200]);
        assert!(o.ends_with("(… 200 more keys: an outline lists 1000)\n"));
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
