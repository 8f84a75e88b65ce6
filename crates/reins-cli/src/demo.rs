//! `reins demo`: a scripted model drives a short, realistic session offline.

use std::sync::Arc;

use reins::{Agent, Limits, ModelResponse, Registry, ScriptedModel, ToolCall, Usage};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, code_for};
use crate::{render, test_tools};

fn call(id: &str, name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall::new(id, name, args)
}

/// The scripted turns of the demo.
fn script() -> Vec<ModelResponse> {
    vec![
        ModelResponse::tool_calls(
            "I'll announce the release, then check the build.",
            vec![call("call_1", "echo", json!({"text": "Release 0.1 is out: thanks, team!"}))],
        )
        .with_usage(Usage::new(120, 24)),
        // An invalid call: the wrong property name. The registry refuses it; the tool never runs.
        ModelResponse::tool_calls("", vec![call("call_2", "echo", json!({"txt": "Build status?"}))])
            .with_usage(Usage::new(170, 12)),
        // The model reads the error and recovers; two calls in one batch.
        ModelResponse::tool_calls(
            "My mistake: the property is `text`.",
            vec![
                call("call_3", "echo", json!({"text": "Build status?"})),
                call("call_4", "fail", json!({"message": "build server unreachable (simulated)"})),
            ],
        )
        .with_usage(Usage::new(260, 30)),
        ModelResponse::text(
            "Release announced. The build server could not be reached, so the build status is unknown; \
             please check it by hand.",
        )
        .with_usage(Usage::new(340, 28)),
    ]
}

/// `reins demo`.
pub async fn demo() -> Result<u8, CliError> {
    println!("reins demo — a scripted model proposes; Reins validates, runs, bounds and records.\n");
    let model = Arc::new(ScriptedModel::new(script()));
    let registry = Registry::new(test_tools::tools()).map_err(|e| CliError::Internal(e.into()))?;
    let agent = Agent::builder_shared(model.clone())
        .registry(registry)
        .limits(Limits { max_steps: Some(10), max_tool_calls: Some(10), ..Limits::default() })
        .observer(render::progress_stdout)
        .include_content(true)
        .build()
        .map_err(|e| CliError::Internal(e.into()))?;
    let cancel = CancellationToken::new();
    crate::run::cancel_on_ctrl_c(cancel.clone());
    let outcome = agent.run("Announce the release to the team and tell me the build status.", cancel).await;
    println!();
    if let Some(answer) = &outcome.answer {
        println!("answer: {answer}");
    }
    for line in render::status_lines(&outcome) {
        println!("{line}");
    }
    println!("\nThe invalid call (call_2) never reached the tool: the registry refused it with the JSON pointer of");
    println!("each offending value, the model recovered, and every call in the transcript has exactly one result.");
    Ok(code_for(outcome.status))
}
