//! How to reach an MCP server: its name, its transport (a child process over stdio, or a streamable HTTP
//! URL) and its timeouts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// How long a server may take to start (spawn, `initialize`, first `tools/list`) unless configured.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one tool call may take unless configured.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest server name: with `__` and a tool name it must still fit a 64-character tool name.
pub const MAX_SERVER_NAME: usize = 32;

/// Why a server configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// How to reach one server.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Transport {
    /// A child process speaking MCP over its stdin and stdout, started in its own process group.
    Stdio {
        /// The program (looked up on `PATH` when it has no slash).
        command: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Variables added to the inherited environment.
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Its working directory (the caller's when absent).
        #[serde(default)]
        cwd: Option<PathBuf>,
    },
    /// A server at a streamable HTTP endpoint.
    Http {
        /// The endpoint, `http://` or `https://`.
        url: String,
        /// Headers sent with every request (for example `Authorization`).
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
}

/// One configured MCP server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// The server's name: its tools are registered as `NAME__TOOL`.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// The time allowed to spawn or connect, answer `initialize` and list its tools.
    pub startup_timeout: Duration,
    /// The time allowed for one tool call.
    pub call_timeout: Duration,
}

/// The `[mcp.NAME]` table of a config file.
///
/// ```toml
/// [mcp.fs]
/// command = "npx"
/// args = ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]
/// startup_timeout = "20s"
/// call_timeout = "1m"
///
/// [mcp.remote]
/// url = "http://127.0.0.1:8080/mcp"
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct ServerTable {
    /// How to reach it.
    #[serde(flatten)]
    pub transport: Transport,
    /// A start-up timeout such as `"30s"`.
    #[serde(default)]
    pub startup_timeout: Option<String>,
    /// A per-call timeout such as `"2m"`.
    #[serde(default)]
    pub call_timeout: Option<String>,
}

impl ServerConfig {
    /// A server started as `command args...`.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: Vec<String>) -> Result<Self, ConfigError> {
        let transport = Transport::Stdio { command: command.into(), args, env: BTreeMap::new(), cwd: None };
        Self::new(name, transport)
    }

    /// A server at a streamable HTTP URL.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Result<Self, ConfigError> {
        Self::new(name, Transport::Http { url: url.into(), headers: BTreeMap::new() })
    }

    /// A server with default timeouts; checks the name and the transport.
    pub fn new(name: impl Into<String>, transport: Transport) -> Result<Self, ConfigError> {
        let name = name.into();
        check_server_name(&name)?;
        check_transport(&name, &transport)?;
        Ok(ServerConfig {
            name,
            transport,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        })
    }

    /// Sets the start-up timeout.
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Sets the per-call timeout.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Parses a command-line spec: `NAME=URL` (an `http://` or `https://` URL) or `NAME=COMMAND [ARGS...]`,
    /// the command line split like a POSIX shell would (quotes, backslashes) but never run through one.
    ///
    /// ```
    /// use reins_mcp::{ServerConfig, Transport};
    /// let s = ServerConfig::parse_spec("fs=node server.js '/tmp/my dir'").unwrap();
    /// assert_eq!(s.name, "fs");
    /// assert!(matches!(s.transport, Transport::Stdio { ref command, ref args, .. }
    ///     if command == "node" && args == &["server.js", "/tmp/my dir"]));
    /// assert!(ServerConfig::parse_spec("web=http://127.0.0.1:9/mcp").is_ok());
    /// assert!(ServerConfig::parse_spec("no-equals-sign").is_err());
    /// ```
    pub fn parse_spec(spec: &str) -> Result<Self, ConfigError> {
        let Some((name, rest)) = spec.split_once('=') else {
            return Err(ConfigError(format!(
                "invalid MCP server {spec:?}: expected NAME=COMMAND [ARGS...] or NAME=URL"
            )));
        };
        let rest = rest.trim();
        if rest.starts_with("http://") || rest.starts_with("https://") {
            return Self::http(name, rest);
        }
        let Some(words) = shlex::split(rest) else {
            return Err(ConfigError(format!("MCP server {name:?}: unbalanced quotes in {rest:?}")));
        };
        let mut words = words.into_iter();
        let Some(command) = words.next() else {
            return Err(ConfigError(format!("MCP server {name:?}: no command or URL after '='")));
        };
        Self::stdio(name, command, words.collect())
    }

    /// A server from its `[mcp.NAME]` table.
    pub fn from_table(name: &str, table: ServerTable) -> Result<Self, ConfigError> {
        let mut config = Self::new(name, table.transport)?;
        if let Some(t) = table.startup_timeout {
            config.startup_timeout = parse_timeout(name, "startup_timeout", &t)?;
        }
        if let Some(t) = table.call_timeout {
            config.call_timeout = parse_timeout(name, "call_timeout", &t)?;
        }
        Ok(config)
    }

    /// Every `[mcp.NAME]` table of a parsed TOML config (the value under the `mcp` key), in name order.
    pub fn from_toml_tables(mcp: &toml::Value) -> Result<Vec<Self>, ConfigError> {
        let toml::Value::Table(tables) = mcp else {
            return Err(ConfigError("`mcp` is a table of servers: [mcp.NAME]".into()));
        };
        let mut out = Vec::with_capacity(tables.len());
        for (name, value) in tables {
            check_table_keys(name, value)?;
            let table: ServerTable = value.clone().try_into().map_err(|e: toml::de::Error| {
                ConfigError(format!(
                    "[mcp.{name}]: {} (a server has `command` and optional `args`, `env`, `cwd`, or `url` and \
                     optional `headers`; plus optional `startup_timeout` and `call_timeout`)",
                    e.message()
                ))
            })?;
            out.push(Self::from_table(name, table)?);
        }
        Ok(out)
    }
}

/// The keys of a stdio server's table, of an HTTP server's, and of both.
const STDIO_KEYS: &[&str] = &["command", "args", "env", "cwd"];
const HTTP_KEYS: &[&str] = &["url", "headers"];
const COMMON_KEYS: &[&str] = &["startup_timeout", "call_timeout"];

/// Refuses a table that mixes the two transports (`command` and `url`), or that has a key no server has, before
/// the untagged transport would quietly pick one and drop the rest.
fn check_table_keys(name: &str, value: &toml::Value) -> Result<(), ConfigError> {
    let toml::Value::Table(table) = value else {
        return Err(ConfigError(format!("[mcp.{name}] must be a table")));
    };
    let has = |keys: &[&'static str]| keys.iter().copied().filter(|k| table.contains_key(*k)).collect::<Vec<_>>();
    let (stdio, http) = (has(STDIO_KEYS), has(HTTP_KEYS));
    if !stdio.is_empty() && !http.is_empty() {
        return Err(ConfigError(format!(
            "[mcp.{name}] mixes a stdio server ({}) with an HTTP server ({}): a server has either `command` (and \
             optional `args`, `env`, `cwd`) or `url` (and optional `headers`)",
            stdio.join(", "),
            http.join(", ")
        )));
    }
    if let Some(key) =
        table.keys().find(|k| ![STDIO_KEYS, HTTP_KEYS, COMMON_KEYS].iter().any(|set| set.contains(&k.as_str())))
    {
        return Err(ConfigError(format!(
            "[mcp.{name}]: unknown key `{key}` (a server has `command` and optional `args`, `env`, `cwd`, or `url` \
             and optional `headers`; plus optional `startup_timeout` and `call_timeout`)"
        )));
    }
    Ok(())
}

fn parse_timeout(name: &str, key: &str, text: &str) -> Result<Duration, ConfigError> {
    reins::parse_duration(text).map_err(|e| ConfigError(format!("[mcp.{name}] {key}: {e}")))
}

/// Checks a server name: 1-32 letters, digits, `_` or `-`, starting with a letter, with no `__` and no
/// trailing `_` (so that `NAME__TOOL` splits back unambiguously).
///
/// ```
/// assert!(reins_mcp::check_server_name("fs").is_ok());
/// assert!(reins_mcp::check_server_name("my__fs").is_err());
/// assert!(reins_mcp::check_server_name("9fs").is_err());
/// ```
pub fn check_server_name(name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SERVER_NAME
        && name.as_bytes()[0].is_ascii_alphabetic()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.contains("__")
        && !name.ends_with('_');
    if ok {
        Ok(())
    } else {
        Err(ConfigError(format!(
            "invalid MCP server name {name:?}: 1-{MAX_SERVER_NAME} letters, digits, '_' or '-', starting with a \
             letter, without \"__\" and not ending with '_'"
        )))
    }
}

fn check_transport(name: &str, transport: &Transport) -> Result<(), ConfigError> {
    match transport {
        Transport::Stdio { command, .. } if command.trim().is_empty() => {
            Err(ConfigError(format!("MCP server {name:?}: the command is empty")))
        }
        Transport::Stdio { command, args, env, .. } => {
            if command.contains('\0') || args.iter().any(|a| a.contains('\0')) {
                return Err(ConfigError(format!("MCP server {name:?}: the command line holds a NUL byte")));
            }
            for key in env.keys() {
                if key.is_empty() || key.contains('=') || key.contains('\0') {
                    return Err(ConfigError(format!("MCP server {name:?}: invalid environment variable name {key:?}")));
                }
            }
            Ok(())
        }
        Transport::Http { url, .. } => {
            let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
            match rest {
                Some(r) if !r.is_empty() && !r.starts_with('/') && !url.chars().any(char::is_whitespace) => Ok(()),
                _ => Err(ConfigError(format!(
                    "MCP server {name:?}: {url:?} is not an http:// or https:// URL with a host"
                ))),
            }
        }
    }
}

/// The name a server's tool is registered under: `SERVER__TOOL`.
pub fn qualified_name(server: &str, tool: &str) -> String {
    format!("{server}__{tool}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn specs_parse_to_stdio_or_http() {
        let s = ServerConfig::parse_spec("fs=npx -y \"@scope/server\" /tmp").unwrap();
        assert_eq!(
            s.transport,
            Transport::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "@scope/server".into(), "/tmp".into()],
                env: BTreeMap::new(),
                cwd: None
            }
        );
        assert_eq!(s.startup_timeout, DEFAULT_STARTUP_TIMEOUT);
        let h = ServerConfig::parse_spec("web=https://example.test/mcp").unwrap();
        assert_eq!(h.transport, Transport::Http { url: "https://example.test/mcp".into(), headers: BTreeMap::new() });
        for bad in [
            "",
            "fs",
            "fs=",
            "fs=   ",
            "=node x",
            "fs=node 'open",
            "9x=node",
            "a__b=node",
            "fs=http://",
            "fs=http:///x",
        ] {
            assert!(ServerConfig::parse_spec(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn toml_tables_become_servers() {
        let doc: toml::Value = toml::from_str(
            r#"
            [mcp.fs]
            command = "node"
            args = ["server.js", "/tmp"]
            env = { DEBUG = "1" }
            startup_timeout = "5s"
            call_timeout = "1m"
            [mcp.web]
            url = "http://127.0.0.1:9/mcp"
            headers = { Authorization = "Bearer x" }
            "#,
        )
        .unwrap();
        let servers = ServerConfig::from_toml_tables(&doc["mcp"]).unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0].name, "fs");
        assert_eq!(servers[0].startup_timeout, Duration::from_secs(5));
        assert_eq!(servers[0].call_timeout, Duration::from_secs(60));
        assert!(matches!(&servers[0].transport, Transport::Stdio { env, .. } if env["DEBUG"] == "1"));
        assert!(matches!(&servers[1].transport, Transport::Http { headers, .. } if headers.len() == 1));

        for (text, needle) in [
            ("[mcp.fs]\nargs = [\"x\"]\n", "[mcp.fs]"),
            ("[mcp.fs]\ncommand = \"node\"\ncall_timeout = \"soon\"\n", "call_timeout"),
            ("[mcp.fs]\ncommand = \"node\"\nstartup_timeout = \"0s\"\n", "at least 1ms"),
            ("[mcp.fs]\ncommand = \"node\"\ncall_timeout = \"1ns\"\n", "smallest unit is ms"),
            ("[mcp.both]\ncommand = \"node\"\nurl = \"http://127.0.0.1:9/mcp\"\n", "mixes a stdio server"),
            ("[mcp.both]\nurl = \"http://127.0.0.1:9/mcp\"\nargs = [\"x\"]\n", "mixes a stdio server"),
            ("[mcp.fs]\ncommand = \"node\"\ncall_timout = \"1s\"\n", "unknown key `call_timout`"),
            ("[mcp]\nfs = 3\n", "must be a table"),
            ("[mcp.\"a b\"]\ncommand = \"node\"\n", "invalid MCP server name"),
            ("mcp = 3\n", "table of servers"),
        ] {
            let doc: toml::Value = toml::from_str(text).unwrap();
            let err = ServerConfig::from_toml_tables(&doc["mcp"]).unwrap_err();
            assert!(err.0.contains(needle), "{text:?}: {err}");
        }
    }

    proptest! {
        #[test]
        fn parse_spec_never_panics_and_valid_names_qualify_to_valid_tool_names(spec in ".{0,80}") {
            if let Ok(config) = ServerConfig::parse_spec(&spec) {
                prop_assert!(check_server_name(&config.name).is_ok());
                prop_assert!(reins::is_valid_tool_name(&qualified_name(&config.name, "t")));
            }
        }

        #[test]
        fn a_table_with_both_transports_is_refused(
            stdio in proptest::sample::subsequence(STDIO_KEYS.to_vec(), 1..=4),
            http in proptest::sample::subsequence(HTTP_KEYS.to_vec(), 0..=2),
        ) {
            let mut table = toml::Table::new();
            for key in stdio.iter().chain(http.iter()) {
                table.insert((*key).to_owned(), toml::Value::String("x".into()));
            }
            let checked = check_table_keys("s", &toml::Value::Table(table));
            prop_assert_eq!(checked.is_err(), !http.is_empty(), "{:?}", checked);
        }

        #[test]
        fn server_names_split_back_unambiguously(name in "[a-zA-Z][a-zA-Z0-9_-]{0,40}", tool in "[a-zA-Z0-9_-]{1,20}") {
            if check_server_name(&name).is_ok() {
                let q = qualified_name(&name, &tool);
                let (server, rest) = q.split_once("__").unwrap();
                prop_assert_eq!(server, name.as_str());
                prop_assert_eq!(rest, tool.as_str());
            }
        }
    }
}
