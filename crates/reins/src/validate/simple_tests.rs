//! The specialised validator against the jsonschema path: generated schemas of the subset, generated values
//! (many valid, many not), the same verdict and, through [`ArgsValidator::check`], the same errors.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};

use super::arguments::{ArgsValidator, compare_with_jsonschema};
use super::simple::{Simple, same_name};

/// Property names: short ones, and names of 4-7, 8-16 and more than 16 bytes (the lengths the specialised
/// validator compares differently), in pairs that differ in one byte.
const NAMES: &[&str] = &[
    "a",
    "b",
    "c",
    "d",
    "e/f",
    "g~h",
    "name",
    "nbme",
    "a_longer_name",
    "a_longer_nbme",
    "a_very_much_longer_name",
    "a_very_much_longer_nbme",
];

fn object_of(fields: Vec<(&str, Option<Value>)>) -> Value {
    Value::Object(fields.into_iter().filter_map(|(k, v)| v.map(|v| (k.to_owned(), v))).collect())
}

fn size() -> impl Strategy<Value = Option<Value>> {
    prop::option::weighted(0.2, (0u64..4).prop_map(Value::from))
}

fn bound() -> impl Strategy<Value = Option<Value>> {
    prop::option::weighted(0.3, prop_oneof![(-3i64..4).prop_map(Value::from), Just(json!(1.5)), Just(json!(-0.5))])
}

fn annotation() -> impl Strategy<Value = Option<Value>> {
    prop::option::weighted(0.2, Just(json!("a description")))
}

fn format() -> impl Strategy<Value = Option<Value>> {
    prop::option::weighted(
        0.2,
        prop::sample::select(vec!["email", "date-time", "uint32", "ipv4"]).prop_map(Value::from),
    )
}

fn type_name() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec!["null", "boolean", "integer", "number", "string", "array", "object"])
            .prop_map(Value::from),
        Just(json!(["string", "null"])),
        Just(json!(["integer", "null"])),
        Just(json!(["number", "boolean"])),
        Just(json!(["array", "object"])),
    ]
}

fn scalar_schema() -> impl Strategy<Value = Value> {
    let enumerated =
        prop::sample::subsequence(vec![json!("a"), json!("bb"), json!(true), json!(null), json!("é")], 1..4);
    prop_oneof![
        Just(json!({})),
        Just(json!(true)),
        Just(json!(false)),
        (type_name(), annotation(), format()).prop_map(|(t, d, f)| object_of(vec![
            ("type", Some(t)),
            ("description", d),
            ("format", f)
        ])),
        (size(), size(), format()).prop_map(|(min, max, f)| object_of(vec![
            ("type", Some(json!("string"))),
            ("minLength", min),
            ("maxLength", max),
            ("format", f)
        ])),
        (prop_oneof![Just("integer"), Just("number")], bound(), bound(), bound(), bound()).prop_map(
            |(t, min, max, emin, emax)| object_of(vec![
                ("type", Some(json!(t))),
                ("minimum", min),
                ("maximum", max),
                ("exclusiveMinimum", emin),
                ("exclusiveMaximum", emax),
            ])
        ),
        (enumerated, prop::option::of(type_name()))
            .prop_map(|(values, t)| object_of(vec![("enum", Some(Value::Array(values))), ("type", t)])),
        prop_oneof![Just(json!("a")), Just(json!(false)), Just(json!(null))].prop_map(|c| json!({"const": c})),
    ]
}

fn object_schema(inner: BoxedStrategy<Value>) -> impl Strategy<Value = Value> {
    let properties = prop::collection::btree_map(prop::sample::select(NAMES.to_vec()), inner.clone(), 0..5);
    let required = prop::sample::subsequence(vec!["a", "b", "c", "z"], 0..4);
    let additional =
        prop::option::of(prop_oneof![Just(json!(false)), Just(json!(true)), inner.prop_map(|s| s).boxed()]);
    (prop::option::weighted(0.7, Just(json!("object"))), properties, required, additional, size(), size()).prop_map(
        |(t, props, required, additional, min, max)| {
            let props: Map<String, Value> = props.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            object_of(vec![
                ("type", t),
                ("properties", Some(Value::Object(props))),
                ("required", (!required.is_empty()).then(|| json!(required))),
                ("additionalProperties", additional),
                ("minProperties", min),
                ("maxProperties", max),
            ])
        },
    )
}

fn array_schema(inner: BoxedStrategy<Value>) -> impl Strategy<Value = Value> {
    (prop::option::weighted(0.7, Just(json!("array"))), prop::option::of(inner), size(), size(), any::<bool>())
        .prop_map(|(t, items, min, max, unique)| {
            object_of(vec![
                ("type", t),
                ("items", items),
                ("minItems", min),
                ("maxItems", max),
                ("uniqueItems", (!unique).then_some(json!(false))),
            ])
        })
}

/// A schema of the subset.
fn schema() -> impl Strategy<Value = Value> {
    scalar_schema().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![object_schema(inner.clone().boxed()), array_schema(inner.boxed())]
    })
}

/// An argument schema: an object schema at the root, sometimes naming draft 2020-12.
fn root_schema() -> impl Strategy<Value = Value> {
    (object_schema(schema().boxed()), any::<bool>()).prop_map(|(mut s, named)| {
        if named && let Value::Object(m) = &mut s {
            m.insert("$schema".into(), json!("https://json-schema.org/draft/2020-12/schema"));
        }
        s
    })
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-4i64..5).prop_map(Value::from),
        prop::sample::select(vec![
            json!(1.0),
            json!(-0.0),
            json!(1.5),
            json!(-0.5),
            json!(9_007_199_254_740_992u64),
            json!(9_007_199_254_740_993u64),
            json!(-9_007_199_254_740_993i64),
            json!(1e20),
            json!(u64::MAX),
        ]),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        prop_oneof!["[ab]{0,3}", "[aé日😀]{0,5}", Just("a".to_owned()), Just("bb".to_owned())].prop_map(Value::from),
    ]
}

/// Any value, with keys the schemas name.
fn any_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 20, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(prop::sample::select(NAMES.to_vec()), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

/// A value shaped by `schema`: mostly of its type, with its properties, now and then anything.
fn value_for(schema: &Value) -> BoxedStrategy<Value> {
    let Value::Object(map) = schema else { return any_value().boxed() };
    let shaped = match map.get("type").and_then(|t| t.as_str().or_else(|| t.get(0).and_then(Value::as_str))) {
        Some("object") | None if map.contains_key("properties") => object_for(map),
        Some("array") | None if map.contains_key("items") => {
            let items = map.get("items").map_or_else(|| any_value().boxed(), value_for);
            prop::collection::vec(items, 0..4).prop_map(Value::Array).boxed()
        }
        _ if map.contains_key("enum") || map.contains_key("const") => {
            let values = map.get("enum").and_then(Value::as_array).cloned().unwrap_or_default();
            let values =
                if values.is_empty() { vec![map.get("const").cloned().unwrap_or(Value::Null)] } else { values };
            prop::sample::select(values).boxed()
        }
        Some("string") => prop_oneof!["[ab]{0,3}", "[aé日😀]{0,5}"].prop_map(Value::from).boxed(),
        Some("integer") => prop_oneof![4 => (-4i64..5).prop_map(Value::from), 1 => number()].boxed(),
        Some("number") => number().boxed(),
        Some("boolean") => any::<bool>().prop_map(Value::Bool).boxed(),
        Some("null") => Just(Value::Null).boxed(),
        _ => leaf().boxed(),
    };
    prop_oneof![12 => shaped, 1 => any_value()].boxed()
}

fn object_for(map: &Map<String, Value>) -> BoxedStrategy<Value> {
    let props: Vec<(String, BoxedStrategy<Option<Value>>)> = map
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, s)| (k.clone(), prop::option::weighted(0.9, value_for(s)).boxed())).collect())
        .unwrap_or_default();
    let (names, strategies): (Vec<String>, Vec<_>) = props.into_iter().unzip();
    // Required names the properties do not list are mostly given, with any value.
    let others: Vec<String> = map
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter().filter_map(Value::as_str).filter(|n| !names.iter().any(|k| k == n)).map(str::to_owned).collect()
        })
        .unwrap_or_default();
    let other_values = prop::collection::vec(prop::option::weighted(0.9, leaf()), others.len());
    (strategies, other_values, prop::option::weighted(0.1, any_value()))
        .prop_map(move |(values, other_values, extra)| {
            let mut m: Map<String, Value> =
                names.iter().zip(values).filter_map(|(k, v)| v.map(|v| (k.clone(), v))).collect();
            m.extend(others.iter().zip(other_values).filter_map(|(k, v)| v.map(|v| (k.clone(), v))));
            if let Some(extra) = extra {
                m.insert("x".into(), extra);
            }
            Value::Object(m)
        })
        .boxed()
}

fn schema_and_value() -> impl Strategy<Value = (Value, Value)> {
    root_schema().prop_flat_map(|s| {
        let v = value_for(&s);
        (Just(s), v)
    })
}

/// The jsonschema path alone, as the registry had it before the specialised validator.
fn jsonschema_only(schema: &Value) -> ArgsValidator {
    let validator = jsonschema::validator_for(schema).unwrap();
    ArgsValidator::without_specialised(validator, schema)
}

proptest! {
    #![proptest_config(Config { cases: 2000, ..Config::default() })]

    /// Every generated schema is in the subset; the verdict is jsonschema's, and so are the errors.
    #[test]
    fn the_specialised_validator_agrees_with_jsonschema((schema, value) in schema_and_value()) {
        prop_assume!(jsonschema::meta::is_valid(&schema));
        prop_assert!(Simple::compile(&schema).is_some(), "not in the subset: {schema}");
        let verdict = compare_with_jsonschema(&schema, &value);
        prop_assert!(matches!(verdict, Ok(Some(_))), "{verdict:?}");
        let both = ArgsValidator::new(jsonschema::validator_for(&schema).unwrap(), &schema);
        prop_assert!(both.is_specialised());
        prop_assert_eq!(both.check(&value), jsonschema_only(&schema).check(&value), "{} / {}", schema, value);
    }
}

/// The generators reach both verdicts often, at every depth: a property that only ever saw invalid values
/// (or valid ones) would prove little.
#[test]
fn generated_values_are_often_valid_and_often_not() {
    let mut runner = TestRunner::deterministic();
    let (mut valid, mut invalid) = (0, 0);
    for _ in 0..2000 {
        let (schema, value) = schema_and_value().new_tree(&mut runner).unwrap().current();
        match compare_with_jsonschema(&schema, &value) {
            Ok(Some(true)) => valid += 1,
            Ok(Some(false)) => invalid += 1,
            other => panic!("{schema} / {value}: {other:?}"),
        }
    }
    eprintln!("valid {valid}, invalid {invalid}");
    assert!(valid > 300 && invalid > 300, "valid {valid}, invalid {invalid}");
}

#[test]
fn schemas_outside_the_subset_are_left_to_jsonschema() {
    for schema in [
        json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "string"}}}),
        json!({"type": "object", "properties": {"a": {"pattern": "^a"}}}),
        json!({"type": "object", "properties": {"a": {"enum": [1, 2]}}}),
        json!({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}}),
        json!({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true}}}),
        json!({"type": "object", "properties": {"a": {"minimum": 1e300}}}),
        json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}),
        json!({"type": "object", "properties": {"a": {"$id": "x", "type": "string"}}}),
        json!({"type": "object", "patternProperties": {"^a": {"type": "string"}}}),
    ] {
        assert!(Simple::compile(&schema).is_none(), "{schema}");
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Args {
    /// A path.
    path: String,
    /// Lines to read.
    limit: Option<u32>,
    tags: Vec<String>,
    mode: Option<bool>,
}

/// A typed tool's schema (schemars: `$schema`, a title, `format`s, nullable types) and the benchmark's
/// nested rows are in the subset.
#[test]
fn common_schemas_are_specialised() {
    let typed = schemars::schema_for!(Args).to_value();
    let rows = json!({"type": "object", "required": ["rows"], "additionalProperties": false, "properties": {
        "rows": {"type": "array", "items": {"type": "object", "additionalProperties": false,
            "required": ["name", "count", "ok"],
            "properties": {"name": {"type": "string"}, "count": {"type": "integer"}, "ok": {"type": "boolean"}}}}}});
    for schema in [typed, rows] {
        let v = ArgsValidator::new(jsonschema::validator_for(&schema).unwrap(), &schema);
        assert!(v.is_specialised(), "{schema}");
    }
    let typed = schemars::schema_for!(Args).to_value();
    for (value, valid) in [
        (json!({"path": "a", "tags": []}), true),
        (json!({"path": "a", "tags": [], "limit": 3, "mode": null}), true),
        (json!({"path": "a", "tags": [], "limit": -1}), false),
        (json!({"path": "a", "tags": [], "limit": 9_007_199_254_740_993u64}), false),
        (json!({"path": "a"}), false),
        (json!({"path": "a", "tags": [1]}), false),
    ] {
        assert_eq!(compare_with_jsonschema(&typed, &value), Ok(Some(valid)), "{value}");
    }
}

/// Names are compared by their length and words, not byte by byte: names of every length up to 40, each
/// against itself, against every name that differs from it in one byte, and against its prefixes.
#[test]
fn names_are_the_same_exactly_when_their_bytes_are() {
    for len in 0..40usize {
        let name: String = (0..len).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        assert!(same_name(&name, &name.clone()), "{name}");
        for i in 0..len {
            let mut other = name.clone().into_bytes();
            other[i] = b'_';
            let other = String::from_utf8(other).unwrap();
            assert!(!same_name(&name, &other), "{name} / {other}");
            assert!(!same_name(&name, &name[..i]), "{name} / {}", &name[..i]);
        }
    }
}

/// Keys met out of the properties' order, optional properties left out and other keys between them are
/// all found by the general walk.
#[test]
fn keys_in_any_order_are_found() {
    let schema = json!({"type": "object", "additionalProperties": {"type": "integer"}, "required": ["b", "name"],
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "name": {"type": "boolean"},
            "a_very_much_longer_name": {"type": "null"}}});
    for (value, valid) in [
        (json!({"a": "x", "b": "y", "name": true, "a_very_much_longer_name": null}), true),
        (json!({"b": "y", "name": true}), true),
        (json!({"b": "y", "c": 1, "name": true}), true),
        (json!({"b": "y", "c": "1", "name": true}), false),
        (json!({"a": "x", "name": true, "c": 1, "d": 2}), false),
        (json!({"a": 1, "b": "y", "name": true, "a_very_much_longer_name": null}), false),
        (json!({"a": "x", "b": "y", "name": true, "a_very_much_longer_nbme": null}), false),
        (json!({"a": "x", "b": "y", "name": true, "a_very_much_longer_nbme": 3}), true),
    ] {
        assert_eq!(compare_with_jsonschema(&schema, &value), Ok(Some(valid)), "{value}");
    }
}
