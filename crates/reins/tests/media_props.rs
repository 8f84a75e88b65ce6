//! Property tests of the output-schema loader (and the image sniffer): the fuzz targets' checks on stable.

mod media_support;

use media_support::{check_output_schema, check_output_schema_bytes};
use proptest::prelude::*;
use reins::OutputSchema;
use serde_json::{Value, json};

const TYPES: &[&str] = &["object", "string", "integer", "number", "boolean", "array", "null", "bogus"];
const KEYS: &[&str] =
    &["type", "properties", "required", "items", "enum", "minimum", "additionalProperties", "anyOf", "$ref"];

fn schema_like() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        prop::sample::select(TYPES).prop_map(|t| json!({ "type": t })),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,6}".prop_map(Value::from),
        Just(Value::Null),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec((prop::sample::select(KEYS), inner.clone()), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
            (prop::sample::select(TYPES), prop::collection::vec(("[a-c]", inner.clone()), 0..4)).prop_map(|(t, props)| {
                let names: Vec<Value> = props.iter().map(|(k, _)| Value::from(k.clone())).collect();
                json!({"type": t, "properties": props.into_iter().collect::<serde_json::Map<_, _>>(), "required": names})
            }),
            prop::collection::vec(inner, 0..3).prop_map(Value::Array),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_the_schema_loader(data in prop::collection::vec(any::<u8>(), 0..256)) {
        check_output_schema_bytes(&data);
    }

    #[test]
    fn schema_shaped_json_is_loaded_or_refused_never_a_panic(v in schema_like(), probe in "\\PC{0,16}") {
        if let Ok(s) = OutputSchema::new(v.clone()) {
            check_output_schema(&s, probe.as_bytes());
        }
        check_output_schema_bytes(v.to_string().as_bytes());
    }
}

#[test]
fn known_schemas_are_accepted_and_refused() {
    assert!(check_output_schema_bytes(br#"{"type": "object", "properties": {"a": {"type": "integer"}}}"#));
    assert!(check_output_schema_bytes(br#"{"type": "array", "items": {"type": "string"}}"#));
    assert!(check_output_schema_bytes(b"true"));
    assert!(check_output_schema_bytes(b"{}"));
    assert!(!check_output_schema_bytes(b"false"));
    assert!(!check_output_schema_bytes(b"[]"));
    assert!(!check_output_schema_bytes(br#"{"type": "nope"}"#));
    assert!(!check_output_schema_bytes(&[0xff, 0xfe]));
}
