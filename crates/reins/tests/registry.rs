//! The registry: names, duplicates and schemas refused at build time; full JSON Schema validation of
//! every call, with JSON-pointer paths.

mod common;

use std::sync::Arc;

use common::*;
use reins::{CallError, FnTool, Registry, RegistryError, Tool, ToolContext, ToolError, ToolOutput, TypedTool};
use serde_json::{Value, json};

fn tool(name: &str, schema: Value) -> FnTool {
    FnTool::new(name, "test", schema, |_a, _c| async move { Ok(ToolOutput::Text("ran".into())) })
}

fn one(schema: Value) -> Registry {
    Registry::builder().tool(tool("t", schema)).build().expect("valid schema")
}

fn pointers(r: &Registry, args: Value) -> Vec<String> {
    match r.check("t", &args) {
        Ok(_) => vec![],
        Err(CallError::InvalidArguments { errors, .. }) => errors.into_iter().map(|e| e.pointer).collect(),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn names_are_checked() {
    for good in ["a", "read_file", "A-1_b", &"x".repeat(64)] {
        assert!(Registry::builder().tool(tool(good, json!({"type": "object"}))).build().is_ok(), "{good}");
    }
    for bad in ["", "1abc", "_x", "-x", "has space", "dot.name", "ünï", &"x".repeat(65), "a/b"] {
        let e = Registry::builder().tool(tool(bad, json!({"type": "object"}))).build().unwrap_err();
        assert!(matches!(e, RegistryError::InvalidName { .. }), "{bad}: {e}");
    }
}

#[test]
fn duplicates_are_refused() {
    let e = Registry::builder()
        .tool(tool("a", json!({"type": "object"})))
        .tool(tool("a", json!({"type": "object"})))
        .build()
        .unwrap_err();
    assert_eq!(e, RegistryError::Duplicate { name: "a".into() });
}

#[test]
fn schemas_are_checked_against_the_meta_schema_at_registration() {
    for bad in [
        json!({"type": "objekt"}),
        json!({"type": "object", "properties": {"a": {"type": 5}}}),
        json!({"type": "object", "required": "a"}),
        json!({"type": "object", "properties": {"a": {"minimum": "3"}}}),
        json!({"type": "object", "properties": {"a": {"pattern": "(unclosed"}}}),
        json!({"type": "string"}),
        json!(false),
        json!(42),
        json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}),
    ] {
        let e = Registry::builder().tool(tool("t", bad.clone())).build().unwrap_err();
        assert!(matches!(e, RegistryError::InvalidSchema { .. }), "{bad}: {e}");
    }
}

#[test]
fn errors_name_the_json_pointer_of_each_offending_value() {
    let r = one(json!({
        "type": "object",
        "properties": {
            "flags": {"type": "array", "items": {"type": "string"}},
            "opts": {"type": "object", "properties": {"depth": {"type": "integer", "minimum": 0}}}
        }
    }));
    assert_eq!(pointers(&r, json!({"flags": [1, "ok", true]})), ["/flags/0", "/flags/2"]);
    assert_eq!(pointers(&r, json!({"opts": {"depth": -1}})), ["/opts/depth"]);
    let msg = r.check("t", &json!({"flags": [1]})).unwrap_err().to_string();
    assert!(msg.contains("/flags/0"), "{msg}");
}

#[test]
fn full_json_schema_is_enforced() {
    let r = one(json!({
        "type": "object",
        "$defs": {"pos": {"type": "integer", "exclusiveMinimum": 0}},
        "properties": {
            "union": {"type": ["string", "null"]},
            "extra": {"type": "object", "additionalProperties": {"type": "number"}},
            "closed": {"type": "object", "additionalProperties": false, "properties": {"a": {}}},
            "choice": {"enum": [{"k": 1}, [1, 2], "x", null]},
            "fixed": {"const": {"deep": [1, {"x": true}]}},
            "n": {"type": "number", "minimum": 1.5, "maximum": 3, "multipleOf": 0.5},
            "s": {"type": "string", "minLength": 2, "maxLength": 4, "pattern": "^[a-z]+$"},
            "any": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "one": {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 10}]},
            "all": {"allOf": [{"type": "integer"}, {"minimum": 5}]},
            "ref": {"$ref": "#/$defs/pos"},
            "items": {"type": "array", "items": {"type": "object", "required": ["id"]}, "maxItems": 2}
        },
        "required": ["union"]
    }));
    let ok = json!({
        "union": null, "extra": {"a": 1.5}, "closed": {"a": 1}, "choice": {"k": 1}, "fixed": {"deep": [1, {"x": true}]},
        "n": 2.5, "s": "abc", "any": 3, "one": 3, "all": 7, "ref": 1, "items": [{"id": 1}]
    });
    assert_eq!(pointers(&r, ok), Vec::<String>::new());
    let cases = [
        (json!({}), ""),
        (json!({"union": 1}), "/union"),
        (json!({"union": "a", "extra": {"a": "x"}}), "/extra/a"),
        (json!({"union": "a", "closed": {"b": 1}}), "/closed"),
        (json!({"union": "a", "choice": {"k": 2}}), "/choice"),
        (json!({"union": "a", "fixed": {"deep": [1, {"x": false}]}}), "/fixed"),
        (json!({"union": "a", "n": 1}), "/n"),
        (json!({"union": "a", "n": 2.2}), "/n"),
        (json!({"union": "a", "s": "ABC"}), "/s"),
        (json!({"union": "a", "s": "abcde"}), "/s"),
        (json!({"union": "a", "any": 1.5}), "/any"),
        (json!({"union": "a", "one": 12}), "/one"),
        (json!({"union": "a", "all": 3}), "/all"),
        (json!({"union": "a", "ref": 0}), "/ref"),
        (json!({"union": "a", "items": [{"id": 1}, {}]}), "/items/1"),
        (json!({"union": "a", "items": [{"id": 1}, {"id": 2}, {"id": 3}]}), "/items"),
    ];
    for (args, pointer) in cases {
        let p = pointers(&r, args.clone());
        assert_eq!(p, [pointer], "{args}");
    }
}

#[test]
fn integers_beyond_2_pow_53_are_neither_integer_nor_number() {
    let r = one(json!({"type": "object", "properties": {"i": {"type": "integer"}, "n": {"type": "number"}, "l": {}}}));
    assert!(pointers(&r, json!({"i": 9_007_199_254_740_992u64})).is_empty(), "2^53 itself is fine");
    assert_eq!(pointers(&r, json!({"i": 9_007_199_254_740_993u64})), ["/i"]);
    assert_eq!(pointers(&r, json!({"n": -9_007_199_254_740_993i64})), ["/n"]);
    assert_eq!(pointers(&r, json!({"l": [1, u64::MAX]})), ["/l/1"]);
    let big: Value = serde_json::from_str(r#"{"n": 1e300}"#).unwrap();
    assert_eq!(pointers(&r, big), ["/n"]);
    assert!(pointers(&r, json!({"n": 1.5e10})).is_empty());
}

#[test]
fn unknown_tools_list_what_is_available() {
    let r = one(json!({"type": "object"}));
    let e = r.check("nope", &json!({})).unwrap_err().to_string();
    assert!(e.contains("nope") && e.contains("available tools: t"), "{e}");
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct GrepArgs {
    /// The pattern.
    pattern: String,
    /// Flags.
    #[serde(default)]
    flags: Vec<String>,
    /// At most this many.
    max: Option<u32>,
}

struct Grep;

impl TypedTool for Grep {
    type Args = GrepArgs;
    const NAME: &'static str = "grep";
    const DESCRIPTION: &'static str = "Searches.";
    async fn run(&self, args: GrepArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::Text(format!("{} {:?} {:?}", args.pattern, args.flags, args.max)))
    }
}

#[tokio::test]
async fn typed_tools_derive_their_schema_and_get_deserialized_arguments() {
    let t = reins::typed(Grep);
    let schema = &t.spec().input_schema;
    assert_eq!(schema["properties"]["pattern"]["type"], "string");
    assert_eq!(schema["additionalProperties"], false);
    let r = Registry::builder().shared(Arc::new(t)).build().unwrap();
    assert!(r.check("grep", &json!({"pattern": "x", "flags": [1]})).is_err());
    assert!(r.check("grep", &json!({"pattern": "x", "other": 1})).is_err());
    assert!(r.check("grep", &json!({"flags": []})).is_err());
    let tool = r.check("grep", &json!({"pattern": "x", "flags": ["-i"], "max": 3})).unwrap();
    let ctx = ToolContext::new("1", Default::default());
    let out = tool.call(json!({"pattern": "x", "flags": ["-i"], "max": 3}), ctx).await.unwrap();
    assert_eq!(out.into_text(), "x [\"-i\"] Some(3)");
}

/// The driver hands a typed tool its arguments borrowed (`Tool::call_borrowed`, read in place, not copied): the
/// same output as `Tool::call` with them owned, and the same error for arguments its type refuses.
#[tokio::test]
async fn typed_tools_read_borrowed_arguments_like_owned_ones() {
    let t = reins::typed(Grep);
    let cases = [
        json!({"pattern": "x", "flags": ["-i", "-w"], "max": 3}),
        json!({"pattern": "y"}),
        json!({"pattern": "x", "flags": [1]}),
        json!({"flags": []}),
        json!({"pattern": "x", "other": 1}),
        json!({"pattern": "x", "max": -1}),
        json!([1, 2]),
        json!("pattern"),
    ];
    for args in cases {
        let owned = t.call(args.clone(), ToolContext::new("1", Default::default())).await;
        let borrowed = t.call_borrowed(&args, ToolContext::new("1", Default::default())).await;
        assert_eq!(borrowed, owned, "{args}");
    }
    let err = t.call_borrowed(&json!({"flags": []}), ToolContext::new("1", Default::default())).await;
    assert_eq!(err, Err(ToolError::InvalidArguments("missing field `pattern`".into())));
}

#[tokio::test]
async fn an_invalid_call_never_runs_its_tool() {
    let runs = Runs::default();
    let model = scripted(vec![
        calls(vec![call("1", "echo", json!({"text": "ok", "extra": 1})), call("2", "echo", json!([]))]),
        answer("done"),
    ]);
    let agent = agent_with(model, &runs, reins::Limits::default()).build().unwrap();
    let o = run(&agent).await;
    assert_eq!(runs.get(), 0);
    assert_eq!(o.status, reins::Status::Completed);
    assert_coherent(&o);
}
