//! People in the loop: approvals. A [`crate::Policy`] (or a `pre_tool` hook) may answer
//! [`crate::Decision::Ask`]; the state machine then stops before the batch (the whole batch waits, since a
//! batch runs as a whole) and the driver asks its [`Approver`]. Without an approver, or when the approver
//! leaves a call undecided, the run ends `awaiting_approval` with the batch in its outcome
//! ([`crate::Outcome::pending`]), so it can be decided later and continued.
//!
//! A decision binds to the call's id **and** the exact arguments it was shown: [`arguments_hash`] of their
//! canonical JSON. A decision for other arguments does not apply (the call stays undecided).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::engine::state::Plan;
use crate::message::ToolCall;
use crate::registry::Registry;

/// The canonical JSON of a value: object keys sorted (by their UTF-8 bytes), no whitespace, numbers and
/// strings as `serde_json` writes them.
pub fn canonical_json(value: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    if let Some(x) = m.get(k) {
                        write(x, out);
                    }
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(x, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// `sha256:` and the hex SHA-256 of the arguments' [`canonical_json`]: what a decision binds to.
pub fn arguments_hash(arguments: &Value) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(canonical_json(arguments).as_bytes());
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in digest.iter() {
        out.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
    }
    out
}

/// One call of a batch that waits for decisions, as the outcome of an `awaiting_approval` run shows it and
/// a continued run restores it: `{"call_id", "name", "arguments", "arguments_hash", "kind": "run" | "reject" |
/// "ask", "message"?, "reason"?, "edited_by"?}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingCall {
    /// The call's id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The arguments it will run with (changed by a hook or an approver's edit when `edited_by` says so).
    pub arguments: Value,
    /// [`arguments_hash`] of `arguments`: a decision must name it.
    pub arguments_hash: String,
    /// What is planned for it: `run`, `reject` (with the model's error `message`) or `ask` (with the
    /// `reason` a decision is needed).
    #[serde(flatten)]
    pub plan: Plan,
    /// Who changed the arguments the model proposed (`hook NAME`, `approver`), if anyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_by: Option<String>,
    /// For a sub-agent's call that waits inside its parent's batch: which sub-agent run it belongs to (the
    /// parent's batch shows its sub-agents' waiting calls after its own; see [`crate::subagent`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_agent: Option<SubAgentCall>,
    /// For a call of the batch that already ran before a sub-agent stopped for a decision: its result (the
    /// call does not run again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<HeldResult>,
}

/// Which sub-agent run a waiting call belongs to: `{"agent", "parent_call_id", "run_id", "spent"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubAgentCall {
    /// The sub-agent (its tool name in the parent).
    pub agent: String,
    /// The parent's call that started it.
    pub parent_call_id: String,
    /// The sub-agent's run that waits (its transcript is recorded under this id).
    pub run_id: String,
    /// What its runs for the parent's call spent so far: its own limits count it when it continues.
    #[serde(default)]
    pub spent: crate::outcome::AgentTotals,
}

/// The result of a call that ran while its batch was stopped by a sub-agent's question: `{"content",
/// "is_error"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldResult {
    /// The result text (not yet bounded).
    pub content: String,
    /// True for an error result.
    pub is_error: bool,
}

impl PendingCall {
    /// True when the call still needs a decision.
    pub fn needs_decision(&self) -> bool {
        matches!(self.plan, Plan::Ask { .. })
    }

    /// The call with the arguments it will run with.
    pub fn call(&self) -> ToolCall {
        ToolCall { id: self.call_id.as_str().into(), name: self.name.clone(), arguments: self.arguments.clone() }
    }
}

/// What an approver asks about: the calls of one batch that need a decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The run.
    pub run_id: String,
    /// The session it is recorded in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The calls that need a decision, in call order (each with `kind: "ask"` and its reason).
    pub calls: Vec<PendingCall>,
}

/// A decision about one call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Verdict {
    /// The call runs as it is.
    Approve,
    /// The call does not run; the model gets an error result with this reason.
    Deny {
        /// Why (the model sees it).
        reason: String,
    },
    /// The call runs with these arguments instead (validated against the tool's schema again).
    Edit {
        /// The new arguments.
        arguments: Value,
    },
}

impl Verdict {
    /// `approve`, `deny` or `edit`.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::Deny { .. } => "deny",
            Verdict::Edit { .. } => "edit",
        }
    }
}

/// A decision bound to a call: its id and the hash of the exact arguments that were reviewed.
/// `{"call_id", "arguments_hash", "decision": "approve" | "deny" | "edit", "reason"?, "arguments"?}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    /// The call decided on.
    pub call_id: String,
    /// [`arguments_hash`] of the arguments that were reviewed.
    pub arguments_hash: String,
    /// The decision.
    #[serde(flatten)]
    pub verdict: Verdict,
}

impl ApprovalDecision {
    /// Approves `call` as shown.
    pub fn approve(call: &PendingCall) -> Self {
        Self { call_id: call.call_id.clone(), arguments_hash: call.arguments_hash.clone(), verdict: Verdict::Approve }
    }

    /// Denies `call` with `reason`.
    pub fn deny(call: &PendingCall, reason: impl Into<String>) -> Self {
        Self {
            call_id: call.call_id.clone(),
            arguments_hash: call.arguments_hash.clone(),
            verdict: Verdict::Deny { reason: reason.into() },
        }
    }

    /// Approves `call` with other arguments.
    pub fn edit(call: &PendingCall, arguments: Value) -> Self {
        Self {
            call_id: call.call_id.clone(),
            arguments_hash: call.arguments_hash.clone(),
            verdict: Verdict::Edit { arguments },
        }
    }
}

/// Why a decision was not applied (the call stays undecided).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
    /// The run is not waiting for decisions.
    #[error("the run is not waiting for an approval")]
    NotAwaiting,
    /// No call of the waiting batch has this id, or it needs no decision.
    #[error("no call {0:?} waits for a decision")]
    UnknownCall(String),
    /// The decision was made for other arguments than the call's.
    #[error(
        "the decision for call {call_id:?} was made for other arguments ({decided}) than the call's ({current}): a new decision is needed"
    )]
    OtherArguments {
        /// The call.
        call_id: String,
        /// The hash the decision names.
        decided: String,
        /// The hash of the call's arguments.
        current: String,
    },
    /// An edit of a sub-agent's call: its tools are not the parent's, so only approve or deny apply.
    #[error("call {0:?} is a sub-agent's: approve or deny it (its arguments cannot be edited from its parent)")]
    SubAgentEdit(String),
    /// Edited arguments that the tool's schema refuses.
    #[error("the edited arguments of call {call_id:?} are invalid: {detail}")]
    InvalidEdit {
        /// The call.
        call_id: String,
        /// What the validation said.
        detail: String,
    },
}

/// Checks that a decision names the arguments a call waits with: the hash of `arguments` (the call's, as
/// they stand) must be the one the decision names.
pub(crate) fn check_hash(decision: &ApprovalDecision, arguments: &Value) -> Result<(), DecisionError> {
    let hash = arguments_hash(arguments);
    if hash != decision.arguments_hash {
        return Err(DecisionError::OtherArguments {
            call_id: decision.call_id.clone(),
            decided: decision.arguments_hash.clone(),
            current: hash,
        });
    }
    Ok(())
}

/// Checks the arguments of an edit against the schema of the tool `name` in `registry`.
pub(crate) fn check_edit(
    call_id: &str,
    name: &str,
    arguments: &Value,
    registry: &Registry,
) -> Result<(), DecisionError> {
    registry
        .check(name, arguments)
        .map(|_| ())
        .map_err(|e| DecisionError::InvalidEdit { call_id: call_id.to_owned(), detail: e.to_string() })
}

/// Checks `decisions` about the calls of a waiting batch (`waiting`, as [`crate::RunState::pending_batch`]
/// or an [`ApprovalRequest`] lists them) the way the run applies them ([`crate::RunState::decide`]): each
/// names a call that waits for a decision, once, with the hash of the arguments it waits with, and edited
/// arguments pass the tool's schema in `registry`. For an approver that must know before it answers that
/// its decisions will apply (a durable run asks again instead of ending `awaiting_approval`).
pub fn check_decisions(
    waiting: &[PendingCall],
    decisions: &[ApprovalDecision],
    registry: &Registry,
) -> Result<(), DecisionError> {
    let mut seen = std::collections::HashSet::new();
    for d in decisions {
        let call = waiting
            .iter()
            .find(|p| p.call_id == d.call_id && p.needs_decision())
            .filter(|_| seen.insert(d.call_id.as_str()))
            .ok_or_else(|| DecisionError::UnknownCall(d.call_id.clone()))?;
        check_hash(d, &call.arguments)?;
        if let Verdict::Edit { arguments } = &d.verdict {
            check_edit(&call.call_id, &call.name, arguments, registry)?;
        }
    }
    Ok(())
}

/// Why an approver gave no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("approver: {0}")]
pub struct ApprovalError(pub String);

/// Decides on calls that need a person's say. The driver calls it when a batch waits; every call it
/// leaves undecided (no decision in the answer, or one that does not apply) makes the run end
/// `awaiting_approval`, its batch recorded, to be decided later. An error ends it the same way.
///
/// Implementations: the CLI's terminal prompt, decisions given up front (`reins approve`), a Restate
/// awakeable (a durable run's performer: [`crate::Performer::approver`]), a chat UI.
#[async_trait]
pub trait Approver: Send + Sync {
    /// Decisions for (some of) the calls of `request`. `cancel` fires when the run is cancelled.
    async fn decide(
        &self,
        request: &ApprovalRequest,
        cancel: &CancellationToken,
    ) -> Result<Vec<ApprovalDecision>, ApprovalError>;
}

/// An approver that gives these decisions once, for the first batch that asks (the decisions of
/// `reins approve`); any later batch is left undecided.
pub struct GivenDecisions(std::sync::Mutex<Option<Vec<ApprovalDecision>>>);

impl GivenDecisions {
    /// These decisions, once.
    pub fn new(decisions: Vec<ApprovalDecision>) -> Self {
        Self(std::sync::Mutex::new(Some(decisions)))
    }
}

#[async_trait]
impl Approver for GivenDecisions {
    async fn decide(&self, _: &ApprovalRequest, _: &CancellationToken) -> Result<Vec<ApprovalDecision>, ApprovalError> {
        Ok(self.0.lock().map(|mut d| d.take()).unwrap_or_default().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let a = json!({"b": 1, "a": {"d": [1, {"z": 0, "y": "é"}], "c": null}});
        assert_eq!(canonical_json(&a), r#"{"a":{"c":null,"d":[1,{"y":"é","z":0}]},"b":1}"#);
        let b: Value = serde_json::from_str(r#"{"a":{"d":[1,{"y":"é","z":0}],"c":null},"b":1}"#).unwrap();
        assert_eq!(arguments_hash(&a), arguments_hash(&b));
        assert_ne!(arguments_hash(&a), arguments_hash(&json!({"b": 2})));
        assert!(arguments_hash(&a).starts_with("sha256:") && arguments_hash(&a).len() == 71);
    }

    #[test]
    fn decisions_have_their_json_form() {
        let d = ApprovalDecision {
            call_id: "c1".into(),
            arguments_hash: "sha256:00".into(),
            verdict: Verdict::Deny { reason: "no".into() },
        };
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v, json!({"call_id": "c1", "arguments_hash": "sha256:00", "decision": "deny", "reason": "no"}));
        assert_eq!(serde_json::from_value::<ApprovalDecision>(v).unwrap(), d);
    }
}
