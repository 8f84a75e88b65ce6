//! Stopping well: SIGTERM in the middle of a tool batch ends `reins run` `aborted` with its outcome written and its
//! session closed; a session whose process is gone (SIGKILL) shows as `interrupted`, and `--resume` says so; a
//! session still running is not resumed twice.

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Dir, reins};
use serde_json::{Value, json};

fn wait(mut child: Child, secs: u64) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("still running after {secs}s; stderr: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for(path: &Path) {
    let t0 = Instant::now();
    while !path.exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "{} did not appear", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sessions(store: &Path) -> Vec<Value> {
    let out = reins().args(["sessions", "list", "--json", "--store"]).arg(store).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect()
}

/// `reins run` of a batch `quick` (answers at once) then `nap` (marks that it started, sleeps `secs`).
fn start_batch(dir: &Dir, secs: u32) -> Child {
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let started = dir.0.join("started");
    let script = json!([
        {"tool_calls": [
            {"id": "q", "name": "run_command", "arguments": {"command": "quick"}},
            {"id": "n", "name": "run_command", "arguments": {"command": "nap"}}
        ]},
        {"content": "done"}
    ]);
    let script = dir.file("s.json", &script.to_string());
    reins()
        .args(["run", "--no-sandbox", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--workspace")
        .arg(&ws)
        .args(["--preset", "quick=echo quick"])
        .args(["--preset", &format!("nap=sh -c 'touch {}; sleep {secs}'", started.display())])
        .arg("--store")
        .arg(dir.store())
        .arg("--output")
        .arg(dir.0.join("outcome.json"))
        .arg("go")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn kill(child: &Child, signal: &str) {
    assert!(Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap().success());
}

#[test]
fn sigterm_mid_batch_writes_the_outcome_aborted_and_closes_the_session() {
    let dir = Dir::new("stop-term-batch");
    let child = start_batch(&dir, 30);
    wait_for(&dir.0.join("started"));
    kill(&child, "TERM");
    let out = wait(child, 30);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains("SIGTERM received"), "{stderr}");
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(dir.0.join("outcome.json")).unwrap()).unwrap();
    assert_eq!(outcome["status"], "aborted");
    let messages = outcome["messages"].as_array().unwrap();
    // The call that finished keeps its result; the one cut short gets an error result: a coherent transcript.
    let results: Vec<(&str, bool)> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| (m["call_id"].as_str().unwrap(), m["is_error"].as_bool().unwrap()))
        .collect();
    assert_eq!(results, [("q", false), ("n", true)], "{messages:?}");
    let listed = sessions(&dir.store());
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["status"], "aborted", "the session is closed");
}

#[test]
fn a_session_whose_process_is_gone_is_interrupted_and_resume_says_so() {
    let dir = Dir::new("stop-kill");
    let child = start_batch(&dir, 3);
    wait_for(&dir.0.join("started"));
    let listed = sessions(&dir.store());
    assert_eq!(listed[0]["status"], "running", "its process is alive");
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    // Resuming a session whose run is still going is refused.
    let script = dir.file("more.json", &json!([{"content": "more"}]).to_string());
    let twice = reins()
        .args(["run", "--resume", &id, "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--store")
        .arg(dir.store())
        .arg("again")
        .output()
        .unwrap();
    assert_eq!(twice.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&twice.stderr).contains("is still running"), "{twice:?}");
    kill(&child, "KILL");
    let _ = wait(child, 10);
    let listed = sessions(&dir.store());
    assert_eq!(listed[0]["status"], "interrupted", "{listed:?}");
    let show = reins().args(["sessions", "show", &id, "--store"]).arg(dir.store()).output().unwrap();
    assert!(String::from_utf8_lossy(&show.stdout).contains("interrupted: its process is gone"));
    let resumed = reins()
        .args(["run", "--resume", &id, "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--store")
        .arg(dir.store())
        .arg("again")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("was interrupted"), "{stderr}");
    assert_eq!(sessions(&dir.store())[0]["status"], "completed");
}
