//! The admitted batch waiting for decisions: its calls as they stand, `pre_tool` hooks' and approvers'
//! answers, sub-agents' questions held inside it, and a run continued from `awaiting_approval`.

use crate::approval::{
    ApprovalDecision, DecisionError, HeldResult, PendingCall, SubAgentCall, Verdict, arguments_hash,
};
use crate::context::ContextConfig;
use crate::hook::PreTool;
use crate::limits::{ConfigError, Limits};
use crate::message::{Message, ToolCall};
use crate::outcome::Status;
use crate::policy::{Decision, Policy};
use crate::registry::Registry;
use crate::transcript::{Transcript, measure};

use super::{AgentWait, CallResult, Edit, Held, Phase, Plan, PlannedCall, RunState};

impl RunState {
    /// True when the admitted batch has a call that waits for a decision.
    pub fn awaits_decision(&self) -> bool {
        matches!(&self.phase, Phase::AwaitingTools { plans, .. } if plans.iter().any(|p| matches!(p, Plan::Ask { .. }))
            || self.held.agents.iter().any(|a| a.pending.iter().any(PendingCall::needs_decision)))
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

    pub(super) fn set_plan(&mut self, index: usize, plan: Plan, edit: Option<Edit>) {
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
    pub(super) fn decide_for_sub_agent(&mut self, decision: &ApprovalDecision) -> Result<(), DecisionError> {
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
        if pending.is_empty()
            || unanswered.len() != pending.len()
            || unanswered.iter().zip(&ids).any(|(a, b)| **a != **b)
        {
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
        Ok(RunState::blank(
            run_id.into(),
            limits,
            transcript,
            Phase::AwaitingTools { plans, assistant_size, edits },
            held,
        ))
    }
}
