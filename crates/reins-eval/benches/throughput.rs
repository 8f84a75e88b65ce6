//! How fast `reins eval` runs attempts: `cargo bench -p reins-eval --bench throughput`, one JSON line
//! `{"id", "value", "unit"}` per figure, then a plain summary on stderr.
//!
//! Both parts drive the library as `reins eval run` does ([`Eval::create`], then [`Eval::run`] on a
//! multi-threaded runtime, a store in a fresh directory, `--jobs 64`), timed from the first attempt to the store
//! closed (the write-ahead log checkpointed).
//!
//! - `scripted-cases-per-s`: a suite of 1,000 cases, each one step of a script model answering "ok" checked by
//!   `contains`. `scripted-wall-us-per-case` is its inverse; `scripted-cpu-us-per-case` the process's CPU time
//!   (every thread: the runtime's, the store's writers) divided by the cases: what the harness itself costs per
//!   case, since the script model costs next to nothing.
//! - `http-attempts-per-s`: a suite of 2,000 one-step cases whose agent names an OpenAI-compatible model at a
//!   local fake server on 127.0.0.1 that answers every request at once (keep-alive, a fixed Chat Completions
//!   response). `http-raw-requests-per-s`: the same server, the same concurrency (64 tasks), the same number of
//!   requests with the very body Reins sent (captured by the server), from a bare `reqwest` client (the HTTP
//!   stack Reins' providers use, one client, keep-alive) that only reads the response. `http-ratio` is the first
//!   over the second (the goal: at least 0.9). The raw run goes before and after the Reins run; its mean is the
//!   reference.
//! - `http-50ms-…` and `http-200ms-…`: the same against the same kind of server taking 50 ms and 200 ms to answer
//!   each request (a hosted model takes longer: hundreds of milliseconds to seconds), where the raw client is
//!   bound by the server's pace and Reins by the harness's own cost per attempt only when that cost outruns it.
//!
//! `REINS_BENCH_QUICK=1` makes the suites ten times smaller (a smoke run); `REINS_BENCH_CASES` and
//! `REINS_BENCH_JOBS` set the sizes.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use reins_eval::{Eval, Options, evals_root};
use tokio_util::sync::CancellationToken;

fn emit(id: &str, value: f64, unit: &str) {
    println!("{}", serde_json::json!({"id": id, "value": (value * 1000.0).round() / 1000.0, "unit": unit}));
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn scale(n: usize) -> usize {
    if std::env::var_os("REINS_BENCH_QUICK").is_some() { (n / 10).max(1) } else { n }
}

/// The CPU time of the whole process (every thread) so far.
fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), u32::try_from(t.tv_nsec).unwrap_or(0))
}

/// A suite of `n` one-step cases run by `agent.toml` in `dir`.
fn suite(dir: &Path, n: usize) -> PathBuf {
    let mut text = String::from("agent = \"agent.toml\"\n");
    for i in 0..n {
        text.push_str(&format!(
            "[[cases]]\nid = \"case-{i}\"\nprompt = \"Say ok.\"\n[[cases.checks]]\nkind = \"contains\"\nvalue = \"ok\"\n"
        ));
    }
    let file = dir.join("suite.toml");
    std::fs::write(&file, text).expect("write the suite");
    file
}

struct Timed {
    attempts: usize,
    passed: usize,
    wall: Duration,
    cpu: Duration,
}

/// Runs the suite at `suite` with `jobs` attempts at once, into a store in `dir`.
async fn run_eval(dir: &Path, suite: &Path, jobs: usize) -> Timed {
    let store = reins_store::Store::open(dir.join("sessions.db")).expect("open the store");
    let options = Options { jobs, ..Options::default() };
    let eval = Eval::create(&evals_root(store.path()), suite, &[], options).expect("create the eval");
    let cancel = CancellationToken::new();
    let (cpu0, t0) = (cpu_time(), Instant::now());
    let mut passed = 0;
    let end = eval
        .run(&store, &cancel, &mut |p| {
            if p.attempt.passed {
                passed += 1;
            }
        })
        .await
        .expect("run the eval");
    store.close().expect("close the store");
    let (wall, cpu) = (t0.elapsed(), cpu_time() - cpu0);
    assert!(end.stopped.is_none(), "the eval stopped: {:?}", end.stopped);
    Timed { attempts: end.ran, passed, wall, cpu }
}

/// The fake server's one answer: a Chat Completions response of "ok".
const ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}"#;

/// What the fake server saw.
#[derive(Default)]
struct Seen {
    requests: AtomicUsize,
    connections: AtomicUsize,
    last_body: Mutex<Option<Bytes>>,
}

/// An OpenAI-compatible server on 127.0.0.1 (its own runtime, one thread) answering every request after
/// `delay` (none: at once).
fn fake_server(delay: Duration) -> (String, Arc<Seen>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("server runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let _ = stream.set_nodelay(true);
                s.connections.fetch_add(1, Ordering::Relaxed);
                let s = s.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let s = s.clone();
                        async move {
                            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            s.requests.fetch_add(1, Ordering::Relaxed);
                            *s.last_body.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(body);
                            if !delay.is_zero() {
                                tokio::time::sleep(delay).await;
                            }
                            let mut r = Response::new(Full::new(Bytes::from_static(ANSWER.as_bytes())));
                            r.headers_mut().insert("content-type", "application/json".parse().expect("header"));
                            Ok::<_, Infallible>(r)
                        }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
    });
    (url, seen)
}

/// `n` requests of `body` to `url`, `jobs` at once, from one reqwest client; requests per second.
async fn raw_load(url: &str, body: Bytes, n: usize, jobs: usize) -> f64 {
    let client = reqwest::Client::builder().pool_idle_timeout(Duration::from_secs(60)).build().expect("client");
    let url = format!("{url}/v1/chat/completions");
    let left = Arc::new(AtomicUsize::new(n));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..jobs {
        let (client, url, body, left) = (client.clone(), url.clone(), body.clone(), left.clone());
        tasks.push(tokio::spawn(async move {
            while left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1)).is_ok() {
                let r = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                    .expect("send");
                assert!(r.status().is_success());
                let _ = r.bytes().await.expect("read");
            }
        }));
    }
    for t in tasks {
        t.await.expect("a load task");
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

fn report(what: &str, t: &Timed) -> f64 {
    let rate = t.attempts as f64 / t.wall.as_secs_f64();
    eprintln!(
        "{what}: {} attempts ({} passed) in {:.3} s: {rate:.0}/s, {:.0} µs wall and {:.0} µs CPU per attempt",
        t.attempts,
        t.passed,
        t.wall.as_secs_f64(),
        t.wall.as_secs_f64() * 1e6 / t.attempts as f64,
        t.cpu.as_secs_f64() * 1e6 / t.attempts as f64
    );
    rate
}

fn main() {
    let jobs = env_usize("REINS_BENCH_JOBS", 64);
    let cases = env_usize("REINS_BENCH_CASES", scale(1000));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |id: &str| only.as_deref().is_none_or(|o| id.contains(o));

    if wanted("scripted") {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("ok.json"),
            r#"[{"content": "ok", "usage": {"input_tokens": 10, "output_tokens": 1}}]"#,
        )
        .expect("write the script");
        std::fs::write(dir.path().join("agent.toml"), "model = \"script:ok.json\"\n").expect("write the agent");
        let suite = suite(dir.path(), cases);
        let t = rt.block_on(run_eval(dir.path(), &suite, jobs));
        assert_eq!(t.passed, cases, "every scripted case passes");
        let rate = report("scripted", &t);
        emit("scripted-cases-per-s", rate, "cases/s");
        emit("scripted-wall-us-per-case", t.wall.as_secs_f64() * 1e6 / t.attempts as f64, "µs");
        emit("scripted-cpu-us-per-case", t.cpu.as_secs_f64() * 1e6 / t.attempts as f64, "µs");
    }

    for (prefix, delay_ms) in [("http", 0), ("http-50ms", 50), ("http-200ms", 200)] {
        if wanted(prefix) && (delay_ms == 0 || only.is_some() || std::env::var_os("REINS_BENCH_QUICK").is_none()) {
            http(&rt, prefix, Duration::from_millis(delay_ms), jobs);
        }
    }
}

/// The `http` figures (`prefix`-…) against a fake server answering after `delay`.
fn http(rt: &tokio::runtime::Runtime, prefix: &str, delay: Duration, jobs: usize) {
    let n = env_usize("REINS_BENCH_CASES", scale(2000));
    let (url, seen) = fake_server(delay);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("agent.toml"),
        format!("model = \"openai-chat:m\"\n[provider]\nbase_url = \"{url}/v1\"\nstream = false\n"),
    )
    .expect("write the agent");
    // A warm-up eval (which also gives the body of a request Reins sends), then raw, Reins, raw.
    let warm = dir.path().join("warm");
    std::fs::create_dir(&warm).expect("mkdir");
    std::fs::copy(dir.path().join("agent.toml"), warm.join("agent.toml")).expect("copy");
    let warm_suite = suite(&warm, jobs.min(n));
    rt.block_on(run_eval(&warm, &warm_suite, jobs));
    let body =
        seen.last_body.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone().expect("Reins sent a request");
    let suite = suite(dir.path(), n);
    let raw1 = rt.block_on(raw_load(&url, body.clone(), n, jobs));
    let before = seen.requests.load(Ordering::Relaxed);
    let t = rt.block_on(run_eval(dir.path(), &suite, jobs));
    assert_eq!(seen.requests.load(Ordering::Relaxed) - before, n, "one request per attempt");
    assert_eq!(t.passed, n, "every case passes");
    let raw2 = rt.block_on(raw_load(&url, body, n, jobs));
    let raw = f64::midpoint(raw1, raw2);
    let rate = report(&format!("{prefix} (Reins)"), &t);
    eprintln!(
        "{prefix} (raw reqwest, {jobs} at once): {raw1:.0} and {raw2:.0} requests/s; Reins at {:.1}% of their mean; {} connections in all",
        100.0 * rate / raw,
        seen.connections.load(Ordering::Relaxed)
    );
    emit(&format!("{prefix}-attempts-per-s"), rate, "attempts/s");
    emit(&format!("{prefix}-cpu-us-per-attempt"), t.cpu.as_secs_f64() * 1e6 / t.attempts as f64, "µs");
    emit(&format!("{prefix}-raw-requests-per-s"), raw, "requests/s");
    emit(&format!("{prefix}-ratio"), rate / raw, "ratio");
}
