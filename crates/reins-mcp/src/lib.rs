//! # reins-mcp — tools from any Model Context Protocol server
//!
//! Connects to MCP servers — a child process over stdio (in its own process group, killed as a group at the
//! end) or a streamable HTTP endpoint — through the official Rust SDK (`rmcp`), and registers each server's
//! tools as Reins tools named `SERVER__TOOL`. Their input schemas are checked and compiled by the core
//! [`reins::Registry`], so every call is validated before it is sent; results map to Reins results, which
//! the core bounds. Each server has a start-up timeout and a per-call timeout: a server that crashes, hangs
//! or answers garbage yields error results, never a stuck run.
//!
//! ```no_run
//! # async fn demo() -> Result<(), reins_mcp::McpError> {
//! use reins_mcp::{McpTools, ServerConfig};
//! let fs = ServerConfig::parse_spec("fs=npx -y @modelcontextprotocol/server-filesystem /tmp")?;
//! let mcp = McpTools::start(vec![fs]).await?;
//! let registry = mcp.registry(Vec::new())?; // fs__read_text_file, fs__list_directory, ...
//! # let _ = registry;
//! mcp.shutdown().await;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod auth;
pub mod config;
pub mod elicit;
pub mod error;
pub mod frame;
mod http;
mod late_discover;
pub mod process;
pub mod resources;
pub mod result;
#[cfg(feature = "server")]
pub mod serve;
pub mod server;
/// The spill writer, shared with the built-in tools (it lives in `reins-tools`).
pub use reins_tools::spill;
pub mod tools;

pub use config::{
    ConfigError, DEFAULT_CALL_TIMEOUT, DEFAULT_STARTUP_TIMEOUT, KNOWN_PROTOCOLS, MAX_SERVER_NAME, ServerConfig,
    Transport, check_server_name, qualified_name,
};
pub use error::McpError;
pub use frame::{LineGuard, MAX_MESSAGE_BYTES};
pub use result::map_call_result;
pub use server::{
    IDEMPOTENCY_KEY_META, McpServer, PromptArgument, RemotePrompt, RemoteResource, RemoteTool, SHUTDOWN_GRACE,
};
pub use tools::{McpTool, McpToolSource, McpTools, ServerTools, list_server_tools, make_tools, server_tools};
