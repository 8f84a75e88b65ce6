//! Prompt caching (issue 11, item 2) through real runs against a local server: Anthropic `cache_control`
//! breakpoints placed so that each step of a tool loop reads the previous step's prefix from the cache, the
//! Responses API's stable `prompt_cache_key`, and cache reads and writes parsed and priced apart.

mod common;

use common::{Reply, Server};
use reins::{Agent, FnTool, Price, Registry, Status, ToolOutput};
use reins_providers::{Api, Provider, ProviderBuilder};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const STEPS: usize = 6;

fn builder(api: Api, server: &Server) -> ProviderBuilder {
    let base = match api {
        Api::Anthropic => server.url(""),
        _ => server.url("/v1"),
    };
    Provider::builder(api, "test-model").base_url(base).api_key(Some("k".into())).stream(false)
}

fn lookup_tool() -> FnTool {
    FnTool::new(
        "lookup",
        "Looks a word up.",
        json!({"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}),
        |args, _| async move {
            let word = args["word"].as_str().unwrap_or("?").to_owned();
            Ok(ToolOutput::Text(format!("{word}: a word of {} letters", word.len())))
        },
    )
}

/// An Anthropic answer calling `lookup` once per word given (a batch), with the given cache usage.
fn anthropic_calls(step: usize, words: &[&str], read: u64, written: u64) -> Reply {
    let mut content = vec![json!({"type": "text", "text": format!("Step {step}.")})];
    for (i, w) in words.iter().enumerate() {
        content.push(json!({"type": "tool_use", "id": format!("toolu_{step}_{i}"), "name": "lookup",
                            "input": {"word": w}}));
    }
    Reply::json(
        200,
        json!({"id": format!("msg_{step}"), "type": "message", "role": "assistant", "model": "test-model",
               "content": content, "stop_reason": "tool_use", "stop_sequence": null,
               "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": read,
                         "cache_creation_input_tokens": written}})
        .to_string(),
    )
}

fn anthropic_text(text: &str) -> Reply {
    Reply::json(
        200,
        json!({"id": "msg_end", "type": "message", "role": "assistant", "model": "test-model",
               "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null,
               "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2000,
                         "cache_creation_input_tokens": 300}})
        .to_string(),
    )
}

/// A request's cacheable prefix in the API's order (tools, then system, then each message's blocks), one
/// entry per block: its JSON without the marker, and whether it carries a `cache_control` marker.
fn blocks(body: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut push = |v: &Value, prefix: &str| {
        let mut v = v.clone();
        let marked = v.as_object_mut().and_then(|o| o.remove("cache_control")).is_some();
        out.push((format!("{prefix}{v}"), marked));
    };
    for t in body["tools"].as_array().into_iter().flatten() {
        push(t, "tool ");
    }
    match &body["system"] {
        Value::String(s) => push(&json!({"type": "text", "text": s}), "system "),
        Value::Array(a) => a.iter().for_each(|b| push(b, "system ")),
        _ => {}
    }
    for m in body["messages"].as_array().into_iter().flatten() {
        let role = m["role"].as_str().unwrap_or("?");
        match &m["content"] {
            Value::String(s) => push(&json!({"type": "text", "text": s}), &format!("{role} ")),
            Value::Array(a) => a.iter().for_each(|b| push(b, &format!("{role} "))),
            other => panic!("unexpected content {other}"),
        }
    }
    out
}

fn breakpoints(blocks: &[(String, bool)]) -> Vec<usize> {
    blocks.iter().enumerate().filter(|(_, (_, m))| *m).map(|(i, _)| i).collect()
}

fn cache_controls(body: &Value) -> usize {
    body.to_string().matches("\"cache_control\"").count()
}

/// Each step's request, up to its last breakpoint, is byte for byte the start of the next step's, and the
/// next step has a breakpoint at that same place: the prefix step n wrote is what step n+1 reads. Batches of
/// 25 results (more than the API's 20-block look-back) are included, which one trailing breakpoint alone
/// would miss.
#[tokio::test]
async fn each_step_of_a_tool_loop_reads_the_previous_steps_prefix_from_the_cache() {
    let words: Vec<String> = (0..25).map(|i| format!("w{i}")).collect();
    let many: Vec<&str> = words.iter().map(String::as_str).collect();
    let mut replies = Vec::new();
    for step in 1..STEPS {
        let batch: &[&str] = if step == 3 { &many } else { &["alpha", "beta"] };
        replies.push(anthropic_calls(step, batch, 1000 * step as u64, 150));
    }
    replies.push(anthropic_text("Done."));
    let server = Server::start(replies).await;
    let price = Price {
        input_per_mtok: 3.0,
        output_per_mtok: 15.0,
        cache_read_per_mtok: Some(0.3),
        cache_write_per_mtok: Some(3.75),
    };
    let provider = builder(Api::Anthropic, &server).price(price).build().unwrap();
    let agent = Agent::builder(provider)
        .instructions("You look words up. Never guess.")
        .registry(Registry::builder().tool(lookup_tool()).build().unwrap())
        .build()
        .unwrap();
    let outcome = agent.run("Look up some words.", CancellationToken::new()).await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    let bodies: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(bodies.len(), STEPS);

    for (n, body) in bodies.iter().enumerate() {
        assert!(cache_controls(body) <= 4, "step {n}: the API allows 4 breakpoints: {body}");
        // The instructions end the first cached segment (tools, then system).
        assert_eq!(body["system"][0]["cache_control"], json!({"type": "ephemeral"}), "step {n}: {body}");
        assert_eq!(body["system"][0]["text"], "You look words up. Never guess.");
        // The last block of the request is marked: this step's prefix is written for the next.
        let last = body["messages"].as_array().unwrap().last().unwrap();
        assert_eq!(last["role"], "user");
        assert_eq!(last["content"].as_array().unwrap().last().unwrap()["cache_control"]["type"], "ephemeral");
    }
    for n in 0..bodies.len() - 1 {
        let (this, next) = (blocks(&bodies[n]), blocks(&bodies[n + 1]));
        let end = *breakpoints(&this).last().expect("a breakpoint");
        let prefix: String = this[..=end].iter().map(|(b, _)| b.as_str()).collect();
        let next_prefix: String = next[..=end.min(next.len() - 1)].iter().map(|(b, _)| b.as_str()).collect();
        assert_eq!(prefix, next_prefix, "step {} does not start with step {n}'s cached prefix", n + 1);
        assert!(
            breakpoints(&next).contains(&end),
            "step {}: no breakpoint where step {n}'s prefix ends ({end}); the read would miss: {:?}",
            n + 1,
            breakpoints(&next)
        );
        // And that read is within the API's look-back of 20 blocks from the breakpoint that covers it.
        assert!(breakpoints(&next).iter().any(|&b| b >= end && b - end <= 20));
    }

    // Cache reads and writes are parsed apart and priced at their own rates.
    let reads: u64 = (1..STEPS as u64).map(|s| 1000 * s).sum::<u64>() + 2000;
    let writes = 150 * (STEPS as u64 - 1) + 300;
    assert_eq!(outcome.usage.cached_input_tokens, reads);
    assert_eq!(outcome.usage.cache_write_tokens, writes);
    let plain = outcome.usage.input_tokens - reads - writes;
    assert_eq!(plain, 100 * (STEPS as u64 - 1) + 10, "input counts plain + read + written");
    let expected =
        (plain as f64 * 3.0 + reads as f64 * 0.3 + writes as f64 * 3.75 + outcome.usage.output_tokens as f64 * 15.0)
            / 1e6;
    let cost = outcome.cost_usd.expect("a priced run has a cost");
    assert!((cost - expected).abs() < 1e-9, "cost {cost} != {expected}");
}

/// Without instructions the tools' segment ends at the last tool; with caching off nothing is marked.
#[tokio::test]
async fn without_instructions_the_last_tool_is_marked_and_caching_can_be_turned_off() {
    for cache in [true, false] {
        let server = Server::start(vec![anthropic_calls(1, &["x"], 0, 0), anthropic_text("ok")]).await;
        let provider = builder(Api::Anthropic, &server).prompt_cache(cache).build().unwrap();
        let agent = Agent::builder(provider)
            .registry(Registry::builder().tool(lookup_tool()).build().unwrap())
            .build()
            .unwrap();
        let outcome = agent.run("Look x up.", CancellationToken::new()).await;
        assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
        for body in server.requests().iter().map(|r| r.json()) {
            assert!(body.get("system").is_none());
            let tool = body["tools"].as_array().unwrap().last().unwrap().clone();
            if cache {
                assert_eq!(tool["cache_control"]["type"], "ephemeral", "{body}");
                assert!(cache_controls(&body) >= 2, "{body}");
            } else {
                assert_eq!(cache_controls(&body), 0, "caching off marks nothing: {body}");
                // The prompt stays the plain string it always was.
                assert_eq!(body["messages"][0]["content"], "Look x up.");
            }
        }
    }
}

fn responses_calls(step: usize) -> Reply {
    Reply::json(
        200,
        json!({"id": format!("resp_{step}"), "object": "response", "created_at": 1, "status": "completed",
               "model": "test-model", "output": [{"id": format!("fc_{step}"), "type": "function_call",
               "status": "completed", "call_id": format!("call_{step}"), "name": "lookup",
               "arguments": "{\"word\":\"gamma\"}"}],
               "usage": {"input_tokens": 500, "output_tokens": 10,
                         "input_tokens_details": {"cached_tokens": 400}, "output_tokens_details": {"reasoning_tokens": 0}}})
        .to_string(),
    )
}

fn responses_text() -> Reply {
    Reply::json(
        200,
        json!({"id": "resp_end", "object": "response", "created_at": 1, "status": "completed", "model": "test-model",
               "output": [{"id": "msg_end", "type": "message", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}],
               "usage": {"input_tokens": 600, "output_tokens": 3}})
        .to_string(),
    )
}

/// Every request of one conversation carries the same `prompt_cache_key` (the run's id when there is no
/// session); another run gets another; with caching off none is sent.
#[tokio::test]
async fn the_responses_api_gets_one_stable_prompt_cache_key_per_conversation() {
    let mut keys = Vec::new();
    for _ in 0..2 {
        let server = Server::start(vec![responses_calls(1), responses_calls(2), responses_text()]).await;
        let agent = Agent::builder(builder(Api::OpenAiResponses, &server).build().unwrap())
            .registry(Registry::builder().tool(lookup_tool()).build().unwrap())
            .build()
            .unwrap();
        let outcome = agent.run("Look gamma up twice.", CancellationToken::new()).await;
        assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
        assert_eq!(outcome.usage.cached_input_tokens, 800);
        let sent: Vec<Value> = server.requests().iter().map(|r| r.json()["prompt_cache_key"].clone()).collect();
        assert_eq!(sent.len(), 3);
        assert!(sent.iter().all(|k| *k == sent[0]), "one key for the whole run: {sent:?}");
        assert_eq!(sent[0], json!(outcome.run_id), "without a session the key is the run id");
        keys.push(sent[0].clone());
    }
    assert_ne!(keys[0], keys[1], "each conversation has its own key");

    let server = Server::start(vec![responses_text()]).await;
    let provider = builder(Api::OpenAiResponses, &server).prompt_cache(false).build().unwrap();
    let outcome = Agent::builder(provider).build().unwrap().run("hi", CancellationToken::new()).await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert!(server.requests()[0].json().get("prompt_cache_key").is_none());
}
