// Structured output: the final answer bound to a Rust type. Offline: cargo run -p reins --example structured
use reins::{Agent, ModelResponse, ScriptedModel, ToolCall};

/// The answer the run must end with; its JSON Schema (from `schemars`) is what the model must match.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Capital {
    country: String,
    city: String,
    population: u64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The model answers through the `final_answer` tool Reins offers: first with an invalid answer (the
    // population is not a number), which goes back to it with the schema's complaint, then with a valid one.
    let model = ScriptedModel::new([
        ModelResponse::tool_calls(
            "",
            vec![ToolCall::new(
                "c1",
                "final_answer",
                serde_json::json!({"country": "France", "city": "Paris", "population": "many"}),
            )],
        ),
        ModelResponse::tool_calls(
            "",
            vec![ToolCall::new(
                "c2",
                "final_answer",
                serde_json::json!({"country": "France", "city": "Paris", "population": 2_100_000}),
            )],
        ),
    ]);
    let agent = Agent::builder(model).build()?;
    let cancel = tokio_util::sync::CancellationToken::new();
    let (capital, outcome) = agent.run_typed::<Capital>("What is the capital of France?", cancel).await?;
    let Capital { country, city, population } = capital;
    println!("{city} is the capital of {country} ({population} people); {} steps, {}", outcome.steps, outcome.status);
    Ok(())
}
