//! Token usage of one model call and the totals of a run.

use serde::{Deserialize, Serialize};

/// Token usage a model reported for one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of input (prompt), cached ones included.
    pub input_tokens: u64,
    /// Tokens of output, reasoning ones included.
    pub output_tokens: u64,
    /// Of the input tokens, how many were served from a cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Of the output tokens, how many were reasoning.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl Usage {
    /// Usage with the given input and output counts.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self { input_tokens, output_tokens, ..Self::default() }
    }

    /// Input plus output, or `None` when the sum overflows.
    pub fn total(&self) -> Option<u64> {
        self.input_tokens.checked_add(self.output_tokens)
    }
}

/// Usage totals of a run. `calls_with_usage` says how many model calls reported usage: a call that
/// reported none is counted in `calls_without_usage`, never as zero tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageTotals {
    /// Sum of input tokens over the calls that reported usage.
    pub input_tokens: u64,
    /// Sum of output tokens over the calls that reported usage.
    pub output_tokens: u64,
    /// `input_tokens + output_tokens`.
    pub total_tokens: u64,
    /// Sum of cached input tokens.
    pub cached_input_tokens: u64,
    /// Sum of reasoning tokens.
    pub reasoning_tokens: u64,
    /// How many model calls reported usage.
    pub calls_with_usage: u64,
    /// How many model calls reported none (their tokens are unknown, not zero).
    pub calls_without_usage: u64,
}

impl UsageTotals {
    /// Adds one call's usage (or its absence). Returns `None`, leaving `self` unchanged, on overflow.
    #[must_use]
    pub fn add(&self, usage: Option<&Usage>) -> Option<UsageTotals> {
        let mut next = *self;
        match usage {
            None => next.calls_without_usage = next.calls_without_usage.checked_add(1)?,
            Some(u) => {
                next.input_tokens = next.input_tokens.checked_add(u.input_tokens)?;
                next.output_tokens = next.output_tokens.checked_add(u.output_tokens)?;
                next.total_tokens = next.input_tokens.checked_add(next.output_tokens)?;
                next.cached_input_tokens = next.cached_input_tokens.checked_add(u.cached_input_tokens)?;
                next.reasoning_tokens = next.reasoning_tokens.checked_add(u.reasoning_tokens)?;
                next.calls_with_usage = next.calls_with_usage.checked_add(1)?;
            }
        }
        Some(next)
    }
}
