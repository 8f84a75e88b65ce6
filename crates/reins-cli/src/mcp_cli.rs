//! MCP servers on the command line: `--mcp NAME=COMMAND [ARGS...]` / `--mcp NAME=URL`, `[mcp.NAME]` tables
//! in the `--config` file, and `reins mcp list`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use reins::{Tool, ToolSource};
use reins_mcp::{McpServer, McpToolSource, McpTools, ServerConfig, Transport, make_tools};

use crate::exit::{CliError, usage};

/// Flags that connect MCP servers.
#[derive(Args, Debug, Default, Clone)]
pub struct McpFlags {
    /// Connects an MCP server and gives the model its tools, named NAME__TOOL: 'NAME=COMMAND ARG...' starts a
    /// child process speaking MCP over stdio (split like a shell would, never run by one; killed with its
    /// process group at the end), 'NAME=URL' reaches a streamable HTTP endpoint. Repeatable; replaces a
    /// [mcp.NAME] table of the same name in --config.
    #[arg(long = "mcp", value_name = "NAME=COMMAND ARG...|NAME=URL")]
    pub servers: Vec<String>,
}

/// The servers configured by the `[mcp.NAME]` tables of `config_file` and by `--mcp`, in that order.
pub fn configs(flags: &McpFlags, config_file: Option<&Path>) -> Result<Vec<ServerConfig>, CliError> {
    let mut servers = match config_file {
        Some(path) => from_file(path)?,
        None => Vec::new(),
    };
    for spec in &flags.servers {
        let config = ServerConfig::parse_spec(spec).map_err(|e| usage(format!("--mcp: {e}")))?;
        servers.retain(|s| s.name != config.name);
        servers.push(config);
    }
    Ok(servers)
}

/// The `[mcp.NAME]` tables of a TOML config file (other keys are left to their own readers). A relative
/// `cwd` is taken relative to the file.
fn from_file(path: &Path) -> Result<Vec<ServerConfig>, CliError> {
    let text = crate::input::read_text(path, crate::input::MAX_CONFIG_BYTES)
        .map_err(|e| usage(format!("cannot read config {}: {e}", path.display())))?;
    let doc: toml::Table =
        toml::from_str(&text).map_err(|e| usage(format!("invalid config {}: {e}", path.display())))?;
    let Some(mcp) = doc.get("mcp") else {
        return Ok(Vec::new());
    };
    let mut servers =
        ServerConfig::from_toml_tables(mcp).map_err(|e| usage(format!("invalid config {}: {e}", path.display())))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    for s in &mut servers {
        if let Transport::Stdio { cwd: Some(cwd), .. } = &mut s.transport {
            if cwd.is_relative() {
                *cwd = dir.join(&*cwd);
            }
        }
    }
    Ok(servers)
}

/// Starts the configured servers (none configured: `None`). A server that does not start is bad input.
pub async fn start(flags: &McpFlags, config_file: Option<&Path>) -> Result<Option<Arc<McpTools>>, CliError> {
    let configs = configs(flags, config_file)?;
    if configs.is_empty() {
        return Ok(None);
    }
    let tools = McpTools::start(configs).await.map_err(|e| usage(e.to_string()))?;
    Ok(Some(Arc::new(tools)))
}

/// The tool source of a run: `others` plus the servers' tools, refreshed between steps when a server
/// announces new tools. `None` without servers.
pub fn tool_source(
    mcp: Option<&Arc<McpTools>>,
    others: &[Arc<dyn Tool>],
) -> Result<Option<Arc<dyn ToolSource>>, CliError> {
    let Some(mcp) = mcp else {
        return Ok(None);
    };
    let source = McpToolSource::new(Arc::clone(mcp), others.to_vec()).map_err(|e| usage(e.to_string()))?;
    Ok(Some(Arc::new(source)))
}

/// After a run: warns on stderr about tool refreshes that failed between steps, then shuts the servers down.
pub async fn finish(mcp: Option<&Arc<McpTools>>) {
    let Some(mcp) = mcp else {
        return;
    };
    for e in mcp.refresh_errors() {
        errln!("reins: warning: the tools of an MCP server could not be refreshed (its previous tools were kept): {e}");
    }
    mcp.shutdown().await;
}

/// `reins mcp`.
#[derive(Args, Debug)]
pub struct McpArgs {
    #[command(subcommand)]
    command: McpCommand,
}

#[derive(Subcommand, Debug)]
enum McpCommand {
    /// Starts each configured MCP server and shows whether it started and its tools. Exits 0 when every
    /// server started, 1 when one did not, 2 on bad flags or config, 7 when a signal stopped it.
    List(McpListArgs),
}

/// Flags of `reins mcp list`.
#[derive(Args, Debug)]
struct McpListArgs {
    #[command(flatten)]
    flags: McpFlags,
    /// A TOML file whose [mcp.NAME] tables configure servers (the same file as `reins run --config`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Prints one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// What `reins mcp list` found out about one server.
#[derive(Debug, serde::Serialize)]
struct ServerReport {
    name: String,
    transport: String,
    started: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    tools: Vec<reins::ToolSpec>,
}

/// `reins mcp ...`.
pub async fn mcp(args: McpArgs) -> Result<u8, CliError> {
    match args.command {
        McpCommand::List(list) => mcp_list(list).await,
    }
}

async fn mcp_list(args: McpListArgs) -> Result<u8, CliError> {
    let configs = configs(&args.flags, args.config.as_deref())?;
    if configs.is_empty() {
        return Err(usage(
            "no MCP servers configured: pass --mcp NAME=COMMAND or --config FILE with [mcp.NAME] tables",
        ));
    }
    let cancel = tokio_util::sync::CancellationToken::new();
    crate::signals::cancel_on_signals(cancel.clone(), "mcp list")?;
    let reports = tokio::select! {
        reports = futures_util::future::join_all(configs.into_iter().map(probe)) => reports,
        // The probes are dropped, and with them the servers (their process groups killed).
        () = cancel.cancelled() => {
            errln!("reins: mcp list was cancelled; the servers were stopped");
            return Ok(7);
        }
    };
    if args.json {
        let v = serde_json::json!({ "servers": reports });
        jsonln!("{v}");
    } else {
        for r in &reports {
            out!("{}", render(r));
        }
    }
    Ok(if reports.iter().all(|r| r.started) { 0 } else { 1 })
}

async fn probe(config: ServerConfig) -> ServerReport {
    let mut report = ServerReport {
        name: config.name.clone(),
        transport: describe(&config.transport),
        started: false,
        server: None,
        error: None,
        tools: Vec::new(),
    };
    let server = match McpServer::connect(config).await {
        Ok(s) => Arc::new(s),
        Err(e) => {
            report.error = Some(e.to_string());
            return report;
        }
    };
    report.server = server.server_info().map(str::to_owned);
    match server.list_tools().await.and_then(|listed| make_tools(&server, listed)) {
        Ok(tools) => {
            report.started = true;
            report.tools = tools.iter().map(|t| t.spec().clone()).collect();
        }
        Err(e) => report.error = Some(e.to_string()),
    }
    server.shutdown().await;
    report
}

fn describe(transport: &Transport) -> String {
    match transport {
        Transport::Stdio { command, args, .. } => {
            let line = std::iter::once(command.as_str()).chain(args.iter().map(String::as_str));
            format!("stdio: {}", shlex::try_join(line).unwrap_or_else(|_| command.clone()))
        }
        Transport::Http { url, .. } => format!("http: {url}"),
    }
}

fn render(r: &ServerReport) -> String {
    let mut out = String::new();
    if r.started {
        let server = r.server.as_deref().map(|s| format!(" ({s})")).unwrap_or_default();
        let n = r.tools.len();
        out.push_str(&format!(
            "{}: started{server}, {n} tool{}; {}\n",
            r.name,
            if n == 1 { "" } else { "s" },
            r.transport
        ));
        let width = r.tools.iter().map(|t| t.name.len()).max().unwrap_or(0);
        for t in &r.tools {
            let first_line = t.description.lines().next().unwrap_or("").trim();
            let desc: String = first_line.chars().take(100).collect();
            let more = if first_line.chars().count() > 100 { "..." } else { "" };
            out.push_str(&format!("  {:width$}  {desc}{more}\n", t.name));
        }
    } else {
        let error = r.error.as_deref().unwrap_or("unknown error");
        out.push_str(&format!("{}: did not start; {}\n  {error}\n", r.name, r.transport));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_add_to_and_replace_config_file_servers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("reins.toml");
        std::fs::write(
            &file,
            "[workspace]\npath = \".\"\n[mcp.fs]\ncommand = \"node\"\nargs = [\"fs.js\"]\ncwd = \"srv\"\n\
             [mcp.web]\nurl = \"http://127.0.0.1:9/mcp\"\n",
        )
        .expect("write");
        let flags = McpFlags { servers: vec!["web=python3 server.py".into(), "py=python3 -m srv".into()] };
        let servers = configs(&flags, Some(&file)).expect("configs");
        let names: Vec<_> = servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["fs", "web", "py"]);
        assert!(matches!(&servers[0].transport, Transport::Stdio { cwd: Some(c), .. } if *c == dir.path().join("srv")));
        assert!(matches!(&servers[1].transport, Transport::Stdio { command, .. } if command == "python3"));

        let bad = McpFlags { servers: vec!["a=x".into(), "a=y".into()] };
        assert!(configs(&bad, None).is_ok(), "a later flag replaces an earlier one");
        for spec in ["nameless", "bad name=x", "x="] {
            let flags = McpFlags { servers: vec![spec.into()] };
            assert!(matches!(configs(&flags, None), Err(CliError::Usage(_))), "{spec}");
        }
        std::fs::write(&file, "[mcp.fs]\nargs = []\n").expect("write");
        let err = configs(&McpFlags::default(), Some(&file));
        assert!(matches!(&err, Err(CliError::Usage(m)) if m.contains("[mcp.fs]")), "{err:?}");
    }
}
