//! Sub-agents (`AgentTool`): budgets carved from the parent, usage rolled up, failures as error results,
//! events tagged, cancellation, own tools only, and read-only sub-agents running concurrently.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use reins::{
    Agent, AgentTool, Event, EventKind, Limits, ModelError, ModelResponse, Observer, ObserverError, Outcome, Registry,
    ScriptStep, Status, Usage,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Collects every event it hears.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<Event>>>);

impl Observer for Events {
    fn on_event(&self, event: &Event) -> Result<(), ObserverError> {
        self.0.lock().unwrap().push(event.clone());
        Ok(())
    }
}

impl Events {
    fn all(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }
    /// The `run_end` events of the sub-agent `name`.
    fn child_ends(&self, name: &str) -> Vec<Event> {
        self.all()
            .into_iter()
            .filter(|e| e.agent.as_deref() == Some(name) && matches!(e.kind, EventKind::RunEnd(_)))
            .collect()
    }
}

fn task(id: &str, agent: &str, text: &str) -> reins::ToolCall {
    call(id, agent, json!({ "task": text }))
}

/// A sub-agent named `name` with the core test tools (echo, fail, sleep: not all parallel-safe).
fn child(name: &str, steps: Vec<impl Into<ScriptStep>>, limits: Limits, runs: &Runs) -> AgentTool {
    let agent = Agent::builder_shared(scripted(steps)).registry(registry(runs)).limits(limits).build().unwrap();
    AgentTool::new(name, "A helper.", agent).unwrap()
}

/// A read-only sub-agent: its only tool is parallel-safe.
fn reader(name: &str, steps: Vec<impl Into<ScriptStep>>, runs: &Runs) -> AgentTool {
    let registry = Registry::builder().tool(echo(runs).parallel()).build().unwrap();
    let agent = Agent::builder_shared(scripted(steps)).registry(registry).limits(Limits::unlimited()).build().unwrap();
    AgentTool::new(name, "Reads.", agent).unwrap()
}

fn parent(steps: Vec<impl Into<ScriptStep>>, tools: Vec<AgentTool>, limits: Limits, events: &Events) -> Agent {
    let mut b = Registry::builder();
    for t in tools {
        b = b.tool(t);
    }
    Agent::builder_shared(scripted(steps))
        .registry(b.build().unwrap())
        .limits(limits)
        .observer(events.clone())
        .build()
        .unwrap()
}

fn result_of<'a>(o: &'a Outcome, call_id: &str) -> &'a reins::ToolResult {
    o.messages
        .iter()
        .find_map(|m| match m {
            reins::Message::ToolResult(r) if &*r.call_id == call_id => Some(r),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {call_id}: {:#?}", o.messages))
}

#[tokio::test]
async fn a_sub_agent_answers_and_its_usage_rolls_up_into_the_parent() {
    let runs = Runs::default();
    let events = Events::default();
    let helper = child(
        "helper",
        vec![
            calls(vec![echo_call("c1", "looked")]).with_usage(Usage::new(100, 10)),
            answer("found it").with_usage(Usage::new(200, 20)),
        ],
        Limits::default(),
        &runs,
    );
    let agent = parent(
        vec![
            calls(vec![task("p1", "helper", "look it up")]).with_usage(Usage::new(10, 1)),
            answer("done").with_usage(Usage::new(20, 2)),
        ],
        vec![helper],
        Limits::default(),
        &events,
    );
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_coherent(&o);
    let r = result_of(&o, "p1");
    assert!(!r.is_error);
    assert_eq!(r.content, "found it");
    assert_eq!(runs.get(), 1, "the sub-agent's own tool ran");
    // The parent's totals hold the sub-agent's usage; its own steps and calls stay its own.
    assert_eq!((o.usage.input_tokens, o.usage.output_tokens), (330, 33));
    assert_eq!(o.usage.calls_with_usage, 4);
    assert_eq!((o.steps, o.tool_calls), (2, 1));
    let h = &o.agents["helper"];
    assert_eq!((h.runs, h.steps, h.tool_calls), (1, 2, 1));
    assert_eq!((h.usage.input_tokens, h.usage.output_tokens, h.usage.total_tokens), (300, 30, 330));
    // The breakdown is what the sub-agent's own run reported at its end.
    let ends = events.child_ends("helper");
    assert_eq!(ends.len(), 1);
    let EventKind::RunEnd(end) = &ends[0].kind else { unreachable!() };
    let reins::RunEndData { status, steps, tool_calls, usage, answer, .. } = &**end;
    assert_eq!((*status, *steps, *tool_calls, *usage), (Status::Completed, h.steps, h.tool_calls, h.usage));
    // The top-level run_end carries the run's answer; a sub-agent's answer is its parent's tool result, content
    // left out like the other events' by default.
    assert_eq!(answer, &None);
    let last = events.all().pop().unwrap();
    let EventKind::RunEnd(end) = &last.kind else { panic!("{last:?}") };
    assert_eq!((last.agent.as_deref(), end.answer.as_deref()), (None, Some("done")));
    // The outcome file form carries the breakdown.
    let json = serde_json::to_value(&o).unwrap();
    assert_eq!(json["agents"]["helper"]["steps"], 2);
    assert_eq!(json["agents"]["helper"]["usage"]["input_tokens"], 300);
}

#[tokio::test]
async fn a_sub_agent_gets_no_more_steps_than_the_parent_has_left() {
    let runs = Runs::default();
    let events = Events::default();
    // Its own limit would allow 10 responses; it would loop for ever.
    let looping: Vec<ModelResponse> = (0..10).map(|i| calls(vec![echo_call(&format!("c{i}"), "again")])).collect();
    let helper = child("helper", looping, Limits { max_steps: Some(10), ..Limits::default() }, &runs);
    let agent = parent(
        vec![calls(vec![task("p1", "helper", "loop")]), answer("gave up")],
        vec![helper],
        Limits { max_steps: Some(5), ..Limits::default() },
        &events,
    );
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    // 5 steps: the parent's first response, then 3 for the helper (one is kept for the parent's answer).
    let h = &o.agents["helper"];
    assert_eq!(h.steps, 3);
    assert_eq!(o.steps + h.steps, 5);
    let r = result_of(&o, "p1");
    assert!(r.is_error);
    assert!(r.content.contains("sub-agent \"helper\" ended step_limit"), "{}", r.content);
    let ends = events.child_ends("helper");
    let EventKind::RunEnd(end) = &ends[0].kind else { panic!("{:?}", ends) };
    let reins::RunEndData { status: Status::StepLimit, steps: 3, .. } = **end else { panic!("{:?}", ends) };
}

#[tokio::test]
async fn a_sub_agent_gets_no_more_tool_calls_than_the_parent_has_left() {
    let runs = Runs::default();
    let events = Events::default();
    let helper = child(
        "helper",
        vec![calls(vec![echo_call("a", "1"), echo_call("b", "2"), echo_call("c", "3")])],
        Limits::default(),
        &runs,
    );
    let agent = parent(
        vec![calls(vec![task("p1", "helper", "three calls")]), answer("ok")],
        vec![helper],
        Limits { max_tool_calls: Some(3), ..Limits::default() },
        &events,
    );
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    // The parent spent 1 of 3: a batch of 3 does not fit the 2 left, and none of it runs.
    assert_eq!(runs.get(), 0);
    let r = result_of(&o, "p1");
    assert!(r.is_error && r.content.contains("ended tool_limit"), "{}", r.content);
    assert!(r.content.contains("does not fit the 2 left of max_tool_calls 2"), "{}", r.content);
}

#[tokio::test]
async fn a_sub_agent_cannot_start_when_the_parent_has_nothing_left() {
    let runs = Runs::default();
    let events = Events::default();
    let helper = child("helper", vec![answer("never")], Limits::default(), &runs);
    // Two steps: the parent's call and its answer; nothing is left for the helper.
    let agent = parent(
        vec![calls(vec![task("p1", "helper", "x")]), answer("alone")],
        vec![helper],
        Limits { max_steps: Some(2), ..Limits::default() },
        &events,
    );
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    let r = result_of(&o, "p1");
    assert!(r.is_error && r.content.contains("was not started"), "{}", r.content);
    assert!(o.agents.is_empty());
    assert!(events.all().iter().all(|e| e.agent.is_none()), "no run of the helper began");
}

#[tokio::test]
async fn a_sub_agents_token_use_counts_against_the_parents_token_limit() {
    let runs = Runs::default();
    let events = Events::default();
    let helper = child(
        "helper",
        vec![
            calls(vec![echo_call("a", "1")]).with_usage(Usage::new(40, 10)),
            calls(vec![echo_call("b", "2")]).with_usage(Usage::new(40, 10)),
            answer("x").with_usage(Usage::new(40, 10)),
        ],
        Limits::default(),
        &runs,
    );
    let agent = parent(
        vec![calls(vec![task("p1", "helper", "x")]).with_usage(Usage::new(10, 10)), answer("y")],
        vec![helper],
        Limits { max_total_tokens: Some(100), ..Limits::default() },
        &events,
    );
    let o = run(&agent).await;
    // The helper had 80 left: its second response passed it (usage is known only once a call returns, so
    // a run may pass its token limit by its last response: the helper ended token_limit, an error for the
    // parent); the parent then holds 20 + 100 > 100 and ends token_limit before another model call.
    let r = result_of(&o, "p1");
    assert!(r.is_error && r.content.contains("ended token_limit"), "{}", r.content);
    assert!(r.content.contains("max_total_tokens 80"), "{}", r.content);
    is_status(&o, Status::TokenLimit);
    assert_eq!(o.steps, 1);
    assert_eq!(o.usage.total_tokens, 120);
    assert_eq!(o.agents["helper"].usage.total_tokens, 100);
    assert_eq!(runs.get(), 1, "the helper's second batch was not admitted");
    assert_coherent(&o);
}

#[tokio::test]
async fn a_sub_agent_that_fails_is_an_error_result_and_the_parent_goes_on() {
    let runs = Runs::default();
    let events = Events::default();
    let helper = child(
        "helper",
        vec![ScriptStep::Fail(ModelError::Failed("the provider is down".into()))],
        Limits::default(),
        &runs,
    );
    let agent = parent(
        vec![calls(vec![task("p1", "helper", "x")]), answer("recovered")],
        vec![helper],
        Limits::default(),
        &events,
    );
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.answer.as_deref(), Some("recovered"));
    let r = result_of(&o, "p1");
    assert!(r.is_error);
    assert!(
        r.content.contains("sub-agent \"helper\" ended model_error: model call failed: the provider is down"),
        "{}",
        r.content
    );
}

#[tokio::test]
async fn a_sub_agents_events_are_tagged_and_it_sees_only_its_own_tools() {
    let runs = Runs::default();
    let events = Events::default();
    let helper = child("helper", vec![answer("hi")], Limits::default(), &runs);
    let agent =
        parent(vec![calls(vec![task("p1", "helper", "x")]), answer("ok")], vec![helper], Limits::default(), &events);
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    let all = events.all();
    let (mine, theirs): (Vec<&Event>, Vec<&Event>) = all.iter().partition(|e| e.run_id.as_ref() == o.run_id);
    assert!(mine.iter().all(|e| e.agent.is_none() && e.parent_run_id.is_none()));
    assert!(!theirs.is_empty());
    for e in &theirs {
        assert_eq!(e.agent.as_deref(), Some("helper"));
        assert_eq!(e.parent_run_id.as_deref(), Some(o.run_id.as_str()));
    }
    // Its tools are its own, not the parent's (which has only `helper`).
    let EventKind::RunStart(start) = &theirs[0].kind else { panic!("{:?}", theirs[0]) };
    assert_eq!(&start.tools, &["echo", "fail", "sleep", "stubborn"]);
    // The tags are in the JSON line and read back.
    let line = theirs[0].to_json();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["agent"], "helper");
    assert_eq!(v["parent_run_id"], o.run_id.as_str());
    assert_eq!(Event::from_json(&line).unwrap().agent.as_deref(), Some("helper"));
    assert!(!mine[0].to_json().contains("parent_run_id"));
}

#[tokio::test]
async fn cancelling_the_parent_reaches_the_sub_agent() {
    let runs = Runs::default();
    let events = Events::default();
    let helper = child(
        "helper",
        vec![ScriptStep::Delay(Duration::from_secs(600), Box::new(ScriptStep::Respond(answer("late"))))],
        Limits::default(),
        &runs,
    );
    let agent =
        parent(vec![calls(vec![task("p1", "helper", "x")]), answer("never")], vec![helper], Limits::default(), &events);
    let cancel = CancellationToken::new();
    let watch = events.clone();
    let trigger = cancel.clone();
    // Cancel once the sub-agent's model call has begun.
    tokio::spawn(async move {
        loop {
            if watch.all().iter().any(|e| e.agent.is_some() && matches!(e.kind, EventKind::ModelStart { .. })) {
                trigger.cancel();
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let o = tokio::time::timeout(Duration::from_secs(60), agent.run("go", cancel)).await.expect("cancelled promptly");
    is_status(&o, Status::Aborted);
    assert_coherent(&o);
    // The sub-agent's run was cut short with the batch (as every call of a cancelled batch is): its model
    // call never answered, and the parent records the call as aborted.
    let r = result_of(&o, "p1");
    assert!(r.is_error && r.content.starts_with("aborted"), "{}", r.content);
    assert!(events.child_ends("helper").is_empty());
    assert!(!events.all().iter().any(|e| e.agent.is_some() && matches!(e.kind, EventKind::ModelEnd(_))));
    // What it spent until then is still counted: one run begun.
    assert_eq!(o.agents["helper"].runs, 1);
}

/// Where each sub-agent run began and ended in the event stream.
fn spans(events: &[Event]) -> Vec<(String, usize, usize)> {
    let mut out: Vec<(String, usize, usize)> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let Some(agent) = &e.agent else { continue };
        match e.kind {
            EventKind::RunStart(_) => out.push((agent.to_string(), i, usize::MAX)),
            EventKind::RunEnd(_) => {
                if let Some(s) = out.iter_mut().find(|s| s.0 == agent.as_ref() && s.2 == usize::MAX) {
                    s.2 = i;
                }
            }
            _ => {}
        }
    }
    out
}

fn slow_answer(text: &str) -> ScriptStep {
    ScriptStep::Delay(Duration::from_millis(50), Box::new(ScriptStep::Respond(answer(text))))
}

#[tokio::test]
async fn read_only_sub_agents_run_concurrently_and_share_what_is_left() {
    let runs = Runs::default();
    let events = Events::default();
    let a = reader("a", vec![slow_answer("from a")], &runs);
    let b = reader("b", vec![slow_answer("from b")], &runs);
    assert!(reins::Tool::parallel_safe(&a), "all its tools are read-only");
    let agent = parent(
        vec![calls(vec![task("1", "a", "x"), task("2", "b", "y")]), answer("both")],
        vec![a, b],
        Limits { max_steps: Some(9), ..Limits::default() },
        &events,
    );
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(result_of(&o, "1").content, "from a");
    assert_eq!(result_of(&o, "2").content, "from b");
    // Both runs began before either ended: they overlapped.
    let s = spans(&events.all());
    assert_eq!(s.len(), 2, "{s:?}");
    assert!(s[0].1 < s[1].2 && s[1].1 < s[0].2, "the runs did not overlap: {s:?}");
    let steps: Vec<u64> = o.agents.values().map(|t| t.steps).collect();
    assert_eq!(steps, vec![1, 1]);
}

#[tokio::test]
async fn concurrent_sub_agents_together_get_no_more_than_the_parent_has_left() {
    let runs = Runs::default();
    let events = Events::default();
    let looping = |p: &str| -> Vec<ModelResponse> {
        (0..10).map(|i| calls(vec![echo_call(&format!("{p}{i}"), "again")])).collect()
    };
    let a = reader("a", looping("a"), &runs);
    let b = reader("b", looping("b"), &runs);
    let agent = parent(
        vec![calls(vec![task("1", "a", "x"), task("2", "b", "y")]), answer("both tried")],
        vec![a, b],
        Limits { max_steps: Some(9), ..Limits::default() },
        &events,
    );
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    // 7 left after the parent's first response and its answer, split in two with the remainder to the first:
    // 4 and 3, never 7 each.
    assert_eq!(o.agents["a"].steps, 4);
    assert_eq!(o.agents["b"].steps, 3);
    assert!(o.steps + o.agents.values().map(|t| t.steps).sum::<u64>() <= 9);
    for id in ["1", "2"] {
        let r = result_of(&o, id);
        assert!(r.is_error && r.content.contains("ended step_limit"), "{}", r.content);
    }
}

#[tokio::test]
async fn sub_agents_with_tools_that_write_run_one_after_the_other() {
    let runs = Runs::default();
    let events = Events::default();
    // `child` agents have tools that are not parallel-safe (fail, sleep): they must not overlap.
    let a = child("a", vec![slow_answer("from a")], Limits::default(), &runs);
    let b = child("b", vec![slow_answer("from b")], Limits::default(), &runs);
    assert!(!reins::Tool::parallel_safe(&a));
    let agent = parent(
        vec![calls(vec![task("1", "a", "x"), task("2", "b", "y")]), answer("both")],
        vec![a, b],
        Limits::default(),
        &events,
    );
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    let s = spans(&events.all());
    assert_eq!(s.len(), 2);
    assert!(s[0].2 < s[1].1, "the runs overlapped: {s:?}");
    assert_eq!(o.agents.len(), 2);
}

/// One dollar per million input tokens, nothing for output: usage (N, 0) costs N / 1e6 dollars.
fn dollar_per_mtok() -> reins::Price {
    reins::Price { input_per_mtok: 1.0, output_per_mtok: 0.0, cache_read_per_mtok: None, cache_write_per_mtok: None }
}

fn priced_child(name: &str, steps: Vec<impl Into<ScriptStep>>, runs: &Runs) -> AgentTool {
    let model = Arc::new(reins::ScriptedModel::new(steps).with_price(dollar_per_mtok()));
    let agent = Agent::builder_shared(model).registry(registry(runs)).limits(Limits::default()).build().unwrap();
    AgentTool::new(name, "A priced helper.", agent).unwrap()
}

fn priced_parent(steps: Vec<impl Into<ScriptStep>>, tool: AgentTool, limits: Limits, events: &Events) -> Agent {
    let model = Arc::new(reins::ScriptedModel::new(steps).with_price(dollar_per_mtok()));
    Agent::builder_shared(model)
        .registry(Registry::builder().tool(tool).build().unwrap())
        .limits(limits)
        .observer(events.clone())
        .build()
        .unwrap()
}

/// A sub-agent's cost rolls up into the parent's total, and the outcome breaks it down per agent.
#[tokio::test]
async fn a_sub_agents_cost_rolls_up_into_the_parents_cost() {
    let (runs, events) = (Runs::default(), Events::default());
    let helper = priced_child(
        "helper",
        vec![
            calls(vec![echo_call("c1", "x")]).with_usage(Usage::new(200_000, 0)),
            answer("found").with_usage(Usage::new(100_000, 0)),
        ],
        &runs,
    );
    let agent = priced_parent(
        vec![
            calls(vec![task("p1", "helper", "look")]).with_usage(Usage::new(50_000, 0)),
            answer("done").with_usage(Usage::new(50_000, 0)),
        ],
        helper,
        Limits { max_cost_usd: Some(5.0), ..Limits::default() },
        &events,
    );
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    let cost = o.cost_usd.expect("a priced run has a cost");
    assert!((cost - 0.4).abs() < 1e-9, "0.1 own + 0.3 of the helper: {cost}");
    let h = o.agents["helper"].cost_usd.expect("the helper's cost");
    assert!((h - 0.3).abs() < 1e-9, "{h}");
    let json = serde_json::to_value(&o).unwrap();
    assert!((json["agents"]["helper"]["cost_usd"].as_f64().unwrap() - 0.3).abs() < 1e-9, "{json}");
}

/// A sub-agent may spend no more than the parent has left under its cost limit; what it spent counts
/// against the parent's limit, which then stops the parent before another model call.
#[tokio::test]
async fn a_sub_agent_gets_no_more_money_than_the_parent_has_left() {
    let (runs, events) = (Runs::default(), Events::default());
    let helper = priced_child(
        "helper",
        vec![
            calls(vec![echo_call("a", "1")]).with_usage(Usage::new(500_000, 0)),
            calls(vec![echo_call("b", "2")]).with_usage(Usage::new(500_000, 0)),
            answer("x").with_usage(Usage::new(10, 0)),
        ],
        &runs,
    );
    let agent = priced_parent(
        vec![calls(vec![task("p1", "helper", "spend")]).with_usage(Usage::new(100_000, 0)), answer("y")],
        helper,
        Limits { max_cost_usd: Some(1.0), ..Limits::default() },
        &events,
    );
    let o = run(&agent).await;
    // The parent spent $0.10, so the helper had $0.90: its second response ($1.00 in all) passed it.
    let r = result_of(&o, "p1");
    assert!(r.is_error && r.content.contains("ended cost_limit"), "{}", r.content);
    assert_eq!(runs.get(), 1, "the helper's second batch was not admitted");
    let ends = events.child_ends("helper");
    assert_eq!(ends.len(), 1);
    let EventKind::RunEnd(end) = &ends[0].kind else { unreachable!() };
    assert_eq!(end.status, Status::CostLimit);
    // $0.10 + $1.00 > $1.00: the parent ends cost_limit without asking its model again.
    is_status(&o, Status::CostLimit);
    assert_eq!(o.steps, 1);
    assert!(o.error.as_deref().is_some_and(|e| e.contains("with the sub-agents' cost")), "{:?}", o.error);
    let cost = o.cost_usd.expect("cost");
    assert!((cost - 1.1).abs() < 1e-9, "{cost}");
    assert_coherent(&o);
}

#[tokio::test]
async fn one_step_left_for_two_sub_agents_together_goes_to_one_and_what_it_leaves_to_the_other() {
    // Before, one response left split in two gave each nothing: both were refused "not started". Now the
    // first takes it; the second waits for it and takes what it left (its model failed: it spent nothing).
    let runs = Runs::default();
    let events = Events::default();
    let a = reader(
        "a",
        vec![ScriptStep::Delay(
            Duration::from_millis(20),
            Box::new(ScriptStep::Fail(ModelError::Failed("down".into()))),
        )],
        &runs,
    );
    let b = reader("b", vec![ScriptStep::Respond(answer("from b"))], &runs);
    let agent = parent(
        vec![calls(vec![task("1", "a", "x"), task("2", "b", "y")]), answer("done")],
        vec![a, b],
        // The parent's first response and its answer: one left for the sub-agents.
        Limits { max_steps: Some(3), ..Limits::default() },
        &events,
    );
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    let r = result_of(&o, "1");
    assert!(r.is_error && r.content.contains("ended model_error"), "{}", r.content);
    assert_eq!(result_of(&o, "2").content, "from b", "the step the first left went to the second");
    assert_eq!(o.agents["b"].steps, 1);
    // Both runs began, the second after the first ended.
    let s = spans(&events.all());
    assert_eq!(s.len(), 2, "{s:?}");
}

#[tokio::test]
async fn sub_agents_together_split_what_is_left_with_the_remainder_to_the_first() {
    // Three responses left for two: the first gets 2 (enough for its call and its answer), the second 1.
    let runs = Runs::default();
    let events = Events::default();
    let two_steps = |p: &str| vec![calls(vec![echo_call(&format!("{p}1"), "look")]), answer(&format!("from {p}"))];
    let a = reader("a", two_steps("a"), &runs);
    let b = reader("b", two_steps("b"), &runs);
    let agent = parent(
        vec![calls(vec![task("1", "a", "x"), task("2", "b", "y")]), answer("done")],
        vec![a, b],
        Limits { max_steps: Some(5), ..Limits::default() },
        &events,
    );
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(result_of(&o, "1").content, "from a");
    let r = result_of(&o, "2");
    assert!(r.is_error && r.content.contains("ended step_limit"), "{}", r.content);
    assert_eq!((o.agents["a"].steps, o.agents["b"].steps), (2, 1));
    assert!(o.steps + o.agents.values().map(|t| t.steps).sum::<u64>() <= 5);
}
