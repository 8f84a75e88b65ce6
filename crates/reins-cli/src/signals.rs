//! SIGINT, SIGTERM and SIGHUP (Ctrl-C, `timeout`, systemd, `docker stop`, CI cancellation, a closed terminal):
//! the first one cancels what the command is doing, so that it stops its commands and MCP servers, removes its
//! temporary directories, writes its outcome and closes its session; a second one exits at once (128 + the
//! signal's number), removing the directories registered with [`remove_on_exit`] first.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::exit::CliError;

/// Directories removed even when a second signal exits at once.
static REMOVE_ON_EXIT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes `dir` (recursively) before a second signal exits at once; [`keep_on_exit`] takes it back.
pub fn remove_on_exit(dir: &Path) {
    if let Ok(mut dirs) = REMOVE_ON_EXIT.lock() {
        dirs.push(dir.to_path_buf());
    }
}

/// Undoes [`remove_on_exit`] (the directory was removed in the ordinary way).
pub fn keep_on_exit(dir: &Path) {
    if let Ok(mut dirs) = REMOVE_ON_EXIT.lock() {
        dirs.retain(|d| d != dir);
    }
}

/// Removes `dir` and everything in it, trying again a few times in case something still being stopped (a
/// copy, a killed command) wrote into it meanwhile.
pub fn remove_dir(dir: &Path) {
    for _ in 0..5 {
        if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The three signals, each with its name and number.
struct Listeners {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Listeners {
    /// Waits for the next signal: its name and number.
    async fn next(&mut self) -> (&'static str, i32) {
        tokio::select! {
            _ = self.int.recv() => ("SIGINT", 2),
            _ = self.term.recv() => ("SIGTERM", 15),
            _ = self.hup.recv() => ("SIGHUP", 1),
        }
    }
}

/// Cancels `cancel` on the first SIGINT, SIGTERM or SIGHUP; a second one exits at once. `what` names what is
/// cancelled ("the run", "the replay"). Call it before starting anything that must be cleaned up.
pub fn cancel_on_signals(cancel: CancellationToken, what: &'static str) -> Result<(), CliError> {
    let listen = |kind: SignalKind| {
        signal(kind).map_err(|e| CliError::Internal(anyhow::anyhow!("cannot listen for signals: {e}")))
    };
    let mut listeners = Listeners {
        int: listen(SignalKind::interrupt())?,
        term: listen(SignalKind::terminate())?,
        hup: listen(SignalKind::hangup())?,
    };
    tokio::spawn(async move {
        let (name, _) = listeners.next().await;
        if name == "SIGINT" {
            errln!("reins: interrupted: cancelling {what} (Ctrl-C again to exit at once)");
        } else {
            errln!("reins: {name} received: cancelling {what} (a second signal exits at once)");
        }
        cancel.cancel();
        let (_, number) = listeners.next().await;
        let dirs = REMOVE_ON_EXIT.lock().map(|d| d.clone()).unwrap_or_default();
        for dir in dirs {
            remove_dir(&dir);
        }
        crate::output::flush_stdout();
        std::process::exit(128 + number);
    });
    Ok(())
}
