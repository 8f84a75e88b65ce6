//! The file tools: `read_file`, `write_file`, `edit_file`, `list_dir` and `search`, each a [`reins::TypedTool`]
//! over a shared [`Workspace`].

use std::sync::Arc;

use reins::{Tool, ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::search::{DEFAULT_MAX_MATCHES, SearchQuery, search};
use crate::workspace::{EntryKind, RelPath, Workspace, WorkspaceError};

/// The most entries `list_dir` returns.
pub const MAX_LIST_ENTRIES: usize = 2000;
/// The deepest `list_dir` goes.
pub const MAX_LIST_DEPTH: usize = 10;

fn path_arg(path: &str) -> Result<RelPath, ToolError> {
    RelPath::parse(path).map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

/// The path of a file: a trailing `/` (a directory) is refused.
fn file_arg(path: &str) -> Result<RelPath, ToolError> {
    RelPath::parse_file(path).map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

fn failed(e: WorkspaceError) -> ToolError {
    ToolError::Failed(e.to_string())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f).await.map_err(|_| ToolError::failed("the file operation stopped unexpectedly"))?
}

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// The file, relative to the workspace root.
    pub path: String,
    /// The first line to return (1-based). Without it the whole file is returned (if it is small enough).
    #[schemars(range(min = 1))]
    pub start_line: Option<u64>,
    /// The last line to return (inclusive). Needs `start_line`; without it, reads to the end.
    #[schemars(range(min = 1))]
    pub end_line: Option<u64>,
}

/// `read_file`: reads a text file in the workspace.
pub struct ReadFile(pub Arc<Workspace>);

impl TypedTool for ReadFile {
    type Args = ReadFileArgs;
    const NAME: &'static str = "read_file";
    const DESCRIPTION: &'static str = "Read a text file in the workspace. Give `path` relative to the workspace root; \
        optionally `start_line`/`end_line` (1-based, inclusive) for a range. A PNG, JPEG, GIF or WebP image (read \
        whole) is shown to you as an image. Other binary files and symlinks are refused; large files must be read \
        by line range.";
    const PARALLEL_SAFE: bool = true;

    async fn run(&self, args: ReadFileArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let path = file_arg(&args.path)?;
        let range = match (args.start_line, args.end_line) {
            (None, None) => None,
            (Some(s), e) => Some((s, e)),
            (None, Some(e)) => Some((1, Some(e))),
        };
        let ws = self.0.clone();
        blocking(move || {
            if range.is_none() {
                if let Some(image) = ws.read_image(&path).map_err(failed)? {
                    let text = format!(
                        "{} ({}, {}x{}, {} bytes)",
                        path,
                        image.media_type(),
                        image.width(),
                        image.height(),
                        image.data().len()
                    );
                    return Ok(ToolOutput::Parts { text, images: vec![image] });
                }
            }
            ws.read_text(&path, range).map(ToolOutput::Text).map_err(failed)
        })
        .await
    }
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// The file, relative to the workspace root. Its directory must exist.
    pub path: String,
    /// The complete new content.
    pub content: String,
}

/// `write_file`: creates or replaces a file atomically.
pub struct WriteFile(pub Arc<Workspace>);

impl TypedTool for WriteFile {
    type Args = WriteFileArgs;
    const NAME: &'static str = "write_file";
    const DESCRIPTION: &'static str = "Create or replace a file in the workspace with `content`. The parent directory \
        must exist. Written atomically (a reader never sees half a file). Protected paths such as .git/ cannot be \
        written.";

    async fn run(&self, args: WriteFileArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let path = file_arg(&args.path)?;
        let ws = self.0.clone();
        blocking(move || {
            let r = ws.write(&path, args.content.as_bytes()).map_err(failed)?;
            let verb = if r.created { "created" } else { "replaced" };
            Ok(ToolOutput::Text(format!("{verb} `{path}` ({} bytes)", r.bytes)))
        })
        .await
    }
}

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// The file, relative to the workspace root.
    pub path: String,
    /// The exact text to replace.
    #[schemars(length(min = 1))]
    pub old_text: String,
    /// The replacement.
    pub new_text: String,
    /// How many times `old_text` must occur (default 1); every occurrence is replaced.
    #[schemars(range(min = 1))]
    pub expected_count: Option<usize>,
}

/// `edit_file`: replaces exact text in a file, atomically.
pub struct EditFile(pub Arc<Workspace>);

impl TypedTool for EditFile {
    type Args = EditFileArgs;
    const NAME: &'static str = "edit_file";
    const DESCRIPTION: &'static str = "Replace `old_text` with `new_text` in a workspace file. `old_text` must occur \
        exactly `expected_count` times (default 1), otherwise nothing changes. Written atomically.";

    async fn run(&self, args: EditFileArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let path = file_arg(&args.path)?;
        let ws = self.0.clone();
        blocking(move || {
            let n = ws.edit(&path, &args.old_text, &args.new_text, args.expected_count.unwrap_or(1)).map_err(failed)?;
            Ok(ToolOutput::Text(format!("edited `{path}`: {n} replacement{}", if n == 1 { "" } else { "s" })))
        })
        .await
    }
}

/// Arguments of `list_dir`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirArgs {
    /// The directory, relative to the workspace root (default: the root).
    pub path: Option<String>,
    /// How deep to list (1 = direct entries; at most 10).
    #[schemars(range(min = 1, max = 10))]
    pub depth: Option<usize>,
}

/// `list_dir`: lists a directory, sorted, marking directories and symlinks.
pub struct ListDir(pub Arc<Workspace>);

impl TypedTool for ListDir {
    type Args = ListDirArgs;
    const NAME: &'static str = "list_dir";
    const DESCRIPTION: &'static str = "List a workspace directory (default: the root), sorted. Directories end with \
        `/`, symlinks with `@` (never followed); other special files are marked. `depth` lists subdirectories too.";
    const PARALLEL_SAFE: bool = true;

    async fn run(&self, args: ListDirArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let path = path_arg(args.path.as_deref().unwrap_or("."))?;
        let depth = args.depth.unwrap_or(1).clamp(1, MAX_LIST_DEPTH);
        let ws = self.0.clone();
        blocking(move || {
            let listing = ws.list(&path, depth, MAX_LIST_ENTRIES).map_err(failed)?;
            let mut out = String::new();
            for e in &listing.entries {
                out.push_str(&e.path);
                match e.kind {
                    EntryKind::Dir => out.push('/'),
                    EntryKind::Symlink => out.push('@'),
                    EntryKind::File => {}
                    other => {
                        out.push_str(" (");
                        out.push_str(other.describe());
                        out.push(')');
                    }
                }
                out.push('\n');
            }
            if listing.entries.is_empty() {
                out.push_str(&format!("`{path}` is empty\n"));
            }
            if listing.omitted > 0 {
                out.push_str(&format!("[... {} more entries not shown]\n", listing.omitted));
            }
            Ok(ToolOutput::Text(out))
        })
        .await
    }
}

/// Arguments of `search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// A regular expression (Rust regex syntax), matched line by line.
    #[schemars(length(min = 1))]
    pub pattern: String,
    /// Where to search, relative to the workspace root (default: the root).
    pub path: Option<String>,
    /// Only files whose workspace-relative path matches this glob (e.g. `**/*.rs`).
    pub glob: Option<String>,
    /// Match case-insensitively.
    #[serde(default)]
    pub case_insensitive: bool,
    /// At most this many matches (default 100, at most 1000).
    #[schemars(range(min = 1, max = 1000))]
    pub max_matches: Option<usize>,
}

/// `search`: a regular expression over workspace files, honouring `.gitignore`.
pub struct Search(pub Arc<Workspace>);

impl TypedTool for Search {
    type Args = SearchArgs;
    const NAME: &'static str = "search";
    const DESCRIPTION: &'static str = "Search workspace files for a regular expression; returns `path:line:text` \
        lines. Honours .gitignore, skips binary files and .git/.";
    const PARALLEL_SAFE: bool = true;

    async fn run(&self, args: SearchArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let path = path_arg(args.path.as_deref().unwrap_or("."))?;
        let query = SearchQuery {
            pattern: args.pattern,
            path,
            glob: args.glob,
            case_insensitive: args.case_insensitive,
            max_matches: args.max_matches.unwrap_or(DEFAULT_MAX_MATCHES),
        };
        let ws = self.0.clone();
        blocking(move || {
            search(&ws, &query, &ctx.cancel).map(|r| ToolOutput::Text(r.render())).map_err(|e| match e {
                crate::search::SearchError::Cancelled => ToolError::Cancelled,
                crate::search::SearchError::Pattern(_) | crate::search::SearchError::Glob { .. } => {
                    ToolError::InvalidArguments(e.to_string())
                }
                other => ToolError::Failed(other.to_string()),
            })
        })
        .await
    }
}

/// The five file tools over `ws`, ready for a [`reins::Registry`].
pub fn file_tools(ws: Arc<Workspace>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(reins::typed(ReadFile(ws.clone()))),
        Arc::new(reins::typed(WriteFile(ws.clone()))),
        Arc::new(reins::typed(EditFile(ws.clone()))),
        Arc::new(reins::typed(ListDir(ws.clone()))),
        Arc::new(reins::typed(Search(ws))),
    ]
}
