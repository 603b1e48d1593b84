//! The `scratchfs` command line (SPEC §2): parse and dispatch, nothing else.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use scratchfs::cli;
use scratchfs::mount::{self, MountSpec};

#[derive(Parser)]
#[command(
    name = "scratchfs",
    version,
    about = "A versioned FUSE scratchpad for AI agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct DbArg {
    /// Database file (default: $SCRATCHFS_DB, else ./scratchpad.db).
    #[arg(long, env = "SCRATCHFS_DB", default_value = "scratchpad.db")]
    db: PathBuf,
}

/// Who may use a mount and under which rules: the options `mount` and `run` share.
#[derive(clap::Args, Clone)]
struct Access {
    /// Let other users (sandboxed tools) use the mount.
    #[arg(long)]
    allow_other: bool,
    /// Owner of the root and the default layout, UID[:GID] (default: the mounting user).
    /// An owner other than the mounting user implies --allow-other.
    #[arg(long, value_parser = parse_owner)]
    owner: Option<(u32, u32)>,
    /// Writer rules (JSON, SPEC §5; check with `scratchfs rules check`).
    #[arg(long)]
    rules: Option<PathBuf>,
    /// MANIFEST's budget in estimated tokens (bytes/4), 100 to 1000000 (default: the
    /// rules' `manifest_tokens`, else 2000); a larger tree is folded into summary rows.
    #[arg(long, value_parser = parse_manifest_tokens)]
    manifest_tokens: Option<usize>,
}

impl Access {
    /// The mount of `db` at `mountpoint` with these options (views unlisted, the default
    /// source name).
    fn spec(self, mountpoint: PathBuf, db: PathBuf) -> MountSpec {
        let me = unsafe { (libc::getuid(), libc::getgid()) };
        let owner = self.owner.unwrap_or(me);
        MountSpec {
            mountpoint,
            db,
            owner,
            owner_given: self.owner.is_some(),
            allow_other: self.allow_other || owner.0 != me.0,
            list_views: false,
            rules: self
                .rules
                .map(|r| mount::absolute(&r))
                .transpose()
                .unwrap_or(None),
            manifest_tokens: self.manifest_tokens,
            fsname: None,
            at: None,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Mount a scratchpad (creating the database if missing); foreground until unmounted.
    Mount {
        /// Directory to mount on.
        mountpoint: PathBuf,
        #[command(flatten)]
        db: DbArg,
        #[command(flatten)]
        access: Access,
        /// Return once the mount answers, leaving the daemon running.
        #[arg(long)]
        background: bool,
        /// List the `<file>.outline` views in directory listings (they always resolve
        /// by name).
        #[arg(long)]
        list_views: bool,
        /// The mount's source name, shown by `mount`, `df` and /proc/mounts (default: the
        /// database's absolute path), so that two scratchpads can be told apart. No commas.
        #[arg(long, value_parser = parse_fsname)]
        fsname: Option<String>,
        /// Mount the tree as it was at a checkpoint (its NAME) or a TIME (same forms as
        /// export --at), read-only, beside a live mount of the same database.
        #[arg(long, value_name = "NAME|TIME")]
        at: Option<String>,
    },
    /// Unmount a scratchfs mount (plain `umount` works too); a directory where no
    /// scratchfs is mounted is an error (exit status 1).
    Unmount {
        /// The mountpoint.
        mountpoint: PathBuf,
    },
    /// Provenance: every version and event, oldest first.
    Log {
        /// Only this path (as it was written, or renamed to).
        path: Option<OsString>,
        #[command(flatten)]
        db: DbArg,
        /// Only refused writes, with their reasons.
        #[arg(long)]
        rejected: bool,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Instead of the log, the run over time: versions by writer, bytes live, in
        /// history and archived, and the busiest files, per span (docs/cli.md).
        #[arg(long, conflicts_with_all = ["path", "rejected"])]
        activity: bool,
        /// With --activity: at most this many spans (1 to 500).
        #[arg(long, default_value_t = 60, requires = "activity",
              value_parser = clap::value_parser!(u16).range(1..=500))]
        spans: u16,
    },
    /// The versions of one file, through its renames.
    History {
        /// The file's path (current, or last before it was deleted).
        path: OsString,
        #[command(flatten)]
        db: DbArg,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// The content of a version (default: the current one) on stdout.
    Show {
        /// PATH or PATH@N.
        #[arg(required_unless_present = "refused")]
        spec: Option<OsString>,
        /// Instead of a version, the content a refusal kept (its `event` in `log --json`,
        /// `event N` in `log`): secrets redacted.
        #[arg(long, value_name = "EVENT", conflicts_with = "spec")]
        refused: Option<i64>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Unified diff between two versions (B default: the current one).
    Diff {
        /// PATH@A.
        a: OsString,
        /// PATH@B.
        b: Option<OsString>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Make version N of a file current again (a new version with op `restore`); also
    /// while mounted.
    Restore {
        /// PATH@N.
        spec: OsString,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Replace every well-known secret in version N of a file (and wherever that file's
    /// versions and refusals hold it) with a marker and its blake3, leaving no byte of it
    /// in the database; root or the user who mounted only; also while mounted.
    Redact {
        /// PATH@N.
        spec: OsString,
        /// Why (recorded with the event).
        #[arg(long, default_value = "a secret written before a rule caught it")]
        why: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Check the redo log; with --accept-loss, apply the intact records before damage in
    /// it, keep the damaged log as DB-redo.damaged-NS and record the loss (op redo-loss).
    /// Root or the database's owner; the database must not be mounted.
    Recover {
        /// Accept losing what follows the damage.
        #[arg(long)]
        accept_loss: bool,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Write the tree as it was at TIME (default: now) into DIR (new or empty).
    Export {
        /// Target directory.
        dir: PathBuf,
        /// RFC 3339 (2026-12-01T10:00:00.5+02:00, a space for T, no offset: UTC),
        /// YYYY-MM-DD (midnight UTC) or @SECONDS[.FRACTION] since the epoch.
        #[arg(long, value_name = "TIME", value_parser = cli::time::parse_ns)]
        at: Option<i64>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Take a checkpoint: a named point in history (O(1): a pointer, never a copy); also
    /// while mounted. Its tree is then at .checkpoints/NAME/ in the mount.
    Checkpoint {
        /// Its name: printable, no '/', unique.
        name: String,
        /// A note kept with it.
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// List the checkpoints, oldest first.
    Checkpoints {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Return the whole tree to a checkpoint, as new versions (op rollback), after taking
    /// a safety checkpoint of the state now (its name is printed); also while mounted.
    /// Root, the user who mounted, or a writer the rules' checkpoints.rollback names.
    Rollback {
        /// The checkpoint's name.
        name: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Make a new scratchpad whose tree is this one's at a point (default: now), keeping
    /// the history up to it (with --tree-only: one version per file), for a sub-agent or
    /// a retry; the fork records where it came from.
    Fork {
        #[command(flatten)]
        db: DbArg,
        /// The new database (must not exist).
        #[arg(long, value_name = "DB")]
        to: PathBuf,
        /// A checkpoint's NAME or a TIME (same forms as export --at).
        #[arg(long, value_name = "NAME|TIME")]
        at: Option<String>,
        /// Copy only the tree (cost: the live data), not the history.
        #[arg(long)]
        tree_only: bool,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// List what differs between two scratchpads: files added, removed and changed, with
    /// versions and writers.
    Compare {
        #[command(flatten)]
        db: DbArg,
        /// The other scratchpad's database (B).
        #[arg(long, value_name = "DB")]
        with: PathBuf,
        /// One JSON object per difference.
        #[arg(long)]
        json: bool,
    },
    /// Bring files from another scratchpad (a fork) into this one as new versions (op
    /// adopt) whose provenance names the scratchpad and version they came from, through
    /// this one's writer rules; also while mounted.
    Adopt {
        #[command(flatten)]
        db: DbArg,
        /// The other scratchpad's database.
        #[arg(long, value_name = "DB")]
        from: PathBuf,
        /// The files (paths from the root).
        #[arg(required = true)]
        paths: Vec<OsString>,
        /// One JSON object per file.
        #[arg(long)]
        json: bool,
    },
    /// Copy chosen files (or PATH:KEY, one key of a JSON file) of this scratchpad into a
    /// long-lived one as new versions (op promote) that name where they came from, judged
    /// by that one's rules as you; recorded in both.
    Promote {
        #[command(flatten)]
        db: DbArg,
        /// The long-lived scratchpad's database (a file or a PostgreSQL URL).
        #[arg(long, value_name = "DB")]
        to: PathBuf,
        /// The files (paths from the root), or PATH:KEY.
        #[arg(required = true)]
        items: Vec<OsString>,
        /// One JSON object per item.
        #[arg(long)]
        json: bool,
    },
    /// Make this scratchpad read-only for good (after promote), first writing it with its
    /// whole history to a tar file with --export.
    Retire {
        #[command(flatten)]
        db: DbArg,
        /// Write the pad, with every version kept and the log, to this new tar file first.
        #[arg(long, value_name = "FILE.tar")]
        export: Option<PathBuf>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// What each file holds (live, history, archive), by writer, the pad against its
    /// quota, and what the retention policy would forget next.
    Du {
        /// A file or directory (default: the whole pad).
        path: Option<OsString>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Forget old versions (never current ones, nor what MANIFEST or a checkpoint points
    /// at).
    #[command(group(clap::ArgGroup::new("select").required(true).multiple(true).args(["keep_last", "before", "drop_checkpoint", "policy"])))]
    Gc {
        /// Release checkpoint NAME first (recorded), so what only it kept may go.
        #[arg(long, value_name = "NAME")]
        drop_checkpoint: Vec<String>,
        /// Keep the newest N versions of every file.
        #[arg(long)]
        keep_last: Option<u64>,
        /// Forget versions committed before TIME (same forms as export --at).
        #[arg(long, value_name = "TIME", value_parser = cli::time::parse_ns)]
        before: Option<i64>,
        /// Run the retention policy of the rules (`keep`, docs/rules.md) now, as the
        /// daemon's own pass does; with --dry-run, list what it would forget.
        #[arg(long, conflicts_with_all = ["keep_last", "before", "drop_checkpoint"])]
        policy: bool,
        /// Say what would go; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// The lineage of a file or of one JSON key: the version that set it (writer,
    /// executable, step, time), the versions that writer had read, and theirs.
    Why {
        /// PATH or PATH:KEY (dotted for nested keys: state.json:order.total_cents).
        target: OsString,
        /// KEY of PATH, without splitting PATH at a colon (for a file whose name holds
        /// one: `why 'a:b.json' --key k`).
        #[arg(long)]
        key: Option<String>,
        /// How many levels of inputs to follow.
        #[arg(long, default_value_t = scratchfs::lineage::why::DEFAULT_DEPTH)]
        depth: usize,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// For every number and identifier of a reply (FILE, or standard input), where the
    /// scratchpad holds it; exit 1 when a number has no source or only a model's.
    Ground {
        /// The reply; - or none: standard input.
        file: Option<PathBuf>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Re-hash every stored byte and check every invariant; exit 1 on any fault.
    Fsck {
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Writer rules.
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
    /// The scratchpads of one PostgreSQL database, a schema each, for its administrator
    /// (docs/deploy.md "Many scratchpads on one server").
    Pads {
        #[command(subcommand)]
        command: PadsCommand,
    },
    /// Serve the scratchpad to agents over the Model Context Protocol: stdio (what MCP
    /// clients launch), or streamable HTTP with --listen. Works while the database is
    /// mounted (the calls then run in the mount's daemon) and without FUSE.
    Mcp {
        #[command(flatten)]
        db: DbArg,
        /// Writer rules file (JSON, SPEC §5) when the database is not mounted (a mounted
        /// database keeps its mount's rules); default: the rules of its last mount.
        #[arg(long, value_name = "FILE")]
        rules: Option<PathBuf>,
        /// The writer of every call (with rules: one of theirs).
        #[arg(long, value_name = "NAME")]
        writer: Option<String>,
        /// Only the reading tools: list, read, outline, history, read_version, diff, why,
        /// ground, checkpoints, search, glob.
        #[arg(long)]
        read_only: bool,
        /// Put PREFIX before every tool's name (`--tool-prefix pad_`: pad_read, pad_write),
        /// for a client that merges several servers' tools into one list. Letters,
        /// digits, `_`, `-` and `.`, at most 64 bytes.
        #[arg(long, value_name = "PREFIX", value_parser = parse_tool_prefix)]
        tool_prefix: Option<String>,
        /// Serve streamable HTTP on ADDR (e.g. 127.0.0.1:8765) at /mcp instead of stdio.
        /// Every request needs `Authorization: Bearer TOKEN` (the token file is named on
        /// stderr at start, or --token-file).
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// With --listen: the bearer token is this file's first line (at least 16
        /// characters) instead of one made at start.
        #[arg(long, value_name = "FILE", requires = "listen")]
        token_file: Option<PathBuf>,
        /// With --listen: every call acts as UID[:GID] (file modes, provenance), never as
        /// the server's own user; required when the server runs as root.
        #[arg(long = "as", value_name = "UID[:GID]", value_parser = parse_owner, requires = "listen")]
        as_user: Option<(u32, u32)>,
        /// With --listen on an address that is not loopback: serve in clear text. Without
        /// it (or --tls-cert and --tls-key) such an address is refused.
        #[arg(long, requires = "listen", conflicts_with = "tls_cert")]
        allow_cleartext: bool,
        /// With --listen: serve HTTPS with this certificate (PEM; the server's
        /// certificate first, then any intermediates). Needs --tls-key.
        #[arg(long, value_name = "FILE", requires_all = ["listen", "tls_key"])]
        tls_cert: Option<PathBuf>,
        /// With --listen: the private key of --tls-cert's certificate (PEM, unencrypted:
        /// PKCS #8, PKCS #1 or SEC1). Needs --tls-cert.
        #[arg(long, value_name = "FILE", requires_all = ["listen", "tls_cert"])]
        tls_key: Option<PathBuf>,
    },
    /// Serve the review page (docs/web.md): a live timeline of who wrote what, with diffs,
    /// refusals, lineage, grounding and plots, on a loopback port; read-only unless
    /// --allow-actions. The link printed at start carries the token every request for
    /// data needs.
    Web {
        /// Database file or PostgreSQL URL (default: $SCRATCHFS_DB, else ./scratchpad.db).
        #[arg(
            long,
            env = "SCRATCHFS_DB",
            default_value = "scratchpad.db",
            conflicts_with = "mount"
        )]
        db: PathBuf,
        /// The database of the scratchfs mount at DIR (an SQLite one; for PostgreSQL give
        /// --db).
        #[arg(long, value_name = "DIR")]
        mount: Option<PathBuf>,
        /// Where to listen (port 0: one the kernel picks). An address that is not
        /// loopback needs --tls-cert and --tls-key.
        #[arg(long, value_name = "ADDR", default_value = scratchfs::cli::web::DEFAULT_LISTEN)]
        listen: std::net::SocketAddr,
        /// The bearer token is this file's first line (at least 16 characters) instead of
        /// one made at start.
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Serve HTTPS with this certificate (PEM; the server's certificate first, then
        /// any intermediates). Needs --tls-key.
        #[arg(long, value_name = "FILE", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The private key of --tls-cert's certificate (PEM, unencrypted). Needs
        /// --tls-cert.
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Let the page restore a version, take a checkpoint and roll back (each as this
        /// process, through the gate, recorded). Only root or the user who mounts the
        /// database may.
        #[arg(long)]
        allow_actions: bool,
    },
    /// Search the live files for a text (or a regex), as `grep -rn` on the mount would,
    /// through the same core as the mount and the MCP `search` tool (in the mount's daemon
    /// when the database is mounted). Exit 0 with matches, 1 with none.
    Grep {
        /// The text to find (a regular expression with --regex).
        pattern: String,
        /// Only files whose path from the root matches this glob (e.g. 'notes/**').
        path: Option<String>,
        /// PATTERN is a regular expression (Rust regex syntax).
        #[arg(long, short = 'E')]
        regex: bool,
        /// Letters match in either case.
        #[arg(long, short = 'i')]
        ignore_case: bool,
        /// Most matches printed (1 to 1000).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1000))]
        limit: u64,
        /// Search every version of the files: each matching line once, at the first
        /// version that held it (PATH@vN:LINE:TEXT  [WRITER TIME]).
        #[arg(long)]
        history: bool,
        /// One JSON object: matches (path, line, text; with --history version, writer,
        /// time_ns), truncated, files_searched.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Mount on a fresh temporary directory, run CMD there with SCRATCHFS_MOUNT set,
    /// unmount, and exit with CMD's status.
    Run {
        #[command(flatten)]
        db: DbArg,
        #[command(flatten)]
        access: Access,
        /// The command and its arguments.
        #[arg(required = true, last = true)]
        cmd: Vec<String>,
    },
}

#[derive(Subcommand)]
enum PadsCommand {
    /// List the database's scratchpads: live files, versions, size on disk, daemons
    /// mounted now, archived or not.
    List {
        /// One JSON array.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Make a scratchpad (a schema with the store's tables); print the URL to mount it.
    Create {
        /// Its name: lowercase letters, digits and _, not starting with a digit.
        name: String,
        /// Grant ROLE what a host needs to mount it (rows only; repeatable).
        #[arg(long, value_name = "ROLE")]
        role: Vec<String>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Make a scratchpad read-only for good: recorded, every role's right to change it
    /// revoked, no mount opens it for writing (unmount its daemons first).
    Archive {
        /// The scratchpad's name (pads list).
        name: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
}

#[derive(Subcommand)]
enum RulesCommand {
    /// Check a rules file; each problem names its line, column and key.
    Check {
        /// The rules file (JSON, SPEC §5).
        file: PathBuf,
        /// One JSON object per problem, then a summary object.
        #[arg(long)]
        json: bool,
    },
}

/// `--tool-prefix`: what MCP allows in a tool's name (2025-11-25, "Tool names": letters,
/// digits, `_`, `-`, `.`), short enough to leave room for the name.
fn parse_tool_prefix(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 64 {
        return Err("a tool prefix is 1 to 64 bytes".into());
    }
    match s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        Some(c) => Err(format!(
            "{c:?} is not allowed in a tool name (letters, digits, _, - and . are)"
        )),
        None => Ok(s.to_string()),
    }
}

fn parse_owner(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = match s.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (s, None),
    };
    let uid: u32 = u.parse().map_err(|_| format!("bad uid {u:?}"))?;
    let gid = match g {
        Some(g) => g.parse().map_err(|_| format!("bad gid {g:?}"))?,
        None => {
            // The user's primary group, if known.
            let pw = unsafe { libc::getpwuid(uid) };
            if pw.is_null() {
                uid
            } else {
                unsafe { (*pw).pw_gid }
            }
        }
    };
    Ok((uid, gid))
}

/// `--fsname`: printable, 1 to 1,024 bytes, no comma (the mount options' separator).
fn parse_fsname(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 1024 || s.contains(',') || s.chars().any(char::is_control) {
        return Err(
            "a non-empty name of at most 1024 bytes without commas or control characters".into(),
        );
    }
    Ok(s.to_string())
}

fn parse_manifest_tokens(s: &str) -> Result<usize, String> {
    use scratchfs::views::manifest::{MAX_BUDGET_TOKENS, MIN_BUDGET_TOKENS};
    s.parse::<usize>()
        .ok()
        .filter(|n| (MIN_BUDGET_TOKENS..=MAX_BUDGET_TOKENS).contains(n))
        .ok_or_else(|| format!("an integer from {MIN_BUDGET_TOKENS} to {MAX_BUDGET_TOKENS}"))
}

/// Keeps the C heap (glibc's malloc, which Rust's allocator uses) from holding memory the
/// program has freed, before any thread starts (`mallopt(3)`):
/// - `M_MMAP_THRESHOLD` fixed at 128 KiB (glibc's initial value): a block that large is
///   its own mapping, returned to the kernel when freed. Left dynamic, glibc raises the
///   threshold to the largest mapped block freed so far (a 1 MiB buffer, say), and blocks
///   up to that size are then carved from the heap, where freed ones stay resident.
/// - `M_ARENA_MAX` 2: every thread (the FUSE workers, the refresh and notify threads)
///   would otherwise get an arena of its own (up to 8 per core), each keeping what its
///   thread freed.
///
/// With glibc's defaults the daemon's peak RSS in `tests/bounded.rs` varied from 45 to
/// 73 MiB between runs of the same steps on PostgreSQL; with these, 27 to 36 MiB. Either
/// setting is left as it is when its environment variable (`MALLOC_MMAP_THRESHOLD_`,
/// `MALLOC_ARENA_MAX`) sets it. No effect with another C library.
fn bound_the_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (var, param, value) in [
        ("MALLOC_MMAP_THRESHOLD_", libc::M_MMAP_THRESHOLD, 128 << 10),
        ("MALLOC_ARENA_MAX", libc::M_ARENA_MAX, 2),
    ] {
        if std::env::var_os(var).is_none() {
            // Returns 0 only for a value glibc refuses; these are within its ranges.
            unsafe { libc::mallopt(param, value) };
        }
    }
}

fn main() -> ExitCode {
    bound_the_heap();
    // Commands whose output goes to `head` end quietly when it stops reading (SIGPIPE's
    // default action), instead of panicking on EPIPE. Not the daemon: it writes only to
    // its log and to /dev/fuse.
    if !matches!(std::env::args().nth(1).as_deref(), Some("mount")) {
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn,fuser=error"))
        .init();
    // A panic (a bug) is reported like any failure, on stderr and the status pipe, and a
    // failed write of the report is ignored: the default hook's eprintln would panic
    // again on a full disk and the caller would see only an exit status.
    std::panic::set_hook(Box::new(|info| {
        say(&format!(
            "scratchfs: internal error (a bug, please report it): {info}"
        ));
    }));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Mount {
            mountpoint,
            db,
            access,
            background,
            list_views,
            fsname,
            at,
        } => {
            let spec = MountSpec {
                list_views,
                fsname,
                at,
                ..access.spec(mountpoint, db.db)
            };
            if background {
                background_mount(&spec)
            } else {
                mount::run_foreground(&spec)
            }
        }
        Command::Unmount { mountpoint } => mount::unmount_and_wait(&mountpoint),
        Command::Rules {
            command: RulesCommand::Check { file, json },
        } => scratchfs::rules::check_file(&file, json),
        Command::Pads { command } => match command {
            PadsCommand::List { json, db } => cli::pads::list(&db.db, json),
            PadsCommand::Create {
                name,
                role,
                json,
                db,
            } => cli::pads::create(&db.db, &name, &role, json),
            PadsCommand::Archive { name, json, db } => cli::pads::archive(&db.db, &name, json),
        },
        Command::Log {
            path,
            db,
            rejected,
            json,
            activity,
            spans,
        } => {
            if activity {
                cli::log::activity(&db.db, spans.into(), json)
            } else {
                cli::log::log(&db.db, path.as_deref(), rejected, json)
            }
        }
        Command::History { path, db, json } => cli::history(&db.db, &path, json),
        Command::Show {
            spec,
            refused,
            db,
            json,
        } => match (spec, refused) {
            (_, Some(event)) => cli::show_refused(&db.db, event, json),
            (Some(spec), None) => cli::show(&db.db, &spec, json),
            (None, None) => Err("show: give PATH[@N] or --refused EVENT".into()),
        },
        Command::Diff { a, b, db, json } => cli::diff::diff(&db.db, &a, b.as_deref(), json),
        Command::Fsck { db, json } => cli::fsck::fsck(&db.db, json),
        Command::Why {
            target,
            key,
            depth,
            db,
            json,
        } => cli::why::why(&db.db, &target, key.as_deref(), depth, json),
        Command::Ground { file, db, json } => cli::ground::ground(&db.db, file.as_deref(), json),
        Command::Restore { spec, db, json } => cli::restore::restore(&db.db, &spec, json),
        Command::Redact {
            spec,
            why,
            db,
            json,
        } => cli::redact::redact(&db.db, &spec, &why, json),
        Command::Recover {
            accept_loss,
            json,
            db,
        } => cli::recover::recover(&db.db, accept_loss, json),
        Command::Du { path, json, db } => cli::du::du(&db.db, path.as_deref(), json),
        Command::Promote {
            db,
            to,
            items,
            json,
        } => cli::promote::promote(&db.db, &to, &items, json),
        Command::Retire { db, export, json } => {
            cli::promote::retire(&db.db, export.as_deref(), json)
        }
        Command::Gc {
            policy: true,
            dry_run,
            json,
            db,
            ..
        } => cli::gc::policy(&db.db, dry_run, json),
        Command::Gc {
            drop_checkpoint,
            keep_last,
            before,
            dry_run,
            json,
            db,
            ..
        } => cli::gc::gc(&db.db, &drop_checkpoint, keep_last, before, dry_run, json),
        Command::Checkpoint {
            name,
            note,
            json,
            db,
        } => cli::checkpoint::checkpoint(&db.db, &name, note.as_deref(), json),
        Command::Checkpoints { json, db } => cli::checkpoint::checkpoints(&db.db, json),
        Command::Rollback { name, json, db } => cli::checkpoint::rollback(&db.db, &name, json),
        Command::Fork {
            db,
            to,
            at,
            tree_only,
            json,
        } => cli::fork::fork(&db.db, &to, at.as_deref(), tree_only, json),
        Command::Compare { db, with, json } => cli::fork::compare(&db.db, &with, json),
        Command::Adopt {
            db,
            from,
            paths,
            json,
        } => cli::fork::adopt(&db.db, &from, &paths, json),
        Command::Export { dir, at, db, json } => cli::export::export(&db.db, &dir, at, json),
        Command::Run { db, access, cmd } => return run(db.db, access, cmd),
        Command::Grep {
            pattern,
            path,
            regex,
            ignore_case,
            limit,
            history,
            json,
            db,
        } => {
            return match cli::mcp::grep(
                &db.db,
                serde_json::json!({
                    "pattern": pattern, "path": path, "regex": regex,
                    "ignore_case": ignore_case, "limit": limit, "history": history,
                }),
                json,
            ) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(msg) => {
                    say(&format!("scratchfs: {msg}"));
                    ExitCode::from(1)
                }
            };
        }
        Command::Web {
            db,
            mount,
            listen,
            token_file,
            tls_cert,
            tls_key,
            allow_actions,
        } => {
            let db = match mount {
                Some(dir) => cli::web::database_of_mount(&dir),
                None => Ok(db),
            };
            db.and_then(|db| {
                cli::web::serve(
                    &db,
                    cli::web::Web {
                        addr: listen,
                        token_file,
                        tls: tls_cert.zip(tls_key),
                        allow_actions,
                    },
                )
            })
        }
        Command::Mcp {
            db,
            rules,
            writer,
            read_only,
            tool_prefix,
            listen,
            token_file,
            as_user,
            allow_cleartext,
            tls_cert,
            tls_key,
        } => cli::mcp::serve(
            &db.db,
            rules.as_deref(),
            scratchfs::mcp::server::Config {
                writer,
                read_only,
                tool_prefix: tool_prefix.unwrap_or_default(),
            },
            listen.map(|addr| cli::mcp::Http {
                addr,
                token_file,
                as_user,
                allow_cleartext,
                tls: tls_cert.zip(tls_key),
            }),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            // One line, the hint after the failure (a runtime failure is one line).
            match cli::open_hint(&msg) {
                Some(hint) => say(&format!("scratchfs: {msg}; {hint}")),
                None => say(&format!("scratchfs: {msg}")),
            }
            ExitCode::from(1)
        }
    }
}

/// Environment variable naming the file descriptor on which a daemon started by `mount
/// --background` reports why it stopped before mounting (a pipe its parent reads).
const STATUS_FD_ENV: &str = "SCRATCHFS_STATUS_FD";

/// Writes `msg` and a newline to stderr and, in a daemon started by `--background`, to its
/// status pipe; a failed write is ignored (stderr may be a log file on a full disk), so
/// this never panics, unlike `eprintln!`.
fn say(msg: &str) {
    use std::io::Write;
    let line = format!("{msg}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(fd) = std::env::var(STATUS_FD_ENV)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
    {
        let _ = unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
    }
}

/// Re-runs this binary in the foreground as a detached daemon and waits until its mount
/// answers (or the daemon fails, whose message is then printed). The daemon's log goes
/// to `<db>.log`, or for a PostgreSQL database to [`mount::daemon_log_path`].
fn background_mount(spec: &MountSpec) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
    // Refuse a live mount (or clear a dead one) before starting: the mount that then
    // appears at the mountpoint can only be the daemon's.
    let mp = mount::check_mountpoint(&spec.mountpoint)?;
    // What this mount makes (the database, when new, and the log): removed again when the
    // daemon stops before mounting, so a refused mount leaves nothing behind.
    let mut made: Vec<PathBuf> = Vec::new();
    let (db, log_path) = match scratchfs::cli::postgres_url(&spec.db) {
        // A PostgreSQL URL is passed on as it is, never taken as a path; the log goes to
        // the user's runtime directory, named after the mountpoint (docs/deploy.md).
        Some(_) => (spec.db.clone(), mount::daemon_log_path(&mp)?),
        None => {
            let db = mount::absolute(&spec.db)?;
            // Nothing is created next to a database that may not be used (inside a
            // mount, say).
            mount::check_database(&db, &mp)?;
            // Nor next to a file that is not a scratchfs database.
            scratchfs::store::probe(&db).map_err(|e| e.reason)?;
            // Nor next to one the daemon could not open for writing (created empty if
            // missing, as the daemon's lock does): the message names the database, not
            // its log.
            if std::fs::symlink_metadata(&db).is_err() {
                made = mount::made_with(&db);
            }
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&db)
                .map_err(|e| scratchfs::store::cannot_open(&db, &e).reason)?;
            let log_path = PathBuf::from(format!("{}.log", db.display()));
            (db, log_path)
        }
    };
    // The rules' problems on this terminal, not only in the daemon's log; errors refuse
    // the mount before anything starts.
    if let Some(rules) = &spec.rules {
        scratchfs::rules::load(rules)?;
    }
    if std::fs::symlink_metadata(&log_path).is_err() {
        made.push(log_path.clone());
    }
    // Only while no daemon holds the database (the flock every mount takes): a mount of
    // the same new path started at the same moment may have made it and be using it.
    let forget = |made: &[PathBuf]| {
        use std::os::fd::AsRawFd;
        // (A PostgreSQL mount made only its log, named after its mountpoint.)
        let held = std::fs::File::open(&db)
            .ok()
            .filter(|f| unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 });
        if held.is_some() || scratchfs::cli::postgres_url(&db).is_some() {
            for p in made {
                let _ = std::fs::remove_file(p);
            }
        }
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log_path)
        .map_err(|e| match scratchfs::cli::postgres_url(&db) {
            Some(_) => format!("the daemon's log {}: {e}", log_path.display()),
            None => format!(
                "cannot open database {}: its log {}: {e}",
                db.display(),
                log_path.display()
            ),
        })?;
    let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
    // The daemon reports why it stopped on this pipe too: its stderr is the log file,
    // which a full disk may not let it write.
    let mut fds = [0i32; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    let (status_r, status_w) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("mount").arg(&mp);
    if scratchfs::cli::postgres_url(&db).is_some() {
        // In the environment, not the command line: a URL may hold a password, and any
        // user may read a process's arguments (ps), while its environment is its owner's.
        cmd.env("SCRATCHFS_DB", &db);
    } else {
        cmd.arg("--db").arg(&db);
    }
    if spec.owner_given {
        cmd.arg("--owner")
            .arg(format!("{}:{}", spec.owner.0, spec.owner.1));
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log);
    if spec.allow_other {
        cmd.arg("--allow-other");
    }
    if spec.list_views {
        cmd.arg("--list-views");
    }
    if let Some(r) = &spec.rules {
        cmd.arg("--rules").arg(r);
    }
    if let Some(f) = &spec.fsname {
        cmd.arg("--fsname").arg(f);
    }
    if let Some(t) = spec.manifest_tokens {
        cmd.arg("--manifest-tokens").arg(t.to_string());
    }
    if let Some(at) = &spec.at {
        cmd.arg("--at").arg(at);
    }
    let w = {
        use std::os::fd::AsRawFd;
        status_w.as_raw_fd()
    };
    cmd.env(STATUS_FD_ENV, w.to_string());
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            // Inherited across exec (the pipe was made close-on-exec).
            libc::fcntl(w, libc::F_SETFD, 0);
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| format!("spawn daemon: {e}"))?;
    drop(status_w);
    let mut status_r = status_r;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if mount::fuse_mounted_at(&mp) && std::fs::metadata(&mp).is_ok() {
            // What was mounted, where its parts are, and how to stop it (stderr: stdout
            // stays empty for scripts).
            let shown_db = match scratchfs::cli::postgres_url(&db) {
                Some(url) => scratchfs::store::postgres::display_name(url),
                None => db.display().to_string(),
            };
            // The command as this one was run: `scratchfs` when that is what PATH finds,
            // else this binary's path (`scripts/mount` runs target/release/scratchfs).
            let me = std::env::args()
                .next()
                .unwrap_or_else(|| "scratchfs".into());
            let me = if me.contains('/') {
                std::fs::canonicalize(&me)
                    .map(|p| p.display().to_string())
                    .unwrap_or(me)
            } else {
                me
            };
            say(&format!(
                "scratchfs: mounted {shown_db} at {} (daemon pid {}, log {})\n\
                 scratchfs: unmount with: {me} unmount {}",
                mp.display(),
                child.id(),
                log_path.display(),
                mp.display()
            ));
            return Ok(());
        }
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            // What the daemon said on its status pipe, else in its log.
            let mut said = String::new();
            let _ = std::io::Read::read_to_string(&mut status_r, &mut said);
            let all = std::fs::read(&log_path).unwrap_or_default();
            let logged = String::from_utf8_lossy(all.get(log_start as usize..).unwrap_or_default());
            let msg = if said.trim().is_empty() {
                logged.trim().to_string()
            } else {
                said.trim().to_string()
            };
            let msg = msg.trim_start_matches("scratchfs: ");
            if msg.is_empty() {
                // The message names the log.
                made.retain(|p| *p != log_path);
            }
            forget(&made);
            return Err(if msg.is_empty() {
                format!(
                    "daemon exited with {status} without a message (its log: {})",
                    log_path.display()
                )
            } else {
                msg.to_string()
            });
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            forget(&made);
            return Err(format!("mount {}: no answer within 60 s", mp.display()));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `scratchfs run`: mounts `db` on a fresh temporary directory with `access` (as `mount`
/// would), runs `cmd` there with `SCRATCHFS_MOUNT` set, unmounts and exits with its
/// status (1 when the mount or the unmount fails, 127 when `cmd` cannot be started).
fn run(db: PathBuf, access: Access, cmd: Vec<String>) -> ExitCode {
    let dir = match tempfile::Builder::new().prefix("scratchfs-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            say(&format!("scratchfs: temporary mountpoint: {e}"));
            return ExitCode::from(1);
        }
    };
    let spec = access.spec(dir.path().to_path_buf(), db);
    let bg = match mount::Background::start(&spec) {
        Ok(b) => b,
        Err(msg) => {
            say(&format!("scratchfs: {msg}"));
            return ExitCode::from(1);
        }
    };
    let status = std::process::Command::new(&cmd[0])
        .args(&cmd[1..])
        .current_dir(dir.path())
        .env("SCRATCHFS_MOUNT", dir.path())
        .status();
    let stopped = bg.stop();
    let code = match status {
        Ok(s) => s
            .code()
            .unwrap_or(128 + std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(0)),
        Err(e) => {
            say(&format!("scratchfs: {}: {e}", cmd[0]));
            127
        }
    };
    if let Err(msg) = stopped {
        say(&format!("scratchfs: {msg}"));
        return ExitCode::from(1);
    }
    ExitCode::from(code.clamp(0, 255) as u8)
}
