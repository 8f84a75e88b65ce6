//! The child process of a stdio server: started in its own process group, its stderr kept as a bounded
//! tail for error messages, and its whole group killed when it is shut down or dropped — or, by the group's
//! watcher ([`reins_tools::lifeline`]), when Reins dies, even by `kill -9`.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How many bytes of a server's stderr are kept for error messages.
pub const STDERR_TAIL_BYTES: usize = 4096;

/// A running stdio server process. Dropping it kills its process group.
#[derive(Debug)]
pub struct ServerProcess {
    child: Mutex<Option<Child>>,
    pgid: i32,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    finished: std::sync::atomic::AtomicBool,
}

/// Starts `command args...` in a new process group with piped stdio, with a scrubbed environment: the
/// safe variables of Reins' own ([`reins::secrets::child_environment`] over
/// [`reins::secrets::DEFAULT_ENV_ALLOW`], as a command preset gets them: no API key, nothing that looks like
/// a secret) plus `env`. Returns the process and its stdout and stdin, for the transport.
pub fn spawn(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&PathBuf>,
) -> std::io::Result<(ServerProcess, ChildStdout, ChildStdin)> {
    let mut cmd = Command::new(command);
    let environment = reins::secrets::child_environment(
        reins::secrets::DEFAULT_ENV_ALLOW.iter().copied(),
        &std::collections::BTreeSet::new(),
        env,
    );
    cmd.args(args)
        .env_clear()
        .envs(environment)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    // The group dies with Reins, even after `kill -9` (its watcher kills it).
    reins_tools::lifeline::supervise(&mut cmd)?;
    let mut child = cmd.spawn()?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err(std::io::Error::other("the child's stdio was not piped"));
    };
    let stderr = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL_BYTES)));
    if let Some(mut pipe) = child.stderr.take() {
        let tail = Arc::clone(&stderr);
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                if let Ok(mut t) = tail.lock() {
                    t.extend(&buf[..n]);
                    let excess = t.len().saturating_sub(STDERR_TAIL_BYTES);
                    t.drain(..excess);
                }
            }
        });
    }
    let finished = std::sync::atomic::AtomicBool::new(false);
    Ok((ServerProcess { child: Mutex::new(Some(child)), pgid: pid, stderr, finished }, stdout, stdin))
}

impl ServerProcess {
    /// The process id, which is also its process group id.
    pub fn pid(&self) -> i32 {
        self.pgid
    }

    /// The last [`STDERR_TAIL_BYTES`] bytes the server wrote to stderr, trimmed, lossily decoded.
    pub fn stderr_tail(&self) -> String {
        let bytes: Vec<u8> = self.stderr.lock().map(|t| t.iter().copied().collect()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).trim().to_owned()
    }

    /// How the process ended, if it did: `"exited with status 1"`, `"killed by signal 9"`.
    pub fn exit_status(&self) -> Option<String> {
        let mut guard = self.child.lock().ok()?;
        let child = guard.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(describe(status)),
            _ => None,
        }
    }

    /// A short account of the process for an error message: how it ended and the tail of its stderr.
    pub fn diagnosis(&self) -> String {
        let mut parts = Vec::new();
        if let Some(status) = self.exit_status() {
            parts.push(format!("the server process {status}"));
        }
        let tail = self.stderr_tail();
        if !tail.is_empty() {
            let tail: String = tail.chars().rev().take(600).collect::<Vec<_>>().into_iter().rev().collect();
            parts.push(format!("its stderr ends with: {tail}"));
        }
        parts.join("; ")
    }

    /// Waits up to `grace` for the process to exit by itself (its stdin was closed), then kills its whole
    /// process group.
    pub async fn shutdown(&self, grace: Duration) {
        let child = self.child.lock().ok().and_then(|mut c| c.take());
        if let Some(mut child) = child {
            let _ = tokio::time::timeout(grace, child.wait()).await;
            self.kill_group();
            let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
        } else {
            self.kill_group();
        }
        self.finished.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Sends SIGKILL to the process group (the server and everything it started).
    pub fn kill_group(&self) {
        if self.pgid > 0 {
            // SAFETY: killpg only sends a signal; the group id is the pid of a child we spawned with
            // `process_group(0)`, so it names that child's own group and no other process's.
            unsafe {
                libc::killpg(self.pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if !self.finished.load(std::sync::atomic::Ordering::SeqCst) {
            self.kill_group();
        }
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "ended".to_owned(),
    }
}
