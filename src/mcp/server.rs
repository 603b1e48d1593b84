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
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

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
}

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
}

impl ServerHandler for Server {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
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
