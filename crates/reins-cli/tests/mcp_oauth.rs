//! OAuth for HTTP MCP servers as a user meets it: `reins mcp login` against a real authorization server
//! (oidc-provider, installed by `.ci/setup-oauth.sh`) guarding a real MCP server (the official TypeScript SDK),
//! both started by each test on 127.0.0.1 (tests/oauth/fixture.mjs) and stopped by PID. The test plays the
//! browser (tests/oauth/browser.mjs): it opens the URL `reins mcp login` prints, goes through the provider's
//! login and consent, and lands on Reins's loopback redirect.

mod common;

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{Dir, reins};
use fake_opentelemetry_collector::FakeCollectorServer;
use serde_json::{Value, json};

fn oauth_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oauth")
}

/// node_modules with oidc-provider and the MCP SDK: `$REINS_OAUTH_NODE_MODULES`, else the CI cache (installed
/// there the way CI does when missing).
fn node_modules() -> PathBuf {
    if let Some(dir) = std::env::var_os("REINS_OAUTH_NODE_MODULES") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("REINS_CI_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/reins-ci"));
    let dir = cache.join("oauth/node_modules");
    if !dir.join("oidc-provider").is_dir() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let _ = Command::new("bash").arg("-c").arg("source .ci/setup-oauth.sh >&2").current_dir(root).status();
    }
    assert!(
        dir.join("oidc-provider").is_dir(),
        "oidc-provider is not installed ({} is missing): run `source .ci/setup-oauth.sh` from the repository root",
        dir.display()
    );
    dir
}

/// The authorization server and the protected MCP server, in one node process stopped by PID on drop.
struct Fixture {
    child: Child,
    mcp: String,
    /// The authorization server (oidc-provider: its token endpoint is `ISSUER/token`).
    issuer: String,
    log: PathBuf,
    /// Its stdout, kept open: a write to a closed pipe would kill it.
    _stdout: BufReader<std::process::ChildStdout>,
}

impl Fixture {
    /// Access tokens live `access_ttl` seconds.
    fn start(dir: &Dir, access_ttl: u32) -> Fixture {
        let log = dir.0.join("mcp-requests.log");
        let mut child = Command::new("node")
            .arg(oauth_dir().join("fixture.mjs"))
            .env("REINS_OAUTH_NODE_MODULES", node_modules())
            .env("LOG", &log)
            .env("ACCESS_TTL", access_ttl.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.0.join("fixture.stderr")).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut line).unwrap();
        let started: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("fixture said {line:?}: {e}"));
        let issuer = started["issuer"].as_str().unwrap().to_owned();
        Fixture { child, mcp: started["mcp"].as_str().unwrap().to_owned(), issuer, log, _stdout: stdout }
    }

    /// The requests the MCP server saw: {method, rpc, status, jti}.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn spec(&self) -> String {
        format!("web={}", self.mcp)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `reins` with its token files under `data`.
fn reins_in(data: &Path) -> Command {
    let mut c = reins();
    c.env("XDG_DATA_HOME", data).env("RUST_BACKTRACE", "0");
    for var in ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
        c.env_remove(var);
    }
    c
}

/// Runs `reins mcp login web` and plays the browser; returns its output (stderr holds the URL lines).
fn login(fx: &Fixture, data: &Path) -> Output {
    let mut child = reins_in(data)
        .args(["mcp", "login", "web", "--mcp", &fx.spec(), "--timeout", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let url = loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            let out = child.wait_with_output().unwrap();
            panic!("login printed no URL: {seen}{}", String::from_utf8_lossy(&out.stdout));
        }
        seen.push_str(&line);
        if let Some(url) = line.trim().strip_prefix("http://") {
            break format!("http://{url}");
        }
    };
    let browser = Command::new("node").arg(oauth_dir().join("browser.mjs")).arg(&url).output().unwrap();
    let page = format!("{}{}", String::from_utf8_lossy(&browser.stdout), String::from_utf8_lossy(&browser.stderr));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let mut out = child.wait_with_output().unwrap();
    out.stderr = format!("{seen}{rest}").into_bytes();
    assert!(browser.status.success(), "the browser got {page}; reins said {}", text(&out));
    assert!(page.starts_with("200 ") && page.contains("You can close this tab"), "{page}");
    out
}

fn text(out: &Output) -> String {
    format!("stdout: {}\nstderr: {}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn token_file(data: &Path) -> PathBuf {
    data.join("reins/mcp-auth/web.json")
}

/// The access and refresh tokens of the token file.
fn tokens(data: &Path) -> (String, String) {
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(token_file(data)).unwrap()).unwrap();
    let response = &saved["credentials"]["token_response"];
    (response["access_token"].as_str().unwrap().to_owned(), response["refresh_token"].as_str().unwrap().to_owned())
}

/// A scripted run calling the server's tools `calls` in turn, then answering "done"; its events on stdout, its
/// outcome in `outcome.json` and its session in the test's own store.
fn run(dir: &Dir, fx: &Fixture, data: &Path, calls: &[&str], extra: &[&str]) -> Command {
    let mut turns: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, name)| json!({"tool_calls": [{"id": format!("c{i}"), "name": name, "arguments": {}}]}))
        .collect();
    turns.push(json!({"content": "done"}));
    let script = dir.file("script.json", &Value::Array(turns).to_string());
    let mut cmd = reins_in(data);
    cmd.args(["run", "--json", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--store")
        .arg(dir.store())
        .arg("--output")
        .arg(dir.0.join("outcome.json"))
        .args(["--mcp", &fx.spec()])
        .args(extra)
        .arg("use the server");
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

fn tool_results(dir: &Dir) -> Vec<Value> {
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(dir.0.join("outcome.json")).unwrap()).unwrap();
    outcome["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").cloned().collect()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_gives_runs_a_token_that_no_session_event_span_or_output_holds() {
    let dir = Dir::new("oauth-login");
    let data = dir.0.join("data");
    let fx = Fixture::start(&dir, 600);

    let out = login(&fx, &data);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Logged in to MCP server \"web\""), "{}", text(&out));
    // The tokens are in a private file in a private directory.
    assert_eq!(mode(&token_file(&data)), 0o600);
    assert_eq!(mode(&data.join("reins/mcp-auth")), 0o700);
    let (access, refresh) = tokens(&data);
    assert!(access.len() > 20 && refresh.len() > 20);
    let saved = std::fs::read_to_string(token_file(&data)).unwrap();
    assert!(saved.contains(&fx.mcp), "a login is for one URL: {saved}");
    assert!(!text(&out).contains(&access) && !text(&out).contains(&refresh), "{}", text(&out));

    // A run uses the token; the server echoes it, and what it says is masked before anything records it.
    let mut collector = FakeCollectorServer::start().await.unwrap();
    let mut cmd = run(&dir, &fx, &data, &["web__whoami"], &["--events-content", "--otlp", &collector.endpoint()]);
    cmd.env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let results = tool_results(&dir);
    let answer = results[0]["content"].as_str().unwrap();
    assert!(answer.contains("subject reins-test-user; token <redacted>"), "{answer}");
    assert_eq!(results[0]["is_error"], false);
    let spans = collector.exported_spans(1000, Duration::from_secs(3)).await;
    let spans_text = format!("{spans:?}");
    assert!(spans_text.contains("subject reins-test-user"), "the result is in the spans: {spans_text}");
    let store = std::fs::read(dir.store()).unwrap();
    let outcome = std::fs::read_to_string(dir.0.join("outcome.json")).unwrap();
    for token in [&access, &refresh] {
        for (what, haystack) in [
            ("events and stderr", text(&out)),
            ("outcome", outcome.clone()),
            ("spans", spans_text.clone()),
            ("store", String::from_utf8_lossy(&store).into_owned()),
        ] {
            assert!(!haystack.contains(token.as_str()), "a token is in the {what}");
        }
    }
    assert!(fx.requests().iter().any(|r| r["rpc"] == "tools/call" && r["status"] == 200));

    // Logging out revokes the tokens at the authorization server (RFC 7009) and removes the file: the refresh
    // token it held no longer gets a token. A second logout says there was nothing.
    let (_, refresh) = tokens(&data);
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(token_file(&data)).unwrap()).unwrap();
    let client_id = saved["credentials"]["client_id"].as_str().unwrap().to_owned();
    let out = reins_in(&data).args(["mcp", "logout", "web"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("its tokens were revoked and removed"), "{}", text(&out));
    assert!(!token_file(&data).exists());
    let _ = rustls::crypto::ring::default_provider().install_default();
    let refreshed = reqwest::Client::new()
        .post(format!("{}/token", fx.issuer))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("grant_type=refresh_token&refresh_token={refresh}&client_id={client_id}"))
        .send()
        .await
        .unwrap();
    let status = refreshed.status().as_u16();
    let body = refreshed.text().await.unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid_grant"), "{body}");
    let out = reins_in(&data).args(["mcp", "logout", "web"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

#[test]
fn a_server_that_needs_a_login_and_has_none_says_to_run_reins_mcp_login() {
    let dir = Dir::new("oauth-missing");
    let data = dir.0.join("data");
    let fx = Fixture::start(&dir, 600);
    let hint = "MCP server \"web\" needs a login: run `reins mcp login web`";

    let out = run(&dir, &fx, &data, &["web__whoami"], &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("reins mcp login")).collect();
    assert_eq!(lines, [format!("reins: error: {hint}")], "{stderr}");

    let out = reins_in(&data).args(["mcp", "list", "--mcp", &fx.spec()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(hint), "{}", text(&out));
    // Nothing reached the tools: every request was refused.
    assert!(fx.requests().iter().all(|r| r["status"] == 401), "{:?}", fx.requests());
}

#[test]
fn a_token_about_to_expire_is_refreshed_before_it_is_sent() {
    let dir = Dir::new("oauth-refresh");
    let data = dir.0.join("data");
    // Access tokens live 2 s: Reins refreshes one with less than a second left.
    let fx = Fixture::start(&dir, 2);
    let out = login(&fx, &data);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let (access, refresh) = tokens(&data);
    let before = fx.requests().len();
    // Wait until the token has expired by the provider's clock and Reins's (whole seconds).
    std::thread::sleep(Duration::from_millis(3100));

    let out = run(&dir, &fx, &data, &["web__whoami"], &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(tool_results(&dir)[0]["is_error"], false, "{:?}", tool_results(&dir));
    let requests = fx.requests();
    // (Discovery's GET without a token gets its 401: it reads the challenge.)
    let posts: Vec<&Value> = requests[before..].iter().filter(|r| r["method"] == "POST").collect();
    assert!(
        posts.len() >= 3 && posts.iter().all(|r| r["status"] == 200),
        "the expired token was never sent: {posts:?}"
    );
    // Both tokens were replaced (the refresh token rotates), and the file stayed private.
    let (new_access, new_refresh) = tokens(&data);
    assert_ne!(new_access, access);
    assert_ne!(new_refresh, refresh);
    assert_eq!(mode(&token_file(&data)), 0o600);
}

#[test]
fn a_token_the_server_rejects_mid_run_is_refreshed_once_and_the_run_goes_on() {
    let dir = Dir::new("oauth-401");
    let data = dir.0.join("data");
    let fx = Fixture::start(&dir, 600);
    let out = login(&fx, &data);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let (access, _) = tokens(&data);
    let before = fx.requests().len();

    // The first call revokes the token it came with: the second is refused once, then sent with a fresh token.
    let out = run(&dir, &fx, &data, &["web__revoke_my_token", "web__whoami"], &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let results = tool_results(&dir);
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r["is_error"] == false), "{results:?}");
    let requests: Vec<Value> = fx.requests()[before..].to_vec();
    // (Discovery's GET without a token gets its 401 too: it reads the challenge.)
    let refused: Vec<&Value> = requests.iter().filter(|r| r["method"] == "POST" && r["status"] == 401).collect();
    assert_eq!(refused.len(), 1, "one 401, cured by one refresh: {requests:?}");
    assert_eq!(refused[0]["rpc"], "tools/call");
    let calls: Vec<&Value> = requests.iter().filter(|r| r["rpc"] == "tools/call" && r["status"] == 200).collect();
    assert_eq!(calls.len(), 2, "{requests:?}");
    assert_ne!(calls[0]["jti"], calls[1]["jti"], "the second call went with a new token");
    assert_ne!(tokens(&data).0, access);
}
