//! `reins eval` through the real binary, offline with script models: checks of every kind, epochs and their
//! reducers, the hidden verifier, kill -9 then resume, an A/B comparison, the suite budget, infrastructure
//! failures kept apart, the reports and the exit codes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{Dir, reins};
use serde_json::{Value, json};

/// A script file: each turn a response.
fn script(dir: &Dir, name: &str, turns: Value) -> PathBuf {
    dir.file(name, &turns.to_string())
}

/// An agent file of a script model at $1 per million input and $2 per million output tokens.
fn agent(dir: &Dir, name: &str, script: &str) -> PathBuf {
    dir.file(
        name,
        &format!("model = \"script:{script}\"\ntest_tools = true\n[provider.price]\ninput_per_mtok = 1.0\noutput_per_mtok = 2.0\n"),
    )
}

fn answer(text: &str) -> Value {
    json!([{"content": text, "usage": {"input_tokens": 100, "output_tokens": 10}}])
}

fn eval(dir: &Dir, args: &[&str]) -> Output {
    reins().arg("eval").args(args).arg("--store").arg(dir.store()).output().unwrap()
}

fn json_of(o: &Output) -> Value {
    let text = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(text.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {text}\nstderr: {}", String::from_utf8_lossy(&o.stderr)))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The attempts recorded for the eval `id`.
fn attempts(dir: &Dir, id: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.0.join("evals").join(id).join("attempts.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn checks_of(attempt: &Value) -> Vec<(String, bool, String)> {
    attempt["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_owned(),
                c["passed"].as_bool().unwrap(),
                c["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

const EVERY_CHECK: &str = r#"
[[cases.checks]]
kind = "equals"
value = '{"answer": 42, "name": "hello world"}'
[[cases.checks]]
kind = "contains"
value = "HELLO"
ignore_case = true
[[cases.checks]]
kind = "regex"
pattern = '"answer":\s*42'
[[cases.checks]]
kind = "json_schema"
schema = { type = "object", required = ["answer"], properties = { answer = { type = "integer" } } }
[[cases.checks]]
kind = "json_pointer"
pointer = "/answer"
value = 42
[[cases.checks]]
kind = "tool_called"
tool = "write_file"
arguments = { path = "out.txt" }
[[cases.checks]]
kind = "tool_not_called"
tool = "fail"
[[cases.checks]]
kind = "tool_order"
tools = ["echo", "write_file"]
[[cases.checks]]
kind = "max_steps"
max = 3
[[cases.checks]]
kind = "max_tool_calls"
max = 2
[[cases.checks]]
kind = "max_cost_usd"
max = 0.01
[[cases.checks]]
kind = "max_duration"
max = "10m"
[[cases.checks]]
kind = "status"
value = "completed"
[[cases.checks]]
kind = "verifier"
command = ["sh", "{verifier}/test.sh"]
files = "tests"
"#;

/// The other way: every check fails on the same run.
const EVERY_CHECK_FAILING: &str = r#"
[[cases.checks]]
kind = "equals"
value = "something else"
[[cases.checks]]
kind = "contains"
value = "HELLO"
[[cases.checks]]
kind = "regex"
pattern = '^\d+$'
[[cases.checks]]
kind = "json_schema"
schema = { type = "object", required = ["missing"] }
[[cases.checks]]
kind = "json_pointer"
pointer = "/answer"
value = 43
[[cases.checks]]
kind = "tool_called"
tool = "write_file"
arguments = { path = "other.txt" }
[[cases.checks]]
kind = "tool_not_called"
tool = "echo"
[[cases.checks]]
kind = "tool_order"
tools = ["write_file", "echo"]
[[cases.checks]]
kind = "max_steps"
max = 1
[[cases.checks]]
kind = "max_tool_calls"
max = 1
[[cases.checks]]
kind = "max_cost_usd"
max = 0.0000001
[[cases.checks]]
kind = "status"
value = "step_limit"
[[cases.checks]]
kind = "verifier"
command = ["sh", "{verifier}/wrong.sh"]
files = "tests"
"#;

/// The run both cases make: echo, write out.txt, answer in JSON.
fn worker_script(dir: &Dir) {
    script(
        dir,
        "work.json",
        json!([
            {"content": "", "tool_calls": [
                {"id": "1", "name": "echo", "arguments": {"text": "hi"}},
                {"id": "2", "name": "write_file", "arguments": {"path": "out.txt", "content": "42"}}],
             "usage": {"input_tokens": 100, "output_tokens": 10}},
            {"content": "{\"answer\": 42, \"name\": \"hello world\"}", "usage": {"input_tokens": 120, "output_tokens": 12}}
        ]),
    );
    agent(dir, "worker.toml", "work.json");
    std::fs::create_dir_all(dir.0.join("fixture")).unwrap();
    dir.file("fixture/seed.txt", "seed\n");
    std::fs::create_dir_all(dir.0.join("tests")).unwrap();
    // The verifier sees the workspace the agent left: out.txt holds 42 and the fixture's seed is there.
    dir.file(
        "tests/test.sh",
        "[ \"$(cat out.txt)\" = 42 ] && [ -f seed.txt ] && echo 1 > \"$REINS_EVAL_LOGS/reward.txt\" || echo 0 > \"$REINS_EVAL_LOGS/reward.txt\"\n",
    );
    dir.file("tests/wrong.sh", "echo '{\"tests\": 0.5, \"lint\": 0.0}' > \"$REINS_EVAL_LOGS/reward.json\"\n");
}

#[test]
fn checks_of_every_kind_pass_and_fail_as_they_should() {
    let dir = Dir::new("eval-checks");
    worker_script(&dir);
    let suite = format!(
        "agent = \"worker.toml\"\n[[cases]]\nid = \"good\"\nprompt = \"work\"\nworkspace = \"fixture\"\n{EVERY_CHECK}\n[[cases]]\nid = \"bad\"\nprompt = \"work\"\nworkspace = \"fixture\"\n{EVERY_CHECK_FAILING}"
    );
    let suite = dir.file("suite.toml", &suite);
    let junit = dir.0.join("junit.xml");
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--json", "--junit", junit.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(20), "a failed case is exit 20: {}", stderr(&o));
    let summary = json_of(&o);
    let id = summary["id"].as_str().unwrap();
    let cases = &summary["agents"][0]["cases"];
    assert_eq!(cases[0]["id"], "good");
    assert_eq!(cases[0]["passed"], true, "{cases}");
    assert_eq!(cases[1]["passed"], false);
    let recorded = attempts(&dir, id);
    let good = recorded.iter().find(|a| a["case"] == "good").unwrap();
    let bad = recorded.iter().find(|a| a["case"] == "bad").unwrap();
    for (kind, passed, reason) in checks_of(good) {
        assert!(passed, "{kind} should pass: {reason}");
    }
    assert_eq!(checks_of(good).len(), 14);
    assert_eq!(good["score"], 1.0);
    let bad_checks = checks_of(bad);
    assert_eq!(bad_checks.len(), 13);
    for (kind, passed, reason) in &bad_checks {
        assert!(!passed, "{kind} should fail: {reason}");
    }
    // The verifier's reward.json: its named numbers, "reward" absent, so their mean.
    let verifier = bad["checks"].as_array().unwrap().last().unwrap();
    assert_eq!(verifier["score"], 0.25, "{verifier}");
    assert!(verifier["reason"].as_str().unwrap().contains("lint=0"), "{verifier}");
    // A weighted score: 0.25 over 13 equal weights.
    assert!((bad["score"].as_f64().unwrap() - 0.25 / 13.0).abs() < 1e-9, "{bad}");
    // Each attempt is a session tagged with the eval, the case and the epoch.
    let store = reins_store::Store::open(dir.store()).unwrap();
    let session = store.load(good["session_id"].as_str().unwrap()).unwrap();
    let runs = session.runs().unwrap();
    let tag = &runs[0].start.config.as_ref().unwrap()["eval"];
    assert_eq!(tag["id"], id);
    assert_eq!(tag["case"], "good");
    assert_eq!(tag["epoch"], 1);
    // JUnit: one testcase per case, the failed one with a failure.
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(xml.matches("<testcase ").count(), 2, "{xml}");
    assert_eq!(xml.matches("<failure ").count(), 1, "{xml}");
    assert!(xml.contains("name=\"bad\""), "{xml}");
}

#[test]
fn the_agent_never_sees_the_verifier_files() {
    let dir = Dir::new("eval-hidden");
    std::fs::create_dir_all(dir.0.join("tests")).unwrap();
    let secret = dir.file("tests/test.sh", "echo secret-check; exit 0\n");
    // The agent tries the verifier's file by its path and by a path out of the workspace, and lists its workspace.
    script(
        &dir,
        "peek.json",
        json!([
            {"content": "", "tool_calls": [
                {"id": "1", "name": "read_file", "arguments": {"path": secret.display().to_string()}},
                {"id": "2", "name": "read_file", "arguments": {"path": "../verifier/test.sh"}},
                {"id": "3", "name": "list_dir", "arguments": {"path": "."}}]},
            {"content": "done"}
        ]),
    );
    agent(&dir, "peek.toml", "peek.json");
    std::fs::create_dir_all(dir.0.join("fixture")).unwrap();
    dir.file("fixture/readme.txt", "hi\n");
    let suite = dir.file(
        "suite.toml",
        "agent = \"peek.toml\"\n[[cases]]\nid = \"peek\"\nprompt = \"look\"\nworkspace = \"fixture\"\n[[cases.checks]]\nkind = \"verifier\"\ncommand = [\"sh\", \"{verifier}/test.sh\"]\nfiles = \"tests\"\n",
    );
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let id = json_of(&o)["id"].as_str().unwrap().to_owned();
    let a = &attempts(&dir, &id)[0];
    let store = reins_store::Store::open(dir.store()).unwrap();
    let messages = store.load(a["session_id"].as_str().unwrap()).unwrap().messages().unwrap();
    let results: Vec<Value> = messages
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .filter(|m| m["role"] == "tool" || m.get("call_id").is_some())
        .collect();
    assert_eq!(results.len(), 3, "{messages:?}");
    for r in &results[..2] {
        assert_eq!(r["is_error"], true, "reading the verifier's file must fail: {r}");
        assert!(!r.to_string().contains("secret-check"), "{r}");
    }
    let listing = results[2].to_string();
    assert!(listing.contains("readme.txt") && !listing.contains("test.sh"), "{listing}");
}

/// A verifier that passes, passes, fails, passes, passes, fails… (a counter file outside the workspace).
fn flaky_suite(dir: &Dir) -> PathBuf {
    script(dir, "ok.json", answer("ok"));
    agent(dir, "a.toml", "ok.json");
    let counter = dir.0.join("counter");
    dir.file(
        "suite.toml",
        &format!(
            "agent = \"a.toml\"\n[[cases]]\nid = \"flaky\"\nprompt = \"p\"\n[[cases.checks]]\nkind = \"verifier\"\ncommand = [\"sh\", \"-c\", \"n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; [ $((n % 3)) -ne 0 ]\"]\n",
            c = counter.display()
        ),
    )
}

#[test]
fn epochs_give_pass_at_k_and_pass_hat_k() {
    let dir = Dir::new("eval-epochs");
    let suite = flaky_suite(&dir);
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--epochs", "3", "--json"]);
    assert_eq!(o.status.code(), Some(20), "{}", stderr(&o));
    let s = json_of(&o);
    let case = &s["agents"][0]["cases"][0];
    // Three attempts: pass, pass, fail. By hand: mean 2/3; pass@1 = 2/3; pass@3 = 1 − C(1,3)/C(3,3) = 1;
    // pass^3 = C(2,3)/C(3,3) = 0.
    assert_eq!(case["attempts"], 3);
    assert_eq!(case["passes"], 2);
    assert!((case["mean"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-12, "{case}");
    assert!((case["pass_at_1"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-12, "{case}");
    assert_eq!(case["pass_at_k"], 1.0);
    assert_eq!(case["pass_hat_k"], 0.0);
    // One case: no spread between cases to measure.
    assert_eq!(s["agents"][0]["se"], 0.0);
    // --min-score below the mean passes the eval.
    let id = s["id"].as_str().unwrap();
    let o = eval(&dir, &["show", id, "--min-score", "0.6"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = eval(&dir, &["show", id, "--min-score", "0.7"]);
    assert_eq!(o.status.code(), Some(20));
}

/// A suite of `n` cases, each answered after `delay_ms` by the script.
fn slow_suite(dir: &Dir, n: usize, delay_ms: u64) -> PathBuf {
    script(
        dir,
        "slow.json",
        json!([{"delay_ms": delay_ms, "content": "ok", "usage": {"input_tokens": 100, "output_tokens": 10}}]),
    );
    agent(dir, "a.toml", "slow.json");
    let ran = dir.0.join("ran.log");
    let mut suite = "agent = \"a.toml\"\n".to_owned();
    for i in 0..n {
        suite.push_str(&format!(
            "[[cases]]\nid = \"c{i}\"\nprompt = \"p\"\n[[cases.checks]]\nkind = \"verifier\"\ncommand = [\"sh\", \"-c\", \"echo c{i} >> {}\"]\n",
            ran.display()
        ));
    }
    dir.file("suite.toml", &suite)
}

#[test]
fn kill_9_mid_suite_then_resume_runs_no_completed_attempt_again() {
    let dir = Dir::new("eval-kill");
    let suite = slow_suite(&dir, 6, 300);
    let mut child = reins()
        .args(["eval", "run", suite.to_str().unwrap(), "--store"])
        .arg(dir.store())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The eval's id is on stderr's first line; wait until two attempts are recorded, then kill -9.
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut err, &mut first).unwrap();
    let id = first.split_whitespace().nth(2).unwrap().to_owned();
    let file = dir.0.join("evals").join(&id).join("attempts.jsonl");
    loop {
        let lines = std::fs::read_to_string(&file).map(|t| t.lines().count()).unwrap_or(0);
        if lines >= 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A second process cannot resume the eval while the first runs it.
    let o = eval(&dir, &["resume", &id]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("is running it now"), "{}", stderr(&o));
    child.kill().unwrap();
    child.wait().unwrap();
    let before: Vec<String> = attempts(&dir, &id).iter().map(|a| a["case"].as_str().unwrap().to_owned()).collect();
    assert!(before.len() >= 2 && before.len() < 6, "killed mid-suite: {before:?}");
    let o = eval(&dir, &["resume", &id, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("{} attempts were already done", before.len())), "{}", stderr(&o));
    let s = json_of(&o);
    assert_eq!(s["complete"], true);
    // No completed attempt ran again: each of them ran its verifier once.
    let ran = std::fs::read_to_string(dir.0.join("ran.log")).unwrap();
    for case in &before {
        assert_eq!(ran.lines().filter(|l| l == case).count(), 1, "{case} ran again: {ran}");
    }
    let finals = attempts(&dir, &id);
    assert_eq!(finals.len(), 6, "one record per attempt");
    // Totals match an uninterrupted run of the same suite.
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--json"]);
    let whole = json_of(&o);
    for key in ["mean", "passed", "failed", "cost_usd", "tokens"] {
        assert_eq!(s["agents"][0][key], whole["agents"][0][key], "{key}");
    }
}

fn ab_suite(dir: &Dir, n: usize) -> PathBuf {
    let mut suite = String::new();
    for i in 0..n {
        suite.push_str(&format!(
            "[[cases]]\nid = \"case-{i}\"\nprompt = \"p\"\n[[cases.checks]]\nkind = \"contains\"\nvalue = \"right\"\n"
        ));
    }
    dir.file("suite.toml", &suite)
}

#[test]
fn a_b_where_b_is_better_on_30_cases_is_significant_and_equal_agents_are_not() {
    let dir = Dir::new("eval-ab");
    script(&dir, "wrong.json", answer("wrong"));
    script(&dir, "right.json", answer("right"));
    let a = agent(&dir, "a.toml", "wrong.json");
    let b = agent(&dir, "b.toml", "right.json");
    let same = agent(&dir, "same.toml", "wrong.json");
    let suite = ab_suite(&dir, 30);
    let o = eval(
        &dir,
        &["run", suite.to_str().unwrap(), "--agent", a.to_str().unwrap(), "--agent", b.to_str().unwrap(), "--json"],
    );
    assert_eq!(o.status.code(), Some(20), "{}", stderr(&o));
    let id = json_of(&o)["id"].as_str().unwrap().to_owned();
    // Interleaved: the attempts alternate between the agents.
    let order: Vec<u64> = attempts(&dir, &id).iter().take(4).map(|a| a["agent"].as_u64().unwrap()).collect();
    assert_eq!(order, [0, 1, 0, 1]);
    let o = eval(&dir, &["diff", &id, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let d = json_of(&o);
    assert_eq!(d["significant"], true, "{d}");
    assert_eq!(d["only_b_passed"], 30);
    assert_eq!(d["difference"]["mean"], 1.0);
    // Exact McNemar with 0 and 30 discordant pairs: 2 · 0.5^30 (scipy.stats.binomtest(0, 30).pvalue).
    assert!((d["mcnemar_p"].as_f64().unwrap() - 1.862645149230957e-09).abs() < 1e-18, "{d}");
    assert_eq!(d["flips"].as_array().unwrap().len(), 30);
    let o = eval(&dir, &["diff", &format!("{id}@a"), &format!("{id}@b")]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("b is better (significant at 5%)"), "{text}");
    // Equal agents: no significant difference.
    let o = eval(
        &dir,
        &[
            "run",
            suite.to_str().unwrap(),
            "--agent",
            a.to_str().unwrap(),
            "--agent",
            same.to_str().unwrap(),
            "--jobs",
            "8",
            "--json",
        ],
    );
    let id2 = json_of(&o)["id"].as_str().unwrap().to_owned();
    let o = eval(&dir, &["diff", &id2]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("no significant difference"), "{text}");
}

#[test]
fn a_suite_budget_stops_dispatch_and_the_eval_resumes() {
    let dir = Dir::new("eval-budget");
    let suite = slow_suite(&dir, 4, 0);
    // Each attempt costs 100 · $1/M + 10 · $2/M = $0.00012: the budget is spent after the second.
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--max-cost-usd", "0.0002", "--json"]);
    assert_eq!(o.status.code(), Some(21), "{}", stderr(&o));
    assert!(stderr(&o).contains("budget") && stderr(&o).contains("reins eval resume"), "{}", stderr(&o));
    let s = json_of(&o);
    assert_eq!(s["done"], 2, "{s}");
    assert_eq!(s["complete"], false);
    let id = s["id"].as_str().unwrap();
    let o = eval(&dir, &["resume", id, "--max-cost-usd", "1", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let s = json_of(&o);
    assert_eq!(s["done"], 4);
    assert!((s["agents"][0]["cost_usd"].as_f64().unwrap() - 4.0 * 0.00012).abs() < 1e-12, "{s}");
}

#[test]
fn infrastructure_failures_are_kept_apart_and_retried_visibly() {
    let dir = Dir::new("eval-infra");
    script(&dir, "ok.json", answer("ok"));
    agent(&dir, "a.toml", "ok.json");
    let suite = dir.file(
        "suite.toml",
        "agent = \"a.toml\"\n[[cases]]\nid = \"fine\"\nprompt = \"p\"\n[[cases]]\nid = \"crash\"\nprompt = \"p\"\n[[cases.checks]]\nkind = \"verifier\"\ncommand = [\"sh\", \"-c\", \"kill -9 $$\"]\n",
    );
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--retry-infra", "2", "--json"]);
    assert_eq!(o.status.code(), Some(22), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.matches("infrastructure failure, retrying").count(), 2, "{err}");
    let s = json_of(&o);
    let agent = &s["agents"][0];
    // Not the agent's failure: no case failed, the crash is listed apart.
    assert_eq!(agent["failed"], 0, "{agent}");
    assert_eq!(agent["infra_failures"].as_array().unwrap().len(), 1, "{agent}");
    assert!(agent["infra_failures"][0].as_str().unwrap().contains("crashed"), "{agent}");
    let id = s["id"].as_str().unwrap();
    let tries: Vec<u64> =
        attempts(&dir, id).iter().filter(|a| a["case"] == "crash").map(|a| a["try"].as_u64().unwrap()).collect();
    assert_eq!(tries, [1, 2, 3]);
    // Tolerated: exit 0.
    let o = eval(&dir, &["show", id, "--max-infra-failures", "1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("infrastructure failure (not the agent's): crash"), "{text}");
}

#[test]
fn suite_errors_name_the_file_and_the_key() {
    let dir = Dir::new("eval-errors");
    script(&dir, "ok.json", answer("ok"));
    agent(&dir, "a.toml", "ok.json");
    let cases: [(&str, &str); 4] = [
        (
            "agent = \"a.toml\"\n[[cases]]\nid = \"x\"\nprompt = \"p\"\n[[cases.checks]]\nkind = \"nope\"\n",
            "cases[0].checks[0].kind",
        ),
        (
            "agent = \"a.toml\"\n[[cases]]\nid = \"x\"\nprompt = \"p\"\n[[cases.checks]]\nkind = \"regex\"\npattern = \"(\"\n",
            "cases[0].checks[0].pattern",
        ),
        ("agent = \"a.toml\"\n[[cases]]\nid = \"x\"\nprompt = \"p\"\nlimits = { max_steps = 0 }\n", "limits.max_steps"),
        ("agent = \"a.toml\"\n[[cases]]\nid = \"x\"\npromt = \"p\"\n", "cases[0]"),
    ];
    for (text, key) in cases {
        let suite = dir.file("bad.toml", text);
        let o = eval(&dir, &["run", suite.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{text}");
        let err = stderr(&o);
        assert!(err.contains("bad.toml") && err.contains(key), "{key} in {err}");
    }
    // A case folder's own file is named.
    std::fs::create_dir_all(dir.0.join("cases/one")).unwrap();
    dir.file("cases/one/case.toml", "prompt = \"p\"\n[[checks]]\nkind = \"max_steps\"\nmax = \"x\"\n");
    let suite = dir.file("dir.toml", "agent = \"a.toml\"\ncases_dir = \"cases\"\n");
    let o = eval(&dir, &["run", suite.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("{}", Path::new("cases/one/case.toml").display())) && err.contains("checks[0].max"),
        "{err}"
    );
}

#[test]
fn rescore_calls_no_model_and_applies_the_new_checks() {
    let dir = Dir::new("eval-rescore");
    script(&dir, "ok.json", answer("the answer is 41"));
    agent(&dir, "a.toml", "ok.json");
    let suite = dir.file(
        "suite.toml",
        "agent = \"a.toml\"\n[[cases]]\nid = \"x\"\nprompt = \"p\"\n[[cases.checks]]\nkind = \"contains\"\nvalue = \"42\"\n",
    );
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--epochs", "2", "--json"]);
    assert_eq!(o.status.code(), Some(20), "{}", stderr(&o));
    let old = json_of(&o)["id"].as_str().unwrap().to_owned();
    let sessions = reins_store::Store::open(dir.store()).unwrap().list().unwrap().len();
    // The script is gone: a model call would fail. The new checks pass on what was recorded.
    std::fs::remove_file(dir.0.join("ok.json")).unwrap();
    let fixed = dir.file(
        "fixed.toml",
        "agent = \"a.toml\"\n[[cases]]\nid = \"x\"\nprompt = \"p\"\n[[cases.checks]]\nkind = \"regex\"\npattern = \"4[12]\"\n",
    );
    let o = eval(&dir, &["rescore", &old, "--suite", fixed.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let s = json_of(&o);
    assert_eq!(s["agents"][0]["cases"][0]["passes"], 2, "{s}");
    assert_eq!(reins_store::Store::open(dir.store()).unwrap().list().unwrap().len(), sessions, "no new session");
    let new = s["id"].as_str().unwrap();
    let o = eval(&dir, &["diff", &old, new, "--json"]);
    assert_eq!(json_of(&o)["only_b_passed"], 1);
}

#[test]
fn replay_passes_unchanged_and_names_the_case_when_a_fixture_file_changed() {
    let dir = Dir::new("eval-replay");
    script(
        &dir,
        "read.json",
        json!([
            {"content": "", "tool_calls": [{"id": "1", "name": "read_file", "arguments": {"path": "data.txt"}}]},
            {"content": "read it"}
        ]),
    );
    agent(&dir, "a.toml", "read.json");
    std::fs::create_dir_all(dir.0.join("fixture")).unwrap();
    dir.file("fixture/data.txt", "first version\n");
    let suite = dir.file(
        "suite.toml",
        "agent = \"a.toml\"\n[[cases]]\nid = \"reads-data\"\nprompt = \"p\"\nworkspace = \"fixture\"\n[[cases]]\nid = \"plain\"\nprompt = \"p\"\n",
    );
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let id = json_of(&o)["id"].as_str().unwrap().to_owned();
    let o = eval(&dir, &["replay", &id]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    dir.file("fixture/data.txt", "second version\n");
    let o = eval(&dir, &["replay", &id]);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("diverged reads-data#1"), "{text}");
    assert!(text.contains("ok plain#1"), "{text}");
}

#[test]
fn a_harbor_task_directory_runs_and_its_reward_is_read() {
    let dir = Dir::new("eval-harbor");
    script(
        &dir,
        "hello.json",
        json!([
            {"content": "", "tool_calls": [{"id": "1", "name": "write_file", "arguments": {"path": "hello.txt", "content": "hi\n"}}]},
            {"content": "done"}
        ]),
    );
    agent(&dir, "a.toml", "hello.json");
    for task in ["tasks/say-hi/environment", "tasks/say-hi/tests", "tasks/say-nothing/tests"] {
        std::fs::create_dir_all(dir.0.join(task)).unwrap();
    }
    let toml = "version = \"1.0\"\n[metadata]\ndifficulty = \"easy\"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 120.0\n[environment]\ncpus = 1\nmemory_mb = 2048\n";
    // The tests use the container's paths: /tests, /app and /logs/verifier.
    let test = "#!/bin/bash\ncd /tests\nif [ -f helper.txt ] && grep -q hi /app/hello.txt && [ -f /app/data.txt ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n";
    for task in ["say-hi", "say-nothing"] {
        dir.file(&format!("tasks/{task}/task.toml"), toml);
        dir.file(&format!("tasks/{task}/tests/test.sh"), test);
        dir.file(&format!("tasks/{task}/tests/helper.txt"), "");
        dir.file(&format!("tasks/{task}/instruction.md"), "Write hi to hello.txt.\n");
    }
    dir.file("tasks/say-hi/environment/Dockerfile", "FROM ubuntu:24.04\nWORKDIR /app\n");
    dir.file("tasks/say-hi/environment/data.txt", "data\n");
    let suite = dir.file("suite.toml", "agent = \"a.toml\"\nharbor_dir = \"tasks\"\n");
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(20), "{}", stderr(&o));
    let s = json_of(&o);
    let cases = &s["agents"][0]["cases"];
    assert_eq!(cases[0]["id"], "say-hi");
    assert_eq!(cases[0]["passed"], true, "{s}");
    // No environment/data.txt: the reward file says 0.
    assert_eq!(cases[1]["id"], "say-nothing");
    assert_eq!(cases[1]["passed"], false, "{s}");
    let id = s["id"].as_str().unwrap();
    let a = attempts(&dir, id);
    let hi = a.iter().find(|x| x["case"] == "say-hi").unwrap();
    assert_eq!(hi["checks"][0]["reason"], "verifier reward 1", "{hi}");
}

#[test]
fn an_llm_judge_scores_is_recorded_and_is_reused_by_rescore() {
    let dir = Dir::new("eval-judge");
    script(&dir, "ok.json", answer("Paris is the capital of France."));
    agent(&dir, "a.toml", "ok.json");
    script(&dir, "judge.json", json!([{"content": "{\"score\": 0.8, \"reason\": \"correct, a little terse\"}"}]));
    script(&dir, "babble.json", json!([{"content": "I think it is fine"}]));
    let suite = dir.file(
        "suite.toml",
        "agent = \"a.toml\"\n[[cases]]\nid = \"capital\"\nprompt = \"What is the capital of France?\"\n[[cases.checks]]\nkind = \"judge\"\nmodel = \"script:judge.json\"\nrubric = \"Full marks for Paris.\"\nthreshold = 0.5\n[[cases]]\nid = \"babble\"\nprompt = \"p\"\n[[cases.checks]]\nkind = \"judge\"\nmodel = \"script:babble.json\"\nrubric = \"r\"\n",
    );
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--json"]);
    // The judge that answered no JSON is an infrastructure failure, not the agent's.
    assert_eq!(o.status.code(), Some(22), "{}", stderr(&o));
    let s = json_of(&o);
    let case = &s["agents"][0]["cases"][0];
    assert_eq!(case["passed"], true, "{s}");
    assert_eq!(case["mean"], 0.8);
    assert!(s["agents"][0]["infra_failures"][0].as_str().unwrap().contains("not JSON"), "{s}");
    let id = s["id"].as_str().unwrap().to_owned();
    let a = attempts(&dir, &id);
    let reason = a.iter().find(|x| x["case"] == "capital").unwrap()["checks"][0]["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("correct, a little terse"), "{reason}");
    // The judge's prompt and verdict are a session of the store.
    let judge_session = reason.split("session ").nth(1).unwrap().split(')').next().unwrap();
    let store = reins_store::Store::open(dir.store()).unwrap();
    let messages = serde_json::to_string(&store.load(judge_session).unwrap().messages().unwrap()).unwrap();
    assert!(messages.contains("Paris is the capital of France.") && messages.contains("0.8"), "{messages}");
    // Rescore asks no judge: the recorded verdict stands though the judge's script is gone.
    std::fs::remove_file(dir.0.join("judge.json")).unwrap();
    let o = eval(&dir, &["rescore", &id, "--json"]);
    let s = json_of(&o);
    assert_eq!(s["agents"][0]["cases"][0]["mean"], 0.8, "{s}");
}

/// A suite against the local llama.cpp server (`.ci/setup-providers.sh` exports REINS_LLAMA_URL; skipped without
/// it): the eval runs end to end, whatever score the small model earns.
#[test]
fn a_suite_against_the_local_llama_server_runs_end_to_end() {
    let Some(url) = std::env::var("REINS_LLAMA_URL").ok().filter(|u| !u.is_empty()) else {
        eprintln!("REINS_LLAMA_URL is not set: skipped");
        return;
    };
    let dir = Dir::new("eval-llama");
    dir.file(
        "agent.toml",
        &format!("model = \"openai-chat:gemma-3-270m\"\n[provider]\nbase_url = \"{url}/v1\"\nmax_response_tokens = 64\n[limits]\nmax_steps = 2\n"),
    );
    let suite = dir.file(
        "suite.toml",
        "agent = \"agent.toml\"\n[[cases]]\nid = \"arith\"\nprompt = \"What is 2+2? Answer with just the number.\"\n[[cases.checks]]\nkind = \"contains\"\nvalue = \"4\"\n[[cases]]\nid = \"capital\"\nprompt = \"What is the capital of France? One word.\"\n[[cases.checks]]\nkind = \"contains\"\nvalue = \"paris\"\nignore_case = true\n",
    );
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--json"]);
    assert!(matches!(o.status.code(), Some(0 | 20)), "{}", stderr(&o));
    let s = json_of(&o);
    assert_eq!(s["complete"], true, "{s}");
    assert!(s["agents"][0]["infra_failures"].as_array().unwrap().is_empty(), "{s}");
    for a in attempts(&dir, s["id"].as_str().unwrap()) {
        // Whatever the model did (a cut answer is its own failure, scored by the checks), it was asked.
        assert!(a["observed"]["steps"].as_u64().unwrap() >= 1, "{a}");
        assert!(a["session_id"].is_string());
        assert!(a["observed"]["input_tokens"].as_u64().unwrap() > 0, "usage reported: {a}");
    }
}

#[test]
fn each_attempt_gets_a_fresh_private_workspace_removed_unless_keep() {
    let dir = Dir::new("eval-keep");
    script(
        &dir,
        "w.json",
        json!([
            {"content": "", "tool_calls": [{"id": "1", "name": "write_file", "arguments": {"path": "seed.txt", "content": "changed"}}]},
            {"content": "done"}
        ]),
    );
    agent(&dir, "a.toml", "w.json");
    std::fs::create_dir_all(dir.0.join("fixture")).unwrap();
    dir.file("fixture/seed.txt", "original");
    let log = dir.0.join("where.log");
    // The verifier notes where the attempt's workspace was.
    let suite = dir.file(
        "suite.toml",
        &format!(
            "agent = \"a.toml\"\n[[cases]]\nid = \"w\"\nprompt = \"p\"\nworkspace = \"fixture\"\n[[cases.checks]]\nkind = \"verifier\"\ncommand = [\"sh\", \"-c\", \"pwd >> {}\"]\n",
            log.display()
        ),
    );
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--epochs", "2", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let places: Vec<String> = std::fs::read_to_string(&log).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(places.len(), 2);
    assert_ne!(places[0], places[1], "a fresh workspace per attempt");
    for p in &places {
        assert!(!Path::new(p).exists(), "{p} removed after the attempt");
    }
    assert_eq!(
        std::fs::read_to_string(dir.0.join("fixture/seed.txt")).unwrap(),
        "original",
        "the fixture is never written"
    );
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--keep", "--json"]);
    let id = json_of(&o)["id"].as_str().unwrap().to_owned();
    let kept = attempts(&dir, &id)[0]["workspace"].as_str().unwrap().to_owned();
    assert_eq!(std::fs::read_to_string(Path::new(&kept).join("seed.txt")).unwrap(), "changed");
    let private = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(Path::new(&kept).parent().unwrap()).unwrap().permissions(),
    );
    assert_eq!(private & 0o077, 0, "the attempt's directory is its owner's only");
    std::fs::remove_dir_all(Path::new(&kept).parent().unwrap()).unwrap();
}

/// An OpenAI-compatible Chat Completions server that answers every request at once (keep-alive) and counts the
/// connections that carried a request and the requests.
fn counting_server()
-> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead as _, Read as _, Write as _};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = std::sync::Arc::new(AtomicUsize::new(0));
    let requests = std::sync::Arc::new(AtomicUsize::new(0));
    let (c, r) = (connections.clone(), requests.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (c, r) = (c.clone(), r.clone());
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                // A connection counts once it carries a request: the HTTP client may open one that it never uses
                // when a kept-alive connection comes back to its pool just after it began to connect.
                let mut counted = false;
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some((k, v)) = line.split_once(':') {
                            if k.eq_ignore_ascii_case("content-length") {
                                length = v.trim().parse().unwrap_or(0);
                            }
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    r.fetch_add(1, Ordering::SeqCst);
                    if !counted {
                        counted = true;
                        c.fetch_add(1, Ordering::SeqCst);
                    }
                    // A first turn writes a file with the workspace tools; after the tool's result, the answer.
                    let answer = if String::from_utf8_lossy(&body).contains("\"role\":\"tool\"") {
                        r#"{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}"#
                    } else {
                        r#"{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"write_file","arguments":"{\"path\":\"mark.txt\",\"content\":\"x\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}"#
                    };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        answer.len()
                    );
                    if writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(answer.as_bytes())).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, connections, requests)
}

#[test]
fn attempts_share_one_client_of_a_real_provider() {
    let (url, connections, requests) = counting_server();
    let dir = Dir::new("eval-shared");
    dir.file(
        "agent.toml",
        &format!("model = \"openai-chat:m\"\n[provider]\nbase_url = \"{url}/v1\"\nstream = false\n"),
    );
    // Each attempt's own workspace (a fresh copy of the fixture) holds the file its model wrote with the tools.
    let mut text = "agent = \"agent.toml\"\n".to_owned();
    for i in 0..6 {
        text.push_str(&format!("[[cases]]\nid = \"case-{i}\"\nprompt = \"p\"\nworkspace = \"fixture\"\n[[cases.checks]]\nkind = \"contains\"\nvalue = \"right\"\n[[cases.checks]]\nkind = \"verifier\"\ncommand = [\"sh\", \"-c\", \"test -f mark.txt && test -f seed.txt\"]\n"));
    }
    std::fs::create_dir_all(dir.0.join("fixture")).unwrap();
    dir.file("fixture/seed.txt", "seed");
    let suite = dir.file("suite.toml", &text);
    let o = reins()
        .args(["eval", "run", suite.to_str().unwrap(), "--json", "--store"])
        .arg(dir.store())
        .env("OPENAI_API_KEY", "test")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(20), "{}", stderr(&o));
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 12);
    let s = json_of(&o);
    for case in s["agents"][0]["cases"].as_array().unwrap() {
        assert_eq!(case["failures"].as_array().unwrap().len(), 1, "only the answer's check fails: {case}");
    }
    // One model, one HTTP client, one kept-alive connection for the six attempts (one each without sharing).
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn case_folders_take_a_prompt_file_and_override_the_agents_model_and_limits() {
    let dir = Dir::new("eval-overrides");
    script(&dir, "never.json", answer("the agent's own model"));
    agent(&dir, "a.toml", "never.json");
    std::fs::create_dir_all(dir.0.join("cases/limited")).unwrap();
    std::fs::create_dir_all(dir.0.join("cases/plain")).unwrap();
    // Two steps scripted; the case allows one.
    script(
        &dir,
        "cases/limited/two.json",
        json!([
            {"content": "", "tool_calls": [{"id": "1", "name": "echo", "arguments": {"text": "a"}}]},
            {"content": "done"}
        ]),
    );
    dir.file("cases/limited/prompt.md", "go\n");
    dir.file(
        "cases/limited/case.toml",
        "prompt_file = \"prompt.md\"\nmodel = \"script:two.json\"\nlimits = { max_steps = 1 }\n[[checks]]\nkind = \"status\"\nvalue = \"step_limit\"\n",
    );
    dir.file("cases/plain/case.toml", "prompt = \"p\"\n[[checks]]\nkind = \"contains\"\nvalue = \"own model\"\n");
    let suite = dir.file("suite.toml", "agent = \"a.toml\"\ncases_dir = \"cases\"\n");
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let s = json_of(&o);
    let ids: Vec<&str> =
        s["agents"][0]["cases"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["limited", "plain"], "folder names are the ids, in order");
    let a = attempts(&dir, s["id"].as_str().unwrap());
    let limited = a.iter().find(|x| x["case"] == "limited").unwrap();
    assert_eq!(limited["observed"]["steps"], 1, "{limited}");
    assert_eq!(limited["observed"]["status"], "step_limit");
}

/// A suite of two cases for the counting server's agent: each writes mark.txt ("x") with the workspace tools in
/// a copy of the fixture (seed.txt); the verifier tests/check.sh reads both.
fn marking_suite(dir: &Dir, url: &str) -> PathBuf {
    dir.file(
        "agent.toml",
        &format!("model = \"openai-chat:m\"\n[provider]\nbase_url = \"{url}/v1\"\nstream = false\n"),
    );
    std::fs::create_dir_all(dir.0.join("fixture")).unwrap();
    dir.file("fixture/seed.txt", "seed");
    std::fs::create_dir_all(dir.0.join("tests")).unwrap();
    dir.file("tests/check.sh", "[ \"$(cat mark.txt)\" = x ] && [ -f seed.txt ]\n");
    let mut text = "agent = \"agent.toml\"\n".to_owned();
    for i in 0..2 {
        text.push_str(&format!("[[cases]]\nid = \"case-{i}\"\nprompt = \"p\"\nworkspace = \"fixture\"\n[[cases.checks]]\nkind = \"tool_called\"\ntool = \"write_file\"\n[[cases.checks]]\nkind = \"verifier\"\ncommand = [\"sh\", \"{{verifier}}/check.sh\"]\nfiles = \"tests\"\n"));
    }
    dir.file("suite.toml", &text)
}

#[test]
fn rescore_calls_no_model_and_runs_the_verifier_again_on_the_workspace_replay_rebuilt() {
    use std::sync::atomic::Ordering;
    let (url, _, requests) = counting_server();
    let dir = Dir::new("eval-rescore-replay");
    let suite = marking_suite(&dir, &url);
    let rescore = |extra: &[&str], id: &str| {
        let o = reins()
            .args(["eval", "rescore", id, "--json", "--store"])
            .arg(dir.store())
            .args(extra)
            .env("OPENAI_API_KEY", "test")
            .output()
            .unwrap();
        (o.status.code(), json_of(&o), stderr(&o))
    };
    let o = reins()
        .args(["eval", "run", suite.to_str().unwrap(), "--json", "--store"])
        .arg(dir.store())
        .env("OPENAI_API_KEY", "test")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let old = json_of(&o)["id"].as_str().unwrap().to_owned();
    assert_eq!(requests.load(Ordering::SeqCst), 4, "two attempts of two model calls");
    let sessions = reins_store::Store::open(dir.store()).unwrap().list().unwrap().len();
    // Unchanged: the verifier runs again, in each attempt's workspace rebuilt by replaying its session (the
    // fixture's seed.txt and the mark.txt the agent's tool call wrote), and passes again.
    let (code, s, err) = rescore(&[], &old);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(s["agents"][0]["passed"], 2, "{s}");
    assert!(err.contains("2 workspace(s) rebuilt by replay, 2 verifier run(s), 0 infrastructure"), "{err}");
    // The verifier script changed: it wants another content in the agent's file; both attempts now fail.
    dir.file("tests/check.sh", "[ \"$(cat mark.txt)\" = y ]\n");
    let (code, s, err) = rescore(&[], &old);
    assert_eq!(code, Some(20), "{err}");
    assert_eq!(s["agents"][0]["failed"], 2, "{s}");
    assert_eq!(s["agents"][0]["mean"], 0.5, "the tool_called check still passes: {s}");
    // --checks: other checks, whose verifier's reward is read from the file the agent wrote.
    let checks = dir.file(
        "checks.toml",
        "[[cases]]\nid = \"case-0\"\nprompt = \"p\"\nworkspace = \"fixture\"\n[[cases.checks]]\nkind = \"verifier\"\ncommand = [\"sh\", \"-c\", \"if [ \\\"$(cat mark.txt)\\\" = x ]; then echo 0.5; else echo 0; fi > \\\"$REINS_EVAL_LOGS/reward.txt\\\"\"]\nthreshold = 0.5\n[[cases]]\nid = \"case-1\"\nprompt = \"p\"\n[[cases.checks]]\nkind = \"verifier\"\ncommand = [\"sh\", \"-c\", \"test -f seed.txt\"]\n",
    );
    let (code, s, err) = rescore(&["--checks", checks.to_str().unwrap()], &old);
    assert_eq!(code, Some(0), "{err}");
    let cases = &s["agents"][0]["cases"];
    assert_eq!(cases[0]["mean"], 0.5, "{s}");
    assert_eq!(cases[0]["passed"], true, "{s}");
    // case-1 of these checks names no fixture: its workspace is rebuilt from the fixture it ran in (the eval's
    // suite's), which has seed.txt.
    assert_eq!(cases[1]["passed"], true, "{s}");
    let new = s["id"].as_str().unwrap();
    let reason = attempts(&dir, new)[0]["checks"][0]["reason"].as_str().unwrap().to_owned();
    assert_eq!(reason, "verifier reward 0.5");
    // No model was called by the three re-scores, and no session was recorded.
    assert_eq!(requests.load(Ordering::SeqCst), 4, "a re-score calls no model");
    assert_eq!(reins_store::Store::open(dir.store()).unwrap().list().unwrap().len(), sessions);
}

#[test]
fn a_rescore_whose_replay_diverges_is_an_infrastructure_failure_not_a_score() {
    let dir = Dir::new("eval-rescore-diverged");
    script(
        &dir,
        "copy.json",
        json!([
            {"content": "", "tool_calls": [{"id": "1", "name": "read_file", "arguments": {"path": "data.txt"}}]},
            {"content": "", "tool_calls": [{"id": "2", "name": "write_file", "arguments": {"path": "out.txt", "content": "first"}}]},
            {"content": "copied"}
        ]),
    );
    agent(&dir, "a.toml", "copy.json");
    std::fs::create_dir_all(dir.0.join("fixture")).unwrap();
    dir.file("fixture/data.txt", "first\n");
    let suite = dir.file(
        "suite.toml",
        "agent = \"a.toml\"\n[[cases]]\nid = \"copies\"\nprompt = \"p\"\nworkspace = \"fixture\"\n[[cases.checks]]\nkind = \"verifier\"\ncommand = [\"sh\", \"-c\", \"grep -q first out.txt\"]\n",
    );
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let id = json_of(&o)["id"].as_str().unwrap().to_owned();
    // The fixture changed: the replayed read differs, so the rebuilt workspace is not the one the agent left.
    dir.file("fixture/data.txt", "second\n");
    let o = eval(&dir, &["rescore", &id, "--json"]);
    assert_eq!(o.status.code(), Some(22), "{}", stderr(&o));
    let s = json_of(&o);
    let agent = &s["agents"][0];
    assert_eq!(agent["failed"], 0, "not the agent's failure: {agent}");
    let why = agent["infra_failures"][0].as_str().unwrap();
    assert!(why.contains("copies") && why.contains("diverged") && why.contains("tool result"), "{why}");
}

/// The first Chromium on the PATH.
fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"].into_iter().find(|c| {
        std::process::Command::new(c)
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok()
    })
}

/// The DOM of `file` after headless Chromium ran its scripts.
fn dom(chromium: &str, file: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--virtual-time-budget=10000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("file://{}", file.display()))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_html_report_links_each_attempt_to_its_session_page_written_beside_it() {
    let dir = Dir::new("eval-html-sessions");
    script(&dir, "ok.json", answer("the answer is forty-two"));
    agent(&dir, "a.toml", "ok.json");
    let suite = dir.file(
        "suite.toml",
        "agent = \"a.toml\"\n[[cases]]\nid = \"one\"\nprompt = \"p\"\n[[cases]]\nid = \"two\"\nprompt = \"p\"\n",
    );
    let report = dir.0.join("report/index.html");
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--html", report.to_str().unwrap(), "--html-sessions"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("2 written, 0 kept"), "{}", stderr(&o));
    let id = String::from_utf8_lossy(&o.stdout).lines().last().unwrap().trim_start_matches("eval ").to_owned();
    let sessions: Vec<String> =
        attempts(&dir, &id).iter().map(|a| a["session_id"].as_str().unwrap().to_owned()).collect();
    for s in &sessions {
        let page = std::fs::read_to_string(dir.0.join(format!("report/sessions/{s}.html"))).unwrap();
        assert!(page.contains("default-src 'none'") && !page.contains("https://"), "self-contained");
    }
    // Written again (a show of the same eval): the pages there are kept.
    let o = eval(&dir, &["show", &id, "--html", report.to_str().unwrap(), "--html-sessions"]);
    assert!(stderr(&o).contains("0 written, 2 kept"), "{}", stderr(&o));
    // --html-sessions needs --html.
    assert_eq!(eval(&dir, &["show", &id, "--html-sessions"]).status.code(), Some(2));
    let Some(chromium) = chromium() else {
        eprintln!("no Chromium: the pages were not rendered");
        return;
    };
    let page = dom(chromium, &report);
    let hrefs: Vec<&str> = page.split("href=\"").skip(1).map(|s| s.split('"').next().unwrap()).collect();
    assert_eq!(hrefs.len(), 2, "a link per attempt: {page}");
    for (href, session) in hrefs.iter().zip(&sessions) {
        assert_eq!(*href, format!("sessions/{session}.html"), "relative to the report");
        let target = report.parent().unwrap().join(href);
        assert!(target.is_file(), "{href}");
        let shown = dom(chromium, &target);
        assert!(shown.contains("data-ready=\"1\""), "the session page rendered: {shown}");
        assert!(shown.contains(&format!("Reins session {}", &session[..8])), "{shown}");
        assert!(shown.contains("the answer is forty-two"), "its transcript shown");
    }
}

#[test]
fn progress_is_a_bar_on_a_terminal_and_plain_lines_otherwise() {
    let dir = Dir::new("eval-progress");
    script(&dir, "ok.json", answer("right"));
    agent(&dir, "a.toml", "ok.json");
    let suite = dir.file(
        "suite.toml",
        "agent = \"a.toml\"\n[[cases]]\nid = \"first\"\nprompt = \"p\"\n[[cases]]\nid = \"second\"\nprompt = \"p\"\n[[cases.checks]]\nkind = \"contains\"\nvalue = \"wrong\"\n[[cases]]\nid = \"third\"\nprompt = \"p\"\n",
    );
    // On a terminal (a new pseudo-terminal: stdin, stdout and stderr): a bar rewritten in place.
    let mut c = reins();
    c.stdin(std::process::Stdio::inherit())
        .args(["eval", "run", suite.to_str().unwrap(), "--store"])
        .arg(dir.store())
        .env("TERM", "xterm");
    let options = rexpect::reader::Options::new().timeout_ms(Some(60_000)).strip_ansi_escape_codes(false);
    let mut p = rexpect::session::spawn_with_options(c, options).unwrap();
    let screen = p.exp_eof().unwrap();
    match p.process().wait().unwrap() {
        rexpect::process::wait::WaitStatus::Exited(_, code) => assert_eq!(code, 20, "{screen:?}"),
        other => panic!("{other:?}"),
    }
    // Each attempt: the line cleared (CR, erase line), then done/total, the pass rate so far, the cost so far
    // (100 + 10 tokens at $1 and $2 per million: $0.00012 an attempt) and the ETA.
    let bars: Vec<&str> = screen.split("\r\x1b[K").skip(1).collect();
    assert_eq!(bars.len(), 3, "{screen:?}");
    assert!(bars[0].starts_with("[1/3] 100% passed, $0.0001, ETA "), "{screen:?}");
    // A failure keeps a line of its own above the bar.
    assert!(
        bars[1].starts_with("second#1: fail contains: ") && bars[1].contains("[2/3] 50% passed, $0.0002, ETA "),
        "{screen:?}"
    );
    assert!(bars[2].starts_with("[3/3] 67% passed, $0.0004, ETA "), "{screen:?}");
    assert!(!screen.contains("[1/3] first#1"), "no plain lines on a terminal: {screen:?}");
    // Otherwise (stderr a pipe): a plain line per attempt, no control characters.
    let o = eval(&dir, &["run", suite.to_str().unwrap()]);
    let err = stderr(&o);
    assert!(!err.contains('\x1b') && !err.contains('\r'), "{err:?}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(
        lines,
        [
            "[1/3] first#1: pass 1.00 (passed 1 so far, $0.0001)",
            "[2/3] second#1: fail 0.00 (passed 1 so far, $0.0002)",
            "[3/3] third#1: pass 1.00 (passed 2 so far, $0.0004)"
        ],
        "{err}"
    );
}

#[test]
fn a_case_with_two_verifiers_runs_each_with_its_own_directories() {
    let dir = Dir::new("eval-two-verifiers");
    script(&dir, "ok.json", answer("ok"));
    agent(&dir, "a.toml", "ok.json");
    // The first writes a reward file; the second has none of its own, so its exit code (1) is its score.
    let suite = dir.file(
        "suite.toml",
        "agent = \"a.toml\"\n[[cases]]\nid = \"two\"\nprompt = \"p\"\n[[cases.checks]]\nkind = \"verifier\"\ncommand = [\"sh\", \"-c\", \"echo 1 > \\\"$REINS_EVAL_LOGS/reward.txt\\\"\"]\n[[cases.checks]]\nkind = \"verifier\"\ncommand = [\"sh\", \"-c\", \"exit 1\"]\n",
    );
    let o = eval(&dir, &["run", suite.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(20), "{}", stderr(&o));
    let id = json_of(&o)["id"].as_str().unwrap().to_owned();
    for id in [id.clone(), json_of(&eval(&dir, &["rescore", &id, "--json"]))["id"].as_str().unwrap().to_owned()] {
        let a = &attempts(&dir, &id)[0];
        assert!(a["infra"].is_null(), "{a}");
        let reasons: Vec<String> = checks_of(a).into_iter().map(|c| c.2).collect();
        assert_eq!(reasons, ["verifier reward 1", "verifier exit 1"], "{a}");
        assert_eq!(a["score"], 0.5);
    }
}
