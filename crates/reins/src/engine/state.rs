//! The sans-I/O run state machine: it says what to do next and takes the results back; it never waits,
//! spawns, reads a clock or touches the network. Its state serializes, so a run can be persisted between
//! steps and resumed elsewhere.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::approval::{
    ApprovalDecision, DecisionError, HeldResult, PendingCall, SubAgentCall, Verdict, arguments_hash,
};
use crate::context::{ContextConfig, ContextStrategy, DEFAULT_SUMMARY_PROMPT, bound_text, bound_to_units, fair_shares};
use crate::cost::Price;
use crate::hook::PreTool;
use crate::image::Image;
use crate::limits::{ConfigError, Limits};
use crate::message::{Message, ToolCall, ToolResult};
use crate::model::{FinishReason, ModelError, ModelRequest, ModelResponse};
use crate::outcome::{AgentTotals, Outcome, Status};
use crate::output::{FINAL_ANSWER_TOOL, OutputSchema, OutputState, WRAPPED_KEY, json_in_text, reminder};
use crate::policy::{Decision, Policy};
use crate::registry::Registry;
use crate::tool::ToolSpec;
use crate::transcript::{Transcript, TranscriptError, measure, measure_tools};
use crate::usage::UsageTotals;
use crate::validate::check_response;

/// Each result of a batch is promised at least this many units of context when the batch is admitted.
pub const MIN_RESULT_UNITS: u64 = 64;

/// What one admitted call will do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Plan {
    /// The call passed validation and policy: run the tool.
    Run,
    /// The call does not run; this is its error result (unknown tool, invalid arguments, denied).
    Reject {
        /// The message the model gets.
        message: String,
    },
    /// The call needs a decision before the batch runs (see [`crate::approval`]).
    Ask {
        /// Why (the policy's or a hook's words).
        reason: String,
    },
}

/// Arguments changed after the model proposed them (by a hook or an approver's edit): the call runs
/// with them, and its result says so.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Edit {
    call: ToolCall,
    by: String,
}

/// One call of an admitted batch and what to do with it, borrowed from the run state (the call itself
/// lives in the transcript: admitting a batch copies nothing).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlannedCall<'a> {
    /// The call as it runs: as the model proposed it, or with the arguments a hook or an approver gave it.
    pub call: &'a ToolCall,
    /// Run it, or answer with an error.
    pub plan: &'a Plan,
}

/// The admitted batch: the calls of the newest assistant turn, each with its plan.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    calls: &'a [ToolCall],
    plans: &'a [Plan],
    edits: &'a [Option<Edit>],
    held: &'a Held,
}

impl<'a> Batch<'a> {
    /// How many calls it holds.
    pub fn len(&self) -> usize {
        self.plans.len()
    }

    /// True when it holds no call.
    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }

    /// The result of the call at `index` when it already ran before a sub-agent of the batch stopped for a
    /// decision (it does not run again).
    pub fn held_result(&self, index: usize) -> Option<CallResult> {
        let r = self.held.results.get(index)?.as_ref()?;
        Some(CallResult::text(r.content.clone(), r.is_error))
    }

    /// True when some of the batch ran before a sub-agent of it stopped it for a decision (see
    /// [`Batch::held_result`], [`Batch::agent_waits`]).
    pub fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// The sub-agent runs of the batch that waited for decisions, now decided: each to be continued by its
    /// parent call.
    pub fn agent_waits(&self) -> &'a [AgentWait] {
        &self.held.agents
    }

    /// The calls in order, each with its plan.
    pub fn iter(&self) -> impl Iterator<Item = PlannedCall<'a>> + 'a {
        let edits = self.edits;
        self.calls.iter().zip(self.plans).enumerate().map(move |(i, (call, plan))| PlannedCall {
            call: edits.get(i).and_then(Option::as_ref).map_or(call, |e| &e.call),
            plan,
        })
    }
}

/// The result of a planned call, as the driver reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct CallResult {
    /// The result text (not yet bounded).
    pub content: String,
    /// True for an error result.
    pub is_error: bool,
    /// Images the tool returned.
    pub images: Vec<Image>,
    /// For a sub-agent call: the sub-agent run that stopped for a decision (the batch then waits for it, see
    /// [`RunState::hold_batch`]). A durable performer journals it with the result, so a replay holds the batch
    /// the same way.
    pub wait: Option<Box<AgentWait>>,
}

impl CallResult {
    /// A text result.
    pub fn text(content: impl Into<String>, is_error: bool) -> Self {
        Self { content: content.into(), is_error, images: Vec::new(), wait: None }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
enum Phase {
    Ready,
    AwaitingTools {
        plans: Vec<Plan>,
        assistant_size: u64,
        /// Per call, the arguments a hook or an approver changed (empty: none changed).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        edits: Vec<Option<Edit>>,
    },
    /// A summary call is due or under way: it replaces items `1..upto`.
    Compacting {
        upto: usize,
        chars_before: u64,
        /// A compaction on request ([`RunState::compact_now`]): the run ends once it is made.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        then_end: bool,
    },
    Done {
        status: Status,
        answer: Option<String>,
        error: Option<String>,
    },
}

/// What the driver should do next.
#[derive(Debug)]
pub enum Action<'a> {
    /// Call the model with this request.
    CallModel(ModelRequest),
    /// Run this batch, then report with [`RunState::record_batch`].
    RunTools(Batch<'a>),
    /// The batch waits for decisions about these calls (each `kind: "ask"`): give them with
    /// [`RunState::decide`], or end the run `awaiting_approval` with [`RunState::await_approval`].
    Approve(Vec<crate::approval::PendingCall>),
    /// Ask for a summary with this request (the `summarize` strategy), then report with
    /// [`RunState::on_compaction_response`]. Not a step: it does not count towards `max_steps`.
    Compact(ModelRequest, Compaction),
    /// The run is over; [`RunState::outcome`] tells how.
    Finished,
}

/// A compaction as the state machine plans or records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compaction {
    /// How many transcript items the summary stands for (those after the first message).
    pub items: u64,
    /// The size of what the model would have seen before it, in the counter's unit.
    pub chars_before: u64,
    /// The size after it (0 until it is recorded).
    pub chars_after: u64,
    /// Why the summary was not used and the marker of left-out groups was recorded instead.
    pub fallback: Option<String>,
}

/// What a model response led to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The response was refused or ended the run; nothing of its tools runs.
    Ended(Status),
    /// The response was a final answer.
    Completed,
    /// A batch was admitted; [`RunState::next_action`] returns it.
    Batch,
    /// The answer was plain text where an output schema asks for the final-answer tool: the model was
    /// told so, once, and is called again.
    Reminded,
}

/// The tool specs a run last measured, and their size: measured again only when the registry's specs
/// are others (a tool source that changed), never per step.
#[derive(Clone)]
struct ToolsSize {
    specs: Arc<[ToolSpec]>,
    size: u64,
}

impl std::fmt::Debug for ToolsSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ToolsSize({} tools, {})", self.specs.len(), self.size)
    }
}

/// The serializable state of one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunState {
    run_id: String,
    limits: Limits,
    /// The instructions sent with every model call (never a message of the transcript).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    instructions: Option<Arc<str>>,
    /// Their size in the context unit, measured once when they were set.
    #[serde(default, skip_serializing_if = "is_zero")]
    instructions_size: u64,
    /// The size of the tool specs on offer (only under a context budget).
    #[serde(skip)]
    tools_size: Option<ToolsSize>,
    transcript: Transcript,
    steps: u64,
    tool_calls: u64,
    usage: UsageTotals,
    /// Compactions recorded by this run.
    #[serde(default)]
    compactions: u64,
    /// The output schema's part of the state, when the run has one (see [`crate::output`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<OutputState>,
    /// The price of the run's model and of the model that writes summaries (see [`RunState::set_prices`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    price: Option<Price>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compact_price: Option<Price>,
    /// Whether a model of its own writes the summaries (its price is `compact_price`, unknown when `None`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    own_compact_model: bool,
    /// Calls with usage that could not be priced (summaries by a model of unknown price): the run's cost is
    /// then unknown.
    #[serde(default, skip_serializing_if = "is_zero")]
    unpriced_calls: u64,
    /// What the run cost so far, in US dollars (with a price).
    #[serde(default)]
    cost_usd: f64,
    /// Why the last model response stopped, where it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    finish_reason: Option<FinishReason>,
    /// The reasoning items of the response being taken, until its assistant turn is recorded with them.
    #[serde(skip)]
    pending_reasoning: Vec<crate::message::Reasoning>,
    /// What its sub-agents spent, by name (their usage is in `usage` too).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    agents: BTreeMap<String, AgentTotals>,
    phase: Phase,
    /// The batch left waiting when the run ended `awaiting_approval`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    awaiting: Vec<crate::approval::PendingCall>,
    /// While the admitted batch waits on its sub-agents' questions: what of it already ran, and the
    /// sub-agent runs that wait.
    #[serde(default, skip_serializing_if = "Held::is_empty")]
    held: Held,
}

/// An admitted batch stopped by its sub-agents' questions (see [`RunState::hold_batch`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Held {
    /// By call index: the result of a call that already ran (it does not run again).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    results: Vec<Option<HeldResult>>,
    /// The sub-agent runs that wait for decisions, continued when the batch runs again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    agents: Vec<AgentWait>,
}

impl Held {
    fn is_empty(&self) -> bool {
        self.results.is_empty() && self.agents.is_empty()
    }
}

/// A sub-agent run that waits for decisions inside its parent's batch: its transcript (its last turn's calls
/// without results) and its waiting batch, decisions made so far included. The parent's call `call_id`
/// continues it ([`RunState::resume_pending`]) once every call of it is decided.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentWait {
    /// The sub-agent (its tool name in the parent).
    pub agent: String,
    /// The parent's call that started it.
    pub call_id: String,
    /// Its run that waits.
    pub run_id: String,
    /// Its transcript.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<Message>,
    /// Its waiting batch.
    pub pending: Vec<PendingCall>,
    /// What its runs for the parent's call spent so far (the waiting one included).
    #[serde(default)]
    pub spent: AgentTotals,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

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
        Ok(RunState {
            run_id: run_id.into(),
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
            cost_usd: 0.0,
            finish_reason: None,
            pending_reasoning: Vec::new(),
            agents: BTreeMap::new(),
            phase: Phase::Ready,
            awaiting: Vec::new(),
            held: Held::default(),
        })
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
        let missing: Vec<String> = transcript.unanswered().to_vec();
        for id in missing {
            transcript
                .push_result(ToolResult::new(id, reason, true), counter)
                .map_err(|e| ConfigError(e.to_string()))?;
        }
        Ok(RunState {
            run_id: run_id.into(),
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
            cost_usd: 0.0,
            finish_reason: None,
            pending_reasoning: Vec::new(),
            agents: BTreeMap::new(),
            phase: Phase::Ready,
            awaiting: Vec::new(),
            held: Held::default(),
        })
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

    /// What the run cost so far in US dollars, when the model's price is known.
    pub fn cost_usd(&self) -> Option<f64> {
        self.price.filter(|_| self.unpriced_calls == 0).map(|_| self.cost_usd)
    }

    /// Adds one call's cost at `price` (nothing without usage or price).
    fn charge(&mut self, price: Option<Price>, usage: Option<&crate::usage::Usage>) {
        if let (Some(p), Some(u)) = (price, usage) {
            self.cost_usd += p.cost(u);
        }
    }

    /// The run's instructions, if any.
    pub fn instructions(&self) -> Option<&str> {
        self.instructions.as_deref()
    }

    /// The run's instructions, shared.
    pub fn instructions_shared(&self) -> Option<&Arc<str>> {
        self.instructions.as_ref()
    }

    /// What the instructions and the tool specs take of the context budget: `(instructions, tools)`.
    /// The specs are measured when they are not the ones measured last (once per run unless a tool
    /// source changes them), never per step.
    fn fixed_sizes(&mut self, registry: &Registry, ctx: &ContextConfig) -> (u64, u64) {
        let specs = registry.specs();
        let tools = match &self.tools_size {
            Some(t) if Arc::ptr_eq(&t.specs, specs) => t.size,
            _ => {
                let size = measure_tools(specs, ctx.counter.as_ref());
                self.tools_size = Some(ToolsSize { specs: Arc::clone(specs), size });
                size
            }
        };
        (self.instructions_size, tools)
    }

    /// Adds a follow-up user message to a run that is ready for its next model call.
    pub fn push_user(&mut self, content: impl Into<String>, ctx: &ContextConfig) -> Result<(), TranscriptError> {
        self.transcript.push_user(content, ctx.counter.as_ref())
    }

    /// A compaction on request, whatever the threshold (for example between the turns of a chat): the next
    /// action is the summary call replacing every item but the first message and the newest group, as
    /// under the `summarize` strategy; once it is recorded the run ends `completed` with no answer (no model
    /// call is made). Refused, with the reason, when the state is not ready for a model call, when the
    /// context rules are not `summarize` under a budget (the summary would not change what the model is
    /// sent), or when there is nothing to compact yet.
    pub fn compact_now(&mut self, ctx: &ContextConfig) -> Result<(), String> {
        if !matches!(self.phase, Phase::Ready) {
            return Err("the run is not between two model calls".into());
        }
        if ctx.strategy != ContextStrategy::Summarize || ctx.max_context.is_none() {
            return Err("compaction needs the summarize strategy and a context budget".into());
        }
        let upto = self
            .transcript
            .compaction_cut(0)
            .filter(|&g| g > 1)
            .ok_or_else(|| "there is nothing to compact yet".to_owned())?;
        let fixed = self.instructions_size.saturating_add(self.tools_size.as_ref().map_or(0, |t| t.size));
        let chars_before = fixed.saturating_add(self.transcript.view_size());
        self.phase = Phase::Compacting { upto, chars_before, then_end: true };
        Ok(())
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

    fn end(&mut self, status: Status, answer: Option<String>, error: Option<String>) -> Admission {
        self.phase = Phase::Done { status, answer, error };
        if status == Status::Completed { Admission::Completed } else { Admission::Ended(status) }
    }

    /// What to do next. The step limit and the context budget are checked here, before a model call.
    pub fn next_action(&mut self, registry: &Registry, ctx: &ContextConfig) -> Action<'_> {
        if let Phase::Ready = self.phase {
            if let Some(max) = self.limits.max_steps {
                let agents = if self.agents.is_empty() { 0 } else { self.agent_steps() };
                if self.steps.saturating_add(agents) >= max {
                    let of_agents = if agents > 0 { format!(" and {agents} of its sub-agents") } else { String::new() };
                    self.end(
                        Status::StepLimit,
                        None,
                        Some(format!(
                            "step limit reached: {} model responses{of_agents} (max_steps {max})",
                            self.steps
                        )),
                    );
                    return Action::Finished;
                }
            }
            if !self.agents.is_empty() {
                // Sub-agents' usage was rolled in after the last response: it may have passed a token limit.
                if let Some(detail) = self.token_limit_hit() {
                    let detail = detail.replace("; the turn was not recorded", " (with the sub-agents' usage)");
                    self.end(Status::TokenLimit, None, Some(detail));
                    return Action::Finished;
                }
                // And their cost a cost limit.
                if let Some(detail) = self.cost_limit_hit() {
                    let detail = detail.replace("; the turn was not recorded", " (with the sub-agents' cost)");
                    self.end(Status::CostLimit, None, Some(detail));
                    return Action::Finished;
                }
            }
            let mut fixed = 0;
            let budget = match ctx.max_context {
                None => None,
                Some(budget) => {
                    let (instructions, tools) = self.fixed_sizes(registry, ctx);
                    fixed = instructions.saturating_add(tools);
                    let first = self.transcript.first_size();
                    if fixed > 0 && fixed.saturating_add(first) > budget {
                        let unit = ctx.counter.unit();
                        self.end(
                            Status::ContextLimit,
                            None,
                            Some(format!(
                                "context limit: the instructions ({instructions} {unit}) and tool specs ({tools} {unit}) plus the first user message ({first} {unit}) exceed the context budget ({budget} {unit})"
                            )),
                        );
                        return Action::Finished;
                    }
                    Some(budget - fixed)
                }
            };
            if let (ContextStrategy::Summarize, Some(full)) = (ctx.strategy, ctx.max_context) {
                if let Some((request, plan)) = self.plan_compaction(full, fixed, ctx) {
                    return Action::Compact(request, plan);
                }
            }
            let selected = match (ctx.strategy, budget, self.transcript.summary_view()) {
                (_, None, _) => self.transcript.select(None, ctx.counter.unit()),
                (ContextStrategy::Summarize, Some(budget), Some(view)) => {
                    let size = self.transcript.view_size();
                    if size > budget {
                        Err(crate::context::ContextError(format!(
                            "the first user message, the newest summary and what follows it ({size} {}) exceed the context budget ({budget} {})",
                            ctx.counter.unit(),
                            ctx.counter.unit()
                        )))
                    } else {
                        Ok(view)
                    }
                }
                (_, Some(budget), _) => self.transcript.select_marked(Some(budget), ctx.counter.as_ref()),
            };
            match selected {
                Ok(messages) => {
                    return Action::CallModel(ModelRequest {
                        instructions: self.instructions.clone(),
                        messages,
                        tools: registry.specs().clone(),
                        cache_key: None,
                    });
                }
                Err(e) => {
                    let after = if fixed > 0 {
                        format!(" left after the instructions and tool specs ({fixed} {})", ctx.counter.unit())
                    } else {
                        String::new()
                    };
                    self.end(Status::ContextLimit, None, Some(format!("context limit: {e}{after}")));
                    return Action::Finished;
                }
            }
        }
        match &self.phase {
            Phase::Compacting { upto, chars_before, .. } => {
                let (upto, chars_before) = (*upto, *chars_before);
                let request = self.compaction_request(upto, ctx);
                Action::Compact(
                    request,
                    Compaction { items: upto as u64 - 1, chars_before, chars_after: 0, fallback: None },
                )
            }
            Phase::AwaitingTools { plans, edits, .. } => {
                if self.awaits_decision() {
                    return Action::Approve(self.pending_batch().into_iter().filter(|p| p.needs_decision()).collect());
                }
                // The batch is the newest turn's calls: nothing of it is recorded yet but that turn.
                let calls = self.transcript.last().map_or(&[][..], Message::tool_calls);
                Action::RunTools(Batch { calls, plans, edits, held: &self.held })
            }
            _ => Action::Finished,
        }
    }

    /// The most a summary may take, in the counter's unit: a quarter of the compaction threshold.
    fn max_summary(full: u64, ctx: &ContextConfig) -> u64 {
        (Self::threshold(full, ctx) / 4).max(1)
    }

    fn threshold(full: u64, ctx: &ContextConfig) -> u64 {
        let at = if ctx.compact_at.is_finite() && ctx.compact_at > 0.0 { ctx.compact_at.min(1.0) } else { 0.8 };
        (full as f64 * at) as u64
    }

    /// Under `summarize`: when what the model would see passes the threshold, plans a compaction of the
    /// oldest groups, enough of them to bring the context to half the threshold (with room for the
    /// summary), the newest group always kept.
    fn plan_compaction(&mut self, full: u64, fixed: u64, ctx: &ContextConfig) -> Option<(ModelRequest, Compaction)> {
        let threshold = Self::threshold(full, ctx);
        let before = fixed.saturating_add(self.transcript.view_size());
        if before <= threshold {
            return None;
        }
        let rest = (threshold / 2)
            .saturating_sub(fixed)
            .saturating_sub(self.transcript.first_size())
            .saturating_sub(Self::max_summary(full, ctx));
        let upto = self.transcript.compaction_cut(rest)?;
        self.phase = Phase::Compacting { upto, chars_before: before, then_end: false };
        let request = self.compaction_request(upto, ctx);
        Some((request, Compaction { items: upto as u64 - 1, chars_before: before, chars_after: 0, fallback: None }))
    }

    /// The summary request: the summary prompt as instructions, and one user message holding the task (the
    /// first message), the summary being replaced, if any, and exactly the groups being replaced. No tools.
    fn compaction_request(&self, upto: usize, ctx: &ContextConfig) -> ModelRequest {
        use std::fmt::Write as _;
        let (prev, items) = self.transcript.replaced(upto);
        let mut text = String::from("The task (the first user message of the run):\n<task>\n");
        if let Some(first) = self.transcript.conversation().get(0) {
            text.push_str(first.content());
        }
        text.push_str("\n</task>\n");
        if let Some(p) = prev {
            let _ = write!(
                text,
                "The summary of the history before the turns below:\n<summary>\n{}\n</summary>\n",
                p.content()
            );
        }
        text.push_str("The turns to compact, oldest first:\n<turns>\n");
        for m in items {
            match m {
                Message::User { content, images } => {
                    let _ = writeln!(text, "[user]\n{content}");
                    if !images.is_empty() {
                        let _ = writeln!(text, "[{} image(s)]", images.len());
                    }
                }
                Message::Assistant { content, tool_calls, .. } => {
                    let _ = writeln!(text, "[assistant]\n{content}");
                    for c in tool_calls {
                        let _ = writeln!(text, "[tool call {} {}] {}", c.id, c.name, c.arguments);
                    }
                }
                Message::ToolResult(r) => {
                    let tag = if r.is_error { " error" } else { "" };
                    let _ = writeln!(text, "[tool result {}{tag}]\n{}", r.call_id, r.content);
                }
                Message::Summary { content, .. } => {
                    let _ = writeln!(text, "[summary]\n{content}");
                }
            }
        }
        text.push_str("</turns>\nWrite the summary now.");
        let prompt = ctx.summary_prompt.clone().unwrap_or_else(|| Arc::from(DEFAULT_SUMMARY_PROMPT));
        ModelRequest {
            instructions: Some(prompt),
            messages: crate::model::Conversation::from_messages([Message::user(text)]),
            tools: Arc::from(Vec::new()),
            cache_key: None,
        }
    }

    /// Takes the answer to a summary call and records the compaction as an item of the transcript: the
    /// summary, or — when the call failed, or its answer is empty, calls tools or is longer than a quarter
    /// of the threshold — the marker of left-out groups. The run never fails because of a compaction,
    /// except when the call's usage passes a token limit. Returns what was recorded.
    pub fn on_compaction_response(
        &mut self,
        result: Result<ModelResponse, ModelError>,
        ctx: &ContextConfig,
    ) -> Option<Compaction> {
        let Phase::Compacting { upto, chars_before, then_end } = self.phase else {
            return None;
        };
        self.phase = Phase::Ready;
        let counter = ctx.counter.as_ref();
        let max = ctx.max_context.map_or(u64::MAX, |full| Self::max_summary(full, ctx));
        let items = upto - 1;
        let summary = match result {
            Err(e) => Err(format!("the summary call failed: {e}")),
            Ok(r) => {
                if let Some(usage) = self.usage.add(r.usage.as_ref()) {
                    self.usage = usage;
                    let price = if self.own_compact_model { self.compact_price } else { self.price };
                    if price.is_none() && r.usage.is_some() {
                        self.unpriced_calls += 1;
                    }
                    self.charge(price, r.usage.as_ref());
                }
                if !r.tool_calls.is_empty() {
                    Err("the summary call answered with tool calls".to_owned())
                } else if r.text.trim().is_empty() {
                    Err("the summary is empty".to_owned())
                } else {
                    let size = counter.count(&r.text);
                    if size > max {
                        Err(format!("the summary is too long ({size} {} > {max})", counter.unit()))
                    } else {
                        Ok(r.text)
                    }
                }
            }
        };
        let (content, fallback) = match summary {
            Ok(text) => (format!("[Summary of the {items} earlier items of this conversation]\n{text}"), None),
            Err(why) => {
                let lo = self.transcript.summary().map_or(1, |(_, b)| b);
                let groups = self.transcript.groups_between(lo, upto);
                (drop_marker_text(groups, items), Some(why))
            }
        };
        if let Err(e) = self.transcript.push_summary(content, items as u64, counter) {
            self.end(Status::ModelError, None, Some(format!("internal: {e}")));
            return None;
        }
        self.compactions += 1;
        let fixed = self.instructions_size.saturating_add(self.tools_size.as_ref().map_or(0, |t| t.size));
        let done = Compaction {
            items: items as u64,
            chars_before,
            chars_after: fixed.saturating_add(self.transcript.view_size()),
            fallback,
        };
        if let Some(detail) = self.token_limit_hit() {
            self.end(Status::TokenLimit, None, Some(detail));
        } else if let Some(detail) = self.cost_limit_hit() {
            self.end(Status::CostLimit, None, Some(detail));
        } else if then_end {
            self.end(Status::Completed, None, None);
        }
        Some(done)
    }

    /// Takes a model's answer. In order: the response is validated; the step and its usage are counted;
    /// the token limits are checked; a final answer completes the run; a batch must fit the remaining
    /// tool-call budget and the context budget whole, or it is refused whole and not recorded; each call
    /// is validated and put to the policy; then the turn is recorded and the batch admitted.
    pub fn on_model_response(
        &mut self,
        result: Result<ModelResponse, ModelError>,
        registry: &Registry,
        policy: Option<&dyn Policy>,
        ctx: &ContextConfig,
    ) -> Admission {
        if !matches!(self.phase, Phase::Ready) {
            return self.end(
                Status::ModelError,
                None,
                Some("internal: a model response arrived while no model call was due".into()),
            );
        }
        let response = match result {
            Ok(r) => r,
            Err(e) => return self.end(Status::ModelError, None, Some(e.to_string())),
        };
        if let Err(e) = check_response(&response) {
            return self.end(Status::ModelError, None, Some(format!("malformed model response: {e}")));
        }
        self.steps += 1;
        let Some(usage) = self.usage.add(response.usage.as_ref()) else {
            return self.end(Status::ModelError, None, Some("invalid usage: the run's token totals overflow".into()));
        };
        self.usage = usage;
        self.charge(self.price, response.usage.as_ref());
        self.finish_reason = response.finish_reason.clone();
        if let Some(detail) = self.token_limit_hit() {
            return self.end(Status::TokenLimit, None, Some(detail));
        }
        if let Some(detail) = self.cost_limit_hit() {
            return self.end(Status::CostLimit, None, Some(detail));
        }
        let ModelResponse { text, tool_calls, reasoning_items, .. } = response;
        self.pending_reasoning = reasoning_items;
        let counter = ctx.counter.as_ref();
        if self.output.is_some() {
            match self.take_output(text, tool_calls, registry, ctx) {
                Ok(admission) => return admission,
                Err((text, calls)) => return self.admit_calls(text, calls, registry, policy, ctx),
            }
        }
        if tool_calls.is_empty() {
            if let Err(e) = self.push_turn(text.clone(), Vec::new(), counter) {
                return self.end(Status::ModelError, None, Some(e.to_string()));
            }
            return match final_status(self.finish_reason.as_ref()) {
                None => self.end(Status::Completed, Some(text), None),
                Some((status, why)) => self.end(status, Some(text), Some(why)),
            };
        }
        self.admit_calls(text, tool_calls, registry, policy, ctx)
    }

    /// Under an output schema: a lone valid final-answer call, or a plain-text answer, is taken here; any
    /// other turn (tool calls, an invalid final-answer call) is handed back to be admitted as a batch.
    #[allow(clippy::type_complexity)]
    fn take_output(
        &mut self,
        text: String,
        tool_calls: Vec<ToolCall>,
        registry: &Registry,
        ctx: &ContextConfig,
    ) -> Result<Admission, (String, Vec<ToolCall>)> {
        let counter = ctx.counter.as_ref();
        let Some(state) = self.output.as_ref() else { return Err((text, tool_calls)) };
        let wrapped = state.wrapped;
        let unwrap = |v: &serde_json::Value| if wrapped { v.get(WRAPPED_KEY).cloned() } else { Some(v.clone()) };
        if let [call] = tool_calls.as_slice() {
            if call.name == FINAL_ANSWER_TOOL && registry.check(FINAL_ANSWER_TOOL, &call.arguments).is_ok() {
                let Some(value) = unwrap(&call.arguments) else { return Err((text, tool_calls)) };
                let call_id = String::from(&*call.id);
                let answer = value.to_string();
                if let Err(e) = self.push_turn(text, tool_calls, counter) {
                    return Ok(self.end(Status::ModelError, None, Some(e.to_string())));
                }
                let accepted = ToolResult::new(call_id, "accepted as the final answer", false);
                if let Err(e) = self.transcript.push_result(accepted, counter) {
                    return Ok(self.end(Status::ModelError, None, Some(format!("internal: {e}"))));
                }
                self.set_output_value(value);
                return Ok(self.end(Status::Completed, Some(answer), None));
            }
        }
        if !tool_calls.is_empty() {
            return Err((text, tool_calls));
        }
        // Plain text: JSON that matches the schema (an API's native JSON mode) is the output.
        let mut why = None;
        if let Some(json) = json_in_text(&text) {
            // The tool's own arguments (an API's native format, given the tool's schema), else the bare answer.
            let native = (wrapped && registry.check(FINAL_ANSWER_TOOL, &json).is_ok())
                .then(|| json.get(WRAPPED_KEY).cloned())
                .flatten();
            let (args, value) = match native {
                Some(v) => (json, v),
                None if wrapped => (serde_json::json!({ WRAPPED_KEY: json.clone() }), json),
                None => (json.clone(), json),
            };
            match registry.check(FINAL_ANSWER_TOOL, &args) {
                Ok(_) => {
                    if let Err(e) = self.push_turn(text.clone(), Vec::new(), counter) {
                        return Ok(self.end(Status::ModelError, None, Some(e.to_string())));
                    }
                    self.set_output_value(value);
                    return Ok(self.end(Status::Completed, Some(text), None));
                }
                Err(crate::registry::CallError::InvalidArguments { errors, .. }) => {
                    why = Some(errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "));
                }
                Err(e) => why = Some(e.to_string()),
            }
        }
        let told = self.output.as_ref().is_some_and(|o| o.told);
        if let Err(e) = self.push_turn(text.clone(), Vec::new(), counter) {
            return Ok(self.end(Status::ModelError, None, Some(e.to_string())));
        }
        if told {
            // Told once already: the run ends with the text as its answer, no output, and a status of its own.
            let detail = match &why {
                Some(why) => format!("the final answer did not match the output schema: {why}"),
                None => "the final answer did not match the output schema: it held no JSON value".to_owned(),
            };
            return Ok(self.end(Status::OutputInvalid, Some(text), Some(detail)));
        }
        if let Err(e) = self.transcript.push_user(reminder(why.as_deref()), counter) {
            return Ok(self.end(Status::ModelError, None, Some(format!("internal: {e}"))));
        }
        if let Some(o) = self.output.as_mut() {
            o.told = true;
        }
        Ok(Admission::Reminded)
    }

    fn set_output_value(&mut self, value: serde_json::Value) {
        if let Some(o) = self.output.as_mut() {
            o.value = Some(value);
        }
    }

    /// The tool-call half of [`RunState::on_model_response`]: the tool-call budget, the context admission,
    /// each call validated and put to the policy, then the turn recorded and the batch admitted.
    fn admit_calls(
        &mut self,
        text: String,
        tool_calls: Vec<ToolCall>,
        registry: &Registry,
        policy: Option<&dyn Policy>,
        ctx: &ContextConfig,
    ) -> Admission {
        let counter = ctx.counter.as_ref();
        let n = tool_calls.len() as u64;
        if let Some(max) = self.limits.max_tool_calls {
            let used = if self.agents.is_empty() {
                self.tool_calls
            } else {
                self.tool_calls.saturating_add(self.agent_tool_calls())
            };
            let left = max.saturating_sub(used);
            if n > left {
                return self.end(
                    Status::ToolLimit,
                    None,
                    Some(format!("tool-call limit: a batch of {n} calls does not fit the {left} left of max_tool_calls {max}; none ran")),
                );
            }
        }
        let reasoning = std::mem::take(&mut self.pending_reasoning);
        let assistant = Message::Assistant { content: text, tool_calls, reasoning };
        let assistant_size = measure(&assistant, counter);
        if let Some(budget) = ctx.max_context {
            let (instructions, tools) = self.fixed_sizes(registry, ctx);
            let fixed = instructions.saturating_add(tools);
            let first = self.transcript.first_size();
            let reserve =
                n.saturating_mul(MIN_RESULT_UNITS.min(ctx.max_tool_result_chars.map_or(u64::MAX, |c| c as u64)));
            let need = first.saturating_add(assistant_size).saturating_add(reserve).saturating_add(fixed);
            if need > budget {
                let unit = counter.unit();
                let with_fixed = if fixed > 0 {
                    format!(" and the instructions and tool specs ({fixed} {unit})")
                } else {
                    String::new()
                };
                return self.end(
                    Status::ContextLimit,
                    None,
                    Some(format!(
                        "context limit: the newest turn ({assistant_size} {unit}, {n} calls, at least {reserve} {unit} for their results) plus the first user message ({first} {unit}){with_fixed} exceeds the context budget ({budget} {unit}); no call ran"
                    )),
                );
            }
        }
        let mut plans = Vec::with_capacity(assistant.tool_calls().len());
        let mut stop = None;
        for call in assistant.tool_calls() {
            let plan = match registry.check(&call.name, &call.arguments) {
                Err(e) => Plan::Reject { message: e.to_string() },
                Ok(_) => match policy.map_or(Decision::Allow, |p| p.check(call)) {
                    Decision::Allow => Plan::Run,
                    Decision::Deny(reason) => Plan::Reject { message: format!("denied by policy: {reason}") },
                    Decision::Stop(reason) => {
                        stop = Some(reason);
                        break;
                    }
                    Decision::Ask(reason) => Plan::Ask { reason },
                },
            };
            plans.push(plan);
        }
        self.tool_calls += n;
        if let Err(e) = self.transcript.push_measured(assistant, assistant_size) {
            return self.end(Status::ModelError, None, Some(e.to_string()));
        }
        if let Some(reason) = stop {
            let message = format!("not run: the run was stopped by policy: {reason}");
            for id in self.transcript.unanswered().to_vec() {
                let _ = self.transcript.push_result(ToolResult::new(id, message.clone(), true), counter);
            }
            return self.end(Status::Aborted, None, Some(format!("stopped by policy: {reason}")));
        }
        self.phase = Phase::AwaitingTools { plans, assistant_size, edits: Vec::new() };
        Admission::Batch
    }

    /// True when the admitted batch has a call that waits for a decision.
    pub fn awaits_decision(&self) -> bool {
        matches!(&self.phase, Phase::AwaitingTools { plans, .. } if plans.iter().any(|p| matches!(p, Plan::Ask { .. }))
            || self.held.agents.iter().any(|a| a.pending.iter().any(PendingCall::needs_decision)))
    }

    /// The final answer of a completed run.
    pub fn outcome_answer(&self) -> Option<String> {
        match &self.phase {
            Phase::Done { status: Status::Completed, answer, .. } => answer.clone(),
            _ => None,
        }
    }

    /// The admitted batch as it stands, every call with its plan and the arguments it would run with
    /// (empty when no batch is admitted). Built only on the approval path: it copies the calls.
    pub fn pending_batch(&self) -> Vec<PendingCall> {
        let Phase::AwaitingTools { plans, edits, .. } = &self.phase else {
            return Vec::new();
        };
        let calls = self.transcript.last().map_or(&[][..], Message::tool_calls);
        calls
            .iter()
            .zip(plans)
            .enumerate()
            .map(|(i, (call, plan))| {
                let edit = edits.get(i).and_then(Option::as_ref);
                let arguments = edit.map_or(&call.arguments, |e| &e.call.arguments);
                PendingCall {
                    call_id: String::from(&*call.id),
                    name: call.name.clone(),
                    arguments: arguments.clone(),
                    arguments_hash: arguments_hash(arguments),
                    plan: plan.clone(),
                    edited_by: edit.map(|e| e.by.clone()),
                    sub_agent: None,
                    result: self.held.results.get(i).cloned().flatten(),
                }
            })
            .chain(self.held.agents.iter().flat_map(|a| {
                a.pending.iter().map(|p| PendingCall {
                    sub_agent: Some(SubAgentCall {
                        agent: a.agent.clone(),
                        parent_call_id: a.call_id.clone(),
                        run_id: a.run_id.clone(),
                        spent: a.spent,
                    }),
                    ..p.clone()
                })
            }))
            .collect()
    }

    /// Stops the admitted batch for its sub-agents' questions instead of recording it: `results` are what
    /// its calls gave (`None`: not run), `waits` the sub-agent runs that ended waiting for decisions (their
    /// calls' results are not kept). The batch waits for those decisions ([`Action::Approve`]); then it runs
    /// again, except the calls that already ran, and each waiting sub-agent run is continued.
    pub fn hold_batch(&mut self, results: Vec<Option<CallResult>>, waits: Vec<AgentWait>) {
        if !matches!(self.phase, Phase::AwaitingTools { .. }) {
            return;
        }
        let calls = self.transcript.last().map_or(&[][..], Message::tool_calls);
        let kept = calls
            .iter()
            .zip(results)
            .enumerate()
            .map(|(i, (call, r))| match r {
                Some(_) if waits.iter().any(|w| w.call_id == *call.id) => None,
                Some(r) => Some(HeldResult { content: r.content, is_error: r.is_error }),
                None => self.held.results.get(i).cloned().flatten(),
            })
            .collect();
        self.held = Held { results: kept, agents: waits };
    }

    /// A continued sub-agent run counts the model responses of its earlier runs for the same call (its own
    /// `max_steps` holds across them).
    pub(crate) fn count_earlier_steps(&mut self, steps: u64) {
        self.steps = self.steps.saturating_add(steps);
    }

    /// The ids of the sub-agent runs the batch waits on whose transcripts are not known (a state rebuilt
    /// from a record: give them with [`RunState::set_agent_transcript`]).
    pub fn waiting_agent_runs(&self) -> Vec<String> {
        self.held.agents.iter().filter(|a| a.messages.is_empty()).map(|a| a.run_id.clone()).collect()
    }

    /// The transcript of the waiting sub-agent run `run_id`, as recorded.
    pub fn set_agent_transcript(&mut self, run_id: &str, messages: Vec<Message>) {
        if let Some(a) = self.held.agents.iter_mut().find(|a| a.run_id == run_id) {
            a.messages = messages;
        }
    }

    /// The call at `index` of the admitted batch as it would run (with changed arguments, if any) and its plan.
    pub fn batch_call(&self, index: usize) -> Option<PlannedCall<'_>> {
        let Phase::AwaitingTools { plans, edits, .. } = &self.phase else {
            return None;
        };
        let call = self.transcript.last().map_or(&[][..], Message::tool_calls).get(index)?;
        let call = edits.get(index).and_then(Option::as_ref).map_or(call, |e| &e.call);
        Some(PlannedCall { call, plan: plans.get(index)? })
    }

    /// How many calls the admitted batch holds (0 when none is admitted).
    pub fn batch_len(&self) -> usize {
        match &self.phase {
            Phase::AwaitingTools { plans, .. } => plans.len(),
            _ => 0,
        }
    }

    fn set_plan(&mut self, index: usize, plan: Plan, edit: Option<Edit>) {
        if let Phase::AwaitingTools { plans, edits, .. } = &mut self.phase {
            if let Some(slot) = plans.get_mut(index) {
                *slot = plan;
            }
            if let Some(edit) = edit {
                if edits.len() < plans.len() {
                    edits.resize(plans.len(), None);
                }
                if let Some(slot) = edits.get_mut(index) {
                    *slot = Some(edit);
                }
            }
        }
    }

    /// Applies a `pre_tool` hook's answer to the call at `index` of the admitted batch (a call already
    /// refused is left as it is). `deny` refuses the call; `ask` makes it wait for a decision; `rewrite`
    /// gives it new arguments, validated against the tool's schema (invalid ones refuse the call) and put
    /// to the policy again. Returns the call's plan after it.
    pub fn apply_pre_tool(
        &mut self,
        index: usize,
        answer: PreTool,
        hook: &str,
        registry: &Registry,
        policy: Option<&dyn Policy>,
    ) -> Option<Plan> {
        let p = self.batch_call(index)?;
        let (call, plan) = (p.call.clone(), p.plan.clone());
        if matches!(plan, Plan::Reject { .. }) {
            return Some(plan);
        }
        let (plan, edit) = match answer {
            PreTool::Allow => (plan, None),
            PreTool::Deny(reason) => (Plan::Reject { message: format!("denied by hook {hook}: {reason}") }, None),
            PreTool::Ask(reason) => match plan {
                Plan::Ask { reason: before } => {
                    (Plan::Ask { reason: format!("{before}; hook {hook}: {reason}") }, None)
                }
                _ => (Plan::Ask { reason: format!("hook {hook}: {reason}") }, None),
            },
            PreTool::Rewrite(arguments) => match registry.check(&call.name, &arguments) {
                Err(e) => (
                    Plan::Reject { message: format!("hook {hook} rewrote the arguments into invalid ones: {e}") },
                    None,
                ),
                Ok(_) => {
                    let new = ToolCall { id: call.id.clone(), name: call.name.clone(), arguments };
                    let plan = match policy.map_or(Decision::Allow, |p| p.check(&new)) {
                        Decision::Allow => plan,
                        Decision::Ask(reason) => Plan::Ask { reason },
                        Decision::Deny(reason) | Decision::Stop(reason) => {
                            Plan::Reject { message: format!("denied by policy: {reason}") }
                        }
                    };
                    (plan, Some(Edit { call: new, by: format!("hook {hook}") }))
                }
            },
        };
        self.set_plan(index, plan.clone(), edit);
        Some(plan)
    }

    /// Applies a decision about a call that waits for one. It must name the call's id and the hash of its
    /// arguments as they stand ([`arguments_hash`]); a decision for other arguments does not apply. Edited
    /// arguments are validated against the tool's schema (invalid ones leave the call undecided). A denied
    /// call gets an error result with the reason and never runs.
    pub fn decide(&mut self, decision: &ApprovalDecision, registry: &Registry) -> Result<(), DecisionError> {
        let Phase::AwaitingTools { plans, .. } = &self.phase else {
            return Err(DecisionError::NotAwaiting);
        };
        let calls = self.transcript.last().map_or(&[][..], Message::tool_calls);
        let found = calls
            .iter()
            .position(|c| *c.id == *decision.call_id)
            .filter(|i| matches!(plans.get(*i), Some(Plan::Ask { .. })));
        let Some(index) = found else {
            return self.decide_for_sub_agent(decision);
        };
        let Some(current) = self.batch_call(index) else {
            return Err(DecisionError::UnknownCall(decision.call_id.clone()));
        };
        crate::approval::check_hash(decision, &current.call.arguments)?;
        let call = current.call.clone();
        let (plan, edit) = match &decision.verdict {
            Verdict::Approve => (Plan::Run, None),
            Verdict::Deny { reason } => (Plan::Reject { message: format!("denied by the approver: {reason}") }, None),
            Verdict::Edit { arguments } => {
                crate::approval::check_edit(&call.id, &call.name, arguments, registry)?;
                let new = ToolCall { id: call.id, name: call.name, arguments: arguments.clone() };
                (Plan::Run, Some(Edit { call: new, by: "the approver".into() }))
            }
        };
        self.set_plan(index, plan, edit);
        Ok(())
    }

    /// A decision about a waiting sub-agent's call: approve or deny (its tools are not this run's, so an
    /// edit cannot be checked here).
    fn decide_for_sub_agent(&mut self, decision: &ApprovalDecision) -> Result<(), DecisionError> {
        let call = self
            .held
            .agents
            .iter_mut()
            .flat_map(|a| a.pending.iter_mut())
            .find(|p| p.call_id == decision.call_id && p.needs_decision())
            .ok_or_else(|| DecisionError::UnknownCall(decision.call_id.clone()))?;
        crate::approval::check_hash(decision, &call.arguments)?;
        call.plan = match &decision.verdict {
            Verdict::Approve => Plan::Run,
            Verdict::Deny { reason } => Plan::Reject { message: format!("denied by the approver: {reason}") },
            Verdict::Edit { .. } => return Err(DecisionError::SubAgentEdit(decision.call_id.clone())),
        };
        Ok(())
    }

    /// Ends the run `awaiting_approval`: the batch (its calls without results) stays as it stands and the
    /// outcome's `pending` shows it, to be decided and continued ([`RunState::resume_pending`]).
    pub fn await_approval(&mut self, detail: Option<String>) {
        if !matches!(self.phase, Phase::AwaitingTools { .. }) {
            return;
        }
        let batch = self.pending_batch();
        let waiting: Vec<&str> = batch.iter().filter(|p| p.needs_decision()).map(|p| p.call_id.as_str()).collect();
        let mut error = format!("awaiting approval of {} call(s): {}", waiting.len(), waiting.join(", "));
        if let Some(d) = detail {
            error.push_str(&format!(" ({d})"));
        }
        self.awaiting = batch;
        self.phase = Phase::Done { status: Status::AwaitingApproval, answer: None, error: Some(error) };
    }

    /// Continues a run that ended `awaiting_approval`: `messages` is the transcript (its last turn's calls
    /// without results) and `pending` the waiting batch from that run's outcome, decisions made so far
    /// included. The new run waits for the rest of the decisions ([`Action::Approve`]).
    pub fn resume_pending(
        run_id: impl Into<String>,
        messages: Vec<Message>,
        pending: Vec<PendingCall>,
        limits: Limits,
        ctx: &ContextConfig,
    ) -> Result<Self, ConfigError> {
        limits.validate()?;
        let counter = ctx.counter.as_ref();
        let transcript = Transcript::from_messages(messages, counter).map_err(|e| ConfigError(e.to_string()))?;
        // The batch's own calls, and its sub-agents' waiting calls (each run's, in order).
        let (pending, theirs): (Vec<PendingCall>, Vec<PendingCall>) =
            pending.into_iter().partition(|p| p.sub_agent.is_none());
        let mut agents: Vec<AgentWait> = Vec::new();
        for mut p in theirs {
            let Some(of) = p.sub_agent.take() else { continue };
            match agents.iter_mut().find(|a| a.run_id == of.run_id) {
                Some(a) => a.pending.push(p),
                None => agents.push(AgentWait {
                    agent: of.agent,
                    call_id: of.parent_call_id,
                    run_id: of.run_id,
                    messages: Vec::new(),
                    pending: vec![p],
                    spent: of.spent,
                }),
            }
        }
        let results: Vec<Option<HeldResult>> = pending.iter().map(|p| p.result.clone()).collect();
        let held = Held { results: if results.iter().all(Option::is_none) { Vec::new() } else { results }, agents };
        let unanswered = transcript.unanswered();
        let ids: Vec<&str> = pending.iter().map(|p| p.call_id.as_str()).collect();
        if pending.is_empty() || unanswered.len() != pending.len() || unanswered.iter().zip(&ids).any(|(a, b)| a != b) {
            return Err(ConfigError(format!(
                "the waiting batch ({}) is not the transcript's unanswered calls ({})",
                ids.join(", "),
                unanswered.join(", ")
            )));
        }
        let calls = transcript.last().map_or(&[][..], Message::tool_calls);
        let mut edits = Vec::with_capacity(pending.len());
        for (call, p) in calls.iter().zip(&pending) {
            if call.name != p.name {
                return Err(ConfigError(format!("call {:?} is of tool {:?}, not {:?}", p.call_id, call.name, p.name)));
            }
            edits.push(
                (p.arguments != call.arguments || p.edited_by.is_some())
                    .then(|| Edit { call: p.call(), by: p.edited_by.clone().unwrap_or_else(|| "the approver".into()) }),
            );
        }
        let assistant_size = transcript.last().map_or(0, |m| measure(m, counter));
        let edits = if edits.iter().all(Option::is_none) { Vec::new() } else { edits };
        let plans = pending.into_iter().map(|p| p.plan).collect();
        Ok(RunState {
            run_id: run_id.into(),
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
            cost_usd: 0.0,
            finish_reason: None,
            pending_reasoning: Vec::new(),
            agents: BTreeMap::new(),
            phase: Phase::AwaitingTools { plans, assistant_size, edits },
            awaiting: Vec::new(),
            held,
        })
    }

    /// A `stop` hook refused the final answer: the run goes on, the model gets `feedback` as a user message
    /// (the answer stays in the transcript; its step counted, so the step limit bounds the loop).
    pub fn refuse_answer(&mut self, feedback: impl Into<String>, ctx: &ContextConfig) -> Result<(), TranscriptError> {
        if !matches!(self.phase, Phase::Done { status: Status::Completed, .. }) {
            return Ok(());
        }
        self.transcript.push_user(feedback, ctx.counter.as_ref())?;
        self.phase = Phase::Ready;
        Ok(())
    }

    /// A final answer could not be checked (a `stop` hook failed): the run ends `aborted` with `error`, the
    /// answer withheld (it stays in the transcript).
    pub fn withhold_answer(&mut self, error: String) {
        if matches!(self.phase, Phase::Done { status: Status::Completed, .. }) {
            self.phase = Phase::Done { status: Status::Aborted, answer: None, error: Some(error) };
        }
    }

    fn token_limit_hit(&self) -> Option<String> {
        let u = &self.usage;
        let l = &self.limits;
        for (name, used, max) in [
            ("input", u.input_tokens, l.max_input_tokens),
            ("output", u.output_tokens, l.max_output_tokens),
            ("total", u.total_tokens, l.max_total_tokens),
        ] {
            if let Some(max) = max {
                if used > max {
                    return Some(format!(
                        "token limit: {used} {name} tokens exceed max_{name}_tokens {max}; the turn was not recorded"
                    ));
                }
            }
        }
        None
    }

    /// Records the assistant turn of the response being taken, with its reasoning items.
    fn push_turn(
        &mut self,
        text: String,
        tool_calls: Vec<ToolCall>,
        counter: &dyn crate::context::TokenCounter,
    ) -> Result<(), crate::transcript::TranscriptError> {
        let reasoning = std::mem::take(&mut self.pending_reasoning);
        self.transcript.push_assistant_message(Message::Assistant { content: text, tool_calls, reasoning }, counter)
    }

    fn cost_limit_hit(&self) -> Option<String> {
        let max = self.limits.max_cost_usd?;
        let cost = self.cost_usd().filter(|c| *c > max)?;
        Some(format!("cost limit: the run cost ${cost:.6}, over max_cost_usd ${max}; the turn was not recorded"))
    }

    /// Records the results of the admitted batch, in call order. `None` marks a call that did not finish:
    /// it gets an error result saying `unfinished`. Each result is bounded to `max_tool_result_chars`;
    /// under a context budget the results are then bounded together so that the newest group fits.
    /// With `end` set the run ends with that status and `end_reason` (cancellation, deadline).
    pub fn record_batch(
        &mut self,
        results: Vec<Option<CallResult>>,
        unfinished: &str,
        end: Option<(Status, String)>,
        ctx: &ContextConfig,
    ) {
        let Phase::AwaitingTools { assistant_size, edits, .. } = std::mem::replace(&mut self.phase, Phase::Ready)
        else {
            return;
        };
        if !self.held.is_empty() {
            self.held = Held::default();
        }
        let counter = ctx.counter.as_ref();
        let mut results = results.into_iter();
        let mut texts: Vec<(String, String, bool, Vec<Image>)> = self
            .transcript
            .unanswered()
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let mut r = results.next().flatten().unwrap_or_else(|| CallResult::text(unfinished, true));
                if let Some(Some(e)) = edits.get(i) {
                    r.content = format!("{EDIT_NOTE}{}: {}]\n{}", e.by, e.call.arguments, r.content);
                }
                let content = match ctx.max_tool_result_chars {
                    // Within the limit in bytes is within it in characters: keep the string as it is.
                    Some(max) if r.content.len() > max => bound_text(&r.content, max),
                    _ => r.content,
                };
                (id.clone(), content, r.is_error, r.images)
            })
            .collect();
        if let Some(budget) = ctx.max_context {
            let fixed = self.instructions_size.saturating_add(self.tools_size.as_ref().map_or(0, |t| t.size));
            let mut available = budget
                .saturating_sub(fixed)
                .saturating_sub(self.transcript.first_size())
                .saturating_sub(assistant_size);
            // Images are not cut: when the batch's images do not fit with room for the texts, they are left
            // out, and each result that had some says so.
            let images: u64 =
                texts.iter().flat_map(|t| &t.3).fold(0u64, |a, i| a.saturating_add(counter.count_image(i)));
            if images > 0 {
                if images.saturating_add(MIN_RESULT_UNITS.saturating_mul(texts.len() as u64)) > available {
                    for t in texts.iter_mut().filter(|t| !t.3.is_empty()) {
                        let n = std::mem::take(&mut t.3).len();
                        t.1.push_str(&format!("\n[{n} image(s) left out: they do not fit the context budget]"));
                    }
                } else {
                    available -= images;
                }
            }
            let sizes: Vec<u64> = texts.iter().map(|t| counter.count(&t.1)).collect();
            if sizes.iter().fold(0u64, |a, s| a.saturating_add(*s)) > available {
                let shares = fair_shares(&sizes, available);
                for (t, (size, share)) in texts.iter_mut().zip(sizes.iter().zip(shares)) {
                    if *size > share {
                        t.1 = bound_to_units(&t.1, share, counter).0;
                    }
                }
            }
        }
        for (call_id, content, is_error, images) in texts {
            if let Err(e) = self.transcript.push_result(ToolResult { call_id, content, is_error, images }, counter) {
                self.end(Status::ModelError, None, Some(format!("internal: {e}")));
                return;
            }
        }
        if let Some((status, reason)) = end {
            self.end(status, None, Some(reason));
        }
    }

    /// Ends the run from outside (cancellation or deadline between steps). A pending batch is completed
    /// with an error result for every call, so the transcript stays coherent.
    pub fn interrupt(&mut self, status: Status, reason: String, ctx: &ContextConfig) {
        match self.phase {
            Phase::AwaitingTools { .. } => {
                let n = match &self.phase {
                    Phase::AwaitingTools { plans, .. } => plans.len(),
                    _ => 0,
                };
                let unfinished = format!("aborted: {reason}");
                self.record_batch(vec![None; n], &unfinished, Some((status, reason)), ctx);
            }
            Phase::Ready | Phase::Compacting { .. } => {
                self.end(status, None, Some(reason));
            }
            Phase::Done { .. } => {}
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

    fn outcome_with(&self, messages: Vec<Message>) -> Outcome {
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

/// How the result of a call whose arguments a hook or an approver changed begins: this, who changed them,
/// `: `, the arguments they run with, `]` and a newline, then the tool's result.
const EDIT_NOTE: &str = "[the arguments were changed by ";

/// A recorded tool result without the note a run puts before the result of a call whose arguments a hook or
/// an approver changed: what the tool itself answered (a replay answers with it, and the run adds the note
/// again).
///
/// ```
/// assert_eq!(reins::without_edit_note("[the arguments were changed by the approver: {\"a\":1}]\nok"), "ok");
/// assert_eq!(reins::without_edit_note("ok"), "ok");
/// ```
pub fn without_edit_note(content: &str) -> &str {
    content.strip_prefix(EDIT_NOTE).and_then(|rest| rest.split_once("]\n")).map_or(content, |(_, after)| after)
}

/// The status of a final answer that did not end naturally, and why: cut by the response cap
/// (`truncated`), refused or filtered (`refused`). `None`: completed.
fn final_status(finish: Option<&FinishReason>) -> Option<(Status, String)> {
    match finish? {
        FinishReason::Length => Some((
            Status::Truncated,
            "the answer was cut by the response cap (finish reason `length`): raise the response cap (--max-response-tokens, [provider] max_response_tokens); the partial answer is kept".to_owned(),
        )),
        FinishReason::Refusal => Some((
            Status::Refused,
            "the model refused to answer (finish reason `refusal`); what it said is kept".to_owned(),
        )),
        FinishReason::ContentFilter => Some((
            Status::Refused,
            "a content filter cut the answer (finish reason `content_filter`); the partial answer is kept".to_owned(),
        )),
        FinishReason::Stop | FinishReason::ToolCalls | FinishReason::Other(_) => None,
    }
}

fn drop_marker_text(groups: usize, items: usize) -> String {
    crate::transcript::drop_marker(groups, items).content().to_owned()
}
