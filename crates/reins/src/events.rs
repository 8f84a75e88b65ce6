//! Observability: one versioned `Event` type, observers, and an emitter that contains their failures.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::cost::Price;
use crate::message::ToolCall;
use crate::model::{FinishReason, ModelResponse};
use crate::outcome::Status;
use crate::usage::{Usage, UsageTotals};

/// The schema version of serialized events.
pub const EVENT_VERSION: u32 = 1;

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// The run began.
    RunStart(Box<RunStartData>),
    /// A model call begins.
    ModelStart {
        /// The 1-based step this call would make.
        step: u64,
        /// How many messages the model is sent.
        messages: usize,
    },
    /// A model call returned a response.
    ModelEnd(Box<ModelEndData>),
    /// A model call failed or its response was refused.
    ModelError {
        /// The step it would have made.
        step: u64,
        /// How long the call took.
        duration_ms: f64,
        /// What went wrong.
        error: String,
    },
    /// A tool call begins (also for calls refused before running).
    ToolStart {
        /// The call's id.
        call_id: Arc<str>,
        /// The tool's name.
        name: Arc<str>,
        /// The arguments (only with content opted in).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<serde_json::Value>,
    },
    /// A tool call ended.
    ToolEnd {
        /// The call's id.
        call_id: Arc<str>,
        /// The tool's name.
        name: Arc<str>,
        /// True when the result is an error.
        is_error: bool,
        /// How long the call took.
        duration_ms: f64,
        /// The recorded result (only with content opted in).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
    },
    /// A compaction begins (the `summarize` context strategy): a summary call is made.
    CompactionStart {
        /// The steps made so far (a compaction is not a step).
        step: u64,
        /// How many transcript items it would replace.
        items: u64,
        /// The size of what the model would have seen, in the context budget's unit.
        chars_before: u64,
    },
    /// A compaction was recorded.
    CompactionEnd(Box<CompactionEndData>),
    /// A batch waits for decisions: the calls that need one (the others of the batch wait with them).
    ApprovalRequested {
        /// The steps made so far.
        step: u64,
        /// Each call that needs a decision: `{"call_id", "name", "arguments_hash", "reason"}`, plus
        /// `"arguments"` with content opted in.
        calls: Vec<ApprovalCall>,
    },
    /// A decision about a call was applied (recorded before the call runs).
    ApprovalDecided(Box<ApprovalDecidedData>),
    /// A hook answered (or failed: then `error` says why and the decision is the fail-closed one).
    Hook(Box<HookData>),
    /// The tools on offer changed between two steps (an MCP server announced a change of its list): the next
    /// model call sees the new set. Never in the middle of a batch.
    ToolsChanged {
        /// Tools that appeared.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        added: Vec<String>,
        /// Tools that went away.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        removed: Vec<String>,
        /// Tools whose description or input schema changed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        changed: Vec<String>,
    },
    /// An MCP server asked the person for input (an elicitation) during a tool call of the batch just run;
    /// recorded after the batch, before the next model call. What came of it, never the answer.
    Elicitation(Box<ElicitationData>),
    /// A limit ended the run.
    LimitHit {
        /// The status it ends with.
        status: Status,
        /// Which limit, and by how much.
        detail: String,
    },
    /// The run ended.
    RunEnd(Box<RunEndData>),
}

/// The fields of [`EventKind::RunStart`] (boxed: the event is rare and large, and every event is as large as
/// its largest kind).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunStartData {
    /// The tools on offer.
    pub tools: Vec<String>,
    /// The length of the run's instructions in characters (Unicode scalar values; 0: none).
    #[serde(default)]
    pub instructions_chars: u64,
    /// The instructions (only with content opted in, and when there are any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The prompt (only with content opted in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The session the run is recorded in, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// The fields of [`EventKind::ModelEnd`] (boxed: every event is as large as its largest kind; the emitter
/// reuses one box for a run's `model_end` events).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelEndData {
    /// The step it made.
    pub step: u64,
    /// How long the call took.
    pub duration_ms: f64,
    /// Reported usage, if any.
    pub usage: Option<Usage>,
    /// How many tool calls it proposed.
    pub tool_calls: usize,
    /// The response text (only with content opted in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Why the model stopped, where it said (`stop`, `tool_calls`, `length`, `content_filter`, `refusal`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// What this response cost in US dollars, when the model's price and the usage are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The model that answered, only when it is not the run's (a fallback answered the step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// The fields of [`EventKind::CompactionEnd`] (boxed: the event is rare and large, and every event is as large as
/// its largest kind).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompactionEndData {
    /// The steps made so far.
    pub step: u64,
    /// How many transcript items it replaces.
    pub items: u64,
    /// The size of what the model would have seen before it.
    pub chars_before: u64,
    /// The size of what the model sees after it.
    pub chars_after: u64,
    /// How long the summary call took.
    pub duration_ms: f64,
    /// The summary call's reported usage, if any.
    pub usage: Option<Usage>,
    /// What the summary call cost, at the summary model's price, when it and the usage are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Why the summary was not used and the marker of left-out groups was recorded instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// The model that wrote the summary, only when it is not the summary model (a fallback answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// The fields of [`EventKind::ApprovalDecided`] (boxed: the event is rare and large, and every event is as large as
/// its largest kind).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalDecidedData {
    /// The call.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The hash of the arguments the decision was made for.
    pub arguments_hash: String,
    /// `approve`, `deny` or `edit`.
    pub decision: String,
    /// Why, for a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The edited arguments (only with content opted in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
}

/// The fields of [`EventKind::Hook`] (boxed: the event is rare and large, and every event is as large as
/// its largest kind).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HookData {
    /// `pre_tool`, `post_tool` or `stop`.
    pub hook_event: String,
    /// The hook (a command hook's program).
    pub hook: String,
    /// The call, for a tool event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// `allow`, `deny`, `ask`, `rewrite`, `keep`, `replace`, `redact`, `accept` or `refuse`.
    pub decision: String,
    /// The reason or feedback, when the answer has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why the hook failed (it then denies: fail closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long it took.
    pub duration_ms: f64,
}

/// The fields of [`EventKind::Elicitation`] (boxed: the event is rare and large, and every event is as large as
/// its largest kind).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ElicitationData {
    /// The server (its `[mcp.NAME]`).
    pub server: String,
    /// The tool call during which it asked (`NAME__TOOL`).
    pub tool: String,
    /// The server's message (its secrets masked).
    pub message: String,
    /// `accepted`, `declined` or `cancelled` (not answered).
    pub outcome: String,
    /// Answered with the form's defaults, nobody being there to ask (`elicitation_defaults`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub defaults: bool,
}

/// The fields of [`EventKind::RunEnd`] (boxed: the event is rare and large, and every event is as large as
/// its largest kind).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunEndData {
    /// Why.
    pub status: Status,
    /// Model responses received.
    pub steps: u64,
    /// Tool calls admitted.
    pub tool_calls: u64,
    /// Usage totals.
    pub usage: UsageTotals,
    /// What the run cost in US dollars, when the model's price is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Wall time of the run.
    pub duration_ms: f64,
    /// Compactions recorded by the run.
    #[serde(default)]
    pub compactions: u64,
    /// What went wrong, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The session the run is recorded in, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Whether the final answer matched the run's output schema (absent when the run has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_valid: Option<bool>,
    /// The final answer: the run's result, so carried whether or not content is opted in (absent when
    /// the run gave none); a sub-agent's only with content (it is its parent's tool result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The validated output, when the final answer matched the output schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
}

/// A call that needs a decision, as [`EventKind::ApprovalRequested`] lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalCall {
    /// The call's id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The hash a decision must name.
    pub arguments_hash: String,
    /// Why a decision is needed.
    pub reason: String,
    /// The arguments (only with content opted in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
}

/// One event of a run: `{"v": 1, "type", "run_id", "seq", "ts", ...}` in JSON, plus `"agent"` and
/// `"parent_run_id"` for the events of a sub-agent's run.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The run's id.
    pub run_id: Arc<str>,
    /// The sub-agent whose run this is (its name in the parent's agent); `None` for a top-level run.
    pub agent: Option<Arc<str>>,
    /// The run that started this sub-agent's run; `None` for a top-level run.
    pub parent_run_id: Option<Arc<str>>,
    /// 0-based, one more for each event of the run.
    pub seq: u64,
    /// Wall-clock time of the event.
    pub ts: SystemTime,
    /// What happened.
    pub kind: EventKind,
}

#[derive(Deserialize)]
struct EventLine {
    v: u32,
    run_id: String,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    parent_run_id: Option<String>,
    seq: u64,
    ts: String,
    #[serde(flatten)]
    kind: EventKind,
}

/// [`EventLine`] borrowing the event: what [`Event::write_json`] serializes.
#[derive(Serialize)]
struct EventLineRef<'a> {
    v: u32,
    run_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_run_id: Option<&'a str>,
    seq: u64,
    #[serde(serialize_with = "rfc3339_millis")]
    ts: SystemTime,
    #[serde(flatten)]
    kind: &'a EventKind,
}

fn rfc3339_millis<S: serde::Serializer>(ts: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_rfc3339_millis(*ts))
}

impl Event {
    /// The event as one JSON line (no trailing newline).
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(128);
        match self.write_json(&mut out) {
            Ok(()) => String::from_utf8(out).unwrap_or_default(),
            Err(e) => format!("{{\"v\":1,\"type\":\"serialize_error\",\"error\":{:?}}}", e.to_string()),
        }
    }

    /// Writes the line of [`Event::to_json`] to `out` without building it apart (no trailing newline).
    /// On an error, part of the line may have been written.
    pub fn write_json(&self, out: impl std::io::Write) -> serde_json::Result<()> {
        let line = EventLineRef {
            v: EVENT_VERSION,
            run_id: &self.run_id,
            agent: self.agent.as_deref(),
            parent_run_id: self.parent_run_id.as_deref(),
            seq: self.seq,
            ts: self.ts,
            kind: &self.kind,
        };
        serde_json::to_writer(out, &line)
    }

    /// Parses one JSON line written by [`Event::to_json`].
    pub fn from_json(line: &str) -> Result<Event, String> {
        let l: EventLine = serde_json::from_str(line).map_err(|e| e.to_string())?;
        if l.v != EVENT_VERSION {
            return Err(format!("unsupported event version {}", l.v));
        }
        let ts = humantime::parse_rfc3339(&l.ts).map_err(|e| e.to_string())?;
        Ok(Event {
            run_id: Arc::from(l.run_id),
            agent: l.agent.map(Arc::from),
            parent_run_id: l.parent_run_id.map(Arc::from),
            seq: l.seq,
            ts,
            kind: l.kind,
        })
    }
}

/// Why an observer failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ObserverError(pub String);

/// Hears every event of a run. Its errors and panics never change the run's outcome.
pub trait Observer: Send + Sync {
    /// Called for each event, in order.
    fn on_event(&self, event: &Event) -> Result<(), ObserverError>;
}

impl<F: Fn(&Event) -> Result<(), ObserverError> + Send + Sync> Observer for F {
    fn on_event(&self, event: &Event) -> Result<(), ObserverError> {
        self(event)
    }
}

/// Hears about observers that failed: the observer's index and the error (a panic's message included).
pub type ObserverErrorHook = Arc<dyn Fn(usize, &ObserverError) + Send + Sync>;

/// Sends events to observers, numbering them and containing failures.
///
/// No event is built or dropped per emit on a step's path: the emitter keeps one event for each kind a
/// step sends (`model_start`, `model_end`, `tool_start`, `tool_end`), made once per run when someone
/// listens, and an emit of one of them writes its fields in place, dates and numbers it and lends it to
/// the observers. Other kinds go through one more event the emitter reuses. Strings an event repeats are
/// shared, not copied: the run id (held by those events), each call's id (the call's own), the tool
/// names (interned once per run); a call's `tool_end` takes the strings of its `tool_start` when it
/// comes right after it.
pub(crate) struct Emitter {
    /// The event of the kinds a step does not send: each emit replaces its kind.
    event: Event,
    /// The events of the kinds a step sends (when someone listens).
    step: Option<Box<StepEvents>>,
    pub(crate) include_content: bool,
    /// The tool names seen so far (at most [`MAX_INTERNED`]).
    names: Vec<Arc<str>>,
    /// Where events go, their numbers and their clock.
    out: Out,
}

/// The events a step sends, reused from one step to the next. Each one's kind is set once, by
/// [`Emitter::new`]; afterwards only its fields are written.
struct StepEvents {
    model_start: Event,
    model_end: Event,
    tool_start: Event,
    tool_end: Event,
}

/// What sending an event needs: the observers, the next number, and the clock that dates it.
struct Out {
    observers: Vec<Arc<dyn Observer>>,
    on_error: Option<ObserverErrorHook>,
    /// The number of the next event.
    seq: u64,
    /// The wall clock and the monotonic clock read together when the emitter was made: an event's time is
    /// the first plus the monotonic time since, so an instant the driver read anyway dates an event
    /// without reading the clock again.
    origin: (SystemTime, Instant),
    /// The instant and the time of the event sent last (`origin` before any): an event that ends what
    /// began then is dated by that time plus its duration, without converting an instant again.
    last: (Instant, SystemTime),
}

/// How many tool names an emitter keeps for reuse; names past it are allocated per event.
const MAX_INTERNED: usize = 256;

impl Emitter {
    pub(crate) fn new(
        run_id: Arc<str>,
        observers: Vec<Arc<dyn Observer>>,
        on_error: Option<ObserverErrorHook>,
        include_content: bool,
    ) -> Self {
        let origin = (SystemTime::now(), Instant::now());
        let event = |kind: EventKind| Event {
            run_id: Arc::clone(&run_id),
            agent: None,
            parent_run_id: None,
            seq: 0,
            ts: origin.0,
            kind,
        };
        let step = (!observers.is_empty()).then(|| {
            let blank: Arc<str> = Arc::from("");
            Box::new(StepEvents {
                model_start: event(EventKind::ModelStart { step: 0, messages: 0 }),
                model_end: event(EventKind::ModelEnd(Box::new(ModelEndData {
                    step: 0,
                    duration_ms: 0.0,
                    usage: None,
                    tool_calls: 0,
                    text: None,
                    finish_reason: None,
                    cost_usd: None,
                    model: None,
                }))),
                tool_start: event(EventKind::ToolStart {
                    call_id: Arc::clone(&blank),
                    name: Arc::clone(&blank),
                    arguments: None,
                }),
                tool_end: event(EventKind::ToolEnd {
                    call_id: Arc::clone(&blank),
                    name: blank,
                    is_error: false,
                    duration_ms: 0.0,
                    content: None,
                }),
            })
        });
        let event = event(EventKind::ModelStart { step: 0, messages: 0 });
        let out = Out { observers, on_error, seq: 0, origin, last: (origin.1, origin.0) };
        Emitter { event, step, include_content, names: Vec::new(), out }
    }

    /// Tags every event as one of the sub-agent `agent`'s run, started by `parent_run_id`.
    pub(crate) fn tag(&mut self, agent: Arc<str>, parent_run_id: Arc<str>) {
        let mut events = vec![&mut self.event];
        if let Some(s) = self.step.as_deref_mut() {
            events.extend([&mut s.model_start, &mut s.model_end, &mut s.tool_start, &mut s.tool_end]);
        }
        for e in events {
            e.agent = Some(Arc::clone(&agent));
            e.parent_run_id = Some(Arc::clone(&parent_run_id));
        }
    }

    /// The run's id.
    pub(crate) fn run_id(&self) -> &Arc<str> {
        &self.event.run_id
    }

    /// True when someone listens (events are not even built otherwise).
    pub(crate) fn active(&self) -> bool {
        !self.out.observers.is_empty()
    }

    /// The instant that dates an event: now when someone listens, else the emitter's origin (the clock is not
    /// read for events nobody gets).
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        if self.active() { Instant::now() } else { self.out.origin.1 }
    }

    /// Emits `model_start` for `step`, dated `at` (nothing is built when nobody listens).
    #[inline]
    pub(crate) fn model_start(&mut self, step: u64, messages: usize, at: Instant) {
        let Some(s) = self.step.as_deref_mut() else { return };
        if let EventKind::ModelStart { step: st, messages: m } = &mut s.model_start.kind {
            (*st, *m) = (step, messages);
        }
        let ts = self.out.wall(at);
        self.out.lend(&mut s.model_start, (at, ts));
    }

    /// Writes the `model_end` of `response` (the answer of `step`'s call, priced by `price` when known)
    /// into its event, in place, to be sent by [`Emitter::send_model_end`] once the response is admitted.
    #[inline]
    pub(crate) fn stage_model_end(&mut self, step: u64, response: &ModelResponse, price: Option<&Price>) {
        let Some(s) = self.step.as_deref_mut() else { return };
        if let EventKind::ModelEnd(end) = &mut s.model_end.kind {
            let ModelEndData { step: st, usage, tool_calls, text, finish_reason, cost_usd, model, .. } = &mut **end;
            let price = response.answered_by.as_ref().map_or(price, |by| by.price.as_ref());
            *cost_usd = price.zip(response.usage.as_ref()).map(|(p, u)| p.cost(u));
            *model = response.answered_by.as_ref().map(|by| by.model.clone());
            (*st, *usage, *tool_calls) = (step, response.usage, response.tool_calls.len());
            if self.include_content {
                *text = Some(response.text.clone());
            }
            finish_reason.clone_from(&response.finish_reason);
        }
    }

    /// Sends the `model_end` written by [`Emitter::stage_model_end`] for the call that began at `began`
    /// (the instant of its `model_start`) and returned at `at`, `elapsed` later.
    #[inline]
    pub(crate) fn send_model_end(&mut self, began: Instant, elapsed: Duration, at: Instant) {
        let Some(s) = self.step.as_deref_mut() else { return };
        if let EventKind::ModelEnd(end) = &mut s.model_end.kind {
            end.duration_ms = ms(elapsed);
        }
        let ts = self.out.wall_after(began, elapsed, at);
        self.out.lend(&mut s.model_end, (at, ts));
    }

    /// Emits `tool_start` for `call`, dated `at` (nothing is built when nobody listens).
    #[inline]
    pub(crate) fn tool_start(&mut self, call: &ToolCall, at: Instant) {
        if self.step.is_some() {
            self.tool_started(call, at);
        }
    }

    fn tool_started(&mut self, call: &ToolCall, at: Instant) {
        let Some(s) = self.step.as_deref_mut() else { return };
        if let EventKind::ToolStart { call_id, name, arguments } = &mut s.tool_start.kind {
            *call_id = Arc::clone(&call.id);
            // The event still holds the name of an earlier call: kept when it is this one's.
            if **name != *call.name {
                *name = intern(&mut self.names, &call.name);
            }
            *arguments = self.include_content.then(|| call.arguments.clone());
        }
        let ts = self.out.wall(at);
        self.out.lend(&mut s.tool_start, (at, ts));
    }

    /// Emits `tool_end` for `call`. `when` (asked only when someone listens) gives how long the call took,
    /// when it began if known (`elapsed` before the end), and the instant that dates the end.
    #[inline]
    pub(crate) fn tool_end(
        &mut self,
        call: &ToolCall,
        is_error: bool,
        when: impl FnOnce() -> (Duration, Option<Instant>, Instant),
        content: impl FnOnce() -> String,
    ) {
        if self.step.is_some() {
            let (elapsed, began, at) = when();
            let ts = match began {
                Some(began) => self.out.wall_after(began, elapsed, at),
                None => self.out.wall(at),
            };
            let content = self.include_content.then(content);
            self.tool_ended(call, is_error, elapsed, content, (at, ts));
        }
    }

    fn tool_ended(
        &mut self,
        call: &ToolCall,
        is_error: bool,
        elapsed: Duration,
        content: Option<String>,
        when: (Instant, SystemTime),
    ) {
        let Some(s) = self.step.as_deref_mut() else { return };
        if let EventKind::ToolEnd { call_id, name, is_error: e, duration_ms, content: c } = &mut s.tool_end.kind {
            match &mut s.tool_start.kind {
                // The call's start was sent last: its strings move over (swapped, not shared again).
                // The same id (the call's own `Arc`) is the same call, so the same name.
                EventKind::ToolStart { call_id: id, name: n, .. }
                    if Arc::ptr_eq(id, &call.id) || (**id == *call.id && **n == *call.name) =>
                {
                    std::mem::swap(call_id, id);
                    std::mem::swap(name, n);
                }
                _ => {
                    *call_id = Arc::clone(&call.id);
                    *name = intern(&mut self.names, &call.name);
                }
            }
            (*e, *duration_ms) = (is_error, ms(elapsed));
            *c = content;
        }
        self.out.lend(&mut s.tool_end, when);
    }

    /// Sends `kind`, dated now, to every observer.
    #[inline]
    pub(crate) fn emit(&mut self, kind: EventKind) {
        if self.active() {
            self.emit_at(kind, Instant::now());
        }
    }

    /// Sends `kind`, dated `at` (an instant the caller read anyway), to every observer.
    #[inline]
    pub(crate) fn emit_at(&mut self, kind: EventKind, at: Instant) {
        if self.active() {
            let ts = self.out.wall(at);
            self.send(kind, (at, ts));
        }
    }

    /// Sends `kind`, the end of what began at `began` and took `elapsed` until `at`, to every observer.
    #[inline]
    pub(crate) fn emit_after(&mut self, kind: EventKind, began: Instant, elapsed: Duration, at: Instant) {
        if self.active() {
            let ts = self.out.wall_after(began, elapsed, at);
            self.send(kind, (at, ts));
        }
    }

    fn send(&mut self, kind: EventKind, when: (Instant, SystemTime)) {
        self.event.kind = kind;
        self.out.lend(&mut self.event, when);
    }
}

impl Out {
    /// The wall-clock time of `at`.
    #[inline]
    fn wall(&self, at: Instant) -> SystemTime {
        self.origin.0.checked_add(at.saturating_duration_since(self.origin.1)).unwrap_or(self.origin.0)
    }

    /// The wall-clock time of `at`, the end of what began at `began` and took `elapsed` (`at - began`,
    /// saturating): when the event sent last was dated `began` (a call's start right before its end), that
    /// event's time plus `elapsed`, which is the same time [`Out::wall`] gives, with less arithmetic.
    #[inline]
    fn wall_after(&self, began: Instant, elapsed: Duration, at: Instant) -> SystemTime {
        if began == self.last.0 && began <= at {
            self.last.1.checked_add(elapsed).unwrap_or(self.last.1)
        } else {
            self.wall(at)
        }
    }

    /// Numbers and dates `event` (`when`: the instant and its wall-clock time), lends it to every observer,
    /// and remembers it as the event sent last.
    #[inline(always)]
    fn lend(&mut self, event: &mut Event, when: (Instant, SystemTime)) {
        event.seq = self.seq;
        event.ts = when.1;
        self.last = when;
        for (i, obs) in self.observers.iter().enumerate() {
            match catch_unwind(AssertUnwindSafe(|| obs.on_event(event))) {
                Ok(Ok(())) => {}
                failed => observer_failed(&self.on_error, i, failed),
            }
        }
        self.seq += 1;
    }
}

/// `name` as a shared string, the same one each time it is asked for (from `names`, which keeps at most
/// [`MAX_INTERNED`]).
fn intern(names: &mut Vec<Arc<str>>, name: &str) -> Arc<str> {
    if let Some(n) = names.iter().find(|n| ***n == *name) {
        return Arc::clone(n);
    }
    let n: Arc<str> = Arc::from(name);
    if names.len() < MAX_INTERNED {
        names.push(Arc::clone(&n));
    }
    n
}

/// Tells the error hook, if any, that observer `i` failed (an error or a panic).
#[cold]
#[inline(never)]
fn observer_failed(
    on_error: &Option<ObserverErrorHook>,
    i: usize,
    failed: std::thread::Result<Result<(), ObserverError>>,
) {
    let err = match failed {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(panic) => ObserverError(format!("observer panicked: {}", panic_message(&panic))),
    };
    if let Some(hook) = on_error {
        let _ = catch_unwind(AssertUnwindSafe(|| hook(i, &err)));
    }
}

pub(crate) fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

/// Milliseconds of a duration, as a float.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event is as large as its largest kind, and an observer that keeps events copies each one: the
    /// large, rare kinds (and `model_end`) are boxed so that an event stays small.
    #[test]
    fn an_event_is_small() {
        let (kind, event) = (std::mem::size_of::<EventKind>(), std::mem::size_of::<Event>());
        println!("size_of::<EventKind>() = {kind}, size_of::<Event>() = {event}");
        assert!(kind <= 80, "EventKind is {kind} bytes");
        assert!(event <= 152, "Event is {event} bytes");
    }
}
