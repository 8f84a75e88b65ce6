//! A served run that needs the client's input under the 2026-07-28 revision, where a server sends the client
//! no request of its own (SEP-2322, multi round-trip requests): the `tools/call` is answered with an
//! input-required result holding the questions and a request state; the client answers and sends the call
//! again with that state; the run, which waited, goes on. Between two rounds the run is parked here, alive,
//! under a handle that is the request state.
//!
//! The request state is `ID.SECRET`, both random (128 and 256 bits) and never derived from the run: it is
//! only a handle, the run stays here. A state is good for one retry of the same tool (each round gets a new
//! one), and for [`Parking::bound`] at most: a state unknown, already used, for another tool or past its
//! time is refused, and a run whose state was not used in time is cancelled (its session ends `aborted`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ErrorData, InputRequest, InputRequests,
    InputRequiredResult, InputResponses,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// A question of a run for the client: an approval or a question of one of the agent's MCP servers.
pub(crate) struct Question {
    pub(crate) params: ElicitRequestParams,
    pub(crate) answer: oneshot::Sender<ElicitResult>,
}

/// A run in flight, held by the call (round) that drives it, or parked between rounds.
pub(crate) struct Run {
    /// The lines of progress the run's events make.
    pub(crate) progress: mpsc::UnboundedReceiver<String>,
    /// How many progress notifications were sent (they go on counting across rounds).
    pub(crate) progressed: u32,
    /// The questions the run asks, a batch at a time: the approvals one batch of the agent waits for come
    /// together, so they go out together in one input-required result.
    pub(crate) questions: mpsc::UnboundedReceiver<Vec<Question>>,
    /// The run's end.
    pub(crate) done: tokio::task::JoinHandle<Result<reins::Outcome, String>>,
    /// Cancels the run.
    pub(crate) cancel: CancellationToken,
    /// The questions sent to the client, by their key in the input-required result.
    waiting: BTreeMap<String, oneshot::Sender<ElicitResult>>,
    /// How many questions were sent (their keys are `q1`, `q2`, ...).
    asked: u64,
}

impl Run {
    pub(crate) fn new(
        progress: mpsc::UnboundedReceiver<String>,
        questions: mpsc::UnboundedReceiver<Vec<Question>>,
        done: tokio::task::JoinHandle<Result<reins::Outcome, String>>,
        cancel: CancellationToken,
    ) -> Run {
        Run { progress, progressed: 0, questions, done, cancel, waiting: BTreeMap::new(), asked: 0 }
    }

    /// Hands the client's answers to the questions waiting; one not answered (or not an elicitation's result)
    /// counts as cancelled.
    pub(crate) fn answer(&mut self, responses: &InputResponses) {
        for (key, tx) in std::mem::take(&mut self.waiting) {
            let result = responses
                .get(&key)
                .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok())
                .unwrap_or_else(|| ElicitResult::new(ElicitationAction::Cancel));
            // The run may have ended meanwhile (cancelled): nobody waits for the answer then.
            let _ = tx.send(result);
        }
    }
}

struct Parked {
    secret: String,
    agent: String,
    run: Run,
}

/// The runs parked between rounds, by the id of their request state.
pub(crate) struct Parking {
    table: Mutex<HashMap<String, Parked>>,
    /// How long a parked run waits for its retry before it is cancelled.
    pub(crate) bound: Duration,
}

/// What a refused request state is told.
fn refused() -> ErrorData {
    ErrorData::invalid_params(
        "the request state is unknown, already used, for another tool or expired: call the tool again",
        None,
    )
}

fn random_hex(bytes: usize) -> Result<String, String> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| format!("no randomness for a request state: {e}"))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// True when `a` is `b`, in a time that depends only on their lengths.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

impl Parking {
    pub(crate) fn new(bound: Duration) -> Parking {
        Parking { table: Mutex::new(HashMap::new()), bound }
    }

    /// Parks `run` of `agent` until the client answers `asked`: the input-required result to send. The run
    /// is cancelled if no retry comes within the bound (or when it is cancelled otherwise). `Err` (no
    /// randomness) leaves the run to the caller.
    pub(crate) fn park(
        self: &Arc<Self>,
        mut run: Run,
        asked: Vec<Question>,
        agent: &str,
    ) -> Result<InputRequiredResult, (Run, String)> {
        let (id, secret) = match random_hex(16).and_then(|id| Ok((id, random_hex(32)?))) {
            Ok(ids) => ids,
            Err(why) => return Err((run, why)),
        };
        let mut requests = InputRequests::new();
        for q in asked {
            run.asked += 1;
            let key = format!("q{}", run.asked);
            requests.insert(key.clone(), InputRequest::Elicitation(ElicitRequest::new(q.params)));
            run.waiting.insert(key, q.answer);
        }
        let cancel = run.cancel.clone();
        let state = format!("{id}.{secret}");
        if let Ok(mut table) = self.table.lock() {
            table.insert(id.clone(), Parked { secret, agent: agent.to_owned(), run });
        }
        let parking = Arc::clone(self);
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(parking.bound) => {}
                () = cancel.cancelled() => {}
            }
            let expired = parking.table.lock().ok().and_then(|mut t| t.remove(&id));
            if let Some(parked) = expired {
                parked.run.cancel.cancel();
            }
        });
        Ok(InputRequiredResult::new(Some(requests), Some(state)))
    }

    /// The run `state` names, for a retry of the tool `agent`: taken out (a state is good once).
    pub(crate) fn take(&self, state: &str, agent: &str) -> Result<Run, ErrorData> {
        let (id, secret) = state.split_once('.').ok_or_else(refused)?;
        let mut table = self.table.lock().map_err(|_| refused())?;
        match table.get(id) {
            Some(p) if same(p.secret.as_bytes(), secret.as_bytes()) && p.agent == agent => {}
            _ => return Err(refused()),
        }
        table.remove(id).map(|p| p.run).ok_or_else(refused)
    }

    /// Cancels every parked run (the server stops).
    pub(crate) fn cancel_all(&self) {
        if let Ok(mut table) = self.table.lock() {
            for (_, parked) in table.drain() {
                parked.run.cancel.cancel();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle_run() -> Run {
        let (_, progress) = mpsc::unbounded_channel();
        let (_, questions) = mpsc::unbounded_channel();
        let done = tokio::spawn(async { Err::<reins::Outcome, String>("idle".into()) });
        Run::new(progress, questions, done, CancellationToken::new())
    }

    fn question() -> (Question, oneshot::Receiver<ElicitResult>) {
        let (tx, rx) = oneshot::channel();
        let schema = serde_json::from_value(serde_json::json!({"type": "object", "properties": {}})).unwrap();
        let params =
            ElicitRequestParams::FormElicitationParams { meta: None, message: "ok?".into(), requested_schema: schema };
        (Question { params, answer: tx }, rx)
    }

    #[tokio::test]
    async fn a_state_is_good_once_for_its_tool_and_a_forged_one_is_refused() {
        let parking = Arc::new(Parking::new(Duration::from_secs(600)));
        let (q, _rx) = question();
        let result = parking.park(idle_run(), vec![q], "a").map_err(|(_, e)| e).unwrap();
        let state = result.request_state.unwrap();
        let requests = result.input_requests.unwrap();
        assert_eq!(requests.keys().collect::<Vec<_>>(), ["q1"]);
        let (id, secret) = state.split_once('.').unwrap();
        assert_eq!((id.len(), secret.len()), (32, 64));
        // Another tool, a forged secret, no separator: refused, and the run stays parked.
        assert!(parking.take(&state, "b").is_err());
        assert!(parking.take(&format!("{id}.{}", "0".repeat(64)), "a").is_err());
        assert!(parking.take(id, "a").is_err());
        assert!(parking.take(&state, "a").is_ok());
        // Used: refused.
        assert!(parking.take(&state, "a").is_err());
    }

    #[tokio::test]
    async fn an_unanswered_question_counts_as_cancelled() {
        let parking = Arc::new(Parking::new(Duration::from_secs(600)));
        let (q, rx) = question();
        let state = parking.park(idle_run(), vec![q], "a").map_err(|(_, e)| e).unwrap().request_state.unwrap();
        let mut run = parking.take(&state, "a").unwrap();
        run.answer(&InputResponses::new());
        assert_eq!(rx.await.unwrap().action, ElicitationAction::Cancel);
    }

    #[tokio::test]
    async fn a_run_parked_past_its_bound_is_cancelled_and_its_state_refused() {
        let parking = Arc::new(Parking::new(Duration::from_millis(20)));
        let run = idle_run();
        let cancel = run.cancel.clone();
        let (q, _rx) = question();
        let state = parking.park(run, vec![q], "a").map_err(|(_, e)| e).unwrap().request_state.unwrap();
        cancel.cancelled().await;
        assert!(parking.take(&state, "a").is_err());
    }
}
