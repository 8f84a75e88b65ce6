//! Context strategies: `drop` with its marker, and `summarize` (compaction by summary as a step of the
//! state machine): the invariants of every request, the fallbacks, the budgets, resume and the events.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use proptest::prelude::*;
use reins::{
    Agent, CharCounter, ContextConfig, ContextStrategy, Event, EventKind, FnModel, Limits, Message, Model, ModelError,
    ModelRequest, ModelResponse, Outcome, RunState, Status, Transcript, Usage,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const INSTRUCTIONS: &str = "You are a careful agent.";
const TASK: &str = "do the long task";

/// The run's model: `steps` tool calls whose results are `result_len` characters (varying with `sizes`),
/// then an answer. Records every request.
fn worker(steps: usize, sizes: Vec<usize>, log: Arc<Mutex<Vec<ModelRequest>>>) -> impl Model + 'static {
    let n = AtomicUsize::new(0);
    FnModel::new(move |req: &ModelRequest| {
        log.lock().unwrap().push(req.clone());
        let i = n.fetch_add(1, Ordering::SeqCst);
        if i >= steps {
            return Ok(ModelResponse::text("done").with_usage(Usage::new(10, 1)));
        }
        let len = if sizes.is_empty() { 40 } else { sizes[i % sizes.len()] };
        let text = format!("r{i}:{}", "x".repeat(len));
        Ok(calls(vec![echo_call(&format!("c{i}"), &text)]).with_usage(Usage::new(10, 1)))
    })
}

/// A summarizer that answers `text` and records every request.
fn summarizer(text: &'static str, log: Arc<Mutex<Vec<ModelRequest>>>) -> Arc<dyn Model> {
    Arc::new(FnModel::new(move |req: &ModelRequest| {
        log.lock().unwrap().push(req.clone());
        Ok(ModelResponse::text(text).with_usage(Usage::new(100, 5)))
    }))
}

fn summarize_ctx(budget: u64) -> ContextConfig {
    ContextConfig { max_context: Some(budget), strategy: ContextStrategy::Summarize, ..ContextConfig::default() }
}

#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<Event>>>);

impl reins::Observer for Events {
    fn on_event(&self, event: &Event) -> Result<(), reins::ObserverError> {
        self.0.lock().unwrap().push(event.clone());
        Ok(())
    }
}

/// Every call of the request has its result right after its turn, and no result lacks its call; the
/// first message is the task; the instructions are there.
fn check_request(req: &ModelRequest) {
    assert_eq!(req.instructions.as_deref(), Some(INSTRUCTIONS));
    let msgs = req.messages.to_vec();
    // The view agrees with itself: length, indexing, and iteration both ways.
    assert_eq!(msgs.len(), req.messages.len());
    assert_eq!(req.messages.iter().len(), msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(req.messages.get(i), Some(m));
    }
    assert_eq!(req.messages.get(msgs.len()), None);
    let back: Vec<&Message> = req.messages.iter().rev().collect();
    assert!(back.into_iter().eq(msgs.iter().rev()));
    assert_eq!(msgs.first(), Some(&Message::user(TASK)), "the first message is the task");
    let mut pending: Vec<String> = Vec::new();
    for m in &msgs {
        match m {
            Message::ToolResult(r) => {
                assert!(!pending.is_empty(), "a result without its call: {r:?}");
                assert_eq!(pending.remove(0), &*r.call_id, "results in call order");
            }
            other => {
                assert!(pending.is_empty(), "a call without its result before {other:?}");
                pending = other.tool_calls().iter().map(|c| c.id.to_string()).collect();
            }
        }
    }
    assert!(pending.is_empty(), "a call without its result at the end");
}

/// The share of requests (from the one after the first that holds a summary on) whose messages start with
/// the previous request's messages.
fn prefix_share(reqs: &[ModelRequest]) -> (usize, usize) {
    let Some(first) = reqs.iter().position(|r| matches!(r.messages.get(1), Some(Message::Summary { .. }))) else {
        return (0, 0);
    };
    let mut stable = 0;
    let mut n = 0;
    for w in reqs[first..].windows(2) {
        n += 1;
        let (a, b) = (w[0].messages.to_vec(), w[1].messages.to_vec());
        if b.len() >= a.len() && b[..a.len()] == a[..] {
            stable += 1;
        }
    }
    (stable, n)
}

async fn long_run(
    steps: usize,
    budget: u64,
    ctx: ContextConfig,
    summary: &'static str,
) -> (Outcome, Vec<ModelRequest>, Vec<ModelRequest>, Vec<Event>) {
    let runs = Runs::default();
    let log = Arc::new(Mutex::new(Vec::new()));
    let slog = Arc::new(Mutex::new(Vec::new()));
    let events = Events::default();
    let agent = Agent::builder(worker(steps, vec![40, 120, 15, 300], log.clone()))
        .instructions(INSTRUCTIONS)
        .registry(registry(&runs))
        .limits(Limits { max_steps: Some(steps as u64 + 1), ..Limits::default() })
        .context(ContextConfig { max_context: Some(budget), ..ctx })
        .compact_model(summarizer(summary, slog.clone()))
        .observer(events.clone())
        .build()
        .unwrap();
    let o = agent.run(TASK, CancellationToken::new()).await;
    let reqs = log.lock().unwrap().clone();
    let sreqs = slog.lock().unwrap().clone();
    let evs = events.0.lock().unwrap().clone();
    (o, reqs, sreqs, evs)
}

#[tokio::test]
async fn a_500_step_run_under_a_small_budget_completes_with_several_compactions() {
    let (o, reqs, sreqs, events) = long_run(500, 4000, summarize_ctx(4000), "the plan so far; files: a.rs").await;
    is_status(&o, Status::Completed);
    assert_coherent(&o);
    assert_eq!(o.steps, 501, "summary calls are not steps");
    assert!(o.compactions >= 5, "compactions: {}", o.compactions);
    assert_eq!(sreqs.len() as u64, o.compactions);
    let summaries = o.messages.iter().filter(|m| matches!(m, Message::Summary { .. })).count();
    assert_eq!(summaries as u64, o.compactions, "each compaction is one item of the transcript");
    // Usage of the summary calls is counted (100 in each), steps are not.
    assert_eq!(o.usage.input_tokens, 501 * 10 + 100 * o.compactions);
    let mut seen_summary = false;
    for r in &reqs {
        check_request(r);
        let size: u64 = r.messages.iter().map(|m| reins::transcript::measure(m, &CharCounter)).sum::<u64>()
            + INSTRUCTIONS.len() as u64;
        assert!(size <= 4000 + tools_size(), "request of {size} over the budget");
        if matches!(r.messages.get(1), Some(Message::Summary { .. })) {
            seen_summary = true;
        }
        if seen_summary {
            // From the first compaction on, every request holds the (newest) summary right after the task.
            let Some(Message::Summary { content, .. }) = r.messages.get(1) else { panic!("no summary") };
            assert!(content.contains("the plan so far"));
            assert_eq!(r.messages.iter().filter(|m| matches!(m, Message::Summary { .. })).count(), 1);
        }
    }
    assert!(seen_summary);
    // Between two compactions each request is the previous one plus what was appended.
    let (stable, n) = prefix_share(&reqs);
    assert!((n - stable) as u64 <= o.compactions, "prefix stable in {stable} of {n} requests");
    // Events: a start and an end for each compaction, and run_end carries the count.
    let starts = events.iter().filter(|e| matches!(e.kind, EventKind::CompactionStart { .. })).count();
    let ends: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::CompactionEnd(end) => {
                Some((end.chars_before, end.chars_after, end.fallback.clone(), end.usage, end.items))
            }
            _ => None,
        })
        .collect();
    assert_eq!(starts as u64, o.compactions);
    assert_eq!(ends.len() as u64, o.compactions);
    for (before, after, fallback, usage, items) in ends {
        assert!(after < before, "{after} !< {before}");
        assert!(fallback.is_none());
        assert_eq!(usage, Some(Usage::new(100, 5)));
        assert!(items > 0);
    }
    let Some(EventKind::RunEnd(end)) = events.last().map(|e| &e.kind) else { panic!("no run_end") };
    assert_eq!(end.compactions, o.compactions);
}

fn tools_size() -> u64 {
    // The budget covers the tool specs too; a generous bound for the test registry.
    2000
}

#[tokio::test]
async fn a_2000_step_run_under_a_32k_budget_keeps_a_stable_prefix() {
    let (o, reqs, _, _) = long_run(2000, 32_000, summarize_ctx(32_000), "the plan so far").await;
    is_status(&o, Status::Completed);
    let (stable, n) = prefix_share(&reqs);
    assert!(o.compactions >= 2, "{}", o.compactions);
    assert!(stable * 100 >= n * 95, "summarize: prefix stable in {stable} of {n} requests");
    eprintln!("summarize: prefix stable in {stable} of {n} requests, {} compactions", o.compactions);
    let ctx = ContextConfig { strategy: ContextStrategy::Drop, ..ContextConfig::default() };
    let (o, reqs, _, _) = long_run(2000, 32_000, ctx, "S").await;
    is_status(&o, Status::Completed);
    // Under drop, once the budget is full, the marker's count and the first kept group change every step.
    let first = reqs.iter().position(|r| r.messages.get(1).is_some_and(|m| m.role() == "summary")).unwrap();
    let dropped = reqs[first..]
        .windows(2)
        .filter(|w| {
            let (a, b) = (w[0].messages.to_vec(), w[1].messages.to_vec());
            b.len() >= a.len() && b[..a.len()] == a[..]
        })
        .count();
    let m = reqs.len() - first - 1;
    eprintln!("drop: prefix stable in {dropped} of {m} requests");
    assert!(dropped * 100 < m * 50, "drop: prefix stable in {dropped} of {m} requests");
}

#[tokio::test]
async fn the_summary_request_holds_exactly_the_groups_being_replaced() {
    let (o, _reqs, sreqs, _) = long_run(60, 3000, summarize_ctx(3000), "S").await;
    is_status(&o, Status::Completed);
    assert!(o.compactions >= 2);
    let t = Transcript::from_messages(o.messages.clone(), &CharCounter).unwrap();
    let msgs = t.to_vec();
    let mut prev_boundary = 1usize;
    let mut prev_summary: Option<usize> = None;
    let mut k = 0;
    for (idx, m) in msgs.iter().enumerate() {
        let Message::Summary { replaces, .. } = m else { continue };
        let req = &sreqs[k];
        k += 1;
        assert!(req.tools.is_empty(), "a summary call offers no tools");
        assert_eq!(req.instructions.as_deref(), Some(reins::DEFAULT_SUMMARY_PROMPT));
        let text = req.messages.get(0).unwrap().content().to_owned();
        assert!(text.contains(TASK), "the task is in the summary request");
        let upto = *replaces as usize + 1;
        // Every replaced call and result is in it; nothing kept is.
        for (j, item) in msgs.iter().enumerate().take(idx) {
            for c in item.tool_calls() {
                let inside = j >= prev_boundary && j < upto;
                assert_eq!(text.contains(&format!("[tool call {} ", c.id)), inside, "call {} (item {j})", c.id);
            }
        }
        if let Some(p) = prev_summary {
            assert!(text.contains("<summary>"), "the replaced summary is in the request (item {p})");
        }
        prev_boundary = upto;
        prev_summary = Some(idx);
    }
    assert_eq!(k, sreqs.len());
}

#[tokio::test]
async fn the_drop_strategy_tells_the_model_how_many_groups_were_left_out() {
    let ctx = ContextConfig { strategy: ContextStrategy::Drop, ..ContextConfig::default() };
    let (o, reqs, sreqs, _) = long_run(80, 3000, ctx, "S").await;
    is_status(&o, Status::Completed);
    assert_eq!(o.compactions, 0);
    assert!(sreqs.is_empty(), "drop makes no summary call");
    assert!(!o.messages.iter().any(|m| matches!(m, Message::Summary { .. })), "the marker is never recorded");
    let mut marked = 0;
    for r in &reqs {
        check_request(r);
        if let Some(Message::Summary { content, replaces }) = r.messages.get(1) {
            marked += 1;
            // The marker's count is the number of groups between the task and the first kept item.
            let next = r.messages.get(2).unwrap();
            let t = Transcript::from_messages(o.messages.clone(), &CharCounter).unwrap();
            let all = t.to_vec();
            assert_eq!(&all[*replaces as usize + 1], next);
            let groups = all[1..=*replaces as usize].iter().filter(|m| !matches!(m, Message::ToolResult(_))).count();
            assert!(content.starts_with(&format!("[{groups} earlier groups")), "{content}");
        }
    }
    assert!(marked > 50, "marked {marked}");
}

/// A summarizer that fails in the given way.
struct BadSummarizer(&'static str);

#[async_trait]
impl Model for BadSummarizer {
    async fn generate(&self, _req: &ModelRequest, cancel: &CancellationToken) -> Result<ModelResponse, ModelError> {
        match self.0 {
            "fail" => Err(ModelError::Failed("boom".into())),
            "hang" => {
                cancel.cancelled().await;
                Err(ModelError::Cancelled)
            }
            "long" => Ok(ModelResponse::text("y".repeat(5000)).with_usage(Usage::new(7, 7))),
            "empty" => Ok(ModelResponse::text("  ")),
            _ => Ok(calls(vec![echo_call("z", "no")])),
        }
    }
}

#[tokio::test]
async fn a_failing_hanging_or_overlong_summarizer_falls_back_to_the_marker() {
    for (how, why) in
        [("fail", "boom"), ("hang", "timed out"), ("long", "too long"), ("empty", "empty"), ("tools", "tool calls")]
    {
        let runs = Runs::default();
        let log = Arc::new(Mutex::new(Vec::new()));
        let events = Events::default();
        let ctx = ContextConfig { summary_timeout: Some(Duration::from_millis(50)), ..summarize_ctx(3000) };
        let agent = Agent::builder(worker(60, vec![100], log.clone()))
            .instructions(INSTRUCTIONS)
            .registry(registry(&runs))
            .context(ctx)
            .compact_model(Arc::new(BadSummarizer(how)))
            .observer(events.clone())
            .build()
            .unwrap();
        let o = agent.run(TASK, CancellationToken::new()).await;
        is_status(&o, Status::Completed);
        assert_coherent(&o);
        assert!(o.compactions >= 1, "{how}");
        for m in &o.messages {
            if let Message::Summary { content, .. } = m {
                assert!(content.contains("earlier groups of this conversation"), "{how}: {content}");
                assert!(content.contains("were left out"), "{how}: {content}");
            }
        }
        let fallbacks: Vec<String> = events
            .0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::CompactionEnd(end) => end.fallback.clone(),
                _ => None,
            })
            .collect();
        assert_eq!(fallbacks.len() as u64, o.compactions, "{how}");
        assert!(fallbacks.iter().all(|f| f.contains(why)), "{how}: {fallbacks:?}");
        for r in log.lock().unwrap().iter() {
            check_request(r);
        }
        if how == "long" {
            assert_eq!(o.usage.input_tokens, 60 * 10 + 10 + 7 * o.compactions, "its usage still counts");
        }
    }
}

#[tokio::test]
async fn a_summary_call_counts_towards_token_limits_but_not_max_steps() {
    let runs = Runs::default();
    let log = Arc::new(Mutex::new(Vec::new()));
    let slog = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder(worker(1000, vec![100], log.clone()))
        .instructions(INSTRUCTIONS)
        .registry(registry(&runs))
        .limits(Limits { max_steps: Some(40), max_input_tokens: Some(10_000), ..Limits::default() })
        .context(summarize_ctx(3000))
        .compact_model(Arc::new(FnModel::new(|_req: &ModelRequest| {
            Ok(ModelResponse::text("S").with_usage(Usage::new(20_000, 1)))
        })))
        .build()
        .unwrap();
    let o = agent.run(TASK, CancellationToken::new()).await;
    is_status(&o, Status::TokenLimit);
    assert_eq!(o.compactions, 1);
    assert!(o.steps < 40);
    assert_coherent(&o);

    // Without the token limit, max_steps counts only the run's own calls.
    let log = Arc::new(Mutex::new(Vec::new()));
    let slog2 = slog.clone();
    let agent = Agent::builder(worker(1000, vec![100], log.clone()))
        .instructions(INSTRUCTIONS)
        .registry(registry(&Runs::default()))
        .limits(Limits { max_steps: Some(40), ..Limits::default() })
        .context(summarize_ctx(3000))
        .compact_model(summarizer("S", slog2))
        .build()
        .unwrap();
    let o = agent.run(TASK, CancellationToken::new()).await;
    is_status(&o, Status::StepLimit);
    assert_eq!(o.steps, 40);
    assert!(o.compactions >= 1);
    assert_eq!(log.lock().unwrap().len(), 40);
}

#[tokio::test]
async fn the_runs_own_model_summarizes_when_no_compact_model_is_set() {
    let n = AtomicUsize::new(0);
    let model = FnModel::new(move |req: &ModelRequest| {
        if req.tools.is_empty() {
            assert_eq!(req.instructions.as_deref(), Some("my summary prompt"));
            return Ok(ModelResponse::text("own summary"));
        }
        let i = n.fetch_add(1, Ordering::SeqCst);
        if i >= 30 {
            return Ok(ModelResponse::text("done"));
        }
        Ok(calls(vec![echo_call(&format!("c{i}"), &"x".repeat(200))]))
    });
    let ctx = ContextConfig { summary_prompt: Some(Arc::from("my summary prompt")), ..summarize_ctx(2500) };
    let agent = Agent::builder(model).registry(registry(&Runs::default())).context(ctx).build().unwrap();
    let o = agent.run(TASK, CancellationToken::new()).await;
    is_status(&o, Status::Completed);
    assert!(o.compactions >= 1);
    assert!(
        o.messages.iter().any(|m| matches!(m, Message::Summary { content, .. } if content.contains("own summary")))
    );
}

#[tokio::test]
async fn a_resumed_transcript_keeps_its_compactions_and_the_view_they_make() {
    let (o, reqs, _, _) = long_run(40, 3000, summarize_ctx(3000), "S1").await;
    assert!(o.compactions >= 1);
    // The outcome round-trips through JSON with its summary items.
    let json = serde_json::to_string(&o.messages).unwrap();
    assert!(json.contains(r#""role":"summary""#));
    assert!(json.contains(r#""replaces":"#));
    let back: Vec<Message> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, o.messages);
    // Resumed: the next request is what the last one was plus the final answer and the new prompt.
    let ctx = summarize_ctx(3000);
    let mut state = RunState::resume("r2", back, Limits::default(), &ctx, "resumed")
        .unwrap()
        .with_instructions(Some(Arc::from(INSTRUCTIONS)), &ctx);
    state.push_user("go on", &ctx).unwrap();
    let registry = registry(&Runs::default());
    let reins::Action::CallModel(req) = state.next_action(&registry, &ctx) else { panic!("no model call") };
    let last = reqs.last().unwrap().messages.to_vec();
    let now = req.messages.to_vec();
    assert_eq!(&now[..last.len()], &last[..], "the resumed view continues the recorded one");
    assert_eq!(now[last.len()..].len(), 2);
}

#[tokio::test]
async fn a_compaction_on_request_summarizes_all_but_the_newest_group_and_ends_the_run() {
    // A finished conversation of three turns, as a chat holds it between turns.
    let c = &CharCounter;
    let mut t = Transcript::new(TASK, c);
    for (i, turn) in ["one", "two", "three"].iter().enumerate() {
        if i > 0 {
            t.push_user(*turn, c).unwrap();
        }
        t.push_assistant(format!("answer {turn}"), Vec::new(), c).unwrap();
    }
    let messages = t.to_vec();
    let ctx = summarize_ctx(100_000);
    // Refused where a summary would change nothing, or there is nothing to replace.
    let mut drop = RunState::resume("r", messages.clone(), Limits::default(), &ContextConfig::default(), "x").unwrap();
    assert!(drop.compact_now(&ContextConfig::default()).unwrap_err().contains("summarize"));
    let mut short = RunState::resume("r", messages[..2].to_vec(), Limits::default(), &ctx, "x").unwrap();
    assert!(short.compact_now(&ctx).unwrap_err().contains("nothing to compact"));

    let mut state = RunState::resume("r", messages.clone(), Limits::default(), &ctx, "x").unwrap();
    state.compact_now(&ctx).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let model = FnModel::new(move |_: &ModelRequest| {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(ModelResponse::text("never asked"))
    });
    let events = Events::default();
    let agent = Agent::builder(model)
        .compact_model(summarizer("the gist", Arc::clone(&log)))
        .context(ctx.clone())
        .observer(events.clone())
        .build()
        .unwrap();
    let o = agent.drive(state, CancellationToken::new()).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.answer, None);
    assert_eq!((o.steps, o.compactions, calls.load(Ordering::SeqCst)), (0, 1, 0), "no model call but the summary");
    // The summary replaces everything but the task and the newest group (a user message or an assistant turn
    // with its results is a group: here the last answer).
    let summary = o.messages.iter().position(|m| matches!(m, Message::Summary { .. })).unwrap();
    assert_eq!(summary, messages.len());
    assert!(matches!(&o.messages[summary], Message::Summary { content, replaces: 4 } if content.contains("the gist")));
    let sent = log.lock().unwrap()[0].messages.to_vec();
    assert!(sent[0].content().contains("[user]\nthree") && !sent[0].content().contains("answer three"));
    let ended = events
        .0
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(&e.kind, EventKind::CompactionEnd(end) if end.fallback.is_none()));
    assert!(ended, "a compaction_end event with the summary");
    // The next turn sees the task, the summary and the newest group, then its own message.
    let ctx2 = ctx.clone();
    let mut next = RunState::resume("r2", o.messages.clone(), Limits::default(), &ctx2, "x").unwrap();
    next.push_user("four", &ctx2).unwrap();
    let reins::Action::CallModel(req) = next.next_action(&reins::Registry::builder().build().unwrap(), &ctx2) else {
        panic!("no model call")
    };
    let seen: Vec<String> = req.messages.to_vec().iter().map(|m| m.content().to_owned()).collect();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen[1].contains("the gist") && seen[2] == "answer three" && seen[3] == "four", "{seen:?}");
}

#[test]
fn a_summary_that_splits_a_group_or_leaves_the_older_summary_is_refused() {
    let c = &CharCounter;
    let mut t = Transcript::new("task", c);
    t.push_assistant(String::new(), vec![echo_call("a", "1")], c).unwrap();
    // Not while a call waits for its result.
    assert!(t.push_summary("S", 1, c).is_err());
    t.push_result(reins::ToolResult::new("a", "1", false), c).unwrap();
    t.push_assistant(String::new(), vec![echo_call("b", "2")], c).unwrap();
    t.push_result(reins::ToolResult::new("b", "2", false), c).unwrap();
    // Not in the middle of a group (item 2 is the result of a).
    assert!(t.push_summary("S", 1, c).is_err());
    // Not more than precedes it.
    assert!(t.push_summary("S", 5, c).is_err());
    t.push_summary("S", 2, c).unwrap();
    t.push_assistant(String::new(), vec![echo_call("c", "3")], c).unwrap();
    t.push_result(reins::ToolResult::new("c", "3", false), c).unwrap();
    // A later summary must replace the earlier one too (item 5).
    assert!(t.push_summary("S2", 2, c).is_err());
    // Nor end inside a group (item 7 is the result of c).
    assert!(t.push_summary("S2", 6, c).is_err());
    t.push_summary("S2", 7, c).unwrap();
    let view = t.summary_view().unwrap().to_vec();
    assert_eq!(view.len(), 2);
    assert_eq!(view[1], Message::Summary { content: "S2".into(), replaces: 7 });
    // The same rules hold for a transcript read back.
    let mut bad = t.to_vec();
    bad.push(Message::Summary { content: "x".into(), replaces: 1 });
    assert!(Transcript::from_messages(bad, c).is_err());
    assert!(Transcript::from_messages(t.to_vec(), c).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]
    #[test]
    fn every_request_after_a_compaction_holds_the_summary_and_no_call_without_its_result(
        sizes in proptest::collection::vec(1usize..400, 1..12),
        batch in 1usize..4,
        steps in 5usize..80,
        budget in 1500u64..6000,
        at in 0.3f64..1.0,
        drop in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let log2 = log.clone();
        let n = AtomicUsize::new(0);
        let model = FnModel::new(move |req: &ModelRequest| {
            log2.lock().unwrap().push(req.clone());
            let i = n.fetch_add(1, Ordering::SeqCst);
            if i >= steps {
                return Ok(ModelResponse::text("done"));
            }
            let cs = (0..batch)
                .map(|b| echo_call(&format!("c{i}_{b}"), &"x".repeat(sizes[(i + b) % sizes.len()])))
                .collect();
            Ok(calls(cs))
        });
        let strategy = if drop { ContextStrategy::Drop } else { ContextStrategy::Summarize };
        let ctx = ContextConfig { max_context: Some(budget), strategy, compact_at: at, ..ContextConfig::default() };
        let agent = Agent::builder(model)
            .instructions(INSTRUCTIONS)
            .registry(registry(&Runs::default()))
            .limits(Limits { max_steps: Some(1000), ..Limits::default() })
            .context(ctx)
            .compact_model(Arc::new(FnModel::new(|_r: &ModelRequest| Ok(ModelResponse::text("summary")))))
            .build()
            .unwrap();
        let o = rt.block_on(agent.run(TASK, CancellationToken::new()));
        prop_assert!(matches!(o.status, Status::Completed | Status::ContextLimit), "{:?} {:?}", o.status, o.error);
        assert_coherent(&o);
        let mut compacted = false;
        for r in log.lock().unwrap().iter() {
            check_request(r);
            let summaries = r.messages.iter().filter(|m| m.role() == "summary").count();
            prop_assert!(summaries <= 1);
            if r.messages.get(1).is_some_and(|m| m.role() == "summary") && !drop {
                compacted = true;
            }
            if compacted {
                let held = matches!(r.messages.get(1), Some(Message::Summary { .. }));
                prop_assert!(held, "a request after a compaction without the summary");
            }
        }
        if drop {
            prop_assert_eq!(o.compactions, 0);
        } else {
            let recorded = o.messages.iter().filter(|m| m.role() == "summary").count() as u64;
            prop_assert_eq!(recorded, o.compactions);
        }
        let _ = json!({});
    }
}

/// A summary call is charged at the summary model's price, not the run model's; a summary model of unknown
/// price makes the run's cost unknown (never charged as the run model), and cannot run under `max_cost_usd`.
#[tokio::test]
async fn a_summary_is_charged_at_the_summary_models_own_price() {
    let c = &CharCounter;
    let mut t = Transcript::new(TASK, c);
    for turn in ["one", "two", "three"] {
        t.push_user(turn, c).unwrap();
        t.push_assistant(format!("answer {turn}"), Vec::new(), c).unwrap();
    }
    let messages = t.to_vec();
    let ctx = summarize_ctx(100_000);
    let cheap = reins::Price::new(1.0, 1.0);
    let dear = reins::Price::new(100.0, 1000.0);
    let summary = || ModelResponse::text("the gist").with_usage(Usage::new(1_000_000, 1_000));
    let run_with = |compact: reins::ScriptedModel, limits: Limits| {
        Agent::builder(reins::ScriptedModel::new(Vec::<ModelResponse>::new()).with_price(cheap))
            .compact_model(Arc::new(compact))
            .context(ctx.clone())
            .limits(limits)
            .build()
    };
    let state = || {
        let mut s = RunState::resume("r", messages.clone(), Limits::default(), &ctx, "x").unwrap();
        s.compact_now(&ctx).unwrap();
        s
    };
    let events = Events::default();
    let agent = Agent::builder(reins::ScriptedModel::new(Vec::<ModelResponse>::new()).with_price(cheap))
        .compact_model(Arc::new(reins::ScriptedModel::new(vec![summary()]).with_price(dear)))
        .context(ctx.clone())
        .observer(events.clone())
        .build()
        .unwrap();
    let o = agent.drive(state(), CancellationToken::new()).await;
    assert_eq!(o.compactions, 1);
    // 1M input at $100 and 1k output at $1000 per million: $101 (the run model's price would say $1.001).
    let cost = o.cost_usd.expect("priced");
    assert!((cost - 101.0).abs() < 1e-9, "{cost}");
    let event_cost = events.0.lock().unwrap().iter().find_map(|e| match &e.kind {
        EventKind::CompactionEnd(end) => Some(end.cost_usd),
        _ => None,
    });
    assert_eq!(event_cost, Some(Some(cost)), "compaction_end says what the summary cost");

    let unknown = run_with(reins::ScriptedModel::new(vec![summary()]), Limits::default()).unwrap();
    let o = unknown.drive(state(), CancellationToken::new()).await;
    assert_eq!((o.compactions, o.cost_usd), (1, None), "a summary of unknown price leaves the cost unknown");

    let limited = Limits { max_cost_usd: Some(5.0), ..Limits::default() };
    let err = run_with(reins::ScriptedModel::new(vec![summary()]), limited).err().expect("refused");
    assert!(err.to_string().contains("summary model's price"), "{err}");
}
