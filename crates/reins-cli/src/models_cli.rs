//! `reins models [PROVIDER]`: the providers a model spec may name (their API, base URL and key variable), the
//! models of the price table with their context window, output cap and prices, and for a local server
//! (`ollama`, `lmstudio`, `llamacpp`, `vllm`) the models it serves (`GET {base}/models`, bounded).

use std::time::Duration;

use clap::Args;
use reins_providers::{ModelInfo, NamedProvider};
use serde_json::{Value, json};

use crate::exit::{CliError, usage};

/// How long a local server may take to list its models.
const SERVED_TIMEOUT: Duration = Duration::from_secs(10);

/// `reins models`.
#[derive(Args, Debug)]
pub struct ModelsArgs {
    /// A provider (openai, anthropic, ollama, groq, azure, ...): its row, its known models and, for a local
    /// server, the models it serves. Without one: every provider and every model of the price table.
    #[arg(value_name = "PROVIDER")]
    provider: Option<String>,
    /// The server to ask, over the provider's own address (OLLAMA_HOST, the default port).
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// One JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// Whether the key variable holds a key (`GEMINI_API_KEY` also when `GOOGLE_API_KEY` stands in for it).
fn key_set(env: &str) -> bool {
    reins_providers::env_key(env).is_some()
}

fn provider_json(p: &NamedProvider) -> Value {
    json!({
        "name": p.name,
        "api": p.api.name(),
        "base_url": p.resolve_base_url().ok(),
        "base_url_env": p.base_url_env.map(|e| e.var),
        "key_env": p.key_env,
        "key_set": p.key_env.map(key_set),
        "local": p.local,
    })
}

fn model_json(name: &str, i: Option<&ModelInfo>) -> Value {
    match i {
        Some(i) => json!({
            "model": name,
            "context_window": i.context_window,
            "max_output_tokens": i.max_output_tokens,
            "price_per_mtok": {
                "input": i.price.input_per_mtok,
                "cached_input": i.price.cache_read(),
                "cache_write": i.price.cache_write(),
                "output": i.price.output_per_mtok,
            },
        }),
        None => json!({ "model": name }),
    }
}

fn provider_line(p: &NamedProvider) -> String {
    // The address in use (the variable's, else the default), and the variable that sets it.
    let mut base = match p.resolve_base_url() {
        Ok(url) => reins::secrets::redact_url(&url).into_owned(),
        Err(_) => String::new(),
    };
    if let Some(e) = p.base_url_env {
        let var = format!("${}{}", e.var, e.suffix);
        base = if base.is_empty() { var } else { format!("{base} ({var})") };
    }
    let key = match p.key_env {
        Some(env) => format!("{env} ({})", if key_set(env) { "set" } else { "not set" }),
        None => "no key (local)".to_owned(),
    };
    format!("{:<12} {:<12} {:<52} {key}", p.name, p.api.name(), base)
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn model_line(name: &str, i: Option<&ModelInfo>) -> String {
    match i {
        Some(i) => format!(
            "{name:<28} {:>9} {:>9}   ${:<7} ${:<7} ${}",
            thousands(i.context_window),
            thousands(i.max_output_tokens),
            i.price.input_per_mtok,
            i.price.cache_read(),
            i.price.output_per_mtok
        ),
        None => format!("{name:<28} {:>9} {:>9}   (not in the price table)", "?", "?"),
    }
}

const MODEL_HEADER: &str =
    "model                          context    output   input    cached   output (US$ per million tokens)";

/// `reins models ...`.
pub async fn models(args: ModelsArgs) -> Result<u8, CliError> {
    let Some(name) = args.provider.as_deref() else {
        if args.base_url.is_some() {
            return Err(usage("--base-url needs a PROVIDER (reins models ollama --base-url URL)"));
        }
        let all: Vec<(&str, &ModelInfo)> = reins_providers::MODELS.iter().map(|i| (i.prefix, i)).collect();
        if args.json {
            let v = json!({
                "providers": reins_providers::PROVIDERS.iter().map(provider_json).collect::<Vec<_>>(),
                "models": all.iter().map(|(n, i)| model_json(n, Some(i))).collect::<Vec<_>>(),
            });
            jsonln!("{}", serde_json::to_string_pretty(&v).map_err(|e| CliError::Internal(e.into()))?);
            return Ok(0);
        }
        outln!("Providers (--model PROVIDER:MODEL; [provider] base_url and api_key_env override these):");
        outln!("{:<12} {:<12} {:<52} key", "provider", "api", "base URL");
        for p in reins_providers::PROVIDERS {
            outln!("{}", provider_line(p));
        }
        outln!();
        outln!("Models of the price table (a dated or vendor/ name matches by prefix):");
        outln!("{MODEL_HEADER}");
        for (n, i) in &all {
            outln!("{}", model_line(n, Some(i)));
        }
        return Ok(0);
    };
    let Some(p) = reins_providers::named_provider(name) else {
        return Err(usage(format!("unknown provider {name:?}: expected one of {}", reins_providers::provider_names())));
    };
    let known: Vec<(&str, &ModelInfo)> = reins_providers::known_models(p).into_iter().map(|i| (i.prefix, i)).collect();
    let mut served = None;
    if p.local || args.base_url.is_some() {
        let base = match &args.base_url {
            Some(url) => url.clone(),
            None => p.resolve_base_url().map_err(|e| usage(e.to_string()))?,
        };
        let key = p.key_env.and_then(|env| std::env::var(env).ok()).filter(|k| !k.trim().is_empty());
        let list = reins_providers::served_models(&base, key.as_deref(), SERVED_TIMEOUT).await.map_err(|e| {
            let hint = if p.local { format!(" (is {} running?)", p.name) } else { String::new() };
            CliError::Internal(anyhow::anyhow!("{}{hint}", reins::secrets::redact_url(&e.to_string())))
        })?;
        served = Some((reins::secrets::redact_url(&base).into_owned(), list));
    }
    if args.json {
        let v = json!({
            "provider": provider_json(p),
            "models": known.iter().map(|(n, i)| model_json(n, Some(i))).collect::<Vec<_>>(),
            "served": served.as_ref().map(|(_, list)| list.iter().map(|m| model_json(m, reins_providers::model_info(m))).collect::<Vec<_>>()),
        });
        jsonln!("{}", serde_json::to_string_pretty(&v).map_err(|e| CliError::Internal(e.into()))?);
        return Ok(0);
    }
    outln!("{:<12} {:<12} {:<52} key", "provider", "api", "base URL");
    outln!("{}", provider_line(p));
    outln!();
    if let Some((base, list)) = &served {
        outln!(
            "Served by {base} ({} model{}; use --model {}:NAME):",
            list.len(),
            if list.len() == 1 { "" } else { "s" },
            p.name
        );
        outln!("{MODEL_HEADER}");
        for m in list {
            outln!("{}", model_line(m, reins_providers::model_info(m)));
        }
    } else if known.is_empty() {
        outln!(
            "The price table has no models of {} by their own names: any model the service serves works as {}:NAME, \
             and one whose last part after a slash is in the table (openai/gpt-4o) is priced by it.",
            p.name,
            p.name
        );
    } else {
        outln!("Models of the price table (--model {}:NAME; a dated name matches by prefix):", p.name);
        outln!("{MODEL_HEADER}");
        for (n, i) in &known {
            outln!("{}", model_line(n, Some(i)));
        }
    }
    Ok(0)
}
