//! The OpenAI Responses API (`POST {base}/responses`).

use std::collections::BTreeMap;

use reins::{FinishReason, Message, ModelRequest, ModelResponse, ToolCall, Usage};
use serde_json::{Map, Value, json};

use crate::provider::{Api, Settings};
use crate::sse::SseEvent;
use crate::wire::{
    Emit, FailKind, Failure, arguments_text, checked_usage, count, error_object, event_json, parse_arguments,
    schema_object, str_at, usage,
};

/// The request body.
pub(crate) fn body(s: &Settings, req: &ModelRequest, stream: bool) -> Value {
    let mut input = Vec::with_capacity(req.messages.len());
    for m in req.messages.iter() {
        match m {
            Message::User { content, images } if !images.is_empty() => input.push(
                json!({"type": "message", "role": "user", "content": crate::media::responses_parts(content, images)}),
            ),
            Message::User { content, .. } | Message::Summary { content, .. } => {
                input.push(json!({"type": "message", "role": "user", "content": content}))
            }
            Message::Assistant { content, tool_calls, reasoning } => {
                // Reasoning items first, unchanged and in order (another API's are dropped).
                input.extend(crate::reasoning::sent_back(Api::OpenAiResponses, reasoning).cloned());
                if !content.is_empty() || tool_calls.is_empty() {
                    input.push(json!({"type": "message", "role": "assistant", "content": content}));
                }
                for c in tool_calls {
                    input.push(json!({"type": "function_call", "call_id": c.id, "name": c.name,
                                      "arguments": arguments_text(&c.arguments)}));
                }
            }
            Message::ToolResult(r) => {
                let output = if r.images.is_empty() {
                    r.content.clone().into()
                } else {
                    crate::media::responses_parts(&r.content, &r.images)
                };
                input.push(json!({"type": "function_call_output", "call_id": r.call_id, "output": output}))
            }
        }
    }
    let mut b = Map::new();
    b.insert("model".into(), s.model.clone().into());
    if let Some(instructions) = &req.instructions {
        b.insert("instructions".into(), (**instructions).into());
    }
    b.insert("input".into(), input.into());
    if let Some(schema) = crate::media::native_output(&req.tools) {
        b.insert(
            "text".into(),
            json!({"format": {"type": "json_schema", "name": reins::FINAL_ANSWER_TOOL, "schema": schema, "strict": false}}),
        );
    } else if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": schema_object(&t.input_schema), "strict": false})
            })
            .collect::<Vec<_>>();
        b.insert("tools".into(), tools.into());
        if let Some(choice) = s.tool_choice.openai(|name| json!({"type": "function", "name": name})) {
            b.insert("tool_choice".into(), choice);
        }
    }
    if let Some(n) = s.openai_cap() {
        b.insert("max_output_tokens".into(), n.into());
    }
    if let Some(t) = s.temperature {
        b.insert("temperature".into(), json!(t));
    }
    if let Some(effort) = s.reasoning_effort {
        b.insert("reasoning".into(), json!({"effort": effort.as_str()}));
    }
    if crate::reasoning::responses_keeps_reasoning(s) {
        // Reasoning is kept by Reins, not the server: each item comes with its encrypted content, to be sent back.
        b.insert("store".into(), false.into());
        b.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if let Some(key) = req.cache_key.as_deref().filter(|k| s.prompt_cache && !k.is_empty()) {
        b.insert("prompt_cache_key".into(), key.into());
    }
    b.insert("stream".into(), stream.into());
    for (k, v) in &s.extra_body {
        b.insert(k.clone(), v.clone());
    }
    Value::Object(b)
}

pub(crate) fn parse_usage(u: &Value) -> Option<Usage> {
    checked_usage(u, |u| {
        Ok(usage(
            count(u, &["input_tokens"])?,
            count(u, &["output_tokens"])?,
            count(u, &["input_tokens_details", "cached_tokens"])?,
            count(u, &["output_tokens_details", "reasoning_tokens"])?,
        ))
    })
}

/// One output item, as far as it is known.
#[derive(Clone, Debug)]
enum Item {
    Message {
        text: String,
        refusal: String,
    },
    Call {
        call_id: String,
        name: String,
        arguments: String,
    },
    /// A reasoning item: its text (summary or content), and the item itself when it can be sent back (it has
    /// `encrypted_content`).
    Reasoning {
        text: String,
        keep: Option<Value>,
    },
    Other,
}

fn item_of(v: &Value) -> Item {
    match str_at(v, "type") {
        "message" => {
            let (mut text, mut refusal) = (String::new(), String::new());
            for part in v["content"].as_array().into_iter().flatten() {
                match str_at(part, "type") {
                    "output_text" => text.push_str(str_at(part, "text")),
                    "refusal" => refusal.push_str(str_at(part, "refusal")),
                    _ => {}
                }
            }
            Item::Message { text, refusal }
        }
        "function_call" => {
            let call_id = match str_at(v, "call_id") {
                "" => str_at(v, "id"),
                id => id,
            };
            let arguments = match &v["arguments"] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            Item::Call { call_id: call_id.to_owned(), name: str_at(v, "name").to_owned(), arguments }
        }
        "reasoning" => {
            let mut parts = Vec::new();
            for key in ["summary", "content"] {
                for p in v[key].as_array().into_iter().flatten() {
                    if let Some(t) = p["text"].as_str() {
                        parts.push(t);
                    }
                }
            }
            let keep = v["encrypted_content"].as_str().is_some_and(|e| !e.is_empty()).then(|| v.clone());
            Item::Reasoning { text: parts.join("\n\n"), keep }
        }
        _ => Item::Other,
    }
}

/// Builds the response from output items and the response object's status, details and usage.
fn assemble(items: impl IntoIterator<Item = Item>, response: &Value) -> ModelResponse {
    let (mut text, mut refusal, mut reasoning) = (String::new(), String::new(), Vec::new());
    let (mut tool_calls, mut kept) = (Vec::new(), Vec::new());
    for item in items {
        match item {
            Item::Message { text: t, refusal: r } => {
                text.push_str(&t);
                refusal.push_str(&r);
            }
            Item::Call { call_id, name, arguments } => {
                let id = if call_id.is_empty() { format!("call_{}", tool_calls.len()) } else { call_id };
                tool_calls.push(ToolCall::new(id, name, parse_arguments(&arguments)));
            }
            Item::Reasoning { text: t, keep } => {
                if let Some(item) = keep {
                    kept.push(crate::reasoning::item(Api::OpenAiResponses, item));
                }
                if !t.is_empty() {
                    reasoning.push(t);
                }
            }
            Item::Other => {}
        }
    }
    let finish = if str_at(response, "status") == "incomplete" {
        Some(match str_at(&response["incomplete_details"], "reason") {
            "max_output_tokens" => FinishReason::Length,
            "content_filter" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_owned()),
        })
    } else if !refusal.is_empty() {
        Some(FinishReason::Refusal)
    } else if !tool_calls.is_empty() {
        Some(FinishReason::ToolCalls)
    } else {
        Some(FinishReason::Stop)
    };
    if text.is_empty() && !refusal.is_empty() {
        text = refusal;
    }
    crate::response_model(response["model"].as_str());
    ModelResponse {
        text,
        tool_calls,
        usage: parse_usage(&response["usage"]),
        reasoning: (!reasoning.is_empty()).then(|| reasoning.join("\n\n")),
        reasoning_items: kept,
        finish_reason: finish,
        answered_by: None,
    }
}

fn failed(response: &Value) -> Failure {
    match &response["error"] {
        e if e.is_object() => error_object(e),
        _ => Failure::new(FailKind::Failed, "the provider reported that the response failed, without saying why"),
    }
}

/// Parses a complete (non-streamed) response.
pub(crate) fn parse(v: &Value) -> Result<ModelResponse, Failure> {
    if v["error"].is_object() || str_at(v, "status") == "failed" {
        return Err(failed(v));
    }
    let Some(output) = v["output"].as_array() else {
        return Err(Failure::malformed("the response has no output"));
    };
    Ok(assemble(output.iter().map(item_of), v))
}

/// Assembles a streamed response from its events.
#[derive(Default)]
pub(crate) struct Stream {
    items: BTreeMap<u64, Item>,
    /// Output index of each function call → its 0-based position among the calls.
    call_positions: BTreeMap<u64, usize>,
    /// Item id → output index, for servers that name items by id only (llama.cpp sends no `output_index`).
    ids: std::collections::HashMap<String, u64>,
    last: Option<Value>,
}

impl Stream {
    /// The output index an event is about: its `output_index`, else the index of its item id (a new id
    /// gets the next index), else 0.
    fn index_of(&mut self, v: &Value) -> u64 {
        let id = match str_at(v, "item_id") {
            "" => str_at(&v["item"], "id"),
            id => id,
        };
        if let Some(i) = v["output_index"].as_u64() {
            if !id.is_empty() {
                self.ids.insert(id.to_owned(), i);
            }
            return i;
        }
        if id.is_empty() {
            return 0;
        }
        if let Some(&i) = self.ids.get(id) {
            return i;
        }
        let next = self.items.keys().next_back().map_or(0, |k| k + 1).max(self.ids.len() as u64);
        self.ids.insert(id.to_owned(), next);
        next
    }

    fn call_position(&mut self, output_index: u64) -> usize {
        let next = self.call_positions.len();
        *self.call_positions.entry(output_index).or_insert(next)
    }

    /// Takes one event; returns true once the response is complete.
    pub fn on_event(&mut self, ev: &SseEvent, emit: &mut Emit) -> Result<bool, Failure> {
        let v = event_json(&ev.event, &ev.data)?;
        let kind = match str_at(&v, "type") {
            "" => ev.event.as_str(),
            t => t,
        };
        let index = self.index_of(&v);
        match kind {
            "response.output_item.added" => {
                let item = item_of(&v["item"]);
                if let Item::Call { call_id, name, arguments } = &item {
                    let (call_id, name, arguments) = (call_id.clone(), name.clone(), arguments.clone());
                    let pos = self.call_position(index);
                    emit.call(pos, &call_id, &name);
                    emit.arguments(pos, &arguments);
                }
                self.items.insert(index, item);
            }
            "response.output_item.done" => {
                let item = item_of(&v["item"]);
                if matches!(item, Item::Call { .. }) && !self.call_positions.contains_key(&index) {
                    if let Item::Call { call_id, name, arguments } = &item {
                        let pos = self.call_positions.len();
                        self.call_positions.insert(index, pos);
                        emit.call(pos, call_id, name);
                        emit.arguments(pos, arguments);
                    }
                }
                self.items.insert(index, item);
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let delta = str_at(&v, "delta");
                let refusal = kind == "response.refusal.delta";
                let entry = self
                    .items
                    .entry(index)
                    .or_insert_with(|| Item::Message { text: String::new(), refusal: String::new() });
                if let Item::Message { text, refusal: r } = entry {
                    if refusal {
                        r.push_str(delta);
                    } else {
                        text.push_str(delta);
                        emit.text(delta);
                    }
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let delta = str_at(&v, "delta");
                let entry =
                    self.items.entry(index).or_insert_with(|| Item::Reasoning { text: String::new(), keep: None });
                if let Item::Reasoning { text, .. } = entry {
                    text.push_str(delta);
                    emit.reasoning(delta);
                }
            }
            "response.function_call_arguments.delta" => {
                let delta = str_at(&v, "delta").to_owned();
                let pos = self.call_position(index);
                let entry = self.items.entry(index).or_insert_with(|| Item::Call {
                    call_id: str_at(&v, "item_id").to_owned(),
                    name: String::new(),
                    arguments: String::new(),
                });
                if let Item::Call { arguments, .. } = entry {
                    arguments.push_str(&delta);
                    emit.arguments(pos, &delta);
                }
            }
            "response.function_call_arguments.done" => {
                if let (Some(Item::Call { arguments, .. }), Some(done)) =
                    (self.items.get_mut(&index), v["arguments"].as_str())
                {
                    *arguments = done.to_owned();
                }
            }
            "response.completed" | "response.incomplete" => {
                self.last = Some(v["response"].clone());
                return Ok(true);
            }
            "response.failed" => return Err(failed(&v["response"])),
            "error" => return Err(error_object(&v)),
            // Created, in-progress, content parts, annotations, done-events of text: nothing to add.
            _ => {}
        }
        Ok(false)
    }

    /// The assembled response. The final response object's output wins when it has one; otherwise the
    /// items seen in the stream are used.
    pub fn finish(self) -> Result<ModelResponse, Failure> {
        let Some(last) = self.last else {
            return Err(Failure::transient("the stream ended before the response was complete"));
        };
        match last["output"].as_array() {
            Some(output) if !output.is_empty() => Ok(assemble(output.iter().map(item_of), &last)),
            _ => Ok(assemble(self.items.into_values(), &last)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::SseParser;

    fn run(stream: &str) -> (ModelResponse, Vec<reins::Delta>) {
        let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let h = heard.clone();
        let sink = reins::DeltaSink::new(move |d| h.lock().unwrap().push(d.clone()));
        let mut emit = Emit::new(Some(sink));
        let mut parser = SseParser::new(1 << 20);
        let mut events = Vec::new();
        parser.push(stream.as_bytes(), &mut events).unwrap();
        let mut s = Stream::default();
        for ev in &events {
            if s.on_event(ev, &mut emit).unwrap() {
                break;
            }
        }
        let r = s.finish().unwrap();
        let deltas = heard.lock().unwrap().clone();
        (r, deltas)
    }

    /// As llama.cpp streams: items named by id, no `output_index`, the final response without output.
    #[test]
    fn items_named_by_id_only_stay_apart() {
        let ev = |v: Value| format!("data: {v}\n\n");
        let mut s = String::new();
        for (id, call, args) in
            [("fc_1", "call_1", ["{\"city\"", ": \"Paris\"}"]), ("fc_2", "call_2", ["{\"city\"", ": \"Rome\"}"])]
        {
            s += &ev(
                json!({"type": "response.output_item.added", "item": {"id": id, "type": "function_call", "call_id": call, "name": "get_weather", "arguments": ""}}),
            );
            for a in args {
                s += &ev(json!({"type": "response.function_call_arguments.delta", "item_id": id, "delta": a}));
            }
        }
        s += &ev(json!({"type": "response.completed", "response": {"status": "completed", "output": []}}));
        let (r, deltas) = run(&s);
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].arguments, json!({"city": "Paris"}));
        assert_eq!(r.tool_calls[1].arguments, json!({"city": "Rome"}));
        let second: String = deltas
            .iter()
            .filter_map(|d| match d {
                reins::Delta::ToolArguments { index: 1, fragment } => Some(fragment.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(second, "{\"city\": \"Rome\"}");
    }
}
