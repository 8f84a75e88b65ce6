// A sub-agent: one agent offered to another as a tool. Offline: cargo run -p reins --example subagents
use reins::{Agent, AgentTool, Limits, ModelResponse, Registry, ScriptedModel, ToolCall, Usage};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The sub-agent: its own model, tools, instructions and limits; it sees only the task it is given.
    let reader =
        Agent::builder(ScriptedModel::new([
            ModelResponse::text("The parser lives in src/parse.rs; it has no tests.").with_usage(Usage::new(200, 15))
        ]))
        .instructions("Read; never change anything. Answer in a few lines.")
        .build()?;
    // The parent calls it like any tool, with {"task": string}, and gets its final answer as the result.
    let parent = ScriptedModel::new([
        ModelResponse::tool_calls(
            "",
            vec![ToolCall::new("1", "reader", serde_json::json!({"task": "Where is the parser, and is it tested?"}))],
        )
        .with_usage(Usage::new(100, 20)),
        ModelResponse::text("The parser (src/parse.rs) has no tests: I would start there.")
            .with_usage(Usage::new(150, 12)),
    ]);
    let reader = AgentTool::new("reader", "Reads the code and reports what it finds.", reader)?;
    let agent = Agent::builder(parent)
        .registry(Registry::builder().tool(reader).build()?)
        .limits(Limits { max_steps: Some(10), ..Limits::default() }) // the sub-agent's steps count here too
        .build()?;
    let outcome = agent.run("What should I test first?", CancellationToken::new()).await;
    println!("{}: {}", outcome.status, outcome.answer.unwrap_or_default());
    for (name, spent) in &outcome.agents {
        println!("{name}: {} run(s), {} step(s)", spent.runs, spent.steps);
    }
    println!("tokens in all: {}", outcome.usage.input_tokens + outcome.usage.output_tokens);
    Ok(())
}
