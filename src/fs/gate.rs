//! The policy gate (SPEC §5, §6, §10 "One gate"; docs/rules.md "Every operation").
//!
//! Every operation that changes the tree or its history describes itself as a [`Change`]
//! and asks [`Gate::check`], which answers allow (`Ok`) or a refusal: an [`Error`] with
//! the errno the caller sees and a one-line reason (path, writer, rule, what failed).
//! Every refusal is recorded by `Fs::record_refusal` (below), with the refused content
//! and the reason redacted; `Fs::admit` asks and records in one call, and the write and
//! commit paths, which must also drop a handle's private copy, ask [`Gate::check`] and
//! then record through the same function. Nothing else in the core decides whether a
//! writer may do something. The gate itself is pure: it reads no store and
//! no tree, so it is tested without a kernel (the unit tests below, and
//! `tests/gate.rs`).
//!
//! Errnos (SPEC §6): `EACCES` for a writer that may not touch a path, a `read-only` or
//! `write-once` path, a view, and every refusal of a directory rename (refused whole);
//! `EPERM` for a change before an `append-only` file's committed end, and for
//! history-erasing actions (gc, redact) by anyone but root or the user who mounted;
//! `EINVAL` for content (format, type, field writer, `max_bytes`, secrets);
//! `EOPNOTSUPP` for creating, or opening for writing, the shared-memory index (`-shm`) of
//! an SQLite database in WAL mode, with or without rules ([`wal_index_refusal`]).

use std::borrow::Cow;

use super::quota::RefusalRoom;
use super::{Fs, ROOT};
use crate::error::{Error, Result};
use crate::identity::Caller;
use crate::rules::enforce::{Action, Compiled, secret_in};
use crate::rules::{Format, Mode};
use crate::store::{Kind, Refused};
use crate::views::{self, View};

/// Bytes before a write's (or an append's) new bytes that are searched for a secret
/// together with them, so that a secret split between two writes is still found. The
/// longest fixed-shape secret the patterns know (a GitHub fine-grained token) is under
/// 100 bytes; a JWT or a key block longer than this that is split exactly across two
/// writes is found at commit when the whole file is checked.
pub const SECRET_OVERLAP: usize = 1024;

/// The new content of a commit, as the gate needs to see it.
#[derive(Debug, Clone, Copy)]
pub enum Content<'a> {
    /// Not given: the path has no content rule ([`Gate::needs_content`] is false).
    Unchecked,
    /// The whole content the file would have.
    Whole(&'a [u8]),
    /// An append: the file grows from `old_len` to `new_len` bytes; `window` holds the
    /// bytes from `window_at` (at most [`SECRET_OVERLAP`] before `old_len`) to the end.
    /// Only for paths where [`Gate::append_needs_whole`] is false.
    Appended {
        /// Committed size before the append, bytes.
        old_len: u64,
        /// Size after the append, bytes.
        new_len: u64,
        /// Offset of `window`'s first byte in the file.
        window_at: u64,
        /// The bytes from `window_at` to `new_len`.
        window: &'a [u8],
    },
}

/// One entry of a rename: a path that leaves `from` and arrives at `to`.
#[derive(Debug, Clone)]
pub struct Move {
    /// Path before the rename.
    pub from: String,
    /// Path after the rename.
    pub to: String,
    /// File or directory.
    pub kind: Kind,
    /// The file's current content, when the gate asked for it ([`Gate::move_needs_content`]).
    pub content: Option<Vec<u8>>,
}

/// A change to the tree or its history, as the gate judges it.
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    /// `create` (a file) or `mkdir` (a directory) at `path`.
    Create {
        /// The new path.
        path: &'a str,
        /// What is created.
        kind: Kind,
        /// The file would be the shared-memory index of an SQLite database in WAL mode
        /// (`N-shm` beside `N` and `N-wal`): refused ([`wal_index_refusal`]).
        wal_index: bool,
    },
    /// `open` for writing, or with `O_TRUNC`.
    Open {
        /// The file.
        path: &'a str,
        /// `O_TRUNC`: the committed bytes go.
        trunc: bool,
        /// Size of the committed version, bytes.
        committed_len: u64,
        /// Opened for writing, and the shared-memory index of an SQLite database in WAL
        /// mode: refused ([`wal_index_refusal`]).
        wal_index: bool,
    },
    /// `write(2)` into a handle's private copy: refused already when the commit is
    /// certain to be refused (SPEC §6 "at write when already certain").
    Write {
        /// The file.
        path: &'a str,
        /// Offset in the file of the first byte written.
        at: u64,
        /// The bytes written.
        data: &'a [u8],
        /// The size the handle's content has after this write.
        size_after: u64,
        /// Size of the committed version, bytes.
        committed_len: u64,
        /// An `O_APPEND` handle (its bytes land at the end of whatever is current).
        append: bool,
        /// The bytes from `window_at` through the end of `data` (the overlap searched
        /// for secrets with `data`).
        window: &'a [u8],
        /// Offset of `window` in the file.
        window_at: u64,
        /// Everything the handle would commit, for a `json` path written in order up to
        /// its end ([`Gate::write_needs_whole`]); else `None`.
        whole: Option<&'a [u8]>,
        /// The committed content, for a path with `fields` when `whole` is given.
        current: Option<&'a [u8]>,
    },
    /// A commit of a write handle (close, fsync, release): the writer is checked again
    /// against the file's path now (a handle opened elsewhere may have been moved under
    /// another rule since), then the content.
    Commit {
        /// The file.
        path: &'a str,
        /// The first content of a file the committing handle created (its `create` was
        /// checked; a `write-once` file takes its content then).
        first: bool,
        /// The handle that created the file commits again, only extending what it
        /// committed before (a forked child's close committed its first part, say): it
        /// is still creating the file, so a `write-once` path takes it.
        growing: bool,
        /// The committed content the commit replaces (for `fields`); `None` when the
        /// path has no `fields`.
        current: Option<&'a [u8]>,
        /// The new content.
        new: Content<'a>,
    },
    /// `truncate(2)` outside a handle (a version at once): the file's committed content
    /// is cut to, or extended with zeros to, `size`.
    Truncate {
        /// The file.
        path: &'a str,
        /// New size, bytes.
        size: u64,
        /// Size of the committed version, bytes.
        committed_len: u64,
        /// The committed content, when [`Gate::needs_content`] says so.
        current: Option<&'a [u8]>,
    },
    /// `ftruncate(2)` through a write handle (committed with the handle): only the
    /// `append-only` check; content is checked at commit.
    TruncateHandle {
        /// The file.
        path: &'a str,
        /// New size, bytes.
        size: u64,
        /// Size of the committed version, bytes.
        committed_len: u64,
    },
    /// `chmod`, `chown` or `utimensat` of a file or directory.
    SetAttr {
        /// The file or directory.
        path: &'a str,
        /// Which.
        kind: Kind,
    },
    /// `unlink` or `rmdir`.
    Remove {
        /// The path that goes.
        path: &'a str,
        /// File or directory.
        kind: Kind,
        /// The file's content, when [`Gate::has_fields`] says so (every key it holds
        /// goes).
        content: Option<&'a [u8]>,
    },
    /// `rename`: every path under the old name leaves and arrives under the new one
    /// (the first move is the renamed node itself). `replaced`: the current content of a
    /// file the rename replaces at `moves[0].to`, when the gate asked for it; `replaces`:
    /// whether it replaces anything.
    Rename {
        /// What moves, the renamed node first.
        moves: &'a [Move],
        /// The rename replaces an existing file or empty directory.
        replaces: bool,
        /// The replaced file's content (for the target's `fields`).
        replaced: Option<&'a [u8]>,
    },
    /// A restore: `restored` (an old version's bytes) becomes the file's content, a
    /// commit by the caller (through the mount's attribute, the CLI, later MCP).
    Restore {
        /// The file.
        path: &'a str,
        /// The committed content it replaces.
        current: &'a [u8],
        /// The content restored.
        restored: &'a [u8],
    },
    /// Taking checkpoint `name` (issue 14): anyone, unless the rules' `checkpoints.take`
    /// names the writers that may (`EACCES`); root and the user who mounted always. Others
    /// may not take one while [`MAX_CHECKPOINTS`] are kept (`EDQUOT`: each keeps history
    /// from gc, and only root releases them), nor one whose name starts with
    /// [`crate::checkpoint::SAFETY_PREFIX`] (`EACCES`: those are a rollback's).
    Checkpoint {
        /// The checkpoint's name.
        name: &'a str,
        /// How many checkpoints are kept now (not dropped).
        kept: usize,
    },
    /// Bringing files of another database into the tree through the mount's daemon
    /// (`user.scratchfs.adopt`, issue 14): the daemon reads that database with its own
    /// privileges, so root and the user who mounted only (`EPERM`). Each file is then
    /// judged as [`Change::Adopt`].
    AdoptFrom {
        /// The other database's path.
        source: &'a str,
    },
    /// Rolling the whole tree back to checkpoint `name` (issue 14): root, the user who
    /// mounted, or a writer the rules' `checkpoints.rollback` names (`EPERM`).
    Rollback {
        /// The checkpoint's name.
        name: &'a str,
    },
    /// Bringing a file's content from another scratchpad (`scratchfs adopt`, issue 14): a
    /// commit (or, for a new file, a create and its first commit) of `adopted` by the
    /// caller, judged as a restore of those bytes.
    Adopt {
        /// The file.
        path: &'a str,
        /// Its committed content; `None`: the file does not exist (it is created).
        current: Option<&'a [u8]>,
        /// The content brought.
        adopted: &'a [u8],
    },
    /// A history-erasing action (`gc`, `redact`, `drop-checkpoint`): root or the user who
    /// mounted only.
    Erase {
        /// Which action ("gc", "redact").
        what: &'a str,
        /// The path it concerns ("" for the whole scratchpad).
        path: &'a str,
    },
}

impl Change<'_> {
    /// The path a refusal of this change is recorded under.
    pub fn path(&self) -> &str {
        match self {
            Change::Create { path, .. }
            | Change::Open { path, .. }
            | Change::Write { path, .. }
            | Change::Commit { path, .. }
            | Change::Truncate { path, .. }
            | Change::TruncateHandle { path, .. }
            | Change::SetAttr { path, .. }
            | Change::Remove { path, .. }
            | Change::Restore { path, .. }
            | Change::Adopt { path, .. }
            | Change::Erase { path, .. } => path,
            Change::Checkpoint { .. } | Change::Rollback { .. } | Change::AdoptFrom { .. } => "",
            Change::Rename { moves, .. } => moves.first().map(|m| m.from.as_str()).unwrap_or(""),
        }
    }
}

/// Most checkpoints kept (not dropped) before a writer other than root and the user who
/// mounted is refused another (`EDQUOT`).
pub const MAX_CHECKPOINTS: usize = 1000;

/// The writer rules a gate enforces now: read with [`Rules::load`] (a snapshot that one
/// operation uses throughout), replaced whole with [`Rules::set`].
#[derive(Debug, Default)]
pub struct Rules(crate::sync::RwLock<Option<std::sync::Arc<Compiled>>>);

impl Rules {
    /// The rules now (`None`: the defaults).
    pub fn load(&self) -> Option<std::sync::Arc<Compiled>> {
        self.0.read().clone()
    }

    /// Enforces `rules` from now on (`None`: the defaults).
    pub fn set(&self, rules: Option<Compiled>) {
        *self.0.write() = rules.map(std::sync::Arc::new);
    }

    /// Whether there are rules (not the defaults).
    pub fn is_some(&self) -> bool {
        self.0.read().is_some()
    }
}

/// The gate: the rules a mount (or a CLI command) runs with, and who may erase history.
#[derive(Debug)]
pub struct Gate {
    /// The writer rules (SPEC §5); none: the defaults, anyone may change anything.
    /// Swappable while mounted: several daemons of one PostgreSQL database enforce the
    /// rules it stores, and a change of them reaches every daemon (issue 15).
    pub rules: Rules,
    /// uids that may erase history (gc, redact) and roll back: root and the user who
    /// mounted.
    pub admins: Vec<u32>,
    /// A mount of the past (`mount --at`, issue 14): every change is refused with
    /// `EROFS`.
    pub read_only: bool,
}

/// The refusal of an SQLite WAL index (`N-shm`, created or opened for writing): SQLite
/// in WAL mode shares that file between processes through `mmap(MAP_SHARED)`, which
/// private write copies cannot keep coherent (a process got `SIGBUS`, or silently read
/// another copy's bytes and lost committed rows). `EOPNOTSUPP` makes SQLite fail cleanly:
/// its open of the index fails, so the statement that needs it gets `SQLITE_CANTOPEN`
/// ("unable to open database file"), or, when an index already exists and opens
/// read-only, writes get `SQLITE_READONLY` (docs/SEMANTICS.md).
pub fn wal_index_refusal(path: &str) -> Error {
    Error::new(
        libc::EOPNOTSUPP,
        format!(
            "{path}: SQLite's WAL mode is not supported in the mount (its -shm index must be \
             shared through mmap between processes, which private write copies cannot do); \
             use the rollback journal: PRAGMA journal_mode=DELETE (on a database already in \
             WAL mode, run PRAGMA locking_mode=EXCLUSIVE first) (docs/SEMANTICS.md)"
        ),
    )
}

fn refuse<T>(errno: i32, reason: String) -> Result<T> {
    Err(Error::new(errno, reason))
}

/// The longest path a refusal's record keeps, bytes: `PATH_MAX` (4,096, <linux/limits.h>),
/// the longest a system call passes. A path that arrives by another way (an attribute's
/// value, up to 64 KiB) is cut there and ends in `...`: a refused caller chooses what it
/// sends, and the record must not grow by its choice (attack round of session 30: a
/// refused promotion record stored a 60,000-byte path).
pub const RECORD_PATH_MAX: usize = 4096;

/// The longest reason a refusal's record keeps, bytes (8 KiB: two paths of `PATH_MAX`
/// and the words around them). A reason quotes what the caller sent (an MCP argument of
/// the wrong type, an attribute's value): uncut, one MCP request stored a 9,000,042-byte
/// reason and one `setfattr` 65,161 bytes (attack round of session 31).
pub const RECORD_REASON_MAX: usize = 8192;

/// `path` cut to [`RECORD_PATH_MAX`] bytes (at a character's boundary, `...` at its end)
/// when longer.
fn cut_path(path: String) -> String {
    cut(path, RECORD_PATH_MAX)
}

pub(super) use crate::text::cut;

impl Gate {
    /// A gate with no writer rules, whose history-erasing actions belong to root and to
    /// the user this process runs as.
    pub fn new() -> Gate {
        let me = unsafe { libc::geteuid() };
        Gate {
            rules: Rules::default(),
            admins: if me == 0 { vec![0] } else { vec![0, me] },
            read_only: false,
        }
    }

    /// Whether a commit, truncation or restore of `path` needs the file's content
    /// (a rule with a `format`, `max_bytes`, `deny_secrets` or `fields`).
    pub fn needs_content(&self, path: &str) -> bool {
        self.rules
            .load()
            .as_deref()
            .is_some_and(|r| r.checks_content(path))
    }

    /// Whether `path`'s rule has per-key `fields` (commits need the current content).
    pub fn has_fields(&self, path: &str) -> bool {
        self.rules
            .load()
            .as_deref()
            .and_then(|r| r.rule_for(path))
            .is_some_and(|r| r.fields.is_some())
    }

    /// Whether an append to `path` must be checked on the whole content (a `json` or
    /// `jsonl` format, or `fields`) rather than on its new bytes ([`Content::Appended`]).
    pub fn append_needs_whole(&self, path: &str) -> bool {
        self.rules
            .load()
            .as_deref()
            .and_then(|r| r.rule_for(path))
            .is_some_and(|r| {
                r.fields.is_some() || matches!(r.format, Some(Format::Json | Format::Jsonl))
            })
    }

    /// Whether a write to `path` that ends at the handle's end should carry the whole
    /// content written so far ([`Change::Write`] `whole`): `json` paths, so that a syntax
    /// error, or a complete object breaking `fields`, is refused at `write`.
    pub fn write_needs_whole(&self, path: &str) -> bool {
        self.rules
            .load()
            .as_deref()
            .is_some_and(|r| r.is_json(path))
    }

    /// Whether `path` is `write-once`.
    pub fn is_write_once(&self, path: &str) -> bool {
        self.rules
            .load()
            .as_deref()
            .and_then(|r| r.rule_for(path))
            .is_some_and(|r| r.mode == Mode::WriteOnce)
    }

    /// Whether writes to `path` are searched for secrets (`deny_secrets`).
    pub fn checks_secrets(&self, path: &str) -> bool {
        self.rules
            .load()
            .as_deref()
            .and_then(|r| r.rule_for(path))
            .is_some_and(|r| r.deny_secrets)
    }

    /// Whether a [`Move`] from `from` to `to` needs the file's content.
    pub fn move_needs_content(&self, from: &str, to: &str) -> bool {
        self.has_fields(from) || self.needs_content(to)
    }

    /// Whether the gate checks anything beyond history-erasing actions.
    pub fn has_rules(&self) -> bool {
        self.rules.is_some()
    }

    /// Whether `caller` is root or the user who mounted: the trusted, whom the pad's quota
    /// does not bind (issue 36: as a file system's blocks reserved for root, so that an
    /// agent that fills the pad cannot silence the harness).
    pub fn is_trusted(&self, caller: &Caller) -> bool {
        self.admins.contains(&caller.uid)
    }

    /// Whether `caller` may roll the scratchpad back (issue 14): root, the user who
    /// mounted, or a writer the rules' `checkpoints.rollback` names (`*`: any). The same
    /// callers may wait for a rollback's cache invalidations
    /// ([`super::serve::SETTLED_XATTR`]: a wait that holds one of the daemon's workers).
    pub fn may_roll_back(&self, caller: &Caller) -> bool {
        self.admins.contains(&caller.uid)
            || self.rules.load().as_deref().is_some_and(|r| {
                r.rules
                    .checkpoints
                    .rollback
                    .iter()
                    .any(|w| w == "*" || *w == caller.writer)
            })
    }

    /// The verdict on `change` by `caller`: `Ok` (allowed) or the refusal, with its errno
    /// and reason. Records nothing (`Fs::admit` does).
    pub fn check(&self, caller: &Caller, change: &Change<'_>) -> Result<()> {
        // A reason names paths, and a name can hold a secret: none leaves the gate.
        self.verdict(caller, change).map_err(|mut e| {
            if let std::borrow::Cow::Owned(r) = Self::redact(e.reason.as_bytes()) {
                e.reason = String::from_utf8_lossy(&r).into_owned();
            }
            e
        })
    }

    fn verdict(&self, caller: &Caller, change: &Change<'_>) -> Result<()> {
        if self.read_only {
            return refuse(
                libc::EROFS,
                format!(
                    "{}: this mount shows the past (mount --at): it is read-only",
                    match change.path() {
                        "" => "the scratchpad",
                        p => p,
                    }
                ),
            );
        }
        if let Change::AdoptFrom { source } = change {
            if self.admins.contains(&caller.uid) {
                return Ok(());
            }
            return refuse(
                libc::EPERM,
                format!(
                    "adopt from {source} by uid {} refused: the daemon reads the other database \
                     with its own privileges, so adopting through the mount is for root and the \
                     user who mounted (scratchfs adopt, run as a user who can read both, works)",
                    caller.uid
                ),
            );
        }
        if let Change::Checkpoint { name, kept } = *change
            && !self.admins.contains(&caller.uid)
        {
            let head = name.get(..crate::checkpoint::SAFETY_PREFIX.len());
            if head.is_some_and(|h| h.eq_ignore_ascii_case(crate::checkpoint::SAFETY_PREFIX)) {
                return refuse(
                    libc::EACCES,
                    format!(
                        "checkpoint {name} by writer {} refused: names starting with {} are the \
                         safety checkpoints rollbacks take",
                        caller.writer,
                        crate::checkpoint::SAFETY_PREFIX
                    ),
                );
            }
            if kept >= MAX_CHECKPOINTS {
                return refuse(
                    libc::EDQUOT,
                    format!(
                        "checkpoint {name} by writer {} refused: {kept} checkpoints are kept, at \
                         most {MAX_CHECKPOINTS} (root or the user who mounted releases them: gc \
                         --drop-checkpoint NAME)",
                        caller.writer
                    ),
                );
            }
        }
        if let Change::Checkpoint { name, .. } = change {
            // Root and the user who mounted (the harness) may always.
            let rules = self.rules.load();
            let take = rules
                .as_deref()
                .and_then(|r| r.rules.checkpoints.take.as_ref())
                .filter(|_| !self.admins.contains(&caller.uid));
            return match take {
                Some(list) if !list.iter().any(|w| w == "*" || *w == caller.writer) => refuse(
                    libc::EACCES,
                    format!(
                        "checkpoint {name} by writer {} refused: the rules' checkpoints.take allows {}",
                        caller.writer,
                        if list.is_empty() {
                            "no writer".to_string()
                        } else {
                            list.join(", ")
                        }
                    ),
                ),
                _ => Ok(()),
            };
        }
        if let Change::Rollback { name } = change {
            if self.may_roll_back(caller) {
                return Ok(());
            }
            return refuse(
                libc::EPERM,
                format!(
                    "rollback to {name} by uid {} (writer {}) refused: rolling back is for root, \
                     the user who mounted (uid {}) and the writers the rules' checkpoints.rollback names",
                    caller.uid,
                    caller.writer,
                    self.admins
                        .iter()
                        .map(|u| u.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        if let Change::Erase { what, path } = change {
            if self.admins.contains(&caller.uid) {
                return Ok(());
            }
            let on = if path.is_empty() {
                String::new()
            } else {
                format!("{path}: ")
            };
            return refuse(
                libc::EPERM,
                format!(
                    "{on}{what} by uid {} refused: erasing history is for root or the user who mounted (uid {})",
                    caller.uid,
                    self.admins
                        .iter()
                        .map(|u| u.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        if let Change::Create {
            path,
            wal_index: true,
            ..
        }
        | Change::Open {
            path,
            wal_index: true,
            ..
        } = change
        {
            return Err(wal_index_refusal(path));
        }
        let Some(r) = self.rules.load() else {
            return Ok(());
        };
        let w = caller.writer.as_str();
        let einval = |reason: String| Error::new(libc::EINVAL, reason);
        match *change {
            Change::Create { path, kind, .. } => {
                r.check(
                    path,
                    caller,
                    if kind == Kind::Dir {
                        Action::Mkdir
                    } else {
                        Action::Create
                    },
                )?;
                self.name_secret(path, w)
            }
            Change::Open {
                path,
                trunc,
                committed_len,
                ..
            } => {
                r.check(path, caller, Action::Modify)?;
                if trunc {
                    self.append_only(path, w, 0, committed_len)?;
                }
                Ok(())
            }
            Change::Write {
                path,
                at,
                data,
                size_after,
                committed_len,
                append,
                window,
                window_at,
                whole,
                current,
            } => {
                if !append {
                    self.append_only(path, w, at, committed_len)?;
                }
                r.validate_write(path, w, at, data).map_err(einval)?;
                let Some(rule) = r.rule_for(path) else {
                    return Ok(());
                };
                if let Some(max) = rule.max_bytes
                    && size_after > max
                {
                    return Err(einval(format!(
                        "{path}: writer {w} refused by rule \"{}\": max_bytes {max} exceeded ({size_after} bytes)",
                        rule.path
                    )));
                }
                if rule.deny_secrets
                    && let Some(kind) = secret_in(window)
                {
                    return Err(einval(format!(
                        "{path}: writer {w} refused by rule \"{}\": deny_secrets: content holds {kind} (at byte {window_at} or later)",
                        rule.path
                    )));
                }
                if let Some(whole) = whole {
                    r.validate_json_prefix(path, w, whole).map_err(einval)?;
                    // A complete value (an object, array or string closed, or a literal
                    // whole, only whitespace after): whatever follows can only be
                    // whitespace or a syntax error, so its keys (or that it is no object
                    // at all) are final.
                    if rule.fields.is_some() && complete_value(whole) {
                        r.validate_fields(path, w, current.unwrap_or(b""), whole)
                            .map_err(einval)?;
                    }
                }
                Ok(())
            }
            Change::Commit {
                path,
                first,
                growing,
                current,
                new,
            } => {
                if growing {
                    r.check(path, caller, Action::Create)?;
                } else if !first {
                    r.check(path, caller, Action::Modify)?;
                }
                match new {
                    Content::Unchecked => Ok(()),
                    Content::Whole(bytes) => {
                        r.validate(path, w, bytes).map_err(einval)?;
                        r.validate_fields(path, w, current.unwrap_or(b""), bytes)
                            .map_err(einval)
                    }
                    Content::Appended {
                        old_len,
                        new_len,
                        window_at,
                        window,
                    } => self.appended(path, w, old_len, new_len, window_at, window),
                }
            }
            Change::Truncate {
                path,
                size,
                committed_len,
                current,
            } => {
                r.check(path, caller, Action::Modify)?;
                self.append_only(path, w, size, committed_len)?;
                let Some(rule) = r.rule_for(path) else {
                    return Ok(());
                };
                if let Some(max) = rule.max_bytes
                    && size > max
                {
                    return Err(einval(format!(
                        "{path}: writer {w} refused by rule \"{}\": max_bytes {max} exceeded ({size} bytes)",
                        rule.path
                    )));
                }
                if size > committed_len && matches!(rule.format, Some(Format::Json | Format::Jsonl))
                {
                    return Err(einval(format!(
                        "{path}: writer {w} refused by rule \"{}\": not JSON: a truncation to {size} bytes appends NUL bytes",
                        rule.path
                    )));
                }
                if let Some(cur) = current {
                    let cut = &cur[..(size as usize).min(cur.len())];
                    if size <= committed_len {
                        r.validate(path, w, cut).map_err(einval)?;
                    }
                    r.validate_fields(path, w, cur, cut).map_err(einval)?;
                }
                Ok(())
            }
            Change::TruncateHandle {
                path,
                size,
                committed_len,
            } => self.append_only(path, w, size, committed_len),
            Change::SetAttr { path, kind } => r.check(
                path,
                caller,
                if kind == Kind::Dir {
                    Action::Mkdir
                } else {
                    Action::Modify
                },
            ),
            Change::Remove {
                path,
                kind,
                content,
            } => {
                if kind == Kind::Dir {
                    return r.check(path, caller, Action::Mkdir);
                }
                r.check(path, caller, Action::Remove)?;
                self.keys_removable(path, caller, content, "unlink")
            }
            Change::Rename {
                moves,
                replaces,
                replaced,
            } => {
                let Some(top) = moves.first() else {
                    return Ok(());
                };
                if top.kind == Kind::File {
                    // A file: EACCES for writers and modes, EINVAL for the content the
                    // target would hold (SPEC §4: validated against the target's rule).
                    r.check(&top.from, caller, Action::Remove)?;
                    self.keys_removable(&top.from, caller, top.content.as_deref(), "rename")?;
                    let target = if replaces {
                        Action::Remove
                    } else {
                        Action::Create
                    };
                    r.check(&top.to, caller, target)?;
                    self.name_secret(&top.to, w)?;
                    if let Some(content) = &top.content
                        && r.checks_content(&top.to)
                    {
                        r.validate(&top.to, w, content).map_err(einval)?;
                        r.validate_fields(&top.to, w, replaced.unwrap_or(b""), content)
                            .map_err(einval)?;
                    }
                    return Ok(());
                }
                // A directory: a delete of every path under the old name and a create of
                // every path under the new one, each with its own rule; refused whole.
                let whole = |e: Error| {
                    Error::new(
                        libc::EACCES,
                        format!(
                            "rename of directory {} to {} refused: {}",
                            top.from, top.to, e.reason
                        ),
                    )
                };
                for m in moves {
                    self.name_secret(&m.to, w).map_err(whole)?;
                    match m.kind {
                        Kind::Dir => {
                            r.check(&m.from, caller, Action::Mkdir).map_err(whole)?;
                            r.check(&m.to, caller, Action::Mkdir).map_err(whole)?;
                        }
                        Kind::File => {
                            r.check(&m.from, caller, Action::Remove).map_err(whole)?;
                            self.keys_removable(&m.from, caller, m.content.as_deref(), "rename")
                                .map_err(whole)?;
                            r.check(&m.to, caller, Action::Create).map_err(whole)?;
                            if let Some(content) = &m.content
                                && r.checks_content(&m.to)
                            {
                                r.validate(&m.to, w, content)
                                    .and_then(|()| r.validate_fields(&m.to, w, b"", content))
                                    .map_err(|reason| whole(Error::new(libc::EINVAL, reason)))?;
                            }
                        }
                    }
                }
                Ok(())
            }
            Change::Restore {
                path,
                current,
                restored,
            } => {
                r.check(path, caller, Action::Modify)?;
                if let Some(rule) = r.rule_for(path)
                    && rule.mode == Mode::AppendOnly
                    && !restored.starts_with(current)
                {
                    return refuse(
                        libc::EPERM,
                        format!(
                            "{path}: writer {w} refused by rule \"{}\": append-only: a restore would change bytes before the committed end {}",
                            rule.path,
                            current.len()
                        ),
                    );
                }
                r.validate(path, w, restored).map_err(einval)?;
                r.validate_fields(path, w, current, restored)
                    .map_err(einval)
            }
            Change::Adopt {
                path,
                current,
                adopted,
            } => {
                let action = if current.is_none() {
                    Action::Create
                } else {
                    Action::Modify
                };
                r.check(path, caller, action)?;
                if current.is_none() {
                    self.name_secret(path, w)?;
                }
                let current = current.unwrap_or_default();
                if let Some(rule) = r.rule_for(path)
                    && rule.mode == Mode::AppendOnly
                    && !adopted.starts_with(current)
                {
                    return refuse(
                        libc::EPERM,
                        format!(
                            "{path}: writer {w} refused by rule \"{}\": append-only: adopting would change bytes before the committed end {}",
                            rule.path,
                            current.len()
                        ),
                    );
                }
                r.validate(path, w, adopted).map_err(einval)?;
                r.validate_fields(path, w, current, adopted).map_err(einval)
            }
            Change::Erase { .. }
            | Change::Checkpoint { .. }
            | Change::Rollback { .. }
            | Change::AdoptFrom { .. } => Ok(()),
        }
    }

    /// An `append-only` path (SPEC §5): a change at byte `at` before the committed end
    /// `end` is refused with `EPERM`.
    fn append_only(&self, path: &str, writer: &str, at: u64, end: u64) -> Result<()> {
        let rules = self.rules.load();
        let Some(rule) = rules.as_deref().and_then(|r| r.rule_for(path)) else {
            return Ok(());
        };
        if rule.mode != Mode::AppendOnly || at >= end {
            return Ok(());
        }
        refuse(
            libc::EPERM,
            format!(
                "{path}: writer {writer} refused by rule \"{}\": append-only: a change at byte {at}, before the committed end {end}",
                rule.path
            ),
        )
    }

    /// A name under a `deny_secrets` rule must not hold a secret either: names are
    /// stored (and shown) everywhere and cannot be redacted (`EINVAL`).
    fn name_secret(&self, path: &str, writer: &str) -> Result<()> {
        let rules = self.rules.load();
        let Some(rule) = rules.as_deref().and_then(|r| r.rule_for(path)) else {
            return Ok(());
        };
        match secret_in(path.as_bytes()) {
            Some(kind) if rule.deny_secrets => refuse(
                libc::EINVAL,
                format!(
                    "{path}: writer {writer} refused by rule \"{}\": deny_secrets: the name holds {kind}",
                    rule.path
                ),
            ),
            _ => Ok(()),
        }
    }

    /// A file with `fields` that leaves `path` (unlink, rename away) removes every key it
    /// holds: the writer must be allowed to write each of them (`EACCES`).
    fn keys_removable(
        &self,
        path: &str,
        caller: &Caller,
        content: Option<&[u8]>,
        what: &str,
    ) -> Result<()> {
        let Some(r) = self.rules.load() else {
            return Ok(());
        };
        let Some(rule) = r.rule_for(path) else {
            return Ok(());
        };
        let (Some(fields), Some(content)) = (&rule.fields, content) else {
            return Ok(());
        };
        let Ok(serde_json::Value::Object(map)) =
            serde_json::from_slice::<serde_json::Value>(content)
        else {
            return Ok(());
        };
        for key in map.keys() {
            if let Some(f) = fields.get(key)
                && !f.writers.iter().any(|x| x == "*" || *x == caller.writer)
            {
                return refuse(
                    libc::EACCES,
                    format!(
                        "{path}: writer {} refused by rule \"{}\": {what} would remove key \"{key}\", which only {} may write",
                        caller.writer,
                        rule.path,
                        f.writers.join(", ")
                    ),
                );
            }
        }
        Ok(())
    }

    /// An append checked on its new bytes: `max_bytes` on the new size, secrets in the
    /// window, UTF-8 for a text format (the window may start inside a character).
    fn appended(
        &self,
        path: &str,
        w: &str,
        _old_len: u64,
        new_len: u64,
        window_at: u64,
        window: &[u8],
    ) -> Result<()> {
        let rules = self.rules.load();
        let Some(rule) = rules.as_deref().and_then(|r| r.rule_for(path)) else {
            return Ok(());
        };
        let einval = |what: String| {
            refuse(
                libc::EINVAL,
                format!(
                    "{path}: writer {w} refused by rule \"{}\": {what}",
                    rule.path
                ),
            )
        };
        if let Some(max) = rule.max_bytes
            && new_len > max
        {
            return einval(format!("max_bytes {max} exceeded ({new_len} bytes)"));
        }
        if rule.deny_secrets
            && let Some(kind) = secret_in(window)
        {
            return einval(format!("deny_secrets: content holds {kind}"));
        }
        if rule.format.is_some() {
            let skip = if window_at > 0 {
                window
                    .iter()
                    .take(3)
                    .take_while(|b| (0x80..0xc0).contains(*b))
                    .count()
            } else {
                0
            };
            if let Err(e) = std::str::from_utf8(&window[skip..]) {
                return einval(format!(
                    "not UTF-8 (byte {})",
                    window_at + (skip + e.valid_up_to()) as u64
                ));
            }
        }
        Ok(())
    }

    /// Replaces every secret the `deny_secrets` patterns find in `content` with a marker
    /// naming the pattern and the blake3 of the secret (SPEC §10 "no secret at rest"):
    /// `[REDACTED <kind> blake3:<first 16 hex digits>]`. The rest is kept as it was.
    pub fn redact(content: &[u8]) -> Cow<'_, [u8]> {
        crate::rules::enforce::redact_secrets(content)
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

/// Whether `bytes` is a complete JSON value that no later byte can extend: an object,
/// array or string (its closing `}`, `]` or `"` written) or `true`/`false`/`null`,
/// followed by nothing but whitespace. (A number could still grow: `12` → `123`.)
fn complete_value(bytes: &[u8]) -> bool {
    let end = bytes
        .iter()
        .rposition(|b| !b" \t\r\n".contains(b))
        .map(|i| i + 1)
        .unwrap_or(0);
    end > 0
        && matches!(bytes[end - 1], b'}' | b']' | b'"' | b'e' | b'l')
        && serde_json::from_slice::<serde::de::IgnoredAny>(&bytes[..end]).is_ok()
}

/// Names reserved for views are refused for user files (SPEC §3): `EEXIST` for
/// `MANIFEST`, `.history` and `.archive` (they exist), `EACCES` for `*.outline`.
pub(super) fn check_not_reserved(parent: u64, name: &[u8]) -> Result<()> {
    if !views::is_reserved(parent, name) {
        return Ok(());
    }
    let shown = String::from_utf8_lossy(name);
    if parent == ROOT && (name == views::MANIFEST || views::HISTORY_NAMES.contains(&name)) {
        return Err(Error::new(
            libc::EEXIST,
            format!("{shown}: reserved for the view"),
        ));
    }
    Err(Error::new(
        libc::EACCES,
        format!("{shown}: name reserved for views"),
    ))
}

/// Nothing is created, removed or renamed inside a view directory (`.history`,
/// `.archive`): `EACCES`.
pub(super) fn check_not_view(dir: u64) -> Result<()> {
    if View::of(dir).is_some() {
        return Err(Error::new(libc::EACCES, "views are read-only"));
    }
    Ok(())
}

impl Fs {
    /// The one place a change is allowed or refused: asks [`Gate::check`] and, on a
    /// refusal, records it (path, errno, reason, the caller's provenance and, for
    /// content refusals, the refused content from `refused` with secrets redacted) and
    /// returns it.
    pub(super) fn admit(
        &self,
        caller: &Caller,
        change: &Change<'_>,
        refused: impl FnOnce() -> Option<Vec<u8>>,
    ) -> Result<()> {
        let Err(e) = self.gate.check(caller, change) else {
            return Ok(());
        };
        let content = if e.errno == libc::EINVAL {
            refused()
        } else {
            None
        };
        self.record_refusal(change.path(), caller, &e, content.as_deref());
        Err(e)
    }

    /// Records a refusal in the store (SPEC §6), the content with secrets redacted:
    /// [`Fs::record_refusal_with`] without a digest.
    pub(super) fn record_refusal(
        &self,
        path: &str,
        caller: &Caller,
        e: &Error,
        content: Option<&[u8]>,
    ) {
        self.record_refusal_with(path, caller, e, content, None);
    }

    /// Records a refusal in the store (SPEC §6): its path and reason (secrets redacted, cut
    /// at [`RECORD_PATH_MAX`] and [`RECORD_REASON_MAX`]), errno and caller, and the refused
    /// `content` with secrets redacted, or, where the content is not given, its size and
    /// blake3 (`digest`). At the pad's quota, for a caller it binds ([`Fs::refusal_room`],
    /// docs/rules.md): the content's size and digest instead of the content, and once the
    /// pad is past the quota by [`super::quota::REFUSAL_SLACK_BYTES`], a count instead of
    /// the record ([`Fs::count_refusal`]). A digest goes only in the record's columns,
    /// never its reason ([`crate::store::Refused`]).
    pub(super) fn record_refusal_with(
        &self,
        path: &str,
        caller: &Caller,
        e: &Error,
        content: Option<&[u8]>,
        digest: Option<(u64, String)>,
    ) {
        let mut redacted = content.map(Gate::redact);
        let path = String::from_utf8_lossy(&Gate::redact(path.as_bytes())).into_owned();
        let path = cut_path(path);
        let mut reason = String::from_utf8_lossy(&Gate::redact(e.reason.as_bytes())).into_owned();
        let mut digest = digest;
        let kept = redacted.as_ref().map_or(0, |c| c.len() as u64);
        // The record's texts: its path and its reason (as cut below, at most).
        let texts = (path.len() + reason.len().min(RECORD_REASON_MAX)) as u64;
        let (room, _hold) = self.refusal_room(caller, texts, kept);
        match room {
            RefusalRoom::Whole => {}
            RefusalRoom::WithoutContent => {
                if let Some(c) = redacted.take() {
                    digest = Some((c.len() as u64, blake3::hash(&c).to_hex().to_string()));
                    reason.push_str(" (its content is not kept: the pad is at its quota)");
                }
            }
            RefusalRoom::Counted => {
                self.count_refusal(&path, e.errno, &cut(reason, RECORD_REASON_MAX), caller);
                return;
            }
        }
        let reason = cut(reason, RECORD_REASON_MAX);
        let refused = match (&redacted, &digest) {
            (Some(c), _) => Refused::Content(c),
            (None, Some((size, d))) => Refused::Digest(*size, d),
            (None, None) => Refused::Nothing,
        };
        match self.store.reject(&path, e.errno, &reason, caller, refused) {
            Ok(()) => self.usage_added(
                redacted.as_ref().map_or(0, |c| c.len() as u64) + texts,
                0,
                1,
                0,
            ),
            Err(se) => log::error!("recording a refusal: {se}"),
        }
        self.views.changed(&[]);
    }

    /// Whether a negative lookup of `name` in `parent` may be cached by the kernel: not
    /// for a name reserved for a view (`x.outline` appears with its file).
    pub fn absence_cacheable(&self, parent: u64, name: &[u8]) -> bool {
        !views::is_reserved(parent, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_rules(r: Option<Compiled>) -> super::Rules {
        let rules = super::Rules::default();
        rules.set(r);
        rules
    }
    use crate::rules::Rules;

    #[test]
    fn a_records_path_is_cut_at_path_max_on_a_character() {
        assert_eq!(cut_path("a/b".into()), "a/b");
        let exact = "x".repeat(RECORD_PATH_MAX);
        assert_eq!(cut_path(exact.clone()), exact);
        let long = format!(
            "{}\u{e9}{}",
            "x".repeat(RECORD_PATH_MAX - 4),
            "y".repeat(100)
        );
        let cut = cut_path(long);
        assert!(cut.len() <= RECORD_PATH_MAX, "{}", cut.len());
        assert!(cut.ends_with("x..."), "{}", &cut[cut.len() - 8..]);
    }

    fn gate(rules: &str) -> Gate {
        Gate {
            rules: with_rules(Some(Compiled::new(Rules::parse(rules).unwrap()))),
            admins: vec![0, 500],
            read_only: false,
        }
    }

    fn who(writer: &str, uid: u32) -> Caller {
        Caller {
            writer: writer.into(),
            uid,
            ..Default::default()
        }
    }

    const RULES: &str = r#"{"writers": {"agent": {"uid": 1000}, "get_order": {"env": "get_order"}},
        "paths": [
          {"path": "orders/**", "writers": ["get_order"]},
          {"path": "orders", "writers": ["*"]},
          {"path": "frozen/**", "mode": "write-once"},
          {"path": "log.md", "mode": "append-only"},
          {"path": "state.json", "format": "json", "fields": {"total": {"writers": ["get_order"]}, "note": {"writers": ["*"]}}},
          {"path": "vault/**", "deny_secrets": true, "max_bytes": 100},
          {"path": "**", "writers": ["*"]}
        ]}"#;

    fn mv(from: &str, to: &str, kind: Kind, content: Option<&str>) -> Move {
        Move {
            from: from.into(),
            to: to.into(),
            kind,
            content: content.map(|c| c.as_bytes().to_vec()),
        }
    }

    #[test]
    fn a_directory_rename_is_a_remove_and_a_create_of_every_path_inside() {
        let g = gate(RULES);
        let agent = who("agent", 1000);
        let moves = [
            mv("orders", "x", Kind::Dir, None),
            mv("orders/o1", "x/o1", Kind::File, None),
        ];
        let e = g
            .check(
                &agent,
                &Change::Rename {
                    moves: &moves,
                    replaces: false,
                    replaced: None,
                },
            )
            .unwrap_err();
        assert_eq!(e.errno, libc::EACCES);
        assert!(e.reason.contains("orders/o1"), "{}", e.reason);
        // Moving a write-once file's directory away and back is refused too.
        let moves = [
            mv("frozen", "fz", Kind::Dir, None),
            mv("frozen/f", "fz/f", Kind::File, None),
        ];
        let r = g.check(
            &agent,
            &Change::Rename {
                moves: &moves,
                replaces: false,
                replaced: None,
            },
        );
        assert_eq!(r.unwrap_err().errno, libc::EACCES);
        // A directory of free paths moves.
        let moves = [
            mv("notes", "n2", Kind::Dir, None),
            mv("notes/a", "n2/a", Kind::File, None),
        ];
        assert!(
            g.check(
                &agent,
                &Change::Rename {
                    moves: &moves,
                    replaces: false,
                    replaced: None
                }
            )
            .is_ok()
        );
    }

    #[test]
    fn unlinking_a_field_ruled_file_needs_every_key() {
        let g = gate(RULES);
        let content = br#"{"total": 1, "note": "x"}"#;
        let change = Change::Remove {
            path: "state.json",
            kind: Kind::File,
            content: Some(content),
        };
        let e = g.check(&who("agent", 1000), &change).unwrap_err();
        assert_eq!(e.errno, libc::EACCES);
        assert!(e.reason.contains("key \"total\""), "{}", e.reason);
        assert!(g.check(&who("get_order", 1000), &change).is_ok());
    }

    #[test]
    fn restores_are_commits_of_old_content_by_the_caller() {
        let g = gate(RULES);
        let change = Change::Restore {
            path: "state.json",
            current: br#"{"total": 2}"#,
            restored: br#"{"total": 1}"#,
        };
        assert_eq!(
            g.check(&who("agent", 1000), &change).unwrap_err().errno,
            libc::EINVAL
        );
        assert!(g.check(&who("get_order", 1000), &change).is_ok());
        let change = Change::Restore {
            path: "log.md",
            current: b"a\nb\n",
            restored: b"a\n",
        };
        assert_eq!(
            g.check(&who("agent", 1000), &change).unwrap_err().errno,
            libc::EPERM
        );
        let change = Change::Restore {
            path: "frozen/f",
            current: b"2",
            restored: b"1",
        };
        assert_eq!(
            g.check(&who("agent", 1000), &change).unwrap_err().errno,
            libc::EACCES
        );
    }

    #[test]
    fn checkpoints_and_rollbacks_follow_the_rules() {
        let rules = r#"{"writers": {"agent": {"uid": 1000}, "lead": {"uid": 1001}},
            "checkpoints": {"take": ["lead"], "rollback": ["lead"]},
            "paths": [{"path": "**", "writers": ["*"]}]}"#;
        let g = gate(rules);
        let take = Change::Checkpoint { name: "x", kept: 0 };
        let back = Change::Rollback { name: "x" };
        assert_eq!(
            g.check(&who("agent", 1000), &take).unwrap_err().errno,
            libc::EACCES
        );
        assert!(g.check(&who("lead", 1001), &take).is_ok());
        assert!(g.check(&who("anonymous", 0), &take).is_ok());
        assert_eq!(
            g.check(&who("agent", 1000), &back).unwrap_err().errno,
            libc::EPERM
        );
        assert!(g.check(&who("lead", 1001), &back).is_ok());
        // Root and the user who mounted roll back whatever the rules say.
        assert!(g.check(&who("anonymous", 500), &back).is_ok());
        // Without rules: anyone takes a checkpoint, only they roll back.
        let open = Gate {
            rules: Default::default(),
            admins: vec![0, 500],
            read_only: false,
        };
        assert!(open.check(&who("agent", 1000), &take).is_ok());
        assert!(open.check(&who("agent", 1000), &back).is_err());
        // A cap on checkpoints, and the safety names are a rollback's, for all but them.
        let full = Change::Checkpoint {
            name: "y",
            kept: MAX_CHECKPOINTS,
        };
        assert_eq!(
            open.check(&who("agent", 1000), &full).unwrap_err().errno,
            libc::EDQUOT
        );
        assert!(open.check(&who("anonymous", 500), &full).is_ok());
        let fake = Change::Checkpoint {
            name: "before-rollback-to-x-1",
            kept: 0,
        };
        assert_eq!(
            open.check(&who("agent", 1000), &fake).unwrap_err().errno,
            libc::EACCES
        );
        let from = Change::AdoptFrom { source: "/x.db" };
        assert_eq!(
            open.check(&who("agent", 1000), &from).unwrap_err().errno,
            libc::EPERM
        );
        assert!(open.check(&who("root", 0), &from).is_ok());
        // A mount of the past refuses everything with EROFS, root included.
        let past = Gate {
            read_only: true,
            ..open
        };
        assert_eq!(
            past.check(&who("root", 0), &take).unwrap_err().errno,
            libc::EROFS
        );
    }

    #[test]
    fn adopting_is_judged_as_writing_the_content() {
        let g = gate(RULES);
        let ok = Change::Adopt {
            path: "state.json",
            current: Some(br#"{"total": 1}"#),
            adopted: br#"{"total": 1, "note": "x"}"#,
        };
        assert!(g.check(&who("agent", 1000), &ok).is_ok());
        let field = Change::Adopt {
            path: "state.json",
            current: Some(br#"{"total": 1}"#),
            adopted: br#"{"total": 2}"#,
        };
        assert!(g.check(&who("agent", 1000), &field).is_err());
        assert!(g.check(&who("get_order", 1000), &field).is_ok());
        let new_order = Change::Adopt {
            path: "orders/o1",
            current: None,
            adopted: b"x",
        };
        assert_eq!(
            g.check(&who("agent", 1000), &new_order).unwrap_err().errno,
            libc::EACCES
        );
    }

    #[test]
    fn erasing_history_is_for_root_and_the_mounting_user() {
        for rules in [Some(RULES), None] {
            let g = Gate {
                rules: with_rules(rules.map(|r| Compiled::new(Rules::parse(r).unwrap()))),
                admins: vec![0, 500],
                read_only: false,
            };
            let gc = Change::Erase {
                what: "gc",
                path: "",
            };
            assert_eq!(
                g.check(&who("agent", 1000), &gc).unwrap_err().errno,
                libc::EPERM
            );
            assert!(g.check(&who("x", 0), &gc).is_ok());
            assert!(g.check(&who("x", 500), &gc).is_ok());
        }
    }

    #[test]
    fn writes_are_refused_once_the_commit_is_certain_to_be() {
        let g = gate(RULES);
        let agent = who("agent", 1000);
        let write =
            |data: &'static [u8], whole: Option<&'static [u8]>, path: &'static str| Change::Write {
                path,
                at: 0,
                data,
                size_after: data.len() as u64,
                committed_len: 0,
                append: false,
                window: data,
                window_at: 0,
                whole,
                current: Some(br#"{"total": 1}"#),
            };
        let secret = b"key AKIAIOSFODNN7EXAMPLE\n";
        let e = g
            .check(&agent, &write(secret, None, "vault/k"))
            .unwrap_err();
        assert_eq!(e.errno, libc::EINVAL);
        assert!(e.reason.contains("AWS"), "{}", e.reason);
        let big = &[b'x'; 101];
        assert!(
            g.check(&agent, &write(big, None, "vault/k"))
                .unwrap_err()
                .reason
                .contains("max_bytes")
        );
        // A complete object breaking `fields` is refused at write; an incomplete one not.
        let done = br#"{"total": 5}"#;
        assert!(
            g.check(&agent, &write(done, Some(done), "state.json"))
                .unwrap_err()
                .reason
                .contains("total")
        );
        let open = br#"{"total": 5"#;
        assert!(
            g.check(&agent, &write(open, Some(open), "state.json"))
                .is_ok()
        );
    }

    #[test]
    fn appends_are_checked_on_their_new_bytes() {
        let g = gate(RULES);
        let agent = who("agent", 1000);
        let ok = Change::Commit {
            path: "vault/k",
            first: false,
            growing: false,
            current: None,
            new: Content::Appended {
                old_len: 10,
                new_len: 20,
                window_at: 0,
                window: b"0123456789abcdefghij",
            },
        };
        assert!(g.check(&agent, &ok).is_ok());
        let secret = Change::Commit {
            path: "vault/k",
            first: false,
            growing: false,
            current: None,
            new: Content::Appended {
                old_len: 10,
                new_len: 40,
                window_at: 0,
                window: b"key AKIAIOSFO|DNN7EXAMPLE".as_slice(),
            },
        };
        // (Not a secret: the bar breaks it.)
        assert!(g.check(&agent, &secret).is_ok());
        let secret = Change::Commit {
            path: "vault/k",
            first: false,
            growing: false,
            current: None,
            new: Content::Appended {
                old_len: 10,
                new_len: 40,
                window_at: 0,
                window: b"key AKIAIOSFODNN7EXAMPLE",
            },
        };
        assert_eq!(g.check(&agent, &secret).unwrap_err().errno, libc::EINVAL);
    }

    #[test]
    fn secrets_are_redacted_with_their_hash() {
        let text = b"token AKIAIOSFODNN7EXAMPLE end";
        let r = Gate::redact(text);
        let s = String::from_utf8_lossy(&r);
        assert!(!s.contains("AKIAIOSFODNN7EXAMPLE"), "{s}");
        assert!(
            s.starts_with("token [REDACTED an AWS access key id blake3:"),
            "{s}"
        );
        assert!(s.ends_with("] end"), "{s}");
        let h = blake3::hash(b"AKIAIOSFODNN7EXAMPLE").to_hex();
        assert!(s.contains(&h[..16]), "{s}");
        assert_eq!(&*Gate::redact(b"nothing here"), b"nothing here");
    }

    #[test]
    fn an_sqlite_wal_index_is_refused_with_or_without_rules() {
        for g in [Gate::new(), gate(RULES)] {
            let anyone = who("agent", 1000);
            let create = |wal_index| Change::Create {
                path: "app.db-shm",
                kind: Kind::File,
                wal_index,
            };
            let e = g.check(&anyone, &create(true)).unwrap_err();
            assert_eq!(e.errno, libc::EOPNOTSUPP);
            assert!(e.reason.contains("journal_mode=DELETE"), "{}", e.reason);
            assert!(g.check(&anyone, &create(false)).is_ok());
            let open = Change::Open {
                path: "app.db-shm",
                trunc: false,
                committed_len: 0,
                wal_index: true,
            };
            assert_eq!(g.check(&anyone, &open).unwrap_err().errno, libc::EOPNOTSUPP);
        }
    }
}
