//! What the page shows, built from a recorded session: the runs with their model calls, tool calls and
//! compactions as bars on each run's time axis (parallel calls in lanes of their own), the marks (limits,
//! compactions, approvals, the end), usage and cost per step, and the transcript. Everything is read from
//! the session's entries as data: an entry of another shape is skipped or shown as unreadable, never a
//! panic.
//!
//! Timings come from the recorded events: a call's bar starts at its `model_start` / `tool_start` /
//! `compaction_start` event (RFC 3339, milliseconds) and lasts the `duration_ms` of its end event. A call
//! with an end but no start (cut short) starts at its end less its duration; a start with no end (the run
//! is still going, or its process died) is an open bar up to the run's last event. Start times are as
//! precise as the events' timestamps (milliseconds), durations exact; lanes follow the order of the events
//! (calls started and not yet ended ran at once), not the timestamps.

use std::collections::HashMap;

use reins::Message;
use reins_store::{Session, kind};
use serde::Serialize;
use serde_json::Value;

/// How many characters of one text (a message, a tool's arguments or result) the page carries; a longer
/// one keeps its head and tail around a marker that says how many characters were left out
/// ([`reins::bound_text`]).
pub const MAX_TEXT_CHARS: usize = 16_384;

/// The whole view of one session: what the page's data block holds.
#[derive(Clone, Debug, Serialize)]
pub struct View {
    /// The format of this object (1).
    pub v: u32,
    /// The session's index row.
    pub session: reins_store::SessionSummary,
    /// The runs, in order.
    pub runs: Vec<RunView>,
    /// Every model call of the session, in order (the chart's x axis).
    pub steps: Vec<StepView>,
    /// The transcript.
    pub items: Vec<ItemView>,
    /// The most characters of one text the page carries.
    pub max_text_chars: usize,
    /// When the view was made (RFC 3339).
    pub generated_at: String,
    /// Set by the server (`reins ui`): where the page asks whether the session changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<Live>,
}

/// How a page served by `reins ui` refreshes itself.
#[derive(Clone, Debug, Serialize)]
pub struct Live {
    /// The path (without the token) of the small JSON the page polls for a change.
    pub stamp_url: String,
    /// The path (without the token) of the full view JSON.
    pub data_url: String,
    /// The path of the session list.
    pub list_url: String,
    /// Milliseconds between polls.
    pub poll_ms: u64,
    /// What the stamp URL answers while the session is as shown (`{"stamp": ...}`).
    pub stamp: String,
}

/// One run of the session.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunView {
    /// 1-based.
    pub number: u64,
    /// The run's id.
    pub run_id: String,
    /// When it started (milliseconds since the Unix epoch), if known.
    pub start_ms: Option<f64>,
    /// Milliseconds from its start to its end (or to its last event, for a run without an end).
    pub span_ms: f64,
    /// Its status; with no recorded end, `running` (the session's last run, still going) or `interrupted`.
    pub status: String,
    /// What went wrong, if anything.
    pub error: Option<String>,
    /// Model responses received.
    pub steps: u64,
    /// Tool calls admitted.
    pub tool_calls: u64,
    /// How many lanes its bars take (lane 0: model calls and compactions; 1..: tool calls).
    pub lanes: u32,
    /// The calls, as bars.
    pub bars: Vec<Bar>,
    /// Points in time worth a line: limits, compactions, approvals, the end.
    pub marks: Vec<Mark>,
}

/// A call on a run's time axis.
#[derive(Clone, Debug, Serialize)]
pub struct Bar {
    /// `model`, `tool` or `compaction`.
    pub kind: &'static str,
    /// The step it belongs to (for a compaction: the steps made before it).
    pub step: u64,
    /// For a tool call, the tool; for a model call, `step N`.
    pub name: String,
    /// For a tool call, its id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Milliseconds from the run's start.
    pub start: f64,
    /// Milliseconds it took (for an open bar: until the run's last event).
    pub dur: f64,
    /// Its lane.
    pub lane: u32,
    /// True when it failed (a model error, a tool error, a compaction that fell back).
    pub error: bool,
    /// True when no end was recorded.
    pub open: bool,
    /// A short line of detail (the error, the usage).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// A point on a run's time axis.
#[derive(Clone, Debug, Serialize)]
pub struct Mark {
    /// `limit` (also a hook that denied or failed), `compaction`, `approval` (requested, decided) or `end`.
    pub kind: &'static str,
    /// Milliseconds from the run's start.
    pub t: f64,
    /// What it says.
    pub label: String,
    /// The steps made by then.
    pub step: u64,
}

/// One model call: the chart's data.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StepView {
    /// The run it belongs to.
    pub run: u64,
    /// 1-based within its run.
    pub step: u64,
    /// Reported usage, when any.
    pub usage: Option<reins::Usage>,
    /// Its cost in US dollars, when recorded.
    pub cost_usd: Option<f64>,
    /// The error, when the call failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How many tool calls it proposed.
    pub tool_calls: usize,
    /// The transcript index of the first item it produced, if any.
    pub item: Option<usize>,
}

/// One transcript item.
#[derive(Clone, Debug, Serialize)]
pub struct ItemView {
    /// Its index in the transcript.
    pub i: u64,
    /// The run that recorded it.
    pub run: u64,
    /// The step of that run it follows (0: before the run's first model call).
    pub step: u64,
    /// `user`, `assistant`, `tool`, `summary` or `unreadable`.
    pub role: &'static str,
    /// Its text (bounded), or for a tool result its content.
    pub text: Bounded,
    /// An assistant turn's tool calls.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallView>,
    /// A tool result's call id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// A tool result's tool (from the call it answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// A tool result that is an error.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// A summary: how many items it replaces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaces: Option<u64>,
    /// An assistant turn's reasoning items (opaque: only how many, and the API they go back to).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningView>,
}

/// The reasoning items of an assistant turn, as the page tells them: they are sent back to the API that made them
/// and are not readable text (a signed or encrypted item), so the page says how many and to which API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReasoningView {
    /// How many.
    pub items: u64,
    /// The API of the first (a turn's items all come from one).
    pub api: String,
}

/// A proposed tool call.
#[derive(Clone, Debug, Serialize)]
pub struct CallView {
    /// Its id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// Its arguments as indented JSON (bounded).
    pub args: Bounded,
}

/// A text the page carries, at most [`MAX_TEXT_CHARS`] characters of it.
#[derive(Clone, Debug, Serialize)]
pub struct Bounded {
    /// The text, or its head and tail around a marker.
    pub s: String,
    /// How many characters the whole text has.
    pub chars: usize,
}

impl Bounded {
    fn new(text: &str) -> Bounded {
        let chars = text.chars().count();
        let s = if chars > MAX_TEXT_CHARS { reins::bound_text(text, MAX_TEXT_CHARS) } else { text.to_owned() };
        Bounded { s, chars }
    }
}

/// Milliseconds since the Unix epoch of an RFC 3339 time.
fn epoch_ms(ts: &str) -> Option<f64> {
    let t = humantime::parse_rfc3339_weak(ts).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(d.as_secs_f64() * 1000.0)
}

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64).filter(|f| f.is_finite() && *f >= 0.0)
}

fn uint(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The runs' bars and marks, built from one run's events.
#[derive(Default)]
struct RunBuilder {
    view: RunView,
    /// Epoch ms of the first and last time seen.
    first: Option<f64>,
    last: Option<f64>,
    model_start: Option<(u64, f64)>,
    compaction_start: Option<(u64, f64)>,
    /// Calls started and not yet ended: name, step, start, lane.
    tool_starts: HashMap<String, (String, u64, f64, u32)>,
    /// Which tool lanes (index + 1) a started call holds.
    lanes_busy: Vec<bool>,
    /// Absolute (epoch ms) bars before lanes and offsets are set.
    raw: Vec<(Bar, f64)>,
    raw_marks: Vec<(Mark, f64)>,
    step: u64,
    ended: bool,
}

impl RunBuilder {
    fn see(&mut self, t: f64) {
        self.first = Some(self.first.map_or(t, |f| f.min(t)));
        self.last = Some(self.last.map_or(t, |l| l.max(t)));
    }

    fn bar(&mut self, kind: &'static str, step: u64, name: String, call_id: Option<String>, start: f64, dur: f64) {
        let bar = Bar {
            kind,
            step,
            name,
            call_id,
            start: 0.0,
            dur,
            lane: 0,
            error: false,
            open: false,
            detail: String::new(),
        };
        self.see(start);
        self.see(start + dur);
        self.raw.push((bar, start));
    }

    fn free(&mut self, lane: u32) {
        if let Some(busy) =
            usize::try_from(lane).ok().and_then(|l| l.checked_sub(1)).and_then(|l| self.lanes_busy.get_mut(l))
        {
            *busy = false;
        }
    }

    fn mark(&mut self, kind: &'static str, t: f64, label: String) {
        self.see(t);
        let step = self.step;
        self.raw_marks.push((Mark { kind, t: 0.0, label, step }, t));
    }

    fn event(&mut self, e: &Value) {
        let Some(t) = e.get("ts").and_then(Value::as_str).and_then(epoch_ms) else { return };
        let ty = e.get("type").and_then(Value::as_str).unwrap_or("");
        self.see(t);
        match ty {
            "run_start" => {
                self.view.start_ms.get_or_insert(t);
            }
            "model_start" => self.model_start = Some((uint(e, "step"), t)),
            "model_end" | "model_error" => self.model_end(e, t, ty),
            "tool_start" => self.tool_start(e, t),
            "tool_end" => self.tool_end(e, t),
            "compaction_start" => self.compaction_start = Some((uint(e, "step"), t)),
            "compaction_end" => self.compaction_end(e, t),
            "limit_hit" => self.limit_hit(e, t),
            "run_end" => self.run_end(e, t),
            // A batch waits for decisions, and each decision: marks (approvals, `reins approve`).
            "approval_requested" => self.approval_requested(e, t),
            "approval_decided" => self.approval_decided(e, t),
            // A hook that denied, refused or failed (fail closed) is worth a line too.
            "hook" => self.hook(e, t),
            _ => {}
        }
    }

    /// A model call's bar (ended or failed), with its usage or error.
    fn model_end(&mut self, e: &Value, t: f64, ty: &str) {
        let step = uint(e, "step");
        let dur = num(e, "duration_ms").unwrap_or(0.0);
        let start = match self.model_start.take() {
            Some((s, t0)) if s == step => t0,
            _ => t - dur,
        };
        self.step = self.step.max(step);
        self.bar("model", step, format!("step {step}"), None, start, dur);
        if let Some((bar, _)) = self.raw.last_mut() {
            if ty == "model_error" {
                bar.error = true;
                bar.detail = text(e, "error").unwrap_or_default();
            } else {
                let calls = uint(e, "tool_calls");
                bar.detail = match e.get("usage").filter(|u| !u.is_null()) {
                    Some(u) => format!(
                        "{} in ({} cached) / {} out tokens · {calls} tool call(s)",
                        uint(u, "input_tokens"),
                        uint(u, "cached_input_tokens"),
                        uint(u, "output_tokens")
                    ),
                    None => format!("no usage reported · {calls} tool call(s)"),
                };
            }
        }
    }

    /// A tool call starts: its lane.
    fn tool_start(&mut self, e: &Value, t: f64) {
        let id = text(e, "call_id").unwrap_or_default();
        let name = text(e, "name").unwrap_or_default();
        // A call's lane: the first not held by a call started and not yet ended, in the order of the
        // events (the driver reports a concurrent group's starts together, then their ends), so
        // calls that ran at once sit side by side whatever the timestamps' precision.
        let lane = match self.lanes_busy.iter().position(|busy| !busy) {
            Some(l) => {
                self.lanes_busy[l] = true;
                l
            }
            None => {
                self.lanes_busy.push(true);
                self.lanes_busy.len() - 1
            }
        };
        let lane = u32::try_from(lane + 1).unwrap_or(u32::MAX);
        if let Some((_, _, _, old)) = self.tool_starts.insert(id, (name, self.step, t, lane)) {
            self.free(old);
        }
    }

    /// A tool call's bar, in its lane.
    fn tool_end(&mut self, e: &Value, t: f64) {
        let id = text(e, "call_id").unwrap_or_default();
        let dur = num(e, "duration_ms").unwrap_or(0.0);
        let (name, step, start, lane) = match self.tool_starts.remove(&id) {
            Some(s) => s,
            None => (text(e, "name").unwrap_or_default(), self.step, t - dur, 1),
        };
        self.free(lane);
        self.bar("tool", step, name, Some(id), start, dur);
        if let Some((bar, _)) = self.raw.last_mut() {
            bar.error = e.get("is_error").and_then(Value::as_bool).unwrap_or(false);
            bar.lane = lane;
        }
    }

    /// A compaction's bar and its mark.
    fn compaction_end(&mut self, e: &Value, t: f64) {
        let step = uint(e, "step");
        let dur = num(e, "duration_ms").unwrap_or(0.0);
        let start = match self.compaction_start.take() {
            Some((_, t0)) => t0,
            None => t - dur,
        };
        self.bar("compaction", step, "compaction".into(), None, start, dur);
        let fallback = text(e, "fallback");
        let label = format!(
            "compaction: {} items, {} → {}{}",
            uint(e, "items"),
            uint(e, "chars_before"),
            uint(e, "chars_after"),
            fallback.as_deref().map(|f| format!(" (fell back: {f})")).unwrap_or_default()
        );
        if let Some((bar, _)) = self.raw.last_mut() {
            bar.error = fallback.is_some();
            bar.detail = label.clone();
        }
        self.mark("compaction", t, label);
    }

    /// A limit hit: a mark.
    fn limit_hit(&mut self, e: &Value, t: f64) {
        let label = format!("{}: {}", text(e, "status").unwrap_or_default(), text(e, "detail").unwrap_or_default());
        self.mark("limit", t, label);
    }

    /// The run's end: its status and totals, and a mark.
    fn run_end(&mut self, e: &Value, t: f64) {
        self.ended = true;
        self.view.status = text(e, "status").unwrap_or_default();
        self.view.error = text(e, "error");
        self.view.steps = uint(e, "steps");
        self.view.tool_calls = uint(e, "tool_calls");
        let label = self.view.status.clone();
        self.mark("end", t, label);
    }

    /// A batch waits for decisions: a mark.
    fn approval_requested(&mut self, e: &Value, t: f64) {
        let calls = e.get("calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let what = calls
            .iter()
            .map(|c| {
                format!(
                    "{} ({}): {}",
                    text(c, "name").unwrap_or_default(),
                    text(c, "call_id").unwrap_or_default(),
                    text(c, "reason").unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        self.mark("approval", t, format!("approval requested: {what}"));
    }

    /// A decision: a mark.
    fn approval_decided(&mut self, e: &Value, t: f64) {
        let label = format!(
            "{}: {} ({}){}",
            text(e, "decision").unwrap_or_default(),
            text(e, "name").unwrap_or_default(),
            text(e, "call_id").unwrap_or_default(),
            text(e, "reason").map(|r| format!(" — {r}")).unwrap_or_default()
        );
        self.mark("approval", t, label);
    }

    /// A hook that denied, refused or failed (fail closed): a mark.
    fn hook(&mut self, e: &Value, t: f64) {
        let decision = text(e, "decision").unwrap_or_default();
        let error = text(e, "error");
        if error.is_some() || matches!(decision.as_str(), "deny" | "refuse") {
            let label = format!(
                "hook {} {}: {decision}{}",
                text(e, "hook_event").unwrap_or_default(),
                text(e, "hook").unwrap_or_default(),
                error.or_else(|| text(e, "reason")).map(|r| format!(" — {r}")).unwrap_or_default()
            );
            self.mark("limit", t, label);
        }
    }

    fn finish(mut self) -> RunView {
        let start = self.view.start_ms.or(self.first);
        let last = self.last.unwrap_or(0.0);
        // Calls still open: up to the last thing the run recorded.
        if let Some((step, t0)) = self.model_start.take() {
            self.bar("model", step, format!("step {step}"), None, t0, (last - t0).max(0.0));
            if let Some((b, _)) = self.raw.last_mut() {
                b.open = true;
            }
        }
        let mut open_tools: Vec<_> = self.tool_starts.drain().collect();
        open_tools.sort_by(|a, b| a.1.2.total_cmp(&b.1.2));
        for (id, (name, step, t0, lane)) in open_tools {
            self.bar("tool", step, name, Some(id), t0, (last - t0).max(0.0));
            if let Some((b, _)) = self.raw.last_mut() {
                b.open = true;
                b.lane = lane;
            }
        }
        if let Some((step, t0)) = self.compaction_start.take() {
            self.bar("compaction", step, "compaction".into(), None, t0, (last - t0).max(0.0));
            if let Some((b, _)) = self.raw.last_mut() {
                b.open = true;
            }
        }
        let origin = start.unwrap_or(0.0);
        self.view.start_ms = start;
        self.view.span_ms = (self.last.unwrap_or(origin) - origin).max(0.0);
        if !self.ended && self.view.status.is_empty() {
            self.view.status = "running".into();
        }
        // Lane 0 holds the model's calls and compactions; tool calls keep the lane they were given.
        self.raw.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut bars = Vec::with_capacity(self.raw.len());
        let mut lanes = 1;
        for (mut bar, abs) in self.raw {
            bar.start = abs - origin;
            lanes = lanes.max(bar.lane.saturating_add(1));
            bars.push(bar);
        }
        self.view.lanes = lanes;
        self.view.bars = bars;
        self.view.marks = self
            .raw_marks
            .into_iter()
            .map(|(mut m, abs)| {
                m.t = abs - origin;
                m
            })
            .collect();
        self.view
    }
}

/// Builds the view of `session`. Never fails: entries that do not parse are skipped (events, responses) or
/// shown as unreadable (transcript items).
pub fn build(session: &Session) -> View {
    let mut runs: Vec<RunBuilder> = Vec::new();
    let mut steps: Vec<StepView> = Vec::new();
    let mut items: Vec<ItemView> = Vec::new();
    // The (run, step) the next transcript items follow; the tool of each call id of the current turn.
    let mut at = (0u64, 0u64);
    let mut call_names: HashMap<String, String> = HashMap::new();
    let mut step_without_item: Option<usize> = None;
    for e in &session.entries {
        if runs.last().is_none_or(|r| r.view.number != e.run) && e.kind != kind::MESSAGE {
            runs.push(RunBuilder::default());
            if let Some(r) = runs.last_mut() {
                r.view.number = e.run;
            }
        }
        match e.kind.as_str() {
            kind::RUN_START => {
                at = (e.run, 0);
                if let Some(r) = runs.last_mut() {
                    r.view.run_id = text(&e.data, "run_id").unwrap_or_default();
                }
            }
            kind::RESPONSE => {
                let step = uint(&e.data, "step");
                at = (e.run, step);
                let response = e.data.get("response").filter(|r| r.is_object());
                let usage = response.and_then(|r| r.get("usage")).and_then(|u| serde_json::from_value(u.clone()).ok());
                let tool_calls =
                    response.and_then(|r| r.get("tool_calls")).and_then(Value::as_array).map_or(0, Vec::len);
                steps.push(StepView {
                    run: e.run,
                    step,
                    usage,
                    cost_usd: num(&e.data, "cost_usd"),
                    error: text(&e.data, "error"),
                    tool_calls,
                    item: None,
                });
                step_without_item = Some(steps.len() - 1);
            }
            kind::EVENT => {
                if let Some(r) = runs.last_mut() {
                    r.event(&e.data);
                }
            }
            kind::RUN_END => {
                if let Some(r) = runs.last_mut() {
                    r.ended = true;
                    r.view.status = text(&e.data, "status").unwrap_or_default();
                    r.view.error = text(&e.data, "error");
                    r.view.steps = uint(&e.data, "steps");
                    r.view.tool_calls = uint(&e.data, "tool_calls");
                }
            }
            kind::MESSAGE => {
                let i = e.msg_index.unwrap_or(items.len() as u64);
                let (run, step) = if at.0 == e.run { at } else { (e.run, 0) };
                if let Some(s) = step_without_item.take() {
                    if let Some(sv) = steps.get_mut(s) {
                        sv.item = Some(items.len());
                    }
                }
                items.push(item(i, run, step, &e.data, &mut call_names));
            }
            _ => {}
        }
    }
    let mut runs: Vec<RunView> = runs.into_iter().map(RunBuilder::finish).collect();
    // A run with no recorded end is still going only if it is the last one and the store says the session
    // runs; else its process is gone (a later run began, or the store found no live owner): interrupted.
    let last = runs.len().saturating_sub(1);
    for (i, run) in runs.iter_mut().enumerate() {
        if run.status == "running" && (i < last || session.summary.status != "running") {
            run.status = "interrupted".into();
        }
    }
    View {
        v: 1,
        session: session.summary.clone(),
        runs,
        steps,
        items,
        max_text_chars: MAX_TEXT_CHARS,
        generated_at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        live: None,
    }
}

fn item(i: u64, run: u64, step: u64, data: &Value, call_names: &mut HashMap<String, String>) -> ItemView {
    let base = |role, text: &str| ItemView {
        i,
        run,
        step,
        role,
        text: Bounded::new(text),
        calls: Vec::new(),
        call_id: None,
        tool: None,
        is_error: false,
        replaces: None,
        reasoning: None,
    };
    match serde_json::from_value::<Message>(data.clone()) {
        Ok(Message::User { content, .. }) => base("user", &content),
        Ok(Message::Assistant { content, tool_calls, reasoning }) => {
            call_names.clear();
            let mut v = base("assistant", &content);
            v.reasoning =
                reasoning.first().map(|first| ReasoningView { items: reasoning.len() as u64, api: first.api.clone() });
            v.calls = tool_calls
                .into_iter()
                .map(|c| {
                    call_names.insert(String::from(&*c.id), c.name.clone());
                    let args = serde_json::to_string_pretty(&c.arguments).unwrap_or_default();
                    CallView { id: String::from(&*c.id), name: c.name, args: Bounded::new(&args) }
                })
                .collect();
            v
        }
        Ok(Message::ToolResult(r)) => {
            let mut v = base("tool", &r.content);
            v.tool = call_names.get(&*r.call_id).cloned();
            v.call_id = Some(r.call_id.to_string());
            v.is_error = r.is_error;
            v
        }
        Ok(Message::Summary { content, replaces }) => {
            let mut v = base("summary", &content);
            v.replaces = Some(replaces);
            v
        }
        Err(e) => base("unreadable", &format!("unreadable transcript item: {e}")),
    }
}
