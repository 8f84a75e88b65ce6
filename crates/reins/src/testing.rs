//! The testing kit: a scripted model, a model backed by a closure, and the script-file format.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::model::{Model, ModelError, ModelRequest, ModelResponse};
use crate::validate::parse_response;

/// One scripted model turn.
#[derive(Clone, Debug, PartialEq)]
pub enum ScriptStep {
    /// Answer with this response.
    Respond(ModelResponse),
    /// Fail the call with this error.
    Fail(ModelError),
    /// Deliver this JSON as the response, exactly as given: it goes through the response parser, so a
    /// malformed one becomes a `Malformed` model error.
    Raw(Value),
    /// Wait (honouring cancellation), then do the inner step.
    Delay(Duration, Box<ScriptStep>),
}

impl From<ModelResponse> for ScriptStep {
    fn from(r: ModelResponse) -> Self {
        ScriptStep::Respond(r)
    }
}

impl From<Result<ModelResponse, ModelError>> for ScriptStep {
    fn from(r: Result<ModelResponse, ModelError>) -> Self {
        match r {
            Ok(r) => ScriptStep::Respond(r),
            Err(e) => ScriptStep::Fail(e),
        }
    }
}

/// A model that answers from a script, in order, and records every request it received (instructions,
/// messages and tools: see [`ScriptedModel::requests`]). When the
/// script is exhausted, each further call fails with [`ModelError::Exhausted`].
///
/// A script that [follows the transcript](ScriptedModel::following_transcript) continues where the
/// conversation it is asked to continue already is, which a script file (`script:FILE`) does.
///
/// ```
/// use reins::{ModelResponse, ScriptedModel};
/// let model = ScriptedModel::new(vec![Ok(ModelResponse::text("hi"))]);
/// assert_eq!(model.remaining(), 1);
/// ```
#[derive(Debug, Default)]
pub struct ScriptedModel {
    /// The steps left, the calls so far and where a script that follows the transcript stands: one lock a call.
    script: Mutex<Script>,
    requests: Mutex<Vec<ModelRequest>>,
    record: bool,
    price: Option<crate::cost::Price>,
}

/// What a scripted model's calls take their answers from.
#[derive(Debug, Default)]
struct Script {
    steps: VecDeque<ScriptStep>,
    /// With [`ScriptedModel::following_transcript`]: what each step's answer looks like once recorded.
    follow: Option<Follow>,
    calls: usize,
}

impl ScriptedModel {
    /// A model answering with these results in order.
    pub fn new(steps: impl IntoIterator<Item = impl Into<ScriptStep>>) -> Self {
        let steps = steps.into_iter().map(Into::into).collect();
        ScriptedModel {
            script: Mutex::new(Script { steps, follow: None, calls: 0 }),
            requests: Mutex::new(Vec::new()),
            record: true,
            price: None,
        }
    }

    /// Reports `price` as the model's (so a scripted run has a cost and `max_cost_usd` applies).
    pub fn with_price(mut self, price: crate::cost::Price) -> Self {
        self.price = Some(price);
        self
    }

    /// Makes the script's position a function of the transcript, so that a conversation continued in a new
    /// process (a resumed session, an approved batch, a durable turn after a restart, a chat turn) goes on
    /// with the script's next turn instead of its first: at the first call whose conversation records
    /// assistant turns, the script skips to the number of recorded assistant turns that are its own — the
    /// longest run of the newest recorded turns that are its first turns in order (same text, same tool call
    /// ids and names). Turns recorded by another model (a different script given on resume) match none, and
    /// the script starts at its first turn. From then on the turns are used in order, as without this.
    ///
    /// ```
    /// use reins::{ModelResponse, ScriptedModel};
    /// let model = ScriptedModel::new(vec![ModelResponse::text("one"), ModelResponse::text("two")]).following_transcript();
    /// assert_eq!(model.remaining(), 2);
    /// ```
    pub fn following_transcript(mut self) -> Self {
        if let Ok(script) = self.script.get_mut() {
            let prints = script.steps.iter().map(Print::of).collect();
            script.follow = Some(Follow { prints, taken: 0, settled: false });
        }
        self
    }

    /// Stops recording requests (for long runs and benchmarks: a recorded request shares the transcript's newest
    /// chunk of messages, so the step after it copies that chunk).
    pub fn without_recording(mut self) -> Self {
        self.record = false;
        self
    }

    /// How many steps are left.
    pub fn remaining(&self) -> usize {
        self.script.lock().map_or(0, |s| s.steps.len())
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// How many calls it received.
    pub fn calls(&self) -> usize {
        self.script.lock().map_or(0, |s| s.calls)
    }

    /// Panics unless every scripted step was used: for tests.
    #[track_caller]
    pub fn assert_complete(&self) {
        let left = self.remaining();
        assert!(left == 0, "scripted model: {left} scripted step(s) were never used");
    }

    /// The step of a call, counted (one lock a call); `Exhausted` once the script is.
    fn take(&self, request: &ModelRequest) -> Result<ScriptStep, ModelError> {
        let mut script = self.script.lock().map_err(|_| ModelError::Failed("scripted model lock poisoned".into()))?;
        script.calls += 1;
        script.catch_up(request);
        let call = script.calls;
        script.steps.pop_front().ok_or(ModelError::Exhausted { call })
    }
}

impl Script {
    /// Where a script that follows the transcript starts, given the request of its call (see
    /// [`ScriptedModel::following_transcript`]): skips the steps the transcript already records.
    fn catch_up(&mut self, request: &ModelRequest) {
        let Some(f) = &mut self.follow else { return };
        f.taken += 1;
        if f.settled {
            return;
        }
        let recorded: Vec<Print> = request
            .messages
            .recorded()
            .filter_map(|m| match m {
                crate::message::Message::Assistant { content, tool_calls, .. } => Some(Print {
                    text: content.clone(),
                    calls: tool_calls.iter().map(|c| (c.id.to_string(), c.name.clone())).collect(),
                }),
                _ => None,
            })
            .collect();
        if recorded.is_empty() {
            // A first turn, or a summary call: nothing tells where the conversation is yet.
            return;
        }
        f.settled = true;
        let used = f.taken - 1;
        if recorded.len() <= used {
            return;
        }
        // The longest k > used such that the newest k recorded turns are the script's first k.
        let longest = recorded.len().min(f.prints.len());
        let found = (used + 1..=longest).rev().find(|&k| {
            let newest = &recorded[recorded.len() - k..];
            newest.iter().zip(&f.prints[..k]).all(|(r, p)| p.as_ref() == Some(r))
        });
        if let Some(k) = found {
            let skip = (k - used).min(self.steps.len());
            self.steps.drain(..skip);
            f.taken = k + 1;
        }
    }
}

impl Model for ScriptedModel {
    fn price(&self) -> Option<crate::cost::Price> {
        self.price
    }

    /// The call takes its step from the script when it is first polled (a call that is never polled, such
    /// as one a durable performer replays, takes none); only a delayed step waits, in a future of its own.
    fn generate<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        request: &'life1 ModelRequest,
        cancel: &'life2 CancellationToken,
    ) -> Pin<Box<dyn Future<Output = Result<ModelResponse, ModelError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(Answering { model: self, request, cancel, delayed: None })
    }

    /// Provider `reins.script`, model `script`.
    fn identity(&self) -> crate::model::ModelIdentity {
        crate::model::ModelIdentity {
            provider: Some(Arc::from("reins.script")),
            model: Some(Arc::from("script")),
            ..Default::default()
        }
    }
}

/// A scripted model's call: what `async fn generate` would be, written out so that a step that needs no
/// waiting is handed over as it is taken (the response is not moved through an async body's states).
struct Answering<'a> {
    model: &'a ScriptedModel,
    request: &'a ModelRequest,
    cancel: &'a CancellationToken,
    /// A delayed step being played.
    delayed: Option<futures_util::future::BoxFuture<'a, Result<ModelResponse, ModelError>>>,
}

impl Future for Answering<'_> {
    type Output = Result<ModelResponse, ModelError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        if let Some(delayed) = self.delayed.as_mut() {
            return delayed.as_mut().poll(cx);
        }
        let Answering { model, request, cancel, .. } = *self;
        if model.record {
            if let Ok(mut r) = model.requests.lock() {
                r.push(request.clone());
            }
        }
        std::task::Poll::Ready(match model.take(request) {
            Ok(ScriptStep::Respond(r)) => Ok(r),
            Ok(ScriptStep::Fail(e)) | Err(e) => Err(e),
            Ok(ScriptStep::Raw(v)) => parse_response(&v).map_err(|e| ModelError::Malformed(e.0)),
            Ok(delayed) => {
                let delayed = self.delayed.insert(Box::pin(played(delayed, cancel)));
                return delayed.as_mut().poll(cx);
            }
        })
    }
}

/// What `step` answers, once its delays passed (honouring cancellation).
async fn played(mut step: ScriptStep, cancel: &CancellationToken) -> Result<ModelResponse, ModelError> {
    loop {
        match step {
            ScriptStep::Respond(r) => return Ok(r),
            ScriptStep::Fail(e) => return Err(e),
            ScriptStep::Raw(v) => return parse_response(&v).map_err(|e| ModelError::Malformed(e.0)),
            ScriptStep::Delay(d, inner) => {
                tokio::select! {
                    _ = cancel.cancelled() => return Err(ModelError::Cancelled),
                    _ = tokio::time::sleep(d) => {}
                }
                step = *inner;
            }
        }
    }
}

/// A script that follows the transcript: what it has taken, whether it found its place, and what each step's
/// answer looks like once recorded.
#[derive(Debug)]
struct Follow {
    prints: Vec<Option<Print>>,
    taken: usize,
    settled: bool,
}

/// What identifies a recorded assistant turn: its text and its tool calls' ids and names (an approver may
/// have changed the arguments).
#[derive(Debug, PartialEq)]
struct Print {
    text: String,
    calls: Vec<(String, String)>,
}

impl Print {
    /// The print of a step's answer; `None` for a step that fails (it records no turn).
    fn of(step: &ScriptStep) -> Option<Print> {
        let response = match step {
            ScriptStep::Respond(r) => std::borrow::Cow::Borrowed(r),
            ScriptStep::Raw(v) => std::borrow::Cow::Owned(parse_response(v).ok()?),
            ScriptStep::Delay(_, inner) => return Print::of(inner),
            ScriptStep::Fail(_) => return None,
        };
        Some(Print {
            text: response.text.clone(),
            calls: response.tool_calls.iter().map(|c| (c.id.to_string(), c.name.clone())).collect(),
        })
    }
}

/// A model backed by a closure over the request.
///
/// ```
/// let model = reins::FnModel::new(|req| Ok(reins::ModelResponse::text(format!("{} messages", req.messages.len()))));
/// # let _ = model;
/// ```
pub struct FnModel<F> {
    f: F,
}

impl<F> FnModel<F>
where
    F: Fn(&ModelRequest) -> Result<ModelResponse, ModelError> + Send + Sync,
{
    /// A model that answers with `f(request)`.
    pub fn new(f: F) -> Self {
        FnModel { f }
    }
}

#[async_trait]
impl<F> Model for FnModel<F>
where
    F: Fn(&ModelRequest) -> Result<ModelResponse, ModelError> + Send + Sync,
{
    async fn generate(&self, request: &ModelRequest, _cancel: &CancellationToken) -> Result<ModelResponse, ModelError> {
        (self.f)(request)
    }
}

/// Why a script file could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScriptError(pub String);

const RESPONSE_KEYS: &[&str] = &["content", "text", "tool_calls", "usage", "reasoning", "finish_reason"];

/// Parses a script file: a JSON array whose elements are model turns —
/// `{"content", "tool_calls", "usage"}`, `{"error": "message"}`, `{"raw": <any JSON>}`, each optionally
/// with `"delay_ms": N` to wait first.
///
/// ```
/// let steps = reins::parse_script(r#"[{"content": "hi"}, {"error": "boom"}, {"delay_ms": 5, "raw": 1}]"#).unwrap();
/// assert_eq!(steps.len(), 3);
/// assert!(reins::parse_script(r#"{"content": "hi"}"#).is_err());
/// // A key named twice in one object is refused, at any depth.
/// assert!(reins::parse_script(r#"[{"content": "a", "content": "b"}]"#).is_err());
/// ```
pub fn parse_script(text: &str) -> Result<Vec<ScriptStep>, ScriptError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| ScriptError(format!("the script is not valid JSON: {e}")))?;
    // serde_json keeps the last of two equal keys: a script is refused instead, so that a typo or a pasted
    // duplicate never silently changes it.
    serde_json::from_str::<UniqueKeys>(text)
        .map_err(|e| ScriptError(format!("the script has a {e} (a key appears once per object)")))?;
    let Value::Array(items) = value else {
        return Err(ScriptError("the script is a JSON array of model turns".into()));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, v)| parse_step(v).map_err(|e| ScriptError(format!("script turn {i}: {e}"))))
        .collect()
}

/// Deserializes any JSON and fails on the first object that names a key twice ("duplicate key \"k\"").
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueKeysVisitor)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_none<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<UniqueKeys, D::Error> {
        serde::Deserialize::deserialize(d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                return Err(serde::de::Error::custom(format_args!("duplicate key {key:?}")));
            }
            map.next_value::<UniqueKeys>()?;
            seen.insert(key);
        }
        Ok(UniqueKeys)
    }
}

fn parse_step(v: &Value) -> Result<ScriptStep, String> {
    let Value::Object(map) = v else {
        return Err("a turn is a JSON object".into());
    };
    for key in map.keys() {
        if !(RESPONSE_KEYS.contains(&key.as_str()) || ["error", "raw", "delay_ms"].contains(&key.as_str())) {
            return Err(format!("unknown key {key:?} (expected content, tool_calls, usage, error, raw or delay_ms)"));
        }
    }
    let has_response = RESPONSE_KEYS.iter().any(|k| map.contains_key(*k));
    let step = match (map.get("error"), map.get("raw")) {
        (Some(_), Some(_)) => return Err("a turn has `error` or `raw`, not both".into()),
        (Some(_), None) | (None, Some(_)) if has_response => {
            return Err("a turn with `error` or `raw` has no response keys".into());
        }
        (Some(Value::String(e)), None) => ScriptStep::Fail(ModelError::Failed(e.clone())),
        (Some(_), None) => return Err("`error` is a string".into()),
        (None, Some(raw)) => ScriptStep::Raw(raw.clone()),
        (None, None) => {
            let mut response = map.clone();
            response.remove("delay_ms");
            ScriptStep::Respond(parse_response(&Value::Object(response)).map_err(|e| e.0)?)
        }
    };
    match map.get("delay_ms") {
        None => Ok(step),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(ms) => Ok(ScriptStep::Delay(Duration::from_millis(ms), Box::new(step))),
            None => Err(format!("delay_ms is a non-negative integer, not {n}")),
        },
        Some(_) => Err("delay_ms is a number of milliseconds".into()),
    }
}
