//! Reasoning kept across turns (issue 11), against local servers that behave as the APIs do: an Anthropic
//! server that signs its thinking and refuses (400) a turn whose thinking blocks did not come back unchanged,
//! in order, with their signatures and redacted data; a Responses server that refuses a request without
//! `include`/`store: false` or whose reasoning items did not come back verbatim before their turn's calls.
//! Reasoning of one API never reaches another; a compaction works with reasoning in the transcript.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Captured, Reply, Server, echo_registry};
use reins::{
    Agent, ContextConfig, ContextStrategy, Conversation, Limits, Message, Model, ModelError, ModelRequest, Outcome,
    RunState, Status,
};
use reins_providers::{Api, Provider, ReasoningEffort, RetryPolicy};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

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

fn agent(model: Provider, context: ContextConfig) -> Agent {
    Agent::builder(model)
        .registry(echo_registry())
        .limits(Limits { max_steps: Some(100), ..Limits::default() })
        .context(context)
        .build()
        .unwrap()
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn refuse(message: String) -> Reply {
    Reply::json(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}}).to_string(),
    )
}

fn ev(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

// ---------------------------------------------------------------------------------------------------------
// Anthropic

/// An Anthropic Messages server with extended thinking, as strict as the real API about thinking blocks:
/// each one it sent (signed, or redacted) must come back unchanged, in order, at the start of its turn; a
/// block it did not send (another signature, changed text or data) is refused; the last assistant turn of a
/// tool loop must start with thinking. Requests without tools are summary calls: thinking, then a summary.
struct Thinker {
    turns: usize,
    stream: bool,
    /// The thinking blocks of each turn it answered, by the turn's key (its tool_use id, or its text).
    issued: Mutex<HashMap<String, Vec<Value>>>,
    /// Every block it issued, as JSON text.
    known: Mutex<HashSet<String>>,
    answered: AtomicUsize,
}

fn is_thinking(b: &Value) -> bool {
    matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking"))
}

fn turn_key(content: &[Value]) -> String {
    content
        .iter()
        .find(|b| b["type"] == "tool_use")
        .and_then(|b| b["id"].as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| content.iter().filter_map(|b| b["text"].as_str()).collect())
}

impl Thinker {
    fn new(turns: usize, stream: bool) -> Arc<Self> {
        Arc::new(Thinker {
            turns,
            stream,
            issued: Mutex::default(),
            known: Mutex::default(),
            answered: AtomicUsize::new(0),
        })
    }

    fn answer(&self, req: &Captured) -> Reply {
        match self.check(req) {
            Err(message) => refuse(message),
            Ok(body) => self.reply(&body),
        }
    }

    fn check(&self, req: &Captured) -> Result<Value, String> {
        let body: Value = serde_json::from_slice(&req.body).map_err(|e| format!("invalid JSON: {e}"))?;
        let budget = match (&body["thinking"]["type"], body["thinking"]["budget_tokens"].as_u64()) {
            (Value::String(t), Some(n)) if t == "enabled" => n,
            _ => return Err("thinking: expected {\"type\": \"enabled\", \"budget_tokens\": N}".into()),
        };
        if body["max_tokens"].as_u64().unwrap_or(0) <= budget {
            return Err("`max_tokens` must be greater than `thinking.budget_tokens`".into());
        }
        if body.get("temperature").is_some() {
            return Err("`temperature` may only be set to 1 when thinking is enabled".into());
        }
        let msgs = body["messages"].as_array().ok_or("messages: Field required")?;
        let issued = self.issued.lock().unwrap();
        let known = self.known.lock().unwrap();
        let mut last_lead = None;
        for (i, m) in msgs.iter().enumerate() {
            if m["role"] != "assistant" {
                continue;
            }
            let content = m["content"].as_array().cloned().unwrap_or_default();
            let lead: Vec<Value> = content.iter().take_while(|b| is_thinking(b)).cloned().collect();
            if content[lead.len()..].iter().any(is_thinking) {
                return Err(format!("messages.{i}: thinking blocks must precede the other blocks of a turn"));
            }
            for (j, b) in lead.iter().enumerate() {
                if !known.contains(&b.to_string()) {
                    return Err(format!(
                        "messages.{i}.content.{j}: Invalid `signature` in `{}` block",
                        b["type"].as_str().unwrap_or("")
                    ));
                }
            }
            if let Some(sent) = issued.get(&turn_key(&content)) {
                if &lead != sent {
                    return Err(format!(
                        "messages.{i}: the thinking blocks of an assistant turn must be passed back unchanged and in order"
                    ));
                }
            }
            last_lead = Some((i, lead.is_empty(), content.first().and_then(|b| b["type"].as_str()).map(str::to_owned)));
        }
        let in_tool_loop = msgs.last().is_some_and(|m| {
            m["role"] == "user" && m["content"].as_array().is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
        });
        if let (true, Some((i, true, first))) = (in_tool_loop, last_lead) {
            return Err(format!(
                "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block",
                first.unwrap_or_default()
            ));
        }
        Ok(body)
    }

    fn thinking(&self, text: String) -> Value {
        // The signature: a keyed digest of the text, as opaque to the client as the real one.
        let signature = format!("EqQBCkgIARABGAIiQ{:016x}ErUB", fnv(&format!("secret/{text}")));
        json!({"type": "thinking", "thinking": text, "signature": signature})
    }

    fn reply(&self, body: &Value) -> Reply {
        let summary = body.get("tools").is_none();
        let n = if summary { usize::MAX } else { self.answered.fetch_add(1, Ordering::SeqCst) };
        let mut blocks = Vec::new();
        let stop;
        if summary {
            blocks.push(self.thinking("Summarize the turns.".into()));
            blocks.push(json!({"type": "text", "text": "SUMMARY: echoed so far; keep going"}));
            stop = "end_turn";
        } else {
            blocks.push(self.thinking(format!("Turn {n}: the task wants the echo; I call it.")));
            if n % 3 == 1 {
                let data = format!("EmwKAhgBEgy{n:04}{:012x}+/=", fnv(&format!("redacted/{n}")));
                blocks.push(json!({"type": "redacted_thinking", "data": data}));
            }
            if n % 2 == 0 {
                blocks.push(self.thinking(format!("Turn {n}, a second thought.")));
            }
            if n < self.turns {
                if n % 4 == 0 {
                    blocks.push(json!({"type": "text", "text": format!("Calling echo ({n}).")}));
                }
                blocks.push(json!({"type": "tool_use", "id": format!("toolu_{n:02}"), "name": "echo",
                                   "input": {"text": format!("t{n}")}}));
                stop = "tool_use";
            } else {
                blocks.push(json!({"type": "text", "text": format!("done after {n} turns")}));
                stop = "end_turn";
            }
        }
        let lead: Vec<Value> = blocks.iter().take_while(|b| is_thinking(b)).cloned().collect();
        {
            let mut known = self.known.lock().unwrap();
            known.extend(lead.iter().map(Value::to_string));
            self.issued.lock().unwrap().insert(turn_key(&blocks), lead);
        }
        if self.stream { Reply::sse_text(&anthropic_sse(&blocks, stop), 37) } else { anthropic_whole(blocks, stop) }
    }
}

fn anthropic_whole(blocks: Vec<Value>, stop: &str) -> Reply {
    Reply::json(
        200,
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
               "content": blocks, "stop_reason": stop, "stop_sequence": null,
               "usage": {"input_tokens": 20, "output_tokens": 30}})
        .to_string(),
    )
}

/// The blocks as the API streams them: thinking in deltas then its `signature_delta`, redacted thinking whole
/// in its start event, text and tool input in deltas.
fn anthropic_sse(blocks: &[Value], stop: &str) -> String {
    let mut s = ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
               "model": "claude-sonnet-4-5", "content": [], "stop_reason": null,
               "usage": {"input_tokens": 20, "output_tokens": 1}}}),
    );
    for (index, b) in blocks.iter().enumerate() {
        let delta =
            |d: Value| ev("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": d}));
        let start = |c: Value| {
            ev("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": c}))
        };
        match b["type"].as_str().unwrap() {
            "thinking" => {
                let text = b["thinking"].as_str().unwrap();
                let (a, z) = text.split_at(text.len() / 2);
                s += &start(json!({"type": "thinking", "thinking": "", "signature": ""}));
                s += &delta(json!({"type": "thinking_delta", "thinking": a}));
                s += &delta(json!({"type": "thinking_delta", "thinking": z}));
                s += &delta(json!({"type": "signature_delta", "signature": b["signature"]}));
            }
            "redacted_thinking" => s += &start(b.clone()),
            "text" => {
                s += &start(json!({"type": "text", "text": ""}));
                s += &delta(json!({"type": "text_delta", "text": b["text"]}));
            }
            "tool_use" => {
                s += &start(json!({"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}));
                let input = b["input"].to_string();
                let (a, z) = input.split_at(input.len() / 2);
                s += &delta(json!({"type": "input_json_delta", "partial_json": a}));
                s += &delta(json!({"type": "input_json_delta", "partial_json": z}));
            }
            other => panic!("no stream form for {other}"),
        }
        s += &ev("content_block_stop", json!({"type": "content_block_stop", "index": index}));
    }
    s += &ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 30}}),
    );
    s + &ev("message_stop", json!({"type": "message_stop"}))
}

async fn thinker_server(thinker: &Arc<Thinker>) -> Server {
    let t = thinker.clone();
    Server::answering(move |r| t.answer(r)).await
}

fn anthropic(server: &Server, stream: bool) -> Provider {
    Provider::builder(Api::Anthropic, "claude-sonnet-4-5")
        .base_url(server.url(""))
        .api_key(Some("sk-ant-test".into()))
        .thinking_budget(2048)
        .max_output_tokens(4096)
        .stream(stream)
        .retry(no_retry())
        .build()
        .unwrap()
}

/// The reasoning items of the outcome's assistant turns, by turn.
fn reasoning_of(o: &Outcome) -> Vec<&[reins::Reasoning]> {
    o.messages.iter().filter(|m| m.role() == "assistant").map(Message::reasoning).collect()
}

#[tokio::test]
async fn anthropic_signed_thinking_goes_back_unchanged_over_ten_turns() {
    for stream in [true, false] {
        let thinker = Thinker::new(TURNS, stream);
        let server = thinker_server(&thinker).await;
        let o = agent(anthropic(&server, stream), ContextConfig::default())
            .run("echo ten times", CancellationToken::new())
            .await;
        assert_eq!(o.status, Status::Completed, "stream {stream}: {:?}", o.error);
        assert_eq!(o.answer.as_deref(), Some("done after 10 turns"));
        let requests = server.requests();
        assert_eq!(requests.len(), TURNS + 1);
        let last = requests[TURNS].json();
        assert_eq!(last["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
        let turns: Vec<&Value> =
            last["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "assistant").collect();
        assert_eq!(turns.len(), TURNS, "every tool turn went back");
        for (n, t) in turns.iter().enumerate() {
            let content = t["content"].as_array().unwrap();
            let sent: Vec<&Value> = content.iter().take_while(|b| is_thinking(b)).collect();
            assert_eq!(sent, thinker.issued.lock().unwrap()[&format!("toolu_{n:02}")].iter().collect::<Vec<_>>());
            assert_eq!(sent.len(), 1 + usize::from(n % 3 == 1) + usize::from(n % 2 == 0));
        }
        // The transcript holds them, tagged with their API, in order; the final turn's too.
        let by_turn = reasoning_of(&o);
        assert_eq!(by_turn.len(), TURNS + 1);
        assert!(by_turn.iter().flat_map(|r| r.iter()).all(|r| r.api == "anthropic"));
        assert_eq!(by_turn[1][1].item["type"], "redacted_thinking");
        assert!(by_turn[1][1].item["data"].as_str().unwrap().ends_with("+/="), "redacted data intact");
        assert_eq!(by_turn[2][1].item["thinking"], "Turn 2, a second thought.");
        let json = serde_json::to_value(&o.messages).unwrap();
        assert_eq!(json[1]["reasoning"][0]["api"], "anthropic");
        assert!(json[1]["reasoning"][0]["item"]["signature"].as_str().unwrap().starts_with("EqQB"));
        assert!(json[0].get("reasoning").is_none() && json[2].get("reasoning").is_none());
        let back: Vec<Message> = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, o.messages, "the transcript JSON round-trips with its reasoning");
    }
}

/// The server is as strict as it says: each way of not sending the thinking back unchanged is refused, so the
/// test above could fail.
#[tokio::test]
async fn the_thinking_server_refuses_thinking_that_did_not_come_back_unchanged() {
    let thinker = Thinker::new(TURNS, false);
    let server = thinker_server(&thinker).await;
    let provider = anthropic(&server, false);
    let o = agent(provider.clone(), ContextConfig::default()).run("echo", CancellationToken::new()).await;
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    // The conversation in the middle of the tool loop: up to the result of turn 4 (thinking, redacted, thinking).
    let upto =
        o.messages.iter().position(|m| matches!(m, Message::ToolResult(r) if &*r.call_id == "toolu_04")).unwrap();
    let loop_at = o.messages[..=upto].to_vec();
    let turn1 = loop_at.iter().position(|m| m.tool_calls().first().is_some_and(|c| &*c.id == "toolu_01")).unwrap();
    let turn4 = upto - 1;
    let ask = |messages: Vec<Message>| {
        let (provider, registry) = (provider.clone(), echo_registry());
        async move {
            let req = ModelRequest {
                messages: Conversation::from_messages(messages),
                tools: registry.specs().clone(),
                ..ModelRequest::default()
            };
            provider.generate(&req, &CancellationToken::new()).await
        }
    };
    let edit = |at: usize, f: &dyn Fn(&mut Vec<reins::Reasoning>)| {
        let mut m = loop_at.clone();
        if let Message::Assistant { reasoning, .. } = &mut m[at] {
            f(reasoning);
        }
        m
    };
    assert!(ask(loop_at.clone()).await.is_ok(), "unchanged, it is accepted");
    let cases: Vec<(&str, Vec<Message>)> = vec![
        ("dropped", edit(turn4, &|r| r.clear())),
        ("a changed signature", edit(turn4, &|r| r[0].item["signature"] = "EqQBforged".into())),
        ("changed thinking", edit(turn1, &|r| r[0].item["thinking"] = "Something else.".into())),
        ("changed redacted data", edit(turn1, &|r| r[1].item["data"] = "EmwKforged".into())),
        ("reordered", edit(turn4, &|r| r.swap(0, 1))),
        (
            "one left out",
            edit(turn1, &|r| {
                r.remove(1);
            }),
        ),
    ];
    for (what, messages) in cases {
        match ask(messages).await {
            Err(ModelError::Rejected { status: 400, message }) => {
                assert!(message.contains("thinking") || message.contains("signature"), "{what}: {message}")
            }
            other => panic!("{what}: expected a refusal, got {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Responses

/// An OpenAI Responses server with a reasoning model and `store: false`: every request must ask for the
/// encrypted reasoning (`include`, `store: false`); each reasoning item it sent must come back verbatim, in
/// order, right before the calls of its turn; an item it did not send is refused.
struct Reasoner {
    turns: usize,
    stream: bool,
    /// The reasoning items of each turn it answered, by the call id of the turn.
    issued: Mutex<HashMap<String, Vec<Value>>>,
    answered: AtomicUsize,
}

impl Reasoner {
    fn new(turns: usize, stream: bool) -> Arc<Self> {
        Arc::new(Reasoner { turns, stream, issued: Mutex::default(), answered: AtomicUsize::new(0) })
    }

    fn answer(&self, req: &Captured) -> Reply {
        match self.check(req) {
            Err(message) => Reply::json(
                400,
                json!({"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": null}})
                    .to_string(),
            ),
            Ok(()) => self.reply(),
        }
    }

    fn check(&self, req: &Captured) -> Result<(), String> {
        let body: Value = serde_json::from_slice(&req.body).map_err(|e| format!("invalid JSON: {e}"))?;
        if body["store"] != false {
            return Err("this test server keeps nothing: send store: false".into());
        }
        if !body["include"].as_array().is_some_and(|i| i.contains(&json!("reasoning.encrypted_content"))) {
            return Err("include must have reasoning.encrypted_content".into());
        }
        let input = body["input"].as_array().ok_or("input: expected an array")?;
        let issued = self.issued.lock().unwrap();
        let all: Vec<&Value> = issued.values().flatten().collect();
        for (i, item) in input.iter().enumerate() {
            if item["type"] == "reasoning" && !all.contains(&item) {
                return Err(format!(
                    "input[{i}]: the encrypted content of reasoning item {} could not be verified",
                    item["id"]
                ));
            }
            if item["type"] != "function_call" {
                continue;
            }
            let Some(sent) = item["call_id"].as_str().and_then(|id| issued.get(id)) else { continue };
            let before = &input[i.saturating_sub(sent.len())..i];
            if i < sent.len() || before != sent.as_slice() {
                return Err(format!(
                    "input[{i}]: a function_call must follow the reasoning items of its turn, unchanged and in order"
                ));
            }
        }
        Ok(())
    }

    fn reply(&self) -> Reply {
        let n = self.answered.fetch_add(1, Ordering::SeqCst);
        let reasoning = |k: &str| {
            json!({"type": "reasoning", "id": format!("rs_{n}{k}"),
                   "summary": [{"type": "summary_text", "text": format!("Turn {n}{k}: call echo.")}],
                   "encrypted_content": format!("gAAAAABo{n}{k}{:016x}==", fnv(&format!("enc/{n}{k}")))})
        };
        let mut output = vec![reasoning("a")];
        if n % 2 == 0 {
            output.push(reasoning("b"));
        }
        let kept = output.clone();
        if n < self.turns {
            let call_id = format!("call_{n}");
            output.push(json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": call_id, "name": "echo",
                               "arguments": json!({"text": format!("t{n}")}).to_string(), "status": "completed"}));
            self.issued.lock().unwrap().insert(call_id, kept);
        } else {
            output.push(json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                               "content": [{"type": "output_text", "text": format!("done after {n} turns"), "annotations": []}]}));
        }
        let response = |output: Vec<Value>| {
            json!({"id": format!("resp_{n}"), "object": "response", "status": "completed", "model": "o4-mini",
                   "output": output, "usage": {"input_tokens": 20, "output_tokens": 30,
                   "output_tokens_details": {"reasoning_tokens": 20}}})
        };
        if !self.stream {
            return Reply::json(200, response(output).to_string());
        }
        // Streamed: the items arrive in their events, the final response carries no output.
        let sse = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap());
        let mut s = sse(json!({"type": "response.created", "response": response(Vec::new())}));
        for (i, item) in output.iter().enumerate() {
            let mut added = item.clone();
            if item["type"] == "reasoning" {
                added["summary"] = json!([]);
                added.as_object_mut().unwrap().remove("encrypted_content");
                s += &sse(json!({"type": "response.output_item.added", "output_index": i, "item": added}));
                let text = item["summary"][0]["text"].clone();
                s += &sse(json!({"type": "response.reasoning_summary_text.delta", "output_index": i,
                                 "item_id": item["id"], "summary_index": 0, "delta": text}));
            } else if item["type"] == "function_call" {
                added["arguments"] = "".into();
                s += &sse(json!({"type": "response.output_item.added", "output_index": i, "item": added}));
                s += &sse(json!({"type": "response.function_call_arguments.delta", "output_index": i,
                                 "item_id": item["id"], "delta": item["arguments"]}));
            } else {
                s += &sse(json!({"type": "response.output_text.delta", "output_index": i, "item_id": item["id"],
                                 "content_index": 0, "delta": item["content"][0]["text"]}));
            }
            s += &sse(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
        }
        s += &sse(json!({"type": "response.completed", "response": response(Vec::new())}));
        Reply::sse_text(&s, 53)
    }
}

async fn reasoner_server(reasoner: &Arc<Reasoner>) -> Server {
    let r = reasoner.clone();
    Server::answering(move |req| r.answer(req)).await
}

fn responses(server: &Server, stream: bool) -> Provider {
    Provider::builder(Api::OpenAiResponses, "o4-mini")
        .base_url(server.url("/v1"))
        .api_key(Some("sk-test".into()))
        .reasoning_effort(ReasoningEffort::High)
        .stream(stream)
        .retry(no_retry())
        .build()
        .unwrap()
}

#[tokio::test]
async fn responses_encrypted_reasoning_round_trips() {
    for stream in [true, false] {
        let reasoner = Reasoner::new(TURNS, stream);
        let server = reasoner_server(&reasoner).await;
        let o = agent(responses(&server, stream), ContextConfig::default()).run("echo", CancellationToken::new()).await;
        assert_eq!(o.status, Status::Completed, "stream {stream}: {:?}", o.error);
        assert_eq!(o.answer.as_deref(), Some("done after 10 turns"));
        let requests = server.requests();
        assert_eq!(requests.len(), TURNS + 1);
        for r in &requests {
            let b = r.json();
            assert_eq!(b["store"], false);
            assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
            assert_eq!(b["reasoning"], json!({"effort": "high"}));
        }
        let last = requests[TURNS].json();
        let items: Vec<&Value> =
            last["input"].as_array().unwrap().iter().filter(|i| i["type"] == "reasoning").collect();
        assert_eq!(items.len(), (0..TURNS).map(|n| 1 + usize::from(n % 2 == 0)).sum::<usize>());
        assert!(items.iter().all(|i| i["encrypted_content"].as_str().unwrap().starts_with("gAAAAABo")));
        let by_turn = reasoning_of(&o);
        assert!(by_turn.iter().flat_map(|r| r.iter()).all(|r| r.api == "openai"));
        assert_eq!(by_turn[0].len(), 2);
        assert_eq!(by_turn[0][1].item["id"], "rs_0b");
        assert_eq!(by_turn[TURNS].len(), 2, "the final answer's reasoning is recorded too");
    }
}

#[tokio::test]
async fn the_reasoning_server_refuses_items_that_did_not_come_back_verbatim() {
    let reasoner = Reasoner::new(TURNS, false);
    let server = reasoner_server(&reasoner).await;
    let provider = responses(&server, false);
    let o = agent(provider.clone(), ContextConfig::default()).run("echo", CancellationToken::new()).await;
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    let upto = o.messages.iter().position(|m| matches!(m, Message::ToolResult(r) if &*r.call_id == "call_2")).unwrap();
    let loop_at = o.messages[..=upto].to_vec();
    let ask = |messages: Vec<Message>| {
        let (provider, registry) = (provider.clone(), echo_registry());
        async move {
            let req = ModelRequest {
                messages: Conversation::from_messages(messages),
                tools: registry.specs().clone(),
                ..ModelRequest::default()
            };
            provider.generate(&req, &CancellationToken::new()).await
        }
    };
    let edit = |f: &dyn Fn(&mut Vec<reins::Reasoning>)| {
        let mut m = loop_at.clone();
        if let Message::Assistant { reasoning, .. } = &mut m[upto - 1] {
            f(reasoning);
        }
        m
    };
    assert!(ask(loop_at.clone()).await.is_ok(), "unchanged, it is accepted");
    for (what, messages) in [
        ("dropped", edit(&|r| r.clear())),
        ("changed", edit(&|r| r[0].item["encrypted_content"] = "gAAAAABforged".into())),
        ("reordered", edit(&|r| r.swap(0, 1))),
    ] {
        match ask(messages).await {
            Err(ModelError::Rejected { status: 400, .. }) => {}
            other => panic!("{what}: expected a refusal, got {other:?}"),
        }
    }
    // Without include and store: false (a model not known to reason, no effort set), the server refuses.
    let plain = Provider::builder(Api::OpenAiResponses, "my-model")
        .base_url(server.url("/v1"))
        .api_key(Some("sk-test".into()))
        .stream(false)
        .retry(no_retry())
        .build()
        .unwrap();
    let req = ModelRequest { messages: Conversation::from_messages([Message::user("hi")]), ..ModelRequest::default() };
    assert!(matches!(plain.generate(&req, &CancellationToken::new()).await, Err(ModelError::Rejected { .. })));
}

// ---------------------------------------------------------------------------------------------------------
// Across APIs, and with compaction

/// Continues `o`'s conversation with a new prompt on `agent`.
async fn continue_on(agent: &Agent, o: &Outcome, prompt: &str) -> Outcome {
    let ctx = agent.context().clone();
    let mut state = RunState::resume("next", o.messages.clone(), Limits::default(), &ctx, "interrupted").unwrap();
    state.push_user(prompt, &ctx).unwrap();
    agent.drive(state, CancellationToken::new()).await
}

fn has_anthropic_thinking(body: &Value) -> bool {
    let s = body.to_string();
    s.contains("\"type\":\"thinking\"") || s.contains("redacted_thinking") || s.contains("EqQBCkgIARABGAIiQ")
}

fn has_responses_reasoning(body: &Value) -> bool {
    let s = body.to_string();
    s.contains("\"type\":\"reasoning\"") || s.contains("gAAAAABo")
}

#[tokio::test]
async fn reasoning_of_one_api_is_never_sent_to_another() {
    let thinker = Thinker::new(3, true);
    let a_server = thinker_server(&thinker).await;
    let reasoner = Reasoner::new(2, true);
    let r_server = reasoner_server(&reasoner).await;
    let on_anthropic = agent(anthropic(&a_server, true), ContextConfig::default());
    let on_responses = agent(responses(&r_server, true), ContextConfig::default());

    // Started on Anthropic, continued on Responses, then on Anthropic again.
    let first = on_anthropic.run("echo three times", CancellationToken::new()).await;
    assert_eq!(first.status, Status::Completed, "{:?}", first.error);
    let second = continue_on(&on_responses, &first, "now echo twice").await;
    assert_eq!(second.status, Status::Completed, "{:?}", second.error);
    let third = continue_on(&on_anthropic, &second, "once more").await;
    assert_eq!(third.status, Status::Completed, "{:?}", third.error);

    // The transcript keeps both APIs' items, each tagged.
    let apis: HashSet<&str> = third.messages.iter().flat_map(|m| m.reasoning()).map(|r| r.api.as_str()).collect();
    assert_eq!(apis, HashSet::from(["anthropic", "openai"]));
    for r in r_server.requests() {
        assert!(!has_anthropic_thinking(&r.json()), "Anthropic thinking sent to Responses: {}", r.json());
    }
    let a_requests = a_server.requests();
    assert!(a_requests.len() > 4);
    for r in &a_requests {
        assert!(!has_responses_reasoning(&r.json()), "Responses reasoning sent to Anthropic: {}", r.json());
    }
    // The Anthropic thinking of the first run went back to Anthropic in the third (the server checked it).
    let last = a_requests.last().unwrap().json();
    assert!(has_anthropic_thinking(&last));
    // Chat Completions has no reasoning that round-trips: none of it is sent.
    let chat = Provider::builder(Api::OpenAiChat, "qwen3").base_url("http://127.0.0.1:9/v1").build().unwrap();
    let body = chat.request_body(&ModelRequest {
        messages: Conversation::from_messages(third.messages.clone()),
        ..ModelRequest::default()
    });
    assert!(!has_anthropic_thinking(&body) && !has_responses_reasoning(&body), "{body}");
}

#[tokio::test]
async fn a_compacted_run_keeps_working_with_thinking_in_the_transcript() {
    let thinker = Thinker::new(TURNS, false);
    let server = thinker_server(&thinker).await;
    let ctx =
        ContextConfig { max_context: Some(1800), strategy: ContextStrategy::Summarize, ..ContextConfig::default() };
    let o = agent(anthropic(&server, false), ctx).run("echo ten times", CancellationToken::new()).await;
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    assert!(o.compactions >= 1, "compactions: {}", o.compactions);
    let bodies: Vec<Value> = server.requests().iter().map(Captured::json).collect();
    let summaries: Vec<&Value> = bodies.iter().filter(|b| b.get("tools").is_none()).collect();
    assert_eq!(summaries.len() as u64, o.compactions);
    for s in summaries {
        // A summary call is one user message of text: no thinking block goes with it.
        assert_eq!(s["messages"].as_array().unwrap().len(), 1);
        assert!(!has_anthropic_thinking(&s["messages"]), "{s}");
    }
}

// ---------------------------------------------------------------------------------------------------------
// The fixtures (bodies and streams the SDK types accept, see contract.rs), parsed whole and streamed

#[tokio::test]
async fn fixtures_give_their_reasoning_items_whole_and_streamed() {
    let anthropic: Value = serde_json::from_str(&common::fixture("anthropic/thinking.json")).unwrap();
    let responses: Value = serde_json::from_str(&common::fixture("openai_responses/reasoning.json")).unwrap();
    let cases = [
        (Api::Anthropic, "anthropic/thinking", anthropic["content"].as_array().unwrap()[..2].to_vec()),
        (Api::OpenAiResponses, "openai_responses/reasoning", vec![responses["output"][0].clone()]),
    ];
    for (api, name, want) in cases {
        for stream in [false, true] {
            let reply = if stream {
                Reply::sse_text(&common::fixture(&format!("{name}.sse")), 61)
            } else {
                Reply::json(200, common::fixture(&format!("{name}.json")))
            };
            let server = Server::start(vec![reply]).await;
            let base = if api == Api::Anthropic { server.url("") } else { server.url("/v1") };
            let p = Provider::builder(api, "m").base_url(base).stream(stream).retry(no_retry()).build().unwrap();
            let req =
                ModelRequest { messages: Conversation::from_messages([Message::user("hi")]), ..Default::default() };
            let r = p.generate(&req, &CancellationToken::new()).await.unwrap();
            let items: Vec<Value> = r.reasoning_items.iter().map(|i| i.item.clone()).collect();
            assert_eq!(items, want, "{name} stream {stream}");
            assert!(r.reasoning_items.iter().all(|i| i.api == api.name()));
            assert!(r.reasoning.as_deref().is_some_and(|t| !t.is_empty()), "the text is shown too");
            assert_eq!(r.tool_calls.len(), 1);
        }
    }
}
