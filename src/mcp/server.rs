//! The MCP adapter (issue 12): `scratchfs mcp` speaks the Model Context Protocol with the
//! official Rust SDK (rmcp), over stdio or streamable HTTP, and only translates: each
//! tool call becomes [`super::tools::call`] on the filesystem core, in this process when
//! it opened the database itself, or in the mount's daemon ([`super::socket`]) while the
//! database is mounted. A refused call is a tool error (`isError: true`) whose text is
//! the gate's one-line reason.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, ServerCapabilities, SubscribeRequestParams, Tool,
    ToolAnnotations, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use super::resources::{self, Target};
use super::socket::{self, Client, Request};
use super::tools::{self, Outcome};
use crate::fs::{Ctx, Fs};
use crate::sync::Mutex;

/// Where tool calls run.
pub enum Backend {
    /// On a core this process opened (the database is not mounted), as process `ctx`.
    Local(Arc<Fs>, Ctx),
    /// In the daemon of the mount, through its socket: connections are this process's,
    /// shared by its MCP sessions ([`Daemon`]).
    Daemon(Daemon),
}

impl Backend {
    /// Runs one tool call `req` where this backend runs them (blocking).
    pub fn call(&self, req: &Request) -> Outcome {
        match self {
            Backend::Local(fs, ctx) => socket::run_call(fs, *ctx, req),
            Backend::Daemon(daemon) => daemon.call(req),
        }
    }
}

/// The mount's daemon as this process reaches it: its socket, and the connections this
/// process holds there. A call takes one (or connects) and gives it back after, so no
/// session holds a connection between calls: fifty HTTP sessions in a row use the same
/// one or two, and none is left behind when a session ends. A connection idle long
/// enough for the daemon to close it ([`socket::IDLE`]) is dropped, not used.
pub struct Daemon {
    path: PathBuf,
    idle: Mutex<Vec<Client>>,
}

impl Daemon {
    /// The daemon listening at `path`.
    pub fn new(path: PathBuf) -> Daemon {
        Daemon {
            path,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Runs `req` on a connection of this process's.
    fn call(&self, req: &Request) -> Outcome {
        let held = loop {
            match self.idle.lock().pop() {
                Some(c) if c.stale() => continue,
                other => break other,
            }
        };
        let mut conn = match held {
            Some(c) => c,
            None => match Client::connect(&self.path) {
                Ok(c) => c,
                Err(e) => {
                    return Outcome::error(crate::error::Error::new(
                        libc::EIO,
                        format!("the mount's MCP socket {}: {e}", self.path.display()),
                    ));
                }
            },
        };
        let out = conn.call(req);
        // A connection that failed is dropped; the next call connects again.
        if !(out.is_error && out.text.starts_with("the mount's daemon:")) {
            self.idle.lock().push(conn);
        }
        out
    }
}

/// What `scratchfs mcp` was started with.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The writer of every call (`--writer`).
    pub writer: Option<String>,
    /// Only the reading tools (`--read-only`).
    pub read_only: bool,
    /// Put before every tool's name (`--tool-prefix`; empty: none).
    pub tool_prefix: String,
}

/// One MCP session's handler.
#[derive(Clone)]
pub struct Server {
    backend: Arc<Backend>,
    config: Arc<Config>,
    /// The session's resource subscriptions ([`super::resources`]).
    watch: Arc<Watch>,
}

/// A session's subscribed resource URIs, the state they were last compared with, and
/// whether its watcher runs.
#[derive(Default)]
struct Watch {
    uris: Mutex<std::collections::BTreeSet<String>>,
    then: Mutex<Option<resources::State>>,
    running: std::sync::atomic::AtomicBool,
    /// The state a `subscriptions/listen` stream about to be acknowledged compares with
    /// (2026-07-28; [`Server::listen`] takes it).
    listen_from: Mutex<Option<(resources::State, Option<u64>)>>,
    /// `subscriptions/listen` streams open ([`LISTEN_MAX`] at most).
    listening: std::sync::atomic::AtomicUsize,
}

/// Most `subscriptions/listen` streams a session keeps open at once.
const LISTEN_MAX: usize = 16;

/// One open listen stream, counted in [`Watch::listening`] until dropped.
struct Listening<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// How often a session with subscriptions compares the scratchpad with what it saw
/// (250 ms: a change reaches the client within about that, well within a second).
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// What the server tells a client it is for (`initialize`'s and `server/discover`'s
/// `instructions`), `{p}` standing for the tool prefix.
const INSTRUCTIONS: &str = "scratchfs: an external working memory. Files persist across turns and every \
write is a version with provenance. Start with `{p}list` (the index) and `{p}outline` (a file's \
shape, cheap); `{p}read` a section or a line range rather than a whole file; `{p}append` notes and \
`{p}replace` text instead of rewriting files. Nothing is lost: `{p}history`, `{p}read_version`, \
`{p}diff` and `{p}restore` reach every earlier version. A refused call says why.";

impl Server {
    /// A handler over `backend`.
    pub fn new(backend: Arc<Backend>, config: Config) -> Server {
        Server {
            backend,
            config: Arc::new(config),
            watch: Arc::new(Watch::default()),
        }
    }

    fn tools(&self) -> Vec<Tool> {
        tools::catalog()
            .into_iter()
            .filter(|t| t.reads_only || !self.config.read_only)
            .map(|t| {
                let object = |v: serde_json::Value| match v {
                    serde_json::Value::Object(m) => Arc::new(m),
                    _ => Default::default(),
                };
                let annotations =
                    serde_json::from_value::<ToolAnnotations>(t.annotations()).unwrap_or_default();
                let mut tool = Tool::new(
                    format!("{}{}", self.config.tool_prefix, t.name),
                    t.description,
                    object(t.schema),
                )
                .with_title(t.title)
                .with_annotations(annotations);
                if let Some(out) = t.output {
                    tool = tool.with_raw_output_schema(object(out));
                }
                tool
            })
            .collect()
    }

    /// Runs one call (blocking: on a thread of the runtime's blocking pool).
    fn run(&self, req: Request) -> Outcome {
        self.backend.call(&req)
    }

    /// A reading tool's call `tool` with `args` for the client `client`, run on the
    /// blocking pool; a refused call is an MCP error with the reason (`ENOENT`: resource
    /// not found).
    async fn reading(
        &self,
        tool: &str,
        args: serde_json::Value,
        client: &Option<Implementation>,
    ) -> Result<Outcome, ErrorData> {
        let req = Request {
            tool: tool.into(),
            args,
            writer: self.config.writer.clone(),
            client: client.as_ref().map(|c| c.name.clone()),
            client_version: client.as_ref().map(|c| c.version.clone()),
            read_only: true,
        };
        let me = self.clone();
        let out = tokio::task::spawn_blocking(move || me.run(req))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        if out.is_error {
            let errno = out
                .structured
                .as_ref()
                .and_then(|s| s["errno"].as_i64())
                .unwrap_or(0);
            return Err(if errno == i64::from(libc::ENOENT) {
                ErrorData::resource_not_found(out.text, None)
            } else {
                ErrorData::invalid_params(out.text, None)
            });
        }
        Ok(out)
    }

    /// The text of a file (or view, or version with `version`) read window by window
    /// with `tool` (`read` or `read_version`), at most [`resources::READ_MAX`] bytes.
    async fn whole(
        &self,
        tool: &str,
        path: &str,
        version: Option<i64>,
        client: &Option<Implementation>,
    ) -> Result<String, ErrorData> {
        let mut text = String::new();
        let mut offset = 0u64;
        loop {
            let mut args = serde_json::json!({ "path": path, "offset": offset });
            if let Some(n) = version {
                args["version"] = n.into();
            }
            let out = self.reading(tool, args, client).await?;
            let s = out.structured.unwrap_or_default();
            // `read` returns the window in `text`; `read_version` only in the text.
            let window = match s["text"].as_str() {
                Some(t) => t.to_string(),
                None => out
                    .text
                    .rsplit_once("\n[cut: read on with offset ")
                    .map_or(out.text.as_str(), |(w, _)| w)
                    .to_string(),
            };
            text.push_str(&window);
            match s["next_offset"].as_u64() {
                Some(next) if next > offset && text.len() < resources::READ_MAX => offset = next,
                Some(_) => {
                    text.push_str(&format!(
                        "\n[cut at {} bytes: read the rest with the read tool's offset]",
                        text.len()
                    ));
                    return Ok(text);
                }
                None => return Ok(text),
            }
        }
    }

    /// The scratchpad's state as `client` sees it, if it may have changed since the
    /// generation `seen` (updated): the cheap [`tools::CHANGE_MARK`] first, then the
    /// `list` only when the mark moved (or the daemon does not know the mark). `None`:
    /// nothing changed, or the reads failed.
    async fn state_if_changed(
        &self,
        client: &Option<Implementation>,
        seen: &mut Option<u64>,
    ) -> Option<resources::State> {
        let mark = self
            .reading(tools::CHANGE_MARK, serde_json::json!({}), client)
            .await
            .ok()
            .and_then(|o| o.structured?["generation"].as_u64());
        if mark.is_some() && mark == *seen {
            return None;
        }
        let out = self
            .reading("list", serde_json::json!({}), client)
            .await
            .ok()?;
        *seen = mark;
        Some(resources::State::of(&out.structured.unwrap_or_default()))
    }

    /// Starts this session's watcher once: every [`WATCH_EVERY`] it compares the
    /// scratchpad with what it last saw and tells the client which subscribed resources
    /// changed (`notifications/resources/updated`), until the client is gone.
    fn start_watching(&self, peer: rmcp::Peer<RoleServer>, client: Option<Implementation>) {
        use std::sync::atomic::Ordering;
        if self.watch.running.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let mut seen = None;
            loop {
                tokio::time::sleep(WATCH_EVERY).await;
                if peer.is_transport_closed() {
                    break;
                }
                let uris: Vec<String> = me.watch.uris.lock().iter().cloned().collect();
                if uris.is_empty() {
                    continue;
                }
                let Some(now) = me.state_if_changed(&client, &mut seen).await else {
                    continue;
                };
                let then = me.watch.then.lock().replace(now.clone());
                let Some(then) = then else { continue };
                for uri in resources::updated(&then, &now, &uris) {
                    let param = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
                    if peer.notify_resource_updated(param).await.is_err() {
                        return;
                    }
                }
            }
            me.watch.running.store(false, Ordering::SeqCst);
        });
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
        .with_server_info(Implementation::new("scratchfs", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS.replace("{p}", &self.config.tool_prefix))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let client = context.client_info();
        let out = self.reading("list", serde_json::json!({}), &client).await?;
        let s = out.structured.unwrap_or_default();
        let mut all = vec![
            Resource::new(resources::MANIFEST, "MANIFEST")
                .with_title("The scratchpad's index")
                .with_description(
                    "Every file with its size, tokens, version, writer and age, recent refusals \
                     and what can be restored: the index to keep in context.",
                )
                .with_mime_type("text/plain"),
        ];
        for f in s["files"].as_array().into_iter().flatten() {
            let Some(path) = f["path"].as_str() else {
                continue;
            };
            all.push(
                Resource::new(
                    format!("{}{}", resources::FILE, resources::encode(path)),
                    path,
                )
                .with_mime_type(mime(path))
                .with_size(f["bytes"].as_u64().unwrap_or(0)),
            );
        }
        Ok(ListResourcesResult::with_all_items(all))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(format!("{}{{+path}}", resources::FILE), "file")
                .with_description("A file of the scratchpad, as it is now"),
            ResourceTemplate::new(format!("{}{{+path}}", resources::OUTLINE), "outline")
                .with_description("A file's outline: its headings, keys or shape, with sizes")
                .with_mime_type("text/plain"),
            ResourceTemplate::new(
                format!("{}{{version}}/{{+path}}", resources::VERSION),
                "version",
            )
            .with_description("Version N of a file, as it was (history)"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let client = context.client_info();
        let uri = request.uri;
        let target =
            resources::parse(&uri).map_err(|e| ErrorData::resource_not_found(e.reason, None))?;
        let (text, mime_type) = match &target {
            Target::Manifest => (
                self.whole("read", "MANIFEST", None, &client).await?,
                "text/plain",
            ),
            Target::File(p) => (self.whole("read", p, None, &client).await?, mime(p)),
            Target::Outline(p) => (
                self.reading("outline", serde_json::json!({ "path": p }), &client)
                    .await?
                    .text,
                "text/plain",
            ),
            Target::Version(p, n) => (
                self.whole("read_version", p, Some(*n), &client).await?,
                mime(p),
            ),
        };
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, uri).with_mime_type(mime_type),
        ])
        .into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        resources::parse(&request.uri)
            .map_err(|e| ErrorData::resource_not_found(e.reason, None))?;
        let client = context.client_info();
        // What the scratchpad is now, so that a change right after this answer is seen.
        if self.watch.then.lock().is_none() {
            let out = self.reading("list", serde_json::json!({}), &client).await?;
            let now = resources::State::of(&out.structured.unwrap_or_default());
            self.watch.then.lock().get_or_insert(now);
        }
        self.watch.uris.lock().insert(request.uri);
        self.start_watching(context.peer.clone(), client);
        Ok(())
    }

    /// Protocol 2026-07-28's `subscriptions/listen`: the resource URIs of ours among
    /// those asked for (a URI we do not serve is left out of the acknowledgment).
    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        // Counted here, before the acknowledgment (a stream acknowledged but not yet in
        // `listen` counts), and refused past LISTEN_MAX (the SDK answers "method not
        // found"); `listen` gives the count back when the stream ends.
        use std::sync::atomic::Ordering;
        let counted = self
            .watch
            .listening
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < LISTEN_MAX).then_some(n + 1)
            });
        if counted.is_err() {
            log::warn!("a session asked for more than {LISTEN_MAX} listen streams at once");
            return None;
        }
        let ours: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| resources::parse(uri).is_ok())
            .cloned()
            .collect();
        let mut accepted = rmcp::model::SubscriptionFilter::default();
        if !ours.is_empty() {
            // What the stream compares with is read now, before the SDK acknowledges it
            // (then `listen` runs): a change right after the acknowledgment is seen.
            let req = |tool: &str| Request {
                tool: tool.into(),
                args: serde_json::json!({}),
                writer: self.config.writer.clone(),
                client: None,
                client_version: None,
                read_only: true,
            };
            // The mark before the list, so that a change between them is seen again.
            let both = || {
                let mark = self.run(req(tools::CHANGE_MARK));
                (mark, self.run(req("list")))
            };
            let (mark, out) = match tokio::runtime::Handle::try_current()
                .map(|h| h.runtime_flavor())
            {
                Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(both),
                _ => both(),
            };
            if !out.is_error {
                let now = resources::State::of(&out.structured.unwrap_or_default());
                let mark = (!mark.is_error)
                    .then(|| mark.structured?["generation"].as_u64())
                    .flatten();
                self.watch.listen_from.lock().get_or_insert((now, mark));
            }
            accepted.resource_subscriptions = Some(ours);
        }
        Some(accepted)
    }

    /// One `subscriptions/listen` stream (2026-07-28): every [`WATCH_EVERY`] the
    /// scratchpad is compared with what this stream last saw, as the caller sees it, and
    /// each accepted resource that changed is announced on the stream
    /// (`notifications/resources/updated`), until the client cancels it or goes.
    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        // Each stream is a task comparing the scratchpad every 250 ms: a client opening
        // thousands held the daemon connections of its uid (helper finding).
        // Counted in `accepted_subscription_filter`; given back when this stream ends.
        let _open = Listening(&self.watch.listening);
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let client = context.request_context().client_info();
        let state = |out: Outcome| resources::State::of(&out.structured.unwrap_or_default());
        let from = self.watch.listen_from.lock().take();
        let (mut then, mut seen) = match from {
            Some(from) => from,
            None => (
                state(self.reading("list", serde_json::json!({}), &client).await?),
                None,
            ),
        };
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                () = tokio::time::sleep(WATCH_EVERY) => {}
            }
            if uris.is_empty() {
                continue;
            }
            let Some(now) = self.state_if_changed(&client, &mut seen).await else {
                continue;
            };
            for uri in resources::updated(&then, &now, &uris) {
                if let Err(e) = context.sink().notify_resource_updated(uri).await {
                    log::info!("a listen stream ended: {e}");
                    return Ok(());
                }
            }
            then = now;
        }
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.watch.uris.lock().remove(&request.uri);
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // Who the client says it is: the request's own `_meta` (MCP 2026-07-28, no
        // handshake: `io.modelcontextprotocol/clientInfo` on every request), else the
        // `initialize` of its session (2025-11-25). A claim, not an authentication
        // (docs/rules.md: `mcp_client` is cooperative).
        let client = context.client_info();
        // A prefixed server answers only to prefixed names (`--tool-prefix`).
        let Some(tool) = request.name.strip_prefix(self.config.tool_prefix.as_str()) else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "no tool named {:?}",
                request.name
            ))])
            .into());
        };
        let req = Request {
            tool: tool.to_string(),
            args: serde_json::Value::Object(request.arguments.unwrap_or_default()),
            writer: self.config.writer.clone(),
            client: client.as_ref().map(|c| c.name.clone()),
            client_version: client.as_ref().map(|c| c.version.clone()),
            read_only: self.config.read_only,
        };
        let me = self.clone();
        let out = tokio::task::spawn_blocking(move || me.run(req))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let mut result = if out.is_error {
            CallToolResult::error(vec![ContentBlock::text(out.text)])
        } else {
            CallToolResult::success(vec![ContentBlock::text(out.text)])
        };
        result.structured_content = out.structured.filter(|s| s.is_object());
        Ok(result.into())
    }
}

/// The MIME type a file's name suggests: JSON, JSON lines, Markdown, else plain text.
fn mime(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, e)| e) {
        Some("json") => "application/json",
        Some("jsonl") => "application/jsonl",
        Some("md") => "text/markdown",
        _ => "text/plain",
    }
}
