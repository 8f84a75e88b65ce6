//! `output_schema`: the JSON Schema that binds a run's final answer (see `reins::output`). In an agent file
//! it is a path to a JSON file (relative to the agent file) or an inline table; sessions record it inline.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::error::DefError;
use crate::load::read_bounded;

/// The largest output schema file: 1 MiB.
pub const MAX_OUTPUT_SCHEMA_BYTES: u64 = reins::output::MAX_OUTPUT_SCHEMA_BYTES as u64;

/// Where the output schema comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum OutputSchemaDef {
    /// A JSON file holding the schema (a regular file of at most 1 MiB).
    File(PathBuf),
    /// The schema itself (a table in TOML, an object in JSON; or `true`).
    Inline(Value),
}

impl Serialize for OutputSchemaDef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            OutputSchemaDef::File(p) => p.serialize(s),
            OutputSchemaDef::Inline(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for OutputSchemaDef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(p) => Ok(OutputSchemaDef::File(PathBuf::from(p))),
            v @ (Value::Object(_) | Value::Bool(_)) => Ok(OutputSchemaDef::Inline(v)),
            other => Err(serde::de::Error::custom(format!(
                "expected the path of a JSON Schema file or an inline schema table, not {other}"
            ))),
        }
    }
}

impl OutputSchemaDef {
    /// Checks an inline schema (a file is checked when it is read).
    pub fn validate(&self) -> Result<(), DefError> {
        match self {
            OutputSchemaDef::File(p) if p.as_os_str().is_empty() => Err(DefError::at("output_schema", "an empty path")),
            OutputSchemaDef::File(_) => Ok(()),
            OutputSchemaDef::Inline(v) => {
                reins::OutputSchema::new(v.clone()).map(drop).map_err(|e| DefError::at("output_schema", e.to_string()))
            }
        }
    }

    /// The same with a relative file path taken relative to `base_dir`.
    pub fn resolved(&self, base_dir: &Path) -> Self {
        match self {
            OutputSchemaDef::File(p) if p.is_relative() => OutputSchemaDef::File(base_dir.join(p)),
            other => other.clone(),
        }
    }

    /// Reads (a file: bounded, regular only) and checks the schema.
    pub fn load(&self) -> Result<reins::OutputSchema, DefError> {
        match self {
            OutputSchemaDef::Inline(v) => {
                reins::OutputSchema::new(v.clone()).map_err(|e| DefError::at("output_schema", e.to_string()))
            }
            OutputSchemaDef::File(p) => {
                let text = read_bounded(p, MAX_OUTPUT_SCHEMA_BYTES)
                    .map_err(|e| DefError::at("output_schema", format!("cannot read {}: {e}", p.display())))?;
                reins::OutputSchema::parse(&text)
                    .map_err(|e| DefError::at("output_schema", format!("{}: {e}", p.display())))
            }
        }
    }
}
