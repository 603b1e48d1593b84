//! `MANIFEST`: the small index an agent keeps in context (SPEC §7). Format, in this order:
//!
//! ```text
//! MANIFEST as of 2026-11-30 18:20:11Z: 4 files, 1,234 bytes, ~309 tokens
//! path                     bytes  ~tokens  ver  writer        age
//! plan.md                    345       87    3  agent          2m
//! notes/a.md               3,172      793    2  agent          5s  max_bytes: 3.1 KB of 4 KB
//! notes/ (13 more files)   5,678    1,420    -  tool           9s
//! logo.png                12,004   binary    1  agent          1h
//! who may write: anyone may write any file
//! refused (2 of 2):
//!   12s ago, agent: state.json: lost update: written from version 2, ...
//! restorable:
//!   notes/old.md deleted by agent 40s ago (1,204 B): .archive/notes/old.md
//!   plan.md shrunk by agent 9s ago; v3 (5,210 B): .history/plan.md/3
//! not listed: <file>.outline (what a file holds, by section); .history/<path>/<N> ...
//! ```
//!
//! - A header with the time of the last change and the totals (estimated tokens of text
//!   files only), how many temporaries were left out, how many files lie in directories
//!   the reader cannot list (`; 3 in directories you cannot list`: each reader is shown
//!   only what `ls` would show it, issue 31), and whether the table was folded.
//! - One row per live file: path, bytes, estimated tokens (bytes/4; `binary` for a binary
//!   file, [`super::is_binary`]), current version number, its writer, its age relative to
//!   the header's time (the last change, so the text stays the same until something
//!   changes), and, for a file under a `max_bytes` rule, its size against that cap.
//! - Temporaries (editor swap files, sed's and Python's temp files, SQLite journals:
//!   [`super::ephemeral`], and the rules' `ephemeral` globs) are not listed.
//! - The whole text has a budget of estimated tokens ([`DEFAULT_BUDGET_TOKENS`], set by
//!   `mount --manifest-tokens` or the rules' `manifest_tokens`). Every section but the
//!   file table is bounded on its own (three refusals, three erasures, three restorable
//!   items, their lines cut at [`LINE_MAX`] characters, the rules at a quarter of the
//!   budget);
//!   the table gets the rest. When every file does not fit as its own row, rows go, in
//!   this order, to the default layout's files, the newest files (up to half the
//!   table), a summary of the tree (below), then more of the newest files; every file
//!   not listed is counted in exactly one summary row:
//!   - `dir/ (N files)`: every file under `dir/`, at any depth (`N more files` when
//!     some of them have rows of their own);
//!   - `dir/* (N files)`: the files directly in `dir/`, when its subdirectories have
//!     rows of their own (`./*` at the root);
//!   - `dir/… (K more directories: N files)`: the subdirectories of `dir/` that did not
//!     fit (`./…` at the root).
//!
//!   The summary unfolds the tree from the root, breadth first, the most recently
//!   changed directories first, as long as the table fits.
//! - Then who may write what, the latest refusals with their reasons, the latest gc and
//!   redact runs, the latest deletions and commits that shrank a file by more than half
//!   (each with the path that gives the content back), and the views that resolve by
//!   name but are not listed.
//! - Paths and writer names that could break a row (a newline, a control character, a
//!   quote, a backslash, a leading or trailing space, a byte that is not UTF-8) are
//!   quoted as git does ([`super::quote_stored`], [`super::quote_path`]); reasons and
//!   rule lines have their control characters escaped ([`super::one_line_stored`],
//!   [`super::one_line`]): one row is always one file.

use std::borrow::Cow;
use std::fmt::Write;

use super::outline::tokens;
use super::{one_line, one_line_stored, quote_path, quote_stored};

/// MANIFEST's budget when none is configured: 2,000 estimated tokens (8,000 bytes).
pub const DEFAULT_BUDGET_TOKENS: usize = 2000;
/// The smallest budget a mount accepts (`--manifest-tokens`, `manifest_tokens`).
pub const MIN_BUDGET_TOKENS: usize = 100;
/// The largest budget a mount accepts.
pub const MAX_BUDGET_TOKENS: usize = 1_000_000;
/// Refusals (and gc or redact runs, and restorable items) shown.
pub const REFUSALS_SHOWN: usize = 3;
/// Most characters of one line of free text (a reason, a rule; a `restorable:` line,
/// which names a path twice, twice as many): enough for a name of 255 bytes quoted
/// (`\377` for each) and its reason. The rest is `…`.
pub const LINE_MAX: usize = 1100;
/// The width of the path column stops growing at this many characters.
const NAME_W: usize = 40;
/// Bytes a summary row's estimate allows beyond its text with all its files (see
/// [`Table::summary_tail`]).
const SUMMARY_SLACK: usize = 8;
/// The files of the default layout (SPEC §3), listed first whatever the budget.
pub const PINNED: &[&str] = &["plan.md", "findings.md", "state.json"];

/// One live file, by its whole path (see [`split`]).
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
    /// Binary content ([`super::is_binary`]): no token estimate.
    pub binary: bool,
}

/// A directory of the tree MANIFEST describes.
#[derive(Debug, Clone)]
pub struct Dir {
    /// Index of its parent in [`Input::dirs`] (the root, index 0, is its own parent);
    /// always lower than its own index.
    pub parent: usize,
    /// Its name, as stored ([`crate::store::paths`]); empty for the root.
    pub name: String,
}

/// A file's name: its bytes (shared with the inode), or their stored form
/// ([`crate::store::paths`]).
#[derive(Debug, Clone)]
pub enum Name {
    /// The name's bytes.
    Raw(std::sync::Arc<[u8]>),
    /// The name as stored.
    Stored(std::sync::Arc<str>),
}

impl Name {
    /// The name as stored.
    pub fn stored(&self) -> Cow<'_, str> {
        match self {
            Name::Raw(b) => crate::store::paths::encode(b),
            Name::Stored(s) => Cow::Borrowed(s),
        }
    }
}

/// A live file MANIFEST may list.
#[derive(Debug, Clone)]
pub struct File {
    /// Index of its directory in [`Input::dirs`].
    pub dir: usize,
    /// Its name (read only for the files that get a row of their own).
    pub name: Name,
    /// One of the default layout's files at the root ([`PINNED`]): always listed.
    pub pinned: bool,
    /// Size in bytes.
    pub bytes: u64,
    /// Current version number.
    pub version: i64,
    /// Writer of the current version.
    pub writer: std::sync::Arc<str>,
    /// Commit time of the current version, ns.
    pub time_ns: i64,
    /// Binary content: no token estimate.
    pub binary: bool,
    /// Its last read through the mount, if any (the `read` column, issue 13).
    pub read: Option<ReadRow>,
    /// The agent step of its current version's writer, if it had one (stale files).
    pub step: Option<i64>,
}

/// A file's last read, as the `read` column shows it (issue 13): the version read, by
/// which writer, when.
pub type ReadRow = crate::store::LastRead;

/// A file whose current version is this many agent steps older than the latest step is
/// listed as stale (issue 13).
pub const STALE_STEPS: i64 = 10;

/// Most stale files named; the rest are counted.
const STALE_SHOWN: usize = 5;

/// One refused commit.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Refusal {
    /// One-line reason, starting with the path.
    pub reason: String,
    /// Writer refused.
    pub writer: String,
    /// When, ns.
    pub time_ns: i64,
}

/// Content a deletion or a shrinking commit dropped, and where to get it back.
#[derive(Debug, Clone, serde::Serialize)]
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

/// The `max_bytes` cap of a path (its stored form), if a rule sets one.
pub type Caps<'a> = &'a dyn Fn(&str) -> Option<u64>;

/// Everything MANIFEST shows.
#[derive(Clone, Default)]
pub struct Input<'a> {
    /// The directories: the root first, every parent before its children.
    pub dirs: Vec<Dir>,
    /// The live files to list (temporaries already left out), any order.
    pub files: Vec<File>,
    /// How many live temporaries were left out.
    pub temporaries: usize,
    /// How many live files were left out because the reader cannot list a directory
    /// above them (issue 31): counted, never named.
    pub unlisted: usize,
    /// The latest deletions and shrinking commits, newest first.
    pub restorable: Vec<Restorable>,
    /// The latest refusals, newest first, and how many there are in all.
    pub refusals: (Vec<Refusal>, u64),
    /// The latest gc and redact runs (reason, who, when), newest first, and how many
    /// there were in all.
    pub erasures: (Vec<Refusal>, u64),
    /// The latest checkpoints (issue 14), newest first, and how many there are in all.
    pub checkpoints: (Vec<CheckpointLine>, u64),
    /// Who may write what, one line each.
    pub rules: Vec<String>,
    /// Time of the last change, ns: the header's time and the reference for ages.
    pub as_of_ns: i64,
    /// The budget in estimated tokens (0: [`DEFAULT_BUDGET_TOKENS`]).
    pub budget_tokens: usize,
    /// The `max_bytes` cap of a path, for the files listed.
    pub caps: Option<Caps<'a>>,
    /// The agent step of the latest caller that had one (`SCRATCHFS_STEP`), if any: files whose
    /// version is [`STALE_STEPS`] older are listed as stale.
    pub step_now: Option<i64>,
    /// What the pad holds against its quota (issue 36), when the rules set a quota or a
    /// retention limit: the header's `pad ...` part.
    pub pad: Option<Pad>,
}

/// The pad's usage as MANIFEST's header says it: `pad 12.3 MB of 50 MB, 1,204 versions
/// kept, 38 forgotten by policy, 12 of 100 files`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pad {
    /// Bytes of content stored (live, history, archive).
    pub bytes: u64,
    /// The quota's `bytes`, if any.
    pub quota_bytes: Option<u64>,
    /// Versions kept.
    pub versions: u64,
    /// Versions the policy forgot.
    pub forgotten: u64,
    /// Live files.
    pub files: u64,
    /// The quota's `files`, if any.
    pub quota_files: Option<u64>,
}

impl std::fmt::Display for Pad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pad {}", human_bytes(self.bytes))?;
        if let Some(q) = self.quota_bytes {
            write!(f, " of {}", human_bytes(q))?;
        }
        write!(
            f,
            ", {} version{} kept, {} forgotten by policy",
            thousands(self.versions),
            plural(self.versions as usize),
            thousands(self.forgotten)
        )?;
        if let Some(q) = self.quota_files {
            write!(f, ", {} of {} files", thousands(self.files), thousands(q))?;
        }
        Ok(())
    }
}

/// Checkpoints MANIFEST names (the newest).
pub const CHECKPOINTS_SHOWN: usize = 3;

/// A checkpoint as MANIFEST's footer names it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CheckpointLine {
    /// Its name.
    pub name: String,
    /// Who took it.
    pub writer: String,
    /// When, ns since the epoch.
    pub time_ns: i64,
}

/// One file as the MCP tool `list` returns it (issue 12): MANIFEST's columns, as data.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Listed {
    /// Path from the root, as stored ([`crate::store::paths`]).
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Estimated tokens (bytes / 4, rounded up); `None` for binary content.
    pub tokens: Option<u64>,
    /// Current version number.
    pub version: i64,
    /// Writer of the current version.
    pub writer: String,
    /// Commit time of the current version, ns since the epoch.
    pub time_ns: i64,
    /// Seconds since then (MANIFEST's `age`), at `now_ns`.
    pub age_s: u64,
    /// The version last read through the mount, by which writer, when (ns); `None`:
    /// never read (MANIFEST's `read`, issue 13).
    pub last_read: Option<ListedRead>,
    /// The agent step of the current version's writer, if it had one.
    pub step: Option<i64>,
}

/// A file's last read, as the MCP tool `list` returns it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ListedRead {
    /// The version read.
    pub version: i64,
    /// The reader's writer name.
    pub writer: String,
    /// When, ns since the epoch.
    pub time_ns: i64,
}

/// The files of `dirs`/`files` as [`Listed`] rows, the newest first (ties by path), at
/// most `max`; ages at `now_ns`.
pub fn listing(dirs: &[Dir], files: &[File], max: usize, now_ns: i64) -> Vec<Listed> {
    let mut order: Vec<usize> = (0..files.len()).collect();
    let newer = |a: &usize, b: &usize| files[*b].time_ns.cmp(&files[*a].time_ns);
    if max < order.len() && max > 0 {
        order.select_nth_unstable_by(max - 1, newer);
        order.truncate(max);
    }
    let path = |f: &File| {
        let mut p = f.name.stored().into_owned();
        let mut d = f.dir;
        while d != 0 && d < dirs.len() {
            p = format!("{}/{p}", dirs[d].name);
            d = dirs[d].parent;
        }
        p
    };
    let mut out: Vec<Listed> = order
        .into_iter()
        .map(|i| {
            let f = &files[i];
            Listed {
                path: path(f),
                bytes: f.bytes,
                tokens: (!f.binary).then(|| tokens(f.bytes as usize) as u64),
                version: f.version,
                writer: f.writer.to_string(),
                time_ns: f.time_ns,
                age_s: (now_ns.saturating_sub(f.time_ns).max(0) / 1_000_000_000) as u64,
                last_read: f.read.as_ref().map(|r| ListedRead {
                    version: r.version,
                    writer: r.writer.to_string(),
                    time_ns: r.time_ns,
                }),
                step: f.step,
            }
        })
        .collect();
    out.sort_by(|a, b| b.time_ns.cmp(&a.time_ns).then_with(|| a.path.cmp(&b.path)));
    out
}

/// Splits whole paths into [`Input::dirs`] and [`Input::files`].
pub fn split(entries: &[FileEntry]) -> (Vec<Dir>, Vec<File>) {
    let mut dirs = vec![Dir {
        parent: 0,
        name: String::new(),
    }];
    let mut index: std::collections::HashMap<&str, usize> = [("", 0)].into();
    let mut files = Vec::with_capacity(entries.len());
    for e in entries {
        let (dir_path, name) = e.path.rsplit_once('/').unwrap_or(("", &e.path));
        let mut parent = 0;
        let mut end = 0;
        for part in dir_path.split('/').filter(|p| !p.is_empty()) {
            end += part.len() + usize::from(end > 0);
            let prefix = &dir_path[..end];
            parent = match index.get(prefix) {
                Some(&i) => i,
                None => {
                    dirs.push(Dir {
                        parent,
                        name: part.to_string(),
                    });
                    index.insert(prefix, dirs.len() - 1);
                    dirs.len() - 1
                }
            };
        }
        files.push(File {
            dir: parent,
            name: Name::Stored(name.into()),
            pinned: parent == 0 && PINNED.contains(&name),
            bytes: e.bytes,
            version: e.version,
            writer: e.writer.as_str().into(),
            time_ns: e.time_ns,
            binary: e.binary,
            read: None,
            step: None,
        });
    }
    (dirs, files)
}

/// The `read` column of a file: `3s by agent` when its current version was read (how
/// long ago, by whom), `unread since v4` when it was written since its last read (v4:
/// the first version nobody read), `unread` when it was never read.
fn read_cell(f: &File, as_of_ns: i64) -> String {
    match &f.read {
        Some(r) if r.version >= f.version => {
            format!("{} by {}", age(as_of_ns, r.time_ns), quote_path(&r.writer))
        }
        Some(r) => format!("unread since v{}", r.version + 1),
        None => "unread".into(),
    }
}

/// The line naming stale files (issue 13): files not changed for [`STALE_STEPS`] or more
/// agent steps while the step moved on, the longest unchanged first; empty when none.
fn stale_line(input: &Input) -> String {
    let paths = |i: usize| {
        let f = &input.files[i];
        let mut parts = vec![f.name.stored().into_owned()];
        let mut d = f.dir;
        while d != 0 {
            parts.push(input.dirs[d].name.clone());
            d = input.dirs[d].parent;
        }
        parts.reverse();
        parts.join("/")
    };
    let Some(now) = input.step_now else {
        return String::new();
    };
    let mut stale: Vec<(i64, String)> = input
        .files
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let s = f.step?;
            (now - s >= STALE_STEPS).then(|| (s, paths(i)))
        })
        .collect();
    if stale.is_empty() {
        return String::new();
    }
    stale.sort();
    let mut line = format!("stale (unchanged for {STALE_STEPS}+ steps, now step {now}):");
    for (k, (s, p)) in stale.iter().take(STALE_SHOWN).enumerate() {
        let _ = write!(
            line,
            "{} {} since step {s}",
            if k == 0 { "" } else { ";" },
            quote_stored(p)
        );
    }
    if stale.len() > STALE_SHOWN {
        let _ = write!(line, "; {} more", stale.len() - STALE_SHOWN);
    }
    line.push('\n');
    clip(&line, LINE_MAX, false).into_owned()
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

/// `812 B`, `3.1 KB`, `4 KB`, `12 MB` (1 KB = 1,024 bytes; one decimal under 10).
pub fn human_bytes(n: u64) -> String {
    const UNITS: &[&str] = &["KB", "MB", "GB", "TB", "PB", "EB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    let shown = if v < 10.0 {
        let s = format!("{v:.1}");
        s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
    } else {
        format!("{v:.0}")
    };
    format!("{shown} {}", UNITS[unit])
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

/// `s` cut to `max` characters: its start and its end with `…` between (a path), or
/// (`tail` false) its start and `…` (free text).
pub fn clip(s: &str, max: usize, keep_end: bool) -> Cow<'_, str> {
    let n = s.chars().count();
    if n <= max {
        return Cow::Borrowed(s);
    }
    let keep = max.saturating_sub(1);
    let (head, tail) = if keep_end {
        (keep / 3, keep - keep / 3)
    } else {
        (keep, 0)
    };
    let start: String = s.chars().take(head).collect();
    let end: String = s.chars().skip(n - tail).collect();
    Cow::Owned(format!("{start}…{end}"))
}

/// Totals of a set of files.
#[derive(Debug, Clone, Copy, Default)]
struct Agg {
    count: usize,
    bytes: u64,
    /// Bytes of the text files among them (for the token estimate).
    text: u64,
    /// The newest file (index into files).
    newest: Option<usize>,
}

impl Agg {
    fn add(&mut self, files: &[File], i: usize) {
        let f = &files[i];
        self.count += 1;
        self.bytes += f.bytes;
        if !f.binary {
            self.text += f.bytes;
        }
        if self.newest.is_none_or(|n| files[n].time_ns < f.time_ns) {
            self.newest = Some(i);
        }
    }
    fn merge(&mut self, files: &[File], other: &Agg) {
        self.count += other.count;
        self.bytes += other.bytes;
        self.text += other.text;
        if let Some(o) = other.newest
            && self
                .newest
                .is_none_or(|n| files[n].time_ns < files[o].time_ns)
        {
            self.newest = Some(o);
        }
    }
    fn time(&self, files: &[File]) -> i64 {
        self.newest.map(|n| files[n].time_ns).unwrap_or(i64::MIN)
    }
}

/// A row of the table: a file, or a summary of files not listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Row {
    File(usize),
    /// Every file under a directory.
    Subtree(usize),
    /// The files directly in an unfolded directory.
    Own(usize),
    /// The subdirectories of an unfolded directory that have no row.
    Rest(usize),
}

/// The table's size in bytes as rows come and go: an upper bound of what
/// [`Table::render`] writes, with the path column as wide as the widest name ever added.
#[derive(Debug, Default, Clone)]
struct Cost {
    /// Sum of the lengths of names wider than [`NAME_W`].
    over: usize,
    /// Rows whose name fits the column.
    under: usize,
    /// Widest name seen.
    widest: usize,
    /// Sum of the rows' other columns, and of the bytes their names have beyond one
    /// per character.
    tails: usize,
}

impl Cost {
    fn add(&mut self, (name, tail): (usize, usize)) {
        if name > NAME_W {
            self.over += name;
        } else {
            self.under += 1;
        }
        self.widest = self.widest.max(name);
        self.tails += tail;
    }
    fn remove(&mut self, (name, tail): (usize, usize)) {
        if name > NAME_W {
            self.over -= name;
        } else {
            self.under -= 1;
        }
        self.tails -= tail;
    }
    /// Bytes of the table with the column header.
    fn total(&self) -> usize {
        let w = self.widest.clamp(4, NAME_W);
        self.over + self.under * w + self.tails + header_len(w)
    }
}

/// Bytes of the column header line for a path column `w` wide (see [`render`]).
fn header_len(w: usize) -> usize {
    w + 43
}

/// The other columns of a row, newline included.
fn tail(
    bytes: u64,
    tokens: &str,
    version: &str,
    writer: &str,
    age: &str,
    read: &str,
    cap: &str,
) -> String {
    let t = format!(
        " {:>9} {tokens:>8} {version:>4}  {writer:<12} {age:<4} {read}{cap}",
        thousands(bytes)
    );
    format!("{}\n", t.trim_end())
}

/// What the folding works on: the tree with its totals, and the rows chosen so far.
struct Table<'i, 'a> {
    input: &'i Input<'a>,
    /// Depth of each directory (the root 0).
    depth: Vec<usize>,
    /// The subdirectories of each directory that hold files, the newest first.
    children: Vec<Vec<usize>>,
    /// Totals of the files directly in each directory, and of its whole subtree.
    own: Vec<Agg>,
    sub: Vec<Agg>,
    /// Paths of directories, as stored, once built.
    dir_paths: Vec<Option<String>>,
    /// Files with a row of their own, in the order they were chosen.
    listed: Vec<usize>,
    is_listed: Vec<bool>,
    /// How many of those are directly in each directory, and under it.
    listed_own: Vec<usize>,
    listed_sub: Vec<usize>,
    /// Directories with a row (`Subtree`), and those unfolded (their files and
    /// subdirectories have rows instead); the root is always unfolded.
    revealed: Vec<bool>,
    unfolded: Vec<bool>,
    /// How many subdirectories of each unfolded directory are revealed.
    shown_children: Vec<usize>,
    cost: Cost,
    /// What each row was counted as in `cost`.
    counted: std::collections::HashMap<Row, (usize, usize)>,
}

impl<'i, 'a> Table<'i, 'a> {
    fn new(input: &'i Input<'a>) -> Self {
        let (files, dirs) = (&input.files, &input.dirs);
        let n = dirs.len().max(1);
        let mut depth = vec![0; n];
        for i in 1..dirs.len() {
            depth[i] = depth[dirs[i].parent] + 1;
        }
        let mut own = vec![Agg::default(); n];
        for (i, f) in files.iter().enumerate() {
            own[f.dir].add(files, i);
        }
        let mut sub = own.clone();
        for i in (1..dirs.len()).rev() {
            let s = sub[i];
            sub[dirs[i].parent].merge(files, &s);
        }
        let mut children = vec![Vec::new(); n];
        for i in 1..dirs.len() {
            if sub[i].count > 0 {
                children[dirs[i].parent].push(i);
            }
        }
        let mut t = Table {
            input,
            depth,
            children: Vec::new(),
            own,
            sub,
            dir_paths: vec![None; n],
            listed: Vec::new(),
            is_listed: vec![false; files.len()],
            listed_own: vec![0; n],
            listed_sub: vec![0; n],
            revealed: vec![false; n],
            unfolded: vec![false; n],
            shown_children: vec![0; n],
            cost: Cost::default(),
            counted: Default::default(),
        };
        for c in &mut children {
            c.sort_by(|&a, &b| {
                t.sub[b]
                    .time(files)
                    .cmp(&t.sub[a].time(files))
                    .then_with(|| dirs[a].name.cmp(&dirs[b].name))
            });
        }
        t.children = children;
        t.unfolded[0] = true;
        t.revealed[0] = true;
        t
    }

    fn files(&self) -> &'i [File] {
        &self.input.files
    }

    /// The stored path of a directory (`""` for the root).
    fn dir_path(&mut self, d: usize) -> String {
        if let Some(p) = &self.dir_paths[d] {
            return p.clone();
        }
        let p = if d == 0 {
            String::new()
        } else {
            let parent = self.dir_path(self.input.dirs[d].parent);
            let name = &self.input.dirs[d].name;
            if parent.is_empty() {
                name.to_string()
            } else {
                format!("{parent}/{name}")
            }
        };
        self.dir_paths[d] = Some(p.clone());
        p
    }

    fn file_path(&mut self, i: usize) -> String {
        let input = self.input;
        let f = &input.files[i];
        let (dir, name) = (f.dir, &f.name);
        let d = self.dir_path(dir);
        if d.is_empty() {
            name.stored().into_owned()
        } else {
            format!("{d}/{}", name.stored())
        }
    }

    /// A file's row: its name (quoted, clipped) and the rest.
    fn file_row(&mut self, i: usize) -> (String, String) {
        let path = self.file_path(i);
        let f = &self.input.files[i];
        let cap = self
            .input
            .caps
            .and_then(|caps| caps(&path))
            .map(|max| {
                format!(
                    "  max_bytes: {} of {}",
                    human_bytes(f.bytes),
                    human_bytes(max)
                )
            })
            .unwrap_or_default();
        let tokens = if f.binary {
            "binary".to_string()
        } else {
            thousands(tokens(f.bytes as usize) as u64)
        };
        // Never cut: a row that does not fit is not chosen.
        let name = quote_stored(&path).into_owned();
        let tail = tail(
            f.bytes,
            &tokens,
            &f.version.to_string(),
            &quote_path(&f.writer),
            &age(self.input.as_of_ns, f.time_ns),
            &read_cell(f, self.input.as_of_ns),
            &cap,
        );
        (name, tail)
    }

    /// A summary row's name for totals `agg`: `more` when some of its files are listed.
    fn summary_name(&mut self, row: Row, count: usize, dirs: usize, more: bool) -> String {
        let m = if more { "more " } else { "" };
        let files = |n: usize, m: &str| format!("{} {m}file{}", thousands(n as u64), plural(n));
        match row {
            Row::Subtree(d) => {
                format!("{}/ ({})", quote_stored(&self.dir_path(d)), files(count, m))
            }
            Row::Own(d) => {
                let p = self.dir_path(d);
                let p = if p.is_empty() {
                    ".".into()
                } else {
                    quote_stored(&p).into_owned()
                };
                format!("{p}/* ({})", files(count, m))
            }
            Row::Rest(d) => {
                let p = self.dir_path(d);
                let p = if p.is_empty() {
                    ".".into()
                } else {
                    quote_stored(&p).into_owned()
                };
                format!(
                    "{p}/… ({} {m}director{}: {})",
                    thousands(dirs as u64),
                    if dirs == 1 { "y" } else { "ies" },
                    files(count, "")
                )
            }
            Row::File(_) => unreachable!("not a summary"),
        }
    }

    /// A summary row's other columns.
    fn summary_tail(&self, agg: &Agg, slack: bool) -> String {
        let files = self.files();
        let (writer, when) = agg
            .newest
            .map(|n| (quote_path(&files[n].writer).into_owned(), files[n].time_ns))
            .unwrap_or(("-".into(), self.input.as_of_ns));
        let tokens = if agg.text == 0 && agg.bytes > 0 {
            "binary".to_string()
        } else {
            thousands(tokens(agg.text as usize) as u64)
        };
        let mut t = tail(
            agg.bytes,
            &tokens,
            "-",
            &writer,
            &age(self.input.as_of_ns, when),
            "",
            "",
        );
        if slack {
            // As files get rows, the newest of the rest may be another writer's, and
            // older: room for a longer writer name and age ([`render`] checks the text).
            t.push_str(&" ".repeat(SUMMARY_SLACK));
        }
        t
    }

    /// The estimate of a summary row with all of its files (a count only decreases as
    /// files get rows).
    fn estimate(&mut self, row: Row) -> (usize, usize) {
        let (agg, dirs) = match row {
            Row::Subtree(d) => (self.sub[d], 0),
            Row::Own(d) => (self.own[d], 0),
            Row::Rest(d) => {
                let mut a = Agg::default();
                let files = self.input.files.as_slice();
                for &c in &self.children[d] {
                    a.merge(files, &self.sub[c]);
                }
                (a, self.children[d].len())
            }
            Row::File(i) => {
                let (n, t) = self.file_row(i);
                return measure(&n, &t);
            }
        };
        let name = self.summary_name(row, agg.count, dirs, true);
        measure(&name, &self.summary_tail(&agg, true))
    }

    fn add(&mut self, row: Row) {
        if self.counted.contains_key(&row) {
            return;
        }
        let e = self.estimate(row);
        self.cost.add(e);
        self.counted.insert(row, e);
    }

    /// Adds `rows` and takes away `gone` if the table then fits in `limit` bytes.
    fn try_change(&mut self, rows: &[Row], gone: &[Row], limit: usize) -> bool {
        let mut cost = self.cost.clone();
        for g in gone {
            if let Some(&e) = self.counted.get(g) {
                cost.remove(e);
            }
        }
        let mut added = Vec::new();
        for &r in rows {
            if !self.counted.contains_key(&r) {
                let e = self.estimate(r);
                cost.add(e);
                added.push((r, e));
            }
        }
        if cost.total() > limit {
            return false;
        }
        for g in gone {
            self.counted.remove(g);
        }
        self.counted.extend(added);
        self.cost = cost;
        true
    }

    /// Gives file `i` a row: if the table then fits in `limit` bytes, or whatever the
    /// size (`None`).
    fn list(&mut self, i: usize, limit: Option<usize>) -> bool {
        if self.is_listed[i] {
            return true;
        }
        match limit {
            Some(limit) => {
                if !self.try_change(&[Row::File(i)], &[], limit) {
                    return false;
                }
            }
            None => self.add(Row::File(i)),
        }
        self.is_listed[i] = true;
        self.listed.push(i);
        let dir = self.input.files[i].dir;
        self.listed_own[dir] += 1;
        let mut d = dir;
        loop {
            self.listed_sub[d] += 1;
            if d == 0 {
                break;
            }
            d = self.input.dirs[d].parent;
        }
        // The summary row it was counted in may now count nothing.
        let home = self.home(dir);
        if self.left(home) == 0 {
            self.remove(home);
        }
        true
    }

    fn remove(&mut self, row: Row) {
        if let Some(e) = self.counted.remove(&row) {
            self.cost.remove(e);
        }
    }

    /// The summary row that counts the files of directory `dir` that have no row.
    fn home(&self, dir: usize) -> Row {
        let mut chain = Vec::new();
        let mut d = dir;
        while d != 0 {
            chain.push(d);
            d = self.input.dirs[d].parent;
        }
        let mut at = 0;
        for &c in chain.iter().rev() {
            if !self.revealed[c] {
                return Row::Rest(at);
            }
            if !self.unfolded[c] {
                return Row::Subtree(c);
            }
            at = c;
        }
        Row::Own(at)
    }

    /// Files without a row of their own that `row` counts.
    fn left(&self, row: Row) -> usize {
        match row {
            Row::Subtree(d) => self.sub[d].count - self.listed_sub[d],
            Row::Own(d) => self.own[d].count - self.listed_own[d],
            Row::Rest(d) => self.children[d][self.shown_children[d]..]
                .iter()
                .map(|&c| self.sub[c].count - self.listed_sub[c])
                .sum(),
            Row::File(_) => 0,
        }
    }

    /// Unfolds the tree breadth first, the newest directories first, while it fits.
    fn unfold(&mut self, limit: usize) {
        let mut queue = std::collections::VecDeque::from([0usize]);
        while let Some(d) = queue.pop_front() {
            let kids = self.children[d].clone();
            if kids.is_empty() || self.left(Row::Subtree(d)) == 0 {
                continue;
            }
            if d != 0 {
                // Unfolding pays only with at least one subdirectory shown.
                let mut rows = Vec::new();
                if self.left(Row::Subtree(kids[0])) > 0 {
                    rows.push(Row::Subtree(kids[0]));
                }
                if self.left(Row::Own(d)) > 0 {
                    rows.push(Row::Own(d));
                }
                if kids.len() > 1 {
                    rows.push(Row::Rest(d));
                }
                if !self.try_change(&rows, &[Row::Subtree(d)], limit) {
                    continue;
                }
                self.unfolded[d] = true;
                self.revealed[kids[0]] = true;
                self.shown_children[d] = 1;
                queue.push_back(kids[0]);
            }
            for (k, &c) in kids.iter().enumerate().skip(self.shown_children[d]) {
                let last = k + 1 == kids.len();
                let gone: &[Row] = if last { &[Row::Rest(d)] } else { &[] };
                // A directory whose files all have rows needs none of its own.
                let rows: &[Row] = if self.left(Row::Subtree(c)) > 0 {
                    &[Row::Subtree(c)]
                } else {
                    &[]
                };
                if !self.try_change(rows, gone, limit) {
                    break;
                }
                self.revealed[c] = true;
                self.shown_children[d] = k + 1;
                queue.push_back(c);
            }
        }
    }

    /// The final rows with their exact totals: (sort key, name, tail).
    fn rows(&mut self) -> Vec<(String, String, String)> {
        let files = self.input.files.as_slice();
        let nd = self.depth.len();
        // Where the files of each directory that have no row are counted, top down.
        let mut home = vec![Row::Own(0); nd];
        for d in 1..self.input.dirs.len() {
            let p = self.input.dirs[d].parent;
            home[d] = if self.unfolded[p] {
                if !self.revealed[d] {
                    Row::Rest(p)
                } else if self.unfolded[d] {
                    Row::Own(d)
                } else {
                    Row::Subtree(d)
                }
            } else {
                home[p]
            };
        }
        // Totals of the files without a row, and whether some files have one, by row:
        // [subtree, own, rest] of each directory.
        let mut totals = vec![[(Agg::default(), false); 3]; nd];
        let slot = |row: Row| match row {
            Row::Subtree(d) => (d, 0),
            Row::Own(d) => (d, 1),
            Row::Rest(d) => (d, 2),
            Row::File(_) => unreachable!("files are not homes"),
        };
        for (i, f) in files.iter().enumerate() {
            let (d, k) = slot(home[f.dir]);
            let e = &mut totals[d][k];
            if self.is_listed[i] {
                e.1 = true;
            } else {
                e.0.add(files, i);
            }
        }
        let mut out = Vec::new();
        for i in self.listed.clone() {
            let (name, tail) = self.file_row(i);
            out.push((self.file_path(i), name, tail));
        }
        let mut summaries: Vec<(Row, Agg, bool)> = Vec::new();
        for (d, t) in totals.iter().enumerate() {
            for (k, (agg, more)) in t.iter().enumerate() {
                if agg.count > 0 {
                    let row = [Row::Subtree(d), Row::Own(d), Row::Rest(d)][k];
                    summaries.push((row, *agg, *more));
                }
            }
        }
        for (row, agg, more) in summaries {
            let (key, dirs, more) = match row {
                Row::Subtree(d) => (format!("{}/\u{10ffff}", self.dir_path(d)), 0, more),
                Row::Own(d) => (format!("{}/\u{10fffe}", self.dir_path(d)), 0, more),
                Row::Rest(d) => (
                    format!("{}/\u{10ffff}", self.dir_path(d)),
                    self.children[d].len() - self.shown_children[d],
                    self.shown_children[d] > 0,
                ),
                Row::File(_) => unreachable!("only summaries"),
            };
            // The root's summaries sort last.
            let key = key
                .strip_prefix('/')
                .map(|k| format!("\u{10ffff}{k}"))
                .unwrap_or(key);
            let name = self.summary_name(row, agg.count, dirs, more);
            out.push((key, name, self.summary_tail(&agg, false)));
        }
        out.sort();
        out
    }
}

/// What a row costs in a [`Cost`]: its name's characters, and the bytes of the rest
/// (the name's bytes beyond one per character included).
fn measure(name: &str, tail: &str) -> (usize, usize) {
    let chars = name.chars().count();
    (chars, tail.len() + name.len() - chars)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Renders MANIFEST.
pub fn render(input: &Input) -> String {
    let budget_tokens = if input.budget_tokens == 0 {
        DEFAULT_BUDGET_TOKENS
    } else {
        input.budget_tokens
    };
    let budget = budget_tokens * 4;
    let files = &input.files;
    let total: u64 = files.iter().map(|f| f.bytes).sum();
    let text: u64 = files.iter().filter(|f| !f.binary).map(|f| f.bytes).sum();
    // Everything but the header and the table.
    let mut after = String::new();
    let mut rules = String::new();
    for (i, rule) in input.rules.iter().enumerate() {
        let line = format!(
            "{}{}\n",
            if i == 0 { "who may write: " } else { "  " },
            clip(&one_line(rule), LINE_MAX, false)
        );
        if i > 0 && rules.len() + line.len() > budget / 4 {
            let _ = writeln!(
                rules,
                "  (… {} more path rules)",
                thousands((input.rules.len() - i) as u64)
            );
            break;
        }
        rules.push_str(&line);
    }
    after.push_str(&rules);
    for (title, (events, count)) in [
        ("refused", &input.refusals),
        ("history erased", &input.erasures),
    ] {
        if *count == 0 {
            continue;
        }
        let _ = writeln!(after, "{title} ({} of {count}):", events.len());
        for r in events {
            let line = format!(
                "  {} ago, {}: {}",
                age(input.as_of_ns, r.time_ns),
                quote_path(&r.writer),
                one_line_stored(&r.reason)
            );
            let _ = writeln!(after, "{}", clip(&line, LINE_MAX, false));
        }
    }
    if !input.restorable.is_empty() {
        after.push_str("restorable:\n");
        for r in &input.restorable {
            let ago = age(input.as_of_ns, r.time_ns);
            let line = if r.deleted {
                format!(
                    "  {} deleted by {} {ago} ago ({} B): {}",
                    quote_stored(&r.path),
                    quote_path(&r.writer),
                    thousands(r.bytes),
                    quote_stored(&format!(".archive/{}", r.path))
                )
            } else {
                format!(
                    "  {} shrunk by {} {ago} ago; v{} ({} B): {}",
                    quote_stored(&r.path),
                    quote_path(&r.writer),
                    r.version,
                    thousands(r.bytes),
                    quote_stored(&format!(".history/{}/{}", r.path, r.version))
                )
            };
            // A long path is cut in the middle: the line keeps where to get it back.
            let _ = writeln!(after, "{}", clip(&line, LINE_MAX * 2, true));
        }
    }
    after.push_str(&stale_line(input));
    let (cps, cp_count) = &input.checkpoints;
    if !cps.is_empty() {
        let named: Vec<String> = cps
            .iter()
            .map(|c| {
                format!(
                    "{} ({} ago, {})",
                    quote_path(&c.name),
                    age(input.as_of_ns, c.time_ns),
                    quote_path(&c.writer)
                )
            })
            .collect();
        let line = format!(
            "checkpoints ({} of {cp_count}): {}; each tree: .checkpoints/<name>/",
            cps.len(),
            named.join(", ")
        );
        let _ = writeln!(after, "{}", clip(&line, LINE_MAX * 2, false));
    }
    after.push_str(
        "not listed: <file>.outline (what a file holds, by section); \
         .history/<path>/<N> (every version); .archive/<path> (deleted files)\n",
    );
    let header = |folded: bool| {
        let mut h = format!(
            "MANIFEST as of {}: {} file{}, {} bytes, ~{} tokens",
            utc(input.as_of_ns),
            thousands(files.len() as u64),
            plural(files.len()),
            thousands(total),
            thousands(tokens(text as usize) as u64)
        );
        if let Some(pad) = &input.pad {
            let _ = write!(h, "; {pad}");
        }
        if input.temporaries > 0 {
            let _ = write!(
                h,
                "; {} temporar{} not listed",
                thousands(input.temporaries as u64),
                if input.temporaries == 1 { "y" } else { "ies" }
            );
        }
        if input.unlisted > 0 {
            let _ = write!(
                h,
                "; {} in directories you cannot list",
                thousands(input.unlisted as u64),
            );
        }
        if folded {
            let _ = write!(
                h,
                "; folded to fit ~{} tokens",
                thousands(budget_tokens as u64)
            );
        }
        h.push('\n');
        h
    };
    // The table gets what the other sections leave.
    let limit = budget.saturating_sub(header(true).len() + after.len());
    let mut table = Table::new(input);
    // Every file on its own row, if that fits (a row is at least 46 bytes).
    let mut all = files.len() * 46 <= limit;
    if all {
        for i in 0..files.len() {
            table.list(i, None);
        }
        all = table.cost.total() <= limit;
    }
    let folded = !all;
    if folded {
        table = Table::new(input);
        for r in [Row::Own(0), Row::Rest(0)] {
            if table.left(r) > 0 {
                table.add(r);
            }
        }
        // The default layout, whatever the budget.
        for (i, f) in files.iter().enumerate() {
            if f.pinned {
                table.list(i, None);
            }
        }
        // The newest files, up to half the table.
        let newest = newest_first(&mut table, limit);
        let half = table.cost.total() + limit.saturating_sub(table.cost.total()) / 2;
        let mut next = 0;
        while next < newest.len() && table.list(newest[next], Some(half)) {
            next += 1;
        }
        table.unfold(limit);
        // Then more of the newest files, while they fit.
        for &i in &newest[next..] {
            if !table.list(i, Some(limit)) {
                break;
            }
        }
    }
    let mut rows = table.rows();
    let render_rows = |rows: &[(String, String, String)]| {
        let width = rows
            .iter()
            .map(|r| r.1.chars().count())
            .max()
            .unwrap_or(4)
            .clamp(4, NAME_W);
        let mut out = header(folded);
        let _ = writeln!(
            out,
            "{:<width$} {:>9} {:>8} {:>4}  {:<12} age  read",
            "path", "bytes", "~tokens", "ver", "writer"
        );
        for (_, name, tail) in rows {
            let _ = write!(out, "{name:<width$}{tail}");
        }
        out.push_str(&after);
        out
    };
    let mut out = render_rows(&rows);
    // The estimate is an upper bound; should it ever not be, drop the newest rows last
    // chosen (never the default layout's).
    while out.len() > budget && folded {
        let Some(pos) = table.listed.iter().rposition(|&i| !files[i].pinned) else {
            break;
        };
        let i = table.listed.remove(pos);
        table.is_listed[i] = false;
        rows = table.rows();
        out = render_rows(&rows);
    }
    out
}

/// The files (not yet listed) that may get rows, the newest first: as many as could fit
/// in `limit` bytes.
fn newest_first(table: &mut Table<'_, '_>, limit: usize) -> Vec<usize> {
    let files = table.files();
    let mut order: Vec<usize> = (0..files.len()).filter(|&i| !table.is_listed[i]).collect();
    let k = (limit / 46 + 1).min(order.len());
    let newer = |a: &usize, b: &usize| files[*b].time_ns.cmp(&files[*a].time_ns);
    if k < order.len() && k > 0 {
        order.select_nth_unstable_by(k - 1, newer);
        order.truncate(k);
    }
    // Ties broken by path, so the text does not depend on the order files come in.
    let mut keyed: Vec<(i64, String, usize)> = order
        .into_iter()
        .map(|i| (files[i].time_ns, table.file_path(i), i))
        .collect();
    keyed.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    keyed.into_iter().map(|(_, _, i)| i).collect()
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
            binary: false,
        }
    }

    fn manifest(entries: &[FileEntry], budget_tokens: usize, as_of: i64) -> String {
        let (dirs, files) = split(entries);
        render(&Input {
            dirs,
            files,
            rules: vec!["anyone may write any file".into()],
            as_of_ns: as_of * 1_000_000_000,
            budget_tokens,
            ..Default::default()
        })
    }

    /// The summary rows' counts add up to the files not listed on rows of their own.
    fn counted(m: &str) -> usize {
        let table = || {
            m.lines()
                .skip(2)
                .take_while(|l| !l.starts_with("who may write"))
        };
        let listed = table()
            .filter(|l| !l.contains(" file") || !l.contains(" ("))
            .count();
        let summarized: usize = table()
            .filter_map(|l| {
                let (_, rest) = l.split_once(" (")?;
                let n = rest.split(" file").next()?;
                let n = n.rsplit(": ").next()?.split_whitespace().next()?;
                n.replace(',', "").parse::<usize>().ok()
            })
            .sum();
        listed + summarized
    }

    #[test]
    fn small_trees_list_every_file() {
        let mut files = vec![
            f("plan.md", 345, 100),
            f("state.json", 40, 90),
            f("a/b.txt", 3, 50),
        ];
        for i in 0..20 {
            files.push(f(&format!("notes/n{i}.md"), 100, i));
        }
        let m = render(&Input {
            erasures: (
                vec![Refusal {
                    reason: "gc (keep_last 1) by uid 0: forgot 3 versions and 10 bytes".into(),
                    writer: "human".into(),
                    time_ns: 0,
                }],
                1,
            ),
            ..{
                let (dirs, fs) = split(&files);
                Input {
                    dirs,
                    files: fs,
                    rules: vec!["anyone may write any file".into()],
                    as_of_ns: 160 * 1_000_000_000,
                    ..Default::default()
                }
            }
        });
        assert!(m.contains("notes/n19.md "), "{m}");
        assert!(!m.contains("folded"), "{m}");
        assert!(
            m.contains("history erased (1 of 1):\n  2m ago, human: gc (keep_last 1)"),
            "{m}"
        );
        let plan: Vec<&str> = m
            .lines()
            .find(|l| l.starts_with("plan.md"))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(
            plan,
            ["plan.md", "345", "87", "2", "agent", "1m", "unread"],
            "{m}"
        );
        assert!(
            m.starts_with("MANIFEST as of 1970-01-01 00:02:40Z: 23 files,"),
            "{m}"
        );
        assert_eq!(counted(&m), 23, "{m}");
    }

    /// 1,000 top-level directories: within budget, the default layout and the newest
    /// files listed, the rest in summary rows that count every file once.
    #[test]
    fn a_thousand_directories_fold_into_the_budget() {
        let mut files = vec![
            f("plan.md", 345, 1),
            f("findings.md", 0, 1),
            f("state.json", 3, 1),
        ];
        for d in 0..1000 {
            for j in 0..3 {
                files.push(f(&format!("dir{d:04}/f{j}.txt"), 100, 10 + d * 3 + j));
            }
        }
        for budget in [2000, 500, 10_000] {
            let m = manifest(&files, budget, 10_000);
            assert!(
                m.len().div_ceil(4) <= budget,
                "{} > {budget}:\n{m}",
                m.len() / 4
            );
            // ... and uses most of it.
            assert!(
                m.len().div_ceil(4) * 5 > budget * 4,
                "{} of {budget}:\n{m}",
                m.len() / 4
            );
            for p in ["plan.md ", "findings.md ", "state.json "] {
                assert!(m.lines().any(|l| l.starts_with(p)), "{p}:\n{m}");
            }
            assert!(m.contains("dir0999/f2.txt "), "the newest file:\n{m}");
            assert!(m.contains("./… ("), "{m}");
            assert!(
                m.contains(&format!("folded to fit ~{}", thousands(budget as u64))),
                "{m}"
            );
            assert_eq!(counted(&m), 3003, "{m}");
            assert!(m.ends_with("(deleted files)\n"), "{m}");
        }
    }

    /// Deep trees unfold breadth first: a directory's row turns into rows for its
    /// subdirectories when they fit.
    #[test]
    fn deep_trees_unfold_breadth_first() {
        let mut files = vec![f("plan.md", 1, 1)];
        for a in 0..3 {
            for b in 0..5 {
                for c in 0..40 {
                    files.push(f(
                        &format!("src/m{a}/s{b}/f{c}.rs"),
                        10,
                        (a * 5 + b) * 40 + c,
                    ));
                }
            }
        }
        let m = manifest(&files, 1000, 1000);
        assert!(m.len().div_ceil(4) <= 1000, "{m}");
        assert!(m.contains("src/m2/s4/ ("), "{m}");
        assert!(
            m.contains("src/m0/ (200 files)") || m.contains("src/m0/s"),
            "{m}"
        );
        assert_eq!(counted(&m), 601, "{m}");
    }

    #[test]
    fn binary_files_and_caps() {
        let mut png = f("logo.png", 12_004, 5);
        png.binary = true;
        let files = [png, f("notes/a.md", 3172, 5)];
        let (dirs, fs) = split(&files);
        let caps = |p: &str| (p == "notes/a.md").then_some(4096);
        let m = render(&Input {
            dirs,
            files: fs,
            as_of_ns: 5_000_000_000,
            caps: Some(&caps),
            ..Default::default()
        });
        let row = |p: &str| -> Vec<String> {
            m.lines()
                .find(|l| l.starts_with(p))
                .unwrap()
                .split_whitespace()
                .map(String::from)
                .collect()
        };
        assert_eq!(row("logo.png")[1..3], ["12,004", "binary"], "{m}");
        assert!(
            m.lines()
                .any(|l| l.starts_with("notes/a.md") && l.ends_with("max_bytes: 3.1 KB of 4 KB")),
            "{m}"
        );
        assert!(m.contains("2 files, 15,176 bytes, ~793 tokens"), "{m}");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(4096), "4 KB");
        assert_eq!(human_bytes(1 << 20), "1 MB");
        assert_eq!(human_bytes(15 << 20), "15 MB");
    }

    #[test]
    fn a_name_cannot_forge_a_row() {
        let mut evil = f("a\nfake.md    999  9  1  root  0s", 5, 100);
        evil.writer = "w\nx".into();
        let entries = [f("plan.md", 345, 100), evil];
        let (dirs, files) = split(&entries);
        let m = render(&Input {
            restorable: vec![Restorable {
                deleted: true,
                path: "gone\nb.md".into(),
                writer: "agent".into(),
                time_ns: 100 * 1_000_000_000,
                version: 1,
                bytes: 3,
            }],
            dirs,
            files,
            refusals: (
                vec![Refusal {
                    reason: "x\ny: refused".into(),
                    writer: "agent".into(),
                    time_ns: 0,
                }],
                1,
            ),
            as_of_ns: 100 * 1_000_000_000,
            ..Default::default()
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
        assert_eq!(rest, ["5", "2", "2", r#""w\nx""#, "0s", "unread"], "{m}");
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

    /// Long reasons and paths are cut; many rules are cut to a quarter of the budget.
    #[test]
    fn every_section_is_bounded() {
        let long = "x".repeat(10_000);
        let entries = [f(&format!("{long}/{long}.md"), 1, 1)];
        let (dirs, files) = split(&entries);
        let m = render(&Input {
            dirs,
            files,
            refusals: (
                (0..3)
                    .map(|_| Refusal {
                        reason: long.clone(),
                        writer: "agent".into(),
                        time_ns: 0,
                    })
                    .collect(),
                3,
            ),
            rules: (0..1000).map(|i| format!("r{i}/**: agent")).collect(),
            as_of_ns: 0,
            ..Default::default()
        });
        assert!(m.len().div_ceil(4) <= DEFAULT_BUDGET_TOKENS, "{}", m.len());
        assert!(m.contains("more path rules)"), "{m}");
        assert!(m.lines().all(|l| l.chars().count() <= 2 * LINE_MAX), "{m}");
    }

    #[test]
    fn utc_formats_known_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc(1_796_061_415 * 1_000_000_000), "2026-11-30 17:56:55Z");
        assert_eq!(utc(951_782_400 * 1_000_000_000), "2000-02-29 00:00:00Z");
    }
}
