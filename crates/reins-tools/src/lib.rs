//! # reins-tools — tools that cannot be talked out of their box
//!
//! Workspace-confined file tools ([`files`]), named command presets run in their own process group with
//! bounded output, a scrubbed environment and resource limits ([`command`]), and an OS sandbox for those
//! commands ([`sandbox`]). Every path a model gives is resolved beneath one directory handle by the kernel
//! ([`workspace`]); errors name only workspace-relative paths. [`lifeline`] makes every process Reins starts
//! (commands, hooks, MCP servers) die with Reins, even after `kill -9`. [`instructions`] says what a model is told
//! about its workspace: a built-in preamble and the workspace's `AGENTS.md`.

#![warn(missing_docs)]
// No function over 100 lines (the workspace's clippy.toml; test code may have longer ones).
#![warn(clippy::too_many_lines)]
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod command;
pub mod files;
pub mod hook;
pub mod instructions;
pub mod lifeline;
pub mod output;
pub mod sandbox;
pub mod search;
pub mod spill;
pub mod workspace;

pub use command::{
    CommandConfig, CommandError, CommandOutcome, CommandRunner, DEFAULT_ENV_ALLOW, DEFAULT_TIMEOUT,
    IDEMPOTENCY_KEY_ENV, Preset, ResourceLimits, RunCommand, Termination, is_secret_name, parse_duration,
};
pub use files::{
    EditFile, EditFileArgs, ListDir, ListDirArgs, ReadFile, ReadFileArgs, Search, SearchArgs, WriteFile, WriteFileArgs,
    file_tools,
};
pub use hook::{CommandHook, DEFAULT_HOOK_TIMEOUT};
pub use instructions::{AGENTS_MD, AgentsMd, DEFAULT_AGENTS_MD_MAX_BYTES, load_agents_md, preamble};
pub use output::{CappedBuffer, DEFAULT_OUTPUT_CAP};
pub use sandbox::{
    PreparedSandbox, SandboxError, SandboxMode, SandboxRequest, SandboxSupport, prepare, prepare_with, probe,
};
pub use search::{MAX_IGNORE_FILE_BYTES, SearchError, SearchMatch, SearchQuery, SearchReport, search};
pub use spill::{Spill, SpillTool};
pub use workspace::{
    DEFAULT_MAX_READ_BYTES, DEFAULT_PROTECTED, DirEntry, EntryKind, Listing, MAX_SCAN_DEPTH, PROTECTED_SCAN_LIMIT,
    ProtectedScan, RelPath, Resolver, Workspace, WorkspaceConfig, WorkspaceError, WriteReport, display_name,
};
