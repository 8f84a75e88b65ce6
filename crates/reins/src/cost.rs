//! Prices and the cost of usage: a model may report its [`Price`] ([`crate::Model::price`]); the engine
//! then prices every response and the run's total, and `Limits::max_cost_usd` ends a run that costs more.

use serde::{Deserialize, Serialize};

use crate::usage::{Usage, UsageTotals};

/// Prices in US dollars per million tokens. Input read from or written to a prompt cache is priced at
/// its own rate when one is given, else as other input.
///
/// ```
/// let price = reins::Price::new(2.0, 8.0).with_cache(0.5, 2.5);
/// let usage = reins::Usage { input_tokens: 1_000_000, cached_input_tokens: 500_000,
///     cache_write_tokens: 100_000, output_tokens: 100_000, ..Default::default() };
/// // 400k uncached at 2, 500k read at 0.5, 100k written at 2.5, 100k out at 8.
/// assert!((price.cost(&usage) - (0.8 + 0.25 + 0.25 + 0.8)).abs() < 1e-9);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Input not served from a cache.
    pub input_per_mtok: f64,
    /// Output (reasoning included).
    pub output_per_mtok: f64,
    /// Input read from a prompt cache (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_mtok: Option<f64>,
    /// Input written to a prompt cache (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<f64>,
}

impl Price {
    /// Input and output prices; cache reads and writes priced as input.
    pub fn new(input_per_mtok: f64, output_per_mtok: f64) -> Self {
        Price { input_per_mtok, output_per_mtok, cache_read_per_mtok: None, cache_write_per_mtok: None }
    }

    /// The same prices with cache reads and writes at their own rates.
    pub fn with_cache(mut self, read_per_mtok: f64, write_per_mtok: f64) -> Self {
        self.cache_read_per_mtok = Some(read_per_mtok);
        self.cache_write_per_mtok = Some(write_per_mtok);
        self
    }

    /// The rate of cache reads.
    pub fn cache_read(&self) -> f64 {
        self.cache_read_per_mtok.unwrap_or(self.input_per_mtok)
    }

    /// The rate of cache writes.
    pub fn cache_write(&self) -> f64 {
        self.cache_write_per_mtok.unwrap_or(self.input_per_mtok)
    }

    /// Refuses a price that is negative, NaN or infinite, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("input_per_mtok", Some(self.input_per_mtok)),
            ("output_per_mtok", Some(self.output_per_mtok)),
            ("cache_read_per_mtok", self.cache_read_per_mtok),
            ("cache_write_per_mtok", self.cache_write_per_mtok),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(format!("{name}: expected a price of at least 0, not {v}"));
                }
            }
        }
        Ok(())
    }

    fn priced(&self, input: u64, read: u64, write: u64, output: u64) -> f64 {
        let read = read.min(input);
        let write = write.min(input - read);
        let plain = input - read - write;
        (plain as f64 * self.input_per_mtok
            + read as f64 * self.cache_read()
            + write as f64 * self.cache_write()
            + output as f64 * self.output_per_mtok)
            / 1_000_000.0
    }

    /// The cost of one call's usage in US dollars: uncached input, cache reads, cache writes and output,
    /// each at its rate.
    pub fn cost(&self, u: &Usage) -> f64 {
        self.priced(u.input_tokens, u.cached_input_tokens, u.cache_write_tokens, u.output_tokens)
    }

    /// The cost of a run's totals (calls that reported no usage add nothing: see `calls_without_usage`).
    pub fn cost_of_totals(&self, u: &UsageTotals) -> f64 {
        self.priced(u.input_tokens, u.cached_input_tokens, u.cache_write_tokens, u.output_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_input_at_its_rate_and_clamped() {
        let p = Price::new(1.0, 10.0).with_cache(0.1, 1.25);
        let u = Usage {
            input_tokens: 1000,
            cached_input_tokens: 400,
            cache_write_tokens: 100,
            output_tokens: 50,
            ..Default::default()
        };
        assert!((p.cost(&u) - (500.0 + 40.0 + 125.0 + 500.0) / 1e6).abs() < 1e-12);
        let odd = Usage { input_tokens: 10, cached_input_tokens: 20, cache_write_tokens: 5, ..Default::default() };
        assert!((p.cost(&odd) - 1e-6).abs() < 1e-12);
        assert!((Price::new(1.0, 1.0).cost(&u) - 1050.0 / 1e6).abs() < 1e-12);
        assert!(Price::new(-1.0, 1.0).validate().is_err());
        assert!(Price::new(1.0, f64::NAN).validate().unwrap_err().starts_with("output_per_mtok"));
    }
}
