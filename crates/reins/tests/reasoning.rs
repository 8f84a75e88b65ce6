//! Reasoning as part of the transcript (issue 11): a response's reasoning items are recorded with its
//! assistant turn, sent with the turn on every later request (a resumed run too), counted in the context
//! budget, and appear in the transcript JSON as an optional `reasoning` array that old transcripts lack.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use proptest::prelude::*;
use reins::{
    Agent, CharCounter, ContextConfig, FnModel, Limits, Message, ModelRequest, ModelResponse, Reasoning, RunState,
    Status, TokenCounter,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn thinking(n: usize) -> Reasoning {
    Reasoning::new(
        "anthropic",
        json!({"type": "thinking", "thinking": format!("thought {n}"), "signature": format!("sig-{n}")}),
    )
}

fn with_reasoning(mut r: ModelResponse, items: Vec<Reasoning>) -> ModelResponse {
    r.reasoning_items = items;
    r
}

#[tokio::test]
async fn reasoning_is_recorded_with_its_turn_and_sent_on_every_later_request() {
    let runs = Runs::default();
    let seen: Arc<Mutex<Vec<Vec<Message>>>> = Arc::default();
    let (s2, n) = (seen.clone(), Mutex::new(0usize));
    let model = FnModel::new(move |req: &ModelRequest| {
        s2.lock().unwrap().push(req.messages.to_vec());
        let mut i = n.lock().unwrap();
        *i += 1;
        Ok(match *i {
            1 => with_reasoning(calls(vec![echo_call("1", "a")]), vec![thinking(1)]),
            2 => with_reasoning(calls(vec![echo_call("2", "b")]), vec![thinking(2), thinking(3)]),
            _ => with_reasoning(answer("done"), vec![thinking(4)]),
        })
    });
    let agent = Agent::builder(model).registry(registry(&runs)).build().unwrap();
    let o = agent.run("go", CancellationToken::new()).await;
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    let turns: Vec<&[Reasoning]> =
        o.messages.iter().filter(|m| m.role() == "assistant").map(Message::reasoning).collect();
    assert_eq!(turns, vec![&[thinking(1)][..], &[thinking(2), thinking(3)][..], &[thinking(4)][..]]);
    // The third request carried both earlier turns with their items, in order.
    let third = seen.lock().unwrap()[2].clone();
    assert_eq!(third[1].reasoning(), &[thinking(1)]);
    assert_eq!(third[3].reasoning(), &[thinking(2), thinking(3)]);
    // The transcript JSON: `reasoning` on assistant turns that have any, nowhere else.
    let json = serde_json::to_value(&o.messages).unwrap();
    assert_eq!(json[1]["reasoning"], json!([thinking(1)]));
    assert_eq!(json[1]["reasoning"][0]["api"], "anthropic");
    assert_eq!(json[1]["reasoning"][0]["item"]["signature"], "sig-1");
    assert!(json[0].get("reasoning").is_none() && json[2].get("reasoning").is_none());

    // A resumed run (as `reins run --resume` makes one from the recorded transcript) sends them again.
    let recorded: Vec<Message> = serde_json::from_str(&serde_json::to_string(&o.messages).unwrap()).unwrap();
    let seen2: Arc<Mutex<Vec<Message>>> = Arc::default();
    let s3 = seen2.clone();
    let model = FnModel::new(move |req: &ModelRequest| {
        *s3.lock().unwrap() = req.messages.to_vec();
        Ok(ModelResponse::text("again"))
    });
    let agent = Agent::builder(model).registry(registry(&runs)).build().unwrap();
    let ctx = agent.context().clone();
    let mut state = RunState::resume("r2", recorded, Limits::default(), &ctx, "interrupted").unwrap();
    state.push_user("more", &ctx).unwrap();
    let o2 = agent.drive(state, CancellationToken::new()).await;
    assert_eq!(o2.status, Status::Completed);
    let sent = seen2.lock().unwrap().clone();
    let items: Vec<Reasoning> = sent.iter().flat_map(|m| m.reasoning().to_vec()).collect();
    assert_eq!(items, (1..=4).map(thinking).collect::<Vec<_>>());
}

#[test]
fn a_turns_reasoning_counts_in_its_size() {
    let item = json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA".repeat(40)});
    let plain = Message::assistant("hi", vec![echo_call("1", "a")]);
    let Message::Assistant { content, tool_calls, .. } = plain.clone() else { unreachable!() };
    let with = Message::Assistant { content, tool_calls, reasoning: vec![Reasoning::new("openai", item.clone())] };
    let c = CharCounter;
    assert_eq!(reins::transcript::measure(&with, &c), reins::transcript::measure(&plain, &c) + c.count_json(&item));
}

/// The context budget admits a turn with its reasoning: a turn that fits without it does not with it.
#[tokio::test]
async fn reasoning_is_counted_in_the_context_budget() {
    let big = Reasoning::new("openai", json!({"type": "reasoning", "encrypted_content": "x".repeat(3000)}));
    for (items, want) in [(vec![], Status::Completed), (vec![big], Status::ContextLimit)] {
        let runs = Runs::default();
        let model = scripted(vec![with_reasoning(calls(vec![echo_call("1", "a")]), items), answer("done")]);
        let agent = agent_with(model, &runs, Limits::default())
            .context(ContextConfig { max_context: Some(2000), ..ContextConfig::default() })
            .build()
            .unwrap();
        let o = run(&agent).await;
        assert_eq!(o.status, want, "{:?}", o.error);
        if want == Status::ContextLimit {
            assert!(o.error.as_deref().unwrap().contains("context limit"), "{:?}", o.error);
            assert_eq!(runs.get(), 0, "no call ran");
        }
    }
}

/// Transcripts written before reasoning existed read and serialize back byte for byte.
#[test]
fn old_transcripts_read_and_write_back_byte_identical() {
    let old = r#"[{"role":"user","content":"go"},{"role":"assistant","content":"","tool_calls":[{"id":"1","name":"echo","arguments":{"text":"a"}}]},{"role":"tool","call_id":"1","content":"a","is_error":false},{"role":"summary","content":"s","replaces":2},{"role":"assistant","content":"done"}]"#;
    let messages: Vec<Message> = serde_json::from_str(old).unwrap();
    assert!(messages.iter().all(|m| m.reasoning().is_empty()));
    assert_eq!(serde_json::to_string(&messages).unwrap(), old);
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[ -~]{0,12}".prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn reasoning_item() -> impl Strategy<Value = Reasoning> {
    (prop_oneof![Just("anthropic".to_owned()), Just("openai".to_owned()), "[a-z-]{1,10}"], json_value())
        .prop_map(|(api, item)| Reasoning::new(api, item))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any assistant turn with any reasoning items round-trips through JSON; `reasoning` is there exactly when
    /// it has items, and its size is its text's, its calls' and its items' JSON.
    #[test]
    fn assistant_turns_with_reasoning_round_trip(
        content in "\\PC{0,20}",
        items in prop::collection::vec(reasoning_item(), 0..4),
        with_call in any::<bool>(),
    ) {
        let tool_calls = if with_call { vec![echo_call("c", "x")] } else { vec![] };
        let m = Message::Assistant { content, tool_calls, reasoning: items.clone() };
        let text = serde_json::to_string(&m).unwrap();
        let back: Message = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(&back, &m);
        prop_assert_eq!(serde_json::to_string(&back).unwrap(), text.clone());
        let v: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(v.get("reasoning").is_some(), !items.is_empty());
        let c = CharCounter;
        let plain = Message::Assistant { content: m.content().to_owned(), tool_calls: m.tool_calls().to_vec(), reasoning: vec![] };
        let extra: u64 = items.iter().map(|r| c.count_json(&r.item)).sum();
        prop_assert_eq!(reins::transcript::measure(&m, &c), reins::transcript::measure(&plain, &c) + extra);
    }
}
