//! `MANIFEST`: the small index an agent reads first (SPEC §7). Format, in this order:
//!
//! ```text
//! MANIFEST as of 2026-11-30 18:20:11Z: 4 files, 1,234 bytes, ~309 tokens
//! path                     bytes  ~tokens  ver  writer        age
//! plan.md                    345       87    3  agent          2m
//! notes/ (14 files)        5,678    1,420    -  tool           5s
//! who may write: anyone may write any file
//! refused (2 of 2): state.json by agent 12s ago: lost update: written from version 2, ...
//! restorable:
//!   notes/old.md deleted by agent 40s ago (1,204 B): .archive/notes/old.md
//!   plan.md shrunk by agent 9s ago; v3 (5,210 B): .history/plan.md/3
//! not listed: <file>.outline (what a file holds, by section); .history/<path>/<N> ...
//! ```
//!
//! - One line per live file: path, bytes, estimated tokens (bytes/4), current version
//!   number, its writer, and its age relative to the header's time (the last change, so the
//!   text stays the same until something changes).
//! - A directory holding more than [`FOLD`] files (at any depth) is folded into one line
//!   with its totals and its newest writer and age; the root lists at most [`ROOT_MAX`]
//!   files, the most recent first, and folds the rest into one line.
//! - Then who may write what, the latest refusals with their reasons, the latest
//!   deletions and commits that shrank a file by more than half, each with the path that
//!   gives the content back, and the views that resolve by name but are not listed.
//! - Paths and writer names that could break a row (a newline, a control character, a
//!   quote, a backslash, a leading or trailing space, a byte that is not UTF-8) are
//!   quoted as git does ([`super::quote_stored`], [`super::quote_path`]); reasons and
//!   rule lines have their control characters escaped ([`super::one_line_stored`],
//!   [`super::one_line`]): one row is always one file.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::outline::tokens;
use super::{one_line, one_line_stored, quote_path, quote_stored};

/// Files a directory may hold before it is folded into one line.
pub const FOLD: usize = 8;
/// Files listed at the root before the rest are folded.
pub const ROOT_MAX: usize = 40;
/// Refusals shown.
pub const REFUSALS_SHOWN: usize = 3;

/// One live file.
#[derive(Debug, Clone)]
pub struct FileEntry {
    /// Path from the root, no leading slash, as stored ([`crate::store::paths`]).
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Current version number.
    pub version: i64,
    /// Writer of the current version.
    pub writer: String,
    /// Commit time of the current version, ns.
    pub time_ns: i64,
}

/// One refused commit.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// One-line reason, starting with the path.
    pub reason: String,
    /// Writer refused.
    pub writer: String,
    /// When, ns.
    pub time_ns: i64,
}

/// Content a deletion or a shrinking commit dropped, and where to get it back.
#[derive(Debug, Clone)]
pub struct Restorable {
    /// Deleted (else: shrunk by more than half).
    pub deleted: bool,
    /// Path, as stored ([`crate::store::paths`]).
    pub path: String,
    /// Who did it.
    pub writer: String,
    /// When, ns.
    pub time_ns: i64,
    /// The version dropped.
    pub version: i64,
    /// Its size, bytes.
    pub bytes: u64,
}

/// Everything MANIFEST shows.
#[derive(Debug, Clone, Default)]
pub struct Input {
    /// The latest deletions and shrinking commits, newest first.
    pub restorable: Vec<Restorable>,
    /// Live files, any order.
    pub files: Vec<FileEntry>,
    /// The latest refusals, newest first, and how many there are in all.
    pub refusals: (Vec<Refusal>, u64),
    /// The latest gc and redact runs (reason, who, when), newest first, and how many
    /// there were in all.
    pub erasures: (Vec<Refusal>, u64),
    /// Who may write what, one line each.
    pub rules: Vec<String>,
    /// Time of the last change, ns: the header's time and the reference for ages.
    pub as_of_ns: i64,
}

/// `1,234`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `5s`, `3m`, `2h`, `4d`.
fn age(now_ns: i64, then_ns: i64) -> String {
    let s = ((now_ns - then_ns).max(0) / 1_000_000_000) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// `2026-11-30 18:20:11Z` for ns since the epoch (UTC; civil-from-days, H. Hinnant).
pub fn utc(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

struct Row {
    name: String,
    bytes: u64,
    version: String,
    writer: String,
    time_ns: i64,
}

/// Renders MANIFEST.
pub fn render(input: &Input) -> String {
    let files = &input.files;
    let total: u64 = files.iter().map(|f| f.bytes).sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "MANIFEST as of {}: {} files, {} bytes, ~{} tokens",
        utc(input.as_of_ns),
        thousands(files.len() as u64),
        thousands(total),
        thousands(tokens(total as usize) as u64)
    );
    // Files below each directory, to decide what folds.
    let mut below: BTreeMap<&str, usize> = BTreeMap::new();
    for f in files {
        let mut p = f.path.as_str();
        while let Some(i) = p.rfind('/') {
            p = &p[..i];
            *below.entry(p).or_default() += 1;
        }
    }
    let fold_of = |path: &str| -> Option<String> {
        let mut best = None;
        let mut end = 0;
        while let Some(i) = path[end..].find('/') {
            let dir = &path[..end + i];
            if below.get(dir).copied().unwrap_or(0) > FOLD {
                best = Some(dir.to_string());
                break;
            }
            end += i + 1;
        }
        best
    };
    let mut root: Vec<Row> = Vec::new();
    let mut folded: BTreeMap<String, (usize, Row)> = BTreeMap::new();
    for f in files {
        match fold_of(&f.path) {
            Some(dir) => {
                let e = folded.entry(dir.clone()).or_insert_with(|| {
                    (
                        0,
                        Row {
                            name: String::new(),
                            bytes: 0,
                            version: "-".into(),
                            writer: String::new(),
                            time_ns: i64::MIN,
                        },
                    )
                });
                e.0 += 1;
                e.1.bytes += f.bytes;
                if f.time_ns > e.1.time_ns {
                    e.1.time_ns = f.time_ns;
                    e.1.writer = quote_path(&f.writer).into_owned();
                }
            }
            None => root.push(Row {
                name: quote_stored(&f.path).into_owned(),
                bytes: f.bytes,
                version: f.version.to_string(),
                writer: quote_path(&f.writer).into_owned(),
                time_ns: f.time_ns,
            }),
        }
    }
    let mut rows: Vec<Row> = Vec::new();
    if root.len() > ROOT_MAX {
        root.sort_by(|a, b| b.time_ns.cmp(&a.time_ns).then(a.name.cmp(&b.name)));
        let rest = root.split_off(ROOT_MAX);
        let mut r = Row {
            name: format!("(… {} more files)", thousands(rest.len() as u64)),
            bytes: rest.iter().map(|r| r.bytes).sum(),
            version: "-".into(),
            writer: rest[0].writer.clone(),
            time_ns: rest[0].time_ns,
        };
        if r.writer.is_empty() {
            r.writer = "-".into();
        }
        root.sort_by(|a, b| a.name.cmp(&b.name));
        rows.extend(root);
        rows.push(r);
    } else {
        root.sort_by(|a, b| a.name.cmp(&b.name));
        rows.extend(root);
    }
    for (dir, (n, mut r)) in folded {
        r.name = format!("{}/ ({} files)", quote_stored(&dir), thousands(n as u64));
        rows.push(r);
    }
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    let width = rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 40);
    let _ = writeln!(
        out,
        "{:<width$} {:>9} {:>8} {:>4}  {:<12} age",
        "path", "bytes", "~tokens", "ver", "writer"
    );
    for r in &rows {
        let _ = writeln!(
            out,
            "{:<width$} {:>9} {:>8} {:>4}  {:<12} {}",
            r.name,
            thousands(r.bytes),
            thousands(tokens(r.bytes as usize) as u64),
            r.version,
            r.writer,
            age(input.as_of_ns, r.time_ns)
        );
    }
    for (i, rule) in input.rules.iter().enumerate() {
        let _ = writeln!(
            out,
            "{}{}",
            if i == 0 { "who may write: " } else { "  " },
            one_line(rule)
        );
    }
    for (title, (events, count)) in [
        ("refused", &input.refusals),
        ("history erased", &input.erasures),
    ] {
        if *count == 0 {
            continue;
        }
        let _ = writeln!(out, "{title} ({} of {count}):", events.len());
        for r in events {
            let _ = writeln!(
                out,
                "  {} ago, {}: {}",
                age(input.as_of_ns, r.time_ns),
                quote_path(&r.writer),
                one_line_stored(&r.reason)
            );
        }
    }
    if !input.restorable.is_empty() {
        out.push_str("restorable:\n");
        for r in &input.restorable {
            let ago = age(input.as_of_ns, r.time_ns);
            if r.deleted {
                let _ = writeln!(
                    out,
                    "  {} deleted by {} {ago} ago ({} B): {}",
                    quote_stored(&r.path),
                    quote_path(&r.writer),
                    thousands(r.bytes),
                    quote_stored(&format!(".archive/{}", r.path))
                );
            } else {
                let _ = writeln!(
                    out,
                    "  {} shrunk by {} {ago} ago; v{} ({} B): {}",
                    quote_stored(&r.path),
                    quote_path(&r.writer),
                    r.version,
                    thousands(r.bytes),
                    quote_stored(&format!(".history/{}/{}", r.path, r.version))
                );
            }
        }
    }
    out.push_str(
        "not listed: <file>.outline (what a file holds, by section); \
         .history/<path>/<N> (every version); .archive/<path> (deleted files)\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(path: &str, bytes: u64, t: i64) -> FileEntry {
        FileEntry {
            path: path.into(),
            bytes,
            version: 2,
            writer: "agent".into(),
            time_ns: t * 1_000_000_000,
        }
    }

    #[test]
    fn folds_large_directories_and_stays_small() {
        let mut files = vec![f("plan.md", 345, 100), f("state.json", 40, 90)];
        for i in 0..500 {
            files.push(f(&format!("notes/n{i}.md"), 100, i % 150));
        }
        files.push(f("a/b.txt", 3, 50));
        let m = render(&Input {
            restorable: vec![],
            files,
            refusals: (vec![], 0),
            erasures: (
                vec![Refusal {
                    reason: "gc (keep_last 1) by uid 0: forgot 3 versions and 10 bytes".into(),
                    writer: "human".into(),
                    time_ns: 0,
                }],
                1,
            ),
            rules: vec!["anyone may write any file".into()],
            as_of_ns: 160 * 1_000_000_000,
        });
        assert!(m.contains("notes/ (500 files)"), "{m}");
        assert!(
            m.contains("history erased (1 of 1):\n  2m ago, human: gc (keep_last 1)"),
            "{m}"
        );
        assert!(m.contains("a/b.txt"), "{m}");
        let plan: Vec<&str> = m
            .lines()
            .find(|l| l.starts_with("plan.md"))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(plan, ["plan.md", "345", "87", "2", "agent", "1m"], "{m}");
        assert!(tokens(m.len()) < 300, "{} tokens:\n{m}", tokens(m.len()));
        assert!(
            m.starts_with("MANIFEST as of 1970-01-01 00:02:40Z: 503 files,"),
            "{m}"
        );
    }

    #[test]
    fn a_name_cannot_forge_a_row() {
        let mut evil = f("a\nfake.md    999  9  1  root  0s", 5, 100);
        evil.writer = "w\nx".into();
        let m = render(&Input {
            restorable: vec![Restorable {
                deleted: true,
                path: "gone\nb.md".into(),
                writer: "agent".into(),
                time_ns: 100 * 1_000_000_000,
                version: 1,
                bytes: 3,
            }],
            files: vec![f("plan.md", 345, 100), evil],
            refusals: (
                vec![Refusal {
                    reason: "x\ny: refused".into(),
                    writer: "agent".into(),
                    time_ns: 0,
                }],
                1,
            ),
            erasures: (vec![], 0),
            rules: vec![],
            as_of_ns: 100 * 1_000_000_000,
        });
        assert_eq!(
            m.lines().filter(|l| l.contains("fake.md")).count(),
            1,
            "{m}"
        );
        let row = m.lines().find(|l| l.contains("fake.md")).unwrap();
        let rest = row
            .strip_prefix(r#""a\nfake.md    999  9  1  root  0s""#)
            .unwrap_or_else(|| panic!("{m}"));
        let rest: Vec<&str> = rest.split_whitespace().collect();
        assert_eq!(rest, ["5", "2", "2", r#""w\nx""#, "0s"], "{m}");
        assert!(
            m.contains(
                "  \"gone\\nb.md\" deleted by agent 0s ago (3 B): \".archive/gone\\nb.md\"\n"
            ),
            "{m}"
        );
        assert!(m.contains(": x\\ny: refused\n"), "{m}");
        assert!(
            !m.lines()
                .any(|l| l.starts_with("fake.md") || l.starts_with("b.md") || l.starts_with("y:")),
            "{m}"
        );
    }

    #[test]
    fn utc_formats_known_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc(1_796_061_415 * 1_000_000_000), "2026-11-30 17:56:55Z");
        assert_eq!(utc(951_782_400 * 1_000_000_000), "2000-02-29 00:00:00Z");
    }
}
