//! Helpers of the reins-view tests: sessions recorded in a real store by real runs, headless Chromium (Debian's
//! `chromium`, installed by `.ci/setup-chromium.sh`), and a recording HTTP proxy that sees every request a
//! page makes.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use reins::{
    Agent, ContextConfig, ContextStrategy, FnTool, Limits, ModelError, ModelResponse, Registry, ScriptedModel,
    ToolCall, ToolError, ToolOutput, Usage,
};
use reins_store::{Prices, Session, SessionMeta, Store};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// What the escape tests put everywhere a session holds text.
pub const HOSTILE: &str = "</script><script>alert(1)</script>\u{2028}line\u{2029}<!--<img src=x onerror=alert(2)>&amp;";

/// The tools of the recorded sessions: `echo` (parallel-safe, sleeps `ms`), `slow` (parallel-safe, 40 ms) and
/// `fail` (always an error).
pub fn registry() -> Registry {
    let schema = json!({"type": "object"});
    let echo = FnTool::new("echo", "echo", schema.clone(), |args, _ctx| async move {
        let ms = args.get("ms").and_then(serde_json::Value::as_u64).unwrap_or(0);
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let text = args.get("text").and_then(|t| t.as_str()).unwrap_or("");
        let times = args.get("repeat").and_then(serde_json::Value::as_u64).unwrap_or(1);
        Ok(ToolOutput::Text(text.repeat(usize::try_from(times).unwrap_or(1))))
    })
    .parallel();
    let slow = FnTool::new("slow", "slow", schema.clone(), |_args, _ctx| async move {
        tokio::time::sleep(Duration::from_millis(40)).await;
        Ok(ToolOutput::Text("slow done".into()))
    })
    .parallel();
    let fail = FnTool::new("fail", "fail", schema, |_args, _ctx| async move {
        Err::<ToolOutput, _>(ToolError::Failed(format!("it failed: {HOSTILE}")))
    });
    Registry::new(vec![Arc::new(echo) as Arc<dyn reins::Tool>, Arc::new(slow), Arc::new(fail)])
        .expect("the test tools are valid")
}

/// Approves every call it is asked about (an in-process person who says yes).
struct ApproveAll;

#[async_trait::async_trait]
impl reins::Approver for ApproveAll {
    async fn decide(
        &self,
        request: &reins::ApprovalRequest,
        _cancel: &CancellationToken,
    ) -> Result<Vec<reins::ApprovalDecision>, reins::ApprovalError> {
        Ok(request.calls.iter().map(reins::ApprovalDecision::approve).collect())
    }
}

/// The `slow` tool needs a decision.
fn ask_slow(c: &ToolCall) -> reins::Decision {
    if c.name == "slow" { reins::Decision::Ask("slow needs a person".into()) } else { reins::Decision::Allow }
}

fn call(id: &str, name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall::new(id, name, args)
}

fn usage(i: u64, o: u64, cached: u64) -> Option<Usage> {
    Some(Usage {
        input_tokens: i,
        output_tokens: o,
        cached_input_tokens: cached,
        cache_write_tokens: 0,
        reasoning_tokens: 0,
    })
}

/// Prices that make every step's cost known.
pub fn prices() -> Prices {
    Prices { input_per_mtok: 1.25, output_per_mtok: 10.0, cached_input_per_mtok: 0.125, cache_write_per_mtok: None }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime")
}

/// The recorded session the browser and model tests look at, two runs:
/// run 1 — step 1: three parallel calls (echo 30 ms, slow 40 ms — approved first —, echo 5 ms) and a failing
/// call; step 2: a call
/// with hostile arguments and a long result; step 3: a compaction before it (a small summarize budget), then
/// the answer. Run 2 (resumed) — step 1: the model call fails (`model_error`).
pub fn recorded_session(store: &Store) -> Session {
    let model = ScriptedModel::new(vec![
        ModelResponse {
            text: format!("Looking. {HOSTILE}"),
            tool_calls: vec![
                call("p1", "echo", json!({"text": "one", "ms": 30})),
                call("p2", "slow", json!({})),
                call("p3", "echo", json!({"text": "three", "ms": 5})),
                call("f1", "fail", json!({"why": HOSTILE})),
            ],
            usage: usage(1200, 80, 0),
            ..ModelResponse::default()
        },
        ModelResponse {
            text: String::new(),
            tool_calls: vec![call(
                "h1",
                "echo",
                json!({"text": format!("long result line {HOSTILE}\n"), "repeat": 250, "note": HOSTILE}),
            )],
            usage: usage(1900, 60, 1100),
            reasoning_items: vec![reins::Reasoning::new(
                "anthropic",
                json!({"type": "redacted_thinking", "data": HOSTILE}),
            )],
            ..ModelResponse::default()
        },
        ModelResponse { text: format!("Done: {HOSTILE}"), usage: usage(900, 40, 600), ..ModelResponse::default() },
    ]);
    let summarizer = ScriptedModel::new(vec![
        ModelResponse {
            text: format!("summary of the work so far {HOSTILE}"),
            usage: usage(500, 30, 0),
            ..ModelResponse::default()
        },
        ModelResponse::text("another summary"),
        ModelResponse::text("another summary"),
    ]);
    let context = ContextConfig {
        max_context: Some(60_000),
        max_tool_result_chars: Some(60_000),
        strategy: ContextStrategy::Summarize,
        compact_at: 0.3,
        ..ContextConfig::default()
    };
    let meta = SessionMeta { model: Some(format!("test:{HOSTILE}")), prices: Some(prices()), ..SessionMeta::default() };
    let rt = runtime();
    let id = rt.block_on(async {
        let agent = Agent::builder(model)
            .registry(registry())
            .context(context.clone())
            .compact_model(Arc::new(summarizer))
            .policy(ask_slow)
            .approver(Arc::new(ApproveAll))
            .journal(store.journal(meta.clone()))
            .build()
            .expect("the agent builds");
        let outcome = agent.run(&format!("Do the task {HOSTILE}"), CancellationToken::new()).await;
        assert_eq!(outcome.status, reins::Status::Completed, "{:?}", outcome.error);
        assert!(outcome.compactions >= 1, "the recorded session has a compaction");
        let id = outcome.session_id.clone().expect("recorded");
        // Run 2: a follow-up whose model call fails.
        let session = store.load(&id).expect("load");
        let state = session.resume_state(Limits::default(), &context, Some("and then?")).expect("resume");
        let failing = ScriptedModel::new(vec![Err::<ModelResponse, _>(ModelError::Failed(format!("boom {HOSTILE}")))]);
        let agent = Agent::builder(failing)
            .registry(registry())
            .context(context)
            .compact_model(Arc::new(ScriptedModel::new(vec![ModelResponse::text("summary of run 1")])))
            .journal(store.resume_journal(&session, meta).expect("resume journal"))
            .build()
            .expect("the agent builds");
        let outcome = agent.drive(state, CancellationToken::new()).await;
        assert_eq!(outcome.status, reins::Status::ModelError);
        id
    });
    store.load(&id).expect("load")
}

/// A session of one step: the model answers at once (usage reported, prices known).
pub fn one_step_session(store: &Store) -> Session {
    let meta = SessionMeta { model: Some("test:one".into()), prices: Some(prices()), ..SessionMeta::default() };
    let rt = runtime();
    let id = rt.block_on(async {
        let answer = ModelResponse { text: "hello".into(), usage: usage(1200, 300, 0), ..ModelResponse::default() };
        let agent = Agent::builder(ScriptedModel::new(vec![answer]))
            .registry(registry())
            .journal(store.journal(meta))
            .build()
            .expect("the agent builds");
        let outcome = agent.run("say hello", CancellationToken::new()).await;
        assert_eq!(outcome.status, reins::Status::Completed, "{:?}", outcome.error);
        outcome.session_id.expect("recorded")
    });
    store.load(&id).expect("load")
}

/// A session of `steps` steps, each calling `echo` once (usage growing, some cache reads, prices known).
pub fn long_session(store: &Store, steps: u64) -> Session {
    let mut responses: Vec<ModelResponse> = (1..steps)
        .map(|i| {
            let mut calls = vec![call(&format!("c{i}"), "echo", json!({"text": format!("result of step {i}")}))];
            // Now and then a parallel pair, a slow call or a failure, as in a real run.
            if i % 100 == 0 {
                calls.push(call(&format!("d{i}"), "echo", json!({"text": "side", "ms": 3})));
            }
            if i % 400 == 0 {
                calls.push(call(&format!("s{i}"), "slow", json!({})));
            }
            if i % 250 == 0 {
                calls.push(call(&format!("f{i}"), "fail", json!({})));
            }
            let input = 1000 + 40 * i;
            // The prompt cache serves most of the input, except now and then (a miss).
            let cached = if i % 60 == 1 { 0 } else { input * 9 / 10 };
            ModelResponse {
                text: format!("step {i}: thinking about part {i}"),
                tool_calls: calls,
                usage: usage(input, 40 + (i * 7) % 90, cached),
                ..ModelResponse::default()
            }
        })
        .collect();
    responses.push(ModelResponse {
        text: "all done".into(),
        usage: usage(1000 + 40 * steps, 12, 0),
        ..ModelResponse::default()
    });
    let meta = SessionMeta { model: Some("test:long".into()), prices: Some(prices()), ..SessionMeta::default() };
    let rt = runtime();
    let id = rt.block_on(async {
        let agent = Agent::builder(ScriptedModel::new(responses))
            .registry(registry())
            .limits(Limits { max_steps: Some(steps + 1), max_tool_calls: Some(2 * steps + 1), ..Limits::default() })
            .journal(store.journal(meta))
            .build()
            .expect("the agent builds");
        let outcome = agent.run("a long task", CancellationToken::new()).await;
        assert_eq!(outcome.status, reins::Status::Completed, "{:?}", outcome.error);
        assert_eq!(outcome.steps, steps);
        outcome.session_id.expect("recorded")
    });
    store.load(&id).expect("load")
}

/// The chromium binary: `$REINS_CHROMIUM`, else the one `.ci/setup-chromium.sh` recorded in the CI cache; on a
/// machine without it, the setup script is run once (it installs Debian's `chromium`). Missing, it fails the
/// test with what to do.
pub fn chromium() -> PathBuf {
    static SETUP: Once = Once::new();
    let find = || -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("REINS_CHROMIUM").map(PathBuf::from).filter(|p| p.is_file()) {
            return Some(p);
        }
        let cache = std::env::var_os("REINS_CI_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/reins-ci"));
        let recorded = std::fs::read_to_string(cache.join("chromium/path")).ok()?;
        Some(PathBuf::from(recorded.trim())).filter(|p| p.is_file())
    };
    if let Some(p) = find() {
        return p;
    }
    SETUP.call_once(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let _ = Command::new("bash").arg("-c").arg("source .ci/setup-chromium.sh >&2").current_dir(root).status();
    });
    find().unwrap_or_else(|| {
        panic!(
            "chromium is not installed: run `source .ci/setup-chromium.sh` from the repository root (as root: it \
             installs Debian's chromium with apt-get), or set REINS_CHROMIUM to a chromium binary"
        )
    })
}

/// A private directory for one browser run (its profile), removed on drop.
pub struct Scratch(pub tempfile::TempDir);

impl Scratch {
    pub fn new() -> Scratch {
        Scratch(tempfile::tempdir().expect("a temp dir"))
    }
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

/// What one headless chromium run printed.
pub struct Browser {
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Browser {
    /// The console messages of the page (chromium logs each as `INFO:CONSOLE` on stderr with
    /// `--enable-logging=stderr`): errors, CSP violations and logs alike.
    pub fn console(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| l.contains(":CONSOLE")).collect()
    }
}

/// Runs headless chromium on `url` with `args` (plus a private profile, no sandbox as root, no GPU, console
/// logging, all traffic — loopback included — through `proxy` when given), killed after 120 s.
pub fn run_chromium(url: &str, args: &[&str], proxy: Option<&Proxy>) -> Browser {
    run_chromium_with(url, args, proxy, true)
}

/// [`run_chromium`], with scrollbars shown when `hide_scrollbars` is false (as a person's browser shows them:
/// they take width from the page once it is taller than the window).
pub fn run_chromium_with(url: &str, args: &[&str], proxy: Option<&Proxy>, hide_scrollbars: bool) -> Browser {
    let profile = Scratch::new();
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--enable-logging=stderr",
        "--v=0",
    ]);
    if hide_scrollbars {
        cmd.arg("--hide-scrollbars");
    }
    cmd.arg(format!("--user-data-dir={}", profile.path().display()));
    if let Some(p) = proxy {
        cmd.arg(format!("--proxy-server=http://{}", p.addr));
        cmd.arg("--proxy-bypass-list=<-loopback>");
    }
    cmd.args(args).arg(url).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = Instant::now();
    let child = cmd.spawn().expect("chromium starts");
    let pid = child.id();
    let guard = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
        }
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let out = child.wait_with_output().expect("chromium ran");
    let elapsed = started.elapsed();
    let _ = guard.join();
    Browser {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed,
    }
}

/// A recording HTTP proxy on 127.0.0.1: every request line (and CONNECT target) it receives is kept; it
/// answers each with 502 and closes.
pub struct Proxy {
    pub addr: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    pub fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("its address");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut reader = BufReader::new(match stream.try_clone() {
                        Ok(s) => s,
                        Err(_) => return,
                    });
                    let mut line = String::new();
                    if reader.read_line(&mut line).is_ok() && !line.trim().is_empty() {
                        seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(line.trim().to_owned());
                    }
                    let mut stream = stream;
                    let _ =
                        stream.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                });
            }
        });
        Proxy { addr, requests }
    }

    /// The requests seen, less chromium's own background traffic to Google's hosts.
    pub fn page_requests(&self) -> Vec<String> {
        let all = self.requests.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        all.into_iter().filter(|r| !is_browser_background(r)).collect()
    }
}

/// Chromium's own requests (component updates, safe browsing, ...), which any page load may trigger.
fn is_browser_background(request_line: &str) -> bool {
    let target = request_line.split_whitespace().nth(1).unwrap_or("");
    let host = target
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .split(['/', ':'])
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    ["google.com", "googleapis.com", "gstatic.com", "gvt1.com", "googleusercontent.com", "googlezip.net"]
        .iter()
        .any(|g| host == *g || host.ends_with(&format!(".{g}")))
}

/// A `file://` URL of `path`.
pub fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}
