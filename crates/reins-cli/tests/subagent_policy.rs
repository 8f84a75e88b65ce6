//! Every policy holds at every depth: the parent's approval mode, `--read-only` and `pre_tool` hooks apply to
//! the calls of a sub-agent that has a workspace of its own, and a sub-agent's question is decided like the
//! parent's (here without a terminal: the run waits, `reins approve` decides, a SIGKILL after approving runs
//! nothing twice).

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::{Dir, reins};

/// The parent asks the sub-agent `writer` (its own workspace `ws`) to write; the writer calls write_file.
fn setup(name: &str, top: &str) -> (Dir, PathBuf) {
    setup_with(
        name,
        top,
        "",
        &json!([
            {"tool_calls": [{"id": "w1", "name": "write_file", "arguments": {"path": "out.txt", "content": "hi"}}]},
            {"content": "wrote it"}
        ]),
    )
}

/// The same with `child` keys in `[agents.writer]` (before its tables) and the writer's script.
fn setup_with(name: &str, top: &str, child: &str, writer: &Value) -> (Dir, PathBuf) {
    let dir = Dir::new(name);
    std::fs::create_dir_all(dir.0.join("ws")).unwrap();
    dir.file(
        "parent.json",
        &json!([
            {"tool_calls": [{"id": "p1", "name": "writer", "arguments": {"task": "Write out.txt."}}]},
            {"content": "done"}
        ])
        .to_string(),
    );
    dir.file("writer.json", &writer.to_string());
    let agent = dir.file(
        "agent.toml",
        &format!(
            r#"model = "script:parent.json"
{top}
[limits]
max_steps = 10
[agents.writer]
description = "Writes files."
model = "script:writer.json"
{child}
[agents.writer.workspace]
path = "ws"
"#
        ),
    );
    (dir, agent)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn outcome(path: &Path) -> Value {
    std::fs::read_to_string(path).map(|s| serde_json::from_str(&s).unwrap()).unwrap_or(Value::Null)
}

/// `reins SUB... --agent AGENT --store S --output OUT EXTRA...`.
fn reins_run(dir: &Dir, agent: &Path, sub: &[&str], extra: &[&str]) -> (Output, Value) {
    let out_file = dir.0.join("outcome.json");
    let _ = std::fs::remove_file(&out_file);
    let out = reins()
        .args(sub)
        .arg("--agent")
        .arg(agent)
        .arg("--store")
        .arg(dir.store())
        .arg("--output")
        .arg(&out_file)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out, outcome(&out_file))
}

fn tool_result(o: &Value, call: &str) -> (String, bool) {
    let m = o["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["call_id"] == call)
        .unwrap_or_else(|| panic!("no result for {call}: {o}"));
    (m["content"].as_str().unwrap().to_owned(), m["is_error"] == true)
}

/// The binary for a pseudo-terminal (its standard input is the terminal's), with no user config.
fn on_pty(dir: &Dir) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_reins"));
    c.env("XDG_CONFIG_HOME", dir.0.join("no-config"));
    c
}

fn written(dir: &Dir) -> Option<String> {
    std::fs::read_to_string(dir.0.join("ws/out.txt")).ok()
}

#[test]
fn read_only_reaches_a_sub_agent_with_its_own_workspace() {
    let (dir, agent) = setup("subpolicy-ro", "");
    let (out, _) = reins_run(&dir, &agent, &["run", "go", "--json"], &["--read-only"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(written(&dir), None, "a read-only run's sub-agent wrote a file");
    // The sub-agent was offered no write_file: its call of it is an error result.
    let events: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let start = events.iter().find(|e| e["type"] == "run_start" && e["agent"] == "writer").expect("its run_start");
    let tools: Vec<&str> = start["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(tools.contains(&"read_file") && !tools.contains(&"write_file"), "{tools:?}");
    let end = events.iter().find(|e| e["type"] == "tool_end" && e["agent"] == "writer").expect("its tool_end");
    assert_eq!(end["is_error"], true, "{end}");
    // Without --read-only the same sub-agent writes (the test shows the refusal above is read-only's).
    let (out, _) = reins_run(&dir, &agent, &["run", "go"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(written(&dir).as_deref(), Some("hi"));
}

#[test]
fn a_parents_pre_tool_hook_judges_its_sub_agents_calls() {
    let dir_probe = Dir::new("subpolicy-hook-script");
    let hook =
        dir_probe.file("deny.sh", "cat > /dev/null\necho '{\"decision\":\"deny\",\"reason\":\"no writing here\"}'\n");
    let top = format!(
        "[[hooks]]\nevent = \"pre_tool\"\nmatch = \"write_file\"\ncommand = [\"sh\", {:?}]\n",
        hook.display().to_string()
    );
    let (dir, agent) = setup("subpolicy-hook", &top);
    let (out, o) = reins_run(&dir, &agent, &["run", "go", "--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(written(&dir), None, "the parent's hook did not stop the sub-agent's write");
    // The sub-agent's model got the hook's refusal, and the hook's event is the sub-agent's (tagged).
    let events: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let hook_event = events.iter().find(|e| e["type"] == "hook").expect("a hook event");
    assert_eq!((hook_event["decision"].as_str(), hook_event["agent"].as_str()), (Some("deny"), Some("writer")));
    let denied =
        events.iter().find(|e| e["type"] == "tool_end" && e["agent"] == "writer").expect("the sub-agent's tool_end");
    assert_eq!(denied["is_error"], true, "{denied}");
    assert_eq!(o["status"], "completed");
}

/// What a continued run's models say, whichever turn of their script they continue at: the sub-agent and the
/// parent just answer.
fn answer_only(dir: &Dir) {
    dir.file("writer.json", &json!([{"content": "wrote it"}, {"content": "wrote it"}]).to_string());
    dir.file("parent.json", &json!([{"content": "done"}, {"content": "done"}]).to_string());
}

/// A run whose sub-agent's write waits (exit 14): the outcome shows the parent's call and the sub-agent's
/// question; nothing was written. Returns the session id.
fn waits(dir: &Dir, agent: &Path, extra: &[&str]) -> String {
    let (out, o) = reins_run(dir, agent, &["run", "go"], extra);
    assert_eq!(out.status.code(), Some(14), "{}", stderr(&out));
    assert_eq!(o["status"], "awaiting_approval", "{o}");
    let pending = o["pending"].as_array().unwrap();
    assert_eq!(pending[0]["call_id"], "p1", "{o}");
    let asked = pending.iter().find(|p| p["kind"] == "ask").unwrap_or_else(|| panic!("nothing asked: {o}"));
    assert_eq!(asked["sub_agent"]["agent"], "writer", "{o}");
    assert_eq!(asked["sub_agent"]["parent_call_id"], "p1", "{o}");
    assert!(stderr(&out).contains("reins approve"), "{}", stderr(&out));
    assert_eq!(written(dir), None, "nothing is written before the decision");
    o["session_id"].as_str().unwrap().to_owned()
}

#[test]
fn approve_writes_reaches_a_sub_agent_and_reins_approve_decides_its_call() {
    let (dir, agent) = setup("subpolicy-approve", "approve = \"writes\"");
    let id = waits(&dir, &agent, &[]);
    // Its arguments cannot be edited from the parent (its tools are its own): exit 2, nothing recorded.
    let (out, _) = reins_run(&dir, &agent, &["approve", &id, "--edit", r#"w1={"path": "x.txt", "content": "x"}"#], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("sub-agent"), "{}", stderr(&out));
    // Resumed without a decision (no terminal), it waits again.
    let (out, _) = reins_run(&dir, &agent, &["run", "--resume", &id], &[]);
    assert_eq!(out.status.code(), Some(14), "{}", stderr(&out));
    assert_eq!(written(&dir), None);

    answer_only(&dir);
    let (out, o) = reins_run(&dir, &agent, &["approve", &id, "--call", "w1"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(o["status"], "completed", "{o}");
    assert_eq!(written(&dir).as_deref(), Some("hi"), "the approved call ran");
    assert_eq!(tool_result(&o, "p1"), ("wrote it".to_owned(), false));
    // Nothing waits any more: no second question, no second write.
    let (out, _) = reins_run(&dir, &agent, &["approve", &id, "--all"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("does not wait for an approval"), "{}", stderr(&out));
}

#[test]
fn a_sub_agents_own_approval_mode_is_decided_through_reins_approve() {
    let writer = json!([
        {"tool_calls": [{"id": "w1", "name": "write_file", "arguments": {"path": "out.txt", "content": "hi"}}]},
        {"content": "wrote it"}
    ]);
    let (dir, agent) = setup_with("subpolicy-own", "", "approve = \"writes\"", &writer);
    let id = waits(&dir, &agent, &[]);
    answer_only(&dir);
    let (out, o) = reins_run(&dir, &agent, &["approve", &id, "--call", "w1", "--deny", "not that file"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(o["status"], "completed", "{o}");
    assert_eq!(written(&dir), None, "a denied call never runs");
}

#[test]
fn sigkill_while_a_sub_agents_approved_call_runs_then_nothing_runs_twice() {
    let writer = json!([{"tool_calls": [{"id": "s1", "name": "run_command", "arguments": {"command": "slow"}}]}]);
    let child = r#"[[agents.writer.presets]]
name = "slow"
program = "sh"
args = ["-c", "echo $$ > slow.pid; echo x >> runs.log; exec sleep 30"]
[agents.writer.commands]
sandbox = "off"
timeout = "60s""#;
    // The child's tables come after its keys: the preset and commands tables go last.
    let (dir, agent) = setup_with("subpolicy-kill", "approve = \"writes\"", "", &writer);
    let text = std::fs::read_to_string(&agent).unwrap();
    std::fs::write(&agent, format!("{text}{child}\n")).unwrap();
    let runs = || std::fs::read_to_string(dir.0.join("ws/runs.log")).map(|s| s.lines().count()).unwrap_or(0);
    let id = {
        let (out, o) = reins_run(&dir, &agent, &["run", "go"], &[]);
        assert_eq!(out.status.code(), Some(14), "{}", stderr(&out));
        assert_eq!(runs(), 0, "{o}");
        o["session_id"].as_str().unwrap().to_owned()
    };
    answer_only(&dir);
    let mut approving = reins()
        .args(["approve", &id, "--all", "--agent"])
        .arg(&agent)
        .arg("--store")
        .arg(dir.store())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while runs() == 0 {
        assert!(t0.elapsed() < Duration::from_secs(60), "the approved call never ran");
        assert!(approving.try_wait().unwrap().is_none(), "reins approve ended before the call ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    approving.kill().unwrap(); // SIGKILL
    approving.wait().unwrap();
    if let Ok(pid) = std::fs::read_to_string(dir.0.join("ws/slow.pid")) {
        let _ = std::process::Command::new("kill").args(["-9", pid.trim()]).status();
    }
    assert_eq!(runs(), 1);
    // The decision was recorded before the call ran: nothing waits, nothing is asked again.
    let (out, _) = reins_run(&dir, &agent, &["approve", &id, "--all"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // A resume gives the cut call the interrupted result and never runs it again.
    let (out, o) = reins_run(&dir, &agent, &["run", "--resume", &id], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (content, is_error) = tool_result(&o, "p1");
    assert!(is_error && content.starts_with("interrupted"), "{content}");
    assert_eq!(runs(), 1, "no call ran twice");
}

#[test]
fn reins_chat_asks_about_a_sub_agents_write_inline_by_its_default() {
    use rexpect::process::wait::WaitStatus;
    let (dir, agent) = setup("subpolicy-chat", "");
    let mut c = on_pty(&dir);
    c.args(["chat", "--agent"])
        .arg(&agent)
        .arg("--store")
        .arg(dir.store())
        .env("TERM", "xterm")
        .env("XDG_STATE_HOME", dir.0.join("state"))
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY");
    let options = rexpect::reader::Options::new().timeout_ms(Some(60_000)).strip_ansi_escape_codes(true);
    let mut p = rexpect::session::spawn_with_options(c, options).unwrap();
    p.exp_string("/help").unwrap();
    p.send_line("write it").unwrap();
    // The sub-agent's call is asked about (chat's default `approve = "writes"`), named with its sub-agent.
    p.exp_string("[writer] w1 write_file").unwrap();
    p.exp_string("[a]lways for write_file >").unwrap();
    assert_eq!(written(&dir), None, "nothing is written before the answer");
    p.send_line("y").unwrap();
    p.exp_string("done").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("/exit").unwrap();
    p.exp_eof().unwrap();
    assert!(matches!(p.process().wait().unwrap(), WaitStatus::Exited(_, 0)));
    assert_eq!(written(&dir).as_deref(), Some("hi"), "the approved call ran once");
}

#[test]
fn sigkill_while_a_sub_agents_question_is_asked_inline_then_reins_approve_finishes_it() {
    let (dir, agent) = setup("subpolicy-kill-asking", "approve = \"writes\"");
    let mut c = on_pty(&dir);
    c.args(["run", "go", "--agent"]).arg(&agent).arg("--store").arg(dir.store()).env("TERM", "xterm");
    let options = rexpect::reader::Options::new().timeout_ms(Some(60_000)).strip_ansi_escape_codes(true);
    let mut p = rexpect::session::spawn_with_options(c, options).unwrap();
    // On a terminal the sub-agent's question is asked inline; the run is killed while it waits for the answer.
    p.exp_string("[writer] w1 write_file").unwrap();
    p.exp_string("[a]lways for write_file >").unwrap();
    p.process_mut().signal(rexpect::process::signal::Signal::SIGKILL).unwrap();
    let _ = p.process().wait();
    assert_eq!(written(&dir), None, "nothing ran without a decision");
    let list = reins().args(["sessions", "list", "--json", "--store"]).arg(dir.store()).output().unwrap();
    let line = String::from_utf8_lossy(&list.stdout).lines().next().map(str::to_owned).unwrap_or_default();
    let id = serde_json::from_str::<Value>(&line).unwrap()["id"].as_str().unwrap().to_owned();
    // The batch it was asking about was recorded before the question: the session waits on it.
    answer_only(&dir);
    let (out, o) = reins_run(&dir, &agent, &["approve", &id, "--call", "w1"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(o["status"], "completed", "{o}");
    assert_eq!(written(&dir).as_deref(), Some("hi"), "the approved call ran once");
    let (out, _) = reins_run(&dir, &agent, &["approve", &id, "--all"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
