//! Providers by name: the services a model spec names (`ollama:qwen3`, `groq:llama-3.3-70b-versatile`,
//! `azure:my-deployment`, ...), each a row of data — the wire format it speaks, its base URL (or the environment
//! variable that holds it), the environment variable of its API key and the header that carries the key — not
//! code of its own. [`NamedProvider::builder`] starts a [`ProviderBuilder`] from a row; every part stays
//! overridable ([`ProviderBuilder::base_url`], [`ProviderBuilder::api_key_env`]).

use std::time::Duration;

use serde::Serialize;

use crate::Provider;
use crate::provider::{Api, ProviderBuilder, ProviderError, error_chain, install_crypto_provider};

/// Where a provider's base URL may come from in the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BaseUrlEnv {
    /// The variable (`OLLAMA_HOST`, `AZURE_OPENAI_ENDPOINT`).
    pub var: &'static str,
    /// What is appended to its value unless it ends with it already (`/v1`, `/openai/v1`).
    pub suffix: &'static str,
    /// The port of a value given without a scheme and port (Ollama's `OLLAMA_HOST=0.0.0.0` means port 11434).
    pub bare_port: Option<u16>,
}

/// A service reached by name in a model spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct NamedProvider {
    /// The spec's prefix (`ollama` in `ollama:qwen3`).
    pub name: &'static str,
    /// The wire format it speaks.
    #[serde(serialize_with = "api_name")]
    pub api: Api,
    /// Its base URL when neither the environment nor the configuration gives one (`None`: it must be given,
    /// as Azure's resource endpoint must).
    pub base_url: Option<&'static str>,
    /// The environment variable that gives the base URL, over [`NamedProvider::base_url`].
    pub base_url_env: Option<BaseUrlEnv>,
    /// The environment variable of the API key (`None`: a local server, which needs none).
    pub key_env: Option<&'static str>,
    /// The header that carries the key as it is, when it is not `Authorization: Bearer KEY`
    /// (Azure's `api-key`; Anthropic's `x-api-key` comes with its API).
    pub key_header: Option<&'static str>,
    /// A server on the user's own machine: `reins models` asks it which models it serves.
    pub local: bool,
    /// The name OpenTelemetry's `gen_ai.provider.name` gives the service.
    pub system: &'static str,
}

fn api_name<S: serde::Serializer>(api: &Api, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(api.name())
}

const fn hosted(name: &'static str, api: Api, base_url: &'static str, key_env: &'static str) -> NamedProvider {
    NamedProvider {
        name,
        api,
        base_url: Some(base_url),
        base_url_env: None,
        key_env: Some(key_env),
        key_header: None,
        local: false,
        system: name,
    }
}

const fn local(name: &'static str, base_url: &'static str) -> NamedProvider {
    NamedProvider {
        name,
        api: Api::OpenAiChat,
        base_url: Some(base_url),
        base_url_env: None,
        key_env: None,
        key_header: None,
        local: true,
        system: name,
    }
}

/// The table: every provider a model spec may name, with what each service documents.
pub const PROVIDERS: &[NamedProvider] = &[
    hosted("openai", Api::OpenAiResponses, "https://api.openai.com/v1", "OPENAI_API_KEY"),
    NamedProvider {
        system: "openai",
        ..hosted("openai-chat", Api::OpenAiChat, "https://api.openai.com/v1", "OPENAI_API_KEY")
    },
    NamedProvider {
        system: "anthropic",
        ..hosted("anthropic", Api::Anthropic, "https://api.anthropic.com", "ANTHROPIC_API_KEY")
    },
    // Gemini's own API; the key (GEMINI_API_KEY, else GOOGLE_API_KEY) goes in `x-goog-api-key`.
    NamedProvider {
        system: "gcp.gemini",
        ..hosted("gemini", Api::Gemini, "https://generativelanguage.googleapis.com", "GEMINI_API_KEY")
    },
    // Amazon Bedrock's Converse API: the model id (`anthropic.claude-…-v1:0`, an inference profile or an ARN) as
    // the model; a Bedrock API key (AWS_BEARER_TOKEN_BEDROCK) as a bearer, else SigV4 from the AWS variables; the
    // region's endpoint unless AWS_ENDPOINT_URL_BEDROCK_RUNTIME or the base URL gives one (see `bedrock`).
    NamedProvider {
        name: "bedrock",
        api: Api::Bedrock,
        base_url: None,
        base_url_env: Some(BaseUrlEnv { var: "AWS_ENDPOINT_URL_BEDROCK_RUNTIME", suffix: "", bare_port: None }),
        key_env: Some("AWS_BEARER_TOKEN_BEDROCK"),
        key_header: None,
        local: false,
        system: "aws.bedrock",
    },
    // The Azure OpenAI v1 API: `{endpoint}/openai/v1`, the deployment's name as the model, the key in `api-key`.
    NamedProvider {
        name: "azure",
        api: Api::OpenAiResponses,
        base_url: None,
        base_url_env: Some(BaseUrlEnv { var: "AZURE_OPENAI_ENDPOINT", suffix: "/openai/v1", bare_port: None }),
        key_env: Some("AZURE_OPENAI_API_KEY"),
        key_header: Some("api-key"),
        local: false,
        system: "azure.ai.openai",
    },
    hosted("openrouter", Api::OpenAiChat, "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    hosted("groq", Api::OpenAiChat, "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    hosted("together", Api::OpenAiChat, "https://api.together.xyz/v1", "TOGETHER_API_KEY"),
    hosted("deepseek", Api::OpenAiChat, "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    NamedProvider {
        system: "mistral_ai",
        ..hosted("mistral", Api::OpenAiChat, "https://api.mistral.ai/v1", "MISTRAL_API_KEY")
    },
    NamedProvider { system: "x_ai", ..hosted("xai", Api::OpenAiChat, "https://api.x.ai/v1", "XAI_API_KEY") },
    NamedProvider {
        base_url_env: Some(BaseUrlEnv { var: "OLLAMA_HOST", suffix: "/v1", bare_port: Some(11434) }),
        ..local("ollama", "http://127.0.0.1:11434/v1")
    },
    local("lmstudio", "http://127.0.0.1:1234/v1"),
    local("llamacpp", "http://127.0.0.1:8080/v1"),
    local("vllm", "http://127.0.0.1:8000/v1"),
];

/// The provider a spec's prefix names (`ollama`), if any.
pub fn named_provider(name: &str) -> Option<&'static NamedProvider> {
    PROVIDERS.iter().find(|p| p.name == name)
}

/// Parses `PROVIDER:MODEL` with a provider of [`PROVIDERS`]: the provider and the model's name.
///
/// ```
/// let (p, model) = reins_providers::parse_named_spec("groq:llama-3.3-70b-versatile").unwrap();
/// assert_eq!((p.name, p.key_env, model.as_str()), ("groq", Some("GROQ_API_KEY"), "llama-3.3-70b-versatile"));
/// assert!(reins_providers::parse_named_spec("nowhere:m").is_err());
/// ```
pub fn parse_named_spec(spec: &str) -> Result<(&'static NamedProvider, String), ProviderError> {
    let Some((provider, model)) = spec.split_once(':') else {
        return Err(ProviderError::InvalidModelSpec(format!(
            "{spec:?} is not PROVIDER:MODEL (PROVIDER is one of {})",
            provider_names()
        )));
    };
    let Some(named) = named_provider(provider) else {
        return Err(ProviderError::InvalidModelSpec(format!(
            "unknown provider {provider:?} in {spec:?}: expected one of {}",
            provider_names()
        )));
    };
    if model.trim().is_empty() {
        return Err(ProviderError::InvalidModelSpec(format!("{spec:?} names no model after the colon")));
    }
    Ok((named, model.to_owned()))
}

/// The names of [`PROVIDERS`], comma-separated, for messages.
pub fn provider_names() -> String {
    PROVIDERS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

impl NamedProvider {
    /// The base URL: from [`NamedProvider::base_url_env`] when that variable is set, else the default.
    /// `Err` names the variable when there is neither.
    pub fn resolve_base_url(&self) -> Result<String, ProviderError> {
        let from_env =
            self.base_url_env.and_then(|e| std::env::var(e.var).ok().filter(|v| !v.trim().is_empty()).map(|v| (e, v)));
        match (from_env, self.base_url) {
            (Some((e, value)), _) => Ok(env_base_url(&e, &value)),
            (None, Some(url)) => Ok(url.to_owned()),
            (None, None) => {
                Err(ProviderError::MissingBaseUrl { provider: self.name, env: self.base_url_env.map_or("", |e| e.var) })
            }
        }
    }

    /// A builder for `model` on this service: its API, key variable and key header. The base URL is resolved
    /// when the provider is built, unless [`ProviderBuilder::base_url`] gives one.
    pub fn builder(&'static self, model: impl Into<String>) -> ProviderBuilder {
        Provider::builder(self.api, model).named(self)
    }
}

/// A base URL from an environment variable's value: a scheme added when there is none (`http`, and the
/// service's port when no port is given either), the suffix appended unless it is there.
fn env_base_url(e: &BaseUrlEnv, value: &str) -> String {
    let value = value.trim().trim_end_matches('/');
    let mut url = if value.contains("://") {
        value.to_owned()
    } else {
        let host = value.split('/').next().unwrap_or(value);
        // A port is given when the host part ends in `:digits` (an IPv6 address without brackets has none).
        let has_port = host.rsplit_once(':').is_some_and(|(h, p)| {
            !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && (!h.contains(':') || h.ends_with(']'))
        });
        match e.bare_port {
            Some(port) if !has_port => format!("http://{host}:{port}{}", &value[host.len()..]),
            _ => format!("http://{value}"),
        }
    };
    if !url.ends_with(e.suffix) {
        url.push_str(e.suffix);
    }
    url
}

/// The most of a `/models` answer read.
pub const MAX_MODELS_BYTES: usize = 1 << 20;

/// The models an OpenAI-compatible server serves (`GET {base_url}/models`, its `data[].id`), in its order.
/// Bounded: `timeout` for the whole exchange, [`MAX_MODELS_BYTES`] of body, no redirect followed.
pub async fn served_models(
    base_url: &str,
    api_key: Option<&str>,
    timeout: Duration,
) -> Result<Vec<String>, ProviderError> {
    let base = base_url.trim().trim_end_matches('/');
    let url = reqwest::Url::parse(&format!("{base}/models"))
        .map_err(|e| ProviderError::InvalidBaseUrl { url: base_url.to_owned(), reason: e.to_string() })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ProviderError::InvalidBaseUrl {
            url: base_url.to_owned(),
            reason: format!("the scheme must be http or https, not {}", url.scheme()),
        });
    }
    install_crypto_provider();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(timeout)
        .build()
        .map_err(|e| ProviderError::Client(error_chain(&e)))?;
    let fail = |what: String| ProviderError::Unreachable { url: url.to_string(), reason: what };
    let exchange = async {
        let mut req = client.get(url.clone()).header(reqwest::header::ACCEPT_ENCODING, "identity");
        if let Some(k) = api_key {
            req = req.bearer_auth(k.trim());
        }
        let mut resp = req.send().await.map_err(|e| fail(error_chain(&e)))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(fail(format!("HTTP {status}")));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| fail(error_chain(&e)))? {
            if body.len() + chunk.len() > MAX_MODELS_BYTES {
                return Err(fail(format!("the answer exceeds {MAX_MODELS_BYTES} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    let body = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| fail(format!("no answer within {}", humantime::format_duration(timeout))))??;
    let v: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| fail(format!("the answer is not JSON: {e}")))?;
    let Some(data) = v.get("data").and_then(serde_json::Value::as_array) else {
        return Err(fail("the answer has no `data` list".into()));
    };
    Ok(data.iter().filter_map(|m| m.get("id").and_then(serde_json::Value::as_str)).map(str::to_owned).collect())
}

/// The models of the price table a provider serves under their own names: OpenAI's for `openai`,
/// `openai-chat` and `azure` (a deployment is usually named after its model), Anthropic's for `anthropic`,
/// Google's for `gemini`; none for the others (a name whose last part is a table entry,
/// `openrouter:openai/gpt-4o`, is still priced).
pub fn known_models(provider: &NamedProvider) -> Vec<&'static crate::ModelInfo> {
    let anthropic = |i: &&crate::ModelInfo| i.prefix.starts_with("claude");
    let gemini = |i: &&crate::ModelInfo| i.prefix.starts_with("gemini");
    match provider.name {
        "openai" | "openai-chat" | "azure" => crate::MODELS.iter().filter(|i| !anthropic(i) && !gemini(i)).collect(),
        "anthropic" => crate::MODELS.iter().filter(anthropic).collect(),
        "gemini" => crate::MODELS.iter().filter(gemini).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_base_urls_get_a_scheme_a_port_and_the_suffix() {
        let ollama = BaseUrlEnv { var: "X", suffix: "/v1", bare_port: Some(11434) };
        assert_eq!(env_base_url(&ollama, "0.0.0.0"), "http://0.0.0.0:11434/v1");
        assert_eq!(env_base_url(&ollama, "gpu-box:9000"), "http://gpu-box:9000/v1");
        assert_eq!(env_base_url(&ollama, "[::1]:9000"), "http://[::1]:9000/v1");
        assert_eq!(env_base_url(&ollama, "https://ollama.example/"), "https://ollama.example/v1");
        assert_eq!(env_base_url(&ollama, "http://h:1/v1"), "http://h:1/v1");
        let azure = BaseUrlEnv { var: "Y", suffix: "/openai/v1", bare_port: None };
        assert_eq!(env_base_url(&azure, "https://res.openai.azure.com/"), "https://res.openai.azure.com/openai/v1");
        assert_eq!(
            env_base_url(&azure, "https://res.openai.azure.com/openai/v1"),
            "https://res.openai.azure.com/openai/v1"
        );
    }

    #[test]
    fn every_row_is_whole() {
        for p in PROVIDERS {
            assert!(p.base_url.is_some() || p.base_url_env.is_some(), "{}", p.name);
            assert_eq!(p.local, p.key_env.is_none(), "{}", p.name);
            assert_eq!(named_provider(p.name), Some(p));
            assert!(Api::parse_spec(&format!("{}:m", p.name)).is_ok(), "{}", p.name);
        }
        assert!(known_models(named_provider("anthropic").unwrap()).iter().all(|i| i.prefix.starts_with("claude")));
        assert!(!known_models(named_provider("openai").unwrap()).is_empty());
    }
}
