//! `reins demo`: a scripted model drives a short, realistic session offline.

use std::sync::Arc;

use reins::{Agent, Limits, ModelResponse, Registry, ScriptedModel, ToolCall, Usage};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, code_for};
use crate::render;

fn call(id: &str, name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall::new(id, name, args)
}

/// The scripted turns of the demo.
fn script() -> Vec<ModelResponse> {
    vec![
        ModelResponse::tool_calls(
            "I'll announce the release, then check the build.",
            vec![call("call_1", "echo", json!({"text": "Release 0.1 is out: thanks, team!"}))],
        )
        .with_usage(Usage::new(120, 24)),
        // An invalid call: the wrong property name. The registry refuses it; the tool never runs.
        ModelResponse::tool_calls("", vec![call("call_2", "echo", json!({"txt": "Build status?"}))])
            .with_usage(Usage::new(170, 12)),
        // The model reads the error and recovers; two calls in one batch.
        ModelResponse::tool_calls(
            "My mistake: the property is `text`.",
            vec![
                call("call_3", "echo", json!({"text": "Build status?"})),
                call("call_4", "fail", json!({"message": "build server unreachable (simulated)"})),
            ],
        )
        .with_usage(Usage::new(260, 30)),
        // Workspace tools: a file written atomically, then a command preset (never a shell string).
        ModelResponse::tool_calls(
            "I'll record the release notes in the workspace and count their lines.",
            vec![
                call(
                    "call_5",
                    "write_file",
                    json!({"path": "RELEASE.md", "content": "# Release 0.1\n\n- the harness core\n- workspace tools\n"}),
                ),
                call("call_6", "run_command", json!({"command": "lines"})),
            ],
        )
        .with_usage(Usage::new(380, 40)),
        // A path outside the workspace is refused; a line range of the notes is read back.
        ModelResponse::tool_calls(
            "",
            vec![
                call("call_7", "read_file", json!({"path": "../../etc/passwd"})),
                call("call_8", "read_file", json!({"path": "RELEASE.md", "start_line": 1, "end_line": 1})),
            ],
        )
        .with_usage(Usage::new(450, 30)),
        ModelResponse::text(
            "Release announced and recorded in RELEASE.md (4 lines). The build server could not be reached, so \
             the build status is unknown; please check it by hand.",
        )
        .with_usage(Usage::new(520, 32)),
    ]
}

/// The file tools and one preset over a temporary workspace, sandboxed as far as the host allows.
fn workspace_tools(root: &std::path::Path) -> Result<Vec<Arc<dyn reins::Tool>>, CliError> {
    let ws = Arc::new(reins_tools::Workspace::open(root).map_err(|e| CliError::Internal(e.into()))?);
    let mut tools = reins_tools::file_tools(ws.clone());
    let preset = reins_tools::Preset::new("lines", "wc", vec!["-l".into(), "RELEASE.md".into()]);
    let config = reins_tools::CommandConfig {
        sandbox: reins_tools::SandboxMode::BestEffort,
        ..reins_tools::CommandConfig::default()
    };
    let runner = reins_tools::CommandRunner::new(ws, vec![preset], config).map_err(|e| CliError::Internal(e.into()))?;
    tools.push(Arc::new(reins_tools::RunCommand::new(Arc::new(runner))));
    Ok(tools)
}

/// `reins demo`.
pub async fn demo() -> Result<u8, CliError> {
    outln!("reins demo — a scripted model proposes; Reins validates, runs, bounds and records.\n");
    let model = Arc::new(ScriptedModel::new(script()));
    let workspace = tempfile::tempdir().map_err(|e| CliError::Internal(e.into()))?;
    let mut tools = reins_agent::test_tools();
    tools.extend(workspace_tools(workspace.path())?);
    let registry = Registry::new(tools).map_err(|e| CliError::Internal(e.into()))?;
    let mut builder = Agent::builder_shared(model.clone())
        .registry(registry)
        .limits(Limits { max_steps: Some(10), max_tool_calls: Some(10), ..Limits::default() })
        .observer(render::progress_stdout)
        .include_content(true);
    // The demo is recorded like any run, so that it can be looked at afterwards; without a store it still runs.
    match crate::store_open::open_store(None) {
        Ok(store) => {
            let meta = reins_store::SessionMeta {
                model: Some("demo (a scripted model)".to_owned()),
                workspace: Some(workspace.path().display().to_string()),
                ..reins_store::SessionMeta::default()
            };
            builder = builder.journal(store.journal(meta));
        }
        Err(CliError::Usage(why)) => errln!("reins: warning: the demo is not recorded: {why}"),
        Err(CliError::Internal(why)) => errln!("reins: warning: the demo is not recorded: {why:#}"),
    }
    let agent = builder.build().map_err(|e| CliError::Internal(e.into()))?;
    let cancel = CancellationToken::new();
    crate::signals::cancel_on_signals(cancel.clone(), "the demo")?;
    let outcome = agent.run("Announce the release to the team and tell me the build status.", cancel).await;
    outln!();
    if let Some(answer) = &outcome.answer {
        outln!("answer: {answer}");
    }
    for line in render::status_lines(&outcome) {
        outln!("{line}");
    }
    outln!("\nThe invalid call (call_2) never reached the tool: the registry refused it with the JSON pointer of");
    outln!("each offending value, the model recovered, and every call in the transcript has exactly one result.");
    outln!("The file tools ran in a temporary workspace: a path leaving it was refused, and the command ran as a");
    outln!("named preset (`lines` = wc -l RELEASE.md) in its own process group, with whatever sandbox this host has.");
    if let Some(id) = &outcome.session_id {
        outln!("\nThe demo was recorded as session {id}. Look at it:");
        outln!("  reins sessions show {id}          # its runs and transcript");
        outln!("  reins sessions view {id} --open   # one HTML page: timeline, tokens and cost, transcript");
    }
    Ok(code_for(outcome.status))
}
