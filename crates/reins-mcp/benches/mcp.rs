//! The reins-mcp benchmark: one JSON line `{"id", "value", "unit"}` per figure on stdout.
//!
//! Run with `cargo bench -p reins-mcp --bench mcp` after `source .ci/setup-mcp.sh` (it talks to the Python test
//! server, tests/servers/py_server.py, and to `@modelcontextprotocol/server-everything`). Figures:
//!
//! - `mcp-start-python`, `mcp-start-node-everything` (ms): spawn, `initialize`, `tools/list` and registration,
//!   median of 5 starts.
//! - `mcp-call-stdio-p50`, `mcp-call-stdio-p95` (µs): one validated call of `py__add` through the registry and
//!   the stdio transport to the Python server and back, over 300 calls.
//! - `mcp-check` (ns): `Registry::check` of those arguments against the server's schema (the part Reins adds
//!   before a call is sent), median of 20,000.
//! - `mcp-shutdown` (ms): closing a stdio server (stdin closed, grace, process group killed), median of 5.
//!
//! Set `REINS_BENCH_QUICK=1` for a fast smoke run.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use reins::{ToolContext, ToolOutput};
use reins_mcp::{McpTools, ServerConfig, Transport};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn cache() -> PathBuf {
    std::env::var_os("REINS_CI_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/reins-ci"))
}

fn need(path: PathBuf) -> PathBuf {
    if !path.exists() {
        eprintln!("{} is missing: run `source .ci/setup-mcp.sh` first", path.display());
        std::process::exit(2);
    }
    path
}

fn python_server() -> ServerConfig {
    let py =
        need(std::env::var_os("REINS_MCP_PYTHON").map_or_else(|| cache().join("mcp/venv/bin/python"), PathBuf::from));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/py_server.py");
    let transport = Transport::Stdio {
        command: py.display().to_string(),
        args: vec![script.display().to_string()],
        env: Default::default(),
        cwd: None,
    };
    ServerConfig::new("py", transport).expect("valid config").startup_timeout(Duration::from_secs(60))
}

fn everything_server() -> ServerConfig {
    let nm = need(
        std::env::var_os("REINS_MCP_NODE_MODULES").map_or_else(|| cache().join("mcp/npm/node_modules"), PathBuf::from),
    );
    let script = nm.join("@modelcontextprotocol/server-everything/dist/index.js");
    ServerConfig::stdio("ev", "node", vec![script.display().to_string(), "stdio".into()])
        .expect("valid config")
        .startup_timeout(Duration::from_secs(60))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn emit(id: &str, value: f64, unit: &str) {
    println!("{}", json!({"id": id, "value": (value * 10.0).round() / 10.0, "unit": unit}));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::var_os("REINS_BENCH_QUICK").is_some();
    let starts = if quick { 2 } else { 5 };
    let calls = if quick { 30 } else { 300 };
    let checks = if quick { 2_000 } else { 20_000 };

    for (id, config) in
        [("mcp-start-python", python_server as fn() -> ServerConfig), ("mcp-start-node-everything", everything_server)]
    {
        let mut times = Vec::new();
        for _ in 0..starts {
            let t0 = Instant::now();
            let mcp = McpTools::start(vec![config()]).await.expect("the server starts");
            times.push(t0.elapsed().as_secs_f64() * 1e3);
            mcp.shutdown().await;
        }
        emit(id, median(times), "ms");
    }

    let mcp = McpTools::start(vec![python_server()]).await.expect("the server starts");
    let registry = mcp.registry(Vec::new()).expect("registry");
    let args = json!({"a": 20, "b": 22});
    let mut times = Vec::with_capacity(calls);
    for i in 0..calls {
        let t0 = Instant::now();
        let tool = registry.check("py__add", &args).expect("valid call");
        let ctx = ToolContext::new(i.to_string(), CancellationToken::new());
        let out = tool.call(args.clone(), ctx).await;
        times.push(t0.elapsed().as_secs_f64() * 1e6);
        assert_eq!(out, Ok(ToolOutput::Text("42".into())));
    }
    emit("mcp-call-stdio-p50", percentile(times.clone(), 0.5), "us");
    emit("mcp-call-stdio-p95", percentile(times, 0.95), "us");

    let mut samples = Vec::new();
    for _ in 0..20 {
        let t0 = Instant::now();
        for _ in 0..checks / 20 {
            std::hint::black_box(registry.check("py__add", std::hint::black_box(&args)).is_ok());
        }
        samples.push(t0.elapsed().as_secs_f64() * 1e9 / (checks / 20) as f64);
    }
    emit("mcp-check", median(samples), "ns");
    mcp.shutdown().await;

    let mut times = Vec::new();
    for _ in 0..starts {
        let mcp = McpTools::start(vec![python_server()]).await.expect("the server starts");
        let t0 = Instant::now();
        mcp.shutdown().await;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    emit("mcp-shutdown", median(times), "ms");
}
