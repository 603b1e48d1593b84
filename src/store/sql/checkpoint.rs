//! The namespace log, checkpoints and rollback in SQLite (issue 14; docs/schema.md
//! "Checkpoints"). `tree_log` gets a row in the transaction of every change of a node's
//! place, owner, mode or lineage ([`log_node`]); a checkpoint is one row naming the last
//! `tree_log` row and the last version; the tree at a point is computed from both
//! ([`snapshot_rows`]); a rollback makes the live tree that tree again in one transaction
//! ([`rollback_in`]).

use std::collections::{HashMap, HashSet};

use super::now_ns;
use crate::checkpoint::{Checkpoint, Point, RollbackReport, SnapNode, SnapVersion, Snapshot};
use crate::p;
use crate::store::error::{ErrorKind, Result, StoreError};
use crate::store::sql::write::*;
use crate::store::sql::{Conn, ConnExt, Row};
use crate::store::{ContentRef, Kind};

/// Appends the current state of node `ino` (its `nodes` row) to `tree_log`. `floor`: the
/// lineage's highest version id before the node joined it (a create, a rename onto
/// another lineage, a rollback's version); `None` keeps the node's previous floor.
pub(crate) fn log_node(tx: &dyn Conn, ino: u64, floor: Option<i64>, time_ns: i64) -> Result<()> {
    tx.exec(
        "INSERT INTO tree_log(ino, parent, name, kind, mode, uid, gid, file_id, floor, time_ns)
         SELECT n.ino, CASE WHEN n.ino = 1 THEN 0 ELSE n.parent END, n.name, n.kind, n.mode,
                n.uid, n.gid, n.file_id,
                COALESCE(?2, (SELECT t.floor FROM tree_log t WHERE t.ino = n.ino
                              ORDER BY t.id DESC LIMIT 1), 0),
                ?3
         FROM nodes n WHERE n.ino = ?1",
        p![ino as i64, floor, time_ns],
    )?;
    Ok(())
}

/// Gives a database without namespace history (new, or made before issue 14) a
/// `tree_log` row for every live node, and `meta.tree_log_since` (ns): the tree before
/// that time is not known.
pub(crate) fn seed_tree_log(conn: &dyn Conn) -> Result<()> {
    let any: bool = conn.value("SELECT EXISTS (SELECT 1 FROM tree_log)", p![])?;
    if any {
        return Ok(());
    }
    let now = now_ns();
    conn.transaction(|conn| {
        conn.exec("INSERT INTO tree_log(ino, parent, name, kind, mode, uid, gid, file_id, floor, time_ns)
             SELECT n.ino, CASE WHEN n.ino = 1 THEN 0 ELSE n.parent END, n.name, n.kind, n.mode,
                    n.uid, n.gid, n.file_id,
                    COALESCE((SELECT MAX(version_id) FROM events
                              WHERE file_id = n.file_id AND op = 'create'), 0),
                    ?1
             FROM nodes n WHERE n.parent IS NOT NULL OR n.ino = 1
             ORDER BY n.ino", p![now])?;
        conn.exec("INSERT INTO meta(key, value) VALUES ('tree_log_since', ?1) ON CONFLICT(key) DO UPDATE SET value = excluded.value", p![&now.to_string()])?;
        Ok(())
    })
}

/// The point "now": the last `tree_log` row and the last version.
pub(crate) fn point_now(tx: &dyn Conn, time_ns: i64) -> Result<Point> {
    let (tree_seq, version_seq, event_seq) = tx.one(
        "SELECT (SELECT COALESCE(MAX(id), 0) FROM tree_log),
                (SELECT COALESCE(MAX(id), 0) FROM versions),
                (SELECT COALESCE(MAX(id), 0) FROM events)",
        p![],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    Ok(Point {
        tree_seq,
        version_seq,
        event_seq,
        time_ns,
    })
}

/// The point at time `time_ns`: the last `tree_log` row and the last version made at or
/// before it (gc's forgotten versions included). `ENOENT` for a time before the namespace history begins
/// (`meta.tree_log_since`: the database's creation, or its first open by a scratchfs that
/// keeps it).
pub(crate) fn point_at_time(conn: &dyn Conn, time_ns: i64) -> Result<Point> {
    let since: Option<i64> = conn
        .opt_value::<String>("SELECT value FROM meta WHERE key = 'tree_log_since'", p![])?
        .and_then(|v| v.parse().ok());
    let tree_seq: Option<i64> = conn.value(
        "SELECT MAX(id) FROM tree_log WHERE time_ns <= ?1",
        p![time_ns],
    )?;
    let Some(tree_seq) = tree_seq.filter(|_| since.is_none_or(|s| time_ns >= s)) else {
        return Err(StoreError::new(
            ErrorKind::NotFound,
            format!(
                "no tree is known at {}: the namespace history begins at {}",
                crate::cli::time::utc_exact(time_ns),
                since.map_or("its first row".into(), crate::cli::time::utc_exact)
            ),
        ));
    };
    // The versions gc forgot count too: a point past them knows their file had a
    // version it can no longer show (`SnapNode::forgotten`), never an older one instead.
    let (version_seq, event_seq): (i64, i64) = conn.one(
        "SELECT (SELECT COALESCE(MAX(id), 0) FROM
                   (SELECT id FROM versions WHERE time_ns <= ?1
                    UNION ALL SELECT version_id FROM forgotten WHERE time_ns <= ?1) AS made),
                (SELECT COALESCE(MAX(id), 0) FROM events WHERE time_ns <= ?1)",
        p![time_ns],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(Point {
        tree_seq,
        version_seq,
        event_seq,
        time_ns: time_ns.min(now_ns()),
    })
}

/// The nodes live at `point`, each file with the version that was its content then.
pub(crate) fn snapshot_rows(conn: &dyn Conn, point: Point) -> Result<Vec<SnapNode>> {
    let rows = conn.all(
        "SELECT t.ino, t.parent, t.name, t.kind, t.mode, t.uid, t.gid, t.file_id, t.floor,
                t.time_ns, v.id, v.version, v.stream, v.size, v.blake3, v.time_ns, v.writer,
                p.step,
                EXISTS (SELECT 1 FROM forgotten f WHERE f.file_id = t.file_id
                        AND f.version_id > COALESCE(v.id, t.floor) AND f.version_id <= ?2)
         FROM tree_log t
         LEFT JOIN versions v ON v.id = (
             SELECT w.id FROM versions w
             WHERE w.file_id = t.file_id AND w.id > t.floor AND w.id <= ?2
             ORDER BY w.version DESC LIMIT 1)
         LEFT JOIN processes p ON p.id = v.process
         WHERE t.id IN (SELECT MAX(id) FROM tree_log WHERE id <= ?1 GROUP BY ino)
           AND t.parent IS NOT NULL",
        p![point.tree_seq, point.version_seq],
        |r| {
            let kind: String = r.get(3)?;
            let kind = if kind == "dir" { Kind::Dir } else { Kind::File };
            let version = match r.get::<Option<i64>>(10)? {
                Some(id) if kind == Kind::File => Some(SnapVersion {
                    id,
                    number: r.get(11)?,
                    content: ContentRef {
                        stream: r.get(12)?,
                        len: r.get::<i64>(13)? as u64,
                    },
                    blake3: r.get(14)?,
                    time_ns: r.get(15)?,
                    writer: r.get(16)?,
                    step: r.get(17)?,
                }),
                _ => None,
            };
            Ok(SnapNode {
                ino: r.get::<i64>(0)? as u64,
                parent: r.get::<i64>(1)? as u64,
                name: r.get(2)?,
                kind,
                mode: r.get(4)?,
                uid: r.get(5)?,
                gid: r.get(6)?,
                file_id: r.get(7)?,
                floor: r.get(8)?,
                changed_ns: r.get(9)?,
                version,
                forgotten: kind == Kind::File && r.get::<bool>(18)?,
            })
        },
    )?;
    let mut out = Vec::new();
    for r in rows {
        out.push(r);
    }
    Ok(out)
}

fn checkpoint_from_row(r: &dyn Row) -> Result<Checkpoint> {
    Ok(Checkpoint {
        id: r.get(0)?,
        name: r.get(1)?,
        point: Point {
            tree_seq: r.get(2)?,
            version_seq: r.get(3)?,
            event_seq: r.get(9)?,
            time_ns: r.get(4)?,
        },
        writer: r.get(5)?,
        uid: r.get(6)?,
        note: r.get(7)?,
        auto: r.get::<i64>(8)? != 0,
    })
}

const CHECKPOINT_COLUMNS: &str = "c.id, c.name, c.tree_seq, c.version_seq, c.time_ns, c.writer,
     COALESCE(p.uid, 0), c.note, c.auto, c.event_seq";

/// The checkpoints not dropped, oldest first (also for the commands, on a read-only
/// connection).
pub fn list(conn: &dyn Conn) -> Result<Vec<Checkpoint>> {
    let rows = conn.all(
        &format!(
        "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints c LEFT JOIN processes p ON p.id = c.process
         WHERE c.dropped_ns IS NULL ORDER BY c.id"
    ),
        p![],
        checkpoint_from_row,
    )?;
    let mut out = Vec::new();
    for r in rows {
        out.push(r);
    }
    Ok(out)
}

/// The checkpoint named `name` (not dropped); `ENOENT` when there is none.
pub(crate) fn by_name(conn: &dyn Conn, name: &str) -> Result<Checkpoint> {
    conn.opt(
        &format!(
        "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints c LEFT JOIN processes p ON p.id = c.process
         WHERE c.dropped_ns IS NULL AND c.name = ?1"
    ),
        p![name],
        checkpoint_from_row,
    )?
    .ok_or_else(|| {
        StoreError::new(
            ErrorKind::NotFound,
            format!(
                "no checkpoint named {} (scratchfs checkpoints lists them)",
                crate::views::quote_path(name)
            ),
        )
    })
}

/// Records a checkpoint of the state now (inside `tx`) and its event (op `checkpoint`).
/// `EEXIST` when a checkpoint has the name already. The name was checked
/// ([`crate::checkpoint::check_name`]).
pub(crate) fn take(
    tx: &dyn Conn,
    name: &str,
    note: Option<&str>,
    auto: bool,
    caller: &Proc,
    time_ns: i64,
) -> Result<Checkpoint> {
    let taken: bool = tx.value(
        "SELECT EXISTS (SELECT 1 FROM checkpoints WHERE name = ?1 AND dropped_ns IS NULL)",
        p![name],
    )?;
    if taken {
        return Err(StoreError::new(
            ErrorKind::Exists,
            format!(
                "checkpoint {} exists already (names are unique; gc --drop-checkpoint releases one)",
                crate::views::quote_path(name)
            ),
        ));
    }
    // A note is free text an agent may write: stored with its secrets redacted, as a
    // command line is (docs/rules.md, "No secret at rest").
    let redacted = note.map(|n| {
        String::from_utf8_lossy(&crate::rules::enforce::redact_secrets(n.as_bytes())).into_owned()
    });
    let note = redacted.as_deref();
    let reason = match note {
        Some(n) => format!("checkpoint {name}: {n}"),
        None => format!("checkpoint {name}"),
    };
    insert_event(
        tx,
        "checkpoint",
        "",
        None,
        None,
        None,
        None,
        Some(&reason),
        None,
        caller,
        time_ns,
    )?;
    // Its own event is the last it keeps.
    let point = point_now(tx, time_ns)?;
    let id = tx.insert(
        "INSERT INTO checkpoints(name, tree_seq, version_seq, event_seq, time_ns, writer, process,
             note, auto)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING id",
        p![
            name,
            point.tree_seq,
            point.version_seq,
            point.event_seq,
            time_ns,
            &caller.writer,
            caller.id,
            note,
            auto
        ],
    )?;
    let uid: u32 = tx.value("SELECT uid FROM processes WHERE id = ?1", p![caller.id])?;
    Ok(Checkpoint {
        id,
        name: name.to_string(),
        point,
        writer: caller.writer.clone(),
        uid,
        note: note.map(str::to_string),
        auto,
    })
}

/// Releases checkpoint `name` (gc may then forget what only it kept) and records it
/// (op `drop-checkpoint`). `ENOENT` when there is none.
pub(crate) fn drop_named(
    tx: &dyn Conn,
    name: &str,
    caller: &Proc,
    time_ns: i64,
) -> Result<Checkpoint> {
    let cp = by_name(tx, name)?;
    tx.exec(
        "UPDATE checkpoints SET dropped_ns = ?1 WHERE id = ?2",
        p![time_ns, cp.id],
    )?;
    insert_event(
        tx,
        "drop-checkpoint",
        "",
        None,
        None,
        None,
        None,
        Some(&format!("checkpoint {name} released")),
        None,
        caller,
        time_ns,
    )?;
    Ok(cp)
}

/// Adds to `temp.gc_keep` the versions the checkpoints not dropped need: each file's
/// content at each of them.
pub(crate) fn gc_keep_checkpoints(tx: &dyn Conn) -> Result<()> {
    let points: Vec<(i64, i64)> = tx.all(
        "SELECT tree_seq, version_seq FROM checkpoints WHERE dropped_ns IS NULL",
        p![],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let keep = "INSERT INTO gc_keep
         SELECT kept FROM (
             SELECT (SELECT w.id FROM versions w
                     WHERE w.file_id = t.file_id AND w.id > t.floor AND w.id <= ?2
                     ORDER BY w.version DESC LIMIT 1) AS kept
             FROM tree_log t
             WHERE t.id IN (SELECT MAX(id) FROM tree_log WHERE id <= ?1 GROUP BY ino)
               AND t.parent IS NOT NULL AND t.file_id IS NOT NULL) at_point
         WHERE kept IS NOT NULL
         ON CONFLICT DO NOTHING";
    for (tree_seq, version_seq) in points {
        tx.exec(keep, p![tree_seq, version_seq])?;
    }
    Ok(())
}

/// A live node as the rollback sees it.
struct Live {
    parent: u64,
    name: Vec<u8>,
    mode: u32,
    uid: u32,
    gid: u32,
    file_id: Option<i64>,
}

fn live_nodes(tx: &dyn Conn) -> Result<HashMap<u64, Live>> {
    let rows = tx.all(
        "SELECT ino, COALESCE(parent, 0), name, kind, mode, uid, gid, file_id FROM nodes
         WHERE parent IS NOT NULL OR ino = 1",
        p![],
        |r| {
            Ok((
                r.get::<i64>(0)? as u64,
                Live {
                    parent: r.get::<i64>(1)? as u64,
                    name: r.get(2)?,
                    mode: r.get(4)?,
                    uid: r.get(5)?,
                    gid: r.get(6)?,
                    file_id: r.get(7)?,
                },
            ))
        },
    )?;
    let mut out = HashMap::new();
    for r in rows {
        let (ino, n) = r;
        out.insert(ino, n);
    }
    Ok(out)
}

/// The path of live node `ino` from the `nodes` rows.
fn live_path(nodes: &HashMap<u64, Live>, ino: u64) -> String {
    let mut parts = Vec::new();
    let mut at = ino;
    while at != 1 {
        let Some(n) = nodes.get(&at) else { break };
        parts.push(crate::store::paths::encode(&n.name).into_owned());
        at = n.parent;
    }
    parts.reverse();
    parts.join("/")
}

/// Makes the live tree the tree at checkpoint `target` again, inside `tx`, after taking
/// the safety checkpoint `safety` of the state now (both by `caller` at `time_ns`):
/// - nodes created since are unlinked (events `unlink`/`rmdir`: their content stays in
///   `.archive`, restorable), deepest first;
/// - nodes deleted since come back with their inode, place, owner and mode;
/// - nodes renamed since move back; mode and owner changed since are set back;
/// - every file whose content differs gets a version with op `rollback` sharing the old
///   version's content (no bytes copied), on the lineage it had then;
/// - an event (op `rollback`) says what was done.
///
/// The caller commits `tx`: the tree is the old one or the new one, never a mix.
pub(crate) fn rollback_in(
    tx: &dyn Conn,
    target: &Checkpoint,
    safety: &str,
    caller: &Proc,
    t: i64,
) -> Result<RollbackReport> {
    let safe = take(
        tx,
        safety,
        Some(&format!("before rollback to {}", target.name)),
        true,
        caller,
        t,
    )?;
    let snap = Snapshot::from_nodes(snapshot_rows(tx, target.point)?);
    if let Some(p) = snap.forgotten().first() {
        // gc keeps what a checkpoint needs; a database that lost it anyway is refused.
        return Err(StoreError::new(
            ErrorKind::NoData,
            format!(
                "rollback to {}: {p}: its version then was forgotten by gc",
                target.name
            ),
        ));
    }
    let live = live_nodes(tx)?;
    let mut report = RollbackReport {
        checkpoint: target.name.clone(),
        safety: safe.name.clone(),
        ..Default::default()
    };
    let mut touched: Vec<(u64, Option<i64>)> = Vec::new();
    // 1. What was created since goes, deepest first (paths from the live tree).
    let mut gone: Vec<(usize, u64)> = live
        .keys()
        .filter(|ino| **ino != 1 && snap.get(**ino).is_none())
        .map(|&ino| (live_path(&live, ino).matches('/').count(), ino))
        .collect();
    gone.sort_by(|a, b| b.cmp(a));
    for &(_, ino) in &gone {
        let n = &live[&ino];
        let path = live_path(&live, ino);
        unlink_in(tx, ino, n.file_id, &path, caller, t)?;
        touched.push((ino, None));
        report.removed += 1;
    }
    // 2. Nodes that move (or come back) leave their place first, so that no name is
    //    taken twice in between (a swap of two names).
    let placed: Vec<(String, &SnapNode)> = snap.walk();
    for (_, n) in &placed {
        if let Some(l) = live.get(&n.ino)
            && (l.parent != n.parent || l.name != n.name)
        {
            tx.exec(
                "UPDATE nodes SET parent = NULL WHERE ino = ?1",
                p![n.ino as i64],
            )?;
        }
    }
    // 3. Every node of the checkpoint's tree at its place, with its owner and mode.
    for (path, n) in &placed {
        let l = live.get(&n.ino);
        let moved = l.is_some_and(|l| l.parent != n.parent || l.name != n.name);
        let attrs_changed = l.is_some_and(|l| (l.mode, l.uid, l.gid) != (n.mode, n.uid, n.gid));
        let relineaged = l.is_some_and(|l| l.file_id != n.file_id);
        if l.is_none() || moved || attrs_changed || relineaged {
            tx.exec(
                "INSERT INTO nodes(ino, parent, name, kind, mode, uid, gid, atime_ns, mtime_ns,
                     ctime_ns, file_id, unlinked_ns)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?8, ?9, NULL)
                 ON CONFLICT(ino) DO UPDATE SET parent = excluded.parent, name = excluded.name,
                     mode = excluded.mode, uid = excluded.uid, gid = excluded.gid,
                     ctime_ns = excluded.ctime_ns, file_id = excluded.file_id, unlinked_ns = NULL",
                p![
                    n.ino as i64,
                    n.parent as i64,
                    &n.name,
                    if n.kind == Kind::Dir { "dir" } else { "file" },
                    n.mode,
                    n.uid,
                    n.gid,
                    t,
                    n.file_id
                ],
            )?;
            if l.is_none() {
                report.restored += 1;
                if n.kind == Kind::Dir {
                    insert_event(
                        tx, "mkdir", path, None, None, None, None, None, None, caller, t,
                    )?;
                }
            } else if moved {
                report.moved += 1;
                insert_event(
                    tx,
                    "rename",
                    &live_path(&live, n.ino),
                    Some(path),
                    n.file_id,
                    None,
                    None,
                    Some("rollback"),
                    None,
                    caller,
                    t,
                )?;
            } else if attrs_changed {
                report.reattributed += 1;
            }
            touched.push((n.ino, None));
            if moved || l.is_none() {
                touch_dir(tx, n.parent, t)?;
            }
        }
    }
    // 4. Lineages: every file of the tree on its lineage, live again under its path; a
    //    lineage a live file held that no file of the tree holds is deleted (archived).
    let kept: HashSet<i64> = placed.iter().filter_map(|(_, n)| n.file_id).collect();
    for (path, n) in &placed {
        if let Some(fid) = n.file_id {
            tx.exec(
                "UPDATE files SET deleted_ns = NULL, merged_into = NULL, path = ?1 WHERE id = ?2",
                p![path, fid],
            )?;
        }
    }
    for (&ino, l) in &live {
        let Some(fid) = l.file_id else { continue };
        if kept.contains(&fid) || gone.iter().any(|&(_, g)| g == ino) {
            continue;
        }
        // A live file now on another lineage than at the checkpoint: the lineage it
        // leaves ends here, its content archived like a deletion's.
        tx.exec("UPDATE files SET deleted_ns = ?1 WHERE id = ?2", p![t, fid])?;
        let head = head_of(tx, fid)?.map(|v| v.id);
        insert_event(
            tx,
            "unlink",
            &live_path(&live, ino),
            None,
            Some(fid),
            head,
            None,
            Some("rollback"),
            None,
            caller,
            t,
        )?;
    }
    // 5. Content: a version with op `rollback` wherever the file's content now is not the
    //    checkpoint's (a file brought back always gets one: its lineage's head may be a
    //    later file's).
    crate::failpoint::hit("rollback");
    for (path, n) in &placed {
        let Some(fid) = n.file_id else { continue };
        let l = live.get(&n.ino);
        let target_hash = n.blake3();
        let same = match l {
            Some(l) if l.file_id == Some(fid) => {
                let now = live_head(tx, fid)?.0;
                let hash: Option<String> = match &now {
                    Some(v) => {
                        tx.opt_value("SELECT blake3 FROM versions WHERE id = ?1", p![v.id])?
                    }
                    None => Some(blake3::hash(b"").to_hex().to_string()),
                };
                hash.as_deref() == Some(target_hash.as_str())
            }
            _ => false,
        };
        if same {
            continue;
        }
        let before = head_of(tx, fid)?;
        let old_content = live_head(tx, fid)?.0.map(|v| v.content);
        let content = n.content();
        let v = insert_version(
            tx,
            fid,
            path,
            "rollback",
            content,
            &target_hash,
            caller,
            t,
            n.ino,
        )?;
        // What `why` and `ground` follow to the writer of these bytes (issue 35); not a
        // version gc forgot, whose place an older one took.
        if let Some(sv) = n.version.as_ref().filter(|_| !n.forgotten) {
            set_restored_from(tx, v.id, sv.id)?;
        }
        update_fields(tx, fid, path, old_content, content, v.id)?;
        tx.exec(
            "UPDATE nodes SET mtime_ns = ?1, ctime_ns = ?1, mtime_pinned = 0 WHERE ino = ?2",
            p![t, n.ino as i64],
        )?;
        touched.push((n.ino, Some(before.map_or(0, |v| v.id))));
        if l.is_some() {
            report.changed += 1;
        }
    }
    // 6. The namespace log: each node touched once, with its last floor.
    let mut floors: HashMap<u64, Option<i64>> = HashMap::new();
    for (ino, floor) in touched {
        let e = floors.entry(ino).or_insert(None);
        if floor.is_some() {
            *e = floor;
        }
    }
    let mut inos: Vec<u64> = floors.keys().copied().collect();
    inos.sort_unstable();
    for ino in inos {
        let floor = match floors[&ino] {
            Some(f) => Some(f),
            // Brought back without a version of its own: its floor then.
            None => snap
                .get(ino)
                .filter(|_| !live.contains_key(&ino))
                .map(|n| n.floor),
        };
        log_node(tx, ino, floor, t)?;
    }
    insert_event(
        tx,
        "rollback",
        "",
        None,
        None,
        None,
        None,
        Some(&format!(
            "rollback to checkpoint {} by uid {}: {} changed, {} restored, {} removed, {} moved, \
             {} re-attributed; the state before is checkpoint {}",
            target.name,
            tx.value::<u32>("SELECT uid FROM processes WHERE id = ?1", p![caller.id])?,
            report.changed,
            report.restored,
            report.removed,
            report.moved,
            report.reattributed,
            safe.name
        )),
        None,
        caller,
        t,
    )?;
    Ok(report)
}

/// Makes the tree what it was at checkpoint `name` ([`crate::store::Store::rollback`])
/// inside the caller's transaction: a safety checkpoint of the state now first (its name
/// made unique), then [`rollback_in`]; the report is kept as `meta.last_rollback`.
pub(crate) fn rollback_named(
    tx: &dyn Conn,
    name: &str,
    caller: &Proc,
    time_ns: i64,
) -> Result<RollbackReport> {
    let target = by_name(tx, name)?;
    // Two rollbacks in the same millisecond: the second safety name gets a suffix.
    let base = crate::checkpoint::safety_name(name, time_ns);
    let mut safety = base.clone();
    let mut n = 1;
    while by_name(tx, &safety).is_ok() {
        n += 1;
        safety = format!("{base}-{n}");
    }
    let report = rollback_in(tx, &target, &safety, caller, time_ns)?;
    // What `scratchfs rollback` prints when the daemon ran it.
    tx.exec("INSERT INTO meta(key, value) VALUES ('last_rollback', ?1) ON CONFLICT(key) DO UPDATE SET value = excluded.value", p![&serde_json::to_string(&report).unwrap_or_default()])?;
    Ok(report)
}
