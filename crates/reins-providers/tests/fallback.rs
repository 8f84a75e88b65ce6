//! Fallback between models against real HTTP servers on 127.0.0.1: which failures fall over to the next
//! model, that a step whose output streamed does not, and the cool-down.

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use common::{Reply, Server, Step, dir, fixture};
use reins::{Conversation, Delta, DeltaSink, Message, Model, ModelError, ModelRequest};
use reins_providers::{Api, FallbackModel, Provider, RetryPolicy};
use tokio_util::sync::CancellationToken;

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 1,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(10),
        max_retry_after: Duration::from_secs(1),
    }
}

fn provider(api: Api, url: String, stream: bool, retry: RetryPolicy) -> Arc<dyn Model> {
    let url = if api == Api::Anthropic { url } else { format!("{url}/v1") };
    let p = Provider::builder(api, "test-model")
        .base_url(url)
        .api_key(Some("sk-test".into()))
        .stream(stream)
        .retry(retry)
        .build()
        .unwrap();
    Arc::new(p)
}

/// A Chat Completions model at `url` with no retries, priced at `price` when given.
fn chat_model(url: String, price: Option<reins::Price>) -> Arc<dyn Model> {
    let builder = Provider::builder(Api::OpenAiChat, "test-model")
        .base_url(format!("{url}/v1"))
        .api_key(Some("sk-test".into()))
        .retry(RetryPolicy::none());
    let builder = match price {
        Some(p) => builder.price(p),
        None => builder,
    };
    Arc::new(builder.build().unwrap())
}

fn request() -> ModelRequest {
    ModelRequest {
        instructions: None,
        messages: Conversation::from_messages(vec![Message::user("Hello")]),
        tools: Arc::from(Vec::new()),
        cache_key: None,
    }
}

fn second_text() -> String {
    let v: serde_json::Value = serde_json::from_str(&fixture("openai_chat/text.json")).unwrap();
    v["choices"][0]["message"]["content"].as_str().unwrap().to_owned()
}

/// A listener that answers its first connection's requests 503 and, once that connection is done,
/// closes: from then on its address refuses connections.
async fn answers_503_then_refuses() -> (String, tokio::task::JoinHandle<()>) {
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let Ok((stream, _)) = listener.accept().await else { return };
        drop(listener);
        let service = service_fn(|_req: hyper::Request<hyper::body::Incoming>| async {
            let body = http_body_util::Full::new(hyper::body::Bytes::from_static(
                br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ));
            let r = hyper::Response::builder()
                .status(503)
                .header("content-type", "application/json")
                .header("connection", "close")
                .body(body)
                .unwrap();
            Ok::<_, Infallible>(r)
        });
        let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
    });
    (url, task)
}

#[tokio::test]
async fn a_503_then_refused_connections_fall_over_to_the_second() {
    let (first_url, first) = answers_503_then_refuses().await;
    let second = Server::start(vec![
        Reply::json(200, fixture("openai_chat/text.json")),
        Reply::json(200, fixture("openai_chat/text.json")),
    ])
    .await;
    let models = vec![
        provider(Api::Anthropic, first_url, false, fast_retry()),
        provider(Api::OpenAiChat, second.url(""), false, fast_retry()),
    ];
    // No cool-down: every step asks the first again.
    let fb = FallbackModel::new(models, Duration::ZERO);
    // Step 1: 503, then its retry finds the port closed; the second answers.
    let r = fb.generate(&request(), &CancellationToken::new()).await.unwrap();
    assert_eq!(r.text, second_text());
    first.await.unwrap();
    // Step 2: the first refuses the connection (and its retry too); the second answers again.
    let r = fb.generate(&request(), &CancellationToken::new()).await.unwrap();
    assert_eq!(r.text, second_text());
    assert_eq!(second.requests().len(), 2);
}

#[tokio::test]
async fn a_400_does_not_fall_over() {
    let first = Server::start(vec![Reply::json(
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: bad"}}"#,
    )])
    .await;
    let second = Server::start(vec![Reply::json(200, fixture("openai_chat/text.json"))]).await;
    let models = vec![
        provider(Api::Anthropic, first.url(""), false, fast_retry()),
        provider(Api::OpenAiChat, second.url(""), false, fast_retry()),
    ];
    let fb = FallbackModel::new(models, Duration::ZERO);
    let e = fb.generate(&request(), &CancellationToken::new()).await.unwrap_err();
    assert!(matches!(e, ModelError::Rejected { status: 400, .. }), "{e:?}");
    assert_eq!(second.requests().len(), 0, "the second model was asked");
    assert!(!reins_providers::falls_over(&ModelError::Unauthorized { status: 401, message: String::new() }));
    assert!(!reins_providers::falls_over(&ModelError::ContextOverflow(String::new())));
}

#[tokio::test]
async fn a_step_whose_output_streamed_does_not_fall_over() {
    let text = fixture(&format!("{}/text.sse", dir(Api::Anthropic)));
    let half = text.len() / 2;
    let cut = Reply::sse(vec![
        Step::Bytes(text.as_bytes()[..half].to_vec()),
        Step::Sleep(Duration::from_millis(20)),
        Step::Cut,
    ]);
    let first = Server::start(vec![cut]).await;
    let second = Server::start(vec![Reply::json(200, fixture("openai_chat/text.json"))]).await;
    let models = vec![
        provider(Api::Anthropic, first.url(""), true, RetryPolicy::none()),
        provider(Api::OpenAiChat, second.url(""), false, fast_retry()),
    ];
    let fb = FallbackModel::new(models, Duration::ZERO);
    let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
    let h = heard.clone();
    let sink = DeltaSink::new(move |d: &Delta| h.lock().unwrap().push(d.clone()));
    let cancel = CancellationToken::new();
    let e = sink.scope(fb.generate(&request(), &cancel)).await.unwrap_err();
    assert!(matches!(e, ModelError::Failed(_)), "{e:?}");
    assert!(heard.lock().unwrap().iter().any(|d| !matches!(d, Delta::Restart { .. })), "the caller heard the output");
    assert_eq!(second.requests().len(), 0, "the second model was asked after output streamed");
}

#[tokio::test]
async fn a_failed_model_is_skipped_while_cooling_down_and_asked_after() {
    let first = Server::answering(|_| Reply::json(503, r#"{"error":{"message":"unavailable"}}"#)).await;
    let second = Server::answering(|_| Reply::json(200, fixture("openai_chat/text.json"))).await;
    let models = || {
        vec![
            provider(Api::OpenAiChat, first.url(""), false, RetryPolicy::none()),
            provider(Api::OpenAiChat, second.url(""), false, RetryPolicy::none()),
        ]
    };
    // A long cool-down: after the first step the first model is not asked.
    let fb = FallbackModel::new(models(), Duration::from_secs(3600));
    for _ in 0..3 {
        fb.generate(&request(), &CancellationToken::new()).await.unwrap();
    }
    assert_eq!(first.requests().len(), 1, "asked while cooling down");
    assert_eq!(second.requests().len(), 3);
    // A short one: once it is over, the first is asked again.
    let fb = FallbackModel::new(models(), Duration::from_millis(20));
    fb.generate(&request(), &CancellationToken::new()).await.unwrap();
    assert_eq!(first.requests().len(), 2);
    tokio::time::sleep(Duration::from_millis(40)).await;
    fb.generate(&request(), &CancellationToken::new()).await.unwrap();
    assert_eq!(first.requests().len(), 3, "not asked again after the cool-down");
    assert_eq!(second.requests().len(), 5);
}

#[tokio::test]
async fn a_step_the_second_answered_is_named_and_priced_as_the_second() {
    use reins::{Agent, Event, Price, Status};
    let first = Server::answering(|_| Reply::json(503, r#"{"error":{"message":"unavailable"}}"#)).await;
    let second = Server::answering(|_| Reply::json(200, fixture("openai_chat/text.json"))).await;
    let (dear, cheap) = (Price::new(100.0, 400.0), Price::new(1.0, 4.0));
    let second_model = chat_model(second.url(""), Some(cheap));
    let id = second_model.identity();
    let second_name = format!("{}:{}", id.provider.unwrap(), id.model.unwrap());
    let fb = FallbackModel::new(vec![chat_model(first.url(""), Some(dear)), second_model], Duration::ZERO);
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let e = events.clone();
    let agent = Agent::builder(fb)
        .observer(move |ev: &Event| {
            e.lock().unwrap().push(serde_json::from_str::<serde_json::Value>(&ev.to_json()).unwrap());
            Ok(())
        })
        .build()
        .unwrap();
    let outcome = agent.run("Hello", CancellationToken::new()).await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert_eq!((first.requests().len(), second.requests().len()), (1, 1));
    let events = events.lock().unwrap().clone();
    let end = events.iter().find(|e| e["type"] == "model_end").expect("a model_end");
    assert_eq!(end["model"], second_name.as_str(), "{end}");
    let usage: reins::Usage = serde_json::from_value(end["usage"].clone()).unwrap();
    let cost = cheap.cost(&usage);
    assert!(cost > 0.0 && (end["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-12, "{end}");
    assert!((outcome.cost_usd.unwrap() - cost).abs() < 1e-12, "priced as the first: {:?}", outcome.cost_usd);
}

#[tokio::test]
async fn a_step_a_model_of_unknown_price_answered_leaves_the_runs_cost_unknown() {
    use reins::{Agent, Price, Status};
    let first = Server::answering(|_| Reply::json(503, r#"{"error":{"message":"unavailable"}}"#)).await;
    let second = Server::answering(|_| Reply::json(200, fixture("openai_chat/text.json"))).await;
    let models = vec![chat_model(first.url(""), Some(Price::new(1.0, 4.0))), chat_model(second.url(""), None)];
    let agent = Agent::builder(FallbackModel::new(models, Duration::ZERO)).build().unwrap();
    let outcome = agent.run("Hello", CancellationToken::new()).await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert_eq!(second.requests().len(), 1);
    assert_eq!(outcome.cost_usd, None, "a step of unknown price was counted as free");
}

/// A summary call (a compaction) that the second model answered is priced at the second's price, in the
/// run's cost and its `compaction_end`, which names it as `model_end` does.
#[tokio::test]
async fn a_summary_the_second_answered_is_priced_and_named_as_the_second() {
    use reins::{
        Agent, CharCounter, ContextConfig, ContextStrategy, Event, Limits, Price, RunState, Status, Transcript,
    };
    let first = Server::answering(|_| Reply::json(503, r#"{"error":{"message":"unavailable"}}"#)).await;
    let second = Server::answering(|_| Reply::json(200, fixture("openai_chat/text.json"))).await;
    let (dear, cheap) = (Price::new(100.0, 400.0), Price::new(1.0, 4.0));
    let fb = FallbackModel::new(
        vec![chat_model(first.url(""), Some(dear)), chat_model(second.url(""), Some(cheap))],
        Duration::ZERO,
    )
    .named(vec!["first:dear".into(), "second:cheap".into()]);
    // A finished conversation, compacted on request (as `/compact` in a chat): one summary call, no step.
    let c = &CharCounter;
    let mut t = Transcript::new("the task", c);
    for turn in ["one", "two", "three"] {
        t.push_user(turn, c).unwrap();
        t.push_assistant(format!("answer {turn}"), Vec::new(), c).unwrap();
    }
    let ctx =
        ContextConfig { max_context: Some(100_000), strategy: ContextStrategy::Summarize, ..ContextConfig::default() };
    let mut state = RunState::resume("r", t.to_vec(), Limits::default(), &ctx, "x").unwrap();
    state.compact_now(&ctx).unwrap();
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let e = events.clone();
    let agent = Agent::builder(fb)
        .context(ctx)
        .observer(move |ev: &Event| {
            e.lock().unwrap().push(serde_json::from_str::<serde_json::Value>(&ev.to_json()).unwrap());
            Ok(())
        })
        .build()
        .unwrap();
    let outcome = agent.drive(state, CancellationToken::new()).await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert_eq!((outcome.compactions, first.requests().len(), second.requests().len()), (1, 1, 1));
    let events = events.lock().unwrap().clone();
    let end = events.iter().find(|e| e["type"] == "compaction_end").expect("a compaction_end");
    assert!(end.get("fallback").is_none(), "the summary was used: {end}");
    assert_eq!(end["model"], "second:cheap", "{end}");
    let usage: reins::Usage = serde_json::from_value(end["usage"].clone()).unwrap();
    let cost = cheap.cost(&usage);
    assert!(cost > 0.0 && (end["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-12, "{end}");
    assert!((outcome.cost_usd.unwrap() - cost).abs() < 1e-12, "priced as the first: {:?}", outcome.cost_usd);
}

/// The first model of unknown price failing, a step the second (priced) answered gives the run a known cost: its
/// steps' cost (it was left unknown, the run's model having no price).
#[tokio::test]
async fn a_run_a_priced_second_answered_has_a_known_cost_though_the_first_has_no_price() {
    use reins::{Agent, Price, Status};
    let first = Server::answering(|_| Reply::json(503, r#"{"error":{"message":"unavailable"}}"#)).await;
    let second = Server::answering(|_| Reply::json(200, fixture("openai_chat/text.json"))).await;
    let cheap = Price::new(1.0, 4.0);
    let models = vec![chat_model(first.url(""), None), chat_model(second.url(""), Some(cheap))];
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let e = events.clone();
    let agent = Agent::builder(FallbackModel::new(models, Duration::ZERO))
        .observer(move |ev: &reins::Event| {
            e.lock().unwrap().push(serde_json::from_str::<serde_json::Value>(&ev.to_json()).unwrap());
            Ok(())
        })
        .build()
        .unwrap();
    let outcome = agent.run("Hello", CancellationToken::new()).await;
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    assert_eq!((first.requests().len(), second.requests().len()), (1, 1));
    let events = events.lock().unwrap().clone();
    let end = events.iter().find(|e| e["type"] == "model_end").expect("a model_end");
    let usage: reins::Usage = serde_json::from_value(end["usage"].clone()).unwrap();
    let cost = cheap.cost(&usage);
    assert!(cost > 0.0, "{cost}");
    let got = outcome.cost_usd.expect("a known cost");
    assert!((got - cost).abs() < 1e-12, "{got} {cost}");
}
