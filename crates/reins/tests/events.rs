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
        assert!(!line.contains("secret text") && !line.contains("the answer"), "no content by default: {line}");
        assert_eq!(Event::from_json(&line).unwrap(), Event { ts: Event::from_json(&line).unwrap().ts, ..e.clone() });
    }
    let ends: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolEnd { call_id, is_error, .. } => Some((call_id.clone(), *is_error)),
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
    assert!(matches!(events[n - 1].kind, EventKind::RunEnd { status: Status::ToolLimit, .. }));
}
