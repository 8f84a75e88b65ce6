//! Contract tests against the official SDKs' own types: the request bodies the adapters send (captured by
//! a local server) and the canned responses the other tests replay are validated by
//! `tests/contract/check_contract.py` with the PyPI packages `openai` and `anthropic` (installed by
//! `.ci/setup-providers.sh`).

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{Server, dir, fixture, sdk_python, text_reply};
use reins::{Conversation, Message, Model, ModelRequest, ToolCall, ToolSpec};
use reins_providers::{Api, Provider, ToolChoice};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn tools() -> Arc<[ToolSpec]> {
    Arc::from(vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "The weather in a city.".into(),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        },
        ToolSpec { name: "anything".into(), description: "Takes anything.".into(), input_schema: json!(true) },
    ])
}

const INSTRUCTIONS: &str = "Be brief. Never guess a city.";

fn requests() -> Vec<(&'static str, ModelRequest)> {
    let simple = ModelRequest {
        instructions: None,
        messages: Conversation::from_messages(vec![Message::user("Hi")]),
        tools: Arc::from([]),
        cache_key: None,
    };
    // With instructions: each API's own slot (Responses `instructions`, a Chat `system` message,
    // Anthropic `system`) is checked against the SDK's type.
    let history = ModelRequest {
        instructions: Some(INSTRUCTIONS.into()),
        messages: Conversation::from_messages(vec![
            Message::user("Weather in Paris and Rome?"),
            Message::assistant(
                "Checking.",
                vec![
                    ToolCall::new("call_1", "get_weather", json!({"city": "Paris"})),
                    ToolCall::new("call_2", "get_weather", json!("{\"city\": ")),
                ],
            ),
            Message::tool_result("call_1", "18°C", false),
            Message::tool_result("call_2", "invalid arguments", true),
            Message::assistant("", vec![ToolCall::new("call_3", "anything", json!({}))]),
            Message::tool_result("call_3", "ok", false),
            Message::assistant("Paris is warm.", vec![]),
            Message::user("And tomorrow?"),
        ]),
        tools: tools(),
        // The Responses adapter sends it as `prompt_cache_key`.
        cache_key: Some("ses_7Qm2xv".into()),
    };
    vec![("simple", simple), ("history", history)]
}

/// Sends every variant through every adapter and writes the captured bodies to `out/<api>/<name>.json`.
async fn capture(out: &std::path::Path) {
    for api in [Api::OpenAiResponses, Api::OpenAiChat, Api::Anthropic] {
        let target = out.join(dir(api));
        std::fs::create_dir_all(&target).unwrap();
        let choices = [
            ("auto", ToolChoice::Auto),
            ("required", ToolChoice::Required),
            ("none", ToolChoice::None),
            ("tool", ToolChoice::Tool("get_weather".into())),
        ];
        for stream in [false, true] {
            for (name, request) in requests() {
                for (choice_name, choice) in &choices {
                    let server = Server::start(vec![text_reply(api, stream)]).await;
                    let base = if api == Api::Anthropic { server.url("") } else { server.url("/v1") };
                    let mut b = Provider::builder(api, "gpt-4.1-mini")
                        .base_url(base)
                        .api_key(Some("sk-test".into()))
                        .stream(stream)
                        .tool_choice(choice.clone());
                    if name == "history" {
                        b = b.max_output_tokens(300);
                        if api != Api::Anthropic {
                            b = b.temperature(0.7);
                        }
                    }
                    let p = b.build().unwrap();
                    p.generate(&request, &CancellationToken::new()).await.unwrap();
                    let body = &server.requests()[0].body;
                    let json: serde_json::Value = serde_json::from_slice(body).unwrap();
                    let slot = match api {
                        Api::OpenAiResponses => json.get("instructions").cloned(),
                        Api::OpenAiChat => {
                            json["messages"].get(0).filter(|m| m["role"] == "system").map(|m| m["content"].clone())
                        }
                        // A text block carrying the cache breakpoint.
                        Api::Anthropic => json.get("system").map(|s| s[0]["text"].clone()),
                        Api::Gemini | Api::Bedrock => {
                            unreachable!("tests/gemini.rs and tests/bedrock.rs check their bodies")
                        }
                    };
                    let want = (name == "history").then(|| json!(INSTRUCTIONS));
                    assert_eq!(slot, want, "{api:?} {name}: the instructions in their slot");
                    let file =
                        target.join(format!("{name}-{choice_name}-{}.json", if stream { "stream" } else { "plain" }));
                    std::fs::write(file, body).unwrap();
                }
            }
        }
    }
}

/// A history whose assistant turns carry reasoning items of both APIs (as the fixtures give them), sent with
/// reasoning on: each adapter's body, its own items sent back and the other's dropped, must match the SDK types.
async fn capture_reasoning(out: &std::path::Path) {
    let block = |file: &str| serde_json::from_str::<serde_json::Value>(&fixture(file)).unwrap();
    let anthropic = block("anthropic/thinking.json")["content"].as_array().unwrap()[..2].to_vec();
    let responses = block("openai_responses/reasoning.json")["output"][0].clone();
    let mut turn = Message::assistant("", vec![ToolCall::new("call_1", "get_weather", json!({"city": "Paris"}))]);
    if let Message::Assistant { reasoning, .. } = &mut turn {
        reasoning.extend(anthropic.into_iter().map(|b| reins::Reasoning::new("anthropic", b)));
        reasoning.push(reins::Reasoning::new("openai", responses));
    }
    let request = ModelRequest {
        instructions: Some(INSTRUCTIONS.into()),
        messages: Conversation::from_messages(vec![
            Message::user("Weather in Paris?"),
            turn,
            Message::tool_result("call_1", "18°C", false),
        ]),
        tools: tools(),
        cache_key: Some("ses_7Qm2xv".into()),
    };
    for api in [Api::OpenAiResponses, Api::OpenAiChat, Api::Anthropic] {
        for stream in [false, true] {
            let server = Server::start(vec![text_reply(api, stream)]).await;
            let base = if api == Api::Anthropic { server.url("") } else { server.url("/v1") };
            let b = Provider::builder(api, if api == Api::Anthropic { "claude-sonnet-4-5" } else { "o4-mini" })
                .base_url(base)
                .api_key(Some("sk-test".into()))
                .stream(stream);
            let b = match api {
                Api::Anthropic => b.thinking_budget(2048).max_output_tokens(4096),
                _ => b.reasoning_effort(reins_providers::ReasoningEffort::Medium),
            };
            b.build().unwrap().generate(&request, &CancellationToken::new()).await.unwrap();
            let body = &server.requests()[0].body;
            let text = String::from_utf8_lossy(body);
            assert_eq!(text.contains("redacted_thinking"), api == Api::Anthropic, "{api:?}: {text}");
            assert_eq!(text.contains("encrypted_content"), api == Api::OpenAiResponses, "{api:?}: {text}");
            let file = out.join(dir(api)).join(format!("reasoning-{}.json", if stream { "stream" } else { "plain" }));
            std::fs::write(file, body).unwrap();
        }
    }
}

#[tokio::test]
async fn request_bodies_and_fixtures_match_the_official_sdk_types() {
    let python = sdk_python();
    let out = std::env::temp_dir().join(format!("reins-contract-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    capture(&out).await;
    capture_reasoning(&out).await;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests");
    let result = std::process::Command::new(&python)
        .arg(root.join("contract/check_contract.py"))
        .arg("--requests")
        .arg(&out)
        .arg("--fixtures")
        .arg(root.join("fixtures"))
        .output()
        .expect("run the contract check");
    let stdout = String::from_utf8_lossy(&result.stdout);
    let stderr = String::from_utf8_lossy(&result.stderr);
    let _ = std::fs::remove_dir_all(&out);
    assert!(result.status.success(), "the contract check failed:\n{stdout}\n{stderr}");
    // 3 APIs × 16 request variants and 2 with reasoning, plus every fixture file.
    let ok = stdout.lines().filter(|l| l.starts_with("ok   request")).count();
    assert_eq!(ok, 54, "{stdout}");
    for f in ["anthropic/thinking.sse", "openai_responses/reasoning.sse"] {
        assert!(stdout.lines().any(|l| l.starts_with(&format!("ok   stream {f}"))), "{stdout}");
    }
    assert!(stdout.lines().any(|l| l.starts_with("ok   stream anthropic/tools.sse")), "{stdout}");
}

/// Reins speaks the `anthropic-version` of the SDK whose types the bodies are checked against.
#[test]
fn reins_speaks_the_anthropic_version_of_the_sdk_it_is_checked_against() {
    let out = std::process::Command::new(sdk_python())
        .args(["-c", "from anthropic._constants import ANTHROPIC_API_VERSION as v; print(v)"])
        .output()
        .expect("run python");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), reins_providers::anthropic::API_VERSION);
}

/// The check refuses what the SDKs' types refuse: a misspelt key, a wrong role, a missing field.
#[test]
fn the_contract_check_refuses_bodies_the_sdks_refuse() {
    let python = sdk_python();
    let out = std::env::temp_dir().join(format!("reins-contract-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let bad = [
        ("openai_responses", json!({"model": "m", "input": [{"type": "message", "role": "user", "contnt": "x"}]})),
        ("openai_chat", json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]})),
        ("anthropic", json!({"model": "m", "messages": [{"role": "user", "content": "x"}]})),
    ];
    for (api, body) in &bad {
        std::fs::create_dir_all(out.join(api)).unwrap();
        std::fs::write(out.join(api).join("bad.json"), body.to_string()).unwrap();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests");
    let empty = out.join("no-fixtures");
    std::fs::create_dir_all(&empty).unwrap();
    let result = std::process::Command::new(&python)
        .arg(root.join("contract/check_contract.py"))
        .args(["--requests".as_ref(), out.as_os_str(), "--fixtures".as_ref(), empty.as_os_str()])
        .output()
        .expect("run the contract check");
    let stdout = String::from_utf8_lossy(&result.stdout).into_owned();
    let _ = std::fs::remove_dir_all(&out);
    assert_eq!(result.status.code(), Some(1), "{stdout}");
    for (api, _) in &bad {
        assert!(stdout.contains(&format!("FAIL request {api}/bad.json")), "{stdout}");
    }
    assert!(stdout.contains("max_tokens"), "Anthropic's required max_tokens is named: {stdout}");
    assert!(stdout.trim_end().ends_with("0 passed, 3 failed"), "{stdout}");
}
