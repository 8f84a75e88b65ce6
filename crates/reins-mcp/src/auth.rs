//! OAuth 2.1 for streamable HTTP servers, through rmcp's OAuth client: [`login`] runs the authorization-code
//! flow with PKCE S256 through a loopback redirect (`reins mcp login NAME`), [`logout`] forgets the tokens, and
//! a run reaches a server with a stored login through [`stored_login`] — its token sent as a bearer token,
//! refreshed before it expires and once more when the server answers 401.
//!
//! The authorization server is discovered from the server's protected-resource metadata (RFC 9728, named by its
//! `WWW-Authenticate` challenge or at the well-known path; RFC 8414 metadata otherwise); the `resource` parameter
//! (RFC 8707) names the server on every authorization and token request; the `iss` of the authorization response
//! (RFC 9207) is checked when the server sends it. The client is registered by a client ID metadata document
//! when one is given and the server supports them, else dynamically (RFC 7591); a pre-registered client ID may
//! be given instead. Discovery follows no redirect to another origin; token requests follow none at all.
//!
//! Tokens are kept per server in a private file (0600, in a 0700 directory) beneath the user's data directory —
//! `$XDG_DATA_HOME/reins/mcp-auth/NAME.json`, else `~/.local/share/reins/mcp-auth/NAME.json` — never in the
//! session store. A refresh holds a lock on the file's `.lock` companion, so that two runs never spend the same
//! (rotated) refresh token. Every token loaded or saved joins the server's [`reins::Secrets`], so whatever the
//! server says is masked before it is recorded.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadataSource, AuthorizationRequest, AuthorizationSession,
    CredentialRefreshGuard, CredentialStore, OAuthClientConfig, StoredCredentials,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::{ServerConfig, Transport};

/// How long `reins mcp login` waits for the browser to come back to the loopback redirect, unless told.
pub const DEFAULT_LOGIN_TIMEOUT: Duration = Duration::from_secs(300);

/// The path of the loopback redirect.
const CALLBACK_PATH: &str = "/callback";

/// Why a login, a logout or a stored login failed.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The server is not reached over HTTP.
    #[error("MCP server {0:?} is not an HTTP server: only a streamable HTTP server logs in")]
    NotHttp(String),
    /// Neither `XDG_DATA_HOME` nor `HOME` is set.
    #[error("no place for MCP login tokens: set HOME or XDG_DATA_HOME")]
    NoHome,
    /// The token file could not be read or written.
    #[error("MCP login token file {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The loopback redirect could not be set up or read.
    #[error("the loopback redirect of the login: {0}")]
    Loopback(String),
    /// The browser did not come back in time.
    #[error("no answer on the loopback redirect within {}: the login was not completed", humantime::format_duration(*.0))]
    Timeout(Duration),
    /// The authorization server answered the redirect with an error.
    #[error("MCP server {server:?}: the authorization server refused the login: {error}")]
    Denied {
        /// The server's name.
        server: String,
        /// The `error` and `error_description` of the redirect.
        error: String,
    },
    /// Discovery, registration or the token exchange failed.
    #[error("MCP server {server:?}: {reason}")]
    OAuth {
        /// The server's name.
        server: String,
        /// What went wrong.
        reason: String,
    },
}

/// How `reins mcp login` identifies Reins to the authorization server.
#[derive(Clone, Debug, Default)]
pub struct LoginOptions {
    /// A client ID registered with the authorization server beforehand: no registration then.
    pub client_id: Option<String>,
    /// The secret of that client, when it is a confidential one (kept in the token file for refreshes).
    pub client_secret: Option<String>,
    /// The https URL of a client ID metadata document describing Reins (with the loopback redirect), used when
    /// the authorization server supports them; dynamic registration otherwise.
    pub client_metadata_url: Option<String>,
    /// The scopes to ask for; empty: those the server's metadata names.
    pub scopes: Vec<String>,
    /// How long to wait for the browser.
    pub timeout: Option<Duration>,
}

/// The directory of the token files: `$XDG_DATA_HOME/reins/mcp-auth`, else `~/.local/share/reins/mcp-auth`.
pub fn token_dir() -> Result<PathBuf, LoginError> {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("reins").join("mcp-auth"));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).ok_or(LoginError::NoHome)?;
    Ok(PathBuf::from(home).join(".local").join("share").join("reins").join("mcp-auth"))
}

/// The token file of the server named `server`.
pub fn token_path(server: &str) -> Result<PathBuf, LoginError> {
    crate::config::check_server_name(server)
        .map_err(|e| LoginError::OAuth { server: server.to_owned(), reason: e.to_string() })?;
    Ok(token_dir()?.join(format!("{server}.json")))
}

/// What a token file holds: the server's URL (a login is for that URL only), the client's secret when the
/// registration gave one, and rmcp's credentials (client ID, tokens, granted scopes, when received, issuer).
#[derive(Serialize, Deserialize)]
struct Saved {
    url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_secret: Option<String>,
    credentials: StoredCredentials,
}

/// The secrets of one server — those of its configuration and every token of its login seen so far — shared
/// by its connection (which masks what the server says) and its token store (which adds each new token).
#[derive(Debug, Default)]
pub struct TokenSecrets(RwLock<reins::Secrets>);

impl TokenSecrets {
    /// Starts with `base`.
    pub fn new(base: reins::Secrets) -> TokenSecrets {
        TokenSecrets(RwLock::new(base))
    }

    /// The secrets now.
    pub fn get(&self) -> reins::Secrets {
        self.0.read().map(|s| s.clone()).unwrap_or_default()
    }

    /// [`reins::Secrets::mask`] with the secrets now.
    pub fn mask<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        match self.get().mask(text) {
            std::borrow::Cow::Borrowed(_) => std::borrow::Cow::Borrowed(text),
            std::borrow::Cow::Owned(masked) => std::borrow::Cow::Owned(masked),
        }
    }

    /// [`reins::Secrets::mask_string`] with the secrets now.
    pub fn mask_string(&self, text: String) -> String {
        self.get().mask_string(text)
    }

    /// [`reins::Secrets::mask_output`] with the secrets now.
    pub fn mask_output(&self, output: reins::ToolOutput) -> reins::ToolOutput {
        self.get().mask_output(output)
    }

    /// [`reins::Secrets::mask_tool_error`] with the secrets now.
    pub fn mask_tool_error(&self, e: reins::ToolError) -> reins::ToolError {
        self.get().mask_tool_error(e)
    }

    /// [`reins::Secrets::mask_json`] with the secrets now.
    pub fn mask_json(&self, v: serde_json::Value) -> serde_json::Value {
        self.get().mask_json(v)
    }

    /// True when there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.get().is_empty()
    }

    /// Adds the tokens of `credentials` (the old ones stay: a server may still echo one).
    fn add(&self, credentials: &StoredCredentials) {
        let tokens = tokens_of(credentials);
        if tokens.is_empty() {
            return;
        }
        if let Ok(mut current) = self.0.write() {
            let added = reins::Secrets::new(&tokens);
            *current = current.with(&added);
        }
    }
}

/// The access and refresh tokens of `credentials`.
fn tokens_of(credentials: &StoredCredentials) -> Vec<String> {
    let Some(response) = credentials.token_response.as_ref().and_then(|r| serde_json::to_value(r).ok()) else {
        return Vec::new();
    };
    ["access_token", "refresh_token"]
        .iter()
        .filter_map(|k| response.get(*k).and_then(|v| v.as_str()).map(str::to_owned))
        .collect()
}

/// rmcp's credential store over a server's token file.
#[derive(Clone)]
struct FileStore {
    path: PathBuf,
    url: String,
    client_secret: Option<String>,
    secrets: Arc<TokenSecrets>,
}

impl FileStore {
    fn read(&self) -> Result<Option<Saved>, LoginError> {
        read_saved(&self.path)
    }
}

fn store_err(e: LoginError) -> AuthError {
    AuthError::CredentialStoreError(e.to_string())
}

#[async_trait::async_trait]
impl CredentialStore for FileStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let Some(saved) = self.read().map_err(store_err)? else { return Ok(None) };
        if saved.url != self.url {
            return Ok(None);
        }
        self.secrets.add(&saved.credentials);
        Ok(Some(saved.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.secrets.add(&credentials);
        let saved = Saved { url: self.url.clone(), client_secret: self.client_secret.clone(), credentials };
        write_private(&self.path, &saved).map_err(store_err)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(store_err(file_err(&self.path, &e))),
        }
    }

    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let lock = self.path.with_extension("lock");
        let file = tokio::task::spawn_blocking(move || -> Result<std::fs::File, LoginError> {
            let file = open_private(&lock, false)?;
            rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
                .map_err(|e| file_err(&lock, &std::io::Error::from(e)))?;
            Ok(file)
        })
        .await
        .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?
        .map_err(store_err)?;
        // Closing the file (dropping the guard) releases the lock.
        Ok(Some(CredentialRefreshGuard::new(file)))
    }
}

fn file_err(path: &Path, e: &std::io::Error) -> LoginError {
    LoginError::File { path: path.to_owned(), reason: e.to_string() }
}

fn read_saved(path: &Path) -> Result<Option<Saved>, LoginError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(file_err(path, &e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| LoginError::File { path: path.to_owned(), reason: format!("unreadable ({e}): log in again") })
}

/// Opens (creating, 0600 whatever the umask) `path` for writing, its directory created 0700.
fn open_private(path: &Path, truncate: bool) -> Result<std::fs::File, LoginError> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| file_err(dir, &e))?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(truncate)
        .mode(0o600)
        .open(path)
        .map_err(|e| file_err(path, &e))
}

/// Writes `saved` to `path` whole or not at all: a private temporary file renamed over it.
fn write_private(path: &Path, saved: &Saved) -> Result<(), LoginError> {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;
    let text = serde_json::to_vec_pretty(saved)
        .map_err(|e| LoginError::File { path: path.to_owned(), reason: e.to_string() })?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = open_private(&tmp, true)?;
    // A file left by an older, laxer writer keeps its mode on open: take the group and other bits away.
    file.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(|e| file_err(&tmp, &e))?;
    file.write_all(&text).and_then(|()| file.sync_all()).map_err(|e| file_err(&tmp, &e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        file_err(path, &e)
    })
}

/// reqwest is built without a crypto provider of its own: rmcp's OAuth clients use ring (never aws-lc).
/// Installing fails only when a provider is already installed, which is as good.
fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The URL of an HTTP server, or [`LoginError::NotHttp`].
fn http_url(config: &ServerConfig) -> Result<&str, LoginError> {
    match &config.transport {
        Transport::Http { url, .. } => Ok(url),
        Transport::Stdio { .. } => Err(LoginError::NotHttp(config.name.clone())),
    }
}

fn oauth_err(server: &str, e: &AuthError) -> LoginError {
    LoginError::OAuth { server: server.to_owned(), reason: e.to_string() }
}

/// What [`logout`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoggedOut {
    /// There was no login.
    NoLogin,
    /// The tokens were revoked at the authorization server (RFC 7009) and the token file removed.
    Revoked,
    /// The token file was removed, but the tokens could not be revoked: why (no revocation endpoint, the
    /// server unreachable, the revocation refused).
    NotRevoked(String),
}

/// Forgets the login of the server named `server`: its tokens are revoked at the authorization server when
/// its metadata names a revocation endpoint (RFC 7009: the refresh token, then the access token), then its
/// token file is removed, whether or not they could be.
pub async fn logout(server: &str) -> Result<LoggedOut, LoginError> {
    let path = token_path(server)?;
    let Some(saved) = read_saved(&path)? else {
        let _ = std::fs::remove_file(path.with_extension("lock"));
        return Ok(LoggedOut::NoLogin);
    };
    install_crypto();
    let revoked = revoke(&saved).await;
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(file_err(&path, &e)),
    }
    let _ = std::fs::remove_file(path.with_extension("lock"));
    Ok(match revoked {
        Ok(()) => LoggedOut::Revoked,
        Err(why) => LoggedOut::NotRevoked(why),
    })
}

/// One value of an `application/x-www-form-urlencoded` body.
fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            b' ' => "+".to_owned(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `application/x-www-form-urlencoded` of `pairs`.
fn form(pairs: &[(&str, &str)]) -> String {
    pairs.iter().map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v))).collect::<Vec<_>>().join("&")
}

/// Revokes the tokens of `saved` at the revocation endpoint of its server's authorization server (discovered
/// as the login discovers it), authenticated as the login's client: its secret by HTTP Basic, else its
/// `client_id` in the form. No redirect is followed.
async fn revoke(saved: &Saved) -> Result<(), String> {
    let challenge = probe_challenge(&saved.url).await;
    let manager = AuthorizationManager::new(saved.url.as_str()).await.map_err(|e| e.to_string())?;
    let resolution = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| format!("its authorization server could not be found: {e}"))?;
    let endpoint = match resolution.metadata.additional_fields.get("revocation_endpoint") {
        Some(serde_json::Value::String(e))
            if resolution.source != AuthorizationMetadataSource::LegacyEndpointFallback =>
        {
            e.clone()
        }
        _ => return Err("its authorization server offers no revocation endpoint".to_owned()),
    };
    let tokens = serde_json::to_value(&saved.credentials.token_response).unwrap_or_default();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let client_id = saved.credentials.client_id.as_str();
    for hint in ["refresh_token", "access_token"] {
        let Some(token) = tokens.get(hint).and_then(serde_json::Value::as_str) else { continue };
        let mut pairs = vec![("token", token), ("token_type_hint", hint)];
        let mut request = client.post(&endpoint).header("Content-Type", "application/x-www-form-urlencoded");
        match &saved.client_secret {
            // Form-encoded first (RFC 6749, 2.3.1).
            Some(secret) => request = request.basic_auth(form_encode(client_id), Some(form_encode(secret))),
            None => pairs.push(("client_id", client_id)),
        }
        let response = request.body(form(&pairs)).send().await.map_err(|e| {
            format!("the revocation endpoint could not be reached: {}", crate::server::plain(&e.to_string()))
        })?;
        let status = response.status();
        if status.is_success() {
            continue;
        }
        let body = response.text().await.unwrap_or_default();
        let error = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(serde_json::Value::as_str).map(str::to_owned));
        // A server may revoke only refresh tokens (RFC 7009, 2.2.1): an access token then lapses by itself.
        if hint == "access_token" && error.as_deref() == Some("unsupported_token_type") {
            continue;
        }
        let error = error.map(|e| format!(" ({})", e.chars().take(100).collect::<String>())).unwrap_or_default();
        return Err(format!("the revocation endpoint answered {status}{error} for the {}", hint.replace('_', " ")));
    }
    Ok(())
}

/// True when a login is stored for `config` (its name and its URL).
pub fn has_login(config: &ServerConfig) -> bool {
    let (Ok(url), Ok(path)) = (http_url(config), token_path(&config.name)) else { return false };
    matches!(read_saved(&path), Ok(Some(saved)) if saved.url == url)
}

/// The stored login of an HTTP server, ready for rmcp's [`rmcp::transport::AuthClient`]: `None` when there is
/// none for this server and URL (or it was discarded: the authorization server changed). The server's
/// metadata is discovered again, so that refreshes name the right resource and token endpoint.
pub(crate) async fn stored_login(
    config: &ServerConfig,
    secrets: Arc<TokenSecrets>,
) -> Result<Option<AuthorizationManager>, LoginError> {
    let url = http_url(config)?;
    let path = token_path(&config.name)?;
    let Some(saved) = read_saved(&path)? else { return Ok(None) };
    install_crypto();
    if saved.url != url {
        return Ok(None);
    }
    let store = FileStore { path, url: url.to_owned(), client_secret: saved.client_secret.clone(), secrets };
    let mut manager = AuthorizationManager::new(url).await.map_err(|e| oauth_err(&config.name, &e))?;
    manager.set_credential_store(store);
    if !manager.initialize_from_store().await.map_err(|e| oauth_err(&config.name, &e))? {
        return Ok(None);
    }
    if let Some(secret) = saved.client_secret {
        let client = OAuthClientConfig::new(saved.credentials.client_id, url).with_client_secret(secret);
        manager.configure_client(client).map_err(|e| oauth_err(&config.name, &e))?;
    }
    Ok(Some(manager))
}

/// True when `e` (or an error it wraps) says the server wants a login Reins does not have (a 401 that one
/// refresh did not cure, or no usable token).
pub(crate) fn needs_login(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(e);
    while let Some(e) = current {
        if e.is::<rmcp::transport::streamable_http_client::AuthRequiredError>()
            || matches!(e.downcast_ref::<AuthError>(), Some(AuthError::AuthorizationRequired))
        {
            return true;
        }
        current = e.source();
    }
    false
}

/// The scope a server asked for when it refused a request for want of access (a 403 `insufficient_scope`
/// challenge naming one), if that is what `e` (or an error it wraps) says.
pub(crate) fn insufficient_scope(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current = Some(e);
    while let Some(e) = current {
        if let Some(refused) = e.downcast_ref::<rmcp::transport::streamable_http_client::InsufficientScopeError>() {
            return Some(refused.get_required_scope().unwrap_or_default().to_owned());
        }
        if let Some(AuthError::InsufficientScope { required_scope, .. }) = e.downcast_ref::<AuthError>() {
            return Some(required_scope.clone());
        }
        current = e.source();
    }
    None
}

/// What to do about a server whose login grants too little: log in again for `scope` (the login keeps the
/// scopes granted so far).
pub(crate) fn scope_hint(server: &str, scope: &str) -> String {
    format!(
        "its login does not grant enough access (it asks for scope {scope:?}): run `reins mcp login {server} --scope {scope}`"
    )
}

/// The scopes a login asks for: none named, none (the server's metadata chooses); else the scopes named after
/// those the server's current login was granted (a login for more access keeps what it had: SEP-2350).
fn scopes_to_ask(path: &Path, url: &str, named: &[String]) -> Vec<String> {
    if named.is_empty() {
        return Vec::new();
    }
    let granted = match read_saved(path) {
        Ok(Some(saved)) if saved.url == url => saved.credentials.granted_scopes,
        _ => Vec::new(),
    };
    let mut scopes: Vec<String> = Vec::with_capacity(granted.len() + named.len());
    for scope in granted.into_iter().chain(named.iter().flat_map(|s| s.split_whitespace().map(str::to_owned))) {
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    scopes
}

/// The one line that says what to do about a server that needs a login.
pub fn login_hint(server: &str) -> String {
    format!("MCP server {server:?} needs a login: run `reins mcp login {server}`")
}

/// Logs in to the HTTP server of `config`: discovers its authorization server, registers Reins (unless a
/// client ID is given), shows the authorization URL through `show_url` (which opens a browser or prints it),
/// waits for the browser on the loopback redirect `http://127.0.0.1:PORT/callback`, exchanges the code (PKCE
/// S256, `resource`, `iss` checked) and stores the tokens. Returns the token file.
pub async fn login(
    config: &ServerConfig,
    options: &LoginOptions,
    show_url: impl FnOnce(&str),
) -> Result<PathBuf, LoginError> {
    let url = http_url(config)?;
    let name = config.name.as_str();
    let path = token_path(name)?;
    install_crypto();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| LoginError::Loopback(format!("cannot listen on 127.0.0.1: {e}")))?;
    let port = listener.local_addr().map_err(|e| LoginError::Loopback(e.to_string()))?.port();
    let redirect_uri = format!("http://127.0.0.1:{port}{CALLBACK_PATH}");

    let challenge = probe_challenge(url).await;
    let mut manager = AuthorizationManager::new(url).await.map_err(|e| oauth_err(name, &e))?;
    let resolution =
        manager.resolve_metadata_from_challenge(challenge.as_deref()).await.map_err(|e| oauth_err(name, &e))?;
    if resolution.source == AuthorizationMetadataSource::LegacyEndpointFallback {
        return Err(LoginError::OAuth {
            server: name.to_owned(),
            reason: "it publishes no OAuth metadata (RFC 9728 protected-resource metadata or RFC 8414 \
                     authorization-server metadata): it may need no login"
                .to_owned(),
        });
    }
    let cimd = resolution
        .metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    manager.set_metadata(resolution.metadata);

    let mut request = AuthorizationRequest::new(&redirect_uri).with_scopes(scopes_to_ask(&path, url, &options.scopes));
    let mut client_secret = None;
    if let Some(id) = &options.client_id {
        request = request.with_preregistered_client(id);
        if let Some(secret) = &options.client_secret {
            request = request.with_client_secret(secret);
            client_secret = Some(secret.clone());
        }
    } else if let Some(document) = options.client_metadata_url.as_ref().filter(|_| cimd) {
        request = request.with_client_metadata_url(document);
    } else {
        // Dynamic registration, done here rather than by the session so that a secret the server gives (to a
        // client that asked for none) is kept for the refreshes.
        let registered = manager.register_client("Reins", &redirect_uri, &[]).await.map_err(|e| oauth_err(name, &e))?;
        request = request.with_preregistered_client(registered.client_id);
        if let Some(secret) = registered.client_secret {
            request = request.with_client_secret(&secret);
            client_secret = Some(secret);
        }
    }
    let secrets = Arc::new(TokenSecrets::default());
    manager.set_credential_store(FileStore { path: path.clone(), url: url.to_owned(), client_secret, secrets });
    let session = AuthorizationSession::new(manager, request).await.map_err(|(_, e)| oauth_err(name, &e))?;
    show_url(session.get_authorization_url());

    let timeout = options.timeout.unwrap_or(DEFAULT_LOGIN_TIMEOUT);
    let callback = tokio::time::timeout(timeout, wait_for_callback(&listener, port))
        .await
        .map_err(|_| LoginError::Timeout(timeout))??;
    if let Some(error) = callback_error(&callback) {
        return Err(LoginError::Denied { server: name.to_owned(), error });
    }
    session.handle_callback_url(&callback).await.map_err(|e| oauth_err(name, &e))?;
    Ok(path)
}

/// The `WWW-Authenticate` challenge of the server to a request without a token, if it sends one: it names the
/// server's protected-resource metadata and the scope it wants. Asked as Reins connects: a `server/discover`
/// (2026-07-28) first, then an `initialize`. No redirect is followed.
async fn probe_challenge(url: &str) -> Option<String> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .ok()?;
    let client_info = serde_json::json!({"name": "reins", "version": env!("CARGO_PKG_VERSION")});
    let discover = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "server/discover",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientInfo": client_info,
                             "io.modelcontextprotocol/clientCapabilities": {}}}
    });
    let initialize = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client_info}
    });
    for (body, version) in [(discover, "2026-07-28"), (initialize, "2025-11-25")] {
        let sent = client
            .post(url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .header("MCP-Protocol-Version", version)
            .body(body.to_string())
            .send()
            .await;
        let Ok(response) = sent else { continue };
        if response.status() != reqwest::StatusCode::UNAUTHORIZED {
            continue;
        }
        if let Some(challenge) = response.headers().get(reqwest::header::WWW_AUTHENTICATE) {
            return challenge.to_str().ok().map(str::to_owned);
        }
    }
    None
}

/// The `error` (and `error_description`) of a redirect that carries one.
fn callback_error(callback: &str) -> Option<String> {
    let url = reqwest::Url::parse(callback).ok()?;
    let get = |key: &str| url.query_pairs().find(|(k, _)| k == key).map(|(_, v)| v.into_owned());
    let error = get("error")?;
    let shown: String = match get("error_description") {
        Some(d) => format!("{error}: {d}"),
        None => error,
    };
    Some(shown.chars().take(300).collect())
}

/// Serves the loopback redirect until the browser comes back to it; returns the full redirect URL. Other
/// requests (a favicon) get a 404.
async fn wait_for_callback(listener: &tokio::net::TcpListener, port: u16) -> Result<String, LoginError> {
    loop {
        let (mut stream, _) = listener.accept().await.map_err(|e| LoginError::Loopback(e.to_string()))?;
        let Some(target) = read_target(&mut stream).await else { continue };
        let path = target.split('?').next().unwrap_or("");
        if path != CALLBACK_PATH {
            let _ = respond(&mut stream, "404 Not Found", "Not found.").await;
            continue;
        }
        let callback = format!("http://127.0.0.1:{port}{target}");
        let page = if callback_error(&callback).is_some() {
            "The login failed: see the terminal. You can close this tab."
        } else {
            "Reins received the authorization. You can close this tab."
        };
        let _ = respond(&mut stream, "200 OK", page).await;
        return Ok(callback);
    }
}

/// The request target of a `GET` (its first line, read within 8 KiB and 10 seconds).
async fn read_target(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let read = async {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Some(())
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.ok()??;
    let head = String::from_utf8_lossy(&buf);
    let mut words = head.lines().next()?.split_whitespace();
    (words.next()? == "GET").then_some(())?;
    words.next().filter(|t| t.starts_with('/')).map(str::to_owned)
}

async fn respond(stream: &mut tokio::net::TcpStream, status: &str, text: &str) -> std::io::Result<()> {
    let body = format!("<!doctype html><title>Reins</title><p>{text}</p>\n");
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: \
         close\r\nCache-Control: no-store\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_error_is_read_and_bounded() {
        assert_eq!(
            callback_error("http://127.0.0.1:1/callback?error=access_denied&error_description=no%20way").as_deref(),
            Some("access_denied: no way")
        );
        assert_eq!(callback_error("http://127.0.0.1:1/callback?code=x&state=y"), None);
        let long = format!("http://127.0.0.1:1/callback?error={}", "e".repeat(1000));
        assert_eq!(callback_error(&long).map(|e| e.len()), Some(300));
    }

    #[test]
    fn a_login_for_more_access_keeps_the_scopes_granted_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.json");
        let url = "https://mcp.example.test/mcp";
        let named = vec!["mcp:write".to_owned()];
        // No login yet: the scope named alone; none named: the metadata chooses.
        assert_eq!(scopes_to_ask(&path, url, &named), ["mcp:write"]);
        assert!(scopes_to_ask(&path, url, &[]).is_empty());
        let mut credentials = StoredCredentials::new("client".to_owned(), None, vec![], None);
        credentials.granted_scopes = vec!["mcp:basic".to_owned(), "mcp:write".to_owned()];
        let saved = Saved { url: url.to_owned(), client_secret: None, credentials };
        std::fs::write(&path, serde_json::to_string(&saved).unwrap()).unwrap();
        assert_eq!(scopes_to_ask(&path, url, &named), ["mcp:basic", "mcp:write"], "the union, granted first");
        let more = vec!["mcp:admin extra".to_owned()];
        assert_eq!(scopes_to_ask(&path, url, &more), ["mcp:basic", "mcp:write", "mcp:admin", "extra"]);
        // Another server's login at this name grants nothing here.
        assert_eq!(scopes_to_ask(&path, "https://other.test/mcp", &named), ["mcp:write"]);
    }

    #[test]
    fn token_paths_need_a_valid_name() {
        assert!(token_path("../etc").is_err());
        assert!(token_path("web").unwrap().ends_with("reins/mcp-auth/web.json"));
    }
}
