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
pub use builder::AgentBuilder;
use run::{CancelFlag, Run, RunArgs, Waits};

mod approve;
mod batch;
mod builder;
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

impl Agent {
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
