//! The budget of a run: one `Limits` value, checked before the work each limit admits.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The limits of one run. `None` means unlimited.
///
/// ```
/// let limits = reins::Limits { max_steps: Some(10), max_tool_calls: Some(20), ..Default::default() };
/// assert!(limits.validate().is_ok());
/// assert!(reins::Limits { max_steps: Some(0), ..Default::default() }.validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// The most model responses. Default 100; zero is refused.
    pub max_steps: Option<u64>,
    /// The most tool calls, counting every requested call (unknown and invalid ones included).
    pub max_tool_calls: Option<u64>,
    /// The most input tokens summed over reported usage.
    pub max_input_tokens: Option<u64>,
    /// The most output tokens summed over reported usage.
    pub max_output_tokens: Option<u64>,
    /// The most input plus output tokens.
    pub max_total_tokens: Option<u64>,
    /// The wall-clock deadline of the run, from its start. Any size is accepted: one too large to add
    /// to the clock is no deadline.
    pub timeout: Option<Duration>,
    /// The longest one tool call may run; an overrun is an error result and the run goes on.
    pub tool_timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps: Some(100),
            max_tool_calls: None,
            max_input_tokens: None,
            max_output_tokens: None,
            max_total_tokens: None,
            timeout: None,
            tool_timeout: None,
        }
    }
}

/// An invalid configuration: reported when a run is built, never a panic.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

impl Limits {
    /// No limit at all (no step limit either).
    pub fn unlimited() -> Self {
        Limits { max_steps: None, ..Limits::default() }
    }

    /// Refuses values that could never admit a run: a step limit of zero, a zero timeout.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_steps == Some(0) {
            return Err(ConfigError("max_steps must be at least 1".into()));
        }
        if self.timeout == Some(Duration::ZERO) {
            return Err(ConfigError("timeout must be longer than zero".into()));
        }
        if self.tool_timeout == Some(Duration::ZERO) {
            return Err(ConfigError("tool_timeout must be longer than zero".into()));
        }
        Ok(())
    }
}
