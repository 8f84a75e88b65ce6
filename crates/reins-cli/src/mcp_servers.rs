//! The MCP servers of a run: the `--mcp NAME=COMMAND` flag and stopping the servers a run started.

use std::sync::Arc;

use clap::Args;
use reins_mcp::McpTools;

/// Flags that connect MCP servers.
#[derive(Args, Debug, Default, Clone)]
pub struct McpFlags {
    /// Connects an MCP server and gives the model its tools, named NAME__TOOL: 'NAME=COMMAND ARG...' starts a
    /// child process speaking MCP over stdio (split like a shell would, never run by one; killed with its
    /// process group at the end), 'NAME=URL' reaches a streamable HTTP endpoint. Repeatable; replaces a
    /// [mcp.NAME] table of the same name in --config.
    #[arg(long = "mcp", value_name = "NAME=COMMAND ARG...|NAME=URL")]
    pub servers: Vec<String>,
}

/// After a run: warns on stderr about tool refreshes that failed between steps, then shuts the servers down.
pub async fn finish(mcp: Option<&Arc<McpTools>>) {
    let Some(mcp) = mcp else {
        return;
    };
    for e in mcp.refresh_errors() {
        errln!("reins: warning: the tools of an MCP server could not be refreshed (its previous tools were kept): {e}");
    }
    mcp.shutdown().await;
}
