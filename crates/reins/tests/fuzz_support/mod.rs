//! The checking logic shared by the fuzz targets in `/fuzz` (included there by path) and the proptests in
//! `tests/fuzz_props.rs`: arbitrary input must never panic, and what is accepted must hold the
//! invariants. A violated invariant panics, which is what both harnesses report.

#![allow(dead_code)]

use std::collections::HashSet;

use reins::{CharCounter, Message, ToolCall, Transcript, parse_response, parse_script, transcript::measure};
use serde_json::Value;

/// Bytes as JSON → [`parse_response`]; the raw text → [`parse_script`]. An accepted response has calls
/// with non-empty, unique ids and non-empty names, and usage that adds up.
pub fn check_response_bytes(data: &[u8]) {
    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        check_response_value(&value);
        // The same value as a one-turn script, raw and as a response turn.
        let _ = parse_script(&serde_json::json!([{ "raw": value.clone() }]).to_string());
        let _ = parse_script(&Value::Array(vec![value]).to_string());
    }
    let text = String::from_utf8_lossy(data);
    if let Ok(steps) = parse_script(&text) {
        // Only a JSON array is a script.
        assert!(matches!(serde_json::from_str::<Value>(&text), Ok(Value::Array(a)) if a.len() == steps.len()));
    }
}

/// [`parse_response`] on one JSON value, with the invariants of an accepted response.
pub fn check_response_value(value: &Value) {
    let Ok(r) = parse_response(value) else { return };
    assert!(value.is_object(), "a response that is not an object was accepted: {value}");
    let mut ids = HashSet::new();
    for call in &r.tool_calls {
        assert!(!call.id.is_empty(), "a call with an empty id was accepted: {value}");
        assert!(!call.name.is_empty(), "a call with an empty name was accepted: {value}");
        assert!(ids.insert(call.id.clone()), "a duplicate call id was accepted: {value}");
    }
    if let Some(u) = &r.usage {
        assert!(u.input_tokens.checked_add(u.output_tokens).is_some(), "usage that overflows was accepted");
    }
    assert!(reins::check_response(&r).is_ok());
}

/// Reads bytes as a little program that builds a list of messages.
struct Reader<'a> {
    data: &'a [u8],
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }

    /// A text of 0-63 characters of one kind, ASCII or not, so that sizes in characters and bytes differ.
    fn text(&mut self) -> String {
        let b = self.byte().unwrap_or(0);
        let c = ['a', 'é', '😀', ' '][usize::from(b >> 6)];
        std::iter::repeat_n(c, usize::from(b & 63)).collect()
    }

    /// A call id from a small set, so that duplicates and mismatches happen.
    fn id(&mut self) -> String {
        format!("c{}", self.byte().unwrap_or(0) % 6)
    }
}

/// Decodes bytes into a budget and a sequence of messages. Most sequences are coherent (results follow
/// their calls in order); some bytes break that on purpose.
pub fn decode_messages(data: &[u8]) -> (Option<u64>, Vec<Message>) {
    let mut r = Reader { data };
    let budget = match (r.byte(), r.byte()) {
        (Some(0), _) => None,
        (Some(a), Some(b)) => Some(u64::from(a) * u64::from(1 + b % 4)),
        (Some(a), None) => Some(u64::from(a)),
        (None, _) => None,
    };
    let mut messages = Vec::new();
    // Almost always a user message first; one byte value leaves it out.
    if r.data.first() != Some(&0xFF) {
        messages.push(Message::user(r.text()));
    }
    // Calls of the newest assistant turn that still wait for a result, in order.
    let mut pending: Vec<String> = Vec::new();
    while let Some(op) = r.byte() {
        match op % 16 {
            // While calls wait, most ops give the next one its result.
            0..=11 if !pending.is_empty() => {
                let id = pending.remove(0);
                let content = r.text();
                messages.push(Message::tool_result(id, content, op & 16 != 0));
            }
            // An assistant turn with 0-3 calls; ids unique, or (op 15) from a small set, so duplicates happen.
            0..=9 | 15 => {
                let n = usize::from(r.byte().unwrap_or(0) % 4);
                let content = r.text();
                let mut calls = Vec::with_capacity(n);
                for i in 0..n {
                    let id = if op % 16 == 15 { r.id() } else { format!("t{}-{i}", messages.len()) };
                    let args = serde_json::json!({ "text": r.text() });
                    calls.push(ToolCall::new(id, "echo", args));
                }
                pending = calls.iter().map(|c| c.id.to_string()).collect();
                messages.push(Message::assistant(content, calls));
            }
            10 => {
                pending.clear();
                messages.push(Message::user(r.text()));
            }
            // A result with an arbitrary id: usually out of order or an orphan.
            11 => {
                let id = r.id();
                let content = r.text();
                messages.push(Message::tool_result(id, content, false));
            }
            _ => {
                pending.clear();
                messages.push(Message::assistant(r.text(), Vec::new()));
            }
        }
    }
    (budget, messages)
}

fn size(m: &Message) -> u64 {
    measure(m, &CharCounter)
}

/// True when a group starts at `i`: any message but a tool result.
fn starts_group(messages: &[Message], i: usize) -> bool {
    !matches!(messages[i], Message::ToolResult(_))
}

/// Bytes → messages → [`Transcript::from_messages`] → [`Transcript::select`]. A selection starts with the
/// first user message, continues with a suffix of whole groups, fits the budget and keeps as many of the
/// newest groups as fit; a refusal says why, and only when no selection could be made.
pub fn check_selector_bytes(data: &[u8]) -> Reached {
    let (budget, messages) = decode_messages(data);
    check_selection(budget, messages)
}

/// How far a check got, so that tests can see the decoder reaches every path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reached {
    /// The messages were not a coherent transcript.
    Incoherent,
    /// A selection was made, all of the transcript.
    SelectedAll,
    /// A selection was made that left out older groups.
    SelectedPart,
    /// The selection was refused.
    Refused,
}

/// The selection invariants for one list of messages and one budget.
pub fn check_selection(budget: Option<u64>, messages: Vec<Message>) -> Reached {
    let transcript = match Transcript::from_messages(messages.clone(), &CharCounter) {
        Ok(t) => t,
        Err(e) => {
            assert!(e.index < messages.len().max(1), "error index {} out of range", e.index);
            assert!(!e.reason.is_empty());
            return Reached::Incoherent;
        }
    };
    assert!(matches!(messages.first(), Some(Message::User { .. })), "a transcript must start with a user message");
    assert_eq!(transcript.len(), messages.len());
    let sizes: Vec<u64> = messages.iter().map(size).collect();
    assert_eq!(transcript.total(), sizes.iter().sum::<u64>(), "sizes measured on append differ");
    match transcript.select(budget, "characters") {
        Ok(conversation) => {
            assert!(transcript.is_complete(), "an incomplete batch was selected");
            let sent: Vec<Message> = conversation.to_vec();
            // The view answers the same through every accessor.
            assert_eq!(conversation.len(), sent.len());
            assert_eq!(conversation.iter().len(), sent.len());
            assert_eq!(conversation.last(), sent.last());
            assert!(conversation.iter().rev().eq(sent.iter().rev()));
            assert!((0..=sent.len()).all(|i| conversation.get(i) == sent.get(i)));
            assert_eq!(conversation, reins::Conversation::from_messages(sent.clone()));
            assert_eq!(sent.first(), messages.first(), "the selection does not start with the first user message");
            let kept = sent.len() - 1;
            let start = messages.len() - kept;
            assert!(start >= 1);
            assert_eq!(&sent[1..], &messages[start..], "the selection is not a suffix of the transcript");
            if start < messages.len() {
                assert!(starts_group(&messages, start), "the selection starts inside a group at message {start}");
            }
            let total: u64 = sizes[0] + sizes[start..].iter().sum::<u64>();
            if let Some(budget) = budget {
                assert!(total <= budget, "the selection ({total}) exceeds the budget ({budget})");
                // Maximal: the group just before the selection would not have fit.
                if start > 1 {
                    let prev = (1..start).rev().find(|&i| starts_group(&messages, i)).unwrap_or(1);
                    let with_prev = total + sizes[prev..start].iter().sum::<u64>();
                    assert!(with_prev > budget, "the group at {prev} would have fit ({with_prev} <= {budget})");
                }
            } else {
                assert_eq!(start, 1, "without a budget everything is selected");
            }
            if start == 1 { Reached::SelectedAll } else { Reached::SelectedPart }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.is_empty());
            if transcript.is_complete() {
                let budget = budget.unwrap_or_else(|| panic!("selection without a budget failed: {msg}"));
                let newest = (1..messages.len()).rev().find(|&i| starts_group(&messages, i));
                let need = sizes[0] + newest.map_or(0, |g| sizes[g..].iter().sum::<u64>());
                assert!(need > budget, "refused ({msg}) although the newest group fits ({need} <= {budget})");
            } else {
                assert!(msg.contains("incomplete"), "an incomplete batch is refused as such: {msg}");
            }
            Reached::Refused
        }
    }
}

/// Bytes → a schema (the first line, JSON) and arguments (the rest, JSON) → the specialised argument
/// validator beside the jsonschema path (`reins::validate::compare_with_jsonschema`): where the schema is in
/// the specialised validator's subset, the two give the same verdict.
pub fn check_arguments_validator_bytes(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (schema, args) = text.split_once('\n').unwrap_or((&text, "{}"));
    let (Ok(schema), Ok(args)) = (serde_json::from_str::<Value>(schema), serde_json::from_str::<Value>(args)) else {
        return;
    };
    check_arguments_validator(&schema, &args);
}

/// [`check_arguments_validator_bytes`] on values.
pub fn check_arguments_validator(schema: &Value, args: &Value) {
    if let Err(disagreement) = reins::validate::compare_with_jsonschema(schema, args) {
        panic!("{disagreement}");
    }
}
