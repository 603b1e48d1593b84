//! The Anthropic memory tool's command set as one MCP tool, `memory` (issue 12 item 3):
//! `view`, `create`, `str_replace`, `insert`, `delete` and `rename`, with the memory
//! tool's argument names and result texts (those of the `anthropic` Python package's
//! `BetaLocalFilesystemMemoryTool`, memory tool version 2025-08-18), over the scratchpad's
//! `memories/` directory: `/memories/notes.md` is `memories/notes.md` here. A harness
//! that runs Claude's memory tool can point it at scratchfs unchanged, and every change is
//! a version with provenance, refused by the gate like any other.

use serde_json::Value;

use super::tools;
use crate::error::{Error, Result};
use crate::fs::{Ctx, Fs, Invalidation, ROOT};
use crate::store::Kind;

/// Width of the line numbers in `view` (the memory tool's: six digits).
const NUMBER_WIDTH: usize = 6;

/// The memory tool's refusal: `EINVAL` with its text.
fn refuse(text: String) -> Error {
    Error::new(libc::EINVAL, text)
}

/// The scratchpad path of a memory path: `/memories[/rest]` -> `memories[/rest]`.
fn local(path: &str) -> Result<String> {
    let Some(rest) = path.strip_prefix("/memories") else {
        return Err(refuse(format!(
            "Path must start with /memories, got: {path}"
        )));
    };
    if !(rest.is_empty() || rest.starts_with('/')) {
        return Err(refuse(format!(
            "Path must start with /memories, got: {path}"
        )));
    }
    // `.` and `..` are resolved by name, as the memory tool's own backend resolves them
    // (`Path.resolve`): `/memories/a/../b` is `/memories/b`; a `..` above `/memories`
    // escapes it.
    let mut parts = vec!["memories"];
    for c in rest.split('/') {
        match c {
            "" | "." => {}
            ".." if parts.len() > 1 => {
                parts.pop();
            }
            ".." => {
                return Err(refuse(format!(
                    "Path {path} would escape /memories directory"
                )));
            }
            c => parts.push(c),
        }
    }
    let p = parts.join("/");
    tools::components(&p, false).map_err(|e| {
        let why = e
            .reason
            .split_once(": ")
            .map_or(e.reason.as_str(), |(_, w)| w);
        refuse(format!("Path {path}: {why}"))
    })?;
    Ok(p)
}

/// `_format_file_size`: 0B, 512B, 1.5K, 2M.
fn size(n: u64) -> String {
    if n == 0 {
        return "0B".into();
    }
    let i = (((63 - n.leading_zeros()) / 10) as usize).min(3);
    let v = n as f64 / 1024f64.powi(i as i32);
    let unit = ["B", "K", "M", "G"][i];
    if v == v.trunc() {
        format!("{}{unit}", v as u64)
    } else {
        format!("{v:.1}{unit}")
    }
}

/// The inode at scratchpad path `p`, its kind and size, if it exists; an error when the
/// caller of `ctx` may not search a directory on the way.
fn stat(fs: &Fs, p: &str, ctx: Ctx) -> Result<Option<(u64, Kind, u64)>> {
    match tools::resolve(fs, p, ctx) {
        Ok(ino) => {
            let a = fs.attr_seen_by(ino, ctx)?;
            Ok(Some((ino, a.kind, a.size)))
        }
        Err(e) if e.errno == libc::ENOENT => Ok(None),
        Err(e) => Err(e),
    }
}

fn text_of(fs: &Fs, p: &str, path: &str, ctx: Ctx) -> Result<String> {
    let bytes = tools::read_all(fs, p, ctx).map_err(|_| {
        refuse(format!(
            "The file {path} no longer exists (may have been deleted or renamed concurrently)."
        ))
    })?;
    String::from_utf8(bytes).map_err(|_| refuse(format!("Unsupported file type for {path}")))
}

/// The memory tool's refusals for a path (`path`, at `p` in the scratchpad) that must be
/// an existing file.
fn existing_file(fs: &Fs, p: &str, path: &str, ctx: Ctx) -> Result<()> {
    match stat(fs, p, ctx)? {
        None => Err(refuse(format!(
            "The path {path} does not exist. Please provide a valid path."
        ))),
        Some((_, Kind::Dir, _)) => Err(refuse(format!("The path {path} is not a file."))),
        Some(_) => Ok(()),
    }
}

fn arg<'a>(args: &'a Value, key: &str) -> Result<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| refuse(format!("missing string argument {key:?}")))
}

/// Runs one memory tool command (`args.command`) and returns its result text. An error
/// from the core names the scratchpad's `memories/...`; it is shown as the memory tool's
/// `/memories/...`, the only paths the model knows.
pub fn run(fs: &Fs, args: &Value, ctx: Ctx) -> Result<String> {
    command(fs, args, ctx).map_err(|mut e| {
        e.reason = memory_paths(&e.reason);
        e
    })
}

/// `text` with each scratchpad path `memories[/...]` (the word followed by `/`, `:`, a
/// quote or the end, and starting the text or following a space, quote or parenthesis)
/// written as `/memories[/...]`.
fn memory_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut rest = text;
    while let Some(i) = rest.find("memories") {
        let before = rest[..i].chars().next_back();
        let after = rest[i + "memories".len()..].chars().next();
        out.push_str(&rest[..i]);
        if matches!(before, None | Some(' ' | '"' | '\'' | '`' | '('))
            && matches!(after, None | Some('/' | ':' | '"' | '\'' | '`'))
        {
            out.push('/');
        }
        out.push_str("memories");
        rest = &rest[i + "memories".len()..];
    }
    out.push_str(rest);
    out
}

fn command(fs: &Fs, args: &Value, ctx: Ctx) -> Result<String> {
    match arg(args, "command")? {
        "view" => view(fs, args, ctx),
        "create" => {
            let path = arg(args, "path")?;
            let p = local(path)?;
            if tools::components(&p, true).is_err() {
                return Err(refuse(format!(
                    "Path {path} is a read-only view's name (scratchfs writes views)"
                )));
            }
            if stat(fs, &p, ctx)?.is_some() {
                return Err(refuse(format!("File {path} already exists")));
            }
            tools::write_private(fs, &p, arg(args, "file_text")?.as_bytes(), ctx)?;
            Ok(format!("File created successfully at: {path}"))
        }
        "str_replace" => {
            let path = arg(args, "path")?;
            let p = local(path)?;
            existing_file(fs, &p, path, ctx)?;
            let (old, new) = (arg(args, "old_str")?, arg(args, "new_str")?);
            let content = text_of(fs, &p, path, ctx)?;
            let at: Vec<usize> = content.match_indices(old).map(|(i, _)| i).collect();
            match at.len() {
                0 => {
                    return Err(refuse(format!(
                        "No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
                    )));
                }
                1 => {}
                _ => {
                    let lines: Vec<String> = at
                        .iter()
                        .map(|&i| (content[..i].matches('\n').count() + 1).to_string())
                        .collect();
                    return Err(refuse(format!(
                        "No replacement was performed. Multiple occurrences of old_str `{old}` in lines: {}. Please ensure it is unique",
                        lines.join(", ")
                    )));
                }
            }
            let changed = content[..at[0]].matches('\n').count();
            let updated = content.replacen(old, new, 1);
            tools::write_private(fs, &p, updated.as_bytes(), ctx)?;
            let lines: Vec<&str> = updated.split('\n').collect();
            let from = changed.saturating_sub(2);
            let to = (changed + 3).min(lines.len());
            let snippet: Vec<String> = (from..to)
                .map(|i| format!("{:>NUMBER_WIDTH$}\t{}", i + 1, lines[i]))
                .collect();
            Ok(format!(
                "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n{}",
                snippet.join("\n")
            ))
        }
        "insert" => {
            let path = arg(args, "path")?;
            let p = local(path)?;
            existing_file(fs, &p, path, ctx)?;
            let line = args
                .get("insert_line")
                .and_then(Value::as_i64)
                .ok_or_else(|| refuse("missing integer argument \"insert_line\"".into()))?;
            let text = arg(args, "insert_text")?;
            let content = text_of(fs, &p, path, ctx)?;
            let mut lines: Vec<&str> = content.split('\n').collect();
            if lines.last() == Some(&"") {
                lines.pop();
            }
            if line < 0 || line as usize > lines.len() {
                return Err(refuse(format!(
                    "Invalid `insert_line` parameter: {line}. It should be within the range [0, {}].",
                    lines.len()
                )));
            }
            lines.insert(line as usize, text.trim_end_matches('\n'));
            let mut updated = lines.join("\n");
            if !updated.ends_with('\n') {
                updated.push('\n');
            }
            tools::write_private(fs, &p, updated.as_bytes(), ctx)?;
            Ok(format!("The file {path} has been edited."))
        }
        "delete" => {
            let path = arg(args, "path")?;
            let p = local(path)?;
            if p == "memories" {
                return Err(refuse(
                    "Cannot delete the /memories directory itself".into(),
                ));
            }
            let Some((ino, kind, _)) = stat(fs, &p, ctx)? else {
                return Err(refuse(format!("The path {path} does not exist")));
            };
            tools::remove_tree(fs, &p, ino, kind, ctx)?;
            Ok(format!("Successfully deleted {path}"))
        }
        "rename" => {
            let (old_path, new_path) = (arg(args, "old_path")?, arg(args, "new_path")?);
            let (old, new) = (local(old_path)?, local(new_path)?);
            if old == "memories" {
                return Err(refuse(
                    "Cannot rename the /memories directory itself".into(),
                ));
            }
            if tools::components(&new, true).is_err() {
                return Err(refuse(format!(
                    "Path {new_path} is a read-only view's name (scratchfs writes views)"
                )));
            }
            if stat(fs, &new, ctx)?.is_some() {
                return Err(refuse(format!("The destination {new_path} already exists")));
            }
            if stat(fs, &old, ctx)?.is_none() {
                return Err(refuse(format!("The path {old_path} does not exist")));
            }
            let parent_of = |p: &str| -> Result<(u64, String)> {
                let (dir, name) = p.rsplit_once('/').unwrap_or(("", p));
                let ino = if dir.is_empty() {
                    ROOT
                } else {
                    tools::make_dirs(fs, dir, tools::Modes::PRIVATE.dir, ctx)?
                };
                Ok((ino, name.to_string()))
            };
            let (from_dir, from_name) = parent_of(&old)?;
            let (to_dir, to_name) = parent_of(&new)?;
            for dir in [from_dir, to_dir] {
                fs.access(dir, libc::W_OK | libc::X_OK, ctx)?;
            }
            fs.rename(
                from_dir,
                from_name.as_bytes(),
                to_dir,
                to_name.as_bytes(),
                0,
                ctx,
            )?;
            fs.invalidate_kernel(Invalidation::Entry(from_dir, from_name.into_bytes()));
            fs.invalidate_kernel(Invalidation::Entry(to_dir, to_name.into_bytes()));
            Ok(format!("Successfully renamed {old_path} to {new_path}"))
        }
        other => Err(refuse(format!("Unknown command: {other}"))),
    }
}

/// `view`: a directory two levels deep with sizes, or a file with line numbers.
fn view(fs: &Fs, args: &Value, ctx: Ctx) -> Result<String> {
    let path = arg(args, "path")?;
    let path = if path.len() > "/memories".len() {
        path.trim_end_matches('/')
    } else {
        path
    };
    let p = local(path)?;
    let Some((ino, kind, bytes)) = stat(fs, &p, ctx)? else {
        if p == "memories" {
            // The memory tool makes its directory first; an empty scratchpad has none.
            return Ok(format!(
                "Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:\n0B\t{path}"
            ));
        }
        return Err(refuse(format!(
            "The path {path} does not exist. Please provide a valid path."
        )));
    };
    if kind == Kind::Dir {
        let mut lines = vec![format!("{}\t{path}", size(bytes))];
        let mut walk = vec![(ino, String::new(), 1)];
        let mut found = Vec::new();
        while let Some((dir, rel, depth)) = walk.pop() {
            for (name, child, k) in tools::entries(fs, dir, false, ctx)? {
                let r = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                let s = fs.attr_seen_by(child, ctx).map(|a| a.size).unwrap_or(0);
                if k == Kind::Dir {
                    found.push((r.clone() + "/", s));
                    if depth < 2 {
                        walk.push((child, r, depth + 1));
                    }
                } else {
                    found.push((r, s));
                }
            }
        }
        found.sort();
        for (r, s) in found {
            lines.push(format!("{}\t{path}/{r}", size(s)));
        }
        return Ok(format!(
            "Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:\n{}",
            lines.join("\n")
        ));
    }
    let content = text_of(fs, &p, path, ctx)?;
    let lines: Vec<&str> = content.split('\n').collect();
    let (mut from, mut to) = (0, lines.len());
    if let Some(r) = args.get("view_range").and_then(Value::as_array)
        && r.len() == 2
    {
        // The memory tool's backend slices `lines[max(1, a) - 1 : b]` in Python (`b == -1`:
        // to the end), so another negative `b` counts from the end: `[2, -2]` is line 2
        // up to the last two lines.
        let n = lines.len() as i64;
        let a = r[0].as_i64().unwrap_or(1);
        let b = r[1].as_i64().unwrap_or(-1);
        let start = (a.max(1) - 1).min(n);
        let end = match b {
            -1 => n,
            b if b < 0 => (n + b).max(0),
            b => b.min(n),
        };
        from = start as usize;
        to = end.max(start) as usize;
    }
    let numbered: Vec<String> = lines[from..to]
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{:>NUMBER_WIDTH$}\t{l}", i + from + 1))
        .collect();
    Ok(format!(
        "Here's the content of {path} with line numbers:\n{}",
        numbered.join("\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_paths_as_the_memory_tool_has_them() {
        assert_eq!(size(0), "0B");
        assert_eq!(size(512), "512B");
        assert_eq!(size(1536), "1.5K");
        assert_eq!(size(2 << 20), "2M");
        assert_eq!(local("/memories").unwrap(), "memories");
        assert_eq!(local("/memories/a/b.md").unwrap(), "memories/a/b.md");
        assert!(
            local("/etc/passwd")
                .unwrap_err()
                .reason
                .contains("must start with /memories")
        );
        assert!(local("/memoriesx").is_err());
        assert_eq!(local("/memories/./x").unwrap(), "memories/x");
        assert_eq!(local("/memories/sub/../x").unwrap(), "memories/x");
        assert!(local("/memories/sub/../../x").is_err());
        assert_eq!(
            memory_paths("memories/a.md: writer w refused; \"memories/b\" and /memories/c"),
            "/memories/a.md: writer w refused; \"/memories/b\" and /memories/c"
        );
        assert_eq!(memory_paths("my memories are"), "my memories are");
        assert!(
            local("/memories/../x")
                .unwrap_err()
                .reason
                .contains("would escape")
        );
    }
}
