//! The agent of a command, as `reins-agent` resolves it: Reins' defaults, the user config
//! (`$XDG_CONFIG_HOME/reins/config.toml`) and its `--profile`, the agent recorded with a `--resume`d session,
//! the `--agent` file (alias `--config`), and the flags on top; and `reins config show`, which prints the
//! result with where each value came from.

use clap::{Args, Subcommand};
use reins_agent::{Origin, Resolved};

use crate::exit::CliError;
use crate::resolve::resolve;
use crate::run_args::RunArgs;

/// `reins config`.
#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Prints the agent `reins run` would build from the same flags (the user config, --profile, --agent FILE,
    /// --resume ID and every run flag), secrets masked, with where each value came from. As TOML that is itself
    /// an agent file, or with --json as one JSON object.
    Show(Box<RunArgs>),
}

/// `reins config ...`.
pub fn config(args: ConfigArgs) -> Result<u8, CliError> {
    match args.command {
        ConfigCommand::Show(args) => show(&args),
    }
}

fn show(args: &RunArgs) -> Result<u8, CliError> {
    let session = match &args.store.resume {
        Some(id) => Some(crate::store_open::recorded_agent(args.store.store.as_deref(), id)?),
        None => None,
    };
    let (resolved, _) = resolve(args, session.as_ref().map(|(id, def)| (id.as_str(), def.clone())))?;
    let derived = resolved.def.default_context_tokens();
    let api_key = resolved.def.api_key_env();
    let api_key = api_key.as_deref();
    if args.json {
        let v = serde_json::json!({
            "definition": resolved.def.shown().to_json(),
            "entries": resolved.entries(),
            "derived": { "context.max_context_tokens": derived },
            "api_key": api_key.map(|env| serde_json::json!({"env": env, "set": std::env::var_os(env).is_some_and(|v| !v.is_empty())})),
        });
        jsonln!("{}", serde_json::to_string_pretty(&v).map_err(|e| CliError::Internal(e.into()))?);
        return Ok(0);
    }
    out!("{}", render_toml(&resolved, derived, api_key));
    Ok(0)
}

fn bare_key(k: &str) -> String {
    if !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        k.to_owned()
    } else {
        serde_json::Value::from(k).to_string()
    }
}

/// `v` without its nulls (unset keys), which TOML cannot write.
fn without_nulls(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => {
            m.iter().filter(|(_, x)| !x.is_null()).map(|(k, x)| (k.clone(), without_nulls(x))).collect()
        }
        serde_json::Value::Array(a) => a.iter().map(without_nulls).collect(),
        other => other.clone(),
    }
}

fn toml_value(v: &serde_json::Value) -> String {
    match toml::Value::try_from(without_nulls(v)) {
        Ok(t) => t.to_string(),
        Err(_) => serde_json::Value::from(v.to_string()).to_string(),
    }
}

/// The resolved definition as TOML (an agent file), each value followed by its origin as a comment.
fn render_toml(resolved: &Resolved, derived: Option<u64>, api_key: Option<&str>) -> String {
    let mut out = String::from("# The resolved agent (secrets masked); each value's origin is in its comment.\n");
    if let Some(env) = api_key {
        let set = std::env::var_os(env).is_some_and(|v| !v.is_empty());
        out.push_str(&format!("# API key: from {env} ({})\n", if set { "set" } else { "not set" }));
    }
    if let Some(n) = derived {
        out.push_str(&format!(
            "# context budget: {n} tokens, from the model's known window less its response cap (default)\n"
        ));
    }
    let entries = resolved.entries();
    let comment = |o: &Origin| format!("  # {}", o.to_string().replace('\n', " "));
    let mut section = String::new();
    // Top-level keys first, then each table; presets and MCP servers as tables of their own.
    let mut order: Vec<&reins_agent::Entry> = entries.iter().filter(|e| !e.key.contains('.')).collect();
    order.extend(entries.iter().filter(|e| e.key.contains('.')));
    for e in order {
        let (table, key) = match e.key.split_once('.') {
            None => (String::new(), e.key.clone()),
            Some(("presets", _)) => {
                out.push_str(&format!("\n[[presets]]{}\n", comment(&e.origin)));
                if let Some(map) = e.value.as_object() {
                    for (k, v) in map {
                        out.push_str(&format!("{} = {}\n", bare_key(k), toml_value(v)));
                    }
                }
                section = "presets".into();
                continue;
            }
            Some(("mcp", name)) => {
                out.push_str(&format!("\n[mcp.{}]{}\n", bare_key(name), comment(&e.origin)));
                if let Some(map) = e.value.as_object() {
                    for (k, v) in map {
                        out.push_str(&format!("{} = {}\n", bare_key(k), toml_value(v)));
                    }
                }
                section = "mcp".into();
                continue;
            }
            Some((table, rest)) => {
                let key = rest.split('.').map(bare_key).collect::<Vec<_>>().join(".");
                (table.to_owned(), key)
            }
        };
        if table != section {
            out.push_str(&format!("\n[{table}]\n"));
            section = table;
        }
        out.push_str(&format!("{key} = {}{}\n", toml_value(&e.value), comment(&e.origin)));
    }
    out
}
