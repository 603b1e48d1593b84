//! Issue 12: `scratchfs mcp`, driven by a real MCP client, the official MCP Python SDK
//! (tests/mcp_client.py, in the virtual environment scripts/deps makes), over stdio and
//! over streamable HTTP, on an unmounted database and on a mounted one (whose daemon then
//! runs the calls, so both sides see one core).

mod common;
use common::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};

const SPEC_RULES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/spec-rules.json");

/// `scratchfs mcp ARGS` over stdio.
fn stdio(db: &Path, args: &[&str], name: &str, calls: Value) -> Value {
    let db = db.to_str().unwrap();
    let mut target = vec!["stdio", BIN, "mcp", "--db", db];
    target.extend_from_slice(args);
    mcp_session(name, &target, calls)
}

fn result(report: &Value, i: usize) -> (bool, String) {
    let r = &report["results"][i];
    (
        r["is_error"].as_bool().unwrap(),
        r["text"].as_str().unwrap().to_string(),
    )
}

fn ok(report: &Value, i: usize) -> String {
    let (err, text) = result(report, i);
    assert!(!err, "call {i} failed: {text}");
    text
}

fn refused(report: &Value, i: usize) -> String {
    let (err, text) = result(report, i);
    assert!(err, "call {i} succeeded: {text}");
    text
}

fn sql(db: &Path, query: &str) -> String {
    let o = Command::new("sqlite3")
        .arg("-batch")
        .arg(db)
        .arg(query)
        .output()
        .expect("run sqlite3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim_end().to_string()
}

/// Every tool over stdio on a database nobody has mounted (no FUSE involved): what each
/// returns, the versions it makes, the paths it refuses, and the provenance it records.
#[test]
fn every_tool_over_stdio_without_a_mount() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let calls = json!([
        { "tool": "write", "args": { "path": "notes/plan.md", "content": "# Plan\n## A\none\n## B\ntwo\n", "step": 3 } },
        { "tool": "read", "args": { "path": "notes/plan.md", "section": "B" } },
        { "tool": "read", "args": { "path": "notes/plan.md", "lines": "2-3" } },
        { "tool": "read", "args": { "path": "notes/plan.md", "offset": 2, "limit": 4 } },
        { "tool": "append", "args": { "path": "notes/plan.md", "content": "three\n" } },
        { "tool": "replace", "args": { "path": "notes/plan.md", "find": "## ", "with": "### " } },
        { "tool": "replace", "args": { "path": "notes/plan.md", "find": "## ", "with": "### ", "count": 0 } },
        { "tool": "outline", "args": { "path": "notes/plan.md" } },
        { "tool": "list", "args": {} },
        { "tool": "history", "args": { "path": "notes/plan.md" } },
        { "tool": "read_version", "args": { "path": "notes/plan.md", "version": 1 } },
        { "tool": "diff", "args": { "path": "notes/plan.md", "from": 1 } },
        { "tool": "restore", "args": { "path": "notes/plan.md", "version": 1 } },
        { "tool": "read", "args": { "path": "/etc/passwd" } },
        { "tool": "read", "args": { "path": "notes/../../x" } },
        { "tool": "write", "args": { "path": "notes/%2e%2e/x", "content": "x" } },
        { "tool": "write", "args": { "path": "MANIFEST", "content": "x" } },
        { "tool": "read", "args": { "path": "nope.md" } },
        { "tool": "read", "args": { "path": "MANIFEST" } },
        { "tool": "no_such_tool", "args": {} },
    ]);
    let r = stdio(&db, &[], "pytest-agent", calls);
    assert_eq!(r["server"], "scratchfs");
    assert!(r["instructions"].as_str().unwrap().contains("list"));
    let names: Vec<&str> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "list",
            "read",
            "outline",
            "write",
            "append",
            "replace",
            "history",
            "read_version",
            "diff",
            "memory",
            "why",
            "ground",
            "checkpoint",
            "checkpoints",
            "rollback",
            "search",
            "glob",
            "mkdir",
            "delete",
            "move",
            "restore"
        ]
    );
    for t in r["tools"].as_array().unwrap() {
        assert!(!t["description"].as_str().unwrap().is_empty(), "{t}");
        assert_eq!(t["schema"]["type"], "object", "{t}");
    }
    assert_eq!(ok(&r, 0), "notes/plan.md: 25 bytes");
    assert_eq!(r["results"][0]["structured"]["bytes"], 25);
    assert_eq!(ok(&r, 1), "## B\ntwo\n");
    assert_eq!(ok(&r, 2), "## A\none\n");
    assert!(
        ok(&r, 3).starts_with("Plan\n[cut: 4 of 25 bytes shown; read on with offset 6]"),
        "{}",
        ok(&r, 3)
    );
    assert_eq!(r["results"][3]["structured"]["next_offset"], 6);
    assert_eq!(ok(&r, 4), "notes/plan.md: 31 bytes");
    assert!(
        refused(&r, 5).contains("occurs 2 times"),
        "{}",
        refused(&r, 5)
    );
    assert_eq!(ok(&r, 6), "notes/plan.md: 2 replaced");
    assert!(ok(&r, 7).contains("### A"), "{}", ok(&r, 7));
    let files = r["results"][8]["structured"]["files"].as_array().unwrap();
    let plan = files
        .iter()
        .find(|f| f["path"] == "notes/plan.md")
        .unwrap_or_else(|| panic!("{files:?}"));
    assert_eq!(plan["bytes"], 33);
    assert_eq!(plan["version"], 3);
    assert_eq!(plan["writer"], "anonymous");
    assert!(plan["age_s"].as_u64().unwrap() < 3600, "{plan}");
    assert_eq!(r["results"][8]["structured"]["refusals_total"], 0);
    assert!(ok(&r, 8).starts_with("MANIFEST as of"), "{}", ok(&r, 8));
    let history = ok(&r, 9);
    assert_eq!(history.lines().count(), 3, "{history}");
    assert!(
        history.lines().next().unwrap().contains("step 3"),
        "{history}"
    );
    assert_eq!(ok(&r, 10), "# Plan\n## A\none\n## B\ntwo\n");
    let diff = ok(&r, 11);
    assert!(
        diff.contains("-## A") && diff.contains("+### A") && diff.contains("+three"),
        "{diff}"
    );
    assert_eq!(ok(&r, 12), "notes/plan.md: version 1 restored");
    assert!(
        refused(&r, 13).contains("absolute path"),
        "{}",
        refused(&r, 13)
    );
    assert!(refused(&r, 14).contains("`..`"), "{}", refused(&r, 14));
    assert!(
        refused(&r, 15).contains("URL-encoded"),
        "{}",
        refused(&r, 15)
    );
    assert!(refused(&r, 16).contains("view"), "{}", refused(&r, 16));
    assert_eq!(refused(&r, 17), "nope.md: no such file");
    assert!(ok(&r, 18).starts_with("MANIFEST as of"));
    assert!(
        refused(&r, 19).contains("no tool named"),
        "{}",
        refused(&r, 19)
    );
    // Each change is a version of the MCP client's, with its name and version.
    let v = sql(
        &db,
        "SELECT v.version || ' ' || v.op || ' ' || p.transport || ' ' || p.client || ' ' || p.client_version || ' ' || COALESCE(p.step, '-')
         FROM versions v JOIN processes p ON p.id = v.process WHERE v.path = 'notes/plan.md' ORDER BY v.version",
    );
    assert_eq!(
        v,
        "1 create mcp pytest-agent 9.9 3\n2 append mcp pytest-agent 9.9 -\n3 write mcp pytest-agent 9.9 -\n4 restore mcp pytest-agent 9.9 -",
        "op write for replace's rewrite"
    );
    let log = Command::new(BIN)
        .args(["log", "--db", db.to_str().unwrap(), "notes/plan.md"])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(log.contains("(mcp: pytest-agent 9.9)"), "{log}");
}

/// The memory tool's commands, arguments and result texts, as one tool.
#[test]
fn the_memory_tool_as_one_tool() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let m = |args: Value| json!({ "tool": "memory", "args": args });
    let calls = json!([
        m(json!({ "command": "view", "path": "/memories" })),
        m(
            json!({ "command": "create", "path": "/memories/customers/1042.md", "file_text": "# Customer 1042\n- prefers email\n" })
        ),
        m(
            json!({ "command": "create", "path": "/memories/customers/1042.md", "file_text": "again" })
        ),
        m(
            json!({ "command": "str_replace", "path": "/memories/customers/1042.md", "old_str": "email", "new_str": "email, never phone" })
        ),
        m(
            json!({ "command": "str_replace", "path": "/memories/customers/1042.md", "old_str": "absent", "new_str": "x" })
        ),
        m(
            json!({ "command": "insert", "path": "/memories/customers/1042.md", "insert_line": 2, "insert_text": "- order 1042: 180.00" })
        ),
        m(json!({ "command": "view", "path": "/memories/customers/1042.md" })),
        m(json!({ "command": "view", "path": "/memories" })),
        m(
            json!({ "command": "rename", "old_path": "/memories/customers/1042.md", "new_path": "/memories/archive/1042.md" })
        ),
        m(json!({ "command": "delete", "path": "/memories/archive/1042.md" })),
        m(json!({ "command": "delete", "path": "/memories/archive/1042.md" })),
        m(json!({ "command": "view", "path": "/etc" })),
        m(json!({ "command": "view", "path": "/memories/../x" })),
    ]);
    let r = stdio(&db, &[], "claude-memory", calls);
    assert!(ok(&r, 0).starts_with(
        "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items:"
    ));
    assert_eq!(
        ok(&r, 1),
        "File created successfully at: /memories/customers/1042.md"
    );
    assert_eq!(
        refused(&r, 2),
        "File /memories/customers/1042.md already exists"
    );
    assert_eq!(
        ok(&r, 3),
        "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n     1\t# Customer 1042\n     2\t- prefers email, never phone\n     3\t"
    );
    assert_eq!(
        refused(&r, 4),
        "No replacement was performed, old_str `absent` did not appear verbatim in /memories/customers/1042.md."
    );
    assert_eq!(
        ok(&r, 5),
        "The file /memories/customers/1042.md has been edited."
    );
    assert_eq!(
        ok(&r, 6),
        "Here's the content of /memories/customers/1042.md with line numbers:\n     1\t# Customer 1042\n     2\t- prefers email, never phone\n     3\t- order 1042: 180.00\n     4\t"
    );
    let listing = ok(&r, 7);
    assert!(
        listing.contains("\t/memories/customers/\n")
            && listing.ends_with("\t/memories/customers/1042.md"),
        "{listing}"
    );
    assert_eq!(
        ok(&r, 8),
        "Successfully renamed /memories/customers/1042.md to /memories/archive/1042.md"
    );
    assert_eq!(ok(&r, 9), "Successfully deleted /memories/archive/1042.md");
    assert_eq!(
        refused(&r, 10),
        "The path /memories/archive/1042.md does not exist"
    );
    assert_eq!(refused(&r, 11), "Path must start with /memories, got: /etc");
    assert_eq!(
        refused(&r, 12),
        "Path /memories/../x would escape /memories directory"
    );
    // Nothing is lost: the deleted memory's versions, through its rename.
    let v = sql(
        &db,
        "SELECT COUNT(*) FROM versions WHERE path IN ('memories/customers/1042.md', 'memories/archive/1042.md')",
    );
    assert_eq!(v, "4", "create, replace, insert, rename");
}

/// `--read-only` lists only the reading tools and refuses the others.
#[test]
fn read_only_lists_only_the_reading_tools() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let r = stdio(
        &db,
        &["--read-only"],
        "reader",
        json!([
            { "tool": "read", "args": { "path": "plan.md" } },
            { "tool": "write", "args": { "path": "plan.md", "content": "x" } },
        ]),
    );
    let names: Vec<&str> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "list",
            "read",
            "outline",
            "history",
            "read_version",
            "diff",
            "why",
            "ground",
            "checkpoints",
            "search",
            "glob"
        ]
    );
    assert_eq!(ok(&r, 0), "");
    assert!(refused(&r, 1).contains("read-only"), "{}", refused(&r, 1));
    assert_eq!(
        sql(&db, "SELECT COUNT(*) FROM versions WHERE path = 'plan.md'"),
        "1"
    );
}

/// Under the SPEC's example rules, with `--writer`: a key only another writer may write is
/// refused with the gate's one-line reason, recorded as today; a writer the rules do not
/// name is refused at start.
#[test]
fn refusals_under_the_spec_rules_reach_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let db_s = db.to_str().unwrap();
    let o = Command::new(BIN)
        .args([
            "mcp", "--db", db_s, "--rules", SPEC_RULES, "--writer", "nobody",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--writer \"nobody\": not one of the rules' writers"),
        "{err}"
    );
    let r = stdio(
        &db,
        &["--rules", SPEC_RULES, "--writer", "get_order"],
        "tool-runner",
        json!([
            { "tool": "write", "args": { "path": "state.json", "content": "{\"order_id\": \"O-9\", \"order_total_cents\": 18000}", "step": 2 } },
            { "tool": "replace", "args": { "path": "state.json", "find": "}", "with": ", \"credit_cents\": 54000}", "step": 3 } },
            { "tool": "append", "args": { "path": "findings.md", "content": "- found\n" } },
            { "tool": "read", "args": { "path": "state.json" } },
            { "tool": "list", "args": {} },
        ]),
    );
    ok(&r, 0);
    // `list` carries the latest refusals, newest first, as MANIFEST shows them.
    let listed = &r["results"][4]["structured"];
    assert_eq!(listed["refusals_total"], 2, "{listed}");
    assert!(
        listed["refusals"][0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("findings.md"),
        "{listed}"
    );
    assert!(ok(&r, 4).contains("refused (2 of 2):"), "{}", ok(&r, 4));
    let why = refused(&r, 1);
    assert!(
        why.starts_with("state.json: ")
            && why.contains("credit_cents")
            && why.contains("compute_credit"),
        "{why}"
    );
    // SPEC §6: a key a writer may not set is an invalid argument.
    assert_eq!(r["results"][1]["structured"]["errno"], libc::EINVAL);
    assert!(refused(&r, 2).contains("findings.md"), "{}", refused(&r, 2));
    assert_eq!(
        ok(&r, 3),
        "{\"order_id\": \"O-9\", \"order_total_cents\": 18000}",
        "the refused replace changed nothing"
    );
    let rec = sql(
        &db,
        "SELECT e.writer || ' ' || e.errno || ' ' || p.transport || ' ' || p.client FROM events e JOIN processes p ON p.id = e.process WHERE e.op = 'rejected' ORDER BY e.id",
    );
    assert_eq!(
        rec,
        format!(
            "get_order {} mcp tool-runner\nget_order {} mcp tool-runner",
            libc::EINVAL,
            libc::EACCES
        )
    );
    // The rules it served under are recorded, as a mount's are: the next offline command
    // checks against them.
    let recorded = sql(&db, "SELECT text FROM rules ORDER BY id DESC LIMIT 1");
    assert_eq!(
        recorded.trim(),
        std::fs::read_to_string(SPEC_RULES).unwrap().trim(),
        "the rules mcp served under were not recorded"
    );
}

/// One call of `tool` with `args` on the mount's MCP socket `socket`, made by a process of
/// uid 1000 (the agent) that claims `writer` (none when empty): the daemon's answer
/// (`is_error`, `text`, `structured`).
fn socket_call_as_1000(socket: &str, writer: &str, tool: &str, args: Value) -> Value {
    let writer = Some(writer).filter(|w| !w.is_empty());
    let req = json!({ "tool": tool, "args": args, "writer": writer, "client": "raw",
                      "client_version": "0", "read_only": false });
    let o = Command::new("setpriv")
        .args([
            "--reuid",
            "1000",
            "--regid",
            "1000",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
        ])
        .arg(
            "import socket, sys\n\
             s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile()\n\
             greeting = f.readline()\n\
             if '\"scratchfs\"' not in greeting: print(greeting, end=''); sys.exit()\n\
             s.sendall(sys.argv[2].encode() + b'\\n')\n\
             print(f.readline(), end='')",
        )
        .arg(socket)
        .arg(req.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `--listen` serves streamable HTTP; the same tools answer there.
#[test]
fn streamable_http() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut server, url, token) = http_server(&db, &["--as", "0:0"]);
    let r = mcp_session(
        "http-client",
        &["http", &url, &token],
        json!([
            { "tool": "append", "args": { "path": "findings.md", "content": "- over http\n" } },
            { "tool": "read", "args": { "path": "findings.md" } },
        ]),
    );
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(ok(&r, 0), "findings.md: 12 bytes");
    assert_eq!(ok(&r, 1), "- over http\n");
    assert_eq!(
        sql(
            &db,
            "SELECT p.client FROM versions v JOIN processes p ON p.id = v.process WHERE v.path = 'findings.md' AND v.version = 2"
        ),
        "http-client"
    );
}

/// A new scratchpad made by an HTTP server started as root with `--as UID:GID` belongs to
/// that user, as `mount --owner` makes it: its calls may write (fresh-user finding: the
/// root and the default files were root's, and every write was refused).
#[test]
fn a_new_scratchpad_served_as_another_user_is_that_users() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut server, url, token) = http_server(&db, &["--as", "1000:1000"]);
    let r = mcp_session(
        "http-client",
        &["http", &url, &token],
        json!([
            { "tool": "append", "args": { "path": "findings.md", "content": "- mine\n" } },
            { "tool": "write", "args": { "path": "notes.md", "content": "new\n" } },
        ]),
    );
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(ok(&r, 0), "findings.md: 7 bytes", "{r}");
    assert_eq!(ok(&r, 1), "notes.md: 4 bytes", "{r}");
    assert_eq!(
        sql(&db, "SELECT uid || ':' || gid FROM nodes WHERE ino = 1"),
        "1000:1000"
    );
}

/// The HTTP server: a request without the bearer token is 401 and reaches no tool; root
/// may not start it without --as; and fifty sessions in a row through a mounted
/// database's daemon all work, served as the --as user (issue 31 item 3: a session held
/// its daemon connection until the server exited, and the 9th of uid 1000's was refused).
#[test]
fn http_needs_its_token_and_serves_fifty_sessions_in_a_row() {
    let m = Mount::with_args(&["--allow-other"]);
    m.sh_ok("mkdir -m 777 shared");
    let refused = Command::new(BIN)
        .args([
            "mcp",
            "--db",
            m.db.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--as UID[:GID]"),
        "{refused:?}"
    );
    let (mut server, url, token) = http_server(&m.db, &["--as", "1000:1000"]);
    let bare = Command::new(MCP_PYTHON)
        .args([
            "-c",
            "import sys, urllib.request, urllib.error\n\
try:\n    urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=b'{}', \
headers={'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream'}))\n\
except urllib.error.HTTPError as e:\n    print(e.code, e.headers.get('WWW-Authenticate'))",
        ])
        .arg(&url)
        .output()
        .unwrap();
    let calls = json!([
        { "tool": "append", "args": { "path": "shared/notes.md", "content": "- one more\n" } },
        { "tool": "read", "args": { "path": "plan.md" } },
    ]);
    let r = {
        let mut child = Command::new(MCP_PYTHON)
            .args([MCP_CLIENT, "fifty", "http", &url, &token])
            .env("MCP_SESSIONS", "50")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(calls.to_string().as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        serde_json::from_slice::<Value>(&o.stdout)
            .unwrap_or(json!({ "stdout": String::from_utf8_lossy(&o.stdout) }))
    };
    let _ = server.kill();
    let _ = server.wait();
    let ok: Vec<bool> = serde_json::from_value(r["sessions"].clone()).unwrap_or_default();
    assert_eq!(ok.len(), 50, "{r}");
    assert!(ok.iter().all(|&o| o), "{:?} {}", ok, r["results"]);
    assert_eq!(String::from_utf8_lossy(&bare.stdout).trim(), "401 Bearer");
    assert_eq!(
        read(m.path("shared/notes.md"))
            .matches("- one more")
            .count(),
        50
    );
    // Acted as uid 1000, never as the root that started it.
    assert_eq!(
        m.sql("SELECT DISTINCT p.uid FROM versions v JOIN processes p ON p.id = v.process WHERE v.path = 'shared/notes.md'"),
        "1000"
    );
}

/// A throwaway PKI in `dir` (rcgen): a root CA, an intermediate CA it signed, and a server
/// certificate for 127.0.0.1 and localhost that the intermediate signed.
struct Pki {
    /// The root CA's certificate: what a client trusts.
    ca: std::path::PathBuf,
    /// The server's certificate, then the intermediate's: what the server presents.
    chain: std::path::PathBuf,
    /// The server certificate's key (mode 0600, root's).
    key: std::path::PathBuf,
    /// A key of no certificate here.
    other_key: std::path::PathBuf,
}

fn pki(dir: &Path) -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    use std::os::unix::fs::PermissionsExt;
    let ca_params = |name: &str| {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        p
    };
    let root = CertifiedIssuer::self_signed(
        ca_params("scratchfs test root CA"),
        KeyPair::generate().unwrap(),
    )
    .unwrap();
    let intermediate = CertifiedIssuer::signed_by(
        ca_params("scratchfs test intermediate CA"),
        KeyPair::generate().unwrap(),
        &root,
    )
    .unwrap();
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, "scratchfs test server");
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &intermediate).unwrap();
    let pki = Pki {
        ca: dir.join("ca.pem"),
        chain: dir.join("chain.pem"),
        key: dir.join("key.pem"),
        other_key: dir.join("other-key.pem"),
    };
    std::fs::write(&pki.ca, root.pem()).unwrap();
    std::fs::write(&pki.chain, cert.pem() + &intermediate.pem()).unwrap();
    std::fs::write(&pki.key, key.serialize_pem()).unwrap();
    std::fs::write(&pki.other_key, KeyPair::generate().unwrap().serialize_pem()).unwrap();
    for k in [&pki.key, &pki.other_key] {
        std::fs::set_permissions(k, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    pki
}

/// tests/mcp_client.py over http(s) to `url` with `token`, `calls` on its stdin, `env`
/// added (MCP_CA_FILE); its output, whatever its exit status.
fn http_client(
    url: &str,
    token: &str,
    env: &[(&str, &Path)],
    calls: Value,
) -> std::process::Output {
    let calls_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(calls_file.path(), calls.to_string()).unwrap();
    let mut cmd = Command::new(MCP_PYTHON);
    cmd.args([MCP_CLIENT, "tls-client", "http", url, token])
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .stdin(std::fs::File::open(calls_file.path()).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    output_within(
        "the MCP client",
        &mut cmd,
        std::time::Duration::from_secs(120),
    )
}

/// A TLS handshake with 127.0.0.1:`port`, trusting the CA in `ca` and checking the name
/// 127.0.0.1 (Python's ssl module): the version agreed, or the error.
fn tls_hello(port: &str, ca: &Path) -> String {
    let o = output_within(
        "a TLS handshake",
        Command::new("/usr/bin/python3").args([
            "-c",
            "import socket, ssl, sys\n\
c = ssl.create_default_context(cafile=sys.argv[2])\n\
try:\n    s = c.wrap_socket(socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=30), server_hostname='127.0.0.1')\n    print(s.version())\n\
except Exception as e:\n    print(type(e).__name__, e)",
            port,
            ca.to_str().unwrap(),
        ]),
        std::time::Duration::from_secs(60),
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// `--tls-cert` and `--tls-key` (issue 31 item 3): the server speaks HTTPS with the chain
/// it was given (server certificate and intermediate), read before it becomes the `--as`
/// user (the key is root's 0600). A client that trusts the root CA makes real MCP calls
/// through the MCP Python SDK; one that does not is refused in the handshake
/// (CERTIFICATE_VERIFY_FAILED) and makes none; clear HTTP to the port gets no HTTP answer;
/// a client that connects and says nothing holds up no other handshake and is dropped
/// after the handshake timeout (10 s); after each of these the next good client is
/// served.
#[test]
fn https_serves_a_client_that_trusts_its_ca_and_no_other() {
    let m = Mount::with_args(&["--allow-other"]);
    m.sh_ok("mkdir -m 777 shared");
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let (mut server, url, token) = http_server(
        &m.db,
        &[
            "--tls-cert",
            pki.chain.to_str().unwrap(),
            "--tls-key",
            pki.key.to_str().unwrap(),
            "--as",
            "1000:1000",
        ],
    );
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let port = url.rsplit(':').next().unwrap().trim_end_matches("/mcp");
    // A client that opens TCP and says nothing. While it holds its connection, another
    // completes a handshake: handshakes do not wait for each other. Then the server ends
    // the silent one when the handshake's time is up.
    let mut silent = KillOnDrop(
        Command::new("/usr/bin/python3")
            .args([
                "-c",
                "import socket, sys, time\n\
s = socket.create_connection(('127.0.0.1', int(sys.argv[1]))); t = time.monotonic()\n\
print('connected', flush=True); sys.stdin.readline()\n\
s.setblocking(False)\n\
try:\n    print('closed' if s.recv(1) == b'' else 'data', flush=True)\n\
except BlockingIOError:\n    print('open', flush=True)\n\
except OSError as e:\n    print('closed', type(e).__name__, flush=True)\n\
s.setblocking(True); s.settimeout(60)\n\
try:\n    print(len(s.recv(1)), round(time.monotonic() - t))\n\
except OSError as e:\n    print('error', type(e).__name__, round(time.monotonic() - t))",
                port,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut silent_out = std::io::BufReader::new(silent.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut silent_out, &mut line).unwrap();
    assert_eq!(line, "connected\n");
    let hello = tls_hello(port, &pki.ca);
    std::io::Write::write_all(silent.stdin.as_mut().unwrap(), b"go\n").unwrap();
    let mut held = String::new();
    std::io::BufRead::read_line(&mut silent_out, &mut held).unwrap();
    let calls = json!([
        { "tool": "append", "args": { "path": "shared/tls.md", "content": "- over https\n" } },
        { "tool": "read", "args": { "path": "shared/tls.md" } },
    ]);
    // A client with the default trust store: refused in the handshake, no call made.
    let untrusting = http_client(&url, &token, &[], calls.clone());
    // Clear HTTP to the TLS port: no HTTP answer.
    let clear = output_within(
        "clear HTTP to the TLS port",
        Command::new("/usr/bin/python3").args([
            "-c",
            "import sys, urllib.request\n\
try:\n    r = urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=b'{}'), timeout=30)\n    print('answered', r.status)\n\
except urllib.error.HTTPError as e:\n    print('answered', e.code)\n\
except Exception as e:\n    print('failed', type(e).__name__)",
            &url.replace("https://", "http://"),
        ]),
        std::time::Duration::from_secs(60),
    );
    // The CA trusted: real calls, as the --as user.
    let trusting = http_client(&url, &token, &[("MCP_CA_FILE", &pki.ca)], calls);
    let mut ended = String::new();
    std::io::BufRead::read_line(&mut silent_out, &mut ended).unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(
        hello, "TLSv1.3",
        "a handshake while another client held its connection"
    );
    assert_eq!(
        held.trim(),
        "open",
        "the silent client's connection when another's handshake was done"
    );
    let stderr = String::from_utf8_lossy(&untrusting.stderr);
    assert!(
        !untrusting.status.success() && stderr.contains("CERTIFICATE_VERIFY_FAILED"),
        "a client that does not trust the CA: {untrusting:?}"
    );
    assert!(
        String::from_utf8_lossy(&clear.stdout).starts_with("failed"),
        "clear HTTP to the TLS port: {clear:?}"
    );
    let r: Value = serde_json::from_slice(&trusting.stdout).unwrap_or_else(|e| {
        panic!("{e}: {trusting:?}");
    });
    assert_eq!(ok(&r, 0), "shared/tls.md: 13 bytes");
    assert_eq!(ok(&r, 1), "- over https\n");
    assert_eq!(
        read(m.path("shared/tls.md")).matches("over https").count(),
        1,
        "only the trusting client's append"
    );
    assert_eq!(
        m.sql("SELECT DISTINCT p.uid FROM versions v JOIN processes p ON p.id = v.process WHERE v.path = 'shared/tls.md'"),
        "1000"
    );
    // Ended by the server (end of stream or a reset) after about 10 s, not by its own
    // 60 s timeout.
    let secs: u64 = ended.trim().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        (ended.starts_with("0 ") || ended.starts_with("error ConnectionReset"))
            && (9..=30).contains(&secs),
        "the silent client: {ended}"
    );
}

/// What `--tls-cert` and `--tls-key` refuse at start, exit status 1 and the file named: a
/// missing file, a certificate file without a certificate, a key file without a key, and
/// a key that is not the certificate's (both named). A non-loopback address needs TLS or
/// --allow-cleartext, and with TLS it is served.
#[test]
fn tls_files_are_checked_at_start_and_a_network_address_needs_tls() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let pki = pki(dir.path());
    let missing = dir.path().join("missing.pem");
    let p = |f: &Path| f.to_str().unwrap().to_string();
    let start = |addr: &str, tls: Option<(&Path, &Path)>| {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "mcp",
            "--db",
            &p(&db),
            "--listen",
            addr,
            "--as",
            "1000:1000",
        ])
        .stdin(Stdio::null());
        if let Some((cert, key)) = tls {
            cmd.args(["--tls-cert", &p(cert), "--tls-key", &p(key)]);
        }
        output_within(
            "a server that should be refused",
            &mut cmd,
            std::time::Duration::from_secs(60),
        )
    };
    let refused = |addr: &str, tls: Option<(&Path, &Path)>, says: &[&str]| {
        let o = start(addr, tls);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{addr} {tls:?}: {err}");
        for s in says {
            assert!(err.contains(s), "{addr} {tls:?}: {s:?} not in {err}");
        }
    };
    let (chain, key, other) = (p(&pki.chain), p(&pki.key), p(&pki.other_key));
    refused(
        "0.0.0.0:0",
        None,
        &["--listen 0.0.0.0:0: not a loopback address", "--tls-cert"],
    );
    refused(
        "127.0.0.1:0",
        Some((&missing, &pki.key)),
        &[&format!("--tls-cert {}: No such file", p(&missing))],
    );
    refused(
        "127.0.0.1:0",
        Some((&pki.chain, &missing)),
        &[&format!("--tls-key {}: No such file", p(&missing))],
    );
    refused(
        "127.0.0.1:0",
        Some((&pki.key, &pki.key)),
        &[&format!("--tls-cert {key}: no certificate in it")],
    );
    refused(
        "127.0.0.1:0",
        Some((&pki.chain, &pki.chain)),
        &[&format!("--tls-key {chain}: no private key in it")],
    );
    refused(
        "127.0.0.1:0",
        Some((&pki.chain, &pki.other_key)),
        &[
            &format!("--tls-key {other} with --tls-cert {chain}"),
            "not the key of the certificate",
        ],
    );
    // One flag without the other: a usage error.
    let o = Command::new(BIN)
        .args(["mcp", "--db", &p(&db), "--listen", "127.0.0.1:0"])
        .args(["--tls-cert", &chain])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    // With TLS, a non-loopback address is served: a handshake that verifies the chain up
    // to the root CA completes on it.
    let (mut server, url, _token) = http_server_on(
        "0.0.0.0:0",
        &db,
        &["--tls-cert", &chain, "--tls-key", &key, "--as", "1000:1000"],
    );
    let port = url.rsplit(':').next().unwrap().trim_end_matches("/mcp");
    let hello = tls_hello(port, &pki.ca);
    let _ = server.kill();
    let _ = server.wait();
    assert!(url.starts_with("https://0.0.0.0:"), "{url}");
    assert_eq!(hello, "TLSv1.3");
}

/// The credit scenario half through MCP and half through a FUSE mount of the same
/// database under the SPEC's rules: each side sees the other's commits at once, and each
/// key's provenance names the writer (and the transport) that set it.
#[test]
fn credit_scenario_half_mcp_half_mount() {
    let m = Mount::with_args(&["--rules", SPEC_RULES]);
    let db = m.db.to_str().unwrap().to_string();
    // The trigger, through the mount.
    m.sh_ok(
        "SCRATCHFS_WRITER=trigger sh -c 'printf \"{\\\"ticket_id\\\": \\\"T-1\\\"}\" > state.json'",
    );
    // get_order, through MCP (the calls run in the mount's daemon).
    let state_path = m.path("state.json").to_str().unwrap().to_string();
    let new_path = m.path("orders/O-9.md").to_str().unwrap().to_string();
    let r = mcp_session(
        "order-tool",
        &["stdio", BIN, "mcp", "--db", &db, "--writer", "get_order"],
        json!([
            { "tool": "read", "args": { "path": "state.json" } },
            { "cat": state_path },
            { "cat": new_path },
            { "tool": "replace", "args": { "path": "state.json", "find": "}", "with": ", \"order_id\": \"O-9\", \"order_total_cents\": 18000}", "step": 2 } },
            { "tool": "write", "args": { "path": "orders/O-9.md", "content": "order O-9\n" } },
            { "cat": state_path },
            { "cat": new_path },
            { "tool": "replace", "args": { "path": "state.json", "find": "18000}", "with": "18000, \"credit_cents\": 54000}", "step": 3 } },
        ]),
    );
    assert_eq!(
        ok(&r, 0),
        "{\"ticket_id\": \"T-1\"}",
        "MCP sees the mount's commit"
    );
    assert_eq!(ok(&r, 1), "{\"ticket_id\": \"T-1\"}");
    refused(&r, 2);
    ok(&r, 3);
    ok(&r, 4);
    // The mount sees MCP's commits at once, within the kernel's 1 s cache timeouts: the
    // cached size of state.json and the cached absence of orders/O-9.md are dropped.
    let state: Value = serde_json::from_str(&ok(&r, 5)).unwrap();
    assert_eq!(state["order_total_cents"], 18000);
    assert_eq!(ok(&r, 6), "order O-9\n");
    assert!(
        refused(&r, 7).contains("credit_cents"),
        "{}",
        refused(&r, 7)
    );
    // compute_credit, through the mount.
    m.sh_ok("SCRATCHFS_WRITER=compute_credit SCRATCHFS_STEP=5 python3 -c \"import json; d = json.load(open('state.json')); d['credit_cents'] = 18000; open('state.json', 'w').write(json.dumps(d))\"");
    let r = mcp_session(
        "order-tool",
        &["stdio", BIN, "mcp", "--db", &db, "--writer", "get_order"],
        json!([ { "tool": "read", "args": { "path": "state.json" } } ]),
    );
    let state: Value = serde_json::from_str(&ok(&r, 0)).unwrap();
    assert_eq!(state["credit_cents"], 18000, "MCP sees the mount's commit");
    let fields = m.sql(
        "SELECT f.key || ' ' || v.writer || ' ' || COALESCE(p.transport, 'mount') || ' ' || COALESCE(p.step, '-')
         FROM fields f JOIN versions v ON v.id = f.version_id JOIN processes p ON p.id = v.process ORDER BY f.key",
    );
    assert_eq!(
        fields,
        "credit_cents compute_credit mount 5\norder_id get_order mcp 2\norder_total_cents get_order mcp 2\nticket_id trigger mount -"
    );
}

/// The MCP Inspector's command-line mode (npm `@modelcontextprotocol/inspector`, which
/// scripts/deps installs in .npm-tools) lists the tools and calls one.
#[test]
fn the_mcp_inspector_lists_tools_and_calls_one() {
    let inspector = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/.npm-tools/node_modules/.bin/mcp-inspector"
    );
    assert!(
        Path::new(inspector).exists(),
        "{inspector} is missing: run scripts/deps (it installs the MCP Inspector with npm)"
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let db = db.to_str().unwrap();
    let run = |extra: &[&str]| -> Value {
        let o = Command::new(inspector)
            .args(["--cli", BIN, "mcp", "--db", db])
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .expect("run the MCP Inspector (node)");
        assert!(
            o.status.success(),
            "inspector failed: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
    };
    let tools = run(&["--method", "tools/list"]);
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"replace") && names.contains(&"memory"),
        "{names:?}"
    );
    let r = run(&[
        "--method",
        "tools/call",
        "--tool-name",
        "append",
        "--tool-arg",
        "path=findings.md",
        "--tool-arg",
        "content=- from the inspector",
    ]);
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["bytes"], 20, "{r}");
    assert_eq!(
        sql(
            Path::new(db),
            "SELECT p.transport || ' ' || p.client FROM versions v JOIN processes p ON p.id = v.process WHERE v.path = 'findings.md' AND v.version = 2"
        ),
        "mcp inspector-cli"
    );
}

/// The mount's MCP socket, attacked directly by an unprivileged agent (uid 1000) that
/// speaks its protocol without `scratchfs mcp`: naming a writer defined by a uid it does
/// not have is refused (and the file keeps its content), and so is naming a tool's writer
/// defined only by its `env` tag, since the rules make uid 1000 `agent` first (as the
/// mount does, whatever its SCRATCHFS_WRITER says); a writer it matches works. On a mount
/// without `--allow-other`, the socket does not even let it connect.
#[test]
fn the_mount_socket_gives_no_writer_a_process_does_not_match() {
    let rules = r#"{ "writers": { "human": { "uid": 0 }, "agent": { "uid": 1000 },
                      "tool": { "env": "tool" } },
        "paths": [ { "path": "approved.md", "writers": ["human"] },
                   { "path": "total.txt", "writers": ["tool"] },
                   { "path": "**", "writers": ["*"] } ] }"#;
    let dir = tempfile::tempdir().unwrap();
    let rules_file = dir.path().join("rules.json");
    std::fs::write(&rules_file, rules).unwrap();
    let rules_path = rules_file.to_str().unwrap();
    let mut m = Mount::with_args(&["--allow-other", "--owner", "1000:1000"]);
    m.sh_ok(
        "echo approved by a human > approved.md && echo secret > secret.txt && chmod 600 secret.txt \
         && echo root > rootfile.txt && chown 0:0 rootfile.txt \
         && mkdir private && echo hidden > private/h.txt && chmod 700 private",
    );
    m.unmount();
    m.restart_with(&[
        "--allow-other",
        "--owner",
        "1000:1000",
        "--rules",
        rules_path,
    ]);
    let socket = m.sql("SELECT value FROM meta WHERE key = 'mcp_socket'");
    assert!(socket.ends_with(".sock"), "{socket}");
    let agent_call =
        |writer: &str, tool: &str, args: Value| socket_call_as_1000(&socket, writer, tool, args);
    let r = agent_call(
        "human",
        "write",
        json!({ "path": "approved.md", "content": "forged\n" }),
    );
    assert_eq!(r["is_error"], true, "{r}");
    assert!(
        r["text"].as_str().unwrap().contains("writer \"human\""),
        "{r}"
    );
    assert_eq!(read(m.path("approved.md")), "approved by a human\n");
    let r = agent_call(
        "tool",
        "write",
        json!({ "path": "total.txt", "content": "99999\n" }),
    );
    assert_eq!(r["is_error"], true, "{r}");
    assert!(
        r["text"]
            .as_str()
            .unwrap()
            .contains("writer \"tool\": this MCP server's process (uid 1000"),
        "{r}"
    );
    assert!(!m.path("total.txt").exists());
    let r = agent_call(
        "agent",
        "append",
        json!({ "path": "notes.md", "content": "mine\n" }),
    );
    assert_eq!(r["is_error"], false, "{r}");
    let r = agent_call(
        "agent",
        "write",
        json!({ "path": "approved.md", "content": "x\n" }),
    );
    assert_eq!(r["is_error"], true, "{r}");
    assert_eq!(read(m.path("approved.md")), "approved by a human\n");
    assert_eq!(
        m.sql("SELECT v.writer || ' ' || p.uid FROM versions v JOIN processes p ON p.id = v.process WHERE v.path = 'notes.md'"),
        "agent 1000"
    );
    // The claim was refused on record, as the process it is.
    assert_eq!(
        m.sql("SELECT e.writer || ' ' || p.uid || ' ' || p.transport FROM events e JOIN processes p ON p.id = e.process WHERE e.op = 'rejected' AND e.reason LIKE 'writer \"human\"%'"),
        "agent 1000 mcp"
    );
    // The mode bits bind an MCP call as they bind the mount (default_permissions): the
    // kernel checks a process on the mount; the core checks a call through the socket.
    for (tool, args) in [
        ("read", json!({ "path": "secret.txt" })),
        ("read", json!({ "path": ".history/secret.txt/000001" })),
        ("outline", json!({ "path": "secret.txt" })),
        ("history", json!({ "path": "secret.txt" })),
        (
            "read_version",
            json!({ "path": "secret.txt", "version": 1 }),
        ),
        ("append", json!({ "path": "secret.txt", "content": "x" })),
        (
            "write",
            json!({ "path": "rootfile.txt", "content": "mine\n" }),
        ),
        ("read", json!({ "path": "private/h.txt" })),
        ("read", json!({ "path": ".history/secret.txt/1" })),
        (
            "write",
            json!({ "path": "private/new.txt", "content": "x" }),
        ),
        ("memory", json!({ "command": "view", "path": "/memories" })),
    ] {
        let r = agent_call("agent", tool, args.clone());
        if tool == "memory" {
            // Its own directory is made by the agent, in the agent's root: allowed.
            assert_eq!(r["is_error"], false, "{tool} {args}: {r}");
            continue;
        }
        assert_eq!(r["is_error"], true, "{tool} {args}: {r}");
        let text = r["text"].as_str().unwrap();
        assert!(text.contains("permission denied"), "{tool} {args}: {r}");
        // A view is named by its path, as asked, not by an inode number.
        assert!(!text.contains("inode "), "{tool} {args}: {r}");
    }
    assert_eq!(read(m.path("rootfile.txt")), "root\n");
    assert_eq!(read(m.path("secret.txt")), "secret\n");
    assert!(!m.path("private/new.txt").exists());
    // Without --allow-other (which --owner of another user implies) the socket is the
    // mounting user's alone, as the mount is.
    m.unmount();
    m.restart_with(&["--rules", rules_path]);
    let socket = m.sql("SELECT value FROM meta WHERE key = 'mcp_socket'");
    let o = Command::new("setpriv")
        .args(["--reuid", "1000", "--regid", "1000", "--clear-groups", "/usr/bin/python3", "-c"])
        .arg("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1]); print('connected')\nexcept OSError as e:\n    print(e.strerror)")
        .arg(&socket)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "Permission denied"
    );
}

/// A database from before the MCP server has no `processes.transport`, `client` and
/// `client_version`: `scratchfs log` still reads it, and the next mount adds them
/// (docs/schema.md, "Migrations"), after which MCP calls are recorded with them.
#[test]
fn a_database_from_before_mcp_gets_the_columns_when_mounted() {
    let mut m = Mount::new();
    m.sh_ok("echo old > old.md");
    m.unmount();
    // The views as such a database has them: without the three columns.
    m.sql(
        "DROP VIEW version_log; DROP VIEW event_log;
         ALTER TABLE processes DROP COLUMN client_version;
         ALTER TABLE processes DROP COLUMN client;
         ALTER TABLE processes DROP COLUMN transport;
         CREATE VIEW version_log AS
           SELECT v.id, v.file_id, v.version, v.path, v.op, v.size, v.blake3, v.stream,
                  v.writer, v.pid, p.tgid, p.start_time, p.uid, p.gid, p.exe, p.argv,
                  p.env_writer, p.step, v.time_ns, v.process
           FROM versions v JOIN processes p ON p.id = v.process;
         CREATE VIEW event_log AS
           SELECT e.id, e.time_ns, e.op, e.path, e.new_path, e.file_id, e.version_id,
                  e.errno, e.reason, e.stream, e.size, e.blake3, e.writer, e.pid, p.tgid,
                  p.start_time, p.uid, p.gid, p.exe, p.argv, p.env_writer, p.step, e.process
           FROM events e JOIN processes p ON p.id = e.process;",
    );
    let (rc, out, err) = cli(&m, &["log", "old.md"]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("create   old.md"), "{out}");
    m.start();
    let db = m.db.to_str().unwrap().to_string();
    let r = mcp_session(
        "after-migration",
        &["stdio", BIN, "mcp", "--db", &db],
        json!([ { "tool": "append", "args": { "path": "old.md", "content": "new\n" } } ]),
    );
    ok(&r, 0);
    assert_eq!(read(m.path("old.md")), "old\nnew\n");
    let (rc, out, err) = cli(&m, &["log", "old.md"]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("(mcp: after-migration 9.9)"), "{out}");
}

/// A daemon killed before it removed its MCP socket leaves the file; the next daemon to
/// listen removes such sockets (no one answers on them), never a live one.
#[test]
fn a_killed_daemons_socket_is_removed_by_the_next() {
    let dir = scratchfs::mcp::socket::runtime_dir().unwrap();
    let stale = dir.join(format!("{:016x}.sock", std::process::id() as u64 * 7919));
    let live_path = dir.join(format!("{:016x}.sock", std::process::id() as u64 * 7927));
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let live = std::os::unix::net::UnixListener::bind(&live_path).unwrap();
    let _m = Mount::new();
    assert!(!stale.exists(), "{} is still there", stale.display());
    assert!(
        live_path.exists(),
        "a socket someone listens on was removed"
    );
    drop(live);
    std::fs::remove_file(&live_path).unwrap();
}

/// A client that starts a request and never finishes its headers (any local user can
/// reach the port before the token is asked for) is dropped after `HEADER_READ_TIMEOUT`
/// (30 s), and holds up no other client meanwhile (issue 31 item 3: each request's time
/// is bounded); one that says nothing at all, or nothing more after a reply, after
/// `IDLE_TIMEOUT` (60 s). Before the bounds, such connections stayed open for good.
#[test]
fn a_client_that_never_finishes_its_headers_or_says_nothing_is_dropped() {
    use std::io::{Read, Write};
    let m = Mount::new();
    let (_server, url, _token) = http_server(&m.db, &["--as", "1000:1000"]);
    let hostport = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let mut slow = std::net::TcpStream::connect(&hostport).unwrap();
    slow.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    let started = std::time::Instant::now();
    // One that connects and says nothing at all.
    let mut silent = std::net::TcpStream::connect(&hostport).unwrap();
    // Meanwhile another client is answered (401 without its token: served, not held up).
    let mut other = std::net::TcpStream::connect(&hostport).unwrap();
    other
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
        .unwrap();
    other
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut head = [0u8; 12];
    other.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 401");
    // Each is closed by the server (end of file, or a reset), not before its bound and
    // within a margin for a busy machine: the slow one after the header timeout (30 s);
    // the silent one, and the other after its reply (kept alive, saying nothing more),
    // once no byte has moved for IDLE_TIMEOUT (60 s); before, they stayed open for good
    // and 1,024 of them locked every caller out.
    for (what, conn, bound, wait) in [
        ("slow headers", &mut slow, 25, 120),
        ("silent", &mut silent, 50, 150),
        ("idle after a reply", &mut other, 50, 150),
    ] {
        conn.set_read_timeout(Some(std::time::Duration::from_secs(wait)))
            .unwrap();
        let mut buf = Vec::new();
        let r = conn.read_to_end(&mut buf);
        let waited = started.elapsed();
        assert!(
            !matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
                || e.kind() == std::io::ErrorKind::TimedOut),
            "{what}: the server kept the connection open for {waited:?}: {r:?}"
        );
        assert!(
            waited >= std::time::Duration::from_secs(bound),
            "{what}: closed after {waited:?}, before its timeout: {r:?} {:?}",
            String::from_utf8_lossy(&buf)
        );
    }
}

/// A token file the server made goes when the server ends on SIGTERM (they piled up in
/// /run/scratchfs before); one given with `--token-file` stays. (A server that became
/// the `--as` user on a mounted database cannot remove root's file any more: it stays,
/// out of that user's reach; here the database is not mounted, so the server stays root.)
#[test]
fn the_token_file_the_server_made_goes_with_it() {
    let mut m = Mount::new();
    m.unmount();
    let (mut server, _url, made) = http_server(&m.db, &["--as", "1000:1000"]);
    assert!(std::path::Path::new(&made).exists(), "{made}");
    let given = m.dir.path().join("given.token");
    std::fs::write(&given, "0123456789abcdef0123456789\n").unwrap();
    let mut m2 = Mount::new();
    m2.unmount();
    let (mut other, _, named) = http_server(
        &m2.db,
        &["--as", "1000:1000", "--token-file", given.to_str().unwrap()],
    );
    assert_eq!(named, given.to_str().unwrap());
    for s in [&mut server, &mut other] {
        unsafe { libc::kill(s.id() as i32, libc::SIGTERM) };
        let status = s.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{status:?}");
    }
    assert!(
        !std::path::Path::new(&made).exists(),
        "{made} is still there"
    );
    assert!(given.exists(), "the --token-file was removed");
}

/// Issue 33 item 1: a client of each MCP era (2025-11-25 with its `initialize`, and the
/// stateless 2026-07-28, whose requests carry the client in `_meta`) is named in the
/// provenance and matched by an `mcp_client` writer, over stdio and over HTTP. Before,
/// a stateless client was recorded as `(mcp)` and refused as `anonymous`.
#[test]
fn a_client_of_either_mcp_era_is_named_and_matched_by_its_writer() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{
  "writers": {
    "modern": { "mcp_client": "stateless-agent" },
    "legacy": { "mcp_client": "handshake-agent" }
  },
  "paths": [
    { "path": "modern.md", "writers": ["modern"] },
    { "path": "legacy.md", "writers": ["legacy"] },
    { "path": "**", "writers": ["*"] }
  ]
}"#,
    )
    .unwrap();
    let rules_arg = rules.to_str().unwrap();
    let calls = json!([
        { "tool": "append", "args": { "path": "modern.md", "content": "m\n" } },
        { "tool": "append", "args": { "path": "legacy.md", "content": "l\n" } },
    ]);
    let db_arg = db.to_str().unwrap();
    let target = ["stdio", BIN, "mcp", "--db", db_arg, "--rules", rules_arg];
    let modern = mcp_session_at(ERA_STATELESS, "stateless-agent", &target, calls.clone());
    assert_eq!(ok(&modern, 0), "modern.md: 2 bytes");
    assert!(refused(&modern, 1).contains("legacy"), "{modern}");
    let legacy = mcp_session_at(ERA_HANDSHAKE, "handshake-agent", &target, calls.clone());
    assert!(refused(&legacy, 0).contains("modern"), "{legacy}");
    assert_eq!(ok(&legacy, 1), "legacy.md: 2 bytes");

    // Over HTTP, the stateless client again (each request its own, no session).
    let (mut server, url, token) = http_server(&db, &["--as", "0:0", "--rules", rules_arg]);
    let http = mcp_session_at(
        ERA_STATELESS,
        "stateless-agent",
        &["http", &url, &token],
        calls,
    );
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(ok(&http, 0), "modern.md: 4 bytes");
    assert!(refused(&http, 1).contains("legacy"), "{http}");

    let who = |path: &str| {
        sql(
            &db,
            &format!(
                "SELECT v.version || ' ' || v.writer || ' ' || p.client FROM versions v \
                 JOIN processes p ON p.id = v.process WHERE v.path = '{path}' ORDER BY v.version"
            ),
        )
    };
    assert_eq!(
        who("modern.md"),
        "1 modern stateless-agent\n2 modern stateless-agent"
    );
    assert_eq!(who("legacy.md"), "1 legacy handshake-agent");
}

/// Issue 33 item 2: every tool a client can judge before calling it, in either era: a
/// title, annotations (read-only exactly for the tools `--read-only` lists, destructive
/// for those that change what a reader sees, never open-world), a description for every
/// argument, and an output schema for every tool that returns structured content (the
/// clients validate each result against it: a result that did not match would fail the
/// call). With `--tool-prefix` every name carries the prefix and only prefixed names are
/// answered.
#[test]
fn tools_carry_titles_annotations_argument_descriptions_and_output_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let db_arg = db.to_str().unwrap();
    let calls = json!([
        { "tool": "write", "args": { "path": "s.json", "content": "{\"total\": 42}\n", "step": 1 } },
        { "tool": "append", "args": { "path": "n.md", "content": "# A\nx 42\n" } },
        { "tool": "replace", "args": { "path": "n.md", "find": "x", "with": "y" } },
        { "tool": "list" },
        { "tool": "read", "args": { "path": "n.md" } },
        { "tool": "outline", "args": { "path": "n.md" } },
        { "tool": "history", "args": { "path": "n.md" } },
        { "tool": "read_version", "args": { "path": "n.md", "version": 1 } },
        { "tool": "diff", "args": { "path": "n.md", "from": 1 } },
        { "tool": "why", "args": { "path": "s.json", "key": "total" } },
        { "tool": "ground", "args": { "text": "total is 42 and 7" } },
        { "tool": "checkpoint", "args": { "name": "c1", "note": "n" } },
        { "tool": "checkpoints" },
        { "tool": "rollback", "args": { "name": "c1" } },
        { "tool": "restore", "args": { "path": "n.md", "version": 1 } },
        { "tool": "memory", "args": { "command": "view", "path": "/memories" } },
        { "tool": "search", "args": { "pattern": "42" } },
        { "tool": "glob", "args": { "pattern": "**/*.md" } },
        { "tool": "mkdir", "args": { "path": "d/e" } },
        { "tool": "move", "args": { "from": "s.json", "to": "d/e/s.json" } },
        { "tool": "delete", "args": { "path": "d", "recursive": true } },
    ]);
    let reading = [
        "list",
        "read",
        "outline",
        "history",
        "read_version",
        "diff",
        "why",
        "ground",
        "checkpoints",
        "search",
        "glob",
    ];
    for era in [ERA_HANDSHAKE, ERA_STATELESS] {
        // A database of its own for each era.
        let db = dir.path().join(format!("{era}.db"));
        let target = ["stdio", BIN, "mcp", "--db", db.to_str().unwrap()];
        let r = mcp_session_at(era, "judge", &target, calls.clone());
        let tools = r["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 21, "{era}");
        for (i, c) in calls.as_array().unwrap().iter().enumerate() {
            let name = c["tool"].as_str().unwrap();
            let t = tools.iter().find(|t| t["name"] == name).unwrap();
            let (err, text) = result(&r, i);
            assert!(!err, "{era}: {name}: {text}");
            let a = &t["annotations"];
            assert!(
                t["title"].as_str().is_some_and(|s| !s.is_empty()),
                "{era}: {name}: {t}"
            );
            assert_eq!(a["readOnlyHint"], reading.contains(&name), "{era}: {name}");
            assert_eq!(a["openWorldHint"], false, "{era}: {name}");
            let destructive = [
                "write", "replace", "memory", "rollback", "restore", "delete", "move",
            ];
            assert_eq!(
                a["destructiveHint"],
                destructive.contains(&name),
                "{era}: {name}"
            );
            assert!(a["idempotentHint"].is_boolean(), "{era}: {name}");
            for (arg, schema) in t["schema"]["properties"].as_object().unwrap() {
                assert!(
                    schema["description"].as_str().is_some_and(|d| d.len() > 5),
                    "{era}: {name}.{arg} has no description"
                );
            }
            let structured = &r["results"][i]["structured"];
            assert_eq!(
                t["output_schema"].is_object(),
                structured.is_object(),
                "{era}: {name}: an output schema exactly when a structured result: {structured}"
            );
        }
    }

    // --tool-prefix: every name prefixed, the unprefixed name not answered.
    let target = ["stdio", BIN, "mcp", "--db", db_arg, "--tool-prefix", "pad_"];
    let r = mcp_session_at(
        ERA_STATELESS,
        "merger",
        &target,
        json!([
            { "tool": "pad_append", "args": { "path": "a.md", "content": "x\n" } },
            { "tool": "append", "args": { "path": "a.md", "content": "y\n" } },
        ]),
    );
    let names: Vec<&str> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 21);
    assert!(names.iter().all(|n| n.starts_with("pad_")), "{names:?}");
    assert_eq!(ok(&r, 0), "a.md: 2 bytes");
    assert!(
        refused(&r, 1).contains("no tool named \"append\""),
        "{}",
        refused(&r, 1)
    );
    let o = std::process::Command::new(BIN)
        .args(["mcp", "--db", db_arg, "--tool-prefix", "pad/"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("'/' is not allowed in a tool name"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Issue 33 item 5: what the third-party clients found wrong, each fixed: the memory tool
/// removes a folder with its hidden files, makes what it creates the owner's only (0600,
/// 0700, as Anthropic's backend), resolves `.` and `..` that stay inside `/memories`,
/// slices `view_range` as Anthropic's backend does, and names `/memories/...` in its
/// refusals; error texts name the cause (a path of the wrong type, a file on the way, a
/// rule no writer may write); a read far past the end of an empty file says 0 bytes.
#[test]
fn the_defects_third_party_clients_found() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{ "paths": [
  { "path": "memories/locked.md", "writers": [] },
  { "path": "nobody.md", "writers": [] },
  { "path": "**", "writers": ["*"] } ] }"#,
    )
    .unwrap();
    let mem = |args: Value| json!({ "tool": "memory", "args": args });
    let r = stdio(
        &db,
        &["--rules", rules.to_str().unwrap()],
        "defects",
        json!([
            mem(json!({ "command": "create", "path": "/memories/sub/.hidden", "file_text": "h\n" })),
            mem(json!({ "command": "create", "path": "/memories/sub/a.md", "file_text": "a\n" })),
            mem(json!({ "command": "delete", "path": "/memories/sub" })),
            mem(json!({ "command": "view", "path": "/memories/sub" })),
            mem(json!({ "command": "create", "path": "/memories/./x.md", "file_text": "a\nb\nc\nd\n" })),
            mem(json!({ "command": "create", "path": "/memories/deep/../y.md", "file_text": "y\n" })),
            mem(json!({ "command": "view", "path": "/memories/x.md", "view_range": [2, -2] })),
            mem(json!({ "command": "view", "path": "/memories/x.md/z" })),
            mem(json!({ "command": "create", "path": "/memories/locked.md", "file_text": "l\n" })),
            { "tool": "read", "args": { "path": 5 } },
            { "tool": "write", "args": { "path": "nobody.md", "content": "n" } },
            { "tool": "write", "args": { "path": "empty.md", "content": "" } },
            { "tool": "read", "args": { "path": "empty.md", "offset": 18446744073709551000u64, "limit": 10 } },
            mem(json!({ "command": "create", "path": "/memories/p/q.md", "file_text": "q\n" })),
        ]),
    );
    assert_eq!(ok(&r, 2), "Successfully deleted /memories/sub");
    assert!(refused(&r, 3).contains("does not exist"), "{r}");
    assert_eq!(ok(&r, 4), "File created successfully at: /memories/./x.md");
    assert_eq!(
        ok(&r, 5),
        "File created successfully at: /memories/deep/../y.md"
    );
    assert_eq!(
        ok(&r, 6),
        "Here's the content of /memories/x.md with line numbers:\n     2\tb\n     3\tc"
    );
    let e = refused(&r, 7);
    assert!(e.contains("not a directory"), "{e}");
    let e = refused(&r, 8);
    assert!(
        e.starts_with("/memories/locked.md: ") && !e.contains(" memories/"),
        "{e}"
    );
    assert!(
        refused(&r, 9).contains("argument \"path\" must be a string, got 5"),
        "{}",
        refused(&r, 9)
    );
    assert!(
        refused(&r, 10).ends_with("no writer may write here (its writers list is empty)"),
        "{}",
        refused(&r, 10)
    );
    assert_eq!(r["results"][12]["structured"]["total_bytes"], 0, "{r}");
    assert_eq!(
        sql(
            &db,
            "SELECT group_concat(name || ' ' || printf('%o', mode & 4095), ', ') FROM \
             (SELECT CAST(name AS TEXT) AS name, mode FROM nodes \
             WHERE CAST(name AS TEXT) IN ('x.md', 'y.md', 'p', 'q.md', 'memories') \
             AND unlinked_ns IS NULL ORDER BY name)"
        ),
        "memories 700, p 700, q.md 600, x.md 600, y.md 600"
    );
    // Nothing of sub/ is left but its archive.
    assert_eq!(
        sql(
            &db,
            "SELECT COUNT(*) FROM nodes WHERE CAST(name AS TEXT) IN ('sub', 'a.md', '.hidden') \
             AND unlinked_ns IS NULL"
        ),
        "0"
    );
}

/// One HTTP/1.1 request to the server at `url` (`http://HOST:PORT/mcp`); the response's
/// status line and headers (the body is not waited for: a POST may answer with a stream).
fn http_head(url: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let addr = url
        .strip_prefix("http://")
        .and_then(|u| u.split('/').next())
        .unwrap();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    s.write_all(request.replace("{host}", addr).as_bytes())
        .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => got.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Issue 33 item 5: a client that ends its HTTP session (DELETE with its session id) is
/// answered 200; rmcp's 202 made the SDKs log "Session termination failed: 202".
#[test]
fn ending_an_http_session_is_answered_200() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut server, url, token_file) = http_server(&db, &["--as", "0:0"]);
    let token = std::fs::read_to_string(&token_file).unwrap();
    let token = token.lines().next().unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let head = http_head(
        &url,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: {{host}}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let session = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("mcp-session-id:")
                .then(|| l.split_once(':').unwrap().1.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no session id in {head}"));
    let head = http_head(
        &url,
        &format!(
            "DELETE /mcp HTTP/1.1\r\nHost: {{host}}\r\nAuthorization: Bearer {token}\r\n\
             Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n\
             Content-Length: 0\r\n\r\n"
        ),
    );
    let _ = server.kill();
    let _ = server.wait();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

/// Issue 33 item 7: `scratchfs mcp --rules FILE` on a mounted database runs when FILE
/// holds the mount's rules (spacing aside) and is refused, saying why, when it holds
/// others. (An SQLite mount of its own: a PostgreSQL database takes `--rules` as new
/// rules, docs/mcp.md.)
#[test]
fn mcp_rules_on_a_mounted_database_must_be_the_mounts() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    let rules = dir.path().join("rules.json");
    let same = dir.path().join("same.json");
    let other = dir.path().join("other.json");
    std::fs::write(&rules, r#"{"paths": [{"path": "**", "writers": ["*"]}]}"#).unwrap();
    std::fs::write(
        &same,
        "{\n  \"paths\": [\n    { \"writers\": [\"*\"], \"path\": \"**\" }\n  ]\n}\n",
    )
    .unwrap();
    std::fs::write(
        &other,
        r#"{"paths": [{"path": "**", "writers": ["*"], "max_bytes": 10}]}"#,
    )
    .unwrap();
    let _daemon = KillOnDrop(
        Command::new(BIN)
            .arg("mount")
            .arg(&mnt)
            .arg("--db")
            .arg(&db)
            .arg("--rules")
            .arg(&rules)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the mount", || mnt.join("MANIFEST").exists());
    let r = stdio(
        &db,
        &["--rules", same.to_str().unwrap()],
        "same-rules",
        json!([{ "tool": "append", "args": { "path": "a.md", "content": "x\n" } }]),
    );
    assert_eq!(ok(&r, 0), "a.md: 2 bytes");
    assert_eq!(read(mnt.join("a.md")), "x\n");
    let o = Command::new(BIN)
        .args(["mcp", "--db", db.to_str().unwrap(), "--rules"])
        .arg(&other)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("is mounted under other rules"), "{err}");
    let st = Command::new(BIN).arg("unmount").arg(&mnt).status().unwrap();
    assert!(st.success());
}

/// Issue 33 item 4: the tools a file-tool agent expects: `search` (literal, regex, case,
/// a path glob, line numbers, a limit), `glob`, `mkdir`, `move` (refusing to move over a
/// file unless asked), `delete` (a directory only when asked to take what it holds;
/// what it deletes is restorable from `.archive`), each through the gate and recorded.
#[test]
fn search_glob_mkdir_move_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{ "paths": [
  { "path": "locked/**", "writers": [] },
  { "path": "**", "writers": ["*"] } ] }"#,
    )
    .unwrap();
    let r = stdio(
        &db,
        &["--rules", rules.to_str().unwrap()],
        "agent",
        json!([
            { "tool": "write", "args": { "path": "notes/a.md", "content": "alpha\nTotal: 42\nbeta 42 42\n" } },
            { "tool": "write", "args": { "path": "notes/deep/b.md", "content": "no\ntotal 7\n" } },
            { "tool": "write", "args": { "path": "c.json", "content": "{\"total\": 42}\n" } },
            { "tool": "search", "args": { "pattern": "42" } },
            { "tool": "search", "args": { "pattern": "total", "ignore_case": true, "path": "notes/**" } },
            { "tool": "search", "args": { "pattern": "^t\\w+ \\d+$", "regex": true } },
            { "tool": "search", "args": { "pattern": "42", "limit": 1 } },
            { "tool": "glob", "args": { "pattern": "notes/**/*.md" } },
            { "tool": "glob", "args": { "pattern": "*.json" } },
            { "tool": "mkdir", "args": { "path": "x/y" } },
            { "tool": "mkdir", "args": { "path": "x/y" } },
            { "tool": "move", "args": { "from": "c.json", "to": "x/y/c.json" } },
            { "tool": "move", "args": { "from": "notes/deep/b.md", "to": "x/y/c.json" } },
            { "tool": "delete", "args": { "path": "notes" } },
            { "tool": "delete", "args": { "path": "notes", "recursive": true } },
            { "tool": "mkdir", "args": { "path": "locked/z" } },
            { "tool": "search", "args": { "pattern": "(" , "regex": true } },
            { "tool": "glob", "args": { "pattern": "**" } },
        ]),
    );
    let s = |i: usize| r["results"][i]["structured"].clone();
    assert_eq!(
        ok(&r, 3),
        "c.json:1:{\"total\": 42}\nnotes/a.md:2:Total: 42\nnotes/a.md:3:beta 42 42"
    );
    assert_eq!(s(3)["files_searched"], 6, "{r}"); // 3 written + plan, findings, state
    assert_eq!(
        ok(&r, 4),
        "notes/a.md:2:Total: 42\nnotes/deep/b.md:2:total 7"
    );
    assert_eq!(ok(&r, 5), "notes/deep/b.md:2:total 7");
    assert_eq!(s(6)["truncated"], true);
    assert_eq!(s(6)["matches"].as_array().unwrap().len(), 1);
    assert_eq!(ok(&r, 7), "notes/a.md\nnotes/deep/b.md");
    assert_eq!(ok(&r, 8), "c.json\nstate.json");
    assert_eq!(ok(&r, 9), "x/y: made");
    assert_eq!(ok(&r, 10), "x/y: already there");
    assert_eq!(ok(&r, 11), "c.json moved to x/y/c.json");
    assert!(refused(&r, 12).contains("already exists"), "{r}");
    assert!(refused(&r, 13).contains("directory not empty"), "{r}");
    assert_eq!(s(14)["removed"], 4, "{r}"); // notes, a.md, deep, b.md
    assert!(refused(&r, 15).contains("locked"), "{r}");
    assert!(refused(&r, 16).contains("regex parse error"), "{r}");
    assert_eq!(ok(&r, 17), "findings.md\nplan.md\nstate.json\nx/y/c.json");
    // Recorded: the move and the deletes, and the deleted files restorable.
    assert_eq!(
        sql(
            &db,
            "SELECT COUNT(*) FROM files f JOIN versions v ON v.file_id = f.id \
             WHERE v.path IN ('notes/a.md', 'notes/deep/b.md')"
        ),
        "2"
    );
    let list = stdio(&db, &[], "agent", json!([{ "tool": "list" }]));
    let restorable = list["results"][0]["structured"]["restorable"].to_string();
    assert!(
        restorable.contains("notes/a.md") && restorable.contains("notes/deep/b.md"),
        "{restorable}"
    );
}

/// Issue 33 item 4, attacked as uid 1000 through the mount's socket: `search` and `glob`
/// show nothing of a file or a directory the agent may not read; `delete`, `move` and
/// `mkdir` are refused where the rules or the modes refuse them, and nothing changes.
#[test]
fn search_glob_delete_and_move_as_uid_1000_keep_to_modes_and_rules() {
    let rules = r#"{ "writers": { "human": { "uid": 0 }, "agent": { "uid": 1000 } },
        "paths": [ { "path": "approved.md", "writers": ["human"] },
                   { "path": "**", "writers": ["*"] } ] }"#;
    let dir = tempfile::tempdir().unwrap();
    let rules_file = dir.path().join("rules.json");
    std::fs::write(&rules_file, rules).unwrap();
    let mut m = Mount::with_args(&["--allow-other", "--owner", "1000:1000"]);
    m.sh_ok(
        "echo approved 42 > approved.md && echo secret 42 > secret.txt && chmod 600 secret.txt \
         && chown 0:0 approved.md secret.txt \
         && mkdir private && echo hidden 42 > private/h.txt && chmod 700 private \
         && mkdir listless && echo needle-listless > listless/n.txt && chmod 711 listless \
         && echo needle-secret > secret2.txt && chmod 600 secret2.txt && chown 0:0 secret2.txt \
         && echo 'was secret' > was.txt && chown 0:0 was.txt && chmod 600 was.txt \
         && echo 'was public' > was.new && chown 0:0 was.new && mv was.new was.txt",
    );
    m.unmount();
    m.restart_with(&[
        "--allow-other",
        "--owner",
        "1000:1000",
        "--rules",
        rules_file.to_str().unwrap(),
    ]);
    let socket = m.sql("SELECT value FROM meta WHERE key = 'mcp_socket'");
    let call = |tool: &str, args: Value| socket_call_as_1000(&socket, "", tool, args);
    let r = call("search", json!({ "pattern": "42" }));
    assert_eq!(r["is_error"], false, "{r}");
    assert_eq!(r["text"], "approved.md:1:approved 42", "{r}");
    let r = call(
        "search",
        json!({ "pattern": "hidden", "path": "private/**" }),
    );
    assert_eq!(r["structured"]["matches"], json!([]), "{r}");
    // Through the text index (a literal of 3 characters or more): nothing in a file it may
    // not read, nor in a directory it may search but not list (`grep -r` does not list
    // it either, so the name must not come out).
    let r = call("search", json!({ "pattern": "needle-" }));
    assert_eq!(r["structured"]["matches"], json!([]), "{r}");
    // ... and it is not asked at all for a caller with files closed to it: how long the
    // index takes depends on what root's files hold (a timing oracle, helper finding);
    // the walk reads every file it may read instead.
    assert!(
        r["structured"]["files_searched"].as_u64().unwrap() >= 4,
        "the walk, not the index: {r}"
    );
    let r = call("search", json!({ "pattern": "needle-\\w+", "regex": true }));
    assert_eq!(r["structured"]["matches"], json!([]), "{r}");
    assert!(
        std::process::Command::new("setpriv")
            .args(["--reuid=1000", "--regid=1000", "--clear-groups", "cat"])
            .arg(m.path("listless/n.txt"))
            .output()
            .unwrap()
            .status
            .success(),
        "uid 1000 may read listless/n.txt by name"
    );
    // Every version: one its inode guards (root's, 0600 when a rename replaced it) is
    // passed over.
    let r = call("search", json!({ "pattern": "was ", "history": true }));
    let found = r["text"].as_str().unwrap_or_default();
    assert!(found.starts_with("was.txt@v2:1:was public  ["), "{r}");
    let r = call("read_version", json!({ "path": "was.txt", "version": 1 }));
    assert_eq!(r["is_error"], true, "read_version refuses it too: {r}");
    assert!(!found.contains("secret"), "{r}");
    let r = call("glob", json!({ "pattern": "**" }));
    let listed = r["structured"]["paths"].to_string();
    assert!(!listed.contains("private/h.txt"), "{listed}");
    assert!(listed.contains("secret.txt"), "{listed}");
    let r = call("delete", json!({ "path": "approved.md" }));
    assert_eq!(r["is_error"], true, "{r}");
    let r = call("move", json!({ "from": "approved.md", "to": "mine.md" }));
    assert_eq!(r["is_error"], true, "{r}");
    let r = call("delete", json!({ "path": "private", "recursive": true }));
    assert_eq!(r["is_error"], true, "{r}");
    let r = call("mkdir", json!({ "path": "private/x" }));
    assert_eq!(r["is_error"], true, "{r}");
    assert_eq!(read(m.path("approved.md")), "approved 42\n");
    assert_eq!(read(m.path("private/h.txt")), "hidden 42\n");
    assert!(!m.path("mine.md").exists());
    assert!(!m.path("private/x").exists());
}

/// Issue 33 item 4, the history index: asked for a caller who may read every version the
/// store holds, and for no other (how long it takes depends on all it holds: the timing
/// oracle the live index closed in session 23, here over deleted files' versions too):
/// uid 1000 gets the index while every file was open to it, and the walk once root has
/// kept a 0600 file, even one since deleted; root keeps the index.
#[test]
fn history_search_asks_the_index_only_for_a_caller_who_may_read_every_version() {
    let m = Mount::with_args(&["--allow-other", "--owner", "1000:1000"]);
    m.sh_ok(
        "for i in $(seq 12); do echo \"filler $i\" > f$i.md; done; \
         echo 'one hit-sigma' > f3.md; echo 'two' >> f3.md",
    );
    let socket = m.sql("SELECT value FROM meta WHERE key = 'mcp_socket'");
    let search = || {
        let r = socket_call_as_1000(
            &socket,
            "",
            "search",
            json!({ "pattern": "hit-sigma", "history": true }),
        );
        assert_eq!(r["is_error"], false, "{r}");
        (
            r["text"].as_str().unwrap_or_default().to_string(),
            r["structured"]["files_searched"].as_u64().unwrap(),
        )
    };
    let (found, read) = search();
    assert!(found.starts_with("f3.md@v2:1:one hit-sigma"), "{found}");
    assert_eq!(read, 1, "every version open to uid 1000: the index answers");
    m.sh_ok("echo 'hit-sigma of root' > root.txt && chmod 600 root.txt && rm root.txt");
    let (found, read) = search();
    assert!(!found.contains("root"), "{found}");
    assert!(found.starts_with("f3.md@v2:1:one hit-sigma"), "{found}");
    assert!(
        read >= 12,
        "a version closed to uid 1000: the walk, not the index ({read})"
    );
    let (code, out, err) = cli(&m, &["grep", "--history", "--json", "hit-sigma"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["files_searched"], 1, "root: the index ({v})");
}

/// Issue 33 item 6: two stdio clients on one unmounted scratchpad both work: the first
/// `scratchfs mcp` holds the database and serves the second's calls through its socket,
/// as a mount's daemon does; each sees the other's writes at once, each is recorded under
/// its own client name. (It failed with "in use by another process".)
#[test]
fn two_stdio_servers_share_one_unmounted_scratchpad() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (first_in, second_done) = (dir.path().join("first-in"), dir.path().join("second-done"));
    let first = {
        let (db, first_in, second_done) = (db.clone(), first_in.clone(), second_done.clone());
        std::thread::spawn(move || {
            stdio(
                &db,
                &[],
                "first-agent",
                json!([
                    { "tool": "append", "args": { "path": "shared.md", "content": "one\n" } },
                    { "touch": first_in.to_str().unwrap() },
                    { "wait_for": second_done.to_str().unwrap() },
                    { "tool": "read", "args": { "path": "shared.md" } },
                ]),
            )
        })
    };
    wait_for("the first server's first call", || first_in.exists());
    let second = stdio(
        &db,
        &[],
        "second-agent",
        json!([
            { "tool": "read", "args": { "path": "shared.md" } },
            { "tool": "append", "args": { "path": "shared.md", "content": "two\n" } },
            { "touch": second_done.to_str().unwrap() },
        ]),
    );
    let first = first.join().unwrap();
    assert_eq!(ok(&second, 0), "one\n");
    assert_eq!(ok(&second, 1), "shared.md: 8 bytes");
    // (touch and wait_for give no result.)
    assert_eq!(ok(&first, 1), "one\ntwo\n");
    assert_eq!(
        sql(
            &db,
            "SELECT group_concat(p.client, ' ') FROM (SELECT * FROM versions ORDER BY version) v \
             JOIN processes p ON p.id = v.process WHERE v.path = 'shared.md'"
        ),
        "first-agent second-agent"
    );
}

/// A session keeps at most 16 `subscriptions/listen` streams open at once (each is a task
/// comparing the scratchpad every 250 ms; helper finding: 5,000 held every daemon
/// connection of the uid); the 17th is refused before its acknowledgment (the SDK can
/// only answer "method not found" then), and one closed makes room again.
#[test]
fn a_session_keeps_at_most_sixteen_listen_streams() {
    let m = Mount::new();
    let script = r#"
import asyncio, contextlib, json, sys
from mcp import StdioServerParameters
from mcp.client.client import Client
async def main():
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    out = {}
    async with Client(params, mode="2026-07-28") as c:
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(16):
                await stack.enter_async_context(c.listen(resource_subscriptions=["scratchpad://MANIFEST"]))
            out["sixteen"] = True
            try:
                async with c.listen(resource_subscriptions=["scratchpad://MANIFEST"]):
                    out["seventeenth"] = "open"
            except Exception as e:
                out["seventeenth"] = str(e)
        # The server ends the closed streams' tasks on its own time: asked again until
        # one is open (a bounded poll, not a fixed wait).
        for _ in range(600):
            try:
                async with c.listen(resource_subscriptions=["scratchpad://MANIFEST"]):
                    out["after"] = "open"
                break
            except Exception:
                await asyncio.sleep(0.05)
    print(json.dumps(out))
asyncio.run(main())
"#;
    let o = Command::new(MCP_PYTHON)
        .arg("-c")
        .arg(script)
        .arg(BIN)
        .args(["mcp", "--db"])
        .arg(m.db.to_str().unwrap())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["sixteen"], true, "{v}");
    assert_ne!(v["seventeenth"], "open", "{v}");
    assert_eq!(v["after"], "open", "{v}");
}

/// Issue 33 item 3, protocol 2026-07-28: a client that `subscriptions/listen`s for
/// resources (the Python SDK's `Client.listen`, no initialize handshake) is acknowledged
/// with the URIs we serve, and told on that stream when MANIFEST and a file change after
/// a write through the FUSE mount, within a second; a file that did not change is not
/// announced.
#[test]
fn a_stateless_client_listens_for_updates_after_a_write_through_the_mount() {
    let m = Mount::new();
    m.sh_ok("printf '# Plan\\n' > plan.md && echo other > other.md");
    let script = r#"
import asyncio, json, sys, time
from mcp import StdioServerParameters
from mcp.client.client import Client
from mcp.shared.subscriptions import ResourceUpdated
async def main():
    mnt = sys.argv[2]
    out = {}
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[3:])
    async with Client(params, mode="2026-07-28") as c:
        uris = ["scratchpad://MANIFEST", "scratchpad://file/plan.md",
                "scratchpad://file/other.md", "https://example.com/x"]
        async with c.listen(resource_subscriptions=uris) as sub:
            out["honored"] = sorted(sub.honored.resource_subscriptions or [])
            with open(mnt + "/plan.md", "a") as f:
                f.write("- step\n")
            wrote = time.monotonic()
            got, first = set(), None
            async def collect():
                nonlocal first
                async for e in sub:
                    if isinstance(e, ResourceUpdated):
                        got.add(str(e.uri))
                        first = first or time.monotonic() - wrote
                        if len(got) >= 2:
                            return
            try:
                await asyncio.wait_for(collect(), 60)
            except TimeoutError:
                pass
            out["updated"] = sorted(got)
            out["after_s"] = first
    print(json.dumps(out))
asyncio.run(main())
"#;
    let o = Command::new(MCP_PYTHON)
        .arg("-c")
        .arg(script)
        .arg(BIN)
        .arg(&m.mnt)
        .args(["mcp", "--db"])
        .arg(m.db.to_str().unwrap())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        out["honored"],
        json!([
            "scratchpad://MANIFEST",
            "scratchpad://file/other.md",
            "scratchpad://file/plan.md"
        ]),
        "{out}"
    );
    assert_eq!(
        out["updated"],
        json!(["scratchpad://MANIFEST", "scratchpad://file/plan.md"]),
        "{out}"
    );
    eprintln!("first update {} s after the write", out["after_s"]);
}

/// Issue 33 item 3: the scratchpad as resources, through the Python SDK on a mounted
/// database: MANIFEST and each file listed, the templates for a file, its outline and its
/// versions, each readable; a client subscribed to MANIFEST and to a file is told
/// (`notifications/resources/updated`) when a process on the mount writes that file, and
/// only for what changed.
#[test]
fn resources_and_an_update_after_a_write_through_the_mount() {
    let m = Mount::new();
    m.sh_ok("printf '# Plan\\n## Goal\\nship\\n' > plan.md && echo other > other.md");
    let script = r#"
import asyncio, json, sys, time
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
async def main():
    mnt = sys.argv[2]
    got = []
    async def on_message(m):
        if isinstance(m, types.ResourceUpdatedNotification):
            got.append((str(m.params.uri), time.monotonic()))
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[3:])
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w, message_handler=on_message) as s:
            init = await s.initialize()
            out = {"subscribe": bool(init.capabilities.resources and init.capabilities.resources.subscribe)}
            out["resources"] = [str(x.uri) for x in (await s.list_resources()).resources]
            out["templates"] = [x.uri_template for x in (await s.list_resource_templates()).resource_templates]
            read = lambda uri: s.read_resource(uri)
            out["plan"] = (await read("scratchpad://file/plan.md")).contents[0].text
            out["outline"] = (await read("scratchpad://outline/plan.md")).contents[0].text
            out["manifest_has_plan"] = "plan.md" in (await read("scratchpad://MANIFEST")).contents[0].text
            out["v1"] = (await read("scratchpad://version/1/plan.md")).contents[0].text
            out["v2"] = (await read("scratchpad://version/2/plan.md")).contents[0].text
            try:
                await read("scratchpad://file/nope.md")
                out["missing"] = "read"
            except Exception as e:
                out["missing"] = str(e)
            await s.subscribe_resource("scratchpad://MANIFEST")
            await s.subscribe_resource("scratchpad://file/plan.md")
            await s.subscribe_resource("scratchpad://file/other.md")
            with open(mnt + "/plan.md", "a") as f:
                f.write("- step\n")
            wrote = time.monotonic()
            for _ in range(3000):
                if len({u for u, _ in got}) >= 2:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.6)
            out["updated"] = sorted({u for u, _ in got})
            out["after_s"] = min((t - wrote for _, t in got), default=None)
    print(json.dumps(out))
asyncio.run(main())
"#;
    let o = Command::new(MCP_PYTHON)
        .arg("-c")
        .arg(script)
        .arg(BIN)
        .arg(&m.mnt)
        .args(["mcp", "--db"])
        .arg(m.db.to_str().unwrap())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["subscribe"], true, "{r}");
    let listed = r["resources"].to_string();
    assert!(
        listed.contains("scratchpad://MANIFEST") && listed.contains("scratchpad://file/plan.md"),
        "{r}"
    );
    assert_eq!(
        r["templates"],
        json!([
            "scratchpad://file/{+path}",
            "scratchpad://outline/{+path}",
            "scratchpad://version/{version}/{+path}"
        ])
    );
    assert_eq!(r["plan"], "# Plan\n## Goal\nship\n");
    assert!(r["outline"].as_str().unwrap().contains("Goal"), "{r}");
    assert_eq!(r["manifest_has_plan"], true);
    assert_eq!(r["v1"], "", "the default layout's plan.md");
    assert_eq!(r["v2"], "# Plan\n## Goal\nship\n");
    assert!(
        r["missing"].as_str().unwrap().contains("no such file"),
        "{r}"
    );
    // The write's file and MANIFEST, not the other file (the poll's period is 250 ms;
    // scripts/bench is where the time is measured: here it is only printed).
    assert_eq!(
        r["updated"],
        json!(["scratchpad://MANIFEST", "scratchpad://file/plan.md"]),
        "{r}"
    );
    eprintln!("first update {} s after the write", r["after_s"]);
}

/// Issue 33 item 3, attacked as uid 1000 (an HTTP server run with `--as 1000:1000` on a
/// mounted database, through the mount's daemon): resources show the agent no more than
/// its tools would: root's 0600 file is not read, the file in root's 0700 directory is
/// neither listed nor read, and a subscription to it tells nothing when root changes it.
#[test]
fn resources_as_uid_1000_show_no_more_than_its_tools() {
    let m = Mount::with_args(&["--allow-other"]);
    m.sh_ok(
        "echo secret > secret.txt && chmod 600 secret.txt \
         && mkdir private && echo hidden > private/h.txt && chmod 700 private \
         && echo open > open.md",
    );
    let (mut server, url, token_file) = http_server(&m.db, &["--as", "1000:1000"]);
    let token = std::fs::read_to_string(&token_file).unwrap();
    let script = r#"
import asyncio, json, sys, httpx2
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
async def main():
    url, token, flag = sys.argv[1:4]
    got = []
    async def on_message(m):
        if isinstance(m, types.ResourceUpdatedNotification):
            got.append(str(m.params.uri))
    async with httpx2.AsyncClient(headers={"Authorization": "Bearer " + token}, timeout=60) as http:
        async with streamable_http_client(url, http_client=http) as (r, w, *_):
            async with ClientSession(r, w, message_handler=on_message) as s:
                await s.initialize()
                out = {"listed": [str(x.uri) for x in (await s.list_resources()).resources]}
                for name, uri in [("secret", "scratchpad://file/secret.txt"),
                                  ("hidden", "scratchpad://file/private/h.txt"),
                                  ("hidden_v1", "scratchpad://version/1/private/h.txt"),
                                  ("hidden_outline", "scratchpad://outline/private/h.txt"),
                                  ("open", "scratchpad://file/open.md")]:
                    try:
                        out[name] = (await s.read_resource(uri)).contents[0].text
                    except Exception as e:
                        out[name] = "refused: " + str(e)
                await s.subscribe_resource("scratchpad://file/private/h.txt")
                await s.subscribe_resource("scratchpad://file/open.md")
                open(flag, "w").close()
                # Root changes both files; the open one's update says the watcher ran.
                for _ in range(6000):
                    if "scratchpad://file/open.md" in got:
                        break
                    await asyncio.sleep(0.01)
                out["updated"] = sorted(set(got))
    print(json.dumps(out))
asyncio.run(main())
"#;
    let flag = m.dir.path().join("subscribed");
    let client = {
        let (url, token, flag) = (url.clone(), token.trim().to_string(), flag.clone());
        std::thread::spawn(move || {
            Command::new(MCP_PYTHON)
                .arg("-c")
                .arg(script)
                .args([&url, &token])
                .arg(&flag)
                .stdin(Stdio::null())
                .output()
                .unwrap()
        })
    };
    wait_for("the agent's subscriptions", || {
        flag.exists() || client.is_finished()
    });
    m.sh_ok("echo changed >> private/h.txt && echo changed >> open.md");
    let o = client.join().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let listed = r["listed"].to_string();
    assert!(!listed.contains("private/h.txt"), "{r}");
    for name in ["secret", "hidden", "hidden_v1", "hidden_outline"] {
        let text = r[name].as_str().unwrap();
        assert!(
            text.starts_with("refused: ")
                && !text.contains("secret\n")
                && !text.contains("hidden\n"),
            "{name}: {r}"
        );
    }
    assert_eq!(r["open"], "open\n");
    assert_eq!(r["updated"], json!(["scratchpad://file/open.md"]), "{r}");
}

/// Issue 33 item 3, attacked as uid 1000 with 2026-07-28's way of listening
/// (`subscriptions/listen` over HTTP, a server run with `--as 1000:1000`): a stream
/// listening to a file in root's 0700 directory carries nothing when root changes it,
/// while the open file's change comes on the same stream. Root's 0600 file in an open
/// directory is told as changed (what `list`, and `stat` on a mount, show uid 1000: its
/// version and size; never its bytes).
#[test]
fn a_listen_stream_as_uid_1000_tells_nothing_of_closed_files() {
    let m = Mount::with_args(&["--allow-other"]);
    m.sh_ok(
        "echo secret > secret.txt && chmod 600 secret.txt \
         && mkdir private && echo hidden > private/h.txt && chmod 700 private \
         && echo open > open.md",
    );
    let (mut server, url, token_file) = http_server(&m.db, &["--as", "1000:1000"]);
    let token = std::fs::read_to_string(&token_file).unwrap();
    let script = r#"
import asyncio, json, sys, httpx2
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.subscriptions import ResourceUpdated
async def main():
    url, token, flag = sys.argv[1:4]
    out, got = {}, set()
    async with httpx2.AsyncClient(headers={"Authorization": "Bearer " + token}, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as c:
            uris = ["scratchpad://file/private/h.txt", "scratchpad://file/secret.txt",
                    "scratchpad://file/open.md"]
            async with c.listen(resource_subscriptions=uris) as sub:
                open(flag, "w").close()
                async def collect():
                    async for e in sub:
                        if isinstance(e, ResourceUpdated):
                            got.add(str(e.uri))
                            if "scratchpad://file/open.md" in got:
                                return
                try:
                    await asyncio.wait_for(collect(), 60)
                except TimeoutError:
                    pass
    out["updated"] = sorted(got)
    print(json.dumps(out))
asyncio.run(main())
"#;
    let flag = m.dir.path().join("listening");
    let client = {
        let (url, token, flag) = (url.clone(), token.trim().to_string(), flag.clone());
        std::thread::spawn(move || {
            Command::new(MCP_PYTHON)
                .arg("-c")
                .arg(script)
                .args([&url, &token])
                .arg(&flag)
                .stdin(Stdio::null())
                .output()
                .unwrap()
        })
    };
    wait_for("the agent's listen stream", || {
        flag.exists() || client.is_finished()
    });
    // Root changes the closed files first; the open one's update, after them on the same
    // stream, says the watcher ran past them.
    m.sh_ok("echo changed >> private/h.txt && echo changed >> secret.txt");
    m.sh_ok("echo changed >> open.md");
    let o = client.join().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        r["updated"],
        json!(["scratchpad://file/open.md", "scratchpad://file/secret.txt"]),
        "{r}"
    );
}

/// Issue 33 item 6, attacked as uid 1000: the socket a root `scratchfs mcp` opens for
/// other servers on its unmounted database lets root and its own user in, not the
/// agent: uid 1000 cannot connect to it, nor start a server of its own on the database.
#[test]
fn a_stdio_servers_socket_keeps_the_agent_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut first = KillOnDrop(
        Command::new(BIN)
            .args(["mcp", "--db", db.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let socket = {
        let mut found = String::new();
        wait_for("the first server's socket in meta", || {
            found = if db.exists() {
                let o = Command::new("sqlite3")
                    .arg(&db)
                    .arg("SELECT value FROM meta WHERE key = 'mcp_socket'")
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&o.stdout).trim().to_string()
            } else {
                String::new()
            };
            found.ends_with(".sock") && Path::new(&found).exists()
        });
        found
    };
    let agent = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid", "1000", "--regid", "1000", "--clear-groups"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let o = agent(&[
        "/usr/bin/python3",
        "-c",
        "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\n    print('connected')\nexcept OSError as e:\n    print('refused', e.errno)",
        &socket,
    ]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.starts_with("refused"), "{said}");
    let o = agent(&[BIN, "mcp", "--db", db.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    // Root's own second server gets in.
    let r = stdio(
        &db,
        &[],
        "second",
        json!([{ "tool": "append", "args": { "path": "a.md", "content": "x\n" } }]),
    );
    assert_eq!(ok(&r, 0), "a.md: 2 bytes");
    drop(first.0.stdin.take());
    let _ = first.0.wait();
}
