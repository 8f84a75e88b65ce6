//! Validation of untrusted input: tool-call arguments against their schema, and model responses
//! before anything of them is recorded.

use std::collections::HashSet;

use serde_json::Value;

use crate::message::ToolCall;
use crate::model::{FinishReason, ModelResponse};
use crate::registry::pointer_or_root;
use crate::usage::Usage;

/// The largest integer magnitude a JSON number holds exactly in every implementation: 2^53.
pub const MAX_SAFE_INTEGER: u64 = 1 << 53;

/// At most this many argument errors are reported for one call.
const MAX_REPORTED_ERRORS: usize = 8;
/// An error message is cut to this many characters.
const MAX_ERROR_CHARS: usize = 300;

/// One offending value in a call's arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgumentError {
    /// The JSON pointer of the value (`""` is the whole arguments object).
    pub pointer: String,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for ArgumentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", pointer_or_root(&self.pointer), self.message)
    }
}

fn cut(mut s: String) -> String {
    if let Some((i, _)) = s.char_indices().nth(MAX_ERROR_CHARS) {
        s.truncate(i);
        s.push('…');
    }
    s
}

/// Validates arguments with a compiled schema. Integers beyond ±2^53 are refused first, wherever they
/// are: they are neither "integer" nor "number" here, since no JSON peer holds them exactly.
/// `numbers` is false when no value the schema accepts can hold a number ([`admits_numbers`]): then a valid
/// call holds no number at all and the number scan is skipped.
pub(crate) fn validate_arguments(
    validator: &jsonschema::Validator,
    numbers: bool,
    args: &Value,
) -> Result<(), Vec<ArgumentError>> {
    if !numbers && validator.is_valid(args) {
        return Ok(());
    }
    let mut errors = Vec::new();
    if has_unsafe_number(args) {
        unsafe_numbers(args, &mut String::new(), &mut errors);
    } else if validator.is_valid(args) {
        // The common case: a yes/no check is far cheaper than collecting errors.
        return Ok(());
    }
    if errors.is_empty() {
        for e in validator.iter_errors(args).take(MAX_REPORTED_ERRORS) {
            errors.push(ArgumentError { pointer: e.instance_path().as_str().to_owned(), message: cut(e.to_string()) });
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// Whether some value that `schema` accepts may hold a number anywhere inside it. Conservative: any keyword it
/// does not follow (`$ref`, `anyOf`, `enum`, pattern properties, …) or a missing `type` answers true; only
/// schemas built of `type`s without numbers, closed objects and typed arrays answer false (for example
/// `{"type": "object", "properties": {"t": {"type": "string"}}, "additionalProperties": false}`).
pub(crate) fn admits_numbers(schema: &Value) -> bool {
    const FOLLOWED: &[&str] = &[
        "type",
        "properties",
        "additionalProperties",
        "items",
        "required",
        "title",
        "description",
        "$schema",
        "$id",
        "$comment",
        "default",
        "examples",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "deprecated",
        "readOnly",
        "writeOnly",
    ];
    let map = match schema {
        Value::Bool(b) => return *b,
        Value::Object(map) => map,
        _ => return true,
    };
    if map.keys().any(|k| !FOLLOWED.contains(&k.as_str())) {
        return true;
    }
    let types: Vec<&str> = match map.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return true,
    };
    types.iter().any(|t| match *t {
        "string" | "boolean" | "null" => false,
        "object" => {
            let props = match map.get("properties") {
                None => false,
                Some(Value::Object(p)) => p.values().any(admits_numbers),
                Some(_) => true,
            };
            props || map.get("additionalProperties").is_none_or(admits_numbers)
        }
        "array" => map.get("items").is_none_or(admits_numbers),
        _ => true,
    })
}

/// True for an integer beyond ±2^53 or a non-finite number.
fn is_unsafe(n: &serde_json::Number) -> bool {
    if let Some(u) = n.as_u64() {
        u > MAX_SAFE_INTEGER
    } else if let Some(i) = n.as_i64() {
        i.unsigned_abs() > MAX_SAFE_INTEGER
    } else {
        n.as_f64().is_some_and(|f| !f.is_finite() || (f.fract() == 0.0 && f.abs() > MAX_SAFE_INTEGER as f64))
    }
}

/// True when some number in `v` is unsafe: the common, allocation-free check before paths are built.
fn has_unsafe_number(v: &Value) -> bool {
    match v {
        Value::Number(n) => is_unsafe(n),
        Value::Array(items) => items.iter().any(has_unsafe_number),
        Value::Object(map) => map.values().any(has_unsafe_number),
        _ => false,
    }
}

fn unsafe_numbers(v: &Value, path: &mut String, out: &mut Vec<ArgumentError>) {
    if out.len() >= MAX_REPORTED_ERRORS {
        return;
    }
    match v {
        Value::Number(n) if is_unsafe(n) => {
            out.push(ArgumentError {
                pointer: path.clone(),
                message: format!("{n} is outside ±2^53 and cannot be represented exactly"),
            });
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                unsafe_numbers(item, path, out);
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                let len = path.len();
                path.push('/');
                path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                unsafe_numbers(item, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Why a model response was refused. The run ends `model_error` with this message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ResponseError(pub String);

/// Checks a typed response: tool calls have non-empty, unique ids and non-empty names, and usage adds up
/// without overflow.
pub fn check_response(r: &ModelResponse) -> Result<(), ResponseError> {
    // A few calls are compared pairwise; a set pays off only for larger batches.
    let mut ids = HashSet::with_capacity(if r.tool_calls.len() > 16 { r.tool_calls.len() } else { 0 });
    for (i, call) in r.tool_calls.iter().enumerate() {
        if call.id.is_empty() {
            return Err(ResponseError(format!("tool call {i} has an empty id")));
        }
        if call.name.is_empty() {
            return Err(ResponseError(format!("tool call {i} ({:?}) has an empty name", call.id)));
        }
        let repeated = if r.tool_calls.len() > 16 {
            !ids.insert(&*call.id)
        } else {
            r.tool_calls[..i].iter().any(|c| c.id == call.id)
        };
        if repeated {
            return Err(ResponseError(format!("tool call id {:?} appears more than once", call.id)));
        }
    }
    if let Some(u) = &r.usage {
        if u.total().is_none() {
            return Err(ResponseError("usage overflows: input plus output tokens exceed 2^64".into()));
        }
        if u.cached_input_tokens > u.input_tokens {
            return Err(ResponseError("usage: cached input tokens exceed input tokens".into()));
        }
        if u.cache_write_tokens > u.input_tokens - u.cached_input_tokens {
            return Err(ResponseError("usage: cache reads plus cache writes exceed input tokens".into()));
        }
        if u.reasoning_tokens > u.output_tokens {
            return Err(ResponseError("usage: reasoning tokens exceed output tokens".into()));
        }
    }
    Ok(())
}

/// Parses and checks a response given as raw JSON:
/// `{"content": string, "tool_calls": [{"id", "name", "arguments"}], "usage": {"input_tokens", "output_tokens"}}`.
/// `content` may also be spelled `text`; both are optional, as are `tool_calls` and `usage`.
///
/// ```
/// let r = reins::parse_response(&serde_json::json!({"content": "hi"})).unwrap();
/// assert_eq!(r.text, "hi");
/// assert!(reins::parse_response(&serde_json::json!({"content": 5})).is_err());
/// ```
pub fn parse_response(v: &Value) -> Result<ModelResponse, ResponseError> {
    let err = |m: String| Err(ResponseError(m));
    let Value::Object(map) = v else {
        return err(format!("a response is a JSON object, not {}", kind(v)));
    };
    let text = match (map.get("content"), map.get("text")) {
        (Some(_), Some(_)) => return err("a response has `content` or `text`, not both".into()),
        (Some(Value::String(s)), None) | (None, Some(Value::String(s))) => s.clone(),
        (None, None) | (Some(Value::Null), None) | (None, Some(Value::Null)) => String::new(),
        (Some(other), None) | (None, Some(other)) => {
            return err(format!("response text is a string, not {}", kind(other)));
        }
    };
    let tool_calls = match map.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut calls = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                calls.push(parse_call(i, item)?);
            }
            calls
        }
        Some(other) => return err(format!("tool_calls is an array, not {}", kind(other))),
    };
    let usage = match map.get("usage") {
        None | Some(Value::Null) => None,
        Some(u) => Some(parse_usage(u)?),
    };
    let reasoning = match map.get("reasoning") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => return err(format!("reasoning is a string, not {}", kind(other))),
    };
    let finish_reason = match map.get("finish_reason") {
        None | Some(Value::Null) => None,
        Some(f) => Some(
            serde_json::from_value::<FinishReason>(f.clone())
                .map_err(|e| ResponseError(format!("finish_reason: {e}")))?,
        ),
    };
    let r = ModelResponse { text, tool_calls, usage, reasoning, reasoning_items: Vec::new(), finish_reason };
    check_response(&r)?;
    Ok(r)
}

fn parse_call(i: usize, v: &Value) -> Result<ToolCall, ResponseError> {
    let Value::Object(m) = v else {
        return Err(ResponseError(format!("tool call {i} is an object, not {}", kind(v))));
    };
    let field = |name: &str| -> Result<String, ResponseError> {
        match m.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            None => Err(ResponseError(format!("tool call {i} has no {name}"))),
            Some(other) => Err(ResponseError(format!("tool call {i}: {name} is a string, not {}", kind(other)))),
        }
    };
    let id = field("id")?;
    let name = field("name")?;
    let arguments = match m.get("arguments") {
        None => return Err(ResponseError(format!("tool call {i} ({id:?}) carries no arguments"))),
        Some(a) => a.clone(),
    };
    Ok(ToolCall { id: id.into(), name, arguments })
}

fn parse_usage(v: &Value) -> Result<Usage, ResponseError> {
    let Value::Object(m) = v else {
        return Err(ResponseError(format!("usage is an object, not {}", kind(v))));
    };
    let count = |name: &str, required: bool| -> Result<u64, ResponseError> {
        match m.get(name) {
            None | Some(Value::Null) if !required => Ok(0),
            None | Some(Value::Null) => Err(ResponseError(format!("usage has no {name}"))),
            Some(Value::Number(n)) => n
                .as_u64()
                .ok_or_else(|| ResponseError(format!("usage {name} is a non-negative integer below 2^64, not {n}"))),
            Some(other) => Err(ResponseError(format!("usage {name} is a number, not {}", kind(other)))),
        }
    };
    let cached = match (m.get("cached_input_tokens"), m.get("cache_read_tokens")) {
        (Some(a), Some(b)) if !a.is_null() && !b.is_null() && a != b => {
            return Err(ResponseError(
                "usage: cached_input_tokens and cache_read_tokens name one count, and differ".into(),
            ));
        }
        (Some(a), _) if !a.is_null() => count("cached_input_tokens", false)?,
        _ => count("cache_read_tokens", false)?,
    };
    Ok(Usage {
        input_tokens: count("input_tokens", true)?,
        output_tokens: count("output_tokens", true)?,
        cached_input_tokens: cached,
        cache_write_tokens: count("cache_write_tokens", false)?,
        reasoning_tokens: count("reasoning_tokens", false)?,
    })
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    fn has_number(v: &Value) -> bool {
        match v {
            Value::Number(_) => true,
            Value::Array(a) => a.iter().any(has_number),
            Value::Object(m) => m.values().any(has_number),
            _ => false,
        }
    }

    fn schemas() -> Vec<(Value, bool)> {
        vec![
            (json!({"type": "object", "properties": {"t": {"type": "string"}}, "additionalProperties": false}), false),
            (
                json!({"type": "object", "properties": {"t": {"type": ["string", "null"]}, "f": {"type": "array", "items": {"type": "boolean"}}}, "additionalProperties": false}),
                false,
            ),
            (json!({"type": "object", "properties": {"t": {"type": "string"}}}), true),
            (json!({"type": "object", "properties": {"t": {"type": "integer"}}, "additionalProperties": false}), true),
            (json!({"type": "object", "properties": {"t": {"enum": [1, "a"]}}, "additionalProperties": false}), true),
            (
                json!({"type": "object", "properties": {"t": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "number"}}}),
                true,
            ),
            (json!({"type": "object", "additionalProperties": {"type": "array"}}), true),
            (json!({"type": "object", "additionalProperties": {"type": "string"}}), false),
            (json!(true), true),
        ]
    }

    #[test]
    fn admits_numbers_is_conservative_on_known_shapes() {
        for (schema, expected) in schemas() {
            assert_eq!(admits_numbers(&schema), expected, "{schema}");
        }
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            "[a-z]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![Just("t".to_owned()), Just("f".to_owned()), "[a-z]"],
                    inner,
                    0..3
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Skipping the number scan is safe: whatever a "no numbers" schema accepts holds no number.
        #[test]
        fn a_schema_said_to_admit_no_numbers_accepts_no_number(v in arb_json()) {
            for (schema, _) in schemas() {
                if !admits_numbers(&schema) {
                    let validator = jsonschema::validator_for(&schema).unwrap();
                    if validator.is_valid(&v) {
                        prop_assert!(!has_number(&v), "{schema} accepted {v}");
                    }
                }
            }
        }
    }
}
