//! Finish reasons and cost in the core: a final answer cut by the response cap or refused is not
//! `completed`; a priced model's responses and run are priced, and `max_cost_usd` ends a run.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use reins::{
    Agent, Event, EventKind, FinishReason, Limits, Message, ModelResponse, Price, ScriptedModel, Status, Usage,
};

fn with_finish(mut r: ModelResponse, f: FinishReason) -> ModelResponse {
    r.finish_reason = Some(f);
    r
}

fn usage(input: u64, output: u64) -> Usage {
    Usage::new(input, output)
}

async fn run_collecting(agent_builder: reins::AgentBuilder) -> (reins::Outcome, Vec<Event>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let e = events.clone();
    let agent = agent_builder
        .observer(move |ev: &Event| {
            e.lock().unwrap().push(ev.clone());
            Ok(())
        })
        .build()
        .unwrap();
    let o = run(&agent).await;
    let events = events.lock().unwrap().clone();
    (o, events)
}

#[tokio::test]
async fn a_length_stop_is_truncated_with_the_partial_answer_kept() {
    let runs = Runs::default();
    let model = scripted(vec![
        with_finish(calls(vec![echo_call("1", "a")]), FinishReason::ToolCalls),
        with_finish(answer("The answer is cut mid-sen"), FinishReason::Length),
    ]);
    let (o, events) = run_collecting(agent_with(model, &runs, Limits::default())).await;
    is_status(&o, Status::Truncated);
    assert_ne!(o.status, Status::Completed);
    assert_eq!(o.answer.as_deref(), Some("The answer is cut mid-sen"));
    assert!(o.error.as_deref().unwrap().contains("response cap"), "{:?}", o.error);
    assert_eq!(o.finish_reason, Some(FinishReason::Length));
    assert_eq!(o.messages.last(), Some(&Message::assistant("The answer is cut mid-sen", vec![])));
    let finishes: Vec<Option<FinishReason>> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ModelEnd(end) => Some(end.finish_reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(finishes, vec![Some(FinishReason::ToolCalls), Some(FinishReason::Length)]);
    let json: serde_json::Value = serde_json::from_str(&events.last().unwrap().to_json()).unwrap();
    assert_eq!(json["status"], "truncated");
    let outcome_json = serde_json::to_value(&o).unwrap();
    assert_eq!(outcome_json["finish_reason"], "length");
    assert_coherent(&o);
}

#[tokio::test]
async fn a_refusal_or_a_filtered_answer_is_refused() {
    for (finish, why) in [(FinishReason::Refusal, "refused"), (FinishReason::ContentFilter, "content filter")] {
        let runs = Runs::default();
        let model = scripted(vec![with_finish(answer("I can't help with that."), finish.clone())]);
        let agent = agent_with(model, &runs, Limits::default()).build().unwrap();
        let o = run(&agent).await;
        is_status(&o, Status::Refused);
        assert_eq!(o.answer.as_deref(), Some("I can't help with that."));
        assert!(o.error.as_deref().unwrap().contains(why), "{:?}", o.error);
        assert_eq!(o.finish_reason, Some(finish));
    }
    // A natural stop, or a reason the engine does not know, completes.
    for finish in [FinishReason::Stop, FinishReason::Other("pause_turn_x".into())] {
        let runs = Runs::default();
        let agent =
            agent_with(scripted(vec![with_finish(answer("ok"), finish)]), &runs, Limits::default()).build().unwrap();
        is_status(&run(&agent).await, Status::Completed);
    }
}

#[test]
fn finish_reasons_serialize_as_plain_strings_and_read_either_form() {
    assert_eq!(serde_json::to_value(FinishReason::Length).unwrap(), "length");
    assert_eq!(serde_json::to_value(FinishReason::Other("pause_turn".into())).unwrap(), "pause_turn");
    let back: FinishReason = serde_json::from_value(serde_json::json!({"other": "x"})).unwrap();
    assert_eq!(back, FinishReason::Other("x".into()));
    let back: FinishReason = serde_json::from_value(serde_json::json!("content_filter")).unwrap();
    assert_eq!(back, FinishReason::ContentFilter);
}

fn priced(steps: Vec<ModelResponse>, price: Price) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(steps).with_price(price))
}

#[tokio::test]
async fn each_response_and_the_run_are_priced() {
    let runs = Runs::default();
    // $1 per million in, $10 per million out, cache reads $0.10, writes $1.25.
    let price = Price::new(1.0, 10.0).with_cache(0.1, 1.25);
    let first = Usage { input_tokens: 1000, cache_write_tokens: 800, output_tokens: 100, ..Default::default() };
    let second = Usage { input_tokens: 1200, cached_input_tokens: 800, output_tokens: 10, ..Default::default() };
    let model = priced(
        vec![calls(vec![echo_call("1", "a")]).with_usage(first), answer("done").with_usage(second), answer("x")],
        price,
    );
    let (o, events) = run_collecting(agent_with(model, &runs, Limits::default())).await;
    is_status(&o, Status::Completed);
    let c1 = (200.0 * 1.0 + 800.0 * 1.25 + 100.0 * 10.0) / 1e6;
    let c2 = (400.0 * 1.0 + 800.0 * 0.1 + 10.0 * 10.0) / 1e6;
    let per_response: Vec<f64> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ModelEnd(end) => end.cost_usd,
            _ => None,
        })
        .collect();
    assert_eq!(per_response.len(), 2);
    assert!((per_response[0] - c1).abs() < 1e-12 && (per_response[1] - c2).abs() < 1e-12, "{per_response:?}");
    assert!((o.cost_usd.unwrap() - (c1 + c2)).abs() < 1e-12);
    match &events.last().unwrap().kind {
        EventKind::RunEnd(end) => {
            assert!((end.cost_usd.unwrap() - (c1 + c2)).abs() < 1e-12);
            assert_eq!((end.usage.cached_input_tokens, end.usage.cache_write_tokens), (800, 800));
        }
        other => panic!("{other:?}"),
    }
    let json = serde_json::to_value(&o).unwrap();
    assert_eq!(json["usage"]["cache_read_tokens"], 800);
    assert_eq!(json["usage"]["cache_write_tokens"], 800);
    assert_eq!(json["usage"]["cached_input_tokens"], 800);
}

#[tokio::test]
async fn an_unpriced_model_has_no_cost() {
    let runs = Runs::default();
    let model = scripted(vec![answer("done").with_usage(usage(10, 2))]);
    let o = run(&agent_with(model, &runs, Limits::default()).build().unwrap()).await;
    assert_eq!(o.cost_usd, None);
    assert!(serde_json::to_value(&o).unwrap().get("cost_usd").is_none());
}

#[tokio::test]
async fn the_cost_limit_stops_a_run_after_the_response_that_passes_it() {
    let runs = Runs::default();
    // Each step costs $0.003 (1000 in at $1, 200 out at $10): the fourth passes $0.01.
    let step = || calls(vec![echo_call("1", "a")]).with_usage(usage(1000, 200));
    let model = priced(vec![step(), step(), step(), step(), step(), answer("never")], Price::new(1.0, 10.0));
    let limits = Limits { max_cost_usd: Some(0.01), ..Limits::default() };
    let (o, events) = run_collecting(agent_with(model.clone(), &runs, limits)).await;
    is_status(&o, Status::CostLimit);
    assert_eq!((o.steps, runs.get()), (4, 3), "the response over the limit runs no tool");
    assert!((o.cost_usd.unwrap() - 0.012).abs() < 1e-12);
    assert!(o.error.as_deref().unwrap().contains("max_cost_usd"), "{:?}", o.error);
    assert!(events.iter().any(|e| matches!(e.kind, EventKind::LimitHit { status: Status::CostLimit, .. })));
    assert_coherent(&o);
}

#[tokio::test]
async fn a_cost_limit_needs_a_priced_model_and_a_positive_amount() {
    let runs = Runs::default();
    let unpriced = scripted(vec![answer("x")]);
    let err = agent_with(unpriced, &runs, Limits { max_cost_usd: Some(1.0), ..Limits::default() }).build().err();
    assert!(err.unwrap().to_string().contains("price"));
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let m = priced(vec![answer("x")], Price::new(1.0, 1.0));
        let err = Agent::builder(m).limits(Limits { max_cost_usd: Some(bad), ..Limits::default() }).build().err();
        assert!(err.unwrap().to_string().contains("max_cost_usd"), "{bad}");
    }
}
