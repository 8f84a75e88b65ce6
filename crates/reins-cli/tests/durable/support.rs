//! What the durable-run tests start: a real restate-server (installed by `.ci/setup-restate.sh`), `reins worker`
//! processes, an OpenAI-compatible model server that counts its requests, and an HTTP/2 balancer that puts
//! several workers behind one address (as a load balancer does in production).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

const SETUP: &str = "run `source .ci/setup-restate.sh` from the repository root first (it installs \
                     @restatedev/restate-server with npm into the CI cache and exports REINS_RESTATE_SERVER)";

fn cache_dir() -> PathBuf {
    match std::env::var_os("REINS_CI_CACHE") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/reins-ci"),
    }
}

const CACHED: &str = "restate/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server";

/// Runs `.ci/setup-restate.sh` once per test process.
pub fn run_setup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let status = Command::new("bash")
            .arg("-c")
            .arg("source .ci/setup-restate.sh >&2")
            .current_dir(&root)
            .stdout(Stdio::null())
            .status();
        eprintln!("setup-restate.sh run by the tests: {status:?}");
    });
}

/// The restate-server binary (not the node wrapper).
pub fn restate_server() -> PathBuf {
    if std::env::var_os("REINS_RESTATE_SERVER").is_none() && !cache_dir().join(CACHED).is_file() {
        run_setup();
    }
    let bin = std::env::var_os("REINS_RESTATE_SERVER").map(PathBuf::from).unwrap_or_else(|| cache_dir().join(CACHED));
    assert!(bin.is_file(), "the Restate server is not installed ({} is missing): {SETUP}", bin.display());
    bin
}

/// A free port on 127.0.0.1 (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A directory removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(name: &str) -> Dir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "reins-durable-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn kill(child: &mut Child, signal: i32) {
    // SAFETY: kill(2) on the PID of a child this test started and has not reaped.
    unsafe {
        libc::kill(child.id() as i32, signal);
    }
}

fn wait_exit(child: &mut Child, within: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A restate-server bound to 127.0.0.1 on ports of its own, with its data in a temp dir.
pub struct Restate {
    child: Option<Child>,
    dir: Dir,
    extra: Option<Dir>,
    pub ingress: String,
    pub admin: String,
}

impl Restate {
    pub fn start() -> Restate {
        Restate::start_with("")
    }

    /// With these lines in its `[worker.invoker]` section (and `dir/key.pem` written from `pem`, when given).
    pub fn start_invoker(invoker: &str, pem: Option<&str>) -> Restate {
        let dir = Dir::new("restate-invoker");
        let mut lines = String::from("[worker.invoker]\n");
        lines.push_str(invoker);
        lines.push('\n');
        if let Some(pem) = pem {
            let key = dir.path("key.pem");
            std::fs::write(&key, pem).unwrap();
            lines.push_str(&format!("request-identity-private-key-pem-file = \"{}\"\n", key.display()));
        }
        let mut r = Restate::start_with(&lines);
        r.extra = Some(dir);
        r
    }

    /// With `extra` appended to its configuration.
    pub fn start_with(extra: &str) -> Restate {
        let dir = Dir::new("restate");
        let (fabric, admin, ingress) = (free_port(), free_port(), free_port());
        let config = format!(
            r#"bind-ip = "127.0.0.1"
bind-port = {fabric}
listen-mode = "tcp"
base-dir = "{base}"
node-name = "ci"
disable-telemetry = true
default-num-partitions = 4
rocksdb-total-memory-size = "512 MiB"
log-filter = "warn"
[admin]
bind-port = {admin}
[ingress]
bind-port = {ingress}
[default-retry-policy]
initial-interval = "100ms"
exponentiation-factor = 2.0
max-interval = "1s"
max-attempts = 70
on-max-attempts = "pause"
{extra}"#,
            base = dir.path("data").display()
        );
        std::fs::write(dir.path("restate.toml"), config).unwrap();
        std::fs::create_dir_all(dir.path("tmp")).unwrap();
        let mut r = Restate {
            child: None,
            dir,
            extra: None,
            ingress: format!("http://127.0.0.1:{ingress}"),
            admin: format!("http://127.0.0.1:{admin}"),
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.path("server.log")).unwrap();
        let child = Command::new(restate_server())
            .arg("--config-file")
            .arg(self.dir.path("restate.toml"))
            .arg("--no-logo")
            .env("TMPDIR", self.dir.path("tmp"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let t0 = Instant::now();
        loop {
            if http_get(&format!("{}/health", self.admin)).is_some_and(|(s, _)| s == 200)
                && http_get(&format!("{}/restate/health", self.ingress)).is_some_and(|(s, _)| s == 200)
            {
                return;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "restate-server did not become healthy: {}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path("server.log")).unwrap_or_default()
    }

    /// SIGKILL, then the same server again on the same data.
    pub fn kill_and_restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(&mut c, libc::SIGKILL);
            let _ = c.wait();
        }
        self.spawn();
    }

    /// Registers a worker (or a balancer) at `uri`.
    pub fn register(&self, uri: &str) {
        let (status, body) = http_post(&format!("{}/deployments", self.admin), &json!({"uri": uri, "force": true}))
            .unwrap_or_else(|| panic!("the admin API did not answer"));
        assert!((200..300).contains(&status), "registering {uri}: {status} {body}");
    }

    /// Rows of an admin SQL query.
    pub fn query(&self, sql: &str) -> Vec<Value> {
        let (url, body) = (format!("{}/query", self.admin), json!({"query": sql}));
        let (status, body) = runtime()
            .block_on(async move {
                let resp = reqwest_like_client()
                    .post(&url)
                    .header("accept", "application/json")
                    .json(&body)
                    .send()
                    .await
                    .ok()?;
                let status = resp.status().as_u16();
                Some((status, resp.text().await.ok()?))
            })
            .unwrap();
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["rows"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Restate {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(&mut c, libc::SIGKILL);
            let _ = c.wait();
        }
    }
}

/// A `reins worker` process on 127.0.0.1:PORT.
pub struct Worker {
    child: Option<Child>,
    pub port: u16,
    log: PathBuf,
    args: Vec<String>,
}

impl Worker {
    pub fn start(port: u16, log: PathBuf) -> Worker {
        Worker::start_with(port, log, &[])
    }

    /// With more flags of `reins worker`.
    pub fn start_with(port: u16, log: PathBuf, args: &[&str]) -> Worker {
        let mut w = Worker { child: None, port, log, args: args.iter().map(|a| (*a).to_owned()).collect() };
        w.spawn();
        w
    }

    fn spawn(&mut self) {
        let out = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_reins"))
            .args(["worker", "--listen", &format!("127.0.0.1:{}", self.port)])
            .args(&self.args)
            .env("OPENAI_API_KEY", "test-key")
            .env("XDG_CONFIG_HOME", std::env::temp_dir().join("reins-durable-no-config"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(30), "the worker did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn uri(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(&mut c, libc::SIGKILL);
            let _ = c.wait();
        }
    }

    /// SIGTERM; true when it exited within `within`.
    pub fn term(&mut self, within: Duration) -> bool {
        let Some(mut c) = self.child.take() else { return true };
        kill(&mut c, libc::SIGTERM);
        let exited = wait_exit(&mut c, within);
        if !exited {
            kill(&mut c, libc::SIGKILL);
            let _ = c.wait();
        }
        exited
    }

    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap())
}

/// A blocking GET: status and body, or None when nothing answered.
pub fn http_get(url: &str) -> Option<(u16, String)> {
    let url = url.to_owned();
    runtime().block_on(async move {
        let client = reqwest_like_client();
        let resp = tokio::time::timeout(Duration::from_secs(30), client.get(&url).send()).await.ok()?.ok()?;
        let status = resp.status().as_u16();
        Some((status, resp.text().await.ok()?))
    })
}

/// A blocking JSON POST.
pub fn http_post(url: &str, body: &Value) -> Option<(u16, String)> {
    let (url, body) = (url.to_owned(), body.clone());
    runtime().block_on(async move {
        let client = reqwest_like_client();
        let resp = client.post(&url).json(&body).send().await.ok()?;
        let status = resp.status().as_u16();
        Some((status, resp.text().await.ok()?))
    })
}

fn reqwest_like_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().build().unwrap()
}

/// One model request as the model server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The first user message (names the run).
    pub first: String,
    /// How many messages the request carried.
    pub messages: usize,
}

/// An OpenAI-compatible Chat Completions server. The first user message says what to do: `tools S B [slow]`
/// asks for S steps of B `note` calls each (the last call of step 1 `slow` when asked), then answers; any
/// other prompt is answered at once. A later turn's newest user message `again` is answered at once too.
pub struct ModelServer {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

fn respond(body: &Value) -> Value {
    let messages: Vec<Value> = body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m["role"] != "system")
        .collect();
    let users: Vec<&Value> = messages.iter().filter(|m| m["role"] == "user").collect();
    let first = users.first().and_then(|m| m["content"].as_str()).unwrap_or_default().to_owned();
    let newest = messages.last().cloned().unwrap_or(Value::Null);
    let step = messages.iter().filter(|m| m["role"] == "assistant").count() + 1;
    let words: Vec<&str> = first.split_whitespace().collect();
    let answer = |text: String| {
        json!({"id": "r", "object": "chat.completion", "model": "test", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}})
    };
    if newest["role"] == "user" && users.len() > 1 {
        return answer(format!("again: {} messages", messages.len()));
    }
    if words.first() == Some(&"reads") {
        let n: usize = words.get(1).and_then(|w| w.parse().ok()).unwrap_or(1);
        if step == 1 {
            let calls: Vec<Value> = (1..=n)
                .map(|j| {
                    json!({"id": format!("r{j}"), "type": "function", "function": {"name": "read_file",
                        "arguments": json!({"path": "f.txt"}).to_string()}})
                })
                .collect();
            return json!({"id": "r", "object": "chat.completion", "model": "test", "choices": [{"index": 0,
                "message": {"role": "assistant", "content": null, "tool_calls": calls}, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}});
        }
        let ok = messages
            .iter()
            .filter(|m| m["role"] == "tool" && m["content"].as_str().unwrap_or("").contains("hello file"))
            .count();
        return answer(format!("read {ok} times"));
    }
    if words.first() == Some(&"tools") {
        let steps: usize = words.get(1).and_then(|w| w.parse().ok()).unwrap_or(1);
        let batch: usize = words.get(2).and_then(|w| w.parse().ok()).unwrap_or(1);
        let slow = words.contains(&"slow");
        if step <= steps {
            let calls: Vec<Value> = (1..=batch)
                .map(|j| {
                    let command = if slow && step == 1 && j == batch { "slow" } else { "note" };
                    json!({"id": format!("c{step}_{j}"), "type": "function", "function": {"name": "run_command",
                        "arguments": json!({"command": command, "args": [format!("{step}-{j}")]}).to_string()}})
                })
                .collect();
            return json!({"id": "r", "object": "chat.completion", "model": "test", "choices": [{"index": 0,
                "message": {"role": "assistant", "content": null, "tool_calls": calls}, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}});
        }
        let results = messages.iter().filter(|m| m["role"] == "tool").count();
        return answer(format!("done after {steps} steps and {results} results"));
    }
    answer(format!("hello: {first}"))
}

impl ModelServer {
    pub fn start() -> ModelServer {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let listener = runtime().block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let s = seen.clone();
        runtime().spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let s = s.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let s = s.clone();
                        async move {
                            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            let messages = v["messages"].as_array().cloned().unwrap_or_default();
                            let first = messages
                                .iter()
                                .find(|m| m["role"] == "user")
                                .and_then(|m| m["content"].as_str())
                                .unwrap_or_default()
                                .to_owned();
                            s.lock().unwrap().push(Seen { first, messages: messages.len() });
                            let out = respond(&v).to_string();
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .header("content-type", "application/json")
                                    .body(Full::new(Bytes::from(out)))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        ModelServer { url: format!("http://{addr}/v1"), seen }
    }

    /// The requests seen for the run whose first user message is `first`, counted by message count (each a
    /// step of the run): every step asked once means every count is 1.
    pub fn counts(&self, first: &str) -> BTreeMap<usize, usize> {
        let mut m = BTreeMap::new();
        for s in self.seen.lock().unwrap().iter().filter(|s| s.first == first) {
            *m.entry(s.messages).or_insert(0) += 1;
        }
        m
    }
}

/// An HTTP/2 balancer on 127.0.0.1: each request (each Restate invocation attempt) goes to the next backend
/// that accepts a connection.
pub struct Balancer {
    pub uri: String,
    backends: Arc<Mutex<Vec<SocketAddr>>>,
}

impl Balancer {
    pub fn start(backends: Vec<u16>) -> Balancer {
        let listener = runtime().block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let backends: Arc<Mutex<Vec<SocketAddr>>> =
            Arc::new(Mutex::new(backends.into_iter().map(|p| SocketAddr::from(([127, 0, 0, 1], p))).collect()));
        let next = Arc::new(AtomicUsize::new(0));
        let client: hyper_util::client::legacy::Client<_, Incoming> =
            hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build(hyper_util::client::legacy::connect::HttpConnector::new());
        let b = backends.clone();
        runtime().spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (b, next, client) = (b.clone(), next.clone(), client.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                        let (b, next, client) = (b.clone(), next.clone(), client.clone());
                        async move {
                            let list = b.lock().unwrap().clone();
                            let mut chosen = None;
                            for _ in 0..list.len() {
                                let i = next.fetch_add(1, Ordering::SeqCst) % list.len();
                                if tokio::net::TcpStream::connect(list[i]).await.is_ok() {
                                    chosen = Some(list[i]);
                                    break;
                                }
                            }
                            let Some(target) = chosen else {
                                return Ok::<_, Infallible>(Response::builder().status(502).body(empty()).unwrap());
                            };
                            let path = req.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
                            *req.uri_mut() = format!("http://{target}{path}").parse().unwrap();
                            match client.request(req).await {
                                Ok(resp) => Ok(resp.map(|b| b.map_err(|e| e.into()).boxed())),
                                Err(_) => Ok(Response::builder().status(502).body(empty()).unwrap()),
                            }
                        }
                    });
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Balancer { uri: format!("http://{addr}"), backends }
    }
}

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

fn empty() -> BoxBody {
    http_body_util::Empty::<Bytes>::new().map_err(|never| match never {}).boxed()
}

/// The agent file of the tests: the model server, a workspace, and the presets `note` (records the
/// idempotency key and the worker's pid, answers at once) and `slow` (the same, then marks that it started
/// and takes two seconds).
pub fn agent_file(dir: &Path, model_url: &str) -> PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let keys = dir.join("keys.log");
    let started = dir.join("started");
    let text = format!(
        r#"model = "openai-chat:test"
[provider]
base_url = "{model_url}"
stream = false
[workspace]
path = "{ws}"
agents_md = false
[commands]
sandbox = "off"
[[presets]]
name = "note"
program = "sh"
args = ["-c", "echo \"$REINS_IDEMPOTENCY_KEY $PPID\" >> {keys}; echo noted $1", "note"]
arg_schema = {{ type = "array", items = {{ type = "string" }}, maxItems = 1 }}
[[presets]]
name = "slow"
program = "sh"
args = ["-c", "echo \"$REINS_IDEMPOTENCY_KEY $PPID\" >> {keys}; touch {started}; sleep 2; echo slow $1", "slow"]
arg_schema = {{ type = "array", items = {{ type = "string" }}, maxItems = 1 }}
"#,
        ws = ws.display(),
        keys = keys.display(),
        started = started.display()
    );
    let path = dir.join("agent.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// [`agent_file`] with `approve = "writes"`: every `run_command` call waits for a decision.
pub fn approving_agent_file(dir: &Path, model_url: &str) -> PathBuf {
    let path = agent_file(dir, model_url);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("approve = \"writes\"\n{text}")).unwrap();
    path
}

/// The idempotency keys the tools saw, each with the pid of the worker that ran it, in order.
pub fn keys(dir: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(dir.join("keys.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(k, p)| (k.to_owned(), p.to_owned())))
        .collect()
}

/// Waits until `path` exists.
pub fn wait_for(path: &Path, within: Duration) {
    let t0 = Instant::now();
    while !path.exists() {
        assert!(t0.elapsed() < within, "{} did not appear", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `reins` with the test environment.
pub fn reins() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_reins"));
    c.env("XDG_CONFIG_HOME", std::env::temp_dir().join("reins-durable-no-config"));
    c.env("REINS_STORE", std::env::temp_dir().join(format!("reins-durable-{}.db", std::process::id())));
    c
}
