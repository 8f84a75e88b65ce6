//! Durable Reins runs on [Restate](https://restate.dev): runs that outlive the machine they started on.
//!
//! - [`worker`]: a Restate service endpoint (`reins worker`). A session is a virtual object keyed by the
//!   session id (one turn at a time; turns queue); a turn is a handler that drives the run's
//!   [`reins::RunState`] with the one driver of the core, each model call and each tool call performed as a
//!   journaled step ([`journal::Journaled`]). The journal holds responses and results only, never the re-sent
//!   conversation. The outcome at the end of a turn is the object's state: the next turn, on any worker,
//!   continues it.
//!   A turn whose policy asks for decisions waits on a Restate awakeable ([`Awaiting`] in the session's
//!   state says which calls and which awakeable): the invocation suspends, holding no worker, until `reins
//!   approve` resolves it.
//! - [`client`]: what `reins submit/status/result/cancel/approve` say to Restate's ingress and admin APIs.
//!
//! The wire types below are the contract between the two.

pub mod client;
pub mod journal;
pub mod worker;

use serde::{Deserialize, Serialize};

/// The name of the virtual object that holds sessions.
pub const SERVICE: &str = "ReinsSession";
/// Its exclusive handler that runs one turn.
pub const TURN: &str = "turn";
/// Its shared handler that reads the last outcome of a session without waiting for a turn.
pub const LAST: &str = "last";

/// The state key of the session's approval wait: an [`Awaiting`] while a turn waits for decisions.
pub const STATE_APPROVAL: &str = "approval";

/// What a turn that waits for decisions records in its session's state ([`STATE_APPROVAL`]), for `reins
/// status` and `reins approve` to find: the calls and the awakeable that the decisions resolve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Awaiting {
    /// The awakeable to resolve (through the ingress) with the decisions: a JSON array of
    /// [`reins::ApprovalDecision`].
    pub awakeable: String,
    /// The calls that wait, with the run (and the session).
    pub request: reins::ApprovalRequest,
    /// Why the previous answer was not taken (its decisions did not apply), if it was not: the turn asks
    /// again with a new awakeable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// True for an awakeable id that may go into a URL path (Restate's are `sign_1` and base64url).
pub fn is_valid_awakeable(id: &str) -> bool {
    !id.is_empty() && id.len() <= 256 && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// The input of a turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnRequest {
    /// The id of the run this turn is (also the idempotency key of its invocation).
    pub run_id: String,
    /// The user's prompt (a follow-up on later turns).
    pub prompt: String,
    /// The agent definition (reins-agent's `AgentDef` in its JSON form). Required on a session's first
    /// turn; a later turn without one continues with the session's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<serde_json::Value>,
}

/// True for an id that may name a session or a run: 1 to 128 of `A-Za-z0-9._-`, so that it is safe in a URL
/// path and a query.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A new random id (a UUID v4).
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids() {
        assert!(is_valid_id(&new_id()));
        for bad in ["", "a/b", "a b", "x'y", "é"] {
            assert!(!is_valid_id(bad), "{bad:?}");
        }
        assert!(!is_valid_id(&"a".repeat(129)));
    }

    #[test]
    fn awakeable_ids_and_the_wait_record() {
        assert!(is_valid_awakeable("sign_1ZXhhbXBsZS1pZA-_x"));
        for bad in ["", "a/b", "a.b", "a?b", "a b", "%41"] {
            assert!(!is_valid_awakeable(bad), "{bad:?}");
        }
        let a: Awaiting = serde_json::from_value(serde_json::json!({
            "awakeable": "sign_1x", "request": {"run_id": "r", "calls": []}
        }))
        .unwrap();
        assert_eq!(a.problem, None);
        let v = serde_json::to_value(&a).unwrap();
        assert!(v.get("problem").is_none(), "{v}");
    }

    proptest! {
        #[test]
        fn a_valid_id_is_url_and_sql_safe(s in ".{0,40}") {
            if is_valid_id(&s) {
                prop_assert!(!s.contains(['/', '\'', '"', '?', '#', '%', ' ', '\\']));
            }
        }

        #[test]
        fn a_valid_awakeable_is_one_url_path_segment(s in ".{0,40}") {
            if is_valid_awakeable(&s) {
                prop_assert!(!s.contains(['/', '.', '?', '#', '%', ' ', '\\']));
                prop_assert!(!s.is_empty());
            }
        }
    }
}
