//! The worker: a Restate service endpoint that runs Reins agents.
//!
//! A session is the virtual object [`crate::SERVICE`] keyed by the session id: Restate runs one turn of a
//! session at a time and queues the others. A turn ([`crate::TURN`]) builds the agent from the definition
//! it was given (or the session's), continues the run the session's state holds, and drives it through the
//! core's one driver with every model call and tool call a journaled step. Its outcome becomes the session's
//! state, so the next turn, on any worker, continues from there.
//!
//! A worker runs only the agents its operator gave it ([`WorkerOptions::agents`], loaded when it starts): a
//! turn names one ([`crate::TurnRequest::agent`]) and may override only what cannot start a program or widen a
//! workspace ([`crate::Overrides`]); the session's state records the name and the overrides, never a
//! definition, and every turn builds the agent from the worker's own definition again.
//!
//! Connections: a failed `accept` (out of file descriptors) backs off, 10 ms growing to 1 s, instead of
//! spinning; a connection with no request under way (one that never sent its HTTP/2 preface included) is
//! closed after [`WorkerOptions::idle_timeout`].

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reins::{Outcome, RunState};
use reins_agent::{AgentDef, BuildError};
use restate_sdk::prelude::*;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::journal::Journaled;
use crate::{SessionAgent, TurnRequest};

/// The state key of the session's agent: a [`SessionAgent`] (the name of one of the worker's agents and the
/// overrides that go with it).
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

/// How long a connection may stay without a request under way (never sending one included) by default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// How a worker serves.
#[derive(Clone, Debug, Default)]
pub struct WorkerOptions {
    /// Restate's request identity public keys (`publickeyv1_...`): with any given, a request not signed by
    /// one of them is refused.
    pub identity_keys: Vec<String>,
    /// The agents this worker runs, by name (its operator's: `reins worker --agent NAME=FILE`). A turn names
    /// one of them; nothing else runs.
    pub agents: BTreeMap<String, AgentDef>,
    /// The agent of a turn that names none (on a session that has none yet).
    pub default_agent: Option<String>,
    /// How long a connection may stay without a request under way before it is closed (default
    /// [`DEFAULT_IDLE_TIMEOUT`]).
    pub idle_timeout: Option<Duration>,
}

/// The virtual object that holds sessions, with the agents its worker runs.
pub struct Session {
    agents: Arc<BTreeMap<String, AgentDef>>,
    default_agent: Option<String>,
}

impl Session {
    /// The agent a turn runs: the one it names (with its overrides), else the session's, else the worker's
    /// default. Anything not among the worker's agents is refused.
    fn choose(
        &self,
        request: &TurnRequest,
        stored: Option<serde_json::Value>,
        session: &str,
    ) -> Result<(SessionAgent, bool), HandlerError> {
        let recorded = || -> Result<Option<SessionAgent>, HandlerError> {
            let Some(v) = stored.clone() else { return Ok(None) };
            serde_json::from_value::<SessionAgent>(v).map(Some).map_err(|e| {
                terminal(format!(
                    "session {session}: its recorded agent is not one this worker can run ({e}); a turn names one \
                     of the worker's agents"
                ))
            })
        };
        let chosen = if request.agent.is_some() || !request.overrides.is_empty() {
            let name = match &request.agent {
                Some(n) => n.clone(),
                None => match recorded()? {
                    Some(a) => a.name,
                    None => self.default_name(session)?,
                },
            };
            (SessionAgent { name, overrides: request.overrides.clone() }, true)
        } else {
            match recorded()? {
                Some(a) => (a, false),
                None => (SessionAgent { name: self.default_name(session)?, overrides: Default::default() }, true),
            }
        };
        if !self.agents.contains_key(&chosen.0.name) {
            let offered: Vec<&str> = self.agents.keys().map(String::as_str).collect();
            return Err(terminal(format!(
                "session {session}: this worker has no agent named {:?} (it runs only the agents its operator gave \
                 it: {})",
                chosen.0.name,
                offered.join(", ")
            )));
        }
        Ok(chosen)
    }

    fn default_name(&self, session: &str) -> Result<String, HandlerError> {
        self.default_agent.clone().ok_or_else(|| {
            let offered: Vec<&str> = self.agents.keys().map(String::as_str).collect();
            terminal(format!(
                "session {session}: name an agent (this worker has no default; it runs {})",
                offered.join(", ")
            ))
        })
    }
}

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

/// The virtual object `ReinsSession` (its handlers; the client type restate-sdk generates for it is
/// undocumented, hence the lint allowed here).
#[allow(missing_docs)]
mod object {
    use super::*;

    #[restate_sdk::object(name = "ReinsSession")]
    impl Session {
        /// Runs one turn of the session: the first one starts the run with the given agent, a later one
        /// continues the session's run with a follow-up prompt. Returns the run's outcome.
        #[handler(name = "turn")]
        async fn turn(
            &self,
            ctx: ObjectContext<'_>,
            request: Json<serde_json::Value>,
        ) -> Result<Json<Outcome>, HandlerError> {
            let session = ctx.key().to_owned();
            let request = TurnRequest::from_json(request.into_inner())
                .map_err(|e| terminal(format!("session {session}: bad turn: {e}")))?;
            if !crate::is_valid_id(&request.run_id) {
                return Err(terminal(format!("session {session}: invalid run id {:?}", request.run_id)));
            }
            let stored: Option<Json<serde_json::Value>> = ctx.get(STATE_AGENT).await?;
            let (chosen, new_agent) = self.choose(&request, stored.map(Json::into_inner), &session)?;
            let Some(operators) = self.agents.get(&chosen.name) else {
                return Err(terminal(format!("session {session}: this worker has no agent named {:?}", chosen.name)));
            };
            let def = chosen.overrides.apply(operators);
            def.validate().map_err(|e| terminal(format!("session {session}: bad agent definition: {e}")))?;
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
                    s.push_user(request.prompt.clone(), agent.context())
                        .map_err(|e| reins::ConfigError(e.to_string()))?;
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
                ctx.set(STATE_AGENT, Json(chosen));
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
}

/// The Restate endpoint of a worker.
pub fn endpoint(options: &WorkerOptions) -> Result<Endpoint, WorkerError> {
    let session = Session { agents: Arc::new(options.agents.clone()), default_agent: options.default_agent.clone() };
    let mut builder = Endpoint::builder().bind(session);
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

/// The pause after a failed `accept` (out of file descriptors, for example): 10 ms, doubling to 1 s while it
/// keeps failing, so a worker that cannot accept does not spin.
#[derive(Debug)]
struct Backoff(Duration);

impl Backoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MOST: Duration = Duration::from_secs(1);

    fn new() -> Backoff {
        Backoff(Backoff::FIRST)
    }

    /// The pause to take now (and the next one doubles).
    fn next(&mut self) -> Duration {
        let now = self.0;
        self.0 = (self.0 * 2).min(Backoff::MOST);
        now
    }

    fn reset(&mut self) {
        self.0 = Backoff::FIRST;
    }
}

/// The requests under way on one connection, and news of each change.
#[derive(Default)]
struct Activity {
    under_way: AtomicUsize,
    changed: tokio::sync::Notify,
}

impl Activity {
    /// Completes once no request has been under way for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            if self.under_way.load(Ordering::SeqCst) == 0 {
                tokio::select! {
                    () = tokio::time::sleep(idle) => return,
                    () = changed => {}
                }
            } else {
                changed.await;
            }
        }
    }
}

/// One request under way, from its call until its response body is done (or dropped).
struct UnderWay(Arc<Activity>);

impl UnderWay {
    fn new(activity: &Arc<Activity>) -> UnderWay {
        activity.under_way.fetch_add(1, Ordering::SeqCst);
        activity.changed.notify_waiters();
        UnderWay(activity.clone())
    }
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        self.0.under_way.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// A response body that keeps its request counted as under way until it is done.
struct CountedBody<B> {
    inner: std::pin::Pin<Box<B>>,
    _under_way: UnderWay,
}

impl<B: hyper::body::Body> hyper::body::Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        self.inner.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The endpoint, counting the requests under way on one connection.
#[derive(Clone)]
struct Counted {
    endpoint: restate_sdk::hyper::HyperEndpoint,
    activity: Arc<Activity>,
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for Counted {
    type Response = hyper::Response<CountedBody<restate_sdk::endpoint::ResponseBody>>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn call(&self, req: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        let under_way = UnderWay::new(&self.activity);
        let response = match hyper::service::Service::call(&self.endpoint, req).into_inner() {
            Ok(r) => r,
            Err(never) => match never {},
        };
        std::future::ready(Ok(response.map(|b| CountedBody { inner: Box::pin(b), _under_way: under_way })))
    }
}

/// Serves one connection until it ends, or until no request has been under way on it for `idle` (a
/// connection that never sends its HTTP/2 preface included); then it is closed.
async fn connection(stream: tokio::net::TcpStream, endpoint: restate_sdk::hyper::HyperEndpoint, idle: Duration) {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(Activity::default());
    let service = Counted { endpoint, activity: activity.clone() };
    let conn = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::select! {
        _ = conn => {}
        () = activity.idle_for(idle) => {}
    }
}

/// Accepts the next connection, pausing (see [`Backoff`]) after each failed `accept`.
async fn accept(listener: &TcpListener, backoff: &mut Backoff) -> tokio::net::TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                backoff.reset();
                return stream;
            }
            Err(_) => tokio::time::sleep(backoff.next()).await,
        }
    }
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
    let idle = options.idle_timeout.unwrap_or(DEFAULT_IDLE_TIMEOUT);
    let mut connections = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut backoff = Backoff::new();
    loop {
        tokio::select! {
            stream = accept(&listener, &mut backoff) => {
                connections.spawn(connection(stream, endpoint.clone(), idle));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    connections.abort_all();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_backoff_grows_to_a_second_and_starts_again_after_a_success() {
        let mut b = Backoff::new();
        let pauses: Vec<u128> = (0..9).map(|_| b.next().as_millis()).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.reset();
        assert_eq!(b.next(), Duration::from_millis(10));
    }
}
