//! `reins ui`: the store's session list and session pages over HTTP/1.1 on a loopback address, read-only.
//!
//! Sessions hold prompts, files and command output, and any local process can reach loopback: every
//! request must carry the server's token (`?token=…`, 256 bits from the operating system's CSPRNG, compared
//! in constant time) and a `Host` that names the loopback address it listens on (so a page of another site
//! that rebinds its name to 127.0.0.1 gets nothing either). Without them the answer is `403` with no body;
//! an unknown path with the token is `404` with no body; a method other than GET or HEAD is `405`.
//!
//! Pages: `/` (the list) and `/s/ID` (a session: the page of `reins sessions view`); their data as JSON at
//! `/api/sessions` and `/api/s/ID`, and a small stamp of each at `.../stamp` that the pages poll to redraw
//! while a run goes on.
//!
//! Connections: a failed `accept` (out of file descriptors) pauses ([`Backoff`]: 10 ms growing to 1 s) instead of
//! spinning; a connection that sends no complete request head within [`ServeOptions::idle_timeout`] (a new one,
//! or one kept alive after its last response) is closed.

use std::convert::Infallible;
use std::hash::{Hash as _, Hasher as _};
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use reins_store::{SessionSummary, Store, StoreError};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::ViewError;
use crate::model::Live;
use crate::page::{PageKind, hex, page};

/// How often a page asks whether what it shows changed, in milliseconds.
pub const POLL_MS: u64 = 1500;

/// A fresh token: 256 bits from the operating system's CSPRNG, as 64 hex digits.
pub fn new_token() -> Result<String, ViewError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| ViewError::Random(e.to_string()))?;
    Ok(hex(&bytes))
}

/// True when `given` is `expected`, in a time that depends only on their lengths (a token's length is no
/// secret).
pub fn same_token(given: &[u8], expected: &[u8]) -> bool {
    if given.len() != expected.len() {
        return false;
    }
    let diff = given.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(diff) == 0
}

/// The value of the first `token` parameter of a query string, as written (a token is hex: it needs no
/// decoding).
pub fn query_token(query: &str) -> Option<&str> {
    query.split('&').find_map(|pair| pair.strip_prefix("token="))
}

/// What a request path asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// `/`: the session list page.
    List,
    /// `/api/sessions`: the list as JSON.
    ListData,
    /// `/api/sessions/stamp`: the list's stamp.
    ListStamp,
    /// `/s/ID`: a session's page.
    Session(String),
    /// `/api/s/ID`: a session's view as JSON.
    SessionData(String),
    /// `/api/s/ID/stamp`: a session's stamp.
    SessionStamp(String),
    /// Anything else.
    NotFound,
}

/// A session id in a path: 1 to 64 ASCII letters, digits and `-` (ids are UUIDs; a prefix works too).
fn id_segment(s: &str) -> Option<String> {
    (!s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')).then(|| s.to_owned())
}

/// Parses a request path (without its query).
pub fn route(path: &str) -> Route {
    match path {
        "/" => return Route::List,
        "/api/sessions" => return Route::ListData,
        "/api/sessions/stamp" => return Route::ListStamp,
        _ => {}
    }
    if let Some(rest) = path.strip_prefix("/s/") {
        return id_segment(rest).map_or(Route::NotFound, Route::Session);
    }
    if let Some(rest) = path.strip_prefix("/api/s/") {
        if let Some(id) = rest.strip_suffix("/stamp") {
            return id_segment(id).map_or(Route::NotFound, Route::SessionStamp);
        }
        return id_segment(rest).map_or(Route::NotFound, Route::SessionData);
    }
    Route::NotFound
}

/// True when a `Host` header names the loopback address `addr` listens on (`127.0.0.1:PORT`, `[::1]:PORT`)
/// or `localhost:PORT`.
pub fn host_allowed(host: &str, addr: SocketAddr) -> bool {
    let port = addr.port();
    let named = match addr {
        SocketAddr::V4(a) => format!("{}:{port}", a.ip()),
        SocketAddr::V6(a) => format!("[{}]:{port}", a.ip()),
    };
    host.eq_ignore_ascii_case(&named) || host.eq_ignore_ascii_case(&format!("localhost:{port}"))
}

/// What the server shares with its connections.
struct State {
    store: Store,
    token: String,
    addr: SocketAddr,
}

/// The list page's data.
#[derive(Serialize)]
struct ListData {
    store: String,
    sessions: Vec<SessionSummary>,
    live: ListLive,
}

#[derive(Serialize)]
struct ListLive {
    stamp_url: &'static str,
    data_url: &'static str,
    session_url: &'static str,
    poll_ms: u64,
    stamp: String,
}

fn stamp_of(v: &impl Serialize) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(v).unwrap_or_default().hash(&mut h);
    format!("{:016x}", h.finish())
}

fn empty(status: StatusCode) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = status;
    r
}

fn with_body(content_type: &'static str, body: String, csp: Option<&str>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if let Some(csp) = csp.and_then(|c| HeaderValue::from_str(c).ok()) {
        h.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    r
}

fn json(v: &impl Serialize) -> Response<Full<Bytes>> {
    match serde_json::to_string(v) {
        Ok(body) => with_body("application/json", body, Some("default-src 'none'")),
        Err(_) => empty(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

fn html(kind: PageKind, data: &impl Serialize) -> Response<Full<Bytes>> {
    match page(kind, data, true) {
        Ok((body, csp)) => with_body("text/html; charset=utf-8", body, Some(&csp)),
        Err(_) => empty(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

fn store_failure(e: &StoreError) -> Response<Full<Bytes>> {
    match e {
        StoreError::NotFound(_) | StoreError::Ambiguous { .. } => empty(StatusCode::NOT_FOUND),
        _ => empty(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

fn list_data(state: &State) -> Result<ListData, StoreError> {
    let sessions = state.store.list()?;
    let stamp = stamp_of(&sessions);
    Ok(ListData {
        store: state.store.path().display().to_string(),
        sessions,
        live: ListLive {
            stamp_url: "/api/sessions/stamp",
            data_url: "/api/sessions",
            session_url: "/s/",
            poll_ms: POLL_MS,
            stamp,
        },
    })
}

fn session_view(state: &State, id: &str) -> Result<crate::View, StoreError> {
    let session = state.store.load(id)?;
    let mut view = crate::build(&session);
    let id = session.id().to_owned();
    view.live = Some(Live {
        stamp_url: format!("/api/s/{id}/stamp"),
        data_url: format!("/api/s/{id}"),
        list_url: "/".into(),
        poll_ms: POLL_MS,
        stamp: stamp_of(&session.summary),
    });
    Ok(view)
}

/// Answers one request (the store is read on a blocking thread).
async fn answer(state: Arc<State>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let host_ok =
        req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).is_some_and(|h| host_allowed(h, state.addr));
    let token_ok =
        req.uri().query().and_then(query_token).is_some_and(|t| same_token(t.as_bytes(), state.token.as_bytes()));
    if !host_ok || !token_ok {
        return empty(StatusCode::FORBIDDEN);
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return empty(StatusCode::METHOD_NOT_ALLOWED);
    }
    let head = req.method() == Method::HEAD;
    let route = route(req.uri().path());
    let work = {
        let state = state.clone();
        move || match route {
            Route::List => list_data(&state).map_or_else(|e| store_failure(&e), |d| html(PageKind::List, &d)),
            Route::ListData => list_data(&state).map_or_else(|e| store_failure(&e), |d| json(&d)),
            Route::ListStamp => state
                .store
                .list()
                .map_or_else(|e| store_failure(&e), |l| json(&serde_json::json!({"stamp": stamp_of(&l)}))),
            Route::Session(id) => {
                session_view(&state, &id).map_or_else(|e| store_failure(&e), |v| html(PageKind::Session, &v))
            }
            Route::SessionData(id) => session_view(&state, &id).map_or_else(|e| store_failure(&e), |v| json(&v)),
            Route::SessionStamp(id) => state
                .store
                .resolve(&id)
                .and_then(|id| state.store.summary(&id))
                .map_or_else(|e| store_failure(&e), |s| json(&serde_json::json!({"stamp": stamp_of(&s)}))),
            Route::NotFound => empty(StatusCode::NOT_FOUND),
        }
    };
    let mut response =
        tokio::task::spawn_blocking(work).await.unwrap_or_else(|_| empty(StatusCode::INTERNAL_SERVER_ERROR));
    if head {
        *response.body_mut() = Full::new(Bytes::new());
    }
    response
}

/// How long a connection may take to send a request head, and may stay open waiting for the next one, by
/// default.
pub const DEFAULT_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How the server treats its connections.
#[derive(Clone, Copy, Debug)]
pub struct ServeOptions {
    /// A connection that sends no complete request head for this long (a new one, or one kept alive after a
    /// response) is closed.
    pub idle_timeout: std::time::Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions { idle_timeout: DEFAULT_IDLE_TIMEOUT }
    }
}

/// The pause after a failed `accept` (out of file descriptors, for example): 10 ms, doubling to 1 s while it
/// keeps failing, so that the server does not spin; back to 10 ms after a success.
#[derive(Debug)]
pub struct Backoff(std::time::Duration);

impl Backoff {
    const FIRST: std::time::Duration = std::time::Duration::from_millis(10);
    const MOST: std::time::Duration = std::time::Duration::from_secs(1);

    /// The first pause.
    pub fn new() -> Backoff {
        Backoff(Backoff::FIRST)
    }

    /// The pause to take now (the next one doubles).
    pub fn next_pause(&mut self) -> std::time::Duration {
        let now = self.0;
        self.0 = (self.0 * 2).min(Backoff::MOST);
        now
    }

    /// After a success.
    pub fn reset(&mut self) {
        self.0 = Backoff::FIRST;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

/// Serves `store` on `listener` until `cancel` fires; then stops accepting, ends the open connections and
/// returns. Only loopback listeners are served (anything else is refused before a connection is taken).
pub async fn serve(
    listener: tokio::net::TcpListener,
    store: Store,
    token: String,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    serve_with(listener, store, token, cancel, ServeOptions::default()).await
}

/// [`serve`] with these options.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    store: Store,
    token: String,
    cancel: CancellationToken,
    options: ServeOptions,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{addr} is not a loopback address: reins ui serves loopback only"),
        ));
    }
    let state = Arc::new(State { store, token, addr });
    let mut connections = tokio::task::JoinSet::new();
    let mut backoff = Backoff::new();
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => break,
            a = listener.accept() => a,
        };
        // Finished connections are collected as we go.
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _peer)) => {
                backoff.reset();
                stream
            }
            // Out of file descriptors (or another failure of accept): pause rather than spin.
            Err(_) => {
                tokio::select! {
                    () = cancel.cancelled() => break,
                    () = tokio::time::sleep(backoff.next_pause()) => continue,
                }
            }
        };
        let state = state.clone();
        let stop = cancel.clone();
        connections.spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(answer(state, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .header_read_timeout(options.idle_timeout)
                .timer(hyper_util::rt::TokioTimer::new())
                .serve_connection(io, service);
            tokio::select! {
                _ = conn => {}
                () = stop.cancelled() => {}
            }
        });
    }
    drop(listener);
    connections.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_backoff_grows_to_a_second_and_starts_again_after_a_success() {
        let mut b = Backoff::new();
        let pauses: Vec<u128> = (0..9).map(|_| b.next_pause().as_millis()).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.reset();
        assert_eq!(b.next_pause(), std::time::Duration::from_millis(10));
    }

    #[test]
    fn routes() {
        assert_eq!(route("/"), Route::List);
        assert_eq!(route("/s/abc-1"), Route::Session("abc-1".into()));
        assert_eq!(route("/api/s/abc/stamp"), Route::SessionStamp("abc".into()));
        assert_eq!(route("/api/s/abc"), Route::SessionData("abc".into()));
        assert_eq!(route("/s/../etc"), Route::NotFound);
        assert_eq!(route("/s/"), Route::NotFound);
        assert_eq!(route("/x"), Route::NotFound);
    }

    #[test]
    fn tokens_and_hosts() {
        assert_eq!(query_token("a=1&token=ff&token=00"), Some("ff"));
        assert_eq!(query_token("tokenx=1"), None);
        assert!(same_token(b"abcd", b"abcd"));
        assert!(!same_token(b"abcd", b"abce"));
        assert!(!same_token(b"abc", b"abcd"));
        let a: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert!(host_allowed("127.0.0.1:8080", a));
        assert!(host_allowed("LOCALHOST:8080", a));
        assert!(!host_allowed("evil.example:8080", a));
        assert!(!host_allowed("127.0.0.1:8081", a));
        let t = new_token().unwrap();
        assert_eq!(t.len(), 64);
        assert_ne!(t, new_token().unwrap());
    }
}
