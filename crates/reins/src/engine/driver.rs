//! The async driver: performs what the state machine asks — model calls, tool batches — under the
//! deadline, the caller's cancellation and the per-tool timeout, and reports every step as events.

use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::Either;
use futures_util::future::join_all;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use super::perform::{ModelStep, Performer, ToolStep, idempotency_prefix};
use super::state::{Action, Admission, CallResult, Plan, PlannedCall, RunState};
use crate::approval::{ApprovalRequest, Approver};
use crate::context::ContextConfig;
use crate::events::ApprovalCall;
use crate::events::{Emitter, EventKind, Observer, ObserverErrorHook, ms, panic_message};
use crate::hook::{Hook, HookContext, HookEvent, HookResult, PostTool, PreTool, StopAnswer};
use crate::journal::{Journal, JournalObserver, RunJournal};
use crate::limits::{ConfigError, Limits};
use crate::message::Message;
use crate::model::{Model, ModelError, ModelIdentity, ModelResponse};
use crate::outcome::{Outcome, Status};
use crate::output::OutputSchema;
use crate::policy::Policy;
use crate::policy::Strictest;
use crate::registry::{Registry, ToolSource};
use crate::spans;
use crate::subagent::{Left, Link, Rules, RunScope};
use crate::tool::{ToolContext, ToolError};

/// Why [`Agent::run_typed`] has no value to give.
#[derive(Debug, thiserror::Error)]
pub enum TypedRunError {
    /// The type's schema is not a valid output schema.
    #[error("the output type's schema: {0}")]
    Schema(String),
    /// The run ended without a valid output (see the outcome's status and error).
    #[error("the run ended {} without a valid output{}", .0.status, .0.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default())]
    NoOutput(Box<Outcome>),
    /// The output matched the schema but did not deserialize into the type.
    #[error("the output does not deserialize: {message}")]
    Deserialize {
        /// What serde said.
        message: String,
        /// The run's outcome.
        outcome: Box<Outcome>,
    },
}

/// A configured agent: a model, tools, limits, context rules, a policy and observers. One agent serves
/// many runs, concurrently.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use reins::{Agent, ModelResponse, ScriptedModel, Status};
/// let model = ScriptedModel::new(vec![Ok(ModelResponse::text("hello"))]);
/// let agent = Agent::builder(model).build().unwrap();
/// let outcome = agent.run("hi", tokio_util::sync::CancellationToken::new()).await;
/// assert_eq!(outcome.status, Status::Completed);
/// assert_eq!(outcome.answer.as_deref(), Some("hello"));
/// # });
/// ```
pub struct Agent {
    name: Option<Arc<str>>,
    model: Arc<dyn Model>,
    compact_model: Option<Arc<dyn Model>>,
    instructions: Option<Arc<str>>,
    registry: Arc<Registry>,
    tool_source: Option<Arc<dyn ToolSource>>,
    limits: Limits,
    context: ContextConfig,
    policy: Option<Arc<dyn Policy>>,
    observers: Vec<Arc<dyn Observer>>,
    on_observer_error: Option<ObserverErrorHook>,
    include_content: bool,
    trace_content: Option<bool>,
    journal: Option<Arc<dyn Journal>>,
    output_schema: Option<OutputSchema>,
    approver: Option<Arc<dyn Approver>>,
    hooks: Vec<Arc<dyn Hook>>,
}

/// Builds an [`Agent`].
pub struct AgentBuilder {
    agent: Agent,
    /// Tools added one by one ([`AgentBuilder::tool`]), put beside the registry's at [`AgentBuilder::build`].
    tools: Vec<Arc<dyn crate::tool::Tool>>,
}

impl AgentBuilder {
    /// The agent's name: its runs' spans are `invoke_agent {name}` with `gen_ai.agent.name` (see
    /// [`crate::spans`]). Empty text is none.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        let name: String = name.into();
        self.agent.name = (!name.is_empty()).then(|| Arc::from(name));
        self
    }
    /// The instructions (a system prompt) of every run: each model call carries them, and each adapter
    /// sends them in its API's own slot (OpenAI Responses `instructions`, Chat Completions a leading
    /// `system` message, Anthropic `system`). They are part of the run's state (so a resumed or replayed
    /// run has them), recorded with the session, and counted in the context budget, measured once per
    /// run. Empty text is none.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        let text: String = text.into();
        self.agent.instructions = (!text.is_empty()).then(|| Arc::from(text));
        self
    }
    /// Binds the final answer of every run to a JSON Schema (see [`crate::output`]): the model gets one more
    /// tool, [`crate::FINAL_ANSWER_TOOL`], whose arguments are the answer; every other tool stays on offer on
    /// every turn. The outcome's `output` holds the validated JSON.
    pub fn output_schema(mut self, schema: OutputSchema) -> Self {
        self.agent.output_schema = Some(schema);
        self
    }
    /// The model that writes summaries under the `summarize` context strategy (default: the run's own).
    pub fn compact_model(mut self, model: Arc<dyn Model>) -> Self {
        self.agent.compact_model = Some(model);
        self
    }
    /// The tools (those added with [`AgentBuilder::tool`] join them).
    pub fn registry(mut self, registry: impl Into<Arc<Registry>>) -> Self {
        self.agent.registry = registry.into();
        self
    }
    /// Adds one tool, beside the registry's (if one is given) and the others added so far; names and schemas
    /// are checked by [`AgentBuilder::build`], which refuses a name taken twice.
    ///
    /// ```
    /// use reins::prelude::*;
    /// let echo = FnTool::new("echo", "Returns its text.", serde_json::json!({"type": "object"}),
    ///     |args, _| async move { Ok(ToolOutput::Json(args)) });
    /// let agent = Agent::builder(ScriptedModel::new(vec![ModelResponse::text("hi")])).tool(echo).build().unwrap();
    /// assert!(agent.registry().get("echo").is_some());
    /// ```
    pub fn tool(mut self, tool: impl crate::tool::Tool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }
    /// Adds one shared tool (see [`AgentBuilder::tool`]).
    pub fn shared_tool(mut self, tool: Arc<dyn crate::tool::Tool>) -> Self {
        self.tools.push(tool);
        self
    }
    /// Tools that may change between steps: asked at the start of each run and after each tool batch
    /// (replaces [`AgentBuilder::registry`]).
    pub fn tool_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.agent.tool_source = Some(source);
        self
    }
    /// The limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.agent.limits = limits;
        self
    }
    /// The context rules.
    pub fn context(mut self, context: ContextConfig) -> Self {
        self.agent.context = context;
        self
    }
    /// The pre-execution hook.
    pub fn policy(mut self, policy: impl Policy + 'static) -> Self {
        self.agent.policy = Some(Arc::new(policy));
        self
    }
    /// Adds an observer.
    pub fn observer(mut self, observer: impl Observer + 'static) -> Self {
        self.agent.observers.push(Arc::new(observer));
        self
    }
    /// Adds a shared observer.
    pub fn shared_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.agent.observers.push(observer);
        self
    }
    /// Hears about observers that fail or panic.
    pub fn on_observer_error(
        mut self,
        hook: impl Fn(usize, &crate::events::ObserverError) + Send + Sync + 'static,
    ) -> Self {
        self.agent.on_observer_error = Some(Arc::new(hook));
        self
    }
    /// Puts prompts, arguments, texts and results into events (off by default).
    pub fn include_content(mut self, on: bool) -> Self {
        self.agent.include_content = on;
        self
    }
    /// Puts prompts, instructions, messages, arguments and results into the run's spans (see
    /// [`crate::spans`]); by default they follow [`AgentBuilder::include_content`]. A sub-agent's spans carry
    /// content when its own setting or its parent run's says so.
    pub fn trace_content(mut self, on: bool) -> Self {
        self.agent.trace_content = Some(on);
        self
    }
    /// Records every run durably through `journal` (see [`crate::journal`]).
    pub fn journal(mut self, journal: impl Journal + 'static) -> Self {
        self.agent.journal = Some(Arc::new(journal));
        self
    }
    /// Records every run durably through a shared journal.
    pub fn shared_journal(mut self, journal: Arc<dyn Journal>) -> Self {
        self.agent.journal = Some(journal);
        self
    }
    /// Decides on calls a policy or hook asks about (see [`crate::approval`]). Without one, a batch that
    /// needs a decision ends the run `awaiting_approval`.
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.agent.approver = Some(approver);
        self
    }
    /// Adds a hook (see [`crate::hook`]); hooks run in the order they were added.
    pub fn hook(mut self, hook: Arc<dyn Hook>) -> Self {
        self.agent.hooks.push(hook);
        self
    }
    /// Checks the configuration.
    pub fn build(mut self) -> Result<Agent, ConfigError> {
        self.agent.limits.validate()?;
        if !self.tools.is_empty() {
            if self.agent.tool_source.is_some() {
                return Err(ConfigError(
                    "tools added one by one join a registry, not a tool source: add them to the source".into(),
                ));
            }
            let tools = std::mem::take(&mut self.tools);
            let registry = self.agent.registry.with_tools(tools).map_err(|e| ConfigError(format!("tools: {e}")))?;
            self.agent.registry = Arc::new(registry);
        }
        if let Some(schema) = &self.agent.output_schema {
            if self.agent.tool_source.is_none() {
                self.agent.registry.with_output(schema).map_err(|e| ConfigError(format!("output schema: {e}")))?;
            }
        }
        if self.agent.context.max_tool_result_chars == Some(0) {
            return Err(ConfigError("max_tool_result_chars must be at least 1".into()));
        }
        if self.agent.context.max_context == Some(0) {
            return Err(ConfigError("the context budget must be at least 1".into()));
        }
        if let Some(max) = self.agent.limits.max_cost_usd {
            if self.agent.model.price().is_none() {
                return Err(ConfigError(format!(
                    "max_cost_usd ${max} needs a model whose price is known (a script model takes one from `[provider] price`)"
                )));
            }
            if self.agent.compact_model.as_ref().is_some_and(|m| m.price().is_none()) {
                return Err(ConfigError(format!(
                    "max_cost_usd ${max} needs the summary model's price too (its calls are charged at it)"
                )));
            }
        }
        let at = self.agent.context.compact_at;
        if !(at.is_finite() && at > 0.0 && at <= 1.0) {
            return Err(ConfigError(format!("compact_at must lie in (0, 1], not {at}")));
        }
        Ok(self.agent)
    }
}

/// Where a batch stands in its run: what a tool call's idempotency key is made of.
#[derive(Clone, Copy)]
struct BatchAt<'a> {
    step: u64,
    key_prefix: &'a Arc<str>,
    /// Whether the calls' spans carry content.
    span_content: bool,
}

/// A model call with its panic caught and reported as a failed call.
fn caught(
    call: impl std::future::Future<Output = Result<ModelResponse, ModelError>>,
) -> impl std::future::Future<Output = Result<ModelResponse, ModelError>> {
    AssertUnwindSafe(call).catch_unwind().map(|r| match r {
        Ok(r) => r,
        Err(panic) => Err(ModelError::Failed(format!("the model panicked: {}", panic_message(&panic)))),
    })
}

/// A model call as `performer` does it (awaited as it is without one).
fn perform_model<'a>(
    performer: Option<&'a dyn Performer>,
    step: ModelStep,
    work: impl std::future::Future<Output = Result<ModelResponse, ModelError>> + Send + 'a,
) -> impl std::future::Future<Output = Result<ModelResponse, ModelError>> + 'a {
    match performer {
        None => Either::Left(work),
        Some(p) => Either::Right(p.model_call(step, Box::pin(work))),
    }
}

/// The hooks a run's calls meet (its own, then its ancestors' for a sub-agent), what they are told about the
/// run, and the policy a hook's rewritten arguments are put to again.
struct Hooked<'a> {
    ctx: HookContext,
    hooks: &'a [Arc<dyn Hook>],
    /// How many of `hooks` are the run's own (only those judge its final answer).
    own: usize,
    policy: Option<&'a dyn Policy>,
}

/// The progress of one call of a batch.
#[derive(Clone, Default)]
struct Slot {
    started: bool,
    reported: bool,
    /// When the call began running: a call the batch's interruption cut short ran until then.
    began: Option<Instant>,
    /// When it ended (read once: it dates the call's `tool_end` and gives its duration).
    ended: Option<Instant>,
    result: Option<CallResult>,
    /// The `hook` events of its `post_tool` hooks, sent after its `tool_end`.
    hook_events: Vec<EventKind>,
}

impl Slot {
    /// Records the call's result, and when it ended (now).
    fn finish(&mut self, result: CallResult) {
        self.ended = Some(Instant::now());
        self.result = Some(result);
    }

    /// How long the call ran (zero for one that did not run or did not end).
    fn elapsed(&self) -> Duration {
        match (self.began, self.ended) {
            (Some(b), Some(e)) => e.saturating_duration_since(b),
            _ => Duration::ZERO,
        }
    }
}

enum Interrupt {
    Cancelled,
    Deadline,
}

impl Interrupt {
    fn status(&self) -> Status {
        match self {
            Interrupt::Cancelled => Status::Aborted,
            Interrupt::Deadline => Status::Timeout,
        }
    }
    fn reason(&self, limits: &Limits) -> String {
        match self {
            Interrupt::Cancelled => "the run was cancelled".to_owned(),
            Interrupt::Deadline => format!(
                "the run's deadline passed ({})",
                limits.timeout.map_or_else(String::new, |d| humantime::format_duration(d).to_string())
            ),
        }
    }
}

/// Hands the transcript items appended since the last call to the journal.
/// The event of a tool set that changed between steps (names added, removed, or with a new description or
/// schema), or `None` when `next` offers the same tools as `old`.
fn tools_changed(old: &Arc<Registry>, next: &Arc<Registry>) -> Option<EventKind> {
    if Arc::ptr_eq(old, next) {
        return None;
    }
    let (old, next) = (old.specs(), next.specs());
    fn find<'a>(specs: &'a [crate::tool::ToolSpec], name: &str) -> Option<&'a crate::tool::ToolSpec> {
        specs.iter().find(|s| s.name == name)
    }
    let added: Vec<String> = next.iter().filter(|s| find(old, &s.name).is_none()).map(|s| s.name.clone()).collect();
    let removed: Vec<String> = old.iter().filter(|s| find(next, &s.name).is_none()).map(|s| s.name.clone()).collect();
    let changed: Vec<String> =
        next.iter().filter(|s| find(old, &s.name).is_some_and(|o| o != *s)).map(|s| s.name.clone()).collect();
    if added.is_empty() && removed.is_empty() && changed.is_empty() {
        return None;
    }
    Some(EventKind::ToolsChanged { added, removed, changed })
}

fn journal_sync(journal: &dyn RunJournal, state: &RunState, journaled: &mut usize) {
    let transcript = state.transcript();
    if *journaled >= transcript.len() {
        return;
    }
    let conversation = transcript.conversation();
    for index in *journaled..transcript.len() {
        if let Some(m) = conversation.get(index) {
            journal.message(index, m);
        }
    }
    *journaled = transcript.len();
}

/// A run whose log failed at its end: it is reported `aborted` with the log's error (its answer kept).
fn fail_outcome(outcome: &mut Outcome, e: crate::journal::JournalError) {
    if outcome.status == Status::Aborted && outcome.error.as_deref().is_some_and(|m| m.starts_with("session log:")) {
        return;
    }
    outcome.error = Some(match outcome.error.take() {
        Some(prev) => format!("{e} (the run had ended {}: {prev})", outcome.status),
        None => format!("{e} (the run had ended {})", outcome.status),
    });
    outcome.status = Status::Aborted;
}

impl Agent {
    /// A builder around `model`, with no tools and default limits.
    pub fn builder(model: impl Model + 'static) -> AgentBuilder {
        Self::builder_shared(Arc::new(model))
    }

    /// A builder around a shared model.
    pub fn builder_shared(model: Arc<dyn Model>) -> AgentBuilder {
        AgentBuilder {
            agent: Agent {
                name: None,
                model,
                compact_model: None,
                instructions: None,
                registry: Arc::new(Registry::empty()),
                tool_source: None,
                limits: Limits::default(),
                context: ContextConfig::default(),
                policy: None,
                observers: Vec::new(),
                on_observer_error: None,
                include_content: false,
                trace_content: None,
                journal: None,
                output_schema: None,
                approver: None,
                hooks: Vec::new(),
            },
            tools: Vec::new(),
        }
    }

    /// The agent's name, if it has one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The instructions a new run gets, if any.
    pub fn instructions(&self) -> Option<&str> {
        self.instructions.as_deref()
    }

    /// The instructions a new run gets, shared.
    pub fn instructions_shared(&self) -> Option<Arc<str>> {
        self.instructions.clone()
    }

    /// True when a run's registry may hold a sub-agent (a tool source's tools may change).
    fn registry_may_hold_sub_agents(&self) -> bool {
        self.tool_source.is_some() || self.registry.has_sub_agents()
    }

    /// True when every tool is parallel-safe (no tool source, whose tools may change): a sub-agent
    /// ([`crate::AgentTool`]) of this agent then runs concurrently with other parallel-safe calls.
    pub fn all_tools_parallel_safe(&self) -> bool {
        self.tool_source.is_none()
            && self.registry.specs().iter().all(|s| self.registry.get(&s.name).is_some_and(|t| t.parallel_safe()))
    }

    /// The tools.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The tools a run of this agent sees now: its tool source's current registry (MCP servers' tools
    /// included), or [`Agent::registry`] without one.
    pub async fn current_registry(&self) -> Arc<Registry> {
        match &self.tool_source {
            Some(source) => source.registry().await,
            None => Arc::clone(&self.registry),
        }
    }

    /// The output schema of every run, if any.
    pub fn output_schema(&self) -> Option<&OutputSchema> {
        self.output_schema.as_ref()
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The context rules.
    pub fn context(&self) -> &ContextConfig {
        &self.context
    }

    /// Runs `prompt` to its end. Never panics on what the model or a tool does; cancelling `cancel` ends
    /// the run `aborted` promptly.
    pub async fn run(&self, prompt: &str, cancel: CancellationToken) -> Outcome {
        let run_id = uuid::Uuid::new_v4().to_string();
        match RunState::new(run_id, prompt, self.limits.clone(), &self.context) {
            Ok(state) => self.drive(state.with_instructions(self.instructions.clone(), &self.context), cancel).await,
            Err(e) => self.refused(prompt, e),
        }
    }

    /// Runs a prompt with images (see [`crate::Image`]): each adapter sends them after the text in its API's
    /// own form.
    pub async fn run_with_images(
        &self,
        prompt: &str,
        images: Vec<crate::image::Image>,
        cancel: CancellationToken,
    ) -> Outcome {
        let run_id = uuid::Uuid::new_v4().to_string();
        let first = Message::user_with_images(prompt, images);
        match RunState::new_with_message(run_id, first, self.limits.clone(), &self.context) {
            Ok(state) => self.drive(state.with_instructions(self.instructions.clone(), &self.context), cancel).await,
            Err(e) => self.refused(prompt, e),
        }
    }

    /// Runs `prompt` with its final answer bound to the schema of `T` (from `schemars`, in place of the
    /// agent's own output schema) and deserializes the validated output. The outcome comes with it, or
    /// with the error when the run did not end with a valid output.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use reins::*;
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Answer { city: String }
    /// let model = ScriptedModel::new(vec![ModelResponse::tool_calls("", vec![ToolCall::new(
    ///     "1", "final_answer", serde_json::json!({"city": "Paris"}))])]);
    /// let agent = Agent::builder(model).build().unwrap();
    /// let (answer, outcome) = agent.run_typed::<Answer>("where?", Default::default()).await.unwrap();
    /// assert_eq!(answer.city, "Paris");
    /// assert_eq!(outcome.status, Status::Completed);
    /// # });
    /// ```
    pub async fn run_typed<T>(&self, prompt: &str, cancel: CancellationToken) -> Result<(T, Outcome), TypedRunError>
    where
        T: serde::de::DeserializeOwned + schemars::JsonSchema,
    {
        let schema = OutputSchema::of::<T>().map_err(|e| TypedRunError::Schema(e.to_string()))?;
        let run_id = uuid::Uuid::new_v4().to_string();
        let outcome = match RunState::new(run_id, prompt, self.limits.clone(), &self.context) {
            Ok(state) => {
                let state =
                    state.with_instructions(self.instructions.clone(), &self.context).with_output_schema(Some(&schema));
                self.drive_traced(state, cancel, Some(&schema), None, None).await
            }
            Err(e) => self.refused(prompt, e),
        };
        let Some(value) = outcome.output.clone() else {
            return Err(TypedRunError::NoOutput(Box::new(outcome)));
        };
        match serde_json::from_value::<T>(value) {
            Ok(v) => Ok((v, outcome)),
            Err(e) => Err(TypedRunError::Deserialize { message: e.to_string(), outcome: Box::new(outcome) }),
        }
    }

    fn refused(&self, prompt: &str, e: ConfigError) -> Outcome {
        Outcome {
            status: Status::Aborted,
            answer: None,
            error: Some(e.to_string()),
            steps: 0,
            tool_calls: 0,
            usage: Default::default(),
            cost_usd: None,
            finish_reason: None,
            run_id: String::new(),
            session_id: None,
            instructions: self.instructions.as_deref().map(str::to_owned),
            compactions: 0,
            output: None,
            pending: Vec::new(),
            agents: Default::default(),
            messages: vec![Message::user(prompt)],
        }
    }

    /// Drives an existing state (new or resumed) to its end. The state carries the instructions the run
    /// is given (see [`RunState::set_instructions`]); [`Agent::run`] puts the agent's into a new state.
    /// With an output schema on the agent, a state that has none is given it (a new run's is set by
    /// [`Agent::run`]).
    ///
    /// The run is traced as an `invoke_agent` span (see [`crate::spans`]), a child of the caller's current
    /// span; nothing is built when no `tracing` subscriber listens.
    pub async fn drive(&self, state: RunState, cancel: CancellationToken) -> Outcome {
        self.drive_performed(state, cancel, None).await
    }

    /// Drives an existing state to its end with each model call and tool call performed by `performer`
    /// (for example as a journaled step of a durable run). Everything else — deadline, cancellation,
    /// batching, hooks, events, limits — is the same as [`Agent::drive`].
    pub async fn drive_with(&self, state: RunState, cancel: CancellationToken, performer: &dyn Performer) -> Outcome {
        self.drive_performed(state, cancel, Some(performer)).await
    }

    async fn drive_performed(
        &self,
        state: RunState,
        cancel: CancellationToken,
        performer: Option<&dyn Performer>,
    ) -> Outcome {
        let schema = self.output_schema.as_ref();
        let state =
            if schema.is_some() && state.output_valid().is_none() { state.with_output_schema(schema) } else { state };
        self.drive_traced(state, cancel, schema, performer, None).await
    }

    /// Drives `state` inside the run's span.
    async fn drive_traced(
        &self,
        state: RunState,
        cancel: CancellationToken,
        output: Option<&OutputSchema>,
        performer: Option<&dyn Performer>,
        link: Option<Link>,
    ) -> Outcome {
        let span = spans::run_span(self.name.as_deref(), state.run_id());
        let info =
            if span.is_disabled() { ModelIdentity::default() } else { spans::model(&span, self.model.identity()) };
        spans::within(&span, self.drive_inner(state, cancel, output, performer, &span, &info, link)).await
    }

    /// [`Agent::drive`], for a sub-agent's run when `link` ties it to the run that started it: the parent's
    /// observers hear its events (tagged), its spending is counted into the parent, and it is recorded as a
    /// child run of the parent's journal (see [`crate::subagent`]).
    pub(crate) async fn drive_linked(&self, state: RunState, cancel: CancellationToken, link: Link) -> Outcome {
        let schema = self.output_schema.as_ref();
        let state =
            if schema.is_some() && state.output_valid().is_none() { state.with_output_schema(schema) } else { state };
        self.drive_traced(state, cancel, schema, None, Some(link)).await
    }

    /// The tools of a step: the registry, plus the output schema's final-answer tool.
    fn step_registry(base: Arc<Registry>, output: Option<&OutputSchema>) -> Result<Arc<Registry>, String> {
        match output {
            None => Ok(base),
            Some(s) => base.with_output(s).map(Arc::new).map_err(|e| format!("output schema: {e}")),
        }
    }

    /// The run's body, inside its span (`run_span`; `info`: its model, for the spans of its calls).
    #[allow(clippy::too_many_arguments)]
    async fn drive_inner(
        &self,
        mut state: RunState,
        cancel: CancellationToken,
        output: Option<&OutputSchema>,
        performer: Option<&dyn Performer>,
        run_span: &Span,
        info: &ModelIdentity,
        link: Option<Link>,
    ) -> Outcome {
        let started = Instant::now();
        // Whether the spans carry content: the agent's setting, or its parent run's for a sub-agent.
        let span_content =
            self.trace_content.unwrap_or(self.include_content) || link.as_ref().is_some_and(Link::trace_content);
        state.set_prices(self.model.price(), self.compact_model.as_ref().map(|m| m.price()));
        let limits = state.limits().clone();
        let deadline = limits.timeout.and_then(|d| started.checked_add(d)).map(tokio::time::Instant::from_std);
        let run_cancel = cancel.child_token();
        let mut deadline_sleep = pin!(async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        });
        // One wait for the caller's cancellation, polled again at every step (it stays ready once fired),
        // instead of registering a new waiter for each model call and batch.
        let mut cancelled = pin!(cancel.cancelled());
        let base = match &self.tool_source {
            Some(source) => source.registry().await,
            None => Arc::clone(&self.registry),
        };
        let mut registry_error = None;
        let mut registry = Self::step_registry(Arc::clone(&base), output).unwrap_or_else(|e| {
            registry_error = Some(e);
            base
        });
        let mut journal_error = None;
        let started_log = match (link.as_ref().and_then(Link::journal), &self.journal) {
            // A sub-agent's run is a child run in its parent's log (or, when the parent keeps none, in its own).
            (Some(parent), _) => {
                let name = link.as_ref().map_or("", |l| &*l.name);
                let parent_run = link.as_ref().map_or("", |l| &**l.parent_run_id());
                parent.child(name, parent_run, &state, registry.specs()).await.transpose()
            }
            (None, Some(j)) => Some(j.start(&state, registry.specs()).await),
            (None, None) => None,
        };
        let journal: Option<Arc<dyn RunJournal>> = match started_log {
            None => None,
            Some(Ok(rj)) => Some(rj),
            Some(Err(e)) => {
                journal_error = Some(e);
                None
            }
        };
        let session_id = journal.as_ref().map(|j| j.session_id().to_owned());
        // The conversation's session: the journal's, else a durable performer's. Spans name it, and it starts
        // every tool call's idempotency key and is the prompt-cache key (the run's id without one); both keys
        // are made once per run, not per call.
        let span_session = session_id.as_deref().or(performer.and_then(|p| p.session_id()));
        let key_prefix: Arc<str> = Arc::from(idempotency_prefix(span_session, state.run_id()));
        let cache_key: Arc<str> = Arc::from(span_session.unwrap_or(state.run_id()));
        let mut journaled = journal.as_ref().map_or(0, |j| j.recorded());
        let mut observers = self.observers.clone();
        let (mut on_observer_error, mut include_content) = (self.on_observer_error.clone(), self.include_content);
        if let Some(link) = &link {
            observers.extend(link.observers().iter().cloned());
            observers.push(link.spend_observer(state.run_id()));
            on_observer_error = on_observer_error.or_else(|| link.on_observer_error().cloned());
            include_content |= link.include_content();
        }
        // What this run's own sub-agents inherit: every observer but the journal's.
        let sub_agents = self.registry_may_hold_sub_agents().then(|| observers.clone());
        if let Some(j) = &journal {
            observers.push(Arc::new(JournalObserver(j.clone())));
        }
        let mut emitter =
            Emitter::new(Arc::from(state.run_id()), observers, on_observer_error.clone(), include_content);
        if let Some(link) = &link {
            emitter.tag(Arc::clone(&link.name), Arc::clone(link.parent_run_id()));
        }
        if let Some(e) = journal_error {
            state.interrupt(Status::Aborted, e.to_string(), &self.context);
        }
        if let Some(e) = registry_error {
            state.interrupt(Status::Aborted, e, &self.context);
        }
        if !run_span.is_disabled() {
            let first = state.transcript().conversation();
            spans::run_started(run_span, span_session, span_content, state.instructions(), first.get(0));
        }
        if emitter.active() {
            let tools = registry.specs().iter().map(|s| s.name.clone()).collect();
            let prompt =
                include_content.then(|| state.transcript().to_vec().first().map(|m| m.content().to_owned())).flatten();
            let instructions_chars = state.instructions().map_or(0, |t| t.chars().count() as u64);
            let instructions = include_content.then(|| state.instructions().map(str::to_owned)).flatten();
            emitter.emit(EventKind::RunStart {
                tools,
                instructions_chars,
                instructions,
                prompt,
                session_id: session_id.clone(),
            });
        }
        let interrupted = |deadline_passed: bool| {
            if cancel.is_cancelled() {
                Some(Interrupt::Cancelled)
            } else if deadline_passed || deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                Some(Interrupt::Deadline)
            } else {
                None
            }
        };
        // The rules of the run: its own policy and hooks, and for a sub-agent those of every ancestor (the
        // strictest decision of its line wins; an ancestor's `pre_tool` and `post_tool` hooks run after its
        // own, its `stop` hooks judge the ancestor's own answer only).
        let inherited = link.as_ref().map(Link::rules).filter(|r| !r.policies.is_empty() || !r.hooks.is_empty());
        let (policy, joined_hooks) = match inherited {
            None => (self.policy.clone(), None),
            Some(up) => {
                let rules = Rules::of(self.policy.as_ref(), &self.hooks, Some(up));
                let policy: Option<Arc<dyn Policy>> = match rules.policies.len() {
                    0 => None,
                    1 => rules.policies.first().cloned(),
                    _ => Some(Arc::new(Strictest(rules.policies))),
                };
                (policy, Some(rules.hooks))
            }
        };
        let hooks: &[Arc<dyn Hook>] = joined_hooks.as_deref().unwrap_or(self.hooks.as_slice());
        // What this run's sub-agents are under besides their own rules.
        let rules = sub_agents.as_ref().map(|_| Arc::new(Rules::of(self.policy.as_ref(), &self.hooks, inherited)));
        // What hooks are told about the run (only when there are hooks).
        let hooked = (!hooks.is_empty()).then(|| Hooked {
            ctx: HookContext { run_id: state.run_id().to_owned(), session_id: session_id.clone() },
            hooks,
            own: self.hooks.len(),
            policy: policy.as_deref(),
        });
        loop {
            if let Some(j) = &journal {
                journal_sync(j.as_ref(), &state, &mut journaled);
            }
            let steps_so_far = state.steps();
            // What sub-agents may spend: taken before the step (the batch borrows the state).
            let left = registry.has_sub_agents().then(|| Left::of(&state));
            match state.next_action(&registry, &self.context) {
                Action::Finished => break,
                Action::CallModel(mut request) => {
                    request.cache_key = Some(cache_key.clone());
                    if let Some(i) = interrupted(false) {
                        self.stop(&mut state, &mut emitter, &run_cancel, i);
                        continue;
                    }
                    if let Some(j) = &journal {
                        if let Err(e) = j.flush().await {
                            run_cancel.cancel();
                            state.interrupt(Status::Aborted, e.to_string(), &self.context);
                            continue;
                        }
                    }
                    let step = state.steps() + 1;
                    let t0 = Instant::now();
                    emitter.model_start(step, request.messages.len(), t0);
                    let chat = spans::chat_span(info, step, span_session);
                    if span_content {
                        spans::chat_request(&chat, &request);
                    }
                    let generate = spans::boxed_within(&chat, self.model.generate(&request, &run_cancel));
                    let call = perform_model(performer, ModelStep { step, summary: false }, caught(generate));
                    let result = tokio::select! {
                        biased;
                        _ = &mut cancelled => Err(Interrupt::Cancelled),
                        _ = &mut deadline_sleep => Err(Interrupt::Deadline),
                        r = call => Ok(r),
                    };
                    drop(request);
                    let result = match result {
                        // A response that arrives once the caller cancelled is not counted.
                        Ok(_) if cancel.is_cancelled() => Err(Interrupt::Cancelled),
                        other => other,
                    };
                    let t1 = Instant::now();
                    let elapsed = t1.saturating_duration_since(t0);
                    let response = match result {
                        Err(i) => {
                            spans::fail(&chat, i.status().as_str(), &i.reason(&limits));
                            self.stop(&mut state, &mut emitter, &run_cancel, i);
                            continue;
                        }
                        Ok(r) => r,
                    };
                    if let Some(j) = &journal {
                        j.response(step, response.as_ref());
                    }
                    spans::chat_response(&chat, response.as_ref(), span_content, state.price());
                    let answered = response.is_ok();
                    if let Ok(r) = &response {
                        emitter.stage_model_end(step, r, state.price());
                    }
                    let admission = state.on_model_response(response, &registry, policy.as_deref(), &self.context);
                    if answered && !chat.is_disabled() && matches!(admission, Admission::Ended(Status::ModelError)) {
                        let error = state.outcome().error.unwrap_or_default();
                        spans::fail(&chat, "invalid_response", &error);
                    }
                    drop(chat);
                    if emitter.active() {
                        if answered && !matches!(admission, Admission::Ended(Status::ModelError)) {
                            emitter.send_model_end(t0, elapsed, t1);
                        } else {
                            let error = state.outcome().error.unwrap_or_default();
                            let kind = EventKind::ModelError { step, duration_ms: ms(elapsed), error };
                            emitter.emit_after(kind, t0, elapsed, t1);
                        }
                        if let Admission::Ended(status) = &admission {
                            if !matches!(status, Status::ModelError | Status::Aborted) {
                                let status = *status;
                                let detail = state.outcome().error.unwrap_or_default();
                                emitter.emit(EventKind::LimitHit { status, detail });
                            }
                        }
                    }
                    if let (Some(h), Admission::Batch | Admission::Completed) = (&hooked, &admission) {
                        let interrupted_hooks = tokio::select! {
                            biased;
                            _ = &mut cancelled => Some(Interrupt::Cancelled),
                            _ = &mut deadline_sleep => Some(Interrupt::Deadline),
                            () = self.hooks_after_response(&admission, &mut state, &registry, h, &run_cancel, &mut emitter) => None,
                        };
                        if let Some(i) = interrupted_hooks {
                            self.stop(&mut state, &mut emitter, &run_cancel, i);
                        }
                    }
                }
                Action::Approve(calls) => {
                    if let Some(i) = interrupted(false) {
                        self.stop(&mut state, &mut emitter, &run_cancel, i);
                        continue;
                    }
                    if emitter.active() {
                        let listed = calls
                            .iter()
                            .map(|c| ApprovalCall {
                                call_id: c.call_id.clone(),
                                name: c.name.clone(),
                                arguments_hash: c.arguments_hash.clone(),
                                reason: match &c.plan {
                                    Plan::Ask { reason } => reason.clone(),
                                    _ => String::new(),
                                },
                                arguments: self.include_content.then(|| c.arguments.clone()),
                            })
                            .collect();
                        emitter.emit(EventKind::ApprovalRequested { step: state.steps(), calls: listed });
                    }
                    let approver = performer.and_then(|p| p.approver()).or(self.approver.as_deref());
                    // The waiting batch is durable before anyone is asked: a run killed while it waits for the
                    // answer is decided later like one that ended `awaiting_approval`.
                    if let (Some(j), Some(_)) = (&journal, approver) {
                        j.waiting(&state.pending_batch());
                        if let Err(e) = j.flush().await {
                            run_cancel.cancel();
                            state.interrupt(Status::Aborted, e.to_string(), &self.context);
                            continue;
                        }
                    }
                    let detail = match approver {
                        None => None,
                        Some(approver) => {
                            let request = ApprovalRequest {
                                run_id: state.run_id().to_owned(),
                                session_id: session_id.clone(),
                                calls,
                            };
                            let asked = AssertUnwindSafe(approver.decide(&request, &run_cancel)).catch_unwind();
                            let answer = tokio::select! {
                                biased;
                                _ = &mut cancelled => Err(Interrupt::Cancelled),
                                _ = &mut deadline_sleep => Err(Interrupt::Deadline),
                                r = asked => Ok(r),
                            };
                            match answer {
                                Err(i) => {
                                    self.stop(&mut state, &mut emitter, &run_cancel, i);
                                    continue;
                                }
                                Ok(Err(panic)) => Some(format!("the approver panicked: {}", panic_message(&panic))),
                                Ok(Ok(Err(e))) => Some(e.to_string()),
                                Ok(Ok(Ok(decisions))) => {
                                    let mut problems = Vec::new();
                                    for d in decisions {
                                        match state.decide(&d, &registry) {
                                            Ok(()) => {
                                                let name = request
                                                    .calls
                                                    .iter()
                                                    .find(|c| c.call_id == d.call_id)
                                                    .map(|c| c.name.clone())
                                                    .unwrap_or_default();
                                                emitter.emit(decided_event(&d, name, self.include_content));
                                            }
                                            Err(e) => problems.push(e.to_string()),
                                        }
                                    }
                                    (!problems.is_empty()).then(|| problems.join("; "))
                                }
                            }
                        }
                    };
                    if state.awaits_decision() {
                        state.await_approval(detail);
                    }
                }
                Action::Compact(request, plan) => {
                    if let Some(i) = interrupted(false) {
                        self.stop(&mut state, &mut emitter, &run_cancel, i);
                        continue;
                    }
                    if let Some(j) = &journal {
                        if let Err(e) = j.flush().await {
                            run_cancel.cancel();
                            state.interrupt(Status::Aborted, e.to_string(), &self.context);
                            continue;
                        }
                    }
                    let step = state.steps();
                    emitter.emit(EventKind::CompactionStart {
                        step,
                        items: plan.items,
                        chars_before: plan.chars_before,
                    });
                    let model = self.compact_model.as_ref().unwrap_or(&self.model);
                    let compaction = spans::compaction_span(step, plan.items, plan.chars_before);
                    let chat = match compaction.is_disabled() {
                        true => Span::none(),
                        false => compaction.in_scope(|| {
                            let info = self.compact_model.as_ref().map_or_else(|| info.clone(), |m| m.identity());
                            spans::chat_span(&info, step, span_session)
                        }),
                    };
                    if span_content {
                        spans::chat_request(&chat, &request);
                    }
                    let t0 = Instant::now();
                    let generate = model.generate(&request, &run_cancel);
                    let generate = spans::boxed_within(&compaction, spans::boxed_within(&chat, generate));
                    let call = perform_model(performer, ModelStep { step, summary: true }, caught(generate));
                    let limit = self.context.summary_timeout;
                    let timeout = async move {
                        match limit {
                            Some(d) => tokio::time::sleep(d).await,
                            None => std::future::pending().await,
                        }
                    };
                    let result = tokio::select! {
                        biased;
                        _ = &mut cancelled => Err(Interrupt::Cancelled),
                        _ = &mut deadline_sleep => Err(Interrupt::Deadline),
                        () = timeout => Ok(Err(crate::model::ModelError::Failed(format!(
                            "the summary call timed out after {}",
                            limit.map_or_else(String::new, |d| humantime::format_duration(d).to_string())
                        )))),
                        r = call => Ok(r),
                    };
                    drop(request);
                    let response = match result {
                        Ok(_) if cancel.is_cancelled() => {
                            spans::fail(&chat, "aborted", "the run was cancelled");
                            self.stop(&mut state, &mut emitter, &run_cancel, Interrupt::Cancelled);
                            continue;
                        }
                        Err(i) => {
                            spans::fail(&chat, i.status().as_str(), &i.reason(&limits));
                            self.stop(&mut state, &mut emitter, &run_cancel, i);
                            continue;
                        }
                        Ok(r) => r,
                    };
                    let elapsed = t0.elapsed();
                    let usage = response.as_ref().ok().and_then(|r| r.usage);
                    let price = self.compact_model.as_ref().map_or_else(|| state.price().copied(), |m| m.price());
                    let cost_usd = usage.zip(price).map(|(u, p)| p.cost(&u));
                    if !chat.is_disabled() {
                        spans::chat_response(&chat, response.as_ref(), span_content, price.as_ref());
                    }
                    drop(chat);
                    let done = state.on_compaction_response(response, &self.context);
                    if let Some(done) = &done {
                        spans::compaction_done(&compaction, done.chars_after, done.fallback.as_deref());
                    }
                    drop(compaction);
                    if let Some(done) = done {
                        emitter.emit(EventKind::CompactionEnd {
                            step,
                            items: done.items,
                            chars_before: done.chars_before,
                            chars_after: done.chars_after,
                            duration_ms: ms(elapsed),
                            usage,
                            cost_usd,
                            fallback: done.fallback,
                        });
                    }
                    if let Some(Status::TokenLimit) = state.status() {
                        let detail = state.outcome().error.unwrap_or_default();
                        emitter.emit(EventKind::LimitHit { status: Status::TokenLimit, detail });
                    }
                }
                Action::RunTools(admitted) => {
                    // Borrowed from the state (not copied) until the results are recorded.
                    let batch: Vec<PlannedCall<'_>> = admitted.iter().collect();
                    // The proposed calls are durable before any of them runs: after a crash mid-batch a
                    // resume sees them without results, and no side effect is silently repeated. A batch
                    // whose calls are all refused runs nothing and needs no such wait.
                    if let Some(j) = journal.as_ref().filter(|_| batch.iter().any(|p| matches!(p.plan, Plan::Run))) {
                        if let Err(e) = j.flush().await {
                            run_cancel.cancel();
                            state.interrupt(Status::Aborted, e.to_string(), &self.context);
                            continue;
                        }
                    }
                    let mut slots: Vec<Slot> = vec![Slot::default(); batch.len()];
                    // Calls that ran before a sub-agent of the batch stopped it for a decision keep their
                    // results and do not run again.
                    if admitted.has_held() {
                        for (i, slot) in slots.iter_mut().enumerate() {
                            if let Some(r) = admitted.held_result(i) {
                                (slot.result, slot.started, slot.reported) = (Some(r), true, true);
                            }
                        }
                    }
                    // Sub-agent calls get the run's budget left and report what they spend (see `subagent`).
                    let scope = left.map(|left| {
                        Arc::new(
                            RunScope::new(
                                Arc::clone(emitter.run_id()),
                                left,
                                &batch,
                                &registry,
                                sub_agents.clone().unwrap_or_default(),
                                on_observer_error.clone(),
                                include_content,
                                journal.clone(),
                                deadline.map(tokio::time::Instant::into_std),
                                rules.clone().unwrap_or_default(),
                            )
                            .with_trace_content(span_content)
                            .with_resumes(admitted.agent_waits().to_vec()),
                        )
                    });
                    let outcome = {
                        let at = BatchAt { step: steps_so_far, key_prefix: &key_prefix, span_content };
                        let work = self.run_batch(
                            &registry,
                            &batch,
                            &mut slots,
                            &run_cancel,
                            &mut emitter,
                            hooked.as_ref(),
                            performer,
                            at,
                        );
                        let work = async {
                            match &scope {
                                Some(scope) => Arc::clone(scope).enter(work).await,
                                None => work.await,
                            }
                        };
                        tokio::select! {
                            biased;
                            _ = &mut cancelled => Some(Interrupt::Cancelled),
                            _ = &mut deadline_sleep => Some(Interrupt::Deadline),
                            () = work => None,
                        }
                    };
                    let end = outcome.or_else(|| interrupted(false));
                    let end = end.map(|i| {
                        run_cancel.cancel();
                        let reason = i.reason(&limits);
                        (i.status(), reason)
                    });
                    let unfinished = match &end {
                        Some((_, reason)) => format!("aborted: {reason}"),
                        None => "aborted: the call did not finish".to_owned(),
                    };
                    // Calls whose events were not sent yet (the batch was interrupted) get them now.
                    for (p, slot) in batch.iter().zip(&slots) {
                        if slot.reported {
                            continue;
                        }
                        let now = Instant::now();
                        if !slot.started {
                            emitter.tool_start(p.call, now);
                        }
                        let (content, is_error, elapsed) = match &slot.result {
                            Some(r) => (&r.content, r.is_error, slot.elapsed()),
                            // Cut short: it ran from its start until now.
                            None => (
                                &unfinished,
                                true,
                                slot.began.map_or(Duration::ZERO, |t| now.saturating_duration_since(t)),
                            ),
                        };
                        emitter.tool_end(p.call, is_error, || (elapsed, None, now), || content.clone());
                    }
                    if let Some((Status::Timeout, reason)) = &end {
                        emitter.emit(EventKind::LimitHit { status: Status::Timeout, detail: reason.clone() });
                    }
                    if let Some(scope) = &scope {
                        for (name, spent) in scope.take_spent() {
                            state.add_agent_spend(&name, &spent);
                        }
                    }
                    // The sub-agent runs that stopped for a decision come with their calls' results (also when
                    // a durable performer replays them).
                    let mut waits = Vec::new();
                    let results: Vec<Option<CallResult>> = slots
                        .into_iter()
                        .map(|s| {
                            s.result.map(|mut r| {
                                if let Some(w) = r.wait.take() {
                                    waits.push(*w);
                                }
                                r
                            })
                        })
                        .collect();
                    if waits.is_empty() || end.is_some() {
                        state.record_batch(results, &unfinished, end, &self.context);
                    } else {
                        // A sub-agent waits for decisions: so does the batch (see `RunState::hold_batch`).
                        state.hold_batch(results, waits);
                    }
                    // Between steps: tools may have changed (the next model turn sees the new ones).
                    if let (Some(source), false) = (&self.tool_source, run_cancel.is_cancelled()) {
                        let base = source.registry().await;
                        let next = Self::step_registry(Arc::clone(&base), output).unwrap_or(base);
                        if let Some(change) = tools_changed(&registry, &next) {
                            emitter.emit(change);
                        }
                        registry = next;
                    }
                }
            }
        }
        if let Some(j) = &journal {
            journal_sync(j.as_ref(), &state, &mut journaled);
        }
        // The transcript is moved into the outcome, not copied.
        let mut outcome = state.into_outcome();
        if let Some(j) = &journal {
            if let Err(e) = j.flush().await {
                fail_outcome(&mut outcome, e);
            }
        }
        outcome.session_id = session_id.clone();
        spans::run_ended(run_span, &outcome, span_content);
        emitter.emit(EventKind::RunEnd {
            status: outcome.status,
            steps: outcome.steps,
            tool_calls: outcome.tool_calls,
            usage: outcome.usage,
            cost_usd: outcome.cost_usd,
            duration_ms: ms(started.elapsed()),
            compactions: outcome.compactions,
            error: outcome.error.clone(),
            session_id,
            output_valid: output.map(|_| outcome.output.is_some()),
            // The run's result: always a top-level run's; a sub-agent's (its parent's tool result) with content.
            answer: (link.is_none() || include_content).then(|| outcome.answer.clone()).flatten(),
            output: (link.is_none() || include_content).then(|| outcome.output.clone()).flatten(),
        });
        if let Some(j) = &journal {
            if let Err(e) = j.finish(&outcome).await {
                fail_outcome(&mut outcome, e);
            }
        }
        run_cancel.cancel();
        outcome
    }

    fn stop(&self, state: &mut RunState, emitter: &mut Emitter, run_cancel: &CancellationToken, i: Interrupt) {
        run_cancel.cancel();
        let reason = i.reason(state.limits());
        if i.status() == Status::Timeout {
            emitter.emit(EventKind::LimitHit { status: Status::Timeout, detail: reason.clone() });
        }
        state.interrupt(i.status(), reason, &self.context);
    }

    /// Runs a batch: rejected calls answer at once; runs of consecutive parallel-safe calls run
    /// concurrently; the rest one by one. Each result lands in its call's slot as soon as it is known.
    #[allow(clippy::too_many_arguments)]
    async fn run_batch(
        &self,
        registry: &Registry,
        batch: &[PlannedCall<'_>],
        slots: &mut [Slot],
        run_cancel: &CancellationToken,
        emitter: &mut Emitter,
        hooked: Option<&Hooked<'_>>,
        performer: Option<&dyn Performer>,
        at: BatchAt<'_>,
    ) {
        let parallel = |p: &PlannedCall<'_>| {
            matches!(p.plan, Plan::Run) && registry.get(&p.call.name).is_some_and(|t| t.parallel_safe())
        };
        let mut i = 0;
        while i < batch.len() {
            let mut j = i + 1;
            if parallel(&batch[i]) {
                while j < batch.len() && parallel(&batch[j]) {
                    j += 1;
                }
            }
            // Once a sub-agent of the batch waits for a decision, the calls after it wait too (they run when the
            // batch runs again); calls that already ran (their slots reported) do not run again.
            if registry.has_sub_agents()
                && slots[..i].iter().any(|s| s.result.as_ref().is_some_and(|r| r.wait.is_some()))
            {
                return;
            }
            let t0 = Instant::now();
            for (p, slot) in batch[i..j].iter().zip(slots[i..j].iter_mut()).filter(|(_, s)| !s.reported) {
                // Events are built only when someone listens.
                emitter.tool_start(p.call, t0);
                slot.started = true;
            }
            if j == i + 1 {
                // One call at a time (the common case): no join machinery.
                let (p, slot) = (&batch[i], &mut slots[i]);
                if slot.reported {
                    i = j;
                    continue;
                }
                slot.began = Some(t0);
                let result =
                    self.run_call_traced(registry, p, run_cancel, performer, at, hooked, &mut slot.hook_events).await;
                slot.finish(result);
            } else {
                let todo = batch[i..j].iter().zip(slots[i..j].iter_mut()).filter(|(_, s)| !s.reported);
                join_all(todo.map(|(p, slot)| async move {
                    let t0 = Instant::now();
                    slot.began = Some(t0);
                    let result = self
                        .run_call_traced(registry, p, run_cancel, performer, at, hooked, &mut slot.hook_events)
                        .await;
                    slot.finish(result);
                }))
                .await;
            }
            for (p, slot) in batch[i..j].iter().zip(slots[i..j].iter_mut()).filter(|(_, s)| !s.reported) {
                if let Some(r) = &slot.result {
                    let when = || (slot.elapsed(), slot.began, slot.ended.unwrap_or(t0));
                    emitter.tool_end(p.call, r.is_error, when, || r.content.clone());
                    for e in slot.hook_events.drain(..) {
                        emitter.emit(e);
                    }
                    slot.reported = true;
                }
            }
            i = j;
        }
    }

    /// After a model response: the `pre_tool` hooks over each call of an admitted batch that is not
    /// refused, or the `stop` hooks over a final answer. A hook that fails denies (fail closed).
    async fn hooks_after_response(
        &self,
        admission: &Admission,
        state: &mut RunState,
        registry: &Registry,
        h: &Hooked<'_>,
        cancel: &CancellationToken,
        emitter: &mut Emitter,
    ) {
        let ctx = &h.ctx;
        match admission {
            Admission::Batch => {
                for index in 0..state.batch_len() {
                    for hook in h.hooks {
                        let Some(p) = state.batch_call(index) else { break };
                        if matches!(p.plan, Plan::Reject { .. })
                            || !hook.applies(HookEvent::PreTool, Some(&p.call.name))
                        {
                            continue;
                        }
                        let call = p.call.clone();
                        let t0 = Instant::now();
                        let answer = AssertUnwindSafe(hook.pre_tool(ctx, &call, cancel)).catch_unwind().await;
                        let (answer, error) = match answer {
                            Ok(Ok(a)) => (a, None),
                            Ok(Err(e)) => (PreTool::Deny(format!("the hook failed: {e}")), Some(e.0)),
                            Err(panic) => {
                                let m = format!("the hook panicked: {}", panic_message(&panic));
                                (PreTool::Deny(m.clone()), Some(m))
                            }
                        };
                        let (decision, reason) = match &answer {
                            PreTool::Allow => ("allow", None),
                            PreTool::Deny(r) => ("deny", Some(r.clone())),
                            PreTool::Ask(r) => ("ask", Some(r.clone())),
                            PreTool::Rewrite(_) => ("rewrite", None),
                        };
                        emitter.emit(EventKind::Hook {
                            hook_event: HookEvent::PreTool.as_str().into(),
                            hook: hook.name().to_owned(),
                            call_id: Some(String::from(&*call.id)),
                            decision: decision.into(),
                            reason,
                            error,
                            duration_ms: ms(t0.elapsed()),
                        });
                        state.apply_pre_tool(index, answer, hook.name(), registry, h.policy);
                    }
                }
            }
            Admission::Completed => {
                let Some(answer) = state.outcome_answer() else { return };
                for hook in h.hooks.iter().take(h.own) {
                    if !hook.applies(HookEvent::Stop, None) {
                        continue;
                    }
                    let t0 = Instant::now();
                    let said = AssertUnwindSafe(hook.stop(ctx, &answer, cancel)).catch_unwind().await;
                    let said = match said {
                        Ok(r) => r,
                        Err(panic) => {
                            Err(crate::hook::HookError(format!("the hook panicked: {}", panic_message(&panic))))
                        }
                    };
                    let (decision, reason, error) = match &said {
                        Ok(StopAnswer::Accept) => ("accept", None, None),
                        Ok(StopAnswer::Refuse(f)) => ("refuse", Some(f.clone()), None),
                        Err(e) => ("refuse", None, Some(e.0.clone())),
                    };
                    emitter.emit(EventKind::Hook {
                        hook_event: HookEvent::Stop.as_str().into(),
                        hook: hook.name().to_owned(),
                        call_id: None,
                        decision: decision.into(),
                        reason,
                        error,
                        duration_ms: ms(t0.elapsed()),
                    });
                    match said {
                        Ok(StopAnswer::Accept) => {}
                        Ok(StopAnswer::Refuse(feedback)) => {
                            if let Err(e) = state.refuse_answer(feedback, &self.context) {
                                state.withhold_answer(format!("stop hook {}: {e}", hook.name()));
                            }
                            return;
                        }
                        Err(e) => {
                            state.withhold_answer(format!(
                                "the final answer was not accepted: stop hook {} failed: {e}",
                                hook.name()
                            ));
                            return;
                        }
                    }
                }
            }
            Admission::Ended(_) | Admission::Reminded => {}
        }
    }

    /// The `post_tool` hooks over a call's result, before it is bounded and recorded. A hook that fails
    /// withholds the result (fail closed): the call is an error saying why.
    async fn post_tool(
        &self,
        h: &Hooked<'_>,
        p: &PlannedCall<'_>,
        result: CallResult,
        cancel: &CancellationToken,
        events: &mut Vec<EventKind>,
    ) -> CallResult {
        if !matches!(p.plan, Plan::Run) {
            return result;
        }
        // A hook sees and changes the text only: a result it replaced or redacted loses its images. A sub-agent
        // run that waits for a decision stays with the call whatever the hooks say (the batch waits for it).
        let wait = result.wait;
        let mut images = result.images;
        let mut result = HookResult { content: result.content, is_error: result.is_error };
        let ctx = &h.ctx;
        for hook in h.hooks {
            if !hook.applies(HookEvent::PostTool, Some(&p.call.name)) {
                continue;
            }
            let t0 = Instant::now();
            let said = AssertUnwindSafe(hook.post_tool(ctx, p.call, &result, cancel)).catch_unwind().await;
            let said = match said {
                Ok(r) => r,
                Err(panic) => Err(crate::hook::HookError(format!("the hook panicked: {}", panic_message(&panic)))),
            };
            let (decision, error) = match &said {
                Ok(PostTool::Keep) => ("keep", None),
                Ok(PostTool::Replace(_)) => ("replace", None),
                Ok(PostTool::Redact(_)) => ("redact", None),
                Err(e) => ("replace", Some(e.0.clone())),
            };
            events.push(EventKind::Hook {
                hook_event: HookEvent::PostTool.as_str().into(),
                hook: hook.name().to_owned(),
                call_id: Some(String::from(&*p.call.id)),
                decision: decision.into(),
                reason: None,
                error,
                duration_ms: ms(t0.elapsed()),
            });
            if !matches!(said, Ok(PostTool::Keep)) {
                images.clear();
            }
            result = match said {
                Ok(answer) => crate::hook::apply_post(result, answer),
                Err(e) => {
                    let mut withheld = CallResult::text(
                        format!("the result was withheld: post_tool hook {} failed: {e}", hook.name()),
                        true,
                    );
                    withheld.wait = wait;
                    return withheld;
                }
            };
        }
        CallResult { content: result.content, is_error: result.is_error, images, wait }
    }

    /// [`Agent::run_call`] inside the call's `execute_tool` span (a child of the run's).
    #[allow(clippy::too_many_arguments)]
    async fn run_call_traced(
        &self,
        registry: &Registry,
        p: &PlannedCall<'_>,
        run_cancel: &CancellationToken,
        performer: Option<&dyn Performer>,
        at: BatchAt<'_>,
        hooked: Option<&Hooked<'_>>,
        hook_events: &mut Vec<EventKind>,
    ) -> CallResult {
        if !spans::on() {
            return self.run_call(registry, p, run_cancel, performer, at, hooked, hook_events).await;
        }
        // Boxed: the untraced call's future does not grow by the span's state.
        Box::pin(self.run_call_in_span(registry, p, run_cancel, performer, at, hooked, hook_events)).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_call_in_span(
        &self,
        registry: &Registry,
        p: &PlannedCall<'_>,
        run_cancel: &CancellationToken,
        performer: Option<&dyn Performer>,
        at: BatchAt<'_>,
        hooked: Option<&Hooked<'_>>,
        hook_events: &mut Vec<EventKind>,
    ) -> CallResult {
        let span = spans::tool_span(p.call, at.span_content);
        let unfinished = spans::Unfinished::new(&span);
        let call = self.run_call(registry, p, run_cancel, performer, at, hooked, hook_events);
        let result = call.instrument(span.clone()).await;
        unfinished.finished();
        let error_type = match (p.plan, registry.get(&p.call.name)) {
            (Plan::Reject { .. }, _) => "rejected",
            (Plan::Ask { .. }, _) => "undecided",
            (Plan::Run, None) => "unknown_tool",
            (Plan::Run, Some(_)) => "tool_error",
        };
        spans::tool_result(&span, result.is_error, &result.content, error_type, at.span_content);
        result
    }

    /// One call of a batch: refused ones answer at once; a call that runs is performed (by the performer,
    /// if any) together with its `post_tool` hooks, so what a durable performer records is the result after
    /// them (a redacted secret is never journaled).
    #[allow(clippy::too_many_arguments)]
    async fn run_call(
        &self,
        registry: &Registry,
        p: &PlannedCall<'_>,
        run_cancel: &CancellationToken,
        performer: Option<&dyn Performer>,
        at: BatchAt<'_>,
        hooked: Option<&Hooked<'_>>,
        hook_events: &mut Vec<EventKind>,
    ) -> CallResult {
        let tool = match (&p.plan, registry.get(&p.call.name)) {
            (Plan::Reject { message }, _) => return CallResult::text(message.clone(), true),
            (Plan::Ask { .. }, _) => {
                return CallResult::text("not run: the call needed a decision", true);
            }
            (Plan::Run, None) => {
                return CallResult::text(format!("unknown tool {:?}", p.call.name), true);
            }
            (Plan::Run, Some(tool)) => tool,
        };
        let step = || ToolStep { step: at.step, call: p.call, key_prefix: at.key_prefix };
        match (performer, hooked) {
            (None, None) => self.perform_call(tool, p, run_cancel, at).await,
            (Some(performer), None) => {
                performer.tool_call(step(), Box::pin(self.perform_call(tool, p, run_cancel, at))).await
            }
            (performer, Some(ctx)) => {
                let work = async move {
                    let result = self.perform_call(tool, p, run_cancel, at).await;
                    self.post_tool(ctx, p, result, run_cancel, hook_events).await
                };
                match performer {
                    None => work.await,
                    Some(performer) => performer.tool_call(step(), Box::pin(work)).await,
                }
            }
        }
    }

    /// One tool call done in process: under its timeout, its panic caught, its output made a result.
    async fn perform_call(
        &self,
        tool: &Arc<dyn crate::tool::Tool>,
        p: &PlannedCall<'_>,
        run_cancel: &CancellationToken,
        at: BatchAt<'_>,
    ) -> CallResult {
        // A call of its own to cancel exists only where the call can time out; otherwise the call hears the
        // run's token (cancellation and deadline), which spares a token per call on the hot path.
        let call_cancel = self.limits.tool_timeout.map(|_| run_cancel.child_token());
        let cancel = call_cancel.clone().unwrap_or_else(|| run_cancel.clone());
        let ctx = ToolContext::in_run(String::from(&*p.call.id), cancel, Arc::clone(at.key_prefix), at.step);
        let fut = AssertUnwindSafe(tool.call(p.call.arguments.clone(), ctx)).catch_unwind();
        let result = match self.limits.tool_timeout {
            Some(t) => tokio::time::timeout(t, fut).await.ok(),
            None => Some(fut.await),
        };
        if let Some(c) = call_cancel {
            c.cancel();
        }
        match result {
            None => CallResult::text(
                format!(
                    "tool {:?} timed out after {}",
                    p.call.name,
                    self.limits.tool_timeout.map_or_else(String::new, |d| humantime::format_duration(d).to_string())
                ),
                true,
            ),
            Some(Err(panic)) => {
                CallResult::text(format!("tool {:?} panicked: {}", p.call.name, panic_message(&panic)), true)
            }
            Some(Ok(Ok(out))) => {
                let (content, images) = out.into_parts();
                CallResult { content, is_error: false, images, wait: None }
            }
            Some(Ok(Err(ToolError::Cancelled))) => CallResult::text(ToolError::Cancelled.to_string(), true),
            // A sub-agent that stopped for a decision: its waiting run goes with the result (a durable performer
            // journals it, so a replay holds the batch the same way).
            Some(Ok(Err(e))) if tool.sub_agent() => {
                let mut r = CallResult::text(e.to_string(), true);
                r.wait = crate::subagent::take_wait(&p.call.id).map(Box::new);
                r
            }
            Some(Ok(Err(e))) => CallResult::text(e.to_string(), true),
        }
    }
}

/// The `approval_decided` event of an applied decision.
fn decided_event(d: &crate::approval::ApprovalDecision, name: String, include_content: bool) -> EventKind {
    use crate::approval::Verdict;
    EventKind::ApprovalDecided {
        call_id: d.call_id.clone(),
        name,
        arguments_hash: d.arguments_hash.clone(),
        decision: d.verdict.name().into(),
        reason: match &d.verdict {
            Verdict::Deny { reason } => Some(reason.clone()),
            _ => None,
        },
        arguments: match &d.verdict {
            Verdict::Edit { arguments } if include_content => Some(arguments.clone()),
            _ => None,
        },
    }
}
