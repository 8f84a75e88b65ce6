//! What the three wire formats share: failures and their classification, tool arguments, usage, deltas,
//! and a readable summary of an error body (JSON or an HTML page).

use std::time::Duration;

use reins::{Delta, DeltaSink, FinishReason, ModelError, ModelResponse, ToolCall, Usage};
use serde_json::Value;

use crate::retry::retryable_status;

/// How an attempt failed, and so whether another attempt may help.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum FailKind {
    /// Worth another attempt: connection errors, 408/409/429/5xx, broken, stalled or early-ended streams.
    Transient,
    /// The request itself was refused (400, 404, 422, ...).
    Rejected(u16),
    /// The credentials were refused (401, 403).
    Unauthorized(u16),
    /// The conversation does not fit the context window.
    ContextOverflow,
    /// The account's quota or credit is used up.
    Quota,
    /// The response does not have the documented shape.
    Malformed,
    /// A final failure the provider reported (an error event in a stream, a failed response).
    Failed,
}

/// One failed attempt.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Failure {
    pub kind: FailKind,
    pub message: String,
    /// How long the server asked us to wait before the next attempt.
    pub retry_after: Option<Duration>,
}

impl Failure {
    pub fn new(kind: FailKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), retry_after: None }
    }
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(FailKind::Transient, message)
    }
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::new(FailKind::Malformed, message)
    }
    pub fn retryable(&self) -> bool {
        self.kind == FailKind::Transient
    }

    /// The error the run reports, after `attempts` attempts.
    pub fn into_model_error(self, attempts: u32) -> ModelError {
        match self.kind {
            FailKind::Transient if attempts > 1 => {
                ModelError::Failed(format!("{} (gave up after {attempts} attempts)", self.message))
            }
            FailKind::Transient | FailKind::Failed => ModelError::Failed(self.message),
            FailKind::Rejected(status) => ModelError::Rejected { status, message: self.message },
            FailKind::Unauthorized(status) => ModelError::Unauthorized { status, message: self.message },
            FailKind::ContextOverflow => ModelError::ContextOverflow(self.message),
            FailKind::Quota => ModelError::QuotaExhausted(self.message),
            FailKind::Malformed => ModelError::Malformed(self.message),
        }
    }
}

/// Delivers deltas to the current run's sink and remembers whether any was delivered; counts an attempt's
/// content (text, reasoning, tool names and arguments, in bytes) and keeps its text and reasoning, which is what a
/// stream cut at the response cap answers with.
pub(crate) struct Emit {
    sink: Option<DeltaSink>,
    pub emitted: bool,
    /// This attempt's content so far, in bytes.
    pub content: usize,
    text: String,
    reasoning: String,
    /// How much of the text and of the reasoning is kept (what a cut answer can hold).
    keep: usize,
}

/// Appends `more` to `kept` within `keep` bytes, cut on a character boundary.
fn push_within(kept: &mut String, more: &str, keep: usize) {
    let mut room = keep.saturating_sub(kept.len()).min(more.len());
    while !more.is_char_boundary(room) {
        room -= 1;
    }
    kept.push_str(&more[..room]);
}

impl Emit {
    pub fn new(sink: Option<DeltaSink>) -> Self {
        Self { sink, emitted: false, content: 0, text: String::new(), reasoning: String::new(), keep: 0 }
    }
    /// A new attempt: nothing of its content arrived yet; of its text and reasoning, `keep` bytes each are kept.
    pub fn begin_attempt(&mut self, keep: usize) {
        self.content = 0;
        self.text.clear();
        self.reasoning.clear();
        self.keep = keep;
    }
    pub fn send(&mut self, delta: Delta) {
        if let Some(s) = &self.sink {
            s.send(&delta);
            self.emitted = true;
        }
    }
    pub fn text(&mut self, text: &str) {
        self.content = self.content.saturating_add(text.len());
        push_within(&mut self.text, text, self.keep);
        if !text.is_empty() && self.sink.is_some() {
            self.send(Delta::Text { text: text.to_owned() });
        }
    }
    pub fn reasoning(&mut self, text: &str) {
        self.content = self.content.saturating_add(text.len());
        push_within(&mut self.reasoning, text, self.keep);
        if !text.is_empty() && self.sink.is_some() {
            self.send(Delta::Reasoning { text: text.to_owned() });
        }
    }
    pub fn call(&mut self, index: usize, id: &str, name: &str) {
        self.content = self.content.saturating_add(name.len().max(1));
        if self.sink.is_some() {
            self.send(Delta::ToolCall { index, id: id.to_owned(), name: name.to_owned() });
        }
    }
    pub fn arguments(&mut self, index: usize, fragment: &str) {
        self.content = self.content.saturating_add(fragment.len());
        if !fragment.is_empty() && self.sink.is_some() {
            self.send(Delta::ToolArguments { index, fragment: fragment.to_owned() });
        }
    }
    /// The answer of a stream cut once its content passed the cap: the text and reasoning that arrived (each within
    /// the bytes kept), no tool call (a call cut off is no proposal: it never runs), finish reason `length` (the run
    /// ends `truncated`, as when the server stops at the response cap), usage unknown.
    pub fn cut(&mut self) -> ModelResponse {
        let text = std::mem::take(&mut self.text);
        let reasoning = std::mem::take(&mut self.reasoning);
        ModelResponse {
            text,
            reasoning: (!reasoning.is_empty()).then_some(reasoning),
            finish_reason: Some(FinishReason::Length),
            ..ModelResponse::default()
        }
    }
}

/// Tool arguments that arrived as JSON text. Empty text is no arguments (`{}`); text that is not JSON is
/// delivered as the raw string, so that schema validation refuses the call and the model is told what it
/// sent, instead of the run failing.
pub(crate) fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// A tool call of a content-block API (Anthropic's `tool_use`, Bedrock's `toolUse`): its arguments from the streamed
/// JSON text when there is any, else the complete response's `input` object (`{}` when absent or null); a call
/// that came without an id is given `PREFIX_N` (N its index among the response's calls).
pub(crate) fn block_tool_call(
    id: String,
    name: String,
    json: &str,
    input: Option<Value>,
    prefix: &str,
    n: usize,
) -> ToolCall {
    let arguments = if !json.trim().is_empty() {
        parse_arguments(json)
    } else {
        match input {
            Some(Value::Null) | None => Value::Object(Default::default()),
            Some(other) => other,
        }
    };
    let id = if id.is_empty() { format!("{prefix}_{n}") } else { id };
    ToolCall::new(id, name, arguments)
}

/// Arguments as JSON text for the wire: a raw string (unparseable arguments) goes back as it came.
pub(crate) fn arguments_text(args: &Value) -> String {
    match args {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A tool's schema as the wire formats want it: an object schema (`true` becomes `{"type":"object"}`).
pub(crate) fn schema_object(schema: &Value) -> Value {
    match schema {
        Value::Object(_) => schema.clone(),
        _ => serde_json::json!({"type": "object"}),
    }
}

/// The largest float taken as a token count: every integer up to it has an exact `f64`.
const MAX_FLOAT_COUNT: f64 = 9_007_199_254_740_992.0; // 2^53

/// A token count at `path` of a usage object: a JSON integer from 0, or a float with no fraction up to 2^53
/// (`500.0`); an absent or null field is 0. Anything else — a string (`"100"`), a negative number, a fraction, a float
/// out of range (`1e30`), a boolean, an array — is malformed usage: `Err` names the field and what it held.
pub(crate) fn count(v: &Value, path: &[&str]) -> Result<u64, String> {
    let mut cur = v;
    for key in path {
        cur = &cur[*key];
    }
    let bad = || format!("{} is {}", path.join("."), snippet(&cur.to_string(), 40));
    match cur {
        Value::Null => Ok(0),
        Value::Number(n) => match (n.as_u64(), n.as_f64()) {
            (Some(u), _) => Ok(u),
            (None, Some(f)) if f.is_finite() && (0.0..=MAX_FLOAT_COUNT).contains(&f) && f.fract() == 0.0 => {
                Ok(f as u64)
            }
            _ => Err(bad()),
        },
        _ => Err(bad()),
    }
}

/// The usage a response reported: its counts, or `None` — with a warning on the model call's span — when the
/// usage object is not an object or one of its counts is malformed (see [`count`]). Such a call counts among those
/// that reported no usage (`calls_without_usage`), never as zero tokens, so that a token or cost limit is not
/// fooled into seeing nothing spent.
pub(crate) fn checked_usage(u: &Value, counts: impl FnOnce(&Value) -> Result<Usage, String>) -> Option<Usage> {
    let why = match u {
        Value::Null => return None,
        Value::Object(_) => match counts(u) {
            Ok(usage) => return Some(usage),
            Err(why) => why,
        },
        other => format!("usage is {}", snippet(&other.to_string(), 40)),
    };
    tracing::warn!(
        target: "reins::provider",
        "malformed usage in the response ({why}): the call counts as one that reported no usage"
    );
    None
}

/// Usage with the parts clamped so that it is always consistent (cached ≤ input, reasoning ≤ output).
pub(crate) fn usage(input: u64, output: u64, cached: u64, reasoning: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cached_input_tokens: cached.min(input),
        cache_write_tokens: 0,
        reasoning_tokens: reasoning.min(output),
    }
}

/// The string at `v[key]`, or "".
pub(crate) fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

/// Parses one JSON event of a stream.
pub(crate) fn event_json(event: &str, data: &str) -> Result<Value, Failure> {
    serde_json::from_str(data).map_err(|e| {
        let what = if event.is_empty() { String::new() } else { format!(" ({event})") };
        Failure::malformed(format!("invalid JSON in a stream event{what}: {e}: {}", snippet(data, 120)))
    })
}

/// Classifies an error object a provider sent inside a 200 response or a stream
/// (`{"type", "code", "message"}`, possibly wrapped in `{"error": ...}`).
pub(crate) fn error_object(v: &Value) -> Failure {
    let e = if v["error"].is_object() { &v["error"] } else { v };
    let message = e["message"].as_str().map(str::to_owned).unwrap_or_else(|| e.to_string());
    let code = e["code"].as_str().unwrap_or("");
    let kind = e["type"].as_str().unwrap_or("");
    let what = if !code.is_empty() { code } else { kind };
    let text = if what.is_empty() { message.clone() } else { format!("{what}: {message}") };
    if is_quota(code, kind, &message) {
        return Failure::new(FailKind::Quota, text);
    }
    if is_context_overflow(code, kind, &message) {
        return Failure::new(FailKind::ContextOverflow, text);
    }
    let transient = [
        "overloaded_error",
        "api_error",
        "rate_limit_error",
        "rate_limit_exceeded",
        "server_error",
        "internal_error",
        "server_is_overloaded",
        "timeout_error",
    ];
    if transient.contains(&code) || transient.contains(&kind) {
        Failure::transient(format!("the provider reported a transient error: {text}"))
    } else {
        Failure::new(FailKind::Failed, format!("the provider reported an error: {text}"))
    }
}

fn is_quota(code: &str, kind: &str, message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    code == "insufficient_quota"
        || kind == "insufficient_quota"
        || m.contains("exceeded your current quota")
        || m.contains("credit balance is too low")
}

fn is_context_overflow(code: &str, kind: &str, message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    code == "context_length_exceeded"
        || kind == "exceed_context_size_error"
        || code == "exceed_context_size_error"
        || m.contains("maximum context length")
        || m.contains("context window")
        || m.contains("prompt is too long")
        || m.contains("exceeds the available context size")
        || m.contains("context_length_exceeded")
        // Gemini: "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
        || m.contains("exceeds the maximum number of tokens allowed")
}

/// Classifies an HTTP error response.
pub(crate) fn classify_status(status: u16, reason: &str, content_type: &str, body: &[u8]) -> Failure {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let (message, code, kind) = match &parsed {
        Some(v) if v.is_object() => {
            let e = if v["error"].is_object() { &v["error"] } else { v };
            let message = e["message"]
                .as_str()
                .or_else(|| v["message"].as_str())
                .or_else(|| v["error"].as_str())
                .map(str::to_owned)
                .unwrap_or_else(|| snippet(&String::from_utf8_lossy(body), 300));
            (message, e["code"].as_str().unwrap_or("").to_owned(), e["type"].as_str().unwrap_or("").to_owned())
        }
        _ => (body_summary(content_type, body), String::new(), String::new()),
    };
    let label = if reason.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status} {reason}") };
    let what = if !code.is_empty() {
        format!(" [{code}]")
    } else if !kind.is_empty() {
        format!(" [{kind}]")
    } else {
        String::new()
    };
    let text = format!("{label}{what}: {message}");
    if status == 402 || is_quota(&code, &kind, &message) {
        return Failure::new(FailKind::Quota, text);
    }
    if matches!(status, 400 | 413 | 422) && is_context_overflow(&code, &kind, &message) {
        return Failure::new(FailKind::ContextOverflow, text);
    }
    match status {
        401 | 403 => Failure::new(FailKind::Unauthorized(status), message_for_auth(&message)),
        s if retryable_status(s) => Failure::transient(text),
        s => Failure::new(FailKind::Rejected(s), message),
    }
}

fn message_for_auth(message: &str) -> String {
    if message.is_empty() { "the server refused the credentials".to_owned() } else { message.to_owned() }
}

/// A short, readable account of a body that is not a JSON error: the title of an HTML page, or the
/// start of the text.
pub(crate) fn body_summary(content_type: &str, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(64 * 1024)]);
    let trimmed = text.trim_start();
    let html = content_type.contains("html") || trimmed.starts_with('<');
    if trimmed.is_empty() {
        return "(empty body)".to_owned();
    }
    if html {
        let lower = trimmed.to_ascii_lowercase();
        if let (Some(a), Some(b)) = (lower.find("<title>"), lower.find("</title>")) {
            if a + 7 <= b {
                let title = trimmed[a + 7..b].split_whitespace().collect::<Vec<_>>().join(" ");
                if !title.is_empty() {
                    return format!("an HTML page titled {:?}", snippet(&title, 120));
                }
            }
        }
        return format!("an HTML page: {}", snippet(&strip_tags(trimmed), 200));
    }
    snippet(trimmed, 300)
}

fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                out.push(' ');
            }
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first `max` characters of `s` on one line, with an ellipsis when cut.
pub(crate) fn snippet(s: &str, max: usize) -> String {
    let one_line: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).take(max + 1).collect();
    if one_line.chars().count() > max {
        let cut: String = one_line.chars().take(max).collect();
        format!("{cut}…")
    } else {
        one_line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn a_block_tool_call_takes_streamed_text_first_then_the_input_and_names_a_call_without_id() {
        let streamed = block_tool_call("t1".into(), "f".into(), r#"{"a":1}"#, Some(json!({"b": 2})), "toolu", 0);
        assert_eq!((&*streamed.id, &streamed.arguments), ("t1", &json!({"a": 1})));
        let whole = block_tool_call(String::new(), "f".into(), " ", Some(json!({"b": 2})), "tooluse", 3);
        assert_eq!((&*whole.id, &whole.arguments), ("tooluse_3", &json!({"b": 2})));
        for input in [None, Some(Value::Null)] {
            assert_eq!(block_tool_call("t".into(), "f".into(), "", input, "p", 0).arguments, json!({}));
        }
        let broken = block_tool_call("t".into(), "f".into(), r#"{"a":"#, None, "p", 0);
        assert_eq!(broken.arguments, json!(r#"{"a":"#), "unparseable text is passed on for validation to refuse");
    }

    #[test]
    fn arguments() {
        assert_eq!(parse_arguments(""), json!({}));
        assert_eq!(parse_arguments("  "), json!({}));
        assert_eq!(parse_arguments(r#"{"a":1}"#), json!({"a": 1}));
        assert_eq!(parse_arguments(r#"{"a":"#), json!(r#"{"a":"#));
        assert_eq!(arguments_text(&json!(r#"{"a":"#)), r#"{"a":"#);
        assert_eq!(arguments_text(&json!({"a": 1})), r#"{"a":1}"#);
    }

    /// A cut answer: the text within the bytes kept, on a character boundary; every kind of content counted; no
    /// tool call; finish reason `length`.
    #[test]
    fn a_cut_answer_keeps_text_within_the_cap() {
        let mut e = Emit::new(None);
        e.begin_attempt(5);
        e.text("éé");
        e.text("ééé");
        e.reasoning("thinking");
        e.call(0, "id", "tool");
        e.arguments(0, "{\"a\":");
        assert_eq!(e.content, 4 + 6 + 8 + 4 + 5);
        let r = e.cut();
        assert_eq!(r.text, "éé");
        assert_eq!(r.reasoning.as_deref(), Some("think"));
        assert!(r.tool_calls.is_empty() && r.usage.is_none());
        assert_eq!(r.finish_reason, Some(FinishReason::Length));
        e.begin_attempt(5);
        assert_eq!(e.content, 0);
        assert_eq!(e.cut().text, "");
    }

    #[test]
    fn status_classification() {
        let j = |v: Value| serde_json::to_vec(&v).unwrap();
        let f = classify_status(
            400,
            "Bad Request",
            "application/json",
            &j(
                json!({"error": {"message": "This model's maximum context length is 128000 tokens", "code": "context_length_exceeded"}}),
            ),
        );
        assert_eq!(f.kind, FailKind::ContextOverflow);
        let f = classify_status(
            400,
            "",
            "application/json",
            &j(
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}}),
            ),
        );
        assert_eq!(f.kind, FailKind::ContextOverflow);
        let f = classify_status(
            429,
            "",
            "application/json",
            &j(
                json!({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}}),
            ),
        );
        assert_eq!(f.kind, FailKind::Quota);
        let f = classify_status(
            400,
            "",
            "application/json",
            &j(
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": "Your credit balance is too low to access the Anthropic API."}}),
            ),
        );
        assert_eq!(f.kind, FailKind::Quota);
        let f = classify_status(
            429,
            "Too Many Requests",
            "application/json",
            &j(json!({"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}})),
        );
        assert_eq!(f.kind, FailKind::Transient);
        assert!(
            f.message.contains("HTTP 429 Too Many Requests [rate_limit_exceeded]: Rate limit reached"),
            "{}",
            f.message
        );
        let f = classify_status(
            401,
            "",
            "application/json",
            &j(json!({"error": {"message": "Incorrect API key provided"}})),
        );
        assert_eq!(f.kind, FailKind::Unauthorized(401));
        let f = classify_status(
            404,
            "",
            "application/json",
            &j(json!({"error": {"message": "The model `x` does not exist"}})),
        );
        assert_eq!(f.kind, FailKind::Rejected(404));
        let f = classify_status(
            413,
            "",
            "application/json",
            &j(
                json!({"error": {"type": "request_too_large", "message": "Request exceeds the maximum allowed number of bytes"}}),
            ),
        );
        assert_eq!(f.kind, FailKind::Rejected(413));
        let f = classify_status(
            529,
            "",
            "application/json",
            &j(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
        );
        assert_eq!(f.kind, FailKind::Transient);
    }

    #[test]
    fn html_pages_are_summarized() {
        let page =
            b"<!DOCTYPE html><html><head><title>502 Bad\n Gateway</title></head><body><h1>oops</h1></body></html>";
        let f = classify_status(502, "Bad Gateway", "text/html", page);
        assert_eq!(f.kind, FailKind::Transient);
        assert_eq!(f.message, "HTTP 502 Bad Gateway: an HTML page titled \"502 Bad Gateway\"");
        assert_eq!(body_summary("text/html", b"<p>Hello <b>there</b></p>"), "an HTML page: Hello there");
        assert_eq!(body_summary("text/plain", b""), "(empty body)");
    }

    #[test]
    fn error_objects() {
        assert_eq!(
            error_object(&json!({"type": "overloaded_error", "message": "Overloaded"})).kind,
            FailKind::Transient
        );
        assert_eq!(
            error_object(&json!({"error": {"code": "context_length_exceeded", "message": "too long"}})).kind,
            FailKind::ContextOverflow
        );
        let f = error_object(&json!({"code": "invalid_prompt", "message": "nope"}));
        assert_eq!(f.kind, FailKind::Failed);
        assert_eq!(f.message, "the provider reported an error: invalid_prompt: nope");
    }

    #[test]
    fn failure_to_model_error() {
        assert_eq!(
            Failure::transient("HTTP 500").into_model_error(4),
            ModelError::Failed("HTTP 500 (gave up after 4 attempts)".into())
        );
        assert_eq!(Failure::new(FailKind::Quota, "q").into_model_error(1), ModelError::QuotaExhausted("q".into()));
        assert_eq!(
            Failure::new(FailKind::ContextOverflow, "c").into_model_error(1).to_string(),
            "the conversation exceeds the model's context window: c"
        );
    }

    /// Values a server might put where a token count belongs.
    fn count_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (0u64..1 << 60).prop_map(|n| Value::from(n as f64)),
            any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            prop_oneof![Just(500.0), Just(1e30), Just(-5.0), Just(0.5), Just(-0.0), Just(9_007_199_254_740_994.0)]
                .prop_map(Value::from),
            "[0-9]{1,4}".prop_map(Value::from),
            any::<bool>().prop_map(Value::from),
            Just(Value::Null),
            Just(json!([1])),
        ]
    }

    /// What [`count`] must make of `v`, by the rule written out once more.
    fn expected_count(v: &Value) -> Option<u64> {
        match v {
            Value::Null => Some(0),
            Value::Number(n) if n.is_u64() => n.as_u64(),
            Value::Number(n) if n.is_i64() => None,
            Value::Number(n) => {
                let f = n.as_f64()?;
                ((0.0..=9_007_199_254_740_992.0).contains(&f) && f.trunc() == f).then_some(f as u64)
            }
            _ => None,
        }
    }

    proptest! {
        #[test]
        fn classification_never_panics(status in 100u16..600, body in proptest::collection::vec(any::<u8>(), 0..300), ct in "[a-z/]{0,20}") {
            let f = classify_status(status, "", &ct, &body);
            prop_assert!(!f.message.is_empty());
        }

        #[test]
        fn arguments_round_trip(raw in "\\PC{0,40}") {
            let v = parse_arguments(&raw);
            if raw.trim().is_empty() {
                prop_assert_eq!(v, json!({}));
            } else if serde_json::from_str::<Value>(&raw).is_err() {
                prop_assert_eq!(arguments_text(&v), raw);
            }
        }

        /// Any JSON value as a token count: a count exactly when it is an integer from 0 or a float with no
        /// fraction up to 2^53 (then that number), 0 when null; anything else is malformed (issue 22, item 10).
        #[test]
        fn usage_counts(v in count_value()) {
            let want = expected_count(&v);
            let got = count(&json!({"n": v.clone()}), &["n"]);
            prop_assert_eq!(got.clone().ok(), want, "{} gave {:?}", v, got);
        }

        /// Each adapter's usage parser: usage exactly when every count it reads is one, never zero for a
        /// malformed one.
        #[test]
        fn usage_objects(values in proptest::collection::vec(count_value(), 4)) {
            type Parser = fn(&Value) -> Option<Usage>;
            let adapters: [(Parser, [&str; 4]); 3] = [
                (crate::openai_chat::parse_usage, ["prompt_tokens", "completion_tokens", "prompt_tokens_details.cached_tokens", "completion_tokens_details.reasoning_tokens"]),
                (crate::openai_responses::parse_usage, ["input_tokens", "output_tokens", "input_tokens_details.cached_tokens", "output_tokens_details.reasoning_tokens"]),
                (crate::anthropic::parse_usage, ["input_tokens", "output_tokens", "cache_read_input_tokens", "output_tokens_details.thinking_tokens"]),
            ];
            for (parse, fields) in adapters {
                let mut u = json!({});
                for (field, v) in fields.iter().zip(&values) {
                    match field.split_once('.') {
                        Some((outer, inner)) => u[outer] = json!({inner: v.clone()}),
                        None => u[*field] = v.clone(),
                    }
                }
                let counts: Option<Vec<u64>> = values.iter().map(expected_count).collect();
                let got = parse(&u);
                prop_assert_eq!(got.is_some(), counts.is_some(), "{} gave {:?}", u, got);
                if let (Some(usage), Some(c)) = (got, counts) {
                    prop_assert!(usage.input_tokens >= c[0], "{}: {:?}", u, usage);
                    prop_assert_eq!(usage.output_tokens, c[1]);
                }
            }
        }

        #[test]
        fn snippet_bounds(s in "\\PC{0,300}", max in 1usize..100) {
            prop_assert!(snippet(&s, max).chars().count() <= max + 1);
        }
    }
}
