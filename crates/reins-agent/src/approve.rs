//! People in the loop, as data: the `approve` key (which calls need a person's decision) and `[[hooks]]`
//! (command hooks), and what they build — the [`ApprovePolicy`] and the [`reins_tools::CommandHook`]s.

use std::path::Path;
use std::sync::Arc;

use reins::{Decision, HookEvent, Policy, ToolCall};
use serde::{Deserialize, Serialize};

use crate::error::DefError;
use crate::value::Dur;

/// The built-in tools `approve = "writes"` asks about (besides MCP tools not marked read-only).
pub const WRITE_TOOLS: &[&str] = &["write_file", "edit_file", "run_command"];

/// `approve`: which calls wait for a person's decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApproveMode {
    /// None (the default of `reins run`).
    #[default]
    Never,
    /// `write_file`, `edit_file`, `run_command` and MCP tools their server does not mark read-only.
    Writes,
    /// Every call.
    All,
}

impl std::str::FromStr for ApproveMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "never" => Ok(ApproveMode::Never),
            "writes" => Ok(ApproveMode::Writes),
            "all" => Ok(ApproveMode::All),
            _ => Err(format!("{s:?} is not an approval mode: expected never, writes or all")),
        }
    }
}

impl ApproveMode {
    /// `never`, `writes` or `all`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ApproveMode::Never => "never",
            ApproveMode::Writes => "writes",
            ApproveMode::All => "all",
        }
    }
}

/// The policy of an approval mode: `Ask` for the calls the mode names, `Allow` for the rest. MCP tools are
/// looked up in the run's servers at each call (a tool a server added later, or one it does not mark
/// `readOnlyHint`, is asked about).
pub struct ApprovePolicy {
    mode: ApproveMode,
    mcp: Option<Arc<reins_mcp::McpTools>>,
}

impl ApprovePolicy {
    /// The policy of `mode` over these MCP servers' tools.
    pub fn new(mode: ApproveMode, mcp: Option<Arc<reins_mcp::McpTools>>) -> Self {
        Self { mode, mcp }
    }
}

impl Policy for ApprovePolicy {
    fn check(&self, call: &ToolCall) -> Decision {
        match self.mode {
            ApproveMode::Never => Decision::Allow,
            ApproveMode::All => Decision::Ask("approve = \"all\": every call needs a decision".into()),
            ApproveMode::Writes => {
                if WRITE_TOOLS.contains(&call.name.as_str()) {
                    return Decision::Ask(format!("approve = \"writes\": {} changes the workspace", call.name));
                }
                let Some(mcp) = &self.mcp else { return Decision::Allow };
                match mcp.tools().iter().find(|t| t.spec().name == call.name) {
                    Some(t) if !t.read_only() => Decision::Ask(format!(
                        "approve = \"writes\": MCP tool {} is not marked read-only by its server",
                        call.name
                    )),
                    _ => Decision::Allow,
                }
            }
        }
    }
}

/// `[[hooks]]`: a command hook.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookDef {
    /// `pre_tool`, `post_tool` or `stop`.
    pub event: HookEvent,
    /// For tool events: the tools it runs for, a name or a glob (`*` any run of characters, `?` one);
    /// every tool when absent.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// The program and its arguments (a list: never run through a shell). A relative program path with a
    /// `/` is relative to the agent file.
    pub command: Vec<String>,
    /// The longest it may take (default 30s); then it is killed and the call denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Dur>,
}

impl HookDef {
    /// Checks the entry at `hooks[index]`.
    pub fn validate(&self, index: usize) -> Result<(), DefError> {
        let at = |key: &str, m: &str| DefError::at(format!("hooks[{index}].{key}"), m);
        match self.command.first() {
            None => return Err(at("command", "expected the program and its arguments, a non-empty list")),
            Some(p) if p.is_empty() => return Err(at("command", "the program name is empty")),
            _ => {}
        }
        if self.command.iter().any(|a| a.contains('\0')) {
            return Err(at("command", "an argument holds a NUL character"));
        }
        if let Some(p) = &self.pattern {
            if self.event == HookEvent::Stop {
                return Err(at("match", "a stop hook runs at the final answer: `match` is for pre_tool and post_tool"));
            }
            if p.is_empty() {
                return Err(at("match", "an empty pattern matches no tool: leave `match` out to match every tool"));
            }
        }
        Ok(())
    }

    /// Makes a relative program path with a `/` relative to `base_dir` (the agent file's directory).
    pub fn resolve_paths(&mut self, base_dir: &Path) {
        if let Some(p) = self.command.first_mut() {
            let path = Path::new(p.as_str());
            if path.is_relative() && p.contains('/') {
                *p = base_dir.join(path).display().to_string();
            }
        }
    }

    /// The hook, running in `workspace` when given.
    pub fn build(&self, workspace: Option<&Path>) -> Result<reins_tools::CommandHook, String> {
        reins_tools::CommandHook::new(
            self.event,
            self.pattern.clone(),
            self.command.clone(),
            self.timeout.map_or(reins_tools::DEFAULT_HOOK_TIMEOUT, |d| d.0),
            workspace.map(Path::to_path_buf),
        )
    }
}
