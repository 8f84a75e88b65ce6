//! Large results lose nothing: a result over the run's bound keeps its head and tail for the model, and the
//! whole text goes to a file beneath the workspace's scratch folder (`.reins/spill/`), named in the marker, so
//! that the model can read any part of it back with `read_file` and a line range.
//!
//! The scratch folder `.reins/` holds a `.gitignore` of `*`: git and the `search` tool (which honours
//! `.gitignore`) leave it out. Directories are made 0700 and files 0600; a symlink in their place is refused.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use reins::ToolOutput;

/// The workspace's scratch folder, relative to its root.
pub const SCRATCH_DIR: &str = ".reins";
/// Where spilled results go, relative to the workspace root.
pub const SPILL_DIR: &str = ".reins/spill";

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
}

impl Spill {
    /// `output` as the model should see it: unchanged within the bound; over it, written whole to a spill file
    /// and cut to its head, a marker naming the file and the omitted lines, and its tail — within the bound.
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
        match self.write(&text, server, tool) {
            Ok(rel) => cut(&text, total, self.max_chars, &rel),
            Err(_) => text,
        }
    }

    /// Writes `text` to a new file under [`SPILL_DIR`]; returns its path relative to the root.
    fn write(&self, text: &str, server: &str, tool: &str) -> std::io::Result<String> {
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
        let name = format!("{}__{}-{stamp}-{}-{n}.txt", safe(server), safe(tool), std::process::id());
        let mut file = create_new(&dir.join(&name))?;
        file.write_all(text.as_bytes())?;
        file.flush()?;
        Ok(format!("{SPILL_DIR}/{name}"))
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
fn cut(text: &str, total: usize, max: usize, file: &str) -> String {
    let lines = text.lines().count().max(1);
    // The marker's widest form, measured with the largest numbers it can hold.
    let marker = |omitted: usize, first: usize, last: usize| {
        format!(
            "\n[… {omitted} characters (lines {first}–{last} of {lines}) omitted here; the whole result is in \
             {file}: read it with read_file and start_line/end_line …]\n"
        )
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
        let spill = Spill { root: dir.path().to_owned(), max_chars: 1_000 };
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
            let out = cut(&text, total, max, ".reins/spill/f.txt");
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
        let spill = Spill { root: dir.path().to_owned(), max_chars: 100 };
        let text = "x".repeat(1_000);
        assert_eq!(spill.apply(ToolOutput::Text(text.clone()), "s", "t").into_text(), text);
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }
}
