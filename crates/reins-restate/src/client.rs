//! The client of durable runs: submits turns through Restate's ingress, waits for them, finds runs and
//! sessions through its admin API, cancels them, and answers the approvals they wait for.

use std::time::Duration;

use reins::{ApprovalDecision, Outcome};
use serde::Deserialize;
use serde_json::Value;

use crate::{Awaiting, LAST, SERVICE, STATE_APPROVAL, TURN, TurnRequest, is_valid_awakeable, is_valid_id};

/// What went wrong talking to Restate.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The service could not be reached (nothing listens, a refused or broken connection).
    #[error("the Restate service at {url} is unreachable: {reason}")]
    Unreachable {
        /// The URL tried.
        url: String,
        /// Why.
        reason: String,
    },
    /// No run or session has this id.
    #[error("no durable run or session has the id {0:?}")]
    Unknown(String),
    /// The id is not one Reins makes (`A-Za-z0-9._-`, at most 128).
    #[error("{0:?} is not a valid run or session id (1 to 128 of A-Za-z0-9._-)")]
    InvalidId(String),
    /// The turn failed for good (for example a bad agent definition): Restate does not retry it.
    #[error("{0}")]
    Failed(String),
    /// The run has not finished yet.
    #[error("the run {0} has not finished yet")]
    NotFinished(String),
    /// Restate answered something unexpected.
    #[error("Restate answered {status} to {what}: {body}")]
    Http {
        /// What was asked.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The start of the body.
        body: String,
    },
}

/// A turn that Restate accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submitted {
    /// The session.
    pub session: String,
    /// The run (the turn's idempotency key).
    pub run_id: String,
    /// Restate's invocation id.
    pub invocation_id: String,
}

/// A run as Restate knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Restate's invocation id.
    pub invocation_id: String,
    /// The session.
    pub session: String,
    /// The run id.
    pub run_id: String,
    /// Restate's status of the invocation: `pending`, `scheduled`, `ready`, `running`, `backing-off`,
    /// `suspended`, `paused` or `completed`.
    pub status: String,
    /// For a completed invocation that failed for good: why.
    pub failure: Option<String>,
}

/// Talks to one Restate server: its ingress (where turns are submitted) and its admin API.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    ingress: String,
    admin: String,
}

fn body_start(text: &str) -> String {
    let t: String = text.chars().take(400).collect();
    t.trim().to_owned()
}

impl Client {
    /// A client of the ingress at `ingress` (e.g. `http://127.0.0.1:8080`) and the admin API at `admin`
    /// (e.g. `http://127.0.0.1:9070`).
    pub fn new(ingress: &str, admin: &str) -> Client {
        // The TLS stack needs a crypto provider even for plain HTTP (the first one installed stays).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder().connect_timeout(Duration::from_secs(10)).build().unwrap_or_default();
        Client {
            http,
            ingress: ingress.trim_end_matches('/').to_owned(),
            admin: admin.trim_end_matches('/').to_owned(),
        }
    }

    /// The admin URL that goes with an ingress URL: the same host, port 9070.
    pub fn default_admin(ingress: &str) -> String {
        match reqwest::Url::parse(ingress) {
            Ok(mut u) => {
                let _ = u.set_port(Some(9070));
                u.as_str().trim_end_matches('/').to_owned()
            }
            Err(_) => "http://127.0.0.1:9070".to_owned(),
        }
    }

    fn unreachable(&self, url: &str, e: reqwest::Error) -> ClientError {
        let mut reason = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            reason = format!("{reason}: {s}");
            source = s.source();
        }
        ClientError::Unreachable { url: url.to_owned(), reason }
    }

    async fn send(&self, what: &str, url: &str, req: reqwest::RequestBuilder) -> Result<(u16, String), ClientError> {
        let resp = req.send().await.map_err(|e| self.unreachable(url, e))?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| self.unreachable(url, e))?;
        let _ = what;
        Ok((status, text))
    }

    /// Submits a turn of `session` without waiting for it.
    pub async fn submit(&self, session: &str, request: &TurnRequest) -> Result<Submitted, ClientError> {
        for id in [session, request.run_id.as_str()] {
            if !is_valid_id(id) {
                return Err(ClientError::InvalidId(id.to_owned()));
            }
        }
        let url = format!("{}/{SERVICE}/{session}/{TURN}/send", self.ingress);
        let req = self.http.post(&url).header("idempotency-key", &request.run_id).json(request);
        let (status, text) = self.send("submit", &url, req).await?;
        if !(200..300).contains(&status) {
            return Err(ClientError::Http { what: format!("POST {url}"), status, body: body_start(&text) });
        }
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let invocation_id = v["invocationId"].as_str().unwrap_or_default().to_owned();
        Ok(Submitted { session: session.to_owned(), run_id: request.run_id.clone(), invocation_id })
    }

    /// Waits for the run `run_id` of `session` to end and returns its outcome.
    pub async fn wait(&self, session: &str, run_id: &str) -> Result<Outcome, ClientError> {
        let url = format!("{}/restate/invocation/{SERVICE}/{session}/{TURN}/{run_id}/attach", self.ingress);
        let (status, text) = self.send("attach", &url, self.http.get(&url)).await?;
        self.outcome_of(&url, status, &text, run_id)
    }

    fn outcome_of(&self, url: &str, status: u16, text: &str, id: &str) -> Result<Outcome, ClientError> {
        match status {
            200 => serde_json::from_str(text).map_err(|e| ClientError::Http {
                what: format!("GET {url}"),
                status,
                body: format!("not an outcome ({e}): {}", body_start(text)),
            }),
            404 => Err(ClientError::Unknown(id.to_owned())),
            470 => Err(ClientError::NotFinished(id.to_owned())),
            _ => {
                let message = serde_json::from_str::<Value>(text)
                    .ok()
                    .and_then(|v| v["message"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| body_start(text));
                if (400..500).contains(&status) || status == 500 {
                    Err(ClientError::Failed(message))
                } else {
                    Err(ClientError::Http { what: format!("GET {url}"), status, body: message })
                }
            }
        }
    }

    /// The outcome of a finished run, without waiting.
    pub async fn result(&self, found: &Found) -> Result<Outcome, ClientError> {
        if found.status != "completed" {
            return Err(ClientError::NotFinished(found.run_id.clone()));
        }
        if let Some(f) = &found.failure {
            return Err(ClientError::Failed(f.clone()));
        }
        let url = format!("{}/restate/invocation/{}/output", self.ingress, found.invocation_id);
        let (status, text) = self.send("output", &url, self.http.get(&url)).await?;
        self.outcome_of(&url, status, &text, &found.run_id)
    }

    /// The outcome of the last finished turn of `session`, if it has one.
    pub async fn last(&self, session: &str) -> Result<Option<Outcome>, ClientError> {
        if !is_valid_id(session) {
            return Err(ClientError::InvalidId(session.to_owned()));
        }
        let url = format!("{}/{SERVICE}/{session}/{LAST}", self.ingress);
        let (status, text) = self.send("last", &url, self.http.post(&url)).await?;
        if status != 200 {
            return Err(ClientError::Http { what: format!("POST {url}"), status, body: body_start(&text) });
        }
        serde_json::from_str(&text).map_err(|e| ClientError::Http {
            what: format!("POST {url}"),
            status,
            body: format!("not an outcome ({e}): {}", body_start(&text)),
        })
    }

    /// Finds the run `id`, or the newest run of the session `id`.
    pub async fn find(&self, id: &str) -> Result<Found, ClientError> {
        if !is_valid_id(id) {
            return Err(ClientError::InvalidId(id.to_owned()));
        }
        // `id` is made of A-Za-z0-9._- only (checked above): safe inside the quotes.
        let query = format!(
            "SELECT id, target_service_key, idempotency_key, status, completion_result, completion_failure \
             FROM sys_invocation WHERE target_service_name = '{SERVICE}' AND target_handler_name = '{TURN}' \
             AND (idempotency_key = '{id}' OR target_service_key = '{id}') ORDER BY created_at DESC LIMIT 1"
        );
        let Some(row) = self.query(&query).await?.into_iter().next() else {
            return Err(ClientError::Unknown(id.to_owned()));
        };
        let s = |k: &str| row[k].as_str().unwrap_or_default().to_owned();
        let failure = (row["completion_result"].as_str() == Some("failure")).then(|| s("completion_failure"));
        Ok(Found {
            invocation_id: s("id"),
            session: s("target_service_key"),
            run_id: s("idempotency_key"),
            status: s("status"),
            failure,
        })
    }

    /// The rows of an admin SQL query.
    async fn query(&self, query: &str) -> Result<Vec<Value>, ClientError> {
        let url = format!("{}/query", self.admin);
        let req =
            self.http.post(&url).header("accept", "application/json").json(&serde_json::json!({ "query": query }));
        let (status, text) = self.send("query", &url, req).await?;
        if status != 200 {
            return Err(ClientError::Http { what: format!("POST {url}"), status, body: body_start(&text) });
        }
        #[derive(Deserialize)]
        struct Rows {
            rows: Vec<Value>,
        }
        let rows: Rows = serde_json::from_str(&text).map_err(|e| ClientError::Http {
            what: format!("POST {url}"),
            status,
            body: format!("unexpected answer ({e}): {}", body_start(&text)),
        })?;
        Ok(rows.rows)
    }

    /// What the turn under way of `session` waits for, if it waits for decisions: read from the session's
    /// state through the admin API, so it is answered while no worker runs.
    pub async fn awaiting(&self, session: &str) -> Result<Option<Awaiting>, ClientError> {
        if !is_valid_id(session) {
            return Err(ClientError::InvalidId(session.to_owned()));
        }
        let query = format!(
            "SELECT value_utf8 FROM state WHERE service_name = '{SERVICE}' AND service_key = '{session}' \
             AND key = '{STATE_APPROVAL}'"
        );
        let Some(row) = self.query(&query).await?.into_iter().next() else { return Ok(None) };
        let text = row["value_utf8"].as_str().unwrap_or_default();
        serde_json::from_str(text).map(Some).map_err(|e| ClientError::Http {
            what: format!("the approval state of session {session}"),
            status: 200,
            body: format!("not an approval wait ({e}): {}", body_start(text)),
        })
    }

    /// Resolves the awakeable a turn waits on with `decisions` (the turn checks them as the run applies
    /// them, and asks again about calls they leave undecided or that they do not apply to).
    pub async fn resolve(&self, awakeable: &str, decisions: &[ApprovalDecision]) -> Result<(), ClientError> {
        if !is_valid_awakeable(awakeable) {
            return Err(ClientError::Http {
                what: "the approval state".into(),
                status: 200,
                body: format!("{awakeable:?} is not an awakeable id"),
            });
        }
        let url = format!("{}/restate/awakeables/{awakeable}/resolve", self.ingress);
        let (status, text) = self.send("resolve", &url, self.http.post(&url).json(decisions)).await?;
        match status {
            200..=299 => Ok(()),
            404 => Err(ClientError::Unknown(awakeable.to_owned())),
            _ => Err(ClientError::Http { what: format!("POST {url}"), status, body: body_start(&text) }),
        }
    }

    /// Cancels a run: it ends `aborted` at its next step, with a coherent transcript.
    pub async fn cancel(&self, found: &Found) -> Result<(), ClientError> {
        let url = format!("{}/invocations/{}/cancel", self.admin, found.invocation_id);
        let (status, text) = self.send("cancel", &url, self.http.patch(&url)).await?;
        match status {
            200..=299 => Ok(()),
            404 => Err(ClientError::Unknown(found.run_id.clone())),
            _ => Err(ClientError::Http { what: format!("PATCH {url}"), status, body: body_start(&text) }),
        }
    }
}
