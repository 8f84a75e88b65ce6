//! The hooks a run's calls meet: the `pre_tool` hooks over an admitted batch, the `stop` hooks over a final
//! answer (both right after the model response, before anything runs), and the `post_tool` hooks over each
//! result (before it is bounded and recorded). A hook that fails or panics denies (fail closed).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use super::Agent;
use crate::engine::state::{Admission, CallResult, Plan, PlannedCall, RunState};
use crate::events::{Emitter, EventKind, HookData, ms, panic_message};
use crate::hook::{Hook, HookContext, HookEvent, HookResult, PostTool, PreTool, StopAnswer};
use crate::policy::Policy;
use crate::registry::Registry;

/// The hooks a run's calls meet (its own, then its ancestors' for a sub-agent), what they are told about the
/// run, and the policy a hook's rewritten arguments are put to again.
pub(super) struct Hooked<'a> {
    pub(super) ctx: &'a HookContext,
    pub(super) hooks: &'a [Arc<dyn Hook>],
    /// How many of `hooks` are the run's own (only those judge its final answer).
    pub(super) own: usize,
    pub(super) policy: Option<&'a dyn Policy>,
}

impl Agent {
    /// After a model response: the `pre_tool` hooks over each call of an admitted batch that is not
    /// refused, or the `stop` hooks over a final answer. A hook that fails denies (fail closed).
    pub(super) async fn hooks_after_response(
        &self,
        admission: &Admission,
        state: &mut RunState,
        registry: &Registry,
        h: &Hooked<'_>,
        cancel: &CancellationToken,
        emitter: &mut Emitter,
    ) {
        match admission {
            Admission::Batch => self.pre_tool_hooks(state, registry, h, cancel, emitter).await,
            Admission::Completed => self.stop_hooks(state, h, cancel, emitter).await,
            Admission::Ended(_) | Admission::Reminded => {}
        }
    }

    /// The `pre_tool` hooks over each call of the admitted batch that is not refused, in order; each answer
    /// is announced by a `hook` event and applied to the call.
    async fn pre_tool_hooks(
        &self,
        state: &mut RunState,
        registry: &Registry,
        h: &Hooked<'_>,
        cancel: &CancellationToken,
        emitter: &mut Emitter,
    ) {
        let ctx = h.ctx;
        for index in 0..state.batch_len() {
            for hook in h.hooks {
                let Some(p) = state.batch_call(index) else { break };
                if matches!(p.plan, Plan::Reject { .. }) || !hook.applies(HookEvent::PreTool, Some(&p.call.name)) {
                    continue;
                }
                let call = p.call.clone();
                let t0 = Instant::now();
                let answer = AssertUnwindSafe(hook.pre_tool(ctx, &call, cancel)).catch_unwind().await;
                let (answer, error) = match answer {
                    Ok(Ok(a)) => (a, None),
                    Ok(Err(e)) => (PreTool::Deny(format!("the hook failed: {e}")), Some(e.0)),
                    Err(panic) => {
                        let m = format!("the hook panicked: {}", panic_message(&panic));
                        (PreTool::Deny(m.clone()), Some(m))
                    }
                };
                let (decision, reason) = match &answer {
                    PreTool::Allow => ("allow", None),
                    PreTool::Deny(r) => ("deny", Some(r.clone())),
                    PreTool::Ask(r) => ("ask", Some(r.clone())),
                    PreTool::Rewrite(_) => ("rewrite", None),
                };
                emitter.emit(EventKind::Hook(Box::new(HookData {
                    hook_event: HookEvent::PreTool.as_str().into(),
                    hook: hook.name().to_owned(),
                    call_id: Some(String::from(&*call.id)),
                    decision: decision.into(),
                    reason,
                    error,
                    duration_ms: ms(t0.elapsed()),
                })));
                state.apply_pre_tool(index, answer, hook.name(), registry, h.policy);
            }
        }
    }

    /// The run's own `stop` hooks over its final answer, in order, each announced by a `hook` event: one that
    /// refuses it sends the model its feedback (the run goes on), one that fails withholds it.
    async fn stop_hooks(
        &self,
        state: &mut RunState,
        h: &Hooked<'_>,
        cancel: &CancellationToken,
        emitter: &mut Emitter,
    ) {
        let ctx = h.ctx;
        let Some(answer) = state.outcome_answer() else { return };
        for hook in h.hooks.iter().take(h.own) {
            if !hook.applies(HookEvent::Stop, None) {
                continue;
            }
            let t0 = Instant::now();
            let said = AssertUnwindSafe(hook.stop(ctx, &answer, cancel)).catch_unwind().await;
            let said = match said {
                Ok(r) => r,
                Err(panic) => Err(crate::hook::HookError(format!("the hook panicked: {}", panic_message(&panic)))),
            };
            let (decision, reason, error) = match &said {
                Ok(StopAnswer::Accept) => ("accept", None, None),
                Ok(StopAnswer::Refuse(f)) => ("refuse", Some(f.clone()), None),
                Err(e) => ("refuse", None, Some(e.0.clone())),
            };
            emitter.emit(EventKind::Hook(Box::new(HookData {
                hook_event: HookEvent::Stop.as_str().into(),
                hook: hook.name().to_owned(),
                call_id: None,
                decision: decision.into(),
                reason,
                error,
                duration_ms: ms(t0.elapsed()),
            })));
            match said {
                Ok(StopAnswer::Accept) => {}
                Ok(StopAnswer::Refuse(feedback)) => {
                    if let Err(e) = state.refuse_answer(feedback, &self.context) {
                        state.withhold_answer(format!("stop hook {}: {e}", hook.name()));
                    }
                    return;
                }
                Err(e) => {
                    state.withhold_answer(format!(
                        "the final answer was not accepted: stop hook {} failed: {e}",
                        hook.name()
                    ));
                    return;
                }
            }
        }
    }

    /// The `post_tool` hooks over a call's result, before it is bounded and recorded. A hook that fails
    /// withholds the result (fail closed): the call is an error saying why.
    pub(super) async fn post_tool(
        &self,
        h: &Hooked<'_>,
        p: &PlannedCall<'_>,
        result: CallResult,
        cancel: &CancellationToken,
        events: &mut Vec<EventKind>,
    ) -> CallResult {
        if !matches!(p.plan, Plan::Run) {
            return result;
        }
        // A hook sees and changes the text only: a result it replaced or redacted loses its images. A sub-agent
        // run that waits for a decision stays with the call whatever the hooks say (the batch waits for it).
        let wait = result.wait;
        let mut images = result.images;
        let mut result = HookResult { content: result.content, is_error: result.is_error };
        let ctx = h.ctx;
        for hook in h.hooks {
            if !hook.applies(HookEvent::PostTool, Some(&p.call.name)) {
                continue;
            }
            let t0 = Instant::now();
            let said = AssertUnwindSafe(hook.post_tool(ctx, p.call, &result, cancel)).catch_unwind().await;
            let said = match said {
                Ok(r) => r,
                Err(panic) => Err(crate::hook::HookError(format!("the hook panicked: {}", panic_message(&panic)))),
            };
            let (decision, error) = match &said {
                Ok(PostTool::Keep) => ("keep", None),
                Ok(PostTool::Replace(_)) => ("replace", None),
                Ok(PostTool::Redact(_)) => ("redact", None),
                Err(e) => ("replace", Some(e.0.clone())),
            };
            events.push(EventKind::Hook(Box::new(HookData {
                hook_event: HookEvent::PostTool.as_str().into(),
                hook: hook.name().to_owned(),
                call_id: Some(String::from(&*p.call.id)),
                decision: decision.into(),
                reason: None,
                error,
                duration_ms: ms(t0.elapsed()),
            })));
            if !matches!(said, Ok(PostTool::Keep)) {
                images.clear();
            }
            result = match said {
                Ok(answer) => crate::hook::apply_post(result, answer),
                Err(e) => {
                    let mut withheld = CallResult::text(
                        format!("the result was withheld: post_tool hook {} failed: {e}", hook.name()),
                        true,
                    );
                    withheld.wait = wait;
                    return withheld;
                }
            };
        }
        CallResult { content: result.content, is_error: result.is_error, images, wait }
    }
}
