//! The flags of a run, shared by `reins run`, `reins chat`, `reins approve`, `reins config show` and `reins mcp
//! serve`: the prompt, the agent and its overrides, limits, context, tools, MCP servers, provider, store, media,
//! telemetry and output.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// Flags of `reins run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The prompt (with --resume: the follow-up prompt, optional); `-` reads it from standard input.
    pub prompt: Option<String>,
    /// The agent file and the user config's profile.
    #[command(flatten)]
    pub agent_file: AgentFileFlags,
    /// The model, as PROVIDER:NAME. `script:FILE.json` replays a script file (docs/src/contracts.md).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// A model a step falls over to when the model fails in a way another provider can fix (connection
    /// errors, timeouts, 408, 429, 5xx, after its retries), before any output streamed. Repeatable, in order.
    #[arg(long = "fallback-model", value_name = "SPEC")]
    pub fallback_models: Vec<String>,
    /// Sets any agent-file key, dotted (`limits.max_steps=5`, `provider.temperature=0.2`, `model="openai:gpt-4.1"`):
    /// the value is TOML, else taken as a string. Repeatable (a later one wins); over the agent file, beneath the
    /// other flags. An unknown key or a bad value is exit 2, naming it.
    #[arg(short = 'c', long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Adds the test tools `echo` and `fail`.
    #[arg(long)]
    pub test_tools: bool,
    /// The most model responses (default 50).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_steps: Option<u64>,
    /// The most tool calls (every requested call counts).
    #[arg(long)]
    pub max_tool_calls: Option<u64>,
    /// The wall-clock deadline of the run, e.g. 30s, 5m, 1h 30m.
    #[arg(long, value_parser = reins_agent::parse_duration)]
    pub timeout: Option<Duration>,
    /// The longest one tool call may run, e.g. 10s.
    #[arg(long, value_parser = reins_agent::parse_duration)]
    pub tool_timeout: Option<Duration>,
    /// The context budget in characters (Unicode scalar values).
    #[arg(long, conflicts_with = "max_context_tokens", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_context_chars: Option<u64>,
    /// The context budget in tokens (o200k_base tokenizer).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_context_tokens: Option<u64>,
    /// Each tool result is cut to this many characters before it is recorded (head, a marker saying how
    /// many were omitted, tail; the marker is compact under small limits).
    /// Default 32000.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_tool_result_chars: Option<u64>,
    /// What happens when the context fills up: `drop` (the newest whole groups, after a marker saying how
    /// many earlier ones were left out) or `summarize` (the oldest groups are replaced by a summary).
    /// Default: summarize for a real model of known window, else drop.
    #[arg(long, value_parser = parse_strategy)]
    pub context_strategy: Option<reins::ContextStrategy>,
    /// Under summarize: the share of the context budget past which a compaction is made (default 0.8).
    #[arg(long, value_parser = parse_share)]
    pub compact_at: Option<reins_agent::Share>,
    /// Under summarize: the model that writes summaries (a model spec, like --model; default: the run's).
    #[arg(long, value_name = "SPEC")]
    pub compact_model: Option<String>,
    /// The most input tokens over the run (from reported usage).
    #[arg(long)]
    pub max_input_tokens: Option<u64>,
    /// The most output tokens over the run.
    #[arg(long)]
    pub max_output_tokens: Option<u64>,
    /// The most input plus output tokens over the run.
    #[arg(long)]
    pub max_total_tokens: Option<u64>,
    /// Which calls wait for a person's decision: never (default), writes (write_file, edit_file,
    /// run_command, MCP tools not marked read-only) or all. On a terminal the CLI asks inline; otherwise
    /// the run ends awaiting_approval (exit 14): continue it with `reins approve ID`.
    #[arg(long, value_name = "MODE", value_parser = parse_approve)]
    pub approve: Option<reins_agent::ApproveMode>,
    /// The most the run may cost, in US dollars, at the model's price (a known model's list price, or
    /// `[provider] price`); checked after each response. Exit 11 (`cost_limit`).
    #[arg(long, value_name = "USD", value_parser = parse_usd)]
    pub max_cost_usd: Option<reins_agent::Usd>,
    /// Writes events as JSON lines on stdout (`run_end` last) instead of readable progress.
    #[arg(long)]
    pub json: bool,
    /// Puts prompts, arguments, texts and results into JSON events and exported spans (left out by default).
    #[arg(long)]
    pub events_content: bool,
    /// Writes the whole outcome, transcript included, as JSON to this file.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Instructions and where the prompt comes from.
    #[command(flatten)]
    pub instructions: crate::instructions_cli::InstructionFlags,
    /// Workspace tools and command presets.
    #[command(flatten)]
    pub tools: crate::run_args::ToolFlags,
    /// MCP servers.
    #[command(flatten)]
    pub mcp: crate::mcp_servers::McpFlags,
    /// Real model providers.
    #[command(flatten)]
    pub provider: crate::providers_cli::ProviderFlags,
    /// The session store.
    #[command(flatten)]
    pub store: crate::store_open::RunStoreFlags,
    /// Structured output.
    #[command(flatten)]
    pub media: crate::media_cli::MediaFlags,
    /// OpenTelemetry export.
    #[command(flatten)]
    pub otlp: crate::telemetry::OtlpFlags,
}

fn parse_approve(s: &str) -> Result<reins_agent::ApproveMode, String> {
    s.parse()
}

fn parse_strategy(s: &str) -> Result<reins::ContextStrategy, String> {
    s.parse()
}

fn parse_usd(s: &str) -> Result<reins_agent::Usd, String> {
    s.trim()
        .trim_start_matches('$')
        .parse::<f64>()
        .ok()
        .and_then(reins_agent::Usd::new)
        .ok_or_else(|| format!("{s:?} is not a number of US dollars above 0"))
}

fn parse_share(s: &str) -> Result<reins_agent::Share, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .and_then(reins_agent::Share::new)
        .ok_or_else(|| format!("{s:?} is not a number more than 0 and at most 1"))
}

/// Flags that give the model workspace tools.
#[derive(Args, Debug, Default)]
pub struct ToolFlags {
    /// Gives the model the file tools (read_file, write_file, edit_file, list_dir, search) over DIR.
    #[arg(long, short = 'w', value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Gives the model only the file tools that read (read_file, list_dir, search).
    #[arg(long)]
    pub read_only: bool,
    /// Adds a command preset the model may run by name: 'NAME=PROGRAM ARG...' (split like a shell would, never
    /// run by one; takes no arguments from the model). Repeatable. Needs a workspace.
    #[arg(long = "preset", value_name = "NAME=PROGRAM ARG...")]
    pub presets: Vec<String>,
    /// The default command timeout, e.g. 10s.
    #[arg(long, value_parser = reins_agent::parse_duration, value_name = "DURATION")]
    pub command_timeout: Option<Duration>,
    /// Runs commands without the OS sandbox (process group, scrubbed environment and limits still apply).
    #[arg(long, conflicts_with = "accept_weaker_sandbox")]
    pub no_sandbox: bool,
    /// Runs commands with whatever isolation the host supports instead of refusing when a layer is missing.
    #[arg(long)]
    pub accept_weaker_sandbox: bool,
}

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
