//! A test helper, not a user command: a run the crash tests start as a real process and kill with
//! SIGKILL at random points. It records into the store given and leaves traces in a directory:
//! `effects.log` gets a line per tool call that ran (its side effect), `model.log` a line per model
//! call with the number of transcript items the model was sent (all of them were flushed before).
//!
//! With `compact` after TURNS the run uses the `summarize` context strategy under a small budget, with a
//! summarizer that writes `start` to `compact.log`, waits 150 ms, then answers (a window to kill it in).
//!
//! Usage: `reins-store-crash-child STORE DIR new|resume [SESSION] [TURNS] [compact]`

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use reins::{Agent, FnTool, Limits, Message, ModelError, ModelRequest, ModelResponse, Registry, ToolCall, ToolOutput};
use reins_store::{SessionMeta, Store};
use tokio_util::sync::CancellationToken;

fn append(path: &Path, line: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(format!("{line}\n").as_bytes())
}

/// A deterministic model: `turns` batches of three calls (the ids name the turn), then an answer.
struct Model {
    dir: PathBuf,
    turns: usize,
    /// The turn is the one after the newest turn the request holds (a compacted request lacks the older ones).
    by_last: bool,
}

/// The summarizer of `compact` mode.
struct Summarizer {
    dir: PathBuf,
}

#[async_trait::async_trait]
impl reins::Model for Summarizer {
    async fn generate(&self, request: &ModelRequest, _cancel: &CancellationToken) -> Result<ModelResponse, ModelError> {
        append(&self.dir.join("compact.log"), "start").map_err(|e| ModelError::Failed(e.to_string()))?;
        tokio::time::sleep(Duration::from_millis(150)).await;
        let n = request.messages.get(0).map_or(0, |m| m.content().len());
        Ok(ModelResponse::text(format!("summary of {n} bytes of history")))
    }
}

#[async_trait::async_trait]
impl reins::Model for Model {
    async fn generate(&self, request: &ModelRequest, _cancel: &CancellationToken) -> Result<ModelResponse, ModelError> {
        append(&self.dir.join("model.log"), &request.messages.len().to_string())
            .map_err(|e| ModelError::Failed(e.to_string()))?;
        let turn = if self.by_last {
            request
                .messages
                .iter()
                .rev()
                .find_map(|m| match m {
                    Message::Assistant { content, .. } => content.strip_prefix("turn ")?.parse::<usize>().ok(),
                    _ => None,
                })
                .map_or(0, |t| t + 1)
        } else {
            request.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count()
        };
        if turn >= self.turns {
            return Ok(ModelResponse::text("all done"));
        }
        let calls = (0..3)
            .map(|j| ToolCall::new(format!("t{turn}-c{j}"), "slow", serde_json::json!({"ms": (turn * 7 + j * 5) % 23})))
            .collect();
        Ok(ModelResponse::tool_calls(format!("turn {turn}"), calls))
    }
}

/// The tool `slow`: sleeps `ms`, then appends its call id to `effects` (its side effect).
fn slow_tool(effects: PathBuf) -> FnTool {
    FnTool::new(
        "slow",
        "Sleeps, then records that it ran.",
        serde_json::json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
        move |args, ctx| {
            let effects = effects.clone();
            async move {
                let ms = args["ms"].as_u64().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                append(&effects, &ctx.call_id).map_err(|e| reins::ToolError::failed(e.to_string()))?;
                Ok(ToolOutput::Text(format!("done {}", ctx.call_id)))
            }
        },
    )
    .parallel()
}

/// The run of session `id` continued (a journal resuming it), or the exit code of what failed.
async fn resumed(store: &Store, builder: reins::AgentBuilder, id: &str) -> Result<reins::Outcome, i32> {
    let session = match store.load(id) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return Err(3);
        }
    };
    let journal = match store.resume_journal(&session, SessionMeta::default()) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("{e}");
            return Err(3);
        }
    };
    let agent = match builder.journal(journal).build() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return Err(2);
        }
    };
    let state = match session.resume_state(Limits::unlimited(), agent.context(), None) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return Err(3);
        }
    };
    Ok(agent.drive(state, CancellationToken::new()).await)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: reins-store-crash-child STORE DIR new|resume [SESSION] [TURNS]");
        std::process::exit(2);
    }
    let dir = PathBuf::from(&args[2]);
    let turns = args.get(5).and_then(|t| t.parse().ok()).unwrap_or(8);
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            std::process::exit(2);
        }
    };
    let code = rt.block_on(async move {
        let store = match Store::open(&args[1]) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{e}");
                return 3;
            }
        };
        let slow = slow_tool(dir.join("effects.log"));
        let registry = match Registry::builder().tool(slow).build() {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{e}");
                return 2;
            }
        };
        let compact = args.get(6).is_some_and(|a| a == "compact");
        let model = Arc::new(Model { dir: dir.clone(), turns, by_last: compact });
        let mut builder = Agent::builder_shared(model).registry(registry).limits(Limits::unlimited());
        if compact {
            builder = builder
                .context(reins::ContextConfig {
                    max_context: Some(900),
                    strategy: reins::ContextStrategy::Summarize,
                    ..reins::ContextConfig::default()
                })
                .compact_model(Arc::new(Summarizer { dir: dir.clone() }));
        }
        let outcome = if args[3] == "resume" {
            let Some(id) = args.get(4) else {
                eprintln!("resume needs a session id");
                return 2;
            };
            match resumed(&store, builder, id).await {
                Ok(outcome) => outcome,
                Err(code) => return code,
            }
        } else {
            let meta = SessionMeta { model: Some("crash-child".into()), ..SessionMeta::default() };
            let agent = match builder.journal(store.journal(meta)).build() {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("{e}");
                    return 2;
                }
            };
            agent.run("work through the turns", CancellationToken::new()).await
        };
        match serde_json::to_string(&outcome) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("{e}"),
        }
        if outcome.status == reins::Status::Completed { 0 } else { 1 }
    });
    std::process::exit(code);
}
