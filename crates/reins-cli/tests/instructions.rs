//! What the model is told: `--instructions`, `--instructions-file`, the workspace preamble and
//! `AGENTS.md` (`--no-agents-md`), seen in the request a real local HTTP server receives; the prompt from
//! standard input (`-`) or `--prompt-file`; instructions in the outcome file and events, and across resume
//! and replay.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use serde_json::Value;

mod common;

use common::{Dir, serve_once};

fn fixture(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-providers/tests/fixtures").join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("fixture {}: {e}", p.display()))
}

fn reins(dir: &Dir, args: &[&str]) -> Output {
    common::reins().args(args).env("REINS_STORE", dir.store()).env_remove("OPENAI_API_KEY").output().expect("run reins")
}

/// Runs an openai-chat model against a local server with `args`; returns the command's output and the
/// `system` message the server received (`None` when there was none).
fn told(dir: &Dir, args: &[&str]) -> (Output, Option<String>) {
    let (url, got) = serve_once("application/json", fixture("openai_chat/text.json"));
    let base = format!("{url}/v1");
    let mut all = vec!["run", "--model", "openai-chat:test-model", "--base-url", &base, "--no-store"];
    all.extend_from_slice(args);
    let out = reins(dir, &all);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, body) = got.recv().expect("a request");
    let first = &body["messages"][0];
    let system = (first["role"] == "system").then(|| first["content"].as_str().unwrap_or_default().to_owned());
    assert!(
        body["messages"].as_array().unwrap().iter().skip(1).all(|m| m["role"] != "system"),
        "one system message, first"
    );
    (out, system)
}

fn workspace(dir: &Dir) -> PathBuf {
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    ws
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_preamble_agents_md_and_the_users_instructions_reach_the_model_in_that_order() {
    let dir = Dir::new("instr-order");
    let ws = workspace(&dir);
    std::fs::write(ws.join("AGENTS.md"), "AGENTS-MD-MARKER: run the tests before you finish.\n").unwrap();
    let ws_arg = ws.display().to_string();
    let (_, system) = told(
        &dir,
        &["--workspace", &ws_arg, "--preset", "check=true", "--no-sandbox", "--instructions", "USER-MARKER", "hi"],
    );
    let system = system.expect("a system message");
    let preamble = system.find("You work in a workspace").expect("the preamble");
    let agents = system.find("AGENTS-MD-MARKER").expect("AGENTS.md");
    let user = system.find("USER-MARKER").expect("the user's instructions");
    assert!(preamble < agents && agents < user, "{system}");
    assert!(system.contains("`check`"), "the presets are listed: {system}");
    assert!(!system.contains(&ws_arg), "the host path is not told: {system}");

    // --no-agents-md: the preamble stays, AGENTS.md goes.
    let (_, system) = told(&dir, &["--workspace", &ws_arg, "--no-agents-md", "hi"]);
    let system = system.unwrap();
    assert!(system.contains("You work in a workspace") && !system.contains("AGENTS-MD-MARKER"), "{system}");

    // No workspace: only what the user gives; nothing at all without it.
    let rules = dir.file("rules.md", "FILE-MARKER rules");
    let rules_arg = rules.display().to_string();
    let (_, system) = told(&dir, &["--instructions-file", &rules_arg, "hi"]);
    assert_eq!(system.as_deref(), Some("FILE-MARKER rules"));
    let (_, system) = told(&dir, &["hi"]);
    assert_eq!(system, None);
}

#[test]
fn a_hostile_agents_md_is_handled_with_a_note_and_never_read_from_outside() {
    let dir = Dir::new("instr-hostile");
    let ws = workspace(&dir);
    let ws_arg = ws.display().to_string();
    // A symlink out of the workspace.
    let secret = dir.file("secret.md", "OUTSIDE-SECRET-MARKER");
    std::os::unix::fs::symlink(&secret, ws.join("AGENTS.md")).unwrap();
    let (out, system) = told(&dir, &["--workspace", &ws_arg, "hi"]);
    let system = system.unwrap();
    assert!(!system.contains("OUTSIDE-SECRET-MARKER"), "{system}");
    assert!(system.contains("AGENTS.md was not read: it is a symbolic link"), "{system}");
    assert!(stderr(&out).contains("warning: AGENTS.md was not read"), "{}", stderr(&out));

    // Huge: cut, with a note for the model and the operator.
    std::fs::remove_file(ws.join("AGENTS.md")).unwrap();
    std::fs::write(ws.join("AGENTS.md"), format!("HEAD-MARKER{}TAIL-MARKER", "x".repeat(1 << 20))).unwrap();
    let (out, system) = told(&dir, &["--workspace", &ws_arg, "hi"]);
    let system = system.unwrap();
    assert!(system.contains("HEAD-MARKER") && !system.contains("TAIL-MARKER"), "cut");
    assert!(system.len() < 40_000, "{}", system.len());
    assert!(system.contains("AGENTS.md was cut: only its first 32768 bytes"), "the model is told");
    assert!(stderr(&out).contains("AGENTS.md was cut"), "{}", stderr(&out));

    // Binary: not given, said so.
    std::fs::write(ws.join("AGENTS.md"), b"BINARY-MARKER\0\x01\x02").unwrap();
    let (out, system) = told(&dir, &["--workspace", &ws_arg, "hi"]);
    let system = system.unwrap();
    assert!(!system.contains("BINARY-MARKER") && system.contains("binary file"), "{system}");
    assert!(stderr(&out).contains("binary"), "{}", stderr(&out));
}

fn script(dir: &Dir) -> String {
    // One answer for a run and each resume of its session (a script continues at the turns recorded).
    let p = dir
        .file("script.json", r#"[{"content": "done"}, {"content": "done"}, {"content": "done"}, {"content": "done"}]"#);
    format!("script:{}", p.display())
}

fn outcome(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn the_prompt_comes_from_standard_input_or_a_file() {
    let dir = Dir::new("instr-prompt");
    let model = script(&dir);
    let out_file = dir.0.join("outcome.json");
    let out_arg = out_file.display().to_string();
    let mut child = common::reins()
        .args(["run", "--model", &model, "--no-store", "--output", &out_arg, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all("Prompt from stdin ✓\nsecond line".as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(outcome(&out_file)["messages"][0]["content"], "Prompt from stdin ✓\nsecond line");

    let prompt = dir.file("prompt.txt", "Prompt from a file");
    let prompt_arg = prompt.display().to_string();
    let out =
        reins(&dir, &["run", "--model", &model, "--no-store", "--output", &out_arg, "--prompt-file", &prompt_arg]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(outcome(&out_file)["messages"][0]["content"], "Prompt from a file");

    // Empty standard input, a prompt file and a prompt together, a missing, special or huge file: exit 2.
    let out =
        common::reins().args(["run", "--model", &model, "--no-store", "-"]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("standard input is empty"), "{}", stderr(&out));
    let out = reins(&dir, &["run", "--model", &model, "--no-store", "--prompt-file", &prompt_arg, "also"]);
    assert_eq!(out.status.code(), Some(2));
    let huge = dir.file("huge.txt", &"x".repeat((1 << 20) + 1));
    for bad in [dir.0.join("missing.txt"), PathBuf::from("/dev/zero"), huge] {
        let bad = bad.display().to_string();
        let out = reins(&dir, &["run", "--model", &model, "--no-store", "--prompt-file", &bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        let out = reins(&dir, &["run", "--model", &model, "--no-store", "--instructions-file", &bad, "hi"]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        assert!(stderr(&out).contains("--instructions-file"), "{}", stderr(&out));
    }
}

#[test]
fn instructions_are_in_the_outcome_the_events_and_survive_resume_and_replay() {
    let dir = Dir::new("instr-session");
    let model = script(&dir);
    let out_file = dir.0.join("outcome.json");
    let out_arg = out_file.display().to_string();
    let out = reins(
        &dir,
        &[
            "run",
            "--model",
            &model,
            "--json",
            "--events-content",
            "--output",
            &out_arg,
            "--instructions",
            "Réponds.",
            "hi",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let first: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "run_start");
    assert_eq!(first["instructions_chars"], 8);
    assert_eq!(first["instructions"], "Réponds.");
    let o = outcome(&out_file);
    assert_eq!(o["instructions"], "Réponds.");
    let id = o["session_id"].as_str().unwrap().to_owned();

    // Without --events-content: the length only.
    let out = reins(&dir, &["run", "--model", &model, "--json", "--no-store", "--instructions", "Réponds.", "hi"]);
    let first: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["instructions_chars"], 8);
    assert!(first.get("instructions").is_none(), "{first}");

    // Resumed with no instructions given: the recorded ones are kept.
    let out = reins(&dir, &["run", "--model", &model, "--resume", &id, "--output", &out_arg, "again"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(outcome(&out_file)["instructions"], "Réponds.");
    // Given: they replace them.
    let out = reins(
        &dir,
        &["run", "--model", &model, "--resume", &id, "--output", &out_arg, "--instructions", "Neu.", "more"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(outcome(&out_file)["instructions"], "Neu.");
    let show = reins(&dir, &["sessions", "show", &id, "--json"]);
    let show: Value = serde_json::from_slice(&show.stdout).unwrap();
    let starts: Vec<&Value> = show["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "run_start")
        .map(|e| &e["data"]["instructions"])
        .collect();
    assert_eq!(starts, [&Value::from("Réponds."), &Value::from("Réponds."), &Value::from("Neu.")]);
    let out = reins(&dir, &["replay", &id]);
    assert_eq!(out.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));

    // No instructions: null in the outcome, 0 in run_start.
    let out = reins(&dir, &["run", "--model", &model, "--json", "--no-store", "--output", &out_arg, "hi"]);
    let first: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["instructions_chars"], 0);
    assert_eq!(outcome(&out_file)["instructions"], Value::Null);
}
