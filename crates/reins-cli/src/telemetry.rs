//! OTLP export of the runs' spans (`reins::spans`, the OpenTelemetry GenAI conventions): on when `--otlp URL` is
//! given or the standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT` variable is set.
//!
//! Every command that runs agents calls [`start`] once before its first run, and `main` calls [`finish`] once the
//! command is done (a first Ctrl-C/SIGTERM ends the command the ordinary way, so its spans are flushed too). Spans
//! go through a `BatchSpanProcessor` (its own thread: nothing is sent on the engine's path), only those of Reins'
//! own targets (no HTTP/2 or client-library spans). A collector that cannot be reached costs one warning on stderr,
//! never the run, and the flush at exit waits at most [`FLUSH_BOUND`].

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Array, KeyValue, StringValue, Value};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use reins_cli::otel_env::{Protocol, parse_url, resolve};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;

use crate::exit::{CliError, usage};

/// The longest the flush at exit waits for the collector (the spans not sent by then are lost, with a warning).
pub const FLUSH_BOUND: Duration = Duration::from_secs(5);

/// The `--otlp` flag of the commands that run agents.
#[derive(Args, Debug, Clone, Default)]
pub struct OtlpFlags {
    /// Sends the runs' OpenTelemetry spans to this OTLP endpoint (an http:// or https:// URL; default: the
    /// standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT variables). The protocol is
    /// OTEL_EXPORTER_OTLP_PROTOCOL's: http/protobuf (default; /v1/traces is added to a URL without a path) or grpc.
    #[arg(long, value_name = "URL", value_parser = parse_url)]
    pub otlp: Option<String>,
}

/// A non-empty environment variable.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// The exporter in use, kept for [`finish`].
struct Exporting {
    provider: SdkTracerProvider,
    warning: Arc<Warning>,
}

static EXPORTING: Mutex<Option<Exporting>> = Mutex::new(None);

/// Says once (on stderr) that spans could not be sent.
#[derive(Debug)]
struct Warning {
    target: String,
    said: AtomicBool,
}

impl Warning {
    fn say(&self, why: &str) {
        if !self.said.swap(true, Ordering::Relaxed) {
            errln!(
                "reins: warning: cannot send traces to {}: {why} (the run goes on; its spans are lost)",
                self.target
            );
        }
    }
}

/// The OTLP exporter, saying once when an export fails, and giving finish reasons as the string array the
/// conventions describe (the core records them as JSON text).
#[derive(Debug)]
struct Warned<E> {
    inner: E,
    warning: Arc<Warning>,
}

impl<E: SpanExporter> SpanExporter for Warned<E> {
    async fn export(&self, mut batch: Vec<SpanData>) -> OTelSdkResult {
        for span in &mut batch {
            finish_reasons_as_array(&mut span.attributes);
        }
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            self.warning.say(&e.to_string());
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// `gen_ai.response.finish_reasons` as a string array (it comes as the JSON text of one).
pub fn finish_reasons_as_array(attributes: &mut [KeyValue]) {
    for kv in attributes.iter_mut().filter(|kv| kv.key.as_str() == "gen_ai.response.finish_reasons") {
        if let Value::String(s) = &kv.value
            && let Ok(reasons) = serde_json::from_str::<Vec<String>>(s.as_str())
        {
            kv.value = Value::Array(Array::String(reasons.into_iter().map(StringValue::from).collect()));
        }
    }
}

/// The resource: `service.name` from OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES, else `reins`;
/// `service.version` Reins' version.
fn resource() -> opentelemetry_sdk::Resource {
    let named = env("OTEL_SERVICE_NAME").is_some()
        || env("OTEL_RESOURCE_ATTRIBUTES")
            .is_some_and(|a| a.split(',').any(|kv| kv.trim().starts_with("service.name=")));
    let mut builder = opentelemetry_sdk::Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if !named {
        builder = builder.with_service_name("reins");
    }
    builder.build()
}

/// The OTLP/HTTP exporter's client: the library's own (a blocking reqwest client with the exporter's timeout,
/// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` / `OTEL_EXPORTER_OTLP_TIMEOUT` in milliseconds, else 10 s), except that it
/// follows no redirect: one would carry the spans and the `OTEL_EXPORTER_OTLP_HEADERS` (tokens; reqwest keeps all but
/// `Authorization` across hosts) to wherever the collector's `Location` names. A redirect is said in the warning,
/// naming where it pointed. Built on a thread of its own, as the library does (a blocking client has a runtime).
fn http_client(warning: Arc<Warning>) -> Result<reqwest::blocking::Client, String> {
    let timeout = ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"]
        .into_iter()
        .find_map(|name| env(name).and_then(|v| v.parse::<u64>().ok()))
        .map_or(Duration::from_secs(10), Duration::from_millis);
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        let location: String = attempt.url().as_str().chars().take(200).collect();
        warning.say(&format!(
            "the collector redirects to {location:?} (HTTP {}); Reins follows no redirect, which would send the spans \
             and the OTLP headers there: give the collector's own URL",
            attempt.status().as_u16()
        ));
        attempt.stop()
    });
    std::thread::Builder::new()
        .name("otlp-client".into())
        .spawn(move || reqwest::blocking::Client::builder().timeout(timeout).redirect(policy).build())
        .map_err(|e| format!("cannot start the HTTP client: {e}"))?
        .join()
        .map_err(|_| "the HTTP client could not be built".to_owned())?
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// Starts exporting spans when `--otlp` or the environment asks for it (once per process; later calls do
/// nothing). A bad variable or an exporter that cannot be built costs a warning and no export; an unreachable
/// collector is only found out when spans are sent (a warning then). Call it inside the Tokio runtime (gRPC).
pub fn start(flags: &OtlpFlags) -> Result<bool, CliError> {
    let mut exporting = EXPORTING.lock().map_err(|_| CliError::Internal(anyhow::anyhow!("telemetry lock")))?;
    if exporting.is_some() {
        return Ok(true);
    }
    let target = match resolve(flags.otlp.as_deref(), env) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(false),
        Err(e) if flags.otlp.is_some() => return Err(usage(format!("--otlp: {e}"))),
        Err(e) => {
            errln!("reins: warning: {e}: traces are not exported");
            return Ok(false);
        }
    };
    let warning = Arc::new(Warning {
        target: format!("{} ({})", target.endpoint, target.protocol.name()),
        said: AtomicBool::new(false),
    });
    // The HTTP client's TLS (an https:// collector) uses the process's crypto provider, as the providers' does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let built = match target.protocol {
        Protocol::HttpProtobuf => match http_client(Arc::clone(&warning)) {
            Ok(client) => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(client)
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(&target.endpoint)
                .build(),
            Err(e) => {
                warning.say(&e);
                return Ok(false);
            }
        },
        Protocol::Grpc => {
            opentelemetry_otlp::SpanExporter::builder().with_tonic().with_endpoint(&target.endpoint).build()
        }
    };
    let exporter = match built {
        Ok(e) => e,
        Err(e) => {
            warning.say(&e.to_string());
            return Ok(false);
        }
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Warned { inner: exporter, warning: Arc::clone(&warning) })
        .with_resource(resource())
        .build();
    let tracer = provider.tracer("reins");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_target(false)
        .with_filter(tracing_subscriber::filter::Targets::new().with_target("reins", tracing::Level::INFO));
    let subscriber = tracing_subscriber::registry().with(layer);
    if tracing::subscriber::set_global_default(subscriber).is_err() {
        errln!("reins: warning: a tracing subscriber is already set: traces are not exported");
        let _ = provider.shutdown_with_timeout(Duration::ZERO);
        return Ok(false);
    }
    *exporting = Some(Exporting { provider, warning });
    Ok(true)
}

/// Sends the spans not sent yet and stops the exporter, waiting at most [`FLUSH_BOUND`]; says once if they could
/// not all be sent. Call it once the command is done, still inside the runtime's lifetime (not within it).
pub fn finish() {
    let Some(exporting) = EXPORTING.lock().ok().and_then(|mut e| e.take()) else {
        return;
    };
    match exporting.provider.shutdown_with_timeout(FLUSH_BOUND) {
        Ok(()) | Err(OTelSdkError::AlreadyShutdown) => {}
        // The provider reports a processor's timeout inside another error.
        Err(e) if matches!(e, OTelSdkError::Timeout(_)) || format!("{e:?}").contains("Timeout") => exporting
            .warning
            .say(&format!("the collector did not take the last spans within {} s", FLUSH_BOUND.as_secs())),
        Err(e) => exporting.warning.say(&e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reasons_become_a_string_array_and_other_attributes_stay() {
        let mut attrs = vec![
            KeyValue::new("gen_ai.response.finish_reasons", r#"["tool_call"]"#),
            KeyValue::new("gen_ai.tool.name", r#"["x"]"#),
        ];
        finish_reasons_as_array(&mut attrs);
        assert_eq!(attrs[0].value, Value::Array(Array::String(vec![StringValue::from("tool_call")])));
        assert_eq!(attrs[1].value, Value::from(r#"["x"]"#));
    }
}
