//! What can go wrong when starting servers and registering their tools.

use std::time::Duration;

use crate::config::ConfigError;

/// Why a server could not be started or its tools not registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The server process could not be started.
    #[error("MCP server {server:?}: could not start {command:?}: {reason}")]
    Spawn {
        /// The server's name.
        server: String,
        /// The program.
        command: String,
        /// The operating system's reason.
        reason: String,
    },
    /// The server did not complete `initialize` in time; it was killed.
    #[error(
        "MCP server {server:?} did not finish starting within {} and was stopped{}",
        humantime::format_duration(*timeout),
        if diagnosis.is_empty() { String::new() } else { format!(" ({diagnosis})") }
    )]
    StartupTimeout {
        /// The server's name.
        server: String,
        /// The start-up timeout.
        timeout: Duration,
        /// The process's exit status and stderr tail, when known.
        diagnosis: String,
    },
    /// The `initialize` handshake failed: the server exited, closed the connection or answered garbage.
    #[error("MCP server {server:?} failed to initialize: {reason}")]
    Initialize {
        /// The server's name.
        server: String,
        /// What went wrong.
        reason: String,
    },
    /// `tools/list` failed.
    #[error("MCP server {server:?} could not list its tools: {reason}")]
    ListTools {
        /// The server's name.
        server: String,
        /// What went wrong.
        reason: String,
    },
    /// Listing resources or prompts, or getting a prompt, failed.
    #[error("MCP server {server:?}: {what} failed: {reason}")]
    List {
        /// The server's name.
        server: String,
        /// The request (`resources/list`, `prompts/list`, `prompts/get`).
        what: String,
        /// What went wrong.
        reason: String,
    },
    /// A tool could not be registered: its qualified name is invalid or taken, or its schema is invalid.
    #[error("MCP server {server:?}: tool {tool:?} refused: {reason}")]
    Tool {
        /// The server's name.
        server: String,
        /// The tool's name on the server.
        tool: String,
        /// Why.
        reason: String,
    },
    /// Two configured servers share a name.
    #[error("two MCP servers are named {0:?}")]
    DuplicateServer(String),
    /// An HTTP server answered 401 and Reins has no login for it, or its login could not be refreshed.
    #[error("MCP server {server:?} needs a login: run `reins mcp login {server}`")]
    LoginRequired {
        /// The server's name.
        server: String,
    },
}
