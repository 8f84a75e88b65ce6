//! Replay: a recorded session reproduces exactly; a changed tool is reported at the first divergence.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{TempDir, rt};
use reins::{
    Agent, ContextConfig, FnTool, ModelResponse, Registry, ScriptedModel, Status, ToolCall, ToolOutput, Usage,
};
use reins_store::{ReplayTools, SessionMeta, Store, replay};
use tokio_util::sync::CancellationToken;

/// A tool that writes a file in `root` and reports its size; `broken` changes what it answers.
fn writer(root: std::path::PathBuf, broken: Arc<AtomicBool>) -> FnTool {
    FnTool::new(
        "write",
        "Writes a file.",
        serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}, "text": {"type": "string"}},
            "required": ["name", "text"], "additionalProperties": false}),
        move |args, _ctx| {
            let root = root.clone();
            let broken = broken.load(Ordering::SeqCst);
            async move {
                let name = args["name"].as_str().unwrap_or("x").to_owned();
                let text = args["text"].as_str().unwrap_or("").to_owned();
                let path = root.join(&name);
                std::fs::write(&path, &text).map_err(|e| reins::ToolError::failed(e.to_string()))?;
                let n = if broken { text.len() + 1 } else { text.len() };
                Ok(ToolOutput::Text(format!("wrote {n} bytes to {name}")))
            }
        },
    )
}

fn script() -> Vec<ModelResponse> {
    vec![
        ModelResponse::tool_calls(
            "writing",
            vec![
                ToolCall::new("1", "write", serde_json::json!({"name": "a.txt", "text": "hello"})),
                ToolCall::new("2", "write", serde_json::json!({"name": "b.txt"})),
            ],
        )
        .with_usage(Usage::new(10, 5)),
        ModelResponse::tool_calls(
            "",
            vec![ToolCall::new("3", "write", serde_json::json!({"name": "c.txt", "text": "bye"}))],
        ),
        ModelResponse::text("wrote the files"),
    ]
}

#[test]
fn replay_reproduces_a_session_and_reports_a_changed_tool() {
    let dir = TempDir::new("replay");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let broken = Arc::new(AtomicBool::new(false));
    let registry = Arc::new(Registry::builder().tool(writer(work.clone(), broken.clone())).build().unwrap());
    let agent = Agent::builder(ScriptedModel::new(script()))
        .registry(registry.clone())
        .journal(store.journal(SessionMeta::default()))
        .build()
        .unwrap();
    let outcome = rt().block_on(agent.run("write three files", CancellationToken::new()));
    assert_eq!(outcome.status, Status::Completed);
    // The invalid call (no text) got a validation error result; it is part of what must reproduce.
    assert!(outcome.messages[3].content().contains("text"), "{:?}", outcome.messages[3]);
    let session = store.load(outcome.session_id.as_deref().unwrap()).unwrap();

    // Live tools in a fresh directory: identical.
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let live = Arc::new(Registry::builder().tool(writer(scratch.clone(), broken.clone())).build().unwrap());
    let report = rt().block_on(replay(&session, ReplayTools::Live(live.clone()), ContextConfig::default())).unwrap();
    assert_eq!(report.divergence, None, "{:?}", report.divergence);
    assert_eq!((report.runs, report.steps), (1, 3));
    assert_eq!(std::fs::read_to_string(scratch.join("c.txt")).unwrap(), "bye", "the tools ran for real");

    // Recorded results: identical, and nothing is written.
    let report = rt().block_on(replay(&session, ReplayTools::Recorded, ContextConfig::default())).unwrap();
    assert_eq!(report.divergence, None);

    // A deliberate change to the tool: the first result differs, and the replay says where.
    broken.store(true, Ordering::SeqCst);
    let report = rt().block_on(replay(&session, ReplayTools::Live(live), ContextConfig::default())).unwrap();
    let d = report.divergence.expect("the changed tool is reported");
    assert_eq!((d.run, d.what.as_str(), d.index), (1, "tool_result", Some(2)));
    assert_eq!(d.recorded["content"], "wrote 5 bytes to a.txt");
    assert_eq!(d.replayed["content"], "wrote 6 bytes to a.txt");
    assert!(d.to_string().contains("tool result differs at transcript item 2"), "{d}");

    // A harness change: a stricter context cut changes the recorded results.
    broken.store(false, Ordering::SeqCst);
    let strict = ContextConfig { max_tool_result_chars: Some(8), ..ContextConfig::default() };
    let report = rt().block_on(replay(&session, ReplayTools::Recorded, strict)).unwrap();
    assert_eq!(report.divergence.map(|d| d.what), Some("tool_result".to_owned()));

    // A tool whose schema changed: the call is now refused, a different result.
    let renamed = FnTool::new(
        "write",
        "Writes.",
        serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |_a, _c| async { Ok(ToolOutput::Text("ok".into())) },
    );
    let report = rt()
        .block_on(replay(
            &session,
            ReplayTools::Live(Arc::new(Registry::builder().tool(renamed).build().unwrap())),
            ContextConfig::default(),
        ))
        .unwrap();
    assert!(report.divergence.is_some());
}

/// A run's instructions are recorded with it and a replay gives them again: here they are what makes the
/// newest turn not fit the context budget, so a replay without them would run the tool and diverge.
#[test]
fn replay_gives_each_run_its_recorded_instructions() {
    let dir = TempDir::new("replay-instructions");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let broken = Arc::new(AtomicBool::new(false));
    let registry = Arc::new(Registry::builder().tool(writer(dir.path().to_path_buf(), broken)).build().unwrap());
    let call = ToolCall::new("1", "write", serde_json::json!({"name": "a.txt", "text": "hello"}));
    let counter = reins::CharCounter;
    let tools = reins::transcript::measure_tools(registry.specs(), &counter);
    let turn = reins::transcript::measure(&reins::Message::assistant("", vec![call.clone()]), &counter);
    // Room for the prompt ("go"), the turn and its result's reserve, 50 to spare: not for 100 of instructions.
    let budget = tools + 2 + turn + reins::engine::state::MIN_RESULT_UNITS + 50;
    let ctx = ContextConfig { max_context: Some(budget), ..ContextConfig::default() };
    let agent = Agent::builder(ScriptedModel::new(vec![
        ModelResponse::tool_calls("", vec![call]),
        ModelResponse::text("done"),
    ]))
    .registry(registry)
    .context(ctx.clone())
    .instructions("i".repeat(100))
    .journal(store.journal(SessionMeta::default()))
    .build()
    .unwrap();
    let outcome = rt().block_on(agent.run("go", CancellationToken::new()));
    assert_eq!(outcome.status, Status::ContextLimit, "{:?}", outcome.error);
    let session = store.load(outcome.session_id.as_deref().unwrap()).unwrap();
    assert_eq!(session.runs().unwrap()[0].start.instructions.as_deref(), Some("i".repeat(100).as_str()));
    let report = rt().block_on(replay(&session, ReplayTools::Recorded, ctx)).unwrap();
    assert_eq!(report.divergence, None, "{:?}", report.divergence);
    assert_eq!(report.steps, 1);
}

#[test]
fn replay_covers_resumed_and_crashed_runs() {
    let dir = TempDir::new("replay-resume");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let echo = || {
        FnTool::new("echo", "Echo.", serde_json::json!({"type": "object"}), |args, _c| async move {
            Ok(ToolOutput::Json(args))
        })
    };
    let a = Agent::builder(ScriptedModel::new(vec![
        ModelResponse::tool_calls("", vec![ToolCall::new("1", "echo", serde_json::json!({"a": 1}))]),
        ModelResponse::text("first"),
    ]))
    .registry(Registry::builder().tool(echo()).build().unwrap())
    .journal(store.journal(SessionMeta::default()))
    .build()
    .unwrap();
    let first = rt().block_on(a.run("one", CancellationToken::new()));
    let session = store.load(first.session_id.as_deref().unwrap()).unwrap();
    let b = Agent::builder(ScriptedModel::new(vec![
        ModelResponse::tool_calls("", vec![ToolCall::new("2", "echo", serde_json::json!({"b": 2}))]),
        ModelResponse::text("second"),
    ]))
    .registry(Registry::builder().tool(echo()).build().unwrap())
    .journal(store.resume_journal(&session, SessionMeta::default()).unwrap())
    .build()
    .unwrap();
    let state = session.resume_state(reins::Limits::default(), b.context(), Some("two")).unwrap();
    let second = rt().block_on(b.drive(state, CancellationToken::new()));
    assert_eq!(second.status, Status::Completed);
    let session = store.load(first.session_id.as_deref().unwrap()).unwrap();
    let live = Arc::new(Registry::builder().tool(echo()).build().unwrap());
    let report = rt().block_on(replay(&session, ReplayTools::Live(live), ContextConfig::default())).unwrap();
    assert_eq!(report.divergence, None, "{:?}", report.divergence);
    assert_eq!((report.runs, report.steps), (2, 4));
    // A changed answer in the second run is an outcome/message divergence of run 2.
    let mut changed = session.clone();
    for e in changed.entries.iter_mut().filter(|e| e.kind == "response" && e.run == 2) {
        if e.data["response"]["text"] == "second" {
            e.data["response"]["text"] = "other".into();
        }
    }
    let report = rt().block_on(replay(&changed, ReplayTools::Recorded, ContextConfig::default())).unwrap();
    let d = report.divergence.unwrap();
    assert_eq!((d.run, d.what.as_str()), (2, "message"));
}

#[test]
fn each_run_replays_with_the_settings_given_for_it() {
    let dir = TempDir::new("replay-settings");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let long = "x".repeat(200);
    let echo = || {
        FnTool::new("echo", "Echo.", serde_json::json!({"type": "object"}), |args, _c| async move {
            Ok(ToolOutput::Text(args["text"].as_str().unwrap_or("").to_owned()))
        })
    };
    let tiny = ContextConfig { max_tool_result_chars: Some(10), ..ContextConfig::default() };
    let turn =
        |id: &str| ModelResponse::tool_calls("", vec![ToolCall::new(id, "echo", serde_json::json!({"text": long}))]);
    // Run 1 cuts results to 10 characters; run 2, a resume, keeps the default.
    let a = Agent::builder(ScriptedModel::new(vec![turn("1"), ModelResponse::text("one")]))
        .registry(Registry::builder().tool(echo()).build().unwrap())
        .context(tiny.clone())
        .journal(store.journal(SessionMeta::default()))
        .build()
        .unwrap();
    let first = rt().block_on(a.run("go", CancellationToken::new()));
    let session = store.load(first.session_id.as_deref().unwrap()).unwrap();
    let b = Agent::builder(ScriptedModel::new(vec![turn("2"), ModelResponse::text("two")]))
        .registry(Registry::builder().tool(echo()).build().unwrap())
        .journal(store.resume_journal(&session, SessionMeta::default()).unwrap())
        .build()
        .unwrap();
    let state = session.resume_state(reins::Limits::default(), b.context(), Some("again")).unwrap();
    assert_eq!(rt().block_on(b.drive(state, CancellationToken::new())).status, Status::Completed);
    let session = store.load(first.session_id.as_deref().unwrap()).unwrap();
    let live = ReplayTools::Live(Arc::new(Registry::builder().tool(echo()).build().unwrap()));

    let per_run = |run: &reins_store::RunRecord| {
        (live.clone(), if run.number == 1 { tiny.clone() } else { ContextConfig::default() })
    };
    let report = rt().block_on(reins_store::replay_runs(&session, per_run)).unwrap();
    assert_eq!(report.divergence, None, "{:?}", report.divergence);
    assert_eq!(report.runs, 2);
    // One setting for both runs is what a replay that ignores the differences would do: run 1 diverges.
    let report = rt().block_on(replay(&session, live.clone(), ContextConfig::default())).unwrap();
    let d = report.divergence.unwrap();
    assert_eq!((d.run, d.what.as_str()), (1, "tool_result"));
}

/// A run that compacted replays with the same compactions, in the same places.
#[test]
fn replay_reproduces_compactions() {
    let dir = TempDir::new("replay-compact");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let echo = FnTool::new("echo", "Echo.", serde_json::json!({"type": "object"}), |args, _c| async move {
        Ok(ToolOutput::Json(args))
    });
    let registry = Arc::new(Registry::builder().tool(echo).build().unwrap());
    let mut steps: Vec<ModelResponse> = (0..40)
        .map(|i| {
            ModelResponse::tool_calls(
                format!("step {i}"),
                vec![ToolCall::new(format!("c{i}"), "echo", serde_json::json!({"text": "y".repeat(60 + i * 7)}))],
            )
        })
        .collect();
    steps.push(ModelResponse::text("done"));
    let ctx = ContextConfig {
        max_context: Some(2000),
        strategy: reins::ContextStrategy::Summarize,
        ..ContextConfig::default()
    };
    // The summarizer fails once in three: the replay must record the same markers there.
    let n = std::sync::atomic::AtomicUsize::new(0);
    let summarizer = reins::FnModel::new(move |_r: &reins::ModelRequest| {
        let i = n.fetch_add(1, Ordering::SeqCst);
        if i % 3 == 2 {
            Err(reins::ModelError::Failed("down".into()))
        } else {
            Ok(ModelResponse::text(format!("summary number {i}\nwith two lines")))
        }
    });
    let agent = Agent::builder(ScriptedModel::new(steps))
        .registry(registry.clone())
        .context(ctx.clone())
        .compact_model(Arc::new(summarizer))
        .journal(store.journal(SessionMeta::default()))
        .build()
        .unwrap();
    let outcome = rt().block_on(agent.run("go", CancellationToken::new()));
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert!(outcome.compactions >= 3, "{}", outcome.compactions);
    let session = store.load(outcome.session_id.as_deref().unwrap()).unwrap();
    assert_eq!(session.messages().unwrap(), outcome.messages);
    let report = rt().block_on(replay(&session, ReplayTools::Recorded, ctx.clone())).unwrap();
    assert_eq!(report.divergence, None, "{:?}", report.divergence);
    assert_eq!(report.steps, 41);
    // Replayed under other context rules, the first compaction is missing: reported.
    let other = ContextConfig { compact_at: 0.95, ..ctx };
    let report = rt().block_on(replay(&session, ReplayTools::Recorded, other)).unwrap();
    assert!(report.divergence.is_some());
}
