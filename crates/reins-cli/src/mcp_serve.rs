//! `reins mcp serve --agent FILE...`: Reins as an MCP server. Each agent file is a tool (named after the file,
//! described by its `description`) that any MCP client can call with `{"task": ...}`; every call is a run of
//! that agent built as `reins run --agent FILE` builds it — its budget, workspace confinement, policies and MCP
//! servers — and recorded as a session in the same store. The protocol side is `reins_mcp::serve`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use clap::{Args, Parser};
use reins_mcp::serve::{AgentRunner, AgentServer, RunContext, ServedAgent};
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, usage};
use crate::run_args::RunArgs;

/// Flags of `reins mcp serve`.
#[derive(Args, Debug)]
pub struct McpServeArgs {
    /// An agent file to serve as a tool (named after the file, without `.toml`; described by its `description`).
    /// Repeatable: each file is one tool.
    #[arg(long = "agent", value_name = "FILE", required = true)]
    agents: Vec<PathBuf>,
    /// Picks the [profiles.NAME] table of the user config for every served agent, as `reins run --profile`.
    #[arg(long, short = 'p', value_name = "NAME")]
    profile: Option<String>,
    /// Serves streamable HTTP at http://ADDR/mcp instead of stdio: a loopback IP:PORT (127.0.0.1:PORT or
    /// [::1]:PORT; port 0: any free port), any other address refused. Every request needs the bearer token
    /// printed at start.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// The session store the runs are recorded in (default: $REINS_STORE, else ~/.local/share/reins/sessions.db).
    #[arg(long, value_name = "PATH", conflicts_with = "no_store")]
    store: Option<PathBuf>,
    /// Does not record the runs.
    #[arg(long)]
    no_store: bool,
    /// How long a run waits for a 2026-07-28 client to call again with the answer to its question (an
    /// approval, or what one of the agent's MCP servers asks) before it is cancelled: 30s, 10m, 1h.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    input_timeout: std::time::Duration,
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    reins::parse_duration(s).map_err(|e| e.to_string())
}

/// `reins run`'s flags, parsed from words, so that a served agent is resolved exactly as `reins run` resolves
/// it.
#[derive(Parser, Debug)]
struct RunWords {
    #[command(flatten)]
    run: RunArgs,
}

/// Builds and runs the served agents.
struct Runner {
    /// Per tool name, the `reins run` flags of its agent.
    agents: Vec<(String, Vec<String>)>,
}

impl Runner {
    fn args(&self, agent: &str) -> Result<RunArgs, String> {
        let (_, words) = self.agents.iter().find(|(n, _)| n == agent).ok_or_else(|| format!("no agent {agent:?}"))?;
        run_args(words).map_err(message)
    }
}

/// A command error as the line a client is shown.
fn message(e: CliError) -> String {
    match e {
        CliError::Usage(m) => m,
        CliError::Internal(e) => format!("{e:#}"),
    }
}

fn run_args(words: &[String]) -> Result<RunArgs, CliError> {
    let argv = std::iter::once("reins".to_owned()).chain(words.iter().cloned());
    RunWords::try_parse_from(argv).map(|w| w.run).map_err(|e| usage(e.to_string()))
}

#[async_trait]
impl AgentRunner for Runner {
    async fn run(&self, agent: &str, task: &str, ctx: RunContext) -> Result<reins::Outcome, String> {
        let args = self.args(agent)?;
        // The agent's own MCP servers ask the person through the client that called it.
        let setup = reins_mcp::elicit::scope(ctx.elicitor, crate::run_session::setup(&args, &ctx.cancel, |_| {}))
            .await
            .map_err(message)?;
        let crate::run_session::Setup { store, parts, mcp, .. } = setup;
        let built = crate::run_session::agent_builder(&parts, store.as_ref(), None, Some(ctx.approver))
            .map_err(message)
            .and_then(|b| b.shared_observer(ctx.observer).build().map_err(|e| e.to_string()));
        let outcome = match built {
            Ok(agent) => Ok(agent.run(task, ctx.cancel).await),
            Err(e) => Err(e),
        };
        crate::mcp_servers::finish(mcp.as_ref()).await;
        outcome
    }
}

/// A tool name from an agent file's name: its stem, with every character MCP does not allow in a tool name
/// made `_`.
fn tool_name(path: &Path) -> Result<String, CliError> {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') { c } else { '_' })
        .take(128)
        .collect();
    if name.is_empty() {
        return Err(usage(format!("--agent {}: no file name to name the tool after", path.display())));
    }
    Ok(name)
}

/// The served agents, each resolved (user config, profile, agent file) and checked as `reins run` would.
fn served(args: &McpServeArgs) -> Result<(Vec<ServedAgent>, Runner), CliError> {
    let mut agents = Vec::new();
    let mut runner = Runner { agents: Vec::new() };
    for path in &args.agents {
        let name = tool_name(path)?;
        if agents.iter().any(|a: &ServedAgent| a.name == name) {
            return Err(usage(format!("--agent {}: a second agent named {name:?} (rename one file)", path.display())));
        }
        let mut words = vec!["--agent".to_owned(), path.display().to_string()];
        if let Some(p) = &args.profile {
            words.extend(["--profile".to_owned(), p.clone()]);
        }
        match (&args.store, args.no_store) {
            (_, true) => words.push("--no-store".to_owned()),
            (Some(s), false) => words.extend(["--store".to_owned(), s.display().to_string()]),
            (None, false) => {}
        }
        let (resolved, _) = crate::resolve::resolve(&run_args(&words)?, None)?;
        let def = &resolved.def;
        // Errors of the definition (a missing key, a bad schema) now rather than at the first call.
        def.parts_with(None).map_err(crate::resolve::build_err)?;
        let output_schema = match &def.output_schema {
            Some(s) => Some(s.load().map_err(crate::resolve::def_err)?.schema().clone()),
            None => None,
        };
        let description = def
            .description
            .clone()
            .unwrap_or_else(|| format!("The Reins agent of {}: give it a task.", path.display()));
        agents.push(ServedAgent { name: name.clone(), description, output_schema });
        runner.agents.push((name, words));
    }
    Ok((agents, runner))
}

/// `reins mcp serve`: serves until the client closes stdio, or (HTTP) until Ctrl-C / SIGTERM / SIGHUP.
pub async fn serve(args: McpServeArgs) -> Result<u8, CliError> {
    let listen = match &args.listen {
        Some(l) => Some(crate::loopback::loopback(l, "reins mcp serve")?),
        None => None,
    };
    let (agents, runner) = served(&args)?;
    let names: Vec<String> = agents.iter().map(|a| a.name.clone()).collect();
    let cancel = CancellationToken::new();
    crate::signals::cancel_on_signals(cancel.clone(), "reins mcp serve")?;
    let server = AgentServer::new(agents, Arc::new(runner), cancel.clone()).with_input_timeout(args.input_timeout);
    let Some(addr) = listen else {
        errln!("reins mcp serve: serving {} on stdio", names.join(", "));
        reins_mcp::serve::serve_stdio(server, cancel)
            .await
            .map_err(|e| CliError::Internal(anyhow::anyhow!("reins mcp serve: {e}")))?;
        return Ok(0);
    };
    let token = reins_view::server::new_token().map_err(|e| CliError::Internal(e.into()))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::Internal(anyhow::anyhow!("cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr().map_err(|e| CliError::Internal(e.into()))?;
    errln!("reins mcp serve: serving {} at http://{local}/mcp; Ctrl-C stops it", names.join(", "));
    outln!("http://{local}/mcp");
    outln!("Authorization: Bearer {token}");
    crate::output::flush_stdout();
    reins_mcp::serve::serve_http(listener, server, token, cancel)
        .await
        .map_err(|e| CliError::Internal(anyhow::anyhow!("reins mcp serve: {e}")))?;
    errln!("reins mcp serve: stopped");
    Ok(0)
}
