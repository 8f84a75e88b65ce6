//! Tool-call arguments against their tool's schema: the jsonschema path, which words every error, and in
//! front of it the specialised validator of `super::simple` for the schemas it covers, which answers only
//! whether a call is valid. An invalid call is always worded by the jsonschema path, so the errors a model
//! sees are the same whichever validator said no.

use serde_json::Value;

use super::simple::Simple;
use crate::registry::pointer_or_root;

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

/// A tool's compiled argument schema: jsonschema's validator, and the specialised one when the schema is
/// in its subset (see `super::simple`). Compiled once, when the registry is built.
pub(crate) struct ArgsValidator {
    schema: jsonschema::Validator,
    /// False when no value the schema accepts can hold a number (then a valid call needs no number scan).
    numbers: bool,
    simple: Option<Simple>,
}

impl ArgsValidator {
    /// Wraps `validator`, compiled by jsonschema from `schema`, with the specialised validator of `schema`.
    pub(crate) fn new(validator: jsonschema::Validator, schema: &Value) -> ArgsValidator {
        ArgsValidator { numbers: admits_numbers(schema), simple: Simple::compile(schema), schema: validator }
    }

    /// The jsonschema path alone, as the registry had it before the specialised validator.
    #[cfg(test)]
    pub(crate) fn without_specialised(validator: jsonschema::Validator, schema: &Value) -> ArgsValidator {
        ArgsValidator { numbers: admits_numbers(schema), simple: None, schema: validator }
    }

    /// Whether the specialised validator covers this schema.
    #[cfg(test)]
    pub(crate) fn is_specialised(&self) -> bool {
        self.simple.is_some()
    }

    /// Checks arguments: `Ok` or the errors to report, each worded by jsonschema. The specialised validator
    /// answers the common valid call; every call it does not pass is checked again on the jsonschema path,
    /// which gives the verdict and the errors.
    #[inline]
    pub(crate) fn check(&self, args: &Value) -> Result<(), Vec<ArgumentError>> {
        if self.simple.as_ref().is_some_and(|s| s.is_valid(args)) {
            return Ok(());
        }
        validate_arguments(&self.schema, self.numbers, args)
    }
}

/// Compares the specialised validator with the jsonschema path on one schema and value (for property
/// tests and the `arguments_validator` fuzz target). `Ok(None)` when jsonschema does not compile the
/// schema or it is outside the subset, `Ok(Some(valid))` when both agree, and `Err` naming the
/// disagreement otherwise.
#[doc(hidden)]
pub fn compare_with_jsonschema(schema: &Value, args: &Value) -> Result<Option<bool>, String> {
    let Ok(validator) = jsonschema::validator_for(schema) else { return Ok(None) };
    let Some(simple) = Simple::compile(schema) else { return Ok(None) };
    let fast = simple.is_valid(args);
    let slow = validate_arguments(&validator, admits_numbers(schema), args);
    if fast == slow.is_ok() {
        Ok(Some(fast))
    } else {
        Err(format!("schema {schema}, arguments {args}: specialised says {fast}, jsonschema says {slow:?}"))
    }
}

/// Validates arguments with a compiled schema. Integers beyond ±2^53 are refused first, wherever they
/// are: they are neither "integer" nor "number" here, since no JSON peer holds them exactly.
/// `numbers` is false when no value the schema accepts can hold a number ([`admits_numbers`]): then a valid
/// call holds no number at all and the number scan is skipped.
fn validate_arguments(
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
fn admits_numbers(schema: &Value) -> bool {
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
#[inline]
pub(super) fn is_unsafe(n: &serde_json::Number) -> bool {
    if let Some(u) = n.as_u64() {
        u > MAX_SAFE_INTEGER
    } else if let Some(i) = n.as_i64() {
        i.unsigned_abs() > MAX_SAFE_INTEGER
    } else {
        n.as_f64().is_some_and(|f| !f.is_finite() || (f.fract() == 0.0 && f.abs() > MAX_SAFE_INTEGER as f64))
    }
}

/// True when some number in `v` is unsafe: the common, allocation-free check before paths are built.
pub(super) fn has_unsafe_number(v: &Value) -> bool {
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
