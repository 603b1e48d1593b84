//! The store: everything scratchfs persists, behind one narrow trait (SPEC §8) so that a
//! second backend (a shared PostgreSQL server) is a new file, not a rewrite.
//!
//! Content model (docs/schema.md): blobs of at most [`CHUNK`] bytes are deduplicated by
//! blake3; a *stream* is an append-only list of extents (slices of blobs); a version's
//! content is the first `len` bytes of one stream ([`ContentRef`]). An append extends the
//! stream of the version it appends to, so it stores only the bytes it adds; a truncation
//! to a shorter length is a new `len` on the same stream and stores nothing; any other
//! change writes a new stream whose unchanged chunks dedupe against existing blobs.

pub mod count;
pub mod digest;
pub mod error;
mod fork;
pub mod paths;
pub mod postgres;
mod redo;
pub mod sql;
mod sqlite;

use std::io;

pub use error::{ErrorKind, StoreError};
pub use fork::fork_full;
pub use redo::{Damage, RedoLog};
pub use sqlite::{
    APPLICATION_ID, ContentReader, Probe, READ_CHUNK, RedoLoss, Sqlite, build_new, cannot_open,
    companions, digest_of, for_each_data, gc as sqlite_gc, inputs_of, list_checkpoints,
    live_lineage, make_private, open_read_only, probe, read_all, stream_end,
};

use crate::identity::Caller;
use crate::store::error::Result;

/// Largest blob, in bytes.
pub const CHUNK: usize = 64 * 1024;

/// Where a version's bytes are: the first `len` bytes of stream `stream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct ContentRef {
    /// Stream id (`streams.id`).
    pub stream: i64,
    /// Content length in bytes.
    pub len: u64,
}

/// A committed version as the filesystem needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionInfo {
    /// `versions.id`, unique across the store.
    pub id: i64,
    /// 1-based version number within its file's lineage.
    pub number: i64,
    /// The content.
    pub content: ContentRef,
    /// Commit time, ns since the Unix epoch.
    pub time_ns: i64,
    /// Who committed it (the resolved writer name).
    pub writer: std::sync::Arc<str>,
}

/// Provenance of one version, as the extended attributes show it (SPEC §7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionMeta {
    /// Writer name.
    pub writer: String,
    /// blake3 of the content, hex.
    pub blake3: String,
    /// Agent step, when the writer's environment had one.
    pub step: Option<i64>,
    /// Commit time, ns.
    pub time_ns: i64,
}

/// Provenance of one top-level key of a JSON file: the version that last changed it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FieldInfo {
    /// The key.
    pub key: String,
    /// Version number that last changed its value.
    pub version: i64,
    /// Writer of that version.
    pub writer: String,
    /// Agent step of that version, if any.
    pub step: Option<i64>,
    /// Commit time of that version, ns.
    pub time_ns: i64,
}

/// A file's history as the history views list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lineage {
    /// `files.id`.
    pub file_id: i64,
    /// Current path, or the last one before it was deleted.
    pub path: String,
    /// When it was deleted (or ended by being renamed over another file), ns.
    pub deleted_ns: Option<i64>,
    /// It ended by being renamed over another file, whose history continues it.
    pub merged: bool,
}

/// The inode a lineage was last on, as [`Store::lineage_owner`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineageOwner {
    /// `nodes.ino`.
    pub ino: u64,
    /// Still linked (a live file); else unlinked, and these are its attributes when it was.
    pub linked: bool,
    /// Permission bits.
    pub mode: u32,
    /// Owner uid.
    pub uid: u32,
    /// Owner gid.
    pub gid: u32,
}

/// Content that a deletion or a shrinking commit dropped, as MANIFEST lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestorableInfo {
    /// Deleted (`.archive/<path>`), or shrunk (`.history/<path>/<version>`).
    pub deleted: bool,
    /// Path.
    pub path: String,
    /// Who deleted or shrank it.
    pub writer: String,
    /// When, ns.
    pub time_ns: i64,
    /// The version dropped (for a deletion: the last one).
    pub version: i64,
    /// Its row (`versions.id`).
    pub version_id: i64,
    /// Its size in bytes.
    pub size: u64,
    /// A file lives at the path again.
    pub live: bool,
}

/// What `gc` is asked to forget (SPEC §2).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct GcRequest {
    /// Keep the newest N versions of every file.
    pub keep_last: Option<u64>,
    /// Forget versions committed before this time, ns.
    pub before_ns: Option<i64>,
    /// Change nothing; report what would go.
    pub dry_run: bool,
    /// Run the rules' retention policy now instead (issue 36; `keep_last` and
    /// `before_ns` unused): the daemon's pass, reported as `meta.last_policy`.
    #[serde(default)]
    pub policy: bool,
}

/// What a refusal's record keeps of the content refused ([`Store::reject`]): in the
/// event's `stream` (the content), `size` and `blake3` columns, which only a reader of the
/// database sees; never in its reason, which the caller may read (MANIFEST, MCP), since a
/// digest of content that holds bytes the caller cannot read would let it guess them
/// (attack round of session 33: a root file of mode 0622 read byte by byte off the
/// digests of the agent's refused overwrites).
#[derive(Debug, Clone, Copy)]
pub enum Refused<'a> {
    /// No content (a refusal of a change that is not a commit).
    Nothing,
    /// The content, kept (secrets redacted by the caller).
    Content(&'a [u8]),
    /// Its size (bytes) and blake3 (hex) only: keeping it is what the quota forbids.
    Digest(u64, &'a str),
}

/// What `gc` did (or would do).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct GcReport {
    /// Versions deleted.
    pub versions: u64,
    /// Bytes of blob content deleted (pieces of 4 KiB and more).
    pub blob_bytes: u64,
    /// Bytes of content kept inline in extents deleted (pieces under 4 KiB: most of an
    /// appended log's), so that `blob_bytes + inline_bytes` is the content gc dropped.
    /// Absent (0) in reports of earlier versions.
    #[serde(default)]
    pub inline_bytes: u64,
    /// Nothing was changed.
    pub dry_run: bool,
}

/// What each version kept counts against the pad's quota besides its content, bytes: its
/// record (the version's row, its event, the namespace log's row and their indexes: 770
/// bytes a rename on SQLite, measured). Without it a rename, which stores no content,
/// grew a pad at its quota without bound (attack round of session 30: 10,000 renames,
/// 7.7 MB). A file system's quota charges an inode's blocks the same way.
pub const VERSION_RECORD_BYTES: u64 = 512;

/// What each change of the namespace (a create, a deletion, a rename, a change of mode,
/// owner or times, a rollback's: its row in the namespace log, `tree_log`, with its node
/// row and event) and each refusal (its event) count against the pad's quota, bytes;
/// besides [`VERSION_RECORD_BYTES`] for a change that is also a version (a file's rename);
/// each record counts the bytes of its texts too (paths, reason).
/// Measured on SQLite per operation by the agent: `chmod` 107 bytes, `mkdir` and `rmdir`
/// 131 each, a refused write 368 with its reason. Without it a pad at its quota grew
/// without bound by such records (attack rounds of sessions 30 and 31: 5,000 refused
/// creates, 660 KB).
pub const EVENT_RECORD_BYTES: u64 = 256;

/// What the pad holds (issue 36: MANIFEST's `pad` line, MCP `list`'s `usage`, the quota).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    /// Bytes of content (live, history and archive) as written: a version's own bytes,
    /// an append's new ones; content the store keeps once for several files
    /// (deduplicated blobs) counts in each. Counting it once would tell a caller whether
    /// content it cannot read matches content it writes (docs/security.md, "Retention
    /// and quotas"); file systems' quotas charge logical bytes too. Plus
    /// [`VERSION_RECORD_BYTES`] for each version kept and [`EVENT_RECORD_BYTES`] for each
    /// change of the namespace and each refusal.
    pub bytes: u64,
    /// Versions kept.
    pub versions: u64,
    /// Versions the policy forgot.
    pub forgotten: u64,
    /// Live files and directories (a file system's inodes).
    pub files: u64,
}

/// One lineage as `scratchfs du` counts it (issue 36).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DuRow {
    /// `files.id`.
    pub file_id: i64,
    /// Its path (a deleted file's last), as stored.
    pub path: String,
    /// Neither deleted nor renamed over another file.
    pub live: bool,
    /// Versions kept.
    pub versions: u64,
    /// Size of the newest version, bytes.
    pub newest: u64,
    /// Sizes of every version kept, added up, bytes.
    pub total: u64,
}

/// One lineage as the policy pass judges it (issue 36; [`History::policy_rows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyRow {
    /// `versions.id`.
    pub id: i64,
    /// Its lineage.
    pub file_id: i64,
    /// Its number in the lineage.
    pub version: i64,
    /// Its length, bytes.
    pub size: u64,
    /// When it was committed, ns since the epoch.
    pub time_ns: i64,
}

/// A lineage as the policy pass judges it ([`History::policy_files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyFile {
    /// `files.id`.
    pub file_id: i64,
    /// Its path (a deleted file's last), as stored.
    pub path: String,
    /// Neither deleted nor renamed over another file.
    pub live: bool,
    /// When a lineage that is not live ended (its deletion, else its last version), ns.
    pub ended_ns: Option<i64>,
}

/// A refusal that kept content, as the policy pass judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRefusal {
    /// `events.id`.
    pub event: i64,
    /// The path refused, as stored.
    pub path: String,
    /// Bytes of content kept.
    pub size: u64,
    /// When, ns.
    pub time_ns: i64,
}

/// What the policy pass keeps whatever the limits say, read at its start
/// ([`History::policy_protected`]).
#[derive(Debug, Clone, Default)]
pub struct Protected {
    /// The newest version id then: a version committed later names its inputs itself
    /// (checked again when forgetting).
    pub snapshot: i64,
    /// Versions a JSON key's provenance names (`fields`).
    pub fields: std::collections::HashSet<i64>,
    /// Versions a live version was read from, or brought back (`inputs`,
    /// `restored_from`).
    pub inputs: std::collections::HashSet<i64>,
    /// `version_seq` of each checkpoint not dropped, ascending: a lineage's newest version
    /// at or below one is what the checkpoint holds.
    pub checkpoints: Vec<i64>,
}

/// One batch the policy pass forgets in one transaction ([`Store::forget`]).
#[derive(Debug, Clone)]
pub struct ForgetBatch<'a> {
    /// The rule, as the event's reason names it (`paths[1] logs/** (versions 5)`).
    pub rule: &'a str,
    /// The run's event for this rule, once a batch made it.
    pub event: Option<i64>,
    /// (versions, refusals, bytes) this run forgot under this rule before this batch.
    pub totals: (u64, u64, u64),
    /// [`Protected::snapshot`] of the pass.
    pub snapshot: i64,
    /// Versions to forget, each with whether the rule names `inputs` (a version a live
    /// one was read from may go).
    pub versions: Vec<(i64, bool)>,
    /// Refusals whose content goes (`events.id`).
    pub refusals: Vec<i64>,
    /// Content open handles read, `(stream, len)`: kept.
    pub protected: &'a [(i64, u64)],
}

/// What one [`ForgetBatch`] forgot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Forgot {
    /// The run's event for the rule (`None`: nothing forgotten yet).
    pub event: Option<i64>,
    /// Versions forgotten.
    pub versions: u64,
    /// Refusals whose content was forgotten.
    pub refusals: u64,
    /// Bytes of content deleted.
    pub bytes: u64,
}

/// What `redact` did (SPEC §10).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct RedactReport {
    /// Versions whose content was redacted: of the file, and of other files that held a
    /// copy of one of its secrets.
    pub versions: u64,
    /// The lineages (`files.id`) whose versions' rows changed (redacted, or moved to a
    /// stream of their own): a mount brings their files' versions up to date.
    pub files: Vec<i64>,
    /// Refusals whose content was redacted (at its path, and elsewhere with a copy).
    pub refusals: u64,
    /// The kinds of secret found (the `deny_secrets` pattern names).
    pub kinds: Vec<String>,
}

/// Opens the database `db` (an SQLite file's path or a PostgreSQL URL) read-only, as it
/// is now, without asking a mount to write its batch first: what following an adopted
/// version to the scratchpad it came from reads ([`crate::report::follow_origins`]).
pub fn open_frozen(db: &str) -> Result<Box<dyn History>> {
    if postgres::is_url(db) {
        return Ok(Box::new(postgres::Postgres::open_frozen(db)?));
    }
    Ok(Box::new(Sqlite::open_frozen(std::path::Path::new(db))?))
}

/// One change to what a scratchpad holds, as [`History::each_change`] replays them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<'a> {
    /// A version of lineage `file` (`files.id`), `size` bytes, by `writer`.
    Version {
        /// When, ns since the epoch.
        time_ns: i64,
        /// `files.id`.
        file: i64,
        /// Content length, bytes.
        size: i64,
        /// Writer's name.
        writer: &'a str,
    },
    /// Lineage `file` was unlinked: its last version now lives in `.archive/`.
    Unlink {
        /// When, ns since the epoch.
        time_ns: i64,
        /// `files.id`.
        file: i64,
    },
    /// Lineage `file` ended by being renamed onto another path's lineage (its content
    /// lives on there, as that lineage's version).
    Merged {
        /// When, ns since the epoch.
        time_ns: i64,
        /// `files.id`.
        file: i64,
    },
}

/// A refused commit, as MANIFEST summarises it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusalInfo {
    /// The path it concerns, as stored (`events.path`; for `gc` and `redact` runs, the
    /// path or pattern they were given, possibly empty).
    pub path: String,
    /// One-line reason (path, writer, rule, what failed).
    pub reason: String,
    /// Writer refused.
    pub writer: String,
    /// When, ns.
    pub time_ns: i64,
}

/// Node kinds the filesystem supports (SPEC §3: no symlinks, hard links or devices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Kind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
}

/// POSIX attributes kept per node. Times are ns since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Attrs {
    /// Permission bits (no file type bits).
    pub mode: u32,
    /// Owner uid.
    pub uid: u32,
    /// Owner gid.
    pub gid: u32,
    /// Access time, ns.
    pub atime_ns: i64,
    /// Modification time, ns.
    pub mtime_ns: i64,
    /// Change time, ns.
    pub ctime_ns: i64,
}

/// One live node as loaded at mount.
#[derive(Debug, Clone)]
pub struct NodeRecord {
    /// Inode number (`nodes.ino`); the root is 1.
    pub ino: u64,
    /// Parent inode, 0 for the root.
    pub parent: u64,
    /// Name in the parent, raw bytes.
    pub name: Vec<u8>,
    /// File or directory.
    pub kind: Kind,
    /// Attributes.
    pub attrs: Attrs,
    /// The file's lineage (`files.id`); `None` for directories.
    pub file_id: Option<i64>,
    /// The file's current version; `None` for directories.
    pub head: Option<VersionInfo>,
    /// mtime was set explicitly after the last commit (SPEC §3 utimens).
    pub mtime_pinned: bool,
    /// The agent step of the current version's writer (`SCRATCHFS_STEP`), when it had one.
    pub step: Option<i64>,
    /// The lineage's last read through the mount, as `reads` keeps it.
    pub last_read: Option<LastRead>,
}

/// A read of a file, as MANIFEST shows it (issue 13): the version read, by which writer,
/// when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastRead {
    /// The version number read.
    pub version: i64,
    /// The reader's resolved writer name (SPEC §5).
    pub writer: std::sync::Arc<str>,
    /// When, ns since the Unix epoch.
    pub time_ns: i64,
}

/// A version a writing process had read before its commit (issue 13): one row of
/// `inputs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Input {
    /// The version read (`versions.id`).
    pub version_id: i64,
    /// When the process opened it, ns since the Unix epoch.
    pub read_ns: i64,
}

/// An input of a version with what it names, for `log --json`, `why` and the
/// `user.scratchfs.inputs` attribute.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InputInfo {
    /// The version (`versions.id`).
    pub version_id: i64,
    /// Its file's path when it was committed; `None` when gc forgot the version.
    pub path: Option<String>,
    /// Its number in its lineage; `None` when gc forgot it.
    pub version: Option<i64>,
    /// Its writer; `None` when gc forgot it.
    pub writer: Option<String>,
    /// `read` (opened for reading by the writing process) or `rename` (the version a
    /// rename's version was renamed from).
    pub via: String,
    /// When it was read (or renamed), ns since the Unix epoch.
    pub read_ns: i64,
}

/// Where a version brought from another scratchpad came from (`scratchfs adopt`, a
/// tree-only `fork`; issue 14): one row of `origins`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Origin {
    /// The other database's path (absolute).
    pub source: String,
    /// Its `meta.scratchpad_id`, when it has one.
    pub source_id: Option<String>,
    /// The version there (`versions.id`).
    pub source_version_id: i64,
    /// Its file's path there, as stored.
    pub path: String,
    /// Its number in its lineage there.
    pub version: i64,
    /// Its writer there.
    pub writer: String,
}

/// How the bytes of a new version are built.
#[derive(Debug, Clone, Copy)]
pub enum Build<'a> {
    /// The content of `base` up to `base_limit`, overlaid with the `dirty` ranges (sorted,
    /// disjoint, `[start, end)` file offsets) read from `source(file_offset, buf)`, zeros
    /// elsewhere, `size` bytes in all.
    Overlay {
        /// What the writer started from.
        base: ContentRef,
        /// Bytes of `base` still visible (≤ `base.len`; lower after a truncation).
        base_limit: u64,
        /// Final size in bytes.
        size: u64,
        /// Byte ranges written since open.
        dirty: &'a [(u64, u64)],
    },
    /// `len` bytes read from `source(offset_in_pending, buf)` appended to whatever the
    /// file's current version is at commit time (SPEC §4, O_APPEND).
    Append {
        /// Pending bytes.
        len: u64,
    },
    /// The current version cut (or zero-extended) to `size` bytes: `truncate(2)` outside
    /// any handle commits at once (SPEC §4).
    Truncate {
        /// New size in bytes.
        size: u64,
    },
}

/// A request to commit one version (SPEC §4): one SQLite transaction.
pub struct CommitRequest<'a> {
    /// Inode committed to; its lineage is read from the store in the same transaction
    /// (an inode replaced by a rename has none any more: `ESTALE`).
    pub ino: u64,
    /// Path at commit time, for the version row.
    pub path: &'a str,
    /// `write`, `append`, `truncate`, `rename`, `restore`, ...
    pub op: &'a str,
    /// Lost-update check: the commit is refused with `ESTALE` unless the lineage's head
    /// is this version id (SPEC §6). `None` skips the check.
    pub expect_head: Option<i64>,
    /// How the content is built.
    pub build: Build<'a>,
    /// Supplies the written bytes.
    pub source: &'a mut dyn FnMut(u64, &mut [u8]) -> io::Result<()>,
    /// Hasher state after the base's bytes, when the caller has it (makes appends O(added)).
    pub prefix_hasher: Option<(i64, digest::ContentHasher)>,
    /// Who commits.
    pub caller: &'a Caller,
    /// Commit time, ns: the version's time and the node's new ctime.
    pub time_ns: i64,
    /// Also set the node's mtime to `time_ns` (false when an explicit mtime must stay).
    pub set_mtime: bool,
    /// fsync: make the commit durable against power loss before returning.
    pub durable: bool,
    /// The versions the writing process had read before this commit (issue 13), at most
    /// [`crate::lineage::READS_PER_PROCESS`]; recorded as the version's `inputs`.
    pub inputs: &'a [Input],
    /// The version it copies from another scratchpad (`adopt`), recorded in `origins`.
    pub origin: Option<&'a Origin>,
    /// The version of this scratchpad whose bytes it brings back (`restore`; issue 35),
    /// recorded as `versions.restored_from`, which `why` and `ground` follow.
    pub restores: Option<i64>,
}

impl CommitRequest<'_> {
    /// The same request again, borrowing this one (its source, its hasher state cloned):
    /// for a store that makes a commit a second time after a first try failed and rolled
    /// back (PostgreSQL's guessed head, `store::postgres`).
    pub fn again(&mut self) -> CommitRequest<'_> {
        CommitRequest {
            ino: self.ino,
            path: self.path,
            op: self.op,
            expect_head: self.expect_head,
            build: self.build,
            source: &mut *self.source,
            prefix_hasher: self.prefix_hasher.clone(),
            caller: self.caller,
            time_ns: self.time_ns,
            set_mtime: self.set_mtime,
            durable: self.durable,
            inputs: self.inputs,
            origin: self.origin,
            restores: self.restores,
        }
    }
}

/// What a successful commit returns: the version and the hasher state after its bytes.
pub struct Committed {
    /// The lineage the version was added to.
    pub file_id: i64,
    /// The new version.
    pub version: VersionInfo,
    /// Digest state after all the version's bytes (cache it for the next append).
    pub hasher: digest::ContentHasher,
}

/// A rename as the store records it.
pub struct RenameRequest<'a> {
    /// The node that moves.
    pub ino: u64,
    /// Its kind.
    pub kind: Kind,
    /// Its lineage before the rename (files only); the content renamed is that lineage's
    /// current version, read in the same transaction.
    pub file_id: Option<i64>,
    /// New parent inode.
    pub new_parent: u64,
    /// New name.
    pub new_name: &'a [u8],
    /// Old and new path, for the record.
    pub old_path: &'a str,
    /// New path.
    pub new_path: &'a str,
    /// The node replaced at the target: `(ino, lineage)`; `None` if the target was free.
    pub replaced: Option<(u64, Option<i64>)>,
    /// Lineages of files below a renamed directory, with their new paths.
    pub moved_files: Vec<(i64, String)>,
    /// Who renames.
    pub caller: &'a Caller,
    /// Time, ns.
    pub time_ns: i64,
    /// Refuse a file replacing another with `ESTALE` when the process that wrote it had
    /// read an older version of the file it replaces than the current one, committed by
    /// another process since (issue 13: `sed -i`, `jq … > t && mv t f`); `false` when the
    /// target's rule says `on_conflict: overwrite`.
    pub lost_update_check: bool,
}

/// The persistent state of a scratchpad. Every method is atomic and durable against
/// `kill -9` of the daemon when it returns: its own SQLite transaction, or (creates and
/// small commits) a savepoint in the open batch plus a record in the redo log
/// (`redo.rs`, docs/SEMANTICS.md). Reads see every change made. Errors are
/// [`StoreError`]s of one [`ErrorKind`] (`Stale` for a lost update, `Full`, `Busy`,
/// `Unavailable`...), each with its errno ([`ErrorKind::errno`]).
pub trait Store: History {
    /// All live nodes, parents before children.
    fn load(&self) -> Result<Vec<NodeRecord>>;
    /// Whether the database answers now (one round trip on PostgreSQL, within its
    /// timeout; nothing on SQLite): asked before a reload takes the inode table's locks,
    /// so that a server that stopped answering costs the reload its error, not the
    /// filesystem's every lookup a wait. Errors: `EIO` when it does not answer.
    fn ping(&self) -> Result<()> {
        Ok(())
    }
    /// Creates a node. A file gets no version (its first commit is version 1, or the
    /// next number of the lineage it continues: the file deleted last at `path`, if any),
    /// and an event (op `create`) recording who created it.
    #[allow(clippy::too_many_arguments)]
    fn create(
        &self,
        parent: u64,
        name: &[u8],
        path: &str,
        kind: Kind,
        attrs: Attrs,
        caller: &Caller,
    ) -> Result<NodeRecord>;
    /// Commits a version. On a lost update the content is still stored, with a refusal
    /// event, and `ESTALE` is returned. `req.durable` (fsync) commits the batch and then
    /// this commit with the WAL synced to disk.
    fn commit(&self, req: CommitRequest<'_>) -> Result<Committed>;
    /// Stores new attributes for a node and records a `setattr` event. `mtime_pinned`:
    /// the mtime was set explicitly and outlives commits until the next write.
    fn set_attrs(
        &self,
        ino: u64,
        attrs: Attrs,
        mtime_pinned: bool,
        path: &str,
        caller: &Caller,
    ) -> Result<()>;
    /// Unlinks a node (file or empty directory): its row and every version stay. Like a
    /// create, it goes through the batch and the redo log (docs/SEMANTICS.md).
    fn unlink(
        &self,
        ino: u64,
        file_id: Option<i64>,
        path: &str,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<()>;
    /// Records a refusal by the writer rules (`events`, op `rejected`) with its errno,
    /// one-line reason and, for a refused commit, the refused content or its size and
    /// digest (SPEC §6; [`Refused`]).
    fn reject(
        &self,
        path: &str,
        errno: i32,
        reason: &str,
        caller: &Caller,
        content: Refused<'_>,
    ) -> Result<()>;
    /// Stores the text of the rules a mount starts with, as a new row of `rules` when it
    /// differs from the last one (each change is a version with provenance, SPEC §5).
    fn record_rules(&self, text: &str, caller: &Caller) -> Result<()>;
    /// Writes every change already answered (the batch of the redo log) to the database,
    /// so that other readers of the file and every query see it (views, the CLI).
    fn sync(&self) -> Result<()>;
    /// [`Store::sync`], then syncs the database to disk: `fsyncdir`, and `fsync` of a
    /// file with nothing to commit.
    fn sync_to_disk(&self) -> Result<()>;
    /// Redacts the secrets in version `number` of file `file_id` (recorded at `path`),
    /// wherever else the file's versions and refusals hold them, and every copy of them in
    /// the store, leaving no byte of them in the store's files; an event by `caller` says
    /// `why`. The gate has allowed it.
    fn redact(
        &self,
        file_id: i64,
        number: i64,
        path: &str,
        why: &str,
        caller: &Caller,
    ) -> Result<RedactReport>;
    /// Sets the `meta` row `key` to `value` (docs/schema.md).
    fn set_meta(&self, key: &str, value: &str) -> Result<()>;
    /// What a clean unmount does last: every acknowledged change written to the
    /// database, and on SQLite the redo log emptied and the WAL checkpointed into the
    /// database file (`PRAGMA wal_checkpoint(TRUNCATE)`), so that the database file alone
    /// is the whole scratchpad (a copy of it is a backup). The store still works after it.
    /// A reader holding the WAL (a command reading meanwhile) leaves it as it is, logged.
    fn finish(&self) -> Result<()> {
        self.sync()
    }
    /// The text index of the live files ([`sql::text_index`], issue 33's `search`): every
    /// indexed file as `(file_id, version_id)`, its tables created on first use. `None`:
    /// this database cannot have one (PostgreSQL without `pg_trgm`), or the store is
    /// read-only (a mount of the past): searches then read every file.
    fn text_index_rows(&self) -> Result<Option<Vec<(i64, i64)>>> {
        Ok(None)
    }
    /// Applies `entries` to the text index, in one transaction of its own.
    fn text_index_put(&self, entries: &[sql::text_index::TextEntry]) -> Result<()> {
        let _ = entries;
        Ok(())
    }
    /// The files the text index says may hold any of `literals`
    /// ([`sql::text_index::query`]): file ids, unordered.
    fn text_index_query(&self, literals: &[String], ignore_case: bool) -> Result<Vec<i64>> {
        let _ = (literals, ignore_case);
        Ok(Vec::new())
    }
    /// The text index of every version ([`sql::history_index`], `search` with `history`):
    /// the newest row of each file it holds, its tables created on first use. `None` as
    /// for [`Store::text_index_rows`].
    fn history_index_heads(&self) -> Result<Option<Vec<sql::history_index::HistoryRow>>> {
        Ok(None)
    }
    /// Every row of the history index for file `file_id`, oldest first.
    fn history_index_rows(&self, file_id: i64) -> Result<Vec<sql::history_index::HistoryRow>> {
        let _ = file_id;
        Ok(Vec::new())
    }
    /// Adds `entries` to the history index, in one transaction of its own.
    fn history_index_put(&self, entries: &[sql::history_index::HistoryEntry]) -> Result<()> {
        let _ = entries;
        Ok(())
    }
    /// The versions the history index says may hold any of `literals`
    /// ([`sql::history_index::query`]): `(file_id, version_id)`, unordered.
    fn history_index_query(
        &self,
        literals: &[String],
        ignore_case: bool,
    ) -> Result<Vec<(i64, i64)>> {
        let _ = (literals, ignore_case);
        Ok(Vec::new())
    }
    /// What guards every version ([`sql::history_index::guards`]).
    fn history_guards(&self) -> Result<Vec<(u32, u32, u32)>> {
        Ok(Vec::new())
    }
    /// Whether some version names no inode ([`sql::history_index::legacy_versions`]).
    fn legacy_versions(&self) -> Result<bool> {
        Ok(true)
    }
    /// What the other daemons of a shared database have open, as (stream, len), for a gc
    /// to keep (issue 15): on PostgreSQL every live daemon is asked and answers, within
    /// 30 s (`EBUSY` naming a daemon that did not; docs/deploy.md, "gc"). An SQLite file
    /// has one daemon: none.
    fn open_elsewhere(&self) -> Result<Vec<(i64, u64)>> {
        Ok(Vec::new())
    }
    /// Forgets old versions (see [`sqlite::gc`]), keeping the versions `shown` (ids,
    /// `versions.id`: those MANIFEST's `restorable:` list points at) and the `protected`
    /// `(stream, len)` bytes (content open handles still read); the run is an event (op
    /// `gc`) by `caller`. The gate has allowed it ([`crate::fs::gate`]).
    fn gc(
        &self,
        req: &GcRequest,
        shown: &[i64],
        protected: &[(i64, u64)],
        caller: &Caller,
    ) -> Result<GcReport>;
    /// Forgets one batch the policy pass chose (issue 36, [`sql::policy::forget_in`]) in
    /// a transaction of its own, by `caller` (the daemon), then gives the database back
    /// the pages it freed, a bounded number at a time (SQLite's incremental vacuum).
    fn forget(&self, batch: &ForgetBatch<'_>, caller: &Caller) -> Result<Forgot>;
    /// Records an event `op` at `path` with `reason`, by `caller` (a promotion, a
    /// retirement: issue 36).
    fn note_event(&self, op: &str, path: &str, reason: &str, caller: &Caller) -> Result<()>;
    /// Gives the space of what a policy pass forgot back (PostgreSQL: `VACUUM` of the
    /// tables it touched; SQLite: `PRAGMA incremental_vacuum`, a few pages at a time).
    fn reclaim(&self) -> Result<()> {
        Ok(())
    }
    /// Renames; a file renamed gets a version with op `rename` on the lineage it lands in
    /// (the replaced file's, the file's deleted last at the new path, or its own). Returns
    /// that lineage and that version (files only; no version for a file that has none
    /// yet).
    fn rename(&self, req: RenameRequest<'_>) -> Result<(Option<i64>, Option<VersionInfo>)>;
    /// Notes that `caller` opened version `version_id` (number `version`) of lineage
    /// `file_id` for reading at `time_ns` (MANIFEST's `read` column; issue 13): kept as
    /// the lineage's last read, acknowledged like a small commit.
    fn note_read(
        &self,
        file_id: i64,
        version_id: i64,
        version: i64,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<()>;
    /// What a change by `caller` would add against the pad's quota in a new `processes`
    /// row (its record, [`EVENT_RECORD_BYTES`], and its texts: writer, exe, arguments as
    /// kept, client), bytes; 0 when this store knows its row already.
    fn process_record_cost(&self, caller: &Caller) -> u64;
    /// The bytes ([`Store::process_record_cost`]) of the `processes` rows this store
    /// inserted since the last call: what the pad's usage has to add.
    fn take_process_bytes(&self) -> u64;
    /// Takes checkpoint `name` of the state now, by `caller` at `time_ns`, with `note`
    /// (issue 14): one row naming the last namespace-log row and the last version, and an
    /// event (op `checkpoint`). Every change acknowledged before is in it. `EEXIST` when a
    /// checkpoint has that name. The name was checked ([`crate::checkpoint::check_name`])
    /// and the gate has allowed it.
    fn checkpoint(
        &self,
        name: &str,
        note: Option<&str>,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<crate::checkpoint::Checkpoint>;
    /// Releases checkpoint `name` (gc may then forget what only it kept), recorded (op
    /// `drop-checkpoint`). `ENOENT` when there is none. The gate has allowed it.
    fn drop_checkpoint(
        &self,
        name: &str,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<crate::checkpoint::Checkpoint>;
    /// Makes the tree what it was at checkpoint `name`, in one transaction, after taking a
    /// safety checkpoint of the state now ([`crate::checkpoint::safety_name`]); by
    /// `caller` at `time_ns`. `ENOENT` when there is no such checkpoint. The gate has
    /// allowed it.
    fn rollback(
        &self,
        name: &str,
        caller: &Caller,
        time_ns: i64,
    ) -> Result<crate::checkpoint::RollbackReport>;
}

/// A version as the commands print it: a row of the `version_log` view (docs/schema.md),
/// with the stored path ([`crate::store::paths`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct VersionRow {
    /// Version number within its file.
    pub version: i64,
    /// Path at commit time, as stored ([`crate::store::paths`]; `--json` prints it with
    /// `cli::json_name`).
    pub path: String,
    /// `create`, `write`, `append`, `truncate`, `rename`.
    pub op: String,
    /// Bytes.
    pub size: u64,
    /// blake3, hex.
    pub blake3: String,
    /// Writer name.
    pub writer: String,
    /// Agent step.
    pub step: Option<i64>,
    /// Process id and executable.
    pub tgid: u32,
    /// Executable.
    pub exe: String,
    /// Commit time, ns since the epoch.
    pub time_ns: i64,
    /// Its stream (`versions.stream`; [`VersionRow::content`]).
    #[serde(skip)]
    pub stream: i64,
    /// `versions.id`.
    #[serde(skip)]
    pub id: i64,
}

impl VersionRow {
    /// Where its bytes are.
    pub fn content(&self) -> ContentRef {
        ContentRef {
            stream: self.stream,
            len: self.size,
        }
    }
}

/// One line of `scratchfs log`: a version or an event (`version_log` and `event_log`,
/// docs/schema.md).
#[derive(Debug, serde::Serialize)]
pub struct LogEntry {
    /// Time, ns since the epoch.
    pub time_ns: i64,
    /// `version` or `event`.
    pub kind: String,
    /// The version's or the event's op.
    pub op: String,
    /// Path, as stored ([`crate::store::paths`]).
    pub path: String,
    /// New path of a rename, as stored.
    pub new_path: Option<String>,
    /// Version number (versions).
    pub version: Option<i64>,
    /// Bytes (versions, refusals).
    pub size: Option<i64>,
    /// Writer.
    pub writer: String,
    /// Agent step.
    pub step: Option<i64>,
    /// Process id.
    pub tgid: u32,
    /// Executable.
    pub exe: String,
    /// errno of a refusal.
    pub errno: Option<i32>,
    /// One-line reason of a refusal.
    pub reason: Option<String>,
    /// `mcp` for a change made through the MCP server (issue 12), else none.
    pub transport: Option<String>,
    /// The MCP client's name.
    pub client: Option<String>,
    /// The MCP client's version.
    pub client_version: Option<String>,
    /// The process's uid, as the kernel gave it in the namespace the mount was made in.
    pub uid: u32,
    /// The inode number of the process's user namespace (`/proc/PID/ns/user`); `None`
    /// when unknown (and in rows from before issue 31).
    pub user_ns: Option<i64>,
    /// Whether the process ran in the daemon's own mount and user namespaces: `false` for
    /// one in a sandbox's namespaces (a uid 0 there is root outside it only if the
    /// namespace maps it so, docs/security.md); `None` when unknown.
    pub own_ns: Option<bool>,
    /// What the writer had read before the commit (versions only; issue 13):
    /// [`crate::lineage::inputs_json`]; filled by the caller.
    pub inputs: Option<serde_json::Value>,
    /// `versions.id` of a version.
    #[serde(skip)]
    pub id: Option<i64>,
    /// `events.id` of an event (a refusal's content: `scratchfs show --refused EVENT`).
    pub event: Option<i64>,
}

/// Which lines [`History::log`] gives.
#[derive(Debug, Clone, Default)]
pub struct LogFilter {
    /// Only what concerns this stored path (as it was or became); `None`: everything.
    pub path: Option<String>,
    /// The same path as a database written by an older scratchfs stored it (each byte
    /// that is not UTF-8 as U+FFFD; [`crate::store::paths::lossy`]).
    pub lossy: Option<String>,
    /// Only refusals.
    pub rejected: bool,
}

/// Which lines a page of the timeline ([`History::log_page`]) gives, besides
/// [`LogFilter`]'s path and refusals (`scratchfs web`, issue 35).
#[derive(Debug, Clone, Default)]
pub struct PageFilter {
    /// Path, refusals only.
    pub log: LogFilter,
    /// Only this writer's.
    pub writer: Option<String>,
    /// Only this op (`write`, `rollback`, `rejected`, `unlink`, `checkpoint`, ...).
    pub op: Option<String>,
    /// Only this agent step's.
    pub step: Option<i64>,
}

/// Where a page of the timeline ends: the next page holds versions with a smaller
/// `versions.id` and events with a smaller `events.id` ([`History::log_page`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogCursor {
    /// Versions below this id.
    pub version: i64,
    /// Events below this id.
    pub event: i64,
}

impl LogCursor {
    /// The newest page's cursor: everything.
    pub const NEWEST: LogCursor = LogCursor {
        version: i64::MAX,
        event: i64::MAX,
    };
}

/// What [`History::fsck`] found: how many blobs and versions it checked, and one line per
/// fault (none: the store is sound).
#[derive(Debug, Clone, Default)]
pub struct FsckReport {
    /// Blobs and versions checked.
    pub checked: u64,
    /// One line per fault.
    pub faults: Vec<String>,
}

/// The read side of the store (issue 15): everything the views, the MCP tools and the CLI
/// ask of a scratchpad's history. Implemented once (`sql::read`) for every backend that is
/// [`Reading`], so no SQL lives outside the store. Errors are [`StoreError`]s
/// ([`ErrorKind::NotFound`] for what is not there, [`ErrorKind::Failed`] for a failed
/// query, [`ErrorKind::Unavailable`] when the database cannot be reached).
pub trait History: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns the count (0 at or past EOF).
    fn read(&self, content: ContentRef, offset: u64, buf: &mut [u8]) -> Result<usize>;
    /// Provenance of version `id` (`versions.id`).
    fn version_meta(&self, id: i64) -> Result<VersionMeta>;
    /// Every lineage whose path is `prefix` or lies below it (`""`: all), by path.
    fn lineages(&self, prefix: &str) -> Result<Vec<Lineage>>;
    /// Every version of a lineage, oldest first.
    fn versions(&self, file_id: i64) -> Result<Vec<VersionInfo>>;
    /// Node `ino` with its current version, as [`Store::load`] gives each (`None`: not in
    /// the store's tree).
    fn node(&self, ino: u64) -> Result<Option<NodeRecord>>;
    /// The rows of nodes `inos` (in any order; an inode not in the store is left out),
    /// each as [`History::node`] gives it: live, or unlinked (`parent` 0, not the root).
    /// What a daemon re-reads of the nodes another daemon's changes moved
    /// ([`crate::fs::Fs::refresh_nodes`]).
    fn nodes(&self, inos: &[u64]) -> Result<Vec<NodeRecord>>;
    /// The inode that last carried lineage `file_id` (the live one first, else the one
    /// unlinked last; for a lineage that ended by being renamed over another file, that of
    /// the lineage it continues): its number, whether it is still linked, its stored mode,
    /// uid and gid. The views of the lineage's versions take their owner and read bits
    /// from it (docs/views.md). `None` when no inode carried it.
    fn lineage_owner(&self, file_id: i64) -> Result<Option<LineageOwner>>;
    /// Who guards the bytes of version `id` (`versions.id`, issue 31): the inode that
    /// carried it when it was committed (`versions.ino`), with its attributes now, or as
    /// they were when it was unlinked, whatever carries the lineage later. A version of a
    /// database from before `versions.ino` (NULL) is guarded by its lineage's carrier when
    /// only one inode ever carried it; `None` when none can be named (several carried it,
    /// or its inode's row is gone): then only root and the user who mounted may read it.
    fn version_guard(&self, id: i64) -> Result<Option<LineageOwner>>;
    /// The inputs of version `id` (`versions.id`), oldest read first.
    fn inputs(&self, id: i64) -> Result<Vec<InputInfo>>;
    /// The lineage of the file at `path` or of `key` of it, `depth` levels deep
    /// ([`crate::lineage::why::why`]; its errors).
    fn why(&self, path: &str, key: Option<&str>, depth: usize) -> Result<crate::lineage::why::Why>;
    /// Every value the scratchpad holds now, for grounding a reply
    /// ([`crate::lineage::sources::sources`]).
    fn ground_sources(&self) -> Result<crate::lineage::sources::Sources>;
    /// [`History::why`] of version `id` (`versions.id`), whether current or not
    /// ([`crate::lineage::why::why_at`]).
    fn why_at(&self, id: i64, key: Option<&str>, depth: usize) -> Result<crate::lineage::why::Why>;
    /// The lineage (`files.id`) version `id` (`versions.id`) belongs to.
    fn version_lineage(&self, id: i64) -> Result<i64>;
    /// The earlier versions of version `id`'s own lineage that it names as inputs and
    /// that another writer than its own wrote (another name, or the same name by another
    /// uid): (`versions.id`, writer, uid), newest first (one statement). A commit that
    /// keeps bytes of `id` names them too (docs/SEMANTICS.md "Lineage").
    fn lineage_inputs(&self, id: i64) -> Result<Vec<(i64, String, u32)>>;
    /// One version by `versions.id` ([`ErrorKind::NotFound`] when the store no longer
    /// has it: gc forgot it).
    fn version(&self, id: i64) -> Result<VersionInfo>;
    /// Who deleted a lineage (unlinked its file) and when, ns.
    fn deletion(&self, file_id: i64) -> Result<Option<(String, i64)>>;
    /// Per-key provenance of a JSON file's lineage (empty for other files).
    fn fields(&self, file_id: i64) -> Result<Vec<FieldInfo>>;
    /// The latest `limit` refusals, newest first, and how many there are in all.
    fn refusals(&self, limit: usize) -> Result<(Vec<RefusalInfo>, u64)>;
    /// The latest `limit` history-erasing runs (gc, redact; reason, runner, time), newest
    /// first, and how many there were in all.
    fn erasures(&self, limit: usize) -> Result<(Vec<RefusalInfo>, u64)>;
    /// Where version `id` (`versions.id`) came from, when another scratchpad's version
    /// was brought in (`adopt`, a tree-only `fork`).
    fn origin(&self, id: i64) -> Result<Option<Origin>>;
    /// The checkpoints not dropped, oldest first.
    fn checkpoints(&self) -> Result<Vec<crate::checkpoint::Checkpoint>>;
    /// The checkpoint named `name`, if one (not dropped) has that name.
    fn checkpoint_named(&self, name: &str) -> Result<Option<crate::checkpoint::Checkpoint>>;
    /// The point of checkpoint `id` (`checkpoints.id`), dropped or not.
    fn checkpoint_point(&self, id: i64) -> Result<Option<crate::checkpoint::Point>>;
    /// The point at time `time_ns` (ns since the epoch): the last namespace change and
    /// the last version made by then. `ENOENT` before the namespace history begins.
    fn point_at(&self, time_ns: i64) -> Result<crate::checkpoint::Point>;
    /// The tree at `point` ([`crate::checkpoint::Snapshot`]).
    fn snapshot(&self, point: crate::checkpoint::Point) -> Result<crate::checkpoint::Snapshot>;
    /// The latest `limit` deletions and shrinking commits whose dropped version is still
    /// stored (gc may have forgotten it), newest first; a deletion of an empty file is no
    /// such thing, nor is content a live file at that path holds now (a rollback or a
    /// restore brought it back; issue 35). Fewer than `limit`: there are no more.
    fn restorable(&self, limit: usize) -> Result<Vec<RestorableInfo>>;
    /// The text of the writer rules recorded last (SPEC §5), if any; `""` when the last
    /// mount had none.
    fn rules_text(&self) -> Result<Option<String>>;
    /// A `meta` value (`scratchpad_id`, `forked_from`, `mountpoint`, ...; docs/schema.md),
    /// `None` when the key is not set.
    fn meta(&self, key: &str) -> Result<Option<String>>;
    /// The lineage (`files.id`) now at `path` (stored form), else the one most recently
    /// at `path` (deleted): the live file by the exact bytes of its names, a deleted one
    /// by its stored path, and for a name that is not UTF-8 also as a database written by
    /// an older scratchfs stored it. `None`: no file ever had that path.
    fn lineage_at(&self, path: &str) -> Result<Option<i64>>;
    /// The live file at `path` (stored form) and its current version: (`files.id`,
    /// `versions.id`); `None` when no live file there has a version.
    fn live_head(&self, path: &str) -> Result<Option<(i64, i64)>>;
    /// Every version of a lineage as the commands print it, oldest first.
    fn version_rows(&self, file_id: i64) -> Result<Vec<VersionRow>>;
    /// At most `limit` versions of a lineage numbered below `before`, newest first (a
    /// page of a long history: `scratchfs web`).
    fn version_rows_page(&self, file_id: i64, before: i64, limit: usize)
    -> Result<Vec<VersionRow>>;
    /// Version `n` of a lineage (`None`: its newest), `None` when there is none; one row
    /// read, however long the history.
    fn version_row(&self, file_id: i64, n: Option<i64>) -> Result<Option<VersionRow>>;
    /// The log: every version and event `filter` lets through, oldest first.
    fn log(&self, filter: &LogFilter) -> Result<Vec<LogEntry>>;
    /// One page of the log, newest first: at most `limit` versions and events that
    /// `filter` lets through and that lie before `before`, and the cursor of the next page
    /// (`None`: this was the last). Versions and events are each taken in commit order
    /// (their ids, so that a page costs `limit` rows of an index however long the log),
    /// merged by time.
    fn log_page(
        &self,
        filter: &PageFilter,
        before: LogCursor,
        limit: usize,
    ) -> Result<(Vec<LogEntry>, Option<LogCursor>)>;
    /// The newest version's and event's ids (0 when there is none): what a live view
    /// polls to learn that something was committed (`scratchfs web`).
    fn log_head(&self) -> Result<LogCursor>;
    /// The time of the first version (ns), `None` when there is none.
    fn first_version_ns(&self) -> Result<Option<i64>>;
    /// The reason recorded with the newest event of op `op` (`redact`: what it redacted).
    fn last_reason(&self, op: &str) -> Result<Option<String>>;
    /// The files at time `at` (ns) as versions and events say, for a time before the
    /// namespace log begins (a database made before issue 14): each file's last version
    /// by then, unless it was deleted by then. (path as stored, content, time), by path.
    fn files_by_versions(&self, at: i64) -> Result<Vec<(String, ContentRef, i64)>>;
    /// The content a refusal kept (`events.stream`, `size`, `blake3`: SPEC §6, secrets
    /// already redacted) of event `event` (`events.id`), with the digest; `None` when that
    /// event is not a refusal or kept no content (a refused rename, chmod, xattr).
    fn refused_content(&self, event: i64) -> Result<Option<(ContentRef, String)>>;
    /// The first and last time (ns) of any version or event; `None` when there is none.
    fn time_span(&self) -> Result<Option<(i64, i64)>>;
    /// The `limit` lineages with the most versions: (`files.id`, path as stored, number
    /// of versions), most first.
    fn busiest_files(&self, limit: usize) -> Result<Vec<(i64, String, i64)>>;
    /// The `limit` writers with the most versions (name, versions), most first, and how
    /// many writers there are in all.
    fn busiest_writers(&self, limit: usize) -> Result<(Vec<(String, i64)>, i64)>;
    /// Calls `f` with every change to what the scratchpad holds: each version, each
    /// unlink, each lineage ended by a rename onto another (`files.merged_into`); each
    /// kind in commit order (its table's ids), merged by time (the namespace change
    /// before the versions of the same instant). What the review page's plots replay
    /// ([`crate::report::activity`]); read a page at a time, so memory does not grow
    /// with the log.
    fn each_change(&self, f: &mut dyn FnMut(Change<'_>) -> Result<()>) -> Result<()>;
    /// Up to `limit` versions after `after` (lineage id, version number), lineages by id
    /// and each oldest first (the policy pass, issue 36).
    fn policy_rows(&self, after: (i64, i64), limit: usize) -> Result<Vec<PolicyRow>>;
    /// The lineages with ids from `lo` to `hi` (the policy pass).
    fn policy_files(&self, lo: i64, hi: i64) -> Result<Vec<PolicyFile>>;
    /// What the policy pass keeps whatever its limits say. With `after` (the snapshot of
    /// a [`Protected`] read before), `inputs` holds only what the versions committed since
    /// name (the caller adds the earlier set: a live version either was live then or is
    /// one of these); the rest is read whole.
    fn policy_protected(&self, after: Option<i64>) -> Result<Protected>;
    /// Up to `limit` refusals that kept content, after event `after`, oldest first.
    fn policy_refusals(&self, after: i64, limit: usize) -> Result<Vec<PolicyRefusal>>;
    /// The lineages with a version whose id is above `after` and is not their first, by
    /// id (the policy pass between full ones: a lineage of one version has nothing it
    /// could forget).
    fn policy_changed(&self, after: i64) -> Result<Vec<i64>>;
    /// What the pad holds now (reads every extent row once).
    fn usage(&self) -> Result<Usage>;
    /// Every lineage whose path is `prefix` or under it (`""`: all), for `scratchfs du`.
    fn du_rows(&self, prefix: &str) -> Result<Vec<DuRow>>;
    /// (writer, versions, bytes as files) of the versions of lineages under `prefix`,
    /// most bytes first.
    fn du_writers(&self, prefix: &str) -> Result<Vec<(String, u64, u64)>>;
    /// Why version `n` of lineage `file_id` is gone, if a gc or a policy pass forgot it:
    /// (the run's event, when it ran in ns, the run as its event names it: `policy
    /// paths[0] logs/** (versions 3)`, `gc (keep_last 1) by uid 0`).
    fn forgotten_version(&self, file_id: i64, n: i64)
    -> Result<Option<(Option<i64>, i64, String)>>;
    /// Calls `f` with each stretch of data of `content` (offset, bytes), in order, holes
    /// skipped; a stretch is at most one blob (64 KiB).
    fn for_each_data(
        &self,
        content: ContentRef,
        f: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()>;
    /// Re-hashes every stored byte (blobs, versions) and checks the invariants of
    /// docs/schema.md; `progress` is called with the total, then once per item checked.
    fn fsck(&self, progress: &mut dyn FnMut(FsckProgress)) -> Result<FsckReport>;
}

/// What [`History::fsck`] tells its caller as it goes.
#[derive(Debug, Clone, Copy)]
pub enum FsckProgress {
    /// How many blobs and versions there are to check.
    Total(u64),
    /// One more checked.
    Checked,
}

/// A backend's reading connection: one that sees every change acknowledged so far.
pub trait Reading: Send + Sync {
    /// Runs `f` with a reading connection (errors: the backend's, e.g. `EIO`).
    fn reading<T>(&self, f: impl FnOnce(&dyn sql::Conn) -> Result<T>) -> Result<T>;
}

impl<R: Reading> History for R {
    fn read(&self, content: ContentRef, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.reading(|c| sql::read::read(c, content, offset, buf))
    }
    fn version_meta(&self, id: i64) -> Result<VersionMeta> {
        self.reading(|c| sql::read::version_meta(c, id))
    }
    fn lineages(&self, prefix: &str) -> Result<Vec<Lineage>> {
        self.reading(|c| sql::read::lineages(c, prefix))
    }
    fn versions(&self, file_id: i64) -> Result<Vec<VersionInfo>> {
        self.reading(|c| sql::read::versions(c, file_id))
    }
    fn node(&self, ino: u64) -> Result<Option<NodeRecord>> {
        self.reading(|c| sql::read::load_node(c, ino))
    }
    fn nodes(&self, inos: &[u64]) -> Result<Vec<NodeRecord>> {
        self.reading(|c| sql::read::load_nodes(c, inos))
    }
    fn lineage_owner(&self, file_id: i64) -> Result<Option<LineageOwner>> {
        self.reading(|c| sql::read::lineage_owner(c, file_id))
    }
    fn version_guard(&self, id: i64) -> Result<Option<LineageOwner>> {
        self.reading(|c| sql::read::version_guard(c, id))
    }
    fn inputs(&self, id: i64) -> Result<Vec<InputInfo>> {
        self.reading(|c| sql::read::inputs(c, id))
    }
    fn why(&self, path: &str, key: Option<&str>, depth: usize) -> Result<crate::lineage::why::Why> {
        self.reading(|c| sql::read::why(c, path, key, depth))
    }
    fn ground_sources(&self) -> Result<crate::lineage::sources::Sources> {
        self.reading(|c| sql::read::ground_sources(c))
    }
    fn why_at(&self, id: i64, key: Option<&str>, depth: usize) -> Result<crate::lineage::why::Why> {
        self.reading(|c| crate::lineage::why::why_at(c, id, key, depth))
    }
    fn version_lineage(&self, id: i64) -> Result<i64> {
        self.reading(|c| sql::read::version_lineage(c, id))
    }
    fn lineage_inputs(&self, id: i64) -> Result<Vec<(i64, String, u32)>> {
        self.reading(|c| sql::read::lineage_inputs(c, id))
    }
    fn version(&self, id: i64) -> Result<VersionInfo> {
        self.reading(|c| sql::read::version(c, id))
    }
    fn deletion(&self, file_id: i64) -> Result<Option<(String, i64)>> {
        self.reading(|c| sql::read::deletion(c, file_id))
    }
    fn fields(&self, file_id: i64) -> Result<Vec<FieldInfo>> {
        self.reading(|c| sql::read::fields(c, file_id))
    }
    fn refusals(&self, limit: usize) -> Result<(Vec<RefusalInfo>, u64)> {
        self.reading(|c| sql::read::refusals(c, limit))
    }
    fn erasures(&self, limit: usize) -> Result<(Vec<RefusalInfo>, u64)> {
        self.reading(|c| sql::read::erasures(c, limit))
    }
    fn origin(&self, id: i64) -> Result<Option<Origin>> {
        self.reading(|c| sql::read::origin(c, id))
    }
    fn checkpoints(&self) -> Result<Vec<crate::checkpoint::Checkpoint>> {
        self.reading(|c| sql::read::checkpoints(c))
    }
    fn checkpoint_named(&self, name: &str) -> Result<Option<crate::checkpoint::Checkpoint>> {
        self.reading(|c| sql::read::checkpoint_named(c, name))
    }
    fn checkpoint_point(&self, id: i64) -> Result<Option<crate::checkpoint::Point>> {
        self.reading(|c| sql::read::checkpoint_point(c, id))
    }
    fn point_at(&self, time_ns: i64) -> Result<crate::checkpoint::Point> {
        self.reading(|c| sql::read::point_at(c, time_ns))
    }
    fn snapshot(&self, point: crate::checkpoint::Point) -> Result<crate::checkpoint::Snapshot> {
        self.reading(|c| sql::read::snapshot(c, point))
    }
    fn restorable(&self, limit: usize) -> Result<Vec<RestorableInfo>> {
        self.reading(|c| sql::read::restorable(c, limit))
    }
    fn rules_text(&self) -> Result<Option<String>> {
        self.reading(sql::read::rules_text)
    }
    fn meta(&self, key: &str) -> Result<Option<String>> {
        self.reading(|c| sql::read::meta(c, key))
    }
    fn lineage_at(&self, path: &str) -> Result<Option<i64>> {
        self.reading(|c| sql::read::lineage_at(c, path))
    }
    fn live_head(&self, path: &str) -> Result<Option<(i64, i64)>> {
        self.reading(|c| sql::lineage::live_head(c, path))
    }
    fn version_rows(&self, file_id: i64) -> Result<Vec<VersionRow>> {
        self.reading(|c| sql::read::version_rows(c, file_id))
    }
    fn version_rows_page(
        &self,
        file_id: i64,
        before: i64,
        limit: usize,
    ) -> Result<Vec<VersionRow>> {
        self.reading(|c| sql::read::version_rows_page(c, file_id, before, limit))
    }
    fn version_row(&self, file_id: i64, n: Option<i64>) -> Result<Option<VersionRow>> {
        self.reading(|c| sql::read::version_row(c, file_id, n))
    }
    fn log(&self, filter: &LogFilter) -> Result<Vec<LogEntry>> {
        self.reading(|c| sql::read::log(c, filter))
    }
    fn log_page(
        &self,
        filter: &PageFilter,
        before: LogCursor,
        limit: usize,
    ) -> Result<(Vec<LogEntry>, Option<LogCursor>)> {
        self.reading(|c| sql::read::log_page(c, filter, before, limit))
    }
    fn log_head(&self) -> Result<LogCursor> {
        self.reading(sql::read::log_head)
    }
    fn first_version_ns(&self) -> Result<Option<i64>> {
        self.reading(sql::read::first_version_ns)
    }
    fn last_reason(&self, op: &str) -> Result<Option<String>> {
        self.reading(|c| sql::read::last_reason(c, op))
    }
    fn refused_content(&self, event: i64) -> Result<Option<(ContentRef, String)>> {
        self.reading(|c| sql::read::refused_content(c, event))
    }
    fn time_span(&self) -> Result<Option<(i64, i64)>> {
        self.reading(sql::read::time_span)
    }
    fn busiest_files(&self, limit: usize) -> Result<Vec<(i64, String, i64)>> {
        self.reading(|c| sql::read::busiest_files(c, limit))
    }
    fn busiest_writers(&self, limit: usize) -> Result<(Vec<(String, i64)>, i64)> {
        self.reading(|c| sql::read::busiest_writers(c, limit))
    }
    fn each_change(&self, f: &mut dyn FnMut(Change<'_>) -> Result<()>) -> Result<()> {
        self.reading(|c| sql::read::each_change(c, f))
    }
    fn policy_rows(&self, after: (i64, i64), limit: usize) -> Result<Vec<PolicyRow>> {
        self.reading(|c| sql::policy::rows_after(c, after, limit))
    }
    fn policy_files(&self, lo: i64, hi: i64) -> Result<Vec<PolicyFile>> {
        self.reading(|c| sql::policy::files(c, lo, hi))
    }
    fn policy_protected(&self, after: Option<i64>) -> Result<Protected> {
        self.reading(|c| sql::policy::protected(c, after))
    }
    fn policy_refusals(&self, after: i64, limit: usize) -> Result<Vec<PolicyRefusal>> {
        self.reading(|c| sql::policy::refusals_after(c, after, limit))
    }
    fn policy_changed(&self, after: i64) -> Result<Vec<i64>> {
        self.reading(|c| sql::policy::changed(c, after))
    }
    fn usage(&self) -> Result<Usage> {
        self.reading(sql::policy::usage)
    }
    fn du_rows(&self, prefix: &str) -> Result<Vec<DuRow>> {
        self.reading(|c| sql::policy::du_rows(c, prefix))
    }
    fn du_writers(&self, prefix: &str) -> Result<Vec<(String, u64, u64)>> {
        self.reading(|c| sql::policy::du_writers(c, prefix))
    }
    fn forgotten_version(
        &self,
        file_id: i64,
        n: i64,
    ) -> Result<Option<(Option<i64>, i64, String)>> {
        self.reading(|c| sql::policy::forgotten(c, file_id, n))
    }
    fn files_by_versions(&self, at: i64) -> Result<Vec<(String, ContentRef, i64)>> {
        self.reading(|c| sql::read::files_by_versions(c, at))
    }
    fn for_each_data(
        &self,
        content: ContentRef,
        f: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        self.reading(|c| sql::content::for_each_data(c, content, |off, bytes| f(off, bytes)))
    }
    fn fsck(&self, progress: &mut dyn FnMut(FsckProgress)) -> Result<FsckReport> {
        self.reading(|c| sql::fsck::check(c, progress))
    }
}

/// Current time in ns since the Unix epoch.
pub fn sqlite_now_ns() -> i64 {
    sqlite::now_ns()
}
