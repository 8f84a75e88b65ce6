//! A client for the MCP conformance suite (`npx @modelcontextprotocol/conformance client --command ...`):
//! the suite appends the server URL and names the scenario in `MCP_CONFORMANCE_SCENARIO`. It connects with
//! reins-mcp over streamable HTTP and lets a scripted Reins run call every tool the server lists (through the
//! registry, so every call is validated first), then shuts down. Exit 0 when the run completed.
//!
//! Run: `crates/reins-mcp/conformance/run.sh` (see there).

use std::sync::Arc;

use reins::{Agent, ModelResponse, ScriptedModel, Status, ToolCall};
use reins_mcp::{McpTools, ServerConfig};
use tokio_util::sync::CancellationToken;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let Some(url) = std::env::args().next_back() else {
        eprintln!("usage: conformance_client URL");
        return std::process::ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    eprintln!("scenario {scenario:?}, server {url}");
    let config = match ServerConfig::http("conf", &url) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mcp = match McpTools::start(vec![config]).await {
        Ok(m) => Arc::new(m),
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(1);
        }
    };
    let calls: Vec<ToolCall> = mcp
        .tools()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let name = &t.spec().name;
            let args = if name.ends_with("__add_numbers") {
                serde_json::json!({"a": 5, "b": 3})
            } else {
                serde_json::json!({})
            };
            ToolCall::new(format!("c{i}"), name.clone(), args)
        })
        .collect();
    let mut turns = Vec::new();
    if !calls.is_empty() {
        turns.push(ModelResponse::tool_calls("", calls));
    }
    turns.push(ModelResponse::text("done"));
    let registry = match mcp.registry(Vec::new()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(1);
        }
    };
    let agent = match Agent::builder(ScriptedModel::new(turns)).registry(registry).build() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(1);
        }
    };
    let outcome = agent.run("call every tool", CancellationToken::new()).await;
    for m in &outcome.messages {
        if let reins::Message::ToolResult(r) = m {
            eprintln!("result {}: error={} {}", r.call_id, r.is_error, r.content);
        }
    }
    mcp.shutdown().await;
    if outcome.status == Status::Completed { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::from(1) }
}
