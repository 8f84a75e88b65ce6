//! What is known of a model: its context window, its output cap, its price, and a token counter for
//! context budgets; and the cost of a run.
//!
//! Prices are US dollars per million tokens, list prices as published by the vendors when this table was
//! written; they change, so treat a cost as an estimate. Models are matched by the longest known prefix of
//! their name (so dated snapshots like `gpt-4o-2024-08-06` find `gpt-4o`); an unknown model has no entry.

use std::sync::Arc;

pub use reins::Price;
use reins::{TokenCounter, UsageTotals};
use serde::Serialize;

/// What writing to the prompt cache costs, as a multiple of the input price: Anthropic charges 1.25× for
/// its 5-minute cache; OpenAI charges nothing extra (plain input).
const ANTHROPIC_CACHE_WRITE: f64 = 1.25;

/// What is known of one model.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ModelInfo {
    /// The name prefix this entry matched.
    pub prefix: &'static str,
    /// The context window in tokens (input plus output).
    pub context_window: u64,
    /// The most output tokens one response may hold.
    pub max_output_tokens: u64,
    /// The list price.
    pub price: Price,
}

const fn m(
    prefix: &'static str,
    context_window: u64,
    max_output_tokens: u64,
    input: f64,
    cached_input: f64,
    output: f64,
) -> ModelInfo {
    let write = if prefix.as_bytes()[0] == b'c' { input * ANTHROPIC_CACHE_WRITE } else { input };
    ModelInfo {
        prefix,
        context_window,
        max_output_tokens,
        price: Price {
            input_per_mtok: input,
            output_per_mtok: output,
            cache_read_per_mtok: Some(cached_input),
            cache_write_per_mtok: Some(write),
        },
    }
}

/// The table. Longest prefix wins, so order does not matter.
pub const MODELS: &[ModelInfo] = &[
    m("gpt-5", 400_000, 128_000, 1.25, 0.125, 10.0),
    m("gpt-5-mini", 400_000, 128_000, 0.25, 0.025, 2.0),
    m("gpt-5-nano", 400_000, 128_000, 0.05, 0.005, 0.40),
    m("gpt-4.1", 1_047_576, 32_768, 2.0, 0.50, 8.0),
    m("gpt-4.1-mini", 1_047_576, 32_768, 0.40, 0.10, 1.60),
    m("gpt-4.1-nano", 1_047_576, 32_768, 0.10, 0.025, 0.40),
    m("gpt-4o", 128_000, 16_384, 2.50, 1.25, 10.0),
    m("gpt-4o-mini", 128_000, 16_384, 0.15, 0.075, 0.60),
    m("o1", 200_000, 100_000, 15.0, 7.50, 60.0),
    m("o3", 200_000, 100_000, 2.0, 0.50, 8.0),
    m("o3-mini", 200_000, 100_000, 1.10, 0.55, 4.40),
    m("o4-mini", 200_000, 100_000, 1.10, 0.275, 4.40),
    m("claude-opus-4-5", 200_000, 64_000, 5.0, 0.50, 25.0),
    m("claude-opus-4", 200_000, 32_000, 15.0, 1.50, 75.0),
    m("claude-sonnet-4", 200_000, 64_000, 3.0, 0.30, 15.0),
    m("claude-haiku-4-5", 200_000, 64_000, 1.0, 0.10, 5.0),
    m("claude-3-7-sonnet", 200_000, 64_000, 3.0, 0.30, 15.0),
    m("claude-3-5-sonnet", 200_000, 8_192, 3.0, 0.30, 15.0),
    m("claude-3-5-haiku", 200_000, 8_192, 0.80, 0.08, 4.0),
    // Gemini's standard tier for text, image and video input, prompts up to 200k tokens (the Pro models charge
    // more above that, which this table does not model); output includes thinking; a cache read is implicit
    // caching's rate (explicit caching's storage by the hour is not modelled).
    m("gemini-3.5-flash", 1_048_576, 65_536, 1.50, 0.15, 9.0),
    m("gemini-3.1-pro", 1_048_576, 65_536, 2.0, 0.20, 12.0),
    m("gemini-3.1-flash-lite", 1_048_576, 65_536, 0.25, 0.025, 1.50),
    m("gemini-3-pro", 1_048_576, 65_536, 2.0, 0.20, 12.0),
    m("gemini-3-flash", 1_048_576, 65_536, 0.50, 0.05, 3.0),
    m("gemini-2.5-pro", 1_048_576, 65_536, 1.25, 0.125, 10.0),
    m("gemini-2.5-flash", 1_048_576, 65_536, 0.30, 0.03, 2.50),
    m("gemini-2.5-flash-lite", 1_048_576, 65_536, 0.10, 0.01, 0.40),
];

/// What is known of `model`, by the longest matching prefix. A prefix matches at a boundary only
/// (`gpt-4o` matches `gpt-4o-2024-08-06` but `o1` does not match `o1x`).
///
/// ```
/// let info = reins_providers::model_info("gpt-4o-mini-2024-07-18").unwrap();
/// assert_eq!(info.prefix, "gpt-4o-mini");
/// assert!(reins_providers::model_info("my-local-model").is_none());
/// ```
pub fn model_info(model: &str) -> Option<&'static ModelInfo> {
    // "vendor/model" names (routers) and ARNs are looked up by their last part; Bedrock's model ids by the vendor's
    // name (`us.anthropic.claude-sonnet-4-5-20250929-v1:0` is `claude-sonnet-4-5-20250929-v1:0`).
    let name = bedrock_name(model.rsplit('/').next().unwrap_or(model)).to_ascii_lowercase();
    MODELS
        .iter()
        .filter(|i| {
            name.strip_prefix(i.prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '.', '@', ':']))
        })
        .max_by_key(|i| i.prefix.len())
}

/// A Bedrock model id of Claude without its geography prefix of a cross-region inference profile (`us.`, `eu.`,
/// `apac.`, `global.`, ...) and its vendor (`anthropic.`), priced at Anthropic's list price (Bedrock's regional
/// endpoints charge some models 10% more, which this table does not model); any other name as it is.
fn bedrock_name(model: &str) -> &str {
    let unprefixed = match model.split_once('.') {
        Some((geo, rest)) if geo.len() <= 6 && geo.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') => rest,
        _ => model,
    };
    unprefixed.strip_prefix("anthropic.").or_else(|| model.strip_prefix("anthropic.")).unwrap_or(model)
}

/// The cost in US dollars of the given usage at `price`: uncached input, cache reads, cache writes and
/// output each at their rate. Calls that reported no usage add nothing (see `calls_without_usage`).
///
/// ```
/// let price = reins_providers::Price::new(2.0, 8.0).with_cache(0.5, 2.5);
/// let usage = reins::UsageTotals { input_tokens: 1_000_000, cached_input_tokens: 500_000,
///     output_tokens: 100_000, ..Default::default() };
/// assert!((reins_providers::cost(&price, &usage) - 2.05).abs() < 1e-9);
/// ```
pub fn cost(price: &Price, usage: &UsageTotals) -> f64 {
    price.cost_of_totals(usage)
}

/// The cost of a run with `model`, when its price is known.
pub fn cost_for(model: &str, usage: &UsageTotals) -> Option<f64> {
    model_info(model).map(|i| cost(&i.price, usage))
}

/// A token counter for context budgets with a real BPE tokenizer (o200k_base: exact for current OpenAI
/// models, an approximation for others).
pub fn token_counter(_model: &str) -> Result<Arc<dyn TokenCounter>, String> {
    Ok(Arc::new(reins::TiktokenCounter::o200k_base()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_at_a_boundary_wins() {
        assert_eq!(model_info("gpt-4o").unwrap().prefix, "gpt-4o");
        assert_eq!(model_info("gpt-4o-mini").unwrap().prefix, "gpt-4o-mini");
        assert_eq!(model_info("gpt-4.1-nano-2025-04-14").unwrap().prefix, "gpt-4.1-nano");
        assert_eq!(model_info("claude-sonnet-4-5-20250929").unwrap().prefix, "claude-sonnet-4");
        assert_eq!(model_info("claude-opus-4-5").unwrap().prefix, "claude-opus-4-5");
        assert_eq!(model_info("claude-opus-4-1-20250805").unwrap().prefix, "claude-opus-4");
        assert_eq!(model_info("openai/gpt-5-mini").unwrap().prefix, "gpt-5-mini");
        assert!(model_info("o1x").is_none());
        assert!(model_info("gemma-3-270m").is_none());
        assert_eq!(model_info("gemini-3-pro-preview").unwrap().prefix, "gemini-3-pro");
        assert_eq!(model_info("gemini-3.1-pro-preview").unwrap().prefix, "gemini-3.1-pro");
        assert_eq!(model_info("gemini-2.5-flash-lite").unwrap().prefix, "gemini-2.5-flash-lite");
        assert_eq!(model_info("gemini-2.5-flash-preview-09-2025").unwrap().prefix, "gemini-2.5-flash");
        assert!(model_info("").is_none());
    }

    #[test]
    fn every_entry_is_sane() {
        for i in MODELS {
            assert!(i.context_window > i.max_output_tokens, "{}", i.prefix);
            let p = &i.price;
            assert!(p.cache_read() <= p.input_per_mtok && p.input_per_mtok <= p.output_per_mtok, "{}", i.prefix);
            assert!(p.cache_write() >= p.input_per_mtok, "{}", i.prefix);
            assert_eq!(model_info(i.prefix).map(|x| x.prefix), Some(i.prefix));
        }
    }

    #[test]
    fn cost_counts_cached_input_at_its_rate_and_clamps() {
        let p = Price::new(1.0, 10.0).with_cache(0.1, 1.25);
        let u = UsageTotals { input_tokens: 1000, cached_input_tokens: 400, output_tokens: 50, ..Default::default() };
        assert!((cost(&p, &u) - (600.0 + 40.0 + 500.0) / 1e6).abs() < 1e-12);
        let w = UsageTotals { cache_write_tokens: 200, ..u };
        assert!((cost(&p, &w) - (400.0 + 40.0 + 250.0 + 500.0) / 1e6).abs() < 1e-12);
        let sonnet = model_info("claude-sonnet-4-5").unwrap().price;
        assert!((sonnet.cache_write() - 3.75).abs() < 1e-12 && (sonnet.cache_read() - 0.30).abs() < 1e-12);
        assert_eq!(model_info("gpt-4.1").unwrap().price.cache_write(), 2.0);
        let odd = UsageTotals { input_tokens: 10, cached_input_tokens: 20, ..Default::default() };
        assert!((cost(&p, &odd) - 1e-6).abs() < 1e-12);
        assert_eq!(cost_for("unknown-model", &u), None);
    }

    #[test]
    fn tiktoken_counts_tokens() {
        let c = token_counter("gpt-4o").unwrap();
        assert_eq!(c.unit(), "tokens");
        assert!(c.count("hello world, this is a sentence") < 12);
    }
}
