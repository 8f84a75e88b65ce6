//! Durable runs on Restate: `reins worker` (a Restate service endpoint that runs agents) and its client,
//! `reins submit`, `reins status`, `reins result` and `reins cancel` (`reins approve` of a durable run is
//! `approve_cli`'s; both reach Restate through `restate_client`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use reins_restate::{Overrides, TurnRequest, is_valid_agent_name, new_id};
use tokio::signal::unix::{SignalKind, signal};

use crate::exit::{CliError, usage};
use crate::outcome_file::show_outcome;
use crate::restate_client::{RestateFlags, client_err, find_waiting, show_waiting};

/// Flags of `reins worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// The address to serve Restate on (loopback by default; behind a load balancer, several workers share one
    /// address that is registered with Restate once).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9080")]
    pub listen: SocketAddr,
    /// A request identity public key of the Restate server (`publickeyv1_...`; repeatable): requests not signed
    /// by one are refused. Default: $REINS_RESTATE_IDENTITY_KEY.
    #[arg(long = "identity-key", value_name = "KEY")]
    pub identity_keys: Vec<String>,
    /// An agent this worker runs, NAME=FILE (repeatable; NAME is 1 to 64 of A-Za-z0-9_-): a turn names one
    /// (`reins submit --agent NAME`); the agent named `default`, else the first given, runs when it names
    /// none. The worker runs nothing else: what it may start comes from its operator, not from who reaches its
    /// port. The files are read once, when it starts.
    #[arg(long = "agent", value_name = "NAME=FILE")]
    pub agents: Vec<String>,
    /// A directory of agent files: each NAME.toml in it is the agent NAME (with --agent too).
    #[arg(long = "agents", value_name = "DIR")]
    pub agents_dir: Option<PathBuf>,
    /// Serves a non-loopback --listen address without --identity-key. Then anyone who reaches the port can
    /// register this worker with a Restate server of their own and run its agents — their tools, commands and
    /// MCP servers, with the API keys of this worker's environment — as this user. Only on a network you
    /// trust entirely.
    #[arg(long)]
    pub insecure: bool,
    /// Closes a connection that has had no request under way for this long (one that never sends a request
    /// included; Restate opens a new one when it needs it). Default 2m.
    #[arg(long = "idle-timeout", value_name = "DURATION", value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// OpenTelemetry export of the turns' spans.
    #[command(flatten)]
    pub otlp: crate::telemetry::OtlpFlags,
}

/// Flags of `reins submit`.
#[derive(Args, Debug)]
pub struct SubmitArgs {
    /// The prompt (a follow-up with --session).
    pub prompt: String,
    /// The agent: the name of one of the workers' agents (`reins worker --agent NAME=FILE`). Default: the
    /// session's, else the workers' default.
    #[arg(long = "agent", value_name = "NAME")]
    pub agent: Option<String>,
    /// Instructions (the system prompt) instead of the agent's.
    #[arg(long, value_name = "TEXT")]
    pub instructions: Option<String>,
    /// The most model responses, if fewer than the agent allows (a turn only tightens its agent's limits).
    #[arg(long = "max-steps", value_name = "N")]
    pub max_steps: Option<u64>,
    /// The most tool calls, if fewer than the agent allows.
    #[arg(long = "max-tool-calls", value_name = "N")]
    pub max_tool_calls: Option<u64>,
    /// The most the run may cost in US dollars, if less than the agent allows.
    #[arg(long = "max-cost-usd", value_name = "USD")]
    pub max_cost_usd: Option<f64>,
    /// The run's deadline, if shorter than the agent's.
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Continues this session with a follow-up turn (its agent unless --agent is given).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Waits for the run to end and prints its outcome like `reins run`, with its exit code.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: writes the outcome as one JSON line on stdout instead of readable text.
    #[arg(long)]
    pub json: bool,
    /// With --wait: writes the whole outcome, transcript included, as JSON to this file.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Where Restate is.
    #[command(flatten)]
    pub restate: RestateFlags,
}

/// Flags of `reins status`, `reins result` and `reins cancel`.
#[derive(Args, Debug)]
pub struct IdArgs {
    /// A run id, or a session id (its newest run).
    pub id: String,
    /// `result`: writes the outcome as one JSON line on stdout instead of readable text.
    #[arg(long)]
    pub json: bool,
    /// `result`: writes the whole outcome, transcript included, as JSON to this file.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Where Restate is.
    #[command(flatten)]
    pub restate: RestateFlags,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    reins::parse_duration(s).map_err(|e| e.to_string())
}

/// Reads one agent file as `reins run --agent` does (its paths made absolute) and validates it.
fn load_agent(name: &str, path: &Path) -> Result<reins_agent::AgentDef, CliError> {
    if !is_valid_agent_name(name) {
        return Err(usage(format!(
            "agent {name:?} ({}): not an agent name (1 to 64 of A-Za-z0-9_-; in --agents DIR, the file's name \
             without .toml)",
            path.display()
        )));
    }
    let path = std::fs::canonicalize(path).map_err(|e| usage(format!("agent {name}: {}: {e}", path.display())))?;
    let within = |e: reins_agent::DefError| usage(format!("agent {name} ({}): {e}", path.display()));
    let layer = reins_agent::agent_file_layer(&path).map_err(within)?;
    let resolved = reins_agent::resolve(&[layer]).map_err(within)?;
    resolved.def.validate().map_err(within)?;
    Ok(resolved.def)
}

/// The agents a worker runs (`--agent NAME=FILE`, `--agents DIR`) and its default.
fn worker_agents(args: &WorkerArgs) -> Result<(BTreeMap<String, reins_agent::AgentDef>, Option<String>), CliError> {
    let mut named: Vec<(String, PathBuf)> = Vec::new();
    for spec in &args.agents {
        let Some((name, file)) = spec.split_once('=') else {
            return Err(usage(format!("--agent {spec}: expected NAME=FILE")));
        };
        named.push((name.to_owned(), PathBuf::from(file)));
    }
    let first = named.first().map(|(n, _)| n.clone());
    if let Some(dir) = &args.agents_dir {
        let entries = std::fs::read_dir(dir).map_err(|e| usage(format!("--agents {}: {e}", dir.display())))?;
        let mut files = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| usage(format!("--agents {}: {e}", dir.display())))?.path();
            if path.extension().is_some_and(|x| x == "toml") && path.is_file() {
                files.push(path);
            }
        }
        files.sort();
        for path in files {
            let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            named.push((name, path));
        }
    }
    if named.is_empty() {
        return Err(usage(
            "reins worker runs only the agents its operator gives it: give one or more --agent NAME=FILE (or \
             --agents DIR)",
        ));
    }
    let mut agents = BTreeMap::new();
    for (name, path) in named {
        let def = load_agent(&name, &path)?;
        if agents.insert(name.clone(), def).is_some() {
            return Err(usage(format!("agent {name:?} is given twice")));
        }
    }
    let default = if agents.contains_key("default") {
        Some("default".to_owned())
    } else if first.is_some() {
        first
    } else if agents.len() == 1 {
        agents.keys().next().cloned()
    } else {
        None
    };
    Ok((agents, default))
}

/// `reins worker`.
pub async fn worker(args: WorkerArgs) -> Result<u8, CliError> {
    let mut keys = args.identity_keys.clone();
    if keys.is_empty() {
        if let Ok(k) = std::env::var("REINS_RESTATE_IDENTITY_KEY") {
            keys.extend(k.split(',').map(str::trim).filter(|k| !k.is_empty()).map(str::to_owned));
        }
    }
    if !args.listen.ip().is_loopback() && keys.is_empty() && !args.insecure {
        return Err(usage(format!(
            "--listen {}: not a loopback address, and no --identity-key: anyone who reaches it could run this \
             worker's agents (their tools and commands, with this worker's API keys). Give the Restate server's \
             --identity-key, or --insecure to serve it anyway",
            args.listen
        )));
    }
    let (agents, default_agent) = worker_agents(&args)?;
    let names: Vec<&str> = agents.keys().map(String::as_str).collect();
    let offered = format!(
        "agents {}{}",
        names.join(", "),
        default_agent.as_deref().map(|d| format!(" (default {d})")).unwrap_or_default()
    );
    let options = reins_restate::worker::WorkerOptions {
        identity_keys: keys,
        agents,
        default_agent,
        idle_timeout: args.idle_timeout,
    };
    // Refuses a bad key before it listens.
    reins_restate::worker::endpoint(&options).map_err(|e| usage(e.to_string()))?;
    let listener = reins_restate::worker::bind(args.listen).await.map_err(|e| usage(e.to_string()))?;
    let addr = listener.local_addr().map_err(|e| CliError::Internal(e.into()))?;
    crate::telemetry::start(&args.otlp)?;
    let listen = |kind: SignalKind| {
        signal(kind).map_err(|e| CliError::Internal(anyhow::anyhow!("cannot listen for signals: {e}")))
    };
    let (mut int, mut term, mut hup) =
        (listen(SignalKind::interrupt())?, listen(SignalKind::terminate())?, listen(SignalKind::hangup())?);
    errln!(
        "reins worker: serving Restate on {addr} with {offered}{} (register it: POST <admin>/deployments {{\"uri\": \"http://{addr}\"}})",
        if options.identity_keys.is_empty() { "" } else { ", request identity verified" }
    );
    if !addr.ip().is_loopback() && options.identity_keys.is_empty() {
        errln!(
            "reins worker: insecure: {addr} is not loopback and requests are not verified: anyone who reaches it can \
             run these agents"
        );
    }
    let shutdown = async {
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
            _ = hup.recv() => "SIGHUP",
        };
        errln!(
            "reins worker: {name} received: handing the turns under way back to Restate (they continue on another worker)"
        );
    };
    reins_restate::worker::serve(listener, &options, shutdown).await.map_err(|e| usage(e.to_string()))?;
    Ok(0)
}

/// What `reins submit` changes of the agent (checked here as the worker checks it).
fn submit_overrides(args: &SubmitArgs) -> Result<Overrides, CliError> {
    let mut limits = serde_json::Map::new();
    if let Some(n) = args.max_steps {
        limits.insert("max_steps".into(), n.into());
    }
    if let Some(n) = args.max_tool_calls {
        limits.insert("max_tool_calls".into(), n.into());
    }
    if let Some(usd) = args.max_cost_usd {
        limits.insert("max_cost_usd".into(), usd.into());
    }
    if let Some(t) = &args.timeout {
        limits.insert("timeout".into(), t.clone().into());
    }
    let mut v = serde_json::json!({ "limits": limits });
    if let Some(i) = &args.instructions {
        v["instructions"] = i.clone().into();
    }
    Overrides::from_json(v).map_err(|e| usage(format!("reins submit: {e}")))
}

/// `reins submit`.
pub async fn submit(args: SubmitArgs) -> Result<u8, CliError> {
    if let Some(name) = &args.agent {
        if !is_valid_agent_name(name) {
            return Err(usage(format!(
                "--agent {name}: a durable run names one of its workers' agents (1 to 64 of A-Za-z0-9_-); a \
                 worker runs only the agents its operator gave it (reins worker --agent NAME=FILE), and no agent \
                 file is sent"
            )));
        }
    }
    let overrides = submit_overrides(&args)?;
    let agent = args.agent.clone();
    let client = args.restate.client();
    let session = match &args.session {
        Some(id) => {
            // A follow-up goes to a session that exists: one that finished a turn, or has one under way.
            match client.last(id).await {
                Ok(Some(_)) => {}
                Ok(None) if args.agent.is_some() => {}
                Ok(None) => match client.find(id).await {
                    Ok(_) => {}
                    Err(e) => return client_err(e),
                },
                Err(e) => return client_err(e),
            }
            id.clone()
        }
        None => new_id(),
    };
    let request = TurnRequest { run_id: new_id(), prompt: args.prompt.clone(), agent, overrides };
    let submitted = match client.submit(&session, &request).await {
        Ok(s) => s,
        Err(e) => return client_err(e),
    };
    if args.json {
        jsonln!("{}", serde_json::json!({"session": submitted.session, "run": submitted.run_id}));
    } else {
        outln!("session {}", submitted.session);
        outln!("run {}", submitted.run_id);
    }
    crate::output::flush_stdout();
    if !args.wait {
        return Ok(0);
    }
    match client.wait(&submitted.session, &submitted.run_id).await {
        Ok(outcome) => show_outcome(&outcome, args.json, args.output.as_ref()),
        Err(e) => client_err(e),
    }
}

/// `reins status`.
pub async fn status(args: IdArgs) -> Result<u8, CliError> {
    let client = args.restate.client();
    let (found, awaiting) = match find_waiting(&client, &args.id).await {
        Ok(f) => f,
        Err(e) => return client_err(e),
    };
    let state = match (&found.status[..], &found.failure) {
        ("completed", Some(f)) => format!("failed: {f}"),
        ("completed", None) => match client.result(&found).await {
            Ok(o) => format!("finished: {}", o.status),
            Err(e) => return client_err(e),
        },
        _ if awaiting.is_some() => "awaiting_approval".to_owned(),
        (s, _) => s.to_owned(),
    };
    if args.json {
        let mut v = serde_json::json!({"run": found.run_id, "session": found.session, "invocation": found.invocation_id, "state": state});
        if let Some(a) = &awaiting {
            v["invocation_status"] = found.status.clone().into();
            v["awaiting"] = serde_json::to_value(&a.request.calls).map_err(|e| CliError::Internal(e.into()))?;
            if let Some(p) = &a.problem {
                v["problem"] = p.clone().into();
            }
        }
        jsonln!("{v}");
    } else {
        outln!("run {}", found.run_id);
        outln!("session {}", found.session);
        outln!("state {state}");
        if let Some(a) = &awaiting {
            show_waiting(a);
        }
    }
    Ok(0)
}

/// `reins result`.
pub async fn result(args: IdArgs) -> Result<u8, CliError> {
    let client = args.restate.client();
    let found = match client.find(&args.id).await {
        Ok(f) => f,
        Err(e) => return client_err(e),
    };
    match client.result(&found).await {
        Ok(outcome) => show_outcome(&outcome, args.json, args.output.as_ref()),
        Err(e) => client_err(e),
    }
}

/// `reins cancel`.
pub async fn cancel(args: IdArgs) -> Result<u8, CliError> {
    let client = args.restate.client();
    let found = match client.find(&args.id).await {
        Ok(f) => f,
        Err(e) => return client_err(e),
    };
    if found.status == "completed" {
        outln!("run {} had already finished", found.run_id);
        return Ok(0);
    }
    match client.cancel(&found).await {
        Ok(()) => {
            outln!("run {} cancelled: it ends aborted at its next step", found.run_id);
            Ok(0)
        }
        Err(e) => client_err(e),
    }
}
