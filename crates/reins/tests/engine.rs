//! The run engine end to end: limits, cancellation, deadlines, batches, policy, model errors.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use reins::{
    Agent, Decision, FnTool, Limits, Message, ModelError, ModelResponse, Registry, ScriptStep, ScriptedModel, Status,
    ToolCall, ToolOutput, Usage,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn one_tool_call_then_an_answer() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("1", "hello")]), answer("done")]);
    let agent = agent_with(model.clone(), &runs, Limits::default()).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.answer.as_deref(), Some("done"));
    assert_eq!((o.steps, o.tool_calls, runs.get()), (2, 1, 1));
    assert_eq!(o.messages.len(), 4);
    // A string result is recorded as the string itself, not JSON-encoded again.
    assert_eq!(o.messages[2], Message::tool_result("1", "hello", false));
    model.assert_complete();
    // The second request carried the whole conversation and the tools.
    let reqs = model.requests();
    assert_eq!(reqs[1].messages.len(), 3);
    assert_eq!(reqs[1].tools.len(), 4);
    assert_coherent(&o);
}

#[tokio::test]
async fn step_limit_counts_model_responses() {
    let runs = Runs::default();
    let model = scripted(vec![
        calls(vec![echo_call("1", "a")]),
        calls(vec![echo_call("2", "b")]),
        calls(vec![echo_call("3", "c")]),
        answer("never"),
    ]);
    let agent = agent_with(model.clone(), &runs, Limits { max_steps: Some(2), ..Limits::default() }).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::StepLimit);
    assert_eq!((o.steps, runs.get(), model.calls()), (2, 2, 2));
    assert!(o.error.as_deref().unwrap().contains("max_steps 2"));
    assert_coherent(&o);
}

#[tokio::test]
async fn a_batch_over_the_tool_budget_runs_no_call_and_is_not_recorded() {
    let runs = Runs::default();
    let model = scripted(vec![
        calls(vec![echo_call("1", "a")]),
        calls(vec![echo_call("2", "b"), echo_call("3", "c")]),
        answer("never"),
    ]);
    let agent =
        agent_with(model.clone(), &runs, Limits { max_tool_calls: Some(2), ..Limits::default() }).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::ToolLimit);
    assert_eq!(runs.get(), 1, "no call of the refused batch runs");
    assert_eq!(o.tool_calls, 1);
    assert_eq!(o.messages.len(), 3, "the refused turn is not recorded");
    assert_coherent(&o);
}

#[tokio::test]
async fn unknown_and_invalid_calls_count_against_the_tool_budget() {
    let runs = Runs::default();
    let model = scripted(vec![
        calls(vec![call("1", "nope", json!({})), call("2", "echo", json!({"text": 5}))]),
        calls(vec![echo_call("3", "x")]),
    ]);
    let agent =
        agent_with(model.clone(), &runs, Limits { max_tool_calls: Some(2), ..Limits::default() }).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::ToolLimit);
    assert_eq!(runs.get(), 0);
    assert_eq!(o.tool_calls, 2);
    match &o.messages[2] {
        Message::ToolResult(r) => {
            assert!(r.is_error);
            assert!(r.content.contains("unknown tool \"nope\""), "{}", r.content);
            assert!(r.content.contains("echo"), "lists the available tools: {}", r.content);
        }
        m => panic!("{m:?}"),
    }
    match &o.messages[3] {
        Message::ToolResult(r) => assert!(r.is_error && r.content.contains("/text"), "{}", r.content),
        m => panic!("{m:?}"),
    }
}

#[tokio::test]
async fn token_limits_are_checked_after_each_response_before_its_tools() {
    for (limits, status_ok) in [
        (Limits { max_input_tokens: Some(150), ..Limits::default() }, false),
        (Limits { max_output_tokens: Some(15), ..Limits::default() }, false),
        (Limits { max_total_tokens: Some(165), ..Limits::default() }, false),
        (Limits { max_total_tokens: Some(1000), ..Limits::default() }, true),
    ] {
        let runs = Runs::default();
        let model = scripted(vec![
            calls(vec![echo_call("1", "a")]).with_usage(Usage::new(100, 10)),
            calls(vec![echo_call("2", "b")]).with_usage(Usage::new(100, 10)),
            answer("ok").with_usage(Usage::new(1, 1)),
        ]);
        let agent = agent_with(model, &runs, limits).build().unwrap();
        let o = run(&agent).await;
        if status_ok {
            is_status(&o, Status::Completed);
            assert_eq!(o.usage.total_tokens, 222);
        } else {
            is_status(&o, Status::TokenLimit);
            assert_eq!(runs.get(), 1, "the tools of the response that crossed the limit never run");
            assert_eq!(o.messages.len(), 3);
            assert_eq!(o.usage.input_tokens, 200, "the usage of the refused response is still counted");
        }
        assert_coherent(&o);
    }
}

#[tokio::test]
async fn usage_totals_say_how_many_calls_reported_usage() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("1", "a")]), answer("ok").with_usage(Usage::new(7, 3))]);
    let agent = agent_with(model, &runs, Limits::default()).build().unwrap();
    let o = run(&agent).await;
    assert_eq!(o.usage.calls_with_usage, 1);
    assert_eq!(o.usage.calls_without_usage, 1);
    assert_eq!(o.usage.total_tokens, 10);
}

#[tokio::test]
async fn model_errors_and_malformed_responses_end_the_run_and_run_no_tool() {
    let cases: Vec<ScriptStep> = vec![
        ScriptStep::Fail(ModelError::Failed("upstream 503".into())),
        ScriptStep::Raw(json!({"content": 5})),
        ScriptStep::Raw(json!({"tool_calls": [{"id": "", "name": "echo", "arguments": {}}]})),
        ScriptStep::Raw(json!({"tool_calls": [{"id": "1", "name": "", "arguments": {}}]})),
        ScriptStep::Raw(json!({"tool_calls": [{"id": "1", "name": "echo"}]})),
        ScriptStep::Raw(
            json!({"tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "a"}}, {"id": "1", "name": "echo", "arguments": {"text": "b"}}]}),
        ),
        ScriptStep::Raw(json!({"content": "x", "usage": {"input_tokens": -1, "output_tokens": 0}})),
        ScriptStep::Raw(json!({"content": "x", "usage": {"input_tokens": u64::MAX, "output_tokens": 1}})),
        ScriptStep::Raw(json!([1, 2])),
        ScriptStep::Respond(ModelResponse::tool_calls("", vec![echo_call("1", "a"), echo_call("1", "b")])),
    ];
    for (i, step) in cases.into_iter().enumerate() {
        let runs = Runs::default();
        let model = scripted(vec![ScriptStep::Respond(calls(vec![echo_call("a", "first")])), step]);
        let agent = agent_with(model, &runs, Limits::default()).build().unwrap();
        let o = run(&agent).await;
        assert_eq!(o.status, Status::ModelError, "case {i}: {:?}", o.error);
        assert!(o.error.as_deref().is_some_and(|e| !e.is_empty()), "case {i} has a message");
        assert_eq!(runs.get(), 1, "case {i}: only the first turn's tool ran");
        assert_eq!(o.messages.len(), 3, "case {i}: nothing of the bad turn is recorded");
        assert_eq!(o.usage.calls_with_usage + o.usage.calls_without_usage, 1, "case {i}");
        assert_coherent(&o);
    }
}

#[tokio::test]
async fn an_exhausted_script_is_a_model_error() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("1", "a")])]);
    let agent = agent_with(model, &runs, Limits::default()).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::ModelError);
    assert!(o.error.unwrap().contains("exhausted"));
}

#[tokio::test]
async fn cancellation_mid_batch_gives_aborted_results_to_unfinished_calls() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![
        echo_call("1", "a"),
        call("2", "sleep", json!({"ms": 60_000})),
        echo_call("3", "never"),
    ])]);
    let agent = agent_with(model, &runs, Limits::default()).build().unwrap();
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.cancel();
    });
    let o = agent.run("go", cancel).await;
    is_status(&o, Status::Aborted);
    assert_eq!(runs.get(), 2, "the third call never started");
    assert_eq!(o.messages.len(), 5);
    assert_eq!(o.messages[2], Message::tool_result("1", "a", false));
    for m in &o.messages[3..] {
        match m {
            Message::ToolResult(r) => assert!(r.is_error && r.content.starts_with("aborted"), "{r:?}"),
            m => panic!("{m:?}"),
        }
    }
    assert_coherent(&o);
}

#[tokio::test]
async fn caller_cancellation_wins_even_when_the_deadline_passes_while_a_tool_ignores_it() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![call("1", "stubborn", json!({"ms": 2_000}))])]);
    let agent = agent_with(model, &runs, Limits { timeout: Some(Duration::from_millis(300)), ..Limits::default() })
        .build()
        .unwrap();
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c2.cancel();
    });
    let o = agent.run("go", cancel.clone()).await;
    is_status(&o, Status::Aborted);
    assert_coherent(&o);
}

#[tokio::test]
async fn the_deadline_ends_a_batch_with_timeout() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![call("1", "stubborn", json!({"ms": 10_000})), echo_call("2", "x")])]);
    let agent = agent_with(model, &runs, Limits { timeout: Some(Duration::from_millis(150)), ..Limits::default() })
        .build()
        .unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Timeout);
    assert_eq!(runs.get(), 1);
    assert_eq!(o.messages.len(), 4);
    assert_coherent(&o);
}

#[tokio::test]
async fn the_deadline_reaches_the_model_call() {
    let runs = Runs::default();
    let model =
        scripted(vec![ScriptStep::Delay(Duration::from_secs(30), Box::new(ScriptStep::Respond(answer("late"))))]);
    let agent = agent_with(model, &runs, Limits { timeout: Some(Duration::from_millis(100)), ..Limits::default() })
        .build()
        .unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Timeout);
    assert_eq!(o.steps, 0);
}

#[tokio::test]
async fn a_response_arriving_after_cancellation_is_not_counted() {
    // The model ignores cancellation and answers anyway, with usage.
    struct Late(Arc<AtomicBool>);
    #[async_trait::async_trait]
    impl reins::Model for Late {
        async fn generate(
            &self,
            _r: &reins::ModelRequest,
            cancel: &CancellationToken,
        ) -> Result<ModelResponse, ModelError> {
            cancel.cancelled().await;
            self.0.store(true, Ordering::SeqCst);
            Ok(answer("late").with_usage(Usage::new(1000, 1000)))
        }
    }
    let answered = Arc::new(AtomicBool::new(false));
    let agent = Agent::builder(Late(answered.clone())).build().unwrap();
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        c2.cancel();
    });
    let o = agent.run("go", cancel).await;
    is_status(&o, Status::Aborted);
    assert_eq!(o.usage.total_tokens, 0);
    assert_eq!(o.steps, 0);
    assert_eq!(o.messages.len(), 1);
}

#[tokio::test]
async fn durations_of_any_size_are_accepted() {
    for d in [Duration::MAX, Duration::from_secs(u64::MAX / 2), Duration::from_nanos(u64::MAX)] {
        let runs = Runs::default();
        let model = scripted(vec![calls(vec![echo_call("1", "a")]), answer("ok")]);
        let agent = agent_with(model, &runs, Limits { timeout: Some(d), tool_timeout: Some(d), ..Limits::default() })
            .build()
            .unwrap();
        let o = run(&agent).await;
        is_status(&o, Status::Completed);
    }
}

#[tokio::test]
async fn invalid_configuration_is_an_error_when_built() {
    let model = ScriptedModel::new(Vec::<ScriptStep>::new());
    assert!(Agent::builder(model).limits(Limits { max_steps: Some(0), ..Limits::default() }).build().is_err());
    let model = ScriptedModel::new(Vec::<ScriptStep>::new());
    assert!(
        Agent::builder(model).limits(Limits { timeout: Some(Duration::ZERO), ..Limits::default() }).build().is_err()
    );
}

#[tokio::test]
async fn a_tool_that_overruns_its_timeout_gets_an_error_and_the_run_goes_on() {
    let runs = Runs::default();
    let model =
        scripted(vec![calls(vec![call("1", "stubborn", json!({"ms": 5_000})), echo_call("2", "after")]), answer("ok")]);
    let agent = agent_with(model, &runs, Limits { tool_timeout: Some(Duration::from_millis(50)), ..Limits::default() })
        .build()
        .unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    match &o.messages[2] {
        Message::ToolResult(r) => assert!(r.is_error && r.content.contains("timed out"), "{r:?}"),
        m => panic!("{m:?}"),
    }
    assert_eq!(o.messages[3], Message::tool_result("2", "after", false));
}

#[tokio::test]
async fn a_panicking_tool_is_an_error_result() {
    let tool = FnTool::new("boom", "Panics.", json!({"type": "object"}), |_a, _c| async move {
        if true {
            panic!("kaboom");
        }
        Ok(ToolOutput::Text(String::new()))
    });
    let model = ScriptedModel::new(vec![calls(vec![call("1", "boom", json!({}))]), answer("recovered")]);
    let agent = Agent::builder(model).registry(Registry::builder().tool(tool).build().unwrap()).build().unwrap();
    let o = agent.run("go", CancellationToken::new()).await;
    is_status(&o, Status::Completed);
    match &o.messages[2] {
        Message::ToolResult(r) => assert!(r.is_error && r.content.contains("kaboom"), "{r:?}"),
        m => panic!("{m:?}"),
    }
}

#[tokio::test]
async fn parallel_safe_tools_run_concurrently_and_results_keep_call_order() {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (f, p) = (in_flight.clone(), peak.clone());
    let tool = FnTool::new(
        "wait",
        "Waits.",
        json!({"type": "object", "properties": {"ms": {"type": "integer"}}}),
        move |a, _c| {
            let (f, p) = (f.clone(), p.clone());
            async move {
                let now = f.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(a["ms"].as_u64().unwrap_or(0))).await;
                f.fetch_sub(1, Ordering::SeqCst);
                Ok(ToolOutput::Text(format!("waited {}", a["ms"])))
            }
        },
    )
    .parallel();
    let batch = vec![
        call("a", "wait", json!({"ms": 120})),
        call("b", "wait", json!({"ms": 10})),
        call("c", "wait", json!({"ms": 60})),
    ];
    let model = ScriptedModel::new(vec![calls(batch), answer("ok")]);
    let agent = Agent::builder(model).registry(Registry::builder().tool(tool).build().unwrap()).build().unwrap();
    let o = agent.run("go", CancellationToken::new()).await;
    is_status(&o, Status::Completed);
    assert_eq!(peak.load(Ordering::SeqCst), 3, "all three ran at once");
    let ids: Vec<_> = o.messages[2..5]
        .iter()
        .map(|m| match m {
            Message::ToolResult(r) => r.content.clone(),
            m => panic!("{m:?}"),
        })
        .collect();
    assert_eq!(ids, ["waited 120", "waited 10", "waited 60"]);
}

#[tokio::test]
async fn tools_not_declared_parallel_run_one_at_a_time() {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (f, p) = (in_flight.clone(), peak.clone());
    let tool = FnTool::new("wait", "Waits.", json!({"type": "object"}), move |_a, _c| {
        let (f, p) = (f.clone(), p.clone());
        async move {
            let now = f.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            f.fetch_sub(1, Ordering::SeqCst);
            Ok(ToolOutput::Text("ok".into()))
        }
    });
    let model =
        ScriptedModel::new(vec![calls(vec![call("a", "wait", json!({})), call("b", "wait", json!({}))]), answer("ok")]);
    let agent = Agent::builder(model).registry(Registry::builder().tool(tool).build().unwrap()).build().unwrap();
    let o = agent.run("go", CancellationToken::new()).await;
    is_status(&o, Status::Completed);
    assert_eq!(peak.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_policy_allows_denies_or_stops() {
    let runs = Runs::default();
    let model = scripted(vec![
        calls(vec![echo_call("1", "fine"), echo_call("2", "secret")]),
        calls(vec![echo_call("3", "rm -rf")]),
        answer("never"),
    ]);
    let policy = |c: &ToolCall| match c.arguments["text"].as_str() {
        Some("secret") => Decision::Deny("no secrets".into()),
        Some("rm -rf") => Decision::Stop("destructive request".into()),
        _ => Decision::Allow,
    };
    let agent = agent_with(model, &runs, Limits::default()).policy(policy).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Aborted);
    assert!(o.error.as_deref().unwrap().contains("destructive request"));
    assert_eq!(runs.get(), 1, "only the allowed call ran");
    match &o.messages[3] {
        Message::ToolResult(r) => assert!(r.is_error && r.content.contains("no secrets")),
        m => panic!("{m:?}"),
    }
    assert_coherent(&o);
}

#[tokio::test]
async fn sixty_failing_calls_are_all_recovered_from() {
    let runs = Runs::default();
    let mut steps = Vec::new();
    for i in 0..60 {
        let c = match i % 3 {
            0 => call(&format!("c{i}"), "fail", json!({"message": format!("failure {i}")})),
            1 => call(&format!("c{i}"), "echo", json!({"text": i})),
            _ => call(&format!("c{i}"), "missing_tool", json!({})),
        };
        steps.push(calls(vec![c]));
    }
    steps.push(answer("recovered"));
    let model = scripted(steps);
    let agent = agent_with(model.clone(), &runs, Limits { max_steps: Some(100), ..Limits::default() }).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.tool_calls, 60);
    assert_eq!(runs.get(), 20, "only the `fail` calls reached a tool");
    let errors = o.messages.iter().filter(|m| matches!(m, Message::ToolResult(r) if r.is_error)).count();
    assert_eq!(errors, 60);
    model.assert_complete();
    assert_coherent(&o);
}

#[tokio::test]
async fn a_panicking_model_is_a_model_error() {
    let model = reins::FnModel::new(|_r| -> Result<ModelResponse, ModelError> { panic!("model bug") });
    let agent = Agent::builder(model).build().unwrap();
    let o = agent.run("go", CancellationToken::new()).await;
    is_status(&o, Status::ModelError);
    assert!(o.error.unwrap().contains("model bug"));
}

#[tokio::test]
async fn the_run_state_serializes_and_resumes_mid_run() {
    let runs = Runs::default();
    let reg = registry(&runs);
    let ctx = reins::ContextConfig::default();
    let mut state = reins::RunState::new("r1", "go", Limits::default(), &ctx)
        .unwrap()
        .with_instructions(Some("Be exact.".into()), &ctx);
    match state.next_action(&reg, &ctx) {
        reins::Action::CallModel(req) => assert_eq!(req.instructions.as_deref(), Some("Be exact.")),
        a => panic!("{a:?}"),
    }
    let adm = state.on_model_response(Ok(calls(vec![echo_call("1", "a"), echo_call("2", "b")])), &reg, None, &ctx);
    assert_eq!(adm, reins::Admission::Batch);
    // Persist mid-batch, restore elsewhere.
    let json = serde_json::to_string(&state).unwrap();
    let mut restored: reins::RunState = serde_json::from_str(&json).unwrap();
    assert_eq!(restored.instructions(), Some("Be exact."), "the instructions are part of the state");
    let ids: Vec<String> = match restored.next_action(&reg, &ctx) {
        reins::Action::RunTools(b) => {
            assert!(b.iter().all(|p| *p.plan == reins::Plan::Run));
            b.iter().map(|p| p.call.id.to_string()).collect()
        }
        a => panic!("{a:?}"),
    };
    assert_eq!(ids, ["1", "2"]);
    restored.record_batch(vec![Some(reins::CallResult::text("a", false)), None], "interrupted", None, &ctx);
    // The state carries its instructions: an agent without any still sends them.
    let model = Arc::new(ScriptedModel::new(vec![answer("done")]));
    let agent = Agent::builder_shared(model.clone()).registry(registry(&runs)).build().unwrap();
    let o = agent.drive(restored, CancellationToken::new()).await;
    is_status(&o, Status::Completed);
    assert_eq!(model.requests()[0].instructions.as_deref(), Some("Be exact."));
    assert_eq!(o.instructions.as_deref(), Some("Be exact."));
    assert_eq!(o.messages[3], Message::tool_result("2", "interrupted", true));
    assert_coherent(&o);
}

#[tokio::test]
async fn resume_reconciles_an_interrupted_batch() {
    let ctx = reins::ContextConfig::default();
    let messages = vec![
        Message::user("go"),
        Message::assistant("", vec![echo_call("1", "a"), echo_call("2", "b")]),
        Message::tool_result("1", "a", false),
    ];
    let state = reins::RunState::resume("r", messages, Limits::default(), &ctx, "interrupted: not run").unwrap();
    let t = state.transcript().to_vec();
    assert_eq!(t[3], Message::tool_result("2", "interrupted: not run", true));
    // Orphan results are refused.
    let bad = vec![Message::user("go"), Message::tool_result("x", "?", false)];
    assert!(reins::RunState::resume("r", bad, Limits::default(), &ctx, "i").is_err());
}

/// A script that follows the transcript continues a conversation where it is — as a new process does with a
/// resumed session, or a durable turn after a restart — instead of answering turn 1 again; a conversation
/// recorded by another model starts it at its first turn; in one process, runs after runs take turns in order.
#[tokio::test]
async fn a_script_following_the_transcript_continues_at_the_turns_recorded() {
    let turns = || vec![calls(vec![echo_call("c1", "a")]), calls(vec![echo_call("c2", "b")]), answer("done")];
    let runs = Runs::default();
    // The first process: one turn and its result, then the process is gone.
    let first = Arc::new(ScriptedModel::new(turns()).following_transcript());
    let agent = agent_with(first, &runs, Limits { max_steps: Some(1), ..Limits::default() }).build().unwrap();
    let cut = run(&agent).await;
    is_status(&cut, Status::StepLimit);
    // The next process: a fresh model from the same script, on the recorded conversation.
    let next = Arc::new(ScriptedModel::new(turns()).following_transcript());
    let agent = agent_with(next.clone(), &runs, Limits::default()).build().unwrap();
    let state = reins::RunState::resume("r2", cut.messages.clone(), Limits::default(), agent.context(), "x").unwrap();
    let o = agent.drive(state, CancellationToken::new()).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.answer.as_deref(), Some("done"));
    next.assert_complete();
    assert_eq!(next.calls(), 2, "turns 2 and 3, not turn 1 again");
    let ids: Vec<String> = o.messages.iter().flat_map(|m| m.tool_calls().iter().map(|c| c.id.to_string())).collect();
    assert_eq!(ids, ["c1", "c2"]);

    // Another script on that conversation starts at its first turn.
    let other = Arc::new(ScriptedModel::new(vec![answer("fresh")]).following_transcript());
    let agent = agent_with(other.clone(), &runs, Limits::default()).build().unwrap();
    let state = reins::RunState::resume("r3", cut.messages.clone(), Limits::default(), agent.context(), "x").unwrap();
    assert_eq!(agent.drive(state, CancellationToken::new()).await.answer.as_deref(), Some("fresh"));

    // In one process, two new runs of one model take its turns in order (a sub-agent called twice).
    let shared = Arc::new(ScriptedModel::new(vec![answer("one"), answer("two")]).following_transcript());
    let agent = agent_with(shared, &runs, Limits::default()).build().unwrap();
    assert_eq!(run(&agent).await.answer.as_deref(), Some("one"));
    assert_eq!(run(&agent).await.answer.as_deref(), Some("two"));
}
