//! The `reins` command as a user meets it: a real process, real files, real signals.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

mod common;
use common::{Dir, reins};

fn run_script(dir: &Dir, script: Value, extra: &[&str]) -> (Output, Option<Value>) {
    let script = dir.file("script.json", &script.to_string());
    let out_file = dir.0.join("outcome.json");
    let _ = std::fs::remove_file(&out_file);
    let mut cmd = reins();
    cmd.arg("run").arg("--model").arg(format!("script:{}", script.display())).arg("--output").arg(&out_file);
    cmd.args(extra).arg("do the task");
    let out = cmd.output().unwrap();
    let outcome = std::fs::read_to_string(&out_file).ok().map(|s| serde_json::from_str(&s).unwrap());
    (out, outcome)
}

fn events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn the_demo_runs_offline_and_shows_a_rejected_call_recovered_from() {
    let out = reins().arg("demo").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("invalid arguments for tool \"echo\""), "{text}");
    assert!(text.contains("completed"), "{text}");
}

#[test]
fn a_scripted_run_writes_the_outcome_and_json_events() {
    let dir = Dir::new("ok");
    let script = json!([
        {"content": "", "tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "hi"}}], "usage": {"input_tokens": 10, "output_tokens": 2}},
        {"content": "done", "usage": {"input_tokens": 12, "output_tokens": 1}}
    ]);
    let (out, outcome) = run_script(&dir, script, &["--test-tools", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let o = outcome.unwrap();
    assert_eq!(o["status"], "completed");
    assert_eq!(o["answer"], "done");
    assert_eq!(o["error"], Value::Null);
    assert_eq!(o["steps"], 2);
    assert_eq!(o["tool_calls"], 1);
    assert_eq!(o["usage"]["input_tokens"], 22);
    assert_eq!(o["usage"]["output_tokens"], 3);
    assert_eq!(o["usage"]["calls_with_usage"], 2);
    assert!(o["run_id"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(
        o["messages"],
        json!([
            {"role": "user", "content": "do the task"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "hi"}}]},
            {"role": "tool", "call_id": "1", "content": "hi", "is_error": false},
            {"role": "assistant", "content": "done"}
        ])
    );
    let ev = events(&out);
    assert!(ev.iter().all(|e| e["v"] == 1 && e["run_id"] == o["run_id"] && e["ts"].is_string()));
    let seqs: Vec<u64> = ev.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..ev.len() as u64).collect::<Vec<_>>());
    let last = ev.last().unwrap();
    assert_eq!(last["type"], "run_end");
    assert_eq!(last["status"], "completed");
    assert_eq!(last["steps"], 2);
    assert_eq!(last["tool_calls"], 1);
    assert_eq!(last["usage"]["calls_with_usage"], 2);
    assert!(last["duration_ms"].is_number());
    let tool_end = ev.iter().find(|e| e["type"] == "tool_end").unwrap();
    assert_eq!((tool_end["call_id"].as_str(), tool_end["name"].as_str()), (Some("1"), Some("echo")));
    assert_eq!(tool_end["is_error"], false);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("\"hi\""), "no argument text without opt-in");
}

#[test]
fn each_status_has_its_exit_code() {
    let dir = Dir::new("codes");
    let call = |id: &str| json!({"id": id, "name": "echo", "arguments": {"text": "x"}});
    let cases: Vec<(Value, Vec<&str>, i32, &str)> = vec![
        (json!([{"tool_calls": [call("1")]}, {"tool_calls": [call("2")]}]), vec!["--max-steps", "1"], 3, "step_limit"),
        (json!([{"tool_calls": [call("1"), call("2")]}]), vec!["--max-tool-calls", "1"], 4, "tool_limit"),
        (
            json!([{"content": "x", "usage": {"input_tokens": 50, "output_tokens": 1}}]),
            vec!["--max-input-tokens", "10"],
            5,
            "token_limit",
        ),
        (
            json!([{"content": "x", "usage": {"input_tokens": 1, "output_tokens": 50}}]),
            vec!["--max-output-tokens", "10"],
            5,
            "token_limit",
        ),
        (
            json!([{"content": "x", "usage": {"input_tokens": 8, "output_tokens": 8}}]),
            vec!["--max-total-tokens", "10"],
            5,
            "token_limit",
        ),
        (json!([{"delay_ms": 5000, "content": "late"}]), vec!["--timeout", "200ms"], 6, "timeout"),
        (json!([{"error": "upstream down"}]), vec![], 8, "model_error"),
        (json!([{"raw": {"content": 42}}]), vec![], 8, "model_error"),
        (
            json!([{"tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "x".repeat(100)}}]}]),
            vec!["--max-context-chars", "50"],
            9,
            "context_limit",
        ),
        (json!([{"tool_calls": [call("1")]}, {"content": "ok"}]), vec!["--max-context-tokens", "1000"], 0, "completed"),
    ];
    for (script, flags, code, status) in cases {
        let mut args = vec!["--test-tools"];
        args.extend(flags.iter().copied());
        let (out, outcome) = run_script(&dir, script.clone(), &args);
        assert_eq!(out.status.code(), Some(code), "{script} {flags:?}: {}", String::from_utf8_lossy(&out.stderr));
        let o = outcome.unwrap();
        assert_eq!(o["status"], status, "{script}");
        if code != 0 {
            assert!(o["error"].as_str().is_some_and(|e| !e.is_empty()));
        }
    }
}

#[test]
fn the_help_documents_the_exit_codes() {
    let out = reins().args(["run", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for s in ["step_limit", "tool_limit", "token_limit", "timeout", "aborted", "model_error", "context_limit"] {
        assert!(text.contains(s), "{s} missing from --help");
    }
}

fn assert_bad_input(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(needle), "{needle:?} not in {err}");
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
}

#[test]
fn bad_input_is_a_one_line_error_with_exit_code_2() {
    let dir = Dir::new("bad");
    let run = |model: &str, extra: &[&str]| {
        let mut c = reins();
        c.args(["run", "--model", model]).args(extra).arg("prompt");
        c.output().unwrap()
    };
    assert_bad_input(&run("script:/nonexistent/reins.json", &[]), "cannot read script file");
    let bad_json = dir.file("bad.json", "[{\"content\": ");
    assert_bad_input(&run(&format!("script:{}", bad_json.display()), &[]), "not valid JSON");
    let not_array = dir.file("obj.json", "{\"content\": \"x\"}");
    assert_bad_input(&run(&format!("script:{}", not_array.display()), &[]), "JSON array");
    let bad_turn = dir.file("turn.json", "[{\"contnet\": \"x\"}]");
    assert_bad_input(&run(&format!("script:{}", bad_turn.display()), &[]), "unknown key \"contnet\"");
    let bad_usage =
        dir.file("usage.json", "[{\"content\": \"x\", \"usage\": {\"input_tokens\": -3, \"output_tokens\": 1}}]");
    assert_bad_input(&run(&format!("script:{}", bad_usage.display()), &[]), "input_tokens");
    let ok = dir.file("ok.json", "[{\"content\": \"x\"}]");
    let ok = format!("script:{}", ok.display());
    assert_bad_input(&run(&ok, &["--timeout", "soon"]), "soon");
    assert_bad_input(&run(&ok, &["--timeout", "99999999999999999999s"]), "timeout");
    assert_bad_input(&run(&ok, &["--max-steps", "0"]), "max-steps");
    assert_bad_input(&run(&ok, &["--max-steps=-1"]), "max-steps");
    assert_bad_input(&run(&ok, &["--max-context-chars", "10", "--max-context-tokens", "10"]), "cannot be used with");
    assert_bad_input(&run("gpt-5", &[]), "PROVIDER:NAME");
    assert_bad_input(&run("nosuch:model", &[]), "unknown provider");
}

#[test]
fn huge_durations_are_accepted() {
    let dir = Dir::new("huge");
    let (out, o) = run_script(&dir, json!([{"content": "x"}]), &["--timeout", "500000000years"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(o.unwrap()["status"], "completed");
}

fn wait_for(path: &Path, what: &str) {
    for _ in 0..200 {
        if std::fs::read_to_string(path).is_ok_and(|s| s.contains(what)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("{what} never appeared in {}", path.display());
}

#[test]
fn ctrl_c_aborts_the_run_and_still_writes_the_outcome_and_last_events() {
    let dir = Dir::new("sigint");
    let script = dir.file(
        "s.json",
        &json!([{"tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "a"}}]}, {"delay_ms": 60000, "content": "late"}])
            .to_string(),
    );
    let out_file = dir.0.join("outcome.json");
    let events_file = dir.0.join("events.jsonl");
    let child = reins()
        .args(["run", "--test-tools", "--json", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--output")
        .arg(&out_file)
        .arg("go")
        .stdout(Stdio::from(std::fs::File::create(&events_file).unwrap()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&events_file, "\"step\":2");
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", String::from_utf8_lossy(&out.stderr));
    let o: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert_eq!(o["status"], "aborted");
    assert_eq!(o["messages"].as_array().unwrap().len(), 3);
    let lines = std::fs::read_to_string(&events_file).unwrap();
    let last: Value = serde_json::from_str(lines.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "run_end");
    assert_eq!(last["status"], "aborted");
}

#[test]
fn a_long_scripted_run_recovers_from_invalid_calls() {
    let dir = Dir::new("long");
    let mut turns = Vec::new();
    for i in 0..30 {
        let args = if i % 2 == 0 { json!({"text": format!("t{i}")}) } else { json!({"text": i}) };
        turns.push(json!({"tool_calls": [{"id": format!("c{i}"), "name": "echo", "arguments": args}]}));
    }
    turns.push(json!({"content": "finished"}));
    let (out, o) = run_script(&dir, Value::Array(turns), &["--test-tools", "--max-steps", "40"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let o = o.unwrap();
    assert_eq!(o["tool_calls"], 30);
    let errors = o["messages"].as_array().unwrap().iter().filter(|m| m["is_error"] == true).count();
    assert_eq!(errors, 15);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "finished");
}

#[test]
fn a_result_cut_to_ten_characters_still_carries_a_marker() {
    let dir = Dir::new("tiny-results");
    let text = "0123456789".repeat(50);
    let script = json!([
        {"tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": text}}]},
        {"content": "done"}
    ]);
    let (out, outcome) = run_script(&dir, script, &["--test-tools", "--no-store", "--max-tool-result-chars", "10"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let result = outcome.unwrap()["messages"][2]["content"].as_str().unwrap().to_owned();
    assert!(result.chars().count() <= 10, "{result:?}");
    // Head, the compact marker with exactly how many characters were left out, tail.
    assert_eq!(result, "012[…496]9");
}

#[test]
fn context_strategy_flags_compact_with_a_summary_model_and_say_so() {
    let dir = Dir::new("compact");
    let mut script = Vec::new();
    for i in 0..40 {
        script.push(
            json!({"tool_calls": [{"id": format!("c{i}"), "name": "echo", "arguments": {"text": "x".repeat(200)}}]}),
        );
    }
    script.push(json!({"content": "done"}));
    let summaries: Vec<Value> = (0..40).map(|i| json!({"content": format!("summary {i}")})).collect();
    let summaries = dir.file("summaries.json", &Value::Array(summaries).to_string());
    let compact = format!("script:{}", summaries.display());
    let flags = [
        "--test-tools",
        "--max-context-chars",
        "9000",
        "--context-strategy",
        "summarize",
        "--compact-at",
        "0.7",
        "--compact-model",
        compact.as_str(),
    ];
    let mut args = flags.to_vec();
    args.push("--json");
    let (out, outcome) = run_script(&dir, Value::Array(script.clone()), &args);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let o = outcome.unwrap();
    let n = o["compactions"].as_u64().unwrap();
    assert!(n >= 1, "{o}");
    let summaries: Vec<&Value> = o["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "summary").collect();
    assert_eq!(summaries.len() as u64, n);
    assert!(summaries[0]["content"].as_str().unwrap().contains("summary 0"));
    assert!(summaries[0]["replaces"].as_u64().unwrap() > 0);
    let evs = events(&out);
    let ends: Vec<&Value> = evs.iter().filter(|e| e["type"] == "compaction_end").collect();
    assert_eq!(ends.len() as u64, n);
    for key in ["step", "items", "chars_before", "chars_after", "duration_ms", "usage"] {
        assert!(ends[0].get(key).is_some(), "{key} missing from {}", ends[0]);
    }
    assert_eq!(evs.iter().filter(|e| e["type"] == "compaction_start").count() as u64, n);
    assert_eq!(evs.last().unwrap()["compactions"].as_u64(), Some(n));
    // The readable progress says where it compacted.
    let (out, _) = run_script(&dir, Value::Array(script), &flags);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("compaction · "), "{}", String::from_utf8_lossy(&out.stderr));
    // Bad values are refused as usage errors.
    for bad in
        [["--context-strategy", "forget"], ["--compact-at", "0"], ["--compact-at", "1.5"], ["--compact-model", "gpt"]]
    {
        let (out, _) = run_script(&dir, json!([{"content": "x"}]), &bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}
