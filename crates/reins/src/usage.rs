//! Token usage of one model call and the totals of a run.

use serde::{Deserialize, Serialize};

/// Token usage a model reported for one call.
///
/// Serialized as `{"input_tokens", "output_tokens"}` plus, when not zero, `cached_input_tokens` and its
/// newer name `cache_read_tokens` (the same count: input read from the provider's prompt cache),
/// `cache_write_tokens` (input written to the cache) and `reasoning_tokens`. Read back, the count is
/// taken from `cached_input_tokens`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    /// Tokens of input (prompt), those read from and written to a cache included.
    pub input_tokens: u64,
    /// Tokens of output, reasoning ones included.
    pub output_tokens: u64,
    /// Of the input tokens, how many were read from a prompt cache (`cache_read_tokens`).
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Of the input tokens, how many were written to a prompt cache (priced apart by some providers).
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Of the output tokens, how many were reasoning.
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl Serialize for Usage {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("input_tokens", &self.input_tokens)?;
        m.serialize_entry("output_tokens", &self.output_tokens)?;
        if self.cached_input_tokens != 0 {
            m.serialize_entry("cached_input_tokens", &self.cached_input_tokens)?;
            m.serialize_entry("cache_read_tokens", &self.cached_input_tokens)?;
        }
        if self.cache_write_tokens != 0 {
            m.serialize_entry("cache_write_tokens", &self.cache_write_tokens)?;
        }
        if self.reasoning_tokens != 0 {
            m.serialize_entry("reasoning_tokens", &self.reasoning_tokens)?;
        }
        m.end()
    }
}

impl Usage {
    /// Usage with the given input and output counts.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self { input_tokens, output_tokens, ..Self::default() }
    }

    /// Of the input tokens, how many were read from a prompt cache (the same as `cached_input_tokens`).
    pub fn cache_read_tokens(&self) -> u64 {
        self.cached_input_tokens
    }

    /// Input plus output, or `None` when the sum overflows.
    pub fn total(&self) -> Option<u64> {
        self.input_tokens.checked_add(self.output_tokens)
    }
}

/// Usage totals of a run. `calls_with_usage` says how many model calls reported usage: a call that
/// reported none is counted in `calls_without_usage`, never as zero tokens. Serialized with every field,
/// plus `cache_read_tokens` (the same count as `cached_input_tokens`, under the name that pairs it with
/// `cache_write_tokens`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct UsageTotals {
    /// Sum of input tokens over the calls that reported usage.
    pub input_tokens: u64,
    /// Sum of output tokens over the calls that reported usage.
    pub output_tokens: u64,
    /// `input_tokens + output_tokens`.
    pub total_tokens: u64,
    /// Sum of input tokens read from a prompt cache (`cache_read_tokens`).
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Sum of input tokens written to a prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Sum of reasoning tokens.
    pub reasoning_tokens: u64,
    /// How many model calls reported usage.
    pub calls_with_usage: u64,
    /// How many model calls reported none (their tokens are unknown, not zero).
    pub calls_without_usage: u64,
}

impl Serialize for UsageTotals {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(10))?;
        m.serialize_entry("input_tokens", &self.input_tokens)?;
        m.serialize_entry("output_tokens", &self.output_tokens)?;
        m.serialize_entry("total_tokens", &self.total_tokens)?;
        m.serialize_entry("cached_input_tokens", &self.cached_input_tokens)?;
        m.serialize_entry("cache_read_tokens", &self.cached_input_tokens)?;
        m.serialize_entry("cache_write_tokens", &self.cache_write_tokens)?;
        m.serialize_entry("reasoning_tokens", &self.reasoning_tokens)?;
        m.serialize_entry("calls_with_usage", &self.calls_with_usage)?;
        m.serialize_entry("calls_without_usage", &self.calls_without_usage)?;
        m.end()
    }
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
                next.cache_write_tokens = next.cache_write_tokens.checked_add(u.cache_write_tokens)?;
                next.reasoning_tokens = next.reasoning_tokens.checked_add(u.reasoning_tokens)?;
                next.calls_with_usage = next.calls_with_usage.checked_add(1)?;
            }
        }
        Some(next)
    }

    /// Adds another run's totals (a sub-agent's). Returns `None`, leaving `self` unchanged, on overflow.
    #[must_use]
    pub fn add_totals(&self, o: &UsageTotals) -> Option<UsageTotals> {
        Some(UsageTotals {
            input_tokens: self.input_tokens.checked_add(o.input_tokens)?,
            output_tokens: self.output_tokens.checked_add(o.output_tokens)?,
            total_tokens: self.total_tokens.checked_add(o.total_tokens)?,
            cached_input_tokens: self.cached_input_tokens.checked_add(o.cached_input_tokens)?,
            cache_write_tokens: self.cache_write_tokens.checked_add(o.cache_write_tokens)?,
            reasoning_tokens: self.reasoning_tokens.checked_add(o.reasoning_tokens)?,
            calls_with_usage: self.calls_with_usage.checked_add(o.calls_with_usage)?,
            calls_without_usage: self.calls_without_usage.checked_add(o.calls_without_usage)?,
        })
    }
}
