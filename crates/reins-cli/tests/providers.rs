//! `reins run` with real providers: the real binary against a local HTTP server on 127.0.0.1 that replays
//! recorded-format responses (the reins-providers fixtures) and captures what it was sent.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;

mod common;

use common::serve_once;

fn fixture(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-providers/tests/fixtures").join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("fixture {}: {e}", p.display()))
}

fn reins(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = common::reins();
    cmd.args(args).env_remove("OPENAI_API_KEY").env_remove("ANTHROPIC_API_KEY");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("run reins")
}

fn lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

#[test]
fn openai_chat_run_reports_usage_and_cost_in_run_end_and_the_outcome() {
    let (url, got) = serve_once("application/json", fixture("openai_chat/text.json"));
    let dir = std::env::temp_dir().join(format!("reins-cli-providers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let outcome_file = dir.join("outcome.json");
    let out = reins(
        &[
            "run",
            "--model",
            "openai-chat:gpt-4o-mini",
            "--base-url",
            &format!("{url}/v1"),
            "--max-response-tokens",
            "77",
            "--json",
            "--output",
            outcome_file.to_str().unwrap(),
            "What is the capital of France?",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (path, body) = got.recv().unwrap();
    assert_eq!(path, "/v1/chat/completions");
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["max_tokens"], 77);
    assert_eq!(body["messages"][0]["content"], "What is the capital of France?");
    let events = lines(&out.stdout);
    let end = events.last().unwrap();
    assert_eq!(end["type"], "run_end");
    assert_eq!(end["usage"]["input_tokens"], 1117);
    assert_eq!(end["usage"]["cached_input_tokens"], 1024);
    // gpt-4o-mini: 93 uncached × $0.15 + 1024 cached × $0.075 + 46 output × $0.60, per million.
    let want = (93.0 * 0.15 + 1024.0 * 0.075 + 46.0 * 0.60) / 1e6;
    assert!((end["cost_usd"].as_f64().unwrap() - want).abs() < 1e-12, "{end}");
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&outcome_file).unwrap()).unwrap();
    assert_eq!(outcome["answer"], "The capital of France is Paris.");
    assert_eq!(outcome["usage"]["output_tokens"], 46);
    assert!((outcome["cost_usd"].as_f64().unwrap() - want).abs() < 1e-12);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn anthropic_stream_shows_text_as_it_arrives_and_the_answer_once() {
    let (url, got) = serve_once("text/event-stream", fixture("anthropic/text.sse"));
    let out = reins(&["run", "--model", "anthropic:claude-sonnet-4-5", "--base-url", &url, "--stream", "hi"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (path, body) = got.recv().unwrap();
    assert_eq!(path, "/v1/messages");
    assert_eq!(body["stream"], true);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stdout, "Hello! How can I help?\n", "stdout holds the answer once");
    assert!(stderr.contains("Hello! How can I help?"), "streamed on stderr: {stderr}");
    assert!(stderr.contains("[reasoning] The user says hello; reply in kind.\nHello! How can I help?\n"), "{stderr}");
    assert!(stderr.contains("cost ≈ $") && stderr.contains("claude-sonnet-4-5 list prices"), "{stderr}");
}

#[test]
fn streamed_text_and_reasoning_show_terminal_escapes_escaped() {
    let sse = fixture("anthropic/text.sse")
        .replace(r#""text": "Hello!""#, r#""text": "Hello!\u001b]52;c;eA==\u0007\u001b[2J""#)
        .replace(r#""thinking": "reply in kind.""#, r#""thinking": "reply\u001b]0;title\u0007 in kind.\u009b""#);
    let (url, _got) = serve_once("text/event-stream", sse);
    let out = reins(&["run", "--model", "anthropic:claude-sonnet-4-5", "--base-url", &url, "--stream", "hi"], &[]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for text in [&stdout, &stderr] {
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
    }
    assert!(stderr.contains("reply\\x1b]0;title\\x07 in kind.\\u{9b}"), "{stderr}");
    assert!(stderr.contains("Hello!\\x1b]52;c;eA==\\x07\\x1b[2J How can I help?"), "{stderr}");
    assert_eq!(stdout, "Hello!\\x1b]52;c;eA==\\x07\\x1b[2J How can I help?\n");
}

#[test]
fn a_missing_api_key_is_a_one_line_error() {
    for (spec, env) in [("openai:gpt-4.1", "OPENAI_API_KEY"), ("anthropic:claude-haiku-4-5", "ANTHROPIC_API_KEY")] {
        let out = reins(&["run", "--model", spec, "hi"], &[]);
        assert_eq!(out.status.code(), Some(2), "{spec}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr,
            format!(
                "reins: error: --model {spec} needs an API key: set {env} (or point --base-url at a local server)\n"
            )
        );
    }
}

#[test]
fn bad_provider_flags_are_usage_errors() {
    let out = reins(&["run", "--model", "openai-chat:m", "--base-url", "ftp://x/v1", "hi"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid base URL"));
    let out = reins(&["run", "--model", "openai-chat:", "hi"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("names no model"));
    let out = reins(&["run", "--model", "anthropic:m", "--max-response-tokens", "0", "hi"], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn an_unknown_price_leaves_the_cost_out() {
    let (url, _got) = serve_once("application/json", fixture("openai_responses/text.json"));
    let out =
        reins(&["run", "--model", "openai:my-local-model", "--base-url", &format!("{url}/v1"), "--json", "hi"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let end = lines(&out.stdout).pop().unwrap();
    assert_eq!(end["type"], "run_end");
    assert_eq!(end["usage"]["reasoning_tokens"], 64);
    assert!(end.get("cost_usd").is_none(), "{end}");
}

#[test]
fn a_server_error_is_a_model_error_exit() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let out = reins(
        &["run", "--model", "openai-chat:m", "--base-url", &format!("http://127.0.0.1:{port}/v1"), "--json", "hi"],
        &[],
    );
    assert_eq!(out.status.code(), Some(8), "{}", String::from_utf8_lossy(&out.stderr));
    let end = lines(&out.stdout).pop().unwrap();
    assert_eq!(end["status"], "model_error");
    assert!(end["error"].as_str().unwrap().contains("gave up after 4 attempts"), "{end}");
}

#[test]
fn a_known_model_gets_its_context_window_as_the_default_budget() {
    // gpt-4o-mini: a 128,000-token window; with 127,000 kept for the response, 900 tokens remain for the context.
    let prompt = "word ".repeat(2000);
    let (url, got) = serve_once("application/json", fixture("openai_chat/text.json"));
    let base = format!("{url}/v1");
    let out = reins(
        &[
            "run",
            "--model",
            "openai-chat:gpt-4o-mini",
            "--base-url",
            &base,
            "--max-response-tokens",
            "127000",
            "--json",
            &prompt,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(9), "context_limit: {}", String::from_utf8_lossy(&out.stderr));
    let end = lines(&out.stdout).pop().unwrap();
    assert!(end["error"].as_str().unwrap().contains("tokens"), "measured in tokens: {end}");
    assert!(got.try_recv().is_err(), "nothing was sent");
    // An explicit budget wins.
    let out = reins(
        &[
            "run",
            "--model",
            "openai-chat:gpt-4o-mini",
            "--base-url",
            &base,
            "--max-response-tokens",
            "127000",
            "--max-context-chars",
            "100000",
            &prompt,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(got.recv().unwrap().1["max_tokens"], 127000);
}

/// Prompt caching is asked for by default — Anthropic breakpoints, the session's id as the Responses
/// `prompt_cache_key` — and `--no-prompt-cache` turns it off.
#[test]
fn prompt_caching_is_on_by_default_keyed_by_the_session_and_the_flag_turns_it_off() {
    let (url, got) = serve_once("application/json", fixture("anthropic/text.json"));
    let out = reins(&["run", "--model", "anthropic:claude-sonnet-4-5", "--base-url", &url, "hi"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, body) = got.recv().unwrap();
    assert_eq!(
        body["messages"][0]["content"],
        serde_json::json!([{"type": "text", "text": "hi",
                                                                   "cache_control": {"type": "ephemeral"}}])
    );
    let (url, got) = serve_once("application/json", fixture("anthropic/text.json"));
    let out =
        reins(&["run", "--model", "anthropic:claude-sonnet-4-5", "--base-url", &url, "--no-prompt-cache", "hi"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, body) = got.recv().unwrap();
    assert_eq!(body["messages"][0]["content"], "hi");
    assert!(!body.to_string().contains("cache_control"), "{body}");

    let dir = common::Dir::new("prompt-cache-key");
    let outcome_file = dir.0.join("outcome.json");
    let (url, got) = serve_once("application/json", fixture("openai_responses/text.json"));
    let args = ["run", "--model", "openai:gpt-4.1-mini", "--base-url", &format!("{url}/v1"), "--output"];
    let out = reins(&[&args[..], &[outcome_file.to_str().unwrap(), "hi"]].concat(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, body) = got.recv().unwrap();
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&outcome_file).unwrap()).unwrap();
    assert!(outcome["session_id"].is_string(), "{outcome}");
    assert_eq!(body["prompt_cache_key"], outcome["session_id"]);
}

/// `gemini:` is Gemini's own API: the key from `GOOGLE_API_KEY` when `GEMINI_API_KEY` is unset, the thinking
/// budget as `thinkingBudget`, the answer and its priced usage from Gemini's response; without a key, exit 2 naming
/// the variable.
#[test]
fn a_gemini_model_runs_on_geminis_own_api() {
    let run = |args: &[&str], key: Option<&str>| {
        let mut cmd = common::reins();
        cmd.args(args).env_remove("GEMINI_API_KEY").env_remove("GOOGLE_API_KEY");
        if let Some(k) = key {
            cmd.env("GOOGLE_API_KEY", k);
        }
        cmd.output().expect("run reins")
    };
    let out = run(&["run", "--model", "gemini:gemini-2.5-flash", "hi"], None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("GEMINI_API_KEY"), "{stderr}");
    let (url, got) = serve_once("application/json", fixture("gemini/text.json"));
    let args =
        ["run", "--model", "gemini:gemini-2.5-flash", "--base-url", &url, "--thinking-budget", "2048", "--json", "hi"];
    let out = run(&args, Some("AIza-test"));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (path, body) = got.recv().unwrap();
    assert!(path.starts_with("/v1beta/models/gemini-2.5-flash:"), "{path}");
    assert!(!path.contains("AIza-test"), "the key is a header, never in the URL: {path}");
    assert_eq!(body["generationConfig"]["thinkingConfig"]["thinkingBudget"], 2048);
    assert_eq!(body["contents"][0]["parts"][0]["text"], "hi");
    let events = lines(&out.stdout);
    let end = events.iter().find(|e| e["type"] == "run_end").expect("run_end");
    assert_eq!(
        (end["usage"]["input_tokens"].as_u64(), end["usage"]["cached_input_tokens"].as_u64()),
        (Some(2100), Some(2048))
    );
    assert_eq!(
        (end["usage"]["output_tokens"].as_u64(), end["usage"]["reasoning_tokens"].as_u64()),
        (Some(30), Some(8))
    );
    // gemini-2.5-flash: 52 uncached × $0.30 + 2048 cached × $0.03 + 30 output × $2.50, per million.
    let want = (52.0 * 0.30 + 2048.0 * 0.03 + 30.0 * 2.50) / 1e6;
    assert!(end["cost_usd"].as_f64().is_some_and(|c| (c - want).abs() < 1e-12), "{end}");
    assert!(events.iter().any(|e| e.to_string().contains("Hello! How can I help?")), "the answer");
}
