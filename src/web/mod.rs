//! `scratchfs web` (issue 35, docs/web.md): the review page. A thin adapter over the
//! store's read port ([`crate::store::History`]) and the JSON the command line's `--json`
//! outputs print ([`crate::report`]): it holds no SQL and decides nothing the commands do
//! not.
//!
//! - `GET /`, `/app.js`, `/style.css`: the page's shell, embedded in the binary at build
//!   time (no node, no CDN at run time). The same bytes for everyone, holding no data of
//!   the scratchpad, so served without the token (a browser cannot send a header on a
//!   typed link); the token travels in the link's fragment (`#token=...`), which browsers
//!   never send to a server, and the page sends it as `Authorization: Bearer` on every
//!   request for data.
//! - `/api/...`: the data, each answered `401 Unauthorized` without the bearer token
//!   (RFC 6750; compared in constant time, [`crate::http::bears`]). Read-only, unless
//!   the server was started with [`Actions`] (`--allow-actions`): then `POST
//!   /api/restore`, `/api/checkpoint` and `/api/rollback` also need `X-CSRF-Token`
//!   (403 otherwise, and always without actions).
//! - `GET /api/live`: server-sent events (HTML Living Standard, "Server-sent events"): an
//!   event `change` with the newest version and event ids each time they move (the store
//!   is asked every [`POLL`] by one task for all clients), a comment every 15 s.
//!
//! - `GET /api/activity?spans=N` (`scratchfs log --activity --json`) and
//!   `GET /api/refused?event=ID` (`scratchfs show --refused ID --json`).
//!
//! Errors are JSON `{"error": TEXT}` with 400 (a bad argument), 403 (an action not
//! allowed), 404 (no such file or version), 409 (an action refused: its reason), 413 (a
//! body over [`BODY_MAX`]), 500 (the store failed), 503 (an activity asked while another
//! is replayed).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};

use crate::store::{History, LogCursor, LogFilter, PageFilter, paths};

/// The page's HTML shell.
const INDEX_HTML: &str = include_str!("assets/index.html");
/// The page's script.
const APP_JS: &str = include_str!("assets/app.js");
/// The page's style sheet.
const STYLE_CSS: &str = include_str!("assets/style.css");

/// How often the live task asks the store for its newest ids (200 ms): a commit shows on
/// the page within this and one page fetch.
pub const POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// Largest request body read (a reply to ground, an action's form), in bytes (64 KiB): a
/// reply's every number is a finding with its sources, about 5 KB each in memory, so a
/// body of 1 MiB of digits cost the server 2.5 GB (attack round); 64 KiB holds any final
/// answer and costs at most about 150 MB.
pub const BODY_MAX: usize = 64 << 10;

/// Most keys of a file whose credit (`why`'s setter) `/api/history` adds (64): each costs
/// a `why` of the key.
pub const CREDITED_KEYS: usize = 64;

/// Most rows of a timeline page (500); 100 when not asked.
pub const PAGE_MAX: usize = 500;

/// A response body: whole, or a stream of events.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// What the server serves from: the store (read-only), the token, the database's name.
pub struct Web {
    store: Arc<dyn History>,
    token: String,
    name: String,
    live: tokio::sync::watch::Receiver<LogCursor>,
    actions: Option<Actions>,
    /// Held while an activity is replayed: one at a time (it reads every version).
    replaying: std::sync::Mutex<()>,
}

/// The actions a server started with `--allow-actions` takes (restore, checkpoint,
/// rollback), each as the server's own process, through the mount's daemon when the
/// database is mounted: the gate judges and records them as it does the commands'.
pub struct Actions {
    /// The database (as the commands take it).
    pub db: std::path::PathBuf,
    /// The token every action request must carry in `X-CSRF-Token` besides the bearer
    /// token (given to the page by `/api/info`).
    pub csrf: String,
    /// Runs one action on a blocking thread: `(what, args)` to the JSON it answers.
    pub run: Box<ActionFn>,
}

/// An action of the page: `("restore" | "checkpoint" | "rollback", the form)` to the JSON
/// it answers, or the failure shown (409).
pub type ActionFn = dyn Fn(&str, &Query) -> Result<serde_json::Value, String> + Send + Sync;

impl Web {
    /// A server over `store` (named `name` on the page, without credentials), behind
    /// `token`, with the task that watches the store for changes (on the current tokio
    /// runtime; the store is only ever asked on blocking threads, since a PostgreSQL
    /// store runs a runtime of its own).
    pub fn new(
        store: Arc<dyn History>,
        token: String,
        name: String,
        actions: Option<Actions>,
    ) -> Arc<Web> {
        let (tx, rx) = tokio::sync::watch::channel(LogCursor {
            version: 0,
            event: 0,
        });
        let watched = store.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let s = watched.clone();
                let Ok(Ok(head)) = tokio::task::spawn_blocking(move || s.log_head()).await else {
                    continue;
                };
                tx.send_if_modified(|now| {
                    let moved = *now != head;
                    *now = head;
                    moved
                });
                if tx.is_closed() && tx.receiver_count() == 0 {
                    return;
                }
            }
        });
        Arc::new(Web {
            store,
            token,
            name,
            live: rx,
            actions,
            replaying: std::sync::Mutex::new(()),
        })
    }

    /// Answers one request.
    pub async fn handle<B>(
        self: Arc<Self>,
        req: http::Request<B>,
    ) -> Result<Response<Body>, Infallible>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or("").to_string();
        let static_asset = |ty: &'static str, text: &'static str| {
            Ok(reply(
                StatusCode::OK,
                ty,
                Bytes::from_static(text.as_bytes()),
            ))
        };
        match (req.method(), path.as_str()) {
            (&Method::GET, "/" | "/index.html") => {
                return static_asset("text/html; charset=utf-8", INDEX_HTML);
            }
            (&Method::GET, "/app.js") => {
                return static_asset("text/javascript; charset=utf-8", APP_JS);
            }
            (&Method::GET, "/style.css") => {
                return static_asset("text/css; charset=utf-8", STYLE_CSS);
            }
            _ => {}
        }
        if !path.starts_with("/api/") {
            return Ok(error(StatusCode::NOT_FOUND, format!("no page {path}")));
        }
        if !crate::http::bears(req.headers().get(header::AUTHORIZATION), &self.token) {
            let mut r = error(
                StatusCode::UNAUTHORIZED,
                "this page needs the token scratchfs web printed at start (the link's \
                 #token=...), as Authorization: Bearer TOKEN"
                    .into(),
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            return Ok(r);
        }
        let q = Query::parse(&query);
        if (req.method(), path.as_str()) == (&Method::GET, "/api/live") {
            return Ok(self.live());
        }
        let method = req.method().clone();
        let action = matches!(
            path.as_str(),
            "/api/restore" | "/api/checkpoint" | "/api/rollback"
        );
        if action {
            match &self.actions {
                None => {
                    return Ok(error(
                        StatusCode::FORBIDDEN,
                        "this page is read-only: start scratchfs web with --allow-actions".into(),
                    ));
                }
                Some(a) => {
                    let given = req
                        .headers()
                        .get("x-csrf-token")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    if method != Method::POST || !crate::http::same_token(given, &a.csrf) {
                        return Ok(error(
                            StatusCode::FORBIDDEN,
                            "an action needs POST and the page's X-CSRF-Token".into(),
                        ));
                    }
                }
            }
        }
        let body = if method == Method::POST {
            match read_body(req.into_body()).await {
                Ok(b) => b,
                Err(r) => return Ok(r),
            }
        } else {
            Vec::new()
        };
        let web = self.clone();
        let answer = tokio::task::spawn_blocking(move || {
            if action {
                let form = Query::parse(&String::from_utf8_lossy(&body));
                let run = &web.actions.as_ref().expect("checked above").run;
                return run(path.trim_start_matches("/api/"), &form)
                    .map_err(|e| (StatusCode::CONFLICT, e));
            }
            web.api(&method, &path, &q, &body)
        })
        .await;
        Ok(match answer {
            Ok(Ok(v)) => reply(
                StatusCode::OK,
                "application/json",
                Bytes::from(v.to_string()),
            ),
            Ok(Err((status, msg))) => error(status, msg),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}")),
        })
    }

    /// The data endpoints (see the module's docs), on a blocking thread.
    fn api(
        &self,
        method: &Method,
        path: &str,
        q: &Query,
        body: &[u8],
    ) -> Result<serde_json::Value, (StatusCode, String)> {
        let store = &*self.store;
        let not_found = |m: String| (StatusCode::NOT_FOUND, m);
        match (method.as_str(), path) {
            ("GET", "/api/info") => Ok(serde_json::json!({
                "database": self.name,
                "head": store.log_head().map_err(failed)?,
                "read_only": self.actions.is_none(),
                "csrf": self.actions.as_ref().map(|a| a.csrf.clone()),
            })),
            ("GET", "/api/compare") => {
                let point = |key: &str| -> Result<crate::checkpoint::Point, (StatusCode, String)> {
                    match q.get(key).unwrap_or("now") {
                        "now" => store.point_at(crate::store::sql::now_ns()).map_err(failed),
                        name => store
                            .checkpoint_named(name)
                            .map_err(failed)?
                            .map(|c| c.point)
                            .ok_or_else(|| not_found(format!("no checkpoint {name:?}"))),
                    }
                };
                crate::report::compare(store, point("from")?, point("to")?)
                    .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e))
            }
            ("GET", "/api/timeline") => self.timeline(q).map_err(failed),
            ("GET", "/api/history") => self.history(q),
            ("GET", "/api/version") => {
                let path = q.path()?;
                let n = q.number("n")?;
                let label = format!("{path}@{}", n.map_or("".into(), |n| n.to_string()));
                let v = crate::report::version_in(store, &path, n, &label).map_err(not_found)?;
                let mut o = crate::report::version_json(store, &v).map_err(not_found)?;
                match crate::report::version_text(store, &v, &label, "show", "see scratchfs show") {
                    Ok(t) => o["text"] = t.into(),
                    Err(e) => o["not_text"] = e.into(),
                }
                Ok(o)
            }
            ("GET", "/api/diff") => {
                let path = q.path()?;
                let a = crate::report::version_in(store, &path, q.number("a")?, &path)
                    .map_err(not_found)?;
                let b = crate::report::version_in(store, &path, q.number("b")?, &path)
                    .map_err(not_found)?;
                crate::report::diff_json(store, &a, &b).map_err(|e| (StatusCode::BAD_REQUEST, e))
            }
            ("GET", "/api/why") => self.why(q),
            ("POST", "/api/ground") => {
                let reply = String::from_utf8_lossy(body);
                let mut found = store.ground_sources().map_err(failed)?;
                crate::report::follow_ground_origins(&mut found);
                let findings = crate::lineage::ground::ground(&reply, &found.sources);
                let status = crate::lineage::ground::exit_status(&findings);
                Ok(
                    serde_json::json!({ "tokens": findings, "exit": status, "skipped": found.skipped }),
                )
            }
            ("GET", "/api/refused") => {
                let event = q
                    .number("event")?
                    .ok_or_else(|| (StatusCode::BAD_REQUEST, "give event=".to_string()))?;
                crate::report::refused_json(store, event).map_err(not_found)
            }
            ("GET", "/api/activity") => {
                let spans = q.number("spans")?.unwrap_or(60).clamp(1, 500) as usize;
                // One replay at a time: another asked meanwhile is told to come back.
                let _one = self.replaying.try_lock().map_err(|_| {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the activity is being replayed for another request: ask again".into(),
                    )
                })?;
                crate::report::activity(store, spans)
                    .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e))
            }
            ("GET", "/api/checkpoints") => {
                let cps = store.checkpoints().map_err(failed)?;
                serde_json::to_value(&cps)
                    .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
            }
            _ => Err((
                StatusCode::NOT_FOUND,
                format!("no endpoint {method} {path}"),
            )),
        }
    }

    /// `GET /api/history?path=P&limit=N&before=V`: a page of a file's versions (oldest
    /// first, as `history --json`), the next page's start, and its keys with who last
    /// changed each and, when a rollback, a restore or an adopt did, who `why` credits.
    fn history(&self, q: &Query) -> Result<serde_json::Value, (StatusCode, String)> {
        let store = &*self.store;
        let not_found = |m: String| (StatusCode::NOT_FOUND, m);
        let path = q.path()?;
        let id = crate::report::file_id(store, &path).map_err(not_found)?;
        let before = q.number("before")?.unwrap_or(i64::MAX);
        let limit = q.limit(200)?;
        let mut page = store
            .version_rows_page(id, before, limit + 1)
            .map_err(failed)?;
        let more = page.len() > limit;
        page.truncate(limit);
        let next = more.then(|| page.last().map(|v| v.version)).flatten();
        // Oldest first, as `history --json` prints them.
        page.reverse();
        let mut out = Vec::new();
        for v in &page {
            out.push(crate::report::version_json(store, v).map_err(not_found)?);
        }
        let fields = store.fields(id).map_err(failed)?;
        let mut keys = serde_json::to_value(&fields)
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        // Who why credits each key with, when a rollback, a restore or an adopt
        // made the last change (a live file's keys, at most CREDITED_KEYS).
        if fields.len() <= CREDITED_KEYS && store.live_head(&path).map_err(failed)?.is_some() {
            for (i, f) in fields.iter().enumerate() {
                if let Ok(mut w) = store.why(&path, Some(&f.key), 0) {
                    crate::report::follow_origins(&mut w, 0);
                    if let Some(c) = crate::report::credited_json(&w) {
                        keys[i]["credited"] = c;
                    }
                }
            }
        }
        Ok(serde_json::json!({ "versions": out, "next": next, "keys": keys }))
    }

    /// `GET /api/why?target=P[:KEY]&depth=D`: `why --json`, an adopted version followed
    /// to its fork.
    fn why(&self, q: &Query) -> Result<serde_json::Value, (StatusCode, String)> {
        let store = &*self.store;
        let target = q.get("target").unwrap_or_default();
        let target = paths::encode(target.as_bytes()).into_owned();
        let target = target.trim_start_matches('/');
        let (path, key) = crate::lineage::why::split_target(store, target).map_err(failed)?;
        let depth = q
            .number("depth")?
            .map_or(crate::lineage::why::DEFAULT_DEPTH, |d| {
                d.clamp(0, 16) as usize
            });
        let mut w = store.why(path, key, depth).map_err(failed)?;
        crate::report::follow_origins(&mut w, depth);
        serde_json::to_value(&w).map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
    }

    /// `GET /api/timeline?before=V.E&limit=N&path=P&writer=W&op=OP&step=S&rejected=1`:
    /// `{"entries": [...], "next": "V.E" | null}`, newest first; each entry as a line of
    /// `scratchfs log --json` ([`crate::report::log_entry_json`]).
    fn timeline(&self, q: &Query) -> crate::store::error::Result<serde_json::Value> {
        let invalid = |m: String| {
            crate::store::error::StoreError::new(crate::store::error::ErrorKind::Invalid, m)
        };
        let before = match q.get("before") {
            None | Some("") => LogCursor::NEWEST,
            Some(c) => {
                let (v, e) = c
                    .split_once('.')
                    .and_then(|(v, e)| Some((v.parse().ok()?, e.parse().ok()?)))
                    .ok_or_else(|| invalid(format!("before={c}: not VERSION.EVENT")))?;
                LogCursor {
                    version: v,
                    event: e,
                }
            }
        };
        let limit = q.limit(100).map_err(|(_, m)| invalid(m))?;
        let path = q.stored_path().map_err(|(_, m)| invalid(m))?;
        let filter = PageFilter {
            log: LogFilter {
                lossy: path.as_deref().and_then(paths::lossy),
                path,
                rejected: q.get("rejected") == Some("1"),
            },
            writer: q
                .get("writer")
                .filter(|w| !w.is_empty())
                .map(str::to_string),
            op: q.get("op").filter(|w| !w.is_empty()).map(str::to_string),
            step: match q.get("step") {
                None | Some("") => None,
                Some(s) => Some(
                    s.parse()
                        .map_err(|_| invalid(format!("step={s}: not a number")))?,
                ),
            },
        };
        let (rows, next) = self.store.log_page(&filter, before, limit)?;
        let entries: Vec<serde_json::Value> = rows
            .into_iter()
            .map(|e| crate::report::log_entry_json(&*self.store, e))
            .collect();
        Ok(serde_json::json!({
            "entries": entries,
            "next": next.map(|c| format!("{}.{}", c.version, c.event)),
        }))
    }

    /// `GET /api/live`: an event `change` now and at each move of the newest ids.
    fn live(&self) -> Response<Body> {
        let rx = self.live.clone();
        let events = futures_util::stream::unfold((rx, true), |(mut rx, first)| async move {
            if !first {
                let keep_alive = tokio::time::sleep(std::time::Duration::from_secs(15));
                tokio::select! {
                    changed = rx.changed() => {
                        changed.ok()?;
                    }
                    _ = keep_alive => {
                        let frame = http_body::Frame::data(Bytes::from_static(b": keep-alive\n\n"));
                        return Some((Ok::<_, Infallible>(frame), (rx, false)));
                    }
                }
            }
            let head = *rx.borrow_and_update();
            let text = format!(
                "event: change\ndata: {{\"version\":{},\"event\":{}}}\n\n",
                head.version, head.event
            );
            Some((Ok(http_body::Frame::data(Bytes::from(text))), (rx, false)))
        });
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-store")
            .body(http_body_util::StreamBody::new(events).boxed_unsync())
            .expect("a valid response")
    }
}

/// A store's failure as a status: 404 for what is not there, 400 for a bad argument, else
/// 500.
fn failed(e: crate::store::error::StoreError) -> (StatusCode, String) {
    let status = match e.kind {
        crate::store::error::ErrorKind::NotFound => StatusCode::NOT_FOUND,
        crate::store::error::ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, e.reason)
}

/// A response with `body` of type `ty`, never cached, with the page's security headers.
fn reply(status: StatusCode, ty: &'static str, body: Bytes) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, ty)
        .header(header::CACHE_CONTROL, "no-store")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::REFERRER_POLICY, "no-referrer")
        .header(header::X_FRAME_OPTIONS, "DENY")
        // Only the page's own script and style; nothing inline, nothing from elsewhere.
        .header(
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        )
        .body(Full::new(body).boxed_unsync())
        .expect("a valid response")
}

/// `{"error": message}` with `status`.
fn error(status: StatusCode, message: String) -> Response<Body> {
    let body = serde_json::json!({ "error": message }).to_string();
    reply(status, "application/json", Bytes::from(body))
}

/// A request's body, at most [`BODY_MAX`] bytes (413 past it).
async fn read_body<B>(body: B) -> Result<Vec<u8>, Response<Body>>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // A body announced too large is refused before it is waited for.
    if http_body::Body::size_hint(&body).lower() > BODY_MAX as u64 {
        return Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body: at most {BODY_MAX} bytes"),
        ));
    }
    let limited = http_body_util::Limited::new(body, BODY_MAX);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes().to_vec()),
        Err(e) => Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body: {e} (at most {BODY_MAX} bytes)"),
        )),
    }
}

/// A query string's parameters, percent-decoded (`+` as a space, as forms send it).
#[derive(Debug, Default)]
pub struct Query(Vec<(String, Vec<u8>)>);

impl Query {
    /// Parses `a=1&b=x%20y`.
    pub fn parse(q: &str) -> Query {
        let decode = |s: &str| -> Vec<u8> {
            percent_encoding::percent_decode_str(&s.replace('+', " ")).collect()
        };
        Query(
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (String::from_utf8_lossy(&decode(k)).into_owned(), decode(v))
                })
                .collect(),
        )
    }

    /// The value of `key` as UTF-8 text (`None`: absent or not UTF-8).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.raw(key).and_then(|v| std::str::from_utf8(v).ok())
    }

    fn raw(&self, key: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_slice())
    }

    /// The stored form of `path` (raw bytes, any encoding) or of `path_hex` (the exact
    /// bytes of a name that is not UTF-8, as `--json` gives them), without a leading `/`;
    /// `None` when neither is given.
    pub fn stored_path(&self) -> Result<Option<String>, (StatusCode, String)> {
        let raw = match (self.raw("path_hex"), self.raw("path")) {
            (Some(h), _) if !h.is_empty() => {
                let h = std::str::from_utf8(h).unwrap_or("");
                // ASCII hex digits only: a slice inside a character would panic, and
                // from_str_radix takes a leading `+`.
                if !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err((StatusCode::BAD_REQUEST, "path_hex: not hex digits".into()));
                }
                if !h.len().is_multiple_of(2) {
                    return Err((
                        StatusCode::BAD_REQUEST,
                        "path_hex: an odd number of digits".into(),
                    ));
                }
                (0..h.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&h[i..i + 2], 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map_err(|_| (StatusCode::BAD_REQUEST, "path_hex: not hex".to_string()))?
            }
            (_, Some(p)) if !p.is_empty() => p.to_vec(),
            _ => return Ok(None),
        };
        let stored = paths::encode(&raw).into_owned();
        Ok(Some(stored.trim_start_matches('/').to_string()))
    }

    /// [`Query::stored_path`], required.
    fn path(&self) -> Result<String, (StatusCode, String)> {
        self.stored_path()?
            .ok_or_else(|| (StatusCode::BAD_REQUEST, "give path= (or path_hex=)".into()))
    }

    /// `limit=N`: 1 to [`PAGE_MAX`], `default` when absent.
    fn limit(&self, default: usize) -> Result<usize, (StatusCode, String)> {
        match self.get("limit") {
            None | Some("") => Ok(default),
            Some(n) => n
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=PAGE_MAX).contains(n))
                .ok_or_else(|| {
                    (
                        StatusCode::BAD_REQUEST,
                        format!("limit={n}: not 1 to {PAGE_MAX}"),
                    )
                }),
        }
    }

    /// The number `key` holds, `None` when absent or empty.
    fn number(&self, key: &str) -> Result<Option<i64>, (StatusCode, String)> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(n) => n
                .parse()
                .map(Some)
                .map_err(|_| (StatusCode::BAD_REQUEST, format!("{key}={n}: not a number"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_percent_and_plus_and_keep_raw_bytes() {
        let q = Query::parse("path=a%20b+c.md&n=3&path_hex=&x=%ff");
        assert_eq!(q.get("path"), Some("a b c.md"));
        assert_eq!(q.number("n").unwrap(), Some(3));
        assert_eq!(q.get("x"), None, "not UTF-8");
        assert_eq!(q.raw("x"), Some(&[0xff][..]));
        assert!(q.number("path").is_err());
        let q = Query::parse("path_hex=6bff");
        assert_eq!(
            q.stored_path().unwrap(),
            Some(paths::encode(b"k\xff").into_owned())
        );
        assert!(Query::parse("path_hex=6").stored_path().is_err());
    }
}
