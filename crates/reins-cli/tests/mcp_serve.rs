//! `reins mcp serve`: Reins agents as MCP tools, driven by real clients — the official MCP Inspector CLI (over
//! stdio and streamable HTTP), a line-by-line JSON-RPC client of the test (progress, elicitation, cancellation),
//! and another `reins run` that lists the served Reins as an MCP server.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};

use serde_json::{Value, json};

mod common;
use common::{Dir, reins};

/// The MCP Inspector CLI (`$REINS_MCP_INSPECTOR`, else the CI cache's, installed by `.ci/setup-mcp.sh`).
fn inspector() -> PathBuf {
    let cache = std::env::var_os("REINS_CI_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/reins-ci"));
    let path = std::env::var_os("REINS_MCP_INSPECTOR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("mcp/inspector/node_modules/.bin/mcp-inspector"));
    if !path.is_file() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let _ = Command::new("bash").arg("-c").arg("source .ci/setup-mcp.sh >&2").current_dir(root).status();
    }
    assert!(path.is_file(), "the MCP Inspector is not installed ({}): run `source .ci/setup-mcp.sh`", path.display());
    path
}

/// Runs the Inspector CLI against `target` (a command line or a URL) with `rest`; its HOME is `dir`.
fn inspect(dir: &Dir, target: &[&str], rest: &[&str]) -> (Option<i32>, Value, String) {
    let out = Command::new(inspector())
        .env("HOME", dir.0.join("inspector-home"))
        .env("REINS_STORE", dir.store())
        .env("XDG_CONFIG_HOME", dir.0.join("no-config"))
        .args(["--cli", "--format", "json", "-q"])
        .args(target)
        .args(rest)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), serde_json::from_str(stdout.trim()).unwrap_or(Value::Null), format!("{stdout}\n{stderr}"))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn show(dir: &Dir, id: &str) -> Value {
    let out = reins().args(["sessions", "show", id, "--json", "--store"]).arg(dir.store()).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// An agent file `NAME.toml` whose scripted model makes `turns`, with `extra` TOML lines.
fn agent(dir: &Dir, name: &str, turns: &Value, extra: &str) -> PathBuf {
    dir.file(&format!("{name}.json"), &turns.to_string());
    dir.file(&format!("{name}.toml"), &format!("model = \"script:{name}.json\"\ntest_tools = true\n{extra}\n"))
}

fn echo_then(answer: Value) -> Value {
    json!([{"tool_calls": [{"id": "e1", "name": "echo", "arguments": {"text": "hi"}}]}, answer])
}

/// `helper` (an output schema) and `plain` (a text answer).
fn two_agents(dir: &Dir) -> (PathBuf, PathBuf) {
    let answer = json!({"tool_calls": [{"id": "f", "name": "final_answer", "arguments": {"answer": "42"}}]});
    let helper = agent(
        dir,
        "helper",
        &echo_then(answer),
        "description = \"Answers questions with a number.\"\n\
         output_schema = { type = \"object\", properties = { answer = { type = \"string\" } }, required = [\"answer\"] }",
    );
    let plain = agent(dir, "plain", &echo_then(json!({"content": "plain answer"})), "");
    (helper, plain)
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_inspector_lists_and_calls_served_agents_over_stdio_and_each_run_is_a_session() {
    let dir = Dir::new("mcp-serve-stdio");
    let (helper, plain) = two_agents(&dir);
    let bin = env!("CARGO_BIN_EXE_reins");
    let store = dir.store();
    // The Inspector gives a server only a few variables of its environment: the store is a flag.
    let target = [bin, "mcp", "serve", "--agent", path(&helper), "--agent", path(&plain), "--store", path(&store)];
    let (code, listed, out) = inspect(&dir, &target, &["--method", "tools/list"]);
    assert_eq!(code, Some(0), "{out}");
    let tools = listed["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["helper", "plain"]);
    assert_eq!(tools[0]["description"], "Answers questions with a number.");
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["task"]));
    assert_eq!(tools[0]["outputSchema"]["required"], json!(["answer"]));
    assert!(tools[1].get("outputSchema").is_none(), "{listed}");

    let call = ["--method", "tools/call", "--tool-name", "helper", "--tool-args-json", r#"{"task":"what is it?"}"#];
    let (code, called, out) = inspect(&dir, &target, &call);
    assert_eq!(code, Some(0), "{out}");
    let result = &called["result"];
    assert_eq!(result["isError"], false, "{called}");
    assert_eq!(result["structuredContent"], json!({"answer": "42"}));
    let id = result["_meta"]["reins/session_id"].as_str().unwrap();
    let session = show(&dir, id);
    assert_eq!(session["session"]["status"], "completed", "{session}");

    let call = ["--method", "tools/call", "--tool-name", "plain", "--tool-args-json", r#"{"task":"say it"}"#];
    let (code, called, out) = inspect(&dir, &target, &call);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(called["result"]["content"][0]["text"], "plain answer", "{called}");
}

/// `reins mcp serve --listen`: the server, its URL and its token (read from its stdout).
fn serve_http(dir: &Dir, agents: &[&Path]) -> (Child, String, String) {
    let mut cmd = reins();
    cmd.args(["mcp", "serve", "--listen", "127.0.0.1:0", "--store"]).arg(dir.store());
    for a in agents {
        cmd.arg("--agent").arg(a);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = lines.next().unwrap().unwrap();
    let auth = lines.next().unwrap().unwrap();
    let token = auth.strip_prefix("Authorization: Bearer ").unwrap().to_owned();
    (child, url, token)
}

#[test]
fn over_http_the_inspector_needs_the_bearer_token_printed_at_start() {
    let dir = Dir::new("mcp-serve-http");
    let (_, plain) = two_agents(&dir);
    let (mut server, url, token) = serve_http(&dir, &[&plain]);
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"), "{url}");
    let call = ["--method", "tools/call", "--tool-name", "plain", "--tool-args-json", r#"{"task":"go"}"#];
    let header = format!("Authorization: Bearer {token}");
    let (code, called, out) = inspect(&dir, &[&url], &[&["--header", &header][..], &call[..]].concat());
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(called["result"]["content"][0]["text"], "plain answer", "{called}");

    let (code, _, out) = inspect(&dir, &[&url], &call);
    assert_ne!(code, Some(0), "no token: {out}");
    let wrong = format!("Authorization: Bearer {}", "0".repeat(token.len()));
    let (code, _, out) = inspect(&dir, &[&url], &[&["--header", &wrong][..], &call[..]].concat());
    assert_ne!(code, Some(0), "a wrong token: {out}");

    // SIGTERM stops it, exit 0.
    let pid = i32::try_from(server.id()).unwrap();
    assert_eq!(Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().code(), Some(0));
    assert_eq!(server.wait().unwrap().code(), Some(0));

    let out = reins().args(["mcp", "serve", "--agent", path(&plain), "--listen", "0.0.0.0:0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a loopback address"), "{}", stderr(&out));
}

/// A JSON-RPC client of the test over the server's stdio, a message a line.
struct Client {
    child: Child,
    input: ChildStdin,
    output: std::io::Lines<BufReader<ChildStdout>>,
}

impl Client {
    /// `reins mcp serve --agent AGENT` with `flags`, spoken to without any handshake yet.
    fn spawn(dir: &Dir, agent: &Path, flags: &[&str]) -> Client {
        let mut child = reins()
            .args(["mcp", "serve", "--agent", path(agent), "--store"])
            .arg(dir.store())
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap()).lines();
        Client { child, input, output }
    }

    fn start(dir: &Dir, agent: &Path, capabilities: Value) -> Client {
        let mut c = Client::spawn(dir, agent, &[]);
        let init = json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                          "clientInfo": {"name": "test", "version": "1"}});
        c.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}));
        let answer = c.next();
        assert_eq!(answer["id"], 1, "{answer}");
        c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        c
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.input, "{v}").unwrap();
        self.input.flush().unwrap();
    }

    fn next(&mut self) -> Value {
        let line = self.output.next().expect("the server closed its output").unwrap();
        serde_json::from_str(&line).unwrap()
    }

    /// Calls the tool `name` with `task` (progress token "p").
    fn call(&mut self, name: &str, task: &str) {
        let params = json!({"name": name, "arguments": {"task": task}, "_meta": {"progressToken": "p"}});
        self.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}));
    }

    /// The messages up to the first that `stop` accepts (included).
    fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let m = self.next();
            let done = stop(&m);
            seen.push(m);
            if done {
                return seen;
            }
        }
    }

    fn finish(mut self) {
        drop(self.input);
        assert_eq!(self.child.wait().unwrap().code(), Some(0));
    }
}

fn is_elicitation(m: &Value) -> bool {
    m["method"] == "elicitation/create"
}

fn is_result(m: &Value) -> bool {
    m["id"] == 2 && m.get("method").is_none()
}

/// An agent whose every call waits for an approval; its model calls `echo`, then answers.
fn asking_agent(dir: &Dir) -> PathBuf {
    agent(dir, "asker", &echo_then(json!({"content": "done"})), "approve = \"all\"")
}

/// The session the tool result names.
fn session_of(dir: &Dir, result: &Value) -> Value {
    show(dir, result["result"]["_meta"]["reins/session_id"].as_str().unwrap())
}

#[test]
fn an_approval_becomes_an_elicitation_and_accepting_it_runs_the_call_with_progress_sent() {
    let dir = Dir::new("mcp-serve-elicit-yes");
    let asker = asking_agent(&dir);
    let mut c = Client::start(&dir, &asker, json!({"elicitation": {}}));
    c.call("asker", "do it");
    let before = c.until(is_elicitation);
    let progress: Vec<&Value> = before.iter().filter(|m| m["method"] == "notifications/progress").collect();
    assert!(!progress.is_empty(), "progress before the question: {before:?}");
    assert_eq!(progress[0]["params"]["progressToken"], "p");
    let ask = before.last().unwrap();
    let message = ask["params"]["message"].as_str().unwrap();
    assert!(message.contains("echo") && message.contains("asker"), "{message}");
    assert_eq!(ask["params"]["requestedSchema"]["required"], json!(["approve"]));
    c.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"approve": true}}}));
    let after = c.until(is_result);
    let result = after.last().unwrap();
    assert_eq!(result["result"]["content"][0]["text"], "done", "{result}");
    let session = session_of(&dir, result);
    assert_eq!(session["session"]["status"], "completed");
    assert_eq!(decisions(&session), [json!("approve")], "{session}");
    c.finish();
}

#[test]
fn a_declined_elicitation_or_a_client_that_cannot_elicit_denies_the_call() {
    let dir = Dir::new("mcp-serve-elicit-no");
    let asker = asking_agent(&dir);
    let mut c = Client::start(&dir, &asker, json!({"elicitation": {}}));
    c.call("asker", "do it");
    let ask = c.until(is_elicitation).pop().unwrap();
    c.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "decline"}}));
    let result = c.until(is_result).pop().unwrap();
    let session = session_of(&dir, &result);
    assert_eq!(decisions(&session), [json!("deny")], "{session}");
    c.finish();

    // No elicitation capability: never asked, denied.
    let mut c = Client::start(&dir, &asker, json!({}));
    c.call("asker", "do it");
    let seen = c.until(is_result);
    assert!(!seen.iter().any(is_elicitation), "{seen:?}");
    let session = session_of(&dir, seen.last().unwrap());
    assert_eq!(decisions(&session), [json!("deny")], "{session}");
    c.finish();
}

fn decisions(session: &Value) -> Vec<Value> {
    approvals_decided(session).map(|d| d["decision"].clone()).collect()
}

/// The data of each `approval_decided` event of `session`, in order.
fn approvals_decided(session: &Value) -> impl Iterator<Item = &Value> {
    let entries = session["entries"].as_array().unwrap().iter();
    entries.filter(|e| e["kind"] == "event" && e["data"]["type"] == "approval_decided").map(|e| &e["data"])
}

#[test]
fn a_cancelled_call_cancels_the_run_and_the_session_says_aborted() {
    let dir = Dir::new("mcp-serve-cancel");
    let asker = asking_agent(&dir);
    let mut c = Client::start(&dir, &asker, json!({"elicitation": {}}));
    c.call("asker", "do it");
    // The run waits on the question: the client cancels the call instead of answering.
    c.until(is_elicitation);
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2, "reason": "t"}}));
    // The run ends and is recorded while the server goes on serving: wait for its session to leave `running`.
    let rows = loop {
        let out = reins().args(["sessions", "list", "--json", "--store"]).arg(dir.store()).output().unwrap();
        let rows: Vec<Value> =
            String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if rows.iter().any(|r| r["status"] != "running") {
            break rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], "aborted", "{rows:?}");
    // The server still answers.
    c.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    c.until(|m| m["id"] == 3);
    c.finish();
}

#[test]
fn reins_run_calls_a_served_reins_as_an_mcp_tool_whose_budget_holds() {
    let dir = Dir::new("mcp-serve-nested");
    let (_, plain) = two_agents(&dir);
    // The inner agent's budget is one step; its script needs two: its run ends step_limit.
    let tight = agent(&dir, "tight", &echo_then(json!({"content": "never"})), "[limits]\nmax_steps = 1");
    let bin = env!("CARGO_BIN_EXE_reins");
    let store = dir.store();
    let outer_turns = json!([
        {"tool_calls": [
            {"id": "a", "name": "inner__plain", "arguments": {"task": "answer"}},
            {"id": "b", "name": "inner__tight", "arguments": {"task": "try"}}
        ]},
        {"content": "outer done"}
    ]);
    let mcp = format!(
        "[mcp.inner]\ncommand = {bin:?}\nargs = [\"mcp\", \"serve\", \"--agent\", {:?}, \"--agent\", {:?}, \"--store\", {:?}]\n\
         env = {{ XDG_CONFIG_HOME = {:?} }}",
        path(&plain),
        path(&tight),
        path(&store),
        path(&dir.0.join("no-config")),
    );
    let outer = agent(&dir, "outer", &outer_turns, &mcp);
    let outcome = dir.0.join("outcome.json");
    let out = reins()
        .args(["run", "--agent", path(&outer), "--store", path(&store), "--output", path(&outcome), "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let o: Value = serde_json::from_str(&std::fs::read_to_string(&outcome).unwrap()).unwrap();
    let result = |id: &str| {
        o["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool" && m["call_id"] == id).unwrap().clone()
    };
    assert_eq!(result("a")["content"], "plain answer", "{o}");
    assert_eq!(result("a")["is_error"], false);
    assert_eq!(result("b")["is_error"], true, "{o}");
    assert!(result("b")["content"].as_str().unwrap().contains("step_limit"), "{o}");
    // Three sessions: the outer run's and the two inner runs'.
    let out = reins().args(["sessions", "list", "--json", "--store", path(&store)]).output().unwrap();
    let mut statuses: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["status"].as_str().unwrap().to_owned())
        .collect();
    statuses.sort();
    assert_eq!(statuses, ["completed", "completed", "step_limit"]);
}

/// An agent whose script calls the tool `ask` of the MCP server `py` (tests/servers/eliciting_server.py, which
/// asks the person for a name and a count), then answers `outer done`.
fn agent_calling_the_eliciting_server(dir: &Dir) -> PathBuf {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/eliciting_server.py");
    let turns = json!([
        {"tool_calls": [{"id": "a", "name": "py__ask", "arguments": {}}]},
        {"content": "outer done"}
    ]);
    let mcp = format!("[mcp.py]\ncommand = {:?}\nargs = [{:?}]", path(&common::python()), path(&script));
    agent(dir, "outer", &turns, &mcp)
}

fn first_tool_result(outcome: &Path) -> String {
    let o: Value = serde_json::from_str(&std::fs::read_to_string(outcome).unwrap()).unwrap();
    assert_eq!(o["status"], "completed", "{o}");
    let result = o["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap().clone();
    result["content"].as_str().unwrap().to_owned()
}

#[test]
fn a_servers_elicitation_is_asked_on_the_terminal_checked_against_its_schema_and_noted_in_the_result() {
    let dir = Dir::new("mcp-elicit-pty");
    let outer = agent_calling_the_eliciting_server(&dir);
    let outcome = dir.0.join("outcome.json");
    let mut p = run_on_pty(&dir, &outer, &outcome);
    p.exp_string("MCP server \"py\" asks: Who are you?").unwrap();
    p.exp_string("count (integer)").unwrap();
    p.send_line("many").unwrap();
    p.exp_string("a whole number is expected").unwrap();
    // A whole number, but under the schema's minimum: the answer is refused as a whole and asked again.
    p.send_line("0").unwrap();
    p.exp_string("name (string)").unwrap();
    p.send_line("Ada").unwrap();
    p.exp_string("does not match what the server asked for").unwrap();
    p.exp_string("count (integer)").unwrap();
    p.send_line("2").unwrap();
    p.exp_string("name (string)").unwrap();
    p.send_line("Ada").unwrap();
    p.exp_eof().unwrap();
    let text = first_tool_result(&outcome);
    assert!(text.starts_with(r#"got {"action": "accept", "content": {"count": 2, "name": "Ada"}}"#), "{text}");
    assert!(text.ends_with("[MCP server \"py\" asked the person for input during this call; they answered]"), "{text}");
    // The session records it as an event: who asked, during which call, its message and the outcome; never the
    // answer.
    let events = elicitation_events(&dir);
    assert_eq!(
        events,
        [
            json!({"type": "elicitation", "server": "py", "tool": "py__ask", "message": "Who are you?", "outcome": "accepted"})
        ]
    );
}

/// The `elicitation` events recorded in `dir`'s sessions, without their envelope (`v`, `run_id`, `seq`, `ts`).
fn elicitation_events(dir: &Dir) -> Vec<Value> {
    let out = reins().args(["sessions", "list", "--json", "--store", path(&dir.store())]).output().unwrap();
    let rows: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    rows.iter()
        .flat_map(|r| show(dir, r["id"].as_str().unwrap())["entries"].as_array().unwrap().clone())
        .filter(|e| e["kind"] == "event" && e["data"]["type"] == "elicitation")
        .map(|e| {
            let mut data = e["data"].clone();
            for key in ["v", "run_id", "seq", "ts"] {
                data.as_object_mut().unwrap().remove(key);
            }
            data
        })
        .collect()
}

#[test]
fn without_a_terminal_nobody_is_asked_and_a_server_is_told_so() {
    let dir = Dir::new("mcp-elicit-none");
    let outer = agent_calling_the_eliciting_server(&dir);
    let outcome = dir.0.join("outcome.json");
    let out = reins()
        .args(["run", "--agent", path(&outer), "--store", path(&dir.store()), "--output", path(&outcome), "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // No elicitation capability was declared: the server had nobody to ask.
    assert_eq!(first_tool_result(&outcome), "nobody to ask");
}

/// The `_meta` of a 2026-07-28 request (no handshake: the revision and the client's capabilities ride on each
/// request), with the progress token "p".
fn meta_2026(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        "progressToken": "p"
    })
}

/// A 2026-07-28 `tools/call` of `name` with request id `id`, and `retry` (`requestState`, `inputResponses`).
fn call_2026(c: &mut Client, id: u64, name: &str, task: &str, retry: Value) {
    let mut params =
        json!({"name": name, "arguments": {"task": task}, "_meta": meta_2026(json!({"elicitation": {"form": {}}}))});
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), retry) {
        p.extend(extra);
    }
    c.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}));
}

fn answer_to(c: &mut Client, id: u64) -> Value {
    c.until(|m| m["id"] == id && m.get("method").is_none()).pop().unwrap()
}

#[test]
fn under_2026_07_28_an_approval_is_an_input_required_result_and_the_call_again_with_its_state_goes_on() {
    let dir = Dir::new("mcp-serve-rounds");
    let asker = asking_agent(&dir);
    let mut c = Client::spawn(&dir, &asker, &[]);
    call_2026(&mut c, 2, "asker", "do it", json!({}));
    let first = answer_to(&mut c, 2);
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let ask = &result["inputRequests"]["q1"];
    assert_eq!(ask["method"], "elicitation/create", "{first}");
    let message = ask["params"]["message"].as_str().unwrap();
    assert!(message.contains("echo") && message.contains("asker"), "{message}");
    assert_eq!(ask["params"]["requestedSchema"]["required"], json!(["approve"]));
    let state = result["requestState"].as_str().unwrap().to_owned();
    let yes = json!({"q1": {"action": "accept", "content": {"approve": true}}});

    // A forged state (the right handle, another secret) is refused; the run still waits for the real one.
    let (handle, _) = state.split_once('.').unwrap();
    let forged = format!("{handle}.{}", "0".repeat(64));
    call_2026(&mut c, 3, "asker", "do it", json!({"requestState": forged, "inputResponses": yes}));
    let refused = answer_to(&mut c, 3);
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("request state"), "{refused}");

    call_2026(&mut c, 4, "asker", "do it", json!({"requestState": state, "inputResponses": yes}));
    let done = answer_to(&mut c, 4);
    assert_eq!(done["result"]["content"][0]["text"], "done", "{done}");
    let session = show(&dir, done["result"]["_meta"]["reins/session_id"].as_str().unwrap());
    assert_eq!(session["session"]["status"], "completed");
    assert_eq!(decisions(&session), [json!("approve")], "{session}");

    // Used once: refused the second time.
    call_2026(&mut c, 5, "asker", "do it", json!({"requestState": state, "inputResponses": yes}));
    assert_eq!(answer_to(&mut c, 5)["error"]["code"], -32602);

    // Declined: the call is denied, and the run goes on to its end.
    call_2026(&mut c, 6, "asker", "do it", json!({}));
    let state = answer_to(&mut c, 6)["result"]["requestState"].as_str().unwrap().to_owned();
    call_2026(
        &mut c,
        7,
        "asker",
        "do it",
        json!({"requestState": state, "inputResponses": {"q1": {"action": "decline"}}}),
    );
    let done = answer_to(&mut c, 7);
    let session = show(&dir, done["result"]["_meta"]["reins/session_id"].as_str().unwrap());
    assert_eq!(decisions(&session), [json!("deny")], "{session}");
    c.finish();
}

/// An agent whose one step proposes two calls that each wait for an approval (`e1` echoes "one", `e2`
/// "two"), then answers.
fn asking_twice_agent(dir: &Dir) -> PathBuf {
    let two = json!([{"tool_calls": [
        {"id": "e1", "name": "echo", "arguments": {"text": "one"}},
        {"id": "e2", "name": "echo", "arguments": {"text": "two"}}
    ]}, {"content": "done"}]);
    agent(dir, "twice", &two, "approve = \"all\"")
}

/// The `(call_id, decision)` of each `approval_decided` of `session`.
fn decided_calls(session: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = approvals_decided(session)
        .map(|d| (d["call_id"].as_str().unwrap().to_owned(), d["decision"].as_str().unwrap().to_owned()))
        .collect();
    out.sort();
    out
}

#[test]
fn a_batchs_approvals_go_out_together_in_one_round_and_each_answer_decides_its_call() {
    let dir = Dir::new("mcp-serve-rounds-batch");
    let twice = asking_twice_agent(&dir);
    let mut c = Client::spawn(&dir, &twice, &[]);
    call_2026(&mut c, 2, "twice", "do both", json!({}));
    let first = answer_to(&mut c, 2);
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.keys().collect::<Vec<_>>(), ["q1", "q2"], "{first}");
    // Each question names its call: the key says which answer decides which call.
    let key_of = |text: &str| {
        requests
            .iter()
            .find(|(_, r)| r["params"]["message"].as_str().unwrap().contains(text))
            .map(|(k, _)| k.clone())
            .unwrap()
    };
    let (one, two) = (key_of("\"one\""), key_of("\"two\""));
    assert_ne!(one, two);
    let state = result["requestState"].as_str().unwrap().to_owned();
    let answers = json!({
        one: {"action": "accept", "content": {"approve": true}},
        two: {"action": "accept", "content": {"approve": false}}
    });
    call_2026(&mut c, 3, "twice", "do both", json!({"requestState": state, "inputResponses": answers}));
    // No second round: the answers of the first decide both calls and the run ends.
    let done = answer_to(&mut c, 3);
    assert_ne!(done["result"]["resultType"], "input_required", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "done", "{done}");
    let session = show(&dir, done["result"]["_meta"]["reins/session_id"].as_str().unwrap());
    assert_eq!(session["session"]["status"], "completed");
    let expected = [("e1".to_owned(), "approve".to_owned()), ("e2".to_owned(), "deny".to_owned())];
    assert_eq!(decided_calls(&session), expected, "{session}");
    // The one approved ran; the other was denied.
    let results: Vec<(String, String)> = session["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "message" && e["data"]["role"] == "tool")
        .map(|e| (e["data"]["call_id"].as_str().unwrap().to_owned(), e["data"]["content"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(results.len(), 2, "{session}");
    assert_eq!(results[0], ("e1".to_owned(), "one".to_owned()), "{session}");
    assert_eq!(results[1].0, "e2", "{session}");
    assert!(results[1].1.starts_with("denied"), "{session}");
    c.finish();

    // 2025-11-25: one elicitation/create after another, the second only once the first is answered.
    let mut c = Client::start(&dir, &twice, json!({"elicitation": {}}));
    c.call("twice", "do both");
    let ask = c.until(is_elicitation).pop().unwrap();
    assert!(ask["params"]["message"].as_str().unwrap().contains("\"one\""), "{ask}");
    c.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"approve": true}}}));
    let ask = c.until(is_elicitation).pop().unwrap();
    assert!(ask["params"]["message"].as_str().unwrap().contains("\"two\""), "{ask}");
    c.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "decline"}}));
    let result = c.until(is_result).pop().unwrap();
    let session = session_of(&dir, &result);
    assert_eq!(decided_calls(&session), expected, "{session}");
    c.finish();
}

#[test]
fn a_run_whose_state_is_not_used_in_time_is_cancelled_and_its_state_refused() {
    let dir = Dir::new("mcp-serve-rounds-expiry");
    let asker = asking_agent(&dir);
    let mut c = Client::spawn(&dir, &asker, &["--input-timeout", "1s"]);
    call_2026(&mut c, 2, "asker", "do it", json!({}));
    let state = answer_to(&mut c, 2)["result"]["requestState"].as_str().unwrap().to_owned();
    // Nobody calls again: the run is cancelled once its time is up, and its session says so.
    let rows = loop {
        let out = reins().args(["sessions", "list", "--json", "--store"]).arg(dir.store()).output().unwrap();
        let rows: Vec<Value> =
            String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if rows.iter().any(|r| r["status"] != "running") {
            break rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(rows[0]["status"], "aborted", "{rows:?}");
    let yes = json!({"q1": {"action": "accept", "content": {"approve": true}}});
    call_2026(&mut c, 3, "asker", "do it", json!({"requestState": state, "inputResponses": yes}));
    assert_eq!(answer_to(&mut c, 3)["error"]["code"], -32602);
    c.finish();
}

/// An outer agent that calls the served Reins `inner` (over stdio; Reins picks 2026-07-28 with it): `asker`
/// twice, then `tight` (whose one-step budget ends its run after the approved call), then answers.
fn agent_calling_a_served_asker(dir: &Dir) -> PathBuf {
    let asker = asking_agent(dir);
    let tight =
        agent(dir, "tight", &echo_then(json!({"content": "never"})), "approve = \"all\"\n[limits]\nmax_steps = 1");
    let bin = env!("CARGO_BIN_EXE_reins");
    let call = |id: &str, tool: &str| json!({"tool_calls": [{"id": id, "name": tool, "arguments": {"task": id}}]});
    let outer_turns = json!([
        call("a", "inner__asker"),
        call("b", "inner__asker"),
        call("c", "inner__tight"),
        {"content": "outer done"}
    ]);
    let mcp = format!(
        "[mcp.inner]\ncommand = {bin:?}\nargs = [\"mcp\", \"serve\", \"--agent\", {:?}, \"--agent\", {:?}, \"--store\", {:?}]\n\
         env = {{ XDG_CONFIG_HOME = {:?} }}",
        path(&asker),
        path(&tight),
        path(&dir.store()),
        path(&dir.0.join("no-config")),
    );
    agent(dir, "outer", &outer_turns, &mcp)
}

/// The decisions recorded by the inner runs, in the order the runs began.
fn inner_decisions(dir: &Dir, outer: &Value) -> Vec<Value> {
    let out = reins().args(["sessions", "list", "--json", "--store", path(&dir.store())]).output().unwrap();
    let mut rows: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    rows.retain(|r| r["id"] != outer["session_id"]);
    rows.sort_by_key(|r| r["created_at"].as_str().unwrap().to_owned());
    rows.iter().flat_map(|r| decisions(&show(dir, r["id"].as_str().unwrap()))).collect()
}

fn tool_results(outcome: &Value) -> Vec<Value> {
    outcome["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").cloned().collect()
}

#[test]
fn reins_run_on_a_terminal_answers_a_served_reins_approvals_under_2026_07_28() {
    let dir = Dir::new("mcp-serve-nested-pty");
    let outer = agent_calling_a_served_asker(&dir);
    let outcome = dir.0.join("outcome.json");
    let mut p = run_on_pty(&dir, &outer, &outcome);
    for (agent, say) in [("asker", "yes"), ("asker", "no"), ("tight", "yes")] {
        p.exp_string(&format!("MCP server \"inner\" asks: Reins agent \"{agent}\" asks to call echo")).unwrap();
        p.exp_string("approve (boolean").unwrap();
        p.send_line(say).unwrap();
    }
    p.exp_eof().unwrap();
    let o: Value = serde_json::from_str(&std::fs::read_to_string(&outcome).unwrap()).unwrap();
    assert_eq!(o["status"], "completed", "{o}");
    let results = tool_results(&o);
    let text = |i: usize| results[i]["content"].as_str().unwrap().to_owned();
    assert!(text(0).starts_with("done") && text(1).starts_with("done"), "{o}");
    assert!(text(0).ends_with("asked the person for input during this call; they answered]"), "{o}");
    // The inner budget holds across the rounds: the approved call ran, then the one-step limit ended the run.
    assert_eq!(results[2]["is_error"], true, "{o}");
    assert!(text(2).contains("step_limit"), "{o}");
    assert_eq!(inner_decisions(&dir, &o), [json!("approve"), json!("deny"), json!("approve")]);
}

#[test]
fn reins_run_without_a_terminal_leaves_a_served_reins_nobody_to_ask_and_its_calls_are_denied() {
    let dir = Dir::new("mcp-serve-nested-none");
    let outer = agent_calling_a_served_asker(&dir);
    let outcome = dir.0.join("outcome.json");
    let out = reins()
        .args(["run", "--agent", path(&outer), "--store", path(&dir.store()), "--output", path(&outcome), "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let o: Value = serde_json::from_str(&std::fs::read_to_string(&outcome).unwrap()).unwrap();
    let results = tool_results(&o);
    assert!(results[0]["content"].as_str().unwrap().starts_with("done"), "{o}");
    assert!(!results[0]["content"].as_str().unwrap().contains("asked the person"), "{o}");
    assert_eq!(inner_decisions(&dir, &o), [json!("deny"), json!("deny"), json!("deny")]);
    // The served Reins is spoken to in the 2026-07-28 revision.
    let out = reins().args(["mcp", "list", "--agent", path(&outer)]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("protocol 2026-07-28"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `reins run --agent AGENT go` on a new pseudo-terminal, with the store of `dir`, its outcome written to `outcome`.
fn run_on_pty(dir: &Dir, agent: &Path, outcome: &Path) -> rexpect::session::PtySession {
    let mut c = Command::new(env!("CARGO_BIN_EXE_reins"));
    c.args(["run", "--agent", path(agent), "--store", path(&dir.store()), "--output", path(outcome), "go"])
        .env("XDG_CONFIG_HOME", dir.0.join("no-config"))
        .env("TERM", "xterm");
    let options = rexpect::reader::Options::new().timeout_ms(Some(60_000)).strip_ansi_escape_codes(true);
    rexpect::session::spawn_with_options(c, options).unwrap()
}

/// `reins chat --agent AGENT` on a new pseudo-terminal, with the store of `dir`.
fn chat_on_pty(dir: &Dir, agent: &Path) -> rexpect::session::PtySession {
    let mut c = Command::new(env!("CARGO_BIN_EXE_reins"));
    c.args(["chat", "--agent", path(agent), "--store", path(&dir.store())])
        .env("XDG_CONFIG_HOME", dir.0.join("no-config"))
        .env("XDG_STATE_HOME", dir.0.join("state"))
        .env("TERM", "xterm");
    let options = rexpect::reader::Options::new().timeout_ms(Some(60_000)).strip_ansi_escape_codes(true);
    rexpect::session::spawn_with_options(c, options).unwrap()
}

/// The text of every tool result of the sessions in `dir`'s store.
fn recorded_tool_results(dir: &Dir) -> Vec<String> {
    let out = reins().args(["sessions", "list", "--json", "--store", path(&dir.store())]).output().unwrap();
    let rows: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    rows.iter()
        .flat_map(|r| {
            let session = show(dir, r["id"].as_str().unwrap());
            session["entries"].as_array().unwrap().clone()
        })
        .filter(|e| e["kind"] == "message" && e["data"]["role"] == "tool")
        .map(|e| e["data"]["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn reins_chat_asks_a_servers_elicitation_inline_with_its_line_editor() {
    let dir = Dir::new("mcp-elicit-chat");
    let outer = agent_calling_the_eliciting_server(&dir);
    let mut p = chat_on_pty(&dir, &outer);
    p.exp_string("/help").unwrap();
    p.send_line("go").unwrap();
    // The chat asks about the call first (approve = "writes" by default), then the server asks.
    p.exp_string("[e]dit > ").unwrap();
    p.send_line("y").unwrap();
    p.exp_string("MCP server \"py\" asks: Who are you?").unwrap();
    p.exp_string("count (integer)").unwrap();
    p.send_line("many").unwrap();
    p.exp_string("a whole number is expected").unwrap();
    p.exp_string("count (integer)").unwrap();
    p.send_line("3").unwrap();
    p.exp_string("name (string)").unwrap();
    p.send_line("Ada").unwrap();
    p.exp_string("outer done").unwrap();
    p.send_line("/exit").unwrap();
    p.exp_eof().unwrap();
    let results = recorded_tool_results(&dir);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0].starts_with(r#"got {"action": "accept", "content": {"count": 3, "name": "Ada"}}"#),
        "{results:?}"
    );
    assert!(results[0].ends_with("asked the person for input during this call; they answered]"), "{results:?}");
}

#[test]
fn reins_chat_declines_a_servers_elicitation_when_the_person_says_decline() {
    let dir = Dir::new("mcp-elicit-chat-decline");
    let outer = agent_calling_the_eliciting_server(&dir);
    let mut p = chat_on_pty(&dir, &outer);
    p.exp_string("/help").unwrap();
    p.send_line("go").unwrap();
    // The chat asks about the call first (approve = "writes" by default), then the server asks.
    p.exp_string("[e]dit > ").unwrap();
    p.send_line("y").unwrap();
    p.exp_string("MCP server \"py\" asks: Who are you?").unwrap();
    p.exp_string("count (integer)").unwrap();
    p.send_line("/decline").unwrap();
    p.exp_string("outer done").unwrap();
    p.send_line("/exit").unwrap();
    p.exp_eof().unwrap();
    let results = recorded_tool_results(&dir);
    assert!(results[0].starts_with(r#"got {"action": "decline"}"#), "{results:?}");
    assert!(results[0].ends_with("they declined]"), "{results:?}");
    let events = elicitation_events(&dir);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["outcome"], "declined", "{events:?}");
}

#[test]
fn what_a_served_agents_own_mcp_server_asks_is_forwarded_to_the_calling_client_under_both_revisions() {
    let dir = Dir::new("mcp-serve-forward");
    // The served agent calls the tool `ask` of its MCP server `py`, which asks the person for a name and a count.
    let served = agent_calling_the_eliciting_server(&dir);
    let answer = json!({"action": "accept", "content": {"name": "Ada", "count": 2}});

    // 2025-11-25: an elicitation/create request of the served Reins to its client.
    let mut c = Client::start(&dir, &served, json!({"elicitation": {}}));
    c.call("outer", "go");
    let ask = c.until(is_elicitation).pop().unwrap();
    let message = ask["params"]["message"].as_str().unwrap();
    assert!(message.contains(r#"its MCP server "py" asks: Who are you?"#), "{message}");
    assert_eq!(ask["params"]["requestedSchema"]["required"], json!(["name", "count"]));
    c.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": answer}));
    let result = c.until(is_result).pop().unwrap();
    assert_eq!(result["result"]["content"][0]["text"], "outer done", "{result}");
    c.finish();

    // 2026-07-28: the same form in an input-required result, answered by calling again.
    let mut c = Client::spawn(&dir, &served, &[]);
    call_2026(&mut c, 2, "outer", "go", json!({}));
    let first = answer_to(&mut c, 2);
    let ask = &first["result"]["inputRequests"]["q1"];
    assert!(ask["params"]["message"].as_str().unwrap().contains(r#"its MCP server "py" asks"#), "{first}");
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    call_2026(&mut c, 3, "outer", "go", json!({"requestState": state, "inputResponses": {"q1": answer}}));
    let done = answer_to(&mut c, 3);
    assert_eq!(done["result"]["content"][0]["text"], "outer done", "{done}");
    c.finish();

    // Both runs' tool results hold what the client answered and the note that the person was asked.
    let results = recorded_tool_results(&dir);
    assert_eq!(results.len(), 2, "{results:?}");
    for r in &results {
        assert!(r.starts_with(r#"got {"action": "accept", "content": {"count": 2, "name": "Ada"}}"#), "{results:?}");
        assert!(r.ends_with("they answered]"), "{results:?}");
    }
}

#[test]
fn over_http_a_served_reins_approval_is_answered_by_the_calling_reins_on_its_terminal() {
    let dir = Dir::new("mcp-serve-http-rounds");
    let asker = asking_agent(&dir);
    let (mut server, url, token) = serve_http(&dir, &[&asker]);
    let turns = json!([
        {"tool_calls": [{"id": "a", "name": "inner__asker", "arguments": {"task": "a"}}]},
        {"content": "outer done"}
    ]);
    let mcp = format!("[mcp.inner]\nurl = {url:?}\nheaders = {{ Authorization = \"Bearer {token}\" }}");
    let outer = agent(&dir, "outer", &turns, &mcp);
    let outcome = dir.0.join("outcome.json");
    let mut p = run_on_pty(&dir, &outer, &outcome);
    p.exp_string("MCP server \"inner\" asks: Reins agent \"asker\" asks to call echo").unwrap();
    p.exp_string("approve (boolean").unwrap();
    p.send_line("yes").unwrap();
    p.exp_eof().unwrap();
    let o: Value = serde_json::from_str(&std::fs::read_to_string(&outcome).unwrap()).unwrap();
    let results = tool_results(&o);
    assert!(results[0]["content"].as_str().unwrap().starts_with("done"), "{o}");
    assert_eq!(inner_decisions(&dir, &o), [json!("approve")]);
    let pid = i32::try_from(server.id()).unwrap();
    assert_eq!(Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().code(), Some(0));
    assert_eq!(server.wait().unwrap().code(), Some(0));
}
