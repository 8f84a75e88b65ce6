//! Context: result bounding, selection of whole groups under a budget, and context_limit.

mod common;

use common::*;
use proptest::prelude::*;
use reins::{
    Agent, CharCounter, ContextConfig, FnTool, Limits, Message, Registry, ScriptedModel, Status, ToolOutput,
    Transcript, bound_text,
};
use serde_json::json;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The markers of a cut text, widest first, as (before the count, after it).
const MARKERS: [(&str, &str); 3] = [("\n[… ", " characters omitted …]\n"), ("[…", " omitted]"), ("[…", "]")];

/// Reads `out` as a cut of `text`: head + marker + tail, where the marker says exactly how many characters
/// were left out. Returns which marker (0 = the full one) and the count.
fn read_cut(text: &str, out: &str) -> Option<(usize, usize)> {
    let total = text.chars().count();
    let chars: Vec<(usize, char)> = out.char_indices().collect();
    for (form, (before, after)) in MARKERS.iter().enumerate() {
        for (h, &(at, _)) in chars.iter().enumerate() {
            let Some(rest) = out[at..].strip_prefix(before) else { continue };
            let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            let Ok(omitted) = rest[..digits].parse::<usize>() else { continue };
            let Some(tail) = rest[digits..].strip_prefix(after) else { continue };
            let (head, tail_chars) = (&out[..at], tail.chars().count());
            if h + tail_chars + omitted == total && text.starts_with(head) && text.ends_with(tail) {
                return Some((form, omitted));
            }
        }
    }
    None
}

proptest! {
    #[test]
    fn bounding_never_exceeds_the_limit_and_says_exactly_what_was_omitted(
        text in "(\\PC|[é漢😀\n\\[…\\]0-9]){0,400}",
        limit in 0usize..300,
    ) {
        let out = bound_text(&text, limit);
        let total = text.chars().count();
        let n = out.chars().count();
        prop_assert!(n <= limit, "{n} > {limit}");
        if total <= limit {
            prop_assert_eq!(&out, &text);
        } else if limit == 0 {
            prop_assert_eq!(out, "");
        } else if let Some((form, _)) = read_cut(&text, &out) {
            // The widest marker that leaves two characters of the text is the one used.
            let full = format!("\n[… {total} characters omitted …]\n").chars().count();
            prop_assert_eq!(form == 0, limit >= full + 2, "marker {} at limit {}", form, limit);
        } else {
            // Too small even for `[…N]`: the head and a final ellipsis, which still says it was cut.
            let compact = format!("[…{total}]").chars().count();
            prop_assert!(limit < compact, "no marker at limit {limit}: {out:?}");
            let head: String = text.chars().take(limit - 1).collect();
            prop_assert_eq!(out, format!("{head}…"));
        }
    }
}

#[test]
fn a_cut_result_carries_a_marker_at_any_limit() {
    let text = "0123456789".repeat(100);
    for limit in 1..=60 {
        let out = bound_text(&text, limit);
        assert!(out.chars().count() <= limit, "{limit}: {out:?}");
        assert!(out.ends_with('…') || read_cut(&text, &out).is_some(), "{limit}: no marker in {out:?}");
    }
    assert_eq!(bound_text(&text, 10), "01[…997]9");
    assert_eq!(read_cut(&text, &bound_text(&text, 30)), Some((1, 1000 - 30 + "[…1000 omitted]".chars().count())));
}

#[test]
fn bounding_cuts_on_character_boundaries() {
    let s = "é".repeat(500);
    let b = bound_text(&s, 100);
    assert!(b.chars().count() <= 100);
    assert_eq!(read_cut(&s, &b).map(|c| c.1), Some(500 - (100 - "\n[… 500 characters omitted …]\n".chars().count())));
}

/// What the common registry's tool specs take of a character budget.
fn tools_size(runs: &Runs) -> u64 {
    reins::transcript::measure_tools(registry(runs).specs(), &CharCounter)
}

fn transcript(groups: usize) -> Transcript {
    let c = CharCounter;
    let mut t = Transcript::new("first", &c);
    for i in 0..groups {
        t.push_assistant(String::new(), vec![echo_call(&format!("c{i}"), "x")], &c).unwrap();
        t.push_result(reins::ToolResult::new(format!("c{i}"), "0123456789", false), &c).unwrap();
    }
    t
}

#[test]
fn selection_keeps_the_first_message_and_the_newest_whole_groups() {
    let t = transcript(10);
    // Each group: assistant (echo + {"text":"x"} = 4 + 12) 16 chars + result 10 chars = 26; first = 5.
    let all = t.select(None, "characters").unwrap();
    assert_eq!(all.len(), 21);
    let sel = t.select(Some(5 + 26 * 3 + 10), "characters").unwrap();
    assert_eq!(sel.len(), 1 + 2 * 3);
    assert_eq!(sel.get(0), Some(&Message::user("first")));
    assert!(matches!(sel.get(1), Some(Message::Assistant { tool_calls, .. }) if &*tool_calls[0].id == "c7"));
    let err = t.select(Some(5 + 20), "characters").unwrap_err();
    assert!(err.0.contains("newest group") && err.0.contains("26 characters"), "{}", err.0);
    let err = t.select(Some(4), "characters").unwrap_err();
    assert!(err.0.contains("first user message (5 characters)"), "{}", err.0);
}

#[test]
fn incoherent_transcripts_are_refused() {
    let c = CharCounter;
    let orphan = vec![Message::user("a"), Message::tool_result("x", "r", false)];
    assert!(Transcript::from_messages(orphan, &c).unwrap_err().reason.contains("orphan"));
    let dup = vec![Message::user("a"), Message::assistant("", vec![echo_call("1", "a"), echo_call("1", "b")])];
    assert!(Transcript::from_messages(dup, &c).unwrap_err().reason.contains("twice"));
    let incomplete = vec![
        Message::user("a"),
        Message::assistant("", vec![echo_call("1", "a"), echo_call("2", "b")]),
        Message::tool_result("1", "r", false),
        Message::user("next"),
    ];
    assert!(Transcript::from_messages(incomplete, &c).unwrap_err().reason.contains("no result"));
    let pending = vec![Message::user("a"), Message::assistant("", vec![echo_call("1", "a")])];
    let t = Transcript::from_messages(pending, &c).unwrap();
    assert!(t.select(None, "characters").unwrap_err().0.contains("incomplete"));
    let not_user = vec![Message::assistant("hi", vec![])];
    assert!(Transcript::from_messages(not_user, &c).is_err());
    assert!(Transcript::from_messages(vec![], &c).is_err());
}

#[tokio::test]
async fn the_model_is_sent_only_what_fits() {
    let runs = Runs::default();
    let mut steps = Vec::new();
    for i in 0..20 {
        steps.push(calls(vec![echo_call(&format!("c{i}"), "0123456789")]));
    }
    steps.push(answer("ok"));
    let model = scripted(steps);
    // The tool specs are sent too, and take their part of the budget: 200 are left for the messages.
    let ctx = ContextConfig { max_context: Some(200 + tools_size(&runs)), ..ContextConfig::default() };
    let agent = agent_with(model.clone(), &runs, Limits::default()).context(ctx).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.messages.len(), 1 + 40 + 1, "the outcome keeps the whole transcript");
    for req in model.requests() {
        let size: u64 = req.messages.iter().map(|m| reins::transcript::measure(m, &CharCounter)).sum();
        assert!(size <= 200, "{size}");
        assert_eq!(req.messages.get(0), Some(&Message::user("do the task")));
        // Whole groups: every assistant call in the request has its result in it (the marker of left-out
        // groups, right after the first message, is the view's own item).
        let msgs: Vec<Message> = req.messages.iter().filter(|m| m.role() != "summary").cloned().collect();
        let t = Transcript::from_messages(msgs, &CharCounter).unwrap();
        assert!(t.is_complete());
    }
    let last = model.requests().last().unwrap().messages.to_vec();
    assert!(last.len() < 41);
    assert!(matches!(&last[1], Message::Summary { content, .. } if content.contains("earlier groups")));
}

#[tokio::test]
async fn a_budget_too_small_for_the_newest_group_ends_the_run_before_its_tools_run() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("1", &"x".repeat(300))])]);
    let ctx = ContextConfig { max_context: Some(200 + tools_size(&runs)), ..ContextConfig::default() };
    let agent = agent_with(model, &runs, Limits::default()).context(ctx).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::ContextLimit);
    assert_eq!(runs.get(), 0);
    assert!(o.error.unwrap().contains("newest turn"));
    assert_eq!(o.messages.len(), 1);
}

#[tokio::test]
async fn results_of_a_batch_are_bounded_together_so_the_newest_group_fits() {
    let big = FnTool::new("big", "Returns a lot.", json!({"type": "object"}), |_a, _c| async move {
        Ok(ToolOutput::Text("y".repeat(5_000)))
    });
    let small = FnTool::new("small", "Returns a little.", json!({"type": "object"}), |_a, _c| async move {
        Ok(ToolOutput::Text("tiny".into()))
    });
    let model = Arc::new(ScriptedModel::new(vec![
        calls(vec![call("1", "big", json!({})), call("2", "small", json!({})), call("3", "big", json!({}))]),
        answer("ok"),
    ]));
    let budget = 1_000;
    let ctx = ContextConfig { max_context: Some(budget), ..ContextConfig::default() };
    let agent = Agent::builder_shared(model.clone())
        .registry(Registry::builder().tool(big).tool(small).build().unwrap())
        .context(ctx)
        .build()
        .unwrap();
    let o = agent.run("go", CancellationToken::new()).await;
    is_status(&o, Status::Completed);
    let sent = &model.requests()[1];
    let size: u64 = sent.messages.iter().map(|m| reins::transcript::measure(m, &CharCounter)).sum();
    assert!(size <= budget, "{size}");
    assert_eq!(sent.messages.len(), 5);
    assert_eq!(o.messages[3], Message::tool_result("2", "tiny", false), "small results are kept whole");
    let Message::ToolResult(r) = &o.messages[2] else { panic!() };
    assert!(r.content.contains("characters omitted"));
}

#[tokio::test]
async fn each_result_is_bounded_to_max_tool_result_chars() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("1", &"z".repeat(10_000))]), answer("ok")]);
    let ctx = ContextConfig { max_tool_result_chars: Some(500), ..ContextConfig::default() };
    let agent = agent_with(model, &runs, Limits::default()).context(ctx).build().unwrap();
    let o = run(&agent).await;
    let Message::ToolResult(r) = &o.messages[2] else { panic!() };
    assert!(r.content.chars().count() <= 500);
    assert!(r.content.contains("characters omitted"));
}

#[cfg(feature = "tiktoken")]
#[test]
fn the_tiktoken_counter_counts_tokens() {
    use reins::TokenCounter;
    let c = reins::TiktokenCounter::o200k_base().unwrap();
    assert_eq!(c.unit(), "tokens");
    let n = c.count("hello world, hello world");
    assert!(n > 0 && n < 24);
    let (b, size) = reins::bound_to_units(&"word ".repeat(2000), 100, &c);
    assert!(size <= 100 && c.count(&b) == size);
}

#[tokio::test]
async fn a_result_cut_to_ten_characters_still_says_it_was_cut() {
    let runs = Runs::default();
    let text = "z".repeat(10_000);
    let model = scripted(vec![calls(vec![echo_call("1", &text)]), answer("ok")]);
    let ctx = ContextConfig { max_tool_result_chars: Some(10), ..ContextConfig::default() };
    let agent = agent_with(model, &runs, Limits::default()).context(ctx).build().unwrap();
    let o = run(&agent).await;
    let Message::ToolResult(r) = &o.messages[2] else { panic!() };
    assert!(r.content.chars().count() <= 10, "{:?}", r.content);
    assert_eq!(read_cut(&text, &r.content), Some((2, 10_000 - 2)), "{:?}", r.content);
    assert_eq!(r.content, "zz[…9998]");
}

#[test]
fn tool_specs_are_measured_by_name_description_and_schema() {
    let runs = Runs::default();
    let specs = registry(&runs).specs().clone();
    let by_hand: u64 = specs
        .iter()
        .map(|s| {
            (s.name.chars().count() + s.description.chars().count() + s.input_schema.to_string().chars().count()) as u64
        })
        .sum();
    assert!(by_hand > 0);
    assert_eq!(reins::transcript::measure_tools(&specs, &CharCounter), by_hand);
}

/// A budget that holds the messages (and the tool specs) but not the instructions too ends the run
/// `context_limit` before any model call; the same budget without the instructions completes.
#[tokio::test]
async fn instructions_are_counted_in_the_context_budget() {
    let runs = Runs::default();
    let instructions = "Follow the house rules. ".repeat(20); // 480 characters
    let budget = tools_size(&runs) + 300;
    let run_with = |instructions: Option<String>| {
        let runs = runs.clone();
        async move {
            let model = scripted(vec![calls(vec![echo_call("1", "hi")]), answer("ok")]);
            let ctx = ContextConfig { max_context: Some(budget), ..ContextConfig::default() };
            let mut b = agent_with(model.clone(), &runs, Limits::default()).context(ctx);
            if let Some(i) = instructions {
                b = b.instructions(i);
            }
            (run(&b.build().unwrap()).await, model)
        }
    };
    let (o, model) = run_with(None).await;
    is_status(&o, Status::Completed);
    assert_eq!(model.requests().len(), 2);
    assert!(model.requests().iter().all(|r| r.instructions.is_none()));

    let (o, model) = run_with(Some(instructions.clone())).await;
    is_status(&o, Status::ContextLimit);
    let error = o.error.clone().unwrap();
    assert!(error.contains("instructions (480 characters)"), "{error}");
    assert_eq!(model.calls(), 0, "no model call: the instructions do not fit");
    assert_eq!(o.instructions.as_deref(), Some(instructions.as_str()));

    // Instructions that fit are sent with every call, and the messages get what is left.
    let (o, model) = run_with(Some("Be brief.".into())).await;
    is_status(&o, Status::Completed);
    for req in model.requests() {
        assert_eq!(req.instructions.as_deref(), Some("Be brief."));
        assert!(!req.messages.iter().any(|m| m.content().contains("Be brief.")), "never a message");
    }
    assert_eq!(o.instructions.as_deref(), Some("Be brief."));
}

/// Under a budget, the newest group must fit with the instructions: a turn that fits the budget alone but
/// not next to the instructions is refused before its tools run.
#[tokio::test]
async fn a_turn_that_fits_only_without_the_instructions_runs_no_tool() {
    let runs = Runs::default();
    let budget = tools_size(&runs) + 400;
    let model = scripted(vec![calls(vec![echo_call("1", &"x".repeat(250))])]);
    let ctx = ContextConfig { max_context: Some(budget), ..ContextConfig::default() };
    let agent = agent_with(model, &runs, Limits::default()).context(ctx).instructions("i".repeat(200)).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::ContextLimit);
    assert_eq!(runs.get(), 0);
    let error = o.error.unwrap();
    assert!(error.contains("newest turn") && error.contains("instructions and tool specs"), "{error}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the instructions, the budget and the turns, every request holds its messages, the
    /// instructions and the tool specs within the budget, or the run ends `context_limit` first.
    #[test]
    fn every_request_fits_the_budget_with_the_instructions_and_the_tool_specs(
        instructions in "[a-zé ]{0,300}",
        room in 20u64..1500,
        texts in proptest::collection::vec(0usize..300, 0..8),
    ) {
        let runs = Runs::default();
        let tools = tools_size(&runs);
        let budget = tools + room;
        let mut steps: Vec<reins::ScriptStep> =
            texts.iter().enumerate().map(|(i, n)| calls(vec![echo_call(&format!("c{i}"), &"y".repeat(*n))]).into()).collect();
        steps.push(answer("ok").into());
        let model = Arc::new(ScriptedModel::new(steps));
        let ctx = ContextConfig { max_context: Some(budget), ..ContextConfig::default() };
        let agent = agent_with(model.clone(), &runs, Limits::default()).context(ctx).instructions(instructions.clone()).build().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let o = rt.block_on(run(&agent));
        let said = reins::TokenCounter::count(&CharCounter, &instructions);
        for req in model.requests() {
            prop_assert_eq!(req.instructions.as_deref().unwrap_or(""), instructions.as_str());
            let messages: u64 = req.messages.iter().map(|m| reins::transcript::measure(m, &CharCounter)).sum();
            prop_assert!(messages + said + tools <= budget, "{} + {} + {} > {}", messages, said, tools, budget);
        }
        prop_assert!(matches!(o.status, Status::Completed | Status::ContextLimit), "{:?}: {:?}", o.status, o.error);
        if said + tools + reins::TokenCounter::count(&CharCounter, "do the task") > budget {
            prop_assert_eq!(model.calls(), 0, "no call when the instructions alone do not fit");
        }
    }
}

/// Any JSON value: strings with quotes, backslashes, every control character and non-ASCII text, keys too;
/// integers, negative ones and floats.
fn any_json() -> impl Strategy<Value = serde_json::Value> {
    let text = "[\\x00-\\x1f\"\\\\a-z é😀\u{7f}]{0,10}";
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        text.prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
            proptest::collection::vec((text, inner), 0..5)
                .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A JSON value is measured (without writing it) as the characters of its compact text.
    #[test]
    fn json_is_counted_as_the_characters_of_its_compact_text(v in any_json()) {
        use reins::TokenCounter;
        prop_assert_eq!(CharCounter.count_json(&v), v.to_string().chars().count() as u64);
    }
}

#[test]
fn json_escapes_are_counted_as_written() {
    use reins::TokenCounter;
    for v in [
        json!({"text": "hello"}),
        json!({"a\"b": "\\\n\t\u{1}\u{1f}\u{7f}é😀", "n": [0, 9, 10, 99, 100, u64::MAX, -1, -10, 1.5, -0.0, 1e300]}),
        json!([null, true, false, "", {}, []]),
    ] {
        assert_eq!(CharCounter.count_json(&v), v.to_string().chars().count() as u64, "{v}");
    }
}
