//! Structured output: a JSON Schema that binds only the final answer of a run.
//!
//! The model is offered one more tool, [`FINAL_ANSWER_TOOL`], whose arguments are the output (the schema
//! itself when its top-level `type` is `"object"`, else `{"value": <the schema>}`). Every other tool stays
//! available on every turn: the schema never constrains a turn that calls tools. A `final_answer` call that
//! fails the schema is answered with an error listing each failure by JSON pointer (the registry's own
//! validation), and the model tries again within the step budget. A plain-text answer whose text is JSON
//! valid under the schema (an API's native JSON mode) is accepted as the output; any other plain-text answer
//! is answered once with a reminder to call the tool, and a second one ends the run `completed` without
//! output (`output: null`, `output_valid: false`).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

/// The name of the tool a model gives its final answer through when an output schema is set.
pub const FINAL_ANSWER_TOOL: &str = "final_answer";

/// The largest output schema [`OutputSchema::parse`] reads: 1 MiB of JSON text.
pub const MAX_OUTPUT_SCHEMA_BYTES: usize = 1 << 20;

/// The key that holds the output when the schema is not an object schema.
pub const WRAPPED_KEY: &str = "value";

/// Why an output schema was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid output schema: {0}")]
pub struct OutputSchemaError(pub String);

/// A checked and compiled output schema, with the final-answer tool made from it. Cloning is cheap.
///
/// ```
/// let s = reins::OutputSchema::new(serde_json::json!({"type": "integer"})).unwrap();
/// assert!(s.is_wrapped());
/// assert_eq!(s.tool_spec().name, "final_answer");
/// assert!(reins::OutputSchema::new(serde_json::json!({"type": 3})).is_err());
/// ```
#[derive(Clone)]
pub struct OutputSchema {
    schema: Arc<Value>,
    tool: Arc<FinalAnswer>,
    wrapped: bool,
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema").field("schema", &self.schema).field("wrapped", &self.wrapped).finish()
    }
}

impl PartialEq for OutputSchema {
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema
    }
}

impl OutputSchema {
    /// Checks `schema` against the JSON Schema meta-schema and makes the final-answer tool from it.
    pub fn new(schema: Value) -> Result<Self, OutputSchemaError> {
        match &schema {
            Value::Object(_) | Value::Bool(true) => {}
            Value::Bool(false) => return Err(OutputSchemaError("the schema `false` admits no answer".into())),
            other => {
                return Err(OutputSchemaError(format!("a schema is a JSON object or a boolean, not {}", kind(other))));
            }
        }
        jsonschema::meta::validate(&schema).map_err(|e| {
            OutputSchemaError(format!("{} (at {})", e, crate::registry::pointer_or_root(e.instance_path().as_str())))
        })?;
        jsonschema::validator_for(&schema).map_err(|e| OutputSchemaError(e.to_string()))?;
        if never_satisfied(&schema) {
            return Err(OutputSchemaError("the schema admits no answer: no value can ever match it".into()));
        }
        let wrapped = schema.get("type").and_then(Value::as_str) != Some("object");
        let input_schema = if wrapped { wrap(&schema) } else { schema.clone() };
        let spec = ToolSpec {
            name: FINAL_ANSWER_TOOL.to_owned(),
            description: format!(
                "Give your final answer with this tool, once you are done with the other tools. Its arguments are the answer{}: they must match this schema, and any failure is reported back to you.",
                if wrapped { format!(", under the key \"{WRAPPED_KEY}\"") } else { String::new() }
            ),
            input_schema,
        };
        Ok(Self { schema: Arc::new(schema), tool: Arc::new(FinalAnswer { spec }), wrapped })
    }

    /// Parses a schema from JSON text (at most [`MAX_OUTPUT_SCHEMA_BYTES`]) and checks it as [`OutputSchema::new`].
    pub fn parse(text: &str) -> Result<Self, OutputSchemaError> {
        if text.len() > MAX_OUTPUT_SCHEMA_BYTES {
            return Err(OutputSchemaError(format!(
                "{} bytes is more than the {} bytes an output schema may hold",
                text.len(),
                MAX_OUTPUT_SCHEMA_BYTES
            )));
        }
        let value: Value = serde_json::from_str(text).map_err(|e| OutputSchemaError(format!("not valid JSON: {e}")))?;
        Self::new(value)
    }

    /// The schema of a Rust type (`schemars`).
    pub fn of<T: schemars::JsonSchema>() -> Result<Self, OutputSchemaError> {
        Self::new(schemars::schema_for!(T).to_value())
    }

    /// The schema as given.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// True when the output is carried under [`WRAPPED_KEY`] (a schema whose top-level type is not `"object"`).
    pub fn is_wrapped(&self) -> bool {
        self.wrapped
    }

    /// The spec of the final-answer tool.
    pub fn tool_spec(&self) -> &ToolSpec {
        &self.tool.spec
    }

    /// The final-answer tool, to be added to a run's registry.
    pub fn tool(&self) -> Arc<dyn Tool> {
        self.tool.clone()
    }
}

/// The schema of the final-answer tool's arguments when the output is not an object: `{"value": schema}`.
/// The schema's definitions (`$defs`, `definitions`), its `$schema` and its `$id` move up to the wrapper, so
/// references into the definitions (`#/$defs/X`, as `schemars` writes them) resolve from the wrapper's root
/// as they did from the schema's; every other reference relative to the schema's root (`#`, `#/items`, the
/// same with the schema's own `$id` in front) is rewritten to point beneath `#/properties/value`. References
/// inside a subschema with its own `$id` are relative to that subschema and stay as they are.
fn wrap(schema: &Value) -> Value {
    let mut inner = schema.clone();
    let mut wrapper = serde_json::json!({"type": "object", "required": [WRAPPED_KEY], "additionalProperties": false});
    if let (Value::Object(inner), Value::Object(outer)) = (&mut inner, &mut wrapper) {
        for key in ["$schema", "$id", "$defs", "definitions"] {
            if let Some(v) = inner.remove(key) {
                outer.insert(key.to_owned(), v);
            }
        }
    }
    let id = wrapper.get("$id").and_then(Value::as_str).map(|s| s.trim_end_matches('#').to_owned());
    let rewrite = |r: &str| -> Option<String> {
        let fragment = match r.strip_prefix('#') {
            Some(f) => f,
            None => match r.strip_prefix(id.as_deref().filter(|i| !i.is_empty())?)? {
                "" => "",
                rest => rest.strip_prefix('#')?,
            },
        };
        if fragment.is_empty() {
            return Some(format!("#/properties/{WRAPPED_KEY}"));
        }
        // A pointer into the definitions that moved up, or a named anchor: unchanged.
        let rest = fragment.strip_prefix('/')?;
        let first = rest.split('/').next().unwrap_or_default();
        if first == "$defs" || first == "definitions" {
            return Some(format!("#{fragment}"));
        }
        Some(format!("#/properties/{WRAPPED_KEY}{fragment}"))
    };
    rewrite_refs(&mut inner, &rewrite, true);
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = wrapper.get_mut(key) {
            for d in defs.values_mut() {
                rewrite_refs(d, &rewrite, false);
            }
        }
    }
    wrapper["properties"] = serde_json::json!({ WRAPPED_KEY: inner });
    wrapper
}

/// The keywords whose value is one subschema.
const ONE_SCHEMA: &[&str] = &[
    "additionalItems",
    "additionalProperties",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
    "items",
];
/// The keywords whose value is an array of subschemas.
const SCHEMA_ARRAYS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// The keywords whose value maps names to subschemas.
const SCHEMA_MAPS: &[&str] =
    &["properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"];

/// Rewrites the `$ref`s of `schema` and its subschemas (schema keywords only: a `$ref` inside `const`,
/// `enum`, `default` or `examples` is data) with `rewrite`, stopping at a subschema with its own `$id`
/// (`root`: `schema` is the root, whose `$id` has moved up).
fn rewrite_refs(schema: &mut Value, rewrite: &dyn Fn(&str) -> Option<String>, root: bool) {
    let Value::Object(map) = schema else { return };
    if !root && map.get("$id").is_some_and(Value::is_string) {
        return;
    }
    if let Some(new) = map.get("$ref").and_then(Value::as_str).and_then(rewrite) {
        map.insert("$ref".to_owned(), Value::String(new));
    }
    for (key, value) in map.iter_mut() {
        let key = key.as_str();
        match value {
            Value::Array(items) if SCHEMA_ARRAYS.contains(&key) => {
                items.iter_mut().for_each(|s| rewrite_refs(s, rewrite, false));
            }
            Value::Object(entries) if SCHEMA_MAPS.contains(&key) => {
                entries.values_mut().for_each(|s| rewrite_refs(s, rewrite, false));
            }
            Value::Object(_) if ONE_SCHEMA.contains(&key) => rewrite_refs(value, rewrite, false),
            _ => {}
        }
    }
}

/// Whether `schema` plainly admits no value at all: `false`, `{"not": {}}` (or `not` of a schema that
/// admits everything), an empty `enum` or `type` list, a `const` or every `enum` value outside the `type`,
/// an `allOf` with such a member, an `anyOf`/`oneOf` all of whose members are such, or a required property
/// whose schema is such. A conservative check: a schema it passes may still admit nothing in subtler ways.
fn never_satisfied(schema: &Value) -> bool {
    never_at(schema, 0)
}

fn never_at(schema: &Value, depth: usize) -> bool {
    // Deep nesting is checked no further (the answer is then "maybe satisfiable").
    if depth > 64 {
        return false;
    }
    let map = match schema {
        Value::Bool(b) => return !b,
        Value::Object(m) => m,
        _ => return false,
    };
    let never = |s: &Value| never_at(s, depth + 1);
    if map.get("not").is_some_and(always_at) {
        return true;
    }
    if let Some(Value::Array(all)) = map.get("allOf") {
        if all.iter().any(never) {
            return true;
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(some)) = map.get(key) {
            if some.iter().all(never) {
                return true;
            }
        }
    }
    let types: Option<Vec<&str>> = match map.get("type") {
        Some(Value::String(t)) => Some(vec![t.as_str()]),
        Some(Value::Array(ts)) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    };
    let typed = |v: &Value| types.as_ref().is_none_or(|ts| ts.iter().any(|t| has_type(v, t)));
    if types.as_ref().is_some_and(Vec::is_empty) {
        return true;
    }
    if map.get("const").is_some_and(|c| !typed(c)) {
        return true;
    }
    if let Some(Value::Array(values)) = map.get("enum") {
        if !values.iter().any(typed) {
            return true;
        }
    }
    if let (Some(Value::Array(required)), Some(Value::Object(props))) = (map.get("required"), map.get("properties")) {
        if types.as_ref().is_none_or(|ts| ts.contains(&"object"))
            && required.iter().filter_map(Value::as_str).any(|r| props.get(r).is_some_and(never))
        {
            return true;
        }
    }
    false
}

/// Whether `schema` admits every value: `true`, or an object of no keyword that constrains (`{}`, only
/// annotations).
fn always_at(schema: &Value) -> bool {
    match schema {
        Value::Bool(b) => *b,
        Value::Object(m) => m.keys().all(|k| {
            matches!(
                k.as_str(),
                "title" | "description" | "$comment" | "examples" | "default" | "deprecated" | "readOnly" | "writeOnly"
            )
        }),
        _ => false,
    }
}

/// Whether `v` is of the JSON Schema type `t` (an integer is a number; a number with no fraction is an
/// integer).
fn has_type(v: &Value, t: &str) -> bool {
    match (t, v) {
        ("null", Value::Null) | ("boolean", Value::Bool(_)) | ("string", Value::String(_)) => true,
        ("array", Value::Array(_)) | ("object", Value::Object(_)) | ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => false,
    }
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

/// The final-answer tool. Its valid calls never run: the run state takes them as the answer.
struct FinalAnswer {
    spec: ToolSpec,
}

#[async_trait]
impl Tool for FinalAnswer {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _arguments: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::failed(format!("{FINAL_ANSWER_TOOL} must be called alone, after the other tools' results")))
    }
}

/// What the run state knows of the output schema: serializable, so a persisted run keeps it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct OutputState {
    /// The output is carried under [`WRAPPED_KEY`].
    #[serde(default)]
    pub wrapped: bool,
    /// The model was told once to answer through the tool.
    #[serde(default)]
    pub told: bool,
    /// The validated output, once there is one.
    #[serde(default)]
    pub value: Option<Value>,
}

/// The JSON a plain-text answer holds, if it is JSON: the whole text, or the body of one fenced code block.
pub(crate) fn json_in_text(text: &str) -> Option<Value> {
    let t = text.trim();
    if let Ok(v) = serde_json::from_str(t) {
        return Some(v);
    }
    let body = t.strip_prefix("```")?.strip_suffix("```")?;
    let body = body.strip_prefix("json").unwrap_or(body);
    serde_json::from_str(body.trim()).ok()
}

/// The reminder a plain-text answer gets once.
pub(crate) fn reminder(why: Option<&str>) -> String {
    let mut s = format!(
        "Your answer was plain text, but this run needs its final answer through the `{FINAL_ANSWER_TOOL}` tool, with arguments that match its schema."
    );
    if let Some(why) = why {
        s.push_str(" Your text did not match the schema: ");
        s.push_str(why);
    }
    s.push_str(" Call the tool now.");
    s
}
