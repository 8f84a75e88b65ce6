// A real model with workspace tools and a command: cargo run -p reins-agent --example real_provider (needs OPENAI_API_KEY)
use reins_agent::{AgentDef, Preset};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let agent = AgentDef::new("openai:gpt-4.1-mini")? // the key comes from OPENAI_API_KEY
        .workspace(".") // read_file, write_file, edit_file, list_dir, search
        .preset(Preset::new("test", "cargo", vec!["test".into(), "--offline".into()]))
        .instructions("Fix the failing test; run `test` to check.")
        .build()
        .await?; // provider, tools, default budget, pricing
    let outcome = agent.run("Make the tests pass", CancellationToken::new()).await;
    println!("{}: {}", outcome.status, outcome.answer.unwrap_or_default());
    Ok(())
}
