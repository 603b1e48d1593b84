//! The mount's MCP socket (issue 12): while a database is mounted, its daemon owns the
//! filesystem core, so `scratchfs mcp` runs each tool call there, over a Unix socket the
//! daemon listens on. A commit made through MCP is then a commit of the same core as the
//! mount's: MANIFEST, outlines and content agree on both sides at once, and the kernel's
//! cached attributes and names are dropped for what a call changed.
//!
//! Protocol: one JSON object per line each way, on a connection kept for an MCP session.
//! A request is a [`Request`]; the reply is the tool's [`Outcome`]. The caller is the
//! process at the other end of the socket (`SO_PEERCRED`: pid, uid, gid), named as the
//! request's [`Remote`] says (writer, client, step: what the MCP server was told, as
//! trustworthy as the `SCRATCHFS_WRITER` tag), and the gate decides as for the mount.
//!
//! The socket is `$XDG_RUNTIME_DIR/scratchfs-<euid>/<blake3 of the database path>.sock`
//! (else under the temporary directory), mode 0600, or 0666 with `--allow-other`; its
//! path is the database's `meta.mcp_socket`. A peer whose uid the mount would not let in
//! (neither root, nor the mounting user, without `--allow-other`) is turned away.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::tools::{self, Outcome};
use crate::error::{Error, Result};
use crate::fs::{Ctx, Fs, Remote};

/// Longest request line accepted (9 MiB: a tool's string argument is at most 4 MiB,
/// [`tools::ARG_MAX`], which JSON escaping may double). A longer one ends the connection.
const REQUEST_MAX: u64 = 9 << 20;

/// Connections served at once (8): each may hold a request line; more wait to be accepted.
const CONNECTIONS_MAX: usize = 8;

/// One tool call sent to the daemon.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Request {
    /// The tool's name.
    pub tool: String,
    /// Its arguments (a JSON object).
    pub args: serde_json::Value,
    /// The writer the MCP server was started with (`--writer`).
    pub writer: Option<String>,
    /// The MCP client's name and version from its handshake.
    pub client: Option<String>,
    pub client_version: Option<String>,
    /// Only the reading tools (`--read-only`).
    pub read_only: bool,
}

/// The user's private runtime directory of scratchfs: `$XDG_RUNTIME_DIR/scratchfs-<euid>`
/// (else under the temporary directory), where daemons put their MCP sockets and a
/// PostgreSQL mount's log. Not created here ([`runtime_dir`] does).
fn runtime_base() -> PathBuf {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let euid = unsafe { libc::geteuid() };
    base.join(format!("scratchfs-{euid}"))
}

/// [`runtime_base`], created if missing (mode 0755) and checked to be a directory of this
/// user's, not a link: another user must not choose where a daemon listens or logs
/// (`EPERM` otherwise; the creation's own errno).
pub fn runtime_dir() -> Result<PathBuf> {
    let dir = runtime_base();
    let io = |e: std::io::Error| {
        Error::new(
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("directory {}: {e}", dir.display()),
        )
    };
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(io)?;
    use std::os::unix::fs::MetadataExt;
    if !meta.is_dir() || meta.uid() != unsafe { libc::geteuid() } {
        return Err(Error::new(
            libc::EPERM,
            format!("directory {}: not a directory of ours", dir.display()),
        ));
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).map_err(io)?;
    Ok(dir)
}

/// Where the daemon of database `db` (its canonical path) listens.
pub fn socket_path(db: &Path) -> PathBuf {
    let hash = blake3::hash(db.as_os_str().as_encoded_bytes()).to_hex();
    runtime_base().join(format!("{}.sock", &hash[..16]))
}

/// Runs a tool call for the caller `ctx` as `remote`: the one path both the in-process
/// server and the daemon take. Under writer rules, a `writer` must be one of theirs, whose
/// process matchers the caller satisfies ([`Fs::remote_caller`]).
pub fn run_call(fs: &Fs, ctx: Ctx, req: &Request) -> Outcome {
    let remote = Remote {
        transport: "mcp",
        writer: req.writer.clone(),
        client: req.client.clone(),
        client_version: req.client_version.clone(),
        step: tools::step_of(&req.args),
    };
    let caller = match fs.remote_caller(ctx, &remote) {
        Ok(c) => c,
        Err(e) => {
            // On record as the process it is, naming the writer it claimed.
            let unclaimed = Remote {
                writer: None,
                ..remote
            };
            if let Ok(c) = fs.remote_caller(ctx, &unclaimed) {
                let path = req.args.get("path").and_then(|p| p.as_str()).unwrap_or("");
                fs.record_remote_refusal(path, &c, &e);
            }
            return Outcome::error(e);
        }
    };
    fs.acting_as(caller.clone(), || {
        tools::call(fs, &caller, &req.tool, &req.args, req.read_only, ctx)
    })
}

/// Starts the daemon's listener for database `db` (absolute path) on a thread of its
/// own; returns the socket's path. `allow_other`: peers of any uid (the gate still
/// decides); else root and `owner` (the user who mounted) only. The socket file is removed when the daemon
/// exits ([`remove`]).
pub fn listen(fs: Arc<Fs>, db: &Path, owner: u32, allow_other: bool) -> Result<PathBuf> {
    let path = socket_path(db);
    runtime_dir().map_err(|e| Error::new(e.errno, format!("MCP socket {}", e.reason)))?;
    let dir = path.parent().expect("the socket has a directory");
    let io = |what: &str, e: std::io::Error| {
        Error::new(
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("MCP socket {what} {}: {e}", dir.display()),
        )
    };
    let _ = std::fs::remove_file(&path);
    remove_stale(dir);
    let listener = UnixListener::bind(&path).map_err(|e| io("bind in", e))?;
    let mode = if allow_other { 0o666 } else { 0o600 };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| io("mode in", e))?;
    std::thread::Builder::new()
        .name("scratchfs-mcp".into())
        .spawn(move || {
            let live = Arc::new((crate::sync::Mutex::new(0usize), crate::sync::Condvar::new()));
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                {
                    let mut n = live.0.lock();
                    while *n >= CONNECTIONS_MAX {
                        live.1.wait(&mut n);
                    }
                    *n += 1;
                }
                let (fs, done) = (fs.clone(), live.clone());
                let spawned = std::thread::Builder::new()
                    .name("scratchfs-mcp-conn".into())
                    .spawn(move || {
                        serve_connection(&fs, conn, owner, allow_other);
                        *done.0.lock() -= 1;
                        done.1.notify_one();
                    });
                if spawned.is_err() {
                    *live.0.lock() -= 1;
                }
            }
        })
        .map_err(|e| io("thread for", e))?;
    Ok(path)
}

/// Removes the sockets in `dir` (this user's runtime directory) that no daemon listens
/// on any more: left by daemons killed before they could remove theirs (`connect(2)`
/// answers `ECONNREFUSED`). Only this user's sockets named as [`socket_path`] names them.
pub fn remove_stale(dir: &Path) {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let me = unsafe { libc::geteuid() };
    for e in entries.flatten() {
        let p = e.path();
        let ours = p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".sock"))
            .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if !ours || !meta.file_type().is_socket() || meta.uid() != me {
            continue;
        }
        if let Err(err) = UnixStream::connect(&p)
            && err.raw_os_error() == Some(libc::ECONNREFUSED)
        {
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// Removes the socket of database `db` (at exit).
pub fn remove(db: &Path) {
    let _ = std::fs::remove_file(socket_path(db));
}

/// The pid, uid and gid of the process at the other end (`SO_PEERCRED`, unix(7)).
fn peer(conn: &UnixStream) -> Option<Ctx> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(Ctx {
        pid: cred.pid as u32,
        uid: cred.uid,
        gid: cred.gid,
    })
}

fn serve_connection(fs: &Fs, conn: UnixStream, owner: u32, allow_other: bool) {
    let Some(ctx) = peer(&conn) else { return };
    let mut out = match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    };
    let reply = |out: &mut UnixStream, o: &Outcome| {
        let line = serde_json::json!({ "text": o.text, "structured": o.structured, "is_error": o.is_error });
        writeln!(out, "{line}").and_then(|()| out.flush())
    };
    if !(allow_other || ctx.uid == 0 || ctx.uid == owner) {
        let _ = reply(
            &mut out,
            &Outcome::error(Error::new(
                libc::EACCES,
                format!(
                    "uid {} may not use this mount (it was mounted without --allow-other)",
                    ctx.uid
                ),
            )),
        );
        return;
    }
    let mut lines = BufReader::new(std::io::Read::take(conn, u64::MAX));
    loop {
        let mut line = String::new();
        lines.get_mut().set_limit(REQUEST_MAX);
        match lines.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if !line.ends_with('\n') && lines.get_ref().limit() == 0 => {
                let _ = reply(
                    &mut out,
                    &Outcome::error(Error::new(
                        libc::E2BIG,
                        format!("request longer than {REQUEST_MAX} bytes: connection closed"),
                    )),
                );
                return;
            }
            Ok(_) => {}
        }
        let outcome = match serde_json::from_str::<Request>(&line) {
            Ok(req) => run_call(fs, ctx, &req),
            Err(e) => Outcome::error(Error::new(libc::EINVAL, format!("bad request: {e}"))),
        };
        if reply(&mut out, &outcome).is_err() {
            return;
        }
    }
}

/// A connection to a daemon's MCP socket, for one MCP session.
pub struct Client {
    lines: BufReader<UnixStream>,
    out: UnixStream,
}

impl Client {
    /// Connects to the socket at `path`.
    pub fn connect(path: &Path) -> std::io::Result<Client> {
        let conn = UnixStream::connect(path)?;
        Ok(Client {
            out: conn.try_clone()?,
            lines: BufReader::new(conn),
        })
    }

    /// Runs `req` in the daemon.
    pub fn call(&mut self, req: &Request) -> Outcome {
        let failed =
            |e: String| Outcome::error(Error::new(libc::EIO, format!("the mount's daemon: {e}")));
        let line = match serde_json::to_string(req) {
            Ok(l) => l,
            Err(e) => return failed(e.to_string()),
        };
        if let Err(e) = writeln!(self.out, "{line}").and_then(|()| self.out.flush()) {
            return failed(e.to_string());
        }
        let mut reply = String::new();
        match self.lines.read_line(&mut reply) {
            Ok(0) => return failed("closed the connection".into()),
            Err(e) => return failed(e.to_string()),
            Ok(_) => {}
        }
        match serde_json::from_str::<serde_json::Value>(&reply) {
            Ok(v) => Outcome {
                text: v["text"].as_str().unwrap_or_default().to_string(),
                structured: v.get("structured").filter(|s| !s.is_null()).cloned(),
                is_error: v["is_error"].as_bool().unwrap_or(true),
            },
            Err(e) => failed(format!("bad reply: {e}")),
        }
    }
}
