//! How a step is performed: the one thing that varies between drivers of the same loop.
//!
//! The driver ([`crate::Agent::drive_with`]) keeps everything that must behave the same wherever a run
//! runs — the deadline, cancellation, batching, events, limits and the state machine — and hands each
//! model call and each tool call to a [`Performer`] as a ready future (`work`). The [`Direct`] performer
//! (the default) awaits it in process; a durable performer (the `reins-restate` crate) runs it as a
//! journaled step, so that after a crash a completed step is read back from the journal instead of being
//! performed again.

use futures_util::future::BoxFuture;

use crate::approval::Approver;
use crate::engine::state::CallResult;
use crate::message::ToolCall;
use crate::model::{ModelError, ModelResponse};

/// Which model call of a run a step is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelStep {
    /// The 1-based number of the step: the model response it asks for (for a summary call, the steps
    /// so far).
    pub step: u64,
    /// True for a summary call of the `summarize` context strategy (not a step of its own).
    pub summary: bool,
}

/// One tool call as the driver hands it to a performer.
#[derive(Clone, Copy, Debug)]
pub struct ToolStep<'a> {
    /// The step (model response) whose batch holds the call.
    pub step: u64,
    /// The call as the model proposed it.
    pub call: &'a ToolCall,
    /// The run's key prefix (see [`idempotency_prefix`]).
    pub key_prefix: &'a str,
}

impl ToolStep<'_> {
    /// The call's idempotency key: the same every time this call is performed again (see
    /// [`crate::ToolContext::idempotency_key`]).
    pub fn idempotency_key(&self) -> String {
        key_with_prefix(self.key_prefix, self.step, &self.call.id)
    }
}

/// Performs the steps of a run. `work` is the step done in process (the model call with its panic
/// caught, or the tool call with its timeout and panic caught); a performer decides how it is done —
/// at once, or as a journaled step whose recorded result stands in for it when the run is replayed.
///
/// A performer never sees the conversation: only the response or the result of each step, which is
/// all a durable journal needs (the conversation is a pure function of them). The in-process path
/// ([`crate::Agent::drive`]) uses no performer at all: its steps are awaited where they are made, with
/// no allocation per step.
pub trait Performer: Send + Sync {
    /// Performs one model call.
    fn model_call<'a>(
        &'a self,
        step: ModelStep,
        work: BoxFuture<'a, Result<ModelResponse, ModelError>>,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>>;

    /// Performs one tool call that passed validation and policy.
    fn tool_call<'a>(&'a self, call: ToolStep<'a>, work: BoxFuture<'a, CallResult>) -> BoxFuture<'a, CallResult>;

    /// The session the run belongs to, when the performer knows it and the run has no session log
    /// (it becomes part of each tool call's idempotency key).
    fn session_id(&self) -> Option<&str> {
        None
    }

    /// How the run waits for decisions about calls a policy or hook asked about, when the performer is
    /// what decides that (a durable run waits on a Restate awakeable, without holding a worker). `None`
    /// (the default): the agent's approver is asked, if it has one.
    fn approver(&self) -> Option<&dyn Approver> {
        None
    }
}

/// The in-process performer: each step is awaited as it is (what [`crate::Agent::drive`] does without
/// one).
#[derive(Clone, Copy, Debug, Default)]
pub struct Direct;

impl Performer for Direct {
    fn model_call<'a>(
        &'a self,
        _step: ModelStep,
        work: BoxFuture<'a, Result<ModelResponse, ModelError>>,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        work
    }

    fn tool_call<'a>(&'a self, _call: ToolStep<'a>, work: BoxFuture<'a, CallResult>) -> BoxFuture<'a, CallResult> {
        work
    }
}

/// The idempotency key of a tool call: `[session/]run/step/call`, each part kept to the characters
/// `A-Za-z0-9._-` (any other byte is written `%XX`), so the key is safe in an environment variable, a
/// header or a file name, and two different calls never share one.
pub fn idempotency_key(session_id: Option<&str>, run_id: &str, step: u64, call_id: &str) -> String {
    key_with_prefix(&idempotency_prefix(session_id, run_id), step, call_id)
}

/// The part of a run's idempotency keys that is the same for all its calls: `[session/]run/`, escaped.
pub fn idempotency_prefix(session_id: Option<&str>, run_id: &str) -> String {
    let mut key = String::with_capacity(session_id.map_or(0, |s| s.len() + 1) + run_id.len() + 1);
    if let Some(s) = session_id {
        escape_into(&mut key, s);
        key.push('/');
    }
    escape_into(&mut key, run_id);
    key.push('/');
    key
}

/// `prefix` + `step/` + the escaped `call_id`.
pub(crate) fn key_with_prefix(prefix: &str, step: u64, call_id: &str) -> String {
    use std::fmt::Write;
    let mut key = String::with_capacity(prefix.len() + call_id.len() + 8);
    key.push_str(prefix);
    let _ = write!(key, "{step}/");
    escape_into(&mut key, call_id);
    key
}

fn escape_into(out: &mut String, part: &str) {
    for b in part.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.push('%');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_key_names_session_run_step_and_call() {
        assert_eq!(idempotency_key(Some("s1"), "r-2", 3, "call_4"), "s1/r-2/3/call_4");
        assert_eq!(idempotency_key(None, "r", 1, "a/b c"), "r/1/a%2Fb%20c");
    }

    proptest! {
        #[test]
        fn keys_are_safe_and_distinct(a in ".{0,12}", b in ".{0,12}", s1 in 0u64..5, s2 in 0u64..5) {
            let k1 = idempotency_key(Some("s"), "r", s1, &a);
            let k2 = idempotency_key(Some("s"), "r", s2, &b);
            prop_assert!(k1.bytes().all(|c| c.is_ascii_alphanumeric() || b"._-/%".contains(&c)));
            prop_assert_eq!(k1 == k2, a == b && s1 == s2);
        }
    }
}
