//! The view built from real recorded sessions: bars with their timings and lanes, failures, marks, usage and
//! cost per step, the transcript; sessions recorded before costs per step; damaged entries.

mod common;

use common::{HOSTILE, recorded_session};
use reins_store::Store;

#[test]
fn a_recorded_session_becomes_bars_lanes_marks_steps_and_items() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let session = recorded_session(&store);
    let view = reins_view::build(&session);
    assert_eq!(view.runs.len(), 2);
    let run1 = &view.runs[0];
    assert_eq!(run1.status, "completed");
    let models: Vec<_> = run1.bars.iter().filter(|b| b.kind == "model").collect();
    assert_eq!(models.len(), 3, "one bar per model call");
    assert!(models.iter().all(|b| b.lane == 0 && !b.error && !b.open));
    // Step 1's three parallel calls overlap in time: each in a lane of its own.
    let tool = |id: &str| run1.bars.iter().find(|b| b.call_id.as_deref() == Some(id)).unwrap();
    let (p1, p2, p3, f1) = (tool("p1"), tool("p2"), tool("p3"), tool("f1"));
    let lanes: std::collections::BTreeSet<u32> = [p1.lane, p2.lane, p3.lane].into_iter().collect();
    assert_eq!(lanes.len(), 3, "parallel calls side by side: {p1:?} {p2:?} {p3:?}");
    assert!(p1.lane >= 1 && p2.lane >= 1 && p3.lane >= 1);
    assert!(p2.dur >= 39.0, "the slow call's duration is recorded: {}", p2.dur);
    assert!(p1.dur >= 29.0);
    assert!(f1.error && !p1.error, "the failing call is marked");
    assert!(f1.start + 0.5 >= p2.start, "the sequential call runs after the parallel group");
    assert_eq!(p1.step, 1);
    assert_eq!(tool("h1").step, 2);
    assert!(run1.lanes >= 4);
    // Every bar lies within the run's span, starts after the model call of its step.
    for b in &run1.bars {
        assert!(b.start >= -1.0 && b.start + b.dur <= run1.span_ms + 1.0, "{b:?} within {}", run1.span_ms);
    }
    assert!(p1.start + 1.0 >= models[0].start + models[0].dur);
    // The compaction: a bar and a mark.
    assert!(run1.bars.iter().any(|b| b.kind == "compaction" && b.lane == 0));
    assert!(run1.marks.iter().any(|m| m.kind == "compaction"));
    assert!(run1.marks.iter().any(|m| m.kind == "end" && m.label == "completed"));
    // The approval: asked for, then decided (before the call ran).
    let asked = run1.marks.iter().find(|m| m.label.starts_with("approval requested")).expect("a request mark");
    assert!(asked.kind == "approval" && asked.label.contains("slow (p2): slow needs a person"), "{asked:?}");
    let decided = run1.marks.iter().find(|m| m.label.starts_with("approve: slow (p2)")).expect("a decision mark");
    assert!(decided.t <= p2.start + 1.0);
    // Run 2: the failed model call in colour, the run's status.
    let run2 = &view.runs[1];
    assert_eq!(run2.status, "model_error");
    assert!(run2.bars.iter().any(|b| b.kind == "model" && b.error && b.detail.contains("boom")), "{:?}", run2.bars);
    // Steps: 3 + 1, usage and cost per step (prices were known).
    assert_eq!(view.steps.len(), 4);
    let s1 = &view.steps[0];
    assert_eq!(s1.usage.unwrap().input_tokens, 1200);
    let expected = common::prices().cost(&s1.usage.unwrap());
    assert!((s1.cost_usd.unwrap() - expected).abs() < 1e-12);
    assert_eq!(view.steps[1].usage.unwrap().cached_input_tokens, 1100);
    assert!(view.steps[3].error.as_deref().unwrap().contains("boom"));
    assert!(view.steps[3].cost_usd.is_none());
    // Items: the whole transcript, each tied to its run and step; the long result bounded with its size.
    assert_eq!(view.items.len() as u64, session.summary.messages);
    assert!(view.items.iter().any(|i| i.role == "summary"));
    let long = view.items.iter().find(|i| i.call_id.as_deref() == Some("h1")).unwrap();
    assert!(long.text.chars > reins_view::model::MAX_TEXT_CHARS);
    assert!(long.text.s.chars().count() <= reins_view::model::MAX_TEXT_CHARS);
    assert!(long.text.s.contains("characters omitted"));
    assert_eq!(long.tool.as_deref(), Some("echo"));
    let failed = view.items.iter().find(|i| i.call_id.as_deref() == Some("f1")).unwrap();
    assert!(failed.is_error && failed.text.s.contains(HOSTILE));
    assert_eq!(view.items.last().unwrap().run, 2);
    assert_eq!(s1.item, Some(1), "step 1 produced item 1");
    // Step 2's turn carried a reasoning item: the page says how many and to which API (never its opaque data).
    let with_reasoning: Vec<_> = view.items.iter().filter(|i| i.reasoning.is_some()).collect();
    assert_eq!(with_reasoning.len(), 1, "{:?}", view.items);
    let told = with_reasoning[0].reasoning.as_ref().unwrap();
    assert_eq!((told.items, told.api.as_str()), (1, "anthropic"));
    assert!(with_reasoning[0].calls.iter().any(|c| c.id == "h1"), "on the turn that called h1");
    let json = serde_json::to_string(&view).unwrap();
    assert_eq!(json.matches("redacted_thinking").count(), 0, "the item's data is not on the page");
}

#[test]
fn a_session_recorded_before_costs_per_step_still_views() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let mut session = common::long_session(&store, 3);
    for e in &mut session.entries {
        if let Some(obj) = e.data.as_object_mut() {
            obj.remove("cost_usd");
        }
    }
    let view = reins_view::build(&session);
    assert_eq!(view.steps.len(), 3);
    assert!(view.steps.iter().all(|s| s.cost_usd.is_none() && s.usage.is_some()));
    assert!(reins_view::session_html(&view).is_ok());
}

#[test]
fn damaged_entries_are_skipped_or_shown_as_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let mut session = common::long_session(&store, 3);
    for e in &mut session.entries {
        match e.kind.as_str() {
            "message" if e.msg_index == Some(1) => e.data = serde_json::json!({"role": 7}),
            "event" => e.data = serde_json::json!({"type": "tool_end", "ts": "not a time", "duration_ms": -1}),
            "response" => e.data = serde_json::json!({"step": "x", "response": [1]}),
            _ => {}
        }
    }
    let view = reins_view::build(&session);
    assert_eq!(view.items[1].role, "unreadable");
    assert!(view.runs[0].bars.is_empty(), "events without a time make no bar");
    assert!(reins_view::session_html(&view).is_ok());
}

#[test]
fn a_run_with_no_end_is_running_only_while_the_session_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let mut session = common::long_session(&store, 3);
    // The process died before the run's end was recorded: no end entry, no run_end event.
    session.entries.retain(|e| e.kind != "run_end" && e.data["type"] != "run_end");
    session.summary.status = "running".into();
    let view = reins_view::build(&session);
    assert_eq!(view.runs[0].status, "running");
    session.summary.status = "interrupted".into();
    assert_eq!(reins_view::build(&session).runs[0].status, "interrupted");
}
