//! Attacks on what feeds the gate (issue 31, docs/security.md), each as the agent: uid
//! 1000 and anything it can run, user namespaces included. Each test is a finding of the
//! issue's attack, and failed before its fix.
//!
//! - An `exe` matcher cannot be claimed by a binary bind-mounted over the pinned path in
//!   the agent's own namespace, nor by a process in another namespace unless the writer
//!   allows it (item 1).
//! - A connection to the mount's MCP socket keeps the identity of the process that
//!   connected: a child that kept the socket while its parent exec'd the pinned tool is
//!   not the tool (item 1).
//! - One uid's idle connections to the socket keep no other caller out (item 3).
//! - `mcp --listen` keeps its bearer token from the agent whose uid it acts as (item 3).

mod common;
use common::*;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

/// A directory the agent may enter and read, outside the mount, removed with the value.
fn public_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("scratchfs-attack-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// A copy of `from` at `to`, root's, mode 0755: a binary the agent may run but not write.
fn install(from: &str, to: &std::path::Path) {
    std::fs::copy(from, to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// [`install`], set-group-ID `nogroup` (65534, mode 2755): a tool's binary as
/// docs/rules.md says to install one an `exe` matcher names. The agent may run it, but
/// not control the process it runs in (no `ptrace`, no `LD_PRELOAD`: not dumpable).
fn install_tool(from: &str, to: &std::path::Path) {
    let dir = to.parent().unwrap();
    assert!(
        !nosuid(dir),
        "cannot test a set-group-ID tool: {} is on a nosuid filesystem",
        dir.display()
    );
    install(from, to);
    std::os::unix::fs::chown(to, Some(0), Some(65534)).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o2755)).unwrap();
}

/// Whether the filesystem holding `dir` is mounted `nosuid` (statvfs(3) `ST_NOSUID`): the
/// kernel ignores set-user-ID and set-group-ID bits there.
fn nosuid(dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a buffer statvfs fills.
    assert_eq!(
        unsafe { libc::statvfs(c.as_ptr(), &mut st) },
        0,
        "statvfs {}",
        dir.display()
    );
    st.f_flag & libc::ST_NOSUID != 0
}

/// Runs `script` with `sh` as uid 1000 (no supplementary groups), in the mount; its
/// output.
fn as_agent(m: &Mount, script: &str) -> std::process::Output {
    output_within(
        script,
        Command::new("setpriv")
            .args([
                "--reuid",
                "1000",
                "--regid",
                "1000",
                "--clear-groups",
                "sh",
                "-c",
            ])
            .arg(script)
            .current_dir(&m.mnt),
        Duration::from_secs(120),
    )
}

#[test]
fn an_exe_matcher_is_the_file_itself_not_a_path_the_agents_namespace_shows() {
    let bin = public_dir();
    let (tool, boxed) = (bin.path().join("tool"), bin.path().join("boxed-tool"));
    let plain = bin.path().join("plain-tool");
    install_tool("/usr/bin/tee", &tool);
    install_tool("/usr/bin/tee", &boxed);
    install("/usr/bin/tee", &plain);
    let rules = format!(
        r#"{{ "writers": {{
                "tool":  {{ "exe": "{}" }},
                "boxed": {{ "exe": "{}", "exe_any_namespace": true }},
                "plain": {{ "exe": "{}" }},
                "agent": {{ "uid": 1000 }} }},
            "paths": [ {{ "path": "tool.txt", "writers": ["tool"] }},
                       {{ "path": "boxed.txt", "writers": ["boxed"] }},
                       {{ "path": "plain.txt", "writers": ["plain"] }},
                       {{ "path": "**", "writers": ["*"] }} ] }}"#,
        tool.display(),
        boxed.display(),
        plain.display()
    );
    let rules_file = bin.path().join("rules.json");
    std::fs::write(&rules_file, rules).unwrap();
    let m = Mount::with_args(&[
        "--rules",
        rules_file.to_str().unwrap(),
        "--owner",
        "1000:1000",
    ]);
    // The mount prints what `rules check` would (on stderr, the daemon's log): the plain
    // tool matches only root's processes.
    let log = std::fs::read_to_string(m.dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains(&format!(
            "exe \"{}\" is neither set-user-ID nor set-group-ID",
            plain.display()
        )),
        "the daemon's log: {log}"
    );
    let (tool, boxed, plain) = (tool.display(), boxed.display(), plain.display());
    // The tool itself, run by the agent's uid: its writer.
    let o = as_agent(&m, &format!("echo honest | {tool} tool.txt"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A tool binary that is not set-group-ID runs in a process the agent controls (it may
    // preload a library into it, trace it, or make its own process show that binary as
    // its executable): not the tool (attack round of issue 32).
    let o = as_agent(&m, &format!("echo preloaded | {plain} plain.txt"));
    assert!(
        !o.status.success(),
        "a process the agent controls matched exe"
    );
    // The agent's own binary (any it can read) bind-mounted over the tool's path in a
    // namespace of its own: /proc/PID/exe shows the tool's path there.
    let o = as_agent(
        &m,
        &format!(
            "unshare -Urm sh -c 'mount --bind /usr/bin/tee {tool} && echo forged | {tool} tool.txt'"
        ),
    );
    assert!(
        !o.status.success(),
        "the bind-mounted binary wrote tool.txt"
    );
    // The same over a writer that accepts other namespaces: still not the file.
    let o = as_agent(
        &m,
        &format!(
            "unshare -Urm sh -c 'mount --bind /usr/bin/tee {boxed} && echo forged | {boxed} boxed.txt'"
        ),
    );
    assert!(
        !o.status.success(),
        "the bind-mounted binary wrote boxed.txt"
    );
    // The real tool in a user namespace the agent made: the agent is root there and may
    // trace it (and the kernel ignores the set-group-ID bit of a group not mapped in it),
    // so not even the writer that accepts other namespaces.
    let o = as_agent(
        &m,
        &format!("unshare -Urm sh -c 'echo boxed | {boxed} boxed.txt'"),
    );
    assert!(
        !o.status.success(),
        "a tool in the agent's own user namespace matched exe"
    );
    // The real tool in a mount namespace root made for the agent (a sandbox): only the
    // writer that says so.
    let in_sandbox = |script: String| {
        output_within(
            "the sandboxed tool",
            Command::new("unshare")
                .args(["-m", "setpriv", "--reuid", "1000", "--regid", "1000"])
                .args(["--clear-groups", "sh", "-c"])
                .arg(script)
                .current_dir(&m.mnt),
            Duration::from_secs(120),
        )
    };
    let o = in_sandbox(format!("echo boxed | {boxed} boxed.txt"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = in_sandbox(format!("echo namespaced | {tool} tool.txt"));
    assert!(
        !o.status.success(),
        "a process of another namespace matched exe"
    );
    assert_eq!(read(m.path("tool.txt")), "honest\n");
    assert_eq!(read(m.path("boxed.txt")), "boxed\n");
    assert_eq!(
        m.sql("SELECT writer FROM versions WHERE path IN ('tool.txt', 'boxed.txt', 'plain.txt') ORDER BY id"),
        "tool\nboxed"
    );
    // Each forgery is on record as the agent it is.
    let refused =
        m.sql("SELECT writer || ' ' || path FROM events WHERE op = 'rejected' ORDER BY id");
    assert_eq!(
        refused,
        "agent plain.txt\nagent tool.txt\nagent boxed.txt\nagent boxed.txt\nagent tool.txt",
        "the refusals"
    );
}

#[test]
fn a_socket_connection_keeps_the_identity_of_the_process_that_connected() {
    let bin = public_dir();
    let tool = bin.path().join("tool-python");
    // The tool is a Python program: its binary is a copy of the interpreter, root's.
    let python = std::fs::canonicalize("/usr/bin/python3").unwrap();
    install_tool(python.to_str().unwrap(), &tool);
    let rules = format!(
        r#"{{ "writers": {{ "tool": {{ "exe": "{}" }}, "agent": {{ "uid": 1000 }} }},
            "paths": [ {{ "path": "tool.txt", "writers": ["tool"] }},
                       {{ "path": "**", "writers": ["*"] }} ] }}"#,
        tool.display()
    );
    let rules_file = bin.path().join("rules.json");
    std::fs::write(&rules_file, rules).unwrap();
    let m = Mount::with_args(&[
        "--rules",
        rules_file.to_str().unwrap(),
        "--owner",
        "1000:1000",
    ]);
    let socket = m.sql("SELECT value FROM meta WHERE key = 'mcp_socket'");
    assert!(socket.ends_with(".sock"), "{socket}");
    // The agent connects, forks a child that keeps the socket, and execs the tool's
    // binary in the process that connected (which then waits for the child); the child
    // waits until its parent runs the tool, then writes as the tool.
    let attack = r#"
import os, socket, sys, time, json
sock, tool = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX); s.connect(sock)
r, w = os.pipe()
pid = os.fork()
if pid != 0:
    os.close(w); os.dup2(r, 0)
    os.execv(tool, [tool, "-c", "import sys; sys.stdin.read()"])
os.close(r)
parent = os.getppid()
deadline = time.time() + 60
def runs_tool():
    try:
        return os.readlink(f"/proc/{parent}/exe") == tool
    except PermissionError:  # no longer dumpable: it runs the set-group-ID tool
        return True
while not runs_tool():
    assert time.time() < deadline, "the parent never ran the tool"
    time.sleep(0.01)
req = {"tool": "write", "args": {"path": "tool.txt", "content": "forged\n"}, "writer": "tool",
       "client": "raw", "client_version": "0", "read_only": False}
s.sendall(json.dumps(req).encode() + b"\n")
f = s.makefile()
for line in f:
    if '"is_error"' in line:
        print(line, end=""); break
else:
    print(json.dumps({"is_error": True, "text": "connection closed without a reply"}))
os.close(w)
"#;
    let o = output_within(
        "the forked child's call",
        Command::new("setpriv")
            .args(["--reuid", "1000", "--regid", "1000", "--clear-groups"])
            .args(["/usr/bin/python3", "-c", attack, &socket])
            .arg(&tool),
        Duration::from_secs(120),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["is_error"], true, "the child wrote as the tool: {r}");
    assert!(!m.path("tool.txt").exists(), "tool.txt was written");
    // Any process but the one that connected is refused, exec or not: the kernel names
    // the sender of each message (what closes an exec between connect and accept).
    let child = r#"
import os, socket, sys, json
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile()
f.readline()
if os.fork() == 0:
    s.sendall(json.dumps({"tool": "list", "args": {}, "writer": None, "client": "raw",
                          "client_version": "0", "read_only": True}).encode() + b"\n")
    print(f.readline(), end="")
    os._exit(0)
os.wait()
"#;
    let o = output_within(
        "a child's call on its parent's connection",
        Command::new("setpriv")
            .args(["--reuid", "1000", "--regid", "1000", "--clear-groups"])
            .args(["/usr/bin/python3", "-c", child, &socket]),
        Duration::from_secs(120),
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["is_error"], true, "{r}");
    assert!(
        r["text"]
            .as_str()
            .unwrap()
            .contains("not by the process that connected"),
        "{r}"
    );
    // The tool itself, connecting and calling in one process, is the tool.
    let honest = r#"
import socket, sys, json
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile()
f.readline()
req = {"tool": "write", "args": {"path": "tool.txt", "content": "honest\n"}, "writer": "tool",
       "client": "raw", "client_version": "0", "read_only": False}
s.sendall(json.dumps(req).encode() + b"\n")
print(f.readline(), end="")
"#;
    let o = output_within(
        "the tool's call",
        Command::new("setpriv")
            .args(["--reuid", "1000", "--regid", "1000", "--clear-groups"])
            .arg(&tool)
            .args(["-c", honest, &socket]),
        Duration::from_secs(120),
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["is_error"], false, "{r}");
    assert_eq!(read(m.path("tool.txt")), "honest\n");
}

#[test]
fn one_uids_idle_connections_to_the_socket_keep_no_one_else_out() {
    let m = Mount::with_args(&["--allow-other"]);
    let socket = m.sql("SELECT value FROM meta WHERE key = 'mcp_socket'");
    // uid 1000 opens 20 connections and holds them, idle, until told to let go.
    let hog = r#"
import socket, sys
held, refused = [], 0
for _ in range(20):
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(60)
    line = s.makefile().readline()
    if '"scratchfs"' in line: held.append(s)
    else: refused += 1
print(len(held), refused, flush=True)
sys.stdin.read()
"#;
    let mut hog_proc = Command::new("setpriv")
        .args(["--reuid", "1000", "--regid", "1000", "--clear-groups"])
        .args(["/usr/bin/python3", "-c", hog, &socket])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut counts = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(hog_proc.stdout.take().unwrap()),
        &mut counts,
    )
    .unwrap();
    // While they are held: another uid and root each get a call through.
    let call = r#"
import socket, sys, json
s = socket.socket(socket.AF_UNIX); s.settimeout(30); s.connect(sys.argv[1]); f = s.makefile()
f.readline()
s.sendall(json.dumps({"tool": "list", "args": {}, "writer": None, "client": "raw",
                      "client_version": "0", "read_only": True}).encode() + b"\n")
print(f.readline(), end="")
"#;
    let mut replies = Vec::new();
    for uid in ["1001", "0"] {
        let o = output_within(
            "a call while uid 1000 holds its connections",
            Command::new("setpriv")
                .args(["--reuid", uid, "--regid", uid, "--clear-groups"])
                .args(["/usr/bin/python3", "-c", call, &socket]),
            Duration::from_secs(60),
        );
        replies.push(String::from_utf8_lossy(&o.stdout).into_owned());
    }
    drop(hog_proc.stdin.take());
    hog_proc.wait().unwrap();
    assert_eq!(counts.trim(), "8 12", "uid 1000: connections held, refused");
    for r in replies {
        let v: Value = serde_json::from_str(&r).unwrap_or(json!({ "text": r }));
        assert_eq!(v["is_error"], false, "{v}");
    }
}

/// One call through the mount's MCP socket as uid 1000 (after the daemon's greeting):
/// its reply.
fn agent_socket_call(m: &Mount, tool: &str, args: Value) -> Value {
    let socket = m.sql("SELECT value FROM meta WHERE key = 'mcp_socket'");
    let call = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(60); s.connect(sys.argv[1]); f = s.makefile()
f.readline()
s.sendall(sys.argv[2].encode() + b"\n")
print(f.readline(), end="")
"#;
    let req = json!({ "tool": tool, "args": args, "writer": null, "client": "raw",
                      "client_version": "0", "read_only": false });
    let o = output_within(
        "an MCP call as uid 1000",
        Command::new("setpriv")
            .args(["--reuid", "1000", "--regid", "1000", "--clear-groups"])
            .args(["/usr/bin/python3", "-c", call, &socket, &req.to_string()]),
        Duration::from_secs(120),
    );
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

#[test]
fn old_versions_keep_the_owner_of_the_file_that_carried_them() {
    // The agent owns the mount's root (it may replace and delete names there); root's
    // files in it are 0600.
    let m = Mount::with_args(&["--owner", "1000:1000"]);
    m.sh_ok(
        "echo secret > s.txt && chmod 600 s.txt && echo secret two > s.txt \
         && echo doomed > d.txt && chmod 600 d.txt",
    );
    // A file of the agent's renamed over root's continues its lineage (history follows
    // the path), and so does a file made again at a deleted file's path.
    let o = as_agent(
        &m,
        "echo mine > m.txt && mv -f m.txt s.txt && rm -f d.txt && echo again > d.txt \
         && cat s.txt d.txt",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "mine\nagain\n");
    assert_eq!(m.sh_ok("ls .history/s.txt/ | wc -l").trim(), "3");
    for old in [
        ".history/s.txt/000001",
        ".history/s.txt/000002",
        ".history/d.txt/000001",
    ] {
        let o = as_agent(&m, &format!("cat {old}"));
        assert!(
            !o.status.success(),
            "the agent read root's {old}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
            "{o:?}"
        );
    }
    // Its own versions it reads.
    let o = as_agent(&m, "cat .history/s.txt/000003 .history/d.txt/000002");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "mine\nagain\n", "{o:?}");
    // Root reads every version.
    assert_eq!(m.sh_ok("cat .history/s.txt/000001"), "secret\n");
    if on_postgres() {
        // A PostgreSQL mount has no MCP socket (`scratchfs mcp` is a daemon of its own
        // there, docs/mcp.md): the calls below are the SQLite pass's.
        return;
    }
    // The same answer over MCP: read_version, diff and restore of root's version.
    for (tool, args) in [
        ("read_version", json!({ "path": "s.txt", "version": 1 })),
        ("diff", json!({ "path": "s.txt", "from": 2, "to": 3 })),
        ("restore", json!({ "path": "s.txt", "version": 2 })),
        ("read_version", json!({ "path": "d.txt", "version": 1 })),
    ] {
        let r = agent_socket_call(&m, tool, args.clone());
        assert_eq!(r["is_error"], true, "{tool} {args}: {r}");
        assert!(
            r["text"].as_str().unwrap().contains("permission denied"),
            "{tool}: {r}"
        );
    }
    let r = agent_socket_call(&m, "read_version", json!({ "path": "s.txt", "version": 3 }));
    assert_eq!(r["is_error"], false, "{r}");
    assert_eq!(
        read(m.path("s.txt")),
        "mine\n",
        "the refused restore changed s.txt"
    );
    // The refused restore is a refusal on record, as the gate's are (its writer: the
    // agent's, anonymous without rules).
    assert_eq!(
        m.sql(
            "SELECT COUNT(*) FROM events e JOIN processes p ON p.id = e.process \
             WHERE e.op = 'rejected' AND e.reason LIKE 'restore: s.txt@2%' AND p.uid = 1000"
        ),
        "1",
        "the refused restore is not on record"
    );
}

/// MANIFEST and MCP `list` name only what the reader could find with `ls` (issue 31 item
/// 4): the agent sees no name, size or writer of a file in root's 0700 directory, nor a
/// refusal or deleted content under it, only how many files it cannot list; MANIFEST's
/// size is that of what it reads. Root sees everything.
#[test]
fn names_in_directories_the_reader_cannot_list_stay_out_of_its_manifest() {
    let dir = public_dir();
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{ "paths": [ { "path": "private/capped-*", "max_bytes": 4 },
                        { "path": "**", "writers": ["*"] } ] }"#,
    )
    .unwrap();
    let m = Mount::with_args(&["--rules", rules.to_str().unwrap(), "--owner", "1000:1000"]);
    m.sh_ok(
        "mkdir -m 700 private && mkdir -m 755 private/deeper open \
         && echo plans > private/acquisition-of-acme-corp.txt \
         && echo deeper > private/deeper/acme-board-minutes.txt \
         && echo old > private/acme-old-plan.txt && rm private/acme-old-plan.txt \
         && echo public > open/visible.txt \
         && { echo too long > private/capped-acme-terms.txt; true; }",
    );
    let o = as_agent(
        &m,
        "cat MANIFEST; echo; stat -c %s MANIFEST; cat MANIFEST | wc -c",
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{o:?}");
    assert!(
        !out.contains("acme"),
        "the agent's MANIFEST names root's private files:\n{out}"
    );
    assert!(out.contains("open/visible.txt"), "{out}");
    assert!(
        out.contains("; 2 in directories you cannot list"),
        "the hidden files are not counted:\n{out}"
    );
    let sizes: Vec<&str> = out.lines().rev().take(2).collect();
    assert_eq!(
        sizes[0].trim(),
        sizes[1].trim(),
        "stat size != bytes read:\n{out}"
    );
    // Root's MANIFEST names them, and the refusal and the deletion under private/.
    let root_view = m.sh_ok("cat MANIFEST");
    for name in [
        "private/acquisition-of-acme-corp.txt",
        "private/capped-acme-terms.txt",
        "private/acme-old-plan.txt",
    ] {
        assert!(root_view.contains(name), "root misses {name}:\n{root_view}");
    }
    assert!(!root_view.contains("cannot list"), "{root_view}");
    if on_postgres() {
        // No MCP socket on a PostgreSQL mount (docs/mcp.md).
        return;
    }
    // MCP `read` of MANIFEST: the agent's text, and its size (not root's: its length
    // would tell how long the hidden names are, and when they change).
    let r = agent_socket_call(&m, "read", json!({ "path": "MANIFEST" }));
    assert_eq!(r["is_error"], false, "{r}");
    let agent_len = sizes[1].trim().parse::<u64>().unwrap();
    assert_eq!(
        r["structured"]["total_bytes"].as_u64(),
        Some(agent_len),
        "MCP read of MANIFEST names another size than the agent's text: {r}"
    );
    let r = agent_socket_call(&m, "list", json!({}));
    assert_eq!(r["is_error"], false, "{r}");
    let text = r.to_string();
    assert!(
        !text.contains("acme"),
        "the agent's list names root's private files: {r}"
    );
    assert_eq!(r["structured"]["unlisted"], 2, "{r}");
    assert!(text.contains("open/visible.txt"), "{r}");
}

/// `scratchfs mcp --listen` as root, acting as the agent's uid (`--as`), on the agent's
/// mount: the agent reaches the port but not the token. Without it, with a wrong one, or
/// with another scheme, every request is 401; the token file is root's, mode 0600, in a
/// directory the agent may not list; the server's memory and environment are closed to
/// it (the server drops to the agent's uid on a mounted SQLite database, and is then not
/// dumpable). It failed before the server took its token while still root: the token
/// file was made after the drop, in /tmp/scratchfs-1000, the agent's own.
#[test]
fn the_http_server_keeps_its_token_from_the_agent() {
    let m = Mount::with_args(&["--allow-other"]);
    let (mut server, url, token) = http_server(&m.db, &["--as", "1000:1000"]);
    let attack = r#"
import json, os, sys, urllib.request, urllib.error
url, token_file, pid = sys.argv[1], sys.argv[2], sys.argv[3]
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "agent", "version": "0"}}}).encode()
def post(auth):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if auth is not None:
        h["Authorization"] = auth
    try:
        return urllib.request.urlopen(urllib.request.Request(url, data=body, headers=h),
                                      timeout=30).status
    except urllib.error.HTTPError as e:
        return e.code
def attempt(f):
    try:
        f()
        return "done"
    except OSError as e:
        return type(e).__name__
out = {
    "none": post(None),
    "wrong": post("Bearer " + "0" * 64),
    "empty": post("Bearer "),
    "basic": post("Basic YWdlbnQ6YWdlbnQ="),
    "read token": attempt(lambda: open(token_file).read()),
    "list its directory": attempt(lambda: os.listdir(os.path.dirname(token_file))),
    "add to its directory": attempt(lambda: open(os.path.dirname(token_file) + "/mine", "w")),
    "server memory": attempt(lambda: open("/proc/%s/mem" % pid, "rb").read(1)),
    "server environment": attempt(lambda: open("/proc/%s/environ" % pid, "rb").read()),
}
if len(sys.argv) > 4:
    out["right"] = post("Bearer " + open(token_file).read().strip())
print(json.dumps(out))
"#;
    let pid = server.id().to_string();
    let run = |who: &[&str], extra: &[&str]| -> Value {
        let o = output_within(
            "requests to the HTTP server",
            Command::new("setpriv")
                .args(who)
                .args(["/usr/bin/python3", "-c", attack, &url, &token, &pid])
                .args(extra),
            Duration::from_secs(120),
        );
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"))
    };
    let agent = run(
        &["--reuid", "1000", "--regid", "1000", "--clear-groups"],
        &[],
    );
    // The same requests from root, and one with the token: the refusals are the token's.
    let root = run(
        &["--reuid", "0", "--regid", "0", "--clear-groups"],
        &["with the token"],
    );
    let meta = std::fs::metadata(&token);
    let _ = server.kill();
    let _ = server.wait();
    use std::os::unix::fs::MetadataExt;
    let meta = meta.unwrap();
    assert_eq!(
        (meta.uid(), meta.mode() & 0o777),
        (0, 0o600),
        "the token file {token}"
    );
    assert_eq!(
        agent,
        json!({
            "none": 401, "wrong": 401, "empty": 401, "basic": 401,
            "read token": "PermissionError",
            "list its directory": "PermissionError",
            "add to its directory": "PermissionError",
            "server memory": "PermissionError",
            "server environment": "PermissionError",
        }),
        "as the agent"
    );
    assert_eq!(root["right"], 200, "{root}");
    assert_eq!(root["none"], 401, "{root}");
}

/// A deleted file keeps the directories that hid it: root's 0644 file in root's 0700
/// directory, deleted, then the directory renamed or removed, is not readable by the
/// agent through `.archive` or `.history` (found by the attack helper: once the
/// directory was gone, the file's own 0644 let the agent read it). What the agent could
/// reach stays readable: its own deleted files, and root's 0644 file in an open
/// directory.
#[test]
fn a_deleted_file_keeps_the_directories_that_hid_it() {
    let m = Mount::with_args(&["--owner", "1000:1000"]);
    m.sh_ok(
        "mkdir -m 700 secret gone && mkdir -m 755 pub \
         && echo hidden > secret/readable.md && chmod 644 secret/readable.md \
         && rm secret/readable.md && echo keep > secret/keep.md && mv secret secret2 \
         && echo gone > gone/g.md && chmod 644 gone/g.md && rm -r gone \
         && echo public > pub/p.md && rm pub/p.md",
    );
    let o = as_agent(&m, "mkdir mine && echo own > mine/a.md && rm -r mine");
    assert!(o.status.success(), "{o:?}");
    for hidden in [
        ".archive/secret/readable.md",
        ".history/secret/readable.md/000001",
        ".archive/gone/g.md",
        ".history/gone/g.md/000001",
    ] {
        let o = as_agent(&m, &format!("cat {hidden}"));
        assert!(
            !o.status.success(),
            "the agent read {hidden}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    let o = as_agent(&m, "cat .archive/mine/a.md .archive/pub/p.md");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "own\npublic\n", "{o:?}");
    // Root reads them all.
    assert_eq!(
        m.sh_ok("cat .archive/secret/readable.md .archive/gone/g.md"),
        "hidden\ngone\n"
    );
}
