//! `reins sessions view ID [--output FILE.html] [--open]`: one self-contained HTML file of a session (the page is
//! `reins-view`'s), written atomically and readable by its owner only, or to stdout, and opened on request.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::exit::{CliError, usage};
use crate::store_open::{StoreFlag, open_store, store_err};

/// `reins sessions view`.
#[derive(Args, Debug)]
pub struct ViewArgs {
    /// The session id, or a unique prefix of it.
    pub id: String,
    #[command(flatten)]
    pub store: StoreFlag,
    /// Where to write the page (default: reins-session-ID8.html in the current directory; `-`: stdout). The
    /// file is replaced atomically and readable by its owner only.
    #[arg(long, short = 'o', value_name = "FILE.html")]
    pub output: Option<PathBuf>,
    /// Opens the page with `xdg-open` once written.
    #[arg(long)]
    pub open: bool,
}

fn write_err(path: &Path, e: &std::io::Error) -> CliError {
    usage(format!("cannot write {}: {e}", path.display()))
}

/// Writes `html` to `path` through a private temporary file in the same directory, renamed over it.
fn write_page(path: &Path, html: &str) -> Result<(), CliError> {
    use std::io::Write as _;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if path.is_dir() {
        return Err(usage(format!("cannot write {}: it is a directory", path.display())));
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(".reins-view-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| write_err(path, &e))?;
    tmp.write_all(html.as_bytes()).and_then(|()| tmp.as_file().sync_all()).map_err(|e| write_err(path, &e))?;
    tmp.persist(path).map_err(|e| write_err(path, &e.error))?;
    Ok(())
}

/// `xdg-open` on the PATH, if there is one.
fn xdg_open() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("xdg-open"))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Opens `file` with `xdg-open` (run directly, never through a shell; its output discarded). A missing or
/// failing `xdg-open` is a warning: the page is written either way.
fn open_page(file: &Path) {
    let Some(opener) = xdg_open() else {
        errln!("reins: warning: --open: no xdg-open on the PATH; open {} in a browser", file.display());
        return;
    };
    let file = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    let spawned = std::process::Command::new(&opener)
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        // Waited for on a thread of its own: a zombie never stays, and the command does not wait for a browser.
        Ok(mut child) => {
            let _ = std::thread::Builder::new().name("xdg-open".into()).spawn(move || child.wait());
        }
        Err(e) => errln!("reins: warning: --open: cannot run {}: {e}", opener.display()),
    }
}

/// `reins sessions view ID`.
pub fn view(args: ViewArgs) -> Result<u8, CliError> {
    let session = open_store(args.store.store.as_deref())?.load(&args.id).map_err(store_err)?;
    let view = reins_view::build(&session);
    let html = reins_view::session_html(&view).map_err(|e| CliError::Internal(e.into()))?;
    let path = args.output.unwrap_or_else(|| {
        let short: String = session.id().chars().take(8).collect();
        PathBuf::from(format!("reins-session-{short}.html"))
    });
    if path.as_os_str() == "-" {
        crate::output::stdout_raw(&html);
        return Ok(0);
    }
    write_page(&path, &html)?;
    errln!(
        "reins: wrote {} ({} run(s), {} step(s), {} transcript item(s))",
        path.display(),
        view.runs.len(),
        view.steps.len(),
        view.items.len()
    );
    if args.open {
        open_page(&path);
    }
    Ok(0)
}
