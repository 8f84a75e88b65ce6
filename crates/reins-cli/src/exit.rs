//! Exit codes and the errors that map to them.

use reins::Status;

/// The exit codes, for `--help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  completed        the model gave its answer
  1  internal error   Reins itself failed (for example the outcome file or stdout could not be written)
  2  bad input        unreadable or malformed script/config, bad flag values
  3  step_limit       --max-steps reached
  4  tool_limit       a batch did not fit --max-tool-calls
  5  token_limit      reported usage exceeded a token limit
  6  timeout          --timeout passed
  7  aborted          cancelled (Ctrl-C, SIGTERM, SIGHUP) or stopped by policy
  8  model_error      the model call failed or its response was malformed
  9  context_limit    the context budget cannot hold the first message and the newest turn
 11  cost_limit       the run cost more than --max-cost-usd
 12  truncated        the final answer was cut by the response cap (its partial text is kept)
 13  refused          the model refused, or a content filter cut its answer
 14  awaiting_approval  a call waits for a decision: `reins approve ID` continues the run
 15  (durable runs)   submit/status/result/cancel: Restate unreachable, or no such run or session
 16  output_invalid   the final answer did not match the output schema (its text is kept, no output)";

/// The exit code for a run's status.
pub fn code_for(status: Status) -> u8 {
    match status {
        Status::Completed => 0,
        Status::StepLimit => 3,
        Status::ToolLimit => 4,
        Status::TokenLimit => 5,
        Status::Timeout => 6,
        Status::Aborted => 7,
        Status::ModelError => 8,
        Status::ContextLimit => 9,
        Status::CostLimit => 11,
        Status::Truncated => 12,
        Status::Refused => 13,
        Status::AwaitingApproval => 14,
        Status::OutputInvalid => 16,
    }
}

/// A failure of the command itself.
#[derive(Debug)]
pub enum CliError {
    /// Bad input from the user: exit 2.
    Usage(String),
    /// Reins failed: exit 1.
    Internal(anyhow::Error),
}

impl CliError {
    /// Prints the one-line error and gives the exit code.
    pub fn report(self) -> std::process::ExitCode {
        match self {
            CliError::Usage(m) => {
                errln!("reins: error: {m}");
                std::process::ExitCode::from(2)
            }
            CliError::Internal(e) => {
                errln!("reins: error: {e:#}");
                std::process::ExitCode::from(1)
            }
        }
    }
}

impl From<anyhow::Error> for CliError {
    fn from(e: anyhow::Error) -> Self {
        CliError::Internal(e)
    }
}

/// A bad-input error.
pub fn usage(message: impl Into<String>) -> CliError {
    CliError::Usage(message.into())
}
