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

/// Serves until stdin closes (stdio) or forever (`listen`).
pub fn serve(
    db: &Path,
    rules: Option<&Path>,
    config: Config,
    listen: Option<SocketAddr>,
) -> Result<(), Failure> {
    if config.writer.as_deref().is_some_and(str::is_empty) {
        return Err("--writer: an empty name".into());
    }
    if let Some(url) = super::postgres_url(db) {
        // On PostgreSQL this process is one more daemon on the database (docs/deploy.md):
        // its calls commit there as a mount's do, and it refreshes on the others' changes;
        // `--rules` become the database's rules, as a mount's do.
        let ctx = Ctx {
            pid: std::process::id(),
            uid: unsafe { libc::geteuid() },
            gid: unsafe { libc::getegid() },
        };
        let fs = crate::mount::open_postgres(url, (ctx.uid, ctx.gid), rules, |fs| fs)?;
        check_writer(&fs, config.writer.as_deref(), ctx)?;
        return run_server(Arc::new(Backend::Local(fs, ctx)), config, listen);
    }
    let db = crate::mount::absolute(db)?;
    // A file that is not a scratchfs database is left as it is; a missing one is made,
    // with the default layout, as a first mount makes it.
    let missing = matches!(
        crate::store::probe(&db).map_err(|e| e.reason)?,
        crate::store::Probe::Missing
    );
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
            let (mut fs, _) = super::offline_fs_fresh(&db)?;
            let mut text = None;
            if let Some(path) = rules {
                let (t, parsed) = crate::rules::load(path)?;
                fs = fs.with_rules(crate::rules::enforce::Compiled::new(parsed));
                text = Some(t);
            }
            let ctx = Ctx {
                pid: std::process::id(),
                uid: unsafe { libc::geteuid() },
                gid: unsafe { libc::getegid() },
            };
            check_writer(&fs, config.writer.as_deref(), ctx)?;
            if let Some(text) = text {
                // Recorded as a mount's are: the rules this scratchpad ran under, which
                // the next offline command checks against.
                fs.store()
                    .record_rules(&text, &crate::identity::Caller::internal("scratchfs"))
                    .map_err(|e| format!("{}: {e}", db.display()))?;
            }
            Backend::Local(Arc::new(fs), ctx)
        }
        Err(_) => {
            if rules.is_some() {
                return Err(format!(
                    "--rules: {} is mounted; its calls run under the mount's rules",
                    db.display()
                ));
            }
            // The mount's rules are the last recorded: a --writer is checked against them
            // now, as the daemon checks it again at each call.
            if let Some(w) = config.writer.as_deref()
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
                Some(p) if !p.is_empty() && super::live_mountpoint(&db)?.is_some() => {
                    Backend::Daemon(crate::mcp::server::Daemon::new(p.into()))
                }
                _ => {
                    return Err(format!(
                        "{}: in use by another process, and not mounted (no MCP socket)",
                        db.display()
                    ));
                }
            }
        }
    };
    run_server(Arc::new(backend), config, listen)
}

/// Serves `backend` over stdio, or streamable HTTP at `listen`, until the client leaves.
fn run_server(
    backend: Arc<Backend>,
    config: Config,
    listen: Option<SocketAddr>,
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
        match listen {
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
            Some(addr) => http(backend, config, addr).await,
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

/// Streamable HTTP at `http://ADDR/mcp`, one session per client.
async fn http(backend: Arc<Backend>, config: Config, addr: SocketAddr) -> Result<(), Failure> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpService, session::local::LocalSessionManager,
    };
    let service = TowerToHyperService::new(StreamableHttpService::new(
        move || Ok(Server::new(backend.clone(), config.clone())),
        LocalSessionManager::default().into(),
        Default::default(),
    ));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("--listen {addr}: {e}"))?;
    eprintln!(
        "scratchfs: MCP over streamable HTTP at http://{}/mcp",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    loop {
        let (stream, _) = listener
            .accept()
            .await
            .map_err(|e| format!("--listen {addr}: {e}"))?;
        let service = service.clone();
        tokio::spawn(async move {
            let _ = Builder::new(TokioExecutor::default())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
