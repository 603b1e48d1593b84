//! Following an adopted version to the scratchpad it came from (issue 35 item 6,
//! docs/lineage.md "Adoption keeps the credit"): which databases may be trusted to say who
//! wrote what, and `why` and `ground` asked there.

use super::{Failure, json_paths};
use crate::store::History;

/// How many scratchpads [`follow_origins`] goes through (an adoption of an adoption...).
pub const ORIGIN_HOPS: usize = 4;

/// Whether the SQLite file at `path` (absolute) may be trusted to say who wrote what,
/// read by this process: no symbolic link on the way (the path is its own canonical
/// form); every directory on the way owned by root or by this process's user and
/// writable by no one else, or, above the file's own directory, sticky (`/tmp`: others
/// may not rename or remove what is not theirs there); the file, and its `-wal` and `-shm` beside it when they exist (SQLite
/// reads them too: a journal planted there would rewrite what the file says), regular
/// files owned by root or by this user and writable by no one else. So nobody else can
/// have put, swapped or amended what is read (attack round, session 28: a planted
/// `-wal`, a symbolic link to a device, a swap between the check and the open).
fn trusted_file(path: &str) -> Result<(), Failure> {
    use std::os::unix::fs::MetadataExt;
    let me = unsafe { libc::geteuid() };
    let ours = |uid: u32| uid == 0 || uid == me;
    let who = if me == 0 {
        "root's".to_string()
    } else {
        format!("root's or uid {me}'s")
    };
    let real = std::fs::canonicalize(path).map_err(|e| format!("{path}: {e}"))?;
    if real.as_os_str() != std::ffi::OsStr::new(path) {
        return Err(format!(
            "{path}: reached through a symbolic link (to {}): not trusted",
            real.display()
        ));
    }
    // `sticky_ok`: a sticky directory others may write is trusted above the file's own
    // (no one may rename what is not theirs there), never as the file's own (anyone may
    // create a missing `-wal` in it).
    let check = |p: &std::path::Path, file: bool, sticky_ok: bool| -> Result<(), Failure> {
        let m = std::fs::symlink_metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let kind_ok = if file {
            m.file_type().is_file()
        } else {
            m.file_type().is_dir()
        };
        let sticky = sticky_ok && m.mode() & 0o1000 != 0;
        if !kind_ok || !ours(m.uid()) || (m.mode() & 0o022 != 0 && !sticky) {
            return Err(format!(
                "{}: owned by uid {} with mode {:o}: not trusted (the file, its -wal and \
                 -shm and the directories above must be {who}, writable by their owner only)",
                p.display(),
                m.uid(),
                m.mode() & 0o7777
            ));
        }
        Ok(())
    };
    check(&real, true, false)?;
    for side in ["-wal", "-shm"] {
        let mut p = real.clone().into_os_string();
        p.push(side);
        let p = std::path::PathBuf::from(p);
        if std::fs::symlink_metadata(&p).is_ok() {
            check(&p, true, false)?;
        }
    }
    let mut dir = real.parent();
    let mut own = true;
    while let Some(d) = dir {
        check(d, false, !own)?;
        own = false;
        dir = d.parent();
    }
    Ok(())
}

/// Opens the scratchpad `o` came from, if it may be trusted to say who wrote what: an
/// SQLite file no one but root or this process's user could have put or amended
/// ([`trusted_file`]), or a PostgreSQL URL (connected with this process's own
/// credentials: the environment, `~/.pgpass`); whose `scratchpad_id` is the one
/// recorded, and whose version `o.source_version_id` holds the bytes `blake3` (what was
/// adopted). The error says which of these failed.
pub fn open_origin(o: &crate::store::Origin, blake3: &str) -> Result<Box<dyn History>, Failure> {
    if !crate::store::postgres::is_url(&o.source) {
        trusted_file(&o.source)?;
    }
    let store = crate::store::open_frozen(&o.source).map_err(|e| e.reason)?;
    if let Some(id) = &o.source_id {
        let there = store.meta("scratchpad_id").map_err(|e| e.reason)?;
        if there.as_deref() != Some(id.as_str()) {
            return Err(format!("{}: another scratchpad now", o.source));
        }
    }
    let v = store
        .why_at(o.source_version_id, None, 0)
        .map_err(|e| format!("{}: {}", o.source, e.reason))?;
    if v.lineage.version.blake3 != blake3 {
        return Err(format!(
            "{}: its {}@{} holds other bytes than were adopted",
            o.source, o.path, o.version
        ));
    }
    Ok(store)
}

/// Follows the answer of `why` (`w`, asked `depth` deep) to the scratchpad its version
/// came from, when it was adopted ([`crate::lineage::why::VersionFacts::origin`]): asks
/// there the same question of the version it came from, and puts the answer in
/// `w.lineage.adopted` (or why not in `adopted_not_followed`); again from there, at most
/// [`ORIGIN_HOPS`] scratchpads.
pub fn follow_origins(w: &mut crate::lineage::why::Why, depth: usize) {
    follow_origins_hops(w, depth, ORIGIN_HOPS);
}

fn follow_origins_hops(w: &mut crate::lineage::why::Why, depth: usize, hops: usize) {
    let Some(o) = w.lineage.version.origin.clone() else {
        return;
    };
    if hops == 0 {
        w.lineage.adopted_not_followed = Some(format!("{}: too many hops", o.source));
        return;
    }
    let there = open_origin(&o, &w.lineage.version.blake3).and_then(|store| {
        store
            .why_at(o.source_version_id, w.key.as_deref(), depth)
            .map_err(|e| format!("{}: {}", o.source, e.reason))
    });
    match there {
        Ok(mut b) => {
            follow_origins_hops(&mut b, depth, hops - 1);
            w.lineage.adopted = Some(Box::new(b));
        }
        Err(e) => w.lineage.adopted_not_followed = Some(e),
    }
}

/// Who set `key` (top-level) in the version `o` names, in the scratchpad it came from,
/// and on through that version's own origin (an adoption of an adoption), at most `hops`
/// scratchpads: (writer, step), or why it could not be followed.
fn setter_across(
    o: &crate::store::Origin,
    blake3: &str,
    key: &str,
    hops: usize,
) -> Result<(String, Option<i64>), Failure> {
    let store = open_origin(o, blake3)?;
    let w = store
        .why_at(o.source_version_id, Some(key), 0)
        .map_err(|e| format!("{}: {}", o.source, e.reason))?;
    let v = &w.lineage.version;
    match &v.origin {
        // An adopt whose origin is not recorded there (a fork does not carry `origins`):
        // the adopter is no tool vouching for the value.
        None if v.op == "adopt" => Err(format!(
            "{}: {}@{} was adopted from elsewhere, not recorded there",
            o.source, v.path, v.version
        )),
        None => Ok((v.writer.clone(), v.step)),
        Some(_) if hops == 0 => Err(format!("{}: too many hops", o.source)),
        Some(next) => setter_across(next, &v.blake3, key, hops - 1),
    }
}

/// For each source of `found` whose value came from another scratchpad
/// ([`crate::lineage::ground::Source::origin`]): the version that set it there, and on
/// through adoptions of adoptions ([`ORIGIN_HOPS`]): its writer and step, and whether the
/// rules mark that writer a model. When that cannot be followed ([`open_origin`]), no
/// tool vouches for the value: it counts as asserted (`model`), under the writer
/// recorded there (`origins.writer`), and `adopted_from` says why it was not followed
/// (crediting the adopter, root or the user who mounted, would make every adopted number
/// read as sourced; so would the recorded writer when it is itself an adopter). Each
/// database is opened once per key.
pub fn follow_ground_origins(found: &mut crate::lineage::sources::Sources) {
    use std::collections::HashMap;
    // (database, version there, key) to (writer, step) or why not.
    type Setters = HashMap<(String, i64, String), Result<(String, Option<i64>), Failure>>;
    let mut setters: Setters = HashMap::new();
    for s in found.sources.iter_mut() {
        let Some(a) = s.origin.clone() else {
            continue;
        };
        let o = &a.origin;
        let setter = setters
            .entry((o.source.clone(), o.source_version_id, a.key.clone()))
            .or_insert_with(|| setter_across(o, &a.blake3, &a.key, ORIGIN_HOPS));
        match setter {
            Ok((writer, step)) => {
                s.writer = writer.clone();
                s.step = *step;
                s.model = found.model.contains(writer);
            }
            Err(e) => {
                s.writer = o.writer.clone();
                s.step = None;
                s.model = true;
                if let Some(text) = &mut s.adopted_from {
                    text.push_str(&format!(" (not followed: {e}; counted as asserted)"));
                }
            }
        }
    }
}

/// Who `why` credits a key with when that is not the version that last changed it in
/// this file (a rollback or restore brought the value back, or it was adopted from a
/// fork that could be followed): `{"version", "writer", "step", "path", "source", "via"}`
/// (`source`: the other database, for an adopted value; `via`: `"brought back by rollback
/// v4"`, `"adopted from /w/fork.db state.json@4"`); `None` when `w`'s setter is that
/// version itself. The review page shows it beside the key's last change.
pub fn credited_json(w: &crate::lineage::why::Why) -> Option<serde_json::Value> {
    let mut at = w;
    let mut source: Option<String> = None;
    let mut via = Vec::new();
    if let Some(b) = w.brought_back_by.first() {
        via.push(format!("brought back by {} v{}", b.op, b.version));
    }
    while let Some(there) = &at.lineage.adopted {
        let o = at.lineage.version.origin.as_ref()?;
        via.push(format!(
            "adopted from {} {}@{}",
            o.source, o.path, o.version
        ));
        source = Some(o.source.clone());
        at = there;
        if let Some(b) = at.brought_back_by.first() {
            via.push(format!("brought back by {} v{} there", b.op, b.version));
        }
    }
    if via.is_empty() {
        return None;
    }
    let v = &at.lineage.version;
    let mut o = serde_json::json!({
        "version": v.version, "writer": v.writer, "step": v.step, "path": v.path,
        "source": source, "via": via.join(", "),
    });
    json_paths(&mut o, &["path"]);
    Some(o)
}
