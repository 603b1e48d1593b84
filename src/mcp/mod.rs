//! The scratchpad for agents that call tools instead of running a shell (issue 12: the
//! Model Context Protocol). [`tools`]: the tools' operations over the filesystem core,
//! the same calls the FUSE adapter makes. The MCP server (rmcp) is still to come: see
//! issue 12's notes.

pub mod tools;
