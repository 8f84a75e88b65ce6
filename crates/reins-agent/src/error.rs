//! Errors: [`DefError`] for a definition that is not valid (it names the file and the key's path), and
//! [`BuildError`] for one that cannot be built.

use std::fmt;

/// A definition that is not valid: where it came from, the key's path (`limits.max_steps`), and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefError {
    /// Where the definition came from (`agent file ./a.toml`), when it came from a file.
    pub source: Option<String>,
    /// The key's path, dotted (`limits.max_steps`, `presets[0].timeout`, `mcp.fs.cwd`), when one key is at fault.
    pub path: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl DefError {
    /// An error about the key at `path`.
    pub fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { source: None, path: Some(path.into()).filter(|p: &String| !p.is_empty()), message: message.into() }
    }
    /// An error about the whole definition.
    pub fn whole(message: impl Into<String>) -> Self {
        Self { source: None, path: None, message: message.into() }
    }
    /// The same error about a key of the table at `prefix` (`agents.NAME`).
    pub fn under(mut self, prefix: &str) -> Self {
        self.path = Some(match self.path.take() {
            Some(p) => format!("{prefix}.{p}"),
            None => prefix.to_owned(),
        });
        self
    }
    /// The same error, said to come from `source`.
    pub fn within(mut self, source: impl Into<String>) -> Self {
        if self.source.is_none() {
            self.source = Some(source.into());
        }
        self
    }
}

impl fmt::Display for DefError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = &self.source {
            write!(f, "{s}: ")?;
        }
        if let Some(p) = &self.path {
            write!(f, "{p}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for DefError {}

/// Why a definition could not be built into an agent.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The definition is not valid.
    #[error(transparent)]
    Definition(#[from] DefError),
    /// A setting is valid on its own but cannot be used (a missing API key, presets without a workspace, a
    /// workspace that does not open, a script file that does not parse, a duplicate tool).
    #[error("{0}")]
    Invalid(String),
    /// A real model needs an API key and its variable is not set.
    #[error("the model {model} needs an API key: set {env} (or point provider.base_url at a local server)")]
    MissingApiKey {
        /// The model spec.
        model: String,
        /// The variable to set.
        env: String,
    },
    /// An MCP server did not start.
    #[error(transparent)]
    Mcp(#[from] reins_mcp::McpError),
    /// Reins itself failed (a tokenizer that does not load, a store that cannot be written).
    #[error("{0}")]
    Internal(String),
}

impl BuildError {
    /// True when the fault is the caller's input (a command-line tool exits 2), false for an internal failure.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, BuildError::Internal(_))
    }
}
