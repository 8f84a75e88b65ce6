//! The journal hook: what the driver hands a run's log, and when it waits for it.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use reins::{
    Agent, Event, FnTool, Journal, JournalError, Message, ModelError, ModelResponse, Outcome, Registry, RunJournal,
    RunState, ScriptedModel, Status, ToolCall, ToolOutput, ToolSpec,
};
use tokio_util::sync::CancellationToken;

/// Everything the log and the tool saw, in order.
#[derive(Clone, Default)]
struct Ops(Arc<Mutex<Vec<String>>>);

impl Ops {
    fn push(&self, op: impl Into<String>) {
        self.0.lock().unwrap().push(op.into());
    }
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

struct Recorder {
    ops: Ops,
    fail_flush: Option<usize>,
}

struct RecorderRun {
    ops: Ops,
    flushes: Mutex<usize>,
    fail_flush: Option<usize>,
}

#[async_trait]
impl Journal for Recorder {
    async fn start(&self, state: &RunState, tools: &[ToolSpec]) -> Result<Arc<dyn RunJournal>, JournalError> {
        self.ops.push(format!("start {} {}", state.transcript().len(), tools.len()));
        Ok(Arc::new(RecorderRun { ops: self.ops.clone(), flushes: Mutex::new(0), fail_flush: self.fail_flush }))
    }
}

#[async_trait]
impl RunJournal for RecorderRun {
    fn session_id(&self) -> &str {
        "s"
    }
    fn recorded(&self) -> usize {
        0
    }
    fn message(&self, index: usize, _: &Message) {
        self.ops.push(format!("message {index}"));
    }
    fn response(&self, step: u64, r: Result<&ModelResponse, &ModelError>) {
        self.ops.push(format!("response {step} {}", if r.is_ok() { "ok" } else { "error" }));
    }
    fn event(&self, _: &Event) {}
    async fn flush(&self) -> Result<(), JournalError> {
        let n = {
            let mut f = self.flushes.lock().unwrap();
            *f += 1;
            *f
        };
        self.ops.push("flush");
        match self.fail_flush {
            Some(k) if k == n => Err(JournalError("disk full".into())),
            _ => Ok(()),
        }
    }
    async fn finish(&self, o: &Outcome) -> Result<(), JournalError> {
        self.ops.push(format!("finish {}", o.status.as_str()));
        Ok(())
    }
}

fn agent(ops: &Ops, fail_flush: Option<usize>, script: Vec<ModelResponse>) -> Agent {
    let tool_ops = ops.clone();
    let echo = FnTool::new(
        "echo",
        "Returns its text.",
        serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        move |args, _ctx| {
            tool_ops.push("tool ran");
            async move { Ok(ToolOutput::Json(args["text"].clone())) }
        },
    );
    Agent::builder(ScriptedModel::new(script))
        .registry(Registry::builder().tool(echo).build().unwrap())
        .journal(Recorder { ops: ops.clone(), fail_flush })
        .build()
        .unwrap()
}

fn call(id: &str, name: &str) -> ToolCall {
    ToolCall::new(id, name, serde_json::json!({"text": "x"}))
}

#[tokio::test]
async fn the_log_is_flushed_before_each_model_call_and_each_batch_that_runs_a_call() {
    let ops = Ops::default();
    let a = agent(
        &ops,
        None,
        vec![
            ModelResponse::tool_calls("", vec![call("1", "echo")]),
            // Only a call to an unknown tool: refused, nothing runs, so no wait before this batch.
            ModelResponse::tool_calls("", vec![call("2", "nope")]),
            ModelResponse::text("done"),
        ],
    );
    let o = a.run("go", CancellationToken::new()).await;
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    assert_eq!(o.session_id.as_deref(), Some("s"));
    let expected = [
        "start 1 1",
        "message 0",
        "flush",
        "response 1 ok",
        "message 1",
        "flush",
        "tool ran",
        "message 2",
        "flush",
        "response 2 ok",
        "message 3",
        "message 4",
        "flush",
        "response 3 ok",
        "message 5",
        "flush",
        "finish completed",
    ];
    assert_eq!(ops.all(), expected);
    // Every transcript item was handed over exactly once, in order.
    assert_eq!(o.messages.len(), 6);
}

#[tokio::test]
async fn a_failed_flush_before_a_batch_runs_none_of_its_calls() {
    let ops = Ops::default();
    // The first flush (before the model call) succeeds; the second (before the batch) fails.
    let a =
        agent(&ops, Some(2), vec![ModelResponse::tool_calls("", vec![call("1", "echo")]), ModelResponse::text("x")]);
    let o = a.run("go", CancellationToken::new()).await;
    assert_eq!(o.status, Status::Aborted);
    assert!(o.error.as_deref().unwrap().contains("session log: disk full"), "{:?}", o.error);
    let all = ops.all();
    assert!(!all.iter().any(|op| op == "tool ran"), "{all:?}");
    assert_eq!(all.iter().filter(|op| op.starts_with("response")).count(), 1, "{all:?}");
    assert_eq!(all.last().map(String::as_str), Some("finish aborted"));
}
