//! The run's `tracing` spans (OTel GenAI conventions): names, parents, attributes, content only when
//! opted in, a sub-agent nested under its tool call, and nothing when no subscriber listens. A layer of
//! the test records what the engine gives the subscriber; the export is tested in `reins-otel`.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use reins::{Agent, FinishReason, FnTool, Limits, ModelResponse, Registry, Status, ToolOutput, Usage};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[derive(Clone, Debug, Default)]
struct Captured {
    name: &'static str,
    target: String,
    parent: Option<u64>,
    fields: BTreeMap<String, String>,
    opened: u64,
    closed: Option<u64>,
}

impl Captured {
    fn get(&self, k: &str) -> Option<&str> {
        self.fields.get(k).map(String::as_str)
    }
}

#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<BTreeMap<u64, Captured>>>,
    clock: Arc<Mutex<u64>>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), format!("i64:{value}"));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), format!("f64:{value}"));
    }
}

impl Capture {
    fn tick(&self) -> u64 {
        let mut c = self.clock.lock().unwrap();
        *c += 1;
        *c
    }
    fn all(&self) -> Vec<(u64, Captured)> {
        self.spans.lock().unwrap().iter().map(|(k, v)| (*k, v.clone())).collect()
    }
    fn named(&self, name: &str) -> Vec<(u64, Captured)> {
        self.all().into_iter().filter(|(_, s)| s.name == name).collect()
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.id().into_u64());
        let c = Captured {
            name: attrs.metadata().name(),
            target: attrs.metadata().target().to_owned(),
            parent,
            fields,
            opened: self.tick(),
            closed: None,
        };
        self.spans.lock().unwrap().insert(id.into_u64(), c);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if let Some(s) = self.spans.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut s.fields));
        }
    }
    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        let t = self.tick();
        if let Some(s) = self.spans.lock().unwrap().get_mut(&id.into_u64()) {
            s.closed = Some(t);
        }
    }
}

/// Runs `f` on a current-thread runtime with the capturing subscriber as the thread's default.
fn traced<T>(f: impl std::future::Future<Output = T>) -> (T, Capture) {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let out = tracing::subscriber::with_default(subscriber, || rt.block_on(f));
    (out, capture)
}

/// A parallel-safe tool that waits a little, so that calls of one batch overlap.
fn slow_echo() -> FnTool {
    FnTool::new("slow_echo", "Echoes after a pause.", echo_schema(), |args, _ctx| async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(ToolOutput::Json(args["text"].clone()))
    })
    .parallel()
}

fn batch_response() -> ModelResponse {
    let mut r = calls(vec![
        call("a", "slow_echo", json!({"text": "secret-arg-1"})),
        call("b", "slow_echo", json!({"text": "secret-arg-2"})),
        call("c", "fail", json!({"message": "secret-boom"})),
    ])
    .with_usage(Usage::new(120, 30));
    r.finish_reason = Some(FinishReason::ToolCalls);
    r
}

fn agent(content: bool) -> Agent {
    let runs = Runs::default();
    let registry = Registry::builder().tool(slow_echo()).tool(fail(&runs)).build().unwrap();
    let mut last = answer("the-secret-answer").with_usage(Usage::new(200, 10));
    last.finish_reason = Some(FinishReason::Stop);
    Agent::builder_shared(scripted(vec![batch_response(), last]))
        .name("tester")
        .instructions("secret-instructions")
        .registry(registry)
        .limits(Limits::default())
        .include_content(content)
        .build()
        .unwrap()
}

#[test]
fn a_run_is_an_invoke_agent_span_with_chat_and_execute_tool_children() {
    let agent = agent(false);
    let (outcome, capture) = traced(agent.run("the-secret-prompt", CancellationToken::new()));
    is_status(&outcome, Status::Completed);

    let runs = capture.named("invoke_agent");
    assert_eq!(runs.len(), 1, "{:#?}", capture.all());
    let (run_id, run) = &runs[0];
    assert_eq!(run.parent, None);
    assert_eq!(run.target, reins::spans::TARGET);
    assert_eq!(run.get("otel.name"), Some("invoke_agent tester"));
    assert_eq!(run.get("otel.kind"), Some("internal"));
    assert_eq!(run.get("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(run.get("gen_ai.agent.name"), Some("tester"));
    assert_eq!(run.get("gen_ai.provider.name"), Some("reins.script"));
    assert_eq!(run.get("gen_ai.request.model"), Some("script"));
    assert_eq!(run.get("reins.run.id"), Some(outcome.run_id.as_str()));
    assert_eq!(run.get("reins.status"), Some("completed"));
    assert_eq!(run.get("reins.steps"), Some("i64:2"));
    assert_eq!(run.get("reins.tool_calls"), Some("i64:3"));
    assert_eq!(run.get("gen_ai.usage.input_tokens"), Some("i64:320"));
    assert_eq!(run.get("gen_ai.usage.output_tokens"), Some("i64:40"));
    assert_eq!(run.get("error.type"), None);
    assert!(run.closed.is_some());

    let chats = capture.named("chat");
    assert_eq!(chats.len(), 2);
    for (_, c) in &chats {
        assert_eq!(c.parent, Some(*run_id));
        assert_eq!(c.get("otel.name"), Some("chat script"));
        assert_eq!(c.get("otel.kind"), Some("client"));
        assert_eq!(c.get("gen_ai.operation.name"), Some("chat"));
        assert_eq!(c.get("gen_ai.provider.name"), Some("reins.script"));
        assert_eq!(c.get("gen_ai.request.model"), Some("script"));
    }
    let first = &chats[0].1;
    assert_eq!(first.get("reins.step"), Some("i64:1"));
    assert_eq!(first.get("gen_ai.response.finish_reasons"), Some(r#"["tool_call"]"#));
    assert_eq!(first.get("gen_ai.usage.input_tokens"), Some("i64:120"));
    assert_eq!(first.get("gen_ai.usage.output_tokens"), Some("i64:30"));
    assert_eq!(chats[1].1.get("gen_ai.response.finish_reasons"), Some(r#"["stop"]"#));

    let tools = capture.named("execute_tool");
    assert_eq!(tools.len(), 3);
    let by_id = |id: &str| tools.iter().map(|(_, t)| t).find(|t| t.get("gen_ai.tool.call.id") == Some(id)).unwrap();
    for t in tools.iter().map(|(_, t)| t) {
        assert_eq!(t.parent, Some(*run_id), "a tool call's span is the run's child");
        assert_eq!(t.get("gen_ai.operation.name"), Some("execute_tool"));
        assert_eq!(t.get("gen_ai.tool.type"), Some("function"));
    }
    let (a, b, c) = (by_id("a"), by_id("b"), by_id("c"));
    assert_eq!(a.get("otel.name"), Some("execute_tool slow_echo"));
    assert_eq!(a.get("gen_ai.tool.name"), Some("slow_echo"));
    // The two parallel calls were open at the same time.
    assert!(a.opened < b.closed.unwrap() && b.opened < a.closed.unwrap(), "{a:?} {b:?}");
    assert_eq!(a.get("error.type"), None);
    assert_eq!(c.get("otel.name"), Some("execute_tool fail"));
    assert_eq!(c.get("error.type"), Some("tool_error"));
    assert_eq!(c.get("otel.status_code"), Some("error"));
    // The error text is the tool's output, content: without content opted in, only the class.
    assert_eq!(c.get("otel.status_description"), Some("tool_error"));

    // Without content opted in, no prompt, instructions, arguments, results or answers.
    for (_, s) in capture.all() {
        for (k, v) in &s.fields {
            assert!(!v.contains("secret"), "{} has {k} = {v}", s.name);
        }
        for k in ["gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions"] {
            assert_eq!(s.get(k), None);
        }
    }
}

#[test]
fn content_goes_into_the_spans_only_when_opted_in() {
    let agent = agent(true);
    let (outcome, capture) = traced(agent.run("the-secret-prompt", CancellationToken::new()));
    is_status(&outcome, Status::Completed);
    let run = &capture.named("invoke_agent")[0].1;
    let json = |s: Option<&str>| serde_json::from_str::<serde_json::Value>(s.unwrap()).unwrap();
    assert_eq!(
        json(run.get("gen_ai.input.messages")),
        json!([{"role": "user", "parts": [{"type": "text", "content": "the-secret-prompt"}]}])
    );
    assert_eq!(
        json(run.get("gen_ai.system_instructions")),
        json!([{"type": "text", "content": "secret-instructions"}])
    );
    assert_eq!(
        json(run.get("gen_ai.output.messages")),
        json!([{"role": "assistant", "parts": [{"type": "text", "content": "the-secret-answer"}]}])
    );
    let chats = capture.named("chat");
    let second = &chats[1].1;
    let input = json(second.get("gen_ai.input.messages"));
    assert_eq!(input.as_array().unwrap().len(), 5, "{input}");
    assert_eq!(
        input[1]["parts"][0],
        json!({"type": "tool_call", "id": "a", "name": "slow_echo", "arguments": {"text": "secret-arg-1"}})
    );
    assert_eq!(input[4]["parts"][0]["type"], "tool_call_response");
    assert_eq!(
        json(second.get("gen_ai.output.messages")),
        json!([{"role": "assistant", "parts": [{"type": "text", "content": "the-secret-answer"}], "finish_reason": "stop"}])
    );
    let tools = capture.named("execute_tool");
    let a = tools.iter().map(|(_, t)| t).find(|t| t.get("gen_ai.tool.call.id") == Some("a")).unwrap();
    assert_eq!(json(a.get("gen_ai.tool.call.arguments")), json!({"text": "secret-arg-1"}));
    assert_eq!(a.get("gen_ai.tool.call.result"), Some("secret-arg-1"));
    let c = tools.iter().map(|(_, t)| t).find(|t| t.get("gen_ai.tool.call.id") == Some("c")).unwrap();
    assert_eq!(c.get("gen_ai.tool.call.result"), None, "no result for a failed call");
    assert!(c.get("otel.status_description").is_some_and(|d| d.contains("boom")), "{c:?}");
}

#[test]
fn a_sub_agent_run_nests_under_the_tool_call_that_started_it() {
    let inner = Arc::new(Agent::builder_shared(scripted(vec![answer("inner answer")])).name("helper").build().unwrap());
    let delegate = FnTool::new("delegate", "Asks the helper.", echo_schema(), move |args, ctx| {
        let inner = inner.clone();
        async move {
            let o = inner.run(args["text"].as_str().unwrap_or(""), ctx.cancel.clone()).await;
            Ok(ToolOutput::Text(o.answer.unwrap_or_default()))
        }
    });
    let registry = Registry::builder().tool(delegate).build().unwrap();
    let outer = Agent::builder_shared(scripted(vec![
        calls(vec![call("d1", "delegate", json!({"text": "help"}))]),
        answer("done"),
    ]))
    .name("lead")
    .registry(registry)
    .build()
    .unwrap();
    let (outcome, capture) = traced(outer.run("go", CancellationToken::new()));
    is_status(&outcome, Status::Completed);
    let runs = capture.named("invoke_agent");
    assert_eq!(runs.len(), 2);
    let lead = runs.iter().find(|(_, r)| r.get("gen_ai.agent.name") == Some("lead")).unwrap();
    let helper = runs.iter().find(|(_, r)| r.get("gen_ai.agent.name") == Some("helper")).unwrap();
    let tool = &capture.named("execute_tool")[0];
    assert_eq!(tool.1.parent, Some(lead.0));
    assert_eq!(helper.1.parent, Some(tool.0), "the helper's run is a child of the delegate call");
    let helper_chat = capture.named("chat").into_iter().find(|(_, c)| c.parent == Some(helper.0));
    assert!(helper_chat.is_some(), "the helper's model call is a child of its run");
}

#[test]
fn a_failed_model_call_marks_its_chat_span_and_the_run() {
    let runs = Runs::default();
    let model = scripted(vec![reins::ScriptStep::Fail(reins::ModelError::QuotaExhausted("no credit".into()))]);
    let agent = agent_with(model, &runs, Limits::default()).build().unwrap();
    let (outcome, capture) = traced(run(&agent));
    is_status(&outcome, Status::ModelError);
    let chat = &capture.named("chat")[0].1;
    assert_eq!(chat.get("error.type"), Some("quota_exhausted"));
    assert_eq!(chat.get("otel.status_code"), Some("error"));
    let run = &capture.named("invoke_agent")[0].1;
    assert_eq!(run.get("otel.name"), Some("invoke_agent"));
    assert_eq!(run.get("error.type"), Some("model_error"));
    assert_eq!(run.get("reins.status"), Some("model_error"));
}

#[test]
fn a_cancelled_batch_marks_its_unfinished_calls_aborted() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![call("s", "sleep", json!({"ms": 60_000}))])]);
    let agent = agent_with(model, &runs, Limits::default()).build().unwrap();
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    let (outcome, capture) = traced(async move {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            c2.cancel();
        });
        agent.run("go", cancel).await
    });
    is_status(&outcome, Status::Aborted);
    let tool = &capture.named("execute_tool")[0].1;
    assert_eq!(tool.get("error.type"), Some("aborted"));
    assert!(tool.closed.is_some());
}

#[test]
fn the_run_and_each_model_call_carry_their_cost() {
    let price = reins::Price {
        input_per_mtok: 2.0,
        output_per_mtok: 10.0,
        cache_read_per_mtok: None,
        cache_write_per_mtok: None,
    };
    let model = Arc::new(
        reins::ScriptedModel::new(vec![
            calls(vec![call("a", "echo", json!({"text": "x"}))]).with_usage(Usage::new(1000, 200)),
            answer("done").with_usage(Usage::new(3000, 100)),
        ])
        .with_price(price),
    );
    let runs = Runs::default();
    let agent = agent_with(model, &runs, Limits::default()).build().unwrap();
    let (outcome, capture) = traced(run(&agent));
    is_status(&outcome, Status::Completed);
    let f = |s: Option<&str>| s.and_then(|v| v.strip_prefix("f64:")).and_then(|v| v.parse::<f64>().ok()).unwrap();
    let root = &capture.named("invoke_agent")[0].1;
    // 4000 in at $2/M + 300 out at $10/M, as the outcome says.
    assert!((f(root.get("reins.cost_usd")) - 0.011).abs() < 1e-12, "{root:?}");
    assert_eq!(outcome.cost_usd.map(|c| (c * 1e6).round()), Some(11_000.0));
    let chats = capture.named("chat");
    assert!((f(chats[0].1.get("reins.cost_usd")) - 0.004).abs() < 1e-12);
    assert!((f(chats[1].1.get("reins.cost_usd")) - 0.007).abs() < 1e-12);
    // A model of unknown price: no cost attribute at all.
    let runs = Runs::default();
    let agent = agent_with(scripted(vec![answer("done").with_usage(Usage::new(5, 5))]), &runs, Limits::default())
        .build()
        .unwrap();
    let (_, capture) = traced(run(&agent));
    assert_eq!(capture.named("invoke_agent")[0].1.get("reins.cost_usd"), None);
    assert_eq!(capture.named("chat")[0].1.get("reins.cost_usd"), None);
}

/// Whether any span of `capture` holds content (a prompt, messages, arguments or results).
fn has_content(capture: &Capture) -> bool {
    capture.all().iter().any(|(_, s)| {
        s.fields.keys().any(|k| k.ends_with(".messages") || k.contains("arguments") || k.contains("call.result"))
    })
}

#[test]
fn trace_content_sets_the_spans_content_apart_from_the_events() {
    // Events with content (a progress display), spans without: what the CLI does without --events-content.
    let quiet = Agent::builder_shared(scripted(vec![answer("the-secret-answer")]))
        .include_content(true)
        .trace_content(false)
        .build()
        .unwrap();
    let (_, capture) = traced(quiet.run("the-secret-prompt", CancellationToken::new()));
    assert!(!has_content(&capture), "{:#?}", capture.all());
    let told = Agent::builder_shared(scripted(vec![answer("the-secret-answer")])).trace_content(true).build().unwrap();
    let (_, capture) = traced(told.run("the-secret-prompt", CancellationToken::new()));
    assert!(has_content(&capture));
}

#[test]
fn a_sub_agent_carries_content_in_its_spans_when_its_parent_does() {
    let lead = |content: bool| {
        let helper = Agent::builder_shared(scripted(vec![answer("inner-secret")])).name("helper").build().unwrap();
        let tool = reins::AgentTool::new("helper", "Helps.", helper).unwrap();
        let registry = Registry::builder().tool(tool).build().unwrap();
        Agent::builder_shared(scripted(vec![
            calls(vec![call("h1", "helper", json!({"task": "help"}))]),
            answer("done"),
        ]))
        .name("lead")
        .registry(registry)
        .trace_content(content)
        .build()
        .unwrap()
    };
    for content in [false, true] {
        let (outcome, capture) = traced(lead(content).run("go", CancellationToken::new()));
        is_status(&outcome, Status::Completed);
        let helper_run =
            capture.named("invoke_agent").into_iter().find(|(_, r)| r.get("gen_ai.agent.name") == Some("helper"));
        let (helper_id, helper_run) = helper_run.expect("the helper's run span");
        assert_eq!(helper_run.get("gen_ai.output.messages").is_some(), content, "{helper_run:?}");
        let helper_chat = capture.named("chat").into_iter().find(|(_, c)| c.parent == Some(helper_id)).unwrap();
        assert_eq!(helper_chat.1.get("gen_ai.input.messages").is_some_and(|m| m.contains("help")), content);
    }
}

#[test]
fn a_key_a_server_echoed_in_its_error_is_masked_in_the_spans_and_the_outcome() {
    const KEY: &str = "sk-span-secret-1234567";
    let model = scripted(vec![reins::ScriptStep::Fail(reins::ModelError::Rejected {
        status: 400,
        message: format!("invalid request: you sent Bearer {KEY}"),
    })]);
    let masked = reins::MaskedModel::wrap(model, reins::Secrets::new([KEY]));
    let agent = Agent::builder_shared(masked).name("tester").build().unwrap();
    let (outcome, capture) = traced(agent.run("go", CancellationToken::new()));
    is_status(&outcome, Status::ModelError);
    let error = outcome.error.as_deref().unwrap();
    assert!(error.contains("you sent Bearer <redacted>") && !error.contains(KEY), "{error}");
    let chat = &capture.named("chat")[0].1;
    assert!(chat.get("otel.status_description").is_some_and(|d| d.contains("Bearer <redacted>")), "{chat:?}");
    for (_, s) in capture.all() {
        for (k, v) in &s.fields {
            assert!(!v.contains(KEY), "{} has {k} = {v}", s.name);
        }
    }
}
