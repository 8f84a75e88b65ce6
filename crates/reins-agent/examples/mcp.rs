// Tools from an MCP server: cargo run -p reins-agent --example mcp (needs npx and OPENAI_API_KEY)
use reins_agent::AgentDef;
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The server's tools are registered as `fs__TOOL`; their schemas are checked at start-up, every call is validated
    // before it is sent, and the server runs in its own process group with a scrubbed environment.
    let agent = AgentDef::from_toml(
        r#"
        model = "openai:gpt-4.1-mini"
        instructions = "Answer from the files you can read."
        [mcp.fs]
        command = "npx"
        args = ["-y", "@modelcontextprotocol/server-filesystem", "."]
        startup_timeout = "60s"
        "#,
        std::path::Path::new("."),
    )?
    .build()
    .await?; // starts the server (a failure names it, with the end of its stderr)
    let outcome = agent.run("Which files are at the top of this directory?", CancellationToken::new()).await;
    agent.shutdown().await; // stops the server and its process group
    println!("{}: {}", outcome.status, outcome.answer.unwrap_or_default());
    Ok(())
}
