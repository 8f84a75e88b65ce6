//! The agent of a command, as `reins-agent` resolves it: Reins' defaults, the user config
//! (`$XDG_CONFIG_HOME/reins/config.toml`) and its `--profile`, the agent recorded with a `--resume`d session,
//! the `--agent` file (alias `--config`), and the flags on top; and `reins config show`, which prints the
//! result with where each value came from.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use reins_agent::{AgentDef, DefError, Dur, Layer, McpServerDef, Origin, Positive, Resolved, SandboxMode};

use crate::exit::{CliError, usage};
use crate::run::RunArgs;

/// The agent-file flags.
#[derive(Args, Debug, Default, Clone)]
pub struct AgentFileFlags {
    /// An agent file (TOML): model, instructions, [provider], [limits], [context], [workspace], [commands],
    /// [[presets]], [mcp.NAME] (docs/src/agent-file.md). Its relative paths are relative to it; every flag overrides
    /// it.
    #[arg(long = "agent", visible_alias = "config", value_name = "FILE")]
    pub agent: Option<PathBuf>,
    /// Picks the [profiles.NAME] table of the user config ($XDG_CONFIG_HOME/reins/config.toml, else
    /// ~/.config/reins/config.toml), over its top-level defaults and beneath the agent file.
    #[arg(long, short = 'p', value_name = "NAME")]
    pub profile: Option<String>,
}

/// A definition error as a bad-input error.
pub fn def_err(e: DefError) -> CliError {
    usage(e.to_string())
}

fn positive(n: Option<u64>) -> Option<Positive> {
    n.and_then(Positive::new)
}

/// The layer the flags of `reins run` make: only what was given.
pub fn flags_layer(args: &RunArgs) -> Result<AgentDef, CliError> {
    let mut d = AgentDef::default();
    if let Some(spec) = &args.model {
        let model: reins_agent::ModelSpec = spec.parse().map_err(|e| usage(format!("--model {spec:?}: {e}")))?;
        d.model = Some(model);
        // A script path on the command line is relative to the current directory.
        d.resolve_paths(&reins_agent::absolute(std::path::Path::new(".")));
    }
    if args.test_tools {
        d.test_tools = Some(true);
    }
    d.limits.max_steps = positive(args.max_steps);
    d.limits.max_tool_calls = args.max_tool_calls.map(reins_agent::Count);
    d.limits.max_input_tokens = args.max_input_tokens.map(reins_agent::Count);
    d.limits.max_output_tokens = args.max_output_tokens.map(reins_agent::Count);
    d.limits.max_total_tokens = args.max_total_tokens.map(reins_agent::Count);
    d.limits.max_cost_usd = args.max_cost_usd;
    d.limits.timeout = args.timeout.map(Dur);
    d.limits.tool_timeout = args.tool_timeout.map(Dur);
    d.context.max_context_chars = positive(args.max_context_chars);
    d.context.max_context_tokens = positive(args.max_context_tokens);
    d.context.max_tool_result_chars = positive(args.max_tool_result_chars);
    d.context.strategy = args.context_strategy;
    d.approve = args.approve;
    d.context.compact_at = args.compact_at;
    if let Some(spec) = &args.compact_model {
        let model: reins_agent::ModelSpec =
            spec.parse().map_err(|e| usage(format!("--compact-model {spec:?}: {e}")))?;
        d.context.compact_model = Some(model);
        d.resolve_paths(&reins_agent::absolute(std::path::Path::new(".")));
    }
    let tools = &args.tools;
    d.workspace.path = tools.workspace.as_deref().map(reins_agent::absolute);
    if tools.read_only {
        d.workspace.read_only = Some(true);
    }
    for spec in &tools.presets {
        let preset = reins_agent::parse_preset(spec).map_err(usage)?;
        d.presets.retain(|p| p.name != preset.name);
        d.presets.push(preset);
    }
    d.commands.timeout = tools.command_timeout.map(Dur);
    if tools.no_sandbox {
        d.commands.sandbox = Some(SandboxMode::Off);
    }
    for spec in &args.mcp.servers {
        let (name, server) = McpServerDef::from_spec(spec).map_err(|e| usage(format!("--mcp: {e}")))?;
        d.mcp.insert(name, server);
    }
    let i = &args.instructions;
    d.instructions = i.instructions.clone();
    if let Some(path) = &i.instructions_file {
        // Read here too, so that a bad file is named by its flag (the agent reads it again when it is built).
        reins_agent::read_bounded(path, crate::instructions_cli::MAX_PROMPT_BYTES)
            .map_err(|e| usage(format!("--instructions-file {}: {e}", path.display())))?;
        d.instructions_file = Some(reins_agent::absolute(path));
    }
    if i.no_agents_md {
        d.workspace.agents_md = Some(false);
    }
    crate::media_cli::apply(&args.media, &mut d)?;
    d.provider.base_url = args.provider.base_url.clone();
    d.provider.max_response_tokens = args.provider.max_response_tokens.and_then(|n| Positive::new(n.into()));
    d.provider.temperature = args.provider.temperature;
    d.provider.reasoning_effort = match args.provider.reasoning_effort {
        Some(crate::providers_cli::Effort::Set(e)) => Some(e),
        _ => None,
    };
    d.provider.thinking_budget = args.provider.thinking_budget.and_then(|n| Positive::new(n.into()));
    if args.provider.no_prompt_cache {
        d.provider.prompt_cache = Some(false);
    }
    d.validate().map_err(|e| usage(flag_message(e)))?;
    Ok(d)
}

/// A flag's error, named by the flag.
fn flag_message(e: DefError) -> String {
    let flag = e.path.as_deref().map(|p| {
        let key = p.rsplit('.').next().unwrap_or(p);
        match key {
            "base_url" => "--base-url".to_owned(),
            "max_response_tokens" => "--max-response-tokens".to_owned(),
            other => format!("--{}", other.replace('_', "-")),
        }
    });
    match flag {
        Some(f) => format!("{f}: {}", e.message),
        None => e.message,
    }
}

/// The agent a `reins run` (or `reins config show`) gets: its layers resolved, `session` (for `--resume`) as the
/// layer beneath the agent file. `--accept-weaker-sandbox` turns a required sandbox into best effort, whichever
/// layer asked for it.
pub fn resolve(args: &RunArgs, session: Option<(&str, AgentDef)>) -> Result<(Resolved, Option<Resolved>), CliError> {
    let user = match reins_agent::user_config_path() {
        Some(path) => Some(reins_agent::UserConfig::read(&path).map_err(def_err)?),
        None => None,
    };
    let user_layers = |profile: Option<&str>| -> Result<Vec<Layer>, CliError> {
        match &user {
            Some(u) => u.layers(profile).map_err(def_err),
            None if profile.is_some() => Err(usage(format!(
                "--profile {}: there is no user config (neither XDG_CONFIG_HOME nor HOME is set)",
                profile.unwrap_or_default()
            ))),
            None => Ok(Vec::new()),
        }
    };
    let mut layers = Vec::new();
    let mut recorded = None;
    let resumed = session.as_ref().map(|(id, def)| ((*id).to_owned(), def.model.clone()));
    match session {
        // A resumed session's recorded agent is whole (the user config it was built with included): the user
        // config of today does not change it; an explicit --profile overrides it like a flag.
        Some((id, def)) => {
            layers.push(Layer::new(Origin::Session { id: id.to_owned() }, def));
            recorded = Some(reins_agent::resolve(&layers).map_err(def_err)?);
            if let Some(name) = &args.agent_file.profile {
                layers.extend(user_layers(Some(name))?.into_iter().skip(1));
            }
        }
        None => layers.extend(user_layers(args.agent_file.profile.as_deref())?),
    }
    if let Some(path) = &args.agent_file.agent {
        layers.push(reins_agent::agent_file_layer(path).map_err(def_err)?);
    }
    layers.extend(crate::run::override_layers(&args.overrides)?);
    let mut flags = flags_layer(args)?;
    layers.push(Layer::new(Origin::Flag, flags.clone()));
    let mut resolved = reins_agent::resolve(&layers).map_err(def_err)?;
    if let Some((id, Some(was))) = &resumed {
        if let Some(dropped) = leave_other_api(&mut layers[0].def, was, resolved.def.model.as_ref()) {
            errln!("reins: resuming session {id} on {dropped}");
            recorded = Some(reins_agent::resolve(&layers[..1]).map_err(def_err)?);
            resolved = reins_agent::resolve(&layers).map_err(def_err)?;
        }
    }
    // `--thinking-budget 0` and `--reasoning-effort none` clear what any layer beneath set.
    let clear_budget = args.provider.thinking_budget == Some(0);
    let clear_effort = args.provider.reasoning_effort == Some(crate::providers_cli::Effort::None);
    if clear_budget || clear_effort {
        for layer in &mut layers {
            if clear_budget {
                layer.def.provider.thinking_budget = None;
            }
            if clear_effort {
                layer.def.provider.reasoning_effort = None;
            }
        }
        resolved = reins_agent::resolve(&layers).map_err(def_err)?;
    }
    if args.tools.accept_weaker_sandbox && matches!(resolved.def.commands.sandbox, None | Some(SandboxMode::Required)) {
        flags.commands.sandbox = Some(SandboxMode::BestEffort);
        if let Some(last) = layers.last_mut() {
            *last = Layer::new(Origin::Flag, flags);
        }
        resolved = reins_agent::resolve(&layers).map_err(def_err)?;
    }
    Ok((resolved, recorded))
}

/// When a resume moves a session to a model of another API than the one it recorded (`was`), the recorded
/// `[provider]` settings that belong to another API no longer apply: a thinking budget (Anthropic's) on an
/// OpenAI API, a reasoning effort (OpenAI's) on Anthropic, and for a script model every setting but `price`.
/// Takes them out of the recorded layer `def` and says which, in a few words; `None` when nothing changed.
fn leave_other_api(
    def: &mut AgentDef,
    was: &reins_agent::ModelSpec,
    now: Option<&reins_agent::ModelSpec>,
) -> Option<String> {
    use reins_agent::ModelKind;
    let now = now?;
    let (before, after) = (was.kind().0, now.kind().0);
    if before == after {
        return None;
    }
    let api = |k: ModelKind| match k {
        ModelKind::Script => "script:".to_owned(),
        ModelKind::Provider(api) => format!("{}:", api.name()),
    };
    let p = &mut def.provider;
    let mut dropped = Vec::new();
    if after == ModelKind::Script {
        let kept = reins_agent::ProviderDef { price: p.price, ..Default::default() };
        if *p != kept {
            let json = |v: &reins_agent::ProviderDef| serde_json::to_value(v).unwrap_or_default();
            let (all, kept_json) = (json(p), json(&kept));
            if let Some(keys) = all.as_object() {
                dropped.extend(
                    keys.keys().filter(|k| kept_json.get(k.as_str()).is_none()).map(|k| format!("provider.{k}")),
                );
            }
            *p = kept;
        }
    } else {
        if after != ModelKind::Provider(reins_providers::Api::Anthropic) && p.thinking_budget.take().is_some() {
            dropped.push("provider.thinking_budget".to_owned());
        }
        if after == ModelKind::Provider(reins_providers::Api::Anthropic) && p.reasoning_effort.take().is_some() {
            dropped.push("provider.reasoning_effort".to_owned());
        }
    }
    if dropped.is_empty() {
        return None;
    }
    Some(format!(
        "{} (it was recorded on {}): the recorded {} {} to {} and no longer {}",
        api(after),
        api(before),
        dropped.join(", "),
        if dropped.len() == 1 { "belongs" } else { "belong" },
        api(before),
        if dropped.len() == 1 { "applies" } else { "apply" },
    ))
}

/// On `--resume`: says on stderr which recorded settings the flags, a profile or the agent file changed.
pub fn report_overrides(id: &str, recorded: &Resolved, now: &Resolved) {
    let before: std::collections::BTreeMap<String, serde_json::Value> =
        recorded.entries().into_iter().map(|e| (e.key, e.value)).collect();
    let now_entries = now.entries();
    let mut changed = Vec::new();
    for e in &now_entries {
        let overriding = !matches!(e.origin, Origin::Session { .. } | Origin::Default);
        if overriding && before.get(&e.key) != Some(&e.value) {
            let was = before.get(&e.key).map_or_else(|| "unset".to_owned(), ToString::to_string);
            changed.push(format!("{} = {} (was {was})", e.key, e.value));
        }
    }
    for key in before.keys() {
        if !now_entries.iter().any(|e| &e.key == key) {
            changed.push(format!("{key} unset"));
        }
    }
    if !changed.is_empty() {
        errln!(
            "reins: resuming session {id}: {} override the agent recorded with it: {}",
            if changed.len() == 1 { "this setting" } else { "these settings" },
            changed.join("; ")
        );
    }
}

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
        Some(id) => Some(crate::sessions_cli::recorded_agent(args.store.store.as_deref(), id)?),
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
