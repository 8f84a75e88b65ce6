//! `reins run`: flags, the run, its events and its outcome file.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use reins::{Agent, Event, ObserverError, Outcome};
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, code_for, usage};
use crate::render;

/// Flags of `reins run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The prompt (with --resume: the follow-up prompt, optional); `-` reads it from standard input.
    pub prompt: Option<String>,
    /// The agent file and the user config's profile.
    #[command(flatten)]
    pub agent_file: crate::agent_cli::AgentFileFlags,
    /// The model, as PROVIDER:NAME. `script:FILE.json` replays a script file (docs/src/contracts.md).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
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
    /// Structured output.
    #[command(flatten)]
    pub media: crate::media_cli::MediaFlags,
    /// OpenTelemetry export.
    #[command(flatten)]
    pub otlp: crate::telemetry::OtlpFlags,
}

/// The JSON-lines observer: one event a line on stdout.
fn json_observer(event: &Event) -> Result<(), ObserverError> {
    jsonln!("{}", event.to_json());
    crate::output::flush_stdout();
    Ok(())
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

/// The builder of the agent of `parts`: its approver, and its journal in `store` (continuing `session`, else
/// a new session). Shared by `reins run` and `reins chat` (which builds one for each turn).
pub fn agent_builder(
    parts: &reins_agent::Parts,
    store: Option<&reins_store::Store>,
    session: Option<&reins_store::Session>,
    approver: Option<std::sync::Arc<dyn reins::Approver>>,
) -> Result<reins::AgentBuilder, CliError> {
    // Spans carry content only when it is opted in (the agent file's `trace_content`), whatever the events
    // carry (progress lines and the chat show content).
    let mut builder = parts.builder().map_err(build_err)?.trace_content(parts.def.trace_content == Some(true));
    if let Some(approver) = approver {
        builder = builder.approver(approver);
    }
    if let Some(store) = store {
        builder = builder.journal(parts.journal(store, session).map_err(build_err)?);
    }
    Ok(builder)
}

/// Builds the agent from its parts, with the observers of the flags and the session journal.
fn build_agent(
    args: &RunArgs,
    mut parts: reins_agent::Parts,
    store: Option<&reins_store::Store>,
    session: Option<&reins_store::Session>,
    approver: Option<std::sync::Arc<dyn reins::Approver>>,
) -> Result<Agent, CliError> {
    if let Some(pricing) = &parts.pricing {
        crate::providers_cli::set_pricing(pricing);
        if args.provider.stream {
            parts.model = crate::providers_cli::streamed(parts.model.clone());
        }
    }
    // Readable progress on a terminal: a heartbeat while a model call runs (not with --stream, whose text is the
    // sign of life).
    if !args.json && !args.provider.stream && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        parts.model = crate::heartbeat::wrap(parts.model.clone());
    }
    let mut builder = agent_builder(&parts, store, session, approver)?;
    if args.json {
        builder = builder.observer(json_observer).include_content(args.events_content);
    } else {
        builder = builder.observer(render::progress_observer).include_content(true);
    }
    if args.events_content {
        builder = builder.trace_content(true);
    }
    builder.build().map_err(|e| usage(e.to_string()))
}

/// What `reins run` and `reins chat` start from: the store, the session `--resume` continues, the agent's
/// parts and its started MCP servers (stop them with [`crate::mcp_cli::finish`]).
pub struct Setup {
    /// The session store (`None` with `--no-store`).
    pub store: Option<reins_store::Store>,
    /// The session continued.
    pub session: Option<reins_store::Session>,
    /// The agent's parts.
    pub parts: reins_agent::Parts,
    /// Its MCP servers, started.
    pub mcp: Option<std::sync::Arc<reins_mcp::McpTools>>,
}

/// Opens the store, loads the session to continue, resolves the agent (the recorded one beneath the flags;
/// `defaults` fills what no layer gave), starts its MCP servers — a cancellation of `cancel` meanwhile
/// stops them and leaves none — and builds its parts, warning about what the person should know.
pub async fn setup(
    args: &RunArgs,
    cancel: &CancellationToken,
    defaults: impl FnOnce(&mut reins_agent::AgentDef),
) -> Result<Setup, CliError> {
    let store = crate::sessions_cli::run_store(&args.store)?;
    let session = crate::sessions_cli::resumed(store.as_ref(), &args.store, args.tools.workspace.as_deref())?;
    let recorded = match &session {
        Some(s) => Some((s.id().to_owned(), crate::sessions_cli::session_agent(s)?)),
        None => None,
    };
    let (mut resolved, before) =
        crate::agent_cli::resolve(args, recorded.as_ref().map(|(id, d)| (id.as_str(), d.clone())))?;
    defaults(&mut resolved.def);
    if let (Some((id, _)), Some(before)) = (&recorded, &before) {
        crate::agent_cli::report_overrides(id, before, &resolved);
    }
    // A signal during MCP start-up drops the servers started so far (their process groups are killed) and the
    // run ends `aborted` at once, with its outcome and session written.
    let mcp = tokio::select! {
        started = resolved.def.start_mcp() => started.map_err(build_err)?,
        () = cancel.cancelled() => None,
    };
    let parts = resolved.def.parts_with(mcp.clone()).map_err(build_err)?;
    for note in &parts.notes {
        errln!("reins: warning: {note}");
    }
    Ok(Setup { store, session, parts, mcp })
}

/// Writes the outcome as pretty JSON.
pub fn write_outcome(path: &PathBuf, outcome: &Outcome) -> anyhow::Result<()> {
    // Each image's bytes once, the messages holding references (see `media_cli::outcome_value`).
    let value = crate::media_cli::outcome_value(outcome).context("serializing the outcome")?;
    let json = serde_json::to_vec_pretty(&value).context("serializing the outcome")?;
    // Readable by its owner only, like everything Reins writes for its user.
    crate::output::write_private(path, &json).with_context(|| format!("writing the outcome file {}", path.display()))
}

/// `reins run`.
pub async fn run(args: RunArgs) -> Result<u8, CliError> {
    run_with(args, None).await
}

/// `reins run`, or with `given` decisions `reins approve` (the session to continue is `--resume`).
pub async fn run_with(args: RunArgs, given: Option<crate::approve_cli::Given>) -> Result<u8, CliError> {
    let resuming = args.store.resume.is_some() || args.store.continue_last;
    if args.prompt.is_none() && !resuming && args.instructions.prompt_file.is_none() {
        return Err(usage(
            "a prompt is required (or --prompt-file FILE, or --resume ID / --continue to continue a session)",
        ));
    }
    // Before the signal handlers: a Ctrl-C while the prompt is read from standard input just ends the command.
    let prompt = crate::instructions_cli::prompt(args.prompt.as_deref(), &args.instructions)?;
    let images = crate::media_cli::images(&args.media)?;
    if !images.is_empty() && resuming {
        return Err(usage("--image starts a run: it cannot be given with --resume or --continue"));
    }
    crate::telemetry::start(&args.otlp)?;
    let cancel = CancellationToken::new();
    crate::signals::cancel_on_signals(cancel.clone(), "the run")?;
    let Setup { store, session, parts, mcp } = setup(&args, &cancel, |_| {}).await?;
    let state = match &session {
        Some(s) => Some(
            s.resume_state(parts.limits.clone(), &parts.context, prompt.as_deref())
                .map_err(crate::sessions_cli::store_err)?,
        ),
        None => None,
    };
    // Decisions given on the command line are checked against the waiting batch before anything is recorded.
    let decided = match (&given, &state, &session) {
        (Some(g), Some(st), Some(s)) => Some(g.decide(s.id(), st, &edit_registry(&parts)?)?),
        (Some(_), _, _) => return Err(usage("reins approve continues a recorded session")),
        _ => None,
    };
    let terminal: Option<std::sync::Arc<dyn reins::Approver>> = crate::approve_cli::on_terminal()
        .then(|| std::sync::Arc::new(crate::approve_cli::TerminalApprover::default()) as _);
    let approver = match decided {
        Some(d) => Some(std::sync::Arc::new(crate::approve_cli::FirstThen::new(d, terminal)) as _),
        None => terminal,
    };
    let agent = build_agent(&args, parts, store.as_ref(), session.as_ref(), approver)?;
    let outcome = match state {
        Some(mut state) => {
            // The rebuilt agent's instructions (the recorded ones, unless a flag or the agent file changed
            // them; the preamble and AGENTS.md made again from the workspace) replace those of the last run.
            if let Some(text) = agent.instructions() {
                state.set_instructions(Some(text.into()), agent.context());
            }
            agent.drive(state, cancel).await
        }
        None if !images.is_empty() => {
            agent.run_with_images(prompt.as_deref().unwrap_or_default(), images, cancel).await
        }
        None => agent.run(prompt.as_deref().unwrap_or_default(), cancel).await,
    };
    crate::mcp_cli::finish(mcp.as_ref()).await;
    if let Some(path) = &args.output {
        write_outcome(path, &outcome)?;
    }
    if !args.json {
        render::summary(&outcome);
        if agent.output_schema().is_some() && outcome.output.is_none() {
            errln!("  output: none (the final answer did not match the output schema)");
        }
        crate::providers_cli::print_cost(&outcome);
        if outcome.status == reins::Status::AwaitingApproval {
            for p in outcome.pending.iter().filter(|p| p.needs_decision()) {
                let of = p.sub_agent.as_ref().map(|s| format!("[{}] ", s.agent)).unwrap_or_default();
                errln!("  waiting: {of}{} {} {}", p.call_id, p.name, render::preview(&p.arguments.to_string()));
            }
            match &outcome.session_id {
                Some(id) => errln!(
                    "  decide with: reins approve {id} --all | --call CALL_ID [--deny REASON] | --edit CALL_ID=JSON"
                ),
                None => errln!("  the run was not recorded (--no-store): it cannot be continued"),
            }
        } else if let Some(id) = &outcome.session_id {
            errln!("  continue with: reins run --resume {id} \"…\" (or --continue)");
        }
    }
    Ok(code_for(outcome.status))
}

/// The tools an edited call is validated against: the agent's, MCP servers' included.
fn edit_registry(parts: &reins_agent::Parts) -> Result<reins::Registry, CliError> {
    match &parts.mcp {
        Some(mcp) => mcp.registry(parts.tools.clone()).map_err(|e| usage(e.to_string())),
        None => parts.registry().map_err(build_err),
    }
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
