// A person in the loop: a policy asks, an approver decides. Offline: cargo run -p reins --example approvals
use std::sync::Arc;

use reins::{
    Agent, ApprovalDecision, ApprovalError, ApprovalRequest, Approver, Decision, FnTool, ModelResponse, Registry,
    ScriptedModel, ToolCall, ToolOutput,
};
use tokio_util::sync::CancellationToken;

/// Decides as a person would; here: approve a deletion in tmp/, deny any other. (The `reins` command's approver
/// asks on the terminal; without one a run that asks ends `awaiting_approval`, for `reins approve` to decide.)
struct Reviewer;

#[async_trait::async_trait]
impl Approver for Reviewer {
    async fn decide(
        &self,
        request: &ApprovalRequest,
        _cancel: &CancellationToken,
    ) -> Result<Vec<ApprovalDecision>, ApprovalError> {
        let decide = |call: &reins::PendingCall| match call.arguments["path"].as_str() {
            Some(path) if path.starts_with("tmp/") => ApprovalDecision::approve(call),
            _ => ApprovalDecision::deny(call, "only files in tmp/ may go"),
        };
        Ok(request.calls.iter().map(decide).collect())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = ScriptedModel::new([
        ModelResponse::tool_calls(
            "",
            vec![
                ToolCall::new("1", "delete", serde_json::json!({"path": "tmp/cache.bin"})),
                ToolCall::new("2", "delete", serde_json::json!({"path": "src/main.rs"})),
            ],
        ),
        ModelResponse::text("Deleted tmp/cache.bin; src/main.rs was not mine to delete."),
    ]);
    let delete = FnTool::new(
        "delete",
        "Deletes a file (pretends to).",
        serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |args, _ctx| async move { Ok(ToolOutput::Text(format!("deleted {}", args["path"]))) },
    );
    let agent = Agent::builder(model)
        .registry(Registry::builder().tool(delete).build()?)
        .policy(|call: &ToolCall| match call.name.as_str() {
            "delete" => Decision::Ask("deletes a file".into()), // the batch waits for a decision
            _ => Decision::Allow,
        })
        .approver(Arc::new(Reviewer))
        .build()?;
    let outcome = agent.run("Clean up", CancellationToken::new()).await;
    for message in &outcome.messages {
        if let reins::Message::ToolResult(result) = message {
            println!("{}: {}", result.call_id, result.content);
        }
    }
    println!("{}: {}", outcome.status, outcome.answer.unwrap_or_default());
    Ok(())
}
