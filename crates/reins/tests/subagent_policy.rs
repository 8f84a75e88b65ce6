//! Every policy holds at every depth: a parent's policy, hooks and approver reach its sub-agents' calls (the
//! strictest decision of the line wins), a sub-agent's question stops the parent's batch until it is decided,
//! and the calls of that batch that already ran never run again.

mod common;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use common::*;
use reins::{
    Agent, AgentTool, ApprovalDecision, ApprovalError, ApprovalRequest, Approver, Decision, Hook, HookContext,
    HookError, HookEvent, Limits, PreTool, Registry, RunState, Status, ToolCall,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn ask_echo(call: &ToolCall) -> Decision {
    if call.name == "echo" { Decision::Ask("echo needs a person".into()) } else { Decision::Allow }
}

fn deny_echo(call: &ToolCall) -> Decision {
    if call.name == "echo" { Decision::Deny("no echo below".into()) } else { Decision::Allow }
}

/// A sub-agent `writer` with the counting test tools; its script calls echo once, then answers.
fn writer(runs: &Runs) -> AgentTool {
    let agent = Agent::builder_shared(scripted(vec![calls(vec![echo_call("w1", "written")]), answer("wrote it")]))
        .registry(registry(runs))
        .limits(Limits::unlimited())
        .build()
        .unwrap();
    AgentTool::new("writer", "Writes.", agent).unwrap()
}

fn task(id: &str) -> ToolCall {
    call(id, "writer", json!({"task": "write"}))
}

/// The parent: its own echo tool (counted in `own`) and the writer.
fn parent_registry(own: &Runs, child: &Runs) -> Registry {
    Registry::builder().tool(echo(own)).tool(writer(child)).build().unwrap()
}

struct Recording {
    seen: Mutex<Vec<ApprovalRequest>>,
    approve: bool,
}

#[async_trait]
impl Approver for Recording {
    async fn decide(
        &self,
        request: &ApprovalRequest,
        _: &CancellationToken,
    ) -> Result<Vec<ApprovalDecision>, ApprovalError> {
        self.seen.lock().unwrap().push(request.clone());
        Ok(request
            .calls
            .iter()
            .map(|c| if self.approve { ApprovalDecision::approve(c) } else { ApprovalDecision::deny(c, "not today") })
            .collect())
    }
}

#[tokio::test]
async fn a_parents_policy_asks_about_its_sub_agents_calls_and_its_approver_decides() {
    for approve in [true, false] {
        let (own, child) = (Runs::default(), Runs::default());
        let approver = Arc::new(Recording { seen: Mutex::new(Vec::new()), approve });
        let agent = Agent::builder_shared(scripted(vec![calls(vec![task("p1")]), answer("done")]))
            .registry(parent_registry(&own, &child))
            .policy(ask_echo)
            .approver(approver.clone())
            .build()
            .unwrap();
        let o = run(&agent).await;
        is_status(&o, Status::Completed);
        assert_coherent(&o);
        let seen = approver.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "{seen:?}");
        let asked = &seen[0].calls;
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].call_id, "w1");
        let of = asked[0].sub_agent.as_ref().expect("the question names its sub-agent");
        assert_eq!((of.agent.as_str(), of.parent_call_id.as_str()), ("writer", "p1"));
        if approve {
            assert_eq!(child.get(), 1, "the approved call ran once");
            assert_eq!(o.messages[2].content(), "wrote it");
        } else {
            assert_eq!(child.get(), 0, "a denied call never runs");
        }
    }
}

#[tokio::test]
async fn without_an_approver_the_whole_run_waits_and_nothing_of_the_sub_agent_runs() {
    let (own, child) = (Runs::default(), Runs::default());
    let agent = Agent::builder_shared(scripted(vec![calls(vec![task("p1")]), answer("done")]))
        .registry(parent_registry(&own, &child))
        .policy(ask_echo)
        .build()
        .unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::AwaitingApproval);
    assert_eq!(child.get(), 0);
    let ids: Vec<(&str, bool)> = o.pending.iter().map(|p| (p.call_id.as_str(), p.needs_decision())).collect();
    assert_eq!(ids, [("p1", false), ("w1", true)], "{:?}", o.pending);
    assert_eq!(o.pending[1].sub_agent.as_ref().map(|s| s.agent.as_str()), Some("writer"));
    // Resumed with the sub-agent's transcript (as a store gives it) and a decision, it finishes.
    let run_id = o.pending[1].sub_agent.as_ref().unwrap().run_id.clone();
    let mut state =
        RunState::resume_pending("run-2", o.messages.clone(), o.pending.clone(), Limits::unlimited(), agent.context())
            .unwrap();
    assert_eq!(state.waiting_agent_runs(), std::slice::from_ref(&run_id));
    let child_transcript =
        vec![reins::Message::user("write"), reins::Message::assistant("", vec![echo_call("w1", "written")])];
    state.set_agent_transcript(&run_id, child_transcript);
    // An edit cannot be checked against the sub-agent's tools from here: refused, the call stays undecided.
    let edit = ApprovalDecision::edit(&o.pending[1], json!({"text": "other"}));
    assert!(matches!(state.decide(&edit, agent.registry()), Err(reins::DecisionError::SubAgentEdit(_))));
    state.decide(&ApprovalDecision::approve(&o.pending[1]), agent.registry()).unwrap();
    assert!(!state.awaits_decision());
    let o2 = agent.drive(state, CancellationToken::new()).await;
    is_status(&o2, Status::Completed);
    assert_eq!(child.get(), 1, "the approved call ran once");
    assert_coherent(&o2);
}

#[tokio::test]
async fn calls_that_ran_before_a_sub_agent_asked_do_not_run_again() {
    // e1 runs, then the writer asks (the batch stops: e2 waits), then after the decision the writer goes on and e2
    // runs; e1 keeps its first result.
    let (own, child) = (Runs::default(), Runs::default());
    let approver = Arc::new(Recording { seen: Mutex::new(Vec::new()), approve: true });
    let policy = |call: &ToolCall| {
        if call.name == "echo" && call.arguments["text"] == "written" {
            Decision::Ask("the writer's echo".into())
        } else {
            Decision::Allow
        }
    };
    let agent = Agent::builder_shared(scripted(vec![
        calls(vec![echo_call("e1", "one"), task("p1"), echo_call("e2", "two")]),
        answer("done"),
    ]))
    .registry(parent_registry(&own, &child))
    .policy(policy)
    .approver(approver.clone())
    .build()
    .unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_coherent(&o);
    assert_eq!(own.get(), 2, "e1 and e2 ran once each");
    assert_eq!(child.get(), 1);
    let results: Vec<&str> = o.messages.iter().filter(|m| m.role() == "tool").map(|m| m.content()).collect();
    assert_eq!(results, ["one", "wrote it", "two"]);
}

#[tokio::test]
async fn the_strictest_policy_of_the_line_wins() {
    // The child's own policy allows everything; the parent's denies its echo.
    let (own, child) = (Runs::default(), Runs::default());
    let agent = Agent::builder_shared(scripted(vec![calls(vec![task("p1")]), answer("done")]))
        .registry(parent_registry(&own, &child))
        .policy(deny_echo)
        .build()
        .unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(child.get(), 0, "the parent's Deny holds in its sub-agent");
}

struct DenyEcho {
    seen: Mutex<usize>,
}

#[async_trait]
impl Hook for DenyEcho {
    fn name(&self) -> &str {
        "deny-echo"
    }
    fn applies(&self, event: HookEvent, tool: Option<&str>) -> bool {
        event == HookEvent::PreTool && tool == Some("echo")
    }
    async fn pre_tool(&self, _: &HookContext, _: &ToolCall, _: &CancellationToken) -> Result<PreTool, HookError> {
        *self.seen.lock().unwrap() += 1;
        Ok(PreTool::Deny("not here".into()))
    }
}

#[tokio::test]
async fn a_parents_pre_tool_hook_judges_its_sub_agents_calls() {
    let (own, child) = (Runs::default(), Runs::default());
    let hook = Arc::new(DenyEcho { seen: Mutex::new(0) });
    let agent = Agent::builder_shared(scripted(vec![calls(vec![task("p1")]), answer("done")]))
        .registry(parent_registry(&own, &child))
        .hook(hook.clone())
        .build()
        .unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(child.get(), 0, "the parent's hook denied the sub-agent's call");
    assert_eq!(*hook.seen.lock().unwrap(), 1);
}

#[tokio::test]
async fn a_sub_agents_own_limits_hold_across_its_questions() {
    // Its own max_steps is 2: asked about each echo, it stops and is continued twice, yet gets no third response.
    let (own, child) = (Runs::default(), Runs::default());
    let approver = Arc::new(Recording { seen: Mutex::new(Vec::new()), approve: true });
    let helper = Agent::builder_shared(scripted(vec![
        calls(vec![echo_call("w1", "one")]),
        calls(vec![echo_call("w2", "two")]),
        answer("a third response it may not have"),
    ]))
    .registry(registry(&child))
    .limits(Limits { max_steps: Some(2), ..Limits::unlimited() })
    .build()
    .unwrap();
    let agent = Agent::builder_shared(scripted(vec![calls(vec![task("p1")]), answer("done")]))
        .registry(
            Registry::builder().tool(echo(&own)).tool(AgentTool::new("writer", "W.", helper).unwrap()).build().unwrap(),
        )
        .policy(ask_echo)
        .approver(approver.clone())
        .build()
        .unwrap();
    let o = run(&agent).await;
    is_status(&o, Status::Completed);
    assert_eq!(child.get(), 2, "both approved calls ran once");
    let r = o.messages.iter().find(|m| m.role() == "tool").unwrap();
    // As without the questions: two responses, then its step limit.
    assert!(r.content().contains("ended step_limit") && r.content().contains("(max_steps 2)"), "{}", r.content());
}

/// A performer that performs in process and answers approvals itself, as a durable run's does with an
/// awakeable, approving every call it is asked about.
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
async fn a_durable_performers_approver_decides_a_sub_agents_question() {
    let (own, child) = (Runs::default(), Runs::default());
    let agent = Agent::builder_shared(scripted(vec![calls(vec![task("p1")]), answer("done")]))
        .registry(parent_registry(&own, &child))
        .policy(ask_echo)
        .build()
        .unwrap();
    let performer = ApprovingPerformer { asked: Mutex::default() };
    let state = RunState::new("r1", "go", Limits::default(), agent.context()).unwrap();
    let o = agent.drive_with(state, CancellationToken::new(), &performer).await;
    is_status(&o, Status::Completed);
    assert_eq!(*performer.asked.lock().unwrap(), ["w1"]);
    assert_eq!(child.get(), 1, "the approved call ran once");
    assert_eq!(o.messages[2].content(), "wrote it");
}

/// A performer like a durable run's: it journals each model and tool result in order and, driven again,
/// replays them without doing the work (then goes on live); its approver decides only when `approve` is set
/// (until then the run ends waiting, as a durable one suspends).
#[derive(Default)]
struct Replaying {
    log: Mutex<Vec<Result<reins::CallResult, Result<reins::ModelResponse, reins::ModelError>>>>,
    at: Mutex<usize>,
    approve: Mutex<bool>,
}

impl Replaying {
    fn next(&self) -> Option<Result<reins::CallResult, Result<reins::ModelResponse, reins::ModelError>>> {
        let mut at = self.at.lock().unwrap();
        let e = self.log.lock().unwrap().get(*at).cloned();
        if e.is_some() {
            *at += 1;
        }
        e
    }
}

impl reins::Performer for Replaying {
    fn model_call<'a>(
        &'a self,
        _: reins::ModelStep,
        work: futures_util::future::BoxFuture<'a, Result<reins::ModelResponse, reins::ModelError>>,
    ) -> futures_util::future::BoxFuture<'a, Result<reins::ModelResponse, reins::ModelError>> {
        Box::pin(async move {
            if let Some(Err(r)) = self.next() {
                return r;
            }
            let r = work.await;
            self.log.lock().unwrap().push(Err(r.clone()));
            *self.at.lock().unwrap() += 1;
            r
        })
    }

    fn tool_call<'a>(
        &'a self,
        _: reins::ToolStep<'a>,
        work: futures_util::future::BoxFuture<'a, reins::CallResult>,
    ) -> futures_util::future::BoxFuture<'a, reins::CallResult> {
        Box::pin(async move {
            if let Some(Ok(r)) = self.next() {
                return r;
            }
            let r = work.await;
            self.log.lock().unwrap().push(Ok(r.clone()));
            *self.at.lock().unwrap() += 1;
            r
        })
    }

    fn approver(&self) -> Option<&dyn Approver> {
        Some(self)
    }
}

#[async_trait]
impl Approver for Replaying {
    async fn decide(&self, r: &ApprovalRequest, _: &CancellationToken) -> Result<Vec<ApprovalDecision>, ApprovalError> {
        if !*self.approve.lock().unwrap() {
            return Ok(Vec::new());
        }
        Ok(r.calls.iter().map(ApprovalDecision::approve).collect())
    }
}

#[tokio::test]
async fn a_replayed_durable_run_waits_for_its_sub_agent_again_and_continues_it() {
    let (own, child) = (Runs::default(), Runs::default());
    let agent = Agent::builder_shared(scripted(vec![calls(vec![task("p1")]), answer("done")]))
        .registry(parent_registry(&own, &child))
        .policy(ask_echo)
        .build()
        .unwrap();
    let performer = Replaying::default();
    let state = RunState::new("r1", "go", Limits::default(), agent.context()).unwrap();
    let o = agent.drive_with(state, CancellationToken::new(), &performer).await;
    is_status(&o, Status::AwaitingApproval);
    assert_eq!(child.get(), 0);
    // Driven again from the start (a durable run resumed after it suspended): the journaled results are
    // replayed, the batch waits for the sub-agent again, the decision continues it.
    *performer.at.lock().unwrap() = 0;
    *performer.approve.lock().unwrap() = true;
    let state = RunState::new("r1", "go", Limits::default(), agent.context()).unwrap();
    let o = agent.drive_with(state, CancellationToken::new(), &performer).await;
    is_status(&o, Status::Completed);
    assert_eq!(child.get(), 1, "the approved call ran once");
    assert_eq!(o.messages[2].content(), "wrote it");
}
