//! What Restate costs: one JSON line `{"id", "value", "unit"}` per figure on stdout. Not run in CI.
//!
//! `cargo bench -p reins-restate` (needs the Restate server: `source .ci/setup-restate.sh`, or
//! `REINS_RESTATE_SERVER`). A real restate-server on 127.0.0.1 and workers served in this process (real HTTP/2,
//! the same `serve` as `reins worker`), a scripted model and the `echo` test tool, so that the figures are the
//! harness's and Restate's own. Figures:
//!
//! - `inprocess-us-per-step`, `restate-us-per-step`, `restate-added-us-per-step`: a 200-step run in process and
//!   as one durable turn (each step one model call and one `echo` call), and the difference.
//! - `restate-us-per-step-1000`, `floor-us-per-step-1000`: the same over a 1000-step turn (a per-step cost
//!   that grows with the run shows here; a per-turn cost weighs less; median of three alternating runs).
//!   `restate-turn-ms-1-step`, `floor-turn-ms-1-step`: one turn of one step and an answer, alone (median of five).
//! - `journal-bytes-step-10`, `journal-bytes-step-1000`: the journal bytes of step 10 and of step 1000 of a
//!   1000-step durable run (the model call's and the tool call's entries; goal: equal).
//! - `floor-us-per-step`, `restate-over-floor-percent`: the floor under a durable step — a Restate object that
//!   journals the same entries per step as a Reins turn and does nothing else (`floor/mod.rs`) — over the same
//!   200 steps, and how far Reins's durable step is above it. Both per-step figures are the median of five
//!   alternating runs, after one untimed turn of each (the server's first invocation is slow).
//!
//! The balancer sets no Nagle delay on its connections (as `reins worker` sets none on its own): with it, a
//! turn's output written in pieces (the outcome of a long run) waited some 40 ms for a delayed acknowledgement,
//! a cost the floor's small output never paid and a worker served directly does not pay.
//! - `sessions-per-s-{1,2,4}-workers`: 200 concurrent sessions of one tool step and an answer, with one, two and
//!   four workers in this process behind a round-robin balancer; `floor-sessions-per-s-{1,2,4}-endpoints`: the
//!   same sessions of the floor. Each the median of three rounds that alternate which of the two goes first.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use reins_restate::TurnRequest;
use reins_restate::client::Client;
use serde_json::{Value, json};

mod floor;

fn fail(msg: &str) -> ! {
    eprintln!("bench: {msg}");
    std::process::exit(1)
}

fn emit(id: &str, value: f64, unit: &str) {
    println!("{}", json!({"id": id, "value": (value * 1000.0).round() / 1000.0, "unit": unit}));
}

fn server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("REINS_RESTATE_SERVER") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("REINS_CI_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/reins-ci"));
    let p = cache.join("restate/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server");
    if !p.is_file() {
        fail("no restate-server: run `source .ci/setup-restate.sh` first");
    }
    p
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").map(|l| l.local_addr().map(|a| a.port()).unwrap_or(0)).unwrap_or(0)
}

struct Server {
    child: Child,
    ingress: String,
    admin: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(dir: &Path) -> Server {
    let (fabric, admin, ingress) = (free_port(), free_port(), free_port());
    let config = format!(
        "bind-ip = \"127.0.0.1\"\nbind-port = {fabric}\nlisten-mode = \"tcp\"\nbase-dir = \"{}\"\nnode-name = \"bench\"\n\
         disable-telemetry = true\ndefault-num-partitions = 4\nrocksdb-total-memory-size = \"512 MiB\"\nlog-filter = \"warn\"\n\
         [admin]\nbind-port = {admin}\n[ingress]\nbind-port = {ingress}\n",
        dir.join("data").display()
    );
    let _ = std::fs::create_dir_all(dir.join("tmp"));
    if let Err(e) = std::fs::write(dir.join("restate.toml"), config) {
        fail(&format!("config: {e}"));
    }
    let child = Command::new(server_binary())
        .arg("--config-file")
        .arg(dir.join("restate.toml"))
        .arg("--no-logo")
        .env("TMPDIR", dir.join("tmp"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| fail(&format!("restate-server: {e}")));
    Server { child, ingress: format!("http://127.0.0.1:{ingress}"), admin: format!("http://127.0.0.1:{admin}") }
}

async fn wait_healthy(s: &Server, http: &reqwest::Client) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        let ok = http.get(format!("{}/health", s.admin)).send().await.is_ok_and(|r| r.status().is_success());
        if ok {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fail("restate-server did not become healthy");
}

async fn register(s: &Server, http: &reqwest::Client, uri: &str) {
    let r = http.post(format!("{}/deployments", s.admin)).json(&json!({"uri": uri, "force": true})).send().await;
    if !r.is_ok_and(|r| r.status().is_success()) {
        fail(&format!("registering {uri} failed"));
    }
}

async fn query(s: &Server, http: &reqwest::Client, sql: &str) -> Vec<Value> {
    let r = http
        .post(format!("{}/query", s.admin))
        .header("accept", "application/json")
        .json(&json!({ "query": sql }))
        .send()
        .await
        .unwrap_or_else(|e| fail(&format!("query: {e}")));
    let v: Value = r.json().await.unwrap_or(Value::Null);
    v["rows"].as_array().cloned().unwrap_or_default()
}

/// A worker served in this process on a port of its own, running `agents`.
async fn worker(agents: &std::collections::BTreeMap<String, reins_agent::AgentDef>) -> u16 {
    let listener = reins_restate::worker::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap_or_else(|e| fail(&e.to_string()));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let options = reins_restate::worker::WorkerOptions { agents: agents.clone(), ..Default::default() };
    tokio::spawn(async move {
        let _ = reins_restate::worker::serve(listener, &options, std::future::pending()).await;
    });
    port
}

/// Round-robin HTTP/2 balancer (per request) in front of `ports`.
async fn balancer(ports: Vec<u16>) -> String {
    let listener =
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| fail(&format!("balancer: {e}")));
    let addr = listener.local_addr().unwrap_or_else(|e| fail(&e.to_string()));
    let backends: Arc<Vec<SocketAddr>> =
        Arc::new(ports.into_iter().map(|p| SocketAddr::from(([127, 0, 0, 1], p))).collect());
    let next = Arc::new(AtomicUsize::new(0));
    // No Nagle on either side of the balancer, as `reins worker` has none on its connections: with it, a
    // response written in more than one piece (a turn's outcome of a long run) waited for the peer's delayed
    // acknowledgement, some 40 ms a turn that the floor's small outputs never paid.
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_nodelay(true);
    let client: hyper_util::client::legacy::Client<_, Incoming> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).http2_only(true).build(connector);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            let (b, next, client) = (backends.clone(), next.clone(), client.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                    let (b, next, client) = (b.clone(), next.clone(), client.clone());
                    async move {
                        let target = b[next.fetch_add(1, Ordering::Relaxed) % b.len()];
                        let path = req.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
                        if let Ok(uri) = format!("http://{target}{path}").parse() {
                            *req.uri_mut() = uri;
                        }
                        let body = match client.request(req).await {
                            Ok(resp) => resp.map(|b| -> BoxBody { b.map_err(|e| e.into()).boxed() }),
                            Err(_) => {
                                let empty: BoxBody =
                                    http_body_util::Empty::<Bytes>::new().map_err(|never| match never {}).boxed();
                                let mut r = hyper::Response::new(empty);
                                *r.status_mut() = hyper::StatusCode::BAD_GATEWAY;
                                r
                            }
                        };
                        Ok::<_, Infallible>(body)
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    format!("http://{addr}")
}

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// A script of `steps` `echo` steps, then an answer.
fn script(dir: &Path, steps: usize) -> PathBuf {
    let mut s: Vec<Value> = (1..=steps)
        .map(|i| json!({"tool_calls": [{"id": format!("c{i}"), "name": "echo", "arguments": {"text": "hello"}}]}))
        .collect();
    s.push(json!({"content": "done"}));
    let path = dir.join(format!("script-{steps}.json"));
    if let Err(e) = std::fs::write(&path, Value::Array(s).to_string()) {
        fail(&format!("script: {e}"));
    }
    path
}

fn agent(script: &Path) -> Value {
    json!({"model": format!("script:{}", script.display()), "test_tools": true, "limits": {"max_steps": 5000}})
}

/// A durable run of the worker's agent `agent`.
async fn durable_run(c: &Client, agent: &str) -> (String, reins::Outcome) {
    let (session, run_id) = (reins_restate::new_id(), reins_restate::new_id());
    let req =
        TurnRequest { run_id: run_id.clone(), prompt: "go".into(), agent: Some(agent.into()), ..Default::default() };
    if let Err(e) = c.submit(&session, &req).await {
        fail(&format!("submit: {e}"));
    }
    match c.wait(&session, &run_id).await {
        Ok(o) => (run_id, o),
        Err(e) => fail(&format!("wait: {e}")),
    }
}

async fn sessions_per_s(c: &Client, agent: &'static str, n: usize) -> f64 {
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let c = c.clone();
        tasks.spawn(async move { durable_run(&c, agent).await.1.status });
    }
    while let Some(r) = tasks.join_next().await {
        if !matches!(r, Ok(reins::Status::Completed)) {
            fail(&format!("a session did not complete: {r:?}"));
        }
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

async fn floor_sessions_per_s(http: &reqwest::Client, ingress: &str, n: usize) -> f64 {
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (http, ingress) = (http.clone(), ingress.to_owned());
        tasks.spawn(async move { floor::turn(&http, &ingress, 1).await.0 });
    }
    while let Some(r) = tasks.join_next().await {
        if !matches!(r, Ok(2)) {
            fail(&format!("a floor session did not complete: {r:?}"));
        }
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The journal entries and bytes of each step of the invocation whose idempotency key is `run_id`: from the
/// entry named `model step k` up to the next step's.
async fn journal_bytes(s: &Server, http: &reqwest::Client, run_id: &str, steps: &[u64]) -> Vec<(u64, u64)> {
    let inv = query(s, http, &format!("SELECT id FROM sys_invocation WHERE idempotency_key = '{run_id}'")).await;
    let Some(id) = inv.first().and_then(|r| r["id"].as_str()).map(str::to_owned) else {
        fail("the run's invocation was not found")
    };
    let rows =
        query(s, http, &format!("SELECT index, name, raw_length FROM sys_journal WHERE id = '{id}' ORDER BY index"))
            .await;
    let mut out = Vec::new();
    for &k in steps {
        let start = format!("model step {k}");
        let next = format!("model step {}", k + 1);
        let mut on = false;
        let (mut entries, mut bytes) = (0, 0);
        for r in &rows {
            let name = r["name"].as_str().unwrap_or_default();
            if name == start {
                on = true;
            } else if name == next {
                break;
            }
            if on {
                entries += 1;
                bytes += r["raw_length"].as_u64().unwrap_or(0);
            }
        }
        out.push((entries, bytes));
    }
    out
}

fn main() {
    let dir = std::env::temp_dir().join(format!("reins-restate-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::create_dir_all(&dir);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|e| fail(&e.to_string()));
    rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let server = start_server(&dir);
        wait_healthy(&server, &http).await;
        // The workers run the agents of the three scripts, by name.
        let (s200, s1000, s1) = (script(&dir, 200), script(&dir, 1000), script(&dir, 1));
        let def = |s: &Path| reins_agent::AgentDef::from_json(&agent(s)).unwrap_or_else(|e| fail(&e.to_string()));
        let agents = std::collections::BTreeMap::from([
            ("s200".into(), def(&s200)),
            ("s1000".into(), def(&s1000)),
            ("s1".into(), def(&s1)),
        ]);
        let (w1, w2) = (worker(&agents).await, worker(&agents).await);
        let one = balancer(vec![w1]).await;
        register(&server, &http, &one).await;
        let c = Client::new(&server.ingress, &server.admin);

        let floors = [floor::serve().await, floor::serve().await, floor::serve().await, floor::serve().await];
        register(&server, &http, &balancer(vec![floors[0]]).await).await;

        // Per step: in process, then durable, then the floor (the durable and floor runs alternate, three each).
        let built = def(&s200).build().await.unwrap_or_else(|e| fail(&e.to_string()));
        let t0 = Instant::now();
        let o = built.run("go", tokio_util::sync::CancellationToken::new()).await;
        let inproc = t0.elapsed().as_secs_f64() * 1e6 / o.steps as f64;
        // One untimed turn of each first: the server's first invocation (and each endpoint's first connection)
        // costs some hundreds of milliseconds that would otherwise fall on whichever ran first.
        durable_run(&c, "s1").await;
        floor::turn(&http, &server.ingress, 1).await;
        let (mut durable, mut floor_step) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            let t0 = Instant::now();
            let (_, o) = durable_run(&c, "s200").await;
            durable.push(t0.elapsed().as_secs_f64() * 1e6 / o.steps as f64);
            let t0 = Instant::now();
            let (steps, _) = floor::turn(&http, &server.ingress, 200).await;
            if steps != o.steps {
                fail(&format!("the floor journaled {steps} model steps, Reins {}", o.steps));
            }
            floor_step.push(t0.elapsed().as_secs_f64() * 1e6 / steps as f64);
        }
        let (durable, floor_step) = (median(durable), median(floor_step));
        emit("inprocess-us-per-step", inproc, "us_per_step");
        emit("restate-us-per-step", durable, "us_per_step");
        emit("restate-added-us-per-step", durable - inproc, "us_per_step");
        emit("floor-us-per-step", floor_step, "us_per_step");
        emit("restate-over-floor-percent", (durable / floor_step - 1.0) * 100.0, "percent");

        // Over 1000 steps (three alternating runs each; the journal bytes per step, early and late, of the last).
        let (mut long, mut floor_long, mut last) = (Vec::new(), Vec::new(), None);
        for _ in 0..3 {
            let t0 = Instant::now();
            let (run, o) = durable_run(&c, "s1000").await;
            long.push(t0.elapsed().as_secs_f64() * 1e6 / o.steps as f64);
            last = Some((run, o));
            let t0 = Instant::now();
            let (steps, _) = floor::turn(&http, &server.ingress, 1000).await;
            floor_long.push(t0.elapsed().as_secs_f64() * 1e6 / steps as f64);
        }
        let Some((run, o)) = last else { fail("no 1000-step run") };
        emit("restate-us-per-step-1000", median(long), "us_per_step");
        emit("floor-us-per-step-1000", median(floor_long), "us_per_step");
        // One turn of one step and an answer, alone: what a turn costs besides its steps.
        let (mut one, mut floor_one) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            let t0 = Instant::now();
            durable_run(&c, "s1").await;
            one.push(t0.elapsed().as_secs_f64() * 1e3);
            let t0 = Instant::now();
            floor::turn(&http, &server.ingress, 1).await;
            floor_one.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        emit("restate-turn-ms-1-step", median(one), "ms");
        emit("floor-turn-ms-1-step", median(floor_one), "ms");
        if o.steps < 1000 {
            fail(&format!("the 1000-step run ended after {} steps: {:?}", o.steps, o.error));
        }
        let b = journal_bytes(&server, &http, &run, &[10, 1000]).await;
        emit("journal-bytes-step-10", b[0].1 as f64, "bytes");
        emit("journal-bytes-step-1000", b[1].1 as f64, "bytes");
        emit("journal-entries-step-10", b[0].0 as f64, "entries");
        let (_, floor_run) = floor::turn(&http, &server.ingress, 20).await;
        let f = journal_bytes(&server, &http, &floor_run, &[10]).await;
        emit("floor-journal-bytes-step-10", f[0].1 as f64, "bytes");
        emit("floor-journal-entries-step-10", f[0].0 as f64, "entries");

        // Sessions per second, with one, two and four workers (and floor endpoints): both registered, then three
        // rounds that alternate which goes first (the first after a registration meets a server still settling).
        let (w3, w4) = (worker(&agents).await, worker(&agents).await);
        for (n, ports) in [(1, vec![w1]), (2, vec![w1, w2]), (4, vec![w1, w2, w3, w4])] {
            if n > 1 {
                register(&server, &http, &balancer(ports).await).await;
                register(&server, &http, &balancer(floors[..n].to_vec()).await).await;
            }
            let (mut reins_rates, mut floor_rates) = (Vec::new(), Vec::new());
            for round in 0..3 {
                if round % 2 == 1 {
                    reins_rates.push(sessions_per_s(&c, "s1", 200).await);
                }
                floor_rates.push(floor_sessions_per_s(&http, &server.ingress, 200).await);
                if round % 2 == 0 {
                    reins_rates.push(sessions_per_s(&c, "s1", 200).await);
                }
            }
            let (workers, endpoints) = if n == 1 { ("worker", "endpoint") } else { ("workers", "endpoints") };
            emit(&format!("sessions-per-s-{n}-{workers}"), median(reins_rates), "sessions_per_s");
            emit(&format!("floor-sessions-per-s-{n}-{endpoints}"), median(floor_rates), "sessions_per_s");
        }
        drop(server);
    });
    let _ = std::fs::remove_dir_all(&dir);
}
