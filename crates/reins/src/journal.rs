//! The checkpoint hook: how the driver hands a run's progress to durable storage. The core only calls
//! these traits; it never does I/O itself (an implementation lives in an adapter crate, e.g. `reins-store`).
//!
//! For each run the driver calls [`Journal::start`] once, before anything else, and then, on the
//! returned [`RunJournal`]: [`RunJournal::response`] for every model response (or error) received,
//! [`RunJournal::message`] for every transcript item appended, [`RunJournal::event`] for every event, an
//! awaited [`RunJournal::flush`] before each model call (so a crash loses at most the step in flight) and
//! before each tool batch that runs a call (so the proposed calls are durable before any side effect: a crash mid-batch
//! leaves calls without results, which a resume reconciles, never a call silently run twice), and an
//! awaited [`RunJournal::finish`] with the outcome. Recording calls must not block on storage: they
//! queue; errors surface at the next `flush` or `finish`, and the run then ends `aborted` with the
//! error. Without a journal the driver pays nothing.

use std::sync::Arc;

use async_trait::async_trait;

use crate::engine::state::RunState;
use crate::events::Event;
use crate::message::Message;
use crate::model::{ModelError, ModelResponse};
use crate::outcome::Outcome;
use crate::tool::ToolSpec;

/// Why a run's log failed (disk full, read-only file, corrupt store, ...). The run ends `aborted`
/// with this message: a persistence failure is never silent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("session log: {0}")]
pub struct JournalError(pub String);

/// Opens the log of each run of an agent.
#[async_trait]
pub trait Journal: Send + Sync {
    /// A run begins, new or resumed, with this state and these tools on offer. An error ends the run
    /// `aborted` before any model call.
    async fn start(&self, state: &RunState, tools: &[ToolSpec]) -> Result<Arc<dyn RunJournal>, JournalError>;
}

/// The log of one run.
#[async_trait]
pub trait RunJournal: Send + Sync {
    /// The id of the session the run belongs to (carried by the outcome and the run events).
    fn session_id(&self) -> &str;
    /// How many leading messages of the run's initial transcript the log already holds (a resumed
    /// session); the driver records the rest with [`RunJournal::message`].
    fn recorded(&self) -> usize;
    /// The transcript item at `index` (0-based, over the whole session) was appended.
    fn message(&self, index: usize, message: &Message);
    /// The model answered the call of `step` (1-based within this run).
    fn response(&self, step: u64, response: Result<&ModelResponse, &ModelError>);
    /// An event of the run.
    fn event(&self, event: &Event);
    /// Waits until everything recorded so far is durable. Called before each model call and before
    /// each tool batch that runs at least one call.
    async fn flush(&self) -> Result<(), JournalError>;
    /// The run ended with `outcome`: records it and waits until everything is durable.
    async fn finish(&self, outcome: &Outcome) -> Result<(), JournalError>;
    /// The run is about to ask its approver about `pending`, its waiting batch (decisions made so far and a
    /// sub-agent's waiting calls included); the driver flushes before it asks. Recorded, a run killed while
    /// it waits for the answer can be decided later as if it had ended `awaiting_approval`. Default: nothing.
    fn waiting(&self, pending: &[crate::approval::PendingCall]) {
        let _ = pending;
    }
    /// A sub-agent `agent` of this run (`parent_run_id`) begins a run with this state and these tools: the
    /// log of that child run, recorded with this run's (the same session). `Ok(None)` (the default): the
    /// child run is not recorded.
    async fn child(
        &self,
        agent: &str,
        parent_run_id: &str,
        state: &RunState,
        tools: &[ToolSpec],
    ) -> Result<Option<Arc<dyn RunJournal>>, JournalError> {
        let _ = (agent, parent_run_id, state, tools);
        Ok(None)
    }
}

/// Feeds the driver's events into a run journal.
pub(crate) struct JournalObserver(pub(crate) Arc<dyn RunJournal>);

impl crate::events::Observer for JournalObserver {
    fn on_event(&self, event: &Event) -> Result<(), crate::events::ObserverError> {
        self.0.event(event);
        Ok(())
    }
}
