//! The rows a change writes inside its transaction: processes, versions, events, nodes,
//! per-key provenance; and the create, commit and unlink transactions themselves.

use crate::identity::Caller;
use crate::p;
use crate::store::digest::ContentHasher;
use crate::store::error::{ErrorKind, Result, StoreError};
use crate::store::sql::content::*;
use crate::store::sql::now_ns;
use crate::store::sql::{Conn, ConnExt, IdOf, Row};
use crate::store::{
    Attrs, Build, CHUNK, CommitRequest, Committed, ContentRef, Input, InputInfo, Kind, NodeRecord,
    RenameRequest, VersionInfo,
};

/// What applying an operation did.
pub(crate) enum Applied {
    /// A create: the new node.
    Node(NodeRecord),
    /// An unlink or rmdir.
    Unlinked,
    /// A commit that made a version.
    Committed(Committed),
    /// A commit of the same bytes as the current version: nothing to store or log.
    Unchanged(Committed),
    /// A lost update: the refusal is recorded (and logged); the caller gets the error.
    Stale(StoreError),
    /// A read noted.
    Noted,
}

/// The `processes` row of these caller facts, inserted when new.
pub(crate) fn process_id(conn: &dyn Conn, c: &Caller) -> Result<i64> {
    process_row(conn, c).map(|(id, _)| id)
}

/// What a `processes` row of `c` counts against the pad's quota, bytes: a record
/// ([`crate::store::EVENT_RECORD_BYTES`]) and its texts as stored (writer, exe, argv as
/// JSON, the `SCRATCHFS_WRITER` it gave, the transport and the MCP client's name and
/// version), as [`super::policy::usage`] counts them.
pub(crate) fn process_record_bytes(c: &Caller) -> u64 {
    record_bytes_with(c, argv_json(c).len())
}

/// [`process_record_bytes`] of `c` whose arguments take `argv` bytes as stored.
fn record_bytes_with(c: &Caller, argv: usize) -> u64 {
    let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    (c.writer.len()
        + c.exe.len()
        + argv
        + opt(&c.env_writer)
        + opt(&c.transport)
        + opt(&c.client)
        + opt(&c.client_version)) as u64
        + crate::store::EVENT_RECORD_BYTES
}

/// The `processes` row of these caller facts, inserted when new: (its id, the bytes it
/// counts against the quota when it was inserted, [`process_record_bytes`]).
fn process_row(conn: &dyn Conn, c: &Caller) -> Result<(i64, Option<u64>)> {
    let argv = argv_json(c);
    // The user namespace by its inode number, and whether the process ran in the daemon's
    // own namespaces: unknown (NULL) when its namespace could not be read.
    let user_ns = (c.user_ns != 0).then_some(c.user_ns as i64);
    let own_ns = user_ns.map(|_| c.same_ns as i64);
    let facts = p![
        &c.writer,
        c.tgid,
        c.start_time as i64,
        c.uid,
        c.gid,
        &c.exe,
        &argv,
        &c.env_writer,
        c.step,
        &c.transport,
        &c.client,
        &c.client_version,
        user_ns,
        own_ns
    ];
    let found: Option<i64> = conn
        .opt_value("SELECT id FROM processes WHERE writer = ?1 AND tgid = ?2 AND start_time = ?3
             AND uid = ?4 AND gid = ?5 AND exe = ?6 AND argv = ?7 AND env_writer IS NOT DISTINCT FROM ?8
             AND step IS NOT DISTINCT FROM ?9 AND transport IS NOT DISTINCT FROM ?10
             AND client IS NOT DISTINCT FROM ?11 AND client_version IS NOT DISTINCT FROM ?12
             AND user_ns IS NOT DISTINCT FROM ?13 AND own_ns IS NOT DISTINCT FROM ?14", facts)?;
    Ok(match found {
        Some(id) => (id, None),
        None => (
            conn.insert(
                "INSERT INTO processes(writer, tgid, start_time, uid, gid, exe, argv,
                    env_writer, step, transport, client, client_version, user_ns, own_ns)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
                 RETURNING id",
                facts,
            )?,
            Some(record_bytes_with(c, argv.len())),
        ),
    })
}

pub(crate) fn version_from_row(r: &dyn Row) -> Result<VersionInfo> {
    Ok(VersionInfo {
        id: r.get(0)?,
        number: r.get(1)?,
        content: ContentRef {
            stream: r.get(2)?,
            len: r.get::<i64>(3)? as u64,
        },
        time_ns: r.get(4)?,
        writer: r.get::<String>(5)?.into(),
    })
}

/// The highest version of lineage `file_id`, whoever's it is: a lineage continued by a
/// re-created file also holds the versions of the file deleted at that path before.
pub(crate) fn head_of(tx: &dyn Conn, file_id: i64) -> Result<Option<VersionInfo>> {
    tx.opt(
        "SELECT id, version, stream, size, time_ns, writer FROM versions WHERE file_id = ?1
             ORDER BY version DESC LIMIT 1",
        p![file_id],
        version_from_row,
    )
}

/// The current version of the file on lineage `file_id`: the lineage's head, unless
/// that is older than the file (a re-created file that has not committed yet: `None`,
/// its content is empty). The file's birth is its `create` event's `version_id`: the
/// deleted file's last version when a create continued the lineage. Returns (the file's
/// head, the lineage's head).
pub(crate) fn live_head(
    tx: &dyn Conn,
    file_id: i64,
) -> Result<(Option<VersionInfo>, Option<VersionInfo>)> {
    // One statement for both (a commit's round trips to a server count): the lineage's
    // head, if any, and the birth of the file now on it.
    let (head, born) = tx.one(
        "SELECT v.id, v.version, v.stream, v.size, v.time_ns, v.writer,
                (SELECT MAX(version_id) FROM events WHERE file_id = ?1 AND op = 'create')
         FROM (SELECT 1 AS one) o
         LEFT JOIN versions v ON v.id = (SELECT id FROM versions WHERE file_id = ?1
                                         ORDER BY version DESC LIMIT 1)",
        p![file_id],
        |r| {
            let head = match r.get::<Option<i64>>(0)? {
                Some(_) => Some(version_from_row(r)?),
                None => None,
            };
            Ok((head, r.get::<Option<i64>>(6)?))
        },
    )?;
    let live = match (&head, born) {
        (Some(h), Some(born)) if h.id <= born => None,
        _ => head.clone(),
    };
    Ok((live, head))
}

/// [`node_head`]'s query (`?1` the inode): the lineage, its head's id, number, stream,
/// size, time and writer, the file's birth, the end of the head's stream, `mtime_pinned`.
/// A macro, so that [`HEAD_IS`] is the same text.
macro_rules! node_head_sql {
    () => {
        r#"SELECT n.file_id, v.id, v.version, v.stream, v.size, v.time_ns, v.writer,
                (SELECT MAX(e.version_id) FROM events e
                 WHERE e.file_id = n.file_id AND e.op = 'create'),
                (SELECT x."offset" + x.len FROM extents x WHERE x.stream = v.stream
                 ORDER BY x."offset" DESC LIMIT 1),
                n.mtime_pinned
         FROM nodes n
         LEFT JOIN versions v ON v.id = (SELECT w.id FROM versions w WHERE w.file_id = n.file_id
                                         ORDER BY w.version DESC LIMIT 1)
         WHERE n.ino = ?1"#
    };
}

/// [`live_head`] of the file on inode `ino`, found and read in one statement (a commit's
/// round trips to a server count): `None` when the inode carries no lineage (a rename
/// replaced it).
pub(crate) fn node_head(tx: &dyn Conn, ino: u64) -> Result<Option<NodeHead>> {
    let row = tx.opt(node_head_sql!(), p![ino as i64], |r| {
        let Some(file_id) = r.get::<Option<i64>>(0)? else {
            return Ok(None);
        };
        let head = match r.get::<Option<i64>>(1)? {
            Some(id) => Some(VersionInfo {
                id,
                number: r.get(2)?,
                content: ContentRef {
                    stream: r.get(3)?,
                    len: r.get::<i64>(4)? as u64,
                },
                time_ns: r.get(5)?,
                writer: r.get::<String>(6)?.into(),
            }),
            None => None,
        };
        let born = r.get::<Option<i64>>(7)?;
        let end = r.get::<Option<i64>>(8)?.unwrap_or(0) as u64;
        let pinned = r.get::<i64>(9)? != 0;
        Ok(Some((file_id, head, born, end, pinned)))
    })?;
    Ok(row
        .flatten()
        .map(|(file_id, head, born, stream_end, mtime_pinned)| {
            let live = match (&head, born) {
                (Some(h), Some(born)) if h.id <= born => None,
                _ => head.clone(),
            };
            NodeHead {
                file_id,
                live,
                lineage_head: head,
                stream_end,
                mtime_pinned,
                born,
            }
        }))
}

/// Fails the transaction (PostgreSQL: `division_by_zero`, SQLSTATE 22012) unless what
/// [`node_head`] reads of inode `?1` now is what the caller guessed: lineage `?2`,
/// `mtime_pinned` `?3`, the lineage's head `?4` (NULL: none) with its stream `?5` and
/// size `?6` (a redaction changes those in place), the file's birth `?7` (the `create`
/// event's version) and the end of the head's stream `?8` (0 without one). Every column
/// `node_head` reads is one of these or follows from the head's id (a version's number,
/// time and writer never change). [`commit_guessing`] sends it after the lineage's lock,
/// so it sees every commit before its own. PostgreSQL only, as [`NO_DELETED_LINEAGE`].
///
/// It is `node_head`'s own query behind `OFFSET 0`, which keeps the planner from
/// merging the comparisons into its join: so merged, the plan PostgreSQL made once for
/// the prepared statement on a new (small) database joined `versions` by a hash of all of
/// it, and kept doing so as it grew (a commit's time grew with the file's versions).
pub(crate) const HEAD_IS: &str = concat!(
    "SELECT 1 / COUNT(*) FROM (",
    node_head_sql!(),
    r#" OFFSET 0) AS h(file_id, id, version, stream, size, time_ns, writer, born, stream_end,
                      mtime_pinned)
     WHERE h.file_id = ?2 AND h.mtime_pinned = ?3 AND h.id IS NOT DISTINCT FROM ?4
       AND h.stream IS NOT DISTINCT FROM ?5 AND h.size IS NOT DISTINCT FROM ?6
       AND h.born IS NOT DISTINCT FROM ?7 AND COALESCE(h.stream_end, 0) = ?8"#
);

/// What a commit reads of the file on an inode before it writes ([`node_head`]); what a
/// daemon keeps of a file it committed last, to send its next commit in one round trip
/// ([`commit_guessing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeHead {
    /// The lineage on the inode (`files.id`).
    pub file_id: i64,
    /// The file's head: the lineage's head unless the file was re-created after it.
    pub live: Option<VersionInfo>,
    /// The lineage's head (its last version, whichever file made it).
    pub lineage_head: Option<VersionInfo>,
    /// Where the lineage head's stream ends, bytes
    /// ([`crate::store::sql::content::stream_end`] of it; 0 without a head).
    pub stream_end: u64,
    /// Whether the inode's mtime was set explicitly (`nodes.mtime_pinned`), so that a
    /// write has to unpin it.
    pub mtime_pinned: bool,
    /// The file's birth: the version id of the lineage's last `create` event (the
    /// deleted file's last version when a create continued the lineage), if any.
    pub born: Option<i64>,
}

impl NodeHead {
    /// The head of a file just made on lineage `file_id`, a new one (no version, no
    /// event): what [`node_head`] reads of it until its first commit.
    pub(crate) fn of_new_file(file_id: i64) -> NodeHead {
        NodeHead {
            file_id,
            live: None,
            lineage_head: None,
            stream_end: 0,
            mtime_pinned: false,
            born: None,
        }
    }
}

/// The deleted lineage a new file at `path` continues (SPEC §4, issue 11: a path's
/// history is continuous across a delete and a re-create): the one deleted last at that
/// path, unless it ended by being renamed over another file.
pub(crate) fn deleted_lineage_at(tx: &dyn Conn, path: &str) -> Result<Option<i64>> {
    tx.opt_value(
        "SELECT id FROM files WHERE path = ?1 AND deleted_ns IS NOT NULL
                 AND merged_into IS NULL
             ORDER BY deleted_ns DESC, id DESC LIMIT 1",
        p![path],
    )
}

/// JSON files up to this size keep per-key provenance.
pub(crate) const FIELDS_MAX: u64 = 1 << 20;

/// Parses a stored JSON object, if `content` is one.
pub(crate) fn json_object(
    tx: &dyn Conn,
    content: ContentRef,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>> {
    let mut buf = vec![0u8; content.len as usize];
    let n = read_at(tx, content, 0, &mut buf)?;
    buf.truncate(n);
    Ok(match serde_json::from_slice(&buf) {
        Ok(serde_json::Value::Object(m)) => Some(m),
        _ => None,
    })
}

/// Per-key provenance of a JSON file (SPEC §5 "each key keeps its own provenance"):
/// every top-level key whose value changed from `old` to `new` (compared as JSON values,
/// so reformatting or reordering is no change) is attributed to `version_id`; keys that
/// are gone lose their row.
pub(crate) fn update_fields(
    tx: &dyn Conn,
    file_id: i64,
    path: &str,
    old: Option<ContentRef>,
    new: ContentRef,
    version_id: i64,
) -> Result<()> {
    if !path.ends_with(".json") {
        return Ok(());
    }
    let new_obj = if new.len <= FIELDS_MAX {
        json_object(tx, new)?
    } else {
        None
    };
    let Some(new_obj) = new_obj else {
        tx.exec("DELETE FROM fields WHERE file_id = ?1", p![file_id])?;
        return Ok(());
    };
    if old.is_none() {
        // A first version: keys of a file deleted earlier on the lineage are not its.
        tx.exec("DELETE FROM fields WHERE file_id = ?1", p![file_id])?;
    }
    let old_obj = match old {
        Some(o) if o.len <= FIELDS_MAX => json_object(tx, o)?,
        _ => None,
    }
    .unwrap_or_default();
    for (k, v) in &new_obj {
        if old_obj.get(k) != Some(v) {
            tx.exec(
                "INSERT INTO fields(file_id, key, version_id) VALUES (?1, ?2, ?3)
                 ON CONFLICT(file_id, key) DO UPDATE SET version_id = excluded.version_id",
                p![file_id, k, version_id],
            )?;
        }
    }
    for k in old_obj.keys().filter(|k| !new_obj.contains_key(*k)) {
        tx.exec(
            "DELETE FROM fields WHERE file_id = ?1 AND key = ?2",
            p![file_id, k],
        )?;
    }
    Ok(())
}

/// A directory's entries changed: its mtime and ctime become `time_ns` (POSIX).
pub(crate) fn touch_dir(tx: &dyn Conn, dir: u64, time_ns: i64) -> Result<()> {
    tx.exec(
        "UPDATE nodes SET mtime_ns = ?1, ctime_ns = ?1 WHERE ino = ?2",
        p![time_ns, dir as i64],
    )?;
    Ok(())
}

pub(crate) fn argv_json(c: &Caller) -> String {
    serde_json::to_string(&argv_kept(&c.argv)).unwrap_or_else(|_| "[]".into())
}

/// At most this many bytes of a process's arguments are kept in its `processes` row, as
/// stored (JSON, escapes counted: 4,000 `\x01` bytes are 24,000 there): `execve(2)`
/// allows 2 MiB of them (`ARG_MAX`), and every new process that changes the pad adds a
/// row, which the quota counts (docs/rules.md "Retention and quotas"; the matchers of
/// writer rules see every argument).
pub const ARGV_RECORD_MAX: usize = 4096;

/// Bytes of `c` in a JSON string (serde_json's escapes).
fn json_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// `argv` as a `processes` row keeps it: whole within [`ARGV_RECORD_MAX`] bytes of JSON,
/// else the arguments that fit, the first that does not cut (at a character, with its
/// length), and how many more there were.
pub(crate) fn argv_kept(argv: &[String]) -> std::borrow::Cow<'_, [String]> {
    let len = |a: &String| a.chars().map(json_len).sum::<usize>() + 3;
    if argv.iter().map(len).sum::<usize>() <= ARGV_RECORD_MAX {
        return std::borrow::Cow::Borrowed(argv);
    }
    let mut kept = Vec::new();
    let mut room = ARGV_RECORD_MAX;
    for (i, a) in argv.iter().enumerate() {
        if len(a) <= room {
            kept.push(a.clone());
            room -= len(a);
            continue;
        }
        let mut end = 0;
        let mut used = 3;
        for (at, c) in a.char_indices() {
            if used + json_len(c) > room {
                break;
            }
            used += json_len(c);
            end = at + c.len_utf8();
        }
        kept.push(format!("{}... ({} bytes)", &a[..end], a.len()));
        let rest = &argv[i + 1..];
        if !rest.is_empty() {
            let bytes: usize = rest.iter().map(String::len).sum();
            kept.push(format!("... {} more arguments, {bytes} bytes", rest.len()));
        }
        break;
    }
    std::borrow::Cow::Owned(kept)
}

/// A caller as rows refer to it: its `processes` row, plus the per-request pid and the
/// resolved writer name kept on each row for plain queries.
pub(crate) struct Proc {
    pub(crate) id: i64,
    pub(crate) pid: u32,
    pub(crate) writer: String,
}

/// `processes` row ids by caller facts, so that a change does not look its process up
/// each time (rows are never deleted, so ids stay valid; at most 4096 kept), and the
/// bytes of the rows inserted since the pad's usage last took them
/// ([`Processes::take_added`]).
#[derive(Default)]
pub(crate) struct Processes {
    ids: crate::sync::Mutex<std::collections::HashMap<u64, Vec<(Caller, i64)>>>,
    added: std::sync::atomic::AtomicU64,
}

impl Processes {
    /// Forgets every id (a rolled-back batch may have inserted rows that are gone).
    pub(crate) fn clear(&self) {
        self.ids.lock().clear();
    }

    /// What a change by `c` would add in its `processes` row against the pad's quota,
    /// bytes ([`process_record_bytes`]): 0 when its row is known here (a row inserted by
    /// another daemon, or before this one's cache was cleared, counts again: an
    /// overestimate, never an under-).
    pub(crate) fn cost(&self, c: &Caller) -> u64 {
        let known = self
            .ids
            .lock()
            .get(&facts_hash(c))
            .is_some_and(|entries| entries.iter().any(|(k, _)| same_facts(k, c)));
        if known { 0 } else { process_record_bytes(c) }
    }

    /// The bytes ([`process_record_bytes`]) of the rows inserted since the last call.
    pub(crate) fn take_added(&self) -> u64 {
        self.added.swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    /// The `processes` row of `c` through `conn` (inserted when new).
    pub(crate) fn of(&self, conn: &dyn Conn, c: &Caller) -> Result<Proc> {
        // Looked up by a hash of the facts and compared whole, without copying the caller
        // (its clone, hash and drop were 5% of an append's instructions, issue 32).
        let hash = facts_hash(c);
        let cached = self.ids.lock().get(&hash).and_then(|entries| {
            entries
                .iter()
                .find(|(k, _)| same_facts(k, c))
                .map(|&(_, id)| id)
        });
        let id = match cached {
            Some(id) => id,
            None => {
                let (id, inserted) = process_row(conn, c)?;
                if let Some(bytes) = inserted {
                    self.added
                        .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
                }
                let mut cache = self.ids.lock();
                if cache.len() >= 4096 {
                    cache.clear();
                }
                cache.entry(hash).or_default().push((process_key(c), id));
                id
            }
        };
        Ok(Proc {
            id,
            pid: c.pid,
            writer: c.writer.clone(),
        })
    }
}

/// The facts of `c` that identify a `processes` row: every field but its request pid (what
/// [`process_key`] clears), borrowed. Destructured, so that a field added to `Caller` is a
/// compile error here until it is placed.
#[allow(clippy::type_complexity)]
fn facts(
    c: &Caller,
) -> (
    (
        &String,
        &u32,
        &u64,
        &u32,
        &u32,
        &String,
        &Vec<String>,
        &Option<String>,
    ),
    (
        &Option<i64>,
        &Option<String>,
        &Option<String>,
        &Option<String>,
        &Option<crate::identity::ExeFile>,
        &bool,
        &u64,
        &Vec<u32>,
        &bool,
    ),
) {
    let Caller {
        writer,
        pid: _,
        tgid,
        start_time,
        uid,
        gid,
        exe,
        argv,
        env_writer,
        step,
        transport,
        client,
        client_version,
        exe_file,
        same_ns,
        user_ns,
        groups,
        sealed,
    } = c;
    (
        (writer, tgid, start_time, uid, gid, exe, argv, env_writer),
        (
            step,
            transport,
            client,
            client_version,
            exe_file,
            same_ns,
            user_ns,
            groups,
            sealed,
        ),
    )
}

/// A hash of [`facts`] of `c`.
fn facts_hash(c: &Caller) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    facts(c).hash(&mut h);
    h.finish()
}

/// Whether `a` and `b` have the same [`facts`]: `==` of their [`process_key`]s, without
/// making them.
fn same_facts(a: &Caller, b: &Caller) -> bool {
    facts(a) == facts(b)
}

/// The facts that identify a `processes` row (a caller without its request pid).
pub(crate) fn process_key(c: &Caller) -> Caller {
    Caller {
        pid: 0,
        ..c.clone()
    }
}

/// Inserts the next version of lineage `file_id` (its number: the highest so far + 1).
#[allow(clippy::too_many_arguments)]
pub(crate) fn insert_version(
    tx: &dyn Conn,
    file_id: i64,
    path: &str,
    op: &str,
    content: ContentRef,
    hash: &str,
    c: &Proc,
    time_ns: i64,
    ino: u64,
) -> Result<VersionInfo> {
    let number: i64 = tx.value(
        "SELECT COALESCE(MAX(version), 0) + 1 FROM versions WHERE file_id = ?1",
        p![file_id],
    )?;
    insert_version_numbered(
        tx, file_id, number, path, op, content, hash, c, time_ns, ino,
    )
}

/// Inserts version `number` of lineage `file_id`, carried by inode `ino` (whose owner and
/// mode guard its bytes from then on, issue 31).
#[allow(clippy::too_many_arguments)]
pub(crate) fn insert_version_numbered(
    tx: &dyn Conn,
    file_id: i64,
    number: i64,
    path: &str,
    op: &str,
    content: ContentRef,
    hash: &str,
    c: &Proc,
    time_ns: i64,
    ino: u64,
) -> Result<VersionInfo> {
    let params = p![
        file_id,
        number,
        path,
        op,
        content.len as i64,
        hash,
        content.stream,
        &c.writer,
        c.id,
        c.pid,
        time_ns,
        ino as i64
    ];
    // An id the transaction took with its locks needs no answer: the insert goes with the
    // `COMMIT` (one round trip fewer on a server).
    let id = tx.insert_row(
        IdOf::Versions,
        "file_id, version, path, op, size, blake3, stream, writer, process, pid, time_ns, ino",
        params,
    )?;
    Ok(VersionInfo {
        id,
        number,
        content,
        time_ns,
        writer: c.writer.as_str().into(),
    })
}

/// An event row. `extra` = (new_path, file_id, version_id, errno, reason, content+hash).
#[allow(clippy::too_many_arguments)]
pub(crate) fn insert_event(
    tx: &dyn Conn,
    op: &str,
    path: &str,
    new_path: Option<&str>,
    file_id: Option<i64>,
    version_id: Option<i64>,
    errno: Option<i32>,
    reason: Option<&str>,
    content: Option<(ContentRef, &str)>,
    c: &Proc,
    time_ns: i64,
) -> Result<()> {
    tx.exec("INSERT INTO events(time_ns, op, path, new_path, file_id, version_id, errno, reason, stream,
            size, blake3, writer, process, pid)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)", p![
        time_ns,
        op,
        path,
        new_path,
        file_id,
        version_id,
        errno,
        reason,
        content.map(|(r, _)| r.stream),
        content.map(|(r, _)| r.len as i64),
        content.map(|(_, h)| h),
        &c.writer,
        c.id,
        c.pid
    ])?;
    Ok(())
}

pub(crate) fn node_from_row(r: &dyn Row) -> Result<NodeRecord> {
    let mut n = node_columns(r)?;
    // Commits do not rewrite the node row: mtime and ctime follow the current version
    // unless mtime was set explicitly since.
    if let Some(h) = &n.head {
        if !n.mtime_pinned {
            n.attrs.mtime_ns = n.attrs.mtime_ns.max(h.time_ns);
        }
        n.attrs.ctime_ns = n.attrs.ctime_ns.max(h.time_ns);
    }
    Ok(n)
}

pub(crate) fn node_columns(r: &dyn Row) -> Result<NodeRecord> {
    let kind: String = r.get(3)?;
    let head_id: Option<i64> = r.get(11)?;
    Ok(NodeRecord {
        ino: r.get::<i64>(0)? as u64,
        parent: r.get::<Option<i64>>(1)?.unwrap_or(0) as u64,
        name: r.get(2)?,
        kind: if kind == "dir" { Kind::Dir } else { Kind::File },
        attrs: Attrs {
            mode: r.get(4)?,
            uid: r.get(5)?,
            gid: r.get(6)?,
            atime_ns: r.get(7)?,
            mtime_ns: r.get(8)?,
            ctime_ns: r.get(9)?,
        },
        file_id: r.get(10)?,
        mtime_pinned: r.get::<i64>(16)? != 0,
        head: match head_id {
            Some(id) => Some(VersionInfo {
                id,
                number: r.get(12)?,
                content: ContentRef {
                    stream: r.get(13)?,
                    len: r.get::<i64>(14)? as u64,
                },
                time_ns: r.get(15)?,
                writer: r.get::<String>(17)?.into(),
            }),
            None => None,
        },
        step: None,
        last_read: None,
    })
}

/// The mode an unlinked node keeps (`?2`: its inode; before it leaves its parent): its
/// own, less the read, write and search bits of each class (its owner, its group, the
/// others) that could not search every directory above it then (issue 31: a file in
/// root's 0700 directory, deleted, and the directory removed or renamed after, must not
/// become readable through `.archive` or `.history` by the file's own 0644). A class is
/// judged as a user of it who is nothing more: the file's owner by the directories'
/// owner, group or other bits (root: always), a member of the file's group by their
/// group bits when the group is theirs, else other bits; the others by other bits.
/// Set-id and sticky bits stay.
const KEPT_MODE: &str = "mode & (3584 | COALESCE((
    WITH RECURSIVE up(ino) AS (
        SELECT parent FROM nodes WHERE ino = ?2 AND parent IS NOT NULL
        UNION ALL
        SELECT n.parent FROM nodes n JOIN up ON n.ino = up.ino
        WHERE n.parent IS NOT NULL AND n.parent <> n.ino
    )
    SELECT (CASE WHEN MIN(CASE WHEN f.uid = 0 OR (CASE WHEN d.uid = f.uid THEN (d.mode & 64)
                                                       WHEN d.gid = f.gid THEN (d.mode & 8)
                                                       ELSE (d.mode & 1) END) <> 0
                               THEN 1 ELSE 0 END) = 1 THEN 448 ELSE 0 END)
         | (CASE WHEN MIN(CASE WHEN (CASE WHEN d.gid = f.gid THEN (d.mode & 8)
                                          ELSE (d.mode & 1) END) <> 0
                               THEN 1 ELSE 0 END) = 1 THEN 56 ELSE 0 END)
         | (CASE WHEN MIN(CASE WHEN (d.mode & 1) <> 0 THEN 1 ELSE 0 END) = 1 THEN 7 ELSE 0 END)
    FROM up JOIN nodes d ON d.ino = up.ino JOIN nodes f ON f.ino = ?2
), 511))";

/// The rows of an unlink (`file_id` set) or rmdir, inside the caller's transaction: the
/// node leaves its parent (keeping the mode [`KEPT_MODE`] gives it), the lineage is
/// marked deleted (every version stays) and an event records it.
pub(crate) fn unlink_in(
    tx: &dyn Conn,
    ino: u64,
    file_id: Option<i64>,
    path: &str,
    caller: &Proc,
    time_ns: i64,
) -> Result<()> {
    tx.exec(
        "UPDATE nodes SET mtime_ns = ?1, ctime_ns = ?1
         WHERE ino = (SELECT parent FROM nodes WHERE ino = ?2)",
        p![time_ns, ino as i64],
    )?;
    tx.exec(
        &format!(
            "UPDATE nodes SET mode = {KEPT_MODE}, parent = NULL, unlinked_ns = ?1 WHERE ino = ?2"
        ),
        p![time_ns, ino as i64],
    )?;
    crate::store::sql::checkpoint::log_node(tx, ino, None, time_ns)?;
    let mut version_id = None;
    if let Some(fid) = file_id {
        tx.exec(
            "UPDATE files SET deleted_ns = ?1 WHERE id = ?2",
            p![time_ns, fid],
        )?;
        version_id = live_head(tx, fid)?.0.map(|v| v.id);
    }
    let op = if file_id.is_some() { "unlink" } else { "rmdir" };
    insert_event(
        tx, op, path, None, file_id, version_id, None, None, None, caller, time_ns,
    )?;
    Ok(())
}

/// How [`create_in`] finds the deleted lineage a new file continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineageLookup {
    /// Asks for it ([`deleted_lineage_at`]): one query, whose answer the transaction
    /// waits for.
    Ask,
    /// Takes a new lineage without waiting for an answer, after a statement that fails
    /// the transaction when there is a deleted lineage to continue ([`NO_DELETED_LINEAGE`]:
    /// PostgreSQL's `division_by_zero`, SQLSTATE 22012), which the caller then makes
    /// again with [`LineageLookup::Ask`]. PostgreSQL only: SQLite's division by zero is
    /// NULL, not an error.
    Guarded,
    /// Inserts a new lineage unless there is a deleted one to continue, in one statement
    /// ([`NEW_LINEAGE_UNLESS_DELETED`]), and asks for that one only when there is: the
    /// common create is one statement instead of two (issue 32). For a connection that
    /// answers each statement at once (SQLite), where the id comes back by `RETURNING`.
    InsertUnlessDeleted,
}

/// Inserts the lineage of a new file at `?1`, returning its id, unless a deleted lineage
/// that file would continue is there ([`deleted_lineage_at`]'s condition): then no row.
pub(crate) const NEW_LINEAGE_UNLESS_DELETED: &str =
    "INSERT INTO files(path) SELECT ?1 WHERE NOT EXISTS (SELECT 1 FROM files WHERE path = ?1
         AND deleted_ns IS NOT NULL AND merged_into IS NULL) RETURNING id";

/// Fails the transaction (PostgreSQL: `division_by_zero`) when a deleted lineage that a
/// new file at `?1` would continue is there ([`deleted_lineage_at`]'s condition).
pub(crate) const NO_DELETED_LINEAGE: &str =
    "SELECT 1 / (1 - COUNT(*)) FROM (SELECT 1 FROM files WHERE path = ?1
         AND deleted_ns IS NOT NULL AND merged_into IS NULL LIMIT 1) AS deleted";

/// The rows of a new file or directory, inside the caller's transaction. A file gets no
/// version: its first commit is its first version (issue 11). It continues the lineage of
/// the file deleted last at `path`, if any (its version numbers go on from there, and an
/// event, op `create`, `version_id` the lineage's last version before it, marks where the
/// new file begins), else a new one; `lookup` says how that lineage is found. A directory
/// gets a `mkdir` event.
#[allow(clippy::too_many_arguments)]
pub(crate) fn create_in(
    tx: &dyn Conn,
    parent: u64,
    name: &[u8],
    path: &str,
    kind: Kind,
    attrs: Attrs,
    caller: &Proc,
    lookup: LineageLookup,
) -> Result<NodeRecord> {
    let mut file_id = None;
    let mut floor = 0;
    if kind == Kind::File {
        // The new lineage's id when it was made with the lookup, else the deleted one.
        let (new, deleted) = match lookup {
            LineageLookup::Ask => (None, deleted_lineage_at(tx, path)?),
            LineageLookup::Guarded => {
                tx.exec(NO_DELETED_LINEAGE, p![path])?;
                (None, None)
            }
            LineageLookup::InsertUnlessDeleted => {
                match tx.opt_value::<i64>(NEW_LINEAGE_UNLESS_DELETED, p![path])? {
                    Some(id) => (Some(id), None),
                    None => (None, deleted_lineage_at(tx, path)?),
                }
            }
        };
        let (fid, before) = match (new, deleted) {
            (Some(fid), _) => (fid, None),
            (None, Some(fid)) => {
                tx.exec("UPDATE files SET deleted_ns = NULL WHERE id = ?1", p![fid])?;
                (fid, head_of(tx, fid)?.map(|v| v.id))
            }
            (None, None) => (tx.insert_row(IdOf::Files, "path", p![path])?, None),
        };
        // A continued lineage: the event's version is what tells the file's versions
        // from the deleted file's (`live_head`). A new lineage needs none: its first
        // version says who created it.
        if before.is_some() {
            insert_event(
                tx,
                "create",
                path,
                None,
                Some(fid),
                before,
                None,
                None,
                None,
                caller,
                attrs.ctime_ns,
            )?;
        }
        file_id = Some(fid);
        floor = before.unwrap_or(0);
    }
    let params = p![
        parent as i64,
        name,
        if kind == Kind::Dir { "dir" } else { "file" },
        attrs.mode,
        attrs.uid,
        attrs.gid,
        attrs.atime_ns,
        attrs.mtime_ns,
        attrs.ctime_ns,
        file_id
    ];
    let ino = tx.insert_row(
        IdOf::Nodes,
        "parent, name, kind, mode, uid, gid, atime_ns, mtime_ns, ctime_ns, file_id",
        params,
    )? as u64;
    crate::store::sql::checkpoint::log_node(tx, ino, Some(floor), attrs.ctime_ns)?;
    touch_dir(tx, parent, attrs.ctime_ns)?;
    if kind == Kind::Dir {
        insert_event(
            tx,
            "mkdir",
            path,
            None,
            None,
            None,
            None,
            None,
            None,
            caller,
            attrs.ctime_ns,
        )?;
    }
    Ok(NodeRecord {
        ino,
        parent,
        name: name.to_vec(),
        kind,
        attrs,
        file_id,
        head: None,
        mtime_pinned: false,
        step: None,
        last_read: None,
    })
}

/// Whether renaming the file of lineage `src` over the file of lineage `dst` loses an
/// update (issue 13): the process that wrote `src`'s current version had read version R
/// of `dst`, and `dst` is now at a later version committed by another process, and what
/// is renamed is not that version itself, byte for byte (a backup or an old version put
/// back). Returns the refusal's reason and the content refused (`src`'s current
/// version).
pub(crate) fn lost_update_by_rename(
    tx: &dyn Conn,
    src: i64,
    dst: i64,
    new_path: &str,
) -> Result<Option<(String, ContentRef, String)>> {
    let (Some(s), Some(h)) = (live_head(tx, src)?.0, live_head(tx, dst)?.0) else {
        return Ok(None);
    };
    let read: Option<(i64, i64)> = tx.opt(
        "SELECT v.id, v.version FROM inputs i JOIN versions v ON v.id = i.input_id
             WHERE i.version_id = ?1 AND i.via = 'read' AND v.file_id = ?2
             ORDER BY v.id DESC LIMIT 1",
        p![s.id, dst],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let Some((read_id, read_number)) = read else {
        return Ok(None);
    };
    if h.id <= read_id {
        return Ok(None);
    }
    let same_process: bool = tx
        .opt_value(
            "SELECT a.tgid = b.tgid AND a.start_time = b.start_time
             FROM versions x JOIN processes a ON a.id = x.process,
                  versions y JOIN processes b ON b.id = y.process
             WHERE x.id = ?1 AND y.id = ?2",
            p![s.id, h.id],
        )?
        .unwrap_or(false);
    if same_process {
        return Ok(None);
    }
    let hash_of = |id: i64| -> Result<String> {
        tx.value("SELECT blake3 FROM versions WHERE id = ?1", p![id])
    };
    if same_bytes(tx, read_id, h.id)? {
        // The bytes read are the current bytes again (a rollback or a restore since): the
        // file replacing them drops no change.
        return Ok(None);
    }
    let hash = hash_of(s.id)?;
    if hash == hash_of(read_id)? {
        // A verbatim copy of the version read put back (`cp f f.bak`, an edit, `mv f.bak
        // f`; `cp .history/f/1 t && mv t f`): a restore, not an update made from it.
        return Ok(None);
    }
    Ok(Some((
        format!(
            "{new_path}: lost update: replaced by a file written from version {read_number} of it, but the current version is {} by {} (on_conflict: refuse)",
            h.number, h.writer
        ),
        s.content,
        hash,
    )))
}

/// Whether versions `a` and `b` (ids) hold the same bytes (size and blake3): a version
/// that brings back earlier bytes (rollback, restore) changes nothing a writer could lose.
fn same_bytes(tx: &dyn Conn, a: i64, b: i64) -> Result<bool> {
    Ok(tx
        .opt_value(
            "SELECT x.size = y.size AND x.blake3 = y.blake3
             FROM versions x, versions y WHERE x.id = ?1 AND y.id = ?2",
            p![a, b],
        )?
        .unwrap_or(false))
}

/// The lineage of the live file at `path` (stored form), found by the exact bytes of its
/// names from the root (`nodes`), so that a name that is not UTF-8 is found in a database
/// written by an older scratchfs too; `None` when no live file is there (or it is a
/// directory).
pub fn live_lineage(conn: &dyn Conn, path: &str) -> Result<Option<i64>> {
    let (mut ino, mut file) = (1i64, None);
    for name in crate::store::paths::decode(path).split(|&b| b == b'/') {
        let Some((i, f)) = conn.opt(
            "SELECT ino, file_id FROM nodes WHERE parent = ?1 AND name = ?2",
            p![ino, name],
            |r| Ok((r.get::<i64>(0)?, r.get::<Option<i64>>(1)?)),
        )?
        else {
            return Ok(None);
        };
        (ino, file) = (i, f);
    }
    Ok(file)
}

/// The live node at `path` (stored form), found by the exact bytes of its names from the
/// root; `None` when no live node is there.
pub(crate) fn ino_at(conn: &dyn Conn, path: &str) -> Result<Option<u64>> {
    let mut ino = 1i64;
    for name in crate::store::paths::decode(path)
        .split(|&b| b == b'/')
        .filter(|n| !n.is_empty())
    {
        match conn.opt_value::<i64>(
            "SELECT ino FROM nodes WHERE parent = ?1 AND name = ?2",
            p![ino, name],
        )? {
            Some(i) => ino = i,
            None => return Ok(None),
        }
    }
    Ok(Some(ino as u64))
}

/// The inputs of version `id`, oldest read first (issue 13).
pub fn inputs_of(conn: &dyn Conn, id: i64) -> Result<Vec<InputInfo>> {
    conn.all(
        "SELECT i.input_id, v.path, v.version, v.writer, i.via, i.read_ns
         FROM inputs i LEFT JOIN versions v ON v.id = i.input_id
         WHERE i.version_id = ?1 ORDER BY i.read_ns, i.input_id",
        p![id],
        |r| {
            Ok(InputInfo {
                version_id: r.get(0)?,
                path: r.get(1)?,
                version: r.get(2)?,
                writer: r.get(3)?,
                via: r.get(4)?,
                read_ns: r.get(5)?,
            })
        },
    )
}

/// Records that version `id` brings back the bytes of version `from` (a rollback, a
/// restore: `versions.restored_from`, issue 35).
pub(crate) fn set_restored_from(tx: &dyn Conn, id: i64, from: i64) -> Result<()> {
    tx.exec(
        "UPDATE versions SET restored_from = ?1 WHERE id = ?2",
        p![from, id],
    )
}

/// Records that version `?1` was made from version `?2` (`via` `?3`: `read` or `rename`,
/// at `?4`), replacing an earlier record of the same pair.
pub(crate) const UPSERT_INPUT: &str = "INSERT INTO inputs(version_id, input_id, via, read_ns)
     VALUES (?1, ?2, ?3, ?4)
     ON CONFLICT(version_id, input_id) DO UPDATE SET via = excluded.via, read_ns = excluded.read_ns";

/// Records `inputs` as what version `version_id` was made from (issue 13): `via` 'read'.
pub(crate) fn insert_inputs(tx: &dyn Conn, version_id: i64, inputs: &[Input]) -> Result<()> {
    if inputs.is_empty() {
        return Ok(());
    }
    for i in inputs {
        if i.version_id != version_id {
            tx.exec(
                UPSERT_INPUT,
                p![version_id, i.version_id, "read", i.read_ns],
            )?;
        }
    }
    Ok(())
}

/// A commit refused as a lost update (`ESTALE`, SPEC §6), on record in the caller's
/// transaction: the refusal event with `reason` and the refused content, if it could be
/// built (`(content, blake3)`).
#[allow(clippy::too_many_arguments)]
fn refuse_stale(
    tx: &dyn Conn,
    path: &str,
    file_id: i64,
    reason: String,
    refused: Option<(ContentRef, &str)>,
    caller: &Proc,
    time_ns: i64,
) -> Result<Applied> {
    insert_event(
        tx,
        "rejected",
        path,
        None,
        Some(file_id),
        None,
        Some(libc::ESTALE),
        Some(&reason),
        refused,
        caller,
        time_ns,
    )?;
    Ok(Applied::Stale(StoreError::new(ErrorKind::Stale, reason)))
}

/// The work of a commit (SPEC §4), inside the caller's transaction: the new content, its
/// version and per-key provenance, or the lost-update refusal (`ESTALE`), or nothing when
/// the bytes are those of the current version. `req.caller` and `req.durable` are not
/// used (the caller resolved `caller` and owns the transaction).
pub(crate) fn commit_in(tx: &dyn Conn, req: CommitRequest<'_>, caller: &Proc) -> Result<Applied> {
    commit_guessing(tx, req, caller, None).map(|(applied, _)| applied)
}

/// [`commit_in`] on what the caller guessed the file's head is, when `known` is given: a
/// daemon keeps the head of a file it committed last, and a commit built on it needs no
/// answer from the store before its inserts, so that on a server it is one round trip
/// (PostgreSQL). [`HEAD_IS`] goes first and fails the transaction (`division_by_zero`)
/// when the guess is wrong (another daemon committed since, a rename, a redaction...);
/// the caller then makes the commit again without a guess. `None`: the head is read
/// ([`node_head`]). Returns also the file's head after this commit, as [`node_head`]
/// would read it once the transaction is committed (`None` after a lost update refused).
/// A version id the connection hands out only at `COMMIT` ([`Conn::reserved_id`]) is in
/// both as it was handed out; the caller puts the real one in.
pub(crate) fn commit_guessing(
    tx: &dyn Conn,
    req: CommitRequest<'_>,
    caller: &Proc,
    known: Option<NodeHead>,
) -> Result<(Applied, Option<NodeHead>)> {
    let CommitRequest {
        ino,
        path,
        op,
        expect_head,
        build,
        source,
        prefix_hasher,
        caller: _,
        time_ns,
        set_mtime,
        durable: _,
        inputs,
        origin,
        restores,
    } = req;
    // The file's current version; a file without one yet (created, first commit) is
    // empty, and its first version is numbered on from its lineage's (a re-created path).
    let read = match known {
        Some(k) => {
            let head = k.lineage_head.as_ref();
            tx.exec(
                HEAD_IS,
                p![
                    ino as i64,
                    k.file_id,
                    k.mtime_pinned,
                    head.map(|h| h.id),
                    head.map(|h| h.content.stream),
                    head.map(|h| h.content.len as i64),
                    k.born,
                    k.stream_end as i64
                ],
            )?;
            k
        }
        None => node_head(tx, ino)?.ok_or_else(|| {
            StoreError::new(
                ErrorKind::Stale,
                format!("{path}: the file was replaced by a rename while open"),
            )
        })?,
    };
    let NodeHead {
        file_id,
        live,
        lineage_head,
        stream_end: head_end,
        mtime_pinned,
        born,
    } = read.clone();
    let number = lineage_head.as_ref().map_or(1, |h| h.number + 1);
    let head = live.unwrap_or(VersionInfo {
        id: 0,
        number: 0,
        content: ContentRef {
            stream: EMPTY_STREAM,
            len: 0,
        },
        time_ns: 0,
        writer: "".into(),
    });
    let first = head.id == 0;
    // A writer that worked from other bytes than the current ones would drop a change.
    // The same bytes under a newer version (a rollback, a restore, a write put back) are
    // no change to drop: not a lost update.
    let stale = match expect_head {
        Some(e) if e != head.id => first || !same_bytes(tx, e, head.id)?,
        _ => false,
    };
    // Normalise both builds to: base, base_limit, size, dirty ranges, source shift.
    let (base, base_limit, size, dirty, shift): (ContentRef, u64, u64, Vec<(u64, u64)>, u64) =
        match build {
            Build::Overlay {
                base,
                base_limit,
                size,
                dirty,
            } => (base, base_limit.min(base.len), size, dirty.to_vec(), 0),
            Build::Append { len } => (
                head.content,
                head.content.len,
                head.content.len + len,
                vec![(head.content.len, head.content.len + len)],
                head.content.len,
            ),
            Build::Truncate { size } => (
                head.content,
                head.content.len.min(size),
                size,
                Vec::new(),
                0,
            ),
        };
    // The content built on must still be there: `gc` may have collected the version a
    // restore names between its lookup and this commit, and a replay on a database that
    // was changed before the log was applied would find other rows (never zeros instead).
    // The current version's content is never collected, so appends skip the query.
    if base_limit > 0 && base.stream != EMPTY_STREAM && base != head.content {
        let present: bool = tx.value(
            "SELECT EXISTS (SELECT 1 FROM streams WHERE id = ?1)",
            p![base.stream],
        )?;
        if !present && !first && expect_head == Some(head.id) {
            // The version the handle opened is still the file's, with other bytes: a
            // redaction moved them. What it wrote cannot be laid on bytes that are gone:
            // refused as a lost update, on record (its own bytes are not kept: they may
            // hold the secret).
            let reason = format!(
                "{path}: version {} was redacted after this handle opened it: its writes are not committed (open the file again)",
                head.number
            );
            return Ok((
                refuse_stale(tx, path, file_id, reason, None, caller, time_ns)?,
                None,
            ));
        }
        if !present {
            return Err(StoreError::new(
                ErrorKind::NotFound,
                format!("{path}: the content this commit builds on was collected (gc)"),
            ));
        }
    }
    let base_end = match &lineage_head {
        Some(h) if h.content.stream == base.stream => head_end,
        _ if base.stream == EMPTY_STREAM => 0,
        _ => stream_end(tx, base.stream)?,
    };
    let extends = base.stream != EMPTY_STREAM
        && base_limit == base.len
        && base.len == base_end
        && dirty.iter().all(|&(s, _)| s >= base.len)
        && size >= base.len;
    // Source of byte `off` of the new content: dirty → source; base → stored; else 0.
    let mut fill = |off: u64, buf: &mut [u8]| -> Result<()> {
        let mut pos = 0usize;
        while pos < buf.len() {
            let at = off + pos as u64;
            let remaining = buf.len() - pos;
            if let Some(&(_, e)) = dirty.iter().find(|&&(s, e)| s <= at && at < e) {
                let n = ((e - at) as usize).min(remaining);
                source(at - shift, &mut buf[pos..pos + n])?;
                pos += n;
                continue;
            }
            let next_dirty = dirty
                .iter()
                .map(|&(s, _)| s)
                .filter(|&s| s > at)
                .min()
                .unwrap_or(u64::MAX);
            let limit = ((next_dirty - at).min(remaining as u64)) as usize;
            if at < base_limit {
                let n = limit.min((base_limit - at) as usize);
                let got = read_at(tx, base, at, &mut buf[pos..pos + n])?;
                buf[pos + got..pos + n].fill(0);
                pos += n;
            } else {
                buf[pos..pos + limit].fill(0);
                pos += limit;
            }
        }
        Ok(())
    };
    // What byte `at` of the new content is: written (dirty), the base's stored bytes or
    // its holes, or zeros past the base (a hole).
    let mut next = |at: u64| -> Result<(Seg, u64)> {
        if let Some(&(_, e)) = dirty.iter().find(|&&(s, e)| s <= at && at < e) {
            return Ok((Seg::Data, e));
        }
        let next_dirty = dirty
            .iter()
            .map(|&(s, _)| s)
            .filter(|&s| s > at)
            .min()
            .unwrap_or(u64::MAX)
            .min(size);
        if at < base_limit {
            return stored_seg(tx, base, at, base_limit.min(next_dirty));
        }
        Ok((Seg::Hole, next_dirty))
    };
    let mut scratch = Vec::with_capacity(CHUNK);
    let (content, hasher) = if extends {
        let mut hasher = match prefix_hasher {
            Some((vid, h))
                if vid == head.id && base == head.content && h.position() == base.len =>
            {
                match h.resized(size) {
                    Some(h) => h,
                    None => hash_prefix(tx, base, base.len, size)?,
                }
            }
            _ => hash_prefix(tx, base, base.len, size)?,
        };
        write_range(
            tx,
            base.stream,
            base.len,
            size,
            &mut hasher,
            &mut next,
            &mut fill,
            &mut scratch,
        )?;
        (
            ContentRef {
                stream: base.stream,
                len: size,
            },
            hasher,
        )
    } else if dirty.is_empty() && size <= base_limit {
        // A pure truncation: a shorter view of the same stream stores nothing.
        (
            ContentRef {
                stream: if size == 0 { EMPTY_STREAM } else { base.stream },
                len: size,
            },
            hash_prefix(tx, base, size, size)?,
        )
    } else {
        let stream = new_stream(tx)?;
        let mut hasher = ContentHasher::new(size);
        write_range(
            tx,
            stream,
            0,
            size,
            &mut hasher,
            &mut next,
            &mut fill,
            &mut scratch,
        )?;
        (ContentRef { stream, len: size }, hasher)
    };
    let hash = hasher.finalize();
    if !stale && !first && content.len == head.content.len {
        // The same bytes again: nothing changed, so no version (SPEC §4).
        let same: bool = tx.value(
            "SELECT blake3 = ?2 FROM versions WHERE id = ?1",
            p![head.id, hash.as_str()],
        )?;
        if same {
            return Ok((
                Applied::Unchanged(Committed {
                    file_id,
                    version: head,
                    hasher,
                }),
                Some(read),
            ));
        }
    }
    if stale {
        // The version the writer worked from: what its handle opened, or what the process
        // had read before it opened (issue 13).
        let base: Option<i64> = tx.opt_value(
            "SELECT version FROM versions WHERE id = ?1",
            p![expect_head.unwrap_or_default()],
        )?;
        let had = base.map_or_else(
            || "the file had no version when the writer opened it".to_string(),
            |n| format!("the writer had version {n} (opened or read)"),
        );
        let reason = if first {
            format!(
                "{path}: lost update: {had}, but the file was deleted and created again since (on_conflict: refuse)"
            )
        } else {
            format!(
                "{path}: lost update: {had}, but the current version is {} by {} (on_conflict: refuse)",
                head.number, head.writer
            )
        };
        return Ok((
            refuse_stale(
                tx,
                path,
                file_id,
                reason,
                Some((content, hash.as_str())),
                caller,
                time_ns,
            )?,
            None,
        ));
    }
    // The first version of a file is labelled `create`, whatever its handle did.
    let op = if first && !matches!(op, "restore" | "rename" | "adopt" | "promote" | "fork") {
        "create"
    } else {
        op
    };
    crate::failpoint::hit("commit");
    let version = insert_version_numbered(
        tx, file_id, number, path, op, content, &hash, caller, time_ns, req.ino,
    )?;
    insert_inputs(tx, version.id, inputs)?;
    if let Some(r) = restores {
        set_restored_from(tx, version.id, r)?;
    }
    if let Some(o) = origin {
        tx.exec(
            "INSERT INTO origins(version_id, source, source_id, source_version_id,
                 path, version, writer)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            p![
                version.id,
                &o.source,
                &o.source_id,
                o.source_version_id,
                &o.path,
                o.version,
                &o.writer
            ],
        )?;
    }
    update_fields(
        tx,
        file_id,
        path,
        (!first).then_some(head.content),
        content,
        version.id,
    )?;
    if !first && content.len * 2 < head.content.len {
        // Compaction or a wipe: MANIFEST names the version dropped (SPEC §7).
        insert_event(
            tx,
            "shrink",
            path,
            None,
            Some(file_id),
            Some(head.id),
            None,
            Some(&format!(
                "{path} shrank from {} to {} bytes; version {} is .history/{path}/{}",
                head.content.len, content.len, head.number, head.number
            )),
            None,
            caller,
            time_ns,
        )?;
    }
    // The node row is not rewritten: its mtime and ctime follow the current version
    // (see `node_from_row`), except for an explicit mtime, which a write unpins. Pinned
    // as `node_head` read it: a pin another daemon commits after that read is ordered
    // after this commit, and stays (one statement fewer per commit to a server).
    if set_mtime && mtime_pinned {
        tx.exec(
            "UPDATE nodes SET mtime_ns = ?1, mtime_pinned = 0 WHERE ino = ?2",
            p![time_ns, ino as i64],
        )?;
    }
    // The new version is the lineage's head, and its stream ends where its content does:
    // `write_range` stores the last byte of a range it writes, a hole included; a pure
    // truncation keeps the base's stream as it was (none: the empty stream).
    let stream_end = if content.stream == EMPTY_STREAM {
        0
    } else if content.stream == base.stream && !extends {
        base_end
    } else {
        content.len
    };
    let after = NodeHead {
        file_id,
        live: Some(version.clone()),
        lineage_head: Some(version.clone()),
        stream_end,
        mtime_pinned: mtime_pinned && !set_mtime,
        born,
    };
    Ok((
        Applied::Committed(Committed {
            file_id,
            version,
            hasher,
        }),
        Some(after),
    ))
}

/// The rows of a rename (SPEC §4, [`crate::store::Store::rename`]), inside the caller's
/// transaction, by `caller`. `Ok(Err(ESTALE))`: a lost update refused, whose refusal the
/// caller commits before returning the error; `Err`: roll back.
pub(crate) fn rename_in(
    tx: &dyn Conn,
    req: RenameRequest<'_>,
    caller: &Proc,
) -> Result<Result<(Option<i64>, Option<VersionInfo>)>> {
    let t = req.time_ns;
    if req.lost_update_check
        && req.kind == Kind::File
        && let (Some(src), Some((_, Some(dst)))) = (req.file_id, req.replaced)
        && src != dst
        && let Some((reason, content, hash)) = lost_update_by_rename(tx, src, dst, req.new_path)?
    {
        // The kernel tries a rename that failed with ESTALE once more (its lookups
        // revalidated): the same refusal a moment ago by the same process is on record.
        let again: bool = tx.value(
            "SELECT EXISTS (SELECT 1 FROM events WHERE op = 'rejected' AND path = ?1
                     AND process = ?2 AND blake3 = ?3 AND errno = ?4 AND time_ns > ?5)",
            p![
                req.new_path,
                caller.id,
                &hash,
                libc::ESTALE,
                t - 1_000_000_000
            ],
        )?;
        if !again {
            insert_event(
                tx,
                "rejected",
                req.new_path,
                None,
                Some(dst),
                None,
                Some(libc::ESTALE),
                Some(&reason),
                Some((content, hash.as_str())),
                caller,
                t,
            )?;
        }
        return Ok(Err(StoreError::new(ErrorKind::Stale, reason)));
    }
    tx.exec(
        "UPDATE nodes SET mtime_ns = ?1, ctime_ns = ?1
         WHERE ino = (SELECT parent FROM nodes WHERE ino = ?2)",
        p![t, req.ino as i64],
    )?;
    touch_dir(tx, req.new_parent, t)?;
    if let Some((old_ino, old_fid)) = req.replaced {
        tx.exec(
            &format!(
                "UPDATE nodes SET mode = {KEPT_MODE}, parent = NULL, unlinked_ns = ?1,
                        file_id = NULL WHERE ino = ?2"
            ),
            p![t, old_ino as i64],
        )?;
        crate::store::sql::checkpoint::log_node(tx, old_ino, None, t)?;
        if old_fid.is_none() {
            insert_event(
                tx,
                "rmdir",
                req.new_path,
                None,
                None,
                None,
                None,
                None,
                None,
                caller,
                t,
            )?;
        }
    }
    // The lineage the moving file lands in: the replaced file's, or the file's
    // deleted last at the new path (a path's history is continuous, issue 11), or its
    // own.
    let target_fid = match (req.kind, req.replaced) {
        (Kind::File, Some((_, Some(fid)))) => Some(fid),
        (Kind::File, _) => match deleted_lineage_at(tx, req.new_path)? {
            Some(fid) if req.file_id.is_some() && req.file_id != Some(fid) => {
                tx.exec("UPDATE files SET deleted_ns = NULL WHERE id = ?1", p![fid])?;
                Some(fid)
            }
            _ => req.file_id,
        },
        (Kind::Dir, _) => None,
    };
    // The moving file's place in the namespace log: on another lineage, the versions
    // there so far are not its own.
    let floor = match target_fid {
        Some(fid) if Some(fid) != req.file_id => Some(head_of(tx, fid)?.map_or(0, |v| v.id)),
        _ => None,
    };
    tx.exec(
        "UPDATE nodes SET parent = ?1, name = ?2, ctime_ns = ?3, file_id = COALESCE(?4, file_id)
         WHERE ino = ?5",
        p![
            req.new_parent as i64,
            req.new_name,
            t,
            target_fid,
            req.ino as i64
        ],
    )?;
    if let Some(fid) = target_fid {
        tx.exec(
            "UPDATE files SET path = ?1 WHERE id = ?2",
            p![req.new_path, fid],
        )?;
    }
    for (fid, p) in &req.moved_files {
        tx.exec("UPDATE files SET path = ?1 WHERE id = ?2", p![p, fid])?;
    }
    let mut version = None;
    let content = match req.file_id {
        Some(src) => live_head(tx, src)?.0.map(|v| v.content),
        None => None,
    };
    if target_fid != req.file_id
        && content.is_none()
        && let (Some(src), Some(fid)) = (req.file_id, target_fid)
    {
        // A file with no version yet lands on another lineage: that lineage's versions
        // are not its content, so the move is a create there.
        tx.exec(
            "UPDATE files SET deleted_ns = ?1, merged_into = ?3 WHERE id = ?2",
            p![t, src, fid],
        )?;
        let before = head_of(tx, fid)?.map(|v| v.id);
        insert_event(
            tx,
            "create",
            req.new_path,
            None,
            Some(fid),
            before,
            None,
            None,
            None,
            caller,
            t,
        )?;
    }
    if let (Some(fid), Some(content)) = (target_fid, content) {
        let before = live_head(tx, fid)?.0.map(|v| v.content);
        if req.file_id != Some(fid) {
            // The source lineage ends here; its history stays under its old path.
            if let Some(src) = req.file_id {
                tx.exec(
                    "UPDATE files SET deleted_ns = ?1, merged_into = ?3 WHERE id = ?2",
                    p![t, src, fid],
                )?;
            }
        }
        // The content renamed is the source's current version, whose hash is known.
        let hash: Option<String> = match req.file_id {
            Some(src) => tx.opt_value(
                "SELECT blake3 FROM versions WHERE file_id = ?1 ORDER BY version DESC LIMIT 1",
                p![src],
            )?,
            None => None,
        };
        let hash = match hash {
            Some(h) => h,
            None => digest_of(tx, content)?,
        };
        // What the content was renamed from (`why` follows it to its writer): the version
        // that wrote it, past the renames since (a rename's own input is that version
        // already). Named by the live version, the policy keeps it (docs/rules.md): with
        // the last rename's version named instead, `mv f g; mv g f` and `keep: {versions:
        // 2}` forgot the writer's version, and the content showed only the renamer.
        let from = match req.file_id {
            Some(src) => match live_head(tx, src)?.0.map(|v| v.id) {
                Some(head) => Some(
                    tx.opt_value::<i64>(
                        "SELECT input_id FROM inputs WHERE version_id = ?1 AND via = 'rename'",
                        p![head],
                    )?
                    .unwrap_or(head),
                ),
                None => None,
            },
            None => None,
        };
        let v = insert_version(
            tx,
            fid,
            req.new_path,
            "rename",
            content,
            &hash,
            caller,
            t,
            req.ino,
        )?;
        if let Some(from) = from {
            tx.exec(UPSERT_INPUT, p![v.id, from, "rename", t])?;
        }
        update_fields(tx, fid, req.new_path, before, content, v.id)?;
        version = Some(v);
    }
    insert_event(
        tx,
        "rename",
        req.old_path,
        Some(req.new_path),
        target_fid,
        version.as_ref().map(|v| v.id),
        None,
        None,
        None,
        caller,
        t,
    )?;
    crate::store::sql::checkpoint::log_node(tx, req.ino, floor, t)?;
    crate::failpoint::hit("rename");
    Ok(Ok((target_fid, version)))
}

/// The rows of a `chmod`/`chown`/`utimensat` ([`crate::store::Store::set_attrs`]),
/// inside the caller's transaction.
pub(crate) fn set_attrs_in(
    tx: &dyn Conn,
    ino: u64,
    a: Attrs,
    mtime_pinned: bool,
    path: &str,
    caller: &Proc,
) -> Result<()> {
    tx.exec("UPDATE nodes SET mode = ?1, uid = ?2, gid = ?3, atime_ns = ?4, mtime_ns = ?5, ctime_ns = ?6,
             mtime_pinned = ?7
         WHERE ino = ?8", p![
        a.mode,
        a.uid,
        a.gid,
        a.atime_ns,
        a.mtime_ns,
        a.ctime_ns,
        mtime_pinned,
        ino as i64
    ])?;
    insert_event(
        tx, "setattr", path, None, None, None, None, None, None, caller, a.ctime_ns,
    )?;
    crate::store::sql::checkpoint::log_node(tx, ino, None, a.ctime_ns)?;
    Ok(())
}

/// The rows of a refusal ([`crate::store::Store::reject`]), inside the caller's
/// transaction: the refused content (kept: SPEC §6, nothing is lost) or its size and
/// digest, and its event.
pub(crate) fn reject_in(
    tx: &dyn Conn,
    path: &str,
    errno: i32,
    reason: &str,
    caller: &Proc,
    content: crate::store::Refused<'_>,
) -> Result<()> {
    use crate::store::Refused;
    if let Refused::Digest(size, blake3) = content {
        tx.exec(
            "INSERT INTO events(time_ns, op, path, errno, reason, size, blake3, writer, process, pid)
             VALUES (?1, 'rejected', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            p![
                now_ns(),
                path,
                errno,
                reason,
                size as i64,
                blake3,
                &caller.writer,
                caller.id,
                caller.pid
            ],
        )?;
        return Ok(());
    }
    // The refused content is kept (SPEC §6: nothing is lost, not even a refused write).
    let stored = match content {
        Refused::Content(bytes) => {
            let stream = new_stream(tx)?;
            let hash = write_bytes(tx, stream, bytes)?;
            Some((
                ContentRef {
                    stream,
                    len: bytes.len() as u64,
                },
                hash,
            ))
        }
        Refused::Nothing | Refused::Digest(..) => None,
    };
    insert_event(
        tx,
        "rejected",
        path,
        None,
        None,
        None,
        Some(errno),
        Some(reason),
        stored.as_ref().map(|(c, h)| (*c, h.as_str())),
        caller,
        now_ns(),
    )?;
    Ok(())
}

/// Stores the rules text as a new row of `rules` when it differs from the last one
/// ([`crate::store::Store::record_rules`]).
pub(crate) fn record_rules_in(tx: &dyn Conn, text: &str, caller: &Proc) -> Result<()> {
    let hash = blake3::hash(text.as_bytes()).to_hex().to_string();
    let last: Option<String> =
        tx.opt_value("SELECT blake3 FROM rules ORDER BY id DESC LIMIT 1", p![])?;
    if last.as_deref() != Some(hash.as_str()) {
        tx.exec(
            "INSERT INTO rules(version, text, blake3, writer, process, time_ns)
             VALUES ((SELECT COUNT(*) + 1 FROM rules), ?1, ?2, ?3, ?4, ?5)",
            p![text, &hash, &caller.writer, caller.id, now_ns()],
        )?;
    }
    Ok(())
}

/// Keeps `caller`'s read of version `version_id` (number `version`) of lineage `file_id`
/// at `time_ns` as the lineage's last read ([`crate::store::Store::note_read`]).
pub(crate) fn note_read_in(
    tx: &dyn Conn,
    file_id: i64,
    version_id: i64,
    version: i64,
    caller: &Proc,
    time_ns: i64,
) -> Result<()> {
    tx.exec(
        "INSERT INTO reads(file_id, version_id, version, writer, process, time_ns)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT(file_id) DO UPDATE SET version_id = excluded.version_id,
             version = excluded.version, writer = excluded.writer,
             process = excluded.process, time_ns = excluded.time_ns",
        p![
            file_id,
            version_id,
            version,
            &caller.writer,
            caller.id,
            time_ns
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_row_keeps_at_most_argv_record_max_bytes_of_arguments() {
        let short = vec!["python3".to_string(), "-c".into(), "print(1)".into()];
        assert_eq!(argv_kept(&short).as_ref(), short.as_slice());
        let long = vec![
            "python3".to_string(),
            "-c".into(),
            format!(
                "{}\u{e9}{}",
                "x".repeat(ARGV_RECORD_MAX - 10),
                "y".repeat(100_000)
            ),
            "a".into(),
            "bc".into(),
        ];
        let kept = argv_kept(&long);
        assert_eq!(kept.len(), 4, "{kept:?}");
        assert_eq!(&kept[..2], &long[..2]);
        // Cut before the two-byte character that crosses the limit (each argument counts
        // its quotes and comma).
        let cut = format!(
            "{}... ({} bytes)",
            "x".repeat(ARGV_RECORD_MAX - 18),
            long[2].len()
        );
        assert!(kept[2] == cut, "{} bytes", kept[2].len());
        assert_eq!(kept[3], "... 2 more arguments, 3 bytes");
        let json = serde_json::to_string(&*kept).unwrap();
        assert!(json.len() <= ARGV_RECORD_MAX + 64, "{}", json.len());
        // Escapes count as stored: 4,000 control bytes are 24,000 bytes of JSON.
        let control = vec!["\u{1}".repeat(4000)];
        let json = serde_json::to_string(&*argv_kept(&control)).unwrap();
        assert!(json.len() <= ARGV_RECORD_MAX + 64, "{}", json.len());
    }

    #[test]
    fn processes_are_told_apart_by_every_fact_but_the_request_pid() {
        let base = Caller {
            writer: "w".into(),
            pid: 7,
            tgid: 7,
            start_time: 1,
            uid: 1,
            gid: 1,
            exe: "/bin/x".into(),
            argv: vec!["x".into()],
            ..Default::default()
        };
        let key = process_key(&base);
        let other_thread = Caller {
            pid: 8,
            ..base.clone()
        };
        assert!(same_facts(&key, &other_thread));
        assert_eq!(facts_hash(&base), facts_hash(&other_thread));
        let changes: Vec<fn(&mut Caller)> = vec![
            |c| c.writer = "v".into(),
            |c| c.tgid = 9,
            |c| c.start_time = 2,
            |c| c.uid = 2,
            |c| c.gid = 2,
            |c| c.exe = "/bin/y".into(),
            |c| c.argv.push("-v".into()),
            |c| c.env_writer = Some("w".into()),
            |c| c.step = Some(3),
            |c| c.transport = Some("mcp".into()),
            |c| c.client = Some("cli".into()),
            |c| c.client_version = Some("1".into()),
            |c| c.exe_file = Some(crate::identity::ExeFile::default()),
            |c| c.same_ns = true,
            |c| c.user_ns = 4,
            |c| c.groups = vec![5],
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut c = base.clone();
            change(&mut c);
            assert!(
                !same_facts(&key, &c),
                "fact {i} changed, yet the same process"
            );
        }
    }
}
