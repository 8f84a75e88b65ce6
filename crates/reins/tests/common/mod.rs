//! Shared helpers for the core's integration tests: real tools that count their runs.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reins::{
    Agent, AgentBuilder, FnTool, Limits, ModelResponse, Outcome, Registry, ScriptStep, ScriptedModel, Status, ToolCall,
    ToolError, ToolOutput,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub fn echo_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"], "additionalProperties": false})
}

/// Counts how many times tools actually ran.
#[derive(Clone, Default)]
pub struct Runs(pub Arc<AtomicUsize>);

impl Runs {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

pub fn echo(runs: &Runs) -> FnTool {
    let runs = runs.clone();
    FnTool::new("echo", "Returns its text.", echo_schema(), move |args, _ctx| {
        let runs = runs.clone();
        async move {
            runs.0.fetch_add(1, Ordering::SeqCst);
            Ok(ToolOutput::Json(args["text"].clone()))
        }
    })
}

pub fn fail(runs: &Runs) -> FnTool {
    let runs = runs.clone();
    FnTool::new(
        "fail",
        "Always fails.",
        json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
        move |args, _ctx| {
            let runs = runs.clone();
            async move {
                runs.0.fetch_add(1, Ordering::SeqCst);
                Err(ToolError::failed(args["message"].as_str().unwrap_or("failed").to_owned()))
            }
        },
    )
}

/// Sleeps `ms` milliseconds; honours cancellation unless `stubborn`.
pub fn sleeper(name: &str, runs: &Runs, stubborn: bool) -> FnTool {
    let runs = runs.clone();
    FnTool::new(
        name,
        "Sleeps.",
        json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}, "required": ["ms"]}),
        move |args, ctx| {
            let runs = runs.clone();
            async move {
                runs.0.fetch_add(1, Ordering::SeqCst);
                let d = Duration::from_millis(args["ms"].as_u64().unwrap_or(0));
                if stubborn {
                    // Ignores cancellation: a blocking-style wait the harness must not wait for.
                    tokio::time::sleep(d).await;
                } else {
                    tokio::select! {
                        _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
                        _ = tokio::time::sleep(d) => {}
                    }
                }
                Ok(ToolOutput::Text(format!("slept {}ms", d.as_millis())))
            }
        },
    )
}

pub fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall::new(id, name, args)
}

pub fn echo_call(id: &str, text: &str) -> ToolCall {
    call(id, "echo", json!({ "text": text }))
}

pub fn calls(r: Vec<ToolCall>) -> ModelResponse {
    ModelResponse::tool_calls("", r)
}

pub fn answer(text: &str) -> ModelResponse {
    ModelResponse::text(text)
}

pub fn registry(runs: &Runs) -> Registry {
    Registry::builder()
        .tool(echo(runs))
        .tool(fail(runs))
        .tool(sleeper("sleep", runs, false))
        .tool(sleeper("stubborn", runs, true))
        .build()
        .expect("test registry")
}

pub fn agent_with(model: Arc<ScriptedModel>, runs: &Runs, limits: Limits) -> AgentBuilder {
    Agent::builder_shared(model).registry(registry(runs)).limits(limits)
}

pub fn scripted(steps: Vec<impl Into<ScriptStep>>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(steps))
}

pub async fn run(agent: &Agent) -> Outcome {
    agent.run("do the task", CancellationToken::new()).await
}

/// Every assistant call has exactly one result, right after its turn, in call order; the first message is the user's.
pub fn assert_coherent(o: &Outcome) {
    reins::Transcript::from_messages(o.messages.clone(), &reins::CharCounter)
        .and_then(|t| {
            if t.is_complete() {
                Ok(())
            } else {
                Err(reins::TranscriptError { index: t.len(), reason: "incomplete".into() })
            }
        })
        .unwrap_or_else(|e| panic!("incoherent transcript ({:?}): {e}\n{:#?}", o.status, o.messages));
}

pub fn is_status(o: &Outcome, s: Status) {
    assert_eq!(o.status, s, "error: {:?}", o.error);
}
