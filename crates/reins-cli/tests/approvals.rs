//! Approvals and hooks through the `reins` binary: a run that waits (exit 14), `reins approve` (approve,
//! deny, edit), a SIGKILL right after approving, and command hooks (rewrite, deny, hang, garbage, redact,
//! refuse a final answer).

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::{Dir, reins};

/// A workspace with a counting preset: `bump` appends a line to `runs.log` (each run of the call, once).
fn setup(name: &str) -> (Dir, PathBuf) {
    let dir = Dir::new(name);
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    (dir, ws)
}

fn runs(ws: &Path) -> usize {
    std::fs::read_to_string(ws.join("runs.log")).map(|s| s.lines().count()).unwrap_or(0)
}

fn outcome(path: &Path) -> Value {
    std::fs::read_to_string(path).map(|s| serde_json::from_str(&s).unwrap()).unwrap_or(Value::Null)
}

/// `reins ARGS --store S --output OUT --model script:SCRIPT` with the workspace and the preset.
fn reins_cmd(dir: &Dir, ws: &Path, sub: &[&str], script: &Value, extra: &[&str]) -> (Output, Value) {
    let script_file = dir.file(&format!("script-{}.json", fastrand()), &script.to_string());
    let out_file = dir.0.join("outcome.json");
    let _ = std::fs::remove_file(&out_file);
    let out = reins()
        .args(sub)
        .arg("--model")
        .arg(format!("script:{}", script_file.display()))
        .arg("--store")
        .arg(dir.store())
        .arg("--output")
        .arg(&out_file)
        .arg("--workspace")
        .arg(ws)
        .args(["--preset", "bump=sh -c 'echo x >> runs.log'", "--no-sandbox", "--test-tools"])
        .args(extra)
        .output()
        .unwrap();
    (out, outcome(&out_file))
}

fn fastrand() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn bump_script() -> Value {
    json!([{"content": "", "tool_calls": [{"id": "c1", "name": "run_command", "arguments": {"command": "bump"}}]}])
}

fn done() -> Value {
    json!([{"content": "done"}])
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

fn show(dir: &Dir, id: &str) -> Value {
    let out = reins().args(["sessions", "show", id, "--json", "--store"]).arg(dir.store()).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn event_types(show: &Value) -> Vec<String> {
    show["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "event")
        .map(|e| e["data"]["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Runs the bump script under `--approve writes`: it waits (exit 14), nothing ran. Returns the session id.
fn waiting_run(dir: &Dir, ws: &Path) -> String {
    let (out, o) = reins_cmd(dir, ws, &["run", "go"], &bump_script(), &["--approve", "writes"]);
    assert_eq!(out.status.code(), Some(14), "{}", stderr(&out));
    assert_eq!(o["status"], "awaiting_approval");
    assert_eq!(o["pending"][0]["call_id"], "c1");
    assert_eq!(o["pending"][0]["kind"], "ask");
    assert!(stderr(&out).contains("reins approve"), "{}", stderr(&out));
    assert_eq!(runs(ws), 0, "nothing runs before the decision");
    o["session_id"].as_str().unwrap().to_owned()
}

#[test]
fn approve_runs_the_waiting_call_exactly_once() {
    let (dir, ws) = setup("approve-once");
    let id = waiting_run(&dir, &ws);
    // Resuming without a decision waits again (no terminal here): nothing runs.
    let (out, o) = reins_cmd(&dir, &ws, &["run", "--resume", &id], &done(), &[]);
    assert_eq!(out.status.code(), Some(14), "{}", stderr(&out));
    assert_eq!(o["pending"][0]["call_id"], "c1");
    assert_eq!(runs(&ws), 0);

    let (out, o) = reins_cmd(&dir, &ws, &["approve", &id, "--all"], &done(), &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(o["status"], "completed");
    assert_eq!(runs(&ws), 1);
    assert!(!tool_result(&o, "c1").1, "{o}");
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let decided = lines.iter().find(|l| l["type"] == "approval_decided").expect("approval_decided event");
    assert_eq!((decided["call_id"].as_str(), decided["decision"].as_str()), (Some("c1"), Some("approve")));

    // Deciding again finds nothing waiting: no second question, no second run.
    let (out, _) = reins_cmd(&dir, &ws, &["approve", &id, "--all"], &done(), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("does not wait for an approval"), "{}", stderr(&out));
    assert_eq!(runs(&ws), 1);
    let types = event_types(&show(&dir, &id));
    assert!(types.iter().any(|t| t == "approval_requested") && types.iter().any(|t| t == "approval_decided"));
}

#[test]
fn a_denied_call_never_runs_and_the_model_gets_the_reason() {
    let (dir, ws) = setup("approve-deny");
    let id = waiting_run(&dir, &ws);
    let (out, _) = reins_cmd(&dir, &ws, &["approve", &id, "--deny", "why"], &done(), &[]);
    assert_eq!(out.status.code(), Some(2), "--deny without the calls it denies");
    let (out, o) = reins_cmd(&dir, &ws, &["approve", &id, "--call", "c1", "--deny", "not on a Friday"], &done(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (content, is_error) = tool_result(&o, "c1");
    assert!(is_error && content.contains("not on a Friday"), "{content}");
    assert_eq!(runs(&ws), 0);
}

#[test]
fn edited_arguments_are_validated_again() {
    let (dir, ws) = setup("approve-edit");
    let script = json!([{"content": "", "tool_calls": [
        {"id": "w1", "name": "write_file", "arguments": {"path": "a.txt", "content": "from the model"}}]}]);
    let (out, o) = reins_cmd(&dir, &ws, &["run", "go"], &script, &["--approve", "writes"]);
    assert_eq!(out.status.code(), Some(14), "{}", stderr(&out));
    let id = o["session_id"].as_str().unwrap().to_owned();
    for (bad, needle) in [
        (r#"w1={"path": 5, "content": "x"}"#, "invalid"),
        (r#"w1={"path""#, "not JSON"),
        (r#"zz={"path": "b.txt", "content": "x"}"#, "no call \"zz\""),
    ] {
        let (out, _) = reins_cmd(&dir, &ws, &["approve", &id, "--edit", bad], &done(), &[]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{bad}: {}", stderr(&out));
    }
    // Nothing was recorded by the refused decisions: the session still waits.
    let (out, o) = reins_cmd(&dir, &ws, &["run", "--resume", &id], &done(), &[]);
    assert_eq!(out.status.code(), Some(14), "{}", stderr(&out));
    assert_eq!(o["pending"][0]["call_id"], "w1");
    let (out, o) =
        reins_cmd(&dir, &ws, &["approve", &id, "--edit", r#"w1={"path": "b.txt", "content": "edited"}"#], &done(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(ws.join("b.txt")).unwrap(), "edited");
    assert!(!ws.join("a.txt").exists());
    assert!(tool_result(&o, "w1").0.contains("changed by the approver"));
}

#[test]
fn sigkill_right_after_approving_then_resume_asks_nothing_and_runs_nothing_again() {
    let (dir, ws) = setup("approve-kill");
    let script = json!([{"content": "", "tool_calls": [
        {"id": "s1", "name": "run_command", "arguments": {"command": "slow"}}]}]);
    let slow = "slow=sh -c 'echo $$ > slow.pid; echo x >> runs.log; exec sleep 30'";
    let script_file = dir.file("slow.json", &script.to_string());
    let model = format!("script:{}", script_file.display());
    let base = |sub: &[&str]| {
        let mut c = reins();
        c.args(sub).arg("--model").arg(&model).arg("--store").arg(dir.store()).arg("--workspace").arg(&ws).args([
            "--preset",
            slow,
            "--no-sandbox",
            "--command-timeout",
            "60s",
        ]);
        c
    };
    let out = base(&["run", "go", "--approve", "writes", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(14), "{}", stderr(&out));
    let end: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    let id = end["session_id"].as_str().unwrap().to_owned();

    let mut child = base(&["approve", &id, "--all"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let t0 = Instant::now();
    while runs(&ws) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "the approved call never ran");
        assert!(child.try_wait().unwrap().is_none(), "reins approve ended before the call ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    if let Ok(pid) = std::fs::read_to_string(ws.join("slow.pid")) {
        let _ = std::process::Command::new("kill").args(["-9", pid.trim()]).status();
    }
    assert_eq!(runs(&ws), 1);

    // No second question: the session no longer waits.
    let out = base(&["approve", &id, "--all"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // No second run: a resume gives the cut call the interrupted result and goes on.
    let done_file = dir.file("done.json", &done().to_string());
    let out_file = dir.0.join("resumed.json");
    let out = reins()
        .args(["run", "--resume", &id, "--model"])
        .arg(format!("script:{}", done_file.display()))
        .arg("--store")
        .arg(dir.store())
        .arg("--output")
        .arg(&out_file)
        .arg("--workspace")
        .arg(&ws)
        .args(["--preset", slow, "--no-sandbox"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let o = outcome(&out_file);
    let (content, is_error) = tool_result(&o, "s1");
    assert!(is_error && content.starts_with("interrupted"), "{content}");
    assert_eq!(runs(&ws), 1);
}

/// An agent file with `hooks` (TOML array-of-tables text) and the test tools over `ws`.
fn hooked(dir: &Dir, ws: &Path, hooks: &str, script: &Value, extra: &[&str]) -> (Output, Value) {
    let agent = dir
        .file("agent.toml", &format!("test_tools = true\n[workspace]\npath = {:?}\n{hooks}", ws.display().to_string()));
    let script_file = dir.file(&format!("script-{}.json", fastrand()), &script.to_string());
    let out_file = dir.0.join("outcome.json");
    let _ = std::fs::remove_file(&out_file);
    let out = reins()
        .args(["run", "go", "--agent"])
        .arg(&agent)
        .arg("--model")
        .arg(format!("script:{}", script_file.display()))
        .arg("--store")
        .arg(dir.store())
        .arg("--output")
        .arg(&out_file)
        .args(extra)
        .output()
        .unwrap();
    (out, outcome(&out_file))
}

/// A `[[hooks]]` entry running `sh SCRIPT` (the script written into the test directory).
fn sh_hook(dir: &Dir, name: &str, event: &str, pattern: Option<&str>, body: &str, timeout: &str) -> String {
    let script = dir.file(name, body);
    let pattern = pattern.map(|p| format!("match = {p:?}\n")).unwrap_or_default();
    format!(
        "[[hooks]]\nevent = {event:?}\n{pattern}command = [\"sh\", {:?}]\ntimeout = {timeout:?}\n",
        script.display().to_string()
    )
}

fn echo_script(text: &str) -> Value {
    json!([{"content": "", "tool_calls": [{"id": "e1", "name": "echo", "arguments": {"text": text}}]}, {"content": "done"}])
}

#[test]
fn pre_tool_hooks_rewrite_deny_and_fail_closed() {
    let (dir, ws) = setup("hooks-pre");
    // Rewrite: the call runs with the hook's arguments (validated again).
    let h = sh_hook(
        &dir,
        "rw.sh",
        "pre_tool",
        Some("ec*"),
        "cat > input.json\necho '{\"decision\":\"rewrite\",\"arguments\":{\"text\":\"rewritten\"}}'\n",
        "10s",
    );
    let (out, o) = hooked(&dir, &ws, &h, &echo_script("original"), &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(tool_result(&o, "e1").0.ends_with("\nrewritten"), "{o}");
    // The hook got the call, the run, the session and the workspace on its standard input.
    let input: Value = serde_json::from_str(&std::fs::read_to_string(ws.join("input.json")).unwrap()).unwrap();
    assert_eq!(input["event"], "pre_tool");
    assert_eq!(input["call"]["arguments"]["text"], "original");
    assert_eq!(input["session_id"], o["session_id"]);
    assert_eq!(input["run_id"], o["run_id"]);
    assert_eq!(input["workspace"], json!(ws.display().to_string()));
    let events: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let hook = events.iter().find(|e| e["type"] == "hook").expect("a hook event");
    assert_eq!((hook["hook_event"].as_str(), hook["decision"].as_str()), (Some("pre_tool"), Some("rewrite")));

    // A pattern that does not match: the hook does not run.
    let h = sh_hook(&dir, "no.sh", "pre_tool", Some("write_file"), "echo garbage\n", "10s");
    let (_, o) = hooked(&dir, &ws, &h, &echo_script("kept"), &[]);
    assert_eq!(tool_result(&o, "e1"), ("kept".to_owned(), false));

    // Deny, hang (timeout), garbage, failure: the call never runs, the model gets why.
    let cases = [
        ("deny.sh", "echo '{\"decision\":\"deny\",\"reason\":\"no echo today\"}'\n", "10s", "no echo today"),
        ("hang.sh", "echo $$ > hang.pid\nexec sleep 30\n", "300ms", "timed out"),
        ("garbage.sh", "echo 'sure, go ahead'\n", "10s", "invalid pre_tool answer"),
        ("fail.sh", "echo oops >&2\nexit 3\n", "10s", "oops"),
    ];
    for (name, body, timeout, needle) in cases {
        let h = sh_hook(&dir, name, "pre_tool", None, body, timeout);
        let t0 = Instant::now();
        let (out, o) = hooked(&dir, &ws, &h, &echo_script("hi"), &[]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        let (content, is_error) = tool_result(&o, "e1");
        assert!(is_error && content.contains("denied by hook") && content.contains(needle), "{name}: {content}");
        assert!(!content.contains("\nhi") && content != "hi");
        if name == "hang.sh" {
            assert!(t0.elapsed() < Duration::from_secs(25), "the hanging hook was waited for");
            let pid = std::fs::read_to_string(ws.join("hang.pid")).unwrap();
            let gone = Instant::now();
            while Path::new(&format!("/proc/{}", pid.trim())).exists() {
                assert!(gone.elapsed() < Duration::from_secs(10), "the timed-out hook {pid} is still running");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn a_post_tool_hook_redacts_a_secret_before_it_is_recorded() {
    let (dir, ws) = setup("hooks-redact");
    std::fs::write(ws.join("creds.txt"), "API_KEY=sk-test-7f3a9c21e0\n").unwrap();
    let h = sh_hook(
        &dir,
        "redact.sh",
        "post_tool",
        Some("read_file"),
        "echo '{\"decision\":\"redact\",\"strings\":[\"sk-test-7f3a9c21e0\"]}'\n",
        "10s",
    );
    let script = json!([{"content": "", "tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"path": "creds.txt"}}]},
        {"content": "done"}]);
    let (out, o) = hooked(&dir, &ws, &h, &script, &["--json", "--events-content"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (content, _) = tool_result(&o, "r1");
    assert!(content.contains("API_KEY=[REDACTED]"), "{content}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("sk-test-7f3a9c21e0"), "the secret reached an event");
    // The store is closed (checkpointed into its one file): the secret is nowhere in it.
    let db = std::fs::read(dir.store()).unwrap();
    assert!(!db.is_empty());
    assert!(!db.windows(18).any(|w| w == b"sk-test-7f3a9c21e0"), "the secret reached the session log");
    let export = reins()
        .args(["sessions", "export"])
        .arg(o["session_id"].as_str().unwrap())
        .arg("--store")
        .arg(dir.store())
        .output()
        .unwrap();
    assert!(export.status.success(), "{}", stderr(&export));
    let text = String::from_utf8_lossy(&export.stdout);
    assert!(text.contains("[REDACTED]") && !text.contains("sk-test-7f3a9c21e0"));
}

#[test]
fn a_stop_hook_sends_the_model_back_once() {
    let (dir, ws) = setup("hooks-stop");
    let h = sh_hook(
        &dir,
        "stop.sh",
        "stop",
        None,
        "if [ -f refused.once ]; then echo '{\"decision\":\"accept\"}'; else touch refused.once; \
         echo '{\"decision\":\"refuse\",\"feedback\":\"Run the tests before you finish.\"}'; fi\n",
        "10s",
    );
    let script = json!([{"content": "all done"}, {"content": "tests pass; done"}]);
    let (out, o) = hooked(&dir, &ws, &h, &script, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(o["answer"], "tests pass; done");
    assert_eq!(o["steps"], 2);
    let users: Vec<&str> = o["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(users, vec!["go", "Run the tests before you finish."]);

    // An agent file's bad hook is refused by its key path.
    let (out, _) =
        hooked(&dir, &ws, "[[hooks]]\nevent = \"stop\"\nmatch = \"x\"\ncommand = [\"true\"]\n", &script, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("hooks[0].match"), "{}", stderr(&out));
    let (out, _) = hooked(&dir, &ws, "[[hooks]]\nevent = \"pre_tool\"\ncommand = []\n", &script, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("hooks[0].command"), "{}", stderr(&out));
}

/// `reins replay ID` over the recorded store, with live tools or `--no-tools`.
fn replay(dir: &Dir, id: &str, no_tools: bool) -> Output {
    let mut c = reins();
    c.args(["replay", id, "--store"]).arg(dir.store());
    if no_tools {
        c.arg("--no-tools");
    }
    c.output().unwrap()
}

/// A session with approvals replays: the calls that were asked about are asked about again and answered
/// with the recorded decisions (approve, deny), and a run that continued a waiting batch starts from it.
#[test]
fn a_session_with_approvals_replays_identically() {
    for deny in [false, true] {
        let (dir, ws) = setup(if deny { "replay-deny" } else { "replay-approve" });
        let id = waiting_run(&dir, &ws);
        let decide: &[&str] = if deny { &["--call", "c1", "--deny", "not today"] } else { &["--all"] };
        let (out, o) = reins_cmd(&dir, &ws, &[&["approve", &id][..], decide].concat(), &done(), &[]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(o["status"], "completed");
        for no_tools in [true, false] {
            let out = replay(&dir, &id, no_tools);
            let text = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), Some(0), "deny={deny} no_tools={no_tools}: {text}\n{}", stderr(&out));
            assert!(text.contains("IDENTICAL") || text.contains("identical"), "{text}");
        }
    }
}

/// A session still waiting replays as waiting: the replayed run asks and ends `awaiting_approval` too.
#[test]
fn a_session_still_waiting_replays_as_waiting() {
    let (dir, ws) = setup("replay-waiting");
    let id = waiting_run(&dir, &ws);
    let out = replay(&dir, &id, true);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
}

/// An edit is replayed with the recorded arguments (the session log holds them): with the recorded results,
/// the replayed run puts the same note before the result.
#[test]
fn a_session_with_an_edited_call_replays_identically_with_the_recorded_results() {
    let (dir, ws) = setup("replay-edit");
    let script = json!([{"content": "", "tool_calls": [
        {"id": "w1", "name": "write_file", "arguments": {"path": "a.txt", "content": "from the model"}}]}]);
    let (out, o) = reins_cmd(&dir, &ws, &["run", "go"], &script, &["--approve", "writes"]);
    assert_eq!(out.status.code(), Some(14), "{}", stderr(&out));
    let id = o["session_id"].as_str().unwrap().to_owned();
    let edit = r#"w1={"path": "b.txt", "content": "edited"}"#;
    let (out, _) = reins_cmd(&dir, &ws, &["approve", &id, "--edit", edit], &done(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = replay(&dir, &id, true);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
}

/// Issue 22, item 13: the approval flow of the docs with one script file throughout. The run waits (exit 14);
/// `reins approve ID --all` (the session's recorded model: the same script) runs the call and goes on with the
/// script's second turn — it used to start the script over, ask about c1 again and wait at exit 14 forever.
/// `reins run --resume ID` then continues with the third turn.
#[test]
fn a_script_continues_across_approve_and_resume_at_the_turns_recorded() {
    let (dir, ws) = setup("approve-script-position");
    let script = dir.file(
        "flow.json",
        &json!([
            {"content": "", "tool_calls": [{"id": "c1", "name": "run_command", "arguments": {"command": "bump"}}]},
            {"content": "bumped"},
            {"content": "and again"}
        ])
        .to_string(),
    );
    let out_file = dir.0.join("flow-outcome.json");
    let cmd = |args: &[&str]| {
        let _ = std::fs::remove_file(&out_file);
        let out = reins().args(args).arg("--store").arg(dir.store()).arg("--output").arg(&out_file).output().unwrap();
        (out, outcome(&out_file))
    };
    let model = format!("script:{}", script.display());
    let ws_arg = ws.display().to_string();
    let (out, o) = cmd(&[
        "run",
        "--model",
        &model,
        "--workspace",
        &ws_arg,
        "--preset",
        "bump=sh -c 'echo x >> runs.log'",
        "--no-sandbox",
        "--approve",
        "writes",
        "go",
    ]);
    assert_eq!(out.status.code(), Some(14), "{}", stderr(&out));
    let id = o["session_id"].as_str().unwrap().to_owned();

    let (out, o) = cmd(&["approve", &id, "--all"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!((o["status"].as_str(), o["answer"].as_str()), (Some("completed"), Some("bumped")), "{o}");
    assert_eq!(runs(&ws), 1, "the approved call ran once");
    let ids: Vec<&str> = o["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(ids, ["c1"], "turn 1's call is in the transcript once: {o}");

    let (out, o) = cmd(&["run", "--resume", &id, "once more"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(o["answer"], "and again", "{o}");
    assert_eq!(runs(&ws), 1);
}

#[test]
fn a_hook_gets_a_scrubbed_environment_without_reins_keys() {
    let (dir, ws) = setup("hooks-env");
    let h = sh_hook(&dir, "env.sh", "pre_tool", None, "env > hook-env.txt\necho '{\"decision\":\"allow\"}'\n", "10s");
    let agent =
        dir.file("agent.toml", &format!("test_tools = true\n[workspace]\npath = {:?}\n{h}", ws.display().to_string()));
    let script_file = dir.file("script-env.json", &echo_script("hi").to_string());
    let out = reins()
        .args(["run", "go", "--agent"])
        .arg(&agent)
        .arg("--model")
        .arg(format!("script:{}", script_file.display()))
        .arg("--store")
        .arg(dir.store())
        .env("OPENAI_API_KEY", "sk-hook-must-not-see-this")
        .env("REINS_TEST_PLAIN_VARIABLE", "not-allowed-either")
        .env("HOME", dir.0.display().to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let env = std::fs::read_to_string(ws.join("hook-env.txt")).expect("the hook ran");
    assert!(!env.contains("sk-hook-must-not-see-this"), "the hook saw the API key:\n{env}");
    assert!(!env.contains("REINS_TEST_PLAIN_VARIABLE"), "the hook got a variable outside the allow list:\n{env}");
    // What a program needs to run is still there.
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
    assert!(env.lines().any(|l| l.starts_with("HOME=")), "{env}");
}
