//! Issue 33 items 8 and 9: the MCP client configurations README.md gives work as written, once
//! `scratchfs` is on PATH (what scripts/install does; here PATH names the built binary's
//! directory): the stdio `mcpServers` entry through fastmcp's configuration client and
//! the MCP Inspector's `--config`, Claude Code's `claude mcp add` command's server
//! command, and the HTTP entry with its token against the server line README gives, run
//! as the agent's user. The only changes are the placeholders a reader is told to change:
//! the directory `/home/me/agent` and the token.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

const README: &str = include_str!("../README.md");

/// The fenced blocks of README.md whose info string is `lang`, in order.
fn blocks(lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside: Option<String> = None;
    for line in README.lines() {
        match &mut inside {
            None if line.trim_start() == format!("```{lang}") => inside = Some(String::new()),
            Some(b) if line.trim_start() == "```" => {
                out.push(std::mem::take(b));
                inside = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {}
        }
    }
    out
}

/// PATH with the built binary's directory first (as after scripts/install).
fn path_with_scratchfs() -> String {
    let dir = Path::new(BIN).parent().unwrap();
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// fastmcp's configuration client on `config` (an `mcpServers` object): lists the tools
/// and appends a line to notes.md; prints {"tools": N, "text": ...}.
fn fastmcp_config_client(config: &str) -> Value {
    let script = r#"
import asyncio, json, sys
from fastmcp import Client
async def main():
    async with Client(json.loads(sys.argv[1])) as c:
        tools = await c.list_tools()
        r = await c.call_tool("append", {"path": "notes.md", "content": "- from the README's config\n"}, raise_on_error=False)
        print(json.dumps({"tools": len(tools), "is_error": r.is_error,
                          "text": "".join(getattr(b, "text", "") for b in r.content)}))
asyncio.run(main())
"#;
    let o = Command::new(MCP_PYTHON)
        .arg("-c")
        .arg(script)
        .arg(config)
        .env("PATH", path_with_scratchfs())
        .stdin(Stdio::null())
        .output()
        .expect("run the virtual environment's python3 (scripts/deps)");
    assert!(
        o.status.success(),
        "fastmcp's config client failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn the_readmes_mcp_configurations_work_as_written() {
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let here = dir.path().to_str().unwrap();
    let mine = |text: &str| text.replace("/home/me/agent", here);
    let configs: Vec<String> = blocks("json")
        .into_iter()
        .filter(|b| b.contains("\"mcpServers\""))
        .collect();
    let stdio = configs
        .iter()
        .find(|c| c.contains("\"command\""))
        .expect("README has a stdio mcpServers entry");
    let http = configs
        .iter()
        .find(|c| c.contains("\"url\""))
        .expect("README has an HTTP mcpServers entry");

    // The stdio entry, through fastmcp and through the Inspector.
    let r = fastmcp_config_client(&mine(stdio));
    assert_eq!(r["tools"], 21, "{r}");
    assert_eq!(r["is_error"], false, "{r}");
    let config_file = dir.path().join("mcp.json");
    std::fs::write(&config_file, mine(stdio)).unwrap();
    let inspector = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/.npm-tools/node_modules/.bin/mcp-inspector"
    );
    let o = Command::new(inspector)
        .args(["--cli", "--config"])
        .arg(&config_file)
        .args(["--server", "scratchfs", "--method", "tools/list"])
        .env("PATH", path_with_scratchfs())
        .stdin(Stdio::null())
        .output()
        .expect("run the MCP Inspector (scripts/deps installs it)");
    assert!(
        o.status.success(),
        "the Inspector failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let listed: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        listed["tools"].as_array().map(Vec::len),
        Some(21),
        "{listed}"
    );

    // Claude Code's line: its server command (after `--`) serves a client.
    let add = README
        .lines()
        .find_map(|l| l.split("`claude mcp add ").nth(1))
        .expect("README has a claude mcp add line");
    let command = mine(add.split('`').next().unwrap());
    let server: Vec<&str> = command.split(" -- ").nth(1).unwrap().split(' ').collect();
    assert_eq!(server[0], "scratchfs");
    let mut target = vec!["stdio", BIN];
    target.extend_from_slice(&server[1..]);
    let r = mcp_session(
        "claude-code",
        &target,
        serde_json::json!([{ "tool": "read", "args": { "path": "notes.md" } }]),
    );
    assert_eq!(
        r["results"][0]["text"], "- from the README's config\n",
        "{r}"
    );

    // The HTTP entry, against the server line README gives, run as the agent's user.
    let line = blocks("sh")
        .into_iter()
        .find(|b| b.contains("--listen 127.0.0.1:8765"))
        .expect("README has the HTTP server's command line");
    // The agent's own directory: a new database of its own, and its token file.
    let agents = tempfile::tempdir().unwrap();
    std::fs::set_permissions(agents.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let theirs = |text: &str| text.replace("/home/me/agent", agents.path().to_str().unwrap());
    let token = "a-token-of-the-readers-own-0123456789";
    std::fs::write(agents.path().join("token"), format!("{token}\n")).unwrap();
    std::fs::set_permissions(
        agents.path().join("token"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let mut server = KillOnDrop(
        Command::new("setpriv")
            .args([
                "--reuid",
                "1000",
                "--regid",
                "1000",
                "--clear-groups",
                "bash",
                "-c",
            ])
            .arg(format!("exec {}", theirs(line.trim())))
            .env("PATH", path_with_scratchfs())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut first = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(server.0.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("http://127.0.0.1:8765/mcp"), "{first}");
    let r = fastmcp_config_client(&http.replace("THE-TOKEN-FILES-FIRST-LINE", token));
    let _ = server.0.kill();
    let _ = server.0.wait();
    assert_eq!(r["tools"], 21, "{r}");
    assert_eq!(r["is_error"], false, "{r}");
}

/// Issue 33 item 9: README's harness quick start (its one ```python block) runs as written
/// with `scratchfs` on PATH: it mounts, runs an agent step, reads the provenance with
/// `log --json` (asserting the step's version is there) and unmounts.
#[test]
fn the_readmes_python_quick_start_runs_as_written() {
    let script = blocks("python");
    assert_eq!(script.len(), 1, "README has one python block");
    let o = Command::new("python3")
        .arg("-c")
        .arg(&script[0])
        .env("PATH", path_with_scratchfs())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("findings.md v2: append by agent step 1"),
        "{out}"
    );
}
