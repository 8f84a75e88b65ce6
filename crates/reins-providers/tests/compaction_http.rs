//! Compaction over HTTP: a run with the `summarize` context strategy against a local OpenAI-compatible
//! server that records every request body. The summary requests and the requests after a compaction are
//! checked as the provider sees them.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Reply, Server, echo_registry};
use reins::{Agent, ContextConfig, ContextStrategy, FnModel, Limits, ModelRequest, ModelResponse, Status, ToolCall};
use reins_providers::{Api, Provider, RetryPolicy};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const STEPS: usize = 100;
const BUDGET: u64 = 3000;
const INSTRUCTIONS: &str = "You are a careful agent.";
const TASK: &str = "echo a lot";
const SUMMARY: &str = "SUMMARY: echoed so far; keep going";

fn echo_text(i: usize) -> String {
    format!("r{i}:{}", "x".repeat(40 + (i * 37) % 150))
}

fn ctx() -> ContextConfig {
    ContextConfig { max_context: Some(BUDGET), strategy: ContextStrategy::Summarize, ..ContextConfig::default() }
}

/// The order of calls (true: a summary call) the run makes: the engine is deterministic, so a dry run with
/// an in-process model gives the order the HTTP server must answer in.
async fn call_order() -> Vec<bool> {
    let order = Arc::new(Mutex::new(Vec::new()));
    let (o2, n) = (order.clone(), AtomicUsize::new(0));
    let model = FnModel::new(move |req: &ModelRequest| {
        let summary = req.tools.is_empty();
        o2.lock().unwrap().push(summary);
        if summary {
            return Ok(ModelResponse::text(SUMMARY));
        }
        let i = n.fetch_add(1, Ordering::SeqCst);
        if i >= STEPS {
            return Ok(ModelResponse::text("done"));
        }
        Ok(ModelResponse::tool_calls("", vec![ToolCall::new(format!("c{i}"), "echo", json!({"text": echo_text(i)}))]))
    });
    let agent = Agent::builder(model)
        .instructions(INSTRUCTIONS)
        .registry(echo_registry())
        .limits(Limits { max_steps: Some(1000), ..Limits::default() })
        .context(ctx())
        .build()
        .unwrap();
    let o = agent.run(TASK, CancellationToken::new()).await;
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    order.lock().unwrap().clone()
}

fn completion(message: Value, finish: &str) -> Reply {
    Reply::json(
        200,
        json!({
            "id": "x", "object": "chat.completion", "model": "test-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
        })
        .to_string(),
    )
}

#[tokio::test]
async fn a_summarized_run_over_http_sends_the_summary_and_never_a_call_without_its_result() {
    let order = call_order().await;
    let mut replies = Vec::new();
    let mut i = 0;
    for &summary in &order {
        if summary {
            replies.push(completion(json!({"role": "assistant", "content": SUMMARY}), "stop"));
        } else if i >= STEPS {
            replies.push(completion(json!({"role": "assistant", "content": "done"}), "stop"));
        } else {
            let args = json!({"text": echo_text(i)}).to_string();
            replies.push(completion(
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": format!("c{i}"), "type": "function", "function": {"name": "echo", "arguments": args}}
                ]}),
                "tool_calls",
            ));
            i += 1;
        }
    }
    let server = Server::start(replies).await;
    let provider = Provider::builder(Api::OpenAiChat, "test-model")
        .base_url(server.url("/v1"))
        .api_key(Some("sk-test".into()))
        .stream(false)
        .retry(RetryPolicy {
            max_retries: 0,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(10),
            max_retry_after: Duration::from_secs(1),
        })
        .build()
        .unwrap();
    let agent = Agent::builder(provider)
        .instructions(INSTRUCTIONS)
        .registry(echo_registry())
        .limits(Limits { max_steps: Some(1000), ..Limits::default() })
        .context(ctx())
        .build()
        .unwrap();
    let o = agent.run(TASK, CancellationToken::new()).await;
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    assert!(o.compactions >= 3, "compactions: {}", o.compactions);
    let bodies: Vec<Value> = server.requests().iter().map(|c| c.json()).collect();
    assert_eq!(bodies.len(), order.len());
    let mut compacted = false;
    let mut summaries = 0;
    for (body, &summary) in bodies.iter().zip(&order) {
        let msgs = body["messages"].as_array().unwrap();
        if summary {
            summaries += 1;
            // The summary request: the summary prompt as the system message, one user message, no tools.
            assert!(body.get("tools").is_none(), "a summary request offers no tools");
            assert_eq!(msgs.len(), 2);
            assert_eq!(msgs[0]["role"], "system");
            assert_eq!(msgs[0]["content"], reins::DEFAULT_SUMMARY_PROMPT);
            let text = msgs[1]["content"].as_str().unwrap();
            assert!(text.contains(TASK));
            assert!(text.contains("[tool call c"));
            compacted = true;
            continue;
        }
        assert_eq!(msgs[0], json!({"role": "system", "content": INSTRUCTIONS}), "the instructions in every request");
        assert_eq!(msgs[1], json!({"role": "user", "content": TASK}), "the first message in every request");
        if compacted {
            let s = msgs[2]["content"].as_str().unwrap_or_default();
            assert_eq!(msgs[2]["role"], "user");
            assert!(s.starts_with("[Summary of the ") && s.contains(SUMMARY), "{s}");
        }
        // Every call has its result right after it; no result lacks its call.
        let mut pending: Vec<String> = Vec::new();
        for m in msgs {
            if m["role"] == "tool" {
                assert_eq!(m["tool_call_id"].as_str(), pending.first().map(String::as_str), "{m}");
                pending.remove(0);
            } else {
                assert!(pending.is_empty(), "a call without its result");
                if let Some(calls) = m["tool_calls"].as_array() {
                    pending = calls.iter().map(|c| c["id"].as_str().unwrap().to_owned()).collect();
                }
            }
        }
        assert!(pending.is_empty());
    }
    assert_eq!(summaries as u64, o.compactions);
}
