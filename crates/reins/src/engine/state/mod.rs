//! The sans-I/O run state machine: it says what to do next and takes the results back; it never waits,
//! spawns, reads a clock or touches the network. Its state serializes, so a run can be persisted between
//! steps and resumed elsewhere.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::approval::{HeldResult, PendingCall};
use crate::context::ContextConfig;
use crate::cost::Price;
use crate::image::Image;
use crate::limits::Limits;
use crate::message::{Message, ToolCall};
use crate::model::{FinishReason, ModelRequest};
use crate::outcome::{AgentTotals, Status};
use crate::output::OutputState;
use crate::registry::Registry;
use crate::tool::ToolSpec;
use crate::transcript::Transcript;
use crate::usage::UsageTotals;

mod admission;
mod approvals;
mod context;
mod results;
mod setup;

pub use results::without_edit_note;

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

    /// The call at `index` with its plan (as [`Batch::iter`] gives it), if the batch has one there.
    pub fn get(&self, index: usize) -> Option<PlannedCall<'a>> {
        let (call, plan) = (self.calls.get(index)?, self.plans.get(index)?);
        let call = self.edits.get(index).and_then(Option::as_ref).map_or(call, |e| &e.call);
        Some(PlannedCall { call, plan })
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

/// A result of a batch recorded under a context budget: its text, whether it is an error, its images and its
/// size in the counter's unit.
type ResultText = (String, bool, Vec<crate::image::Image>, u64);

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
    /// Calls with usage that could not be priced (by a model of unknown price): the run's cost is then
    /// unknown.
    #[serde(default, skip_serializing_if = "is_zero")]
    unpriced_calls: u64,
    /// Whether a call a fallback's other model answered was priced at its price (the run's cost can then be
    /// known without the run's model's price).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    fallback_priced: bool,
    /// What the run cost so far, in US dollars (with a price).
    #[serde(default)]
    cost_usd: f64,
    /// Why the last model response stopped, where it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    finish_reason: Option<FinishReason>,
    /// The reasoning items of the response being taken, until its assistant turn is recorded with them.
    #[serde(skip)]
    pending_reasoning: Vec<crate::message::Reasoning>,
    /// The storage of the last recorded batch's plans, kept for the next batch's.
    #[serde(skip)]
    spare_plans: Vec<Plan>,
    /// The storage of the last batch's result texts under a context budget (text, error, images, size), kept
    /// for the next batch's.
    #[serde(skip)]
    spare_texts: Vec<ResultText>,
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
    fn end(&mut self, status: Status, answer: Option<String>, error: Option<String>) -> Admission {
        self.phase = Phase::Done { status, answer, error };
        if status == Status::Completed { Admission::Completed } else { Admission::Ended(status) }
    }

    /// What to do next. The step limit and the context budget are checked here, before a model call.
    pub fn next_action(&mut self, registry: &Registry, ctx: &ContextConfig) -> Action<'_> {
        if let Phase::Ready = self.phase {
            if let Some((status, detail)) = self.limit_before_step() {
                self.end(status, None, Some(detail));
                return Action::Finished;
            }
            return self.model_call(registry, ctx);
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

    /// The final answer of a completed run.
    pub fn outcome_answer(&self) -> Option<String> {
        match &self.phase {
            Phase::Done { status: Status::Completed, answer, .. } => answer.clone(),
            _ => None,
        }
    }
}
