//! The async driver: performs what the state machine asks — model calls, tool batches — under the
//! deadline, the caller's cancellation and the per-tool timeout, and reports every step as events.

use std::pin::pin;
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::perform::Performer;
use super::state::RunState;
use crate::approval::Approver;
use crate::context::ContextConfig;
use crate::events::{Observer, ObserverErrorHook};
use crate::hook::Hook;
use crate::journal::Journal;
use crate::limits::{ConfigError, Limits};
use crate::message::Message;
use crate::model::{Model, ModelIdentity};
use crate::outcome::{Outcome, Status};
use crate::output::OutputSchema;
use crate::policy::Policy;
use crate::registry::{Registry, ToolSource};
use crate::spans;
use crate::subagent::Link;
use run::{CancelFlag, Run, RunArgs, Waits};

mod approve;
mod batch;
mod hooks;
mod model_step;
mod run;

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
        let args = RunArgs { output, performer, span: &span, info: &info, link };
        spans::within(&span, self.drive_inner(state, cancel, args)).await
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

    /// The run's body, inside its span: started, driven action by action, finished (see [`run::Run`]). The
    /// waits for the caller's cancellation and the deadline live here, one each for the whole run.
    async fn drive_inner(&self, mut state: RunState, cancel: CancellationToken, args: RunArgs<'_>) -> Outcome {
        let started = Instant::now();
        let deadline = state.limits().timeout.and_then(|d| started.checked_add(d)).map(tokio::time::Instant::from_std);
        let cancelled = pin!(cancel.clone().cancelled_owned());
        let sleep = pin!(None);
        let waits = Waits { cancel: CancelFlag::new(&cancel), cancelled, sleep, deadline };
        let mut run = Run::start(self, &mut state, &cancel, waits, started, args).await;
        run.drive(&mut state).await;
        run.finish(state).await
    }
}
