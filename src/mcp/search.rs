//! `search` (issue 33 item 4): a literal text or a regular expression over the live
//! files, as `grep -rn` on the mount would find it: each match's path, line number and
//! line. Files are read through the same core calls a process on the mount makes (so the
//! caller's file modes apply, and the reads are recorded as a `grep -r` on the mount's
//! are). A pattern that requires a literal of 3 characters or more asks the text index
//! first ([`Fs::text_candidates`]) and reads only the files it names; any other pattern
//! reads every file.

use crate::error::{Error, Result};
use crate::fs::history_index;
use crate::fs::{Ctx, Fs};
use std::collections::HashMap;

use super::tools;

/// Most bytes of a line a match shows.
pub const LINE_MAX: usize = 500;

/// What to search for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The text (a regular expression when `regex`).
    pub pattern: String,
    /// `pattern` is a regular expression (the `regex` crate's syntax).
    pub regex: bool,
    /// Letters match in either case.
    pub ignore_case: bool,
    /// Only files whose path from the root matches this glob.
    pub path: Option<String>,
    /// Most matches returned.
    pub limit: usize,
    /// Search every version of the live files, not only the current ones: each matching
    /// line once, at the first version that held it ([`search`]).
    pub history: bool,
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Match {
    /// The file's path from the root.
    pub path: String,
    /// The line's number, from 1.
    pub line: u64,
    /// The line, at most [`LINE_MAX`] bytes of it (cut at a character boundary).
    pub text: String,
    /// With `history`: the first version whose bytes held this line (its number), its
    /// writer and its time (ns since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_ns: Option<i64>,
}

/// The matches, in path order then line order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Found {
    /// At most the query's `limit`.
    pub matches: Vec<Match>,
    /// More lines matched than were returned.
    pub truncated: bool,
    /// Files read.
    pub files_searched: u64,
}

impl Found {
    /// `grep -n`'s lines: `PATH:LINE:TEXT`, and a last line when cut.
    pub fn render(&self) -> String {
        if self.matches.is_empty() {
            return format!("no match ({} files searched)", self.files_searched);
        }
        let mut out: Vec<String> = self
            .matches
            .iter()
            .map(|m| match (m.version, &m.writer, m.time_ns) {
                (Some(v), Some(w), Some(t)) => format!(
                    "{}@v{v}:{}:{}  [{w} {}]",
                    m.path,
                    m.line,
                    m.text,
                    crate::cli::time::utc(t)
                ),
                _ => format!("{}:{}:{}", m.path, m.line, m.text),
            })
            .collect();
        if self.truncated {
            out.push(format!(
                "[more than {} matches: narrow the pattern or the path]",
                self.matches.len()
            ));
        }
        out.join("\n")
    }
}

/// Runs `q` over the files the caller of `ctx` may read (directories it may not read and
/// search are passed over, as `grep -r` passes them with an error). A file holding a NUL
/// in its first 8 KiB is binary and not searched; a file over [`tools::SCAN_MAX`] is not
/// searched either. `EINVAL` for a bad pattern or glob.
pub fn search(fs: &Fs, q: &Query, ctx: Ctx) -> Result<Found> {
    let source = if q.regex {
        q.pattern.clone()
    } else {
        regex::escape(&q.pattern)
    };
    if q.pattern.is_empty() {
        return Err(Error::new(
            libc::EINVAL,
            "an empty pattern matches every line",
        ));
    }
    let re = regex::bytes::RegexBuilder::new(&source)
        .case_insensitive(q.ignore_case)
        .multi_line(true)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| {
            let shown: String = q.pattern.chars().take(80).collect();
            let more = if shown.len() < q.pattern.len() {
                "..."
            } else {
                ""
            };
            let e = e.to_string();
            let e: String = e.chars().take(400).collect();
            Error::new(libc::EINVAL, format!("pattern {shown:?}{more}: {e}"))
        })?;
    let literals = if q.regex {
        required_literals(&q.pattern)
    } else {
        Some(vec![q.pattern.clone()])
    }
    .filter(|l| l.iter().all(|l| indexable(l, q.ignore_case)));
    if q.history {
        return search_history(fs, q, &re, literals.as_deref(), ctx);
    }
    let candidates = match literals {
        Some(l) => fs.text_candidates(&l, q.ignore_case, tools::SCAN_MAX, ctx)?,
        None => None,
    };
    let files = match candidates {
        // The index names the files that may match; each is checked as the walk would
        // have reached it (every directory on the way readable and searchable by the
        // caller) and against the glob.
        Some(candidates) => {
            let matcher = q.path.as_deref().map(tools::path_glob).transpose()?;
            candidates
                .into_iter()
                .map(|(_, p)| p)
                .filter(|p| matcher.as_ref().is_none_or(|m| m.is_match(p)))
                .map(|p| (p, true))
                .collect()
        }
        None => walked(fs, q, ctx)?
            .into_iter()
            .map(|p| (p, false))
            .collect::<Vec<_>>(),
    };
    let mut found = Found {
        matches: Vec::new(),
        truncated: false,
        files_searched: 0,
    };
    for (p, check) in files {
        if check && !tools::walkable(fs, &p, ctx) {
            continue;
        }
        let Ok(bytes) = tools::read_all(fs, &p, ctx) else {
            continue;
        };
        found.files_searched += 1;
        if bytes[..bytes.len().min(8192)].contains(&0) {
            continue;
        }
        let full = !match_lines(&re, &bytes, 1, |line, text| {
            if found.matches.len() == q.limit {
                return false;
            }
            found.matches.push(Match {
                path: p.clone(),
                line,
                text,
                version: None,
                writer: None,
                time_ns: None,
            });
            true
        });
        if full {
            found.truncated = true;
            break;
        }
    }
    Ok(found)
}

/// Calls `each` with the number and text (at most [`LINE_MAX`] bytes, cut at a character
/// boundary) of each line of `bytes` that `re` matches, once a line; the first line of
/// `bytes` is number `first`. Stops when `each` returns false, and then returns false.
fn match_lines(
    re: &regex::bytes::Regex,
    bytes: &[u8],
    first: u64,
    mut each: impl FnMut(u64, String) -> bool,
) -> bool {
    let mut line_no = first;
    let mut at = 0usize;
    for m in re.find_iter(bytes) {
        // Count the lines up to this match, then take its whole line once.
        let start = bytes[..m.start()]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        if start < at {
            continue;
        }
        line_no += bytes[at..start].iter().filter(|&&b| b == b'\n').count() as u64;
        let end = bytes[m.start()..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| m.start() + i);
        let mut cut = end.min(start + LINE_MAX);
        while cut > start && cut < end && (bytes[cut] & 0xC0) == 0x80 {
            cut -= 1;
        }
        if !each(
            line_no,
            String::from_utf8_lossy(&bytes[start..cut]).into_owned(),
        ) {
            return false;
        }
        at = (end + 1).min(bytes.len());
        line_no += 1;
    }
    true
}

/// The files [`tools::each_file`]'s walk reaches for the caller of `ctx` under `q.path`,
/// sorted.
fn walked(fs: &Fs, q: &Query, ctx: Ctx) -> Result<Vec<String>> {
    let mut files = Vec::new();
    tools::each_file(fs, q.path.as_deref(), ctx, |p| {
        files.push(p);
        true
    })?;
    files.sort();
    Ok(files)
}

/// `search` with `history`: every version of each live file the caller may read (the
/// walk of [`tools::each_file`]), in path order then version order, each version the
/// caller may read ([`Fs::may_read_version`]: the mode of the inode that carried it);
/// each matching line once per file, at the first version that held it (as `git log -S`
/// finds where a text came in). A version appended to the one before it (the same
/// stream, longer) is searched only in its new bytes, from the last line it continues
/// ([`history_index::part_read`]). With literals the history index can answer for
/// ([`Fs::history_candidates`]), only the files and versions it names are read: a
/// version it does not name, read from where the index read it, holds no match.
fn search_history(
    fs: &Fs,
    q: &Query,
    re: &regex::bytes::Regex,
    literals: Option<&[String]>,
    ctx: Ctx,
) -> Result<Found> {
    let candidates = match literals {
        Some(l) => fs.history_candidates(l, q.ignore_case, tools::SCAN_MAX, ctx)?,
        None => None,
    };
    let files: Vec<(String, bool)> = match &candidates {
        Some(c) => {
            let matcher = q.path.as_deref().map(tools::path_glob).transpose()?;
            c.files
                .iter()
                .filter(|(_, p, _)| matcher.as_ref().is_none_or(|m| m.is_match(p)))
                .map(|(_, p, _)| (p.clone(), true))
                .collect()
        }
        None => walked(fs, q, ctx)?
            .into_iter()
            .map(|p| (p, false))
            .collect(),
    };
    let mut found = Found {
        matches: Vec::new(),
        truncated: false,
        files_searched: 0,
    };
    'files: for (p, check) in files {
        if check && !tools::walkable(fs, &p, ctx) {
            continue;
        }
        let Ok(file_id) = tools::file_id(fs, &p, ctx) else {
            continue;
        };
        found.files_searched += 1;
        // What the index read of each version, when it answers.
        let indexed: HashMap<i64, history_index::HistoryRow> = match &candidates {
            Some(_) => fs
                .store()
                .history_index_rows(file_id)?
                .into_iter()
                .map(|r| (r.version_id, r))
                .collect(),
            None => HashMap::new(),
        };
        let mut seen: std::collections::HashSet<String> = Default::default();
        let mut prev: Option<history_index::Tail> = None;
        for v in fs.store().versions(file_id)? {
            if v.content.len > tools::SCAN_MAX
                || fs
                    .may_read_version(v.id, ctx, &format!("{p}@{}", v.number))
                    .is_err()
            {
                prev = None;
                continue;
            }
            let (from, first_line) = history_index::part_read(prev, v.content);
            if let (Some(c), Some(row)) = (&candidates, indexed.get(&v.id))
                && !c.versions.contains(&v.id)
                && c.indexed_upto
                    .get(&file_id)
                    .is_some_and(|&upto| v.id <= upto)
                && (row.from_off, row.first_line) == (from, first_line)
            {
                // Read from here, this version holds no match: what it leaves is known.
                prev = row.tail;
                continue;
            }
            let mut bytes = vec![0u8; (v.content.len - from) as usize];
            let got = fs.store().read(v.content, from, &mut bytes)?;
            bytes.truncate(got);
            if from == 0 && bytes[..bytes.len().min(8192)].contains(&0) {
                prev = None;
                continue;
            }
            prev = Some(history_index::tail_of(v.content, from, first_line, &bytes));
            let mut writer = None;
            let full = !match_lines(re, &bytes, first_line, |line, text| {
                if !seen.insert(text.clone()) {
                    return true;
                }
                if found.matches.len() == q.limit {
                    return false;
                }
                let w = writer.get_or_insert_with(|| {
                    fs.store()
                        .version_meta(v.id)
                        .map(|m| m.writer)
                        .unwrap_or_default()
                });
                found.matches.push(Match {
                    path: p.clone(),
                    line,
                    text,
                    version: Some(v.number),
                    writer: Some(w.clone()),
                    time_ns: Some(v.time_ns),
                });
                true
            });
            if full {
                found.truncated = true;
                break 'files;
            }
        }
    }
    Ok(found)
}

/// Literals one of which every match of the regular expression `pattern` begins with
/// (its prefixes, as `regex-syntax` extracts them); `None` when there is no such finite
/// set (a pattern that can begin anywhere with anything: `.*x`, `\w+`).
pub fn required_literals(pattern: &str) -> Option<Vec<String>> {
    use regex_syntax::hir::literal::{ExtractKind, Extractor};
    let hir = regex_syntax::ParserBuilder::new()
        .utf8(false)
        .multi_line(true)
        .build()
        .parse(pattern)
        .ok()?;
    let mut extractor = Extractor::new();
    extractor.kind(ExtractKind::Prefix);
    let seq = extractor.extract(&hir);
    let literals = seq.literals()?;
    if literals.is_empty() {
        return None;
    }
    literals
        .iter()
        .map(|l| String::from_utf8(l.as_bytes().to_vec()).ok())
        .collect()
}

/// Whether the index can be asked for `literal`: 3 characters or more (trigrams), no NUL
/// and no line break, and ASCII when case is ignored (the index folds case only as
/// simply as ASCII is sure to be folded alike by it and by the matcher).
fn indexable(literal: &str, ignore_case: bool) -> bool {
    literal.chars().count() >= 3
        && !literal.contains(['\0', '\n'])
        && (!ignore_case || literal.is_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lits(p: &str) -> Option<Vec<String>> {
        required_literals(p).map(|mut l| {
            l.sort();
            l
        })
    }

    #[test]
    fn a_pattern_that_begins_with_literals_asks_the_index_for_them() {
        assert_eq!(lits("needle-a[a-z]+"), Some(vec!["needle-a".into()]));
        assert_eq!(lits("^total: \\d+"), Some(vec!["total: ".into()]));
        assert_eq!(
            lits("(alpha|beta)x"),
            Some(vec!["alphax".into(), "betax".into()])
        );
        // Anything may come first: no literal every match begins with.
        assert_eq!(lits(".*needle"), None);
        assert_eq!(lits("\\w+needle"), None);
        assert_eq!(lits("("), None);
    }

    #[test]
    fn only_literals_the_index_can_answer_for_are_asked() {
        assert!(indexable("abc", false));
        assert!(!indexable("ab", false));
        assert!(indexable("été", false), "3 characters, 5 bytes");
        assert!(!indexable("été", true), "case folded beyond ASCII");
        assert!(!indexable("a\nbc", false));
        assert!(!indexable("a\0bc", false));
    }
}
