//! The log of a sub-agent's run: a child run recorded in its parent run's log, in the same session.
//!
//! Its entries go into the parent's pending chunk (so they are written with the parent's, under the parent's
//! run number, and need no registration of their own): `child_run_start`, `child_message`,
//! `child_response`, the child's events (as `event` entries: their lines carry `agent` and
//! `parent_run_id`) and `child_run_end`. Their `data` names the child run by `run_id`. They never touch the
//! session's transcript (`message` entries): a resumed session continues the parent's conversation. Their
//! usage, cost, steps and tool calls move the session's counters, as the parent's do.

use std::sync::Arc;

use async_trait::async_trait;
use reins::{JournalError, Message, ModelError, ModelResponse, Outcome, RunJournal, RunState, ToolSpec};
use serde::Serialize;

use crate::chunk::Delta;
use crate::journal::{Prices, Shared, usage_delta};
use crate::session::{ChildRunStartData, kind};

/// The log of one child run (see the module).
pub(crate) struct ChildLog {
    shared: Arc<Shared>,
    session_id: String,
    run_id: String,
    prices: Option<Prices>,
}

/// Records the start of the child run of sub-agent `agent` and its first transcript items (its task).
pub(crate) fn start(
    shared: &Arc<Shared>,
    session_id: &str,
    prices: Option<Prices>,
    agent: &str,
    parent_run_id: &str,
    state: &RunState,
    tools: &[ToolSpec],
) -> Result<Option<Arc<dyn RunJournal>>, JournalError> {
    let data = ChildRunStartData {
        run_id: state.run_id().to_owned(),
        parent_run_id: parent_run_id.to_owned(),
        agent: agent.to_owned(),
        limits: state.limits().clone(),
        tools: tools.to_vec(),
        instructions: state.instructions().map(str::to_owned),
    };
    shared.record(
        kind::CHILD_RUN_START,
        None,
        Delta::default(),
        || "a sub-agent's run".to_owned(),
        |out| serde_json::to_writer(out, &data),
    );
    let log = ChildLog {
        shared: Arc::clone(shared),
        session_id: session_id.to_owned(),
        run_id: state.run_id().to_owned(),
        prices,
    };
    Ok(Some(Arc::new(log)))
}

#[async_trait]
impl RunJournal for ChildLog {
    fn session_id(&self) -> &str {
        &self.session_id
    }

    /// None: the driver hands over every item of the child's transcript, its task first.
    fn recorded(&self) -> usize {
        0
    }

    fn message(&self, index: usize, message: &Message) {
        #[derive(Serialize)]
        struct Data<'a> {
            run_id: &'a str,
            index: usize,
            message: &'a Message,
        }
        let delta = Delta { tool_calls: message.tool_calls().len() as i64, ..Delta::default() };
        let data = Data { run_id: &self.run_id, index, message };
        self.shared.record(
            kind::CHILD_MESSAGE,
            None,
            delta,
            || format!("item {index} of a sub-agent's transcript"),
            |out| serde_json::to_writer(out, &data),
        );
    }

    fn response(&self, step: u64, response: Result<&ModelResponse, &ModelError>) {
        #[derive(Serialize)]
        struct Data<'a> {
            run_id: &'a str,
            step: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            response: Option<&'a ModelResponse>,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<String>,
        }
        let run_id = self.run_id.as_str();
        let (data, delta) = match response {
            Ok(r) => (Data { run_id, step, response: Some(r), error: None }, usage_delta(r, self.prices)),
            Err(e) => (Data { run_id, step, response: None, error: Some(e.to_string()) }, Delta::default()),
        };
        self.shared.record(
            kind::CHILD_RESPONSE,
            None,
            delta,
            || format!("the response of step {step} of a sub-agent"),
            |out| serde_json::to_writer(out, &data),
        );
    }

    fn event(&self, event: &reins::Event) {
        self.shared.event(event, || format!("event {} of a sub-agent", event.seq));
    }

    async fn flush(&self) -> Result<(), JournalError> {
        self.shared.wait().await
    }

    async fn finish(&self, outcome: &Outcome) -> Result<(), JournalError> {
        #[derive(Serialize)]
        struct End<'a> {
            status: &'a reins::Status,
            answer: &'a Option<String>,
            error: &'a Option<String>,
            steps: u64,
            tool_calls: u64,
            usage: &'a reins::UsageTotals,
            compactions: u64,
            run_id: &'a str,
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
            run_id: &o.run_id,
            agents: &o.agents,
        };
        self.shared.record(
            kind::CHILD_RUN_END,
            None,
            Delta::default(),
            || "the end of a sub-agent's run".to_owned(),
            |out| serde_json::to_writer(out, &end),
        );
        self.shared.wait().await
    }

    async fn child(
        &self,
        agent: &str,
        parent_run_id: &str,
        state: &RunState,
        tools: &[ToolSpec],
    ) -> Result<Option<Arc<dyn RunJournal>>, JournalError> {
        start(&self.shared, &self.session_id, self.prices, agent, parent_run_id, state, tools)
    }
}
