//! The record of an eval run: a directory `evals/ID/` beside the session store, holding `eval.json` (the suite as
//! given, the agent files, the options) and `attempts.jsonl` (one line per finished attempt, appended and synced
//! as each ends — those that end during one sync share the next — so a crash loses at most the attempts in flight,
//! and an attempt counts as done only once its line is on disk). The attempts' sessions are in the store.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::check::{CheckResult, Observed};
use crate::error::EvalError;

/// An agent of the eval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// Its label (the file's stem, made unique).
    pub label: String,
    /// The agent file (absolute), if any (a suite of cases that all have their own has none).
    pub path: Option<String>,
    /// Its text when the eval started.
    pub text: Option<String>,
}

/// The options an eval runs with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Options {
    /// How many times each case runs per agent.
    pub epochs: u32,
    /// Attempts at once.
    pub jobs: usize,
    /// Keep each attempt's workspace.
    pub keep: bool,
    /// Retries of an attempt that failed for the infrastructure's reasons.
    pub retry_infra: u32,
    /// No new attempt starts once the eval's attempts cost this much (US dollars).
    pub max_cost_usd: Option<f64>,
    /// No new attempt starts once the eval's attempts used this many tokens (input plus output).
    pub max_tokens: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options { epochs: 1, jobs: 1, keep: false, retry_infra: 0, max_cost_usd: None, max_tokens: None }
    }
}

/// `eval.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalMeta {
    /// The eval's id.
    pub id: String,
    /// When it started (RFC 3339).
    pub created_at: String,
    /// The suite file (absolute).
    pub suite: String,
    /// The suite's name.
    pub suite_name: String,
    /// The suite file's text when the eval started.
    pub suite_text: String,
    /// The case ids, in order.
    pub cases: Vec<String>,
    /// The agents compared (one or more).
    pub agents: Vec<AgentRecord>,
    /// The options.
    pub options: Options,
    /// The Reins version that started it.
    pub reins_version: String,
    /// The eval this one re-scored (`reins eval rescore`): its attempts, checked again, no model called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rescored_from: Option<String>,
}

/// One attempt: a case run once by one agent (a retried infrastructure failure is another attempt).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// The agent's index in [`EvalMeta::agents`].
    pub agent: usize,
    /// The case's id.
    pub case: String,
    /// The epoch (1-based).
    pub epoch: u32,
    /// The try (1-based; more than 1 only for retried infrastructure failures).
    #[serde(rename = "try")]
    pub try_number: u32,
    /// The session the run was recorded in.
    #[serde(default)]
    pub session_id: Option<String>,
    /// What the agent did (none when it never ran).
    #[serde(default)]
    pub observed: Option<Observed>,
    /// The checks' results.
    #[serde(default)]
    pub checks: Vec<CheckResult>,
    /// The weighted score in [0, 1].
    pub score: f64,
    /// Every check passed.
    pub passed: bool,
    /// An infrastructure failure (the fixture could not be copied, the verifier crashed): never the agent's.
    #[serde(default)]
    pub infra: Option<String>,
    /// The workspace, when kept (`--keep`).
    #[serde(default)]
    pub workspace: Option<String>,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// Wall-clock milliseconds of the whole attempt (fixture, agent, verifier).
    pub duration_ms: u64,
}

/// The directory of one eval.
#[derive(Clone, Debug)]
pub struct EvalDir {
    path: PathBuf,
}

fn io(what: &str, path: &Path, e: impl std::fmt::Display) -> EvalError {
    EvalError::Io(format!("{what} {}: {e}", path.display()))
}

/// The evals directory beside a store file: `DIR_OF_STORE/evals`.
pub fn evals_root(store_path: &Path) -> PathBuf {
    store_path.parent().unwrap_or_else(|| Path::new(".")).join("evals")
}

fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

impl EvalDir {
    /// Creates the directory of `meta` under `root` and writes `eval.json`.
    pub fn create(root: &Path, meta: &EvalMeta) -> Result<EvalDir, EvalError> {
        let path = root.join(&meta.id);
        private_dir(&path).map_err(|e| io("cannot create", &path, e))?;
        let json = serde_json::to_vec_pretty(meta).map_err(|e| EvalError::Io(e.to_string()))?;
        let file = path.join("eval.json");
        write_private(&file, &json).map_err(|e| io("cannot write", &file, e))?;
        Ok(EvalDir { path })
    }

    /// The eval `id` (or a unique prefix of it) under `root`, with its meta.
    pub fn open(root: &Path, id: &str) -> Result<(EvalDir, EvalMeta), EvalError> {
        let not_found =
            || EvalError::Record { id: id.to_owned(), message: format!("no such eval under {}", root.display()) };
        if id.is_empty() || id.contains('/') || id.starts_with('.') {
            return Err(not_found());
        }
        let mut found: Vec<String> = match std::fs::read_dir(root) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(id))
                .collect(),
            Err(_) => Vec::new(),
        };
        found.sort();
        let name = match found.as_slice() {
            [one] => one.clone(),
            [] => return Err(not_found()),
            many if many.iter().any(|m| m == id) => id.to_owned(),
            many => {
                return Err(EvalError::Record { id: id.into(), message: format!("ambiguous: {}", many.join(", ")) });
            }
        };
        let path = root.join(&name);
        let file = path.join("eval.json");
        let text = std::fs::read(&file).map_err(|e| io("cannot read", &file, e))?;
        let meta: EvalMeta = serde_json::from_slice(&text)
            .map_err(|e| EvalError::Record { id: name.clone(), message: format!("{}: {e}", file.display()) })?;
        Ok((EvalDir { path }, meta))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rewrites `eval.json` (a resume's new options).
    pub fn update(&self, meta: &EvalMeta) -> Result<(), EvalError> {
        let json = serde_json::to_vec_pretty(meta).map_err(|e| EvalError::Io(e.to_string()))?;
        let file = self.path.join("eval.json");
        write_private(&file, &json).map_err(|e| io("cannot write", &file, e))
    }

    /// Takes the eval for this process (`lock` holds its pid) until the guard is dropped: a second process
    /// running or resuming the same eval is refused while the first is alive. A lock left by a process that
    /// died (a crash, `kill -9`) is taken over.
    pub fn lock(&self) -> Result<EvalLock, EvalError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = self.path.join("lock");
        for _ in 0..2 {
            match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&file) {
                Ok(mut f) => {
                    f.write_all(std::process::id().to_string().as_bytes()).map_err(|e| io("cannot write", &file, e))?;
                    return Ok(EvalLock { file });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let holder = std::fs::read_to_string(&file).unwrap_or_default();
                    let alive = holder
                        .trim()
                        .parse::<u32>()
                        .is_ok_and(|pid| pid != std::process::id() && Path::new(&format!("/proc/{pid}")).exists());
                    if alive {
                        return Err(EvalError::Record {
                            id: self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                            message: format!("process {} is running it now", holder.trim()),
                        });
                    }
                    // Left by a process that is gone: taken over.
                    let _ = std::fs::remove_file(&file);
                }
                Err(e) => return Err(io("cannot create", &file, e)),
            }
        }
        Err(EvalError::Io(format!("cannot take {}", file.display())))
    }

    /// Appends `attempt` to `attempts.jsonl` and syncs it to disk.
    pub fn append(&self, attempt: &Attempt) -> Result<(), EvalError> {
        self.append_all([attempt])
    }

    /// Appends `attempts` to `attempts.jsonl` in one write and syncs it to disk once (a group commit: the
    /// attempts that ended while the last sync ran share the next). None of them counts as done before this
    /// returns.
    pub fn append_all<'a>(&self, attempts: impl IntoIterator<Item = &'a Attempt>) -> Result<(), EvalError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = self.path.join("attempts.jsonl");
        let mut line = Vec::new();
        for attempt in attempts {
            serde_json::to_writer(&mut line, attempt).map_err(|e| EvalError::Io(e.to_string()))?;
            line.push(b'\n');
        }
        if line.is_empty() {
            return Ok(());
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&file)
            .map_err(|e| io("cannot open", &file, e))?;
        f.write_all(&line).and_then(|()| f.sync_data()).map_err(|e| io("cannot write", &file, e))
    }

    /// The attempts recorded, in order. A last line cut short by a crash is left out.
    pub fn attempts(&self) -> Result<Vec<Attempt>, EvalError> {
        let file = self.path.join("attempts.jsonl");
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("cannot read", &file, e)),
        };
        let mut out = Vec::new();
        for line in text.split_inclusive('\n') {
            if !line.ends_with('\n') {
                break;
            }
            let a: Attempt = serde_json::from_str(line)
                .map_err(|e| EvalError::Io(format!("{}: a malformed attempt: {e}", file.display())))?;
            out.push(a);
        }
        Ok(out)
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)
}

/// Now, RFC 3339.
pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The eval taken by this process (see [`EvalDir::lock`]); released when dropped.
#[derive(Debug)]
pub struct EvalLock {
    file: PathBuf,
}

impl Drop for EvalLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}
