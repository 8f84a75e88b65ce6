//! OTLP export: the real `reins` binary sends its spans to an in-process OTLP/gRPC collector
//! (`fake-opentelemetry-collector`); a dead collector costs one warning and never the run.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Dir, reins};
use fake_opentelemetry_collector::{ExportedSpan, FakeCollectorServer};
use serde_json::{Value, json};

/// Runs `cmd` off the async runtime (the collector runs on it meanwhile).
async fn output(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap()
}

/// The spans the collector got: `n` of them (it has them all once `reins` has exited: the flush at exit
/// waited for the collector's answer).
async fn spans(server: &mut FakeCollectorServer, n: usize) -> Vec<ExportedSpan> {
    let got = server.exported_spans(n, Duration::from_secs(30)).await;
    assert_eq!(got.len(), n, "{:#?}", got.iter().map(|s| &s.name).collect::<Vec<_>>());
    got
}

/// An attribute's value as text: strings unquoted, numbers as written, anything else as the collector shows it.
fn attr(span: &ExportedSpan, key: &str) -> Option<String> {
    let raw = span.attributes.get(key)?;
    for (open, close) in [("StringValue(\"", "\")"), ("IntValue(", ")"), ("DoubleValue(", ")"), ("BoolValue(", ")")] {
        if let Some(start) = raw.find(open) {
            let rest = &raw[start + open.len()..];
            if let Some(end) = rest.find(close) {
                return Some(rest[..end].to_owned());
            }
        }
    }
    Some(raw.clone())
}

fn named<'a>(spans: &'a [ExportedSpan], name: &str) -> Vec<&'a ExportedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [ExportedSpan], name: &str) -> &'a ExportedSpan {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name} span: {:#?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    found[0]
}

/// A workspace with two files, a script whose first turn reads two files in parallel (one missing: a failing
/// call) and whose second answers, and an agent file pricing the script model.
fn setup(dir: &Dir) -> Vec<String> {
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "alpha secret-file-text").unwrap();
    let script = json!([
        {"content": "", "tool_calls": [
            {"id": "c1", "name": "read_file", "arguments": {"path": "a.txt"}},
            {"id": "c2", "name": "read_file", "arguments": {"path": "missing.txt"}}
        ], "usage": {"input_tokens": 1000, "output_tokens": 200}, "finish_reason": "tool_calls"},
        {"content": "the answer", "usage": {"input_tokens": 3000, "output_tokens": 100}}
    ]);
    let script = dir.file("s.json", &script.to_string());
    let agent = dir.file(
        "agent.toml",
        &format!(
            "model = \"script:{}\"\ninstructions = \"secret-instructions\"\n[provider]\nprice = {{ input_per_mtok = 2.0, output_per_mtok = 10.0 }}\n[workspace]\npath = \"{}\"\n",
            script.display(),
            ws.display()
        ),
    );
    vec!["run".into(), "--no-store".into(), "--agent".into(), agent.display().to_string()]
}

fn run_cmd(args: &[String], extra: &[&str]) -> Command {
    let mut cmd = reins();
    cmd.args(args).args(extra).arg("secret-prompt");
    for var in ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
        cmd.env_remove(var);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_exports_gen_ai_spans_with_their_structure_attributes_and_cost() {
    let mut server = FakeCollectorServer::start().await.unwrap();
    let dir = Dir::new("otlp-run");
    let args = setup(&dir);
    let mut cmd = run_cmd(&args, &["--otlp", &server.endpoint()]);
    cmd.env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    // Readable progress (which shows content) and still no content in the spans: it was not opted in.
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let got = spans(&mut server, 5).await;

    let run = one(&got, "invoke_agent");
    let chats = named(&got, "chat script");
    let tools = named(&got, "execute_tool read_file");
    assert_eq!((chats.len(), tools.len()), (2, 2), "{got:#?}");
    // One trace; the run is the root, every call its child.
    assert_eq!(run.parent_span_id, "");
    for s in chats.iter().chain(&tools) {
        assert_eq!(s.trace_id, run.trace_id);
        assert_eq!(s.parent_span_id, run.span_id, "{} is a child of the run", s.name);
    }
    assert_eq!(run.kind, "SPAN_KIND_INTERNAL");
    assert!(chats.iter().all(|c| c.kind == "SPAN_KIND_CLIENT"));
    assert!(tools.iter().all(|t| t.kind == "SPAN_KIND_INTERNAL"));

    // The run's attributes: operation, provider, model, status, counts, usage totals and cost.
    let a =
        |s: &ExportedSpan, k: &str| attr(s, k).unwrap_or_else(|| panic!("{} has no {k}: {:#?}", s.name, s.attributes));
    assert_eq!(a(run, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(a(run, "gen_ai.provider.name"), "reins.script");
    assert_eq!(a(run, "gen_ai.request.model"), "script");
    assert_eq!(a(run, "reins.status"), "completed");
    assert_eq!(a(run, "reins.steps"), "2");
    assert_eq!(a(run, "reins.tool_calls"), "2");
    assert_eq!(a(run, "gen_ai.usage.input_tokens"), "4000");
    assert_eq!(a(run, "gen_ai.usage.output_tokens"), "300");
    // 4000 in at $2/M + 300 out at $10/M.
    let cost: f64 = a(run, "reins.cost_usd").parse().unwrap();
    assert!((cost - 0.011).abs() < 1e-9, "{cost}");
    assert!(attr(run, "reins.run.id").is_some_and(|id| !id.is_empty()));
    assert!(attr(run, "error.type").is_none());

    // The model calls, in order of their step: usage, finish reasons (a string array), cost.
    let mut chats = chats;
    chats.sort_by_key(|c| a(c, "reins.step"));
    assert_eq!(a(chats[0], "gen_ai.operation.name"), "chat");
    assert_eq!(a(chats[0], "gen_ai.usage.input_tokens"), "1000");
    assert_eq!(a(chats[0], "gen_ai.usage.output_tokens"), "200");
    assert_eq!(a(chats[0], "reins.tool_calls"), "2");
    let reasons = &chats[0].attributes["gen_ai.response.finish_reasons"];
    assert!(reasons.contains("ArrayValue") && reasons.contains("\"tool_call\""), "{reasons}");
    let first: f64 = a(chats[0], "reins.cost_usd").parse().unwrap();
    assert!((first - 0.004).abs() < 1e-9, "{first}");
    let second: f64 = a(chats[1], "reins.cost_usd").parse().unwrap();
    assert!((second - 0.007).abs() < 1e-9, "{second}");

    // The tool calls: names and ids; the failing one marked with error.type and an error status.
    let by_id: BTreeMap<String, &ExportedSpan> = tools.iter().map(|t| (a(t, "gen_ai.tool.call.id"), *t)).collect();
    let (ok, failed) = (by_id["c1"], by_id["c2"]);
    assert_eq!(a(ok, "gen_ai.tool.name"), "read_file");
    assert_eq!(a(ok, "gen_ai.operation.name"), "execute_tool");
    assert!(attr(ok, "error.type").is_none());
    assert_ne!(ok.status.as_ref().map(|s| s.code.as_str()), Some("STATUS_CODE_ERROR"));
    assert_eq!(a(failed, "error.type"), "tool_error");
    assert_eq!(failed.status.as_ref().map(|s| s.code.as_str()), Some("STATUS_CODE_ERROR"));
    // Its status message is the error class alone: the tool's error text (it names the path) is content.
    assert_eq!(failed.status.as_ref().map(|s| s.message.as_str()), Some("tool_error"));
    // The two calls ran in one batch: both started before the next model call.
    assert!(tools.iter().all(|t| t.end_time_unix_nano <= chats[1].start_time_unix_nano));

    // No content without opting in, and no span of Reins' HTTP or client libraries.
    for s in &got {
        for key in s.attributes.keys() {
            assert!(
                !key.ends_with(".messages")
                    && !key.contains("arguments")
                    && !key.contains("result")
                    && !key.contains("instructions"),
                "{}: {key}",
                s.name
            );
        }
        let text = format!("{:?}", s.attributes);
        assert!(!text.contains("secret"), "{}: {text}", s.name);
        assert!(!s.attributes.contains_key("code.filepath") && !s.attributes.contains_key("thread.id"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_goes_into_exported_spans_only_with_events_content() {
    let mut server = FakeCollectorServer::start().await.unwrap();
    let dir = Dir::new("otlp-content");
    let args = setup(&dir);
    // The standard variables instead of the flag.
    let mut cmd = run_cmd(&args, &["--json", "--events-content"]);
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", server.endpoint()).env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got = spans(&mut server, 5).await;
    let run = one(&got, "invoke_agent");
    assert!(attr(run, "gen_ai.input.messages").is_some_and(|m| m.contains("secret-prompt")), "{run:#?}");
    assert!(attr(run, "gen_ai.system_instructions").is_some_and(|m| m.contains("secret-instructions")));
    assert!(attr(run, "gen_ai.output.messages").is_some_and(|m| m.contains("the answer")));
    let tools = named(&got, "execute_tool read_file");
    let ok = tools.iter().find(|t| attr(t, "gen_ai.tool.call.id").as_deref() == Some("c1")).unwrap();
    assert!(attr(ok, "gen_ai.tool.call.arguments").is_some_and(|m| m.contains("a.txt")));
    assert!(attr(ok, "gen_ai.tool.call.result").is_some_and(|m| m.contains("secret-file-text")));
    // With content on, a failed call's status message is its error text.
    let failed = tools.iter().find(|t| attr(t, "gen_ai.tool.call.id").as_deref() == Some("c2")).unwrap();
    assert!(failed.status.as_ref().is_some_and(|s| s.message.contains("missing.txt")), "{failed:#?}");
    assert!(named(&got, "chat script").iter().all(|c| attr(c, "gen_ai.input.messages").is_some()));
}

/// A port nothing listens on (bound, then closed).
fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn a_dead_collector_costs_one_warning_and_never_the_run() {
    let dir = Dir::new("otlp-dead");
    let args = setup(&dir);
    let url = format!("http://127.0.0.1:{}", dead_port());
    for (protocol, via_env) in [("http/protobuf", false), ("grpc", false), ("http/protobuf", true), ("grpc", true)] {
        let out_file = dir.0.join("outcome.json");
        let _ = std::fs::remove_file(&out_file);
        let mut cmd = run_cmd(&args, &["--json", "--output", out_file.to_str().unwrap()]);
        cmd.env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
        if via_env {
            cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &url);
        } else {
            cmd.args(["--otlp", &url]);
        }
        let out = cmd.output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{protocol}: {err}");
        let events: Vec<Value> =
            String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(events.last().unwrap()["type"], "run_end", "{protocol}");
        assert_eq!(events.last().unwrap()["status"], "completed", "{protocol}");
        let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
        assert_eq!(outcome["answer"], "the answer");
        let warnings: Vec<&str> = err.lines().filter(|l| l.contains("cannot send traces")).collect();
        assert_eq!(warnings.len(), 1, "{protocol}: {err}");
        assert!(warnings[0].starts_with("reins: warning: ") && warnings[0].contains(protocol), "{err}");
        assert_eq!(err.lines().count(), 1, "nothing but the warning on stderr: {err}");
    }
}

#[test]
fn a_bad_otlp_url_or_setting_is_said_plainly() {
    let dir = Dir::new("otlp-bad");
    let args = setup(&dir);
    let out = run_cmd(&args, &["--otlp", "localhost:4318"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--otlp"), "{}", stderr(&out));
    // A variable Reins cannot follow: a warning, and the run goes on without export.
    let mut cmd = run_cmd(&args, &["--json"]);
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1").env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\" is not supported"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_run_still_flushes_the_spans_of_the_aborted_run() {
    let mut server = FakeCollectorServer::start().await.unwrap();
    let dir = Dir::new("otlp-term");
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let started = dir.0.join("started");
    let script = json!([
        {"tool_calls": [{"id": "n", "name": "run_command", "arguments": {"command": "nap"}}]},
        {"content": "done"}
    ]);
    let script = dir.file("s.json", &script.to_string());
    let mut cmd = reins();
    cmd.args(["run", "--no-store", "--no-sandbox", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--workspace")
        .arg(&ws)
        .args(["--preset", &format!("nap=sh -c 'touch {}; sleep 30'", started.display())])
        .args(["--otlp", &server.endpoint()])
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .arg("go")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = tokio::task::spawn_blocking(move || {
        let child = cmd.spawn().unwrap();
        let t0 = std::time::Instant::now();
        while !started.exists() {
            assert!(t0.elapsed() < Duration::from_secs(60), "the command never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let got = spans(&mut server, 3).await;
    let run = one(&got, "invoke_agent");
    assert_eq!(attr(run, "reins.status").as_deref(), Some("aborted"));
    assert_eq!(attr(run, "error.type").as_deref(), Some("aborted"));
    let tool = one(&got, "execute_tool run_command");
    assert_eq!(tool.parent_span_id, run.span_id);
    assert!(attr(tool, "error.type").is_some(), "{tool:#?}");
    one(&got, "chat script");
}

/// The receiver process (`tests/otlp/receiver.py`): its ports, the file it writes, and the process.
struct Receiver {
    child: std::process::Child,
    grpc: u16,
    http: u16,
    file: std::path::PathBuf,
}

impl Receiver {
    fn start(dir: &Dir) -> Receiver {
        use std::io::BufRead as _;
        let file = dir.0.join("received.jsonl");
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/receiver.py");
        let mut child = Command::new(common::otlp_python())
            .arg(&script)
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let ports: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("the receiver said {line:?}: {e}"));
        let port = |k: &str| u16::try_from(ports[k].as_u64().unwrap()).unwrap();
        Receiver { grpc: port("grpc"), http: port("http"), file, child }
    }

    /// What it received (every span of a run is there once `reins` has exited: its flush waited for the answer).
    fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.file).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_real_receiver_process_gets_the_spans_over_grpc_and_http() {
    let dir = Dir::new("otlp-receiver");
    let args = setup(&dir);
    let receiver = Receiver::start(&dir);
    let http = format!("http://127.0.0.1:{}", receiver.http);
    let grpc = format!("http://127.0.0.1:{}", receiver.grpc);
    let mut by_http = run_cmd(&args, &["--json", "--otlp", &http]);
    by_http.env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
    let mut by_grpc = run_cmd(&args, &["--json"]);
    by_grpc
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &grpc)
        .env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
        .env("OTEL_SERVICE_NAME", "my-agents");
    for mut cmd in [by_http, by_grpc] {
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    }
    let spans = receiver.spans();
    for (protocol, service) in [("http", "reins"), ("grpc", "my-agents")] {
        let got: Vec<&Value> = spans.iter().filter(|s| s["protocol"] == protocol).collect();
        let mut names: Vec<&str> = got.iter().map(|s| s["name"].as_str().unwrap()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["chat script", "chat script", "execute_tool read_file", "execute_tool read_file", "invoke_agent"],
            "{protocol}"
        );
        let run = got.iter().find(|s| s["name"] == "invoke_agent").unwrap();
        assert_eq!(run["parent_span_id"], "", "{protocol}");
        assert_eq!(run["resource"]["service.name"], service, "{protocol}");
        assert_eq!(run["resource"]["service.version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(run["scope"], "reins");
        assert_eq!(run["attributes"]["gen_ai.operation.name"], "invoke_agent");
        assert_eq!(run["attributes"]["gen_ai.usage.input_tokens"], 4000, "an integer, not text");
        assert!((run["attributes"]["reins.cost_usd"].as_f64().unwrap() - 0.011).abs() < 1e-9);
        for s in got.iter().filter(|s| s["name"] != "invoke_agent") {
            assert_eq!(s["trace_id"], run["trace_id"]);
            assert_eq!(s["parent_span_id"], run["span_id"], "{protocol}: {s}");
        }
        let chat = got.iter().find(|s| s["name"] == "chat script" && s["attributes"]["reins.step"] == 1).unwrap();
        assert_eq!(chat["kind"], 3, "SPAN_KIND_CLIENT");
        assert_eq!(chat["attributes"]["gen_ai.response.finish_reasons"], json!(["tool_call"]));
        let failed = got.iter().find(|s| s["attributes"]["gen_ai.tool.call.id"] == "c2").unwrap();
        assert_eq!(failed["attributes"]["error.type"], "tool_error");
        assert_eq!(failed["status"]["code"], 2, "STATUS_CODE_ERROR");
        assert!(got.iter().all(|s| s["attributes"].get("gen_ai.input.messages").is_none()));
        assert!(got.iter().all(|s| s["attributes"].get("target").is_none()));
    }
}

#[test]
fn a_collector_that_never_answers_costs_one_warning_and_a_bounded_wait() {
    let dir = Dir::new("otlp-silent");
    let args = setup(&dir);
    // Accepts connections and never answers a byte.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept() {
            held.push(conn);
        }
    });
    let out = run_cmd(&args, &["--json", "--otlp", &url]).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let events = String::from_utf8_lossy(&out.stdout);
    assert!(events.lines().last().is_some_and(|l| l.contains("\"run_end\"") && l.contains("\"completed\"")));
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("cannot send traces")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("did not take the last spans within 5 s"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_file_can_opt_content_into_the_spans() {
    let mut server = FakeCollectorServer::start().await.unwrap();
    let dir = Dir::new("otlp-agent-content");
    let args = setup(&dir);
    // The same agent with `trace_content = true`, without --events-content.
    let agent = dir.0.join("agent.toml");
    let text = std::fs::read_to_string(&agent).unwrap();
    std::fs::write(&agent, format!("trace_content = true\n{text}")).unwrap();
    let mut cmd = run_cmd(&args, &["--json", "--otlp", &server.endpoint()]);
    cmd.env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The events still have no content: the key is about spans.
    assert!(!String::from_utf8_lossy(&out.stdout).contains("secret-prompt"));
    let got = spans(&mut server, 5).await;
    let run = one(&got, "invoke_agent");
    assert!(attr(run, "gen_ai.input.messages").is_some_and(|m| m.contains("secret-prompt")), "{run:#?}");
}

/// Serves one request per connection on 127.0.0.1, answering the `n`-th with `bodies[n]` (JSON), the last
/// again once they run out; the server's `http://host:port/`.
fn serve_in_turn(bodies: Vec<String>) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() || line.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut buf = vec![0; length];
            let _ = reader.read_exact(&mut buf);
            let body = &bodies[n.min(bodies.len() - 1)];
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
        }
    });
    format!("http://{addr}/")
}

/// A run whose first model refuses connections finishes on the second, and every record agrees, per step, on
/// who answered and at what price: the chat spans (`gen_ai.response.model`, `reins.answered_by`,
/// `reins.cost_usd`; the request attributes stay the model asked), the `model_end` events, the outcome's cost
/// and `reins sessions show`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_a_fallback_answered_is_named_and_priced_alike_in_spans_events_outcome_and_session() {
    let mut server = FakeCollectorServer::start().await.unwrap();
    let dir = Dir::new("otlp-fallback");
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "alpha").unwrap();
    let fixture = |name: &str| -> Value {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../reins-providers/tests/fixtures").join(name);
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    // Step 1 calls read_file, in a response that names no model (the adapter cannot say who answered);
    // step 2 answers, naming the model that did.
    let mut call = fixture("openai_responses/tools.json");
    call.as_object_mut().unwrap().remove("model");
    call["output"] = json!([{"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "c1",
        "name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}]);
    let answer = fixture("openai_responses/text.json");
    let endpoint = serve_in_turn(vec![call.to_string(), answer.to_string()]);
    // The first, dearer model's address refuses connections.
    const FIRST: &str = "eu.anthropic.claude-sonnet-4-5-20250929-v1:0";
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let agent = dir.file(
        "agent.toml",
        &format!(
            "model = [\"bedrock:{FIRST}\", \"azure:gpt-4o-mini\"]\n[provider]\nmax_retries = 0\n[workspace]\npath = \"{}\"\n",
            ws.display()
        ),
    );
    let (store, outcome_file) = (dir.store(), dir.0.join("outcome.json"));
    let mut cmd = reins();
    cmd.args(["run", "--json", "--agent", agent.to_str().unwrap(), "--store", store.to_str().unwrap()]).args([
        "--output",
        outcome_file.to_str().unwrap(),
        "--otlp",
        &server.endpoint(),
        "read a.txt",
    ]);
    for var in ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OPENAI_API_KEY"] {
        cmd.env_remove(var);
    }
    cmd.env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc").env("AWS_BEARER_TOKEN_BEDROCK", "k").env("AWS_REGION", "eu-west-3");
    cmd.env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", format!("http://{closed}"));
    cmd.env("AZURE_OPENAI_ENDPOINT", &endpoint).env("AZURE_OPENAI_API_KEY", "k");
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // The events: both steps answered by the second, each priced at its price.
    let events: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let ends: Vec<&Value> = events.iter().filter(|e| e["type"] == "model_end").collect();
    assert_eq!(ends.len(), 2, "{events:#?}");
    let mut total = 0.0;
    for end in &ends {
        assert_eq!(end["model"], "azure:gpt-4o-mini", "{end}");
        total += end["cost_usd"].as_f64().unwrap_or_else(|| panic!("priced: {end}"));
    }
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&outcome_file).unwrap()).unwrap();
    let cost = outcome["cost_usd"].as_f64().unwrap_or_else(|| panic!("the outcome's cost: {outcome}"));
    assert!(total > 0.0 && (cost - total).abs() < 1e-12, "{cost} {total}");

    // The spans: asked of the first, answered by the second, at the events' cost.
    let got = spans(&mut server, 4).await;
    let mut chats = named(&got, &format!("chat {FIRST}"));
    assert_eq!(chats.len(), 2, "{:#?}", got.iter().map(|s| &s.name).collect::<Vec<_>>());
    let a =
        |s: &ExportedSpan, k: &str| attr(s, k).unwrap_or_else(|| panic!("{} has no {k}: {:#?}", s.name, s.attributes));
    chats.sort_by_key(|c| a(c, "reins.step"));
    for (chat, end) in chats.iter().zip(&ends) {
        assert_eq!(a(chat, "gen_ai.request.model"), FIRST);
        assert_eq!(a(chat, "reins.answered_by"), "azure:gpt-4o-mini");
        let span_cost: f64 = a(chat, "reins.cost_usd").parse().unwrap();
        assert!((span_cost - end["cost_usd"].as_f64().unwrap()).abs() < 1e-12, "{span_cost} {end}");
    }
    // Named by the answering model's identity where its response did not say, else as the response did.
    assert_eq!(a(chats[0], "gen_ai.response.model"), "gpt-4o-mini");
    assert_eq!(a(chats[1], "gen_ai.response.model"), answer["model"].as_str().unwrap());
    let run = one(&got, "invoke_agent");
    let run_cost: f64 = a(run, "reins.cost_usd").parse().unwrap();
    assert!((run_cost - cost).abs() < 1e-12, "{run_cost} {cost}");

    // The session: each step says who answered, and the session's cost is the outcome's.
    let out = reins().args(["sessions", "list", "--store", store.to_str().unwrap(), "--json"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let session = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .flat_map(|v| if v.is_array() { v.as_array().cloned().unwrap_or_default() } else { vec![v] })
        .find(|v| v["id"].is_string())
        .unwrap_or_else(|| panic!("no session in {text}"));
    let session_cost = session["cost_usd"].as_f64().unwrap_or_else(|| panic!("the session's cost: {session}"));
    assert!((session_cost - cost).abs() < 1e-12, "priced as the first: {session_cost} {cost}");
    let id = session["id"].as_str().unwrap();
    let out = reins().args(["sessions", "show", id, "--store", store.to_str().unwrap()]).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(shown.matches("answered by azure:gpt-4o-mini (fallback)").count(), 2, "{shown}");
    assert!(shown.contains(&format!("${cost:.4}")), "{shown}");
}
