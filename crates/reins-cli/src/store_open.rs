//! The session store as every command opens it: the store flags (`--store`, and `reins run`'s `--no-store`,
//! `--resume`, `--continue`), opening (closed again at exit), the session a run continues and the agent it
//! recorded, and store errors as a command reports them.

use std::path::{Path, PathBuf};

use clap::Args;
use reins_agent::AgentDef;
use reins_store::{Session, Store};

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
    open_store(flags.store.as_deref()).map(Some)
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

/// The agent recorded with the last run of `session` (for a session recorded before agents were, the one its
/// recorded flags describe).
pub fn session_agent(session: &Session) -> Result<AgentDef, CliError> {
    recorded_def(session)?
        .ok_or_else(|| usage(format!("session {} recorded no agent: give the model and tools as flags", session.id())))
}

pub fn recorded_def(session: &Session) -> Result<Option<AgentDef>, CliError> {
    let runs = session.runs().map_err(store_err)?;
    let config = runs.last().and_then(|r| r.start.config.clone()).unwrap_or(serde_json::Value::Null);
    AgentDef::from_session_config(&config).map_err(|e| usage(format!("session {}: {e}", session.id())))
}

/// The id and recorded agent of session `id` (an id or a unique prefix) of the store.
pub fn recorded_agent(store: Option<&Path>, id: &str) -> Result<(String, AgentDef), CliError> {
    let session = open_store(store)?.load(id).map_err(store_err)?;
    Ok((session.id().to_owned(), session_agent(&session)?))
}
