//! MANIFEST's rows are kept between renderings and brought up to date from the inodes
//! each change touched (src/fs/manifest_rows.rs). Property: after any sequence of
//! creates, commits, renames of files and directories, removals and temporaries, with
//! and without the rules' `ephemeral` globs and with a budget that lists every file or
//! one that folds, MANIFEST as read is byte for byte the MANIFEST a walk of the whole
//! tree renders. On the filesystem core over a temporary SQLite store (no kernel).

use std::sync::Arc;

use proptest::prelude::*;
use scratchfs::fs::{Ctx, Fs, ROOT};
use scratchfs::store::Sqlite;

const ROOT_CTX: Ctx = Ctx {
    pid: 0,
    uid: 0,
    gid: 0,
};

/// Directories (parents before children) and file names, temporaries among them.
const DIRS: &[&str] = &["a", "b", "a/c", "scratch", "b/scratch"];
const NAMES: &[&str] = &["plan.md", "f.txt", ".f.txt.swp", "g~", "x.json", "4913"];

#[derive(Debug, Clone)]
enum Op {
    /// Write (creating when missing) `NAMES[n]` in `DIRS[d]` (`None`: the root): `len`
    /// times byte `b` (0: binary content).
    Write(Option<usize>, usize, u16, u8),
    Unlink(Option<usize>, usize),
    Rename(Option<usize>, usize, Option<usize>, usize),
    Mkdir(usize),
    Rmdir(usize),
    RenameDir(usize, usize),
    /// Read MANIFEST (the rows are brought up to date with the changes since the last
    /// read), and compare it with a walk of the tree; also done after the last op.
    Read,
}

fn dir() -> impl Strategy<Value = Option<usize>> {
    proptest::option::of(0..DIRS.len())
}

fn op() -> impl Strategy<Value = Op> {
    let n = 0..NAMES.len();
    let d = 0..DIRS.len();
    prop_oneof![
        4 => (dir(), n.clone(), 0..300u16, prop_oneof![Just(0u8), Just(b'x')])
            .prop_map(|(d, n, len, b)| Op::Write(d, n, len, b)),
        1 => (dir(), n.clone()).prop_map(|(d, n)| Op::Unlink(d, n)),
        2 => (dir(), n.clone(), dir(), n.clone()).prop_map(|(a, m, b, k)| Op::Rename(a, m, b, k)),
        2 => d.clone().prop_map(Op::Mkdir),
        1 => d.clone().prop_map(Op::Rmdir),
        1 => (d.clone(), d.clone()).prop_map(|(a, b)| Op::RenameDir(a, b)),
        2 => Just(Op::Read),
    ]
}

fn resolve(fs: &Fs, path: &str) -> Option<u64> {
    let mut ino = ROOT;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = fs.lookup(ino, part.as_bytes()).ok()?.ino;
    }
    Some(ino)
}

/// A directory's inode and its path (`None`: the root).
fn at(fs: &Fs, d: Option<usize>) -> Option<u64> {
    d.map_or(Some(ROOT), |d| resolve(fs, DIRS[d]))
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

fn run(fs: &Fs, op: &Op) {
    match op {
        Op::Write(d, n, len, b) => {
            let bytes = vec![*b; *len as usize];
            let Some(parent) = at(fs, *d) else { return };
            let name = NAMES[*n].as_bytes();
            let fh = match fs.lookup(parent, name) {
                Ok(a) => match fs.open(a.ino, libc::O_WRONLY | libc::O_TRUNC, ROOT_CTX) {
                    Ok((fh, _)) => fh,
                    Err(_) => return,
                },
                Err(_) => match fs.create(parent, name, 0o644, 0, libc::O_WRONLY, ROOT_CTX) {
                    Ok((_, fh, _)) => fh,
                    Err(_) => return,
                },
            };
            let _ = fs.write(fh, 0, &bytes);
            let _ = fs.flush(fh);
            let _ = fs.release(fh);
        }
        Op::Unlink(d, n) => {
            if let Some(parent) = at(fs, *d) {
                let _ = fs.remove(parent, NAMES[*n].as_bytes(), false, ROOT_CTX);
            }
        }
        Op::Rename(a, m, b, k) => {
            if let (Some(pa), Some(pb)) = (at(fs, *a), at(fs, *b)) {
                let _ = fs.rename(
                    pa,
                    NAMES[*m].as_bytes(),
                    pb,
                    NAMES[*k].as_bytes(),
                    0,
                    ROOT_CTX,
                );
            }
        }
        Op::Mkdir(d) => {
            let (parent, name) = split(DIRS[*d]);
            if let Some(p) = resolve(fs, parent) {
                let _ = fs.mkdir(p, name.as_bytes(), 0o755, 0, ROOT_CTX);
            }
        }
        Op::Rmdir(d) => {
            let (parent, name) = split(DIRS[*d]);
            if let Some(p) = resolve(fs, parent) {
                let _ = fs.remove(p, name.as_bytes(), true, ROOT_CTX);
            }
        }
        Op::RenameDir(a, b) => {
            let ((pa, na), (pb, nb)) = (split(DIRS[*a]), split(DIRS[*b]));
            if let (Some(pa), Some(pb)) = (resolve(fs, pa), resolve(fs, pb)) {
                let _ = fs.rename(pa, na.as_bytes(), pb, nb.as_bytes(), 0, ROOT_CTX);
            }
        }
        // Compared in `check`.
        Op::Read => {}
    }
}

fn check(ops: &[Op], globs: bool, budget: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Sqlite::open(&dir.path().join("m.db"), (0, 0)).unwrap();
    let mut fs = Fs::new(Arc::new(store), dir.path().to_path_buf())
        .unwrap()
        .with_manifest_budget(Some(budget));
    if globs {
        let rules = scratchfs::rules::Rules::parse(
            r#"{ "paths": [ { "path": "**", "writers": ["*"] } ], "ephemeral": ["scratch/**"] }"#,
        )
        .unwrap();
        fs = fs.with_rules(scratchfs::rules::enforce::Compiled::new(rules));
    }
    for (i, op) in ops.iter().enumerate() {
        run(&fs, op);
        if !matches!(op, Op::Read) && i + 1 < ops.len() {
            continue;
        }
        let (read, walked) = fs.manifest_and_walked().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&read),
            String::from_utf8_lossy(&walked),
            "MANIFEST after {:?} differs from a walk of the tree",
            &ops[..=i]
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, .. ProptestConfig::default() })]
    #[test]
    fn manifest_rows_follow_every_change(
        ops in proptest::collection::vec(op(), 1..40),
        globs in any::<bool>(),
        small in any::<bool>(),
    ) {
        check(&ops, globs, if small { 100 } else { 2000 });
    }
}

/// A directory renamed into a directory matched by the rules' `ephemeral` globs: its
/// files become temporaries (a walk of the tree is needed, and made).
#[test]
fn a_directory_moved_under_an_ephemeral_glob_takes_its_files_out() {
    let ops = [
        Op::Mkdir(0),
        Op::Write(Some(0), 1, 3, b'x'),
        Op::Read,
        Op::Mkdir(3),
        Op::RenameDir(0, 3),
        Op::Read,
        Op::RenameDir(3, 0),
    ];
    check(&ops, true, 2000);
}

/// A file of exactly 8 KiB (the window MANIFEST reads to tell text from binary) that ends
/// in a cut UTF-8 sequence is binary; appending the rest of the character makes it text,
/// and cutting it back makes it binary again. The stream stays the same throughout, so
/// what MANIFEST remembers must tell the whole file from its first 8 KiB.
#[test]
fn text_or_binary_follows_a_file_across_the_sniff_window() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Sqlite::open(&dir.path().join("m.db"), (0, 0)).unwrap();
    let fs = Fs::new(Arc::new(store), dir.path().to_path_buf()).unwrap();
    let mut cut = vec![b'a'; 8190];
    cut.extend_from_slice(b"\xe2\x82");
    let row = |fs: &Fs| {
        let (read, walked) = fs.manifest_and_walked().unwrap();
        assert_eq!(read, walked);
        let text = String::from_utf8(read).unwrap();
        text.lines()
            .find(|l| l.starts_with("f "))
            .unwrap_or_else(|| panic!("{text}"))
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let append = |fs: &Fs, bytes: &[u8], flags: i32| {
        let ino = fs.lookup(ROOT, b"f").map(|a| a.ino);
        let fh = match ino {
            Ok(ino) => fs.open(ino, libc::O_WRONLY | flags, ROOT_CTX).unwrap().0,
            Err(_) => {
                fs.create(ROOT, b"f", 0o644, 0, libc::O_WRONLY, ROOT_CTX)
                    .unwrap()
                    .1
            }
        };
        fs.write(fh, 0, bytes).unwrap();
        fs.flush(fh).unwrap();
        fs.release(fh).unwrap();
    };
    append(&fs, &cut, 0);
    assert_eq!(row(&fs), "f 8,192 binary");
    append(&fs, b"\xacb", libc::O_APPEND);
    assert_eq!(row(&fs), "f 8,194 2,049");
    let ino = fs.lookup(ROOT, b"f").unwrap().ino;
    let set = scratchfs::fs::SetAttr {
        size: Some(8192),
        ..Default::default()
    };
    fs.setattr(ino, set, None, ROOT_CTX).unwrap();
    assert_eq!(row(&fs), "f 8,192 binary");
}
