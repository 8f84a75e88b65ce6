//! Real model providers on `reins run`: `--model openai:MODEL` (Responses API), `openai-chat:MODEL` (Chat
//! Completions, any compatible server) and `anthropic:MODEL` (Messages), with `--base-url`,
//! `--max-response-tokens` (keys of the agent definition: `reins-agent` builds the provider) and `--stream`
//! (deltas on stderr); the cost of the run next to its usage.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use clap::Args;
use reins::{Delta, DeltaSink, Event, EventKind, Model, ModelError, ModelRequest, ModelResponse, Outcome, UsageTotals};
use reins_providers::Price;
use tokio_util::sync::CancellationToken;

/// Flags for real model providers.
#[derive(Args, Debug, Default)]
pub struct ProviderFlags {
    /// The server of an `openai:`, `openai-chat:` or `anthropic:` model: for OpenAI-style APIs a URL ending
    /// in /v1 (e.g. http://127.0.0.1:8080/v1), for Anthropic the host. A local server needs no API key.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Caps each model response at this many output tokens.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_response_tokens: Option<u32>,
    /// Shows the model's text (and reasoning) on stderr as it arrives.
    #[arg(long)]
    pub stream: bool,
}

/// The model and price of this run, once a real provider was chosen.
static PRICED: OnceLock<(String, Option<Price>)> = OnceLock::new();

/// Records the model and price of this run (a real provider) for `cost_usd` and the cost line.
pub fn set_pricing(pricing: &reins_agent::Pricing) {
    let _ = PRICED.set((pricing.model.clone(), pricing.price));
}

/// `model`, printing each call's text (and reasoning) on stderr while it streams in.
pub fn streamed(model: Arc<dyn Model>) -> Arc<dyn Model> {
    Arc::new(Streamed { inner: model })
}

/// Prints each model call's text on stderr while it streams in.
struct Streamed {
    inner: Arc<dyn Model>,
}

#[async_trait]
impl Model for Streamed {
    async fn generate(&self, request: &ModelRequest, cancel: &CancellationToken) -> Result<ModelResponse, ModelError> {
        let printer = Mutex::new(Printer { tty: std::io::stderr().is_terminal(), in_reasoning: false, wrote: false });
        let sink = DeltaSink::new(move |d| {
            if let Ok(mut p) = printer.lock() {
                p.print(d);
            }
        });
        sink.scope(self.inner.generate(request, cancel)).await
    }
    fn identity(&self) -> reins::ModelIdentity {
        self.inner.identity()
    }
}

/// Writes deltas to stderr: reasoning marked (dimmed on a terminal), text as is.
struct Printer {
    tty: bool,
    in_reasoning: bool,
    wrote: bool,
}

impl Printer {
    fn print(&mut self, delta: &Delta) {
        use crate::output::{stderr_raw, stderr_text};
        let reasoning = matches!(delta, Delta::Reasoning { .. });
        if reasoning && !self.in_reasoning {
            stderr_raw(if self.tty { "\x1b[2m" } else { "[reasoning] " });
        } else if !reasoning && self.in_reasoning {
            stderr_raw(if self.tty { "\x1b[0m\n" } else { "\n" });
        }
        self.in_reasoning = reasoning;
        // The model's text, escaped: only the dimming above is ours to send as is.
        match delta {
            Delta::Text { text } | Delta::Reasoning { text } => stderr_text(text),
            Delta::ToolCall { name, .. } => stderr_text(&format!("\n[calling {name}] ")),
            Delta::ToolArguments { fragment, .. } => stderr_text(fragment),
            Delta::Restart { attempt, reason } => stderr_text(&format!("\n[attempt {attempt} after: {reason}]\n")),
            _ => {}
        }
        self.wrote = true;
    }
}

impl Drop for Printer {
    fn drop(&mut self) {
        if self.wrote {
            crate::output::stderr_raw(if self.tty && self.in_reasoning { "\x1b[0m\n" } else { "\n" });
        }
    }
}

/// The cost of `usage` in US dollars, when a real provider with a known price ran.
pub fn cost(usage: &UsageTotals) -> Option<f64> {
    let (_, price) = PRICED.get()?;
    price.as_ref().map(|p| reins_providers::cost(p, usage))
}

/// An event as one JSON line; `run_end` gets `"cost_usd"` when the price is known.
pub fn event_json(event: &Event) -> String {
    let line = event.to_json();
    let EventKind::RunEnd { usage, .. } = &event.kind else { return line };
    let Some(cost) = cost(usage) else { return line };
    match serde_json::from_str::<serde_json::Value>(&line) {
        Ok(serde_json::Value::Object(mut map)) => {
            map.insert("cost_usd".into(), cost.into());
            serde_json::Value::Object(map).to_string()
        }
        _ => line,
    }
}

/// The outcome as JSON, with `"cost_usd"` when the price is known.
pub fn outcome_json(outcome: &Outcome) -> serde_json::Result<serde_json::Value> {
    let mut v = serde_json::to_value(outcome)?;
    if let (Some(cost), Some(map)) = (cost(&outcome.usage), v.as_object_mut()) {
        map.insert("cost_usd".into(), cost.into());
    }
    Ok(v)
}

/// Prints the cost line under the readable summary (real providers only).
pub fn print_cost(outcome: &Outcome) {
    let Some((model, price)) = PRICED.get() else { return };
    let u = &outcome.usage;
    let partial = if u.calls_without_usage > 0 {
        format!(", at least: {} model call(s) reported no usage", u.calls_without_usage)
    } else {
        String::new()
    };
    match price {
        Some(p) => errln!(
            "  cost ≈ ${:.6} at {model} list prices (${}/${}/${} per million input/cached/output tokens{partial})",
            reins_providers::cost(p, u),
            p.input,
            p.cached_input,
            p.output
        ),
        None => errln!("  cost unknown: no price is known for {model}"),
    }
}
