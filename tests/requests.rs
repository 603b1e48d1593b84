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

/// What one operation costs: the requests of kinds `each_once` exactly once each, at most
/// `requests` requests in all, and exactly `changes` store changes, `statements` SQLite
/// statements (on SQLite) or `round_trips` PostgreSQL round trips (on PostgreSQL).
struct Expect {
    what: &'static str,
    each_once: &'static [&'static str],
    requests: u64,
    changes: u64,
    statements: u64,
    round_trips: u64,
}

impl Expect {
    /// Checks the cost of `n` operations that took `secs`, and returns the slack allowed
    /// for requests: a name or directory entry the kernel looked up again because its 1 s
    /// TTL ran out during the loop (a busy machine) is one LOOKUP more per second.
    fn check(
        &self,
        n: u64,
        req: &BTreeMap<&'static str, u64>,
        store: StoreCounts,
        secs: f64,
        pg: bool,
    ) -> u64 {
        let what = self.what;
        let slack = secs.ceil() as u64 + 1;
        for kind in self.each_once {
            assert_eq!(
                req.get(kind).copied(),
                Some(n),
                "{what}: {kind} requests: {req:?}"
            );
        }
        let total: u64 = req.values().sum();
        assert!(
            total <= self.requests * n + slack,
            "{what} costs {} requests: {total} for {n}: {req:?}",
            self.requests
        );
        assert_eq!(
            each("changes", store.changes, n),
            self.changes,
            "{what}: {store:?}"
        );
        if pg {
            let trips = each("round trips", store.round_trips, n);
            assert_eq!(trips, self.round_trips, "{what}: {store:?}");
        } else {
            let statements = each("statements", store.statements, n);
            assert_eq!(statements, self.statements, "{what}: {store:?}");
            assert_eq!(store.round_trips, 0, "{what}: {store:?}");
        }
        slack
    }
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
        owner_given: false,
        allow_other: false,
        list_views: false,
        rules: None,
        manifest_tokens: None,
        fsname: None,
        at: None,
    };
    let bg = Background::start(&spec)
        .unwrap_or_else(|e| panic!("cannot mount a scratchpad on {}: {e}", mnt.display()));
    if pg {
        // The listener's first connection is followed by a whole refresh (a ping and a
        // read of the tree), at a moment the mount does not wait for: not in what is
        // counted below.
        common::wait_for("the listener's first refresh", || {
            bg.fs().whole_refreshes() >= 1
        });
    }
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
    // RELEASE. Two changes: the create and its first version (at flush). SQLite: the
    // create's savepoint, files (one statement unless a deleted lineage is there to
    // continue), nodes, tree_log, the directory's times, release; the commit's savepoint, head query, stream, blob, extent, version,
    // release. PostgreSQL: each change one round trip (the commit sent whole, since this
    // daemon made the file's head itself).
    let create_cost = Expect {
        what: "a create + write + close",
        each_once: &["create", "write", "flush", "release"],
        requests: 6,
        changes: 2,
        statements: 13,
        round_trips: 2,
    };
    let slack = create_cost.check(N, &req, store, secs, pg);
    let looked = req.get("lookup").copied().unwrap_or(0);
    let got = req.get("getattr").copied().unwrap_or(0);
    assert!(
        (N..=N + slack).contains(&looked) && got <= N + slack,
        "a create costs one LOOKUP and at most one GETATTR: {req:?}"
    );

    let (req, store, secs) = cost(N, |_| append());
    eprintln!("open(O_APPEND) + 100 B + close, {N}: {req:?}, {store:?}, {secs:.3} s");
    // One change, the version appended at flush: savepoint, head query, extent, version,
    // release.
    let append_cost = Expect {
        what: "an append",
        each_once: &["open", "write", "flush", "release"],
        requests: 4,
        changes: 1,
        statements: 5,
        round_trips: 1,
    };
    append_cost.check(N, &req, store, secs, pg);

    bg.stop().unwrap();
    if pg {
        common::drop_pg_database(db.to_str().unwrap());
    }
}
