//! How a run ended.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::message::Message;
use crate::model::FinishReason;
use crate::usage::UsageTotals;

/// Why a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The model answered without calling a tool.
    Completed,
    /// `max_steps` would be exceeded.
    StepLimit,
    /// A batch did not fit the remaining `max_tool_calls`.
    ToolLimit,
    /// Reported usage exceeded a token limit.
    TokenLimit,
    /// The wall-clock deadline passed.
    Timeout,
    /// The caller cancelled, or the policy stopped the run.
    Aborted,
    /// The model call failed or its response was malformed.
    ModelError,
    /// The context budget cannot hold the first message plus the newest group.
    ContextLimit,
    /// A batch waits for decisions about calls a policy or hook asked about, and no approver gave them
    /// all; the outcome's `pending` holds the batch (continue with decisions: `reins approve`).
    AwaitingApproval,
    /// The run's cost passed `max_cost_usd`.
    CostLimit,
    /// The final answer was cut by the response cap (finish reason `length`); its partial text is kept.
    Truncated,
    /// The model refused, or a content filter cut its answer; what it said is kept.
    Refused,
    /// The final answer did not match the output schema, even after the model was told once; its text is
    /// kept as the answer and there is no output.
    OutputInvalid,
}

impl Status {
    /// The snake_case name, as in JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::StepLimit => "step_limit",
            Status::ToolLimit => "tool_limit",
            Status::TokenLimit => "token_limit",
            Status::Timeout => "timeout",
            Status::Aborted => "aborted",
            Status::ModelError => "model_error",
            Status::ContextLimit => "context_limit",
            Status::AwaitingApproval => "awaiting_approval",
            Status::CostLimit => "cost_limit",
            Status::Truncated => "truncated",
            Status::Refused => "refused",
            Status::OutputInvalid => "output_invalid",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of a run: `{"status", "answer", "error", "steps", "tool_calls", "usage", "run_id",
/// "instructions", "compactions", "output", "messages"}`, plus `"session_id"` when the run was recorded,
/// `"cost_usd"` when the model's price is known and `"finish_reason"` when the last response said why it
/// stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Why it ended.
    pub status: Status,
    /// The final answer, when completed; the partial text of a `truncated` or `refused` one.
    pub answer: Option<String>,
    /// What went wrong, for every status but `completed`.
    pub error: Option<String>,
    /// Model responses received.
    pub steps: u64,
    /// Tool calls requested and admitted (every call of every admitted batch).
    pub tool_calls: u64,
    /// Usage totals.
    pub usage: UsageTotals,
    /// What the run cost in US dollars, when the model's price is known (calls that reported no usage
    /// add nothing: see `usage.calls_without_usage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Why the last model response stopped, where the model said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// The run's id.
    pub run_id: String,
    /// The id of the durable session the run was recorded in, when it was (see [`crate::journal`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The instructions the model was given with every call (`null` when none).
    #[serde(default)]
    pub instructions: Option<String>,
    /// Compactions recorded by the run (the `summarize` context strategy).
    #[serde(default)]
    pub compactions: u64,
    /// The validated output, when the run has an output schema and its final answer matched it (`null`
    /// otherwise; see [`crate::output`]).
    #[serde(default)]
    pub output: Option<serde_json::Value>,
    /// Under `awaiting_approval`: the waiting batch, every call of it with its plan (run, reject, or ask
    /// for a decision) in call order. Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<crate::approval::PendingCall>,
    /// What the run's sub-agents spent, by name (their usage is already in `usage`; their steps and tool
    /// calls counted against the run's limits but are not in `steps` and `tool_calls`). Absent without any.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agents: BTreeMap<String, AgentTotals>,
    /// The whole transcript: every assistant tool call has exactly one result (but those of a batch
    /// awaiting approval, which has none yet).
    pub messages: Vec<Message>,
}

/// What one sub-agent spent over the runs a parent started (see `AgentTool`): `{"runs", "steps",
/// "tool_calls", "usage"}`, plus `"cost_usd"` where the price is known. A sub-agent's own sub-agents are
/// counted in its totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentTotals {
    /// How many runs of it were started.
    pub runs: u64,
    /// Model responses received by those runs.
    pub steps: u64,
    /// Tool calls they admitted.
    pub tool_calls: u64,
    /// Their usage.
    pub usage: UsageTotals,
    /// Their cost in US dollars, when the price of every model they called is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl AgentTotals {
    /// Adds `other` (saturating; usage that would overflow is left as it was).
    pub fn add(&mut self, other: &AgentTotals) {
        self.runs = self.runs.saturating_add(other.runs);
        self.steps = self.steps.saturating_add(other.steps);
        self.tool_calls = self.tool_calls.saturating_add(other.tool_calls);
        if let Some(u) = self.usage.add_totals(&other.usage) {
            self.usage = u;
        }
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}
