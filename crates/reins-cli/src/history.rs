//! `reins chat`'s history file: `$XDG_STATE_HOME/reins/chat_history` (else `~/.local/state/reins/chat_history`).
//! The directory is made private (0700) when missing; the file is opened beneath it by its one fixed name, never
//! through a symlink, and must be a regular file; it is created 0600 (it holds what was typed). One entry a line,
//! each a JSON string (so a multi-line message is one line). At most [`MAX_BYTES`] are read (the newest part of a
//! larger file), the newest [`MAX_ENTRIES`] kept, and a file grown past twice that is rewritten with them (a new
//! file renamed over the old one). Anything that goes wrong is a warning: the chat keeps its history in memory.

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use reins_cli::history_lines::{encode, parse};
use rustix::fs::{Mode, OFlags};

/// The most entries kept (and loaded into the line editor).
pub const MAX_ENTRIES: usize = 1000;
/// The most bytes of the file read.
pub const MAX_BYTES: u64 = 1 << 20;
/// A longer entry stays in memory but is not written to the file.
pub const MAX_ENTRY_BYTES: usize = 64 * 1024;

const NAME: &str = "chat_history";
const TEMP: &str = "chat_history.new";

/// The directory of the history file, from the environment.
pub fn dir() -> Option<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    match nonempty("XDG_STATE_HOME") {
        Some(state) => Some(state.join("reins")),
        None => nonempty("HOME").map(|home| home.join(".local/state/reins")),
    }
}

/// The history file, open for appending.
#[derive(Debug)]
pub struct History {
    file: std::fs::File,
    path: PathBuf,
}

impl History {
    /// Opens (or creates) the history file in `dir` and reads its entries, oldest first.
    pub fn open(dir: &Path) -> Result<(History, Vec<String>), String> {
        let path = dir.join(NAME);
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{}: {what}: {e}", path.display());
        if !dir.exists() {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| fail("creating", &e))?;
        }
        let dirfd = rustix::fs::open(dir, OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = rustix::fs::openat(&dirfd, NAME, flags, Mode::from_raw_mode(0o600))
            .map_err(|e| fail("opening (a symlink is refused)", &e))?;
        let mut file = std::fs::File::from(fd);
        let meta = file.metadata().map_err(|e| fail("reading", &e))?;
        if !meta.file_type().is_file() {
            return Err(fail("opening", &"not a regular file"));
        }
        let size = meta.len();
        if size > MAX_BYTES {
            file.seek(SeekFrom::Start(size - MAX_BYTES)).map_err(|e| fail("reading", &e))?;
        }
        let mut bytes = Vec::new();
        (&mut file).take(MAX_BYTES).read_to_end(&mut bytes).map_err(|e| fail("reading", &e))?;
        let lines = bytes.iter().filter(|&&b| b == b'\n').count();
        let mut entries = parse(&bytes, size > MAX_BYTES);
        if entries.len() > MAX_ENTRIES {
            entries.drain(..entries.len() - MAX_ENTRIES);
        }
        if size > MAX_BYTES || lines > 2 * MAX_ENTRIES {
            file = rewrite(&dirfd, &entries).map_err(|e| fail("rewriting", &e))?;
        } else {
            file.seek(SeekFrom::End(0)).map_err(|e| fail("reading", &e))?;
        }
        Ok((History { file, path }, entries))
    }

    /// Appends an entry (a warning if that fails; too long an entry is not written).
    pub fn append(&mut self, entry: &str) {
        if entry.len() > MAX_ENTRY_BYTES {
            return;
        }
        let line = format!("{}\n", encode(entry));
        if let Err(e) = self.file.write_all(line.as_bytes()) {
            errln!("reins: warning: {}: {e}", self.path.display());
        }
    }
}

/// Writes `entries` to a new file beside the old one and renames it over it; the new file, to append to.
fn rewrite(dirfd: &rustix::fd::OwnedFd, entries: &[String]) -> std::io::Result<std::fs::File> {
    let _ = rustix::fs::unlinkat(dirfd, TEMP, rustix::fs::AtFlags::empty());
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::APPEND;
    let mut file = std::fs::File::from(rustix::fs::openat(dirfd, TEMP, flags, Mode::from_raw_mode(0o600))?);
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    let mut text = String::new();
    for e in entries {
        text.push_str(&encode(e));
        text.push('\n');
    }
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    rustix::fs::renameat(dirfd, TEMP, dirfd, NAME)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_opened_beneath_its_directory_private_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("state/reins");
        let (mut h, entries) = History::open(&d).unwrap();
        assert!(entries.is_empty());
        h.append("one");
        h.append("two\nlines");
        h.append(&"x".repeat(MAX_ENTRY_BYTES + 1));
        drop(h);
        let meta = std::fs::metadata(d.join(NAME)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o700);
        let (_, entries) = History::open(&d).unwrap();
        assert_eq!(entries, ["one", "two\nlines"]);
        // Too many entries: the newest are kept and the file is rewritten with them.
        let mut text = String::new();
        for i in 0..(2 * MAX_ENTRIES + 5) {
            text.push_str(&format!("{}\n", encode(&format!("e{i}"))));
        }
        text.push_str("not json\n");
        std::fs::write(d.join(NAME), &text).unwrap();
        let (_, entries) = History::open(&d).unwrap();
        assert_eq!(entries.len(), MAX_ENTRIES);
        assert_eq!(entries.last().map(String::as_str), Some(&*format!("e{}", 2 * MAX_ENTRIES + 4)));
        assert_eq!(std::fs::read_to_string(d.join(NAME)).unwrap().lines().count(), MAX_ENTRIES);
        // A symlink or a FIFO in its place is refused.
        std::fs::remove_file(d.join(NAME)).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), d.join(NAME)).unwrap();
        assert!(History::open(&d).is_err());
        assert!(!dir.path().join("elsewhere").exists());
        std::fs::remove_file(d.join(NAME)).unwrap();
        let made = std::process::Command::new("mkfifo").arg(d.join(NAME)).status().unwrap();
        assert!(made.success());
        assert!(History::open(&d).unwrap_err().contains("not a regular file"));
    }
}
