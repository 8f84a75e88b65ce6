//! Reasoning kept across turns: the settings that ask for it (`reasoning_effort`, `thinking_budget`), the
//! checks of their combinations, and which recorded reasoning items an adapter sends back.
//!
//! A model's reasoning items ([`reins::Reasoning`]) are tagged with the API that produced them: Anthropic
//! `thinking` blocks (with their `signature`) and `redacted_thinking` blocks are tagged `anthropic`; OpenAI
//! Responses `reasoning` items (with their `encrypted_content`) are tagged `openai`; Gemini's `thoughtSignature`s,
//! each with the part it came on, are tagged `gemini` (see [`crate::gemini`]). The adapter of that API
//! sends them back unchanged and in order, before the turn's text and tool calls; every other adapter drops
//! them. Chat Completions has no reasoning that round-trips: a server's `reasoning_content` is shown, never
//! sent back.

use std::fmt;
use std::str::FromStr;

use reins::Reasoning;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::provider::{Api, Settings, ToolChoice};

/// The smallest thinking budget the Anthropic Messages API takes.
pub const MIN_THINKING_BUDGET: u32 = 1024;

/// How hard an OpenAI reasoning model thinks: Responses `reasoning.effort`, Chat Completions
/// `reasoning_effort`. Written `low`, `medium` or `high`.
///
/// ```
/// use reins_providers::ReasoningEffort;
/// assert_eq!("high".parse::<ReasoningEffort>().unwrap(), ReasoningEffort::High);
/// assert!("max".parse::<ReasoningEffort>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReasoningEffort {
    /// `low`.
    Low,
    /// `medium`.
    Medium,
    /// `high`.
    High,
}

impl ReasoningEffort {
    /// The word sent: `low`, `medium` or `high`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

impl fmt::Display for ReasoningEffort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ReasoningEffort {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "low" => Ok(ReasoningEffort::Low),
            "medium" => Ok(ReasoningEffort::Medium),
            "high" => Ok(ReasoningEffort::High),
            other => Err(format!("expected \"low\", \"medium\" or \"high\", not {other:?}")),
        }
    }
}

impl Serialize for ReasoningEffort {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ReasoningEffort {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ReasoningEffort;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"low\", \"medium\" or \"high\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ReasoningEffort, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// What a combination of reasoning settings gets wrong: the setting to change (its agent-file key under
/// `[provider]`) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReasoningConflict {
    /// `reasoning_effort`, `thinking_budget`, `temperature`, `tool_choice` or `max_response_tokens`.
    pub setting: &'static str,
    /// What is wrong, and what to do.
    pub reason: String,
}

impl fmt::Display for ReasoningConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.setting, self.reason)
    }
}

/// The settings a reasoning check looks at.
#[derive(Clone, Copy, Debug)]
pub struct ReasoningSettings<'a> {
    /// The API.
    pub api: Api,
    /// The model name (its known output cap sets Anthropic's default `max_tokens`).
    pub model: &'a str,
    /// The configured response cap.
    pub max_output_tokens: Option<u32>,
    /// Whether a temperature is set.
    pub temperature: bool,
    /// The tool choice.
    pub tool_choice: &'a ToolChoice,
    /// `reasoning_effort`.
    pub effort: Option<ReasoningEffort>,
    /// `thinking_budget`.
    pub thinking_budget: Option<u32>,
}

/// Checks what the API would refuse: an effort for Anthropic (which thinks by budget), a thinking budget for
/// an OpenAI API, a budget under [`MIN_THINKING_BUDGET`] or not below the response cap (`max_tokens` must
/// exceed `budget_tokens`), and, with thinking, a temperature or a tool choice other than `auto` or `none`.
///
/// ```
/// use reins_providers::{Api, ReasoningSettings, ToolChoice, check_reasoning};
/// let s = ReasoningSettings { api: Api::Anthropic, model: "claude-sonnet-4-5", max_output_tokens: Some(2048),
///     temperature: false, tool_choice: &ToolChoice::Auto, effort: None, thinking_budget: Some(4096) };
/// assert_eq!(check_reasoning(&s).unwrap_err().setting, "thinking_budget");
/// ```
pub fn check_reasoning(s: &ReasoningSettings<'_>) -> Result<(), ReasoningConflict> {
    let err = |setting, reason: String| Err(ReasoningConflict { setting, reason });
    if s.api == Api::Gemini {
        return check_gemini(s);
    }
    if s.effort.is_some() && matches!(s.api, Api::Anthropic | Api::Bedrock) {
        return err(
            "reasoning_effort",
            format!(
                "applies to openai: and openai-chat: models; an {}: model thinks within a thinking budget (--thinking-budget N)",
                s.api.name()
            ),
        );
    }
    let Some(budget) = s.thinking_budget else { return Ok(()) };
    if !matches!(s.api, Api::Anthropic | Api::Bedrock) {
        return err(
            "thinking_budget",
            "applies to anthropic:, bedrock: and gemini: models; an OpenAI reasoning model takes a reasoning effort (--reasoning-effort low|medium|high)".into(),
        );
    }
    if budget < MIN_THINKING_BUDGET {
        return err("thinking_budget", format!("{budget} is below {MIN_THINKING_BUDGET}, the least the API takes"));
    }
    let cap = anthropic_max_tokens(s.model, s.max_output_tokens);
    if u64::from(budget) >= cap {
        let given = if s.max_output_tokens.is_some() { "the response cap" } else { "the default response cap" };
        return err(
            "thinking_budget",
            format!(
                "{budget} must be below {given} ({cap} tokens, max_tokens): the API counts thinking in max_tokens; lower the budget or raise --max-response-tokens"
            ),
        );
    }
    if s.temperature {
        return err("temperature", "the Anthropic API takes no temperature with thinking: remove one of them".into());
    }
    if matches!(s.tool_choice, ToolChoice::Required | ToolChoice::Tool(_)) {
        return err(
            "tool_choice",
            "with thinking the Anthropic API allows only tool_choice \"auto\" or \"none\": remove one of them".into(),
        );
    }
    Ok(())
}

/// Gemini thinks by a budget (`thinkingBudget`) or a level (`thinkingLevel`, from the reasoning effort), and
/// refuses both at once; a Gemini 2 model takes no level.
fn check_gemini(s: &ReasoningSettings<'_>) -> Result<(), ReasoningConflict> {
    let err = |setting, reason: &str| Err(ReasoningConflict { setting, reason: reason.to_owned() });
    match (s.thinking_budget, s.effort) {
        (Some(_), Some(_)) => err(
            "thinking_budget",
            "Gemini takes a thinking budget (thinkingBudget) or a reasoning effort (thinkingLevel), never both: remove one of them",
        ),
        (None, Some(_)) if s.model.trim_start_matches("models/").starts_with("gemini-2") => err(
            "reasoning_effort",
            "a gemini-2 model takes no thinking level: give it a thinking budget (--thinking-budget N) instead",
        ),
        _ => Ok(()),
    }
}

/// Anthropic's `max_tokens` (the API requires one): the configured cap; else the model's known output cap up
/// to 32,000; else [`crate::anthropic::DEFAULT_MAX_TOKENS`].
pub(crate) fn anthropic_max_tokens(model: &str, max_output_tokens: Option<u32>) -> u64 {
    max_output_tokens
        .map(u64::from)
        .or_else(|| crate::pricing::model_info(model).map(|i| i.max_output_tokens.min(32_000)))
        .unwrap_or(crate::anthropic::DEFAULT_MAX_TOKENS)
}

/// The items of `reasoning` that `api` produced, in order: what its adapter sends back.
pub(crate) fn sent_back(api: Api, reasoning: &[Reasoning]) -> impl Iterator<Item = &Value> {
    reasoning.iter().filter(move |r| r.api == api.name()).map(|r| &r.item)
}

/// An item of `api`.
pub(crate) fn item(api: Api, item: Value) -> Reasoning {
    Reasoning::new(api.name(), item)
}

/// Whether a Responses request asks for the reasoning items' encrypted content (`include` with `store:
/// false`): when an effort is set, or the model is a known OpenAI reasoning model (o-series, gpt-5).
/// Other models (and servers) are sent neither field.
pub(crate) fn responses_keeps_reasoning(s: &Settings) -> bool {
    s.reasoning_effort.is_some()
        || crate::pricing::model_info(&s.model)
            .is_some_and(|i| i.prefix.starts_with('o') || i.prefix.starts_with("gpt-5"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(api: Api, cap: Option<u32>, budget: Option<u32>) -> ReasoningSettings<'static> {
        ReasoningSettings {
            api,
            model: "claude-sonnet-4-5",
            max_output_tokens: cap,
            temperature: false,
            tool_choice: &ToolChoice::Auto,
            effort: None,
            thinking_budget: budget,
        }
    }

    #[test]
    fn combinations_the_api_refuses_are_named() {
        assert!(check_reasoning(&settings(Api::Anthropic, Some(8000), Some(4000))).is_ok());
        assert!(check_reasoning(&settings(Api::Anthropic, None, Some(4000))).is_ok());
        let e = check_reasoning(&settings(Api::Anthropic, Some(4000), Some(4000))).unwrap_err();
        assert_eq!(e.setting, "thinking_budget");
        assert!(e.reason.contains("below the response cap (4000"), "{e}");
        let e = check_reasoning(&settings(Api::Anthropic, None, Some(1000))).unwrap_err();
        assert!(e.reason.contains("1024"), "{e}");
        let e = check_reasoning(&settings(Api::OpenAiResponses, None, Some(4000))).unwrap_err();
        assert_eq!(e.setting, "thinking_budget");
        let mut s = settings(Api::Anthropic, None, None);
        s.effort = Some(ReasoningEffort::Low);
        assert_eq!(check_reasoning(&s).unwrap_err().setting, "reasoning_effort");
        let mut s = settings(Api::Anthropic, Some(8000), Some(4000));
        s.temperature = true;
        assert_eq!(check_reasoning(&s).unwrap_err().setting, "temperature");
        let choice = ToolChoice::Required;
        let mut s = settings(Api::Anthropic, Some(8000), Some(4000));
        s.tool_choice = &choice;
        assert_eq!(check_reasoning(&s).unwrap_err().setting, "tool_choice");
        let mut s = settings(Api::OpenAiChat, None, None);
        s.effort = Some(ReasoningEffort::High);
        assert!(check_reasoning(&s).is_ok());
    }

    use proptest::prelude::*;
    use serde_json::json;

    use crate::sse::SseEvent;
    use crate::wire::Emit;

    fn event(data: Value) -> SseEvent {
        SseEvent { event: data["type"].as_str().unwrap_or("").to_owned(), data: data.to_string() }
    }

    /// An Anthropic content block: signed or unsigned thinking, redacted thinking, text, a tool call.
    fn anthropic_block() -> impl Strategy<Value = Value> {
        prop_oneof![
            ("\\PC{0,16}", "[A-Za-z0-9+/=]{0,12}")
                .prop_map(|(t, s)| json!({"type": "thinking", "thinking": t, "signature": s})),
            "[A-Za-z0-9+/=]{1,16}".prop_map(|d| json!({"type": "redacted_thinking", "data": d})),
            "\\PC{0,10}".prop_map(|t| json!({"type": "text", "text": t})),
            "[a-z]{1,6}".prop_map(|id| json!({"type": "tool_use", "id": id, "name": "f", "input": {"a": id}})),
        ]
    }

    /// The blocks as the API streams them, each text cut at `cut` (a fraction of its length).
    fn anthropic_events(blocks: &[Value], cut: f64) -> Vec<SseEvent> {
        let split = |t: &str| {
            let mut at = (t.len() as f64 * cut) as usize;
            while !t.is_char_boundary(at) {
                at -= 1;
            }
            (t[..at].to_owned(), t[at..].to_owned())
        };
        let mut out = vec![event(json!({"type": "message_start", "message": {"usage": {"input_tokens": 1}}}))];
        for (index, b) in blocks.iter().enumerate() {
            let start = |c: Value| event(json!({"type": "content_block_start", "index": index, "content_block": c}));
            let delta = |d: Value| event(json!({"type": "content_block_delta", "index": index, "delta": d}));
            match b["type"].as_str().unwrap_or("") {
                "thinking" => {
                    let (a, z) = split(b["thinking"].as_str().unwrap_or(""));
                    out.push(start(json!({"type": "thinking", "thinking": "", "signature": ""})));
                    out.push(delta(json!({"type": "thinking_delta", "thinking": a})));
                    out.push(delta(json!({"type": "thinking_delta", "thinking": z})));
                    out.push(delta(json!({"type": "signature_delta", "signature": b["signature"]})));
                }
                "text" => {
                    let (a, z) = split(b["text"].as_str().unwrap_or(""));
                    out.push(start(json!({"type": "text", "text": ""})));
                    out.push(delta(json!({"type": "text_delta", "text": a})));
                    out.push(delta(json!({"type": "text_delta", "text": z})));
                }
                "tool_use" => {
                    out.push(start(json!({"type": "tool_use", "id": b["id"], "name": "f", "input": {}})));
                    out.push(delta(json!({"type": "input_json_delta", "partial_json": b["input"].to_string()})));
                }
                _ => out.push(start(b.clone())),
            }
            out.push(event(json!({"type": "content_block_stop", "index": index})));
        }
        out.push(event(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})));
        out.push(event(json!({"type": "message_stop"})));
        out
    }

    /// A Responses output item: a reasoning item with or without encrypted content, a call, a message.
    fn responses_item() -> impl Strategy<Value = Value> {
        prop_oneof![
            ("[a-z0-9]{1,6}", "\\PC{0,12}", prop::option::of("[A-Za-z0-9=]{1,16}")).prop_map(|(id, t, e)| {
                let mut v = json!({"type": "reasoning", "id": format!("rs_{id}"),
                                   "summary": [{"type": "summary_text", "text": t}]});
                if let Some(e) = e {
                    v["encrypted_content"] = e.into();
                }
                v
            }),
            "[a-z]{1,6}".prop_map(|id| json!({"type": "function_call", "id": format!("fc_{id}"), "call_id": id,
                                               "name": "f", "arguments": "{}"})),
            "\\PC{0,10}".prop_map(|t| json!({"type": "message", "id": "m", "role": "assistant",
                                                "content": [{"type": "output_text", "text": t}]})),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Whole or streamed (any cut of the deltas), an Anthropic response gives the same reasoning items:
        /// each redacted block and each signed thinking block, whole and in order; unsigned thinking is not kept.
        #[test]
        fn anthropic_reasoning_is_the_same_whole_and_streamed(
            blocks in prop::collection::vec(anthropic_block(), 0..6),
            cut in 0.0f64..1.0,
        ) {
            let whole = crate::anthropic::parse(&json!({"content": blocks, "stop_reason": "end_turn"})).unwrap();
            let mut stream = crate::anthropic::Stream::default();
            let mut emit = Emit::new(None);
            for ev in anthropic_events(&blocks, cut) {
                stream.on_event(&ev, &mut emit).unwrap();
            }
            let streamed = stream.finish().unwrap();
            let want: Vec<Reasoning> = blocks
                .iter()
                .filter(|b| b["type"] == "redacted_thinking" || b["signature"].as_str().is_some_and(|s| !s.is_empty()))
                .map(|b| Reasoning::new("anthropic", b.clone()))
                .collect();
            prop_assert_eq!(&whole.reasoning_items, &want);
            prop_assert_eq!(&streamed.reasoning_items, &want);
            prop_assert_eq!(&streamed.text, &whole.text);
        }

        /// Whole or streamed (items from `response.output_item.done`, the final output empty), a Responses
        /// response keeps exactly its reasoning items that carry encrypted content, verbatim and in order.
        #[test]
        fn responses_reasoning_is_the_same_whole_and_streamed(items in prop::collection::vec(responses_item(), 0..6)) {
            let response = json!({"status": "completed", "output": items});
            let whole = crate::openai_responses::parse(&response).unwrap();
            let mut stream = crate::openai_responses::Stream::default();
            let mut emit = Emit::new(None);
            for (i, item) in items.iter().enumerate() {
                let done = json!({"type": "response.output_item.done", "output_index": i, "item": item});
                stream.on_event(&event(done), &mut emit).unwrap();
            }
            let end = json!({"type": "response.completed", "response": {"status": "completed", "output": []}});
            prop_assert!(stream.on_event(&event(end), &mut emit).unwrap());
            let streamed = stream.finish().unwrap();
            let want: Vec<Reasoning> = items
                .iter()
                .filter(|i| i.get("encrypted_content").is_some())
                .map(|i| Reasoning::new("openai", i.clone()))
                .collect();
            prop_assert_eq!(&whole.reasoning_items, &want);
            prop_assert_eq!(&streamed.reasoning_items, &want);
        }
    }

    /// A stream event of any known type (and an unknown one) about any block, with any delta: what a broken or
    /// hostile server may send.
    fn any_event() -> impl Strategy<Value = SseEvent> {
        let types = prop::sample::select(vec![
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
            "response.output_item.added",
            "response.output_item.done",
            "response.reasoning_summary_text.delta",
            "response.completed",
            "future",
        ]);
        let blocks = prop::sample::select(vec!["thinking", "redacted_thinking", "text", "tool_use", "reasoning", "x"]);
        let deltas = prop::sample::select(vec!["thinking_delta", "signature_delta", "text_delta", "input_json_delta"]);
        (types, blocks, deltas, 0u64..3, "\\PC{0,6}", any::<bool>()).prop_map(|(t, b, d, index, text, encrypted)| {
            let mut block = json!({"type": b, "thinking": text, "signature": text, "data": text, "id": text,
                                   "name": text, "text": text, "summary": [{"type": "summary_text", "text": text}]});
            if encrypted {
                block["encrypted_content"] = text.clone().into();
            }
            event(json!({"type": t, "index": index, "output_index": index, "content_block": block, "item": block,
                         "delta": {"type": d, "thinking": text, "signature": text, "text": text, "partial_json": text},
                         "response": {"status": "completed", "output": []}}))
        })
    }

    proptest! {
        /// Any sequence of events: an error or a response, never a panic; every kept item is one the API could
        /// take back (redacted thinking, signed thinking, or a reasoning item with encrypted content).
        #[test]
        fn any_events_never_panic_the_stream_assemblers(events in prop::collection::vec(any_event(), 0..12)) {
            let mut a = crate::anthropic::Stream::default();
            let mut r = crate::openai_responses::Stream::default();
            let mut emit = Emit::new(None);
            for ev in &events {
                let _ = a.on_event(ev, &mut emit);
                let _ = r.on_event(ev, &mut emit);
            }
            for response in [a.finish(), r.finish()].into_iter().flatten() {
                for item in &response.reasoning_items {
                    let i = &item.item;
                    let ok = match i["type"].as_str() {
                        Some("redacted_thinking") => true,
                        Some("thinking") => i["signature"].as_str().is_some_and(|s| !s.is_empty()),
                        Some("reasoning") => i["encrypted_content"].as_str().is_some_and(|s| !s.is_empty()),
                        _ => false,
                    };
                    prop_assert!(ok, "{}", i);
                }
            }
        }
    }

    #[test]
    fn efforts_round_trip() {
        for e in [ReasoningEffort::Low, ReasoningEffort::Medium, ReasoningEffort::High] {
            let v = serde_json::to_value(e).unwrap();
            assert_eq!(serde_json::from_value::<ReasoningEffort>(v).unwrap(), e);
        }
        let err = serde_json::from_value::<ReasoningEffort>(serde_json::json!("extreme")).unwrap_err();
        assert!(err.to_string().contains("expected \"low\", \"medium\" or \"high\""), "{err}");
    }
}
