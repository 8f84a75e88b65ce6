//! The vendor-free model interface: what a model is sent and what it answers.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::message::{Message, ToolCall};
use crate::tool::ToolSpec;
use crate::usage::Usage;

/// The messages a model is sent: the first user message plus the newest whole groups that fit the
/// context budget. Cloning it is O(1): it shares the transcript's storage instead of copying it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conversation {
    items: imbl::Vector<Arc<Message>>,
}

impl Conversation {
    pub(crate) fn from_vector(items: imbl::Vector<Arc<Message>>) -> Self {
        Self { items }
    }

    /// A conversation holding the given messages.
    pub fn from_messages(messages: impl IntoIterator<Item = Message>) -> Self {
        Self { items: messages.into_iter().map(Arc::new).collect() }
    }

    /// How many messages it holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when it holds no message.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The message at `index`.
    pub fn get(&self, index: usize) -> Option<&Message> {
        self.items.get(index).map(|m| m.as_ref())
    }

    /// The messages in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Message> + ExactSizeIterator {
        self.items.iter().map(|m| m.as_ref())
    }

    /// The last message.
    pub fn last(&self) -> Option<&Message> {
        self.items.last().map(|m| m.as_ref())
    }

    /// A copy of the messages.
    pub fn to_vec(&self) -> Vec<Message> {
        self.iter().cloned().collect()
    }
}

impl Serialize for Conversation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// What a model is asked: the selected messages and the tools it may call.
#[derive(Clone, Debug, Default)]
pub struct ModelRequest {
    /// The selected conversation.
    pub messages: Conversation,
    /// The tools on offer, in registration order.
    pub tools: Arc<[ToolSpec]>,
}

/// Why a model stopped producing output, where the model says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end of the turn.
    Stop,
    /// The turn ends to let tools run.
    ToolCalls,
    /// The output hit its token cap.
    Length,
    /// A content filter cut the output.
    ContentFilter,
    /// The model refused.
    Refusal,
    /// Any other reason, as the model named it.
    Other(String),
}

/// A model's answer: text, proposed tool calls and, where reported, usage.
///
/// ```
/// let r = reins::ModelResponse::text("done").with_usage(reins::Usage::new(10, 2));
/// assert!(r.tool_calls.is_empty());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// The text of the turn (may be empty).
    #[serde(default)]
    pub text: String,
    /// The proposed calls, in order.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// Token usage, when the model reported it. `None` is "unknown", never zero.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Reasoning or thinking text, where the model returned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Why the model stopped, where it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
}

impl ModelResponse {
    /// A text-only response.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: text.into(), ..Self::default() }
    }

    /// A response proposing the given calls.
    pub fn tool_calls(text: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        Self { text: text.into(), tool_calls: calls, ..Self::default() }
    }

    /// The same response with usage attached.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }
}

/// Why a model call failed. The run ends `model_error` with this message.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The call failed (after the adapter's own retries).
    #[error("model call failed: {0}")]
    Failed(String),
    /// The model's response does not have the required shape.
    #[error("malformed model response: {0}")]
    Malformed(String),
    /// The call was cancelled.
    #[error("model call cancelled")]
    Cancelled,
    /// A scripted model ran out of responses.
    #[error("scripted model exhausted: no response left for call {call}")]
    Exhausted {
        /// The 1-based number of the call that found no response.
        call: usize,
    },
}

/// A language model, seen from the harness: it proposes, it never acts.
///
/// Wrappers (retry, rate limits, fault injection, recording) are `Model`s around a `Model`.
#[async_trait]
pub trait Model: Send + Sync {
    /// Answers one request. Implementations should return promptly once `cancel` fires.
    async fn generate(&self, request: &ModelRequest, cancel: &CancellationToken) -> Result<ModelResponse, ModelError>;
}

#[async_trait]
impl<M: Model + ?Sized> Model for Arc<M> {
    async fn generate(&self, request: &ModelRequest, cancel: &CancellationToken) -> Result<ModelResponse, ModelError> {
        (**self).generate(request, cancel).await
    }
}
