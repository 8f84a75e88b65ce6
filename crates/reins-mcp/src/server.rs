//! One connected MCP server: started under a start-up timeout, its tools listed, its calls sent under a
//! per-call timeout, its `tools/list_changed` notifications noted, and its process group killed at the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use reins::{ToolError, ToolOutput};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion, ServerNotification,
    SubscriptionFilter,
};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::{ClientHandler, ClientServiceExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

mod input;
mod listing;
pub use listing::{PromptArgument, RemotePrompt, RemoteResource};

use crate::config::{ServerConfig, Transport};
use crate::error::McpError;
use crate::late_discover::LateDiscover;
use crate::process::{ServerProcess, spawn};
use crate::result::map_call_result;

/// The `_meta` key of a `tools/call` request that carries the call's idempotency key
/// (see [`reins::ToolContext::idempotency_key`]).
pub const IDEMPOTENCY_KEY_META: &str = "reins/idempotencyKey";

/// How long a stdio server may take to exit by itself once its stdin is closed, before its group is killed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// What a server said about one of its tools.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteTool {
    /// The tool's name on the server.
    pub name: String,
    /// Its description (empty when the server gave none).
    pub description: String,
    /// Its input schema, as sent.
    pub input_schema: Value,
    /// The server marks it read-only (the `readOnlyHint` annotation).
    pub read_only: bool,
}

/// The client side of the connection: hears `tools/list_changed` and `resources/list_changed` (sent
/// unscoped by a server of an earlier revision; a 2026-07-28 server's come through [`listen_for_changes`]).
#[derive(Clone)]
struct Handler {
    flags: Arc<ChangeFlags>,
    /// With nobody to ask, a form is answered with its defaults ([`ServerConfig::elicitation_defaults`]).
    defaults: bool,
    /// The revision offered in `initialize` when one is pinned ([`ServerConfig::protocol`]).
    protocol: Option<ProtocolVersion>,
    /// The server's name, and what it asked the person since its last call ended (see [`crate::elicit`]).
    name: Arc<str>,
    elicited: Arc<std::sync::Mutex<Vec<String>>>,
    /// The same, for the run's `elicitation` events: each question's message and what came of it.
    asked: Arc<std::sync::Mutex<Vec<Asked>>>,
    /// Who the server's questions go to: the elicitor in place when the connection was made (none: nobody
    /// can be asked, and the capability is not declared).
    elicitor: Option<Arc<dyn crate::elicit::Elicitor>>,
}

/// A question of the server for the person, and what came of it (never the answer).
#[derive(Clone, Debug)]
struct Asked {
    message: String,
    outcome: &'static str,
    defaults: bool,
}

impl Handler {
    fn asked(&self, message: &str, outcome: &'static str, defaults: bool) {
        if let Ok(mut asked) = self.asked.lock() {
            asked.push(Asked { message: message.to_owned(), outcome, defaults });
        }
    }
}

/// What a server announced since its lists were last read.
#[derive(Debug, Default)]
pub(crate) struct ChangeFlags {
    tools: AtomicBool,
    resources: AtomicBool,
    changes: AtomicU64,
}

impl ChangeFlags {
    fn tools_changed(&self) {
        self.tools.store(true, Ordering::SeqCst);
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    fn resources_changed(&self) {
        self.resources.store(true, Ordering::SeqCst);
        self.changes.fetch_add(1, Ordering::SeqCst);
    }
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.flags.tools_changed();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.flags.resources_changed();
    }

    /// A request for the person's input goes to the registered elicitor (never to the model); declined without
    /// one. What happened is noted for the result of the call in flight.
    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        Ok(self.elicit(request).await)
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.elicitor.is_some() || self.defaults {
            let mut elicitation = rmcp::model::ElicitationCapability::new();
            elicitation.form = Some(rmcp::model::FormElicitationCapability::new());
            capabilities.elicitation = Some(elicitation);
        }
        let info = ClientConfig::new(capabilities, Implementation::new("reins", env!("CARGO_PKG_VERSION")));
        match &self.protocol {
            Some(version) => info.with_protocol_version(version.clone()),
            None => info,
        }
    }
}

impl Handler {
    /// The person's answer to a server's request for input (asked as `elicitation/create`, or as one of a
    /// 2026-07-28 server's input requests), noted for the result of the call in flight.
    async fn elicit(&self, request: rmcp::model::ElicitRequestParams) -> rmcp::model::ElicitResult {
        use crate::elicit::Elicited;
        use rmcp::model::{ElicitResult, ElicitationAction};
        let rmcp::model::ElicitRequestParams::FormElicitationParams { message, requested_schema, .. } = request else {
            return ElicitResult::new(ElicitationAction::Decline);
        };
        let schema = serde_json::to_value(&requested_schema).unwrap_or(Value::Null);
        let asked = crate::elicit::ElicitationRequest { server: self.name.to_string(), message, schema };
        if self.elicitor.is_none() && self.defaults {
            let result = self.answer_with_defaults(&asked.schema);
            let outcome = if result.action == ElicitationAction::Accept { "accepted" } else { "declined" };
            self.asked(&asked.message, outcome, true);
            return result;
        }
        let answer = crate::elicit::ask(self.elicitor.as_ref(), &asked).await;
        if let Ok(mut notes) = self.elicited.lock() {
            notes.push(crate::elicit::note(&self.name, &answer));
        }
        let outcome = match answer {
            Elicited::Accept(_) => "accepted",
            Elicited::Decline => "declined",
            Elicited::Cancel => "cancelled",
        };
        self.asked(&asked.message, outcome, false);
        match answer {
            Elicited::Accept(content) => ElicitResult::new(ElicitationAction::Accept).with_content(content),
            Elicited::Decline => ElicitResult::new(ElicitationAction::Decline),
            Elicited::Cancel => ElicitResult::new(ElicitationAction::Cancel),
        }
    }
}

impl Handler {
    /// A form answered with its defaults, nobody being there to ask ([`crate::elicit::defaults`]); noted alike.
    fn answer_with_defaults(&self, schema: &Value) -> rmcp::model::ElicitResult {
        use rmcp::model::{ElicitResult, ElicitationAction};
        let answer = crate::elicit::defaults(schema);
        if let Ok(mut notes) = self.elicited.lock() {
            notes.push(crate::elicit::note_defaults(&self.name, answer.is_some()));
        }
        match answer {
            Some(content) => ElicitResult::new(ElicitationAction::Accept).with_content(content),
            None => ElicitResult::new(ElicitationAction::Decline),
        }
    }
}

/// A connected MCP server. Dropping it kills a stdio server's process group.
pub struct McpServer {
    /// What the server asked the person during the call in flight (noted in its result).
    elicited: Arc<std::sync::Mutex<Vec<String>>>,
    /// What the server asked the person during the call in flight, and the run's `elicitation` events of the
    /// calls that ended since they were last taken.
    asked: Arc<std::sync::Mutex<Vec<Asked>>>,
    events: std::sync::Mutex<Vec<reins::EventKind>>,
    config: ServerConfig,
    peer: Peer<RoleClient>,
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, Handler>>>,
    /// Answers a 2026-07-28 server's input requests.
    handler: Handler,
    process: Option<Arc<ServerProcess>>,
    flags: Arc<ChangeFlags>,
    server_info: Option<String>,
    /// The protocol revision agreed with the server (`2026-07-28`, `2025-11-25`, ...).
    protocol: String,
    /// The server offers resources (its `resources` capability).
    has_resources: bool,
    /// The server offers prompts (its `prompts` capability).
    has_prompts: bool,
    /// Reads a 2026-07-28 server's `subscriptions/listen` stream (ended at shutdown).
    listener: Option<tokio::task::JoinHandle<()>>,
    /// Where results over the run's bound are written whole (see [`McpServer::set_spill`]).
    spill: std::sync::OnceLock<crate::spill::Spill>,
    /// Its `env` values, header values and URL userinfo, masked in what it says.
    secrets: Arc<crate::auth::TokenSecrets>,
    /// The scope the server last asked for when it refused a call for want of access (see
    /// [`McpServer::wanted_scope`]).
    wanted_scope: std::sync::Mutex<Option<String>>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer").field("name", &self.config.name).field("server", &self.server_info).finish()
    }
}

impl McpServer {
    /// Starts (stdio) or reaches (HTTP) the server and completes `initialize`, all within the configured
    /// start-up timeout. A server that does not answer in time is killed, with its process group.
    pub async fn connect(config: ServerConfig) -> Result<McpServer, McpError> {
        // The tokens of an OAuth login join these as they are loaded or refreshed.
        let secrets = Arc::new(crate::auth::TokenSecrets::new(config.secrets()));
        match Self::connect_inner(config, Arc::clone(&secrets)).await {
            Ok(server) => {
                let server_info = server.server_info.as_deref().map(|i| secrets.mask(i).into_owned());
                Ok(McpServer { server_info, ..server })
            }
            Err(e) => Err(mask_error(e, &secrets.get())),
        }
    }

    async fn connect_inner(
        config: ServerConfig,
        secrets: Arc<crate::auth::TokenSecrets>,
    ) -> Result<McpServer, McpError> {
        let name = config.name.clone();
        let timeout = config.startup_timeout;
        let flags = Arc::new(ChangeFlags::default());
        let elicited = Arc::new(std::sync::Mutex::new(Vec::new()));
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let handler = Handler {
            flags: Arc::clone(&flags),
            defaults: config.elicitation_defaults,
            protocol: config.protocol_version(),
            name: name.as_str().into(),
            elicited: Arc::clone(&elicited),
            asked: Arc::clone(&asked),
            elicitor: crate::elicit::elicitor(),
        };
        let (service, process) = match &config.transport {
            Transport::Stdio { command, args, env, cwd } => {
                let (service, process) = connect_stdio(handler, &config, command, args, env, cwd.as_ref()).await?;
                (service, Some(process))
            }
            Transport::Http { url, headers } => {
                let connect = async {
                    // A configured Authorization header wins over a stored login.
                    let login = if headers.keys().any(|k| k.eq_ignore_ascii_case("authorization")) {
                        None
                    } else {
                        crate::auth::stored_login(&config, Arc::clone(&secrets))
                            .await
                            .map_err(|e| crate::http::ConnectError::Failed(e.to_string()))?
                    };
                    crate::http::connect(handler, url, headers, login, config.lifecycle()).await
                };
                let service = tokio::time::timeout(timeout, connect)
                    .await
                    .map_err(|_| McpError::StartupTimeout { server: name.clone(), timeout, diagnosis: String::new() })?
                    .map_err(|e| match e {
                        crate::http::ConnectError::NeedsLogin => McpError::LoginRequired { server: name.clone() },
                        crate::http::ConnectError::NeedsScope(scope) => McpError::Initialize {
                            server: name.clone(),
                            reason: crate::auth::scope_hint(&name, &scope),
                        },
                        crate::http::ConnectError::Failed(reason) => {
                            McpError::Initialize { server: name.clone(), reason }
                        }
                    })?;
                (service, None)
            }
        };
        let info = service.peer_info();
        let server_info =
            info.as_ref().and_then(|i| i.server_info.as_ref().map(|s| format!("{} {}", s.name, s.version)));
        let protocol = info.as_ref().map_or_else(String::new, |i| i.protocol_version.to_string());
        let has_resources = info.as_ref().is_some_and(|i| i.capabilities.resources.is_some());
        let has_prompts = info.as_ref().is_some_and(|i| i.capabilities.prompts.is_some());
        let peer = service.peer().clone();
        let handler = service.service().clone();
        let listener = match info.as_deref() {
            Some(i) if !i.protocol_version.has_initialize() => listen_for_changes(&peer, i, &flags, timeout).await,
            _ => None,
        };
        Ok(McpServer {
            config,
            peer,
            service: tokio::sync::Mutex::new(Some(service)),
            handler,
            process,
            flags,
            server_info,
            protocol,
            has_resources,
            has_prompts,
            listener,
            spill: std::sync::OnceLock::new(),
            secrets,
            elicited,
            asked,
            events: std::sync::Mutex::new(Vec::new()),
            wanted_scope: std::sync::Mutex::new(None),
        })
    }

    /// The run's `elicitation` events of the calls that ended since the last time they were taken.
    pub fn take_events(&self) -> Vec<reins::EventKind> {
        self.events.lock().map(|mut e| std::mem::take(&mut *e)).unwrap_or_default()
    }

    /// Turns what the server asked the person during the call of `tool` just ended into events.
    fn note_asked(&self, tool: &str) {
        let asked: Vec<Asked> = self.asked.lock().map(|mut a| std::mem::take(&mut *a)).unwrap_or_default();
        if asked.is_empty() {
            return;
        }
        let tool = crate::config::qualified_name(self.name(), tool);
        if let Ok(mut events) = self.events.lock() {
            events.extend(asked.into_iter().map(|a| {
                reins::EventKind::Elicitation(Box::new(reins::ElicitationData {
                    server: self.name().to_owned(),
                    tool: tool.clone(),
                    message: self.secrets.mask_string(a.message),
                    outcome: a.outcome.to_owned(),
                    defaults: a.defaults,
                }))
            }));
        }
    }

    /// `output` with a line for each time the server asked the person during the call (what happened, not
    /// the answer), so that the session records it.
    fn with_elicitations(&self, output: ToolOutput) -> ToolOutput {
        let notes: Vec<String> = self.elicited.lock().map(|mut n| std::mem::take(&mut *n)).unwrap_or_default();
        if notes.is_empty() {
            return output;
        }
        let notes = notes.join("\n");
        match output {
            ToolOutput::Text(t) => ToolOutput::Text(format!("{t}\n{notes}")),
            ToolOutput::Json(v) => ToolOutput::Text(format!("{}\n{notes}", crate::elicit::json_text(&v))),
            ToolOutput::Parts { text, images } => ToolOutput::Parts { text: format!("{text}\n{notes}"), images },
        }
    }

    /// The scope the server asked for the last time it refused a call because its login grants too little (a
    /// 403 `insufficient_scope`): what `reins mcp login NAME --scope SCOPE` must add.
    pub fn wanted_scope(&self) -> Option<String> {
        self.wanted_scope.lock().ok().and_then(|w| w.clone())
    }

    /// The server's configured name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Its configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The name and version the server gave in `initialize`.
    pub fn server_info(&self) -> Option<&str> {
        self.server_info.as_deref()
    }

    /// The process id of a stdio server (also its process group id).
    pub fn pid(&self) -> Option<i32> {
        self.process.as_ref().map(|p| p.pid())
    }

    /// Writes each result over `spill.max_chars` whole to a file beneath the workspace's scratch folder and
    /// gives the model its head and tail with a marker naming the file ([`crate::spill`]). Set once.
    pub fn set_spill(&self, spill: crate::spill::Spill) {
        let _ = self.spill.set(spill);
    }

    /// `output` through the spill, when one is set.
    pub(crate) fn spilled(&self, output: ToolOutput, tool: &str) -> ToolOutput {
        match self.spill.get() {
            Some(spill) => spill.apply(output, self.name(), tool),
            None => output,
        }
    }

    /// The protocol revision agreed with the server: `2026-07-28` (no `initialize`: `server/discover` and
    /// `_meta` on each request) or an earlier one such as `2025-11-25` (the `initialize` handshake).
    pub fn protocol_version(&self) -> &str {
        &self.protocol
    }

    /// True when the server offers resources.
    pub fn has_resources(&self) -> bool {
        self.has_resources
    }

    /// True when the server offers prompts.
    pub fn has_prompts(&self) -> bool {
        self.has_prompts
    }

    /// True once the server sent `notifications/tools/list_changed` since the last [`McpServer::list_tools`].
    pub fn tools_changed(&self) -> bool {
        self.flags.tools.load(Ordering::SeqCst)
    }

    /// True once the server sent `notifications/resources/list_changed` since the last
    /// [`McpServer::take_resources_changed`].
    pub fn resources_changed(&self) -> bool {
        self.flags.resources.load(Ordering::SeqCst)
    }

    /// Reads and clears the resources-changed flag.
    pub fn take_resources_changed(&self) -> bool {
        self.flags.resources.swap(false, Ordering::SeqCst)
    }

    /// How many `tools/list_changed` and `resources/list_changed` notifications the server sent so far.
    pub fn tool_list_changes(&self) -> u64 {
        self.flags.changes.load(Ordering::SeqCst)
    }

    /// Lists every tool (following pagination), within the start-up timeout.
    pub async fn list_tools(&self) -> Result<Vec<RemoteTool>, McpError> {
        self.list_tools_inner().await.map_err(|e| mask_error(e, &self.secrets.get()))
    }

    async fn list_tools_inner(&self) -> Result<Vec<RemoteTool>, McpError> {
        self.flags.tools.store(false, Ordering::SeqCst);
        let listed = tokio::time::timeout(self.config.startup_timeout, self.peer.list_all_tools()).await;
        let tools = match listed {
            Ok(Ok(tools)) => tools,
            // A 401 that one refresh of the login did not cure (its authorization server changed, say).
            Ok(Err(e)) if crate::auth::needs_login(&e) => {
                return Err(McpError::LoginRequired { server: self.name().to_owned() });
            }
            Ok(Err(e)) => {
                return Err(McpError::ListTools {
                    server: self.name().to_owned(),
                    reason: self.explain(&plain(&e.to_string())),
                });
            }
            Err(_) => {
                let reason = self.explain(&format!(
                    "no answer to tools/list within {}",
                    humantime::format_duration(self.config.startup_timeout)
                ));
                return Err(McpError::ListTools { server: self.name().to_owned(), reason });
            }
        };
        Ok(tools
            .into_iter()
            .map(|t| RemoteTool {
                name: t.name.into_owned(),
                // What the server says about its tools reaches the model and `reins mcp list`: masked too.
                description: self.secrets.mask_string(t.description.map(|d| d.into_owned()).unwrap_or_default()),
                input_schema: Value::Object((*t.input_schema).clone()),
                read_only: t.annotations.as_ref().and_then(|a| a.read_only_hint).unwrap_or(false),
            })
            .collect())
    }

    /// Calls `tool` (its name on the server) with `arguments`, within the per-call timeout, stopping early
    /// when `cancel` fires. Every failure — a crashed, hung or garbling server — is an error result.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Value,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        self.call_keyed(tool, arguments, cancel, None).await
    }

    /// [`McpServer::call`], with the call's idempotency key (when given) sent in the request's `_meta` as
    /// [`IDEMPOTENCY_KEY_META`]: the same every time the same tool call is retried.
    pub async fn call_keyed(
        &self,
        tool: &str,
        arguments: Value,
        cancel: &CancellationToken,
        idempotency_key: Option<&str>,
    ) -> Result<ToolOutput, ToolError> {
        let Value::Object(arguments) = arguments else {
            return Err(ToolError::InvalidArguments("MCP tool arguments are a JSON object".into()));
        };
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        if let Some(key) = idempotency_key {
            let mut meta = serde_json::Map::new();
            meta.insert(IDEMPOTENCY_KEY_META.to_owned(), Value::String(key.to_owned()));
            params.meta = Some(rmcp::model::RequestMetaObject(rmcp::model::MetaObject(meta)));
        }
        let called = self.call_params(tool, params, cancel).await;
        self.note_asked(tool);
        // What the server answers is masked before anyone records it: a server may echo its token.
        called
            .map(|o| self.with_elicitations(o))
            .map(|o| self.spilled(self.secrets.mask_output(o), tool))
            .map_err(|e| self.secrets.mask_tool_error(e))
    }

    async fn call_params(
        &self,
        tool: &str,
        params: CallToolRequestParams,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let timeout = self.config.call_timeout;
        let call = tokio::time::timeout(timeout, input::call_tool(&self.peer, &self.handler, params));
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ToolError::Cancelled),
            r = call => r,
        };
        match result {
            Err(_) => Err(ToolError::Failed(self.explain(&format!(
                "MCP server {:?} did not answer the call of {tool:?} within {}",
                self.name(),
                humantime::format_duration(timeout)
            )))),
            Ok(Err(e)) => {
                // A server that died mid-call: give its exit status a moment to be seen.
                if self.process.is_some() && self.peer.is_transport_closed() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                // A 401 that one refresh of the login did not cure.
                let why = if crate::auth::needs_login(&e) {
                    format!("it needs a login: run `reins mcp login {}`", self.name())
                } else if let Some(scope) = crate::auth::insufficient_scope(&e) {
                    // A 403 insufficient_scope: the login must be made again for more access (in a browser,
                    // which a run does not open); the scopes granted so far are kept by that login.
                    let why = crate::auth::scope_hint(self.name(), &scope);
                    if let Ok(mut wanted) = self.wanted_scope.lock() {
                        *wanted = Some(scope);
                    }
                    why
                } else {
                    call_error(&e)
                };
                Err(ToolError::Failed(
                    self.explain(&format!("MCP server {:?} failed the call of {tool:?}: {why}", self.name())),
                ))
            }
            Ok(Ok(result)) => match serde_json::to_value(&result) {
                Ok(v) => map_call_result(&v),
                Err(e) => Err(ToolError::Failed(format!("MCP server {:?}: unreadable result: {e}", self.name()))),
            },
        }
    }

    /// Closes the connection; a stdio server gets [`SHUTDOWN_GRACE`] to exit after its stdin closes, then its
    /// whole process group is killed.
    pub async fn shutdown(&self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
        let service = self.service.lock().await.take();
        if let Some(mut service) = service {
            let _ = service.close_with_timeout(SHUTDOWN_GRACE).await;
        }
        if let Some(p) = &self.process {
            p.shutdown(SHUTDOWN_GRACE).await;
        }
    }

    fn explain(&self, message: &str) -> String {
        match &self.process {
            Some(p) => with_diagnosis(message.to_owned(), &p.diagnosis()),
            None => message.to_owned(),
        }
    }
}

/// On a 2026-07-28 connection, list changes come only on a `subscriptions/listen` stream: opens one for the
/// lists the server says change, and reads it into `flags` until the connection ends. A server that refuses
/// the subscription is used without it (its lists are read once).
/// Spawns a stdio server (`command` with `args`, its variables `env`, in `cwd`) and starts the connection under
/// the start-up timeout; a server that fails to start is killed and its last words reported.
async fn connect_stdio(
    handler: Handler,
    config: &ServerConfig,
    command: &str,
    args: &[String],
    env: &std::collections::BTreeMap<String, String>,
    cwd: Option<&std::path::PathBuf>,
) -> Result<(RunningService<RoleClient, Handler>, Arc<ServerProcess>), McpError> {
    let (name, timeout) = (config.name.clone(), config.startup_timeout);
    let (process, stdout, stdin) = spawn(command, args, env, cwd).map_err(|e| McpError::Spawn {
        server: name.clone(),
        command: command.to_owned(),
        reason: e.to_string(),
    })?;
    let process = Arc::new(process);
    // The guard reports an answer over the message size limit as an error for its request.
    let stdout = crate::frame::LineGuard::new(stdout);
    let started = tokio::time::timeout(
        timeout,
        handler.serve_with_lifecycle(LateDiscover::over(stdout, stdin), config.lifecycle()),
    )
    .await;
    match started {
        Ok(Ok(service)) => Ok((service, process)),
        Ok(Err(e)) => {
            // Let a crashing server's exit status and last words arrive before reporting.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let reason = with_diagnosis(plain(&e.to_string()), &process.diagnosis());
            process.kill_group();
            Err(McpError::Initialize { server: name, reason })
        }
        Err(_) => {
            let diagnosis = process.diagnosis();
            process.kill_group();
            Err(McpError::StartupTimeout { server: name, timeout, diagnosis })
        }
    }
}

async fn listen_for_changes(
    peer: &Peer<RoleClient>,
    info: &rmcp::model::ServerPeerInfo,
    flags: &Arc<ChangeFlags>,
    timeout: Duration,
) -> Option<tokio::task::JoinHandle<()>> {
    let caps = &info.capabilities;
    let tools = caps.tools.as_ref().is_some_and(|t| t.list_changed == Some(true));
    let resources = caps.resources.as_ref().is_some_and(|r| r.list_changed == Some(true));
    if !tools && !resources {
        return None;
    }
    let mut filter = SubscriptionFilter::builder();
    if tools {
        filter = filter.tools_list_changed();
    }
    if resources {
        filter = filter.resources_list_changed();
    }
    let mut subscription = tokio::time::timeout(timeout, peer.listen(filter.build())).await.ok()?.ok()?;
    let flags = Arc::clone(flags);
    Some(tokio::spawn(async move {
        while let Ok(Some(notification)) = subscription.next().await {
            match notification {
                ServerNotification::ToolListChangedNotification(_) => flags.tools_changed(),
                ServerNotification::ResourceListChangedNotification(_) => flags.resources_changed(),
                _ => {}
            }
        }
    }))
}

/// A call's failure in plain words: the server's own error message, or the transport's without Rust type names.
fn call_error(e: &rmcp::ServiceError) -> String {
    match e {
        rmcp::ServiceError::McpError(data) => {
            format!("the server answered with error {}: {}", data.code.0, data.message)
        }
        rmcp::ServiceError::TransportClosed => "the connection to the server closed".to_owned(),
        other => plain(&other.to_string()),
    }
}

/// An error message from the MCP library, for a person or a model: bracketed Rust type names (the library
/// names its transport as `Transport [rmcp::transport::...<...>] error: ...`) are taken out.
pub(crate) fn plain(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(open) = rest.find('[') {
        let mut depth = 0usize;
        let mut close = None;
        for (i, c) in rest[open..].char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(open + i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else { break };
        out.push_str(&rest[..open]);
        if !rest[open + 1..close].contains("::") {
            out.push_str(&rest[open..=close]);
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out.replace("Transport  error: ", "").replace("Transport error: ", "")
}

/// A start-up error with the server's secrets masked (its stderr and answers are in the reasons).
fn mask_error(e: McpError, secrets: &reins::Secrets) -> McpError {
    if secrets.is_empty() {
        return e;
    }
    match e {
        McpError::Initialize { server, reason } => McpError::Initialize { server, reason: secrets.mask_string(reason) },
        McpError::StartupTimeout { server, timeout, diagnosis } => {
            McpError::StartupTimeout { server, timeout, diagnosis: secrets.mask_string(diagnosis) }
        }
        McpError::ListTools { server, reason } => McpError::ListTools { server, reason: secrets.mask_string(reason) },
        McpError::Tool { server, tool, reason } => McpError::Tool { server, tool, reason: secrets.mask_string(reason) },
        McpError::Spawn { server, command, reason } => {
            McpError::Spawn { server, command, reason: secrets.mask_string(reason) }
        }
        other => other,
    }
}

fn with_diagnosis(message: String, diagnosis: &str) -> String {
    if diagnosis.is_empty() { message } else { format!("{message} ({diagnosis})") }
}
