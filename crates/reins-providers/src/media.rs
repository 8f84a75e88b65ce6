//! What the adapters share about structured output and images: when the native JSON-schema format replaces
//! the final-answer tool, and each API's form of an image.

use reins::{FINAL_ANSWER_TOOL, ToolSpec};
use serde_json::Value;

/// The schema to send in the API's native JSON-schema format, when the final-answer tool of an output
/// schema is the only tool on offer: constraining the answer then takes no tool away. With other tools on
/// offer the tool stays (the native format would bind every turn, tool calls included).
pub(crate) fn native_output(tools: &[ToolSpec]) -> Option<&Value> {
    match tools {
        [only] if only.name == FINAL_ANSWER_TOOL && only.input_schema.is_object() => Some(&only.input_schema),
        _ => None,
    }
}

/// Anthropic: a text block (when there is text) and an `image` block with base64 source per image.
pub(crate) fn anthropic_blocks(text: &str, images: &[reins::Image]) -> Vec<Value> {
    let mut blocks = Vec::with_capacity(images.len() + 1);
    if !text.is_empty() {
        blocks.push(serde_json::json!({"type": "text", "text": text}));
    }
    for i in images {
        blocks.push(serde_json::json!({"type": "image",
            "source": {"type": "base64", "media_type": i.media_type(), "data": i.base64()}}));
    }
    blocks
}

/// OpenAI Responses: `input_text` (when there is text) and an `input_image` (a `data:` URL) per image.
pub(crate) fn responses_parts(text: &str, images: &[reins::Image]) -> Value {
    let mut parts = Vec::with_capacity(images.len() + 1);
    if !text.is_empty() {
        parts.push(serde_json::json!({"type": "input_text", "text": text}));
    }
    for i in images {
        parts.push(serde_json::json!({"type": "input_image", "image_url": i.data_url(), "detail": "auto"}));
    }
    Value::Array(parts)
}

/// OpenAI Chat: a `text` part (when there is text) and an `image_url` part (a `data:` URL) per image.
pub(crate) fn chat_parts(text: &str, images: &[reins::Image]) -> Vec<Value> {
    let mut parts = Vec::with_capacity(images.len() + 1);
    if !text.is_empty() {
        parts.push(serde_json::json!({"type": "text", "text": text}));
    }
    for i in images {
        parts.push(serde_json::json!({"type": "image_url", "image_url": {"url": i.data_url(), "detail": "auto"}}));
    }
    parts
}

/// OpenAI Chat: a `tool` message holds text only, so the images of a batch's results travel in one user
/// message right after the batch's last tool message, each introduced by the id of the call that returned it.
#[derive(Default)]
pub(crate) struct ChatToolImages {
    parts: Vec<Value>,
}

impl ChatToolImages {
    /// Notes the images of one tool result.
    pub fn add(&mut self, call_id: &str, images: &[reins::Image]) {
        if images.is_empty() {
            return;
        }
        let text = format!("The image(s) returned by tool call {call_id}:");
        self.parts.extend(chat_parts(&text, images));
    }

    /// Sends what was noted, as a user message.
    pub fn flush(&mut self, messages: &mut Vec<Value>) {
        if !self.parts.is_empty() {
            messages.push(serde_json::json!({"role": "user", "content": std::mem::take(&mut self.parts)}));
        }
    }
}
