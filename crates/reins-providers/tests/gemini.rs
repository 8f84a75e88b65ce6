//! The native Gemini adapter (issue 27, items 1 and 4) against a fake Gemini on 127.0.0.1 that behaves as the API
//! does: it takes the key in `x-goog-api-key` only, signs its turns (`thoughtSignature` on the first function call
//! of a turn and on text parts) and refuses with HTTP 400 in Gemini's error shape a request whose model turns do
//! not carry those signatures unchanged on the parts they came on, or whose function responses are not paired
//! with the calls by name and order in one user turn. A 10-turn tool loop with thinking runs through a Reins
//! agent, streamed and not; images go in and come from tools; finish reasons and usage (cached, thought) are
//! parsed and priced; a schema Gemini rejects is reported before any request. Every request and response body
//! of these exchanges is validated by the google-genai SDK's types (`tests/contract/check_gemini.py`).

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Captured, Reply, Server, Step, echo_registry, fixture, sdk_python};
use reins::{
    Agent, Conversation, FinishReason, FnTool, Image, Limits, Message, Model, ModelError, ModelRequest, Outcome,
    Registry, Status, ToolCall, ToolOutput, ToolSpec,
};
use reins_providers::{Api, Provider, ReasoningEffort, RetryPolicy, named_provider};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const KEY: &str = "AIza-test-key";
const MODEL: &str = "gemini-3-pro-preview";
/// Tool-loop turns before the final answer.
const TURNS: usize = 10;

fn no_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 0,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(10),
        max_retry_after: Duration::from_secs(1),
    }
}

fn gemini_error(status: u16, code: &str, message: &str) -> Reply {
    Reply::json(status, json!({"error": {"code": status, "message": message, "status": code}}).to_string())
}

/// A base64 signature for a turn's part (the API's are opaque base64 bytes): base64 letters in whole groups of
/// four, so that it decodes, which is what the SDK's types check.
fn signature(turn: usize, what: &str) -> String {
    let mut s = format!("Sig{turn}x{what}");
    while s.len() % 4 != 0 {
        s.push('A');
    }
    s
}

/// What a model turn holds, as the API judges a turn sent back: its text, the signatures on its text parts (at
/// the byte offset where each part began) and its calls (name, args, id, signature).
#[derive(Debug, Default, PartialEq)]
struct TurnShape {
    text: String,
    text_signatures: Vec<(usize, String)>,
    calls: Vec<(String, Value, Option<String>, Option<String>)>,
}

fn shape(parts: &[Value]) -> TurnShape {
    let mut t = TurnShape::default();
    for p in parts {
        let sig = p["thoughtSignature"].as_str().map(str::to_owned);
        if let Some(fc) = p.get("functionCall") {
            t.calls.push((
                fc["name"].as_str().unwrap_or("").to_owned(),
                fc["args"].clone(),
                fc["id"].as_str().map(str::to_owned),
                sig,
            ));
        } else if p["thought"] != true {
            if let Some(s) = sig {
                t.text_signatures.push((t.text.len(), s));
            }
            t.text.push_str(p["text"].as_str().unwrap_or(""));
        }
    }
    t
}

/// The fake Gemini: answers `TURNS` tool turns (thinking, sometimes text, one or two echo calls, sometimes with
/// ids) and then a final text, checking each request as the API would.
struct Fake {
    turns: usize,
    /// The parts of each model turn it answered, in order.
    issued: Mutex<Vec<Vec<Value>>>,
    /// Every response body it sent: (streamed, body).
    sent: Mutex<Vec<(bool, String)>>,
}

impl Fake {
    fn new(turns: usize) -> Arc<Self> {
        Arc::new(Fake { turns, issued: Mutex::new(Vec::new()), sent: Mutex::new(Vec::new()) })
    }

    fn answer(&self, req: &Captured) -> Reply {
        if req.header("x-goog-api-key") != Some(KEY) || req.header("authorization").is_some() {
            return gemini_error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.");
        }
        let stream = req.path.ends_with(":streamGenerateContent");
        if req.path != format!("/v1beta/models/{MODEL}:generateContent")
            && req.path != format!("/v1beta/models/{MODEL}:streamGenerateContent")
        {
            return gemini_error(404, "NOT_FOUND", &format!("no such method: {}", req.path));
        }
        let body: Value = match serde_json::from_slice(&req.body) {
            Ok(b) => b,
            Err(e) => return gemini_error(400, "INVALID_ARGUMENT", &format!("Invalid JSON payload received. {e}")),
        };
        if let Err(message) = self.check(&body) {
            return gemini_error(400, "INVALID_ARGUMENT", &message);
        }
        let turn = self.issued.lock().unwrap().len();
        let chunks = self.reply(turn);
        self.issued.lock().unwrap().push(chunks.iter().flat_map(candidate_parts).collect());
        if stream {
            let text: String = chunks.iter().map(|c| format!("data: {c}\r\n\r\n")).collect();
            self.sent.lock().unwrap().push((true, text.clone()));
            Reply::sse(text.as_bytes().chunks(97).map(|c| Step::Bytes(c.to_vec())).collect())
        } else {
            let whole = merge(&chunks);
            self.sent.lock().unwrap().push((false, whole.to_string()));
            Reply::json(200, whole.to_string())
        }
    }

    /// The API's checks of a request: every model turn it answered comes back with its signatures unchanged on
    /// the parts they came on, and each batch of calls is answered in the next user turn, by name and order.
    fn check(&self, body: &Value) -> Result<(), String> {
        let issued = self.issued.lock().unwrap();
        let contents = body["contents"].as_array().ok_or("contents: required")?;
        let models: Vec<(usize, &Value)> = contents.iter().enumerate().filter(|(_, c)| c["role"] == "model").collect();
        if models.len() != issued.len() {
            return Err(format!("{} model turns sent back, {} answered", models.len(), issued.len()));
        }
        for ((at, content), parts) in models.iter().zip(issued.iter()) {
            let (got, want) = (shape(content["parts"].as_array().ok_or("parts")?), shape(parts));
            if got.calls.iter().map(|c| &c.3).ne(want.calls.iter().map(|c| &c.3)) {
                return Err(format!(
                    "Function call is missing a thought_signature in functionCall parts. This is required for tools \
                     to work correctly, and missing thought_signature may lead to degraded model performance. \
                     Additional data, function call `default_api:echo` , position {}. Please refer to \
                     https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
                    at + 1
                ));
            }
            if got != want {
                return Err(format!("Corrupted thought signature or content in turn {}: {got:?} != {want:?}", at + 1));
            }
            if want.calls.is_empty() {
                continue;
            }
            let answer = contents.get(at + 1).filter(|c| c["role"] == "user").ok_or("function call not answered")?;
            let responses: Vec<&Value> =
                answer["parts"].as_array().into_iter().flatten().filter_map(|p| p.get("functionResponse")).collect();
            if responses.len() != want.calls.len() {
                return Err("Please ensure that the number of function response parts is equal to the number of \
                            function call parts of the function call turn."
                    .into());
            }
            for (r, (name, _, id, _)) in responses.iter().zip(&want.calls) {
                if r["name"] != name.as_str() || r["id"].as_str() != id.as_deref() {
                    return Err(format!("function response {r} does not answer the call {name} ({id:?}) in order"));
                }
                if !(r["response"]["output"].is_string() || r["response"]["error"].is_string()) {
                    return Err(format!("function response {r} has no output"));
                }
            }
        }
        Ok(())
    }

    /// The chunks of turn `n` (a whole response is them merged).
    fn reply(&self, n: usize) -> Vec<Value> {
        let usage = json!({"promptTokenCount": 1000 + 100 * n, "cachedContentTokenCount": 90 * n,
                           "candidatesTokenCount": 20, "thoughtsTokenCount": 30, "totalTokenCount": 1050 + 100 * n});
        let thought = json!({"text": format!("Turn {n}: think it over."), "thought": true});
        if n >= self.turns {
            return vec![
                chunk(vec![thought], None, None),
                chunk(vec![json!({"text": "done after "})], None, None),
                chunk(vec![json!({"text": format!("{n} turns")})], None, None),
                chunk(vec![json!({"text": "", "thoughtSignature": signature(n, "text")})], Some("STOP"), Some(usage)),
            ];
        }
        let call = |j: usize| {
            let mut fc = json!({"name": "echo", "args": {"text": format!("turn {n} call {j}")}});
            if n % 4 == 2 {
                fc["id"] = format!("fc-{n}-{j}").into();
            }
            let mut part = json!({"functionCall": fc});
            // Parallel calls: only the first carries the turn's signature.
            if j == 0 {
                part["thoughtSignature"] = signature(n, "call").into();
            }
            part
        };
        let mut chunks = vec![chunk(vec![thought], None, None)];
        if n % 3 == 0 {
            let sig = signature(n, "text");
            chunks.push(chunk(vec![json!({"text": "Calling ", "thoughtSignature": sig})], None, None));
            chunks.push(chunk(vec![json!({"text": "echo."})], None, None));
        }
        let calls = if n % 2 == 1 { vec![call(0), call(1)] } else { vec![call(0)] };
        chunks.push(chunk(calls, Some("STOP"), Some(usage)));
        chunks
    }
}

fn candidate_parts(c: &Value) -> Vec<Value> {
    c["candidates"][0]["content"]["parts"].as_array().cloned().unwrap_or_default()
}

fn chunk(parts: Vec<Value>, finish: Option<&str>, usage: Option<Value>) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(f) = finish {
        candidate["finishReason"] = f.into();
    }
    let mut c = json!({"candidates": [candidate], "modelVersion": MODEL, "responseId": "resp-1"});
    if let Some(u) = usage {
        c["usageMetadata"] = u;
    }
    c
}

/// A whole response: the chunks' parts in one candidate, adjacent plain text parts joined as the API does.
fn merge(chunks: &[Value]) -> Value {
    let mut parts: Vec<Value> = Vec::new();
    for p in chunks.iter().flat_map(candidate_parts) {
        let joinable =
            |q: &Value| q.get("text").is_some() && q["thought"] != true && q.get("thoughtSignature").is_none();
        match parts.last_mut() {
            Some(last) if last.get("text").is_some() && last["thought"] != true && joinable(&p) => {
                let joined = format!("{}{}", last["text"].as_str().unwrap_or(""), p["text"].as_str().unwrap_or(""));
                last["text"] = joined.into();
            }
            _ => parts.push(p),
        }
    }
    let last = chunks.last().cloned().unwrap_or_default();
    let finish = last["candidates"][0]["finishReason"].as_str();
    chunk(parts, finish, last.get("usageMetadata").cloned())
}

async fn fake_server(fake: &Arc<Fake>) -> Server {
    let f = fake.clone();
    Server::answering(move |r| f.answer(r)).await
}

fn gemini(server: &Server, stream: bool) -> reins_providers::ProviderBuilder {
    named_provider("gemini")
        .unwrap()
        .builder(MODEL)
        .base_url(server.url(""))
        .api_key(Some(KEY.into()))
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

/// Writes what a fake exchanged (request and response bodies) under `dir/<name>-N.*` for the contract check.
fn dump(dir: &Path, name: &str, requests: &[Captured], sent: &[(bool, String)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (n, r) in requests.iter().enumerate() {
        std::fs::write(dir.join(format!("{name}-{n:02}.request.json")), &r.body).unwrap();
    }
    for (n, (streamed, body)) in sent.iter().enumerate() {
        let ext = if *streamed { "sse" } else { "json" };
        std::fs::write(dir.join(format!("{name}-{n:02}.response.{ext}")), body).unwrap();
    }
}

/// Runs the ten-turn loop; returns the outcome, the server and the fake.
async fn ten_turns(stream: bool, effort: bool) -> (Outcome, Server, Arc<Fake>) {
    let fake = Fake::new(TURNS);
    let server = fake_server(&fake).await;
    let b = gemini(&server, stream);
    let b = if effort { b.reasoning_effort(ReasoningEffort::High) } else { b.thinking_budget(4096) };
    let o = agent(b.build().unwrap(), echo_registry()).run("echo ten times", CancellationToken::new()).await;
    (o, server, fake)
}

#[tokio::test]
async fn a_ten_turn_tool_loop_with_thinking_sends_every_signature_back_unchanged() {
    for stream in [true, false] {
        let (o, server, fake) = ten_turns(stream, !stream).await;
        assert_eq!(o.status, Status::Completed, "stream {stream}: {:?}", o.error);
        assert_eq!(o.answer.as_deref(), Some("done after 10 turns"));
        let requests = server.requests();
        assert_eq!(requests.len(), TURNS + 1, "no request was refused and retried");
        assert_eq!(o.tool_calls, 15, "ten turns, five of them with two calls");
        let first = requests[0].json();
        let thinking = &first["generationConfig"]["thinkingConfig"];
        if stream {
            assert_eq!(thinking, &json!({"thinkingBudget": 4096, "includeThoughts": true}));
        } else {
            assert_eq!(thinking, &json!({"thinkingLevel": "HIGH", "includeThoughts": true}));
        }
        assert_eq!(first["contents"], json!([{"role": "user", "parts": [{"text": "echo ten times"}]}]));
        let decl = &first["tools"][0]["functionDeclarations"][0];
        assert_eq!(decl["name"], "echo");
        assert_eq!(decl["parametersJsonSchema"]["properties"]["text"]["type"], "string");
        // The last request holds every model turn, each with the signatures it was given.
        let last = requests[TURNS].json();
        let models: Vec<&Value> =
            last["contents"].as_array().unwrap().iter().filter(|c| c["role"] == "model").collect();
        assert_eq!(models.len(), TURNS);
        let issued = fake.issued.lock().unwrap();
        for (n, m) in models.iter().enumerate() {
            assert_eq!(shape(m["parts"].as_array().unwrap()), shape(&issued[n]), "turn {n}");
        }
        // Ids Gemini gave go back on the call and its response; ids Reins made never leave.
        let text = String::from_utf8_lossy(&requests[TURNS].body).into_owned();
        assert!(text.contains("\"id\":\"fc-2-0\"") && text.contains("\"id\":\"fc-6-0\""), "{text}");
        assert!(!text.contains(reins_providers::gemini::GENERATED_ID_PREFIX), "{text}");
        // The transcript keeps them as reasoning items of the gemini API, with the thought summaries shown.
        let items: Vec<&reins::Reasoning> = o.messages.iter().flat_map(Message::reasoning).collect();
        assert_eq!(items.len(), TURNS + 4 + 1, "a call's signature each turn, four text ones, the final one");
        assert!(items.iter().all(|r| r.api == "gemini"));
        let calls: Vec<&ToolCall> = o.messages.iter().flat_map(Message::tool_calls).collect();
        let mut ids: Vec<&str> = calls.iter().map(|c| &*c.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 15, "every call has an id of its own");
        // Usage: input with the cached part apart, output with the thoughts, priced at the model's list price.
        assert_eq!(o.usage.input_tokens, (0..=TURNS as u64).map(|n| 1000 + 100 * n).sum::<u64>());
        assert_eq!(o.usage.cached_input_tokens, (0..=TURNS as u64).map(|n| 90 * n).sum::<u64>());
        assert_eq!((o.usage.output_tokens, o.usage.reasoning_tokens), (50 * 11, 30 * 11));
        let price = reins_providers::model_info(MODEL).unwrap().price;
        let want = price.cost_of_totals(&o.usage);
        assert!((o.cost_usd.unwrap() - want).abs() < 1e-12 && want > 0.0, "{:?} vs {want}", o.cost_usd);
        let dir = std::env::temp_dir().join(format!("reins-gemini-loop-{}-{stream}", std::process::id()));
        dump(&dir, if stream { "loop-stream" } else { "loop-plain" }, &requests, &fake.sent.lock().unwrap());
        contract_check(&dir);
    }
}

/// The fake is as strict as the API: a signature dropped, changed, or moved to another part is refused with HTTP
/// 400 in Gemini's error shape (so the loop above could fail), as are results out of order.
#[tokio::test]
async fn the_fake_refuses_a_tool_turn_whose_signature_did_not_come_back_unchanged() {
    let (o, server, fake) = ten_turns(false, false).await;
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    // Replay the conversation up to the results of turn 3 (a text signature and one call) to a fresh fake that
    // has answered the same turns.
    let fifth_turn = o
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m, Message::Assistant { .. }))
        .nth(4)
        .map(|(i, _)| i)
        .unwrap();
    let upto = o.messages[..fifth_turn].to_vec();
    let replay = Fake::new(TURNS);
    replay.issued.lock().unwrap().extend(fake.issued.lock().unwrap()[..4].iter().cloned());
    let replay_server = fake_server(&replay).await;
    let provider = gemini(&replay_server, false).build().unwrap();
    let ask = |messages: Vec<Message>| {
        let (provider, replay) = (provider.clone(), replay.clone());
        async move {
            let req = ModelRequest {
                messages: Conversation::from_messages(messages),
                tools: echo_registry().specs().clone(),
                ..ModelRequest::default()
            };
            let answer = provider.generate(&req, &CancellationToken::new()).await;
            // The fake forgets the turn it answered: each case asks at the same point of the loop.
            replay.issued.lock().unwrap().truncate(4);
            answer
        }
    };
    let turn3 = upto.iter().rposition(|m| matches!(m, Message::Assistant { .. })).unwrap();
    let edit = |f: &dyn Fn(&mut Message)| {
        let mut m = upto.clone();
        f(&mut m[turn3]);
        m
    };
    let reasoning = |f: &dyn Fn(&mut Vec<reins::Reasoning>)| {
        edit(&|m| {
            if let Message::Assistant { reasoning, .. } = m {
                f(reasoning)
            }
        })
    };
    let is_call = |r: &reins::Reasoning| r.item["part"] == "functionCall";
    let cases: Vec<(&str, Vec<Message>)> = vec![
        ("the call's signature dropped", reasoning(&|r| r.retain(|i| !is_call(i)))),
        ("every signature dropped", reasoning(&|r| r.clear())),
        (
            "a changed signature",
            reasoning(&|r| {
                r.iter_mut().filter(|i| is_call(i)).for_each(|i| i.item["thoughtSignature"] = "AAAA".into())
            }),
        ),
        ("moved to another part", reasoning(&|r| r.iter_mut().for_each(|i| i.item["part"] = "text".into()))),
        ("a text signature dropped", reasoning(&|r| r.retain(is_call))),
    ];
    assert!(ask(upto.clone()).await.is_ok(), "unchanged, it is accepted");
    // Turn 3's two results recorded in the other order still go out in the order of the calls.
    let mut swapped = upto.clone();
    let n = swapped.len();
    assert!(matches!((&swapped[n - 2], &swapped[n - 1]), (Message::ToolResult(_), Message::ToolResult(_))));
    swapped.swap(n - 2, n - 1);
    assert!(ask(swapped).await.is_ok(), "results are paired by the order of the calls");
    for (what, messages) in cases {
        match ask(messages).await {
            Err(ModelError::Rejected { status: 400, message }) => {
                assert!(
                    message.contains("thought_signature") || message.contains("thought signature"),
                    "{what}: {message}"
                )
            }
            other => panic!("{what}: expected a refusal, got {other:?}"),
        }
    }
    drop(server);
}

/// A real 1×1 PNG.
const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

#[tokio::test]
async fn images_go_inline_from_the_prompt_and_from_tools() {
    let png = Image::from_base64(PNG_1X1).unwrap();
    let registry = || {
        let shot = png.clone();
        let screenshot = FnTool::new(
            "screenshot",
            "Takes a screenshot.",
            json!({"type": "object", "properties": {}}),
            move |_, _| {
                let shot = shot.clone();
                async move { Ok(ToolOutput::Parts { text: "the screen".into(), images: vec![shot] }) }
            },
        );
        Registry::builder().tool(screenshot).build().unwrap()
    };
    let call = chunk(
        vec![json!({"functionCall": {"name": "screenshot", "args": {}}, "thoughtSignature": signature(0, "c")})],
        Some("STOP"),
        None,
    );
    let done = chunk(vec![json!({"text": "A red dot."})], Some("STOP"), None);
    for stream in [false, true] {
        let replies = [&call, &done].map(|c| {
            if stream { Reply::sse_text(&format!("data: {c}\n\n"), 64) } else { Reply::json(200, c.to_string()) }
        });
        let server = Server::start(replies.to_vec()).await;
        let o = agent(gemini(&server, stream).build().unwrap(), registry())
            .run_with_images("What is on screen?", vec![png.clone()], CancellationToken::new())
            .await;
        assert_eq!(o.status, Status::Completed, "{:?}", o.error);
        let requests = server.requests();
        let body = requests[1].json();
        let inline = json!({"inlineData": {"mimeType": "image/png", "data": PNG_1X1}});
        assert_eq!(body["contents"][0]["parts"], json!([{"text": "What is on screen?"}, inline]));
        let response = &body["contents"][2]["parts"][0]["functionResponse"];
        assert_eq!(response["name"], "screenshot");
        assert!(response["response"]["output"].as_str().unwrap().contains("the screen"), "{response}");
        assert_eq!(response["parts"], json!([inline]));
        let dir = std::env::temp_dir().join(format!("reins-gemini-images-{}-{stream}", std::process::id()));
        dump(&dir, "images", &requests, &[]);
        contract_check(&dir);
    }
}

/// Finish reasons map to statuses (length → truncated, safety and a blocked prompt → refused) or to failures (a
/// malformed function call is retried); usage with cached and thought tokens is parsed and priced.
#[tokio::test]
async fn finish_reasons_and_usage_are_parsed_and_priced() {
    let run = |reply: Reply| async move {
        let server = Server::start(vec![reply]).await;
        let o =
            agent(gemini(&server, false).build().unwrap(), echo_registry()).run("hi", CancellationToken::new()).await;
        (o, server)
    };
    let (o, _s) = run(Reply::json(200, fixture("gemini/max_tokens.json"))).await;
    assert_eq!((o.status, o.answer.as_deref()), (Status::Truncated, Some("A long answer that")));
    assert_eq!((o.usage.output_tokens, o.usage.reasoning_tokens), (100, 96));
    let (o, _s) = run(Reply::json(200, fixture("gemini/safety.json"))).await;
    assert_eq!(o.status, Status::Refused, "{:?}", o.error);
    assert_eq!(o.finish_reason, Some(FinishReason::ContentFilter));
    let (o, _s) = run(Reply::json(200, fixture("gemini/blocked.json"))).await;
    assert_eq!(o.status, Status::Refused, "{:?}", o.error);
    // The fixture's usage, priced: 2,100 prompt tokens of which 2,048 cached, 22 + 8 thought tokens out.
    for (stream, reply) in [
        (false, Reply::json(200, fixture("gemini/text.json"))),
        (true, Reply::sse_text(&fixture("gemini/text.sse"), 50)),
    ] {
        let server = Server::start(vec![reply]).await;
        let p = named_provider("gemini")
            .unwrap()
            .builder("gemini-2.5-flash")
            .base_url(server.url(""))
            .api_key(Some(KEY.into()))
            .stream(stream)
            .build()
            .unwrap();
        let o = agent(p, echo_registry()).run("hi", CancellationToken::new()).await;
        assert_eq!(o.answer.as_deref(), Some("Hello! How can I help?"), "stream {stream}");
        let u = &o.usage;
        assert_eq!((u.input_tokens, u.cached_input_tokens, u.output_tokens, u.reasoning_tokens), (2100, 2048, 30, 8));
        // gemini-2.5-flash: $0.30 in, $0.03 cached, $2.50 out (thinking included) per million.
        let want = (52.0 * 0.30 + 2048.0 * 0.03 + 30.0 * 2.50) / 1e6;
        assert!((o.cost_usd.unwrap() - want).abs() < 1e-12, "{:?} vs {want}", o.cost_usd);
        let thought = o.messages.iter().flat_map(Message::reasoning).count();
        assert_eq!(thought, 1, "the text's signature is kept");
    }
    // A prompt over the window is a context overflow (the engine can compact), not a plain refusal.
    let too_long = "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).";
    let server = Server::start(vec![gemini_error(400, "INVALID_ARGUMENT", too_long)]).await;
    let e = gemini(&server, false).build().unwrap().generate(&ModelRequest::default(), &CancellationToken::new()).await;
    assert!(matches!(&e, Err(ModelError::ContextOverflow(m)) if m.contains("1048576")), "{e:?}");
    // A malformed function call is retried, then the answer stands.
    let malformed = chunk(vec![], Some("MALFORMED_FUNCTION_CALL"), None).to_string();
    let server = Server::start(vec![Reply::json(200, malformed), Reply::json(200, fixture("gemini/text.json"))]).await;
    let p = gemini(&server, false).retry(RetryPolicy { max_retries: 1, ..no_retry() }).build().unwrap();
    let o = agent(p, echo_registry()).run("hi", CancellationToken::new()).await;
    assert_eq!((o.status, server.requests().len()), (Status::Completed, 2), "{:?}", o.error);
}

/// A schema Gemini would refuse is reported, naming the tool, before any request; one it can take once adapted
/// goes out adapted.
#[tokio::test]
async fn a_schema_gemini_rejects_is_reported_before_any_request() {
    let server = Server::start(vec![]).await;
    let p = gemini(&server, false).build().unwrap();
    let tool =
        |name: &str, schema: Value| ToolSpec { name: name.into(), description: "d".into(), input_schema: schema };
    let recursive = json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/Node"}},
        "$defs": {"Node": {"type": "object",
                           "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}});
    for (spec, says) in [
        (tool("mcp__fs__tree", recursive), "#/$defs/Node"),
        (
            tool("remote", json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}})),
            "outside the schema",
        ),
        (tool("7zip", json!({"type": "object"})), "starts with a letter"),
    ] {
        let req = ModelRequest {
            messages: Conversation::from_messages(vec![Message::user("hi")]),
            tools: Arc::from(vec![spec.clone()]),
            ..ModelRequest::default()
        };
        match p.generate(&req, &CancellationToken::new()).await {
            Err(ModelError::Rejected { message, .. }) => {
                assert!(message.contains(&format!("{:?}", spec.name)) && message.contains(says), "{message}");
                assert!(message.contains("before any request"), "{message}");
            }
            other => panic!("{}: expected a refusal, got {other:?}", spec.name),
        }
    }
    assert!(server.requests().is_empty(), "nothing was sent");
    // `$defs` references and `$schema`, which Gemini refuses as they are, go out inlined and removed.
    let server = Server::start(vec![Reply::json(200, fixture("gemini/text.json"))]).await;
    let p = gemini(&server, false).build().unwrap();
    let defs = json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
        "properties": {"who": {"$ref": "#/$defs/Person", "description": "the person"}},
        "$defs": {"Person": {"type": "object", "properties": {"name": {"type": "string"}}}}});
    let req = ModelRequest {
        messages: Conversation::from_messages(vec![Message::user("hi")]),
        tools: Arc::from(vec![tool("greet", defs)]),
        ..ModelRequest::default()
    };
    p.generate(&req, &CancellationToken::new()).await.unwrap();
    let body = server.requests()[0].json();
    assert_eq!(
        body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"],
        json!({"type": "object", "properties": {"who": {"type": "object", "properties": {"name": {"type": "string"}},
                                                        "description": "the person"}}})
    );
}

/// The key travels in `x-goog-api-key`, never in the URL; streaming asks for `alt=sse`; a budget and an effort
/// together are refused when the provider is built, as is an effort for a Gemini 2 model.
#[tokio::test]
async fn the_key_is_a_header_and_thinking_takes_a_budget_or_a_level() {
    let server = Server::start(vec![Reply::sse_text(&fixture("gemini/text.sse"), 4096)]).await;
    let p = gemini(&server, true).build().unwrap();
    assert_eq!(p.endpoint(), format!("{}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse", server.url("")));
    p.generate(
        &ModelRequest { messages: Conversation::from_messages(vec![Message::user("hi")]), ..ModelRequest::default() },
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = &server.requests()[0];
    assert_eq!(r.header("x-goog-api-key"), Some(KEY));
    assert!(!r.path.contains(KEY));
    let both = gemini(&server, false).thinking_budget(2048).reasoning_effort(ReasoningEffort::Low).build().unwrap_err();
    assert!(both.to_string().contains("never both"), "{both}");
    let two = named_provider("gemini")
        .unwrap()
        .builder("gemini-2.5-pro")
        .api_key(Some(KEY.into()))
        .reasoning_effort(ReasoningEffort::Low)
        .build()
        .unwrap_err();
    assert!(two.to_string().contains("--thinking-budget"), "{two}");
    let e = Provider::builder(Api::Gemini, MODEL).api_key(None).build().unwrap_err();
    assert!(e.to_string().contains("GEMINI_API_KEY"), "{e}");
    // A versioned base URL keeps its version; the model is one escaped path segment.
    let p = Provider::builder(Api::Gemini, "models/gemini-2.5-flash")
        .base_url("http://127.0.0.1:9/v1")
        .stream(false)
        .build()
        .unwrap();
    assert_eq!(p.endpoint(), "http://127.0.0.1:9/v1/models/gemini-2.5-flash:generateContent");
}

/// Runs `tests/contract/check_gemini.py` over `dir` (and the Gemini fixtures): every file must pass.
fn contract_check(dir: &Path) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests");
    let out = std::process::Command::new(sdk_python())
        .arg(root.join("contract/check_gemini.py"))
        .arg(dir)
        .output()
        .expect("run the contract check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let _ = std::fs::remove_dir_all(dir);
    assert!(out.status.success(), "the contract check failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.lines().any(|l| l.starts_with("ok   request")), "{stdout}");
}

/// The fixtures pass the SDK's types, and the check refuses what they refuse (so the checks above could fail).
#[test]
fn the_fixtures_pass_and_the_contract_check_refuses_bodies_the_sdk_refuses() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests");
    let run = |dir: &Path| {
        let out = std::process::Command::new(sdk_python())
            .arg(root.join("contract/check_gemini.py"))
            .arg(dir)
            .output()
            .expect("run the contract check");
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, stdout) = run(&root.join("fixtures/gemini"));
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.starts_with("google-genai 3.6.1\n"), "the pinned SDK: {stdout}");
    assert!(stdout.contains("ok   stream text.sse (4 events)"), "{stdout}");
    let dir = std::env::temp_dir().join(format!("reins-gemini-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let user = json!({"role": "user", "parts": [{"text": "x"}]});
    let bad = [
        json!({"contents": [user], "generationConfig": {"thinkingConfig": {"thinkingLevel": "HUGE"}}}),
        json!({"contents": [{"role": "user", "parts": [{"text": "x", "thoughtSignature": "not base64!"}]}]}),
        json!({"contents": [user], "tools": [{"functionDeclarations": [{"name": "f", "parameters_json_schem": {}}]}]}),
        json!({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}),
        json!({"contents": [{"role": "user",
                             "parts": [{"text": "x", "inlineData": {"mimeType": "image/png", "data": ""}}]}]}),
    ];
    for (n, b) in bad.iter().enumerate() {
        std::fs::write(dir.join(format!("bad{n}.request.json")), b.to_string()).unwrap();
    }
    let (code, stdout) = run(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.trim_end().ends_with("0 passed, 5 failed"), "{stdout}");
}
