//! The items of a conversation: user prompts, assistant turns with tool calls, and tool results.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::image::Image;

/// One tool call proposed by a model. Its `arguments` are untrusted until the registry validated them.
///
/// ```
/// let call = reins::ToolCall::new("1", "echo", serde_json::json!({"text": "hi"}));
/// assert_eq!(call.name, "echo");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The id the model gave the call; its result carries the same id.
    pub id: std::sync::Arc<str>,
    /// The tool's name.
    pub name: String,
    /// The arguments as the model sent them.
    pub arguments: serde_json::Value,
}

impl ToolCall {
    /// A call with the given id, name and arguments.
    pub fn new(id: impl Into<std::sync::Arc<str>>, name: impl Into<String>, arguments: serde_json::Value) -> Self {
        Self { id: id.into(), name: name.into(), arguments }
    }
}

/// One reasoning item of a model's turn: opaque data tagged with the API that produced it — an Anthropic
/// `thinking` block with its `signature` or a `redacted_thinking` block; an OpenAI Responses `reasoning`
/// item with its `encrypted_content`. It is recorded with the assistant turn, counted in the context
/// budget, sent back unchanged and in order by the adapter of the same API, and never sent to another API.
///
/// Serialized as `{"api", "item"}`: `api` is the API's name in a model spec (`anthropic`, `openai`), `item`
/// the item exactly as that API gave it.
///
/// ```
/// let r = reins::Reasoning::new("anthropic", serde_json::json!({"type": "redacted_thinking", "data": "EmwK"}));
/// assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"api":"anthropic","item":{"data":"EmwK","type":"redacted_thinking"}}"#);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reasoning {
    /// The API that produced it: `anthropic` (Messages) or `openai` (Responses), as in a model spec.
    pub api: String,
    /// The item exactly as the API gave it.
    pub item: serde_json::Value,
}

impl Reasoning {
    /// An item of `api`.
    pub fn new(api: impl Into<String>, item: serde_json::Value) -> Self {
        Reasoning { api: api.into(), item }
    }
}

/// The result of one tool call, tied to the call by its id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the call this answers (shared with the call's [`ToolCall::id`]: no copy per result).
    pub call_id: Arc<str>,
    /// What the model is shown (already bounded).
    pub content: String,
    /// True when the call failed, was refused, timed out or was aborted.
    pub is_error: bool,
    /// Images the tool returned, after the text (absent from the JSON form when there are none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
}

impl ToolResult {
    /// A text result.
    pub fn new(call_id: impl Into<Arc<str>>, content: impl Into<String>, is_error: bool) -> Self {
        Self { call_id: call_id.into(), content: content.into(), is_error, images: Vec::new() }
    }
}

/// One item of a transcript.
///
/// Serialized as `{"role": "user", "content"}` (plus `"images"` when it has any: see [`Image`]),
/// `{"role": "assistant", "content", "tool_calls", "reasoning"}` (no `tool_calls` or `reasoning` key when
/// there are none; see [`Reasoning`]), `{"role": "tool", "call_id", "content", "is_error"}` or
/// `{"role": "summary", "content", "replaces"}` (a compaction: it stands for the `replaces` items right
/// after the first message; adapters send it as a user message).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// A prompt from the user.
    User {
        /// The prompt text.
        content: String,
        /// Images shown with the text (absent from the JSON form when there are none).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<Image>,
    },
    /// A model turn: text and the tool calls it proposes.
    Assistant {
        /// The text of the turn (may be empty).
        content: String,
        /// The proposed calls, in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// The provider's reasoning items of the turn, in order (see [`Reasoning`]).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasoning: Vec<Reasoning>,
    },
    /// The result of one tool call.
    #[serde(rename = "tool")]
    ToolResult(ToolResult),
    /// A compaction: the summary of (or, when no summary could be made, a marker for) the `replaces`
    /// items that follow the first message. From it on, the model sees the first message, this item and
    /// what comes after the items it replaces.
    Summary {
        /// What the model is shown in place of the replaced items.
        content: String,
        /// How many items, counted from the one after the first message, it stands for.
        replaces: u64,
    },
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User { content: content.into(), images: Vec::new() }
    }

    /// A user message with images.
    pub fn user_with_images(content: impl Into<String>, images: Vec<Image>) -> Self {
        Message::User { content: content.into(), images }
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Message::Assistant { content: content.into(), tool_calls, reasoning: Vec::new() }
    }

    /// A tool result message.
    pub fn tool_result(call_id: impl Into<Arc<str>>, content: impl Into<String>, is_error: bool) -> Self {
        Message::ToolResult(ToolResult::new(call_id, content, is_error))
    }

    /// The role name used in the serialized form: `user`, `assistant`, `tool` or `summary`.
    pub fn role(&self) -> &'static str {
        match self {
            Message::User { .. } => "user",
            Message::Assistant { .. } => "assistant",
            Message::ToolResult(_) => "tool",
            Message::Summary { .. } => "summary",
        }
    }

    /// The message's text content.
    pub fn content(&self) -> &str {
        match self {
            Message::User { content, .. } | Message::Assistant { content, .. } | Message::Summary { content, .. } => {
                content
            }
            Message::ToolResult(r) => &r.content,
        }
    }

    /// The images of a user message or a tool result (empty for other roles).
    pub fn images(&self) -> &[Image] {
        match self {
            Message::User { images, .. } => images,
            Message::ToolResult(r) => &r.images,
            _ => &[],
        }
    }

    /// The reasoning items of an assistant message (empty for other roles).
    pub fn reasoning(&self) -> &[Reasoning] {
        match self {
            Message::Assistant { reasoning, .. } => reasoning,
            _ => &[],
        }
    }

    /// The tool calls of an assistant message (empty for other roles).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Message::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }
}
