//! # reins-agent — an agent as data
//!
//! One serializable definition holds a whole agent — its model, instructions, tools (test tools, workspace
//! file tools, command presets, MCP servers), limits and context rules — in the TOML form of an agent file
//! ([`AgentDef`]). Definitions are validated with errors that name the key's path
//! (`limits.max_steps: expected a positive integer, not 0`), layered with provenance (defaults, the user
//! config and its profiles, a recorded session, the agent file, flags: [`resolve`]), recorded with every
//! session without their secrets, and built into a ready [`reins::Agent`] with [`AgentDef::build`].
//!
//! A real-provider agent with workspace tools (the library guide's example, docs/src/library.md; the key comes from
//! `OPENAI_API_KEY`):
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use reins_agent::{AgentDef, Preset};
//! use tokio_util::sync::CancellationToken;
//! let agent = AgentDef::new("openai:gpt-4.1-mini")?      // the key comes from OPENAI_API_KEY
//!     .workspace("./repo")                                 // read_file, write_file, edit_file, list_dir, search
//!     .preset(Preset::new("test", "cargo", vec!["test".into(), "--offline".into()]))
//!     .instructions("Fix the failing test; run `test` to check.")
//!     .build().await?;                                     // provider, tools, default budget, pricing
//! let outcome = agent.run("Make the tests pass", CancellationToken::new()).await;
//! # Ok(()) }
//! ```
//!
//! The same agent from TOML (an agent file's text; relative paths are relative to the directory given):
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use reins_agent::AgentDef;
//! use tokio_util::sync::CancellationToken;
//! let agent = AgentDef::from_toml(r#"
//!     model = "openai:gpt-4.1-mini"
//!     instructions = "Fix the failing test; run `test` to check."
//!     [workspace]
//!     path = "./repo"
//!     [[presets]]
//!     name = "test"
//!     program = "cargo"
//!     args = ["test", "--offline"]
//! "#, std::path::Path::new("."))?.build().await?;
//! let outcome = agent.run("Make the tests pass", CancellationToken::new()).await;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
// No function over 100 lines (the workspace's clippy.toml; test code may have longer ones).
#![warn(clippy::too_many_lines)]
#![cfg_attr(test, allow(clippy::too_many_lines))]

mod approve;
mod assemble;
mod definition;
mod error;
mod layers;
mod load;
mod output;
mod test_tools;
mod value;

pub use approve::{ApproveMode, ApprovePolicy, HookDef, WRITE_TOOLS};
pub use assemble::{BuildOptions, Built, Parts, Pricing, WorkspaceTools};
pub use definition::{
    AgentDef, CommandsDef, ContextDef, DEFAULT_MAX_STEPS, DEFAULT_MAX_TOOL_RESULT_CHARS, LimitsDef, McpServerDef,
    ProviderDef, REDACTED, WorkspaceDef, parse_preset,
};
pub use error::{BuildError, DefError};
pub use layers::{Entry, Layer, Origin, Resolved, defaults, resolve};
pub use load::{
    MAX_DEFINITION_BYTES, MAX_INSTRUCTIONS_BYTES, MAX_SCRIPT_BYTES, UserConfig, absolute, agent_file, agent_file_layer,
    parse_toml, read_bounded, read_bounded_bytes, read_capped, user_config_path,
};
pub use output::{MAX_OUTPUT_SCHEMA_BYTES, OutputSchemaDef};
pub use test_tools::tools as test_tools;
pub use value::{
    Count, Dur, ModelKind, ModelSpec, Positive, PriceDef, Rate, Share, Temperature, ToolChoiceSpec, Usd, parse_duration,
};

/// Re-exported for definitions built in code.
pub use reins_tools::{Preset, ResourceLimits, SandboxMode};
