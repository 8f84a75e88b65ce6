//! The transcript of a run: append-only, always coherent, with each item's size measured once when it
//! is appended so that selecting what the model sees costs O(log n), not a rescan.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::context::{ContextError, TokenCounter};
use crate::message::{Message, ToolCall, ToolResult};
use crate::model::Conversation;

/// Why a message could not be appended, or a list of messages is not a coherent transcript.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("incoherent transcript at message {index}: {reason}")]
pub struct TranscriptError {
    /// The position of the offending message.
    pub index: usize,
    /// What is wrong.
    pub reason: String,
}

/// An append-only, coherent transcript: it starts with a user message, every tool result answers a call
/// of the assistant turn just before it, in call order, and a new turn starts only when every call of the
/// previous one has its result.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(try_from = "TranscriptRepr", into = "TranscriptRepr")]
pub struct Transcript {
    messages: imbl::Vector<Message>,
    /// `prefix[i]` is the size of messages `0..i`; one longer than `messages`.
    prefix: Vec<u64>,
    /// Index of the first message of every group after the first message.
    group_starts: Vec<usize>,
    /// Call ids of the newest assistant turn still waiting for results, in order (the calls' own, shared).
    pending: Vec<Arc<str>>,
    /// How many of `pending` have a result.
    answered: usize,
    /// The newest summary item: `(its index, the index of the first item it does not replace)`.
    summary: Option<(usize, usize)>,
}

#[derive(Serialize, Deserialize)]
struct TranscriptRepr {
    messages: Vec<Message>,
    sizes: Vec<u64>,
}

impl From<Transcript> for TranscriptRepr {
    fn from(t: Transcript) -> Self {
        let sizes = t.prefix.windows(2).map(|w| w[1] - w[0]).collect();
        TranscriptRepr { messages: t.messages.into_iter().collect(), sizes }
    }
}

impl TryFrom<TranscriptRepr> for Transcript {
    type Error = TranscriptError;
    fn try_from(r: TranscriptRepr) -> Result<Self, Self::Error> {
        if r.sizes.len() != r.messages.len() {
            return Err(TranscriptError { index: 0, reason: "sizes and messages differ in length".into() });
        }
        Transcript::build(r.messages.into_iter().zip(r.sizes))
    }
}

/// The size of a message in the counter's unit: its text, its images, the name and JSON arguments of each
/// call, and each reasoning item's JSON.
pub fn measure(message: &Message, counter: &dyn TokenCounter) -> u64 {
    let mut n = counter.count(message.content());
    for image in message.images() {
        n = n.saturating_add(counter.count_image(image));
    }
    for call in message.tool_calls() {
        n = n.saturating_add(counter.count(&call.name));
        n = n.saturating_add(counter.count_json(&call.arguments));
    }
    // Reasoning items go back as they are: counted whole (their JSON, signatures and encrypted content
    // included), which can only overstate what the provider counts.
    for r in message.reasoning() {
        n = n.saturating_add(counter.count_json(&r.item));
    }
    n
}

/// The size of the tool specs a model is sent, in the counter's unit: each tool's name, description and
/// JSON Schema (as compact JSON). Measured once per registry, never per step.
pub fn measure_tools(specs: &[crate::tool::ToolSpec], counter: &dyn TokenCounter) -> u64 {
    specs.iter().fold(0u64, |n, s| {
        n.saturating_add(counter.count(&s.name))
            .saturating_add(counter.count(&s.description))
            .saturating_add(counter.count_json(&s.input_schema))
    })
}

impl Transcript {
    /// A transcript holding one user message.
    pub fn new(prompt: impl Into<String>, counter: &dyn TokenCounter) -> Self {
        let first = Message::user(prompt);
        let size = measure(&first, counter);
        Transcript::starting_with(first, size)
    }

    /// A transcript holding one user message with images (`first` must be a user message).
    pub fn with_first(first: Message, counter: &dyn TokenCounter) -> Result<Self, TranscriptError> {
        if !matches!(first, Message::User { .. }) {
            return Err(TranscriptError { index: 0, reason: "the first message must be the user's".into() });
        }
        let size = measure(&first, counter);
        Ok(Transcript::starting_with(first, size))
    }

    /// A transcript of its first message alone, measured as `size`.
    fn starting_with(first: Message, size: u64) -> Self {
        let mut messages = imbl::Vector::new();
        messages.push_back(first);
        Transcript {
            messages,
            prefix: vec![0, size],
            group_starts: Vec::new(),
            pending: Vec::new(),
            answered: 0,
            summary: None,
        }
    }

    /// Checks and measures a list of messages. Orphan results, results out of call order, duplicate call
    /// ids within a turn and a turn that starts before the previous one has all its results are refused;
    /// an incomplete final batch is allowed (see [`Transcript::is_complete`]).
    pub fn from_messages(messages: Vec<Message>, counter: &dyn TokenCounter) -> Result<Self, TranscriptError> {
        Transcript::build(messages.into_iter().map(|m| {
            let size = measure(&m, counter);
            (m, size)
        }))
    }

    fn build(items: impl IntoIterator<Item = (Message, u64)>) -> Result<Self, TranscriptError> {
        let mut items = items.into_iter();
        let Some((first, size)) = items.next() else {
            return Err(TranscriptError {
                index: 0,
                reason: "a transcript starts with a user message; it is empty".into(),
            });
        };
        if !matches!(first, Message::User { .. }) {
            return Err(TranscriptError {
                index: 0,
                reason: format!("a transcript starts with a user message, not {}", first.role()),
            });
        }
        let mut t = Transcript::starting_with(first, size);
        for (m, size) in items {
            t.append(m, size)?;
        }
        Ok(t)
    }

    fn append(&mut self, m: Message, size: u64) -> Result<(), TranscriptError> {
        let index = self.messages.len();
        let err = |reason: String| Err(TranscriptError { index, reason });
        match &m {
            Message::User { .. } | Message::Assistant { .. } => {
                if !self.is_complete() {
                    return err(format!(
                        "a new {} message while call {:?} has no result",
                        m.role(),
                        self.pending[self.answered]
                    ));
                }
                self.pending.clear();
                self.answered = 0;
                if let Message::Assistant { tool_calls, .. } = &m {
                    for (i, c) in tool_calls.iter().enumerate() {
                        if tool_calls[..i].iter().any(|o| o.id == c.id) {
                            return err(format!("call id {:?} appears twice in one turn", c.id));
                        }
                    }
                    self.pending.extend(tool_calls.iter().map(|c| Arc::clone(&c.id)));
                }
                self.group_starts.push(index);
            }
            Message::Summary { replaces, .. } => {
                if !self.is_complete() {
                    return err(format!("a summary while call {:?} has no result", self.pending[self.answered]));
                }
                let boundary = usize::try_from(*replaces).ok().and_then(|r| r.checked_add(1)).unwrap_or(usize::MAX);
                if boundary > index {
                    return err(format!("a summary replaces {replaces} items; only {} precede it", index - 1));
                }
                if boundary < index && self.group_starts.binary_search(&boundary).is_err() {
                    return err(format!("a summary replaces {replaces} items: item {boundary} does not start a group"));
                }
                if let Some((prev, _)) = self.summary {
                    if boundary <= prev {
                        return err(format!(
                            "a summary replaces {replaces} items and leaves the earlier summary (item {prev}) in place"
                        ));
                    }
                }
                self.summary = Some((index, boundary));
            }
            Message::ToolResult(r) => match self.pending.get(self.answered) {
                Some(id) if **id == *r.call_id => self.answered += 1,
                Some(id) => {
                    return err(format!("result for {:?} where the result for call {:?} is due", r.call_id, id));
                }
                None => return err(format!("orphan result for call {:?}", r.call_id)),
            },
        }
        let total = self.total();
        self.prefix.push(total.saturating_add(size));
        self.messages.push_back(m);
        Ok(())
    }

    /// Appends a user message (after every pending call has its result).
    pub fn push_user(&mut self, content: impl Into<String>, counter: &dyn TokenCounter) -> Result<(), TranscriptError> {
        let m = Message::user(content);
        let size = measure(&m, counter);
        self.append(m, size)
    }

    /// Appends an assistant turn; its calls then wait for results.
    pub fn push_assistant(
        &mut self,
        content: String,
        tool_calls: Vec<ToolCall>,
        counter: &dyn TokenCounter,
    ) -> Result<(), TranscriptError> {
        self.push_assistant_message(Message::Assistant { content, tool_calls, reasoning: Vec::new() }, counter)
    }

    /// Appends an assistant message (with its reasoning items, if any), measuring it; its calls then wait
    /// for results.
    pub fn push_assistant_message(&mut self, m: Message, counter: &dyn TokenCounter) -> Result<(), TranscriptError> {
        if !matches!(m, Message::Assistant { .. }) {
            let reason = format!("a {} message where an assistant turn was due", m.role());
            return Err(TranscriptError { index: self.messages.len(), reason });
        }
        let size = measure(&m, counter);
        self.append(m, size)
    }

    /// Appends an assistant message already measured with the transcript's counter.
    pub(crate) fn push_measured(&mut self, m: Message, size: u64) -> Result<(), TranscriptError> {
        self.append(m, size)
    }

    /// Appends the result of the next call waiting for one.
    pub fn push_result(&mut self, result: ToolResult, counter: &dyn TokenCounter) -> Result<(), TranscriptError> {
        let size = counter.count(&result.content);
        self.append(Message::ToolResult(result), size)
    }

    /// Appends the result of the next call waiting for one, already measured with the transcript's counter.
    pub(crate) fn push_result_measured(&mut self, result: ToolResult, size: u64) -> Result<(), TranscriptError> {
        self.append(Message::ToolResult(result), size)
    }

    /// Appends a compaction: `content` stands for the `replaces` items after the first message. It must
    /// come after a complete group, end on a group boundary and replace the previous summary too.
    pub fn push_summary(
        &mut self,
        content: impl Into<String>,
        replaces: u64,
        counter: &dyn TokenCounter,
    ) -> Result<(), TranscriptError> {
        let m = Message::Summary { content: content.into(), replaces };
        let size = measure(&m, counter);
        self.append(m, size)
    }

    /// The newest summary: `(its index, the index of the first item it does not replace)`.
    pub fn summary(&self) -> Option<(usize, usize)> {
        self.summary
    }

    /// The size of what the model sees with no budget applied: the first message, the newest summary and
    /// everything after what it replaces (the whole transcript when there is no summary). O(1).
    pub fn view_size(&self) -> u64 {
        match self.summary {
            None => self.total(),
            Some((_, b)) => self.first_size().saturating_add(self.total() - self.prefix[b]),
        }
    }

    /// The group starts a compaction may cut at, and their sizes from there to the end: a cut at `g`
    /// replaces items `1..g`. `g` lies after the newest summary and covers at least one item that is not a
    /// summary; the newest group is never replaced. Picks the first cut whose rest is at most `rest`,
    /// else the last possible one. `None`: nothing to compact.
    pub fn compaction_cut(&self, rest: u64) -> Option<usize> {
        if !self.is_complete() || matches!(self.last(), Some(Message::Summary { .. })) {
            return None;
        }
        let (lo, min) = match self.summary {
            None => (1, 2),
            Some((k, b)) => (k + 1, if b == k { k + 2 } else { k + 1 }),
        };
        let from = self.group_starts.partition_point(|&g| g < lo.max(min));
        let candidates = self.group_starts.get(from..)?;
        let last = *candidates.last()?;
        let total = self.total();
        let i = candidates.partition_point(|&g| total - self.prefix[g] > rest);
        Some(candidates.get(i).copied().unwrap_or(last))
    }

    /// What the model sees under the `summarize` strategy when a summary exists: the first message, the
    /// newest summary, then the items it does not replace. A view built in O(1); `None` without a summary.
    pub fn summary_view(&self) -> Option<Conversation> {
        let (k, b) = self.summary?;
        Some(Conversation::first_item_from(self.messages.clone(), k, b))
    }

    /// The items a cut at `g` replaces that are not summaries, with the newest summary they replace.
    pub fn replaced(&self, g: usize) -> (Option<&Message>, Vec<&Message>) {
        let lo = self.summary.map_or(1, |(_, b)| b);
        let prev = self.summary.and_then(|(k, _)| (k < g).then(|| self.messages.get(k)).flatten());
        let items = self.messages.iter().take(g).skip(lo).filter(|m| !matches!(m, Message::Summary { .. })).collect();
        (prev, items)
    }

    /// How many groups start in `lo..hi`.
    pub fn groups_between(&self, lo: usize, hi: usize) -> usize {
        self.group_starts.partition_point(|&g| g < hi) - self.group_starts.partition_point(|&g| g < lo)
    }

    /// True when every call has its result.
    pub fn is_complete(&self) -> bool {
        self.answered == self.pending.len()
    }

    /// The calls of the newest turn that still have no result.
    pub fn unanswered(&self) -> &[Arc<str>] {
        &self.pending[self.answered..]
    }

    /// How many messages it holds.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Always false: a transcript holds at least its first user message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The total size of all messages.
    pub fn total(&self) -> u64 {
        self.prefix.last().copied().unwrap_or(0)
    }

    /// The size of the first message.
    pub fn first_size(&self) -> u64 {
        self.prefix.get(1).copied().unwrap_or(0)
    }

    /// The whole transcript (O(1)).
    pub fn conversation(&self) -> Conversation {
        Conversation::from_vector(self.messages.clone())
    }

    /// A copy of the messages.
    pub fn to_vec(&self) -> Vec<Message> {
        self.messages.iter().cloned().collect()
    }

    /// The messages, moved out where nothing else shares them (copied where a conversation still does).
    /// Taken chunk by chunk, each message swapped for an empty one that allocates nothing: cheaper than
    /// popping the persistent vector's front message by message.
    pub fn into_messages(mut self) -> Vec<Message> {
        let mut out = Vec::with_capacity(self.messages.len());
        for chunk in self.messages.leaves_mut() {
            let empty = || Message::Summary { content: String::new(), replaces: 0 };
            out.extend(chunk.iter_mut().map(|m| std::mem::replace(m, empty())));
        }
        out
    }

    /// The newest message.
    pub fn last(&self) -> Option<&Message> {
        self.messages.last()
    }

    /// Selects what the model is sent: the first user message plus the newest whole groups whose total
    /// fits `budget` (`None`: everything). O(log n). Refuses an incomplete batch, and a budget too small
    /// for the first message plus the newest group, saying which part did not fit.
    pub fn select(&self, budget: Option<u64>, unit: &str) -> Result<Conversation, ContextError> {
        if let Some(id) = self.unanswered().first() {
            return Err(ContextError(format!("the newest turn is incomplete: call {id:?} has no result")));
        }
        let Some(budget) = budget else {
            return Ok(self.conversation());
        };
        let first = self.first_size();
        if first > budget {
            return Err(ContextError(format!(
                "the first user message ({first} {unit}) alone exceeds the context budget ({budget} {unit})"
            )));
        }
        let total = self.total();
        // The suffix from group start g costs total - prefix[g]; it shrinks as g grows.
        let over = |g: usize| first + (total - self.prefix[g]) > budget;
        // When the oldest group fits, so does everything (the common case): no search.
        let j = match self.group_starts.first() {
            Some(&oldest) if !over(oldest) => 0,
            _ => self.group_starts.partition_point(|&g| over(g)),
        };
        if j == self.group_starts.len() {
            if let Some(&newest) = self.group_starts.last() {
                let group = total - self.prefix[newest];
                return Err(ContextError(format!(
                    "the newest group ({} messages, {group} {unit}) plus the first user message ({first} {unit}) exceeds the context budget ({budget} {unit})",
                    self.messages.len() - newest
                )));
            }
            return Ok(self.conversation());
        }
        // A view: the first message, then the messages from `start` on; nothing is copied.
        Ok(Conversation::first_and_from(self.messages.clone(), self.group_starts[j]))
    }

    /// Like [`Transcript::select`] (the `drop` strategy), but when earlier groups are left out the model
    /// is told: a marker item (a [`Message::Summary`] of the view, never recorded) saying how many follows
    /// the first message, and its size is taken from the budget. O(log n).
    pub fn select_marked(&self, budget: Option<u64>, counter: &dyn TokenCounter) -> Result<Conversation, ContextError> {
        let unit = counter.unit();
        let plain = self.select(budget, unit)?;
        let Some(budget) = budget else { return Ok(plain) };
        if plain.len() == self.messages.len() {
            return Ok(plain);
        }
        // Room for the widest marker this transcript could need, so that the count never changes the fit.
        let reserve = measure(&drop_marker(self.group_starts.len(), self.messages.len()), counter);
        let inner = budget.saturating_sub(reserve);
        let first = self.first_size();
        let total = self.total();
        let j = self.group_starts.partition_point(|&g| first.saturating_add(total - self.prefix[g]) > inner);
        let Some(&start) = self.group_starts.get(j) else {
            let newest = self.group_starts.last().copied().unwrap_or(1);
            let group = total - self.prefix[newest];
            return Err(ContextError(format!(
                "the newest group ({} messages, {group} {unit}) plus the first user message ({first} {unit}) and the marker of left-out groups ({reserve} {unit}) exceeds the context budget ({budget} {unit})",
                self.messages.len() - newest
            )));
        };
        let marker = Arc::new(drop_marker(j, start - 1));
        Ok(Conversation::first_head_from(self.messages.clone(), marker, start))
    }
}

/// The item that tells the model `groups` earlier groups (`items` items) were left out.
pub fn drop_marker(groups: usize, items: usize) -> Message {
    Message::Summary {
        content: format!(
            "[{groups} earlier groups of this conversation ({items} items) were left out to fit the context; their content is not available]"
        ),
        replaces: items as u64,
    }
}
