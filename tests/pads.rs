//! `scratchfs pads list|create|archive` (issue 34 item 3; src/store/postgres/pads.rs):
//! many scratchpads in one PostgreSQL database, a schema each, for its administrator.
//! Made with a role for its host, mounted as that role, listed with its figures, archived
//! (refused while mounted; then no mount opens it for writing, and the host role's rights
//! to change rows are gone), and every bad input refused with a message and nothing
//! created. The attacker is uid 1000 with a host role's credentials: it cannot create,
//! archive, or read another scratchpad's figures.
//!
//! Needs `scripts/pg start` (as root) and `SCRATCHFS_PG_URL` (its roles `scratchfs_pad_a`
//! and `scratchfs_pad_b`); fails, never skips, without them.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::Mount;

/// Runs `scratchfs ARGS`, as uid 1000 when `agent`, for at most a minute.
fn scratchfs(args: &[&str], agent: bool) -> Output {
    let mut c = if agent {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            "1000",
            "--regid",
            "1000",
            "--clear-groups",
            common::BIN,
        ]);
        c
    } else {
        Command::new(common::BIN)
    };
    c.args(args).env("HOME", "/nonexistent");
    common::output_within("scratchfs pads", &mut c, Duration::from_secs(60))
}

/// Exit code, standard output and standard error of `o`.
fn parts(o: &Output) -> (Option<i32>, String, String) {
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Asserts that `o` failed with exit status 1 and a message holding `says`.
fn refused(o: &Output, says: &str) {
    let (code, out, err) = parts(o);
    assert_eq!(code, Some(1), "exit status; stdout {out}, stderr {err}");
    assert!(err.contains(says), "wanted {says:?} in: {err}");
}

/// The schemas of the database whose names start with `prefix`, comma-separated.
fn schemas(db: &str) -> String {
    common::pg_query(
        db,
        "SELECT COALESCE(string_agg(nspname, ',' ORDER BY nspname), '') FROM pg_namespace
         WHERE nspname NOT LIKE 'pg_%' AND nspname NOT IN ('public', 'information_schema')",
    )
}

/// The scratchpad `name` of `pads list --json` on `db`.
fn listed(db: &str, name: &str, agent: bool) -> serde_json::Value {
    let o = scratchfs(&["pads", "list", "--json", "--db", db], agent);
    let (code, out, err) = parts(&o);
    assert_eq!(code, Some(0), "{err}");
    let all: Vec<serde_json::Value> = serde_json::from_str(&out).expect(&out);
    all.into_iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in pads list: {out}"))
}

#[test]
fn pads_are_created_for_a_role_listed_archived_and_refused_to_others() {
    let db = common::new_pg_database();
    let _drop = common::DropPgDatabase(db.clone());
    let as_role = |role: &str, url: &str| url.replacen("scratchfs@", &format!("{role}@"), 1);
    assert!(as_role("x", &db).contains("x@"), "{db}");

    // An empty database has none.
    let (code, out, err) = parts(&scratchfs(&["pads", "list", "--db", &db], false));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("no scratchpads in "), "{out}");

    // Created, one per host role; the URL to mount it with is printed, password-free.
    for (pad, role) in [("alpha", "scratchfs_pad_a"), ("beta", "scratchfs_pad_b")] {
        let (code, out, err) = parts(&scratchfs(
            &["pads", "create", pad, "--role", role, "--db", &db],
            false,
        ));
        assert_eq!(code, Some(0), "{err}");
        assert!(
            out.contains(&format!("options=-csearch_path%3D{pad}'"))
                && out.contains(&format!("--db 'postgres://{role}@")),
            "the URL its host mounts with, as its role: {out}"
        );
    }
    assert_eq!(schemas(&db), "alpha,beta");

    // Bad input: each refused, saying why, exit 1, nothing created.
    refused(
        &scratchfs(&["pads", "create", "alpha", "--db", &db], false),
        "a schema alpha exists already",
    );
    refused(
        &scratchfs(&["pads", "create", "Gamma-1", "--db", &db], false),
        "\"Gamma-1\" is not a scratchpad name",
    );
    refused(
        &scratchfs(
            &[
                "pads",
                "create",
                "gamma",
                "--role",
                "no_such_role",
                "--db",
                &db,
            ],
            false,
        ),
        "no role \"no_such_role\" on the server; nothing was created",
    );
    refused(
        &scratchfs(&["pads", "archive", "alpah", "--db", &db], false),
        "no scratchpad named alpah",
    );
    refused(
        &scratchfs(&["pads", "list", "--db", "/tmp/not-a-url.db"], false),
        "not a PostgreSQL URL",
    );
    refused(
        &scratchfs(&["pads", "list", "--db", "scratchpad.db"], false),
        "give the PostgreSQL database with --db",
    );
    assert_eq!(schemas(&db), "alpha,beta");

    // Host a mounts its scratchpad as its role and works in it.
    let url_a = as_role("scratchfs_pad_a", &db);
    let pad_a = |pad: &str| format!("{url_a}&options=-csearch_path%3D{pad}");
    let a = Mount::on_db(&pad_a("alpha"));
    a.sh_ok("echo 'step 1' > plan.md && echo 'step 2' >> plan.md");
    let alpha = listed(&db, "alpha", false);
    assert_eq!(alpha["daemons"], 1, "{alpha}");
    assert!(alpha["versions"].as_i64().unwrap() >= 2, "{alpha}");
    assert!(alpha["files"].as_i64().unwrap() >= 1, "{alpha}");
    assert!(alpha["bytes"].as_i64().unwrap() > 0, "{alpha}");
    assert_eq!(alpha["archived"], serde_json::Value::Null);

    // The attacker: uid 1000 with host a's credentials. It lists beta without its
    // figures, and may neither create a scratchpad nor archive one (its own included).
    let beta = listed(&url_a, "beta", true);
    assert_eq!(beta["files"], serde_json::Value::Null, "{beta}");
    assert_eq!(beta["versions"], serde_json::Value::Null, "{beta}");
    refused(
        &scratchfs(&["pads", "create", "evil", "--db", &url_a], true),
        "ermission denied",
    );
    for pad in ["alpha", "beta"] {
        refused(
            &scratchfs(&["pads", "archive", pad, "--db", &url_a], true),
            &format!("only the owner of scratchpad {pad}'s tables (scratchfs) may archive it"),
        );
    }
    assert_eq!(schemas(&db), "alpha,beta");
    assert_eq!(
        listed(&db, "alpha", false)["archived"],
        serde_json::Value::Null
    );

    // A search path naming PostgreSQL's own schemas (a session's temporary one) is
    // refused, nothing created.
    let dir = tempfile::tempdir().unwrap();
    // A host's URL without its scratchpad's search path is told how to name it (not
    // to mount as the owner).
    refused(
        &scratchfs(
            &["mount", dir.path().to_str().unwrap(), "--db", &url_a],
            false,
        ),
        "the search path is public, which holds no scratchpad",
    );
    for schema in ["pg_temp", "pg_catalog"] {
        refused(
            &scratchfs(
                &[
                    "mount",
                    dir.path().to_str().unwrap(),
                    "--db",
                    &pad_a(schema),
                ],
                false,
            ),
            "is PostgreSQL's own",
        );
    }
    // It plants an `archived` row of its own (with a terminal escape) and hides the row a
    // mount looks for: neither decides what the owner's commands see or do.
    let mut attacker = common::pg_client(&pad_a("alpha"));
    attacker
        .batch_execute(
            "INSERT INTO alpha.meta(key, value)
             VALUES ('archived', E'2025-01-01T00:00:00Z by scratchfs\\033[2J');
             UPDATE alpha.meta SET key = 'hidden' WHERE key = 'schema_version'",
        )
        .unwrap();
    let alpha = listed(&db, "alpha", false);
    assert_eq!(
        alpha["archived"], "2025-01-01T00:00:00Z by scratchfs?[2J",
        "printed without its escape: {alpha}"
    );
    attacker
        .batch_execute("UPDATE alpha.meta SET key = 'schema_version' WHERE key = 'hidden'")
        .unwrap();

    // Archiving a mounted scratchpad is refused; unmounted, it is archived.
    refused(
        &scratchfs(&["pads", "archive", "alpha", "--db", &db], false),
        "scratchpad alpha is mounted by 1 daemon(s): unmount them first",
    );
    drop(a);
    let (code, out, err) = parts(&scratchfs(
        &["pads", "archive", "alpha", "--json", "--db", &db],
        false,
    ));
    assert_eq!(code, Some(0), "{err}");
    let done: serde_json::Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(
        done["revoked"],
        serde_json::json!(["scratchfs_pad_a"]),
        "{done}"
    );
    let at = done["archived"].as_str().unwrap().to_owned();
    assert!(
        at.ends_with(" by scratchfs") && !at.starts_with("2025"),
        "the owner's record, not the planted one: {at}"
    );
    assert_eq!(listed(&db, "alpha", false)["archived"], at.as_str());
    // Again: nothing to do, said so.
    let (code, out, _) = parts(&scratchfs(
        &["pads", "archive", "alpha", "--db", &db],
        false,
    ));
    assert_eq!(code, Some(0));
    assert!(out.contains("was archived already"), "{out}");

    // No mount opens it for writing, the host's nor the owner's ...
    let owner_alpha = format!("{db}&options=-csearch_path%3Dalpha");
    for url in [pad_a("alpha"), owner_alpha] {
        refused(
            &scratchfs(
                &["mount", dir.path().to_str().unwrap(), "--db", &url],
                false,
            ),
            "this scratchpad was archived",
        );
    }
    // ... it is read at the time it was archived ...
    let time = at.split(' ').next().unwrap();
    let ro = Mount::on_db_with(&pad_a("alpha"), &["--at", time]);
    assert_eq!(common::read(ro.path("plan.md")), "step 1\nstep 2\n");
    let e = std::fs::write(ro.path("plan.md"), "x\n").expect_err("a write to an archive");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    drop(ro);
    // ... and the host role can no longer change its rows with SQL of its own.
    let mut c = common::pg_client(&pad_a("alpha"));
    common::pg_refuses(
        &mut c,
        "INSERT INTO alpha.meta(key, value) VALUES ('x', 'y')",
        "the host role writes an archived scratchpad's rows",
    );
    common::pg_refuses(
        &mut c,
        "DELETE FROM alpha.fields",
        "the host role deletes an archived scratchpad's rows",
    );
    // beta is as it was: its host mounts and writes, on two daemons (so that its
    // changes are notified) ...
    let url_b = format!(
        "{}&options=-csearch_path%3Dbeta",
        as_role("scratchfs_pad_b", &db)
    );
    // Host a holds the database-wide schema lock of earlier builds (advisory locks carry
    // no privilege): beta's mounts take beta's own, and do not wait for it.
    attacker
        .batch_execute(&format!("SELECT pg_advisory_lock({})", 0x5343_5246))
        .unwrap();
    let (b, b2) = (Mount::on_db(&url_b), Mount::on_db(&url_b));
    // ... and host a, listening on every channel it can name for beta (from the schema's
    // name, as in session 25), hears none of it: beta's channel is a secret of its readers.
    let guessed = [
        format!("scratchfs_{}", &blake3::hash(b"beta").to_hex()[..16]),
        "scratchfs".to_owned(),
        scratchfs::store::postgres::notify::PadKeys::of_pad("beta", "").channel,
    ];
    let mut ears = common::pg_client(&pad_a("alpha"));
    for ch in &guessed {
        ears.batch_execute(&format!("LISTEN \"{ch}\"")).unwrap();
    }
    ears.batch_execute("LISTEN control").unwrap();
    b.sh_ok("echo b > plan.md && echo b > more.md");
    common::wait_for("b2 sees b's file", || b2.path("more.md").exists());
    // Notifications reach a listener in commit order: once the control one (committed
    // after beta's changes) arrives, any of beta's it could hear would have come first.
    common::pg_query(&db, "NOTIFY control");
    let mut heard = Vec::new();
    let mut control = false;
    let mut notifications = ears.notifications();
    let mut arriving = notifications.timeout_iter(Duration::from_secs(60));
    while let Some(n) = postgres::fallible_iterator::FallibleIterator::next(&mut arriving)
        .expect("the listening connection")
    {
        if n.channel() == "control" {
            control = true;
            break;
        }
        heard.push(format!("{}: {}", n.channel(), n.payload()));
    }
    assert!(
        control,
        "the control notification did not arrive within 60 s"
    );
    assert_eq!(heard, Vec::<String>::new(), "host a heard beta's changes");
    let (code, out, err) = parts(&scratchfs(&["pads", "list", "--db", &db], false));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("archived "), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("beta ") && l.ends_with("active")),
        "{out}"
    );
}
