//! Sub-agents on the command line: `[agents.NAME]` in an agent file becomes a tool; its events are tagged in
//! `--json`, the outcome file breaks the usage down per agent, and `reins sessions show` shows its child run.

use serde_json::{Value, json};

mod common;
use common::Dir;

fn write_files(dir: &Dir) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.0.join("repo")).unwrap();
    dir.file("repo/notes.txt", "the answer is 42\n");
    dir.file(
        "parent.json",
        &json!([
            {"tool_calls": [{"id": "p1", "name": "reader", "arguments": {"task": "What do the notes say?"}},
                            {"id": "p2", "name": "reader", "arguments": {"task": "Again?"}}],
             "usage": {"input_tokens": 10, "output_tokens": 5}},
            {"content": "The notes say 42.", "usage": {"input_tokens": 20, "output_tokens": 5}}
        ])
        .to_string(),
    );
    dir.file(
        "reader.json",
        &json!([
            {"tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"path": "notes.txt"}}],
             "usage": {"input_tokens": 100, "output_tokens": 7}},
            {"content": "42", "usage": {"input_tokens": 200, "output_tokens": 3}},
            {"content": "still 42", "usage": {"input_tokens": 50, "output_tokens": 1}}
        ])
        .to_string(),
    );
    dir.file(
        "agent.toml",
        r#"
model = "script:parent.json"
[limits]
max_steps = 10
[agents.reader]
description = "Reads the notes."
model = "script:reader.json"
[agents.reader.workspace]
path = "repo"
read_only = true
"#,
    )
}

#[test]
fn a_sub_agent_runs_as_a_tool_and_its_run_is_shown_with_the_session() {
    let dir = Dir::new("subagents");
    let agent = write_files(&dir);
    let out_file = dir.0.join("out.json");
    let out = common::reins()
        .env("REINS_STORE", dir.store())
        .args(["run", "--agent"])
        .arg(&agent)
        .args(["--json", "--output"])
        .arg(&out_file)
        .arg("Ask the reader twice.")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let events: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let parent_id = events[0]["run_id"].as_str().unwrap().to_owned();
    let tagged: Vec<&Value> = events.iter().filter(|e| e["agent"] == "reader").collect();
    assert!(tagged.iter().all(|e| e["parent_run_id"] == parent_id.as_str()));
    // The two calls ran one after the other (the parent's script) or together: either way, two runs.
    assert_eq!(tagged.iter().filter(|e| e["type"] == "run_start").count(), 2);
    assert_eq!(tagged.iter().filter(|e| e["type"] == "run_end").count(), 2);
    assert_eq!(events.last().unwrap()["type"], "run_end");
    assert!(events.last().unwrap().get("agent").is_none(), "the parent's run_end is last and untagged");

    let outcome: Value = serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap();
    assert_eq!(outcome["status"], "completed");
    let reader = &outcome["agents"]["reader"];
    assert_eq!(reader["runs"], 2);
    assert_eq!(reader["steps"], 3);
    assert_eq!(reader["tool_calls"], 1);
    assert_eq!(reader["usage"]["input_tokens"], 350);
    assert_eq!(outcome["usage"]["input_tokens"], 380, "the parent's totals hold the sub-agent's usage");
    assert_eq!(outcome["steps"], 2, "the parent's own steps");

    let session = outcome["session_id"].as_str().unwrap();
    let out = common::reins().env("REINS_STORE", dir.store()).args(["sessions", "show", session]).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert_eq!(shown.matches("▷ sub-agent reader").count(), 2, "{shown}");
    assert!(shown.contains(&format!("(started by run {parent_id})")), "{shown}");
    assert!(shown.contains("[0] user: What do the notes say?"), "{shown}");
    assert!(shown.contains("◁ completed · 2 step(s) · 1 tool call(s)"), "{shown}");

    // Readable progress marks the sub-agent's lines with its name.
    let out = common::reins()
        .env("REINS_STORE", dir.store())
        .args(["run", "--no-store", "--agent"])
        .arg(&agent)
        .arg("Ask the reader twice.")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("▷ sub-agent reader"), "{stderr}");
    assert!(stderr.contains("[reader] → read_file"), "{stderr}");
    assert!(stderr.contains("sub-agent reader: 2 run(s) · 3 step(s) · 1 tool call(s)"), "{stderr}");
}

#[test]
fn a_bad_sub_agent_table_is_exit_2_naming_its_key() {
    let dir = Dir::new("subagents-bad");
    dir.file("s.json", "[]");
    let agent = dir.file("agent.toml", "model = \"script:s.json\"\n[agents.a.agents.b]\n");
    let out = common::reins().args(["run", "--no-store", "--agent"]).arg(&agent).arg("x").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("agents.a.agents"), "{stderr}");
}
