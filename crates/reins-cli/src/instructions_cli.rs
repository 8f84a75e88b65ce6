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
    /// Uses a prompt of an MCP server of the run as the prompt: SERVER/NAME (`reins mcp list` shows them). A
    /// prompt given too is added after it.
    #[arg(long, value_name = "SERVER/NAME", conflicts_with = "prompt_file")]
    pub mcp_prompt: Option<String>,
    /// An argument of the --mcp-prompt, KEY=VALUE; repeatable.
    #[arg(short = 'a', long = "prompt-arg", value_name = "KEY=VALUE", requires = "mcp_prompt")]
    pub prompt_args: Vec<String>,
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
        (None, Some(given)) => return Ok(Some(with_piped_stdin(given)?)),
        (None, None) => return Ok(None),
    };
    if text.trim().is_empty() {
        return Err(usage(format!("the prompt from {source} is empty")));
    }
    Ok(Some(text))
}

/// The prompt argument with piped standard input appended as context (as `llm` and `claude -p` do): read only
/// when stdin is a pipe, a regular file or a socket — never a terminal (nothing to wait for) or a device
/// (`/dev/null`) — bounded like `-` (1 MiB of UTF-8). Blank input adds nothing.
fn with_piped_stdin(given: &str) -> Result<String, CliError> {
    if !stdin_is_piped() {
        return Ok(given.to_owned());
    }
    let text = read_capped(std::io::stdin().lock(), MAX_PROMPT_BYTES)
        .map_err(|e| usage(format!("standard input (appended to the prompt): {e}")))?;
    Ok(append_context(given, &text))
}

/// `prompt`, then `context` in a `<stdin>` block (nothing added when `context` is blank).
pub fn append_context(prompt: &str, context: &str) -> String {
    if context.trim().is_empty() {
        return prompt.to_owned();
    }
    let context = context.strip_suffix('\n').unwrap_or(context);
    format!("{prompt}\n\n<stdin>\n{context}\n</stdin>")
}

/// Whether standard input is a pipe, a regular file or a socket (not a terminal, not a device, not closed).
fn stdin_is_piped() -> bool {
    use std::io::IsTerminal as _;
    use std::os::fd::AsFd as _;
    use std::os::unix::fs::FileTypeExt as _;
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return false;
    }
    let Ok(fd) = stdin.as_fd().try_clone_to_owned() else { return false };
    match std::fs::File::from(fd).metadata() {
        Ok(meta) => {
            let t = meta.file_type();
            t.is_fifo() || t.is_file() || t.is_socket()
        }
        Err(_) => false,
    }
}
