//! The gate attack test (issue 9 item 7): random sequences of operations by an
//! unprivileged writer (uid 1000, writer `agent`) against rules with read-only,
//! write-once, append-only, field-ruled and other-writer paths. After each sequence every
//! protected path's content and every protected key's value are unchanged, its history
//! still holds every version, and every refusal the gate gave is on record.
//!
//! `core_*` runs on the filesystem core over a temporary SQLite store, no kernel and no
//! mount (so kernel permission checks play no part: only the gate decides); `mount_*`
//! runs a shorter, seeded sequence of shell tools as uid 1000 on a real mount.

mod common;
use common::*;
use proptest::prelude::*;
use std::sync::Arc;

use scratchfs::fs::{Ctx, Fs, ROOT, SetAttr};
use scratchfs::store::Sqlite;

const RULES: &str = r#"{
  "writers": { "agent": { "uid": 1000 }, "admin": { "uid": 0 } },
  "paths": [
    { "path": "ro.md",      "mode": "read-only" },
    { "path": "once/**",    "mode": "write-once" },
    { "path": "log.md",     "mode": "append-only" },
    { "path": "tool/**",    "writers": ["admin"] },
    { "path": "state.json", "format": "json",
      "fields": { "total": { "writers": ["admin"] }, "note": { "writers": ["*"] } } },
    { "path": "**",         "writers": ["*"] }
  ]
}"#;

/// The protected files and their initial content.
const PROTECTED: &[(&str, &str)] = &[
    ("ro.md", "read only\n"),
    ("once/f", "written once\n"),
    ("log.md", "line 1\n"),
    ("tool/t", "the tool's\n"),
    ("state.json", "{\"total\": 18000, \"note\": \"n\"}"),
];

/// Names the agent plays with: the protected ones and free ones.
const FILES: &[&str] = &[
    "ro.md",
    "once/f",
    "log.md",
    "tool/t",
    "state.json",
    "free.md",
    "dir/x",
    "tmp1",
    "once/g",
    "tool/u",
];
const DIRS: &[&str] = &["once", "tool", "dir", "d2"];

const AGENT: Ctx = Ctx {
    pid: 0,
    uid: 1000,
    gid: 1000,
};

#[derive(Debug, Clone)]
enum Op {
    /// open(O_WRONLY|O_CREAT|O_TRUNC), write, close.
    Write(usize, Vec<u8>),
    /// open(O_APPEND), write, close.
    Append(usize, Vec<u8>),
    /// open(O_WRONLY), pwrite at an offset, close.
    WriteAt(usize, u8, Vec<u8>),
    /// truncate(2).
    Truncate(usize, u8),
    /// chmod.
    Chmod(usize),
    Mkdir(usize),
    Rmdir(usize),
    Unlink(usize),
    /// rename of a file, over whatever is there.
    Rename(usize, usize),
    RenameDir(usize, usize),
    /// sed -i / jq > tmp && mv: a new temporary with the content, renamed over the file.
    ReplaceVia(usize, Vec<u8>),
    /// The restore attribute.
    Restore(usize, u8),
    /// The gc attribute.
    Gc,
    /// A live appender (issue 11): open(O_APPEND), write, its live commit, write, close.
    HeldAppend(usize, Vec<u8>, Vec<u8>),
    /// `cp .archive/<file> <other>`: a deleted file's last version copied back, creating
    /// the file (which continues the lineage deleted last at that path).
    FromArchive(usize, usize),
}

fn content() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..40),
        Just(b"{\"total\": 1, \"note\": \"n\"}".to_vec()),
        Just(b"{\"note\": \"changed\"}".to_vec()),
        Just(b"{\"total\": 18000, \"note\": \"x\"}".to_vec()),
        Just(b"line 2\n".to_vec()),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let f = 0..FILES.len();
    let d = 0..DIRS.len();
    prop_oneof![
        (f.clone(), content()).prop_map(|(i, b)| Op::Write(i, b)),
        (f.clone(), content()).prop_map(|(i, b)| Op::Append(i, b)),
        (f.clone(), any::<u8>(), content()).prop_map(|(i, o, b)| Op::WriteAt(i, o, b)),
        (f.clone(), any::<u8>()).prop_map(|(i, n)| Op::Truncate(i, n)),
        f.clone().prop_map(Op::Chmod),
        d.clone().prop_map(Op::Mkdir),
        d.clone().prop_map(Op::Rmdir),
        f.clone().prop_map(Op::Unlink),
        (f.clone(), f.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        (d.clone(), d.clone()).prop_map(|(a, b)| Op::RenameDir(a, b)),
        (f.clone(), content()).prop_map(|(i, b)| Op::ReplaceVia(i, b)),
        (f.clone(), 1..4u8).prop_map(|(i, n)| Op::Restore(i, n)),
        Just(Op::Gc),
        (f.clone(), content(), content()).prop_map(|(i, a, b)| Op::HeldAppend(i, a, b)),
        (f.clone(), f.clone()).prop_map(|(a, b)| Op::FromArchive(a, b)),
    ]
}

/// The inode at `path`, if any.
fn resolve(fs: &Fs, path: &str) -> Option<u64> {
    let mut ino = ROOT;
    for part in path.split('/') {
        ino = fs.lookup(ino, part.as_bytes()).ok()?.ino;
    }
    Some(ino)
}

fn parent_and_name(fs: &Fs, path: &str) -> Option<(u64, String)> {
    match path.rsplit_once('/') {
        Some((dir, name)) => Some((resolve(fs, dir)?, name.to_string())),
        None => Some((ROOT, path.to_string())),
    }
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let (fh, _) = fs.open(ino, libc::O_RDONLY, AGENT).unwrap();
    let mut out = Vec::new();
    loop {
        let b = fs.read(fh, out.len() as u64, 65536).unwrap();
        if b.is_empty() {
            break;
        }
        out.extend_from_slice(&b);
    }
    fs.release(fh).unwrap();
    out
}

/// Opens (creating with O_CREAT when missing), writes, closes; the first error wins.
fn write_file(fs: &Fs, path: &str, flags: i32, at: u64, data: &[u8]) -> Result<(), i32> {
    let (parent, name) = parent_and_name(fs, path).ok_or(libc::ENOENT)?;
    let fh = match fs.lookup(parent, name.as_bytes()) {
        Ok(a) => fs.open(a.ino, flags, AGENT).map_err(|e| e.errno)?.0,
        Err(_) => {
            fs.create(parent, name.as_bytes(), 0o644, 0o022, flags, AGENT)
                .map_err(|e| e.errno)?
                .1
        }
    };
    let w = fs.write(fh, at, data).map(|_| ()).map_err(|e| e.errno);
    let f = fs.flush(fh).map_err(|e| e.errno);
    fs.release(fh).ok();
    w.and(f)
}

fn run(fs: &Fs, op: &Op) -> Result<(), i32> {
    let file = |i: usize| FILES[i];
    let dir = |i: usize| DIRS[i];
    match op {
        Op::Write(i, b) => write_file(fs, file(*i), libc::O_WRONLY | libc::O_TRUNC, 0, b),
        Op::Append(i, b) => write_file(fs, file(*i), libc::O_WRONLY | libc::O_APPEND, 0, b),
        Op::WriteAt(i, o, b) => write_file(fs, file(*i), libc::O_WRONLY, *o as u64 % 16, b),
        Op::Truncate(i, n) => {
            let ino = resolve(fs, file(*i)).ok_or(libc::ENOENT)?;
            let set = SetAttr {
                size: Some(*n as u64 % 32),
                ..Default::default()
            };
            fs.setattr(ino, set, None, AGENT)
                .map(|_| ())
                .map_err(|e| e.errno)
        }
        Op::Chmod(i) => {
            let ino = resolve(fs, file(*i)).ok_or(libc::ENOENT)?;
            let set = SetAttr {
                mode: Some(0o600),
                ..Default::default()
            };
            fs.setattr(ino, set, None, AGENT)
                .map(|_| ())
                .map_err(|e| e.errno)
        }
        Op::Mkdir(i) => fs
            .mkdir(ROOT, dir(*i).as_bytes(), 0o755, 0, AGENT)
            .map(|_| ())
            .map_err(|e| e.errno),
        Op::Rmdir(i) => fs
            .remove(ROOT, dir(*i).as_bytes(), true, AGENT)
            .map_err(|e| e.errno),
        Op::Unlink(i) => {
            let (p, n) = parent_and_name(fs, file(*i)).ok_or(libc::ENOENT)?;
            fs.remove(p, n.as_bytes(), false, AGENT)
                .map_err(|e| e.errno)
        }
        Op::Rename(a, b) => {
            let (pa, na) = parent_and_name(fs, file(*a)).ok_or(libc::ENOENT)?;
            let (pb, nb) = parent_and_name(fs, file(*b)).ok_or(libc::ENOENT)?;
            fs.rename(pa, na.as_bytes(), pb, nb.as_bytes(), 0, AGENT)
                .map_err(|e| e.errno)
        }
        Op::RenameDir(a, b) => fs
            .rename(ROOT, dir(*a).as_bytes(), ROOT, dir(*b).as_bytes(), 0, AGENT)
            .map_err(|e| e.errno),
        Op::ReplaceVia(i, b) => {
            write_file(fs, "tmp.new", libc::O_WRONLY | libc::O_TRUNC, 0, b)?;
            let (p, n) = parent_and_name(fs, file(*i)).ok_or(libc::ENOENT)?;
            fs.rename(ROOT, b"tmp.new", p, n.as_bytes(), 0, AGENT)
                .map_err(|e| e.errno)
        }
        Op::Restore(i, n) => {
            let ino = resolve(fs, file(*i)).ok_or(libc::ENOENT)?;
            fs.setxattr(
                ino,
                b"user.scratchfs.restore",
                n.to_string().as_bytes(),
                AGENT,
            )
            .map_err(|e| e.errno)
        }
        Op::Gc => fs
            .setxattr(
                ROOT,
                b"user.scratchfs.gc",
                br#"{"keep_last": 1, "before_ns": null, "dry_run": false}"#,
                AGENT,
            )
            .map_err(|e| e.errno),
        Op::HeldAppend(i, a, b) => {
            let ino = resolve(fs, file(*i)).ok_or(libc::ENOENT)?;
            let fh = fs
                .open(ino, libc::O_WRONLY | libc::O_APPEND, AGENT)
                .map_err(|e| e.errno)?
                .0;
            let r = fs
                .write(fh, 0, a)
                .map(|_| fs.commit_live_appends_now())
                .and_then(|()| fs.write(fh, 0, b))
                .and_then(|_| fs.flush(fh))
                .map_err(|e| e.errno);
            fs.release(fh).ok();
            r
        }
        Op::FromArchive(a, b) => {
            let archive = fs.lookup(ROOT, b".archive").map_err(|e| e.errno)?.ino;
            let mut ino = archive;
            for part in file(*a).split('/') {
                ino = fs.lookup(ino, part.as_bytes()).map_err(|e| e.errno)?.ino;
            }
            let content = read_all(fs, ino);
            write_file(fs, file(*b), libc::O_WRONLY | libc::O_TRUNC, 0, &content)
        }
    }
}

/// A store with the protected files, their version ids, and the filesystem over it with
/// the rules (the files are made without rules: several paths refuse any creation).
fn setup(dir: &std::path::Path) -> (Fs, Vec<(String, Vec<i64>)>) {
    let db = dir.join("gate.db");
    let root = Ctx {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    {
        let (store, _) = Sqlite::open(&db, (0, 0)).unwrap();
        let fs = Fs::new(Arc::new(store), dir.to_path_buf()).unwrap();
        for d in ["once", "tool"] {
            fs.mkdir(ROOT, d.as_bytes(), 0o777, 0, root).unwrap();
        }
        for (path, text) in PROTECTED {
            let (parent, name) = parent_and_name(&fs, path).unwrap();
            let (_, fh, _) = fs
                .create(parent, name.as_bytes(), 0o666, 0, libc::O_WRONLY, root)
                .unwrap();
            fs.write(fh, 0, text.as_bytes()).unwrap();
            fs.flush(fh).unwrap();
            fs.release(fh).unwrap();
        }
        fs.store().sync().unwrap();
    }
    let (store, _) = Sqlite::open(&db, (0, 0)).unwrap();
    let rules = scratchfs::rules::Rules::parse(RULES).unwrap();
    let fs = Fs::new(Arc::new(store), dir.to_path_buf())
        .unwrap()
        .with_rules(scratchfs::rules::enforce::Compiled::new(rules));
    let mut history = Vec::new();
    for (path, _) in PROTECTED {
        history.push((path.to_string(), version_ids(&fs, path)));
    }
    (fs, history)
}

fn file_id(fs: &Fs, path: &str) -> i64 {
    fs.store()
        .lineages(path)
        .unwrap()
        .into_iter()
        .find(|l| l.path == path && l.deleted_ns.is_none())
        .unwrap_or_else(|| panic!("{path}: no live lineage"))
        .file_id
}

fn version_ids(fs: &Fs, path: &str) -> Vec<i64> {
    fs.store()
        .versions(file_id(fs, path))
        .unwrap()
        .into_iter()
        .map(|v| v.id)
        .collect()
}

fn check_invariants(fs: &Fs, history: &[(String, Vec<i64>)], ops: &[(Op, Result<(), i32>)]) {
    for (path, text) in PROTECTED {
        let ino = resolve(fs, path).unwrap_or_else(|| panic!("{path} is gone after {ops:?}"));
        let now = read_all(fs, ino);
        match *path {
            "log.md" => assert!(
                now.starts_with(text.as_bytes()),
                "append-only log.md lost bytes: {:?} after {ops:?}",
                String::from_utf8_lossy(&now)
            ),
            "state.json" => {
                let v: serde_json::Value = serde_json::from_slice(&now)
                    .unwrap_or_else(|e| panic!("state.json is not JSON ({e}) after {ops:?}"));
                assert_eq!(v["total"], 18000, "total changed after {ops:?}");
            }
            _ => assert_eq!(
                String::from_utf8_lossy(&now),
                *text,
                "{path} changed after {ops:?}"
            ),
        }
    }
    for (path, ids) in history {
        let now = version_ids(fs, path);
        for id in ids {
            assert!(
                now.contains(id),
                "{path}: version {id} forgotten after {ops:?}"
            );
        }
    }
    // Every refusal the gate gave is on record: one `rejected` event each.
    let refusals = ops
        .iter()
        .filter(
            |(_, r)| matches!(r, Err(e) if [libc::EACCES, libc::EPERM, libc::EINVAL].contains(e)),
        )
        .count() as u64;
    let recorded = fs.store().refusals(0).unwrap().1;
    assert_eq!(recorded, refusals, "refusals on record vs given: {ops:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, .. ProptestConfig::default() })]
    #[test]
    fn core_no_sequence_gets_past_the_gate(ops in proptest::collection::vec(op(), 1..30)) {
        let dir = tempfile::tempdir().unwrap();
        let (fs, history) = setup(dir.path());
        let mut done = Vec::new();
        for op in ops {
            let r = run(&fs, &op);
            done.push((op, r));
        }
        check_invariants(&fs, &history, &done);
    }
}

/// The same attack with shell tools as uid 1000 on a real `--owner` mount: a seeded
/// sequence of commands (failures expected), then the same invariants on the content and
/// the history.
#[test]
fn mount_no_shell_sequence_gets_past_the_gate() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.json");
    std::fs::write(&rules, RULES).unwrap();
    // The protected files are made without rules (several paths refuse any creation).
    let mut m = Mount::with_args(&["--owner", "1000:1000"]);
    m.sh_ok("umask 000 && mkdir -p once tool && chmod 777 . once tool");
    for (path, text) in PROTECTED {
        std::fs::write(m.path(path), text).unwrap();
    }
    m.sh_ok("chmod 666 ro.md once/f log.md tool/t state.json");
    m.unmount();
    m.restart_with(&["--rules", rules.to_str().unwrap(), "--owner", "1000:1000"]);
    let before: Vec<(String, String)> = PROTECTED
        .iter()
        .map(|(p, _)| {
            (
                p.to_string(),
                m.sql(&format!(
                    "SELECT group_concat(id) FROM versions WHERE path = '{p}'"
                )),
            )
        })
        .collect();
    let commands = [
        "mv once o2",
        "mv tool t2 && rm t2/t",
        "mv o2 once",
        "echo x > ro.md",
        "echo x >> ro.md",
        "truncate -s 0 once/f",
        "echo y > once/f",
        "echo z > log.md",
        "truncate -s 2 log.md",
        "echo ok >> log.md",
        "sed -i s/read/write/ ro.md",
        "sed -i s/18000/1/ state.json",
        "jq .total=5 state.json > s.tmp && mv s.tmp state.json",
        "jq \"del(.total)\" state.json > s.tmp && mv s.tmp state.json",
        "cp free.md ro.md",
        "echo f > free.md && cp free.md once/f",
        "mv free.md tool/t",
        "rm state.json",
        "rm -rf tool",
        "rm -rf once",
        "mv state.json elsewhere.json",
        "setfattr -n user.scratchfs.restore -v 1 state.json",
        "setfattr -n user.scratchfs.restore -v 1 log.md",
        "setfattr -n user.scratchfs.gc -v \"{\\\"keep_last\\\":1,\\\"before_ns\\\":null,\\\"dry_run\\\":false}\" .",
        "chmod 777 ro.md",
        "mkdir d && mv tool d/ && mv d/tool tool",
        "python3 -c \"import json; d = json.load(open('state.json')); d['total'] = 7; json.dump(d, open('state.json', 'w'))\"",
        "python3 -c \"import os; os.replace('free.md', 'once/f')\"",
        // Live appenders (issue 11): commits made while the handle stays open.
        "exec 3>>log.md; echo held >&3; sleep 1.5; echo more >&3; exec 3>&-",
        "exec 3>>state.json; echo \"{}\" >&3; sleep 1.5; echo x >&3; exec 3>&-",
        "exec 3>>once/f; echo x >&3; sleep 1.5; exec 3>&-",
        // A deleted file's archive copied back over protected paths; a create and a
        // rename onto the path of a deleted file (continuing its lineage).
        "echo t > gone.md && rm gone.md && cp .archive/gone.md tool/t",
        "cp .archive/gone.md once/f; cp .archive/gone.md ro.md",
        "echo u > gone.md && rm gone.md && echo v > n.md && mv n.md gone.md && mv gone.md log.md",
    ];
    // Three seeded orders of the same commands (a fixed xorshift, so a failure repeats).
    let mut seed: u64 = 0x9e3779b97f4a7c15;
    for round in 0..3 {
        let mut order: Vec<usize> = (0..commands.len()).collect();
        for i in (1..order.len()).rev() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            order.swap(i, (seed % (i as u64 + 1)) as usize);
        }
        for i in order {
            let o = m.sh(&format!(
                "setpriv --reuid 1000 --regid 1000 --clear-groups bash -c '{}'",
                commands[i].replace('\'', r"'\''")
            ));
            let _ = (round, o);
        }
        for (path, text) in PROTECTED {
            let now = std::fs::read(m.path(path))
                .unwrap_or_else(|e| panic!("{path} is gone (round {round}): {e}"));
            match *path {
                "log.md" => assert!(now.starts_with(text.as_bytes()), "log.md: {now:?}"),
                "state.json" => {
                    let v: serde_json::Value = serde_json::from_slice(&now).unwrap();
                    assert_eq!(v["total"], 18000, "state.json: {v}");
                }
                _ => assert_eq!(String::from_utf8_lossy(&now), *text, "{path}"),
            }
        }
        for (path, ids) in &before {
            let now = m.sql(&format!("SELECT group_concat(id) FROM versions WHERE path = '{path}' OR file_id IN (SELECT file_id FROM versions WHERE path = '{path}')"));
            for id in ids.split(',') {
                assert!(
                    now.split(',').any(|x| x == id),
                    "{path}: version {id} forgotten (round {round})"
                );
            }
        }
    }
    // The refusals are on record, as the agent's.
    let log = cli(&m, &["log", "--rejected"]).1;
    for what in ["ro.md", "once/f", "log.md", "state.json", "gc by uid 1000"] {
        assert!(log.contains(what), "no refusal for {what}:\n{log}");
    }
}
