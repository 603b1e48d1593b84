//! The mount's MCP socket (issue 12): while a database is mounted, its daemon owns the
//! filesystem core, so `scratchfs mcp` runs each tool call there, over a Unix socket the
//! daemon listens on. A commit made through MCP is then a commit of the same core as the
//! mount's: MANIFEST, outlines and content agree on both sides at once, and the kernel's
//! cached attributes and names are dropped for what a call changed.
//!
//! Protocol: one JSON object per line each way. The daemon speaks first, a greeting
//! ([`GREETING`]), or the refusal of the connection; then each request is a [`Request`]
//! and each reply the tool's [`Outcome`].
//!
//! Who calls (issue 31, docs/security.md): the process that connected
//! (`SO_PEERCRED`: pid, uid, gid), its facts taken once, when the daemon accepts it
//! (exe by identity, namespaces, environment: [`Fs::process`]), and never again: what the
//! process execs later gains the connection nothing. Every request must be sent by that
//! process: the socket passes credentials (`SO_PASSCRED`, unix(7)), so the kernel names
//! the sender of each message, and bytes from any other process (a child that kept the
//! socket while its parent exec'd a tool's binary) end the connection. A request is named
//! as its [`Remote`] says (writer, client, step: what the MCP server was told, as
//! trustworthy as the `SCRATCHFS_WRITER` tag), and the gate decides as for the mount.
//!
//! Limits: [`PER_UID_MAX`] connections per uid (root and the user who mounted are not
//! counted, so no other uid can keep them out), [`CONNECTIONS_MAX`] in all; a connection
//! idle for [`IDLE`] is closed; a request line must arrive whole within [`REQUEST_READ`]
//! of its first byte. The accept loop never waits for a free place: a connection over a
//! limit is refused at once, with the reason.
//!
//! The socket is `<runtime dir>/<blake3 of the database path>.sock` ([`runtime_dir`]: a
//! directory of the daemon's user's own, checked, never one another user made), mode
//! 0600, or 0666 with `--allow-other`; its path is the database's `meta.mcp_socket`. A peer whose uid the mount would not let in
//! (neither root, nor the mounting user, without `--allow-other`) is turned away.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::tools::{self, Outcome};
use crate::error::{Error, Result};
use crate::fs::{Ctx, Fs, Process, Remote};

/// Longest request line accepted (9 MiB: a tool's string argument is at most 4 MiB,
/// [`tools::ARG_MAX`], which JSON escaping may double). A longer one ends the connection.
const REQUEST_MAX: u64 = 9 << 20;

/// Connections served at once, all uids together (a thread each): one more is refused.
pub const CONNECTIONS_MAX: usize = 256;

/// Connections one uid other than root and the user who mounted may hold at once: one
/// more is refused (`EAGAIN`), so one uid's idle connections never keep another's out.
pub const PER_UID_MAX: usize = 8;

/// A connection with no request for this long is closed (120 s). The client
/// ([`Client`]) connects again for its next call.
pub const IDLE: std::time::Duration = std::time::Duration::from_secs(120);

/// A request line must arrive whole within this time of its first byte (30 s): a
/// client sending a byte at a time holds no connection for long.
pub const REQUEST_READ: std::time::Duration = std::time::Duration::from_secs(30);

/// The daemon's first line on a connection it serves: the client may send from then on
/// (credentials are passed for every byte it sends after it).
pub const GREETING: &str = "{\"scratchfs\":\"mcp-socket\",\"version\":2}";

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

/// The user's private runtime directory of scratchfs, where daemons put their MCP
/// sockets and a PostgreSQL mount's log: `$XDG_RUNTIME_DIR/scratchfs-<euid>`; for root
/// without it `/run/scratchfs` (a directory only root may create entries in, so no other
/// user can make it first); else `scratchfs-<euid>` under the temporary directory. Not
/// created here ([`runtime_dir`] does).
fn runtime_base() -> PathBuf {
    let euid = unsafe { libc::geteuid() };
    if let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
    {
        return xdg.join(format!("scratchfs-{euid}"));
    }
    if euid == 0 && crate::rules::replaceable_only_by_admins("/run") {
        return PathBuf::from("/run/scratchfs");
    }
    std::env::temp_dir().join(format!("scratchfs-{euid}"))
}

/// [`runtime_base`], created if missing, and checked with `lstat(2)` to be this user's
/// own directory, not a link ([`own_dir`]); its mode is then 0711 (others may reach a
/// socket in it that `--allow-other` opened to them, never list or add entries).
/// `EPERM` when another user made it first (a squatter could take the socket's place:
/// the mount refuses to start rather than run without MCP), else the creation's errno.
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
    own_dir(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).map_err(io)?;
    Ok(dir)
}

/// `Ok` when `dir` (not followed if a link) is a directory of this process's user;
/// `EPERM` naming who owns it otherwise.
pub fn own_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| {
        Error::new(
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("directory {}: {e}", dir.display()),
        )
    })?;
    let me = unsafe { libc::geteuid() };
    if meta.file_type().is_dir() && meta.uid() == me {
        return Ok(());
    }
    Err(Error::new(
        libc::EPERM,
        format!(
            "directory {}: {} of uid {}, not a directory of this daemon's user (uid {me}): \
             another user may have made it to take the socket's place; remove it, or set \
             XDG_RUNTIME_DIR to a directory of yours",
            dir.display(),
            if meta.file_type().is_symlink() {
                "a symbolic link"
            } else if meta.is_dir() {
                "a directory"
            } else {
                "a file"
            },
            meta.uid()
        ),
    ))
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
    run_call_as(fs, ctx, &fs.process(ctx), req)
}

/// [`run_call`] for the process `process`, whose facts were taken before (when it
/// connected to the daemon's socket).
pub fn run_call_as(fs: &Fs, ctx: Ctx, process: &Process, req: &Request) -> Outcome {
    let remote = Remote {
        transport: "mcp",
        writer: req.writer.clone(),
        client: req.client.clone(),
        client_version: req.client_version.clone(),
        step: tools::step_of(&req.args),
    };
    let caller = match fs.remote_caller_of(process, &remote) {
        Ok(c) => c,
        Err(e) => {
            // On record as the process it is, naming the writer it claimed.
            let unclaimed = Remote {
                writer: None,
                ..remote
            };
            if let Ok(c) = fs.remote_caller_of(process, &unclaimed) {
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
            let held = Arc::new(crate::sync::Mutex::new(Held::default()));
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let Some(ctx) = peer(&conn) else { continue };
                let counted = !(ctx.uid == 0 || ctx.uid == owner);
                if let Err(e) = held.lock().take(ctx.uid, counted) {
                    let _ = refuse(&mut conn, e);
                    continue;
                }
                let (fs, held2) = (fs.clone(), held.clone());
                let spawned = std::thread::Builder::new()
                    .name("scratchfs-mcp-conn".into())
                    .spawn(move || {
                        serve_connection(&fs, conn, ctx, owner, allow_other);
                        held2.lock().give_back(ctx.uid, counted);
                    });
                if spawned.is_err() {
                    held.lock().give_back(ctx.uid, counted);
                }
            }
        })
        .map_err(|e| io("thread for", e))?;
    Ok(path)
}

/// The connections served now: in all, and per counted uid ([`PER_UID_MAX`]).
#[derive(Default)]
struct Held {
    all: usize,
    per_uid: std::collections::HashMap<u32, usize>,
}

impl Held {
    /// A place for a connection of `uid` (`counted`: not root nor the user who mounted),
    /// or why there is none (`EAGAIN`).
    fn take(&mut self, uid: u32, counted: bool) -> Result<()> {
        if self.all >= CONNECTIONS_MAX {
            return Err(Error::new(
                libc::EAGAIN,
                format!("the mount's MCP socket serves {CONNECTIONS_MAX} connections already"),
            ));
        }
        if counted {
            let n = self.per_uid.entry(uid).or_default();
            if *n >= PER_UID_MAX {
                return Err(Error::new(
                    libc::EAGAIN,
                    format!(
                        "uid {uid} holds {PER_UID_MAX} connections to the mount's MCP socket \
                         already (idle ones are closed after {} s)",
                        IDLE.as_secs()
                    ),
                ));
            }
            *n += 1;
        }
        self.all += 1;
        Ok(())
    }

    fn give_back(&mut self, uid: u32, counted: bool) {
        self.all -= 1;
        if counted && let Some(n) = self.per_uid.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.per_uid.remove(&uid);
            }
        }
    }
}

/// Writes `line` and a newline in one `write` (a `Value` written with `writeln!` goes
/// out a token at a time: a 10,000-file listing was 1.4 s of socket calls).
fn send_line(out: &mut UnixStream, line: &str) -> std::io::Result<()> {
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    out.write_all(buf.as_bytes()).and_then(|()| out.flush())
}

/// Writes the refusal of a connection as its one reply line.
fn refuse(out: &mut UnixStream, e: Error) -> std::io::Result<()> {
    let o = Outcome::error(e);
    let line = serde_json::json!({ "text": o.text, "structured": o.structured, "is_error": true });
    send_line(out, &line.to_string())
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

fn serve_connection(fs: &Fs, conn: UnixStream, ctx: Ctx, owner: u32, allow_other: bool) {
    let mut out = match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    };
    let reply = |out: &mut UnixStream, o: &Outcome| {
        let line = serde_json::json!({ "text": o.text, "structured": o.structured, "is_error": o.is_error });
        send_line(out, &line.to_string())
    };
    if !(allow_other || ctx.uid == 0 || ctx.uid == owner) {
        let _ = refuse(
            &mut out,
            Error::new(
                libc::EACCES,
                format!(
                    "uid {} may not use this mount (it was mounted without --allow-other)",
                    ctx.uid
                ),
            ),
        );
        return;
    }
    // The caller, once and for all: what the process is now, before it is told it may
    // send anything.
    let process = fs.process(ctx);
    let passcred: libc::c_int = 1;
    let rc = unsafe {
        use std::os::fd::AsRawFd;
        libc::setsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&passcred as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0
        || writeln!(out, "{GREETING}")
            .and_then(|()| out.flush())
            .is_err()
    {
        return;
    }
    let reader = Sender {
        conn,
        pid: ctx.pid,
        deadline: None,
    };
    let mut lines = BufReader::new(std::io::Read::take(reader, u64::MAX));
    loop {
        let mut line = String::new();
        lines.get_mut().set_limit(REQUEST_MAX);
        lines.get_mut().get_mut().deadline = None;
        match lines.read_line(&mut line) {
            Ok(0) => return,
            Err(e) => {
                if e.kind() == std::io::ErrorKind::PermissionDenied {
                    let _ = refuse(&mut out, Error::new(libc::EACCES, e.to_string()));
                }
                return;
            }
            Ok(_) if !line.ends_with('\n') && lines.get_ref().limit() == 0 => {
                let _ = refuse(
                    &mut out,
                    Error::new(
                        libc::E2BIG,
                        format!("request longer than {REQUEST_MAX} bytes: connection closed"),
                    ),
                );
                return;
            }
            Ok(_) => {}
        }
        let outcome = match serde_json::from_str::<Request>(&line) {
            Ok(req) => run_call_as(fs, ctx, &process, &req),
            Err(e) => Outcome::error(Error::new(libc::EINVAL, format!("bad request: {e}"))),
        };
        if reply(&mut out, &outcome).is_err() {
            return;
        }
    }
}

/// The reading side of a served connection: every byte must come from process `pid`,
/// the one that connected, as the kernel says with each message (`SCM_CREDENTIALS`,
/// unix(7): a stream socket never joins bytes of two senders in one `recvmsg`). Bytes
/// of any other sender are a `PermissionDenied` error. Reads wait at most [`IDLE`] for a
/// request, and a request's bytes at most until [`REQUEST_READ`] after its first.
struct Sender {
    conn: UnixStream,
    pid: u32,
    /// When the request being read must be whole (`None`: none begun).
    deadline: Option<std::time::Instant>,
}

impl std::io::Read for Sender {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        let wait = match self.deadline {
            None => IDLE,
            Some(d) => d
                .checked_duration_since(std::time::Instant::now())
                .filter(|w| !w.is_zero())
                .ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "request not sent in time")
                })?,
        };
        self.conn.set_read_timeout(Some(wait))?;
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // Room for one SCM_CREDENTIALS message (u64s: aligned for cmsghdr).
        let mut control = [0u64; 8];
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = unsafe { libc::recvmsg(self.conn.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(0);
        }
        let mut sender = None;
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_CREDENTIALS {
                    let cred: libc::ucred = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    sender = Some(cred.pid as u32);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if sender != Some(self.pid) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "a request sent by {}, not by the process that connected (pid {}): \
                     connection closed (a connection is its process's own, docs/security.md)",
                    sender.map_or("an unknown process".into(), |p| format!("pid {p}")),
                    self.pid
                ),
            ));
        }
        if self.deadline.is_none() {
            self.deadline = Some(std::time::Instant::now() + REQUEST_READ);
        }
        Ok(n as usize)
    }
}

/// A connection to a daemon's MCP socket, for one or more MCP sessions of this process.
pub struct Client {
    lines: BufReader<UnixStream>,
    out: UnixStream,
    /// When it was last used: one idle for half of [`IDLE`] is not used again (the daemon
    /// may close it before a request arrives).
    used: std::time::Instant,
}

impl Client {
    /// Connects to the socket at `path` and waits for the daemon's greeting; the
    /// daemon's refusal (a uid over its limit, a uid not let in) is the error.
    pub fn connect(path: &Path) -> std::io::Result<Client> {
        let conn = UnixStream::connect(path)?;
        let mut c = Client {
            out: conn.try_clone()?,
            lines: BufReader::new(conn),
            used: std::time::Instant::now(),
        };
        let mut greeting = String::new();
        c.lines.get_ref().set_read_timeout(Some(REQUEST_READ))?;
        c.lines.read_line(&mut greeting)?;
        c.lines.get_ref().set_read_timeout(None)?;
        if greeting.trim_end() != GREETING {
            let why = serde_json::from_str::<serde_json::Value>(&greeting)
                .ok()
                .and_then(|v| v["text"].as_str().map(String::from))
                .unwrap_or_else(|| format!("no greeting (got {:?})", greeting.trim_end()));
            return Err(std::io::Error::other(why));
        }
        Ok(c)
    }

    /// Whether it has been idle so long the daemon may close it.
    pub fn stale(&self) -> bool {
        self.used.elapsed() >= IDLE / 2
    }

    /// Runs `req` in the daemon.
    pub fn call(&mut self, req: &Request) -> Outcome {
        self.used = std::time::Instant::now();
        let failed =
            |e: String| Outcome::error(Error::new(libc::EIO, format!("the mount's daemon: {e}")));
        let line = match serde_json::to_string(req) {
            Ok(l) => l,
            Err(e) => return failed(e.to_string()),
        };
        if let Err(e) = send_line(&mut self.out, &line) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime directory another user made first, or a link, is refused (issue 31).
    #[test]
    fn a_runtime_directory_of_another_user_or_a_link_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let mine = base.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        assert!(own_dir(&mine).is_ok());
        let squatted = base.path().join("squatted");
        std::fs::create_dir(&squatted).unwrap();
        std::os::unix::fs::chown(&squatted, Some(1000), Some(1000)).unwrap();
        let e = own_dir(&squatted).unwrap_err();
        assert_eq!(e.errno, libc::EPERM);
        assert!(e.reason.contains("a directory of uid 1000"), "{}", e.reason);
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        let e = own_dir(&link).unwrap_err();
        assert!(e.reason.contains("a symbolic link"), "{}", e.reason);
    }
}
