//! Events: order, numbering, JSON form, no content unless opted in, contained observer failures.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use reins::{Event, EventKind, Limits, ObserverError, Status};
use serde_json::Value;

fn collect(events: &Arc<Mutex<Vec<Event>>>) -> impl Fn(&Event) -> Result<(), ObserverError> + use<> {
    let events = events.clone();
    move |e: &Event| {
        events.lock().unwrap().push(e.clone());
        Ok(())
    }
}

#[tokio::test]
async fn events_tell_the_whole_run_in_order() {
    let runs = Runs::default();
    let model = scripted(vec![
        calls(vec![echo_call("1", "secret text"), call("2", "echo", serde_json::json!({"bad": 1}))]),
        answer("the answer"),
    ]);
    let events = Arc::new(Mutex::new(Vec::new()));
    let agent = agent_with(model, &runs, Limits::default()).observer(collect(&events)).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    let events = events.lock().unwrap().clone();
    let types: Vec<String> = events
        .iter()
        .map(|e| serde_json::from_str::<Value>(&e.to_json()).unwrap()["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        types,
        [
            "run_start",
            "model_start",
            "model_end",
            "tool_start",
            "tool_end",
            "tool_start",
            "tool_end",
            "model_start",
            "model_end",
            "run_end"
        ]
    );
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64);
        assert_eq!(&*e.run_id, o.run_id.as_str());
        let line = e.to_json();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["v"], 1);
        assert!(v["ts"].as_str().unwrap().ends_with('Z'));
        // No content by default; `run_end` carries the answer, the run's result, all the same.
        let mut shown = v.clone();
        if v["type"] == "run_end" {
            assert_eq!(shown.as_object_mut().unwrap().remove("answer"), Some(Value::from("the answer")));
        }
        let shown = shown.to_string();
        assert!(!shown.contains("secret text") && !shown.contains("the answer"), "no content by default: {line}");
        assert_eq!(Event::from_json(&line).unwrap(), Event { ts: Event::from_json(&line).unwrap().ts, ..e.clone() });
    }
    let ends: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolEnd { call_id, is_error, .. } => Some((call_id.to_string(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(ends, [("1".to_owned(), false), ("2".to_owned(), true)]);
    let last: Value = serde_json::from_str(&events.last().unwrap().to_json()).unwrap();
    assert_eq!(last["status"], "completed");
    assert_eq!(last["steps"], 2);
    assert_eq!(last["tool_calls"], 2);
    assert_eq!(last["usage"]["calls_with_usage"], 0);
    assert!(last["duration_ms"].as_f64().unwrap() >= 0.0);
}

#[tokio::test]
async fn content_appears_only_when_opted_in() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("1", "secret text")]), answer("the answer")]);
    let events = Arc::new(Mutex::new(Vec::new()));
    let agent =
        agent_with(model, &runs, Limits::default()).observer(collect(&events)).include_content(true).build().unwrap();
    run(&agent).await;
    let all: String = events.lock().unwrap().iter().map(|e| e.to_json()).collect();
    assert!(all.contains("secret text") && all.contains("the answer") && all.contains("do the task"));
}

#[tokio::test]
async fn run_start_gives_the_instructions_length_and_their_text_only_with_content() {
    for content in [false, true] {
        let runs = Runs::default();
        let model = scripted(vec![answer("ok")]);
        let events = Arc::new(Mutex::new(Vec::new()));
        let agent = agent_with(model, &runs, Limits::default())
            .instructions("Règle: be brief.")
            .observer(collect(&events))
            .include_content(content)
            .build()
            .unwrap();
        run(&agent).await;
        let first: Value = serde_json::from_str(&events.lock().unwrap()[0].to_json()).unwrap();
        assert_eq!(first["type"], "run_start");
        assert_eq!(first["instructions_chars"], 16, "characters, not bytes");
        match content {
            true => assert_eq!(first["instructions"], "Règle: be brief."),
            false => assert!(first.get("instructions").is_none(), "{first}"),
        }
    }
    // No instructions: 0, and no text even with content.
    let runs = Runs::default();
    let events = Arc::new(Mutex::new(Vec::new()));
    let agent = agent_with(scripted(vec![answer("ok")]), &runs, Limits::default())
        .observer(collect(&events))
        .include_content(true)
        .build()
        .unwrap();
    run(&agent).await;
    let first: Value = serde_json::from_str(&events.lock().unwrap()[0].to_json()).unwrap();
    assert_eq!(first["instructions_chars"], 0);
    assert!(first.get("instructions").is_none());
}

#[tokio::test]
async fn failing_and_panicking_observers_never_change_the_outcome() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("1", "a")]), answer("done")]);
    let heard = Arc::new(Mutex::new(Vec::new()));
    let h = heard.clone();
    let agent = agent_with(model, &runs, Limits::default())
        .observer(|_e: &Event| -> Result<(), ObserverError> { panic!("observer bug") })
        .observer(|_e: &Event| Err(ObserverError("disk full".into())))
        .on_observer_error(move |i, e| h.lock().unwrap().push((i, e.0.clone())))
        .build()
        .unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(runs.get(), 1);
    let heard = heard.lock().unwrap();
    assert!(heard.iter().any(|(i, m)| *i == 0 && m.contains("observer bug")));
    assert!(heard.iter().any(|(i, m)| *i == 1 && m.contains("disk full")));
}

#[tokio::test]
async fn a_limit_hit_is_an_event_before_run_end() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("1", "a"), echo_call("2", "b")])]);
    let events = Arc::new(Mutex::new(Vec::new()));
    let agent = agent_with(model, &runs, Limits { max_tool_calls: Some(1), ..Limits::default() })
        .observer(collect(&events))
        .build()
        .unwrap();
    run(&agent).await;
    let events = events.lock().unwrap();
    let n = events.len();
    assert!(matches!(events[n - 2].kind, EventKind::LimitHit { status: Status::ToolLimit, .. }));
    assert!(matches!(&events[n - 1].kind, EventKind::RunEnd(end) if end.status == Status::ToolLimit));
}

/// When a tool's call began and ended (completed, or dropped when the run cut it short).
#[derive(Clone, Default)]
struct Ran(Arc<Mutex<(Option<std::time::Instant>, Option<std::time::Instant>)>>, Arc<tokio::sync::Notify>);

impl Ran {
    fn millis(&self) -> f64 {
        let (a, b) = *self.0.lock().unwrap();
        (b.expect("the call ended") - a.expect("the call began")).as_secs_f64() * 1000.0
    }
}

/// A tool that waits ten seconds (ignoring its cancellation token, like a blocking call would) and notes
/// when it began and when it ended.
fn long_tool(ran: &Ran) -> reins::FnTool {
    let ran = ran.clone();
    reins::FnTool::new("long", "Waits.", serde_json::json!({"type": "object"}), move |_args, _ctx| {
        let ran = ran.clone();
        async move {
            struct Ended(Ran);
            impl Drop for Ended {
                fn drop(&mut self) {
                    self.0.0.lock().unwrap().1 = Some(std::time::Instant::now());
                }
            }
            ran.0.lock().unwrap().0 = Some(std::time::Instant::now());
            let _ended = Ended(ran.clone());
            ran.1.notify_one();
            tokio::time::sleep(std::time::Duration::from_secs(10)).await;
            Ok(reins::ToolOutput::Text("done".into()))
        }
    })
}

#[tokio::test]
async fn a_call_cut_short_reports_the_time_it_ran() {
    use std::time::Duration;
    // Cancelled by the caller, cut by the run's deadline, and timed out by the per-tool timeout.
    for case in ["cancelled", "deadline", "tool_timeout"] {
        let ran = Ran::default();
        let model = scripted(vec![calls(vec![call("1", "long", serde_json::json!({}))]), answer("ok")]);
        let limits = match case {
            "deadline" => Limits { timeout: Some(Duration::from_millis(300)), ..Limits::default() },
            "tool_timeout" => Limits { tool_timeout: Some(Duration::from_millis(300)), ..Limits::default() },
            _ => Limits::default(),
        };
        let events = Arc::new(Mutex::new(Vec::new()));
        let agent = reins::Agent::builder_shared(model)
            .registry(reins::Registry::builder().tool(long_tool(&ran)).build().unwrap())
            .limits(limits)
            .observer(collect(&events))
            .build()
            .unwrap();
        let cancel = tokio_util::sync::CancellationToken::new();
        if case == "cancelled" {
            let (cancel, started) = (cancel.clone(), ran.1.clone());
            tokio::spawn(async move {
                started.notified().await;
                tokio::time::sleep(Duration::from_millis(300)).await;
                cancel.cancel();
            });
        }
        let o = agent.run("go", cancel).await;
        let expected = match case {
            "cancelled" => Status::Aborted,
            "deadline" => Status::Timeout,
            _ => Status::Completed,
        };
        is_status(&o, expected);
        let duration = events
            .lock()
            .unwrap()
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::ToolEnd { is_error: true, duration_ms, .. } => Some(*duration_ms),
                _ => None,
            })
            .expect("a tool_end with an error");
        let ran = ran.millis();
        assert!(duration >= ran, "{case}: tool_end says {duration} ms, the call ran {ran} ms");
        if case != "deadline" {
            assert!(duration >= 300.0, "{case}: {duration} ms");
        }
    }
}

/// Each `tool_end` names the call its `tool_start` named — in a parallel batch (three starts, then three
/// ends), one call at a time, and when a later turn reuses an id — and both events share the call's
/// strings rather than copies.
#[tokio::test]
async fn tool_events_pair_up_in_parallel_and_sequential_batches() {
    let runs = Runs::default();
    let registry =
        reins::Registry::builder().tool(echo(&runs).parallel()).tool(fail(&runs).parallel()).build().unwrap();
    let model = scripted(vec![
        calls(vec![echo_call("a", "x"), call("b", "fail", serde_json::json!({"message": "no"})), echo_call("c", "y")]),
        calls(vec![echo_call("d", "z")]),
        calls(vec![call("a", "fail", serde_json::json!({"message": "again"}))]),
        answer("done"),
    ]);
    let events = Arc::new(Mutex::new(Vec::new()));
    let agent = reins::Agent::builder_shared(model).registry(registry).observer(collect(&events)).build().unwrap();
    is_status(&run(&agent).await, Status::Completed);
    let events = events.lock().unwrap().clone();
    let mut order = Vec::new();
    let mut open: Vec<(Arc<str>, Arc<str>)> = Vec::new();
    for e in &events {
        match &e.kind {
            EventKind::ToolStart { call_id, name, .. } => {
                order.push(format!("start {call_id} {name}"));
                open.push((call_id.clone(), name.clone()));
            }
            EventKind::ToolEnd { call_id, name, is_error, .. } => {
                order.push(format!("end {call_id} {name} {is_error}"));
                let i = open.iter().position(|(id, _)| id == call_id).expect("a start before each end");
                let (id, n) = open.remove(i);
                assert!(Arc::ptr_eq(&id, call_id) && Arc::ptr_eq(&n, name), "shared strings for {call_id}");
            }
            _ => {}
        }
    }
    assert!(open.is_empty(), "every start has its end: {open:?}");
    // An end is dated no earlier than its start plus its duration (exactly that for a model call and
    // for a call run alone; a call of a parallel batch may begin after the batch's start).
    let ms_between = |a: &Event, b: &Event| b.ts.duration_since(a.ts).unwrap().as_secs_f64() * 1000.0;
    for w in events.windows(2) {
        match (&w[0].kind, &w[1].kind) {
            (EventKind::ModelStart { .. }, EventKind::ModelEnd(end)) => {
                assert!((ms_between(&w[0], &w[1]) - end.duration_ms).abs() < 1e-3, "{:?} then {:?}", w[0], w[1]);
            }
            (EventKind::ToolStart { call_id: a, .. }, EventKind::ToolEnd { call_id: b, duration_ms, .. }) if a == b => {
                assert!((ms_between(&w[0], &w[1]) - duration_ms).abs() < 1e-3, "{:?} then {:?}", w[0], w[1]);
            }
            _ => {}
        }
    }
    for (i, e) in events.iter().enumerate() {
        if let EventKind::ToolEnd { call_id, duration_ms, .. } = &e.kind {
            let start = events[..i]
                .iter()
                .rev()
                .find(|s| matches!(&s.kind, EventKind::ToolStart { call_id: id, .. } if id == call_id))
                .unwrap();
            assert!(ms_between(start, e) >= duration_ms - 1e-3, "{start:?} then {e:?}");
        }
        if i > 0 {
            assert!(e.ts >= events[i - 1].ts, "in time order: {:?} then {e:?}", events[i - 1]);
        }
    }
    assert_eq!(
        order,
        [
            "start a echo",
            "start b fail",
            "start c echo",
            "end a echo false",
            "end b fail true",
            "end c echo false",
            "start d echo",
            "end d echo false",
            "start a fail",
            "end a fail true",
        ]
    );
}
