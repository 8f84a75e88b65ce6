//! `reins` attacked from outside: terminal escapes from a hostile model or tool, signals other than Ctrl-C,
//! stdout that cannot be written, special files as input, overlong ids. Real processes, real signals.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::{Dir, reins};

/// OSC 52 (write the clipboard), a screen clear, a window title, a C1 CSI and a right-to-left override.
const HOSTILE: &str = "A\u{1b}]52;c;cm0gLXJmIH4=\u{7}B\u{1b}[2J\u{1b}[HC\u{1b}]0;pwned\u{7}D\u{9b}31mE\u{202e}F\u{7f}";

/// True when `bytes` hold a control character (C0 other than newline and tab, DEL, C1) or a bidi override.
fn has_control(bytes: &[u8]) -> bool {
    String::from_utf8_lossy(bytes)
        .chars()
        .any(|c| (c.is_control() && c != '\n' && c != '\t') || ('\u{202a}'..='\u{202e}').contains(&c))
}

/// Waits for `child` to exit, at most `secs` seconds (then kills it and fails).
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

/// Polls `check` every 10 ms for up to 20 s.
fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < Duration::from_secs(20), "{what} never happened");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The live (not zombie) processes whose command line holds `arg`, with their process group.
fn processes_with(arg: &str) -> Vec<(u32, u32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if !cmdline.split(|b| *b == 0).any(|a| a == arg.as_bytes()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let fields: Vec<&str> =
            stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
        if fields.first() == Some(&"Z") {
            continue;
        }
        found.push((pid, fields.get(2).and_then(|g| g.parse().ok()).unwrap_or(0)));
    }
    found
}

/// True while any live process is in the process group `pgid`.
fn group_alive(pgid: u32) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { return false };
        let fields: Vec<&str> =
            stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
        fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str())
    })
}

fn send(signal: &str, pid: u32) {
    assert!(Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status().unwrap().success());
}

/// The entries of `dir` whose names start with `prefix`.
fn entries(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(prefix)).map(|e| e.path()).collect()
        })
        .unwrap_or_default()
}

/// A unique argument for `sleep`, so that the test finds its own process and no other.
fn unique_sleep(tag: u32) -> String {
    format!("{}.{}{tag}", 29, std::process::id())
}

fn session_status(store: &Path) -> Vec<String> {
    let out = reins().args(["sessions", "list", "--json", "--store"]).arg(store).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["status"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn terminal_escapes_from_the_model_and_tools_are_shown_escaped() {
    let dir = Dir::new("escapes");
    let script = json!([
        {"content": format!("thinking {HOSTILE}"), "tool_calls": [
            {"id": "c1", "name": "echo", "arguments": {"text": HOSTILE}},
            {"id": "c2", "name": "fail", "arguments": {"message": HOSTILE}}
        ]},
        {"content": format!("answer {HOSTILE}\nsecond line")}
    ]);
    let script = dir.file("s.json", &script.to_string());
    let store = dir.store();
    let out_file = dir.0.join("outcome.json");
    let out = reins()
        .args(["run", "--test-tools", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--store")
        .arg(&store)
        .arg("--output")
        .arg(&out_file)
        .arg(format!("prompt {HOSTILE}"))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!has_control(&out.stdout) && !has_control(&out.stderr), "{stdout:?}\n{stderr:?}");
    // Shown, not sent: the sequences are readable; the answer keeps its line break.
    assert!(stderr.contains("A\\x1b]52;c;cm0gLXJmIH4=\\x07B\\x1b[2J"), "{stderr}");
    assert!(stderr.contains("\\u{9b}31mE\\u{202e}F\\x7f"), "{stderr}");
    assert!(stdout.starts_with("answer A\\x1b]52;") && stdout.ends_with("\nsecond line\n"), "{stdout:?}");
    // The outcome file keeps the text exactly (JSON escapes it).
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert!(outcome["answer"].as_str().unwrap().contains(HOSTILE));
    let id = outcome["session_id"].as_str().unwrap().to_owned();

    for args in [vec!["show", id.as_str()], vec!["show", id.as_str(), "--events"], vec!["list"]] {
        let out = reins().arg("sessions").args(&args).arg("--store").arg(&store).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!has_control(&out.stdout) && !has_control(&out.stderr), "{args:?}: {text:?}");
        if args[0] == "show" {
            assert!(text.contains("\\x1b]0;pwned\\x07"), "{text}");
        }
    }
    // A model error quoting hostile text, in the status lines.
    let script = dir.file("e.json", &json!([{"error": HOSTILE}]).to_string());
    let out = reins()
        .args(["run", "--no-store", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("go")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(8));
    assert!(!has_control(&out.stderr), "{:?}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("\\x1b[2J"));
    // A script file name with an escape, quoted in a one-line error.
    let out = reins()
        .args(["run", "--no-store", "--model", "script:/nonexistent/\u{1b}]0;x\u{7}.json", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!has_control(&out.stderr), "{:?}", String::from_utf8_lossy(&out.stderr));
}

/// Runs a preset `sleep` and sends `signal` while it runs: the group is killed, the temp dir removed, the
/// outcome written `aborted`, the session closed, exit 7.
fn signal_mid_command(signal: &str, tag: u32) {
    let dir = Dir::new(&format!("mid-{signal}"));
    let (ws, tmp) = (dir.0.join("ws"), dir.0.join("tmp"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let arg = unique_sleep(tag);
    let script = json!([
        {"tool_calls": [{"id": "1", "name": "run_command", "arguments": {"command": "nap"}}]},
        {"content": "slept"}
    ]);
    let script = dir.file("s.json", &script.to_string());
    let (out_file, events) = (dir.0.join("outcome.json"), dir.0.join("events.jsonl"));
    let store = dir.store();
    let child = reins()
        .env("TMPDIR", &tmp)
        .args(["run", "--json", "--accept-weaker-sandbox", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--workspace")
        .arg(&ws)
        .args(["--preset", &format!("nap=sleep {arg}")])
        .arg("--store")
        .arg(&store)
        .arg("--output")
        .arg(&out_file)
        .arg("nap")
        .stdout(Stdio::from(std::fs::File::create(&events).unwrap()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut found = Vec::new();
    wait_until("the preset's sleep", || {
        found = processes_with(&arg);
        !found.is_empty()
    });
    let (pid, pgid) = found[0];
    assert!(!entries(&tmp, "reins-cmd-").is_empty(), "the command's temp dir exists while it runs");
    send(signal, child.id());
    let out = wait(child, 30);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{signal}: {stderr}");
    assert!(stderr.contains(&format!("{signal} received")), "{stderr}");
    assert!(
        processes_with(&arg).is_empty() && !group_alive(pgid),
        "{signal}: sleep {pid} (group {pgid}) outlived reins"
    );
    assert_eq!(entries(&tmp, "reins-cmd-"), Vec::<PathBuf>::new(), "{signal}: temp dirs left");
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert_eq!(outcome["status"], "aborted");
    let last =
        std::fs::read_to_string(&events).unwrap().lines().last().map(|l| serde_json::from_str::<Value>(l).unwrap());
    assert_eq!(last.as_ref().map(|e| e["type"].clone()), Some(json!("run_end")));
    assert_eq!(session_status(&store), ["aborted"]);
}

#[test]
fn sigterm_mid_command_cleans_up_like_ctrl_c() {
    signal_mid_command("TERM", 1);
}

#[test]
fn sighup_mid_command_cleans_up_like_ctrl_c() {
    signal_mid_command("HUP", 2);
}

#[test]
fn a_signal_during_mcp_start_up_ends_the_run_aborted_with_its_outcome() {
    for (signal, tag) in [("TERM", 3), ("INT", 4)] {
        let dir = Dir::new(&format!("mcp-{signal}"));
        let arg = unique_sleep(tag);
        let script = dir.file("s.json", &json!([{"content": "never asked"}]).to_string());
        let out_file = dir.0.join("outcome.json");
        let store = dir.store();
        let child = reins()
            .args(["run", "--model"])
            .arg(format!("script:{}", script.display()))
            .args(["--mcp", &format!("mute=sleep {arg}")])
            .arg("--store")
            .arg(&store)
            .arg("--output")
            .arg(&out_file)
            .arg("go")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut found = Vec::new();
        wait_until("the MCP server process", || {
            found = processes_with(&arg);
            !found.is_empty()
        });
        send(signal, child.id());
        let out = wait(child, 30);
        assert_eq!(out.status.code(), Some(7), "{signal}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(processes_with(&arg).is_empty() && !group_alive(found[0].1), "{signal}: the server outlived reins");
        let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
        assert_eq!(outcome["status"], "aborted");
        assert_eq!(session_status(&store), ["aborted"]);
    }
}

#[test]
fn replay_keeps_its_scratch_copy_private_and_removes_it_when_interrupted() {
    let dir = Dir::new("replay-sig");
    let (ws, tmp) = (dir.0.join("ws"), dir.0.join("tmp"));
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    // Enough files that the copy takes a while.
    for i in 0..20_000 {
        std::fs::write(ws.join("sub").join(format!("f{i}.txt")), "some content\n").unwrap();
    }
    std::fs::write(ws.join("notes.txt"), "one\ntwo\n").unwrap();
    let script = json!([
        {"tool_calls": [{"id": "1", "name": "read_file", "arguments": {"path": "notes.txt"}}]},
        {"content": "read"}
    ]);
    let script = dir.file("s.json", &script.to_string());
    let out_file = dir.0.join("outcome.json");
    let store = dir.store();
    let out = reins()
        .args(["run", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--workspace")
        .arg(&ws)
        .arg("--store")
        .arg(&store)
        .arg("--output")
        .arg(&out_file)
        .arg("read")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let id = outcome["session_id"].as_str().unwrap().to_owned();

    // Undisturbed: identical, and nothing left behind.
    let out = reins().env("TMPDIR", &tmp).args(["replay", &id, "--store"]).arg(&store).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(entries(&tmp, "reins-replay-"), Vec::<PathBuf>::new());

    // Interrupted while it copies: the scratch copy is private, and removed.
    let child = reins()
        .env("TMPDIR", &tmp)
        .args(["replay", &id, "--store"])
        .arg(&store)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut scratch = Vec::new();
    wait_until("the scratch copy", || {
        scratch = entries(&tmp, "reins-replay-");
        !scratch.is_empty()
    });
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&scratch[0]).map(|m| m.permissions().mode() & 0o777);
    send("INT", child.id());
    let out = wait(child, 30);
    assert_eq!(mode.ok(), Some(0o700), "the scratch copy is private");
    assert_eq!(out.status.code(), Some(7), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(entries(&tmp, "reins-replay-"), Vec::<PathBuf>::new(), "the scratch copy was left behind");

    // Two signals back to back: whether the second one exits at once (130) or comes after the first has been
    // handled (7), the scratch copy is gone.
    let child = reins()
        .env("TMPDIR", &tmp)
        .args(["replay", &id, "--store"])
        .arg(&store)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the scratch copy", || !entries(&tmp, "reins-replay-").is_empty());
    send("TERM", child.id());
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let out = wait(child, 30);
    assert!(matches!(out.status.code(), Some(7 | 143)), "{:?} {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(entries(&tmp, "reins-replay-"), Vec::<PathBuf>::new(), "the scratch copy was left behind");
}

/// Runs `reins args...` with stdout on /dev/full.
fn to_dev_full(args: &[&str], store: &Path) -> Output {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    reins().args(args).arg("--store").arg(store).stdout(Stdio::from(full)).output().unwrap()
}

#[test]
fn a_stdout_that_cannot_be_written_is_exit_1_and_a_closed_pipe_stays_quiet() {
    let dir = Dir::new("stdout");
    let store = dir.store();
    let script = dir.file("s.json", &json!([{"content": "the answer"}]).to_string());
    let model = format!("script:{}", script.display());
    let out = reins().args(["run", "--model", &model, "--store"]).arg(&store).arg("go").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let id = session_ids(&store)[0].clone();
    for args in [
        vec!["sessions", "export", id.as_str()],
        vec!["sessions", "show", id.as_str(), "--json"],
        vec!["sessions", "show", id.as_str()],
        vec!["sessions", "list"],
        vec!["sessions", "list", "--json"],
        vec!["run", "--model", &model, "go"],
        vec!["run", "--json", "--model", &model, "go"],
    ] {
        let out = to_dev_full(&args, &store);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("cannot write to stdout") && err.contains("No space left"), "{args:?}: {err}");
    }
    // What clap prints to stdout too.
    for args in [&["--help"][..], &["--version"], &["run", "--help"], &["help", "sessions"]] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let out = reins().args(args).stdout(Stdio::from(full)).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("cannot write to stdout") && err.contains("No space left"), "{args:?}: {err}");
        let out = reins().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty() && out.stderr.is_empty(), "{args:?}");
    }

    // A reader that goes away after the first byte: the run goes on quietly and ends with its own code.
    let turns: Vec<Value> = (0..6).map(|i| json!({"delay_ms": 50, "tool_calls": [{"id": format!("c{i}"), "name": "echo", "arguments": {"text": "x"}}]})).chain([json!({"content": "done"})]).collect();
    let script = dir.file("slow.json", &Value::Array(turns).to_string());
    let mut child = reins()
        .args(["run", "--json", "--test-tools", "--no-store", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("go")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let out = wait(child, 30);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn session_ids(store: &Path) -> Vec<String> {
    let out = reins().args(["sessions", "list", "--json", "--store"]).arg(store).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Runs `reins run` with `args`, expecting a quick exit 2 whose message holds `needle`.
fn refused(args: &[&str], needle: &str) {
    let child = reins()
        .args(["run", "--no-store"])
        .args(args)
        .arg("go")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait(child, 20);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(needle) && err.lines().count() == 1, "{args:?}: {err}");
}

#[test]
fn special_files_as_script_or_config_are_refused_at_once() {
    let dir = Dir::new("special");
    let fifo = dir.0.join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let fifo = fifo.to_str().unwrap();
    let ok = dir.file("ok.json", "[{\"content\": \"x\"}]");
    let ok = format!("script:{}", ok.display());
    for special in ["/dev/zero", fifo] {
        refused(&["--model", &format!("script:{special}")], "not a regular file");
        refused(&["--model", &ok, "--config", special], "not a regular file");
    }
    let big = dir.file("big.toml", &format!("# {}\n", "x".repeat(2 << 20)));
    refused(&["--model", &ok, "--config", big.to_str().unwrap()], "larger than 1 MiB");
}

#[test]
fn bad_ids_stores_and_scripts_are_clear_bad_input() {
    let dir = Dir::new("ids");
    let store = dir.store();
    let script = dir.file("s.json", &json!([{"content": "x"}]).to_string());
    let out = reins()
        .args(["run", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--store")
        .arg(&store)
        .arg("go")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let long = "a".repeat(100_000);
    for args in
        [vec!["sessions", "show", long.as_str()], vec!["sessions", "export", "%"], vec!["replay", long.as_str()]]
    {
        let out = reins().args(&args).arg("--store").arg(&store).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("no session") && err.len() < 200, "{err}");
    }
    // A directory as the store.
    let out = reins().args(["sessions", "list", "--store"]).arg(&dir.0).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is a directory") && !err.contains("SQLite header"), "{err}");
    // A FIFO (whose open would block for good) or a device as the store.
    let fifo = dir.0.join("fifo.db");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let model = format!("script:{}", script.display());
    for (special, kind) in [(fifo.to_str().unwrap(), "FIFO"), ("/dev/zero", "character device")] {
        for args in
            [vec!["sessions", "list", "--store", special], vec!["run", "--model", &model, "--store", special, "go"]]
        {
            let child = reins().args(&args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
            let out = wait(child, 20);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains(&format!("is not a regular file (it is a {kind})")), "{args:?}: {err}");
        }
    }
    // A key written twice in a script.
    let dup = dir.file("dup.json", r#"[{"content": "first", "content": "second"}]"#);
    refused(&["--model", &format!("script:{}", dup.display())], "duplicate key \"content\"");
}

/// A stdio MCP server of the 2025-11-25 revision (plain JSON-RPC, standard library only) whose name, version and
/// tool description carry terminal escapes.
const HOSTILE_MCP_SERVER: &str = r#"
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    method, id_ = msg.get("method"), msg.get("id")
    if id_ is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "evil\x1b]0;title\x07", "version": "1\x1b[2J"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "t", "description": "reads\x1b]52;c;eA==\x07 files\u202e",
                             "inputSchema": {"type": "object"}}]}
    else:
        # Unknown methods (server/discover among them: this server speaks 2025-11-25) are refused as a
        # conforming server refuses them, so that the client falls back to the initialize handshake.
        print(json.dumps({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": "Method not found"}}),
              flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}), flush=True)
"#;

#[test]
fn mcp_list_shows_what_a_server_says_escaped() {
    let dir = Dir::new("mcp-escapes");
    let server = dir.file("server.py", HOSTILE_MCP_SERVER);
    let out = reins()
        .args(["mcp", "list", "--mcp", &format!("evil=python3 {}", server.display())])
        .args(["--mcp", "broken=sh -c 'printf \"\\033]0;gone\\007\\033[2J\" >&2; exit 3'"])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "one server did not start: {stdout}{stderr}");
    assert!(!has_control(&out.stdout) && !has_control(&out.stderr), "{stdout:?}\n{stderr:?}");
    assert!(stdout.contains("evil\\x1b]0;title\\x07 1\\x1b[2J"), "{stdout}");
    assert!(stdout.contains("reads\\x1b]52;c;eA==\\x07 files\\u{202e}"), "{stdout}");
    assert!(stdout.contains("\\x1b]0;gone\\x07"), "the failed server's stderr, escaped: {stdout}");
}

/// The process id a program wrote to `file`, once it did.
fn pid_in(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file).ok().and_then(|s| s.trim().parse().ok())
}

/// True while the process `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
}

/// Starts `reins` with `args` (stdout and stderr to files of `dir`), waits until the program it starts wrote its
/// pid to `pid_file` and both `sleep ARG` of `sh -c 'sleep ARG & sleep ARG'` run, then kills reins with
/// SIGKILL: the shell, both sleeps and their whole group die (polled up to 20 s).
fn kill_9_mid(what: &str, dir: &Dir, tmp: &Path, arg: &str, pid_file: &Path, args: &[String]) {
    let mut child = reins()
        .env("TMPDIR", tmp)
        .args(args)
        .stdout(Stdio::from(std::fs::File::create(dir.0.join(format!("{what}.out"))).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(dir.0.join(format!("{what}.err"))).unwrap()))
        .spawn()
        .unwrap();
    let mut found = Vec::new();
    wait_until(&format!("the {what}'s two sleeps"), || {
        found = processes_with(arg);
        found.len() == 2 && pid_in(pid_file).is_some()
    });
    let shell = pid_in(pid_file).unwrap();
    let pgid = found[0].1;
    assert_eq!(pgid, shell, "{what}: the shell leads the group of its sleeps");
    send("KILL", child.id());
    child.wait().unwrap();
    wait_until(&format!("the end of the {what}'s processes after kill -9 of reins"), || {
        processes_with(arg).is_empty() && !alive(shell) && !group_alive(pgid)
    });
}

/// `kill -9` of `reins` while a preset command, a hook and an MCP server run — each a shell with a background
/// child, `sh -c 'sleep ARG & sleep ARG'`: nothing it started outlives it (before, the whole group lived on).
/// The command's temp dir stays behind the killed process; the next run that runs a command removes it.
#[test]
fn nothing_reins_starts_outlives_a_kill_9_and_the_next_run_sweeps_the_temp_dir() {
    let dir = Dir::new("kill9");
    let (ws, tmp) = (dir.0.join("ws"), dir.0.join("tmp"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let store = dir.store();

    // A preset command.
    let arg = unique_sleep(11);
    let pid_file = ws.join("preset.pid");
    let script = json!([
        {"tool_calls": [{"id": "1", "name": "run_command", "arguments": {"command": "nap"}}]},
        {"content": "slept"}
    ]);
    let script = dir.file("preset.json", &script.to_string());
    let preset = format!("nap=sh -c 'echo $$ > {}; sleep {arg} & sleep {arg}'", pid_file.display());
    let mut args: Vec<String> = vec!["run".into(), "--accept-weaker-sandbox".into(), "--model".into()];
    args.push(format!("script:{}", script.display()));
    args.extend(["--workspace".into(), ws.display().to_string(), "--preset".into(), preset]);
    args.extend(["--store".into(), store.display().to_string(), "nap".into()]);
    kill_9_mid("preset command", &dir, &tmp, &arg, &pid_file, &args);
    let left = entries(&tmp, "reins-cmd-");
    assert_eq!(left.len(), 1, "the killed run's temp dir stays: {left:?}");

    // A pre_tool hook.
    let arg = unique_sleep(12);
    let pid_file = dir.0.join("hook.pid");
    let agent = dir.file(
        "hook.toml",
        &format!(
            "[[hooks]]\nevent = \"pre_tool\"\ncommand = [\"sh\", \"-c\", \"echo $$ > {}; sleep {arg} & sleep {arg}\"]\n",
            pid_file.display()
        ),
    );
    let script = json!([
        {"tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "hi"}}]},
        {"content": "done"}
    ]);
    let script = dir.file("hook.json", &script.to_string());
    let mut args: Vec<String> = vec!["run".into(), "--test-tools".into(), "--agent".into()];
    args.push(agent.display().to_string());
    args.extend(["--model".into(), format!("script:{}", script.display()), "--no-store".into(), "hi".into()]);
    kill_9_mid("hook", &dir, &tmp, &arg, &pid_file, &args);

    // An MCP server (it never answers: reins is still starting it).
    let arg = unique_sleep(13);
    let pid_file = dir.0.join("mcp.pid");
    let script = dir.file("mcp.json", &json!([{"content": "never asked"}]).to_string());
    let mcp = format!("mute=sh -c 'echo $$ > {}; sleep {arg} & sleep {arg}'", pid_file.display());
    let mut args: Vec<String> = vec!["run".into(), "--model".into(), format!("script:{}", script.display())];
    args.extend(["--mcp".into(), mcp, "--no-store".into(), "go".into()]);
    kill_9_mid("MCP server", &dir, &tmp, &arg, &pid_file, &args);

    // The next run that runs a command removes the temp dir the killed one left, and its own.
    let script = json!([
        {"tool_calls": [{"id": "1", "name": "run_command", "arguments": {"command": "ok"}}]},
        {"content": "fine"}
    ]);
    let script = dir.file("next.json", &script.to_string());
    let out = reins()
        .env("TMPDIR", &tmp)
        .args(["run", "--accept-weaker-sandbox", "--no-store", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--workspace")
        .arg(&ws)
        .args(["--preset", "ok=true", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(entries(&tmp, "reins-cmd-"), Vec::<PathBuf>::new(), "stale temp dirs swept");
}

/// `reins replay` copies at most 1 GiB of files by default (`--max-copy` to change it), counted at their full
/// sizes: a 2 GiB sparse file is refused (exit 2, the flag named) with no scratch copy left, where it used to write
/// 2 GiB of zeros to `$TMPDIR`; under a larger bound the copy keeps its holes. A symlink to a directory outside the
/// workspace is copied as a link, never followed (what it points to is not counted).
#[test]
fn replay_bounds_its_copy_and_does_not_follow_symlinks() {
    let dir = Dir::new("replay-bound");
    let (ws, tmp, outside) = (dir.0.join("ws"), dir.0.join("tmp"), dir.0.join("outside"));
    for d in [&ws, &tmp, &outside] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(ws.join("notes.txt"), "one\ntwo\n").unwrap();
    // Outside the workspace, behind a link: as much as the bound again.
    std::fs::File::create(outside.join("huge")).unwrap().set_len(1 << 30).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("elsewhere")).unwrap();
    let script = json!([
        {"tool_calls": [{"id": "1", "name": "read_file", "arguments": {"path": "notes.txt"}}]},
        {"content": "read"}
    ]);
    let script = dir.file("s.json", &script.to_string());
    let store = dir.store();
    let out_file = dir.0.join("outcome.json");
    let out = reins()
        .args(["run", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--workspace")
        .arg(&ws)
        .arg("--store")
        .arg(&store)
        .arg("--output")
        .arg(&out_file)
        .arg("read")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let id = outcome["session_id"].as_str().unwrap().to_owned();
    let replay = |extra: &[&str]| {
        reins().env("TMPDIR", &tmp).args(["replay", &id, "--store"]).arg(&store).args(extra).output().unwrap()
    };

    // The link is not followed: the 1 GiB behind it does not count, and the replay is identical.
    let out = replay(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    // A 2 GiB sparse file in the workspace passes the default bound: refused, nothing left behind.
    std::fs::File::create(ws.join("sparse.bin")).unwrap().set_len(2 << 30).unwrap();
    let out = replay(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("more than 1 GiB") && stderr.contains("sparse.bin") && stderr.contains("--max-copy"),
        "{stderr}"
    );
    assert_eq!(entries(&tmp, "reins-replay-"), Vec::<PathBuf>::new(), "the scratch copy was left behind");

    // Under a bound that takes it, the copy keeps the holes (the replay still compares equal).
    let out = replay(&["--max-copy", "3GiB"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(entries(&tmp, "reins-replay-"), Vec::<PathBuf>::new());
    let out = replay(&["--max-copy", "lots"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}
