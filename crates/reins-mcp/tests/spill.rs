//! Large results lose nothing: a 5 MB result of a real server (the PyPI `mcp` test server) is cut for the model
//! and written whole beneath the workspace's scratch folder, and the model reads its middle back with
//! `read_file`; `search` does not see the spill file.

mod common;

use std::sync::{Arc, Mutex};

use reins::{Agent, FnModel, Message, ModelResponse, Status, ToolCall};
use reins_mcp::McpTools;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn last_result(req: &reins::ModelRequest) -> Option<String> {
    match req.messages.get(req.messages.len().checked_sub(1)?)? {
        Message::ToolResult(r) => Some(r.content.clone()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5_mb_result_is_spilled_and_the_model_reads_its_middle_back() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let log = root.join("calls.log");
    let ws = Arc::new(reins_tools::Workspace::open(&root).unwrap());
    let mcp = McpTools::start(vec![common::python_server("py", "", &log)]).await.unwrap();
    mcp.set_spill(&root, 32_000);
    let registry = mcp.registry(reins_tools::file_tools(ws)).unwrap();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen_by_model = Arc::clone(&seen);
    let model = Arc::new(FnModel::new(move |req: &reins::ModelRequest| {
        let mut seen = seen_by_model.lock().unwrap();
        if let Some(r) = last_result(req) {
            seen.push(r);
        }
        Ok(match seen.len() {
            0 => ModelResponse::tool_calls("", vec![ToolCall::new("big", "py__lines", json!({"count": 100_000}))]),
            1 => {
                // The marker names the file: the model reads lines from the middle of what it was not shown.
                let path = seen[0].split("is in ").nth(1).and_then(|s| s.split(':').next()).unwrap_or("?").to_owned();
                let read = json!({"path": path, "start_line": 50_000, "end_line": 50_002});
                ModelResponse::tool_calls("", vec![ToolCall::new("read", "read_file", read)])
            }
            2 => ModelResponse::tool_calls(
                "",
                vec![ToolCall::new("search", "search", json!({"pattern": "line 050001"}))],
            ),
            _ => ModelResponse::text("read it"),
        })
    }));
    let agent = Agent::builder_shared(model).registry(registry).build().unwrap();
    let outcome = agent.run("read the middle", CancellationToken::new()).await;
    mcp.shutdown().await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    let seen = seen.lock().unwrap().clone();
    // What the model was shown of the 5.3 MB result: its head and tail within the bound, and the marker.
    let shown = &seen[0];
    assert!(shown.chars().count() <= 32_000, "{}", shown.chars().count());
    assert!(
        shown.starts_with("line 000001 ") && shown.trim_end().ends_with(&format!("line 100000 {}", "x".repeat(40)))
    );
    assert!(shown.contains("read it with read_file and start_line/end_line"), "{}", &shown[..300]);
    let line = |n: usize| format!("line {n:06} {}\n", "x".repeat(40));
    assert_eq!(seen[1], format!("{}{}{}", line(50_000), line(50_001), line(50_002)));
    // The spill file: whole, private, beneath .reins/spill/; the search tool does not find its text.
    let file = std::fs::read_dir(root.join(".reins/spill")).unwrap().next().unwrap().unwrap().path();
    let whole = std::fs::read_to_string(&file).unwrap();
    assert_eq!(whole.len(), 100_000 * 53);
    assert_eq!(whole.lines().nth(74_999), Some(line(75_000).trim_end()));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(!seen[2].contains("050001"), "search must not see the scratch folder: {}", seen[2]);
}
