//! A batch waiting for decisions ([`Action::Approve`](crate::engine::state::Action)): the calls listed in
//! `approval_requested`, the waiting batch made durable, then the approver asked and its decisions applied;
//! without an approver (or when it fails) the run ends `awaiting_approval`.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

use super::run::Run;
use crate::approval::{ApprovalDecision, ApprovalRequest, Approver, PendingCall, Verdict};
use crate::engine::state::{Plan, RunState};
use crate::events::{ApprovalCall, ApprovalDecidedData, EventKind, panic_message};

impl Run<'_> {
    /// The batch waits for decisions about `calls`: they are announced, and the approver (a durable
    /// performer's, else the agent's) asked; what is still undecided afterwards ends the run
    /// `awaiting_approval`, saying what went wrong if anything did.
    pub(super) async fn approve(&mut self, state: &mut RunState, calls: Vec<PendingCall>) {
        if !self.not_interrupted(state) {
            return;
        }
        if self.emitter.active() {
            let listed = calls.iter().map(|c| self.approval_call(c)).collect();
            self.emitter.emit(EventKind::ApprovalRequested { step: state.steps(), calls: listed });
        }
        let agent = self.agent;
        let approver = self.performer.and_then(|p| p.approver()).or(agent.approver.as_deref());
        // The waiting batch is durable before anyone is asked: a run killed while it waits for the answer is
        // decided later like one that ended `awaiting_approval`.
        if let (Some(j), Some(_)) = (&self.journal, approver) {
            j.waiting(&state.pending_batch());
            if !self.flushed(state).await {
                return;
            }
        }
        let detail = match approver {
            None => None,
            Some(approver) => match self.ask(state, approver, calls).await {
                Some(detail) => detail,
                // The run was interrupted while it waited.
                None => return,
            },
        };
        if state.awaits_decision() {
            state.await_approval(detail);
        }
    }

    /// A waiting call as `approval_requested` lists it.
    fn approval_call(&self, c: &PendingCall) -> ApprovalCall {
        ApprovalCall {
            call_id: c.call_id.clone(),
            name: c.name.clone(),
            arguments_hash: c.arguments_hash.clone(),
            reason: match &c.plan {
                Plan::Ask { reason } => reason.clone(),
                _ => String::new(),
            },
            arguments: self.agent.include_content.then(|| c.arguments.clone()),
        }
    }

    /// Asks `approver` (racing the caller's cancellation and the deadline) and applies its decisions, each
    /// announced by `approval_decided`. `None`: the run was interrupted; else what went wrong, if anything.
    async fn ask(
        &mut self,
        state: &mut RunState,
        approver: &dyn Approver,
        calls: Vec<PendingCall>,
    ) -> Option<Option<String>> {
        let request = ApprovalRequest { run_id: state.run_id().to_owned(), session_id: self.session_id.clone(), calls };
        let asked = AssertUnwindSafe(approver.decide(&request, &self.run_cancel)).catch_unwind();
        let answer = tokio::select! {
            biased;
            i = self.waits.interruption() => Err(i),
            r = asked => Ok(r),
        };
        let decisions = match answer {
            Err(i) => {
                self.stop(state, i);
                return None;
            }
            Ok(Err(panic)) => return Some(Some(format!("the approver panicked: {}", panic_message(&panic)))),
            Ok(Ok(Err(e))) => return Some(Some(e.to_string())),
            Ok(Ok(Ok(decisions))) => decisions,
        };
        let mut problems = Vec::new();
        for d in decisions {
            match state.decide(&d, &self.registry) {
                Ok(()) => {
                    let name = request
                        .calls
                        .iter()
                        .find(|c| c.call_id == d.call_id)
                        .map(|c| c.name.clone())
                        .unwrap_or_default();
                    self.emitter.emit(decided_event(&d, name, self.agent.include_content));
                }
                Err(e) => problems.push(e.to_string()),
            }
        }
        Some((!problems.is_empty()).then(|| problems.join("; ")))
    }
}

/// The `approval_decided` event of an applied decision.
fn decided_event(d: &ApprovalDecision, name: String, include_content: bool) -> EventKind {
    EventKind::ApprovalDecided(Box::new(ApprovalDecidedData {
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
    }))
}
