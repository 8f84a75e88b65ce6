//! The native Bedrock Converse adapter (issue 27, items 2 and 4) against a fake Bedrock runtime on 127.0.0.1
//! (`tests/bedrock/fake_bedrock.py`, a real process using botocore 1.44.8) that behaves as the API does: it
//! recomputes each request's SigV4 signature with the test key and refuses a wrong one, takes a Bedrock API key as a
//! bearer when it is told to, validates every request body against botocore's `bedrock-runtime` service model (and
//! every response body and streamed event it sends against the output shapes), frames its streams as
//! `application/vnd.amazon.eventstream`, and refuses (400, ValidationException) a turn whose toolUse/toolResult
//! pairing or reasoning signature is wrong. A 10-turn tool loop with reasoning runs through a Reins agent, streamed
//! and not; images go in and come from tools; stop reasons and usage (cache read and write) are parsed and priced;
//! Bedrock's error shapes are classified.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use common::{echo_registry, sdk_python};
use reins::{
    Agent, Conversation, FinishReason, FnTool, Image, Limits, Message, Model, ModelError, ModelRequest, Outcome,
    Registry, Status, ToolOutput,
};
use reins_providers::{AwsCredentials, FallbackModel, Provider, RetryPolicy, named_provider};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const ACCESS_KEY: &str = "AKIDREINSTEST0000000";
const SECRET_KEY: &str = "reins/test/secret+key/0000000000000000000";
const SESSION_TOKEN: &str = "reins-session-token-test";
const REGION: &str = "eu-west-3";
const MODEL: &str = "eu.anthropic.claude-sonnet-4-5-20250929-v1:0";
const TURNS: usize = 10;

/// The fake, as a child process: killed (by its own id) when dropped.
struct Fake {
    child: Child,
    _stdin: ChildStdin,
    url: String,
    botocore: String,
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Fake {
    fn start(bearer: Option<&str>) -> Fake {
        Fake::start_with(bearer, None)
    }

    /// A fake that answers every request with `fail` (`TYPE:STATUS`) when given.
    fn start_with(bearer: Option<&str>, fail: Option<&str>) -> Fake {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bedrock/fake_bedrock.py");
        // The Python is checked once (importing the SDKs takes seconds).
        static PYTHON: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
        let mut cmd = Command::new(PYTHON.get_or_init(sdk_python));
        cmd.arg(script)
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY, "--session-token", SESSION_TOKEN])
            .args(["--region", REGION])
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(b) = bearer {
            cmd.args(["--bearer", b]);
        }
        if let Some(f) = fail {
            cmd.args(["--fail", f]);
        }
        let mut child = cmd.spawn().expect("start the fake Bedrock");
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = lines.next().unwrap().unwrap();
        let botocore = lines.next().unwrap().unwrap();
        Fake { child, _stdin: stdin, url: format!("http://127.0.0.1:{}", port.trim()), botocore }
    }

    /// Every exchange so far.
    async fn log(&self) -> Vec<Value> {
        let text = reqwest::get(format!("{}/_log", self.url)).await.unwrap().text().await.unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

fn credentials() -> AwsCredentials {
    AwsCredentials {
        access_key_id: ACCESS_KEY.into(),
        secret_access_key: SECRET_KEY.into(),
        session_token: Some(SESSION_TOKEN.into()),
    }
}

fn no_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 0,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(10),
        max_retry_after: Duration::from_secs(1),
    }
}

fn bedrock(fake: &Fake, stream: bool) -> reins_providers::ProviderBuilder {
    named_provider("bedrock")
        .unwrap()
        .builder(MODEL)
        .base_url(&fake.url)
        .aws_credentials(credentials())
        .aws_region(REGION)
        .stream(stream)
        .retry(no_retry())
}

fn agent(model: Provider, registry: Registry) -> Agent {
    Agent::builder(model)
        .registry(registry)
        .limits(Limits { max_steps: Some(100), ..Limits::default() })
        .build()
        .unwrap()
}

/// No exchange failed botocore's shapes, and every one was answered (none refused).
fn assert_contract(log: &[Value]) {
    for (n, e) in log.iter().enumerate() {
        assert_eq!(e["contract"], json!([]), "exchange {n} broke the contract: {e}");
        assert!(e.get("refused").is_none(), "exchange {n} was refused: {}", e["refused"]);
        assert!(!e["response"].is_null(), "exchange {n} has a response validated against botocore's shapes");
    }
}

#[tokio::test]
async fn a_ten_turn_tool_loop_with_reasoning_sends_every_signature_back_and_pairs_every_call() {
    for stream in [true, false] {
        let fake = Fake::start(None);
        assert_eq!(fake.botocore, "botocore 1.44.8", "the pinned botocore");
        let p = bedrock(&fake, stream).thinking_budget(4096).build().unwrap();
        assert!(
            p.endpoint().ends_with("/model/eu.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream") == stream
        );
        let o: Outcome = agent(p, echo_registry()).run("echo 10 times", CancellationToken::new()).await;
        assert_eq!(o.status, Status::Completed, "stream {stream}: {:?}", o.error);
        assert_eq!(o.answer.as_deref(), Some("done after 10 turns"));
        let log = fake.log().await;
        assert_eq!(log.len(), TURNS + 1, "no request was refused or retried");
        assert_contract(&log);
        assert!(log.iter().all(|e| e["auth"] == "sigv4"));
        assert_eq!(o.tool_calls, 15, "ten turns, five of them with two calls");
        let first = &log[0]["request"];
        assert_eq!(
            first["additionalModelRequestFields"],
            json!({"thinking": {"type": "enabled", "budget_tokens": 4096}})
        );
        let spec = &first["toolConfig"]["tools"][0]["toolSpec"];
        assert_eq!(spec["name"], "echo");
        assert_eq!(spec["inputSchema"]["json"]["properties"]["text"]["type"], "string");
        // Cache points: after the tools (no instructions) and after the final user turn.
        assert_eq!(first["toolConfig"]["tools"][1], json!({"cachePoint": {"type": "default"}}));
        assert_eq!(first["messages"][0]["content"][1], json!({"cachePoint": {"type": "default"}}));
        let last = &log[TURNS]["request"]["messages"];
        let marked: Vec<usize> = (0..last.as_array().unwrap().len())
            .filter(|&i| last[i]["content"].as_array().unwrap().iter().any(|b| b.get("cachePoint").is_some()))
            .collect();
        assert_eq!(marked, vec![2 * TURNS - 2, 2 * TURNS], "the previous request's end and this one's");
        // The reasoning was kept as items of the bedrock API, a redacted block among them.
        let items: Vec<&reins::Reasoning> = o.messages.iter().flat_map(Message::reasoning).collect();
        assert_eq!(items.len(), TURNS + 2, "one signed block a turn, a redacted one, the final answer's");
        assert!(items.iter().all(|r| r.api == "bedrock"));
        assert!(items.iter().any(|r| r.item["reasoningContent"]["redactedContent"].is_string()));
        assert!(o.messages.iter().any(|m| matches!(m, Message::Assistant { content, .. } if content == "step 1")));
        // Usage: input with cache reads and writes apart, priced at Claude's list price.
        assert_eq!(o.usage.input_tokens, (0..=TURNS as u64).map(|n| 1000 + 100 * n + 90 * n + 100).sum::<u64>());
        assert_eq!(o.usage.cached_input_tokens, (0..=TURNS as u64).map(|n| 90 * n).sum::<u64>());
        assert_eq!(o.usage.cache_write_tokens, 100 * (TURNS as u64 + 1));
        assert_eq!(o.usage.output_tokens, 50 * (TURNS as u64 + 1));
        let price = reins_providers::model_info(MODEL).unwrap().price;
        assert_eq!(reins_providers::model_info(MODEL).unwrap().prefix, "claude-sonnet-4");
        let want = price.cost_of_totals(&o.usage);
        assert!((o.cost_usd.unwrap() - want).abs() < 1e-12 && want > 0.0, "{:?} vs {want}", o.cost_usd);
    }
}

/// The request of a tool turn after a first answer, with the given assistant turn in place of the real one.
fn turn_request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        messages: Conversation::from_messages(messages),
        tools: echo_registry().specs().clone(),
        ..ModelRequest::default()
    }
}

fn ask(text: &str) -> ModelRequest {
    turn_request(vec![Message::user(text)])
}

/// The request of a tool turn: the prompt, the assistant turn given, the results given.
fn tool_turn(assistant: Message, results: Vec<Message>) -> ModelRequest {
    let mut messages = vec![Message::user("echo 3 times"), assistant];
    messages.extend(results);
    turn_request(messages)
}

/// The fake is as strict as the API: a reasoning signature changed, a call left unanswered, a result with
/// another id or after the user's text is refused with 400 ValidationException, which Reins reports as a rejected
/// request (never retried); the turn as it came passes.
#[tokio::test]
async fn the_fake_refuses_a_wrong_signature_or_pairing() {
    let fake = Fake::start(None);
    let p = bedrock(&fake, false).build().unwrap();
    let cancel = CancellationToken::new();
    let first = p.generate(&ask("echo 3 times"), &cancel).await.unwrap();
    let answer = |reasoning: Vec<reins::Reasoning>| Message::Assistant {
        content: String::new(),
        tool_calls: first.tool_calls.clone(),
        reasoning,
    };
    let results = |ids: &[&str]| ids.iter().map(|id| Message::tool_result(*id, "ok", false)).collect::<Vec<_>>();
    let ids: Vec<&str> = first.tool_calls.iter().map(|c| &*c.id).collect();
    assert_eq!(ids, ["tooluse_0_0", "tooluse_0_1"]);
    let good = p.generate(&tool_turn(answer(first.reasoning_items.clone()), results(&ids)), &cancel).await;
    assert!(good.is_ok(), "{good:?}");
    let mut tampered = first.reasoning_items.clone();
    tampered[0].item["reasoningContent"]["reasoningText"]["text"] = "changed".into();
    let cases = [
        ("a changed reasoning text", answer(tampered), results(&ids)),
        ("reasoning dropped", answer(vec![]), results(&ids)),
        ("a call unanswered", answer(first.reasoning_items.clone()), results(&ids[..1])),
        ("another id", answer(first.reasoning_items.clone()), results(&["tooluse_0_0", "tooluse_9_9"])),
    ];
    for (what, assistant, results) in cases {
        let e = p.generate(&tool_turn(assistant, results), &cancel).await.unwrap_err();
        match e {
            ModelError::Rejected { status: 400, message } => {
                assert!(message.contains("ValidationException"), "{what}: {message}");
            }
            other => panic!("{what}: {other:?}"),
        }
    }
}

/// A signature made with another secret is refused (403, InvalidSignatureException: credentials refused, never
/// retried); with a Bedrock API key set, the key goes as a bearer and nothing is signed.
#[tokio::test]
async fn sigv4_is_verified_and_a_bearer_key_wins_when_set() {
    let fake = Fake::start(None);
    let wrong = AwsCredentials { secret_access_key: "not-the-secret".into(), ..credentials() };
    let p = bedrock(&fake, true).aws_credentials(wrong).build().unwrap();
    let e = p.generate(&ask("hi"), &CancellationToken::new()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::Unauthorized { status: 403, message } if message.contains("InvalidSignatureException")),
        "{e:?}"
    );
    let ok = bedrock(&fake, true).build().unwrap();
    let r = ok.generate(&ask("hi"), &CancellationToken::new()).await.unwrap();
    assert_eq!(r.text, "hello");
    drop(fake);

    let fake = Fake::start(Some("bedrock-api-key-test"));
    let b = || bedrock(&fake, true).api_key(Some("bedrock-api-key-test".into()));
    let r = b().build().unwrap().generate(&ask("hi"), &CancellationToken::new()).await;
    assert_eq!(r.unwrap().text, "hello");
    let log = fake.log().await;
    assert_eq!(log[0]["auth"], "bearer", "the fake saw no SigV4 header beside the bearer: {}", log[0]);
    // Without a key the SigV4 request is refused by the bearer-only fake.
    let e = bedrock(&fake, true).build().unwrap().generate(&ask("hi"), &CancellationToken::new()).await;
    assert!(matches!(e.unwrap_err(), ModelError::Unauthorized { status: 403, .. }));
}

#[tokio::test]
async fn images_go_as_bytes_from_the_prompt_and_from_tools() {
    const PNG_1X1: &str =
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    let png = Image::from_base64(PNG_1X1).unwrap();
    let registry = || {
        let shot = png.clone();
        let echo = FnTool::new(
            "echo",
            "Returns the screen.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            move |_, _| {
                let shot = shot.clone();
                async move { Ok(ToolOutput::Parts { text: "the screen".into(), images: vec![shot] }) }
            },
        );
        Registry::builder().tool(echo).build().unwrap()
    };
    for stream in [false, true] {
        let fake = Fake::start(None);
        let o = agent(bedrock(&fake, stream).thinking_budget(2048).build().unwrap(), registry())
            .run_with_images("echo 1 times", vec![png.clone()], CancellationToken::new())
            .await;
        assert_eq!(o.status, Status::Completed, "{:?}", o.error);
        let log = fake.log().await;
        assert_contract(&log);
        let image = json!({"image": {"format": "png", "source": {"bytes": PNG_1X1}}});
        let messages = &log[1]["request"]["messages"];
        assert_eq!(messages[0]["content"][0], json!({"text": "echo 1 times"}));
        assert_eq!(messages[0]["content"][1], image);
        let result = &messages[2]["content"][0]["toolResult"];
        assert_eq!(result["content"], json!([{"text": "the screen"}, image]));
    }
}

/// Every stop reason maps to a finish reason; usage with cache reads and writes is parsed and priced.
#[tokio::test]
async fn stop_reasons_and_usage_are_parsed_and_priced() {
    let fake = Fake::start(None);
    let cases = [
        ("end_turn", FinishReason::Stop),
        ("stop_sequence", FinishReason::Stop),
        ("max_tokens", FinishReason::Length),
        ("model_context_window_exceeded", FinishReason::Length),
        ("guardrail_intervened", FinishReason::ContentFilter),
        ("content_filtered", FinishReason::ContentFilter),
    ];
    for stream in [true, false] {
        let p = bedrock(&fake, stream).build().unwrap();
        for (reason, want) in &cases {
            let req = ask(&format!("stop:{reason}"));
            let r = p.generate(&req, &CancellationToken::new()).await.unwrap();
            assert_eq!(r.finish_reason.as_ref(), Some(want), "{reason}");
            let u = r.usage.unwrap();
            assert_eq!(
                (u.input_tokens, u.cached_input_tokens, u.cache_write_tokens, u.output_tokens),
                (1100, 0, 100, 50)
            );
        }
    }
    assert_contract(&fake.log().await);
    let info = reins_providers::model_info("bedrock-ignored/us.anthropic.claude-haiku-4-5-20251001-v1:0").unwrap();
    assert_eq!(info.prefix, "claude-haiku-4-5");
    assert_eq!(
        reins_providers::model_info("anthropic.claude-opus-4-5-20251101-v1:0").unwrap().prefix,
        "claude-opus-4-5"
    );
    assert_eq!(
        reins_providers::model_info("global.anthropic.claude-sonnet-4-20250514-v1:0").unwrap().prefix,
        "claude-sonnet-4"
    );
    assert!(reins_providers::model_info("us.amazon.nova-pro-v1:0").is_none());
}

/// Bedrock's error answers, over HTTP and as exception frames mid-stream, classified as the other adapters'
/// are: throttling, a model not ready, a timeout and an unavailable service retried; validation refused.
#[tokio::test]
async fn error_shapes_are_classified() {
    let fake = Fake::start(None);
    let retry = RetryPolicy { max_retries: 1, ..no_retry() };
    let p = bedrock(&fake, true).retry(retry).build().unwrap();
    let ask = |text: &str| {
        let req = ask(text);
        let p = p.clone();
        async move { p.generate(&req, &CancellationToken::new()).await.unwrap_err() }
    };
    for (kind, status) in [
        ("ThrottlingException", 429),
        ("ModelNotReadyException", 429),
        ("ServiceUnavailableException", 503),
        ("ModelTimeoutException", 408),
        ("InternalServerException", 500),
    ] {
        let e = ask(&format!("error:{kind}:{status}")).await;
        assert!(
            matches!(&e, ModelError::Failed(m) if m.contains(kind) && m.contains("gave up after 2 attempts")),
            "{e:?}"
        );
    }
    let e = ask("error:ValidationException:400").await;
    assert!(
        matches!(&e, ModelError::Rejected { status: 400, message } if message.contains("ValidationException")),
        "{e:?}"
    );
    let e = ask("error:AccessDeniedException:403").await;
    assert!(matches!(e, ModelError::Unauthorized { status: 403, .. }), "{e:?}");
    let e = ask("streamerror:modelStreamErrorException").await;
    assert!(
        matches!(&e, ModelError::Failed(m) if m.contains("modelStreamErrorException") && m.contains("gave up")),
        "{e:?}"
    );
    let e = ask("streamerror:validationException").await;
    assert!(matches!(e, ModelError::Rejected { status: 400, .. }), "{e:?}");
    let n = fake.log().await.len();
    assert_eq!(n, 5 * 2 + 1 + 1 + 2 + 1, "the retryable ones twice, the others once");
}

/// Bedrock builds from the standard variables' names: a missing region or key is said before any request.
#[test]
fn a_missing_key_or_region_is_said() {
    let e = named_provider("bedrock").unwrap().builder(MODEL).aws_region(REGION).build();
    // The test environment may hold AWS variables; only check when it holds none.
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() && std::env::var_os("AWS_BEARER_TOKEN_BEDROCK").is_none() {
        let e = e.unwrap_err().to_string();
        assert!(e.contains("AWS_BEARER_TOKEN_BEDROCK") && e.contains("AWS_ACCESS_KEY_ID"), "{e}");
    }
    let p = named_provider("bedrock").unwrap().builder(MODEL).aws_region("ap-south-1").api_key(Some("k".into()));
    let p = p.build().unwrap();
    assert_eq!(
        p.endpoint(),
        "https://bedrock-runtime.ap-south-1.amazonaws.com/model/eu.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
    );
    assert_eq!(reins::Model::identity(&p).provider.as_deref(), Some("aws.bedrock"));
}

/// `bedrock:` in a list of models: a Bedrock model whose service is unavailable (503 after its own retries) falls
/// over to the next, and the step is named and priced as the one that answered; a ValidationException does not
/// fall over.
#[tokio::test]
async fn a_bedrock_model_falls_over_on_503_and_not_on_a_validation_error() {
    let ok = Fake::start(None);
    for (fail, falls) in [("ServiceUnavailableException:503", true), ("ValidationException:400", false)] {
        let failing = Fake::start_with(None, Some(fail));
        let first = bedrock(&failing, true).build().unwrap();
        let second = named_provider("bedrock")
            .unwrap()
            .builder("us.anthropic.claude-haiku-4-5-20251001-v1:0")
            .base_url(&ok.url)
            .aws_credentials(credentials())
            .aws_region(REGION)
            .retry(no_retry())
            .build()
            .unwrap();
        let models: Vec<std::sync::Arc<dyn Model>> = vec![std::sync::Arc::new(first), std::sync::Arc::new(second)];
        let names = vec![format!("bedrock:{MODEL}"), "bedrock:us.anthropic.claude-haiku-4-5-20251001-v1:0".into()];
        let model = FallbackModel::new(models, Duration::from_secs(60)).named(names);
        let r = model.generate(&ask("hi"), &CancellationToken::new()).await;
        assert_eq!(failing.log().await.len(), 1, "{fail}: asked once (no retries here)");
        if falls {
            let r = r.unwrap();
            assert_eq!(r.text, "hello");
            let by = r.answered_by.expect("the second answered");
            assert!(format!("{by:?}").contains("claude-haiku-4-5"), "{by:?}");
        } else {
            assert!(matches!(r.unwrap_err(), ModelError::Rejected { status: 400, .. }), "{fail}");
        }
    }
}

/// The fake's contract check refuses what botocore's shapes refuse, so the checks above could fail: an unknown
/// field, a wrong type, a tool without its required input schema.
#[tokio::test]
async fn the_contract_check_refuses_bodies_botocore_refuses() {
    let fake = Fake::start(None);
    let bad = [
        ("bogusField", json!(1)),
        ("inferenceConfig", json!({"maxTokens": "many"})),
        ("toolConfig", json!({"tools": [{"toolSpec": {"name": "t"}}]})),
    ];
    for (field, value) in bad {
        let mut extra = serde_json::Map::new();
        extra.insert(field.into(), value);
        let p = bedrock(&fake, false).extra_body(extra).build().unwrap();
        let e = p.generate(&ask("hi"), &CancellationToken::new()).await.unwrap_err();
        assert!(
            matches!(&e, ModelError::Rejected { status: 400, message }
                if message.contains("ValidationException") && message.contains("does not match ConverseRequest")),
            "{field}: {e:?}"
        );
    }
    let log = fake.log().await;
    assert_eq!(log.len(), 3);
    assert!(log.iter().all(|e| e["contract"].as_array().is_some_and(|c| c.len() == 1)), "{log:?}");
}

/// Converse has no tool choice "none": the tools are left out, unless the conversation holds calls (the API then
/// wants its toolConfig); "required" and a named tool map to `any` and `tool`.
#[test]
fn tool_choice_maps_to_converse_and_none_leaves_the_tools_out() {
    use reins_providers::ToolChoice;
    let body = |choice: ToolChoice, req: &ModelRequest| {
        let b = named_provider("bedrock").unwrap().builder(MODEL).base_url("http://127.0.0.1:9").tool_choice(choice);
        b.api_key(Some("k".into())).build().unwrap().request_body(req)
    };
    assert!(body(ToolChoice::None, &ask("hi")).get("toolConfig").is_none());
    let call = reins::ToolCall::new("tooluse_1", "echo", json!({"text": "x"}));
    let with_calls = tool_turn(Message::assistant("", vec![call]), vec![Message::tool_result("tooluse_1", "x", false)]);
    let b = body(ToolChoice::None, &with_calls);
    assert_eq!(b["toolConfig"]["tools"][0]["toolSpec"]["name"], "echo");
    assert!(b["toolConfig"].get("toolChoice").is_none());
    assert_eq!(body(ToolChoice::Required, &ask("hi"))["toolConfig"]["toolChoice"], json!({"any": {}}));
    assert_eq!(
        body(ToolChoice::Tool("echo".into()), &ask("hi"))["toolConfig"]["toolChoice"],
        json!({"tool": {"name": "echo"}})
    );
    // The results come first in the user turn after the calls.
    assert_eq!(b["messages"][2]["content"][0]["toolResult"]["toolUseId"], "tooluse_1");
}

/// An event-stream frame of `kind` with a JSON payload, as Bedrock sends it.
fn frame(kind: &'static str, payload: Value) -> Vec<u8> {
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message as Frame};
    let headers = vec![
        Header::new(":message-type", HeaderValue::String("event".into())),
        Header::new(":event-type", HeaderValue::String(kind.into())),
    ];
    let mut out = Vec::new();
    aws_smithy_eventstream::frame::write_message_to(&Frame::new_from_parts(headers, payload.to_string()), &mut out)
        .unwrap();
    out
}

/// What the network sends, distrusted as for the other adapters: a redirect is never followed (the signed request
/// goes nowhere else), a stream that ends before `messageStop` or stalls is transient, an endless one is cut at the
/// response cap, and usage that is not a count is unknown, never zero.
#[tokio::test]
async fn untrusted_answers_are_refused_cut_or_retried() {
    use common::{Reply, Server, Step};
    let provider = |server: &Server, stream: bool| {
        named_provider("bedrock")
            .unwrap()
            .builder(MODEL)
            .base_url(server.url(""))
            .aws_credentials(credentials())
            .aws_region(REGION)
            .stream(stream)
            .retry(no_retry())
            .idle_timeout(Duration::from_millis(300))
            .max_output_tokens(4)
            .build()
            .unwrap()
    };
    let elsewhere = Server::start(vec![]).await;
    let redirect = Reply::json(307, "{}").header("location", &elsewhere.url("/model/x/converse"));
    let server = Server::start(vec![redirect]).await;
    let e = provider(&server, false).generate(&ask("hi"), &CancellationToken::new()).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::Rejected { status: 307, message } if message.contains("follows no redirect")),
        "{e:?}"
    );
    assert!(elsewhere.requests().is_empty());
    assert!(server.requests()[0].header("authorization").is_some_and(|a| a.starts_with("AWS4-HMAC-SHA256 ")));

    let start = frame("messageStart", json!({"role": "assistant"}));
    let delta = frame("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "word "}}));
    let eventstream = |steps| Reply { steps, ..Reply::body(200, "application/vnd.amazon.eventstream", Vec::new()) };
    let ended = eventstream(vec![Step::Bytes(start.clone()), Step::Bytes(delta.clone())]);
    let stalled = eventstream(vec![Step::Bytes(start.clone()), Step::Stall]);
    let endless = eventstream(std::iter::once(start).chain(std::iter::repeat_n(delta, 100)).map(Step::Bytes).collect());
    let server = Server::start(vec![ended, stalled, endless]).await;
    let p = provider(&server, true);
    for want in ["ended before the response was complete", "stalled"] {
        let e = p.generate(&ask("hi"), &CancellationToken::new()).await.unwrap_err();
        assert!(matches!(&e, ModelError::Failed(m) if m.contains(want)), "{want}: {e:?}");
    }
    let cut = p.generate(&ask("hi"), &CancellationToken::new()).await.unwrap();
    assert_eq!(cut.finish_reason, Some(FinishReason::Length));
    assert!(cut.text.starts_with("word word") && cut.text.len() < 500, "{}", cut.text);

    let bad_usage = json!({"output": {"message": {"role": "assistant", "content": [{"text": "hi"}]}},
        "stopReason": "end_turn", "usage": {"inputTokens": "100", "outputTokens": 1, "totalTokens": 1}});
    let server = Server::start(vec![Reply::json(200, bad_usage.to_string())]).await;
    let r = provider(&server, false).generate(&ask("hi"), &CancellationToken::new()).await.unwrap();
    assert_eq!((r.text.as_str(), r.usage), ("hi", None));
}
