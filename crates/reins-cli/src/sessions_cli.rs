//! Sessions: `reins sessions list|show|view|export|backup|rm|prune` (the store flags and opening the store are
//! `store_open`'s; the page of `sessions view` is `session_page`'s; `reins replay` is `replay_cli`'s).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use reins::{Event, Message};
use reins_store::{Session, Store, kind};

use crate::exit::CliError;
use crate::store_open::{StoreFlag, open_store, recorded_def, store_err};

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
    View(crate::session_page::ViewArgs),
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

/// `reins sessions ...`.
pub fn sessions(args: SessionsArgs) -> Result<u8, CliError> {
    match args.command {
        SessionsCommand::List { store, json } => list(&open_store(store.store.as_deref())?, json),
        SessionsCommand::Show { id, store, json, events } => {
            let session = open_store(store.store.as_deref())?.load(&id).map_err(store_err)?;
            if json {
                let agent = recorded_def(&session)?.map(|d| d.to_json());
                let v = serde_json::json!({"session": session.summary, "agent": agent, "entries": session.entries});
                jsonln!("{}", serde_json::to_string_pretty(&v).map_err(|e| CliError::Internal(e.into()))?);
            } else {
                show(&session, events);
            }
            Ok(0)
        }
        SessionsCommand::View(args) => crate::session_page::view(args),
        SessionsCommand::Export { id, store } => {
            let session = open_store(store.store.as_deref())?.load(&id).map_err(store_err)?;
            let mut out = String::new();
            for line in session.export_lines() {
                out.push_str(&line);
                out.push('\n');
            }
            crate::output::stdout_raw(&out);
            Ok(0)
        }
        SessionsCommand::Rm { ids, store } => remove(&open_store(store.store.as_deref())?, &ids),
        SessionsCommand::Prune { older_than, dry_run, store } => {
            prune(&open_store(store.store.as_deref())?, older_than, dry_run)
        }
        SessionsCommand::Backup { file, store } => {
            let store = open_store(store.store.as_deref())?;
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
                if let Some(model) = e.data["response"]["answered_by"]["model"].as_str() {
                    outln!("  ↪ answered by {} (fallback)", one_line(model));
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
