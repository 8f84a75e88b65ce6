//! Providers by name (issue 24, item 4): each row of the `PROVIDERS` table against a real HTTP server on
//! 127.0.0.1 standing in for the service at the path the table gives, checking the path, the key header and the
//! body; the key variable a missing key names; and `served_models` (a local server's `GET /v1/models`).

mod common;

use std::time::Duration;

use common::{Reply, Server, text_reply};
use reins_providers::{Api, PROVIDERS, ProviderError, named_provider, served_models};
use tokio_util::sync::CancellationToken;

/// The base URL the table gives `p`, moved to the test server (same path), and that path.
fn moved_base(p: &reins_providers::NamedProvider, server: &Server) -> (String, String) {
    let table = p.base_url.unwrap_or("https://resource.openai.azure.com/openai/v1");
    let path = reqwest::Url::parse(table).unwrap().path().trim_end_matches('/').to_owned();
    (server.url(&path), path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_named_provider_sends_its_path_key_header_and_body() {
    for p in PROVIDERS {
        let server = Server::start(vec![text_reply(p.api, false)]).await;
        let (base, path) = moved_base(p, &server);
        let key = format!("key-of-{}", p.name);
        let mut b = p.builder("test-model").base_url(base).stream(false);
        if !p.local {
            b = b.api_key(Some(key.clone()));
        }
        let model = b.build().unwrap_or_else(|e| panic!("{}: {e}", p.name));
        let agent = reins::Agent::builder(model).build().unwrap();
        let outcome = agent.run("Say hi", CancellationToken::new()).await;
        assert!(outcome.answer.as_deref().is_some_and(|a| !a.is_empty()), "{}: {outcome:?}", p.name);
        let got = server.requests();
        assert_eq!(got.len(), 1, "{}", p.name);
        let r = &got[0];
        let want_path = match p.api {
            Api::OpenAiChat => format!("{path}/chat/completions"),
            Api::OpenAiResponses => format!("{path}/responses"),
            Api::Anthropic => format!("{path}/v1/messages"),
            Api::Gemini => format!("{path}/v1beta/models/test-model:generateContent"),
            Api::Bedrock => format!("{path}/model/test-model/converse"),
        };
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", want_path.as_str()), "{}", p.name);
        match (p.name, p.local) {
            ("azure", _) => {
                assert_eq!(r.header("api-key"), Some(key.as_str()));
                assert_eq!(r.header("authorization"), None);
            }
            ("anthropic", _) => assert_eq!(r.header("x-api-key"), Some(key.as_str())),
            ("gemini", _) => {
                assert_eq!(r.header("x-goog-api-key"), Some(key.as_str()));
                assert_eq!(r.header("authorization"), None);
            }
            (_, true) => assert_eq!(r.header("authorization"), None, "{}", p.name),
            (_, false) => assert_eq!(r.header("authorization"), Some(format!("Bearer {key}").as_str()), "{}", p.name),
        }
        let body = r.json();
        if !matches!(p.api, Api::Gemini | Api::Bedrock) {
            assert_eq!(body["model"], "test-model", "{}", p.name);
        }
        let said = match p.api {
            Api::OpenAiChat => body["messages"][0]["content"].clone(),
            Api::OpenAiResponses => body["input"][0]["content"].clone(),
            Api::Anthropic => body["messages"][0]["content"].clone(),
            Api::Gemini => body["contents"][0]["parts"][0]["text"].clone(),
            Api::Bedrock => body["messages"][0]["content"][0]["text"].clone(),
        };
        assert!(said.to_string().contains("Say hi"), "{}: {body}", p.name);
        // Compatible servers read `max_tokens`; only OpenAI's own endpoint gets `max_completion_tokens`.
        if p.api == Api::OpenAiChat {
            assert!(body.get("max_completion_tokens").is_none(), "{}: {body}", p.name);
        }
    }
}

#[test]
fn a_missing_key_names_the_providers_variable_or_the_one_configured() {
    let groq = named_provider("groq").unwrap();
    if std::env::var_os("GROQ_API_KEY").is_none() {
        let e = groq.builder("m").api_key_from_env().build().unwrap_err();
        assert_eq!(e, ProviderError::MissingApiKey { env: "GROQ_API_KEY".into() });
        assert!(e.to_string().contains("set GROQ_API_KEY"), "{e}");
    }
    let e = groq.builder("m").api_key_env("REINS_TEST_UNSET_GATEWAY_KEY").api_key_from_env().build().unwrap_err();
    assert_eq!(e, ProviderError::MissingApiKey { env: "REINS_TEST_UNSET_GATEWAY_KEY".into() });
    // A local server needs none, wherever it runs; a hosted one pointed at loopback needs none either.
    let ollama = named_provider("ollama").unwrap();
    assert!(ollama.builder("m").base_url("http://gpu-box.example:11434/v1").api_key_from_env().build().is_ok());
    assert!(groq.builder("m").base_url("http://127.0.0.1:9/openai/v1").build().is_ok());
    // Azure has no address of its own: without AZURE_OPENAI_ENDPOINT or a base URL it says which to set.
    if std::env::var_os("AZURE_OPENAI_ENDPOINT").is_none() {
        let e = named_provider("azure").unwrap().builder("dep").api_key(Some("k".into())).build().unwrap_err();
        assert!(e.to_string().contains("AZURE_OPENAI_ENDPOINT"), "{e}");
    }
}

#[test]
fn named_providers_keep_their_identity() {
    use reins::Model;
    let named = |name: &str| {
        named_provider(name).unwrap().builder("m").base_url("http://127.0.0.1:9/v1").build().unwrap().identity()
    };
    assert_eq!(named("groq").provider.as_deref(), Some("groq"));
    assert_eq!(named("azure").provider.as_deref(), Some("azure.ai.openai"));
    assert_eq!(named("openai-chat").provider.as_deref(), Some("openai"));
    assert_eq!(named("ollama").provider.as_deref(), Some("ollama"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_models_lists_ids_and_refuses_redirects_and_bad_answers() {
    let server = Server::start(vec![
        Reply::json(200, r#"{"object":"list","data":[{"id":"qwen3:8b","object":"model"},{"id":"gpt-4o-mini"}]}"#),
        Reply::json(302, "").header("location", "http://elsewhere.example/v1/models"),
        Reply::json(200, r#"{"models":[]}"#),
    ])
    .await;
    let base = server.url("/v1");
    let t = Duration::from_secs(10);
    assert_eq!(served_models(&base, None, t).await.unwrap(), vec!["qwen3:8b".to_owned(), "gpt-4o-mini".to_owned()]);
    let e = served_models(&base, None, t).await.unwrap_err();
    assert!(e.to_string().contains("302"), "{e}");
    let e = served_models(&base, Some("k"), t).await.unwrap_err();
    assert!(e.to_string().contains("no `data` list"), "{e}");
    let got = server.requests();
    assert_eq!(got.len(), 3, "the redirect was not followed");
    assert!(got.iter().all(|r| r.method == "GET" && r.path == "/v1/models"));
    assert_eq!(got[2].header("authorization"), Some("Bearer k"));
}
