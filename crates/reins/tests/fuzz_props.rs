//! The fuzz targets' checks (`/fuzz`, cargo-fuzz on nightly) run as property tests on stable, so CI
//! exercises them: random bytes and random JSON never panic the response validator, the script parser
//! or the context selector, and what they accept holds the invariants.

mod fuzz_support;

use fuzz_support::{
    Reached, check_arguments_validator, check_arguments_validator_bytes, check_response_bytes, check_response_value,
    check_selection, check_selector_bytes,
};
use proptest::prelude::*;
use reins::{Message, ToolCall};
use serde_json::{Value, json};

/// Keys that responses, calls, usage and script turns use, so that random objects reach deep paths.
const KEYS: &[&str] = &[
    "content",
    "text",
    "tool_calls",
    "usage",
    "reasoning",
    "finish_reason",
    "id",
    "name",
    "arguments",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "reasoning_tokens",
    "error",
    "raw",
    "delay_ms",
    "x",
];

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop_oneof![Just(0u64), Just(1), Just(u64::MAX), Just(u64::MAX / 2 + 1)].prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop_oneof![Just(String::new()), "[a-z0-9]{1,4}", "\\PC{0,12}", Just("stop".to_owned())].prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

/// A response-shaped object whose fields are mostly well formed, each sometimes not.
fn response_like() -> impl Strategy<Value = Value> {
    let call = (
        prop_oneof![8 => "[a-z0-9]{1,3}".prop_map(Value::from), 1 => Just(json!("")), 1 => json_leaf()],
        prop_oneof![8 => Just(json!("echo")), 1 => Just(json!("")), 1 => json_leaf()],
        prop_oneof![8 => json_value().prop_map(Some), 1 => Just(None)],
    )
        .prop_map(|(id, name, args)| {
            let mut m = serde_json::Map::new();
            m.insert("id".into(), id);
            m.insert("name".into(), name);
            if let Some(a) = args {
                m.insert("arguments".into(), a);
            }
            Value::Object(m)
        });
    let count = prop_oneof![8 => (0u64..1_000_000).prop_map(Value::from), 1 => json_leaf()];
    (
        prop::option::of(prop_oneof![8 => "\\PC{0,8}".prop_map(Value::from), 1 => json_leaf()]),
        prop::option::of(prop_oneof![8 => prop::collection::vec(call, 0..4).prop_map(Value::Array), 1 => json_leaf()]),
        prop::option::of((count.clone(), count).prop_map(|(i, o)| json!({"input_tokens": i, "output_tokens": o}))),
    )
        .prop_map(|(content, calls, usage)| {
            let mut m = serde_json::Map::new();
            for (k, v) in [("content", content), ("tool_calls", calls), ("usage", usage)] {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            }
            Value::Object(m)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_the_response_validator(data in prop::collection::vec(any::<u8>(), 0..256)) {
        check_response_bytes(&data);
    }

    #[test]
    fn random_json_never_panics_the_response_validator(v in json_value()) {
        check_response_value(&v);
        check_response_bytes(v.to_string().as_bytes());
    }

    #[test]
    fn response_shaped_json_is_accepted_only_when_well_formed(v in response_like()) {
        check_response_value(&v);
        check_response_bytes(serde_json::json!([v]).to_string().as_bytes());
    }

    /// Sizes measured without writing the JSON out agree with the written text, escapes and all.
    #[test]
    fn json_is_measured_as_its_compact_text(v in json_value()) {
        use reins::TokenCounter;
        prop_assert_eq!(reins::CharCounter.count_json(&v), reins::CharCounter.count(&v.to_string()));
    }

    #[test]
    fn random_bytes_never_panic_the_context_selector(data in prop::collection::vec(any::<u8>(), 0..384)) {
        let _ = check_selector_bytes(&data);
    }

    /// Coherent transcripts of random groups: every budget gives a valid selection or a justified refusal.
    #[test]
    fn coherent_transcripts_select_whole_groups_within_budget(
        groups in prop::collection::vec((0usize..60, prop::collection::vec(0usize..120, 0..4)), 0..24),
        budget in prop::option::of(0u64..3000),
    ) {
        let mut messages = vec![Message::user("prompt")];
        for (g, (text, results)) in groups.iter().enumerate() {
            let calls: Vec<ToolCall> = (0..results.len())
                .map(|i| ToolCall::new(format!("{g}-{i}"), "echo", json!({"text": "é".repeat(i)})))
                .collect();
            messages.push(Message::assistant("a".repeat(*text), calls));
            for (i, len) in results.iter().enumerate() {
                messages.push(Message::tool_result(format!("{g}-{i}"), "😀".repeat(*len), false));
            }
        }
        let _ = check_selection(budget, messages);
    }
}

/// The byte decoder the fuzz target uses reaches every path: incoherent lists, whole and partial
/// selections, and refusals (a decoder that only made incoherent lists would test nothing).
#[test]
fn the_decoder_reaches_every_selection_path() {
    let mut seen = std::collections::HashMap::new();
    let mut state = 0x243F_6A88_85A3_08D3u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..4000 {
        let len = (next() % 96) as usize;
        let data: Vec<u8> = (0..len).map(|_| (next() >> 24) as u8).collect();
        *seen.entry(check_selector_bytes(&data)).or_insert(0usize) += 1;
    }
    for path in [Reached::Incoherent, Reached::SelectedAll, Reached::SelectedPart, Reached::Refused] {
        assert!(seen.get(&path).copied().unwrap_or(0) >= 20, "path {path:?} reached too rarely: {seen:?}");
    }
}

/// An orphan result and a budget below the first message are each refused, not selected.
#[test]
fn incoherent_lists_and_tiny_budgets_are_refused() {
    let orphan = vec![Message::user("p"), Message::tool_result("x", "r", false)];
    assert_eq!(check_selection(Some(100), orphan), Reached::Incoherent);
    assert_eq!(check_selection(Some(3), vec![Message::user("prompt")]), Reached::Refused);
    let two = vec![Message::user("p"), Message::assistant("aaaa", Vec::new()), Message::assistant("bb", Vec::new())];
    assert_eq!(check_selection(Some(4), two.clone()), Reached::SelectedPart);
    assert_eq!(check_selection(None, two), Reached::SelectedAll);
}

/// The response-shaped generator reaches both sides: accepted responses with calls, and refusals.
#[test]
fn response_shaped_values_are_both_accepted_and_refused() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut accepted_with_calls, mut refused) = (0, 0);
    for _ in 0..2000 {
        let Ok(tree) = response_like().new_tree(&mut runner) else { continue };
        match reins::parse_response(&tree.current()) {
            Ok(r) if !r.tool_calls.is_empty() => accepted_with_calls += 1,
            Ok(_) => {}
            Err(_) => refused += 1,
        }
    }
    eprintln!("accepted with calls {accepted_with_calls}, refused {refused}");
    assert!(accepted_with_calls >= 100, "only {accepted_with_calls} accepted responses with calls");
    assert!(refused >= 100, "only {refused} refused responses");
}

/// `into_outcome` moves the transcript out and gives the same outcome as the copying `outcome`, also
/// while a selected conversation still shares the messages.
#[test]
fn into_outcome_equals_outcome() {
    use reins::{Action, CallResult, ContextConfig, Limits, ModelResponse, Registry, RunState, Status};
    let ctx = ContextConfig::default();
    let registry = Registry::empty();
    let mut state = RunState::new("run", "prompt", Limits::default(), &ctx).unwrap();
    let call = ToolCall::new("1", "missing", json!({}));
    let Action::CallModel(first) = state.next_action(&registry, &ctx) else { panic!("a model call is due") };
    state.on_model_response(Ok(ModelResponse::tool_calls("", vec![call])), &registry, None, &ctx);
    let results = match state.next_action(&registry, &ctx) {
        Action::RunTools(batch) => batch.iter().map(|_| Some(CallResult::text("r", true))).collect(),
        other => panic!("a batch is due, not {other:?}"),
    };
    state.record_batch(results, "unfinished", None, &ctx);
    let Action::CallModel(second) = state.next_action(&registry, &ctx) else { panic!("a model call is due") };
    state.on_model_response(Ok(ModelResponse::text("done")), &registry, None, &ctx);
    let copied = state.outcome();
    assert_eq!(copied.status, Status::Completed);
    assert_eq!(copied.messages.len(), 4);
    // `second` still shares three of the messages; the fourth is moved.
    let moved = state.into_outcome();
    assert_eq!(format!("{moved:?}"), format!("{copied:?}"));
    assert_eq!(second.messages.len(), 3);
    assert_eq!(first.messages.len(), 1);
}

/// Lookups find every tool and refuse unknown names, for a few tools (scanned) and many (hashed).
#[test]
fn registry_lookup_by_name_with_few_and_many_tools() {
    use reins::{FnTool, Registry, ToolOutput};
    for n in [1usize, 8, 9, 40] {
        let mut b = Registry::builder();
        for i in 0..n {
            let schema = json!({"type": "object", "properties": {"i": {"const": i}}, "required": ["i"]});
            b = b.tool(FnTool::new(&format!("t{i}"), "", schema, |_a, _c| async { Ok(ToolOutput::from("")) }));
        }
        let registry = b.build().unwrap();
        for i in 0..n {
            let name = format!("t{i}");
            assert_eq!(registry.get(&name).map(|t| t.spec().name.clone()), Some(name.clone()));
            assert!(registry.check(&name, &json!({"i": i})).is_ok(), "{name} with its own schema");
            assert!(registry.check(&name, &json!({"i": i + 1})).is_err(), "{name} checked against another schema");
        }
        assert!(registry.get("t").is_none() && registry.get(&format!("t{n}")).is_none());
        assert!(registry.check(&format!("t{n}"), &json!({})).is_err());
    }
}

/// `value` as JSON text with `key` written twice in one object (`prefix` sets where: at the top of a turn or
/// nested in `raw` or in a call's arguments).
fn with_duplicate(value: &Value, key: &str, prefix: usize) -> String {
    let k = serde_json::to_string(key).unwrap();
    let v = value.to_string();
    match prefix % 3 {
        0 => format!(r#"[{{{k}: {v}, "delay_ms": 1, {k}: {v}}}]"#),
        1 => format!(r#"[{{"raw": {{"a": [{{{k}: 1, {k}: {v}}}]}}}}]"#),
        _ => format!(
            r#"[{{"tool_calls": [{{"id": "1", "name": "echo", "arguments": {{{k}: {v}, "x": 0, {k}: null}}}}]}}]"#
        ),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A key written twice in one object, at any depth, is refused by name; JSON written from a value (which
    /// cannot repeat a key) parses exactly as serde_json reads it.
    #[test]
    fn scripts_refuse_duplicate_keys_at_any_depth(
        v in json_value(),
        key in prop_oneof![prop::sample::select(KEYS).prop_map(str::to_owned), "\\PC{0,6}"],
        at in 0usize..3,
    ) {
        let text = with_duplicate(&v, &key, at);
        let err = reins::parse_script(&text).unwrap_err().to_string();
        let named = format!("duplicate key {key:?}");
        prop_assert!(err.contains(&named), "{err}");
        let clean = serde_json::json!([{ "raw": v.clone() }, v]).to_string();
        match reins::parse_script(&clean) {
            Ok(steps) => prop_assert_eq!(steps.len(), 2),
            Err(e) => prop_assert!(!e.to_string().contains("duplicate key"), "{e}"),
        }
    }
}

/// Schema keywords, type names and property names, so that random JSON is now and then a schema of the
/// specialised validator's subset and arguments reach its properties.
const SCHEMA_WORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minLength",
    "maxLength",
    "minimum",
    "exclusiveMaximum",
    "minItems",
    "maxProperties",
    "string",
    "integer",
    "number",
    "object",
    "array",
    "null",
    "a",
    "b",
];

fn schema_like() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        3 => prop::sample::select(SCHEMA_WORDS).prop_map(Value::from),
        1 => json_leaf(),
        1 => prop::collection::vec(prop::sample::select(SCHEMA_WORDS).prop_map(Value::from), 0..3).prop_map(Value::Array),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(SCHEMA_WORDS), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Random schemas and arguments: wherever the specialised validator takes the schema, its verdict is
    /// jsonschema's (the structured property test is in `reins::validate`'s unit tests).
    #[test]
    fn random_schemas_never_split_the_argument_validators(schema in schema_like(), args in schema_like()) {
        check_arguments_validator(&schema, &args);
        check_arguments_validator_bytes(format!("{schema}\n{args}").as_bytes());
    }
}
