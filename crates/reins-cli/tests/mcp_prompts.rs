//! MCP prompts, resources and revisions as a user meets them: `reins mcp list` says which revision each server
//! speaks and shows its resources and prompts; `reins run --mcp-prompt SERVER/NAME -a KEY=VALUE` uses a prompt of
//! the npm server-everything (installed by `.ci/setup-mcp.sh`).

use std::path::PathBuf;

use serde_json::{Value, json};

mod common;
use common::{python, reins};

fn node_modules() -> PathBuf {
    let cache = std::env::var_os("REINS_CI_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/reins-ci"));
    let dir = std::env::var_os("REINS_MCP_NODE_MODULES")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("mcp/npm/node_modules"));
    assert!(dir.join("@modelcontextprotocol/server-everything").is_dir(), "run `source .ci/setup-mcp.sh` first");
    dir
}

fn everything() -> String {
    let script = node_modules().join("@modelcontextprotocol/server-everything/dist/index.js");
    format!("ev=node {} stdio", script.display())
}

#[test]
fn mcp_list_says_each_servers_revision_and_shows_its_resources_and_prompts() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-mcp/tests/servers/py_server.py");
    let py = format!("py={} {}", python().display(), script.display());
    let out = reins().args(["mcp", "list", "--json", "--mcp", &everything(), "--mcp", &py]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let server = |name: &str| v["servers"].as_array().unwrap().iter().find(|s| s["name"] == name).unwrap().clone();
    let (ev, py) = (server("ev"), server("py"));
    assert_eq!((ev["protocol"].as_str(), py["protocol"].as_str()), (Some("2025-11-25"), Some("2026-07-28")));
    let tools: Vec<&str> = ev["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(tools.contains(&"ev__list_resources") && tools.contains(&"ev__read_resource"), "{tools:?}");
    assert!(
        ev["resources"].as_array().unwrap().iter().any(|r| r["uri"] == "demo://resource/static/document/features.md")
    );
    let args = ev["prompts"].as_array().unwrap().iter().find(|p| p["name"] == "args-prompt").unwrap();
    assert_eq!(
        args["arguments"][0],
        json!({"name": "city", "description": args["arguments"][0]["description"], "required": true})
    );
    // The text form names the revision and lists the prompts as --mcp-prompt takes them.
    let out = reins().args(["mcp", "list", "--mcp", &everything()]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("protocol 2025-11-25") && text.contains("ev/args-prompt city [state]"), "{text}");
}

#[test]
fn run_uses_an_mcp_prompt_with_its_arguments_and_refuses_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(&script, json!([{"content": "sunny"}]).to_string()).unwrap();
    let outcome = dir.path().join("outcome.json");
    let out = reins()
        .args(["run", "--model", &format!("script:{}", script.display()), "--output"])
        .arg(&outcome)
        .args(["--mcp", &everything(), "--mcp-prompt", "ev/args-prompt", "-a", "city=Paris", "-a", "state=Texas"])
        .arg("Answer in one word.")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let o: Value = serde_json::from_str(&std::fs::read_to_string(&outcome).unwrap()).unwrap();
    let first = o["messages"][0]["content"].as_str().unwrap();
    assert!(first.contains("Paris") && first.contains("Texas"), "the prompt's text with its arguments: {first}");
    assert!(first.ends_with("\n\nAnswer in one word."), "the given prompt follows: {first}");

    let out = reins()
        .args(["run", "--model", &format!("script:{}", script.display())])
        .args(["--mcp", &everything(), "--mcp-prompt", "ev/args-prompt"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("needs city"), "{stderr}");
    let out = reins()
        .args(["run", "--model", &format!("script:{}", script.display())])
        .args(["--mcp", &everything(), "--mcp-prompt", "ev/nope"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("has no prompt \"nope\"") && stderr.contains("simple-prompt"), "{stderr}");
}

#[test]
fn chat_sends_an_mcp_prompt_as_a_message_with_slash_prompt() {
    let dir = common::Dir::new("chat-mcp-prompt");
    let script = dir.file("script.json", &json!([{"content": "Sunny."}]).to_string());
    let mut c = reins();
    // The pseudo-terminal is the chat's standard input.
    c.stdin(std::process::Stdio::inherit());
    c.arg("chat")
        .arg("--store")
        .arg(dir.store())
        .args(["--model", &format!("script:{}", script.display()), "--mcp", &everything()])
        .env("TERM", "xterm")
        .env("XDG_STATE_HOME", dir.0.join("state"));
    let options = rexpect::reader::Options::new().timeout_ms(Some(60_000)).strip_ansi_escape_codes(true);
    let mut p = rexpect::session::spawn_with_options(c, options).unwrap();
    p.exp_string("/help").unwrap();
    p.send_line("/prompt ev/args-prompt").unwrap();
    p.exp_string("needs city").unwrap();
    p.send_line("/prompt ev/args-prompt city=\"New York\"").unwrap();
    p.exp_string("Sunny.").unwrap();
    p.send_line("/exit").unwrap();
    let tail = p.exp_eof().unwrap();
    let marker = "this chat is session ";
    let at = tail.find(marker).unwrap_or_else(|| panic!("no session named in {tail:?}"));
    let id: String = tail[at + marker.len()..].chars().take_while(|c| c.is_ascii_hexdigit() || *c == '-').collect();
    let out = reins().args(["sessions", "show", &id, "--json", "--store"]).arg(dir.store()).output().unwrap();
    let session: Value = serde_json::from_slice(&out.stdout).unwrap();
    let first_user = session["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "message" && e["data"]["role"] == "user")
        .map(|e| e["data"]["content"].as_str().unwrap_or_default().to_owned())
        .unwrap();
    assert!(first_user.contains("New York"), "the prompt's text was the message: {first_user}");
}
