//! Providers by name on the command line (issue 24, item 4): `reins run --model ollama:…`, `azure:…`, `groq:…`
//! against a real HTTP server on 127.0.0.1 that captures the path, the headers and the body; the base URL and key
//! from each service's own variables (`OLLAMA_HOST`, `AZURE_OPENAI_ENDPOINT` + `AZURE_OPENAI_API_KEY`,
//! `GROQ_API_KEY`); `[provider] api_key_env`; a missing key's message; a default model in the user config;
//! `--temperature`; `reins models` (the price table, and a local server's own list).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Output;
use std::sync::mpsc;
use std::thread;

use serde_json::{Value, json};

mod common;

/// A request as the server saw it.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

fn fixture(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-providers/tests/fixtures").join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("fixture {}: {e}", p.display()))
}

/// Serves each request on 127.0.0.1 with `body` (JSON) and sends what it saw; the server's `host:port`.
fn serve(body: String) -> (String, mpsc::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut headers = Vec::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() || line.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    headers.push((k.trim().to_owned(), v.trim().to_owned()));
                }
            }
            let mut buf = vec![0; length];
            let _ = reader.read_exact(&mut buf);
            let mut parts = request_line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_owned();
            let path = parts.next().unwrap_or_default().to_owned();
            let body_seen = serde_json::from_slice(&buf).unwrap_or(Value::Null);
            let _ = tx.send(Seen { method, path, headers, body: body_seen });
            let mut stream = stream;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
        }
    });
    (addr.to_string(), rx)
}

const KEY_VARS: &[&str] = &[
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GROQ_API_KEY",
    "OPENROUTER_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "AZURE_OPENAI_ENDPOINT",
    "OLLAMA_HOST",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
];

fn reins(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = common::reins();
    cmd.args(args);
    for k in KEY_VARS {
        cmd.env_remove(k);
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("run reins")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn ollama_takes_its_address_from_ollama_host_and_sends_no_key() {
    let (addr, got) = serve(fixture("openai_chat/text.json"));
    let out = reins(
        &["run", "--model", "ollama:qwen3:8b", "--temperature", "0.3", "What is the capital of France?"],
        &[("OLLAMA_HOST", &addr)],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let seen = got.recv().unwrap();
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!(seen.header("authorization"), None);
    assert_eq!(seen.body["model"], "qwen3:8b");
    assert_eq!(seen.body["temperature"], 0.3);
    assert_eq!(seen.body["messages"][0]["content"], "What is the capital of France?");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Paris"));
}

#[test]
fn azure_uses_the_v1_api_at_its_endpoint_with_the_api_key_header() {
    let (addr, got) = serve(fixture("openai_responses/text.json"));
    let endpoint = format!("http://{addr}/");
    let out = reins(
        &["run", "--model", "azure:my-gpt-deployment", "hi"],
        &[("AZURE_OPENAI_ENDPOINT", &endpoint), ("AZURE_OPENAI_API_KEY", "azure-secret")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let seen = got.recv().unwrap();
    assert_eq!(seen.path, "/openai/v1/responses");
    assert_eq!(seen.header("api-key"), Some("azure-secret"));
    assert_eq!(seen.header("authorization"), None);
    assert_eq!(seen.body["model"], "my-gpt-deployment");
}

#[test]
fn groq_reads_groq_api_key_and_base_url_overrides_its_address() {
    let (addr, got) = serve(fixture("openai_chat/text.json"));
    let out = reins(
        &["run", "--model", "groq:llama-3.3-70b-versatile", "--base-url", &format!("http://{addr}/openai/v1"), "hi"],
        &[("GROQ_API_KEY", "gsk-test")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let seen = got.recv().unwrap();
    assert_eq!(seen.path, "/openai/v1/chat/completions");
    assert_eq!(seen.header("authorization"), Some("Bearer gsk-test"));
    assert_eq!(seen.body["model"], "llama-3.3-70b-versatile");
}

#[test]
fn api_key_env_names_any_other_variable() {
    let (addr, got) = serve(fixture("openai_chat/text.json"));
    let dir = common::Dir::new("named-api-key-env");
    let agent = dir.file(
        "agent.toml",
        &format!("model = \"openrouter:openai/gpt-4o-mini\"\n[provider]\nbase_url = \"http://{addr}/api/v1\"\napi_key_env = \"MY_GATEWAY_KEY\"\n"),
    );
    let out = reins(
        &["run", "--agent", agent.to_str().unwrap(), "hi"],
        &[("MY_GATEWAY_KEY", "gw-secret"), ("OPENROUTER_API_KEY", "not-this-one")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let seen = got.recv().unwrap();
    assert_eq!(seen.path, "/api/v1/chat/completions");
    assert_eq!(seen.header("authorization"), Some("Bearer gw-secret"));
    // The table prices a vendor/ name by its last part.
    assert!(stderr(&out).contains("gpt-4o-mini list prices"), "{}", stderr(&out));
}

#[test]
fn a_missing_key_names_the_variable_to_set() {
    let out = reins(&["run", "--model", "groq:llama-3.3-70b-versatile", "hi"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("set GROQ_API_KEY"), "{}", stderr(&out));
    let dir = common::Dir::new("named-missing-key");
    let agent =
        dir.file("agent.toml", "model = \"deepseek:deepseek-chat\"\n[provider]\napi_key_env = \"MY_UNSET_KEY\"\n");
    let out = reins(&["run", "--agent", agent.to_str().unwrap(), "hi"], &[("DEEPSEEK_API_KEY", "not-this-one")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("set MY_UNSET_KEY"), "{}", stderr(&out));
    let out = reins(&["run", "--model", "azure:dep", "hi"], &[("AZURE_OPENAI_API_KEY", "k")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("AZURE_OPENAI_ENDPOINT"), "{}", stderr(&out));
}

#[test]
fn the_user_configs_model_is_the_default_and_the_session_records_the_spec_as_written() {
    let (addr, got) = serve(fixture("openai_chat/text.json"));
    let dir = common::Dir::new("named-default-model");
    std::fs::create_dir_all(dir.0.join("reins")).unwrap();
    dir.file("reins/config.toml", "model = \"ollama:qwen3\"\n");
    let store = dir.store();
    let mut cmd = common::reins();
    for k in KEY_VARS {
        cmd.env_remove(k);
    }
    let out = cmd
        .args(["run", "--store", store.to_str().unwrap(), "--json", "--events-content", "hi"])
        .env("XDG_CONFIG_HOME", &dir.0)
        .env("OLLAMA_HOST", &addr)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(got.recv().unwrap().body["model"], "qwen3");
    let out = reins(&["sessions", "list", "--store", store.to_str().unwrap(), "--json"], &[]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .flat_map(|v| if v.is_array() { v.as_array().cloned().unwrap_or_default() } else { vec![v] })
        .find_map(|v| v["id"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no session in {text}"));
    let out = reins(&["sessions", "show", &id, "--store", store.to_str().unwrap(), "--json"], &[]);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["agent"]["model"], "ollama:qwen3", "{shown}");
}

#[test]
fn models_lists_the_price_tables_models_and_prices() {
    let out = reins(&["models"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for want in ["ollama", "OLLAMA_HOST", "GROQ_API_KEY", "AZURE_OPENAI_API_KEY", "gpt-4o-mini", "claude-sonnet-4"] {
        assert!(text.contains(want), "{want} in {text}");
    }
    let out = reins(&["models", "openai", "--json"], &[]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let gpt4o = v["models"].as_array().unwrap().iter().find(|m| m["model"] == "gpt-4o").unwrap();
    let info = reins_providers::model_info("gpt-4o").unwrap();
    assert_eq!(gpt4o["context_window"], info.context_window);
    assert_eq!(gpt4o["max_output_tokens"], info.max_output_tokens);
    assert_eq!(gpt4o["price_per_mtok"]["input"], info.price.input_per_mtok);
    assert_eq!(gpt4o["price_per_mtok"]["output"], info.price.output_per_mtok);
    assert!(v["models"].as_array().unwrap().iter().all(|m| !m["model"].as_str().unwrap().starts_with("claude")));
    assert!(v["models"].as_array().unwrap().iter().all(|m| !m["model"].as_str().unwrap().starts_with("gemini")));
    // Gemini's models under gemini:, its key set when GOOGLE_API_KEY stands in for GEMINI_API_KEY.
    let out = reins(&["models", "gemini", "--json"], &[("GOOGLE_API_KEY", "AIza-test")]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((&v["provider"]["key_env"], &v["provider"]["key_set"]), (&json!("GEMINI_API_KEY"), &json!(true)), "{v}");
    let models: Vec<&str> = v["models"].as_array().unwrap().iter().map(|m| m["model"].as_str().unwrap()).collect();
    assert!(models.contains(&"gemini-2.5-flash") && models.iter().all(|m| m.starts_with("gemini")), "{models:?}");
    let out = reins(&["models", "nowhere"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("ollama"), "{}", stderr(&out));
}

#[test]
fn models_of_a_local_server_are_the_ones_it_serves() {
    let (addr, got) = serve(r#"{"object":"list","data":[{"id":"qwen3:8b"},{"id":"gpt-4o-mini"}]}"#.to_owned());
    let out = reins(&["models", "ollama"], &[("OLLAMA_HOST", &addr)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let seen = got.recv().unwrap();
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("GET", "/v1/models"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("qwen3:8b") && text.contains("not in the price table"), "{text}");
    assert!(text.contains("gpt-4o-mini") && text.contains("$0.15"), "{text}");
    // Nothing listening: a clear failure naming the server.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let out = reins(&["models", "llamacpp", "--base-url", &format!("http://{closed}/v1")], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("is llamacpp running?"), "{}", stderr(&out));
}

#[test]
fn a_step_a_fallback_answered_names_it_in_the_events_and_the_session() {
    // The first model's address refuses connections; the second answers.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let (addr, got) = serve(fixture("openai_responses/text.json"));
    let dir = common::Dir::new("named-fallback-answered");
    let agent =
        dir.file("agent.toml", "model = [\"ollama:qwen3\", \"azure:gpt-4o-mini\"]\n[provider]\nmax_retries = 0\n");
    let store = dir.store();
    let endpoint = format!("http://{addr}/");
    let envs = [("OLLAMA_HOST", closed.as_str()), ("AZURE_OPENAI_ENDPOINT", &endpoint), ("AZURE_OPENAI_API_KEY", "k")];
    let (agent, store) = (agent.to_str().unwrap(), store.to_str().unwrap());
    // The progress lines name it too.
    let out = reins(&["run", "--agent", agent, "--store", store, "hi"], &envs);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("step 1 · model (azure:gpt-4o-mini) "), "{}", stderr(&out));
    let out = reins(&["run", "--agent", agent, "--store", store, "--json", "hi"], &envs);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(got.recv().unwrap().path, "/openai/v1/responses");
    assert_eq!(got.recv().unwrap().path, "/openai/v1/responses");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let end = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "model_end")
        .unwrap_or_else(|| panic!("no model_end in {stdout}"));
    // Named as written in the agent file.
    let model = end["model"].as_str().unwrap_or_else(|| panic!("no model in {end}"));
    assert_eq!(model, "azure:gpt-4o-mini", "{end}");
    let out = reins(&["sessions", "list", "--store", store, "--json"], &[]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .flat_map(|v| if v.is_array() { v.as_array().cloned().unwrap_or_default() } else { vec![v] })
        .find_map(|v| v["id"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no session in {text}"));
    let out = reins(&["sessions", "show", &id, "--store", store], &[]);
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(shown.contains(&format!("answered by {model} (fallback)")), "{shown}");
}
