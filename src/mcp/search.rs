//! `search` (issue 33 item 4): a literal text or a regular expression over the live
//! files, as `grep -rn` on the mount would find it: each match's path, line number and
//! line. Files are read through the same core calls a process on the mount makes (so the
//! caller's file modes apply, and the reads are recorded as a `grep -r` on the mount's
//! are). Not indexed yet: the cost grows with the bytes of the live tree (issue notes).

use crate::error::{Error, Result};
use crate::fs::{Ctx, Fs};

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
            .map(|m| format!("{}:{}:{}", m.path, m.line, m.text))
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
        .map_err(|e| Error::new(libc::EINVAL, format!("pattern {:?}: {e}", q.pattern)))?;
    let mut files = Vec::new();
    tools::each_file(fs, q.path.as_deref(), ctx, |p| {
        files.push(p);
        true
    })?;
    files.sort();
    let mut found = Found {
        matches: Vec::new(),
        truncated: false,
        files_searched: 0,
    };
    'files: for p in files {
        let Ok(bytes) = tools::read_all(fs, &p, ctx) else {
            continue;
        };
        found.files_searched += 1;
        if bytes[..bytes.len().min(8192)].contains(&0) {
            continue;
        }
        let mut line_no = 1u64;
        let mut at = 0usize;
        for m in re.find_iter(&bytes) {
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
            if found.matches.len() == q.limit {
                found.truncated = true;
                break 'files;
            }
            let mut cut = end.min(start + LINE_MAX);
            while cut > start && cut < end && (bytes[cut] & 0xC0) == 0x80 {
                cut -= 1;
            }
            found.matches.push(Match {
                path: p.clone(),
                line: line_no,
                text: String::from_utf8_lossy(&bytes[start..cut]).into_owned(),
            });
            at = (end + 1).min(bytes.len());
            line_no += 1;
        }
    }
    Ok(found)
}
