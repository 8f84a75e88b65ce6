//! Real model providers on `reins run`: `--model openai:MODEL` (Responses API), `openai-chat:MODEL` (Chat
//! Completions, any compatible server) and `anthropic:MODEL` (Messages), with `--base-url`,
//! `--max-response-tokens` and `--stream`; the cost of the run next to its usage.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use clap::Args;
use reins::{
    ContextConfig, Delta, DeltaSink, Event, EventKind, Model, ModelError, ModelRequest, ModelResponse, Outcome,
    UsageTotals,
};
use reins_providers::{Api, Price, Provider, ProviderError};
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, usage};

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

/// Builds the model named by `spec`: a real provider for `openai:`, `openai-chat:` and `anthropic:`,
/// anything else as before.
pub fn build_model(spec: &str, flags: &ProviderFlags) -> Result<Arc<dyn Model>, CliError> {
    let provider = spec.split_once(':').map(|(p, _)| p);
    if !matches!(provider, Some("openai" | "openai-chat" | "anthropic")) {
        if flags.base_url.is_some() || flags.max_response_tokens.is_some() {
            return Err(usage(format!(
                "--base-url and --max-response-tokens apply to openai:, openai-chat: and anthropic: models, not {spec:?}"
            )));
        }
        return crate::models::build_model(spec);
    }
    let (api, model) = Api::parse_spec(spec).map_err(|e| usage(format!("--model: {e}")))?;
    let mut b = Provider::builder(api, model.clone()).api_key_from_env();
    if let Some(url) = &flags.base_url {
        b = b.base_url(url.clone());
    }
    if let Some(n) = flags.max_response_tokens {
        b = b.max_output_tokens(n);
    }
    let provider = b.build().map_err(|e| match e {
        ProviderError::MissingApiKey { env } => {
            usage(format!("--model {spec} needs an API key: set {env} (or point --base-url at a local server)"))
        }
        other => usage(other.to_string()),
    })?;
    let _ = PRICED.set((model.clone(), reins_providers::model_info(&model).map(|i| i.price)));
    if flags.stream { Ok(Arc::new(Streamed { inner: provider })) } else { Ok(Arc::new(provider)) }
}

/// Prints each model call's text on stderr while it streams in.
struct Streamed {
    inner: Provider,
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

/// The context budget of a run with a known real model and no `--max-context-*` flag: the model's window less
/// its response cap, in o200k_base tokens, with a tenth kept back for the difference between that tokenizer and
/// the vendor's and for the framing of the request. Any other run keeps `context` as it is.
pub fn default_context(spec: &str, flags: &ProviderFlags, context: ContextConfig) -> Result<ContextConfig, CliError> {
    if context.max_context.is_some() {
        return Ok(context);
    }
    let Ok((_, model)) = Api::parse_spec(spec) else { return Ok(context) };
    let Some(info) = reins_providers::model_info(&model) else { return Ok(context) };
    let reserve = flags.max_response_tokens.map_or(info.max_output_tokens.min(32_000), u64::from);
    let budget = info.context_window.saturating_sub(reserve) / 10 * 9;
    if budget == 0 {
        return Ok(context);
    }
    let counter = reins_providers::token_counter(&model).map_err(|e| CliError::Internal(anyhow::anyhow!(e)))?;
    Ok(ContextConfig { max_context: Some(budget), counter, ..context })
}
