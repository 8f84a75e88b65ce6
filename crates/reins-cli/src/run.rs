//! `reins run`: runs an agent on a prompt (the flags are [`crate::run_args::RunArgs`], the run
//! [`crate::run_session::run_with`]).

use crate::exit::CliError;
use crate::run_args::RunArgs;

/// `reins run`.
pub async fn run(args: RunArgs) -> Result<u8, CliError> {
    crate::run_session::run_with(args, None).await
}
