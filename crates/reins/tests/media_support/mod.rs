//! The checks of the `output_schema` and `image_header` fuzz targets, shared with the property tests in
//! `crates/reins/tests/media_props.rs` (so CI runs them on stable).
#![allow(dead_code)]

use reins::{FINAL_ANSWER_TOOL, OutputSchema, Registry};
use serde_json::Value;

/// Bytes → text → [`OutputSchema::parse`]: never a panic; a schema it accepts makes a final-answer tool the
/// registry accepts (an object schema as is, anything else under `value`), reads back the same from its own
/// JSON, and validates any value without a panic. Returns whether the schema was accepted.
pub fn check_output_schema_bytes(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let Ok(schema) = OutputSchema::parse(text) else { return false };
    check_output_schema(&schema, data);
    true
}

/// The invariants of an accepted schema; `probe` seeds a value to validate.
pub fn check_output_schema(schema: &OutputSchema, probe: &[u8]) {
    let spec = schema.tool_spec();
    assert_eq!(spec.name, FINAL_ANSWER_TOOL);
    assert_eq!(spec.input_schema["type"], "object", "the tool's arguments are an object: {}", spec.input_schema);
    assert_eq!(schema.is_wrapped(), schema.schema().get("type").and_then(Value::as_str) != Some("object"));
    if !schema.is_wrapped() {
        assert_eq!(&spec.input_schema, schema.schema());
    }
    let registry = Registry::empty()
        .with_output(schema)
        .unwrap_or_else(|e| panic!("an accepted output schema must make a valid tool: {e}: {}", schema.schema()));
    let again = OutputSchema::parse(&schema.schema().to_string()).expect("its own JSON reads back");
    assert_eq!(&again, schema);
    let value: Value = serde_json::from_slice(probe).unwrap_or_else(|_| Value::from(probe.len()));
    let args = if schema.is_wrapped() { serde_json::json!({ "value": value }) } else { value };
    if let Err(e) = registry.check(FINAL_ANSWER_TOOL, &args) {
        // An error names where: a JSON pointer or the root.
        assert!(!e.to_string().is_empty());
    }
}

/// Bytes → [`reins::image::dimensions`] and [`reins::Image::from_bytes`]: never a panic; what the sniffer
/// names agrees with the parser and the image; an accepted image has non-zero dimensions, its SHA-256 as 64
/// hex digits, a positive token cost under both APIs, and reads back from its JSON form. Returns whether it
/// was accepted.
pub fn check_image_bytes(data: &[u8]) -> bool {
    let sniffed = reins::ImageFormat::sniff(data);
    let dims = reins::image::dimensions(data);
    match (&dims, sniffed) {
        (Ok((f, w, h)), Some(s)) => {
            assert_eq!(*f, s);
            assert!(*w > 0 && *h > 0);
        }
        (Ok(_), None) => panic!("dimensions of bytes the sniffer did not recognize"),
        (Err(reins::ImageError::UnknownFormat), s) => assert_eq!(s, None),
        (Err(_), s) => assert!(s.is_some()),
    }
    let Ok(image) = reins::Image::from_bytes(data.to_vec()) else { return false };
    let (f, w, h) = dims.expect("an accepted image has dimensions");
    assert_eq!((image.format(), image.width(), image.height()), (f, w, h));
    assert_eq!(image.sha256().len(), 64);
    assert!(image.sha256().bytes().all(|b| b.is_ascii_hexdigit()));
    for cost in [reins::ImageCost::OpenAiTiles, reins::ImageCost::Anthropic] {
        let t = image.tokens(cost);
        assert!(t > 0 && t <= 85 + 170 * 16, "{cost:?} {w}x{h}: {t}");
    }
    let json = serde_json::to_value(&image).unwrap();
    let back: reins::Image = serde_json::from_value(json).unwrap();
    assert_eq!(back, image);
    true
}
