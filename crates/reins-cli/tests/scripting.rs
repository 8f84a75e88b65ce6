//! The scripting contract of `reins run`, through the real binary: `run_end` carries the answer, piped stdin is
//! appended to a prompt argument, readable progress names the session and how to continue it, `--continue`
//! resumes the newest session of the workspace.

use std::io::Write as _;
use std::process::{Output, Stdio};

use serde_json::{Value, json};

mod common;
use common::{Dir, reins};

fn script(dir: &Dir, name: &str, turns: Value) -> String {
    format!("script:{}", dir.file(name, &turns.to_string()).display())
}

fn outcome(dir: &Dir) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.0.join("outcome.json")).unwrap()).unwrap()
}

/// Runs `reins run ARGS` with `stdin` piped in (closed at once when `None` is given... as a pipe with nothing).
fn run_piped(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = reins()
        .arg("run")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn first_user_text(o: &Value) -> String {
    o["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default()
}

#[test]
fn run_end_carries_the_answer_without_events_content() {
    let dir = Dir::new("script-run-end");
    let model = script(&dir, "s.json", json!([{"content": "forty-two"}]));
    let out = reins().args(["run", "--json", "--no-store", "--model", &model, "the answer?"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let end: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(end["type"], "run_end");
    assert_eq!(end["answer"], "forty-two");
    // Content stays out of the other events: no prompt in run_start, no text in model_end.
    assert!(!text.contains("the answer?"), "{text}");
    assert_eq!(text.matches("forty-two").count(), 1, "{text}");
}

#[test]
fn piped_stdin_is_appended_to_a_prompt_argument_and_dash_still_reads_the_prompt() {
    let dir = Dir::new("script-stdin");
    let model = script(&dir, "s.json", json!([{"content": "ok"}]));
    let out_file = dir.0.join("outcome.json");
    let args = ["--no-store", "--model", &model, "--output", out_file.to_str().unwrap()];
    let out = run_piped(&[&args[..], &["Review this"]].concat(), b"fn main() {}\n");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(first_user_text(&outcome(&dir)), "Review this\n\n<stdin>\nfn main() {}\n</stdin>");
    // Empty stdin adds nothing.
    let out = run_piped(&[&args[..], &["Just this"]].concat(), b"");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(first_user_text(&outcome(&dir)), "Just this");
    // `-` keeps its meaning: stdin is the prompt.
    let out = run_piped(&[&args[..], &["-"]].concat(), b"the whole prompt");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(first_user_text(&outcome(&dir)), "the whole prompt");
    // Bounded like `-`: more than 1 MiB is refused, naming where it came from.
    let big = vec![b'a'; (1 << 20) + 1];
    let out = run_piped(&[&args[..], &["Review this"]].concat(), &big);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("standard input"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn readable_progress_names_the_session_and_how_to_continue_it() {
    let dir = Dir::new("script-session-id");
    let model = script(&dir, "s.json", json!([{"content": "hi"}]));
    let store = dir.store();
    let out_file = dir.0.join("outcome.json");
    let out = reins()
        .args(["run", "--model", &model, "--store", store.to_str().unwrap(), "--output", out_file.to_str().unwrap()])
        .arg("hello")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let id = outcome(&dir)["session_id"].as_str().unwrap().to_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let first = stderr.lines().next().unwrap();
    assert!(first.starts_with("▶ run ") && first.contains(&format!("session {id}")), "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert!(last.contains(&format!("reins run --resume {id}")) && last.contains("--continue"), "{stderr}");
}

#[test]
fn continue_resumes_the_newest_session_of_this_workspace() {
    let dir = Dir::new("script-continue");
    let (a, b) = (dir.0.join("a"), dir.0.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let store = dir.store();
    let out_file = dir.0.join("outcome.json");
    let run = |workspace: &std::path::Path, extra: &[&str], turns: Value| {
        let model = script(&dir, "s.json", turns);
        let out = reins()
            .args(["run", "--model", &model, "--store", store.to_str().unwrap()])
            .args(["--output", out_file.to_str().unwrap(), "--workspace", workspace.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        outcome(&dir)
    };
    let in_a = run(&a, &["first in a"], json!([{"content": "a1"}]));
    let in_b = run(&b, &["first in b"], json!([{"content": "b1"}]));
    assert_ne!(in_a["session_id"], in_b["session_id"]);
    // b is the newest session, but --continue in a continues a's.
    let next = run(&a, &["--continue", "and then?"], json!([{"content": "a2"}]));
    assert_eq!(next["session_id"], in_a["session_id"]);
    let users: Vec<&str> = next["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(users, ["first in a", "and then?"]);
    // --continue with --resume is refused by the flags; with --no-store too.
    let out = reins().args(["run", "--continue", "--no-store", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // An empty store has nothing to continue.
    let empty = dir.0.join("empty.db");
    let model = script(&dir, "s.json", json!([{"content": "x"}]));
    let out = reins()
        .args(["run", "--continue", "--model", &model, "--store", empty.to_str().unwrap(), "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no session"), "{}", String::from_utf8_lossy(&out.stderr));
}
