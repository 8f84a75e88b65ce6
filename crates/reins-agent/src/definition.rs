//! The agent definition: [`AgentDef`] and its tables, in the TOML form of an agent file (the same shape in
//! JSON, as sessions record it). Every key is optional, so one type serves a whole agent and a layer of one
//! (a user config, a profile, the flags); [`AgentDef::validate`] checks what the types cannot (keys that
//! exclude each other, MCP tables, duplicate presets), [`AgentDef::resolve_paths`] makes the paths of a
//! file relative to the file, and [`AgentDef::redacted`] masks its secrets.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use reins_tools::{Preset, ResourceLimits, SandboxMode};
use serde::{Deserialize, Serialize};

use crate::error::DefError;
use crate::value::{Count, Dur, ModelKind, ModelSpec, Positive, PriceDef, Temperature, ToolChoiceSpec, Usd};

/// What a secret value is replaced with wherever a definition is shown or recorded (the core's marker,
/// also what secrets echoed by a server are masked with).
pub const REDACTED: &str = reins::REDACTED;

/// The default of `limits.max_steps`.
pub const DEFAULT_MAX_STEPS: u64 = 50;
/// The default of `context.max_tool_result_chars`.
pub const DEFAULT_MAX_TOOL_RESULT_CHARS: u64 = 32_000;

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// A whole agent: its model, instructions, tools, limits and context rules.
///
/// ```
/// let def = reins_agent::AgentDef::from_toml(r#"
///     model = "script:turns.json"
///     [limits]
///     max_steps = 10
/// "#, std::path::Path::new("/agents")).unwrap();
/// assert_eq!(def.model.as_ref().unwrap().as_str(), "script:/agents/turns.json");
/// assert_eq!(def.limits.max_steps.unwrap().get(), 10);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentDef {
    /// The model: `script:FILE`, `openai:MODEL`, `openai-chat:MODEL` or `anthropic:MODEL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSpec>,
    /// With a list of models: how long a model that failed is skipped before it is asked again (default 60s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_cooldown: Option<crate::value::Dur>,
    /// The instructions (system prompt), after the built-in workspace preamble and AGENTS.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// A file holding the instructions (relative to the agent file); excludes `instructions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_file: Option<PathBuf>,
    /// Adds the test tools `echo` and `fail`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_tools: Option<bool>,
    /// Puts prompts, messages, arguments and results into the runs' OpenTelemetry spans (default false;
    /// `reins run --events-content` also does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_content: Option<bool>,
    /// The JSON Schema the final answer must match: a JSON file (relative to the agent file) or an inline
    /// table. The model answers through the `final_answer` tool; the outcome's `output` holds the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<crate::output::OutputSchemaDef>,
    /// `[provider]`: settings of a real model's adapter.
    #[serde(default, skip_serializing_if = "is_default")]
    pub provider: ProviderDef,
    /// `[limits]`: the run's budget.
    #[serde(default, skip_serializing_if = "is_default")]
    pub limits: LimitsDef,
    /// `[context]`: what the model is sent.
    #[serde(default, skip_serializing_if = "is_default")]
    pub context: ContextDef,
    /// `[workspace]`: the file tools' root.
    #[serde(default, skip_serializing_if = "is_default")]
    pub workspace: WorkspaceDef,
    /// `[commands]`: defaults of every preset.
    #[serde(default, skip_serializing_if = "is_default")]
    pub commands: CommandsDef,
    /// `[[presets]]`: the commands the model may run by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub presets: Vec<Preset>,
    /// `[mcp.NAME]`: MCP servers whose tools the model gets as `NAME__TOOL`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp: BTreeMap<String, McpServerDef>,
    /// Which calls wait for a person's decision: `never` (default), `writes` or `all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve: Option<crate::approve::ApproveMode>,
    /// `[[hooks]]`: command hooks before and after tool calls and at the final answer, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<crate::approve::HookDef>,
    /// What the agent does, for the model of a parent it serves as a sub-agent (the tool's description).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `[agents.NAME]`: sub-agents, each an agent of its own (the same keys; `model` and `[provider]`
    /// inherited, see [`AgentDef::sub_agent`]) offered to this one as the tool `NAME` taking
    /// `{"task": string}`. One level: a sub-agent has no sub-agents.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agents: BTreeMap<String, AgentDef>,
}

/// `[provider]`: what a real model's adapter is told. Only `price` applies to a `script:` model too.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderDef {
    /// Another server: for OpenAI-style APIs a URL ending in `/v1`, for Anthropic the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The environment variable holding the API key, over the provider's own (`OPENAI_API_KEY`,
    /// `GROQ_API_KEY`, ...): a gateway's key, a second account's. The key itself is never in a definition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Caps each model response (output tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_tokens: Option<Positive>,
    /// The sampling temperature, 0 to 2 (OpenAI-style APIs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Temperature>,
    /// `"auto"` (default), `"required"`, `"none"` or `"tool:NAME"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoiceSpec>,
    /// OpenAI reasoning models: `"low"`, `"medium"` or `"high"` (Responses `reasoning.effort`, Chat
    /// Completions `reasoning_effort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<reins_providers::ReasoningEffort>,
    /// Anthropic extended thinking within this many tokens (at least 1024, below the response cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_budget: Option<Positive>,
    /// Asks for streamed responses (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Asks for prompt caching (default true): Anthropic `cache_control` breakpoints, the Responses API's
    /// `prompt_cache_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<bool>,
    /// Extra HTTP headers sent with every request. Their values are secrets: masked when shown, never recorded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Extra top-level fields merged into every request body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_body: Option<serde_json::Map<String, serde_json::Value>>,
    /// For Chat Completions: the field that carries the output cap (`max_tokens`, `max_completion_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_max_tokens_field: Option<String>,
    /// The longest silence within a response (default 120s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<Dur>,
    /// The longest wait for a response's headers (default 600s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_timeout: Option<Dur>,
    /// The longest one attempt may take, however the server trickles its answer (default 30m): past it, a
    /// response that delivered no content is stalled (retried), one still delivering fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_deadline: Option<Dur>,
    /// The longest wait for a connection (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<Dur>,
    /// The largest response body or stream accepted, in bytes (default 64 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<Positive>,
    /// Retries after the first attempt (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<Count>,
    /// The first backoff (default 500ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_backoff: Option<Dur>,
    /// The longest backoff (default 20s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_backoff: Option<Dur>,
    /// The longest `Retry-After` honoured before a call gives up (default 120s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retry_after: Option<Dur>,
    /// Client-side limit on requests per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<Positive>,
    /// Client-side limit on requests in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_requests: Option<Positive>,
    /// What the model's tokens cost (US dollars per million tokens): over the list price of a known model;
    /// a script model's cost and `limits.max_cost_usd` need it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<PriceDef>,
}

/// `[limits]`: every `--max-*` flag, `timeout` and `tool_timeout`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsDef {
    /// The most model responses (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<Positive>,
    /// The most tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<Count>,
    /// The most input tokens over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input_tokens: Option<Count>,
    /// The most output tokens over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<Count>,
    /// The most input plus output tokens over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_total_tokens: Option<Count>,
    /// The most the run may cost, in US dollars (the model's price must be known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<Usd>,
    /// The wall-clock deadline of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
    /// The longest one tool call may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout: Option<Dur>,
}

/// `[context]`: the context budget (characters or tokens, not both), the cut of each tool result, and what
/// happens when the context fills up.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextDef {
    /// The budget in characters (Unicode scalar values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_context_chars: Option<Positive>,
    /// The budget in tokens (o200k_base).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_context_tokens: Option<Positive>,
    /// Each tool result is cut to this many characters before it is recorded (default 32000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_result_chars: Option<Positive>,
    /// `drop` or `summarize` (default: `summarize` for a real model of known window, else `drop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<reins::ContextStrategy>,
    /// Under `summarize`, the share of the budget past which the oldest groups are compacted (default 0.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_at: Option<crate::value::Share>,
    /// Under `summarize`, the model that writes the summaries (default: the run's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_model: Option<crate::value::ModelSpec>,
    /// Under `summarize`, the instructions of a summary call (default: the built-in summary prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_prompt: Option<String>,
}

/// `[workspace]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceDef {
    /// The root (relative to the agent file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Protected-path globs: readable, never writable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected: Option<Vec<String>>,
    /// The most bytes `read_file` loads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_read_bytes: Option<Positive>,
    /// Whether the workspace's `AGENTS.md` is added to the instructions (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents_md: Option<bool>,
    /// Only the file tools that read (`read_file`, `list_dir`, `search`): no `write_file`, no `edit_file`
    /// (default false). Presets still add `run_command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
}

/// `[commands]`: defaults for every preset.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandsDef {
    /// The default command timeout (30s otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
    /// The output cap per stream, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_cap: Option<Positive>,
    /// `"required"` (default, fail closed), `"best-effort"` or `"off"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxMode>,
    /// Variables passed from the environment (secret-looking names still withheld unless a preset names them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_allow: Option<Vec<String>>,
    /// Default resource limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceLimits>,
}

/// `[mcp.NAME]`: one MCP server, either a child process (`command`, `args`, `env`, `cwd`) or a streamable
/// HTTP endpoint (`url`, `headers`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerDef {
    /// The program of a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Its environment variables: with the safe variables of Reins' own environment (`PATH`, `HOME`, ...; no
    /// API key), the whole of what it gets. Every value is masked when shown and never recorded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Its working directory (relative to the agent file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// The endpoint of an HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers sent to it. Their values are secrets: masked when shown, never recorded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The time allowed to start (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout: Option<Dur>,
    /// The time allowed for one call (default 2m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_timeout: Option<Dur>,
    /// `false` keeps the server's resources from the model (by default they are the tools
    /// `NAME__list_resources` and `NAME__read_resource`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<bool>,
    /// The protocol revision to speak with it (`"2026-07-28"`, `"2025-11-25"`, ...); by default chosen per
    /// server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// `true`: when nobody can be asked (no terminal), a form elicitation whose every required field has a
    /// default is accepted with the defaults (declined otherwise). By default it is declined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation_defaults: Option<bool>,
}

impl McpServerDef {
    /// Parses a command-line spec, `NAME=COMMAND ARG...` or `NAME=URL`, into its name and table.
    pub fn from_spec(spec: &str) -> Result<(String, McpServerDef), String> {
        let config = reins_mcp::ServerConfig::parse_spec(spec).map_err(|e| e.to_string())?;
        let def = match config.transport {
            reins_mcp::Transport::Stdio { command, args, env, cwd } => {
                McpServerDef { command: Some(command), args, env, cwd, ..McpServerDef::default() }
            }
            reins_mcp::Transport::Http { url, headers } => {
                McpServerDef { url: Some(url), headers, ..McpServerDef::default() }
            }
        };
        Ok((config.name, def))
    }

    /// The server configuration `reins-mcp` starts.
    pub fn to_config(&self, name: &str) -> Result<reins_mcp::ServerConfig, DefError> {
        let at = |m: String| DefError::at(format!("mcp.{name}"), m);
        let transport = match (&self.command, &self.url) {
            (Some(_), Some(_)) => return Err(at("a server has `command` or `url`, not both".into())),
            (None, None) => return Err(at("a server needs `command` (a child process) or `url` (HTTP)".into())),
            (Some(command), None) => {
                if !self.headers.is_empty() {
                    return Err(at("`headers` are for an HTTP server (`url`), not a `command`".into()));
                }
                reins_mcp::Transport::Stdio {
                    command: command.clone(),
                    args: self.args.clone(),
                    env: self.env.clone(),
                    cwd: self.cwd.clone(),
                }
            }
            (None, Some(url)) => {
                if !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some() {
                    return Err(at("`args`, `env` and `cwd` are for a `command`, not an HTTP server (`url`)".into()));
                }
                reins_mcp::Transport::Http { url: url.clone(), headers: self.headers.clone() }
            }
        };
        let mut config = reins_mcp::ServerConfig::new(name, transport).map_err(|e| at(e.0))?;
        if let Some(t) = self.startup_timeout {
            config = config.startup_timeout(t.0);
        }
        if let Some(t) = self.call_timeout {
            config = config.call_timeout(t.0);
        }
        if let Some(on) = self.resources {
            config = config.resources(on);
        }
        if let Some(revision) = &self.protocol {
            config = config.protocol(revision).map_err(|e| at(e.0))?;
        }
        if let Some(on) = self.elicitation_defaults {
            config = config.elicitation_defaults(on);
        }
        Ok(config)
    }
}

/// Parses a command-line preset, `NAME=PROGRAM ARG...` (words split as a shell would, never run by one).
pub fn parse_preset(spec: &str) -> Result<Preset, String> {
    let (name, command) =
        spec.split_once('=').ok_or_else(|| format!("--preset {spec:?}: expected NAME=PROGRAM ARG..."))?;
    let words = shlex::split(command).ok_or_else(|| format!("--preset {spec:?}: unbalanced quotes or escape"))?;
    let (program, args) =
        words.split_first().ok_or_else(|| format!("--preset {spec:?}: the command after `=` is empty"))?;
    Ok(Preset::new(name.trim(), program.clone(), args.to_vec()))
}

/// Refuses a null anywhere in `value` (a NaN read from TOML becomes one): it could not be written back.
fn check_no_null(value: &serde_json::Value, path: &str) -> Result<(), DefError> {
    match value {
        serde_json::Value::Null => Err(DefError::at(path, "expected a value (a NaN or infinite number is not one)")),
        serde_json::Value::Array(a) => {
            a.iter().enumerate().try_for_each(|(i, v)| check_no_null(v, &format!("{path}[{i}]")))
        }
        serde_json::Value::Object(m) => m.iter().try_for_each(|(k, v)| check_no_null(v, &format!("{path}.{k}"))),
        _ => Ok(()),
    }
}

impl AgentDef {
    /// A definition with this model (`openai:gpt-4.1-mini`, `anthropic:claude-sonnet-4-5`, `script:FILE`).
    pub fn new(model: &str) -> Result<Self, DefError> {
        let model = model.parse().map_err(|e| DefError::at("model", e))?;
        Ok(Self { model: Some(model), ..Self::default() })
    }

    /// Parses an agent file's text; relative paths in it are taken relative to `base_dir`.
    pub fn from_toml(text: &str, base_dir: &Path) -> Result<Self, DefError> {
        let mut def = crate::load::parse_toml::<AgentDef>(text)?;
        def.validate()?;
        def.resolve_paths(base_dir);
        Ok(def)
    }

    /// Sets the instructions.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self.instructions_file = None;
        self
    }

    /// Gives the model the file tools over `root`.
    pub fn workspace(mut self, root: impl Into<PathBuf>) -> Self {
        self.workspace.path = Some(root.into());
        self
    }

    /// Adds a command preset (it needs a workspace).
    pub fn preset(mut self, preset: Preset) -> Self {
        self.presets.push(preset);
        self
    }

    /// Adds the MCP server `name`.
    pub fn mcp(mut self, name: impl Into<String>, server: McpServerDef) -> Self {
        self.mcp.insert(name.into(), server);
        self
    }

    /// The limits of a run: `max_steps` (default 50) and the rest as set.
    pub fn limits(mut self, limits: LimitsDef) -> Self {
        self.limits = limits;
        self
    }

    /// Checks what the types alone cannot: keys that exclude each other, MCP tables, duplicate presets,
    /// values beyond what their adapter takes.
    pub fn validate(&self) -> Result<(), DefError> {
        if self.instructions.is_some() && self.instructions_file.is_some() {
            return Err(DefError::at("instructions_file", "set `instructions` or `instructions_file`, not both"));
        }
        if self.context.max_context_chars.is_some() && self.context.max_context_tokens.is_some() {
            return Err(DefError::at(
                "context.max_context_tokens",
                "set `max_context_chars` or `max_context_tokens`, not both",
            ));
        }
        self.validate_provider()?;
        if let Some(limits) = &self.commands.limits {
            limits.validate().map_err(|m| DefError::at("commands", m))?;
        }
        if let Some(extra) = &self.provider.extra_body {
            check_no_null(&serde_json::Value::Object(extra.clone()), "provider.extra_body")?;
        }
        self.validate_presets()?;
        for (name, server) in &self.mcp {
            server.to_config(name)?;
        }
        if let Some(schema) = &self.output_schema {
            schema.validate()?;
        }
        for (i, hook) in self.hooks.iter().enumerate() {
            hook.validate(i)?;
        }
        self.validate_sub_agents()?;
        Ok(())
    }

    /// `[provider]`'s values beyond what their types say: the integers its API takes, the least thinking
    /// budget, the base URL, the key's variable name, the headers.
    fn validate_provider(&self) -> Result<(), DefError> {
        let p = &self.provider;
        let fits_u32 = |v: Option<u64>, key: &str| match v {
            Some(n) if n > u64::from(u32::MAX) => {
                Err(DefError::at(format!("provider.{key}"), format!("expected at most {}, not {n}", u32::MAX)))
            }
            _ => Ok(()),
        };
        fits_u32(p.max_response_tokens.map(Positive::get), "max_response_tokens")?;
        fits_u32(p.thinking_budget.map(Positive::get), "thinking_budget")?;
        if let Some(n) = p.thinking_budget.map(Positive::get) {
            let min = reins_providers::MIN_THINKING_BUDGET;
            if n < u64::from(min) {
                return Err(DefError::at(
                    "provider.thinking_budget",
                    format!("expected at least {min} (the least the API takes), not {n}"),
                ));
            }
        }
        fits_u32(p.max_retries.map(|c| c.0), "max_retries")?;
        fits_u32(p.requests_per_minute.map(Positive::get), "requests_per_minute")?;
        if let Some(url) = &p.base_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) || url.chars().any(char::is_whitespace) {
                return Err(DefError::at(
                    "provider.base_url",
                    format!(
                        "invalid base URL {:?}: expected an http:// or https:// URL",
                        reins::secrets::redact_url(url)
                    ),
                ));
            }
        }
        if let Some(env) = &p.api_key_env {
            if env.is_empty() || env.contains(['=', '\0']) || env.chars().any(char::is_whitespace) {
                return Err(DefError::at(
                    "provider.api_key_env",
                    format!("expected the name of an environment variable, not {env:?}"),
                ));
            }
        }
        for (k, v) in &p.headers {
            if k.is_empty() || k.contains(['\r', '\n', '\0', ':']) || v.contains(['\r', '\n', '\0']) {
                return Err(DefError::at(format!("provider.headers.{k}"), "not a valid HTTP header"));
            }
        }
        Ok(())
    }

    /// The presets: unique names, their limits, their argument schemas.
    fn validate_presets(&self) -> Result<(), DefError> {
        let mut names = std::collections::BTreeSet::new();
        for (i, preset) in self.presets.iter().enumerate() {
            if !names.insert(preset.name.as_str()) {
                return Err(DefError::at(format!("presets[{i}].name"), format!("duplicate preset {:?}", preset.name)));
            }
            if let Some(limits) = &preset.limits {
                limits.validate().map_err(|m| DefError::at(format!("presets[{i}]"), m))?;
            }
            if let Some(schema) = &preset.arg_schema {
                check_no_null(schema, &format!("presets[{i}].arg_schema"))?;
            }
        }
        Ok(())
    }

    /// The sub-agents: tool names, one level of nesting, no MCP servers of their own, each valid.
    fn validate_sub_agents(&self) -> Result<(), DefError> {
        for (name, sub) in &self.agents {
            let at = format!("agents.{name}");
            if !reins::is_valid_tool_name(name) {
                return Err(DefError::at(
                    at,
                    "a sub-agent's name is its tool name: it starts with a letter and holds 1-64 letters, digits, '_' or '-'",
                ));
            }
            if !sub.agents.is_empty() {
                return Err(DefError::at(
                    format!("{at}.agents"),
                    "a sub-agent cannot have sub-agents of its own (one level of nesting)",
                ));
            }
            if !sub.mcp.is_empty() {
                return Err(DefError::at(
                    format!("{at}.mcp"),
                    "a sub-agent cannot have MCP servers yet: give them to the top-level agent",
                ));
            }
            sub.validate().map_err(|e| e.under(&at))?;
        }
        Ok(())
    }

    /// The whole definition of the sub-agent `name` as it is built: its own keys, with `model` inherited
    /// from this agent when it names none, and `[provider]` too when it names neither, and read-only when
    /// this agent is (`workspace.read_only`). Its tools, limits, context rules and instructions are its own;
    /// this agent's approval mode and hooks apply to its calls as well, in the engine.
    pub fn sub_agent(&self, name: &str) -> Option<AgentDef> {
        let sub = self.agents.get(name)?;
        let mut def = sub.clone();
        if def.model.is_none() {
            def.model = self.model.clone();
            if def.provider == ProviderDef::default() {
                def.provider = self.provider.clone();
            }
        }
        // Read-only holds at every depth: a read-only agent's sub-agents only read too (the approval mode
        // and the hooks reach them through the engine: every call of theirs meets the parent's too).
        if self.workspace.read_only == Some(true) {
            def.workspace.read_only = Some(true);
        }
        Some(def)
    }

    /// Makes the relative paths of a definition read from a file in `base_dir` relative to that directory:
    /// a `script:` model, `instructions_file`, `workspace.path` and each `mcp.NAME.cwd`. (A preset's `cwd` is
    /// relative to the workspace and stays as it is.)
    pub fn resolve_paths(&mut self, base_dir: &Path) {
        let join = |p: &Path| if p.is_relative() { base_dir.join(p) } else { p.to_path_buf() };
        if let Some(model) = &self.model {
            self.model = Some(model.map_script_paths(&join));
        }
        if let Some(model) = &self.context.compact_model {
            if let (ModelKind::Script, file) = model.kind() {
                self.context.compact_model = Some(model.with_script_path(&join(Path::new(file))));
            }
        }
        if let Some(f) = &self.instructions_file {
            self.instructions_file = Some(join(f));
        }
        if let Some(schema) = &self.output_schema {
            self.output_schema = Some(schema.resolved(base_dir));
        }
        if let Some(p) = &self.workspace.path {
            self.workspace.path = Some(join(p));
        }
        for hook in &mut self.hooks {
            hook.resolve_paths(base_dir);
        }
        for server in self.mcp.values_mut() {
            if let Some(cwd) = &server.cwd {
                server.cwd = Some(join(cwd));
            }
        }
        for sub in self.agents.values_mut() {
            sub.resolve_paths(base_dir);
        }
    }

    /// The same definition with every secret replaced by [`REDACTED`]: the values of HTTP headers (the
    /// provider's and each MCP server's), every MCP environment value (whatever its name), and the
    /// userinfo of a URL (`http://user:password@host`: `provider.base_url`, an MCP server's `url`). API keys
    /// are never in a definition at all.
    pub fn redacted(&self) -> AgentDef {
        let mut def = self.clone();
        for v in def.provider.headers.values_mut() {
            *v = REDACTED.to_owned();
        }
        if let Some(url) = &mut def.provider.base_url {
            *url = reins::secrets::redact_url(url).into_owned();
        }
        for server in def.mcp.values_mut() {
            for v in server.headers.values_mut().chain(server.env.values_mut()) {
                *v = REDACTED.to_owned();
            }
            if let Some(url) = &mut server.url {
                *url = reins::secrets::redact_url(url).into_owned();
            }
        }
        for sub in def.agents.values_mut() {
            *sub = sub.redacted();
        }
        def
    }

    /// [`AgentDef::redacted`], and the values of `provider.extra_body` masked too: how `reins config show`
    /// prints a definition (a body field may carry a credential a server wants there). Sessions record
    /// `extra_body` as it is, so that a resumed run sends the same requests.
    pub fn shown(&self) -> AgentDef {
        let mut def = self.redacted();
        if let Some(extra) = &mut def.provider.extra_body {
            for v in extra.values_mut() {
                *v = serde_json::Value::from(REDACTED);
            }
        }
        for sub in def.agents.values_mut() {
            if let Some(extra) = &mut sub.provider.extra_body {
                for v in extra.values_mut() {
                    *v = serde_json::Value::from(REDACTED);
                }
            }
        }
        def
    }

    /// The keys whose value is [`REDACTED`]: secrets that were not recorded and must be given again.
    pub fn redacted_keys(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (k, v) in &self.provider.headers {
            if v == REDACTED {
                out.push(format!("provider.headers.{k}"));
            }
        }
        if self.provider.base_url.as_deref().is_some_and(reins::secrets::is_redacted_url) {
            out.push("provider.base_url".to_owned());
        }
        for (name, server) in &self.mcp {
            if server.url.as_deref().is_some_and(reins::secrets::is_redacted_url) {
                out.push(format!("mcp.{name}.url"));
            }
            for (k, v) in server.headers.iter().chain(&server.env) {
                if v == REDACTED {
                    out.push(format!(
                        "mcp.{name}.{}.{k}",
                        if server.headers.contains_key(k) { "headers" } else { "env" }
                    ));
                }
            }
        }
        for (name, sub) in &self.agents {
            out.extend(sub.redacted_keys().into_iter().map(|k| format!("agents.{name}.{k}")));
        }
        out
    }

    /// The definition as TOML text (an agent file).
    pub fn to_toml(&self) -> Result<String, DefError> {
        toml::to_string(self).map_err(|e| DefError::whole(format!("cannot write the definition as TOML: {e}")))
    }

    /// The definition as JSON (the form sessions record).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// A definition from its JSON form, with the same errors as an agent file.
    pub fn from_json(value: &serde_json::Value) -> Result<Self, DefError> {
        let def: AgentDef = serde_path_to_error::deserialize(value).map_err(crate::load::path_error)?;
        def.validate()?;
        Ok(def)
    }
}
