//! `reins sessions view` (one self-contained, private HTML file; `--open` through `xdg-open`, no shell) and
//! `reins ui` (loopback only, nothing without its token, a run that is still going shown as it goes, a clean
//! stop on SIGTERM), through the real binary.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::{Dir, reins};

const HOSTILE: &str = "</script><script>alert(1)</script>\u{2028}x\u{2029}<!--";

fn record(dir: &Dir, script: &Value) -> String {
    let script = dir.file("script.json", &script.to_string());
    let out_file = dir.0.join("outcome.json");
    let out = reins()
        .arg("run")
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .arg("--test-tools")
        .arg("--output")
        .arg(&out_file)
        .arg("--store")
        .arg(dir.store())
        .arg(format!("go {HOSTILE}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    outcome["session_id"].as_str().unwrap().to_owned()
}

fn hostile_script() -> Value {
    json!([
        {"content": format!("look {HOSTILE}"), "tool_calls": [
            {"id": "e1", "name": "echo", "arguments": {"text": HOSTILE}},
            {"id": "f1", "name": "fail", "arguments": {"message": HOSTILE}}],
         "usage": {"input_tokens": 10, "output_tokens": 3}},
        {"content": "done", "usage": {"input_tokens": 12, "output_tokens": 1}}
    ])
}

/// The JSON data block of a page.
fn data_block(html: &str) -> Value {
    let start = html.find("id=\"reins-data\"").expect("a data block");
    let start = start + html[start..].find('>').unwrap() + 1;
    let end = start + html[start..].find("</script>").unwrap();
    let block = &html[start..end];
    assert!(!block.contains('<') && !block.contains('\u{2028}'), "the data block is escaped");
    serde_json::from_str(block).unwrap()
}

#[test]
fn sessions_view_writes_one_private_self_contained_page() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = Dir::new("view-file");
    let id = record(&dir, &hostile_script());
    let page = dir.0.join("v.html");
    let out = reins()
        .args(["sessions", "view", &id[..8], "--output"])
        .arg(&page)
        .arg("--store")
        .arg(dir.store())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 run(s), 2 step(s), 5 transcript item(s)"));
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(std::fs::metadata(&page).unwrap().permissions().mode() & 0o777, 0o600, "readable by its owner only");
    // Self-contained: no external script, style, image, frame or link; a policy that forbids the network.
    assert!(
        html.contains("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'nonce-")
    );
    for external in ["<script src", "<link", "<img", "<iframe", "@import", "url(", "https:"] {
        assert!(!html.contains(external), "{external} in the page");
    }
    assert_eq!(html.matches("<script").count(), 2, "the data block and the page's script");
    assert!(!html.contains(HOSTILE) && !html.contains("alert(1)</script>"), "the session's text is escaped");
    let data = data_block(&html);
    assert_eq!(data["session"]["id"], json!(id));
    assert_eq!(data["items"][0]["text"]["s"], json!(format!("go {HOSTILE}")), "…and parses back exactly");
    assert_eq!(data["steps"].as_array().unwrap().len(), 2);
    assert_eq!(data["runs"][0]["bars"].as_array().unwrap().len(), 4, "2 model calls + 2 tool calls");

    // `-`: the page on stdout; no id: exit 2; the default file name in the current directory.
    let out = reins().args(["sessions", "view", &id, "-o", "-", "--store"]).arg(dir.store()).output().unwrap();
    assert!(out.status.success());
    assert_eq!(data_block(&String::from_utf8_lossy(&out.stdout))["session"]["id"], json!(id));
    let out = reins().args(["sessions", "view", "ffffffff", "--store"]).arg(dir.store()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let cwd = Dir::new("view-cwd");
    let out = reins().args(["sessions", "view", &id, "--store"]).arg(dir.store()).current_dir(&cwd.0).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(cwd.0.join(format!("reins-session-{}.html", &id[..8])).is_file());
    // A directory as the output: exit 2, nothing written.
    let out =
        reins().args(["sessions", "view", &id, "-o"]).arg(&cwd.0).arg("--store").arg(dir.store()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn open_runs_xdg_open_with_the_page_as_one_argument_and_no_shell() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = Dir::new("view-open");
    let id = record(&dir, &hostile_script());
    let bin = dir.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let seen = dir.0.join("seen.txt");
    let opener = bin.join("xdg-open");
    std::fs::write(
        &opener,
        format!("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> '{}'; done\n", seen.display()),
    )
    .unwrap();
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A name a shell would act on: `$(…)`, `;` and a space stay in the one argument.
    let page = dir.0.join("a b;$(touch pwned).html");
    let out = reins()
        .args(["sessions", "view", &id, "--open", "-o"])
        .arg(&page)
        .arg("--store")
        .arg(dir.store())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let t0 = Instant::now();
    while !seen.exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    let args = std::fs::read_to_string(&seen).expect("xdg-open ran");
    assert_eq!(args.lines().collect::<Vec<_>>(), vec![page.to_str().unwrap()]);
    assert!(!dir.0.join("pwned").exists() && !std::path::Path::new("pwned").exists());
    // Without xdg-open: a warning, the page written, exit 0.
    let empty = dir.0.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = reins()
        .args(["sessions", "view", &id, "--open", "-o"])
        .arg(dir.0.join("w.html"))
        .arg("--store")
        .arg(dir.store())
        .env("PATH", &empty)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no xdg-open"));
    assert!(dir.0.join("w.html").is_file());
}

/// One HTTP/1.1 request: status, headers (lower-cased), body.
fn http(addr: SocketAddr, method: &str, target: &str, host: Option<&str>) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let host = host.map(str::to_owned).unwrap_or_else(|| addr.to_string());
    write!(s, "{method} {target} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, head, body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else { return out };
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 2 + n + 2..];
    }
}

fn get_json(addr: SocketAddr, target: &str) -> Value {
    let (status, head, body) = http(addr, "GET", target, None);
    assert_eq!(status, 200, "{target}: {head}");
    serde_json::from_slice(&body).unwrap()
}

/// `reins ui` started on the store of `dir`: the child, its address and token.
fn start_ui(dir: &Dir) -> (Child, SocketAddr, String) {
    let mut child = reins()
        .args(["ui", "--listen", "127.0.0.1:0", "--store"])
        .arg(dir.store())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.trim().strip_prefix("http://").unwrap_or_else(|| panic!("a URL, not {line:?}"));
    let (addr, rest) = url.split_once('/').unwrap();
    let token = rest.strip_prefix("?token=").unwrap().to_owned();
    assert_eq!(token.len(), 64, "256 bits as hex");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    (child, addr.parse().unwrap(), token)
}

fn stop(child: &mut Child) -> (Option<i32>, String) {
    assert!(std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (status.code(), err);
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "reins ui did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ui_refuses_addresses_other_than_loopback() {
    for listen in ["0.0.0.0:0", "192.0.2.1:8080", "[::]:0", "localhost:0", "nonsense"] {
        let out = reins().args(["ui", "--listen", listen]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{listen}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("loopback"), "{listen}: {err}");
        assert!(out.stdout.is_empty(), "no URL printed for {listen}");
    }
}

#[test]
fn ui_answers_nothing_without_its_token_and_shows_a_run_that_is_still_going() {
    let dir = Dir::new("ui");
    let done = record(&dir, &hostile_script());
    let (mut ui, addr, token) = start_ui(&dir);

    // Nothing without the token: 403 and no body, whatever the path.
    let wrong = "0".repeat(64);
    for target in [
        "/".to_owned(),
        "/api/sessions".to_owned(),
        format!("/s/{done}"),
        format!("/api/s/{done}"),
        format!("/?token={wrong}"),
        format!("/?token={}", &token[..63]),
        format!("/?token={token}0"),
        format!("/?tok={token}"),
        format!("/?token=%{}", &token[1..]),
        "/nowhere".to_owned(),
    ] {
        let (status, head, body) = http(addr, "GET", &target, None);
        assert_eq!(status, 403, "{target}: {head}");
        assert!(body.is_empty(), "{target}: a body");
    }
    // A page of another site whose name points at 127.0.0.1 (DNS rebinding) sends its own Host: nothing.
    let (status, _, body) = http(addr, "GET", &format!("/?token={token}"), Some("evil.example"));
    assert_eq!((status, body.len()), (403, 0));
    // With the token: read-only (405 for anything but GET/HEAD), 404 with no body for an unknown path.
    let (status, _, body) = http(addr, "POST", &format!("/api/sessions?token={token}"), None);
    assert_eq!((status, body.len()), (405, 0));
    let (status, _, body) = http(addr, "GET", &format!("/nowhere?token={token}"), None);
    assert_eq!((status, body.len()), (404, 0));
    let (status, _, body) = http(addr, "GET", &format!("/s/ffffffff?token={token}"), None);
    assert_eq!((status, body.len()), (404, 0));
    let (status, head, body) =
        http(addr, "GET", &format!("/?token={token}"), Some(&format!("localhost:{}", addr.port())));
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("content-security-policy: default-src 'none'"), "{head}");
    assert!(head.contains("referrer-policy: no-referrer"));
    let html = String::from_utf8(body).unwrap();
    assert!(html.contains("data-page=\"list\""));
    assert_eq!(data_block(&html)["sessions"][0]["id"], json!(done));
    let (status, _, body) = http(addr, "HEAD", &format!("/?token={token}"), None);
    assert_eq!((status, body.len()), (200, 0));

    // A real run that is still going, in the same store: slow model turns.
    let turns: Vec<Value> = (0..10)
        .map(|i| {
            json!({"delay_ms": 250, "content": format!("turn {i}"), "tool_calls": [
            {"id": format!("a{i}"), "name": "echo", "arguments": {"text": format!("x{i}")}}]})
        })
        .chain(std::iter::once(json!({"content": "finished"})))
        .collect();
    let script = dir.file("slow.json", &Value::Array(turns).to_string());
    let mut run = reins()
        .arg("run")
        .arg("--model")
        .arg(format!("script:{}", script.display()))
        .args(["--test-tools", "--max-steps", "20", "--store"])
        .arg(dir.store())
        .arg("slowly")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let running = loop {
        let list = get_json(addr, &format!("/api/sessions?token={token}"));
        let found = list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] != json!(done) && s["steps"].as_u64() >= Some(1))
            .cloned();
        if let Some(s) = found {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "the running session never showed: {list}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(running["status"], "running");
    let id = running["id"].as_str().unwrap().to_owned();
    let before = get_json(addr, &format!("/api/s/{id}/stamp?token={token}"))["stamp"].clone();
    let first = get_json(addr, &format!("/api/s/{id}?token={token}"));
    let stamp = get_json(addr, &format!("/api/s/{id}/stamp?token={token}"))["stamp"].clone();
    assert_eq!(first["session"]["status"], "running");
    // The page knows the stamp of what it shows (the run may have moved between the requests).
    assert!(first["live"]["stamp"] == before || first["live"]["stamp"] == stamp, "{first}");
    let steps_then = first["steps"].as_array().unwrap().len();
    assert!(first["runs"][0]["status"] == "running");
    // It moves on: more steps, a new stamp, while the run goes on.
    let t1 = Instant::now();
    let later = loop {
        let v = get_json(addr, &format!("/api/s/{id}?token={token}"));
        if v["steps"].as_array().unwrap().len() > steps_then {
            break v;
        }
        assert!(t1.elapsed() < Duration::from_secs(30), "the running session never moved");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_ne!(get_json(addr, &format!("/api/s/{id}/stamp?token={token}"))["stamp"], stamp);
    assert!(later["runs"][0]["bars"].as_array().unwrap().iter().any(|b| b["kind"] == "tool"));
    let (status, head, body) = http(addr, "GET", &format!("/s/{}?token={token}", &id[..8]), None);
    assert_eq!(status, 200);
    assert!(head.contains("connect-src 'self'"), "the page may poll its server: {head}");
    let page = data_block(&String::from_utf8(body).unwrap());
    assert_eq!(page["session"]["id"], json!(id));
    assert_eq!(page["live"]["data_url"], json!(format!("/api/s/{id}")));
    // The run ends; the view says so.
    assert!(run.wait().unwrap().success());
    assert_eq!(get_json(addr, &format!("/api/s/{id}?token={token}"))["session"]["status"], "completed");

    // Only loopback: the machine's other address (if it has one) does not answer on the port.
    if let Some(ip) = outward_ip() {
        assert!(TcpStream::connect_timeout(&SocketAddr::new(ip, addr.port()), Duration::from_secs(2)).is_err());
    }
    // SIGTERM: a clean stop (exit 0), the port closed.
    let (code, err) = stop(&mut ui);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("reins ui: stopped"), "{err}");
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(), "the port is closed");
}

/// The address this machine would use to reach the outside (no packet is sent), when it is not loopback.
fn outward_ip() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    Some(s.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}
