//! A run's state made, configured and read: new and resumed runs, instructions, the output schema, prices,
//! and what the run counted so far.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::context::ContextConfig;
use crate::cost::Price;
use crate::limits::{ConfigError, Limits};
use crate::message::{Message, ToolResult};
use crate::outcome::{AgentTotals, Outcome, Status};
use crate::output::{OutputSchema, OutputState};
use crate::transcript::{Transcript, TranscriptError};
use crate::usage::UsageTotals;

use super::{Held, Phase, RunState};

impl RunState {
    /// A new run of `prompt`.
    pub fn new(
        run_id: impl Into<String>,
        prompt: impl Into<String>,
        limits: Limits,
        ctx: &ContextConfig,
    ) -> Result<Self, ConfigError> {
        limits.validate()?;
        let transcript = Transcript::new(prompt, ctx.counter.as_ref());
        Ok(RunState::blank(run_id.into(), limits, transcript, Phase::Ready, Held::default()))
    }

    /// A run that has counted nothing yet, in `phase`, with no instructions, output schema or prices.
    pub(super) fn blank(run_id: String, limits: Limits, transcript: Transcript, phase: Phase, held: Held) -> Self {
        RunState {
            run_id,
            limits,
            instructions: None,
            instructions_size: 0,
            tools_size: None,
            transcript,
            steps: 0,
            tool_calls: 0,
            usage: UsageTotals::default(),
            compactions: 0,
            output: None,
            price: None,
            compact_price: None,
            own_compact_model: false,
            unpriced_calls: 0,
            fallback_priced: false,
            cost_usd: 0.0,
            finish_reason: None,
            pending_reasoning: Vec::new(),
            spare_plans: Vec::new(),
            spare_texts: Vec::new(),
            agents: BTreeMap::new(),
            phase,
            awaiting: Vec::new(),
            held,
        }
    }

    /// A new run whose first message is `first` (a user message, for example with images).
    pub fn new_with_message(
        run_id: impl Into<String>,
        first: Message,
        limits: Limits,
        ctx: &ContextConfig,
    ) -> Result<Self, ConfigError> {
        let mut state = Self::new(run_id, "", limits, ctx)?;
        state.transcript =
            Transcript::with_first(first, ctx.counter.as_ref()).map_err(|e| ConfigError(e.to_string()))?;
        Ok(state)
    }

    /// Continues from an existing transcript (for example a resumed session). A final batch without all
    /// its results is completed first with an error result for each missing call, saying `reason`.
    pub fn resume(
        run_id: impl Into<String>,
        messages: Vec<Message>,
        limits: Limits,
        ctx: &ContextConfig,
        reason: &str,
    ) -> Result<Self, ConfigError> {
        limits.validate()?;
        let counter = ctx.counter.as_ref();
        let mut transcript = Transcript::from_messages(messages, counter).map_err(|e| ConfigError(e.to_string()))?;
        let missing: Vec<String> = transcript.unanswered().iter().map(|id| String::from(&**id)).collect();
        for id in missing {
            transcript
                .push_result(ToolResult::new(id, reason, true), counter)
                .map_err(|e| ConfigError(e.to_string()))?;
        }
        Ok(RunState::blank(run_id.into(), limits, transcript, Phase::Ready, Held::default()))
    }

    /// Sets the run's instructions: sent with every model call in the API's own slot (never as a message
    /// of the transcript) and counted in the context budget, measured here, once. Empty text is none.
    pub fn set_instructions(&mut self, instructions: Option<Arc<str>>, ctx: &ContextConfig) {
        self.instructions = instructions.filter(|t| !t.is_empty());
        self.instructions_size = self.instructions.as_deref().map_or(0, |t| ctx.counter.count(t));
    }

    /// The same state with these instructions (see [`RunState::set_instructions`]).
    pub fn with_instructions(mut self, instructions: Option<Arc<str>>, ctx: &ContextConfig) -> Self {
        self.set_instructions(instructions, ctx);
        self
    }

    /// Binds the run's final answer to `schema` (or unbinds it). The registry the run is driven with must
    /// hold the schema's final-answer tool ([`Registry::with_output`]); [`crate::Agent`] adds it.
    pub fn set_output_schema(&mut self, schema: Option<&OutputSchema>) {
        self.output = schema.map(|s| OutputState { wrapped: s.is_wrapped(), ..OutputState::default() });
    }

    /// The same state with its final answer bound to `schema` (see [`RunState::set_output_schema`]).
    pub fn with_output_schema(mut self, schema: Option<&OutputSchema>) -> Self {
        self.set_output_schema(schema);
        self
    }

    /// The validated output, once the final answer matched the output schema.
    pub fn output(&self) -> Option<&serde_json::Value> {
        self.output.as_ref().and_then(|o| o.value.as_ref())
    }

    /// Whether the run's output validated: `None` when the run has no output schema.
    pub fn output_valid(&self) -> Option<bool> {
        self.output.as_ref().map(|o| o.value.is_some())
    }

    /// Sets the prices the run's usage is charged at: the model's, and — when a model of its own writes the
    /// summaries — that model's (`Some(None)`: its price is unknown; `None`: the run's model writes them).
    /// Each call is charged at the price of the model that made it. Without the model's price, or once a
    /// summary was written by a model of unknown price, the run's cost is unknown and `max_cost_usd` cannot
    /// be checked.
    pub fn set_prices(&mut self, model: Option<Price>, compact_model: Option<Option<Price>>) {
        self.price = model;
        self.own_compact_model = compact_model.is_some();
        self.compact_price = compact_model.flatten();
    }

    /// The price of the run's model, if known.
    pub fn price(&self) -> Option<&Price> {
        self.price.as_ref()
    }

    /// What the run cost so far in US dollars, when the model's price is known (or, the run's model being of
    /// unknown price, every call was answered by a fallback's model of known price).
    pub fn cost_usd(&self) -> Option<f64> {
        let priced = self.price.is_some() || self.fallback_priced;
        Some(self.cost_usd).filter(|_| priced && self.unpriced_calls == 0)
    }

    /// The run's instructions, if any.
    pub fn instructions(&self) -> Option<&str> {
        self.instructions.as_deref()
    }

    /// The run's instructions, shared.
    pub fn instructions_shared(&self) -> Option<&Arc<str>> {
        self.instructions.as_ref()
    }

    /// Adds a follow-up user message to a run that is ready for its next model call.
    pub fn push_user(&mut self, content: impl Into<String>, ctx: &ContextConfig) -> Result<(), TranscriptError> {
        self.transcript.push_user(content, ctx.counter.as_ref())
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The limits it runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Model responses received.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Tool calls admitted.
    pub fn tool_calls(&self) -> u64 {
        self.tool_calls
    }

    /// Compactions recorded by this run.
    pub fn compactions(&self) -> u64 {
        self.compactions
    }

    /// Usage so far (its sub-agents' included).
    pub fn usage(&self) -> &UsageTotals {
        &self.usage
    }

    /// What its sub-agents spent so far, by name.
    pub fn agents(&self) -> &BTreeMap<String, AgentTotals> {
        &self.agents
    }

    /// Model responses received by its sub-agents: they count against `max_steps` with the run's own.
    pub fn agent_steps(&self) -> u64 {
        self.agents.values().fold(0, |n, a| n.saturating_add(a.steps))
    }

    /// Tool calls admitted by its sub-agents: they count against `max_tool_calls` with the run's own.
    pub fn agent_tool_calls(&self) -> u64 {
        self.agents.values().fold(0, |n, a| n.saturating_add(a.tool_calls))
    }

    /// Rolls what the sub-agent `name` spent into the run: its usage into the run's usage (token limits
    /// apply to the sum from the next step on), its steps and tool calls into what the run's limits count,
    /// and all of it into the per-agent breakdown of the outcome.
    pub fn add_agent_spend(&mut self, name: &str, spent: &AgentTotals) {
        if let Some(u) = self.usage.add_totals(&spent.usage) {
            self.usage = u;
        }
        if let Some(c) = spent.cost_usd {
            self.cost_usd += c;
        }
        self.agents.entry(name.to_owned()).or_default().add(spent);
    }

    /// The transcript so far.
    pub fn transcript(&self) -> &Transcript {
        &self.transcript
    }

    /// The status, once the run is over.
    pub fn status(&self) -> Option<Status> {
        match &self.phase {
            Phase::Done { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The outcome of the run (status `aborted` if it is not over yet).
    pub fn outcome(&self) -> Outcome {
        self.outcome_with(self.transcript.to_vec())
    }

    /// The outcome of the run, consuming the state: the transcript's messages are moved, not copied.
    pub fn into_outcome(self) -> Outcome {
        let mut outcome = self.outcome_with(Vec::new());
        outcome.messages = self.transcript.into_messages();
        outcome
    }

    pub(super) fn outcome_with(&self, messages: Vec<Message>) -> Outcome {
        let (status, answer, error) = match &self.phase {
            Phase::Done { status, answer, error } => (*status, answer.clone(), error.clone()),
            _ => (Status::Aborted, None, Some("the run has not ended".into())),
        };
        Outcome {
            status,
            answer,
            error,
            steps: self.steps,
            tool_calls: self.tool_calls,
            usage: self.usage,
            cost_usd: self.cost_usd(),
            finish_reason: self.finish_reason.clone(),
            run_id: self.run_id.clone(),
            session_id: None,
            instructions: self.instructions.as_deref().map(str::to_owned),
            compactions: self.compactions,
            output: self.output().cloned(),
            pending: self.awaiting.clone(),
            agents: self.agents.clone(),
            messages,
        }
    }
}
