//! Google Gemini's own API (`POST {base}/v1beta/models/{model}:generateContent`, and
//! `:streamGenerateContent?alt=sse` streamed).
//!
//! Instructions go in `systemInstruction`, tools in one `functionDeclarations` tool with each schema in
//! `parametersJsonSchema` (adapted first: see [`tool_schema`]), images inline (`inlineData`; a tool's images in its
//! `functionResponse.parts`). Thinking is asked for with `thinkingConfig`: `thinkingBudget` from the thinking
//! budget, `thinkingLevel` from the reasoning effort (never both), with `includeThoughts` so that the thought
//! summaries show as reasoning.
//!
//! **Thought signatures.** A response's parts may carry a `thoughtSignature` (a function call's part must, on
//! Gemini 3, and the API refuses the next request with HTTP 400 when it does not come back). Each is recorded as a
//! reasoning item tagged `gemini` that names the part it came on — `{"part": "functionCall", "index": K,
//! "thoughtSignature": S}` (the turn's K-th call), `{"part": "text", "offset": N, "thoughtSignature": S}` (the
//! text part that began at byte N of the turn's text, possibly empty) or `{"part": "thought", "text": T,
//! "thoughtSignature": S}` (a signed thought summary) — and is sent back unchanged on that same part.
//!
//! **Call ids.** Gemini may give a call no `id`. Reins then makes one (`reins-gemini-…`, made once when the
//! response is read and recorded with the turn) and never sends it: the API pairs a `functionResponse` with its
//! call by name and order, so a batch's results go in one user turn in the order of the calls.

use reins::{FinishReason, Message, ModelRequest, ModelResponse, ToolCall, ToolSpec, Usage};
use serde_json::{Map, Value, json};

use crate::provider::{Api, Settings, ToolChoice};
use crate::sse::SseEvent;
use crate::wire::{Emit, FailKind, Failure, checked_usage, count, event_json, parse_arguments, snippet, usage};

/// The API version in the path under the base URL (the one the official SDK speaks).
pub const API_VERSION: &str = "v1beta";

/// The prefix of a call id Reins made for a call Gemini gave none (such an id is never sent back).
pub const GENERATED_ID_PREFIX: &str = "reins-gemini-";

/// The deepest a tool schema may nest (with its references inlined) before it is refused.
const MAX_SCHEMA_DEPTH: usize = 64;

/// The endpoint under `base` (no trailing slash): `{base}/v1beta/models/{model}:generateContent`, or
/// `:streamGenerateContent?alt=sse` when streaming. A base that ends in an API version (`/v1beta`, `/v1`,
/// `/v1alpha`) keeps it; a model named `models/…` loses the prefix; the name is one escaped path segment.
pub(crate) fn endpoint(base: &str, model: &str, stream: bool) -> Result<reqwest::Url, String> {
    let versioned = ["/v1beta", "/v1", "/v1alpha"].iter().any(|v| base.ends_with(v));
    let root = if versioned { base.to_owned() } else { format!("{base}/{API_VERSION}") };
    let mut url = reqwest::Url::parse(&format!("{root}/models")).map_err(|e| e.to_string())?;
    let model = model.trim().strip_prefix("models/").unwrap_or(model.trim());
    let method = if stream { "streamGenerateContent" } else { "generateContent" };
    url.path_segments_mut()
        .map_err(|()| "the base URL cannot take a path".to_owned())?
        .push(&format!("{model}:{method}"));
    if stream {
        url.set_query(Some("alt=sse"));
    }
    Ok(url)
}

/// Why a tool cannot be offered to Gemini, found before any request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolRefused {
    /// The tool's name.
    pub tool: String,
    /// What Gemini would refuse, and what to do.
    pub reason: String,
}

impl std::fmt::Display for ToolRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tool {:?} cannot be offered to Gemini: {}", self.tool, self.reason)
    }
}

/// Checks a tool name the way the API does: a letter or `_` first, then letters, digits, `_`, `.`, `:` and `-`,
/// 128 characters at most.
fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'));
    if first_ok && rest_ok && name.len() <= 128 {
        Ok(())
    } else {
        Err("Gemini takes a function name of at most 128 characters that starts with a letter or `_` and holds only \
             letters, digits, `_`, `.`, `:` and `-`"
            .into())
    }
}

/// A tool's input schema as `parametersJsonSchema` takes it, or why Gemini would refuse it. Adapted:
/// - `$schema` is removed (the API refuses the keyword);
/// - every local `$ref` (`#/$defs/…`, `#/definitions/…`, any `#/…` pointer) is replaced by the schema it points
///   to, its sibling keywords kept over it, and `$defs`/`definitions` dropped: Gemini refuses a `$ref` beside any
///   keyword but `description` and `default`, and references it cannot resolve;
/// - `true` (any object) becomes `{"type": "object"}`.
///
/// Refused: a recursive `$ref` (it cannot be inlined), a `$ref` that is not a pointer into the schema itself
/// (`https://…`), one that points nowhere, and nesting deeper than 64 levels.
pub fn tool_schema(tool: &ToolSpec) -> Result<Value, ToolRefused> {
    let refuse = |reason: String| ToolRefused { tool: tool.name.clone(), reason };
    check_name(&tool.name).map_err(refuse)?;
    let root = crate::wire::schema_object(&tool.input_schema);
    let mut stack = Vec::new();
    adapt(&root, &root, 0, &mut stack).map_err(refuse)
}

/// The keywords whose value is a map of schemas, a schema, or a list of schemas.
const SCHEMA_MAPS: [&str; 3] = ["properties", "patternProperties", "dependentSchemas"];
const SCHEMA_ONE: [&str; 7] = ["items", "additionalProperties", "not", "if", "then", "else", "contains"];
const SCHEMA_LISTS: [&str; 4] = ["anyOf", "oneOf", "allOf", "prefixItems"];

fn adapt(node: &Value, root: &Value, depth: usize, stack: &mut Vec<String>) -> Result<Value, String> {
    if depth > MAX_SCHEMA_DEPTH {
        return Err(format!("its input schema nests deeper than {MAX_SCHEMA_DEPTH} levels"));
    }
    let Value::Object(o) = node else { return Ok(node.clone()) };
    if let Some(r) = o.get("$ref") {
        let r = r.as_str().unwrap_or_default().to_owned();
        let target = resolve(root, &r)?;
        if stack.contains(&r) {
            return Err(format!(
                "its input schema refers to {r:?} from within itself; Gemini refuses references it cannot resolve and \
                 Reins inlines them, which a recursive one cannot be: flatten the schema"
            ));
        }
        let mut merged = match target {
            Value::Object(t) => t.clone(),
            other => {
                return Err(format!("its input schema's {r:?} is {}, not a schema", snippet(&other.to_string(), 40)));
            }
        };
        for (k, v) in o.iter().filter(|(k, _)| k.as_str() != "$ref") {
            merged.insert(k.clone(), v.clone());
        }
        stack.push(r);
        let out = adapt(&Value::Object(merged), root, depth + 1, stack);
        stack.pop();
        return out;
    }
    let mut out = Map::with_capacity(o.len());
    for (k, v) in o {
        let adapted = match k.as_str() {
            "$schema" | "$defs" | "definitions" => continue,
            key if SCHEMA_MAPS.contains(&key) && v.is_object() => {
                let mut m = Map::new();
                for (name, sub) in v.as_object().into_iter().flatten() {
                    m.insert(name.clone(), adapt(sub, root, depth + 1, stack)?);
                }
                Value::Object(m)
            }
            key if SCHEMA_ONE.contains(&key) => adapt(v, root, depth + 1, stack)?,
            key if SCHEMA_LISTS.contains(&key) && v.is_array() => Value::Array(
                v.as_array()
                    .into_iter()
                    .flatten()
                    .map(|sub| adapt(sub, root, depth + 1, stack))
                    .collect::<Result<_, _>>()?,
            ),
            _ => v.clone(),
        };
        out.insert(k.clone(), adapted);
    }
    Ok(Value::Object(out))
}

/// The schema a local `$ref` (`#` or `#/a/b`, JSON-pointer escaped) points to.
fn resolve<'a>(root: &'a Value, r: &str) -> Result<&'a Value, String> {
    let Some(pointer) = r.strip_prefix('#') else {
        return Err(format!(
            "its input schema refers to {:?}, outside the schema; Gemini resolves no such reference: inline it",
            snippet(r, 80)
        ));
    };
    let pointer = percent_decode(pointer);
    root.pointer(&pointer).ok_or_else(|| format!("its input schema's $ref {:?} points nowhere", snippet(r, 80)))
}

/// `%XX` escapes of a URI fragment decoded (JSON-pointer `~0`/`~1` are left to `Value::pointer`).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Checks every tool of a request: the first that Gemini would refuse, named.
pub(crate) fn check_tools(tools: &[ToolSpec]) -> Result<(), ToolRefused> {
    tools.iter().try_for_each(|t| tool_schema(t).map(|_| ()))
}

/// Whether Reins made this call id (Gemini gave none).
pub fn is_generated_id(id: &str) -> bool {
    id.starts_with(GENERATED_ID_PREFIX)
}

/// An image as an inline part (`Part.inlineData`, or a `FunctionResponsePart`'s, which has the same shape).
fn inline(image: &reins::Image) -> Value {
    json!({"inlineData": {"mimeType": image.media_type(), "data": image.base64()}})
}

/// A user turn's parts: the text (when there is any) and an inline part per image.
fn user_parts(text: &str, images: &[reins::Image]) -> Vec<Value> {
    let mut parts = Vec::with_capacity(images.len() + 1);
    if !text.is_empty() {
        parts.push(json!({"text": text}));
    }
    parts.extend(images.iter().map(inline));
    parts
}

/// Appends parts to the conversation as the user's, in the last content when that is the user's already.
fn push_user(contents: &mut Vec<Value>, parts: Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    if let Some(last) = contents.last_mut().filter(|c| c["role"] == "user") {
        if let Some(p) = last["parts"].as_array_mut() {
            p.extend(parts);
            return;
        }
    }
    contents.push(json!({"role": "user", "parts": parts}));
}

/// Function-call arguments as the API's `args` (a JSON object; anything else goes back as `{}`).
fn args_object(args: &Value) -> Value {
    match args {
        Value::Object(_) => args.clone(),
        Value::String(s) => match parse_arguments(s) {
            v @ Value::Object(_) => v,
            _ => json!({}),
        },
        _ => json!({}),
    }
}

/// A model turn's parts: signed thought summaries, the text (cut where signatures were given, each on the part
/// it came on), then the calls (each with its signature, if it had one).
fn model_parts(content: &str, calls: &[ToolCall], reasoning: &[reins::Reasoning]) -> Vec<Value> {
    let items: Vec<&Value> = crate::reasoning::sent_back(Api::Gemini, reasoning).collect();
    let mut parts = Vec::with_capacity(calls.len() + 2);
    for item in items.iter().filter(|i| i["part"] == "thought") {
        parts.push(json!({"text": item["text"], "thought": true, "thoughtSignature": item["thoughtSignature"]}));
    }
    let mut cuts: Vec<(usize, &Value)> = items
        .iter()
        .filter(|i| i["part"] == "text")
        .filter_map(|i| {
            let mut at = usize::try_from(i["offset"].as_u64()?).unwrap_or(usize::MAX).min(content.len());
            while !content.is_char_boundary(at) {
                at -= 1;
            }
            Some((at, &i["thoughtSignature"]))
        })
        .collect();
    cuts.sort_by_key(|(at, _)| *at);
    let first = cuts.first().map_or(content.len(), |(at, _)| *at);
    if first > 0 {
        parts.push(json!({"text": &content[..first]}));
    }
    for (n, (at, sig)) in cuts.iter().enumerate() {
        let end = cuts.get(n + 1).map_or(content.len(), |(next, _)| *next);
        parts.push(json!({"text": &content[*at..end], "thoughtSignature": sig}));
    }
    for (k, call) in calls.iter().enumerate() {
        let mut fc = json!({"name": call.name, "args": args_object(&call.arguments)});
        if !is_generated_id(&call.id) {
            fc["id"] = call.id.as_ref().into();
        }
        let mut part = json!({"functionCall": fc});
        let sig = items.iter().find(|i| i["part"] == "functionCall" && i["index"].as_u64() == Some(k as u64));
        if let Some(sig) = sig {
            part["thoughtSignature"] = sig["thoughtSignature"].clone();
        }
        parts.push(part);
    }
    parts
}

/// One tool result as a `functionResponse` part: `{"output": text}`, or `{"error": text}` for a failed call (the
/// keys the API documents), its images in `parts`; the call's id only when Gemini gave it.
fn function_response(r: &reins::ToolResult, name: &str) -> Value {
    let key = if r.is_error { "error" } else { "output" };
    let mut fr = json!({"name": name, "response": {key: r.content}});
    if !is_generated_id(&r.call_id) {
        fr["id"] = Value::from(&*r.call_id);
    }
    if !r.images.is_empty() {
        fr["parts"] = r.images.iter().map(inline).collect::<Vec<_>>().into();
    }
    json!({"functionResponse": fr})
}

/// The request's `contents`: turns of `user` and `model`, a batch's results in one user turn in the order of
/// its calls.
fn contents<'a>(messages: impl ExactSizeIterator<Item = &'a Message>) -> Vec<Value> {
    let mut contents: Vec<Value> = Vec::with_capacity(messages.len());
    // The calls of the latest model turn (id, name), and the results of its batch so far (call position, part).
    let mut calls: Vec<(&str, &str)> = Vec::new();
    let mut results: Vec<(usize, Value)> = Vec::new();
    let flush = |contents: &mut Vec<Value>, results: &mut Vec<(usize, Value)>| {
        results.sort_by_key(|(pos, _)| *pos);
        push_user(contents, results.drain(..).map(|(_, p)| p).collect());
    };
    for m in messages {
        if !matches!(m, Message::ToolResult(_)) {
            flush(&mut contents, &mut results);
        }
        match m {
            Message::User { content, images } => push_user(&mut contents, user_parts(content, images)),
            Message::Summary { content, .. } => push_user(&mut contents, user_parts(content, &[])),
            Message::Assistant { content, tool_calls, reasoning } => {
                calls = tool_calls.iter().map(|c| (c.id.as_ref(), c.name.as_str())).collect();
                let parts = model_parts(content, tool_calls, reasoning);
                if !parts.is_empty() {
                    contents.push(json!({"role": "model", "parts": parts}));
                }
            }
            Message::ToolResult(r) => {
                let pos = calls.iter().position(|(id, _)| *id == &*r.call_id);
                let name = pos.map_or(&*r.call_id, |p| calls[p].1);
                results.push((pos.unwrap_or(usize::MAX), function_response(r, name)));
            }
        }
    }
    flush(&mut contents, &mut results);
    contents
}

/// `thinkingConfig`: a budget or a level (the settings check refused both), thought summaries included.
fn thinking_config(s: &Settings) -> Option<Value> {
    match (s.thinking_budget, s.reasoning_effort) {
        (Some(budget), _) => Some(json!({"thinkingBudget": budget, "includeThoughts": budget > 0})),
        (None, Some(effort)) => {
            Some(json!({"thinkingLevel": effort.as_str().to_ascii_uppercase(), "includeThoughts": true}))
        }
        (None, None) => None,
    }
}

/// The request body. Tools Gemini would refuse are checked before (see [`check_tools`]); one that still fails
/// here is sent as an object schema with no properties rather than not at all.
pub(crate) fn body(s: &Settings, req: &ModelRequest) -> Value {
    let mut b = Map::new();
    b.insert("contents".into(), contents(req.messages.iter()).into());
    if let Some(instructions) = req.instructions.as_deref().filter(|i| !i.is_empty()) {
        b.insert("systemInstruction".into(), json!({"parts": [{"text": instructions}]}));
    }
    if !req.tools.is_empty() {
        let declarations: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let schema = tool_schema(t).unwrap_or_else(|_| json!({"type": "object"}));
                json!({"name": t.name, "description": t.description, "parametersJsonSchema": schema})
            })
            .collect();
        b.insert("tools".into(), json!([{"functionDeclarations": declarations}]));
        let config = match &s.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::Required => Some(json!({"mode": "ANY"})),
            ToolChoice::None => Some(json!({"mode": "NONE"})),
            ToolChoice::Tool(name) => Some(json!({"mode": "ANY", "allowedFunctionNames": [name]})),
        };
        if let Some(c) = config {
            b.insert("toolConfig".into(), json!({"functionCallingConfig": c}));
        }
    }
    let mut generation = Map::new();
    if let Some(cap) = s.openai_cap() {
        generation.insert("maxOutputTokens".into(), cap.into());
    }
    if let Some(t) = s.temperature {
        generation.insert("temperature".into(), t.into());
    }
    if let Some(thinking) = thinking_config(s) {
        generation.insert("thinkingConfig".into(), thinking);
    }
    if !generation.is_empty() {
        b.insert("generationConfig".into(), generation.into());
    }
    for (k, v) in &s.extra_body {
        b.insert(k.clone(), v.clone());
    }
    Value::Object(b)
}

/// Usage: input is the prompt (cached part included, `cachedContentTokenCount` kept apart) plus the tool-use
/// prompt; output is the candidates' tokens plus the thoughts' (`thoughtsTokenCount`, billed as output and
/// reported apart as reasoning).
pub(crate) fn parse_usage(u: &Value) -> Option<Usage> {
    checked_usage(u, |u| {
        let input = count(u, &["promptTokenCount"])?.saturating_add(count(u, &["toolUsePromptTokenCount"])?);
        let thoughts = count(u, &["thoughtsTokenCount"])?;
        let output = count(u, &["candidatesTokenCount"])?.saturating_add(thoughts);
        Ok(usage(input, output, count(u, &["cachedContentTokenCount"])?, thoughts))
    })
}

/// A finish reason: the answer's end, or a failure of the attempt. A malformed function call or response is
/// transient (the model may well get it right again, as Gemini's own tools retry it); a signature Gemini missed is
/// Reins's fault, final.
fn finish_reason(reason: &str, has_calls: bool) -> Result<Option<FinishReason>, Failure> {
    Ok(Some(match reason {
        "" => return Ok(None),
        "STOP" if has_calls => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION"
        | "MODEL_ARMOR" => FinishReason::ContentFilter,
        "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" | "MALFORMED_RESPONSE" => {
            return Err(Failure::transient(format!(
                "Gemini ended the response with finish reason {reason}: the model produced no usable answer"
            )));
        }
        "MISSING_THOUGHT_SIGNATURE" => {
            return Err(Failure::new(
                FailKind::Failed,
                "Gemini ended the response with finish reason MISSING_THOUGHT_SIGNATURE: a thought signature of an \
                 earlier turn did not come back",
            ));
        }
        "TOO_MANY_TOOL_CALLS" => {
            return Err(Failure::new(
                FailKind::Failed,
                "Gemini ended the response with finish reason TOO_MANY_TOOL_CALLS: the model called more tools than \
                 the API allows in one turn",
            ));
        }
        other => FinishReason::Other(other.to_ascii_lowercase()),
    }))
}

/// A Gemini error object (`{"error": {"code": 429, "message", "status": "RESOURCE_EXHAUSTED"}}`) inside a 200
/// answer or a stream.
fn error(v: &Value) -> Failure {
    let e = &v["error"];
    let status = e["status"].as_str().unwrap_or("");
    let message = e["message"].as_str().map(|m| snippet(m, 500)).unwrap_or_else(|| snippet(&e.to_string(), 300));
    let text = if status.is_empty() { message.clone() } else { format!("{status}: {message}") };
    let mut f = crate::wire::error_object(&json!({"code": status, "message": message}));
    if matches!(status, "UNAVAILABLE" | "INTERNAL" | "DEADLINE_EXCEEDED" | "RESOURCE_EXHAUSTED")
        && f.kind == FailKind::Failed
    {
        f = Failure::transient(format!("the provider reported a transient error: {text}"));
    }
    f
}

/// One response being assembled from its parts, in order (a whole response's, or a stream's chunk by chunk).
#[derive(Default)]
pub(crate) struct Turn {
    text: String,
    reasoning: String,
    calls: Vec<ToolCall>,
    items: Vec<reins::Reasoning>,
    finish: String,
    block: String,
    usage: Option<Value>,
    model: Option<String>,
    /// Makes the ids of calls Gemini gave none, unique to this response.
    nonce: Option<u64>,
}

impl Turn {
    /// Records the part's signature, if it has one, as the item `item` makes (only then made).
    fn signed(&mut self, item: impl FnOnce() -> Value, part: &Value) {
        if let Some(sig) = part.get("thoughtSignature").filter(|s| s.is_string()) {
            let mut item = item();
            item["thoughtSignature"] = sig.clone();
            self.items.push(crate::reasoning::item(Api::Gemini, item));
        }
    }

    fn part(&mut self, part: &Value, emit: &mut Emit) {
        if let Some(fc) = part.get("functionCall").filter(|f| f.is_object()) {
            let k = self.calls.len();
            let id = match fc["id"].as_str().filter(|i| !i.is_empty()) {
                Some(id) => id.to_owned(),
                None => {
                    let nonce = *self.nonce.get_or_insert_with(|| fastrand::u64(..));
                    format!("{GENERATED_ID_PREFIX}{nonce:016x}-{k}")
                }
            };
            let name = fc["name"].as_str().unwrap_or("");
            let args = match &fc["args"] {
                Value::Null => json!({}),
                other => other.clone(),
            };
            emit.call(k, &id, name);
            emit.arguments(k, &args.to_string());
            self.calls.push(ToolCall::new(id, name, args));
            self.signed(|| json!({"part": "functionCall", "index": k}), part);
        } else if part["thought"] == true {
            let t = part["text"].as_str().unwrap_or("");
            emit.reasoning(t);
            self.reasoning.push_str(t);
            self.signed(|| json!({"part": "thought", "text": t}), part);
        } else if part.get("text").is_some() || part.get("thoughtSignature").is_some() {
            let t = part["text"].as_str().unwrap_or("");
            let offset = self.text.len();
            self.signed(|| json!({"part": "text", "offset": offset}), part);
            emit.text(t);
            self.text.push_str(t);
        }
        // Code execution and other parts Reins does not use: nothing to assemble.
    }

    /// Takes one `GenerateContentResponse` (a whole response, or a stream's chunk).
    fn chunk(&mut self, v: &Value, emit: &mut Emit) -> Result<(), Failure> {
        if v["error"].is_object() {
            return Err(error(v));
        }
        if let Some(m) = v["modelVersion"].as_str().filter(|m| self.model.as_deref() != Some(*m)) {
            self.model = Some(m.to_owned());
        }
        if v["usageMetadata"].is_object() {
            self.usage = Some(v["usageMetadata"].clone());
        }
        if let Some(b) = v["promptFeedback"]["blockReason"].as_str() {
            self.block = b.to_owned();
        }
        let candidate = &v["candidates"][0];
        for part in candidate["content"]["parts"].as_array().into_iter().flatten() {
            self.part(part, emit);
        }
        if let Some(r) = candidate["finishReason"].as_str() {
            self.finish = r.to_owned();
        }
        Ok(())
    }

    fn finish(self) -> Result<ModelResponse, Failure> {
        crate::response_model(self.model.as_deref());
        let usage = self.usage.as_ref().and_then(parse_usage);
        let finish_reason = if self.finish.is_empty() && !self.block.is_empty() {
            // The prompt itself was blocked: no candidate at all.
            Some(FinishReason::ContentFilter)
        } else {
            finish_reason(&self.finish, !self.calls.is_empty())?
        };
        Ok(ModelResponse {
            text: self.text,
            tool_calls: self.calls,
            usage,
            reasoning: (!self.reasoning.is_empty()).then_some(self.reasoning),
            reasoning_items: self.items,
            finish_reason,
            answered_by: None,
        })
    }
}

/// Parses a complete (non-streamed) response.
pub(crate) fn parse(v: &Value) -> Result<ModelResponse, Failure> {
    let mut turn = Turn::default();
    turn.chunk(v, &mut Emit::new(None))?;
    if turn.finish.is_empty() && turn.block.is_empty() && !v["candidates"][0].is_object() {
        return Err(Failure::malformed("the response has no candidate"));
    }
    turn.finish()
}

/// Assembles a streamed response from its chunks (each a `GenerateContentResponse`). The stream has no end
/// event: it is complete when it ends after a chunk with a finish reason (or a blocked prompt).
#[derive(Default)]
pub(crate) struct Stream {
    turn: Turn,
}

impl Stream {
    /// Takes one event; never the last by itself (the stream's end is).
    pub fn on_event(&mut self, ev: &SseEvent, emit: &mut Emit) -> Result<bool, Failure> {
        let mut v = event_json(&ev.event, &ev.data)?;
        // Each chunk repeats the usage so far (the last one's is the response's): moved, not copied.
        if let Some(u) = v.get_mut("usageMetadata").map(Value::take).filter(Value::is_object) {
            self.turn.usage = Some(u);
        }
        self.turn.chunk(&v, emit)?;
        Ok(false)
    }

    /// The assembled response.
    pub fn finish(self) -> Result<ModelResponse, Failure> {
        if self.turn.finish.is_empty() && self.turn.block.is_empty() {
            return Err(Failure::transient("the stream ended before the response was complete (no finish reason)"));
        }
        self.turn.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(schema: Value) -> ToolSpec {
        ToolSpec { name: "t".into(), description: String::new(), input_schema: schema }
    }

    #[test]
    fn schemas_are_adapted_or_refused() {
        let s = json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A", "description": "an A"},
                           "b": {"type": "array", "items": {"$ref": "#/definitions/B"}},
                           "$schema": {"type": "string"}},
            "$defs": {"A": {"type": "object", "properties": {"x": {"type": "integer"}}}},
            "definitions": {"B": {"type": "string"}}});
        let got = tool_schema(&spec(s)).unwrap();
        assert_eq!(
            got,
            json!({"type": "object", "properties": {
                "a": {"type": "object", "properties": {"x": {"type": "integer"}}, "description": "an A"},
                "b": {"type": "array", "items": {"type": "string"}},
                "$schema": {"type": "string"}}})
        );
        let recursive = json!({"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}},
            "$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}}});
        let e = tool_schema(&spec(recursive)).unwrap_err();
        assert!(e.to_string().contains("\"t\"") && e.reason.contains("#/$defs/N"), "{e}");
        assert!(tool_schema(&spec(json!({"properties": {"a": {"$ref": "https://x/s.json"}}}))).is_err());
        assert!(tool_schema(&spec(json!({"properties": {"a": {"$ref": "#/$defs/Nope"}}}))).is_err());
        assert_eq!(tool_schema(&spec(json!(true))).unwrap(), json!({"type": "object"}));
        let bad_name = ToolSpec { name: "9lives".into(), ..spec(json!({})) };
        assert!(tool_schema(&bad_name).unwrap_err().reason.contains("starts with a letter"));
    }

    #[test]
    fn finish_reasons_map_to_statuses_or_failures() {
        assert_eq!(finish_reason("STOP", true).unwrap(), Some(FinishReason::ToolCalls));
        assert_eq!(finish_reason("MAX_TOKENS", false).unwrap(), Some(FinishReason::Length));
        for r in ["SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII"] {
            assert_eq!(finish_reason(r, false).unwrap(), Some(FinishReason::ContentFilter), "{r}");
        }
        assert!(finish_reason("MALFORMED_FUNCTION_CALL", false).unwrap_err().retryable());
        assert!(!finish_reason("MISSING_THOUGHT_SIGNATURE", false).unwrap_err().retryable());
        assert_eq!(finish_reason("LANGUAGE", false).unwrap(), Some(FinishReason::Other("language".into())));
    }

    #[test]
    fn signatures_go_back_on_the_parts_they_came_on() {
        let mut turn = Turn::default();
        let mut emit = Emit::new(None);
        let v = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "plan", "thought": true},
            {"text": "Hel", "thoughtSignature": "c2lnMQ=="}, {"text": "lo"},
            {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "c2lnMg=="},
            {"functionCall": {"name": "g", "args": {}, "id": "given"}},
            {"text": "", "thoughtSignature": "c2lnMw=="}]}, "finishReason": "STOP"}]});
        turn.chunk(&v, &mut emit).unwrap();
        let r = turn.finish().unwrap();
        assert_eq!(r.text, "Hello");
        assert_eq!(r.reasoning.as_deref(), Some("plan"));
        assert!(is_generated_id(&r.tool_calls[0].id) && &*r.tool_calls[1].id == "given");
        let parts = model_parts(&r.text, &r.tool_calls, &r.reasoning_items);
        assert_eq!(
            Value::Array(parts),
            json!([{"text": "Hello", "thoughtSignature": "c2lnMQ=="}, {"text": "", "thoughtSignature": "c2lnMw=="},
                   {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "c2lnMg=="},
                   {"functionCall": {"name": "g", "args": {}, "id": "given"}}])
        );
    }
}
