//! Structured output: the schema binds only the final answer; tools stay on offer on every turn; an invalid
//! answer is told why (JSON pointers) and the model recovers; plain text is reminded once.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use reins::{Agent, Event, EventKind, Limits, Message, ModelResponse, OutputSchema, RunState, Status, TypedRunError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn city_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer", "minimum": 0}},
        "required": ["city", "population"],
        "additionalProperties": false,
    })
}

fn final_call(id: &str, args: Value) -> reins::ToolCall {
    call(id, "final_answer", args)
}

fn events_of(builder: reins::AgentBuilder) -> (Agent, Arc<Mutex<Vec<Event>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let agent = builder
        .observer(move |e: &Event| {
            sink.lock().unwrap().push(e.clone());
            Ok(())
        })
        .build()
        .unwrap();
    (agent, events)
}

fn output_valid(events: &Mutex<Vec<Event>>) -> Option<bool> {
    match events.lock().unwrap().last().map(|e| e.kind.clone()) {
        Some(EventKind::RunEnd(end)) => end.output_valid,
        other => panic!("no run_end: {other:?}"),
    }
}

#[tokio::test]
async fn two_tools_then_schema_valid_answer_completes_with_output() {
    let runs = Runs::default();
    let model = scripted(vec![
        calls(vec![echo_call("1", "Paris")]),
        calls(vec![echo_call("2", "2100000")]),
        calls(vec![final_call("3", json!({"city": "Paris", "population": 2100000}))]),
    ]);
    let schema = OutputSchema::new(city_schema()).unwrap();
    let (agent, events) = events_of(agent_with(Arc::clone(&model), &runs, Limits::default()).output_schema(schema));
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(runs.get(), 2, "both tools ran");
    assert_eq!(o.output, Some(json!({"city": "Paris", "population": 2100000})));
    assert_eq!(o.answer.as_deref(), Some(r#"{"city":"Paris","population":2100000}"#));
    assert_eq!(o.steps, 3);
    assert_coherent(&o);
    // The final call has its result, so the transcript stays coherent and resumable.
    assert_eq!(o.messages.last(), Some(&Message::tool_result("3", "accepted as the final answer", false)));
    // Every turn was offered every tool and the final-answer tool: the schema never took the tools away.
    for request in model.requests() {
        let names: Vec<_> = request.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["echo", "fail", "sleep", "stubborn", "final_answer"]);
    }
    assert_eq!(output_valid(&events), Some(true));
    let json = serde_json::to_value(&o).unwrap();
    assert_eq!(json["output"]["city"], "Paris");
}

#[tokio::test]
async fn an_invalid_answer_is_told_why_by_json_pointer_and_the_model_recovers() {
    let runs = Runs::default();
    let model = scripted(vec![
        calls(vec![final_call("1", json!({"city": "Paris", "population": -3, "mayor": "x"}))]),
        calls(vec![final_call("2", json!({"city": "Paris", "population": 3}))]),
    ]);
    let schema = OutputSchema::new(city_schema()).unwrap();
    let (agent, events) = events_of(agent_with(Arc::clone(&model), &runs, Limits::default()).output_schema(schema));
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.output, Some(json!({"city": "Paris", "population": 3})));
    let Message::ToolResult(r) = &o.messages[2] else { panic!("{:?}", o.messages) };
    assert!(r.is_error);
    assert!(r.content.contains("/population"), "{}", r.content);
    assert!(r.content.contains("mayor"), "{}", r.content);
    // The second request carried the error back to the model.
    let second = &model.requests()[1];
    assert!(second.messages.last().unwrap().content().contains("/population"));
    assert_eq!(output_valid(&events), Some(true));
    assert_eq!(runs.get(), 0);
}

#[tokio::test]
async fn invalid_answers_until_the_step_budget_ends_the_run_without_output() {
    let runs = Runs::default();
    let bad = || calls(vec![final_call("1", json!({"city": 3}))]);
    let model = scripted(vec![bad(), bad()]);
    let schema = OutputSchema::new(city_schema()).unwrap();
    let limits = Limits { max_steps: Some(2), ..Limits::default() };
    let (agent, events) = events_of(agent_with(model, &runs, limits).output_schema(schema));
    let o = run(&agent).await;
    is_status(&o, Status::StepLimit);
    assert_eq!(o.output, None);
    assert_eq!(output_valid(&events), Some(false));
    assert_coherent(&o);
}

#[tokio::test]
async fn plain_text_is_reminded_once_then_the_tool_answer_is_taken() {
    let runs = Runs::default();
    let model = scripted(vec![
        answer("Paris, about two million"),
        calls(vec![final_call("1", json!({"city": "Paris", "population": 2}))]),
    ]);
    let schema = OutputSchema::new(city_schema()).unwrap();
    let agent = agent_with(Arc::clone(&model), &runs, Limits::default()).output_schema(schema).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.steps, 2, "the reminded answer counts as a step");
    let Message::User { content, .. } = &o.messages[2] else { panic!("{:?}", o.messages) };
    assert!(content.contains("final_answer"), "{content}");
    assert_eq!(o.output, Some(json!({"city": "Paris", "population": 2})));
}

#[tokio::test]
async fn plain_text_twice_ends_output_invalid_without_output() {
    let runs = Runs::default();
    let model = scripted(vec![answer("Paris"), answer("Still Paris")]);
    let schema = OutputSchema::new(city_schema()).unwrap();
    let (agent, events) = events_of(agent_with(model, &runs, Limits::default()).output_schema(schema));
    let o = run(&agent).await;
    assert_eq!(o.status, Status::OutputInvalid, "{o:?}");
    assert!(o.error.as_deref().is_some_and(|e| e.contains("did not match the output schema")), "{:?}", o.error);
    assert_eq!(o.answer.as_deref(), Some("Still Paris"));
    assert_eq!(o.output, None);
    assert_eq!(output_valid(&events), Some(false));
    // Exactly one reminder.
    let users = o.messages.iter().filter(|m| matches!(m, Message::User { .. })).count();
    assert_eq!(users, 2);
}

#[tokio::test]
async fn json_text_that_matches_the_schema_is_the_output() {
    let runs = Runs::default();
    let model = scripted(vec![answer("```json\n{\"city\": \"Rome\", \"population\": 4}\n```")]);
    let schema = OutputSchema::new(city_schema()).unwrap();
    let o = run(&agent_with(model, &runs, Limits::default()).output_schema(schema).build().unwrap()).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.output, Some(json!({"city": "Rome", "population": 4})));
}

#[tokio::test]
async fn json_text_that_fails_the_schema_is_reminded_with_the_failures() {
    let runs = Runs::default();
    let model = scripted(vec![
        answer(r#"{"city": "Rome"}"#),
        calls(vec![final_call("1", json!({"city": "Rome", "population": 4}))]),
    ]);
    let schema = OutputSchema::new(city_schema()).unwrap();
    let o = run(&agent_with(model, &runs, Limits::default()).output_schema(schema).build().unwrap()).await;
    is_status(&o, Status::Completed);
    assert!(o.messages[2].content().contains("population"), "{}", o.messages[2].content());
    assert_eq!(o.output, Some(json!({"city": "Rome", "population": 4})));
}

#[tokio::test]
async fn a_final_answer_among_other_calls_is_an_error_and_the_others_run() {
    let runs = Runs::default();
    let model = scripted(vec![
        calls(vec![echo_call("1", "x"), final_call("2", json!({"city": "A", "population": 1}))]),
        calls(vec![final_call("3", json!({"city": "A", "population": 1}))]),
    ]);
    let schema = OutputSchema::new(city_schema()).unwrap();
    let o = run(&agent_with(model, &runs, Limits::default()).output_schema(schema).build().unwrap()).await;
    is_status(&o, Status::Completed);
    assert_eq!(runs.get(), 1);
    let Message::ToolResult(r) = &o.messages[3] else { panic!("{:?}", o.messages) };
    assert!(r.is_error && r.content.contains("alone"), "{r:?}");
    assert_coherent(&o);
}

#[tokio::test]
async fn a_schema_that_is_not_an_object_is_carried_under_value() {
    let runs = Runs::default();
    let model = scripted(vec![
        calls(vec![final_call("1", json!({"value": "seven"}))]),
        calls(vec![final_call("2", json!({"value": 7}))]),
    ]);
    let schema = OutputSchema::new(json!({"type": "integer"})).unwrap();
    let o = run(&agent_with(model, &runs, Limits::default()).output_schema(schema).build().unwrap()).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.output, Some(json!(7)));
    assert!(o.messages[2].content().contains("/value"), "{}", o.messages[2].content());
}

#[tokio::test]
async fn without_a_schema_nothing_changes() {
    let runs = Runs::default();
    let model = scripted(vec![answer("{\"a\": 1}")]);
    let (agent, events) = events_of(agent_with(Arc::clone(&model), &runs, Limits::default()));
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.output, None);
    assert_eq!(output_valid(&events), None);
    assert!(model.requests()[0].tools.iter().all(|t| t.name != "final_answer"));
    let line = events.lock().unwrap().last().unwrap().to_json();
    assert!(!line.contains("output_valid"), "{line}");
}

#[tokio::test]
async fn a_tool_named_final_answer_is_refused_when_the_agent_is_built() {
    let taken = reins::FnTool::new("final_answer", "mine", json!({"type": "object"}), |_, _| async {
        Ok(reins::ToolOutput::Text(String::new()))
    });
    let registry = reins::Registry::builder().tool(taken).build().unwrap();
    let err = Agent::builder(reins::ScriptedModel::new(Vec::<ModelResponse>::new()))
        .registry(registry)
        .output_schema(OutputSchema::new(city_schema()).unwrap())
        .build()
        .err()
        .expect("refused");
    assert!(err.to_string().contains("final_answer"), "{err}");
}

#[derive(serde::Deserialize, schemars::JsonSchema, Debug, PartialEq)]
struct City {
    city: String,
    population: u64,
}

#[tokio::test]
async fn run_typed_gives_the_deserialized_output() {
    let runs = Runs::default();
    let model = scripted(vec![
        calls(vec![echo_call("1", "x")]),
        calls(vec![final_call("2", json!({"city": "Oslo", "population": 700000}))]),
    ]);
    let agent = agent_with(model, &runs, Limits::default()).build().unwrap();
    let (city, outcome) = agent.run_typed::<City>("which city?", CancellationToken::new()).await.unwrap();
    assert_eq!(city, City { city: "Oslo".into(), population: 700000 });
    assert_eq!(outcome.steps, 2);
}

#[tokio::test]
async fn run_typed_without_output_says_how_the_run_ended() {
    let runs = Runs::default();
    let model = scripted(vec![answer("no"), answer("still no")]);
    let agent = agent_with(model, &runs, Limits::default()).build().unwrap();
    let err = agent.run_typed::<City>("which city?", CancellationToken::new()).await.unwrap_err();
    let TypedRunError::NoOutput(outcome) = &err else { panic!("{err:?}") };
    assert_eq!(outcome.status, Status::OutputInvalid);
    assert!(err.to_string().contains("without a valid output"), "{err}");
}

#[tokio::test]
async fn the_output_state_survives_serialization_mid_run() {
    let schema = OutputSchema::new(city_schema()).unwrap();
    let ctx = reins::ContextConfig::default();
    let mut state = RunState::new("r", "go", Limits::default(), &ctx).unwrap().with_output_schema(Some(&schema));
    let registry = reins::Registry::empty().with_output(&schema).unwrap();
    let adm = state.on_model_response(Ok(answer("plain")), &registry, None, &ctx);
    assert_eq!(adm, reins::Admission::Reminded);
    let json = serde_json::to_string(&state).unwrap();
    let mut back: RunState = serde_json::from_str(&json).unwrap();
    assert_eq!(back.output_valid(), Some(false));
    // Told once already: a second plain answer ends the run.
    let adm = back.on_model_response(Ok(answer("plain again")), &registry, None, &ctx);
    assert_eq!(adm, reins::Admission::Ended(Status::OutputInvalid));
    assert_eq!(back.outcome().output, None);
}

#[test]
fn schemas_are_checked() {
    assert!(OutputSchema::parse("{").unwrap_err().to_string().contains("not valid JSON"));
    assert!(OutputSchema::parse("3").is_err());
    assert!(OutputSchema::parse("false").is_err());
    assert!(OutputSchema::parse(r#"{"type": "bogus"}"#).is_err());
    assert!(OutputSchema::parse(&" ".repeat(reins::output::MAX_OUTPUT_SCHEMA_BYTES + 1)).is_err());
    let s = OutputSchema::parse(r#"{"type": "object", "properties": {"a": {"type": "string"}}}"#).unwrap();
    assert!(!s.is_wrapped());
    assert_eq!(s.tool_spec().input_schema, *s.schema());
    assert!(OutputSchema::parse("true").unwrap().is_wrapped());
}

#[derive(serde::Deserialize, schemars::JsonSchema, Debug, PartialEq)]
enum Shape {
    Circle { r: Inner },
    Square { side: Inner },
}

#[derive(serde::Deserialize, schemars::JsonSchema, Debug, PartialEq)]
struct Inner {
    size: u32,
}

#[tokio::test]
async fn a_typed_enum_with_definitions_is_wrapped_and_its_references_resolve() {
    let schema = OutputSchema::of::<Shape>().unwrap();
    assert!(schema.is_wrapped());
    let runs = Runs::default();
    let model = scripted(vec![
        calls(vec![final_call("1", json!({"value": {"Circle": {"r": {"size": "big"}}}}))]),
        calls(vec![final_call("2", json!({"value": {"Circle": {"r": {"size": 2}}}}))]),
    ]);
    let agent = agent_with(model, &runs, Limits::default()).build().unwrap();
    let (shape, outcome) = agent.run_typed::<Shape>("shape?", CancellationToken::new()).await.unwrap();
    assert_eq!(shape, Shape::Circle { r: Inner { size: 2 } });
    assert!(outcome.messages[2].content().contains("invalid arguments"), "{:?}", outcome.messages[2]);
}

/// A recursive schema wrapped under `value`: its `"$ref": "#"` points at the schema, not at the wrapper, so
/// `[1, [2, 3]]` is the output (it was refused while the reference pointed at the wrapper).
#[tokio::test]
async fn a_root_reference_still_means_the_schema_once_wrapped() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![final_call("1", json!({"value": [1, [2, 3]]}))])]);
    let nested = json!({"type": "array", "items": {"anyOf": [{"type": "integer"}, {"$ref": "#"}]}});
    let schema = OutputSchema::new(nested).unwrap();
    assert_eq!(
        schema.tool_spec().input_schema["properties"]["value"]["items"]["anyOf"][1]["$ref"],
        "#/properties/value"
    );
    let o = run(&agent_with(model, &runs, Limits::default()).output_schema(schema).build().unwrap()).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.output, Some(json!([1, [2, 3]])));
}

#[test]
fn a_schema_no_value_can_match_is_refused_when_loaded() {
    for never in [
        json!(false),
        json!({"not": {}}),
        json!({"not": true}),
        json!({"type": "object", "not": {"description": "anything"}}),
        json!({"enum": []}),
        json!({"type": "integer", "const": "seven"}),
        json!({"type": "string", "enum": [1, 2]}),
        json!({"anyOf": [false, {"not": {}}]}),
        json!({"allOf": [{"type": "integer"}, false]}),
        json!({"type": "object", "properties": {"a": false}, "required": ["a"]}),
    ] {
        let err = OutputSchema::new(never.clone()).expect_err(&never.to_string());
        assert!(err.to_string().contains("admits no answer"), "{never}: {err}");
    }
    for fine in [json!(true), json!({}), json!({"not": {"type": "string"}}), json!({"type": "number", "const": 7})] {
        assert!(OutputSchema::new(fine.clone()).is_ok(), "{fine}");
    }
}

/// References in data (`const`, `enum`, `default`) are not schema references: wrapping leaves them as they are;
/// a subschema with its own `$id` keeps its own relative references; `#/$defs/..` still resolves.
#[test]
fn wrapping_rewrites_only_the_root_relative_references_of_schemas() {
    let schema = json!({
        "$defs": {"n": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#"}}]}},
        "type": "array",
        "items": {"$ref": "#/$defs/n"},
        "default": [{"$ref": "#"}],
        "prefixItems": [{"$id": "https://example.com/inner", "type": "array", "items": {"$ref": "#"}}, {"const": {"$ref": "#"}}],
    });
    let w = OutputSchema::new(schema).unwrap().tool_spec().input_schema.clone();
    assert_eq!(w["$defs"]["n"]["anyOf"][1]["items"]["$ref"], "#/properties/value");
    assert_eq!(w["properties"]["value"]["items"]["$ref"], "#/$defs/n");
    assert_eq!(w["properties"]["value"]["default"], json!([{"$ref": "#"}]));
    assert_eq!(w["properties"]["value"]["prefixItems"][0]["items"]["$ref"], "#");
    assert_eq!(w["properties"]["value"]["prefixItems"][1]["const"], json!({"$ref": "#"}));
}

mod wrapping {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// A schema node; `refs` allows references (only beneath `items` and `properties`, which take a level of
    /// the value, so that no generated schema loops without consuming the value).
    fn node(depth: u32, refs: bool) -> BoxedStrategy<Value> {
        let mut leaves = vec![
            Just(json!({"type": "integer"})).boxed(),
            Just(json!({"type": "string"})).boxed(),
            Just(json!({"type": "array"})).boxed(),
            Just(json!({"minimum": 3})).boxed(),
            Just(json!(true)).boxed(),
            Just(json!({"const": 1})).boxed(),
            Just(json!({"maxItems": 1})).boxed(),
        ];
        if refs {
            leaves.push(Just(json!({"$ref": "#"})).boxed());
            leaves.push(Just(json!({"$ref": "#/$defs/a"})).boxed());
            leaves.push(Just(json!({"$ref": "https://example.com/s.json"})).boxed());
            leaves.push(Just(json!({"$ref": "#/prefixItems/0"})).boxed());
        }
        let leaf = prop::strategy::Union::new(leaves).boxed();
        if depth == 0 {
            return leaf;
        }
        let under = node(depth - 1, true);
        let here = node(depth - 1, false);
        prop_oneof![
            2 => leaf,
            1 => under.clone().prop_map(|s| json!({"type": "array", "items": s})),
            1 => under.clone().prop_map(|s| json!({"items": {"anyOf": [{"type": "integer"}, s]}})),
            1 => under.clone().prop_map(|s| json!({"prefixItems": [s]})),
            1 => under.prop_map(|s| json!({"properties": {"k": s}})),
            1 => (here.clone(), here.clone()).prop_map(|(a, b)| json!({"anyOf": [a, b]})),
            1 => (here.clone(), here.clone()).prop_map(|(a, b)| json!({"allOf": [a, b]})),
            1 => here.prop_map(|s| json!({"not": s})),
        ]
        .boxed()
    }

    /// A schema whose top is not an object schema (so it is wrapped), maybe with definitions and an `$id`.
    fn schema() -> impl Strategy<Value = Value> {
        (node(3, false), prop::option::of(node(2, false)), any::<bool>()).prop_map(|(mut s, defs, id)| {
            if !s.is_object() {
                s = json!({"allOf": [s]});
            }
            s["$defs"] = json!({"a": defs.unwrap_or(json!({"type": "integer"}))});
            if id {
                s["$id"] = json!("https://example.com/s.json");
            }
            s
        })
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf =
            prop_oneof![(-2i64..6).prop_map(Value::from), Just(json!("s")), Just(json!(null)), Just(json!(2.5)),];
        leaf.prop_recursive(4, 24, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                inner.prop_map(|v| json!({"k": v})),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

        /// The wrapped schema accepts `{"value": v}` exactly when the schema accepts `v`.
        #[test]
        fn the_wrapped_schema_accepts_value_v_iff_the_schema_accepts_v(s in schema(), vs in prop::collection::vec(value(), 1..6)) {
            let Ok(original) = jsonschema::validator_for(&s) else { return Ok(()) };
            let Ok(output) = reins::OutputSchema::new(s.clone()) else { return Ok(()) };
            prop_assert!(output.is_wrapped());
            let wrapped = jsonschema::validator_for(&output.tool_spec().input_schema)
                .map_err(|e| TestCaseError::fail(format!("{e}: {}", output.tool_spec().input_schema)))?;
            for v in vs {
                prop_assert_eq!(
                    original.is_valid(&v),
                    wrapped.is_valid(&json!({"value": v.clone()})),
                    "schema {} value {} wrapped {}", s, v, output.tool_spec().input_schema
                );
            }
        }
    }
}
