//! Suites and cases as data: the suite file (TOML), case folders, and the agent each case runs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::check::{Check, CheckDef};
use crate::error::EvalError;

/// The largest suite or case file read (1 MiB).
pub const MAX_SUITE_BYTES: u64 = 1 << 20;

/// A suite file, as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteFile {
    /// A name for people (default: the file's stem).
    #[serde(default)]
    pub name: Option<String>,
    /// The default agent file of every case (relative to the suite file); `--agent` replaces it.
    #[serde(default)]
    pub agent: Option<PathBuf>,
    /// A directory whose sub-directories holding a `case.toml` are cases too (the folder's name is the id).
    #[serde(default)]
    pub cases_dir: Option<PathBuf>,
    /// The cases.
    #[serde(default)]
    pub cases: Vec<CaseFile>,
    /// Harbor task directories (Terminal-Bench 2's format) run as cases, relative to the suite file.
    #[serde(default)]
    pub harbor: Vec<PathBuf>,
    /// A directory whose sub-directories holding a `task.toml` are Harbor tasks run as cases.
    #[serde(default)]
    pub harbor_dir: Option<PathBuf>,
}

/// A case, as written (in `[[cases]]` of a suite or a folder's `case.toml`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseFile {
    /// The stable id: resume and diff line cases up by it (a folder's name when left out there).
    #[serde(default)]
    pub id: Option<String>,
    /// The prompt.
    #[serde(default)]
    pub prompt: Option<String>,
    /// A file holding the prompt (relative to the file the case is in); excludes `prompt`.
    #[serde(default)]
    pub prompt_file: Option<PathBuf>,
    /// The case's own agent file (replaces the suite's and `--agent`'s).
    #[serde(default)]
    pub agent: Option<PathBuf>,
    /// The model instead of the agent's (`script:FILE` relative to the case's file).
    #[serde(default)]
    pub model: Option<String>,
    /// Limits instead of the agent's (the keys of an agent file's `[limits]`).
    #[serde(default)]
    pub limits: Option<toml::Table>,
    /// A directory copied fresh into a private temporary workspace for each attempt.
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    /// The checks; none means "the run completed".
    #[serde(default)]
    pub checks: Vec<CheckDef>,
}

/// A case ready to run.
#[derive(Clone, Debug)]
pub struct Case {
    /// Its stable id.
    pub id: String,
    /// Where it was written (`suite.toml cases[2]`, `cases/x/case.toml`), for messages.
    pub origin: String,
    /// The prompt.
    pub prompt: String,
    /// Index into [`Suite::agents`] when the case has its own agent file.
    pub own_agent: Option<PathBuf>,
    /// The agent definition overrides (`model`, `limits`) as a JSON object merged over the agent's.
    pub overrides: serde_json::Map<String, serde_json::Value>,
    /// The fixture directory (absolute).
    pub workspace: Option<PathBuf>,
    /// The checks.
    pub checks: Vec<Check>,
}

/// A loaded suite.
#[derive(Clone, Debug)]
pub struct Suite {
    /// Its name.
    pub name: String,
    /// The suite file (absolute).
    pub path: PathBuf,
    /// The suite file's text, as given.
    pub text: String,
    /// The default agent file (absolute), if the suite names one.
    pub agent: Option<PathBuf>,
    /// The cases, in order.
    pub cases: Vec<Case>,
}

fn read(path: &Path) -> Result<String, EvalError> {
    reins_agent::read_bounded(path, MAX_SUITE_BYTES).map_err(|why| EvalError::Suite {
        file: path.display().to_string(),
        key: None,
        message: why,
    })
}

fn parse<T: for<'de> Deserialize<'de>>(text: &str, file: &Path) -> Result<T, EvalError> {
    reins_agent::parse_toml(text).map_err(|e| EvalError::Suite {
        file: file.display().to_string(),
        key: e.path.clone(),
        message: e.message,
    })
}

fn base_of(path: &Path) -> PathBuf {
    path.parent().map(reins_agent::absolute).unwrap_or_else(|| reins_agent::absolute(Path::new(".")))
}

impl Suite {
    /// Loads the suite file at `path` and its case folders. Every error names the file and the key.
    pub fn load(path: &Path) -> Result<Suite, EvalError> {
        let path = reins_agent::absolute(path);
        let text = read(&path)?;
        let file: SuiteFile = parse(&text, &path)?;
        let base = base_of(&path);
        let suite_err = |key: String, message: String| EvalError::Suite {
            file: path.display().to_string(),
            key: Some(key),
            message,
        };
        let mut cases = Vec::new();
        for (i, c) in file.cases.iter().enumerate() {
            let key = format!("cases[{i}]");
            let id = c.id.clone().ok_or_else(|| suite_err(format!("{key}.id"), "a case needs an id".into()))?;
            cases.push(case(c, id, &base, &path, &key)?);
        }
        if let Some(dir) = &file.cases_dir {
            let dir = base.join(dir);
            let entries = std::fs::read_dir(&dir)
                .map_err(|e| suite_err("cases_dir".into(), format!("cannot read {}: {e}", dir.display())))?;
            let mut folders: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
            folders.sort();
            for folder in folders {
                let case_file = folder.join("case.toml");
                if !case_file.is_file() {
                    continue;
                }
                let text = read(&case_file)?;
                let c: CaseFile = parse(&text, &case_file)?;
                let name = folder.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let id = c.id.clone().unwrap_or(name);
                cases.push(case(&c, id, &folder, &case_file, "")?);
            }
        }
        let mut tasks: Vec<(PathBuf, String)> =
            file.harbor.iter().enumerate().map(|(i, t)| (base.join(t), format!("harbor[{i}]"))).collect();
        if let Some(dir) = &file.harbor_dir {
            let dir = base.join(dir);
            let entries = std::fs::read_dir(&dir)
                .map_err(|e| suite_err("harbor_dir".into(), format!("cannot read {}: {e}", dir.display())))?;
            let mut found: Vec<PathBuf> =
                entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.join("task.toml").is_file()).collect();
            found.sort();
            tasks.extend(found.into_iter().map(|p| (p, "harbor_dir".to_owned())));
        }
        for (task, key) in tasks {
            cases.push(crate::harbor::case(&task).map_err(|m| suite_err(key, m))?);
        }
        if cases.is_empty() {
            return Err(EvalError::Suite {
                file: path.display().to_string(),
                key: None,
                message: "the suite has no cases: add [[cases]] or cases_dir".into(),
            });
        }
        let mut seen = BTreeSet::new();
        for c in &cases {
            if !seen.insert(c.id.clone()) {
                return Err(EvalError::Suite {
                    file: path.display().to_string(),
                    key: Some("id".into()),
                    message: format!("two cases have the id {:?} ({}): ids must be unique", c.id, c.origin),
                });
            }
        }
        let name = file
            .name
            .clone()
            .unwrap_or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default());
        Ok(Suite { name, agent: file.agent.as_ref().map(|a| base.join(a)), path, text, cases })
    }
}

/// A case of `file` (its keys under `key`), paths relative to `base`.
fn case(c: &CaseFile, id: String, base: &Path, file: &Path, key: &str) -> Result<Case, EvalError> {
    let at = |k: &str| if key.is_empty() { k.to_owned() } else { format!("{key}.{k}") };
    let err =
        |k: &str, message: String| EvalError::Suite { file: file.display().to_string(), key: Some(at(k)), message };
    if id.is_empty() || id.chars().any(|ch| ch.is_control() || ch == '/' || ch == '@') {
        return Err(err("id", format!("{id:?} is not a usable id (non-empty; no '/', '@' or control characters)")));
    }
    let prompt = match (&c.prompt, &c.prompt_file) {
        (Some(_), Some(_)) => return Err(err("prompt_file", "give prompt or prompt_file, not both".into())),
        (Some(p), None) => p.clone(),
        (None, Some(f)) => {
            let p = base.join(f);
            reins_agent::read_bounded(&p, MAX_SUITE_BYTES)
                .map_err(|why| err("prompt_file", format!("cannot read {}: {why}", p.display())))?
        }
        (None, None) => return Err(err("prompt", "a case needs a prompt (or prompt_file)".into())),
    };
    let mut overrides = serde_json::Map::new();
    if let Some(model) = &c.model {
        let model = match model.strip_prefix("script:") {
            Some(f) if !Path::new(f).is_absolute() => format!("script:{}", base.join(f).display()),
            _ => model.clone(),
        };
        overrides.insert("model".into(), model.into());
    }
    if let Some(limits) = &c.limits {
        let v = serde_json::to_value(limits).map_err(|e| err("limits", e.to_string()))?;
        overrides.insert("limits".into(), v);
    }
    let workspace = match &c.workspace {
        Some(w) => {
            let p = base.join(w);
            if !p.is_dir() {
                return Err(err("workspace", format!("{} is not a directory", p.display())));
            }
            Some(p)
        }
        None => None,
    };
    let mut checks = Vec::new();
    for (j, def) in c.checks.iter().enumerate() {
        let k = at(&format!("checks[{j}]"));
        checks.push(Check::from_def(def, base).map_err(|(field, message)| EvalError::Suite {
            file: file.display().to_string(),
            key: Some(if field.is_empty() { k.clone() } else { format!("{k}.{field}") }),
            message,
        })?);
    }
    let origin = if key.is_empty() { file.display().to_string() } else { format!("{} {key}", file.display()) };
    Ok(Case { id, origin, prompt, own_agent: c.agent.as_ref().map(|a| base.join(a)), overrides, workspace, checks })
}

/// Loads the agent file at `path` and applies a case's overrides (`model`, `limits`), naming the case on error.
pub fn agent_for(base: &reins_agent::AgentDef, case: &Case) -> Result<reins_agent::AgentDef, EvalError> {
    if case.overrides.is_empty() {
        return Ok(base.clone());
    }
    let mut json = base.to_json();
    if let Some(obj) = json.as_object_mut() {
        for (k, v) in &case.overrides {
            match (obj.get_mut(k), v) {
                (Some(serde_json::Value::Object(old)), serde_json::Value::Object(new)) => {
                    for (nk, nv) in new {
                        old.insert(nk.clone(), nv.clone());
                    }
                }
                _ => {
                    obj.insert(k.clone(), v.clone());
                }
            }
        }
    }
    reins_agent::AgentDef::from_json(&json).map_err(|e| EvalError::Suite {
        file: case.origin.clone(),
        key: e.path.clone(),
        message: e.message,
    })
}

/// Loads an agent file, its errors naming the file and key.
pub fn load_agent(path: &Path) -> Result<reins_agent::AgentDef, EvalError> {
    reins_agent::agent_file(path).map_err(|e| EvalError::Suite {
        file: path.display().to_string(),
        key: e.path.clone(),
        message: e.message,
    })
}
