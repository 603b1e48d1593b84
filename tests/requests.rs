//! What one operation costs, counted rather than timed (issue 32, item 2): the FUSE
//! requests the kernel sends for a create + 4 KiB write + close and for an append, and
//! the store's changes, SQL statements (SQLite) and round trips (PostgreSQL) they make. A
//! change that adds a request, a statement or a round trip to either fails here, whatever
//! the machine's speed. The mount is served by this process (`mount::Background`), so
//! that its counters (`scratchfs::fuse::requests`, `scratchfs::store::count::counts`)
//! are readable; one test only, so that no other mount in the process adds to them.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

use scratchfs::mount::{Background, MountSpec};
use scratchfs::store::count::{StoreCounts, counts};

/// The requests answered so far, by name.
fn requests() -> BTreeMap<&'static str, u64> {
    scratchfs::fuse::requests()
        .into_iter()
        .map(|(r, n)| (r.name(), n))
        .collect()
}

/// `after - before`, by name, zeros left out.
fn delta(
    before: &BTreeMap<&'static str, u64>,
    after: &BTreeMap<&'static str, u64>,
) -> BTreeMap<&'static str, u64> {
    after
        .iter()
        .map(|(k, n)| (*k, n - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Waits until every handle opened so far has been released (the kernel sends RELEASE
/// after `close` returns, without waiting for it).
fn settle() {
    common::wait_for("every handle released", || {
        let r = requests();
        let n = |k: &str| r.get(k).copied().unwrap_or(0);
        n("release") >= n("open") + n("create")
    });
}

/// Runs `op` `n` times and returns the requests and store counts they cost, once every
/// release (sent by the kernel after `close` returns, without waiting) has been answered.
fn cost(n: u64, mut op: impl FnMut(u64)) -> (BTreeMap<&'static str, u64>, StoreCounts, f64) {
    settle();
    let (r0, s0, t0) = (requests(), counts(), Instant::now());
    for i in 0..n {
        op(i);
    }
    let secs = t0.elapsed().as_secs_f64();
    settle();
    (delta(&r0, &requests()), counts() - s0, secs)
}

/// Per operation: `total / n`, failing unless it divides evenly.
fn each(what: &str, total: u64, n: u64) -> u64 {
    assert_eq!(total % n, 0, "{what}: {total} for {n} operations");
    total / n
}

#[test]
fn a_create_and_an_append_cost_what_they_cost() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let pg = common::on_postgres();
    let db = if pg {
        std::path::PathBuf::from(common::new_pg_database())
    } else {
        dir.path().join("db")
    };
    let spec = MountSpec {
        mountpoint: mnt.clone(),
        db: db.clone(),
        owner: (0, 0),
        allow_other: false,
        list_views: false,
        rules: None,
        manifest_tokens: None,
        fsname: None,
        at: None,
    };
    let bg = Background::start(&spec)
        .unwrap_or_else(|e| panic!("cannot mount a scratchpad on {}: {e}", mnt.display()));
    let d = mnt.join("d");
    std::fs::create_dir(&d).unwrap();
    let data = vec![b'x'; 4096];
    let create = |name: String| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(d.join(name))
            .unwrap();
        f.write_all(&data).unwrap();
    };
    let log = d.join("log");
    let append = || {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&log)
            .unwrap();
        f.write_all(&[b'y'; 100]).unwrap();
    };
    // Warm: this process's identity resolved and its row stored, the statements prepared.
    create("warm".into());
    append();
    append();

    const N: u64 = 20;
    let (req, store, secs) = cost(N, |i| create(format!("f{i}")));
    eprintln!("create + 4 KiB + close, {N}: {req:?}, {store:?}, {secs:.3} s");
    // Per create: the kernel's LOOKUP of the new name and GETATTR of the directory (a
    // create in it dropped its attributes), then CREATE, WRITE, FLUSH (the commit) and
    // RELEASE. A name or directory entry the kernel had to look up again because its
    // 1 s TTL ran out during the loop (a busy machine) is one LOOKUP more per second.
    let slack = secs.ceil() as u64 + 1;
    for kind in ["create", "write", "flush", "release"] {
        assert_eq!(req.get(kind).copied(), Some(N), "{kind} requests: {req:?}");
    }
    let looked = req.get("lookup").copied().unwrap_or(0);
    let got = req.get("getattr").copied().unwrap_or(0);
    assert!(
        (N..=N + slack).contains(&looked) && got <= N + slack,
        "a create costs one LOOKUP and at most one GETATTR: {req:?}"
    );
    let total: u64 = req.values().sum();
    assert!(
        total <= 6 * N + slack,
        "a create + write + close costs 6 requests: {total} for {N}: {req:?}"
    );
    // Two changes: the create and its first version (at flush).
    assert_eq!(each("changes", store.changes, N), 2, "{store:?}");
    if pg {
        // Each change one round trip: the create's transaction, and the commit sent whole
        // since this daemon made the file's head itself.
        assert_eq!(each("round trips", store.round_trips, N), 2, "{store:?}");
    } else {
        // The create: savepoint, deleted-lineage query, files, nodes, tree_log, the
        // directory's times, release; the commit: savepoint, head query, stream, blob,
        // extent, version, release.
        assert_eq!(each("statements", store.statements, N), 14, "{store:?}");
        assert_eq!(store.round_trips, 0, "{store:?}");
    }

    let (req, store, secs) = cost(N, |_| append());
    eprintln!("open(O_APPEND) + 100 B + close, {N}: {req:?}, {store:?}, {secs:.3} s");
    let slack = secs.ceil() as u64 + 1;
    for kind in ["open", "write", "flush", "release"] {
        assert_eq!(req.get(kind).copied(), Some(N), "{kind} requests: {req:?}");
    }
    let total: u64 = req.values().sum();
    assert!(
        total <= 4 * N + slack,
        "an append costs 4 requests (OPEN, WRITE, FLUSH, RELEASE): {total} for {N}: {req:?}"
    );
    // One change: the version appended (at flush).
    assert_eq!(each("changes", store.changes, N), 1, "{store:?}");
    if pg {
        assert_eq!(each("round trips", store.round_trips, N), 1, "{store:?}");
    } else {
        // Savepoint, head query, extent, version, release.
        assert_eq!(each("statements", store.statements, N), 5, "{store:?}");
    }

    bg.stop().unwrap();
    if pg {
        common::drop_pg_database(db.to_str().unwrap());
    }
}
