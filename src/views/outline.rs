//! `<file>.outline`: what is in a file, for a handful of tokens (SPEC §7).
//!
//! Format (plain text, one header line, then the rows of its kind):
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
//!   included. When they do not all fit, the higher levels first.
//! - JSON object: each top-level key, a short scalar value as it is (`order_id =
//!   "1042"`), a longer one by type and size (`notes (string, 1204 bytes)`), grouped by
//!   their provenance (the version that last changed each key: writer, version, step,
//!   time).
//! - JSONL (`.jsonl`, `.ndjson`): the record count and the top-level keys seen, with how
//!   many records have each.
//! - CSV and TSV (`.csv`, `.tsv`): the header line and the row count.
//! - Other UTF-8 text, and Markdown without headings: the line count, and the first and
//!   last lines that are not blank (clipped). Binary ([`super::is_binary`]): size and
//!   blake3.
//!
//! **Size.** An outline is never larger than its file, and at most 5% of it for a file
//! over 4 KiB ([`cap`]): rows are left out (the first of each kind, the highest heading
//! levels kept), and the version line if that lets more in. A file of at most 4 KiB
//! whose outline would leave something out is its own outline (its content: no more
//! bytes, and nothing left out).
//!
//! Bounded whatever the file's size (docs/views.md, "Large files"): at most the first
//! [`OUTLINE_MAX`] bytes are read (and the last [`TAIL_MAX`], for the last line), at
//! most [`OUTLINE_ROWS`] rows listed, and Markdown is parsed a piece at a time.
//!
//! Tokens are estimated as bytes / 4, rounded up. The file's name (its exact bytes) and
//! JSON keys are quoted when they could break a row or are not UTF-8
//! ([`super::quote_stored`], [`super::quote_path`]); headings, values, lines and the
//! version line have their control characters escaped ([`super::one_line`]).

use std::collections::HashMap;
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

/// Most bytes of a file's end an outline reads, for its last line (4 KiB).
pub const TAIL_MAX: usize = 4 << 10;

/// Most rows (headings, keys) an outline lists (1,000); it says how many it left out.
pub const OUTLINE_ROWS: usize = 1000;

/// Most characters of a heading's title an outline shows (the rest is `…`).
pub const TITLE_MAX: usize = 200;

/// Most characters of a first or last line, or a CSV header, an outline shows.
pub const LINE_SHOWN: usize = 120;

/// A JSON scalar written compactly in at most this many characters is shown as it is.
pub const SCALAR_SHOWN: usize = 40;

/// Files up to this size (4 KiB) have outlines of at most their own size; larger ones,
/// of at most 5% of it.
pub const SMALL_FILE: u64 = 4 << 10;

/// The most bytes the outline of a file of `size` bytes may have: `size` up to
/// [`SMALL_FILE`], else `size / 20` (5%).
pub fn cap(size: u64) -> usize {
    let cap = if size <= SMALL_FILE { size } else { size / 20 };
    usize::try_from(cap).unwrap_or(usize::MAX)
}

/// A file as an outline sees it.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// Path from the root, as stored ([`crate::store::paths`]).
    pub path: &'a str,
    /// The file's first bytes: all of it, or its first [`OUTLINE_MAX`] bytes at least.
    pub head: &'a [u8],
    /// The file's last bytes (up to [`TAIL_MAX`]) when `head` is not all of it; else
    /// empty.
    pub tail: &'a [u8],
    /// The file's size in bytes.
    pub size: u64,
    /// blake3 of the whole content, hex (the version's, as recorded).
    pub blake3: &'a str,
    /// What the header says of the current version, e.g. "version 3 by agent".
    pub version_line: &'a str,
}

/// The version that last changed a top-level key of a JSON object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyProvenance {
    /// Its writer.
    pub writer: String,
    /// Its version number.
    pub version: i64,
    /// The agent step it was written at, if its writer said.
    pub step: Option<i64>,
    /// Its commit time, ns.
    pub time_ns: i64,
}

/// Provenance of the top-level keys of a JSON object, by key.
pub type Fields = HashMap<String, KeyProvenance>;

/// The outline of a file. `fields` gives, for a JSON object, the provenance of each
/// top-level key. Only the first [`OUTLINE_MAX`] bytes of `input.head` are looked at. At
/// most [`cap`] bytes.
pub fn outline(input: Input<'_>, fields: &Fields) -> Vec<u8> {
    let cap = cap(input.size);
    // A file whose content is within the cap (up to 4 KiB): its own outline when an
    // outline would leave something out.
    let small = input.head.len() as u64 >= input.size && input.size as usize <= cap;
    let versioned = render(input, fields, cap, true);
    let best = if versioned.as_ref().is_some_and(|(_, left)| *left == 0) {
        versioned
    } else {
        match (versioned, render(input, fields, cap, false)) {
            (Some(a), Some(b)) => Some(if b.1 < a.1 { b } else { a }),
            (a, b) => a.or(b),
        }
    };
    match best {
        Some((o, 0)) => return o.into_bytes(),
        Some((o, _)) if !small => return o.into_bytes(),
        _ if small => return input.head[..input.size as usize].to_vec(),
        _ => {}
    }
    // The bare header, its path clipped to fit (a path of some 25,000 bytes, say).
    let shown = super::quote_stored(input.path);
    let rest = format!(": {} bytes\n", input.size);
    let room = cap.saturating_sub(rest.len() + 3);
    let mut path = String::new();
    for c in shown.chars() {
        if path.len() + c.len_utf8() > room {
            path.push('…');
            break;
        }
        path.push(c);
    }
    let o = format!("{path}{rest}");
    if o.len() <= cap {
        o.into_bytes()
    } else {
        Vec::new()
    }
}

/// Rows and the header of one outline, and how many of its rows (or lines) did not fit;
/// `None` when even the header does not fit `cap`. `versioned`: the header names the
/// version.
fn render(
    input: Input<'_>,
    fields: &Fields,
    cap: usize,
    versioned: bool,
) -> Option<(String, usize)> {
    let Input {
        path,
        head,
        tail,
        size,
        blake3,
        version_line,
    } = input;
    let shown = super::quote_stored(path);
    let version_line = super::one_line(version_line);
    let suffix = if versioned {
        format!("; {version_line}")
    } else {
        String::new()
    };
    let head = &head[..head.len().min(OUTLINE_MAX)];
    let partial = (head.len() as u64) < size;
    if super::is_binary(head, !partial) {
        let h = format!("{shown}: binary, {size} bytes, blake3 {blake3}{suffix}\n");
        return (h.len() <= cap).then_some((h, 0));
    }
    let text = match std::str::from_utf8(head) {
        Ok(t) => std::borrow::Cow::Borrowed(t),
        // A character cut by the end of what was read.
        Err(e) if partial && e.error_len().is_none() => std::borrow::Cow::Borrowed(
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default(),
        ),
        // Not UTF-8 past the bytes that decide it is text.
        Err(_) => String::from_utf8_lossy(head),
    };
    // Of a partial read, whole lines only (unless it holds no newline at all).
    let text: &str = match text.rfind('\n') {
        Some(i) if partial => &text[..=i],
        _ => &text,
    };
    let lines = text.bytes().filter(|&b| b == b'\n').count() + 1
        - usize::from(text.ends_with('\n') || text.is_empty());
    let header = |kind: &str| {
        let s = if lines == 1 { "" } else { "s" };
        if partial {
            format!(
                "{shown}: {kind}, {size} bytes, ~{} tokens, outlined from its first {lines} \
                 line{s} ({} bytes){suffix}\n",
                tokens(size as usize),
                text.len()
            )
        } else {
            format!(
                "{shown}: {kind}, {lines} line{s}, {size} bytes, ~{} tokens{suffix}\n",
                tokens(size as usize)
            )
        }
    };
    let lower = path.to_ascii_lowercase();
    let mut out = Fit::new(cap);
    if lower.ends_with(".md") || lower.ends_with(".markdown") {
        let (rows, total) = markdown(text, partial.then_some(size));
        if rows.is_empty() {
            out.header(&header("markdown, no headings"))?;
            first_and_last(text, tail, partial, &mut out);
        } else {
            out.header(&header("markdown"))?;
            let mut order: Vec<usize> = (0..rows.len()).collect();
            order.sort_by_key(|&i| (rows[i].0, i));
            let rows: Vec<String> = rows.into_iter().map(|r| r.1).collect();
            out.rows(
                Some(&format!(
                    "{:<11} {:>7} {:>7}  heading\n",
                    "lines", "bytes", "~tokens"
                )),
                &rows,
                &order,
                total,
                "headings",
            );
        }
    } else if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") {
        out.header(&header("jsonl"))?;
        let (summary, rows) = jsonl(text);
        if !out.line(&summary) {
            out.left += 1 + rows.len();
        } else {
            let order: Vec<usize> = (0..rows.len()).collect();
            out.rows(None, &rows, &order, rows.len(), "keys");
        }
    } else if lower.ends_with(".csv") || lower.ends_with(".tsv") {
        let kind = if lower.ends_with(".csv") {
            "csv"
        } else {
            "tsv"
        };
        out.header(&header(kind))?;
        csv(text, kind, partial, &mut out);
    } else if partial && lower.ends_with(".json") {
        out.header(&header("json"))?;
        if !out.line(&format!(
            "(keys not listed: outlines parse JSON of up to {} MiB)\n",
            OUTLINE_MAX >> 20
        )) {
            out.left += 1;
        }
    } else if let Some(serde_json::Value::Object(map)) = (!partial)
        .then(|| serde_json::from_str(text).ok())
        .flatten()
    {
        let keys = map.len();
        let s = if keys == 1 { "" } else { "s" };
        out.header(&header(&format!("json object of {keys} key{s}")))?;
        json(&map, fields, &mut out);
    } else {
        out.header(&header("text"))?;
        first_and_last(text, tail, partial, &mut out);
    }
    Some((out.text, out.left))
}

/// An outline being written within its cap.
struct Fit {
    text: String,
    cap: usize,
    /// Rows or lines left out.
    left: usize,
}

impl Fit {
    fn new(cap: usize) -> Fit {
        Fit {
            text: String::new(),
            cap,
            left: 0,
        }
    }

    /// The header; `None` if it does not fit.
    fn header(&mut self, h: &str) -> Option<()> {
        self.line(h).then_some(())
    }

    /// Adds `line` (newline included) if it fits.
    fn line(&mut self, line: &str) -> bool {
        let fits = self.text.len() + line.len() <= self.cap;
        if fits {
            self.text.push_str(line);
        }
        fits
    }

    fn room(&self) -> usize {
        self.cap - self.text.len()
    }

    /// As many of `rows` (each with its newline) as fit, chosen in `order`, written in
    /// their own order after `columns` (if any is written), then how many of `total`
    /// were left out (at most [`OUTLINE_ROWS`] are written).
    fn rows(
        &mut self,
        columns: Option<&str>,
        rows: &[String],
        order: &[usize],
        total: usize,
        what: &str,
    ) {
        if rows.is_empty() {
            return;
        }
        let more = |n: usize| {
            if n > 0 {
                format!("(… {n} more {what})\n")
            } else {
                String::new()
            }
        };
        let columns = columns.unwrap_or_default();
        let all: usize = rows.iter().map(String::len).sum();
        let mut budget = if total == rows.len()
            && rows.len() <= OUTLINE_ROWS
            && columns.len() + all <= self.room()
        {
            self.room() - columns.len()
        } else {
            self.room()
                .saturating_sub(columns.len() + more(total).len())
        };
        let mut chosen = vec![false; rows.len()];
        let mut n = 0;
        for &i in order {
            if n == OUTLINE_ROWS || rows[i].len() > budget {
                break;
            }
            budget -= rows[i].len();
            chosen[i] = true;
            n += 1;
        }
        if n > 0 {
            self.text.push_str(columns);
        }
        for (row, _) in rows.iter().zip(&chosen).filter(|(_, c)| **c) {
            self.text.push_str(row);
        }
        self.left += total - n;
        let left = more(total - n);
        self.line(&left);
    }
}

/// `s` cut to `max` characters, with `…`.
fn clip(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(max) {
        Some((cut, _)) if max > 0 => format!("{}…", &s[..cut]).into(),
        Some(_) => "…".into(),
        None => s.into(),
    }
}

/// `s` cut to at most [`LINE_SHOWN`] characters and `bytes` bytes, `…` included; `None`
/// if fewer than 8 characters of a longer `s` would be left.
fn clip_to(s: &str, bytes: usize) -> Option<std::borrow::Cow<'_, str>> {
    if s.len() <= bytes && s.chars().count() <= LINE_SHOWN {
        return Some(s.into());
    }
    let room = bytes.checked_sub('…'.len_utf8())?;
    let mut end = 0;
    for (n, (i, c)) in s.char_indices().enumerate() {
        if n == LINE_SHOWN - 1 || i + c.len_utf8() > room {
            break;
        }
        end = i + c.len_utf8();
    }
    (s[..end].chars().count() >= 8).then(|| format!("{}…", &s[..end]).into())
}

/// The first and the last line that are not blank, with their line numbers (`$` for the
/// last line of a file read in part), clipped to fit.
fn first_and_last(text: &str, tail: &[u8], partial: bool, out: &mut Fit) {
    let first = text
        .lines()
        .enumerate()
        .find(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| ((i + 1).to_string(), l));
    let tail_text = String::from_utf8_lossy(tail);
    let last = if partial {
        tail_text
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .last()
            .map(|l| ("$".to_string(), l))
    } else {
        let n = text.lines().count();
        text.lines()
            .rev()
            .enumerate()
            .find(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| ((n - i).to_string(), l))
    };
    let mut shown: Vec<(String, &str)> = first.into_iter().collect();
    if let Some(l) = last
        && shown.first().is_none_or(|f| f.0 != l.0)
    {
        shown.push(l);
    }
    if shown.is_empty() {
        return;
    }
    // Each line gets an equal share of the room, up to LINE_SHOWN characters.
    let share = out.room() / shown.len();
    for (n, line) in shown {
        let line = super::one_line(line);
        let prefix = format!("{n}: ");
        match clip_to(&line, share.saturating_sub(prefix.len() + 1)) {
            Some(l) => {
                out.line(&format!("{prefix}{l}\n"));
            }
            None => out.left += 1,
        }
    }
}

/// A CSV or TSV text: its header and how many rows follow (records: a quoted field may
/// hold newlines).
fn csv(text: &str, kind: &str, partial: bool, out: &mut Fit) {
    let mut records = 0usize;
    let mut quoted = false;
    let mut blank = true;
    let mut header_end = None;
    for (i, b) in text.bytes().enumerate() {
        match b {
            b'"' => {
                quoted = !quoted;
                blank = false;
            }
            b'\n' if !quoted => {
                if !blank {
                    if header_end.is_none() {
                        header_end = Some(i);
                    } else {
                        records += 1;
                    }
                }
                blank = true;
            }
            b'\r' => {}
            _ => blank = false,
        }
    }
    if !blank {
        if header_end.is_none() {
            header_end = Some(text.len());
        } else {
            records += 1;
        }
    }
    let Some(end) = header_end else {
        return;
    };
    let header = text[..end].trim_end_matches('\r');
    let sep = if kind == "csv" { ',' } else { '\t' };
    let columns = header.split(sep).count();
    let s = if records == 1 { "" } else { "s" };
    let rows = if partial {
        format!("{records} row{s} in the part read\n")
    } else {
        format!("{records} row{s}\n")
    };
    let prefix = format!("header ({columns} columns): ");
    let line = super::one_line(header);
    let room = out.room().saturating_sub(rows.len() + prefix.len() + 1);
    match clip_to(&line, room) {
        Some(h) => {
            out.line(&format!("{prefix}{h}\n"));
        }
        None => out.left += 1,
    }
    if !out.line(&rows) {
        out.left += 1;
    }
}

/// A JSON object's keys (in the order serde_json reads them: by name), grouped by the
/// provenance of each (`fields`), the groups in the order of their first key: one key a line with its value or its type
/// and size under `by WRITER, vN, step S, TIME:` when they all fit, else only the keys'
/// names after `by WRITER, vN, step S:`, as many as fit.
fn json(map: &serde_json::Map<String, serde_json::Value>, fields: &Fields, out: &mut Fit) {
    type Group<'m> = (
        Option<&'m KeyProvenance>,
        Vec<(&'m str, &'m serde_json::Value)>,
    );
    let mut groups: Vec<Group<'_>> = Vec::new();
    let mut at: HashMap<Option<(i64, &str)>, usize> = HashMap::new();
    let any = map.keys().any(|k| fields.contains_key(k));
    for (k, v) in map {
        let prov = fields.get(k);
        let i = *at
            .entry(prov.map(|p| (p.version, p.writer.as_str())))
            .or_insert_with(|| {
                groups.push((prov, Vec::new()));
                groups.len() - 1
            });
        groups[i].1.push((k, v));
    }
    let label = |prov: Option<&KeyProvenance>, time: bool| match prov {
        Some(p) => {
            let step = p.step.map(|s| format!(", step {s}")).unwrap_or_default();
            let when = if time {
                format!(", {}", super::manifest::utc(p.time_ns))
            } else {
                String::new()
            };
            format!(
                "by {}, v{}{step}{when}:",
                super::quote_path(&p.writer),
                p.version
            )
        }
        None if any => "no provenance recorded:".to_string(),
        None => String::new(),
    };
    // One key a line, with its value.
    let mut full = String::new();
    for (prov, keys) in &groups {
        let indent = if any {
            let _ = writeln!(full, "{}", label(*prov, true));
            "  "
        } else {
            ""
        };
        for (k, v) in keys {
            let _ = writeln!(full, "{indent}{}", describe(k, v));
        }
    }
    if map.len() <= OUTLINE_ROWS && out.line(&full) {
        return;
    }
    // Only the names, as many as fit.
    let total = map.len();
    let more = |n: usize| format!("(… {n} more keys)\n");
    let mut listed = 0;
    'groups: for (prov, keys) in &groups {
        let l = label(*prov, false);
        let mut line = String::new();
        for (k, _) in keys {
            let name = super::quote_path(k);
            let add = if line.is_empty() {
                if l.is_empty() {
                    name.len() + 1
                } else {
                    l.len() + 1 + name.len() + 1
                }
            } else {
                2 + name.len()
            };
            let reserve = if listed + 1 < total {
                more(total).len()
            } else {
                0
            };
            if listed == OUTLINE_ROWS || line.len() + add + reserve > out.room() {
                if !line.is_empty() {
                    line.push('\n');
                    out.line(&line);
                }
                break 'groups;
            }
            if line.is_empty() {
                if !l.is_empty() {
                    line.push_str(&l);
                    line.push(' ');
                }
            } else {
                line.push_str(", ");
            }
            line.push_str(&name);
            listed += 1;
        }
        line.push('\n');
        out.line(&line);
    }
    if listed < total {
        out.left += total - listed;
        out.line(&more(total - listed));
    }
}

/// `key = value` for a short scalar, else `key (type, size)`.
fn describe(k: &str, v: &serde_json::Value) -> String {
    use serde_json::Value;
    let key = super::quote_path(k);
    let compact = serde_json::to_string(v).unwrap_or_default();
    let scalar = !matches!(v, Value::Array(_) | Value::Object(_));
    if scalar && compact.chars().count() <= SCALAR_SHOWN {
        return format!("{key} = {}", super::one_line(&compact));
    }
    let bytes = compact.len();
    match v {
        Value::Array(a) => format!("{key} (array of {}, {bytes} bytes)", a.len()),
        Value::Object(o) => {
            let s = if o.len() == 1 { "" } else { "s" };
            format!("{key} (object of {} key{s}, {bytes} bytes)", o.len())
        }
        Value::String(_) => format!("{key} (string, {bytes} bytes)"),
        _ => format!("{key} ({}, {bytes} bytes)", type_name(v)),
    }
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

/// Markdown is parsed in pieces of about this many bytes (16 KiB), cut at blank lines
/// outside code fences, HTML blocks and front matter ([`pieces`]): a Markdown parser's tree
/// costs many times the text it holds (up to ~150 times, for a paragraph of one-letter
/// lines), so a piece at a time keeps an outline's memory bounded.
const PIECE: usize = 16 << 10;

/// A piece with no such blank line is cut at a line boundary once it reaches this many
/// bytes (32 KiB), and a code fence, HTML block or front matter open there is skipped to
/// its end (it holds no heading); of a longer line, only the first 32 KiB are parsed.
/// The parse of a piece this long costs up to 150 times its bytes (a paragraph of
/// one-letter lines): under 5 MiB.
const PIECE_MAX: usize = 32 << 10;

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

/// A heading of a Markdown text, as [`headings`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Heading {
    /// Its level, 1 to 6.
    level: usize,
    /// Its 1-based line.
    line: usize,
    /// The byte offset of that line's start.
    start: usize,
    /// Its title (at most 4 × [`TITLE_MAX`] bytes of it), when it was wanted.
    title: Option<String>,
}

/// Calls `visit` with each heading of a Markdown text in order, parsed as CommonMark
/// (with YAML front matter) in [`pieces`]. `want(level)` is called once per heading, in
/// order, and says whether its title is kept. Memory: one piece's parse, whatever the
/// number of headings or lines (line numbers are counted as the parse goes).
fn headings(
    text: &str,
    piece: usize,
    piece_max: usize,
    want: &mut dyn FnMut(usize) -> bool,
    visit: &mut dyn FnMut(Heading),
) {
    // The line counted up to a byte offset (headings come in the text's order).
    let (mut at_line, mut at) = (1usize, 0usize);
    let mut current: Option<Heading> = None;
    for range in pieces(text, piece, piece_max) {
        // Front matter only opens a document.
        let opts = if range.start == 0 {
            Options::ENABLE_YAML_STYLE_METADATA_BLOCKS | Options::ENABLE_TABLES
        } else {
            Options::ENABLE_TABLES
        };
        let base = range.start;
        for (event, span) in Parser::new_ext(&text[range], opts).into_offset_iter() {
            match event {
                Event::Start(Tag::Heading { level, .. }) => {
                    let offset = base + span.start;
                    at_line += text.as_bytes()[at..offset]
                        .iter()
                        .filter(|&&b| b == b'\n')
                        .count();
                    at = offset;
                    let level = level as usize;
                    current = Some(Heading {
                        level,
                        line: at_line,
                        start: text[..offset].rfind('\n').map_or(0, |i| i + 1),
                        title: want(level).then(String::new),
                    });
                }
                Event::End(TagEnd::Heading(_)) => {
                    if let Some(h) = current.take() {
                        visit(h);
                    }
                }
                Event::Text(t) | Event::Code(t) => {
                    if let Some(title) = current.as_mut().and_then(|h| h.title.as_mut())
                        && title.len() < 4 * TITLE_MAX
                    {
                        title.push_str(&t);
                    }
                }
                _ => {}
            }
        }
    }
}

/// A section of a Markdown text: a wanted heading, and the line and byte offset of the
/// next heading of the same or a higher level (where the section ends), if there is one.
struct Section {
    heading: Heading,
    next: Option<(usize, usize)>,
}

/// The sections of the headings `want(level)` asks for (called once per heading, in
/// order), in the text's order. Memory: the sections asked for, and one piece's parse.
fn sections(text: &str, want: &mut dyn FnMut(usize) -> bool) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    // The sections still open, their levels increasing (so at most 6).
    let mut open: Vec<usize> = Vec::new();
    headings(text, PIECE, PIECE_MAX, want, &mut |h| {
        while let Some(&i) = open.last()
            && out[i].heading.level >= h.level
        {
            out[i].next = Some((h.line, h.start));
            open.pop();
        }
        if h.title.is_some() {
            open.push(out.len());
            out.push(Section {
                heading: h,
                next: None,
            });
        }
    });
    out
}

/// The rows of the headings of `text` (with their sections), at most [`OUTLINE_ROWS`]
/// of them (the highest levels first), in the text's order with the level of each, and
/// how many headings there are. `Some(size)`: `text` is only the start of a file of
/// `size` bytes, so a section that runs to its end runs to the end of the file as far as
/// the outline knows: `A-$` (sed's last line), bytes to the end of the file.
///
/// Memory: the rows, whatever the number of headings (a text of a million of them costs
/// no more than one of a thousand): the first parse counts the headings of each level
/// (and keeps the first [`OUTLINE_ROWS`]); with more than that, a second parse keeps
/// those of the highest levels.
fn markdown(text: &str, partial: Option<u64>) -> (Vec<(usize, String)>, usize) {
    // Lines of the text; a trailing newline does not start another line.
    let last_line =
        (text.bytes().filter(|&b| b == b'\n').count() + usize::from(!text.ends_with('\n'))).max(1);
    let (mut per_level, mut total) = ([0usize; 7], 0usize);
    let mut sections = sections(text, &mut |level| {
        per_level[level] += 1;
        total += 1;
        total <= OUTLINE_ROWS
    });
    if total > OUTLINE_ROWS {
        // Every heading of the levels above `cut`, and the first `take` of level `cut`.
        let (mut cut, mut take, mut room) = (7, 0, OUTLINE_ROWS);
        for (level, &n) in per_level.iter().enumerate().skip(1) {
            if n > room {
                (cut, take) = (level, room);
                break;
            }
            room -= n;
        }
        let mut of_cut = 0;
        sections = self::sections(text, &mut |level| {
            of_cut += usize::from(level == cut);
            level < cut || (level == cut && of_cut <= take)
        });
    }
    let rows = sections
        .into_iter()
        .map(|Section { heading: h, next }| {
            let (range, bytes) = match (next, partial) {
                (Some((line, at)), _) => (format!("{}-{}", h.line, line - 1), at - h.start),
                (None, Some(size)) => (format!("{}-$", h.line), size as usize - h.start),
                (None, None) => (format!("{}-{last_line}", h.line), text.len() - h.start),
            };
            let title = h.title.unwrap_or_default();
            let title = clip(title.trim(), TITLE_MAX);
            let row = format!(
                "{:<11} {:>7} {:>7}  {}{} {}\n",
                range,
                bytes,
                tokens(bytes),
                "  ".repeat(h.level - 1),
                "#".repeat(h.level),
                super::one_line(&title)
            );
            (h.level, row)
        })
        .collect();
    (rows, total)
}

/// The summary line of a JSONL text and a row for each key.
fn jsonl(text: &str) -> (String, Vec<String>) {
    // Keys in the order first seen, with how many records have each.
    let mut keys: Vec<(String, usize)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
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
    let rows = keys
        .iter()
        .map(|(k, c)| format!("{:<24} in {c} records\n", super::quote_path(k)))
        .collect();
    (format!("{lines} records, {bad} not JSON\n"), rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outline of a whole file, whatever its size (no cap).
    fn ol(path: &str, content: &[u8], version_line: &str, fields: &Fields) -> String {
        let hash = blake3::hash(content).to_hex();
        let input = Input {
            path,
            head: content,
            tail: b"",
            size: content.len() as u64,
            blake3: &hash,
            version_line,
        };
        render(input, fields, usize::MAX, true).unwrap().0
    }

    /// The outline of a whole file, as served.
    fn served(path: &str, content: &[u8], fields: &Fields) -> Vec<u8> {
        let hash = blake3::hash(content).to_hex();
        let input = Input {
            path,
            head: content,
            tail: b"",
            size: content.len() as u64,
            blake3: &hash,
            version_line: "version 12 by agent",
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
    fn json_jsonl_csv_text_and_binary() {
        let fields = [(
            "total".to_string(),
            KeyProvenance {
                writer: "get_order".into(),
                version: 2,
                step: Some(3),
                time_ns: 1_796_062_811 * 1_000_000_000,
            },
        )]
        .into();
        let long = "x".repeat(300);
        let o = ol(
            "state.json",
            format!(
                r#"{{"order_id":"1042","total":18000,"ok":true,"notes":"{long}","items":[1,2]}}"#
            )
            .as_bytes(),
            "v",
            &fields,
        );
        assert_eq!(
            o.lines().skip(1).collect::<Vec<_>>(),
            [
                "no provenance recorded:",
                "  items (array of 2, 5 bytes)",
                "  notes (string, 302 bytes)",
                "  ok = true",
                "  order_id = \"1042\"",
                "by get_order, v2, step 3, 2026-11-30 18:20:11Z:",
                "  total = 18000",
            ],
            "{o}"
        );
        assert!(
            o.starts_with("state.json: json object of 5 keys, 1 line,"),
            "{o}"
        );
        let none = Default::default();
        let o = ol("s.json", br#"{"a":{"b":1}}"#, "v", &none);
        assert!(o.ends_with("\na (object of 1 key, 7 bytes)\n"), "{o}");
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
        let o = ol("notes.txt", b"\nfirst\nmiddle\n\nlast\n\n", "v", &none);
        assert_eq!(
            o,
            "notes.txt: text, 6 lines, 21 bytes, ~6 tokens; v\n2: first\n5: last\n"
        );
        let o = ol("plan.md", b"- one\n- two\n", "v", &none);
        assert!(
            o.starts_with("plan.md: markdown, no headings, 2 lines,")
                && o.ends_with("1: - one\n2: - two\n"),
            "{o}"
        );
        let o = ol(
            "data.csv",
            b"id,name,note\n1,a,\"two\nlines\"\n2,b,x\n\n",
            "v",
            &none,
        );
        assert!(
            o.ends_with("\nheader (3 columns): id,name,note\n2 rows\n"),
            "{o}"
        );
        let o = ol("t.tsv", b"a\tb\n1\t2\n", "v", &none);
        assert!(
            o.ends_with("header (2 columns): a\tb\n1 row\n")
                || o.contains("header (2 columns): a\\tb\n1 row\n"),
            "{o}"
        );
        let o = ol("x.bin", &[0, 159, 146, 150], "v", &none);
        assert!(o.starts_with("x.bin: binary, 4 bytes, blake3 "), "{o}");
    }

    /// An outline is never larger than its file, and at most 5% of it past 4 KiB.
    #[test]
    fn outlines_are_smaller_than_their_files() {
        let none: Fields = Default::default();
        let check = |path: &str, content: &[u8], fields: &Fields| {
            let o = served(path, content, fields);
            assert!(
                o.len() <= content.len(),
                "{path}: {} bytes for {}:\n{}",
                o.len(),
                content.len(),
                String::from_utf8_lossy(&o)
            );
            if content.len() > 4096 {
                assert!(
                    o.len() * 20 <= content.len(),
                    "{path}: {} bytes for {}:\n{}",
                    o.len(),
                    content.len(),
                    String::from_utf8_lossy(&o)
                );
            }
            o
        };
        // A 20-key state, each key with its own provenance.
        let state: String = format!(
            "{{{}}}",
            (0..20)
                .map(|i| format!("\"key_{i}\": \"value {i}\""))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let fields: Fields = (0..20)
            .map(|i| {
                (
                    format!("key_{i}"),
                    KeyProvenance {
                        writer: format!("writer{}", i % 3),
                        version: i % 3 + 2,
                        step: None,
                        time_ns: 0,
                    },
                )
            })
            .collect();
        let o = String::from_utf8(check("state.json", state.as_bytes(), &fields)).unwrap();
        // Too small for the values: every key's name under its provenance.
        assert!(
            o.contains("\nby writer1, v3: key_1, key_10, key_13, "),
            "{o}"
        );
        assert_eq!(o.matches("key_").count(), 20, "{o}");
        // Pretty-printed, with a long note, the values fit.
        let mut value: serde_json::Value = serde_json::from_str(&state).unwrap();
        value["notes"] = "n".repeat(400).into();
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        let o = String::from_utf8(check("state.json", pretty.as_bytes(), &fields)).unwrap();
        assert!(o.contains("\n  key_1 = \"value 1\"\n"), "{o}");
        assert!(
            o.contains("\nno provenance recorded:\n  notes (string, 402 bytes)\n"),
            "{o}"
        );
        let mut sizes = vec![0, 1, 3, 40, 300, 4096, 4097, 10_000, 200_000];
        sizes.dedup();
        for size in sizes {
            let mut md = String::new();
            let mut i = 0;
            while md.len() < size {
                md.push_str(&format!("# Part {i}\n## Section {i}\n- item {i}\n\n"));
                i += 1;
            }
            md.truncate(size);
            check("plan.md", md.as_bytes(), &none);
            let list: String = (0..size)
                .map(|i| format!("- finding {i}\n"))
                .collect::<String>();
            let list = &list[..size.min(list.len())];
            let o = check("findings.md", list.as_bytes(), &none);
            if size > 4096 {
                let o = String::from_utf8_lossy(&o).into_owned();
                assert!(
                    o.contains("no headings") && o.contains("1: - finding 0"),
                    "{o}"
                );
            }
            let csv: String = std::iter::once("id,amount,currency\n".to_string())
                .chain((0..size).map(|i| format!("{i},{},EUR\n", i * 7)))
                .collect::<String>();
            let o = check("data.csv", &csv.as_bytes()[..size.min(csv.len())], &none);
            if size > 4096 {
                let o = String::from_utf8_lossy(&o).into_owned();
                assert!(o.contains("header (3 columns): id,amount,currency"), "{o}");
            }
            let json: String = format!(
                "{{{}}}",
                (0..size / 20 + 1)
                    .map(|i| format!("\"k{i}\": {i}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            check("big.json", json.as_bytes(), &none);
            check("notes.txt", &list.as_bytes()[..size.min(list.len())], &none);
            check("x.bin", &vec![0u8; size], &none);
        }
        // A file too small for an outline is its own.
        assert_eq!(served("state.json", b"{}\n", &none), b"{}\n");
        assert_eq!(served("plan.md", b"", &none), b"");
        let plan = b"# Plan: refund for ticket T-881\n## Goal\nDecide whether order 1042 \
                     was charged twice.\n## Steps\n1. Read the ticket.\n2. Compare.\n";
        assert_eq!(served("plan.md", plan, &none), plan);
    }

    /// An outline's memory does not grow with the number of headings or lines it reads:
    /// [`OUTLINE_MAX`] bytes of headings only (262,144 of them), or of a paragraph of
    /// one-letter lines, cost one piece's parse tree (up to 150 bytes a byte of text,
    /// for at most [`PIECE_MAX`] bytes: under 5 MiB) and little more: under 6 MiB.
    /// (Keeping every heading and the start of every line cost 14 MiB, and pieces of up
    /// to 64 KiB 9.4 MiB.)
    #[test]
    fn an_outline_costs_memory_bounded_by_what_it_reads() {
        for (name, unit) in [("heads.md", "# h\n"), ("para.md", "a\n")] {
            let head = unit.repeat(OUTLINE_MAX / unit.len());
            let input = Input {
                path: name,
                head: head.as_bytes(),
                tail: b"",
                size: 4 * OUTLINE_MAX as u64,
                blake3: "ab",
                version_line: "v",
            };
            let (o, peak) = crate::test_alloc::peak_during(|| outline(input, &Fields::new()));
            assert!(
                peak < 6 << 20,
                "{name}: {peak} bytes at the peak for an outline of {} bytes",
                o.len()
            );
            if name == "heads.md" {
                let o = String::from_utf8(o).unwrap();
                assert!(o.ends_with("(… 261144 more headings)\n"), "{o}");
            }
        }
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
            tail: b"",
            size,
            blake3: "ab",
            version_line: "v",
        };
        let o = String::from_utf8(outline(input, &none)).unwrap();
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
        // Plain text: the last line from the file's end (`$`).
        let input = Input {
            path: "big.log",
            tail: b"cut line\nnext to last\nthe end\n",
            ..input
        };
        let o = String::from_utf8(outline(input, &none)).unwrap();
        assert!(o.ends_with("\n1: # Top\n$: the end\n"), "{o}");
        // A large JSON file: no parse, no keys; a large binary file: the recorded hash.
        let input = Input {
            path: "big.json",
            head: b"{\"a\": [1, 2,",
            ..input
        };
        assert!(
            String::from_utf8(outline(input, &none))
                .unwrap()
                .contains("(keys not listed: outlines parse JSON of up to 1 MiB)")
        );
        let input = Input {
            path: "big.bin",
            head: &[0, 1, 2],
            ..input
        };
        assert_eq!(
            outline(input, &none),
            format!("big.bin: binary, {size} bytes, blake3 ab; v\n").into_bytes()
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
        let whole = all_headings(text, usize::MAX, usize::MAX);
        let titles: Vec<&str> = whole
            .iter()
            .map(|h| h.title.as_deref().unwrap().trim())
            .collect();
        assert_eq!(
            titles,
            ["Plan", "Goal", "Setext", "quoted", "in the item", "Last"],
            "{whole:?}"
        );
        assert!(pieces(text, 1, usize::MAX).len() > 10);
        assert_eq!(all_headings(text, 1, usize::MAX), whole);
        // A line longer than a piece is cut short.
        let long = format!("# {}\n## B\n", "t".repeat(100));
        assert_eq!(pieces(&long, 1, 64), [0..64, 103..108]);
        // Cut by force inside a fence: its lines are left out, never read as headings.
        let fenced = format!("# A\n```\n{}```\n# B\n", "# no\n".repeat(100));
        let found: Vec<_> = all_headings(&fenced, 1, 64)
            .into_iter()
            .map(|h| (h.level, h.line, h.start, h.title.unwrap()))
            .collect();
        assert_eq!(
            found,
            [
                (1, 1, 0, "A".into()),
                (1, 104, fenced.len() - 4, "B".into())
            ]
        );
    }

    /// Every heading of `text`, its title kept, parsed in pieces of `piece`..`piece_max`.
    fn all_headings(text: &str, piece: usize, piece_max: usize) -> Vec<Heading> {
        let mut out = Vec::new();
        headings(text, piece, piece_max, &mut |_| true, &mut |h| out.push(h));
        out
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
        // The highest levels first: the first 1,000 top-level headings.
        assert_eq!(rows[0].split_whitespace().next(), Some("1-3"));
        assert_eq!(rows[1].split_whitespace().next(), Some("4-6"));
        assert!(rows[999].starts_with("2998-3000 "), "{}", rows[999]);
        assert_eq!(rows[1000], "(… 2000 more headings)");
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
        // More keys than an outline lists: their names only.
        assert_eq!(o.lines().count(), 3, "{}", &o[..200]);
        assert!(o.contains("\nk0, k1, k10, k100, "), "{}", &o[..200]);
        assert!(
            o.ends_with("(… 200 more keys)\n"),
            "{}",
            &o[o.len() - 100..]
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
            "\"a\\nb.json\": json object of 1 key, 1 line, 32 bytes, ~8 tokens; version 1 by w\\nx\n\
             \"k\\nfake string 1  v1 root\" = 1\n"
        );
    }
}
