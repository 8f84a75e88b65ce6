//! Where the runs' spans go: the `--otlp` flag and the standard OpenTelemetry variables
//! (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`, their `_PROTOCOL`s, `OTEL_SDK_DISABLED`,
//! `OTEL_TRACES_EXPORTER`), read through a function so that they can be checked without the process environment.

/// The OTLP transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`), the specification's default.
    HttpProtobuf,
    /// OTLP/gRPC (`grpc`).
    Grpc,
}

impl Protocol {
    /// The protocol's name in `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::Grpc => "grpc",
        }
    }
}

/// Where and how spans are sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The URL spans are sent to (for HTTP, the full `/v1/traces` URL).
    pub endpoint: String,
    /// The transport.
    pub protocol: Protocol,
}

/// Checks an endpoint URL: http or https, a host, no spaces.
pub fn parse_url(s: &str) -> Result<String, String> {
    let s = s.trim();
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .ok_or_else(|| format!("{s:?} is not an http:// or https:// URL"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err(format!("{s:?} names no host"));
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{s:?} holds a space or a control character"));
    }
    Ok(s.to_owned())
}

/// Whether `url` has a path beyond `/`.
fn has_path(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    let path = path.split(['?', '#']).next().unwrap_or_default();
    !path.is_empty() && path != "/"
}

/// `base` with `/v1/traces` appended (the specification's rule for `OTEL_EXPORTER_OTLP_ENDPOINT` over HTTP).
fn with_traces_path(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

/// Where spans go, from the flag and the environment as given by `var`; `None` when export is off. An invalid
/// variable is an error (the caller warns and exports nothing).
pub fn resolve(flag: Option<&str>, var: impl Fn(&str) -> Option<String>) -> Result<Option<Target>, String> {
    if flag.is_none() {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        if var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none")) {
            return Ok(None);
        }
    }
    let protocol = match var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .map(|v| ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", v))
        .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL").map(|v| ("OTEL_EXPORTER_OTLP_PROTOCOL", v)))
    {
        None => Protocol::HttpProtobuf,
        Some((_, v)) if v == "http/protobuf" => Protocol::HttpProtobuf,
        Some((_, v)) if v == "grpc" => Protocol::Grpc,
        Some((name, v)) => return Err(format!("{name}={v:?} is not supported (grpc or http/protobuf)")),
    };
    let endpoint = if let Some(url) = flag {
        // As OTEL_EXPORTER_OTLP_ENDPOINT, but a URL that already names a path is used as it is.
        match protocol {
            Protocol::HttpProtobuf if !has_path(url) => with_traces_path(url),
            _ => url.to_owned(),
        }
    } else if let Some(url) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        parse_url(&url).map_err(|e| format!("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: {e}"))?
    } else if let Some(url) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        let url = parse_url(&url).map_err(|e| format!("OTEL_EXPORTER_OTLP_ENDPOINT: {e}"))?;
        match protocol {
            Protocol::HttpProtobuf => with_traces_path(&url),
            Protocol::Grpc => url,
        }
    } else {
        return Ok(None);
    };
    Ok(Some(Target { endpoint, protocol }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    fn target(endpoint: &str, protocol: Protocol) -> Option<Target> {
        Some(Target { endpoint: endpoint.to_owned(), protocol })
    }

    #[test]
    fn the_flag_and_the_standard_variables_choose_the_endpoint_and_protocol() {
        let none = vars(&[]);
        assert_eq!(resolve(None, &none), Ok(None));
        assert_eq!(
            resolve(Some("http://127.0.0.1:4318"), &none),
            Ok(target("http://127.0.0.1:4318/v1/traces", Protocol::HttpProtobuf))
        );
        assert_eq!(
            resolve(Some("http://127.0.0.1:6006/v1/traces"), &none),
            Ok(target("http://127.0.0.1:6006/v1/traces", Protocol::HttpProtobuf))
        );
        let grpc = vars(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        assert_eq!(resolve(Some("http://h:4317"), &grpc), Ok(target("http://h:4317", Protocol::Grpc)));
        let base = vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")]);
        assert_eq!(resolve(None, &base), Ok(target("http://c:4318/v1/traces", Protocol::HttpProtobuf)));
        // The signal's own variables win over the generic ones; its endpoint is used as it is.
        let both = vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9999/custom"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ]);
        assert_eq!(resolve(None, &both), Ok(target("http://t:9999/custom", Protocol::HttpProtobuf)));
        // The flag wins over the variables' endpoint.
        assert_eq!(resolve(Some("http://f:1"), &both), Ok(target("http://f:1/v1/traces", Protocol::HttpProtobuf)));
        // Turned off by the standard switches (unless the flag asks).
        let off = vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_SDK_DISABLED", "true")]);
        assert_eq!(resolve(None, &off), Ok(None));
        let none_exp = vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_TRACES_EXPORTER", "none")]);
        assert_eq!(resolve(None, &none_exp), Ok(None));
        assert!(resolve(Some("http://f:1"), &off).is_ok_and(|t| t.is_some()));
    }

    #[test]
    fn unsupported_or_malformed_settings_are_refused_with_their_name() {
        let json = vars(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c")]);
        assert!(
            resolve(None, &json).is_err_and(|e| e.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && e.contains("http/json"))
        );
        let bad = vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4318")]);
        assert!(resolve(None, &bad).is_err_and(|e| e.contains("OTEL_EXPORTER_OTLP_ENDPOINT")));
        assert!(parse_url("ftp://x").is_err());
        assert!(parse_url("http://").is_err());
        assert!(parse_url("http://:4318").is_err());
        assert!(parse_url("http://a b").is_err());
        assert_eq!(parse_url(" https://x:1/p "), Ok("https://x:1/p".to_owned()));
    }
}
