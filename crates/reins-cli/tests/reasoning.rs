//! `--reasoning-effort` and `--thinking-budget` on the real binary: bad values and combinations the APIs
//! refuse are exit 2 with the flag or key named, before any request; the settings reach the request body; an
//! Anthropic run's signed thinking is in the outcome's transcript and goes back unchanged after `--resume`.

use std::process::Output;

use serde_json::{Value, json};

mod common;

use common::{Dir, reins, serve_once};

fn run(args: &[&str]) -> Output {
    reins().arg("run").args(args).env_remove("OPENAI_API_KEY").env_remove("ANTHROPIC_API_KEY").output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_reasoning_flags_are_exit_2_with_a_clear_error_and_no_request() {
    // Nothing listens on port 9: a request would fail differently (and later).
    let nowhere = "http://127.0.0.1:9";
    let anthropic = ["--model", "anthropic:claude-sonnet-4-5", "--base-url", nowhere];
    let openai = ["--model", "openai:gpt-5", "--base-url", "http://127.0.0.1:9/v1"];
    let cases: Vec<(Vec<&str>, &[&str])> = vec![
        (
            vec!["--reasoning-effort", "extreme", "--model", "openai:gpt-5", "hi"],
            &["--reasoning-effort", "expected \"low\", \"medium\", \"high\" or \"none\""],
        ),
        (vec!["--thinking-budget", "lots", "--model", "anthropic:x", "hi"], &["--thinking-budget"]),
        ([&anthropic[..], &["--thinking-budget", "500", "hi"]].concat(), &["--thinking-budget", "at least 1024"]),
        (
            [&anthropic[..], &["--thinking-budget", "8192", "--max-response-tokens", "4096", "hi"]].concat(),
            &["provider.thinking_budget", "below the response cap (4096"],
        ),
        (
            [&anthropic[..], &["--reasoning-effort", "high", "hi"]].concat(),
            &["provider.reasoning_effort", "thinking budget"],
        ),
        (
            [&openai[..], &["--thinking-budget", "2048", "hi"]].concat(),
            &["provider.thinking_budget", "applies to anthropic"],
        ),
        (
            vec!["--model", "script:/nonexistent.json", "--reasoning-effort", "low", "hi"],
            &["provider.reasoning_effort"],
        ),
    ];
    for (args, wants) in cases {
        let out = run(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for want in wants {
            assert!(err.contains(want), "{args:?}: {want:?} not in {err}");
        }
    }
}

#[test]
fn reasoning_effort_reaches_a_chat_request() {
    let body = json!({"id": "x", "object": "chat.completion", "model": "qwen3",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi", "reasoning_content": "a thought"},
                     "finish_reason": "stop"}]});
    let (url, got) = serve_once("application/json", body.to_string());
    let out =
        run(&["--model", "openai-chat:qwen3", "--base-url", &format!("{url}/v1"), "--reasoning-effort", "low", "hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (_, sent) = got.recv().unwrap();
    assert_eq!(sent["reasoning_effort"], "low");
}

fn thinking_reply(text: &str) -> String {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "The user greets me.", "signature": "EqQBCkgIARABGAIiQsigned=="},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgyredacted+/="},
            {"type": "text", "text": text}
        ],
        "stop_reason": "end_turn", "stop_sequence": null, "usage": {"input_tokens": 12, "output_tokens": 20}})
    .to_string()
}

#[test]
fn anthropic_thinking_is_in_the_transcript_and_goes_back_after_resume() {
    let dir = Dir::new("reasoning-resume");
    let outcome_file = dir.0.join("outcome.json");
    let store = dir.store();
    let store = store.to_str().unwrap();
    let (url, got) = serve_once("application/json", thinking_reply("Hello!"));
    let out = run(&[
        "--model",
        "anthropic:claude-sonnet-4-5",
        "--base-url",
        &url,
        "--thinking-budget",
        "2048",
        "--max-response-tokens",
        "4096",
        "--store",
        store,
        "--output",
        outcome_file.to_str().unwrap(),
        "hi",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (_, first) = got.recv().unwrap();
    assert_eq!(first["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
    assert_eq!(first["max_tokens"], 4096);
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&outcome_file).unwrap()).unwrap();
    let reasoning = &outcome["messages"][1]["reasoning"];
    assert_eq!(reasoning.as_array().map(Vec::len), Some(2), "{outcome}");
    assert_eq!(reasoning[0]["api"], "anthropic");
    assert_eq!(reasoning[0]["item"]["signature"], "EqQBCkgIARABGAIiQsigned==");
    assert_eq!(reasoning[1]["item"]["data"], "EmwKAhgBEgyredacted+/=");
    let id = outcome["session_id"].as_str().unwrap().to_owned();

    // The session is resumed on another server: the thinking goes back as it came, and thinking stays on.
    let (url2, got2) = serve_once("application/json", thinking_reply("Hello again!"));
    let out = run(&["--resume", &id, "--base-url", &url2, "--store", store, "again"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (_, second) = got2.recv().unwrap();
    assert_eq!(second["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
    let assistant = &second["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["content"],
        json!([
            {"type": "thinking", "thinking": "The user greets me.", "signature": "EqQBCkgIARABGAIiQsigned=="},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgyredacted+/="},
            {"type": "text", "text": "Hello!"}
        ])
    );
    // `sessions show` says the turn has reasoning.
    let show = reins().args(["sessions", "show", &id, "--store", store]).output().unwrap();
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(shown.contains("2 reasoning item(s), sent back to anthropic only"), "{shown}");
}

/// A session recorded on Anthropic with a thinking budget (`anthropic_session`), then resumed elsewhere.
fn anthropic_session(dir: &Dir) -> String {
    let outcome_file = dir.0.join("outcome.json");
    let store = dir.store();
    let (url, got) = serve_once("application/json", thinking_reply("Hello!"));
    let out = run(&[
        "--model",
        "anthropic:claude-sonnet-4-5",
        "--base-url",
        &url,
        "--thinking-budget",
        "2048",
        "--max-response-tokens",
        "4096",
        "--store",
        store.to_str().unwrap(),
        "--output",
        outcome_file.to_str().unwrap(),
        "hi",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    got.recv().unwrap();
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&outcome_file).unwrap()).unwrap();
    outcome["session_id"].as_str().unwrap().to_owned()
}

fn chat_reply(text: &str) -> String {
    json!({"id": "x", "object": "chat.completion", "model": "qwen3",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})
    .to_string()
}

/// Issue 27: a session recorded on `anthropic:` with a thinking budget resumed on `gemini:` keeps the budget
/// (Gemini's `thinkingBudget`), says nothing is dropped, and sends none of Anthropic's reasoning.
#[test]
fn a_thinking_budget_moves_with_a_session_to_gemini() {
    let dir = Dir::new("reasoning-gemini");
    let store = dir.store();
    let id = anthropic_session(&dir);
    let (url, got) = serve_once(
        "application/json",
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../reins-providers/tests/fixtures/gemini/text.json"),
        )
        .unwrap(),
    );
    let args = ["--resume", &id, "--model", "gemini:gemini-2.5-flash", "--base-url", &url];
    let out = run(&[&args[..], &["--store", store.to_str().unwrap(), "again"]].concat());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("no longer"), "the budget applies to gemini: too: {err}");
    let (path, sent) = got.recv().unwrap();
    assert!(path.starts_with("/v1beta/models/gemini-2.5-flash:"), "{path}");
    assert_eq!(sent["generationConfig"]["thinkingConfig"]["thinkingBudget"], 2048, "{sent}");
    assert_eq!(sent["generationConfig"]["maxOutputTokens"], 4096, "{sent}");
    assert!(!sent.to_string().contains("signed=="), "Anthropic's reasoning stays out: {sent}");
}

/// Issue 22, item 12: a session recorded with `--thinking-budget` moves to an OpenAI API on resume (it was exit 2:
/// "provider.thinking_budget: applies to anthropic: models"); one line says the budget no longer applies, and the
/// Anthropic reasoning stays out of the Chat request. `--thinking-budget 0` clears the recorded budget on the same
/// API; `--reasoning-effort none` clears a recorded effort.
#[test]
fn a_resume_moves_a_session_to_another_api_and_flags_clear_recorded_reasoning() {
    let dir = Dir::new("reasoning-move");
    let store = dir.store();
    let store = store.to_str().unwrap();
    let id = anthropic_session(&dir);

    let (url, got) = serve_once("application/json", chat_reply("moved"));
    let chat_url = format!("{url}/v1");
    let out =
        run(&["--resume", &id, "--model", "openai-chat:qwen3", "--base-url", &chat_url, "--store", store, "again"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let said: Vec<&str> = err.lines().filter(|l| l.contains("no longer")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].contains(&format!("resuming session {id} on openai-chat: (it was recorded on anthropic:)"))
            && said[0].contains("provider.thinking_budget belongs to anthropic:"),
        "{err}"
    );
    let (_, sent) = got.recv().unwrap();
    assert!(sent.get("thinking").is_none() && sent.get("reasoning_effort").is_none(), "{sent}");
    assert!(!sent.to_string().contains("signed=="), "Anthropic's reasoning stays out: {sent}");
    assert_eq!(sent["messages"].as_array().map(Vec::len), Some(3), "{sent}");

    // Another Anthropic session resumed on the same API: `--thinking-budget 0` clears its budget.
    let id = anthropic_session(&dir);
    let (url, got) = serve_once("application/json", thinking_reply("Hi"));
    let out = run(&["--resume", &id, "--base-url", &url, "--thinking-budget", "0", "--store", store, "again"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (_, sent) = got.recv().unwrap();
    assert!(sent.get("thinking").is_none(), "{sent}");

    // A session recorded with a reasoning effort: `--reasoning-effort none` clears it.
    let (url, got) = serve_once("application/json", chat_reply("one"));
    let outcome_file = dir.0.join("effort.json");
    let chat_url = format!("{url}/v1");
    let out = run(&[
        "--model",
        "openai-chat:qwen3",
        "--base-url",
        &chat_url,
        "--reasoning-effort",
        "high",
        "--store",
        store,
        "--output",
        outcome_file.to_str().unwrap(),
        "hi",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(got.recv().unwrap().1["reasoning_effort"], "high");
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&outcome_file).unwrap()).unwrap();
    let id = outcome["session_id"].as_str().unwrap().to_owned();
    let (url, got) = serve_once("application/json", chat_reply("two"));
    let chat_url = format!("{url}/v1");
    let out = run(&["--resume", &id, "--base-url", &chat_url, "--reasoning-effort", "none", "--store", store, "again"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (_, sent) = got.recv().unwrap();
    assert!(sent.get("reasoning_effort").is_none(), "{sent}");
}
