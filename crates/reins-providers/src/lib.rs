//! # Reins model providers
//!
//! [`Provider`] is a [`reins::Model`] for four wire formats: the OpenAI Responses API, OpenAI Chat
//! Completions (which every OpenAI-compatible server speaks: vLLM, llama.cpp, Ollama, LM Studio,
//! OpenRouter, ...), Anthropic Messages, Google Gemini's own API ([`gemini`]) and Amazon Bedrock's Converse ([`bedrock`]). It streams (text, reasoning
//! and tool-call deltas go to the run's [`reins::DeltaSink`] as they arrive), retries transient failures with
//! exponential backoff and jitter while honouring `Retry-After` and rate-limit headers, shares a client-side
//! [`RateLimiter`] between concurrent runs, bounds silences with an idle timeout and bodies with a size cap, and aborts
//! the HTTP request at once when the run is cancelled.
//!
//! ```no_run
//! # async fn demo() {
//! use reins_providers::{Api, Provider};
//! let model = Provider::builder(Api::OpenAiResponses, "gpt-4.1-mini").api_key_from_env().build().unwrap();
//! let agent = reins::Agent::builder(model).build().unwrap();
//! let outcome = agent.run("Say hi", tokio_util::sync::CancellationToken::new()).await;
//! println!("{:?}", outcome.answer);
//! # }
//! ```
//!
//! A model spec names its provider: `openai:`, `openai-chat:`, `anthropic:`, `gemini:`, `bedrock:`, or a service of the
//! [`PROVIDERS`] table (`ollama:`, `lmstudio:`, `llamacpp:`, `vllm:`, `openrouter:`, `groq:`, `together:`, `deepseek:`,
//! `mistral:`, `xai:`, `azure:`), each a row of data: its API, base URL and key variable
//! ([`NamedProvider::builder`]).
//!
//! [`model_info`] knows the context window and price of common models, [`cost`] prices a run's usage.
//! Reasoning is kept across turns: a response's reasoning items (Anthropic signed `thinking` and
//! `redacted_thinking`, Responses `reasoning` items with `encrypted_content`, Gemini `thoughtSignature`s with the part
//! each came on) are recorded with its turn and sent
//! back, unchanged and in order, by the adapter of the same API only ([`ProviderBuilder::thinking_budget`],
//! [`ProviderBuilder::reasoning_effort`], [`check_reasoning`]).

#![warn(missing_docs)]
// No function over 100 lines (the workspace's clippy.toml; test code may have longer ones).
#![warn(clippy::too_many_lines)]
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod anthropic;
pub mod bedrock;
mod fallback;
pub mod gemini;
mod media;
mod named;
pub mod openai_chat;
pub mod openai_responses;
mod pricing;
mod provider;
mod ratelimit;
mod reasoning;
pub mod retry;
pub mod sse;
mod wire;

/// Records the model that answered as `gen_ai.response.model` on the current span: the engine's `chat` span
/// of the call, which is entered while the provider answers (see `reins::spans`). Nothing without one.
fn response_model(model: Option<&str>) {
    if let Some(m) = model.filter(|m| !m.is_empty()) {
        let span = tracing::Span::current();
        if !span.is_disabled() {
            span.record("gen_ai.response.model", m);
            let _ = fallback::RESPONSE_MODEL
                .try_with(|recorded| recorded.store(true, std::sync::atomic::Ordering::Relaxed));
        }
    }
}

/// The API key an environment variable holds (`None` when unset or blank). `GEMINI_API_KEY`, when unset, falls
/// back to `GOOGLE_API_KEY` (the other name Google's tools read).
pub fn env_key(var: &str) -> Option<String> {
    let get = |v: &str| std::env::var(v).ok().filter(|k| !k.trim().is_empty());
    get(var).or_else(|| if var == "GEMINI_API_KEY" { get("GOOGLE_API_KEY") } else { None })
}

pub use bedrock::AwsCredentials;
pub use fallback::{DEFAULT_FALLBACK_COOLDOWN, FallbackModel, falls_over};
pub use named::{
    BaseUrlEnv, MAX_MODELS_BYTES, NamedProvider, PROVIDERS, known_models, named_provider, parse_named_spec,
    provider_names, served_models,
};
pub use pricing::{MODELS, ModelInfo, Price, cost, cost_for, model_info, token_counter};
pub use provider::{
    Api, BYTES_PER_TOKEN, DEFAULT_RESPONSE_CAP, DEFAULT_RESPONSE_DEADLINE, Provider, ProviderBuilder, ProviderError,
    ToolChoice,
};
pub use ratelimit::{Permit, RateLimiter};
pub use reasoning::{MIN_THINKING_BUDGET, ReasoningConflict, ReasoningEffort, ReasoningSettings, check_reasoning};
pub use retry::RetryPolicy;
