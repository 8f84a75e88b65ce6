//! The floor under a durable step: a Restate virtual object whose turn journals what a Reins turn journals — two
//! state reads at the start, per step a `ctx.run` entry named `model step k` holding the model's response and
//! one named `tool step k call ck` holding the tool's result (the same values Reins journals for the bench's
//! `echo` script, so the same bytes), a last `model step` with the answer, and a state write at the end — and
//! does no other work: no agent, no engine, no transcript. Served and submitted the way the workers are.

use std::net::SocketAddr;

use reins::{ModelError, ModelResponse, ToolCall};
use reins_restate::journal::JournaledResult;
use restate_sdk::prelude::*;
use serde_json::{Value, json};

/// The object's name, beside `ReinsSession`.
pub const SERVICE: &str = "ReinsFloor";

/// The floor's virtual object.
pub struct Floor;

#[allow(missing_docs)]
mod object {
    use super::*;

    #[restate_sdk::object(name = "ReinsFloor")]
    impl Floor {
        /// Journals `{"steps": n}` echo steps and an answer; returns how many model steps it journaled.
        #[handler(name = "turn")]
        async fn turn(&self, ctx: ObjectContext<'_>, request: Json<Value>) -> Result<Json<u64>, HandlerError> {
            let steps = request.into_inner()["steps"].as_u64().unwrap_or(1);
            let _agent: Option<Json<Value>> = ctx.get("agent").await?;
            let _run: Option<Json<Value>> = ctx.get("run").await?;
            for k in 1..=steps {
                let call = ToolCall::new(format!("c{k}"), "echo", json!({"text": "hello"}));
                let response: Result<ModelResponse, ModelError> = Ok(ModelResponse::tool_calls("", vec![call]));
                let _: Json<Result<ModelResponse, ModelError>> =
                    ctx.run(move || async move { Ok(Json(response)) }).name(format!("model step {k}")).await?;
                let result =
                    JournaledResult { content: "hello".into(), is_error: false, images: Vec::new(), wait: None };
                let _: Json<JournaledResult> =
                    ctx.run(move || async move { Ok(Json(result)) }).name(format!("tool step {k} call c{k}")).await?;
            }
            let answer: Result<ModelResponse, ModelError> = Ok(ModelResponse::text("done"));
            let _: Json<Result<ModelResponse, ModelError>> =
                ctx.run(move || async move { Ok(Json(answer)) }).name(format!("model step {}", steps + 1)).await?;
            ctx.set("run", Json(json!({"status": "completed", "steps": steps + 1})));
            Ok(Json(steps + 1))
        }
    }
}

/// Serves the floor on a port of its own (HTTP/2, as a worker serves) and returns the port.
pub async fn serve() -> u16 {
    let listener = match tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await {
        Ok(l) => l,
        Err(e) => super::fail(&format!("floor: {e}")),
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let endpoint = restate_sdk::hyper::HyperEndpoint::new(Endpoint::builder().bind(Floor).build());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            let endpoint = endpoint.clone();
            tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), endpoint)
                    .await;
            });
        }
    });
    port
}

/// One floor turn of `steps` steps, submitted and awaited as `reins_restate::client` does a turn (send with an
/// idempotency key, then attach). Returns the model steps it journaled and the idempotency key.
pub async fn turn(http: &reqwest::Client, ingress: &str, steps: u64) -> (u64, String) {
    let (key, id) = (reins_restate::new_id(), reins_restate::new_id());
    let sent = http
        .post(format!("{ingress}/{SERVICE}/{key}/turn/send"))
        .header("idempotency-key", &id)
        .json(&json!({ "steps": steps }))
        .send()
        .await;
    if !sent.is_ok_and(|r| r.status().is_success()) {
        super::fail("floor: submit failed");
    }
    let r = http.get(format!("{ingress}/restate/invocation/{SERVICE}/{key}/turn/{id}/attach")).send().await;
    match r {
        Ok(r) if r.status().is_success() => (r.json::<u64>().await.unwrap_or(0), id),
        _ => super::fail("floor: attach failed"),
    }
}
