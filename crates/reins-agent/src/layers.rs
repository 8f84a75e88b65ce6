//! Layering with provenance: definitions stacked from the defaults up (the user config, a profile, a
//! recorded session, the agent file, the flags), each later layer overriding the keys it sets, and every
//! resolved value knowing which layer it came from ([`Origin`]).
//!
//! Keys merge one by one, with these exceptions: a `[[presets]]` entry and an `[mcp.NAME]` or `[agents.NAME]`
//! table are replaced whole by one of the same name (others are kept, in order); arrays, `provider.extra_body` and
//! `commands.limits` are replaced whole; and keys that exclude each other (`instructions` /
//! `instructions_file`, `context.max_context_chars` / `context.max_context_tokens`) clear each other.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::definition::{AgentDef, DEFAULT_MAX_STEPS, DEFAULT_MAX_TOOL_RESULT_CHARS};
use crate::error::DefError;
use crate::value::Positive;

/// Where a resolved value came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// Reins' own default.
    Default,
    /// The top level of the user config.
    UserConfig {
        /// The file.
        path: PathBuf,
    },
    /// A `[profiles.NAME]` table of the user config, picked with `--profile NAME`.
    Profile {
        /// The profile.
        name: String,
        /// The user config it is in.
        path: PathBuf,
    },
    /// The agent recorded with a session (`--resume ID`).
    Session {
        /// The session.
        id: String,
    },
    /// An agent file (`--agent FILE`).
    AgentFile {
        /// The file.
        path: PathBuf,
    },
    /// A command-line flag.
    Flag,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::UserConfig { path } => write!(f, "user config {}", path.display()),
            Origin::Profile { name, path } => write!(f, "profile {name:?} of {}", path.display()),
            Origin::Session { id } => write!(f, "session {id}"),
            Origin::AgentFile { path } => write!(f, "agent file {}", path.display()),
            Origin::Flag => f.write_str("flag"),
        }
    }
}

/// One layer of a definition: the keys it sets and where they came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    /// Where it came from.
    pub origin: Origin,
    /// The keys it sets (the others are `None` or empty).
    pub def: AgentDef,
}

impl Layer {
    /// A layer.
    pub fn new(origin: Origin, def: AgentDef) -> Self {
        Self { origin, def }
    }
}

/// Reins' defaults, the layer beneath all others: `test_tools = false`, `limits.max_steps = 50`,
/// `context.max_tool_result_chars = 32000`.
pub fn defaults() -> AgentDef {
    let mut def = AgentDef { test_tools: Some(false), ..AgentDef::default() };
    def.limits.max_steps = Positive::new(DEFAULT_MAX_STEPS);
    def.context.max_tool_result_chars = Positive::new(DEFAULT_MAX_TOOL_RESULT_CHARS);
    def
}

/// A resolved definition and where each of its values came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The definition.
    pub def: AgentDef,
    /// Each key (`limits.max_steps`, `presets.NAME`, `mcp.NAME`, ...) and the layer that set it.
    pub origins: BTreeMap<String, Origin>,
}

/// One line of a resolved definition, for showing it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// Its value, secrets masked.
    pub value: Value,
    /// Where it came from.
    pub origin: Origin,
}

const EXCLUSIVE: &[(&str, &str)] =
    &[("instructions", "instructions_file"), ("context.max_context_chars", "context.max_context_tokens")];

fn is_atomic(path: &str) -> bool {
    matches!(path, "provider.extra_body" | "commands.limits" | "output_schema")
        || path.strip_prefix("mcp.").is_some_and(|rest| !rest.is_empty() && !rest.contains('.'))
        || path.strip_prefix("agents.").is_some_and(|rest| !rest.is_empty() && !rest.contains('.'))
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() { key.to_owned() } else { format!("{prefix}.{key}") }
}

fn forget(origins: &mut BTreeMap<String, Origin>, path: &str) {
    let sub = format!("{path}.");
    origins.retain(|k, _| k != path && !k.starts_with(&sub));
}

fn merge(
    root: &mut Map<String, Value>,
    prefix: &str,
    over: &Map<String, Value>,
    origin: &Origin,
    origins: &mut BTreeMap<String, Origin>,
) {
    for (key, value) in over {
        let path = join(prefix, key);
        if value.is_null() {
            continue;
        }
        for (a, b) in EXCLUSIVE {
            let partner = if path == *a {
                Some(*b)
            } else if path == *b {
                Some(*a)
            } else {
                None
            };
            if let Some(partner) = partner {
                // `root` is the table at `prefix`; the partner sits beside `path`.
                let local = partner.rsplit('.').next().unwrap_or(partner);
                root.remove(local);
                forget(origins, partner);
            }
        }
        if path == "presets" {
            merge_presets(root, value, origin, origins);
            continue;
        }
        match value {
            Value::Object(sub) if !is_atomic(&path) => {
                let entry = root.entry(key.clone()).or_insert_with(|| Value::Object(Map::new()));
                if !entry.is_object() {
                    *entry = Value::Object(Map::new());
                }
                if let Value::Object(target) = entry {
                    merge(target, &path, sub, origin, origins);
                }
            }
            _ => {
                root.insert(key.clone(), value.clone());
                forget(origins, &path);
                origins.insert(path, origin.clone());
            }
        }
    }
}

fn merge_presets(
    root: &mut Map<String, Value>,
    value: &Value,
    origin: &Origin,
    origins: &mut BTreeMap<String, Origin>,
) {
    let Value::Array(new) = value else { return };
    let entry = root.entry("presets").or_insert_with(|| Value::Array(Vec::new()));
    if !entry.is_array() {
        *entry = Value::Array(Vec::new());
    }
    let Value::Array(list) = entry else { return };
    for preset in new {
        let name = preset.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
        match list.iter_mut().find(|p| p.get("name").and_then(Value::as_str) == Some(&name)) {
            Some(slot) => *slot = preset.clone(),
            None => list.push(preset.clone()),
        }
        origins.insert(format!("presets.{name}"), origin.clone());
    }
}

/// Resolves `layers` (lowest first) over Reins' [`defaults`].
pub fn resolve(layers: &[Layer]) -> Result<Resolved, DefError> {
    let mut root = Map::new();
    let mut origins = BTreeMap::new();
    let base = Layer::new(Origin::Default, defaults());
    for layer in std::iter::once(&base).chain(layers) {
        if let Value::Object(over) = layer.def.to_json() {
            merge(&mut root, "", &over, &layer.origin, &mut origins);
        }
    }
    let def = AgentDef::from_json(&Value::Object(root)).map_err(|e| e.within("the resolved definition"))?;
    Ok(Resolved { def, origins })
}

fn flatten(prefix: &str, value: &Value, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) if !is_atomic(prefix) => {
            for (k, v) in map {
                flatten(&join(prefix, k), v, out);
            }
        }
        Value::Array(list) if prefix == "presets" => {
            for p in list {
                let name = p.get("name").and_then(Value::as_str).unwrap_or_default();
                let compact: Map<String, Value> = p
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                out.push((format!("presets.{name}"), Value::Object(compact)));
            }
        }
        Value::Null => {}
        other => out.push((prefix.to_owned(), other.clone())),
    }
}

impl Resolved {
    /// Where the value of `key` came from (`None`: the key is not set).
    pub fn origin(&self, key: &str) -> Option<&Origin> {
        self.origins.get(key).or_else(|| {
            // A key inside a table set whole (an MCP server, `commands.limits`) has the table's origin.
            let mut k = key;
            while let Some((parent, _)) = k.rsplit_once('.') {
                if let Some(o) = self.origins.get(parent) {
                    return Some(o);
                }
                k = parent;
            }
            None
        })
    }

    /// Every set key with its value (secrets masked) and origin, in the definition's order.
    pub fn entries(&self) -> Vec<Entry> {
        let mut flat = Vec::new();
        flatten("", &self.def.shown().to_json(), &mut flat);
        flat.into_iter()
            .map(|(key, value)| {
                let origin = self.origin(&key).cloned().unwrap_or(Origin::Default);
                Entry { key, value, origin }
            })
            .collect()
    }
}
