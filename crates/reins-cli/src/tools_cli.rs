//! Workspace tools for the command line: `--workspace`, `--preset`, `--command-timeout`, `--no-sandbox`,
//! `--accept-weaker-sandbox` (they become keys of the agent definition: see `agent_cli`), and
//! `reins sandbox-check`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::exit::CliError;

/// Flags that give the model workspace tools.
#[derive(Args, Debug, Default)]
pub struct ToolFlags {
    /// Gives the model the file tools (read_file, write_file, edit_file, list_dir, search) over DIR.
    #[arg(long, short = 'w', value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Gives the model only the file tools that read (read_file, list_dir, search).
    #[arg(long)]
    pub read_only: bool,
    /// Adds a command preset the model may run by name: 'NAME=PROGRAM ARG...' (split like a shell would, never
    /// run by one; takes no arguments from the model). Repeatable. Needs a workspace.
    #[arg(long = "preset", value_name = "NAME=PROGRAM ARG...")]
    pub presets: Vec<String>,
    /// The default command timeout, e.g. 10s.
    #[arg(long, value_parser = reins_agent::parse_duration, value_name = "DURATION")]
    pub command_timeout: Option<Duration>,
    /// Runs commands without the OS sandbox (process group, scrubbed environment and limits still apply).
    #[arg(long, conflicts_with = "accept_weaker_sandbox")]
    pub no_sandbox: bool,
    /// Runs commands with whatever isolation the host supports instead of refusing when a layer is missing.
    #[arg(long)]
    pub accept_weaker_sandbox: bool,
}

/// Flags of `reins sandbox-check`.
#[derive(Args, Debug)]
pub struct SandboxCheckArgs {
    /// Prints the facts as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `reins sandbox-check`: what isolation this host can give commands.
pub fn sandbox_check(args: &SandboxCheckArgs) -> Result<u8, CliError> {
    let support = reins_tools::probe();
    if args.json {
        let v = serde_json::to_value(support).map_err(|e| CliError::Internal(e.into()))?;
        jsonln!("{v}");
    } else {
        out!("{}", support.render());
    }
    Ok(0)
}
