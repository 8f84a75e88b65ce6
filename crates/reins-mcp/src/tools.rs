//! MCP tools as Reins tools, and the set of servers a run uses.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use reins::{
    Registry, RegistryError, Tool, ToolContext, ToolError, ToolOutput, ToolSource, ToolSpec, is_valid_tool_name,
};

use crate::config::{ServerConfig, qualified_name};
use crate::error::McpError;
use crate::server::{McpServer, RemoteTool};

/// One tool of an MCP server, registered as `SERVER__TOOL`. Its calls go to the server under its own name.
pub struct McpTool {
    spec: ToolSpec,
    remote: String,
    server: Arc<McpServer>,
    read_only: bool,
}

impl McpTool {
    /// The tool's name on its server.
    pub fn remote_name(&self) -> &str {
        &self.remote
    }

    /// Its server.
    pub fn server(&self) -> &Arc<McpServer> {
        &self.server
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    async fn call(&self, arguments: serde_json::Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let key = ctx.idempotency_key();
        self.server.call_keyed(&self.remote, arguments, &ctx.cancel, Some(&key)).await
    }
}

/// Makes the Reins tools of `server` from what it listed: each named `SERVER__TOOL`. A tool whose name is
/// invalid or repeated, or whose input schema is not a valid JSON Schema for an object (checked and compiled by
/// [`Registry`]), is left out — the server's other tools are kept — and returned with the reason
/// ([`McpError::Tool`]) in the second list.
pub fn make_tools(server: &Arc<McpServer>, listed: Vec<RemoteTool>) -> (Vec<Arc<dyn Tool>>, Vec<McpError>) {
    let mut seen = HashSet::with_capacity(listed.len());
    let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(listed.len());
    let mut refused = Vec::new();
    for remote in listed {
        let refuse =
            |reason: String| McpError::Tool { server: server.name().to_owned(), tool: remote.name.clone(), reason };
        let name = qualified_name(server.name(), &remote.name);
        if !is_valid_tool_name(&name) {
            refused.push(refuse(format!(
                "{name:?} is not a valid tool name (a letter, then up to 63 letters, digits, '_' or '-')"
            )));
            continue;
        }
        if !seen.insert(name.clone()) {
            refused.push(refuse("the server lists two tools with this name (the first is kept)".into()));
            continue;
        }
        let tool: Arc<dyn Tool> = Arc::new(McpTool {
            spec: ToolSpec { name, description: remote.description.clone(), input_schema: remote.input_schema.clone() },
            remote: remote.name.clone(),
            server: Arc::clone(server),
            read_only: remote.read_only,
        });
        match Registry::new(vec![Arc::clone(&tool)]) {
            Ok(_) => tools.push(tool),
            Err(RegistryError::InvalidSchema { reason, .. }) => {
                refused.push(refuse(format!("invalid input schema: {reason}")));
            }
            Err(e) => refused.push(refuse(e.to_string())),
        }
    }
    (tools, refused)
}

/// The MCP servers of a run and their current tools.
///
/// [`McpTools::registry`] builds a fresh [`Registry`] of these tools (plus any others); after a server sent
/// `notifications/tools/list_changed`, [`McpTools::refresh`] re-lists its tools so that the next registry
/// has them.
pub struct McpTools {
    servers: Vec<Arc<McpServer>>,
    tools: Mutex<Vec<Vec<Arc<dyn Tool>>>>,
    /// The tools each server listed that were left out, and why (as last listed).
    refused: Mutex<Vec<Vec<McpError>>>,
    refresh_errors: Mutex<Vec<McpError>>,
}

impl std::fmt::Debug for McpTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTools").field("servers", &self.servers).finish()
    }
}

impl McpTools {
    /// Starts every server (concurrently, each within its start-up timeout) and lists their tools. If any
    /// fails, the ones already started are shut down and the first error is returned.
    pub async fn start(configs: Vec<ServerConfig>) -> Result<McpTools, McpError> {
        let mut names = HashSet::new();
        for c in &configs {
            if !names.insert(c.name.clone()) {
                return Err(McpError::DuplicateServer(c.name.clone()));
            }
        }
        let results = futures_util::future::join_all(configs.into_iter().map(start_one)).await;
        let mut servers = Vec::with_capacity(results.len());
        let mut tools = Vec::with_capacity(results.len());
        let mut refused = Vec::with_capacity(results.len());
        let mut first_error = None;
        for r in results {
            match r {
                Ok((server, listed)) => {
                    servers.push(server);
                    tools.push(listed.tools);
                    refused.push(listed.refused);
                }
                Err((server, e)) => {
                    if let Some(s) = server {
                        s.shutdown().await;
                    }
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            for s in &servers {
                s.shutdown().await;
            }
            return Err(e);
        }
        Ok(McpTools {
            servers,
            tools: Mutex::new(tools),
            refused: Mutex::new(refused),
            refresh_errors: Mutex::new(Vec::new()),
        })
    }

    /// Writes every result over `max_chars` whole to a file beneath the scratch folder of the workspace at
    /// `root` (see [`crate::spill`]); the model gets its head and tail and the file's name.
    pub fn set_spill(&self, root: &std::path::Path, max_chars: usize) {
        self.set_spill_with(&crate::spill::Spill::new(root, max_chars));
    }

    /// [`McpTools::set_spill`] with every setting of the spill given (a read-only workspace, the folder's bounds).
    pub fn set_spill_with(&self, spill: &crate::spill::Spill) {
        for s in &self.servers {
            s.set_spill(spill.clone());
        }
    }

    /// The servers, in configuration order.
    pub fn servers(&self) -> &[Arc<McpServer>] {
        &self.servers
    }

    /// Every current tool, server by server.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools.lock().map(|t| t.iter().flatten().cloned().collect()).unwrap_or_default()
    }

    /// The tools the servers listed that were left out ([`make_tools`] says why), server by server: the
    /// command warns of each ([`McpTools::warnings`]).
    pub fn refused(&self) -> Vec<McpError> {
        self.refused.lock().map(|r| r.iter().flatten().cloned().collect()).unwrap_or_default()
    }

    /// A warning line for each tool left out, for the command to show before the run.
    pub fn warnings(&self) -> Vec<String> {
        self.refused().iter().map(|e| format!("{e}; it is left out, the server's other tools are offered")).collect()
    }

    /// A fresh registry of `others` followed by every MCP tool. A name taken twice is refused here.
    pub fn registry(&self, others: impl IntoIterator<Item = Arc<dyn Tool>>) -> Result<Registry, McpError> {
        let mut all: Vec<Arc<dyn Tool>> = others.into_iter().collect();
        all.extend(self.tools());
        Registry::new(all).map_err(|e| match e {
            RegistryError::Duplicate { name } => McpError::Tool {
                server: name.split_once("__").map_or_else(String::new, |(s, _)| s.to_owned()),
                tool: name.split_once("__").map_or_else(|| name.clone(), |(_, t)| t.to_owned()),
                reason: format!("{name:?} is already the name of another tool"),
            },
            other => McpError::Tool { server: String::new(), tool: String::new(), reason: other.to_string() },
        })
    }

    /// The failures of refreshes made between steps by an [`McpToolSource`] (the previous tools were kept),
    /// oldest first.
    pub fn refresh_errors(&self) -> Vec<McpError> {
        self.refresh_errors.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// True when some server announced a change of its tools since they were last listed.
    pub fn changed(&self) -> bool {
        self.servers.iter().any(|s| s.tools_changed())
    }

    /// Re-lists the tools of every server that announced a change. Returns true when any list was re-read.
    /// On error the previous tools of that server are kept.
    pub async fn refresh(&self) -> Result<bool, McpError> {
        let mut refreshed = false;
        for (i, server) in self.servers.iter().enumerate() {
            if !server.tools_changed() {
                continue;
            }
            let listed = list_server_tools(server).await?;
            if let Ok(mut all) = self.tools.lock() {
                if let Some(slot) = all.get_mut(i) {
                    *slot = listed.tools;
                }
            }
            if let Ok(mut all) = self.refused.lock() {
                if let Some(slot) = all.get_mut(i) {
                    *slot = listed.refused;
                }
            }
            refreshed = true;
        }
        Ok(refreshed)
    }

    /// Shuts every server down (stdio servers: stdin closed, a grace period, then the process group killed).
    pub async fn shutdown(&self) {
        futures_util::future::join_all(self.servers.iter().map(|s| s.shutdown())).await;
    }
}

/// A [`ToolSource`] over MCP servers: hand it to `AgentBuilder::tool_source`, and a server's
/// `tools/list_changed` makes the next model turn of a running agent see the server's new tools.
///
/// At each step boundary it re-lists the tools of the servers that announced a change and rebuilds the
/// registry (`others` first, then the MCP tools). When that fails — the server is gone, or a new tool is
/// refused — it keeps the previous registry and records the error ([`McpTools::refresh_errors`]).
pub struct McpToolSource {
    mcp: Arc<McpTools>,
    others: Vec<Arc<dyn Tool>>,
    current: Mutex<Arc<Registry>>,
}

impl McpToolSource {
    /// A source over `mcp` plus `others`; fails as [`McpTools::registry`] does.
    pub fn new(mcp: Arc<McpTools>, others: Vec<Arc<dyn Tool>>) -> Result<McpToolSource, McpError> {
        let registry = Arc::new(mcp.registry(others.iter().cloned())?);
        Ok(McpToolSource { mcp, others, current: Mutex::new(registry) })
    }

    /// The registry in force now.
    pub fn current(&self) -> Arc<Registry> {
        self.current.lock().map(|r| Arc::clone(&r)).unwrap_or_else(|_| Arc::new(Registry::empty()))
    }

    /// The last refresh failure, if any.
    pub fn last_error(&self) -> Option<McpError> {
        self.mcp.refresh_errors().pop()
    }

    /// The servers.
    pub fn tools(&self) -> &Arc<McpTools> {
        &self.mcp
    }
}

#[async_trait]
impl ToolSource for McpToolSource {
    /// What the servers asked the person during the batch (one `elicitation` event each).
    fn take_events(&self) -> Vec<reins::EventKind> {
        self.mcp.servers.iter().flat_map(|s| s.take_events()).collect()
    }

    async fn registry(&self) -> Arc<Registry> {
        if self.mcp.changed() {
            let rebuilt = match self.mcp.refresh().await {
                Ok(_) => self.mcp.registry(self.others.iter().cloned()),
                Err(e) => Err(e),
            };
            match rebuilt {
                Ok(r) => {
                    if let Ok(mut current) = self.current.lock() {
                        *current = Arc::new(r);
                    }
                }
                Err(e) => {
                    if let Ok(mut errors) = self.mcp.refresh_errors.lock() {
                        errors.push(e);
                    }
                }
            }
        }
        self.current()
    }
}

type StartError = (Option<Arc<McpServer>>, McpError);

async fn start_one(config: ServerConfig) -> Result<(Arc<McpServer>, ServerTools), StartError> {
    let server = Arc::new(McpServer::connect(config).await.map_err(|e| (None, e))?);
    match list_server_tools(&server).await {
        Ok(listed) => Ok((server, listed)),
        Err(e) => Err((Some(server), e)),
    }
}

/// What a server gives the model, and the tools of it left out.
pub struct ServerTools {
    /// Its own tools (those Reins could take), then its resource tools.
    pub tools: Vec<Arc<dyn Tool>>,
    /// The tools it listed that were left out, and why ([`make_tools`]).
    pub refused: Vec<McpError>,
}

/// Every tool `server` gives the model: its own tools (listed now; the malformed ones left out), then its
/// resource tools ([`crate::resources::resource_tools`]) when it offers resources.
pub async fn server_tools(server: &Arc<McpServer>) -> Result<Vec<Arc<dyn Tool>>, McpError> {
    Ok(list_server_tools(server).await?.tools)
}

/// [`server_tools`], with the tools left out and why.
pub async fn list_server_tools(server: &Arc<McpServer>) -> Result<ServerTools, McpError> {
    let (mut tools, refused) = make_tools(server, server.list_tools().await?);
    let taken: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
    tools.extend(crate::resources::resource_tools(server, &taken));
    Ok(ServerTools { tools, refused })
}
