//! A server's options beyond its transport, against real servers: `protocol` pins the revision spoken, and
//! `elicitation_defaults` answers a form with its defaults when nobody can be asked (this process registers no
//! elicitor, as a run without a terminal).

mod common;

use reins_mcp::{McpError, McpServer, ServerConfig};
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_revision_is_the_one_spoken_and_a_server_without_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    // The PyPI mcp 2.3.0 server speaks 2026-07-28 when let choose (tests/protocol.rs); pinned, 2025-11-25.
    let config = common::python_server("py", "", &log).protocol("2025-11-25").unwrap();
    let server = McpServer::connect(config).await.unwrap();
    assert_eq!(server.protocol_version(), "2025-11-25");
    let answer = server.call("add", json!({"a": 2, "b": 3}), &CancellationToken::new()).await.unwrap();
    assert_eq!(answer, reins::ToolOutput::Text("5".into()));
    server.shutdown().await;
    // server-everything speaks 2025-11-25 only: pinned to 2026-07-28, it is not let fall back to initialize.
    let err = McpServer::connect(common::everything("ev").protocol("2026-07-28").unwrap()).await.unwrap_err();
    assert!(matches!(err, McpError::Initialize { .. }), "{err:?}");
    // An unknown revision is refused with the known ones.
    let err = ServerConfig::http("web", "http://127.0.0.1:9/mcp").unwrap().protocol("2025-13-01").unwrap_err();
    assert!(
        err.to_string().contains("unknown protocol revision \"2025-13-01\" (known: 2026-07-28, 2025-11-25"),
        "{err}"
    );
}

fn eliciting(mode: &[&str]) -> ServerConfig {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/servers/eliciting_server.py");
    let args = std::iter::once(script.display().to_string()).chain(mode.iter().map(|m| (*m).to_owned())).collect();
    ServerConfig::stdio("el", common::python().display().to_string(), args).unwrap()
}

async fn ask(config: ServerConfig) -> String {
    let server = McpServer::connect(config).await.unwrap();
    let answer = server.call("ask", json!({}), &CancellationToken::new()).await.unwrap();
    server.shutdown().await;
    match answer {
        reins::ToolOutput::Text(t) => t,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nobody_to_ask_a_form_is_answered_with_its_defaults_only_when_configured_and_all_required_have_one() {
    // Every required field has a default: accepted with every default (the optional `colour` too, not `note`).
    let text = ask(eliciting(&["--defaults"]).elicitation_defaults(true)).await;
    let (got, note) = text.split_once('\n').unwrap();
    assert_eq!(got, r#"got {"action": "accept", "content": {"colour": "blue", "count": 2, "name": "Ada"}}"#);
    assert_eq!(
        note,
        "[MCP server \"el\" asked for input during this call; nobody could be asked, so it was accepted with the \
         form's defaults]"
    );
    // `count` is required and has no default: declined.
    let text = ask(eliciting(&[]).elicitation_defaults(true)).await;
    assert!(text.starts_with(r#"got {"action": "decline"}"#), "{text}");
    assert!(text.ends_with("it was declined (a required field has no default)]"), "{text}");
    // Without the option the capability is not declared: the server knows nobody can be asked.
    assert_eq!(ask(eliciting(&["--defaults"])).await, "nobody to ask");
}
