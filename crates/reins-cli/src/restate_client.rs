//! Restate as the durable commands reach it: where it is (`--restate`, `--restate-admin`), the run an id names
//! and what it waits for, and client errors as a command reports them (exit 15 when unreachable or unknown).

use clap::Args;
use reins_restate::Awaiting;
use reins_restate::client::{Client, ClientError, Found};

use crate::exit::{CliError, usage};

/// The exit code of `submit`, `status`, `result` and `cancel` when the service is unreachable or the id unknown.
pub const EXIT_UNREACHABLE: u8 = 15;

/// Where Restate is.
#[derive(Args, Debug, Clone)]
pub struct RestateFlags {
    /// Restate's ingress URL (default: $REINS_RESTATE_URL, else http://127.0.0.1:8080).
    #[arg(long = "restate", value_name = "URL")]
    pub restate: Option<String>,
    /// Restate's admin URL (default: $REINS_RESTATE_ADMIN_URL, else the ingress host on port 9070).
    #[arg(long = "restate-admin", value_name = "URL")]
    pub restate_admin: Option<String>,
}

impl RestateFlags {
    pub(crate) fn client(&self) -> Client {
        let ingress = self
            .restate
            .clone()
            .or_else(|| std::env::var("REINS_RESTATE_URL").ok())
            .unwrap_or_else(|| "http://127.0.0.1:8080".to_owned());
        let admin = self
            .restate_admin
            .clone()
            .or_else(|| std::env::var("REINS_RESTATE_ADMIN_URL").ok())
            .unwrap_or_else(|| Client::default_admin(&ingress));
        Client::new(&ingress, &admin)
    }
}

/// A client error as the command reports it: unreachable or unknown is exit 15, a run that failed for good
/// (for example a bad agent definition) is bad input, exit 2.
pub fn client_err(e: ClientError) -> Result<u8, CliError> {
    match e {
        e @ (ClientError::Unreachable { .. } | ClientError::Unknown(_) | ClientError::NotFinished(_)) => {
            errln!("reins: error: {e}");
            Ok(EXIT_UNREACHABLE)
        }
        ClientError::InvalidId(_) => Err(usage(e.to_string())),
        ClientError::Failed(m) => Err(usage(format!("the durable run failed: {m}"))),
        e => Err(CliError::Internal(anyhow::anyhow!(e))),
    }
}

/// What the run `found` waits for, if it is under way and waits for decisions.
pub async fn awaiting_of(client: &Client, found: &Found) -> Result<Option<Awaiting>, ClientError> {
    if found.status == "completed" {
        return Ok(None);
    }
    Ok(client.awaiting(&found.session).await?.filter(|a| a.request.run_id == found.run_id))
}

/// Finds the run `id` (or the newest run of the session `id`) and what it waits for. Given a session id whose
/// newest run is a turn queued behind one that waits for decisions, it is the waiting run that is found.
pub async fn find_waiting(client: &Client, id: &str) -> Result<(Found, Option<Awaiting>), ClientError> {
    let found = client.find(id).await?;
    if found.session == id {
        if let Some(a) = client.awaiting(id).await? {
            if a.request.run_id != found.run_id {
                let waiting = client.find(&a.request.run_id).await?;
                if waiting.status != "completed" {
                    return Ok((waiting, Some(a)));
                }
            }
        }
    }
    let awaiting = awaiting_of(client, &found).await?;
    Ok((found, awaiting))
}

/// Prints the calls a run waits on, one a line: `waiting CALL_ID TOOL ARGUMENTS: REASON`.
pub fn show_waiting(a: &Awaiting) {
    for c in &a.request.calls {
        let reason = match &c.plan {
            reins::Plan::Ask { reason } => reason.as_str(),
            _ => "",
        };
        outln!("waiting {} {} {}: {}", c.call_id, c.name, crate::render::preview(&c.arguments.to_string()), reason);
    }
    if let Some(p) = &a.problem {
        outln!("problem {p}");
    }
}
