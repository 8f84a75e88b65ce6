//! Approvals and hooks in the library: a policy that asks, decisions bound to a call's id and exact
//! arguments, edits validated again, an in-process approver, and hooks before and after calls and at the
//! final answer (fail closed).

mod common;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use common::*;
use reins::{
    Agent, ApprovalDecision, ApprovalError, ApprovalRequest, Approver, Decision, DecisionError, GivenDecisions, Hook,
    HookContext, HookError, HookEvent, HookResult, Limits, Message, Plan, PostTool, PreTool, RunState, Status,
    StopAnswer, ToolCall, arguments_hash,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn ask_echo(call: &ToolCall) -> Decision {
    if call.name == "echo" { Decision::Ask("echo needs a person".into()) } else { Decision::Allow }
}

/// Ends `awaiting_approval` and continues with `decisions` from the outcome's batch, like `reins approve`.
async fn resume_with(
    agent: &Agent,
    o: &reins::Outcome,
    decide: impl Fn(&[reins::PendingCall]) -> Vec<ApprovalDecision>,
) -> Result<reins::Outcome, DecisionError> {
    let mut state = RunState::resume_pending(
        "run-2",
        o.messages.clone(),
        o.pending.clone(),
        agent.limits().clone(),
        agent.context(),
    )
    .unwrap();
    for d in decide(&o.pending) {
        state.decide(&d, agent.registry())?;
    }
    Ok(agent.drive(state, CancellationToken::new()).await)
}

#[tokio::test]
async fn ask_awaits_then_an_approval_runs_the_call_exactly_once() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("c1", "hi")]), answer("done")]);
    let agent = agent_with(model.clone(), &runs, Limits::default()).policy(ask_echo).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::AwaitingApproval);
    assert_eq!(runs.get(), 0, "nothing runs before the decision");
    assert_eq!(o.pending.len(), 1);
    assert_eq!(o.pending[0].plan, Plan::Ask { reason: "echo needs a person".into() });
    assert_eq!(o.pending[0].arguments_hash, arguments_hash(&json!({"text": "hi"})));
    assert!(o.error.as_deref().unwrap().contains("c1"));
    // The serialized outcome carries the batch.
    let v = serde_json::to_value(&o).unwrap();
    assert_eq!(v["pending"][0]["kind"], "ask");
    assert_eq!(v["status"], "awaiting_approval");

    let o2 = resume_with(&agent, &o, |p| vec![ApprovalDecision::approve(&p[0])]).await.unwrap();
    is_status(&o2, Status::Completed);
    assert_eq!(runs.get(), 1);
    assert_eq!(o2.messages[2], Message::tool_result("c1", "hi", false));
    assert_coherent(&o2);
}

#[tokio::test]
async fn a_denied_call_never_runs_and_the_model_gets_the_reason() {
    let runs = Runs::default();
    let model =
        scripted(vec![calls(vec![echo_call("c1", "hi"), call("c2", "fail", json!({"message": "x"}))]), answer("ok")]);
    let agent = agent_with(model.clone(), &runs, Limits::default()).policy(ask_echo).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::AwaitingApproval);
    // The whole batch waits: the call needing no decision did not run either.
    assert_eq!(runs.get(), 0);
    assert_eq!(o.pending[1].plan, Plan::Run);
    let o2 = resume_with(&agent, &o, |p| vec![ApprovalDecision::deny(&p[0], "not today")]).await.unwrap();
    is_status(&o2, Status::Completed);
    assert_eq!(runs.get(), 1, "only the call that needed no decision ran");
    match &o2.messages[2] {
        Message::ToolResult(r) => {
            assert!(r.is_error && r.content.contains("not today"), "{}", r.content);
        }
        m => panic!("{m:?}"),
    }
    // The model saw the reason.
    assert!(model.requests()[1].messages.iter().any(|m| m.content().contains("not today")));
}

#[tokio::test]
async fn edited_arguments_are_validated_and_run_with_a_note() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("c1", "rm -rf /")]), answer("ok")]);
    let agent = agent_with(model.clone(), &runs, Limits::default()).policy(ask_echo).build().unwrap();
    let o = run(&agent).await;
    let bad = resume_with(&agent, &o, |p| vec![ApprovalDecision::edit(&p[0], json!({"text": 5}))]).await;
    match bad {
        Err(DecisionError::InvalidEdit { call_id, detail }) => {
            assert_eq!(call_id, "c1");
            assert!(detail.contains("text"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(runs.get(), 0);
    let o2 = resume_with(&agent, &o, |p| vec![ApprovalDecision::edit(&p[0], json!({"text": "ls"}))]).await.unwrap();
    is_status(&o2, Status::Completed);
    match &o2.messages[2] {
        Message::ToolResult(r) => {
            assert!(r.content.ends_with("\nls"), "{}", r.content);
            assert!(r.content.contains("changed by the approver"), "{}", r.content);
            // What the tool answered, as a replay takes it back out of the recorded result.
            assert_eq!(reins::without_edit_note(&r.content), "ls");
        }
        m => panic!("{m:?}"),
    }
    // The transcript keeps what the model proposed.
    assert_eq!(o2.messages[1].tool_calls()[0].arguments, json!({"text": "rm -rf /"}));
}

#[tokio::test]
async fn a_decision_for_other_arguments_does_not_apply() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("c1", "hi")]), answer("ok")]);
    let agent = agent_with(model.clone(), &runs, Limits::default()).policy(ask_echo).build().unwrap();
    let o = run(&agent).await;
    let stale = ApprovalDecision {
        call_id: "c1".into(),
        arguments_hash: arguments_hash(&json!({"text": "something else"})),
        verdict: reins::Verdict::Approve,
    };
    let r = resume_with(&agent, &o, |_| vec![stale.clone()]).await;
    assert!(matches!(r, Err(DecisionError::OtherArguments { .. })), "{r:?}");
    let unknown = ApprovalDecision { call_id: "zz".into(), ..stale.clone() };
    assert!(matches!(resume_with(&agent, &o, |_| vec![unknown.clone()]).await, Err(DecisionError::UnknownCall(_))));
    // Without a decision that applies, the continued run waits again; nothing ran.
    let o2 = resume_with(&agent, &o, |_| vec![]).await.unwrap();
    is_status(&o2, Status::AwaitingApproval);
    assert_eq!(runs.get(), 0);
    assert_eq!(o2.pending, o.pending);
}

struct Recording {
    seen: Mutex<Vec<ApprovalRequest>>,
    answer: fn(&ApprovalRequest) -> Result<Vec<ApprovalDecision>, ApprovalError>,
}

#[async_trait]
impl Approver for Recording {
    async fn decide(
        &self,
        request: &ApprovalRequest,
        _: &CancellationToken,
    ) -> Result<Vec<ApprovalDecision>, ApprovalError> {
        self.seen.lock().unwrap().push(request.clone());
        (self.answer)(request)
    }
}

#[tokio::test]
async fn an_approver_decides_in_process_and_its_decisions_are_events() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("c1", "hi")]), answer("done")]);
    let approver = Arc::new(Recording {
        seen: Mutex::new(Vec::new()),
        answer: |r| Ok(r.calls.iter().map(ApprovalDecision::approve).collect()),
    });
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let agent = agent_with(model, &runs, Limits::default())
        .policy(ask_echo)
        .approver(approver.clone())
        .observer(move |e: &reins::Event| {
            ev.lock().unwrap().push(serde_json::to_value(e.to_json()).unwrap());
            Ok(())
        })
        .build()
        .unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(runs.get(), 1);
    assert_eq!(approver.seen.lock().unwrap().len(), 1);
    let lines: Vec<Value> =
        events.lock().unwrap().iter().map(|v| serde_json::from_str(v.as_str().unwrap()).unwrap()).collect();
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    let req = types.iter().position(|t| *t == "approval_requested").unwrap();
    let dec = types.iter().position(|t| *t == "approval_decided").unwrap();
    let start = types.iter().position(|t| *t == "tool_start").unwrap();
    assert!(req < dec && dec < start, "{types:?}");
    assert_eq!(lines[dec]["decision"], "approve");

    // An approver that fails or leaves a call undecided ends the run awaiting approval.
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("c1", "hi")])]);
    let failing =
        Arc::new(Recording { seen: Mutex::new(Vec::new()), answer: |_| Err(ApprovalError("offline".into())) });
    let agent = agent_with(model, &runs, Limits::default()).policy(ask_echo).approver(failing).build().unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::AwaitingApproval);
    assert!(o.error.as_deref().unwrap().contains("offline"));
    assert_eq!(runs.get(), 0);
}

#[tokio::test]
async fn given_decisions_serve_the_first_batch_only() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("c1", "a")]), calls(vec![echo_call("c2", "b")]), answer("x")]);
    let agent = agent_with(model, &runs, Limits::default()).policy(ask_echo).build().unwrap();
    let o = run(&agent).await;
    let d = ApprovalDecision::approve(&o.pending[0]);
    let agent2 = agent_with(scripted(vec![calls(vec![echo_call("c2", "b")]), answer("x")]), &runs, Limits::default())
        .policy(ask_echo)
        .approver(Arc::new(GivenDecisions::new(vec![d])))
        .build()
        .unwrap();
    let state =
        RunState::resume_pending("r2", o.messages.clone(), o.pending.clone(), Limits::default(), agent2.context())
            .unwrap();
    let o2 = agent2.drive(state, CancellationToken::new()).await;
    is_status(&o2, Status::AwaitingApproval);
    assert_eq!(runs.get(), 1);
    assert_eq!(o2.pending[0].call_id, "c2");
}

type PreFn = fn(&ToolCall) -> Result<PreTool, HookError>;
type PostFn = fn(&HookResult) -> Result<PostTool, HookError>;
type StopFn = fn(&str, usize) -> Result<StopAnswer, HookError>;

/// A hook answering from a closure, counting its calls.
struct TestHook {
    event: HookEvent,
    pre: Option<PreFn>,
    post: Option<PostFn>,
    stop: Option<StopFn>,
    calls: Mutex<usize>,
}

impl TestHook {
    fn new(event: HookEvent) -> Self {
        Self { event, pre: None, post: None, stop: None, calls: Mutex::new(0) }
    }
}

#[async_trait]
impl Hook for TestHook {
    fn name(&self) -> &str {
        "test"
    }
    fn applies(&self, event: HookEvent, _tool: Option<&str>) -> bool {
        event == self.event
    }
    async fn pre_tool(&self, _: &HookContext, call: &ToolCall, _: &CancellationToken) -> Result<PreTool, HookError> {
        *self.calls.lock().unwrap() += 1;
        (self.pre.unwrap())(call)
    }
    async fn post_tool(
        &self,
        _: &HookContext,
        _: &ToolCall,
        r: &HookResult,
        _: &CancellationToken,
    ) -> Result<PostTool, HookError> {
        *self.calls.lock().unwrap() += 1;
        (self.post.unwrap())(r)
    }
    async fn stop(&self, _: &HookContext, answer: &str, _: &CancellationToken) -> Result<StopAnswer, HookError> {
        let n = {
            let mut c = self.calls.lock().unwrap();
            *c += 1;
            *c
        };
        (self.stop.unwrap())(answer, n)
    }
}

async fn with_hook(
    hook: TestHook,
    script: Vec<reins::ModelResponse>,
) -> (reins::Outcome, Runs, Arc<reins::ScriptedModel>) {
    let runs = Runs::default();
    let model = scripted(script);
    let agent = agent_with(model.clone(), &runs, Limits::default()).hook(Arc::new(hook)).build().unwrap();
    (run(&agent).await, runs, model)
}

fn result_of(o: &reins::Outcome, i: usize) -> &reins::ToolResult {
    match &o.messages[i] {
        Message::ToolResult(r) => r,
        m => panic!("{m:?}"),
    }
}

#[tokio::test]
async fn pre_tool_hooks_rewrite_deny_ask_and_fail_closed() {
    let script = || vec![calls(vec![echo_call("c1", "hi")]), answer("ok")];
    let mut h = TestHook::new(HookEvent::PreTool);
    h.pre = Some(|_| Ok(PreTool::Rewrite(json!({"text": "rewritten"}))));
    let (o, runs, _) = with_hook(h, script()).await;
    assert_eq!(runs.get(), 1);
    assert!(result_of(&o, 2).content.ends_with("\nrewritten"), "{}", result_of(&o, 2).content);

    let mut h = TestHook::new(HookEvent::PreTool);
    h.pre = Some(|_| Ok(PreTool::Rewrite(json!({"text": 1}))));
    let (o, runs, _) = with_hook(h, script()).await;
    assert_eq!(runs.get(), 0, "invalid rewritten arguments refuse the call");
    assert!(result_of(&o, 2).is_error && result_of(&o, 2).content.contains("invalid"));

    let mut h = TestHook::new(HookEvent::PreTool);
    h.pre = Some(|_| Ok(PreTool::Deny("not allowed here".into())));
    let (o, runs, _) = with_hook(h, script()).await;
    assert_eq!(runs.get(), 0);
    assert!(result_of(&o, 2).content.contains("not allowed here"));

    let mut h = TestHook::new(HookEvent::PreTool);
    h.pre = Some(|_| Err(HookError("timed out after 1s".into())));
    let (o, runs, _) = with_hook(h, script()).await;
    assert_eq!(runs.get(), 0, "a failing hook denies");
    assert!(result_of(&o, 2).content.contains("the hook failed: timed out"), "{}", result_of(&o, 2).content);

    let mut h = TestHook::new(HookEvent::PreTool);
    h.pre = Some(|_| Ok(PreTool::Ask("check it".into())));
    let (o, runs, _) = with_hook(h, script()).await;
    is_status(&o, Status::AwaitingApproval);
    assert_eq!(runs.get(), 0);
    assert_eq!(o.pending[0].plan, Plan::Ask { reason: "hook test: check it".into() });
}

#[tokio::test]
async fn post_tool_hooks_redact_before_recording_and_fail_closed() {
    let script = || vec![calls(vec![echo_call("c1", "token=s3cr3t")]), answer("ok")];
    let mut h = TestHook::new(HookEvent::PostTool);
    h.post = Some(|_| Ok(PostTool::Redact(vec!["s3cr3t".into()])));
    let (o, runs, model) = with_hook(h, script()).await;
    assert_eq!(runs.get(), 1);
    assert_eq!(result_of(&o, 2).content, "token=[REDACTED]");
    assert!(!model.requests()[1].messages.iter().any(|m| m.content().contains("s3cr3t") && m.tool_calls().is_empty()));

    let mut h = TestHook::new(HookEvent::PostTool);
    h.post = Some(|_| Err(HookError("garbage".into())));
    let (o, _, _) = with_hook(h, script()).await;
    assert!(result_of(&o, 2).is_error && !result_of(&o, 2).content.contains("s3cr3t"));
    assert!(result_of(&o, 2).content.contains("withheld"));
}

#[tokio::test]
async fn a_stop_hook_sends_the_model_back_once() {
    let mut h = TestHook::new(HookEvent::Stop);
    h.stop =
        Some(|_, n| if n == 1 { Ok(StopAnswer::Refuse("run the tests first".into())) } else { Ok(StopAnswer::Accept) });
    let (o, _, model) = with_hook(h, vec![answer("done?"), answer("done.")]).await;
    is_status(&o, Status::Completed);
    assert_eq!(o.answer.as_deref(), Some("done."));
    assert_eq!(o.steps, 2);
    assert_eq!(o.messages[2], Message::user("run the tests first"));
    model.assert_complete();

    // The refusal counts towards the step limit.
    let runs = Runs::default();
    let mut h = TestHook::new(HookEvent::Stop);
    h.stop = Some(|_, _| Ok(StopAnswer::Refuse("again".into())));
    let agent =
        agent_with(scripted(vec![answer("a"), answer("b")]), &runs, Limits { max_steps: Some(2), ..Limits::default() })
            .hook(Arc::new(h))
            .build()
            .unwrap();
    is_status(&run(&agent).await, Status::StepLimit);

    // A failing stop hook does not accept the answer.
    let mut h = TestHook::new(HookEvent::Stop);
    h.stop = Some(|_, _| Err(HookError("exit status 3".into())));
    let (o, _, _) = with_hook(h, vec![answer("done")]).await;
    is_status(&o, Status::Aborted);
    assert_eq!(o.answer, None);
    assert!(o.error.as_deref().unwrap().contains("exit status 3"));
}

/// A performer that performs in process and answers approvals itself (what a durable run's does with an
/// awakeable), approving every call it is asked about.
struct ApprovingPerformer {
    asked: Mutex<Vec<String>>,
}

impl reins::Performer for ApprovingPerformer {
    fn model_call<'a>(
        &'a self,
        _: reins::ModelStep,
        work: futures_util::future::BoxFuture<'a, Result<reins::ModelResponse, reins::ModelError>>,
    ) -> futures_util::future::BoxFuture<'a, Result<reins::ModelResponse, reins::ModelError>> {
        work
    }

    fn tool_call<'a>(
        &'a self,
        _: reins::ToolStep<'a>,
        work: futures_util::future::BoxFuture<'a, reins::CallResult>,
    ) -> futures_util::future::BoxFuture<'a, reins::CallResult> {
        work
    }

    fn approver(&self) -> Option<&dyn Approver> {
        Some(self)
    }
}

#[async_trait]
impl Approver for ApprovingPerformer {
    async fn decide(&self, r: &ApprovalRequest, _: &CancellationToken) -> Result<Vec<ApprovalDecision>, ApprovalError> {
        self.asked.lock().unwrap().extend(r.calls.iter().map(|c| c.call_id.clone()));
        Ok(r.calls.iter().map(ApprovalDecision::approve).collect())
    }
}

#[tokio::test]
async fn a_performers_approver_is_asked_instead_of_the_agents() {
    let runs = Runs::default();
    let model = scripted(vec![calls(vec![echo_call("c1", "hi")]), answer("done")]);
    // The agent's own approver would leave the call undecided.
    let agent = agent_with(model, &runs, Limits::default())
        .policy(ask_echo)
        .approver(Arc::new(GivenDecisions::new(Vec::new())))
        .build()
        .unwrap();
    let performer = ApprovingPerformer { asked: Mutex::default() };
    let state = RunState::new("r1", "go", Limits::default(), agent.context()).unwrap();
    let o = agent.drive_with(state, CancellationToken::new(), &performer).await;
    is_status(&o, Status::Completed);
    assert_eq!(*performer.asked.lock().unwrap(), ["c1"]);
    assert_eq!(runs.get(), 1);
}

mod check_decisions_props {
    use super::*;
    use proptest::prelude::*;

    /// A run waiting on `c1` and `c2` (echo, asked about) with `c3` (fail, runs without a decision).
    fn waiting() -> (Agent, reins::Outcome) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let runs = Runs::default();
        let model = scripted(vec![
            calls(vec![echo_call("c1", "a"), echo_call("c2", "b"), call("c3", "fail", json!({"message": "x"}))]),
            answer("ok"),
        ]);
        let agent = agent_with(model, &runs, Limits::default()).policy(ask_echo).build().unwrap();
        let o = rt.block_on(run(&agent));
        is_status(&o, Status::AwaitingApproval);
        (agent, o)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Taking the edit note off a recorded result gives back a tail of it, whatever the text, and exactly
        /// the tool's answer behind a note.
        #[test]
        fn the_edit_note_comes_off_and_nothing_else(text in "\\PC{0,60}", by in "[a-z ]{1,12}", answer in "\\PC{0,40}") {
            prop_assert!(text.ends_with(reins::without_edit_note(&text)));
            let noted = format!("[the arguments were changed by {by}: {{\"x\":1}}]\n{answer}");
            prop_assert_eq!(reins::without_edit_note(&noted), answer.as_str());
        }

        /// An approver's check of its decisions takes exactly what the run applies: the same decisions are
        /// refused with the same error by `check_decisions` and by `RunState::decide` one after the other.
        #[test]
        fn check_decisions_takes_what_the_run_applies(
            picks in proptest::collection::vec((0usize..4, any::<bool>(), 0u8..4), 0..5)
        ) {
            static W: std::sync::OnceLock<(Agent, reins::Outcome)> = std::sync::OnceLock::new();
            let (agent, o) = W.get_or_init(waiting);
            let decisions: Vec<ApprovalDecision> = picks
                .iter()
                .map(|&(i, hash_ok, verdict)| {
                    let call_id = ["c1", "c2", "c3", "zz"][i].to_owned();
                    let arguments = o.pending.iter().find(|p| p.call_id == call_id).map_or(json!({}), |p| p.arguments.clone());
                    let arguments_hash = arguments_hash(if hash_ok { &arguments } else { &Value::Null });
                    let verdict = match verdict {
                        0 => reins::Verdict::Approve,
                        1 => reins::Verdict::Deny { reason: "no".into() },
                        2 => reins::Verdict::Edit { arguments: json!({"text": "edited"}) },
                        _ => reins::Verdict::Edit { arguments: json!({"text": 5}) },
                    };
                    ApprovalDecision { call_id, arguments_hash, verdict }
                })
                .collect();
            let mut state = RunState::resume_pending(
                "r2", o.messages.clone(), o.pending.clone(), agent.limits().clone(), agent.context(),
            ).unwrap();
            let applied = decisions.iter().try_for_each(|d| state.decide(d, agent.registry()));
            prop_assert_eq!(reins::check_decisions(&o.pending, &decisions, agent.registry()), applied);
        }
    }
}

/// A tool source whose tools are those of a registry it holds (as an MCP source's are the servers').
struct Source(Arc<reins::Registry>);

#[async_trait]
impl reins::ToolSource for Source {
    async fn registry(&self) -> Arc<reins::Registry> {
        Arc::clone(&self.0)
    }
}

#[tokio::test]
async fn current_registry_is_the_tool_sources_when_there_is_one() {
    let runs = Runs::default();
    let plain = agent_with(scripted(vec![answer("ok")]), &runs, Limits::default()).build().unwrap();
    let names = |r: &reins::Registry| r.specs().iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&*plain.current_registry().await), names(plain.registry()));
    let sourced = Agent::builder_shared(scripted(vec![answer("ok")]))
        .tool_source(Arc::new(Source(Arc::new(registry(&runs)))))
        .build()
        .unwrap();
    assert!(sourced.registry().is_empty());
    assert_eq!(names(&*sourced.current_registry().await), names(plain.registry()));
}
