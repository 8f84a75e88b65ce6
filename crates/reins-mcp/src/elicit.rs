//! Elicitation: a server's request for input from the user goes to the person — through the [`Elicitor`] the
//! command registers (the CLI's asks inline on a terminal) — and never to the model. Without one, Reins does not
//! declare the `elicitation` capability and declines any request that comes anyway. The answer is checked
//! against the server's requested schema before it is sent; what happened (not the answer) is noted in the
//! result of the call during which the server asked, so the session records it.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

/// What a server asks the person.
#[derive(Clone, Debug)]
pub struct ElicitationRequest {
    /// The server's name in the agent (`[mcp.NAME]`).
    pub server: String,
    /// Its message, as sent.
    pub message: String,
    /// The JSON Schema the answer must match (an object of primitive fields).
    pub schema: Value,
}

/// The person's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Elicited {
    /// The answer, an object that matches the requested schema.
    Accept(Value),
    /// The person said no.
    Decline,
    /// The person did not answer (end of input, Ctrl-C).
    Cancel,
}

/// Asks the person.
#[async_trait]
pub trait Elicitor: Send + Sync {
    /// The answer to `request`; an `Accept` must match `request.schema` (see [`check_answer`]).
    async fn elicit(&self, request: &ElicitationRequest) -> Elicited;
}

static ELICITOR: Mutex<Option<Arc<dyn Elicitor>>> = Mutex::new(None);

/// Registers the elicitor of this process (`None`: nobody can be asked; requests are declined). Servers
/// connected afterwards declare the `elicitation` capability when there is one.
pub fn set_elicitor(elicitor: Option<Arc<dyn Elicitor>>) {
    if let Ok(mut slot) = ELICITOR.lock() {
        *slot = elicitor;
    }
}

tokio::task_local! {
    static SCOPED: Option<Arc<dyn Elicitor>>;
}

/// Runs `f` with `elicitor` in place of the process's: the servers connected inside it ask that one (or
/// nobody, with `None`). `reins mcp serve` gives each run the client that called it this way.
pub async fn scope<F: std::future::Future>(elicitor: Option<Arc<dyn Elicitor>>, f: F) -> F::Output {
    SCOPED.scope(elicitor, f).await
}

/// The elicitor of the current [`scope`], else the one registered, if any.
pub fn elicitor() -> Option<Arc<dyn Elicitor>> {
    if let Ok(scoped) = SCOPED.try_with(Clone::clone) {
        return scoped;
    }
    ELICITOR.lock().ok().and_then(|slot| slot.clone())
}

/// Checks `answer` against the requested `schema`: the reason it does not match, if it does not.
pub fn check_answer(schema: &Value, answer: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema).map_err(|e| format!("the server's schema is invalid: {e}"))?;
    match validator.iter_errors(answer).next() {
        Some(e) => Err(format!("{e} (at {})", e.instance_path())),
        None => Ok(()),
    }
}

/// Asks through `elicitor` (declines when there is none) and checks the answer: one that does not
/// match the schema is never sent (the request is cancelled instead).
pub async fn ask(elicitor: Option<&Arc<dyn Elicitor>>, request: &ElicitationRequest) -> Elicited {
    let Some(elicitor) = elicitor else { return Elicited::Decline };
    match elicitor.elicit(request).await {
        Elicited::Accept(answer) if check_answer(&request.schema, &answer).is_err() => Elicited::Cancel,
        other => other,
    }
}

/// The line noted in a call's result after the server asked the person during it.
pub fn note(server: &str, answer: &Elicited) -> String {
    let what = match answer {
        Elicited::Accept(_) => "they answered",
        Elicited::Decline => "they declined",
        Elicited::Cancel => "they did not answer",
    };
    format!("[MCP server {server:?} asked the person for input during this call; {what}]")
}

/// The answer made of a form's defaults, for a server configured with `elicitation_defaults` when nobody can be
/// asked: every field of `schema` that has a `default`, with it. `None` (decline) when a required field has no
/// default or the defaults do not match the schema.
pub fn defaults(schema: &Value) -> Option<Value> {
    let properties = schema.get("properties").and_then(Value::as_object);
    let answer: serde_json::Map<String, Value> = properties
        .into_iter()
        .flatten()
        .filter_map(|(name, field)| Some((name.clone(), field.get("default")?.clone())))
        .collect();
    let required = schema.get("required").and_then(Value::as_array).into_iter().flatten();
    if required.filter_map(Value::as_str).any(|name| !answer.contains_key(name)) {
        return None;
    }
    let answer = Value::Object(answer);
    check_answer(schema, &answer).is_ok().then_some(answer)
}

/// The line noted in a call's result after the server's request was answered with its form's defaults.
pub fn note_defaults(server: &str, accepted: bool) -> String {
    let what =
        if accepted { "accepted with the form's defaults" } else { "declined (a required field has no default)" };
    format!("[MCP server {server:?} asked for input during this call; nobody could be asked, so it was {what}]")
}

/// A JSON value as a tool result records it: a string as itself, anything else as compact JSON.
pub(crate) fn json_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_must_match_the_requested_schema() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        assert!(check_answer(&schema, &json!({"n": 3})).is_ok());
        assert!(check_answer(&schema, &json!({"n": "three"})).is_err());
        assert!(check_answer(&schema, &json!({})).is_err());
    }

    #[test]
    fn a_forms_defaults_answer_it_only_when_every_required_field_has_one() {
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "default": "Ann"},
            "age": {"type": "integer", "default": 30},
            "note": {"type": "string"}
        }, "required": ["name"]});
        assert_eq!(defaults(&schema), Some(json!({"name": "Ann", "age": 30})));
        let needs_note = json!({"type": "object", "properties": {
            "name": {"type": "string", "default": "Ann"}, "note": {"type": "string"}
        }, "required": ["name", "note"]});
        assert_eq!(defaults(&needs_note), None, "a required field without a default: declined");
        let wrong = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "default": 1}}});
        assert_eq!(defaults(&wrong), None, "a default that breaks the schema is never sent");
        assert_eq!(defaults(&json!({"type": "object"})), Some(json!({})));
    }
}
