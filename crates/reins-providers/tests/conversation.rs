//! The conversation a real model needs (issue 11), against the adapters' request bodies and a local
//! scripted server: response caps, cache usage, reasoning round trips, cache breakpoints.

use reins::{Conversation, Message, ModelRequest};
use reins_providers::{Api, DEFAULT_RESPONSE_CAP, Provider};

fn request() -> ModelRequest {
    ModelRequest { messages: Conversation::from_messages([Message::user("hi")]), ..ModelRequest::default() }
}

fn local(api: Api, model: &str) -> Provider {
    Provider::builder(api, model).base_url("http://127.0.0.1:9/v1").build().unwrap()
}

#[test]
fn a_model_of_unknown_output_cap_gets_the_default_response_cap() {
    let cap = u64::from(DEFAULT_RESPONSE_CAP);
    assert_eq!(cap, 8192);
    let body = local(Api::OpenAiChat, "gemma-3-270m").request_body(&request());
    assert_eq!(body["max_tokens"], cap, "{body}");
    let body = local(Api::OpenAiResponses, "my-local-model").request_body(&request());
    assert_eq!(body["max_output_tokens"], cap, "{body}");
    let body = local(Api::Anthropic, "claude-next-unknown").request_body(&request());
    assert_eq!(body["max_tokens"], cap, "{body}");
    // A known model keeps the API's own default (its cap); Anthropic needs one and gets the model's.
    let body = local(Api::OpenAiResponses, "gpt-4.1-mini").request_body(&request());
    assert!(body.get("max_output_tokens").is_none(), "{body}");
    let body = local(Api::Anthropic, "claude-sonnet-4-5").request_body(&request());
    assert_eq!(body["max_tokens"], 32_000, "{body}");
    // A configured cap always wins.
    let p = Provider::builder(Api::OpenAiChat, "gemma").base_url("http://127.0.0.1:9/v1").max_output_tokens(77);
    assert_eq!(p.build().unwrap().request_body(&request())["max_tokens"], 77);
}
