//! `reins ui` and `reins worker` out of file descriptors: run with a low `ulimit -n` and flooded with
//! connections until `accept` fails (EMFILE), each pauses and retries instead of spinning (its CPU time over two
//! seconds of that stays small), survives, and serves again once the connections go. A worker closes a
//! connection that sends nothing, or only the HTTP/2 preface, after its `--idle-timeout`.

#[path = "durable/support.rs"]
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use support::{Dir, agent_file, free_port, runtime};

/// The file descriptors each server may have open.
const LIMIT: usize = 64;

/// `reins ARGS` under `ulimit -n LIMIT`.
fn limited(args: &[&str], dir: &Dir) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {LIMIT} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_reins"))
        .args(args)
        .env("XDG_CONFIG_HOME", dir.path("config"))
        .env("REINS_STORE", dir.path("sessions.db"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// User plus system CPU time of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn ticks_per_second() -> u64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(100)
}

/// Floods `port` with connections until the server holds all the descriptors it may; checks that it does
/// not spin while `accept` fails; then lets the connections go.
fn flood_and_check_it_pauses(child: &Child, port: u16) {
    let pid = child.id();
    let mut held = Vec::new();
    let t0 = Instant::now();
    while open_fds(pid) < LIMIT {
        for _ in 0..10 {
            if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
                held.push(s);
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the server never ran out ({} fds)", open_fds(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    // More wait in the listen queue: accept keeps failing with EMFILE.
    for _ in 0..20 {
        held.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
    }
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(pid) - before;
    let hz = ticks_per_second();
    eprintln!("CPU time over 2 s out of descriptors: {} ms", used * 1000 / hz);
    // A spinning accept loop takes a whole core (2 s); pausing, a few milliseconds.
    assert!(used * 4 < hz, "the server spun while accept failed: {used} ticks of CPU in 2 s ({hz}/s)");
    drop(held);
}

#[test]
fn reins_ui_out_of_descriptors_pauses_and_serves_again() {
    let dir = Dir::new("ui-emfile");
    let port = free_port();
    let mut child = limited(&["ui", "--listen", &format!("127.0.0.1:{port}")], &dir);
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let token = line.trim().rsplit("token=").next().unwrap().to_owned();
    flood_and_check_it_pauses(&child, port);
    // Serves again, once the descriptors are free.
    let t0 = Instant::now();
    let answer = loop {
        let mut answer = String::new();
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let req = format!(
                "GET /api/sessions/stamp?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
            );
            if s.write_all(req.as_bytes()).is_ok() && s.read_to_string(&mut answer).is_ok() && !answer.is_empty() {
                break answer;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "reins ui does not serve again");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(child.try_wait().unwrap().is_none(), "reins ui exited");
    let _ = child.kill();
    let _ = child.wait();
}

/// GET `path` over HTTP/2 (prior knowledge), as Restate talks to a worker: the status, or None.
fn h2_get(port: u16, path: &str) -> Option<u16> {
    runtime().block_on(async move {
        let client: hyper_util::client::legacy::Client<_, Full<Bytes>> =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(true)
                .build(hyper_util::client::legacy::connect::HttpConnector::new());
        let req = hyper::Request::get(format!("http://127.0.0.1:{port}{path}")).body(Full::new(Bytes::new())).ok()?;
        let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req)).await.ok()?.ok()?;
        Some(resp.status().as_u16())
    })
}

#[test]
fn reins_worker_out_of_descriptors_pauses_and_serves_again() {
    let dir = Dir::new("worker-emfile");
    let agent = agent_file(&dir.0, "http://127.0.0.1:9/v1");
    let port = free_port();
    let allowed = format!("test={}", agent.display());
    let mut child = limited(&["worker", "--listen", &format!("127.0.0.1:{port}"), "--agent", &allowed], &dir);
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "the worker did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    flood_and_check_it_pauses(&child, port);
    let t0 = Instant::now();
    while h2_get(port, "/health") != Some(200) {
        assert!(t0.elapsed() < Duration::from_secs(60), "reins worker does not serve again");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(child.try_wait().unwrap().is_none(), "reins worker exited");
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads until the peer closes: true when it did, false when nothing came for a minute (a guard).
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn a_worker_closes_connections_that_send_no_request_after_its_idle_timeout() {
    let dir = Dir::new("worker-idle");
    let agent = agent_file(&dir.0, "http://127.0.0.1:9/v1");
    let port = free_port();
    let allowed = format!("test={}", agent.display());
    let w =
        support::Worker::start_with(port, dir.path("worker.log"), &["--agent", &allowed, "--idle-timeout", "300ms"]);
    // Sends nothing at all.
    let mut silent = TcpStream::connect(("127.0.0.1", w.port)).unwrap();
    // Sends HTTP/2's preface and an empty SETTINGS frame, then no request.
    let mut preface = TcpStream::connect(("127.0.0.1", w.port)).unwrap();
    preface.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").unwrap();
    assert!(closed_by_server(&mut silent), "a connection that sent nothing stayed open");
    assert!(closed_by_server(&mut preface), "a connection that sent no request stayed open");
    // A request is served (and Restate's connections, which carry requests, are not cut).
    assert_eq!(h2_get(w.port, "/health"), Some(200));
}
