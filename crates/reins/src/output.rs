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
        let wrapped = schema.get("type").and_then(Value::as_str) != Some("object");
        let input_schema = if wrapped {
            // References into the schema's own definitions (`#/$defs/X`, as `schemars` writes them) must
            // still resolve from the wrapper's root: the definitions move up with the same names.
            let mut inner = schema.clone();
            let mut wrapper =
                serde_json::json!({"type": "object", "required": [WRAPPED_KEY], "additionalProperties": false});
            if let (Value::Object(inner), Value::Object(outer)) = (&mut inner, &mut wrapper) {
                for key in ["$defs", "definitions"] {
                    if let Some(defs) = inner.remove(key) {
                        outer.insert(key.to_owned(), defs);
                    }
                }
            }
            wrapper["properties"] = serde_json::json!({ WRAPPED_KEY: inner });
            wrapper
        } else {
            schema.clone()
        };
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
