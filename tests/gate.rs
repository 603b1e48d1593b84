//! The policy gate (issue 9) on a real mount, as an unprivileged agent (uid 1000) on an
//! `--owner` mount with writer rules: each bypass found before the gate existed is a
//! named regression test, and each checks that the refusal is on record and that the
//! protected content and its history are unchanged.

mod common;
use common::*;

const RULES: &str = r#"{
  "writers": {
    "agent":     { "uid": 1000 },
    "get_order": { "env": "get_order" },
    "human":     { "uid": 0 }
  },
  "paths": [
    { "path": "orders/**",   "writers": ["get_order", "human"] },
    { "path": "orders",      "writers": ["*"] },
    { "path": "frozen/**",   "mode": "write-once" },
    { "path": "frozen",      "writers": ["*"] },
    { "path": "findings.md", "mode": "append-only" },
    { "path": "state.json",  "format": "json",
      "fields": { "order_total_cents": { "writers": ["get_order"], "type": "integer" },
                  "note": { "writers": ["*"] } } },
    { "path": "*.json",      "format": "json",
      "fields": { "credit_cents": { "writers": ["get_order"] } } },
    { "path": "vault/**",    "deny_secrets": true, "max_bytes": 200 },
    { "path": "vault",       "writers": ["*"] },
    { "path": "**",          "writers": ["*"] }
  ]
}"#;

const AGENT: &str = "setpriv --reuid 1000 --regid 1000 --clear-groups";
const SECRET: &str = "AKIAIOSFODNN7EXAMPLE";

fn mount() -> Mount {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.json");
    std::fs::write(&rules, RULES).unwrap();
    let m = Mount::with_args(&["--rules", rules.to_str().unwrap(), "--owner", "1000:1000"]);
    std::mem::forget(dir);
    // The tools' files, written as get_order (root, tagged) and opened to all by POSIX
    // bits, so that the rules and not the kernel decide.
    m.sh_ok(
        "umask 000 && mkdir -p orders frozen vault && chmod 777 . && \
         SCRATCHFS_WRITER=get_order bash -c 'echo o1 > orders/o1' && echo v1 > frozen/f && \
         chmod 666 state.json && \
         SCRATCHFS_WRITER=get_order python3 -c 'import json; json.dump({\"order_total_cents\": 18000, \"note\": \"n\"}, open(\"state.json\", \"w\"))'",
    );
    m
}

/// Runs `script` as the agent; returns (success, stdout, stderr).
fn agent(m: &Mount, script: &str) -> (bool, String, String) {
    let o = m.sh(&format!(
        "{AGENT} bash -c '{}'",
        script.replace('\'', r"'\''")
    ));
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Writes a script the agent (another uid) can read; returns its directory (removed when
/// dropped: keep it while the script runs) and its path.
fn script(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("scratchfs-gate-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    (dir, path)
}

/// Fails when any file of the store (database, WAL, shared memory, redo log) holds
/// `SECRET`; `what` says what was tried.
fn assert_no_secret_at_rest(m: &Mount, what: &str) {
    assert_not_at_rest(m, SECRET, what);
}

/// No byte of `secret` in the store: on SQLite in the database's files (main, WAL, shm,
/// redo log); on PostgreSQL in any content (blobs, inline extents) or recorded text
/// (reasons, command lines, executables, JSON keys, checkpoint notes). `secret` is plain
/// ASCII.
fn assert_not_at_rest(m: &Mount, secret: &str, what: &str) {
    if on_postgres() {
        let n = m.sql(&format!(
            "SELECT (SELECT COUNT(*) FROM blobs WHERE position(convert_to('{secret}', 'UTF8') in data) > 0)
                  + (SELECT COUNT(*) FROM extents
                     WHERE data IS NOT NULL AND position(convert_to('{secret}', 'UTF8') in data) > 0)
                  + (SELECT COUNT(*) FROM events WHERE position('{secret}' in COALESCE(reason, '')) > 0)
                  + (SELECT COUNT(*) FROM processes WHERE position('{secret}' in argv) > 0)
                  + (SELECT COUNT(*) FROM processes WHERE position('{secret}' in exe) > 0)
                  + (SELECT COUNT(*) FROM fields WHERE position('{secret}' in key) > 0)
                  + (SELECT COUNT(*) FROM checkpoints
                     WHERE position('{secret}' in COALESCE(note, '')) > 0)"
        ));
        assert_eq!(n.trim(), "0", "the database holds {secret} ({what})");
        return;
    }
    m.sql("SELECT 1"); // sync: every answered change is in SQLite
    for suffix in ["", "-wal", "-shm", "-redo"] {
        let p = format!("{}{suffix}", m.db.display());
        if let Ok(bytes) = std::fs::read(&p) {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{p} holds {secret} ({what})"
            );
        }
    }
}

fn refused(m: &Mount) -> String {
    cli(m, &["log", "--rejected"]).1
}

#[test]
fn a_directory_rename_cannot_carry_a_protected_file_past_its_rule() {
    let m = mount();
    let before = m.versions("orders/o1");
    let (ok, _, err) = agent(&m, "mv orders x && rm x/o1 && mv x orders");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    assert_eq!(read(m.path("orders/o1")), "o1\n");
    assert_eq!(m.versions("orders/o1"), before);
    assert!(!m.path("x").exists(), "nothing moved");
    let log = refused(&m);
    assert!(
        log.contains("rename of directory orders to x refused: orders/o1: writer agent"),
        "{log}"
    );
    // A write-once file's directory cannot be moved away to rewrite it.
    let (ok, _, err) = agent(&m, "mv frozen fz && echo v2 > fz/f && mv fz frozen");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    assert_eq!(read(m.path("frozen/f")), "v1\n");
    assert!(refused(&m).contains("frozen/f"), "{}", refused(&m));
}

#[test]
fn the_restore_attribute_is_a_commit_by_its_caller() {
    let m = mount();
    // get_order moves the total on; the agent tries to put the old value back.
    m.sh_ok("SCRATCHFS_WRITER=get_order python3 -c 'import json; json.dump({\"order_total_cents\": 54000, \"note\": \"n\"}, open(\"state.json\", \"w\"))'");
    let n = m.versions("state.json").len();
    let before = read(m.path("state.json"));
    let (ok, _, err) = agent(
        &m,
        &format!("setfattr -n user.scratchfs.restore -v {} state.json", n - 1),
    );
    assert!(!ok && err.contains("Invalid argument"), "{err}");
    assert_eq!(read(m.path("state.json")), before);
    assert_eq!(m.versions("state.json").len(), n, "no version committed");
    assert!(
        refused(&m).contains("key \"order_total_cents\" may be written only by get_order"),
        "{}",
        refused(&m)
    );
    // The create version (empty) would remove every key: refused too.
    let (ok, _, _) = agent(&m, "setfattr -n user.scratchfs.restore -v 1 state.json");
    assert!(!ok);
    assert_eq!(read(m.path("state.json")), before);
    // A restore over a write-once file is refused.
    let (ok, _, err) = agent(&m, "setfattr -n user.scratchfs.restore -v 1 frozen/f");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    // get_order itself may restore.
    m.sh_ok(&format!(
        "SCRATCHFS_WRITER=get_order setfattr -n user.scratchfs.restore -v {} state.json",
        n - 1
    ));
    assert!(read(m.path("state.json")).contains("18000"));
}

#[test]
fn the_cli_restore_of_an_unmounted_database_passes_the_stored_rules() {
    let mut m = mount();
    m.sh_ok("SCRATCHFS_WRITER=get_order python3 -c 'import json; json.dump({\"order_total_cents\": 1, \"note\": \"n\"}, open(\"state.json\", \"w\"))'");
    let n = m.versions("state.json").len();
    m.unmount();
    // The database is the mounting user's (0600 may keep others out entirely): run the
    // CLI as root, tagged as a writer that may not write the key.
    let o = std::process::Command::new(BIN)
        .args(["restore", &format!("state.json@{}", n - 1)])
        .env("SCRATCHFS_DB", &m.db)
        .env("SCRATCHFS_WRITER", "someone")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("may be written only by get_order"), "{err}");
    let (_, show, _) = cli(&m, &["show", "state.json"]);
    assert!(show.contains("\"order_total_cents\": 1"), "{show}");
}

#[test]
fn gc_is_for_root_and_the_user_who_mounted_and_is_on_record() {
    let m = mount();
    for i in 0..4 {
        agent(&m, &format!("echo {i} > plan.md"));
    }
    let before = m.versions("plan.md").len();
    let (ok, _, err) = agent(
        &m,
        r#"setfattr -n user.scratchfs.gc -v "{\"keep_last\":1,\"before_ns\":null,\"dry_run\":false}" ."#,
    );
    assert!(!ok && err.contains("Operation not permitted"), "{err}");
    assert_eq!(m.versions("plan.md").len(), before, "nothing forgotten");
    assert!(
        refused(&m).contains("gc by uid 1000 refused"),
        "{}",
        refused(&m)
    );
    // Root (who mounted) may, and the run is an event.
    let (code, out, err) = cli(&m, &["gc", "--keep-last", "1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(m.versions("plan.md").len(), 1);
    let (_, log, _) = cli(&m, &["log"]);
    assert!(log.contains("gc (keep_last 1) by uid 0: forgot"), "{log}");
    let manifest = read(m.path("MANIFEST"));
    assert!(
        manifest.contains("history erased (1 of 1):")
            && manifest.contains("gc (keep_last 1) by uid 0: forgot"),
        "{manifest}"
    );
}

#[test]
fn unlinking_a_field_ruled_file_needs_every_key() {
    let m = mount();
    let before = read(m.path("state.json"));
    let (ok, _, err) = agent(&m, "rm state.json");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    assert_eq!(read(m.path("state.json")), before);
    assert!(
        refused(&m).contains("unlink would remove key \"order_total_cents\""),
        "{}",
        refused(&m)
    );
    // Renaming it away removes its keys at that path too.
    let (ok, _, _) = agent(&m, "mv state.json elsewhere.txt");
    assert!(!ok);
    assert_eq!(read(m.path("state.json")), before);
}

#[test]
fn a_refused_create_leaves_no_file_behind() {
    let m = mount();
    for script in [
        r#"echo "{\"credit_cents\": 1}" > c1.json"#,
        r#"python3 -c "import json; json.dump({\"credit_cents\": 1}, open(\"c2.json\", \"w\"))""#,
        r#"env printf "{\"credit_cents\": 1" > c3.json"#,
    ] {
        let (ok, _, err) = agent(&m, script);
        // Python without `with` writes only when the file object is finalized, where
        // CPython reports errors only in development mode: the refusal is on record, and
        // the file gone, all the same.
        assert!(
            script.starts_with("python3") || (!ok && err.contains("Invalid argument")),
            "{script}: {err}"
        );
    }
    for name in ["c1.json", "c2.json", "c3.json"] {
        assert!(!m.path(name).exists(), "{name} stayed behind");
        // Neither among the files nor among the restorable (only the refusal names it).
        let manifest = read(m.path("MANIFEST"));
        assert!(
            !manifest
                .lines()
                .any(|l| l.starts_with(name)
                    || l.trim_start().starts_with(&format!("{name} deleted"))),
            "{name} in MANIFEST:\n{manifest}"
        );
    }
    // A valid one is created as usual.
    let (ok, _, err) = agent(&m, r#"echo "{\"other\": 1}" > c4.json"#);
    assert!(ok, "{err}");
    assert_eq!(read(m.path("c4.json")), "{\"other\": 1}\n");
}

#[test]
fn refusals_come_at_write_for_bash_and_python_without_with() {
    let m = mount();
    let cases = [
        // A secret complete in the bytes written.
        ("vault/k1", format!("echo key {SECRET} > vault/k1")),
        ("vault/k2", format!("echo ok > vault/k2 && echo key {SECRET} >> vault/k2")),
        (
            "vault/k3",
            format!("python3 -c \"f = open(\\\"vault/k3\\\", \\\"w\\\"); f.write(\\\"key {SECRET}\\\"); f.flush()\""),
        ),
        // The size past max_bytes.
        ("vault/big1", "head -c 300 /dev/zero | tr \"\\\\0\" x > vault/big1".to_string()),
        ("vault/big2", "echo a > vault/big2 && head -c 300 /dev/zero | tr \"\\\\0\" x >> vault/big2".to_string()),
        (
            "vault/big3",
            "python3 -c \"f = open(\\\"vault/big3\\\", \\\"w\\\"); f.write(\\\"x\\\" * 300); f.flush()\"".to_string(),
        ),
        // A complete JSON object breaking `fields`.
        ("state.json", "echo \"{\\\"order_total_cents\\\": 1}\" > state.json".to_string()),
        (
            "state.json",
            "python3 -c \"import json; f = open(\\\"state.json\\\", \\\"w\\\"); json.dump({\\\"order_total_cents\\\": 2}, f); f.flush()\"".to_string(),
        ),
    ];
    for (path, script) in &cases {
        let before = std::fs::read(m.path(path)).ok();
        let (ok, _, err) = agent(&m, script);
        assert!(!ok, "{script}: succeeded");
        assert!(
            err.contains("Invalid argument"),
            "{script}: the tool did not print the refusal: {err}"
        );
        if path.starts_with("state") {
            assert_eq!(std::fs::read(m.path(path)).ok(), before, "{script}");
        }
    }
    // bash `>>` onto a field-ruled JSON file: the appended object is not JSON.
    let (ok, _, err) = agent(&m, "echo \"{}\" >> state.json");
    assert!(!ok && err.contains("Invalid argument"), "{err}");
    assert!(read(m.path("state.json")).contains("18000"));
}

#[test]
fn refused_secrets_are_stored_redacted() {
    let m = mount();
    let (ok, _, _) = agent(&m, &format!("echo key {SECRET} > vault/k"));
    assert!(!ok);
    m.sql("SELECT 1"); // sync: every answered change is in SQLite
    let log = refused(&m);
    assert!(log.contains("deny_secrets"), "{log}");
    // No byte of the secret in any file of the store.
    assert_no_secret_at_rest(&m, "a refused write");
    // Nor from a process whose tag is a secret (the tag is stored redacted).
    let (ok, _, err) = agent(
        &m,
        &format!("SCRATCHFS_WRITER={SECRET} bash -c \"echo hi > free.md\""),
    );
    assert!(ok, "{err}");
    assert_no_secret_at_rest(&m, "the writer tag");
    // The refusal keeps the rest of the content and a marker with the secret's hash.
    let stored = m.sql(
        "SELECT group_concat(CAST(data AS TEXT), '') FROM extents WHERE stream =
           (SELECT stream FROM events WHERE op = 'rejected' AND path = 'vault/k' ORDER BY id DESC LIMIT 1)",
    );
    let h = blake3::hash(SECRET.as_bytes()).to_hex();
    assert!(
        stored.contains(&format!(
            "key [REDACTED an AWS access key id blake3:{}]",
            &h[..16]
        )),
        "{stored}"
    );
}

#[test]
fn a_write_by_another_user_clears_setuid_and_setgid() {
    let m = mount();
    m.sh_ok("echo x > suid && chmod 06777 suid");
    let o = m.sh("setpriv --reuid 65534 --regid 65534 --clear-groups bash -c 'echo y >> suid'");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mode = m.sh_ok("stat -c %a suid");
    assert_eq!(mode.trim(), "777");
    // chown by a non-root caller (to a group it is in) clears them too.
    m.sh_ok("chown 1000:1000 suid && chmod 06777 suid");
    let (ok, _, err) = agent(&m, "chgrp 1000 suid");
    assert!(ok, "{err}");
    assert_eq!(m.sh_ok("stat -c %a suid").trim(), "777");
}

#[test]
fn redact_leaves_no_byte_of_a_secret_in_the_store() {
    let m = mount();
    // Written before any rule caught it (plan.md has no deny_secrets), then appended to.
    m.sh_ok(&format!(
        "echo key {SECRET} > plan.md && echo more >> plan.md"
    ));
    let n = m.versions("plan.md").len();
    // A search made the text index, which holds the live text: a copy of the key.
    let indexed = |m: &Mount| {
        m.sql(&if on_postgres() {
            format!("SELECT COUNT(*) FROM text_index WHERE position('{SECRET}' in body) > 0")
        } else {
            format!("SELECT COUNT(*) FROM text_index WHERE text_index MATCH '\"{SECRET}\"'")
        })
    };
    // And a history search the history index, which holds every version's text.
    let in_history = |m: &Mount| {
        m.sql(&if on_postgres() {
            format!("SELECT COUNT(*) FROM history_index WHERE position('{SECRET}' in body) > 0")
        } else {
            format!("SELECT COUNT(*) FROM history_index WHERE history_index MATCH '\"{SECRET}\"'")
        })
    };
    assert_eq!(cli(&m, &["grep", "key"]).0, 0);
    assert_eq!(cli(&m, &["grep", "--history", "key"]).0, 0);
    assert_eq!(
        (indexed(&m).trim(), in_history(&m).trim()),
        ("1", "1"),
        "the test searches the indexes it means to"
    );
    // The agent may not erase history.
    let (ok, _, err) = agent(
        &m,
        &format!(
            r#"setfattr -n user.scratchfs.redact -v "{{\"path\":\"plan.md\",\"version\":{},\"why\":\"x\"}}" ."#,
            n - 1
        ),
    );
    assert!(!ok && err.contains("Operation not permitted"), "{err}");
    assert!(
        refused(&m).contains("redact by uid 1000 refused"),
        "{}",
        refused(&m)
    );
    let (code, out, err) = cli(
        &m,
        &[
            "redact",
            &format!("plan.md@{}", n - 1),
            "--why",
            "leaked key",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("an AWS access key id"), "{out}");
    assert_no_secret_at_rest(&m, "after redact");
    // The next search builds the index again, from the redacted text.
    let (_, found, _) = cli(&m, &["grep", "REDACTED"]);
    assert!(found.starts_with("plan.md:1:key [REDACTED"), "{found}");
    let (_, found, _) = cli(&m, &["grep", "--history", "REDACTED"]);
    assert!(found.starts_with("plan.md@v2:1:key [REDACTED"), "{found}");
    assert_eq!(
        (indexed(&m).trim(), in_history(&m).trim()),
        ("0", "0"),
        "the indexes keep no copy of the key"
    );
    // Every version that held it reads redacted, the rest is kept; fsck is clean.
    let h = blake3::hash(SECRET.as_bytes()).to_hex();
    let marker = format!("key [REDACTED an AWS access key id blake3:{}]\n", &h[..16]);
    assert_eq!(read(m.path("plan.md")), format!("{marker}more\n"));
    assert_eq!(
        read(m.path(&format!(".history/plan.md/{:06}", n - 1))),
        marker
    );
    let (code, out, err) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, log, _) = cli(&m, &["log"]);
    assert!(log.contains("leaked key"), "{log}");
    assert!(
        read(m.path("MANIFEST")).contains("leaked key"),
        "MANIFEST shows the redact run"
    );
    // A version without a secret is refused with a clear message.
    let (code, _, err) = cli(&m, &["redact", "plan.md@1"]);
    assert_eq!(code, 1);
    assert!(err.contains("holds no secret"), "{err}");
}

/// A redacted secret goes wherever the store holds it: from the file a rename put it
/// over (the same content on another lineage), from a copy, and from the bytes a
/// truncated version shares past its end (helper finding of session 12: `redact x@1`
/// left `y`, the file `x` was renamed over, reading the secret), and those files read
/// the redacted content at once.
#[test]
fn redact_follows_a_secret_to_every_copy() {
    let m = mount();
    // Another key for t, so that redacting x's does not redact t's too.
    let other = "AKIAI44QH8DHBEXAMPLE";
    m.sh_ok(&format!(
        "echo key {SECRET} > x && echo old > y && mv x y && cp y z && cat y z > /dev/null && \\
         printf 'abc\\nkey {other}\\n' > t && truncate -s 4 t && \\
         printf '{{\"{SECRET}\": 5}}' > fk.json && \\
         setfattr -n user.scratchfs.checkpoint -v \"$(printf 'cp1\\nnote {SECRET}')\" ."
    ));
    // An AWS secret key's value, found with its name, and then alone: in the same file
    // later, in another file, on the command line that wrote it there.
    let value = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEYab";
    m.sh_ok(&format!(
        "printf 'aws_secret_access_key = {value}\\n' > cred.md && printf 'later: {value}\\n' >> cred.md && \\
         printf 'just: {value}\\n' > bare.md"
    ));
    let (code, out, err) = cli(
        &m,
        &["redact", "cred.md@1", "--why", &format!("leaked {value}")],
    );
    assert_eq!(code, 0, "cred.md@1: {out}{err}");
    assert_not_at_rest(&m, value, "after redact cred.md@1");
    for f in ["cred.md", "bare.md"] {
        assert!(!read(m.path(f)).contains(value), "{f}: {}", read(m.path(f)));
    }
    for spec in ["x@1", "t@1"] {
        let (code, out, err) = cli(&m, &["redact", spec, "--why", "leaked key"]);
        assert_eq!(code, 0, "{spec}: {out}{err}");
    }
    assert_no_secret_at_rest(&m, "after redact");
    assert_not_at_rest(&m, other, "after redact");
    let marker = |secret: &str| {
        let h = blake3::hash(secret.as_bytes()).to_hex();
        format!("key [REDACTED an AWS access key id blake3:{}]\n", &h[..16])
    };
    assert_eq!(read(m.path("y")), marker(SECRET));
    assert_eq!(read(m.path("z")), marker(SECRET));
    assert_eq!(read(m.path("t")), "abc\n");
    assert_eq!(
        read(m.path(".history/t/000001")),
        format!("abc\n{}", marker(other))
    );
    let (code, out, err) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// A writer whose file is redacted while it has it open: its commit is refused with
/// ESTALE, on record, naming the redaction, and the file keeps its redacted version
/// (helper finding: ENOENT "collected (gc)", nothing recorded).
#[test]
fn a_writer_open_across_a_redaction_is_refused_on_record() {
    let m = mount();
    m.sh_ok(&format!("printf 'head\\nkey {SECRET} tail\\n' > w.md"));
    let fifo = m.dir.path().join("go");
    let ready = m.dir.path().join("ready");
    let done = m.dir.path().join("done");
    m.sh_ok(&format!("mkfifo {} {}", fifo.display(), ready.display()));
    let script = format!(
        r#"
import os, sys
fd = os.open("w.md", os.O_RDWR)
os.write(fd, b"HEAD")
open("{ready}", "w").write("1")
open("{fifo}").read()
try:
    os.fsync(fd)
    out = "ok"
except OSError as e:
    out = str(e.errno)
try:
    os.close(fd)
except OSError:
    pass
open("{done}", "w").write(out)
"#,
        fifo = fifo.display(),
        ready = ready.display(),
        done = done.display()
    );
    let mut child = std::process::Command::new("python3")
        .args(["-c", &script])
        .current_dir(&m.mnt)
        .spawn()
        .unwrap();
    // The writer has the file open and has written.
    assert_eq!(std::fs::read_to_string(&ready).unwrap(), "1");
    let (code, out, err) = cli(&m, &["redact", "w.md@1", "--why", "leaked"]);
    assert_eq!(code, 0, "{out}{err}");
    std::fs::write(&fifo, b"go").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        std::fs::read_to_string(&done).unwrap(),
        libc::ESTALE.to_string()
    );
    assert!(read(m.path("w.md")).starts_with("head\nkey [REDACTED"));
    let rejected = refused(&m);
    assert!(
        rejected.contains("was redacted after this handle opened it"),
        "{rejected}"
    );
    assert_no_secret_at_rest(&m, "after the refused write");
}

#[test]
fn writes_through_mmap_that_are_refused_are_not_seen_by_readers() {
    let m = mount();
    let text = r#"
import mmap, os
fd = os.open("state.json", os.O_RDWR)
mm = mmap.mmap(fd, 0)
i = mm.find(b"18000")
mm[i:i + 5] = b"99999"
try:
    mm.flush()
except OSError as e:
    print("flush", e.errno)
mm.close()
try:
    os.close(fd)
    print("closed")
except OSError as e:
    print("close", e.errno)
"#;
    let (_script_dir, path) = script("forge_by_mmap.py", text);
    // A reader first, so that the kernel keeps the file's pages cached.
    assert!(read(m.path("state.json")).contains("18000"));
    let (_, out, err) = agent(&m, &format!("python3 {}", path.display()));
    assert!(
        out.contains("22"),
        "the refusal reaches the writer: {out} {err}"
    );
    // Neither a fresh reader nor a tool that reads and saves sees the refused bytes.
    assert!(
        read(m.path("state.json")).contains("18000"),
        "{}",
        read(m.path("state.json"))
    );
    m.sh_ok("SCRATCHFS_WRITER=get_order python3 -c 'import json; d = json.load(open(\"state.json\")); d[\"note\"] = \"m\"; json.dump(d, open(\"state.json\", \"w\"))'");
    let (_, show, _) = cli(&m, &["show", "state.json"]);
    assert!(show.contains("18000") && !show.contains("99999"), "{show}");
}

#[test]
fn a_handle_is_checked_again_at_commit() {
    let m = mount();
    // The handle that created a write-once file gives it its content once, not twice.
    let text = r#"
import os
fd = os.open("frozen/h.txt", os.O_CREAT | os.O_WRONLY, 0o666)
os.write(fd, b"first")
os.fsync(fd)
os.pwrite(fd, b"SECOND", 0)
try:
    os.fsync(fd)
    print("rewritten")
except OSError as e:
    print("refused", e.errno)
"#;
    let (_script_dir, path) = script("once.py", text);
    let (_, out, err) = agent(&m, &format!("python3 {}", path.display()));
    assert_eq!(out.trim(), "refused 13", "{err}");
    assert_eq!(read(m.path("frozen/h.txt")), "first");
    // A handle opened on a free path, whose directory is then moved under get_order's
    // rule by someone who may, writes no more.
    m.sh_ok("mkdir drafts && chmod 777 drafts");
    let text = r#"
import os, sys, time
fd = os.open("drafts/x.txt", os.O_CREAT | os.O_WRONLY, 0o666)
os.write(fd, b"draft")
os.fsync(fd)
print("ready", flush=True)
deadline = time.time() + 30
while not os.path.exists("orders/drafts/x.txt") and time.time() < deadline:
    time.sleep(0.01)
os.pwrite(fd, b"FORGED", 0)
try:
    os.fsync(fd)
    print("written")
except OSError as e:
    print("refused", e.errno)
"#;
    let (_script_dir, path) = script("hold.py", text);
    let mut child = std::process::Command::new("setpriv")
        .args([
            "--reuid",
            "1000",
            "--regid",
            "1000",
            "--clear-groups",
            "bash",
            "-c",
        ])
        .arg(format!("python3 {}", path.display()))
        .current_dir(&m.mnt)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    if lines.next().map(|l| l.unwrap()).as_deref() != Some("ready") {
        let out = child.wait_with_output().unwrap();
        panic!(
            "the agent could not open its draft: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    m.sh_ok("SCRATCHFS_WRITER=get_order mv drafts orders/drafts");
    let last = lines.next().map(|l| l.unwrap());
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        last.as_deref(),
        Some("refused 13"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(read(m.path("orders/drafts/x.txt")), "draft");
    assert!(
        refused(&m).contains("orders/drafts/x.txt: writer agent refused by rule \"orders/**\""),
        "{}",
        refused(&m)
    );
}

#[test]
fn names_duplicate_keys_and_malformed_commands_get_no_further() {
    let m = mount();
    // A secret in a name under deny_secrets: refused, and not even the refusal holds it.
    let (ok, _, err) = agent(&m, &format!("echo hi > vault/{SECRET}.txt"));
    assert!(!ok && err.contains("Invalid argument"), "{err}");
    let (ok, _, _) = agent(&m, &format!("mkdir vault/{SECRET}"));
    assert!(!ok);
    assert_no_secret_at_rest(&m, "a secret in a name");
    assert!(
        refused(&m).contains("the name holds an AWS access key id"),
        "{}",
        refused(&m)
    );
    // A repeated key: parsers disagree on which value counts, so it is refused.
    let before = read(m.path("state.json"));
    let (ok, _, err) = agent(
        &m,
        r#"printf "{\"order_total_cents\": 9999, \"order_total_cents\": 18000, \"note\": \"n\"}" | env tee state.json"#,
    );
    assert!(!ok && err.contains("Invalid argument"), "{err}");
    assert_eq!(read(m.path("state.json")), before);
    // A history-erasing command whose value does not even parse is refused and recorded.
    let (ok, _, err) = agent(&m, "setfattr -n user.scratchfs.gc -v garbage .");
    assert!(!ok && err.contains("Operation not permitted"), "{err}");
    assert!(
        refused(&m).contains("gc by uid 1000 refused"),
        "{}",
        refused(&m)
    );
}

#[test]
fn a_commit_racing_a_rename_is_judged_where_it_lands() {
    let m = mount();
    // One process closes a handle holding a secret while another moves its directory
    // under deny_secrets; whichever comes first, the secret never lands in vault/.
    let text = r#"
import os, sys, multiprocessing as mp
SECRET = b"k AKIAIOSFODNN7EXAMPLE\n"
N = 100
def closer(q, done):
    for i in range(N):
        d = f"sub/race{i}"
        os.makedirs(d, exist_ok=True)
        fd = os.open(d + "/f.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b"x\n"); os.fsync(fd)
        os.write(fd, SECRET)
        q.put(i)
        done.get()
        try: os.close(fd)
        except OSError: pass
def mover(q, done):
    for i in range(N):
        j = q.get()
        done.put(1)
        for k in range(50):
            try:
                os.rename(f"sub/race{j}", f"vault/race{j}"); break
            except OSError:
                pass
if __name__ == "__main__":
    q = mp.Queue(); done = mp.Queue()
    a = mp.Process(target=closer, args=(q, done)); b = mp.Process(target=mover, args=(q, done))
    a.start(); b.start(); a.join(); b.join()
    bad = [i for i in range(N) if os.path.exists(f"vault/race{i}/f.txt")
           and b"AKIA" in open(f"vault/race{i}/f.txt", "rb").read()]
    moved = sum(os.path.exists(f"vault/race{i}") for i in range(N))
    print("bad", bad, "moved", moved)
"#;
    let (_script_dir, path) = script("race_rename.py", text);
    let (_, out, err) = agent(&m, &format!("python3 {}", path.display()));
    assert!(out.starts_with("bad [] moved"), "{out}{err}");
}

#[test]
fn a_forked_childs_close_neither_freezes_nor_hides() {
    let m = mount();
    // The child of a writer closes the writer's descriptor (subprocess closes inherited
    // descriptors), which commits what was written so far. A write-once file being
    // created takes the rest from its creator all the same.
    let text = r#"
import os, subprocess
a = os.open("frozen/w5.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
os.write(a, b"part1\n")
subprocess.run(["true"])
os.write(a, b"part2\n")
os.close(a)
print("closed")
# A refusal at the child's close reaches the parent too: its next write and its close.
w = os.open("state.json", os.O_WRONLY | os.O_TRUNC)
os.write(w, b'{"order_total_cents": 1, "note": "x"')
subprocess.run(["true"])
try:
    os.write(w, b"}")
    print("written")
except OSError as e:
    print("write", e.errno)
try:
    os.close(w)
    print("close ok")
except OSError as e:
    print("close", e.errno)
"#;
    let (_script_dir, path) = script("fork_close.py", text);
    let (_, out, err) = agent(&m, &format!("python3 {}", path.display()));
    assert_eq!(out, "closed\nwrite 22\nclose 22\n", "{err}");
    assert_eq!(read(m.path("frozen/w5.txt")), "part1\npart2\n");
    assert!(read(m.path("state.json")).contains("18000"));
}

/// Issue 10: a commit too large for the content checks (64 MiB) is refused, recorded, and
/// named by the rule its size alone breaks (max_bytes) when there is one; sparse sizes
/// cannot slip past `max_bytes` or `read-only`.
#[test]
fn huge_sparse_sizes_meet_the_rules_by_their_size() {
    let m = mount();
    let (ok, _, err) = agent(&m, "mkdir -p vault && fallocate -l 1T vault/big");
    assert!(!ok, "a 1 TiB fallocate under max_bytes 200 was committed");
    assert!(
        err.contains("File too large") || err.contains("Invalid argument"),
        "{err}"
    );
    let (ok, _, _) = agent(&m, "truncate -s 1T vault/big2");
    assert!(!ok);
    let log = m.sql("SELECT reason FROM events WHERE op = 'rejected' AND path LIKE 'vault/big%'");
    assert!(log.contains("max_bytes 200 exceeded"), "{log}");
    assert!(!log.contains("too large to check"), "{log}");
    // The files stay as they were: nothing past 200 bytes was committed.
    let sizes = m.sql("SELECT COALESCE(MAX(size), 0) FROM versions WHERE path LIKE 'vault/big%'");
    assert_eq!(sizes, "0");
}

/// Texts a caller chooses pass the secret check content gets (issue 31 item 4): a
/// checkpoint named like a secret is refused without quoting it (through the CLI and
/// through the core, over the mount's MCP socket), an MCP client named like one and a
/// redaction's reason are kept redacted; none of it is left in the database.
#[test]
fn texts_a_caller_chooses_leave_no_secret_at_rest() {
    let m = mount();
    let (code, _, err) = cli(&m, &["checkpoint", &format!("cp{SECRET}")]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("holds") && !err.contains(SECRET), "{err}");
    // Over the socket the core checks (not the CLI), as a client named like a secret (a
    // PostgreSQL mount has no socket: `scratchfs mcp` is a daemon of its own there).
    if !on_postgres() {
        socket_calls(&m);
    }
    m.sh_ok(&format!("echo {SECRET} > leak.txt"));
    let (code, _, err) = cli(
        &m,
        &["redact", "leak.txt@1", "--why", &format!("it had {SECRET}")],
    );
    assert_eq!(code, 0, "{err}");
    assert_no_secret_at_rest(
        &m,
        "a checkpoint name, an MCP client's name and version, a --why",
    );
}

/// [`texts_a_caller_chooses_leave_no_secret_at_rest`]'s calls over the mount's socket.
fn socket_calls(m: &Mount) {
    let socket = m.sql("SELECT value FROM meta WHERE key = 'mcp_socket'");
    let call = |tool: &str, args: serde_json::Value| -> serde_json::Value {
        let req = serde_json::json!({ "tool": tool, "args": args, "writer": null,
            "client": format!("client-{SECRET}"), "client_version": SECRET, "read_only": false });
        let o = std::process::Command::new("python3")
            .args(["-c", "import socket, sys\ns = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile()\nf.readline()\ns.sendall(sys.argv[2].encode() + b'\\n')\nprint(f.readline(), end='')"])
            .arg(&socket)
            .arg(req.to_string())
            .output()
            .unwrap();
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let r = call(
        "checkpoint",
        serde_json::json!({ "name": format!("cp{SECRET}") }),
    );
    assert_eq!(r["is_error"], true, "{r}");
    assert!(!r["text"].as_str().unwrap().contains(SECRET), "{r}");
    let r = call(
        "append",
        serde_json::json!({ "path": "notes.md", "content": "x\n" }),
    );
    assert_eq!(r["is_error"], false, "{r}");
    assert_eq!(
        m.sql("SELECT COUNT(*) FROM processes WHERE client LIKE 'client-%'"),
        "1",
        "the client's calls are on record"
    );
}
