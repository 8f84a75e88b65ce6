//! MCP image content passes through: the npm `server-everything` tool `get-tiny-image` returns text and a
//! PNG; the run records the image in the tool result (not a placeholder), and the next model request has it.

mod common;

use std::sync::Arc;

use reins::{Agent, ModelResponse, ScriptedModel, Status, ToolCall};
use reins_mcp::McpTools;
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_image_reaches_the_model_as_an_image() {
    let mcp = McpTools::start(vec![common::everything("ev")]).await.unwrap();
    let registry = mcp.registry(Vec::new()).unwrap();
    let model = Arc::new(ScriptedModel::new(vec![
        ModelResponse::tool_calls("", vec![ToolCall::new("img", "ev__get-tiny-image", json!({}))]),
        ModelResponse::text("a logo"),
    ]));
    let agent = Agent::builder_shared(model.clone()).registry(registry).build().unwrap();
    let outcome = agent.run("show me", CancellationToken::new()).await;
    mcp.shutdown().await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    let result = &outcome.messages[2];
    assert_eq!(result.images().len(), 1, "{result:?}");
    let image = &result.images()[0];
    assert_eq!((image.media_type(), image.width(), image.height()), ("image/png", 20, 20));
    assert!(!result.content().contains("not shown"), "{}", result.content());
    assert!(result.content().contains("Here's the image you requested"), "{}", result.content());
    let second = &model.requests()[1];
    assert_eq!(second.messages.last().unwrap().images(), std::slice::from_ref(image));
}
