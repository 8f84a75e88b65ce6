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
        /// Its variables. A server never inherits Reins' whole environment: it gets the safe variables of
        /// it ([`reins::secrets::DEFAULT_ENV_ALLOW`] less secret-looking names: no API key) plus these.
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
    /// Its resources reach the model as the tools `NAME__list_resources` and `NAME__read_resource` (when the
    /// server offers resources). On by default; `resources = false` in its `[mcp.NAME]` table turns it off.
    pub resources: bool,
    /// The protocol revision to speak with it (`protocol = "2025-11-25"`), one of [`KNOWN_PROTOCOLS`]; `None`
    /// (the default) chooses per server: `server/discover` (2026-07-28) first, the `initialize` handshake for a
    /// server that refuses it.
    pub protocol: Option<String>,
    /// When nobody can be asked (no terminal), a form elicitation whose every required field has a default is
    /// accepted with the defaults of the fields that have one, and declined otherwise (see
    /// [`crate::elicit::defaults`]). Off by default: such a request is declined.
    pub elicitation_defaults: bool,
}

/// The protocol revisions a server can be pinned to, newest first.
pub const KNOWN_PROTOCOLS: &[&str] = &["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

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
            resources: true,
            protocol: None,
            elicitation_defaults: false,
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

    /// Offers the server's resources to the model as tools (`true`, the default) or not.
    pub fn resources(mut self, on: bool) -> Self {
        self.resources = on;
        self
    }

    /// Speaks `revision` with the server (one of [`KNOWN_PROTOCOLS`]) instead of choosing per server: a
    /// 2026-07-28 server is never sent `initialize`, an earlier one never `server/discover`.
    pub fn protocol(mut self, revision: &str) -> Result<Self, ConfigError> {
        if !KNOWN_PROTOCOLS.contains(&revision) {
            return Err(ConfigError(format!(
                "MCP server {:?}: unknown protocol revision {revision:?} (known: {})",
                self.name,
                KNOWN_PROTOCOLS.join(", ")
            )));
        }
        self.protocol = Some(revision.to_owned());
        Ok(self)
    }

    /// Accepts a form elicitation with its schema's defaults when nobody can be asked (`true`), or declines it
    /// (`false`, the default). See [`ServerConfig::elicitation_defaults`].
    pub fn elicitation_defaults(mut self, on: bool) -> Self {
        self.elicitation_defaults = on;
        self
    }

    /// How the connection starts: the pinned revision's way, or `server/discover` first with the `initialize`
    /// handshake (offering 2025-11-25) for a server that refuses it.
    pub(crate) fn lifecycle(&self) -> rmcp::ClientLifecycleMode {
        use rmcp::model::ProtocolVersion;
        match self.protocol_version() {
            None => rmcp::ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
            // The revision is offered in `initialize` by the client's own information (its `get_info`).
            Some(version) if version.has_initialize() => rmcp::ClientLifecycleMode::Initialize,
            Some(version) => rmcp::ClientLifecycleMode::Discover { preferred_versions: vec![version] },
        }
    }

    /// The pinned revision, as the protocol library names it.
    pub(crate) fn protocol_version(&self) -> Option<rmcp::model::ProtocolVersion> {
        let pinned = self.protocol.as_deref()?;
        rmcp::model::ProtocolVersion::KNOWN_VERSIONS.iter().find(|k| k.as_str() == pinned).cloned()
    }

    /// The secrets Reins knows about this server — its `env` values, its header values and its URL's
    /// userinfo — which are masked in whatever it says (results, errors, its stderr) before Reins records it.
    pub fn secrets(&self) -> reins::Secrets {
        match &self.transport {
            Transport::Stdio { env, .. } => reins::Secrets::new(env.values()),
            Transport::Http { url, headers } => {
                reins::Secrets::new(headers.values().cloned().chain(reins::Secrets::url_userinfo(url)))
            }
        }
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
                    "MCP server {name:?}: {:?} is not an http:// or https:// URL with a host",
                    reins::secrets::redact_url(url)
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

    proptest! {
        #[test]
        fn parse_spec_never_panics_and_valid_names_qualify_to_valid_tool_names(spec in ".{0,80}") {
            if let Ok(config) = ServerConfig::parse_spec(&spec) {
                prop_assert!(check_server_name(&config.name).is_ok());
                prop_assert!(reins::is_valid_tool_name(&qualified_name(&config.name, "t")));
            }
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
