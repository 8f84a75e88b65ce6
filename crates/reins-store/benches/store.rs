//! What the session log adds to a run: `cargo bench -p reins-store --bench store`, JSON lines
//! `{"id", "value", "unit"}`.
//!
//! A scripted run of many steps (each a one-call batch with a trivial tool) is timed without a journal
//! and with the default store (WAL, synchronous=NORMAL). The difference per step is the log's cost; a
//! timing wrapper around the journal also splits it into time spent recording (serializing and
//! enqueueing, on the engine's thread) and time spent in the flushes (before each model call and each
//! tool batch: the only places the run waits on disk). Two flushes per step here.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reins::{
    Agent, Event, FnTool, Journal, JournalError, Limits, Message, ModelError, ModelResponse, Outcome, Registry,
    RunJournal, RunState, ScriptStep, ScriptedModel, ToolCall, ToolOutput, ToolSpec, Usage,
};
use reins_store::{SessionMeta, Store};
use tokio_util::sync::CancellationToken;

const STEPS: usize = 2000;
const REPEATS: usize = 7;

#[derive(Default)]
struct Clock {
    record_ns: AtomicU64,
    flush_ns: AtomicU64,
    flushes: AtomicU64,
    start_ns: AtomicU64,
    finish_ns: AtomicU64,
}

struct Timed<J> {
    inner: J,
    clock: Arc<Clock>,
}

struct TimedRun {
    inner: Arc<dyn RunJournal>,
    clock: Arc<Clock>,
}

#[async_trait]
impl<J: Journal> Journal for Timed<J> {
    async fn start(&self, state: &RunState, tools: &[ToolSpec]) -> Result<Arc<dyn RunJournal>, JournalError> {
        let t0 = Instant::now();
        let inner = self.inner.start(state, tools).await?;
        self.clock.start_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(Arc::new(TimedRun { inner, clock: self.clock.clone() }))
    }
}

impl TimedRun {
    fn time<T>(&self, f: impl FnOnce() -> T) -> T {
        let t0 = Instant::now();
        let out = f();
        self.clock.record_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        out
    }
}

#[async_trait]
impl RunJournal for TimedRun {
    fn session_id(&self) -> &str {
        self.inner.session_id()
    }
    fn recorded(&self) -> usize {
        self.inner.recorded()
    }
    fn message(&self, index: usize, message: &Message) {
        self.time(|| self.inner.message(index, message))
    }
    fn response(&self, step: u64, response: Result<&ModelResponse, &ModelError>) {
        self.time(|| self.inner.response(step, response))
    }
    fn event(&self, event: &Event) {
        self.time(|| self.inner.event(event))
    }
    async fn flush(&self) -> Result<(), JournalError> {
        let t0 = Instant::now();
        let r = self.inner.flush().await;
        self.clock.flush_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.clock.flushes.fetch_add(1, Ordering::Relaxed);
        r
    }
    async fn finish(&self, outcome: &Outcome) -> Result<(), JournalError> {
        let t0 = Instant::now();
        let r = self.inner.finish(outcome).await;
        self.clock.finish_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }
}

/// A journal that keeps nothing: what the engine's journal hooks cost by themselves.
struct Noop;
struct NoopRun;

#[async_trait]
impl Journal for Noop {
    async fn start(&self, _: &RunState, _: &[ToolSpec]) -> Result<Arc<dyn RunJournal>, JournalError> {
        Ok(Arc::new(NoopRun))
    }
}

#[async_trait]
impl RunJournal for NoopRun {
    fn session_id(&self) -> &str {
        "noop"
    }
    fn recorded(&self) -> usize {
        0
    }
    fn message(&self, _: usize, m: &Message) {
        std::hint::black_box(m);
    }
    fn response(&self, _: u64, r: Result<&ModelResponse, &ModelError>) {
        std::hint::black_box(r.is_ok());
    }
    fn event(&self, e: &Event) {
        std::hint::black_box(e);
    }
    async fn flush(&self) -> Result<(), JournalError> {
        Ok(())
    }
    async fn finish(&self, _: &Outcome) -> Result<(), JournalError> {
        Ok(())
    }
}

fn script(steps: usize, latency: Option<Duration>) -> Vec<ScriptStep> {
    (0..steps)
        .map(|i| {
            let r = ModelResponse::tool_calls(
                "working on it",
                vec![ToolCall::new(format!("c{i}"), "echo", serde_json::json!({"text": format!("step {i}")}))],
            )
            .with_usage(Usage::new(1200, 40));
            match latency {
                Some(d) => ScriptStep::Delay(d, Box::new(ScriptStep::Respond(r))),
                None => ScriptStep::Respond(r),
            }
        })
        .chain(std::iter::once(ScriptStep::Respond(ModelResponse::text("done"))))
        .collect()
}

fn builder(steps: usize, latency: Option<Duration>) -> reins::AgentBuilder {
    let echo = FnTool::new(
        "echo",
        "Returns its text.",
        serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        |args, _ctx| async move { Ok(ToolOutput::Json(args["text"].clone())) },
    );
    Agent::builder(ScriptedModel::new(script(steps, latency)).without_recording())
        .registry(Registry::builder().tool(echo).build().unwrap_or_else(|e| panic!("{e}")))
        .limits(Limits::unlimited())
}

fn emit(id: &str, value: f64, unit: &str) {
    println!("{}", serde_json::json!({"id": id, "value": (value * 1000.0).round() / 1000.0, "unit": unit}));
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

struct Figures {
    base: f64,
    hooks: f64,
    with: f64,
    record: f64,
    flush: f64,
    flush_per_step: f64,
    start: f64,
    finish: f64,
}

fn measure(
    rt: &tokio::runtime::Runtime,
    store: &Store,
    steps: usize,
    latency: Option<Duration>,
    repeats: usize,
) -> Figures {
    let n = (steps + 1) as f64;
    let (mut base, mut hooks, mut with, mut record, mut flush, mut per_step) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut start, mut finish) = (Vec::new(), Vec::new());
    for _ in 0..repeats {
        let agent = builder(steps, latency).build().unwrap_or_else(|e| panic!("{e}"));
        let t0 = Instant::now();
        let o = rt.block_on(agent.run("go", CancellationToken::new()));
        base.push(t0.elapsed().as_secs_f64() * 1e6 / n);
        assert_eq!(o.status, reins::Status::Completed);

        let agent = builder(steps, latency).journal(Noop).build().unwrap_or_else(|e| panic!("{e}"));
        let t0 = Instant::now();
        let o = rt.block_on(agent.run("go", CancellationToken::new()));
        hooks.push(t0.elapsed().as_secs_f64() * 1e6 / n);
        assert_eq!(o.status, reins::Status::Completed);

        let clock = Arc::new(Clock::default());
        let journal = Timed { inner: store.journal(SessionMeta::default()), clock: clock.clone() };
        let agent = builder(steps, latency).journal(journal).build().unwrap_or_else(|e| panic!("{e}"));
        let t0 = Instant::now();
        let o = rt.block_on(agent.run("go", CancellationToken::new()));
        with.push(t0.elapsed().as_secs_f64() * 1e6 / n);
        assert_eq!(o.status, reins::Status::Completed, "{:?}", o.error);
        start.push(clock.start_ns.load(Ordering::Relaxed) as f64 / 1e3);
        finish.push(clock.finish_ns.load(Ordering::Relaxed) as f64 / 1e3);
        record.push(clock.record_ns.load(Ordering::Relaxed) as f64 / 1e3 / n);
        per_step.push(clock.flush_ns.load(Ordering::Relaxed) as f64 / 1e3 / n);
        flush.push(
            clock.flush_ns.load(Ordering::Relaxed) as f64 / 1e3 / clock.flushes.load(Ordering::Relaxed).max(1) as f64,
        );
    }
    Figures {
        base: median(base),
        hooks: median(hooks),
        with: median(with),
        record: median(record),
        flush: median(flush),
        flush_per_step: median(per_step),
        start: median(start),
        finish: median(finish),
    }
}

/// Many short runs (each a new session) back to back: what the log adds per step when each run's start
/// and end weigh too. Returns (without, with) in microseconds per step.
fn measure_short(rt: &tokio::runtime::Runtime, store: &Store, runs: usize, steps: usize) -> (f64, f64) {
    let n = (runs * (steps + 1)) as f64;
    let (mut base, mut with) = (Vec::new(), Vec::new());
    for _ in 0..REPEATS {
        let t0 = Instant::now();
        for _ in 0..runs {
            let agent = builder(steps, None).build().unwrap_or_else(|e| panic!("{e}"));
            let o = rt.block_on(agent.run("go", CancellationToken::new()));
            assert_eq!(o.status, reins::Status::Completed);
        }
        base.push(t0.elapsed().as_secs_f64() * 1e6 / n);
        let t0 = Instant::now();
        for _ in 0..runs {
            let agent = builder(steps, None)
                .journal(store.journal(SessionMeta::default()))
                .build()
                .unwrap_or_else(|e| panic!("{e}"));
            let o = rt.block_on(agent.run("go", CancellationToken::new()));
            assert_eq!(o.status, reins::Status::Completed, "{:?}", o.error);
        }
        with.push(t0.elapsed().as_secs_f64() * 1e6 / n);
    }
    (median(base), median(with))
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(format!("reins-store-bench-{}", std::process::id()));
    let store = Store::open(dir.join("sessions.db")).unwrap_or_else(|e| panic!("{e}"));
    // Steps back to back (a model that answers at once): the writer's whole cost lands on the run.
    let f = measure(&rt, &store, STEPS, None, REPEATS);
    emit("store.b2b.step_without_log", f.base, "us/step");
    emit("store.b2b.step_with_log", f.with, "us/step");
    emit("store.b2b.added_per_step", f.with - f.base, "us/step");
    emit("store.b2b.engine_hooks_per_step", f.hooks - f.base, "us/step");
    emit("store.b2b.record_on_engine_thread", f.record, "us/step");
    emit("store.b2b.flush_wait", f.flush, "us/flush");
    emit("store.b2b.engine_cost_per_step", f.record + f.flush_per_step, "us/step");
    emit("store.run_start", f.start, "us/run");
    emit("store.run_finish", f.finish, "us/run");
    // A model that takes 2 ms (still far quicker than a real one): the writer works while it runs.
    let f = measure(&rt, &store, 300, Some(Duration::from_millis(2)), 9);
    emit("store.paced.added_per_step", f.with - f.base, "us/step");
    emit("store.paced.record_on_engine_thread", f.record, "us/step");
    emit("store.paced.flush_wait", f.flush, "us/flush");
    emit("store.paced.engine_cost_per_step", f.record + f.flush_per_step, "us/step");
    // Durability::Power: every flush is fsynced (survives a power loss, not only a killed process).
    let power = Store::open_with(
        dir.join("power.db"),
        reins_store::StoreOptions { durability: reins_store::Durability::Power, ..Default::default() },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let f = measure(&rt, &power, 200, None, 3);
    emit("store.power.added_per_step", f.with - f.base, "us/step");
    emit("store.power.flush_wait", f.flush, "us/flush");
    drop(power);
    let recorded_steps = (STEPS + 1) * REPEATS + 301 * 9;
    let (base, with) = measure_short(&rt, &store, 200, 10);
    emit("store.short_runs.added_per_step", with - base, "us/step");
    emit("store.short_runs.added_per_run", (with - base) * 11.0, "us/run");
    drop(store);
    // The file once the write-ahead log is checkpointed into it.
    let conn = rusqlite::Connection::open(dir.join("sessions.db")).unwrap_or_else(|e| panic!("{e}"));
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).unwrap_or_else(|e| panic!("{e}"));
    drop(conn);
    let size = std::fs::metadata(dir.join("sessions.db")).map_or(0, |m| m.len());
    emit("store.bytes_per_step", size as f64 / (recorded_steps + 200 * 11 * REPEATS) as f64, "bytes/step");
    let _ = std::fs::remove_dir_all(&dir);
}
