//! `scratchfs web [--db DB | --mount DIR] [--listen ADDR]` (issue 35, docs/web.md): serves
//! the review page ([`crate::web`]) for a database, mounted or not, on SQLite or
//! PostgreSQL, until SIGTERM, SIGINT or SIGHUP.
//!
//! Who may look (docs/security.md, "The review page"): whoever holds the token printed at
//! start, in the link. The server reads the database with the rights of the user who
//! started it (as `scratchfs log` does) and changes nothing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Failure;

/// The address served when none is given: loopback, a port the kernel picks.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:0";

/// `--listen` and what goes with it.
#[derive(Debug, Clone)]
pub struct Web {
    /// Where to listen.
    pub addr: SocketAddr,
    /// `--token-file`: the bearer token's file, else one is made at start.
    pub token_file: Option<PathBuf>,
    /// `--tls-cert`, `--tls-key`: serve HTTPS with this certificate chain and key (PEM).
    pub tls: Option<(PathBuf, PathBuf)>,
}

/// The database a `--mount DIR` names: the SQLite file its source (`fsname`) names, when
/// that database says it is mounted at DIR ([`super::live_mountpoint`], which also checks
/// the mount's scratchpad id). Anything else is refused, naming what to give instead.
pub fn database_of_mount(dir: &Path) -> Result<PathBuf, Failure> {
    let dir = crate::mount::absolute(dir)?;
    let source = crate::mount::mount_source(&dir).ok_or_else(|| {
        format!(
            "--mount {}: nothing is mounted there; give --db DB",
            dir.display()
        )
    })?;
    let is_ours = source.is_absolute()
        && source.is_file()
        && super::live_mountpoint(&source)
            .ok()
            .flatten()
            .is_some_and(|m| Path::new(&m) == dir);
    if !is_ours {
        return Err(format!(
            "--mount {}: not a scratchfs mount of a database file this user may read (a \
             PostgreSQL scratchpad, or a mount given --fsname: give --db DB)",
            dir.display()
        ));
    }
    Ok(source)
}

/// Serves the review page of `db` on `web.addr` until a signal ends it.
pub fn serve(db: &Path, web: Web) -> Result<(), Failure> {
    if !crate::http::loopback(&web.addr) && web.tls.is_none() {
        return Err(format!(
            "--listen {}: not a loopback address, and without TLS the token and every \
             page would cross the network in clear text; give --tls-cert FILE --tls-key \
             FILE, or listen on 127.0.0.1",
            web.addr
        ));
    }
    let tls = match &web.tls {
        Some((cert, key)) => Some(crate::http::tls_acceptor(cert, key)?),
        None => None,
    };
    let name = match super::postgres_url(db) {
        Some(url) => crate::store::postgres::display_name(url),
        None => crate::mount::absolute(db)?.display().to_string(),
    };
    let store: Arc<dyn crate::store::History> = Arc::from(super::open_history(db)?);
    let dir = crate::mcp::socket::runtime_dir().map_err(|e| e.reason)?;
    let (token, token_path) = crate::http::token(web.token_file.as_deref(), &dir, "web")?;
    let listener = std::net::TcpListener::bind(web.addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| format!("--listen {}: {e}", web.addr))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("the server's runtime: {e}"))?;
    let made = web.token_file.is_none().then(|| token_path.clone());
    let served = runtime.block_on(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut ends = Vec::new();
        for kind in [
            SignalKind::terminate(),
            SignalKind::interrupt(),
            SignalKind::hangup(),
        ] {
            ends.push(signal(kind).map_err(|e| format!("signals: {e}"))?);
        }
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| format!("--listen {}: {e}", web.addr))?;
        let at = listener.local_addr().map_err(|e| e.to_string())?;
        let server = crate::web::Web::new(store, token.clone(), name.clone());
        let service = hyper::service::service_fn(move |req| server.clone().handle(req));
        // The link carries the token in its fragment, which a browser never sends on.
        eprintln!(
            "scratchfs: the review page of {} is at {}://{at}/#token={token}",
            name,
            if tls.is_some() { "https" } else { "http" },
        );
        eprintln!(
            "scratchfs: its token is also the first line of {} (every /api/ request needs \
             Authorization: Bearer TOKEN)",
            token_path.display()
        );
        let serving = crate::http::serve(listener, tls, service, format!("web {at}"));
        let [a, b, c] = &mut ends[..] else {
            unreachable!("three signals")
        };
        tokio::select! {
            r = serving => r,
            _ = a.recv() => Ok(()),
            _ = b.recv() => Ok(()),
            _ = c.recv() => Ok(()),
        }
    });
    if let Some(made) = made {
        let _ = std::fs::remove_file(made);
    }
    runtime.shutdown_background();
    served
}
