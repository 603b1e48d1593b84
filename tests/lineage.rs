//! Issue 13: read provenance (what each version was made from), lost updates across
//! opens (read with one `open`, written with another), `why`, `ground`, and MANIFEST's
//! `read` column and stale files, on a real mount.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

/// A Python read-modify-write of `state.json` with two opens, that waits after its read
/// for a line on stdin (so that a test orders two of them without sleeping).
const RMW: &str = r#"
import json, sys
d = json.load(open("state.json"))
print("read", flush=True)
sys.stdin.readline()
d["n"] += int(sys.argv[1])
try:
    with open("state.json", "w") as f:
        json.dump(d, f)
    print("committed", flush=True)
except OSError as e:
    print("error", e.errno, e.strerror, flush=True)
"#;

struct Rmw {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Rmw {
    fn start(m: &Mount, add: u32) -> Rmw {
        let mut child = Command::new("python3")
            .args(["-c", RMW, &add.to_string()])
            .current_dir(&m.mnt)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "read\n");
        Rmw { child, out }
    }

    /// Lets it write; returns what it printed.
    fn finish(mut self) -> String {
        self.child.stdin.take().unwrap().write_all(b"\n").unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        assert!(self.child.wait().unwrap().success());
        line
    }
}

fn json(m: &Mount, path: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(m.path(path)).unwrap()).unwrap()
}

/// Whether a lost-update refusal at `path` holds exactly `content` (its blake3).
fn refused_with(m: &Mount, path: &str, content: &str) -> bool {
    let hashes = m.sql(&format!(
        "SELECT blake3 FROM events WHERE op = 'rejected' AND path = '{path}' AND errno = {}",
        libc::ESTALE
    ));
    let want = blake3::hash(content.as_bytes()).to_hex().to_string();
    hashes.lines().any(|h| h == want)
}

#[test]
fn read_modify_write_with_two_opens_is_refused_for_the_later_writer() {
    let m = Mount::new();
    m.sh_ok(r#"echo '{"n": 1}' > state.json"#);
    // Both read version 2; A writes first and wins; B's write rests on what it read.
    let a = Rmw::start(&m, 10);
    let b = Rmw::start(&m, 100);
    assert_eq!(a.finish(), "committed\n");
    let said = b.finish();
    assert!(
        said.starts_with(&format!("error {} ", libc::ESTALE)),
        "the later writer must get ESTALE: {said}"
    );
    assert_eq!(
        json(&m, "state.json")["n"],
        11,
        "the winner's version stands"
    );
    let log = cli(&m, &["log", "--rejected"]).1;
    assert!(log.contains("state.json: lost update"), "{log}");
    assert!(
        refused_with(&m, "state.json", r#"{"n": 101}"#),
        "the loser's content is on record"
    );
    // Read again, then write: no conflict.
    let c = Rmw::start(&m, 1000);
    assert_eq!(c.finish(), "committed\n");
    assert_eq!(json(&m, "state.json")["n"], 1011);
    // Without a concurrent writer nothing is refused.
    let d = Rmw::start(&m, 1);
    assert_eq!(d.finish(), "committed\n");
    assert_eq!(json(&m, "state.json")["n"], 1012);
}

#[test]
fn on_conflict_overwrite_lets_the_later_read_modify_write_win() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{ "writers": {}, "paths": [
             { "path": "state.json", "on_conflict": "overwrite" },
             { "path": "**" } ] }"#,
    )
    .unwrap();
    let m = Mount::with_args(&["--rules", rules.to_str().unwrap()]);
    m.sh_ok(r#"echo '{"n": 1}' > state.json"#);
    let a = Rmw::start(&m, 10);
    let b = Rmw::start(&m, 100);
    assert_eq!(a.finish(), "committed\n");
    assert_eq!(b.finish(), "committed\n");
    assert_eq!(json(&m, "state.json")["n"], 101, "the later commit wins");
    // And a rename over it from what was read before another write.
    m.sh_ok(r#"jq '.n = 3' state.json > t && echo '{"n": 5}' > state.json && mv t state.json"#);
    assert_eq!(json(&m, "state.json")["n"], 3, "the rename wins");
}

#[test]
fn sed_i_and_jq_mv_against_a_concurrent_writer() {
    let m = Mount::new();
    // Alone, both work as always.
    m.sh_ok("printf 'a\\nb\\n' > f.md && sed -i s/a/A/ f.md");
    assert_eq!(read(m.path("f.md")), "A\nb\n");
    m.sh_ok(r#"echo '{"n": 1}' > s.json && jq '.n = 2' s.json > t && mv t s.json"#);
    assert_eq!(json(&m, "s.json")["n"], 2);
    // sed -i reads f.md, and while it runs (GNU sed's `e`: a command run before the
    // first line's output) another process rewrites f.md; sed's rename of its temporary
    // over f.md would drop that write.
    let o = m.sh("sed -i -e '1e sh -c \"echo concurrent > f.md\"' -e s/b/B/ f.md");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("Stale file handle"),
        "sed: {} {err}",
        o.status
    );
    assert_eq!(
        read(m.path("f.md")),
        "concurrent\n",
        "the other writer's version stands"
    );
    // jq reads s.json into t; another process writes s.json; mv t s.json is refused.
    let o = m.sh(r#"jq '.n = 3' s.json > t && echo '{"n": 5}' > s.json && mv t s.json"#);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("Stale file handle"),
        "mv: {} {err}",
        o.status
    );
    assert_eq!(json(&m, "s.json")["n"], 5);
    assert_eq!(json(&m, "t")["n"], 3, "the loser's file is still there");
    let log = cli(&m, &["log", "--rejected"]).1;
    assert!(log.contains("f.md: lost update"), "{log}");
    assert!(log.contains("s.json: lost update"), "{log}");
    assert!(
        refused_with(&m, "s.json", "{\n  \"n\": 3\n}\n"),
        "jq's content is on record"
    );
    assert!(
        refused_with(&m, "f.md", "A\nB\n"),
        "sed's content is on record"
    );
    // The kernel tries the refused rename twice; the refusal is on record once.
    assert_eq!(
        m.sql(&format!(
            "SELECT COUNT(*) FROM events WHERE op = 'rejected' AND path = 's.json' AND errno = {}",
            libc::ESTALE
        )),
        "1"
    );
    // A backup put back, and an old version put back through a temporary: restores, not
    // updates made from what was read.
    m.sh_ok("echo orig > k.txt && cp k.txt k.bak && echo edited > k.txt && mv k.bak k.txt");
    assert_eq!(read(m.path("k.txt")), "orig\n");
    m.sh_ok(
        "echo v1 > r.txt && echo v2 > r.txt && cp .history/r.txt/000001 r.tmp && mv r.tmp r.txt",
    );
    assert_eq!(read(m.path("r.txt")), "v1\n");
}

/// What was read is current again (a rollback or a restore since another process changed
/// it): replacing it, by a rename or through a handle, drops no change and is not refused
/// (found by the model test: a rename after a rollback was ESTALE).
#[test]
fn bytes_brought_back_since_the_read_are_no_lost_update() {
    let m = Mount::new();
    let mnt = m.mnt.display();
    // jq reads s.json into t; another process writes s.json; a rollback brings back the
    // bytes jq read; mv t s.json replaces them.
    m.sh_ok(&format!(
        r#"echo '{{"n": 1}}' > s.json && jq '.n = 3' s.json > t &&
           setfattr -n user.scratchfs.checkpoint -v c1 {mnt} && echo '{{"n": 5}}' > s.json &&
           setfattr -n user.scratchfs.rollback -v c1 {mnt} && mv t s.json"#
    ));
    assert_eq!(json(&m, "s.json")["n"], 3);
    // The same with a restore by copy from .history.
    m.sh_ok(
        r#"echo '{"n": 1}' > r.json && jq '.n = 4' r.json > t && echo '{"n": 5}' > r.json &&
           cp .history/r.json/000001 r.json && mv t r.json"#,
    );
    assert_eq!(json(&m, "r.json")["n"], 4);
    // Through a handle: read, another process writes and puts the bytes back, write.
    m.sh_ok(r#"echo '{"n": 1}' > state.json"#);
    let a = Rmw::start(&m, 10);
    m.sh_ok(r#"echo '{"n": 5}' > state.json && echo '{"n": 1}' > state.json"#);
    assert_eq!(a.finish(), "committed\n");
    assert_eq!(json(&m, "state.json")["n"], 11);
    let log = cli(&m, &["log", "--rejected"]).1;
    assert!(!log.contains("lost update"), "{log}");
    // Bytes that differ are still refused (the rule this refines).
    let b = Rmw::start(&m, 100);
    m.sh_ok(r#"echo '{"n": 7}' > state.json"#);
    assert!(b.finish().starts_with(&format!("error {} ", libc::ESTALE)));
}

/// A shell's own `>` is not checked across opens: shells ignore an error of close(2) on a
/// redirection, so a refusal there would lose the write silently.
#[test]
fn a_shell_redirection_after_its_own_read_is_last_writer_wins() {
    let m = Mount::new();
    let o = m.sh_ok(
        r#"bash -c 'echo a > p.txt; read x < p.txt; python3 -c "open(\"p.txt\", \"w\").write(\"b\\n\")" || exit 9; cat p.txt; echo c > p.txt; echo rc=$?'"#,
    );
    assert_eq!(
        o, "b\nrc=0\n",
        "another process wrote between the read and the write"
    );
    assert_eq!(read(m.path("p.txt")), "c\n", "the shell's write landed");
    assert!(
        !cli(&m, &["log", "--rejected"]).1.contains("p.txt"),
        "nothing refused"
    );
}

/// Two shells' `>` of one file at once (helper finding: one got `ESTALE` at close, which
/// the shell ignores, so its write was lost without a word, mostly when both created the
/// file): last-writer-wins, both writes versions, nothing refused. Twenty names raced,
/// new files and existing ones.
#[test]
fn two_shells_overwriting_one_file_at_once_are_last_writer_wins() {
    let m = Mount::new();
    let o = m.sh_ok(
        "for i in $(seq 10); do (echo a > new$i & echo b > new$i & wait); done; \
         for i in $(seq 10); do echo old > old$i; done; \
         for i in $(seq 10); do (echo a > old$i & echo b > old$i & wait); done; echo done",
    );
    assert_eq!(o, "done\n");
    let (_, rejected, _) = cli(&m, &["log", "--rejected"]);
    assert!(
        !rejected.contains("new") && !rejected.contains("old"),
        "a shell's write was refused: {rejected}"
    );
    for i in 1..=10 {
        for (name, before) in [(format!("new{i}"), 0), (format!("old{i}"), 1)] {
            let text = read(m.path(&name));
            assert!(text == "a\n" || text == "b\n", "{name}: {text:?}");
            // Both writes are versions (an owed truncation between them may be one too).
            let hashes = m.sql(&format!(
                "SELECT v.blake3 FROM versions v JOIN files f ON f.id = v.file_id
                 WHERE f.path = '{name}' ORDER BY v.version"
            ));
            for content in ["a\n", "b\n"] {
                let want = blake3::hash(content.as_bytes()).to_hex().to_string();
                assert!(
                    hashes.lines().any(|h| h == want),
                    "{name}: no version holds {content:?}"
                );
            }
            assert!(hashes.lines().count() >= before + 2, "{name}: {hashes}");
        }
    }
}

/// A process that reads, through a handle it opened before another writer appended, the
/// appended bytes too (a follower) has read that newer version: its later overwrite is not
/// a lost update (helper finding: `open(p, "w")` then got `ESTALE`, the read on record
/// being the version the handle was opened on).
#[test]
fn a_follower_that_read_the_appended_version_may_overwrite_it() {
    let m = Mount::new();
    m.sh_ok("echo one > log.txt");
    let o = m.sh_ok(
        r#"python3 -c '
import subprocess
with open("log.txt", "rb") as f:
    subprocess.run(["sh", "-c", "echo two >> log.txt"], check=True)
    print(f.read())
with open("log.txt", "w") as f:
    f.write("rewritten\n")
print("ok")
'"#,
    );
    assert_eq!(o, "b'one\\ntwo\\n'\nok\n");
    assert_eq!(read(m.path("log.txt")), "rewritten\n");
    assert!(
        !cli(&m, &["log", "--rejected"]).1.contains("log.txt"),
        "nothing refused"
    );
}

#[test]
fn memory_tool_str_replace_against_a_concurrent_writer() {
    let m = Mount::new();
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python3");
    assert!(
        std::path::Path::new(python).exists(),
        "{python} is missing: run scripts/deps"
    );
    m.sh_ok("mkdir -p memories && printf '# Customer\\n- prefers email\\n' > memories/c.md");
    // The memory tool reads the file, then (here) another process rewrites it, then the
    // tool writes its temporary and renames it over the file.
    let script = r#"
import subprocess, sys
from anthropic.lib.tools import _beta_builtin_memory_tool as mt
from anthropic.types.beta import BetaMemoryTool20250818StrReplaceCommand as StrReplace
original = mt._read_file_content
def read_then_race(path, memory_path):
    content = original(path, memory_path)
    subprocess.run(["sh", "-c", "echo '# Customer (rewritten by a tool)' > memories/c.md"], check=True)
    return content
mt._read_file_content = read_then_race
tool = mt.BetaLocalFilesystemMemoryTool(base_path=".")
try:
    print(tool.execute(StrReplace(command="str_replace", path="/memories/c.md",
                                  old_str="- prefers email", new_str="- prefers email, never phone")))
except Exception as e:
    print("error:", type(e).__name__, e)
"#;
    let o = Command::new(python)
        .args(["-c", script])
        .current_dir(&m.mnt)
        .env("SCRATCHFS_WRITER", "memory_tool")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Stale file handle"),
        "the memory tool must see the refusal: {out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        read(m.path("memories/c.md")),
        "# Customer (rewritten by a tool)\n",
        "the concurrent writer's version stands"
    );
    assert!(
        refused_with(
            &m,
            "memories/c.md",
            "# Customer\n- prefers email, never phone\n"
        ),
        "the memory tool's content is on record"
    );
}

#[test]
fn a_version_records_what_its_writer_had_read() {
    let m = Mount::new();
    m.sh_ok(r#"echo '{"total_cents": 36000}' > order.json && echo notes > notes.md"#);
    // One process reads two files, then writes a third: its version's inputs.
    m.sh_ok(
        r#"python3 -c "
import json
t = json.load(open('order.json'))['total_cents']
open('notes.md').read()
json.dump({'credit_cents': t // 2}, open('credit.json', 'w'))
""#,
    );
    let x = m.sh_ok("getfattr --only-values -n user.scratchfs.inputs credit.json");
    let inputs: serde_json::Value = serde_json::from_str(&x).unwrap();
    let named: Vec<(String, i64)> = inputs
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["path"].as_str().unwrap().to_string(),
                i["version"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        named,
        [("order.json".to_string(), 1), ("notes.md".to_string(), 1)],
        "{x}"
    );
    assert!(inputs[0]["via"] == "read" && inputs[0]["read_ns"].as_i64().unwrap() > 0);
    // A file written by a process that read nothing has none.
    let o = m.sh("getfattr -n user.scratchfs.inputs order.json");
    assert!(!o.status.success(), "no inputs attribute on order.json");
    // log --json and history --json carry them.
    let log = cli(&m, &["log", "--json", "credit.json"]).1;
    let v: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert_eq!(v["inputs"][0]["path"], "order.json", "{log}");
    let hist = cli(&m, &["history", "--json", "credit.json"]).1;
    assert!(hist.contains("\"inputs\":[{"), "{hist}");
    // cp of an old version: the copy was made from it.
    m.sh_ok("echo two > notes.md && cp .history/notes.md/000001 old.md");
    let x = m.sh_ok("getfattr --only-values -n user.scratchfs.inputs old.md");
    let v: serde_json::Value = serde_json::from_str(&x).unwrap();
    assert_eq!(
        (&v[0]["path"], &v[0]["version"]),
        (&"notes.md".into(), &1.into()),
        "{x}"
    );
    // `cp .history/f/N f` restores: not a lost update.
    m.sh_ok("cp .history/notes.md/000001 notes.md");
    assert_eq!(read(m.path("notes.md")), "notes\n");
}

#[test]
fn why_follows_a_key_to_the_versions_its_writer_read() {
    let m = Mount::new();
    let tool = |step: u32, writer: &str, code: &str| {
        let o = Command::new("python3")
            .args(["-c", code])
            .current_dir(&m.mnt)
            .env("SCRATCHFS_STEP", step.to_string())
            .env("SCRATCHFS_WRITER", writer)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    tool(
        2,
        "get_order",
        "import json; json.dump({'order_id': 'O-9', 'order_total_cents': 36000}, open('state.json', 'w'))",
    );
    tool(
        6,
        "compute_credit",
        "import json; d = json.load(open('state.json')); d['credit_cents'] = d['order_total_cents'] // 2; json.dump(d, open('state.json', 'w'))",
    );
    let (code, out, err) = cli(&m, &["why", "state.json:credit_cents"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "state.json:credit_cents = 18000", "{out}");
    assert!(
        lines[1].starts_with("set by state.json@3 (write by compute_credit, step 6,"),
        "{out}"
    );
    assert!(
        lines[2]
            .trim_start()
            .starts_with("<- read state.json@2 (write by get_order, step 2,"),
        "{out}"
    );
    assert!(
        out.contains("order_total_cents = 36000  (here)"),
        "the input's keys and who set them: {out}"
    );
    let (_, json, _) = cli(&m, &["why", "--json", "state.json:credit_cents"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["value"], "18000");
    assert_eq!(v["lineage"]["version"]["writer"], "compute_credit");
    assert_eq!(v["lineage"]["inputs"][0]["version"]["writer"], "get_order");
    assert_eq!(v["lineage"]["inputs"][0]["version"]["step"], 2);
    // A key of a nested object; a whole file; errors.
    let (code, out, _) = cli(&m, &["why", "state.json"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("state.json\nset by state.json@3"), "{out}");
    let (code, _, err) = cli(&m, &["why", "state.json:nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("no key \"nope\""), "{err}");
    let (code, _, err) = cli(&m, &["why", "missing.md"]);
    assert_eq!(code, 1);
    assert!(err.contains("missing.md: no such file"), "{err}");
}

#[test]
fn ground_sources_numbers_and_identifiers_and_flags_model_assertions() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{ "writers": { "agent": { "env": "agent", "model": true },
                          "get_order": { "env": "get_order" } },
             "paths": [ { "path": "**" } ] }"#,
    )
    .unwrap();
    let m = Mount::with_args(&["--rules", rules.to_str().unwrap()]);
    let as_writer = |w: &str, script: &str| {
        let o = Command::new("bash")
            .args(["-c", script])
            .current_dir(&m.mnt)
            .env("SCRATCHFS_WRITER", w)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    as_writer(
        "get_order",
        r#"echo '{"order_id": "O-9", "credit_cents": 18000}' > state.json"#,
    );
    as_writer("agent", "echo 'estimate: 75 minutes' > notes.md");
    let ground = |reply: &str, json: bool| {
        let mut args = vec!["ground"];
        if json {
            args.push("--json");
        }
        let mut child = Command::new(BIN)
            .args(&args)
            .env("SCRATCHFS_DB", &m.db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(reply.as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        (
            o.status.code().unwrap(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (code, out) = ground("We will refund $180 on order O-9.", false);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("$180") && out.contains("credit_cents = 18000 (/100)"),
        "{out}"
    );
    assert!(out.contains("O-9") && out.contains("order_id"), "{out}");
    let (code, out) = ground("We will refund $540 on order O-9.", false);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("$540") && l.contains("UNSOURCED")),
        "{out}"
    );
    // A number only the model wrote is asserted, not sourced.
    let (code, out) = ground("It takes 75 minutes.", false);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("asserted by model"), "{out}");
    // Files under .git are no sources; a file over 4 MiB is not searched, and said so.
    m.sh_ok("mkdir -p .git && echo 'ref 4242' > .git/ORIG_HEAD");
    m.sh_ok("yes 'filler line' | head -c 5000000 > big.txt && echo 'total 987654' >> big.txt");
    let (code, out) = ground("4242 and 987654", false);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("4242") && l.contains("UNSOURCED")),
        "{out}"
    );
    assert!(
        out.contains("not searched (over 4 MiB, or past 256 MiB in all): big.txt"),
        "{out}"
    );
    let (code, out) = ground("Refund $180.", true);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tokens"][0]["status"], "sourced", "{out}");
    assert_eq!(
        v["tokens"][0]["sources"][0]["source"]["writer"],
        "get_order"
    );
}

#[test]
fn manifest_shows_reads_and_stale_files() {
    let m = Mount::new();
    let at_step = |step: u32, script: &str| {
        let o = Command::new("bash")
            .args(["-c", script])
            .current_dir(&m.mnt)
            .env("SCRATCHFS_STEP", step.to_string())
            .env("SCRATCHFS_WRITER", "agent")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    at_step(3, "echo '# Plan' > plan.md");
    let row = |path: &str| {
        let text = read(m.path("MANIFEST"));
        text.lines()
            .find(|l| l.starts_with(&format!("{path} ")))
            .unwrap_or_else(|| panic!("{path} not in MANIFEST:\n{text}"))
            .to_string()
    };
    assert!(row("plan.md").ends_with(" unread"), "{}", row("plan.md"));
    at_step(4, "cat plan.md > /dev/null");
    // `<age> by agent`: the age is the read's, before MANIFEST's time (the last change,
    // this read); a busy machine may make it 1s.
    let r = row("plan.md");
    let tail: Vec<&str> = r.split_whitespace().rev().take(3).collect();
    assert!(
        tail[..2] == ["agent", "by"]
            && tail[2].ends_with('s')
            && tail[2].trim_end_matches('s').parse::<u64>().is_ok(),
        "{r}"
    );
    at_step(5, "echo more >> plan.md");
    assert!(
        row("plan.md").ends_with("unread since v3"),
        "{}",
        row("plan.md")
    );
    // The step moves on to 40 while plan.md stays as it was at step 5.
    at_step(40, "echo x > findings.md");
    let text = read(m.path("MANIFEST"));
    assert!(
        text.contains("stale (unchanged for 10+ steps, now step 40): plan.md since step 5"),
        "{text}"
    );
    // The step is the latest caller's, not the highest: a wrong one is corrected.
    at_step(
        1_000_000_000,
        "true > /dev/null && cat findings.md > /dev/null",
    );
    at_step(42, "cat findings.md > /dev/null");
    let text = read(m.path("MANIFEST"));
    assert!(
        text.contains("now step 42): plan.md since step 5"),
        "{text}"
    );
    // Reads survive a remount.
    at_step(41, "cat plan.md > /dev/null");
    let mut m = m;
    m.unmount();
    m.start();
    let text = read(m.path("MANIFEST"));
    let line = text.lines().find(|l| l.starts_with("plan.md ")).unwrap();
    assert!(line.contains(" by agent"), "{text}");
}

/// The agent (uid 1000, marked `"model": true` in the SPEC example rules) cannot make its
/// own number a source by naming a tool's writer: the rules resolve it to `agent` by its
/// uid, and `ground` reports the number as asserted.
#[test]
fn the_agent_cannot_source_its_own_number_by_claiming_a_tool() {
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/spec-rules.json");
    let m = Mount::with_args(&["--rules", rules, "--owner", "1000:1000"]);
    let o = m.sh(
        "setpriv --reuid 1000 --regid 1000 --clear-groups env SCRATCHFS_WRITER=get_order \
         bash -c 'mkdir -p notes && echo \"total 777\" > notes/x.md && \
         echo \"{\\\"order_total_cents\\\": 77700}\" > state.json'",
    );
    assert!(!o.status.success(), "the state.json write must be refused");
    let mut child = Command::new(BIN)
        .arg("ground")
        .env("SCRATCHFS_DB", &m.db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Refund $777")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("$777  asserted by model: notes/x.md:1 v1 by agent"),
        "{out}"
    );
}

/// `why c.json:k` with a file named `c.json:k` beside `c.json`: the file, with a note on
/// stderr naming `--key`, which asks for the key without splitting the name.
#[test]
fn why_names_the_file_and_key_asks_for_the_key() {
    let m = Mount::new();
    m.sh_ok("echo '{\"k\": 1}' > c.json && echo text > 'c.json:k'");
    let why = |args: &[&str]| {
        let o = Command::new(BIN)
            .arg("why")
            .args(args)
            .args(["--json", "--db"])
            .arg(&m.db)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let w: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (w, String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (w, err) = why(&["c.json:k"]);
    assert_eq!(
        (w["path"].as_str(), w["key"].as_str()),
        (Some("c.json:k"), None)
    );
    assert!(err.contains("why c.json --key k"), "{err}");
    let (w, err) = why(&["c.json", "--key", "k"]);
    assert_eq!(
        (w["path"].as_str(), w["key"].as_str(), w["value"].as_str()),
        (Some("c.json"), Some("k"), Some("1"))
    );
    assert_eq!(err, "");
}

/// Issue 35, item 6: lineage that survives undo. A value a rollback (or a restore)
/// brought back is credited by `why` and `ground` to the writer that set it, with the
/// rollback named as the step that brought it back; a whole file's `why` shows the
/// version brought back as an input; MANIFEST offers no content that is current again.
#[test]
fn a_rollback_or_restore_keeps_the_value_credited_to_the_tool_that_set_it() {
    let m = Mount::new();
    let mnt = m.mnt.display();
    let as_writer = |w: &str, step: u32, script: &str| {
        let o = Command::new("bash")
            .args(["-c", script])
            .current_dir(&m.mnt)
            .env("SCRATCHFS_WRITER", w)
            .env("SCRATCHFS_STEP", step.to_string())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    as_writer(
        "get_order",
        2,
        r#"echo '{"order_total_cents": 36000, "status": "open"}' > state.json &&
           seq 1 200 > notes.md"#,
    );
    as_writer(
        "agent",
        3,
        &format!(
            r#"setfattr -n user.scratchfs.checkpoint -v c1 {mnt} &&
               echo '{{"order_total_cents": 99999, "status": "open"}}' > state.json &&
               echo short > notes.md"#
        ),
    );
    let manifest = read(m.path("MANIFEST"));
    assert!(
        manifest.contains("restorable:") && manifest.contains("notes.md"),
        "the shrink is offered before the rollback: {manifest}"
    );
    as_writer(
        "agent",
        4,
        &format!("setfattr -n user.scratchfs.rollback -v c1 {mnt}"),
    );
    assert_eq!(json(&m, "state.json")["order_total_cents"], 36000);
    let manifest = read(m.path("MANIFEST"));
    assert!(
        !manifest.contains("restorable:"),
        "content current again is no restorable hint: {manifest}"
    );

    // why of the key: the tool that set it, and the rollback that brought it back.
    let (code, out, err) = cli(&m, &["why", "state.json:order_total_cents"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[1].starts_with("set by state.json@2 (write by get_order, step 2,"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("  brought back by state.json@4 (rollback by "),
        "{out}"
    );
    let (_, j, _) = cli(&m, &["why", "--json", "state.json:order_total_cents"]);
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["lineage"]["version"]["writer"], "get_order", "{j}");
    assert_eq!(v["brought_back_by"][0]["op"], "rollback", "{j}");
    assert_eq!(v["brought_back_by"][0]["version"], 4, "{j}");
    // A key the rollback did not change keeps its setter, with nothing brought back.
    let (_, j, _) = cli(&m, &["why", "--json", "state.json:status"]);
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["lineage"]["version"]["version"], 2, "{j}");
    assert_eq!(v["brought_back_by"], serde_json::json!([]), "{j}");
    // why of the whole file: its current version, and the version it brought back.
    let out = cli(&m, &["why", "state.json"]).1;
    assert!(
        out.contains("set by state.json@4 (rollback by ")
            && out.contains("<- brought back from state.json@2 (write by get_order, step 2,"),
        "{out}"
    );
    // ground: sourced from the tool, the rollback named.
    let ground = |reply: &str| {
        let mut child = Command::new(BIN)
            .arg("ground")
            .env("SCRATCHFS_DB", &m.db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(reply.as_bytes())
            .unwrap();
        String::from_utf8_lossy(&child.wait_with_output().unwrap().stdout).into_owned()
    };
    let out = ground("The order total is 36000 cents.");
    assert!(
        out.contains(
            "order_total_cents = 36000 v2 by get_order step 2, brought back by rollback v4 by"
        ),
        "{out}"
    );

    // A restore: the agent changes it again, then restores version 2 (version 1 is the
    // empty file `>` created).
    as_writer(
        "agent",
        5,
        r#"echo '{"order_total_cents": 55555, "status": "open"}' > state.json"#,
    );
    let (code, _, err) = cli(&m, &["restore", "state.json@2"]);
    assert_eq!(code, 0, "{err}");
    let (_, j, _) = cli(&m, &["why", "--json", "state.json:order_total_cents"]);
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["lineage"]["version"]["writer"], "get_order", "{j}");
    assert_eq!(v["brought_back_by"][0]["op"], "restore", "{j}");
    assert_eq!(v["brought_back_by"][0]["version"], 6, "{j}");
    let out = ground("36000");
    assert!(
        out.contains("v2 by get_order step 2, brought back by restore v6 by"),
        "{out}"
    );
}
