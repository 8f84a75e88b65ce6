//! Replay: a recorded session re-run offline as a regression test. The recorded model responses drive
//! a [`ScriptedModel`]; the tools either run for real (the caller's registry, typically rooted in a
//! scratch copy of the workspace) or answer with their recorded results. The first point where the tool
//! calls, the results, the transcript or the outcome differ is reported. Compactions are replayed from the
//! recorded summary items: the same summaries (or the same fallback markers) at the same points. Approvals are
//! replayed from the recorded events: the calls a run asked about are asked about again, answered with the
//! decisions it recorded, and a run that continued a waiting batch starts from that batch.

use std::collections::HashMap;
use std::sync::Arc;

use reins::{
    Agent, ApprovalCall, ApprovalDecision, ApprovalError, ApprovalRequest, Approver, ContextConfig, Decision, FnTool,
    Limits, Message, ModelError, Outcome, Registry, RunState, ScriptStep, ScriptedModel, Tool, ToolCall, ToolError,
    ToolOutput,
};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::error::StoreError;
use crate::session::{INTERRUPTED, ResponseData, RunRecord, Session};

/// Which tools a replay runs.
#[derive(Clone)]
pub enum ReplayTools {
    /// These tools, for real.
    Live(Arc<Registry>),
    /// Tools with the recorded names and schemas that answer with the recorded results.
    Recorded,
}

/// Where a replay first differed from the recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    /// The 1-based run of the session.
    pub run: u64,
    /// What differs: `tool_call`, `tool_result`, `message`, `transcript_length` or `outcome`.
    pub what: String,
    /// The transcript position, for differences in the transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    /// The recorded value.
    pub recorded: serde_json::Value,
    /// The replayed value.
    pub replayed: serde_json::Value,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "run {}: {} differs", self.run, self.what.replace('_', " "))?;
        if let Some(i) = self.index {
            write!(f, " at transcript item {i}")?;
        }
        write!(f, "\n  recorded: {}\n  replayed: {}", self.recorded, self.replayed)
    }
}

/// What a replay found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The session replayed.
    pub session_id: String,
    /// Runs replayed (up to and including the one that diverged).
    pub runs: u64,
    /// Model responses replayed.
    pub steps: u64,
    /// Runs whose recording stopped without an end (a crash): compared up to their last recorded item.
    pub unfinished_runs: Vec<u64>,
    /// The first difference, or `None` when the replay reproduced the recording exactly.
    pub divergence: Option<Divergence>,
}

fn script(responses: &[ResponseData]) -> Vec<ScriptStep> {
    responses
        .iter()
        .map(|r| match (&r.response, &r.error) {
            (Some(resp), _) => ScriptStep::Respond(resp.clone()),
            (None, Some(e)) => {
                let msg = e.strip_prefix("model call failed: ").unwrap_or(e);
                ScriptStep::Fail(ModelError::Failed(msg.to_owned()))
            }
            (None, None) => ScriptStep::Fail(ModelError::Failed("the recorded response is empty".into())),
        })
        .collect()
}

/// The summarizer of a replayed run: the recorded compactions of the run, in order. A recorded summary is
/// answered again; a recorded marker (no summary could be made) is a failed call, which records the same
/// marker again.
fn summaries(recorded: &[Message]) -> Vec<ScriptStep> {
    recorded
        .iter()
        .filter_map(|m| match m {
            Message::Summary { content, .. } => Some(match content.strip_prefix("[Summary of the ") {
                Some(rest) => match rest.split_once('\n') {
                    Some((_, text)) => ScriptStep::Respond(reins::ModelResponse::text(text)),
                    None => ScriptStep::Fail(ModelError::Failed("the recorded summary has no text".into())),
                },
                None => ScriptStep::Fail(ModelError::Failed("the recorded compaction has no summary".into())),
            }),
            _ => None,
        })
        .collect()
}

fn recorded_tools(run: &RunRecord, messages: &[Message]) -> Result<Registry, StoreError> {
    let mut results: HashMap<String, (String, bool)> = HashMap::new();
    for m in messages {
        if let Message::ToolResult(r) = m {
            // The note the run put before the result of a call whose arguments a hook or an approver changed
            // is put there again by the replayed run: the tool answers what came after it.
            results.insert(r.call_id.to_string(), (reins::without_edit_note(&r.content).to_owned(), r.is_error));
        }
    }
    let results = Arc::new(results);
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for spec in &run.start.tools {
        let results = results.clone();
        let tool = FnTool::new(&spec.name, &spec.description, spec.input_schema.clone(), move |_args, ctx| {
            let found = results.get(&*ctx.call_id).cloned();
            async move {
                match found {
                    Some((content, false)) => Ok(ToolOutput::Text(content)),
                    Some((content, true)) => Err(ToolError::Failed(content)),
                    None => Err(ToolError::Failed(INTERRUPTED.to_owned())),
                }
            }
        });
        tools.push(Arc::new(tool));
    }
    Registry::new(tools).map_err(|e| StoreError::Resume {
        session: String::new(),
        detail: format!("the recorded tools cannot be rebuilt: {e}"),
    })
}

/// What a run recorded of its approvals: the calls it asked about (by call id and arguments hash, with the
/// reason) and the decisions applied, in order.
#[derive(Default)]
struct RecordedApprovals {
    asked: HashMap<(String, String), String>,
    decided: Vec<ApprovalDecision>,
}

fn recorded_approvals(session: &Session, run: u64) -> Result<RecordedApprovals, StoreError> {
    let mut out = RecordedApprovals::default();
    let events =
        session.entries.iter().filter(|e| e.run == run && e.kind == crate::session::kind::EVENT).map(|e| &e.data);
    // A sub-agent's events are its own run's: its approvals are not the parent's.
    for data in events.filter(|d| d.get("agent").is_none()) {
        let damaged = |what: &str, e: serde_json::Error| StoreError::Resume {
            session: session.id().to_owned(),
            detail: format!("run {run} recorded a damaged {what}: {e}"),
        };
        // The `approval_decided` event carries a decision's own fields (`call_id`, `arguments_hash`,
        // `decision`, `reason`, `arguments`), and `approval_requested` its calls as `ApprovalCall`s.
        match data.get("type").and_then(|t| t.as_str()) {
            Some("approval_requested") => {
                let calls = data.get("calls").cloned().unwrap_or_default();
                let calls: Vec<ApprovalCall> =
                    serde_json::from_value(calls).map_err(|e| damaged("approval request", e))?;
                for c in calls {
                    out.asked.insert((c.call_id, c.arguments_hash), c.reason);
                }
            }
            Some("approval_decided") => {
                if data.get("decision").and_then(|d| d.as_str()) == Some("edit") && data.get("arguments").is_none() {
                    let call_id = data.get("call_id").and_then(|c| c.as_str()).unwrap_or_default();
                    return Err(StoreError::Resume {
                        session: session.id().to_owned(),
                        detail: format!(
                            "run {run} edited the arguments of call {call_id:?}, and the edit was recorded without its arguments (record with content opted in to replay it)"
                        ),
                    });
                }
                out.decided.push(serde_json::from_value(data.clone()).map_err(|e| damaged("decision", e))?);
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Answers each batch of a replayed run with the recorded decisions for its calls (each used once); a batch
/// the recording left undecided is left undecided again (the run ends `awaiting_approval`).
struct RecordedDecisions(std::sync::Mutex<Vec<ApprovalDecision>>);

#[async_trait::async_trait]
impl Approver for RecordedDecisions {
    async fn decide(
        &self,
        request: &ApprovalRequest,
        _: &CancellationToken,
    ) -> Result<Vec<ApprovalDecision>, ApprovalError> {
        let Ok(mut left) = self.0.lock() else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for call in &request.calls {
            if let Some(i) =
                left.iter().position(|d| d.call_id == call.call_id && d.arguments_hash == call.arguments_hash)
            {
                out.push(left.remove(i));
            }
        }
        Ok(out)
    }
}

fn json<T: Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

fn compare_messages(
    run: u64,
    offset: usize,
    recorded: &[Message],
    replayed: &[Message],
    finished: bool,
) -> Option<Divergence> {
    for (i, (a, b)) in recorded.iter().zip(replayed).enumerate() {
        if a == b {
            continue;
        }
        let index = Some((offset + i) as u64);
        let what = match (a, b) {
            (Message::Assistant { tool_calls: x, .. }, Message::Assistant { tool_calls: y, .. }) if x != y => {
                // The first call that differs.
                let k = x.iter().zip(y).position(|(p, q)| p != q).unwrap_or(x.len().min(y.len()));
                return Some(Divergence {
                    run,
                    what: "tool_call".into(),
                    index,
                    recorded: x.get(k).map_or(json(&x.len()), json),
                    replayed: y.get(k).map_or(json(&y.len()), json),
                });
            }
            (Message::ToolResult(_), Message::ToolResult(_)) => "tool_result",
            _ => "message",
        };
        return Some(Divergence { run, what: what.into(), index, recorded: json(a), replayed: json(b) });
    }
    let (n, m) = (recorded.len(), replayed.len());
    // A run cut short by a crash is compared up to its last recorded item.
    if n > m || (n < m && finished) {
        let index = Some((offset + n.min(m)) as u64);
        let pick = |v: &[Message]| v.get(n.min(m)).map_or(serde_json::Value::Null, json);
        return Some(Divergence {
            run,
            what: "transcript_length".into(),
            index,
            recorded: pick(recorded),
            replayed: pick(replayed),
        });
    }
    None
}

fn compare_outcome(run: u64, recorded: &serde_json::Value, replayed: &Outcome) -> Option<Divergence> {
    let fields = ["status", "answer", "steps", "tool_calls", "error"];
    let replayed_json = json(replayed);
    let pick = |v: &serde_json::Value| {
        let mut out = serde_json::Map::new();
        for f in fields {
            out.insert(f.into(), v.get(f).cloned().unwrap_or(serde_json::Value::Null));
        }
        serde_json::Value::Object(out)
    };
    let (a, b) = (pick(recorded), pick(&replayed_json));
    (a != b).then(|| Divergence { run, what: "outcome".into(), index: None, recorded: a, replayed: b })
}

/// Replays `session` with the same tools and context rules for every run (see [`replay_runs`]).
pub async fn replay(session: &Session, tools: ReplayTools, context: ContextConfig) -> Result<ReplayReport, StoreError> {
    replay_runs(session, |_| (tools.clone(), context.clone())).await
}

/// Replays `session`: each recorded run starts from the recorded transcript at its start, with its
/// instructions, its limits (but no wall-clock deadline, which a replay cannot reproduce), its recorded model responses,
/// and the tools and context rules `settings` gives for it — each run with its own, since a resumed run
/// may have been configured differently (its [`crate::RunStartData::config`] says how). Stops at the
/// first divergence.
pub async fn replay_runs(
    session: &Session,
    mut settings: impl FnMut(&RunRecord) -> (ReplayTools, ContextConfig),
) -> Result<ReplayReport, StoreError> {
    let messages = session.messages()?;
    let runs = session.runs()?;
    let mut report = ReplayReport {
        session_id: session.id().to_owned(),
        runs: 0,
        steps: 0,
        unfinished_runs: Vec::new(),
        divergence: None,
    };
    for (k, run) in runs.iter().enumerate() {
        let start = usize::try_from(run.start.initial_messages).unwrap_or(usize::MAX).min(messages.len());
        let end = runs
            .get(k + 1)
            .map_or(messages.len(), |next| usize::try_from(next.start.recorded_messages).unwrap_or(usize::MAX))
            .clamp(start, messages.len());
        let (tools, context) = settings(run);
        let registry = match &tools {
            ReplayTools::Live(r) => r.clone(),
            ReplayTools::Recorded => Arc::new(recorded_tools(run, &messages)?),
        };
        let limits = Limits { timeout: None, ..run.start.limits.clone() };
        // A run that continued a batch waiting for an approval starts from that batch, as `reins approve`
        // (or a resume) did.
        let waiting = match k.checked_sub(1) {
            Some(previous) => session.waiting_batch(&runs[previous])?,
            None => None,
        };
        let run_id = uuid::Uuid::new_v4().to_string();
        let state = match waiting {
            Some(pending) => RunState::resume_pending(run_id, messages[..start].to_vec(), pending, limits, &context),
            None => RunState::resume(run_id, messages[..start].to_vec(), limits, &context, INTERRUPTED),
        }
        .map_err(|e| StoreError::Resume { session: session.id().to_owned(), detail: e.to_string() })?
        .with_instructions(run.start.instructions.as_deref().map(Into::into), &context);
        let approvals = recorded_approvals(session, run.number)?;
        let model = ScriptedModel::new(script(&run.responses)).without_recording();
        let summarizer = ScriptedModel::new(summaries(&messages[start..end])).without_recording();
        let mut builder = Agent::builder(model)
            .compact_model(Arc::new(summarizer))
            .registry(registry)
            .context(context.clone())
            .limits(state.limits().clone());
        // The calls the recording asked about are asked about again, and answered as they were.
        if !approvals.asked.is_empty() {
            let asked = approvals.asked;
            builder = builder.policy(move |call: &ToolCall| {
                match asked.get(&(String::from(&*call.id), reins::arguments_hash(&call.arguments))) {
                    Some(reason) => Decision::Ask(reason.clone()),
                    None => Decision::Allow,
                }
            });
        }
        if !approvals.decided.is_empty() {
            builder = builder.approver(Arc::new(RecordedDecisions(std::sync::Mutex::new(approvals.decided))));
        }
        let agent = builder
            .build()
            .map_err(|e| StoreError::Resume { session: session.id().to_owned(), detail: e.to_string() })?;
        let outcome = agent.drive(state, CancellationToken::new()).await;
        report.runs += 1;
        report.steps += outcome.steps;
        let finished = run.end.is_some();
        if !finished {
            report.unfinished_runs.push(run.number);
        }
        let replayed = outcome.messages.get(start..).unwrap_or(&[]);
        if let Some(d) = compare_messages(run.number, start, &messages[start..end], replayed, finished) {
            report.divergence = Some(d);
            return Ok(report);
        }
        if let Some(end) = &run.end {
            if let Some(d) = compare_outcome(run.number, end, &outcome) {
                report.divergence = Some(d);
                return Ok(report);
            }
        }
    }
    Ok(report)
}
