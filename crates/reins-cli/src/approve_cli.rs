//! Approvals on the command line: the flag `--approve never|writes|all` (the agent's `approve`), the
//! terminal approver that asks inline (yes / no with a reason / always for this tool / edit), and `reins
//! approve ID`, which records decisions for a session that waits and continues its run.

use std::path::PathBuf;

use clap::Args;
use reins::{PendingCall, Verdict};

use crate::decisions::Given;
use crate::exit::{CliError, code_for, usage};
use crate::outcome_file::show_outcome;
use crate::restate_client::{RestateFlags, client_err, find_waiting, show_waiting};
use crate::run_args::RunArgs;

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
    pub durable: crate::restate_client::RestateFlags,
    /// With --restate: waits for the run to end and prints its outcome like `reins run`, with its exit code.
    #[arg(long)]
    pub wait: bool,
    /// The run's flags, as for `reins run --resume ID`.
    #[command(flatten)]
    pub run: RunArgs,
}

/// `reins approve`.
pub async fn approve(args: ApproveArgs) -> Result<u8, CliError> {
    let ApproveArgs { id, calls, all, deny, edit, durable, wait, mut run } = args;
    if run.prompt.is_some() {
        return Err(usage("reins approve takes no prompt: it continues the waiting run"));
    }
    let given = Given { calls, all, deny, edit };
    if durable.restate.is_some() || durable.restate_admin.is_some() {
        return approve_durable(&id, &given, &durable, wait, run.json, run.output.as_ref()).await;
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
    crate::run_session::run_with(run, Some(given)).await
}

/// `reins approve --restate URL ID ...`: the decisions resolve the awakeable the durable run waits on; with
/// `wait`, waits for the run's end (or for it to ask again) and prints it like `reins run`.
async fn approve_durable(
    id: &str,
    given: &crate::decisions::Given,
    flags: &RestateFlags,
    wait: bool,
    json: bool,
    output: Option<&PathBuf>,
) -> Result<u8, CliError> {
    let client = flags.client();
    let (found, awaiting) = match find_waiting(&client, id).await {
        Ok(f) => f,
        Err(e) => return client_err(e),
    };
    let Some(asked) = awaiting else {
        let why = if found.status == "completed" { "has ended" } else { "is under way" };
        return Err(usage(format!("run {} does not wait for an approval (it {why})", found.run_id)));
    };
    let waiting: Vec<PendingCall> = asked.request.calls.iter().filter(|c| c.needs_decision()).cloned().collect();
    let decisions = given.decisions_for(&waiting).map_err(usage)?;
    if let Err(e) = client.resolve(&asked.awakeable, &decisions).await {
        return client_err(e);
    }
    if json && !wait {
        jsonln!("{}", serde_json::json!({"run": found.run_id, "session": found.session, "decisions": decisions}));
    } else if !json {
        for d in &decisions {
            let name = waiting.iter().find(|c| c.call_id == d.call_id).map_or("", |c| c.name.as_str());
            let what = match &d.verdict {
                Verdict::Approve => "approved".to_owned(),
                Verdict::Deny { reason } => format!("denied ({})", crate::render::preview(reason)),
                Verdict::Edit { arguments } => {
                    format!("approved with {}", crate::render::preview(&arguments.to_string()))
                }
            };
            outln!("{} {name} {what}", d.call_id);
        }
        outln!("run {}: decisions sent; it continues", found.run_id);
    }
    crate::output::flush_stdout();
    if !wait {
        return Ok(0);
    }
    // The run's end, unless the turn asks again first (decisions that did not apply, or calls left undecided).
    let mut ended = std::pin::pin!(client.wait(&found.session, &found.run_id));
    let mut poll = tokio::time::interval(std::time::Duration::from_millis(250));
    loop {
        tokio::select! {
            outcome = &mut ended => return match outcome {
                Ok(outcome) => show_outcome(&outcome, json, output),
                Err(e) => client_err(e),
            },
            _ = poll.tick() => {
                let again = match client.awaiting(&found.session).await {
                    Ok(a) => a.filter(|a| a.awakeable != asked.awakeable && a.request.run_id == found.run_id),
                    Err(e) => return client_err(e),
                };
                if let Some(a) = again {
                    if let Some(p) = &a.problem {
                        return Err(usage(format!("run {}: the decisions were not taken: {p}", found.run_id)));
                    }
                    if json {
                        let calls = serde_json::to_value(&a.request.calls).map_err(|e| CliError::Internal(e.into()))?;
                        jsonln!("{}", serde_json::json!({"run": found.run_id, "session": found.session, "state": "awaiting_approval", "awaiting": calls}));
                    } else {
                        outln!("run {} waits for more decisions", found.run_id);
                        show_waiting(&a);
                    }
                    return Ok(code_for(reins::Status::AwaitingApproval));
                }
            }
        }
    }
}
