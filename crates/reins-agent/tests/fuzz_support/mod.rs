//! The check of the `agent_definition` fuzz target (`/fuzz`), shared with the property tests: any text, as
//! an agent file or a user config, is read or refused with an error naming a key or a line, never a panic;
//! and whatever is read round-trips through TOML and JSON and resolves over the defaults.
#![allow(dead_code)]

use std::path::Path;

use reins_agent::{AgentDef, Layer, Origin, UserConfig, resolve};

/// What the check reached, for coverage assertions.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reached {
    pub parsed: bool,
}

/// Checks one input. `Err` describes a broken property.
pub fn check_definition_text(text: &str) -> Result<Reached, String> {
    let base = Path::new("/base");
    let mut reached = Reached::default();
    match AgentDef::from_toml(text, base) {
        Err(e) => {
            if e.message.is_empty() || e.message.contains('\n') {
                return Err(format!("an error is one non-empty line: {e:?}"));
            }
        }
        Ok(def) => {
            reached.parsed = true;
            let json = def.to_json();
            let back = AgentDef::from_json(&json).map_err(|e| format!("JSON form refused: {e}\n{json}"))?;
            if back != def {
                return Err(format!("JSON round trip changed the definition:\n{def:?}\n{back:?}"));
            }
            let toml_text = def.to_toml().map_err(|e| format!("cannot write TOML: {e}"))?;
            // Paths are absolute now, so another base changes nothing.
            let again = AgentDef::from_toml(&toml_text, Path::new("/other"))
                .map_err(|e| format!("TOML form refused: {e}\n{toml_text}"))?;
            if again != def {
                return Err(format!("TOML round trip changed the definition:\n{toml_text}\n{def:?}\n{again:?}"));
            }
            let resolved = resolve(&[Layer::new(Origin::AgentFile { path: "/base/a.toml".into() }, def.clone())])
                .map_err(|e| format!("a valid definition does not resolve: {e}"))?;
            if resolved.def.limits.max_steps.is_none() {
                return Err("the defaults are missing".into());
            }
            let _ = resolved.entries();
            let red = def.redacted();
            if red.redacted_keys().len() < def.redacted_keys().len() {
                return Err("redaction lost a key".into());
            }
        }
    }
    let _ = UserConfig::parse(text, Path::new("/home/u/.config/reins/config.toml"));
    Ok(reached)
}

/// The fuzz target's entry: bytes as (lossy) UTF-8 text.
pub fn check_definition_bytes(data: &[u8]) -> Result<Reached, String> {
    check_definition_text(&String::from_utf8_lossy(data))
}
