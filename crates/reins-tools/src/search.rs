//! `search`: a regular expression over the files under a workspace path, honouring `.gitignore`, `.ignore` and
//! `.git/info/exclude`, with the crates behind ripgrep (`ignore`'s gitignore matcher, `grep-regex` +
//! `grep-searcher` for matching).
//!
//! The walk is our own, over directory handles: the start is opened beneath the workspace root (a symlink is
//! refused, as by `read_file` and `list_dir`), and every directory, searched file and ignore file below it is
//! opened relative to its parent's handle with `O_NOFOLLOW`, never by a path name. A symbolic link is never
//! followed, not even a `.gitignore` one; a FIFO, device or socket is never read (it is opened non-blocking and
//! refused after `fstat`); every read is size-bounded. So a hostile repository cannot make `search` read outside
//! the workspace, block, or allocate without bound, and a directory swapped for a symlink during the walk is
//! skipped, never entered.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use tokio_util::sync::CancellationToken;

use crate::workspace::{RelPath, Workspace, WorkspaceError, display_name};

/// The default and the largest number of matches returned.
pub const DEFAULT_MAX_MATCHES: usize = 100;
/// The upper bound on `max_matches`.
pub const MAX_MATCHES_LIMIT: usize = 1000;
/// The longest matched line shown, in characters.
const MAX_LINE_CHARS: usize = 300;
/// The largest file searched.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// The largest ignore file honoured (a larger one is not read).
pub const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;
/// The deepest directory nesting searched.
const MAX_DEPTH: usize = 256;

/// Why a search failed.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The pattern is not a valid regular expression.
    #[error("invalid regular expression: {0}")]
    Pattern(String),
    /// The path is not usable.
    #[error(transparent)]
    Path(#[from] WorkspaceError),
    /// A glob filter is not valid.
    #[error("invalid glob `{glob}`: {message}")]
    Glob {
        /// The glob.
        glob: String,
        /// What is wrong.
        message: String,
    },
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// What to search for.
#[derive(Clone, Debug)]
pub struct SearchQuery {
    /// The regular expression (Rust `regex` syntax).
    pub pattern: String,
    /// Where to search (a directory or a file).
    pub path: RelPath,
    /// Only files whose workspace-relative path matches this glob.
    pub glob: Option<String>,
    /// Case-insensitive matching.
    pub case_insensitive: bool,
    /// At most this many matches.
    pub max_matches: usize,
}

/// One matching line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchMatch {
    /// The file, workspace-relative.
    pub path: String,
    /// The 1-based line number.
    pub line: u64,
    /// The line (lossily decoded, cut to 300 characters, without its newline).
    pub text: String,
}

/// The result of a search.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchReport {
    /// The matches, in walk order (sorted by path).
    pub matches: Vec<SearchMatch>,
    /// True when the search stopped at `max_matches`.
    pub truncated: bool,
    /// Files searched.
    pub files_searched: usize,
    /// Files skipped (binary, unreadable, non-UTF-8 names, too large).
    pub files_skipped: usize,
}

impl SearchReport {
    /// The report as text: `path:line:text` lines and a summary.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for m in &self.matches {
            out.push_str(&format!("{}:{}:{}\n", m.path, m.line, m.text));
        }
        if self.matches.is_empty() {
            out.push_str("no matches\n");
        }
        out.push_str(&format!(
            "[{} matches in {} files searched{}{}]",
            self.matches.len(),
            self.files_searched,
            if self.files_skipped > 0 { format!(", {} skipped", self.files_skipped) } else { String::new() },
            if self.truncated { "; stopped at the match limit" } else { "" }
        ));
        out
    }
}

/// Runs `query` over `ws`.
pub fn search(ws: &Workspace, query: &SearchQuery, cancel: &CancellationToken) -> Result<SearchReport, SearchError> {
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(query.case_insensitive)
        .build(&query.pattern)
        .map_err(|e| SearchError::Pattern(e.to_string()))?;
    let filter = match &query.glob {
        Some(g) => Some(
            globset::GlobBuilder::new(g)
                .literal_separator(false)
                .build()
                .map_err(|e| SearchError::Glob { glob: g.clone(), message: e.kind().to_string() })?
                .compile_matcher(),
        ),
        None => None,
    };
    // Opened beneath the root, never through a symlink (also not a final one): a symlinked `path` is refused.
    // O_NONBLOCK: a FIFO as the start must not block the open.
    let start = ws.open_at(&query.path, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY, Mode::empty())?;
    let st = rustix::fs::fstat(&start).map_err(|e| WorkspaceError::Io {
        op: "inspect",
        path: query.path.to_string(),
        message: crate::workspace::io_message(e),
    })?;
    let max = query.max_matches.clamp(1, MAX_MATCHES_LIMIT);
    let mut walk = Walk {
        matcher,
        filter,
        searcher: SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(0))
            .line_number(true)
            .heap_limit(Some(8 * 1024 * 1024))
            .build(),
        max,
        report: SearchReport::default(),
        cancel,
        levels: Vec::new(),
        exclude: None,
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {
            let rel = query.path.to_string();
            if walk.filter.as_ref().is_none_or(|f| f.is_match(&rel)) {
                walk.search_fd(start, &st, rel);
            }
        }
        FileType::Directory => {
            walk.load_parents(ws, &query.path);
            let mut rel = if query.path.is_root() { String::new() } else { query.path.to_string() };
            walk.walk_dir(&start, &mut rel, 0)?;
        }
        other => {
            return Err(WorkspaceError::NotRegular {
                path: query.path.to_string(),
                kind: crate::workspace::EntryKind::from_file_type(other).describe(),
            }
            .into());
        }
    }
    Ok(walk.report)
}

/// The ignore files of one directory level.
struct Level {
    /// Its `.ignore` (higher precedence than any `.gitignore`).
    ignore: Option<Gitignore>,
    /// Its `.gitignore`.
    gitignore: Option<Gitignore>,
}

struct Walk<'a> {
    matcher: grep_regex::RegexMatcher,
    filter: Option<globset::GlobMatcher>,
    searcher: grep_searcher::Searcher,
    max: usize,
    report: SearchReport,
    cancel: &'a CancellationToken,
    /// From the workspace root down to the directory being walked.
    levels: Vec<Level>,
    /// The root's `.git/info/exclude`.
    exclude: Option<Gitignore>,
}

/// Opens `name` in `dir` without following a symlink, non-blocking, and returns it with its status.
fn open_entry(dir: &OwnedFd, name: &[u8]) -> Option<(OwnedFd, rustix::fs::Stat)> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::empty()).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    Some((fd, st))
}

/// `fd` (opened non-blocking by [`open_entry`], with its status `st`) as a file for blocking reads, when it is a
/// regular file of at most `max` bytes; anything else is `None`. Read it through `take`: it may grow.
fn readable_regular(fd: OwnedFd, st: &rustix::fs::Stat, max: u64) -> Option<std::fs::File> {
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_size as u64 > max {
        return None;
    }
    // Back to blocking reads for a regular file.
    rustix::fs::fcntl_setfl(&fd, OFlags::empty()).ok()?;
    Some(std::fs::File::from(fd))
}

/// The virtual absolute path under which ignore matchers see workspace paths (never a host path).
fn virtual_path(rel: &str) -> PathBuf {
    Path::new("/").join(rel)
}

/// Reads `name` in `dir` as an ignore file: a regular file (never through a symlink) of at most
/// [`MAX_IGNORE_FILE_BYTES`], parsed with `dir_rel` (workspace-relative) as its root. Anything else is `None`.
fn read_ignore(dir: &OwnedFd, name: &str, dir_rel: &str) -> Option<Gitignore> {
    let (fd, st) = open_entry(dir, name.as_bytes())?;
    let file = readable_regular(fd, &st, MAX_IGNORE_FILE_BYTES)?;
    let mut buf = Vec::new();
    file.take(MAX_IGNORE_FILE_BYTES + 1).read_to_end(&mut buf).ok()?;
    if buf.len() as u64 > MAX_IGNORE_FILE_BYTES {
        return None;
    }
    let mut builder = GitignoreBuilder::new(virtual_path(dir_rel));
    for line in String::from_utf8_lossy(&buf).lines() {
        // A line that is not a valid glob is left out, as git does.
        let _ = builder.add_line(None, line);
    }
    builder.build().ok().filter(|g| !g.is_empty())
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

impl Walk<'_> {
    /// Loads the ignore files of the root and of every directory above `start` (exclusive of `start`, whose own
    /// files the walk loads), and the root's `.git/info/exclude`.
    fn load_parents(&mut self, ws: &Workspace, start: &RelPath) {
        let Ok(mut dir) = rustix::fs::openat(ws.root_fd(), ".", dir_flags(), Mode::empty()) else { return };
        if let Ok(git) = rustix::fs::openat(&dir, ".git", dir_flags(), Mode::empty())
            && let Ok(info) = rustix::fs::openat(&git, "info", dir_flags(), Mode::empty())
        {
            self.exclude = read_ignore(&info, "exclude", "");
        }
        let mut rel = String::new();
        for c in start.components() {
            self.levels.push(Level {
                ignore: read_ignore(&dir, ".ignore", &rel),
                gitignore: read_ignore(&dir, ".gitignore", &rel),
            });
            let Ok(next) = rustix::fs::openat(&dir, c.as_str(), dir_flags(), Mode::empty()) else { return };
            dir = next;
            if !rel.is_empty() {
                rel.push('/');
            }
            rel.push_str(c);
        }
    }

    /// True when the ignore files say to leave `rel` out: `.ignore` files first, then `.gitignore` files, then
    /// the root's exclude file; the deepest directory's verdict wins within each kind.
    fn ignored(&self, rel: &str, is_dir: bool) -> bool {
        let path = virtual_path(rel);
        let verdict = |m: Match<&ignore::gitignore::Glob>| match m {
            Match::None => None,
            Match::Ignore(_) => Some(true),
            Match::Whitelist(_) => Some(false),
        };
        let ignores = self.levels.iter().rev().filter_map(|l| l.ignore.as_ref());
        let gitignores = self.levels.iter().rev().filter_map(|l| l.gitignore.as_ref());
        ignores
            .chain(gitignores)
            .chain(self.exclude.as_ref())
            .find_map(|g| verdict(g.matched(&path, is_dir)))
            .unwrap_or(false)
    }

    fn walk_dir(&mut self, dir: &OwnedFd, rel: &mut String, depth: usize) -> Result<(), SearchError> {
        match self.walk_inner(dir, rel, depth) {
            Ok(()) | Err(WalkStop::Full) => Ok(()),
            Err(WalkStop::Cancelled) => Err(SearchError::Cancelled),
        }
    }

    fn walk_inner(&mut self, dir: &OwnedFd, rel: &mut String, depth: usize) -> Result<(), WalkStop> {
        self.levels
            .push(Level { ignore: read_ignore(dir, ".ignore", rel), gitignore: read_ignore(dir, ".gitignore", rel) });
        let result = self.walk_entries(dir, rel, depth);
        self.levels.pop();
        result
    }

    fn walk_entries(&mut self, dir: &OwnedFd, rel: &mut String, depth: usize) -> Result<(), WalkStop> {
        let mut names: Vec<Vec<u8>> = Vec::new();
        match rustix::fs::Dir::read_from(dir) {
            Ok(mut reader) => {
                while let Some(entry) = reader.read() {
                    let Ok(entry) = entry else {
                        self.report.files_skipped += 1;
                        break;
                    };
                    let name = entry.file_name().to_bytes();
                    if name != b"." && name != b".." && name != b".git" {
                        names.push(name.to_vec());
                    }
                }
            }
            Err(_) => {
                self.report.files_skipped += 1;
                return Ok(());
            }
        }
        names.sort();
        for name in names {
            if self.cancel.is_cancelled() {
                return Err(WalkStop::Cancelled);
            }
            let Ok(st) = rustix::fs::statat(dir, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW) else {
                continue; // removed meanwhile
            };
            let kind = FileType::from_raw_mode(st.st_mode);
            if kind != FileType::RegularFile && kind != FileType::Directory {
                continue; // symlinks are never followed; special files are never read
            }
            let Ok(name_str) = std::str::from_utf8(&name) else {
                self.report.files_skipped += 1;
                continue;
            };
            let len = rel.len();
            if !rel.is_empty() {
                rel.push('/');
            }
            rel.push_str(name_str);
            let is_dir = kind == FileType::Directory;
            let step = if self.ignored(rel, is_dir) {
                Ok(())
            } else if is_dir {
                self.enter(dir, &name, rel, depth)
            } else {
                self.search_entry(dir, &name, rel)
            };
            rel.truncate(len);
            step?;
        }
        Ok(())
    }

    fn enter(&mut self, dir: &OwnedFd, name: &[u8], rel: &mut String, depth: usize) -> Result<(), WalkStop> {
        if depth + 1 >= MAX_DEPTH {
            self.report.files_skipped += 1;
            return Ok(());
        }
        // O_NOFOLLOW | O_DIRECTORY: a directory swapped for a symlink since the stat is refused, not entered.
        match rustix::fs::openat(dir, name, dir_flags(), Mode::empty()) {
            Ok(sub) => self.walk_inner(&sub, rel, depth + 1),
            Err(_) => {
                self.report.files_skipped += 1;
                Ok(())
            }
        }
    }

    fn search_entry(&mut self, dir: &OwnedFd, name: &[u8], rel: &str) -> Result<(), WalkStop> {
        if let Some(f) = &self.filter
            && !f.is_match(rel)
        {
            return Ok(());
        }
        match open_entry(dir, name) {
            Some((fd, st)) => {
                if self.search_fd(fd, &st, display_name(rel.as_bytes())) {
                    Err(WalkStop::Full)
                } else {
                    Ok(())
                }
            }
            None => {
                self.report.files_skipped += 1;
                Ok(())
            }
        }
    }

    /// Searches one file (skipped unless it is a regular file of at most [`MAX_FILE_BYTES`]); true when the match
    /// limit was reached.
    fn search_fd(&mut self, fd: OwnedFd, st: &rustix::fs::Stat, shown: String) -> bool {
        let Some(file) = readable_regular(fd, st, MAX_FILE_BYTES) else {
            self.report.files_skipped += 1;
            return false;
        };
        let mut found: Vec<SearchMatch> = Vec::new();
        let room = self.max - self.report.matches.len();
        let result = self.searcher.search_reader(
            &self.matcher,
            file.take(MAX_FILE_BYTES),
            Lossy(|line, text| {
                let text = text.trim_end_matches(['\n', '\r']);
                let shown_text: String = text.chars().take(MAX_LINE_CHARS).collect();
                found.push(SearchMatch { path: shown.clone(), line, text: shown_text });
                Ok(found.len() < room + 1)
            }),
        );
        if result.is_err() {
            self.report.files_skipped += 1;
            return false;
        }
        self.report.files_searched += 1;
        if found.len() > room {
            found.truncate(room);
            self.report.matches.extend(found);
            self.report.truncated = true;
            return true;
        }
        self.report.matches.extend(found);
        false
    }
}

/// Why a walk stopped early.
enum WalkStop {
    /// The match limit was reached.
    Full,
    /// The run was cancelled.
    Cancelled,
}
