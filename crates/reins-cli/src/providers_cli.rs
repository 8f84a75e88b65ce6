//! Real model providers on `reins run`: `--model openai:MODEL` (Responses API), `openai-chat:MODEL` (Chat
//! Completions, any compatible server), `anthropic:MODEL` (Messages) and the providers by name (`ollama:`,
//! `groq:`, `azure:`, ...), with `--base-url`, `--temperature`, `--max-response-tokens`, `--reasoning-effort`, `--thinking-budget` (keys of the agent definition: `reins-agent`
//! builds the provider) and `--stream`
//! (deltas on stderr); the cost line under the summary (the core computes `cost_usd`).

use std::io::IsTerminal;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use clap::Args;
use reins::{Delta, DeltaSink, Model, ModelError, ModelRequest, ModelResponse, Outcome};
use reins_providers::Price;
use tokio_util::sync::CancellationToken;

/// Flags for real model providers.
#[derive(Args, Debug, Default)]
pub struct ProviderFlags {
    /// The server of an `openai:`, `openai-chat:` or `anthropic:` model: for OpenAI-style APIs a URL ending
    /// in /v1 (e.g. http://127.0.0.1:8080/v1), for Anthropic the host. A local server needs no API key.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The sampling temperature, 0 to 2 (OpenAI-style APIs; agent file: `[provider] temperature`).
    #[arg(long, value_name = "T", value_parser = parse_temperature)]
    pub temperature: Option<reins_agent::Temperature>,
    /// Caps each model response at this many output tokens.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_response_tokens: Option<u32>,
    /// How hard an OpenAI reasoning model thinks (openai: and openai-chat: models): low, medium or high. An
    /// openai: model's reasoning is then kept and sent back on the next turns. `none` clears an effort the
    /// agent file or a resumed session set.
    #[arg(long, value_name = "EFFORT", value_parser = parse_effort)]
    pub reasoning_effort: Option<Effort>,
    /// Extended thinking for anthropic: models, within N tokens (at least 1024, below the response cap); the
    /// signed thinking is kept and sent back on the next turns. 0 clears a budget the agent file or a resumed
    /// session set.
    #[arg(long, value_name = "N")]
    pub thinking_budget: Option<u32>,
    /// Shows the model's text (and reasoning) on stderr as it arrives.
    #[arg(long)]
    pub stream: bool,
    /// Sends no prompt-caching hints (Anthropic `cache_control` breakpoints, the Responses API's
    /// `prompt_cache_key`); agent file: `[provider] prompt_cache = false`.
    #[arg(long)]
    pub no_prompt_cache: bool,
}

/// `--reasoning-effort`: an effort, or `none` (no effort, whatever a lower layer set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effort {
    /// `none`.
    None,
    /// `low`, `medium` or `high`.
    Set(reins_providers::ReasoningEffort),
}

fn parse_temperature(s: &str) -> Result<reins_agent::Temperature, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .and_then(reins_agent::Temperature::new)
        .ok_or_else(|| format!("expected a number from 0 to 2, not {s:?}"))
}

fn parse_effort(s: &str) -> Result<Effort, String> {
    match s {
        "none" => Ok(Effort::None),
        other => other
            .parse()
            .map(Effort::Set)
            .map_err(|_| format!("expected \"low\", \"medium\", \"high\" or \"none\", not {other:?}")),
    }
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
    fn price(&self) -> Option<Price> {
        self.inner.price()
    }

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

/// Prints the cost line under the readable summary (a real provider, or a script model given a price).
pub fn print_cost(outcome: &Outcome) {
    let Some((model, price)) = PRICED.get() else { return };
    let u = &outcome.usage;
    let partial = if u.calls_without_usage > 0 {
        format!(", at least: {} model call(s) reported no usage", u.calls_without_usage)
    } else {
        String::new()
    };
    match (price, outcome.cost_usd) {
        (Some(p), Some(cost)) => errln!(
            "  cost ≈ ${cost:.6} at {model} list prices (${}/${}/${}/${} per million input/cache-read/cache-write/output tokens{partial})",
            p.input_per_mtok,
            p.cache_read(),
            p.cache_write(),
            p.output_per_mtok
        ),
        _ => errln!("  cost unknown: no price is known for {model}"),
    }
}
