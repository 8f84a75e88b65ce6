//! Sessions: the store flags of `reins run` (`--store`, `--no-store`, `--resume`), `reins sessions
//! list|show|export` and `reins replay`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use reins::{AgentBuilder, CharCounter, ContextConfig, Event, Message, RunState, TokenCounter};
use reins_store::{ReplayTools, Session, SessionMeta, Store, kind};
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, usage};
use crate::run::RunArgs;

/// The store flag of the session commands.
#[derive(Args, Debug, Clone, Default)]
pub struct StoreFlag {
    /// The session store (default: $REINS_STORE, else ~/.local/share/reins/sessions.db).
    #[arg(long, value_name = "PATH")]
    pub store: Option<PathBuf>,
}

/// The session flags of `reins run`.
#[derive(Args, Debug, Clone, Default)]
pub struct RunStoreFlags {
    /// The session store every run is recorded in (default: $REINS_STORE, else
    /// ~/.local/share/reins/sessions.db).
    #[arg(long, value_name = "PATH", conflicts_with = "no_store")]
    pub store: Option<PathBuf>,
    /// Does not record the run.
    #[arg(long)]
    pub no_store: bool,
    /// Continues the recorded session ID (an id or a unique prefix); the prompt, if given, is the follow-up.
    #[arg(long, value_name = "ID", conflicts_with = "no_store")]
    pub resume: Option<String>,
}

/// `reins sessions`.
#[derive(Args, Debug)]
pub struct SessionsArgs {
    #[command(subcommand)]
    command: SessionsCommand,
}

#[derive(Subcommand, Debug)]
enum SessionsCommand {
    /// Lists the recorded sessions, newest first: id, start time, model, status, steps, tokens, cost.
    List {
        #[command(flatten)]
        store: StoreFlag,
        /// One JSON object per session, a line each.
        #[arg(long)]
        json: bool,
    },
    /// Shows a session: its runs and transcript, readable (`--json` for machines).
    Show {
        /// The session id, or a unique prefix of it.
        id: String,
        #[command(flatten)]
        store: StoreFlag,
        /// The whole session (summary and every log entry) as one JSON object.
        #[arg(long)]
        json: bool,
        /// Also shows the recorded events.
        #[arg(long)]
        events: bool,
    },
    /// Writes a session as JSON lines: a `session` line, then one line per log entry.
    Export {
        /// The session id, or a unique prefix of it.
        id: String,
        #[command(flatten)]
        store: StoreFlag,
    },
    /// Writes a consistent copy of the whole store to FILE (SQLite's online backup; runs may go on
    /// meanwhile). FILE must not exist (exit 2 if it does); it is created readable by its owner only.
    Backup {
        /// The new file.
        file: PathBuf,
        #[command(flatten)]
        store: StoreFlag,
    },
}

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
    /// The report as JSON.
    #[arg(long)]
    pub json: bool,
}

fn store_path(flag: Option<&Path>) -> Result<PathBuf, CliError> {
    if let Some(p) = flag {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("REINS_STORE").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    reins_store::default_path().map_err(|e| usage(e.to_string()))
}

/// The stores this process opened, closed by [`close_stores`] before it exits.
static OPENED: std::sync::Mutex<Vec<Store>> = std::sync::Mutex::new(Vec::new());

fn open(flag: Option<&Path>) -> Result<Store, CliError> {
    let path = store_path(flag)?;
    let store = Store::open(&path).map_err(store_err)?;
    OPENED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(store.clone());
    Ok(store)
}

/// Closes every store the command opened, whatever way it ends (a run that ended, an error, a
/// subcommand): waits for the runs' writers to hand their connections back, then checkpoints the
/// write-ahead log into the store file, so that the file alone holds every session. A failure is a
/// warning: what was not checkpointed is still safe in the `-wal` file beside the store.
pub fn close_stores() {
    let stores = std::mem::take(&mut *OPENED.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    for store in stores {
        if let Err(e) = store.close() {
            errln!("reins: warning: closing the session store: {e}");
        }
    }
}

fn store_err(e: reins_store::StoreError) -> CliError {
    use reins_store::StoreError as E;
    match e {
        E::NotFound(_) | E::Ambiguous { .. } | E::Resume { .. } | E::Exists { .. } | E::IsDirectory { .. } => {
            usage(e.to_string())
        }
        other => CliError::Internal(anyhow::anyhow!(other)),
    }
}

/// What a run records about its configuration, so that a replay can rebuild it.
fn run_config(args: &RunArgs) -> serde_json::Value {
    serde_json::json!({
        "model": args.model,
        "test_tools": args.test_tools,
        "workspace": args.tools.workspace.as_ref().and_then(|w| std::fs::canonicalize(w).ok()).map(|w| w.display().to_string()),
        "max_tool_result_chars": args.max_tool_result_chars,
        "max_context_chars": args.max_context_chars,
        "max_context_tokens": args.max_context_tokens,
    })
}

/// The list prices of a provider model, when known (a session's cost stays unknown otherwise).
fn prices(spec: &str) -> Option<reins_store::Prices> {
    let (_, model) = reins_providers::Api::parse_spec(spec).ok()?;
    let p = reins_providers::model_info(&model)?.price;
    Some(reins_store::Prices {
        input_per_mtok: p.input,
        output_per_mtok: p.output,
        cached_input_per_mtok: p.cached_input,
    })
}

/// Adds the session journal to a `reins run` agent (unless `--no-store`).
pub fn attach(builder: AgentBuilder, args: &RunArgs) -> Result<AgentBuilder, CliError> {
    let flags = &args.store;
    if flags.no_store {
        return Ok(builder);
    }
    let store = open(flags.store.as_deref())?;
    let config = run_config(args);
    let meta = SessionMeta {
        model: Some(args.model.clone()),
        workspace: config["workspace"].as_str().map(str::to_owned),
        prices: prices(&args.model),
        config: Some(config),
    };
    let journal = match &flags.resume {
        None => store.journal(meta),
        Some(id) => {
            let session = store.load(id).map_err(store_err)?;
            store.resume_journal(&session, meta).map_err(store_err)?
        }
    };
    Ok(builder.journal(journal))
}

/// For `reins run --resume ID [FOLLOW-UP]`: the rebuilt and reconciled run state. It keeps the
/// instructions the session's last run recorded, unless this command gives some (a workspace preamble,
/// `AGENTS.md`, `--instructions`), which replace them.
pub fn resume_state(
    args: &RunArgs,
    follow_up: Option<&str>,
    agent: &reins::Agent,
) -> Result<Option<RunState>, CliError> {
    let Some(id) = &args.store.resume else {
        return Ok(None);
    };
    let session = open(args.store.store.as_deref())?.load(id).map_err(store_err)?;
    let mut state = session.resume_state(agent.limits().clone(), agent.context(), follow_up).map_err(store_err)?;
    if let Some(text) = agent.instructions() {
        state.set_instructions(Some(text.into()), agent.context());
    }
    Ok(Some(state))
}

/// `reins sessions ...`.
pub fn sessions(args: SessionsArgs) -> Result<u8, CliError> {
    match args.command {
        SessionsCommand::List { store, json } => list(&open(store.store.as_deref())?, json),
        SessionsCommand::Show { id, store, json, events } => {
            let session = open(store.store.as_deref())?.load(&id).map_err(store_err)?;
            if json {
                let v = serde_json::json!({"session": session.summary, "entries": session.entries});
                jsonln!("{}", serde_json::to_string_pretty(&v).map_err(|e| CliError::Internal(e.into()))?);
            } else {
                show(&session, events);
            }
            Ok(0)
        }
        SessionsCommand::Export { id, store } => {
            let session = open(store.store.as_deref())?.load(&id).map_err(store_err)?;
            let mut out = String::new();
            for line in session.export_lines() {
                out.push_str(&line);
                out.push('\n');
            }
            crate::output::stdout_raw(&out);
            Ok(0)
        }
        SessionsCommand::Backup { file, store } => {
            let store = open(store.store.as_deref())?;
            store.backup(&file).map_err(store_err)?;
            errln!("reins: backed up {} to {}", store.path().display(), file.display());
            Ok(0)
        }
    }
}

fn list(store: &Store, json: bool) -> Result<u8, CliError> {
    let sessions = store.list().map_err(store_err)?;
    if json {
        for s in &sessions {
            jsonln!("{}", serde_json::to_string(s).map_err(|e| CliError::Internal(e.into()))?);
        }
        return Ok(0);
    }
    if sessions.is_empty() {
        errln!("no sessions in {}", store.path().display());
        return Ok(0);
    }
    outln!(
        "{:<36}  {:<20}  {:<24}  {:<13}  {:>5}  {:>10}  {:>9}",
        "ID",
        "STARTED",
        "MODEL",
        "STATUS",
        "STEPS",
        "TOKENS",
        "COST"
    );
    for s in &sessions {
        let started: String = s.created_at.chars().take(19).collect::<String>().replace('T', " ");
        let tokens = if s.calls_without_usage > 0 && s.input_tokens + s.output_tokens == 0 {
            "?".to_owned()
        } else {
            format!("{}{}", s.input_tokens + s.output_tokens, if s.calls_without_usage > 0 { "+?" } else { "" })
        };
        let cost = s.cost_usd.map_or_else(|| "-".to_owned(), |c| format!("${c:.4}"));
        let model: String = one_line(s.model.as_deref().unwrap_or("-")).chars().take(24).collect();
        outln!(
            "{:<36}  {:<20}  {:<24}  {:<13}  {:>5}  {:>10}  {:>9}",
            s.id,
            started,
            model,
            one_line(&s.status),
            s.steps,
            tokens,
            cost
        );
    }
    Ok(0)
}

fn show(session: &Session, events: bool) {
    let s = &session.summary;
    outln!("session {}", s.id);
    outln!("  started {} · updated {}", s.created_at, s.updated_at);
    outln!(
        "  model {} · workspace {}",
        one_line(s.model.as_deref().unwrap_or("-")),
        one_line(s.workspace.as_deref().unwrap_or("-"))
    );
    outln!(
        "  {} · {} run(s) · {} step(s) · {} tool call(s) · {} in / {} out tokens{} · cost {}",
        s.status,
        s.runs,
        s.steps,
        s.tool_calls,
        s.input_tokens,
        s.output_tokens,
        if s.calls_without_usage > 0 {
            format!(" ({} call(s) without usage)", s.calls_without_usage)
        } else {
            String::new()
        },
        s.cost_usd.map_or_else(|| "unknown".to_owned(), |c| format!("${c:.4}"))
    );
    for e in &session.entries {
        match e.kind.as_str() {
            kind::RUN_START => outln!("\n── run {} · {} · {}", e.run, e.data["run_id"].as_str().unwrap_or("?"), e.ts),
            kind::MESSAGE => match serde_json::from_value::<Message>(e.data.clone()) {
                Ok(m) => print_message(e.msg_index.unwrap_or(0), &m),
                Err(err) => outln!("  [{}] unreadable item: {err}", e.msg_index.unwrap_or(0)),
            },
            kind::RESPONSE => {
                if let Some(err) = e.data["error"].as_str() {
                    outln!("  ✗ model error: {}", crate::render::preview(err));
                }
            }
            kind::EVENT if events => {
                let line = serde_json::to_string(&e.data).ok().and_then(|l| Event::from_json(&l).ok());
                if let Some(line) = line.as_ref().and_then(crate::render::progress_line) {
                    outln!("  · {}", line.trim_start());
                }
            }
            kind::RUN_END => {
                let d = &e.data;
                outln!(
                    "■ {} · {} step(s) · {} tool call(s){}",
                    d["status"].as_str().unwrap_or("?"),
                    d["steps"],
                    d["tool_calls"],
                    d["error"].as_str().map(|e| format!(" · {}", one_line(e))).unwrap_or_default()
                );
            }
            _ => {}
        }
    }
    if s.status == "running" {
        outln!(
            "(no end recorded: the run is still going, or its process died; `reins run --resume {}` continues it)",
            s.id
        );
    }
}

/// A recorded field on one line, escaped.
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    crate::output::escape(s, crate::output::Lines::Join)
}

fn print_message(index: u64, m: &Message) {
    use crate::render::preview;
    match m {
        Message::User { content } => outln!("  [{index}] user: {}", preview(content)),
        Message::Assistant { content, tool_calls } => {
            if !content.is_empty() || tool_calls.is_empty() {
                outln!("  [{index}] assistant: {}", preview(content));
            } else {
                outln!("  [{index}] assistant:");
            }
            for c in tool_calls {
                outln!("        → {} {} ({})", one_line(&c.name), preview(&c.arguments.to_string()), one_line(&c.id));
            }
        }
        Message::ToolResult(r) => {
            let mark = if r.is_error { "error" } else { "ok" };
            outln!("  [{index}] ← {} [{mark}] {}", one_line(&r.call_id), preview(&r.content));
        }
    }
}

/// Copies `from` into the existing directory `to` (files, directories as private directories, symlinks as
/// links), stopping early with `Interrupted` once `cancel` fires.
fn copy_tree(from: &Path, to: &Path, cancel: &CancellationToken) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    for entry in std::fs::read_dir(from)? {
        if cancel.is_cancelled() {
            return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "cancelled"));
        }
        let entry = entry?;
        let ty = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if ty.is_dir() {
            std::fs::DirBuilder::new().mode(0o700).create(&dest)?;
            copy_tree(&entry.path(), &dest, cancel)?;
        } else if ty.is_symlink() {
            let target = std::fs::read_link(entry.path())?;
            std::os::unix::fs::symlink(target, &dest)?;
        } else if ty.is_file() {
            std::fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
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

/// The context rules a run recorded (`tiktoken`: the tokenizer, built once for all runs that count tokens).
fn replay_context(
    config: &serde_json::Value,
    tiktoken: &mut Option<Arc<dyn TokenCounter>>,
) -> Result<ContextConfig, CliError> {
    let max_tool_result_chars = config["max_tool_result_chars"].as_u64().unwrap_or(32_000);
    let (max_context, counter): (Option<u64>, Arc<dyn TokenCounter>) = match config["max_context_tokens"].as_u64() {
        Some(t) => {
            let counter = match tiktoken {
                Some(c) => c.clone(),
                None => {
                    let c: Arc<dyn TokenCounter> = Arc::new(
                        reins::TiktokenCounter::o200k_base().map_err(|e| CliError::Internal(anyhow::anyhow!(e)))?,
                    );
                    tiktoken.insert(c).clone()
                }
            };
            (Some(t), counter)
        }
        None => (config["max_context_chars"].as_u64(), Arc::new(CharCounter)),
    };
    Ok(ContextConfig {
        max_context,
        max_tool_result_chars: Some(usize::try_from(max_tool_result_chars).unwrap_or(usize::MAX)),
        counter,
    })
}

/// A replay stopped by a signal: its scratch copy removed, exit 7.
fn cancelled_replay(scratch: Option<Scratch>) -> u8 {
    let removed = if scratch.is_some() { "; its scratch copy was removed" } else { "" };
    drop(scratch);
    errln!("reins: the replay was cancelled{removed}");
    7
}

/// `reins replay ID`.
pub async fn replay(args: ReplayArgs) -> Result<u8, CliError> {
    let cancel = CancellationToken::new();
    crate::signals::cancel_on_signals(cancel.clone(), "the replay")?;
    let session = open(args.store.store.as_deref())?.load(&args.id).map_err(store_err)?;
    let runs = session.runs().map_err(store_err)?;
    // Each run replays with the settings it recorded: a resume may have changed them.
    let configs: Vec<serde_json::Value> =
        runs.iter().map(|r| r.start.config.clone().unwrap_or(serde_json::Value::Null)).collect();
    let mut scratch = None;
    let mut workspace_tools = Vec::new();
    if !args.no_tools {
        let mut flags = crate::tools_cli::ToolFlags::default();
        // One scratch copy for the whole session (a run continues in what the runs before it left): of
        // --workspace, else of the first workspace a run recorded.
        let workspace =
            args.workspace.clone().or_else(|| configs.iter().find_map(|c| c["workspace"].as_str().map(PathBuf::from)));
        if let Some(ws) = workspace {
            if !ws.is_dir() {
                return Err(usage(format!(
                    "the workspace {} is not a directory: pass --workspace DIR, or --no-tools to replay the recorded results",
                    ws.display()
                )));
            }
            let guard = Scratch::create().map_err(|e| {
                CliError::Internal(anyhow::anyhow!("creating the scratch directory for the replay: {e}"))
            })?;
            let (from, to, stop) = (ws.clone(), guard.0.clone(), cancel.clone());
            let copied = tokio::task::spawn_blocking(move || copy_tree(&from, &to, &stop))
                .await
                .map_err(|e| CliError::Internal(anyhow::anyhow!("copying the workspace: {e}")))?;
            if cancel.is_cancelled() {
                return Ok(cancelled_replay(Some(guard)));
            }
            copied.map_err(|e| {
                CliError::Internal(anyhow::anyhow!("copying the workspace {} for the replay: {e}", ws.display()))
            })?;
            flags.workspace = Some(guard.0.clone());
            scratch = Some(guard);
        }
        workspace_tools = crate::tools_cli::build_tools(&flags)?;
    }
    let mut tiktoken: Option<Arc<dyn TokenCounter>> = None;
    let mut settings = Vec::with_capacity(configs.len());
    for config in &configs {
        let tools = if args.no_tools {
            ReplayTools::Recorded
        } else {
            let mut list = Vec::new();
            if config["test_tools"].as_bool().unwrap_or(false) {
                list.extend(crate::test_tools::tools());
            }
            list.extend(workspace_tools.iter().cloned());
            ReplayTools::Live(Arc::new(reins::Registry::new(list).map_err(|e| usage(e.to_string()))?))
        };
        settings.push((tools, replay_context(config, &mut tiktoken)?));
    }
    let replayed = reins_store::replay_runs(&session, |run| {
        let k = usize::try_from(run.number.saturating_sub(1)).unwrap_or(usize::MAX);
        settings.get(k).cloned().unwrap_or_else(|| (ReplayTools::Recorded, ContextConfig::default()))
    });
    let report = tokio::select! {
        report = replayed => report.map_err(store_err)?,
        // The replay's tool calls are dropped with it (their process groups killed).
        () = cancel.cancelled() => return Ok(cancelled_replay(scratch)),
    };
    drop(scratch);
    if args.json {
        jsonln!("{}", serde_json::to_string(&report).map_err(|e| CliError::Internal(e.into()))?);
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
    Ok(if report.divergence.is_some() { 10 } else { 0 })
}
