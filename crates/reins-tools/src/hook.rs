//! Command hooks: a `[[hooks]]` entry of an agent file as a [`reins::Hook`]. The program (an argv, never
//! run through a shell) gets one JSON object on its standard input and answers one on its standard output
//! (see [`reins::hook::parse_answer`]). It runs in its own process group, in the workspace (when there is
//! one), with a scrubbed environment (the safe variables a preset gets, [`reins::secrets::DEFAULT_ENV_ALLOW`]
//! less anything secret-looking: no API key); its output is read up to a cap; on its timeout, the run's
//! cancellation or when the call is dropped the whole group is killed, and when Reins dies (even by
//! `kill -9`) its watcher kills it ([`crate::lifeline`]). A hook that cannot be started, exits
//! with a failure, times out, prints too much or answers garbage is an error: the driver fails closed.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use reins::hook::{
    HookAnswer, HookContext, HookError, HookEvent, HookResult, MAX_HOOK_ANSWER, PostTool, PreTool, StopAnswer,
};
use reins::{Hook, ToolCall};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The default time a hook may take.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of a failing hook's standard error its error message keeps (the end of it).
const STDERR_TAIL: usize = 2048;

/// A hook that runs a program.
#[derive(Clone, Debug)]
pub struct CommandHook {
    event: HookEvent,
    pattern: Option<String>,
    argv: Vec<String>,
    timeout: Duration,
    workspace: Option<PathBuf>,
    name: String,
}

impl CommandHook {
    /// A hook for `event` running `argv` (program first), for the tools `pattern` matches (every tool when
    /// `None`; see [`reins::hook::tool_matches`]), within `timeout`, in `workspace` when given.
    pub fn new(
        event: HookEvent,
        pattern: Option<String>,
        argv: Vec<String>,
        timeout: Duration,
        workspace: Option<PathBuf>,
    ) -> Result<Self, String> {
        let Some(program) = argv.first() else {
            return Err("`command` is empty: give the program and its arguments as a list".into());
        };
        if program.is_empty() {
            return Err("`command` starts with an empty program name".into());
        }
        if timeout.is_zero() {
            return Err("`timeout` must be more than zero".into());
        }
        let name = program.clone();
        Ok(Self { event, pattern, argv, timeout, workspace, name })
    }

    /// Runs the program with `input` on its standard input and parses its answer.
    pub async fn ask(&self, input: &Value, cancel: &CancellationToken) -> Result<HookAnswer, HookError> {
        let program = &self.argv[0];
        let mut cmd = tokio::process::Command::new(program);
        // Only the variables a preset gets by default: a hook is told what it decides on, never Reins' keys.
        let environment = reins::secrets::child_environment(
            reins::secrets::DEFAULT_ENV_ALLOW.iter().copied(),
            &std::collections::BTreeSet::new(),
            &std::collections::BTreeMap::new(),
        );
        cmd.args(&self.argv[1..])
            .env_clear()
            .envs(environment)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(dir) = &self.workspace {
            cmd.current_dir(dir);
        }
        // The group dies with Reins, even after `kill -9` (see `crate::lifeline`).
        crate::lifeline::supervise(&mut cmd).map_err(|e| HookError(format!("cannot start {program:?}: {e}")))?;
        let mut child = cmd.spawn().map_err(|e| HookError(format!("cannot start {program:?}: {e}")))?;
        // Every way out (an answer, a timeout, a cancellation, the future dropped) kills what is left of
        // the group: a hook never outlives its call.
        let _group = Group(child.id().and_then(|id| i32::try_from(id).ok()));
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(HookError(format!("{program:?}: its standard streams could not be opened")));
        };
        let body = input.to_string();
        let work = async {
            let write = async {
                // A hook that does not read its input is not an error: its answer decides.
                let _ = stdin.write_all(body.as_bytes()).await;
                let _ = stdin.write_all(b"\n").await;
                drop(stdin);
            };
            let (_, out, err) = tokio::join!(write, read_capped(stdout, MAX_HOOK_ANSWER), read_tail(stderr));
            let status = child.wait().await;
            (out, err, status)
        };
        let (out, err, status) = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(HookError(format!("{program:?} was stopped: the run was cancelled"))),
            () = tokio::time::sleep(self.timeout) => {
                return Err(HookError(format!(
                    "{program:?} timed out after {}s (killed)",
                    self.timeout.as_secs_f64()
                )));
            }
            r = work => r,
        };
        let stderr_note = |err: &[u8]| {
            let text = String::from_utf8_lossy(err);
            let text = text.trim();
            if text.is_empty() { String::new() } else { format!("; its stderr ends: {text}") }
        };
        let status = status.map_err(|e| HookError(format!("{program:?}: {e}")))?;
        let out = out.map_err(|e| HookError(format!("{program:?}: reading its answer: {e}")))?;
        let err = err.unwrap_or_default();
        if !status.success() {
            return Err(HookError(format!("{program:?} failed ({status}){}", stderr_note(&err))));
        }
        let Some(out) = out else {
            return Err(HookError(format!("{program:?} answered more than {MAX_HOOK_ANSWER} bytes")));
        };
        reins::hook::parse_answer(self.event, &out).map_err(|e| HookError(format!("{program:?}: {}", e.0)))
    }

    fn input(&self, ctx: &HookContext, extra: Value) -> Value {
        let mut v = json!({
            "event": self.event.as_str(),
            "session_id": ctx.session_id,
            "run_id": ctx.run_id,
            "workspace": self.workspace.as_ref().map(|p| p.display().to_string()),
        });
        if let (Some(obj), Value::Object(more)) = (v.as_object_mut(), extra) {
            obj.extend(more);
        }
        v
    }
}

/// Reads all of `r` when it is at most `cap` bytes (`Ok(None)` when it is longer: reading stops there).
async fn read_capped(mut r: impl AsyncRead + Unpin, cap: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Some(buf));
        }
        if buf.len() + n > cap {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reads `r` to its end, keeping its last [`STDERR_TAIL`] bytes.
async fn read_tail(mut r: impl AsyncRead + Unpin) -> std::io::Result<Vec<u8>> {
    let mut tail = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            return Ok(tail);
        }
        tail.extend_from_slice(&chunk[..n]);
        if tail.len() > STDERR_TAIL {
            tail.drain(..tail.len() - STDERR_TAIL);
        }
    }
}

/// Kills the hook's process group when dropped.
struct Group(Option<i32>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = self.0.filter(|p| *p > 1).and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

fn wrong(event: HookEvent) -> HookError {
    HookError(format!("internal: a {} answer for another event", event.as_str()))
}

#[async_trait]
impl Hook for CommandHook {
    fn name(&self) -> &str {
        &self.name
    }

    fn applies(&self, event: HookEvent, tool: Option<&str>) -> bool {
        event == self.event && tool.is_none_or(|t| reins::hook::tool_matches(self.pattern.as_deref(), t))
    }

    async fn pre_tool(
        &self,
        ctx: &HookContext,
        call: &ToolCall,
        cancel: &CancellationToken,
    ) -> Result<PreTool, HookError> {
        let input = self.input(ctx, json!({"call": call}));
        match self.ask(&input, cancel).await? {
            HookAnswer::PreTool(a) => Ok(a),
            _ => Err(wrong(self.event)),
        }
    }

    async fn post_tool(
        &self,
        ctx: &HookContext,
        call: &ToolCall,
        result: &HookResult,
        cancel: &CancellationToken,
    ) -> Result<PostTool, HookError> {
        let input = self.input(ctx, json!({"call": call, "result": result}));
        match self.ask(&input, cancel).await? {
            HookAnswer::PostTool(a) => Ok(a),
            _ => Err(wrong(self.event)),
        }
    }

    async fn stop(&self, ctx: &HookContext, answer: &str, cancel: &CancellationToken) -> Result<StopAnswer, HookError> {
        let input = self.input(ctx, json!({"answer": answer}));
        match self.ask(&input, cancel).await? {
            HookAnswer::Stop(a) => Ok(a),
            _ => Err(wrong(self.event)),
        }
    }
}
