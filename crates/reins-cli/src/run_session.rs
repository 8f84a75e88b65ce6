//! A run as the CLI makes it: the store and the session it continues, the agent resolved and built (its MCP
//! servers started, its approver, journal and observers), the run driven, its outcome written and summed up.
//! `reins run` and `reins approve` run through [`run_with`]; `reins chat` and `reins mcp serve` build on
//! [`setup`] and [`agent_builder`].

use reins::{Agent, Event, ObserverError};
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, code_for, usage};
use crate::outcome_file::write_outcome;
use crate::render;
use crate::resolve::build_err;
use crate::run_args::RunArgs;

/// The JSON-lines observer: one event a line on stdout.
fn json_observer(event: &Event) -> Result<(), ObserverError> {
    jsonln!("{}", event.to_json());
    crate::output::flush_stdout();
    Ok(())
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
    let builder = match store {
        Some(store) => parts.recorded_builder(store, session),
        None => parts.builder(),
    };
    let mut builder = builder.map_err(build_err)?.trace_content(parts.def.trace_content == Some(true));
    if let Some(approver) = approver {
        builder = builder.approver(approver);
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
/// parts and its started MCP servers (stop them with [`crate::mcp_servers::finish`]).
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
    let store = crate::store_open::run_store(&args.store)?;
    let session = crate::store_open::resumed(store.as_ref(), &args.store, args.tools.workspace.as_deref())?;
    let recorded = match &session {
        Some(s) => Some((s.id().to_owned(), crate::store_open::session_agent(s)?)),
        None => None,
    };
    let (mut resolved, before) =
        crate::resolve::resolve(args, recorded.as_ref().map(|(id, d)| (id.as_str(), d.clone())))?;
    defaults(&mut resolved.def);
    if let (Some((id, _)), Some(before)) = (&recorded, &before) {
        crate::resolve::report_overrides(id, before, &resolved);
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

/// `reins run`, or with `given` decisions `reins approve` (the session to continue is `--resume`).
pub async fn run_with(args: RunArgs, given: Option<crate::decisions::Given>) -> Result<u8, CliError> {
    let resuming = args.store.resume.is_some() || args.store.continue_last;
    if args.prompt.is_none()
        && !resuming
        && args.instructions.prompt_file.is_none()
        && args.instructions.mcp_prompt.is_none()
    {
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
    // Before the MCP servers start: on a terminal they may ask the person for input (an elicitation).
    crate::elicit_cli::register_on_terminal();
    let Setup { store, session, parts, mcp } = setup(&args, &cancel, |_| {}).await?;
    let prompt = crate::mcp_prompt::run_prompt(mcp.as_ref(), &args.instructions, prompt).await?;
    let state = match &session {
        Some(s) => Some(
            s.resume_state(parts.limits.clone(), &parts.context, prompt.as_deref())
                .map_err(crate::store_open::store_err)?,
        ),
        None => None,
    };
    // Decisions given on the command line are checked against the waiting batch before anything is recorded.
    let decided = match (&given, &state, &session) {
        (Some(g), Some(st), Some(s)) => Some(g.decide(s.id(), st, &parts.call_registry().map_err(build_err)?)?),
        (Some(_), _, _) => return Err(usage("reins approve continues a recorded session")),
        _ => None,
    };
    let terminal: Option<std::sync::Arc<dyn reins::Approver>> = crate::terminal_approver::on_terminal()
        .then(|| std::sync::Arc::new(crate::terminal_approver::TerminalApprover::default()) as _);
    let approver = match decided {
        Some(d) => Some(std::sync::Arc::new(crate::terminal_approver::FirstThen::new(d, terminal)) as _),
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
    crate::mcp_servers::finish(mcp.as_ref()).await;
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
