//! `tracing` spans of a run, after the OpenTelemetry GenAI semantic conventions
//! ([`SEMCONV_VERSION`]): `invoke_agent {agent}` per run, `chat {model}` per model call, `execute_tool
//! {tool}` per tool call and `compaction` per compaction (its summary call a `chat` span inside it).
//!
//! The spans are `tracing` spans at level `INFO` with target [`TARGET`]; nothing is built when no
//! subscriber wants them (the callsites' interest is cached, so a run without one pays a load and a
//! branch per span). A `tracing-opentelemetry` layer turns them into OpenTelemetry spans: `otel.name`
//! names the span, `otel.kind` gives its kind and `otel.status_code` / `otel.status_description` its
//! status. Integers are recorded as `i64` (OpenTelemetry's int), finish reasons as a JSON array of
//! strings (an exporter may turn it into a string array), and content as JSON text in the conventions'
//! message form — only when content is opted in ([`crate::AgentBuilder::include_content`]).
//!
//! Parenting follows the task: the run's span is entered whenever its run is polled, a model call's
//! and a tool call's spans whenever their futures are. So a sub-agent run inside a tool call (in the same
//! task, or in a task spawned with `Instrument::in_current_span`) nests under that call's
//! `execute_tool` span, and a run inside a caller's span nests under it.

use std::fmt::Write as _;

use std::future::Future;
use std::pin::Pin;

use futures_util::future::Either;
use serde_json::{Value, json};
use tracing::field::Empty;
use tracing::instrument::Instrumented;
use tracing::{Instrument, Span};

use crate::cost::Price;
use crate::message::{Message, ToolCall};
use crate::model::{FinishReason, ModelError, ModelIdentity, ModelRequest, ModelResponse};
use crate::outcome::Outcome;
use crate::usage::Usage;

/// The version of the OpenTelemetry semantic conventions (GenAI) the spans follow.
pub const SEMCONV_VERSION: &str = "1.41.0";

/// The `tracing` target of every span of a run.
pub const TARGET: &str = "reins::gen_ai";

/// True when a subscriber may want `INFO` spans (one relaxed load; false while no subscriber was ever
/// set). Every span is built only past this check.
#[inline]
pub(crate) fn on() -> bool {
    tracing::Level::INFO <= tracing::level_filters::STATIC_MAX_LEVEL
        && tracing::Level::INFO <= tracing::level_filters::LevelFilter::current()
}

/// `fut` inside `span` (entered whenever it is polled), or `fut` itself when the span is disabled: no
/// wrapper to poll or drop when nobody listens.
pub(crate) fn within<F: Future>(span: &Span, fut: F) -> Either<F, Instrumented<F>> {
    if span.is_disabled() { Either::Left(fut) } else { Either::Right(fut.instrument(span.clone())) }
}

/// A boxed call's future (a [`crate::Model::generate`]'s) inside `span`, or itself when the span is
/// disabled: the type is the same either way, so an untraced call pays nothing for the choice.
#[inline(always)]
pub(crate) fn boxed_within<'a, T: 'a>(
    span: &Span,
    fut: Pin<Box<dyn Future<Output = T> + Send + 'a>>,
) -> Pin<Box<dyn Future<Output = T> + Send + 'a>> {
    if span.is_disabled() { fut } else { Box::pin(fut.instrument(span.clone())) }
}

/// An unsigned count as OpenTelemetry's signed integer.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn usage(span: &Span, u: &Usage) {
    span.record("gen_ai.usage.input_tokens", int(u.input_tokens));
    span.record("gen_ai.usage.output_tokens", int(u.output_tokens));
    if u.cached_input_tokens != 0 {
        span.record("gen_ai.usage.cache_read.input_tokens", int(u.cached_input_tokens));
    }
    if u.reasoning_tokens != 0 {
        span.record("gen_ai.usage.reasoning.output_tokens", int(u.reasoning_tokens));
    }
}

fn model_info(span: &Span, info: &ModelIdentity) {
    span.record("gen_ai.provider.name", info.provider.as_deref().unwrap_or("_OTHER"));
    if let Some(m) = &info.model {
        span.record("gen_ai.request.model", &**m);
    }
}

/// Records the run's model on the run's span and hands it back (for the spans of its calls).
pub(crate) fn model(span: &Span, info: ModelIdentity) -> ModelIdentity {
    model_info(span, &info);
    info
}

/// Marks `span` failed: `error.type` (a low-cardinality class) and the span's error status.
pub(crate) fn fail(span: &Span, error_type: &str, message: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("error.type", error_type);
    span.record("otel.status_code", "error");
    span.record("otel.status_description", message);
}

/// The conventions' name of a finish reason (`tool_call` for tool calls; the others as Reins names them).
pub(crate) fn finish_name(r: &FinishReason) -> &str {
    match r {
        FinishReason::Stop => "stop",
        FinishReason::ToolCalls => "tool_call",
        FinishReason::Length => "length",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Refusal => "refusal",
        FinishReason::Other(s) => s,
    }
}

/// The `error.type` of a failed model call.
pub(crate) fn model_error_type(e: &ModelError) -> &'static str {
    match e {
        ModelError::Failed(_) => "failed",
        ModelError::Malformed(_) => "malformed_response",
        ModelError::Cancelled => "cancelled",
        ModelError::Exhausted { .. } => "script_exhausted",
        ModelError::Rejected { .. } => "rejected",
        ModelError::Unauthorized { .. } => "unauthorized",
        ModelError::ContextOverflow(_) => "context_overflow",
        ModelError::QuotaExhausted(_) => "quota_exhausted",
    }
}

/// A message in the conventions' form: `{"role", "parts": [...]}`.
fn message_json(m: &Message) -> Value {
    match m {
        Message::User { content, .. } => json!({"role": "user", "parts": [{"type": "text", "content": content}]}),
        Message::Assistant { content, tool_calls, .. } => {
            let mut parts = Vec::with_capacity(tool_calls.len() + 1);
            if !content.is_empty() {
                parts.push(json!({"type": "text", "content": content}));
            }
            parts.extend(tool_calls.iter().map(tool_call_part));
            json!({"role": "assistant", "parts": parts})
        }
        Message::ToolResult(r) => json!({"role": "tool", "parts": [
            {"type": "tool_call_response", "id": r.call_id, "response": r.content}
        ]}),
        Message::Summary { content, .. } => json!({"role": "user", "parts": [{"type": "text", "content": content}]}),
    }
}

fn tool_call_part(c: &ToolCall) -> Value {
    json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments})
}

/// The run's span, `invoke_agent {agent}` (or `invoke_agent` without a name).
#[inline]
pub(crate) fn run_span(agent: Option<&str>, run_id: &str) -> Span {
    if on() { run_span_built(agent, run_id) } else { Span::none() }
}

#[inline(never)]
fn run_span_built(agent: Option<&str>, run_id: &str) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        otel.name = Empty,
        otel.kind = "internal",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.provider.name = Empty,
        gen_ai.request.model = Empty,
        gen_ai.agent.name = agent,
        gen_ai.conversation.id = Empty,
        reins.run.id = run_id,
        reins.session.id = Empty,
        reins.status = Empty,
        reins.steps = Empty,
        reins.tool_calls = Empty,
        reins.compactions = Empty,
        reins.cost_usd = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.reasoning.output_tokens = Empty,
        error.type = Empty,
        gen_ai.system_instructions = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
    );
    if !span.is_disabled() {
        match agent {
            Some(a) => span.record("otel.name", format!("invoke_agent {a}")),
            None => span.record("otel.name", "invoke_agent"),
        };
    }
    span
}

/// What the run's span learns when the run starts: its session, and (content opted in) its instructions
/// and prompt.
pub(crate) fn run_started(
    span: &Span,
    session_id: Option<&str>,
    content: bool,
    instructions: Option<&str>,
    prompt: Option<&Message>,
) {
    if span.is_disabled() {
        return;
    }
    if let Some(s) = session_id {
        span.record("gen_ai.conversation.id", s);
        span.record("reins.session.id", s);
    }
    if content {
        if let Some(i) = instructions {
            span.record("gen_ai.system_instructions", json!([{"type": "text", "content": i}]).to_string());
        }
        if let Some(p) = prompt {
            span.record("gen_ai.input.messages", Value::Array(vec![message_json(p)]).to_string());
        }
    }
}

/// What the run's span records when the run ends: status, counts, usage, cost, the answer (content opted
/// in) and, for every status but `completed`, `error.type` (the status) and an error status.
pub(crate) fn run_ended(span: &Span, outcome: &Outcome, content: bool) {
    if span.is_disabled() {
        return;
    }
    span.record("reins.status", outcome.status.as_str());
    span.record("reins.steps", int(outcome.steps));
    span.record("reins.tool_calls", int(outcome.tool_calls));
    span.record("reins.compactions", int(outcome.compactions));
    let u = &outcome.usage;
    if u.calls_with_usage > 0 {
        span.record("gen_ai.usage.input_tokens", int(u.input_tokens));
        span.record("gen_ai.usage.output_tokens", int(u.output_tokens));
        if u.cached_input_tokens != 0 {
            span.record("gen_ai.usage.cache_read.input_tokens", int(u.cached_input_tokens));
        }
        if u.reasoning_tokens != 0 {
            span.record("gen_ai.usage.reasoning.output_tokens", int(u.reasoning_tokens));
        }
    }
    if let Some(c) = outcome.cost_usd {
        span.record("reins.cost_usd", c);
    }
    if content {
        if let Some(a) = &outcome.answer {
            let m = json!([{"role": "assistant", "parts": [{"type": "text", "content": a}]}]);
            span.record("gen_ai.output.messages", m.to_string());
        }
    }
    if outcome.status != crate::outcome::Status::Completed {
        fail(span, outcome.status.as_str(), outcome.error.as_deref().unwrap_or(outcome.status.as_str()));
    }
}

/// A model call's span, `chat {model}`: a child of the current span (the run's). `step` is the step the
/// call would make; content opted in, the request's instructions and messages are recorded.
#[inline]
pub(crate) fn chat_span(info: &ModelIdentity, step: u64, session_id: Option<&str>) -> Span {
    if on() { chat_span_built(info, step, session_id) } else { Span::none() }
}

#[inline(never)]
fn chat_span_built(info: &ModelIdentity, step: u64, session_id: Option<&str>) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "chat",
        otel.name = Empty,
        otel.kind = "client",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = Empty,
        gen_ai.request.model = Empty,
        server.address = Empty,
        server.port = Empty,
        gen_ai.conversation.id = session_id,
        reins.step = int(step),
        gen_ai.response.model = Empty,
        reins.answered_by = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.reasoning.output_tokens = Empty,
        reins.tool_calls = Empty,
        reins.cost_usd = Empty,
        error.type = Empty,
        gen_ai.system_instructions = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
    );
    if !span.is_disabled() {
        match &info.model {
            Some(m) => span.record("otel.name", format!("chat {m}")),
            None => span.record("otel.name", "chat"),
        };
        model_info(&span, info);
        if let Some(a) = &info.server_address {
            span.record("server.address", &**a);
            if let Some(p) = info.server_port {
                span.record("server.port", i64::from(p));
            }
        }
    }
    span
}

/// Records what a model call was sent (content opted in only: the caller checks).
pub(crate) fn chat_request(span: &Span, request: &ModelRequest) {
    if span.is_disabled() {
        return;
    }
    if let Some(i) = &request.instructions {
        span.record("gen_ai.system_instructions", json!([{"type": "text", "content": &**i}]).to_string());
    }
    let messages: Vec<Value> = request.messages.iter().map(message_json).collect();
    span.record("gen_ai.input.messages", Value::Array(messages).to_string());
}

/// Records a model call's answer: finish reasons, usage, cost (at `price`, when it and the usage are known) and (content opted in) the output message;
/// or the failure. (`gen_ai.response.model` is the model's to record while it answers, inside the span:
/// `reins-providers` does.)
#[inline]
pub(crate) fn chat_response(
    span: &Span,
    response: Result<&ModelResponse, &ModelError>,
    content: bool,
    price: Option<&Price>,
) {
    if !span.is_disabled() {
        chat_response_recorded(span, response, content, price);
    }
}

fn chat_response_recorded(
    span: &Span,
    response: Result<&ModelResponse, &ModelError>,
    content: bool,
    price: Option<&Price>,
) {
    let r = match response {
        Ok(r) => r,
        Err(e) => return fail(span, model_error_type(e), &e.to_string()),
    };
    // A fallback's other model answered: named as the agent file names it (as `model_end`'s `model`). The
    // request attributes stay the run's model (what was asked); `gen_ai.response.model` is the answerer's.
    if let Some(by) = &r.answered_by {
        span.record("reins.answered_by", by.model.as_str());
    }
    if let Some(f) = &r.finish_reason {
        let mut reasons = String::from("[");
        let _ = write!(reasons, "{}", Value::from(finish_name(f)));
        reasons.push(']');
        span.record("gen_ai.response.finish_reasons", reasons);
    }
    if let Some(u) = &r.usage {
        usage(span, u);
    }
    span.record("reins.tool_calls", int(r.tool_calls.len() as u64));
    if let Some((p, u)) = price.zip(r.usage.as_ref()) {
        span.record("reins.cost_usd", p.cost(u));
    }
    if content {
        let mut parts = Vec::with_capacity(r.tool_calls.len() + 1);
        if !r.text.is_empty() {
            parts.push(json!({"type": "text", "content": r.text}));
        }
        parts.extend(r.tool_calls.iter().map(tool_call_part));
        let mut m = json!({"role": "assistant", "parts": parts});
        if let (Some(f), Some(obj)) = (&r.finish_reason, m.as_object_mut()) {
            obj.insert("finish_reason".into(), finish_name(f).into());
        }
        span.record("gen_ai.output.messages", Value::Array(vec![m]).to_string());
    }
}

/// A tool call's span, `execute_tool {tool}`, with the arguments when content is opted in.
#[inline]
pub(crate) fn tool_span(call: &ToolCall, content: bool) -> Span {
    if on() { tool_span_built(call, content) } else { Span::none() }
}

#[inline(never)]
fn tool_span_built(call: &ToolCall, content: bool) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "execute_tool",
        otel.name = Empty,
        otel.kind = "internal",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = call.name.as_str(),
        gen_ai.tool.call.id = &*call.id,
        gen_ai.tool.type = "function",
        error.type = Empty,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("execute_tool {}", call.name));
        if content {
            span.record("gen_ai.tool.call.arguments", call.arguments.to_string());
        }
    }
    span
}

/// Records a tool call's result: an error class and status when it failed, the result text when content
/// is opted in (and the call succeeded, as the conventions say). A failed call's status message is its
/// error text only with content opted in (the text is the tool's output: a path, a file's line, what a
/// server said), else the error class alone.
pub(crate) fn tool_result(span: &Span, is_error: bool, text: &str, error_type: &str, content: bool) {
    if span.is_disabled() {
        return;
    }
    if is_error {
        fail(span, error_type, if content { text } else { error_type });
    } else if content {
        span.record("gen_ai.tool.call.result", text);
    }
}

/// A compaction's span (`compaction`): the summary call's `chat` span runs inside it.
#[inline]
pub(crate) fn compaction_span(step: u64, items: u64, before: u64) -> Span {
    if on() { compaction_span_built(step, items, before) } else { Span::none() }
}

#[inline(never)]
fn compaction_span_built(step: u64, items: u64, before: u64) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "compaction",
        otel.kind = "internal",
        otel.status_code = Empty,
        otel.status_description = Empty,
        reins.step = int(step),
        reins.compaction.items = int(items),
        reins.compaction.size_before = int(before),
        reins.compaction.size_after = Empty,
        reins.compaction.fallback = Empty,
        error.type = Empty,
    );
    span
}

/// Records how a compaction ended.
pub(crate) fn compaction_done(span: &Span, after: u64, fallback: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    span.record("reins.compaction.size_after", int(after));
    if let Some(f) = fallback {
        span.record("reins.compaction.fallback", f);
    }
}

/// Marks a tool call's span `aborted` if the call's future is dropped before it finished (the batch was
/// cancelled or ran out of time).
pub(crate) struct Unfinished<'a>(Option<&'a Span>);

impl<'a> Unfinished<'a> {
    pub(crate) fn new(span: &'a Span) -> Self {
        Unfinished((!span.is_disabled()).then_some(span))
    }

    /// The call finished: nothing to mark.
    pub(crate) fn finished(mut self) {
        self.0 = None;
    }
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let Some(span) = self.0.take() {
            fail(span, "aborted", "the call did not finish");
        }
    }
}
