//! `reins run --mcp` and `reins mcp list` as a user meets them: the real binary, a real MCP server written
//! with the PyPI `mcp` package (installed by `.ci/setup-mcp.sh`).

use std::path::PathBuf;
use std::process::Output;

use serde_json::{Value, json};

mod common;
use common::{python, reins};

fn py_server_spec(name: &str) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-mcp/tests/servers/py_server.py");
    format!("{name}={} {}", python().display(), script.display())
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn run_with_an_mcp_server_uses_its_tools_and_refuses_invalid_arguments_before_sending() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let script = dir.path().join("script.json");
    let outcome = dir.path().join("outcome.json");
    let turns = json!([
        {"tool_calls": [
            {"id": "1", "name": "py__add", "arguments": {"a": 2, "b": 3}},
            {"id": "2", "name": "py__add", "arguments": {"a": "two", "b": 3}}
        ]},
        {"content": "five"}
    ]);
    std::fs::write(&script, turns.to_string()).unwrap();
    let out = reins()
        .args(["run", "--json", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--output")
        .arg(&outcome)
        // A server gets no variable of Reins' environment beyond the safe ones: `env` gives it its log.
        .args([
            "--mcp",
            &format!("py=env REINS_MCP_TEST_LOG={} {}", log.display(), py_server_spec("py").trim_start_matches("py=")),
            "add things",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let o: Value = serde_json::from_str(&std::fs::read_to_string(&outcome).unwrap()).unwrap();
    assert_eq!(o["status"], "completed");
    let results: Vec<&Value> = o["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(results[0]["content"], "5");
    assert_eq!(results[0]["is_error"], false);
    assert_eq!(results[1]["is_error"], true);
    assert!(results[1]["content"].as_str().unwrap().contains("invalid arguments"), "{o}");
    // The run_start event lists the MCP tools.
    let start: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert!(start["tools"].as_array().unwrap().contains(&json!("py__add")), "{start}");
    let calls: Vec<Value> =
        std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(calls.len(), 1, "only the valid call reaches the server: {calls:?}");
}

#[test]
fn run_with_a_server_that_cannot_start_is_refused_with_a_clear_message() {
    let out = reins()
        .args(["run", "--model", "script:/nonexistent.json", "--mcp", "gone=/nonexistent/mcp-server --stdio", "x"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("MCP server \"gone\": could not start \"/nonexistent/mcp-server\""), "{stderr}");

    let out = reins().args(["run", "--model", "script:/x.json", "--mcp", "bad__name=node", "x"]).output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid MCP server name \"bad__name\""), "{stderr}");
}

#[test]
fn mcp_list_shows_servers_whether_they_start_and_their_tools() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("reins.toml");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-mcp/tests/servers/py_server.py");
    std::fs::write(
        &config,
        format!(
            "[mcp.fromfile]\ncommand = {:?}\nargs = [{:?}]\nstartup_timeout = \"60s\"\n",
            python().display().to_string(),
            script.display().to_string()
        ),
    )
    .unwrap();
    let out = reins()
        .args(["mcp", "list", "--config"])
        .arg(&config)
        .args(["--mcp", &py_server_spec("py"), "--mcp", "gone=/nonexistent/mcp-server"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "one server did not start\nstdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout
            .contains("fromfile: started (reins-test-py 1.0.0), protocol 2026-07-28, 9 tools, 0 resources, 0 prompts"),
        "{stdout}"
    );
    assert!(
        stdout.contains("py: started (reins-test-py 1.0.0), protocol 2026-07-28, 9 tools, 0 resources, 0 prompts"),
        "{stdout}"
    );
    assert!(stdout.contains("  py__add           Adds two integers."), "{stdout}");
    assert!(stdout.contains("gone: did not start; stdio: /nonexistent/mcp-server"), "{stdout}");
    assert!(stdout.contains("could not start \"/nonexistent/mcp-server\""), "{stdout}");

    let out = reins().args(["mcp", "list", "--json", "--mcp", &py_server_spec("py")]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let server = &v["servers"][0];
    assert_eq!(server["name"], "py");
    assert_eq!(server["started"], true);
    let add = server["tools"].as_array().unwrap().iter().find(|t| t["name"] == "py__add").unwrap();
    assert_eq!(add["input_schema"]["required"], json!(["a", "b"]));

    let out = reins().args(["mcp", "list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("no MCP servers configured"));
}

#[test]
fn run_reads_mcp_servers_from_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-mcp/tests/servers/py_server.py");
    let config = dir.path().join("reins.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp.calc]\ncommand = {:?}\nargs = [{:?}]\nenv = {{ REINS_MCP_TEST_LOG = {:?} }}\n\
             startup_timeout = \"60s\"\ncall_timeout = \"30s\"\n",
            python().display().to_string(),
            script.display().to_string(),
            log.display().to_string()
        ),
    )
    .unwrap();
    let turns = dir.path().join("script.json");
    std::fs::write(
        &turns,
        json!([
            {"tool_calls": [{"id": "1", "name": "calc__shout", "arguments": {"text": "from the config"}}]},
            {"content": "ok"}
        ])
        .to_string(),
    )
    .unwrap();
    let outcome = dir.path().join("outcome.json");
    let out = reins()
        .args(["run", "--json", "--model"])
        .arg(format!("script:{}", turns.display()))
        .arg("--config")
        .arg(&config)
        .arg("--output")
        .arg(&outcome)
        .arg("shout")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "stdout: {stdout}\nstderr: {stderr}");
    let o: Value = serde_json::from_str(&std::fs::read_to_string(&outcome).unwrap()).unwrap();
    let result = o["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(result["content"], "FROM THE CONFIG");
    // The server got the environment from its table.
    assert!(std::fs::read_to_string(&log).unwrap().contains("\"shout\""));
}

#[test]
fn a_server_with_a_malformed_tool_is_kept_the_tool_left_out_with_a_warning_and_named_by_mcp_list() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    let outcome = dir.path().join("outcome.json");
    let turns =
        json!([{"tool_calls": [{"id": "1", "name": "py__add", "arguments": {"a": 2, "b": 3}}]}, {"content": "5"}]);
    std::fs::write(&script, turns.to_string()).unwrap();
    // py_server.py --bad-name also lists a tool named `bad.name`, which no Reins tool can be named.
    let spec = format!("{} --bad-name", py_server_spec("py"));
    let out = reins()
        .args(["run", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--output")
        .arg(&outcome)
        .args(["--mcp", &spec, "add things"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains(
            "reins: warning: MCP server \"py\": tool \"bad.name\" refused: \"py__bad.name\" is not a valid tool name"
        ) && stderr.contains("it is left out, the server's other tools are offered"),
        "{stderr}"
    );
    let o: Value = serde_json::from_str(&std::fs::read_to_string(&outcome).unwrap()).unwrap();
    let result = o["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap().clone();
    assert_eq!(result["content"], "5", "{o}");

    let out = reins().args(["mcp", "list", "--mcp", &spec]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("py: started"), "{stdout}");
    assert!(stdout.contains("  left out: MCP server \"py\": tool \"bad.name\" refused: "), "{stdout}");
    let out = reins().args(["mcp", "list", "--json", "--mcp", &spec]).output().unwrap();
    let listed: Value = serde_json::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
    let refused = listed.pointer("/servers/0/refused/0").and_then(Value::as_str).unwrap_or_default();
    assert!(refused.contains("bad.name"), "{listed}");
}
