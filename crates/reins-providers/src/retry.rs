//! Retries: which failures are worth another attempt, how long to wait (exponential backoff with jitter,
//! or what the server asked for), and how the server's `Retry-After` and rate-limit headers are read.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

/// How failed attempts are retried.
///
/// Connection errors, HTTP 408/409/429/5xx, streams that break, stall or end early are retried; requests
/// the server refused as invalid (400/401/403/404/422), a context overflow and an exhausted quota are not.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0: no retry). Default 3.
    pub max_retries: u32,
    /// The first backoff. Default 500 ms.
    pub initial_backoff: Duration,
    /// The longest backoff. Default 20 s.
    pub max_backoff: Duration,
    /// The longest wait a server may ask for (`Retry-After`) before the call gives up instead. Default 120 s.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        Self { max_retries: 0, ..Self::default() }
    }

    /// The wait before retry number `retry` (1-based): exponential from `initial_backoff`, capped at
    /// `max_backoff`, with "equal jitter" (a uniformly random point in the upper half) so that concurrent
    /// clients do not retry in lockstep.
    pub fn backoff(&self, retry: u32) -> Duration {
        let exp = retry.saturating_sub(1).min(30);
        let ceiling = self.initial_backoff.saturating_mul(1u32 << exp).min(self.max_backoff);
        let half = ceiling / 2;
        half + half.mul_f64(fastrand::f64())
    }
}

/// True for HTTP statuses worth retrying: 408, 409, 429 and every 5xx (including 529 "overloaded").
pub fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..=599).contains(&status)
}

/// What the server asks: `retry-after-ms`, then `Retry-After` (seconds, possibly fractional, or an HTTP
/// date). A date in the past means "now".
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(ms) = header_str(headers, "retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        return secs_f64(ms / 1000.0);
    }
    let v = header_str(headers, "retry-after")?.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return secs_f64(secs);
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

fn secs_f64(secs: f64) -> Option<Duration> {
    (0.0..1e9).contains(&secs).then(|| Duration::from_secs_f64(secs))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// How long until the rate-limit window the headers describe reopens, when they say that no request
/// or no token is left: OpenAI's `x-ratelimit-remaining-{requests,tokens}` with
/// `x-ratelimit-reset-{requests,tokens}` (durations like `6m0s`), Anthropic's
/// `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{remaining,reset}` (RFC 3339 times).
pub fn exhausted_window(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let mut wait: Option<Duration> = None;
    let mut note = |d: Duration| wait = Some(wait.map_or(d, |w| w.max(d)));
    for kind in ["requests", "tokens"] {
        let remaining = header_str(headers, &format!("x-ratelimit-remaining-{kind}"));
        if remaining.and_then(|r| r.trim().parse::<u64>().ok()) == Some(0) {
            if let Some(d) = header_str(headers, &format!("x-ratelimit-reset-{kind}")).and_then(parse_go_duration) {
                note(d);
            }
        }
    }
    for kind in ["requests", "tokens", "input-tokens", "output-tokens"] {
        let remaining = header_str(headers, &format!("anthropic-ratelimit-{kind}-remaining"));
        if remaining.and_then(|r| r.trim().parse::<u64>().ok()) == Some(0) {
            let reset = header_str(headers, &format!("anthropic-ratelimit-{kind}-reset"))
                .and_then(|r| humantime::parse_rfc3339_weak(r.trim()).ok());
            if let Some(when) = reset {
                note(when.duration_since(now).unwrap_or(Duration::ZERO));
            }
        }
    }
    wait
}

/// Parses a Go-style duration as OpenAI sends it: `1s`, `6m0s`, `1h2m3.5s`, `20ms`, `150us`.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if num_end == 0 {
            return None;
        }
        let value: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += value * scale;
    }
    secs_f64(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn retry_after_seconds_fraction_ms_and_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after(&headers(&[("retry-after", "3")]), now), Some(Duration::from_secs(3)));
        assert_eq!(retry_after(&headers(&[("retry-after", "0.25")]), now), Some(Duration::from_millis(250)));
        assert_eq!(
            retry_after(&headers(&[("retry-after-ms", "1500"), ("retry-after", "9")]), now),
            Some(Duration::from_millis(1500))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(retry_after(&headers(&[("retry-after", &date)]), now), Some(Duration::from_secs(7)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(retry_after(&headers(&[("retry-after", &past)]), now), Some(Duration::ZERO));
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-1")]), now), None);
        assert_eq!(retry_after(&headers(&[]), now), None);
    }

    #[test]
    fn rate_limit_headers() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let h = headers(&[("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", "6m0s")]);
        assert_eq!(exhausted_window(&h, now), Some(Duration::from_secs(360)));
        let h = headers(&[("x-ratelimit-remaining-requests", "5"), ("x-ratelimit-reset-requests", "6m0s")]);
        assert_eq!(exhausted_window(&h, now), None);
        let reset = humantime::format_rfc3339(now + Duration::from_secs(12)).to_string();
        let h = headers(&[("anthropic-ratelimit-tokens-remaining", "0"), ("anthropic-ratelimit-tokens-reset", &reset)]);
        assert_eq!(exhausted_window(&h, now), Some(Duration::from_secs(12)));
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_go_duration("1h2m3.5s"), Some(Duration::from_millis(3_723_500)));
        assert_eq!(parse_go_duration("20ms"), Some(Duration::from_millis(20)));
        for bad in ["", "s", "5", "5x", "1..2s", "m5"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn statuses() {
        for s in [408, 409, 429, 500, 502, 503, 504, 529] {
            assert!(retryable_status(s), "{s}");
        }
        for s in [200, 400, 401, 403, 404, 413, 422] {
            assert!(!retryable_status(s), "{s}");
        }
    }

    proptest! {
        #[test]
        fn backoff_grows_within_bounds(retry in 1u32..100) {
            let p = RetryPolicy::default();
            let d = p.backoff(retry);
            let ceiling = p.initial_backoff.saturating_mul(1u32 << (retry - 1).min(30)).min(p.max_backoff);
            prop_assert!(d >= ceiling / 2 && d <= ceiling);
        }

        #[test]
        fn go_duration_never_panics(s in "\\PC{0,20}") {
            let _ = parse_go_duration(&s);
        }

        #[test]
        fn go_duration_round_trip(h in 0u64..100, m in 0u64..60, s in 0u64..60, ms in 0u64..1000) {
            let text = format!("{h}h{m}m{s}s{ms}ms");
            let want = Duration::from_millis(((h * 60 + m) * 60 + s) * 1000 + ms);
            let got = parse_go_duration(&text).unwrap();
            prop_assert!(got.abs_diff(want) < Duration::from_micros(1));
        }
    }
}
