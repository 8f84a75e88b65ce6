//! The agent file as a user meets it: `reins config show` (every key round-trips, flags override, a profile
//! applies, bad keys and values are exit 2 naming their path), `reins run --resume ID` with no other flag
//! rebuilding the recorded agent, and `reins replay` of a session that used presets and an MCP server.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

mod common;
use common::{Dir, python};

fn every_key() -> String {
    std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-agent/tests/data/every_key.toml"))
        .unwrap()
}

fn reins(dir: &Dir) -> Command {
    let mut c = common::reins();
    c.env("REINS_STORE", dir.store()).env_remove("OPENAI_API_KEY").env_remove("ANTHROPIC_API_KEY");
    c
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn show_json(dir: &Dir, args: &[&str]) -> Value {
    let out = reins(dir).args(["config", "show", "--json"]).args(args).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

fn origin(shown: &Value, key: &str) -> Value {
    shown["entries"].as_array().unwrap().iter().find(|e| e["key"] == key).map_or(Value::Null, |e| e["origin"].clone())
}

#[test]
fn an_agent_file_with_every_key_round_trips_through_config_show() {
    let dir = Dir::new("agent-show");
    std::fs::create_dir_all(dir.0.join("repo")).unwrap();
    let file = dir.file("every.toml", &every_key());
    let file_arg = file.display().to_string();
    let first = show_json(&dir, &["--agent", &file_arg]);
    let def = &first["definition"];
    assert_eq!(def["model"], "openai-chat:qwen3");
    assert_eq!(def["workspace"]["path"], dir.0.join("repo").display().to_string(), "relative to the file");
    assert_eq!(def["limits"]["max_steps"], 20);
    assert_eq!(def["presets"].as_array().unwrap().len(), 2);
    assert_eq!(def["mcp"]["web"]["url"], "https://mcp.example.test/mcp");
    assert_eq!(origin(&first, "limits.max_steps")["kind"], "agent_file");
    assert_eq!(origin(&first, "presets.grep")["kind"], "agent_file");
    assert_eq!(first["api_key"]["env"], "OPENAI_API_KEY");
    // Secrets are masked.
    let all = first.to_string();
    for secret in ["secret-team-token", "secret-bearer", "ghp_secret"] {
        assert!(!all.contains(secret), "{secret} shown: {all}");
    }
    assert_eq!(def["provider"]["headers"]["X-Team"], "<redacted>");

    // The readable form is itself an agent file: fed back, it resolves to the same definition.
    let out = reins(&dir).args(["config", "show", "--agent", &file_arg]).output().unwrap();
    let (shown, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(shown.contains("max_steps = 20  # agent file "), "{shown}");
    assert!(shown.contains("[[presets]]") && shown.contains("[mcp.fs]"), "{shown}");
    let again_file = dir.file("shown.toml", &shown);
    let again = show_json(&dir, &["--agent", &again_file.display().to_string()]);
    assert_eq!(again["definition"], first["definition"], "{shown}");
    // `--config` is the same flag.
    assert_eq!(show_json(&dir, &["--config", &file_arg])["definition"], first["definition"]);
}

#[test]
fn flags_override_the_file_and_a_profile_applies_beneath_it() {
    let dir = Dir::new("agent-layers");
    let script = dir.file("turns.json", "[{\"content\": \"hi\"}]");
    let file = dir.file(
        "a.toml",
        "model = \"script:turns.json\"\ntest_tools = true\n[limits]\nmax_steps = 7\ntimeout = \"1m\"\n[context]\nmax_context_chars = 5000\n",
    );
    let file_arg = file.display().to_string();
    let shown = show_json(&dir, &["--agent", &file_arg, "--max-steps", "3", "--max-context-tokens", "900"]);
    let def = &shown["definition"];
    assert_eq!(def["model"], format!("script:{}", script.display()));
    assert_eq!(def["limits"]["max_steps"], 3);
    assert_eq!(origin(&shown, "limits.max_steps")["kind"], "flag");
    assert_eq!(def["limits"]["timeout"], "1m");
    assert_eq!(origin(&shown, "limits.timeout")["kind"], "agent_file");
    assert_eq!(def["context"]["max_context_tokens"], 900);
    assert!(def["context"].get("max_context_chars").is_none(), "the flag's budget replaces the file's: {def}");
    assert_eq!(origin(&shown, "context.max_tool_result_chars")["kind"], "default");

    // The user config: its defaults beneath the file, a profile over them.
    let config_home = dir.0.join("config");
    std::fs::create_dir_all(config_home.join("reins")).unwrap();
    std::fs::write(
        config_home.join("reins/config.toml"),
        "[limits]\nmax_tool_calls = 11\nmax_steps = 40\n[profiles.careful.limits]\nmax_tool_calls = 2\n",
    )
    .unwrap();
    let with_profile = |args: &[&str]| {
        let out = reins(&dir)
            .env("XDG_CONFIG_HOME", &config_home)
            .args(["config", "show", "--json"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let plain = with_profile(&["--agent", &file_arg]);
    assert_eq!(plain["definition"]["limits"]["max_tool_calls"], 11);
    assert_eq!(plain["definition"]["limits"]["max_steps"], 7, "the agent file is over the user config");
    assert_eq!(origin(&plain, "limits.max_tool_calls")["kind"], "user_config");
    let careful = with_profile(&["--agent", &file_arg, "--profile", "careful"]);
    assert_eq!(careful["definition"]["limits"]["max_tool_calls"], 2);
    assert_eq!(origin(&careful, "limits.max_tool_calls")["name"], "careful");
    // The run gets it: two tool calls fit, a third is refused by the profile's limit.
    let calls = dir.file(
        "calls.json",
        &json!([{"tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "a"}},
                                {"id": "2", "name": "echo", "arguments": {"text": "b"}},
                                {"id": "3", "name": "echo", "arguments": {"text": "c"}}]}])
        .to_string(),
    );
    let out = reins(&dir)
        .env("XDG_CONFIG_HOME", &config_home)
        .args(["run", "--agent", &file_arg, "--profile", "careful", "--model"])
        .arg(format!("script:{}", calls.display()))
        .arg("go")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "tool_limit from the profile: {}", text(&out).1);
    let out = reins(&dir)
        .env("XDG_CONFIG_HOME", &config_home)
        .args(["config", "show", "--profile", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("no profile \"nope\"") && text(&out).1.contains("careful"), "{}", text(&out).1);
}

#[test]
fn bad_agent_files_are_exit_2_naming_the_key() {
    let dir = Dir::new("agent-bad");
    for (content, needle) in [
        ("[limits]\nmax_step = 3\n", "limits.max_step: unknown key"),
        ("[limits]\nmax_steps = 0\n", "limits.max_steps: expected a positive integer, not 0"),
        ("[[presets]]\nname = \"x\"\nprogram = \"y\"\nbogus = 1\n", "presets[0].bogus: unknown key"),
        ("[mcp.fs]\ncommand = \"x\"\nargz = []\n", "mcp.fs.argz: unknown key"),
        ("[provider]\ntemperature = 9\n", "provider.temperature: expected a number from 0 to 2"),
        ("[limits\n", "line 1"),
    ] {
        let file = dir.file("bad.toml", content);
        for cmd in [&["run", "hi"][..], &["config", "show"][..]] {
            let out = reins(&dir).args(cmd).arg("--agent").arg(&file).output().unwrap();
            let (_, stderr) = text(&out);
            assert_eq!(out.status.code(), Some(2), "{content:?} {cmd:?}: {stderr}");
            assert!(stderr.contains(needle), "{content:?}: {stderr}");
            assert!(stderr.contains(&file.display().to_string()), "the file is named: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        }
    }
    let out = reins(&dir).args(["run", "--agent", "/nonexistent/agent.toml", "hi"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = reins(&dir).args(["run", "hi"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("no model"), "{}", text(&out).1);
}

fn tools_of_runs(dir: &Dir, id: &str) -> Vec<(Value, Value, Value)> {
    let out = reins(dir).args(["sessions", "show", id, "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "run_start")
        .map(|e| {
            let names: Vec<Value> = e["data"]["tools"].as_array().unwrap().iter().map(|t| t["name"].clone()).collect();
            (Value::from(names), e["data"]["limits"].clone(), e["data"]["config"]["agent"].clone())
        })
        .collect()
}

#[test]
fn a_session_resumed_with_no_flags_rebuilds_the_same_agent() {
    let dir = Dir::new("agent-resume");
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "hello\n").unwrap();
    dir.file(
        "turns.json",
        &json!([
            {"tool_calls": [{"id": "1", "name": "run_command", "arguments": {"command": "hi"}},
                            {"id": "2", "name": "echo", "arguments": {"text": "x"}}]},
            {"content": "done"},
            // The resumed runs continue the script where the session is.
            {"content": "done again"},
            {"content": "done once more"}
        ])
        .to_string(),
    );
    let file = dir.file(
        "agent.toml",
        "model = \"script:turns.json\"\ntest_tools = true\ninstructions = \"Be brief.\"\n\
         [limits]\nmax_steps = 6\nmax_tool_calls = 9\ntool_timeout = \"20s\"\n[context]\nmax_tool_result_chars = 999\n\
         [workspace]\npath = \"ws\"\n[commands]\nsandbox = \"off\"\n[[presets]]\nname = \"hi\"\nprogram = \"echo\"\nargs = [\"hi\"]\n",
    );
    let out_file = dir.0.join("outcome.json");
    let out =
        reins(&dir).arg("run").arg("--agent").arg(&file).arg("--output").arg(&out_file).arg("go").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let id = outcome["session_id"].as_str().unwrap().to_owned();
    assert_eq!(outcome["instructions"].as_str().map(|s| s.ends_with("Be brief.")), Some(true), "{outcome}");

    // From another directory, with no flag but the follow-up: the same agent (a user config written since does
    // not change it: the recorded agent is whole).
    let config_home = dir.0.join("config");
    std::fs::create_dir_all(config_home.join("reins")).unwrap();
    std::fs::write(config_home.join("reins/config.toml"), "[limits]\nmax_tool_calls = 1\nmax_input_tokens = 5\n")
        .unwrap();
    let out = reins(&dir)
        .env("XDG_CONFIG_HOME", &config_home)
        .current_dir("/")
        .args(["run", "--resume", &id, "--output"])
        .arg(&out_file)
        .arg("again")
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("override"), "no flag, nothing overridden: {stderr}");
    let resumed: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert_eq!(resumed["status"], "completed");
    assert_eq!(resumed["instructions"], outcome["instructions"]);
    let runs = tools_of_runs(&dir, &id);
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].0, runs[1].0, "same tools");
    assert_eq!(runs[0].1, runs[1].1, "same limits");
    assert_eq!(runs[0].2, runs[1].2, "the same agent recorded");
    assert_eq!(runs[1].1["max_steps"], 6);
    assert!(runs[1].0.as_array().unwrap().contains(&json!("run_command")), "{:?}", runs[1].0);

    // A flag still overrides, and the CLI says so.
    let out = reins(&dir).args(["run", "--resume", &id, "--max-steps", "4", "more"]).output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("override the agent recorded") && stderr.contains("limits.max_steps = 4 (was 6)"),
        "{stderr}"
    );
    assert_eq!(tools_of_runs(&dir, &id)[2].1["max_steps"], 4);
    // `config show --resume` shows what a resume would build.
    let shown = show_json(&dir, &["--resume", &id]);
    assert_eq!(shown["definition"]["limits"]["max_steps"], 4);
    assert_eq!(origin(&shown, "limits.max_steps")["kind"], "session");
}

#[test]
fn replay_rebuilds_presets_and_mcp_servers_from_the_session() {
    let dir = Dir::new("agent-replay");
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("data.txt"), "one\ntwo\n").unwrap();
    let server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reins-mcp/tests/servers/py_server.py");
    dir.file(
        "turns.json",
        &json!([
            {"tool_calls": [{"id": "1", "name": "run_command", "arguments": {"command": "count"}},
                            {"id": "2", "name": "py__add", "arguments": {"a": 2, "b": 3}},
                            {"id": "3", "name": "py__shout", "arguments": {"text": "replayed"}}]},
            {"content": "done"}
        ])
        .to_string(),
    );
    let file = dir.file(
        "agent.toml",
        &format!(
            "model = \"script:turns.json\"\n[workspace]\npath = \"ws\"\n[commands]\nsandbox = \"off\"\n\
             [[presets]]\nname = \"count\"\nprogram = \"wc\"\nargs = [\"-l\", \"data.txt\"]\n\
             [mcp.py]\ncommand = {:?}\nargs = [{:?}]\nenv = {{ API_TOKEN = \"never-recorded\" }}\nstartup_timeout = \"60s\"\n",
            python().display().to_string(),
            server.display().to_string()
        ),
    );
    let out_file = dir.0.join("outcome.json");
    let out =
        reins(&dir).arg("run").arg("--agent").arg(&file).arg("--output").arg(&out_file).arg("go").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let results: Vec<&Value> = outcome["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").collect();
    assert!(results[0]["content"].as_str().unwrap().contains("2 data.txt"), "{results:?}");
    assert_eq!(results[1]["content"], "5");
    assert_eq!(results[2]["content"], "REPLAYED");
    let id = outcome["session_id"].as_str().unwrap().to_owned();

    // The session holds the agent, without the secret.
    let out = reins(&dir).args(["sessions", "show", &id, "--json"]).output().unwrap();
    let (stdout, _) = text(&out);
    assert!(!stdout.contains("never-recorded"), "a secret was recorded");
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(shown["agent"]["presets"][0]["name"], "count");
    assert_eq!(shown["agent"]["mcp"]["py"]["env"]["API_TOKEN"], "<redacted>");

    // A secret that was not recorded must be given again to rebuild the server: the replay says which (or
    // replays the recorded results).
    let out = reins(&dir).args(["replay", &id]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("mcp.py.env.API_TOKEN: this secret was not recorded"), "{stderr}");
    let out = reins(&dir).args(["replay", &id, "--no-tools"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);

    // Without a secret (every MCP env value is one, whatever its name), the whole agent is rebuilt: the preset
    // runs in a scratch copy of the workspace and the MCP server is started again; identical, exit 0, from any
    // directory.
    let without_env = std::fs::read_to_string(&file).unwrap().replace("env = { API_TOKEN = \"never-recorded\" }\n", "");
    assert!(!without_env.contains("env ="), "{without_env}");
    std::fs::write(&file, without_env).unwrap();
    let out =
        reins(&dir).arg("run").arg("--agent").arg(&file).arg("--output").arg(&out_file).arg("go").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let id = outcome["session_id"].as_str().unwrap().to_owned();
    let out = reins(&dir).current_dir(Path::new("/")).args(["replay", &id]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("identical"), "{stdout}");
    // A changed workspace is a divergence the preset shows.
    std::fs::write(ws.join("data.txt"), "one\n").unwrap();
    let out = reins(&dir).args(["replay", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(10), "{}", text(&out).0);
}

#[test]
fn the_version_names_the_commit() {
    let out = common::reins().arg("--version").output().unwrap();
    let (stdout, _) = text(&out);
    assert!(stdout.starts_with(&format!("reins {} (commit ", env!("CARGO_PKG_VERSION"))), "{stdout}");
}
