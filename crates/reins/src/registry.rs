//! The tool registry: names and duplicates checked, schemas checked and compiled once, at build time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::tool::{Tool, ToolSpec};
use crate::validate::{ArgsValidator, ArgumentError, same_name};

/// Why a registry could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The name does not match `^[a-zA-Z][a-zA-Z0-9_-]{0,63}$`.
    #[error("invalid tool name {name:?}: names start with a letter and hold 1-64 letters, digits, '_' or '-'")]
    InvalidName {
        /// The refused name.
        name: String,
    },
    /// Two tools share a name.
    #[error("duplicate tool name {name:?}")]
    Duplicate {
        /// The repeated name.
        name: String,
    },
    /// The input schema is not a valid JSON Schema, or no call could ever satisfy it.
    #[error("tool {name:?} has an invalid input schema: {reason}")]
    InvalidSchema {
        /// The tool's name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// True when `name` matches `^[a-zA-Z][a-zA-Z0-9_-]{0,63}$`.
///
/// ```
/// assert!(reins::is_valid_tool_name("read_file"));
/// assert!(!reins::is_valid_tool_name("1up"));
/// ```
pub fn is_valid_tool_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_alphabetic()
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
}

#[derive(Clone)]
struct Entry {
    tool: Arc<dyn Tool>,
    validator: Arc<ArgsValidator>,
}

/// Why a call could not be admitted to run.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CallError {
    /// No tool has that name.
    #[error("unknown tool {name:?}; available tools: {available}")]
    UnknownTool {
        /// The requested name.
        name: String,
        /// The registered names, comma-separated.
        available: String,
    },
    /// The arguments fail the tool's schema.
    #[error("invalid arguments for tool {name:?}: {}", join_errors(.errors))]
    InvalidArguments {
        /// The tool's name.
        name: String,
        /// Each offending value, by JSON pointer.
        errors: Vec<ArgumentError>,
    },
}

#[cold]
#[inline(never)]
fn invalid_arguments(name: &str, errors: Vec<ArgumentError>) -> CallError {
    CallError::InvalidArguments { name: name.to_owned(), errors }
}

fn join_errors(errors: &[ArgumentError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// The tools of a run, each with its compiled schema. Built once, shared by many runs.
///
/// ```
/// let echo = reins::FnTool::new("echo", "Echo.", serde_json::json!({
///     "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
///     |args, _| async move { Ok(reins::ToolOutput::Json(args["text"].clone())) });
/// let registry = reins::Registry::builder().tool(echo).build().unwrap();
/// assert!(registry.check("echo", &serde_json::json!({"text": 1})).is_err());
/// ```
pub struct Registry {
    entries: Vec<Entry>,
    index: HashMap<String, usize>,
    specs: Arc<[ToolSpec]>,
    /// True when a tool is a sub-agent (the driver then shares the run's budget with its calls).
    sub_agents: bool,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("tools", &self.specs.iter().map(|s| &s.name).collect::<Vec<_>>()).finish()
    }
}

/// Collects tools for a [`Registry`].
#[derive(Default)]
pub struct RegistryBuilder {
    tools: Vec<Arc<dyn Tool>>,
}

impl RegistryBuilder {
    /// Adds a tool.
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Adds a shared tool.
    pub fn shared(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Checks every name and schema and compiles the schemas.
    pub fn build(self) -> Result<Registry, RegistryError> {
        Registry::new(self.tools)
    }
}

impl Registry {
    /// A builder.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// A registry with no tools.
    pub fn empty() -> Registry {
        Registry { entries: Vec::new(), index: HashMap::new(), specs: Arc::from(Vec::new()), sub_agents: false }
    }

    /// Builds a registry from tools: refuses invalid or duplicate names and invalid schemas.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Result<Registry, RegistryError> {
        let mut entries = Vec::with_capacity(tools.len());
        let mut index = HashMap::with_capacity(tools.len());
        for tool in tools {
            let spec = tool.spec();
            if !is_valid_tool_name(&spec.name) {
                return Err(RegistryError::InvalidName { name: spec.name.clone() });
            }
            if index.contains_key(&spec.name) {
                return Err(RegistryError::Duplicate { name: spec.name.clone() });
            }
            let validator = args_validator(&spec.name, &spec.input_schema)?;
            index.insert(spec.name.clone(), entries.len());
            entries.push(Entry { tool, validator });
        }
        let specs: Arc<[ToolSpec]> = entries.iter().map(|e| e.tool.spec().clone()).collect();
        let sub_agents = entries.iter().any(|e| e.tool.sub_agent());
        Ok(Registry { entries, index, specs, sub_agents })
    }

    /// The same tools followed by `tools`: refuses invalid or duplicate names and invalid schemas like
    /// [`Registry::new`].
    pub fn with_tools(&self, tools: Vec<Arc<dyn Tool>>) -> Result<Registry, RegistryError> {
        Registry::new(self.entries.iter().map(|e| e.tool.clone()).chain(tools).collect())
    }

    /// True when one of its tools is a sub-agent ([`Tool::sub_agent`]).
    pub fn has_sub_agents(&self) -> bool {
        self.sub_agents
    }

    /// The same tools plus the final-answer tool of `schema` (see [`crate::output`]): the compiled schemas
    /// are shared, not compiled again, except the new tool's. Refused when a tool already has its name.
    pub fn with_output(&self, schema: &crate::output::OutputSchema) -> Result<Registry, RegistryError> {
        let tool = schema.tool();
        let name = tool.spec().name.clone();
        if self.position(&name).is_some() {
            return Err(RegistryError::Duplicate { name });
        }
        let validator = args_validator(&name, &tool.spec().input_schema)?;
        let mut entries = self.entries.clone();
        let mut index = self.index.clone();
        index.insert(name, entries.len());
        entries.push(Entry { tool, validator });
        let specs: Arc<[ToolSpec]> = entries.iter().map(|e| e.tool.spec().clone()).collect();
        Ok(Registry { entries, index, specs, sub_agents: self.sub_agents })
    }

    /// The specs of every tool, in registration order.
    pub fn specs(&self) -> &Arc<[ToolSpec]> {
        &self.specs
    }

    /// The index of the tool with that name: a scan for a few tools (cheaper than hashing the name),
    /// the hash index for more.
    #[inline(always)]
    fn position(&self, name: &str) -> Option<usize> {
        if self.specs.len() <= 8 {
            self.specs.iter().position(|s| same_name(&s.name, name))
        } else {
            self.indexed(name)
        }
    }

    #[inline(never)]
    fn indexed(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// The tool with that name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.position(name).map(|i| &self.entries[i].tool)
    }

    /// How many tools it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when it holds no tool.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks a call: the tool exists and the arguments satisfy its schema. Returns the tool.
    pub fn check(&self, name: &str, arguments: &serde_json::Value) -> Result<&Arc<dyn Tool>, CallError> {
        // The errors are built out of line, so that a valid call runs through a short function.
        let Some(entry) = self.position(name).and_then(|i| self.entries.get(i)) else {
            return Err(self.unknown(name));
        };
        match entry.validator.check(arguments) {
            Ok(()) => Ok(&entry.tool),
            Err(errors) => Err(invalid_arguments(name, errors)),
        }
    }

    #[cold]
    #[inline(never)]
    fn unknown(&self, name: &str) -> CallError {
        let available = self.specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ");
        CallError::UnknownTool { name: name.to_owned(), available }
    }
}

/// Supplies the tools of a run step by step, for tools that change while it runs (an MCP server's
/// `tools/list_changed`). The driver asks at the start of a run and after every tool batch, so one model
/// turn and the calls it proposes always see the same registry. It should answer promptly; a source that
/// cannot refresh keeps answering with its last registry.
#[async_trait::async_trait]
pub trait ToolSource: Send + Sync {
    /// The registry for the next model call and its tool calls.
    async fn registry(&self) -> Arc<Registry>;

    /// Events the source has to record, taken when it is asked for the registry after a batch (an MCP
    /// server's elicitation during the batch); none by default.
    fn take_events(&self) -> Vec<crate::events::EventKind> {
        Vec::new()
    }
}

/// How many compiled schemas the process keeps for registries to come (past it, the cache starts over).
const CACHED_SCHEMAS: usize = 256;

/// The compiled schema of a tool, shared with every registry of the process whose tools have the same schema
/// (by its JSON text): an agent built again and again with tools of its own (each attempt of an eval, in a
/// workspace of its own) compiles and checks each schema once, not each time. A refused schema is not kept.
fn args_validator(name: &str, schema: &serde_json::Value) -> Result<Arc<ArgsValidator>, RegistryError> {
    type Compiled = HashMap<String, Arc<ArgsValidator>>;
    static COMPILED: Mutex<Option<Compiled>> = Mutex::new(None);
    let key = schema.to_string();
    let lock = || COMPILED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(v) = lock().as_ref().and_then(|c| c.get(&key)) {
        return Ok(v.clone());
    }
    let v = Arc::new(ArgsValidator::new(compile_schema(name, schema)?, schema));
    let mut compiled = lock();
    let compiled = compiled.get_or_insert_with(HashMap::new);
    if compiled.len() >= CACHED_SCHEMAS {
        compiled.clear();
    }
    Ok(compiled.entry(key).or_insert(v).clone())
}

/// Checks a schema against its meta-schema, refuses schemas no object could satisfy, and compiles it.
fn compile_schema(name: &str, schema: &serde_json::Value) -> Result<jsonschema::Validator, RegistryError> {
    let invalid = |reason: String| RegistryError::InvalidSchema { name: name.to_owned(), reason };
    match schema {
        serde_json::Value::Object(map) => {
            if let Some(t) = map.get("type") {
                let admits_object = match t {
                    serde_json::Value::String(s) => s == "object",
                    serde_json::Value::Array(a) => a.iter().any(|v| v == "object"),
                    _ => true, // the meta-schema check below reports it
                };
                if !admits_object {
                    return Err(invalid(format!("arguments are a JSON object, but the schema's type is {t}")));
                }
            }
        }
        serde_json::Value::Bool(true) => {}
        serde_json::Value::Bool(false) => return Err(invalid("the schema `false` admits no call".into())),
        other => return Err(invalid(format!("a schema is an object or a boolean, not {other}"))),
    }
    jsonschema::meta::validate(schema)
        .map_err(|e| invalid(format!("{} (at {})", e, pointer_or_root(e.instance_path().as_str()))))?;
    jsonschema::validator_for(schema).map_err(|e| invalid(e.to_string()))
}

pub(crate) fn pointer_or_root(p: &str) -> &str {
    if p.is_empty() { "(root)" } else { p }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, schema: serde_json::Value) -> Arc<dyn Tool> {
        Arc::new(crate::FnTool::new(name, "A tool.", schema, |_, _| async {
            Ok(crate::ToolOutput::Json(serde_json::Value::Null))
        }))
    }

    #[test]
    fn registries_of_tools_with_one_schema_share_its_compiled_form_and_still_check_calls() {
        let schema =
            json!({"type": "object", "properties": {"shared_path": {"type": "string"}}, "required": ["shared_path"]});
        let a = Registry::new(vec![tool("a", schema.clone())]).unwrap();
        let b = Registry::new(vec![tool("b", schema)]).unwrap();
        assert!(Arc::ptr_eq(&a.entries[0].validator, &b.entries[0].validator));
        assert!(b.check("b", &json!({"shared_path": "x"})).is_ok());
        let e = b.check("b", &json!({"shared_path": 1})).unwrap_err();
        assert!(matches!(e, CallError::InvalidArguments { ref name, .. } if name == "b"), "{e}");
    }

    #[test]
    fn a_refused_schema_is_refused_each_time_under_its_tool_s_name() {
        for name in ["c", "d"] {
            let e = Registry::new(vec![tool(name, json!({"type": "string"}))]).unwrap_err();
            assert!(matches!(e, RegistryError::InvalidSchema { name: ref n, .. } if n == name), "{e}");
        }
    }
}
