//! Shared by the `session_log` fuzz target (fuzz/) and the property tests: a real store holding one
//! recorded session whose last log row is overwritten with arbitrary content, then read back.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Mutex;

use reins::{Agent, ContextConfig, Limits, ModelResponse, ScriptedModel, ToolCall};
use reins_store::{SessionMeta, Store};

/// A store with one recorded session (a tool call, its refusal, an answer).
pub struct Fixture {
    pub dir: PathBuf,
    pub store: Store,
    pub id: String,
    conn: Mutex<rusqlite::Connection>,
}

impl Fixture {
    pub fn new(dir: PathBuf) -> Fixture {
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(dir.join("fuzz.db")).unwrap();
        let model = ScriptedModel::new(vec![
            ModelResponse::tool_calls("t", vec![ToolCall::new("c1", "none", serde_json::json!({"a": 1}))]),
            ModelResponse::text("done"),
        ]);
        let agent = Agent::builder(model).journal(store.journal(SessionMeta::default())).build().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outcome = rt.block_on(agent.run("go", tokio_util::sync::CancellationToken::new()));
        let id = outcome.session_id.unwrap();
        let conn = rusqlite::Connection::open(dir.join("fuzz.db")).unwrap();
        Fixture { dir, store, id, conn: Mutex::new(conn) }
    }
}

/// Writes `data` (first byte: the entry count the row claims; the rest: its text) over the session's last
/// log row and reads the session back: it either reads (and rebuilds without panicking) or is refused with
/// an error naming the store or the session.
pub fn check_log_row(f: &Fixture, data: &[u8]) -> Result<(), String> {
    let (count, text) = match data.split_first() {
        Some((b, rest)) => (i64::from(*b % 8), String::from_utf8_lossy(rest).into_owned()),
        None => (0, String::new()),
    };
    {
        let conn = f.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        conn.execute(
            "UPDATE log SET entries = ?1, data = ?2 WHERE id = (SELECT max(id) FROM log)",
            rusqlite::params![count, text],
        )
        .map_err(|e| e.to_string())?;
    }
    match f.store.load(&f.id) {
        Ok(s) => {
            let _ = s.export_lines();
            let _ = s.runs();
            let _ = s.events().count();
            if s.messages().is_ok() {
                let _ = s.resume_state(Limits::default(), &ContextConfig::default(), Some("more"));
            }
            Ok(())
        }
        Err(e) => {
            let m = e.to_string();
            if m.contains(&f.id) || m.contains("fuzz.db") {
                Ok(())
            } else {
                Err(format!("the error names neither the session nor the store: {m}"))
            }
        }
    }
}
