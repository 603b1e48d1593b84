//! The MCP tools' operations on the filesystem core (src/mcp/tools.rs, issue 12): what
//! they read and write, the versions they make, and the gate's refusals they return.

use std::sync::Arc;

use scratchfs::fs::{Ctx, Fs};
use scratchfs::mcp::tools::{self, READ_MAX, Section};
use scratchfs::store::Sqlite;

const ROOT: Ctx = Ctx {
    pid: 0,
    uid: 0,
    gid: 0,
};
const AGENT: Ctx = Ctx {
    pid: 0,
    uid: 1000,
    gid: 1000,
};

fn fs(dir: &std::path::Path, rules: Option<&str>) -> Fs {
    let (store, _) = Sqlite::open(&dir.join("t.db"), (0, 0)).unwrap();
    let fs = Fs::new(Arc::new(store), dir.to_path_buf()).unwrap();
    match rules {
        Some(r) => fs.with_rules(scratchfs::rules::enforce::Compiled::new(
            scratchfs::rules::Rules::parse(r).unwrap(),
        )),
        None => fs,
    }
}

fn versions(fs: &Fs, path: &str) -> usize {
    let l = fs.store().lineages(path).unwrap();
    let live = l.iter().find(|l| l.deleted_ns.is_none()).unwrap();
    fs.store().versions(live.file_id).unwrap().len()
}

#[test]
fn write_read_append_replace_outline() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fs(dir.path(), None);
    assert_eq!(
        tools::write(
            &fs,
            "notes/plan.md",
            b"# Plan\n## A\none\n## B\ntwo\n",
            ROOT
        )
        .unwrap(),
        25
    );
    assert_eq!(versions(&fs, "notes/plan.md"), 1, "one write, one version");
    let whole = tools::read(&fs, "notes/plan.md", &Section::Whole, 0, None, ROOT).unwrap();
    assert_eq!(whole.text, "# Plan\n## A\none\n## B\ntwo\n");
    assert_eq!(whole.next_offset, None);
    let b = tools::read(
        &fs,
        "notes/plan.md",
        &Section::Heading("B".into()),
        0,
        None,
        ROOT,
    )
    .unwrap();
    assert_eq!(b.text, "## B\ntwo\n");
    let l = tools::read(&fs, "notes/plan.md", &Section::Lines(2, 3), 0, None, ROOT).unwrap();
    assert_eq!(l.text, "## A\none\n");
    assert_eq!(
        tools::append(&fs, "notes/plan.md", b"three\n", ROOT).unwrap(),
        31
    );
    assert_eq!(versions(&fs, "notes/plan.md"), 2);
    // Exactly one match, else refused with the count.
    let e = tools::replace(&fs, "notes/plan.md", "## ", "### ", None, ROOT).unwrap_err();
    assert_eq!(e.errno, libc::EINVAL);
    assert!(e.reason.contains("occurs 2 times"), "{}", e.reason);
    let e = tools::replace(&fs, "notes/plan.md", "absent", "x", None, ROOT).unwrap_err();
    assert!(e.reason.contains("does not occur"), "{}", e.reason);
    assert_eq!(
        versions(&fs, "notes/plan.md"),
        2,
        "a refused replace makes no version"
    );
    assert_eq!(
        tools::replace(&fs, "notes/plan.md", "one", "ONE", None, ROOT).unwrap(),
        1
    );
    assert_eq!(
        tools::replace(&fs, "notes/plan.md", "## ", "### ", Some(0), ROOT).unwrap(),
        2
    );
    let now = tools::read(&fs, "notes/plan.md", &Section::Whole, 0, None, ROOT).unwrap();
    assert_eq!(now.text, "# Plan\n### A\nONE\n### B\ntwo\nthree\n");
    assert_eq!(versions(&fs, "notes/plan.md"), 4);
    let o = tools::outline(&fs, "notes/plan.md", ROOT).unwrap();
    // A file this small is its own outline (docs/views.md).
    assert_eq!(o, now.text);
    let e = tools::outline(&fs, "nope.md", ROOT).unwrap_err();
    assert_eq!(
        (e.errno, e.reason.as_str()),
        (libc::ENOENT, "nope.md: no such file")
    );
    // Views are read-only, paths stay inside.
    let e = tools::write(&fs, "MANIFEST", b"x", ROOT).unwrap_err();
    assert_eq!(e.errno, libc::EINVAL);
    let e = tools::write(&fs, "../escape", b"x", ROOT).unwrap_err();
    assert_eq!(e.errno, libc::EINVAL);
    let e = tools::read(&fs, "nope.md", &Section::Whole, 0, None, ROOT).unwrap_err();
    assert_eq!(e.errno, libc::ENOENT);
    assert!(e.reason.contains("nope.md: no such file"), "{}", e.reason);
}

#[test]
fn a_large_read_is_cut_with_where_to_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fs(dir.path(), None);
    let big: Vec<u8> = (0..100_000).map(|i| b"abcdefghij\n"[i % 11]).collect();
    tools::write(&fs, "big.txt", &big, ROOT).unwrap();
    let mut got = Vec::new();
    let mut offset = 0;
    let mut calls = 0;
    loop {
        let r = tools::read(&fs, "big.txt", &Section::Whole, offset, None, ROOT).unwrap();
        assert!(r.text.len() <= READ_MAX);
        assert_eq!(r.total_bytes, 100_000);
        got.extend_from_slice(r.text.as_bytes());
        calls += 1;
        match r.next_offset {
            Some(o) => offset = o,
            None => break,
        }
    }
    assert_eq!(got, big);
    assert_eq!(calls, 4, "100,000 bytes in reads of at most 32 KiB");
    let r = tools::read(&fs, "big.txt", &Section::Whole, 0, Some(10), ROOT).unwrap();
    assert_eq!((r.text.as_str(), r.next_offset), ("abcdefghij", Some(10)));
}

#[test]
fn the_gate_refuses_as_on_the_mount() {
    let dir = tempfile::tempdir().unwrap();
    let rules = r#"{ "writers": { "agent": { "uid": 1000 }, "tool": { "uid": 0 } },
        "paths": [ { "path": "ro.md", "mode": "read-only" },
                   { "path": "tool/**", "writers": ["tool"] },
                   { "path": "**", "writers": ["*"] } ] }"#;
    let fs = fs(dir.path(), Some(rules));
    tools::write(&fs, "tool/out.md", b"by the tool\n", ROOT).unwrap();
    // Modes that let the agent in (the kernel's part: tools::write checks them as it
    // would), so that what refuses it below is the gate.
    for path in ["", "tool", "tool/out.md"] {
        let ino = match path {
            "" => scratchfs::fs::ROOT,
            p => tools::resolve(&fs, p, ROOT).unwrap(),
        };
        let set = scratchfs::fs::SetAttr {
            mode: Some(0o777),
            ..Default::default()
        };
        fs.setattr(ino, set, None, ROOT).unwrap();
    }
    let e = tools::write(&fs, "tool/out.md", b"by the agent\n", AGENT).unwrap_err();
    assert_eq!(e.errno, libc::EACCES, "{}", e.reason);
    assert!(e.reason.contains("tool/out.md"), "{}", e.reason);
    let e = tools::replace(&fs, "tool/out.md", "tool", "agent", None, AGENT).unwrap_err();
    assert_eq!(e.errno, libc::EACCES, "{}", e.reason);
    let now = tools::read(&fs, "tool/out.md", &Section::Whole, 0, None, AGENT).unwrap();
    assert_eq!(
        now.text, "by the tool\n",
        "the refused writes changed nothing"
    );
    assert_eq!(
        fs.store().refusals(0).unwrap().1,
        2,
        "both refusals on record"
    );
    tools::write(&fs, "free.md", b"ok\n", AGENT).unwrap();
}

/// A file far larger than a call reads whole: `read` reads only its window, and a section
/// of it (which needs the whole file) is refused with what to do instead; a limit inside a
/// character still advances.
#[test]
fn a_huge_file_is_read_by_windows() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fs(dir.path(), None);
    tools::write(&fs, "huge.txt", "é".as_bytes(), ROOT).unwrap();
    let r = tools::read(&fs, "huge.txt", &Section::Whole, 0, Some(1), ROOT).unwrap();
    assert_eq!((r.text.as_str(), r.next_offset), ("é", None));
    let ino = tools::resolve(&fs, "huge.txt", ROOT).unwrap();
    let set = scratchfs::fs::SetAttr {
        size: Some(1 << 30),
        ..Default::default()
    };
    fs.setattr(ino, set, None, ROOT).unwrap();
    let r = tools::read(&fs, "huge.txt", &Section::Whole, (1 << 30) - 4, None, ROOT).unwrap();
    assert_eq!(r.total_bytes, 1 << 30);
    assert_eq!((r.text.len(), r.next_offset), (4, None));
    let e = tools::read(&fs, "huge.txt", &Section::Lines(1, 2), 0, None, ROOT).unwrap_err();
    assert_eq!(e.errno, libc::EFBIG);
    assert!(e.reason.contains("offset and limit"), "{}", e.reason);
}

/// An MCP call reads a view as the mount's processes do (docs/views.md): an outline, a
/// version and an archived copy are as readable as their file, or as the deleted file was.
#[test]
fn views_are_read_as_their_file_is() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fs(dir.path(), None);
    let chmod = |path: &str, mode: u32| {
        let ino = match path {
            "" => scratchfs::fs::ROOT,
            p => tools::resolve(&fs, p, ROOT).unwrap(),
        };
        let set = scratchfs::fs::SetAttr {
            mode: Some(mode),
            ..Default::default()
        };
        fs.setattr(ino, set, None, ROOT).unwrap();
    };
    chmod("", 0o777);
    tools::write(&fs, "s.md", b"# secret\n", ROOT).unwrap();
    tools::write(&fs, "g.md", b"gone\n", ROOT).unwrap();
    chmod("s.md", 0o600);
    chmod("g.md", 0o600);
    fs.remove(scratchfs::fs::ROOT, b"g.md", false, ROOT)
        .unwrap();
    let read = |path: &str, who: Ctx| tools::read(&fs, path, &Section::Whole, 0, None, who);
    for view in ["s.md.outline", ".history/s.md/000001", ".archive/g.md"] {
        let e = read(view, AGENT).unwrap_err();
        assert_eq!(e.errno, libc::EACCES, "{view}: {}", e.reason);
        assert!(read(view, ROOT).is_ok(), "{view} for root");
    }
    assert_eq!(
        tools::outline(&fs, "s.md", AGENT).unwrap_err().errno,
        libc::EACCES
    );
    chmod("s.md", 0o644);
    assert_eq!(
        read(".history/s.md/000001", AGENT).unwrap().text,
        "# secret\n"
    );
    assert!(read("s.md.outline", AGENT).unwrap().text.contains("secret"));
}

/// Issue 13 over MCP: a session's `read` then `write` is its read-modify-write (a lost
/// update when another process wrote between), `why` follows a key to what its writer
/// read, and `ground` sources a reply's numbers from what the caller may read.
#[test]
fn why_ground_and_lost_updates_through_the_tools() {
    use scratchfs::mcp::socket::{Request, run_call};
    let dir = tempfile::tempdir().unwrap();
    let fs = fs(dir.path(), None);
    let me = Ctx {
        pid: std::process::id(),
        uid: 0,
        gid: 0,
    };
    let call = |tool: &str, args: serde_json::Value, step: i64| {
        let mut args = args;
        args["step"] = step.into();
        run_call(
            &fs,
            me,
            &Request {
                tool: tool.into(),
                args,
                writer: Some(
                    if step == 2 {
                        "get_order"
                    } else {
                        "compute_credit"
                    }
                    .into(),
                ),
                client: Some("test".into()),
                client_version: None,
                read_only: false,
            },
        )
    };
    let o = call(
        "write",
        serde_json::json!({ "path": "state.json", "content": "{\"order_id\": \"O-9\", \"order_total_cents\": 36000}" }),
        2,
    );
    assert!(!o.is_error, "{}", o.text);
    // The session reads, then writes what it computed from it.
    let o = call("read", serde_json::json!({ "path": "state.json" }), 6);
    assert!(!o.is_error, "{}", o.text);
    let o = call(
        "write",
        serde_json::json!({ "path": "state.json", "content": "{\"order_id\": \"O-9\", \"order_total_cents\": 36000, \"credit_cents\": 18000}" }),
        6,
    );
    assert!(!o.is_error, "{}", o.text);
    let o = call(
        "why",
        serde_json::json!({ "path": "state.json", "key": "credit_cents" }),
        7,
    );
    assert!(!o.is_error, "{}", o.text);
    assert!(
        o.text.starts_with(
            "state.json:credit_cents = 18000\nset by state.json@2 (write by compute_credit, step 6"
        ),
        "{}",
        o.text
    );
    assert!(
        o.text
            .contains("<- read state.json@1 (create by get_order, step 2"),
        "{}",
        o.text
    );
    let s = o.structured.unwrap();
    assert_eq!(s["lineage"]["inputs"][0]["version"]["version"], 1);
    let o = call(
        "ground",
        serde_json::json!({ "text": "We will refund $180 on order O-9, not $540." }),
        7,
    );
    assert!(!o.is_error, "{}", o.text);
    let s = o.structured.unwrap();
    assert_eq!(s["ungrounded"], true, "{}", o.text);
    let status: Vec<&str> = s["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(status, ["sourced", "sourced", "unsourced"], "{}", o.text);
    // The session reads; another process (a live one, so that it resolves) writes; the
    // session's write from what it read is a lost update.
    let mut other = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let o = call("read", serde_json::json!({ "path": "state.json" }), 8);
    assert!(!o.is_error, "{}", o.text);
    let o = run_call(
        &fs,
        Ctx {
            pid: other.id(),
            uid: 0,
            gid: 0,
        },
        &Request {
            tool: "write".into(),
            args: serde_json::json!({ "path": "state.json", "content": "{\"order_total_cents\": 1}" }),
            writer: None,
            client: None,
            client_version: None,
            read_only: false,
        },
    );
    assert!(!o.is_error, "{}", o.text);
    let o = call(
        "write",
        serde_json::json!({ "path": "state.json", "content": "{\"credit_cents\": 5}" }),
        8,
    );
    let _ = other.kill();
    let _ = other.wait();
    assert!(o.is_error, "{}", o.text);
    assert_eq!(o.structured.unwrap()["errno"], libc::ESTALE, "{}", o.text);
    assert!(o.text.contains("lost update"), "{}", o.text);
    // A file the caller may not read is no source for it.
    let o = call("ground", serde_json::json!({ "text": "$0.01" }), 9);
    assert_eq!(o.structured.unwrap()["ungrounded"], false, "{}", o.text);
    let agent = Ctx {
        pid: std::process::id(),
        uid: 1000,
        gid: 1000,
    };
    let ino = tools::resolve(&fs, "state.json", ROOT).unwrap();
    let set = scratchfs::fs::SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    fs.setattr(ino, set, None, ROOT).unwrap();
    let o = run_call(
        &fs,
        agent,
        &Request {
            tool: "ground".into(),
            args: serde_json::json!({ "text": "$0.01" }),
            writer: None,
            client: None,
            client_version: None,
            read_only: true,
        },
    );
    assert_eq!(o.structured.unwrap()["ungrounded"], true, "{}", o.text);
}

/// Issue 14: the `checkpoint`, `checkpoints` and `rollback` tools, through the gate: the
/// agent takes a checkpoint, goes wrong, may not roll back; root rolls back.
#[test]
fn checkpoint_and_rollback_through_the_tools() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fs(dir.path(), None);
    let agent = scratchfs::identity::Caller {
        uid: 1000,
        gid: 1000,
        ..Default::default()
    };
    let root = scratchfs::identity::Caller::default();
    let call = |who: &scratchfs::identity::Caller, name: &str, args: serde_json::Value| {
        tools::call(&fs, who, name, &args, false, AGENT)
    };
    tools::write(&fs, "plan.md", b"good\n", ROOT).unwrap();
    let r = call(
        &agent,
        "checkpoint",
        serde_json::json!({"name": "good", "note": "before"}),
    );
    assert!(!r.is_error, "{}", r.text);
    let dup = call(&agent, "checkpoint", serde_json::json!({"name": "good"}));
    assert!(
        dup.is_error && dup.text.contains("exists already"),
        "{}",
        dup.text
    );
    tools::write(&fs, "plan.md", b"bad\n", ROOT).unwrap();
    tools::write(&fs, "junk.md", b"junk\n", ROOT).unwrap();
    let list = call(&agent, "checkpoints", serde_json::json!({}));
    assert!(
        list.text.contains("good") && list.text.contains("before"),
        "{}",
        list.text
    );
    let refused = call(&agent, "rollback", serde_json::json!({"name": "good"}));
    assert!(refused.is_error, "{}", refused.text);
    assert_eq!(refused.structured.unwrap()["errno"], libc::EPERM);
    let back = tools::call(
        &fs,
        &root,
        "rollback",
        &serde_json::json!({"name": "good"}),
        false,
        ROOT,
    );
    assert!(!back.is_error, "{}", back.text);
    assert_eq!(back.structured.as_ref().unwrap()["removed"], 1);
    let plan = tools::read(&fs, "plan.md", &Section::Whole, 0, None, ROOT).unwrap();
    assert_eq!(plan.text, "good\n");
    assert!(tools::read(&fs, "junk.md", &Section::Whole, 0, None, ROOT).is_err());
    let then = tools::read(
        &fs,
        ".checkpoints/good/plan.md",
        &Section::Whole,
        0,
        None,
        AGENT,
    );
    assert_eq!(then.unwrap().text, "good\n");
}
