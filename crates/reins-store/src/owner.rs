//! Which process runs a session: a run holds an exclusive lock on the file `<store>.running/<session id>` for as
//! long as it records, and removes the file when it ends. A session whose index says `running` but whose lock file is
//! there and held by nobody lost its process (killed, crashed, a machine that went down): it is `interrupted`.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

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
///
/// A session's lock file is a hard link to one locked file of its process (`.owner-<pid>-<n>` in the same
/// directory, made new, locked once and kept while any of its sessions runs): linking and unlinking a name
/// allocates no inode and writes no file, where a file of its own per session cost an inode, a lock and a write
/// each run. The lock is the inode's, so a reader that opens the session's name meets the process's lock, and it
/// dies with the process all the same. A name left by a process that died is taken over: removed while we hold
/// its lock, then linked anew (never written through: other sessions of the dead process may share its inode).
#[derive(Debug)]
pub(crate) struct OwnerLock {
    path: PathBuf,
    _held: Held,
}

#[derive(Debug)]
enum Held {
    /// A link to the process's shared locked file.
    Linked(#[allow(dead_code)] Arc<ProcessLock>),
    /// A file of its own (no process file could be made, or the file system has no hard links).
    Own(#[allow(dead_code)] File),
}

/// One process's locked file in a store's lock directory; the last session that links it removes it.
#[derive(Debug)]
struct ProcessLock {
    path: PathBuf,
    _file: File,
}

impl Drop for ProcessLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The process files alive, by lock directory, and the directories already swept of dead processes' files.
#[derive(Default)]
struct ProcessLocks {
    alive: HashMap<PathBuf, Weak<ProcessLock>>,
    swept: HashSet<PathBuf>,
}

/// The prefix of a process file's name.
const PROCESS_FILE: &str = ".owner-";

/// The number in the name of the process's next process file.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// The process's locked file of the lock directory `dir`, made (and the directory with it) when none is alive.
fn process_lock(dir: &Path) -> Option<Arc<ProcessLock>> {
    static LOCKS: Mutex<Option<ProcessLocks>> = Mutex::new(None);
    let mut locks = LOCKS.lock().unwrap_or_else(PoisonError::into_inner);
    let locks = locks.get_or_insert_with(Default::default);
    if let Some(held) = locks.alive.get(dir).and_then(Weak::upgrade) {
        return Some(held);
    }
    crate::store::private_dir(dir).ok()?;
    if locks.swept.insert(dir.to_path_buf()) {
        sweep(dir);
    }
    // A new name each time (the file a lock being dropped on another thread removes is its own), never an
    // existing file: a dead process of the same pid may have left one that its interrupted sessions still link.
    let (path, file) = (0..16).find_map(|_| {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("{PROCESS_FILE}{}-{n}", std::process::id()));
        new_locked(&path).map(|file| (path, file))
    })?;
    let held = Arc::new(ProcessLock { path, _file: file });
    locks.alive.retain(|_, w| w.strong_count() > 0);
    locks.alive.insert(dir.to_path_buf(), Arc::downgrade(&held));
    Some(held)
}

/// Removes the process files that dead processes left in `dir` (once per process and directory): those whose
/// lock is free and that hold a pid (a file just made is empty until its maker has locked it). Their interrupted
/// sessions' names stay: they are links of their own to the same file.
fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if !entry.file_name().to_str().is_some_and(|n| n.starts_with(PROCESS_FILE)) {
            continue;
        }
        let _ = remove_dead(&entry.path(), |file| file.metadata().is_ok_and(|m| m.len() > 0));
    }
}

/// Makes the file `path` (0600; `None` when it exists), locks it exclusively and writes our pid in it.
fn new_locked(path: &Path) -> Option<File> {
    let mut file = {
        use std::os::unix::fs::OpenOptionsExt as _;
        OpenOptions::new().create_new(true).write(true).mode(0o600).open(path).ok()?
    };
    if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        let _ = std::fs::remove_file(path);
        return None;
    }
    let _ = write!(file, "{}", std::process::id());
    Some(file)
}

/// Removes the name `path` left by a process that died, holding its lock meanwhile (so nobody takes it in
/// between), provided `also` says yes of the locked file; `None` when a live process holds it, `also` says no
/// or it cannot be removed.
fn remove_dead(path: &Path, also: impl FnOnce(&File) -> bool) -> Option<()> {
    let old = File::open(path).ok()?;
    flock(&old, FlockOperation::NonBlockingLockExclusive).ok()?;
    also(&old).then_some(())?;
    std::fs::remove_file(path).ok()
}

impl OwnerLock {
    /// Takes the lock of `session_id`, or `None` when it cannot be had (another live process holds it, or the
    /// directory cannot be written): recording goes on either way.
    pub(crate) fn take(store: &Path, session_id: &str) -> Option<OwnerLock> {
        let path = lock_path(store, session_id)?;
        let dir = path.parent()?;
        let mut shared = process_lock(dir);
        if shared.is_none() {
            crate::store::private_dir(dir).ok()?;
        }
        // A second try after a dead process's name was removed; two processes taking the same name over both
        // find it gone, and only the first link (or file) made wins.
        for first in [true, false] {
            if let Some(s) = &shared {
                match std::fs::hard_link(&s.path, &path) {
                    Ok(()) => return Some(OwnerLock { path, _held: Held::Linked(s.clone()) }),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    // No hard links here: a file of its own.
                    Err(_) => shared = None,
                }
            }
            if shared.is_none()
                && let Some(file) = new_locked(&path)
            {
                return Some(OwnerLock { path, _held: Held::Own(file) });
            }
            if !first {
                return None;
            }
            remove_dead(&path, |_| true)?;
        }
        None
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt as _;

    /// A fresh directory of this test's own under the system's temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("reins-owner-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn sessions_of_one_process_link_one_locked_file_that_goes_with_the_last() {
        let tmp = scratch("link");
        let store = tmp.join("sessions.db");
        let a = OwnerLock::take(&store, "aaaa-1").unwrap();
        let b = OwnerLock::take(&store, "bbbb-2").unwrap();
        let (pa, pb) = (lock_path(&store, "aaaa-1").unwrap(), lock_path(&store, "bbbb-2").unwrap());
        // One inode for both names: no file of its own per session.
        assert_eq!(std::fs::metadata(&pa).unwrap().ino(), std::fs::metadata(&pb).unwrap().ino());
        let me = Liveness::Running(Some(std::process::id()));
        assert_eq!(liveness(&store, "aaaa-1"), me);
        assert_eq!(liveness(&store, "bbbb-2"), me);
        drop(a);
        assert_eq!(liveness(&store, "aaaa-1"), Liveness::Unknown);
        assert_eq!(liveness(&store, "bbbb-2"), me);
        drop(b);
        assert_eq!(liveness(&store, "bbbb-2"), Liveness::Unknown);
        // The process's file went with its last session.
        assert_eq!(std::fs::read_dir(dir(&store)).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn a_name_left_by_a_dead_process_is_taken_over() {
        let tmp = scratch("dead");
        let store = tmp.join("sessions.db");
        let path = lock_path(&store, "cccc-3").unwrap();
        crate::store::private_dir(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "999999999").unwrap();
        assert_eq!(liveness(&store, "cccc-3"), Liveness::Interrupted);
        let c = OwnerLock::take(&store, "cccc-3").unwrap();
        assert_eq!(liveness(&store, "cccc-3"), Liveness::Running(Some(std::process::id())));
        drop(c);
        assert_eq!(liveness(&store, "cccc-3"), Liveness::Unknown);
        let _ = std::fs::remove_dir_all(&tmp);
    }

    /// The names in `store`'s lock directory that are process files.
    fn process_files(store: &Path) -> Vec<String> {
        let names = std::fs::read_dir(dir(store)).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap());
        names.filter(|n| n.starts_with(PROCESS_FILE)).collect()
    }

    #[test]
    fn a_dead_process_s_files_are_swept_and_its_sessions_stay_interrupted() {
        let tmp = scratch("sweep");
        let store = tmp.join("sessions.db");
        let locks = dir(&store);
        crate::store::private_dir(&locks).unwrap();
        // What a killed process of our very pid left: its process files (one linked by an interrupted session)
        // under every name we could pick next.
        let me = std::process::id();
        let next = NEXT.load(Ordering::Relaxed);
        for n in 0..next + 64 {
            std::fs::write(locks.join(format!("{PROCESS_FILE}{me}-{n}")), me.to_string()).unwrap();
        }
        let stale = lock_path(&store, "dddd-4").unwrap();
        std::fs::hard_link(locks.join(format!("{PROCESS_FILE}{me}-0")), &stale).unwrap();
        assert_eq!(liveness(&store, "dddd-4"), Liveness::Interrupted);
        let e = OwnerLock::take(&store, "eeee-5").unwrap();
        assert_eq!(liveness(&store, "eeee-5"), Liveness::Running(Some(me)));
        // The dead files went (ours is the one left); the session it ran is still interrupted, not ours.
        assert_eq!(process_files(&store).len(), 1);
        assert_eq!(liveness(&store, "dddd-4"), Liveness::Interrupted);
        drop(e);
        assert!(process_files(&store).is_empty());
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn taking_over_one_session_of_a_dead_process_leaves_its_others_interrupted() {
        let tmp = scratch("takeover");
        let store = tmp.join("sessions.db");
        let locks = dir(&store);
        crate::store::private_dir(&locks).unwrap();
        let dead = locks.join(format!("{PROCESS_FILE}999999999-0"));
        std::fs::write(&dead, "999999999").unwrap();
        for id in ["ffff-6", "gggg-7"] {
            std::fs::hard_link(&dead, lock_path(&store, id).unwrap()).unwrap();
        }
        let f = OwnerLock::take(&store, "ffff-6").unwrap();
        assert_eq!(liveness(&store, "ffff-6"), Liveness::Running(Some(std::process::id())));
        assert_eq!(liveness(&store, "gggg-7"), Liveness::Interrupted);
        // A live process's session cannot be taken.
        assert!(OwnerLock::take(&store, "ffff-6").is_none());
        drop(f);
        assert_eq!(liveness(&store, "ffff-6"), Liveness::Unknown);
        assert_eq!(liveness(&store, "gggg-7"), Liveness::Interrupted);
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
