//! `scratchfs mcp [--db F] [--rules F] [--writer NAME] [--read-only] [--listen ADDR]`
//! (issue 12): serves the scratchpad over MCP. While the database is mounted, each call
//! runs in the mount's daemon (its socket, `meta.mcp_socket`), so both sides see one
//! core; otherwise this process opens the database (holding its lock, as a mount does)
//! with `--rules`, or the rules of its last mount. On PostgreSQL (`--db postgres://..`)
//! it is always one more daemon on the database: its own core, refreshed by the others'
//! notifications, under the database's rules (`--rules` records new ones).

use crate::store::History;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use super::Failure;
use crate::fs::Ctx;
use crate::mcp::server::{Backend, Config, Server};

/// `--listen` and what goes with it (docs/security.md, "MCP over HTTP").
#[derive(Debug, Clone)]
pub struct Http {
    /// Where to listen.
    pub addr: SocketAddr,
    /// `--token-file`: the bearer token's file, else one is made at start.
    pub token_file: Option<std::path::PathBuf>,
    /// `--as UID:GID`: the user every call acts as (required of root).
    pub as_user: Option<(u32, u32)>,
    /// `--allow-cleartext`: serve a non-loopback address without TLS.
    pub allow_cleartext: bool,
    /// `--tls-cert`, `--tls-key`: serve HTTPS with this certificate chain and key (PEM).
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// What `--listen` takes with the starting user's rights, before the server may become
/// the `--as` user: the bound port, the token (a `--token-file`, or the 0600 file made in
/// the starting user's runtime directory, which the `--as` user must not read) and the
/// TLS key.
struct Listening {
    listener: std::net::TcpListener,
    token: String,
    token_path: std::path::PathBuf,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Listening {
    fn new(h: &Http) -> Result<Listening, Failure> {
        let tls = match &h.tls {
            Some((cert, key)) => Some(crate::http::tls_acceptor(cert, key)?),
            None => None,
        };
        let dir = crate::mcp::socket::runtime_dir().map_err(|e| e.reason)?;
        let (token, token_path) = crate::http::token(h.token_file.as_deref(), &dir, "mcp-http")?;
        let listener = std::net::TcpListener::bind(h.addr)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| format!("--listen {}: {e}", h.addr))?;
        Ok(Listening {
            listener,
            token,
            token_path,
            tls,
        })
    }
}

/// Serves until stdin closes (stdio) or forever (`http`).
pub fn serve(
    db: &Path,
    rules: Option<&Path>,
    config: Config,
    http: Option<Http>,
) -> Result<(), Failure> {
    if config.writer.as_deref().is_some_and(str::is_empty) {
        return Err("--writer: an empty name".into());
    }
    let me = unsafe { libc::geteuid() };
    if let Some(h) = &http {
        if !crate::http::loopback(&h.addr) && !h.allow_cleartext && h.tls.is_none() {
            return Err(format!(
                "--listen {}: not a loopback address, and without TLS every token and call \
                 would cross the network in clear text; give --tls-cert FILE --tls-key FILE \
                 (HTTPS), listen on 127.0.0.1, or say --allow-cleartext",
                h.addr
            ));
        }
        if me == 0 && h.as_user.is_none() {
            return Err(
                "--listen as root: every local user who reaches the port would act as root; \
                 give --as UID[:GID], the user every call acts as (docs/security.md)"
                    .into(),
            );
        }
    }
    let as_user = http.as_ref().and_then(|h| h.as_user);
    // Before this process may become the --as user (below, on a mounted database): its
    // token file would otherwise be made in, and its key and token read from, that
    // user's reach.
    let http = match http {
        Some(h) => Some((Listening::new(&h)?, h)),
        None => None,
    };
    if as_user.is_some() && me == 0 {
        // The calls' group checks read this process's supplementary groups: root's are
        // not the user's.
        if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
            return Err(format!(
                "--as: setgroups: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    let (backend, _lock) =
        open_backend(db, rules, config.writer.as_deref(), as_user, me, true, true)?;
    // The socket it serves the others on goes with it.
    let _socket = ServedSocket(match &backend {
        Backend::Local(..) if super::postgres_url(db).is_none() => {
            Some(crate::mount::absolute(db)?)
        }
        _ => None,
    });
    run_server(Arc::new(backend), config, http)
}

/// Where the calls on `db` run, and the database's lock when this process holds it: on a
/// core this process opens (an unmounted SQLite database, made when missing and
/// `create`; any PostgreSQL database), or in the daemon of its mount. `rules`: the rules
/// of a core opened here (on a mount, they must be the mount's). `as_user`: the user
/// every call acts as (`me` is this process's effective uid).
pub fn open_backend(
    db: &Path,
    rules: Option<&Path>,
    writer: Option<&str>,
    as_user: Option<(u32, u32)>,
    me: u32,
    create: bool,
    serve_others: bool,
) -> Result<(Backend, Option<std::fs::File>), Failure> {
    let own_ctx = || Ctx {
        pid: std::process::id(),
        uid: as_user.map_or(me, |a| a.0),
        gid: as_user.map_or(unsafe { libc::getegid() }, |a| a.1),
    };
    if let Some(url) = super::postgres_url(db) {
        // On PostgreSQL this process is one more daemon on the database (docs/deploy.md):
        // its calls commit there as a mount's do, and it refreshes on the others' changes;
        // `--rules` become the database's rules, as a mount's do.
        let ctx = own_ctx();
        let fs = crate::mount::open_postgres(url, (ctx.uid, ctx.gid), rules, |fs| fs)?;
        check_writer(&fs, writer, ctx)?;
        return Ok((Backend::Local(fs, ctx), None));
    }
    let db = crate::mount::absolute(db)?;
    // A file that is not a scratchfs database is left as it is; a missing one is made,
    // with the default layout, as a first mount makes it.
    let missing = matches!(
        crate::store::probe(&db).map_err(|e| e.reason)?,
        crate::store::Probe::Missing
    );
    if missing && !create {
        return Err(format!(
            "{}: no such database (give --db, or set SCRATCHFS_DB)",
            db.display()
        ));
    }
    let mut _lock = None;
    let lock = if missing {
        crate::mount::check_database(&db, Path::new("/nonexistent-mountpoint"))?;
        crate::mount::lock_database(&db)
    } else {
        crate::mount::lock_database_now(&db)
    };
    let backend = match lock {
        Ok(lock) => {
            _lock = Some(lock);
            let ctx = own_ctx();
            // A new scratchpad belongs to the user the calls act as (`--as`), as a
            // mount's belongs to its `--owner`.
            let (mut fs, _) = super::offline_fs_owned(&db, (ctx.uid, ctx.gid))?;
            let mut text = None;
            if let Some(path) = rules {
                let (t, parsed) = crate::rules::load(path)?;
                fs = fs.with_rules(crate::rules::enforce::Compiled::new(parsed));
                text = Some(t);
            }
            check_writer(&fs, writer, ctx)?;
            if let Some(text) = text {
                // Recorded as a mount's are: the rules this scratchpad ran under, which
                // the next offline command checks against.
                fs.store()
                    .record_rules(&text, &crate::identity::Caller::internal("scratchfs"))
                    .map_err(|e| format!("{}: {e}", db.display()))?;
            }
            let fs = Arc::new(fs);
            if serve_others {
                // Other `scratchfs mcp` processes on this database (a second agent, an
                // inspector) run their calls here, through the socket a mount's daemon
                // offers (root and this user only, as a mount without --allow-other).
                serve_the_others(&fs, &db, me)?;
            }
            Backend::Local(fs, ctx)
        }
        Err(_) => {
            // The calls run under the mount's rules: --rules naming the same rules (as
            // parsed: spacing and key order aside) is accepted, other rules refused.
            if let Some(path) = rules {
                let (_, given) = crate::rules::load(path)?;
                let mounted = match stored_rules(&db)? {
                    Some(text) => crate::rules::Rules::parse(&text).ok(),
                    None => Some(crate::rules::Rules::default()),
                };
                if mounted.as_ref() != Some(&given) {
                    return Err(format!(
                        "--rules {}: {} is mounted under other rules, and its calls run under \
                         the mount's; leave out --rules, or mount again with these",
                        path.display(),
                        db.display()
                    ));
                }
            }
            // The mount's rules are the last recorded: a --writer is checked against them
            // now, as the daemon checks it again at each call.
            if let Some(w) = writer
                && let Some(text) = stored_rules(&db)?
            {
                let rules = crate::rules::Rules::parse(&text).map_err(|p| {
                    format!("{}: the stored rules do not parse: {}", db.display(), p[0])
                })?;
                if !rules.writers.iter().any(|(name, _)| name == w) {
                    let names: Vec<&str> = rules.writers.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(format!(
                        "--writer {w:?}: not one of the mount's rules' writers ({})",
                        names.join(", ")
                    ));
                }
            }
            match super::meta(&db, "mcp_socket")? {
                Some(p)
                    if !p.is_empty()
                        && (super::live_mountpoint(&db)?.is_some()
                            || crate::mcp::socket::Client::connect(Path::new(&p)).is_ok()) =>
                {
                    // The daemon knows its callers by the socket's peer: a server that is
                    // to act as another user becomes that user before it connects.
                    if let Some((uid, gid)) = as_user.filter(|a| a.0 != me) {
                        become_user(uid, gid)?;
                    }
                    Backend::Daemon(crate::mcp::server::Daemon::new(p.into()))
                }
                _ => {
                    return Err(format!(
                        "{}: in use by another process that serves no MCP socket (a command \
                         holding it, or a mount or server without one); try again once it \
                         is done",
                        db.display()
                    ));
                }
            }
        }
    };
    Ok((backend, _lock))
}

/// `scratchfs grep`: the `search` tool's call with `args`, run where `scratchfs mcp`
/// would run it (a database that does not exist is refused, not made); prints its lines
/// (or its JSON with `json`). Returns whether anything matched.
pub fn grep(db: &Path, args: serde_json::Value, json: bool) -> Result<bool, Failure> {
    let me = unsafe { libc::geteuid() };
    let (backend, _lock) = open_backend(db, None, None, None, me, false, false)?;
    let out = backend.call(&crate::mcp::socket::Request {
        tool: "search".into(),
        args,
        writer: None,
        client: None,
        client_version: None,
        read_only: true,
    });
    if out.is_error {
        return Err(out.text);
    }
    let structured = out.structured.unwrap_or_default();
    let any = structured["matches"]
        .as_array()
        .is_some_and(|m| !m.is_empty());
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let printed = if json {
        writeln!(stdout, "{structured}")
    } else if any {
        writeln!(stdout, "{}", out.text)
    } else {
        Ok(())
    };
    printed.map_err(|e| format!("stdout: {e}"))?;
    Ok(any)
}

/// Serves the calls of other `scratchfs mcp` processes on the unmounted database `db`
/// that this process holds, as a mount's daemon does: the socket's listener, its path in
/// the database's `meta` (`mcp_socket`). Peers: root and `me` only.
fn serve_the_others(fs: &Arc<crate::fs::Fs>, db: &Path, me: u32) -> Result<(), Failure> {
    match crate::mcp::socket::listen(fs.clone(), db, me, false) {
        Ok(path) => fs
            .store()
            .set_meta("mcp_socket", &path.to_string_lossy())
            .map_err(|e| format!("{}: {e}", db.display())),
        // A runtime directory another user made first: refused as a mount refuses it.
        Err(e) if e.errno == libc::EPERM => Err(format!("the MCP socket: {}", e.reason)),
        Err(e) => {
            log::warn!("no MCP socket for other servers: {}", e.reason);
            Ok(())
        }
    }
}

/// The socket of a database this process serves ([`serve_the_others`]), removed when
/// dropped.
struct ServedSocket(Option<std::path::PathBuf>);

impl Drop for ServedSocket {
    fn drop(&mut self) {
        if let Some(db) = &self.0 {
            crate::mcp::socket::remove(db);
        }
    }
}

/// Drops this process to `uid`:`gid` with no supplementary groups (setresgid(2),
/// setresuid(2)), for good.
fn become_user(uid: u32, gid: u32) -> Result<(), Failure> {
    let failed = |what: &str| {
        format!(
            "--as {uid}:{gid}: {what}: {}",
            std::io::Error::last_os_error()
        )
    };
    // SAFETY: plain system calls on this process's credentials.
    unsafe {
        if libc::geteuid() == 0 && libc::setgroups(0, std::ptr::null()) != 0 {
            return Err(failed("setgroups"));
        }
        if libc::setresgid(gid, gid, gid) != 0 {
            return Err(failed("setresgid"));
        }
        if libc::setresuid(uid, uid, uid) != 0 {
            return Err(failed("setresuid"));
        }
    }
    Ok(())
}

/// Serves `backend` over stdio, or streamable HTTP as `http` says, until the client leaves.
fn run_server(
    backend: Arc<Backend>,
    config: Config,
    http: Option<(Listening, Http)>,
) -> Result<(), Failure> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    // The last reference to the core is dropped here, after the runtime: a PostgreSQL
    // store's client blocks on a runtime of its own when dropped, which may not happen on
    // one of this runtime's threads.
    let keep = backend.clone();
    let served = runtime.block_on(async move {
        match http {
            None => {
                use rmcp::ServiceExt;
                let server = Server::new(backend, config);
                let running = server
                    .serve(rmcp::transport::stdio())
                    .await
                    .map_err(|e| format!("mcp: {e}"))?;
                running.waiting().await.map_err(|e| format!("mcp: {e}"))?;
                Ok(())
            }
            Some((l, h)) => serve_http(backend, config, l, h).await,
        }
    });
    drop(runtime);
    drop(keep);
    served
}

/// The text of the rules the database was last mounted with, unless empty (the defaults).
fn stored_rules(db: &Path) -> Result<Option<String>, Failure> {
    let text = crate::store::Sqlite::open_frozen(db)
        .and_then(|s| s.rules_text())
        .map_err(|e| format!("{}: {e}", db.display()))?;
    Ok(text.filter(|t| !t.trim().is_empty()))
}

/// A `--writer` under rules must be one of their writers, whose process matchers (uid,
/// gid, user, exe, comm) this process satisfies: naming a writer defined by uid 0 does not
/// give uid 0's rights.
fn check_writer(fs: &crate::fs::Fs, writer: Option<&str>, ctx: Ctx) -> Result<(), Failure> {
    let Some(rules) = fs.gate().rules.load() else {
        return Ok(());
    };
    let Some(w) = writer else { return Ok(()) };
    if !rules.rules.writers.iter().any(|(name, _)| name == w) {
        let names: Vec<&str> = rules
            .rules
            .writers
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        return Err(format!(
            "--writer {w:?}: not one of the rules' writers ({})",
            names.join(", ")
        ));
    }
    let remote = crate::fs::Remote {
        transport: "mcp",
        writer: Some(w.to_string()),
        ..Default::default()
    };
    fs.remote_caller(ctx, &remote)
        .map(|_| ())
        .map_err(|e| format!("--writer: {}", e.reason))
}

/// Streamable HTTP at `http://ADDR/mcp` (`https://` with `--tls-cert`), one session per
/// client, every request behind the bearer token ([`crate::mcp::http`]).
async fn serve_http(
    backend: Arc<Backend>,
    config: Config,
    l: Listening,
    h: Http,
) -> Result<(), Failure> {
    use hyper_util::service::TowerToHyperService;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpService, session::local::LocalSessionManager,
    };
    let addr = h.addr;
    // SIGTERM, SIGINT and SIGHUP end the server; a token file it made goes with it (one
    // given with --token-file stays). Taken before the server says where it listens, so
    // that whoever read that may stop it at once.
    use tokio::signal::unix::{SignalKind, signal};
    let mut ends = Vec::new();
    for kind in [
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
    ] {
        ends.push(signal(kind).map_err(|e| format!("--listen: signals: {e}"))?);
    }
    let mut http_config =
        rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default();
    if !crate::http::loopback(&addr) {
        // The token, not the Host header, keeps callers out of a server meant for a network.
        http_config = http_config.disable_allowed_hosts();
    }
    let service = TowerToHyperService::new(crate::mcp::http::Authorized::new(
        StreamableHttpService::new(
            move || Ok(Server::new(backend.clone(), config.clone())),
            LocalSessionManager::default().into(),
            http_config,
        ),
        &l.token,
    ));
    let listener = tokio::net::TcpListener::from_std(l.listener)
        .map_err(|e| format!("--listen {addr}: {e}"))?;
    eprintln!(
        "scratchfs: MCP over streamable HTTP at {}://{}/mcp",
        if l.tls.is_some() { "https" } else { "http" },
        listener.local_addr().map_err(|e| e.to_string())?
    );
    eprintln!(
        "scratchfs: every request needs Authorization: Bearer <the first line of {}>",
        l.token_path.display()
    );
    let serving = crate::http::serve(listener, l.tls.clone(), service, format!("--listen {addr}"));
    let [a, b, c] = &mut ends[..] else {
        unreachable!("three signals")
    };
    tokio::select! {
        r = serving => return r,
        _ = a.recv() => {}
        _ = b.recv() => {}
        _ = c.recv() => {}
    }
    if h.token_file.is_none() {
        // Gone with the server (a server that became the --as user may not remove it:
        // it stays, root's, out of that user's reach).
        let _ = std::fs::remove_file(&l.token_path);
    }
    Ok(())
}
