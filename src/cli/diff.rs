//! `scratchfs diff PATH@A [PATH@B]`: a unified diff between two versions (B defaults to
//! the current one), computed in memory with the `similar` crate, so only for text of at
//! most [`DIFF_MAX`] bytes and [`DIFF_MAX_LINES`] lines a side (the diff's structures
//! cost about 200 bytes a line: with both limits reached, a diff peaks at about 40 MiB);
//! the output is written as it is formatted. Two versions with the same blake3 are
//! identical whatever their size (an empty diff). Anything else (a larger version, or one
//! that is not text) is a one-line failure, exit status 1, pointing at `scratchfs show`
//! and `cmp`.

use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;

use super::{Failure, arg, open_history, resolve_spec, version_in, version_of};
use crate::views::quote_stored;

use crate::report::version_text as text;
pub use crate::report::{DIFF_MAX, DIFF_MAX_LINES};

/// `2.0 GiB`, `3.5 MiB`, `12.0 KiB`, `17 bytes`.
pub fn human_size(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if n >= size {
            return format!("{:.1} {unit}", n as f64 / size as f64);
        }
    }
    format!("{n} byte{}", if n == 1 { "" } else { "s" })
}

/// `raw` as one bash word that stands for exactly those bytes, for a command line a user
/// may paste: as it is when it holds only `A-Z a-z 0-9 _ . / @ % + = : , -`, else
/// single-quoted (a `'` as `'\''`) when it is printable UTF-8, else as `$'...'` with each
/// byte that is not a printable ASCII character (or is `'` or `\`) as `\xHH`.
fn shell_word(raw: &[u8]) -> String {
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"_./@%+=:,-".contains(&b);
    if !raw.is_empty() && raw.iter().all(|&b| plain(b)) {
        return String::from_utf8_lossy(raw).into_owned();
    }
    if let Ok(text) = std::str::from_utf8(raw)
        && !text.chars().any(char::is_control)
    {
        return format!("'{}'", text.replace('\'', r"'\''"));
    }
    let mut out = String::from("$'");
    for &b in raw {
        if (0x20..0x7f).contains(&b) && b != b'\'' && b != b'\\' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out.push('\'');
    out
}

/// Prints the unified diff of `a` → `b` (default: the current version of `a`'s path); a
/// bare `PATH` is its last change (the version before the current one → the current one;
/// a file of one version is a failure saying so).
/// Fails (one line, exit 1) when a side is larger than [`DIFF_MAX`] or [`DIFF_MAX_LINES`]
/// or is not text (not UTF-8, or holds a NUL byte), unless both have the same blake3 (no
/// difference).
/// The `--json` object is `{"a": "PATH@A", "b": "PATH@B", "diff": TEXT}`, a label that is
/// not UTF-8 with its bytes in `a_hex`/`b_hex` ([`super::json_name`]).
pub fn diff(db: &Path, a: &OsStr, b: Option<&OsStr>, json: bool) -> Result<(), Failure> {
    let store = open_history(db)?;
    let store = &*store;
    let a = arg(a);
    let (path, n) = resolve_spec(store, &a)?;
    let (va, vb) = match (n, b) {
        // `diff PATH`: the last change, the version before the current one against it.
        (None, None) => {
            let all = super::versions(store, super::file_id(store, &path)?)?;
            match all.as_slice() {
                [.., before, last] => (before.clone(), last.clone()),
                [only] => {
                    return Err(format!(
                        "diff: {} has one version ({}): nothing to compare; give \
                         PATH@A [PATH@B]",
                        quote_stored(&path),
                        only.version
                    ));
                }
                [] => return Err(format!("{}: no such version", quote_stored(&a))),
            }
        }
        (n, b) => (
            version_in(store, &path, n, &a)?,
            match b {
                Some(b) => version_of(store, &arg(b))?,
                None => version_in(store, &path, None, &a)?,
            },
        ),
    };
    let (ha, hb) = (
        format!("{}@{}", va.path, va.version),
        format!("{}@{}", vb.path, vb.version),
    );
    let (ta, tb) = if va.blake3 == vb.blake3 && va.size == vb.size {
        // The same content: nothing to read.
        (String::new(), String::new())
    } else {
        let hint = format!(
            "compare with cmp <(scratchfs show {}) <(scratchfs show {})",
            shell_word(&crate::store::paths::decode(&ha)),
            shell_word(&crate::store::paths::decode(&hb))
        );
        for (v, h) in [(&va, &ha), (&vb, &hb)] {
            if v.size > DIFF_MAX {
                return Err(format!(
                    "diff: {} is {}: too large to diff in memory (limit {} MiB); {hint}",
                    quote_stored(h),
                    human_size(v.size),
                    DIFF_MAX >> 20
                ));
            }
        }
        (
            text(store, &va, &ha, "diff", &hint)?,
            text(store, &vb, &hb, "diff", &hint)?,
        )
    };
    let d = similar::TextDiff::from_lines(&ta, &tb);
    // The text headers quote a name that could break them (`--- "a\nb@2"`), as git does.
    let (qa, qb) = if json {
        let text = |h: &str| String::from_utf8_lossy(&crate::store::paths::decode(h)).into_owned();
        (text(&ha), text(&hb))
    } else {
        (
            quote_stored(&ha).into_owned(),
            quote_stored(&hb).into_owned(),
        )
    };
    let mut unified = d.unified_diff();
    unified.context_radius(3).header(&qa, &qb);
    // Written as it is formatted, never held whole.
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    let io = |e: std::io::Error| format!("stdout: {e}");
    if json {
        let mut o = serde_json::json!({ "a": ha, "b": hb });
        super::json_paths(&mut o, &["a", "b"]);
        let o = o.to_string();
        write!(out, "{},\"diff\":\"", &o[..o.len() - 1]).map_err(io)?;
        unified.to_writer(JsonString(&mut out)).map_err(io)?;
        out.write_all(b"\"}\n").map_err(io)?;
    } else {
        unified.to_writer(&mut out).map_err(io)?;
    }
    out.flush().map_err(io)
}

/// Writes what it is given as the inside of a JSON string (escaped, no quotes). The
/// pieces it gets are whole UTF-8 text (`write!` of `str`s).
struct JsonString<W: Write>(W);

impl<W: Write> Write for JsonString<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let quoted = serde_json::to_string(&*text).map_err(std::io::Error::other)?;
        self.0.write_all(&quoted.as_bytes()[1..quoted.len() - 1])?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn shell_words_give_back_the_bytes() {
        // What bash makes of each word, compared with the bytes.
        for raw in [
            &b"plain/a.md@2"[..],
            b"it's a file@1",
            b"'); rm -rf ~; #@3",
            b"$(touch /tmp/x)`id`@1",
            b"caf\xc3\xa9 \\ back@1",
            b"bad\xff\nline\t'q'\\@4",
            b"",
        ] {
            let word = super::shell_word(raw);
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(format!("printf %s {word}"))
                .output()
                .expect("bash");
            assert_eq!(out.stdout, raw, "{word}");
        }
    }

    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_size(1), "1 byte");
        assert_eq!(human_size(1023), "1023 bytes");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(16 << 20), "16.0 MiB");
        assert_eq!(human_size(2 << 30), "2.0 GiB");
        assert_eq!(human_size(32 << 30), "32.0 GiB");
    }
}
