//! The agent of a command, as `reins-agent` resolves it: Reins' defaults, the user config
//! (`$XDG_CONFIG_HOME/reins/config.toml`) and its `--profile`, the agent recorded with a `--resume`d session,
//! the `--agent` file (alias `--config`), `-c KEY=VALUE` and the flags on top; and definition and build errors
//! as a command reports them.

use reins_agent::{AgentDef, DefError, Dur, Layer, McpServerDef, Origin, Positive, Resolved, SandboxMode};

use crate::exit::{CliError, usage};
use crate::run_args::RunArgs;

/// A definition error as a bad-input error.
pub fn def_err(e: DefError) -> CliError {
    usage(e.to_string())
}

/// A build error of the agent as the command reports it (exit 2 for bad input, 1 otherwise).
pub fn build_err(e: reins_agent::BuildError) -> CliError {
    match e {
        reins_agent::BuildError::MissingApiKey { model, env } => {
            usage(format!("--model {model} needs an API key: set {env} (or point --base-url at a local server)"))
        }
        e if e.is_bad_input() => usage(e.to_string()),
        e => CliError::Internal(anyhow::anyhow!(e)),
    }
}

fn positive(n: Option<u64>) -> Option<Positive> {
    n.and_then(Positive::new)
}

/// The models of `--fallback-model`, in order (a script path relative to the current directory).
fn fallback_flags(args: &RunArgs) -> Result<Vec<reins_agent::ModelSpec>, CliError> {
    let here = reins_agent::absolute(std::path::Path::new("."));
    let mut out = Vec::new();
    for spec in &args.fallback_models {
        let m: reins_agent::ModelSpec = spec.parse().map_err(|e| usage(format!("--fallback-model {spec:?}: {e}")))?;
        let mut d = AgentDef { model: Some(m), ..AgentDef::default() };
        d.resolve_paths(&here);
        out.extend(d.model);
    }
    Ok(out)
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
    layers.extend(crate::resolve::override_layers(&args.overrides)?);
    let mut flags = flags_layer(args)?;
    if !args.fallback_models.is_empty() {
        let beneath = || reins_agent::resolve(&layers).map(|r| r.def.model).map_err(def_err);
        let base = match flags.model.clone() {
            Some(m) => m,
            None => {
                beneath()?.ok_or_else(|| usage("--fallback-model needs a model: --model or the agent's `model`"))?
            }
        };
        flags.model = Some(base.with_fallbacks(fallback_flags(args)?));
    }
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
        use reins_providers::Api;
        let budgets = matches!(after, ModelKind::Provider(Api::Anthropic | Api::Gemini | Api::Bedrock));
        if !budgets && p.thinking_budget.take().is_some() {
            dropped.push("provider.thinking_budget".to_owned());
        }
        let thinks_by_budget = matches!(after, ModelKind::Provider(Api::Anthropic | Api::Bedrock));
        if thinks_by_budget && p.reasoning_effort.take().is_some() {
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

/// The layers `-c KEY=VALUE` make, in order (a later one overrides an earlier one): each parsed alone by the
/// agent-file parser, so an unknown key or a bad value is refused naming it.
pub fn override_layers(overrides: &[String]) -> Result<Vec<reins_agent::Layer>, CliError> {
    overrides
        .iter()
        .map(|o| {
            let text = override_toml(o).map_err(|why| usage(format!("-c {o}: {why}")))?;
            let base = reins_agent::absolute(std::path::Path::new("."));
            let def = reins_agent::AgentDef::from_toml(&text, &base).map_err(|e| usage(format!("-c {o}: {e}")))?;
            Ok(reins_agent::Layer::new(reins_agent::Origin::Flag, def))
        })
        .collect()
}

/// `KEY=VALUE` as one line of TOML with a dotted key: the value as written when it is one TOML value, else as a
/// string.
fn override_toml(o: &str) -> Result<String, String> {
    let Some((key, value)) = o.split_once('=') else { return Err("expected KEY=VALUE".to_owned()) };
    let key = key.trim();
    if key.is_empty() {
        return Err("the key is empty".to_owned());
    }
    let mut parts = Vec::new();
    for part in key.split('.') {
        let part = part.trim();
        if part.is_empty() {
            return Err(format!("{key:?} has an empty part"));
        }
        if part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            parts.push(part.to_owned());
        } else {
            parts.push(serde_json::to_string(part).map_err(|e| e.to_string())?);
        }
    }
    let key = parts.join(".");
    let value = value.trim();
    let as_toml = !value.is_empty()
        && !value.contains(['\n', '\r'])
        && toml::from_str::<toml::Table>(&format!("v = {value}")).is_ok_and(|t| t.len() == 1);
    let value = if as_toml { value.to_owned() } else { serde_json::to_string(value).map_err(|e| e.to_string())? };
    Ok(format!("{key} = {value}\n"))
}
