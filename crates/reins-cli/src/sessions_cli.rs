//! Sessions: the store flags of `reins run` (`--store`, `--no-store`, `--resume`, `--continue`), `reins
//! sessions list|show|view|export|backup|rm|prune` and `reins replay`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use reins::{Event, Message};
use reins_agent::AgentDef;
use reins_store::{ReplayTools, Session, Store, kind};
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, usage};

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
    /// Continues the most recent session: the newest recorded in this workspace (--workspace, else the
    /// current directory), else the newest of all. The prompt, if given, is the follow-up.
    #[arg(long = "continue", conflicts_with_all = ["no_store", "resume"])]
    pub continue_last: bool,
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
    /// Writes a session as one self-contained HTML page: its runs on a time axis, tokens and cost per step,
    /// the transcript (no network access; works from file://).
    View(crate::view_cli::ViewArgs),
    /// Writes a session as JSON lines: a `session` line, then one line per log entry.
    Export {
        /// The session id, or a unique prefix of it.
        id: String,
        #[command(flatten)]
        store: StoreFlag,
    },
    /// Deletes sessions (ids or unique prefixes): each one's summary and whole log. A session whose run is
    /// still going is refused (exit 2), the others deleted.
    Rm {
        /// The sessions to delete.
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
        #[command(flatten)]
        store: StoreFlag,
    },
    /// Deletes every session last written longer ago than --older-than (running sessions are kept).
    Prune {
        /// The age past which a session goes, e.g. 30d, 12h, 2w.
        #[arg(long, value_name = "AGE", value_parser = reins_agent::parse_duration)]
        older_than: std::time::Duration,
        /// Lists what would be deleted, and deletes nothing.
        #[arg(long)]
        dry_run: bool,
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
    /// The most the scratch copy's files may come to, counted at their full sizes (sparse files too): 1GiB by
    /// default; a size in bytes or with KiB/MiB/GiB/TiB (or KB/MB/GB/TB). More is refused, nothing left behind.
    #[arg(long, value_name = "SIZE", value_parser = crate::scratch_copy::parse_size)]
    pub max_copy: Option<u64>,
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

/// Opens the store `flag` names (else `$REINS_STORE`, else the default), closed by [`close_stores`] at exit.
pub fn open_store(flag: Option<&Path>) -> Result<Store, CliError> {
    open(flag)
}

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

/// A store error as the command reports it: an unknown or ambiguous id or a session that cannot be resumed is
/// bad input (exit 2), anything else internal (exit 1).
pub fn store_err(e: reins_store::StoreError) -> CliError {
    use reins_store::StoreError as E;
    match e {
        E::NotFound(_)
        | E::Ambiguous { .. }
        | E::Resume { .. }
        | E::Exists { .. }
        | E::IsDirectory { .. }
        | E::NotAFile { .. } => usage(e.to_string()),
        other => CliError::Internal(anyhow::anyhow!(other)),
    }
}

/// The store a `reins run` records in (`None` with `--no-store`).
pub fn run_store(flags: &RunStoreFlags) -> Result<Option<Store>, CliError> {
    if flags.no_store {
        return Ok(None);
    }
    open(flags.store.as_deref()).map(Some)
}

/// The session `--resume ID` (or `--continue`: see [`latest_session`]) continues.
pub fn resumed(
    store: Option<&Store>,
    flags: &RunStoreFlags,
    workspace: Option<&Path>,
) -> Result<Option<Session>, CliError> {
    let Some(store) = store else { return Ok(None) };
    let id = match (&flags.resume, flags.continue_last) {
        (Some(id), _) => id.clone(),
        (None, true) => latest_session(store, workspace)?,
        (None, false) => return Ok(None),
    };
    let session = store.load(&id).map_err(store_err)?;
    if session.summary.status == reins_store::INTERRUPTED_STATUS {
        errln!(
            "reins: session {} was interrupted (its process is gone without ending the run): resuming it; the calls it \
             left unanswered get an error result",
            session.id()
        );
    } else if session.summary.status == "running" {
        if let reins_store::Liveness::Running(pid) = reins_store::liveness(store.path(), session.id()) {
            let by = pid.map(|p| format!(" (process {p})")).unwrap_or_default();
            return Err(usage(format!(
                "session {} is still running{by}: wait for it to end, or stop it, before resuming it",
                session.id()
            )));
        }
    }
    Ok(Some(session))
}

/// The session `--continue` continues: the newest recorded in `workspace` (else the current directory), else
/// the newest of all (said on stderr).
fn latest_session(store: &Store, workspace: Option<&Path>) -> Result<String, CliError> {
    let sessions = store.list().map_err(store_err)?;
    let here = match workspace {
        Some(w) => Some(w.to_path_buf()),
        None => std::env::current_dir().ok(),
    };
    let here = here.map(|h| std::fs::canonicalize(&h).unwrap_or(h));
    let same = |s: &&reins_store::SessionSummary| {
        let (Some(here), Some(ws)) = (&here, &s.workspace) else { return false };
        let ws = PathBuf::from(ws);
        std::fs::canonicalize(&ws).unwrap_or(ws) == *here
    };
    if let Some(s) = sessions.iter().find(same) {
        return Ok(s.id.clone());
    }
    let Some(newest) = sessions.first() else {
        return Err(usage(format!("--continue: no session is recorded in {}", store.path().display())));
    };
    errln!(
        "reins: no session was recorded in this workspace: continuing the newest session, {} (workspace {})",
        newest.id,
        newest.workspace.as_deref().unwrap_or("none")
    );
    Ok(newest.id.clone())
}

/// `reins sessions rm`: deletes each session not running; exit 2 when one was refused or unknown.
fn remove(store: &Store, ids: &[String]) -> Result<u8, CliError> {
    let mut failed = false;
    for id in ids {
        match delete_one(store, id) {
            Ok(full) => outln!("deleted {full}"),
            Err(why) => {
                errln!("reins: error: {why}");
                failed = true;
            }
        }
    }
    Ok(if failed { 2 } else { 0 })
}

/// Deletes one session unless a run of it is still going.
fn delete_one(store: &Store, id: &str) -> Result<String, String> {
    let summary = store.resolve(id).and_then(|full| store.summary(&full)).map_err(|e| store_err_text(&e))?;
    if summary.status == "running"
        && let reins_store::Liveness::Running(pid) = reins_store::liveness(store.path(), &summary.id)
    {
        let by = pid.map(|p| format!(" (process {p})")).unwrap_or_default();
        return Err(format!("session {} is still running{by}: not deleted", summary.id));
    }
    store.delete(&summary.id).map_err(|e| store_err_text(&e))
}

fn store_err_text(e: &reins_store::StoreError) -> String {
    match e {
        reins_store::StoreError::NotFound(id) => format!("no session {id}"),
        e => e.to_string(),
    }
}

/// `reins sessions prune --older-than AGE`: deletes the sessions last written before now − AGE.
fn prune(store: &Store, older_than: std::time::Duration, dry_run: bool) -> Result<u8, CliError> {
    let cutoff = std::time::SystemTime::now().checked_sub(older_than).unwrap_or(std::time::UNIX_EPOCH);
    let mut count = 0usize;
    for s in store.list().map_err(store_err)? {
        let Ok(updated) = humantime::parse_rfc3339_weak(&s.updated_at) else { continue };
        if updated >= cutoff || s.status == "running" {
            continue;
        }
        if dry_run {
            outln!("would delete {} (last written {})", s.id, s.updated_at);
            count += 1;
            continue;
        }
        match delete_one(store, &s.id) {
            Ok(id) => {
                outln!("deleted {id} (last written {})", s.updated_at);
                count += 1;
            }
            Err(why) => errln!("reins: warning: {why}"),
        }
    }
    let verb = if dry_run { "would delete" } else { "deleted" };
    errln!("reins: {verb} {count} session(s) last written more than {} ago", humantime::format_duration(older_than));
    Ok(0)
}

/// The agent recorded with the last run of `session` (for a session recorded before agents were, the one its
/// recorded flags describe).
pub fn session_agent(session: &Session) -> Result<AgentDef, CliError> {
    recorded_def(session)?
        .ok_or_else(|| usage(format!("session {} recorded no agent: give the model and tools as flags", session.id())))
}

fn recorded_def(session: &Session) -> Result<Option<AgentDef>, CliError> {
    let runs = session.runs().map_err(store_err)?;
    let config = runs.last().and_then(|r| r.start.config.clone()).unwrap_or(serde_json::Value::Null);
    AgentDef::from_session_config(&config).map_err(|e| usage(format!("session {}: {e}", session.id())))
}

/// The id and recorded agent of session `id` (an id or a unique prefix) of the store.
pub fn recorded_agent(store: Option<&Path>, id: &str) -> Result<(String, AgentDef), CliError> {
    let session = open(store)?.load(id).map_err(store_err)?;
    Ok((session.id().to_owned(), session_agent(&session)?))
}

/// `reins sessions ...`.
pub fn sessions(args: SessionsArgs) -> Result<u8, CliError> {
    match args.command {
        SessionsCommand::List { store, json } => list(&open(store.store.as_deref())?, json),
        SessionsCommand::Show { id, store, json, events } => {
            let session = open(store.store.as_deref())?.load(&id).map_err(store_err)?;
            if json {
                let agent = recorded_def(&session)?.map(|d| d.to_json());
                let v = serde_json::json!({"session": session.summary, "agent": agent, "entries": session.entries});
                jsonln!("{}", serde_json::to_string_pretty(&v).map_err(|e| CliError::Internal(e.into()))?);
            } else {
                show(&session, events);
            }
            Ok(0)
        }
        SessionsCommand::View(args) => crate::view_cli::view(args),
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
        SessionsCommand::Rm { ids, store } => remove(&open(store.store.as_deref())?, &ids),
        SessionsCommand::Prune { older_than, dry_run, store } => {
            prune(&open(store.store.as_deref())?, older_than, dry_run)
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
        "{:<36}  {:<20}  {:<24}  {:<17}  {:>5}  {:>10}  {:>9}",
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
            "{:<36}  {:<20}  {:<24}  {:<17}  {:>5}  {:>10}  {:>9}",
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
    // How much of the input the prompt cache served, from the recorded responses' usage.
    let mut cache = reins::UsageTotals { input_tokens: s.input_tokens, ..Default::default() };
    for e in session.entries.iter().filter(|e| e.kind == kind::RESPONSE) {
        if let Ok(u) = serde_json::from_value::<reins::Usage>(e.data["response"]["usage"].clone()) {
            cache.cached_input_tokens = cache.cached_input_tokens.saturating_add(u.cached_input_tokens);
            cache.cache_write_tokens = cache.cache_write_tokens.saturating_add(u.cache_write_tokens);
        }
    }
    outln!(
        "  {} · {} run(s) · {} step(s) · {} tool call(s) · {} in{} / {} out tokens{} · cost {}",
        s.status,
        s.runs,
        s.steps,
        s.tool_calls,
        s.input_tokens,
        crate::render::cache_note(&cache),
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
            kind::CHILD_RUN_START => {
                let d = &e.data;
                outln!(
                    "    ▷ sub-agent {} · run {} (started by run {})",
                    one_line(d["agent"].as_str().unwrap_or("?")),
                    one_line(d["run_id"].as_str().unwrap_or("?")),
                    one_line(d["parent_run_id"].as_str().unwrap_or("?"))
                );
            }
            kind::CHILD_MESSAGE => {
                let index = e.data["index"].as_u64().unwrap_or(0);
                match serde_json::from_value::<Message>(e.data["message"].clone()) {
                    Ok(m) => print_message_at("      ", index, &m),
                    Err(err) => outln!("      [{index}] unreadable item: {err}"),
                }
            }
            kind::CHILD_RUN_END => {
                let d = &e.data;
                outln!(
                    "    ◁ {} · {} step(s) · {} tool call(s){}",
                    d["status"].as_str().unwrap_or("?"),
                    d["steps"],
                    d["tool_calls"],
                    d["error"].as_str().map(|e| format!(" · {}", one_line(e))).unwrap_or_default()
                );
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
    if s.status == reins_store::INTERRUPTED_STATUS {
        outln!("(interrupted: its process is gone without ending the run; `reins run --resume {}` continues it)", s.id);
    } else if s.status == "running" {
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
    print_message_at("  ", index, m);
}

/// A transcript item, after `pad` (a sub-agent's items are indented further).
fn print_message_at(pad: &str, index: u64, m: &Message) {
    use crate::render::preview;
    match m {
        Message::User { content, .. } => outln!("{pad}[{index}] user: {}", preview(content)),
        Message::Assistant { content, tool_calls, reasoning } => {
            if !content.is_empty() || tool_calls.is_empty() {
                outln!("{pad}[{index}] assistant: {}", preview(content));
            } else {
                outln!("{pad}[{index}] assistant:");
            }
            if !reasoning.is_empty() {
                outln!(
                    "{pad}      ({} reasoning item(s), sent back to {} only)",
                    reasoning.len(),
                    one_line(&reasoning[0].api)
                );
            }
            for c in tool_calls {
                outln!(
                    "{pad}      → {} {} ({})",
                    one_line(&c.name),
                    preview(&c.arguments.to_string()),
                    one_line(&c.id)
                );
            }
        }
        Message::ToolResult(r) => {
            let mark = if r.is_error { "error" } else { "ok" };
            outln!("{pad}[{index}] ← {} [{mark}] {}", one_line(&r.call_id), preview(&r.content));
        }
        Message::Summary { content, replaces } => {
            outln!("{pad}[{index}] ⇊ compaction: replaces {replaces} earlier items: {}", preview(content));
        }
    }
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
    let session = open(args.store.store.as_deref())?.load(&args.id).map_err(store_err)?;
    let runs = session.runs().map_err(store_err)?;
    // Each run replays with the agent it recorded: a resume may have changed it. A run recorded by a library
    // user without a definition replays with the default context rules.
    let mut defs = Vec::with_capacity(runs.len());
    for run in &runs {
        let config = run.start.config.clone().unwrap_or(serde_json::Value::Null);
        let def = AgentDef::from_session_config(&config)
            .map_err(|e| usage(format!("session {}, run {}: {e}", session.id(), run.number)))?;
        defs.push(def.unwrap_or_default());
    }
    let mut scratch = None;
    if !args.no_tools {
        // One scratch copy for the whole session (a run continues in what the runs before it left): of
        // --workspace, else of the first workspace a run recorded.
        let workspace = args.workspace.clone().or_else(|| defs.iter().find_map(|d| d.workspace.path.clone()));
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
            let max = args.max_copy.unwrap_or(crate::scratch_copy::DEFAULT_MAX_COPY_BYTES);
            let copied = tokio::task::spawn_blocking(move || crate::scratch_copy::copy_tree(&from, &to, max, &stop))
                .await
                .map_err(|e| CliError::Internal(anyhow::anyhow!("copying the workspace: {e}")))?;
            if cancel.is_cancelled() {
                return Ok(cancelled_replay(Some(guard)));
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
            scratch = Some(guard);
        }
    }
    let mut servers = Vec::new();
    let mut settings = Vec::with_capacity(defs.len());
    for mut def in defs {
        let context = def.build_context().map_err(crate::run::build_err)?;
        let tools = if args.no_tools {
            ReplayTools::Recorded
        } else {
            if def.workspace.path.is_some() || args.workspace.is_some() {
                def.workspace.path = scratch.as_ref().map(|s: &Scratch| s.0.clone());
            }
            def.check_secrets().map_err(crate::run::build_err)?;
            let list = def.build_tools().map_err(crate::run::build_err)?;
            let mcp = match def.start_mcp().await {
                Ok(m) => m,
                Err(e) => {
                    for m in &servers {
                        crate::mcp_cli::finish(Some(m)).await;
                    }
                    return Err(crate::run::build_err(e));
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
    let replayed = reins_store::replay_runs(&session, |run| {
        let k = usize::try_from(run.number.saturating_sub(1)).unwrap_or(usize::MAX);
        settings.get(k).cloned().unwrap_or_else(|| (ReplayTools::Recorded, reins::ContextConfig::default()))
    });
    let report = tokio::select! {
        report = replayed => report,
        // The replay's tool calls are dropped with it (their process groups killed).
        () = cancel.cancelled() => {
            for m in &servers {
                crate::mcp_cli::finish(Some(m)).await;
            }
            return Ok(cancelled_replay(scratch));
        }
    };
    for m in &servers {
        crate::mcp_cli::finish(Some(m)).await;
    }
    let report = report.map_err(store_err)?;
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
