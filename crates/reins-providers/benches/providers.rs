//! The reins-providers benchmark: one JSON line `{"id", "value", "unit"}` per figure on stdout.
//!
//! Run with `cargo bench -p reins-providers --bench providers`. Every figure is the median of several
//! repetitions. Figures:
//!
//! - `sse-parse-{4k,64k}` (MB/s): the SSE parser alone over an 8 MiB stream of Chat Completions chunks
//!   (one text delta each), fed in 4 KiB or 64 KiB pieces.
//! - `sse-assemble-chat` (MB/s): one long Chat Completions stream (50,000 deltas) through `Provider` from
//!   a local HTTP server: transport, parser and assembly (JSON of every event) together.
//! - `turn-streamed` (µs): one streamed Chat Completions turn of 200 text deltas through `Provider` from a
//!   local HTTP server on 127.0.0.1 (request built, sent, every event parsed, deltas delivered to a sink,
//!   response assembled).
//! - `turn-raw-http` (µs): the same request and response with a bare reqwest client that only reads the
//!   bytes.
//! - `turn-overhead` (µs): the difference, that is what the harness adds to a streamed turn.
//! - `event-cost-{chat,responses,anthropic,gemini,bedrock}` (ns/event): one stream of 20,000 text deltas in each
//!   adapter's own event shape (Gemini's chunks each a whole `GenerateContentResponse` with its usage, as the
//!   API sends them; Bedrock's `contentBlockDelta` events each a binary event-stream frame with its CRCs) through
//!   `Provider` from a local HTTP server, the whole turn's time divided by the events.
//!
//! Set `REINS_BENCH_QUICK=1` for a fast smoke run (fewer repetitions).

use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use reins::{Conversation, Delta, DeltaSink, Message, Model, ModelRequest};
use reins_providers::sse::SseParser;
use reins_providers::{Api, Provider};
use tokio_util::sync::CancellationToken;

fn quick() -> bool {
    std::env::var_os("REINS_BENCH_QUICK").is_some()
}

fn emit(id: &str, value: f64, unit: &str) {
    println!("{}", serde_json::json!({"id": id, "value": (value * 1000.0).round() / 1000.0, "unit": unit}));
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A Chat Completions stream of `n` one-word text deltas, a finish chunk, usage and `[DONE]`.
/// A request of one user message and no tools.
fn request(prompt: &str) -> ModelRequest {
    ModelRequest {
        instructions: None,
        messages: Conversation::from_messages(vec![Message::user(prompt)]),
        tools: Arc::from([]),
        cache_key: None,
    }
}

fn chat_stream(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        s.push_str(&format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"word{i} \"}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    s.push_str("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
    s.push_str("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":200,\"total_tokens\":210}}\n\n");
    s.push_str("data: [DONE]\n\n");
    s
}

/// A stream of `n` one-word text deltas in `api`'s own event shape, complete with its ending events.
fn adapter_stream(api: Api, n: usize) -> String {
    let mut s = String::new();
    match api {
        Api::OpenAiChat => return chat_stream(n),
        Api::OpenAiResponses => {
            for i in 0..n {
                s.push_str(&format!("event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"sequence_number\":{i},\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"word{i} \",\"logprobs\":[]}}\n\n"));
            }
            s.push_str("event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"model\":\"m\",\"output\":[{\"type\":\"message\",\"id\":\"msg_1\",\"role\":\"assistant\",\"status\":\"completed\",\"content\":[{\"type\":\"output_text\",\"text\":\"words\",\"annotations\":[]}]}],\"usage\":{\"input_tokens\":10,\"output_tokens\":200,\"total_tokens\":210}}}\n\n");
        }
        Api::Anthropic => {
            s.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n");
            s.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
            for i in 0..n {
                s.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"word{i} \"}}}}\n\n"));
            }
            s.push_str("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n");
            s.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":200}}\n\n");
            s.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        }
        Api::Bedrock => unreachable!("bedrock_stream: its frames are binary"),
        Api::Gemini => {
            for i in 0..n {
                let finish = if i + 1 == n { ",\"finishReason\":\"STOP\"" } else { "" };
                s.push_str(&format!("data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":\"word{i} \"}}],\"role\":\"model\"}}{finish},\"index\":0}}],\"usageMetadata\":{{\"promptTokenCount\":10,\"candidatesTokenCount\":{i},\"totalTokenCount\":{}}},\"modelVersion\":\"gemini-2.5-flash\",\"responseId\":\"r1\"}}\r\n\r\n", i + 10));
            }
        }
    }
    s
}

/// A ConverseStream answer of `n` one-word text deltas as event-stream frames (what Bedrock sends).
fn bedrock_stream(n: usize) -> Vec<u8> {
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message as Frame};
    let frame = |kind: &'static str, payload: String, out: &mut Vec<u8>| {
        let headers = vec![
            Header::new(":message-type", HeaderValue::String("event".into())),
            Header::new(":event-type", HeaderValue::String(kind.into())),
            Header::new(":content-type", HeaderValue::String("application/json".into())),
        ];
        aws_smithy_eventstream::frame::write_message_to(&Frame::new_from_parts(headers, payload), out).expect("frame");
    };
    let mut out = Vec::new();
    frame("messageStart", r#"{"role":"assistant"}"#.into(), &mut out);
    for i in 0..n {
        frame("contentBlockDelta", format!(r#"{{"contentBlockIndex":0,"delta":{{"text":"word{i} "}}}}"#), &mut out);
    }
    frame("contentBlockStop", r#"{"contentBlockIndex":0}"#.into(), &mut out);
    frame("messageStop", r#"{"stopReason":"end_turn"}"#.into(), &mut out);
    let usage = r#"{"usage":{"inputTokens":10,"outputTokens":200,"totalTokens":210},"metrics":{"latencyMs":1}}"#;
    frame("metadata", usage.into(), &mut out);
    out
}

/// What one streamed event costs each adapter, through `Provider` from a local server (see the module doc).
async fn event_costs() {
    const EVENTS: usize = 20_000;
    for (api, name) in [
        (Api::OpenAiChat, "chat"),
        (Api::OpenAiResponses, "responses"),
        (Api::Anthropic, "anthropic"),
        (Api::Gemini, "gemini"),
        (Api::Bedrock, "bedrock"),
    ] {
        let base = match api {
            Api::Bedrock => serve_as(Bytes::from(bedrock_stream(EVENTS)), "application/vnd.amazon.eventstream").await,
            _ => serve(Bytes::from(adapter_stream(api, EVENTS))).await,
        };
        let provider = Provider::builder(api, "m").base_url(base).build().expect("provider");
        let request = request("hi");
        let reps = if quick() { 3 } else { 9 };
        let mut costs = Vec::new();
        for _ in 0..reps {
            let t0 = Instant::now();
            let r = provider.generate(&request, &CancellationToken::new()).await.expect("turn");
            costs.push(t0.elapsed().as_secs_f64() * 1e9 / EVENTS as f64);
            assert!(r.text.starts_with("word"), "{name}: {:?}", &r.text[..r.text.len().min(40)]);
            black_box(r);
        }
        emit(&format!("event-cost-{name}"), median(costs), "ns/event");
    }
}

fn sse_parse(stream: &[u8], chunk: usize) -> f64 {
    let reps = if quick() { 3 } else { 15 };
    let mut rates = Vec::new();
    for _ in 0..reps {
        let t0 = Instant::now();
        let mut p = SseParser::new(1 << 20);
        let mut out = Vec::with_capacity(1024);
        let mut events = 0usize;
        for c in stream.chunks(chunk) {
            p.push(c, &mut out).expect("valid stream");
            events += out.len();
            out.clear();
        }
        black_box(events);
        rates.push(stream.len() as f64 / t0.elapsed().as_secs_f64() / 1e6);
    }
    median(rates)
}

async fn serve(body: Bytes) -> String {
    serve_as(body, "text/event-stream").await
}

/// A local server answering every request with `body` as `content_type`.
async fn serve_as(body: Bytes, content_type: &'static str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let body = body.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let body = body.clone();
                    async move {
                        // Read the request fully, as a real server would.
                        let _ = http_body_util::BodyExt::collect(req.into_body()).await;
                        let mut resp = Response::new(Full::new(body));
                        resp.headers_mut().insert("content-type", content_type.parse().expect("header"));
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    format!("http://{addr}/v1")
}

async fn turns(stream: String) {
    let base = serve(Bytes::from(stream)).await;
    let provider = Provider::builder(Api::OpenAiChat, "m").base_url(base.clone()).build().expect("provider");
    let request = request("Write two hundred words.");
    let body = serde_json::to_vec(&provider.request_body(&request)).expect("body");
    let raw = reqwest::Client::new();
    let cancel = CancellationToken::new();
    let sink = DeltaSink::new(|d| {
        black_box(matches!(d, Delta::Text { .. }));
    });
    let reps = if quick() { 20 } else { 300 };
    // Warm up the connection pools.
    for _ in 0..5 {
        sink.clone().scope(provider.generate(&request, &cancel)).await.expect("turn");
        raw.post(format!("{base}/chat/completions")).body(body.clone()).send().await.expect("raw").bytes().await.ok();
    }
    let (mut streamed, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t0 = Instant::now();
        let r = sink.clone().scope(provider.generate(&request, &cancel)).await.expect("turn");
        streamed.push(t0.elapsed());
        black_box(r);
        let t0 = Instant::now();
        let bytes = raw
            .post(format!("{base}/chat/completions"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .expect("raw")
            .bytes()
            .await
            .expect("raw body");
        bare.push(t0.elapsed());
        black_box(bytes);
    }
    let us = |v: Vec<Duration>| median(v.into_iter().map(|d| d.as_secs_f64() * 1e6).collect());
    let (s, b) = (us(streamed), us(bare));
    emit("turn-streamed", s, "µs");
    emit("turn-raw-http", b, "µs");
    emit("turn-overhead", s - b, "µs");
}

fn main() {
    // reqwest is built without a default TLS provider; the bench's bare client needs one installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let one = chat_stream(1000);
    let mut big = String::with_capacity(8 << 20);
    while big.len() < (8 << 20) {
        big.push_str(&one);
    }
    emit("sse-parse-4k", sse_parse(big.as_bytes(), 4096), "MB/s");
    emit("sse-parse-64k", sse_parse(big.as_bytes(), 64 * 1024), "MB/s");

    // Parser plus assembly, through the public streaming path, measured on one long stream.
    let stream = chat_stream(50_000);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let base = serve(Bytes::from(stream.clone())).await;
        let provider = Provider::builder(Api::OpenAiChat, "m").base_url(base).build().expect("provider");
        let request = request("hi");
        let reps = if quick() { 3 } else { 9 };
        let mut rates = Vec::new();
        for _ in 0..reps {
            let t0 = Instant::now();
            let r = provider.generate(&request, &CancellationToken::new()).await.expect("turn");
            rates.push(stream.len() as f64 / t0.elapsed().as_secs_f64() / 1e6);
            black_box(r);
        }
        emit("sse-assemble-chat", median(rates), "MB/s");
        turns(chat_stream(200)).await;
        event_costs().await;
    });
}
