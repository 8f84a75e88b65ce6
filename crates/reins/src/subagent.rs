//! Sub-agents: an [`Agent`] offered to another agent as a tool ([`AgentTool`]), taking `{"task": string}`.
//!
//! A sub-agent's run is a run of its own (its own state machine, transcript, tools and limits) driven inside
//! the parent's tool call, and bound to the parent:
//!
//! - **Budget.** Its limits are the smaller of its own and what the parent has left: model responses (less
//!   one, kept for the parent's answer), tool calls, input/output/total tokens, and the parent's deadline.
//!   Sub-agent calls that run concurrently in one batch (all their tools parallel-safe) split what was left
//!   when the first of them began, the remainder to the first calls, so together they cannot spend more than
//!   the parent has; one whose share is nothing while something is left waits for the others and takes what
//!   they left. Calls that run one after the other take what is left in turn. A call made when nothing is
//!   left is an error result and starts no run.
//! - **Rules.** Every policy holds at every depth: its calls meet its own policy and hooks and those of every
//!   ancestor (the strictest decision wins; the ancestors' `pre_tool` and `post_tool` hooks run after its
//!   own). A question its own approver does not answer stops the parent's batch (the calls that ran keep
//!   their results; those after it wait) and becomes the parent's: its approver decides, or the parent ends
//!   `awaiting_approval` with the sub-agent's calls in its pending batch; once decided, the parent's call
//!   continues the sub-agent's run where it stopped.
//! - **Roll-up.** What it spends — counted from its events as they happen, so a run cut short by a timeout
//!   or a cancellation is counted too — is added to the parent after the batch: its usage into the parent's
//!   usage (token limits apply to the sum), its steps and tool calls into what the parent's limits count,
//!   and all of it into the outcome's per-agent breakdown ([`crate::Outcome::agents`]). A sub-agent's own
//!   sub-agents are counted in its totals.
//! - **Events.** Its events go to the parent's observers, tagged with `agent` and `parent_run_id`.
//! - **Record.** With a journal, its run is recorded as a child run of the parent's, in the same session
//!   ([`crate::RunJournal::child`]).
//! - **Cancellation.** The parent's cancellation, deadline and per-tool timeout reach it (it hears the call's
//!   token).
//! - **Failure.** Any end but `completed` is an error result for the parent (the status and the error), never
//!   the parent's failure; `completed` gives the parent the sub-agent's answer.
//!
//! Nesting: a sub-agent's agent may itself hold sub-agents; the budget, roll-up, tags and record compose.
//! (`reins-agent`'s agent files allow one level.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;

use crate::engine::driver::Agent;
use crate::engine::state::{AgentWait, Plan, PlannedCall, RunState};
use crate::events::{Event, EventKind, Observer, ObserverError, ObserverErrorHook};
use crate::hook::Hook;
use crate::journal::RunJournal;
use crate::limits::Limits;
use crate::outcome::{AgentTotals, Outcome, Status};
use crate::policy::Policy;
use crate::registry::{Registry, is_valid_tool_name};
use crate::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

tokio::task_local! {
    /// The run whose batch is calling: set by the driver around a batch when its registry holds a sub-agent.
    static SCOPE: Arc<RunScope>;
}

/// The rules a run's sub-agents are under besides their own: the run's policy and its `pre_tool` and
/// `post_tool` hooks, with those it inherited itself (its ancestors'). A sub-agent's call then meets every
/// policy of its line, the strictest decision winning, and every hook of its line, its own first.
#[derive(Default)]
pub(crate) struct Rules {
    pub(crate) policies: Vec<Arc<dyn Policy>>,
    pub(crate) hooks: Vec<Arc<dyn Hook>>,
}

impl Rules {
    /// The rules of a run with its own `policy` and `hooks` under `inherited` (its parent's rules).
    pub(crate) fn of(policy: Option<&Arc<dyn Policy>>, hooks: &[Arc<dyn Hook>], inherited: Option<&Rules>) -> Rules {
        let mut policies: Vec<Arc<dyn Policy>> = policy.into_iter().cloned().collect();
        let mut all: Vec<Arc<dyn Hook>> = hooks.to_vec();
        if let Some(up) = inherited {
            policies.extend(up.policies.iter().cloned());
            all.extend(up.hooks.iter().cloned());
        }
        Rules { policies, hooks: all }
    }
}

/// The sub-agent run the call `call_id` of the current batch left waiting for a decision, if any (taken).
pub(crate) fn take_wait(call_id: &str) -> Option<AgentWait> {
    SCOPE.try_with(|s| s.take_wait(call_id)).ok().flatten()
}

/// What a run has left, at the start of a batch, less what its sub-agents spent since.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Left {
    steps: Option<u64>,
    tool_calls: Option<u64>,
    input: Option<u64>,
    output: Option<u64>,
    total: Option<u64>,
    cost: Option<f64>,
}

#[derive(Default)]
struct Ledger {
    /// What the run had left when the batch began, less what the batch's sub-agents spent since.
    left: Left,
    /// For each group of concurrent sub-agent calls that began: what was left when its first call began (the
    /// group splits that).
    groups: BTreeMap<usize, Left>,
    /// How many sub-agent runs of the batch are under way.
    running: usize,
    spent: BTreeMap<String, AgentTotals>,
    /// The sub-agent runs of the batch that ended waiting for decisions (the batch then waits too).
    waits: Vec<AgentWait>,
}

/// What the driver shares with the sub-agent calls of one batch: who the parent is (run id, observers,
/// journal), its budget left and what its sub-agents spend.
pub(crate) struct RunScope {
    run_id: Arc<str>,
    observers: Vec<Arc<dyn Observer>>,
    on_observer_error: Option<ObserverErrorHook>,
    include_content: bool,
    /// Whether the parent's spans carry content (its sub-agents' do too).
    trace_content: bool,
    journal: Option<Arc<dyn RunJournal>>,
    deadline: Option<Instant>,
    /// The parent's rules, which its sub-agents' calls meet too.
    rules: Arc<Rules>,
    /// Sub-agent runs that waited for decisions in this batch before, decided now: each is continued by the
    /// call that started it.
    resumes: Vec<AgentWait>,
    /// For each sub-agent call of the batch: its group of concurrent sub-agent calls, its place in it and
    /// how many calls the group holds (a call that runs alone is a group of one).
    shares: Vec<Share>,
    ledger: Mutex<Ledger>,
    /// Told when a sub-agent run of the batch ends (a call left with no share waits for its group).
    ended: tokio::sync::Notify,
}

/// Where a sub-agent call stands among the batch's concurrent sub-agent calls.
struct Share {
    call_id: String,
    group: usize,
    place: u64,
    of: u64,
}

/// A sub-agent run under way: counted while it lives, its end told to the calls that wait for it.
struct Running(Arc<RunScope>);

impl Drop for Running {
    fn drop(&mut self) {
        let mut l = self.0.ledger();
        l.running = l.running.saturating_sub(1);
        drop(l);
        self.0.ended.notify_waiters();
    }
}

/// A sub-agent run's tie to the run that started it.
pub(crate) struct Link {
    /// The sub-agent's name (its tool name in the parent).
    pub(crate) name: Arc<str>,
    /// The parent's batch.
    pub(crate) parent: Arc<RunScope>,
}

impl Link {
    pub(crate) fn parent_run_id(&self) -> &Arc<str> {
        &self.parent.run_id
    }
    pub(crate) fn observers(&self) -> &[Arc<dyn Observer>] {
        &self.parent.observers
    }
    pub(crate) fn on_observer_error(&self) -> Option<&ObserverErrorHook> {
        self.parent.on_observer_error.as_ref()
    }
    pub(crate) fn include_content(&self) -> bool {
        self.parent.include_content
    }
    pub(crate) fn trace_content(&self) -> bool {
        self.parent.trace_content
    }
    pub(crate) fn journal(&self) -> Option<&Arc<dyn RunJournal>> {
        self.parent.journal.as_ref()
    }
    /// The rules of the parent's line, which the sub-agent's calls meet besides its own.
    pub(crate) fn rules(&self) -> &Rules {
        &self.parent.rules
    }
    /// The observer that counts what the sub-agent's run (with its own sub-agents) spends into the parent.
    pub(crate) fn spend_observer(&self, run_id: &str) -> Arc<dyn Observer> {
        Arc::new(Spend { scope: Arc::clone(&self.parent), name: self.name.to_string(), run_id: Arc::from(run_id) })
    }
}

impl Left {
    /// What the run `state` has left for its sub-agents now.
    pub(crate) fn of(state: &RunState) -> Left {
        let l = state.limits();
        let u = state.usage();
        let used_steps = state.steps().saturating_add(state.agent_steps());
        Left {
            // One response is kept for the parent to read the results and answer.
            steps: l.max_steps.map(|m| m.saturating_sub(used_steps).saturating_sub(1)),
            tool_calls: l
                .max_tool_calls
                .map(|m| m.saturating_sub(state.tool_calls().saturating_add(state.agent_tool_calls()))),
            input: l.max_input_tokens.map(|m| m.saturating_sub(u.input_tokens)),
            output: l.max_output_tokens.map(|m| m.saturating_sub(u.output_tokens)),
            total: l.max_total_tokens.map(|m| m.saturating_sub(u.total_tokens)),
            cost: l.max_cost_usd.map(|m| (m - state.cost_usd().unwrap_or(0.0)).max(0.0)),
        }
    }
}

impl RunScope {
    /// The scope of a batch of the run `run_id`, which has `left` (taken before the batch was admitted;
    /// admitting it changes none of these), and the shares of its sub-agent calls (runs of consecutive
    /// parallel-safe calls run concurrently, as the driver runs them).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        run_id: Arc<str>,
        left: Left,
        batch: &[PlannedCall<'_>],
        registry: &Registry,
        observers: Vec<Arc<dyn Observer>>,
        on_observer_error: Option<ObserverErrorHook>,
        include_content: bool,
        journal: Option<Arc<dyn RunJournal>>,
        deadline: Option<Instant>,
        rules: Arc<Rules>,
    ) -> RunScope {
        let tool = |p: &PlannedCall<'_>| match p.plan {
            Plan::Run => registry.get(&p.call.name),
            Plan::Reject { .. } | Plan::Ask { .. } => None,
        };
        let mut shares = Vec::new();
        let mut i = 0;
        while i < batch.len() {
            let mut j = i + 1;
            if tool(&batch[i]).is_some_and(|t| t.parallel_safe()) {
                while j < batch.len() && tool(&batch[j]).is_some_and(|t| t.parallel_safe()) {
                    j += 1;
                }
            }
            let agents: Vec<&str> =
                batch[i..j].iter().filter(|p| tool(p).is_some_and(|t| t.sub_agent())).map(|p| &*p.call.id).collect();
            let of = agents.len() as u64;
            shares.extend(agents.into_iter().enumerate().map(|(place, id)| Share {
                call_id: id.to_owned(),
                group: i,
                place: place as u64,
                of,
            }));
            i = j;
        }
        RunScope {
            run_id,
            observers,
            on_observer_error,
            include_content,
            trace_content: false,
            journal,
            deadline,
            rules,
            resumes: Vec::new(),
            shares,
            ledger: Mutex::new(Ledger { left, ..Ledger::default() }),
            ended: tokio::sync::Notify::new(),
        }
    }

    /// The decided sub-agent runs that the batch's calls continue.
    pub(crate) fn with_resumes(mut self, resumes: Vec<AgentWait>) -> Self {
        self.resumes = resumes;
        self
    }

    /// The sub-agent run the call `call_id` left waiting for decisions, if any (taken).
    fn take_wait(&self, call_id: &str) -> Option<AgentWait> {
        let mut l = self.ledger();
        let i = l.waits.iter().position(|w| w.call_id == call_id)?;
        Some(l.waits.swap_remove(i))
    }

    /// Whether the parent's spans carry content (so its sub-agents' do too).
    pub(crate) fn with_trace_content(mut self, on: bool) -> Self {
        self.trace_content = on;
        self
    }

    /// Runs `work` (the batch) with this scope visible to the sub-agent calls in it.
    pub(crate) async fn enter<F: std::future::Future>(self: Arc<Self>, work: F) -> F::Output {
        SCOPE.scope(self, work).await
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the batch's sub-agents spent, by name (taken: a second call returns nothing).
    pub(crate) fn take_spent(&self) -> BTreeMap<String, AgentTotals> {
        std::mem::take(&mut self.ledger().spent)
    }

    /// The limits of a sub-agent run started by the call `call_id`: the smaller of `own` and the parent's
    /// share left, and the run counted as under way until the returned guard drops. A call that runs alone
    /// takes what is left; calls that run together split what was left when the first of them began, the
    /// remainder going to the first ones, each never more than is left. A call whose share of something left
    /// is nothing waits for the others of its group to end, then takes what they left: a call is refused only
    /// when nothing is left of a limit the parent has.
    async fn carve(self: &Arc<Self>, own: &Limits, call_id: &str) -> Result<(Limits, Running), String> {
        let share = self.shares.iter().find(|s| s.call_id == call_id);
        let (group, place, of) = share.map_or((usize::MAX, 0, 1), |s| (s.group, s.place, s.of.max(1)));
        loop {
            // Registered before the ledger is read, so an end between the read and the wait is not missed.
            let mut ended = std::pin::pin!(self.ended.notified());
            ended.as_mut().enable();
            let carved = {
                let mut ledger = self.ledger();
                let left = ledger.left;
                let alone = of == 1 || ledger.running == 0 && ledger.groups.contains_key(&group);
                let base = if alone { left } else { *ledger.groups.entry(group).or_insert(left) };
                let part = |base: Option<u64>, left: Option<u64>| match (base, left) {
                    (Some(b), Some(l)) if !alone => Some(l.min(b / of + u64::from(place < b % of))),
                    (_, l) => l,
                };
                let mine = Left {
                    steps: part(base.steps, left.steps),
                    tool_calls: part(base.tool_calls, left.tool_calls),
                    input: part(base.input, left.input),
                    output: part(base.output, left.output),
                    total: part(base.total, left.total),
                    cost: match (base.cost, left.cost) {
                        (Some(b), Some(l)) if !alone => Some(l.min(b / of as f64)),
                        (_, l) => l,
                    },
                };
                // Something is left but this call's share of it is nothing: it waits for the group's runs under
                // way to end, then takes what they left (with none under way, it takes what is left now).
                let starved = |m: Option<u64>, l: Option<u64>| m == Some(0) && l.is_some_and(|l| l > 0);
                let starved = starved(mine.steps, left.steps)
                    || starved(mine.tool_calls, left.tool_calls)
                    || starved(mine.input, left.input)
                    || starved(mine.output, left.output)
                    || starved(mine.total, left.total);
                if starved && ledger.running > 0 {
                    None
                } else {
                    let limits = Self::limits(own, if starved { left } else { mine }, self.deadline);
                    if limits.is_ok() {
                        ledger.running += 1;
                    }
                    Some(limits)
                }
            };
            match carved {
                None => ended.await,
                Some(limits) => return limits.map(|l| (l, Running(Arc::clone(self)))),
            }
        }
    }

    /// `own` limits bounded by `left` (and the parent's deadline). An error when nothing is left of a limit
    /// the parent has.
    fn limits(own: &Limits, left: Left, deadline: Option<Instant>) -> Result<Limits, String> {
        let min = |own: Option<u64>, left: Option<u64>| match (own, left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut limits = own.clone();
        limits.max_steps = min(own.max_steps, left.steps);
        if limits.max_steps == Some(0) {
            return Err("the parent run has no model responses left for it (max_steps)".into());
        }
        limits.max_tool_calls = min(own.max_tool_calls, left.tool_calls);
        for (name, own, left, set) in [
            ("max_input_tokens", own.max_input_tokens, left.input, 0),
            ("max_output_tokens", own.max_output_tokens, left.output, 1),
            ("max_total_tokens", own.max_total_tokens, left.total, 2),
        ] {
            let v = min(own, left);
            if v == Some(0) {
                return Err(format!("the parent run has no tokens left for it ({name})"));
            }
            match set {
                0 => limits.max_input_tokens = v,
                1 => limits.max_output_tokens = v,
                _ => limits.max_total_tokens = v,
            }
        }
        if let Some(left) = left.cost {
            if left <= 0.0 {
                return Err("the parent run has no cost left for it (max_cost_usd)".into());
            }
            limits.max_cost_usd = Some(own.max_cost_usd.map_or(left, |c| c.min(left)));
        }
        if let Some(deadline) = deadline {
            let rest = deadline.saturating_duration_since(Instant::now());
            if rest < crate::limits::MIN_DURATION {
                return Err("the parent run's deadline has passed".into());
            }
            limits.timeout = Some(own.timeout.map_or(rest, |t| t.min(rest)));
        }
        Ok(limits)
    }
}

/// `limits` (carved for a continued run) bounded by what the sub-agent's `own` limits have left after `spent`
/// (its runs for the same call so far). An error when one of its own limits is used up.
fn less(limits: &Limits, own: &Limits, spent: &AgentTotals) -> Result<Limits, String> {
    let left = |own: Option<u64>, spent: u64| own.map(|m| m.saturating_sub(spent));
    let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let mut out = limits.clone();
    // Steps: the continued run counts its earlier responses (`RunState::count_earlier_steps`), so its limit is
    // its own, or the parent's share plus those.
    out.max_steps = match (own.max_steps, limits.max_steps) {
        (Some(o), Some(l)) => Some(o.min(l.saturating_add(spent.steps))),
        (None, l) => l.map(|l| l.saturating_add(spent.steps)),
        (o, None) => o,
    };
    out.max_tool_calls = min(limits.max_tool_calls, left(own.max_tool_calls, spent.tool_calls));
    let u = &spent.usage;
    out.max_input_tokens = min(limits.max_input_tokens, left(own.max_input_tokens, u.input_tokens));
    out.max_output_tokens = min(limits.max_output_tokens, left(own.max_output_tokens, u.output_tokens));
    out.max_total_tokens = min(limits.max_total_tokens, left(own.max_total_tokens, u.total_tokens));
    if [out.max_input_tokens, out.max_output_tokens, out.max_total_tokens].contains(&Some(0)) {
        return Err("its own token limits are used up".into());
    }
    if let (Some(max), Some(cost)) = (own.max_cost_usd, spent.cost_usd) {
        let rest = max - cost;
        if rest <= 0.0 {
            return Err(format!("its own max_cost_usd is used up (${cost:.6})"));
        }
        out.max_cost_usd = Some(out.max_cost_usd.map_or(rest, |c| c.min(rest)));
    }
    Ok(out)
}

/// Counts a sub-agent run's spending (and its own sub-agents') into the parent's ledger as its events come.
struct Spend {
    scope: Arc<RunScope>,
    name: String,
    run_id: Arc<str>,
}

impl Observer for Spend {
    fn on_event(&self, event: &Event) -> Result<(), ObserverError> {
        let (runs, steps, tool_calls, usage, cost) = match &event.kind {
            EventKind::RunStart(_) if event.run_id == self.run_id => (1, 0, 0, None, None),
            EventKind::ModelEnd(e) => (0, 1, 0, Some(e.usage), e.cost_usd),
            EventKind::CompactionEnd(e) => (0, 0, 0, Some(e.usage), e.cost_usd),
            EventKind::ToolStart { .. } => (0, 0, 1, None, None),
            _ => return Ok(()),
        };
        let mut ledger = self.scope.ledger();
        let Ledger { left, spent, .. } = &mut *ledger;
        let t = spent.entry(self.name.clone()).or_default();
        t.runs += runs;
        t.steps += steps;
        t.tool_calls += tool_calls;
        let take = |l: &mut Option<u64>, n: u64| {
            if let Some(l) = l {
                *l = l.saturating_sub(n);
            }
        };
        if let Some(c) = cost {
            t.cost_usd = Some(t.cost_usd.unwrap_or(0.0) + c);
            if let Some(l) = &mut left.cost {
                *l = (*l - c).max(0.0);
            }
        }
        take(&mut left.steps, steps);
        take(&mut left.tool_calls, tool_calls);
        if let Some(usage) = usage {
            if let Some(u) = t.usage.add(usage.as_ref()) {
                t.usage = u;
            }
            if let Some(u) = usage {
                take(&mut left.input, u.input_tokens);
                take(&mut left.output, u.output_tokens);
                take(&mut left.total, u.input_tokens.saturating_add(u.output_tokens));
            }
        }
        Ok(())
    }
}

/// An [`Agent`] offered to another agent as the tool `name`, taking `{"task": string}`: each call runs the
/// agent on the task as a sub-agent of the calling run (see the [module](crate::subagent)) and returns its
/// answer. Calls may run concurrently with other parallel-safe calls when every tool of the agent is
/// parallel-safe (read-only).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use reins::{Agent, AgentTool, ModelResponse, Registry, ScriptedModel, Status, ToolCall};
/// let helper = Agent::builder(ScriptedModel::new(vec![ModelResponse::text("42")])).build().unwrap();
/// let tool = AgentTool::new("helper", "Answers questions.", helper).unwrap();
/// let parent = Agent::builder(ScriptedModel::new(vec![
///     ModelResponse::tool_calls("", vec![ToolCall::new("1", "helper", serde_json::json!({"task": "6 x 7?"}))]),
///     ModelResponse::text("It is 42."),
/// ]))
/// .registry(Registry::builder().tool(tool).build().unwrap())
/// .build()
/// .unwrap();
/// let outcome = parent.run("Ask the helper.", tokio_util::sync::CancellationToken::new()).await;
/// assert_eq!(outcome.status, Status::Completed);
/// assert_eq!(outcome.messages[2].content(), "42");
/// assert_eq!(outcome.agents["helper"].steps, 1);
/// # });
/// ```
pub struct AgentTool {
    name: Arc<str>,
    spec: ToolSpec,
    agent: Arc<Agent>,
    parallel: bool,
}

/// Why an [`AgentTool`] could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid sub-agent name {0:?}: names start with a letter and hold 1-64 letters, digits, '_' or '-'")]
pub struct AgentToolError(pub String);

impl AgentTool {
    /// The agent as the tool `name` with this description (what the parent's model is told it does).
    pub fn new(name: &str, description: &str, agent: Agent) -> Result<Self, AgentToolError> {
        Self::shared(name, description, Arc::new(agent))
    }

    /// The same with a shared agent.
    pub fn shared(name: &str, description: &str, agent: Arc<Agent>) -> Result<Self, AgentToolError> {
        if !is_valid_tool_name(name) {
            return Err(AgentToolError(name.to_owned()));
        }
        let spec = ToolSpec {
            name: name.to_owned(),
            description: description.to_owned(),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {"task": {"type": "string", "description": "What the sub-agent should do, in full: it sees nothing else of this conversation."}},
                "required": ["task"],
                "additionalProperties": false
            }),
        };
        let parallel = agent.all_tools_parallel_safe();
        Ok(AgentTool { name: Arc::from(name), spec, agent, parallel })
    }

    /// The agent it runs.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }
}

#[async_trait]
impl Tool for AgentTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// True when every tool of the sub-agent is parallel-safe (read-only): then its calls run concurrently.
    fn parallel_safe(&self) -> bool {
        self.parallel
    }

    fn sub_agent(&self) -> bool {
        true
    }

    /// True when every tool of the sub-agent is parallel-safe (reads only): `--approve writes` then asks for
    /// no call of it; a sub-agent that may write is asked for before it starts.
    fn read_only(&self) -> bool {
        self.parallel
    }

    async fn call(&self, arguments: serde_json::Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(task) = arguments.get("task").and_then(serde_json::Value::as_str) else {
            return Err(ToolError::InvalidArguments("`task` must be a string".into()));
        };
        let scope = SCOPE.try_with(Arc::clone).ok();
        let resume = scope.as_ref().and_then(|s| s.resumes.iter().find(|w| *w.call_id == *ctx.call_id)).cloned();
        let (limits, _running) = match &scope {
            Some(scope) => {
                let carved = scope.carve(self.agent.limits(), &ctx.call_id);
                // Waiting for a share hears the call's cancellation (the parent's, its deadline, the tool timeout).
                let carved = tokio::select! {
                    biased;
                    () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
                    c = carved => c,
                };
                let (limits, running) = carved
                    .map_err(|why| ToolError::failed(format!("sub-agent {:?} was not started: {why}", &*self.name)))?;
                (limits, Some(running))
            }
            None => (self.agent.limits().clone(), None),
        };
        let (state, spent) = self.state(task, resume, limits)?;
        let outcome = match &scope {
            Some(parent) => {
                let link = Link { name: Arc::clone(&self.name), parent: Arc::clone(parent) };
                self.agent.drive_linked(state, ctx.cancel.clone(), link).await
            }
            None => self.agent.drive(state, ctx.cancel.clone()).await,
        };
        self.answer(outcome, scope, &ctx, spent)
    }
}

impl AgentTool {
    /// The sub-agent's run for `task` under `limits`, and what its earlier runs for the same call spent: a new
    /// run, or a run that waited for decisions, decided since, continued with its batch under what its own
    /// limits have left after its runs so far.
    fn state(
        &self,
        task: &str,
        resume: Option<AgentWait>,
        limits: Limits,
    ) -> Result<(RunState, AgentTotals), ToolError> {
        let context = self.agent.context();
        let run_id = uuid::Uuid::new_v4().to_string();
        let (state, spent) = match resume {
            Some(wait) => {
                let failed =
                    |e: String| ToolError::failed(format!("sub-agent {:?} could not be continued: {e}", &*self.name));
                let spent = wait.spent;
                let limits = less(&limits, self.agent.limits(), &spent).map_err(failed)?;
                let mut state = RunState::resume_pending(run_id, wait.messages, wait.pending, limits, context)
                    .map_err(|e| failed(e.to_string()))?;
                state.count_earlier_steps(spent.steps);
                (state, spent)
            }
            None => {
                let state = RunState::new(run_id, task, limits, context)
                    .map_err(|e| ToolError::failed(format!("sub-agent {:?} was not started: {e}", &*self.name)))?;
                (state, AgentTotals::default())
            }
        };
        Ok((state.with_instructions(self.agent.instructions_shared(), context), spent))
    }

    /// The call's result from the sub-agent's outcome: its answer, or why it has none. A question its own
    /// approver did not answer goes to the parent's: the parent's batch waits for it (one level: a waiting
    /// run of its own sub-agents is not carried further up).
    fn answer(
        &self,
        outcome: Outcome,
        scope: Option<Arc<RunScope>>,
        ctx: &ToolContext,
        mut spent: AgentTotals,
    ) -> Result<ToolOutput, ToolError> {
        match outcome.status {
            Status::Completed => Ok(ToolOutput::Text(outcome.answer.unwrap_or_default())),
            Status::AwaitingApproval
                if !ctx.cancel.is_cancelled() && outcome.pending.iter().all(|p| p.sub_agent.is_none()) =>
            {
                let Some(scope) = scope else {
                    return Err(ToolError::failed(format!(
                        "sub-agent {:?} waits for a decision that nobody can give here: {}",
                        &*self.name,
                        outcome.error.as_deref().unwrap_or("awaiting approval")
                    )));
                };
                let waiting: Vec<&str> =
                    outcome.pending.iter().filter(|p| p.needs_decision()).map(|p| p.call_id.as_str()).collect();
                let message = format!("sub-agent {:?} waits for decisions about {}", &*self.name, waiting.join(", "));
                // Its steps are counted from its first run on (a continued run starts from the earlier ones).
                spent.add(&AgentTotals {
                    runs: 1,
                    steps: outcome.steps.saturating_sub(spent.steps),
                    tool_calls: outcome.tool_calls,
                    usage: outcome.usage,
                    cost_usd: outcome.cost_usd,
                });
                scope.ledger().waits.push(AgentWait {
                    agent: self.name.to_string(),
                    call_id: ctx.call_id.to_string(),
                    run_id: outcome.run_id,
                    messages: outcome.messages,
                    pending: outcome.pending,
                    spent,
                });
                Err(ToolError::failed(message))
            }
            Status::Aborted if ctx.cancel.is_cancelled() => Err(ToolError::Cancelled),
            status => Err(ToolError::failed(format!(
                "sub-agent {:?} ended {status}: {}",
                &*self.name,
                outcome.error.as_deref().unwrap_or("no answer")
            ))),
        }
    }
}
