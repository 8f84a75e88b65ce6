//! The vendor-free model interface: what a model is sent and what it answers.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::cost::Price;
use crate::message::{Message, ToolCall};
use crate::tool::ToolSpec;
use crate::usage::Usage;

/// The messages a model is sent: the first user message plus the newest whole groups that fit the
/// context budget. Cloning it is O(1): it shares the transcript's storage instead of copying it, and a
/// selection is a view (the first message, then the messages from an index on), so making one copies
/// nothing either.
#[derive(Clone, Debug, Default)]
pub struct Conversation {
    items: imbl::Vector<Message>,
    /// 0: all of `items`. Otherwise `items[0]`, then `head` if any, then `items[start..]` without
    /// `items[skip]`.
    start: usize,
    /// An item shown right after the first message (a summary, or the marker of left-out groups).
    head: Head,
    /// The index of an item of `items[start..]` left out (the summary shown as `head`); `usize::MAX`: none.
    skip: usize,
}

/// The item a [`Conversation`] shows right after its first message.
#[derive(Clone, Debug, Default)]
enum Head {
    /// None.
    #[default]
    None,
    /// An item of its own (the marker of left-out groups).
    Own(Arc<Message>),
    /// The item of `items` at this index (the newest summary).
    At(usize),
}

impl PartialEq for Conversation {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Conversation {
    pub(crate) fn from_vector(items: imbl::Vector<Message>) -> Self {
        Self { items, start: 0, head: Head::None, skip: usize::MAX }
    }

    /// `items[0]` followed by `items[start..]` (all of `items` when `start` is 0 or 1).
    pub(crate) fn first_and_from(items: imbl::Vector<Message>, start: usize) -> Self {
        let start = if start <= 1 { 0 } else { start.min(items.len()) };
        Self { items, start, head: Head::None, skip: usize::MAX }
    }

    /// `items[0]`, then `head`, then `items[start..]`. O(1).
    pub(crate) fn first_head_from(items: imbl::Vector<Message>, head: Arc<Message>, start: usize) -> Self {
        let start = start.clamp(1, items.len().max(1));
        Self { items, start, head: Head::Own(head), skip: usize::MAX }
    }

    /// `items[0]`, then `items[head]`, then `items[start..]` without `items[head]` (when it lies there). O(1).
    pub(crate) fn first_item_from(items: imbl::Vector<Message>, head: usize, start: usize) -> Self {
        let start = start.clamp(1, items.len().max(1));
        let skip = if head >= start && head < items.len() { head } else { usize::MAX };
        Self { items, start, head: Head::At(head), skip }
    }

    /// The item shown right after the first message, if any.
    fn head(&self) -> Option<&Message> {
        match &self.head {
            Head::None => None,
            Head::Own(m) => Some(m),
            Head::At(i) => self.items.get(*i),
        }
    }

    /// Every message of the transcript this conversation was selected from, in order — also those the
    /// selection leaves out (what was recorded, not what is sent).
    pub(crate) fn recorded(&self) -> impl Iterator<Item = &Message> {
        self.items.iter()
    }

    /// A conversation holding the given messages.
    pub fn from_messages(messages: impl IntoIterator<Item = Message>) -> Self {
        Self::from_vector(messages.into_iter().collect())
    }

    /// How many messages it holds.
    pub fn len(&self) -> usize {
        if self.start == 0 {
            return self.items.len();
        }
        let rest = self.items.len().saturating_sub(self.start) - usize::from(self.skip != usize::MAX);
        usize::from(!self.items.is_empty()) + usize::from(self.head().is_some()) + rest
    }

    /// True when it holds no message.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The message at `index`.
    pub fn get(&self, index: usize) -> Option<&Message> {
        if self.start == 0 || index == 0 {
            return self.items.get(index);
        }
        let mut r = index - 1;
        if let Some(h) = self.head() {
            if r == 0 {
                return Some(h);
            }
            r -= 1;
        }
        let mut i = self.start.checked_add(r)?;
        if i >= self.skip {
            i = i.checked_add(1)?;
        }
        self.items.get(i)
    }

    /// The messages in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Message> + ExactSizeIterator {
        let focus = self.items.focus();
        let empty = || self.items.focus().narrow(0..0).into_iter();
        if self.start == 0 {
            return ConversationIter { first: None, head: None, rest: focus.into_iter(), tail: empty() };
        }
        let n = self.items.len();
        let (rest, tail) = if self.skip == usize::MAX {
            (focus.narrow(self.start..n).into_iter(), empty())
        } else {
            (focus.narrow(self.start..self.skip).into_iter(), self.items.focus().narrow(self.skip + 1..n).into_iter())
        };
        ConversationIter { first: self.items.front(), head: self.head(), rest, tail }
    }

    /// The last message.
    pub fn last(&self) -> Option<&Message> {
        self.iter().next_back()
    }

    /// A copy of the messages.
    pub fn to_vec(&self) -> Vec<Message> {
        self.iter().cloned().collect()
    }
}

type Items<'a> = imbl::vector::Iter<'a, Message, imbl::shared_ptr::DefaultSharedPtr>;

/// The messages of a [`Conversation`] in order: maybe the first message and a head item, then up to two
/// ranges of the rest.
struct ConversationIter<'a> {
    first: Option<&'a Message>,
    head: Option<&'a Message>,
    rest: Items<'a>,
    tail: Items<'a>,
}

impl<'a> Iterator for ConversationIter<'a> {
    type Item = &'a Message;
    fn next(&mut self) -> Option<&'a Message> {
        self.first.take().or_else(|| self.head.take()).or_else(|| self.rest.next()).or_else(|| self.tail.next())
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n =
            usize::from(self.first.is_some()) + usize::from(self.head.is_some()) + self.rest.len() + self.tail.len();
        (n, Some(n))
    }
}

impl DoubleEndedIterator for ConversationIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.tail
            .next_back()
            .or_else(|| self.rest.next_back())
            .or_else(|| self.head.take())
            .or_else(|| self.first.take())
    }
}

impl ExactSizeIterator for ConversationIter<'_> {}

impl Serialize for Conversation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// What a model is asked: the run's instructions, the selected messages and the tools it may call.
#[derive(Clone, Debug, Default)]
pub struct ModelRequest {
    /// The run's instructions (a system prompt), when it has any. Every adapter sends them in its API's
    /// own slot (a top-level `instructions` or `system` field, or a leading `system` message); they are
    /// never a message of the conversation. Shared, so a request clones them in O(1).
    pub instructions: Option<Arc<str>>,
    /// The selected conversation.
    pub messages: Conversation,
    /// The tools on offer, in registration order.
    pub tools: Arc<[ToolSpec]>,
    /// A key that stays the same for every request of one conversation: the session id when the run is
    /// recorded, else the run id (set by the driver). Adapters whose API routes prompt caches by key send
    /// it (the Responses API's `prompt_cache_key`), so consecutive steps land where their prefix is cached.
    pub cache_key: Option<Arc<str>>,
}

/// Why a model stopped producing output, where the model says.
///
/// Serialized as a string: `stop`, `tool_calls`, `length`, `content_filter`, `refusal`, or the model's own
/// word for any other reason (read back, `{"other": "..."}` is accepted too).
#[derive(Clone, Debug, PartialEq, Eq)]
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

impl FinishReason {
    /// The name in JSON: `stop`, `tool_calls`, `length`, `content_filter`, `refusal`, or the other reason.
    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Length => "length",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Refusal => "refusal",
            FinishReason::Other(s) => s,
        }
    }

    /// The reason named by `s` (any unknown word is [`FinishReason::Other`]).
    pub fn from_name(s: &str) -> Self {
        match s {
            "stop" => FinishReason::Stop,
            "tool_calls" => FinishReason::ToolCalls,
            "length" => FinishReason::Length,
            "content_filter" => FinishReason::ContentFilter,
            "refusal" => FinishReason::Refusal,
            other => FinishReason::Other(other.to_owned()),
        }
    }
}

impl std::fmt::Display for FinishReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FinishReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FinishReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Name(String),
            Other { other: String },
        }
        Ok(match Form::deserialize(d)? {
            Form::Name(s) => FinishReason::from_name(&s),
            Form::Other { other } => FinishReason::Other(other),
        })
    }
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
    /// Reasoning or thinking text, where the model returned it: for people (shown, never sent back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The provider's opaque reasoning items, in order: recorded with the turn and sent back unchanged by
    /// the adapter of the same API (see [`crate::Reasoning`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning_items: Vec<crate::message::Reasoning>,
    /// Why the model stopped, where it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// The model that answered, when it is not the one the run names: set by a model over several (the
    /// fallback of `reins-providers`) when a step fell over. The step is priced at its price, and its
    /// `model_end` event and session record name it. `None` (the usual case) is "the run's model".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<Box<AnsweredBy>>,
}

/// The model that answered a step in place of the run's (see [`ModelResponse::answered_by`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AnsweredBy {
    /// Its name, `provider:model` where the provider is known.
    pub model: String,
    /// Its price, where known (a step with usage and no price leaves the run's cost unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<crate::cost::Price>,
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

/// Why a model call failed. The run ends `model_error` with this message. It serializes (tagged by `kind`), so
/// that a durable run can journal a failed call like a response.
#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
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
    /// The provider refused the request as invalid (HTTP 400, 404, 422, ...): retrying cannot help.
    #[error("model request rejected (HTTP {status}): {message}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The provider's explanation.
        message: String,
    },
    /// The provider refused the credentials (HTTP 401 or 403).
    #[error("model request not authorized (HTTP {status}): {message} (check the API key)")]
    Unauthorized {
        /// The HTTP status.
        status: u16,
        /// The provider's explanation.
        message: String,
    },
    /// The conversation does not fit the model's context window.
    #[error("the conversation exceeds the model's context window: {0}")]
    ContextOverflow(String),
    /// The account's quota or credit is used up: no retry can succeed until it is topped up.
    #[error("the provider account's quota is exhausted: {0}")]
    QuotaExhausted(String),
}

/// A piece of a model's response, delivered while the response streams in (see [`DeltaSink`]).
///
/// Serialized as `{"type": "text", "text"}`, `{"type": "reasoning", "text"}`,
/// `{"type": "tool_call", "index", "id", "name"}`, `{"type": "tool_arguments", "index", "fragment"}` or
/// `{"type": "restart", "attempt", "reason"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Delta {
    /// More text of the answer.
    Text {
        /// The new text.
        text: String,
    },
    /// More reasoning or thinking text.
    Reasoning {
        /// The new text.
        text: String,
    },
    /// A tool call begins.
    ToolCall {
        /// The 0-based position of the call in the response.
        index: usize,
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// More of a tool call's arguments (a fragment of JSON text).
    ToolArguments {
        /// The 0-based position of the call in the response.
        index: usize,
        /// The new fragment.
        fragment: String,
    },
    /// The response is requested again (a retry): every delta delivered before for this call is void.
    Restart {
        /// The 1-based number of the attempt that starts now.
        attempt: u32,
        /// Why the previous attempt failed.
        reason: String,
    },
}

tokio::task_local! {
    static DELTA_SINK: DeltaSink;
}

/// Hears the [`Delta`]s of streamed model responses as they arrive.
///
/// A streaming model adapter sends each delta to the sink of the task it runs in: wrap a run in
/// [`DeltaSink::scope`] to hear the deltas of its model calls (each run its own sink, concurrent runs do
/// not mix). A sink that panics is ignored: it cannot change a run.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use std::sync::{Arc, Mutex};
/// let heard = Arc::new(Mutex::new(String::new()));
/// let h = heard.clone();
/// let sink = reins::DeltaSink::new(move |d| {
///     if let reins::Delta::Text { text } = d { h.lock().unwrap().push_str(text) }
/// });
/// sink.scope(async {
///     reins::DeltaSink::emit(&reins::Delta::Text { text: "hi".into() });
/// }).await;
/// assert_eq!(*heard.lock().unwrap(), "hi");
/// # });
/// ```
#[derive(Clone)]
pub struct DeltaSink(Arc<dyn Fn(&Delta) + Send + Sync>);

impl std::fmt::Debug for DeltaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeltaSink")
    }
}

impl DeltaSink {
    /// A sink calling `f` for each delta.
    pub fn new(f: impl Fn(&Delta) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Delivers one delta to this sink, containing a panic.
    pub fn send(&self, delta: &Delta) {
        let f = &self.0;
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(delta)));
    }

    /// Runs `fut` with this sink as the one its model calls stream to.
    pub async fn scope<F: std::future::Future>(self, fut: F) -> F::Output {
        DELTA_SINK.scope(self, fut).await
    }

    /// The sink of the current task, if one was set with [`DeltaSink::scope`].
    pub fn current() -> Option<DeltaSink> {
        DELTA_SINK.try_with(|s| s.clone()).ok()
    }

    /// Delivers one delta to the current task's sink, if any.
    pub fn emit(delta: &Delta) {
        let _ = DELTA_SINK.try_with(|s| s.send(delta));
    }
}

/// Who serves a model, as telemetry names it: the `gen_ai.provider.name`, `gen_ai.request.model`,
/// `server.address` and `server.port` of the OpenTelemetry GenAI conventions (see [`crate::spans`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelIdentity {
    /// The provider: a well-known name of the conventions (`openai`, `anthropic`, ...) or one of its own.
    pub provider: Option<Arc<str>>,
    /// The model asked for.
    pub model: Option<Arc<str>>,
    /// The host the requests go to.
    pub server_address: Option<Arc<str>>,
    /// The port the requests go to.
    pub server_port: Option<u16>,
}

/// A language model, seen from the harness: it proposes, it never acts.
///
/// Wrappers (retry, rate limits, fault injection, recording) are `Model`s around a `Model`.
#[async_trait]
pub trait Model: Send + Sync {
    /// Answers one request. Implementations should return promptly once `cancel` fires.
    async fn generate(&self, request: &ModelRequest, cancel: &CancellationToken) -> Result<ModelResponse, ModelError>;

    /// Who serves this model, for the spans of its calls (asked once per run; none by default). A wrapper
    /// should pass its inner model's on.
    fn identity(&self) -> ModelIdentity {
        ModelIdentity::default()
    }

    /// What this model's tokens cost, when known: the engine then prices each response and the run
    /// (`cost_usd`), and `Limits::max_cost_usd` can end a run. A wrapper should pass its inner model's on.
    fn price(&self) -> Option<Price> {
        None
    }
}

/// A shared model is the model: its `generate` hands back the inner model's future as it is (the signature
/// `#[async_trait]` gives the trait's method), so a call through an `Arc` boxes one future, not two.
impl<M: Model + ?Sized> Model for Arc<M> {
    fn generate<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        request: &'life1 ModelRequest,
        cancel: &'life2 CancellationToken,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<ModelResponse, ModelError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        (**self).generate(request, cancel)
    }
    fn identity(&self) -> ModelIdentity {
        (**self).identity()
    }

    fn price(&self) -> Option<Price> {
        (**self).price()
    }
}
