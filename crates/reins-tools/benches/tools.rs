//! The reins-tools benchmark: one JSON line `{"id", "value", "unit"}` per figure on stdout.
//!
//! Run with `cargo bench -p reins-tools --bench tools`. Every figure is the median of several repetitions.
//!
//! - `read_file-small-openat2`, `read_file-small-walk` (µs): one confined `Workspace::read_text` of a 1 KiB file
//!   three directories deep, resolved with `openat2(RESOLVE_BENEATH|…)` and with the no-follow walk.
//! - `read_file-small-tool` (µs): the same through the `read_file` tool (`spawn_blocking` included).
//! - `spawn-true-nosandbox`, `spawn-true-sandbox` (ms): one `run_command` of a preset running `true`, without
//!   the sandbox and with the required sandbox (Landlock, seccomp, namespaces); the latter is reported as
//!   unavailable when the host cannot give it.
//! - `protected-scan-10k` (ms): one `Workspace::protected_scan` of a tree of 10,100 entries (100 directories of 100
//!   files); a command pays two (before and after), to find protected paths it created.
//!
//! Set `REINS_BENCH_QUICK=1` for a fast smoke run.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reins::{ToolContext, TypedTool};
use reins_tools::{
    CommandConfig, CommandRunner, Preset, ReadFile, ReadFileArgs, RelPath, Resolver, SandboxMode, Workspace,
    WorkspaceConfig,
};
use tokio_util::sync::CancellationToken;

fn emit(id: &str, value: f64, unit: &str) {
    println!("{}", serde_json::json!({"id": id, "value": (value * 100.0).round() / 100.0, "unit": unit}));
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median over `reps` repetitions of the mean duration of `iters` calls of `f`.
fn measure(reps: usize, iters: usize, mut f: impl FnMut()) -> Duration {
    let mut samples = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        samples.push(t.elapsed().as_secs_f64() / iters as f64);
    }
    Duration::from_secs_f64(median(samples))
}

fn main() {
    let quick = std::env::var_os("REINS_BENCH_QUICK").is_some();
    let (reps, iters, spawns) = if quick { (3, 200, 5) } else { (9, 5000, 40) };
    let tmp = match tempfile::tempdir() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot create a temporary directory: {e}");
            std::process::exit(1);
        }
    };
    let root = tmp.path();
    std::fs::create_dir_all(root.join("a/b/c")).expect("mkdir");
    std::fs::write(root.join("a/b/c/small.txt"), "x".repeat(1023) + "\n").expect("write");
    let path = RelPath::parse("a/b/c/small.txt").expect("path");

    for (id, resolver) in [("read_file-small-openat2", Resolver::Auto), ("read_file-small-walk", Resolver::Walk)] {
        let ws = Workspace::open_with(root, WorkspaceConfig { resolver, ..Default::default() }).expect("open");
        let d = measure(reps, iters, || {
            black_box(ws.read_text(&path, None).expect("read"));
        });
        emit(id, d.as_secs_f64() * 1e6, "us");
    }

    let tree = tempfile::tempdir().expect("tmp");
    for d in 0..100 {
        let dir = tree.path().join(format!("d{d}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f}.txt")), "").expect("write");
        }
    }
    let tree_ws = Workspace::open(tree.path()).expect("open");
    let d = measure(reps, if quick { 3 } else { 20 }, || {
        black_box(tree_ws.protected_scan(reins_tools::workspace::PROTECTED_SCAN_LIMIT));
    });
    emit("protected-scan-10k", d.as_secs_f64() * 1e3, "ms");

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let ws = Arc::new(Workspace::open(root).expect("open"));
    let tool = ReadFile(ws.clone());
    let d = measure(reps, iters / 5, || {
        let args = ReadFileArgs { path: "a/b/c/small.txt".into(), start_line: None, end_line: None };
        let ctx = ToolContext::new("1", CancellationToken::new());
        black_box(rt.block_on(tool.run(args, ctx)).expect("read"));
    });
    emit("read_file-small-tool", d.as_secs_f64() * 1e6, "us");

    for (id, mode) in [("spawn-true-nosandbox", SandboxMode::Off), ("spawn-true-sandbox", SandboxMode::Required)] {
        let config = CommandConfig { sandbox: mode, ..Default::default() };
        let runner = CommandRunner::new(ws.clone(), vec![Preset::new("true", "true", vec![])], config).expect("runner");
        let cancel = CancellationToken::new();
        if let Err(e) = rt.block_on(runner.run("true", &[], &cancel)) {
            eprintln!("{id}: {e}");
            emit(&format!("{id}-unavailable"), 1.0, "bool");
            continue;
        }
        let d = measure(reps.min(5), spawns, || {
            black_box(rt.block_on(runner.run("true", &[], &cancel)).expect("spawn"));
        });
        emit(id, d.as_secs_f64() * 1e3, "ms");
    }
}
