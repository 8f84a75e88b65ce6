//! A batch of tool calls ([`Action::RunTools`](crate::engine::state::Action)): made durable, run (refused
//! calls answer at once, runs of parallel-safe calls together, the rest one by one, each under its
//! `execute_tool` span, timeout and hooks) racing the caller's cancellation and the deadline, then its
//! results recorded — or held, while a sub-agent of it waits for decisions.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::join_all;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Agent;
use super::hooks::Hooked;
use super::run::{Interrupt, Run};
use crate::engine::perform::{Performer, ToolStep};
use crate::engine::state::{AgentWait, Batch, CallResult, Plan, PlannedCall, RunState};
use crate::events::{Emitter, EventKind, panic_message};
use crate::journal::JournalError;
use crate::outcome::{AgentTotals, Status};
use crate::registry::Registry;
use crate::spans;
use crate::subagent::{Left, RunScope};
use crate::tool::{ToolContext, ToolError};

/// What every call of a batch runs with: the tools on offer, the run's token, its performer and hooks, and where
/// the batch stands in the run (what a call's idempotency key is made of).
#[derive(Clone, Copy)]
struct CallEnv<'a> {
    registry: &'a Registry,
    run_cancel: &'a CancellationToken,
    performer: Option<&'a dyn Performer>,
    hooked: Option<&'a Hooked<'a>>,
    step: u64,
    key_prefix: &'a Arc<str>,
    /// Whether the calls' spans carry content.
    span_content: bool,
}

/// The progress of one call of a batch.
#[derive(Clone, Default)]
pub(super) struct Slot {
    started: bool,
    reported: bool,
    /// When the call began running: a call the batch's interruption cut short ran until then.
    began: Option<Instant>,
    /// When it ended (read once: it dates the call's `tool_end` and gives its duration).
    ended: Option<Instant>,
    result: Option<CallResult>,
    /// The `hook` events of its `post_tool` hooks, sent after its `tool_end`.
    hook_events: Vec<EventKind>,
}

impl Slot {
    /// The slot as [`Slot::default`] makes it, its storage for hook events kept.
    fn reset(&mut self) {
        (self.started, self.reported, self.began, self.ended, self.result) = (false, false, None, None, None);
        self.hook_events.clear();
    }

    /// Records the call's result, and when it ended (now; only when it is `timed`, for its events).
    #[inline]
    fn finish(&mut self, result: CallResult, timed: bool) {
        self.ended = timed.then(Instant::now);
        self.result = Some(result);
    }

    /// How long the call ran (zero for one that did not run or did not end).
    fn elapsed(&self) -> Duration {
        match (self.began, self.ended) {
            (Some(b), Some(e)) => e.saturating_duration_since(b),
            _ => Duration::ZERO,
        }
    }
}

/// The calls of a batch with their plans, borrowed from the state: a lone call (the common batch) is held
/// inline, so running it allocates no list.
enum Planned<'a> {
    One(PlannedCall<'a>),
    Many(Vec<PlannedCall<'a>>),
}

impl<'a> Planned<'a> {
    fn of(batch: &Batch<'a>) -> Self {
        match (batch.len(), batch.get(0)) {
            (1, Some(call)) => Planned::One(call),
            _ => Planned::Many(batch.iter().collect()),
        }
    }
}

impl<'a> std::ops::Deref for Planned<'a> {
    type Target = [PlannedCall<'a>];

    fn deref(&self) -> &[PlannedCall<'a>] {
        match self {
            Planned::One(call) => std::slice::from_ref(call),
            Planned::Many(calls) => calls,
        }
    }
}

/// What a batch gave, to be recorded in the state (the calls' results are in the run's slots).
pub(super) struct Ran {
    /// The sub-agent runs of the batch that stopped for a decision.
    waits: Vec<AgentWait>,
    /// How the run ends when the batch was interrupted.
    end: Option<(Status, String)>,
    /// The result of a call that did not finish.
    unfinished: Cow<'static, str>,
    /// What its sub-agents spent, by name (with sub-agents in the registry).
    spent: Option<BTreeMap<String, AgentTotals>>,
}

impl Run<'_> {
    /// Runs the admitted batch (after making its calls durable when one of them runs) inside its sub-agents'
    /// scope, if any, until it is done or the run is interrupted: its calls' events are sent, also for calls an
    /// interruption cut short, and what they gave is handed back (their results in the run's slots). `Err`: the
    /// log could not be made durable, and nothing ran.
    pub(super) async fn run_tools(
        &mut self,
        admitted: Batch<'_>,
        step: u64,
        left: Option<Left>,
    ) -> Result<Ran, JournalError> {
        // Borrowed from the state (not copied) until the results are recorded.
        let batch = Planned::of(&admitted);
        // The proposed calls are durable before any of them runs: after a crash mid-batch a resume sees them
        // without results, and no side effect is silently repeated. A batch whose calls are all refused runs
        // nothing and needs no such wait.
        if let Some(j) = self.journal.as_ref().filter(|_| batch.iter().any(|p| matches!(p.plan, Plan::Run))) {
            j.flush().await?;
        }
        // The slots' storage is the run's, kept from one batch to the next.
        let mut slots = std::mem::take(&mut self.slots);
        fill_slots(&mut slots, &admitted, batch.len());
        // Sub-agent calls get the run's budget left and report what they spend (see `subagent`).
        let scope = left.map(|left| self.scope(left, &batch, admitted.agent_waits()));
        let hooked = self.rules.hooked(self.agent);
        let env = CallEnv {
            registry: &self.registry,
            run_cancel: &self.run_cancel,
            performer: self.performer,
            hooked: hooked.as_ref(),
            step,
            key_prefix: &self.key_prefix,
            span_content: self.span_content,
        };
        let interrupted = {
            // Polled where it lies, never moved into another future: a batch's future is large.
            let work = std::pin::pin!(self.agent.run_batch(env, &batch, &mut slots, &mut self.emitter));
            match &scope {
                Some(scope) => self.waits.guard(std::pin::pin!(Arc::clone(scope).enter(work))).await,
                None => self.waits.guard(work).await,
            }
            .err()
        };
        let (end, unfinished) = self.batch_ended(interrupted, &batch, &slots);
        let spent = scope.map(|scope| scope.take_spent());
        // Only a sub-agent's call gives a waiting run (a durable performer may replay one): without either,
        // no result holds one.
        let waits = match self.registry.has_sub_agents() || self.performer.is_some() {
            true => waits_of(&mut slots),
            false => Vec::new(),
        };
        self.slots = slots;
        Ok(Ran { waits, end, unfinished, spent })
    }

    /// How the batch ended: interrupted (now or while it ran), the run ends with a status and why; calls that
    /// did not report yet do now (their result, when they did not finish: `unfinished`, also returned).
    fn batch_ended(
        &mut self,
        interrupted: Option<Interrupt>,
        batch: &[PlannedCall<'_>],
        slots: &[Slot],
    ) -> (Option<(Status, String)>, Cow<'static, str>) {
        let end = interrupted.or_else(|| self.interrupted_settled()).map(|i| {
            self.run_cancel.cancel();
            (i.status(), i.reason(&self.limits))
        });
        let unfinished = match &end {
            Some((_, reason)) => Cow::Owned(format!("aborted: {reason}")),
            None => Cow::Borrowed("aborted: the call did not finish"),
        };
        report_unfinished(&mut self.emitter, batch, slots, &unfinished);
        if let Some((Status::Timeout, reason)) = &end {
            self.emitter.emit(EventKind::LimitHit { status: Status::Timeout, detail: reason.clone() });
        }
        (end, unfinished)
    }

    /// What the sub-agent calls of a batch run under: the run's budget left, its observers, log, deadline
    /// and rules.
    fn scope(&self, left: Left, batch: &[PlannedCall<'_>], resumes: &[AgentWait]) -> Arc<RunScope> {
        Arc::new(
            RunScope::new(
                Arc::clone(self.emitter.run_id()),
                left,
                batch,
                &self.registry,
                self.sub_agent_observers.clone().unwrap_or_default(),
                self.on_observer_error.clone(),
                self.include_content,
                self.journal.clone(),
                self.waits.deadline.map(tokio::time::Instant::into_std),
                self.rules.sub_agents.clone().unwrap_or_default(),
            )
            .with_trace_content(self.span_content)
            .with_resumes(resumes.to_vec()),
        )
    }

    /// Records what the batch gave (or holds the batch while a sub-agent of it waits for decisions), and
    /// rolls its sub-agents' spending into the run.
    #[inline]
    pub(super) fn record_tools(&mut self, state: &mut RunState, ran: Result<Ran, JournalError>) {
        let ran = match ran {
            Ok(ran) => ran,
            Err(e) => return self.log_failed(state, &e),
        };
        if let Some(spent) = ran.spent {
            for (name, spent) in spent {
                state.add_agent_spend(&name, &spent);
            }
        }
        let results = self.slots.iter_mut().map(|s| s.result.take());
        if ran.waits.is_empty() || ran.end.is_some() {
            state.record_results(results, &ran.unfinished, ran.end, &self.agent.context);
        } else {
            // A sub-agent waits for decisions: so does the batch (see `RunState::hold_batch`).
            state.hold_batch(results.collect(), ran.waits);
        }
    }

    /// Between steps: the tools of a tool source may have changed (the next model turn sees the new ones).
    pub(super) async fn refresh_tools(&mut self) {
        let (Some(source), false) = (&self.agent.tool_source, self.run_cancel.is_cancelled()) else { return };
        for kind in source.take_events() {
            self.emitter.emit(kind);
        }
        let base = source.registry().await;
        let next = Agent::step_registry(Arc::clone(&base), self.output).unwrap_or(base);
        if let Some(change) = tools_changed(&self.registry, &next) {
            self.emitter.emit(change);
        }
        self.registry = next;
    }
}

/// The event of a tool set that changed between steps (names added, removed, or with a new description or
/// schema), or `None` when `next` offers the same tools as `old`.
fn tools_changed(old: &Arc<Registry>, next: &Arc<Registry>) -> Option<EventKind> {
    if Arc::ptr_eq(old, next) {
        return None;
    }
    let (old, next) = (old.specs(), next.specs());
    fn find<'a>(specs: &'a [crate::tool::ToolSpec], name: &str) -> Option<&'a crate::tool::ToolSpec> {
        specs.iter().find(|s| s.name == name)
    }
    let added: Vec<String> = next.iter().filter(|s| find(old, &s.name).is_none()).map(|s| s.name.clone()).collect();
    let removed: Vec<String> = old.iter().filter(|s| find(next, &s.name).is_none()).map(|s| s.name.clone()).collect();
    let changed: Vec<String> =
        next.iter().filter(|s| find(old, &s.name).is_some_and(|o| o != *s)).map(|s| s.name.clone()).collect();
    if added.is_empty() && removed.is_empty() && changed.is_empty() {
        return None;
    }
    Some(EventKind::ToolsChanged { added, removed, changed })
}

/// A slot for each of the batch's `n` calls (in `slots`, emptied first); calls that ran before a sub-agent of the
/// batch stopped it for a decision keep their results and do not run again.
fn fill_slots(slots: &mut Vec<Slot>, admitted: &Batch<'_>, n: usize) {
    slots.truncate(n);
    for slot in slots.iter_mut() {
        slot.reset();
    }
    if slots.len() < n {
        slots.resize_with(n, Slot::default);
    }
    if admitted.has_held() {
        for (i, slot) in slots.iter_mut().enumerate() {
            if let Some(r) = admitted.held_result(i) {
                (slot.result, slot.started, slot.reported) = (Some(r), true, true);
            }
        }
    }
}

/// The sub-agent runs that stopped for a decision, taken from the results they come with (also when a durable
/// performer replays them).
fn waits_of(slots: &mut [Slot]) -> Vec<AgentWait> {
    let mut waits = Vec::new();
    for r in slots.iter_mut().filter_map(|s| s.result.as_mut()) {
        if let Some(w) = r.wait.take() {
            waits.push(*w);
        }
    }
    waits
}

/// Calls whose events were not sent yet (the batch was interrupted) get them now.
#[inline]
fn report_unfinished(emitter: &mut Emitter, batch: &[PlannedCall<'_>], slots: &[Slot], unfinished: &str) {
    for (p, slot) in batch.iter().zip(slots) {
        if slot.reported {
            continue;
        }
        let now = Instant::now();
        if !slot.started {
            emitter.tool_start(p.call, now);
        }
        let (content, is_error, elapsed) = match &slot.result {
            Some(r) => (r.content.as_str(), r.is_error, slot.elapsed()),
            // Cut short: it ran from its start until now.
            None => (unfinished, true, slot.began.map_or(Duration::ZERO, |t| now.saturating_duration_since(t))),
        };
        emitter.tool_end(p.call, is_error, || (elapsed, None, now), || content.to_owned());
    }
}

impl Agent {
    /// Runs a batch: rejected calls answer at once; runs of consecutive parallel-safe calls run
    /// concurrently; the rest one by one. Each result lands in its call's slot as soon as it is known.
    async fn run_batch(&self, env: CallEnv<'_>, batch: &[PlannedCall<'_>], slots: &mut [Slot], emitter: &mut Emitter) {
        let registry = env.registry;
        let parallel = |p: &PlannedCall<'_>| {
            matches!(p.plan, Plan::Run) && registry.get(&p.call.name).is_some_and(|t| t.parallel_safe())
        };
        let mut i = 0;
        while i < batch.len() {
            let mut j = i + 1;
            // A call with none after it runs alone whatever it is (no lookup needed to say so).
            if j < batch.len() && parallel(&batch[i]) {
                while j < batch.len() && parallel(&batch[j]) {
                    j += 1;
                }
            }
            // Once a sub-agent of the batch waits for a decision, the calls after it wait too (they run when the
            // batch runs again); calls that already ran (their slots reported) do not run again.
            if registry.has_sub_agents()
                && slots[..i].iter().any(|s| s.result.as_ref().is_some_and(|r| r.wait.is_some()))
            {
                return;
            }
            // The clock is read for the calls' events only (see `Emitter::now`).
            let (t0, timed) = (emitter.now(), emitter.active());
            for (p, slot) in batch[i..j].iter().zip(slots[i..j].iter_mut()).filter(|(_, s)| !s.reported) {
                // Events are built only when someone listens.
                emitter.tool_start(p.call, t0);
                slot.started = true;
            }
            if j == i + 1 {
                // One call at a time (the common case): no join machinery.
                let (p, slot) = (&batch[i], &mut slots[i]);
                if slot.reported {
                    i = j;
                    continue;
                }
                slot.began = Some(t0);
                let result = self.run_call_traced(env, p, &mut slot.hook_events).await;
                slot.finish(result, timed);
            } else {
                let todo = batch[i..j].iter().zip(slots[i..j].iter_mut()).filter(|(_, s)| !s.reported);
                join_all(todo.map(|(p, slot)| async move {
                    slot.began = Some(if timed { Instant::now() } else { t0 });
                    let result = self.run_call_traced(env, p, &mut slot.hook_events).await;
                    slot.finish(result, timed);
                }))
                .await;
            }
            report_ended(emitter, &batch[i..j], &mut slots[i..j], t0);
            i = j;
        }
    }

    /// [`Agent::run_call`] inside the call's `execute_tool` span (a child of the run's).
    async fn run_call_traced(
        &self,
        env: CallEnv<'_>,
        p: &PlannedCall<'_>,
        hook_events: &mut Vec<EventKind>,
    ) -> CallResult {
        if !spans::on() {
            return self.run_call(env, p, hook_events).await;
        }
        // Boxed: the untraced call's future does not grow by the span's state.
        Box::pin(self.run_call_in_span(env, p, hook_events)).await
    }

    async fn run_call_in_span(
        &self,
        env: CallEnv<'_>,
        p: &PlannedCall<'_>,
        hook_events: &mut Vec<EventKind>,
    ) -> CallResult {
        let span = spans::tool_span(p.call, env.span_content);
        let unfinished = spans::Unfinished::new(&span);
        let call = self.run_call(env, p, hook_events);
        let result = call.instrument(span.clone()).await;
        unfinished.finished();
        let error_type = match (p.plan, env.registry.get(&p.call.name)) {
            (Plan::Reject { .. }, _) => "rejected",
            (Plan::Ask { .. }, _) => "undecided",
            (Plan::Run, None) => "unknown_tool",
            (Plan::Run, Some(_)) => "tool_error",
        };
        spans::tool_result(&span, result.is_error, &result.content, error_type, env.span_content);
        result
    }

    /// One call of a batch: refused ones answer at once; a call that runs is performed (by the performer,
    /// if any) together with its `post_tool` hooks, so what a durable performer records is the result after
    /// them (a redacted secret is never journaled).
    async fn run_call(&self, env: CallEnv<'_>, p: &PlannedCall<'_>, hook_events: &mut Vec<EventKind>) -> CallResult {
        let tool = match (&p.plan, env.registry.get(&p.call.name)) {
            (Plan::Reject { message }, _) => return CallResult::text(message.clone(), true),
            (Plan::Ask { .. }, _) => {
                return CallResult::text("not run: the call needed a decision", true);
            }
            (Plan::Run, None) => {
                return CallResult::text(format!("unknown tool {:?}", p.call.name), true);
            }
            (Plan::Run, Some(tool)) => tool,
        };
        let step = || ToolStep { step: env.step, call: p.call, key_prefix: env.key_prefix };
        match (env.performer, env.hooked) {
            (None, None) => self.perform_call(tool, p, env).await,
            (Some(performer), None) => performer.tool_call(step(), Box::pin(self.perform_call(tool, p, env))).await,
            (performer, Some(ctx)) => {
                let work = async move {
                    let result = self.perform_call(tool, p, env).await;
                    self.post_tool(ctx, p, result, env.run_cancel, hook_events).await
                };
                match performer {
                    None => work.await,
                    Some(performer) => performer.tool_call(step(), Box::pin(work)).await,
                }
            }
        }
    }

    /// One tool call done in process: under its timeout, its panic caught, its output made a result.
    async fn perform_call(
        &self,
        tool: &Arc<dyn crate::tool::Tool>,
        p: &PlannedCall<'_>,
        env: CallEnv<'_>,
    ) -> CallResult {
        let run_cancel = env.run_cancel;
        // A call of its own to cancel exists only where the call can time out; otherwise the call hears the
        // run's token (cancellation and deadline), which spares a token per call on the hot path.
        let call_cancel = self.limits.tool_timeout.map(|_| run_cancel.child_token());
        let cancel = call_cancel.clone().unwrap_or_else(|| run_cancel.clone());
        let ctx = ToolContext::in_run(Arc::clone(&p.call.id), cancel, Arc::clone(env.key_prefix), env.step);
        // The arguments stay in the transcript: the tool reads them there (a typed tool without copying them).
        let fut = AssertUnwindSafe(tool.call_borrowed(&p.call.arguments, ctx)).catch_unwind();
        let result = match self.limits.tool_timeout {
            Some(t) => tokio::time::timeout(t, fut).await.ok(),
            None => Some(fut.await),
        };
        if let Some(c) = call_cancel {
            c.cancel();
        }
        match result {
            None => CallResult::text(
                format!(
                    "tool {:?} timed out after {}",
                    p.call.name,
                    self.limits.tool_timeout.map_or_else(String::new, |d| humantime::format_duration(d).to_string())
                ),
                true,
            ),
            Some(Err(panic)) => {
                CallResult::text(format!("tool {:?} panicked: {}", p.call.name, panic_message(&panic)), true)
            }
            Some(Ok(Ok(out))) => {
                let (content, images) = out.into_parts();
                CallResult { content, is_error: false, images, wait: None }
            }
            Some(Ok(Err(ToolError::Cancelled))) => CallResult::text(ToolError::Cancelled.to_string(), true),
            // A sub-agent that stopped for a decision: its waiting run goes with the result (a durable performer
            // journals it, so a replay holds the batch the same way).
            Some(Ok(Err(e))) if tool.sub_agent() => {
                let mut r = CallResult::text(e.to_string(), true);
                r.wait = crate::subagent::take_wait(&p.call.id).map(Box::new);
                r
            }
            Some(Ok(Err(e))) => CallResult::text(e.to_string(), true),
        }
    }
}

/// The `tool_end` events (and the `post_tool` hooks' events) of the calls of a run that ended.
#[inline]
fn report_ended(emitter: &mut Emitter, batch: &[PlannedCall<'_>], slots: &mut [Slot], t0: Instant) {
    for (p, slot) in batch.iter().zip(slots.iter_mut()).filter(|(_, s)| !s.reported) {
        if let Some(r) = &slot.result {
            let when = || (slot.elapsed(), slot.began, slot.ended.unwrap_or(t0));
            emitter.tool_end(p.call, r.is_error, when, || r.content.clone());
            // Most calls meet no hook: an empty list is not drained.
            if !slot.hook_events.is_empty() {
                for e in slot.hook_events.drain(..) {
                    emitter.emit(e);
                }
            }
            slot.reported = true;
        }
    }
}
