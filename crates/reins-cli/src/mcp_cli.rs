//! `reins mcp list` (the flag `--mcp NAME=COMMAND [ARGS...]` / `--mcp NAME=URL` of a run is `mcp_servers`'s).

use std::sync::Arc;

use clap::{Args, Subcommand};
use reins_mcp::{McpServer, ServerConfig, Transport};

use crate::exit::{CliError, usage};
use crate::mcp_servers::McpFlags;

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
    /// Serves agents as MCP tools (each --agent FILE one tool taking {"task": ...}): over stdio, or with
    /// --listen over streamable HTTP on loopback behind a bearer token. Every call is a run recorded as a
    /// session; an approval it needs is asked of the client as an elicitation (declined: the call is denied).
    Serve(crate::mcp_serve::McpServeArgs),
    /// Logs in to an HTTP MCP server with OAuth (authorization code with PKCE through a loopback redirect:
    /// opens the browser, or prints the URL to open) and keeps its tokens in a private file beneath the user's
    /// data directory. Exits 0 when logged in, 1 when the login failed, 2 on bad flags or config, 7 on a signal.
    Login(crate::mcp_login::McpLoginArgs),
    /// Forgets the OAuth login of an MCP server (removes its token file). Exits 0, or 1 when there was none.
    Logout(crate::mcp_login::McpLogoutArgs),
}

/// Flags of `reins mcp list`.
#[derive(Args, Debug)]
struct McpListArgs {
    #[command(flatten)]
    flags: McpFlags,
    /// An agent file whose [mcp.NAME] tables configure servers (the same file as `reins run --agent`); the
    /// user config and its --profile apply too.
    #[command(flatten)]
    agent_file: crate::run_args::AgentFileFlags,
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
    /// The protocol revision spoken with it (`2026-07-28`, `2025-11-25`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol: Option<String>,
    tools: Vec<reins::ToolSpec>,
    /// The tools it listed that Reins leaves out, each with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    refused: Vec<String>,
    resources: Vec<reins_mcp::RemoteResource>,
    prompts: Vec<reins_mcp::RemotePrompt>,
}

/// `reins mcp ...`.
pub async fn mcp(args: McpArgs) -> Result<u8, CliError> {
    match args.command {
        McpCommand::List(list) => mcp_list(list).await,
        McpCommand::Serve(serve) => crate::mcp_serve::serve(serve).await,
        McpCommand::Login(login) => crate::mcp_login::login(login).await,
        McpCommand::Logout(logout) => crate::mcp_login::logout(&logout).await,
    }
}

/// The servers of the user config, the agent file and `--mcp`, resolved as `reins run` resolves them.
pub(crate) fn configs(
    servers: &McpFlags,
    agent_file: &crate::run_args::AgentFileFlags,
) -> Result<Vec<ServerConfig>, CliError> {
    let mut layers = Vec::new();
    if let Some(path) = reins_agent::user_config_path() {
        let user = reins_agent::UserConfig::read(&path).map_err(crate::resolve::def_err)?;
        layers.extend(user.layers(agent_file.profile.as_deref()).map_err(crate::resolve::def_err)?);
    }
    if let Some(path) = &agent_file.agent {
        layers.push(reins_agent::agent_file_layer(path).map_err(crate::resolve::def_err)?);
    }
    let mut flags = reins_agent::AgentDef::default();
    for spec in &servers.servers {
        let (name, server) = reins_agent::McpServerDef::from_spec(spec).map_err(|e| usage(format!("--mcp: {e}")))?;
        flags.mcp.insert(name, server);
    }
    layers.push(reins_agent::Layer::new(reins_agent::Origin::Flag, flags));
    let resolved = reins_agent::resolve(&layers).map_err(crate::resolve::def_err)?;
    resolved.def.mcp_configs().map_err(crate::resolve::def_err)
}

async fn mcp_list(args: McpListArgs) -> Result<u8, CliError> {
    let configs = configs(&args.flags, &args.agent_file)?;
    if configs.is_empty() {
        return Err(usage("no MCP servers configured: pass --mcp NAME=COMMAND or --agent FILE with [mcp.NAME] tables"));
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
        protocol: None,
        tools: Vec::new(),
        refused: Vec::new(),
        resources: Vec::new(),
        prompts: Vec::new(),
    };
    let server = match McpServer::connect(config).await {
        Ok(s) => Arc::new(s),
        Err(e) => {
            report.error = Some(e.to_string());
            return report;
        }
    };
    report.server = server.server_info().map(str::to_owned);
    report.protocol = Some(server.protocol_version().to_owned()).filter(|p| !p.is_empty());
    let listed = async {
        let tools = reins_mcp::list_server_tools(&server).await?;
        let resources = if server.config().resources { server.list_resources().await? } else { Vec::new() };
        Ok::<_, reins_mcp::McpError>((tools, resources, server.list_prompts().await?))
    };
    match listed.await {
        Ok((tools, resources, prompts)) => {
            report.started = true;
            report.tools = tools.tools.iter().map(|t| t.spec().clone()).collect();
            report.refused = tools.refused.iter().map(ToString::to_string).collect();
            report.resources = resources;
            report.prompts = prompts;
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
        // Credentials in the URL are a secret: shown masked.
        Transport::Http { url, .. } => format!("http: {}", reins::secrets::redact_url(url)),
    }
}

/// The resources and prompts of a server, after its tools.
fn render_extras(out: &mut String, r: &ServerReport) {
    let first_line = |s: &str| -> String { s.lines().next().unwrap_or("").trim().chars().take(100).collect() };
    if !r.resources.is_empty() {
        out.push_str("  resources:\n");
        for res in &r.resources {
            let kind = if res.template { "template " } else { "" };
            let mime = res.mime_type.as_deref().map(|m| format!(" ({m})")).unwrap_or_default();
            out.push_str(&format!("    {kind}{}  {}{mime}\n", res.uri, first_line(&res.name)));
        }
    }
    if !r.prompts.is_empty() {
        out.push_str("  prompts (reins run --mcp-prompt SERVER/NAME -a KEY=VALUE):\n");
        for p in &r.prompts {
            let args: Vec<String> =
                p.arguments.iter().map(|a| if a.required { a.name.clone() } else { format!("[{}]", a.name) }).collect();
            let args = if args.is_empty() { String::new() } else { format!(" {}", args.join(" ")) };
            out.push_str(&format!("    {}/{}{args}  {}\n", r.name, p.name, first_line(&p.description)));
        }
    }
}

fn render(r: &ServerReport) -> String {
    let mut out = String::new();
    if r.started {
        let server = r.server.as_deref().map(|s| format!(" ({s})")).unwrap_or_default();
        let n = r.tools.len();
        let protocol = r.protocol.as_deref().map(|p| format!(", protocol {p}")).unwrap_or_default();
        let (nr, np) = (r.resources.len(), r.prompts.len());
        out.push_str(&format!(
            "{}: started{server}{protocol}, {n} tool{}, {nr} resource{}, {np} prompt{}; {}\n",
            r.name,
            if n == 1 { "" } else { "s" },
            if nr == 1 { "" } else { "s" },
            if np == 1 { "" } else { "s" },
            r.transport
        ));
        let width = r.tools.iter().map(|t| t.name.len()).max().unwrap_or(0);
        for t in &r.tools {
            let first_line = t.description.lines().next().unwrap_or("").trim();
            let desc: String = first_line.chars().take(100).collect();
            let more = if first_line.chars().count() > 100 { "..." } else { "" };
            out.push_str(&format!("  {:width$}  {desc}{more}\n", t.name));
        }
        for refused in &r.refused {
            out.push_str(&format!("  left out: {refused}\n"));
        }
        render_extras(&mut out, r);
    } else {
        let error = r.error.as_deref().unwrap_or("unknown error");
        out.push_str(&format!("{}: did not start; {}\n  {error}\n", r.name, r.transport));
    }
    out
}
