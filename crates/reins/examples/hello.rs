// The library in twenty lines: an agent with your own typed tool. Offline: cargo run -p reins --example hello
use reins::prelude::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

struct Add;
impl TypedTool for Add {
    type Args = AddArgs; // the JSON Schema the model sees is derived from this type
    const NAME: &'static str = "add";
    const DESCRIPTION: &'static str = "Adds two integers.";
    async fn run(&self, args: AddArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::Text((args.a + args.b).to_string()))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A scripted model plays the model's part; reins-agent builds a real one from "openai:gpt-4.1-mini".
    let model = ScriptedModel::new([
        ModelResponse::tool_calls("", vec![ToolCall::new("c1", "add", json!({"a": 2, "b": 3}))]),
        ModelResponse::text("2 + 3 = 5"),
    ]);
    let agent = Agent::builder(model).tool(typed(Add)).build()?; // names and schemas are checked here
    let outcome = agent.run("What is 2 + 3?", CancellationToken::new()).await;
    println!("{}: {}", outcome.status, outcome.answer.unwrap_or_default());
    Ok(())
}
