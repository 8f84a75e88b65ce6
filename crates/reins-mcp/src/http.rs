//! The streamable HTTP transport: rmcp's client over reqwest, with rustls on the `ring` provider.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ClientServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::SseRetryPolicy;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

/// Reconnects a dropped event stream at most three times (0.5 s, 1 s, 1.5 s), so that a server that died
/// fails its calls in seconds instead of at the call timeout.
#[derive(Debug)]
struct BoundedRetry;

impl SseRetryPolicy for BoundedRetry {
    fn retry(&self, current_times: usize) -> Option<Duration> {
        let n = u32::try_from(current_times).ok().filter(|n| *n < 3)?;
        Some(Duration::from_millis(500) * (n + 1))
    }
}

/// Why a streamable HTTP endpoint could not be reached.
pub(crate) enum ConnectError {
    /// The server answered 401 and Reins has no login for it (or its login could not be refreshed).
    NeedsLogin,
    /// The server answered 403 `insufficient_scope`: its login must be made again for this scope.
    NeedsScope(String),
    /// Anything else, in plain words.
    Failed(String),
}

impl From<String> for ConnectError {
    fn from(message: String) -> Self {
        ConnectError::Failed(message)
    }
}

/// Connects to a streamable HTTP endpoint and starts the connection as `lifecycle` says. An `Authorization: Bearer TOKEN`
/// header is sent as the transport's bearer token; other headers go with every request. With a stored
/// OAuth `login` (see [`crate::auth`]), its access token is the bearer token: refreshed before it expires, and
/// once more when the server answers 401.
pub(crate) async fn connect<H: rmcp::ClientHandler>(
    handler: H,
    url: &str,
    headers: &BTreeMap<String, String>,
    login: Option<rmcp::transport::AuthorizationManager>,
    lifecycle: rmcp::ClientLifecycleMode,
) -> Result<RunningService<RoleClient, H>, ConnectError> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    config.retry_config = Arc::new(BoundedRetry);
    let mut custom = HashMap::with_capacity(headers.len());
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("authorization") {
            let token = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")).ok_or_else(|| {
                "only a bearer token (\"Authorization: Bearer TOKEN\") can be sent as the Authorization header"
                    .to_owned()
            })?;
            config = config.auth_header(token.trim().to_owned());
            continue;
        }
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("invalid header name {name:?}"))?;
        let value = HeaderValue::from_str(value).map_err(|_| format!("invalid value for header {name:?}"))?;
        custom.insert(header, value);
    }
    config = config.custom_headers(custom);
    // reqwest is built without a crypto provider of its own: use ring (never aws-lc). Installing fails only
    // when a provider is already installed, which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // No redirect is followed: it would carry the headers (tokens included: reqwest keeps all but
    // `Authorization` and cookies across hosts) and every call's arguments to wherever `Location` names. The
    // refusal is remembered, since the library reports only "error following redirect".
    let refused: Arc<Mutex<Option<String>>> = Arc::default();
    let seen = Arc::clone(&refused);
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        let message = refused_redirect(attempt.status().as_u16(), attempt.url().as_str());
        if let Ok(mut slot) = seen.lock() {
            slot.get_or_insert_with(|| message.clone());
        }
        attempt.error(message)
    });
    let client = reqwest::Client::builder()
        .redirect(policy)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let served = match login {
        Some(manager) => {
            let client = rmcp::transport::AuthClient::new(client, manager);
            handler.serve_with_lifecycle(StreamableHttpClientTransport::with_client(client, config), lifecycle).await
        }
        None => {
            handler.serve_with_lifecycle(StreamableHttpClientTransport::with_client(client, config), lifecycle).await
        }
    };
    served.map_err(|e| match refused.lock().ok().and_then(|slot| slot.clone()) {
        Some(message) => ConnectError::Failed(message),
        None if e.is_authorization_required() => ConnectError::NeedsLogin,
        None if let Some(scope) = crate::auth::insufficient_scope(&e) => ConnectError::NeedsScope(scope),
        None => ConnectError::Failed(crate::server::plain(&e.to_string())),
    })
}

/// The error of a redirect not followed: where it pointed, escaped and bounded.
fn refused_redirect(status: u16, location: &str) -> String {
    let shown: String = location.chars().take(200).collect();
    let cut = if shown.len() < location.len() { "…" } else { "" };
    format!(
        "the server redirects to {shown:?}{cut} (HTTP {status}); Reins follows no redirect, which would send the \
         headers and the calls there: configure the server's own URL"
    )
}
