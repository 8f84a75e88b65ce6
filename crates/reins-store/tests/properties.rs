//! Property tests: damaged files never panic and always name the problem; reconciliation of a log cut
//! at any point gives a complete, coherent transcript that keeps everything recorded.

mod common;
mod fuzz_support;

use common::{TempDir, rt};
use proptest::prelude::*;
use reins::{CharCounter, ContextConfig, Limits, Message, ModelResponse, ScriptedModel, ToolCall, Transcript};
use reins_store::{INTERRUPTED, SessionMeta, Store, StoreError};
use tokio_util::sync::CancellationToken;

fn recorded_store(dir: &TempDir) -> Vec<u8> {
    let path = dir.path().join("base.db");
    let store = Store::open(&path).unwrap();
    let steps: Vec<ModelResponse> = (0..30)
        .map(|k| ModelResponse::tool_calls("t", vec![ToolCall::new(format!("c{k}"), "none", serde_json::json!({}))]))
        .chain(std::iter::once(ModelResponse::text("ok")))
        .collect();
    let agent = reins::Agent::builder(ScriptedModel::new(steps))
        .journal(store.journal(SessionMeta::default()))
        .build()
        .unwrap();
    rt().block_on(agent.run("fill", CancellationToken::new()));
    drop(store);
    std::fs::read(&path).unwrap()
}

fn read_everything(path: &std::path::Path) -> Result<usize, StoreError> {
    let store = Store::open(path)?;
    let mut n = 0;
    for s in store.list()? {
        let session = store.load(&s.id)?;
        n += session.messages()?.len();
        session.runs()?;
    }
    Ok(n)
}

/// A log row of any content (what the `session_log` fuzz target feeds) is read or refused by name.
#[test]
fn a_log_row_of_any_content_is_read_or_refused() {
    let dir = TempDir::new("prop-row");
    let fixture = fuzz_support::Fixture::new(dir.path().join("f"));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 256, ..ProptestConfig::default() });
    let lines = proptest::collection::vec(
        prop_oneof![
            Just(r#"{"kind":"message","msg_index":5,"data":{"role":"user","content":"x"}}"#.to_owned()),
            Just(r#"{"kind":"event","data":{"v":1}}"#.to_owned()),
            Just(r#"{"kind":"response","data":{"step":9,"response":{"text":"y"}}}"#.to_owned()),
            Just(r#"{"kind":"run_end","data":{"status":"completed"}}"#.to_owned()),
            "\\PC{0,60}",
        ],
        0..6,
    );
    let rows = (any::<u8>(), lines).prop_map(|(n, lines)| {
        let mut bytes = vec![n];
        bytes.extend(lines.join("\n").into_bytes());
        bytes
    });
    let bytes = prop_oneof![rows, proptest::collection::vec(any::<u8>(), 0..200)];
    runner
        .run(&bytes, |data| {
            fuzz_support::check_log_row(&fixture, &data).map_err(proptest::test_runner::TestCaseError::fail)
        })
        .unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_are_refused_not_panicked_on(bytes in proptest::collection::vec(any::<u8>(), 1..9000)) {
        let dir = TempDir::new("prop-bytes");
        let path = dir.path().join("x.db");
        std::fs::write(&path, &bytes).unwrap();
        match read_everything(&path) {
            Ok(_) => prop_assert!(false, "random bytes read as a store"),
            Err(e) => prop_assert!(e.to_string().contains("x.db"), "{}", e),
        }
    }

    #[test]
    fn damaged_stores_never_panic(cut in 0.0f64..1.0, flips in proptest::collection::vec((0.0f64..1.0, any::<u8>()), 0..4)) {
        let dir = TempDir::new("prop-damage");
        let mut bytes = recorded_store(&dir);
        let len = ((bytes.len() as f64) * cut) as usize;
        bytes.truncate(len.max(1));
        for (at, v) in flips {
            let i = ((bytes.len() as f64) * at) as usize;
            if i < bytes.len() {
                bytes[i] = v;
            }
        }
        let path = dir.path().join("d.db");
        std::fs::write(&path, &bytes).unwrap();
        // Either it reads back something coherent, or it says what is wrong; never a panic.
        if let Ok(n) = read_everything(&path) {
            prop_assert!(n <= 62);
        }
    }

    #[test]
    fn a_log_cut_anywhere_reconciles_to_a_complete_transcript(turns in proptest::collection::vec(1usize..4, 1..6), cut in 0usize..40) {
        let mut messages = vec![Message::user("go")];
        for (t, n) in turns.iter().enumerate() {
            let calls: Vec<ToolCall> = (0..*n).map(|k| ToolCall::new(format!("{t}-{k}"), "x", serde_json::json!({}))).collect();
            messages.push(Message::assistant("", calls.clone()));
            for c in calls {
                messages.push(Message::tool_result(c.id.to_string(), "ok", false));
            }
        }
        let cut = 1 + cut % messages.len();
        let prefix = messages[..cut].to_vec();
        let state = reins::RunState::resume("r", prefix.clone(), Limits::default(), &ContextConfig::default(), INTERRUPTED).unwrap();
        let rebuilt = state.transcript().to_vec();
        prop_assert_eq!(&rebuilt[..cut], &prefix[..]);
        let t = Transcript::from_messages(rebuilt.clone(), &CharCounter).unwrap();
        prop_assert!(t.is_complete());
        for m in &rebuilt[cut..] {
            prop_assert_eq!(m.content(), INTERRUPTED);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any id, of any length or characters, resolves to the one session it prefixes or is unknown: never an
    /// SQLite error, never a panic.
    #[test]
    fn any_id_resolves_or_is_unknown(id in prop_oneof![".{0,80}", "[0-9a-f-]{0,40}", "[%_\\\\a]{1,3000}"]) {
        let dir = TempDir::new("resolve");
        let store = Store::open(dir.path().join("s.db")).unwrap();
        let agent = reins::Agent::builder(ScriptedModel::new(vec![ModelResponse::text("ok")]))
            .journal(store.journal(SessionMeta::default()))
            .build()
            .unwrap();
        let real = rt().block_on(agent.run("go", CancellationToken::new())).session_id.unwrap();
        match store.resolve(&id) {
            Ok(found) => {
                prop_assert_eq!(&found, &real);
                prop_assert!(real.to_lowercase().starts_with(&id.to_lowercase()));
            }
            Err(StoreError::NotFound(_)) => prop_assert!(!real.to_lowercase().starts_with(&id.to_lowercase()) || id.is_empty()),
            Err(e) => prop_assert!(false, "{e}"),
        }
    }
}
