//! reins-mcp over streamable HTTP, against `@modelcontextprotocol/server-everything` serving on 127.0.0.1.

mod common;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use reins::{Agent, Message, ModelResponse, ScriptedModel, Status, ToolCall};
use reins_mcp::{McpError, McpTools, ServerConfig};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

/// server-everything over streamable HTTP on a free local port; killed when dropped.
struct HttpServer {
    child: tokio::process::Child,
    url: String,
}

async fn start_everything_http() -> HttpServer {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let script = common::node_modules().join("@modelcontextprotocol/server-everything/dist/index.js");
    let mut child = tokio::process::Command::new("node")
        .arg(script)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("listening on port") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(ready, Ok(true), "server-everything did not start serving HTTP");
    // Keep draining its stderr so that it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    HttpServer { child, url: format!("http://127.0.0.1:{port}/mcp") }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_run_uses_an_http_server_end_to_end() {
    let server = start_everything_http().await;
    let config = ServerConfig::parse_spec(&format!("web={}", server.url)).unwrap();
    let mcp = McpTools::start(vec![config.startup_timeout(Duration::from_secs(60))]).await.unwrap();
    let registry = mcp.registry(Vec::new()).unwrap();
    assert!(registry.get("web__get-sum").is_some(), "{registry:?}");
    // server/discover is answered with an error over HTTP too: the initialize handshake follows.
    assert_eq!(mcp.servers()[0].protocol_version(), "2025-11-25");
    let model = Arc::new(ScriptedModel::new(vec![
        ModelResponse::tool_calls(
            "",
            vec![
                ToolCall::new("sum", "web__get-sum", json!({"a": 20, "b": 22})),
                ToolCall::new("echo", "web__echo", json!({"message": "over http"})),
                ToolCall::new("bad", "web__get-sum", json!({"a": "twenty"})),
                ToolCall::new("weather", "web__get-structured-content", json!({"location": "Chicago"})),
            ],
        ),
        ModelResponse::text("done"),
    ]));
    let agent = Agent::builder_shared(model).registry(registry).build().unwrap();
    let outcome = agent.run("go", CancellationToken::new()).await;
    mcp.shutdown().await;
    drop(server);

    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    let results: Vec<_> = outcome
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 4);
    assert!(!results[0].is_error && results[0].content.contains("42"), "{:?}", results[0]);
    assert!(!results[1].is_error && results[1].content.contains("over http"), "{:?}", results[1]);
    assert!(results[2].is_error && results[2].content.contains("invalid arguments"), "{:?}", results[2]);
    assert!(!results[3].is_error && results[3].content.to_lowercase().contains("temperature"), "{:?}", results[3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_that_dies_mid_call_or_never_answers_gives_errors_not_a_stuck_run() {
    let mut server = start_everything_http().await;
    let config = ServerConfig::http("web", &server.url).unwrap().call_timeout(Duration::from_secs(30));
    let mcp = Arc::new(McpTools::start(vec![config]).await.unwrap());
    let tool = Arc::clone(mcp.servers().first().unwrap());
    let call = tokio::spawn(async move {
        tool.call("trigger-long-running-operation", json!({"duration": 120, "steps": 2}), &CancellationToken::new())
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.child.kill().await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(120), call).await.unwrap().unwrap();
    assert!(
        matches!(&result, Err(reins::ToolError::Failed(m)) if m.contains("MCP server \"web\" failed the call of \"trigger-long-running-operation\"")),
        "{result:?}"
    );
    // A plain message for the model: no Rust type names (`Transport [rmcp::...]`).
    let message = result.unwrap_err().to_string();
    assert!(!message.contains("::") && !message.contains("Transport ["), "{message}");
    mcp.shutdown().await;

    // An endpoint that accepts connections but never answers: the start-up timeout ends the wait.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let config = ServerConfig::http("mute", &url).unwrap().startup_timeout(Duration::from_secs(2));
    let err = McpTools::start(vec![config]).await.unwrap_err();
    assert!(matches!(err, McpError::StartupTimeout { .. }), "{err:?}");
    hold.abort();

    // Nothing listening at all: a clear initialize error.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = ServerConfig::http("gone", format!("http://127.0.0.1:{port}/mcp")).unwrap();
    let err = McpTools::start(vec![config]).await.unwrap_err();
    assert!(matches!(&err, McpError::Initialize { server, .. } if server == "gone"), "{err:?}");
    assert!(!err.to_string().contains("::") && !err.to_string().contains("Transport ["), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_headers_are_refused_before_anything_is_sent() {
    // A listener that counts connections: none may arrive.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    for (name, value, expected) in [
        ("bad header", "x", "invalid header name \"bad header\""),
        ("X-Token", "line\nbreak", "invalid value for header \"X-Token\""),
        ("Authorization", "Basic dXNlcjpwYXNz", "only a bearer token"),
    ] {
        let transport = reins_mcp::Transport::Http {
            url: url.clone(),
            headers: [(name.to_owned(), value.to_owned())].into_iter().collect(),
        };
        let config = ServerConfig::new("web", transport).unwrap();
        let err = McpTools::start(vec![config]).await.unwrap_err();
        assert!(matches!(err, McpError::Initialize { .. }), "{err:?}");
        assert!(err.to_string().contains(expected), "{err}");
    }
    assert!(listener.accept().is_err(), "no connection was made");
}
