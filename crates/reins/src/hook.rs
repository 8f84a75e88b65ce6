//! Hooks: code the driver runs around tool calls and final answers — before a call (`pre_tool`: allow,
//! deny, ask for an approval, or rewrite the arguments), after it (`post_tool`: keep, replace or redact the
//! result before it is bounded and recorded) and at a final answer (`stop`: accept it, or refuse it with
//! feedback the model gets as a user message). Hooks run in the driver, never in the state machine; their
//! decisions are recorded as `hook` events. A hook that fails fails closed: the call is denied, the result
//! withheld, the answer not accepted.
//!
//! [`parse_answer`] reads the JSON answer of a command hook (the wire form, see the book: docs/src/approvals.md).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::message::ToolCall;

/// When a hook runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    /// Before a validated, allowed call runs.
    PreTool,
    /// After a call ran, before its result is bounded and recorded.
    PostTool,
    /// At a final answer, before the run completes.
    Stop,
}

impl HookEvent {
    /// `pre_tool`, `post_tool` or `stop`.
    pub fn as_str(&self) -> &'static str {
        match self {
            HookEvent::PreTool => "pre_tool",
            HookEvent::PostTool => "post_tool",
            HookEvent::Stop => "stop",
        }
    }
}

impl std::str::FromStr for HookEvent {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pre_tool" => Ok(HookEvent::PreTool),
            "post_tool" => Ok(HookEvent::PostTool),
            "stop" => Ok(HookEvent::Stop),
            _ => Err(format!("unknown hook event {s:?}: expected pre_tool, post_tool or stop")),
        }
    }
}

/// What a hook is told about the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HookContext {
    /// The run.
    pub run_id: String,
    /// The session it is recorded in, if any.
    pub session_id: Option<String>,
}

/// A tool result as a `post_tool` hook sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookResult {
    /// The result text (not yet bounded).
    pub content: String,
    /// True for an error result.
    pub is_error: bool,
}

/// A `pre_tool` answer.
#[derive(Clone, Debug, PartialEq)]
pub enum PreTool {
    /// The call goes on (to the policy's and other hooks' say).
    Allow,
    /// The call does not run; the model gets this reason as an error result.
    Deny(String),
    /// The call needs an approval (see [`crate::approval`]).
    Ask(String),
    /// The call runs with these arguments instead (validated against the schema again).
    Rewrite(Value),
}

/// A `post_tool` answer.
#[derive(Clone, Debug, PartialEq)]
pub enum PostTool {
    /// The result stays as it is.
    Keep,
    /// The result is replaced by this one.
    Replace(HookResult),
    /// Each of these strings is replaced by `[REDACTED]` in the result.
    Redact(Vec<String>),
}

/// A `stop` answer.
#[derive(Clone, Debug, PartialEq)]
pub enum StopAnswer {
    /// The final answer stands.
    Accept,
    /// The answer is refused: the model gets this feedback as a user message and goes on (a step more).
    Refuse(String),
}

/// Why a hook gave no usable answer: it failed, timed out, or answered garbage. The driver fails closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookError(pub String);

/// A hook. Implement the events it serves (the others answer allow / keep / accept) and say which ones
/// with [`Hook::applies`].
#[async_trait]
pub trait Hook: Send + Sync {
    /// A name for events and errors (a command hook's program).
    fn name(&self) -> &str;
    /// True when the hook runs for `event` (and, for tool events, the tool `tool`).
    fn applies(&self, event: HookEvent, tool: Option<&str>) -> bool;
    /// Before `call` runs.
    async fn pre_tool(
        &self,
        _ctx: &HookContext,
        _call: &ToolCall,
        _cancel: &CancellationToken,
    ) -> Result<PreTool, HookError> {
        Ok(PreTool::Allow)
    }
    /// After `call` ran with `result`.
    async fn post_tool(
        &self,
        _ctx: &HookContext,
        _call: &ToolCall,
        _result: &HookResult,
        _cancel: &CancellationToken,
    ) -> Result<PostTool, HookError> {
        Ok(PostTool::Keep)
    }
    /// At the final answer `answer`.
    async fn stop(
        &self,
        _ctx: &HookContext,
        _answer: &str,
        _cancel: &CancellationToken,
    ) -> Result<StopAnswer, HookError> {
        Ok(StopAnswer::Accept)
    }
}

/// Does a tool name match a hook's `match` pattern? `*` stands for any run of characters, `?` for one;
/// everything else matches itself (so a plain name matches exactly). No pattern matches every tool.
pub fn tool_matches(pattern: Option<&str>, tool: &str) -> bool {
    let Some(p) = pattern else { return true };
    let p: Vec<char> = p.chars().collect();
    let t: Vec<char> = tool.chars().collect();
    // Iterative wildcard match with one backtrack point: linear in practice, never exponential.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

/// The longest answer a command hook may print (bytes): more is an error.
pub const MAX_HOOK_ANSWER: usize = 1 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    is_error: Option<bool>,
    #[serde(default)]
    strings: Option<Vec<String>>,
    #[serde(default)]
    feedback: Option<String>,
}

/// What a hook answered, for the event it answered.
#[derive(Clone, Debug, PartialEq)]
pub enum HookAnswer {
    /// A `pre_tool` answer.
    PreTool(PreTool),
    /// A `post_tool` answer.
    PostTool(PostTool),
    /// A `stop` answer.
    Stop(StopAnswer),
}

/// Parses a command hook's answer to `event`: one JSON object (surrounding whitespace allowed) —
/// `pre_tool`: `{"decision": "allow"}`, `{"decision": "deny", "reason"}`, `{"decision": "ask", "reason"}`,
/// `{"decision": "rewrite", "arguments": {...}}`; `post_tool`: `{"decision": "keep"}`, `{"decision":
/// "replace", "content", "is_error"?}`, `{"decision": "redact", "strings": [...]}`; `stop`: `{"decision":
/// "accept"}`, `{"decision": "refuse", "feedback"}`. Anything else — another key, a missing or empty reason,
/// a decision of another event, text that is not UTF-8 or JSON — is an error.
pub fn parse_answer(event: HookEvent, bytes: &[u8]) -> Result<HookAnswer, HookError> {
    let bad = |m: String| HookError(format!("invalid {} answer: {m}", event.as_str()));
    if bytes.len() > MAX_HOOK_ANSWER {
        return Err(bad(format!("longer than {MAX_HOOK_ANSWER} bytes")));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8".into()))?;
    if text.trim().is_empty() {
        return Err(bad("it printed nothing (expected a JSON object with a \"decision\")".into()));
    }
    let a: Answer = serde_json::from_str(text.trim()).map_err(|e| bad(e.to_string()))?;
    let text_of = |v: Option<String>, key: &str| match v {
        Some(s) if !s.trim().is_empty() => Ok(s),
        _ => Err(bad(format!("\"{}\" needs a non-empty \"{key}\"", a.decision))),
    };
    let allowed: &[&str] = match (event, a.decision.as_str()) {
        (HookEvent::PreTool, "allow") | (HookEvent::PostTool, "keep") | (HookEvent::Stop, "accept") => &[],
        (HookEvent::PreTool, "deny" | "ask") => &["reason"],
        (HookEvent::PreTool, "rewrite") => &["arguments"],
        (HookEvent::PostTool, "replace") => &["content", "is_error"],
        (HookEvent::PostTool, "redact") => &["strings"],
        (HookEvent::Stop, "refuse") => &["feedback"],
        (_, d) => {
            let expected = match event {
                HookEvent::PreTool => "allow, deny, ask or rewrite",
                HookEvent::PostTool => "keep, replace or redact",
                HookEvent::Stop => "accept or refuse",
            };
            return Err(bad(format!("unknown decision {d:?} (expected {expected})")));
        }
    };
    let given = [
        ("reason", a.reason.is_some()),
        ("arguments", a.arguments.is_some()),
        ("content", a.content.is_some()),
        ("is_error", a.is_error.is_some()),
        ("strings", a.strings.is_some()),
        ("feedback", a.feedback.is_some()),
    ];
    if let Some((key, _)) = given.iter().find(|(k, set)| *set && !allowed.contains(k)) {
        return Err(bad(format!("\"{key}\" does not go with \"{}\"", a.decision)));
    }
    Ok(match (event, a.decision.as_str()) {
        (HookEvent::PreTool, "deny") => HookAnswer::PreTool(PreTool::Deny(text_of(a.reason, "reason")?)),
        (HookEvent::PreTool, "ask") => HookAnswer::PreTool(PreTool::Ask(text_of(a.reason, "reason")?)),
        (HookEvent::PreTool, "rewrite") => match a.arguments {
            Some(v @ Value::Object(_)) => HookAnswer::PreTool(PreTool::Rewrite(v)),
            _ => return Err(bad("\"rewrite\" needs \"arguments\", a JSON object".into())),
        },
        (HookEvent::PreTool, _) => HookAnswer::PreTool(PreTool::Allow),
        (HookEvent::PostTool, "replace") => match a.content {
            Some(content) => {
                HookAnswer::PostTool(PostTool::Replace(HookResult { content, is_error: a.is_error.unwrap_or(false) }))
            }
            None => return Err(bad("\"replace\" needs \"content\", a string".into())),
        },
        (HookEvent::PostTool, "redact") => match a.strings {
            Some(s) if !s.is_empty() && s.iter().all(|x| !x.is_empty()) => HookAnswer::PostTool(PostTool::Redact(s)),
            _ => return Err(bad("\"redact\" needs \"strings\", a list of non-empty strings".into())),
        },
        (HookEvent::PostTool, _) => HookAnswer::PostTool(PostTool::Keep),
        (HookEvent::Stop, "refuse") => HookAnswer::Stop(StopAnswer::Refuse(text_of(a.feedback, "feedback")?)),
        (HookEvent::Stop, _) => HookAnswer::Stop(StopAnswer::Accept),
    })
}

/// What [`PostTool::Redact`] puts in place of each string.
pub const REDACTED: &str = "[REDACTED]";

/// Applies a `post_tool` answer to a result.
pub fn apply_post(result: HookResult, answer: PostTool) -> HookResult {
    match answer {
        PostTool::Keep => result,
        PostTool::Replace(r) => r,
        PostTool::Redact(strings) => {
            let mut content = result.content;
            for s in strings.iter().filter(|s| !s.is_empty()) {
                content = content.replace(s.as_str(), REDACTED);
            }
            HookResult { content, is_error: result.is_error }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn answers_parse_per_event() {
        let p = |e, s: &str| parse_answer(e, s.as_bytes());
        assert_eq!(p(HookEvent::PreTool, r#" {"decision":"allow"} "#).unwrap(), HookAnswer::PreTool(PreTool::Allow));
        assert_eq!(
            p(HookEvent::PreTool, r#"{"decision":"deny","reason":"no"}"#).unwrap(),
            HookAnswer::PreTool(PreTool::Deny("no".into()))
        );
        assert_eq!(
            p(HookEvent::PreTool, r#"{"decision":"rewrite","arguments":{"a":1}}"#).unwrap(),
            HookAnswer::PreTool(PreTool::Rewrite(json!({"a": 1})))
        );
        assert_eq!(
            p(HookEvent::PostTool, r#"{"decision":"redact","strings":["s3cr3t"]}"#).unwrap(),
            HookAnswer::PostTool(PostTool::Redact(vec!["s3cr3t".into()]))
        );
        assert_eq!(
            p(HookEvent::Stop, r#"{"decision":"refuse","feedback":"run the tests"}"#).unwrap(),
            HookAnswer::Stop(StopAnswer::Refuse("run the tests".into()))
        );
        for (e, bad) in [
            (HookEvent::PreTool, ""),
            (HookEvent::PreTool, "yes"),
            (HookEvent::PreTool, r#"{"decision":"keep"}"#),
            (HookEvent::PreTool, r#"{"decision":"deny"}"#),
            (HookEvent::PreTool, r#"{"decision":"deny","reason":"  "}"#),
            (HookEvent::PreTool, r#"{"decision":"allow","reason":"x"}"#),
            (HookEvent::PreTool, r#"{"decision":"rewrite","arguments":[1]}"#),
            (HookEvent::PreTool, r#"{"decision":"allow","extra":1}"#),
            (HookEvent::PreTool, r#"{"decision":"allow"} {"decision":"allow"}"#),
            (HookEvent::PostTool, r#"{"decision":"replace"}"#),
            (HookEvent::PostTool, r#"{"decision":"redact","strings":[""]}"#),
            (HookEvent::Stop, r#"{"decision":"refuse"}"#),
            (HookEvent::Stop, r#"{"decision":"allow"}"#),
        ] {
            let err = p(e, bad).unwrap_err();
            assert!(err.0.starts_with(&format!("invalid {} answer: ", e.as_str())), "{bad}: {err}");
        }
        assert!(parse_answer(HookEvent::PreTool, b"\xff\xfe").is_err());
    }

    #[test]
    fn patterns_match_globs_and_exact_names() {
        assert!(tool_matches(None, "anything"));
        assert!(tool_matches(Some("write_file"), "write_file"));
        assert!(!tool_matches(Some("write_file"), "write_files"));
        assert!(tool_matches(Some("*_file"), "edit_file"));
        assert!(tool_matches(Some("fs__*"), "fs__read"));
        assert!(!tool_matches(Some("fs__*"), "gh__read"));
        assert!(tool_matches(Some("e?it_*"), "edit_file"));
        assert!(tool_matches(Some("*"), ""));
        assert!(!tool_matches(Some("?"), ""));
    }

    #[test]
    fn redact_replaces_every_occurrence() {
        let r = apply_post(
            HookResult { content: "key=abc; again abc".into(), is_error: false },
            PostTool::Redact(vec!["abc".into()]),
        );
        assert_eq!(r.content, "key=[REDACTED]; again [REDACTED]");
    }

    fn naive(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('*', rest)) => (0..=t.len()).any(|i| naive(rest, &t[i..])),
            Some((c, rest)) => t.split_first().is_some_and(|(d, tr)| (*c == '?' || c == d) && naive(rest, tr)),
        }
    }

    proptest! {
        #[test]
        fn the_parser_never_panics_and_errors_name_the_event(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            for e in [HookEvent::PreTool, HookEvent::PostTool, HookEvent::Stop] {
                if let Err(err) = parse_answer(e, &bytes) {
                    prop_assert!(err.0.starts_with("invalid "));
                }
            }
        }

        #[test]
        fn answers_round_trip(reason in "[a-z ]{0,12}[a-z]", key in "[a-z]{1,8}", n in any::<i64>()) {
            let deny = json!({"decision": "deny", "reason": reason}).to_string();
            prop_assert_eq!(parse_answer(HookEvent::PreTool, deny.as_bytes()).unwrap(), HookAnswer::PreTool(PreTool::Deny(reason.clone())));
            let args = json!({ key.clone(): n });
            let rw = json!({"decision": "rewrite", "arguments": args}).to_string();
            prop_assert_eq!(parse_answer(HookEvent::PreTool, rw.as_bytes()).unwrap(), HookAnswer::PreTool(PreTool::Rewrite(args)));
            let refuse = json!({"decision": "refuse", "feedback": reason}).to_string();
            prop_assert_eq!(parse_answer(HookEvent::Stop, refuse.as_bytes()).unwrap(), HookAnswer::Stop(StopAnswer::Refuse(reason)));
            // A decision of another event is refused.
            prop_assert!(parse_answer(HookEvent::PostTool, deny.as_bytes()).is_err());
        }

        #[test]
        fn glob_agrees_with_the_naive_matcher(p in "[ab*?]{0,6}", t in "[ab]{0,8}") {
            let pc: Vec<char> = p.chars().collect();
            let tc: Vec<char> = t.chars().collect();
            prop_assert_eq!(tool_matches(Some(&p), &t), naive(&pc, &tc));
        }
    }
}
