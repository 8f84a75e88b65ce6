//! A 2026-07-28 server's input-required results (SEP-2322, multi round-trip requests): instead of asking the
//! client in a request of its own, such a server answers a `tools/call` with the questions it needs answered
//! and an opaque request state; the call is sent again with the answers and that state, as many rounds as it
//! takes. Questions for the person (`elicitation/create`) go where an earlier server's `elicitation/create`
//! requests go ([`Handler::elicit`]: the person, never the model; declined when nobody can be asked) and are
//! noted in the call's result alike; `roots/list` gets no roots; sampling is not offered, so a server that
//! asks for it fails the call.

use std::time::Duration;

use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, InputRequest, InputResponses};
use rmcp::service::{Peer, RoleClient};

use super::Handler;

/// How many input-required rounds one call may take (a served Reins agent asks one approval a round: the
/// per-call timeout is the other bound).
pub(crate) const MAX_ROUNDS: usize = 64;

/// Calls the tool, answering each input-required result and sending the call again, until the server
/// completes it (at most [`MAX_ROUNDS`] rounds).
pub(super) async fn call_tool(
    peer: &Peer<RoleClient>,
    handler: &Handler,
    mut params: CallToolRequestParams,
) -> Result<CallToolResult, ServiceError> {
    let mut empty_rounds = 0u32;
    for _ in 0..MAX_ROUNDS {
        let required = match peer.call_tool_once(params.clone()).await? {
            CallToolResponse::Complete(result) => return Ok(result),
            CallToolResponse::InputRequired(required) => required,
            _ => return Err(ServiceError::UnexpectedResponse),
        };
        let requests = required.input_requests.unwrap_or_default();
        if requests.is_empty() {
            if required.request_state.is_none() {
                return Err(ServiceError::UnexpectedResponse);
            }
            // The server only wants the call again later (it is busy): wait a little longer each time.
            tokio::time::sleep(Duration::from_millis(50 << empty_rounds.min(3))).await;
            empty_rounds += 1;
        } else {
            empty_rounds = 0;
        }
        let mut responses = InputResponses::new();
        // One question at a time: the person answers them in turn.
        for (key, request) in requests {
            responses.insert(key, answer(handler, request).await?);
        }
        params.input_responses = (!responses.is_empty()).then_some(responses);
        params.request_state = required.request_state;
    }
    Err(ServiceError::InputRequiredRoundsExceeded { max_rounds: MAX_ROUNDS })
}

/// The answer to one input request.
async fn answer(handler: &Handler, request: InputRequest) -> Result<serde_json::Value, ServiceError> {
    let value = match request {
        InputRequest::Elicitation(request) => serde_json::to_value(handler.elicit(request.params).await),
        InputRequest::ListRoots(_) => Ok(serde_json::json!({"roots": []})),
        _ => {
            return Err(ServiceError::McpError(ErrorData::invalid_request(
                "the server asked for input Reins does not give (sampling)",
                None,
            )));
        }
    };
    value.map_err(|e| ServiceError::McpError(ErrorData::internal_error(e.to_string(), None)))
}
