//! Property tests of the definition parser (the `agent_definition` fuzz target's check on stable): any text
//! never panics, and what parses round-trips.

mod fuzz_support;

use proptest::prelude::*;
use proptest::strategy::ValueTree;

const KEYS: &[(&str, &str, &str)] = &[
    ("", "model", r#""openai:gpt-4.1-mini""#),
    ("", "instructions", r#""Be brief.""#),
    ("", "instructions_file", r#""p.md""#),
    ("", "test_tools", r#"true"#),
    ("", "trace_content", r#"true"#),
    ("provider", "base_url", r#""http://127.0.0.1:9/v1""#),
    ("provider", "max_response_tokens", r#"100"#),
    ("provider", "temperature", r#"0.5"#),
    ("provider", "tool_choice", r#""tool:echo""#),
    ("provider", "stream", r#"false"#),
    ("provider", "prompt_cache", r#"false"#),
    ("provider", "reasoning_effort", r#""low""#),
    ("provider", "thinking_budget", r#"2048"#),
    ("provider", "chat_max_tokens_field", r#""max_tokens""#),
    ("provider", "idle_timeout", r#""1m""#),
    ("provider", "max_retries", r#"0"#),
    ("provider", "requests_per_minute", r#"60"#),
    ("provider.headers", "X-A", r#""v""#),
    ("provider.extra_body", "seed", r#"7"#),
    ("limits", "max_steps", r#"3"#),
    ("limits", "max_tool_calls", r#"0"#),
    ("limits", "max_total_tokens", r#"10"#),
    ("limits", "timeout", r#""1h 30m""#),
    ("limits", "tool_timeout", r#""1.5s""#),
    ("context", "max_context_chars", r#"100"#),
    ("context", "max_context_tokens", r#"100"#),
    ("context", "max_tool_result_chars", r#"10"#),
    ("workspace", "path", r#""ws""#),
    ("workspace", "protected", r#"["**/*.pem"]"#),
    ("workspace", "max_read_bytes", r#"100"#),
    ("workspace", "agents_md", r#"false"#),
    ("commands", "timeout", r#""20s""#),
    ("commands", "output_cap", r#"100"#),
    ("commands", "sandbox", r#""off""#),
    ("commands", "env_allow", r#"["PATH"]"#),
    ("commands.limits", "cpu_seconds", r#"5"#),
    ("mcp.fs", "command", r#""node""#),
    ("mcp.fs", "args", r#"["a"]"#),
    ("mcp.fs", "cwd", r#""srv""#),
    ("mcp.fs", "env", r#"{ A = "1" }"#),
    ("mcp.web", "url", r#""http://h/mcp""#),
    ("mcp.web", "headers", r#"{ A = "b" }"#),
    ("mcp.web", "call_timeout", r#""9s""#),
    ("", "bogus", r#"1"#),
];

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        (-3i64..200).prop_map(|n| n.to_string()),
        Just("18446744073709551615".to_owned()),
        Just("9223372036854775807".to_owned()),
        (-1.0f64..3.0).prop_map(|x| format!("{x:?}")),
        Just("nan".to_owned()),
        Just("inf".to_owned()),
        any::<bool>().prop_map(|b| b.to_string()),
        prop::sample::select(vec![
            "\"30s\"",
            "\"0s\"",
            "\"1h 30m\"",
            "\"soon\"",
            "\"openai:gpt-4.1-mini\"",
            "\"script:t.json\"",
            "\"anthropic:\"",
            "\"auto\"",
            "\"tool:echo\"",
            "\"best-effort\"",
            "\"http://127.0.0.1:9/v1\"",
            "\"node\"",
            "\"<redacted>\"",
            "\"\"",
            "[\"a\", \"b\"]",
            "[]",
            "{ a = 1 }",
            "{ PATH = \"x\" }",
            "1979-05-27T07:32:00Z",
        ])
        .prop_map(str::to_owned),
        "\"[ -~]{0,12}\"".prop_map(|s| s.replace('\\', "/")),
    ]
}

fn document() -> impl Strategy<Value = String> {
    let entry = (prop::sample::select(KEYS), value(), any::<bool>());
    prop::collection::vec(entry, 0..14).prop_map(|pairs| {
        let mut tables: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
        for ((table, key, good), random, use_good) in pairs {
            let v = if use_good { good.to_owned() } else { random };
            let lines = tables.entry(table).or_default();
            if !lines.iter().any(|l| l.starts_with(&format!("\"{key}\" ="))) {
                lines.push(format!("\"{key}\" = {v}"));
            }
        }
        let mut out = String::new();
        for (table, lines) in tables {
            if !table.is_empty() {
                out.push_str(&format!("[{table}]\n"));
            }
            for l in lines {
                out.push_str(&l);
                out.push('\n');
            }
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_text_is_read_or_refused_never_a_panic(text in "\\PC{0,200}") {
        fuzz_support::check_definition_text(&text).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn definitions_round_trip(doc in document()) {
        fuzz_support::check_definition_text(&doc).map_err(|e| TestCaseError::fail(format!("{e}\n--- input:\n{doc}")))?;
    }

    #[test]
    fn presets_round_trip(name in "[a-z]{1,8}", args in prop::collection::vec("[ -~]{0,10}", 0..4), ms in 1u64..100_000) {
        let args: Vec<String> = args.into_iter().map(|a| format!("{a:?}")).collect();
        let doc = format!("[[presets]]\nname = \"{name}\"\nprogram = \"p\"\nargs = [{}]\ntimeout = \"{ms}ms\"\n", args.join(", "));
        let reached = fuzz_support::check_definition_text(&doc).map_err(TestCaseError::fail)?;
        prop_assert!(reached.parsed, "{}", doc);
    }
}

#[test]
fn the_generator_reaches_valid_definitions() {
    // The property above would be vacuous if nothing it generates parsed.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut parsed = 0;
    for _ in 0..300 {
        let doc = document().new_tree(&mut runner).unwrap().current();
        if fuzz_support::check_definition_text(&doc).unwrap().parsed {
            parsed += 1;
        }
    }
    assert!(parsed > 30, "only {parsed} of 300 generated documents parsed");
}
