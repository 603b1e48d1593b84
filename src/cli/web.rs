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
    /// `--allow-actions`: restore, checkpoint and rollback from the page.
    pub allow_actions: bool,
}

/// The review page's actions on `db` (`--allow-actions`), each as this process, through
/// the commands' own paths ([`super::restore::restore_spec`], [`super::checkpoint::take`],
/// [`super::checkpoint::roll_back`]). Only root or the owner of an SQLite database (the
/// user who mounts it) may start a server with them (`EPERM`-like refusal, exit 1).
fn actions(db: &Path) -> Result<crate::web::Actions, Failure> {
    let euid = unsafe { libc::geteuid() };
    if super::postgres_url(db).is_none() && euid != 0 {
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(db)
            .map_err(|e| format!("{}: {e}", db.display()))?
            .uid();
        if owner != euid {
            return Err(format!(
                "--allow-actions: only root or the user who mounts {} (uid {owner}) may act \
                 on it from the page",
                db.display()
            ));
        }
    }
    let (csrf, _) = crate::http::random_token()?;
    let db2 = db.to_path_buf();
    Ok(crate::web::Actions {
        db: db.to_path_buf(),
        csrf,
        run: Box::new(move |what, form| {
            let field = |k: &str| form.get(k).unwrap_or("").to_string();
            let done = match what {
                "restore" => {
                    let n: i64 = field("n")
                        .parse()
                        .map_err(|_| "restore: n= is not a version number".to_string())?;
                    // The stored form of `path`, or of the exact bytes in `path_hex` (a
                    // name that is not UTF-8).
                    let path = form
                        .stored_path()
                        .map_err(|(_, e)| format!("restore: {e}"))?
                        .ok_or_else(|| "restore: give path= or path_hex=".to_string())?;
                    let spec = format!("{path}@{n}");
                    Ok(match super::restore::restore_spec(&db2, &spec)? {
                        super::restore::Restored::Done { n, .. } => {
                            serde_json::json!({ "restored": n })
                        }
                        super::restore::Restored::Already { current, .. } => {
                            serde_json::json!({ "restored": null, "current": current })
                        }
                    })
                }
                "checkpoint" => {
                    let note = field("note");
                    let cp = super::checkpoint::take(
                        &db2,
                        &field("name"),
                        (!note.is_empty()).then_some(note.as_str()),
                    )?;
                    serde_json::to_value(cp).map_err(|e| e.to_string())
                }
                "rollback" => {
                    let report = super::checkpoint::roll_back(&db2, &field("name"))?;
                    serde_json::to_value(report).map_err(|e| e.to_string())
                }
                other => Err(format!("no action {other}")),
            };
            // What the daemon acknowledged is made visible in the database before the
            // page reads it again (an SQLite mount folds its batch a few ms later).
            if done.is_ok() && super::postgres_url(&db2).is_none() {
                drop(super::open_sqlite(&db2));
            }
            done
        }),
    })
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
    let actions = if web.allow_actions {
        Some(actions(db)?)
    } else {
        None
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
        let server = crate::web::Web::new(store, token.clone(), name.clone(), actions);
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
