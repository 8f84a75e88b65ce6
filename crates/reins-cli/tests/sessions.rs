//! Sessions through the `reins` binary: recording, listing, showing, exporting, resuming after SIGKILL,
//! replay and its divergence report, damaged stores.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use reins::{CharCounter, Message, Transcript};
use serde_json::{Value, json};

mod common;
use common::{Dir, reins};

fn run(dir: &Dir, script: &Value, extra: &[&str]) -> (Output, Value) {
    let script = dir.file("script.json", &script.to_string());
    let out_file = dir.0.join("outcome.json");
    let _ = std::fs::remove_file(&out_file);
    let out = reins()
        .arg("run")
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("--output")
        .arg(&out_file)
        .arg("--store")
        .arg(dir.store())
        .args(extra)
        .output()
        .unwrap();
    let outcome = std::fs::read_to_string(&out_file).map(|s| serde_json::from_str(&s).unwrap()).unwrap_or(Value::Null);
    (out, outcome)
}

fn sessions(dir: &Dir, args: &[&str]) -> Output {
    reins().arg("sessions").args(args).arg("--store").arg(dir.store()).output().unwrap()
}

fn show_json(dir: &Dir, id: &str) -> Value {
    let out = sessions(dir, &["show", id, "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn transcript(show: &Value) -> Vec<Message> {
    show["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "message")
        .map(|e| serde_json::from_value(e["data"].clone()).unwrap())
        .collect()
}

fn echo_script() -> Value {
    json!([
        {"content": "", "tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "hi"}}],
         "usage": {"input_tokens": 10, "output_tokens": 3}},
        {"content": "done", "usage": {"input_tokens": 12, "output_tokens": 1}}
    ])
}

#[test]
fn a_run_is_recorded_listed_shown_and_exported() {
    let dir = Dir::new("record");
    let (out, outcome) = run(&dir, &echo_script(), &["--test-tools", "--json", "do it"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = outcome["session_id"].as_str().expect("the outcome file carries the session id").to_owned();
    let events: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.first().unwrap()["type"], "run_start");
    assert_eq!(events.first().unwrap()["session_id"], json!(id));
    assert_eq!(events.last().unwrap()["type"], "run_end");
    assert_eq!(events.last().unwrap()["session_id"], json!(id));

    let list = sessions(&dir, &["list", "--json"]);
    let rows: Vec<Value> =
        String::from_utf8_lossy(&list.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 1, "{}", String::from_utf8_lossy(&list.stderr));
    assert_eq!(rows[0]["id"], json!(id));
    assert_eq!((rows[0]["status"].as_str(), rows[0]["steps"].as_u64()), (Some("completed"), Some(2)));
    assert_eq!((rows[0]["input_tokens"].as_u64(), rows[0]["output_tokens"].as_u64()), (Some(22), Some(4)));
    let table = String::from_utf8_lossy(&sessions(&dir, &["list"]).stdout).to_string();
    assert!(table.contains(&id) && table.contains("completed") && table.contains("26"), "{table}");

    let show = show_json(&dir, &id[..8]);
    let messages = transcript(&show);
    assert_eq!(serde_json::to_value(&messages).unwrap(), outcome["messages"]);
    let readable = String::from_utf8_lossy(&sessions(&dir, &["show", &id]).stdout).to_string();
    assert!(readable.contains("echo") && readable.contains("assistant: done"), "{readable}");

    let export = sessions(&dir, &["export", &id]);
    let lines: Vec<Value> =
        String::from_utf8_lossy(&export.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["type"], "session");
    assert_eq!(lines.len(), 1 + show["entries"].as_array().unwrap().len());

    // A reader that stops early (`reins sessions show ID | head`): no panic, the command's own exit code.
    for args in [&["show", id.as_str()][..], &["list"][..], &["export", id.as_str()][..]] {
        let mut child = reins()
            .arg("sessions")
            .args(args)
            .arg("--store")
            .arg(dir.store())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !stderr.contains("panicked"), "{args:?}: {:?} {stderr}", out.status);
    }

    // Unknown ids and --no-store.
    let missing = sessions(&dir, &["show", "nope"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no session"));
    let script = dir.file("again.json", &echo_script().to_string());
    let out_file = dir.0.join("again-outcome.json");
    let out = reins()
        .args(["run", "--test-tools", "--no-store", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--output")
        .arg(&out_file)
        .arg("again")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert!(outcome.get("session_id").is_none());
    assert_eq!(outcome["status"], "completed");
    assert_eq!(String::from_utf8_lossy(&sessions(&dir, &["list", "--json"]).stdout).lines().count(), 1);
}

#[test]
fn a_killed_run_resumes_coherently_again_and_again() {
    let dir = Dir::new("kill");
    // Slow model turns: a kill lands between or inside steps.
    let turns: Vec<Value> = (0..6)
        .map(|i| {
            json!({"delay_ms": 40, "content": format!("turn {i}"), "tool_calls": [
            {"id": format!("a{i}"), "name": "echo", "arguments": {"text": format!("x{i}")}},
            {"id": format!("b{i}"), "name": "echo", "arguments": {"text": format!("y{i}")}}]})
        })
        // A script continues at the turns its session recorded: a run resumed after the session finished takes
        // the next "finished".
        .chain(std::iter::repeat_n(json!({"content": "finished"}), 14))
        .collect();
    let script = dir.file("slow.json", &Value::Array(turns).to_string());
    let model = format!("script:{}", script.display());
    let mut id: Option<String> = None;
    let mut kills = 0;
    for round in 0..12u64 {
        let mut cmd = reins();
        cmd.arg("run").arg("--model").arg(&model).arg("--test-tools").arg("--json").arg("--store").arg(dir.store());
        match &id {
            None => cmd.arg("go"),
            Some(id) => cmd.arg("--resume").arg(id).arg("continue"),
        };
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let mut done = false;
        // The first run is killed only once its session is in the store (on a loaded machine start-up
        // alone can outlast the kill time), so later rounds have a session to resume.
        if id.is_none() {
            let waited = Instant::now();
            while waited.elapsed() < Duration::from_secs(60) {
                if child.try_wait().unwrap().is_some() {
                    done = true;
                    break;
                }
                if !sessions(&dir, &["list", "--json"]).stdout.is_empty() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let at = Duration::from_millis(30 + (round * 37) % 150);
        let t0 = Instant::now();
        while !done && t0.elapsed() < at {
            if child.try_wait().unwrap().is_some() {
                done = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if !done {
            child.kill().unwrap();
            kills += 1;
        }
        let status = child.wait().unwrap();
        if done {
            assert!(status.success() || status.code() == Some(3), "exit {status:?}");
        }
        if id.is_none() {
            let list = sessions(&dir, &["list", "--json"]);
            id = String::from_utf8_lossy(&list.stdout).lines().next().map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["id"].as_str().unwrap().to_owned()
            });
        }
        if let Some(id) = &id {
            let show = show_json(&dir, id);
            let messages = transcript(&show);
            // Dense positions, a coherent prefix, each result once.
            let indices: Vec<u64> = show["entries"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["kind"] == "message")
                .map(|e| e["msg_index"].as_u64().unwrap())
                .collect();
            assert_eq!(indices, (0..indices.len() as u64).collect::<Vec<_>>());
            Transcript::from_messages(messages, &CharCounter).unwrap();
        }
    }
    assert!(kills > 0);
    // A final, uninterrupted resume completes the session coherently.
    let id = id.expect("a session was started");
    let out = reins()
        .args(["run", "--model", &model, "--test-tools", "--resume", &id, "--store"])
        .arg(dir.store())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let messages = transcript(&show_json(&dir, &id));
    assert!(Transcript::from_messages(messages.clone(), &CharCounter).unwrap().is_complete());
    assert_eq!(messages.last().map(Message::content), Some("finished"));
}

fn workspace_script(dir: &Dir) -> Value {
    let _ = dir;
    json!([
        {"content": "", "tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"path": "notes.txt"}}]},
        {"content": "", "tool_calls": [{"id": "w1", "name": "write_file", "arguments": {"path": "out.txt", "content": "made"}}]},
        {"content": "read and wrote"}
    ])
}

#[test]
fn replay_reproduces_a_session_and_reports_a_changed_workspace() {
    let dir = Dir::new("replay");
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "alpha\n").unwrap();
    let ws_arg = ws.display().to_string();
    let (out, outcome) = run(&dir, &workspace_script(&dir), &["--workspace", &ws_arg, "go"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = outcome["session_id"].as_str().unwrap().to_owned();
    std::fs::remove_file(ws.join("out.txt")).ok();

    let replay =
        |extra: &[&str]| reins().arg("replay").arg(&id).arg("--store").arg(dir.store()).args(extra).output().unwrap();
    let same = replay(&["--json"]);
    assert_eq!(same.status.code(), Some(0), "{}", String::from_utf8_lossy(&same.stderr));
    let report: Value = serde_json::from_slice(&same.stdout).unwrap();
    assert_eq!(report["divergence"], Value::Null);
    assert!(!ws.join("out.txt").exists(), "the replay ran in a scratch copy");

    // A deliberate change: the file the model read now says something else.
    std::fs::write(ws.join("notes.txt"), "beta\n").unwrap();
    let changed = replay(&[]);
    assert_eq!(changed.status.code(), Some(10));
    let text = String::from_utf8_lossy(&changed.stdout);
    assert!(text.contains("DIVERGED") && text.contains("tool result differs at transcript item 2"), "{text}");
    // The recorded results replay identically without running anything.
    assert_eq!(replay(&["--no-tools"]).status.code(), Some(0));
}

#[test]
fn a_damaged_store_is_a_clear_error() {
    let dir = Dir::new("damaged");
    std::fs::write(dir.store(), "not a database, just text ".repeat(200)).unwrap();
    let out = sessions(&dir, &["list"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("corrupt or truncated") && err.contains("sessions.db"), "{err}");
    let (out, _) = run(&dir, &echo_script(), &["--test-tools", "go"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("corrupt or truncated"));
    let _ = Path::new("");
}

/// The session ids `sessions list --json` finds in the store `store`.
fn listed(store: &Path) -> Vec<String> {
    let out = reins().args(["sessions", "list", "--json", "--store"]).arg(store).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_store_file_alone_holds_every_session_once_a_run_has_exited() {
    let dir = Dir::new("one-file");
    let copies = Dir::new("one-file-copies");
    let mut ids: Vec<String> = Vec::new();
    for round in 0..4 {
        let extra: Vec<&str> = match ids.first() {
            // A resume too: its run is appended to an existing session.
            Some(id) if round == 3 => vec!["--test-tools", "--resume", id, "again"],
            _ => vec!["--test-tools", "go"],
        };
        // The resume continues the script where its session is: past its end, so it gets one more turn.
        let script = if round == 3 { json!([{"content": "again"}]) } else { echo_script() };
        let (out, outcome) = run(&dir, &script, &extra);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let id = outcome["session_id"].as_str().unwrap().to_owned();
        if !ids.contains(&id) {
            ids.push(id);
        }
        // Only the file, as "one file" invites: no write-ahead log beside it holds anything.
        let wal = dir.0.join("sessions.db-wal");
        assert!(std::fs::metadata(&wal).map_or(0, |m| m.len()) == 0, "round {round}: the WAL still holds data");
        let copy = copies.0.join(format!("copy-{round}.db"));
        std::fs::copy(dir.store(), &copy).unwrap();
        let mut found = listed(&copy);
        found.sort();
        let mut expected = ids.clone();
        expected.sort();
        assert_eq!(found, expected, "round {round}");
        let show = reins().args(["sessions", "show", &ids[0], "--json", "--store"]).arg(&copy).output().unwrap();
        let show: Value = serde_json::from_slice(&show.stdout).unwrap();
        assert_eq!(show["session"]["runs"], if round == 3 { 2 } else { 1 }, "round {round}");
        assert_eq!(show["session"]["status"], "completed");
    }
}

#[test]
fn sessions_backup_copies_every_session_while_another_process_writes() {
    use std::io::BufRead as _;
    use std::os::unix::fs::PermissionsExt as _;
    let dir = Dir::new("backup");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (out, outcome) = run(&dir, &echo_script(), &["--test-tools", "go"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        ids.push(outcome["session_id"].as_str().unwrap().to_owned());
    }
    // A third run holds the store open, waiting on a slow model turn after a recorded tool call.
    let slow = dir.file(
        "slow.json",
        &json!([
            {"tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "hi"}}]},
            {"delay_ms": 60_000, "content": "late"}
        ])
        .to_string(),
    );
    let mut child = reins()
        .args(["run", "--test-tools", "--json", "--model"])
        .arg(format!("script:{}", slow.display()))
        .arg("--store")
        .arg(dir.store())
        .arg("slow")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let running = loop {
        let line: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        if line["type"] == "model_start" && line["step"] == 2 {
            break line;
        }
    };
    let copy = dir.0.join("backup.db");
    let out = reins().args(["sessions", "backup"]).arg(&copy).arg("--store").arg(dir.store()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777, 0o600);
    // The copy is one file: moved on its own, it holds every session, the running one with its tool call.
    let moved = dir.0.join("moved");
    std::fs::create_dir_all(&moved).unwrap();
    std::fs::copy(&copy, moved.join("copy.db")).unwrap();
    let found = listed(&moved.join("copy.db"));
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(ids.iter().all(|id| found.contains(id)), "{found:?}");
    let run_id = running["run_id"].as_str().unwrap();
    let third = found.iter().find(|id| !ids.contains(id)).unwrap();
    let show =
        reins().args(["sessions", "show", third, "--json", "--store"]).arg(moved.join("copy.db")).output().unwrap();
    let show: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(show["session"]["status"], "running");
    assert!(show["entries"].as_array().unwrap().iter().any(|e| e["data"]["run_id"] == run_id));
    assert_eq!(transcript(&show).len(), 3, "the prompt, the call and its result");

    // An existing file is never overwritten: exit 2, the file untouched.
    let before = std::fs::read(&copy).unwrap();
    let again = reins().args(["sessions", "backup"]).arg(&copy).arg("--store").arg(dir.store()).output().unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    assert_eq!(std::fs::read(&copy).unwrap(), before);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn each_run_of_a_session_replays_with_its_own_settings() {
    let dir = Dir::new("replay-runs");
    let long = "0123456789".repeat(20);
    let echo_then = |answer: &str| {
        json!([
            {"tool_calls": [{"id": format!("{answer}-1"), "name": "echo", "arguments": {"text": long}}]},
            {"content": answer}
        ])
    };
    // Run 1: results cut to 10 characters. Run 2 (a resume, which keeps the recorded agent unless a flag or
    // an agent file overrides it): the default cut. Run 3: no test tools.
    let (out, outcome) = run(&dir, &echo_then("one"), &["--test-tools", "--max-tool-result-chars", "10", "go"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = outcome["session_id"].as_str().unwrap().to_owned();
    assert_eq!(outcome["messages"][2]["content"], "012[…196]9");
    let (out, outcome) =
        run(&dir, &echo_then("two"), &["--test-tools", "--max-tool-result-chars", "32000", "--resume", &id, "again"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(outcome["messages"][6]["content"], json!(long));
    let no_tools = dir.file("no-tools.toml", "test_tools = false\n");
    let no_tools = no_tools.to_string_lossy();
    let (out, _) = run(&dir, &json!([{"content": "three"}]), &["--agent", &no_tools, "--resume", &id, "last"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    for extra in [&[][..], &["--no-tools"][..]] {
        let replay = reins().arg("replay").arg(&id).arg("--store").arg(dir.store()).args(extra).output().unwrap();
        let text = String::from_utf8_lossy(&replay.stdout);
        assert_eq!(replay.status.code(), Some(0), "{extra:?}: {text}{}", String::from_utf8_lossy(&replay.stderr));
        assert!(text.contains("identical (3 run(s)"), "{text}");
    }
}

#[test]
fn compactions_are_recorded_shown_and_replayed() {
    let dir = Dir::new("compactions");
    let mut script = Vec::new();
    for i in 0..30 {
        script.push(
            json!({"tool_calls": [{"id": format!("c{i}"), "name": "echo", "arguments": {"text": "z".repeat(200)}}]}),
        );
    }
    script.push(json!({"content": "done"}));
    let summaries: Vec<Value> = (0..30).map(|i| json!({"content": format!("summary {i}")})).collect();
    let summaries = dir.file("summaries.json", &Value::Array(summaries).to_string());
    let compact = format!("script:{}", summaries.display());
    let flags =
        ["--test-tools", "--max-context-chars", "8000", "--context-strategy", "summarize", "--compact-model", &compact];
    let mut args = flags.to_vec();
    args.push("go");
    let (out, outcome) = run(&dir, &Value::Array(script), &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let n = outcome["compactions"].as_u64().unwrap();
    assert!(n >= 1, "{outcome}");
    let id = outcome["session_id"].as_str().unwrap().to_owned();
    let messages = transcript(&show_json(&dir, &id));
    assert_eq!(serde_json::to_value(&messages).unwrap(), outcome["messages"]);
    assert_eq!(messages.iter().filter(|m| matches!(m, Message::Summary { .. })).count() as u64, n);
    let readable = String::from_utf8_lossy(&sessions(&dir, &["show", &id]).stdout).to_string();
    assert!(readable.contains("⇊ compaction: replaces ") && readable.contains("summary 0"), "{readable}");
    let replay = reins().arg("replay").arg(&id).arg("--store").arg(dir.store()).output().unwrap();
    assert!(replay.status.success(), "{}", String::from_utf8_lossy(&replay.stderr));
}
