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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// The most the run may cost, in US dollars, priced at the model's [`crate::Price`] (checked after
    /// each response, like the token limits; the model must report a price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
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
            max_cost_usd: None,
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
        if let Some(c) = self.max_cost_usd {
            if !(c.is_finite() && c > 0.0) {
                return Err(ConfigError(format!("max_cost_usd must be a positive number of US dollars, not {c}")));
            }
        }
        if self.tool_timeout == Some(Duration::ZERO) {
            return Err(ConfigError("tool_timeout must be longer than zero".into()));
        }
        Ok(())
    }
}

/// The shortest duration [`parse_duration`] accepts.
pub const MIN_DURATION: Duration = Duration::from_millis(1);

/// A duration that [`parse_duration`] refused, with the reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DurationError(pub String);

/// The one rule for every duration Reins reads, from a flag or a config file (timeouts of runs, tool calls,
/// commands and MCP servers).
///
/// A duration is one or more terms `NUMBER UNIT` (a space between them allowed), optionally separated by spaces
/// (`"1h 30m"`, `"1m30s"`), or a bare number of seconds (`"3"`). A number is decimal digits with an optional
/// fraction (`"1.5s"`, `".25h"`). Units, as in `humantime`: `ms` (`msec`, `millis`, `milliseconds`), `s` (`sec`,
/// `secs`, `second`, `seconds`), `m` (`min`, `mins`, `minute`, `minutes`), `h` (`hr`, `hrs`, `hour`, `hours`), `d`
/// (`day`, `days`), `w` (`wk`, `wks`, `week`, `weeks`), `M` (`month`, `months`: 30.44 days), `y` (`yr`, `yrs`,
/// `year`, `years`: 365.25 days). The total must be at least [`MIN_DURATION`] (1 ms): zero and sub-millisecond
/// units (`ns`, `us`) are refused, as are signs. There is no upper bound but [`Duration::MAX`]: a deadline too
/// far to add to the clock is no deadline.
///
/// ```
/// use std::time::Duration;
/// use reins::parse_duration;
/// assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
/// assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
/// assert!(parse_duration("0s").is_err());
/// assert!(parse_duration("1ns").is_err());
/// assert!(parse_duration("soon").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    let shown: String = text.chars().take(40).collect();
    let bad =
        |why: &str| DurationError(format!("invalid duration {shown:?}: {why} (write e.g. 250ms, 30s, 5m or 1h 30m)"));
    let s = text.trim();
    if s.is_empty() {
        return Err(bad("it is empty"));
    }
    let max = Duration::MAX.as_nanos();
    let mut total: u128 = 0;
    let mut rest = s;
    let mut terms = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        if number.is_empty() {
            return Err(bad("a number is missing"));
        }
        let after = after.trim_start();
        let letters = after.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(after.len());
        let (unit, after) = after.split_at(letters);
        let unit_nanos: u128 = match unit {
            "" if terms == 0 && after.trim().is_empty() => NANOS_PER_SEC,
            "" => return Err(bad("a unit is missing")),
            "ms" | "msec" | "millis" | "milliseconds" => 1_000_000,
            "s" | "sec" | "secs" | "second" | "seconds" => NANOS_PER_SEC,
            "m" | "min" | "mins" | "minute" | "minutes" => 60 * NANOS_PER_SEC,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600 * NANOS_PER_SEC,
            "d" | "day" | "days" => 86_400 * NANOS_PER_SEC,
            "w" | "wk" | "wks" | "week" | "weeks" => 604_800 * NANOS_PER_SEC,
            "M" | "month" | "months" => 2_630_016 * NANOS_PER_SEC,
            "y" | "yr" | "yrs" | "year" | "years" => 31_557_600 * NANOS_PER_SEC,
            "ns" | "nsec" | "nanos" | "us" | "usec" => return Err(bad("the smallest unit is ms")),
            _ => return Err(bad(&format!("unknown unit {unit:?}"))),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(bad("a number is malformed"));
        }
        // Twenty digits of any unit fit in u128 nanoseconds; more is over the maximum anyway.
        if whole.trim_start_matches('0').len() > 20 {
            return Err(bad("it is too long to represent"));
        }
        let whole_value: u128 = match whole.trim_start_matches('0') {
            "" => 0,
            w => w.parse().map_err(|_| bad("a number is malformed"))?,
        };
        let mut term = whole_value * unit_nanos;
        let mut scale = unit_nanos;
        for d in fraction.bytes().take(24) {
            scale /= 10;
            term += u128::from(d - b'0') * scale;
        }
        total += term;
        if total > max {
            return Err(bad("it is too long to represent"));
        }
        terms += 1;
        rest = after.trim_start();
    }
    if total < MIN_DURATION.as_nanos() {
        return Err(bad("it must be at least 1ms"));
    }
    let secs = u64::try_from(total / NANOS_PER_SEC).map_err(|_| bad("it is too long to represent"))?;
    Ok(Duration::new(secs, (total % NANOS_PER_SEC) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn durations_follow_one_rule() {
        for (text, want) in [
            ("10s", Duration::from_secs(10)),
            ("250ms", Duration::from_millis(250)),
            ("2m", Duration::from_secs(120)),
            ("1h 30m", Duration::from_secs(5400)),
            ("1h30m", Duration::from_secs(5400)),
            ("  3 ", Duration::from_secs(3)),
            ("1.5", Duration::from_millis(1500)),
            (".5s", Duration::from_millis(500)),
            ("0.001s", Duration::from_millis(1)),
            ("1ms", MIN_DURATION),
            ("30d 1ms", Duration::from_millis(30 * 86_400_000 + 1)),
            ("500000000years", Duration::from_secs(500_000_000 * 31_557_600)),
            ("1M", Duration::from_secs(2_630_016)),
            ("2 days 3 hours", Duration::from_secs(2 * 86_400 + 3 * 3600)),
            ("1w", Duration::from_secs(7 * 86_400)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for bad in [
            "",
            " ",
            "0s",
            "0",
            "0ms",
            "1ns",
            "999us",
            "0.0009s",
            "-1s",
            "+1s",
            "soon",
            "1x",
            "s",
            "1.2.3s",
            ".s",
            "1e9h",
            "NaN",
            "inf",
            "99999999999999999999s",
            "1h 30",
            "1 2s",
            "1S",
            "1 ms 2",
            "1h-30m",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
        let e = parse_duration("1ns").unwrap_err();
        assert!(e.to_string().contains("smallest unit is ms"), "{e}");
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_keeps_its_bounds(s in "\\PC{0,24}") {
            if let Ok(d) = parse_duration(&s) {
                prop_assert!(d >= MIN_DURATION, "{s:?} -> {d:?}");
            }
        }

        #[test]
        fn numbers_and_units_parse(s in "[0-9.]{0,24}(ms|s|m|h|d|w|M|y|x)?( ?[0-9.]{0,4}(ms|s|m|h))?") {
            if let Ok(d) = parse_duration(&s) {
                prop_assert!(d >= MIN_DURATION, "{s:?} -> {d:?}");
            }
        }

        #[test]
        fn milliseconds_round_trip(ms in 1u64..=u64::MAX / 1000) {
            prop_assert_eq!(parse_duration(&format!("{ms}ms")), Ok(Duration::from_millis(ms)));
            // What humantime prints (the old flag format) reads back the same.
            let printed = humantime::format_duration(Duration::from_millis(ms)).to_string();
            prop_assert_eq!(parse_duration(&printed), Ok(Duration::from_millis(ms)), "{}", printed);
        }
    }
}
