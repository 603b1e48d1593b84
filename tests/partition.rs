//! Partitions between a daemon and PostgreSQL (issue 34 item 4). A daemon reaches the
//! server through a TCP relay in this test process that can stop forwarding (a network
//! partition that drops traffic without a reset: the server and the other daemons go
//! on), and with `SCRATCHFS_PG_TIMEOUT` short: a write fails with EIO within a bounded
//! time, what the daemon holds stays readable, nothing acknowledged is lost, and once the
//! relay forwards again the daemon catches up on what it missed and writes again, without
//! a remount. And a clean unmount ends every session with the protocol's Terminate. Needs
//! `SCRATCHFS_PG_URL` (`scripts/pg start`); fails, never skips, without.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{DropPgDatabase, Mount, new_pg_database, pg_query, pg_url};

/// A TCP relay to `upstream` that forwards while `cut` is false and holds every byte
/// (in both directions, on every connection, new ones included) while it is true.
struct Relay {
    port: u16,
    cut: Arc<AtomicBool>,
}

impl Relay {
    fn to(upstream: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let c = cut.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let c = c.clone();
                    std::thread::spawn(move || pump(from, to, &c));
                }
            }
        });
        Relay { port, cut }
    }
}

/// Copies `from` to `to` until either end closes, holding the bytes while `cut`.
fn pump(mut from: TcpStream, mut to: TcpStream, cut: &AtomicBool) {
    from.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if cut.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

/// `url` with its `host:port` replaced by the relay's.
fn through(url: &str, relay: &Relay) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (auth, rest) = rest.split_once('@').map_or(("", rest), |(a, r)| (a, r));
    let path = &rest[rest.find(['/', '?']).unwrap_or(rest.len())..];
    let at = if auth.is_empty() { "" } else { "@" };
    format!("{scheme}://{auth}{at}127.0.0.1:{}{path}", relay.port)
}

fn upstream(url: &str) -> String {
    let rest = url.split_once("://").unwrap().1;
    let rest = rest.split_once('@').map_or(rest, |(_, r)| r);
    rest[..rest.find(['/', '?']).unwrap_or(rest.len())].to_owned()
}

/// Polls `f` until it returns `Some`, for at most 120 s, then fails naming `what`.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "within 120 s: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Writes `data` to a new `path` and closes it, returning the close's error too (a
/// scratchfs file commits at close; `std::fs::write` ignores what close says).
fn write_closed(path: &std::path::Path, data: &str) -> std::io::Result<()> {
    use std::os::fd::IntoRawFd;
    let mut f = std::fs::File::create(path)?;
    f.write_all(data.as_bytes())?;
    let fd = f.into_raw_fd();
    if unsafe { libc::close(fd) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The round-trip timeout the cut-off daemon runs with (seconds).
const TIMEOUT_S: u64 = 3;

#[test]
fn a_partition_fails_writes_with_eio_in_bounded_time_keeps_reads_and_heals() {
    let db = common::new_pg_database();
    let _drop = common::DropPgDatabase(db.clone());
    let relay = Relay::to(upstream(&db));
    let timeout = TIMEOUT_S.to_string();
    let a = Mount::on_db_with_env(
        &through(&db, &relay),
        &[
            ("SCRATCHFS_PG_TIMEOUT", &timeout),
            ("RUST_LOG", "warn,scratchfs=info"),
        ],
    );
    let b = Mount::on_db(&db);
    write_closed(&a.path("kept.md"), "acknowledged before\n").unwrap();
    std::fs::write(b.path("from-b.md"), "b before\n").unwrap();
    wait_for("a sees b's file", || {
        a.path("from-b.md").exists().then_some(())
    });
    assert_eq!(common::read(a.path("kept.md")), "acknowledged before\n");

    relay.cut.store(true, Ordering::SeqCst);
    // A write on the cut-off daemon fails with EIO, within a bounded time (its round
    // trips and its reconnection each give up after the timeout).
    let started = Instant::now();
    let err = write_closed(&a.path("during.md"), "not acknowledged\n")
        .expect_err("a write while the daemon cannot reach PostgreSQL");
    let took = started.elapsed();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(
        took < Duration::from_secs(4 * TIMEOUT_S + 10),
        "EIO after {took:?}, with a timeout of {TIMEOUT_S} s"
    );
    // What the daemon holds stays readable: names, attributes, listings.
    for _ in 0..3 {
        let meta = std::fs::metadata(a.path("kept.md")).expect("stat during the partition");
        assert_eq!(meta.len(), "acknowledged before\n".len() as u64);
        let names: Vec<String> = std::fs::read_dir(&a.mnt)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.contains(&"from-b.md".to_owned()), "{names:?}");
    }
    // The other daemon goes on meanwhile.
    std::fs::write(b.path("while-cut.md"), "b during the partition\n").unwrap();
    // Wait until a has noticed its listening connection is gone (it then reloads when
    // back, since it may have missed notifications).
    wait_for("a notices the partition", || {
        a.daemon_log()
            .contains("listening for other daemons' changes")
            .then_some(())
    });

    relay.cut.store(false, Ordering::SeqCst);
    // Healed, without a remount: a catches up on what it missed, and writes again.
    wait_for("a catches up on b's write", || {
        (std::fs::read_to_string(a.path("while-cut.md")).ok()? == "b during the partition\n")
            .then_some(())
    });
    wait_for("a writes again", || {
        write_closed(&a.path("after.md"), "a after\n").ok()
    });
    wait_for("b sees a's write after the partition", || {
        (std::fs::read_to_string(b.path("after.md")).ok()? == "a after\n").then_some(())
    });
    // Nothing acknowledged was lost, on either daemon.
    for m in [&a, &b] {
        assert_eq!(common::read(m.path("kept.md")), "acknowledged before\n");
        assert_eq!(common::read(m.path("from-b.md")), "b before\n");
    }
}

/// A clean unmount ends each of the daemon's sessions as the protocol says (a Terminate
/// message): the server counts none of them as abandoned (`pg_stat_database`'s
/// `sessions_abandoned`, PostgreSQL 14+), where the listener's (and the writer's and
/// readers', whenever the process exited before they were dropped) ended each unmount
/// with `could not receive data from client: Connection reset by peer` in the server's
/// log.
#[test]
fn a_clean_unmount_ends_every_session_with_a_terminate() {
    let url = new_pg_database();
    let _drop = DropPgDatabase(url.clone());
    let name = url
        .split('?')
        .next()
        .and_then(|p| p.rsplit('/').next())
        .unwrap()
        .to_string();
    let mut m = Mount::on_db(&url);
    m.sh_ok("echo hi > a && cat a && ls -l");
    m.unmount();
    let stats = || {
        let row = pg_query(
            &pg_url(),
            &format!(
                "SELECT (SELECT COUNT(*) FROM pg_stat_activity WHERE datname = '{name}'),
                        sessions, sessions_abandoned
                 FROM pg_stat_database WHERE datname = '{name}'"
            ),
        );
        let v: Vec<i64> = row.trim().split('|').map(|x| x.parse().unwrap()).collect();
        (v[0], v[1], v[2])
    };
    let (sessions, abandoned) = wait_for("the daemon's sessions to end and be counted", || {
        let (live, sessions, abandoned) = stats();
        (live == 0 && sessions >= 3).then_some((sessions, abandoned))
    });
    assert_eq!(abandoned, 0, "{abandoned} of {sessions} sessions abandoned");
}

/// The `stop` notification that ends a daemon's listener at its unmount is obeyed only
/// when that daemon sent it: another session of the role (any client that can
/// `NOTIFY`) sending the same text leaves it listening, so it goes on hearing the other
/// daemons' changes.
#[test]
fn a_stop_sent_by_another_session_leaves_the_listener_listening() {
    let url = new_pg_database();
    let _drop = DropPgDatabase(url.clone());
    let a = Mount::on_db(&url);
    let name = wait_for("the daemon to register", || {
        let n = pg_query(&url, "SELECT name FROM daemons");
        (!n.trim().is_empty()).then(|| n.trim().to_string())
    });
    pg_query(&url, &format!("NOTIFY scratchfs, '{name} stop'"));
    let b = Mount::on_db(&url);
    b.sh_ok("echo from-b > late.txt");
    wait_for("the first daemon to hear the second's change", || {
        (std::fs::read_to_string(a.path("late.txt")).ok().as_deref() == Some("from-b\n"))
            .then_some(())
    });
}
