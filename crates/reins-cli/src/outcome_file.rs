//! An outcome as the commands that end a run give it: the outcome file (`--output FILE`) and the summary or
//! JSON on the terminal, with the run's exit code.

use std::path::PathBuf;

use anyhow::Context as _;
use reins::Outcome;

use crate::exit::{CliError, code_for};

/// Writes the outcome as pretty JSON.
pub fn write_outcome(path: &PathBuf, outcome: &Outcome) -> anyhow::Result<()> {
    // Each image's bytes once, the messages holding references (see `media_cli::outcome_value`).
    let value = crate::media_cli::outcome_value(outcome).context("serializing the outcome")?;
    let json = serde_json::to_vec_pretty(&value).context("serializing the outcome")?;
    // Readable by its owner only, like everything Reins writes for its user.
    crate::output::write_private(path, &json).with_context(|| format!("writing the outcome file {}", path.display()))
}

/// Prints an outcome like `reins run` and gives its exit code.
pub fn show_outcome(outcome: &Outcome, json: bool, output: Option<&PathBuf>) -> Result<u8, CliError> {
    if let Some(path) = output {
        crate::outcome_file::write_outcome(path, outcome)?;
    }
    if json {
        let v = serde_json::to_value(outcome).map_err(|e| CliError::Internal(e.into()))?;
        jsonln!("{v}");
    } else {
        crate::render::summary(outcome);
    }
    Ok(code_for(outcome.status))
}
