//! The MCP tools' operations over the filesystem core (issue 12): read (whole, a section,
//! a line range, or a window), write, append, replace and outline of a file at a path.
//! Each goes through the same core calls a process on the mount makes (lookup, create,
//! open, write, flush, release), so the gate, the commit path and provenance are the
//! mount's; nothing here decides what may be written. Errors are [`crate::error::Error`]
//! (an errno and a one-line reason, the text a refused tool call returns).

use crate::error::{Error, Result};
use crate::fs::{Ctx, Fs, Invalidation, ROOT};

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

/// [`Fs::lookup`] for a call that holds no kernel reference: the lookup count it adds
/// (FUSE protocol: the kernel's, until its `forget`) is given back at once, so that the
/// calls of an MCP session never keep a removed file in memory.
fn look(fs: &Fs, parent: u64, name: &[u8]) -> Result<crate::fs::Attr> {
    let a = fs.lookup(parent, name)?;
    fs.forget(a.ino, 1);
    Ok(a)
}

/// The inode at `path` for the caller of `ctx`, who must be allowed to search every
/// directory on the way ([`Fs::access`]: an MCP call does not pass the kernel's checks).
/// `ENOENT` ("no such file") when a component is missing.
pub fn resolve(fs: &Fs, path: &str, ctx: Ctx) -> Result<u64> {
    let mut ino = ROOT;
    let mut walked = String::new();
    for part in components(path, false)? {
        if ino != ROOT && fs.getattr(ino)?.kind != crate::store::Kind::Dir {
            return Err(Error::new(
                libc::ENOTDIR,
                format!("{path}: {walked} is not a directory"),
            ));
        }
        fs.access_named(ino, libc::X_OK, ctx, Some(&walked))?;
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(part);
        ino = look(fs, ino, part.as_bytes())
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
    read_window(fs, path, 0, SCAN_MAX as usize + 1, ctx).and_then(|(bytes, size)| {
        if size > SCAN_MAX {
            Err(Error::new(
                libc::EFBIG,
                format!(
                    "{path}: {size} bytes, more than a call reads whole ({SCAN_MAX}); read it with offset and limit"
                ),
            ))
        } else {
            Ok(bytes)
        }
    })
}

/// Most bytes of a file a call reads whole (64 MiB): to find a section or a line range,
/// to replace text, for the memory tool. A larger file is read by windows (`read` with
/// `offset` and `limit`).
pub const SCAN_MAX: u64 = 64 << 20;

/// At most `max` bytes of the file at `path` from byte `offset`, as the caller of `ctx`
/// reads it, and the file's size.
fn read_window(fs: &Fs, path: &str, offset: u64, max: usize, ctx: Ctx) -> Result<(Vec<u8>, u64)> {
    let ino = resolve(fs, path, ctx)?;
    // A view's mode and owner are its source file's (docs/views.md), so this check is
    // the one the kernel makes on the mount.
    fs.access_named(ino, libc::R_OK, ctx, Some(path))?;
    let (fh, _) = fs.open(ino, libc::O_RDONLY, ctx)?;
    let size = fs.attr_seen_by(ino, ctx).map(|a| a.size);
    let mut out = Vec::new();
    let r = loop {
        let want = (max - out.len()).min(CHUNK as usize) as u32;
        if want == 0 {
            break Ok(());
        }
        match fs.read(fh, offset.saturating_add(out.len() as u64), want) {
            Ok(b) if b.is_empty() => break Ok(()),
            Ok(b) => out.extend_from_slice(&b),
            Err(e) => break Err(e),
        }
    };
    let _ = fs.release(fh);
    r?;
    // A view's size is known once rendered: bytes read past it count, an offset past
    // the end does not (a file of 0 bytes read at 2^64 - 1 is still 0 bytes).
    let size = size?.max(offset.saturating_add(out.len() as u64) * u64::from(!out.is_empty()));
    Ok((out, size))
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
    let max = limit.unwrap_or(READ_MAX).min(READ_MAX);
    let (window, all);
    let (part, base, total): (&[u8], u64, u64) = match section {
        // A window of the file: only it is read (the file may be far larger).
        Section::Whole => {
            let (bytes, size) = read_window(fs, path, offset, max + 3, ctx)?;
            window = bytes;
            (&window, offset.min(size), size)
        }
        _ => {
            all = read_all(fs, path, ctx)?;
            let part = match section {
                Section::Heading(h) => heading_section(&all, h)
                    .ok_or_else(|| Error::new(libc::ENOENT, format!("{path}: no heading {h:?}")))?,
                Section::Lines(first, last) => {
                    if *first == 0 || last < first {
                        return Err(Error::new(
                            libc::EINVAL,
                            format!(
                                "{path}: lines {first}-{last}: a range is 1-based, first <= last"
                            ),
                        ));
                    }
                    lines(&all, *first, *last)
                }
                Section::Whole => unreachable!("handled above"),
            };
            let start = (offset.min(part.len() as u64)) as usize;
            (&part[start..], start as u64, part.len() as u64)
        }
    };
    // `part` starts at byte `base` of the selection of `total` bytes.
    let mut end = max.min(part.len());
    // Cut at a character boundary; a limit inside the first character still returns it
    // (so that reading on always advances).
    while end > 0 && end < part.len() && (part[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    if end == 0 && !part.is_empty() && max > 0 {
        end = 1;
        while end < part.len() && (part[end] & 0xC0) == 0x80 {
            end += 1;
        }
    }
    let next = base + end as u64;
    Ok(ReadResult {
        text: String::from_utf8_lossy(&part[..end]).into_owned(),
        total_bytes: total,
        next_offset: (next < total).then_some(next),
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
fn parent_of<'p>(fs: &Fs, path: &'p str, modes: Modes, ctx: Ctx) -> Result<(u64, &'p str)> {
    let parts = components(path, true)?;
    let (name, dirs) = parts.split_last().expect("components are never empty");
    let ino = if dirs.is_empty() {
        ROOT
    } else {
        make_dirs(fs, &dirs.join("/"), modes.dir, ctx)?
    };
    Ok((ino, name))
}

/// The modes (permission bits) a tool gives the files and directories it makes; the
/// umask is not applied (a call has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    /// A new file's.
    pub file: u32,
    /// A new directory's.
    pub dir: u32,
}

impl Modes {
    /// What `write` and `append` make: 0644 and 0755, as a shell with umask 022.
    pub const SHARED: Modes = Modes {
        file: 0o644,
        dir: 0o755,
    };
    /// What the memory tool makes: 0600 and 0700, the owner's only, as Anthropic's own
    /// backend (`anthropic` package, `BetaLocalFilesystemMemoryTool`).
    pub const PRIVATE: Modes = Modes {
        file: 0o600,
        dir: 0o700,
    };
}

/// The directory at `path`, made with its missing parents (`mkdir -p`, each new one with
/// mode `dir_mode`); its inode.
pub fn make_dirs(fs: &Fs, path: &str, dir_mode: u32, ctx: Ctx) -> Result<u64> {
    let mut ino = ROOT;
    for d in components(path, true)? {
        fs.access(ino, libc::X_OK, ctx)?;
        ino = match look(fs, ino, d.as_bytes()) {
            Ok(a) => a.ino,
            Err(e) if e.errno == libc::ENOENT => {
                fs.access(ino, libc::W_OK | libc::X_OK, ctx)?;
                let made = fs.mkdir(ino, d.as_bytes(), dir_mode, 0, ctx)?.ino;
                fs.forget(made, 1);
                fs.invalidate_kernel(Invalidation::Entry(ino, d.as_bytes().to_vec()));
                made
            }
            Err(e) => return Err(e),
        };
    }
    Ok(ino)
}

/// Opens (creating when missing, with its directories), writes `data` at `offset` (or at
/// the end with `append`), and closes, as `printf > path` or `>> path` would: one
/// version, or the gate's refusal (the previous version stays). Returns the file's size.
fn put(fs: &Fs, path: &str, data: &[u8], append: bool, modes: Modes, ctx: Ctx) -> Result<u64> {
    let (parent, name) = parent_of(fs, path, modes, ctx)?;
    let flags = libc::O_WRONLY
        | if append {
            libc::O_APPEND
        } else {
            libc::O_TRUNC
        };
    fs.access(parent, libc::X_OK, ctx)?;
    let fh = match look(fs, parent, name.as_bytes()) {
        Ok(a) => {
            fs.access(a.ino, libc::W_OK, ctx)?;
            fs.open(a.ino, flags, ctx)?.0
        }
        Err(e) if e.errno == libc::ENOENT => {
            fs.access(parent, libc::W_OK | libc::X_OK, ctx)?;
            let (attr, fh, _) = fs.create(parent, name.as_bytes(), modes.file, 0, flags, ctx)?;
            fs.forget(attr.ino, 1);
            fh
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
    let ino = look(fs, parent, name.as_bytes())?.ino;
    // Processes on the mount see the new name and size at once.
    fs.invalidate_kernel(Invalidation::Entry(parent, name.as_bytes().to_vec()));
    fs.invalidate_kernel(Invalidation::Attr(ino));
    Ok(fs.getattr(ino)?.size)
}

/// The entries of directory `ino` that are the scratchpad's own (no view, no `.` or
/// `..`), sorted by name, hidden ones (a leading `.`) only when `hidden`. The caller of
/// `ctx` must be allowed to read and search the directory (`EACCES` otherwise).
pub fn entries(
    fs: &Fs,
    ino: u64,
    hidden: bool,
    ctx: Ctx,
) -> Result<Vec<(String, u64, crate::store::Kind)>> {
    fs.access(ino, libc::R_OK | libc::X_OK, ctx)?;
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let batch = fs.readdir(ino, offset, 512)?;
        let Some(last) = batch.last() else { break };
        offset = last.next_offset;
        for e in batch {
            if crate::views::View::of(e.ino).is_some() || e.name == b"." || e.name == b".." {
                continue;
            }
            if !hidden && e.name.starts_with(b".") {
                continue;
            }
            out.push((String::from_utf8_lossy(&e.name).into_owned(), e.ino, e.kind));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Removes the file or the whole directory at `p` (inode `ino`), hidden files too, as
/// `rm -r` would, each through the gate; every file keeps its history in `.archive` and
/// can be restored. Returns how many files and directories went.
pub fn remove_tree(fs: &Fs, p: &str, ino: u64, kind: crate::store::Kind, ctx: Ctx) -> Result<u64> {
    let mut gone = 0;
    if kind == crate::store::Kind::Dir {
        for (name, child, k) in entries(fs, ino, true, ctx)? {
            gone += remove_tree(fs, &format!("{p}/{name}"), child, k, ctx)?;
        }
    }
    let (dir, name) = p.rsplit_once('/').unwrap_or(("", p));
    let parent = match dir {
        "" => ROOT,
        d => resolve(fs, d, ctx)?,
    };
    fs.access(parent, libc::W_OK | libc::X_OK, ctx)?;
    fs.remove(
        parent,
        name.as_bytes(),
        kind == crate::store::Kind::Dir,
        ctx,
    )?;
    fs.invalidate_kernel(Invalidation::Entry(parent, name.as_bytes().to_vec()));
    Ok(gone + 1)
}

/// `delete`: removes the file at `path`, or the directory there: empty, or with
/// everything in it when `recursive` (`ENOTEMPTY` otherwise, saying so). Returns how many
/// files and directories went; each is archived and restorable as an unlink's is.
pub fn delete(fs: &Fs, path: &str, recursive: bool, ctx: Ctx) -> Result<u64> {
    components(path, true)?;
    let ino = resolve(fs, path, ctx)?;
    let kind = fs.getattr(ino)?.kind;
    if kind == crate::store::Kind::Dir && !recursive && !entries(fs, ino, true, ctx)?.is_empty() {
        return Err(Error::new(
            libc::ENOTEMPTY,
            format!("{path}: directory not empty (recursive: true deletes it with all it holds)"),
        ));
    }
    remove_tree(fs, path, ino, kind, ctx)
}

/// `mkdir`: the directory at `path` with its missing parents (`mkdir -p`, 0755).
/// Returns whether it was made (`false`: it was there). `EEXIST` when a file is there.
pub fn mkdir(fs: &Fs, path: &str, ctx: Ctx) -> Result<bool> {
    match resolve(fs, path, ctx) {
        Ok(ino) if fs.getattr(ino)?.kind == crate::store::Kind::Dir => Ok(false),
        Ok(_) => Err(Error::new(libc::EEXIST, format!("{path}: a file is there"))),
        Err(e) if e.errno == libc::ENOENT => {
            make_dirs(fs, path, Modes::SHARED.dir, ctx)?;
            Ok(true)
        }
        Err(e) => Err(e),
    }
}

/// `move`: renames the file or directory at `from` to `to`, making `to`'s missing
/// directories; `EEXIST` when something is at `to`, unless `replace` (a file then
/// replaces a file, as rename(2) does; its earlier content stays in history).
pub fn move_path(fs: &Fs, from: &str, to: &str, replace: bool, ctx: Ctx) -> Result<()> {
    components(from, true)?;
    components(to, true)?;
    resolve(fs, from, ctx)?;
    let (from_dir, from_name) = parent_of(fs, from, Modes::SHARED, ctx)?;
    let (to_dir, to_name) = parent_of(fs, to, Modes::SHARED, ctx)?;
    for dir in [from_dir, to_dir] {
        fs.access(dir, libc::W_OK | libc::X_OK, ctx)?;
    }
    let flags = if replace { 0 } else { libc::RENAME_NOREPLACE };
    fs.rename(
        from_dir,
        from_name.as_bytes(),
        to_dir,
        to_name.as_bytes(),
        flags,
        ctx,
    )
    .map_err(|e| match e.errno {
        libc::EEXIST => Error::new(
            libc::EEXIST,
            format!("{to}: already exists (replace: true moves over it)"),
        ),
        _ => e,
    })?;
    fs.invalidate_kernel(Invalidation::Entry(from_dir, from_name.as_bytes().to_vec()));
    fs.invalidate_kernel(Invalidation::Entry(to_dir, to_name.as_bytes().to_vec()));
    Ok(())
}

/// Most paths one `glob` returns.
pub const GLOB_MAX: usize = 1000;

/// A glob over paths from the root, as `glob` and `search` take it: `*` and `?` within a
/// name, `**` across directories, `{a,b}`, `[ab]` (globset, `/` matched only literally).
/// `EINVAL` naming the pattern when it does not parse.
pub fn path_glob(pattern: &str) -> Result<globset::GlobMatcher> {
    Ok(globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| Error::new(libc::EINVAL, format!("pattern {pattern:?}: {e}")))?
        .compile_matcher())
}

/// Gives `each` the path of every file (not directory) whose path from the root matches
/// `pattern` (every file when `None`), in no order, until `each` returns `false`. Walks
/// only below the pattern's literal leading directories, and only directories the
/// caller of `ctx` may read and search (others are passed over, as `find` passes them).
pub fn each_file(
    fs: &Fs,
    pattern: Option<&str>,
    ctx: Ctx,
    mut each: impl FnMut(String) -> bool,
) -> Result<()> {
    let matcher = pattern.map(path_glob).transpose()?;
    // Every literal component before the first wildcard is a directory; a pattern
    // without one names a file, whose directory is the start.
    let start = pattern.map_or(String::new(), |pattern| {
        let parts = pattern.split('/').count();
        let literal: Vec<&str> = pattern
            .split('/')
            .take_while(|c| !c.contains(['*', '?', '[', '{', '\\']))
            .collect();
        let dirs = if literal.len() == parts {
            literal.len() - 1
        } else {
            literal.len()
        };
        literal[..dirs].join("/")
    });
    let root = if start.is_empty() {
        ROOT
    } else {
        match resolve(fs, &start, ctx) {
            Ok(ino) => ino,
            Err(e) if e.errno == libc::ENOENT || e.errno == libc::ENOTDIR => return Ok(()),
            Err(e) => return Err(e),
        }
    };
    let mut walk = vec![(root, start)];
    while let Some((dir, rel)) = walk.pop() {
        let Ok(list) = entries(fs, dir, true, ctx) else {
            continue;
        };
        for (name, ino, kind) in list {
            let p = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if kind == crate::store::Kind::Dir {
                walk.push((ino, p));
            } else if matcher.as_ref().is_none_or(|m| m.is_match(&p)) && !each(p) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Whether [`each_file`]'s walk reaches the file at `path` for the caller of `ctx`: every
/// directory on the way (the root too) readable and searchable by it, every name there.
pub fn walkable(fs: &Fs, path: &str, ctx: Ctx) -> bool {
    let mut ino = ROOT;
    let parts: Vec<&str> = path.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        if fs.access(ino, libc::R_OK | libc::X_OK, ctx).is_err() {
            return false;
        }
        match look(fs, ino, part.as_bytes()) {
            Ok(a) if i + 1 == parts.len() || a.kind == crate::store::Kind::Dir => ino = a.ino,
            _ => return false,
        }
    }
    true
}

/// `glob`: the files whose path from the root matches `pattern` ([`path_glob`]), sorted,
/// at most [`GLOB_MAX`] ([`each_file`]'s walk). Returns the paths and whether more
/// matched. `EINVAL` for a bad pattern.
pub fn glob(fs: &Fs, pattern: &str, ctx: Ctx) -> Result<(Vec<String>, bool)> {
    let mut found = Vec::new();
    let mut more = false;
    each_file(fs, Some(pattern), ctx, |p| {
        if found.len() == GLOB_MAX {
            more = true;
            return false;
        }
        found.push(p);
        true
    })?;
    found.sort();
    Ok((found, more))
}

/// Replaces the file at `path` with `content` (creating it and its directories). Returns
/// its size in bytes.
pub fn write(fs: &Fs, path: &str, content: &[u8], ctx: Ctx) -> Result<u64> {
    put(fs, path, content, false, Modes::SHARED, ctx)
}

/// [`write`] for the memory tool: what it makes is the owner's only ([`Modes::PRIVATE`]).
pub fn write_private(fs: &Fs, path: &str, content: &[u8], ctx: Ctx) -> Result<u64> {
    put(fs, path, content, false, Modes::PRIVATE, ctx)
}

/// Appends `content` to the file at `path` (creating it). Returns its size in bytes.
pub fn append(fs: &Fs, path: &str, content: &[u8], ctx: Ctx) -> Result<u64> {
    put(fs, path, content, true, Modes::SHARED, ctx)
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
    if components(path, true).is_err() {
        components(path, false)?;
        return Err(Error::new(
            libc::EINVAL,
            format!("{path}: a view has no outline"),
        ));
    }
    // What a file holds is the file's to give: its outline needs leave to read it.
    let ino = resolve(fs, path, ctx)?;
    fs.access_named(ino, libc::R_OK, ctx, Some(path))?;
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

/// One tool as `tools/list` describes it (MCP 2025-11-25 and 2026-07-28, "Tools": name,
/// title, description, `inputSchema`, `outputSchema`, annotations).
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// Its name.
    pub name: &'static str,
    /// A short title a client shows a person.
    pub title: &'static str,
    /// One line an LLM understands.
    pub description: &'static str,
    /// Its arguments' JSON schema (an object schema; every property has a description).
    pub schema: serde_json::Value,
    /// The JSON schema of its `structuredContent`, for a tool that returns one (a client
    /// validates results against it).
    pub output: Option<serde_json::Value>,
    /// It changes nothing (listed with `--read-only`; `readOnlyHint`).
    pub reads_only: bool,
    /// It may change or remove what is there (`destructiveHint`; the earlier content
    /// stays in history, but the file a reader sees is different).
    pub destructive: bool,
    /// Calling it twice with the same arguments changes nothing more (`idempotentHint`).
    pub idempotent: bool,
}

impl ToolSpec {
    /// The annotations a client judges a tool by before calling it: every tool works on
    /// this scratchpad only (`openWorldHint: false`).
    pub fn annotations(&self) -> serde_json::Value {
        serde_json::json!({
            "title": self.title,
            "readOnlyHint": self.reads_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": false,
        })
    }
}

/// An object schema with `required` keys and `props` (name, schema) for an output schema.
fn object(required: &[&str], props: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "type": "object", "required": required, "properties": props })
}

/// The tools, in listing order (issue 12 item 2; annotations, titles, output schemas and
/// argument descriptions, issue 33 item 2).
pub fn catalog() -> Vec<ToolSpec> {
    use serde_json::json;
    let path = json!({ "type": "string", "description": "path from the scratchpad's root, e.g. plan.md or notes/a.md" });
    let step =
        json!({ "type": "integer", "description": "the agent's step, recorded with the change" });
    let content = json!({ "type": "string", "description": "the text to write (UTF-8)" });
    let version = |what: &str| json!({ "type": "integer", "minimum": 1, "description": what });
    let int = |what: &str| json!({ "type": "integer", "description": what });
    let string = |what: &str| json!({ "type": "string", "description": what });
    let maybe_int = |what: &str| json!({ "type": ["integer", "null"], "description": what });
    let maybe_string = |what: &str| json!({ "type": ["string", "null"], "description": what });
    let objects =
        |what: &str| json!({ "type": "array", "items": { "type": "object" }, "description": what });
    let bytes_out = object(
        &["bytes"],
        json!({ "bytes": int("the file's size after the change, in bytes") }),
    );
    let window_out = |with_text: bool| {
        let mut props = json!({
            "total_bytes": int("bytes in the whole selection"),
            "next_offset": maybe_int("the offset to read on from, or null at the end"),
        });
        let mut required = vec!["total_bytes", "next_offset"];
        if with_text {
            props["text"] = string("the bytes returned (UTF-8, invalid bytes replaced)");
            required.push("text");
        }
        object(&required, props)
    };
    let checkpoint_out = object(
        &["id", "name", "point", "writer", "uid", "note", "auto"],
        json!({
            "id": int("the checkpoint's id"),
            "name": string("its name"),
            "point": { "type": "object", "description": "where in history it points (sequence numbers and time_ns)" },
            "writer": string("who took it"),
            "uid": int("the uid of the process that took it"),
            "note": maybe_string("the note given with it"),
            "auto": { "type": "boolean", "description": "taken by a rollback, of the state it replaced" },
        }),
    );
    let tool =
        |name, title, description, schema, output, reads_only, destructive, idempotent| ToolSpec {
            name,
            title,
            description,
            schema,
            output,
            reads_only,
            destructive,
            idempotent,
        };
    vec![
        tool(
            "list",
            "List the scratchpad",
            "List the scratchpad's files (path, bytes, ~tokens, version, writer, age) with recent refusals and restorable content.",
            json!({ "type": "object", "properties": {} }),
            Some(object(
                &[
                    "files",
                    "unlisted",
                    "refusals",
                    "refusals_total",
                    "restorable",
                    "checkpoints",
                    "history_erased",
                ],
                json!({
                    "files": { "type": "array", "description": "the files, newest change first", "items": object(
                        &["path", "bytes", "tokens", "version", "writer", "time_ns"],
                        json!({
                            "path": string("path from the root"),
                            "bytes": int("size in bytes"),
                            "tokens": maybe_int("about how many tokens reading it costs (null: a binary file)"),
                            "version": int("its current version"),
                            "writer": string("who wrote that version"),
                            "step": maybe_int("the step it was written at"),
                            "time_ns": int("when, in nanoseconds since the Unix epoch"),
                            "age_s": int("seconds since then"),
                            "last_read": { "type": ["object", "null"], "description": "the version this caller last read, if any" },
                        }),
                    ) },
                    "unlisted": int("files not listed (past the listing's length, or in directories the caller may not read)"),
                    "refusals": objects("recent refused writes with their reasons"),
                    "refusals_total": int("refused writes on record"),
                    "restorable": objects("removed files that can be restored"),
                    "checkpoints": objects("recent checkpoints"),
                    "history_erased": objects("history erased by gc, redact or the retention policy"),
                    "usage": { "type": ["object", "null"], "description": "what the pad holds against its quota (bytes, quota_bytes, versions, forgotten_by_policy, files, quota_files), when the rules set a quota or a retention limit" },
                }),
            )),
            true,
            false,
            true,
        ),
        tool(
            "read",
            "Read a file",
            "Read a file, or only a section (a Markdown heading's text) or a line range; long results are cut with next_offset to continue.",
            json!({ "type": "object", "required": ["path"], "properties": {
                "path": path,
                "section": string("a heading's text: return only that section"),
                "lines": string("a line range FIRST-LAST (1-based), e.g. 10-40"),
                "offset": { "type": "integer", "minimum": 0, "description": "byte offset into the selection (from next_offset)" },
                "limit": { "type": "integer", "minimum": 1, "description": "most bytes to return (at most 32768)" } } }),
            Some(window_out(true)),
            true,
            false,
            true,
        ),
        tool(
            "outline",
            "Outline a file",
            "The outline of a file: its headings, keys or shape with sizes, for a handful of tokens.",
            json!({ "type": "object", "required": ["path"], "properties": { "path": path } }),
            None,
            true,
            false,
            true,
        ),
        tool(
            "write",
            "Write a file",
            "Create or replace a file with the given content (one new version).",
            json!({ "type": "object", "required": ["path", "content"], "properties": {
                "path": path, "content": content, "step": step } }),
            Some(bytes_out.clone()),
            false,
            true,
            true,
        ),
        tool(
            "append",
            "Append to a file",
            "Append text to the end of a file, creating it if missing: a cheap incremental note.",
            json!({ "type": "object", "required": ["path", "content"], "properties": {
                "path": path, "content": string("the text to add at the end (UTF-8; include the newline)"), "step": step } }),
            Some(bytes_out),
            false,
            false,
            false,
        ),
        tool(
            "replace",
            "Replace text in a file",
            "Replace an exact string in a file without re-sending it; it must occur exactly once unless count is given (0: all).",
            json!({ "type": "object", "required": ["path", "find", "with"], "properties": {
                "path": path,
                "find": string("the exact text to find (not a pattern)"),
                "with": string("the text to put in its place"),
                "count": { "type": "integer", "minimum": 0, "description": "how many occurrences must be there and are replaced (0: all); without it, exactly one" },
                "step": step } }),
            Some(object(
                &["changed"],
                json!({ "changed": int("occurrences replaced") }),
            )),
            false,
            true,
            false,
        ),
        tool(
            "history",
            "A file's versions",
            "Every version of a file, oldest first, with who wrote it, when, at which step, its size and blake3.",
            json!({ "type": "object", "required": ["path"], "properties": { "path": path } }),
            Some(object(
                &["versions"],
                json!({ "versions": { "type": "array", "description": "oldest first", "items": object(
                &["version", "bytes", "writer", "step", "time_ns", "blake3"],
                json!({
                    "version": int("its number, from 1"),
                    "bytes": int("its size in bytes"),
                    "writer": string("who wrote it"),
                    "step": maybe_int("the step it was written at"),
                    "time_ns": int("when, in nanoseconds since the Unix epoch"),
                    "blake3": string("the blake3 digest of its content, hex"),
                }),
            ) } }),
            )),
            true,
            false,
            true,
        ),
        tool(
            "read_version",
            "Read an earlier version",
            "Read version N of a file as it was (from history), capped like read.",
            json!({ "type": "object", "required": ["path", "version"], "properties": {
                "path": path,
                "version": version("the version's number (history lists them)"),
                "offset": { "type": "integer", "minimum": 0, "description": "byte offset to start at (from next_offset)" },
                "limit": { "type": "integer", "minimum": 1, "description": "most bytes to return (at most 32768)" } } }),
            Some(window_out(false)),
            true,
            false,
            true,
        ),
        tool(
            "diff",
            "Compare two versions",
            "Unified diff between two versions of a file (to: the current one when omitted).",
            json!({ "type": "object", "required": ["path", "from"], "properties": {
                "path": path,
                "from": version("the older version's number"),
                "to": version("the newer version's number (default: the current one)") } }),
            None,
            true,
            false,
            true,
        ),
        tool(
            "memory",
            "Memory (Anthropic's memory tool)",
            "Anthropic's memory tool over /memories: view, create, str_replace, insert, delete, rename (its arguments and result texts).",
            json!({ "type": "object", "required": ["command"], "properties": {
                "command": { "type": "string", "enum": ["view", "create", "str_replace", "insert", "delete", "rename"], "description": "what to do" },
                "path": string("a path under /memories (view, create, str_replace, insert, delete)"),
                "view_range": { "type": "array", "items": { "type": "integer" }, "minItems": 2, "maxItems": 2, "description": "view: the first and last line to show, 1-based; -1 as the last means to the end" },
                "file_text": string("create: the file's whole content"),
                "old_str": string("str_replace: the exact text to find, once in the file"),
                "new_str": string("str_replace: the text to put in its place"),
                "insert_line": { "type": "integer", "minimum": 0, "description": "insert: the line after which to insert (0: at the top)" },
                "insert_text": string("insert: the text to insert"),
                "old_path": string("rename: the path under /memories to move"),
                "new_path": string("rename: the path under /memories to move it to") } }),
            None,
            false,
            true,
            false,
        ),
        tool(
            "why",
            "Where a value came from",
            "Where a value came from: the version that set a file (or one JSON key of it), who wrote it at which step, and the versions that writer had read, recursively.",
            json!({ "type": "object", "required": ["path"], "properties": {
                "path": path,
                "key": string("a JSON key, dotted for nested keys (order.total_cents)"),
                "depth": { "type": "integer", "minimum": 0, "maximum": 16, "description": "levels of inputs to follow (default 3)" } } }),
            Some(object(
                &["path", "key", "value", "lineage"],
                json!({
                    "path": string("the path asked about"),
                    "key": maybe_string("the key asked about"),
                    "value": maybe_string("the key's current value, as JSON text"),
                    "lineage": { "type": "object", "description": "the version that set it (writer, step, time_ns, exe, tgid) and its inputs, each a lineage of its own" },
                }),
            )),
            true,
            false,
            true,
        ),
        tool(
            "ground",
            "Check a reply's numbers",
            "Check a reply before sending it: for every number and identifier in the text, where the scratchpad holds it; numbers with no source (or only a model's) are flagged.",
            json!({ "type": "object", "required": ["text"], "properties": {
                "text": string("the reply to check") } }),
            Some(object(
                &["tokens", "ungrounded", "skipped"],
                json!({
                    "tokens": objects("each number or identifier: its text, its status (sourced, asserted by a model, unsourced) and its sources"),
                    "ungrounded": { "type": "boolean", "description": "some number has no source but a model" },
                    "skipped": objects("files not searched, and why"),
                }),
            )),
            true,
            false,
            true,
        ),
        tool(
            "checkpoint",
            "Take a checkpoint",
            "Take a checkpoint: name the whole scratchpad's state now (a pointer into history, no copy). Its tree can then be read under .checkpoints/NAME/, compared, and rolled back to.",
            json!({ "type": "object", "required": ["name"], "properties": {
                "name": string("printable, no '/', unique"),
                "note": string("why, kept with it"), "step": step } }),
            Some(checkpoint_out.clone()),
            false,
            false,
            false,
        ),
        tool(
            "checkpoints",
            "List checkpoints",
            "List the checkpoints, oldest first: name, time, who took it, note.",
            json!({ "type": "object", "properties": {} }),
            Some(object(
                &["checkpoints"],
                json!({ "checkpoints": {
                "type": "array", "description": "oldest first", "items": checkpoint_out } }),
            )),
            true,
            false,
            true,
        ),
        tool(
            "rollback",
            "Roll back to a checkpoint",
            "Return the whole scratchpad to a checkpoint (changed files get their old content as new versions, deleted files come back, files created since are archived); a safety checkpoint of the state before is taken first. Root, the user who mounted, or a writer the rules allow.",
            json!({ "type": "object", "required": ["name"], "properties": {
                "name": string("the checkpoint to return to (checkpoints lists them)"), "step": step } }),
            Some(object(
                &[
                    "checkpoint",
                    "changed",
                    "restored",
                    "removed",
                    "moved",
                    "reattributed",
                    "safety",
                ],
                json!({
                    "checkpoint": string("the checkpoint rolled back to"),
                    "changed": int("files given their content at the checkpoint again"),
                    "restored": int("files and directories deleted since, brought back"),
                    "removed": int("files and directories created since, removed (kept in .archive)"),
                    "moved": int("nodes moved back to where they were"),
                    "reattributed": int("nodes whose mode or owner was set back"),
                    "safety": string("the checkpoint taken of the state before"),
                }),
            )),
            false,
            true,
            true,
        ),
        tool(
            "search",
            "Search file contents",
            "Search the live files for a literal text (or a regex), like grep -n: each match with its path, line number and line; `path` narrows it to files matching a glob.",
            json!({ "type": "object", "required": ["pattern"], "properties": {
                "pattern": string("the text to find (a regular expression with regex: true)"),
                "regex": { "type": "boolean", "description": "pattern is a regular expression (Rust regex syntax); default false: a literal" },
                "ignore_case": { "type": "boolean", "description": "match letters in either case; default false" },
                "path": string("only files whose path matches this glob, e.g. notes/** or *.md"),
                "limit": { "type": "integer", "minimum": 1, "maximum": 1000, "description": "most matches to return (default 100)" },
                "history": { "type": "boolean", "description": "search every version of the files, not only the current one: each matching line once, at the first version that held it, with that version's number, writer and time; default false" } } }),
            Some(object(
                &["matches", "truncated", "files_searched"],
                json!({
                    "matches": { "type": "array", "description": "in path order, then line order", "items": object(
                        &["path", "line", "text"],
                        json!({
                            "path": string("the file's path from the root"),
                            "line": int("the line's number, from 1"),
                            "text": string("the line (at most 500 bytes of it)"),
                            "version": int("with history: the first version that held the line"),
                            "writer": string("with history: that version's writer"),
                            "time_ns": int("with history: that version's time, ns since the epoch"),
                        }),
                    ) },
                    "truncated": { "type": "boolean", "description": "more matches than limit" },
                    "files_searched": int("files read"),
                }),
            )),
            true,
            false,
            true,
        ),
        tool(
            "glob",
            "Find files by name",
            "List the files whose path matches a glob: * and ? within a name, ** across directories, {a,b}; e.g. notes/**/*.md.",
            json!({ "type": "object", "required": ["pattern"], "properties": {
                "pattern": string("a glob over paths from the scratchpad's root, e.g. **/*.json") } }),
            Some(object(
                &["paths", "truncated"],
                json!({
                    "paths": { "type": "array", "items": { "type": "string" }, "description": "matching files, sorted (at most 1000)" },
                    "truncated": { "type": "boolean", "description": "more files matched than were returned" },
                }),
            )),
            true,
            false,
            true,
        ),
        tool(
            "mkdir",
            "Make a directory",
            "Make a directory with its missing parents (mkdir -p); a directory already there is fine.",
            json!({ "type": "object", "required": ["path"], "properties": { "path": path, "step": step } }),
            Some(object(
                &["made"],
                json!({ "made": { "type": "boolean", "description": "false: it was already there" } }),
            )),
            false,
            false,
            true,
        ),
        tool(
            "delete",
            "Delete a file or directory",
            "Delete a file, or a directory (recursive: true for one that is not empty). Each file is archived and can be restored; nothing is lost.",
            json!({ "type": "object", "required": ["path"], "properties": {
                "path": path,
                "recursive": { "type": "boolean", "description": "delete a directory with everything in it; default false" },
                "step": step } }),
            Some(object(
                &["removed"],
                json!({ "removed": int("files and directories deleted") }),
            )),
            false,
            true,
            false,
        ),
        tool(
            "move",
            "Move or rename",
            "Move or rename a file or directory, making the destination's directories; refused when something is there unless replace: true. Its history moves with it.",
            json!({ "type": "object", "required": ["from", "to"], "properties": {
                "from": string("the path to move"),
                "to": string("its new path"),
                "replace": { "type": "boolean", "description": "move over a file already at `to` (its content stays in history); default false" },
                "step": step } }),
            None,
            false,
            true,
            false,
        ),
        tool(
            "restore",
            "Restore a version",
            "Make version N of a file current again (as a new version; nothing is lost).",
            json!({ "type": "object", "required": ["path", "version"], "properties": {
                "path": path, "version": version("the version to make current (history lists them)"), "step": step } }),
            None,
            false,
            true,
            true,
        ),
    ]
}

/// What a tool call returns: its text, its structured result, and whether it failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The text shown to the model (on failure: the one-line reason).
    pub text: String,
    /// The structured result (JSON), when the tool has one.
    pub structured: Option<serde_json::Value>,
    /// The call failed (refused, bad arguments, no such file): MCP `isError: true`.
    pub is_error: bool,
}

impl Outcome {
    /// A result.
    pub fn ok(text: String, structured: Option<serde_json::Value>) -> Outcome {
        Outcome {
            text,
            structured,
            is_error: false,
        }
    }
    /// A failure: the reason as the text, the errno in the structured result.
    pub fn error(e: Error) -> Outcome {
        Outcome {
            text: e.reason,
            structured: Some(serde_json::json!({ "errno": e.errno })),
            is_error: true,
        }
    }
}

/// The call's `step` argument, if any.
pub fn step_of(args: &serde_json::Value) -> Option<i64> {
    args.get("step").and_then(serde_json::Value::as_i64)
}

/// Runs tool `name` with `args` on `fs` for the caller of `ctx` ([`Fs::acting_as`] has set
/// who that is); `read_only` refuses the tools that change something. Never panics on bad
/// arguments: they are an error outcome saying what is wrong.
/// The internal call a resource watcher makes before it compares the scratchpad again
/// (not a tool: no client lists it): `{"generation": N}`, a number that changes whenever
/// anything in the tree may have ([`Fs::change_generation`]), so that an idle scratchpad
/// costs a watcher nothing but this. It tells a caller only that something changed, not
/// what or where (docs/security.md).
pub const CHANGE_MARK: &str = "_change_mark";

pub fn call(
    fs: &Fs,
    caller: &crate::identity::Caller,
    name: &str,
    args: &serde_json::Value,
    read_only: bool,
    ctx: Ctx,
) -> Outcome {
    if name == CHANGE_MARK {
        return Outcome::ok(
            String::new(),
            Some(serde_json::json!({ "generation": fs.change_generation() })),
        );
    }
    let spec = catalog().into_iter().find(|t| t.name == name);
    let path = args.get("path").and_then(|p| p.as_str()).unwrap_or("");
    // The call's own checks, before the core: refused and recorded here.
    let refused = match spec {
        None => Some(Error::new(libc::EINVAL, format!("no tool named {name:?}"))),
        Some(t) if read_only && !t.reads_only => Some(Error::new(
            libc::EROFS,
            format!("{name}: this server is read-only (scratchfs mcp --read-only)"),
        )),
        Some(t) => too_long(args).or_else(|| match args.get("path").filter(|p| !p.is_null()) {
            Some(p) if t.name != "memory" && !p.is_string() => Some(Error::new(
                libc::EINVAL,
                format!("argument \"path\" must be a string, got {p}"),
            )),
            Some(_) if t.name != "memory" => components(path, !t.reads_only).err(),
            _ if t.name == "move" => ["from", "to"].iter().find_map(|k| {
                args.get(*k)
                    .and_then(|v| v.as_str())
                    .and_then(|p| components(p, true).err())
            }),
            _ => None,
        }),
    };
    if let Some(e) = refused {
        fs.record_remote_refusal(path, caller, &e);
        return Outcome::error(e);
    }
    run(fs, name, args, ctx).unwrap_or_else(Outcome::error)
}

/// Most bytes of one string argument (4 MiB): a tool call's text is the model's output,
/// and a larger one is refused whole rather than half stored (docs/mcp.md).
pub const ARG_MAX: usize = 4 << 20;

/// `EFBIG` for a string argument over [`ARG_MAX`].
fn too_long(args: &serde_json::Value) -> Option<Error> {
    let obj = args.as_object()?;
    obj.iter().find_map(|(k, v)| {
        let n = v.as_str()?.len();
        (n > ARG_MAX).then(|| {
            Error::new(
                libc::EFBIG,
                format!("argument {k:?} of {n} bytes: at most {ARG_MAX} bytes per call (append in parts)"),
            )
        })
    })
}

fn arg_str<'a>(args: &'a serde_json::Value, key: &str) -> Result<&'a str> {
    match args.get(key) {
        Some(serde_json::Value::String(s)) => Ok(s),
        None | Some(serde_json::Value::Null) => Err(Error::new(
            libc::EINVAL,
            format!("missing string argument {key:?}"),
        )),
        Some(other) => Err(Error::new(
            libc::EINVAL,
            format!("argument {key:?} must be a string, got {other}"),
        )),
    }
}

/// A boolean argument, `false` when absent. `EINVAL` for another type.
fn arg_bool(args: &serde_json::Value, key: &str) -> Result<bool> {
    match args.get(key) {
        None | Some(serde_json::Value::Null) => Ok(false),
        Some(serde_json::Value::Bool(b)) => Ok(*b),
        Some(other) => Err(Error::new(
            libc::EINVAL,
            format!("argument {key:?} must be true or false, got {other}"),
        )),
    }
}

/// A version number argument (1 to 2^63 - 1).
fn arg_version(args: &serde_json::Value, key: &str) -> Result<i64> {
    match arg_u64(args, key)? {
        Some(n) if n >= 1 && n <= i64::MAX as u64 => Ok(n as i64),
        _ => Err(Error::new(
            libc::EINVAL,
            format!("argument {key:?} must be a version number (an integer from 1)"),
        )),
    }
}

/// A `limit` argument: at least 1.
fn arg_limit(args: &serde_json::Value) -> Result<Option<usize>> {
    match arg_u64(args, "limit")? {
        Some(0) => Err(Error::new(
            libc::EINVAL,
            "argument \"limit\" must be at least 1",
        )),
        l => Ok(l.map(|l| l.min(READ_MAX as u64) as usize)),
    }
}

fn arg_u64(args: &serde_json::Value, key: &str) -> Result<Option<u64>> {
    match args.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            Error::new(
                libc::EINVAL,
                format!("argument {key:?} must be a non-negative integer"),
            )
        }),
    }
}

/// Clears the keys shown for an input the caller of `ctx` may not read (their values are
/// that version's content: [`Fs::may_read_version`], the guard of every old byte),
/// through the lineage tree.
fn hide_unreadable_keys(fs: &Fs, n: &mut crate::lineage::why::Node, ctx: Ctx) {
    if !n.keys.is_empty() && fs.may_read_version(n.version.id, ctx, "").is_err() {
        n.keys.clear();
    }
    for i in &mut n.inputs {
        hide_unreadable_keys(fs, i, ctx);
    }
}

/// The live lineage (`files.id`) of the file at `path`.
/// The live lineage of the file at `path`, which the caller of `ctx` may read.
pub fn file_id(fs: &Fs, path: &str, ctx: Ctx) -> Result<i64> {
    let ino = resolve(fs, path, ctx)?;
    fs.access_named(ino, libc::R_OK, ctx, Some(path))?;
    fs.store()
        .lineages(path)?
        .into_iter()
        .find(|l| l.path == path && l.deleted_ns.is_none())
        .map(|l| l.file_id)
        .ok_or_else(|| Error::new(libc::ENOENT, format!("{path}: no version yet")))
}

/// The content of version `n` of the file at `path`.
fn version_bytes(fs: &Fs, path: &str, n: i64, ctx: Ctx) -> Result<Vec<u8>> {
    let v = fs
        .store()
        .versions(file_id(fs, path, ctx)?)?
        .into_iter()
        .find(|v| v.number == n)
        .ok_or_else(|| Error::new(libc::ENOENT, format!("{path}: no version {n}")))?;
    fs.may_read_version(v.id, ctx, &format!("{path}@{n}"))?;
    if v.content.len > SCAN_MAX {
        return Err(Error::new(
            libc::EFBIG,
            format!(
                "{path}@{n}: {} bytes, more than a call reads whole ({SCAN_MAX})",
                v.content.len
            ),
        ));
    }
    let mut buf = vec![0u8; v.content.len as usize];
    let got = fs.store().read(v.content, 0, &mut buf)?;
    buf.truncate(got);
    Ok(buf)
}

fn run(fs: &Fs, name: &str, args: &serde_json::Value, ctx: Ctx) -> Result<Outcome> {
    use serde_json::json;
    let path = || arg_str(args, "path");
    Ok(match name {
        "list" => {
            let text = read_all(fs, "MANIFEST", ctx)?;
            let text = String::from_utf8_lossy(&text).into_owned();
            Outcome::ok(text, Some(fs.listing(ctx)?))
        }
        "read" => {
            let section = match (
                args.get("section").and_then(|v| v.as_str()),
                args.get("lines").and_then(|v| v.as_str()),
            ) {
                (Some(_), Some(_)) => {
                    return Err(Error::new(libc::EINVAL, "give section or lines, not both"));
                }
                (Some(h), None) => Section::Heading(h.to_string()),
                (None, Some(l)) => {
                    let (a, b) = l.split_once('-').unwrap_or((l, l));
                    let n = |s: &str| {
                        s.trim().parse::<usize>().map_err(|_| {
                            Error::new(
                                libc::EINVAL,
                                format!("lines {l:?}: expected FIRST-LAST, e.g. 10-40"),
                            )
                        })
                    };
                    Section::Lines(n(a)?, n(b)?)
                }
                (None, None) => Section::Whole,
            };
            let r = read(
                fs,
                path()?,
                &section,
                arg_u64(args, "offset")?.unwrap_or(0),
                arg_limit(args)?,
                ctx,
            )?;
            let mut text = r.text.clone();
            if let Some(next) = r.next_offset {
                text.push_str(&format!(
                    "\n[cut: {} of {} bytes shown; read on with offset {next}]",
                    r.text.len(),
                    r.total_bytes
                ));
            }
            Outcome::ok(text, Some(serde_json::to_value(&r).unwrap_or_default()))
        }
        "outline" => Outcome::ok(outline(fs, path()?, ctx)?, None),
        "write" | "append" => {
            let p = path()?;
            let content = arg_str(args, "content")?;
            let bytes = if name == "write" {
                write(fs, p, content.as_bytes(), ctx)?
            } else {
                append(fs, p, content.as_bytes(), ctx)?
            };
            Outcome::ok(
                format!("{p}: {bytes} bytes"),
                Some(json!({ "bytes": bytes })),
            )
        }
        "replace" => {
            let p = path()?;
            let count = arg_u64(args, "count")?.map(|c| c as usize);
            let n = replace(
                fs,
                p,
                arg_str(args, "find")?,
                arg_str(args, "with")?,
                count,
                ctx,
            )?;
            Outcome::ok(format!("{p}: {n} replaced"), Some(json!({ "changed": n })))
        }
        "history" => {
            let p = path()?;
            let mut rows = Vec::new();
            let mut text = String::new();
            for v in fs.store().versions(file_id(fs, p, ctx)?)? {
                let meta = fs.store().version_meta(v.id)?;
                text.push_str(&format!(
                    "v{}  {}  {} B  {}{}  blake3 {}\n",
                    v.number,
                    crate::cli::time::utc(v.time_ns),
                    v.content.len,
                    meta.writer,
                    meta.step.map(|s| format!(" step {s}")).unwrap_or_default(),
                    &meta.blake3[..16.min(meta.blake3.len())]
                ));
                rows.push(
                    json!({ "version": v.number, "bytes": v.content.len, "writer": meta.writer,
                    "step": meta.step, "time_ns": v.time_ns, "blake3": meta.blake3 }),
                );
            }
            Outcome::ok(text, Some(json!({ "versions": rows })))
        }
        "read_version" => {
            let p = path()?;
            let n = arg_version(args, "version")?;
            let all = version_bytes(fs, p, n, ctx)?;
            let start = (arg_u64(args, "offset")?.unwrap_or(0) as usize).min(all.len());
            let max = arg_limit(args)?.unwrap_or(READ_MAX);
            let end = (start + max).min(all.len());
            let mut text = String::from_utf8_lossy(&all[start..end]).into_owned();
            let next = (end < all.len()).then_some(end);
            if let Some(next) = next {
                text.push_str(&format!("\n[cut: read on with offset {next}]"));
            }
            Outcome::ok(
                text,
                Some(json!({ "total_bytes": all.len(), "next_offset": next })),
            )
        }
        "diff" => {
            let p = path()?;
            let from = arg_version(args, "from")?;
            let a = version_bytes(fs, p, from, ctx)?;
            let (to, b) = match args.get("to").filter(|t| !t.is_null()) {
                Some(_) => {
                    let t = arg_version(args, "to")?;
                    (t, version_bytes(fs, p, t, ctx)?)
                }
                None => {
                    let last = fs
                        .store()
                        .versions(file_id(fs, p, ctx)?)?
                        .last()
                        .map_or(0, |v| v.number);
                    (last, version_bytes(fs, p, last, ctx)?)
                }
            };
            let (a, b) = (String::from_utf8_lossy(&a), String::from_utf8_lossy(&b));
            let d = similar::TextDiff::from_lines(a.as_ref(), b.as_ref());
            let mut text = d
                .unified_diff()
                .header(&format!("{p}@{from}"), &format!("{p}@{to}"))
                .to_string();
            if text.len() > READ_MAX {
                let mut cut = READ_MAX;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                text.push_str("\n[diff cut at 32 KiB]");
            }
            Outcome::ok(text, None)
        }
        "memory" => Outcome::ok(super::memory::run(fs, args, ctx)?, None),
        "why" => {
            let p = path()?;
            let ino = resolve(fs, p, ctx)?;
            fs.access_named(ino, libc::R_OK, ctx, Some(p))?;
            let key = match args.get("key") {
                None | Some(serde_json::Value::Null) => None,
                Some(_) => Some(arg_str(args, "key")?),
            };
            let depth = arg_u64(args, "depth")?
                .map_or(crate::lineage::why::DEFAULT_DEPTH, |d| d.min(16) as usize);
            let stored = crate::store::paths::encode(p.as_bytes()).into_owned();
            let mut w = fs.store().why(&stored, key, depth)?;
            hide_unreadable_keys(fs, &mut w.lineage, ctx);
            Outcome::ok(
                crate::lineage::why::render(&w),
                Some(serde_json::to_value(&w).unwrap_or_default()),
            )
        }
        "ground" => {
            let text = arg_str(args, "text")?;
            let mut readable = std::collections::HashMap::new();
            let mut found = fs.store().ground_sources()?;
            // A value adopted from another scratchpad: credited to who set it there
            // (writer names only: nothing of that database's content is shown).
            crate::report::follow_ground_origins(&mut found);
            let sources: Vec<_> = found
                .sources
                .into_iter()
                .filter(|s| {
                    *readable.entry(s.path.clone()).or_insert_with(|| {
                        resolve(fs, &s.path, ctx)
                            .is_ok_and(|ino| fs.access(ino, libc::R_OK, ctx).is_ok())
                    })
                })
                .collect();
            let findings = crate::lineage::ground::ground(text, &sources);
            let status = crate::lineage::ground::exit_status(&findings);
            let mut text = crate::lineage::ground::render(&findings);
            if let Some(note) = crate::cli::ground::skipped_note(&found.skipped) {
                text.push_str(&note);
                text.push('\n');
            }
            Outcome::ok(
                text,
                Some(
                    json!({ "tokens": findings, "ungrounded": status != 0, "skipped": found.skipped }),
                ),
            )
        }
        "restore" => {
            let p = path()?;
            let n = arg_version(args, "version")?;
            let ino = resolve(fs, p, ctx)?;
            fs.access(ino, libc::W_OK, ctx)?;
            fs.restore(ino, n, ctx)?;
            Outcome::ok(format!("{p}: version {n} restored"), None)
        }
        "glob" => {
            let (paths, more) = glob(fs, arg_str(args, "pattern")?, ctx)?;
            let mut text = paths.join("\n");
            if paths.is_empty() {
                text = "no file matches".into();
            }
            if more {
                text.push_str(&format!("\n[more than {GLOB_MAX}: narrow the pattern]"));
            }
            Outcome::ok(text, Some(json!({ "paths": paths, "truncated": more })))
        }
        "search" => {
            let found = super::search::search(
                fs,
                &super::search::Query {
                    pattern: arg_str(args, "pattern")?.to_string(),
                    regex: arg_bool(args, "regex")?,
                    ignore_case: arg_bool(args, "ignore_case")?,
                    path: match args.get("path") {
                        None | Some(serde_json::Value::Null) => None,
                        Some(_) => Some(arg_str(args, "path")?.to_string()),
                    },
                    limit: arg_u64(args, "limit")?.map_or(100, |l| l.clamp(1, 1000) as usize),
                    history: arg_bool(args, "history")?,
                },
                ctx,
            )?;
            Outcome::ok(
                found.render(),
                Some(serde_json::to_value(&found).unwrap_or_default()),
            )
        }
        "mkdir" => {
            let p = path()?;
            let made = mkdir(fs, p, ctx)?;
            let text = if made {
                format!("{p}: made")
            } else {
                format!("{p}: already there")
            };
            Outcome::ok(text, Some(json!({ "made": made })))
        }
        "delete" => {
            let p = path()?;
            let n = delete(fs, p, arg_bool(args, "recursive")?, ctx)?;
            Outcome::ok(
                format!("{p}: deleted ({n} removed; restorable from .archive)"),
                Some(json!({ "removed": n })),
            )
        }
        "move" => {
            let (from, to) = (arg_str(args, "from")?, arg_str(args, "to")?);
            move_path(fs, from, to, arg_bool(args, "replace")?, ctx)?;
            Outcome::ok(format!("{from} moved to {to}"), None)
        }
        "checkpoint" => {
            let name = arg_str(args, "name")?;
            let note = match args.get("note") {
                None | Some(serde_json::Value::Null) => None,
                Some(_) => Some(arg_str(args, "note")?),
            };
            let cp = fs.checkpoint(name, note, ctx)?;
            Outcome::ok(
                format!("checkpoint {name} taken; its tree is at .checkpoints/{name}/"),
                Some(serde_json::to_value(&cp).unwrap_or_default()),
            )
        }
        "checkpoints" => {
            let all = fs.store().checkpoints()?;
            let text = if all.is_empty() {
                "no checkpoints".to_string()
            } else {
                all.iter()
                    .map(|c| {
                        format!(
                            "{}  {}  {}{}",
                            crate::cli::time::utc(c.point.time_ns),
                            c.name,
                            c.writer,
                            c.note
                                .as_deref()
                                .map(|n| format!("  {n}"))
                                .unwrap_or_default()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Outcome::ok(text, Some(json!({ "checkpoints": all })))
        }
        "rollback" => {
            let name = arg_str(args, "name")?;
            let r = fs.rollback(name, ctx)?;
            Outcome::ok(
                format!(
                    "rolled back to {}: {} changed, {} restored, {} removed, {} moved; the state before is checkpoint {}",
                    r.checkpoint, r.changed, r.restored, r.removed, r.moved, r.safety
                ),
                Some(serde_json::to_value(&r).unwrap_or_default()),
            )
        }
        _ => return Err(Error::new(libc::EINVAL, format!("no tool named {name:?}"))),
    })
}
