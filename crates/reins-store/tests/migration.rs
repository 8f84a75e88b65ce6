//! A store written by the first release (schema 1: one row per entry) opens under schema 2 with every
//! session, entry and counter kept, and its sessions continue.

mod common;

use common::{TempDir, rt};
use reins::{Agent, ContextConfig, Limits, Message, ModelResponse, ScriptedModel, Status};
use reins_store::{SCHEMA_VERSION, SessionMeta, Store, kind};
use tokio_util::sync::CancellationToken;

/// Schema 1 as the first release created it.
const V1: &str = "CREATE TABLE sessions (
        id TEXT PRIMARY KEY NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, model TEXT,
        workspace TEXT, status TEXT NOT NULL, runs INTEGER NOT NULL DEFAULT 0, steps INTEGER NOT NULL DEFAULT 0,
        tool_calls INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0, calls_without_usage INTEGER NOT NULL DEFAULT 0, cost_usd REAL,
        messages INTEGER NOT NULL DEFAULT 0, next_seq INTEGER NOT NULL DEFAULT 0);
    CREATE INDEX sessions_created ON sessions(created_at);
    CREATE TABLE entries (
        session_id TEXT NOT NULL, seq INTEGER NOT NULL, run INTEGER NOT NULL, kind TEXT NOT NULL,
        msg_index INTEGER, ts TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
    CREATE UNIQUE INDEX entries_message ON entries(session_id, msg_index) WHERE msg_index IS NOT NULL;
    PRAGMA user_version = 1;
    PRAGMA application_id = 1380272462;";

fn v1_store(path: &std::path::Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
    conn.execute_batch(V1).unwrap();
    let tools = r#"[]"#;
    let limits = serde_json::to_string(&Limits::default()).unwrap();
    let start =
        format!(r#"{{"run_id":"r1","limits":{limits},"tools":{tools},"initial_messages":1,"recorded_messages":0}}"#);
    // A finished session: prompt, answer, a response with usage, an event, the end.
    let done = "11111111-1111-4111-8111-111111111111";
    let rows: Vec<(&str, i64, &str, Option<i64>, String)> = vec![
        (done, 0, kind::RUN_START, None, start.clone()),
        (done, 1, kind::MESSAGE, Some(0), r#"{"role":"user","content":"q1"}"#.into()),
        (done, 2, kind::RESPONSE, None, r#"{"step":1,"response":{"text":"a1","usage":{"input_tokens":7,"output_tokens":3}}}"#.into()),
        (done, 3, kind::EVENT, None, r#"{"v":1,"run_id":"r1","seq":0,"ts":"2026-01-01T00:00:00.000Z","type":"model_start","step":1,"messages":1}"#.into()),
        (done, 4, kind::MESSAGE, Some(1), r#"{"role":"assistant","content":"a1"}"#.into()),
        (done, 5, kind::RUN_END, None, r#"{"status":"completed","answer":"a1","error":null,"steps":1,"tool_calls":0,"usage":{"input_tokens":7,"output_tokens":3,"calls_with_usage":1,"calls_without_usage":0},"run_id":"r1"}"#.into()),
    ];
    // A session whose process died after its prompt (still `running`).
    let crashed = "22222222-2222-4222-8222-222222222222";
    let mut rows = rows;
    rows.push((crashed, 0, kind::RUN_START, None, start));
    rows.push((crashed, 1, kind::MESSAGE, Some(0), r#"{"role":"user","content":"q2"}"#.into()));
    for (i, (s, seq, k, m, d)) in rows.iter().enumerate() {
        conn.execute(
            "INSERT INTO entries (session_id, seq, run, kind, msg_index, ts, data) VALUES (?1, ?2, 1, ?3, ?4, ?5, ?6)",
            rusqlite::params![s, seq, k, m, format!("2026-01-01T00:00:{i:02}.000000Z"), d],
        )
        .unwrap();
    }
    conn.execute_batch(&format!(
        "INSERT INTO sessions VALUES ('{done}', '2026-01-01T00:00:00Z', '2026-01-01T00:00:05Z', 'scripted', NULL,
            'completed', 1, 1, 0, 7, 3, 0, 0.5, 2, 6);
         INSERT INTO sessions VALUES ('{crashed}', '2026-01-02T00:00:00Z', '2026-01-02T00:00:01Z', NULL, NULL,
            'running', 1, 0, 0, 0, 0, 0, NULL, 1, 2);"
    ))
    .unwrap();
}

#[test]
fn a_schema_1_store_is_migrated_with_everything_kept() {
    let dir = TempDir::new("migrate");
    let path = dir.path().join("old.db");
    v1_store(&path);
    let store = Store::open(&path).unwrap();
    let version: i64 =
        rusqlite::Connection::open(&path).unwrap().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, SCHEMA_VERSION);

    // The index: newest first, counters as they were (the crashed session's are not counted twice).
    let list = store.list().unwrap();
    assert_eq!(list.len(), 2);
    let (crashed, done) = (&list[0], &list[1]);
    assert_eq!(done.id, "11111111-1111-4111-8111-111111111111");
    assert_eq!((done.status.as_str(), done.steps, done.input_tokens, done.output_tokens), ("completed", 1, 7, 3));
    assert_eq!((done.messages, done.cost_usd, done.model.as_deref()), (2, Some(0.5), Some("scripted")));
    assert_eq!((crashed.status.as_str(), crashed.steps, crashed.messages), ("running", 0, 1));

    // The entries, one by one: seq, kind, index, time and data as written.
    let s = store.load(&done.id).unwrap();
    let got: Vec<(u64, &str, Option<u64>)> = s.entries.iter().map(|e| (e.seq, e.kind.as_str(), e.msg_index)).collect();
    assert_eq!(
        got,
        vec![
            (0, kind::RUN_START, None),
            (1, kind::MESSAGE, Some(0)),
            (2, kind::RESPONSE, None),
            (3, kind::EVENT, None),
            (4, kind::MESSAGE, Some(1)),
            (5, kind::RUN_END, None)
        ]
    );
    assert_eq!(s.entries[2].ts, "2026-01-01T00:00:02.000000Z");
    assert_eq!(s.entries[3].data["type"], "model_start");
    assert_eq!(s.messages().unwrap(), vec![Message::user("q1"), Message::assistant("a1", vec![])]);
    let runs = s.runs().unwrap();
    assert_eq!(runs[0].responses[0].response.as_ref().unwrap().text, "a1");
    assert_eq!(runs[0].end.as_ref().unwrap()["status"], "completed");

    // The migrated session continues: same id, appended after seq 5, counters added to the old ones.
    let b = Agent::builder(ScriptedModel::new(vec![ModelResponse::text("a2").with_usage(reins::Usage::new(5, 1))]))
        .journal(store.resume_journal(&s, SessionMeta::default()).unwrap())
        .build()
        .unwrap();
    let state = s.resume_state(Limits::default(), &ContextConfig::default(), Some("q3")).unwrap();
    let o = rt().block_on(b.drive(state, CancellationToken::new()));
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    let s = store.load(&done.id).unwrap();
    assert_eq!(s.messages().unwrap().len(), 4);
    assert_eq!(s.entries[6].seq, 6);
    assert_eq!(s.entries[6].kind, kind::RUN_START);
    assert!(s.entries.iter().enumerate().all(|(i, e)| e.seq == i as u64));
    let sum = &s.summary;
    assert_eq!((sum.runs, sum.steps, sum.input_tokens, sum.output_tokens, sum.messages), (2, 2, 12, 4, 4));

    // The crashed one resumes too; its interrupted run is not counted twice.
    let c = store.load(&crashed.id).unwrap();
    let b = Agent::builder(ScriptedModel::new(vec![ModelResponse::text("a")]))
        .journal(store.resume_journal(&c, SessionMeta::default()).unwrap())
        .build()
        .unwrap();
    let o = rt().block_on(
        b.drive(c.resume_state(Limits::default(), &ContextConfig::default(), None).unwrap(), CancellationToken::new()),
    );
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    let c = store.summary(&crashed.id).unwrap();
    assert_eq!((c.status.as_str(), c.runs, c.steps, c.messages), ("completed", 2, 1, 2));
}
