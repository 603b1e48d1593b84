//! The MCP tools' operations over the filesystem core (issue 12): read (whole, a section,
//! a line range, or a window), write, append, replace and outline of a file at a path.
//! Each goes through the same core calls a process on the mount makes (lookup, create,
//! open, write, flush, release), so the gate, the commit path and provenance are the
//! mount's; nothing here decides what may be written. Errors are [`crate::error::Error`]
//! (an errno and a one-line reason, the text a refused tool call returns).

use crate::error::{Error, Result};
use crate::fs::{Ctx, Fs, ROOT};

/// Most bytes one `read` returns (32 KiB, about 8,000 tokens); a longer result says where
/// to continue (`next_offset`).
pub const READ_MAX: usize = 32 << 10;

/// Bytes read from the core per call (the FUSE adapter's largest read).
const CHUNK: u32 = 128 << 10;

/// A path given to a tool, checked: relative to the scratchpad's root, `/`-separated,
/// no empty, `.` or `..` component, no NUL, no `%2e`/`%2f` escapes (a client may decode
/// them later), at most 4,096 bytes; the last component not a view's name when `writing`.
/// Returns the components. `EINVAL` with the reason otherwise (SPEC §6: a path the
/// scratchpad cannot hold is an invalid argument).
pub fn components(path: &str, writing: bool) -> Result<Vec<&str>> {
    let bad = |why: &str| Err(Error::new(libc::EINVAL, format!("{path:?}: {why}")));
    if path.is_empty() {
        return bad("empty path");
    }
    if path.len() > 4096 {
        return bad("path longer than 4,096 bytes");
    }
    if path.starts_with('/') {
        return bad("absolute path: give it relative to the scratchpad's root");
    }
    if path.contains('\0') {
        return bad("NUL in path");
    }
    let lower = path.to_ascii_lowercase();
    if lower.contains("%2e") || lower.contains("%2f") || lower.contains("%5c") {
        return bad("URL-encoded dot or slash in path");
    }
    let parts: Vec<&str> = path.split('/').collect();
    for p in &parts {
        match *p {
            "" => return bad("empty path component"),
            "." | ".." => return bad("`.` and `..` are not allowed: paths stay in the scratchpad"),
            _ => {}
        }
    }
    if writing {
        let last = parts[parts.len() - 1];
        if parts.len() == 1 && (last == "MANIFEST" || last == ".history" || last == ".archive")
            || parts[0] == ".history"
            || parts[0] == ".archive"
            || last.ends_with(".outline")
        {
            return bad("a read-only view's name: views are written by scratchfs");
        }
    }
    Ok(parts)
}

/// The inode at `path`: `ENOENT` ("no such file") when a component is missing.
fn resolve(fs: &Fs, path: &str) -> Result<u64> {
    let mut ino = ROOT;
    for part in components(path, false)? {
        ino = fs
            .lookup(ino, part.as_bytes())
            .map_err(|e| match e.errno {
                libc::ENOENT => Error::new(libc::ENOENT, format!("{path}: no such file")),
                _ => e,
            })?
            .ino;
    }
    Ok(ino)
}

/// The whole content of the file at `path` as the caller of `ctx` reads it.
pub fn read_all(fs: &Fs, path: &str, ctx: Ctx) -> Result<Vec<u8>> {
    let ino = resolve(fs, path)?;
    let (fh, _) = fs.open(ino, libc::O_RDONLY, ctx)?;
    let mut out = Vec::new();
    let r = loop {
        match fs.read(fh, out.len() as u64, CHUNK) {
            Ok(b) if b.is_empty() => break Ok(()),
            Ok(b) => out.extend_from_slice(&b),
            Err(e) => break Err(e),
        }
    };
    let _ = fs.release(fh);
    r.map(|()| out)
}

/// What part of a file `read` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Section {
    /// The whole file.
    Whole,
    /// A Markdown heading's section: from the heading whose text (without `#`s, trimmed)
    /// is this, to the next heading of the same or a higher level.
    Heading(String),
    /// Lines `first..=last`, 1-based (`last` past the end: to the end).
    Lines(usize, usize),
}

/// The result of `read`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReadResult {
    /// The text returned (invalid UTF-8 replaced by U+FFFD).
    pub text: String,
    /// Bytes of the selected part (section or whole file).
    pub total_bytes: u64,
    /// Where the selected part continues, when the result was cut at [`READ_MAX`] or
    /// `limit`: pass it as `offset` to read on.
    pub next_offset: Option<u64>,
}

/// Reads `section` of the file at `path`, from byte `offset` of that section, at most
/// `limit` bytes (and never more than [`READ_MAX`]). `ENOENT` for a missing file or
/// heading; `EINVAL` for a bad line range.
pub fn read(
    fs: &Fs,
    path: &str,
    section: &Section,
    offset: u64,
    limit: Option<usize>,
    ctx: Ctx,
) -> Result<ReadResult> {
    let all = read_all(fs, path, ctx)?;
    let part: &[u8] = match section {
        Section::Whole => &all,
        Section::Heading(h) => heading_section(&all, h)
            .ok_or_else(|| Error::new(libc::ENOENT, format!("{path}: no heading {h:?}")))?,
        Section::Lines(first, last) => {
            if *first == 0 || last < first {
                return Err(Error::new(
                    libc::EINVAL,
                    format!("{path}: lines {first}-{last}: a range is 1-based, first <= last"),
                ));
            }
            lines(&all, *first, *last)
        }
    };
    let total = part.len() as u64;
    let start = (offset.min(total)) as usize;
    let max = limit.unwrap_or(READ_MAX).min(READ_MAX);
    let mut end = (start + max).min(part.len());
    // Cut at a character boundary.
    while end > start && end < part.len() && (part[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    Ok(ReadResult {
        text: String::from_utf8_lossy(&part[start..end]).into_owned(),
        total_bytes: total,
        next_offset: (end < part.len()).then_some(end as u64),
    })
}

/// The level and text of a Markdown ATX heading line (`## Text`).
fn heading(line: &[u8]) -> Option<(usize, &[u8])> {
    let level = line.iter().take_while(|&&b| b == b'#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &line[level..];
    if !rest.is_empty() && rest[0] != b' ' && rest[0] != b'\t' {
        return None;
    }
    Some((level, rest.trim_ascii()))
}

/// The section under the first heading whose text is `title` (its heading line included).
fn heading_section<'c>(content: &'c [u8], title: &str) -> Option<&'c [u8]> {
    let want = title.trim().trim_start_matches('#').trim().as_bytes();
    let mut start: Option<(usize, usize)> = None;
    let mut at = 0;
    for line in content.split_inclusive(|&b| b == b'\n') {
        let text = line.strip_suffix(b"\n").unwrap_or(line);
        if let Some((level, t)) = heading(text) {
            match start {
                Some((from, l)) if level <= l => return Some(&content[from..at]),
                None if t == want => start = Some((at, level)),
                _ => {}
            }
        }
        at += line.len();
    }
    start.map(|(from, _)| &content[from..])
}

/// Lines `first..=last` (1-based) of `content`.
fn lines(content: &[u8], first: usize, last: usize) -> &[u8] {
    let mut from = content.len();
    let mut to = content.len();
    let mut n = 0;
    let mut at = 0;
    for line in content.split_inclusive(|&b| b == b'\n') {
        n += 1;
        if n == first {
            from = at;
        }
        at += line.len();
        if n == last {
            to = at;
            break;
        }
    }
    &content[from.min(to)..to]
}

/// Creates the directories of `path` that are missing, and returns the parent's inode
/// and the file's name.
fn parent_of<'p>(fs: &Fs, path: &'p str, ctx: Ctx) -> Result<(u64, &'p str)> {
    let parts = components(path, true)?;
    let (name, dirs) = parts.split_last().expect("components are never empty");
    let mut ino = ROOT;
    for d in dirs {
        ino = match fs.lookup(ino, d.as_bytes()) {
            Ok(a) => a.ino,
            Err(e) if e.errno == libc::ENOENT => {
                fs.mkdir(ino, d.as_bytes(), 0o755, 0o022, ctx)?.ino
            }
            Err(e) => return Err(e),
        };
    }
    Ok((ino, name))
}

/// Opens (creating when missing, with its directories), writes `data` at `offset` (or at
/// the end with `append`), and closes, as `printf > path` or `>> path` would: one
/// version, or the gate's refusal (the previous version stays). Returns the file's size.
fn put(fs: &Fs, path: &str, data: &[u8], append: bool, ctx: Ctx) -> Result<u64> {
    let (parent, name) = parent_of(fs, path, ctx)?;
    let flags = libc::O_WRONLY
        | if append {
            libc::O_APPEND
        } else {
            libc::O_TRUNC
        };
    let fh = match fs.lookup(parent, name.as_bytes()) {
        Ok(a) => fs.open(a.ino, flags, ctx)?.0,
        Err(e) if e.errno == libc::ENOENT => {
            fs.create(parent, name.as_bytes(), 0o644, 0o022, flags, ctx)?
                .1
        }
        Err(e) => return Err(e),
    };
    let w = if data.is_empty() {
        Ok(0)
    } else {
        fs.write(fh, 0, data)
    };
    let f = w.and_then(|_| fs.flush(fh));
    let r = fs.release(fh);
    f.and(r)?;
    let ino = fs.lookup(parent, name.as_bytes())?.ino;
    Ok(fs.getattr(ino)?.size)
}

/// Replaces the file at `path` with `content` (creating it and its directories). Returns
/// its size in bytes.
pub fn write(fs: &Fs, path: &str, content: &[u8], ctx: Ctx) -> Result<u64> {
    put(fs, path, content, false, ctx)
}

/// Appends `content` to the file at `path` (creating it). Returns its size in bytes.
pub fn append(fs: &Fs, path: &str, content: &[u8], ctx: Ctx) -> Result<u64> {
    put(fs, path, content, true, ctx)
}

/// Replaces occurrences of `find` with `with` in the file at `path`: `count` `None`
/// requires exactly one occurrence (an absent or ambiguous match is refused, `EINVAL`,
/// saying how many there are, as the memory tool's `str_replace` does); `Some(0)`
/// replaces all, `Some(n)` the first n. Returns how many were replaced. One version.
pub fn replace(
    fs: &Fs,
    path: &str,
    find: &str,
    with: &str,
    count: Option<usize>,
    ctx: Ctx,
) -> Result<usize> {
    if find.is_empty() {
        return Err(Error::new(
            libc::EINVAL,
            format!("{path}: empty text to find"),
        ));
    }
    let content = read_all(fs, path, ctx)?;
    let text = String::from_utf8(content)
        .map_err(|_| Error::new(libc::EINVAL, format!("{path}: not UTF-8 text")))?;
    let found = text.matches(find).count();
    let n = match count {
        _ if found == 0 => {
            return Err(Error::new(
                libc::EINVAL,
                format!("{path}: the text to replace does not occur in the file"),
            ));
        }
        None if found > 1 => {
            return Err(Error::new(
                libc::EINVAL,
                format!(
                    "{path}: the text to replace occurs {found} times; give more context to make it unique, or a count"
                ),
            ));
        }
        None => 1,
        Some(0) => found,
        Some(n) => n.min(found),
    };
    let new = text.replacen(find, with, n);
    write(fs, path, new.as_bytes(), ctx)?;
    Ok(n)
}

/// The outline of the file at `path` (its `<path>.outline` view, docs/views.md).
pub fn outline(fs: &Fs, path: &str, ctx: Ctx) -> Result<String> {
    components(path, true)?;
    let bytes = read_all(fs, &format!("{path}.outline"), ctx).map_err(|e| match e.errno {
        libc::ENOENT => Error::new(libc::ENOENT, format!("{path}: no such file")),
        _ => e,
    })?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_in_the_scratchpad() {
        assert!(components("notes/a.md", true).is_ok());
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a/%2e%2e/b",
            "%2E%2e%2Fetc",
            "a\0b",
        ] {
            let e = components(bad, false).unwrap_err();
            assert_eq!(e.errno, libc::EINVAL, "{bad:?}");
        }
        for view in ["MANIFEST", ".history/a", ".archive/x", "plan.md.outline"] {
            assert!(components(view, false).is_ok(), "{view} is readable");
            assert_eq!(components(view, true).unwrap_err().errno, libc::EINVAL);
        }
    }

    #[test]
    fn sections_by_heading_and_lines() {
        let md = b"# Plan\nintro\n## Step 1\none\n### detail\nd\n## Step 2\ntwo\n# Other\nx\n";
        assert_eq!(
            heading_section(md, "Step 1").unwrap(),
            b"## Step 1\none\n### detail\nd\n"
        );
        assert_eq!(
            heading_section(md, "## Step 2").unwrap(),
            b"## Step 2\ntwo\n"
        );
        assert_eq!(heading_section(md, "Other").unwrap(), b"# Other\nx\n");
        assert!(heading_section(md, "Step 3").is_none());
        assert!(heading_section(b"#hashtag\n", "hashtag").is_none());
        assert_eq!(lines(md, 2, 3), b"intro\n## Step 1\n");
        assert_eq!(lines(md, 10, 99), b"x\n");
        assert_eq!(lines(md, 11, 12), b"");
    }
}
