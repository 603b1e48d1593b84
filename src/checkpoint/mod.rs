//! Checkpoints, rollback, forks and time travel (issue 14; docs/checkpoints.md).
//!
//! A checkpoint is a named [`Point`] in history: the last row of the namespace log
//! (`tree_log`, which every create, unlink, rename and attribute change appends to) and
//! the last version when it was taken. It costs one row: the tree at a point is computed
//! from history ([`Snapshot`]), never copied. Everything here is backend-neutral: the
//! store computes the rows ([`crate::store::Store::snapshot`]), and the views
//! (`.checkpoints/NAME/`), `rollback`, `fork`, `compare`, `adopt` and `mount --at` use
//! the tree built from them.

pub mod snapshot;

pub use snapshot::{SnapNode, SnapVersion, Snapshot};

use crate::error::{Error, Result};

/// Name of the directory at the root that serves every checkpoint's tree
/// (`.checkpoints/NAME/`): resolvable, not listed, like `.history`.
pub const CHECKPOINTS_DIR: &[u8] = b".checkpoints";

/// The start of the names of the safety checkpoints rollbacks take
/// ([`safety_name`]); reserved for them.
pub const SAFETY_PREFIX: &str = "before-rollback-to-";

/// Longest checkpoint name, bytes (a name is a directory name under `.checkpoints`).
pub const NAME_MAX: usize = 255;

/// A point in history: what existed when it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Point {
    /// The last `tree_log` row (0: before any).
    pub tree_seq: i64,
    /// The last `versions.id` (0: before any).
    pub version_seq: i64,
    /// The last `events.id` (0: before any): what a fork keeps of the log.
    pub event_seq: i64,
    /// When, ns since the Unix epoch.
    pub time_ns: i64,
}

/// A named point, as `scratchfs checkpoints` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Checkpoint {
    /// `checkpoints.id`.
    pub id: i64,
    /// Its name (printable, no `/`, unique among the checkpoints not dropped).
    pub name: String,
    /// Where in history it points.
    pub point: Point,
    /// Who took it (the resolved writer name, SPEC §5).
    pub writer: String,
    /// The uid of the process that took it.
    pub uid: u32,
    /// The note given with it.
    pub note: Option<String>,
    /// Taken by a rollback, of the state it replaced (a safety checkpoint).
    pub auto: bool,
}

/// What a rollback did (`scratchfs rollback NAME`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RollbackReport {
    /// The checkpoint rolled back to.
    pub checkpoint: String,
    /// The safety checkpoint taken first, of the state before the rollback.
    pub safety: String,
    /// Files given their content at the checkpoint again (a version with op `rollback`).
    pub changed: u64,
    /// Files and directories deleted since, brought back.
    pub restored: u64,
    /// Files and directories created since, removed (their last content in `.archive`).
    pub removed: u64,
    /// Nodes moved back to where they were (renamed since).
    pub moved: u64,
    /// Nodes whose mode or owner was set back.
    pub reattributed: u64,
}

/// The point `at` names (`--at NAME|TIME`): the checkpoint of that name if there is one,
/// else the time it parses as ([`crate::cli::time::parse_ns`]: RFC 3339, `YYYY-MM-DD`,
/// `@SECONDS`), with how to name it in messages. `ENOENT` when it is neither, or names a
/// time before the namespace history begins.
pub fn resolve_at(store: &dyn crate::store::History, at: &str) -> Result<(Point, String)> {
    if let Some(cp) = store.checkpoints()?.into_iter().find(|c| c.name == at) {
        return Ok((cp.point, format!("checkpoint {}", cp.name)));
    }
    match crate::cli::time::parse_ns(at) {
        Ok(t) => Ok((store.point_at(t)?, crate::cli::time::utc_exact(t))),
        Err(_) => Err(Error::new(
            libc::ENOENT,
            format!(
                "{}: no checkpoint of that name (scratchfs checkpoints lists them), and not a \
                 time (RFC 3339, YYYY-MM-DD or @SECONDS)",
                crate::views::quote_path(at)
            ),
        )),
    }
}

/// Checks a checkpoint name: 1 to [`NAME_MAX`] bytes of printable characters (no control
/// character), no `/`, not `.` or `..`, nothing the secret check finds
/// ([`crate::rules::enforce::secret_in`]). `EINVAL` names what is wrong.
pub fn check_name(name: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::new(
            libc::EINVAL,
            format!("checkpoint name {}: {why}", crate::views::quote_path(name)),
        ))
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > NAME_MAX {
        return bad("longer than 255 bytes");
    }
    if name == "." || name == ".." {
        return bad("not a name");
    }
    if name.contains('/') {
        return bad("contains '/'");
    }
    // A name is stored and shown in clear (it names the checkpoint): one that looks like
    // a secret is refused, as content in a deny_secrets path is (issue 31), and not
    // quoted back.
    if let Some(kind) = crate::rules::enforce::secret_in(name.as_bytes()) {
        let shown = crate::rules::enforce::redact_secrets(name.as_bytes());
        return Err(Error::new(
            libc::EINVAL,
            format!(
                "checkpoint name {}: holds {kind}, and names are kept in clear (docs/rules.md, \
                 \"No secret at rest\"): choose another",
                crate::views::quote_path(&String::from_utf8_lossy(&shown))
            ),
        ));
    }
    if name
        .chars()
        .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}')
    {
        return bad("contains a control character (names are printable)");
    }
    if name.chars().any(is_invisible) {
        return bad(
            "contains an invisible or blank character other than a plain space (zero-width, \
             a bidirectional override, a filler, a private-use or non-ASCII space character) \
             that can make a name read as another",
        );
    }
    if name.starts_with(' ') || name.ends_with(' ') {
        return bad("starts or ends with a space");
    }
    if crate::cli::time::parse_ns(name).is_ok() {
        return bad(
            "reads as a time, and --at takes a name before a time (name it step-… instead)",
        );
    }
    Ok(())
}

/// Characters that show as nothing, or as a blank other than a plain space, or as
/// whatever a font makes of them: Unicode's format characters (zero-width ones,
/// bidirectional marks, embeddings, overrides and isolates, the BOM, the soft hyphen,
/// tags, musical formatting), the combining grapheme joiner, variation selectors, Hangul
/// and Khmer fillers, private-use characters, and every space but U+0020.
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00a0}' | '\u{00ad}' | '\u{034f}' | '\u{061c}' | '\u{115f}' | '\u{1160}'
        | '\u{1680}' | '\u{17b4}' | '\u{17b5}' | '\u{180b}'..='\u{180f}'
        | '\u{2000}'..='\u{200f}' | '\u{202a}'..='\u{202f}' | '\u{205f}'..='\u{206f}'
        | '\u{3000}' | '\u{3164}' | '\u{e000}'..='\u{f8ff}' | '\u{fe00}'..='\u{fe0f}'
        | '\u{feff}' | '\u{ffa0}' | '\u{fff0}'..='\u{fffb}' | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0000}'..='\u{e0fff}' | '\u{f0000}'..='\u{10ffff}')
}

/// Checks a checkpoint's note: any text but control characters other than newline and
/// tab, and [`is_invisible`] ones other than a space (`EINVAL`), at most 4 KiB.
pub fn check_note(note: &str) -> Result<()> {
    let bad = note.len() > 4096
        || note.chars().any(|c| {
            (c.is_control() && c != '\n' && c != '\t') || (is_invisible(c) && c != '\u{a0}')
        });
    if bad {
        return Err(Error::new(
            libc::EINVAL,
            "checkpoint note: at most 4 KiB of text without control or invisible characters",
        ));
    }
    Ok(())
}

/// The name of the safety checkpoint a rollback to `target` takes at `time_ns`:
/// `before-rollback-to-<target>-<UTC time to the ms>` (cut to [`NAME_MAX`] bytes).
pub fn safety_name(target: &str, time_ns: i64) -> String {
    let t = jiff::Timestamp::from_nanosecond(i128::from(time_ns))
        .map(|t| t.strftime("%Y%m%dT%H%M%S%.3fZ").to_string())
        .unwrap_or_else(|_| time_ns.to_string());
    let mut target = target.to_string();
    let room = NAME_MAX - "before-rollback-to--".len() - t.len();
    while target.len() > room {
        target.pop();
    }
    format!("{SAFETY_PREFIX}{target}-{t}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_printable_without_slashes() {
        for ok in ["before-refund", "step 5", "é", &"x".repeat(255)] {
            check_name(ok).unwrap();
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a\nb",
            "tab\t",
            &"x".repeat(256),
            "\u{202e}evil",
            "zero\u{200b}width",
            " ",
            " lead",
            "trail ",
            "nb\u{a0}sp",
            "tag\u{e0041}",
            "pua\u{e000}",
            "hangul\u{3164}",
            "2026-12-02T12:30:00Z",
            "@1",
            "cpAKIAIOSFODNN7EXAMPLE",
        ] {
            let e = check_name(bad).unwrap_err();
            assert!(!e.reason.contains("AKIAIOSFODNN7EXAMPLE"), "{}", e.reason);
            assert_eq!(e.errno, libc::EINVAL, "{bad:?}");
        }
    }

    #[test]
    fn safety_names_are_valid_and_dated() {
        let n = safety_name("before-refund", 1_764_672_000_123_000_000);
        assert_eq!(n, "before-rollback-to-before-refund-20251202T104000.123Z");
        check_name(&n).unwrap();
        let long = safety_name(&"y".repeat(255), 0);
        assert!(long.len() <= NAME_MAX);
        check_name(&long).unwrap();
    }
}
