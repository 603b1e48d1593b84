//! `scratchfs web` (issue 35): the review page's server on a real mount, on SQLite and
//! PostgreSQL. Its data endpoints need the token (401 without it, also for the agent's
//! uid 1000 on the same host), answer what the commands' `--json` outputs print, and the
//! page, driven in headless Chromium (tests/web_browser.py, Selenium and Debian's
//! chromium-driver), shows a commit through the mount without a reload, a diff, a refusal
//! with its reason, a number's source, and hostile names as text. Screenshots go to
//! `target/web-screenshots/`.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `scratchfs web`, stopped (SIGTERM) when dropped.
struct Web {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    base: String,
    /// The token of its link.
    token: String,
}

impl Web {
    /// Starts `scratchfs web ARGS` and reads the link it prints.
    fn start(args: &[&str]) -> Web {
        let mut child = Command::new(BIN)
            .arg("web")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run scratchfs web");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let mut seen = String::new();
        let link = loop {
            line.clear();
            if err.read_line(&mut line).unwrap() == 0 {
                let st = child.wait().unwrap();
                panic!("scratchfs web ended ({st}) without a link: {seen}");
            }
            seen.push_str(&line);
            if let Some(at) = line.find("http://") {
                break line[at..].trim().to_string();
            }
        };
        // The rest of stderr is drained, so that the server never blocks on it.
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = err.read_to_end(&mut sink);
        });
        let (base, token) = link.split_once("/#token=").expect("a link with #token=");
        Web {
            child,
            base: base.to_string(),
            token: token.to_string(),
        }
    }

    fn port(&self) -> u16 {
        self.base.rsplit(':').next().unwrap().parse().unwrap()
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request to 127.0.0.1:`port`: (status, head, body).
fn request(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).unwrap_or("0").parse().unwrap();
    (status, head.to_string(), body.to_string())
}

fn json_of(port: u16, path: &str, token: &str) -> serde_json::Value {
    let (status, _, body) = request(port, "GET", path, Some(token), "");
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// The rules of the page's tests: `get_order` alone writes state.json.
const RULES: &str = r#"{ "writers": { "agent": { "env": "agent", "model": true },
                        "get_order": { "env": "get_order" } },
   "paths": [ { "path": "state.json", "writers": ["get_order"] },
              { "path": "small.txt", "writers": ["*"], "max_bytes": 8 },
              { "path": "**", "writers": ["*"] } ] }"#;

fn mount_with_rules() -> Mount {
    // One file per call: the tests of this binary mount at once.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let rules = std::env::temp_dir().join(format!(
        "scratchfs-web-rules-{}-{n}.json",
        std::process::id()
    ));
    std::fs::write(&rules, RULES).unwrap();
    let m = Mount::with_args(&["--rules", rules.to_str().unwrap()]);
    let _ = std::fs::remove_file(&rules);
    m
}

fn as_writer(m: &Mount, writer: &str, script: &str) -> std::process::Output {
    Command::new("bash")
        .args(["-c", script])
        .current_dir(&m.mnt)
        .env("SCRATCHFS_WRITER", writer)
        .env("SCRATCHFS_STEP", "3")
        .output()
        .unwrap()
}

#[test]
fn the_api_needs_the_token_and_answers_what_the_commands_print() {
    let m = mount_with_rules();
    let ok = as_writer(
        &m,
        "get_order",
        r#"echo '{"order_total_cents": 36000}' > state.json && echo one > notes.md && echo two >> notes.md"#,
    );
    assert!(ok.status.success(), "{ok:?}");
    let refused = as_writer(
        &m,
        "agent",
        r#"echo '{"order_total_cents": 1}' > state.json"#,
    );
    assert!(
        !refused.status.success(),
        "the agent may not write state.json"
    );
    let db = m.db.to_str().unwrap().to_string();
    let web = Web::start(&["--db", &db]);
    let port = web.port();

    // Without the token, with a wrong one, and as uid 1000 (the agent): 401, no data.
    let (status, head, body) = request(port, "GET", "/api/timeline", None, "");
    assert_eq!(status, 401, "{body}");
    assert!(
        head.contains("www-authenticate: Bearer") || head.contains("WWW-Authenticate: Bearer"),
        "{head}"
    );
    assert!(!body.contains("notes.md"), "{body}");
    let wrong = format!("{}0", &web.token[1..]);
    assert_eq!(request(port, "GET", "/api/info", Some(&wrong), "").0, 401);
    let agent = Command::new("setpriv")
        .args(["--reuid=1000", "--regid=1000", "--clear-groups", "--"])
        .args([
            "/usr/bin/python3",
            &agent_script(),
            "probe",
            &port.to_string(),
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&agent.stdout).into_owned()
        + &String::from_utf8_lossy(&agent.stderr);
    assert!(agent.status.success(), "the agent's probe: {said}");
    assert!(said.contains("probe: 401 401 401"), "{said}");
    // uid 1000 holding 1,100 idle connections (more than the server's 1,024 in all)
    // keeps only 64 of them: the token holder still gets in.
    let mut flood = Command::new("setpriv")
        .args(["--reuid=1000", "--regid=1000", "--clear-groups", "--"])
        .args([
            "/usr/bin/python3",
            &agent_script(),
            "flood",
            &port.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut flood_out = BufReader::new(flood.stdout.take().unwrap());
    let mut said = String::new();
    while !said.starts_with("flood:") {
        said.clear();
        assert_ne!(
            flood_out.read_line(&mut said).unwrap(),
            0,
            "the flood ended early"
        );
    }
    let held: usize = said.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(held <= 64, "{said}");
    // Closed at once, not by the idle timeout (60 s), which would close them anyway.
    let secs: f64 = said.split_whitespace().nth(6).unwrap().parse().unwrap();
    assert!(
        secs < 30.0,
        "the flood was cut by the idle timeout, not the per-source bound: {said}"
    );
    let (status, _, body) = request(port, "GET", "/api/info", Some(&web.token), "");
    assert_eq!(status, 200, "the token holder during the flood: {body}");
    drop(flood.stdin.take());
    assert!(flood.wait().unwrap().success());
    // The token is in no process's command line, and its file is the starter's alone.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", web.child.id())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(&web.token));
    let token_files: Vec<_> = std::fs::read_dir("/run/scratchfs")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy() == format!("web-{}.token", web.child.id()))
        .collect();
    assert_eq!(token_files.len(), 1, "the token file");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = token_files[0].metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    // The page's shell has no data and is served without the token, with a strict CSP.
    let (status, head, page) = request(port, "GET", "/", None, "");
    assert_eq!(status, 200);
    assert!(page.contains("<script src=\"/app.js\""), "{page}");
    assert!(
        head.to_lowercase()
            .contains("content-security-policy: default-src 'none'"),
        "{head}"
    );

    // The timeline is `scratchfs log --json`, newest first.
    let t = json_of(port, "/api/timeline?limit=500", &web.token);
    let (_, log, _) = cli(&m, &["log", "--json"]);
    let mut lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines.reverse();
    assert_eq!(
        t["entries"],
        serde_json::Value::from(lines),
        "timeline vs log --json"
    );
    assert_eq!(t["next"], serde_json::Value::Null);
    // Paging: two rows at a time gives the same rows.
    let mut paged = Vec::new();
    let mut before = String::new();
    loop {
        let p = json_of(
            port,
            &format!("/api/timeline?limit=2&before={before}"),
            &web.token,
        );
        paged.extend(p["entries"].as_array().unwrap().iter().cloned());
        match p["next"].as_str() {
            Some(n) => before = n.to_string(),
            None => break,
        }
    }
    assert_eq!(serde_json::Value::from(paged), t["entries"], "pages of 2");
    // Filters: the refusal, with its reason; a writer's rows only.
    let r = json_of(port, "/api/timeline?rejected=1", &web.token);
    let rows = r["entries"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{r}");
    assert_eq!(rows[0]["writer"], "agent");
    assert!(rows[0]["reason"].as_str().unwrap().contains("agent"), "{r}");
    let w = json_of(port, "/api/timeline?writer=get_order", &web.token);
    assert!(
        w["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["writer"] == "get_order")
            && !w["entries"].as_array().unwrap().is_empty(),
        "{w}"
    );
    // A diff is `scratchfs diff --json`; why is `why --json`; ground is `ground --json`.
    let d = json_of(port, "/api/diff?path=notes.md&a=1&b=2", &web.token);
    let (_, cli_diff, _) = cli(&m, &["diff", "--json", "notes.md@1", "notes.md@2"]);
    assert_eq!(
        d,
        serde_json::from_str::<serde_json::Value>(&cli_diff).unwrap()
    );
    let w = json_of(
        port,
        "/api/why?target=state.json:order_total_cents",
        &web.token,
    );
    let (_, cli_why, _) = cli(&m, &["why", "--json", "state.json:order_total_cents"]);
    assert_eq!(
        w,
        serde_json::from_str::<serde_json::Value>(&cli_why).unwrap()
    );
    let (status, _, g) = request(
        port,
        "POST",
        "/api/ground",
        Some(&web.token),
        "It is 36000.",
    );
    assert_eq!(status, 200, "{g}");
    let g: serde_json::Value = serde_json::from_str(&g).unwrap();
    assert_eq!(g["tokens"][0]["status"], "sourced", "{g}");
    assert_eq!(
        g["tokens"][0]["sources"][0]["source"]["writer"],
        "get_order"
    );
    // A file's versions are `history --json`, paged newest first.
    let h = json_of(port, "/api/history?path=notes.md", &web.token);
    let (_, hist, _) = cli(&m, &["history", "--json", "notes.md"]);
    let lines: Vec<serde_json::Value> = hist
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        h["versions"],
        serde_json::Value::from(lines),
        "history vs history --json"
    );
    assert_eq!(h["next"], serde_json::Value::Null);
    let p1 = json_of(port, "/api/history?path=notes.md&limit=1", &web.token);
    assert_eq!(p1["versions"][0]["version"], 2, "{p1}");
    assert_eq!(p1["next"], 2, "{p1}");
    let p2 = json_of(
        port,
        "/api/history?path=notes.md&limit=1&before=2",
        &web.token,
    );
    assert_eq!(p2["versions"][0]["version"], 1, "{p2}");
    assert_eq!(p2["next"], serde_json::Value::Null, "{p2}");
    let h = json_of(port, "/api/history?path=state.json", &web.token);
    assert_eq!(h["keys"][0]["key"], "order_total_cents", "{h}");
    assert_eq!(h["keys"][0]["writer"], "get_order", "{h}");
    // Bad input: a clear error, never a crash.
    let (status, _, body) = request(port, "GET", "/api/timeline?before=x", Some(&web.token), "");
    assert_eq!(status, 400, "{body}");
    let (status, _, _) = request(
        port,
        "GET",
        "/api/history?path=nope.md",
        Some(&web.token),
        "",
    );
    assert_eq!(status, 404);
    // Live: the event stream says when something was committed.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET /api/live HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
        web.token
    )
    .unwrap();
    let mut live = BufReader::new(s);
    let mut first = String::new();
    while !first.starts_with("data: ") {
        first.clear();
        live.read_line(&mut first).unwrap();
    }
    as_writer(&m, "agent", "echo three >> notes.md");
    let mut next = String::new();
    while !next.starts_with("data: ") {
        next.clear();
        live.read_line(&mut next).unwrap();
    }
    assert_ne!(first, next, "a change after the append");

    // Read-only unless started with --allow-actions.
    let (status, _, body) = request(
        port,
        "POST",
        "/api/restore",
        Some(&web.token),
        "path=notes.md&n=1",
    );
    assert_eq!(status, 403, "{body}");
    let acting = Web::start(&["--db", &db, "--allow-actions"]);
    let p = acting.port();
    let info = json_of(p, "/api/info", &acting.token);
    let csrf = info["csrf"]
        .as_str()
        .expect("a CSRF token with actions")
        .to_string();
    // Without the CSRF header: refused; with it: restored, through the gate, recorded.
    let (status, _, body) = request(
        p,
        "POST",
        "/api/restore",
        Some(&acting.token),
        "path=notes.md&n=1",
    );
    assert_eq!(status, 403, "{body}");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
    let form = "path=notes.md&n=1";
    write!(
        s,
        "POST /api/restore HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nX-CSRF-Token: {csrf}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
        acting.token,
        form.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(read(m.path("notes.md")), "one\n");
    let (_, log, _) = cli(&m, &["log", "notes.md"]);
    assert!(
        log.lines()
            .any(|l| l.contains("restore") && l.contains("scratchfs")),
        "the restore is on record, by the web server's process: {log}"
    );
    drop(acting);
    // A non-loopback address without TLS is refused.
    let o = Command::new(BIN)
        .args(["web", "--db", &db, "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a loopback address"),
        "{o:?}"
    );
}

#[test]
fn the_plots_replay_the_run_and_a_refusal_shows_the_content_it_kept() {
    let m = mount_with_rules();
    // Sizes chosen so that each kind of change moves a known number of bytes: an
    // overwrite, an unlink (to the archive), a rename, a re-create on an unlinked
    // lineage, a rename over a live file.
    let ok = as_writer(
        &m,
        "get_order",
        "printf 0123456789 > a.txt && printf 01234567890123456789 > a.txt \
         && printf 12345 > b.txt && rm b.txt && printf 1234567 > c.txt && mv c.txt d.txt \
         && printf 123 > e.txt && rm e.txt && printf 1234 > e.txt \
         && printf 123456789 > g.txt && printf 12 > f.txt && mv f.txt g.txt",
    );
    assert!(ok.status.success(), "{ok:?}");
    // Past max_bytes: refused at close, its content kept.
    let refused = as_writer(&m, "agent", "printf 'too long for it' > small.txt");
    assert!(!refused.status.success(), "small.txt holds at most 8 bytes");
    let db = m.db.to_str().unwrap().to_string();
    let web = Web::start(&["--db", &db]);
    let port = web.port();

    let a = json_of(port, "/api/activity?spans=50", &web.token);
    let (code, cli_a, err) = cli(&m, &["log", "--activity", "--spans", "50", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        a,
        serde_json::from_str::<serde_json::Value>(&cli_a).unwrap()
    );
    let n = a["spans"].as_u64().unwrap() as usize;
    assert!((1..=50).contains(&n), "{a}");
    let last = |k: &str| a["bytes"][k][n - 1].as_i64().unwrap();
    // What the mount holds now, and what `log --json` says was ever written.
    let live: u64 = [
        "a.txt",
        "d.txt",
        "e.txt",
        "g.txt",
        "plan.md",
        "findings.md",
        "state.json",
    ]
    .iter()
    .map(|f| std::fs::metadata(m.path(f)).unwrap().len())
    .sum();
    assert_eq!(last("live"), live as i64, "live bytes at the end: {a}");
    assert_eq!(last("archive"), 5, "b.txt, unlinked: {a}");
    let (_, log, _) = cli(&m, &["log", "--json"]);
    let versions: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["kind"] == "version")
        .collect();
    let total: i64 = versions.iter().map(|v| v["size"].as_i64().unwrap()).sum();
    assert_eq!(last("history"), total - live as i64 - 5, "{a}");
    let by = |w: &str| versions.iter().filter(|v| v["writer"] == w).count() as u64;
    for w in a["writers"].as_array().unwrap() {
        let counts: u64 = w["per_span"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .sum();
        assert_eq!(counts, w["versions"].as_u64().unwrap(), "{w}");
        assert_eq!(counts, by(w["writer"].as_str().unwrap()), "{w}");
    }
    assert_eq!(a["writers"][0]["writer"], "get_order", "{a}");
    let busiest = &a["files"][0];
    assert_eq!(busiest["versions"], 2, "{a}");
    assert!(busiest["path"].as_str().unwrap().ends_with(".txt"), "{a}");

    // The refusal's content, as `show --refused` gives it.
    let r = json_of(port, "/api/timeline?rejected=1", &web.token);
    let refusal = &r["entries"][0];
    assert_eq!(refusal["path"], "small.txt", "{r}");
    let event = refusal["event"].as_i64().expect("a refusal's event id");
    let c = json_of(port, &format!("/api/refused?event={event}"), &web.token);
    assert_eq!(c["text"], "too long for it", "{c}");
    assert_eq!(c["size"], 15, "{c}");
    let (code, cli_c, err) = cli(&m, &["show", "--refused", &event.to_string(), "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        c,
        serde_json::from_str::<serde_json::Value>(&cli_c).unwrap()
    );
    let (code, raw, _) = cli(&m, &["show", "--refused", &event.to_string()]);
    assert_eq!((code, raw.as_str()), (0, "too long for it"));
    // The agent (uid 1000) reads no refusal's content: the database is not its to read.
    if !on_postgres() {
        let o = Command::new("setpriv")
            .args(["--reuid=1000", "--regid=1000", "--clear-groups", "--", BIN])
            .args(["show", "--refused", &event.to_string(), "--db", &db])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("too long"),
            "{o:?}"
        );
    }
    // An event that is not a refusal: 404, exit 1.
    let unlink = json_of(port, "/api/timeline?op=unlink", &web.token);
    let other = unlink["entries"][0]["event"].as_i64().unwrap();
    let (status, _, body) = request(
        port,
        "GET",
        &format!("/api/refused?event={other}"),
        Some(&web.token),
        "",
    );
    assert_eq!(status, 404, "{body}");
    assert_eq!(cli(&m, &["show", "--refused", &other.to_string()]).0, 1);
}

/// tests/web_agent.py, which the tests run as uid 1000 (the agent): its probe and its
/// flood of connections.
fn agent_script() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/web_agent.py").to_string()
}

/// Python in the repository's virtual environment (scripts/deps), with Selenium.
fn venv_python() -> std::path::PathBuf {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python3");
    assert!(
        p.exists(),
        "{} is missing: run scripts/deps (as root) for Selenium and Chromium",
        p.display()
    );
    p
}

#[test]
fn the_page_in_chromium_shows_commits_live_diffs_refusals_and_sources() {
    for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(
            std::path::Path::new(tool).exists(),
            "{tool} is missing: run scripts/deps (as root; Debian's chromium and chromium-driver)"
        );
    }
    let m = mount_with_rules();
    let ok = as_writer(
        &m,
        "get_order",
        r#"echo '{"order_id": "O-9", "order_total_cents": 36000}' > state.json && echo one > notes.md && echo two >> notes.md"#,
    );
    assert!(ok.status.success(), "{ok:?}");
    assert!(
        !as_writer(
            &m,
            "agent",
            r#"echo '{"order_total_cents": 1}' > state.json"#
        )
        .status
        .success()
    );
    // A refusal that keeps content (small.txt holds at most 8 bytes), and a file whose
    // writer read another first (report.md <- state.json).
    assert!(
        !as_writer(&m, "agent", "printf 'too long for it' > small.txt")
            .status
            .success()
    );
    let read_first = as_writer(
        &m,
        "agent",
        "exec 3<state.json && echo 'total 36000' > report.md",
    );
    assert!(read_first.status.success(), "{read_first:?}");
    // Hostile names: markup, quotes, a newline, a right-to-left mark, bytes not UTF-8
    // (that one twice, so that the page can restore its first version).
    let hostile = Command::new("python3")
        .args([
            "-c",
            "import os\nfor n in [b'<img src=x onerror=alert(1)>.md', b'<script>alert(2)<\\script>.md', b'q\"uo\\'te.md', b'new\\nline.md', '\\u202egnp.md'.encode(), b'bad\\xff.md']:\n    open(n, 'wb').write(b'x\\n')\nopen(b'bad\\xff.md', 'wb').write(b'y\\n')",
        ])
        .current_dir(&m.mnt)
        .output()
        .unwrap();
    assert!(hostile.status.success(), "{hostile:?}");
    let db = m.db.to_str().unwrap().to_string();
    // A file adopted from a fork (an SQLite file on either backend), where get_order
    // set its key: the page's why follows it there.
    let fork = m.dir.path().join("fork.db");
    let fork_arg = fork.to_str().unwrap();
    let (code, _, err) = cli(&m, &["fork", "--db", &db, "--to", fork_arg]);
    assert_eq!(code, 0, "{err}");
    let fork_mnt = m.dir.path().join("m-fork");
    std::fs::create_dir_all(&fork_mnt).unwrap();
    let o = Command::new(BIN)
        .args(["mount", "--background", "--db", fork_arg])
        .arg(&fork_mnt)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let wrote = Command::new("bash")
        .args(["-c", r#"echo '{"price_cents": 4200}' > adopted.json"#])
        .current_dir(&fork_mnt)
        .env("SCRATCHFS_WRITER", "get_order")
        .output()
        .unwrap();
    let o = Command::new(BIN)
        .arg("unmount")
        .arg(&fork_mnt)
        .output()
        .unwrap();
    assert!(
        wrote.status.success() && o.status.success(),
        "{wrote:?} {o:?}"
    );
    let (code, _, err) = cli(&m, &["adopt", "--from", fork_arg, "adopted.json"]);
    assert_eq!(code, 0, "{err}");
    let web = Web::start(&["--db", &db, "--allow-actions"]);
    let shots = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/web-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let o = common::output_within(
        "the browser test",
        Command::new(venv_python())
            .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/web_browser.py"))
            .arg(format!("{}/#token={}", web.base, web.token))
            .arg(&m.mnt)
            .arg(&shots),
        Duration::from_secs(600),
    );
    let said =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tests/web_browser.py failed:\n{said}");
    assert!(said.contains("browser: all checks passed"), "{said}");
    // The page's restore made a version, through the gate, on record.
    let (_, log, _) = cli(&m, &["log", "notes.md"]);
    assert!(log.contains("restore"), "{log}");
    for shot in [
        "timeline.png",
        "diff.png",
        "refusals.png",
        "ground.png",
        "phone.png",
        "restore.png",
        "checkpoints.png",
        "activity.png",
        "why.png",
    ] {
        let len = std::fs::metadata(shots.join(shot))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(len > 1000, "screenshot {shot}: {len} bytes");
    }
}
