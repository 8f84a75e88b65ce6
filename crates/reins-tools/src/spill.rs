//! Large results lose nothing: a result over the run's bound keeps its head and tail for the model, and the
//! whole text goes to a file beneath the workspace's scratch folder (`.reins/spill/`), named in the marker, so
//! that the model can read any part of it back with `read_file` and a line range. One implementation for every
//! tool: the built-in tools through [`SpillTool`], an MCP server's results through `reins-mcp`.
//!
//! The scratch folder `.reins/` holds a `.gitignore` of `*`: git and the `search` tool (which honours
//! `.gitignore`) leave it out. Directories are made 0700 and files 0600; a symlink in their place is refused
//! (the result is then only cut, by the run's bound, as without a spill).
//!
//! The spill folder does not grow without bound: after each new file, the oldest files are removed until at
//! most [`DEFAULT_MAX_SPILL_FILES`] files of at most [`DEFAULT_MAX_SPILL_BYTES`] bytes in all remain (the new
//! file always stays, even when it alone is larger). In a read-only workspace nothing is written: the result is
//! cut to its head and tail, and the marker says that it was not saved.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use reins::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

/// The workspace's scratch folder, relative to its root.
pub const SCRATCH_DIR: &str = ".reins";
/// Where spilled results go, relative to the workspace root.
pub const SPILL_DIR: &str = ".reins/spill";
/// The most spill files kept in a workspace: the oldest beyond it are removed when a new one is written.
pub const DEFAULT_MAX_SPILL_FILES: usize = 100;
/// The most bytes of spill files kept in a workspace (256 MiB): the oldest beyond it are removed when a new
/// one is written.
pub const DEFAULT_MAX_SPILL_BYTES: u64 = 256 * 1024 * 1024;

/// Fewer characters than this kept around the marker are not worth keeping: the marker is shown alone.
const MIN_KEPT: usize = 64;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Where and above what size results are spilled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spill {
    /// The workspace root.
    pub root: PathBuf,
    /// The bound of a tool result, in characters (the run's `max_tool_result_chars`).
    pub max_chars: usize,
    /// A read-only workspace: nothing is written, a result over the bound is cut and the marker says so.
    pub read_only: bool,
    /// The most spill files kept (see [`DEFAULT_MAX_SPILL_FILES`]).
    pub max_files: usize,
    /// The most bytes of spill files kept (see [`DEFAULT_MAX_SPILL_BYTES`]).
    pub max_bytes: u64,
}

/// Where the whole text of a cut result is, as the marker says.
#[derive(Clone, Copy)]
enum Kept<'a> {
    /// In this file, relative to the workspace root.
    File(&'a str),
    /// Nowhere: the workspace is read-only.
    ReadOnly,
}

impl Spill {
    /// Spills results over `max_chars` beneath the workspace at `root`, with the default bounds of the folder.
    pub fn new(root: impl Into<PathBuf>, max_chars: usize) -> Self {
        Self {
            root: root.into(),
            max_chars,
            read_only: false,
            max_files: DEFAULT_MAX_SPILL_FILES,
            max_bytes: DEFAULT_MAX_SPILL_BYTES,
        }
    }

    /// The same, for a read-only workspace when `read_only` (nothing written, results only cut).
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// `output` as the model should see it: unchanged within the bound; over it, written whole to a spill file
    /// and cut to its head, a marker naming the file and the omitted lines, and its tail — within the bound.
    /// `server` is the MCP server's name (empty for a built-in tool), `tool` the tool's: they name the file.
    /// When the file cannot be written, `output` is returned unchanged (the run's bound then cuts it as always).
    pub fn apply(&self, output: ToolOutput, server: &str, tool: &str) -> ToolOutput {
        match output {
            ToolOutput::Text(text) => ToolOutput::Text(self.text(text, server, tool)),
            ToolOutput::Parts { text, images } => ToolOutput::Parts { text: self.text(text, server, tool), images },
            other => other,
        }
    }

    fn text(&self, text: String, server: &str, tool: &str) -> String {
        if text.len() <= self.max_chars {
            return text;
        }
        let total = text.chars().count();
        if total <= self.max_chars {
            return text;
        }
        if self.read_only {
            return cut(&text, total, self.max_chars, Kept::ReadOnly);
        }
        match self.write(&text, server, tool) {
            Ok(rel) => cut(&text, total, self.max_chars, Kept::File(&rel)),
            Err(_) => text,
        }
    }

    /// Writes `text` to a new file under [`SPILL_DIR`], then removes the oldest beyond the folder's bounds;
    /// returns the new file's path relative to the root.
    fn write(&self, text: &str, server: &str, tool: &str) -> std::io::Result<String> {
        let (mut file, rel) = self.open_file(server, tool)?;
        file.write_all(text.as_bytes())?;
        file.flush()?;
        drop(file);
        // Best effort: a file that cannot be listed or removed stays.
        if let Some(name) = rel.rsplit('/').next() {
            let _ = prune(&self.root.join(SPILL_DIR), name, self.max_files, self.max_bytes);
        }
        Ok(rel)
    }

    /// A new, empty spill file named after `server` (empty for a built-in tool) and `tool`, and its path relative
    /// to the root, for a caller that writes it as it goes (a command's stream over its cap). The oldest files
    /// beyond the folder's bounds are removed first. Refused (an error) for a read-only workspace.
    pub fn open_file(&self, server: &str, tool: &str) -> std::io::Result<(std::fs::File, String)> {
        if self.read_only {
            return Err(std::io::Error::other("the workspace is read-only"));
        }
        let scratch = private_dir(&self.root.join(SCRATCH_DIR))?;
        let ignore = scratch.join(".gitignore");
        if std::fs::symlink_metadata(&ignore).is_err() {
            create_new(&ignore)?.write_all(b"# Reins's scratch folder: not part of the project.\n*\n")?;
        }
        let dir = private_dir(&self.root.join(SPILL_DIR))?;
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let safe = |s: &str| -> String {
            s.chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
                .take(64)
                .collect()
        };
        let prefix = if server.is_empty() { safe(tool) } else { format!("{}__{}", safe(server), safe(tool)) };
        let name = format!("{prefix}-{stamp}-{}-{n}.txt", std::process::id());
        let file = create_new(&dir.join(&name))?;
        let _ = prune(&dir, &name, self.max_files, self.max_bytes);
        Ok((file, format!("{SPILL_DIR}/{name}")))
    }
}

/// Removes the oldest spill files in `dir` (by modification time, then by the stamp and count in their names)
/// until at most `max_files` of at most `max_bytes` in all remain; `newest` (just written) is never removed.
/// Only regular files named `….txt` are counted or removed.
fn prune(dir: &Path, newest: &str, max_files: usize, max_bytes: u64) -> std::io::Result<()> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else { continue };
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.file_type().is_file() || !name.ends_with(".txt") {
            continue;
        }
        // `PREFIX-STAMP-PID-N.txt`: the stamp and count order files written in the same instant.
        let mut nums = name.trim_end_matches(".txt").rsplit('-').map(|p| p.parse::<u128>().unwrap_or(0));
        let (count, _pid, stamp) = (nums.next().unwrap_or(0), nums.next(), nums.next().unwrap_or(0));
        let mtime = (meta.mtime(), meta.mtime_nsec());
        files.push((mtime, stamp, count, meta.len(), name));
    }
    files.sort();
    let mut kept = files.len();
    let mut bytes: u64 = files.iter().map(|f| f.3).fold(0, u64::saturating_add);
    for (_, _, _, len, name) in files {
        if kept <= max_files && bytes <= max_bytes {
            break;
        }
        if name == newest {
            continue;
        }
        std::fs::remove_file(dir.join(&name))?;
        kept -= 1;
        bytes = bytes.saturating_sub(len);
    }
    Ok(())
}

/// A built-in tool whose results over the run's bound are spilled ([`Spill`]): the model is shown the head
/// and tail and the name of the file that holds the whole. A `read_file` of a spill file is not spilled again
/// (the run's bound cuts it: the model reads a spill file by line ranges).
pub struct SpillTool {
    inner: Arc<dyn Tool>,
    spill: Arc<Spill>,
}

impl SpillTool {
    /// `inner`, its results spilled through `spill`.
    pub fn new(inner: Arc<dyn Tool>, spill: Arc<Spill>) -> Self {
        Self { inner, spill }
    }

    /// Each of `tools` wrapped in a [`SpillTool`] sharing `spill`.
    pub fn wrap_all(tools: Vec<Arc<dyn Tool>>, spill: Spill) -> Vec<Arc<dyn Tool>> {
        let spill = Arc::new(spill);
        tools.into_iter().map(|t| Arc::new(SpillTool::new(t, spill.clone())) as Arc<dyn Tool>).collect()
    }
}

impl std::fmt::Debug for SpillTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillTool").field("tool", &self.inner.spec().name).field("spill", &self.spill).finish()
    }
}

#[async_trait::async_trait]
impl Tool for SpillTool {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    fn parallel_safe(&self) -> bool {
        self.inner.parallel_safe()
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    fn sub_agent(&self) -> bool {
        self.inner.sub_agent()
    }

    async fn call(&self, arguments: serde_json::Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        self.call_borrowed(&arguments, ctx).await
    }

    fn call_borrowed<'a>(
        &'a self,
        arguments: &'a serde_json::Value,
        ctx: ToolContext,
    ) -> Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'a>> {
        Box::pin(async move {
            let out = self.inner.call_borrowed(arguments, ctx).await?;
            let of_spill = arguments
                .get("path")
                .and_then(serde_json::Value::as_str)
                .is_some_and(|p| Path::new(p.trim_start_matches("./")).starts_with(SPILL_DIR));
            if of_spill {
                return Ok(out);
            }
            Ok(self.spill.apply(out, "", &self.inner.spec().name))
        })
    }
}

/// Makes `dir` (0700) if it is missing; refuses it when it is a symlink or not a directory.
fn private_dir(dir: &Path) -> std::io::Result<PathBuf> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_dir() => Ok(dir.to_owned()),
        Ok(_) => Err(std::io::Error::other(format!("{} is not a directory", dir.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().mode(0o700).create(dir)?;
            Ok(dir.to_owned())
        }
        Err(e) => Err(e),
    }
}

/// A new file, 0600, never through a symlink.
fn create_new(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path)
}

/// The head, the marker and the tail of `text` (`total` characters) within `max` characters.
fn cut(text: &str, total: usize, max: usize, kept: Kept<'_>) -> String {
    let lines = text.lines().count().max(1);
    // The marker's widest form, measured with the largest numbers it can hold.
    let marker = |omitted: usize, first: usize, last: usize| match kept {
        Kept::File(file) => format!(
            "\n[… {omitted} characters (lines {first}–{last} of {lines}) omitted here; the whole result is in \
             {file}: read it with read_file and start_line/end_line …]\n"
        ),
        Kept::ReadOnly => format!(
            "\n[… {omitted} characters (lines {first}–{last} of {lines}) omitted here; not saved to a file: the \
             workspace is read-only …]\n"
        ),
    };
    let widest = marker(total, lines, lines).chars().count();
    if max < widest + MIN_KEPT {
        let note = marker(total, 1, lines);
        return note.trim().to_owned();
    }
    let keep = max - widest;
    let tail_len = keep / 3;
    let head_len = keep - tail_len;
    let head_end = text.char_indices().nth(head_len).map_or(text.len(), |(i, _)| i);
    let tail_start = text.char_indices().nth_back(tail_len.saturating_sub(1)).map_or(text.len(), |(i, _)| i);
    let (head, tail) = (&text[..head_end], &text[tail_start..]);
    // The first omitted line is the one the head ends in; the last, the one the tail starts in.
    let first = head.matches('\n').count() + 1;
    // Counted from the start: a tail that begins on a line's newline starts in that line (a count of the tail's
    // own newlines from the end put it one line too late); one that begins a line keeps that line whole.
    let before = &text[..tail_start];
    let last = (before.matches('\n').count() + usize::from(!before.ends_with('\n'))).min(lines).max(first);
    let mut out = String::with_capacity(head.len() + tail.len() + widest + 8);
    out.push_str(head);
    out.push_str(&marker(total - head_len - tail_len, first, last));
    out.push_str(tail);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_result_is_cut_within_its_bound_and_written_whole_0600() {
        let dir = tempfile::tempdir().unwrap();
        let spill = Spill::new(dir.path(), 1_000);
        let text: String = (1..=5_000).map(|i| format!("line {i}\n")).collect();
        let out = spill.apply(ToolOutput::Text(text.clone()), "srv", "big.tool").into_text();
        assert!(out.chars().count() <= 1_000, "{}", out.chars().count());
        assert!(out.starts_with("line 1\nline 2\n") && out.ends_with("line 5000\n"), "{out}");
        let file = out.split("is in ").nth(1).and_then(|s| s.split(':').next()).unwrap();
        assert!(file.starts_with(".reins/spill/srv__big_tool-"), "{file}");
        let path = dir.path().join(file);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let spill_dir = dir.path().join(SPILL_DIR);
        assert_eq!(std::fs::metadata(spill_dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(std::fs::read_to_string(dir.path().join(".reins/.gitignore")).unwrap().lines().last(), Some("*"));
        // The marker names the omitted lines: the head ends in the first of them, the tail starts in the last.
        let range = out.split("(lines ").nth(1).and_then(|s| s.split(" of").next()).unwrap();
        let (first, last) = range.split_once('–').unwrap();
        let (first, last): (usize, usize) = (first.parse().unwrap(), last.parse().unwrap());
        assert!(out.contains(&format!("line {}\n", first - 1)) && !out.contains(&format!("line {}\n", first + 1)));
        assert!(out.contains(&format!("line {}\n", last + 1)), "{out}");
        // Within the bound: untouched, nothing written.
        let small = spill.apply(ToolOutput::Text("short".into()), "srv", "t").into_text();
        assert_eq!(small, "short");
        assert_eq!(std::fs::read_dir(dir.path().join(SPILL_DIR)).unwrap().count(), 1);
    }

    /// Wherever the cut falls (inside a line, on its newline, at its start), the marker names exactly the lines
    /// that are not wholly kept: the line before the first and the line after the last are whole in the output.
    #[test]
    fn the_marker_names_the_omitted_lines_wherever_the_cut_falls() {
        let text: String = (1..=500).map(|i| format!("line {i}\n")).collect();
        let total = text.chars().count();
        for max in 400..520 {
            let out = cut(&text, total, max, Kept::File(".reins/spill/f.txt"));
            let range = out.split("(lines ").nth(1).and_then(|s| s.split(" of").next()).unwrap();
            let (first, last) = range.split_once('–').unwrap();
            let (first, last): (usize, usize) = (first.parse().unwrap(), last.parse().unwrap());
            let (head, tail) = out.split_once("\n[…").unwrap();
            let tail = tail.split_once("…]\n").unwrap().1;
            let head = format!("\n{head}");
            assert!(!head.contains(&format!("\nline {first}\n")), "max {max}: line {first} is whole");
            assert!(first == 1 || head.contains(&format!("\nline {}\n", first - 1)), "max {max}");
            assert!(!format!("\n{tail}").contains(&format!("\nline {last}\n")), "max {max}: line {last} is whole");
            assert!(format!("\n{tail}").contains(&format!("\nline {}\n", last + 1)), "max {max}: {tail:?}");
        }
    }

    #[test]
    fn a_symlinked_scratch_folder_is_refused_and_the_text_left_to_the_runs_bound() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join(".reins")).unwrap();
        let spill = Spill::new(dir.path(), 100);
        let text = "x".repeat(1_000);
        assert_eq!(spill.apply(ToolOutput::Text(text.clone()), "s", "t").into_text(), text);
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_oldest_spill_files_are_removed_beyond_the_folders_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let spill = Spill { max_files: 2, ..Spill::new(dir.path(), 100) };
        let file_of = |out: String| out.split("is in ").nth(1).and_then(|s| s.split(':').next()).unwrap().to_owned();
        let files: Vec<String> = (0..3)
            .map(|i| {
                file_of(spill.apply(ToolOutput::Text(format!("{i}").repeat(1_000)), "", "run_command").into_text())
            })
            .collect();
        assert!(files[0].starts_with(".reins/spill/run_command-"), "{}", files[0]);
        assert!(!dir.path().join(&files[0]).exists(), "the oldest is removed");
        assert!(dir.path().join(&files[1]).exists() && dir.path().join(&files[2]).exists());
        // By bytes: a folder of at most 2,500 bytes keeps the newest two 1,000-byte files, then only the newest
        // when it alone is larger than the bound.
        let spill = Spill { max_bytes: 2_500, ..Spill::new(dir.path(), 100) };
        let newer = file_of(spill.apply(ToolOutput::Text("a".repeat(1_000)), "", "t").into_text());
        assert!(!dir.path().join(&files[1]).exists() && dir.path().join(&files[2]).exists());
        let big = file_of(spill.apply(ToolOutput::Text("b".repeat(3_000)), "", "t").into_text());
        let left: Vec<_> =
            std::fs::read_dir(dir.path().join(SPILL_DIR)).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(dir.path().join(&big).exists() && !dir.path().join(&newer).exists());
    }

    #[test]
    fn a_read_only_workspace_gets_a_cut_result_and_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let spill = Spill::new(dir.path(), 500).read_only(true);
        let text: String = (1..=1_000).map(|i| format!("line {i}\n")).collect();
        let out = spill.apply(ToolOutput::Text(text), "", "read_file").into_text();
        assert!(out.chars().count() <= 500, "{}", out.chars().count());
        assert!(out.starts_with("line 1\n") && out.ends_with("line 1000\n"), "{out}");
        assert!(out.contains("not saved to a file: the workspace is read-only"), "{out}");
        assert!(!dir.path().join(SCRATCH_DIR).exists());
    }
}
