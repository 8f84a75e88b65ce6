//! The worker: a Restate service endpoint that runs Reins agents.
//!
//! A session is the virtual object [`crate::SERVICE`] keyed by the session id: Restate runs one turn of a
//! session at a time and queues the others. A turn ([`crate::TURN`]) builds the agent from the definition
//! it was given (or the session's), continues the run the session's state holds, and drives it through the
//! core's one driver with every model call and tool call a journaled step. Its outcome becomes the session's
//! state, so the next turn, on any worker, continues from there.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use reins::{Outcome, RunState};
use reins_agent::{AgentDef, BuildError};
use restate_sdk::prelude::*;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::TurnRequest;
use crate::journal::Journaled;

/// The state key of the session's agent definition (JSON).
pub const STATE_AGENT: &str = "agent";
/// The state key of the outcome of the session's last turn: its whole run state at the end of that turn.
pub const STATE_RUN: &str = "run";

/// What a tool call left unanswered by a turn that ended mid-batch says when the next turn continues.
const UNFINISHED: &str = "aborted: the previous turn ended before this call finished";

/// Why a worker did not serve.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A request identity key that does not parse.
    #[error("invalid request identity key {key:?}: {reason}")]
    IdentityKey {
        /// The key as given.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The listening address could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
}

/// How a worker serves.
#[derive(Clone, Debug, Default)]
pub struct WorkerOptions {
    /// Restate's request identity public keys (`publickeyv1_...`): with any given, a request not signed by
    /// one of them is refused.
    pub identity_keys: Vec<String>,
}

/// The virtual object that holds sessions.
pub struct Session;

fn terminal(message: impl Into<String>) -> HandlerError {
    TerminalError::new_with_code(400, message).into()
}

/// A build error of a turn's agent: bad input is terminal (retrying cannot help), the rest is retried.
fn build_error(e: BuildError, session: &str) -> HandlerError {
    if e.is_bad_input() {
        terminal(format!("session {session}: the agent cannot be built: {e}"))
    } else {
        HandlerError::from(format!("session {session}: building the agent failed: {e}"))
    }
}

/// Checks that this worker can open the run's workspace: a durable run's workspace must be on storage every
/// worker shares, and a worker that cannot open it refuses the run, saying so.
fn check_workspace(def: &AgentDef, session: &str) -> Result<(), HandlerError> {
    let Some(path) = &def.workspace.path else { return Ok(()) };
    let refused = |why: String| {
        terminal(format!(
            "session {session}: this worker cannot open the workspace {}: {why} (a durable run's workspace must be on \
             storage every worker shares, at the same path)",
            path.display()
        ))
    };
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(refused("it is not a directory".into())),
        Err(e) => return Err(refused(e.to_string())),
    }
    std::fs::read_dir(path).map(|_| ()).map_err(|e| refused(e.to_string()))
}

#[restate_sdk::object(name = "ReinsSession")]
impl Session {
    /// Runs one turn of the session: the first one starts the run with the given agent, a later one
    /// continues the session's run with a follow-up prompt. Returns the run's outcome.
    #[handler(name = "turn")]
    async fn turn(&self, ctx: ObjectContext<'_>, request: Json<TurnRequest>) -> Result<Json<Outcome>, HandlerError> {
        let request = request.into_inner();
        let session = ctx.key().to_owned();
        if !crate::is_valid_id(&request.run_id) {
            return Err(terminal(format!("session {session}: invalid run id {:?}", request.run_id)));
        }
        let stored: Option<Json<serde_json::Value>> = ctx.get(STATE_AGENT).await?;
        let (agent_json, new_agent) = match (request.agent, stored) {
            (Some(given), _) => (given, true),
            (None, Some(Json(stored))) => (stored, false),
            (None, None) => {
                return Err(terminal(format!(
                    "session {session} has no agent: its first turn must give one (reins submit --agent FILE)"
                )));
            }
        };
        let def = AgentDef::from_json(&agent_json)
            .map_err(|e| terminal(format!("session {session}: bad agent definition: {e}")))?;
        check_workspace(&def, &session)?;
        let previous: Option<Json<Outcome>> = ctx.get(STATE_RUN).await?;

        let mcp = def.start_mcp().await.map_err(|e| build_error(e, &session))?;
        let parts = def.parts_with(mcp.clone()).map_err(|e| build_error(e, &session))?;
        let agent = parts
            .builder()
            .map_err(|e| build_error(e, &session))?
            .build()
            .map_err(|e| terminal(format!("session {session}: the agent cannot be built: {e}")))?;

        let state = match previous {
            Some(Json(previous)) => RunState::resume(
                &request.run_id,
                previous.messages,
                agent.limits().clone(),
                agent.context(),
                UNFINISHED,
            )
            .and_then(|mut s| {
                s.push_user(request.prompt.clone(), agent.context()).map_err(|e| reins::ConfigError(e.to_string()))?;
                Ok(s)
            }),
            None => RunState::new(&request.run_id, request.prompt.clone(), agent.limits().clone(), agent.context()),
        };
        let mut state = match state {
            Ok(s) => s,
            Err(e) => {
                if let Some(m) = &mcp {
                    m.shutdown().await;
                }
                return Err(terminal(format!("session {session}: the turn cannot start: {e}")));
            }
        };
        state.set_instructions(agent.instructions().map(Arc::from), agent.context());

        let cancel = CancellationToken::new();
        let max_result = agent.context().max_tool_result_chars;
        let performer = Journaled::new(&ctx, cancel.clone(), session.clone(), max_result).with_approvals(&agent);
        let mut outcome = agent.drive_with(state, cancel, &performer).await;
        drop(performer);
        // A wait for decisions that the run's end cut short (cancelled, deadline) is over.
        ctx.clear(crate::STATE_APPROVAL);
        if let Some(m) = &mcp {
            m.shutdown().await;
        }
        outcome.session_id = Some(session);
        ctx.set(STATE_RUN, Json(outcome.clone()));
        if new_agent {
            ctx.set(STATE_AGENT, Json(agent_json));
        }
        Ok(Json(outcome))
    }

    /// The outcome of the session's last finished turn, if any (does not wait for a turn under way).
    #[handler(name = "last")]
    async fn last(&self, ctx: SharedObjectContext<'_>) -> Result<Json<Option<Outcome>>, HandlerError> {
        let previous: Option<Json<Outcome>> = ctx.get(STATE_RUN).await?;
        Ok(Json(previous.map(Json::into_inner)))
    }
}

/// The Restate endpoint of a worker.
pub fn endpoint(options: &WorkerOptions) -> Result<Endpoint, WorkerError> {
    let mut builder = Endpoint::builder().bind(Session);
    for key in &options.identity_keys {
        builder = builder
            .identity_key(key)
            .map_err(|e| WorkerError::IdentityKey { key: key.clone(), reason: format!("{e:?}") })?;
    }
    Ok(builder.build())
}

/// Binds `addr` (a worker binds to loopback unless told otherwise).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, WorkerError> {
    TcpListener::bind(addr).await.map_err(|e| WorkerError::Listen { addr, reason: e.to_string() })
}

/// Serves Restate's requests on `listener` until `shutdown` completes. Then it stops at once: the turns under
/// way are not finished here (their connections close), so Restate runs them again — on another worker
/// behind the same address, or on this one when it is back — from their journals.
pub async fn serve(
    listener: TcpListener,
    options: &WorkerOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), WorkerError> {
    let endpoint = restate_sdk::hyper::HyperEndpoint::new(endpoint(options)?);
    let mut connections = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let service = endpoint.clone();
                connections.spawn(async move {
                    let conn = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                    let _ = conn.await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    connections.abort_all();
    Ok(())
}
