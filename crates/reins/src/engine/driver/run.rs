//! One run being driven: [`Run`] holds what the run needs between its steps (its deadline and
//! cancellation, the tools on offer, its log, its events' emitter, its spans and rules). It starts the run
//! ([`Run::start`]), performs the state machine's actions one by one ([`Run::drive`]: each [`Action`] is a
//! method of its own, in `model_step`, `approve` and `batch`) and ends it ([`Run::finish`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Instant;

use tokio::time::Sleep;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tracing::Span;

use super::Agent;
use super::batch::Slot;
use super::hooks::Hooked;
use crate::engine::perform::{Performer, idempotency_prefix};
use crate::engine::state::{Action, RunState};
use crate::events::{Emitter, EventKind, Observer, ObserverErrorHook, RunEndData, RunStartData, ms};
use crate::hook::{Hook, HookContext};
use crate::journal::{JournalError, JournalObserver, RunJournal};
use crate::limits::Limits;
use crate::model::ModelIdentity;
use crate::outcome::{Outcome, Status};
use crate::output::OutputSchema;
use crate::policy::{Policy, Strictest};
use crate::registry::Registry;
use crate::spans;
use crate::subagent::{Left, Link, Rules};

/// What a run is driven with besides its state: the output schema its answer must match, the performer of
/// its calls (a durable run's), its span and model (for the spans of its calls), and for a sub-agent's run
/// the link to the run that started it.
pub(super) struct RunArgs<'a> {
    pub(super) output: Option<&'a OutputSchema>,
    pub(super) performer: Option<&'a dyn Performer>,
    pub(super) span: &'a Span,
    pub(super) info: &'a ModelIdentity,
    pub(super) link: Option<Link>,
}

/// Why a run stopped from outside.
pub(super) enum Interrupt {
    Cancelled,
    Deadline,
}

impl Interrupt {
    pub(super) fn status(&self) -> Status {
        match self {
            Interrupt::Cancelled => Status::Aborted,
            Interrupt::Deadline => Status::Timeout,
        }
    }
    pub(super) fn reason(&self, limits: &Limits) -> String {
        match self {
            Interrupt::Cancelled => "the run was cancelled".to_owned(),
            Interrupt::Deadline => format!(
                "the run's deadline passed ({})",
                limits.timeout.map_or_else(String::new, |d| humantime::format_duration(d).to_string())
            ),
        }
    }
}

/// The two waits every model call, hook and batch races: the caller's cancellation and the run's deadline.
/// Each is one future for the whole run, polled again at every step (a fired one stays ready), instead of a
/// new waiter registered for each call.
pub(super) struct Waits<'a> {
    /// Whether the caller's token, which `cancelled` waits for, fired.
    pub(super) cancel: CancelFlag,
    pub(super) cancelled: Pin<&'a mut WaitForCancellationFutureOwned>,
    /// The deadline's timer, made when it is first waited on (none without a deadline).
    pub(super) sleep: Pin<&'a mut Option<Sleep>>,
    pub(super) deadline: Option<tokio::time::Instant>,
}

impl Waits<'_> {
    /// Ready when the run is interrupted: the caller cancelled (looked at first), or the deadline passed.
    pub(super) fn interruption(&mut self) -> impl Future<Output = Interrupt> + '_ {
        std::future::poll_fn(move |cx| {
            if self.cancelled.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Interrupt::Cancelled);
            }
            self.deadline_passed(cx)
        })
    }

    /// Ready when the deadline has passed (never without one: a run without a deadline asks nothing more).
    #[inline(always)]
    fn deadline_passed(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Interrupt> {
        match self.deadline {
            Some(deadline) => self.timer_passed(deadline, cx),
            None => Poll::Pending,
        }
    }

    /// Ready when `deadline` has passed; its timer is made when first asked.
    fn timer_passed(&mut self, deadline: tokio::time::Instant, cx: &mut std::task::Context<'_>) -> Poll<Interrupt> {
        if self.sleep.is_none() {
            self.sleep.set(Some(tokio::time::sleep_until(deadline)));
        }
        match self.sleep.as_mut().as_pin_mut().map(|s| s.poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Interrupt::Deadline),
            _ => Poll::Pending,
        }
    }

    /// `work`'s output, unless the run is interrupted first: what `select! { biased; i = interruption() =>
    /// Err(i), r = work => Ok(r) }` gives, but the caller's token is only looked at before the work is
    /// polled; its wait (which registers a waiter) is polled only when the work has to wait, so a step whose
    /// work is ready at once registers nothing. The work is pinned by the caller (a large future is not moved
    /// into this one).
    pub(super) fn guard<F: Future + Unpin>(
        &mut self,
        mut work: F,
    ) -> impl Future<Output = Result<F::Output, Interrupt>> {
        std::future::poll_fn(move |cx| {
            if self.cancel.is_set() {
                return Poll::Ready(Err(Interrupt::Cancelled));
            }
            if let Poll::Ready(i) = self.deadline_passed(cx) {
                return Poll::Ready(Err(i));
            }
            if let Poll::Ready(r) = Pin::new(&mut work).poll(cx) {
                return Poll::Ready(Ok(r));
            }
            match self.cancelled.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(Interrupt::Cancelled)),
                Poll::Pending => Poll::Pending,
            }
        })
    }
}

/// Whether the caller cancelled, read without the token's lock (which `CancellationToken::is_cancelled` takes):
/// a waiter registered on the token once per run sets the flag, since the token wakes its waiters as it is
/// cancelled, before its `cancel` returns.
///
/// The flag can lag the token: a token marks itself cancelled, then wakes its children's waiters (the run's
/// own token, which the model and the tools watch) and only then its own. So a call that ends *because* of the
/// cancellation can finish before the flag is set; what comes after a call asks [`CancelFlag::settled`], which
/// falls back to the token's own answer when the flag is not set yet.
pub(super) struct CancelFlag {
    fired: Arc<Fired>,
    /// The caller's token, asked when the flag is not set (see [`CancelFlag::settled`]).
    token: CancellationToken,
    /// The registered waiter, kept for the run (dropping it takes it off the token).
    _waiter: Pin<Box<WaitForCancellationFutureOwned>>,
}

/// The flag a [`CancelFlag`]'s waiter sets when it is woken.
struct Fired(AtomicBool);

impl std::task::Wake for Fired {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

impl CancelFlag {
    /// The flag of `token`: set now if it already fired, else when it fires.
    pub(super) fn new(token: &CancellationToken) -> Self {
        let fired = Arc::new(Fired(AtomicBool::new(false)));
        let mut waiter = Box::pin(token.clone().cancelled_owned());
        let waker = std::task::Waker::from(Arc::clone(&fired));
        if waiter.as_mut().poll(&mut std::task::Context::from_waker(&waker)).is_ready() {
            fired.0.store(true, Ordering::Release);
        }
        CancelFlag { fired, token: token.clone(), _waiter: waiter }
    }

    /// Whether the token fired, as far as the flag knows (it may lag the token by a moment: see the type).
    #[inline]
    pub(super) fn is_set(&self) -> bool {
        self.fired.0.load(Ordering::Acquire)
    }

    /// Whether the token fired, exactly: the flag, else the token itself (its lock taken only then). Asked
    /// after a call ended, since the call may have ended because of the cancellation.
    #[inline]
    pub(super) fn settled(&self) -> bool {
        self.is_set() || self.token.is_cancelled()
    }
}

/// The rules a run's calls are under: its policy and hooks — for a sub-agent joined with every ancestor's
/// (the strictest decision of its line wins; an ancestor's `pre_tool` and `post_tool` hooks run after its
/// own, its `stop` hooks judge the ancestor's own answer only) — and what its own sub-agents inherit.
pub(super) struct RunRules {
    pub(super) policy: Option<Arc<dyn Policy>>,
    /// The run's hooks joined with its ancestors' (`None`: the agent's own are all).
    joined_hooks: Option<Vec<Arc<dyn Hook>>>,
    /// What hooks are told about the run (only when there are hooks).
    hook_ctx: Option<HookContext>,
    /// What this run's sub-agents are under besides their own rules.
    pub(super) sub_agents: Option<Arc<Rules>>,
}

impl RunRules {
    fn of(agent: &Agent, link: Option<&Link>, run_id: &str, session_id: Option<&String>, sub_agents: bool) -> Self {
        let inherited = link.map(Link::rules).filter(|r| !r.policies.is_empty() || !r.hooks.is_empty());
        let (policy, joined_hooks) = match inherited {
            None => (agent.policy.clone(), None),
            Some(up) => {
                let rules = Rules::of(agent.policy.as_ref(), &agent.hooks, Some(up));
                let policy: Option<Arc<dyn Policy>> = match rules.policies.len() {
                    0 => None,
                    1 => rules.policies.first().cloned(),
                    _ => Some(Arc::new(Strictest(rules.policies))),
                };
                (policy, Some(rules.hooks))
            }
        };
        let hooks = joined_hooks.as_deref().unwrap_or(agent.hooks.as_slice());
        let hook_ctx =
            (!hooks.is_empty()).then(|| HookContext { run_id: run_id.to_owned(), session_id: session_id.cloned() });
        let sub_agents = sub_agents.then(|| Arc::new(Rules::of(agent.policy.as_ref(), &agent.hooks, inherited)));
        RunRules { policy, joined_hooks, hook_ctx, sub_agents }
    }

    /// Whether the run's calls meet hooks.
    pub(super) fn any(&self) -> bool {
        self.hook_ctx.is_some()
    }

    /// The hooks the run's calls meet and what they are told, when there are any.
    pub(super) fn hooked<'r>(&'r self, agent: &'r Agent) -> Option<Hooked<'r>> {
        Some(Hooked {
            ctx: self.hook_ctx.as_ref()?,
            hooks: self.joined_hooks.as_deref().unwrap_or(agent.hooks.as_slice()),
            own: agent.hooks.len(),
            policy: self.policy.as_deref(),
        })
    }
}

/// One run being driven: what today's step needs of the run, held between its steps.
pub(super) struct Run<'a> {
    pub(super) agent: &'a Agent,
    pub(super) output: Option<&'a OutputSchema>,
    pub(super) performer: Option<&'a dyn Performer>,
    /// The run's span, and its model (for the spans of its calls).
    span: &'a Span,
    pub(super) info: &'a ModelIdentity,
    link: Option<Link>,
    started: Instant,
    /// Whether the spans carry content: the agent's setting, or its parent run's for a sub-agent.
    pub(super) span_content: bool,
    pub(super) limits: Limits,
    /// The run's own token (a child of the caller's, cancelled when the run is interrupted, and at its end).
    pub(super) run_cancel: CancellationToken,
    pub(super) waits: Waits<'a>,
    /// The tools on offer (with the output schema's final-answer tool).
    pub(super) registry: Arc<Registry>,
    pub(super) journal: Option<Arc<dyn RunJournal>>,
    /// How many transcript items the journal holds.
    journaled: usize,
    pub(super) session_id: Option<String>,
    /// What every tool call's idempotency key starts with, and the prompt-cache key (made once per run).
    pub(super) key_prefix: Arc<str>,
    pub(super) cache_key: Arc<str>,
    pub(super) emitter: Emitter,
    /// Whether events carry content: the agent's setting, or its parent run's for a sub-agent.
    pub(super) include_content: bool,
    pub(super) on_observer_error: Option<ObserverErrorHook>,
    /// What this run's own sub-agents inherit (when its tools may hold some): every observer but the journal's.
    pub(super) sub_agent_observers: Option<Vec<Arc<dyn Observer>>>,
    pub(super) rules: RunRules,
    /// The progress of each call of the batch being run: storage kept from one batch to the next.
    pub(super) slots: Vec<Slot>,
}

/// The events' emitter of a run, and what its events carry and its sub-agents hear.
struct Hearing {
    emitter: Emitter,
    include_content: bool,
    on_observer_error: Option<ObserverErrorHook>,
    sub_agents: Option<Vec<Arc<dyn Observer>>>,
}

impl<'a> Run<'a> {
    /// Starts the run: its prices, its tools, its log (a child run of its parent's for a sub-agent), its
    /// events' emitter, and the `run_start` event. A log or tool set that cannot be made ends the run
    /// `aborted` before its first step.
    pub(super) async fn start(
        agent: &'a Agent,
        state: &mut RunState,
        cancel: &'a CancellationToken,
        waits: Waits<'a>,
        started: Instant,
        args: RunArgs<'a>,
    ) -> Run<'a> {
        let RunArgs { output, performer, span, info, link } = args;
        let span_content =
            agent.trace_content.unwrap_or(agent.include_content) || link.as_ref().is_some_and(Link::trace_content);
        state.set_prices(agent.model.price(), agent.compact_model.as_ref().map(|m| m.price()));
        let limits = state.limits().clone();
        let base = match &agent.tool_source {
            Some(source) => source.registry().await,
            None => Arc::clone(&agent.registry),
        };
        let mut registry_error = None;
        let registry = Agent::step_registry(Arc::clone(&base), output).unwrap_or_else(|e| {
            registry_error = Some(e);
            base
        });
        let (journal, journal_error) = open_journal(agent, link.as_ref(), state, &registry).await;
        let session_id = journal.as_ref().map(|j| j.session_id().to_owned());
        // The conversation's session: the journal's, else a durable performer's. Spans name it, and it starts
        // every tool call's idempotency key and is the prompt-cache key (the run's id without one).
        let span_session = session_id.as_deref().or(performer.and_then(|p| p.session_id()));
        let key_prefix: Arc<str> = Arc::from(idempotency_prefix(span_session, state.run_id()));
        let cache_key: Arc<str> = Arc::from(span_session.unwrap_or(state.run_id()));
        let journaled = journal.as_ref().map_or(0, |j| j.recorded());
        let hearing = hearing(agent, link.as_ref(), state, journal.as_ref());
        if let Some(e) = journal_error {
            state.interrupt(Status::Aborted, e.to_string(), &agent.context);
        }
        if let Some(e) = registry_error {
            state.interrupt(Status::Aborted, e, &agent.context);
        }
        let rules =
            RunRules::of(agent, link.as_ref(), state.run_id(), session_id.as_ref(), hearing.sub_agents.is_some());
        let mut run = Run {
            agent,
            output,
            performer,
            span,
            info,
            link,
            started,
            span_content,
            limits,
            run_cancel: cancel.child_token(),
            waits,
            registry,
            journal,
            journaled,
            session_id,
            key_prefix,
            cache_key,
            emitter: hearing.emitter,
            include_content: hearing.include_content,
            on_observer_error: hearing.on_observer_error,
            sub_agent_observers: hearing.sub_agents,
            rules,
            slots: Vec::new(),
        };
        run.announce(state);
        run
    }

    /// The run's span is told it started, and its observers hear `run_start`.
    fn announce(&mut self, state: &RunState) {
        if !self.span.is_disabled() {
            let first = state.transcript().conversation();
            let session = self.span_session();
            spans::run_started(self.span, session, self.span_content, state.instructions(), first.get(0));
        }
        if self.emitter.active() {
            let include_content = self.include_content;
            let tools = self.registry.specs().iter().map(|s| s.name.clone()).collect();
            let prompt =
                include_content.then(|| state.transcript().to_vec().first().map(|m| m.content().to_owned())).flatten();
            let instructions_chars = state.instructions().map_or(0, |t| t.chars().count() as u64);
            let instructions = include_content.then(|| state.instructions().map(str::to_owned)).flatten();
            self.emitter.emit(EventKind::RunStart(Box::new(RunStartData {
                tools,
                instructions_chars,
                instructions,
                prompt,
                session_id: self.session_id.clone(),
            })));
        }
    }

    /// The run loop: the state machine says what to do next, and that is done, until the run is over.
    pub(super) async fn drive(&mut self, state: &mut RunState) {
        loop {
            if self.journal.is_some() {
                self.sync_journal(state);
            }
            let steps_so_far = state.steps();
            // What sub-agents may spend: taken before the step (the batch borrows the state).
            let left = self.registry.has_sub_agents().then(|| Left::of(state));
            match state.next_action(&self.registry, &self.agent.context) {
                Action::Finished => break,
                Action::CallModel(mut request) => self.call_model(state, &mut request).await,
                Action::Approve(calls) => self.approve(state, calls).await,
                Action::Compact(request, plan) => self.compact(state, request, plan).await,
                Action::RunTools(batch) => {
                    let ran = self.run_tools(batch, steps_so_far, left).await;
                    self.record_tools(state, ran);
                    // Between steps: the tools may have changed (the next model turn sees the new ones).
                    if self.agent.tool_source.is_some() {
                        self.refresh_tools().await;
                    }
                }
            }
        }
    }

    /// Ends the run: its log brought up to date and closed, its span ended and `run_end` sent. A log that
    /// fails here turns the outcome `aborted` (its answer kept).
    pub(super) async fn finish(mut self, state: RunState) -> Outcome {
        self.sync_journal(&state);
        // The transcript is moved into the outcome, not copied.
        let mut outcome = state.into_outcome();
        if let Some(j) = &self.journal {
            if let Err(e) = j.flush().await {
                fail_outcome(&mut outcome, e);
            }
        }
        outcome.session_id = self.session_id.clone();
        spans::run_ended(self.span, &outcome, self.span_content);
        // The run's result: always a top-level run's; a sub-agent's (its parent's tool result) with content.
        let result = self.link.is_none() || self.include_content;
        self.emitter.emit(EventKind::RunEnd(Box::new(RunEndData {
            status: outcome.status,
            steps: outcome.steps,
            tool_calls: outcome.tool_calls,
            usage: outcome.usage,
            cost_usd: outcome.cost_usd,
            duration_ms: ms(self.started.elapsed()),
            compactions: outcome.compactions,
            error: outcome.error.clone(),
            session_id: self.session_id.take(),
            output_valid: self.output.map(|_| outcome.output.is_some()),
            answer: result.then(|| outcome.answer.clone()).flatten(),
            output: result.then(|| outcome.output.clone()).flatten(),
        })));
        if let Some(j) = &self.journal {
            if let Err(e) = j.finish(&outcome).await {
                fail_outcome(&mut outcome, e);
            }
        }
        self.run_cancel.cancel();
        outcome
    }

    /// The session the run's spans name: the journal's, else a durable performer's.
    #[inline]
    pub(super) fn span_session(&self) -> Option<&str> {
        self.session_id.as_deref().or(self.performer.and_then(|p| p.session_id()))
    }

    /// Whether the run was interrupted by now (the caller cancelled, or the deadline passed), as far as the
    /// cancellation flag knows (before a step; after a call, [`Run::interrupted_settled`]).
    #[inline]
    pub(super) fn interrupted(&self) -> Option<Interrupt> {
        self.interrupted_as(self.waits.cancel.is_set())
    }

    /// Whether the run was interrupted by now, asked after calls ended: they may have ended because the
    /// caller cancelled, before the flag knew (see [`CancelFlag`]).
    #[inline]
    pub(super) fn interrupted_settled(&self) -> Option<Interrupt> {
        self.interrupted_as(self.waits.cancel.settled())
    }

    #[inline]
    fn interrupted_as(&self, cancelled: bool) -> Option<Interrupt> {
        if cancelled {
            Some(Interrupt::Cancelled)
        } else if self.waits.deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            Some(Interrupt::Deadline)
        } else {
            None
        }
    }

    /// Whether the caller cancelled the run.
    pub(super) fn cancelled(&self) -> bool {
        self.waits.cancel.settled()
    }

    /// Ends the run interrupted: its calls are cancelled and the state records why.
    pub(super) fn stop(&mut self, state: &mut RunState, i: Interrupt) {
        self.run_cancel.cancel();
        let reason = i.reason(state.limits());
        if i.status() == Status::Timeout {
            self.emitter.emit(EventKind::LimitHit { status: Status::Timeout, detail: reason.clone() });
        }
        state.interrupt(i.status(), reason, &self.agent.context);
    }

    /// Ends the run `aborted` because its log failed.
    pub(super) fn log_failed(&mut self, state: &mut RunState, e: &JournalError) {
        self.run_cancel.cancel();
        state.interrupt(Status::Aborted, e.to_string(), &self.agent.context);
    }

    /// Before a step: false when the run was interrupted (it then ended).
    #[inline]
    pub(super) fn not_interrupted(&mut self, state: &mut RunState) -> bool {
        match self.interrupted() {
            None => true,
            Some(i) => {
                self.stop(state, i);
                false
            }
        }
    }

    /// The log made durable: false (the run ended `aborted`) when it failed.
    pub(super) async fn flushed(&mut self, state: &mut RunState) -> bool {
        let Some(j) = &self.journal else { return true };
        match j.flush().await {
            Ok(()) => true,
            Err(e) => {
                self.log_failed(state, &e);
                false
            }
        }
    }

    /// Hands the transcript items appended since the last call to the journal.
    #[inline]
    fn sync_journal(&mut self, state: &RunState) {
        let Some(journal) = &self.journal else { return };
        let transcript = state.transcript();
        if self.journaled >= transcript.len() {
            return;
        }
        let conversation = transcript.conversation();
        for index in self.journaled..transcript.len() {
            if let Some(m) = conversation.get(index) {
                journal.message(index, m);
            }
        }
        self.journaled = transcript.len();
    }
}

/// The run's log: a sub-agent's run is a child run in its parent's log (or, when the parent keeps none, in
/// its own); a log that cannot be started is the error that ends the run.
async fn open_journal(
    agent: &Agent,
    link: Option<&Link>,
    state: &RunState,
    registry: &Registry,
) -> (Option<Arc<dyn RunJournal>>, Option<JournalError>) {
    let started = match (link.and_then(Link::journal), &agent.journal) {
        (Some(parent), _) => {
            let name = link.map_or("", |l| &*l.name);
            let parent_run = link.map_or("", |l| &**l.parent_run_id());
            parent.child(name, parent_run, state, registry.specs()).await.transpose()
        }
        (None, Some(j)) => Some(j.start(state, registry.specs()).await),
        (None, None) => None,
    };
    match started {
        None => (None, None),
        Some(Ok(rj)) => (Some(rj), None),
        Some(Err(e)) => (None, Some(e)),
    }
}

/// Who hears the run: the agent's observers, a sub-agent's parent's (tagged, with the observer counting
/// its spending), and the journal's.
fn hearing(agent: &Agent, link: Option<&Link>, state: &RunState, journal: Option<&Arc<dyn RunJournal>>) -> Hearing {
    let mut observers = agent.observers.clone();
    let (mut on_observer_error, mut include_content) = (agent.on_observer_error.clone(), agent.include_content);
    if let Some(link) = link {
        observers.extend(link.observers().iter().cloned());
        observers.push(link.spend_observer(state.run_id()));
        on_observer_error = on_observer_error.or_else(|| link.on_observer_error().cloned());
        include_content |= link.include_content();
    }
    // What this run's own sub-agents inherit: every observer but the journal's.
    let sub_agents = agent.registry_may_hold_sub_agents().then(|| observers.clone());
    if let Some(j) = journal {
        observers.push(Arc::new(JournalObserver(j.clone())));
    }
    let mut emitter = Emitter::new(Arc::from(state.run_id()), observers, on_observer_error.clone(), include_content);
    if let Some(link) = link {
        emitter.tag(Arc::clone(&link.name), Arc::clone(link.parent_run_id()));
    }
    Hearing { emitter, include_content, on_observer_error, sub_agents }
}

/// A run whose log failed at its end: it is reported `aborted` with the log's error (its answer kept).
fn fail_outcome(outcome: &mut Outcome, e: JournalError) {
    if outcome.status == Status::Aborted && outcome.error.as_deref().is_some_and(|m| m.starts_with("session log:")) {
        return;
    }
    outcome.error = Some(match outcome.error.take() {
        Some(prev) => format!("{e} (the run had ended {}: {prev})", outcome.status),
        None => format!("{e} (the run had ended {})", outcome.status),
    });
    outcome.status = Status::Aborted;
}

#[cfg(test)]
mod tests {
    use super::CancelFlag;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Wake, Waker};
    use tokio_util::sync::CancellationToken;

    /// A waker that, when woken, writes down what a run's cancellation flag says at that moment.
    struct Witness {
        flag: Arc<Mutex<Option<CancelFlag>>>,
        seen: Mutex<Option<(bool, bool)>>,
    }

    impl Wake for Witness {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            let flag = self.flag.lock().ok();
            let said = flag.as_ref().and_then(|f| f.as_ref()).map(|f| (f.is_set(), f.settled()));
            if let Ok(mut seen) = self.seen.lock() {
                *seen = said;
            }
        }
    }

    /// What the stop-29 chat test hit on a busy machine: a call watching the run's own token (a child of the
    /// caller's) is woken by the caller's cancellation before the flag is, so a call that ended because of it
    /// looked like one that failed. `settled` says cancelled at that moment; the flag alone does not yet.
    #[test]
    fn a_call_woken_by_the_cancellation_sees_it_settled_before_the_flag_is_set() {
        let caller = CancellationToken::new();
        let flag = Arc::new(Mutex::new(Some(CancelFlag::new(&caller))));
        let run = caller.child_token();
        let witness = Arc::new(Witness { flag: Arc::clone(&flag), seen: Mutex::new(None) });
        let waker = Waker::from(Arc::clone(&witness));
        let mut call = Box::pin(run.cancelled_owned());
        assert!(std::future::Future::poll(call.as_mut(), &mut Context::from_waker(&waker)).is_pending());
        caller.cancel();
        let seen = witness.seen.lock().ok().and_then(|s| *s);
        // (flag, settled) as the call is woken: the flag lags (tokio-util wakes children first), settled does not.
        assert_eq!(seen, Some((false, true)), "what the run knew when the call was woken");
        let after = flag.lock().ok().and_then(|f| f.as_ref().map(CancelFlag::is_set));
        assert_eq!(after, Some(true), "the flag is set once cancel returns");
    }
}
