//! What an MCP server says back is masked before Reins records it: a server that echoes one of its `env`
//! values (here `shout`, which upper-cases its text, given the lower-case of the value) in a result, in an error
//! and in a tool's description never hands the value on.

mod common;

use reins_mcp::{McpServer, Transport};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const SECRET: &str = "MCP-ENV-SECRET-VALUE-42";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_echoing_its_env_value_is_masked_in_results_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::python_server("py", "", &dir.path().join("calls.log"));
    let Transport::Stdio { env, .. } = &mut config.transport else { unreachable!() };
    env.insert("PY_SERVER_TOKEN".into(), SECRET.into());
    let server = McpServer::connect(config).await.unwrap();
    let cancel = CancellationToken::new();

    let out = server.call("shout", json!({"text": SECRET.to_lowercase()}), &cancel).await.unwrap();
    assert_eq!(out.into_text(), "<redacted>");
    let ok = server.call("shout", json!({"text": "nothing secret"}), &cancel).await.unwrap();
    assert_eq!(ok.into_text(), "NOTHING SECRET", "other text passes unchanged");
    // The server's error names the tool it does not know: the value, masked.
    let e = server.call(SECRET, json!({}), &cancel).await.unwrap_err().to_string();
    assert!(e.contains("unknown tool <redacted>") && !e.contains(SECRET), "{e}");
    server.shutdown().await;
}
