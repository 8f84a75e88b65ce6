//! The Reins benchmark: one JSON line `{"id", "value", "unit"}` per figure on stdout.
//!
//! Run with `cargo bench -p reins --bench harness`. Every timed figure is the median of several
//! repetitions. Figures:
//!
//! - `W1`, `W1-context`, `W1-observer` (µs per step): one run of 1000 steps, each one `echo` call with
//!   `{"text":"hello"}`, then an answer; without a context budget, with a 32,000-char context budget and
//!   8,000 chars per result, and with an observer collecting every event.
//! - `W1-observer-read` (µs per step): W1 with an observer that reads every event and keeps a tally (events,
//!   tool calls, their milliseconds, output tokens), as a live display or a metrics exporter does: the
//!   engine's cost of delivering events, without `W1-observer`'s clone of each one into a `Vec`.
//! - `W1-otel` (µs per step): W1 with its spans turned into OpenTelemetry spans (a `tracing-opentelemetry`
//!   layer, a `BatchSpanProcessor` and an exporter that drops each batch): what the engine's thread pays when
//!   the CLI exports traces (the export itself runs on the processor's thread, which the figure leaves out).
//! - `W1-context-{250,1000,4000}` (µs per step): the same with the context budget at three lengths.
//! - `W1-compact`, `W1-compact-{250,4000}` (µs per step): the W1 loop with the `summarize` strategy under a
//!   4,000-char budget that forces a compaction every hundred steps or so, a scripted summarizer.
//! - `prefix-stable-{drop,summarize}` (percent): over a 2000-step W1 run under a 32,000-char budget, the share
//!   of requests (from the first that leaves something out on) whose messages start with the previous ones.
//! - `W3-wall` (ms), `W3-rss-per-run` (kB): 1000 concurrent runs of 10 steps on a multi-thread runtime;
//!   peak memory is measured in a fresh child process (the bench re-executes itself) so that memory the
//!   allocator kept from earlier figures does not hide the peak.
//! - `W4-{1k,10k,100k}-{32k,all}` (µs): one `Transcript::select` over a transcript of that many messages,
//!   with a 32,000-char budget and with none.
//! - `W5-flat`, `W5-nested` (ns): one `Registry::check`.
//!
//! Set `REINS_BENCH_QUICK=1` for a fast smoke run (fewer repetitions). Arguments select figures by the start of
//! their id (`W1` selects every W1 figure); one ending in `$` selects one figure (`W1$`).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use reins::{
    Agent, CharCounter, ContextConfig, ContextStrategy, Event, EventKind, Limits, Message, Model, ModelError,
    ModelRequest, ModelResponse, ObserverError, Registry, ScriptedModel, Status, ToolCall, ToolContext, ToolError,
    ToolOutput, Transcript, TypedTool,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The environment variable that makes the bench a W3 memory probe (set for the child process).
const CHILD_ENV: &str = "REINS_BENCH_W3_RSS_CHILD";

const RUNS: usize = 1000;
const RUN_STEPS: usize = 10;

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct EchoArgs {
    /// The text to return.
    text: String,
}

/// The `echo` tool: `{"text": string}` required, no other properties; returns the text. Pure, so it is
/// declared parallel-safe (each W1 batch holds one call, so this does not change the figures).
struct Echo;

impl TypedTool for Echo {
    type Args = EchoArgs;
    const NAME: &'static str = "echo";
    const DESCRIPTION: &'static str = "Returns its text.";
    const PARALLEL_SAFE: bool = true;

    async fn run(&self, args: EchoArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::Text(args.text))
    }
}

fn registry() -> Arc<Registry> {
    match Registry::builder().tool(reins::typed(Echo)).build() {
        Ok(r) => Arc::new(r),
        Err(e) => fail(&format!("the echo registry does not build: {e}")),
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("bench: {msg}");
    std::process::exit(1)
}

fn emit(id: &str, value: f64, unit: &str) {
    println!("{}", json!({"id": id, "value": (value * 1000.0).round() / 1000.0, "unit": unit}));
}

/// True when `id` is selected: no filter arguments, or one that `id` starts with
/// (`cargo bench -p reins --bench harness -- W4 W5`).
fn wants(id: &str) -> bool {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    // `W1` selects every figure whose id starts with it; `W1$` that one figure.
    filters.is_empty()
        || filters.iter().any(|f| f.strip_suffix('$').map_or_else(|| id.starts_with(f.as_str()), |exact| id == exact))
}

/// True when some figure of the group `prefix` is selected.
fn wants_group(prefix: &str) -> bool {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    filters.is_empty() || filters.iter().any(|f| prefix.starts_with(f.as_str()) || f.starts_with(prefix))
}

fn quick() -> bool {
    std::env::var_os("REINS_BENCH_QUICK").is_some()
}

fn reps(n: usize) -> usize {
    if quick() { 1.max(n / 5) } else { n }
}

/// The on-CPU time of the calling thread, in seconds. Single-threaded figures (W1 on a current-thread
/// runtime, W4, W5) are measured with it, so that other work on a busy machine does not count; on an
/// idle machine it equals the wall time. W3 is measured in wall time.
/// `REINS_BENCH_WALL=1` measures them in wall time instead (also for valgrind, where reading the
/// thread clock through the vDSO fails).
fn cpu_now() -> f64 {
    static WALL: std::sync::OnceLock<Option<Instant>> = std::sync::OnceLock::new();
    if let Some(start) = WALL.get_or_init(|| std::env::var_os("REINS_BENCH_WALL").map(|_| Instant::now())) {
        return start.elapsed().as_secs_f64();
    }
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { xs[n / 2] } else { (xs[n / 2 - 1] + xs[n / 2]) / 2.0 }
}

/// `steps` responses each with one `echo` call, then an answer.
fn script(steps: usize) -> Vec<ModelResponse> {
    let mut out = Vec::with_capacity(steps + 1);
    for i in 0..steps {
        out.push(ModelResponse::tool_calls("", vec![ToolCall::new(format!("c{i}"), "echo", json!({"text": "hello"}))]));
    }
    out.push(ModelResponse::text("done"));
    out
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Plain,
    Context,
    Observer,
    ObserverRead,
    Compact,
    Otel,
}

/// The budget of `W1-compact`: small enough that a 250-step run compacts several times.
const COMPACT_BUDGET: u64 = 4_000;

/// The scripted summarizer of `W1-compact`.
fn summarizer() -> Arc<dyn Model> {
    Arc::new(reins::FnModel::new(|_r: &ModelRequest| Ok(ModelResponse::text("the task goes on: keep echoing hello"))))
}

fn context(variant: Variant) -> ContextConfig {
    match variant {
        Variant::Context => ContextConfig {
            max_context: Some(32_000),
            max_tool_result_chars: Some(8_000),
            counter: Arc::new(CharCounter),
            ..ContextConfig::default()
        },
        Variant::Compact => ContextConfig {
            max_context: Some(COMPACT_BUDGET),
            max_tool_result_chars: Some(8_000),
            counter: Arc::new(CharCounter),
            strategy: ContextStrategy::Summarize,
            ..ContextConfig::default()
        },
        Variant::Plain | Variant::Observer | Variant::ObserverRead | Variant::Otel => {
            ContextConfig { max_context: None, ..ContextConfig::default() }
        }
    }
}

/// What `W1-observer-read`'s observer keeps of the events it reads: counters, as a metrics exporter keeps them.
#[derive(Default)]
struct Tally {
    events: AtomicU64,
    tool_calls: AtomicU64,
    tool_us: AtomicU64,
    output_tokens: AtomicU64,
}

impl Tally {
    fn read(&self, e: &Event) {
        self.events.fetch_add(1, Relaxed);
        match &e.kind {
            EventKind::ToolEnd { duration_ms, .. } => {
                self.tool_calls.fetch_add(1, Relaxed);
                self.tool_us.fetch_add((duration_ms * 1e3) as u64, Relaxed);
            }
            EventKind::ModelEnd(end) => {
                self.output_tokens.fetch_add(end.usage.map_or(0, |u| u.output_tokens), Relaxed);
            }
            _ => {}
        }
    }
}

fn agent(
    model: impl Model + 'static,
    registry: &Arc<Registry>,
    variant: Variant,
    sink: Option<Arc<Mutex<Vec<Event>>>>,
    tally: Option<Arc<Tally>>,
) -> Agent {
    let mut b = Agent::builder(model).registry(registry.clone()).limits(Limits::unlimited()).context(context(variant));
    if variant == Variant::Compact {
        b = b.compact_model(summarizer());
    }
    if let Some(sink) = sink {
        b = b.observer(move |e: &Event| {
            sink.lock().map_err(|_| ObserverError("poisoned".into()))?.push(e.clone());
            Ok(())
        });
    }
    if let Some(tally) = tally {
        b = b.observer(move |e: &Event| {
            tally.read(e);
            Ok(())
        });
    }
    match b.build() {
        Ok(a) => a,
        Err(e) => fail(&format!("agent: {e}")),
    }
}

/// One W1 run: µs per step (the scripted model, agent and script are built outside the timing).
fn w1_once(
    rt: &tokio::runtime::Runtime,
    registry: &Arc<Registry>,
    steps: usize,
    variant: Variant,
    record: bool,
) -> f64 {
    let model = ScriptedModel::new(script(steps));
    let model = if record { model } else { model.without_recording() };
    let sink = (variant == Variant::Observer).then(|| Arc::new(Mutex::new(Vec::with_capacity(4 * steps + 8))));
    let tally = (variant == Variant::ObserverRead).then(|| Arc::new(Tally::default()));
    let agent = agent(model, registry, variant, sink.clone(), tally.clone());
    let otel = (variant == Variant::Otel).then(otel_subscriber);
    let _traced = otel.as_ref().map(|(_, dispatch)| tracing::dispatcher::set_default(dispatch));
    let t0 = cpu_now();
    let outcome = rt.block_on(agent.run("Say hello through the echo tool, again and again.", CancellationToken::new()));
    let elapsed = cpu_now() - t0;
    drop(_traced);
    if let Some((provider, _)) = otel {
        let _ = provider.force_flush();
        let exported = DROPPED_SPANS.swap(0, std::sync::atomic::Ordering::Relaxed);
        let _ = provider.shutdown();
        // A run span, and per step a chat and an execute_tool span, plus the final chat.
        if exported != 2 * steps + 2 {
            fail(&format!("W1-otel exported {exported} spans, expected {}", 2 * steps + 2));
        }
    }
    if variant == Variant::Compact && outcome.compactions < 2 {
        fail(&format!("W1-compact compacted {} times in {steps} steps", outcome.compactions));
    }
    if outcome.status != Status::Completed || outcome.tool_calls != steps as u64 {
        fail(&format!("W1 run ended {:?} after {} calls: {:?}", outcome.status, outcome.tool_calls, outcome.error));
    }
    if let Some(sink) = sink {
        let n = sink.lock().map_or(0, |v| v.len());
        // run_start + per step (model_start, model_end, tool_start, tool_end) + final model pair + run_end
        if n != 4 * steps + 4 {
            fail(&format!("W1-observer collected {n} events, expected {}", 4 * steps + 4));
        }
    }
    if let Some(tally) = tally {
        let (events, calls) = (tally.events.load(Relaxed), tally.tool_calls.load(Relaxed));
        if events != 4 * steps as u64 + 4 || calls != steps as u64 {
            fail(&format!("W1-observer-read read {events} events and {calls} tool ends in {steps} steps"));
        }
    }
    drop(black_box(outcome));
    elapsed * 1e6 / steps as f64
}

/// How many spans the W1-otel exporter was given.
static DROPPED_SPANS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// An exporter that counts and drops what it is given.
#[derive(Debug)]
struct Dropping;

impl opentelemetry_sdk::trace::SpanExporter for Dropping {
    async fn export(&self, batch: Vec<opentelemetry_sdk::trace::SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
        DROPPED_SPANS.fetch_add(batch.len(), std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// The CLI's export set-up with a dropping exporter: a batch processor large enough for a whole run.
fn otel_subscriber() -> (opentelemetry_sdk::trace::SdkTracerProvider, tracing::Dispatch) {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    let config = opentelemetry_sdk::trace::BatchConfigBuilder::default().with_max_queue_size(1 << 16).build();
    let processor = opentelemetry_sdk::trace::BatchSpanProcessor::builder(Dropping).with_batch_config(config).build();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().with_span_processor(processor).build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("reins"))
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_target(false)
        .with_filter(tracing_subscriber::filter::Targets::new().with_target("reins", tracing::Level::INFO));
    (provider, tracing::Dispatch::new(tracing_subscriber::registry().with(layer)))
}

/// The share (percent) of the requests of a 2000-step run under a 32,000-char budget, from the first that
/// leaves something out on, whose messages start with the previous request's messages.
fn prefix_stable(rt: &tokio::runtime::Runtime, registry: &Arc<Registry>, strategy: ContextStrategy) -> f64 {
    const STEPS: usize = 2000;
    let model = Arc::new(ScriptedModel::new(script(STEPS)));
    let ctx = ContextConfig { max_context: Some(32_000), strategy, ..ContextConfig::default() };
    let agent = match Agent::builder_shared(model.clone())
        .registry(registry.clone())
        .limits(Limits::unlimited())
        .context(ctx)
        .compact_model(summarizer())
        .build()
    {
        Ok(a) => a,
        Err(e) => fail(&format!("agent: {e}")),
    };
    let outcome = rt.block_on(agent.run("Say hello through the echo tool, again and again.", CancellationToken::new()));
    if outcome.status != Status::Completed {
        fail(&format!("prefix-stable run ended {:?}: {:?}", outcome.status, outcome.error));
    }
    let reqs: Vec<Vec<Message>> = model.requests().iter().map(|r| r.messages.to_vec()).collect();
    let Some(first) = reqs.iter().position(|r| r.get(1).is_some_and(|m| m.role() == "summary")) else {
        fail("prefix-stable: nothing was ever left out");
    };
    let pairs = reqs[first..].windows(2);
    let n = pairs.len();
    let stable = pairs.filter(|w| w[1].len() >= w[0].len() && w[1][..w[0].len()] == w[0][..]).count();
    100.0 * stable as f64 / n.max(1) as f64
}

fn w1(rt: &tokio::runtime::Runtime, registry: &Arc<Registry>, steps: usize, variant: Variant, record: bool) -> f64 {
    let n = reps(if steps >= 4000 { 9 } else { 21 });
    let _warm = w1_once(rt, registry, steps, variant, record);
    median((0..n).map(|_| w1_once(rt, registry, steps, variant, record)).collect())
}

/// A model around another that yields to the scheduler once per call, so that concurrent runs really
/// interleave (a scripted model alone answers without ever suspending).
struct Yielding<M>(M);

#[async_trait]
impl<M: Model> Model for Yielding<M> {
    async fn generate(&self, request: &ModelRequest, cancel: &CancellationToken) -> Result<ModelResponse, ModelError> {
        tokio::task::yield_now().await;
        self.0.generate(request, cancel).await
    }
}

/// 1000 concurrent runs of 10 steps; returns the wall time in ms. Each task builds its own model.
fn w3_once(rt: &tokio::runtime::Runtime, registry: &Arc<Registry>) -> f64 {
    let t0 = Instant::now();
    let ok = rt.block_on(async {
        let tasks: Vec<_> = (0..RUNS)
            .map(|_| {
                let registry = registry.clone();
                tokio::spawn(async move {
                    let model = Yielding(ScriptedModel::new(script(RUN_STEPS)).without_recording());
                    let agent = agent(model, &registry, Variant::Context, None, None);
                    let o = agent.run("Say hello through the echo tool.", CancellationToken::new()).await;
                    o.status == Status::Completed && o.tool_calls == RUN_STEPS as u64
                })
            })
            .collect();
        let mut ok = 0;
        for t in tasks {
            if matches!(t.await, Ok(true)) {
                ok += 1;
            }
        }
        ok
    });
    let wall = t0.elapsed().as_secs_f64() * 1e3;
    if ok != RUNS {
        fail(&format!("W3: only {ok} of {RUNS} runs completed"));
    }
    wall
}

fn multi_thread() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => fail(&format!("runtime: {e}")),
    }
}

fn vm_hwm_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// In the child: reset the peak, run W3 once, print the peak growth per run in kB.
fn w3_rss_child() {
    let rt = multi_thread();
    let registry = registry();
    // Start the worker threads before the baseline.
    rt.block_on(async { tokio::spawn(async {}).await.ok() });
    if std::fs::write("/proc/self/clear_refs", "5").is_err() {
        fail("cannot reset the peak RSS through /proc/self/clear_refs");
    }
    let Some(base) = vm_hwm_kb() else { fail("no VmHWM in /proc/self/status") };
    w3_once(&rt, &registry);
    let Some(peak) = vm_hwm_kb() else { fail("no VmHWM in /proc/self/status") };
    println!("{}", peak.saturating_sub(base) as f64 / RUNS as f64);
}

fn w3_rss() -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let samples: Vec<f64> = (0..reps(5))
        .filter_map(|_| {
            let out = std::process::Command::new(&exe).env(CHILD_ENV, "1").output().ok()?;
            if !out.status.success() {
                eprintln!("bench: W3 memory probe failed: {}", String::from_utf8_lossy(&out.stderr).trim());
                return None;
            }
            String::from_utf8_lossy(&out.stdout).trim().parse().ok()
        })
        .collect();
    (!samples.is_empty()).then(|| median(samples))
}

/// A transcript of `n` messages: the prompt, then groups of an assistant turn with one call and its
/// result of 40-400 characters (deterministic), so that a 32,000-char budget keeps some 150 groups.
fn transcript(n: usize) -> Transcript {
    let mut messages = Vec::with_capacity(n);
    messages.push(Message::user("Read the files and summarise them."));
    let mut i = 0u64;
    while messages.len() + 2 <= n {
        let id = format!("c{i}");
        messages.push(Message::assistant("", vec![ToolCall::new(id.clone(), "echo", json!({"text": "hello"}))]));
        let len = 40 + (i.wrapping_mul(2_654_435_761) % 361) as usize;
        messages.push(Message::tool_result(id, "x".repeat(len), false));
        i += 1;
    }
    if messages.len() < n {
        messages.push(Message::assistant("done", Vec::new()));
    }
    match Transcript::from_messages(messages, &CharCounter) {
        Ok(t) => t,
        Err(e) => fail(&format!("W4 transcript: {e}")),
    }
}

/// Median µs of one `select`, measured over batches of calls.
fn time_per_call<R>(mut f: impl FnMut() -> R) -> f64 {
    // Calibrate a batch to ~2 ms.
    let mut batch = 1usize;
    loop {
        let t0 = cpu_now();
        for _ in 0..batch {
            black_box(f());
        }
        if cpu_now() - t0 >= 2e-3 || batch >= 1 << 24 {
            break;
        }
        batch *= 2;
    }
    let samples = (0..reps(25))
        .map(|_| {
            let t0 = cpu_now();
            for _ in 0..batch {
                black_box(f());
            }
            (cpu_now() - t0) * 1e6 / batch as f64
        })
        .collect();
    median(samples)
}

fn w4() {
    for (label, n) in [("1k", 1_000usize), ("10k", 10_000), ("100k", 100_000)] {
        if !wants_group(&format!("W4-{label}-")) {
            continue;
        }
        let t = transcript(n);
        for (budget_label, budget) in [("32k", Some(32_000u64)), ("all", None)] {
            if !wants(&format!("W4-{label}-{budget_label}")) {
                continue;
            }
            let kept = match t.select(budget, "characters") {
                Ok(c) => c.len(),
                Err(e) => fail(&format!("W4 select: {e}")),
            };
            if budget.is_none() && kept != n {
                fail(&format!("W4-{label}-all kept {kept} of {n} messages"));
            }
            let us = time_per_call(|| t.select(black_box(budget), "characters"));
            emit(&format!("W4-{label}-{budget_label}"), us, "us");
        }
    }
}

fn nested_schema_and_value() -> (Value, Value) {
    let schema = json!({
        "type": "object",
        "properties": {
            "rows": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "count": {"type": "integer"},
                        "ok": {"type": "boolean"}
                    },
                    "required": ["name", "count", "ok"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["rows"],
        "additionalProperties": false
    });
    let rows: Vec<Value> =
        (0..20).map(|i| json!({"name": format!("row {i}"), "count": i * 7, "ok": i % 2 == 0})).collect();
    (schema, json!({"rows": rows}))
}

fn w5() {
    if !wants_group("W5") {
        return;
    }
    let registry = registry();
    let flat = json!({"text": "hello"});
    if registry.check("echo", &flat).is_err() || registry.check("echo", &json!({"text": 1})).is_ok() {
        fail("W5: the echo schema does not behave");
    }
    if wants("W5-flat") {
        let ns = time_per_call(|| registry.check("echo", black_box(&flat)).is_ok()) * 1e3;
        emit("W5-flat", ns, "ns");
    }

    let (schema, value) = nested_schema_and_value();
    let tool = reins::FnTool::new("rows", "Takes rows.", schema, |_a, _c| async { Ok(ToolOutput::from("ok")) });
    let registry = match Registry::builder().tool(tool).build() {
        Ok(r) => r,
        Err(e) => fail(&format!("W5 nested schema: {e}")),
    };
    let mut bad = value.clone();
    bad["rows"][19]["count"] = json!("seven");
    if registry.check("rows", &value).is_err() || registry.check("rows", &bad).is_ok() {
        fail("W5: the nested schema does not behave");
    }
    if wants("W5-nested") {
        let ns = time_per_call(|| registry.check("rows", black_box(&value)).is_ok()) * 1e3;
        emit("W5-nested", ns, "ns");
    }
}

fn main() {
    if std::env::var_os(CHILD_ENV).is_some() {
        w3_rss_child();
        return;
    }
    let registry = registry();
    let current = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => fail(&format!("runtime: {e}")),
    };
    let record = std::env::var_os("REINS_BENCH_RECORD").is_some();

    for (id, steps, variant) in [
        ("W1", 1000, Variant::Plain),
        ("W1-context", 1000, Variant::Context),
        ("W1-observer", 1000, Variant::Observer),
        ("W1-observer-read", 1000, Variant::ObserverRead),
        ("W1-context-250", 250, Variant::Context),
        ("W1-context-1000", 1000, Variant::Context),
        ("W1-context-4000", 4000, Variant::Context),
        ("W1-compact", 1000, Variant::Compact),
        ("W1-compact-250", 250, Variant::Compact),
        ("W1-compact-4000", 4000, Variant::Compact),
    ] {
        if wants(id) {
            emit(id, w1(&current, &registry, steps, variant, record), "us_per_step");
        }
    }

    for (id, strategy) in
        [("prefix-stable-drop", ContextStrategy::Drop), ("prefix-stable-summarize", ContextStrategy::Summarize)]
    {
        if wants(id) {
            emit(id, prefix_stable(&current, &registry, strategy), "percent");
        }
    }

    if wants("W3-wall") {
        let rt = multi_thread();
        let _warm = w3_once(&rt, &registry);
        let wall = median((0..reps(7)).map(|_| w3_once(&rt, &registry)).collect());
        emit("W3-wall", wall, "ms");
    }
    if wants("W3-rss-per-run") {
        match w3_rss() {
            Some(kb) => emit("W3-rss-per-run", kb, "kb"),
            None => fail("W3: the memory probe gave no figure"),
        }
    }

    w4();
    w5();

    // Last: a subscriber once set leaves tracing's global interest changed for any figure after it.
    if wants("W1-otel") {
        emit("W1-otel", w1(&current, &registry, 1000, Variant::Otel, record), "us_per_step");
    }
}
