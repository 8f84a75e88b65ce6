//! Seeded and property tests: budgets, random scripts and cancellation points always leave a coherent
//! transcript, and a refused call never runs.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use common::*;
use proptest::prelude::*;
use reins::{
    Agent, FnTool, Limits, Message, ModelError, ModelResponse, Registry, ScriptStep, ScriptedModel, Status, ToolCall,
    ToolError, ToolOutput, Usage,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A deterministic generator for the seeded cases (SplitMix64).
struct Seeded(u64);
impl Seeded {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn one_hundred_fifty_seeded_budget_cases() {
    let rt = runtime();
    let mut rng = Seeded(0x5EED);
    let mut admitted = 0;
    let mut refused = 0;
    for case in 0..150 {
        let budget = rng.next(9);
        let batch = rng.next(13) as usize;
        let runs = Runs::default();
        let calls_: Vec<ToolCall> = (0..batch).map(|i| echo_call(&format!("c{i}"), "x")).collect();
        let model = scripted(vec![calls(calls_), answer("done")]);
        let agent =
            agent_with(model, &runs, Limits { max_tool_calls: Some(budget), ..Limits::default() }).build().unwrap();
        let o = rt.block_on(run(&agent));
        assert_coherent(&o);
        if batch as u64 <= budget {
            if batch > 0 {
                admitted += 1;
            }
            is_status(&o, Status::Completed);
            assert_eq!(runs.get(), batch, "case {case}: every admitted call runs");
            assert_eq!(o.tool_calls, batch as u64);
        } else {
            refused += 1;
            is_status(&o, Status::ToolLimit);
            assert_eq!(runs.get(), 0, "case {case}: no call of a refused batch runs");
            assert_eq!(o.messages, vec![Message::user("do the task")], "case {case}: only the prompt remains");
        }
    }
    assert!(admitted > 20 && refused > 20, "the seeds cover both sides: {admitted} admitted, {refused} refused");
}

#[derive(Clone, Debug)]
enum Turn {
    Answer,
    Fail,
    Raw,
    Batch(Vec<u8>),
}

fn turn() -> impl Strategy<Value = Turn> {
    prop_oneof![
        1 => Just(Turn::Answer),
        1 => Just(Turn::Fail),
        1 => Just(Turn::Raw),
        8 => prop::collection::vec(0u8..5, 0..5).prop_map(Turn::Batch),
    ]
}

fn to_steps(turns: &[Turn]) -> Vec<ScriptStep> {
    turns
        .iter()
        .enumerate()
        .map(|(t, turn)| match turn {
            Turn::Answer => ScriptStep::Respond(ModelResponse::text("final").with_usage(Usage::new(5, 1))),
            Turn::Fail => ScriptStep::Fail(ModelError::Failed("boom".into())),
            Turn::Raw => ScriptStep::Raw(json!({"tool_calls": [{"id": 1, "name": "echo", "arguments": {}}]})),
            Turn::Batch(kinds) => {
                let calls_ = kinds
                    .iter()
                    .enumerate()
                    .map(|(i, k)| {
                        let id = format!("t{t}c{i}");
                        match k {
                            0 => call(&id, "rec", json!({"text": "ok"})),
                            1 => call(&id, "rec", json!({"text": 1})),
                            2 => call(&id, "nope", json!({})),
                            3 => call(&id, "recfail", json!({})),
                            _ => call(&id, "recpar", json!({"text": "p"})),
                        }
                    })
                    .collect();
                ScriptStep::Respond(ModelResponse::tool_calls("", calls_).with_usage(Usage::new(10, 2)))
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_scripts_budgets_and_cancellation_points_leave_a_coherent_transcript(
        turns in prop::collection::vec(turn(), 0..12),
        max_steps in 1u64..10,
        max_tool_calls in prop::option::of(0u64..15),
        max_total_tokens in prop::option::of(0u64..80),
        cancel_after in prop::option::of(0usize..8),
    ) {
        let ran: Arc<Mutex<Vec<String>>> = Arc::default();
        let cancel = CancellationToken::new();
        let make = |name: &str, fails: bool, parallel: bool| {
            let ran = ran.clone();
            let cancel = cancel.clone();
            let schema = if fails { json!({"type": "object"}) } else { echo_schema() };
            let t = FnTool::new(name, "records", schema, move |args, ctx| {
                let ran = ran.clone();
                let cancel = cancel.clone();
                async move {
                    let n = {
                        let mut r = ran.lock().unwrap();
                        r.push(ctx.call_id.to_string());
                        r.len()
                    };
                    if cancel_after == Some(n) {
                        cancel.cancel();
                        tokio::task::yield_now().await;
                    }
                    if fails { Err(ToolError::failed("nope")) } else { Ok(ToolOutput::Json(args["text"].clone())) }
                }
            });
            if parallel { t.parallel() } else { t }
        };
        let registry = Registry::builder()
            .tool(make("rec", false, false))
            .tool(make("recfail", true, false))
            .tool(make("recpar", false, true))
            .build()
            .unwrap();
        let model = Arc::new(ScriptedModel::new(to_steps(&turns)));
        let limits = Limits { max_steps: Some(max_steps), max_tool_calls, max_total_tokens, ..Limits::default() };
        let agent = Agent::builder_shared(model).registry(registry).limits(limits).build().unwrap();
        let o = runtime().block_on(agent.run("go", cancel.clone()));

        // Coherent: every call has exactly one result, in order.
        let t = reins::Transcript::from_messages(o.messages.clone(), &reins::CharCounter);
        prop_assert!(t.as_ref().is_ok_and(|t| t.is_complete()), "{:?}\n{:?}", t.err(), o.messages);
        // A call ran only if it was recorded, valid, and its batch fit the budget.
        let ran = ran.lock().unwrap().clone();
        let recorded: HashSet<String> = o.messages.iter().flat_map(|m| m.tool_calls().iter().map(|c| c.id.to_string())).collect();
        for id in &ran {
            prop_assert!(recorded.contains(id), "{id} ran but its turn was refused");
        }
        prop_assert_eq!(ran.iter().collect::<HashSet<_>>().len(), ran.len(), "no call ran twice");
        if let Some(max) = max_tool_calls {
            prop_assert!(o.tool_calls <= max);
        }
        prop_assert!(o.steps <= max_steps);
        if let Some(max) = max_total_tokens {
            if o.status != Status::TokenLimit {
                prop_assert!(o.usage.total_tokens <= max);
            }
        }
        // Invalid and unknown calls never reached a tool.
        for m in &o.messages {
            for c in m.tool_calls() {
                let valid = (c.name == "rec" || c.name == "recpar") && c.arguments["text"].is_string() || c.name == "recfail";
                if !valid {
                    prop_assert!(!ran.contains(&c.id.to_string()), "invalid call {} ran", c.id);
                }
            }
        }
        if o.status == Status::Completed {
            let last = o.messages.last().unwrap();
            prop_assert!(last.tool_calls().is_empty());
            prop_assert_eq!(o.answer.as_deref(), Some(last.content()));
        } else {
            prop_assert!(o.error.is_some());
        }
        if cancel.is_cancelled() && cancel_after.is_some_and(|k| ran.len() >= k) {
            prop_assert_eq!(o.status, Status::Aborted);
        }
    }

    #[test]
    fn the_response_parser_never_panics(v in arb_json()) {
        let _ = reins::parse_response(&v);
        let _ = reins::parse_script(&v.to_string());
    }

    #[test]
    fn the_script_parser_never_panics_on_text(s in "\\PC{0,200}") {
        let _ = reins::parse_script(&s);
    }
}

fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<u64>().prop_map(|i| json!(i)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        prop_oneof![
            Just("content".to_owned()),
            Just("tool_calls".to_owned()),
            Just("usage".to_owned()),
            Just("id".to_owned()),
            "\\PC{0,8}"
        ]
        .prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        let key = prop_oneof![
            Just("content".to_owned()),
            Just("text".to_owned()),
            Just("tool_calls".to_owned()),
            Just("usage".to_owned()),
            Just("id".to_owned()),
            Just("name".to_owned()),
            Just("arguments".to_owned()),
            Just("input_tokens".to_owned()),
            Just("output_tokens".to_owned()),
            Just("error".to_owned()),
            Just("raw".to_owned()),
            Just("delay_ms".to_owned()),
            "[a-z]{1,6}"
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(key, inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}
