//! Durable runs on a real restate-server with `reins worker` processes: multi-step runs with tools, a worker
//! or the server killed mid tool batch, cancellation, SIGTERM, many sessions on two workers, a second turn on
//! another worker, bad agent definitions. Model calls go to a local OpenAI-compatible server that counts
//! them; the tools record every idempotency key they see.

mod common;
#[path = "durable/support.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use reins::{Message, Outcome, Status};
use reins_restate::TurnRequest;
use reins_restate::client::{Client, ClientError};
use serde_json::json;
use support::*;

fn client(r: &Restate) -> Client {
    Client::new(&r.ingress, &r.admin)
}

fn submit_flags(r: &Restate) -> Vec<String> {
    vec!["--restate".into(), r.ingress.clone(), "--restate-admin".into(), r.admin.clone()]
}

/// Submits a new session's first turn (the worker's default agent) through the client; returns (session, run).
fn submit(r: &Restate, prompt: &str) -> (String, String) {
    let (session, run_id) = (reins_restate::new_id(), reins_restate::new_id());
    let req = TurnRequest { run_id: run_id.clone(), prompt: prompt.into(), ..Default::default() };
    runtime().block_on(client(r).submit(&session, &req)).unwrap();
    (session, run_id)
}

fn wait(r: &Restate, session: &str, run: &str) -> Outcome {
    // After a server restart the attach may find the server still starting: try again for a while.
    for _ in 0..100 {
        match runtime().block_on(client(r).wait(session, run)) {
            Ok(o) => return o,
            Err(ClientError::Unreachable { .. }) | Err(ClientError::Http { .. }) => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => panic!("waiting for {run}: {e}"),
        }
    }
    panic!("the run {run} did not end")
}

fn assert_coherent(o: &Outcome) {
    let t = reins::Transcript::from_messages(o.messages.clone(), &reins::CharCounter).expect("a valid transcript");
    assert!(t.is_complete(), "every call has its result: {:#?}", o.messages);
}

/// Every key seen, with how many times.
fn key_counts(dir: &Path) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for (k, _) in keys(dir) {
        *m.entry(k).or_insert(0) += 1;
    }
    m
}

/// One restate-server, a model server, a balancer, and a worker behind it.
struct Setup {
    dir: Dir,
    restate: Restate,
    model: ModelServer,
    agent: std::path::PathBuf,
    balancer: Balancer,
    ports: Vec<u16>,
}

impl Setup {
    /// With `n` worker ports behind the balancer (no worker started).
    fn new(name: &str, n: usize) -> Setup {
        let dir = Dir::new(name);
        let restate = Restate::start();
        let model = ModelServer::start();
        let agent = agent_file(&dir.0, &model.url);
        let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let balancer = Balancer::start(ports.clone());
        Setup { dir, restate, model, agent, balancer, ports }
    }

    fn worker(&self, i: usize) -> Worker {
        self.worker_with(i, &[])
    }

    /// With more flags of `reins worker` (after `--agent test=AGENT`, the agent of the tests).
    fn worker_with(&self, i: usize, args: &[&str]) -> Worker {
        let allowed = format!("test={}", self.agent.display());
        let args: Vec<&str> = ["--agent", allowed.as_str()].into_iter().chain(args.iter().copied()).collect();
        Worker::start_with(self.ports[i], self.dir.path(&format!("worker{i}.log")), &args)
    }

    fn register(&self) {
        self.restate.register(&self.balancer.uri);
    }
}

#[test]
fn a_multi_step_run_with_tools_completes_and_its_next_turn_runs_on_another_worker() {
    let s = Setup::new("multi", 2);
    let mut a = s.worker(0);
    s.register();
    let out = reins()
        .arg("submit")
        .args(submit_flags(&s.restate))
        .args(["--agent", "test", "--wait", "--output"])
        .arg(s.dir.path("outcome.json"))
        .arg("tools 3 2")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let session = stdout.lines().find_map(|l| l.strip_prefix("session ")).unwrap().to_owned();
    let run = stdout.lines().find_map(|l| l.strip_prefix("run ")).unwrap().to_owned();
    assert!(stdout.contains("done after 3 steps and 6 results"), "{stdout}");
    let outcome: Outcome = serde_json::from_slice(&std::fs::read(s.dir.path("outcome.json")).unwrap()).unwrap();
    assert_eq!((outcome.status, outcome.steps, outcome.tool_calls), (Status::Completed, 4, 6));
    assert_eq!(outcome.session_id.as_deref(), Some(session.as_str()));
    assert_coherent(&outcome);
    // Every step asked the model once; every call ran once, with its own key naming session, run, step, call.
    assert!(s.model.counts("tools 3 2").values().all(|&n| n == 1), "{:?}", s.model.counts("tools 3 2"));
    let keys = key_counts(&s.dir.0);
    assert_eq!(keys.len(), 6, "{keys:?}");
    assert!(keys.values().all(|&n| n == 1));
    assert!(keys.contains_key(&format!("{session}/{run}/2/c2_1")), "{keys:?}");

    // `status` and `result` find it by run id and by session id.
    let st = reins().arg("status").args(submit_flags(&s.restate)).arg(&run).output().unwrap();
    assert_eq!(st.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&st.stdout).contains("state finished: completed"));
    let res = reins().arg("result").args(submit_flags(&s.restate)).arg(&session).output().unwrap();
    assert_eq!(res.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&res.stdout).contains("done after 3 steps"));

    // The worker that ran the first turn is gone; the next turn runs on another one, from Restate's state.
    a.kill9();
    let _b = s.worker(1);
    let out = reins()
        .arg("submit")
        .args(submit_flags(&s.restate))
        .args(["--session", &session, "--wait", "--json", "again"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let last = String::from_utf8_lossy(&out.stdout).lines().last().unwrap().to_owned();
    let second: Outcome = serde_json::from_str(&last).unwrap();
    assert_eq!(second.answer.as_deref(), Some(&*format!("again: {} messages", outcome.messages.len() + 1)));
    assert_eq!(second.messages[..outcome.messages.len()], outcome.messages[..]);
    assert_eq!(second.messages[outcome.messages.len()], Message::user("again"));
}

/// The uninterrupted run of `prompt` that a crashed one must equal.
fn reference(s: &Setup, prompt: &str) -> Outcome {
    let (session, run) = submit(&s.restate, prompt);
    let o = wait(&s.restate, &session, &run);
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    o
}

/// After a crash mid batch: the model was asked once per step (twice over, with the reference run), the
/// calls that had finished ran once, the one in flight again with the same key, and the transcript is the
/// uninterrupted one.
fn assert_exactly_once(s: &Setup, prompt: &str, expected: &Outcome, crashed: &Outcome, session: &str, run: &str) {
    assert_eq!(crashed.status, Status::Completed, "{:?}", crashed.error);
    assert_eq!(crashed.messages, expected.messages);
    assert!(s.model.counts(prompt).values().all(|&n| n == 2), "{:?}", s.model.counts(prompt));
    let keys = key_counts(&s.dir.0);
    let mine: BTreeMap<&String, &usize> =
        keys.iter().filter(|(k, _)| k.starts_with(&format!("{session}/{run}/"))).collect();
    assert_eq!(mine.len(), 6, "{mine:?}");
    for (k, n) in mine {
        let expected = if k.ends_with("/1/c1_3") { 2 } else { 1 };
        assert_eq!(*n, expected, "{k}");
    }
}

#[test]
fn a_worker_killed_mid_batch_is_replaced_and_every_finished_step_is_done_once() {
    let s = Setup::new("killworker", 1);
    let mut w = s.worker(0);
    s.register();
    let prompt = "tools 2 3 slow";
    let expected = reference(&s, prompt);
    std::fs::remove_file(s.dir.path("started")).unwrap();
    let (session, run) = submit(&s.restate, prompt);
    wait_for(&s.dir.path("started"), Duration::from_secs(60));
    w.restart();
    let crashed = wait(&s.restate, &session, &run);
    assert_exactly_once(&s, prompt, &expected, &crashed, &session, &run);
}

#[test]
fn the_server_killed_mid_batch_and_restarted_finishes_the_run_the_same() {
    let mut s = Setup::new("killserver", 1);
    let _w = s.worker(0);
    s.register();
    let prompt = "tools 2 3 slow";
    let expected = reference(&s, prompt);
    std::fs::remove_file(s.dir.path("started")).unwrap();
    let (session, run) = submit(&s.restate, prompt);
    wait_for(&s.dir.path("started"), Duration::from_secs(60));
    s.restate.kill_and_restart();
    let crashed = wait(&s.restate, &session, &run);
    assert_exactly_once(&s, prompt, &expected, &crashed, &session, &run);
}

#[test]
fn sigterm_to_a_worker_hands_its_turn_to_another() {
    let s = Setup::new("sigterm", 2);
    let mut a = s.worker(0);
    s.register();
    let prompt = "tools 2 3 slow";
    let (session, run) = submit(&s.restate, prompt);
    wait_for(&s.dir.path("started"), Duration::from_secs(60));
    let _b = s.worker(1);
    assert!(a.term(Duration::from_secs(10)), "the worker exits promptly on SIGTERM");
    let o = wait(&s.restate, &session, &run);
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    let pids: BTreeSet<String> = keys(&s.dir.0).into_iter().map(|(_, p)| p).collect();
    assert_eq!(pids.len(), 2, "both workers ran calls: {pids:?}");
    assert_eq!(key_counts(&s.dir.0)[&format!("{session}/{run}/1/c1_3")], 2);
}

#[test]
fn cancel_mid_run_ends_it_aborted_with_a_coherent_transcript() {
    let s = Setup::new("cancel", 1);
    let _w = s.worker(0);
    s.register();
    let (_session, run) = submit(&s.restate, "tools 3 1 slow");
    wait_for(&s.dir.path("started"), Duration::from_secs(60));
    let out = reins().arg("cancel").args(submit_flags(&s.restate)).arg(&run).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let res = loop {
        let res = reins().arg("result").args(submit_flags(&s.restate)).args([&run, "--json"]).output().unwrap();
        if res.status.code() != Some(15) {
            break res;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(res.status.code(), Some(7), "{}", String::from_utf8_lossy(&res.stderr));
    let o: Outcome = serde_json::from_slice(&res.stdout).unwrap();
    assert_eq!(o.status, Status::Aborted);
    assert!(o.error.as_deref().unwrap_or_default().contains("cancelled"), "{:?}", o.error);
    assert!(o.steps < 4, "it stopped before its end");
    assert_coherent(&o);
}

#[test]
fn two_workers_run_a_hundred_sessions_each_once() {
    let s = Setup::new("hundred", 2);
    let (_a, _b) = (s.worker(0), s.worker(1));
    s.register();
    let c = client(&s.restate);
    let outcomes: Vec<(String, Outcome)> = runtime().block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..100 {
            let c = c.clone();
            tasks.spawn(async move {
                let prompt = format!("tools 1 1 #{i}");
                let (session, run_id) = (reins_restate::new_id(), reins_restate::new_id());
                let req = TurnRequest {
                    run_id: run_id.clone(),
                    prompt: prompt.clone(),
                    agent: Some("test".into()),
                    ..Default::default()
                };
                c.submit(&session, &req).await.unwrap();
                (prompt, c.wait(&session, &run_id).await.unwrap())
            });
        }
        let mut out = Vec::new();
        while let Some(r) = tasks.join_next().await {
            out.push(r.unwrap());
        }
        out
    });
    assert_eq!(outcomes.len(), 100);
    for (prompt, o) in &outcomes {
        assert_eq!(o.status, Status::Completed, "{prompt}: {:?}", o.error);
        // Requests of 2 and 4 messages (the instructions, the prompt, then a call and its result): once each.
        assert_eq!(s.model.counts(prompt), BTreeMap::from([(2, 1), (4, 1)]), "{prompt}");
    }
    let keys = key_counts(&s.dir.0);
    assert_eq!(keys.len(), 100);
    assert!(keys.values().all(|&n| n == 1), "no call ran twice");
    let pids: BTreeSet<String> = support::keys(&s.dir.0).into_iter().map(|(_, p)| p).collect();
    assert_eq!(pids.len(), 2, "both workers served: {pids:?}");
}

#[test]
fn bad_agents_unknown_ids_and_an_unreachable_service_are_clear_errors() {
    let s = Setup::new("bad", 1);
    // A second agent of the worker whose workspace is not there (on this worker).
    let gone = s.dir.path("gone.toml");
    std::fs::write(&gone, "model = \"openai-chat:test\"\n[workspace]\npath = \"/nonexistent/reins-ws\"\n").unwrap();
    let _w = s.worker_with(0, &["--agent", &format!("gone={}", gone.display())]);
    s.register();
    let c = client(&s.restate);
    // A turn's override that does not parse is a terminal error naming the key, not a retry loop.
    let session = reins_restate::new_id();
    let run_id = reins_restate::new_id();
    let url = format!("{}/ReinsSession/{session}/turn/send", s.restate.ingress);
    let bad = json!({"run_id": run_id, "prompt": "hi", "overrides": {"limits": {"max_steps": 0}}});
    let (status, body) = runtime()
        .block_on(async {
            let resp =
                reqwest::Client::new().post(&url).header("idempotency-key", &run_id).json(&bad).send().await.ok()?;
            Some((resp.status().as_u16(), resp.text().await.ok()?))
        })
        .unwrap();
    assert!((200..300).contains(&status), "{status} {body}");
    match runtime().block_on(c.wait(&session, &run_id)) {
        Err(ClientError::Failed(m)) => assert!(m.contains("bad turn: overrides.limits.max_steps"), "{m}"),
        other => panic!("{other:?}"),
    }
    let found = runtime().block_on(c.find(&run_id)).unwrap();
    assert_eq!(found.status, "completed");
    // A workspace this worker cannot open is refused, saying so.
    let req = TurnRequest {
        run_id: reins_restate::new_id(),
        prompt: "hi".into(),
        agent: Some("gone".into()),
        ..Default::default()
    };
    let session = reins_restate::new_id();
    runtime().block_on(c.submit(&session, &req)).unwrap();
    match runtime().block_on(c.wait(&session, &req.run_id)) {
        Err(ClientError::Failed(m)) => assert!(m.contains("cannot open the workspace /nonexistent/reins-ws"), "{m}"),
        other => panic!("{other:?}"),
    }
    // The CLI: a bad override is exit 2 before anything is sent; an unknown id or session, or nothing
    // listening, is exit 15.
    let out = reins().arg("submit").args(submit_flags(&s.restate)).args(["--max-steps", "0", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    for cmd in ["status", "result", "cancel"] {
        let out = reins().arg(cmd).args(submit_flags(&s.restate)).arg("no-such-run").output().unwrap();
        assert_eq!(out.status.code(), Some(15), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = reins()
        .arg("submit")
        .args(submit_flags(&s.restate))
        .args(["--session", "no-such-session", "more"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(15), "{}", String::from_utf8_lossy(&out.stderr));
    let port = free_port();
    let out = reins().args(["status", "--restate", &format!("http://127.0.0.1:{port}"), "x1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(15));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unreachable"));
}

#[test]
fn a_worker_given_an_identity_key_refuses_unsigned_requests() {
    let s = Setup::new("identity", 1);
    let key = "publickeyv1_ChjENKeMvCtRnqG2mrBK1HmPKufgFUc98K8B3ononQvp";
    let w = s.worker_with(0, &["--identity-key", key]);
    // This server signs nothing: the worker refuses its discovery, so it cannot be registered.
    let (status, body) = http_post(&format!("{}/deployments", s.restate.admin), &json!({"uri": w.uri()})).unwrap();
    assert!(!(200..300).contains(&status), "{status} {body}");
    assert!(body.contains("401") || body.to_lowercase().contains("unauthorized"), "{body}");
    // A key that does not parse is refused before the worker listens.
    let allowed = format!("test={}", s.agent.display());
    let out = reins()
        .args(["worker", "--listen", "127.0.0.1:0", "--agent", &allowed, "--identity-key", "not-a-key"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid request identity key"));
}

/// A test-only Ed25519 key pair: the private key Restate signs requests with, and its public key in
/// Restate's `publickeyv1_` form (base58 of the 32 raw bytes).
const IDENTITY_PEM: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEID/BpaKVhxEUvq2hZ9QqnXIuqOeBmnGYlwur0a3yH04N
-----END PRIVATE KEY-----
";
const IDENTITY_PUBLIC: &str = "publickeyv1_4Rp4Px2Aqb5UUFoRys6EZ8nUjancDX218vp2voH78znP";

#[test]
fn a_worker_given_the_key_of_a_signing_server_serves_its_runs() {
    let dir = Dir::new("identity-ok");
    let restate = Restate::start_invoker("", Some(IDENTITY_PEM));
    let model = ModelServer::start();
    let agent = agent_file(&dir.0, &model.url);
    let allowed = format!("test={}", agent.display());
    let w = Worker::start_with(
        free_port(),
        dir.path("worker.log"),
        &["--agent", &allowed, "--identity-key", IDENTITY_PUBLIC],
    );
    // The server signs every request with its private key: the worker accepts its discovery and its turns.
    restate.register(&w.uri());
    let (session, run) = submit(&restate, "tools 1 2");
    let o = wait(&restate, &session, &run);
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    assert_eq!(o.answer.as_deref(), Some("done after 1 steps and 2 results"));
    assert_eq!(key_counts(&dir.0).len(), 2);
    // The same worker refuses a server that signs with another key (or none).
    let other = Restate::start();
    let (status, body) = http_post(&format!("{}/deployments", other.admin), &json!({"uri": w.uri()})).unwrap();
    assert!(!(200..300).contains(&status), "{status} {body}");
}

#[test]
fn a_batch_of_parallel_calls_is_journaled_call_by_call() {
    let s = Setup::new("parallel", 1);
    let _w = s.worker(0);
    s.register();
    std::fs::write(s.dir.path("ws/f.txt"), "hello file").unwrap();
    let (session, run) = submit(&s.restate, "reads 4");
    let o = wait(&s.restate, &session, &run);
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    assert_eq!(o.answer.as_deref(), Some("read 4 times"));
    assert_coherent(&o);
    // Each of the four concurrent calls is its own journal entry.
    let inv = s.restate.query(&format!("SELECT id FROM sys_invocation WHERE idempotency_key = '{run}'"));
    let id = inv[0]["id"].as_str().unwrap();
    let names: Vec<String> = s
        .restate
        .query(&format!("SELECT name FROM sys_journal WHERE id = '{id}' AND name LIKE 'tool step%'"))
        .iter()
        .map(|r| r["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    let distinct: BTreeSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), 4, "{names:?}");
}

#[test]
fn a_worker_given_otlp_exports_the_spans_of_its_turns_and_flushes_them_on_sigterm() {
    use std::io::BufRead as _;
    let s = Setup::new("otlp", 1);
    // The OTLP receiver process (tests/otlp/receiver.py), over HTTP.
    let received = s.dir.path("spans.jsonl");
    let mut receiver = std::process::Command::new(common::otlp_python())
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/receiver.py"))
        .arg(&received)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(receiver.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let ports: serde_json::Value = serde_json::from_str(&line).unwrap();
    let url = format!("http://127.0.0.1:{}", ports["http"]);
    let mut w = s.worker_with(0, &["--otlp", &url]);
    s.register();
    let (session, run) = submit(&s.restate, "tools 2 1");
    let o = wait(&s.restate, &session, &run);
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    // The worker's spans are sent at the latest when it stops.
    assert!(w.term(Duration::from_secs(20)), "the worker exits promptly on SIGTERM");
    let _ = receiver.kill();
    let _ = receiver.wait();
    let spans: Vec<serde_json::Value> = std::fs::read_to_string(&received)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let log = std::fs::read_to_string(s.dir.path("worker0.log")).unwrap_or_default();
    let runs: Vec<&serde_json::Value> = spans
        .iter()
        .filter(|s| s["name"] == "invoke_agent" && s["attributes"]["reins.run.id"] == run.as_str())
        .collect();
    assert_eq!(runs.len(), 1, "{spans:#?}\n{log}");
    assert_eq!(runs[0]["attributes"]["reins.session.id"], session.as_str());
    assert_eq!(runs[0]["attributes"]["reins.status"], "completed");
    let children = |name: &str| {
        spans
            .iter()
            .filter(|s| s["parent_span_id"] == runs[0]["span_id"] && s["attributes"]["gen_ai.operation.name"] == name)
            .count()
    };
    assert_eq!(children("chat"), o.steps as usize, "{spans:#?}");
    assert_eq!(children("execute_tool"), o.tool_calls as usize, "{spans:#?}");
    assert!(!log.contains("cannot send traces"), "{log}");
}

/// The live (not zombie) processes whose command line holds the argument `arg`.
fn processes_with(arg: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let zombie = stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if !zombie && cmdline.split(|b| *b == 0).any(|a| a == arg.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// `kill -9` of a worker while its preset command runs — a shell with a background child, `sh -c 'sleep ARG &
/// sleep ARG'`: the shell and both sleeps die with the worker (polled up to 30 s). Before, the whole group lived on,
/// writing to the workspace while the retried call ran again under the same idempotency key.
#[test]
fn a_worker_killed_with_9_takes_its_commands_with_it() {
    let s = Setup::new("kill9cmd", 1);
    let arg = format!("120.{}7", std::process::id());
    let pid_file = s.dir.path("slow.pid");
    // The `slow` preset becomes a shell that writes its pid and waits for a background sleep.
    let text = std::fs::read_to_string(&s.agent).unwrap();
    let at = text.find("[[presets]]\nname = \"slow\"").unwrap();
    let text = format!(
        "{}[[presets]]\nname = \"slow\"\nprogram = \"sh\"\nargs = [\"-c\", \"echo $$ > {}; sleep {arg} & sleep {arg}\", \
         \"slow\"]\narg_schema = {{ type = \"array\", items = {{ type = \"string\" }}, maxItems = 1 }}\n",
        &text[..at],
        pid_file.display()
    );
    std::fs::write(&s.agent, text).unwrap();
    let mut w = s.worker(0);
    s.register();
    let _ = submit(&s.restate, "tools 1 1 slow");
    let t0 = std::time::Instant::now();
    while processes_with(&arg).len() < 2 || !pid_file.exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the command never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    let shell: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    w.kill9();
    let t0 = std::time::Instant::now();
    let shell_alive = || {
        std::fs::read_to_string(format!("/proc/{shell}/stat"))
            .is_ok_and(|st| st.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
    };
    while !processes_with(&arg).is_empty() || shell_alive() {
        assert!(t0.elapsed() < Duration::from_secs(30), "the command outlived the worker: {:?}", processes_with(&arg));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 22, item 13: a durable run on a script model whose worker restarts mid batch goes on with the script's
/// next turn: 3 steps for a 3-turn script. Before, the new worker's script answered step 2 with turn 1 again (4 steps,
/// the slow command started once more under a new key).
#[test]
fn a_script_model_continues_at_its_next_turn_after_a_worker_restart() {
    let s = Setup::new("script-restart", 1);
    let script = s.dir.path("turns.json");
    std::fs::write(
        &script,
        json!([
            {"content": "", "tool_calls": [{"id": "c1", "name": "run_command", "arguments": {"command": "slow"}}]},
            {"content": "", "tool_calls": [{"id": "c2", "name": "run_command", "arguments": {"command": "note"}}]},
            {"content": "done"}
        ])
        .to_string(),
    )
    .unwrap();
    let text = std::fs::read_to_string(&s.agent).unwrap();
    let (_, rest) = text.split_once("[workspace]").unwrap();
    std::fs::write(&s.agent, format!("model = \"script:{}\"\n[workspace]{rest}", script.display())).unwrap();
    let mut w = s.worker(0);
    s.register();
    let (session, run) = submit(&s.restate, "go");
    wait_for(&s.dir.path("started"), Duration::from_secs(60));
    w.restart();
    let o = wait(&s.restate, &session, &run);
    assert_eq!((o.status, o.steps, o.answer.as_deref()), (Status::Completed, 3, Some("done")), "{:?}", o.error);
    assert_coherent(&o);
    let ids: Vec<String> = o.messages.iter().flat_map(|m| m.tool_calls().iter().map(|c| c.id.to_string())).collect();
    assert_eq!(ids, ["c1", "c2"]);
    // Two calls, two keys: the one in flight ran again under its own key, nothing ran under a third.
    assert_eq!(key_counts(&s.dir.0).len(), 2, "{:?}", key_counts(&s.dir.0));
}
