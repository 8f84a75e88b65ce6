//! The adapters against a real HTTP server on 127.0.0.1 that replays recorded-format responses:
//! request bodies and headers, plain and streamed parsing, and the faults a real service and network
//! produce.

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Reply, Server, Step, dir, fixture};
use reins::{
    Agent, Conversation, Delta, DeltaSink, FinishReason, FnTool, Message, Model, ModelError, ModelRequest, Registry,
    Status, ToolCall, ToolOutput, ToolSpec, Usage,
};
use reins_providers::{Api, Provider, ProviderBuilder, RetryPolicy, ToolChoice};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const APIS: [Api; 3] = [Api::OpenAiResponses, Api::OpenAiChat, Api::Anthropic];

fn base_url(api: Api, server: &Server) -> String {
    match api {
        Api::Anthropic => server.url(""),
        _ => server.url("/v1"),
    }
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 2,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        max_retry_after: Duration::from_secs(10),
    }
}

fn builder(api: Api, server: &Server, stream: bool) -> ProviderBuilder {
    Provider::builder(api, "test-model")
        .base_url(base_url(api, server))
        .api_key(Some("sk-test-123".into()))
        .stream(stream)
        .retry(fast_retry())
}

fn tools() -> Arc<[ToolSpec]> {
    let weather = ToolSpec {
        name: "get_weather".into(),
        description: "The weather in a city.".into(),
        input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                             "required": ["city"], "additionalProperties": false}),
    };
    let time = ToolSpec {
        name: "get_time".into(),
        description: "The time in a zone.".into(),
        input_schema: json!({"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}),
    };
    Arc::from(vec![weather, time])
}

/// A conversation with every kind of item: prompt, a turn with two calls (one with unparseable
/// arguments, kept raw), their results (one an error), and a follow-up prompt.
fn history() -> ModelRequest {
    ModelRequest {
        instructions: Some("Be brief.".into()),
        messages: Conversation::from_messages(vec![
            Message::user("Weather in Paris and the time in Tokyo?"),
            Message::assistant(
                "Checking.",
                vec![
                    ToolCall::new("call_1", "get_weather", json!({"city": "Paris"})),
                    ToolCall::new("call_2", "get_time", json!("{\"zone\": ")),
                ],
            ),
            Message::tool_result("call_1", "18°C, sunny", false),
            Message::tool_result("call_2", "invalid arguments for get_time", true),
            Message::user("Thanks. And tomorrow?"),
        ]),
        tools: tools(),
        cache_key: None,
    }
}

fn simple() -> ModelRequest {
    ModelRequest {
        instructions: None,
        messages: Conversation::from_messages(vec![Message::user("Hi")]),
        tools: tools(),
        cache_key: None,
    }
}

/// Runs one call with a delta sink; returns the result and the deltas heard.
async fn generate(p: &Provider, req: &ModelRequest) -> (Result<reins::ModelResponse, ModelError>, Vec<Delta>) {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let h = heard.clone();
    let sink = DeltaSink::new(move |d| h.lock().unwrap().push(d.clone()));
    let result = sink.scope(p.generate(req, &CancellationToken::new())).await;
    let deltas = heard.lock().unwrap().clone();
    (result, deltas)
}

fn text_of(deltas: &[Delta]) -> String {
    deltas.iter().filter_map(|d| if let Delta::Text { text } = d { Some(text.as_str()) } else { None }).collect()
}

fn reasoning_of(deltas: &[Delta]) -> String {
    deltas.iter().filter_map(|d| if let Delta::Reasoning { text } = d { Some(text.as_str()) } else { None }).collect()
}

// ---------------------------------------------------------------------------------------------------
// Requests: path, headers, body.

#[tokio::test]
async fn openai_responses_request_body_and_headers() {
    let server = Server::start(vec![Reply::json(200, fixture("openai_responses/text.json"))]).await;
    let p = builder(Api::OpenAiResponses, &server, false)
        .max_output_tokens(256)
        .temperature(0.5)
        .tool_choice(ToolChoice::Tool("get_weather".into()))
        .header("x-extra", "yes")
        .build()
        .unwrap();
    p.generate(&history(), &CancellationToken::new()).await.unwrap();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/responses"));
    assert_eq!(r.header("authorization"), Some("Bearer sk-test-123"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("accept"), Some("application/json"));
    assert_eq!(r.header("x-extra"), Some("yes"));
    assert!(r.header("user-agent").unwrap().starts_with("reins/"));
    let b = r.json();
    assert_eq!(b["model"], "test-model");
    assert_eq!(b["instructions"], "Be brief.");
    assert_eq!(b["max_output_tokens"], 256);
    assert_eq!(b["temperature"], 0.5);
    assert_eq!(b["stream"], false);
    assert_eq!(b["tool_choice"], json!({"type": "function", "name": "get_weather"}));
    assert_eq!(b["tools"][0]["type"], "function");
    assert_eq!(b["tools"][0]["name"], "get_weather");
    assert_eq!(b["tools"][0]["parameters"]["required"], json!(["city"]));
    assert_eq!(
        b["input"],
        json!([
            {"type": "message", "role": "user", "content": "Weather in Paris and the time in Tokyo?"},
            {"type": "message", "role": "assistant", "content": "Checking."},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{\"zone\": "},
            {"type": "function_call_output", "call_id": "call_1", "output": "18°C, sunny"},
            {"type": "function_call_output", "call_id": "call_2", "output": "invalid arguments for get_time"},
            {"type": "message", "role": "user", "content": "Thanks. And tomorrow?"},
        ])
    );
}

#[tokio::test]
async fn openai_chat_request_body_and_headers() {
    let server = Server::start(vec![Reply::sse_text(&fixture("openai_chat/text.sse"), 4096)]).await;
    let p = builder(Api::OpenAiChat, &server, true)
        .max_output_tokens(100)
        .tool_choice(ToolChoice::Required)
        .build()
        .unwrap();
    p.generate(&history(), &CancellationToken::new()).await.unwrap();
    let r = &server.requests()[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some("Bearer sk-test-123"));
    assert_eq!(r.header("accept"), Some("text/event-stream"));
    let b = r.json();
    assert_eq!(b["stream"], true);
    assert_eq!(b["stream_options"], json!({"include_usage": true}));
    assert_eq!(b["max_tokens"], 100, "a compatible server gets max_tokens");
    assert!(b.get("temperature").is_none());
    assert_eq!(b["tool_choice"], "required");
    assert_eq!(
        b["tools"][1],
        json!({"type": "function", "function": {"name": "get_time",
        "description": "The time in a zone.", "parameters": tools()[1].input_schema}})
    );
    assert_eq!(
        b["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris and the time in Tokyo?"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{\"zone\": "}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18°C, sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": "invalid arguments for get_time"},
            {"role": "user", "content": "Thanks. And tomorrow?"},
        ])
    );
    // The official endpoint gets max_completion_tokens (checked without sending anything).
    let official = Provider::builder(Api::OpenAiChat, "gpt-4o")
        .api_key(Some("k".into()))
        .max_output_tokens(7)
        .build()
        .unwrap()
        .request_body(&simple());
    assert_eq!(official["max_completion_tokens"], 7);
    assert!(official.get("max_tokens").is_none());
}

#[tokio::test]
async fn anthropic_request_body_and_headers() {
    let server = Server::start(vec![Reply::json(200, fixture("anthropic/text.json"))]).await;
    let p = builder(Api::Anthropic, &server, false).tool_choice(ToolChoice::Required).build().unwrap();
    p.generate(&history(), &CancellationToken::new()).await.unwrap();
    let r = &server.requests()[0];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some("sk-test-123"));
    assert_eq!(r.header("authorization"), None);
    assert_eq!(r.header("anthropic-version"), Some("2026-10-21"));
    let b = r.json();
    assert_eq!(b["max_tokens"], 8192, "required by the API: a default is sent");
    // Prompt caching (on by default): breakpoints after the instructions, at the end of the previous
    // request (the user turn before the last answer) and at the end of this one.
    assert_eq!(b["system"], json!([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]));
    assert!(b.get("temperature").is_none());
    assert_eq!(b["tool_choice"], json!({"type": "any"}));
    assert_eq!(b["tools"][0]["input_schema"]["required"], json!(["city"]));
    assert_eq!(
        b["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and the time in Tokyo?",
                                          "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "18°C, sunny"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "invalid arguments for get_time", "is_error": true},
                {"type": "text", "text": "Thanks. And tomorrow?", "cache_control": {"type": "ephemeral"}}]},
        ])
    );
    // A base URL that already ends in /v1 is not doubled.
    let p = Provider::builder(Api::Anthropic, "m").base_url(server.url("/v1/")).build().unwrap();
    assert_eq!(p.endpoint(), server.url("/v1/messages"));
}

/// An agent's instructions reach each API in its own slot (Responses `instructions`, Chat Completions a
/// leading `system` message, Anthropic `system`), with every call, and never as a user message; a run
/// without instructions sends no such field.
#[tokio::test]
async fn an_agents_instructions_reach_each_api_in_its_own_slot() {
    let rules = "House rules: answer in one line. ✓";
    for api in [Api::OpenAiResponses, Api::OpenAiChat, Api::Anthropic] {
        for instructions in [Some(rules), None] {
            let server = Server::start(vec![Reply::json(200, fixture(&format!("{}/text.json", dir(api))))]).await;
            let p = builder(api, &server, false).build().unwrap();
            let mut agent = reins::Agent::builder(p);
            if let Some(text) = instructions {
                agent = agent.instructions(text);
            }
            let o = agent.build().unwrap().run("Hi", CancellationToken::new()).await;
            assert_eq!(o.status, reins::Status::Completed, "{api:?}: {:?}", o.error);
            assert_eq!(o.instructions.as_deref(), instructions);
            let b = server.requests()[0].json();
            let want = instructions.map_or(Value::Null, Value::from);
            let user = json!({"role": "user", "content": "Hi"});
            match api {
                Api::OpenAiResponses => {
                    assert_eq!(b.get("instructions").cloned().unwrap_or(Value::Null), want);
                    assert_eq!(b["input"], json!([{"type": "message", "role": "user", "content": "Hi"}]));
                }
                Api::OpenAiChat => {
                    let expected = match instructions {
                        Some(text) => json!([{"role": "system", "content": text}, user]),
                        None => json!([user]),
                    };
                    assert_eq!(b["messages"], expected);
                    assert!(b.get("instructions").is_none() && b.get("system").is_none());
                }
                Api::Anthropic => {
                    // The instructions as one text block ending the cached prefix.
                    let want = match instructions {
                        Some(text) => json!([{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]),
                        None => Value::Null,
                    };
                    assert_eq!(b.get("system").cloned().unwrap_or(Value::Null), want);
                    let user = json!({"role": "user", "content": [{"type": "text", "text": "Hi",
                                                                  "cache_control": {"type": "ephemeral"}}]});
                    assert_eq!(b["messages"], json!([user]));
                }
                Api::Gemini | Api::Bedrock => {
                    unreachable!("not in APIS: tests/gemini.rs and tests/bedrock.rs have their own")
                }
            }
        }
    }
}

#[test]
fn configuration_errors_are_clear() {
    let e = Provider::builder(Api::OpenAiChat, "m").base_url("ftp://x/v1").build().unwrap_err();
    assert!(e.to_string().contains("scheme must be http or https"), "{e}");
    let e = Provider::builder(Api::OpenAiChat, "m").base_url("not a url").build().unwrap_err();
    assert!(e.to_string().starts_with("invalid base URL"), "{e}");
    let e = Provider::builder(Api::OpenAiResponses, "m").build().unwrap_err();
    assert_eq!(e.to_string(), "no API key: set OPENAI_API_KEY (only a local base URL may go without one)");
    let e = Provider::builder(Api::Anthropic, "m").base_url("https://example.com").build().unwrap_err();
    assert!(e.to_string().contains("ANTHROPIC_API_KEY"), "{e}");
    for local in ["http://localhost:8080/v1", "http://127.0.0.1/v1", "http://[::1]:1/v1", "http://192.168.1.5/v1"] {
        assert!(Provider::builder(Api::OpenAiChat, "m").base_url(local).build().is_ok(), "{local}");
    }
    let e = Provider::builder(Api::OpenAiChat, "m").api_key(Some("bad\nkey".into())).build().unwrap_err();
    assert!(e.to_string().contains("cannot carry"), "{e}");
    assert!(Provider::builder(Api::OpenAiChat, "").base_url("http://localhost/v1").build().is_err());
    assert!(
        Provider::builder(Api::OpenAiChat, "m").base_url("http://localhost/v1").max_output_tokens(0).build().is_err()
    );
    assert!(
        Provider::builder(Api::OpenAiChat, "m").base_url("http://localhost/v1").temperature(f64::NAN).build().is_err()
    );
    let e = Provider::builder(Api::Anthropic, "m").base_url("http://localhost").temperature(0.5).build().unwrap_err();
    assert!(e.to_string().contains("takes no temperature"), "{e}");
    let dbg =
        format!("{:?}", Provider::builder(Api::OpenAiChat, "m").api_key(Some("sk-secret".into())).build().unwrap());
    assert!(!dbg.contains("sk-secret"), "{dbg}");
}

// ---------------------------------------------------------------------------------------------------
// Parsing: plain and streamed.

#[tokio::test]
async fn plain_text_responses() {
    let cases = [
        (
            Api::OpenAiResponses,
            "Hello! How can I help you today?",
            Usage {
                input_tokens: 36,
                output_tokens: 87,
                cached_input_tokens: 12,
                cache_write_tokens: 0,
                reasoning_tokens: 64,
            },
            Some("Thinking about the greeting."),
        ),
        (
            Api::OpenAiChat,
            "The capital of France is Paris.",
            Usage {
                input_tokens: 1117,
                output_tokens: 46,
                cached_input_tokens: 1024,
                cache_write_tokens: 0,
                reasoning_tokens: 12,
            },
            None,
        ),
        (
            Api::Anthropic,
            "Hello! How can I help?",
            Usage {
                input_tokens: 2160,
                output_tokens: 30,
                cached_input_tokens: 2048,
                cache_write_tokens: 100,
                reasoning_tokens: 8,
            },
            Some("The user says hello; reply in kind."),
        ),
    ];
    for (api, text, usage, reasoning) in cases {
        let server = Server::start(vec![Reply::json(200, fixture(&format!("{}/text.json", dir(api))))]).await;
        let p = builder(api, &server, false).build().unwrap();
        let (r, deltas) = generate(&p, &simple()).await;
        let r = r.unwrap();
        assert_eq!(r.text, text, "{api:?}");
        assert_eq!(r.usage, Some(usage), "{api:?}");
        assert_eq!(r.reasoning.as_deref(), reasoning, "{api:?}");
        assert_eq!(r.finish_reason, Some(FinishReason::Stop), "{api:?}");
        assert!(r.tool_calls.is_empty());
        assert!(deltas.is_empty(), "no deltas without streaming: {deltas:?}");
    }
}

#[tokio::test]
async fn plain_tool_call_responses() {
    for api in APIS {
        let server = Server::start(vec![Reply::json(200, fixture(&format!("{}/tools.json", dir(api))))]).await;
        let p = builder(api, &server, false).build().unwrap();
        let r = p.generate(&simple(), &CancellationToken::new()).await.unwrap();
        assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls), "{api:?}");
        assert_eq!(r.tool_calls.len(), 2, "{api:?}");
        assert_eq!(r.tool_calls[0].name, "get_weather");
        assert_eq!(r.tool_calls[0].arguments["city"], "Paris");
        assert!(!r.tool_calls[0].id.is_empty());
        assert_ne!(r.tool_calls[0].id, r.tool_calls[1].id);
        match api {
            Api::OpenAiResponses => {
                assert_eq!(&*r.tool_calls[0].id, "call_unLAR8MvFNptuiZK6K6HCy5k", "the call_id, not the item id");
                assert_eq!(r.tool_calls[1].arguments, json!({"zone": "Europe/Paris"}));
            }
            Api::OpenAiChat => {
                assert_eq!(r.tool_calls[1], ToolCall::new("call_def456", "get_weather", json!({"city": "Tokyo"})));
                assert_eq!(r.reasoning.as_deref(), Some("Two cities: call the tool twice."));
                assert_eq!(r.text, "");
            }
            Api::Anthropic => {
                assert_eq!(r.text, "Let me check both.");
                assert_eq!(&*r.tool_calls[0].id, "toolu_01A09q90qw90lq917835lq9");
                assert_eq!(r.tool_calls[1].arguments, json!({"zone": "Europe/Paris"}));
            }
            Api::Gemini | Api::Bedrock => {
                unreachable!("not in APIS: tests/gemini.rs and tests/bedrock.rs have their own")
            }
        }
    }
}

#[tokio::test]
async fn streamed_text_with_reasoning_and_usage_arrives_as_deltas() {
    let cases = [
        (
            Api::OpenAiResponses,
            "Hello! How can I help you today?",
            "Thinking about the greeting.",
            Usage {
                input_tokens: 36,
                output_tokens: 87,
                cached_input_tokens: 12,
                cache_write_tokens: 0,
                reasoning_tokens: 64,
            },
        ),
        (
            Api::OpenAiChat,
            "Hello there!",
            "The user greets; answer politely.",
            Usage {
                input_tokens: 19,
                output_tokens: 10,
                cached_input_tokens: 0,
                cache_write_tokens: 0,
                reasoning_tokens: 4,
            },
        ),
        (
            Api::Anthropic,
            "Hello! How can I help?",
            "The user says hello; reply in kind.",
            Usage {
                input_tokens: 2160,
                output_tokens: 30,
                cached_input_tokens: 2048,
                cache_write_tokens: 100,
                reasoning_tokens: 8,
            },
        ),
    ];
    for (api, text, reasoning, usage) in cases {
        // Tiny chunks: events and even lines arrive split.
        let server = Server::start(vec![Reply::sse_text(&fixture(&format!("{}/text.sse", dir(api))), 7)]).await;
        let p = builder(api, &server, true).build().unwrap();
        let (r, deltas) = generate(&p, &simple()).await;
        let r = r.unwrap();
        assert_eq!(r.text, text, "{api:?}");
        assert_eq!(r.reasoning.as_deref(), Some(reasoning), "{api:?}");
        assert_eq!(r.usage, Some(usage), "{api:?}");
        assert_eq!(r.finish_reason, Some(FinishReason::Stop), "{api:?}");
        assert_eq!(text_of(&deltas), text, "{api:?}: the text arrived as deltas");
        assert_eq!(reasoning_of(&deltas), reasoning, "{api:?}");
        assert!(deltas.iter().filter(|d| matches!(d, Delta::Text { .. })).count() >= 2, "{api:?}: in pieces");
        let first_text = deltas.iter().position(|d| matches!(d, Delta::Text { .. })).unwrap();
        let last_reasoning = deltas.iter().rposition(|d| matches!(d, Delta::Reasoning { .. })).unwrap();
        assert!(last_reasoning < first_text, "{api:?}: in arrival order");
    }
}

#[tokio::test]
async fn streamed_tool_calls_arrive_as_deltas_and_assemble() {
    for api in APIS {
        let server = Server::start(vec![Reply::sse_text(&fixture(&format!("{}/tools.sse", dir(api))), 11)]).await;
        let p = builder(api, &server, true).build().unwrap();
        let (r, deltas) = generate(&p, &simple()).await;
        let r = r.unwrap();
        assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls), "{api:?}");
        assert_eq!(r.tool_calls.len(), 2, "{api:?}");
        assert_eq!(r.tool_calls[0].name, "get_weather");
        assert_eq!(r.tool_calls[0].arguments, json!({"city": "Paris", "unit": "celsius"}), "{api:?}");
        let starts: Vec<_> = deltas
            .iter()
            .filter_map(|d| {
                if let Delta::ToolCall { index, id, name } = d {
                    Some((*index, id.clone(), name.clone()))
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(starts.len(), 2, "{api:?}: {deltas:?}");
        assert_eq!(starts[0], (0, r.tool_calls[0].id.to_string(), "get_weather".to_owned()));
        assert_eq!(starts[1].0, 1);
        assert_eq!(*starts[1].1, *r.tool_calls[1].id);
        let args0: String = deltas
            .iter()
            .filter_map(|d| match d {
                Delta::ToolArguments { index: 0, fragment } => Some(fragment.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(serde_json::from_str::<Value>(&args0).unwrap(), r.tool_calls[0].arguments, "{api:?}");
        let fragments = deltas.iter().filter(|d| matches!(d, Delta::ToolArguments { index: 0, .. })).count();
        assert!(fragments >= 3, "{api:?}: the arguments arrived in pieces");
    }
}

#[tokio::test]
async fn responses_stream_without_final_output_uses_the_streamed_items() {
    let server = Server::start(vec![Reply::sse_text(&fixture("openai_responses/sparse.sse"), 64)]).await;
    let p = builder(Api::OpenAiResponses, &server, true).build().unwrap();
    let r = p.generate(&simple(), &CancellationToken::new()).await.unwrap();
    assert_eq!(r.text, "Paris");
    assert_eq!(
        r.tool_calls,
        vec![ToolCall::new("call_unLAR8MvFNptuiZK6K6HCy5k", "get_weather", json!({"city": "Rome"}))]
    );
    assert_eq!(r.usage, Some(Usage::new(5, 7)));
}

#[tokio::test]
async fn finish_reasons_length_and_refusal() {
    let server = Server::start(vec![Reply::json(200, fixture("openai_responses/incomplete.json"))]).await;
    let p = builder(Api::OpenAiResponses, &server, false).build().unwrap();
    let r = p.generate(&simple(), &CancellationToken::new()).await.unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::Length));
    assert_eq!(r.text, "The answer is lo");

    let server = Server::start(vec![Reply::json(200, fixture("anthropic/refusal.json"))]).await;
    let p = builder(Api::Anthropic, &server, false).build().unwrap();
    let r = p.generate(&simple(), &CancellationToken::new()).await.unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::Refusal));

    let chat = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null,
        "refusal": "I can't help with that."}, "finish_reason": "stop"}]});
    let filtered = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Par"},
        "finish_reason": "content_filter"}]});
    let server = Server::start(vec![Reply::json(200, chat.to_string()), Reply::json(200, filtered.to_string())]).await;
    let p = builder(Api::OpenAiChat, &server, false).build().unwrap();
    let r = p.generate(&simple(), &CancellationToken::new()).await.unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::Refusal));
    assert_eq!(r.text, "I can't help with that.");
    assert_eq!(r.usage, None, "no usage reported is unknown, not zero");
    let r = p.generate(&simple(), &CancellationToken::new()).await.unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::ContentFilter));
}

/// Unparseable arguments reach the model as an invalid call: the run goes on, the tool never runs,
/// and the model is told what was wrong.
#[tokio::test]
async fn invalid_json_arguments_become_an_invalid_call_the_model_is_told_about() {
    for api in APIS {
        for stream in [false, true] {
            let first = if stream || api == Api::Anthropic {
                if api == Api::Anthropic && !stream {
                    continue; // Anthropic sends input as an object when not streaming: it cannot be malformed.
                }
                Reply::sse_text(&fixture(&format!("{}/invalid_args.sse", dir(api))), 64)
            } else {
                Reply::json(200, fixture(&format!("{}/invalid_args.json", dir(api))))
            };
            let second = if stream {
                Reply::sse_text(&fixture(&format!("{}/text.sse", dir(api))), 64)
            } else {
                Reply::json(200, fixture(&format!("{}/text.json", dir(api))))
            };
            let server = Server::start(vec![first, second]).await;
            let p = builder(api, &server, stream).build().unwrap();
            let ran = Arc::new(Mutex::new(0));
            let r2 = ran.clone();
            let weather = FnTool::new("get_weather", "The weather.", tools()[0].input_schema.clone(), move |_, _| {
                *r2.lock().unwrap() += 1;
                async { Ok(ToolOutput::Text("sunny".into())) }
            });
            let agent = Agent::builder(p).registry(Registry::builder().tool(weather).build().unwrap()).build().unwrap();
            let outcome = agent.run("weather?", CancellationToken::new()).await;
            assert_eq!(outcome.status, Status::Completed, "{api:?} stream={stream}: {:?}", outcome.error);
            assert_eq!(*ran.lock().unwrap(), 0, "the tool never ran");
            let Message::ToolResult(result) = &outcome.messages[2] else { panic!("{:?}", outcome.messages) };
            assert!(result.is_error);
            assert!(result.content.contains("get_weather"), "{}", result.content);
            assert!(
                result.content.contains("\"object\""),
                "the model is told an object was expected: {}",
                result.content
            );
            // The second request shows the model its raw arguments and the error.
            let body = server.requests()[1].json().to_string();
            assert!(body.contains(r#"{\"city\""#) || body.contains(r#"{\\\"city\\\""#), "{api:?}: {body}");
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Faults.

fn error_json(message: &str, code: &str) -> String {
    json!({"error": {"message": message, "type": "error", "code": code}}).to_string()
}

#[tokio::test]
async fn too_many_requests_waits_for_retry_after_then_succeeds() {
    for api in APIS {
        let server = Server::start(vec![
            Reply::json(429, error_json("Rate limit reached", "rate_limit_exceeded")).header("retry-after", "1"),
            Reply::json(200, fixture(&format!("{}/text.json", dir(api)))),
        ])
        .await;
        let p = builder(api, &server, false).build().unwrap();
        let t0 = Instant::now();
        let r = p.generate(&simple(), &CancellationToken::new()).await;
        assert!(r.is_ok(), "{api:?}: {r:?}");
        assert!(t0.elapsed() >= Duration::from_millis(950), "{api:?}: waited as asked, {:?}", t0.elapsed());
        assert_eq!(server.requests().len(), 2);
    }
}

#[tokio::test]
async fn retry_after_beyond_the_limit_fails_at_once_with_a_clear_error() {
    let server = Server::start(vec![
        Reply::json(429, error_json("slow down", "rate_limit_exceeded")).header("retry-after", "3600"),
    ])
    .await;
    let p = builder(Api::OpenAiChat, &server, false).build().unwrap();
    let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
    let ModelError::Failed(msg) = &e else { panic!("{e:?}") };
    assert!(msg.contains("HTTP 429") && msg.contains("retry after 1h") && msg.contains("10s allowed"), "{msg}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn server_error_then_success() {
    for api in APIS {
        for stream in [false, true] {
            let ok = if stream {
                Reply::sse_text(&fixture(&format!("{}/text.sse", dir(api))), 100)
            } else {
                Reply::json(200, fixture(&format!("{}/text.json", dir(api))))
            };
            let server = Server::start(vec![Reply::json(500, error_json("internal", "server_error")), ok]).await;
            let p = builder(api, &server, stream).build().unwrap();
            let r = p.generate(&simple(), &CancellationToken::new()).await;
            assert!(r.is_ok(), "{api:?}: {r:?}");
            assert_eq!(server.requests().len(), 2);
        }
    }
}

#[tokio::test]
async fn persistent_server_errors_give_up_after_the_retries() {
    let replies = (0..3).map(|_| Reply::json(503, error_json("unavailable", ""))).collect();
    let server = Server::start(replies).await;
    let p = builder(Api::OpenAiChat, &server, false).build().unwrap();
    let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
    assert_eq!(
        e,
        ModelError::Failed("HTTP 503 Service Unavailable [error]: unavailable (gave up after 3 attempts)".into())
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn client_errors_are_never_retried_and_are_distinct() {
    let anthropic_overflow = json!({"type": "error", "error": {"type": "invalid_request_error",
        "message": "prompt is too long: 208310 tokens > 200000 maximum"}})
    .to_string();
    type Check = Box<dyn Fn(&ModelError) -> bool>;
    let cases: Vec<(Api, Reply, Check)> = vec![
        (
            Api::OpenAiChat,
            Reply::json(400, error_json("Invalid 'messages'", "invalid_value")),
            Box::new(|e| matches!(e, ModelError::Rejected { status: 400, message } if message == "Invalid 'messages'")),
        ),
        (
            Api::OpenAiResponses,
            Reply::json(401, error_json("Incorrect API key provided", "invalid_api_key")),
            Box::new(|e| {
                matches!(e, ModelError::Unauthorized { status: 401, .. }) && e.to_string().contains("check the API key")
            }),
        ),
        (
            Api::Anthropic,
            Reply::json(
                403,
                json!({"type": "error", "error": {"type": "permission_error", "message": "no access"}}).to_string(),
            ),
            Box::new(|e| matches!(e, ModelError::Unauthorized { status: 403, .. })),
        ),
        (
            Api::OpenAiChat,
            Reply::json(404, error_json("The model `x` does not exist", "model_not_found")),
            Box::new(|e| matches!(e, ModelError::Rejected { status: 404, .. })),
        ),
        (
            Api::OpenAiChat,
            Reply::json(
                400,
                error_json("This model's maximum context length is 128000 tokens.", "context_length_exceeded"),
            ),
            Box::new(|e| {
                matches!(e, ModelError::ContextOverflow(_))
                    && e.to_string().starts_with("the conversation exceeds the model's context window")
            }),
        ),
        (
            Api::Anthropic,
            Reply::json(400, anthropic_overflow),
            Box::new(|e| matches!(e, ModelError::ContextOverflow(_))),
        ),
        (
            Api::OpenAiResponses,
            Reply::json(429, error_json("You exceeded your current quota", "insufficient_quota"))
                .header("retry-after", "1"),
            Box::new(|e| matches!(e, ModelError::QuotaExhausted(_)) && e.to_string().contains("quota is exhausted")),
        ),
    ];
    for (api, reply, check) in cases {
        let server = Server::start(vec![reply]).await;
        let p = builder(api, &server, false).build().unwrap();
        let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
        assert!(check(&e), "{api:?}: {e:?}");
        assert_eq!(server.requests().len(), 1, "{api:?}: not retried");
    }
}

fn cut_stream(api: Api) -> Reply {
    let text = fixture(&format!("{}/text.sse", dir(api)));
    let half = text.len() / 2;
    Reply::sse(vec![Step::Bytes(text.as_bytes()[..half].to_vec()), Step::Sleep(Duration::from_millis(20)), Step::Cut])
}

#[tokio::test]
async fn a_stream_cut_midway_is_retried_and_the_restart_is_announced() {
    for api in APIS {
        let server =
            Server::start(vec![cut_stream(api), Reply::sse_text(&fixture(&format!("{}/text.sse", dir(api))), 50)])
                .await;
        let p = builder(api, &server, true).build().unwrap();
        let (r, deltas) = generate(&p, &simple()).await;
        let r = r.unwrap();
        assert_eq!(server.requests().len(), 2, "{api:?}");
        let restart = deltas.iter().position(|d| matches!(d, Delta::Restart { attempt: 2, .. }));
        let restart = restart.unwrap_or_else(|| panic!("{api:?}: {deltas:?}"));
        assert!(restart > 0, "deltas came before the cut");
        assert_eq!(text_of(&deltas[restart..]), r.text, "{api:?}: after the restart, the whole text once");
    }
    // Without retries the error says what happened.
    let server = Server::start(vec![cut_stream(Api::OpenAiChat)]).await;
    let p = builder(Api::OpenAiChat, &server, true).retry(RetryPolicy::none()).build().unwrap();
    let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
    let ModelError::Failed(msg) = &e else { panic!("{e:?}") };
    assert!(msg.starts_with("the stream broke off"), "{msg}");
}

#[tokio::test]
async fn a_stream_that_ends_early_is_retried() {
    for api in APIS {
        let text = fixture(&format!("{}/text.sse", dir(api)));
        // A clean end of the body, but before the final event.
        let last = match api {
            // Chat: a finish reason without `[DONE]` is a complete response (some servers omit it).
            Api::OpenAiChat => text.find("\"finish_reason\": \"stop\"").unwrap(),
            _ => text.len(),
        };
        let cut_at = text[..last].rfind("data:").unwrap();
        let short = Reply::sse_text(&text[..cut_at], 4096);
        let server = Server::start(vec![short.clone(), short]).await;
        let p = builder(api, &server, true).retry(RetryPolicy { max_retries: 1, ..fast_retry() }).build().unwrap();
        let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
        assert_eq!(
            e,
            ModelError::Failed("the stream ended before the response was complete (gave up after 2 attempts)".into()),
            "{api:?}"
        );
        assert_eq!(server.requests().len(), 2);
    }
}

#[tokio::test]
async fn a_stalled_stream_hits_the_idle_timeout_and_is_retried() {
    for api in APIS {
        let text = fixture(&format!("{}/text.sse", dir(api)));
        let stalled = Reply::sse(vec![Step::Bytes(text.as_bytes()[..text.len() / 3].to_vec()), Step::Stall]);
        let server = Server::start(vec![stalled.clone(), Reply::sse_text(&text, 100)]).await;
        let p = builder(api, &server, true).idle_timeout(Duration::from_millis(300)).build().unwrap();
        let (r, _) = generate(&p, &simple()).await;
        assert!(r.is_ok(), "{api:?}: {r:?}");
        assert_eq!(server.requests().len(), 2);

        let server = Server::start(vec![stalled]).await;
        let p = builder(api, &server, true)
            .idle_timeout(Duration::from_millis(300))
            .retry(RetryPolicy::none())
            .build()
            .unwrap();
        let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
        assert_eq!(e, ModelError::Failed("the stream stalled: no data for 300ms".into()), "{api:?}");
    }
}

#[tokio::test]
async fn headers_that_never_come_hit_the_response_timeout() {
    let mut slow = Reply::json(200, fixture("openai_chat/text.json"));
    slow.delay = Duration::from_secs(30);
    let server = Server::start(vec![slow]).await;
    let p = builder(Api::OpenAiChat, &server, false)
        .response_timeout(Duration::from_millis(300))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
    assert!(e.to_string().contains("no response from") && e.to_string().contains("within 300ms"), "{e}");
}

#[tokio::test]
async fn malformed_sse_is_a_malformed_response_and_not_retried() {
    for api in APIS {
        let bad = "event: message_start\ndata: {\"type\": \"message_start\", \"message\": {oops\n\n";
        let server = Server::start(vec![Reply::sse_text(bad, 4096)]).await;
        let p = builder(api, &server, true).build().unwrap();
        let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
        let ModelError::Malformed(msg) = &e else { panic!("{api:?}: {e:?}") };
        assert!(msg.starts_with("invalid JSON in a stream event (message_start)"), "{msg}");
        assert_eq!(server.requests().len(), 1);
    }
}

#[tokio::test]
async fn an_error_event_in_the_stream_is_classified() {
    // Anthropic's overloaded_error mid-stream is transient: retried, then the good stream wins.
    let server = Server::start(vec![
        Reply::sse_text(&fixture("anthropic/overloaded.sse"), 4096),
        Reply::sse_text(&fixture("anthropic/text.sse"), 4096),
    ])
    .await;
    let p = builder(Api::Anthropic, &server, true).build().unwrap();
    let (r, deltas) = generate(&p, &simple()).await;
    assert_eq!(r.unwrap().text, "Hello! How can I help?");
    assert!(
        deltas
            .iter()
            .any(|d| matches!(d, Delta::Restart { reason, .. } if reason.contains("overloaded_error: Overloaded")))
    );
    // A context overflow reported by a Responses stream is final.
    let failed = "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"context_length_exceeded\",\"message\":\"Your input exceeds the context window of this model.\"}}}\n\n";
    let server = Server::start(vec![Reply::sse_text(failed, 4096)]).await;
    let p = builder(Api::OpenAiResponses, &server, true).build().unwrap();
    let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
    assert!(matches!(e, ModelError::ContextOverflow(_)), "{e:?}");
    // A chat stream error object.
    let chat_err = "data: {\"error\":{\"message\":\"bad things\",\"type\":\"invalid_request_error\"}}\n\n";
    let server = Server::start(vec![Reply::sse_text(chat_err, 4096)]).await;
    let p = builder(Api::OpenAiChat, &server, true).build().unwrap();
    let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
    assert_eq!(e, ModelError::Failed("the provider reported an error: invalid_request_error: bad things".into()));
}

#[tokio::test]
async fn html_error_pages_are_summarized() {
    let page = "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>";
    let replies = (0..3).map(|_| Reply::body(502, "text/html", page)).collect();
    let server = Server::start(replies).await;
    let p = builder(Api::OpenAiResponses, &server, true).build().unwrap();
    let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
    assert_eq!(
        e,
        ModelError::Failed(
            "HTTP 502 Bad Gateway: an HTML page titled \"502 Bad Gateway\" (gave up after 3 attempts)".into()
        )
    );
    // A 200 with an HTML page (a captive portal, a proxy login) is malformed, not retried.
    let server =
        Server::start(vec![Reply::body(200, "text/html; charset=utf-8", "<html><title>Sign in</title></html>")]).await;
    let p = builder(Api::OpenAiChat, &server, true).build().unwrap();
    let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
    let ModelError::Malformed(msg) = &e else { panic!("{e:?}") };
    assert!(
        msg.starts_with("the response is not JSON (text/html; charset=utf-8")
            && msg.ends_with("an HTML page titled \"Sign in\""),
        "{msg}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_body_far_larger_than_expected_is_refused() {
    let huge = format!("{{\"pad\": \"{}\"}}", "x".repeat(4 << 20));
    // With a content length.
    let server = Server::start(vec![Reply::json(200, huge.clone())]).await;
    let p = builder(Api::OpenAiChat, &server, false).max_response_bytes(1 << 20).build().unwrap();
    let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
    assert_eq!(
        e,
        ModelError::Malformed("the response exceeds 1048576 bytes (the provider's max_response_bytes)".into())
    );
    // Chunked, no length.
    let chunks = huge.as_bytes().chunks(64 * 1024).map(|c| Step::Bytes(c.to_vec())).collect();
    let mut reply = Reply::sse(chunks);
    reply.headers = vec![("content-type".into(), "application/json".into())];
    let server = Server::start(vec![reply]).await;
    let p = builder(Api::OpenAiChat, &server, false).max_response_bytes(1 << 20).build().unwrap();
    let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
    assert!(matches!(e, ModelError::Malformed(ref m) if m.contains("exceeds 1048576 bytes")), "{e:?}");
    // A stream that never ends an event.
    let endless = (0..64).map(|_| Step::Bytes(format!("data: {}", "y".repeat(64 * 1024)).into_bytes())).collect();
    let server = Server::start(vec![Reply::sse(endless)]).await;
    let p = builder(Api::OpenAiChat, &server, true).max_response_bytes(1 << 20).build().unwrap();
    let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
    assert!(matches!(e, ModelError::Malformed(ref m) if m.contains("exceeds 1048576 bytes")), "{e:?}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn an_unreachable_server_is_retried_then_reported() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let p = Provider::builder(Api::OpenAiChat, "m")
        .base_url(format!("http://127.0.0.1:{port}/v1"))
        .retry(fast_retry())
        .build()
        .unwrap();
    let e = p.generate(&simple(), &CancellationToken::new()).await.unwrap_err();
    let ModelError::Failed(msg) = &e else { panic!("{e:?}") };
    assert!(msg.starts_with(&format!("request to http://127.0.0.1:{port}/v1/chat/completions failed")), "{msg}");
    assert!(msg.ends_with("(gave up after 3 attempts)"), "{msg}");
}

#[tokio::test]
async fn cancellation_mid_stream_aborts_the_request_at_once() {
    for api in APIS {
        let text = fixture(&format!("{}/text.sse", dir(api)));
        // Up to the end of the first event with text, then a long pause.
        let split = text.find("Hello").unwrap();
        let split = split + text[split..].find("\n\n").unwrap() + 2;
        let server = Server::start(vec![Reply::sse(vec![
            Step::Bytes(text.as_bytes()[..split].to_vec()),
            Step::Sleep(Duration::from_secs(60)),
            Step::Bytes(text.as_bytes()[split..].to_vec()),
        ])])
        .await;
        let p = builder(api, &server, true).build().unwrap();
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        // Cancel as soon as the first text arrives.
        let sink = DeltaSink::new(move |d| {
            if matches!(d, Delta::Text { .. }) {
                c.cancel();
            }
        });
        let r = tokio::time::timeout(Duration::from_secs(20), sink.scope(p.generate(&simple(), &cancel))).await;
        assert_eq!(r.expect("returned promptly, long before the stream would end"), Err(ModelError::Cancelled));
        // The server sees its client go away.
        for _ in 0..1000 {
            if server.disconnects.load(Ordering::SeqCst) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(server.disconnects.load(Ordering::SeqCst), 1, "{api:?}: the connection was closed");
        assert_eq!(server.requests().len(), 1);
    }
}

#[tokio::test]
async fn cancellation_during_a_retry_wait_returns_at_once() {
    let server =
        Server::start(vec![Reply::json(429, error_json("wait", "rate_limit_exceeded")).header("retry-after", "8")])
            .await;
    let p = builder(Api::OpenAiChat, &server, false).build().unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        c.cancel();
    });
    let r = tokio::time::timeout(Duration::from_secs(5), p.generate(&simple(), &cancel)).await;
    assert_eq!(r.expect("did not sit out the 8 s"), Err(ModelError::Cancelled));
}

#[tokio::test]
async fn a_429_pauses_every_run_sharing_the_limiter() {
    let server = Server::start(vec![
        Reply::json(429, error_json("slow down", "rate_limit_exceeded")).header("retry-after", "1"),
        Reply::json(200, fixture("openai_chat/text.json")),
        Reply::json(200, fixture("openai_chat/text.json")),
    ])
    .await;
    let a = builder(Api::OpenAiChat, &server, false).build().unwrap();
    let b = builder(Api::OpenAiChat, &server, false).rate_limiter(a.rate_limiter().clone()).build().unwrap();
    a.generate(&simple(), &CancellationToken::new()).await.unwrap();
    // `a` was told to wait 1 s; it waited and succeeded. Now pause again and see `b` held back.
    a.rate_limiter().pause_for(Duration::from_millis(500));
    let t0 = Instant::now();
    b.generate(&simple(), &CancellationToken::new()).await.unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(450), "b waited for the shared pause: {:?}", t0.elapsed());
}

#[tokio::test]
async fn rate_limit_headers_saying_none_left_pause_the_next_request() {
    let server = Server::start(vec![
        Reply::json(200, fixture("openai_chat/text.json"))
            .header("x-ratelimit-remaining-requests", "0")
            .header("x-ratelimit-reset-requests", "700ms"),
        Reply::json(200, fixture("openai_chat/text.json")),
    ])
    .await;
    let p = builder(Api::OpenAiChat, &server, false).build().unwrap();
    p.generate(&simple(), &CancellationToken::new()).await.unwrap();
    assert!(p.rate_limiter().paused_for().is_some());
    let t0 = Instant::now();
    p.generate(&simple(), &CancellationToken::new()).await.unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(600), "{:?}", t0.elapsed());
}

#[tokio::test]
async fn a_server_that_ignores_stream_still_works() {
    let server = Server::start(vec![Reply::json(200, fixture("openai_chat/text.json"))]).await;
    let p = builder(Api::OpenAiChat, &server, true).build().unwrap();
    let (r, deltas) = generate(&p, &simple()).await;
    assert_eq!(r.unwrap().text, "The capital of France is Paris.");
    assert_eq!(text_of(&deltas), "The capital of France is Paris.", "the text is still shown");
}
