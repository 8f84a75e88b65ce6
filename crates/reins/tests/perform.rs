//! The performer: the way a step is done varies, the one driver stays (limits, cancellation, events).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures_util::future::BoxFuture;
use reins::{
    CallResult, FnTool, Limits, ModelError, ModelResponse, ModelStep, Performer, Registry, RunState, Status,
    ToolOutput, ToolStep,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Records each step it is handed, then performs it in process.
#[derive(Default)]
struct Recording {
    seen: Mutex<Vec<String>>,
    session: Option<String>,
}

impl Performer for Recording {
    fn model_call<'a>(
        &'a self,
        step: ModelStep,
        work: BoxFuture<'a, Result<ModelResponse, ModelError>>,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        self.seen.lock().unwrap().push(format!("model {} {}", step.step, step.summary));
        work
    }

    fn tool_call<'a>(&'a self, call: ToolStep<'a>, work: BoxFuture<'a, CallResult>) -> BoxFuture<'a, CallResult> {
        self.seen.lock().unwrap().push(format!("tool {} {} {}", call.step, call.call.id, call.idempotency_key()));
        work
    }

    fn session_id(&self) -> Option<&str> {
        self.session.as_deref()
    }
}

/// Answers from a record instead of doing the work (what a journal replay does).
struct Replaying {
    responses: Mutex<Vec<ModelResponse>>,
}

impl Performer for Replaying {
    fn model_call<'a>(
        &'a self,
        _step: ModelStep,
        _work: BoxFuture<'a, Result<ModelResponse, ModelError>>,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        let next = self.responses.lock().unwrap().remove(0);
        Box::pin(async move { Ok(next) })
    }

    fn tool_call<'a>(&'a self, call: ToolStep<'a>, _work: BoxFuture<'a, CallResult>) -> BoxFuture<'a, CallResult> {
        let content = format!("recorded {}", call.call.id);
        Box::pin(async move { CallResult::text(content, false) })
    }
}

/// Never finishes a tool call.
struct Stuck;

impl Performer for Stuck {
    fn model_call<'a>(
        &'a self,
        _step: ModelStep,
        work: BoxFuture<'a, Result<ModelResponse, ModelError>>,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        work
    }

    fn tool_call<'a>(&'a self, _call: ToolStep<'a>, _work: BoxFuture<'a, CallResult>) -> BoxFuture<'a, CallResult> {
        Box::pin(std::future::pending())
    }
}

fn state(prompt: &str) -> RunState {
    RunState::new("run-1", prompt, Limits::default(), &Default::default()).unwrap()
}

#[tokio::test]
async fn every_step_goes_through_the_performer_and_the_outcome_is_the_direct_one() {
    let script = || {
        vec![calls(vec![echo_call("a", "x"), echo_call("b", "y")]), calls(vec![echo_call("c", "z")]), answer("done")]
    };
    let runs = Runs::default();
    let direct = agent_with(scripted(script()), &runs, Limits::default()).build().unwrap();
    let expected = direct.drive(state("go"), CancellationToken::new()).await;
    let performer = Recording { session: Some("s 1".into()), ..Default::default() };
    let agent = agent_with(scripted(script()), &runs, Limits::default()).build().unwrap();
    let o = agent.drive_with(state("go"), CancellationToken::new(), &performer).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.messages, expected.messages);
    assert_eq!((o.steps, o.tool_calls), (expected.steps, expected.tool_calls));
    assert_eq!(
        *performer.seen.lock().unwrap(),
        vec![
            "model 1 false",
            "tool 1 a s%201/run-1/1/a",
            "tool 1 b s%201/run-1/1/b",
            "model 2 false",
            "tool 2 c s%201/run-1/2/c",
            "model 3 false"
        ]
    );
}

#[tokio::test]
async fn a_tool_sees_its_idempotency_key_and_rejected_calls_are_not_performed() {
    let keys = Arc::new(Mutex::new(Vec::new()));
    let k = keys.clone();
    let tool = FnTool::new("key", "Returns its key.", json!({"type": "object"}), move |_args, ctx| {
        let k = k.clone();
        async move {
            let key = ctx.idempotency_key();
            k.lock().unwrap().push(key.clone());
            Ok(ToolOutput::Text(key))
        }
    });
    let model =
        scripted(vec![calls(vec![call("c1", "key", json!({})), call("c2", "missing", json!({}))]), answer("done")]);
    let agent =
        reins::Agent::builder_shared(model).registry(Registry::builder().tool(tool).build().unwrap()).build().unwrap();
    let performer = Recording::default();
    let o = agent.drive_with(state("go"), CancellationToken::new(), &performer).await;
    is_status(&o, Status::Completed);
    assert_eq!(*keys.lock().unwrap(), vec!["run-1/1/c1".to_owned()]);
    assert_eq!(o.messages[2], reins::Message::tool_result("c1", "run-1/1/c1", false));
    assert!(performer.seen.lock().unwrap().iter().all(|s| !s.contains("c2")), "an unknown tool is not a step");
}

#[tokio::test]
async fn a_performer_may_answer_from_a_record_without_doing_the_work() {
    let runs = Runs::default();
    // The model has no response left: every step comes from the record.
    let agent = agent_with(scripted(Vec::<ModelResponse>::new()), &runs, Limits::default()).build().unwrap();
    let performer =
        Replaying { responses: Mutex::new(vec![calls(vec![echo_call("a", "x")]), answer("from the record")]) };
    let o = agent.drive_with(state("go"), CancellationToken::new(), &performer).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.answer.as_deref(), Some("from the record"));
    assert_eq!(runs.get(), 0, "the tool did not run");
    assert_eq!(o.messages[2], reins::Message::tool_result("a", "recorded a", false));
}

#[tokio::test]
async fn cancellation_and_the_deadline_stay_with_the_driver() {
    let runs = Runs::default();
    let agent = agent_with(scripted(vec![calls(vec![echo_call("a", "x")]), answer("never")]), &runs, Limits::default())
        .build()
        .unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.cancel();
    });
    let o = agent.drive_with(state("go"), cancel, &Stuck).await;
    is_status(&o, Status::Aborted);
    assert_coherent(&o);
    let limits = Limits { timeout: Some(Duration::from_millis(100)), ..Limits::default() };
    let agent = agent_with(scripted(vec![calls(vec![echo_call("a", "x")]), answer("never")]), &runs, limits.clone())
        .build()
        .unwrap();
    let st = RunState::new("run-2", "go", limits, &Default::default()).unwrap();
    let o = agent.drive_with(st, CancellationToken::new(), &Stuck).await;
    is_status(&o, Status::Timeout);
    assert_coherent(&o);
}
