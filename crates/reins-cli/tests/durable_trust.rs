//! Who a worker obeys: its operator, never its caller. A `reins worker` runs only the agents its operator gave
//! it (`--agent NAME=FILE`, `--agents DIR`); a turn names one and may override only what cannot start a
//! program or widen a workspace. Neither a direct HTTP/2 call to the worker's port (speaking Restate's service
//! protocol) nor a rogue restate-server that registers the worker can make it start a program: each attempt
//! would `touch` a marker file, and the marker never appears. A non-loopback `--listen` without
//! `--identity-key` is refused unless `--insecure` says so.

#[path = "durable/support.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use reins::Status;
use reins_restate::client::{Client, ClientError};
use serde_json::{Value, json};
use support::*;

/// An agent definition (JSON) whose MCP server is a program that creates `marker`.
fn evil_def(marker: &Path, model_url: &str) -> Value {
    json!({
        "model": "openai-chat:test",
        "provider": {"base_url": model_url, "stream": false},
        "mcp": {"evil": {"command": "sh", "args": ["-c", format!("touch {}", marker.display())]}},
    })
}

/// A worker serving the test agent under the name `test`.
fn worker(dir: &Dir, agent: &Path) -> Worker {
    Worker::start_with(free_port(), dir.path("worker.log"), &["--agent", &format!("test={}", agent.display())])
}

// ---- Restate's service protocol, by hand: enough to invoke a handler directly. ----

fn varint(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn bytes_field(tag: u64, data: &[u8], out: &mut Vec<u8>) {
    varint(tag << 3 | 2, out);
    varint(data.len() as u64, out);
    out.extend_from_slice(data);
}

fn varint_field(tag: u64, n: u64, out: &mut Vec<u8>) {
    varint(tag << 3, out);
    varint(n, out);
}

/// One message: its 8-byte header (type in the top 16 bits, length in the low 32) and its protobuf body.
fn frame(ty: u16, body: &[u8], out: &mut Vec<u8>) {
    let header = (u64::from(ty) << 48) | body.len() as u64;
    out.extend_from_slice(&header.to_be_bytes());
    out.extend_from_slice(body);
}

/// A StartMessage (session `key`, the whole state given) and the InputCommand carrying `input`.
fn invocation(key: &str, state: &[(&str, Value)], input: &Value) -> Vec<u8> {
    let mut start = Vec::new();
    bytes_field(1, b"0123456789abcdef", &mut start);
    bytes_field(2, b"inc_direct_call", &mut start);
    varint_field(3, 1, &mut start);
    for (k, v) in state {
        let mut entry = Vec::new();
        bytes_field(1, k.as_bytes(), &mut entry);
        bytes_field(2, v.to_string().as_bytes(), &mut entry);
        bytes_field(4, &entry, &mut start);
    }
    bytes_field(6, key.as_bytes(), &mut start);
    let mut value = Vec::new();
    bytes_field(1, input.to_string().as_bytes(), &mut value);
    let mut command = Vec::new();
    bytes_field(14, &value, &mut command);
    let mut body = Vec::new();
    frame(0x0000, &start, &mut body);
    frame(0x0400, &command, &mut body);
    body
}

/// POSTs an invocation of `ReinsSession/turn` straight to the worker (HTTP/2, prior knowledge), as anyone who
/// reaches its port can; returns the status and the body (the protocol's messages, with any error text).
fn direct_turn(port: u16, key: &str, state: &[(&str, Value)], input: &Value) -> (u16, String) {
    let body = invocation(key, state, input);
    runtime().block_on(async move {
        let client: hyper_util::client::legacy::Client<_, Full<Bytes>> =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(true)
                .build(hyper_util::client::legacy::connect::HttpConnector::new());
        let req = hyper::Request::post(format!("http://127.0.0.1:{port}/invoke/ReinsSession/turn"))
            .header("content-type", "application/vnd.restate.invocation.v5")
            .header("accept", "application/vnd.restate.invocation.v5")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(60), client.request(req)).await.unwrap().unwrap();
        let status = resp.status().as_u16();
        let body = tokio::time::timeout(Duration::from_secs(60), resp.into_body().collect())
            .await
            .unwrap()
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        (status, String::from_utf8_lossy(&body).into_owned())
    })
}

/// What a direct call tries: its name, the session's state it sends, its input, and the refusal expected.
type Case<'a> = (&'a str, Vec<(&'a str, Value)>, Value, &'a str);

#[test]
fn a_direct_call_to_the_worker_port_cannot_make_it_start_a_program() {
    let dir = Dir::new("trust-direct");
    let model = ModelServer::start();
    let agent = agent_file(&dir.0, &model.url);
    let w = worker(&dir, &agent);
    let marker = dir.path("marker");
    let evil = evil_def(&marker, &model.url);
    let cases: Vec<Case> = vec![
        // A definition sent with the turn, as older clients sent it.
        (
            "a definition in the turn",
            vec![],
            json!({"run_id": "r1", "prompt": "hi", "agent": evil}),
            "not a definition",
        ),
        // A definition smuggled in the session's state (Restate sends the state with the invocation).
        (
            "a definition in the session's state",
            vec![("agent", evil.clone())],
            json!({"run_id": "r2", "prompt": "hi"}),
            "recorded agent",
        ),
        // Overrides that would add a program.
        (
            "an MCP server in the overrides",
            vec![],
            json!({"run_id": "r3", "prompt": "hi", "agent": "test", "overrides": {"mcp": evil["mcp"]}}),
            "unknown field `mcp`",
        ),
        (
            "a preset in the overrides",
            vec![],
            json!({"run_id": "r4", "prompt": "hi", "overrides": {"presets": [{"name": "x", "program": "sh"}]}}),
            "unknown field `presets`",
        ),
        // An agent its operator did not give it.
        ("an unknown agent", vec![], json!({"run_id": "r5", "prompt": "hi", "agent": "other"}), "no agent named"),
    ];
    for (what, state, input, expected) in cases {
        let (status, body) = direct_turn(w.port, "s-direct", &state, &input);
        assert!(!marker.exists(), "{what}: the worker started the caller's program ({status} {body})");
        assert!(body.contains(expected), "{what}: {status} {body:?}");
    }
    // The marker is what the attack would have made: the same program, run by hand, makes it.
    assert!(
        std::process::Command::new("sh")
            .args(["-c", &format!("touch {}", marker.display())])
            .status()
            .unwrap()
            .success()
    );
    assert!(marker.exists());
}

/// Sets the state `key` of session `session` through a Restate server's admin API (as its operator can).
fn set_state(r: &Restate, session: &str, key: &str, value: &Value) {
    let bytes: Vec<u8> = value.to_string().into_bytes();
    let (status, body) = http_post(
        &format!("{}/services/ReinsSession/state", r.admin),
        &json!({"object_key": session, "new_state": {key: bytes}}),
    )
    .unwrap();
    assert!((200..300).contains(&status), "{status} {body}");
}

/// Submits a raw turn (any JSON) to `session` through a Restate server's ingress and waits for its end.
fn raw_turn(r: &Restate, session: &str, input: &Value) -> Result<reins::Outcome, ClientError> {
    let run = input["run_id"].as_str().unwrap().to_owned();
    let url = format!("{}/ReinsSession/{session}/turn/send", r.ingress);
    let (status, body) = runtime()
        .block_on(async {
            let resp =
                reqwest::Client::new().post(&url).header("idempotency-key", &run).json(input).send().await.ok()?;
            Some((resp.status().as_u16(), resp.text().await.ok()?))
        })
        .unwrap();
    assert!((200..300).contains(&status), "{status} {body}");
    runtime().block_on(Client::new(&r.ingress, &r.admin).wait(session, &run))
}

#[test]
fn a_rogue_restate_server_cannot_make_a_default_worker_start_a_program_and_the_allowed_agent_still_runs() {
    let dir = Dir::new("trust-rogue");
    let model = ModelServer::start();
    let agent = agent_file(&dir.0, &model.url);
    let w = worker(&dir, &agent);
    let marker = dir.path("marker");
    let evil = evil_def(&marker, &model.url);
    // Anyone can start a restate-server and register a worker that has no identity key.
    let rogue = Restate::start();
    rogue.register(&w.uri());
    let refused = |what: &str, result: Result<reins::Outcome, ClientError>, expected: &str| {
        assert!(!marker.exists(), "{what}: the worker started the caller's program");
        match result {
            Err(ClientError::Failed(m)) => assert!(m.contains(expected), "{what}: {m}"),
            other => panic!("{what}: {other:?}"),
        }
    };
    refused(
        "a definition in the turn",
        raw_turn(&rogue, "s1", &json!({"run_id": "r1", "prompt": "hi", "agent": evil})),
        "not a definition",
    );
    refused(
        "an MCP server in the overrides",
        raw_turn(&rogue, "s2", &json!({"run_id": "r2", "prompt": "hi", "overrides": {"mcp": evil["mcp"]}})),
        "unknown field `mcp`",
    );
    refused(
        "a hook in the overrides",
        raw_turn(
            &rogue,
            "s3",
            &json!({"run_id": "r3", "prompt": "hi", "overrides": {"hooks": [{"event": "pre_tool", "command": ["sh"]}]}}),
        ),
        "unknown field `hooks`",
    );
    refused(
        "an unknown agent",
        raw_turn(&rogue, "s4", &json!({"run_id": "r4", "prompt": "hi", "agent": "other"})),
        "no agent named \"other\"",
    );
    // The server's operator writes a definition into the session's state, then a turn names no agent.
    set_state(&rogue, "s5", "agent", &evil);
    refused(
        "a definition in the state",
        raw_turn(&rogue, "s5", &json!({"run_id": "r5", "prompt": "hi"})),
        "recorded agent",
    );

    // The operator's agent still runs, by name or as the default, and a turn's overrides only tighten it.
    let by_name = raw_turn(&rogue, "s6", &json!({"run_id": "r6", "prompt": "tools 1 1", "agent": "test"})).unwrap();
    assert_eq!(by_name.status, Status::Completed, "{:?}", by_name.error);
    let tighter = raw_turn(
        &rogue,
        "s7",
        &json!({"run_id": "r7", "prompt": "tools 3 1", "overrides": {"limits": {"max_steps": 2}}}),
    )
    .unwrap();
    assert_eq!(tighter.status, Status::StepLimit, "{:?}", tighter.error);
    assert_eq!(tighter.steps, 2);
    assert!(!marker.exists());
}

fn reins_worker(args: &[&str]) -> std::process::Output {
    reins().arg("worker").args(args).output().unwrap()
}

#[test]
fn a_worker_needs_an_agent_and_refuses_a_public_address_without_an_identity_key() {
    let dir = Dir::new("trust-flags");
    let agent = agent_file(&dir.0, "http://127.0.0.1:9/v1");
    let allowed = format!("test={}", agent.display());
    // No agent: nothing to run.
    let out = reins_worker(&["--listen", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--agent NAME=FILE"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A public address without an identity key: refused, saying why and what --insecure means.
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let out = reins_worker(&["--listen", listen, "--agent", &allowed]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("not a loopback address") && err.contains("--identity-key") && err.contains("--insecure"),
            "{err}"
        );
    }
    // A bad agent file is refused before the worker listens, naming the key.
    let bad = dir.path("bad.toml");
    std::fs::write(&bad, "model = \"openai-chat:x\"\n[limits]\nmax_steps = 0\n").unwrap();
    let out = reins_worker(&["--listen", "127.0.0.1:0", "--agent", &format!("bad={}", bad.display())]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("limits.max_steps"), "{err}");
    // A name that is not one, and a file that is missing.
    for spec in ["a/b=x.toml".to_owned(), format!("x={}", dir.path("missing.toml").display())] {
        let out = reins_worker(&["--listen", "127.0.0.1:0", "--agent", &spec]);
        assert_eq!(out.status.code(), Some(2), "{spec}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // With --insecure it serves on a public address (and says what that means).
    let port = free_port();
    let log = dir.path("insecure.log");
    let mut child = reins()
        .args(["worker", "--listen", &format!("0.0.0.0:{port}"), "--insecure", "--agent", &allowed])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "{}", std::fs::read_to_string(&log).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(std::fs::read_to_string(&log).unwrap().contains("insecure"));
}

#[test]
fn an_agents_directory_names_its_agents_by_file_and_submit_names_one() {
    let dir = Dir::new("trust-dir");
    let model = ModelServer::start();
    let agent = agent_file(&dir.0, &model.url);
    let agents: PathBuf = dir.path("agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::copy(&agent, agents.join("coder.toml")).unwrap();
    std::fs::copy(&agent, agents.join("default.toml")).unwrap();
    let restate = Restate::start();
    let w = Worker::start_with(free_port(), dir.path("worker.log"), &["--agents", agents.to_str().unwrap()]);
    restate.register(&w.uri());
    let flags = ["--restate", &restate.ingress, "--restate-admin", &restate.admin];
    let out = reins().arg("submit").args(flags).args(["--agent", "coder", "--wait", "tools 1 1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // No --agent: the worker's default (`default.toml`); --max-steps tightens it.
    let out = reins().arg("submit").args(flags).args(["--max-steps", "1", "--wait", "tools 2 1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    // A file where a name belongs: refused before anything is sent, saying what changed.
    let out = reins().arg("submit").args(flags).arg("--agent").arg(&agent).arg("hi").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("reins worker --agent NAME=FILE"), "{err}");
}
