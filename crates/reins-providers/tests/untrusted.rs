//! Nothing that arrives from the network is trusted (issue 22): a redirect is never followed, an encoding not
//! asked for is refused, usage numbers are checked, a server that trickles or never stops is bounded, and a
//! `Retry-After` is read by one rule. Real servers on 127.0.0.1; the outcomes are asserted, never timings.

mod common;

use std::time::Duration;

use common::{Reply, Server, Step, dir, fixture, text_reply};
use reins::{Agent, Conversation, FinishReason, Message, Model, ModelError, ModelRequest, ModelResponse, Status};
use reins_providers::{Api, Provider, ProviderBuilder, RetryPolicy};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const APIS: [Api; 4] = [Api::OpenAiResponses, Api::OpenAiChat, Api::Anthropic, Api::Gemini];

const KEY: &str = "sk-secret-key-22";
const TEAM: &str = "team-header-secret";

fn base_url(api: Api, server: &Server) -> String {
    match api {
        Api::Anthropic => server.url(""),
        _ => server.url("/v1"),
    }
}

fn path(api: Api) -> &'static str {
    match api {
        Api::OpenAiResponses => "/v1/responses",
        Api::OpenAiChat => "/v1/chat/completions",
        Api::Anthropic => "/v1/messages",
        Api::Gemini => "/v1/models/test-model:generateContent",
        Api::Bedrock => unreachable!("not in APIS: tests/bedrock.rs has its own"),
    }
}

fn fast_retry(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
        max_retry_after: Duration::from_secs(10),
    }
}

fn builder(api: Api, server: &Server, stream: bool) -> ProviderBuilder {
    Provider::builder(api, "test-model")
        .base_url(base_url(api, server))
        .api_key(Some(KEY.into()))
        .header("X-Team", TEAM)
        .stream(stream)
        .retry(fast_retry(2))
}

fn simple() -> ModelRequest {
    ModelRequest {
        instructions: None,
        messages: Conversation::from_messages(vec![Message::user("Hi")]),
        tools: Default::default(),
        cache_key: None,
    }
}

/// One call. Every server here ends its script within minutes; a call that outlives two of them was not ended by
/// what is under test (a guard, not a timing assertion).
async fn call(p: &Provider) -> Result<ModelResponse, ModelError> {
    tokio::time::timeout(Duration::from_secs(120), p.generate(&simple(), &CancellationToken::new()))
        .await
        .expect("the call ended long before the server's script")
}

// ---------------------------------------------------------------------------------------------------
// Item 2: redirects.

/// A 307/308 from the base URL is not followed: the second listener hears nothing (neither the key nor the
/// `[provider] headers` value nor the conversation), the call is not retried, and the error names the Location.
#[tokio::test]
async fn a_redirect_is_never_followed_and_the_error_names_where_it_pointed() {
    for api in APIS {
        for (status, host) in [(307, "127.0.0.1"), (308, "localhost")] {
            for stream in [false, true] {
                let elsewhere = Server::start(vec![text_reply(api, stream), text_reply(api, stream)]).await;
                let location = format!("http://{host}:{}{}", elsewhere.addr.port(), path(api));
                let redirecting = Server::start(vec![Reply::json(status, "").header("location", &location)]).await;
                let p = builder(api, &redirecting, stream).build().unwrap();
                let e = call(&p).await.unwrap_err();
                assert!(elsewhere.requests().is_empty(), "{api:?} {status}: the redirect was followed");
                let asked = redirecting.requests();
                assert_eq!(asked.len(), 1, "{api:?} {status}: not retried");
                // The key and the header went to the base URL, as they should.
                let key_header = match api {
                    Api::Anthropic => "x-api-key",
                    Api::Gemini => "x-goog-api-key",
                    _ => "authorization",
                };
                assert!(asked[0].header(key_header).is_some_and(|v| v.contains(KEY)));
                assert_eq!(asked[0].header("x-team"), Some(TEAM));
                let ModelError::Rejected { status: s, message } = &e else { panic!("{api:?}: {e:?}") };
                assert_eq!(*s, status);
                assert!(message.contains(&format!("{location:?}")), "{api:?}: {message}");
                assert!(message.contains("follows no redirect"), "{message}");
                assert!(!message.contains(KEY) && !message.contains(TEAM), "{message}");
            }
        }
    }
}

/// A Location full of control characters and length is shown escaped and bounded; a 3xx without one says so.
#[tokio::test]
async fn a_hostile_location_is_escaped_and_bounded() {
    let long = format!("http://127.0.0.1:9/\u{1b}[31m{}", "x".repeat(5000));
    let server = Server::start(vec![
        Reply::json(302, "").header("location", &long.replace('\u{1b}', "%1B")),
        Reply::json(301, ""),
    ])
    .await;
    let p = builder(Api::OpenAiChat, &server, false).build().unwrap();
    let e = call(&p).await.unwrap_err().to_string();
    assert!(e.len() < 600 && e.contains("…"), "{e}");
    let e = call(&p).await.unwrap_err().to_string();
    assert!(e.contains("HTTP 301") && e.contains("with no Location"), "{e}");
}

// ---------------------------------------------------------------------------------------------------
// Item 21: encodings.

/// `{"error":{"message":"compressed"}}` in gzip.
const GZIPPED: [u8; 52] = [
    31, 139, 8, 0, 0, 0, 0, 0, 2, 3, 171, 86, 74, 45, 42, 202, 47, 82, 178, 170, 86, 202, 77, 45, 46, 78, 76, 79, 85,
    178, 82, 74, 206, 207, 45, 40, 2, 242, 82, 83, 148, 106, 107, 1, 147, 35, 87, 73, 34, 0, 0, 0,
];

/// Reins asks for bodies as they are; a server that compresses anyway gets a clear error, never binary text.
#[tokio::test]
async fn a_gzip_answer_is_a_clear_error_and_never_text() {
    for (status, content_type, stream) in
        [(200, "application/json", false), (200, "text/event-stream", true), (400, "application/json", false)]
    {
        let reply = Reply::body(status, content_type, GZIPPED.to_vec()).header("content-encoding", "gzip");
        let server = Server::start(vec![reply]).await;
        let p = builder(Api::OpenAiChat, &server, stream).build().unwrap();
        let e = call(&p).await.unwrap_err();
        let asked = server.requests();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].header("accept-encoding"), Some("identity"));
        let msg = e.to_string();
        assert!(msg.contains("\"gzip\" encoding"), "{status}: {msg}");
        assert!(!msg.contains('\u{fffd}'), "{status}: binary read as text: {msg}");
        if status == 200 {
            assert!(matches!(e, ModelError::Malformed(_)), "{e:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Item 10: usage numbers.

/// A whole response of `api` whose input count is `value`.
fn with_input_tokens(api: Api, value: Value) -> Reply {
    let mut v: Value = serde_json::from_str(&fixture(&format!("{}/text.json", dir(api)))).unwrap();
    match api {
        Api::OpenAiChat => v["usage"]["prompt_tokens"] = value,
        Api::Gemini => v["usageMetadata"]["promptTokenCount"] = value,
        _ => v["usage"]["input_tokens"] = value,
    }
    Reply::json(200, v.to_string())
}

#[tokio::test]
async fn usage_that_is_not_a_count_is_unknown_never_zero() {
    for api in APIS {
        // An integral float is a count.
        let server = Server::start(vec![with_input_tokens(api, json!(500.0))]).await;
        let r = call(&builder(api, &server, false).build().unwrap()).await.unwrap();
        let usage = r.usage.unwrap_or_else(|| panic!("{api:?}: 500.0 is a count"));
        assert!(usage.input_tokens >= 500, "{api:?}: {usage:?}");
        for bad in [json!("100"), json!(-5), json!(1e30), json!(1.5), json!(true), json!([1]), json!({"n": 1})] {
            let server = Server::start(vec![with_input_tokens(api, bad.clone())]).await;
            let r = call(&builder(api, &server, false).build().unwrap()).await.unwrap();
            assert_eq!(r.usage, None, "{api:?}: {bad} is malformed usage, not a count");
        }
    }
    // Streamed: a malformed count in the chunk that carries usage.
    let sse = fixture("openai_chat/text.sse");
    let bad = sse.replacen("\"prompt_tokens\": 19", "\"prompt_tokens\": \"19\"", 1);
    assert_ne!(sse, bad, "the fixture reports usage");
    let server = Server::start(vec![Reply::sse_text(&bad, 4096)]).await;
    let r = call(&builder(Api::OpenAiChat, &server, true).build().unwrap()).await.unwrap();
    assert_eq!(r.usage, None);
}

/// A run whose model reports `"prompt_tokens": "100"` counts the call among those without usage.
#[tokio::test]
async fn a_run_counts_malformed_usage_as_a_call_without_usage() {
    let server = Server::start(vec![with_input_tokens(Api::OpenAiChat, json!("100"))]).await;
    let p = builder(Api::OpenAiChat, &server, false).build().unwrap();
    let outcome = Agent::builder(p).build().unwrap().run("Hi", CancellationToken::new()).await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert_eq!(outcome.usage.calls_without_usage, 1);
    assert_eq!(outcome.usage.calls_with_usage, 0);
}

// ---------------------------------------------------------------------------------------------------
// Item 17: trickles and endless streams.

/// The fixture stream of `api` up to its first text event, and that event.
fn first_text_event(api: Api) -> (String, String) {
    let text = fixture(&format!("{}/text.sse", dir(api)));
    let at = text.find("Hello").unwrap();
    let start = text[..at].rfind("\n\n").map_or(0, |i| i + 2);
    let end = at + text[at..].find("\n\n").unwrap() + 2;
    (text[..start].to_owned(), text[start..end].to_owned())
}

/// SSE comments every few milliseconds keep the idle timeout from firing; the deadline sees that no content came:
/// stalled, retried, and the retry's good answer wins.
#[tokio::test]
async fn a_stream_of_comments_only_is_stalled_and_retried() {
    for api in APIS {
        let comments = Reply::sse(
            (0..100_000)
                .flat_map(|_| [Step::Bytes(b": ping\n".to_vec()), Step::Sleep(Duration::from_millis(5))])
                .collect(),
        );
        let server = Server::start(vec![comments.clone(), text_reply(api, true)]).await;
        let p = builder(api, &server, true).response_deadline(Duration::from_millis(400)).build().unwrap();
        let r = call(&p).await;
        assert!(r.is_ok(), "{api:?}: {r:?}");
        assert_eq!(server.requests().len(), 2, "{api:?}: retried once");

        let server = Server::start(vec![comments.clone(), comments]).await;
        let p = builder(api, &server, true)
            .response_deadline(Duration::from_millis(300))
            .retry(fast_retry(1))
            .build()
            .unwrap();
        let e = call(&p).await.unwrap_err();
        assert_eq!(
            e,
            ModelError::Failed(
                "the response stalled: no content within 300ms (the provider's response_deadline) (gave up after 2 attempts)"
                    .into()
            ),
            "{api:?}"
        );
    }
}

/// A whole JSON body sent one byte at a time, each within the idle timeout, meets the deadline.
#[tokio::test]
async fn a_json_body_one_byte_at_a_time_meets_the_deadline() {
    let body = fixture("openai_chat/text.json");
    let steps = body.bytes().flat_map(|b| [Step::Bytes(vec![b]), Step::Sleep(Duration::from_millis(20))]).collect();
    let mut reply = Reply::sse(steps);
    reply.headers = vec![("content-type".into(), "application/json".into())];
    let server = Server::start(vec![reply]).await;
    let p = builder(Api::OpenAiChat, &server, false)
        .response_deadline(Duration::from_millis(300))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let e = call(&p).await.unwrap_err();
    assert_eq!(
        e,
        ModelError::Failed("the response stalled: no content within 300ms (the provider's response_deadline)".into())
    );
}

/// Content that never ends, as fast as the server can send it: cut at the response cap, the answer `length`
/// (a run ends `truncated`), no tool call, the connection closed.
#[tokio::test]
async fn an_endless_content_stream_is_cut_at_the_response_cap() {
    for api in APIS {
        let (head, event) = first_text_event(api);
        let mut steps = vec![Step::Bytes(head.into_bytes())];
        steps.extend((0..20_000).map(|_| Step::Bytes(event.clone().into_bytes())));
        let server = Server::start(vec![Reply::sse(steps.clone())]).await;
        let p = builder(api, &server, true).max_output_tokens(16).build().unwrap();
        let r = call(&p).await.unwrap();
        let cap = 16 * reins_providers::BYTES_PER_TOKEN as usize;
        assert_eq!(r.finish_reason, Some(FinishReason::Length), "{api:?}");
        assert!(!r.text.is_empty() && r.text.len() <= cap, "{api:?}: {} bytes", r.text.len());
        assert!(r.text.starts_with("Hello"), "{api:?}: {}", r.text);
        assert!(r.tool_calls.is_empty());
        assert_eq!(server.requests().len(), 1, "{api:?}: not retried");

        // In a run: `truncated`, the partial answer kept.
        let server = Server::start(vec![Reply::sse(steps)]).await;
        let p = builder(api, &server, true).max_output_tokens(16).build().unwrap();
        let outcome = Agent::builder(p).build().unwrap().run("Hi", CancellationToken::new()).await;
        assert_eq!(outcome.status, Status::Truncated, "{api:?}: {:?}", outcome.error);
        assert!(outcome.answer.is_some_and(|a| a.starts_with("Hello")));
    }
}

/// Content that keeps coming slowly, within the cap: the deadline ends the call, without a retry.
#[tokio::test]
async fn a_slow_endless_content_stream_meets_the_deadline_and_is_not_retried() {
    let (head, event) = first_text_event(Api::OpenAiChat);
    let mut steps = vec![Step::Bytes(head.into_bytes())];
    steps.extend(
        (0..100_000).flat_map(|_| [Step::Bytes(event.clone().into_bytes()), Step::Sleep(Duration::from_millis(5))]),
    );
    let server = Server::start(vec![Reply::sse(steps)]).await;
    let p = builder(Api::OpenAiChat, &server, true).response_deadline(Duration::from_millis(300)).build().unwrap();
    let e = call(&p).await.unwrap_err();
    let ModelError::Failed(msg) = &e else { panic!("{e:?}") };
    assert!(msg.starts_with("the response did not end within 300ms (the provider's response_deadline);"), "{msg}");
    assert_eq!(server.requests().len(), 1);
}

// ---------------------------------------------------------------------------------------------------
// Item 18: Retry-After.

/// A date years away is refused like `999999` seconds: at once, one request, the wait in words.
#[tokio::test]
async fn retry_after_far_away_is_refused_in_every_form() {
    for value in ["999999", "Mon, 01 Jan 2100 00:00:00 GMT", "Fri, 01 Jan 2100 00:00:00 GMT", "1e30"] {
        let server = Server::start(vec![
            Reply::json(429, r#"{"error":{"message":"slow down","code":"rate_limit_exceeded"}}"#)
                .header("retry-after", value),
            text_reply(Api::OpenAiChat, false),
        ])
        .await;
        let p = builder(Api::OpenAiChat, &server, false).build().unwrap();
        let e = call(&p).await.unwrap_err();
        let ModelError::Failed(msg) = &e else { panic!("{value}: {e:?}") };
        assert!(
            msg.contains("the server asks to retry after ") && msg.contains("longer than the 10s allowed"),
            "{value}: {msg}"
        );
        assert!(!msg.contains("days") || msg.contains(" days"), "{msg}");
        assert_eq!(server.requests().len(), 1, "{value}: not retried");
        if value == "999999" {
            assert!(msg.contains("retry after 11 days 13h 46m 39s"), "{msg}");
        }
    }
}
