//! What a model is told about its workspace: the built-in preamble that explains the workspace and its
//! tools, and the workspace's `AGENTS.md` (read through the workspace's confined open, bounded, never
//! through a symlink).
//!
//! The order an agent's instructions are put together in is: [`preamble`], the [`AgentsMd`] section,
//! then the user's own instructions ([`join`]).

use std::io::Read;

use crate::command::CommandRunner;
use crate::workspace::{RelPath, Workspace, WorkspaceError};

/// The file read from the workspace root.
pub const AGENTS_MD: &str = "AGENTS.md";
/// The most bytes of `AGENTS.md` given to the model by default (the rest is cut, with a note).
pub const DEFAULT_AGENTS_MD_MAX_BYTES: u64 = 32 * 1024;

/// The built-in preamble for a model given the file tools over `ws` (and `run_command` over `commands`,
/// when there is one): what the workspace is, that paths are relative to its root, what is refused and
/// why, which paths are read-only, and that `run_command` takes the name of a preset (listed).
///
/// The text depends only on the protected globs and the preset names, never on the host path of the
/// workspace, so the model learns nothing about the machine beyond its workspace.
pub fn preamble(ws: &Workspace, commands: Option<&CommandRunner>) -> String {
    let mut out = String::from(
        "You work in a workspace: one directory, reached only through your tools, which Reins runs for you.\n\
         - Paths are relative to the workspace root, such as `src/main.rs`; `.` is the root itself. The file tools \
         are read_file, write_file, edit_file, list_dir and search.\n\
         - Absolute paths, `..` components and symbolic links are refused: every path is resolved beneath the root, \
         so nothing outside the workspace can be reached. Do not try to work around a refusal; the error says what \
         was wrong.\n",
    );
    let protected = ws.protected_globs();
    if !protected.is_empty() {
        let list: Vec<String> = protected.iter().map(|g| format!("`{g}`")).collect();
        out.push_str(&format!(
            "- Protected paths are read-only: {}. They can be read, never written.\n",
            list.join(", ")
        ));
    }
    match commands {
        Some(runner) => {
            let names: Vec<String> = runner
                .presets()
                .map(|p| match p.arg_schema {
                    Some(_) => format!("`{}` (accepts args)", p.name),
                    None => format!("`{}`", p.name),
                })
                .collect();
            out.push_str(&format!(
                "- run_command runs a command by preset name, never a shell command line: `command` is one of {}. \
                 Pass `args` only to a preset that accepts them. Each command has a timeout and bounded output.\n",
                names.join(", ")
            ));
        }
        None => out.push_str("- There is no run_command tool here: no program can be run.\n"),
    }
    out
}

/// What the workspace's `AGENTS.md` gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentsMd {
    /// There is no `AGENTS.md` at the workspace root.
    Absent,
    /// It was read: its text (possibly cut, invalid UTF-8 replaced), and a note when it was not taken whole.
    Loaded {
        /// The text given to the model.
        text: String,
        /// What was changed (cut at the size cap, invalid UTF-8 replaced), for the model and the operator.
        note: Option<String>,
    },
    /// It is there but was not read (a symbolic link, not a regular file, binary, unreadable): why.
    Skipped {
        /// Why, naming only the workspace-relative path.
        reason: String,
    },
}

impl AgentsMd {
    /// The section of the instructions it gives: a heading, the text and its note; for a skipped file a
    /// one-line note saying why it was not read; nothing when absent.
    pub fn section(&self) -> Option<String> {
        match self {
            AgentsMd::Absent => None,
            AgentsMd::Loaded { text, note } => {
                let mut s =
                    format!("The workspace's {AGENTS_MD} (notes from its authors for agents working in it):\n\n");
                s.push_str(text);
                if let Some(note) = note {
                    if !s.ends_with('\n') {
                        s.push('\n');
                    }
                    s.push_str(&format!("\n[{note}]"));
                }
                Some(s)
            }
            AgentsMd::Skipped { reason } => Some(format!("[The workspace's {AGENTS_MD} was not read: {reason}.]")),
        }
    }

    /// A note for the operator when the file was not taken whole, or not read.
    pub fn note(&self) -> Option<String> {
        match self {
            AgentsMd::Absent | AgentsMd::Loaded { note: None, .. } => None,
            AgentsMd::Loaded { note: Some(n), .. } => Some(n.clone()),
            AgentsMd::Skipped { reason } => Some(format!("{AGENTS_MD} was not read: {reason}")),
        }
    }
}

/// Reads `AGENTS.md` at the workspace root through the workspace's confined open (beneath the root handle,
/// never through a symbolic link, a regular file only, opened without blocking on a FIFO), at most
/// `max_bytes` of it. A longer file is cut on a character boundary, with a note saying how much was left
/// out; a file with NUL bytes is skipped as binary; invalid UTF-8 is replaced (U+FFFD), with a note.
/// Errors that concern the file itself are [`AgentsMd::Skipped`], never a failure of the run.
pub fn load_agents_md(ws: &Workspace, max_bytes: u64) -> AgentsMd {
    let path = match RelPath::parse(AGENTS_MD) {
        Ok(p) => p,
        Err(e) => return AgentsMd::Skipped { reason: e.to_string() },
    };
    // The workspace's one open for reading: beneath the root, no symlink, non-blocking, regular files only.
    let (file, size) = match ws.open_regular(&path) {
        Ok(opened) => opened,
        Err(WorkspaceError::NotFound(_)) => return AgentsMd::Absent,
        Err(WorkspaceError::Symlink(_) | WorkspaceError::Outside(_)) => {
            return AgentsMd::Skipped { reason: "it is a symbolic link, and the workspace never follows links".into() };
        }
        Err(WorkspaceError::IsADirectory(_)) => {
            return AgentsMd::Skipped { reason: "it is a directory, not a regular file".into() };
        }
        Err(WorkspaceError::NotRegular { kind, .. }) => {
            return AgentsMd::Skipped { reason: format!("it is a {kind}, not a regular file") };
        }
        Err(e) => return AgentsMd::Skipped { reason: e.to_string() },
    };
    let mut buf = Vec::with_capacity(size.min(max_bytes) as usize);
    // Bounded even if the file grows between fstat and read.
    if let Err(e) = file.take(max_bytes.saturating_add(1)).read_to_end(&mut buf) {
        return AgentsMd::Skipped { reason: format!("cannot read it: {e}") };
    }
    let cut = buf.len() as u64 > max_bytes;
    if cut {
        buf.truncate(max_bytes as usize);
        // The cut must not split a character: an incomplete sequence at the end goes.
        if let Err(e) = std::str::from_utf8(&buf) {
            if e.error_len().is_none() {
                buf.truncate(e.valid_up_to());
            }
        }
    }
    if buf.contains(&0) {
        return AgentsMd::Skipped { reason: "it is a binary file (it contains NUL bytes)".into() };
    }
    let (text, replaced) = match String::from_utf8(buf) {
        Ok(t) => (t, false),
        Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), true),
    };
    let mut notes = Vec::new();
    if cut {
        let total = if size > max_bytes { size.to_string() } else { format!("more than {max_bytes}") };
        notes.push(format!("{AGENTS_MD} was cut: only its first {max_bytes} bytes (of {total}) were read"));
    }
    if replaced {
        notes.push(format!("{AGENTS_MD} is not valid UTF-8: invalid bytes were replaced with U+FFFD"));
    }
    AgentsMd::Loaded { text, note: (!notes.is_empty()).then(|| notes.join("; ")) }
}

/// Joins the parts of an agent's instructions in order (preamble, `AGENTS.md`, the user's own), leaving
/// out empty ones, with a blank line between parts. `None` when every part is empty.
pub fn join<I, S>(parts: I) -> Option<String>
where
    I: IntoIterator<Item = Option<S>>,
    S: AsRef<str>,
{
    let mut out = String::new();
    for part in parts.into_iter().flatten() {
        let part = part.as_ref().trim_end();
        if part.trim().is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(part);
    }
    (!out.is_empty()).then_some(out)
}
