//! Finding the real MCP servers the tests talk to (installed by `.ci/setup-mcp.sh`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use reins_mcp::{ServerConfig, Transport};

const SETUP: &str = "run `source .ci/setup-mcp.sh` from the repository root first (it installs the MCP test servers \
                     with npm and pip into the CI cache and exports REINS_MCP_NODE_MODULES and REINS_MCP_PYTHON)";

fn cache_dir() -> PathBuf {
    match std::env::var_os("REINS_CI_CACHE") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/reins-ci"),
    }
}

/// Runs `.ci/setup-mcp.sh` once per test process (it installs the servers into the CI cache), so that
/// `cargo test --workspace` works on a fresh machine too. A failure shows in the checks that follow.
pub fn run_setup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let status = std::process::Command::new("bash")
            .arg("-c")
            .arg("source .ci/setup-mcp.sh >&2")
            .current_dir(&root)
            .stdout(std::process::Stdio::null())
            .status();
        eprintln!("setup-mcp.sh run by the tests: {status:?}");
    });
}

/// The node_modules holding the npm servers.
pub fn node_modules() -> PathBuf {
    if std::env::var_os("REINS_MCP_NODE_MODULES").is_none()
        && !cache_dir().join("mcp/npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js").is_file()
    {
        run_setup();
    }
    let dir = std::env::var_os("REINS_MCP_NODE_MODULES")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("mcp/npm/node_modules"));
    let probe = dir.join("@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(probe.is_file(), "the npm MCP servers are not installed ({} is missing): {SETUP}", probe.display());
    dir
}

/// A Python interpreter with the `mcp` package.
pub fn python() -> PathBuf {
    if std::env::var_os("REINS_MCP_PYTHON").is_none() && !cache_dir().join("mcp/venv/bin/python").is_file() {
        run_setup();
    }
    let py = std::env::var_os("REINS_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("mcp/venv/bin/python"));
    assert!(py.is_file(), "the Python `mcp` package is not installed ({} is missing): {SETUP}", py.display());
    py
}

/// `@modelcontextprotocol/server-filesystem` confined to `root`.
pub fn filesystem(name: &str, root: &Path) -> ServerConfig {
    let script = node_modules().join("@modelcontextprotocol/server-filesystem/dist/index.js");
    ServerConfig::stdio(name, "node", vec![script.display().to_string(), root.display().to_string()])
        .unwrap()
        .startup_timeout(Duration::from_secs(60))
}

/// `@modelcontextprotocol/server-everything` over stdio.
pub fn everything(name: &str) -> ServerConfig {
    let script = node_modules().join("@modelcontextprotocol/server-everything/dist/index.js");
    ServerConfig::stdio(name, "node", vec![script.display().to_string(), "stdio".into()])
        .unwrap()
        .startup_timeout(Duration::from_secs(60))
}

/// The Python test server (tests/servers/py_server.py) in `mode` ("" for normal), logging calls to `log`.
pub fn python_server(name: &str, mode: &str, log: &Path) -> ServerConfig {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/servers/py_server.py");
    let mut args = vec![script.display().to_string()];
    if !mode.is_empty() {
        args.push(mode.to_owned());
    }
    let mut env = std::collections::BTreeMap::new();
    env.insert("REINS_MCP_TEST_LOG".to_owned(), log.display().to_string());
    let transport = Transport::Stdio { command: python().display().to_string(), args, env, cwd: None };
    ServerConfig::new(name, transport).unwrap().startup_timeout(Duration::from_secs(60))
}

/// The calls the Python server logged, as JSON values.
pub fn logged(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// True while a process with this pid exists (and is not a zombie).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}
