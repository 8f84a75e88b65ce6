//! `reins run --workspace/--preset/--config` and `reins sandbox-check`, as a user meets them.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

mod common;
use common::reins;

fn run(dir: &Path, script: Value, extra: &[&str]) -> (Output, Option<Value>) {
    let script_file = dir.join("script.json");
    std::fs::write(&script_file, script.to_string()).expect("write script");
    let out_file = dir.join("outcome.json");
    let _ = std::fs::remove_file(&out_file);
    let out = reins()
        .arg("run")
        .arg("--model")
        .arg(format!("script:{}", script_file.display()))
        .arg("--output")
        .arg(&out_file)
        .arg("--json")
        .args(extra)
        .arg("do the task")
        .output()
        .expect("run reins");
    let outcome = std::fs::read_to_string(&out_file).ok().and_then(|s| serde_json::from_str(&s).ok());
    (out, outcome)
}

fn calls(calls: Value) -> Value {
    json!([{"content": "", "tool_calls": calls}, {"content": "done"}])
}

fn tool_results(outcome: &Value) -> Vec<(String, bool)> {
    outcome["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| (m["content"].as_str().unwrap_or_default().to_owned(), m["is_error"] == true))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn file_tools_and_a_preset_over_a_workspace() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).expect("mkdir");
    let script = calls(json!([
        {"id": "1", "name": "write_file", "arguments": {"path": "notes.txt", "content": "a\nb\n"}},
        {"id": "2", "name": "run_command", "arguments": {"command": "count"}},
        {"id": "3", "name": "read_file", "arguments": {"path": "../script.json"}},
        {"id": "4", "name": "run_command", "arguments": {"command": "count", "args": ["x"]}}
    ]));
    let ws_arg = ws.to_string_lossy().into_owned();
    let (out, outcome) = run(
        tmp.path(),
        script,
        &["--workspace", &ws_arg, "--preset", "count=wc -l 'notes.txt'", "--command-timeout", "20s", "--no-sandbox"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let outcome = outcome.expect("outcome");
    let results = tool_results(&outcome);
    assert_eq!(results[0], ("created `notes.txt` (4 bytes)".to_owned(), false));
    assert!(results[1].0.starts_with("exit code 0\n[stdout]\n2 notes.txt\n"), "{:?}", results[1]);
    assert!(results[1].0.ends_with("sandbox: off]"), "{:?}", results[1]);
    assert!(results[2].1 && results[2].0.contains("leaves the workspace"), "{:?}", results[2]);
    assert!(results[3].1 && results[3].0.contains("takes no arguments"), "{:?}", results[3]);
    let everything = outcome.to_string();
    assert!(!everything.contains(&*tmp.path().to_string_lossy()), "a host path reached the transcript");
    assert_eq!(std::fs::read_to_string(ws.join("notes.txt")).expect("read"), "a\nb\n");
}

#[test]
fn a_config_file_declares_presets_with_argument_schemas() {
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(tmp.path().join("ws")).expect("mkdir");
    let config = tmp.path().join("reins.toml");
    std::fs::write(
        &config,
        r#"
[workspace]
path = "ws"

[commands]
timeout = "30s"
sandbox = "best-effort"

[[presets]]
name = "say"
program = "echo"
args = ["said:"]
arg_schema = { type = "array", items = { type = "string", pattern = "^[a-z]+$" }, maxItems = 2 }
"#,
    )
    .expect("write config");
    let script = calls(json!([
        {"id": "1", "name": "run_command", "arguments": {"command": "say", "args": ["hello", "there"]}},
        {"id": "2", "name": "run_command", "arguments": {"command": "say", "args": ["$(id)"]}}
    ]));
    let config_arg = config.to_string_lossy().into_owned();
    let (out, outcome) = run(tmp.path(), script, &["--config", &config_arg]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let results = tool_results(&outcome.expect("outcome"));
    assert!(results[0].0.starts_with("exit code 0\n[stdout]\nsaid: hello there\n"), "{:?}", results[0]);
    assert!(results[1].1 && results[1].0.contains("arguments refused"), "{:?}", results[1]);
}

#[test]
fn bad_tool_flags_are_usage_errors() {
    let tmp = tempfile::tempdir().expect("tmp");
    let script = calls(json!([]));
    let (out, _) = run(tmp.path(), script.clone(), &["--preset", "x=true"]);
    assert_eq!(out.status.code(), Some(2), "preset without a workspace");
    assert!(String::from_utf8_lossy(&out.stderr).contains("need a workspace"));
    let ws = tmp.path().to_string_lossy().into_owned();
    let (out, _) = run(tmp.path(), script.clone(), &["--workspace", &ws, "--preset", "x=echo 'open"]);
    assert_eq!(out.status.code(), Some(2));
    let (out, _) = run(tmp.path(), script.clone(), &["--workspace", &ws, "--preset", "x=no-such-program-reins"]);
    assert_eq!(out.status.code(), Some(2));
    let (out, _) = run(tmp.path(), script.clone(), &["--workspace", "/no/such/dir/reins"]);
    assert_eq!(out.status.code(), Some(2));
    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, "[[presets]]\nname = \"x\"\n").expect("write");
    let (out, _) = run(tmp.path(), script, &["--workspace", &ws, "--config", &bad.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid config"));
}

#[test]
fn sandbox_check_reports_the_host() {
    let out = reins().arg("sandbox-check").output().expect("run");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("landlock:") && text.contains("required sandbox available:"), "{text}");
    let out = reins().args(["sandbox-check", "--json"]).output().expect("run");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(v["seccomp"].is_boolean());
}

#[test]
fn the_demo_uses_the_workspace_tools() {
    let out = reins().arg("demo").output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("← write_file [ok]"), "{text}");
    assert!(text.contains("4 RELEASE.md"), "{text}");
    assert!(text.contains("leaves the workspace"), "{text}");
}

#[test]
fn one_duration_rule_and_checked_limits_with_or_without_presets() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).expect("mkdir");
    let ws = ws.to_string_lossy().into_owned();
    let script = calls(json!([]));
    for (flag, value) in [("--timeout", "1ns"), ("--tool-timeout", "0s"), ("--command-timeout", "999us")] {
        let (out, _) = run(tmp.path(), script.clone(), &[flag, value]);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
    }
    let config = tmp.path().join("c.toml");
    for (text, needle) in [
        ("[commands]\ntimeout = \"0s\"\n", "commands.timeout"),
        ("[commands]\ntimeout = \"1ns\"\n", "smallest unit is ms"),
        ("[commands.limits]\nopen_files = 0\n", "open_files must be at least 1"),
    ] {
        std::fs::write(&config, text).expect("write");
        let config = config.to_string_lossy().into_owned();
        for presets in [&[][..], &["--preset", "x=true"][..]] {
            let mut args = vec!["--workspace", &ws, "--config", &config];
            args.extend_from_slice(presets);
            let (out, _) = run(tmp.path(), script.clone(), &args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{text} {presets:?}: {stderr}");
            assert!(stderr.contains(needle), "{text} {presets:?}: {stderr}");
        }
    }
}

#[test]
fn a_config_protected_list_keeps_git_protected() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join(".git")).expect("mkdir");
    std::fs::write(ws.join(".git/config"), "[core]\n").expect("write");
    let config = tmp.path().join("c.toml");
    std::fs::write(&config, "[workspace]\nprotected = [\"secret/**\"]\n").expect("write");
    let script = calls(json!([
        {"id": "1", "name": "edit_file", "arguments": {"path": ".git/config", "old_text": "[core]", "new_text": "[core]\n\tfsmonitor = evil"}},
        {"id": "2", "name": "write_file", "arguments": {"path": ".git/hooks-x", "content": "x"}}
    ]));
    let ws_arg = ws.to_string_lossy().into_owned();
    let (out, outcome) = run(tmp.path(), script, &["--workspace", &ws_arg, "--config", &config.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let results = tool_results(&outcome.expect("outcome"));
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|(text, err)| *err && text.contains("protected")), "{results:?}");
    assert_eq!(std::fs::read_to_string(ws.join(".git/config")).expect("read"), "[core]\n");
    assert!(!ws.join(".git/hooks-x").exists());
}

/// The agent's workspace tools spill a result over `--max-tool-result-chars` to `.reins/spill/` (named in the
/// marker); under `--read-only` nothing is written and the marker says so.
#[test]
fn a_large_read_is_spilled_beneath_the_workspace_and_only_cut_when_read_only() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).expect("mkdir");
    let text: String = (1..=2_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(ws.join("big.txt"), &text).expect("write");
    let ws_arg = ws.to_string_lossy().into_owned();
    let script = calls(json!([{"id": "1", "name": "read_file", "arguments": {"path": "big.txt"}}]));
    let base = ["--workspace", ws_arg.as_str(), "--max-tool-result-chars", "1000"];
    let (out, outcome) = run(tmp.path(), script.clone(), &base);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let shown = tool_results(&outcome.expect("outcome"))[0].0.clone();
    assert!(shown.chars().count() <= 1_000 && shown.starts_with("line 1\n"), "{shown}");
    let file = shown.split("is in ").nth(1).and_then(|s| s.split(':').next()).expect("a file named");
    assert!(file.starts_with(".reins/spill/read_file-"), "{file}");
    assert_eq!(std::fs::read_to_string(ws.join(file)).expect("spill file"), text);
    std::fs::remove_dir_all(ws.join(".reins")).expect("rm");
    let (out, outcome) = run(tmp.path(), script, &[&base[..], &["--read-only"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let shown = tool_results(&outcome.expect("outcome"))[0].0.clone();
    assert!(shown.chars().count() <= 1_000 && shown.starts_with("line 1\n"), "{shown}");
    assert!(shown.contains("not saved to a file: the workspace is read-only"), "{shown}");
    assert!(!ws.join(".reins").exists());
}
