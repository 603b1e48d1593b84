//! TLS to PostgreSQL (issue 34 item 1; src/store/postgres/tls.rs) against the throwaway
//! server of scripts/pg, which takes TLS with a certificate its test CA signed for
//! 127.0.0.1 and localhost, and has two roles for these tests: `scratchfs_tls` (TLS only)
//! and `scratchfs_cert` (TLS with its client certificate only). Each way a connection is
//! refused is checked for the message that says which: a wrong CA, a wrong host name, a
//! server that offers no TLS, a plain-text login the server rejects, a missing client
//! certificate; and bad input (a missing or unreadable certificate file, an unknown
//! parameter) for a clear message, exit 1, and nothing created. A real mount with
//! `verify-full` and a client certificate writes and reads a file.
//!
//! Needs `scripts/pg start` (as root) and `SCRATCHFS_PG_URL`; the certificates are read
//! from /var/tmp/scratchfs-pg/tls (scripts/pg's). Fails, never skips, without them.

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use scratchfs::p;
use scratchfs::store::ErrorKind;
use scratchfs::store::postgres::PgConn;
use scratchfs::store::sql::{Conn, ConnExt};

/// scripts/pg's certificate directory.
fn tls_dir() -> PathBuf {
    let d = PathBuf::from("/var/tmp/scratchfs-pg/tls");
    assert!(
        d.join("ca.crt").exists() && d.join("client.key").exists(),
        "{}: no test certificates; run `scripts/pg start` (as root), which makes them",
        d.display()
    );
    d
}

/// `host:port` of the tests' server (from `SCRATCHFS_PG_URL`).
fn server() -> String {
    let url = common::pg_url();
    let rest = url.split_once('@').map_or(url.as_str(), |(_, r)| r);
    rest.split(['/', '?']).next().unwrap().to_owned()
}

/// A URL to the tests' server as `role` on the database `db`, with `query`.
fn url(role: &str, db: &str, query: &str) -> String {
    format!("postgres://{role}@{}/{db}?{query}", server())
}

fn verify_full(dir: &std::path::Path, ca: &str) -> String {
    format!("sslmode=verify-full&sslrootcert={}", dir.join(ca).display())
}

/// Whether the session runs over TLS, as the server sees it.
fn server_says_tls(c: &PgConn) -> bool {
    c.value::<bool>(
        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        p![],
    )
    .unwrap()
}

fn refused(url: &str) -> scratchfs::store::StoreError {
    match PgConn::connect(url) {
        Ok(_) => panic!("{url}: connected, but should have been refused"),
        Err(e) => e,
    }
}

#[test]
fn verify_full_connects_over_tls_and_each_wrong_server_is_refused_saying_why() {
    let dir = tls_dir();
    // The right CA and the name the certificate is for: TLS, as the server sees it.
    let c = PgConn::connect(&url("scratchfs", "scratchfs", &verify_full(&dir, "ca.crt"))).unwrap();
    assert!(server_says_tls(&c));
    let c = PgConn::connect(&url("scratchfs", "scratchfs", "sslmode=require")).unwrap();
    assert!(server_says_tls(&c), "require encrypts without checking");
    let c = PgConn::connect(&url("scratchfs", "scratchfs", "sslmode=disable")).unwrap();
    assert!(!server_says_tls(&c), "disable is plain text");

    // A CA that did not sign the server's certificate.
    let e = refused(&url(
        "scratchfs",
        "scratchfs",
        &verify_full(&dir, "other-ca.crt"),
    ));
    assert_eq!(e.kind, ErrorKind::Denied, "{e}");
    assert!(
        e.reason.contains("not signed by a CA in sslrootcert") && e.reason.contains("other-ca.crt"),
        "{e}"
    );
    // verify-ca checks the CA too.
    let e = refused(&url(
        "scratchfs",
        "scratchfs",
        &format!(
            "sslmode=verify-ca&sslrootcert={}",
            dir.join("other-ca.crt").display()
        ),
    ));
    assert!(e.reason.contains("not signed by a CA"), "{e}");

    // The right CA, a name the certificate is not for (the address is the server's).
    let port = server().rsplit_once(':').unwrap().1.to_owned();
    let wrong_host = format!(
        "postgres://scratchfs@wrong.example:{port}/scratchfs?hostaddr=127.0.0.1&{}",
        verify_full(&dir, "ca.crt")
    );
    let e = refused(&wrong_host);
    assert_eq!(e.kind, ErrorKind::Denied, "{e}");
    assert!(
        e.reason
            .contains("not valid for the host name \"wrong.example\""),
        "{e}"
    );
    // verify-ca does not check the name.
    let c = PgConn::connect(&wrong_host.replace("verify-full", "verify-ca")).unwrap();
    assert!(server_says_tls(&c));

    // The server rejects a plain-text login of a role it allows over TLS only.
    let e = refused(&url("scratchfs_tls", "scratchfs", "sslmode=disable"));
    assert_eq!(e.kind, ErrorKind::Denied, "{e}");
    assert!(e.reason.contains("no encryption"), "{e}");
    let c = PgConn::connect(&url(
        "scratchfs_tls",
        "scratchfs",
        &verify_full(&dir, "ca.crt"),
    ))
    .unwrap();
    assert!(server_says_tls(&c));
}

#[test]
fn a_server_that_offers_no_tls_gets_nothing_in_plain_text() {
    // A server that answers PostgreSQL's SSLRequest with 'N' (no TLS), and records every
    // byte it was sent after that.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut request = [0u8; 8];
        s.read_exact(&mut request).unwrap();
        s.write_all(b"N").unwrap();
        let mut after = Vec::new();
        let _ = s.read_to_end(&mut after);
        (request, after)
    });
    let dir = tls_dir();
    let e = refused(&format!(
        "postgres://scratchfs:secret-password@127.0.0.1:{port}/scratchfs?{}",
        verify_full(&dir, "ca.crt")
    ));
    assert_eq!(e.kind, ErrorKind::Denied, "{e}");
    assert!(
        e.reason
            .contains("the server does not offer TLS, and sslmode=verify-full requires it"),
        "{e}"
    );
    let (request, after) = fake.join().unwrap();
    // SSLRequest: length 8, code 80877103 (PostgreSQL protocol, "SSLRequest").
    assert_eq!(request, [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);
    assert!(
        after.is_empty(),
        "sent in plain text after the refusal: {after:?}"
    );
}

#[test]
fn a_client_certificate_logs_in_and_a_mount_over_verify_full_writes_and_reads() {
    let dir = tls_dir();
    let cert = format!(
        "{}&sslcert={}&sslkey={}",
        verify_full(&dir, "ca.crt"),
        dir.join("client.crt").display(),
        dir.join("client.key").display()
    );
    // Without its certificate, scratchfs_cert is refused by the server.
    let e = refused(&url(
        "scratchfs_cert",
        "scratchfs",
        &verify_full(&dir, "ca.crt"),
    ));
    assert!(
        e.reason.contains("certificate") && e.kind == ErrorKind::Denied,
        "{e}"
    );
    // With it, it logs in as itself and makes a database of its own.
    let c = PgConn::connect(&url("scratchfs_cert", "scratchfs", &cert)).unwrap();
    assert!(server_says_tls(&c));
    assert_eq!(
        c.value::<String>("SELECT current_user::text", p![])
            .unwrap(),
        "scratchfs_cert"
    );
    let name = format!(
        "t_{}_999999_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    c.batch(&format!("CREATE DATABASE {name}")).unwrap();
    drop(c);
    let db = url("scratchfs_cert", &name, &cert);
    // Dropped by its owner, scratchfs_cert (the tests' role may not), at the end.
    struct DropAsOwner(String, String);
    impl Drop for DropAsOwner {
        fn drop(&mut self) {
            if let Ok(c) = PgConn::connect(&self.0) {
                let _ = c.batch(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.1));
            }
        }
    }
    let _drop = DropAsOwner(url("scratchfs_cert", "scratchfs", &cert), name.clone());

    // A real mount on it, as a harness would start one.
    let m = common::Mount::on_db(&db);
    std::fs::write(m.path("notes.md"), "over TLS\n").unwrap();
    assert_eq!(common::read(m.path("notes.md")), "over TLS\n");
    // The daemon's sessions are TLS sessions of scratchfs_cert (asked as that role:
    // pg_stat_ssl shows a session's TLS only to its own role or a superuser).
    let probe = PgConn::connect(&db).unwrap();
    let sessions: String = probe
        .value(
            "SELECT COUNT(*) || '|' || COUNT(*) FILTER (WHERE s.ssl AND a.usename = 'scratchfs_cert')
             FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()",
            p![],
        )
        .unwrap();
    let (all, tls) = sessions.split_once('|').unwrap();
    assert!(all.parse::<u32>().unwrap() >= 2, "{sessions}");
    assert_eq!(
        all, tls,
        "every session of the daemon is TLS as scratchfs_cert"
    );
    // The CLI reads it over the same URL.
    let (code, out, err) = common::cli(&m, &["history", "notes.md"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("notes.md") || out.contains("v1"), "{out}");
}

/// Runs `scratchfs mount` on `db`: (exit code, stderr), within 60 s.
fn mount_refused(db: &str) -> (i32, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = common::output_within(
        "a mount that should be refused",
        Command::new(common::BIN)
            .arg("mount")
            .arg(&mnt)
            .arg("--db")
            .arg(db),
        Duration::from_secs(60),
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        dir,
    )
}

#[test]
fn bad_tls_input_gets_a_clear_message_exit_1_and_nothing_created() {
    let dir = tls_dir();
    let db = common::new_pg_database();
    let name = common::pg_database_of(&db).to_owned();
    let on = |query: &str| url("scratchfs", &name, query);
    let unreadable = tempfile::tempdir().unwrap();
    let cases = [
        (
            on("sslmode=verify-full&sslrootcert=/nonexistent/ca.crt"),
            "sslrootcert: /nonexistent/ca.crt: No such file",
        ),
        (
            // A directory where a file should be: unreadable as a file.
            on(&format!(
                "sslmode=verify-full&sslrootcert={}",
                unreadable.path().display()
            )),
            "sslrootcert:",
        ),
        (
            on(&format!(
                "sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey=/nonexistent/k.key",
                dir.join("ca.crt").display(),
                dir.join("client.crt").display()
            )),
            "sslkey: /nonexistent/k.key",
        ),
        (
            on(&format!(
                "sslmode=verify-full&sslrootcert={}",
                dir.join("client.key").display()
            )),
            "no certificate in it",
        ),
        (on("sslmode=verify-full"), "needs a root certificate"),
        (on("sslmode=require&sslmodee=x"), "sslmodee"),
        (on("sslcrl=/x.crl"), "sslcrl is not supported"),
        (on("sslmode=maybe"), "\"maybe\" is not a sslmode"),
    ];
    for (db, want) in &cases {
        let (code, err, _dir) = mount_refused(db);
        assert_eq!(code, 1, "{db}: {err}");
        assert!(err.contains(want), "{db}: wanted {want:?} in: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    // Nothing was created in the database.
    assert_eq!(
        common::pg_query(
            &common::pg_url_of(&common::pg_url(), &name),
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ),
        "0"
    );
    common::drop_pg_database(&db);
}
