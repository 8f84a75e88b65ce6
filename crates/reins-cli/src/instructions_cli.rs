//! Where a run's instructions and prompt come from: `--instructions`, `--instructions-file` and
//! `--no-agents-md` (keys of the agent definition, `instructions`, `instructions_file` and
//! `workspace.agents_md`: `reins-agent` puts the built-in workspace preamble, the workspace's `AGENTS.md` and
//! them together); the prompt from the command line, `--prompt-file`, or standard input (`-`).

use std::path::PathBuf;

use clap::Args;

use crate::exit::{CliError, usage};
use reins_agent::{read_bounded, read_capped};

/// The largest prompt (`--prompt-file FILE`, or `-` for standard input) and instructions file
/// (`--instructions-file FILE`): 1 MiB. Files named on the command line are read with `reins-agent`'s bounded
/// reader: opened non-blocking, regular files only, capped.
pub const MAX_PROMPT_BYTES: u64 = reins_agent::MAX_INSTRUCTIONS_BYTES;

/// Flags that say what the model is told, and where the prompt comes from.
#[derive(Args, Debug, Default)]
pub struct InstructionFlags {
    /// Instructions (a system prompt) for the model, given after the built-in workspace preamble and
    /// the workspace's AGENTS.md.
    #[arg(long, value_name = "TEXT", conflicts_with = "instructions_file")]
    pub instructions: Option<String>,
    /// Reads the instructions from FILE (a regular UTF-8 file of at most 1 MiB).
    #[arg(long, value_name = "FILE")]
    pub instructions_file: Option<PathBuf>,
    /// Does not give the model the workspace's AGENTS.md.
    #[arg(long)]
    pub no_agents_md: bool,
    /// Reads the prompt from FILE (a regular UTF-8 file of at most 1 MiB). `-` as the prompt reads it
    /// from standard input.
    #[arg(long, value_name = "FILE", conflicts_with = "prompt")]
    pub prompt_file: Option<PathBuf>,
}

/// The prompt: from `--prompt-file`, from standard input when the prompt is `-`, else as given. A prompt
/// read from a file or standard input must not be empty.
pub fn prompt(given: Option<&str>, flags: &InstructionFlags) -> Result<Option<String>, CliError> {
    let (text, source) = match (&flags.prompt_file, given) {
        (Some(path), _) => (
            read_bounded(path, MAX_PROMPT_BYTES)
                .map_err(|e| usage(format!("--prompt-file {}: {e}", path.display())))?,
            format!("--prompt-file {}", path.display()),
        ),
        (None, Some("-")) => (
            read_capped(std::io::stdin().lock(), MAX_PROMPT_BYTES)
                .map_err(|e| usage(format!("the prompt from standard input: {e}")))?,
            "standard input".to_owned(),
        ),
        (None, other) => return Ok(other.map(str::to_owned)),
    };
    if text.trim().is_empty() {
        return Err(usage(format!("the prompt from {source} is empty")));
    }
    Ok(Some(text))
}
