//! The terminal approver, which asks inline (yes / no with a reason / always for this tool / edit), and the
//! approver that applies decisions given beforehand and asks the terminal about the rest.

use std::collections::HashSet;
use std::io::{BufRead as _, IsTerminal as _};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use reins::{ApprovalDecision, ApprovalError, ApprovalRequest, Approver};
use tokio_util::sync::CancellationToken;

/// Gives `first` to the first batch that asks, then asks `then` (the terminal), if any.
pub struct FirstThen {
    first: Mutex<Option<Vec<ApprovalDecision>>>,
    then: Option<Arc<dyn Approver>>,
}

impl FirstThen {
    /// `first`, then `then`.
    pub fn new(first: Vec<ApprovalDecision>, then: Option<Arc<dyn Approver>>) -> Self {
        Self { first: Mutex::new(Some(first)), then }
    }
}

#[async_trait]
impl Approver for FirstThen {
    async fn decide(
        &self,
        request: &ApprovalRequest,
        cancel: &CancellationToken,
    ) -> Result<Vec<ApprovalDecision>, ApprovalError> {
        let first = self.first.lock().ok().and_then(|mut f| f.take());
        match (first, &self.then) {
            (Some(d), _) => Ok(d),
            (None, Some(then)) => then.decide(request, cancel).await,
            (None, None) => Ok(Vec::new()),
        }
    }
}

/// True when the CLI can ask a person: standard input and standard error are terminals.
pub fn on_terminal() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Asks on the terminal, call by call: `y` approve, `n [REASON]` deny (the reason is asked for when not
/// given), `a` approve this call and every later call of the same tool in this run (in `reins chat`: this
/// chat), `e` edit the arguments (a JSON object). End of input leaves the call undecided (the run then ends
/// `awaiting_approval`).
pub struct TerminalApprover {
    always: Mutex<HashSet<String>>,
    answers: Arc<dyn Answers>,
}

impl Default for TerminalApprover {
    fn default() -> Self {
        Self::with_answers(Arc::new(StdinAnswers))
    }
}

impl TerminalApprover {
    /// An approver that reads its answers from `answers` (`reins chat`: its line editor).
    pub fn with_answers(answers: Arc<dyn Answers>) -> Self {
        Self { always: Mutex::new(HashSet::new()), answers }
    }
}

/// Where the terminal approver gets its answers: one line after showing `prompt`, or `None` when there is
/// none (the end of input; in `reins chat`, Ctrl-C at the question, which also cancels the turn).
#[async_trait]
pub trait Answers: Send + Sync {
    /// The next line, trimmed.
    async fn line(&self, prompt: &str) -> Option<String>;
}

/// Answers from standard input, the prompt on standard error.
pub(crate) struct StdinAnswers;

#[async_trait]
impl Answers for StdinAnswers {
    async fn line(&self, prompt: &str) -> Option<String> {
        errln!("{prompt}");
        read_line().await
    }
}

/// One line from standard input (`None` at its end), read off the async runtime.
pub(crate) async fn read_line() -> Option<String> {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim().to_owned()),
        }
    })
    .await
    .ok()
    .flatten()
}

#[async_trait]
impl Approver for TerminalApprover {
    async fn decide(
        &self,
        request: &ApprovalRequest,
        _: &CancellationToken,
    ) -> Result<Vec<ApprovalDecision>, ApprovalError> {
        let mut out = Vec::new();
        for call in &request.calls {
            let always = self.always.lock().map(|a| a.contains(&call.name)).unwrap_or(false);
            if always {
                errln!("  ✓ {} {} approved (always for {} in this run)", call.call_id, call.name, call.name);
                out.push(ApprovalDecision::approve(call));
                continue;
            }
            let reason = match &call.plan {
                reins::Plan::Ask { reason } => reason.as_str(),
                _ => "",
            };
            // A sub-agent's call is named with its sub-agent; it can be approved or denied, not edited (its tools
            // are not the parent's).
            let of = call.sub_agent.as_ref().map(|s| format!("[{}] ", s.agent)).unwrap_or_default();
            let preview = crate::render::preview(&call.arguments.to_string());
            errln!("? {of}{} {} {preview}", call.call_id, call.name);
            errln!("  {reason}");
            loop {
                let edit = if call.sub_agent.is_some() { "" } else { " / [e]dit" };
                let prompt = format!("  [y]es / [n]o REASON / [a]lways for {}{edit} > ", call.name);
                let Some(line) = self.answers.line(&prompt).await else { return Ok(out) };
                let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line.as_str(), ""));
                match word {
                    "y" | "yes" => {
                        out.push(ApprovalDecision::approve(call));
                        break;
                    }
                    "a" | "always" => {
                        if let Ok(mut a) = self.always.lock() {
                            a.insert(call.name.clone());
                        }
                        out.push(ApprovalDecision::approve(call));
                        break;
                    }
                    "n" | "no" => {
                        let mut reason = rest.trim().to_owned();
                        while reason.is_empty() {
                            match self.answers.line("  reason (the model gets it) > ").await {
                                Some(r) => reason = r,
                                None => return Ok(out),
                            }
                        }
                        out.push(ApprovalDecision::deny(call, reason));
                        break;
                    }
                    "e" | "edit" if call.sub_agent.is_some() => {
                        errln!("  a sub-agent's call cannot be edited: answer y, n REASON or a")
                    }
                    "e" | "edit" => {
                        let Some(json) = self.answers.line("  new arguments (one line of JSON) > ").await else {
                            return Ok(out);
                        };
                        match serde_json::from_str::<serde_json::Value>(&json) {
                            Ok(v) if v.is_object() => {
                                out.push(ApprovalDecision::edit(call, v));
                                break;
                            }
                            Ok(_) => errln!("  the arguments must be a JSON object"),
                            Err(e) => errln!("  not JSON: {e}"),
                        }
                    }
                    _ => errln!("  answer y, n REASON, a or e"),
                }
            }
        }
        Ok(out)
    }
}
