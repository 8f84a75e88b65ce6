//! Property tests of the output-schema loader (and the image sniffer): the fuzz targets' checks on stable.

mod media_support;

use media_support::{check_image_bytes, check_output_schema, check_output_schema_bytes};
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

/// Headers of each format with random dimensions and random tails (cut anywhere).
fn image_like() -> impl Strategy<Value = Vec<u8>> {
    let w = 0u32..5000;
    let h = 0u32..5000;
    (0u8..6, w, h, prop::collection::vec(any::<u8>(), 0..24), 0usize..64).prop_map(|(kind, w, h, tail, cut)| {
        let mut b: Vec<u8> = match kind {
            0 => {
                let mut b = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
                b.extend(w.to_be_bytes());
                b.extend(h.to_be_bytes());
                b
            }
            1 => {
                let mut b = b"GIF89a".to_vec();
                b.extend((w as u16).to_le_bytes());
                b.extend((h as u16).to_le_bytes());
                b
            }
            2 => {
                let mut b = vec![0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 0, 0, 0xff, 0xc0, 0x00, 0x11, 8];
                b.extend((h as u16).to_be_bytes());
                b.extend((w as u16).to_be_bytes());
                b
            }
            3 => {
                let mut b = b"RIFF\x00\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00\x00\x00\x00\x00".to_vec();
                b.extend(&w.saturating_sub(1).to_le_bytes()[..3]);
                b.extend(&h.saturating_sub(1).to_le_bytes()[..3]);
                b
            }
            4 => {
                let mut b = b"RIFF\x00\x00\x00\x00WEBPVP8L\x00\x00\x00\x00\x2f".to_vec();
                let bits = (w.saturating_sub(1) & 0x3fff) | ((h.saturating_sub(1) & 0x3fff) << 14);
                b.extend(bits.to_le_bytes());
                b
            }
            _ => {
                let mut b = b"RIFF\x00\x00\x00\x00WEBPVP8 \x00\x00\x00\x00\x00\x00\x00\x9d\x01\x2a".to_vec();
                b.extend((w as u16).to_le_bytes());
                b.extend((h as u16).to_le_bytes());
                b
            }
        };
        b.extend(tail);
        if cut < b.len() && cut % 3 == 0 {
            b.truncate(cut);
        }
        b
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_the_image_sniffer(data in prop::collection::vec(any::<u8>(), 0..96)) {
        check_image_bytes(&data);
    }

    #[test]
    fn image_headers_give_their_dimensions_or_a_reason(data in image_like()) {
        check_image_bytes(&data);
    }

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

#[test]
fn each_format_reads_its_dimensions_from_the_header() {
    let png = reins::Image::from_base64(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==",
    )
    .unwrap();
    assert_eq!((png.media_type(), png.width(), png.height()), ("image/png", 1, 1));
    let cases: [(&[u8], &str, u32, u32); 5] = [
        (b"GIF87a\x40\x01\xf0\x00", "image/gif", 320, 240),
        (
            &[0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 0, 0, 0xff, 0xc2, 0x00, 0x11, 8, 0x01, 0xe0, 0x02, 0x80],
            "image/jpeg",
            640,
            480,
        ),
        (
            b"RIFF\x00\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00\x00\x00\x00\x00\xff\x03\x00\xff\x02\x00",
            "image/webp",
            1024,
            768,
        ),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 \x00\x00\x00\x00\x00\x00\x00\x9d\x01\x2a\x10\x00\x08\x00", "image/webp", 16, 8),
        (b"RIFF\x00\x00\x00\x00WEBPVP8L\x00\x00\x00\x00\x2f\x09\x40\x01\x00", "image/webp", 10, 6),
    ];
    for (bytes, mime, w, h) in cases {
        let i = reins::Image::from_bytes(bytes.to_vec()).unwrap_or_else(|e| panic!("{mime}: {e}"));
        assert_eq!((i.media_type(), i.width(), i.height()), (mime, w, h));
        assert!(check_image_bytes(bytes));
    }
    assert_eq!(
        reins::Image::from_bytes(b"GIF89a\x00\x00\x01\x00".to_vec()).unwrap_err().to_string(),
        "a malformed image/gif header: a zero width or height"
    );
    assert_eq!(reins::Image::from_bytes(b"%PDF-1.7".to_vec()), Err(reins::ImageError::UnknownFormat));
    let too_big = [b"GIF89a\x01\x00\x01\x00".as_slice(), &vec![0; reins::MAX_IMAGE_BYTES]].concat();
    assert!(matches!(reins::Image::from_bytes(too_big), Err(reins::ImageError::TooLarge { .. })));
}

#[test]
fn token_costs_follow_each_api() {
    use reins::ImageCost::{Anthropic, OpenAiTiles};
    // OpenAI: 2048×4096 → 1024×2048 → 768×1536: 2×3 tiles.
    assert_eq!(OpenAiTiles.tokens(2048, 4096), 85 + 170 * 6);
    assert_eq!(OpenAiTiles.tokens(512, 512), 85 + 170);
    assert_eq!(OpenAiTiles.tokens(1, 1), 85 + 170);
    // Anthropic: w*h/750, the long edge first brought to 1568, at most 1600.
    assert_eq!(Anthropic.tokens(750, 1), 1);
    assert_eq!(Anthropic.tokens(200, 200), 54);
    assert_eq!(Anthropic.tokens(4000, 4000), 1600);
}

#[test]
fn transcripts_without_images_read_as_before_and_images_round_trip() {
    let old = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "name": "t", "arguments": {}}]},
        {"role": "tool", "call_id": "1", "content": "r", "is_error": false},
        {"role": "assistant", "content": "done"}
    ]);
    let messages: Vec<reins::Message> = serde_json::from_value(old.clone()).unwrap();
    assert_eq!(serde_json::to_value(&messages).unwrap(), old, "no new key when there is no image");
    let gif = reins::Image::from_bytes(b"GIF89a\x02\x00\x03\x00".to_vec()).unwrap();
    let with = reins::Message::user_with_images("look", vec![gif.clone()]);
    let v = serde_json::to_value(&with).unwrap();
    assert_eq!(v["images"][0]["media_type"], "image/gif");
    assert_eq!(v["images"][0]["width"], 2);
    assert_eq!(v["images"][0]["sha256"], gif.sha256());
    assert_eq!(serde_json::from_value::<reins::Message>(v.clone()).unwrap(), with);
    let mut wrong = v.clone();
    wrong["images"][0]["sha256"] = json!("00");
    assert!(serde_json::from_value::<reins::Message>(wrong).unwrap_err().to_string().contains("does not match"));
    let mut wrong = v;
    wrong["images"][0]["data"] = json!("bm90IGFuIGltYWdl");
    assert!(serde_json::from_value::<reins::Message>(wrong).unwrap_err().to_string().contains("not a PNG"));
}

#[tokio::test]
async fn images_count_in_the_context_budget_at_the_api_cost() {
    use reins::{TokenCounter, context::WithImageCost};
    use std::sync::Arc;
    // 1000×1000: OpenAI 85 + 170×4 = 765 tokens; Anthropic 1334 tokens.
    let gif = reins::Image::from_bytes(b"GIF89a\xe8\x03\xe8\x03".to_vec()).unwrap();
    assert_eq!(reins::CharCounter.count_image(&gif), 765 * 4);
    let anthropic = WithImageCost::new(Arc::new(reins::CharCounter), reins::ImageCost::Anthropic);
    assert_eq!(anthropic.count_image(&gif), 1334 * 4);
    let m = reins::Message::user_with_images("abc", vec![gif.clone()]);
    assert_eq!(reins::transcript::measure(&m, &reins::CharCounter), 3 + 765 * 4);
    // A budget that holds the text but not the image refuses the run before any model call.
    let model = reins::ScriptedModel::new(vec![reins::ModelResponse::text("ok")]);
    let ctx = reins::ContextConfig { max_context: Some(1000), ..reins::ContextConfig::default() };
    let agent = reins::Agent::builder(model).context(ctx).build().unwrap();
    let o = agent.run_with_images("abc", vec![gif], tokio_util::sync::CancellationToken::new()).await;
    assert_eq!(o.status, reins::Status::ContextLimit, "{:?}", o.error);
}
