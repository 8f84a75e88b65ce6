//! The store with real SQLite files: recording, reading back, resuming, concurrency, damaged files.

mod common;

use std::sync::Arc;

use common::{TempDir, rt};
use reins::{
    Agent, ContextConfig, FnTool, Limits, Message, ModelResponse, Registry, ScriptedModel, Status, ToolCall,
    ToolOutput, Usage,
};
use reins_store::{INTERRUPTED, SessionMeta, Store, StoreError, StoreOptions, kind};
use tokio_util::sync::CancellationToken;

fn echo() -> FnTool {
    FnTool::new(
        "echo",
        "Returns its text.",
        serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        |args, _ctx| async move { Ok(ToolOutput::Json(args["text"].clone())) },
    )
}

fn call(id: &str, text: &str) -> ToolCall {
    ToolCall::new(id, "echo", serde_json::json!({"text": text}))
}

fn agent(store: &Store, steps: Vec<ModelResponse>) -> Agent {
    Agent::builder(ScriptedModel::new(steps))
        .registry(Registry::builder().tool(echo()).build().unwrap())
        .journal(store.journal(SessionMeta {
            model: Some("scripted".into()),
            workspace: None,
            prices: Some(reins_store::Prices {
                input_per_mtok: 1.0,
                output_per_mtok: 2.0,
                cached_input_per_mtok: 0.0,
                cache_write_per_mtok: None,
            }),
            config: None,
        }))
        .build()
        .unwrap()
}

#[test]
fn a_run_is_recorded_and_reads_back_exactly() {
    let dir = TempDir::new("record");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let a = agent(
        &store,
        vec![
            ModelResponse::tool_calls("two calls", vec![call("a", "one"), call("b", "two")])
                .with_usage(Usage::new(100, 10)),
            ModelResponse::text("done"),
        ],
    );
    let outcome = rt().block_on(a.run("go", CancellationToken::new()));
    assert_eq!(outcome.status, Status::Completed);
    let id = outcome.session_id.clone().expect("a recorded run carries its session id");
    let json = serde_json::to_value(&outcome).unwrap();
    assert_eq!(json["session_id"], serde_json::json!(id));

    let session = store.load(&id).unwrap();
    assert_eq!(session.messages().unwrap(), outcome.messages);
    let s = &session.summary;
    assert_eq!((s.status.as_str(), s.runs, s.steps, s.tool_calls), ("completed", 1, 2, 2));
    assert_eq!((s.input_tokens, s.output_tokens, s.calls_without_usage), (100, 10, 1));
    assert!((s.cost_usd.unwrap() - 120.0 / 1e6).abs() < 1e-12, "{:?}", s.cost_usd);
    assert_eq!(s.model.as_deref(), Some("scripted"));
    let runs = session.runs().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].responses.len(), 2);
    assert_eq!(runs[0].responses[1].response.as_ref().unwrap().text, "done");
    assert_eq!(runs[0].start.tools[0].name, "echo");
    assert_eq!(runs[0].end.as_ref().unwrap()["status"], "completed");
    // The recorded end is the outcome, field for field, without its transcript and its instructions (the
    // run's start holds those).
    let mut expected = serde_json::to_value(&outcome).unwrap();
    expected.as_object_mut().unwrap().remove("messages");
    expected.as_object_mut().unwrap().remove("instructions");
    assert_eq!(runs[0].end.as_ref().unwrap(), &expected);
    // Events: run_start and run_end carry the session id; sequence numbers are dense.
    let events: Vec<_> = session.events().collect();
    assert_eq!(events.first().unwrap()["type"], "run_start");
    assert_eq!(events.first().unwrap()["session_id"], serde_json::json!(id));
    assert_eq!(events.last().unwrap()["type"], "run_end");
    assert_eq!(events.last().unwrap()["session_id"], serde_json::json!(id));
    // The log's sequence numbers are dense from 0.
    for (i, e) in session.entries.iter().enumerate() {
        assert_eq!(e.seq, i as u64);
    }
    // Export: a session line, then one line per entry.
    let lines = session.export_lines();
    assert_eq!(lines.len(), session.entries.len() + 1);
    for l in &lines {
        serde_json::from_str::<serde_json::Value>(l).unwrap();
    }
    // Listing and prefixes.
    assert_eq!(store.list().unwrap()[0].id, id);
    assert_eq!(store.resolve(&id[..8]).unwrap(), id);
    assert!(matches!(store.resolve("zzzz"), Err(StoreError::NotFound(_))));
}

#[test]
fn resuming_keeps_the_id_and_appends() {
    let dir = TempDir::new("resume");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let first =
        rt().block_on(agent(&store, vec![ModelResponse::text("first answer")]).run("q1", CancellationToken::new()));
    let id = first.session_id.unwrap();
    let session = store.load(&id).unwrap();
    let b = Agent::builder(ScriptedModel::new(vec![
        ModelResponse::tool_calls("", vec![call("x", "again")]),
        ModelResponse::text("second answer"),
    ]))
    .registry(Registry::builder().tool(echo()).build().unwrap())
    .journal(store.resume_journal(&session, SessionMeta::default()).unwrap())
    .build()
    .unwrap();
    let state = session.resume_state(Limits::default(), b.context(), Some("q2")).unwrap();
    let second = rt().block_on(b.drive(state, CancellationToken::new()));
    assert_eq!(second.status, Status::Completed);
    assert_eq!(second.session_id.as_deref(), Some(id.as_str()));
    let session = store.load(&id).unwrap();
    let messages = session.messages().unwrap();
    assert_eq!(messages, second.messages);
    assert_eq!(messages.len(), 6);
    assert_eq!(messages[2], Message::user("q2"));
    assert_eq!((session.summary.runs, session.summary.steps, session.summary.messages), (2, 3, 6));
    assert_eq!(session.runs().unwrap().len(), 2);
    assert_eq!(store.list().unwrap().len(), 1);
    // A stale resume (the session moved on since it was loaded) is refused, not appended twice.
    let stale = store.resume_journal(&store.load(&id).unwrap(), SessionMeta::default()).unwrap();
    let c = Agent::builder(ScriptedModel::new(vec![ModelResponse::text("x")])).journal(stale.clone()).build().unwrap();
    let d = Agent::builder(ScriptedModel::new(vec![ModelResponse::text("y")])).journal(stale).build().unwrap();
    let s = store.load(&id).unwrap();
    let ok = rt().block_on(
        c.drive(s.resume_state(Limits::default(), c.context(), Some("q3")).unwrap(), CancellationToken::new()),
    );
    assert_eq!(ok.status, Status::Completed);
    let refused = rt().block_on(
        d.drive(s.resume_state(Limits::default(), d.context(), Some("q3")).unwrap(), CancellationToken::new()),
    );
    assert_eq!(refused.status, Status::Aborted);
    assert!(refused.error.as_deref().unwrap().contains("changed since it was loaded"), "{:?}", refused.error);
    assert_eq!(store.load(&id).unwrap().messages().unwrap().len(), 8);
}

/// The instructions are recorded with each run; a resumed session gets them back (so the model is told the
/// same), and the resumed run records them again.
#[test]
fn instructions_are_recorded_and_a_resumed_session_gets_them_back() {
    let dir = TempDir::new("instructions");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let rules = "House rules: answer in one word.";
    let a = Agent::builder(ScriptedModel::new(vec![ModelResponse::text("first")]))
        .instructions(rules)
        .journal(store.journal(SessionMeta::default()))
        .build()
        .unwrap();
    let first = rt().block_on(a.run("q1", CancellationToken::new()));
    assert_eq!(first.instructions.as_deref(), Some(rules));
    let id = first.session_id.unwrap();
    let session = store.load(&id).unwrap();
    assert_eq!(session.runs().unwrap()[0].start.instructions.as_deref(), Some(rules));
    assert!(session.messages().unwrap().iter().all(|m| !m.content().contains("House rules")), "not a message");

    // An agent without instructions resumes it: the state carries the recorded ones.
    let model = Arc::new(ScriptedModel::new(vec![ModelResponse::text("second")]));
    let b = Agent::builder_shared(model.clone())
        .journal(store.resume_journal(&session, SessionMeta::default()).unwrap())
        .build()
        .unwrap();
    let state = session.resume_state(Limits::default(), b.context(), Some("q2")).unwrap();
    assert_eq!(state.instructions(), Some(rules));
    let second = rt().block_on(b.drive(state, CancellationToken::new()));
    assert_eq!(second.status, Status::Completed);
    assert_eq!(model.requests()[0].instructions.as_deref(), Some(rules));
    assert_eq!(store.load(&id).unwrap().runs().unwrap()[1].start.instructions.as_deref(), Some(rules));

    // A session recorded without instructions resumes without any.
    let c = rt().block_on(agent(&store, vec![ModelResponse::text("x")]).run("q", CancellationToken::new()));
    let s = store.load(c.session_id.as_deref().unwrap()).unwrap();
    assert_eq!(s.runs().unwrap()[0].start.instructions, None);
    assert_eq!(s.resume_state(Limits::default(), &ContextConfig::default(), None).unwrap().instructions(), None);
}

#[test]
fn an_interrupted_batch_is_reconciled_on_resume() {
    let dir = TempDir::new("reconcile");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    // A run cancelled in the middle of a batch: its calls get aborted results, recorded as such.
    let slow = FnTool::new("slow", "Waits.", serde_json::json!({"type": "object"}), |_a, ctx| async move {
        ctx.cancel.cancelled().await;
        Err(reins::ToolError::Cancelled)
    });
    let cancel = CancellationToken::new();
    let a = Agent::builder(ScriptedModel::new(vec![ModelResponse::tool_calls(
        "",
        vec![ToolCall::new("s1", "slow", serde_json::json!({}))],
    )]))
    .registry(Registry::builder().tool(slow).build().unwrap())
    .journal(store.journal(SessionMeta::default()))
    .build()
    .unwrap();
    let c2 = cancel.clone();
    let outcome = rt().block_on(async move {
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            c2.cancel();
        });
        a.run("go", cancel).await
    });
    assert_eq!(outcome.status, Status::Aborted);
    let session = store.load(outcome.session_id.as_deref().unwrap()).unwrap();
    assert_eq!(session.summary.status, "aborted");
    assert_eq!(session.messages().unwrap(), outcome.messages);
    // A log cut after the assistant turn (what a crash leaves) is completed with interrupted results.
    let mut cut = outcome.messages.clone();
    cut.truncate(2);
    let state = reins::RunState::resume("r", cut, Limits::default(), &ContextConfig::default(), INTERRUPTED).unwrap();
    assert_eq!(state.transcript().last(), Some(&Message::tool_result("s1", INTERRUPTED, true)));
}

#[test]
fn concurrent_runs_share_one_database() {
    let dir = TempDir::new("concurrent");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let runtime = rt();
    let outcomes = runtime.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..8 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let steps: Vec<ModelResponse> = (0..10)
                    .map(|k| ModelResponse::tool_calls("", vec![call(&format!("{i}-{k}"), &format!("r{i}-{k}"))]))
                    .chain(std::iter::once(ModelResponse::text(format!("answer {i}"))))
                    .collect();
                agent(&store, steps).run(&format!("task {i}"), CancellationToken::new()).await
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    let listed = store.list().unwrap();
    assert_eq!(listed.len(), 8);
    for o in outcomes {
        assert_eq!(o.status, Status::Completed, "{:?}", o.error);
        let s = store.load(o.session_id.as_deref().unwrap()).unwrap();
        assert_eq!(s.messages().unwrap(), o.messages);
        assert_eq!((s.summary.steps, s.summary.tool_calls), (11, 10));
    }
}

#[test]
fn a_full_store_ends_the_run_with_a_clear_error() {
    let dir = TempDir::new("full");
    let path = dir.path().join("s.db");
    Store::open(&path).unwrap();
    let pages: i64 =
        rusqlite::Connection::open(&path).unwrap().query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    let store =
        Store::open_with(&path, StoreOptions { max_pages: Some(pages as u64 + 2), ..Default::default() }).unwrap();
    let big = "x".repeat(20_000);
    let steps: Vec<ModelResponse> =
        (0..20).map(|k| ModelResponse::tool_calls("", vec![call(&format!("c{k}"), &big)])).collect();
    let outcome = rt().block_on(agent(&store, steps).run("fill it", CancellationToken::new()));
    assert_eq!(outcome.status, Status::Aborted);
    let err = outcome.error.unwrap_or_default();
    assert!(err.contains("session log") && err.contains("is full"), "{err}");
    // What was flushed before the disk filled is still there and readable.
    let session = store.load(outcome.session_id.as_deref().unwrap()).unwrap();
    assert!(!session.messages().unwrap().is_empty());
}

#[test]
fn no_model_call_happens_before_the_prompt_is_durable() {
    let dir = TempDir::new("nomodel");
    let path = dir.path().join("s.db");
    Store::open(&path).unwrap();
    let pages: i64 =
        rusqlite::Connection::open(&path).unwrap().query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    // The store may not grow at all: the prompt (far larger than a page) cannot be recorded.
    let store = Store::open_with(&path, StoreOptions { max_pages: Some(pages as u64), ..Default::default() }).unwrap();
    let model = Arc::new(ScriptedModel::new(vec![ModelResponse::text("never")]));
    let a = Agent::builder_shared(model.clone()).journal(store.journal(SessionMeta::default())).build().unwrap();
    let outcome = rt().block_on(a.run(&"p".repeat(100_000), CancellationToken::new()));
    assert_eq!(outcome.status, Status::Aborted);
    let err = outcome.error.as_deref().unwrap_or("");
    assert!(err.contains("session log") && err.contains("is full"), "{err}");
    assert_eq!(model.calls(), 0, "no model call without a durable log");
    assert_eq!(outcome.steps, 0);
}

fn filled_store(dir: &TempDir) -> std::path::PathBuf {
    let path = dir.path().join("s.db");
    let store = Store::open(&path).unwrap();
    for i in 0..5 {
        let steps: Vec<ModelResponse> = (0..20)
            .map(|k| ModelResponse::tool_calls("", vec![call(&format!("{k}"), &"y".repeat(500 + i))]))
            .chain(std::iter::once(ModelResponse::text("ok")))
            .collect();
        let o = rt().block_on(agent(&store, steps).run("fill", CancellationToken::new()));
        assert_eq!(o.status, Status::Completed);
    }
    path
}

fn read_all(path: &std::path::Path) -> Result<usize, StoreError> {
    let store = Store::open(path)?;
    let mut n = 0;
    for s in store.list()? {
        n += store.load(&s.id)?.messages()?.len();
    }
    Ok(n)
}

#[test]
fn corrupt_and_truncated_files_give_a_clear_error() {
    let dir = TempDir::new("corrupt");
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, b"this is not a database at all, just some text that is long enough".repeat(100)).unwrap();
    let e = Store::open(&garbage).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("corrupt or truncated"), "{e}");

    let path = filled_store(&dir);
    let full = std::fs::read(&path).unwrap();
    assert_eq!(read_all(&path).unwrap(), 5 * 42);
    let mut errors = 0;
    for len in [50, 100, 1000, 4096, 4097, 8192, full.len() / 3, full.len() / 2, full.len() - 4096, full.len() - 1] {
        let cut = dir.path().join(format!("cut-{len}.db"));
        std::fs::write(&cut, &full[..len]).unwrap();
        match read_all(&cut) {
            Ok(n) => panic!("a store cut to {len} of {} bytes read back {n} messages without an error", full.len()),
            Err(e) => {
                errors += 1;
                let msg = e.to_string();
                assert!(msg.contains(&cut.display().to_string()), "the error names the file: {msg}");
                assert!(matches!(e, StoreError::Corrupt { .. }), "cut to {len}: {msg}");
            }
        }
    }
    assert_eq!(errors, 10);
}

#[test]
fn foreign_and_newer_databases_are_refused() {
    let dir = TempDir::new("foreign");
    let foreign = dir.path().join("other.db");
    rusqlite::Connection::open(&foreign).unwrap().execute_batch("CREATE TABLE t (x)").unwrap();
    assert!(matches!(Store::open(&foreign), Err(StoreError::Foreign { .. })));
    let newer = dir.path().join("newer.db");
    Store::open(&newer).unwrap();
    rusqlite::Connection::open(&newer).unwrap().execute_batch("PRAGMA user_version = 99").unwrap();
    let e = Store::open(&newer).unwrap_err();
    assert!(matches!(e, StoreError::TooNew { found: 99, .. }), "{e}");
    // Opening twice is idempotent (no second migration).
    let again = dir.path().join("again.db");
    Store::open(&again).unwrap();
    Store::open(&again).unwrap();
}

#[test]
fn every_message_is_recorded_once() {
    let dir = TempDir::new("once");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let o = rt().block_on(
        agent(&store, vec![ModelResponse::tool_calls("", vec![call("a", "1")]), ModelResponse::text("ok")])
            .run("go", CancellationToken::new()),
    );
    let s = store.load(o.session_id.as_deref().unwrap()).unwrap();
    let indices: Vec<u64> = s.entries.iter().filter(|e| e.kind == kind::MESSAGE).filter_map(|e| e.msg_index).collect();
    assert_eq!(indices, vec![0, 1, 2, 3]);
}

#[test]
fn a_run_that_lost_its_session_to_a_later_run_records_nothing_more() {
    use reins::Journal as _;
    let dir = TempDir::new("takeover");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let o = rt().block_on(agent(&store, vec![ModelResponse::text("first")]).run("q1", CancellationToken::new()));
    let id = o.session_id.unwrap();
    let session = store.load(&id).unwrap();
    let state = session.resume_state(Limits::default(), &ContextConfig::default(), Some("q2")).unwrap();
    let journal = store.resume_journal(&session, SessionMeta::default()).unwrap();
    rt().block_on(async {
        // Two resumes of one loaded session start before either records anything: both pass the check.
        let a = journal.start(&state, &[]).await.unwrap();
        let b = journal.start(&state, &[]).await.unwrap();
        let q2 = Message::user("q2");
        a.message(2, &q2);
        let e = a.flush().await.unwrap_err();
        assert!(e.0.contains("continued by another run"), "{e}");
        // The failure sticks, and the later run records normally.
        assert!(a.flush().await.is_err());
        b.message(2, &q2);
        b.flush().await.unwrap();
    });
    let s = store.load(&id).unwrap();
    let messages = s.messages().unwrap();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(messages[2], Message::user("q2"));
    // The first resume started (its run_start is kept) but wrote nothing after the takeover.
    assert_eq!(s.summary.runs, 3);
    assert_eq!(s.entries.iter().filter(|e| e.kind == kind::MESSAGE).count(), 3);
}

#[test]
fn cached_input_is_priced_apart() {
    let p = reins_store::Prices {
        input_per_mtok: 2.0,
        output_per_mtok: 8.0,
        cached_input_per_mtok: 0.5,
        cache_write_per_mtok: None,
    };
    let u = Usage { cached_input_tokens: 400_000, ..Usage::new(1_000_000, 100_000) };
    assert!((p.cost(&u) - (0.6 * 2.0 + 0.4 * 0.5 + 0.1 * 8.0)).abs() < 1e-9);
    let no_cache_price = reins_store::Prices { cached_input_per_mtok: 0.0, ..p };
    assert!((no_cache_price.cost(&u) - (2.0 + 0.8)).abs() < 1e-9);
}

fn wal_len(db: &std::path::Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map_or(0, |m| m.len())
}

/// A connection of another "process" that keeps the store open (in WAL mode: it has read it).
fn held_open(db: &std::path::Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(db).unwrap();
    c.query_row("SELECT count(*) FROM sessions", [], |r| r.get::<_, i64>(0)).unwrap();
    c
}

#[test]
fn closing_the_store_leaves_every_session_in_the_one_file() {
    let dir = TempDir::new("close");
    let db = dir.path().join("s.db");
    let store = Store::open(&db).unwrap();
    // Another connection keeps the store open all along (as another process would): SQLite's own
    // checkpoint when the last connection closes cannot help then.
    let _held = held_open(&db);
    let mut ids = Vec::new();
    for i in 0..3 {
        let a = agent(&store, vec![ModelResponse::tool_calls("", vec![call("a", "x")]), ModelResponse::text("ok")]);
        let o = rt().block_on(a.run(&format!("run {i}"), CancellationToken::new()));
        ids.push(o.session_id.unwrap());
    }
    // Closing waits for the runs' writers to hand their connections back, then checkpoints.
    store.close().unwrap();
    assert_eq!(wal_len(&db), 0, "the write-ahead log was checkpointed and truncated");
    let copy = dir.path().join("copy.db");
    std::fs::copy(&db, &copy).unwrap();
    let mut found: Vec<String> = Store::open(&copy).unwrap().list().unwrap().into_iter().map(|s| s.id).collect();
    found.sort();
    ids.sort();
    assert_eq!(found, ids);
    // The store goes on working after a close.
    let a = agent(&store, vec![ModelResponse::text("again")]);
    assert_eq!(rt().block_on(a.run("more", CancellationToken::new())).status, Status::Completed);
    assert_eq!(store.list().unwrap().len(), 4);
}

#[test]
fn the_last_clone_of_a_store_checkpoints_when_dropped() {
    let dir = TempDir::new("drop-close");
    let db = dir.path().join("s.db");
    let held;
    let id = {
        let store = Store::open(&db).unwrap();
        held = held_open(&db);
        let a = agent(&store, vec![ModelResponse::text("ok")]);
        let id = rt().block_on(a.run("go", CancellationToken::new())).session_id.unwrap();
        assert!(wal_len(&db) > 0);
        id
    };
    // The run's writer thread may hold the last clone a moment longer: it checkpoints when it lets go.
    let t0 = std::time::Instant::now();
    while wal_len(&db) > 0 && t0.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(wal_len(&db), 0);
    drop(held);
    let copy = dir.path().join("copy.db");
    std::fs::copy(&db, &copy).unwrap();
    assert_eq!(Store::open(&copy).unwrap().list().unwrap()[0].id, id);
}

#[test]
fn a_backup_is_a_consistent_private_copy_that_never_overwrites() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = TempDir::new("backup");
    let db = dir.path().join("s.db");
    let store = Store::open(&db).unwrap();
    let a = agent(&store, vec![ModelResponse::tool_calls("", vec![call("a", "x")]), ModelResponse::text("ok")]);
    let done = rt().block_on(a.run("first", CancellationToken::new())).session_id.unwrap();
    // A run still going in another thread: its first step is committed, its model waits.
    let running_store = store.clone();
    let running = std::thread::spawn(move || {
        let steps = vec![
            reins::ScriptStep::Respond(ModelResponse::tool_calls("", vec![call("b", "y")])),
            reins::ScriptStep::Delay(
                std::time::Duration::from_millis(1500),
                Box::new(reins::ScriptStep::Respond(ModelResponse::text("late"))),
            ),
        ];
        let a = Agent::builder(ScriptedModel::new(steps))
            .registry(Registry::builder().tool(echo()).build().unwrap())
            .journal(running_store.journal(SessionMeta::default()))
            .build()
            .unwrap();
        rt().block_on(a.run("second", CancellationToken::new()))
    });
    let t0 = std::time::Instant::now();
    while !store.list().unwrap().iter().any(|s| s.status == "running" && s.messages == 3) {
        assert!(t0.elapsed() < std::time::Duration::from_secs(10), "the second run did not get going");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let copy = dir.path().join("backup.db");
    store.backup(&copy).unwrap();
    assert_eq!(std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(wal_len(&copy), 0, "the copy is one file");
    let moved = dir.path().join("moved.db");
    std::fs::rename(&copy, &moved).unwrap();
    let listed = Store::open(&moved).unwrap().list().unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().any(|s| s.id == done && s.status == "completed"));
    assert!(listed.iter().any(|s| s.id != done && s.status == "running" && s.messages == 3));
    assert_eq!(running.join().unwrap().status, Status::Completed);

    // Never an overwrite, never through a symlink: the existing file is left as it was.
    std::fs::write(&copy, "keep me").unwrap();
    assert!(matches!(store.backup(&copy), Err(StoreError::Exists { .. })));
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), "keep me");
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(dir.path().join("elsewhere.db"), &link).unwrap();
    assert!(matches!(store.backup(&link), Err(StoreError::Exists { .. })));
    assert!(!dir.path().join("elsewhere.db").exists());
}

#[test]
fn ids_that_no_session_has_are_unknown_without_asking_sqlite() {
    let dir = TempDir::new("ids");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let outcome = rt().block_on(agent(&store, vec![ModelResponse::text("done")]).run("go", CancellationToken::new()));
    let id = outcome.session_id.unwrap();
    assert_eq!(store.resolve(&id.to_uppercase()[..6]).unwrap(), id, "prefixes match as before, in any case");
    // 100,000 characters: an unknown id (SQLite would refuse the LIKE pattern as too complex), shown cut.
    let long = "a".repeat(100_000);
    match store.load(&long) {
        Err(StoreError::NotFound(shown)) => assert!(shown.chars().count() < 40, "{shown}"),
        other => panic!("{other:?}"),
    }
    let longer = format!("{id}0");
    for bad in [longer.as_str(), "%", "_", "%%%%", "\\", "a%", "a_b", "a b", "' OR 1=1 --", "\u{1b}[2J", ""] {
        assert!(matches!(store.resolve(bad), Err(StoreError::NotFound(_))), "{bad:?}");
    }
}

#[test]
fn a_directory_as_the_store_is_named_a_directory() {
    let dir = TempDir::new("dir-store");
    let err = Store::open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::IsDirectory { .. }), "{err:?}");
    assert!(err.to_string().contains("is a directory"), "{err}");
}
