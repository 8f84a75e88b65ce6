//! `search`: a regular expression over the files under a workspace path, honouring `.gitignore`, with the crates
//! behind ripgrep (`ignore` for the walk, `grep-regex` + `grep-searcher` for matching).
//!
//! The walk runs over `/proc/self/fd/N` (the workspace's own directory handle) where `/proc` is mounted, so it
//! follows the handle rather than the root's name. Every file is opened for searching through the workspace's
//! beneath-resolution, so a directory swapped for a symlink during the walk yields an error for that file, never
//! its content.

use std::path::PathBuf;

use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use rustix::fs::{FileType, Mode, OFlags};
use tokio_util::sync::CancellationToken;

use crate::workspace::{RelPath, Workspace, WorkspaceError};

/// The default and the largest number of matches returned.
pub const DEFAULT_MAX_MATCHES: usize = 100;
/// The upper bound on `max_matches`.
pub const MAX_MATCHES_LIMIT: usize = 1000;
/// The longest matched line shown, in characters.
const MAX_LINE_CHARS: usize = 300;
/// The largest file searched.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

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
    // Confirms the start is inside the workspace and reached without symlinks.
    let start = ws.open_at(&query.path, OFlags::PATH, Mode::empty())?;
    let start_is_file = rustix::fs::fstat(&start)
        .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile)
        .unwrap_or(false);
    drop(start);

    let proc_root = PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&ws.root_fd())));
    let base = if proc_root.is_dir() { proc_root } else { ws.host_root().to_path_buf() };
    let mut walk_root = base.clone();
    for c in query.path.components() {
        walk_root.push(c);
    }
    let max = query.max_matches.clamp(1, MAX_MATCHES_LIMIT);
    let mut report = SearchReport::default();
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .heap_limit(Some(8 * 1024 * 1024))
        .build();

    let walker = ignore::WalkBuilder::new(&walk_root)
        .follow_links(false)
        .hidden(false)
        .parents(false)
        .require_git(false)
        .git_global(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|e| e.file_name() != ".git")
        .build();
    for entry in walker {
        if cancel.is_cancelled() {
            return Err(SearchError::Cancelled);
        }
        let Ok(entry) = entry else {
            report.files_skipped += 1;
            continue;
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let rel = match entry.path().strip_prefix(&base).ok().and_then(|p| p.to_str()) {
            Some(r) => r.to_owned(),
            None => {
                report.files_skipped += 1;
                continue;
            }
        };
        let rel = if start_is_file && rel.is_empty() { query.path.to_string() } else { rel };
        if let Some(f) = &filter
            && !f.is_match(&rel)
        {
            continue;
        }
        let Ok(path) = RelPath::parse(&rel) else {
            report.files_skipped += 1;
            continue;
        };
        let Ok(fd) = ws.open_at(&path, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY, Mode::empty()) else {
            report.files_skipped += 1;
            continue;
        };
        let regular = rustix::fs::fstat(&fd)
            .map(|st| {
                FileType::from_raw_mode(st.st_mode) == FileType::RegularFile && (st.st_size as u64) <= MAX_FILE_BYTES
            })
            .unwrap_or(false);
        if !regular {
            report.files_skipped += 1;
            continue;
        }
        let file = std::fs::File::from(fd);
        let mut found: Vec<SearchMatch> = Vec::new();
        let room = max - report.matches.len();
        let result = searcher.search_file(
            &matcher,
            &file,
            Lossy(|line, text| {
                let text = text.trim_end_matches(['\n', '\r']);
                let shown: String = text.chars().take(MAX_LINE_CHARS).collect();
                found.push(SearchMatch { path: rel.clone(), line, text: shown });
                Ok(found.len() < room + 1)
            }),
        );
        if result.is_err() {
            report.files_skipped += 1;
            continue;
        }
        report.files_searched += 1;
        if found.len() > room {
            found.truncate(room);
            report.matches.extend(found);
            report.truncated = true;
            break;
        }
        report.matches.extend(found);
    }
    Ok(report)
}
