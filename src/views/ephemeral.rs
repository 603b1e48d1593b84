//! Built-in ephemeral names: the temporaries that common tools make beside the files they
//! edit. They are versioned like any file and stay in `.history`, but MANIFEST lists
//! them neither as files nor as restorable content (docs/views.md). The rules'
//! `ephemeral` globs add to these.
//!
//! Matched against a file's name (its last component), never its directory:
//!
//! | pattern | made by |
//! |---|---|
//! | `.*.sw?` | vim's swap files (`.plan.md.swp`, `.swo`, ...) |
//! | `*~` | vim's and emacs's backups (`plan.md~`) |
//! | `4913` | vim, probing whether it may create a file in the directory |
//! | `.#*` | emacs's lock files |
//! | `#*#` | emacs's auto-save files |
//! | `sed??????` | GNU `sed -i` (`sed` and 6 letters or digits) |
//! | `tmp` + 8 of `[a-z0-9_]`, then nothing or `.suffix` | Python's `tempfile` (`tmpk2j_9x1q`, `tmpk2j_9x1q.json`) |
//! | `.tmp-*` | Anthropic's memory tool, writing a file before renaming it into place |
//! | `*-journal`, `*-wal`, `*-shm` | SQLite's rollback journal, write-ahead log and its index |

/// The patterns of [`is_builtin`], for documentation and messages.
pub const BUILTIN: &[&str] = &[
    ".*.sw?",
    "*~",
    "4913",
    ".#*",
    "#*#",
    "sed??????",
    "tmp????????[.*]",
    ".tmp-*",
    "*-journal",
    "*-wal",
    "*-shm",
];

/// Whether a file named `name` (the last component of its path) is a temporary of a
/// common tool (see the module's table).
pub fn is_builtin(name: &str) -> bool {
    let b = name.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    // vim: `.*.sw?`
    (b.len() >= 5 && b[0] == b'.' && &b[b.len() - 4..b.len() - 1] == b".sw")
        || (b.len() > 1 && b.ends_with(b"~"))
        || name == "4913"
        || (b.len() > 2 && b.starts_with(b".#"))
        || (b.len() > 2 && b.starts_with(b"#") && b.ends_with(b"#"))
        || (b.len() == 9 && b.starts_with(b"sed") && b[3..].iter().all(alnum))
        || python_tempfile(b)
        || (b.len() > 5 && b.starts_with(b".tmp-"))
        || [&b"-journal"[..], b"-wal", b"-shm"]
            .iter()
            .any(|s| b.len() > s.len() && b.ends_with(s))
}

/// Python's `tempfile` names: `tmp`, 8 characters of `[a-z0-9_]`
/// (`tempfile._RandomNameSequence`), then nothing or a suffix starting with `.`.
fn python_tempfile(b: &[u8]) -> bool {
    b.len() >= 11
        && b.starts_with(b"tmp")
        && b[3..11]
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
        && (b.len() == 11 || b[11] == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_temporaries_of_common_tools() {
        for name in [
            ".plan.md.swp",
            ".plan.md.swo",
            ".x.swx",
            "plan.md~",
            "4913",
            ".#plan.md",
            "#plan.md#",
            "sedAb12cZ",
            "tmpk2j_9x1q",
            "tmpabcdefgh.json",
            ".tmp-plan.md-1234",
            "state.db-journal",
            "state.db-wal",
            "state.db-shm",
        ] {
            assert!(is_builtin(name), "{name}");
        }
        for name in [
            "plan.md",
            ".swp",
            "~",
            "49130",
            "sed",
            "sedimentary",
            "sedAb12c",
            "tmpnotes.md",
            "tmpresults.csv",
            "tmpABCDEFGH",
            "tmpabcdefghx",
            ".tmp",
            "-wal",
            "#",
            "notes.swp",
            "journal",
        ] {
            assert!(!is_builtin(name), "{name}");
        }
    }
}
