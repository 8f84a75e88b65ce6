// The library in twenty lines: an agent with your own typed tool. Offline: cargo run -p reins --example hello
use reins::{Agent, ModelResponse, Registry, ScriptedModel, ToolCall, ToolContext, ToolError, ToolOutput, TypedTool};

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
        ModelResponse::tool_calls("", vec![ToolCall::new("c1", "add", serde_json::json!({"a": 2, "b": 3}))]),
        ModelResponse::text("2 + 3 = 5"),
    ]);
    let tools = Registry::builder().tool(reins::typed(Add)).build()?; // names and schemas checked here
    let agent = Agent::builder(model).registry(tools).build()?;
    let outcome = agent.run("What is 2 + 3?", tokio_util::sync::CancellationToken::new()).await;
    println!("{}: {}", outcome.status, outcome.answer.unwrap_or_default());
    Ok(())
}
