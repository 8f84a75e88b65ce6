//! Which process runs a session: a run holds an exclusive lock on the file `<store>.running/<session id>` for as
//! long as it records, and removes the file when it ends. A session whose index says `running` but whose lock file is
//! there and held by nobody lost its process (killed, crashed, a machine that went down): it is `interrupted`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

/// The status `reins sessions list` shows for a session whose run's process is gone.
pub const INTERRUPTED_STATUS: &str = "interrupted";

/// Whether the process that runs a session is still there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// A live process holds the session (its pid, as it wrote it).
    Running(Option<u32>),
    /// The process that ran it is gone: the run never ended.
    Interrupted,
    /// Nothing says (no lock file: a run recorded by an older Reins, or one just starting).
    Unknown,
}

/// The directory of a store's lock files.
fn dir(store: &Path) -> PathBuf {
    let mut name = store.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".running");
    store.with_file_name(name)
}

fn lock_path(store: &Path, session_id: &str) -> Option<PathBuf> {
    // Session ids are UUIDs; anything else gets no lock file.
    (!session_id.is_empty() && session_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        .then(|| dir(store).join(session_id))
}

/// The lock a running session's process holds; dropping it (the run's log closed) removes the file.
#[derive(Debug)]
pub(crate) struct OwnerLock {
    path: PathBuf,
    _file: File,
}

impl OwnerLock {
    /// Takes the lock of `session_id`, or `None` when it cannot be had (another live process holds it, or the
    /// directory cannot be written): recording goes on either way.
    pub(crate) fn take(store: &Path, session_id: &str) -> Option<OwnerLock> {
        let path = lock_path(store, session_id)?;
        crate::store::private_dir(path.parent()?).ok()?;
        let mut file = {
            use std::os::unix::fs::OpenOptionsExt as _;
            OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(&path).ok()?
        };
        flock(&file, FlockOperation::NonBlockingLockExclusive).ok()?;
        // Only a file left by a process that died holds a pid to clear: truncating a new, empty one would make
        // ext4 write it back to disk when it is closed (its delayed-allocation heuristic), once per run.
        if !file.metadata().is_ok_and(|m| m.len() == 0) {
            let _ = file.set_len(0);
        }
        let _ = write!(file, "{}", std::process::id());
        Some(OwnerLock { path, _file: file })
    }
}

impl Drop for OwnerLock {
    fn drop(&mut self) {
        // Removed while still locked: a reader never sees the file unlocked before it goes.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether the process of the running session `session_id` of the store at `store` is still there.
pub fn liveness(store: &Path, session_id: &str) -> Liveness {
    let Some(path) = lock_path(store, session_id) else { return Liveness::Unknown };
    let Ok(file) = File::open(&path) else { return Liveness::Unknown };
    match flock(&file, FlockOperation::NonBlockingLockShared) {
        // Nobody holds it: its process is gone (the lock went with it).
        Ok(()) => Liveness::Interrupted,
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let pid = std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse().ok());
            Liveness::Running(pid)
        }
        Err(_) => Liveness::Unknown,
    }
}
