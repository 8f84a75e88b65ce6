//! Finish reasons, cost and the prompt cache as the `reins` command shows them (issue 11): `truncated` and
//! `refused` statuses, an agent file's `[provider] price` for a script model, `--max-cost-usd`.

use std::process::Output;

use serde_json::{Value, json};

mod common;
use common::{Dir, reins};

fn run_agent(dir: &Dir, script: Value, agent: &str, extra: &[&str]) -> (Output, Option<Value>) {
    let script_path = dir.file("script.json", &script.to_string());
    let agent = format!("model = \"script:{}\"\ntest_tools = true\n{agent}", script_path.display());
    let agent_path = dir.file("agent.toml", &agent);
    let out_file = dir.0.join("outcome.json");
    let _ = std::fs::remove_file(&out_file);
    let out = reins()
        .arg("run")
        .arg("--agent")
        .arg(&agent_path)
        .args(if extra.contains(&"--store") { &[][..] } else { &["--no-store"][..] })
        .arg("--output")
        .arg(&out_file)
        .args(extra)
        .arg("do the task")
        .output()
        .unwrap();
    let outcome = std::fs::read_to_string(&out_file).ok().map(|s| serde_json::from_str(&s).unwrap());
    (out, outcome)
}

fn step(usage: (u64, u64)) -> Value {
    json!({"tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "a"}}],
           "usage": {"input_tokens": usage.0, "output_tokens": usage.1}})
}

#[test]
fn the_cost_limit_stops_a_scripted_run_priced_by_the_agent_file() {
    let dir = Dir::new("cost-limit");
    // $2 per million in, $10 per million out: each step costs 1000×2 + 100×10 = $0.003.
    let script =
        json!([step((1000, 100)), step((1000, 100)), step((1000, 100)), step((1000, 100)), {"content": "never"}]);
    let agent = "[provider]\nprice = { input_per_mtok = 2.0, output_per_mtok = 10.0, cache_read_per_mtok = 0.2 }\n";
    let (out, outcome) = run_agent(&dir, script.clone(), agent, &["--max-cost-usd", "0.005", "--json"]);
    assert_eq!(out.status.code(), Some(11), "{}", String::from_utf8_lossy(&out.stderr));
    let o = outcome.unwrap();
    assert_eq!(o["status"], "cost_limit");
    assert_eq!(o["steps"], 2);
    assert!((o["cost_usd"].as_f64().unwrap() - 0.006).abs() < 1e-12, "{o}");
    assert!(o["error"].as_str().unwrap().contains("max_cost_usd"), "{o}");
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let ends: Vec<&Value> = lines.iter().filter(|e| e["type"] == "model_end").collect();
    assert!((ends[0]["cost_usd"].as_f64().unwrap() - 0.003).abs() < 1e-12, "{:?}", ends[0]);
    let end = lines.last().unwrap();
    assert_eq!((end["type"].as_str(), end["status"].as_str()), (Some("run_end"), Some("cost_limit")));
    assert!((end["cost_usd"].as_f64().unwrap() - 0.006).abs() < 1e-12, "{end}");

    // The same limit in the agent file; the readable summary gives the cost.
    let agent = format!("{agent}[limits]\nmax_cost_usd = 0.005\n");
    let (out, _) = run_agent(&dir, script, &agent, &[]);
    assert_eq!(out.status.code(), Some(11));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cost_limit") && stderr.contains("cost ≈ $0.006"), "{stderr}");
}

#[test]
fn a_cost_limit_without_a_price_and_bad_prices_are_refused() {
    let dir = Dir::new("cost-bad");
    let (out, _) = run_agent(&dir, json!([{"content": "x"}]), "", &["--max-cost-usd", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("price"), "{}", String::from_utf8_lossy(&out.stderr));
    let (out, _) = run_agent(&dir, json!([{"content": "x"}]), "", &["--max-cost-usd", "-1"]);
    assert_eq!(out.status.code(), Some(2));
    let (out, _) = run_agent(
        &dir,
        json!([{"content": "x"}]),
        "[provider]\nprice = { input_per_mtok = -1.0, output_per_mtok = 1.0 }\n",
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("provider.price.input_per_mtok"), "{stderr}");
    // Another [provider] key still does not apply to a script.
    let (out, _) = run_agent(&dir, json!([{"content": "x"}]), "[provider]\nmax_response_tokens = 5\n", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("provider.max_response_tokens"));
}

#[test]
fn a_length_stop_is_truncated_and_a_refusal_refused_with_their_exit_codes() {
    let dir = Dir::new("finish");
    for (finish, status, code) in
        [("length", "truncated", 12), ("refusal", "refused", 13), ("content_filter", "refused", 13)]
    {
        let script = json!([{"content": "partial ans", "finish_reason": finish}]);
        let (out, outcome) = run_agent(&dir, script, "", &["--json"]);
        assert_eq!(out.status.code(), Some(code), "{finish}: {}", String::from_utf8_lossy(&out.stderr));
        let o = outcome.unwrap();
        assert_eq!(o["status"], status);
        assert_eq!(o["answer"], "partial ans");
        assert_eq!(o["finish_reason"], finish);
        assert!(o["error"].is_string());
        let stdout = String::from_utf8_lossy(&out.stdout);
        let end: Value = serde_json::from_str(stdout.lines().find(|l| l.contains("\"model_end\"")).unwrap()).unwrap();
        assert_eq!(end["finish_reason"], finish);
    }
    let (out, outcome) = run_agent(&dir, json!([{"content": "fine", "finish_reason": "stop"}]), "", &[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(outcome.unwrap()["status"], "completed");
}

#[test]
fn the_summary_says_how_much_input_was_read_from_the_cache() {
    let dir = Dir::new("cache-summary");
    let script = json!([{"content": "ok", "usage": {"input_tokens": 1000, "output_tokens": 5,
                                                    "cache_read_tokens": 750, "cache_write_tokens": 200}}]);
    let store = dir.store();
    let (out, outcome) = run_agent(&dir, script, "", &["--store", store.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("750 read from cache, 75%") && stderr.contains("200 written to it"), "{stderr}");
    let outcome = outcome.unwrap();
    let id = outcome["session_id"].as_str().unwrap();
    let shown = reins().args(["sessions", "show", id, "--store"]).arg(&store).output().unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("1000 in (750 read from cache, 75%, 200 written to it) / 5 out tokens"), "{text}");
    let u = &outcome["usage"];
    assert_eq!((u["cached_input_tokens"].as_u64(), u["cache_read_tokens"].as_u64()), (Some(750), Some(750)));
    assert_eq!(u["cache_write_tokens"], 200);
}

/// Issue 22, item 8: under `--max-cost-usd` a sub-agent's model of unknown price (6 M tokens that counted as $0)
/// and an unpriced `--compact-model` are refused before the run starts, each named; nothing runs.
#[test]
fn a_cost_limit_refuses_an_unpriced_sub_agent_or_summary_model_before_the_run() {
    let dir = Dir::new("cost-sub");
    let child = dir.file(
        "child.json",
        &json!([{"content": "spent", "usage": {"input_tokens": 6_000_000, "output_tokens": 10}}]).to_string(),
    );
    let priced = "[provider]\nprice = { input_per_mtok = 1.0, output_per_mtok = 1.0 }\n";
    let script =
        json!([{"tool_calls": [{"id": "1", "name": "helper", "arguments": {"task": "go"}}]}, {"content": "done"}]);
    let agent = format!("{priced}[agents.helper]\nmodel = \"script:{}\"\n", child.display());
    let (out, outcome) = run_agent(&dir, script.clone(), &agent, &["--max-cost-usd", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("agents.helper.model") && stderr.contains("no known price"), "{stderr}");
    assert!(stderr.contains("child.json"), "the model is named: {stderr}");
    assert!(outcome.is_none(), "nothing ran");

    let (out, outcome) = run_agent(
        &dir,
        script,
        priced,
        &["--max-cost-usd", "1", "--compact-model", &format!("script:{}", child.display())],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("context.compact_model") && stderr.contains("no known price"), "{stderr}");
    assert!(outcome.is_none(), "nothing ran");
}
