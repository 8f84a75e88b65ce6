//! Anthropic Messages (`POST {base}/v1/messages`).

use std::collections::BTreeMap;

use reins::{FinishReason, Message, ModelRequest, ModelResponse, Usage};
use serde_json::{Map, Value, json};

use crate::provider::{Api, Settings, ToolChoice};
use crate::sse::SseEvent;
use crate::wire::{
    Emit, Failure, block_tool_call, checked_usage, count, error_object, event_json, parse_arguments, schema_object,
    str_at, usage,
};

/// The `anthropic-version` header sent with every request: the version the official SDKs' current major
/// versions send, whose request types the contract tests check every body against. It refuses sampling
/// parameters (Reins sends none: `temperature` is refused when the provider is built) and validates bodies
/// more strictly than `2023-06-01`. A server that wants another version gets it through a header setting
/// (`[provider] headers = { "anthropic-version" = "2023-06-01" }`), which replaces this one.
pub const API_VERSION: &str = "2026-10-21";

/// The output cap sent when none is configured and the model is unknown (the API requires one): the
/// response cap of every model whose own cap Reins does not know.
pub const DEFAULT_MAX_TOKENS: u64 = crate::provider::DEFAULT_RESPONSE_CAP as u64;

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

/// Appends user content, merging with a preceding user message (tool results and a prompt share one).
fn push_user(messages: &mut Vec<Value>, block: Value) {
    if let Some(last) = messages.last_mut() {
        if last["role"] == "user" {
            if let Value::String(s) = &last["content"] {
                last["content"] = json!([{"type": "text", "text": s}]);
            }
            if let Some(blocks) = last["content"].as_array_mut() {
                blocks.push(block);
                return;
            }
        }
    }
    messages.push(json!({"role": "user", "content": [block]}));
}

/// The request body.
pub(crate) fn body(s: &Settings, req: &ModelRequest, stream: bool) -> Value {
    let mut messages: Vec<Value> = Vec::with_capacity(req.messages.len());
    for m in req.messages.iter() {
        match m {
            Message::User { content, images } if !images.is_empty() => {
                for block in crate::media::anthropic_blocks(content, images) {
                    if messages.last().is_some_and(|l| l["role"] == "user") {
                        push_user(&mut messages, block);
                    } else {
                        messages.push(json!({"role": "user", "content": [block]}));
                    }
                }
            }
            Message::User { content, .. } | Message::Summary { content, .. } => {
                if messages.last().is_some_and(|l| l["role"] == "user") {
                    push_user(&mut messages, json!({"type": "text", "text": content}));
                } else {
                    messages.push(json!({"role": "user", "content": content}));
                }
            }
            Message::Assistant { content, tool_calls, reasoning } => {
                // Signed thinking blocks first, unchanged and in order (another API's are dropped).
                let mut blocks: Vec<Value> = crate::reasoning::sent_back(Api::Anthropic, reasoning).cloned().collect();
                let thinking = blocks.len();
                if !content.is_empty() {
                    blocks.push(json!({"type": "text", "text": content}));
                }
                for c in tool_calls {
                    blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name,
                                       "input": input_object(&c.arguments)}));
                }
                // The API refuses empty assistant content; an empty turn (thinking alone) carries nothing anyway.
                if blocks.len() > thinking {
                    messages.push(json!({"role": "assistant", "content": blocks}));
                }
            }
            Message::ToolResult(r) => {
                let mut block = json!({"type": "tool_result", "tool_use_id": r.call_id, "content": r.content});
                if !r.images.is_empty() {
                    block["content"] = crate::media::anthropic_blocks(&r.content, &r.images).into();
                }
                if r.is_error {
                    block["is_error"] = true.into();
                }
                push_user(&mut messages, block);
            }
        }
    }
    let mut b = Map::new();
    b.insert("model".into(), s.model.clone().into());
    let max_tokens = crate::reasoning::anthropic_max_tokens(&s.model, s.max_output_tokens);
    b.insert("max_tokens".into(), max_tokens.into());
    if let Some(budget) = s.thinking_budget {
        b.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": budget}));
    }
    if let Some(instructions) = &req.instructions {
        b.insert("system".into(), (**instructions).into());
    }
    b.insert("messages".into(), messages.into());
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": schema_object(&t.input_schema)}))
            .collect::<Vec<_>>();
        b.insert("tools".into(), tools.into());
        match &s.tool_choice {
            ToolChoice::Auto => {}
            ToolChoice::Required => {
                b.insert("tool_choice".into(), json!({"type": "any"}));
            }
            ToolChoice::None => {
                b.insert("tool_choice".into(), json!({"type": "none"}));
            }
            ToolChoice::Tool(name) => {
                b.insert("tool_choice".into(), json!({"type": "tool", "name": name}));
            }
        }
    }
    if s.prompt_cache {
        place_cache_breakpoints(&mut b);
    }
    b.insert("stream".into(), stream.into());
    for (k, v) in &s.extra_body {
        b.insert(k.clone(), v.clone());
    }
    Value::Object(b)
}

/// The `cache_control` marker of a prompt-cache breakpoint (the API's default five-minute lifetime).
fn breakpoint() -> Value {
    json!({"type": "ephemeral"})
}

/// Marks the last block of a message's content as a cache breakpoint. A string content becomes one text
/// block; an empty text block cannot carry a marker (the API refuses it), so such a message is left alone.
fn mark_last_block(message: &mut Value) {
    if let Value::String(text) = &message["content"] {
        if text.is_empty() {
            return;
        }
        message["content"] = json!([{"type": "text", "text": text}]);
    }
    let Some(last) = message["content"].as_array_mut().and_then(|blocks| blocks.last_mut()) else { return };
    if last["type"] == "text" && last["text"].as_str().is_none_or(str::is_empty) {
        return;
    }
    last["cache_control"] = breakpoint();
}

/// Places prompt-cache breakpoints (at most three of the API's four) so that each step of a tool loop reads
/// the previous step's prefix from the cache and writes its own:
/// 1. the end of the instructions (the cached prefix runs tools → system → messages, so this one covers the
///    tools too), or the last tool when there are no instructions;
/// 2. the end of the previous request: the last block of the user message just before the latest assistant
///    turn (step n+1 sends step n's messages unchanged, then the answer and the results), so the read hits
///    however many blocks the last batch added (the API looks back only 20 blocks from a breakpoint);
/// 3. the end of this request: the last block of the final user message, written for the next step.
///
/// Only user messages are marked (an assistant turn may hold thinking blocks, which cannot carry one).
fn place_cache_breakpoints(b: &mut Map<String, Value>) {
    match b.get_mut("system") {
        Some(Value::String(text)) if !text.is_empty() => {
            let text = std::mem::take(text);
            b.insert("system".into(), json!([{"type": "text", "text": text, "cache_control": breakpoint()}]));
        }
        _ => {
            if let Some(last) = b.get_mut("tools").and_then(Value::as_array_mut).and_then(|t| t.last_mut()) {
                last["cache_control"] = breakpoint();
            }
        }
    }
    let Some(messages) = b.get_mut("messages").and_then(Value::as_array_mut) else { return };
    let Some(last) = messages.len().checked_sub(1) else { return };
    if messages[last]["role"] != "user" {
        return;
    }
    mark_last_block(&mut messages[last]);
    let previous_answer = messages[..last].iter().rposition(|m| m["role"] == "assistant");
    if let Some(i) = previous_answer.and_then(|a| a.checked_sub(1)) {
        if messages[i]["role"] == "user" {
            mark_last_block(&mut messages[i]);
        }
    }
}

fn stop_reason(r: &str) -> FinishReason {
    match r {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "refusal" => FinishReason::Refusal,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// Input counts all of it: uncached, read from the cache (`cache_read_input_tokens`), and written to it
/// (`cache_creation_input_tokens`), the last two kept apart for pricing. Reasoning is the
/// `thinking_tokens` of `output_tokens_details`, where the API reports them.
pub(crate) fn parse_usage(u: &Value) -> Option<Usage> {
    checked_usage(u, |u| {
        let cached = count(u, &["cache_read_input_tokens"])?;
        let written = count(u, &["cache_creation_input_tokens"])?;
        let input = count(u, &["input_tokens"])?.saturating_add(cached).saturating_add(written);
        let mut usage = usage(
            input,
            count(u, &["output_tokens"])?,
            cached,
            count(u, &["output_tokens_details", "thinking_tokens"])?,
        );
        usage.cache_write_tokens = written.min(input - usage.cached_input_tokens);
        Ok(usage)
    })
}

#[derive(Clone, Debug)]
enum Block {
    Text(String),
    /// A thinking block: its text and signature (streamed in by deltas), and the block as it started.
    Thinking {
        text: String,
        signature: String,
        raw: Value,
    },
    /// A `redacted_thinking` block, whole.
    Redacted(Value),
    ToolUse {
        id: String,
        name: String,
        json: String,
        input: Option<Value>,
    },
    Other,
}

fn block_of(v: &Value) -> Block {
    match str_at(v, "type") {
        "text" => Block::Text(str_at(v, "text").to_owned()),
        "thinking" => Block::Thinking {
            text: str_at(v, "thinking").to_owned(),
            signature: str_at(v, "signature").to_owned(),
            raw: v.clone(),
        },
        "redacted_thinking" => Block::Redacted(v.clone()),
        "tool_use" => Block::ToolUse {
            id: str_at(v, "id").to_owned(),
            name: str_at(v, "name").to_owned(),
            json: String::new(),
            input: v.get("input").cloned(),
        },
        _ => Block::Other,
    }
}

fn assemble(blocks: impl IntoIterator<Item = Block>, stop: Option<&str>, usage: Option<Usage>) -> ModelResponse {
    let (mut text, mut reasoning, mut tool_calls) = (String::new(), Vec::new(), Vec::new());
    let mut items = Vec::new();
    for b in blocks {
        match b {
            Block::Text(t) => text.push_str(&t),
            Block::Thinking { text: t, signature, raw } => {
                // Only a signed block can go back (the API checks the signature); unsigned thinking, as some
                // compatible servers send, is shown and not kept.
                if !signature.is_empty() {
                    let mut item = raw;
                    if let Value::Object(o) = &mut item {
                        o.insert("thinking".into(), t.clone().into());
                        o.insert("signature".into(), signature.into());
                    }
                    items.push(crate::reasoning::item(Api::Anthropic, item));
                }
                if !t.is_empty() {
                    reasoning.push(t);
                }
            }
            Block::Redacted(raw) => items.push(crate::reasoning::item(Api::Anthropic, raw)),
            Block::ToolUse { id, name, json, input } => {
                // Streamed input arrives as JSON text; a complete response has the object.
                let n = tool_calls.len();
                tool_calls.push(block_tool_call(id, name, &json, input, "toolu", n));
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

/// Parses a complete (non-streamed) response.
pub(crate) fn parse(v: &Value) -> Result<ModelResponse, Failure> {
    if str_at(v, "type") == "error" || v["error"].is_object() {
        return Err(error_object(&v["error"]));
    }
    let Some(content) = v["content"].as_array() else {
        return Err(Failure::malformed("the response has no content"));
    };
    crate::response_model(v["model"].as_str());
    Ok(assemble(content.iter().map(block_of), v["stop_reason"].as_str(), parse_usage(&v["usage"])))
}

/// Assembles a streamed response from its events.
#[derive(Default)]
pub(crate) struct Stream {
    blocks: BTreeMap<u64, Block>,
    /// Block index of each tool use → its 0-based position among the calls.
    call_positions: BTreeMap<u64, usize>,
    usage: Option<Value>,
    stop: Option<String>,
    /// The model that answered (`message_start`).
    model: Option<String>,
    done: bool,
}

impl Stream {
    /// Takes one event; returns true once the message is complete (`message_stop`).
    pub fn on_event(&mut self, ev: &SseEvent, emit: &mut Emit) -> Result<bool, Failure> {
        let v = event_json(&ev.event, &ev.data)?;
        let kind = match str_at(&v, "type") {
            "" => ev.event.as_str(),
            t => t,
        };
        let index = v["index"].as_u64().unwrap_or(0);
        if let ("message_start", Some(m)) = (kind, v["message"]["model"].as_str()) {
            self.model = Some(m.to_owned());
        }
        match kind {
            "message_start" if v["message"]["usage"].is_object() => {
                self.usage = Some(v["message"]["usage"].clone());
            }
            "content_block_start" => {
                let block = block_of(&v["content_block"]);
                match &block {
                    Block::Text(t) => emit.text(t),
                    Block::Thinking { text, .. } => emit.reasoning(text),
                    Block::ToolUse { id, name, .. } => {
                        let pos = self.call_positions.len();
                        self.call_positions.insert(index, pos);
                        emit.call(pos, id, name);
                    }
                    Block::Redacted(_) | Block::Other => {}
                }
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let d = &v["delta"];
                let block = self.blocks.entry(index).or_insert(Block::Other);
                match (str_at(d, "type"), block) {
                    ("text_delta", Block::Text(t)) => {
                        let s = str_at(d, "text");
                        t.push_str(s);
                        emit.text(s);
                    }
                    ("thinking_delta", Block::Thinking { text, .. }) => {
                        let s = str_at(d, "thinking");
                        text.push_str(s);
                        emit.reasoning(s);
                    }
                    ("signature_delta", Block::Thinking { signature, .. }) => {
                        signature.push_str(str_at(d, "signature"));
                    }
                    ("input_json_delta", Block::ToolUse { json, .. }) => {
                        let s = str_at(d, "partial_json");
                        json.push_str(s);
                        if let Some(&pos) = self.call_positions.get(&index) {
                            emit.arguments(pos, s);
                        }
                    }
                    // Citations, and deltas for blocks never started: nothing to assemble.
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v["delta"]["stop_reason"].as_str() {
                    self.stop = Some(r.to_owned());
                }
                // Counts here are cumulative and override those of message_start.
                if let (Some(base), Some(more)) = (self.usage.as_mut(), v["usage"].as_object()) {
                    for (k, val) in more {
                        if !val.is_null() {
                            base[k.as_str()] = val.clone();
                        }
                    }
                } else if v["usage"].is_object() {
                    self.usage = Some(v["usage"].clone());
                }
            }
            "message_stop" => {
                self.done = true;
                return Ok(true);
            }
            "error" => return Err(error_object(&v["error"])),
            // ping, content_block_stop, and event types added later: nothing to do.
            _ => {}
        }
        Ok(false)
    }

    /// The assembled response.
    pub fn finish(self) -> Result<ModelResponse, Failure> {
        if !self.done {
            return Err(Failure::transient("the stream ended before the response was complete"));
        }
        let usage = self.usage.as_ref().and_then(parse_usage);
        crate::response_model(self.model.as_deref());
        Ok(assemble(self.blocks.into_values(), self.stop.as_deref(), usage))
    }
}
