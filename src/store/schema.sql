-- scratchfs store schema, version 1. Documented in docs/schema.md.
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
-- Inodes. A live node has a parent (the root has ino 1 and no parent); an unlinked node
-- keeps its row with parent NULL and unlinked_ns set.
CREATE TABLE IF NOT EXISTS nodes (
    ino         INTEGER PRIMARY KEY,
    parent      INTEGER,
    name        BLOB NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('file', 'dir')),
    mode        INTEGER NOT NULL,
    uid         INTEGER NOT NULL,
    gid         INTEGER NOT NULL,
    atime_ns    INTEGER NOT NULL,
    mtime_ns    INTEGER NOT NULL,
    ctime_ns    INTEGER NOT NULL,
    file_id     INTEGER,
    unlinked_ns INTEGER,
    -- 1 when mtime_ns was set explicitly (utimensat) after the last commit; otherwise a
    -- file's mtime and ctime are the later of these columns and its current version's
    -- time_ns (commits do not rewrite the node row).
    mtime_pinned INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS nodes_by_name ON nodes(parent, name) WHERE parent IS NOT NULL;
-- A file's history: the lineage its versions belong to. It follows the file through
-- renames; a rename over an existing file continues the target's lineage. The current
-- version is the one with the highest number (view `heads`).
CREATE TABLE IF NOT EXISTS files (
    id          INTEGER PRIMARY KEY,
    path        TEXT NOT NULL,
    deleted_ns  INTEGER,
    -- Set when the file was renamed over another one, whose history continues it.
    merged_into INTEGER
);
-- Content: blobs are deduplicated by blake3; a stream is an append-only sequence of
-- extents; a version's content is the first `size` bytes of its stream. Stream 0 is the
-- empty stream and never grows. An extent either points into a blob or, for a piece
-- under 4 KiB, holds its bytes inline (`blob` NULL, `data`).
CREATE TABLE IF NOT EXISTS blobs (
    id    INTEGER PRIMARY KEY,
    hash  BLOB NOT NULL UNIQUE,
    size  INTEGER NOT NULL,
    data  BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS streams (
    id INTEGER PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS extents (
    stream   INTEGER NOT NULL,
    offset   INTEGER NOT NULL,
    len      INTEGER NOT NULL,
    blob     INTEGER,
    blob_off INTEGER NOT NULL,
    data     BLOB,
    PRIMARY KEY (stream, offset)
) WITHOUT ROWID;
-- The processes that wrote: one row per distinct set of caller facts (SPEC §5).
-- transport: `mcp` for a change made through the MCP server (NULL: the mount or the
-- CLI); client, client_version: the MCP client's, from its handshake (added for the MCP
-- server: older databases get the three columns, NULL, when opened; no comment inside the
-- column list, which SQLite's ALTER TABLE rewrites). user_ns: the inode number of the
-- process's user namespace (/proc/PID/ns/user); own_ns: 1 when the process ran in the
-- daemon's own mount and user namespaces, 0 in others (a sandbox's), NULL unknown (issue
-- 31; NULL in the rows of a database from before).
CREATE TABLE IF NOT EXISTS processes (
    id         INTEGER PRIMARY KEY,
    writer     TEXT NOT NULL,
    tgid       INTEGER NOT NULL,
    start_time INTEGER NOT NULL,
    uid        INTEGER NOT NULL,
    gid        INTEGER NOT NULL,
    exe        TEXT NOT NULL,
    argv       TEXT NOT NULL,
    env_writer TEXT,
    step       INTEGER,
    transport  TEXT,
    client     TEXT,
    client_version TEXT,
    user_ns    INTEGER,
    own_ns     INTEGER
);
CREATE INDEX IF NOT EXISTS files_by_path ON files(path);
-- The inodes that carried a lineage (the views of its versions take their owner).
CREATE INDEX IF NOT EXISTS nodes_by_file ON nodes(file_id) WHERE file_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS processes_by_tgid ON processes(tgid, start_time);
-- One row per committed version; its provenance is its process row (view version_log).
CREATE TABLE IF NOT EXISTS versions (
    id         INTEGER PRIMARY KEY,
    file_id    INTEGER NOT NULL,
    version    INTEGER NOT NULL,
    path       TEXT NOT NULL,
    op         TEXT NOT NULL,
    size       INTEGER NOT NULL,
    blake3     TEXT NOT NULL,
    stream     INTEGER NOT NULL,
    writer     TEXT NOT NULL,
    process    INTEGER NOT NULL REFERENCES processes(id),
    pid        INTEGER NOT NULL,
    time_ns    INTEGER NOT NULL,
    -- The inode that carried the version when it was committed: its owner and mode guard
    -- the version's bytes, whatever carries the lineage later (issue 31). NULL in rows of
    -- a database made before it (added when such a database is opened).
    ino        INTEGER,
    -- A version that brings back earlier bytes (op `rollback`, `restore`; issue 35): the
    -- version whose bytes it brought back, which `why` and `ground` follow to the writer
    -- that made them. NULL otherwise, and in rows of a database made before it (added
    -- when such a database is opened).
    restored_from INTEGER,
    UNIQUE (file_id, version)
);
-- The current version of every file.
CREATE VIEW IF NOT EXISTS heads AS
    SELECT f.id AS file_id, f.path AS current_path, f.deleted_ns, v.*
    FROM files f JOIN versions v ON v.file_id = f.id
    WHERE v.version = (SELECT MAX(version) FROM versions WHERE file_id = f.id);
-- Everything that is not a version: namespace operations, attribute changes and refusals.
-- A refused commit keeps its content in (stream, size, blake3).
CREATE TABLE IF NOT EXISTS events (
    id         INTEGER PRIMARY KEY,
    time_ns    INTEGER NOT NULL,
    op         TEXT NOT NULL,
    path       TEXT NOT NULL,
    new_path   TEXT,
    file_id    INTEGER,
    version_id INTEGER,
    errno      INTEGER,
    reason     TEXT,
    stream     INTEGER,
    size       INTEGER,
    blake3     TEXT,
    writer     TEXT NOT NULL,
    process    INTEGER NOT NULL REFERENCES processes(id),
    pid        INTEGER NOT NULL
);
-- Every version with its full provenance.
CREATE VIEW IF NOT EXISTS version_log AS
    SELECT v.id, v.file_id, v.version, v.path, v.op, v.size, v.blake3, v.stream, v.writer,
           v.pid, p.tgid, p.start_time, p.uid, p.gid, p.exe, p.argv, p.env_writer, p.step,
           v.time_ns, v.process, p.transport, p.client, p.client_version, p.user_ns,
           p.own_ns
    FROM versions v JOIN processes p ON p.id = v.process;
-- Every event with its full provenance.
CREATE VIEW IF NOT EXISTS event_log AS
    SELECT e.id, e.time_ns, e.op, e.path, e.new_path, e.file_id, e.version_id, e.errno,
           e.reason, e.stream, e.size, e.blake3, e.writer, e.pid, p.tgid, p.start_time, p.uid,
           p.gid, p.exe, p.argv, p.env_writer, p.step, e.process, p.transport, p.client,
           p.client_version, p.user_ns, p.own_ns
    FROM events e JOIN processes p ON p.id = e.process;
CREATE INDEX IF NOT EXISTS events_rejected ON events(id) WHERE op = 'rejected';
-- A lineage's events: its deletions and its creates (a `create` event's version_id is the
-- lineage's last version before the file that continued it, see docs/schema.md).
CREATE INDEX IF NOT EXISTS events_by_file ON events(file_id, op) WHERE file_id IS NOT NULL;
-- Content one can get back: unlinked files and commits that shrank a file by over half.
CREATE VIEW IF NOT EXISTS events_restorable AS
    SELECT id FROM events WHERE op IN ('unlink', 'shrink');
-- Per-key provenance of JSON files (paths ending in .json, up to 1 MiB): the version
-- that last changed each top-level key's value.
CREATE TABLE IF NOT EXISTS fields (
    file_id    INTEGER NOT NULL,
    key        TEXT NOT NULL,
    version_id INTEGER NOT NULL,
    PRIMARY KEY (file_id, key)
) WITHOUT ROWID;
-- Read provenance (issue 13, docs/SEMANTICS.md "Lineage"): the versions the writing
-- process had read before it committed a version (`via` 'read', with the time of the
-- read), and for a version made by a rename the version it was renamed from (`via`
-- 'rename'). At most 64 reads per version. `input_id` may name a version gc forgot.
CREATE TABLE IF NOT EXISTS inputs (
    version_id INTEGER NOT NULL,
    input_id   INTEGER NOT NULL,
    via        TEXT NOT NULL CHECK (via IN ('read', 'rename')),
    read_ns    INTEGER NOT NULL,
    PRIMARY KEY (version_id, input_id)
) WITHOUT ROWID;
-- The last read of each lineage through the mount (MANIFEST's `read` column): which
-- version, by which writer, when. Written when the version or the reader changes, or a
-- minute after the last row (docs/SEMANTICS.md).
CREATE TABLE IF NOT EXISTS reads (
    file_id    INTEGER PRIMARY KEY,
    version_id INTEGER NOT NULL,
    version    INTEGER NOT NULL,
    writer     TEXT NOT NULL,
    process    INTEGER NOT NULL REFERENCES processes(id),
    time_ns    INTEGER NOT NULL
);
-- The writer rules mounts were started with: a new version whenever the text changes.
CREATE TABLE IF NOT EXISTS rules (
    id      INTEGER PRIMARY KEY,
    version INTEGER NOT NULL,
    text    TEXT NOT NULL,
    blake3  TEXT NOT NULL,
    writer  TEXT NOT NULL,
    process INTEGER NOT NULL REFERENCES processes(id),
    time_ns INTEGER NOT NULL
);
-- The namespace through time (issue 14, docs/schema.md "Checkpoints"): one row per state
-- of a node, appended (never updated) by every create, mkdir, unlink, rmdir, rename,
-- chmod, chown, utimensat and rollback, in the change's own transaction. A node's state at
-- a point is its row with the highest id at or below the point's `tree_seq`; `parent` is
-- 0 for the root and NULL for an unlinked node. A file's content then is the last version
-- of lineage `file_id` above `floor` (versions at or below it belong to files that were
-- on the lineage before this one) and at or below the point's `version_seq`.
CREATE TABLE IF NOT EXISTS tree_log (
    id       INTEGER PRIMARY KEY,
    ino      INTEGER NOT NULL,
    parent   INTEGER,
    name     BLOB NOT NULL,
    kind     TEXT NOT NULL CHECK (kind IN ('file', 'dir')),
    mode     INTEGER NOT NULL,
    uid      INTEGER NOT NULL,
    gid      INTEGER NOT NULL,
    file_id  INTEGER,
    floor    INTEGER NOT NULL DEFAULT 0,
    time_ns  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS tree_log_by_ino ON tree_log(ino, id);
-- Named points in history (issue 14): the last `tree_log` row, the last version and the
-- last event (its own `checkpoint` event) when it was taken. A pointer, never a copy. `auto` 1: the safety checkpoint a rollback took
-- first. `dropped_ns`: released by `gc --drop-checkpoint` (gc may then forget what only it
-- kept); a dropped checkpoint's name may be taken again.
CREATE TABLE IF NOT EXISTS checkpoints (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    tree_seq    INTEGER NOT NULL,
    version_seq INTEGER NOT NULL,
    event_seq   INTEGER NOT NULL,
    time_ns     INTEGER NOT NULL,
    writer      TEXT NOT NULL,
    process     INTEGER NOT NULL REFERENCES processes(id),
    note        TEXT,
    auto        INTEGER NOT NULL DEFAULT 0,
    dropped_ns  INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS checkpoints_by_name ON checkpoints(name) WHERE dropped_ns IS NULL;
-- The versions gc forgot (issue 14): which lineage, which number, when it was made. The
-- tree at a point whose file's version then is among them cannot be shown: its content
-- is gone (the views and `mount --at` say so, a fork refuses).
-- event_id (issue 36): the event of the run that forgot it (op `gc` or `policy`); NULL
-- in rows of a database made before it (added when such a database is opened).
CREATE TABLE IF NOT EXISTS forgotten (
    version_id INTEGER PRIMARY KEY,
    file_id    INTEGER NOT NULL,
    version    INTEGER NOT NULL,
    time_ns    INTEGER NOT NULL,
    event_id   INTEGER
);
CREATE INDEX IF NOT EXISTS forgotten_by_file ON forgotten(file_id, version_id);
-- What the policy pass (issue 36) forgets one version at a time, found without a scan:
-- the versions and refusals that share a stream, the extents that share a blob.
CREATE INDEX IF NOT EXISTS versions_by_stream ON versions(stream);
CREATE INDEX IF NOT EXISTS events_by_stream ON events(stream) WHERE stream IS NOT NULL;
CREATE INDEX IF NOT EXISTS extents_by_blob ON extents(blob) WHERE blob IS NOT NULL;
-- Where a version brought from another scratchpad came from (`scratchfs adopt`, issue
-- 14): that database's path and id (`meta.scratchpad_id`), and the version there (its
-- `versions.id`, path, number and writer).
CREATE TABLE IF NOT EXISTS origins (
    version_id        INTEGER PRIMARY KEY,
    source            TEXT NOT NULL,
    source_id         TEXT,
    source_version_id INTEGER NOT NULL,
    path              TEXT NOT NULL,
    version           INTEGER NOT NULL,
    writer            TEXT NOT NULL
);
