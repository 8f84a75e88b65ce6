//! What a run's answer must be and what it is shown besides text: `--output-schema FILE` (the key
//! `output_schema` of the agent definition: a JSON Schema the final answer must match).

use std::path::PathBuf;

use clap::Args;
use reins_agent::{AgentDef, OutputSchemaDef};

use crate::exit::{CliError, usage};

/// Flags for structured output.
#[derive(Args, Debug, Default, Clone)]
pub struct MediaFlags {
    /// A JSON Schema (a JSON file of at most 1 MiB) the final answer must match. The model answers through
    /// a `final_answer` tool whose arguments are the answer; every other tool stays available; an answer
    /// that fails the schema goes back to the model with the failures. The outcome's `output` holds it.
    #[arg(long, value_name = "FILE")]
    pub output_schema: Option<PathBuf>,
}

/// Puts the flags into the flags' layer of the definition. The schema is read and checked here, so a bad
/// file is named by its flag (the agent reads it again when it is built).
pub fn apply(flags: &MediaFlags, d: &mut AgentDef) -> Result<(), CliError> {
    if let Some(path) = &flags.output_schema {
        let def = OutputSchemaDef::File(reins_agent::absolute(path));
        def.load().map_err(|e| usage(format!("--output-schema: {}", e.message)))?;
        d.output_schema = Some(def);
    }
    Ok(())
}
