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
    /// bytes, a regular file of at most 5 MiB; at most 20 images, 20 MiB in all.
    #[arg(long = "image", short = 'i', value_name = "FILE")]
    pub images: Vec<PathBuf>,
}

/// The most `--image` flags a run takes.
pub const MAX_IMAGES: usize = 20;
/// The most bytes the images of `--image` may have in all (each has at most [`reins::MAX_IMAGE_BYTES`]).
pub const MAX_IMAGES_TOTAL_BYTES: u64 = 20 << 20;

/// The images of `--image`, read (regular files only, bounded) and checked, in order: at most [`MAX_IMAGES`] of
/// them (refused before any is read) and [`MAX_IMAGES_TOTAL_BYTES`] in all (refused as soon as the files read
/// pass it, so no more than that is ever held).
pub fn images(flags: &MediaFlags) -> Result<Vec<reins::Image>, CliError> {
    if flags.images.len() > MAX_IMAGES {
        return Err(usage(format!("--image: at most {MAX_IMAGES} images a run ({} given)", flags.images.len())));
    }
    let mut total: u64 = 0;
    let mut out = Vec::with_capacity(flags.images.len());
    for path in &flags.images {
        let bytes = reins_agent::read_bounded_bytes(path, reins::MAX_IMAGE_BYTES as u64)
            .map_err(|e| usage(format!("--image {}: {e}", path.display())))?;
        total = total.saturating_add(bytes.len() as u64);
        if total > MAX_IMAGES_TOTAL_BYTES {
            return Err(usage(format!(
                "--image {}: the images come to more than {} MiB in all (at most {} MiB a run)",
                path.display(),
                MAX_IMAGES_TOTAL_BYTES >> 20,
                MAX_IMAGES_TOTAL_BYTES >> 20
            )));
        }
        out.push(reins::Image::from_bytes(bytes).map_err(|e| usage(format!("--image {}: {e}", path.display())))?);
    }
    Ok(out)
}

/// The outcome as the outcome file holds it: each image's bytes once, in a top-level `"images"` array of
/// `{"sha256", "media_type", "data"}` (in order of first appearance; the key is absent without images), and
/// every image of `messages` as a reference `{"media_type", "width", "height", "sha256"}` without `data` — as the
/// session store keeps them. The same image shown many times is written once.
pub fn outcome_value(outcome: &reins::Outcome) -> serde_json::Result<serde_json::Value> {
    use serde_json::Value;
    let mut value = serde_json::to_value(outcome)?;
    let mut seen = std::collections::HashSet::new();
    let mut entries = Vec::new();
    if let Some(messages) = value.get_mut("messages").and_then(Value::as_array_mut) {
        for m in messages.iter_mut() {
            let Some(images) = m.get_mut("images").and_then(Value::as_array_mut) else { continue };
            for image in images.iter_mut().filter_map(Value::as_object_mut) {
                let Some(data) = image.remove("data") else { continue };
                let sha = image.get("sha256").cloned().unwrap_or(Value::Null);
                if seen.insert(sha.to_string()) {
                    let media_type = image.get("media_type").cloned().unwrap_or(Value::Null);
                    entries.push(serde_json::json!({"sha256": sha, "media_type": media_type, "data": data}));
                }
            }
        }
    }
    if let (false, Some(obj)) = (entries.is_empty(), value.as_object_mut()) {
        obj.insert("images".into(), Value::Array(entries));
    }
    Ok(value)
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
