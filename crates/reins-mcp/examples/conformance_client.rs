//! A client for the MCP conformance suite (`npx @modelcontextprotocol/conformance client --command ...`):
//! the suite appends the server URL and names the scenario in `MCP_CONFORMANCE_SCENARIO` and the protocol
//! revision in `MCP_CONFORMANCE_PROTOCOL_VERSION`. It connects with reins-mcp over streamable HTTP, speaking
//! that revision (a server's `protocol` key), answering form elicitations with their defaults since nobody can be
//! asked (its `elicitation_defaults` key), and lets a scripted Reins run call every tool the server lists
//! (through the registry, so every call is validated first), then shuts down. Exit 0 when the run completed.
//!
//! The scripted model gives a tool the arguments the scenario names for it (`toolCalls` in
//! `MCP_CONFORMANCE_CONTEXT`; a null value left out, as a model corrected by Reins's validation would), else the
//! least arguments its input schema asks for ([`example_arguments`]): `add_numbers` gets two numbers, and the
//! `json_schema_echo` tool of the schema-preservation scenario gets the input schema Reins holds for the
//! scenario's other tool, which is what that scenario checks.
//!
//! Run: `crates/reins-mcp/conformance/run.sh` (see there).

use std::sync::Arc;

use reins::{Agent, ModelResponse, ScriptedModel, Status, ToolCall};
use reins_mcp::{McpTools, ServerConfig};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let Some(url) = std::env::args().next_back() else {
        eprintln!("usage: conformance_client URL");
        return std::process::ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let revision = std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION").ok().filter(|v| !v.is_empty());
    eprintln!("scenario {scenario:?}, revision {revision:?}, server {url}");
    let config = ServerConfig::http("conf", &url).map(|c| c.elicitation_defaults(true));
    let config = match (config, revision) {
        (Ok(c), Some(revision)) => c.protocol(&revision),
        (config, _) => config,
    };
    let config = match config {
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
    for warning in mcp.warnings() {
        eprintln!("warning: {warning}");
    }
    let completed = call_every_tool(&mcp).await;
    mcp.shutdown().await;
    if completed { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::from(1) }
}

/// A scripted run that calls every tool once, in one batch, then answers: true when it completed.
async fn call_every_tool(mcp: &Arc<McpTools>) -> bool {
    let tools = mcp.tools();
    let given = given_arguments();
    let schema_of =
        |suffix: &str| tools.iter().find(|t| t.spec().name.ends_with(suffix)).map(|t| t.spec().input_schema.clone());
    let calls: Vec<ToolCall> = tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let spec = t.spec();
            let remote = spec.name.split_once("__").map_or(spec.name.as_str(), |(_, t)| t);
            let args = if let Some(args) = given.get(remote) {
                args.clone()
            } else if spec.name.ends_with("__add_numbers") {
                json!({"a": 5, "b": 3})
            } else if spec.name.ends_with("__json_schema_echo") {
                json!({"schema": schema_of("__json_schema_2020_12_tool").unwrap_or_else(|| json!({}))})
            } else {
                example_arguments(&spec.input_schema)
            };
            ToolCall::new(format!("c{i}"), spec.name.clone(), args)
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
            return false;
        }
    };
    let agent = match Agent::builder(ScriptedModel::new(turns)).registry(registry).build() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return false;
        }
    };
    let outcome = agent.run("call every tool", CancellationToken::new()).await;
    for m in &outcome.messages {
        if let reins::Message::ToolResult(r) = m {
            eprintln!("result {}: error={} {}", r.call_id, r.is_error, r.content);
        }
    }
    outcome.status == Status::Completed
}

/// The arguments the scenario names for each tool (`{"toolCalls": [{"name", "arguments"}]}` in
/// `MCP_CONFORMANCE_CONTEXT`), null values left out.
fn given_arguments() -> std::collections::HashMap<String, Value> {
    let context = std::env::var("MCP_CONFORMANCE_CONTEXT").unwrap_or_default();
    let context: Value = serde_json::from_str(&context).unwrap_or(Value::Null);
    let calls = context.get("toolCalls").and_then(Value::as_array).into_iter().flatten();
    calls
        .filter_map(|call| {
            let name = call.get("name")?.as_str()?.to_owned();
            let args: Map<String, Value> = call
                .get("arguments")?
                .as_object()?
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            Some((name, Value::Object(args)))
        })
        .collect()
}

/// The least arguments `schema` asks for: each required property, valued by its `const`, `default`, first
/// `enum` value or first `examples` value, else a plain value of its type (an object's own required
/// properties likewise).
fn example_arguments(schema: &Value) -> Value {
    let mut out = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object);
    let required = schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str);
    for name in required {
        let field = properties.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
        out.insert(name.to_owned(), example_value(field));
    }
    Value::Object(out)
}

fn example_value(field: &Value) -> Value {
    for key in ["const", "default"] {
        if let Some(v) = field.get(key) {
            return v.clone();
        }
    }
    for key in ["enum", "examples"] {
        if let Some(v) = field.get(key).and_then(Value::as_array).and_then(|a| a.first()) {
            return v.clone();
        }
    }
    let kind = match field.get("type") {
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).find(|k| *k != "null").unwrap_or("null"),
        Some(Value::String(kind)) => kind.as_str(),
        _ => "string",
    };
    let least = |default: i64| field.get("minimum").and_then(Value::as_i64).unwrap_or(default);
    match kind {
        "integer" => json!(least(1)),
        "number" => json!(least(1) as f64 + 0.5),
        "boolean" => json!(true),
        "array" => json!([]),
        "object" => example_arguments(field),
        "null" => Value::Null,
        _ => {
            let n = field.get("minLength").and_then(Value::as_u64).unwrap_or(1).max(7);
            json!("example".chars().cycle().take(usize::try_from(n).unwrap_or(7)).collect::<String>())
        }
    }
}
