//! A model step ([`Action::CallModel`](crate::engine::state::Action)): the request sent, the response handed
//! to the state machine, its events and span, then the hooks over what it admitted; and a compaction
//! ([`Action::Compact`](crate::engine::state::Action)): the summary call and its record.

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::Either;
use tracing::Span;

use super::run::{Interrupt, Run};
use crate::engine::perform::{ModelStep, Performer};
use crate::engine::state::{Admission, Compaction, RunState};
use crate::events::{CompactionEndData, EventKind, ms, panic_message};
use crate::model::{ModelError, ModelRequest, ModelResponse};
use crate::outcome::Status;
use crate::spans;

/// A model call with its panic caught and reported as a failed call.
fn caught(
    call: impl Future<Output = Result<ModelResponse, ModelError>>,
) -> impl Future<Output = Result<ModelResponse, ModelError>> {
    AssertUnwindSafe(call).catch_unwind().map(|r| match r {
        Ok(r) => r,
        Err(panic) => Err(ModelError::Failed(format!("the model panicked: {}", panic_message(&panic)))),
    })
}

/// A model call as `performer` does it (awaited as it is without one).
fn perform_model<'a>(
    performer: Option<&'a dyn Performer>,
    step: ModelStep,
    work: impl Future<Output = Result<ModelResponse, ModelError>> + Send + 'a,
) -> impl Future<Output = Result<ModelResponse, ModelError>> + 'a {
    match performer {
        None => Either::Left(work),
        Some(p) => Either::Right(p.model_call(step, Box::pin(work))),
    }
}

/// A model call's answer, written into the driver's slot when it arrives instead of handed up through
/// each future around the call: a response is large, and each hand-up was a copy of it.
struct Answer<'s, 'a> {
    call: Pin<Box<dyn Future<Output = Result<ModelResponse, ModelError>> + Send + 'a>>,
    /// Whether a panic of the call is caught here and reported as a failed call (a call without a
    /// performer: a performer's work has its panic caught inside, see [`caught`]).
    catch: bool,
    slot: &'s mut Option<Result<ModelResponse, ModelError>>,
}

impl Future for Answer<'_, '_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Answer { call, catch, slot } = &mut *self;
        let mut poll = || match call.as_mut().poll(cx) {
            Poll::Ready(r) => {
                **slot = Some(r);
                true
            }
            Poll::Pending => false,
        };
        let ready = match *catch {
            false => poll(),
            true => match std::panic::catch_unwind(AssertUnwindSafe(poll)) {
                Ok(ready) => ready,
                Err(panic) => {
                    let failed = ModelError::Failed(format!("the model panicked: {}", panic_message(&panic)));
                    **slot = Some(Err(failed));
                    true
                }
            },
        };
        if ready { Poll::Ready(()) } else { Poll::Pending }
    }
}

/// When a model call began and ended.
#[derive(Clone, Copy)]
struct Timed {
    t0: Instant,
    elapsed: Duration,
    t1: Instant,
}

impl Run<'_> {
    /// A model step: unless the run was interrupted or its log cannot be made durable, the model is called
    /// (racing the caller's cancellation and the deadline), its response admitted, and the hooks run over
    /// what it admitted — the `pre_tool` hooks over a batch, the `stop` hooks over a final answer.
    pub(super) async fn call_model(&mut self, state: &mut RunState, request: &mut ModelRequest) {
        request.cache_key = Some(self.cache_key.clone());
        // Unless the run was interrupted or its log cannot be made durable.
        if !self.not_interrupted(state) || (self.journal.is_some() && !self.flushed(state).await) {
            return;
        }
        let step = state.steps() + 1;
        // The clock is read for the step's events only (see `Emitter::now`).
        let t0 = self.emitter.now();
        self.emitter.model_start(step, request.messages.len(), t0);
        let chat = spans::chat_span(self.info, step, self.span_session());
        if self.span_content {
            spans::chat_request(&chat, request);
        }
        let generate = spans::boxed_within(&chat, self.agent.model.generate(request, &self.run_cancel));
        let (call, catch) = match self.performer {
            None => (generate, true),
            Some(p) => (p.model_call(ModelStep { step, summary: false }, Box::pin(caught(generate))), false),
        };
        // The response stays where it lands: it is read in place and its parts moved out.
        let mut answer = None;
        let result = self.waits.guard(Answer { call, catch, slot: &mut answer }).await;
        // The transcript is no longer shared with the request: recording the response copies nothing.
        drop(std::mem::take(&mut request.messages));
        let response = match (result, answer.as_mut()) {
            (Ok(()), Some(r)) if !self.cancelled() => r,
            // A response that arrives once the caller cancelled is not counted.
            (other, _) => {
                let i = other.err().unwrap_or(Interrupt::Cancelled);
                spans::fail(&chat, i.status().as_str(), &i.reason(&self.limits));
                self.stop(state, i);
                return;
            }
        };
        let timed = match self.emitter.active() {
            true => {
                let t1 = Instant::now();
                Timed { t0, elapsed: t1.saturating_duration_since(t0), t1 }
            }
            // Nobody hears the step's events: no clock is read.
            false => Timed { t0, elapsed: Duration::ZERO, t1: t0 },
        };
        let admission = self.admit(state, step, &chat, response);
        drop(chat);
        self.report_response(state, step, &admission, timed);
        if self.rules.any() && matches!(admission.1, Admission::Batch | Admission::Completed) {
            self.hooks_after(state, &admission.1).await;
        }
    }

    /// The response logged, shown on its span, and handed to the state machine (`model_end` staged), which
    /// takes its parts out of it.
    #[inline]
    fn admit(
        &mut self,
        state: &mut RunState,
        step: u64,
        chat: &Span,
        response: &mut Result<ModelResponse, ModelError>,
    ) -> (bool, Admission) {
        if let Some(j) = &self.journal {
            j.response(step, response.as_ref());
        }
        // A step another model answered (a fallback) is priced at that model's price.
        let answered_by = response.as_ref().ok().and_then(|r| r.answered_by.as_ref());
        let price = answered_by.map_or(state.price(), |by| by.price.as_ref()).copied();
        spans::chat_response(chat, response.as_ref(), self.span_content, price.as_ref());
        let answered = response.is_ok();
        if let Ok(r) = &response {
            self.emitter.stage_model_end(step, r, state.price());
        }
        let policy = self.rules.policy.as_deref();
        let admission = state.take_model_response(response, &self.registry, policy, &self.agent.context);
        if answered && !chat.is_disabled() && matches!(admission, Admission::Ended(Status::ModelError)) {
            let error = state.outcome().error.unwrap_or_default();
            spans::fail(chat, "invalid_response", &error);
        }
        (answered, admission)
    }

    /// The step's events: `model_end` (or `model_error` for a failed or refused response), and `limit_hit`
    /// when the response ended the run at a limit.
    #[inline]
    fn report_response(&mut self, state: &RunState, step: u64, (answered, admission): &(bool, Admission), at: Timed) {
        if !self.emitter.active() {
            return;
        }
        if *answered && !matches!(admission, Admission::Ended(Status::ModelError)) {
            self.emitter.send_model_end(at.t0, at.elapsed, at.t1);
        } else {
            let error = state.outcome().error.unwrap_or_default();
            let kind = EventKind::ModelError { step, duration_ms: ms(at.elapsed), error };
            self.emitter.emit_after(kind, at.t0, at.elapsed, at.t1);
        }
        if let Admission::Ended(status) = admission {
            if !matches!(status, Status::ModelError | Status::Aborted) {
                let detail = state.outcome().error.unwrap_or_default();
                self.emitter.emit(EventKind::LimitHit { status: *status, detail });
            }
        }
    }

    /// The hooks over an admitted batch or a final answer, racing the caller's cancellation and the deadline.
    async fn hooks_after(&mut self, state: &mut RunState, admission: &Admission) {
        let Some(h) = self.rules.hooked(self.agent) else { return };
        let hooks =
            self.agent.hooks_after_response(admission, state, &self.registry, &h, &self.run_cancel, &mut self.emitter);
        let interrupted = tokio::select! {
            biased;
            i = self.waits.interruption() => Some(i),
            () = hooks => None,
        };
        if let Some(i) = interrupted {
            self.stop(state, i);
        }
    }

    /// A compaction (under `summarize`): unless the run was interrupted or its log cannot be made durable,
    /// the summary is asked for (by the compaction model, under the summary timeout) and recorded, with
    /// `compaction_start` and `compaction_end` around it.
    pub(super) async fn compact(&mut self, state: &mut RunState, request: ModelRequest, plan: Compaction) {
        // Unless the run was interrupted or its log cannot be made durable.
        if !self.not_interrupted(state) || (self.journal.is_some() && !self.flushed(state).await) {
            return;
        }
        let step = state.steps();
        self.emitter.emit(EventKind::CompactionStart { step, items: plan.items, chars_before: plan.chars_before });
        let agent = self.agent;
        let model = agent.compact_model.as_ref().unwrap_or(&agent.model);
        let compaction = spans::compaction_span(step, plan.items, plan.chars_before);
        let chat = match compaction.is_disabled() {
            true => Span::none(),
            false => compaction.in_scope(|| {
                let info = agent.compact_model.as_ref().map_or_else(|| self.info.clone(), |m| m.identity());
                spans::chat_span(&info, step, self.span_session())
            }),
        };
        if self.span_content {
            spans::chat_request(&chat, &request);
        }
        let t0 = Instant::now();
        let generate = model.generate(&request, &self.run_cancel);
        let generate = spans::boxed_within(&compaction, spans::boxed_within(&chat, generate));
        let call = perform_model(self.performer, ModelStep { step, summary: true }, caught(generate));
        let limit = agent.context.summary_timeout;
        let timeout = async move {
            match limit {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let result = tokio::select! {
            biased;
            i = self.waits.interruption() => Err(i),
            () = timeout => Ok(Err(ModelError::Failed(format!(
                "the summary call timed out after {}",
                limit.map_or_else(String::new, |d| humantime::format_duration(d).to_string())
            )))),
            r = call => Ok(r),
        };
        drop(request);
        let response = match result {
            Ok(_) if self.cancelled() => {
                spans::fail(&chat, "aborted", "the run was cancelled");
                self.stop(state, Interrupt::Cancelled);
                return;
            }
            Err(i) => {
                spans::fail(&chat, i.status().as_str(), &i.reason(&self.limits));
                self.stop(state, i);
                return;
            }
            Ok(r) => r,
        };
        self.record_compaction(state, step, response, t0.elapsed(), (compaction, chat));
    }

    /// The summary call's answer recorded as the compaction (see [`RunState::on_compaction_response`]),
    /// with its span and `compaction_end`; `limit_hit` when its usage passed a token limit.
    fn record_compaction(
        &mut self,
        state: &mut RunState,
        step: u64,
        response: Result<ModelResponse, ModelError>,
        elapsed: Duration,
        (compaction, chat): (Span, Span),
    ) {
        let usage = response.as_ref().ok().and_then(|r| r.usage);
        // A summary another model of a fallback wrote is priced at that model's price.
        let answered_by = response.as_ref().ok().and_then(|r| r.answered_by.as_deref());
        let model = answered_by.map(|by| by.model.clone());
        let price = match answered_by {
            Some(by) => by.price,
            None => self.agent.compact_model.as_ref().map_or_else(|| state.price().copied(), |m| m.price()),
        };
        let cost_usd = usage.zip(price).map(|(u, p)| p.cost(&u));
        if !chat.is_disabled() {
            spans::chat_response(&chat, response.as_ref(), self.span_content, price.as_ref());
        }
        drop(chat);
        let done = state.on_compaction_response(response, &self.agent.context);
        if let Some(done) = &done {
            spans::compaction_done(&compaction, done.chars_after, done.fallback.as_deref());
        }
        drop(compaction);
        if let Some(done) = done {
            self.emitter.emit(EventKind::CompactionEnd(Box::new(CompactionEndData {
                step,
                items: done.items,
                chars_before: done.chars_before,
                chars_after: done.chars_after,
                duration_ms: ms(elapsed),
                usage,
                cost_usd,
                fallback: done.fallback,
                model,
            })));
        }
        if let Some(Status::TokenLimit) = state.status() {
            let detail = state.outcome().error.unwrap_or_default();
            self.emitter.emit(EventKind::LimitHit { status: Status::TokenLimit, detail });
        }
    }
}
