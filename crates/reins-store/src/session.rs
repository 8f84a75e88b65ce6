//! A recorded session read back: its entries, and what they rebuild — the transcript, the runs, the
//! model responses.

use reins::{ContextConfig, Limits, Message, ModelResponse, RunState, ToolSpec};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::store::SessionSummary;

/// The kinds of entries in the log.
pub mod kind {
    /// A run began: `{"run_id", "limits", "tools", "initial_messages", "recorded_messages"}`, plus
    /// `"instructions"` when the run had any and `"config"` when the caller gave one.
    pub const RUN_START: &str = "run_start";
    /// A transcript item (`msg_index` set): a [`reins::Message`].
    pub const MESSAGE: &str = "message";
    /// A model answer: `{"step", "response"}` (with `"cost_usd"` when prices and usage are known) or
    /// `{"step", "error"}`.
    pub const RESPONSE: &str = "response";
    /// A run event: the JSON line of a [`reins::Event`].
    pub const EVENT: &str = "event";
    /// A run ended: its outcome without the transcript.
    pub const RUN_END: &str = "run_end";
    /// An image, once per session: `{"sha256", "media_type", "data"}` (base64); transcript items refer to it
    /// by `sha256`.
    pub const IMAGE: &str = "image";
    /// A sub-agent's run began, as a child of a run of the session: [`super::ChildRunStartData`].
    pub const CHILD_RUN_START: &str = "child_run_start";
    /// An item of a child run's transcript: `{"run_id", "index", "message"}`.
    pub const CHILD_MESSAGE: &str = "child_message";
    /// A child run's model answer: `{"run_id", "step", "response"}` or `{"run_id", "step", "error"}`.
    pub const CHILD_RESPONSE: &str = "child_response";
    /// A child run ended: its outcome without the transcript (with `run_id`).
    pub const CHILD_RUN_END: &str = "child_run_end";
    /// A run is about to ask its approver about its waiting batch: `{"pending": [...]}` (as a run end's
    /// `pending`). A run that died before a decision or a transcript item after it still waits on that batch.
    pub const APPROVAL_WAITING: &str = "approval_waiting";
}

/// One entry of a session's log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// 0-based position in the session's log; never reused.
    pub seq: u64,
    /// The 1-based run that wrote it.
    pub run: u64,
    /// What it records (see [`kind`]).
    pub kind: String,
    /// For a transcript item, its position in the transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msg_index: Option<u64>,
    /// When it was recorded (RFC 3339).
    pub ts: String,
    /// The record itself.
    pub data: serde_json::Value,
}

/// The data of a `run_start` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunStartData {
    /// The run's id.
    pub run_id: String,
    /// The limits it ran under.
    pub limits: Limits,
    /// The tools on offer.
    pub tools: Vec<ToolSpec>,
    /// The instructions the run gave the model with every call, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Transcript items when the run began (after reconciliation and any follow-up prompt).
    pub initial_messages: u64,
    /// How many of them were already recorded by earlier runs.
    pub recorded_messages: u64,
    /// What the caller recorded about how the run was configured (e.g. the command's flags).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
}

/// The data of a `child_run_start` entry: a sub-agent's run, started by a run of the session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChildRunStartData {
    /// The child run's id.
    pub run_id: String,
    /// The run that started it (a run of the session, or another child run).
    pub parent_run_id: String,
    /// The sub-agent's name (its tool name in the parent).
    pub agent: String,
    /// The limits it ran under (its own, cut to what the parent had left).
    pub limits: Limits,
    /// Its tools.
    pub tools: Vec<ToolSpec>,
    /// Its instructions, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// A sub-agent's run recorded in a session, rebuilt from its entries.
#[derive(Clone, Debug, PartialEq)]
pub struct ChildRunRecord {
    /// The 1-based run of the session within which it ran.
    pub run: u64,
    /// What `child_run_start` recorded.
    pub start: ChildRunStartData,
    /// Its transcript, in order (its task first).
    pub messages: Vec<Message>,
    /// Its model answers, in order.
    pub responses: Vec<ResponseData>,
    /// Its outcome (`child_run_end`; without `messages`), when it ended cleanly.
    pub end: Option<serde_json::Value>,
}

/// A recorded model answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResponseData {
    /// The 1-based step within its run.
    pub step: u64,
    /// The response, when the call succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<ModelResponse>,
    /// The error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the call cost in US dollars, when prices and usage were known (recorded since the session view;
    /// absent in older sessions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// One run of a session, rebuilt from its entries.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    /// 1-based.
    pub number: u64,
    /// What `run_start` recorded.
    pub start: RunStartData,
    /// The model answers, in order.
    pub responses: Vec<ResponseData>,
    /// The outcome (`run_end`; without `messages`), when the run ended cleanly.
    pub end: Option<serde_json::Value>,
}

/// A whole recorded session.
#[derive(Clone, Debug, PartialEq)]
pub struct Session {
    /// The index row.
    pub summary: SessionSummary,
    /// Every entry, in order.
    pub entries: Vec<Entry>,
}

/// What [`RunState::resume`] writes for each call whose result was never recorded.
pub const INTERRUPTED: &str = "interrupted: the session stopped (crash or kill) before this call's result was recorded; \
     the call may or may not have run — check before repeating it";

impl Session {
    /// The session's id.
    pub fn id(&self) -> &str {
        &self.summary.id
    }

    fn bad(&self, seq: u64, detail: impl Into<String>) -> StoreError {
        StoreError::BadEntry { session: self.summary.id.clone(), seq: seq as i64, detail: detail.into() }
    }

    /// The recorded transcript, in order. Every index from 0 appears exactly once (the store enforces
    /// it); a gap or a duplicate is reported as a damaged entry.
    pub fn messages(&self) -> Result<Vec<Message>, StoreError> {
        let mut out = Vec::new();
        let images = crate::images::data_of(self.entries.iter().filter(|e| e.kind == kind::IMAGE).map(|e| &e.data));
        for e in self.entries.iter().filter(|e| e.kind == kind::MESSAGE) {
            if e.msg_index != Some(out.len() as u64) {
                return Err(
                    self.bad(e.seq, format!("transcript item {:?} where item {} is due", e.msg_index, out.len()))
                );
            }
            let mut data = e.data.clone();
            crate::images::resolve(&mut data, &images).map_err(|err| self.bad(e.seq, err))?;
            let m: Message =
                serde_json::from_value(data).map_err(|err| self.bad(e.seq, format!("not a transcript item: {err}")))?;
            out.push(m);
        }
        Ok(out)
    }

    /// The runs, in order.
    pub fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let mut runs: Vec<RunRecord> = Vec::new();
        for e in &self.entries {
            match e.kind.as_str() {
                kind::RUN_START => {
                    let start: RunStartData = serde_json::from_value(e.data.clone())
                        .map_err(|err| self.bad(e.seq, format!("not a run start: {err}")))?;
                    runs.push(RunRecord { number: e.run, start, responses: Vec::new(), end: None });
                }
                kind::RESPONSE => {
                    let r: ResponseData = serde_json::from_value(e.data.clone())
                        .map_err(|err| self.bad(e.seq, format!("not a model response: {err}")))?;
                    match runs.last_mut() {
                        Some(run) if run.number == e.run => run.responses.push(r),
                        _ => return Err(self.bad(e.seq, "a model response outside a run")),
                    }
                }
                kind::RUN_END => match runs.last_mut() {
                    Some(run) if run.number == e.run => run.end = Some(e.data.clone()),
                    _ => return Err(self.bad(e.seq, "a run end outside a run")),
                },
                _ => {}
            }
        }
        Ok(runs)
    }

    /// The sub-agents' runs, in the order they began (see [`kind::CHILD_RUN_START`]).
    pub fn child_runs(&self) -> Result<Vec<ChildRunRecord>, StoreError> {
        let mut runs: Vec<ChildRunRecord> = Vec::new();
        let run_id = |e: &Entry| e.data.get("run_id").and_then(serde_json::Value::as_str).map(str::to_owned);
        for e in &self.entries {
            let find = |runs: &mut Vec<ChildRunRecord>| {
                let id = run_id(e);
                let found = runs.iter().position(|r| Some(&r.start.run_id) == id.as_ref());
                found.ok_or_else(|| self.bad(e.seq, "an entry of a sub-agent's run that never began"))
            };
            match e.kind.as_str() {
                kind::CHILD_RUN_START => {
                    let start: ChildRunStartData = serde_json::from_value(e.data.clone())
                        .map_err(|err| self.bad(e.seq, format!("not a sub-agent's run start: {err}")))?;
                    runs.push(ChildRunRecord {
                        run: e.run,
                        start,
                        messages: Vec::new(),
                        responses: Vec::new(),
                        end: None,
                    });
                }
                kind::CHILD_MESSAGE => {
                    let i = find(&mut runs)?;
                    let index = e.data.get("index").and_then(serde_json::Value::as_u64);
                    if index != Some(runs[i].messages.len() as u64) {
                        return Err(self.bad(e.seq, format!("a sub-agent's transcript item {index:?} out of order")));
                    }
                    let m: Message = e
                        .data
                        .get("message")
                        .map(|m| serde_json::from_value(m.clone()))
                        .transpose()
                        .map_err(|err| self.bad(e.seq, format!("not a transcript item: {err}")))?
                        .ok_or_else(|| self.bad(e.seq, "a sub-agent's transcript item without `message`"))?;
                    runs[i].messages.push(m);
                }
                kind::CHILD_RESPONSE => {
                    let i = find(&mut runs)?;
                    let r: ResponseData = serde_json::from_value(e.data.clone())
                        .map_err(|err| self.bad(e.seq, format!("not a model response: {err}")))?;
                    runs[i].responses.push(r);
                }
                kind::CHILD_RUN_END => {
                    let i = find(&mut runs)?;
                    runs[i].end = Some(e.data.clone());
                }
                _ => {}
            }
        }
        Ok(runs)
    }

    /// The recorded events, as JSON values (their `seq` counts within each run).
    pub fn events(&self) -> impl Iterator<Item = &serde_json::Value> {
        self.entries.iter().filter(|e| e.kind == kind::EVENT).map(|e| &e.data)
    }

    /// The batch the session waits on, when its last run ended `awaiting_approval` (that run's outcome
    /// `pending`, decisions made so far included) and no later run went past it: a run that died after it
    /// without recording a decision or a transcript item leaves it waiting; one that recorded a decision
    /// released the batch to run (its calls may have run), so it no longer waits — a resume then gives its
    /// calls without results the [`INTERRUPTED`] result and never runs them again.
    pub fn pending_approval(&self) -> Result<Option<Vec<reins::PendingCall>>, StoreError> {
        let runs = self.runs()?;
        for run in runs.iter().rev() {
            match &run.end {
                Some(_) => return self.waiting_batch(run),
                None => {
                    // A run that died: the batch it was asking about when it died (`approval_waiting` with no
                    // decision or transcript item after it) still waits; one that went on released it.
                    let mut went_on = false;
                    let mut asking = None;
                    for e in self.entries.iter().filter(|e| e.run == run.number) {
                        if e.kind == kind::MESSAGE
                            || (e.kind == kind::EVENT
                                && e.data.get("type").and_then(|t| t.as_str()) == Some("approval_decided"))
                        {
                            went_on = true;
                            asking = None;
                        } else if e.kind == kind::APPROVAL_WAITING {
                            asking = Some(e);
                        }
                    }
                    if let Some(e) = asking {
                        let pending = e.data.get("pending").cloned().unwrap_or(serde_json::Value::Array(Vec::new()));
                        let pending: Vec<reins::PendingCall> = serde_json::from_value(pending)
                            .map_err(|err| self.bad(e.seq, format!("not a waiting batch: {err}")))?;
                        return Ok((!pending.is_empty()).then_some(pending));
                    }
                    if went_on {
                        return Ok(None);
                    }
                }
            }
        }
        Ok(None)
    }

    /// The batch `run` ended waiting on (its outcome's `pending`), when it ended `awaiting_approval`.
    pub(crate) fn waiting_batch(&self, run: &RunRecord) -> Result<Option<Vec<reins::PendingCall>>, StoreError> {
        let Some(end) =
            run.end.as_ref().filter(|e| e.get("status").and_then(|s| s.as_str()) == Some("awaiting_approval"))
        else {
            return Ok(None);
        };
        let pending = end.get("pending").cloned().unwrap_or(serde_json::Value::Array(Vec::new()));
        let pending: Vec<reins::PendingCall> = serde_json::from_value(pending).map_err(|e| StoreError::Resume {
            session: self.summary.id.clone(),
            detail: format!("the waiting batch of run {} is damaged: {e}", run.number),
        })?;
        Ok((!pending.is_empty()).then_some(pending))
    }

    /// Rebuilds a run state to continue the session: the recorded transcript, reconciled — a batch
    /// cut short by a crash gets an [`INTERRUPTED`] error result for each call without a recorded
    /// result — then `follow_up` as a new user message, if given. A session waiting for an approval
    /// ([`Session::pending_approval`]) continues waiting: the state holds the batch, to be decided. The new run gets a fresh run id and the
    /// instructions of the session's last run (replace them with [`RunState::set_instructions`]).
    pub fn resume_state(
        &self,
        limits: Limits,
        ctx: &ContextConfig,
        follow_up: Option<&str>,
    ) -> Result<RunState, StoreError> {
        let resume_err = |detail: String| StoreError::Resume { session: self.summary.id.clone(), detail };
        let messages = self.messages()?;
        if messages.is_empty() {
            return Err(resume_err("it has no recorded transcript".into()));
        }
        let instructions = self.runs()?.pop().and_then(|r| r.start.instructions);
        let run_id = uuid::Uuid::new_v4().to_string();
        let state = match self.pending_approval()? {
            Some(pending) => {
                if follow_up.is_some() {
                    return Err(resume_err(
                        "it waits for an approval: decide with `reins approve ID` (no follow-up prompt until then)"
                            .into(),
                    ));
                }
                RunState::resume_pending(run_id, messages, pending, limits, ctx)
            }
            None => RunState::resume(run_id, messages, limits, ctx, INTERRUPTED),
        };
        let mut state =
            state.map_err(|e| resume_err(e.to_string()))?.with_instructions(instructions.map(Into::into), ctx);
        // A batch that waits on its sub-agents' questions: their waiting runs' transcripts, as recorded.
        let waiting = state.waiting_agent_runs();
        if !waiting.is_empty() {
            let children = self.child_runs()?;
            for run_id in waiting {
                let Some(child) = children.iter().find(|c| c.start.run_id == run_id) else {
                    return Err(resume_err(format!("the waiting sub-agent run {run_id} is not recorded")));
                };
                state.set_agent_transcript(&run_id, child.messages.clone());
            }
        }
        if let Some(text) = follow_up {
            state.push_user(text, ctx).map_err(|e| resume_err(e.to_string()))?;
        }
        Ok(state)
    }

    /// The session as JSON lines: a `session` line with the summary, then one line per entry.
    pub fn export_lines(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.entries.len() + 1);
        let head = serde_json::json!({"type": "session", "session": self.summary});
        out.push(head.to_string());
        for e in &self.entries {
            let mut v = serde_json::json!({"type": "entry", "seq": e.seq, "run": e.run, "kind": e.kind, "ts": e.ts, "data": e.data});
            if let (Some(i), Some(obj)) = (e.msg_index, v.as_object_mut()) {
                obj.insert("msg_index".into(), i.into());
            }
            out.push(v.to_string());
        }
        out
    }
}
