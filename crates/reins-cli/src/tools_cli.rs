//! `reins sandbox-check`: what isolation this host can give commands (the workspace tools' flags of a run are
//! [`crate::run_args::ToolFlags`]).

use clap::Args;

use crate::exit::CliError;

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
