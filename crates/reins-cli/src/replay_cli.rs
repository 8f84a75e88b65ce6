//! `reins replay ID`: a recorded session re-run offline (its recorded model responses; its tools in a scratch
//! copy of the workspace, or their recorded results) and the first divergence reported.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use reins_agent::AgentDef;
use reins_store::{ReplayTools, Session};
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, usage};
use crate::store_open::{StoreFlag, open_store, store_err};

/// `reins replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The session id, or a unique prefix of it.
    pub id: String,
    #[command(flatten)]
    pub store: StoreFlag,
    /// Replays the recorded tool results instead of running the tools.
    #[arg(long)]
    pub no_tools: bool,
    /// The workspace to copy for the replay (default: the one recorded). The tools run in a scratch
    /// copy; the original is never touched.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// The most the scratch copy's files may come to, counted at their full sizes (sparse files too): 1GiB by
    /// default; a size in bytes or with KiB/MiB/GiB/TiB (or KB/MB/GB/TB). More is refused, nothing left behind.
    #[arg(long, value_name = "SIZE", value_parser = crate::scratch_copy::parse_size)]
    pub max_copy: Option<u64>,
    /// The report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The scratch copy of a replay's workspace: a fresh private (0700) directory under the temp dir, removed on
/// every way out (an error, a signal, even a second signal that exits at once).
struct Scratch(PathBuf);

impl Scratch {
    fn create() -> std::io::Result<Scratch> {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::Builder::new()
            .prefix("reins-replay-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?
            .keep();
        crate::signals::remove_on_exit(&dir);
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        crate::signals::remove_dir(&self.0);
        crate::signals::keep_on_exit(&self.0);
    }
}

/// A replay stopped by a signal: its scratch copy removed, exit 7.
fn cancelled_replay(scratch: Option<Scratch>) -> u8 {
    let removed = if scratch.is_some() { "; its scratch copy was removed" } else { "" };
    drop(scratch);
    errln!("reins: the replay was cancelled{removed}");
    7
}

/// `reins replay ID`: each run's recorded agent rebuilt (test tools, workspace tools over one scratch copy of
/// the workspace, presets, MCP servers, context rules) and driven by the recorded responses.
pub async fn replay(args: ReplayArgs) -> Result<u8, CliError> {
    let cancel = CancellationToken::new();
    crate::signals::cancel_on_signals(cancel.clone(), "the replay")?;
    let session = open_store(args.store.store.as_deref())?.load(&args.id).map_err(store_err)?;
    let defs = recorded_defs(&session)?;
    let mut scratch = None;
    if !args.no_tools {
        // One scratch copy for the whole session (a run continues in what the runs before it left): of
        // --workspace, else of the first workspace a run recorded.
        let workspace = args.workspace.clone().or_else(|| defs.iter().find_map(|d| d.workspace.path.clone()));
        if let Some(ws) = workspace {
            match scratch_copy(&ws, &args, &cancel).await? {
                ControlFlow::Continue(guard) => scratch = Some(guard),
                ControlFlow::Break(code) => return Ok(code),
            }
        }
    }
    let mut servers = Vec::new();
    let settings = replay_settings(defs, &args, scratch.as_ref(), &mut servers).await?;
    let replayed = reins_store::replay_runs(&session, |run| {
        let k = usize::try_from(run.number.saturating_sub(1)).unwrap_or(usize::MAX);
        settings.get(k).cloned().unwrap_or_else(|| (ReplayTools::Recorded, reins::ContextConfig::default()))
    });
    let report = tokio::select! {
        report = replayed => report,
        // The replay's tool calls are dropped with it (their process groups killed).
        () = cancel.cancelled() => {
            for m in &servers {
                crate::mcp_servers::finish(Some(m)).await;
            }
            return Ok(cancelled_replay(scratch));
        }
    };
    for m in &servers {
        crate::mcp_servers::finish(Some(m)).await;
    }
    let report = report.map_err(store_err)?;
    drop(scratch);
    print_report(&report, args.json)?;
    Ok(if report.divergence.is_some() { 10 } else { 0 })
}

/// The agent each run of `session` recorded: a resume may have changed it. A run recorded by a library user
/// without a definition replays with the default context rules.
fn recorded_defs(session: &Session) -> Result<Vec<AgentDef>, CliError> {
    let runs = session.runs().map_err(store_err)?;
    let mut defs = Vec::with_capacity(runs.len());
    for run in &runs {
        let config = run.start.config.clone().unwrap_or(serde_json::Value::Null);
        let def = AgentDef::from_session_config(&config)
            .map_err(|e| usage(format!("session {}, run {}: {e}", session.id(), run.number)))?;
        defs.push(def.unwrap_or_default());
    }
    Ok(defs)
}

/// The scratch copy of the workspace `ws` the replay's tools run in; a signal meanwhile removes it and ends the
/// replay (`Break` with its exit code).
async fn scratch_copy(
    ws: &Path,
    args: &ReplayArgs,
    cancel: &CancellationToken,
) -> Result<ControlFlow<u8, Scratch>, CliError> {
    if !ws.is_dir() {
        return Err(usage(format!(
            "the workspace {} is not a directory: pass --workspace DIR, or --no-tools to replay the recorded results",
            ws.display()
        )));
    }
    let guard = Scratch::create()
        .map_err(|e| CliError::Internal(anyhow::anyhow!("creating the scratch directory for the replay: {e}")))?;
    let (from, to, stop) = (ws.to_path_buf(), guard.0.clone(), cancel.clone());
    let max = args.max_copy.unwrap_or(crate::scratch_copy::DEFAULT_MAX_COPY_BYTES);
    let copied = tokio::task::spawn_blocking(move || crate::scratch_copy::copy_tree(&from, &to, max, &stop))
        .await
        .map_err(|e| CliError::Internal(anyhow::anyhow!("copying the workspace: {e}")))?;
    if cancel.is_cancelled() {
        return Ok(ControlFlow::Break(cancelled_replay(Some(guard))));
    }
    // On an error the scratch copy is removed (the guard is dropped).
    copied.map_err(|e| {
        use crate::scratch_copy::CopyError;
        let message = format!("copying the workspace {} for the replay: {e}", ws.display());
        match e {
            CopyError::Io(..) | CopyError::Cancelled => CliError::Internal(anyhow::anyhow!(message)),
            CopyError::TooLarge { .. } | CopyError::Changed(_) | CopyError::TooDeep(_) => usage(message),
        }
    })?;
    Ok(ControlFlow::Continue(guard))
}

/// Each run's tools (the recorded results with `--no-tools`, else its tools live over the scratch copy, its MCP
/// servers started into `servers`) and context rules.
async fn replay_settings(
    defs: Vec<AgentDef>,
    args: &ReplayArgs,
    scratch: Option<&Scratch>,
    servers: &mut Vec<Arc<reins_mcp::McpTools>>,
) -> Result<Vec<(ReplayTools, reins::ContextConfig)>, CliError> {
    let mut settings = Vec::with_capacity(defs.len());
    for mut def in defs {
        let context = def.build_context().map_err(crate::resolve::build_err)?;
        let tools = if args.no_tools {
            ReplayTools::Recorded
        } else {
            if def.workspace.path.is_some() || args.workspace.is_some() {
                def.workspace.path = scratch.map(|s: &Scratch| s.0.clone());
            }
            def.check_secrets().map_err(crate::resolve::build_err)?;
            let list = def.build_tools().map_err(crate::resolve::build_err)?;
            let mcp = match def.start_mcp().await {
                Ok(m) => m,
                Err(e) => {
                    for m in servers.iter() {
                        crate::mcp_servers::finish(Some(m)).await;
                    }
                    return Err(crate::resolve::build_err(e));
                }
            };
            let registry = match &mcp {
                Some(m) => m.registry(list).map_err(|e| usage(e.to_string())),
                None => reins::Registry::new(list).map_err(|e| usage(e.to_string())),
            };
            servers.extend(mcp);
            ReplayTools::Live(Arc::new(registry?))
        };
        settings.push((tools, context));
    }
    Ok(settings)
}

/// The replay's report: one line, or JSON.
fn print_report(report: &reins_store::ReplayReport, json: bool) -> Result<(), CliError> {
    if json {
        jsonln!("{}", serde_json::to_string(report).map_err(|e| CliError::Internal(e.into()))?);
    } else {
        match &report.divergence {
            None => outln!(
                "replay of session {}: identical ({} run(s), {} step(s){})",
                report.session_id,
                report.runs,
                report.steps,
                if report.unfinished_runs.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; runs {:?} had no recorded end and were compared up to their last item",
                        report.unfinished_runs
                    )
                }
            ),
            Some(d) => outln!("replay of session {}: DIVERGED\n{d}", report.session_id),
        }
    }
    Ok(())
}
