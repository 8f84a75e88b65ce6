//! The conventions of a current CLI, through the real binary: short flags, `-c KEY=VALUE`, shell completions and
//! the man page, colour only when wanted, human durations, `sessions rm|prune`, and a recorded demo.

use std::io::Write as _;
use std::process::{Output, Stdio};

use serde_json::{Value, json};

mod common;
use common::{Dir, reins};

fn script(dir: &Dir, turns: Value) -> String {
    format!("script:{}", dir.file("s.json", &turns.to_string()).display())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn outcome(dir: &Dir) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.0.join("outcome.json")).unwrap()).unwrap()
}

#[test]
fn completions_for_bash_are_a_script_bash_accepts() {
    let out = reins().args(["completions", "bash"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let script = String::from_utf8(out.stdout).unwrap();
    assert!(script.contains("--max-steps") && script.contains("sessions"), "{script}");
    let mut bash = std::process::Command::new("bash").arg("-n").stdin(Stdio::piped()).spawn().unwrap();
    bash.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    assert!(bash.wait().unwrap().success(), "bash -n refused the completion script");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = reins().args(["completions", shell]).output().unwrap();
        assert!(out.status.success() && !out.stdout.is_empty(), "{shell}: {}", stderr(&out));
    }
    assert_eq!(reins().args(["completions", "tcsh"]).output().unwrap().status.code(), Some(2));
}

#[test]
fn the_man_page_is_roff_naming_the_commands() {
    let out = reins().arg("man").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.starts_with(".ie") || page.contains(".TH reins"), "{page}");
    assert!(page.contains("completions") && page.contains("sessions"), "{page}");
}

#[test]
fn no_color_leaves_no_escape_sequence_and_clicolor_force_colours() {
    let dir = Dir::new("conv-colour");
    let model = script(
        &dir,
        json!([{"content": "", "tool_calls": [{"id": "1", "name": "fail", "arguments": {"message": "no"}}]}, {"content": "done"}]),
    );
    let run = |env: &[(&str, &str)]| {
        let mut c = reins();
        c.env_remove("NO_COLOR").env_remove("CLICOLOR_FORCE");
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.args(["run", "--no-store", "--test-tools", "-m", &model, "go"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        out
    };
    let forced = run(&[("CLICOLOR_FORCE", "1")]);
    assert!(forced.stderr.contains(&0x1b), "{}", stderr(&forced));
    // The answer on stdout is never coloured.
    assert_eq!(String::from_utf8_lossy(&forced.stdout), "done\n");
    for env in [&[("NO_COLOR", "1"), ("CLICOLOR_FORCE", "1")][..], &[][..]] {
        let out = run(env);
        assert!(!out.stderr.contains(&0x1b) && !out.stdout.contains(&0x1b), "{env:?}: {}", stderr(&out));
    }
}

#[test]
fn readable_progress_shows_durations_as_people_read_them() {
    let dir = Dir::new("conv-durations");
    let model = script(&dir, json!([{"content": "hi"}]));
    let out = reins().args(["run", "--no-store", "-m", &model, "go"]).output().unwrap();
    let text = stderr(&out);
    let step = text.lines().find(|l| l.contains("step 1 · model ")).unwrap_or_else(|| panic!("{text}"));
    // A scripted response takes well under 10 ms: one decimal, then the unit.
    let shown = step.split("model ").nth(1).unwrap().split(" · ").next().unwrap();
    assert!(shown.ends_with(" ms") || shown.ends_with(" s"), "{step}");
}

#[test]
fn short_flags_m_o_w_and_c_overrides_reach_the_run() {
    let dir = Dir::new("conv-short");
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let model = script(
        &dir,
        json!([{"content": "", "tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "a"}}]},
               {"content": "", "tool_calls": [{"id": "2", "name": "echo", "arguments": {"text": "b"}}]},
               {"content": "done"}]),
    );
    let out_file = dir.0.join("outcome.json");
    let out = reins()
        .args(["run", "--no-store", "--test-tools", "-m", &model, "-o", out_file.to_str().unwrap()])
        .args(["-w", ws.to_str().unwrap(), "-c", "limits.max_steps=2", "go"])
        .output()
        .unwrap();
    // -c limits.max_steps=2 stops the three-turn script at two steps.
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let o = outcome(&dir);
    assert_eq!(o["status"], "step_limit");
    assert_eq!(o["steps"], 2);
    // -w gave the workspace tools (the first model call was offered them): config show says where values came from.
    let out = reins()
        .args(["config", "show", "--json", "-m", &model, "-w", ws.to_str().unwrap()])
        .args(["-c", "limits.max_steps=7", "-c", "limits.max_steps=9", "-c", "instructions=be brief"])
        .args(["-c", "provider.price = { input_per_mtok = 1.0, output_per_mtok = 2.0 }"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    let def = &shown["definition"];
    assert_eq!(def["limits"]["max_steps"], 9, "a later -c wins: {def}");
    assert_eq!(def["instructions"], "be brief", "a value that is no TOML is a string: {def}");
    assert_eq!(def["provider"]["price"]["input_per_mtok"], 1.0, "{def}");
    assert!(def["workspace"].to_string().contains("ws"), "{def}");
    // An explicit flag still beats -c.
    let out = reins()
        .args(["config", "show", "--json", "-m", &model, "-c", "limits.max_steps=7", "--max-steps", "4"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["definition"]["limits"]["max_steps"], 4);
}

#[test]
fn bad_c_overrides_are_refused_naming_the_key() {
    let dir = Dir::new("conv-bad-c");
    let model = script(&dir, json!([{"content": "x"}]));
    for (set, says) in [
        ("limits.max_stepz=5", "limits.max_stepz"),
        ("limits.max_steps=0", "limits.max_steps"),
        ("no_such_key=1", "no_such_key"),
        ("limits.max_steps", "expected KEY=VALUE"),
        ("=3", "the key is empty"),
    ] {
        let out = reins().args(["run", "--no-store", "-m", &model, "-c", set, "go"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{set}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(&format!("-c {set}")) && err.contains(says), "{set}: {err}");
    }
}

fn sessions(dir: &Dir, args: &[&str]) -> Output {
    reins().arg("sessions").args(args).arg("--store").arg(dir.store()).output().unwrap()
}

fn recorded(dir: &Dir) -> String {
    let model = script(dir, json!([{"content": "x"}]));
    let out_file = dir.0.join("outcome.json");
    let out = reins()
        .args(["run", "-m", &model, "--store", dir.store().to_str().unwrap(), "-o", out_file.to_str().unwrap(), "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    outcome(dir)["session_id"].as_str().unwrap().to_owned()
}

fn listed(dir: &Dir) -> Vec<String> {
    let out = sessions(dir, &["list", "--json"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn sessions_rm_deletes_the_named_sessions_and_refuses_unknown_ones() {
    let dir = Dir::new("conv-rm");
    let (a, b, c) = (recorded(&dir), recorded(&dir), recorded(&dir));
    let out = sessions(&dir, &["rm", &a, &b[..8]]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("deleted {a}\ndeleted {b}\n"));
    assert_eq!(listed(&dir), [c.as_str()]);
    assert_eq!(sessions(&dir, &["show", &a]).status.code(), Some(2));
    // An unknown id is an error (exit 2); the known ones given with it still go.
    let out = sessions(&dir, &["rm", "0000dead", &c]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no session 0000dead"), "{}", stderr(&out));
    assert!(listed(&dir).is_empty());
}

#[test]
fn sessions_prune_deletes_only_the_sessions_older_than_the_age() {
    let dir = Dir::new("conv-prune");
    let (old, new) = (recorded(&dir), recorded(&dir));
    // Age one session by hand: it was last written in 2020.
    let conn = rusqlite::Connection::open(dir.store()).unwrap();
    conn.execute("UPDATE sessions SET updated_at = '2020-01-01T00:00:00.000Z' WHERE id = ?1", [&old]).unwrap();
    drop(conn);
    let out = sessions(&dir, &["prune", "--older-than", "30d", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("would delete {old}")));
    assert_eq!(listed(&dir).len(), 2, "a dry run deletes nothing");
    let out = sessions(&dir, &["prune", "--older-than", "30d"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("deleted 1 session(s)"), "{}", stderr(&out));
    assert_eq!(listed(&dir), [new]);
    assert_eq!(sessions(&dir, &["prune", "--older-than", "soon"]).status.code(), Some(2));
}

#[test]
fn the_demo_records_its_session_and_says_how_to_look_at_it() {
    let dir = Dir::new("conv-demo");
    let out = reins().arg("demo").env("REINS_STORE", dir.store()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let ids = listed(&dir);
    assert_eq!(ids.len(), 1, "{text}");
    assert!(text.contains(&format!("reins sessions view {}", ids[0])), "{text}");
    let shown = sessions(&dir, &["show", &ids[0]]);
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    assert!(String::from_utf8_lossy(&shown.stdout).contains("Release announced"));
}

#[test]
fn a_model_call_on_a_terminal_shows_a_heartbeat_then_its_line() {
    let dir = Dir::new("conv-heartbeat");
    // A response that takes 4 s: the heartbeat shows from the first second.
    let model = script(&dir, json!([{"delay_ms": 4000, "content": "done"}]));
    let mut c = reins();
    // The pseudo-terminal is the run's stdin, stdout and stderr.
    c.stdin(Stdio::inherit()).args(["run", "--no-store", "-m", &model, "go"]).env("TERM", "xterm");
    let options = rexpect::reader::Options::new().timeout_ms(Some(60_000)).strip_ansi_escape_codes(true);
    let mut p = rexpect::session::spawn_with_options(c, options).unwrap();
    // (rexpect reads the terminal one byte a char: the needles are ASCII.)
    p.exp_string(" model call ").unwrap();
    p.exp_string(" s").unwrap();
    let rest = p.exp_eof().unwrap();
    assert!(rest.contains("step 1") && rest.contains("done"), "{rest:?}");
    match p.process().wait().unwrap() {
        rexpect::process::wait::WaitStatus::Exited(_, code) => assert_eq!(code, 0, "{rest:?}"),
        other => panic!("{other:?}"),
    }
}
