//! The protocol beyond tools, against real servers: each revision spoken (the npm servers speak 2025-11-25,
//! the PyPI `mcp` 2.3.0 server 2026-07-28), resources as tools (server-everything's), and a list change that
//! reaches a running agent as an event between steps.

mod common;

use std::sync::{Arc, Mutex};

use reins::{Agent, ContextConfig, Event, EventKind, Message, ModelResponse, ScriptedModel, Status, ToolCall};
use reins_mcp::McpTools;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn result(outcome: &reins::Outcome, id: &str) -> (String, bool) {
    outcome
        .messages
        .iter()
        .find_map(|m| match m {
            Message::ToolResult(r) if &*r.call_id == id => Some((r.content.clone(), r.is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<Event>>>);

impl reins::Observer for Events {
    fn on_event(&self, event: &Event) -> Result<(), reins::ObserverError> {
        self.0.lock().unwrap().push(event.clone());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_server_is_spoken_to_in_its_own_revision() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let mcp = McpTools::start(vec![common::everything("ev"), common::python_server("py", "", &log)]).await.unwrap();
    let versions: Vec<(&str, &str)> = mcp.servers().iter().map(|s| (s.name(), s.protocol_version())).collect();
    // server-everything 2026.8.31 is built on the TypeScript SDK 1.32 (newest revision 2025-11-25): the
    // server/discover probe fails and the initialize handshake follows. The PyPI mcp 2.3.0 server answers
    // server/discover.
    assert_eq!(versions, vec![("ev", "2025-11-25"), ("py", "2026-07-28")]);
    // Both answer calls in their revision.
    let registry = mcp.registry(Vec::new()).unwrap();
    let model = Arc::new(ScriptedModel::new(vec![
        ModelResponse::tool_calls(
            "",
            vec![
                ToolCall::new("e", "ev__echo", json!({"message": "hi"})),
                ToolCall::new("p", "py__add", json!({"a": 1, "b": 2})),
            ],
        ),
        ModelResponse::text("done"),
    ]));
    let outcome =
        Agent::builder_shared(model).registry(registry).build().unwrap().run("go", CancellationToken::new()).await;
    mcp.shutdown().await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert!(result(&outcome, "e").0.contains("hi"));
    assert_eq!(result(&outcome, "p"), ("3".into(), false));
}

/// The PyPI `mcp` 1.30 test server (tests/servers/py_server_v1.py), in the venv `.ci/setup-mcp.sh` makes for it.
fn python_v1_server(name: &str) -> reins_mcp::ServerConfig {
    let python = common::python();
    let v1 =
        python.parent().and_then(|bin| bin.parent()).and_then(|venv| venv.parent()).unwrap().join("venv-1/bin/python");
    assert!(v1.is_file(), "{} is missing: run `source .ci/setup-mcp.sh`", v1.display());
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/servers/py_server_v1.py");
    reins_mcp::ServerConfig::stdio(name, v1.display().to_string(), vec![script.display().to_string()])
        .unwrap()
        .startup_timeout(std::time::Duration::from_secs(60))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_server_of_the_earlier_revision_is_spoken_to_in_it_and_its_list_changes_are_heard() {
    let mcp = Arc::new(McpTools::start(vec![python_v1_server("old")]).await.unwrap());
    assert_eq!(mcp.servers()[0].protocol_version(), "2025-11-25");
    let source = Arc::new(reins_mcp::McpToolSource::new(Arc::clone(&mcp), Vec::new()).unwrap());
    let model = Arc::new(ScriptedModel::new(vec![
        ModelResponse::tool_calls(
            "",
            vec![
                ToolCall::new("1", "old__enable_extra", json!({})),
                ToolCall::new("2", "old__add", json!({"a": 2, "b": 3})),
                ToolCall::new("3", "old__read_resource", json!({"uri": "note://hello"})),
            ],
        ),
        ModelResponse::tool_calls("", vec![ToolCall::new("4", "old__extra", json!({}))]),
        ModelResponse::text("done"),
    ]));
    let events = Events::default();
    let agent = Agent::builder_shared(model).tool_source(source).observer(events.clone()).build().unwrap();
    let outcome = agent.run("go", CancellationToken::new()).await;
    mcp.shutdown().await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert_eq!(result(&outcome, "2"), ("5".into(), false));
    assert_eq!(result(&outcome, "3"), ("hello from the 2025-11-25 era".into(), false));
    assert_eq!(result(&outcome, "4"), ("extra here".into(), false));
    let changed = events
        .0
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(&e.kind, EventKind::ToolsChanged { added, .. } if added == &["old__extra".to_owned()]));
    assert!(changed, "a tools_changed event names old__extra");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_of_server_everything_are_listed_read_validated_and_bounded() {
    let mcp = McpTools::start(vec![common::everything("ev")]).await.unwrap();
    let registry = mcp.registry(Vec::new()).unwrap();
    assert!(registry.get("ev__list_resources").is_some() && registry.get("ev__read_resource").is_some());
    assert!(mcp.servers()[0].list_resources().await.unwrap().iter().any(|r| r.template), "templates are listed");
    let text_uri = mcp.servers()[0]
        .list_resources()
        .await
        .unwrap()
        .into_iter()
        .find(|r| !r.template && r.mime_type.as_deref().is_some_and(|m| m.starts_with("text/")))
        .expect("a text resource")
        .uri;
    // A binary resource, made from server-everything's blob template.
    let blob_uri = "demo://resource/dynamic/blob/1";
    let calls = vec![
        ToolCall::new("list", "ev__list_resources", json!({})),
        ToolCall::new("read", "ev__read_resource", json!({"uri": text_uri})),
        ToolCall::new("bad", "ev__read_resource", json!({"url": "x"})),
        ToolCall::new("blob", "ev__read_resource", json!({"uri": blob_uri})),
    ];
    let model = Arc::new(ScriptedModel::new(vec![ModelResponse::tool_calls("", calls), ModelResponse::text("ok")]));
    let context = ContextConfig { max_tool_result_chars: Some(300), ..ContextConfig::default() };
    let agent = Agent::builder_shared(model).registry(registry).context(context).build().unwrap();
    let outcome = agent.run("read", CancellationToken::new()).await;
    mcp.shutdown().await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    let (list, is_error) = result(&outcome, "list");
    assert!(!is_error && list.starts_with("Resources ("), "{list}");
    assert!(list.chars().count() <= 300 && list.contains("characters omitted"), "the listing is bounded: {list}");
    let (read, is_error) = result(&outcome, "read");
    assert!(!is_error && !read.is_empty() && read.chars().count() <= 300, "{read}");
    let (bad, is_error) = result(&outcome, "bad");
    assert!(is_error && bad.contains("uri"), "refused before it reached the server: {bad}");
    let (blob, is_error) = result(&outcome, "blob");
    assert!(!is_error && blob.contains("not shown"), "a binary resource is described, never dumped: {blob}");
    assert!(blob.contains(blob_uri), "{blob}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_false_keeps_a_servers_resources_from_the_model() {
    let mcp = McpTools::start(vec![common::everything("ev").resources(false)]).await.unwrap();
    let registry = mcp.registry(Vec::new()).unwrap();
    mcp.shutdown().await;
    assert!(registry.get("ev__echo").is_some());
    assert!(registry.get("ev__list_resources").is_none() && registry.get("ev__read_resource").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_added_mid_run_is_an_event_before_the_next_model_call_and_the_model_calls_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let mcp = Arc::new(McpTools::start(vec![common::python_server("py", "", &log)]).await.unwrap());
    let source = Arc::new(reins_mcp::McpToolSource::new(Arc::clone(&mcp), Vec::new()).unwrap());
    let model = Arc::new(ScriptedModel::new(vec![
        ModelResponse::tool_calls(
            "",
            vec![
                ToolCall::new("1", "py__enable_extra", json!({})),
                ToolCall::new("2", "py__add", json!({"a": 1, "b": 1})),
            ],
        ),
        ModelResponse::tool_calls("", vec![ToolCall::new("3", "py__extra", json!({}))]),
        ModelResponse::text("done"),
    ]));
    let events = Events::default();
    let agent = Agent::builder_shared(model.clone()).tool_source(source).observer(events.clone()).build().unwrap();
    let outcome = agent.run("go", CancellationToken::new()).await;
    mcp.shutdown().await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert_eq!(result(&outcome, "3"), ("extra here".into(), false));
    assert!(model.requests()[1].tools.iter().any(|t| t.name == "py__extra"));
    let kinds: Vec<EventKind> = events.0.lock().unwrap().iter().map(|e| e.kind.clone()).collect();
    let at = kinds
        .iter()
        .position(|k| matches!(k, EventKind::ToolsChanged { added, .. } if added == &["py__extra".to_owned()]))
        .unwrap_or_else(|| panic!("no tools_changed event: {kinds:?}"));
    // After both calls of the batch ended, before the second model call.
    let ends_before = kinds[..at].iter().filter(|k| matches!(k, EventKind::ToolEnd { .. })).count();
    let models_before = kinds[..at].iter().filter(|k| matches!(k, EventKind::ModelStart { .. })).count();
    assert_eq!((ends_before, models_before), (2, 1), "{kinds:?}");
    // Once: the third step sees no further change.
    assert_eq!(kinds.iter().filter(|k| matches!(k, EventKind::ToolsChanged { .. })).count(), 1);
}

/// A server slow to answer `server/discover` (it holds the answer until the `initialize` the protocol library falls
/// back to after ten seconds, then sends both): the late discovery answer is dropped and the handshake goes on, so
/// the server is spoken to in 2025-11-25 and its tool is called. It failed with "conflict initialized response id"
/// (seen with Python servers starting on a loaded machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discovery_answered_after_the_fallback_to_initialize_is_dropped_and_the_server_used() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("methods.log");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/servers/late_discover.py");
    let transport = reins_mcp::Transport::Stdio {
        command: "python3".into(),
        args: vec![script.display().to_string(), log.display().to_string()],
        env: Default::default(),
        cwd: None,
    };
    let config =
        reins_mcp::ServerConfig::new("late", transport).unwrap().startup_timeout(std::time::Duration::from_secs(60));
    let mcp = McpTools::start(vec![config]).await.unwrap();
    assert_eq!(mcp.servers()[0].protocol_version(), "2025-11-25");
    let methods = std::fs::read_to_string(&log).unwrap();
    assert!(methods.starts_with("server/discover\ninitialize\n"), "{methods}");
    let registry = mcp.registry(Vec::new()).unwrap();
    let model = Arc::new(ScriptedModel::new(vec![
        ModelResponse::tool_calls("", vec![ToolCall::new("h", "late__hello", json!({}))]),
        ModelResponse::text("done"),
    ]));
    let outcome =
        Agent::builder_shared(model).registry(registry).build().unwrap().run("go", CancellationToken::new()).await;
    mcp.shutdown().await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert_eq!(result(&outcome, "h"), ("hello".into(), false));
}
