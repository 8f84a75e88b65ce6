//! reins-mcp against real MCP servers over stdio: the npm filesystem and everything servers and a server
//! written with the PyPI `mcp` package (tests/servers/py_server.py).

mod common;

use std::sync::Arc;
use std::time::Duration;

use reins::{Agent, Message, ModelResponse, ScriptedModel, Status, ToolCall};
use reins_mcp::{McpError, McpTools, ServerConfig};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn results(outcome: &reins::Outcome) -> Vec<(String, String, bool)> {
    outcome
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult(r) => Some((r.call_id.to_string(), r.content.clone(), r.is_error)),
            _ => None,
        })
        .collect()
}

fn result_of<'a>(results: &'a [(String, String, bool)], id: &str) -> &'a (String, String, bool) {
    results.iter().find(|r| r.0 == id).unwrap_or_else(|| panic!("no result for call {id}: {results:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_run_uses_tools_of_three_real_servers_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let log = root.join("calls.log");
    let file = root.join("notes.txt");
    let mcp = McpTools::start(vec![
        common::filesystem("fs", &root),
        common::everything("ev"),
        common::python_server("py", "", &log),
    ])
    .await
    .unwrap();
    let registry = mcp.registry(Vec::new()).unwrap();
    for name in ["fs__write_file", "fs__read_text_file", "ev__echo", "ev__get-sum", "py__add", "py__stats"] {
        assert!(registry.get(name).is_some(), "{name} is not registered: {registry:?}");
    }
    let path = file.display().to_string();
    let model = Arc::new(ScriptedModel::new(vec![
        ModelResponse::tool_calls(
            "",
            vec![
                ToolCall::new("w", "fs__write_file", json!({"path": path, "content": "hello from reins"})),
                ToolCall::new("sum", "ev__get-sum", json!({"a": 2, "b": 3})),
                ToolCall::new("echo", "ev__echo", json!({"message": "ping"})),
            ],
        ),
        ModelResponse::tool_calls(
            "",
            vec![
                ToolCall::new("r", "fs__read_text_file", json!({"path": path})),
                ToolCall::new("add", "py__add", json!({"a": 40, "b": 2})),
                ToolCall::new("stats", "py__stats", json!({})),
                ToolCall::new("fail", "py__fail", json!({})),
                ToolCall::new("outside", "fs__read_text_file", json!({"path": "/etc/hostname"})),
            ],
        ),
        ModelResponse::text("all done"),
    ]));
    let agent = Agent::builder_shared(model.clone()).registry(registry).build().unwrap();
    let outcome = agent.run("use the tools", CancellationToken::new()).await;
    mcp.shutdown().await;

    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert_eq!(outcome.answer.as_deref(), Some("all done"));
    model.assert_complete();
    // The model was shown the MCP tools under their qualified names, with the servers' schemas.
    let first = &model.requests()[0];
    let add = first.tools.iter().find(|t| t.name == "py__add").unwrap();
    assert_eq!(add.input_schema["required"], json!(["a", "b"]));
    assert_eq!(add.description, "Adds two integers.");

    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello from reins");
    let results = results(&outcome);
    assert_eq!(results.len(), 8);
    assert!(!result_of(&results, "w").2, "{results:?}");
    let sum = result_of(&results, "sum");
    assert!(!sum.2 && sum.1.contains('5'), "{sum:?}");
    let echo = result_of(&results, "echo");
    assert!(!echo.2 && echo.1.contains("ping"), "{echo:?}");
    assert_eq!(result_of(&results, "r").1, "hello from reins");
    assert!(!result_of(&results, "r").2);
    // Text content wins over structured content when both are present.
    assert_eq!(result_of(&results, "add"), &("add".into(), "42".into(), false));
    // Structured content alone is shown as JSON.
    let stats: serde_json::Value = serde_json::from_str(&result_of(&results, "stats").1).unwrap();
    assert_eq!(stats, json!({"calls": 1, "ok": true}));
    // A tool's own error is an error result with its message.
    assert_eq!(result_of(&results, "fail"), &("fail".into(), "it failed on purpose".into(), true));
    // The filesystem server refuses paths outside its root; that refusal is an error result.
    let outside = result_of(&results, "outside");
    assert!(outside.2, "{outside:?}");
    assert!(outside.1.to_lowercase().contains("denied") || outside.1.contains("outside"), "{outside:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_are_refused_before_they_reach_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let mcp = McpTools::start(vec![common::python_server("py", "", &log)]).await.unwrap();
    let model = Arc::new(ScriptedModel::new(vec![
        ModelResponse::tool_calls(
            "",
            vec![
                ToolCall::new("1", "py__add", json!({"a": "one", "b": 2})),
                ToolCall::new("2", "py__add", json!({"a": 1})),
                ToolCall::new("3", "py__add", json!({"a": 1, "b": 2, "c": 3})),
                ToolCall::new("4", "py__shout", json!({"text": ""})),
                ToolCall::new("5", "py__sleep", json!({"seconds": -1})),
                ToolCall::new("6", "py__add", json!([1, 2])),
            ],
        ),
        ModelResponse::tool_calls("", vec![ToolCall::new("7", "py__add", json!({"a": 1, "b": 2}))]),
        ModelResponse::text("ok"),
    ]));
    let agent = Agent::builder_shared(model).registry(mcp.registry(Vec::new()).unwrap()).build().unwrap();
    let outcome = agent.run("go", CancellationToken::new()).await;
    mcp.shutdown().await;

    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    let results = results(&outcome);
    for id in ["1", "2", "3", "4", "5", "6"] {
        let r = result_of(&results, id);
        assert!(r.2, "call {id} should be refused: {r:?}");
        assert!(r.1.contains("invalid arguments"), "call {id}: {r:?}");
    }
    assert!(result_of(&results, "1").1.contains("/a"), "{results:?}");
    assert_eq!(result_of(&results, "7"), &("7".into(), "3".into(), false));
    // Only the valid call reached the server.
    let calls = common::logged(&log);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["arguments"], json!({"a": 1, "b": 2}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_gives_error_results_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let mcp = Arc::new(McpTools::start(vec![common::python_server("py", "", &log)]).await.unwrap());
    let pid = mcp.servers()[0].pid().unwrap();
    let killer = {
        let log = log.clone();
        tokio::spawn(async move {
            // Wait (boundedly) until the slow call reached the server, then kill it.
            for _ in 0..600 {
                if common::logged(&log).iter().any(|c| c["tool"] == "sleep") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // SAFETY: plain kill(2) of the test server we started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        })
    };
    let model = Arc::new(ScriptedModel::new(vec![
        ModelResponse::tool_calls("", vec![ToolCall::new("slow", "py__sleep", json!({"seconds": 600}))]),
        ModelResponse::tool_calls("", vec![ToolCall::new("after", "py__add", json!({"a": 1, "b": 1}))]),
        ModelResponse::text("survived"),
    ]));
    let agent = Agent::builder_shared(model).registry(mcp.registry(Vec::new()).unwrap()).build().unwrap();
    let outcome = agent.run("go", CancellationToken::new()).await;
    killer.await.unwrap();
    mcp.shutdown().await;

    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert_eq!(outcome.answer.as_deref(), Some("survived"));
    let results = results(&outcome);
    let slow = result_of(&results, "slow");
    assert!(slow.2, "{slow:?}");
    assert!(slow.1.contains("MCP server \"py\" failed the call of \"sleep\""), "{slow:?}");
    assert!(slow.1.contains("killed by signal 9"), "{slow:?}");
    let after = result_of(&results, "after");
    assert!(after.2, "{after:?}");
    assert!(after.1.contains("MCP server \"py\""), "{after:?}");
    assert!(!common::alive(pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_initialize_is_stopped_with_its_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let config = common::python_server("mute", "--silent", &log).startup_timeout(Duration::from_secs(3));
    let err = McpTools::start(vec![config]).await.unwrap_err();
    match &err {
        McpError::StartupTimeout { server, timeout, .. } => {
            assert_eq!(server, "mute");
            assert_eq!(*timeout, Duration::from_secs(3));
        }
        other => panic!("expected a start-up timeout, got {other:?}"),
    }
    assert!(err.to_string().contains("did not finish starting within 3s"), "{err}");
    // The server and the grandchild it started are both gone.
    let logged = common::logged(&log);
    let entry = logged.iter().find(|e| e.get("grandchild").is_some()).expect("the server logged its grandchild");
    let (server_pid, grandchild) =
        (entry["pid"].as_i64().unwrap() as i32, entry["grandchild"].as_i64().unwrap() as i32);
    for _ in 0..100 {
        if !common::alive(server_pid) && !common::alive(grandchild) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!common::alive(server_pid), "the server process survived");
    assert!(!common::alive(grandchild), "the server's child process survived");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_answers_and_slow_calls_end_in_error_results_within_the_call_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let garbage = common::python_server("junk", "--garbage", &log).call_timeout(Duration::from_secs(5));
    let slow = common::python_server("slow", "", &dir.path().join("slow.log")).call_timeout(Duration::from_secs(5));
    let mcp = McpTools::start(vec![garbage, slow]).await.unwrap();
    let model = Arc::new(ScriptedModel::new(vec![
        ModelResponse::tool_calls(
            "",
            vec![
                ToolCall::new("g", "junk__add", json!({"a": 1, "b": 2})),
                ToolCall::new("s", "slow__sleep", json!({"seconds": 300})),
            ],
        ),
        // The slow server still answers its next call.
        ModelResponse::tool_calls("", vec![ToolCall::new("s2", "slow__shout", json!({"text": "still here"}))]),
        ModelResponse::text("done"),
    ]));
    let agent = Agent::builder_shared(model).registry(mcp.registry(Vec::new()).unwrap()).build().unwrap();
    let outcome = agent.run("go", CancellationToken::new()).await;
    mcp.shutdown().await;

    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    let results = results(&outcome);
    let g = result_of(&results, "g");
    assert!(g.2 && g.1.contains("did not answer the call of \"add\" within 5s"), "{g:?}");
    let s = result_of(&results, "s");
    assert!(s.2 && s.1.contains("did not answer the call of \"sleep\" within 5s"), "{s:?}");
    assert_eq!(result_of(&results, "s2"), &("s2".into(), "STILL HERE".into(), false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_changed_is_heard_and_refresh_registers_the_new_tool() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let mcp = McpTools::start(vec![common::python_server("py", "", &log)]).await.unwrap();
    let registry = mcp.registry(Vec::new()).unwrap();
    assert!(registry.get("py__extra").is_none());
    assert!(!mcp.changed());
    let tool = registry.check("py__enable_extra", &json!({})).unwrap();
    let ctx = reins::ToolContext::new("1", CancellationToken::new());
    assert_eq!(tool.call(json!({}), ctx).await.unwrap(), reins::ToolOutput::Text("extra enabled".into()));
    // The notification is sent before the call's result; allow its handler to run.
    for _ in 0..100 {
        if mcp.changed() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(mcp.changed());
    assert!(mcp.refresh().await.unwrap());
    assert!(!mcp.changed());
    let registry = mcp.registry(Vec::new()).unwrap();
    let extra = registry.check("py__extra", &json!({})).unwrap();
    let ctx = reins::ToolContext::new("2", CancellationToken::new());
    assert_eq!(extra.call(json!({}), ctx).await.unwrap(), reins::ToolOutput::Text("extra here".into()));
    assert!(!mcp.refresh().await.unwrap(), "nothing changed since");
    mcp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_with_an_invalid_name_or_schema_is_left_out_and_named_and_the_others_kept() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");

    for (mode, bad, why) in [
        ("--bad-name", "bad.name", "\"py__bad.name\" is not a valid tool name"),
        ("--bad-schema", "bad_schema", "invalid input schema"),
    ] {
        let mcp = McpTools::start(vec![common::python_server("py", mode, &log)]).await.unwrap();
        let names: Vec<String> = mcp.tools().iter().map(|t| t.spec().name.clone()).collect();
        assert!(names.iter().any(|n| n == "py__add"), "{mode}: the good tools are offered: {names:?}");
        assert!(!names.iter().any(|n| n.contains(bad)), "{mode}: {names:?}");
        let refused = mcp.refused();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            matches!(&refused[0], McpError::Tool { server, tool, .. } if server == "py" && tool == bad),
            "{refused:?}"
        );
        let warnings = mcp.warnings();
        assert!(warnings[0].contains(bad) && warnings[0].contains(why), "{warnings:?}");
        assert!(warnings[0].contains("the server's other tools are offered"), "{warnings:?}");
        let ctx = reins::ToolContext::new("1", CancellationToken::new());
        let add = mcp.tools().into_iter().find(|t| t.spec().name == "py__add").unwrap();
        assert_eq!(add.call(json!({"a": 2, "b": 3}), ctx).await.unwrap(), reins::ToolOutput::Text("5".into()));
        mcp.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_collide_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");

    let err = McpTools::start(vec![common::python_server("py", "", &log), common::python_server("py", "", &log)])
        .await
        .unwrap_err();
    assert_eq!(err, McpError::DuplicateServer("py".into()));

    // A server tool whose qualified name is already taken by another tool.
    let mcp = McpTools::start(vec![common::python_server("py", "", &log)]).await.unwrap();
    let mine: Arc<dyn reins::Tool> =
        Arc::new(reins::FnTool::new("py__add", "Mine.", json!({"type": "object"}), |_, _| async {
            Ok(reins::ToolOutput::Text("mine".into()))
        }));
    let err = mcp.registry(vec![mine]).unwrap_err();
    assert!(err.to_string().contains("\"py__add\" is already the name of another tool"), "{err}");
    mcp.shutdown().await;
    // Nothing was ever called.
    assert!(common::logged(&log).iter().all(|e| e.get("tool").is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_or_exits_at_once_gives_a_clear_error() {
    let err = McpTools::start(vec![ServerConfig::stdio("nope", "/nonexistent/mcp-server", vec![]).unwrap()])
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Spawn { .. }), "{err:?}");
    assert!(err.to_string().contains("could not start \"/nonexistent/mcp-server\""), "{err}");

    let py = common::python().display().to_string();
    let crash = ServerConfig::stdio(
        "crash",
        py,
        vec!["-c".into(), "import sys; sys.stderr.write('no config found\\n'); sys.exit(3)".into()],
    )
    .unwrap()
    .startup_timeout(Duration::from_secs(60));
    let err = McpTools::start(vec![crash]).await.unwrap_err();
    assert!(matches!(err, McpError::Initialize { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("exited with status 3"), "{text}");
    assert!(text.contains("no config found"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_the_server_process_and_cancellation_stops_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let mcp = McpTools::start(vec![common::python_server("py", "", &log)]).await.unwrap();
    let server = Arc::clone(&mcp.servers()[0]);
    let pid = server.pid().unwrap();
    assert!(common::alive(pid));
    let cancel = CancellationToken::new();
    let call = {
        let (server, cancel) = (Arc::clone(&server), cancel.clone());
        tokio::spawn(async move { server.call("sleep", json!({"seconds": 600}), &cancel).await })
    };
    for _ in 0..600 {
        if common::logged(&log).iter().any(|c| c["tool"] == "sleep") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cancel.cancel();
    assert_eq!(call.await.unwrap(), Err(reins::ToolError::Cancelled));
    mcp.shutdown().await;
    assert!(!common::alive(pid));
    // Calls after shutdown fail cleanly.
    let r = server.call("add", json!({"a": 1, "b": 2}), &CancellationToken::new()).await;
    assert!(matches!(r, Err(reins::ToolError::Failed(_))), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_agent_sees_tools_added_by_list_changed_at_the_next_step() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let mcp = Arc::new(McpTools::start(vec![common::python_server("py", "", &log)]).await.unwrap());
    let source = Arc::new(reins_mcp::McpToolSource::new(Arc::clone(&mcp), Vec::new()).unwrap());
    let model = Arc::new(ScriptedModel::new(vec![
        ModelResponse::tool_calls("", vec![ToolCall::new("1", "py__enable_extra", json!({}))]),
        ModelResponse::tool_calls("", vec![ToolCall::new("2", "py__shout", json!({"text": "a"}))]),
        ModelResponse::tool_calls("", vec![ToolCall::new("3", "py__extra", json!({}))]),
        ModelResponse::text("done"),
    ]));
    let agent = Agent::builder_shared(model.clone()).tool_source(source.clone()).build().unwrap();
    let outcome = agent.run("go", CancellationToken::new()).await;
    mcp.shutdown().await;

    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    let requests = model.requests();
    let has_extra = |i: usize| requests[i].tools.iter().any(|t| t.name == "py__extra");
    assert!(!has_extra(0));
    assert!(has_extra(2), "the third model turn should see py__extra");
    assert_eq!(result_of(&results(&outcome), "3"), &("3".into(), "extra here".into(), false));
    assert!(source.last_error().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_that_brings_a_malformed_tool_leaves_it_out_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let mcp = Arc::new(McpTools::start(vec![common::python_server("py", "", &log)]).await.unwrap());
    let source = Arc::new(reins_mcp::McpToolSource::new(Arc::clone(&mcp), Vec::new()).unwrap());
    let model = Arc::new(ScriptedModel::new(vec![
        ModelResponse::tool_calls("", vec![ToolCall::new("1", "py__enable_bad", json!({}))]),
        ModelResponse::tool_calls("", vec![ToolCall::new("2", "py__shout", json!({"text": "a"}))]),
        ModelResponse::tool_calls("", vec![ToolCall::new("3", "py__add", json!({"a": 1, "b": 1}))]),
        ModelResponse::text("done"),
    ]));
    let agent = Agent::builder_shared(model.clone()).tool_source(source.clone()).build().unwrap();
    let outcome = agent.run("go", CancellationToken::new()).await;
    mcp.shutdown().await;

    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert_eq!(result_of(&results(&outcome), "3"), &("3".into(), "2".into(), false));
    // The refresh succeeded, leaving the malformed tool out and naming it.
    assert!(mcp.refresh_errors().is_empty(), "{:?}", mcp.refresh_errors());
    let refused = mcp.refused();
    assert!(matches!(&refused[..], [McpError::Tool { tool, .. }] if tool == "bad.name"), "{refused:?}");
    // Every model turn saw the same tool list: the new tool was not taken.
    let names = |i: usize| model.requests()[i].tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(0), names(2));
}

/// An answer over the 16 MiB message limit of the stdio transport is an error result at once (not after the
/// call timeout), and the server still answers the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_answer_is_reported_at_once_not_after_the_call_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::python_server("py", "", &dir.path().join("calls.log")).call_timeout(Duration::from_secs(120));
    let mcp = McpTools::start(vec![config]).await.unwrap();
    let server = Arc::clone(mcp.servers().first().unwrap());
    let cancel = CancellationToken::new();

    let within = server.call("big", json!({"bytes": 1 << 20}), &cancel).await.unwrap().into_text();
    assert_eq!(within.len(), 1 << 20);

    let started = std::time::Instant::now();
    let over = server.call("big", json!({"bytes": 17 << 20}), &cancel).await;
    let waited = started.elapsed();
    eprintln!("oversized answer reported after {waited:?}");
    let message = over.unwrap_err().to_string();
    assert!(message.contains("16 MiB limit"), "{message}");
    assert!(!message.contains("::"), "{message}");
    // Seconds, not the two-minute call timeout (measured: about 0.3 s; the bound leaves room for a loaded machine).
    assert!(waited < Duration::from_secs(10), "the oversized answer was waited for: {waited:?}");

    let next = server.call("shout", json!({"text": "still here"}), &cancel).await.unwrap().into_text();
    assert_eq!(next, "STILL HERE");
    mcp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_carries_its_idempotency_key_in_meta() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let mcp = McpTools::start(vec![common::python_server("py", "", &log)]).await.unwrap();
    let registry = mcp.registry(Vec::new()).unwrap();
    let tool = registry.check("py__shout", &json!({"text": "x"})).unwrap();
    let ctx = reins::ToolContext::new("c1", CancellationToken::new()).with_idempotency_key("s/r/3/c1");
    assert_eq!(tool.call(json!({"text": "x"}), ctx.clone()).await.unwrap(), reins::ToolOutput::Text("X".into()));
    // A retry of the same call sends the same key.
    tool.call(json!({"text": "x"}), ctx).await.unwrap();
    let calls = common::logged(&log);
    let keys: Vec<&serde_json::Value> = calls.iter().map(|c| &c["meta"][reins_mcp::IDEMPOTENCY_KEY_META]).collect();
    assert_eq!(keys, vec![&json!("s/r/3/c1"), &json!("s/r/3/c1")], "{calls:?}");
    mcp.shutdown().await;
}
