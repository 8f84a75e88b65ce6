//! Approvals on the command line: the flag `--approve never|writes|all` (the agent's `approve`), the
//! terminal approver that asks inline (yes / no with a reason / always for this tool / edit), and `reins
//! approve ID`, which records decisions for a session that waits and continues its run.

use std::collections::HashSet;
use std::io::{BufRead as _, IsTerminal as _};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use clap::Args;
use reins::{ApprovalDecision, ApprovalError, ApprovalRequest, Approver, PendingCall};
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, usage};
use crate::run::RunArgs;

/// `reins approve`: decisions about the calls a session waits on, then its run goes on.
#[derive(Args, Debug)]
pub struct ApproveArgs {
    /// The session that waits (an id or a unique prefix); with --restate, a durable run's id or its session's id.
    pub id: String,
    /// Decides about this call (repeatable): approved, or denied with --deny.
    #[arg(long = "call", value_name = "CALL_ID")]
    pub calls: Vec<String>,
    /// Decides about every waiting call (but those given --edit).
    #[arg(long, conflicts_with = "calls")]
    pub all: bool,
    /// Denies the calls chosen by --call or --all with this reason (the model gets it) instead of approving.
    #[arg(long, value_name = "REASON")]
    pub deny: Option<String>,
    /// Approves the call with these arguments instead (a JSON object, validated against the tool's schema).
    #[arg(long, value_name = "CALL_ID=JSON")]
    pub edit: Vec<String>,
    /// A durable run (`reins submit`): where Restate is. ID is then the run id or its session id, the
    /// decisions resolve the awakeable the run waits on, and of the run's flags only --json and --output apply.
    #[command(flatten)]
    pub durable: crate::durable_cli::RestateFlags,
    /// With --restate: waits for the run to end and prints its outcome like `reins run`, with its exit code.
    #[arg(long)]
    pub wait: bool,
    /// The run's flags, as for `reins run --resume ID`.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Parses `--edit CALL_ID=JSON`: the id is what comes before the first `=`, the rest is JSON.
pub fn parse_edit(spec: &str) -> Result<(String, serde_json::Value), String> {
    let (id, json) =
        spec.split_once('=').ok_or_else(|| format!("--edit {spec:?}: expected CALL_ID=JSON (the new arguments)"))?;
    if id.is_empty() {
        return Err(format!("--edit {spec:?}: the call id before `=` is empty"));
    }
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("--edit {id}: the arguments are not JSON: {e}"))?;
    if !value.is_object() {
        return Err(format!("--edit {id}: the arguments must be a JSON object"));
    }
    Ok((id.to_owned(), value))
}

/// The decisions the flags of `reins approve` make about the `waiting` calls (those that need one), each
/// bound to the call's id and the hash of the arguments it waits with.
pub fn decisions(
    waiting: &[PendingCall],
    calls: &[String],
    all: bool,
    deny: Option<&str>,
    edits: &[String],
) -> Result<Vec<ApprovalDecision>, String> {
    let list = || waiting.iter().map(|p| format!("{} {}", p.call_id, p.name)).collect::<Vec<_>>().join(", ");
    let find = |id: &str| {
        waiting
            .iter()
            .find(|p| p.call_id == id)
            .ok_or_else(|| format!("no call {id:?} waits for a decision (waiting: {})", list()))
    };
    if calls.is_empty() && !all && edits.is_empty() {
        return Err(format!("say which calls: --call CALL_ID, --all or --edit CALL_ID=JSON (waiting: {})", list()));
    }
    if deny.is_some() && calls.is_empty() && !all {
        return Err("--deny needs the calls it denies: --call CALL_ID or --all".into());
    }
    if let Some(r) = deny {
        if r.trim().is_empty() {
            return Err("--deny needs a reason (the model gets it)".into());
        }
    }
    let mut out = Vec::new();
    let mut decided = HashSet::new();
    for spec in edits {
        let (id, arguments) = parse_edit(spec)?;
        let p = find(&id)?;
        if !decided.insert(p.call_id.clone()) {
            return Err(format!("call {id:?} is decided twice"));
        }
        out.push(ApprovalDecision::edit(p, arguments));
    }
    let chosen: Vec<&PendingCall> = if all {
        waiting.iter().filter(|p| !decided.contains(&p.call_id)).collect()
    } else {
        calls.iter().map(|id| find(id)).collect::<Result<_, _>>()?
    };
    for p in chosen {
        if !decided.insert(p.call_id.clone()) {
            return Err(format!("call {:?} is decided twice", p.call_id));
        }
        out.push(match deny {
            Some(reason) => ApprovalDecision::deny(p, reason),
            None => ApprovalDecision::approve(p),
        });
    }
    Ok(out)
}

/// `reins approve`.
pub async fn approve(args: ApproveArgs) -> Result<u8, CliError> {
    let ApproveArgs { id, calls, all, deny, edit, durable, wait, mut run } = args;
    if run.prompt.is_some() {
        return Err(usage("reins approve takes no prompt: it continues the waiting run"));
    }
    let given = Given { calls, all, deny, edit };
    if durable.restate.is_some() || durable.restate_admin.is_some() {
        return crate::durable_cli::approve(&id, &given, &durable, wait, run.json, run.output.as_ref()).await;
    }
    if wait {
        return Err(usage(
            "--wait applies to a durable run (--restate URL): reins approve waits for a local run anyway",
        ));
    }
    if run.store.resume.is_some() || run.store.no_store {
        return Err(usage("reins approve continues the session it names: --resume and --no-store do not apply"));
    }
    run.store.resume = Some(id);
    crate::run::run_with(run, Some(given)).await
}

/// The decisions given on the command line, applied to the batch the session waits on.
pub struct Given {
    calls: Vec<String>,
    all: bool,
    deny: Option<String>,
    edit: Vec<String>,
}

impl Given {
    /// The decisions about the `waiting` calls (those that need one), bound to their ids and hashes.
    pub fn decisions_for(&self, waiting: &[PendingCall]) -> Result<Vec<ApprovalDecision>, String> {
        decisions(waiting, &self.calls, self.all, self.deny.as_deref(), &self.edit)
    }

    /// The decisions about `state`'s waiting batch, each checked on a copy of the state first: an edit the
    /// tool's schema refuses, or a call that does not wait, is a usage error and nothing is recorded.
    pub fn decide(
        &self,
        session: &str,
        state: &reins::RunState,
        registry: &reins::Registry,
    ) -> Result<Vec<ApprovalDecision>, CliError> {
        if !state.awaits_decision() {
            return Err(usage(format!("session {session} does not wait for an approval")));
        }
        let waiting: Vec<PendingCall> = state.pending_batch().into_iter().filter(PendingCall::needs_decision).collect();
        let list = decisions(&waiting, &self.calls, self.all, self.deny.as_deref(), &self.edit).map_err(usage)?;
        let mut check = state.clone();
        for d in &list {
            check.decide(d, registry).map_err(|e| usage(e.to_string()))?;
        }
        Ok(list)
    }
}

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
struct StdinAnswers;

#[async_trait]
impl Answers for StdinAnswers {
    async fn line(&self, prompt: &str) -> Option<String> {
        errln!("{prompt}");
        read_line().await
    }
}

/// One line from standard input (`None` at its end), read off the async runtime.
async fn read_line() -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn waiting(ids: &[&str]) -> Vec<PendingCall> {
        ids.iter()
            .map(|id| PendingCall {
                call_id: (*id).into(),
                name: "write_file".into(),
                arguments: json!({"path": id}),
                arguments_hash: reins::arguments_hash(&json!({"path": id})),
                plan: reins::Plan::Ask { reason: "r".into() },
                edited_by: None,
                sub_agent: None,
                result: None,
            })
            .collect()
    }

    #[test]
    fn flags_make_bound_decisions_or_clear_errors() {
        let w = waiting(&["c1", "c2"]);
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        let d = decisions(&w, &[], true, None, &s(&["c2={\"path\":\"b\"}"])).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].verdict, reins::Verdict::Edit { arguments: json!({"path": "b"}) });
        assert_eq!(d[1].call_id, "c1");
        assert_eq!(d[1].arguments_hash, w[0].arguments_hash);
        let d = decisions(&w, &s(&["c1"]), false, Some("no"), &[]).unwrap();
        assert_eq!(d, vec![ApprovalDecision::deny(&w[0], "no")]);
        for (calls, all, deny, edits, needle) in [
            (s(&[]), false, None, s(&[]), "say which calls"),
            (s(&["zz"]), false, None, s(&[]), "no call \"zz\""),
            (s(&[]), false, Some("x"), s(&["c1={}"]), "--deny needs"),
            (s(&["c1"]), false, Some(" "), s(&[]), "needs a reason"),
            (s(&["c1"]), false, None, s(&["c1={}"]), "decided twice"),
            (s(&[]), false, None, s(&["c1"]), "expected CALL_ID=JSON"),
            (s(&[]), false, None, s(&["c1=[1]"]), "a JSON object"),
            (s(&[]), false, None, s(&["c1={"]), "not JSON"),
            (s(&[]), false, None, s(&["=1"]), "empty"),
        ] {
            let e = decisions(&w, &calls, all, deny, &edits).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
    }

    proptest! {
        #[test]
        fn edit_specs_round_trip(id in "[A-Za-z0-9_:.-]{1,20}", key in "[a-z]{1,6}", n in any::<i64>(), s in "\\PC{0,20}") {
            let args = json!({ key: n, "s": s });
            let (got_id, got) = parse_edit(&format!("{id}={args}")).unwrap();
            prop_assert_eq!(got_id, id);
            prop_assert_eq!(got, args);
        }

        #[test]
        fn edit_parsing_never_panics(spec in "\\PC{0,40}") {
            let _ = parse_edit(&spec);
        }

        #[test]
        fn every_decision_names_a_waiting_call_once_with_its_hash(
            n in 1usize..5, pick in proptest::collection::vec(0usize..5, 0..5), all in any::<bool>(), deny in any::<bool>()
        ) {
            let ids: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            let w = waiting(&refs);
            let calls: Vec<String> = if all { Vec::new() } else { pick.iter().map(|i| format!("c{i}")).collect() };
            match decisions(&w, &calls, all, deny.then_some("no"), &[]) {
                Ok(d) => {
                    let mut seen = HashSet::new();
                    for x in &d {
                        let p = w.iter().find(|p| p.call_id == x.call_id).unwrap();
                        prop_assert_eq!(&x.arguments_hash, &p.arguments_hash);
                        prop_assert!(seen.insert(x.call_id.clone()));
                    }
                    if all { prop_assert_eq!(d.len(), n); }
                }
                Err(e) => prop_assert!(!e.is_empty()),
            }
        }
    }
}
