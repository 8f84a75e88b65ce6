// The core alone: your own model, tools, limits, policy and observer. Offline: cargo run -p reins --example core
use reins::{
    Agent, ContextConfig, Decision, Event, FnTool, Limits, ModelResponse, Registry, ScriptedModel, ToolCall, ToolOutput,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Any `Model` works here: a provider from reins-providers, your own, or this scripted one.
    let model = ScriptedModel::new([
        ModelResponse::tool_calls("", vec![ToolCall::new("1", "echo", serde_json::json!({"text": "hi"}))]),
        ModelResponse::tool_calls("", vec![ToolCall::new("2", "delete_everything", serde_json::json!({}))]),
        ModelResponse::text("Said hi; the other tool does not exist."),
    ]);
    let echo = FnTool::new(
        "echo",
        "Returns its text.",
        serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        |args, _ctx| async move { Ok(ToolOutput::Json(args["text"].clone())) },
    );
    let agent = Agent::builder(model)
        .instructions("You keep answers short.") // the system prompt of every run
        .registry(Registry::builder().tool(echo).build()?) // names, duplicates, schemas checked here
        .limits(Limits { max_steps: Some(20), max_tool_calls: Some(50), ..Limits::default() })
        .context(ContextConfig { max_context: Some(32_000), ..ContextConfig::default() })
        .policy(|_call: &ToolCall| Decision::Allow) // or Deny(reason), or Ask(reason) for a person
        .observer(|e: &Event| {
            eprintln!("{}", e.to_json()); // one JSON line per event, as `reins run --json` prints them
            Ok(())
        })
        .build()?;
    let outcome = agent.run("Say hi", tokio_util::sync::CancellationToken::new()).await;
    println!("{}: {}", outcome.status, outcome.answer.unwrap_or_default());
    Ok(())
}
