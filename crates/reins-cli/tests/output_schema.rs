//! `reins run --output-schema FILE` and `output_schema` in an agent file, through the real binary.

use std::process::Output;

use serde_json::{Value, json};

mod common;
use common::{Dir, reins};

const SCHEMA: &str = r#"{"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
  "required": ["city", "n"], "additionalProperties": false}"#;

fn run(dir: &Dir, script: Value, extra: &[&str]) -> (Output, Option<Value>) {
    let script = dir.file("script.json", &script.to_string());
    let out_file = dir.0.join("outcome.json");
    let _ = std::fs::remove_file(&out_file);
    let out = reins()
        .arg("run")
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("--output")
        .arg(&out_file)
        .args(["--test-tools", "--no-store"])
        .args(extra)
        .arg("which city?")
        .output()
        .unwrap();
    let outcome = std::fs::read_to_string(&out_file).ok().map(|s| serde_json::from_str(&s).unwrap());
    (out, outcome)
}

fn run_end(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn echo(id: &str, text: &str) -> Value {
    json!({"content": "", "tool_calls": [{"id": id, "name": "echo", "arguments": {"text": text}}]})
}

fn final_answer(id: &str, args: Value) -> Value {
    json!({"content": "", "tool_calls": [{"id": id, "name": "final_answer", "arguments": args}]})
}

#[test]
fn two_tools_then_a_valid_answer_sets_output_and_run_end_says_it_validated() {
    let dir = Dir::new("schema-ok");
    let schema = dir.file("schema.json", SCHEMA);
    let script =
        json!([echo("1", "Lyon"), echo("2", "500000"), final_answer("3", json!({"city": "Lyon", "n": 500000}))]);
    let (out, outcome) = run(&dir, script, &["--json", "--output-schema", schema.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let o = outcome.unwrap();
    assert_eq!(o["status"], "completed");
    assert_eq!(o["output"], json!({"city": "Lyon", "n": 500000}));
    assert_eq!(o["tool_calls"], 2);
    let end = run_end(&out);
    assert_eq!(end["type"], "run_end");
    assert_eq!(end["output_valid"], true);
}

#[test]
fn an_invalid_answer_goes_back_with_its_failures_and_the_model_recovers() {
    let dir = Dir::new("schema-recover");
    let schema = dir.file("schema.json", SCHEMA);
    let script = json!([
        final_answer("1", json!({"city": "Lyon", "n": "many"})),
        final_answer("2", json!({"city": "Lyon", "n": 5}))
    ]);
    let (out, outcome) = run(&dir, script, &["--output-schema", schema.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let o = outcome.unwrap();
    assert_eq!(o["output"], json!({"city": "Lyon", "n": 5}));
    let error = &o["messages"][2];
    assert_eq!(error["is_error"], true);
    assert!(error["content"].as_str().unwrap().contains("/n"), "{error}");
    // The readable answer is the output's JSON.
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), r#"{"city":"Lyon","n":5}"#);
}

#[test]
fn without_a_valid_answer_the_run_ends_output_invalid_exit_16_and_the_outcome_output_is_null() {
    let dir = Dir::new("schema-none");
    let schema = dir.file("schema.json", SCHEMA);
    let script = json!([{"content": "Lyon"}, {"content": "Lyon, really"}]);
    let (out, outcome) = run(&dir, script.clone(), &["--output-schema", schema.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(16), "{}", String::from_utf8_lossy(&out.stderr));
    let o = outcome.unwrap();
    assert_eq!(o["status"], "output_invalid");
    assert_eq!(o["answer"], "Lyon, really");
    assert!(o["error"].as_str().unwrap().contains("did not match the output schema"), "{o}");
    assert_eq!(o["output"], Value::Null);
    // The JSON events say so too: run_end's status, output_valid false, and the answer it kept.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("output: none") && stderr.contains("■ output_invalid"), "{stderr}");
    let (json_out, _) = run(&dir, script, &["--json", "--output-schema", schema.to_str().unwrap()]);
    assert_eq!(json_out.status.code(), Some(16));
    let end = run_end(&json_out);
    assert_eq!(end["status"], "output_invalid");
    assert_eq!(end["output_valid"], false);
    assert_eq!(end["answer"], "Lyon, really");
    // Without a schema the outcome still has the key.
    let (_, o) = run(&dir, json!([{"content": "x"}]), &[]);
    assert_eq!(o.unwrap().as_object().unwrap().get("output"), Some(&Value::Null));
}

#[test]
fn a_bad_schema_file_is_named_by_its_flag() {
    let dir = Dir::new("schema-bad");
    for (name, text, says) in [
        ("a.json", "{", "not valid JSON"),
        ("b.json", r#"{"type": 7}"#, "invalid output schema"),
        ("c.json", "12", "invalid output schema"),
    ] {
        let schema = dir.file(name, text);
        let (out, _) = run(&dir, json!([{"content": "x"}]), &["--output-schema", schema.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("--output-schema") && err.contains(says), "{err}");
    }
    let (out, _) = run(&dir, json!([{"content": "x"}]), &["--output-schema", "/dev/zero"]);
    assert_eq!(out.status.code(), Some(2));
    let (out, _) = run(&dir, json!([{"content": "x"}]), &["--output-schema", dir.0.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn an_agent_file_gives_the_schema_inline_or_as_a_relative_file() {
    let dir = Dir::new("schema-agent");
    std::fs::create_dir_all(dir.0.join("agents")).unwrap();
    dir.file("agents/schema.json", SCHEMA);
    let script = dir.file("script.json", &json!([final_answer("1", json!({"city": "Nice", "n": 1}))]).to_string());
    let file_agent = dir.file(
        "agents/file.toml",
        &format!("model = \"script:{}\"\noutput_schema = \"schema.json\"\n", script.display()),
    );
    let inline_agent = dir.file(
        "agents/inline.toml",
        &format!(
            "model = \"script:{}\"\n[output_schema]\ntype = \"object\"\nrequired = [\"city\"]\n[output_schema.properties.city]\ntype = \"string\"\n",
            script.display()
        ),
    );
    for agent in [&file_agent, &inline_agent] {
        let out_file = dir.0.join("o.json");
        let out = reins()
            .args([
                "run",
                "--no-store",
                "--agent",
                agent.to_str().unwrap(),
                "--output",
                out_file.to_str().unwrap(),
                "go",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let o: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
        assert_eq!(o["output"]["city"], "Nice");
    }
    // A bad inline schema is named by its key.
    let bad = dir.file("agents/bad.toml", "[output_schema]\ntype = 5\n");
    let out = reins().args(["run", "--no-store", "--agent", bad.to_str().unwrap(), "go"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("output_schema"), "{err}");
}

#[test]
fn a_resumed_session_keeps_the_recorded_schema_even_when_its_file_is_gone() {
    let dir = Dir::new("schema-resume");
    let schema = dir.file("schema.json", SCHEMA);
    let store = dir.store();
    let script = dir.file("script.json", &json!([{"content": "thinking"}]).to_string());
    let out = reins()
        .args(["run", "--store", store.to_str().unwrap(), "--model"])
        .arg(format!("script:{}", script.display()))
        .args(["--output-schema", schema.to_str().unwrap(), "--max-steps", "1", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_file(&schema).unwrap();
    let list = reins().args(["sessions", "list", "--json", "--store", store.to_str().unwrap()]).output().unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    let id = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v["id"].as_str().map(str::to_owned))
        .or_else(|| serde_json::from_str::<Value>(&text).ok()?.as_array()?.first()?["id"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no session: {text}"));
    std::fs::write(&script, json!([final_answer("1", json!({"city": "Metz", "n": 2}))]).to_string()).unwrap();
    let out_file = dir.0.join("o.json");
    let out = reins()
        .args(["run", "--store", store.to_str().unwrap(), "--resume", &id, "--max-steps", "5"])
        .args(["--output", out_file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let o: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert_eq!(o["output"], json!({"city": "Metz", "n": 2}));
}
