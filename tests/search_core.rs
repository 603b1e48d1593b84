//! The history index left behind (issue 33 item 4), tested on the core without a kernel:
//! a search that brings the index only part of the way up to date (its time budget spent)
//! reads what the index does not hold yet, and finds exactly what a full read finds; the
//! `scratchfs-history` thread finishes the index after it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use scratchfs::fs::{Ctx, Fs, ROOT};
use scratchfs::mcp::search::{Query, search};
use scratchfs::store::Sqlite;

const ROOT_CTX: Ctx = Ctx {
    pid: 0,
    uid: 0,
    gid: 0,
};

fn write(fs: &Fs, name: &str, flags: i32, text: &str) {
    let ino = match fs.lookup(ROOT, name.as_bytes()) {
        Ok(attr) => attr.ino,
        Err(_) => {
            let (attr, fh, _) = fs
                .create(ROOT, name.as_bytes(), 0o644, 0, libc::O_WRONLY, ROOT_CTX)
                .unwrap();
            fs.release(fh).unwrap();
            attr.ino
        }
    };
    let (fh, _) = fs.open(ino, libc::O_WRONLY | flags, ROOT_CTX).unwrap();
    let at = if flags & libc::O_APPEND != 0 {
        fs.getattr(ino).unwrap().size
    } else {
        0
    };
    fs.write(fh, at, text.as_bytes()).unwrap();
    fs.flush(fh).unwrap();
    fs.release(fh).unwrap();
}

fn query(pattern: &str, regex: bool) -> Query {
    Query {
        pattern: pattern.into(),
        regex,
        ignore_case: false,
        path: None,
        limit: 10_000,
        history: true,
    }
}

/// 24 files of 12 versions each (rewrites, and appends to logs); `needle-k` in some.
fn populate(fs: &Fs) {
    for round in 0..12 {
        for f in 0..24 {
            let hit = (f * 7 + round) % 17 == 0;
            let line = format!(
                "round {round} file {f}{}\n",
                if hit { " needle-k" } else { "" }
            );
            if f % 3 == 0 {
                write(fs, &format!("log{f}.txt"), libc::O_APPEND, &line);
            } else {
                write(fs, &format!("f{f}.md"), libc::O_TRUNC, &line);
            }
        }
    }
}

#[test]
fn a_search_that_leaves_the_history_index_behind_finds_what_a_full_read_finds() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Sqlite::open(&dir.path().join("s.db"), (0, 0)).unwrap();
    let fs = Arc::new(Fs::new(Arc::new(store), dir.path().to_path_buf()).unwrap());
    populate(&fs);
    let full = search(&fs, &query(".*needle-k", true), ROOT_CTX).unwrap();
    assert!(full.matches.len() >= 10, "{full:?}");
    assert_eq!(
        full.files_searched, 24,
        "the unindexed search reads every file"
    );
    // No time to index: each search indexes a version or so, and reads the rest.
    fs.set_history_search_budget(Duration::ZERO);
    let mut rounds = 0;
    loop {
        let found = search(&fs, &query("needle-k", false), ROOT_CTX).unwrap();
        assert_eq!(found.matches, full.matches, "after {rounds} searches");
        rounds += 1;
        if found.files_searched < 24 {
            break;
        }
        assert!(rounds < 400, "the index never caught up");
    }
    assert!(
        rounds > 3,
        "the budget left the index behind: {rounds} searches"
    );
    // New versions, and the thread finishes what a search leaves.
    Fs::start_history_indexer(&fs).unwrap();
    populate(&fs);
    let full = search(&fs, &query(".*needle-k", true), ROOT_CTX).unwrap();
    let found = search(&fs, &query("needle-k", false), ROOT_CTX).unwrap();
    assert_eq!(found.matches, full.matches);
    let named: std::collections::BTreeSet<&str> =
        full.matches.iter().map(|m| m.path.as_str()).collect();
    let start = Instant::now();
    loop {
        let found = search(&fs, &query("needle-k", false), ROOT_CTX).unwrap();
        assert_eq!(found.matches, full.matches);
        if found.files_searched == named.len() as u64 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the scratchfs-history thread did not finish the index"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
