//! Validation of untrusted input: tool-call arguments against their schema (`arguments`, with a
//! specialised validator for simple schemas in `simple`), and model responses before anything of them is
//! recorded.

use std::collections::HashSet;

use serde_json::Value;

use crate::message::ToolCall;
use crate::model::{FinishReason, ModelResponse};
use crate::usage::Usage;

mod arguments;
mod simple;
#[cfg(test)]
mod simple_tests;

pub(crate) use arguments::ArgsValidator;
#[doc(hidden)]
pub use arguments::compare_with_jsonschema;
pub use arguments::{ArgumentError, MAX_SAFE_INTEGER};
pub(crate) use simple::same_name;

/// Why a model response was refused. The run ends `model_error` with this message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ResponseError(pub String);

/// Checks a typed response: tool calls have non-empty, unique ids and non-empty names, and usage adds up
/// without overflow.
pub fn check_response(r: &ModelResponse) -> Result<(), ResponseError> {
    // A few calls are compared pairwise; a set pays off only for larger batches (and is made only for
    // them: making one seeds its hasher).
    let mut ids = (r.tool_calls.len() > 16).then(|| HashSet::with_capacity(r.tool_calls.len()));
    for (i, call) in r.tool_calls.iter().enumerate() {
        if call.id.is_empty() {
            return Err(ResponseError(format!("tool call {i} has an empty id")));
        }
        if call.name.is_empty() {
            return Err(ResponseError(format!("tool call {i} ({:?}) has an empty name", call.id)));
        }
        let repeated = match ids.as_mut() {
            Some(ids) => !ids.insert(&*call.id),
            None => r.tool_calls[..i].iter().any(|c| c.id == call.id),
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
    let r = ModelResponse {
        text,
        tool_calls,
        usage,
        reasoning,
        reasoning_items: Vec::new(),
        finish_reason,
        answered_by: None,
    };
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
