//! Read-only views synthesized from the store (SPEC §7): `MANIFEST` at the root,
//! `<file>.outline` beside every regular file, and the history trees `.history/<path>/<N>`
//! (every version of every file, deleted ones included, following renames) and
//! `.archive/<path>` (the last content of every deleted file). Views have inode numbers of their own
//! (with [`VIEW_BIT`] set), mode 0444, a content snapshot taken at open, direct I/O and a
//! zero attribute TTL, so they are never stale (FUSE-TRAPS §1). Writes to them are refused
//! with `EACCES`, and their names are reserved (SPEC §3).

pub mod ephemeral;
pub mod manifest;
pub mod outline;

use crate::fs::ROOT;

/// Set in the inode number of every view.
pub const VIEW_BIT: u64 = 1 << 62;
/// Set, with [`VIEW_BIT`], in the inode number of an outline; the low bits are the
/// inode of the file it describes.
pub const OUTLINE_BIT: u64 = 1 << 61;
/// Set, with [`VIEW_BIT`], in the inode of a directory of `.history` (low bits: its id).
pub const HISTORY_DIR_BIT: u64 = 1 << 60;
/// Set, with [`VIEW_BIT`], in the inode of a directory of `.archive` (low bits: its id).
pub const ARCHIVE_DIR_BIT: u64 = 1 << 59;
/// Set, with [`VIEW_BIT`], in the inode of `.history/<path>/<N>` (low bits: `versions.id`).
pub const VERSION_BIT: u64 = 1 << 58;
/// Set, with [`VIEW_BIT`], in the inode of `.archive/<path>` (low bits: `files.id`).
pub const ARCHIVED_BIT: u64 = 1 << 57;
/// Set, with [`VIEW_BIT`], in the inode of a directory of `.checkpoints` (issue 14; low
/// bits: its id in the mount's registry, 0 for `.checkpoints` itself).
pub const CHECKPOINT_DIR_BIT: u64 = 1 << 56;
/// Set, with [`VIEW_BIT`], in the inode of a file under `.checkpoints/NAME/` (low bits: its
/// id in the mount's registry).
pub const CHECKPOINT_FILE_BIT: u64 = 1 << 55;
/// Inode of `MANIFEST`.
pub const MANIFEST_INO: u64 = VIEW_BIT | 1;
/// Name of the history tree at the root.
pub const HISTORY: &[u8] = b".history";
/// Name of the archive tree at the root.
pub const ARCHIVE: &[u8] = b".archive";
/// Width of the zero-padded version names in `.history/<path>/` (`000003`), so that
/// `ls` lists them in numeric order; any decimal form (`3`) resolves too.
pub const VERSION_NAME_WIDTH: usize = 6;
/// Name of the manifest at the root.
pub const MANIFEST: &[u8] = b"MANIFEST";
/// Suffix of outline names.
pub const OUTLINE_SUFFIX: &[u8] = b".outline";
/// Name of the checkpoints tree at the root (issue 14).
pub const CHECKPOINTS: &[u8] = crate::checkpoint::CHECKPOINTS_DIR;
/// Names reserved at the root for the history views.
pub const HISTORY_NAMES: &[&[u8]] = &[b".history", b".archive", CHECKPOINTS];

/// Bytes of a file's start that decide whether it is binary ([`is_binary`]): 8 KiB.
pub const SNIFF_BYTES: usize = 8 << 10;

/// Whether content is binary, judged from its first [`SNIFF_BYTES`] (`head`; `whole`:
/// `head` is all of it): a NUL byte there, or bytes that are not UTF-8 (a character cut
/// by the end of `head` when more follows is not held against it). git's test (a NUL in
/// the first 8,000 bytes) and UTF-8's: a binary file gets no token estimate in MANIFEST
/// and no text outline.
pub fn is_binary(head: &[u8], whole: bool) -> bool {
    let whole = whole && head.len() <= SNIFF_BYTES;
    let head = &head[..head.len().min(SNIFF_BYTES)];
    if head.contains(&0) {
        return true;
    }
    match std::str::from_utf8(head) {
        Ok(_) => false,
        Err(e) => whole || e.error_len().is_some(),
    }
}

/// A view inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// `MANIFEST`.
    Manifest,
    /// The outline of the file with this inode.
    Outline(u64),
    /// A directory of `.history`; id 0 is `.history` itself.
    HistoryDir(u64),
    /// A directory of `.archive`; id 0 is `.archive` itself.
    ArchiveDir(u64),
    /// One version (`versions.id`) under `.history`.
    Version(u64),
    /// The last content of a deleted file (`files.id`) under `.archive`.
    Archived(u64),
    /// A directory of `.checkpoints` (id 0: `.checkpoints`; else a registered node of a
    /// checkpoint's tree, its root being `.checkpoints/NAME`).
    CheckpointDir(u64),
    /// A file of a checkpoint's tree (its registered id).
    CheckpointFile(u64),
}

impl View {
    /// The view an inode number denotes, if any.
    pub fn of(ino: u64) -> Option<View> {
        if ino & VIEW_BIT == 0 {
            None
        } else if ino == MANIFEST_INO {
            Some(View::Manifest)
        } else if ino & OUTLINE_BIT != 0 {
            Some(View::Outline(ino & !(VIEW_BIT | OUTLINE_BIT)))
        } else if ino & HISTORY_DIR_BIT != 0 {
            Some(View::HistoryDir(ino & !(VIEW_BIT | HISTORY_DIR_BIT)))
        } else if ino & ARCHIVE_DIR_BIT != 0 {
            Some(View::ArchiveDir(ino & !(VIEW_BIT | ARCHIVE_DIR_BIT)))
        } else if ino & VERSION_BIT != 0 {
            Some(View::Version(ino & !(VIEW_BIT | VERSION_BIT)))
        } else if ino & ARCHIVED_BIT != 0 {
            Some(View::Archived(ino & !(VIEW_BIT | ARCHIVED_BIT)))
        } else if ino & CHECKPOINT_DIR_BIT != 0 {
            Some(View::CheckpointDir(ino & !(VIEW_BIT | CHECKPOINT_DIR_BIT)))
        } else if ino & CHECKPOINT_FILE_BIT != 0 {
            Some(View::CheckpointFile(
                ino & !(VIEW_BIT | CHECKPOINT_FILE_BIT),
            ))
        } else {
            None
        }
    }

    /// Whether it is a directory.
    pub fn is_dir(self) -> bool {
        matches!(
            self,
            View::HistoryDir(_) | View::ArchiveDir(_) | View::CheckpointDir(_)
        )
    }

    /// Its inode number.
    pub fn ino(self) -> u64 {
        match self {
            View::Manifest => MANIFEST_INO,
            View::Outline(target) => VIEW_BIT | OUTLINE_BIT | target,
            View::HistoryDir(id) => VIEW_BIT | HISTORY_DIR_BIT | id,
            View::ArchiveDir(id) => VIEW_BIT | ARCHIVE_DIR_BIT | id,
            View::Version(id) => VIEW_BIT | VERSION_BIT | id,
            View::Archived(id) => VIEW_BIT | ARCHIVED_BIT | id,
            View::CheckpointDir(id) => VIEW_BIT | CHECKPOINT_DIR_BIT | id,
            View::CheckpointFile(id) => VIEW_BIT | CHECKPOINT_FILE_BIT | id,
        }
    }
}

/// For `<name>.outline`, the name of the file it describes.
pub fn outline_target(name: &[u8]) -> Option<&[u8]> {
    name.strip_suffix(OUTLINE_SUFFIX).filter(|n| !n.is_empty())
}

/// Whether `name` in directory `parent` is reserved for a view (SPEC §3): `MANIFEST`,
/// `.history`, `.archive` and `.checkpoints` at the root, and any name ending in
/// `.outline`.
pub fn is_reserved(parent: u64, name: &[u8]) -> bool {
    (parent == ROOT && (name == MANIFEST || HISTORY_NAMES.contains(&name)))
        || name.ends_with(OUTLINE_SUFFIX)
}

/// How a name is shown in text output (MANIFEST, outlines, the CLI): unchanged when it
/// is safe to print, else quoted after git's `core.quotePath` convention (git-config(1),
/// `quote_c_style` in git's `quote.c`): the whole name in double quotes, with `\n`, `\t`,
/// `\"`, `\\`, `\a`, `\b`, `\f`, `\r`, `\v` for those characters and `\ooo` (three octal
/// digits) for every other byte of a control character (C0, DEL, C1, and the Unicode
/// line and paragraph separators U+2028/U+2029). A name needs quoting when it holds any
/// of these, a double quote or a backslash, or starts or ends with a space. Printable
/// UTF-8 is kept as it is (git with `core.quotePath=false`), so one name is always one
/// row and never reads as two fields of another row; the quoting is reversible (C string
/// literal rules). Names that are not UTF-8: see [`quote_path_bytes`].
pub fn quote_path(p: &str) -> std::borrow::Cow<'_, str> {
    quote_path_bytes(p.as_bytes())
}

/// [`quote_path`] for a name as raw bytes: a byte that is not part of valid UTF-8 is
/// written as `\ooo` too (and makes the name quoted), so the original bytes can be
/// recovered. A name already converted lossily (each invalid byte replaced by U+FFFD,
/// as databases written by older versions of scratchfs hold them) prints its U+FFFD as
/// is: the original byte is not known there.
pub fn quote_path_bytes(p: &[u8]) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    let needs = p.first() == Some(&b' ')
        || p.last() == Some(&b' ')
        || match std::str::from_utf8(p) {
            Ok(s) => s
                .chars()
                .any(|c| c == '"' || c == '\\' || is_unsafe(c) || invisible_in_name(c)),
            Err(_) => true,
        };
    if !needs {
        // Valid UTF-8, checked above.
        return Cow::Borrowed(std::str::from_utf8(p).unwrap_or_default());
    }
    let mut out = String::with_capacity(p.len() + 8);
    out.push('"');
    escape_into(p, Backslash::Quoted, &mut out);
    out.push('"');
    Cow::Owned(out)
}

/// [`quote_path`] for a path as the store records it ([`crate::store::paths`]): the
/// exact bytes it stands for, quoted by [`quote_path_bytes`], so a name that is not
/// UTF-8 prints as `"k\377"`. Every path from the store or the tree is printed this way.
pub fn quote_stored(p: &str) -> std::borrow::Cow<'_, str> {
    match crate::store::paths::decode(p) {
        std::borrow::Cow::Borrowed(_) => quote_path(p),
        std::borrow::Cow::Owned(raw) => {
            std::borrow::Cow::Owned(quote_path_bytes(&raw).into_owned())
        }
    }
}

/// A one-line text that may embed names (a refusal's reason, a heading, a writer's
/// version line): control characters are escaped as in [`quote_path`], nothing is
/// quoted, backslashes and quotes are left alone. Keeps free text on one row.
pub fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    escape_into(s.as_bytes(), Backslash::Free, &mut out);
    std::borrow::Cow::Owned(out)
}

/// [`one_line`] for free text recorded by the store that may embed stored paths (a
/// refusal's or an erasure's reason): the bytes those stand for ([`crate::store::paths`])
/// are printed as [`quote_stored`] prints them, a byte that is not UTF-8 as `\ooo`. A
/// backslash of the text that an escape could be read into (one before a digit 0-7, one
/// of `ntrabfv`, or another backslash) is doubled, so `\377` in a reason is the four
/// characters and `\377` printed for a byte never reads two ways (helper finding); any
/// other backslash (a rule's `\d`) prints as it is.
pub fn one_line_stored(s: &str) -> std::borrow::Cow<'_, str> {
    let raw = crate::store::paths::decode(s);
    let ambiguous = |t: &[u8]| t.windows(2).any(|w| w[0] == b'\\' && escapable(w[1]));
    if let std::borrow::Cow::Borrowed(_) = raw
        && !s.chars().any(is_unsafe)
        && !ambiguous(s.as_bytes())
    {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(raw.len() + 8);
    escape_into(&raw, Backslash::Stored, &mut out);
    std::borrow::Cow::Owned(out)
}

/// Whether a backslash before `b` could be read as the start of an escape that
/// [`escape_into`] writes: `\ooo`, `\n` and the like, `\\`.
fn escapable(b: u8) -> bool {
    matches!(
        b,
        b'0'..=b'7' | b'n' | b't' | b'r' | b'a' | b'b' | b'f' | b'v' | b'\\'
    )
}

/// How [`escape_into`] writes a backslash of the text.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backslash {
    /// Inside quotes ([`quote_path_bytes`]): every backslash and quote escaped.
    Quoted,
    /// Free text ([`one_line`]): as it is.
    Free,
    /// Free text recorded by the store ([`one_line_stored`]): doubled where an escape
    /// could be read into it ([`escapable`]).
    Stored,
}

/// A character that could break a row or make it read as other text: C0 and C1
/// controls, DEL, U+2028, U+2029, and the bidirectional formatting characters (U+061C,
/// U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), which reorder what a terminal shows
/// after them (`x\u{202E}dm.exe` shows as `xexe.md`; CVE-2021-42574, "Trojan Source").
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}'
                | '\u{2029}'
                | '\u{061C}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// A character that shows as nothing or as a blank other than a plain space
/// ([`crate::checkpoint::is_invisible`]: zero-width characters, the soft hyphen, fillers,
/// non-ASCII spaces, tags, variation selectors, private use): in a name it would make
/// `plan\u{200B}.md` read as `plan.md`, so a name holding one is quoted and it is
/// escaped. Free text ([`one_line`]) keeps them (a zero-width joiner inside an emoji).
fn invisible_in_name(c: char) -> bool {
    crate::checkpoint::is_invisible(c)
}

/// Appends `p` C-escaped: control characters (and, if `quotes`, `"` and `\`) escaped,
/// invalid UTF-8 bytes as `\ooo`.
fn escape_into(mut p: &[u8], backslash: Backslash, out: &mut String) {
    let quotes = backslash == Backslash::Quoted;
    use std::fmt::Write;
    let octal = |bytes: &[u8], out: &mut String| {
        for b in bytes {
            let _ = write!(out, "\\{b:03o}");
        }
    };
    while !p.is_empty() {
        let (valid, rest) = match std::str::from_utf8(p) {
            Ok(s) => (s, &[][..]),
            Err(e) => {
                let (v, r) = p.split_at(e.valid_up_to());
                (std::str::from_utf8(v).unwrap_or_default(), r)
            }
        };
        let mut chars = valid.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                '\u{7}' => out.push_str("\\a"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\u{b}' => out.push_str("\\v"),
                '"' | '\\' if quotes => {
                    out.push('\\');
                    out.push(c);
                }
                // Before an escape this writes too (a control character), or at the
                // end of this valid run, before an invalid byte (written `\ooo`).
                '\\' if backslash == Backslash::Stored
                    && chars
                        .peek()
                        .is_none_or(|&n| (n.is_ascii() && escapable(n as u8)) || is_unsafe(n)) =>
                {
                    out.push_str("\\\\");
                }
                c if is_unsafe(c) || (quotes && invisible_in_name(c)) => {
                    octal(c.encode_utf8(&mut [0; 4]).as_bytes(), out)
                }
                c => out.push(c),
            }
        }
        if rest.is_empty() {
            break;
        }
        // One invalid sequence (as `Utf8Error::error_len` counts it, else the rest).
        let bad = std::str::from_utf8(rest)
            .err()
            .and_then(|e| e.error_len())
            .unwrap_or(rest.len());
        octal(&rest[..bad], out);
        p = &rest[bad..];
    }
}

/// A commit time (`ns` since the Unix epoch) as `log` and `history` print it:
/// `YYYY-MM-DD HH:MM:SSZ`, UTC, truncated to the second (RFC 3339 with a space, which
/// `cli::time::parse` reads back).
pub fn utc(ns: i64) -> String {
    // Every i64 of nanoseconds is within jiff's range (years -9999 to 9999).
    let t = jiff::Timestamp::from_nanosecond(i128::from(ns)).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    t.strftime("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// `ns` (since the Unix epoch) as notes print a TIME argument back: as [`utc`], with the
/// fraction of a second when it has one (`2026-12-01 10:00:00.5Z`).
pub fn utc_exact(ns: i64) -> String {
    let t = jiff::Timestamp::from_nanosecond(i128::from(ns)).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    t.strftime("%Y-%m-%d %H:%M:%S%.fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_print_unchanged() {
        for p in [
            "plan.md",
            "notes/a b.md",
            "état/über.json",
            "(… 3 more files)",
            "",
        ] {
            assert!(
                matches!(quote_path(p), std::borrow::Cow::Borrowed(_)),
                "{p}"
            );
            assert_eq!(quote_path(p), p);
        }
    }

    #[test]
    fn names_that_could_forge_rows_are_quoted_like_git() {
        assert_eq!(
            quote_path("a\nfake.md    999  9  1  root  0s"),
            r#""a\nfake.md    999  9  1  root  0s""#
        );
        assert_eq!(quote_path("tab\there"), r#""tab\there""#);
        assert_eq!(quote_path(r#"say "hi""#), r#""say \"hi\"""#);
        assert_eq!(quote_path(r"back\slash"), r#""back\\slash""#);
        assert_eq!(quote_path("\u{7}\u{8}\u{c}\r\u{b}"), r#""\a\b\f\r\v""#);
        assert_eq!(quote_path("esc\u{1b}[31m"), r#""esc\033[31m""#);
        assert_eq!(quote_path("del\u{7f}"), r#""del\177""#);
        assert_eq!(
            quote_path("nel\u{85}ls\u{2028}"),
            r#""nel\302\205ls\342\200\250""#
        );
        // Invisible characters would make these read as plan.md.
        assert_eq!(quote_path("plan\u{200B}.md"), r#""plan\342\200\213.md""#);
        assert_eq!(quote_path("plan\u{FEFF}.md"), r#""plan\357\273\277.md""#);
        assert_eq!(quote_path("plan\u{A0}.md"), r#""plan\302\240.md""#);
        assert_eq!(
            one_line("a \u{1F468}\u{200D}\u{1F467} b"),
            "a \u{1F468}\u{200D}\u{1F467} b"
        );
        // Bidirectional overrides would show `xexe.md` for this name.
        assert_eq!(quote_path("x\u{202E}dm.exe"), r#""x\342\200\256dm.exe""#);
        assert_eq!(
            one_line("by \u{2067}agent\u{2069} \u{200F}"),
            r"by \342\201\247agent\342\201\251 \342\200\217"
        );
        assert_eq!(quote_path(" lead"), r#"" lead""#);
        assert_eq!(quote_path("trail "), r#""trail ""#);
        assert_eq!(quote_path("in side"), "in side");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_octal() {
        assert_eq!(quote_path_bytes(b"ok"), "ok");
        assert_eq!(quote_path_bytes(b"caf\xe9.md"), r#""caf\351.md""#);
        assert_eq!(quote_path_bytes(b"\xff\xfe\n"), r#""\377\376\n""#);
        // A truncated multi-byte sequence at the end.
        assert_eq!(quote_path_bytes(b"x\xc3"), r#""x\303""#);
        assert_eq!(quote_path_bytes("é\u{fffd}".as_bytes()), "é\u{fffd}");
    }

    #[test]
    fn stored_paths_print_their_exact_bytes() {
        use crate::store::paths::encode;
        assert_eq!(quote_stored("plan.md"), "plan.md");
        assert_eq!(quote_stored(&encode(b"k\xff")), r#""k\377""#);
        assert_eq!(quote_stored(&encode(b"a\n\xfe")), r#""a\n\376""#);
        // A private-use character (which the store's escapes are) is quoted as its bytes.
        assert_eq!(
            quote_stored(&encode("\u{ef80}".as_bytes())),
            r#""\356\276\200""#
        );
        let reason = format!("{}: refused\n", encode(b"k\xff"));
        assert_eq!(one_line_stored(&reason), r"k\377: refused\n");
        // A backslash an escape could be read into is doubled; others are left.
        let reason = format!("{} is not a'\\377, nor \\\n; \\d+ is", encode(b"k\xff"));
        assert_eq!(
            one_line_stored(&reason),
            r"k\377 is not a'\\377, nor \\\n; \d+ is"
        );
        assert_eq!(one_line_stored(r"a'\377"), r"a'\\377");
        assert_eq!(one_line_stored(r"match \d+ and \w"), r"match \d+ and \w");
        let before_bad = format!("{}", encode(b"x\\\xff"));
        assert_eq!(one_line_stored(&before_bad), r"x\\\377");
    }

    #[test]
    fn binary_is_a_nul_or_not_utf8_in_the_first_8_kib() {
        assert!(!is_binary(b"", true));
        assert!(!is_binary("plan é\n".as_bytes(), true));
        assert!(is_binary(b"SQLite format 3\0", true));
        assert!(is_binary(b"\x89PNG\r\n\x1a\n", true));
        assert!(is_binary(b"caf\xe9", true));
        // A character cut by the end of what was read.
        let mut cut = vec![b'a'; SNIFF_BYTES - 1];
        cut.extend_from_slice("é".as_bytes());
        assert!(!is_binary(&cut, true));
        assert!(!is_binary(&cut[..SNIFF_BYTES], false));
        // ... but a file that ends inside one is not UTF-8.
        assert!(is_binary(&cut[..SNIFF_BYTES], true));
        assert!(is_binary(&"é".as_bytes()[..1], true));
        // A NUL after the first 8 KiB is not looked at.
        let mut late = vec![b'a'; SNIFF_BYTES];
        late.push(0);
        assert!(!is_binary(&late, true));
    }

    #[test]
    fn one_line_escapes_controls_only() {
        assert_eq!(one_line(r#"plain "text" \ ok"#), r#"plain "text" \ ok"#);
        assert_eq!(one_line("a\nb: lost update\r"), r"a\nb: lost update\r");
    }
}
