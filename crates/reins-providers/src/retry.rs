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
/// date). One rule for every form: the wait it names, however long (a wait beyond what [`Duration`] holds is
/// [`Duration::MAX`]), so that a policy's `max_retry_after` refuses `999999` and a date years away alike. A date in
/// the past means "now"; a value that is neither a number of seconds nor a date (or a negative one) is no answer.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(ms) = header_str(headers, "retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        return secs_f64(ms / 1000.0);
    }
    let v = header_str(headers, "retry-after")?.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return secs_f64(secs);
    }
    let when = http_date(v)?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A non-negative number of seconds as a duration, saturating at [`Duration::MAX`]; `None` for a negative or
/// not-a-number value.
fn secs_f64(secs: f64) -> Option<Duration> {
    if secs.is_nan() || secs < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

/// An HTTP date (RFC 9110: IMF-fixdate, RFC 850, asctime). A date whose weekday does not match, or whose year is past
/// the 9999 the `httpdate` crate stops at, is still the date it names (`Thu, 01 Jan 3000 00:00:00 GMT` is a time
/// far away, not an unreadable header).
fn http_date(v: &str) -> Option<SystemTime> {
    if let Ok(t) = httpdate::parse_http_date(v) {
        return Some(t);
    }
    // IMF-fixdate without trusting its weekday: `Www, DD Mon YYYY HH:MM:SS GMT`.
    let (_, rest) = v.split_once(',')?;
    let parts: Vec<&str> = rest.split_ascii_whitespace().collect();
    let [day, month, year, time, zone] = parts.as_slice() else { return None };
    if !zone.eq_ignore_ascii_case("GMT") {
        return None;
    }
    let day: u64 = day.parse().ok().filter(|d| (1..=31).contains(d))?;
    let month = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(month))? as u64 + 1;
    let year: u64 = year.parse().ok().filter(|y| (1970..=999_999).contains(y))?;
    let mut hms = time.split(':').map(|n| n.parse::<u64>().ok());
    let (Some(Some(h)), Some(Some(m)), Some(Some(sec)), None) = (hms.next(), hms.next(), hms.next(), hms.next()) else {
        return None;
    };
    if h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let secs = days_from_civil(year, month, day).checked_mul(86_400)? + h * 3600 + m * 60 + sec;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// Days from 1970-01-01 to the given date of the proleptic Gregorian calendar (year ≥ 1970; Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).saturating_sub(719_468)
}

/// A wait as people read it: whole seconds (a wait under a minute keeps its fraction), each unit after its number
/// with a space before a unit that is a word (`11 days 13h 46m 39s`).
pub fn readable(d: Duration) -> String {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 86_400);
    if d > CENTURY {
        return "more than 100 years".to_owned();
    }
    let d = if d >= Duration::from_secs(60) { Duration::from_secs(d.as_secs()) } else { d };
    humantime::format_duration(d)
        .to_string()
        .split(' ')
        .map(|part| {
            let unit = part.trim_start_matches(|c: char| c.is_ascii_digit());
            if unit.len() > 2 && unit.len() < part.len() {
                format!("{} {unit}", &part[..part.len() - unit.len()])
            } else {
                part.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
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

    /// Seconds and dates follow one rule: the wait they name, however far (issue 22, item 18: a date years away
    /// was not read, so the call retried after the usual backoff, while `999999` was refused).
    #[test]
    fn retry_after_far_away_is_a_long_wait_in_every_form() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let far = |v: &str| retry_after(&headers(&[("retry-after", v)]), now);
        assert_eq!(far("999999"), Some(Duration::from_secs(999_999)));
        assert_eq!(far("1e30"), Some(Duration::MAX));
        // A well-formed date, one whose weekday is wrong, one past the year 9999.
        let year_2100 = Duration::from_secs(4_102_444_800) - Duration::from_secs(1_700_000_000);
        assert_eq!(far("Fri, 01 Jan 2100 00:00:00 GMT"), Some(year_2100));
        assert_eq!(far("Mon, 01 Jan 2100 00:00:00 GMT"), Some(year_2100));
        assert_eq!(far("Tue, 01 Jan 12000 00:00:00 GMT"), Some(Duration::from_secs(316_516_204_800 - 1_700_000_000)));
        assert_eq!(far("Sun, 06 Nov 1994 08:49:37 GMT"), Some(Duration::ZERO));
        for bad in [
            "Fri, 01 Jan 2100 00:00:00 CET",
            "Fri, 32 Jan 2100 00:00:00 GMT",
            "Fri, 01 Foo 2100 00:00:00 GMT",
            "Fri, 01 Jan 2100 24:00:00 GMT",
            "Fri, 01 Jan 2100 00:00 GMT",
            "NaN",
            "-5",
            "tomorrow",
        ] {
            assert_eq!(far(bad), None, "{bad}");
        }
        assert_eq!(
            retry_after(&headers(&[("retry-after-ms", "1e40")]), now),
            Some(Duration::MAX),
            "retry-after-ms by the same rule"
        );
    }

    #[test]
    fn waits_read_as_words() {
        assert_eq!(readable(Duration::from_secs(999_999)), "11 days 13h 46m 39s");
        assert_eq!(readable(Duration::from_secs(86_400)), "1 day");
        assert_eq!(readable(Duration::from_secs(3600)), "1h");
        assert_eq!(readable(Duration::from_millis(1500)), "1s 500ms");
        assert_eq!(readable(Duration::from_secs(40 * 86_400 + 1)), "1 month 9 days 13h 26m 25s");
        assert_eq!(readable(Duration::MAX), "more than 100 years");
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

        /// A wait given in seconds and the same wait given as a date (whatever weekday it names) are one wait.
        #[test]
        fn seconds_and_dates_agree(secs in 0u64..40_000_000_000, weekday in 0usize..7) {
            let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
            let by_secs = retry_after(&headers(&[("retry-after", &secs.to_string())]), now);
            let when = 1_700_000_000 + secs;
            let (days, rem) = (when / 86_400, when % 86_400);
            // civil_from_days (Howard Hinnant), for years from 1970.
            let z = days + 719_468;
            let era = z / 146_097;
            let doe = z - era * 146_097;
            let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
            let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
            let mp = (5 * doy + 2) / 153;
            let day = doy - (153 * mp + 2) / 5 + 1;
            let month = if mp < 10 { mp + 3 } else { mp - 9 };
            let year = yoe + era * 400 + u64::from(month <= 2);
            let names = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
            let date = format!(
                "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
                names[weekday], MONTHS[month as usize - 1], rem / 3600, rem / 60 % 60, rem % 60
            );
            let by_date = retry_after(&headers(&[("retry-after", &date)]), now);
            prop_assert_eq!(by_secs, by_date, "{}", date);
        }

        #[test]
        fn retry_after_never_panics(v in "\\PC{0,40}") {
            let now = SystemTime::now();
            let _ = retry_after(&headers(&[("retry-after", v.trim())]), now);
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
