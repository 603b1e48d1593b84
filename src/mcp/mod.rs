//! The scratchpad for agents that call tools instead of running a shell (issue 12: the
//! Model Context Protocol), as a second adapter over the filesystem core beside the FUSE
//! one. [`tools`]: the tools' operations on the core (the same calls the FUSE adapter
//! makes); [`server`]: the rmcp handler that translates MCP to them; [`socket`]: the
//! mount's socket, through which `scratchfs mcp` runs calls in the daemon of a mounted
//! database; [`http`]: who may call the streamable HTTP server (a bearer token).

pub mod http;
pub mod memory;
pub mod resources;
pub mod search;
pub mod server;
pub mod socket;
pub mod tools;
