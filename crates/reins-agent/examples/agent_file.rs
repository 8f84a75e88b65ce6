// An agent file plus a tool of your own. Offline: cargo run -p reins-agent --example agent_file
use std::sync::Arc;

use reins::{ToolContext, ToolError, ToolOutput, TypedTool};
use reins_agent::AgentDef;
use tokio_util::sync::CancellationToken;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WordsArgs {
    text: String,
}

/// Counts the words of a text.
struct Words;
impl TypedTool for Words {
    type Args = WordsArgs;
    const NAME: &'static str = "words";
    const DESCRIPTION: &'static str = "Counts the words of a text.";
    async fn run(&self, args: WordsArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::Text(args.text.split_whitespace().count().to_string()))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The agent file's text (read one with reins_agent::agent_file); its script model calls `words`, then answers.
    // Put "openai:gpt-4.1-mini" as the model for a real one.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let def = AgentDef::from_toml(
        r#"
        model = "script:agent_file.json"
        instructions = "Count words with the words tool."
        [limits]
        max_steps = 5
        "#,
        &dir,
    )?;
    let mut parts = def.parts().await?; // the model, the file's tools, limits, context, pricing
    parts.tools.push(Arc::new(reins::typed(Words))); // plus yours
    let agent = parts.builder()?.build()?;
    let outcome = agent.run("How many words are in 'the model proposes'?", CancellationToken::new()).await;
    println!("{}: {}", outcome.status, outcome.answer.unwrap_or_default());
    Ok(())
}
