//! Reference model: random sequences of file operations run on a plain directory and on
//! the mount must give the same results (success or the same errno) and the same tree.

mod common;
use common::*;
use proptest::prelude::*;
use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

const FILES: &[&str] = &["a", "b", "d1/a", "d1/c", "d2/b"];
const DIRS: &[&str] = &["d1", "d2", "d1/e"];

#[derive(Debug, Clone)]
enum Op {
    Write(usize, Vec<u8>),
    Append(usize, Vec<u8>),
    WriteAt(usize, u16, Vec<u8>),
    Truncate(usize, u16),
    Rename(usize, usize),
    RenameDir(usize, usize),
    Unlink(usize),
    Mkdir(usize),
    Rmdir(usize),
    Read(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let f = 0..FILES.len();
    let d = 0..DIRS.len();
    let bytes = proptest::collection::vec(any::<u8>(), 0..300);
    prop_oneof![
        (f.clone(), bytes.clone()).prop_map(|(i, b)| Op::Write(i, b)),
        (f.clone(), bytes.clone()).prop_map(|(i, b)| Op::Append(i, b)),
        (f.clone(), 0..600u16, bytes).prop_map(|(i, o, b)| Op::WriteAt(i, o, b)),
        (f.clone(), 0..600u16).prop_map(|(i, n)| Op::Truncate(i, n)),
        (f.clone(), f.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        (d.clone(), d.clone()).prop_map(|(a, b)| Op::RenameDir(a, b)),
        f.clone().prop_map(Op::Unlink),
        d.clone().prop_map(Op::Mkdir),
        d.prop_map(Op::Rmdir),
        f.prop_map(Op::Read),
    ]
}

/// Applies `op` under `root`; returns the outcome as data or an errno.
fn apply(root: &Path, op: &Op) -> Result<Vec<u8>, i32> {
    let p = |s: &str| root.join(s);
    let e = |r: std::io::Error| r.raw_os_error().unwrap_or(-1);
    match op {
        Op::Write(i, b) => fs::write(p(FILES[*i]), b).map(|_| vec![]).map_err(e),
        Op::Append(i, b) => fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(p(FILES[*i]))
            .and_then(|mut f| f.write_all(b))
            .map(|_| vec![])
            .map_err(e),
        Op::WriteAt(i, o, b) => fs::OpenOptions::new()
            .write(true)
            .open(p(FILES[*i]))
            .and_then(|f| f.write_all_at(b, *o as u64))
            .map(|_| vec![])
            .map_err(e),
        Op::Truncate(i, n) => fs::OpenOptions::new()
            .write(true)
            .open(p(FILES[*i]))
            .and_then(|f| f.set_len(*n as u64))
            .map(|_| vec![])
            .map_err(e),
        Op::Rename(a, b) => fs::rename(p(FILES[*a]), p(FILES[*b]))
            .map(|_| vec![])
            .map_err(e),
        Op::RenameDir(a, b) => fs::rename(p(DIRS[*a]), p(DIRS[*b]))
            .map(|_| vec![])
            .map_err(e),
        Op::Unlink(i) => fs::remove_file(p(FILES[*i])).map(|_| vec![]).map_err(e),
        Op::Mkdir(i) => fs::create_dir(p(DIRS[*i])).map(|_| vec![]).map_err(e),
        Op::Rmdir(i) => fs::remove_dir(p(DIRS[*i])).map(|_| vec![]).map_err(e),
        Op::Read(i) => fs::read(p(FILES[*i])).map_err(e),
    }
}

/// Every path below `root` with its content (`None` for directories), sorted.
fn snapshot(root: &Path) -> Vec<(String, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
                out.push((rel, None));
            } else {
                out.push((rel, Some(fs::read(e.path()).unwrap())));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn random_operations_match_a_plain_directory() {
    let m = Mount::new();
    let plain = tempfile::tempdir().unwrap();
    let case = AtomicUsize::new(0);
    let config = ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in proptest::collection::vec(op(), 1..40))| {
        let n = case.fetch_add(1, Ordering::Relaxed);
        let (a, b) = (plain.path().join(n.to_string()), m.mnt.join(n.to_string()));
        fs::create_dir(&a).unwrap();
        fs::create_dir(&b).unwrap();
        for op in &ops {
            let want = apply(&a, op);
            let got = apply(&b, op);
            prop_assert_eq!(&got, &want, "op {:?}", op);
        }
        prop_assert_eq!(snapshot(&b), snapshot(&a));
    });
    // Every live file's current version records the blake3 of the bytes the mount serves.
    let rows = m.sql("SELECT current_path, blake3, size FROM heads WHERE deleted_ns IS NULL");
    let mut checked = 0;
    for row in rows.lines() {
        let f: Vec<&str> = row.split('|').collect();
        let data = fs::read(m.path(f[0])).unwrap();
        assert_eq!(data.len().to_string(), f[2], "{}", f[0]);
        assert_eq!(blake3::hash(&data).to_hex().as_str(), f[1], "{}", f[0]);
        checked += 1;
    }
    // ... and there is a current version for every file the mount lists, no more.
    let listed = snapshot(&m.mnt)
        .iter()
        .filter(|(p, d)| d.is_some() && p != "MANIFEST")
        .count();
    assert_eq!(checked, listed, "heads against the files the mount lists");
    assert!(checked > 3, "only the default layout was checked");
}

/// Issue 14: the same random operations with checkpoints taken and rolled back to in
/// between. The model: a checkpoint is a copy of the plain directory, a rollback puts
/// the copy back; the mount must then hold the same tree, and `.checkpoints/NAME/` the
/// copy, whatever happened in between (renames of files and directories, deletes,
/// re-creations, truncations).
#[test]
fn checkpoints_and_rollbacks_match_a_copy_of_the_tree() {
    #[derive(Debug, Clone)]
    enum Step {
        Op(Op),
        Checkpoint,
        Rollback(usize),
    }
    let m = Mount::new();
    let plain = tempfile::tempdir().unwrap();
    let case = AtomicUsize::new(0);
    let config = ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let step = prop_oneof![
        6 => op().prop_map(Step::Op),
        1 => Just(Step::Checkpoint),
        1 => (0..4usize).prop_map(Step::Rollback),
    ];
    proptest!(config, |(steps in proptest::collection::vec(step, 1..40))| {
        let n = case.fetch_add(1, Ordering::Relaxed);
        let (a, b) = (plain.path().join(n.to_string()), m.mnt.join(n.to_string()));
        fs::create_dir(&a).unwrap();
        fs::create_dir(&b).unwrap();
        let mut copies: Vec<(String, Vec<(String, Option<Vec<u8>>)>)> = Vec::new();
        for s in &steps {
            match s {
                Step::Op(op) => {
                    let want = apply(&a, op);
                    let got = apply(&b, op);
                    prop_assert_eq!(&got, &want, "op {:?}", op);
                }
                Step::Checkpoint => {
                    let name = format!("c{n}-{}", copies.len());
                    let o = std::process::Command::new("setfattr")
                        .args(["-n", "user.scratchfs.checkpoint", "-v", &name])
                        .arg(&m.mnt)
                        .output()
                        .unwrap();
                    prop_assert!(o.status.success(), "{:?}", o);
                    copies.push((name, snapshot(&a)));
                }
                Step::Rollback(k) => {
                    let Some((name, copy)) = copies.get(*k) else { continue };
                    let o = std::process::Command::new("setfattr")
                        .args(["-n", "user.scratchfs.rollback", "-v", name])
                        .arg(&m.mnt)
                        .output()
                        .unwrap();
                    prop_assert!(o.status.success(), "{:?}", o);
                    fs::remove_dir_all(&a).unwrap();
                    fs::create_dir(&a).unwrap();
                    for (p, data) in copy {
                        match data {
                            None => fs::create_dir_all(a.join(p)).unwrap(),
                            Some(d) => {
                                fs::create_dir_all(a.join(p).parent().unwrap()).unwrap();
                                fs::write(a.join(p), d).unwrap();
                            }
                        }
                    }
                }
            }
            prop_assert_eq!(snapshot(&b), snapshot(&a), "after {:?}", s);
        }
        for (name, copy) in &copies {
            let view = m.mnt.join(".checkpoints").join(name).join(n.to_string());
            prop_assert_eq!(&snapshot(&view), copy, "checkpoint {}", name);
        }
    });
    let (code, out, _) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "{out}");
}
