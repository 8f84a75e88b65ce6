//! What a run's answer must be and what it is shown besides text: `--output-schema FILE` (the key
//! `output_schema` of the agent definition: a JSON Schema the final answer must match) and `--image FILE`
//! (images shown with the prompt: part of the prompt, not of the agent).

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
    /// An image shown to the model with the prompt (repeatable): PNG, JPEG, GIF or WebP, recognized by its
    /// bytes, a regular file of at most 5 MiB.
    #[arg(long = "image", value_name = "FILE")]
    pub images: Vec<PathBuf>,
}

/// The images of `--image`, read (regular files only, bounded) and checked, in order.
pub fn images(flags: &MediaFlags) -> Result<Vec<reins::Image>, CliError> {
    flags
        .images
        .iter()
        .map(|path| {
            let bytes = reins_agent::read_bounded_bytes(path, reins::MAX_IMAGE_BYTES as u64)
                .map_err(|e| usage(format!("--image {}: {e}", path.display())))?;
            reins::Image::from_bytes(bytes).map_err(|e| usage(format!("--image {}: {e}", path.display())))
        })
        .collect()
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
