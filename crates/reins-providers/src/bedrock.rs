//! Amazon Bedrock's Converse API (`POST {base}/model/{modelId}/converse`, and `/converse-stream` streamed in the
//! binary `application/vnd.amazon.eventstream` framing, decoded by `aws-smithy-eventstream`).
//!
//! **Auth.** A Bedrock API key (`AWS_BEARER_TOKEN_BEDROCK`) goes as `Authorization: Bearer KEY` and is preferred
//! when set; otherwise every attempt is signed with SigV4 (`aws-sigv4`, service `bedrock`) from
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN` (or [`ProviderBuilder::aws_credentials`]).
//! The region comes from [`ProviderBuilder::aws_region`], `AWS_REGION`, `AWS_DEFAULT_REGION` or a base URL of the
//! form `bedrock-runtime.REGION.amazonaws.com`; the base URL defaults to `https://bedrock-runtime.{region}.amazonaws.com`
//! (`AWS_ENDPOINT_URL_BEDROCK_RUNTIME` or the base URL setting override it). Profile files are not read.
//!
//! **Body.** Instructions go in `system` blocks, tools in `toolConfig.tools[].toolSpec` with `inputSchema.json`,
//! calls and results as `toolUse` / `toolResult` blocks: every `toolUse` of an assistant turn is answered by a
//! `toolResult` with the same id in the next user turn, the results first in it. Images travel as `image` blocks
//! with base64 `bytes` (a tool's in its `toolResult` content). The thinking budget goes in
//! `additionalModelRequestFields.thinking` (Claude's field); `reasoningContent` blocks (signed `reasoningText`,
//! `redactedContent`) are recorded as reasoning items tagged `bedrock` and sent back first in their turn,
//! unchanged. With prompt caching on and a model that takes them (Claude, Nova), `cachePoint` blocks go where the
//! Anthropic adapter puts its breakpoints.
//!
//! [`ProviderBuilder::aws_credentials`]: crate::ProviderBuilder::aws_credentials
//! [`ProviderBuilder::aws_region`]: crate::ProviderBuilder::aws_region

use std::collections::BTreeMap;
use std::time::SystemTime;

use bytes::{Buf, BytesMut};
use reins::{FinishReason, Message, ModelRequest, ModelResponse, Usage};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use crate::provider::{Api, ProviderError, Settings, ToolChoice};
use crate::sse::SseEvent;
use crate::wire::{
    Emit, FailKind, Failure, block_tool_call, body_summary, checked_usage, count, event_json, parse_arguments,
    schema_object, snippet, str_at, usage,
};

/// The SigV4 signing name of the Bedrock runtime.
pub const SIGNING_NAME: &str = "bedrock";

/// The environment variables whose values are secrets (masked in whatever a server answers).
pub const SECRET_ENV: [&str; 3] = ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK"];

/// The `Content-Type` of a ConverseStream answer.
pub const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// AWS credentials for SigV4 (the secret parts never shown by `Debug`).
#[derive(Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key_id: String,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: String,
    /// `AWS_SESSION_TOKEN`, for temporary credentials.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"**")
            .field("session_token", &self.session_token.as_ref().map(|_| "**"))
            .finish()
    }
}

impl AwsCredentials {
    /// The credentials the standard variables give (`lookup` reads one: `std::env::var` in a real run), when both
    /// the key id and the secret are set.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Option<AwsCredentials> {
        let get = |k: &str| lookup(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        Some(AwsCredentials {
            access_key_id: get("AWS_ACCESS_KEY_ID")?,
            secret_access_key: get("AWS_SECRET_ACCESS_KEY")?,
            session_token: get("AWS_SESSION_TOKEN"),
        })
    }
}

/// The region: the one given, `AWS_REGION`, `AWS_DEFAULT_REGION`, else the one a base URL
/// `https://bedrock-runtime.REGION.amazonaws.com` names.
pub fn region(given: Option<&str>, base_url: Option<&str>, lookup: impl Fn(&str) -> Option<String>) -> Option<String> {
    let get = |k: &str| lookup(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    given.map(str::to_owned).or_else(|| get("AWS_REGION")).or_else(|| get("AWS_DEFAULT_REGION")).or_else(|| {
        let host = reqwest::Url::parse(base_url?).ok()?.host_str()?.to_owned();
        let rest = host.strip_prefix("bedrock-runtime.")?;
        let region = rest.split('.').next()?;
        (!region.is_empty() && rest.contains(".amazonaws.")).then(|| region.to_owned())
    })
}

/// Signs each attempt with SigV4.
#[derive(Clone, Debug)]
pub(crate) struct Signer {
    credentials: AwsCredentials,
    region: String,
}

/// What [`setup`] settles for a Bedrock provider: the base URL and, without a bearer key, the signer.
pub(crate) struct Setup {
    pub base_url: String,
    pub signer: Option<Signer>,
}

/// The base URL and the auth of a Bedrock provider. A bearer key wins; else SigV4 credentials (given, or from the
/// environment); else only a local base URL (a test server) goes unsigned.
pub(crate) fn setup(
    base_url: Option<&str>,
    bearer: bool,
    credentials: Option<AwsCredentials>,
    given_region: Option<&str>,
) -> Result<Setup, ProviderError> {
    let env = |k: &str| std::env::var(k).ok();
    let base_env = env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME").filter(|v| !v.trim().is_empty());
    let base_given = base_url.map(str::to_owned).or(base_env);
    let region = region(given_region, base_given.as_deref(), env);
    let base_url = match (base_given, &region) {
        (Some(url), _) => url,
        (None, Some(r)) => format!("https://bedrock-runtime.{r}.amazonaws.com"),
        (None, None) => {
            return Err(ProviderError::InvalidSetting(
                "bedrock: no region: set AWS_REGION (or AWS_DEFAULT_REGION), or the base URL".into(),
            ));
        }
    };
    let credentials = if bearer { None } else { credentials.or_else(|| AwsCredentials::from_lookup(env)) };
    let local = reqwest::Url::parse(base_url.trim()).is_ok_and(|u| crate::provider::is_local(&u));
    let signer = match credentials {
        Some(credentials) => {
            let region = region.unwrap_or_else(|| "us-east-1".to_owned());
            Some(Signer { credentials, region })
        }
        None if bearer || local => None,
        None => {
            return Err(ProviderError::MissingApiKey {
                env: "AWS_BEARER_TOKEN_BEDROCK, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".into(),
            });
        }
    };
    Ok(Setup { base_url, signer })
}

impl Signer {
    /// The headers that sign one attempt (`authorization`, `x-amz-date`, `x-amz-security-token`): over the method,
    /// the URL (its path escaped once more, as SigV4 wants for every service but S3), `host`, `content-type` and
    /// the body's SHA-256.
    pub(crate) fn sign(&self, url: &reqwest::Url, body: &[u8], now: SystemTime) -> Result<HeaderMap, Failure> {
        use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
        let failed =
            |e: &dyn std::fmt::Display| Failure::new(FailKind::Failed, format!("cannot sign the request: {e}"));
        let c = &self.credentials;
        let identity = aws_credential_types::Credentials::new(
            &c.access_key_id,
            &c.secret_access_key,
            c.session_token.clone(),
            None,
            "reins",
        )
        .into();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(SIGNING_NAME)
            .time(now)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| failed(&e))?
            .into();
        let headers = [("content-type", "application/json")];
        let request = SignableRequest::new("POST", url.as_str(), headers.into_iter(), SignableBody::Bytes(body))
            .map_err(|e| failed(&e))?;
        let (instructions, _) = sign(request, &params).map_err(|e| failed(&e))?.into_parts();
        let mut out = HeaderMap::new();
        for (name, value) in instructions.headers() {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| failed(&e))?;
            let mut value = HeaderValue::from_str(value).map_err(|e| failed(&e))?;
            value.set_sensitive(name.as_str() != "x-amz-date");
            out.insert(name, value);
        }
        Ok(out)
    }
}

/// `s` escaped as one URI label (everything but `A-Z a-z 0-9 - . _ ~`), as the AWS SDKs send a model id
/// (`anthropic.claude-…-v1:0` → `…-v1%3A0`; an ARN's `/` too).
fn escape_label(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The endpoint under `base` (no trailing slash): `{base}/model/{modelId}/converse`, or `/converse-stream`.
pub(crate) fn endpoint(base: &str, model: &str, stream: bool) -> Result<reqwest::Url, String> {
    let method = if stream { "converse-stream" } else { "converse" };
    reqwest::Url::parse(&format!("{base}/model/{}/{method}", escape_label(model.trim()))).map_err(|e| e.to_string())
}

/// Tool-use input must be an object; arguments that were not (unparseable text) go back as `{}`.
fn input_object(args: &Value) -> Value {
    match args {
        Value::Object(_) => args.clone(),
        Value::String(s) => match parse_arguments(s) {
            v @ Value::Object(_) => v,
            _ => json!({}),
        },
        _ => json!({}),
    }
}

/// An image block (`png`, `jpeg`, `gif` or `webp`, base64 bytes).
fn image_block(image: &reins::Image) -> Value {
    let format = image.media_type().strip_prefix("image/").unwrap_or("png");
    json!({"image": {"format": format, "source": {"bytes": image.base64()}}})
}

/// A user turn's blocks: the text (when there is any) and an image block per image.
fn user_blocks(text: &str, images: &[reins::Image]) -> Vec<Value> {
    let mut blocks = Vec::with_capacity(images.len() + 1);
    if !text.is_empty() {
        blocks.push(json!({"text": text}));
    }
    blocks.extend(images.iter().map(image_block));
    blocks
}

/// Appends blocks to the conversation as the user's, in the last message when that is the user's already (the
/// API wants the roles to alternate).
fn push_user(messages: &mut Vec<Value>, blocks: Vec<Value>) {
    if blocks.is_empty() {
        return;
    }
    if let Some(last) = messages.last_mut().filter(|m| m["role"] == "user") {
        if let Some(c) = last["content"].as_array_mut() {
            c.extend(blocks);
            return;
        }
    }
    messages.push(json!({"role": "user", "content": blocks}));
}

/// One tool result as a `toolResult` block: its text and images, `status: error` for a failed call.
fn tool_result(r: &reins::ToolResult) -> Value {
    let mut content = Vec::with_capacity(r.images.len() + 1);
    if !r.content.is_empty() || r.images.is_empty() {
        content.push(json!({"text": r.content}));
    }
    content.extend(r.images.iter().map(image_block));
    let mut block = json!({"toolUseId": r.call_id, "content": content});
    if r.is_error {
        block["status"] = "error".into();
    }
    json!({"toolResult": block})
}

/// The request's `messages`: an assistant turn's signed reasoning first, unchanged, then its text and calls; the
/// results of its calls first in the next user turn (before any later user text).
fn messages<'a>(items: impl ExactSizeIterator<Item = &'a Message>) -> Vec<Value> {
    let mut messages: Vec<Value> = Vec::with_capacity(items.len());
    for m in items {
        match m {
            Message::User { content, images } => push_user(&mut messages, user_blocks(content, images)),
            Message::Summary { content, .. } => push_user(&mut messages, user_blocks(content, &[])),
            Message::Assistant { content, tool_calls, reasoning } => {
                let mut blocks: Vec<Value> = crate::reasoning::sent_back(Api::Bedrock, reasoning).cloned().collect();
                let thinking = blocks.len();
                if !content.is_empty() {
                    blocks.push(json!({"text": content}));
                }
                for c in tool_calls {
                    blocks.push(
                        json!({"toolUse": {"toolUseId": c.id, "name": c.name, "input": input_object(&c.arguments)}}),
                    );
                }
                // An empty turn (reasoning alone) carries nothing, and the API refuses empty content.
                if blocks.len() > thinking {
                    messages.push(json!({"role": "assistant", "content": blocks}));
                }
            }
            Message::ToolResult(r) => push_user(&mut messages, vec![tool_result(r)]),
        }
    }
    messages
}

/// Whether the model takes `cachePoint` blocks (Bedrock's prompt caching covers Claude and Nova models; others
/// refuse the block).
fn caches(model: &str) -> bool {
    model.contains("anthropic.claude") || model.contains("amazon.nova")
}

/// The request body (the model id goes in the path).
pub(crate) fn body(s: &Settings, req: &ModelRequest) -> Value {
    let mut b = Map::new();
    let messages = messages(req.messages.iter());
    // Converse has no tool choice "none": the tools are left out, unless the conversation holds calls (the API then
    // wants them), when they stay on offer.
    let holds_calls =
        || messages.iter().any(|m| m["content"].as_array().into_iter().flatten().any(|c| c.get("toolUse").is_some()));
    let offer_tools = !req.tools.is_empty() && (s.tool_choice != ToolChoice::None || holds_calls());
    b.insert("messages".into(), messages.into());
    if let Some(instructions) = req.instructions.as_deref().filter(|i| !i.is_empty()) {
        b.insert("system".into(), json!([{"text": instructions}]));
    }
    let mut inference = Map::new();
    let cap = match s.thinking_budget {
        Some(_) => Some(crate::reasoning::anthropic_max_tokens(&s.model, s.max_output_tokens)),
        None => s.openai_cap().map(u64::from),
    };
    if let Some(cap) = cap {
        inference.insert("maxTokens".into(), cap.into());
    }
    if let Some(t) = s.temperature {
        inference.insert("temperature".into(), t.into());
    }
    if !inference.is_empty() {
        b.insert("inferenceConfig".into(), inference.into());
    }
    if offer_tools {
        b.insert("toolConfig".into(), tool_config(s, req));
    }
    if let Some(budget) = s.thinking_budget {
        b.insert(
            "additionalModelRequestFields".into(),
            json!({"thinking": {"type": "enabled", "budget_tokens": budget}}),
        );
    }
    if s.prompt_cache && caches(&s.model) {
        place_cache_points(&mut b);
    }
    for (k, v) in &s.extra_body {
        b.insert(k.clone(), v.clone());
    }
    Value::Object(b)
}

/// `toolConfig`: each tool's `toolSpec` (a description only when there is one: the API refuses an empty one) and
/// the tool choice (with [`ToolChoice::None`], only sent for a conversation that holds calls, none: the model decides).
fn tool_config(s: &Settings, req: &ModelRequest) -> Value {
    let tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| {
            let mut spec = json!({"name": t.name, "inputSchema": {"json": schema_object(&t.input_schema)}});
            if !t.description.is_empty() {
                spec["description"] = t.description.clone().into();
            }
            json!({"toolSpec": spec})
        })
        .collect();
    let mut config = json!({"tools": tools});
    match &s.tool_choice {
        ToolChoice::Auto | ToolChoice::None => {}
        ToolChoice::Required => config["toolChoice"] = json!({"any": {}}),
        ToolChoice::Tool(name) => config["toolChoice"] = json!({"tool": {"name": name}}),
    }
    config
}

fn cache_point() -> Value {
    json!({"cachePoint": {"type": "default"}})
}

/// Places `cachePoint` blocks as the Anthropic adapter places its breakpoints (at most three of the four allowed):
/// after the instructions (or after the tools when there are none), after the user turn just before the latest
/// assistant turn (the end of the previous step's request, read), and after the final user turn (written for the
/// next step).
fn place_cache_points(b: &mut Map<String, Value>) {
    if let Some(system) = b.get_mut("system").and_then(Value::as_array_mut) {
        system.push(cache_point());
    } else if let Some(tools) = b.get_mut("toolConfig").and_then(|t| t["tools"].as_array_mut()) {
        tools.push(cache_point());
    }
    let Some(messages) = b.get_mut("messages").and_then(Value::as_array_mut) else { return };
    let Some(last) = messages.len().checked_sub(1) else { return };
    if messages[last]["role"] != "user" {
        return;
    }
    let mark = |m: &mut Value| {
        if let Some(c) = m["content"].as_array_mut() {
            c.push(cache_point());
        }
    };
    mark(&mut messages[last]);
    let previous_answer = messages[..last].iter().rposition(|m| m["role"] == "assistant");
    if let Some(i) = previous_answer.and_then(|a| a.checked_sub(1)) {
        if messages[i]["role"] == "user" {
            mark(&mut messages[i]);
        }
    }
}

fn stop_reason(r: &str) -> FinishReason {
    match r {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "guardrail_intervened" | "content_filtered" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// Input counts all of it: uncached (`inputTokens`), read from the cache (`cacheReadInputTokens`) and written to it
/// (`cacheWriteInputTokens`), the last two kept apart for pricing.
pub(crate) fn parse_usage(u: &Value) -> Option<Usage> {
    checked_usage(u, |u| {
        let cached = count(u, &["cacheReadInputTokens"])?;
        let written = count(u, &["cacheWriteInputTokens"])?;
        let input = count(u, &["inputTokens"])?.saturating_add(cached).saturating_add(written);
        let mut usage = usage(input, count(u, &["outputTokens"])?, cached, 0);
        usage.cache_write_tokens = written.min(input - usage.cached_input_tokens);
        Ok(usage)
    })
}

/// A content block being assembled.
#[derive(Clone, Debug)]
enum Block {
    Text(String),
    /// `reasoningText` (its text and signature) or, whole, `redactedContent`.
    Reasoning {
        text: String,
        signature: String,
        redacted: Option<String>,
    },
    ToolUse {
        id: String,
        name: String,
        json: String,
        input: Option<Value>,
    },
    Other,
}

fn block_of(v: &Value) -> Block {
    if let Some(t) = v["text"].as_str() {
        return Block::Text(t.to_owned());
    }
    let r = &v["reasoningContent"];
    if r.is_object() {
        return Block::Reasoning {
            text: str_at(&r["reasoningText"], "text").to_owned(),
            signature: str_at(&r["reasoningText"], "signature").to_owned(),
            redacted: r["redactedContent"].as_str().map(str::to_owned),
        };
    }
    let u = &v["toolUse"];
    if u.is_object() {
        return Block::ToolUse {
            id: str_at(u, "toolUseId").to_owned(),
            name: str_at(u, "name").to_owned(),
            json: String::new(),
            input: u.get("input").cloned(),
        };
    }
    Block::Other
}

fn assemble(blocks: impl IntoIterator<Item = Block>, stop: Option<&str>, usage: Option<Usage>) -> ModelResponse {
    let (mut text, mut reasoning, mut tool_calls, mut items) = (String::new(), Vec::new(), Vec::new(), Vec::new());
    for b in blocks {
        match b {
            Block::Text(t) => text.push_str(&t),
            Block::Reasoning { text: t, signature, redacted } => {
                // Only signed (or redacted) reasoning can go back: the model checks it.
                if let Some(r) = redacted {
                    items.push(crate::reasoning::item(
                        Api::Bedrock,
                        json!({"reasoningContent": {"redactedContent": r}}),
                    ));
                } else if !signature.is_empty() {
                    items.push(crate::reasoning::item(
                        Api::Bedrock,
                        json!({"reasoningContent": {"reasoningText": {"text": t, "signature": signature}}}),
                    ));
                }
                if !t.is_empty() {
                    reasoning.push(t);
                }
            }
            Block::ToolUse { id, name, json, input } => {
                // Streamed input arrives as JSON text; a complete response has the object.
                let n = tool_calls.len();
                tool_calls.push(block_tool_call(id, name, &json, input, "tooluse", n));
            }
            Block::Other => {}
        }
    }
    ModelResponse {
        text,
        tool_calls,
        usage,
        reasoning: (!reasoning.is_empty()).then(|| reasoning.join("\n\n")),
        reasoning_items: items,
        finish_reason: stop.map(stop_reason),
        answered_by: None,
    }
}

/// Parses a complete (non-streamed) Converse response.
pub(crate) fn parse(v: &Value) -> Result<ModelResponse, Failure> {
    let Some(content) = v["output"]["message"]["content"].as_array() else {
        return Err(Failure::malformed("the response has no output.message.content"));
    };
    Ok(assemble(content.iter().map(block_of), v["stopReason"].as_str(), parse_usage(&v["usage"])))
}

/// The kind of failure a Bedrock error type is (`ThrottlingException`, or a stream's `throttlingException`).
fn failure_of(error_type: &str, status: u16, message: &str) -> Failure {
    let text = format!("{error_type}: {message}");
    let m = message.to_ascii_lowercase();
    match error_type.to_ascii_lowercase().as_str() {
        "throttlingexception"
        | "modelnotreadyexception"
        | "serviceunavailableexception"
        | "internalserverexception"
        | "modeltimeoutexception"
        | "modelstreamerrorexception" => Failure::transient(format!("the provider reported a transient error: {text}")),
        "servicequotaexceededexception" => Failure::new(FailKind::Quota, text),
        "accessdeniedexception"
        | "unrecognizedclientexception"
        | "invalidsignatureexception"
        | "expiredtokenexception" => Failure::new(FailKind::Unauthorized(if status == 401 { 401 } else { 403 }), text),
        "validationexception"
            if m.contains("too long") || m.contains("context window") || m.contains("too many input tokens") =>
        {
            Failure::new(FailKind::ContextOverflow, text)
        }
        "validationexception" | "resourcenotfoundexception" | "modelerrorexception" => {
            Failure::new(FailKind::Rejected(if status >= 400 { status } else { 400 }), text)
        }
        // A type Reins does not know: by its status, as the other adapters classify one.
        _ if crate::retry::retryable_status(status) => {
            Failure::transient(format!("the provider reported a transient error: {text}"))
        }
        _ if (400..500).contains(&status) => Failure::new(FailKind::Rejected(status), text),
        _ => Failure::new(FailKind::Failed, format!("the provider reported an error: {text}")),
    }
}

/// An HTTP error answer: the type from `x-amzn-ErrorType` (`ThrottlingException:http://…`) or the body's
/// `__type`, the body's `message`; classified by the type (`ModelNotReadyException` and `ModelTimeoutException`
/// are retried, `ValidationException` is not), else by the status as for the other adapters.
pub(crate) fn http_error(status: u16, reason: &str, headers: &HeaderMap, content_type: &str, body: &[u8]) -> Failure {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let header = headers.get("x-amzn-errortype").map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned());
    let kind = header
        .as_deref()
        .or_else(|| v["__type"].as_str())
        .map(|t| t.split([':', '#']).find(|p| p.ends_with("Exception")).unwrap_or(t).trim().to_owned())
        .unwrap_or_default();
    let message = v["message"]
        .as_str()
        .or_else(|| v["Message"].as_str())
        .map(|m| snippet(m, 500))
        .unwrap_or_else(|| body_summary(content_type, body));
    if kind.is_empty() {
        return crate::wire::classify_status(status, reason, content_type, body);
    }
    let mut f = failure_of(&snippet(&kind, 80), status, &message);
    f.message = format!("HTTP {status}: {}", f.message);
    f
}

/// Turns an event-stream body into events: each frame decoded (prelude and message CRCs checked) by
/// `aws-smithy-eventstream`. An `event` frame becomes an event named by its `:event-type` with its JSON payload;
/// an `exception` frame one named `!` and its `:exception-type`; an `error` frame one named `!` and its
/// `:error-code`, with `{"message": :error-message}`.
#[derive(Default)]
pub(crate) struct Frames {
    decoder: aws_smithy_eventstream::frame::MessageFrameDecoder,
    buf: BytesMut,
}

impl Frames {
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), Failure> {
        use aws_smithy_eventstream::frame::DecodedFrame;
        self.buf.extend_from_slice(chunk);
        loop {
            let frame = self
                .decoder
                .decode_frame(&mut self.buf)
                .map_err(|e| Failure::malformed(format!("a broken event-stream frame: {e}")))?;
            let DecodedFrame::Complete(message) = frame else { break };
            let header = |name: &str| {
                message
                    .headers()
                    .iter()
                    .find(|h| h.name().as_str() == name)
                    .and_then(|h| h.value().as_string().ok())
                    .map(|s| s.as_str().to_owned())
                    .unwrap_or_default()
            };
            let payload = String::from_utf8_lossy(message.payload()).into_owned();
            out.push(match header(":message-type").as_str() {
                "exception" => SseEvent { event: format!("!{}", header(":exception-type")), data: payload },
                "error" => SseEvent {
                    event: format!("!{}", header(":error-code")),
                    data: json!({"message": header(":error-message")}).to_string(),
                },
                _ => SseEvent { event: header(":event-type"), data: payload },
            });
            if !self.buf.has_remaining() {
                break;
            }
        }
        Ok(())
    }
}

/// Assembles a ConverseStream response from its events.
#[derive(Default)]
pub(crate) struct Stream {
    blocks: BTreeMap<u64, Block>,
    /// Block index of each tool use → its 0-based position among the calls.
    call_positions: BTreeMap<u64, usize>,
    usage: Option<Value>,
    stop: Option<String>,
    done: bool,
}

impl Stream {
    /// Takes one event; returns true once the response is complete (`metadata`, which follows `messageStop`).
    pub fn on_event(&mut self, ev: &SseEvent, emit: &mut Emit) -> Result<bool, Failure> {
        let v = event_json(&ev.event, &ev.data)?;
        if let Some(kind) = ev.event.strip_prefix('!') {
            let message = v["message"].as_str().map(|m| snippet(m, 500)).unwrap_or_else(|| snippet(&ev.data, 300));
            let f = failure_of(kind, 400, &message);
            return Err(Failure { message: format!("in the stream: {}", f.message), ..f });
        }
        let index = v["contentBlockIndex"].as_u64().unwrap_or(0);
        match ev.event.as_str() {
            "contentBlockStart" => {
                let block = block_of(&v["start"]);
                if let Block::ToolUse { id, name, .. } = &block {
                    let pos = self.call_positions.len();
                    self.call_positions.insert(index, pos);
                    emit.call(pos, id, name);
                }
                self.blocks.insert(index, block);
            }
            "contentBlockDelta" => self.delta(index, &v["delta"], emit),
            "messageStop" => {
                self.stop = v["stopReason"].as_str().map(str::to_owned);
                self.done = true;
            }
            "metadata" => {
                if v["usage"].is_object() {
                    self.usage = Some(v["usage"].clone());
                }
                self.done = true;
                return Ok(true);
            }
            // messageStart, contentBlockStop, and event types added later: nothing to do.
            _ => {}
        }
        Ok(false)
    }

    fn delta(&mut self, index: u64, d: &Value, emit: &mut Emit) {
        let fresh = if d["reasoningContent"].is_object() {
            Block::Reasoning { text: String::new(), signature: String::new(), redacted: None }
        } else if d["toolUse"].is_object() {
            Block::ToolUse { id: String::new(), name: String::new(), json: String::new(), input: None }
        } else {
            Block::Text(String::new())
        };
        let block = self.blocks.entry(index).or_insert(fresh);
        match block {
            Block::Text(t) => {
                let s = str_at(d, "text");
                t.push_str(s);
                emit.text(s);
            }
            Block::Reasoning { text, signature, redacted } => {
                let r = &d["reasoningContent"];
                let s = str_at(r, "text");
                text.push_str(s);
                emit.reasoning(s);
                signature.push_str(str_at(r, "signature"));
                if let Some(x) = r["redactedContent"].as_str() {
                    redacted.get_or_insert_with(String::new).push_str(x);
                }
            }
            Block::ToolUse { json, .. } => {
                let s = str_at(&d["toolUse"], "input");
                json.push_str(s);
                if let Some(&pos) = self.call_positions.get(&index) {
                    emit.arguments(pos, s);
                }
            }
            Block::Other => {}
        }
    }

    /// The assembled response.
    pub fn finish(self) -> Result<ModelResponse, Failure> {
        if !self.done {
            return Err(Failure::transient("the stream ended before the response was complete (no messageStop)"));
        }
        let usage = self.usage.as_ref().and_then(parse_usage);
        Ok(assemble(self.blocks.into_values(), self.stop.as_deref(), usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn credentials_and_region_come_from_the_standard_variables() {
        let env: HashMap<&str, &str> = [
            ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t-value"),
            ("AWS_SESSION_TOKEN", " "),
            ("AWS_DEFAULT_REGION", "eu-west-3"),
        ]
        .into();
        let lookup = |k: &str| env.get(k).map(|v| (*v).to_owned());
        let c = AwsCredentials::from_lookup(lookup).unwrap();
        assert_eq!((c.access_key_id.as_str(), c.session_token.as_deref()), ("AKIDEXAMPLE", None));
        assert!(!format!("{c:?}").contains("s3cr3t"));
        assert_eq!(region(None, None, lookup).as_deref(), Some("eu-west-3"));
        assert_eq!(region(Some("us-west-2"), None, lookup).as_deref(), Some("us-west-2"));
        let none = |_: &str| None;
        assert!(AwsCredentials::from_lookup(none).is_none());
        let url = Some("https://bedrock-runtime.ap-south-1.amazonaws.com");
        assert_eq!(region(None, url, none).as_deref(), Some("ap-south-1"));
        assert_eq!(region(None, Some("http://127.0.0.1:9"), none), None);
    }

    #[test]
    fn the_model_id_is_one_escaped_label() {
        let u = endpoint("https://h", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", true).unwrap();
        assert_eq!(u.as_str(), "https://h/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream");
        let arn = endpoint("https://h", "arn:aws:bedrock:us-east-1:1:inference-profile/x", false).unwrap();
        assert_eq!(arn.path(), "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx/converse");
    }

    fn frame(headers: &[(&'static str, &'static str)], payload: &str) -> Vec<u8> {
        use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
        let headers = headers.iter().map(|(k, v)| Header::new(*k, HeaderValue::String((*v).into()))).collect();
        let mut out = Vec::new();
        let message = Message::new_from_parts(headers, payload.to_owned());
        aws_smithy_eventstream::frame::write_message_to(&message, &mut out).unwrap();
        out
    }

    #[test]
    fn frames_are_decoded_in_any_chunking_and_a_bad_crc_is_refused() {
        let mut bytes =
            frame(&[(":message-type", "event"), (":event-type", "contentBlockDelta")], r#"{"delta":{"text":"hi"}}"#);
        bytes.extend(frame(
            &[(":message-type", "exception"), (":exception-type", "throttlingException")],
            r#"{"message":"slow down"}"#,
        ));
        let (mut frames, mut out) = (Frames::default(), Vec::new());
        for b in &bytes {
            frames.push(std::slice::from_ref(b), &mut out).unwrap();
        }
        assert_eq!(out[0], SseEvent { event: "contentBlockDelta".into(), data: r#"{"delta":{"text":"hi"}}"#.into() });
        assert_eq!(out[1].event, "!throttlingException");
        let mut stream = Stream::default();
        assert!(stream.on_event(&out[1], &mut Emit::new(None)).unwrap_err().retryable());
        // One payload byte changed: the message CRC no longer matches.
        let mut broken =
            frame(&[(":message-type", "event"), (":event-type", "messageStop")], r#"{"stopReason":"end_turn"}"#);
        let n = broken.len() - 8;
        broken[n] ^= 1;
        let e = Frames::default().push(&broken, &mut Vec::new()).unwrap_err();
        assert!(e.message.contains("broken event-stream frame") && e.kind == FailKind::Malformed, "{e:?}");
    }

    #[test]
    fn stop_reasons_and_errors_are_classified() {
        assert_eq!(stop_reason("tool_use"), FinishReason::ToolCalls);
        assert_eq!(stop_reason("model_context_window_exceeded"), FinishReason::Length);
        assert_eq!(stop_reason("guardrail_intervened"), FinishReason::ContentFilter);
        assert_eq!(stop_reason("content_filtered"), FinishReason::ContentFilter);
        for t in ["ThrottlingException", "modelStreamErrorException", "ModelNotReadyException", "ModelTimeoutException"]
        {
            assert!(failure_of(t, 429, "x").retryable(), "{t}");
        }
        assert_eq!(failure_of("ValidationException", 400, "bad").kind, FailKind::Rejected(400));
        assert_eq!(failure_of("validationException", 400, "Input is too long").kind, FailKind::ContextOverflow);
        assert_eq!(failure_of("AccessDeniedException", 403, "no").kind, FailKind::Unauthorized(403));
        assert_eq!(failure_of("NewKindOfException", 409, "x").kind, FailKind::Transient);
        assert_eq!(failure_of("NewKindOfException", 404, "x").kind, FailKind::Rejected(404));
        assert_eq!(failure_of("NewKindOfException", 200, "x").kind, FailKind::Failed);
    }
}
