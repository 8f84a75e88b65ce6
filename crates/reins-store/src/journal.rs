//! The session journal: the [`reins::Journal`] the driver records through. Each run gets a writer
//! thread with its own connection behind a bounded queue; the run only serializes and enqueues, and
//! waits on disk only at [`RunJournal::flush`] (before each model call) and at the end.

use std::sync::{Arc, Condvar, Mutex};

use async_trait::async_trait;
use reins::{
    Event, EventKind, Journal, JournalError, Message, ModelError, ModelResponse, Outcome, RunJournal, RunState,
    ToolSpec,
};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::chunk::{self, Chunk, Delta, Placement};
use crate::error::StoreError;
use crate::session::{RunStartData, kind};
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
    /// US dollars per million input tokens written to a prompt cache (none: priced as other input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<f64>,
}

impl Prices {
    /// The cost of one call's usage, in US dollars (the core's [`reins::Price`] at these rates).
    pub fn cost(&self, u: &reins::Usage) -> f64 {
        let read = if self.cached_input_per_mtok > 0.0 { self.cached_input_per_mtok } else { self.input_per_mtok };
        reins::Price {
            input_per_mtok: self.input_per_mtok,
            output_per_mtok: self.output_per_mtok,
            cache_read_per_mtok: Some(read),
            cache_write_per_mtok: self.cache_write_per_mtok,
        }
        .cost(u)
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

/// What a run's log shares with its background writer (and with the logs of its sub-agents' runs).
pub(crate) struct Shared {
    path: std::path::PathBuf,
    session_id: String,
    /// The session's row in the index (and the high bits of its log rows' ids).
    key: i64,
    run: i64,
    /// The write connection; whoever holds it writes every pending entry, in order. Gone once the run's
    /// log is closed (back in the store's pool).
    conn: Mutex<Option<Connection>>,
    pending: Mutex<Pending>,
    /// Wakes the background writer (many entries pending, a checkpoint due, the run gone).
    wake: Condvar,
    /// How many entries may wait before the background writer takes them.
    queue: usize,
    /// Flushes since the store's write-ahead log was last checkpointed (shared by the store's runs).
    flushes: Arc<std::sync::atomic::AtomicU32>,
    /// Held while the run records: says the session's process is alive (see [`crate::liveness`]).
    _owner: Option<crate::owner::OwnerLock>,
}

#[derive(Default)]
struct Pending {
    chunk: Chunk,
    /// The seq the next chunk's first entry takes.
    next_seq: i64,
    /// Transcript items the session holds once everything recorded is written.
    messages: i64,
    /// What this run's written chunks add up to (folded into the session's counters when the run ends).
    written: Delta,
    error: Option<String>,
    closed: bool,
    checkpoint_due: bool,
}

impl Shared {
    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes every pending entry as one chunk, in one transaction. The first failure sticks: later writes
    /// report it.
    fn write_pending(&self) -> Result<(), String> {
        let conn = self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(conn) = conn.as_ref() else {
            return Err(format!("the log of session {} is closed", self.session_id));
        };
        let (chunk, at, written) = {
            let mut p = self.lock_pending();
            if let Some(e) = &p.error {
                return Err(e.clone());
            }
            if p.chunk.is_empty() {
                return Ok(());
            }
            let at = Placement { key: self.key, run: self.run, seq: p.next_seq, messages: p.messages };
            (p.chunk.take(), at, p.written)
        };
        let result = write(conn, &at, &chunk, written);
        let mut p = self.lock_pending();
        let failure = match result {
            Ok(Ok(true)) => {
                p.next_seq = at.seq + chunk.entries;
                p.written.add(chunk.delta);
                p.chunk.reuse(chunk);
                return Ok(());
            }
            Ok(Ok(false)) => format!(
                "session {} of {} was continued by another run meanwhile; this run records nothing more",
                self.session_id,
                self.path.display()
            ),
            Ok(Err(e)) => e,
            Err(e) => StoreError::sqlite(&self.path, e).to_string(),
        };
        p.error = Some(failure.clone());
        Err(failure)
    }
}

/// Writes `chunk` and, when it ends the run, folds the run's totals into the session's counters, in one
/// transaction. `Ok(Ok(false))`: a later run owns the session.
fn write(conn: &Connection, at: &Placement, chunk: &Chunk, written: Delta) -> rusqlite::Result<Result<bool, String>> {
    chunk::write_transaction(conn, |tx| {
        match chunk::append(tx, at, chunk)? {
            Ok(true) => {}
            other => return Ok(other),
        }
        if let Some(status) = &chunk.status {
            let mut total = written;
            total.add(chunk.delta);
            chunk::fold(tx, at.key, total, Some(status), at.messages, at.seq + chunk.entries)?;
        }
        Ok(Ok(true))
    })
}

/// The log of one run; see [`reins::RunJournal`]. Recording appends to an in-memory chunk; a flush
/// commits it as one row; a background thread writes when the chunk grows long or the run is quiet (a
/// long tool call), and checkpoints the write-ahead log off the run's path.
pub struct RunLog {
    session_id: String,
    recorded: usize,
    /// The SHA-256s of the images the session holds (each is written once).
    images: std::sync::Mutex<std::collections::HashSet<String>>,
    shared: Arc<Shared>,
    prices: Option<Prices>,
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

pub(crate) fn usage_delta(r: &ModelResponse, prices: Option<Prices>) -> Delta {
    match &r.usage {
        None => Delta { steps: 1, no_usage: 1, ..Delta::default() },
        Some(u) => Delta {
            steps: 1,
            input: i64_of(u.input_tokens),
            output: i64_of(u.output_tokens),
            cost: step_cost(r, prices).unwrap_or(0.0),
            ..Delta::default()
        },
    }
}

/// A step's cost, when its usage and its price are known: the price of the model that answered it (a
/// fallback's other model: [`ModelResponse::answered_by`]), else the session's.
fn step_cost(r: &ModelResponse, prices: Option<Prices>) -> Option<f64> {
    let u = r.usage.as_ref()?;
    match &r.answered_by {
        Some(by) => by.price.map(|p| p.cost(u)),
        None => prices.map(|p| p.cost(u)),
    }
}

impl Shared {
    /// Records one entry (see [`Chunk::push`]) moving the counters by `delta`.
    pub(crate) fn record<E: std::fmt::Display>(
        &self,
        kind: &str,
        msg_index: Option<usize>,
        delta: Delta,
        what: impl FnOnce() -> String,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) {
        let len = {
            let mut p = self.lock_pending();
            if let Err(e) = p.chunk.push(kind, msg_index, write) {
                // Sticks like a write failure: nothing more is written, the next flush reports it.
                p.error.get_or_insert_with(|| format!("cannot serialize {}: {e}", what()));
                return;
            }
            p.chunk.delta.add(delta);
            if let Some(i) = msg_index {
                p.messages = p.messages.max(i64::try_from(i).unwrap_or(i64::MAX).saturating_add(1));
            }
            usize::try_from(p.chunk.entries).unwrap_or(usize::MAX)
        };
        let queue = self.queue;
        if len >= queue {
            // The queue is full: the background writer takes it now; far beyond, the run waits
            // (backpressure, never loss). A failure sticks and the next flush reports it.
            self.wake.notify_all();
            if len >= queue.saturating_mul(4) {
                let _ = blocking(|| self.write_pending());
            }
        }
    }

    /// Records an event: the run's start and a model call's start are progress that no flush waits for (the
    /// transaction of the flush before a run's first model call, with nothing else to write, is saved).
    pub(crate) fn event(&self, event: &Event, what: impl FnOnce() -> String) {
        if matches!(event.kind, EventKind::RunStart(_) | EventKind::ModelStart { .. }) {
            let mut p = self.lock_pending();
            if let Err(e) = p.chunk.push_progress(kind::EVENT, None, |out| event.write_json(out)) {
                p.error.get_or_insert_with(|| format!("cannot serialize {}: {e}", what()));
            }
            return;
        }
        self.record(kind::EVENT, None, Delta::default(), what, |out| event.write_json(out));
    }

    /// Writes everything recorded but progress alone (see [`Shared::event`]); the first failure of the log
    /// (writing or serializing) sticks.
    pub(crate) async fn wait(&self) -> Result<(), JournalError> {
        let skip = {
            let p = self.lock_pending();
            match &p.error {
                Some(e) => return Err(JournalError(e.clone())),
                None => !p.chunk.must_write,
            }
        };
        let result = if skip { Ok(()) } else { blocking(|| self.write_pending()) };
        // Every so many flushes (over all runs of the store), this run's writer checkpoints.
        if self.flushes.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 >= CHECKPOINT_EVERY {
            self.flushes.store(0, std::sync::atomic::Ordering::Relaxed);
            self.lock_pending().checkpoint_due = true;
            self.wake.notify_all();
        }
        result.map_err(JournalError)
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

    async fn child(
        &self,
        agent: &str,
        parent_run_id: &str,
        state: &RunState,
        tools: &[ToolSpec],
    ) -> Result<Option<Arc<dyn RunJournal>>, JournalError> {
        crate::child::start(&self.shared, &self.session_id, self.prices, agent, parent_run_id, state, tools)
    }

    fn message(&self, index: usize, message: &Message) {
        let delta = Delta { tool_calls: message.tool_calls().len() as i64, ..Delta::default() };
        if !message.images().is_empty() {
            // Images are written once per session, before the item that refers to them.
            let mut p = self.shared.lock_pending();
            let mut seen = self.images.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Err(e) = crate::images::push_message(&mut p.chunk, &mut seen, index, message) {
                p.error.get_or_insert_with(|| format!("cannot serialize transcript item {index}: {e}"));
                return;
            }
            p.chunk.delta.add(delta);
            p.messages = p.messages.max(i64::try_from(index).unwrap_or(i64::MAX).saturating_add(1));
            return;
        }
        self.shared.record(
            kind::MESSAGE,
            Some(index),
            delta,
            || format!("transcript item {index}"),
            |out| serde_json::to_writer(out, message),
        );
    }

    fn response(&self, step: u64, response: Result<&ModelResponse, &ModelError>) {
        #[derive(Serialize)]
        struct Data<'a> {
            step: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            response: Option<&'a ModelResponse>,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            cost_usd: Option<f64>,
        }
        let (data, delta) = match response {
            Ok(r) => {
                let delta = usage_delta(r, self.prices);
                // The step's own cost, when prices and usage are known (what the session view charts).
                let cost_usd = step_cost(r, self.prices);
                (Data { step, response: Some(r), error: None, cost_usd }, delta)
            }
            Err(e) => (Data { step, response: None, error: Some(e.to_string()), cost_usd: None }, Delta::default()),
        };
        self.shared.record(
            kind::RESPONSE,
            None,
            delta,
            || format!("the response of step {step}"),
            |out| serde_json::to_writer(out, &data),
        );
    }

    fn event(&self, event: &Event) {
        self.shared.event(event, || format!("event {}", event.seq));
    }

    async fn flush(&self) -> Result<(), JournalError> {
        self.shared.wait().await
    }

    fn waiting(&self, pending: &[reins::PendingCall]) {
        #[derive(Serialize)]
        struct Data<'a> {
            pending: &'a [reins::PendingCall],
        }
        self.shared.record(
            kind::APPROVAL_WAITING,
            None,
            Delta::default(),
            || "the batch waiting for a decision".to_owned(),
            |out| serde_json::to_writer(out, &Data { pending }),
        );
    }

    async fn finish(&self, outcome: &Outcome) -> Result<(), JournalError> {
        // The outcome without its transcript (recorded item by item already), serialized in place.
        #[derive(Serialize)]
        struct End<'a> {
            status: &'a reins::Status,
            answer: &'a Option<String>,
            error: &'a Option<String>,
            steps: u64,
            tool_calls: u64,
            usage: &'a reins::UsageTotals,
            compactions: u64,
            output: &'a Option<serde_json::Value>,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            pending: &'a Vec<reins::PendingCall>,
            run_id: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            session_id: &'a Option<String>,
            #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
            agents: &'a std::collections::BTreeMap<String, reins::AgentTotals>,
        }
        let o = outcome;
        let end = End {
            status: &o.status,
            answer: &o.answer,
            error: &o.error,
            steps: o.steps,
            tool_calls: o.tool_calls,
            usage: &o.usage,
            compactions: o.compactions,
            output: &o.output,
            pending: &o.pending,
            run_id: &o.run_id,
            session_id: &o.session_id,
            agents: &o.agents,
        };
        {
            let mut p = self.shared.lock_pending();
            if let Err(e) = p.chunk.push(kind::RUN_END, None, |out| serde_json::to_writer(out, &end)) {
                return Err(JournalError(format!("cannot record the end of the run: {e}")));
            }
            p.chunk.status = Some(outcome.status.as_str().to_owned());
        }
        self.shared.wait().await
    }
}

#[async_trait]
impl Journal for SessionJournal {
    async fn start(&self, state: &RunState, tools: &[ToolSpec]) -> Result<Arc<dyn RunJournal>, JournalError> {
        let initial = state.transcript().len();
        let mut images = match &self.target {
            Target::New => Default::default(),
            Target::Existing { messages, .. } => crate::images::held(messages),
        };
        let (recorded, new) = match &self.target {
            Target::New => (initial, true),
            Target::Existing { id, messages } => {
                let t = state.transcript().conversation();
                if t.len() < messages.len() || messages.iter().enumerate().any(|(i, m)| t.get(i) != Some(m)) {
                    return Err(JournalError(format!(
                        "the run does not continue the recorded transcript of session {id}"
                    )));
                }
                (messages.len(), false)
            }
        };
        let start = RunStartData {
            run_id: state.run_id().to_owned(),
            limits: state.limits().clone(),
            tools: tools.to_vec(),
            instructions: state.instructions().map(str::to_owned),
            initial_messages: initial as u64,
            // Items earlier runs recorded: none for a new session (its first items come with this run).
            recorded_messages: if new { 0 } else { recorded as u64 },
            config: self.meta.config.clone(),
        };
        // The run's first chunk: its start and, for a new session, its first transcript items (the prompt),
        // registered together in one transaction: no session ever exists without its prompt.
        let mut first = Chunk::default();
        first
            .push(kind::RUN_START, None, |out| serde_json::to_writer(out, &start))
            .map_err(|e| JournalError(format!("cannot serialize the run: {e}")))?;
        if new {
            for (index, m) in state.transcript().conversation().iter().enumerate() {
                crate::images::push_message(&mut first, &mut images, index, m)
                    .map_err(|e| JournalError(format!("cannot serialize transcript item {index}: {e}")))?;
                first.delta.tool_calls += m.tool_calls().len() as i64;
            }
        }
        // Registering runs on this thread (a fresh thread would be slow at it: cold caches, a new
        // allocator arena); the background writer starts once the run is registered.
        let shared =
            blocking(|| register(&self.store, &self.meta, &self.target, recorded, &first)).map_err(JournalError)?;
        let store = self.store.clone();
        let background = shared.clone();
        // Until the writer has handed the run's connection back, closing the store waits for it.
        let ticket = self.store.run_ticket();
        self.store
            .in_background(Box::new(move || writer(store, background, ticket)))
            .map_err(|e| JournalError(format!("cannot start the writer thread: {e}")))?;
        Ok(Arc::new(RunLog {
            session_id: shared.session_id.clone(),
            recorded,
            images: std::sync::Mutex::new(images),
            shared,
            prices: self.meta.prices,
        }))
    }
}

/// Where a run writes, once registered.
struct Started {
    session_id: String,
    key: i64,
    run: i64,
    next_seq: i64,
    messages: i64,
    written: Delta,
}

/// Registers the run and writes its first chunk, in one transaction. A session whose last run never
/// ended (its process died) has that run's totals folded into its counters first.
fn begin(
    conn: &mut Connection,
    meta: &SessionMeta,
    target: &Target,
    recorded: usize,
    first: &Chunk,
) -> rusqlite::Result<Result<Started, String>> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let ts = now();
    let recorded = i64::try_from(recorded).unwrap_or(i64::MAX);
    let (session_id, key, run, seq) = match target {
        Target::New => {
            let id = uuid::Uuid::new_v4().to_string();
            tx.execute(
                "INSERT INTO sessions (id, created_at, updated_at, model, workspace, status, runs, cost_usd, messages)
                 VALUES (?1, ?2, ?2, ?3, ?4, 'running', 1, ?5, 0)",
                params![id, ts, meta.model, meta.workspace, meta.prices.map(|_| 0.0f64)],
            )?;
            let key = tx.last_insert_rowid();
            if key >= 1i64 << 31 {
                return Ok(Err("the store holds too many sessions (2^31)".into()));
            }
            (id, key, 1, 0)
        }
        Target::Existing { id, .. } => {
            let row: Option<(i64, i64, String)> = tx
                .query_row("SELECT key, runs, status FROM sessions WHERE id = ?1", [id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()?;
            let Some((key, runs, status)) = row else {
                return Ok(Err(format!("no session {id:?} in the store")));
            };
            let (next_seq, messages, _) = chunk::tail(&tx, key)?.unwrap_or((0, 0, String::new()));
            if messages != recorded {
                return Ok(Err(format!(
                    "session {id} changed since it was loaded ({messages} transcript items recorded, {recorded} expected); is another run continuing it?"
                )));
            }
            if status == "running" {
                let open = chunk::run_totals(&tx, key, runs)?;
                chunk::fold(&tx, key, open, None, messages, next_seq)?;
            }
            tx.execute(
                "UPDATE sessions SET runs = ?2, status = 'running', updated_at = ?3 WHERE key = ?1",
                params![key, runs + 1, ts],
            )?;
            (id.clone(), key, runs + 1, next_seq)
        }
    };
    let messages = recorded;
    let at = Placement { key, run, seq, messages };
    if let Err(e) = chunk::append(&tx, &at, first)? {
        return Ok(Err(e));
    }
    tx.commit()?;
    Ok(Ok(Started { session_id, key, run, next_seq: seq + first.entries, messages, written: first.delta }))
}

/// Takes a write connection and registers the run: what the run's log shares with its background writer.
fn register(
    store: &Store,
    meta: &SessionMeta,
    target: &Target,
    recorded: usize,
    first: &Chunk,
) -> Result<Arc<Shared>, String> {
    let path = store.path().to_path_buf();
    let mut conn = store.writer_connection().map_err(|e| e.to_string())?;
    // A lock SQLite reports at once (another process creating or switching the file) is waited out.
    let begun = crate::store::wait_out_busy(
        store.options().busy_timeout,
        |e: &rusqlite::Error| {
            matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
            )
        },
        || begin(&mut conn, meta, target, recorded, first),
    );
    let started = match begun {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            store.give_back(conn);
            return Err(e);
        }
        Err(e) => return Err(StoreError::sqlite(&path, e).to_string()),
    };
    let owner = crate::owner::OwnerLock::take(&path, &started.session_id);
    Ok(Arc::new(Shared {
        path,
        session_id: started.session_id,
        key: started.key,
        run: started.run,
        conn: Mutex::new(Some(conn)),
        pending: Mutex::new(Pending {
            next_seq: started.next_seq,
            messages: started.messages,
            written: started.written,
            ..Pending::default()
        }),
        wake: Condvar::new(),
        queue: store.options().queue.max(1),
        flushes: store.flushes().clone(),
        _owner: owner,
    }))
}

/// The background writer of one run: writes when the run is quiet or its queue long, checkpoints.
fn writer(store: Store, shared: Arc<Shared>, ticket: crate::store::RunTicket) {
    loop {
        let (closed, write_now, due) = {
            let p = shared.lock_pending();
            let (mut p, timeout) = shared
                .wake
                .wait_timeout_while(p, IDLE_WRITE, |p| {
                    !p.closed && !p.checkpoint_due && (p.chunk.entries as usize) < shared.queue
                })
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let due = std::mem::take(&mut p.checkpoint_due);
            let pending = p.chunk.entries as usize;
            // Quiet for a while with entries waiting (a long tool call): write them.
            let write = p.closed || (pending > 0 && (timeout.timed_out() || pending >= shared.queue));
            (p.closed, write, due)
        };
        if write_now {
            let _ = shared.write_pending();
        }
        if closed {
            // The run is over: its connection goes back to the store for the next runs.
            let conn = shared.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            if let Some(c) = conn {
                store.give_back(c);
            }
        }
        if due {
            // Through a connection of its own: a passive checkpoint runs alongside the run's commits
            // instead of holding the write connection (its fsync can take milliseconds).
            if let Ok(c) = store.writer_connection() {
                let _ = c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                store.give_back(c);
            }
        }
        if closed {
            drop(ticket);
            return;
        }
    }
}

/// How long entries may wait for a flush while the run is quiet.
const IDLE_WRITE: std::time::Duration = std::time::Duration::from_millis(200);
/// Flushes (over all runs of a store) between two checkpoints of the write-ahead log; the store's last
/// connection checkpoints when it closes.
const CHECKPOINT_EVERY: u32 = 1000;
