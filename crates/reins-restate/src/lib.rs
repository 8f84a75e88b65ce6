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
//! Trust: a worker's power comes from its operator. It runs only the agents it was given when it started
//! ([`worker::WorkerOptions::agents`]); a turn names one and may override only what cannot start a program
//! or widen a workspace ([`Overrides`]). What arrives on its port — a turn's input, a session's state, a
//! journal — is data: it selects among the operator's agents and feeds the transcript, never defines a
//! program to run.
//!
//! The wire types below are the contract between the two.

#![warn(missing_docs)]
// No function over 100 lines (the workspace's clippy.toml; test code may have longer ones).
#![warn(clippy::too_many_lines)]
#![cfg_attr(test, allow(clippy::too_many_lines))]

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
///
/// A worker's power comes from its operator, never from its caller: a turn names one of the agents the
/// worker was given (`reins worker --agent NAME=FILE`, `--agents DIR`) and may override only what cannot start
/// a program or widen a workspace ([`Overrides`]). A definition sent with a turn is refused.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnRequest {
    /// The id of the run this turn is (also the idempotency key of its invocation).
    pub run_id: String,
    /// The user's prompt (a follow-up on later turns).
    pub prompt: String,
    /// The name of one of the worker's agents. A turn that names none continues with the session's agent,
    /// else the worker's default.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "agent_name")]
    pub agent: Option<String>,
    /// What this turn changes of the named agent (only what cannot start a program or widen a workspace).
    #[serde(default, skip_serializing_if = "Overrides::is_empty")]
    pub overrides: Overrides,
}

impl TurnRequest {
    /// Reads a turn's input, naming the key of what does not parse (`overrides.limits.max_steps: ...`).
    pub fn from_json(value: serde_json::Value) -> Result<TurnRequest, String> {
        with_path(value)
    }
}

/// Deserializes `value`, naming the key of what does not parse.
fn with_path<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." { e.inner().to_string() } else { format!("{path}: {}", e.inner()) }
    })
}

/// Reads a turn's `agent`: a name, never a definition (an older client sent the whole definition).
fn agent_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Option::<serde_json::Value>::deserialize(d)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(serde::de::Error::custom(
            "a turn names one of its worker's agents, it does not send one (not a definition: the worker runs \
             only the agents its operator gave it, `reins worker --agent NAME=FILE`)",
        )),
    }
}

/// What a turn may change of its worker's agent: nothing that can start a program (MCP servers, presets,
/// hooks, sub-agents, commands), widen a workspace, move the model calls (model, provider) or loosen a policy
/// (approvals). Any other key is refused. Limits only tighten: each is the stricter of the operator's and
/// the turn's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overrides {
    /// The instructions (system prompt), instead of the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Limits, each applied only where it is stricter than the agent's.
    #[serde(default, skip_serializing_if = "is_default_limits")]
    pub limits: reins_agent::LimitsDef,
}

fn is_default_limits(l: &reins_agent::LimitsDef) -> bool {
    *l == reins_agent::LimitsDef::default()
}

/// `given` where it is stricter than `operator` (or the operator set none).
fn tighten<T: PartialOrd + Copy>(operator: &mut Option<T>, given: Option<T>) {
    if let Some(g) = given {
        if operator.is_none_or(|o| g < o) {
            *operator = Some(g);
        }
    }
}

impl Overrides {
    /// Reads overrides, naming the key of what does not parse (`limits.max_steps: ...`).
    pub fn from_json(value: serde_json::Value) -> Result<Overrides, String> {
        with_path(value)
    }

    /// True when it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Overrides::default()
    }

    /// The operator's definition with these overrides applied.
    pub fn apply(&self, def: &reins_agent::AgentDef) -> reins_agent::AgentDef {
        let mut def = def.clone();
        if let Some(i) = &self.instructions {
            def.instructions = Some(i.clone());
            def.instructions_file = None;
        }
        let (l, g) = (&mut def.limits, &self.limits);
        tighten(&mut l.max_steps, g.max_steps);
        tighten(&mut l.max_tool_calls, g.max_tool_calls);
        tighten(&mut l.max_input_tokens, g.max_input_tokens);
        tighten(&mut l.max_output_tokens, g.max_output_tokens);
        tighten(&mut l.max_total_tokens, g.max_total_tokens);
        tighten(&mut l.max_cost_usd, g.max_cost_usd);
        tighten(&mut l.timeout, g.timeout);
        tighten(&mut l.tool_timeout, g.tool_timeout);
        def
    }
}

/// What a session's state records of its agent ([`worker::STATE_AGENT`]): the name of one of the worker's
/// agents and the overrides of the turn that chose it. Never a definition: every turn builds the agent from
/// its worker's own definitions, so a state written by anyone else cannot start a program either.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionAgent {
    /// The agent's name.
    pub name: String,
    /// The overrides.
    #[serde(default, skip_serializing_if = "Overrides::is_empty")]
    pub overrides: Overrides,
}

/// True for a name that may name a worker's agent: 1 to 64 of `A-Za-z0-9_-` (no dot, so that a file name is
/// never mistaken for one).
pub fn is_valid_agent_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
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

    #[test]
    fn a_turn_names_an_agent_and_overrides_only_instructions_and_tighter_limits() {
        assert!(is_valid_agent_name("coder") && is_valid_agent_name("a_b-1"));
        for bad in ["", "agent.toml", "a/b", "a b", "é", &"a".repeat(65)] {
            assert!(!is_valid_agent_name(bad), "{bad:?}");
        }
        // A definition where a name belongs is refused, saying why.
        let e = serde_json::from_value::<TurnRequest>(serde_json::json!({
            "run_id": "r", "prompt": "p", "agent": {"model": "openai-chat:x", "mcp": {"x": {"command": "sh"}}}
        }))
        .unwrap_err();
        assert!(e.to_string().contains("not a definition"), "{e}");
        let e = TurnRequest::from_json(serde_json::json!({
            "run_id": "r", "prompt": "p", "overrides": {"limits": {"max_steps": 0}}
        }))
        .unwrap_err();
        assert!(e.starts_with("overrides.limits.max_steps: "), "{e}");
        // Anything that could start a program, move the model calls or widen the workspace is not a key.
        for key in ["mcp", "presets", "hooks", "agents", "commands", "workspace", "model", "provider", "approve"] {
            let e = serde_json::from_value::<TurnRequest>(serde_json::json!({
                "run_id": "r", "prompt": "p", "overrides": {key: {}}
            }))
            .unwrap_err();
            assert!(e.to_string().contains(&format!("unknown field `{key}`")), "{key}: {e}");
        }
        // Limits only tighten; instructions replace the agent's (and its instructions file).
        let def = reins_agent::AgentDef::from_json(&serde_json::json!({
            "model": "openai-chat:x", "instructions_file": "/x.md", "limits": {"max_steps": 10, "timeout": "1m"}
        }))
        .unwrap();
        let o: Overrides = serde_json::from_value(serde_json::json!({
            "instructions": "be brief", "limits": {"max_steps": 50, "timeout": "10s", "max_tool_calls": 3}
        }))
        .unwrap();
        let applied = o.apply(&def);
        assert_eq!(applied.limits.max_steps, def.limits.max_steps);
        assert_eq!(applied.limits.timeout.map(|d| d.0), Some(std::time::Duration::from_secs(10)));
        assert_eq!(applied.limits.max_tool_calls.map(|c| c.0), Some(3));
        assert_eq!((applied.instructions.as_deref(), applied.instructions_file), (Some("be brief"), None));
        assert_eq!(Overrides::default().apply(&def), def);
        // The wire form leaves empty overrides out; a session's record is a name, never a definition.
        let req = TurnRequest { run_id: "r".into(), prompt: "p".into(), ..Default::default() };
        assert_eq!(serde_json::to_value(&req).unwrap(), serde_json::json!({"run_id": "r", "prompt": "p"}));
        assert!(serde_json::from_value::<SessionAgent>(def.to_json()).is_err());
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
