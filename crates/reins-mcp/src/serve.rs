//! Reins as an MCP server (feature `server`): agents offered as tools to any MCP client, over stdio or
//! streamable HTTP on loopback behind a bearer token.
//!
//! Each [`ServedAgent`] is a tool taking `{"task": string}`. A call runs the agent through an
//! [`AgentRunner`] (the command builds the agent from its file, records the run as a session, applies its
//! budget, confinement and policies); the answer is the result's text, and with an output schema also its
//! `structuredContent`. As the run goes, each model call and tool call is sent as a progress notification
//! (when the client gave a progress token); the client's `notifications/cancelled` cancels the run. An
//! approval the agent needs becomes an elicitation to the client ([`ElicitingApprover`]): accepted with
//! `approve: true` approves the call; declined, cancelled, refused or unsupported denies it. A question one of
//! the agent's own MCP servers asks the person is forwarded to the client the same way ([`ForwardingElicitor`]).
//!
//! How the client is asked depends on the revision of the call: under 2025-11-25 by an `elicitation/create`
//! request of the server; under 2026-07-28, which has no server-to-client requests, the call is answered with
//! an input-required result (SEP-2322) and the run waits, parked, for the call to come again with the answer
//! and the request state ([`rounds`]).
//!
//! This module knows the protocol, not agent files or stores: it sits beside the client in `reins-mcp`
//! (which `reins-agent` depends on, so it cannot run agents itself) and the command supplies the runner.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use reins::{ApprovalDecision, ApprovalError, ApprovalRequest, Approver, Event, EventKind, ObserverError, Outcome};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams, ElicitResult,
    ElicitationAction, ErrorData, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{ElicitationMode, Peer, RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt as _};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

mod rounds;
use rounds::{Parking, Question, Run};

/// How long a run waits, by default, for the client to send the call again with the answers to its questions
/// (2026-07-28): it is cancelled after that.
pub const DEFAULT_INPUT_TIMEOUT: Duration = Duration::from_secs(600);

/// One agent offered as a tool.
#[derive(Clone, Debug)]
pub struct ServedAgent {
    /// The tool's name.
    pub name: String,
    /// The tool's description.
    pub description: String,
    /// The JSON Schema of the agent's answer, when it has one.
    pub output_schema: Option<Value>,
}

/// What a run of a served agent is given.
pub struct RunContext {
    /// Sees the run's events (progress notifications are made of them): add it to the agent.
    pub observer: Arc<dyn reins::Observer>,
    /// Decides the calls that need a person's say (an elicitation to the client): the agent's approver.
    pub approver: Arc<dyn Approver>,
    /// Asks the client's user what the agent's own MCP servers ask the person (none: the client cannot be
    /// asked). Connect the agent's servers inside [`crate::elicit::scope`] of it.
    pub elicitor: Option<Arc<dyn crate::elicit::Elicitor>>,
    /// Cancelled when the client cancels the call or the server stops.
    pub cancel: CancellationToken,
}

/// Runs a served agent's task: builds the agent named `agent`, runs `task` and returns its outcome, or why
/// it could not run (a tool error for the client).
#[async_trait]
pub trait AgentRunner: Send + Sync + 'static {
    /// One run.
    async fn run(&self, agent: &str, task: &str, ctx: RunContext) -> Result<Outcome, String>;
}

/// The key of a result's `_meta` naming the session the run is recorded in.
pub const SESSION_META: &str = "reins/session_id";

/// The MCP server handler: the agents as tools.
#[derive(Clone)]
pub struct AgentServer {
    agents: Arc<Vec<ServedAgent>>,
    runner: Arc<dyn AgentRunner>,
    stop: CancellationToken,
    /// The runs waiting between two rounds of a call (2026-07-28).
    parking: Arc<Parking>,
}

impl AgentServer {
    /// A server of `agents`, run by `runner`; `stop` cancels every run in flight when fired.
    pub fn new(agents: Vec<ServedAgent>, runner: Arc<dyn AgentRunner>, stop: CancellationToken) -> Self {
        let parking = Self::parking(DEFAULT_INPUT_TIMEOUT, &stop);
        Self { agents: Arc::new(agents), runner, stop, parking }
    }

    /// Where runs wait between rounds, each cancelled when `stop` fires.
    fn parking(bound: Duration, stop: &CancellationToken) -> Arc<Parking> {
        let parking = Arc::new(Parking::new(bound));
        let (watched, stopping) = (Arc::clone(&parking), stop.clone());
        // Spawned only inside a runtime; a server made outside one has nothing parked to stop.
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(async move {
                stopping.cancelled().await;
                watched.cancel_all();
            });
        }
        parking
    }

    /// How long a run waits for the client to send the call again with its answers (2026-07-28) before it is
    /// cancelled ([`DEFAULT_INPUT_TIMEOUT`] unless set).
    #[must_use]
    pub fn with_input_timeout(mut self, timeout: Duration) -> Self {
        self.parking = Self::parking(timeout, &self.stop);
        self
    }

    fn tool(agent: &ServedAgent) -> Tool {
        let input = json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "What the agent is to do, in plain words."}},
            "required": ["task"],
            "additionalProperties": false
        });
        let mut tool = Tool::new(agent.name.clone(), agent.description.clone(), Arc::new(object(input)));
        if let Some(schema) = &agent.output_schema {
            tool = tool.with_raw_output_schema(Arc::new(object(structured_schema(schema))));
        }
        tool
    }
}

/// The map of a JSON object (empty for anything else).
fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// The schema of `structuredContent`: the output schema itself when it describes an object, else an object
/// holding the answer under `output` (MCP's structured content is an object).
fn structured_schema(schema: &Value) -> Value {
    if is_object_schema(schema) {
        schema.clone()
    } else {
        json!({"type": "object", "properties": {"output": schema}, "required": ["output"]})
    }
}

fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// The tool result of a run: its answer (and structured output) when it completed, else an error result
/// saying how it ended. `_meta` names its session and status.
pub fn call_result(outcome: &Outcome, output_schema: Option<&Value>) -> CallToolResult {
    let status = serde_json::to_value(outcome.status).unwrap_or(Value::Null);
    let status_text = status.as_str().unwrap_or("unknown").to_owned();
    let mut result = if outcome.status == reins::Status::Completed {
        let mut r = CallToolResult::success(vec![ContentBlock::text(outcome.answer.clone().unwrap_or_default())]);
        if let (Some(schema), Some(output)) = (output_schema, &outcome.output) {
            r.structured_content =
                Some(if is_object_schema(schema) { output.clone() } else { json!({ "output": output }) });
        }
        r
    } else {
        let why = outcome.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
        let session = outcome.session_id.as_deref().map(|s| format!(" (session {s})")).unwrap_or_default();
        CallToolResult::error(vec![ContentBlock::text(format!("the agent's run ended {status_text}{why}{session}"))])
    };
    let mut meta = rmcp::model::MetaObject::new();
    if let Some(id) = &outcome.session_id {
        meta.insert(SESSION_META.to_owned(), json!(id));
    }
    meta.insert("reins/status".to_owned(), status);
    result.meta = Some(meta);
    result
}

impl ServerHandler for AgentServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("reins", env!("CARGO_PKG_VERSION")))
            .with_instructions("Each tool is a Reins agent: give it a task; it answers when its run ends.")
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.agents.iter().map(Self::tool).collect()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.agents.iter().find(|a| a.name == name).map(Self::tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(agent) = self.agents.iter().find(|a| a.name == request.name) else {
            return Err(ErrorData::invalid_params(format!("no tool {:?}", request.name), None));
        };
        let run = match &request.request_state {
            // The call again, with the answers to the questions of the run it names.
            Some(state) => {
                let mut run = self.parking.take(state, &agent.name)?;
                run.answer(&request.input_responses.clone().unwrap_or_default());
                run
            }
            None => {
                let task = match request.arguments.as_ref().and_then(|a| a.get("task")) {
                    Some(Value::String(t)) if !t.trim().is_empty() => t.clone(),
                    _ => return Err(ErrorData::invalid_params("`task` must be a non-empty string", None)),
                };
                self.start(agent, task, &context)
            }
        };
        Ok(self.drive(run, agent, &context).await)
    }
}

impl AgentServer {
    /// Starts a run of `agent` on `task`, asking the client of `context` the way its revision allows.
    fn start(&self, agent: &ServedAgent, task: String, context: &RequestContext<RoleServer>) -> Run {
        let (questions_tx, questions) = tokio::sync::mpsc::unbounded_channel();
        let asker = Asker::of(context, questions_tx);
        let (progress_tx, progress) = tokio::sync::mpsc::unbounded_channel();
        let observer = Arc::new(Progress { tx: Mutex::new(Some(progress_tx)) });
        let cancel = self.stop.child_token();
        let elicitor: Option<Arc<dyn crate::elicit::Elicitor>> = match asker {
            Asker::Nobody => None,
            _ => Some(Arc::new(ForwardingElicitor { asker: asker.clone(), agent: agent.name.clone() })),
        };
        let approver = Arc::new(ElicitingApprover { asker, agent: agent.name.clone() });
        let ctx = RunContext { observer: observer.clone(), approver, elicitor, cancel: cancel.clone() };
        let (runner, name) = (Arc::clone(&self.runner), agent.name.clone());
        let done = tokio::spawn(async move {
            let ran = runner.run(&name, &task, ctx).await;
            observer.close();
            ran
        });
        Run::new(progress, questions, done, cancel)
    }

    /// Follows `run` for the call of `context`: its progress sent as notifications, until it ends (its
    /// result), the call is cancelled (the run is, and its result follows), or it asks the client something
    /// (the run parked; an input-required result).
    async fn drive(&self, mut run: Run, agent: &ServedAgent, context: &RequestContext<RoleServer>) -> CallToolResponse {
        let token = context.meta.get_progress_token();
        loop {
            tokio::select! {
                biased;
                ran = &mut run.done => {
                    // The notifications of the run go out before its result.
                    while let Ok(line) = run.progress.try_recv() {
                        notify(context, token.as_ref(), &mut run.progressed, line).await;
                    }
                    return CallToolResponse::Complete(ended(ran, agent));
                }
                () = context.ct.cancelled() => {
                    run.cancel.cancel();
                    return CallToolResponse::Complete(ended((&mut run.done).await, agent));
                }
                Some(line) = run.progress.recv() => notify(context, token.as_ref(), &mut run.progressed, line).await,
                Some(mut asked) = run.questions.recv() => {
                    while let Ok(more) = run.questions.try_recv() {
                        asked.extend(more);
                    }
                    match self.parking.park(run, asked, &agent.name) {
                        Ok(required) => return CallToolResponse::InputRequired(required),
                        Err((r, why)) => {
                            run = r;
                            run.cancel.cancel();
                            let _ = (&mut run.done).await;
                            let text = format!("the agent's run could not wait for an answer: {why}");
                            return CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(text)]));
                        }
                    }
                }
            }
        }
    }
}

/// The result of a run that ended (or could not run, or failed).
fn ended(ran: Result<Result<Outcome, String>, tokio::task::JoinError>, agent: &ServedAgent) -> CallToolResult {
    match ran {
        Ok(Ok(outcome)) => call_result(&outcome, agent.output_schema.as_ref()),
        Ok(Err(why)) => CallToolResult::error(vec![ContentBlock::text(format!("the agent could not run: {why}"))]),
        Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("the agent's run failed: {e}"))]),
    }
}

/// Sends one progress notification (none without a progress token). A client gone away is no reason to
/// stop the run: its cancellation does that.
async fn notify(context: &RequestContext<RoleServer>, token: Option<&ProgressToken>, n: &mut u32, line: String) {
    *n += 1;
    if let Some(token) = token {
        let mut p = ProgressNotificationParam::new(token.clone(), f64::from(*n));
        p.message = Some(line);
        let _ = context.peer.notify_progress(p).await;
    }
}

/// How the client of a call is asked something.
#[derive(Clone)]
enum Asker {
    /// By an `elicitation/create` request (2025-11-25 and earlier).
    Request(Peer<RoleServer>),
    /// By an input-required result of the call (2026-07-28): the questions go to the call's driver, a batch
    /// in one message (all in one round).
    Rounds(tokio::sync::mpsc::UnboundedSender<Vec<Question>>),
    /// It cannot be asked (it declared no form elicitation).
    Nobody,
}

impl Asker {
    fn of(context: &RequestContext<RoleServer>, questions: tokio::sync::mpsc::UnboundedSender<Vec<Question>>) -> Asker {
        let rounds = context.protocol_version().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        if rounds {
            let form = context
                .client_capabilities()
                .and_then(|c| c.elicitation)
                .is_some_and(|e| e.form.is_some() || e.url.is_none());
            return if form { Asker::Rounds(questions) } else { Asker::Nobody };
        }
        if context.peer.supported_elicitation_modes().contains(&ElicitationMode::Form) {
            Asker::Request(context.peer.clone())
        } else {
            Asker::Nobody
        }
    }

    /// The client's answer to a form elicitation.
    async fn ask(&self, params: ElicitRequestParams) -> Result<ElicitResult, String> {
        match self {
            Asker::Request(peer) => {
                peer.create_elicitation(params).await.map_err(|e| format!("the elicitation failed: {e}"))
            }
            Asker::Rounds(questions) => match in_one_round(questions, vec![params]).pop() {
                Some(answered) => answered.await,
                None => Err("the call has ended".into()),
            },
            Asker::Nobody => Err("the MCP client cannot be asked (no elicitation)".into()),
        }
    }
}

/// Sends all of `questions` to the call's driver in one message, so that one input-required result holds
/// them all, each under its own key (2026-07-28). The answers, in the order of `questions`.
fn in_one_round(
    tx: &tokio::sync::mpsc::UnboundedSender<Vec<Question>>,
    questions: Vec<ElicitRequestParams>,
) -> Vec<impl Future<Output = Result<ElicitResult, String>> + use<>> {
    let (batch, answers): (Vec<Question>, Vec<_>) = questions
        .into_iter()
        .map(|params| {
            let (answer, answered) = tokio::sync::oneshot::channel();
            (Question { params, answer }, answered)
        })
        .unzip();
    // Nothing to ask sends nothing; a driver gone drops the batch, and with it every answer's sender.
    if !batch.is_empty() {
        let _ = tx.send(batch);
    }
    answers
        .into_iter()
        .map(|answered| async move {
            answered.await.map_err(|_| "the call has ended, or the MCP client did not send it again in time".to_owned())
        })
        .collect()
}

/// Turns a run's events into progress notifications: one for each model call and each tool call, numbered
/// in order, with a line saying what it is.
struct Progress {
    tx: Mutex<Option<tokio::sync::mpsc::UnboundedSender<String>>>,
}

impl Progress {
    fn close(&self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
    }
}

impl reins::Observer for Progress {
    fn on_event(&self, event: &Event) -> Result<(), ObserverError> {
        let of = event.agent.as_deref().map(|a| format!("[{a}] ")).unwrap_or_default();
        let line = match &event.kind {
            EventKind::ModelStart { step, .. } => format!("{of}step {step}: the model is called"),
            EventKind::ToolStart { name, .. } => format!("{of}tool call: {name}"),
            EventKind::ApprovalRequested { .. } => format!("{of}waiting for an approval"),
            _ => return Ok(()),
        };
        if let Ok(tx) = self.tx.lock() {
            if let Some(tx) = tx.as_ref() {
                let _ = tx.send(line);
            }
        }
        Ok(())
    }
}

/// Asks the MCP client's user about each call that needs a decision, through a form elicitation with one
/// boolean field `approve`. Anything but an accepted `approve: true` denies the call, with the reason given
/// to the model.
pub struct ElicitingApprover {
    asker: Asker,
    agent: String,
}

impl ElicitingApprover {
    fn schema() -> Result<rmcp::model::ElicitationSchema, String> {
        serde_json::from_value(json!({
            "type": "object",
            "properties": {"approve": {"type": "boolean", "title": "Approve", "description": "true runs the call"}},
            "required": ["approve"]
        }))
        .map_err(|e| e.to_string())
    }

    /// The question about `call`.
    fn question(&self, call: &reins::PendingCall) -> Result<ElicitRequestParams, String> {
        let reason = match &call.plan {
            reins::Plan::Ask { reason } => format!(" ({reason})"),
            _ => String::new(),
        };
        let of = call.sub_agent.as_ref().map(|s| format!(" [{}]", s.agent)).unwrap_or_default();
        let mut args = call.arguments.to_string();
        if args.chars().count() > 500 {
            args = args.chars().take(500).chain("…".chars()).collect();
        }
        let message =
            format!("Reins agent {:?}{of} asks to call {} with {args}{reason}. Approve?", self.agent, call.name);
        Ok(ElicitRequestParams::FormElicitationParams { meta: None, message, requested_schema: Self::schema()? })
    }

    async fn ask(&self, call: &reins::PendingCall) -> Result<bool, String> {
        let params = self.question(call)?;
        approved(self.asker.ask(params).await)
    }
}

/// Whether the client's `answer` approves the call (`Err`: declined, cancelled or not answered).
fn approved(answer: Result<ElicitResult, String>) -> Result<bool, String> {
    let answer = answer?;
    match answer.action {
        ElicitationAction::Accept => {
            Ok(answer.content.as_ref().and_then(|c| c.get("approve")).and_then(Value::as_bool) == Some(true))
        }
        ElicitationAction::Decline => Err("the MCP client's user declined".into()),
        _ => Err("the MCP client's user cancelled the question".into()),
    }
}

/// The decision about `call` that `answer` makes.
fn decision(call: &reins::PendingCall, answer: Result<bool, String>) -> ApprovalDecision {
    match answer {
        Ok(true) => ApprovalDecision::approve(call),
        Ok(false) => ApprovalDecision::deny(call, "denied by the MCP client's user"),
        Err(why) => ApprovalDecision::deny(call, format!("denied: {why}")),
    }
}

#[async_trait]
impl Approver for ElicitingApprover {
    /// Under 2026-07-28 every call of the batch that needs a decision is asked in the same round (one
    /// input-required result, a question each); under 2025-11-25 one `elicitation/create` after another.
    async fn decide(
        &self,
        request: &ApprovalRequest,
        cancel: &CancellationToken,
    ) -> Result<Vec<ApprovalDecision>, ApprovalError> {
        let calls: Vec<&reins::PendingCall> = request.calls.iter().filter(|c| c.needs_decision()).collect();
        let mut out = Vec::new();
        match &self.asker {
            Asker::Nobody => {
                for call in calls {
                    out.push(ApprovalDecision::deny(call, "denied: the MCP client cannot be asked (no elicitation)"));
                }
            }
            Asker::Rounds(tx) => {
                let mut asked = Vec::new();
                let mut questions = Vec::new();
                for call in calls {
                    match self.question(call) {
                        Ok(q) => {
                            asked.push(call);
                            questions.push(q);
                        }
                        Err(why) => out.push(decision(call, Err(why))),
                    }
                }
                for (call, answered) in asked.into_iter().zip(in_one_round(tx, questions)) {
                    let answer = tokio::select! {
                        a = answered => approved(a),
                        () = cancel.cancelled() => return Ok(out),
                    };
                    out.push(decision(call, answer));
                }
            }
            Asker::Request(_) => {
                for call in calls {
                    let answer = tokio::select! {
                        a = self.ask(call) => a,
                        () = cancel.cancelled() => return Ok(out),
                    };
                    out.push(decision(call, answer));
                }
            }
        }
        Ok(out)
    }
}

/// Forwards what one of a served agent's own MCP servers asks the person to the MCP client that called the
/// agent, as a form elicitation with the server's message and schema (the answer is checked against that
/// schema again by [`crate::elicit::ask`]).
pub struct ForwardingElicitor {
    asker: Asker,
    agent: String,
}

#[async_trait]
impl crate::elicit::Elicitor for ForwardingElicitor {
    async fn elicit(&self, request: &crate::elicit::ElicitationRequest) -> crate::elicit::Elicited {
        use crate::elicit::Elicited;
        let Ok(requested_schema) = serde_json::from_value(request.schema.clone()) else { return Elicited::Decline };
        let message =
            format!("Reins agent {:?}: its MCP server {:?} asks: {}", self.agent, request.server, request.message);
        let params = ElicitRequestParams::FormElicitationParams { meta: None, message, requested_schema };
        match self.asker.ask(params).await {
            Ok(answer) => match answer.action {
                ElicitationAction::Accept => Elicited::Accept(answer.content.unwrap_or(Value::Null)),
                ElicitationAction::Decline => Elicited::Decline,
                _ => Elicited::Cancel,
            },
            Err(_) => Elicited::Cancel,
        }
    }
}

/// Serves `server` over standard input and output until the client closes it or `cancel` fires.
pub async fn serve_stdio(server: AgentServer, cancel: CancellationToken) -> std::io::Result<()> {
    let running = server
        .serve_with_ct(rmcp::transport::io::stdio_pipes(), cancel.child_token())
        .await
        .map_err(|e| std::io::Error::other(format!("the MCP handshake failed: {e}")))?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}

/// True when `header` (an `Authorization` value) is `Bearer TOKEN`, compared in a time that depends only on
/// the lengths.
fn bearer_ok(header: Option<&[u8]>, token: &str) -> bool {
    let Some(given) = header.and_then(|h| h.strip_prefix(b"Bearer ")) else { return false };
    let expected = token.as_bytes();
    if given.len() != expected.len() {
        return false;
    }
    let diff = given.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(diff) == 0
}

/// Serves `server` as a streamable HTTP endpoint at `/mcp` on `listener` (a loopback address; any other is
/// refused), each request needing `Authorization: Bearer TOKEN` (else `401`), until `cancel` fires.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    server: AgentServer,
    token: String,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let addr: SocketAddr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{addr} is not a loopback address: reins mcp serve listens on loopback only"),
        ));
    }
    let mut config = StreamableHttpServerConfig::default().with_cancellation_token(cancel.child_token());
    config.allowed_hosts = vec!["localhost".into(), "127.0.0.1".into(), "::1".into(), "[::1]".into()];
    let service =
        StreamableHttpService::new(move || Ok(server.clone()), Arc::new(LocalSessionManager::default()), config);
    let token: Arc<str> = token.into();
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, _) = tokio::select! {
            () = cancel.cancelled() => break,
            a = listener.accept() => match a {
                Ok(a) => a,
                // Out of descriptors, or a connection reset before it was taken: wait a moment, go on.
                Err(_) => { tokio::time::sleep(std::time::Duration::from_millis(50)).await; continue; }
            },
        };
        while connections.try_join_next().is_some() {}
        let service = service.clone();
        let token = token.clone();
        let handler = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let service = service.clone();
            let token = token.clone();
            async move {
                let auth = req.headers().get(hyper::header::AUTHORIZATION).map(|v| v.as_bytes());
                if !bearer_ok(auth, &token) {
                    return Ok::<_, Infallible>(unauthorized());
                }
                Ok(service.handle(req).await)
            }
        });
        connections.spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, handler).await;
        });
    }
    connections.shutdown().await;
    Ok(())
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn unauthorized() -> hyper::Response<Body> {
    let mut response = hyper::Response::new(Full::new(Bytes::from_static(b"a bearer token is needed\n")).boxed());
    *response.status_mut() = hyper::StatusCode::UNAUTHORIZED;
    response.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, hyper::header::HeaderValue::from_static("Bearer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_passes() {
        assert!(bearer_ok(Some(b"Bearer abc"), "abc"));
        assert!(!bearer_ok(Some(b"Bearer abd"), "abc"));
        assert!(!bearer_ok(Some(b"Bearer abcd"), "abc"));
        assert!(!bearer_ok(Some(b"bearer abc"), "abc"));
        assert!(!bearer_ok(Some(b"abc"), "abc"));
        assert!(!bearer_ok(None, "abc"));
    }

    #[test]
    fn a_non_object_output_schema_is_carried_under_output() {
        let s = json!({"type": "integer"});
        assert_eq!(structured_schema(&s)["properties"]["output"], s);
        let o = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        assert_eq!(structured_schema(&o), o);
    }
}
