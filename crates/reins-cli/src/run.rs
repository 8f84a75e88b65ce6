//! `reins run`: flags, the run, its events and its outcome file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use reins::{Agent, CharCounter, ContextConfig, Event, Limits, ObserverError, Outcome, Registry, TokenCounter};
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, code_for, usage};
use crate::{render, test_tools};

/// Flags of `reins run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The prompt (with --resume: the follow-up prompt, optional); `-` reads it from standard input.
    #[arg(required_unless_present_any = ["resume", "prompt_file"])]
    pub prompt: Option<String>,
    /// The model, as PROVIDER:NAME. `script:FILE.json` replays a script file (see the README).
    #[arg(long)]
    pub model: String,
    /// Adds the test tools `echo` and `fail`.
    #[arg(long)]
    pub test_tools: bool,
    /// The most model responses.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_steps: u64,
    /// The most tool calls (every requested call counts).
    #[arg(long)]
    pub max_tool_calls: Option<u64>,
    /// The wall-clock deadline of the run, e.g. 30s, 5m, 1h 30m.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// The longest one tool call may run, e.g. 10s.
    #[arg(long, value_parser = parse_duration)]
    pub tool_timeout: Option<Duration>,
    /// The context budget in characters (Unicode scalar values).
    #[arg(long, conflicts_with = "max_context_tokens", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_context_chars: Option<u64>,
    /// The context budget in tokens (o200k_base tokenizer).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_context_tokens: Option<u64>,
    /// Each tool result is cut to this many characters before it is recorded (head, a marker saying how
    /// many were omitted, tail; the marker is compact under small limits).
    #[arg(long, default_value_t = 32_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_tool_result_chars: u64,
    /// The most input tokens over the run (from reported usage).
    #[arg(long)]
    pub max_input_tokens: Option<u64>,
    /// The most output tokens over the run.
    #[arg(long)]
    pub max_output_tokens: Option<u64>,
    /// The most input plus output tokens over the run.
    #[arg(long)]
    pub max_total_tokens: Option<u64>,
    /// Writes events as JSON lines on stdout (`run_end` last) instead of readable progress.
    #[arg(long)]
    pub json: bool,
    /// Puts prompts, arguments, texts and results into JSON events (left out by default).
    #[arg(long)]
    pub events_content: bool,
    /// Writes the whole outcome, transcript included, as JSON to this file.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Instructions and where the prompt comes from.
    #[command(flatten)]
    pub instructions: crate::instructions_cli::InstructionFlags,
    /// Workspace tools and command presets.
    #[command(flatten)]
    pub tools: crate::tools_cli::ToolFlags,
    /// MCP servers.
    #[command(flatten)]
    pub mcp: crate::mcp_cli::McpFlags,
    /// Real model providers.
    #[command(flatten)]
    pub provider: crate::providers_cli::ProviderFlags,
    /// The session store.
    #[command(flatten)]
    pub store: crate::sessions_cli::RunStoreFlags,
}

/// Parses a duration such as `30s`, `250ms`, `5m` or `1h 30m`: the core's one rule ([`reins::parse_duration`]).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    reins::parse_duration(s).map_err(|e| e.to_string())
}

/// The JSON-lines observer: one event a line on stdout.
fn json_observer(event: &Event) -> Result<(), ObserverError> {
    jsonln!("{}", crate::providers_cli::event_json(event));
    crate::output::flush_stdout();
    Ok(())
}

/// Builds the agent from the flags.
fn build_agent(args: &RunArgs, mcp: Option<&Arc<reins_mcp::McpTools>>) -> Result<Agent, CliError> {
    let model = crate::providers_cli::build_model(&args.model, &args.provider)?;
    let mut tools = Vec::new();
    if args.test_tools {
        tools.extend(test_tools::tools());
    }
    let workspace_tools = crate::tools_cli::build_workspace_tools(&args.tools)?;
    let instructions = crate::instructions_cli::instructions(&args.instructions, &workspace_tools)?;
    tools.extend(workspace_tools.tools);
    let tool_source = crate::mcp_cli::tool_source(mcp, &tools)?;
    let registry = Registry::new(tools).map_err(|e| usage(e.to_string()))?;
    let limits = Limits {
        max_steps: Some(args.max_steps),
        max_tool_calls: args.max_tool_calls,
        max_input_tokens: args.max_input_tokens,
        max_output_tokens: args.max_output_tokens,
        max_total_tokens: args.max_total_tokens,
        timeout: args.timeout,
        tool_timeout: args.tool_timeout,
    };
    let counter: Arc<dyn TokenCounter> = if args.max_context_tokens.is_some() {
        Arc::new(reins::TiktokenCounter::o200k_base().map_err(|e| CliError::Internal(anyhow::anyhow!(e)))?)
    } else {
        Arc::new(CharCounter)
    };
    let context = ContextConfig {
        max_context: args.max_context_chars.or(args.max_context_tokens),
        max_tool_result_chars: Some(usize::try_from(args.max_tool_result_chars).unwrap_or(usize::MAX)),
        counter,
    };
    let context = crate::providers_cli::default_context(&args.model, &args.provider, context)?;
    let mut builder = Agent::builder_shared(model).registry(registry).limits(limits).context(context);
    if let Some(text) = instructions {
        builder = builder.instructions(text);
    }
    if let Some(source) = tool_source {
        builder = builder.tool_source(source);
    }
    if args.json {
        builder = builder.observer(json_observer).include_content(args.events_content);
    } else {
        builder = builder.observer(render::progress_observer).include_content(true);
    }
    let builder = crate::sessions_cli::attach(builder, args)?;
    builder.build().map_err(|e| usage(e.to_string()))
}

/// Writes the outcome as pretty JSON.
pub fn write_outcome(path: &PathBuf, outcome: &Outcome) -> anyhow::Result<()> {
    let json =
        serde_json::to_vec_pretty(&crate::providers_cli::outcome_json(outcome)?).context("serializing the outcome")?;
    std::fs::write(path, json).with_context(|| format!("writing the outcome file {}", path.display()))
}

/// `reins run`.
pub async fn run(args: RunArgs) -> Result<u8, CliError> {
    // Before the signal handlers: a Ctrl-C while the prompt is read from standard input just ends the command.
    let prompt = crate::instructions_cli::prompt(args.prompt.as_deref(), &args.instructions)?;
    let cancel = CancellationToken::new();
    crate::signals::cancel_on_signals(cancel.clone(), "the run")?;
    // A signal during MCP start-up drops the servers started so far (their process groups are killed) and the
    // run below ends `aborted` at once, with its outcome and session written.
    let mcp = tokio::select! {
        started = crate::mcp_cli::start(&args.mcp, args.tools.config.as_deref()) => started?,
        () = cancel.cancelled() => None,
    };
    let agent = build_agent(&args, mcp.as_ref())?;
    let outcome = match crate::sessions_cli::resume_state(&args, prompt.as_deref(), &agent)? {
        Some(state) => agent.drive(state, cancel).await,
        None => agent.run(prompt.as_deref().unwrap_or_default(), cancel).await,
    };
    crate::mcp_cli::finish(mcp.as_ref()).await;
    if let Some(path) = &args.output {
        write_outcome(path, &outcome)?;
    }
    if !args.json {
        render::summary(&outcome);
        crate::providers_cli::print_cost(&outcome);
    }
    Ok(code_for(outcome.status))
}
