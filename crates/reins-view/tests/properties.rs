//! Property tests: the JSON-in-HTML escaper, and the view of sessions whose entries hold anything.

mod fuzz_support;

use proptest::prelude::*;
use reins_view::escape::{escape_json_text, json_for_html};
use serde_json::Value;

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        // Strings made of the characters that matter, so that they meet often.
        proptest::collection::vec(
            prop_oneof![
                Just('<'),
                Just('>'),
                Just('&'),
                Just('/'),
                Just('\u{2028}'),
                Just('\u{2029}'),
                Just('"'),
                Just('\\'),
                Just('!'),
                Just('-'),
                Just('s'),
                Just('\u{0}'),
                any::<char>()
            ],
            0..40
        )
        .prop_map(|cs| Value::String(cs.into_iter().collect())),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Whatever the value: the output has no `<`, `>`, `&`, U+2028 or U+2029 (so nothing in it can close the
    /// script element, open a comment or a tag), and parses back to the same value.
    #[test]
    fn escaped_json_is_inert_in_html_and_round_trips(v in any_json()) {
        let out = json_for_html(&v).unwrap();
        for c in ['<', '>', '&', '\u{2028}', '\u{2029}'] {
            prop_assert!(!out.contains(c), "{c:?} in {out}");
        }
        let back: Value = serde_json::from_str(&out).unwrap();
        prop_assert_eq!(back, v);
    }

    /// Escaping JSON text twice changes nothing more (the escapes hold none of the characters).
    #[test]
    fn escaping_is_idempotent(v in any_json()) {
        let once = json_for_html(&v).unwrap();
        prop_assert_eq!(escape_json_text(&once), once.clone());
    }

    /// A session whose entries hold any JSON views without a panic, and its page carries the data escaped.
    #[test]
    fn any_entries_view_and_render(datas in proptest::collection::vec((0usize..5, any_json()), 0..12)) {
        let kinds = ["run_start", "message", "response", "event", "run_end"];
        let entries = datas
            .into_iter()
            .enumerate()
            .map(|(i, (k, data))| reins_store::Entry {
                seq: i as u64,
                run: 1 + (i as u64 % 2),
                kind: kinds[k].to_owned(),
                msg_index: (k == 1).then_some(i as u64),
                ts: "2026-01-01T00:00:00Z".into(),
                data,
            })
            .collect();
        let summary: reins_store::SessionSummary = serde_json::from_value(serde_json::json!({
            "id": "0000", "created_at": "x", "updated_at": "y", "model": null, "workspace": null,
            "status": "running", "runs": 1, "steps": 0, "tool_calls": 0, "input_tokens": 0, "output_tokens": 0,
            "calls_without_usage": 0, "cost_usd": null, "messages": 0
        })).unwrap();
        let session = reins_store::Session { summary, entries };
        let view = reins_view::build(&session);
        let html = reins_view::session_html(&view).unwrap();
        let start = html.find("data-page=\"session\">").unwrap() + "data-page=\"session\">".len();
        let end = start + html[start..].find("</script>").unwrap();
        let block = &html[start..end];
        prop_assert!(!block.contains('<'));
        let _: Value = serde_json::from_str(block).unwrap();
    }

    /// The `session_view` fuzz target's check on arbitrary bytes and on lines of JSON.
    #[test]
    fn the_fuzz_check_holds(bytes in proptest::collection::vec(any::<u8>(), 0..600),
                            lines in proptest::collection::vec((0u8..6, any_json()), 0..10)) {
        prop_assert_eq!(fuzz_support::check(&bytes), Ok(()));
        let mut text = String::from("/s/abc?token=1&x</script>\n");
        for (k, v) in lines {
            text.push(char::from(b'0' + k));
            text.push_str(&v.to_string());
            text.push('\n');
        }
        prop_assert_eq!(fuzz_support::check(text.as_bytes()), Ok(()));
    }
}
