//! The journaled performer: each model call and each tool call of a run is one Restate `run` step, whose
//! recorded result stands in for it when the turn is replayed after a crash. A completed step is never
//! performed again; the step in flight when a worker died is (at least once), with the same idempotency key.

use futures_util::future::BoxFuture;
use reins::{CallResult, ModelError, ModelResponse, ModelStep, Performer, ToolStep};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// The most characters of one tool result that are journaled (a longer result is bounded — head, marker,
/// tail — before it is recorded, as the run would bound it anyway): keeps each journal entry well below
/// Restate's message size limit.
pub const MAX_JOURNALED_RESULT_CHARS: usize = 256 * 1024;

/// A tool result as it is journaled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournaledResult {
    /// The result text, bounded.
    pub content: String,
    /// True for an error result.
    pub is_error: bool,
    /// Images the tool returned (journaled with the result, so a replayed step has them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<reins::Image>,
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
        Journaled { ctx, cancel, session, max_result_chars, one_at_a_time: tokio::sync::Mutex::new(()) }
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
                    }))
                })
                .name(name)
                .await;
            match journaled {
                Ok(Json(r)) => CallResult { content: r.content, is_error: r.is_error, images: r.images },
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
