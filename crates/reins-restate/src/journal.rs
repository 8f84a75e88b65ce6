//! The journaled performer: each model call and each tool call of a run is one Restate `run` step, whose
//! recorded result stands in for it when the turn is replayed after a crash. A completed step is never
//! performed again; the step in flight when a worker died is (at least once), with the same idempotency key.
//! With approvals on, the performer is also how the run waits for decisions: on a Restate awakeable.

use futures_util::future::BoxFuture;
use reins::{
    Agent, ApprovalDecision, ApprovalError, ApprovalRequest, Approver, CallResult, ModelError, ModelResponse,
    ModelStep, PendingCall, Performer, ToolStep,
};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::{Awaiting, STATE_APPROVAL};

/// The most characters of one tool result that are journaled (a longer result is bounded — head, marker,
/// tail — before it is recorded, as the run would bound it anyway): keeps each journal entry well below
/// Restate's message size limit.
pub const MAX_JOURNALED_RESULT_CHARS: usize = 256 * 1024;

/// A tool result as it is journaled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JournaledResult {
    /// The result text, bounded.
    pub content: String,
    /// True for an error result.
    pub is_error: bool,
    /// Images the tool returned (journaled with the result, so a replayed step has them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<reins::Image>,
    /// A sub-agent run the call left waiting for a decision (journaled with the result, so a replayed batch
    /// waits for it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<Box<reins::AgentWait>>,
}

/// Performs the steps of a turn as journaled Restate steps of `ctx`.
pub struct Journaled<'a> {
    ctx: &'a ObjectContext<'a>,
    cancel: CancellationToken,
    session: String,
    max_result_chars: usize,
    /// One journaled step at a time: the SDK (0.13) does not run `ctx.run` steps concurrently well (a second
    /// one waits for the invocation to be retried), so the parallel-safe calls of a batch are journaled one
    /// after the other in a durable run.
    one_at_a_time: tokio::sync::Mutex<()>,
    /// With approvals: the agent whose tools the decisions' edits are checked against.
    approvals: Option<&'a Agent>,
}

impl<'a> Journaled<'a> {
    /// A performer journaling in `ctx`; a cancellation of the invocation fires `cancel` (the run's), so the
    /// run ends `aborted` through the one driver. Tool results are bounded to `max_result_chars` (the run's
    /// `max_tool_result_chars`) and at most [`MAX_JOURNALED_RESULT_CHARS`] before they are journaled.
    pub fn new(
        ctx: &'a ObjectContext<'a>,
        cancel: CancellationToken,
        session: String,
        max_result_chars: Option<usize>,
    ) -> Self {
        let max_result_chars =
            max_result_chars.map_or(MAX_JOURNALED_RESULT_CHARS, |m| m.min(MAX_JOURNALED_RESULT_CHARS));
        Journaled {
            ctx,
            cancel,
            session,
            max_result_chars,
            one_at_a_time: tokio::sync::Mutex::new(()),
            approvals: None,
        }
    }

    /// Makes the run wait for decisions on Restate awakeables (it becomes the run's `Approver`); edited arguments
    /// are checked against the tools `agent` has then (MCP servers' included) before an answer is taken.
    pub fn with_approvals(mut self, agent: &'a Agent) -> Self {
        self.approvals = Some(agent);
        self
    }

    /// Records that the turn waits (the calls and the awakeable, in the session's state) and waits for the
    /// awakeable: the invocation suspends, holding no worker, until it is resolved with a JSON array of
    /// decisions. The answer is checked as the run applies it ([`reins::check_decisions`]); one that does not
    /// apply, or that decides only some calls, makes the turn ask again (a new awakeable) about the calls
    /// still undecided, recording why. All of it is journaled: a worker that replays the turn finds the
    /// same awakeable and its answer, and asks nothing again.
    async fn wait_for_decisions(
        &self,
        request: &ApprovalRequest,
        agent: &Agent,
    ) -> Result<Vec<ApprovalDecision>, ApprovalError> {
        let mut waiting: Vec<PendingCall> = request.calls.iter().filter(|c| c.needs_decision()).cloned().collect();
        let mut decided = Vec::new();
        let mut problem = None;
        while !waiting.is_empty() {
            let (awakeable, answer) = self.ctx.awakeable::<Vec<u8>>();
            let asked = ApprovalRequest { calls: waiting.clone(), ..request.clone() };
            self.ctx.set(STATE_APPROVAL, Json(Awaiting { awakeable, request: asked, problem: problem.take() }));
            let bytes = match answer.await {
                Ok(b) => b,
                Err(e) if e.code() == 409 => {
                    // The invocation was cancelled (`reins cancel`): the run ends `aborted` in the driver,
                    // which sees the run's token fire while this answer never comes.
                    self.cancel.cancel();
                    return std::future::pending().await;
                }
                Err(e) => return Err(ApprovalError(format!("the approval was rejected: {}", e.message()))),
            };
            let decisions: Vec<ApprovalDecision> = match serde_json::from_slice(&bytes) {
                Ok(d) => d,
                Err(e) => {
                    problem = Some(format!("the answer is not a JSON array of decisions: {e}"));
                    continue;
                }
            };
            if decisions.is_empty() {
                problem = Some("the answer decided no call".into());
                continue;
            }
            if let Err(e) = reins::check_decisions(&waiting, &decisions, &*agent.current_registry().await) {
                problem = Some(e.to_string());
                continue;
            }
            waiting.retain(|c| !decisions.iter().any(|d| d.call_id == c.call_id));
            decided.extend(decisions);
        }
        self.ctx.clear(STATE_APPROVAL);
        Ok(decided)
    }
}

#[async_trait::async_trait]
impl Approver for Journaled<'_> {
    async fn decide(
        &self,
        request: &ApprovalRequest,
        _: &CancellationToken,
    ) -> Result<Vec<ApprovalDecision>, ApprovalError> {
        match self.approvals {
            Some(agent) => self.wait_for_decisions(request, agent).await,
            None => Ok(Vec::new()),
        }
    }
}

/// Bounds a result before it is journaled (the same cut the run makes when it records it).
pub fn bound_for_journal(content: String, max_chars: usize) -> String {
    if content.len() > max_chars { reins::bound_text(&content, max_chars) } else { content }
}

impl Performer for Journaled<'_> {
    fn model_call<'a>(
        &'a self,
        step: ModelStep,
        work: BoxFuture<'a, Result<ModelResponse, ModelError>>,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        let name = if step.summary {
            format!("summary after step {}", step.step)
        } else {
            format!("model step {}", step.step)
        };
        // The context's lifetime is shortened to this call's (it is covariant), so that the step may borrow
        // what the driver lends it.
        let ctx: &'a ObjectContext<'a> = self.ctx;
        Box::pin(async move {
            let _turn = self.one_at_a_time.lock().await;
            let journaled = ctx.run(move || async move { Ok(Json(work.await)) }).name(name).await;
            match journaled {
                Ok(Json(result)) => result,
                Err(e) => {
                    // The invocation was cancelled (`reins cancel`): the run ends `aborted` in the driver.
                    self.cancel.cancel();
                    Err(ModelError::Failed(format!("the durable step ended: {e}")))
                }
            }
        })
    }

    fn tool_call<'a>(&'a self, call: ToolStep<'a>, work: BoxFuture<'a, CallResult>) -> BoxFuture<'a, CallResult> {
        let name = format!("tool step {} call {}", call.step, call.call.id);
        let max = self.max_result_chars;
        let ctx: &'a ObjectContext<'a> = self.ctx;
        Box::pin(async move {
            let _turn = self.one_at_a_time.lock().await;
            let journaled = ctx
                .run(move || async move {
                    let r = work.await;
                    Ok(Json(JournaledResult {
                        content: bound_for_journal(r.content, max),
                        is_error: r.is_error,
                        images: r.images,
                        wait: r.wait,
                    }))
                })
                .name(name)
                .await;
            match journaled {
                Ok(Json(r)) => CallResult { content: r.content, is_error: r.is_error, images: r.images, wait: r.wait },
                Err(e) => {
                    self.cancel.cancel();
                    CallResult::text(format!("aborted: {e}"), true)
                }
            }
        })
    }

    fn session_id(&self) -> Option<&str> {
        Some(&self.session)
    }

    fn approver(&self) -> Option<&dyn Approver> {
        self.approvals.is_some().then_some(self as &dyn Approver)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_bounded_before_they_are_journaled() {
        let big = "x".repeat(MAX_JOURNALED_RESULT_CHARS * 2);
        let bounded = bound_for_journal(big, MAX_JOURNALED_RESULT_CHARS);
        assert!(bounded.chars().count() <= MAX_JOURNALED_RESULT_CHARS);
        assert_eq!(bound_for_journal("short".into(), 10), "short");
        // The run bounds it again when it records it: a bounded text is kept as it is.
        let once = bound_for_journal("y".repeat(100), 40);
        assert_eq!(bound_for_journal(once.clone(), 40), once);
    }
}
