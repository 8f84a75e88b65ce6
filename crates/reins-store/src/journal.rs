//! The session journal: the [`reins::Journal`] the driver records through. Each run gets a writer
//! thread with its own connection behind a bounded queue; the run only serializes and enqueues, and
//! waits on disk only at [`RunJournal::flush`] (before each model call) and at the end.

use std::sync::{Arc, Condvar, Mutex};

use async_trait::async_trait;
use reins::{
    Event, Journal, JournalError, Message, ModelError, ModelResponse, Outcome, RunJournal, RunState, ToolSpec,
};
use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::error::StoreError;
use crate::session::{ResponseData, RunStartData, kind};
use crate::store::{Store, now};

/// Prices per million tokens, to keep a session's cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Prices {
    /// US dollars per million input tokens.
    pub input_per_mtok: f64,
    /// US dollars per million output tokens.
    pub output_per_mtok: f64,
    /// US dollars per million input tokens served from a prompt cache (0: priced as other input).
    #[serde(default)]
    pub cached_input_per_mtok: f64,
}

impl Prices {
    /// The cost of one call's usage, in US dollars.
    pub fn cost(&self, u: &reins::Usage) -> f64 {
        let cached = u.cached_input_tokens.min(u.input_tokens);
        let cached_price =
            if self.cached_input_per_mtok > 0.0 { self.cached_input_per_mtok } else { self.input_per_mtok };
        ((u.input_tokens - cached) as f64 * self.input_per_mtok
            + cached as f64 * cached_price
            + u.output_tokens as f64 * self.output_per_mtok)
            / 1e6
    }
}

/// What a new session records about itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// The model, as the caller names it (e.g. `openai:gpt-5-mini`).
    pub model: Option<String>,
    /// The workspace the tools act in.
    pub workspace: Option<String>,
    /// Prices, when known; the session's cost stays unknown otherwise.
    pub prices: Option<Prices>,
    /// How the caller configured each run (e.g. the command's flags), recorded with each run start so
    /// that a replay can rebuild the same tools and context rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
}

#[derive(Clone, Debug)]
enum Target {
    /// Each run starts a new session.
    New,
    /// Runs append to this session, whose transcript holds `messages` items when the journal is made.
    Existing { id: String, messages: Vec<Message> },
}

/// Records runs into a [`Store`]. Made with [`Store::journal`] (every run a new session) or
/// [`Store::resume_journal`] (runs continue one session); hand it to
/// [`reins::AgentBuilder::journal`].
#[derive(Clone, Debug)]
pub struct SessionJournal {
    store: Store,
    meta: SessionMeta,
    target: Target,
}

impl Store {
    /// A journal that records each run as a new session.
    pub fn journal(&self, meta: SessionMeta) -> SessionJournal {
        SessionJournal { store: self.clone(), meta, target: Target::New }
    }

    /// A journal that appends runs to the recorded session `session` (whose transcript the run state
    /// must continue: see [`crate::Session::resume_state`]).
    pub fn resume_journal(&self, session: &crate::Session, meta: SessionMeta) -> Result<SessionJournal, StoreError> {
        let messages = session.messages()?;
        Ok(SessionJournal {
            store: self.clone(),
            meta,
            target: Target::Existing { id: session.id().to_owned(), messages },
        })
    }
}

/// How much one entry moves the session's counters.
#[derive(Clone, Copy, Debug, Default)]
struct Delta {
    steps: i64,
    tool_calls: i64,
    input: i64,
    output: i64,
    no_usage: i64,
    cost: f64,
}

struct Row {
    kind: &'static str,
    msg_index: Option<i64>,
    ts: String,
    data: String,
    delta: Delta,
    status: Option<String>,
}

/// What a run's log shares with its background writer.
struct Shared {
    path: std::path::PathBuf,
    session_id: String,
    run: i64,
    /// The write connection; whoever holds it writes every pending row, in order.
    conn: Mutex<Connection>,
    pending: Mutex<Pending>,
    /// Wakes the background writer (many rows pending, a checkpoint due, the run gone).
    wake: Condvar,
    /// How many rows may wait before the background writer takes them.
    queue: usize,
}

#[derive(Default)]
struct Pending {
    rows: Vec<Row>,
    next_seq: i64,
    error: Option<String>,
    closed: bool,
    flushes: u32,
    checkpoint_due: bool,
}

impl Shared {
    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes every pending row in one transaction. The first failure sticks: later writes report it.
    fn write_pending(&self) -> Result<(), String> {
        let mut conn = self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (rows, seq) = {
            let mut p = self.lock_pending();
            if let Some(e) = &p.error {
                return Err(e.clone());
            }
            (std::mem::take(&mut p.rows), p.next_seq)
        };
        if rows.is_empty() {
            return Ok(());
        }
        let result = write(&mut conn, &self.session_id, self.run, seq, &rows);
        let mut p = self.lock_pending();
        match result {
            Ok(next) => {
                p.next_seq = next;
                Ok(())
            }
            Err(e) => {
                let msg = StoreError::sqlite(&self.path, e).to_string();
                p.error = Some(msg.clone());
                Err(msg)
            }
        }
    }
}

/// The log of one run; see [`reins::RunJournal`]. Recording appends to an in-memory queue; a flush
/// commits the queue in one transaction; a background thread writes when the queue grows long or the
/// run is quiet (a long tool call), and checkpoints the write-ahead log off the run's path.
pub struct RunLog {
    session_id: String,
    recorded: usize,
    shared: Arc<Shared>,
    failed: Mutex<Option<String>>,
    prices: Option<Prices>,
    queue: usize,
}

impl Drop for RunLog {
    fn drop(&mut self) {
        self.shared.lock_pending().closed = true;
        self.shared.wake.notify_all();
    }
}

/// Runs blocking work from async code: on a multi-threaded runtime other tasks move off this
/// thread meanwhile; elsewhere it simply runs (a commit takes tens of microseconds).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn usage_delta(r: &ModelResponse, prices: Option<Prices>) -> Delta {
    match &r.usage {
        None => Delta { steps: 1, no_usage: 1, ..Delta::default() },
        Some(u) => Delta {
            steps: 1,
            input: i64_of(u.input_tokens),
            output: i64_of(u.output_tokens),
            cost: prices.map_or(0.0, |p| p.cost(u)),
            ..Delta::default()
        },
    }
}

impl RunLog {
    fn push(&self, row: Row) {
        let len = {
            let mut p = self.shared.lock_pending();
            p.rows.push(row);
            p.rows.len()
        };
        if len >= self.queue {
            // The queue is full: the background writer takes it now; far beyond, the run waits
            // (backpressure, never loss).
            self.shared.wake.notify_all();
            if len >= self.queue.saturating_mul(4) {
                if let Err(e) = blocking(|| self.shared.write_pending()) {
                    self.fail(e);
                }
            }
        }
    }

    fn fail(&self, msg: String) {
        if let Ok(mut f) = self.failed.lock() {
            f.get_or_insert(msg);
        }
    }

    fn failure(&self) -> Option<String> {
        self.failed.lock().ok().and_then(|f| f.clone())
    }

    async fn wait(&self) -> Result<(), JournalError> {
        if let Some(e) = self.failure() {
            return Err(JournalError(e));
        }
        let result = blocking(|| self.shared.write_pending());
        let due = {
            let mut p = self.shared.lock_pending();
            p.flushes += 1;
            if p.flushes % CHECKPOINT_EVERY == 0 {
                p.checkpoint_due = true;
                true
            } else {
                false
            }
        };
        if due {
            self.shared.wake.notify_all();
        }
        result.map_err(|e| {
            self.fail(e.clone());
            JournalError(e)
        })
    }
}

#[async_trait]
impl RunJournal for RunLog {
    fn session_id(&self) -> &str {
        &self.session_id
    }

    fn recorded(&self) -> usize {
        self.recorded
    }

    fn message(&self, index: usize, message: &Message) {
        let data = match serde_json::to_string(message) {
            Ok(d) => d,
            Err(e) => return self.fail(format!("cannot serialize transcript item {index}: {e}")),
        };
        let delta = Delta { tool_calls: message.tool_calls().len() as i64, ..Delta::default() };
        self.push(Row { kind: kind::MESSAGE, msg_index: Some(index as i64), ts: now(), data, delta, status: None });
    }

    fn response(&self, step: u64, response: Result<&ModelResponse, &ModelError>) {
        let (data, delta) = match response {
            Ok(r) => (ResponseData { step, response: Some(r.clone()), error: None }, usage_delta(r, self.prices)),
            Err(e) => (ResponseData { step, response: None, error: Some(e.to_string()) }, Delta::default()),
        };
        match serde_json::to_string(&data) {
            Ok(data) => self.push(Row { kind: kind::RESPONSE, msg_index: None, ts: now(), data, delta, status: None }),
            Err(e) => self.fail(format!("cannot serialize the response of step {step}: {e}")),
        }
    }

    fn event(&self, event: &Event) {
        self.push(Row {
            kind: kind::EVENT,
            msg_index: None,
            ts: now(),
            data: event.to_json(),
            delta: Delta::default(),
            status: None,
        });
    }

    async fn flush(&self) -> Result<(), JournalError> {
        self.wait().await
    }

    async fn finish(&self, outcome: &Outcome) -> Result<(), JournalError> {
        let mut v = match serde_json::to_value(outcome) {
            Ok(v) => v,
            Err(e) => return Err(JournalError(format!("cannot serialize the outcome: {e}"))),
        };
        if let Some(obj) = v.as_object_mut() {
            obj.remove("messages");
        }
        self.push(Row {
            kind: kind::RUN_END,
            msg_index: None,
            ts: now(),
            data: v.to_string(),
            delta: Delta::default(),
            status: Some(outcome.status.as_str().to_owned()),
        });
        self.wait().await
    }
}

struct Started {
    session_id: String,
    run: i64,
    next_seq: i64,
}

#[async_trait]
impl Journal for SessionJournal {
    async fn start(&self, state: &RunState, tools: &[ToolSpec]) -> Result<Arc<dyn RunJournal>, JournalError> {
        let initial = state.transcript().len();
        // A new session is registered together with its first transcript items (the prompt), in one
        // transaction: no session ever exists without its prompt, whenever the process dies.
        let mut first_items = Vec::new();
        let recorded = match &self.target {
            Target::New => {
                for (index, m) in state.transcript().conversation().iter().enumerate() {
                    let data = serde_json::to_string(m)
                        .map_err(|e| JournalError(format!("cannot serialize transcript item {index}: {e}")))?;
                    first_items.push((data, m.tool_calls().len() as i64));
                }
                first_items.len()
            }
            Target::Existing { id, messages } => {
                let t = state.transcript().conversation();
                if t.len() < messages.len() || messages.iter().enumerate().any(|(i, m)| t.get(i) != Some(m)) {
                    return Err(JournalError(format!(
                        "the run does not continue the recorded transcript of session {id}"
                    )));
                }
                messages.len()
            }
        };
        let start = RunStartData {
            run_id: state.run_id().to_owned(),
            limits: state.limits().clone(),
            tools: tools.to_vec(),
            initial_messages: initial as u64,
            // Items earlier runs recorded: none for a new session (its first items come with this run).
            recorded_messages: if first_items.is_empty() { recorded as u64 } else { 0 },
            config: self.meta.config.clone(),
        };
        let start =
            serde_json::to_string(&start).map_err(|e| JournalError(format!("cannot serialize the run: {e}")))?;
        let (ready_tx, ready_rx) = oneshot::channel::<Result<Arc<Shared>, String>>();
        let store = self.store.clone();
        let meta = self.meta.clone();
        let target = self.target.clone();
        std::thread::Builder::new()
            .name("reins-store-writer".into())
            .spawn(move || writer(store, meta, target, start, recorded, first_items, ready_tx))
            .map_err(|e| JournalError(format!("cannot start the writer thread: {e}")))?;
        let shared = match ready_rx.await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(JournalError(e)),
            Err(_) => return Err(JournalError("the writer thread stopped while starting".into())),
        };
        Ok(Arc::new(RunLog {
            session_id: shared.session_id.clone(),
            recorded,
            shared,
            failed: Mutex::new(None),
            prices: self.meta.prices,
            queue: self.store.options().queue.max(1),
        }))
    }
}

/// Opens the connection and registers the run, in one transaction.
fn begin(
    conn: &mut Connection,
    meta: &SessionMeta,
    target: &Target,
    start: &str,
    recorded: usize,
    first_items: &[(String, i64)],
) -> rusqlite::Result<Result<Started, String>> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let ts = now();
    let started = match target {
        Target::New => {
            let id = uuid::Uuid::new_v4().to_string();
            tx.execute(
                "INSERT INTO sessions (id, created_at, updated_at, model, workspace, status, runs, cost_usd, next_seq)
                 VALUES (?1, ?2, ?2, ?3, ?4, 'running', 1, ?5, 0)",
                params![id, ts, meta.model, meta.workspace, meta.prices.map(|_| 0.0f64)],
            )?;
            Started { session_id: id, run: 1, next_seq: 0 }
        }
        Target::Existing { id, .. } => {
            let row: Option<(i64, i64, i64)> = tx
                .query_row("SELECT messages, runs, next_seq FROM sessions WHERE id = ?1", [id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .ok();
            let Some((messages, runs, next_seq)) = row else {
                return Ok(Err(format!("no session {id:?} in the store")));
            };
            if messages != recorded as i64 {
                return Ok(Err(format!(
                    "session {id} changed since it was loaded ({messages} transcript items recorded, {recorded} expected); is another run continuing it?"
                )));
            }
            tx.execute(
                "UPDATE sessions SET runs = ?2, status = 'running', updated_at = ?3 WHERE id = ?1",
                params![id, runs + 1, ts],
            )?;
            Started { session_id: id.clone(), run: runs + 1, next_seq }
        }
    };
    tx.execute(
        "INSERT INTO entries (session_id, seq, run, kind, msg_index, ts, data) VALUES (?1, ?2, ?3, ?4, NULL, ?5, ?6)",
        params![started.session_id, started.next_seq, started.run, kind::RUN_START, ts, start],
    )?;
    let mut next_seq = started.next_seq + 1;
    for (index, (data, calls)) in first_items.iter().enumerate() {
        tx.execute(
            "INSERT INTO entries (session_id, seq, run, kind, msg_index, ts, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![started.session_id, next_seq, started.run, kind::MESSAGE, index as i64, ts, data],
        )?;
        tx.execute(
            "UPDATE sessions SET tool_calls = tool_calls + ?2 WHERE id = ?1",
            params![started.session_id, calls],
        )?;
        next_seq += 1;
    }
    if !first_items.is_empty() {
        tx.execute(
            "UPDATE sessions SET messages = ?2 WHERE id = ?1",
            params![started.session_id, first_items.len() as i64],
        )?;
    }
    tx.execute("UPDATE sessions SET next_seq = ?2 WHERE id = ?1", params![started.session_id, next_seq])?;
    tx.commit()?;
    Ok(Ok(Started { next_seq, ..started }))
}

fn writer(
    store: Store,
    meta: SessionMeta,
    target: Target,
    start: String,
    recorded: usize,
    first_items: Vec<(String, i64)>,
    ready: oneshot::Sender<Result<Arc<Shared>, String>>,
) {
    let path = store.path().to_path_buf();
    let mut conn = match store.connect(false) {
        Ok(c) => c,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    };
    // This connection never checkpoints inside a commit: this thread does, off the run's path.
    if let Err(e) = conn.query_row("PRAGMA wal_autocheckpoint = 0", [], |_| Ok(())) {
        let _ = ready.send(Err(StoreError::sqlite(&path, e).to_string()));
        return;
    }
    // A lock SQLite reports at once (another process creating or switching the file) is waited out.
    let begun = crate::store::wait_out_busy(
        store.options().busy_timeout,
        |e: &rusqlite::Error| {
            matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
            )
        },
        || begin(&mut conn, &meta, &target, &start, recorded, &first_items),
    );
    let started = match begun {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let _ = ready.send(Err(e));
            return;
        }
        Err(e) => {
            let _ = ready.send(Err(StoreError::sqlite(&path, e).to_string()));
            return;
        }
    };
    let shared = Arc::new(Shared {
        path,
        session_id: started.session_id,
        run: started.run,
        conn: Mutex::new(conn),
        pending: Mutex::new(Pending { next_seq: started.next_seq, ..Pending::default() }),
        wake: Condvar::new(),
        queue: store.options().queue.max(1),
    });
    if ready.send(Ok(shared.clone())).is_err() {
        return;
    }
    // Checkpoints go through a connection of their own: a passive checkpoint runs alongside the run's
    // commits instead of holding the write connection (its fsync can take milliseconds).
    let checkpointer = store.connect(false).ok();
    let checkpoint = || {
        if let Some(c) = &checkpointer {
            let _ = c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        }
    };
    loop {
        let (closed, write_now, due) = {
            let p = shared.lock_pending();
            let (mut p, timeout) = shared
                .wake
                .wait_timeout_while(p, IDLE_WRITE, |p| !p.closed && !p.checkpoint_due && p.rows.len() < shared.queue)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let due = std::mem::take(&mut p.checkpoint_due);
            // Quiet for a while with rows waiting (a long tool call): write them.
            let write = p.closed || (!p.rows.is_empty() && (timeout.timed_out() || p.rows.len() >= shared.queue));
            (p.closed, write, due)
        };
        if write_now {
            let _ = shared.write_pending();
        }
        if due || closed {
            checkpoint();
        }
        if closed {
            return;
        }
    }
}

/// How long rows may wait for a flush while the run is quiet.
const IDLE_WRITE: std::time::Duration = std::time::Duration::from_millis(200);
/// Flushes between two checkpoints of the write-ahead log.
const CHECKPOINT_EVERY: u32 = 1000;

fn write(conn: &mut Connection, session: &str, run: i64, mut seq: i64, rows: &[Row]) -> rusqlite::Result<i64> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut d = Delta::default();
    let mut messages: Option<i64> = None;
    let mut status: Option<&str> = None;
    {
        let mut insert = tx.prepare_cached(
            "INSERT INTO entries (session_id, seq, run, kind, msg_index, ts, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        for r in rows {
            insert.execute(params![session, seq, run, r.kind, r.msg_index, r.ts, r.data])?;
            seq += 1;
            d.steps += r.delta.steps;
            d.tool_calls += r.delta.tool_calls;
            d.input = d.input.saturating_add(r.delta.input);
            d.output = d.output.saturating_add(r.delta.output);
            d.no_usage += r.delta.no_usage;
            d.cost += r.delta.cost;
            if let Some(i) = r.msg_index {
                messages = Some(i + 1);
            }
            if let Some(s) = &r.status {
                status = Some(s);
            }
        }
    }
    tx.prepare_cached(
        "UPDATE sessions SET updated_at = ?2, next_seq = ?3, steps = steps + ?4, tool_calls = tool_calls + ?5,
         input_tokens = input_tokens + ?6, output_tokens = output_tokens + ?7,
         calls_without_usage = calls_without_usage + ?8, cost_usd = cost_usd + ?9,
         messages = coalesce(?10, messages), status = coalesce(?11, status) WHERE id = ?1",
    )?
    .execute(params![
        session,
        now(),
        seq,
        d.steps,
        d.tool_calls,
        d.input,
        d.output,
        d.no_usage,
        d.cost,
        messages,
        status
    ])?;
    tx.commit()?;
    Ok(seq)
}
