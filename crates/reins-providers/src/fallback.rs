//! Fallback between models: a [`Model`] that asks the next of its models when one fails in a way it
//! cannot fix by itself, before any output of the step has streamed, and cools a failed model down.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use reins::{AnsweredBy, Delta, DeltaSink, Model, ModelError, ModelIdentity, ModelRequest, ModelResponse};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a failed model is skipped when the agent file sets no `fallback_cooldown`.
pub const DEFAULT_FALLBACK_COOLDOWN: Duration = Duration::from_secs(60);

/// Whether a step that failed with `error` may be asked of the next model.
///
/// Yes for what another provider can fix and the failed one could not with its own retries: a failed call
/// (connection refused or cut, a timeout, 408, 429 and 5xx/overloaded after the adapter's retries) and an
/// exhausted quota. No for a request the provider rejected (400, 404, 422: the next model would get the same
/// request), refused credentials (a configuration error to fix, not to hide), a context overflow (the
/// context rules should have fitted the request; a model with another window would change the run's
/// behaviour silently), a malformed response and a cancelled call.
pub fn falls_over(error: &ModelError) -> bool {
    matches!(error, ModelError::Failed(_) | ModelError::QuotaExhausted(_))
}

/// A [`Model`] over a list of models: each step goes to the first model that is not cooling down; when it
/// fails with an error [`falls_over`] accepts and none of the step's output has streamed yet, the step goes
/// to the next. A model that failed so is skipped for the cool-down, then asked again. When every model is
/// cooling down, they are asked in order all the same (a run does not fail for want of a model).
///
/// Reasoning items stay with the API that made them (each adapter sends back only its own API's), so a
/// step that falls over to another vendor sends none of the first's.
pub struct FallbackModel {
    models: Vec<Arc<dyn Model>>,
    cooldown: Duration,
    /// Per model, until when it is skipped.
    cooled: Mutex<Vec<Option<Instant>>>,
    /// Per model, the name a step it answered is said to be answered by (see [`FallbackModel::named`]).
    names: Vec<String>,
}

impl std::fmt::Debug for FallbackModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FallbackModel").field("models", &self.models.len()).field("cooldown", &self.cooldown).finish()
    }
}

impl FallbackModel {
    /// Falls over along `models`, in order, cooling a failed model down for `cooldown`.
    pub fn new(models: Vec<Arc<dyn Model>>, cooldown: Duration) -> Self {
        let cooled = Mutex::new(vec![None; models.len()]);
        Self { models, cooldown, cooled, names: Vec::new() }
    }

    /// The same, naming each model (in order) as the user wrote it (`azure:gpt-4o-mini`) in the
    /// [`ModelResponse::answered_by`] of a step it answered; without a name, a model is named by its identity.
    pub fn named(mut self, names: Vec<String>) -> Self {
        self.names = names;
        self
    }

    /// The models, in order.
    pub fn models(&self) -> &[Arc<dyn Model>] {
        &self.models
    }

    /// The order in which a step asks the models now: those not cooling down, then those that are.
    fn order(&self) -> Vec<usize> {
        let now = Instant::now();
        let cooled = self.cooled.lock().map(|c| c.clone()).unwrap_or_default();
        let is_cool = |i: usize| cooled.get(i).copied().flatten().is_some_and(|until| until > now);
        let (mut ready, cooling): (Vec<usize>, Vec<usize>) = (0..self.models.len()).partition(|&i| !is_cool(i));
        ready.extend(cooling);
        ready
    }

    fn cool_down(&self, i: usize) {
        if let Ok(mut c) = self.cooled.lock()
            && let Some(slot) = c.get_mut(i)
        {
            *slot = Some(Instant::now() + self.cooldown);
        }
    }

    fn recovered(&self, i: usize) {
        if let Ok(mut c) = self.cooled.lock()
            && let Some(slot) = c.get_mut(i)
        {
            *slot = None;
        }
    }
}

tokio::task_local! {
    /// Set by an adapter that recorded `gen_ai.response.model` while a fallback's model answered.
    pub(crate) static RESPONSE_MODEL: Arc<AtomicBool>;
}

/// Asks `model` with a delta sink that passes every delta on to the caller's and notes whether any output
/// (anything but a restart) streamed; and whether its adapter recorded `gen_ai.response.model`.
async fn ask(
    model: &dyn Model,
    request: &ModelRequest,
    cancel: &CancellationToken,
) -> (Result<ModelResponse, ModelError>, bool, bool) {
    let outer = DeltaSink::current();
    let streamed = Arc::new(AtomicBool::new(false));
    let s = streamed.clone();
    let sink = DeltaSink::new(move |d| {
        if !matches!(d, Delta::Restart { .. }) {
            s.store(true, Ordering::Relaxed);
        }
        if let Some(o) = &outer {
            o.send(d);
        }
    });
    let recorded = Arc::new(AtomicBool::new(false));
    let result = RESPONSE_MODEL.scope(recorded.clone(), sink.scope(model.generate(request, cancel))).await;
    (result, streamed.load(Ordering::Relaxed), recorded.load(Ordering::Relaxed))
}

/// The name (`name` where given) and price of `model`, the `i`-th of the list, answering in place of the first.
fn answered_by(model: &dyn Model, i: usize, name: Option<&String>) -> AnsweredBy {
    let id = model.identity();
    let model_name = match (name, id.provider, id.model) {
        (Some(n), _, _) => n.clone(),
        (None, Some(p), Some(m)) => format!("{p}:{m}"),
        (None, None, Some(m)) => m.to_string(),
        (None, _, None) => format!("#{}", i + 1),
    };
    AnsweredBy { model: model_name, price: model.price() }
}

#[async_trait]
impl Model for FallbackModel {
    async fn generate(&self, request: &ModelRequest, cancel: &CancellationToken) -> Result<ModelResponse, ModelError> {
        let order = self.order();
        let mut last = ModelError::Failed("no model to ask".into());
        for (n, &i) in order.iter().enumerate() {
            let Some(model) = self.models.get(i) else { continue };
            let (result, streamed, recorded) = ask(model.as_ref(), request, cancel).await;
            match result {
                Ok(mut response) => {
                    self.recovered(i);
                    if i != 0 {
                        response.answered_by = Some(Box::new(answered_by(model.as_ref(), i, self.names.get(i))));
                        if !recorded {
                            // The step's span names who answered even when its provider did not say.
                            crate::response_model(model.identity().model.as_deref());
                        }
                    }
                    return Ok(response);
                }
                Err(e) if !falls_over(&e) || streamed || cancel.is_cancelled() => return Err(e),
                Err(e) => {
                    self.cool_down(i);
                    if n + 1 < order.len() {
                        let name =
                            model.identity().model.map(|m| m.to_string()).unwrap_or_else(|| format!("#{}", i + 1));
                        tracing::warn!(model = %name, error = %e, "model failed; falling over to the next model");
                    }
                    last = e;
                }
            }
        }
        Err(last)
    }

    /// The first model's (the one a run is meant to use; a step another answered names it in
    /// [`ModelResponse::answered_by`]).
    fn identity(&self) -> ModelIdentity {
        self.models.first().map(|m| m.identity()).unwrap_or_default()
    }

    /// The first model's price (a step another answered carries that one's in
    /// [`ModelResponse::answered_by`]).
    fn price(&self) -> Option<reins::Price> {
        self.models.first().and_then(|m| m.price())
    }
}
