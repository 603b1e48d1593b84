//! Checkpoints, rollback, forks, adopt and time-travel mounts (issue 14), on real mounts:
//! the agent takes a checkpoint, goes wrong, the harness rolls back; a checkpoint's tree
//! under `.checkpoints/NAME/`; a read-only mount of the past beside the live one; gc
//! keeps what checkpoints need; a crash mid-rollback leaves the old tree or the new one;
//! a fork for two parallel attempts, one adopted through the gate.

mod common;
use common::*;

use std::path::Path;

const AGENT: &str = "setpriv --reuid 1000 --regid 1000 --clear-groups";

const RULES: &str = r#"{
  "writers": {
    "agent":   { "uid": 1000, "model": true },
    "tool":    { "env": "tool" },
    "lead":    { "uid": 1001 },
    "harness": { "uid": 0 }
  },
  "paths": [
    { "path": "state.json", "format": "json",
      "fields": { "status": { "writers": ["agent", "harness"] },
                  "total":  { "writers": ["tool", "harness"], "type": "integer" },
                  "approval": { "writers": ["lead"] } } },
    { "path": "**", "writers": ["*"] }
  ]
}"#;

fn mount_with(rules: &str) -> Mount {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.json");
    std::fs::write(&path, rules).unwrap();
    let m = Mount::with_args(&["--rules", path.to_str().unwrap(), "--owner", "1000:1000"]);
    std::mem::forget(dir);
    m
}

/// Every file under `root` (views left out) with its content, sorted.
fn tree(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if rel == "MANIFEST" {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
                out.push((format!("{rel}/"), String::new()));
            } else {
                out.push((rel, read(e.path())));
            }
        }
    }
    out.sort();
    out
}

/// A `mount --background` of another database or of the past, unmounted when dropped
/// (also when a test fails).
struct Other(std::path::PathBuf);

impl Other {
    fn mount(args: &[&str], db: &Path, mnt: &Path) -> Other {
        std::fs::create_dir_all(mnt).unwrap();
        let o = std::process::Command::new(BIN)
            .args(["mount", "--background"])
            .args(args)
            .arg("--db")
            .arg(db)
            .arg(mnt)
            .output()
            .unwrap();
        assert!(o.status.success(), "mount {}: {o:?}", mnt.display());
        Other(mnt.to_path_buf())
    }
}

impl Drop for Other {
    fn drop(&mut self) {
        let _ = std::process::Command::new(BIN)
            .arg("unmount")
            .arg(&self.0)
            .status();
    }
}

/// A new database for a fork (`name` in the test's directory, or on PostgreSQL an empty
/// database of the tests' server when `postgres`), dropped with the value.
struct NewDb(std::path::PathBuf);

impl NewDb {
    fn at(m: &Mount, name: &str, postgres: bool) -> NewDb {
        if postgres {
            NewDb(new_pg_database().into())
        } else {
            NewDb(m.dir.path().join(name))
        }
    }
    fn arg(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for NewDb {
    fn drop(&mut self) {
        if self.arg().starts_with("postgres") {
            drop_pg_database(self.arg());
        }
    }
}

/// A database as provenance names it: a PostgreSQL URL without its user (and password).
/// A database as the product names it: a URL without its credentials or its query (TLS
/// parameters), a path as it is.
fn named(db: &str) -> String {
    match db.split_once('@') {
        Some((_, rest)) if db.starts_with("postgres") => {
            let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
            format!("postgres://{rest}")
        }
        _ => db.to_string(),
    }
}

fn ok(r: (i32, String, String)) -> String {
    assert_eq!(r.0, 0, "stdout: {}\nstderr: {}", r.1, r.2);
    r.1
}

/// Issue 14 item 7, the scenario: the agent takes a checkpoint at step 5, goes wrong
/// (overwrites plan.md, deletes findings.md, writes a bad state.json field through a
/// writer allowed to), the harness rolls back: everything is as at step 5, at once for
/// every reader, and the bad run is still in history.
#[test]
fn the_agent_goes_wrong_and_the_harness_rolls_back_to_step_5() {
    let m = mount_with(RULES);
    m.sh_ok(&format!(
        r##"{AGENT} env SCRATCHFS_STEP=3 bash -c 'printf "# plan\n1. find the order\n" > plan.md && echo "order O-9 found" > findings.md && mkdir notes && echo keep > notes/a.md'
        SCRATCHFS_WRITER=tool /usr/bin/python3 -c 'open("state.json", "w").write("{{\"total\": 36000}}\n")'
        chown 1000:1000 state.json
        {AGENT} /usr/bin/python3 -c 'import json; d = json.load(open("state.json")); d["status"] = "open"; open("state.json", "w").write(json.dumps(d))'"##
    ));
    let before = tree(&m.mnt);
    m.sh_ok(&format!(
        "{AGENT} env SCRATCHFS_STEP=5 setfattr -n user.scratchfs.checkpoint -v $'step-5\\nbefore the refund' ."
    ));
    // The agent goes wrong.
    m.sh_ok(&format!(
        "{AGENT} env SCRATCHFS_STEP=6 bash -c 'echo \"# plan: refund everything\" > plan.md && rm findings.md && \
         /usr/bin/python3 -c \"import json; d = json.load(open(\\\"state.json\\\")); d[\\\"status\\\"] = \\\"refund-all\\\"; open(\\\"state.json\\\", \\\"w\\\").write(json.dumps(d))\" && \
         mv notes notes-old && echo junk > junk.md'"
    ));
    // A reader holds the bad content in its cache.
    assert_eq!(read(m.path("plan.md")), "# plan: refund everything\n");
    assert!(read(m.path("state.json")).contains("refund-all"));
    let (code, _, err) = cli(&m, &["rollback", "step-5"]);
    assert_eq!(code, 0, "{err}");
    // Every reader sees the tree of step 5 at once.
    assert_eq!(tree(&m.mnt), before);
    assert_eq!(read(m.path("plan.md")), "# plan\n1. find the order\n");
    assert!(read(m.path("state.json")).contains("\"open\""));
    // The bad run is in history: plan.md's bad version, the deleted junk, the bad field.
    let hist =
        m.sh_ok("cat .history/plan.md/* && cat .archive/junk.md && cat .history/state.json/*");
    assert!(hist.contains("refund everything"), "{hist}");
    assert!(
        hist.contains("junk") && hist.contains("refund-all"),
        "{hist}"
    );
    let log = ok(cli(&m, &["log"]));
    assert!(log.contains("rollback"), "{log}");
    let versions = m.versions("plan.md");
    assert_eq!(versions.last().unwrap().1, "rollback", "{versions:?}");
    // The safety checkpoint undoes the rollback.
    let cps = ok(cli(&m, &["checkpoints", "--json"]));
    let safety: String = cps
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|c| c["auto"] == true)
        .and_then(|c| c["name"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no safety checkpoint in {cps}"));
    assert!(safety.starts_with("before-rollback-to-step-5-"), "{safety}");
    ok(cli(&m, &["rollback", &safety]));
    assert_eq!(read(m.path("plan.md")), "# plan: refund everything\n");
    assert!(!m.path("findings.md").exists());
    assert_eq!(read(m.path("junk.md")), "junk\n");
    assert!(m.path("notes-old/a.md").exists() && !m.path("notes").exists());
    let (code, out, _) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "{out}");
}

/// Item 1: names are checked, a duplicate is refused (EEXIST), a checkpoint is one row
/// (no copy: the namespace log does not grow), through the mount and the CLI, mounted or
/// not; MANIFEST's footer names the latest.
#[test]
fn checkpoints_are_named_pointers() {
    let mut m = Mount::new();
    m.sh_ok("for i in $(seq 1 50); do echo $i > f$i; done");
    let rows = |m: &Mount| m.sql("SELECT COUNT(*) FROM tree_log").trim().to_string();
    let tree_rows = rows(&m);
    m.sh_ok("setfattr -n user.scratchfs.checkpoint -v first .");
    assert_eq!(rows(&m), tree_rows, "a checkpoint copies nothing");
    assert_eq!(m.sql("SELECT COUNT(*) FROM checkpoints").trim(), "1");
    let o = m.sh("setfattr -n user.scratchfs.checkpoint -v first . 2>&1");
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("File exists"),
        "{o:?}"
    );
    for bad in ["a/b", ".."] {
        let o = m.sh(&format!(
            "setfattr -n user.scratchfs.checkpoint -v '{bad}' . 2>&1"
        ));
        assert!(!o.status.success(), "{bad}");
    }
    let (code, _, err) = cli(&m, &["checkpoint", "bad\tname"]);
    assert_ne!(code, 0);
    assert!(err.contains("control character"), "{err}");
    ok(cli(
        &m,
        &["checkpoint", "second", "--note", "after the fifty"],
    ));
    let manifest = read(m.path("MANIFEST"));
    assert!(
        manifest.contains("checkpoints (2 of 2): second (") && manifest.contains("first ("),
        "{manifest}"
    );
    // `.checkpoints` resolves but is not listed.
    let ls = m.sh_ok("ls -a");
    assert!(!ls.contains(".checkpoints"), "{ls}");
    assert_eq!(m.sh_ok("ls .checkpoints"), "first\nsecond\n");
    // Offline too.
    m.unmount();
    ok(cli(&m, &["checkpoint", "offline"]));
    let list = ok(cli(&m, &["checkpoints"]));
    assert!(
        list.contains("first") && list.contains("after the fifty") && list.contains("offline"),
        "{list}"
    );
    let (code, _, err) = cli(&m, &["checkpoint", "offline"]);
    assert_ne!(code, 0);
    assert!(err.contains("exists already"), "{err}");
    // A bad note is named as the note, not as the name (mounted: the daemon gives only
    // EINVAL).
    m.start();
    let (code, _, err) = cli(&m, &["checkpoint", "noted", "--note", "bidi \u{202e} x"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.starts_with("scratchfs: --note: checkpoint note: "),
        "{err}"
    );
}

/// Item 2: `.checkpoints/NAME/` is the whole tree as it was, read-only, with the
/// provenance attributes of the versions then; `diff -r` against the live tree works.
#[test]
fn a_checkpoint_tree_is_the_tree_then() {
    let m = Mount::new();
    m.sh_ok("echo one > plan.md && mkdir -p d/e && echo deep > d/e/f.txt && chmod 600 d/e/f.txt");
    let xattrs_then = m.sh_ok("getfattr -d plan.md | sort");
    m.sh_ok("setfattr -n user.scratchfs.checkpoint -v cp .");
    m.sh_ok("echo two > plan.md && rm -r d && echo new > new.md");
    let then = tree(&m.path(".checkpoints/cp"));
    assert!(
        then.contains(&("d/e/f.txt".into(), "deep\n".into()))
            && then.contains(&("plan.md".into(), "one\n".into()))
            && !then.iter().any(|(p, _)| p == "new.md"),
        "{then:?}"
    );
    let xattrs = m.sh_ok("cd .checkpoints/cp && getfattr -d plan.md | sort");
    assert_eq!(xattrs, xattrs_then);
    let mode = m.sh_ok("stat -c %a .checkpoints/cp/d/e/f.txt");
    assert_eq!(mode.trim(), "400");
    let o = m.sh("echo x > .checkpoints/cp/plan.md 2>&1");
    assert!(!o.status.success());
    let o = m.sh("diff -r -x MANIFEST .checkpoints/cp .");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("Only in .checkpoints/cp: d") && out.contains("Only in .: new.md"),
        "{out}"
    );
    assert!(out.contains("< one") && out.contains("> two"), "{out}");
    // uid 1000 reads what it could read then, not the 0600 file.
    let o = m.sh(&format!("{AGENT} cat .checkpoints/cp/d/e/f.txt"));
    assert!(!o.status.success());
}

/// Item 3: who may roll back (root, the user who mounted, writers the rules name), and
/// who may take a checkpoint (the rules' checkpoints.take); refusals are recorded.
#[test]
fn the_gate_decides_who_may_checkpoint_and_roll_back() {
    let rules = r#"{"writers": {"agent": {"uid": 1000}, "lead": {"uid": 1001}},
        "checkpoints": {"take": ["lead"], "rollback": ["lead"]},
        "paths": [{"path": "**", "writers": ["*"]}]}"#;
    let m = mount_with(rules);
    ok(cli(&m, &["checkpoint", "base"]));
    let o = m.sh(&format!(
        "{AGENT} setfattr -n user.scratchfs.checkpoint -v mine . 2>&1"
    ));
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("Permission denied"),
        "{o:?}"
    );
    // The kernel lets a process set an attribute only where it may write: the lead's own
    // directory.
    m.sh_ok("mkdir lead && chown 1001:1001 lead");
    m.sh_ok("setpriv --reuid 1001 --regid 1001 --clear-groups setfattr -n user.scratchfs.checkpoint -v lead-cp lead");
    let o = m.sh(&format!(
        "{AGENT} setfattr -n user.scratchfs.rollback -v base . 2>&1"
    ));
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("Operation not permitted"),
        "{o:?}"
    );
    m.sh_ok("setpriv --reuid 1001 --regid 1001 --clear-groups setfattr -n user.scratchfs.rollback -v base lead");
    assert!(
        !m.path("lead").exists(),
        "rolled back to before lead/ was made"
    );
    let rejected = ok(cli(&m, &["log", "--rejected"]));
    assert!(
        rejected.contains("checkpoint mine by writer agent refused")
            && rejected.contains("rollback to base by uid 1000"),
        "{rejected}"
    );
}

/// Item 3: a rollback offline (not mounted), then the mount shows it.
#[test]
fn a_rollback_works_offline() {
    let mut m = Mount::new();
    m.sh_ok("echo a > plan.md && setfattr -n user.scratchfs.checkpoint -v a . && echo b > plan.md && echo x > extra");
    m.unmount();
    let out = ok(cli(&m, &["rollback", "a"]));
    assert!(
        out.contains("rolled back to a: 1 changed") && out.contains("1 removed"),
        "{out}"
    );
    m.start();
    assert_eq!(read(m.path("plan.md")), "a\n");
    assert!(!m.path("extra").exists());
    assert_eq!(read(m.path(".archive/extra")), "x\n");
}

/// The log of a path whose earlier file a rollback brings back ends with that file's
/// version: the removal of the file made at the path since comes before it (the rows of
/// one rollback share its time; helper finding of session 13: `unlink` came last, as if
/// the path had nothing).
#[test]
fn the_log_of_a_rollback_ends_with_the_file_it_brings_back() {
    let m = Mount::new();
    m.sh_ok(
        "echo a > plan.md && setfattr -n user.scratchfs.checkpoint -v a . && rm plan.md && echo b > plan.md",
    );
    ok(cli(&m, &["rollback", "a"]));
    assert_eq!(read(m.path("plan.md")), "a\n");
    let log = ok(cli(&m, &["log", "plan.md"]));
    let ops: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    assert_eq!(
        ops[ops.len().saturating_sub(2)..],
        ["unlink", "rollback"],
        "{log}"
    );
}

/// A name in the root that a rollback points at another file resolves to that file as
/// soon as `scratchfs rollback` returns, even with a kernel slow to drop cached names
/// (failpoint `notify-entry`: the daemon's notifier takes 1 s over each entry
/// invalidation). The rollback's request holds the root locked, so those names are
/// invalidated without waiting; the command then reads `user.scratchfs.settled`, which
/// answers once they are done. (Without that read, the name still led to the file
/// removed by the rollback: `new`, then ENOENT once the kernel caught up.)
#[test]
fn a_name_a_rollback_rebinds_in_the_root_resolves_anew_when_the_command_returns() {
    let mut m = Mount::new();
    m.sh_ok(
        "echo old > plan.md && setfattr -n user.scratchfs.checkpoint -v before . \
         && rm plan.md && echo new > plan.md",
    );
    m.unmount();
    m.start_with_failpoint("notify-entry");
    // The kernel caches the name plan.md, leading to the file made after the checkpoint.
    assert_eq!(read(m.path("plan.md")), "new\n");
    let out = ok(cli(&m, &["rollback", "before"]));
    assert!(out.contains("rolled back to before"), "{out}");
    assert_eq!(read(m.path("plan.md")), "old\n");
    // Through the mount itself too: the attribute answers once the caches are dropped.
    m.sh_ok("setfattr -n user.scratchfs.checkpoint -v after-old . && rm plan.md && echo newer > plan.md");
    assert_eq!(read(m.path("plan.md")), "newer\n");
    m.sh_ok(
        "setfattr -n user.scratchfs.rollback -v after-old . \
         && getfattr --only-values -n user.scratchfs.settled .",
    );
    assert_eq!(read(m.path("plan.md")), "old\n");
}

/// Waiting for the kernel's caches (`user.scratchfs.settled`) holds one of the daemon's
/// workers for up to 10 s, so it is only for those who may roll back: readers in a loop
/// by an agent could otherwise hold every worker (a helper stalled the mount for 120 s).
/// uid 1000 gets EPERM; root, who may roll back, gets the answer.
#[test]
fn only_those_who_may_roll_back_wait_for_the_caches() {
    let m = Mount::with_args(&["--allow-other"]);
    let out = m.sh(&format!("{AGENT} getfattr -n user.scratchfs.settled ."));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("Operation not permitted"),
        "{err}"
    );
    assert_eq!(
        m.sh_ok("getfattr --only-values -n user.scratchfs.settled ."),
        "settled"
    );
}

/// Item 3: a daemon killed in the middle of a rollback leaves the old tree or the new one
/// (the rollback is one transaction).
#[test]
fn a_kill_during_a_rollback_leaves_the_old_tree_or_the_new() {
    let mut m = Mount::new();
    m.sh_ok("for i in $(seq 1 20); do echo old$i > f$i; done; setfattr -n user.scratchfs.checkpoint -v old .");
    m.sh_ok("for i in $(seq 1 20); do echo new$i > f$i; done; rm f3; echo n > n1");
    let after = tree(&m.mnt);
    m.unmount();
    let stop = m.start_with_failpoint("rollback");
    let mnt = m.mnt.clone();
    let setter = std::thread::spawn(move || {
        std::process::Command::new("setfattr")
            .args(["-n", "user.scratchfs.rollback", "-v", "old"])
            .arg(&mnt)
            .output()
    });
    wait_for("the daemon to stop in the rollback", || stop.exists());
    m.kill9();
    let _ = setter.join();
    m.start();
    // Not rolled back: the transaction never committed.
    assert_eq!(tree(&m.mnt), after);
    ok(cli(&m, &["rollback", "old"]));
    let rolled = tree(&m.mnt);
    assert!(
        rolled.contains(&("f3".into(), "old3\n".into())),
        "{rolled:?}"
    );
    assert!(!rolled.iter().any(|(p, _)| p == "n1"), "{rolled:?}");
    let (code, out, _) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "{out}");
}

/// Item 5: `mount --at NAME|TIME` mounts the past read-only (EROFS) while the live mount
/// of the same database goes on.
#[test]
fn a_mount_of_the_past_is_read_only_beside_the_live_one() {
    let m = Mount::new();
    m.sh_ok("echo then > plan.md && mkdir d && echo x > d/x && setfattr -n user.scratchfs.checkpoint -v cp .");
    let t = m.sh_ok("date -u +%Y-%m-%dT%H:%M:%S.%NZ").trim().to_string();
    m.sh_ok("echo now > plan.md && rm -r d");
    for at in ["cp", t.as_str()] {
        let past = m.dir.path().join(format!("past-{}", at.len()));
        let guard = Other::mount(&["--at", at], &m.db, &past);
        assert_eq!(read(past.join("plan.md")), "then\n");
        assert_eq!(read(past.join("d/x")), "x\n");
        let w = std::fs::write(past.join("plan.md"), "no");
        assert_eq!(
            w.unwrap_err().raw_os_error(),
            Some(libc::EROFS),
            "a write to the past"
        );
        let o = std::process::Command::new("mkdir")
            .arg(past.join("new"))
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&o.stderr).contains("Read-only file system"));
        // The live mount goes on, and the past does not follow it.
        m.sh_ok("echo later >> plan.md");
        assert!(read(m.path("plan.md")).ends_with("\nlater\n"));
        assert_eq!(read(past.join("plan.md")), "then\n");
        drop(guard);
        m.sh_ok("echo reset > plan.md");
    }
    // The live mount's MCP socket survived the past mount's unmount (a PostgreSQL mount
    // has none).
    if !on_postgres() {
        assert!(
            !m.sql("SELECT value FROM meta WHERE key = 'mcp_socket'")
                .trim()
                .is_empty()
        );
    }
}

/// Item 6: gc never forgets a version a checkpoint needs; `--drop-checkpoint` releases
/// one (recorded), after which gc may.
#[test]
fn gc_keeps_what_a_checkpoint_needs_until_it_is_dropped() {
    let m = Mount::new();
    m.sh_ok("echo v1 > f && echo v2 > f && setfattr -n user.scratchfs.checkpoint -v cp . && echo v3 > f && echo v4 > f && rm f");
    ok(cli(&m, &["gc", "--keep-last", "1"]));
    assert_eq!(read(m.path(".checkpoints/cp/f")), "v2\n");
    assert!(m.path(".history/f/000002").exists());
    assert!(
        !m.path(".history/f/000003").exists(),
        "v3 is no checkpoint's"
    );
    let out = ok(cli(
        &m,
        &["gc", "--drop-checkpoint", "cp", "--keep-last", "1"],
    ));
    assert!(out.contains("checkpoint cp released"), "{out}");
    assert!(!m.path(".history/f/000002").exists());
    assert!(ok(cli(&m, &["log"])).contains("drop-checkpoint"));
    let (code, _, err) = cli(&m, &["gc", "--drop-checkpoint", "cp"]);
    assert_ne!(code, 0);
    assert!(err.contains("no such checkpoint"), "{err}");
}

/// A fork cut back to a checkpoint numbers its next versions from where it was cut (on
/// SQLite, from its highest row): the text indexes it copied named versions by those
/// numbers, and a search of the fork answered from the text of a version the cut
/// removed (`grep` missed what the fork's own version said). The cut drops them.
#[test]
fn a_fork_cut_back_searches_its_own_text() {
    let m = Mount::new();
    m.sh_ok(
        "echo 'first alpha' > a.md && setfattr -n user.scratchfs.checkpoint -v start . && \
         echo 'second bravo-text' > a.md",
    );
    assert!(ok(cli(&m, &["grep", "bravo-text"])).contains("a.md:1"));
    assert!(ok(cli(&m, &["grep", "--history", "bravo-text"])).contains("a.md@v"));
    let fork = NewDb::at(&m, "f.db", on_postgres());
    let db = m.db.to_str().unwrap();
    ok(cli(
        &m,
        &["fork", "--db", db, "--to", fork.arg(), "--at", "start"],
    ));
    let mnt = m.dir.path().join("m-fork");
    {
        let _guard = Other::mount(&[], &fork.0, &mnt);
        let o = std::process::Command::new("bash")
            .args(["-c", "echo 'third charlie-text' > a.md"])
            .current_dir(&mnt)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
    }
    for history in [false, true] {
        let mut args = vec!["grep", "--db", fork.arg()];
        if history {
            args.push("--history");
        }
        let found = cli(&m, &[&args[..], &["charlie-text"]].concat());
        assert!(found.1.contains("a.md"), "history {history}: {found:?}");
        let found = cli(&m, &[&args[..], &["bravo-text"]].concat());
        assert_eq!(
            (found.0, found.1.as_str()),
            (1, ""),
            "history {history}: the fork never held it"
        );
    }
}

/// Item 4: a fork for two parallel attempts (one with history, one tree-only), compared
/// with the original, one attempt adopted through the gate with provenance naming the
/// fork and its version; the other attempt's forbidden field refused and recorded.
#[test]
fn two_attempts_in_forks_and_one_adopted() {
    let m = mount_with(RULES);
    m.sh_ok(
        "echo 'plan v1' > plan.md && SCRATCHFS_WRITER=tool bash -c 'echo \"{\\\"total\\\": 100}\" > state.json' && \
         setfattr -n user.scratchfs.checkpoint -v start .",
    );
    let dir = m.dir.path();
    // On PostgreSQL the forks are databases of the same server.
    let (da, db_b) = (
        NewDb::at(&m, "a.db", on_postgres()),
        NewDb::at(&m, "b.db", on_postgres()),
    );
    let (fa, fb) = (&da.0, &db_b.0);
    let db = m.db.to_str().unwrap();
    ok(cli(
        &m,
        &["fork", "--db", db, "--to", da.arg(), "--at", "start"],
    ));
    ok(cli(
        &m,
        &[
            "fork",
            "--db",
            db,
            "--to",
            db_b.arg(),
            "--at",
            "start",
            "--tree-only",
        ],
    ));
    m.sh_ok("echo 'main moved on' >> plan.md");
    for (f, script) in [
        (fa, "echo 'plan A' > plan.md && echo 'found by A' > a.md"),
        (
            fb,
            "echo 'plan B' > plan.md && echo '{\"total\": 100, \"approval\": \"yes\"}' > state.json",
        ),
    ] {
        let mnt = dir.join(format!("m-{}", if f == fa { "a" } else { "b" }));
        let guard = Other::mount(&[], f, &mnt);
        let o = std::process::Command::new("bash")
            .args(["-c", script])
            .current_dir(&mnt)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        drop(guard);
    }
    // The fork with history keeps it; the tree-only fork has one version per file.
    let hist = ok(cli(
        &m,
        &["history", "plan.md", "--db", fa.to_str().unwrap()],
    ));
    assert!(hist.lines().count() >= 2, "{hist}");
    let log_b = ok(cli(&m, &["log", "--db", fb.to_str().unwrap()]));
    assert!(log_b.contains("fork     plan.md  v1"), "{log_b}");
    let cmp = ok(cli(&m, &["compare", "--with", fa.to_str().unwrap()]));
    assert!(cmp.contains("+ a.md") && cmp.contains("~ plan.md"), "{cmp}");
    // Adopt A's plan and finding (mounted), through the gate, with provenance.
    let out = ok(cli(
        &m,
        &["adopt", "--from", fa.to_str().unwrap(), "plan.md", "a.md"],
    ));
    assert!(out.contains("plan.md: adopted version"), "{out}");
    assert_eq!(read(m.path("plan.md")), "plan A\n");
    // Again: the same bytes make no version, and the report says so.
    let n = m.versions("plan.md").len();
    let again = ok(cli(
        &m,
        &["adopt", "--from", fa.to_str().unwrap(), "plan.md"],
    ));
    assert!(again.contains("plan.md: already the same"), "{again}");
    assert_eq!(m.versions("plan.md").len(), n);
    let origin = m.sh_ok("getfattr --only-values -n user.scratchfs.origin plan.md");
    let o: serde_json::Value = serde_json::from_str(&origin).unwrap();
    assert_eq!(o["source"], named(da.arg()));
    assert!(o["version"].as_i64().unwrap() >= 2, "{o}");
    assert_eq!(m.versions("plan.md").last().unwrap().1, "adopt");
    // The daemon reads the other database with its own privileges: through the mount,
    // adopting is root's and the mounting user's (EPERM, recorded).
    let o = m.sh(&format!(
        "{AGENT} setfattr -n user.scratchfs.adopt -v '{{\"from\": \"{}\", \"paths\": [\"plan.md\"]}}' . 2>&1",
        fa.display()
    ));
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("Operation not permitted"),
        "{o:?}"
    );
    assert!(ok(cli(&m, &["log", "--rejected"])).contains("adopt from"));
    // B's approval was set by no lead: adopting it as the harness is refused.
    let (code, _, err) = cli(&m, &["adopt", "--from", fb.to_str().unwrap(), "state.json"]);
    assert_ne!(code, 0, "{err}");
    assert!(read(m.path("state.json")).contains("100"));
    let rejected = ok(cli(&m, &["log", "--rejected"]));
    assert!(rejected.contains("approval"), "{rejected}");
}

/// A point whose file's version gc forgot (a time, not a checkpoint: gc keeps what those
/// need) is never shown with other bytes: `mount --at` refuses to open the file
/// (ENODATA), a fork at that time is refused, naming it.
#[test]
fn what_gc_forgot_is_not_shown_as_other_bytes() {
    let m = Mount::new();
    // g's v1 is the last version made before the time: what the point counts must
    // include the versions gc forgot.
    m.sh_ok("echo keep > k && echo v1 > g && mkdir empty");
    let t = m.sh_ok("date -u +%Y-%m-%dT%H:%M:%S.%NZ").trim().to_string();
    // v1 committed at its close, before this time; v2 after it (the clock goes on).
    m.sh_ok("echo v2 > g");
    ok(cli(&m, &["gc", "--keep-last", "1"]));
    let past = m.dir.path().join("past");
    let guard = Other::mount(&["--at", &t], &m.db, &past);
    assert_eq!(read(past.join("k")), "keep\n");
    assert!(past.join("empty").is_dir());
    let e = std::fs::read(past.join("g")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENODATA), "{e}");
    drop(guard);
    let to = m.dir.path().join("f.db");
    let (code, _, err) = cli(
        &m,
        &[
            "fork",
            "--to",
            to.to_str().unwrap(),
            "--at",
            &t,
            "--tree-only",
        ],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("forgotten the version of 1 file") && err.contains("g"),
        "{err}"
    );
    assert!(!to.exists());
    // export --at shows the same tree as mount --at: the forgotten file left out, said.
    let out = m.dir.path().join("out");
    let (code, _, err) = cli(&m, &["export", out.to_str().unwrap(), "--at", &t]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("skipped g: its version then was forgotten by gc"),
        "{err}"
    );
    assert_eq!(read(out.join("k")), "keep\n");
    assert!(!out.join("g").exists());
    assert!(
        out.join("empty").is_dir(),
        "an empty directory is part of the tree"
    );
}

/// A gc while a mount of the past is live, forgetting a version it shows: the file's
/// next open there fails with ENODATA (as in a mount made after the gc), and a handle
/// opened before reads EIO, never zeros in place of the bytes gc swept (it read zeros).
#[test]
fn a_gc_under_a_mount_of_the_past_never_shows_zeros() {
    let m = Mount::new();
    m.sh_ok("head -c 100000 /dev/urandom > g && echo keep > k");
    let t = m.sh_ok("date -u +%Y-%m-%dT%H:%M:%S.%NZ").trim().to_string();
    m.sh_ok("head -c 100000 /dev/urandom > g && head -c 100000 /dev/urandom > g");
    let past = m.dir.path().join("past-gc");
    let _guard = Other::mount(&["--at", &t], &m.db, &past);
    assert_eq!(std::fs::metadata(past.join("g")).unwrap().len(), 100000);
    let mut held = std::fs::File::open(past.join("g")).unwrap();
    let gc = ok(cli(&m, &["gc", "--keep-last", "1"]));
    assert!(gc.contains("deleted 2 versions"), "{gc}");
    let e = std::fs::read(past.join("g")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENODATA), "{e}");
    let mut buf = Vec::new();
    let e = std::io::Read::read_to_end(&mut held, &mut buf).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert_eq!(read(past.join("k")), "keep\n");
}

/// A fork makes a new database: never over a file, through a link, or beside a file a
/// database would take as its own (a planted redo log would be replayed into it).
#[test]
fn a_fork_makes_a_new_database_and_nothing_else() {
    let m = Mount::new();
    let dir = m.dir.path();
    let db = m.db.to_str().unwrap();
    std::fs::write(dir.join("victim"), "keep").unwrap();
    std::os::unix::fs::symlink(dir.join("victim"), dir.join("link.db")).unwrap();
    std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("dangling.db")).unwrap();
    std::fs::write(dir.join("planted.db-redo"), "not ours").unwrap();
    for (to, tree_only) in [
        ("link.db", false),
        ("dangling.db", true),
        ("dangling.db", false),
        ("planted.db", true),
        ("planted.db", false),
    ] {
        let to = dir.join(to);
        let mut args = vec!["fork", "--db", db, "--to", to.to_str().unwrap()];
        if tree_only {
            args.push("--tree-only");
        }
        let (code, _, err) = cli(&m, &args);
        assert_ne!(code, 0, "{to:?}");
        assert!(err.contains("exists"), "{err}");
    }
    assert_eq!(read(dir.join("victim")), "keep");
    assert!(!dir.join("nowhere").exists());
    assert_eq!(read(dir.join("planted.db-redo")), "not ours");
    assert!(!dir.join("planted.db").exists());
}

/// A redo log that belongs to another user than the database is never applied into it
/// (a planted `DB-redo`: its records would be replayed as the database's).
#[test]
fn a_redo_log_of_another_user_is_not_applied() {
    let mut m = Mount::new();
    m.sh_ok("echo mine > plan.md");
    m.unmount();
    let redo = std::path::PathBuf::from(format!("{}-redo", m.db.display()));
    std::fs::write(&redo, b"planted records").unwrap();
    std::os::unix::fs::chown(&redo, Some(1000), Some(1000)).unwrap();
    let (code, _, err) = cli(&m, &["log"]);
    assert_ne!(code, 0);
    assert!(err.contains("belongs to uid 1000"), "{err}");
    std::fs::remove_file(&redo).unwrap();
    m.start();
    assert_eq!(read(m.path("plan.md")), "mine\n");
}

/// Issue 15: a fork with its history crosses backends, from this backend's scratchpad to
/// the other's (PostgreSQL on the SQLite pass, an SQLite file on the PostgreSQL pass) and
/// back: the history up to the point (same versions, times, writers, hashes), the
/// checkpoint and the tree then are kept; the fork mounts and takes writes (its ids go
/// on past the ones copied); a database that holds a scratchpad is never forked into.
#[test]
fn a_fork_with_its_history_crosses_backends() {
    let m = Mount::new();
    m.sh_ok(
        "echo v1 > plan.md && echo v2 > plan.md && echo '{\"a\": 1}' > state.json && \
         mkdir d && echo x > d/x && setfattr -n user.scratchfs.checkpoint -v cp . && \
         echo v3 > plan.md && rm d/x && echo late > late.md",
    );
    let db = m.db.to_str().unwrap();
    let there = NewDb::at(&m, "there.db", !on_postgres());
    let out = ok(cli(
        &m,
        &["fork", "--db", db, "--to", there.arg(), "--at", "cp"],
    ));
    assert!(out.contains("with its history up to then"), "{out}");
    let theirs = ok(cli(&m, &["history", "plan.md", "--db", there.arg()]));
    let ours = ok(cli(&m, &["history", "plan.md", "--db", db]));
    let n = theirs.lines().count();
    assert!(n >= 3 && n < ours.lines().count(), "{theirs}\n--\n{ours}");
    assert_eq!(
        theirs.lines().collect::<Vec<_>>(),
        ours.lines().take(n).collect::<Vec<_>>(),
        "the fork's history is the source's up to the checkpoint"
    );
    let mnt = m.dir.path().join("m-there");
    {
        let _guard = Other::mount(&[], &there.0, &mnt);
        assert_eq!(read(mnt.join("plan.md")), "v2\n");
        assert_eq!(read(mnt.join("d/x")), "x\n");
        assert!(!mnt.join("late.md").exists());
        assert!(mnt.join(".checkpoints/cp/plan.md").exists());
        let o = std::process::Command::new("bash")
            .args([
                "-c",
                "echo v4 > plan.md && echo new > new.md && mkdir e && echo y > e/y",
            ])
            .current_dir(&mnt)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        assert_eq!(read(mnt.join("new.md")), "new\n");
        assert_eq!(read(mnt.join("e/y")), "y\n");
    }
    let after = ok(cli(&m, &["history", "plan.md", "--db", there.arg()]));
    assert_eq!(after.lines().count(), n + 1, "{after}");
    assert!(
        after
            .lines()
            .last()
            .unwrap()
            .trim_start()
            // n lines were a header and n - 1 versions; the new last one is version n.
            .starts_with(&format!("{n} ")),
        "{after}"
    );
    // And back to this backend, then compared: the same files.
    let back = NewDb::at(&m, "back.db", on_postgres());
    ok(cli(&m, &["fork", "--db", there.arg(), "--to", back.arg()]));
    let cmp = ok(cli(
        &m,
        &["compare", "--db", there.arg(), "--with", back.arg()],
    ));
    assert!(cmp.starts_with("no differences"), "{cmp}");
    // A database that holds a scratchpad is not forked into, and keeps what it held.
    let (code, _, err) = cli(&m, &["fork", "--db", db, "--to", there.arg()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("exists") || err.contains("holds a scratchpad"),
        "{err}"
    );
    assert_eq!(
        ok(cli(&m, &["history", "plan.md", "--db", there.arg()])),
        after
    );
}

/// A PostgreSQL database whose schema holds another application's tables by the store's
/// names, and no scratchpad, is refused by a fork into it and by a mount, naming them,
/// and is left as it was (a fork failed there on a column of theirs, an obscure error).
#[test]
fn a_database_with_another_applications_tables_is_refused() {
    let m = Mount::new();
    m.sh_ok("echo a > plan.md");
    let url = new_pg_database();
    pg_query(&url, "CREATE TABLE versions(x INTEGER)");
    pg_query(&url, "INSERT INTO versions VALUES (7)");
    let db = m.db.to_str().unwrap();
    let (code, _, err) = cli(&m, &["fork", "--db", db, "--to", &url]);
    assert_ne!(code, 0);
    assert!(
        err.contains("tables named as scratchfs's (versions) but holds no scratchpad"),
        "{err}"
    );
    let mnt = m.dir.path().join("m-foreign");
    std::fs::create_dir(&mnt).unwrap();
    let (code, _, err) = cli(
        &m,
        &["mount", mnt.to_str().unwrap(), "--db", &url, "--background"],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("tables named as scratchfs's (versions)"),
        "{err}"
    );
    assert_eq!(pg_query(&url, "SELECT x FROM versions"), "7");
    assert_eq!(
        pg_query(
            &url,
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()"
        ),
        "1"
    );
    drop_pg_database(&url);
}

/// A redaction reaches a mount of the past: a file it had read (its pages in the kernel's
/// cache, a reader holding it open) reads the redacted content at its next open, never
/// the secret (helper finding: the past mount served it from its cache).
#[test]
fn a_mount_of_the_past_reads_a_redaction() {
    let secret = "AKIAIOSFODNN7EXAMPLE";
    let m = Mount::new();
    // Waits until the clock's second is past the one it is now (MANIFEST shows seconds).
    let next_second = || {
        let secs = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
        };
        let now = secs();
        wait_for("the next second", || secs() > now);
    };
    // The checkpoint a second after the scratchpad was made.
    next_second();
    m.sh_ok(&format!(
        "echo tok {secret} > at.md && setfattr -n user.scratchfs.checkpoint -v cp ."
    ));
    let past = m.dir.path().join("past-redact");
    let _guard = Other::mount(&["--at", "cp"], &m.db, &past);
    assert_eq!(read(past.join("at.md")), format!("tok {secret}\n"));
    let held = std::fs::File::open(past.join("at.md")).unwrap();
    // The redaction a second after the checkpoint.
    next_second();
    ok(cli(&m, &["redact", "at.md@1", "--why", "test"]));
    let h = blake3::hash(secret.as_bytes()).to_hex();
    let redacted = format!("tok [REDACTED an AWS access key id blake3:{}]\n", &h[..16]);
    assert_eq!(read(m.path("at.md")), redacted);
    assert_eq!(read(past.join("at.md")), redacted);
    drop(held);
    assert_eq!(read(past.join("at.md")), redacted);
    // Its MANIFEST is as of the checkpoint (not the scratchpad's creation).
    let cps = ok(cli(&m, &["checkpoints", "--json"]));
    let cp: serde_json::Value = serde_json::from_str(cps.lines().next().unwrap()).unwrap();
    let time_ns = cp["point"]["time_ns"]
        .as_i64()
        .unwrap_or_else(|| panic!("{cps}"));
    let secs = time_ns / 1_000_000_000;
    let at = String::from_utf8(
        std::process::Command::new("date")
            .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%d %H:%M:%SZ"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let manifest = read(past.join("MANIFEST"));
    assert!(
        manifest.starts_with(&format!("MANIFEST as of {}:", at.trim())),
        "{}\n{manifest}",
        at.trim()
    );
}

/// A fork into a new SQLite file killed half-way leaves no file by that name (only
/// temporary files, which the next fork there removes): a retry succeeds.
#[test]
fn a_killed_fork_leaves_no_database_and_a_retry_succeeds() {
    let m = Mount::new();
    m.sh_ok("echo a > a.md && mkdir d && echo b > d/b.md");
    let to = m.dir.path().join("k.db");
    let flag = m.dir.path().join("failpoint-fork");
    let leftovers = || -> Vec<String> {
        std::fs::read_dir(m.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".k.db.new-"))
            .collect()
    };
    for tree_only in [false, true] {
        let mut args = vec!["fork", "--to", to.to_str().unwrap()];
        if tree_only {
            args.push("--tree-only");
        }
        let mut child = std::process::Command::new(BIN)
            .args(&args)
            .env("SCRATCHFS_DB", &m.db)
            .env("SCRATCHFS_FAILPOINT", "fork")
            .env("SCRATCHFS_FAILPOINT_FLAG", &flag)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        wait_for("the fork stops before naming its database", || {
            flag.exists()
        });
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            std::fs::symlink_metadata(&to).is_err(),
            "a killed fork left {to:?} (tree_only {tree_only})"
        );
        assert!(
            !leftovers().is_empty(),
            "the fork built under a temporary name"
        );
        let (code, _, err) = cli(&m, &args);
        assert_eq!(code, 0, "the retry (tree_only {tree_only}): {err}");
        assert!(leftovers().is_empty(), "{:?}", leftovers());
        let conn = rusqlite::Connection::open(&to).unwrap();
        let files: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM files WHERE deleted_ns IS NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(files >= 2, "{files} files in the fork");
        drop(conn);
        for p in std::fs::read_dir(m.dir.path()).unwrap() {
            let p = p.unwrap().path();
            if p.file_name().unwrap().to_string_lossy().starts_with("k.db") {
                std::fs::remove_file(p).unwrap();
            }
        }
        std::fs::remove_file(&flag).unwrap();
    }
}

/// Issue 35 item 6: a value adopted from a fork is credited to who set it there, not to
/// the adopter: `why` follows the adopted version to the fork (its version there, and
/// what set the key), `ground` credits a tool's number to the tool and a model's to the
/// model. A fork file others may write is not trusted to say so: not followed, and why.
#[test]
fn an_adopted_value_is_credited_to_who_set_it_in_the_fork() {
    let rules = r#"{ "writers": { "agent": { "env": "agent", "model": true },
                                  "get_order": { "env": "get_order" } },
                     "paths": [ { "path": "**", "writers": ["*"] } ] }"#;
    let dir = tempfile::tempdir().unwrap();
    let rules_file = dir.path().join("rules.json");
    std::fs::write(&rules_file, rules).unwrap();
    let rules_arg = rules_file.to_str().unwrap();
    let m = Mount::with_args(&["--rules", rules_arg]);
    let run = |mnt: &Path, writer: &str, step: u32, script: &str| {
        let o = std::process::Command::new("bash")
            .args(["-c", script])
            .current_dir(mnt)
            .env("SCRATCHFS_WRITER", writer)
            .env("SCRATCHFS_STEP", step.to_string())
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
    };
    run(
        &m.mnt,
        "get_order",
        1,
        r#"echo '{"order_total_cents": 100}' > state.json"#,
    );
    // The fork is an SQLite file on either backend (a URL is recorded without the
    // credentials that would open it again).
    let fork = NewDb::at(&m, "b.db", false);
    let db = m.db.to_str().unwrap();
    ok(cli(&m, &["fork", "--db", db, "--to", fork.arg()]));
    {
        let mnt_b = m.dir.path().join("m-b");
        let _b = Other::mount(&["--rules", rules_arg], &fork.0, &mnt_b);
        run(
            &mnt_b,
            "get_order",
            2,
            r#"echo '{"order_total_cents": 36000}' > state.json"#,
        );
        run(
            &mnt_b,
            "agent",
            3,
            r#"echo '{"order_total_cents": 36000, "refund_cents": 777}' > state.json"#,
        );
    }
    ok(cli(&m, &["adopt", "--from", fork.arg(), "state.json"]));
    assert!(read(m.path("state.json")).contains("777"));

    // why: the adopt, and in the fork the tool that set the key.
    let out = ok(cli(&m, &["why", "state.json:order_total_cents"]));
    assert!(out.contains("<- adopted from"), "{out}");
    assert!(out.contains("there set by"), "{out}");
    assert!(out.contains("(write by get_order, step 2,"), "{out}");
    let j = ok(cli(&m, &["why", "--json", "state.json:order_total_cents"]));
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["lineage"]["version"]["op"], "adopt", "{j}");
    assert_eq!(
        v["lineage"]["adopted"]["lineage"]["version"]["writer"], "get_order",
        "{j}"
    );
    let j = ok(cli(&m, &["why", "--json", "state.json:refund_cents"]));
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(
        v["lineage"]["adopted"]["lineage"]["version"]["writer"], "agent",
        "{j}"
    );

    // ground: the tool's number is sourced, the model's asserted, each by its writer.
    let ground = |reply: &str| {
        let o = std::process::Command::new(BIN)
            .args(["ground", "--json", "--db", db])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(reply.as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let g = ground("Refund 777 of 36000 cents.");
    let status_in = |g: &serde_json::Value, text: &str| {
        g["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["token"]["text"] == text)
            .unwrap_or_else(|| panic!("{text} in {g}"))
            .clone()
    };
    let status = |text: &str| status_in(&g, text);
    let total = status("36000");
    assert_eq!(total["status"], "sourced", "{g}");
    assert_eq!(total["sources"][0]["source"]["writer"], "get_order", "{g}");
    assert!(
        total["sources"][0]["source"]["adopted_from"]
            .as_str()
            .unwrap()
            .starts_with("adopt v"),
        "{g}"
    );
    assert_eq!(status("777")["status"], "asserted_by_model", "{g}");

    // An adoption of an adoption: a second fork of A (holding the adopted version), the
    // agent's own value in A meanwhile, then the second fork's adopted back. The model's
    // number stays the model's, followed through both forks (or, where a fork does not
    // carry the first origin, counted as asserted).
    let fork2 = NewDb::at(&m, "c.db", false);
    ok(cli(&m, &["fork", "--db", db, "--to", fork2.arg()]));
    run(
        &m.mnt,
        "agent",
        4,
        r#"echo '{"order_total_cents": 36000, "refund_cents": 1}' > state.json"#,
    );
    ok(cli(&m, &["adopt", "--from", fork2.arg(), "state.json"]));
    assert!(read(m.path("state.json")).contains("777"));
    let g2 = ground("Refund 777 of 36000 cents.");
    assert_eq!(status_in(&g2, "777")["status"], "asserted_by_model", "{g2}");
    assert_ne!(
        status_in(&g2, "36000")["sources"][0]["source"]["writer"],
        "anonymous",
        "{g2}"
    );

    // A fork file anyone may write could say anything: not followed, and why.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fork.0, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = ok(cli(&m, &["why", "state.json:order_total_cents"]));
    assert!(
        out.contains("not followed") && out.contains("not trusted"),
        "{out}"
    );
    assert!(!out.contains("there set by"), "{out}");
    // Nor one the agent (uid 1000) owns: it could have put its own file at that path.
    std::fs::set_permissions(&fork.0, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(&fork.0, Some(1000), Some(1000)).unwrap();
    let out = ok(cli(&m, &["why", "state.json:order_total_cents"]));
    assert!(out.contains("owned by uid 1000"), "{out}");
    let g = ground("Refund 777 of 36000 cents.");
    assert!(g.to_string().contains("not followed"), "{g}");
    std::os::unix::fs::chown(&fork.0, Some(0), Some(0)).unwrap();
    // Nor through a -wal beside it that another user could have planted (SQLite would
    // read it), nor through a symbolic link, nor in a directory another user may write.
    let wal = format!("{}-wal", fork.arg());
    let had_wal = std::path::Path::new(&wal).exists();
    if !had_wal {
        std::fs::write(&wal, b"").unwrap();
    }
    std::os::unix::fs::chown(&wal, Some(1000), Some(1000)).unwrap();
    let out = ok(cli(&m, &["why", "state.json:order_total_cents"]));
    assert!(out.contains("-wal: owned by uid 1000"), "{out}");
    if had_wal {
        std::os::unix::fs::chown(&wal, Some(0), Some(0)).unwrap();
    } else {
        std::fs::remove_file(&wal).unwrap();
    }
    let moved = m.dir.path().join("b-real.db");
    std::fs::rename(&fork.0, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &fork.0).unwrap();
    let out = ok(cli(&m, &["why", "state.json:order_total_cents"]));
    assert!(out.contains("symbolic link"), "{out}");
    std::fs::remove_file(&fork.0).unwrap();
    std::fs::rename(&moved, &fork.0).unwrap();
    let out = ok(cli(&m, &["why", "state.json:order_total_cents"]));
    assert!(out.contains("there set by"), "followed again: {out}");
    std::os::unix::fs::chown(m.dir.path(), Some(1000), None).unwrap();
    let out = ok(cli(&m, &["why", "state.json:order_total_cents"]));
    std::os::unix::fs::chown(m.dir.path(), Some(0), None).unwrap();
    assert!(
        out.contains("not trusted") && !out.contains("there set by"),
        "{out}"
    );
    // Unfollowed, a value is credited to the writer recorded for the version there (the
    // agent wrote it last), never to the adopter: the model's number is not sourced.
    assert_eq!(status_in(&g, "777")["status"], "asserted_by_model", "{g}");
}
