//! Helpers shared by the `reins` command's tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc;
use std::thread;

use serde_json::Value;

/// The `reins` binary. Its sessions go to a store of this test process, never the user's own, and it reads no
/// user config.
pub fn reins() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_reins"));
    // No stdin of the test process: a prompt argument appends piped stdin, and a test that spawns the binary
    // must not leave it waiting on the harness's own (a test that pipes its own sets it after this).
    c.stdin(std::process::Stdio::null());
    c.env("REINS_STORE", std::env::temp_dir().join(format!("reins-cli-test-{}.db", std::process::id())));
    // No user config of the machine's user: a test that wants one sets XDG_CONFIG_HOME itself.
    c.env("XDG_CONFIG_HOME", std::env::temp_dir().join(format!("reins-cli-test-{}-no-config", std::process::id())));
    c
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("reins-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }

    /// Writes `content` to the file `name` in the directory.
    pub fn file(&self, name: &str, content: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    /// A session store in the directory.
    pub fn store(&self) -> PathBuf {
        self.0.join("sessions.db")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Serves one HTTP/1.1 request with `body` (of `content_type`) and sends back the request body it got.
pub fn serve_once(content_type: &'static str, body: String) -> (String, mpsc::Receiver<(String, Value)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else { return };
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut request_line = String::new();
        reader.read_line(&mut request_line).unwrap();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap();
                }
            }
        }
        let mut buf = vec![0; length];
        reader.read_exact(&mut buf).unwrap();
        let path = request_line.split_whitespace().nth(1).unwrap_or_default().to_owned();
        let _ = tx.send((path, serde_json::from_slice(&buf).unwrap_or(Value::Null)));
        let mut stream = stream;
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(body.as_bytes());
    });
    (format!("http://{addr}"), rx)
}

/// The Python with the `mcp` package that the MCP tests' servers run under (`$REINS_MCP_PYTHON`, else the CI
/// cache's venv); on a fresh machine it is installed the way CI does, by `.ci/setup-mcp.sh`.
pub fn python() -> PathBuf {
    let cache = std::env::var_os("REINS_CI_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/reins-ci"));
    let py =
        std::env::var_os("REINS_MCP_PYTHON").map(PathBuf::from).unwrap_or_else(|| cache.join("mcp/venv/bin/python"));
    if !py.is_file() {
        // A fresh machine: install the servers the way CI does (into the same cache).
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let _ = Command::new("bash").arg("-c").arg("source .ci/setup-mcp.sh >&2").current_dir(root).status();
    }
    assert!(
        py.is_file(),
        "the Python `mcp` package is not installed ({} is missing): run `source .ci/setup-mcp.sh` from the repository \
         root first",
        py.display()
    );
    py
}

/// The Python with `grpcio` and `opentelemetry-proto` that the OTLP receiver process runs under
/// (`$REINS_OTLP_PYTHON`, else the CI cache's venv); on a fresh machine it is installed the way CI does, by
/// `.ci/setup-otlp.sh` (once per test process).
pub fn otlp_python() -> PathBuf {
    static SETUP: std::sync::Once = std::sync::Once::new();
    let cache = std::env::var_os("REINS_CI_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/reins-ci"));
    let py =
        std::env::var_os("REINS_OTLP_PYTHON").map(PathBuf::from).unwrap_or_else(|| cache.join("otlp/venv/bin/python"));
    if !py.is_file() {
        SETUP.call_once(|| {
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
            let _ = Command::new("bash").arg("-c").arg("source .ci/setup-otlp.sh >&2").current_dir(root).status();
        });
    }
    assert!(
        py.is_file(),
        "the OTLP receiver's Python packages are not installed ({} is missing): run `source .ci/setup-otlp.sh` from \
         the repository root first",
        py.display()
    );
    py
}
