//! Writer rules (SPEC §5, §6): writers per path, modes, content validation and fields.
//! Tools run as other uids (setpriv) and with SCRATCHFS_WRITER tags; every refusal leaves
//! the file, its version and its history unchanged, and is recorded with its reason.

mod common;
use common::*;

const RULES: &str = r#"{
  "writers": {
    "agent":     { "uid": 1000 },
    "get_order": { "env": "get_order" },
    "human":     { "uid": 0 }
  },
  "paths": [
    { "path": "plan.md",     "writers": ["agent", "human"] },
    { "path": "findings.md", "writers": ["agent", "human"], "mode": "append-only" },
    { "path": "frozen/**",   "mode": "write-once" },
    { "path": "frozen",      "writers": ["*"] },
    { "path": "policy.md",   "mode": "read-only" },
    { "path": "orders/**",   "writers": ["get_order", "human"] },
    { "path": "orders",      "writers": ["*"] },
    { "path": "*.md",        "writers": ["*"] },
    { "path": "state.json",  "writers": ["*"], "format": "json" },
    { "path": "notes/**",    "writers": ["*"], "max_bytes": 10 },
    { "path": "notes",       "writers": ["*"] },
    { "path": "vault/**",    "writers": ["*"], "deny_secrets": true },
    { "path": "vault",       "writers": ["*"] },
    { "path": "*.tmp",       "writers": ["*"] }
  ]
}"#;

fn mount_with_rules() -> Mount {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.json");
    std::fs::write(&rules, RULES).unwrap();
    let m = Mount::with_args(&["--rules", rules.to_str().unwrap(), "--owner", "1000:1000"]);
    std::mem::forget(dir);
    m
}

const AGENT: &str = "setpriv --reuid 1000 --regid 1000 --clear-groups";

/// Runs `script` as the agent (uid 1000); returns (success, stderr).
fn agent(m: &Mount, script: &str) -> (bool, String) {
    let o = m.sh(&format!("{AGENT} bash -c '{script}'"));
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn refused(m: &Mount) -> String {
    cli(m, &["log", "--rejected"]).1
}

#[test]
fn writers_per_path_with_eacces_and_a_recorded_reason() {
    let m = mount_with_rules();
    assert_eq!(agent(&m, "echo step > plan.md"), (true, String::new()));
    let before = m.versions("plan.md");
    // A tool tagged get_order, running as another uid, may not write the plan.
    // (POSIX bits open to all, so that the rules, not the kernel, decide.)
    m.sh_ok("mkdir orders && chmod 777 orders && chmod 666 plan.md");
    let o = m.sh("setpriv --reuid 2000 --regid 2000 --clear-groups env SCRATCHFS_WRITER=get_order bash -c 'echo 1 > orders/o1 && echo hijack > plan.md'");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("plan.md: Permission denied"), "{err}");
    assert!(refused(&m).contains("plan.md: writer get_order refused by rule \"plan.md\": only agent, human may write here"), "{}", refused(&m));
    assert_eq!(read(m.path("plan.md")), "step\n");
    assert_eq!(m.versions("plan.md"), before, "nothing committed");
    // The agent may not write where only get_order may.
    let (ok, err) = agent(&m, "echo forged > orders/o2");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    let (ok, err) = agent(&m, "rm orders/o1");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    let (ok, err) = agent(&m, "mv plan.md orders/p");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    assert_eq!(read(m.path("orders/o1")), "1\n");
    // Paths no rule matches cannot be created.
    let (ok, err) = agent(&m, "echo x > stray.txt");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    // Provenance names the writers the rules resolve.
    assert_eq!(
        m.sql("SELECT writer FROM versions WHERE path = 'orders/o1' ORDER BY id DESC LIMIT 1"),
        "get_order"
    );
    assert_eq!(
        m.sql("SELECT writer FROM versions WHERE path = 'plan.md' ORDER BY id DESC LIMIT 1"),
        "agent"
    );
    let log = refused(&m);
    assert!(log.contains("orders/o2: writer agent refused by rule \"orders/**\": only get_order, human may write here"), "{log}");
    assert!(
        log.contains("stray.txt: writer agent refused by rule (none): no path rule matches"),
        "{log}"
    );
    assert!(
        read(m.path("MANIFEST")).contains("refused ("),
        "MANIFEST shows refusals"
    );
}

#[test]
fn append_only_write_once_and_read_only() {
    let m = mount_with_rules();
    assert_eq!(
        agent(&m, "echo a >> findings.md && echo b >> findings.md"),
        (true, String::new())
    );
    let before = m.versions("findings.md");
    // Overwriting an append-only file: EPERM (at open for O_TRUNC, at write otherwise).
    let (ok, err) = agent(&m, "echo x > findings.md");
    assert!(!ok && err.contains("Operation not permitted"), "{err}");
    let (ok, err) = agent(
        &m,
        "python3 -c \"import os; f = os.open(\\\"findings.md\\\", os.O_WRONLY); os.write(f, b\\\"X\\\")\"",
    );
    assert!(
        !ok && err.contains("PermissionError") && err.contains("Operation not permitted"),
        "{err}"
    );
    let (ok, err) = agent(&m, "truncate -s 1 findings.md");
    assert!(!ok && err.contains("Operation not permitted"), "{err}");
    let (ok, err) = agent(&m, "rm findings.md");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    assert_eq!(read(m.path("findings.md")), "a\nb\n");
    assert_eq!(m.versions("findings.md"), before);
    // write-once: created once, never changed or deleted.
    assert_eq!(
        agent(&m, "mkdir -p frozen && echo v1 > frozen/f"),
        (true, String::new())
    );
    for cmd in [
        "echo v2 > frozen/f",
        "echo more >> frozen/f",
        "rm frozen/f",
        "mv frozen/f frozen/g",
    ] {
        let (ok, err) = agent(&m, cmd);
        assert!(!ok && err.contains("Permission denied"), "{cmd}: {err}");
    }
    assert_eq!(read(m.path("frozen/f")), "v1\n");
    // read-only: not even root may create it, nor a directory by its name (helper
    // finding: mkdir policy.md went through, and files under it).
    let e = m.sh("echo x > policy.md");
    assert!(String::from_utf8_lossy(&e.stderr).contains("Permission denied"));
    let (ok, err) = agent(&m, "mkdir policy.md");
    assert!(!ok && err.contains("Permission denied"), "mkdir: {err}");
    assert!(!m.path("policy.md").exists());
    assert!(
        refused(&m).contains("policy.md: writer agent refused by rule \"policy.md\": read-only"),
        "{}",
        refused(&m)
    );
    // A directory under write-once and append-only rules is still made.
    m.sh_ok("mkdir frozen/sub");
    assert!(refused(&m).lines().count() >= 10, "{}", refused(&m));
}

#[test]
fn a_bad_rules_file_stops_the_mount_with_line_and_column_and_rules_are_versioned() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        "{\n  \"writers\": {},\n  \"paths\": [ { \"path\": \"**\", \"mdoe\": \"x\" } ]\n}\n",
    )
    .unwrap();
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let o = std::process::Command::new(BIN)
        .arg("mount")
        .arg(&mnt)
        .arg("--db")
        .arg(dir.path().join("s.db"))
        .arg("--rules")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.json:3:") && err.contains("mdoe"), "{err}");
    let m = mount_with_rules();
    assert_eq!(m.sql("SELECT version, writer FROM rules"), "1|scratchfs");
    assert!(m.sql("SELECT text FROM rules").contains("\"findings.md\""));
}

/// A rules file with errors: `rules check` prints every problem as `FILE:LINE:COL:
/// message` (errors and warnings, in file order) and exits 1; `mount` and `mount
/// --background` refuse it with the same lines on stderr, and mount nothing.
#[test]
fn every_problem_is_reported_by_rules_check_and_refuses_the_mount() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{
  "writers": { "agent": { "uid": 1000 }, "agent": { "uid": 1001 }, "tool": { "uidd": 5 } },
  "paths": [
    { "path": "plan.md", "writers": ["agent"], "mdoe": "read-only" },
    { "path": "plan.md", "writers": ["agnet"], "format": "yaml" },
    { "path": "/notes/**", "writers": ["*"] }
  ],
  "ephemerals": []
}
"#,
    )
    .unwrap();
    let f = bad.display().to_string();
    let want = [
        format!("{f}:2:42: writers: duplicate writer \"agent\" (first at 2:16)"),
        format!("{f}:2:68: writer \"tool\" has no matchers"),
        format!(
            "{f}:2:78: writers.tool: unknown key \"uidd\" (expected one of: uid, gid, user, exe, \
             comm, env, mcp_client, model, exe_any_namespace)"
        ),
        format!(
            "{f}:4:48: paths[0]: unknown key \"mdoe\" (expected one of: path, writers, mode, \
             format, fields, additional_fields, max_bytes, deny_secrets, on_conflict, keep)"
        ),
        format!(
            "{f}:5:15: paths[1].path: duplicate glob \"plan.md\" (paths[0], at 4:15): the first \
             rule whose glob matches applies, so this one never would"
        ),
        format!("{f}:5:38: paths[1].writers[0]: unknown writer \"agnet\""),
        format!(
            "{f}:5:58: paths[1].format: expected one of \"json\", \"jsonl\", \"markdown\", \
             \"text\", found \"yaml\""
        ),
        format!(
            "{f}:6:15: warning: paths[2].path: \"/notes/**\" never matches: paths are matched \
             without a leading \"/\" (write \"plan.md\", not \"/plan.md\")"
        ),
        format!(
            "{f}:8:3: the file: unknown key \"ephemerals\" (expected one of: writers, paths, \
             ephemeral, manifest_tokens, checkpoints, quota)"
        ),
    ];
    let o = std::process::Command::new(BIN)
        .args(["rules", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.lines().collect::<Vec<_>>(), want, "{out}");
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!("scratchfs: {f}: 8 errors, 1 warning\n")
    );
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    for background in [false, true] {
        let mut cmd = std::process::Command::new("timeout");
        cmd.arg("20")
            .arg(BIN)
            .arg("mount")
            .arg(&mnt)
            .arg("--db")
            .arg(dir.path().join("s.db"))
            .arg("--rules")
            .arg(&bad);
        if background {
            cmd.arg("--background");
        }
        let o = cmd.output().unwrap();
        assert_eq!(o.status.code(), Some(1), "background: {background}");
        let err = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines[..want.len()], want, "background: {background}: {err}");
        assert_eq!(
            lines[want.len()..],
            [format!(
                "scratchfs: rules {f}: 8 errors, 1 warning (see above, or scratchfs rules check {f})"
            )],
            "background: {background}: {err}"
        );
        assert!(
            !std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap()
                .contains(&mnt.display().to_string()),
            "mounted"
        );
    }
}

/// A rules file with warnings only (a writer no rule names, a rule an earlier one
/// shadows, a glob no path matches): `rules check` prints them and exits 0, and the
/// mount starts, printing them on stderr (in the foreground, in its log; with
/// `--background`, on the terminal before the daemon starts).
#[test]
fn warnings_do_not_stop_rules_check_nor_the_mount() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("warn.json");
    std::fs::write(
        &rules,
        r#"{
  "writers": { "agent": { "uid": 1000 }, "spare": { "uid": 1001 } },
  "paths": [
    { "path": "**", "writers": ["agent", "*"] },
    { "path": "plan.md", "writers": ["agent"] }
  ],
  "ephemeral": ["*.swp", "notes/"]
}
"#,
    )
    .unwrap();
    let f = rules.display().to_string();
    let want = [
        format!(
            "{f}:2:42: warning: writer \"spare\" is named in no rule's writers (it only names \
             callers in provenance)"
        ),
        format!(
            "{f}:5:15: warning: paths[1].path: rule \"plan.md\" never applies: paths[0] (\"**\", \
             at 4:15) matches every path first, and the first rule whose glob matches applies"
        ),
        format!(
            "{f}:7:26: warning: ephemeral[1]: \"notes/\" never matches: no path ends with \"/\" \
             (a directory is matched by its name)"
        ),
    ];
    let o = std::process::Command::new(BIN)
        .args(["rules", "check"])
        .arg(&rules)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    let mut all = want.to_vec();
    all.push(format!("{f}: ok (2 writers, 2 path rules; 3 warnings)"));
    assert_eq!(out.lines().collect::<Vec<_>>(), all, "{out}");
    // In the foreground: the daemon's stderr.
    let mut m = Mount::with_args(&["--rules", &f]);
    m.sh_ok("echo hi > plan.md");
    m.unmount();
    let log = std::fs::read_to_string(m.dir.path().join("daemon.log")).unwrap();
    for w in &want {
        assert!(log.contains(w.as_str()), "{log}");
    }
    // In the background: on the terminal of `mount --background`, which succeeds.
    let o = std::process::Command::new(BIN)
        .arg("mount")
        .arg(&m.mnt)
        .arg("--db")
        .arg(&m.db)
        .arg("--rules")
        .arg(&rules)
        .arg("--background")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    // The warnings, then the two lines that say what was mounted.
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines[..want.len()], want[..], "{err}");
    assert!(
        lines[want.len()..].len() == 2 && lines[want.len()].starts_with("scratchfs: mounted "),
        "{err}"
    );
    assert_eq!(read(m.path("plan.md")), "hi\n");
    let st = std::process::Command::new(BIN)
        .arg("unmount")
        .arg(&m.mnt)
        .status()
        .unwrap();
    assert!(st.success());
}

#[test]
fn invalid_content_is_einval_and_kept_on_record() {
    let m = mount_with_rules();
    let out = m.sh_ok(
        "python3 -c '
import errno
f = open(\"state.json\", \"w\"); f.write(\"{\\\"order_id\\\": \")
try:
    f.close(); print(\"committed\")
except OSError as e:
    print(errno.errorcode[e.errno])'",
    );
    assert_eq!(out, "EINVAL\n");
    assert_eq!(
        read(m.path("state.json")).trim(),
        "{}",
        "the previous version stays"
    );
    // The refused content is stored with the reason.
    let row = m.sql(
        "SELECT size, blake3, reason FROM events WHERE op = 'rejected' AND path = 'state.json'",
    );
    let f: Vec<&str> = row.splitn(3, '|').collect();
    assert_eq!(f[0], "13");
    assert_eq!(f[1], blake3::hash(b"{\"order_id\": ").to_hex().as_str());
    assert!(f[2].contains("not JSON"), "{row}");
    // Through a rename, the target's rule applies: jq > tmp && mv tmp state.json.
    // (mv renders rename's EINVAL as "cannot move ... to a subdirectory of itself".)
    let e = m.sh("echo '{bad' > s.tmp && mv s.tmp state.json");
    assert!(!e.status.success());
    assert_eq!(read(m.path("state.json")).trim(), "{}");
    let rejected = cli(&m, &["log", "--rejected"]).1;
    assert_eq!(
        rejected.matches("state.json: writer").count(),
        2,
        "{rejected}"
    );
    m.sh_ok("echo '{\"ok\": 1}' > s.tmp && mv s.tmp state.json");
    assert_eq!(read(m.path("state.json")), "{\"ok\": 1}\n");
    // max_bytes.
    let out = m.sh_ok(
        "mkdir -p notes && python3 -c '
import errno
f = open(\"notes/n\", \"w\"); f.write(\"x\" * 11)
try:
    f.close(); print(\"committed\")
except OSError as e:
    print(errno.errorcode[e.errno])'",
    );
    assert_eq!(out, "EINVAL\n");
    // A refused create leaves no file behind (issue 9).
    assert!(
        !m.path("notes/n").exists(),
        "the refused create left a file"
    );
    assert!(
        cli(&m, &["log", "--rejected"])
            .1
            .contains("max_bytes 10 exceeded (11 bytes)")
    );
    // deny_secrets: a cloud key cannot be written where secrets are denied.
    let out = m.sh_ok(
        "mkdir -p vault && python3 -c '
import errno
f = open(\"vault/creds\", \"w\"); f.write(\"aws_key = AKIAIOSFODNN7EXAMPLE\\n\")
try:
    f.close(); print(\"committed\")
except OSError as e:
    print(errno.errorcode[e.errno])'",
    );
    assert_eq!(out, "EINVAL\n");
    assert!(
        cli(&m, &["log", "--rejected"])
            .1
            .contains("deny_secrets: content holds an AWS access key id")
    );
    m.sh_ok("echo 'no secret here' > vault/ok");
}

/// The seeds' example: only get_order may write order_total_cents, so a number the model
/// asserts has nowhere to go; a tool's value keeps its own provenance.
#[test]
fn per_field_writers_refuse_an_asserted_number() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{"writers": {"agent": {"uid": 1000}, "get_order": {"env": "get_order"}},
            "paths": [{"path": "state.json", "format": "json", "additional_fields": false,
                       "fields": {"order_total_cents": {"writers": ["get_order"], "type": "integer"},
                                  "note": {"writers": ["*"]}}},
                      {"path": "**", "writers": ["*"]}]}"#,
    )
    .unwrap();
    let m = Mount::with_args(&["--rules", rules.to_str().unwrap(), "--owner", "1000:1000"]);
    m.sh_ok("chmod 666 state.json");
    // The tool (uid 2000, tagged get_order) writes the total.
    m.sh_ok("setpriv --reuid 2000 --regid 2000 --clear-groups env SCRATCHFS_WRITER=get_order bash -c \"jq '.order_total_cents = 18000' state.json > /tmp/t.$$ && cat /tmp/t.$$ > state.json\"");
    assert_eq!(m.sql("SELECT writer FROM fields f JOIN versions v ON v.id = f.version_id WHERE key = 'order_total_cents'"), "get_order");
    // The agent asserts another number: refused at close with EINVAL, the reason on record.
    let out = m.sh_ok(&format!(
        "{AGENT} bash -c 'exec python3 -' <<'PYEOF'
import errno, json
s = json.load(open(\"state.json\")); s[\"order_total_cents\"] = 54000; s[\"note\"] = \"refund all\"
f = open(\"state.json\", \"w\"); json.dump(s, f)
try:
    f.close(); print(\"committed\")
except OSError as e:
    print(errno.errorcode[e.errno])
PYEOF"
    ));
    assert_eq!(out, "EINVAL\n");
    assert_eq!(
        read(m.path("state.json")).trim(),
        "{\n  \"order_total_cents\": 18000\n}"
    );
    let log = cli(&m, &["log", "--rejected"]).1;
    assert!(log.contains("state.json: writer agent refused by rule \"state.json\": key \"order_total_cents\" may be written only by get_order"), "{log}");
    // Keys it may write go through; reformatting is no change to the total.
    m.sh_ok(&format!("{AGENT} bash -c \"jq -c '.note = \\\"checked\\\"' state.json > n.tmp && mv n.tmp state.json\""));
    assert_eq!(
        read(m.path("state.json")),
        "{\"order_total_cents\":18000,\"note\":\"checked\"}\n"
    );
}

/// `"on_conflict": "overwrite"`: the later of two concurrent commits wins, no ESTALE.
#[test]
fn on_conflict_overwrite_lets_the_later_commit_win() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{"paths": [{"path": "last.json", "format": "json", "on_conflict": "overwrite"},
                      {"path": "**"}]}"#,
    )
    .unwrap();
    let m = Mount::with_args(&["--rules", rules.to_str().unwrap()]);
    for f in ["last.json", "other.json"] {
        m.sh_ok(&format!("echo '{{}}' > {f}"));
        let out = m.sh_ok(&format!(
            "python3 -c '
import errno, os
a = os.open(\"{f}\", os.O_RDWR); b = os.open(\"{f}\", os.O_RDWR); os.read(a, 9); os.read(b, 9)
os.pwrite(a, b\"{{\\\"a\\\": 1}}\", 0); os.ftruncate(a, 8); os.fsync(a)
os.pwrite(b, b\"{{\\\"b\\\": 2}}\", 0); os.ftruncate(b, 8)
try:
    os.fsync(b); print(\"committed\")
except OSError as e:
    print(errno.errorcode[e.errno])'"
        ));
        let want = if f == "last.json" {
            "committed\n"
        } else {
            "ESTALE\n"
        };
        assert_eq!(out, want, "{f}");
    }
    assert_eq!(read(m.path("last.json")), "{\"b\": 2}");
    assert_eq!(read(m.path("other.json")), "{\"a\": 1}");
}

/// `scripts/credit-scenario.sh` (docs/rules.md's example) runs on a real mount and shows
/// the agent's asserted credit refused with EINVAL while every tool-written key keeps the
/// tool's writer and step.
#[test]
fn credit_scenario_script() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/credit-scenario.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .env("SCRATCHFS_BIN", env!("CARGO_BIN_EXE_scratchfs"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "credit-scenario.sh failed (it mounts with FUSE as root): {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("credit_cents = 54000: refused, EINVAL"),
        "{stdout}"
    );
    assert!(
        stdout.contains("credit_cents = 18000: committed"),
        "{stdout}"
    );
    let field_row = |key: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{key} ")))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("no row for {key}:\n{stdout}"))
    };
    assert_eq!(
        field_row("order_total_cents")[2..4],
        ["get_order", "2"],
        "{stdout}"
    );
    assert_eq!(
        field_row("credit_cents")[2..4],
        ["compute_credit", "5"],
        "{stdout}"
    );
    assert_eq!(field_row("ticket_id")[2..4], ["trigger", "1"], "{stdout}");
    assert!(
        stdout.contains("rejected state.json") && stdout.contains("agent step 4"),
        "{stdout}"
    );
    // Issue 13: the lineage of credit_cents reaches get_order's total, and the grounding
    // of a good and a bad reply.
    let why = stdout
        .split("== where credit_cents came from")
        .nth(1)
        .unwrap_or_else(|| panic!("no why section:\n{stdout}"));
    let lines: Vec<&str> = why.lines().collect();
    assert_eq!(lines[1], "state.json:credit_cents = 18000", "{why}");
    assert!(
        lines[2].starts_with("set by state.json@5 (write by compute_credit, step 5,"),
        "{why}"
    );
    assert!(
        lines[3]
            .trim_start()
            .starts_with("<- read state.json@4 (write by get_order, step 2,"),
        "{why}"
    );
    assert!(why.contains("order_total_cents = 36000  (here)"), "{why}");
    let good = stdout
        .split("== a reply with grounded numbers")
        .nth(1)
        .unwrap();
    assert!(
        good.contains(
            "$180  sourced: state.json credit_cents = 18000 (/100) v5 by compute_credit step 5"
        ),
        "{good}"
    );
    assert!(
        good.contains("O-9   sourced: state.json order_id = \"O-9\""),
        "{good}"
    );
    assert!(good.contains("(exit 0)"), "{good}");
    let bad = stdout
        .split("== a reply with a number only the agent asserted")
        .nth(1)
        .unwrap();
    assert!(
        bad.contains("$540  asserted by model: findings.md:2 v3 by agent step 4"),
        "the agent's own note is no source: {bad}"
    );
    assert!(bad.contains("(exit 1)"), "{bad}");
}

/// Issue 3 item 7: each row of SPEC §6 as an ordinary shell tool and as Python meet it,
/// checking what the tool printed. Row 6 (a full database) is in
/// tests/storage.rs `a_full_database_is_enospc_and_harms_nothing_committed`.
#[test]
fn spec_section_6_rows_with_shell_tools_and_python() {
    let m = mount_with_rules();
    m.sh_ok("mkdir -p orders frozen notes && chmod 777 orders frozen notes");
    m.sh_ok("setpriv --reuid 2000 --regid 2000 --clear-groups env SCRATCHFS_WRITER=get_order bash -c 'echo 1 > orders/o1'");
    m.sh_ok("chmod 666 orders/o1");
    assert_eq!(
        agent(&m, "echo a >> findings.md && echo v1 > frozen/f"),
        (true, String::new())
    );
    // Python: run a snippet as the agent, print the errno name and strerror it caught.
    let py = |code: &str| {
        let o = m.sh(&format!(
            "{AGENT} bash -c 'exec python3 -' <<'PY'\nimport errno, os\ntry:\n{}\n    print(\"no error\")\nexcept OSError as e:\n    print(errno.errorcode[e.errno], e.strerror)\nPY",
            code.lines().map(|l| format!("    {l}\n")).collect::<String>()
        ));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let shell = |cmd: &str| {
        let (ok, err) = agent(&m, cmd);
        assert!(!ok, "{cmd} succeeded");
        err
    };
    // Row 1: a writer that may not write/create/delete/rename the path: EACCES.
    assert!(shell("echo forged > orders/o1").contains("orders/o1: Permission denied"));
    assert!(shell("touch orders/o9").contains("Permission denied"));
    assert!(shell("rm orders/o1").contains("Permission denied"));
    assert!(shell("mv orders/o1 orders/o2").contains("Permission denied"));
    assert_eq!(py("open('orders/o1', 'w')"), "EACCES Permission denied");
    assert_eq!(py("open('orders/new', 'x')"), "EACCES Permission denied");
    assert_eq!(py("os.unlink('orders/o1')"), "EACCES Permission denied");
    assert_eq!(
        py("os.rename('orders/o1', 'orders/o3')"),
        "EACCES Permission denied"
    );
    // Row 2: a view, a read-only or a write-once file, at open: EACCES.
    assert!(shell("echo x > MANIFEST").contains("MANIFEST: Permission denied"));
    assert!(shell("echo x > policy.md").contains("policy.md: Permission denied"));
    assert!(shell("echo v2 > frozen/f").contains("frozen/f: Permission denied"));
    assert_eq!(py("open('MANIFEST', 'w')"), "EACCES Permission denied");
    assert_eq!(py("open('frozen/f', 'a')"), "EACCES Permission denied");
    // Row 3: append-only, a write before the committed end: EPERM at write.
    assert!(
        shell("dd if=/dev/zero of=findings.md bs=1 count=1 conv=notrunc status=none")
            .contains("Operation not permitted")
    );
    assert_eq!(
        py("fd = os.open('findings.md', os.O_WRONLY)\nos.pwrite(fd, b'X', 0)"),
        "EPERM Operation not permitted"
    );
    // Row 4: invalid content: EINVAL at close (cp checks close), or at rename.
    assert!(shell("printf '{bad' > /tmp/scratchfs-bad.$$ && cp /tmp/scratchfs-bad.$$ state.json; r=$?; rm -f /tmp/scratchfs-bad.$$; exit $r")
        .contains("Invalid argument"));
    assert_eq!(
        py("f = open('state.json', 'w')\nf.write('{bad')\nf.close()"),
        "EINVAL Invalid argument"
    );
    assert_eq!(
        py("open('s.tmp', 'w').write('{bad')\nos.rename('s.tmp', 'state.json')"),
        "EINVAL Invalid argument"
    );
    // ... and at write when already certain: a byte that is not UTF-8 in a text format.
    // The handle's later writes fail too, and nothing of it is committed.
    let before = refused(&m).lines().count();
    assert!(shell("printf \"\\\\377\" > state.json").contains("write error: Invalid argument"));
    assert_eq!(
        py(
            "fd = os.open('state.json', os.O_WRONLY | os.O_TRUNC)\ntry:\n    os.write(fd, b'{\"a\": \"\\xff\"}')\nexcept OSError as e:\n    print('at write:', errno.errorcode[e.errno])\nos.write(fd, b'{}')"
        ),
        "at write: EINVAL\nEINVAL Invalid argument"
    );
    let log = refused(&m);
    assert_eq!(log.lines().count(), before + 2, "one refusal each: {log}");
    assert!(log.contains("not UTF-8 (byte 7)"), "{log}");
    // A JSON syntax error before the end of what was written: at write too.
    assert_eq!(
        py(
            "fd = os.open('state.json', os.O_WRONLY | os.O_TRUNC)\nos.write(fd, b'{\"a\": ')\ntry:\n    os.write(fd, b'1 \"b\"')\nexcept OSError as e:\n    print('at write:', errno.errorcode[e.errno])\nos.close(fd)"
        ),
        "at write: EINVAL\nno error"
    );
    let log = refused(&m);
    assert!(log.contains("not JSON: expected `,` or `}`"), "{log}");
    assert_eq!(read(m.path("state.json")).trim(), "{}");
    assert_eq!(read(m.path("findings.md")), "a\n");
    assert_eq!(read(m.path("frozen/f")), "v1\n");
    // Row 5: a lost update: ESTALE at close (two handles of one process, so no other
    // test's fork can flush them early; see tests/posix.rs).
    assert_eq!(
        py(
            "a = os.open('plan.md', os.O_RDWR); b = os.open('plan.md', os.O_RDWR)\nos.read(a, 9); os.read(b, 9)\nos.write(a, b'first'); os.write(b, b'second')\nos.close(a); os.close(b)"
        ),
        "ESTALE Stale file handle"
    );
    assert_eq!(read(m.path("plan.md")), "first");
    // The same with a shell tool: tee holds plan.md open with a byte written while
    // another process commits; tee's close reports the lost update.
    let o = m.sh(
        "go=$(mktemp -u /tmp/scratchfs-go.XXXXXX) && mkfifo $go
         ( { printf x; read line < $go; printf y; } | tee plan.md > /dev/null ) &
         tee=; for i in $(seq 6000); do
           for p in /proc/[0-9]*; do ls -l $p/fd 2>/dev/null | grep -q \"$PWD/plan.md$\" && tee=${p#/proc/}; done
           [ -n \"$tee\" ] && break; sleep 0.05; done
         # tee writes to stdout, then to plan.md: 2 bytes written means x is in its copy.
         until [ \"$(awk '/^wchar/ {print $2}' /proc/$tee/io)\" -ge 2 ]; do sleep 0.01; done
         echo A > plan.md; echo > $go; wait $!; r=$?; rm -f $go; exit $r",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("tee: plan.md: Stale file handle"), "{err}");
    assert_eq!(read(m.path("plan.md")), "A\n");
    // Every refusal is on record with its reason.
    let log = refused(&m);
    assert!(log.lines().count() >= 14, "{log}");
}

/// A NUL in text the store keeps (a JSON key, a refusal's reason quoting it) loses
/// neither the write nor the refusal's record, on either backend (helper finding: on
/// PostgreSQL, whose text cannot hold a NUL, the commit failed with EINVAL and the
/// refusal was not recorded).
#[test]
fn a_nul_in_a_json_key_is_committed_and_its_refusal_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{"writers": {"agent": {"uid": 1000}},
            "paths": [{"path": "state.json", "format": "json", "additional_fields": false,
                       "fields": {"ok": {"writers": ["*"]}}},
                      {"path": "**", "writers": ["*"]}]}"#,
    )
    .unwrap();
    let m = Mount::with_args(&["--rules", rules.to_str().unwrap(), "--owner", "1000:1000"]);
    let out = m.sh_ok(
        "exec python3 - <<'PYEOF'
f = open('nul.json', 'w'); f.write('{\"a\\\\u0000b\": 1, \"ok\": \"x\\\\u0000\"}')
f.close(); print('committed')
PYEOF",
    );
    assert_eq!(out, "committed\n");
    assert_eq!(
        read(m.path("nul.json")),
        "{\"a\\u0000b\": 1, \"ok\": \"x\\u0000\"}"
    );
    let history = cli(&m, &["history", "nul.json"]).1;
    assert!(history.contains("create"), "{history}");
    m.sh_ok("echo '{\"ok\": 1}' > state.json && chmod 666 state.json");
    let before = refused(&m).lines().count();
    let out = m.sh_ok(&format!(
        "{AGENT} bash -c 'exec python3 -' <<'PYEOF'
import errno
f = open('state.json', 'w'); f.write('{{\"ok\": 2, \"zz\\\\u0000q\": 5}}')
try:
    f.close(); print('committed')
except OSError as e:
    print(errno.errorcode[e.errno])
PYEOF"
    ));
    assert_eq!(out, "EINVAL\n");
    assert_eq!(read(m.path("state.json")), "{\"ok\": 1}\n");
    let log = refused(&m);
    assert!(
        log.lines().count() > before,
        "the refusal is not on record: {log}"
    );
    assert!(log.contains("is not among the fields"), "{log}");
}

/// A file unlinked while open is judged, and recorded, at the path it had: writing a
/// secret through a handle on `vault/x` after unlinking it is refused by `vault/**`'s
/// `deny_secrets`, not judged as a file `x` at the root (helper finding: an orphan's path
/// was its bare name, so a version was recorded as `tmpx` for `sub/tmpx`, and a
/// directory's rules did not reach it).
#[test]
fn a_file_unlinked_while_open_keeps_its_path_and_its_rules() {
    let m = mount_with_rules();
    let out = m.sh_ok(
        "mkdir -p vault notes && python3 -c '
import errno, os
fd = os.open(\"vault/x\", os.O_CREAT | os.O_WRONLY, 0o644)
os.unlink(\"vault/x\")
try:
    os.write(fd, b\"aws_key = AKIAIOSFODNN7EXAMPLE\\n\")
    os.close(fd); print(\"committed\")
except OSError as e:
    print(errno.errorcode[e.errno])
fd = os.open(\"notes/tmpx\", os.O_CREAT | os.O_WRONLY, 0o644)
os.unlink(\"notes/tmpx\")
os.write(fd, b\"hi\\n\")
os.close(fd)'",
    );
    assert_eq!(out, "EINVAL\n");
    let log = cli(&m, &["log", "--rejected"]).1;
    assert!(log.contains("vault/x"), "{log}");
    assert!(log.contains("deny_secrets"), "{log}");
    let log = cli(&m, &["log"]).1;
    assert!(
        log.lines()
            .any(|l| l.contains(" notes/tmpx ") && l.contains(" v1 ")),
        "the orphan's version is not recorded at notes/tmpx: {log}"
    );
}
