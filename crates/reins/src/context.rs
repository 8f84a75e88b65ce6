//! What the model sees: tool results bounded before they are recorded, sizes in characters or tokens
//! through a [`TokenCounter`], and the budget that selects the newest whole groups.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Counts the size of a text in the unit of a context budget.
pub trait TokenCounter: Send + Sync {
    /// The size of `text`.
    fn count(&self, text: &str) -> u64;
    /// The size of a JSON value written as compact JSON. The default writes the text and counts it; a
    /// counter may count without building the string.
    fn count_json(&self, value: &serde_json::Value) -> u64 {
        self.count(&value.to_string())
    }
    /// The unit, for messages: `"characters"` or `"tokens"`.
    fn unit(&self) -> &'static str;
    /// The size of an image: its token cost under OpenAI's tiles (see [`ImageCost`]); in characters, four
    /// per token. [`WithImageCost`] counts another API's way.
    fn count_image(&self, image: &crate::image::Image) -> u64 {
        image_units(self.unit(), image.tokens(ImageCost::OpenAiTiles))
    }
}

pub use crate::image::ImageCost;

/// Characters per token where an image's token cost is taken off a budget in characters.
pub const CHARS_PER_IMAGE_TOKEN: u64 = 4;

fn image_units(unit: &str, tokens: u64) -> u64 {
    if unit == "tokens" { tokens } else { tokens.saturating_mul(CHARS_PER_IMAGE_TOKEN) }
}

/// A counter that sizes images at a given API's cost (text as the inner counter does).
///
/// ```
/// use reins::{TokenCounter, context::{ImageCost, WithImageCost}};
/// let c = WithImageCost::new(std::sync::Arc::new(reins::CharCounter), ImageCost::Anthropic);
/// assert_eq!(c.count("abc"), 3);
/// ```
#[derive(Clone)]
pub struct WithImageCost {
    inner: Arc<dyn TokenCounter>,
    cost: ImageCost,
}

impl WithImageCost {
    /// `inner`, with images at `cost`.
    pub fn new(inner: Arc<dyn TokenCounter>, cost: ImageCost) -> Self {
        Self { inner, cost }
    }
}

impl std::fmt::Debug for WithImageCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WithImageCost({}, {:?})", self.inner.unit(), self.cost)
    }
}

impl TokenCounter for WithImageCost {
    fn count(&self, text: &str) -> u64 {
        self.inner.count(text)
    }
    fn count_json(&self, value: &serde_json::Value) -> u64 {
        self.inner.count_json(value)
    }
    fn unit(&self) -> &'static str {
        self.inner.unit()
    }
    fn count_image(&self, image: &crate::image::Image) -> u64 {
        image_units(self.inner.unit(), image.tokens(self.cost))
    }
}

/// Counts Unicode scalar values (Rust `char`s): the default unit.
///
/// ```
/// use reins::TokenCounter;
/// assert_eq!(reins::CharCounter.count("héllo"), 5);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct CharCounter;

impl TokenCounter for CharCounter {
    fn count(&self, text: &str) -> u64 {
        // A short text (a tool's name, a short result) byte by byte, sparing the call into the standard
        // library's counter, which pays off on long texts only.
        if text.len() < 32 {
            // Every byte but a UTF-8 continuation byte starts a character.
            return text.as_bytes().iter().filter(|&&b| (b as i8) >= -0x40).count() as u64;
        }
        text.chars().count() as u64
    }
    fn count_json(&self, value: &serde_json::Value) -> u64 {
        json_chars(value)
    }
    fn unit(&self) -> &'static str {
        "characters"
    }
}

/// The characters of `value` written as compact JSON (`serde_json`'s writing: `"`, `\\` and control
/// characters escaped, nothing else), counted by walking the value instead of writing it out.
fn json_chars(value: &serde_json::Value) -> u64 {
    use serde_json::Value;
    match value {
        Value::Null => 4,
        Value::Bool(b) => 4 + u64::from(!*b),
        Value::Number(n) => number_chars(n),
        Value::String(s) => string_chars(s),
        Value::Array(items) => {
            // Brackets and a comma between items.
            let frame = 2 + items.len().saturating_sub(1) as u64;
            items.iter().fold(frame, |n, v| n.saturating_add(json_chars(v)))
        }
        Value::Object(map) => {
            // Braces, a colon per entry and a comma between entries.
            let frame = 2 + map.len() as u64 + map.len().saturating_sub(1) as u64;
            map.iter().fold(frame, |n, (k, v)| n.saturating_add(string_chars(k)).saturating_add(json_chars(v)))
        }
    }
}

/// The characters of `s` as a JSON string: its quotes, its characters, and what escaping adds (one for
/// `\"`, `\\`, `\b`, `\t`, `\n`, `\f` and `\r`, five for any other control character's `\u00XX`).
fn string_chars(s: &str) -> u64 {
    // Each byte counts one, less one for a UTF-8 continuation byte, plus what escaping it adds: one table
    // lookup a byte, no branch.
    let extra: i64 = s.as_bytes().iter().map(|&b| i64::from(JSON_EXTRA[usize::from(b)])).sum();
    (2 + s.len() as i64 + extra) as u64
}

/// By byte: what it adds to a JSON string's length in characters beyond one (see [`string_chars`]).
const JSON_EXTRA: [i8; 256] = {
    let mut t = [0i8; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = match b as u8 {
            0x08 | 0x09 | 0x0a | 0x0c | 0x0d | b'"' | b'\\' => 1,
            0x00..0x20 => 5,
            // A continuation byte does not start a character.
            0x80..0xc0 => -1,
            _ => 0,
        };
        b += 1;
    }
    t
};

/// The characters of a number as `serde_json` writes it (ASCII, so its bytes).
fn number_chars(n: &serde_json::Number) -> u64 {
    /// Counts the bytes written to it.
    struct Bytes(u64);
    impl std::io::Write for Bytes {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    if let Some(u) = n.as_u64() {
        return u.checked_ilog10().map_or(1, |d| u64::from(d) + 1);
    }
    let mut bytes = Bytes(0);
    match serde_json::to_writer(&mut bytes, n) {
        Ok(()) => bytes.0,
        Err(_) => n.to_string().len() as u64,
    }
}

/// Counts tokens with the o200k_base BPE tokenizer (feature `tiktoken`).
#[cfg(feature = "tiktoken")]
pub struct TiktokenCounter {
    bpe: tiktoken_rs::CoreBPE,
}

#[cfg(feature = "tiktoken")]
impl TiktokenCounter {
    /// The o200k_base tokenizer (used by GPT-4o and later models).
    pub fn o200k_base() -> Result<Self, String> {
        tiktoken_rs::o200k_base().map(|bpe| Self { bpe }).map_err(|e| e.to_string())
    }
}

#[cfg(feature = "tiktoken")]
impl TokenCounter for TiktokenCounter {
    fn count(&self, text: &str) -> u64 {
        self.bpe.encode_ordinary(text).len() as u64
    }
    fn unit(&self) -> &'static str {
        "tokens"
    }
}

/// How the context of a run is bounded.
#[derive(Clone)]
pub struct ContextConfig {
    /// The most the model is sent, in the counter's unit. `None`: everything.
    pub max_context: Option<u64>,
    /// Each tool result is cut to this many characters (Unicode scalar values) before it is recorded.
    /// `None`: not cut (the context budget still bounds it). Default 32,000.
    pub max_tool_result_chars: Option<usize>,
    /// The unit of `max_context`.
    pub counter: Arc<dyn TokenCounter>,
    /// What happens when the context fills up (only under a budget). Default [`ContextStrategy::Drop`].
    pub strategy: ContextStrategy,
    /// Under `summarize`: the share of `max_context` past which the oldest groups are compacted. Default
    /// 0.8; it must lie in (0, 1].
    pub compact_at: f64,
    /// Under `summarize`: the instructions of a summary call (`None`: [`DEFAULT_SUMMARY_PROMPT`]).
    pub summary_prompt: Option<Arc<str>>,
    /// Under `summarize`: the longest a summary call may take before the compaction falls back to the
    /// marker. Default 120 s; `None`: no limit of its own (the run's deadline still applies).
    pub summary_timeout: Option<std::time::Duration>,
}

/// How the context is kept within its budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextStrategy {
    /// The first message, then the newest whole groups that fit, after a marker item saying how many
    /// earlier groups were left out.
    #[default]
    Drop,
    /// Past `compact_at` of the budget, the oldest groups are replaced by a summary (an item of the
    /// transcript) made by a model call; a failed or overlong summary falls back to the marker of `drop`.
    Summarize,
}

impl std::str::FromStr for ContextStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "drop" => Ok(ContextStrategy::Drop),
            "summarize" => Ok(ContextStrategy::Summarize),
            other => Err(format!("unknown context strategy {other:?} (expected drop or summarize)")),
        }
    }
}

/// The built-in instructions of a summary call.
pub const DEFAULT_SUMMARY_PROMPT: &str = "You compact the history of an agent's run so that it can go on with its task in less context. You are given the task, the summary of the earlier history if there is one, and the turns to compact. Write one concise summary, in plain text, that keeps: the task and its constraints; the plan and the decisions made, with their reasons; the files, commands and resources touched, with their current state; the results that still matter (exact names, paths, numbers); and what remains to be done next. Do not call tools. Write only the summary.";

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            max_context: None,
            max_tool_result_chars: Some(32_000),
            counter: Arc::new(CharCounter),
            strategy: ContextStrategy::Drop,
            compact_at: 0.8,
            summary_prompt: None,
            summary_timeout: Some(std::time::Duration::from_secs(120)),
        }
    }
}

impl std::fmt::Debug for ContextConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextConfig")
            .field("max_context", &self.max_context)
            .field("max_tool_result_chars", &self.max_tool_result_chars)
            .field("unit", &self.counter.unit())
            .field("strategy", &self.strategy)
            .field("compact_at", &self.compact_at)
            .finish()
    }
}

/// Why the context could not be built.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{0}")]
pub struct ContextError(pub String);

/// The markers a cut text carries, widest first: the full one, then compact ones for small limits. Each
/// says exactly how many characters were left out.
fn marker(form: usize, omitted: usize) -> String {
    match form {
        0 => format!("\n[… {omitted} characters omitted …]\n"),
        1 => format!("[…{omitted} omitted]"),
        _ => format!("[…{omitted}]"),
    }
}

/// Bounds `text` to at most `max_chars` Unicode scalar values: the head, a marker that says exactly how
/// many characters were left out, and the tail. Never splits a character, never returns more than
/// `max_chars`, and a cut text always carries a marker: `\n[… N characters omitted …]\n` where it fits,
/// then the compact `[…N omitted]` and `[…N]` under small limits, and below those (a limit of a few
/// characters) the head and a final `…`. Only a limit of 0 gives an empty text.
///
/// ```
/// let s = "a".repeat(100);
/// let b = reins::bound_text(&s, 60);
/// assert!(b.chars().count() <= 60);
/// assert!(b.contains("characters omitted"));
/// assert_eq!(reins::bound_text(&s, 10), "aaa[…96]a");
/// assert_eq!(reins::bound_text(&s, 3), "aa…");
/// assert_eq!(reins::bound_text("short", 60), "short");
/// ```
pub fn bound_text(text: &str, max_chars: usize) -> String {
    // Fast path: a byte length within the limit is a char count within it.
    if text.len() <= max_chars {
        return text.to_owned();
    }
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_owned();
    }
    // The widest marker that leaves room for two kept characters (the last one: for none). Measured with
    // `total`, which has at least as many digits as the count omitted, so the result stays within the limit.
    let fits = |form: usize| {
        let widest = marker(form, total).chars().count();
        let room = if form == 2 { widest } else { widest + 2 };
        (max_chars >= room).then_some(widest)
    };
    let Some((form, widest)) = (0..3).find_map(|form| fits(form).map(|w| (form, w))) else {
        if max_chars == 0 {
            return String::new();
        }
        let mut out: String = text.chars().take(max_chars - 1).collect();
        out.push('…');
        return out;
    };
    let keep = max_chars - widest;
    let tail_len = keep / 3;
    let head_len = keep - tail_len;
    let omitted = total - keep;
    let head_end = text.char_indices().nth(head_len).map_or(text.len(), |(i, _)| i);
    let tail_start = if tail_len == 0 {
        text.len()
    } else {
        text.char_indices().nth_back(tail_len - 1).map_or(text.len(), |(i, _)| i)
    };
    let mut out = String::with_capacity(head_end + (text.len() - tail_start) + widest + 8);
    out.push_str(&text[..head_end]);
    out.push_str(&marker(form, omitted));
    out.push_str(&text[tail_start..]);
    out
}

/// Bounds `text` so that `counter` measures it at most `max_units`, by the largest character bound that
/// fits (binary search; `bound_text` underneath). Returns the text and its measured size.
pub fn bound_to_units(text: &str, max_units: u64, counter: &dyn TokenCounter) -> (String, u64) {
    let size = counter.count(text);
    if size <= max_units {
        return (text.to_owned(), size);
    }
    let (mut lo, mut hi) = (0usize, text.chars().count());
    let mut best = (String::new(), 0);
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        let candidate = bound_text(text, mid);
        let n = counter.count(&candidate);
        if n <= max_units {
            best = (candidate, n);
            lo = mid + 1;
        } else if mid == 0 {
            break;
        } else {
            hi = mid - 1;
        }
    }
    best
}

/// Shares `available` units among items of the given sizes, max-min fair: small items keep their size,
/// the rest split what is left equally. Returns each item's allowance.
pub(crate) fn fair_shares(sizes: &[u64], available: u64) -> Vec<u64> {
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&i| sizes[i]);
    let mut out = vec![0; sizes.len()];
    let mut left = available;
    let mut remaining = sizes.len() as u64;
    for i in order {
        let share = left / remaining.max(1);
        let give = sizes[i].min(share);
        out[i] = give;
        left -= give;
        remaining -= 1;
    }
    out
}
