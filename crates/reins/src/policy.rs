//! The pre-execution hook: a caller's say over each validated call before it runs.

use std::sync::Arc;

use crate::message::ToolCall;

/// What the policy decides for one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The call runs.
    Allow,
    /// The call does not run; the model gets an error result with this reason.
    Deny(String),
    /// No call of the batch runs and the run ends `aborted` with this reason.
    Stop(String),
    /// The call needs a person's decision (see [`crate::approval`]): the whole batch waits before any of
    /// it runs. The driver asks its [`crate::Approver`]; without one the run ends `awaiting_approval`.
    Ask(String),
}

/// The name the approval design uses for a policy's answer: the same type as [`Decision`].
pub type PolicyDecision = Decision;

/// Decides over validated calls before they run. Closures `Fn(&ToolCall) -> Decision` are policies.
///
/// ```
/// use reins::{Decision, ToolCall};
/// let policy = |call: &ToolCall| if call.name == "rm" { Decision::Deny("no".into()) } else { Decision::Allow };
/// assert_eq!(reins::Policy::check(&policy, &ToolCall::new("1", "rm", serde_json::json!({}))), Decision::Deny("no".into()));
/// ```
pub trait Policy: Send + Sync {
    /// The decision for one call.
    fn check(&self, call: &ToolCall) -> Decision;
}

impl<F: Fn(&ToolCall) -> Decision + Send + Sync> Policy for F {
    fn check(&self, call: &ToolCall) -> Decision {
        self(call)
    }
}

/// Several policies as one: each call gets the strictest of their decisions (`Stop` over `Deny` over `Ask`
/// over `Allow`; the first of equals). A sub-agent's run is under its own policy and every ancestor's.
pub(crate) struct Strictest(pub(crate) Vec<Arc<dyn Policy>>);

impl Strictest {
    fn rank(d: &Decision) -> u8 {
        match d {
            Decision::Allow => 0,
            Decision::Ask(_) => 1,
            Decision::Deny(_) => 2,
            Decision::Stop(_) => 3,
        }
    }
}

impl Policy for Strictest {
    fn check(&self, call: &ToolCall) -> Decision {
        let mut out = Decision::Allow;
        for p in &self.0 {
            let d = p.check(call);
            if Self::rank(&d) > Self::rank(&out) {
                out = d;
            }
        }
        out
    }
}
