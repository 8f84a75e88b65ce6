//! Approvals of durable runs: a turn whose policy asks waits on a Restate awakeable (suspended, holding no
//! worker) until `reins approve --restate URL` resolves it. With a real restate-server, `reins worker`
//! processes, a model server that counts its requests and tools that record each idempotency key they see.

#[path = "durable/support.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use reins::{Message, Outcome, Status};
use serde_json::{Value, json};
use support::*;

/// One restate-server (quick to suspend a waiting invocation), a model server, a worker port and an agent
/// whose `run_command` calls wait for decisions.
struct Setup {
    dir: Dir,
    restate: Restate,
    model: ModelServer,
    agent: std::path::PathBuf,
    port: u16,
}

impl Setup {
    fn new(name: &str) -> Setup {
        let dir = Dir::new(name);
        // A waiting invocation is asked to suspend after 1 s without news (Restate's default is a minute).
        let restate = Restate::start_invoker("inactivity-timeout = \"1s\"", None);
        let model = ModelServer::start();
        let agent = approving_agent_file(&dir.0, &model.url);
        Setup { dir, restate, model, agent, port: free_port() }
    }

    fn worker(&self, n: usize) -> Worker {
        let allowed = format!("test={}", self.agent.display());
        Worker::start_with(self.port, self.dir.path(&format!("worker{n}.log")), &["--agent", &allowed])
    }

    fn flags(&self) -> Vec<String> {
        vec!["--restate".into(), self.restate.ingress.clone(), "--restate-admin".into(), self.restate.admin.clone()]
    }

    /// `reins submit` (not waiting): the session and run ids.
    fn submit(&self, prompt: &str) -> (String, String) {
        let out = reins().arg("submit").args(self.flags()).args(["--agent", "test", prompt]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let get = |p: &str| stdout.lines().find_map(|l| l.strip_prefix(p)).unwrap().to_owned();
        (get("session "), get("run "))
    }

    fn status(&self, id: &str) -> Value {
        let out = reins().arg("status").args(self.flags()).args([id, "--json"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap()
    }

    /// Waits until `reins status` says the run waits for decisions about `calls` (and, with `suspended`,
    /// that Restate suspended it: no worker holds it).
    fn wait_awaiting(&self, run: &str, calls: &[&str], suspended: bool) -> Value {
        let t0 = Instant::now();
        loop {
            let v = self.status(run);
            let ids: Vec<&str> = v["awaiting"]
                .as_array()
                .map(|a| a.iter().filter_map(|c| c["call_id"].as_str()).collect())
                .unwrap_or_default();
            if v["state"] == "awaiting_approval"
                && ids == calls
                && (!suspended || v["invocation_status"] == "suspended")
            {
                return v;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "the run does not wait for {calls:?}: {v}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn approve(&self, run: &str, args: &[&str]) -> Output {
        reins().arg("approve").args(self.flags()).arg(run).args(args).output().unwrap()
    }

    /// Every idempotency key the tools saw, with how many times.
    fn keys(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for (k, _) in keys(&self.dir.0) {
            *m.entry(k).or_insert(0) += 1;
        }
        m
    }

    /// The journal entries of the run's invocation of type `kind` (e.g. `Command: Run`).
    fn journal_entries(&self, run: &str, kind: &str) -> usize {
        let inv = self.restate.query(&format!("SELECT id FROM sys_invocation WHERE idempotency_key = '{run}'"));
        let id = inv[0]["id"].as_str().unwrap();
        self.restate
            .query(&format!("SELECT entry_type FROM sys_journal WHERE id = '{id}'"))
            .iter()
            .filter(|r| r["entry_type"] == kind)
            .count()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The outcome `reins approve --wait --json` printed.
fn outcome(out: &Output) -> Outcome {
    assert_eq!(out.status.code(), Some(0), "{}\n{}", text(&out.stdout), text(&out.stderr));
    serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap()
}

fn tool_results(o: &Outcome) -> Vec<String> {
    o.messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult(r) => Some(r.content.clone()),
            _ => None,
        })
        .collect()
}

fn no_keys_yet(dir: &Path) {
    assert!(keys(dir).is_empty(), "no call ran before its decision: {:?}", keys(dir));
}

#[test]
fn a_durable_run_waits_suspended_for_reins_approve_and_each_approved_call_runs_once() {
    let s = Setup::new("approve");
    let _w = s.worker(0);
    s.restate.register(&_w.uri());
    let (session, run) = s.submit("tools 1 2");
    // The turn waits for both calls, suspended: `reins status` says so and names them.
    let v = s.wait_awaiting(&run, &["c1_1", "c1_2"], true);
    assert_eq!(v["awaiting"][0]["name"], "run_command");
    assert!(v["awaiting"][0]["reason"].as_str().is_some_and(|r| !r.is_empty()), "{v}");
    let readable = reins().arg("status").args(s.flags()).arg(&session).output().unwrap();
    let readable = text(&readable.stdout);
    assert!(
        readable.contains("state awaiting_approval") && readable.contains("waiting c1_2 run_command"),
        "{readable}"
    );
    no_keys_yet(&s.dir.0);
    // A follow-up turn queues behind the waiting one (one turn of a session at a time); the session's id still
    // finds the waiting run.
    let follow = reins().arg("submit").args(s.flags()).args(["--session", &session, "again"]).output().unwrap();
    assert_eq!(follow.status.code(), Some(0), "{}", text(&follow.stderr));
    let follow = text(&follow.stdout).lines().find_map(|l| l.strip_prefix("run ")).unwrap().to_owned();
    let v = s.status(&session);
    assert_eq!((&v["run"], &v["state"]), (&json!(run), &json!("awaiting_approval")), "{v}");

    // Decisions the run cannot apply are not taken: an edit the tool's schema refuses makes the turn ask
    // again, saying why (and --wait reports it, exit 2).
    let bad = s.approve(&run, &["--edit", r#"c1_2={"command": 5}"#, "--wait"]);
    assert_eq!(bad.status.code(), Some(2), "{}\n{}", text(&bad.stdout), text(&bad.stderr));
    assert!(text(&bad.stderr).contains("c1_2"), "{}", text(&bad.stderr));
    let v = s.wait_awaiting(&run, &["c1_1", "c1_2"], false);
    assert!(v["problem"].as_str().is_some_and(|p| p.contains("c1_2")), "{v}");
    // A call that does not wait is refused before anything is sent.
    let unknown = s.approve(&run, &["--call", "zz"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(text(&unknown.stderr).contains("no call \"zz\""), "{}", text(&unknown.stderr));

    // Deciding one call leaves the turn waiting for the other.
    let one = s.approve(&session, &["--call", "c1_1"]);
    assert_eq!(one.status.code(), Some(0), "{}", text(&one.stderr));
    assert!(text(&one.stdout).contains("c1_1 run_command approved"), "{}", text(&one.stdout));
    s.wait_awaiting(&run, &["c1_2"], false);
    no_keys_yet(&s.dir.0);

    // The other with edited arguments; the run goes on to its end.
    let o =
        outcome(&s.approve(&run, &["--edit", r#"c1_2={"command": "note", "args": ["edited"]}"#, "--wait", "--json"]));
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    assert_eq!(o.answer.as_deref(), Some("done after 1 steps and 2 results"));
    let results = tool_results(&o);
    assert!(results[0].contains("noted 1-1"), "{results:?}");
    assert!(results[1].contains("changed by the approver") && results[1].contains("noted edited"), "{results:?}");
    // Each call ran once, the model was asked once per step, and the wait is over.
    let keys = s.keys();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.values().all(|&n| n == 1), "{keys:?}");
    assert!(s.model.counts("tools 1 2").values().all(|&n| n == 1), "{:?}", s.model.counts("tools 1 2"));
    let v = s.status(&run);
    assert_eq!(v["state"], "finished: completed");
    assert!(v.get("awaiting").is_none(), "{v}");
    let again = s.approve(&run, &["--all"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("does not wait for an approval"), "{}", text(&again.stderr));
    // The queued follow-up ran after it, continuing the transcript.
    let res = loop {
        let res = reins().arg("result").args(s.flags()).args([&follow, "--json"]).output().unwrap();
        if res.status.code() != Some(15) {
            break res;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let second: Outcome = serde_json::from_str(text(&res.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(second.status, Status::Completed, "{:?}", second.error);
    assert_eq!(second.messages[..o.messages.len()], o.messages[..]);
}

#[test]
fn a_denied_call_never_runs_and_the_model_gets_the_reason() {
    let s = Setup::new("deny");
    let w = s.worker(0);
    s.restate.register(&w.uri());
    let (session, run) = s.submit("tools 2 2");
    s.wait_awaiting(&run, &["c1_1", "c1_2"], false);
    // --wait: the run goes on and asks about its next batch; approve says so (exit 14) and lists it.
    let next = s.approve(&session, &["--all", "--deny", "not on a Friday", "--wait", "--json"]);
    assert_eq!(next.status.code(), Some(14), "{}\n{}", text(&next.stdout), text(&next.stderr));
    let v: Value = serde_json::from_str(text(&next.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(
        (&v["state"], &v["awaiting"][0]["call_id"], &v["awaiting"][1]["call_id"]),
        (&json!("awaiting_approval"), &json!("c2_1"), &json!("c2_2")),
        "{v}"
    );
    let o = outcome(&s.approve(&run, &["--all", "--deny", "not on a Friday", "--wait", "--json"]));
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    let results = tool_results(&o);
    assert_eq!(results.len(), 4);
    for r in results {
        assert!(r.contains("denied by the approver: not on a Friday"), "{r}");
    }
    assert_eq!(o.answer.as_deref(), Some("done after 2 steps and 4 results"));
    // The transcript the model was sent holds the reasons; each step asked it once.
    assert!(s.model.counts("tools 2 2").values().all(|&n| n == 1), "{:?}", s.model.counts("tools 2 2"));
    assert!(s.keys().is_empty(), "a denied call never runs: {:?}", s.keys());

    // A run cancelled while it waits ends aborted, with a coherent transcript.
    let (_session, run) = s.submit("tools 1 1");
    s.wait_awaiting(&run, &["c1_1"], true);
    let out = reins().arg("cancel").args(s.flags()).arg(&run).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let res = loop {
        let res = reins().arg("result").args(s.flags()).args([&run, "--json"]).output().unwrap();
        if res.status.code() != Some(15) {
            break res;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let o: Outcome = serde_json::from_str(text(&res.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(o.status, Status::Aborted, "{:?}", o.error);
    let t = reins::Transcript::from_messages(o.messages.clone(), &reins::CharCounter).unwrap();
    assert!(t.is_complete(), "{:#?}", o.messages);
    assert!(s.keys().is_empty());
    assert!(s.status(&run).get("awaiting").is_none());
}

#[test]
fn a_worker_killed_while_the_run_waits_is_replaced_and_nothing_is_asked_or_run_twice() {
    let s = Setup::new("approve-kill");
    let mut w = s.worker(0);
    s.restate.register(&w.uri());
    let (session, run) = s.submit("tools 2 1");
    s.wait_awaiting(&run, &["c1_1"], false);
    // The worker dies while the run waits; the decision comes while no worker runs.
    let first = w.pid().to_string();
    w.kill9();
    let sent = s.approve(&run, &["--all", "--json"]);
    assert_eq!(sent.status.code(), Some(0), "{}", text(&sent.stderr));
    let sent: Value = serde_json::from_str(text(&sent.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(
        sent["decisions"][0],
        json!({"call_id": "c1_1", "arguments_hash": sent["decisions"][0]["arguments_hash"], "decision": "approve"})
    );
    // A new worker replays the turn: the same awakeable and its answer from the journal, then on.
    let _w2 = s.worker(1);
    s.wait_awaiting(&run, &["c2_1"], false);
    let o = outcome(&s.approve(&run, &["--call", "c2_1", "--wait", "--json"]));
    assert_eq!(o.status, Status::Completed, "{:?}", o.error);
    assert_eq!(o.session_id.as_deref(), Some(session.as_str()));
    let results = tool_results(&o);
    assert!(results.len() == 2 && results[0].contains("noted 1-1") && results[1].contains("noted 2-1"), "{results:?}");
    // No second question (one awakeable per batch in the journal, the model asked once per step), no
    // second run of a call.
    // (An awakeable's answer is a signal notification; each model call and tool call one `run` command.)
    assert_eq!(s.journal_entries(&run, "Notification: Signal"), 2);
    assert_eq!(s.journal_entries(&run, "Command: Run"), 5);
    assert!(s.model.counts("tools 2 1").values().all(|&n| n == 1), "{:?}", s.model.counts("tools 2 1"));
    let keys = s.keys();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.values().all(|&n| n == 1), "{keys:?}");
    assert!(keys.contains_key(&format!("{session}/{run}/1/c1_1")), "{keys:?}");
    assert!(support::keys(&s.dir.0).iter().all(|(_, pid)| *pid != first), "the new worker ran the calls");
}
