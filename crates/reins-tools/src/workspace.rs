//! The workspace: one directory handle, and every path resolved beneath it by the kernel.
//!
//! A [`Workspace`] opens its root once and keeps the handle. Every path a tool receives is relative to that
//! handle and is opened with Linux `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, or,
//! where that call is missing, by a walk that opens one component at a time with `O_NOFOLLOW` relative to the
//! previous directory handle. Nothing is ever "checked by name, then opened by name", so a symlink swapped in
//! between cannot redirect an open. Errors name only the workspace-relative path.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// The most bytes `read_file` loads by default (larger files need a line range).
pub const DEFAULT_MAX_READ_BYTES: u64 = 256 * 1024;
/// Bytes inspected for a NUL to decide that a file is binary.
const BINARY_PROBE: usize = 8 * 1024;
/// The longest relative path accepted, in bytes.
const MAX_PATH_BYTES: usize = 4096;
/// The longest single component, in bytes.
const MAX_NAME_BYTES: usize = 255;
/// Globs that are always protected: every `.git` directory (and so everything beneath it). A configuration's
/// own globs are added to these; nothing removes them.
pub const DEFAULT_PROTECTED: &[&str] = &[".git", "**/.git"];
/// The most directory entries [`Workspace::protected_scan`] looks at by default.
pub const PROTECTED_SCAN_LIMIT: usize = 200_000;

/// Why a workspace operation failed. Messages name only workspace-relative paths.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The root could not be opened (this error is for the operator, not the model).
    #[error("cannot open workspace root {path}: {source}")]
    OpenRoot {
        /// The root as given by the operator.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A protected-path glob is invalid.
    #[error("invalid protected-path glob `{glob}`: {message}")]
    BadGlob {
        /// The glob.
        glob: String,
        /// What is wrong with it.
        message: String,
    },
    /// An absolute path was given.
    #[error("absolute paths are not allowed; give a path relative to the workspace root")]
    Absolute,
    /// A `..` component was given.
    #[error("path `{0}` leaves the workspace: `..` components are not allowed")]
    Escapes(String),
    /// The path is malformed (NUL byte, too long, ...).
    #[error("invalid path `{path}`: {reason}")]
    Invalid {
        /// The path as given (lossy, bounded).
        path: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The operation needs a file, not the workspace root.
    #[error("the workspace root itself cannot be used here; name a file inside it")]
    Root,
    /// Nothing exists at the path.
    #[error("`{0}` does not exist")]
    NotFound(String),
    /// The parent directory of a file to write does not exist.
    #[error("the directory `{0}` does not exist; create it first")]
    ParentMissing(String),
    /// A component of the path is a symbolic link.
    #[error("`{0}` goes through a symbolic link, which the workspace does not follow")]
    Symlink(String),
    /// The kernel refused a resolution that would leave the workspace.
    #[error("`{0}` resolves outside the workspace")]
    Outside(String),
    /// A component that must be a directory is not one.
    #[error("`{0}`: a component of the path is not a directory")]
    NotADirectory(String),
    /// The path names a directory where a file is needed.
    #[error("`{0}` is a directory")]
    IsADirectory(String),
    /// The path names something that is not a regular file (FIFO, device, socket).
    #[error("`{path}` is a {kind}, not a regular file")]
    NotRegular {
        /// The path.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// The path is protected: readable but never writable.
    #[error("`{0}` is a protected path: it can be read but not written")]
    Protected(String),
    /// The file is larger than the read limit.
    #[error("`{path}` is {size} bytes, more than the {limit}-byte read limit; read a line range instead")]
    TooLarge {
        /// The path.
        path: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The file looks binary.
    #[error("`{0}` is a binary file (it contains NUL bytes); it cannot be read as text")]
    Binary(String),
    /// The file starts like an image but is not one Reins can show.
    #[error("`{path}` cannot be shown as an image: {reason}")]
    Image {
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
    /// The file is not valid UTF-8 and the operation needs exact text.
    #[error("`{0}` is not valid UTF-8 text; it cannot be edited")]
    NotUtf8(String),
    /// An edit could not be applied.
    #[error("{0}")]
    Edit(String),
    /// A line range is malformed or out of the file.
    #[error("{0}")]
    Range(String),
    /// Any other operating-system error.
    #[error("cannot {op} `{path}`: {message}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: String,
        /// The OS message (never contains a path).
        message: String,
    },
}

type Result<T> = std::result::Result<T, WorkspaceError>;

/// A validated path relative to the workspace root: no empty, `.`, or `..` components, no NUL, not absolute.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RelPath {
    components: Vec<String>,
}

impl RelPath {
    /// Parses the path of a file: like [`RelPath::parse`], but a path that ends with `/` (or `/.`), and so names
    /// a directory, is refused instead of being read as the file before the slash.
    pub fn parse_file(input: &str) -> Result<Self> {
        let path = Self::parse(input)?;
        if !path.is_root() && (input.ends_with('/') || input.ends_with("/.")) {
            return Err(WorkspaceError::Invalid {
                path: bounded(input),
                reason: "a trailing `/` names a directory; give the file's path without it",
            });
        }
        Ok(path)
    }

    /// Parses a path given by a model or a user.
    pub fn parse(input: &str) -> Result<Self> {
        if input.len() > MAX_PATH_BYTES {
            return Err(WorkspaceError::Invalid { path: bounded(input), reason: "longer than 4096 bytes" });
        }
        if input.contains('\0') {
            return Err(WorkspaceError::Invalid { path: bounded(&input.replace('\0', "\\0")), reason: "contains NUL" });
        }
        if input.starts_with('/') {
            return Err(WorkspaceError::Absolute);
        }
        let mut components = Vec::new();
        for part in input.split('/') {
            match part {
                "" | "." => {}
                ".." => return Err(WorkspaceError::Escapes(bounded(input))),
                p if p.len() > MAX_NAME_BYTES => {
                    return Err(WorkspaceError::Invalid {
                        path: bounded(input),
                        reason: "a component exceeds 255 bytes",
                    });
                }
                p => components.push(p.to_owned()),
            }
        }
        Ok(Self { components })
    }

    /// The workspace root.
    pub fn root() -> Self {
        Self { components: Vec::new() }
    }

    /// True for the workspace root.
    pub fn is_root(&self) -> bool {
        self.components.is_empty()
    }

    /// The components.
    pub fn components(&self) -> &[String] {
        &self.components
    }

    /// This path with one more component.
    pub fn join(&self, name: &str) -> Self {
        let mut components = self.components.clone();
        components.push(name.to_owned());
        Self { components }
    }

    /// The parent and final component, or `None` for the root.
    pub fn split_last(&self) -> Option<(RelPath, &str)> {
        let (last, rest) = self.components.split_last()?;
        Some((RelPath { components: rest.to_vec() }, last.as_str()))
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.components.is_empty() { f.write_str(".") } else { f.write_str(&self.components.join("/")) }
    }
}

fn bounded(s: &str) -> String {
    if s.len() <= 200 {
        return s.to_owned();
    }
    let mut end = 200;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// How paths are resolved beneath the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Resolver {
    /// `openat2` with beneath-resolution where the kernel has it, else the no-follow walk.
    #[default]
    Auto,
    /// Always the no-follow walk with directory handles (for tests and old kernels).
    Walk,
}

/// How a workspace is opened.
#[derive(Clone, Debug)]
pub struct WorkspaceConfig {
    /// Globs (relative to the root, `/`-separated, `*` does not cross `/`) of paths that are readable but never
    /// writable, in addition to [`DEFAULT_PROTECTED`] (which always applies, whatever this list holds). A path
    /// is protected when it or any of its ancestors matches.
    pub protected: Vec<String>,
    /// The most bytes `read_file` loads, and the most text it returns for a line range.
    pub max_read_bytes: u64,
    /// The resolution strategy.
    pub resolver: Resolver,
}

impl Default for WorkspaceConfig {
    fn default() -> Self {
        Self {
            protected: DEFAULT_PROTECTED.iter().map(|s| (*s).to_owned()).collect(),
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
            resolver: Resolver::Auto,
        }
    }
}

/// What a directory entry is, seen without following it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// A FIFO.
    Fifo,
    /// A socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Anything else.
    Unknown,
}

impl EntryKind {
    pub(crate) fn from_file_type(t: FileType) -> Self {
        match t {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Symlink,
            FileType::Fifo => EntryKind::Fifo,
            FileType::Socket => EntryKind::Socket,
            FileType::CharacterDevice => EntryKind::CharDevice,
            FileType::BlockDevice => EntryKind::BlockDevice,
            FileType::Unknown => EntryKind::Unknown,
        }
    }

    /// A short human name.
    pub fn describe(self) -> &'static str {
        match self {
            EntryKind::File => "regular file",
            EntryKind::Dir => "directory",
            EntryKind::Symlink => "symbolic link",
            EntryKind::Fifo => "FIFO",
            EntryKind::Socket => "socket",
            EntryKind::CharDevice => "character device",
            EntryKind::BlockDevice => "block device",
            EntryKind::Unknown => "special file",
        }
    }
}

/// One entry of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The path relative to the listed directory, `/`-separated; bytes that are not UTF-8 or are control
    /// characters appear as `\xNN`.
    pub path: String,
    /// What it is.
    pub kind: EntryKind,
    /// Its size in bytes (for files).
    pub size: u64,
}

/// The result of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    /// Entries, sorted by path bytes.
    pub entries: Vec<DirEntry>,
    /// Entries left out because of the entry limit.
    pub omitted: usize,
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteReport {
    /// Bytes written.
    pub bytes: u64,
    /// True when the file did not exist before.
    pub created: bool,
}

/// A directory that tools are confined to.
#[derive(Debug)]
pub struct Workspace {
    root: OwnedFd,
    root_path: PathBuf,
    protected: GlobSet,
    protected_globs: Vec<String>,
    max_read_bytes: u64,
    openat2: bool,
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn glob(pattern: &str) -> Result<Glob> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| WorkspaceError::BadGlob { glob: pattern.to_owned(), message: e.kind().to_string() })
}

impl Workspace {
    /// Opens `root` (resolved once, symlinks in the root's own path are allowed) with the default configuration.
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(root, WorkspaceConfig::default())
    }

    /// Opens `root` with `config`.
    pub fn open_with(root: impl AsRef<Path>, config: WorkspaceConfig) -> Result<Self> {
        let given = root.as_ref();
        let open_err = |source: std::io::Error| WorkspaceError::OpenRoot { path: given.to_owned(), source };
        let root_path = std::fs::canonicalize(given).map_err(open_err)?;
        let fd = rustix::fs::open(&root_path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| open_err(e.into()))?;
        // The defaults come first and always: a configuration adds globs, it never removes `.git`.
        let mut globs: Vec<String> = DEFAULT_PROTECTED.iter().map(|s| (*s).to_owned()).collect();
        for p in config.protected {
            if !globs.contains(&p) {
                globs.push(p);
            }
        }
        let mut builder = GlobSetBuilder::new();
        for p in &globs {
            builder.add(glob(p)?);
        }
        let protected =
            builder.build().map_err(|e| WorkspaceError::BadGlob { glob: globs.join(", "), message: e.to_string() })?;
        let openat2 = config.resolver == Resolver::Auto
            && rustix::fs::openat2(
                &fd,
                ".",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
                beneath_flags(),
            )
            .is_ok();
        Ok(Self {
            root: fd,
            root_path,
            protected,
            protected_globs: globs,
            max_read_bytes: config.max_read_bytes,
            openat2,
        })
    }

    /// The root's absolute host path, for the operator and the sandbox. Never show it to a model.
    pub fn host_root(&self) -> &Path {
        &self.root_path
    }

    /// The root directory handle.
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// True when paths are resolved with `openat2`; false when with the no-follow walk.
    pub fn uses_openat2(&self) -> bool {
        self.openat2
    }

    /// The protected-path globs: [`DEFAULT_PROTECTED`], then the configured ones.
    pub fn protected_globs(&self) -> &[String] {
        &self.protected_globs
    }

    /// True when `path` or one of its ancestors matches a protected glob.
    pub fn is_protected(&self, path: &RelPath) -> bool {
        let mut prefix = String::new();
        for c in path.components() {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(c);
            if self.protected.is_match(&prefix) {
                return true;
            }
        }
        false
    }

    /// True when the workspace-relative byte path `path` itself matches a protected glob (its ancestors are not
    /// looked at).
    fn matches_protected(&self, path: &[u8]) -> bool {
        use std::os::unix::ffi::OsStrExt;
        self.protected.is_match(Path::new(std::ffi::OsStr::from_bytes(path)))
    }

    /// The protected entries that exist now: the top-most ones (a protected directory is not entered), found by
    /// a walk over directory handles that never follows a symbolic link. The walk looks at no more than
    /// `max_entries` entries and goes no deeper than [`MAX_SCAN_DEPTH`] directories; beyond that the scan says
    /// it is incomplete.
    pub fn protected_scan(&self, max_entries: usize) -> ProtectedScan {
        let mut scan = ProtectedScan { paths: BTreeSet::new(), complete: true, entries: 0 };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.root, ".", flags, Mode::empty()) {
            Ok(root) => self.scan_into(&root, &mut Vec::new(), 0, max_entries, &mut scan),
            Err(_) => scan.complete = false,
        }
        scan
    }

    fn scan_into(&self, dir: &OwnedFd, prefix: &mut Vec<u8>, depth: usize, max: usize, scan: &mut ProtectedScan) {
        let Ok(mut reader) = rustix::fs::Dir::read_from(dir) else {
            scan.complete = false;
            return;
        };
        let mut subdirs: Vec<Vec<u8>> = Vec::new();
        while let Some(entry) = reader.read() {
            let Ok(entry) = entry else {
                scan.complete = false;
                break;
            };
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if scan.entries >= max {
                scan.complete = false;
                return;
            }
            scan.entries += 1;
            let len = prefix.len();
            if len > 0 {
                prefix.push(b'/');
            }
            prefix.extend_from_slice(name);
            if self.matches_protected(prefix) {
                scan.paths.insert(prefix.clone());
            } else {
                let is_dir = match entry.file_type() {
                    FileType::Directory => true,
                    FileType::Unknown => rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory),
                    _ => false,
                };
                if is_dir {
                    subdirs.push(name.to_vec());
                }
            }
            prefix.truncate(len);
        }
        drop(reader);
        for name in subdirs {
            if depth + 1 >= MAX_SCAN_DEPTH {
                scan.complete = false;
                return;
            }
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let Ok(sub) = rustix::fs::openat(dir, name.as_slice(), flags, Mode::empty()) else {
                continue; // removed or replaced meanwhile
            };
            let len = prefix.len();
            if len > 0 {
                prefix.push(b'/');
            }
            prefix.extend_from_slice(&name);
            self.scan_into(&sub, prefix, depth + 1, max, scan);
            prefix.truncate(len);
        }
    }

    /// Removes the entry at the workspace-relative byte path `path` (a directory with everything in it) beneath
    /// the root, never following a symbolic link: a symlink is removed, not its target.
    pub fn remove_tree(&self, path: &[u8]) -> std::result::Result<(), String> {
        let shown = display_name(path);
        let parts: Vec<&[u8]> = path.split(|b| *b == b'/').filter(|p| !p.is_empty()).collect();
        let Some((last, parents)) = parts.split_last() else {
            return Err("the workspace root cannot be removed".into());
        };
        if parts.iter().any(|p| *p == b"." || *p == b"..") {
            return Err(format!("`{shown}` is not a plain relative path"));
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut dir = rustix::fs::openat(&self.root, ".", flags, Mode::empty()).map_err(io_message)?;
        for p in parents {
            dir = rustix::fs::openat(&dir, *p, flags, Mode::empty()).map_err(io_message)?;
        }
        remove_entry(&dir, last, 0).map_err(|e| format!("cannot remove `{shown}`: {e}"))
    }

    /// Opens `path` beneath the root with `flags` (CLOEXEC and NOFOLLOW are always added).
    pub fn open_at(&self, path: &RelPath, flags: OFlags, mode: Mode) -> Result<OwnedFd> {
        let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        if path.is_root() {
            return rustix::fs::openat(&self.root, ".", flags, mode).map_err(|e| self.map_errno(e, path, "open"));
        }
        if self.openat2 {
            let joined = path.to_string();
            let mut tries = 0;
            loop {
                match rustix::fs::openat2(&self.root, joined.as_str(), flags, mode, beneath_flags()) {
                    // The kernel asks for a retry when a rename raced with the resolution.
                    Err(Errno::AGAIN) if tries < 64 => tries += 1,
                    // `O_DIRECTORY` on a symlink says ENOTDIR: redo it as a walk to tell which.
                    Err(Errno::NOTDIR) => break,
                    r => return r.map_err(|e| self.map_errno(e, path, "open")),
                }
            }
        }
        let Some((parent, last)) = path.split_last() else {
            return Err(WorkspaceError::Root);
        };
        let dir = self.walk_dir(&parent, path)?;
        rustix::fs::openat(&dir, last, flags, mode).map_err(|e| self.classify(&dir, last, e, path))
    }

    /// With `O_DIRECTORY | O_NOFOLLOW` a symlink gives `ENOTDIR`: tell the two apart.
    fn classify(&self, dir: &OwnedFd, name: &str, e: Errno, full: &RelPath) -> WorkspaceError {
        if e == Errno::NOTDIR
            && let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            && FileType::from_raw_mode(st.st_mode) == FileType::Symlink
        {
            return WorkspaceError::Symlink(full.to_string());
        }
        self.map_errno(e, full, "open")
    }

    /// Opens every directory of `dir` one component at a time, never following a symlink.
    fn walk_dir(&self, dir: &RelPath, full: &RelPath) -> Result<OwnedFd> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut cur =
            rustix::fs::openat(&self.root, ".", flags, Mode::empty()).map_err(|e| self.map_errno(e, full, "open"))?;
        for c in dir.components() {
            cur = match rustix::fs::openat(&cur, c.as_str(), flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(e) => return Err(self.classify(&cur, c, e, full)),
            };
        }
        Ok(cur)
    }

    /// Opens the directory at `path`.
    pub fn open_dir(&self, path: &RelPath) -> Result<OwnedFd> {
        self.open_at(path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
    }

    fn map_errno(&self, e: Errno, path: &RelPath, op: &'static str) -> WorkspaceError {
        let p = path.to_string();
        match e {
            Errno::NOENT => WorkspaceError::NotFound(p),
            Errno::LOOP => WorkspaceError::Symlink(p),
            Errno::XDEV => WorkspaceError::Outside(p),
            Errno::NOTDIR => WorkspaceError::NotADirectory(p),
            Errno::ISDIR => WorkspaceError::IsADirectory(p),
            other => WorkspaceError::Io { op, path: p, message: io_message(other) },
        }
    }

    /// Opens `path` for reading as a regular file, refusing FIFOs, devices, sockets and directories.
    pub(crate) fn open_regular(&self, path: &RelPath) -> Result<(File, u64)> {
        if path.is_root() {
            return Err(WorkspaceError::Root);
        }
        // O_NONBLOCK: opening a FIFO must not block waiting for a writer.
        let fd = self.open_at(path, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY, Mode::empty())?;
        let st = rustix::fs::fstat(&fd).map_err(|e| self.map_errno(e, path, "inspect"))?;
        let kind = EntryKind::from_file_type(FileType::from_raw_mode(st.st_mode));
        match kind {
            EntryKind::File => {}
            EntryKind::Dir => return Err(WorkspaceError::IsADirectory(path.to_string())),
            other => return Err(WorkspaceError::NotRegular { path: path.to_string(), kind: other.describe() }),
        }
        // Back to blocking reads for a regular file.
        rustix::fs::fcntl_setfl(&fd, OFlags::empty()).map_err(|e| self.map_errno(e, path, "open"))?;
        Ok((File::from(fd), st.st_size.max(0) as u64))
    }

    /// Reads an image file (PNG, JPEG, GIF or WebP, recognized by its first bytes) of at most
    /// [`reins::MAX_IMAGE_BYTES`]; `Ok(None)` when the file is not an image (read it as text).
    pub fn read_image(&self, path: &RelPath) -> Result<Option<reins::Image>> {
        let (file, size) = self.open_regular(path)?;
        let p = path.to_string();
        let io_err = |e: std::io::Error| WorkspaceError::Io { op: "read", path: p.clone(), message: io_kind(&e) };
        let mut head = Vec::with_capacity(16);
        let mut file = file;
        (&mut file).take(16).read_to_end(&mut head).map_err(io_err)?;
        if reins::ImageFormat::sniff(&head).is_none() {
            return Ok(None);
        }
        let limit = reins::MAX_IMAGE_BYTES as u64;
        if size > limit {
            return Err(WorkspaceError::TooLarge { path: p, size, limit });
        }
        let mut buf = head;
        file.take(limit + 1 - buf.len() as u64).read_to_end(&mut buf).map_err(io_err)?;
        reins::Image::from_bytes(buf).map(Some).map_err(|e| WorkspaceError::Image { path: p, reason: e.to_string() })
    }

    /// Reads a text file; with `lines = Some((first, last))` (1-based, inclusive) only those lines.
    pub fn read_text(&self, path: &RelPath, lines: Option<(u64, Option<u64>)>) -> Result<String> {
        let (file, size) = self.open_regular(path)?;
        let limit = self.max_read_bytes;
        let p = path.to_string();
        let io_err = |e: std::io::Error| WorkspaceError::Io { op: "read", path: p.clone(), message: io_kind(&e) };
        match lines {
            None => {
                if size > limit {
                    return Err(WorkspaceError::TooLarge { path: p, size, limit });
                }
                let mut buf = Vec::with_capacity(size as usize);
                // Bounded even if the file grows between fstat and read.
                file.take(limit + 1).read_to_end(&mut buf).map_err(io_err)?;
                if buf.len() as u64 > limit {
                    return Err(WorkspaceError::TooLarge { path: p, size: buf.len() as u64, limit });
                }
                if buf.contains(&0) {
                    return Err(WorkspaceError::Binary(p));
                }
                Ok(String::from_utf8_lossy(&buf).into_owned())
            }
            Some((first, last)) => {
                if first == 0 || last.is_some_and(|l| l < first) {
                    return Err(WorkspaceError::Range(format!(
                        "invalid line range for `{p}`: lines are numbered from 1 and the end must not precede the start"
                    )));
                }
                read_range(file, first, last, limit, &p).map_err(|e| match e {
                    RangeError::Io(e) => io_err(e),
                    RangeError::Binary => WorkspaceError::Binary(p.clone()),
                    RangeError::Past(n) => {
                        WorkspaceError::Range(format!("`{p}` has {n} lines; line {first} does not exist"))
                    }
                })
            }
        }
    }

    /// Writes `content` to `path` atomically: a temporary file in the same directory handle, then a rename.
    /// The parent must exist. An existing hard link is replaced, never written through.
    pub fn write(&self, path: &RelPath, content: &[u8]) -> Result<WriteReport> {
        let (parent, name) = path.split_last().ok_or(WorkspaceError::Root)?;
        if self.is_protected(path) {
            return Err(WorkspaceError::Protected(path.to_string()));
        }
        let dir = self.open_dir(&parent).map_err(|e| match e {
            WorkspaceError::NotFound(_) => WorkspaceError::ParentMissing(parent.to_string()),
            other => other,
        })?;
        let mode = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => match EntryKind::from_file_type(FileType::from_raw_mode(st.st_mode)) {
                EntryKind::File => Some(Mode::from_raw_mode(st.st_mode) & Mode::from_raw_mode(0o7777)),
                EntryKind::Dir => return Err(WorkspaceError::IsADirectory(path.to_string())),
                EntryKind::Symlink => return Err(WorkspaceError::Symlink(path.to_string())),
                other => return Err(WorkspaceError::NotRegular { path: path.to_string(), kind: other.describe() }),
            },
            Err(Errno::NOENT) => None,
            Err(e) => return Err(self.map_errno(e, path, "inspect")),
        };
        self.replace_in(&dir, name, path, content, mode)?;
        Ok(WriteReport { bytes: content.len() as u64, created: mode.is_none() })
    }

    fn replace_in(&self, dir: &OwnedFd, name: &str, path: &RelPath, content: &[u8], mode: Option<Mode>) -> Result<()> {
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = format!(".reins-tmp-{}-{n}", std::process::id());
        let fd = rustix::fs::openat(
            dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| self.map_errno(e, path, "write"))?;
        let cleanup = |e: WorkspaceError| {
            let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
            e
        };
        if let Some(m) = mode {
            rustix::fs::fchmod(&fd, m).map_err(|e| cleanup(self.map_errno(e, path, "write")))?;
        }
        let mut file = File::from(fd);
        file.write_all(content)
            .map_err(|e| cleanup(WorkspaceError::Io { op: "write", path: path.to_string(), message: io_kind(&e) }))?;
        drop(file);
        rustix::fs::renameat(dir, tmp.as_str(), dir, name).map_err(|e| cleanup(self.map_errno(e, path, "write")))?;
        Ok(())
    }

    /// Replaces `old` by `new` in `path`, which must contain it exactly `expected` times; written atomically.
    pub fn edit(&self, path: &RelPath, old: &str, new: &str, expected: usize) -> Result<usize> {
        if old.is_empty() {
            return Err(WorkspaceError::Edit("old_text must not be empty".into()));
        }
        if expected == 0 {
            return Err(WorkspaceError::Edit("expected_count must be at least 1".into()));
        }
        if self.is_protected(path) {
            return Err(WorkspaceError::Protected(path.to_string()));
        }
        let (file, size) = self.open_regular(path)?;
        let p = path.to_string();
        if size > self.max_read_bytes {
            return Err(WorkspaceError::TooLarge { path: p, size, limit: self.max_read_bytes });
        }
        let mut buf = Vec::new();
        file.take(self.max_read_bytes + 1).read_to_end(&mut buf).map_err(|e| WorkspaceError::Io {
            op: "read",
            path: p.clone(),
            message: io_kind(&e),
        })?;
        if buf.len() as u64 > self.max_read_bytes {
            return Err(WorkspaceError::TooLarge { path: p, size: buf.len() as u64, limit: self.max_read_bytes });
        }
        if buf.contains(&0) {
            return Err(WorkspaceError::Binary(p));
        }
        let text = String::from_utf8(buf).map_err(|_| WorkspaceError::NotUtf8(p.clone()))?;
        let count = text.matches(old).count();
        if count == 0 {
            return Err(WorkspaceError::Edit(format!("old_text was not found in `{p}`")));
        }
        if count != expected {
            return Err(WorkspaceError::Edit(format!(
                "old_text occurs {count} times in `{p}`, expected {expected}; include more surrounding text to make \
                 it unique, or set expected_count"
            )));
        }
        let updated = text.replace(old, new);
        self.write(path, updated.as_bytes())?;
        Ok(count)
    }

    /// Lists `path` to `depth` levels (1 = its direct entries), sorted, at most `max_entries` entries.
    /// Symlinks are reported, never followed; `.git` directories are listed but not descended into.
    pub fn list(&self, path: &RelPath, depth: usize, max_entries: usize) -> Result<Listing> {
        let dir = self.open_dir(path)?;
        let mut out = Listing { entries: Vec::new(), omitted: 0 };
        self.list_into(dir, path, "", depth.max(1), max_entries, &mut out)?;
        Ok(out)
    }

    fn list_into(
        &self,
        dir: OwnedFd,
        path: &RelPath,
        prefix: &str,
        depth: usize,
        max: usize,
        out: &mut Listing,
    ) -> Result<()> {
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut reader = rustix::fs::Dir::read_from(&dir).map_err(|e| self.map_errno(e, path, "list"))?;
        while let Some(entry) = reader.read() {
            let entry = entry.map_err(|e| self.map_errno(e, path, "list"))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        }
        names.sort();
        for name in names {
            let Ok(st) = rustix::fs::statat(&dir, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW) else {
                continue; // removed meanwhile
            };
            let kind = EntryKind::from_file_type(FileType::from_raw_mode(st.st_mode));
            let shown = format!("{prefix}{}", display_name(&name));
            if out.entries.len() >= max {
                out.omitted += 1;
            } else {
                out.entries.push(DirEntry { path: shown.clone(), kind, size: st.st_size.max(0) as u64 });
            }
            if kind == EntryKind::Dir && depth > 1 && name != b".git" {
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                if let Ok(sub) = rustix::fs::openat(&dir, name.as_slice(), flags, Mode::empty()) {
                    let sub_path = match std::str::from_utf8(&name) {
                        Ok(n) => path.join(n),
                        Err(_) => path.clone(),
                    };
                    self.list_into(sub, &sub_path, &format!("{shown}/"), depth - 1, max, out)?;
                }
            }
        }
        Ok(())
    }
}

/// The deepest directory nesting that [`Workspace::protected_scan`] and [`Workspace::remove_tree`] enter (each
/// level holds one open descriptor).
pub const MAX_SCAN_DEPTH: usize = 256;

/// What [`Workspace::protected_scan`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProtectedScan {
    /// The top-most protected entries, workspace-relative, `/`-separated, as bytes.
    pub paths: BTreeSet<Vec<u8>>,
    /// False when the walk stopped early (entry or depth limit, an unreadable directory).
    pub complete: bool,
    /// Directory entries looked at.
    pub entries: usize,
}

/// Removes `name` in `dir`; a directory is emptied first (to [`MAX_SCAN_DEPTH`] levels).
fn remove_entry(dir: &OwnedFd, name: &[u8], depth: usize) -> std::result::Result<(), String> {
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(io_message)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(io_message);
    }
    if depth >= MAX_SCAN_DEPTH {
        return Err(format!("nested deeper than {MAX_SCAN_DEPTH} directories"));
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let sub = rustix::fs::openat(dir, name, flags, Mode::empty()).map_err(io_message)?;
    let mut names: Vec<Vec<u8>> = Vec::new();
    {
        let mut reader = rustix::fs::Dir::read_from(&sub).map_err(io_message)?;
        while let Some(entry) = reader.read() {
            let entry = entry.map_err(io_message)?;
            let n = entry.file_name().to_bytes();
            if n != b"." && n != b".." {
                names.push(n.to_vec());
            }
        }
    }
    for n in names {
        remove_entry(&sub, &n, depth + 1)?;
    }
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(io_message)
}

fn beneath_flags() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// An OS error's message without any path.
pub(crate) fn io_message(e: Errno) -> String {
    std::io::Error::from(e).kind().to_string()
}

fn io_kind(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => io_message(Errno::from_raw_os_error(code)),
        None => e.kind().to_string(),
    }
}

/// A file name for display: UTF-8 kept, other bytes and control characters as `\xNN`.
pub fn display_name(name: &[u8]) -> String {
    let mut out = String::new();
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() {
                out.push_str(&format!("\\x{:02x}", c as u32));
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

enum RangeError {
    Io(std::io::Error),
    Binary,
    Past(u64),
}

fn read_range(
    file: File,
    first: u64,
    last: Option<u64>,
    limit: u64,
    path: &str,
) -> std::result::Result<String, RangeError> {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::with_capacity(64 * 1024, file);
    let mut out: Vec<u8> = Vec::new();
    let mut line_no = 0u64;
    let mut probed = 0usize;
    let mut truncated = false;
    let mut line = Vec::new();
    let head = reader.fill_buf().map_err(RangeError::Io)?;
    if head[..head.len().min(BINARY_PROBE)].contains(&0) {
        return Err(RangeError::Binary);
    }
    loop {
        line.clear();
        // Bound one line's buffering: a line longer than the limit is cut (its rest skipped).
        let n = read_bounded_line(&mut reader, &mut line, limit as usize).map_err(RangeError::Io)?;
        if n == 0 {
            break;
        }
        if probed < BINARY_PROBE {
            let take = line.len().min(BINARY_PROBE - probed);
            if line[..take].contains(&0) {
                return Err(RangeError::Binary);
            }
            probed += take;
        }
        line_no += 1;
        if line_no < first {
            continue;
        }
        if last.is_some_and(|l| line_no > l) {
            break;
        }
        if line.contains(&0) {
            return Err(RangeError::Binary);
        }
        if (out.len() + line.len()) as u64 > limit {
            truncated = true;
            break;
        }
        out.extend_from_slice(&line);
    }
    let _ = reader.fill_buf();
    if line_no < first {
        return Err(RangeError::Past(line_no));
    }
    let mut text = String::from_utf8_lossy(&out).into_owned();
    if truncated {
        text.push_str(&format!("\n[... output of `{path}` cut at the {limit}-byte limit; request fewer lines]\n"));
    }
    Ok(text)
}

/// Reads one line (with its `\n`) into `buf`, keeping at most `cap` bytes of it; returns bytes consumed.
fn read_bounded_line<R: std::io::BufRead>(r: &mut R, buf: &mut Vec<u8>, cap: usize) -> std::io::Result<usize> {
    let mut consumed = 0;
    loop {
        let avail = r.fill_buf()?;
        if avail.is_empty() {
            return Ok(consumed);
        }
        let (chunk, done) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (&avail[..=i], true),
            None => (avail, false),
        };
        let room = cap.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let len = chunk.len();
        r.consume(len);
        consumed += len;
        if done {
            return Ok(consumed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parse_rejects_escapes_and_absolute() {
        assert!(matches!(RelPath::parse("/etc/passwd"), Err(WorkspaceError::Absolute)));
        assert!(matches!(RelPath::parse("a/../../b"), Err(WorkspaceError::Escapes(_))));
        assert!(matches!(RelPath::parse(".."), Err(WorkspaceError::Escapes(_))));
        assert!(matches!(RelPath::parse("a\0b"), Err(WorkspaceError::Invalid { .. })));
        assert_eq!(RelPath::parse("./a//b/.").map(|p| p.to_string()).ok(), Some("a/b".to_owned()));
        assert!(RelPath::parse("").map(|p| p.is_root()).unwrap_or(false));
    }

    #[test]
    fn display_escapes_invalid_bytes() {
        assert_eq!(display_name(b"a\xffb\n"), "a\\xffb\\x0a");
        assert_eq!(display_name("é".as_bytes()), "é");
    }

    proptest! {
        #[test]
        fn parsed_paths_never_escape(s in "[a-z./\\\\\0]{0,40}") {
            if let Ok(p) = RelPath::parse(&s) {
                for c in p.components() {
                    prop_assert!(c != ".." && c != "." && !c.is_empty() && !c.contains('/') && !c.contains('\0'));
                }
                prop_assert!(!s.starts_with('/'));
            }
        }
    }
}
