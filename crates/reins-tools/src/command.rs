//! Named command presets and the process lifecycle: `run_command`.
//!
//! A model never names an executable and never writes a shell string: it picks a preset by name and, only where
//! the preset declares a schema for them, passes extra arguments that are checked against it. Each command runs
//! in its own process group with stdin from `/dev/null`, a cleared environment plus an allow-list, a working
//! directory inside the workspace (entered with `fchdir` on a handle opened beneath the root), resource limits
//! set with `setrlimit`, and optionally the OS sandbox ([`crate::sandbox`]). On timeout, cancellation or drop the
//! whole group is killed, and the output readers get a bounded drain time, so a grandchild that escaped the group
//! and holds a pipe cannot hang the run. When Reins itself dies (even by `kill -9`), the group's watcher
//! ([`crate::lifeline`]) kills the group. Output is captured per stream up to a byte cap, head and tail kept.
//!
//! Each command gets a private temporary directory (`$TMPDIR`), removed after it. A directory left by a process
//! that was killed before it could remove its own is removed by the next process that runs a command (once,
//! before its first): one named `reins-cmd-PID-…` in the temp dir, owned by this user, whose process `PID` is
//! gone and whose lock no live process holds.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reins::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use crate::output::{CappedBuffer, DEFAULT_OUTPUT_CAP};
use crate::sandbox::{self, PreparedSandbox, SandboxError, SandboxMode, SandboxRequest};
use crate::workspace::{PROTECTED_SCAN_LIMIT, ProtectedScan, RelPath, Workspace, display_name};

/// The default command timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long output readers may keep draining after the group was killed or the leader exited.
pub const DEFAULT_DRAIN: Duration = Duration::from_millis(500);
/// Environment variables passed by default (when set in the parent), unless they look like secrets; and
/// the names that look like secrets (the core's, shared with MCP servers' environment).
pub use reins::secrets::{DEFAULT_ENV_ALLOW, is_secret_name};
/// The most arguments a model may pass.
const MAX_MODEL_ARGS: usize = 64;
/// The longest model argument, in bytes.
const MAX_ARG_BYTES: usize = 4096;

/// Resource limits applied with `setrlimit` in the child before it executes. `None` leaves the inherited limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourceLimits {
    /// CPU seconds (`RLIMIT_CPU`).
    pub cpu_seconds: Option<u64>,
    /// Address space in bytes (`RLIMIT_AS`).
    pub address_space_bytes: Option<u64>,
    /// Open files (`RLIMIT_NOFILE`).
    pub open_files: Option<u64>,
    /// Processes of the user (`RLIMIT_NPROC`; not enforced for root outside a user namespace).
    pub processes: Option<u64>,
    /// Largest file the command may write, in bytes (`RLIMIT_FSIZE`).
    pub file_size_bytes: Option<u64>,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        Self {
            cpu_seconds: None,
            address_space_bytes: None,
            open_files: Some(1024),
            processes: None,
            file_size_bytes: Some(1 << 30),
        }
    }
}

impl ResourceLimits {
    /// Refuses a limit of zero, which no command can start under (`open_files = 0` leaves it no descriptor to
    /// load its program with; `cpu_seconds = 0` kills it at once), with the name of the limit.
    pub fn validate(&self) -> Result<(), String> {
        for (name, value) in [
            ("cpu_seconds", self.cpu_seconds),
            ("address_space_bytes", self.address_space_bytes),
            ("open_files", self.open_files),
            ("processes", self.processes),
            ("file_size_bytes", self.file_size_bytes),
        ] {
            if value == Some(0) {
                return Err(format!("limits.{name} must be at least 1 (leave it out for the inherited limit)"));
            }
        }
        Ok(())
    }

    fn pairs(&self) -> Vec<(libc::__rlimit_resource_t, u64)> {
        let mut v = Vec::new();
        let mut add = |r, x: Option<u64>| {
            if let Some(x) = x {
                v.push((r, x));
            }
        };
        add(libc::RLIMIT_CPU, self.cpu_seconds);
        add(libc::RLIMIT_AS, self.address_space_bytes);
        add(libc::RLIMIT_NOFILE, self.open_files);
        add(libc::RLIMIT_NPROC, self.processes);
        add(libc::RLIMIT_FSIZE, self.file_size_bytes);
        v
    }
}

/// A named command the model may run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// The name the model uses (`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`).
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: Option<String>,
    /// The program: a path, or a name looked up in `PATH` when the runner is built.
    pub program: String,
    /// Fixed arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// A JSON Schema for the array of extra arguments the model may append. Without it, the model may pass none.
    #[serde(default)]
    pub arg_schema: Option<serde_json::Value>,
    /// The working directory, relative to the workspace root (default: the root).
    #[serde(default)]
    pub cwd: Option<String>,
    /// The timeout (default: the runner's).
    #[serde(default, with = "opt_duration")]
    pub timeout: Option<Duration>,
    /// Extra environment variables to pass from the parent. Naming a secret-looking variable here passes it.
    #[serde(default)]
    pub env: Vec<String>,
    /// Variables set to fixed values.
    #[serde(default)]
    pub set_env: BTreeMap<String, String>,
    /// Resource limits (default: the runner's).
    #[serde(default)]
    pub limits: Option<ResourceLimits>,
    /// The output cap per stream in bytes (default: the runner's).
    #[serde(default)]
    pub output_cap: Option<usize>,
    /// Whether the sandboxed command may use the network.
    #[serde(default)]
    pub network: bool,
}

impl Preset {
    /// A preset running `program` with fixed `args`, no model arguments, and defaults elsewhere.
    pub fn new(name: impl Into<String>, program: impl Into<String>, args: Vec<String>) -> Self {
        Self {
            name: name.into(),
            description: None,
            program: program.into(),
            args,
            arg_schema: None,
            cwd: None,
            timeout: None,
            env: Vec::new(),
            set_env: BTreeMap::new(),
            limits: None,
            output_cap: None,
            network: false,
        }
    }
}

mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&format!("{}ms", d.as_millis())),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        s.map(|s| reins::parse_duration(&s).map_err(serde::de::Error::custom)).transpose()
    }
}

/// Parses a duration by the one rule of the core ([`reins::parse_duration`]): `250ms`, `30s`, `5m`, `1h 30m`, or
/// plain seconds; at least 1 ms.
pub use reins::parse_duration;

/// Defaults shared by every preset of a runner.
#[derive(Clone, Debug)]
pub struct CommandConfig {
    /// Timeout for presets that set none.
    pub timeout: Duration,
    /// Drain time after the kill.
    pub drain: Duration,
    /// Output cap per stream, in bytes.
    pub output_cap: usize,
    /// Resource limits for presets that set none.
    pub limits: ResourceLimits,
    /// Variables passed from the parent (secret-looking names are still withheld unless a preset names them).
    pub env_allow: Vec<String>,
    /// The sandbox: required (fail closed), best effort (accept weaker isolation), or off.
    pub sandbox: SandboxMode,
}

impl Default for CommandConfig {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            drain: DEFAULT_DRAIN,
            output_cap: DEFAULT_OUTPUT_CAP,
            limits: ResourceLimits::default(),
            env_allow: DEFAULT_ENV_ALLOW.iter().map(|s| (*s).to_owned()).collect(),
            sandbox: SandboxMode::Required,
        }
    }
}

/// Why a preset set or a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// A preset is invalid (for the operator).
    #[error("preset `{name}`: {message}")]
    BadPreset {
        /// The preset.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The runner's defaults are invalid (for the operator).
    #[error("invalid command configuration: {0}")]
    Config(String),
    /// Two presets share a name.
    #[error("duplicate preset `{0}`")]
    Duplicate(String),
    /// The model named no known preset.
    #[error("unknown command `{0}`; available: {1}")]
    Unknown(String, String),
    /// The model's arguments were refused.
    #[error("arguments refused for `{name}`: {message}")]
    Args {
        /// The preset.
        name: String,
        /// Why.
        message: String,
    },
    /// The sandbox could not be set up, or the host cannot give the isolation asked for.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The process could not be started.
    #[error("cannot start `{name}`: {message}")]
    Spawn {
        /// The preset.
        name: String,
        /// Why (an OS message).
        message: String,
    },
    /// The working directory is not usable.
    #[error("working directory of `{name}`: {message}")]
    Cwd {
        /// The preset.
        name: String,
        /// Why.
        message: String,
    },
}

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Termination {
    /// It exited with this code.
    Exited {
        /// The exit code.
        code: i32,
    },
    /// A signal ended it.
    Signaled {
        /// The signal number.
        signal: i32,
    },
    /// Its timeout passed; the group was killed.
    TimedOut,
    /// The run was cancelled; the group was killed.
    Cancelled,
}

/// What a command produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CommandOutcome {
    /// The preset.
    pub command: String,
    /// How it ended.
    pub termination: Termination,
    /// Standard output (head and tail, lossily decoded).
    pub stdout: String,
    /// Standard error (head and tail, lossily decoded).
    pub stderr: String,
    /// Bytes of standard output dropped from the middle.
    pub stdout_dropped: u64,
    /// Bytes of standard error dropped from the middle.
    pub stderr_dropped: u64,
    /// Wall-clock milliseconds.
    pub duration_ms: u64,
    /// What isolation applied.
    pub sandbox: String,
    /// Protected paths that did not exist when the command started and did after it, each removed again
    /// (or with the reason it could not be); a non-empty list makes `run_command` an error.
    pub protected_created: Vec<String>,
    /// False when the protected-path check could not look at the whole workspace (entry or depth limit).
    pub protected_check_complete: bool,
    /// Where the whole standard output is, relative to the workspace root, when it was over the cap and the
    /// runner spills ([`CommandRunner::with_spill`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_file: Option<String>,
    /// The same for standard error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_file: Option<String>,
}

impl CommandOutcome {
    /// The outcome as text for a model: the status, stdout, stderr (with what was dropped) and the sandbox.
    /// The measured duration stays out of the text (it is in `duration_ms` and the run's `tool_end` event): a
    /// result is then a function of what the command did, so a replayed session compares equal and the
    /// request prefix a provider caches does not change with timing.
    pub fn render(&self) -> String {
        let status = match self.termination {
            Termination::Exited { code } => format!("exit code {code}"),
            Termination::Signaled { signal } => format!("killed by signal {signal}"),
            Termination::TimedOut => "timed out; the process group was killed".to_owned(),
            Termination::Cancelled => "cancelled; the process group was killed".to_owned(),
        };
        let mut out = format!("{status}\n");
        // First, where the model sees it even when the text is cut again: the files holding whole streams.
        for (name, file) in [("stdout", &self.stdout_file), ("stderr", &self.stderr_file)] {
            if let Some(file) = file {
                out.push_str(&format!(
                    "[the whole {name} is in {file}: read it with read_file and start_line/end_line]\n"
                ));
            }
        }
        out.push_str(&format!("[stdout]\n{}", self.stdout));
        if !self.stdout.is_empty() && !self.stdout.ends_with('\n') {
            out.push('\n');
        }
        if self.stdout_dropped > 0 {
            out.push_str(&format!("[{} bytes of stdout dropped]\n", self.stdout_dropped));
        }
        out.push_str(&format!("[stderr]\n{}", self.stderr));
        if !self.stderr.is_empty() && !self.stderr.ends_with('\n') {
            out.push('\n');
        }
        if self.stderr_dropped > 0 {
            out.push_str(&format!("[{} bytes of stderr dropped]\n", self.stderr_dropped));
        }
        if !self.protected_created.is_empty() {
            out.push_str(&format!(
                "[the command created protected paths, which were removed: {}]\n",
                self.protected_created.join(", ")
            ));
        }
        if !self.protected_check_complete {
            out.push_str(
                "[the protected-path check stopped at its entry or depth limit; not every path was checked]\n",
            );
        }
        out.push_str(&format!("[sandbox: {}]", self.sandbox));
        out
    }
}

struct Compiled {
    preset: Preset,
    program: PathBuf,
    cwd: RelPath,
    validator: Option<jsonschema::Validator>,
}

/// Runs presets in a workspace. Cheap to share behind an `Arc`.
pub struct CommandRunner {
    ws: Arc<Workspace>,
    presets: BTreeMap<String, Compiled>,
    config: CommandConfig,
    spill: Option<Arc<crate::spill::Spill>>,
}

fn valid_preset_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn find_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| {
        std::fs::metadata(p)
            .is_ok_and(|m| m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0)
    })
}

/// Kills the process group when dropped (timeout, cancellation, or the future being dropped).
struct GroupGuard {
    pgid: Option<i32>,
}

impl GroupGuard {
    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            kill_group(pgid);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

fn kill_group(pgid: i32) {
    if pgid > 1 {
        // SAFETY: killpg only sends a signal; pgid is the id of a group we created (the child's own pid, set by
        // process_group(0)), and a value > 1 never addresses every process.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
}

/// A private temporary directory, removed when dropped, and a shared lock on it held while it lives.
struct TempDir(PathBuf, #[allow(dead_code)] Option<std::fs::File>);

/// The prefix of a command's temporary directory; the process id and a random part follow.
const TEMP_PREFIX: &str = "reins-cmd-";

impl TempDir {
    /// A new directory under the system temp dir, private (0700), with a random name made afresh until one is
    /// free: a predictable name (the process id and a counter) collided with a directory left by an earlier
    /// process of the same id that was killed (found by CI), and in a shared temp dir anyone could take it first.
    /// The first one of a process removes those that killed processes left ([`sweep_stale`]).
    fn create() -> std::io::Result<Self> {
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| sweep_stale(&std::env::temp_dir()));
        let dir = tempfile::Builder::new()
            .prefix(&format!("{TEMP_PREFIX}{}-", std::process::id()))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?
            .keep();
        // The lock says "in use" to a sweeper in another PID namespace, where our process id means nothing.
        let lock = std::fs::File::open(&dir)
            .ok()
            .filter(|f| rustix::fs::flock(f, rustix::fs::FlockOperation::NonBlockingLockShared).is_ok());
        Ok(Self(dir, lock))
    }
}

/// Removes the command temp dirs in `base` that processes killed before they could remove them left behind
/// (`kill -9` of Reins: its commands die with it, see [`crate::lifeline`], but nothing removes their dirs):
/// each directory named `reins-cmd-PID-…`, owned by this user, whose process `PID` does not exist and whose
/// lock nobody holds. Everything else is left alone; failures are ignored (the directory stays).
fn sweep_stale(base: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    let me = rustix::process::geteuid().as_raw();
    let own = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TEMP_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if pid == own || !meta.is_dir() || std::os::unix::fs::MetadataExt::uid(&meta) != me {
            continue;
        }
        // Only a process that does not exist at all (not one of another user, not an invalid id).
        let gone = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .is_some_and(|p| rustix::process::test_kill_process(p) == Err(rustix::io::Errno::SRCH));
        if !gone {
            continue;
        }
        let Ok(dir) = std::fs::File::open(&path) else { continue };
        if rustix::fs::flock(&dir, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok() {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

use std::os::unix::fs::PermissionsExt;

/// The environment variable that carries a tool call's idempotency key into a command
/// (see [`reins::ToolContext::idempotency_key`]).
pub const IDEMPOTENCY_KEY_ENV: &str = "REINS_IDEMPOTENCY_KEY";

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl CommandRunner {
    /// Builds a runner; every preset is checked here (names, programs, schemas, working directories).
    pub fn new(ws: Arc<Workspace>, presets: Vec<Preset>, config: CommandConfig) -> Result<Self, CommandError> {
        config.limits.validate().map_err(|m| CommandError::Config(format!("[commands] {m}")))?;
        if config.output_cap == 0 {
            return Err(CommandError::Config("[commands] output_cap must be positive".into()));
        }
        let mut map = BTreeMap::new();
        for preset in presets {
            let bad = |m: &str| CommandError::BadPreset { name: preset.name.clone(), message: m.to_owned() };
            if let Some(limits) = &preset.limits {
                limits.validate().map_err(|m| bad(&m))?;
            }
            if !valid_preset_name(&preset.name) {
                return Err(bad("names start with a letter and use letters, digits, `_`, `-`, `.` (at most 64)"));
            }
            if map.contains_key(&preset.name) {
                return Err(CommandError::Duplicate(preset.name));
            }
            if preset.program.is_empty()
                || preset.program.contains('\0')
                || preset.args.iter().any(|a| a.contains('\0'))
            {
                return Err(bad("the program must be non-empty and no word may contain NUL"));
            }
            let program = find_program(&preset.program)
                .ok_or_else(|| bad(&format!("program `{}` was not found in PATH", preset.program)))?;
            let cwd = RelPath::parse(preset.cwd.as_deref().unwrap_or(".")).map_err(|e| bad(&format!("cwd: {e}")))?;
            let validator = match &preset.arg_schema {
                Some(schema) => Some(jsonschema::validator_for(schema).map_err(|e| bad(&format!("arg_schema: {e}")))?),
                None => None,
            };
            if preset.output_cap == Some(0) {
                return Err(bad("output_cap must be positive"));
            }
            for name in preset.env.iter().chain(preset.set_env.keys()) {
                if name.is_empty() || name.contains('=') || name.contains('\0') {
                    return Err(bad(&format!("invalid environment variable name `{name}`")));
                }
            }
            map.insert(preset.name.clone(), Compiled { preset, program, cwd, validator });
        }
        Ok(Self { ws, presets: map, config, spill: None })
    }

    /// The runner, writing a stream over its cap whole to a spill file (see [`crate::spill`]) named in the
    /// outcome; the model is still shown the head and tail. Nothing is written with a read-only `spill`.
    pub fn with_spill(mut self, spill: crate::spill::Spill) -> Self {
        self.spill = (!spill.read_only).then(|| Arc::new(spill));
        self
    }

    /// The workspace.
    pub fn workspace(&self) -> &Arc<Workspace> {
        &self.ws
    }

    /// The presets, by name.
    pub fn presets(&self) -> impl Iterator<Item = &Preset> {
        self.presets.values().map(|c| &c.preset)
    }

    /// The runner's defaults.
    pub fn config(&self) -> &CommandConfig {
        &self.config
    }

    /// The environment a preset's command gets.
    pub fn environment(&self, preset: &Preset) -> Vec<(String, OsString)> {
        let explicit: BTreeSet<&str> = preset.env.iter().map(String::as_str).collect();
        reins::secrets::child_environment(self.config.env_allow.iter().map(String::as_str), &explicit, &preset.set_env)
    }

    /// Runs the preset `name` with the model's `args`.
    pub async fn run(
        &self,
        name: &str,
        args: &[String],
        cancel: &CancellationToken,
    ) -> Result<CommandOutcome, CommandError> {
        self.run_keyed(name, args, cancel, None).await
    }

    /// Runs the preset `name` with the model's `args`; with `idempotency_key` set the command finds it in
    /// its environment as `REINS_IDEMPOTENCY_KEY` (the same every time the same tool call is retried).
    pub async fn run_keyed(
        &self,
        name: &str,
        args: &[String],
        cancel: &CancellationToken,
        idempotency_key: Option<&str>,
    ) -> Result<CommandOutcome, CommandError> {
        let compiled = self.presets.get(name).ok_or_else(|| {
            CommandError::Unknown(name.to_owned(), self.presets.keys().cloned().collect::<Vec<_>>().join(", "))
        })?;
        let preset = &compiled.preset;
        self.check_args(compiled, args)?;
        let timeout = preset.timeout.unwrap_or(self.config.timeout);
        let cap = preset.output_cap.unwrap_or(self.config.output_cap);
        let limits = preset.limits.unwrap_or(self.config.limits).pairs();

        let cwd_fd: OwnedFd = self
            .ws
            .open_dir(&compiled.cwd)
            .map_err(|e| CommandError::Cwd { name: name.to_owned(), message: e.to_string() })?;
        // Protected paths that exist now; any that exist only after the command are its doing, and are removed.
        // If this future is dropped (a tool timeout), the guard does the check when it is dropped, after the
        // group guard (declared later, so dropped first) killed the command.
        let mut protected_guard =
            ProtectedGuard { ws: self.ws.clone(), before: scan_protected(&self.ws).await, armed: false };
        let before = &protected_guard.before;
        let tmp = TempDir::create()
            .map_err(|e| CommandError::Spawn { name: name.to_owned(), message: format!("temporary directory: {e}") })?;

        let prepared = self.prepare_sandbox(preset, &tmp, before)?;
        let summary = prepared.as_ref().map(PreparedSandbox::summary).unwrap_or_else(|| "off".to_owned());

        let mut cmd = self.command(compiled, args, &tmp, idempotency_key);
        // First: the group's watcher, which ends the group when Reins ends (even by `kill -9`), is forked before
        // the closures below run.
        crate::lifeline::supervise(&mut cmd)
            .map_err(|e| CommandError::Spawn { name: name.to_owned(), message: format!("lifeline: {e}") })?;
        enter_in_child(&mut cmd, cwd_fd.as_raw_fd(), limits, prepared);

        let started = Instant::now();
        let mut child =
            cmd.spawn().map_err(|e| CommandError::Spawn { name: name.to_owned(), message: spawn_message(&e) })?;
        drop(cwd_fd);
        protected_guard.armed = true;
        let pgid = child.id().map(|p| p as i32);
        let mut guard = GroupGuard { pgid };
        let out_buf = Arc::new(Mutex::new(Stream::new(cap, self.spill.clone(), "stdout")));
        let err_buf = Arc::new(Mutex::new(Stream::new(cap, self.spill.clone(), "stderr")));
        let mut readers = tokio::task::JoinSet::new();
        if let Some(s) = child.stdout.take() {
            readers.spawn(pump(s, out_buf.clone()));
        }
        if let Some(s) = child.stderr.take() {
            readers.spawn(pump(s, err_buf.clone()));
        }
        let termination = wait_for_end(&mut child, &mut guard, timeout, cancel)
            .await
            .map_err(|e| CommandError::Spawn { name: name.to_owned(), message: format!("wait failed: {e}") })?;
        let drain = tokio::time::timeout(self.config.drain, async { while readers.join_next().await.is_some() {} });
        if drain.await.is_err() {
            readers.abort_all();
        }
        let duration_ms = started.elapsed().as_millis() as u64;
        protected_guard.armed = false;
        let before = &protected_guard.before;
        let after = scan_protected(&self.ws).await;
        let protected_created = remove_created(&self.ws, before, &after).await;
        let (stdout, stdout_dropped, stdout_file) = snapshot(&out_buf);
        let (stderr, stderr_dropped, stderr_file) = snapshot(&err_buf);
        drop(tmp);
        Ok(CommandOutcome {
            command: name.to_owned(),
            termination,
            stdout,
            stderr,
            stdout_dropped,
            stderr_dropped,
            duration_ms,
            sandbox: summary,
            protected_created,
            protected_check_complete: before.complete && after.complete,
            stdout_file,
            stderr_file,
        })
    }

    /// The sandbox a preset's command enters (`None` with the sandbox off), writable at its temporary directory.
    fn prepare_sandbox(
        &self,
        preset: &Preset,
        tmp: &TempDir,
        before: &ProtectedScan,
    ) -> Result<Option<PreparedSandbox>, CommandError> {
        Ok(match self.config.sandbox {
            SandboxMode::Off => None,
            mode => Some(sandbox::prepare_scanned(
                &SandboxRequest { workspace: self.ws.clone(), writable: vec![tmp.0.clone()], network: preset.network },
                mode,
                sandbox::probe(),
                before,
            )?),
        })
    }

    /// The command of a preset with the model's `args`: its own environment (cleared, then the allowed and set
    /// variables, `TMPDIR` and the idempotency key), no standard input, its output piped, in a process group of
    /// its own and killed when dropped.
    fn command(
        &self,
        compiled: &Compiled,
        args: &[String],
        tmp: &TempDir,
        idempotency_key: Option<&str>,
    ) -> tokio::process::Command {
        let preset = &compiled.preset;
        let mut cmd = tokio::process::Command::new(&compiled.program);
        cmd.args(&preset.args)
            .args(args)
            .env_clear()
            .envs(self.environment(preset))
            .env("TMPDIR", &tmp.0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(key) = idempotency_key {
            cmd.env(IDEMPOTENCY_KEY_ENV, key);
        }
        cmd
    }

    fn check_args(&self, compiled: &Compiled, args: &[String]) -> Result<(), CommandError> {
        let name = &compiled.preset.name;
        let refuse = |m: String| CommandError::Args { name: name.clone(), message: m };
        let Some(validator) = &compiled.validator else {
            if args.is_empty() {
                return Ok(());
            }
            return Err(refuse("this command takes no arguments".into()));
        };
        if args.len() > MAX_MODEL_ARGS {
            return Err(refuse(format!("at most {MAX_MODEL_ARGS} arguments")));
        }
        if let Some(a) = args.iter().find(|a| a.contains('\0') || a.len() > MAX_ARG_BYTES) {
            let shown: String = a.chars().take(40).collect();
            return Err(refuse(format!(
                "argument `{}` contains NUL or exceeds {MAX_ARG_BYTES} bytes",
                shown.replace('\0', "\\0")
            )));
        }
        let value = serde_json::Value::from(args.to_vec());
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .take(5)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() { e.to_string() } else { format!("{at}: {e}") }
            })
            .collect();
        if errors.is_empty() { Ok(()) } else { Err(refuse(errors.join("; "))) }
    }
}

/// Checks for protected paths created by a command whose run was dropped before it could check itself.
struct ProtectedGuard {
    ws: Arc<Workspace>,
    before: ProtectedScan,
    armed: bool,
}

impl Drop for ProtectedGuard {
    fn drop(&mut self) {
        if self.armed {
            let after = self.ws.protected_scan(PROTECTED_SCAN_LIMIT);
            for p in after.paths.difference(&self.before.paths) {
                let _ = self.ws.remove_tree(p);
            }
        }
    }
}

/// The workspace's protected entries, scanned off the async threads.
async fn scan_protected(ws: &Arc<Workspace>) -> ProtectedScan {
    let ws = ws.clone();
    tokio::task::spawn_blocking(move || ws.protected_scan(PROTECTED_SCAN_LIMIT))
        .await
        .unwrap_or_else(|_| ProtectedScan { complete: false, ..ProtectedScan::default() })
}

/// Removes the protected entries in `after` that were not in `before`; returns them for the result, each with
/// the reason when it could not be removed.
async fn remove_created(ws: &Arc<Workspace>, before: &ProtectedScan, after: &ProtectedScan) -> Vec<String> {
    let created: Vec<Vec<u8>> = after.paths.difference(&before.paths).cloned().collect();
    if created.is_empty() {
        return Vec::new();
    }
    let ws = ws.clone();
    let shown: Vec<String> = created.iter().map(|p| format!("`{}`", display_name(p))).collect();
    tokio::task::spawn_blocking(move || {
        created
            .iter()
            .map(|p| match ws.remove_tree(p) {
                Ok(()) => format!("`{}`", display_name(p)),
                Err(e) => format!("`{}` (NOT removed: {e})", display_name(p)),
            })
            .collect()
    })
    .await
    .unwrap_or_else(|_| shown.into_iter().map(|s| format!("{s} (NOT removed: the removal stopped)")).collect())
}

/// The reason a command did not start: the system's description of the error (it names no path), so that a
/// resource limit too small to start under reads "Too many open files", not "uncategorized error".
fn spawn_message(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code).to_string(),
        None => e.kind().to_string(),
    }
}
/// Sets what the child does between fork and exec: enter the working directory (`cwd`), set the resource
/// limits, enter the sandbox.
fn enter_in_child(
    cmd: &mut tokio::process::Command,
    raw_cwd: std::os::fd::RawFd,
    limits: Vec<(libc::__rlimit_resource_t, u64)>,
    mut sandbox_state: Option<PreparedSandbox>,
) {
    // SAFETY: the closure runs in the forked child before exec. It only makes async-signal-safe system calls
    // (fchdir, setrlimit, and in the sandbox unshare/open/write/mount/prctl/landlock/seccomp) on data that was
    // fully prepared, allocated and validated in the parent; it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fchdir(raw_cwd) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for &(resource, value) in &limits {
                let lim = libc::rlimit { rlim_cur: value, rlim_max: value };
                if libc::setrlimit(resource, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(sb) = sandbox_state.as_mut() {
                sb.enter()?;
            }
            Ok(())
        });
    }
}

/// Waits for the command's end, its timeout or a cancellation, then kills its whole group (on timeout and
/// cancellation, and any stragglers after a normal exit) and says how it ended. An error: the wait failed.
async fn wait_for_end(
    child: &mut tokio::process::Child,
    guard: &mut GroupGuard,
    timeout: Duration,
    cancel: &CancellationToken,
) -> std::io::Result<Termination> {
    enum End {
        Exit(std::io::Result<std::process::ExitStatus>),
        TimedOut,
        Cancelled,
    }
    let end = tokio::select! {
        s = child.wait() => End::Exit(s),
        _ = tokio::time::sleep(timeout) => End::TimedOut,
        _ = cancel.cancelled() => End::Cancelled,
    };
    guard.kill();
    Ok(match end {
        End::Exit(Ok(status)) => match (status.code(), status.signal()) {
            (Some(code), _) => Termination::Exited { code },
            (None, Some(signal)) => Termination::Signaled { signal },
            (None, None) => Termination::Exited { code: -1 },
        },
        End::Exit(Err(e)) => return Err(e),
        End::TimedOut => {
            let _ = child.wait().await;
            Termination::TimedOut
        }
        End::Cancelled => {
            let _ = child.wait().await;
            Termination::Cancelled
        }
    })
}

/// A stream's capped buffer and, once it goes over its cap with a spill set, the file that gets all of it.
struct Stream {
    buf: CappedBuffer,
    cap: usize,
    spill: Option<Arc<crate::spill::Spill>>,
    name: &'static str,
    file: Option<(std::fs::File, String)>,
    written: u64,
    failed: bool,
}

impl Stream {
    fn new(cap: usize, spill: Option<Arc<crate::spill::Spill>>, name: &'static str) -> Self {
        Self { buf: CappedBuffer::new(cap), cap, spill, name, file: None, written: 0, failed: false }
    }

    fn push(&mut self, bytes: &[u8]) {
        if let Some(spill) = &self.spill
            && self.file.is_none()
            && !self.failed
            && self.buf.total().saturating_add(bytes.len() as u64) > self.cap as u64
        {
            // Nothing was dropped yet: the buffer holds all the stream so far.
            match spill.open_file("run_command", self.name) {
                Ok(f) => {
                    self.file = Some(f);
                    let so_far = self.buf.kept_bytes();
                    self.write(&so_far);
                }
                Err(_) => self.failed = true,
            }
        }
        if self.file.is_some() {
            self.write(bytes);
        }
        self.buf.push(bytes);
    }

    /// Appends to the file, up to the spill's byte bound; a failed write gives the file up.
    fn write(&mut self, bytes: &[u8]) {
        use std::io::Write;
        let limit = self.spill.as_ref().map_or(0, |s| s.max_bytes);
        let n = (bytes.len() as u64).min(limit.saturating_sub(self.written)) as usize;
        if let Some((f, _)) = &mut self.file
            && f.write_all(&bytes[..n]).is_err()
        {
            self.file = None;
            self.failed = true;
        }
        self.written += n as u64;
    }

    /// The file when the stream went over its cap and was written whole (within the spill's byte bound).
    fn whole_file(&self) -> Option<String> {
        let limit = self.spill.as_ref().map_or(0, |s| s.max_bytes);
        let whole = self.written == self.buf.total() && self.written <= limit;
        self.file.as_ref().filter(|_| whole && self.buf.dropped() > 0).map(|(_, p)| p.clone())
    }
}

async fn pump<R: tokio::io::AsyncRead + Unpin>(mut r: R, buf: Arc<Mutex<Stream>>) {
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => match buf.lock() {
                Ok(mut b) => b.push(&chunk[..n]),
                Err(_) => return,
            },
        }
    }
}

fn snapshot(buf: &Arc<Mutex<Stream>>) -> (String, u64, Option<String>) {
    match buf.lock() {
        Ok(b) => (b.buf.render(), b.buf.dropped(), b.whole_file()),
        Err(_) => (String::new(), 0, None),
    }
}

/// Arguments of `run_command`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunArgs {
    command: String,
    #[serde(default)]
    args: Vec<String>,
}

/// The `run_command` tool over a [`CommandRunner`].
pub struct RunCommand {
    runner: Arc<CommandRunner>,
    spec: ToolSpec,
}

impl RunCommand {
    /// The tool; its schema enumerates the runner's presets.
    pub fn new(runner: Arc<CommandRunner>) -> Self {
        let names: Vec<&str> = runner.presets.keys().map(String::as_str).collect();
        let mut description = String::from(
            "Run one of the named commands (presets) in the workspace. Never a shell: pick `command` by name; pass \
             `args` only to commands that accept them. Returns the exit status, stdout and stderr. Commands:",
        );
        for c in runner.presets.values() {
            let p = &c.preset;
            description.push_str(&format!(
                "\n- {}: {}{}",
                p.name,
                p.description.clone().unwrap_or_else(|| format!("runs `{}`", shown_command(p))),
                if c.validator.is_some() { " (accepts args)" } else { " (no args)" }
            ));
        }
        let spec = ToolSpec {
            name: "run_command".into(),
            description,
            input_schema: serde_json::json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "enum": names, "description": "The preset to run."},
                    "args": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_MODEL_ARGS,
                             "description": "Extra arguments, for presets that accept them."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        };
        Self { runner, spec }
    }
}

fn shown_command(p: &Preset) -> String {
    let mut words = vec![p.program.clone()];
    words.extend(p.args.iter().cloned());
    words.join(" ")
}

#[async_trait]
impl Tool for RunCommand {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, arguments: serde_json::Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let args: RunArgs =
            serde_json::from_value(arguments).map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        let key = ctx.idempotency_key();
        match self.runner.run_keyed(&args.command, &args.args, &ctx.cancel, Some(&key)).await {
            Ok(outcome) if !outcome.protected_created.is_empty() => Err(ToolError::Failed(format!(
                "command `{}` created protected paths, which may not be written; they were removed: {}\n{}",
                outcome.command,
                outcome.protected_created.join(", "),
                outcome.render()
            ))),
            Ok(outcome) => match outcome.termination {
                Termination::Cancelled => Err(ToolError::Cancelled),
                Termination::TimedOut => {
                    Err(ToolError::Failed(format!("command `{}` {}", outcome.command, outcome.render())))
                }
                _ => Ok(ToolOutput::Text(outcome.render())),
            },
            Err(e @ (CommandError::Unknown(..) | CommandError::Args { .. })) => {
                Err(ToolError::InvalidArguments(e.to_string()))
            }
            Err(e) => Err(ToolError::Failed(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A command's temp dir is private, never a name that already exists (a dir left by a killed process of
    /// the same id once made every command of a later process fail), and removed when dropped.
    #[test]
    fn temp_dirs_are_private_fresh_and_removed() {
        // What the old naming (the process id and a counter from 0) would have chosen, taken already.
        let squatted: Vec<PathBuf> =
            (0..4).map(|n| std::env::temp_dir().join(format!("reins-cmd-{}-{n}", std::process::id()))).collect();
        for p in &squatted {
            let _ = std::fs::create_dir(p);
        }
        let (a, b) = (TempDir::create().unwrap(), TempDir::create().unwrap());
        assert_ne!(a.0, b.0);
        for d in [&a, &b] {
            let meta = std::fs::symlink_metadata(&d.0).unwrap();
            assert!(meta.is_dir());
            assert_eq!(meta.permissions().mode() & 0o777, 0o700);
            assert!(!squatted.contains(&d.0));
        }
        let path = a.0.clone();
        drop(a);
        assert!(!path.exists());
        for p in &squatted {
            let _ = std::fs::remove_dir(p);
        }
    }

    /// A temp dir left by a process that is gone is swept; one whose process lives, or whose lock someone holds
    /// (a process in another PID namespace), or that is not a directory, stays.
    #[test]
    fn stale_temp_dirs_are_swept_and_live_ones_kept() {
        let base = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = base.path().join(format!("{TEMP_PREFIX}{dead}-stale"));
        let locked = base.path().join(format!("{TEMP_PREFIX}{dead}-locked"));
        let live = base.path().join(format!("{TEMP_PREFIX}1-live"));
        let file = base.path().join(format!("{TEMP_PREFIX}{dead}-file"));
        let other = base.path().join("something-else");
        for d in [&stale, &locked, &live, &other] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("f"), "x").unwrap();
        }
        std::fs::write(&file, "x").unwrap();
        let lock = std::fs::File::open(&locked).unwrap();
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockShared).unwrap();
        sweep_stale(base.path());
        assert!(!stale.exists());
        for kept in [&locked, &live, &file, &other] {
            assert!(kept.exists(), "{}", kept.display());
        }
        drop(lock);
        sweep_stale(base.path());
        assert!(!locked.exists());
    }

    #[test]
    fn secret_names_and_env_patterns() {
        use reins::secrets::env_pattern_matches;
        for name in ["OPENAI_API_KEY", "aws_secret_access_key", "GITHUB_TOKEN", "DB_PASSWORD", "SSH_KEYS"] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["PATH", "HOME", "LANG", "TERM"] {
            assert!(!is_secret_name(name), "{name}");
        }
        assert!(env_pattern_matches("LC_*", "LC_ALL"));
        assert!(!env_pattern_matches("LC_*", "LANG"));
        assert!(env_pattern_matches("PATH", "PATH"));
        assert!(!env_pattern_matches("PATH", "PATHX"));
    }

    #[test]
    fn durations() {
        // The core's rule (tested there); presets read it too.
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        for bad in ["", "0s", "-1s", "soon", "1x", "1e9h", "NaN", "1ns"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn zero_limits_are_refused_by_name() {
        assert!(ResourceLimits::default().validate().is_ok());
        let zero = ResourceLimits { open_files: Some(0), ..ResourceLimits::default() };
        let e = zero.validate().unwrap_err();
        assert!(e.contains("open_files must be at least 1"), "{e}");
    }

    proptest! {
        #[test]
        fn limits_are_valid_exactly_when_none_is_zero(
            values in proptest::collection::vec(proptest::option::of(0u64..4), 5),
        ) {
            let l = ResourceLimits {
                cpu_seconds: values[0],
                address_space_bytes: values[1],
                open_files: values[2],
                processes: values[3],
                file_size_bytes: values[4],
            };
            prop_assert_eq!(l.validate().is_ok(), !values.contains(&Some(0)));
        }

        #[test]
        fn parse_duration_never_panics_and_bounds(s in "\\PC{0,12}") {
            if let Ok(d) = parse_duration(&s) {
                prop_assert!(d >= reins::MIN_DURATION);
            }
        }

        #[test]
        fn durations_round_trip(ms in 1u64..1_000_000) {
            prop_assert_eq!(parse_duration(&format!("{ms}ms")), Ok(Duration::from_millis(ms)));
        }
    }
}
