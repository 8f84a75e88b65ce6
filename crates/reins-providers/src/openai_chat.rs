//! OpenAI Chat Completions (`POST {base}/chat/completions`), the format every OpenAI-compatible server
//! speaks (vLLM, llama.cpp, Ollama, LM Studio, OpenRouter, ...).

use reins::{FinishReason, Message, ModelRequest, ModelResponse, ToolCall, Usage};
use serde_json::{Map, Value, json};

use crate::provider::Settings;
use crate::sse::SseEvent;
use crate::wire::{
    Emit, Failure, arguments_text, checked_usage, count, error_object, event_json, parse_arguments, schema_object,
    str_at, usage,
};

/// The request body.
pub(crate) fn body(s: &Settings, req: &ModelRequest, stream: bool) -> Value {
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    // The instructions: a leading `system` message.
    if let Some(instructions) = &req.instructions {
        messages.push(json!({"role": "system", "content": &**instructions}));
    }
    let mut tool_images = crate::media::ChatToolImages::default();
    for m in req.messages.iter() {
        if !matches!(m, Message::ToolResult(_)) {
            tool_images.flush(&mut messages);
        }
        messages.push(match m {
            Message::User { content, images } if !images.is_empty() => {
                json!({"role": "user", "content": crate::media::chat_parts(content, images)})
            }
            Message::User { content, .. } | Message::Summary { content, .. } => {
                json!({"role": "user", "content": content})
            }
            // Chat Completions has no reasoning that round-trips: reasoning items are never sent.
            Message::Assistant { content, tool_calls, .. } => {
                let mut o = Map::new();
                o.insert("role".into(), "assistant".into());
                let content =
                    if content.is_empty() && !tool_calls.is_empty() { Value::Null } else { content.clone().into() };
                o.insert("content".into(), content);
                if !tool_calls.is_empty() {
                    let calls = tool_calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": arguments_text(&c.arguments)}})
                        })
                        .collect::<Vec<_>>();
                    o.insert("tool_calls".into(), calls.into());
                }
                Value::Object(o)
            }
            Message::ToolResult(r) => {
                tool_images.add(&r.call_id, &r.images);
                json!({"role": "tool", "tool_call_id": r.call_id, "content": r.content})
            }
        });
    }
    tool_images.flush(&mut messages);
    let mut b = Map::new();
    b.insert("model".into(), s.model.clone().into());
    b.insert("messages".into(), messages.into());
    if let Some(schema) = crate::media::native_output(&req.tools) {
        b.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": reins::FINAL_ANSWER_TOOL, "schema": schema, "strict": false}}),
        );
    } else if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": schema_object(&t.input_schema)}})
            })
            .collect::<Vec<_>>();
        b.insert("tools".into(), tools.into());
        if let Some(choice) = s.tool_choice.openai(|name| json!({"type": "function", "function": {"name": name}})) {
            b.insert("tool_choice".into(), choice);
        }
    }
    if let Some(n) = s.openai_cap() {
        b.insert(s.chat_max_tokens_field.clone(), n.into());
    }
    if let Some(t) = s.temperature {
        b.insert("temperature".into(), json!(t));
    }
    if let Some(effort) = s.reasoning_effort {
        b.insert("reasoning_effort".into(), effort.as_str().into());
    }
    b.insert("stream".into(), stream.into());
    if stream {
        b.insert("stream_options".into(), json!({"include_usage": true}));
    }
    for (k, v) in &s.extra_body {
        b.insert(k.clone(), v.clone());
    }
    Value::Object(b)
}

fn finish_reason(r: &str) -> FinishReason {
    match r {
        "stop" => FinishReason::Stop,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "length" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

pub(crate) fn parse_usage(u: &Value) -> Option<Usage> {
    checked_usage(u, |u| {
        Ok(usage(
            count(u, &["prompt_tokens"])?,
            count(u, &["completion_tokens"])?,
            count(u, &["prompt_tokens_details", "cached_tokens"])?,
            count(u, &["completion_tokens_details", "reasoning_tokens"])?,
        ))
    })
}

/// Text content: a string, or (some servers) an array of `{"type": "text", "text"}` parts.
fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

fn reasoning_of(m: &Value) -> &str {
    m["reasoning_content"].as_str().or_else(|| m["reasoning"].as_str()).unwrap_or("")
}

fn call_id(id: &str, index: usize) -> String {
    if id.is_empty() { format!("call_{index}") } else { id.to_owned() }
}

/// Parses a complete (non-streamed) response.
pub(crate) fn parse(v: &Value) -> Result<ModelResponse, Failure> {
    if !v["error"].is_null() {
        return Err(error_object(v));
    }
    let Some(choice) = v["choices"].as_array().and_then(|c| c.first()) else {
        return Err(Failure::malformed("the response has no choices"));
    };
    let m = &choice["message"];
    if !m.is_object() {
        return Err(Failure::malformed("the first choice has no message"));
    }
    let mut text = content_text(&m["content"]);
    let refusal = str_at(m, "refusal");
    let mut tool_calls = Vec::new();
    if let Some(calls) = m["tool_calls"].as_array() {
        for (i, c) in calls.iter().enumerate() {
            let f = &c["function"];
            let arguments = match &f["arguments"] {
                Value::String(raw) => parse_arguments(raw),
                Value::Null => Value::Object(Map::new()),
                other => other.clone(),
            };
            tool_calls.push(ToolCall::new(call_id(str_at(c, "id"), i), str_at(f, "name"), arguments));
        }
    }
    let mut finish = choice["finish_reason"].as_str().map(finish_reason);
    if !refusal.is_empty() {
        finish = Some(FinishReason::Refusal);
        if text.is_empty() {
            text = refusal.to_owned();
        }
    }
    let reasoning = reasoning_of(m);
    crate::response_model(v["model"].as_str());
    Ok(ModelResponse {
        text,
        tool_calls,
        usage: parse_usage(&v["usage"]),
        reasoning: (!reasoning.is_empty()).then(|| reasoning.to_owned()),
        reasoning_items: Vec::new(),
        finish_reason: finish,
        answered_by: None,
    })
}

#[derive(Default)]
struct PartialCall {
    wire_index: u64,
    id: String,
    name: String,
    arguments: String,
    announced: bool,
}

/// Assembles a streamed response from its chunks.
#[derive(Default)]
pub(crate) struct Stream {
    text: String,
    reasoning: String,
    refusal: String,
    calls: Vec<PartialCall>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    /// A chunk's usage was malformed: the response's usage is unknown.
    usage_malformed: bool,
    /// The model that answered, from the first chunk that names it.
    model: Option<String>,
    done: bool,
}

impl Stream {
    /// Takes one event; returns true once the stream is complete (`[DONE]`).
    pub fn on_event(&mut self, ev: &SseEvent, emit: &mut Emit) -> Result<bool, Failure> {
        if ev.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        let v = event_json(&ev.event, &ev.data)?;
        if !v["error"].is_null() {
            return Err(error_object(&v));
        }
        if !v["usage"].is_null() {
            // A malformed usage in any chunk makes the response's usage unknown, never that of another chunk.
            match parse_usage(&v["usage"]) {
                Some(u) => self.usage = Some(u),
                None => self.usage_malformed = true,
            }
        }
        if let (None, Some(m)) = (&self.model, v["model"].as_str()) {
            self.model = Some(m.to_owned());
        }
        let Some(choices) = v["choices"].as_array() else { return Ok(false) };
        for choice in choices.iter().filter(|c| c["index"].as_u64().unwrap_or(0) == 0) {
            let d = &choice["delta"];
            let text = content_text(&d["content"]);
            if !text.is_empty() {
                emit.text(&text);
                self.text.push_str(&text);
            }
            let reasoning = reasoning_of(d);
            if !reasoning.is_empty() {
                emit.reasoning(reasoning);
                self.reasoning.push_str(reasoning);
            }
            self.refusal.push_str(str_at(d, "refusal"));
            if let Some(calls) = d["tool_calls"].as_array() {
                for (pos, c) in calls.iter().enumerate() {
                    self.on_call_delta(c, pos, emit);
                }
            }
            if let Some(r) = choice["finish_reason"].as_str() {
                self.finish = Some(finish_reason(r));
            }
        }
        Ok(false)
    }

    fn on_call_delta(&mut self, c: &Value, pos: usize, emit: &mut Emit) {
        // Servers that omit `index` send whole calls, one per position.
        let wire_index = c["index"].as_u64().unwrap_or(pos as u64);
        let id = str_at(c, "id");
        let i = match self.calls.iter().position(|p| p.wire_index == wire_index) {
            Some(i) if id.is_empty() || self.calls[i].id.is_empty() || self.calls[i].id == id => i,
            _ => {
                self.calls.push(PartialCall { wire_index, ..Default::default() });
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[i];
        if call.id.is_empty() && !id.is_empty() {
            call.id = id.to_owned();
        }
        let f = &c["function"];
        let name = str_at(f, "name");
        if call.name.is_empty() && !name.is_empty() {
            call.name = name.to_owned();
        }
        let fragment = match &f["arguments"] {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        call.arguments.push_str(&fragment);
        if !call.announced && !call.name.is_empty() {
            call.announced = true;
            emit.call(i, &call_id(&call.id, i), &call.name);
            emit.arguments(i, &call.arguments);
        } else if call.announced {
            emit.arguments(i, &fragment);
        }
    }

    /// The assembled response. `eof`: the stream ended without `[DONE]`, which is fine once a finish
    /// reason arrived (some servers omit `[DONE]`), and an early end otherwise.
    pub fn finish(mut self) -> Result<ModelResponse, Failure> {
        if !self.done && self.finish.is_none() {
            return Err(Failure::transient("the stream ended before the response was complete"));
        }
        self.calls.sort_by_key(|c| c.wire_index);
        let tool_calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(i, c)| ToolCall::new(call_id(&c.id, i), c.name, parse_arguments(&c.arguments)))
            .collect();
        let mut finish = self.finish;
        let mut text = self.text;
        if !self.refusal.is_empty() {
            finish = Some(FinishReason::Refusal);
            if text.is_empty() {
                text = self.refusal;
            }
        }
        crate::response_model(self.model.as_deref());
        Ok(ModelResponse {
            text,
            tool_calls,
            usage: self.usage,
            reasoning: (!self.reasoning.is_empty()).then_some(self.reasoning),
            reasoning_items: Vec::new(),
            finish_reason: finish,
            answered_by: None,
        })
    }
}
