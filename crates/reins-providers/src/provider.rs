//! The [`Provider`]: one `reins::Model` for the three wire formats, with the HTTP transport, streaming,
//! retries, rate limiting, timeouts and cancellation they share.

use std::sync::{Arc, Once};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use reins::{Delta, DeltaSink, Model, ModelError, ModelIdentity, ModelRequest, ModelResponse};
use reqwest::header::{
    ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue,
    USER_AGENT,
};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::ratelimit::RateLimiter;
use crate::retry::{RetryPolicy, exhausted_window, retry_after};
use crate::sse::SseParser;
use crate::wire::{Emit, FailKind, Failure, body_summary, classify_status, snippet};
use crate::{anthropic, bedrock, gemini, openai_chat, openai_responses};

/// Which wire format a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// OpenAI Responses (`{base}/responses`).
    OpenAiResponses,
    /// OpenAI Chat Completions (`{base}/chat/completions`), also every OpenAI-compatible server.
    OpenAiChat,
    /// Anthropic Messages (`{base}/v1/messages`).
    Anthropic,
    /// Google Gemini (`{base}/v1beta/models/MODEL:generateContent`, `:streamGenerateContent?alt=sse`).
    Gemini,
    /// Amazon Bedrock Converse (`{base}/model/MODEL_ID/converse`, `/converse-stream`), signed with SigV4 or a
    /// Bedrock API key.
    Bedrock,
}

impl Api {
    /// The prefix used in a model spec: `openai`, `openai-chat` or `anthropic`.
    pub fn name(self) -> &'static str {
        match self {
            Api::OpenAiResponses => "openai",
            Api::OpenAiChat => "openai-chat",
            Api::Anthropic => "anthropic",
            Api::Gemini => "gemini",
            Api::Bedrock => "bedrock",
        }
    }

    /// The official endpoint. OpenAI-style base URLs end in `/v1`; Anthropic's is the host, as in the SDKs.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Api::OpenAiResponses | Api::OpenAiChat => "https://api.openai.com/v1",
            Api::Anthropic => "https://api.anthropic.com",
            Api::Gemini => "https://generativelanguage.googleapis.com",
            // The region's own endpoint is used (`https://bedrock-runtime.{region}.amazonaws.com`); this is us-east-1's.
            Api::Bedrock => "https://bedrock-runtime.us-east-1.amazonaws.com",
        }
    }

    /// The environment variable holding the API key.
    pub fn key_env(self) -> &'static str {
        match self {
            Api::OpenAiResponses | Api::OpenAiChat => "OPENAI_API_KEY",
            Api::Anthropic => "ANTHROPIC_API_KEY",
            Api::Gemini => "GEMINI_API_KEY",
            Api::Bedrock => "AWS_BEARER_TOKEN_BEDROCK",
        }
    }

    /// Parses `PROVIDER:MODEL` (`openai:gpt-4.1`, `openai-chat:llama3`, `anthropic:claude-sonnet-4-5`, or a
    /// provider of the [`PROVIDERS`](crate::PROVIDERS) table by name: `ollama:qwen3`, `groq:...`): the API it
    /// speaks and the model's name.
    ///
    /// ```
    /// use reins_providers::Api;
    /// assert_eq!(Api::parse_spec("openai-chat:qwen3:8b").unwrap(), (Api::OpenAiChat, "qwen3:8b".to_owned()));
    /// assert_eq!(Api::parse_spec("ollama:qwen3").unwrap(), (Api::OpenAiChat, "qwen3".to_owned()));
    /// assert!(Api::parse_spec("gpt-4o").is_err());
    /// ```
    pub fn parse_spec(spec: &str) -> Result<(Api, String), ProviderError> {
        crate::named::parse_named_spec(spec).map(|(p, model)| (p.api, model))
    }
}

/// Which tool the model may or must call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the default; nothing is sent).
    #[default]
    Auto,
    /// The model must call some tool.
    Required,
    /// The model must not call a tool.
    None,
    /// The model must call this tool.
    Tool(String),
}

impl ToolChoice {
    /// The OpenAI `tool_choice` value (Responses and Chat Completions alike), or `None` for `Auto` (the
    /// default, left out). `named` gives the adapter's shape for one named tool.
    pub(crate) fn openai(&self, named: impl FnOnce(&str) -> serde_json::Value) -> Option<serde_json::Value> {
        match self {
            ToolChoice::Auto => None,
            ToolChoice::Required => Some("required".into()),
            ToolChoice::None => Some("none".into()),
            ToolChoice::Tool(name) => Some(named(name)),
        }
    }
}

/// Why a provider could not be configured.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The model spec is not `PROVIDER:MODEL`.
    #[error("invalid model: {0}")]
    InvalidModelSpec(String),
    /// The base URL is not an http(s) URL.
    #[error("invalid base URL {url:?}: {reason}")]
    InvalidBaseUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No API key, and the base URL is not local.
    #[error("no API key: set {env} (only a local base URL may go without one)")]
    MissingApiKey {
        /// The variable to set.
        env: String,
    },
    /// A named provider without a default base URL (Azure's resource endpoint) was given none.
    #[error("{provider}: models need the service's address: set {env} or the base URL")]
    MissingBaseUrl {
        /// The provider.
        provider: &'static str,
        /// The variable that gives the address.
        env: &'static str,
    },
    /// A server could not be asked (`reins models` of a local server).
    #[error("cannot reach {url}: {reason}")]
    Unreachable {
        /// What was asked.
        url: String,
        /// Why it did not answer.
        reason: String,
    },
    /// The API key or an extra header cannot be sent as an HTTP header.
    #[error("invalid header {name:?}: {reason}")]
    InvalidHeader {
        /// The header's name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A setting is out of range.
    #[error("invalid setting: {0}")]
    InvalidSetting(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// What the wire formats need to build a request body.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub model: String,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub tool_choice: ToolChoice,
    pub extra_body: Map<String, Value>,
    /// Chat Completions' name for the output cap: `max_completion_tokens` (OpenAI) or `max_tokens`.
    pub chat_max_tokens_field: String,
    /// What the model's tokens cost: given, else the list price of a known model.
    pub price: Option<reins::Price>,
    /// OpenAI APIs: how hard a reasoning model thinks.
    pub reasoning_effort: Option<crate::ReasoningEffort>,
    /// Anthropic: extended thinking within this many tokens.
    pub thinking_budget: Option<u32>,
    /// Whether requests ask for prompt caching (Anthropic `cache_control` breakpoints, the Responses API's
    /// `prompt_cache_key`). Default on.
    pub prompt_cache: bool,
}

/// The response cap sent for a model whose own output cap Reins does not know, when none is configured:
/// a small local model left uncapped can stream a degenerate answer for ever.
pub const DEFAULT_RESPONSE_CAP: u32 = 8192;

/// How long one attempt may take at most, from the request to the response's end: see
/// [`ProviderBuilder::response_deadline`].
pub const DEFAULT_RESPONSE_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// The bytes of streamed content allowed per token of the response cap: far more than any tokenizer makes of a
/// token (a few bytes on average; the longest tokens of common vocabularies are a few dozen), so that a stream is
/// cut only when the server ignores the cap.
pub const BYTES_PER_TOKEN: u64 = 32;

impl Settings {
    /// The output cap of OpenAI-style requests: the configured one; none for a known model (the API's own
    /// default, the model's cap); [`DEFAULT_RESPONSE_CAP`] for a model Reins does not know.
    pub(crate) fn openai_cap(&self) -> Option<u32> {
        match self.max_output_tokens {
            Some(n) => Some(n),
            None if crate::pricing::model_info(&self.model).is_some() => None,
            None => Some(DEFAULT_RESPONSE_CAP),
        }
    }
}

/// Builds a [`Provider`].
#[derive(Clone, Debug)]
pub struct ProviderBuilder {
    api: Api,
    settings: Settings,
    base_url: Option<String>,
    api_key: Option<String>,
    /// The variable the key is read from, over the named provider's and the API's.
    api_key_env: Option<String>,
    /// The provider the spec named, when it named one.
    named: Option<&'static crate::NamedProvider>,
    headers: Vec<(String, String)>,
    stream: bool,
    retry: RetryPolicy,
    idle_timeout: Duration,
    response_timeout: Duration,
    response_deadline: Duration,
    connect_timeout: Duration,
    max_response_bytes: usize,
    limiter: Option<RateLimiter>,
    /// Bedrock: SigV4 credentials over the environment's, and the region.
    aws_credentials: Option<bedrock::AwsCredentials>,
    aws_region: Option<String>,
}

impl ProviderBuilder {
    /// The server: for OpenAI-style APIs a URL ending in `/v1`, for Anthropic and Gemini the host (Gemini's
    /// `/v1beta` is appended unless the URL ends in a version). Default: the official endpoint.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }
    /// The API key (`None`: none).
    pub fn api_key(mut self, key: Option<String>) -> Self {
        self.api_key = key.filter(|k| !k.trim().is_empty());
        self
    }
    /// Takes the API key from its environment variable when one is set and no key was given: the one
    /// [`ProviderBuilder::api_key_env`] names, else the named provider's (`GROQ_API_KEY`; a local server's
    /// none), else the API's (`OPENAI_API_KEY` or `ANTHROPIC_API_KEY`).
    pub fn api_key_from_env(mut self) -> Self {
        if self.api_key.is_none() {
            if let Some(env) = self.key_env() {
                self.api_key = crate::env_key(&env);
            }
        }
        self
    }
    /// The environment variable [`ProviderBuilder::api_key_from_env`] reads (call this first).
    pub fn api_key_env(mut self, env: impl Into<String>) -> Self {
        self.api_key_env = Some(env.into()).filter(|e| !e.trim().is_empty());
        self
    }
    /// The variable the key comes from: the one given, the named provider's, the API's (`None`: a named local
    /// server, which needs no key).
    pub fn key_env(&self) -> Option<String> {
        match (&self.api_key_env, self.named) {
            (Some(env), _) => Some(env.clone()),
            (None, Some(named)) => named.key_env.map(str::to_owned),
            (None, None) => Some(self.api.key_env().to_owned()),
        }
    }
    /// The service the spec named: its key variable and header, and its base URL unless one is given.
    pub(crate) fn named(mut self, named: &'static crate::NamedProvider) -> Self {
        self.named = Some(named);
        self
    }
    /// An extra header sent with every request (it replaces a default header of the same name).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
    /// Caps each response's output tokens.
    pub fn max_output_tokens(mut self, n: u32) -> Self {
        self.settings.max_output_tokens = Some(n);
        self
    }
    /// Whether requests ask for prompt caching (default: yes). On, the Anthropic adapter places
    /// `cache_control` breakpoints (after the instructions and tools, at the end of the previous step's
    /// request and at the end of this one) and the Responses adapter sends the conversation's stable
    /// [`ModelRequest::cache_key`](reins::ModelRequest::cache_key) as `prompt_cache_key`. Off, neither is sent
    /// (cache writes cost more than plain input on Anthropic: a run of one short step gains nothing).
    pub fn prompt_cache(mut self, on: bool) -> Self {
        self.settings.prompt_cache = on;
        self
    }
    /// What the model's tokens cost (default: the list price of a known model, else unknown).
    pub fn price(mut self, price: reins::Price) -> Self {
        self.settings.price = Some(price);
        self
    }
    /// The sampling temperature, 0 to 2 (OpenAI-style APIs only: Anthropic's Messages API has none).
    pub fn temperature(mut self, t: f64) -> Self {
        self.settings.temperature = Some(t);
        self
    }
    /// OpenAI APIs: how hard a reasoning model thinks (Responses `reasoning.effort`, Chat Completions
    /// `reasoning_effort`); Gemini: `thinkingConfig.thinkingLevel` (not with a thinking budget). The Responses
    /// adapter then also asks for the reasoning items' encrypted content (`include`, `store: false`) and sends them
    /// back on the next turns.
    pub fn reasoning_effort(mut self, effort: crate::ReasoningEffort) -> Self {
        self.settings.reasoning_effort = Some(effort);
        self
    }
    /// Anthropic: extended thinking within `budget` tokens (`thinking: {type: enabled, budget_tokens}`), at
    /// least [`crate::MIN_THINKING_BUDGET`] and below the response cap. The signed thinking blocks are sent
    /// back on the next turns. Gemini: `thinkingConfig.thinkingBudget` (not with a reasoning effort).
    pub fn thinking_budget(mut self, budget: u32) -> Self {
        self.settings.thinking_budget = Some(budget);
        self
    }
    /// Which tool the model may or must call.
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.settings.tool_choice = choice;
        self
    }
    /// Streams responses (the default) or asks for whole ones.
    pub fn stream(mut self, on: bool) -> Self {
        self.stream = on;
        self
    }
    /// The retry policy.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }
    /// The longest silence within a response body or stream before the attempt counts as stalled.
    /// Default 120 s.
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.idle_timeout = d;
        self
    }
    /// The longest wait for a response's headers. Default 600 s (a non-streamed response sends its
    /// headers only once the whole answer is generated).
    pub fn response_timeout(mut self, d: Duration) -> Self {
        self.response_timeout = d;
        self
    }
    /// The longest one attempt may take, from sending the request to the response's end, however the server
    /// trickles it. Default 30 min ([`DEFAULT_RESPONSE_DEADLINE`]). Past it, an attempt whose stream delivered no
    /// content yet (only comments, pings, a body one byte at a time) counts as stalled and is retried; one that
    /// was delivering content fails (retrying a generation that slow would only take as long again).
    pub fn response_deadline(mut self, d: Duration) -> Self {
        self.response_deadline = d;
        self
    }
    /// The longest wait for a connection. Default 30 s.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }
    /// The largest response body (or whole stream) accepted, in bytes. Default 64 MiB.
    pub fn max_response_bytes(mut self, n: usize) -> Self {
        self.max_response_bytes = n;
        self
    }
    /// A rate limiter, possibly shared with other providers. Default: a limiter of this provider's own
    /// that only follows the server's rate-limit answers.
    pub fn rate_limiter(mut self, limiter: RateLimiter) -> Self {
        self.limiter = Some(limiter);
        self
    }
    /// Extra top-level fields merged into every request body (they win over the adapter's own).
    pub fn extra_body(mut self, fields: Map<String, Value>) -> Self {
        self.settings.extra_body = fields;
        self
    }
    /// For Chat Completions: the field that carries the output cap. Default `max_completion_tokens` for
    /// the official endpoint and `max_tokens` (which every compatible server reads) elsewhere.
    pub fn chat_max_tokens_field(mut self, field: impl Into<String>) -> Self {
        self.settings.chat_max_tokens_field = field.into();
        self
    }

    /// Bedrock: the credentials that sign requests with SigV4 (default: `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`). A Bedrock API key ([`ProviderBuilder::api_key`],
    /// `AWS_BEARER_TOKEN_BEDROCK`) wins over them.
    pub fn aws_credentials(mut self, credentials: bedrock::AwsCredentials) -> Self {
        self.aws_credentials = Some(credentials);
        self
    }
    /// Bedrock: the region (default: `AWS_REGION`, else `AWS_DEFAULT_REGION`).
    pub fn aws_region(mut self, region: impl Into<String>) -> Self {
        self.aws_region = Some(region.into()).filter(|r| !r.trim().is_empty());
        self
    }

    /// Checks the settings and builds the provider.
    pub fn build(mut self) -> Result<Provider, ProviderError> {
        self.check_settings()?;
        if self.settings.price.is_none() {
            self.settings.price = crate::pricing::model_info(&self.settings.model).map(|i| i.price);
        }
        let mut signer = None;
        if self.api == Api::Bedrock {
            let b = bedrock::setup(
                self.base_url.as_deref(),
                self.api_key.is_some(),
                self.aws_credentials.take(),
                self.aws_region.as_deref(),
            )?;
            self.base_url = Some(b.base_url);
            signer = b.signer;
        }
        let (parsed, url) = self.endpoint()?;
        // A named local server needs no key wherever it runs; any other server does unless it is local.
        if self.api_key.is_none() && signer.is_none() && !is_local(&parsed) {
            if let Some(env) = self.key_env() {
                return Err(ProviderError::MissingApiKey { env });
            }
        }
        if self.settings.chat_max_tokens_field.is_empty() {
            let official = parsed.host_str() == Some("api.openai.com");
            self.settings.chat_max_tokens_field =
                if official { "max_completion_tokens" } else { "max_tokens" }.to_owned();
        }
        let headers = self.request_headers()?;
        let client = http_client(self.connect_timeout)?;
        let output_cap = self.output_cap();
        Ok(Provider {
            inner: Arc::new(Inner {
                api: self.api,
                system: self.named.map(|n| n.system),
                settings: self.settings,
                url,
                headers,
                client,
                stream: self.stream,
                retry: self.retry,
                idle_timeout: self.idle_timeout,
                response_timeout: self.response_timeout,
                response_deadline: self.response_deadline,
                max_response_bytes: self.max_response_bytes,
                output_cap,
                limiter: self.limiter.unwrap_or_default(),
                signer,
            }),
        })
    }

    /// The settings' own checks: model name, output cap, reasoning, temperature, timeouts, body cap, price.
    fn check_settings(&self) -> Result<(), ProviderError> {
        if self.settings.model.trim().is_empty() {
            return Err(ProviderError::InvalidSetting("the model name is empty".into()));
        }
        if self.settings.max_output_tokens == Some(0) {
            return Err(ProviderError::InvalidSetting("max output tokens must be at least 1".into()));
        }
        let st = &self.settings;
        crate::check_reasoning(&crate::ReasoningSettings {
            api: self.api,
            model: &st.model,
            max_output_tokens: st.max_output_tokens,
            temperature: st.temperature.is_some(),
            tool_choice: &st.tool_choice,
            effort: st.reasoning_effort,
            thinking_budget: st.thinking_budget,
        })
        .map_err(|c| ProviderError::InvalidSetting(c.to_string()))?;
        if let Some(t) = self.settings.temperature {
            if !(t.is_finite() && (0.0..=2.0).contains(&t)) {
                return Err(ProviderError::InvalidSetting(format!("temperature {t} is outside 0..=2")));
            }
            if self.api == Api::Anthropic {
                return Err(ProviderError::InvalidSetting(
                    "the Anthropic Messages API takes no temperature (pass it through extra_body if a server wants one)"
                        .into(),
                ));
            }
        }
        for (what, d) in [
            ("idle timeout", self.idle_timeout),
            ("response timeout", self.response_timeout),
            ("response deadline", self.response_deadline),
            ("connect timeout", self.connect_timeout),
        ] {
            if d.is_zero() {
                return Err(ProviderError::InvalidSetting(format!("the {what} must be above zero")));
            }
        }
        if self.max_response_bytes == 0 {
            return Err(ProviderError::InvalidSetting("max response bytes must be at least 1".into()));
        }
        if let Some(p) = &self.settings.price {
            p.validate().map_err(|e| ProviderError::InvalidSetting(format!("price: {e}")))?;
        }
        Ok(())
    }

    /// The base URL (given, the named provider's, or the API's default), checked, and the endpoint under it.
    fn endpoint(&self) -> Result<(reqwest::Url, reqwest::Url), ProviderError> {
        let given = self.base_url.clone();
        let base = match (&given, self.named) {
            (Some(url), _) => url.clone(),
            (None, Some(named)) => named.resolve_base_url()?,
            (None, None) => self.api.default_base_url().to_owned(),
        };
        let invalid = |reason: String| ProviderError::InvalidBaseUrl { url: base.clone(), reason };
        let parsed = reqwest::Url::parse(base.trim()).map_err(|e| invalid(e.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(invalid(format!("the scheme must be http or https, not {}", parsed.scheme())));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(invalid("a base URL has no query or fragment".into()));
        }
        let trimmed = parsed.as_str().trim_end_matches('/').to_owned();
        if self.api == Api::Gemini {
            let url = gemini::endpoint(&trimmed, &self.settings.model, self.stream).map_err(invalid)?;
            return Ok((parsed, url));
        }
        if self.api == Api::Bedrock {
            let url = bedrock::endpoint(&trimmed, &self.settings.model, self.stream).map_err(invalid)?;
            return Ok((parsed, url));
        }
        let path = match self.api {
            Api::OpenAiResponses => "/responses",
            Api::OpenAiChat => "/chat/completions",
            Api::Anthropic if trimmed.ends_with("/v1") => "/messages",
            Api::Anthropic => "/v1/messages",
            Api::Gemini | Api::Bedrock => "",
        };
        let url = reqwest::Url::parse(&format!("{trimmed}{path}")).map_err(|e| invalid(e.to_string()))?;
        Ok((parsed, url))
    }

    /// The headers every request carries: content type, accept, user agent, the key, the API version, the
    /// caller's own.
    fn request_headers(&self) -> Result<HeaderMap, ProviderError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let accept = match (self.stream, self.api) {
            (true, Api::Bedrock) => bedrock::EVENT_STREAM,
            (true, _) => "text/event-stream",
            (false, _) => "application/json",
        };
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        headers.insert(USER_AGENT, HeaderValue::from_static(concat!("reins/", env!("CARGO_PKG_VERSION"))));
        // Bodies as they are: a compressed answer would otherwise be read as text (see `Provider::attempt`).
        headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        if let Some(key) = &self.api_key {
            let (name, value) = match (self.api, self.named.and_then(|n| n.key_header)) {
                (_, Some(header)) => (HeaderName::from_static(header), key.trim().to_owned()),
                (Api::Anthropic, None) => (HeaderName::from_static("x-api-key"), key.trim().to_owned()),
                (Api::Gemini, None) => (HeaderName::from_static("x-goog-api-key"), key.trim().to_owned()),
                _ => (AUTHORIZATION, format!("Bearer {}", key.trim())),
            };
            let mut value = HeaderValue::from_str(&value).map_err(|_| ProviderError::InvalidHeader {
                name: name.to_string(),
                reason: "the API key holds characters a header cannot carry".into(),
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        if self.api == Api::Anthropic {
            headers.insert("anthropic-version", HeaderValue::from_static(anthropic::API_VERSION));
        }
        for (name, value) in &self.headers {
            let bad = |reason: String| ProviderError::InvalidHeader { name: name.clone(), reason };
            let n = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|e| bad(e.to_string()))?;
            let v = HeaderValue::from_str(value.trim()).map_err(|e| bad(e.to_string()))?;
            headers.insert(n, v);
        }
        Ok(headers)
    }

    /// What a stream may deliver before it is cut as over the response cap: generous bytes per token of the cap
    /// sent (or the model's own), so that only a server ignoring the cap meets it.
    fn output_cap(&self) -> usize {
        let cap_tokens = self
            .settings
            .max_output_tokens
            .map(u64::from)
            .or_else(|| crate::pricing::model_info(&self.settings.model).map(|i| i.max_output_tokens))
            .unwrap_or(u64::from(DEFAULT_RESPONSE_CAP));
        usize::try_from(cap_tokens.saturating_mul(BYTES_PER_TOKEN)).unwrap_or(usize::MAX).min(self.max_response_bytes)
    }
}

/// The HTTP client: rustls, pooled connections, no redirects.
fn http_client(connect_timeout: Duration) -> Result<reqwest::Client, ProviderError> {
    install_crypto_provider();
    // No redirect is followed: a redirect would carry the API key, the headers and the whole conversation
    // to wherever the server's `Location` names (reqwest keeps `x-api-key` and custom headers across hosts).
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .pool_idle_timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ProviderError::Client(error_chain(&e)))
}

/// Loopback and private-network hosts, which may serve a model without an API key.
pub(crate) fn is_local(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => {
            ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified()
        }
        Ok(std::net::IpAddr::V6(ip)) => ip.is_loopback() || ip.is_unspecified(),
        Err(_) => host == "localhost" || host.ends_with(".localhost") || host.ends_with(".local"),
    }
}

pub(crate) fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Fails only when a provider is installed already, which is just as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// An error with its sources, which is where reqwest keeps the useful part.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let more = c.to_string();
        if !s.contains(&more) {
            s.push_str(": ");
            s.push_str(&more);
        }
        cur = c.source();
    }
    s
}

struct Inner {
    api: Api,
    /// The named provider's `gen_ai.provider.name`.
    system: Option<&'static str>,
    settings: Settings,
    url: reqwest::Url,
    headers: HeaderMap,
    client: reqwest::Client,
    stream: bool,
    retry: RetryPolicy,
    idle_timeout: Duration,
    response_timeout: Duration,
    response_deadline: Duration,
    max_response_bytes: usize,
    /// The content a stream may deliver, in bytes, before it is cut at the response cap.
    output_cap: usize,
    limiter: RateLimiter,
    /// Bedrock without a bearer key: signs each attempt.
    signer: Option<bedrock::Signer>,
}

/// A model behind an HTTP API: OpenAI Responses, OpenAI Chat Completions (any compatible server) or
/// Anthropic Messages. Cheap to clone; clones share the connection pool and the rate limiter.
///
/// Streams by default: text, reasoning and tool-call deltas go to the run's [`DeltaSink`] as they
/// arrive, and the whole response is returned at the end. Retries transient failures (see
/// [`RetryPolicy`]); cancelling the token aborts the HTTP request at once.
///
/// ```
/// use reins_providers::{Api, Provider};
/// let p = Provider::builder(Api::OpenAiChat, "llama3").base_url("http://127.0.0.1:8080/v1").build().unwrap();
/// assert_eq!(p.endpoint(), "http://127.0.0.1:8080/v1/chat/completions");
/// assert!(Provider::builder(Api::Anthropic, "claude-sonnet-4-5").api_key(None).build().is_err());
/// ```
#[derive(Clone)]
pub struct Provider {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("api", &self.inner.api)
            .field("model", &self.inner.settings.model)
            .field("endpoint", &self.inner.url.as_str())
            .field("stream", &self.inner.stream)
            .finish_non_exhaustive()
    }
}

enum StreamState {
    Responses(openai_responses::Stream),
    Chat(openai_chat::Stream),
    Anthropic(anthropic::Stream),
    Gemini(gemini::Stream),
    Bedrock(bedrock::Stream),
}

/// What cuts a stream's bytes into events: SSE, or Bedrock's event-stream frames.
enum Framer {
    Sse(SseParser),
    EventStream(bedrock::Frames),
}

impl Framer {
    fn new(api: Api, max_event_bytes: usize) -> Self {
        match api {
            Api::Bedrock => Self::EventStream(bedrock::Frames::default()),
            _ => Self::Sse(SseParser::new(max_event_bytes)),
        }
    }
    fn push(&mut self, chunk: &[u8], events: &mut Vec<crate::sse::SseEvent>) -> Result<(), Failure> {
        match self {
            Self::Sse(p) => p.push(chunk, events).map_err(|e| Failure::malformed(e.to_string())),
            Self::EventStream(f) => f.push(chunk, events),
        }
    }
    fn finish(&mut self) {
        if let Self::Sse(p) = self {
            p.finish();
        }
    }
}

impl StreamState {
    fn new(api: Api) -> Self {
        match api {
            Api::OpenAiResponses => Self::Responses(Default::default()),
            Api::OpenAiChat => Self::Chat(Default::default()),
            Api::Anthropic => Self::Anthropic(Default::default()),
            Api::Gemini => Self::Gemini(Default::default()),
            Api::Bedrock => Self::Bedrock(Default::default()),
        }
    }
    fn on_event(&mut self, ev: &crate::sse::SseEvent, emit: &mut Emit) -> Result<bool, Failure> {
        match self {
            Self::Responses(s) => s.on_event(ev, emit),
            Self::Chat(s) => s.on_event(ev, emit),
            Self::Anthropic(s) => s.on_event(ev, emit),
            Self::Gemini(s) => s.on_event(ev, emit),
            Self::Bedrock(s) => s.on_event(ev, emit),
        }
    }
    fn finish(self) -> Result<ModelResponse, Failure> {
        match self {
            Self::Responses(s) => s.finish(),
            Self::Chat(s) => s.finish(),
            Self::Anthropic(s) => s.finish(),
            Self::Gemini(s) => s.finish(),
            Self::Bedrock(s) => s.finish(),
        }
    }
}

impl Provider {
    /// A builder for `model` behind `api`, with the official endpoint and no key yet.
    pub fn builder(api: Api, model: impl Into<String>) -> ProviderBuilder {
        ProviderBuilder {
            api,
            settings: Settings {
                model: model.into(),
                max_output_tokens: None,
                temperature: None,
                tool_choice: ToolChoice::Auto,
                extra_body: Map::new(),
                chat_max_tokens_field: String::new(),
                price: None,
                reasoning_effort: None,
                thinking_budget: None,
                prompt_cache: true,
            },
            base_url: None,
            api_key: None,
            api_key_env: None,
            named: None,
            headers: Vec::new(),
            stream: true,
            retry: RetryPolicy::default(),
            idle_timeout: Duration::from_secs(120),
            response_timeout: Duration::from_secs(600),
            response_deadline: DEFAULT_RESPONSE_DEADLINE,
            connect_timeout: Duration::from_secs(30),
            max_response_bytes: 64 << 20,
            limiter: None,
            aws_credentials: None,
            aws_region: None,
        }
    }

    /// The wire format.
    pub fn api(&self) -> Api {
        self.inner.api
    }

    /// The model name.
    pub fn model(&self) -> &str {
        &self.inner.settings.model
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &str {
        self.inner.url.as_str()
    }

    /// The rate limiter (share it with other providers through [`ProviderBuilder::rate_limiter`]).
    pub fn rate_limiter(&self) -> &RateLimiter {
        &self.inner.limiter
    }

    /// The JSON body this provider sends for `request`.
    pub fn request_body(&self, request: &ModelRequest) -> Value {
        let s = &self.inner.settings;
        match self.inner.api {
            Api::OpenAiResponses => openai_responses::body(s, request, self.inner.stream),
            Api::OpenAiChat => openai_chat::body(s, request, self.inner.stream),
            Api::Anthropic => anthropic::body(s, request, self.inner.stream),
            Api::Gemini => gemini::body(s, request),
            Api::Bedrock => bedrock::body(s, request),
        }
    }

    fn parse(&self, v: &Value) -> Result<ModelResponse, Failure> {
        match self.inner.api {
            Api::OpenAiResponses => openai_responses::parse(v),
            Api::OpenAiChat => openai_chat::parse(v),
            Api::Anthropic => anthropic::parse(v),
            Api::Gemini => gemini::parse(v),
            Api::Bedrock => bedrock::parse(v),
        }
    }

    /// One HTTP exchange.
    async fn attempt(&self, body: &Bytes, emit: &mut Emit) -> Result<ModelResponse, Failure> {
        let inner = &*self.inner;
        let mut request = inner.client.post(inner.url.clone()).headers(inner.headers.clone());
        if let Some(signer) = &inner.signer {
            request = request.headers(signer.sign(&inner.url, body, SystemTime::now())?);
        }
        let send = request.body(body.clone()).send();
        let mut resp = match tokio::time::timeout(inner.response_timeout, send).await {
            Err(_) => {
                return Err(Failure::transient(format!(
                    "no response from {} within {}",
                    inner.url,
                    humantime::format_duration(inner.response_timeout)
                )));
            }
            Ok(Err(e)) => {
                return Err(Failure::transient(format!("request to {} failed: {}", inner.url, error_chain(&e))));
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        let headers = resp.headers().clone();
        let now = SystemTime::now();
        if let Some(wait) = exhausted_window(&headers, now) {
            if wait <= inner.retry.max_retry_after {
                inner.limiter.pause_for(wait);
            }
        }
        let content_type =
            headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").trim().to_ascii_lowercase();
        if status.is_redirection() {
            return Err(redirect_refused(status, &headers));
        }
        // Reins asks for bodies as they are (`Accept-Encoding: identity`) and decodes none: an encoded body read
        // as text would be recorded as replacement characters.
        let encoding = headers
            .get(CONTENT_ENCODING)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_ascii_lowercase())
            .filter(|e| !e.is_empty() && e != "identity");
        if !status.is_success() {
            // An error body is only read for its message: a short cap, and what arrived is enough.
            let (content_type, body) = match &encoding {
                Some(e) => (
                    "text/plain".to_owned(),
                    format!("(a body in {:?} encoding, not read)", snippet(e, 40)).into_bytes(),
                ),
                None => {
                    let body = read_body(&mut resp, 64 * 1024, inner.idle_timeout)
                        .await
                        .unwrap_or_else(|(partial, _)| partial);
                    (content_type, body)
                }
            };
            let reason = status.canonical_reason().unwrap_or("");
            let mut f = match inner.api {
                Api::Bedrock => bedrock::http_error(status.as_u16(), reason, &headers, &content_type, &body),
                _ => classify_status(status.as_u16(), reason, &content_type, &body),
            };
            if f.retryable() {
                f.retry_after = retry_after(&headers, now);
            }
            return Err(f);
        }
        if let Some(e) = encoding {
            return Err(Failure::malformed(format!(
                "the response came in {:?} encoding, which Reins did not ask for (it sends Accept-Encoding: identity) and \
                 does not decode: check the proxy or server in between",
                snippet(&e, 40)
            )));
        }
        let framed = match inner.api {
            Api::Bedrock => content_type.starts_with(bedrock::EVENT_STREAM),
            _ => content_type.starts_with("text/event-stream"),
        };
        if inner.stream && framed {
            return self.read_stream(resp, emit).await;
        }
        if let Some(len) = resp.content_length() {
            if len > inner.max_response_bytes as u64 {
                return Err(too_large(inner.max_response_bytes));
            }
        }
        let body = read_body(&mut resp, inner.max_response_bytes, inner.idle_timeout).await.map_err(|(_, f)| f)?;
        let v: Value = serde_json::from_slice(&body).map_err(|e| {
            let ct = if content_type.is_empty() { "no content type".to_owned() } else { content_type.clone() };
            Failure::malformed(format!("the response is not JSON ({ct}; {e}): {}", body_summary(&content_type, &body)))
        })?;
        let response = self.parse(&v)?;
        // A server that answered a stream request with a whole response: show its text all the same.
        if inner.stream {
            emit.reasoning(response.reasoning.as_deref().unwrap_or(""));
            emit.text(&response.text);
        }
        Ok(response)
    }

    async fn read_stream(&self, mut resp: reqwest::Response, emit: &mut Emit) -> Result<ModelResponse, Failure> {
        let inner = &*self.inner;
        let mut parser = Framer::new(inner.api, inner.max_response_bytes.min(16 << 20));
        let mut state = StreamState::new(inner.api);
        let mut events = Vec::new();
        let mut total = 0usize;
        loop {
            let chunk = match tokio::time::timeout(inner.idle_timeout, resp.chunk()).await {
                Err(_) => {
                    return Err(Failure::transient(format!(
                        "the stream stalled: no data for {}",
                        humantime::format_duration(inner.idle_timeout)
                    )));
                }
                Ok(Err(e)) => return Err(Failure::transient(format!("the stream broke off: {}", error_chain(&e)))),
                Ok(Ok(None)) => break,
                Ok(Ok(Some(c))) => c,
            };
            total = total.saturating_add(chunk.len());
            if total > inner.max_response_bytes {
                return Err(too_large(inner.max_response_bytes));
            }
            parser.push(&chunk, &mut events)?;
            for ev in events.drain(..) {
                if state.on_event(&ev, emit)? {
                    return state.finish();
                }
                if emit.content > inner.output_cap {
                    // A server streaming past the response cap it was sent: end the answer there (dropping the
                    // response closes the connection).
                    tracing::warn!(
                        target: "reins::provider",
                        "the stream's content passed {} bytes ({BYTES_PER_TOKEN} a token of the response cap): cut, the answer ends truncated",
                        inner.output_cap
                    );
                    return Ok(emit.cut());
                }
            }
        }
        parser.finish();
        state.finish()
    }
}

/// A 3xx answer: never followed (it would take the key and the conversation elsewhere), reported with where it
/// pointed, escaped and bounded.
fn redirect_refused(status: reqwest::StatusCode, headers: &HeaderMap) -> Failure {
    let location = match headers.get(reqwest::header::LOCATION) {
        Some(v) => format!("to {:?}", snippet(&String::from_utf8_lossy(v.as_bytes()), 200)),
        None => "with no Location".to_owned(),
    };
    let reason = status.canonical_reason().map(|r| format!(" {r}")).unwrap_or_default();
    Failure::new(
        FailKind::Rejected(status.as_u16()),
        format!(
            "the server redirects {location} (HTTP {}{reason}); Reins follows no redirect, which would send the API key \
             and the conversation there: set the base URL to the API's own address",
            status.as_u16()
        ),
    )
}

impl Provider {
    /// An attempt that did not end within the response deadline: stalled (retried) when no content had arrived,
    /// else a final failure.
    fn past_deadline(&self, emit: &Emit) -> Failure {
        let deadline = humantime::format_duration(self.inner.response_deadline);
        if emit.content == 0 {
            Failure::transient(format!(
                "the response stalled: no content within {deadline} (the provider's response_deadline)"
            ))
        } else {
            Failure::new(
                FailKind::Failed,
                format!(
                    "the response did not end within {deadline} (the provider's response_deadline); {} bytes of \
                     content had arrived",
                    emit.content
                ),
            )
        }
    }
}

fn too_large(limit: usize) -> Failure {
    Failure::malformed(format!("the response exceeds {limit} bytes (the provider's max_response_bytes)"))
}

/// Reads a body up to `cap` bytes, each chunk within `idle`. On failure, returns what arrived with it.
async fn read_body(resp: &mut reqwest::Response, cap: usize, idle: Duration) -> Result<Vec<u8>, (Vec<u8>, Failure)> {
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(idle, resp.chunk()).await {
            Err(_) => {
                let f = Failure::transient(format!(
                    "the response stalled: no data for {}",
                    humantime::format_duration(idle)
                ));
                return Err((out, f));
            }
            Ok(Err(e)) => {
                let f = Failure::transient(format!("the response broke off: {}", error_chain(&e)));
                return Err((out, f));
            }
            Ok(Ok(None)) => return Ok(out),
            Ok(Ok(Some(c))) => {
                if out.len().saturating_add(c.len()) > cap {
                    let room = cap - out.len();
                    out.extend_from_slice(&c[..room]);
                    return Err((out, too_large(cap)));
                }
                out.extend_from_slice(&c);
            }
        }
    }
}

#[async_trait]
impl Model for Provider {
    /// Provider `openai` (Responses and Chat Completions, whatever server answers them) or `anthropic`,
    /// the model asked for, and the endpoint's host and port.
    fn identity(&self) -> ModelIdentity {
        let inner = &*self.inner;
        let provider = match (inner.system, inner.api) {
            (Some(system), _) => system,
            (None, Api::OpenAiResponses | Api::OpenAiChat) => "openai",
            (None, Api::Anthropic) => "anthropic",
            (None, Api::Gemini) => "gcp.gemini",
            (None, Api::Bedrock) => "aws.bedrock",
        };
        ModelIdentity {
            provider: Some(Arc::from(provider)),
            model: Some(Arc::from(inner.settings.model.as_str())),
            server_address: inner.url.host_str().map(Arc::from),
            server_port: inner.url.port_or_known_default(),
        }
    }

    fn price(&self) -> Option<reins::Price> {
        self.inner.settings.price
    }

    async fn generate(&self, request: &ModelRequest, cancel: &CancellationToken) -> Result<ModelResponse, ModelError> {
        let inner = &*self.inner;
        if inner.api == Api::Gemini {
            gemini::check_tools(&request.tools).map_err(|e| ModelError::Rejected {
                status: 400,
                message: format!("{e} (refused before any request was sent)"),
            })?;
        }
        let body = serde_json::to_vec(&self.request_body(request))
            .map_err(|e| ModelError::Failed(format!("cannot encode the request: {e}")))?;
        let body = Bytes::from(body);
        let mut emit = Emit::new(if inner.stream { DeltaSink::current() } else { None });
        let attempts = inner.retry.max_retries.saturating_add(1);
        let mut attempt = 1u32;
        loop {
            let Some(permit) = inner.limiter.acquire(cancel).await else {
                return Err(ModelError::Cancelled);
            };
            emit.begin_attempt(inner.output_cap);
            let result = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(ModelError::Cancelled),
                r = tokio::time::timeout(inner.response_deadline, self.attempt(&body, &mut emit)) => r,
            };
            drop(permit);
            let result = result.unwrap_or_else(|_| Err(self.past_deadline(&emit)));
            let failure = match result {
                Ok(response) => return Ok(response),
                Err(f) => f,
            };
            if !failure.retryable() || attempt >= attempts {
                return Err(failure.into_model_error(attempt));
            }
            let wait = match failure.retry_after {
                Some(d) if d > inner.retry.max_retry_after => {
                    return Err(ModelError::Failed(format!(
                        "{}: the server asks to retry after {}, longer than the {} allowed (RetryPolicy::max_retry_after)",
                        failure.message,
                        crate::retry::readable(d),
                        crate::retry::readable(inner.retry.max_retry_after)
                    )));
                }
                Some(d) => {
                    // Every run sharing the limiter waits too: the server is refusing all of them.
                    inner.limiter.pause_for(d);
                    d
                }
                None => inner.retry.backoff(attempt),
            };
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(ModelError::Cancelled),
                _ = tokio::time::sleep(wait) => {}
            }
            attempt += 1;
            if emit.emitted {
                emit.send(Delta::Restart { attempt, reason: snippet(&failure.message, 300) });
                emit.emitted = false;
            }
        }
    }
}
