//! `reins mcp login NAME` and `reins mcp logout NAME`: OAuth for HTTP MCP servers (see `reins_mcp::auth`).

use std::io::IsTerminal as _;
use std::time::Duration;

use clap::Args;
use reins_mcp::auth::LoginOptions;
use reins_mcp::{ServerConfig, Transport};

use crate::exit::{CliError, usage};
use crate::mcp_servers::McpFlags;

/// Flags of `reins mcp login`.
#[derive(Args, Debug)]
pub struct McpLoginArgs {
    /// The server to log in to: an HTTP server of --mcp, of the agent file's [mcp.NAME] tables or of the user
    /// config.
    #[arg(value_name = "NAME")]
    name: String,
    #[command(flatten)]
    flags: McpFlags,
    #[command(flatten)]
    agent_file: crate::run_args::AgentFileFlags,
    /// A client ID registered with the authorization server beforehand (no registration then). Its redirect
    /// URI must allow http://127.0.0.1 on any port with the path /callback. A confidential client's secret is
    /// read from REINS_MCP_CLIENT_SECRET.
    #[arg(long = "client-id", value_name = "ID")]
    client_id: Option<String>,
    /// The https URL of a client ID metadata document describing Reins, used as the client ID when the
    /// authorization server supports them; otherwise Reins registers itself dynamically.
    #[arg(long = "client-metadata-url", value_name = "URL")]
    client_metadata_url: Option<String>,
    /// A scope to ask for (repeatable); by default those the server's metadata names.
    #[arg(long = "scope", value_name = "SCOPE")]
    scopes: Vec<String>,
    /// How long to wait for the browser to come back to Reins.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    timeout: Duration,
    /// Prints the URL to open without trying to open a browser.
    #[arg(long = "no-browser")]
    no_browser: bool,
}

/// Flags of `reins mcp logout`.
#[derive(Args, Debug)]
pub struct McpLogoutArgs {
    /// The server whose login to forget.
    #[arg(value_name = "NAME")]
    name: String,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    reins::parse_duration(s).map_err(|e| e.to_string())
}

/// `reins mcp login NAME`.
pub async fn login(args: McpLoginArgs) -> Result<u8, CliError> {
    let config = server(&args)?;
    let options = LoginOptions {
        client_id: args.client_id.clone(),
        // A confidential client's secret comes from the environment, never the command line.
        client_secret: args.client_id.as_ref().and_then(|_| std::env::var("REINS_MCP_CLIENT_SECRET").ok()),
        client_metadata_url: args.client_metadata_url.clone(),
        scopes: args.scopes.clone(),
        timeout: Some(args.timeout),
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    crate::signals::cancel_on_signals(cancel.clone(), "mcp login")?;
    let browser = !args.no_browser && std::io::stderr().is_terminal();
    let show = |url: &str| {
        errln!("reins: to log in to MCP server {:?}, open this URL in a browser:", config.name);
        errln!("  {url}");
        if browser {
            open_browser(url);
        }
    };
    let result = tokio::select! {
        r = reins_mcp::auth::login(&config, &options, show) => r,
        () = cancel.cancelled() => {
            errln!("reins: mcp login was cancelled");
            return Ok(7);
        }
    };
    match result {
        Ok(path) => {
            outln!("Logged in to MCP server {:?}; its tokens are in {}", config.name, path.display());
            Ok(0)
        }
        Err(e) => {
            errln!("reins: error: {e}");
            Ok(1)
        }
    }
}

/// The configured HTTP server named by `args`.
fn server(args: &McpLoginArgs) -> Result<ServerConfig, CliError> {
    let configs = crate::mcp_cli::configs(&args.flags, &args.agent_file)?;
    let Some(config) = configs.into_iter().find(|c| c.name == args.name) else {
        return Err(usage(format!(
            "no MCP server named {:?} is configured: pass --mcp {}=URL, or --agent FILE with an [mcp.{}] table",
            args.name, args.name, args.name
        )));
    };
    match &config.transport {
        Transport::Http { .. } => Ok(config),
        Transport::Stdio { .. } => {
            Err(usage(format!("MCP server {:?} is started as a process: only an HTTP server logs in", args.name)))
        }
    }
}

/// Opens `url` in the desktop's browser, when there is a desktop; a failure is silent (the URL is printed).
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else if std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some() {
        "xdg-open"
    } else {
        return;
    };
    let spawned = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Ok(mut child) = spawned {
        // Reaped off the main path: an opener that lingers never holds the login up.
        std::thread::spawn(move || child.wait());
    }
}

/// `reins mcp logout NAME`: the tokens revoked when the authorization server offers it, the file removed.
pub async fn logout(args: &McpLogoutArgs) -> Result<u8, CliError> {
    use reins_mcp::auth::LoggedOut;
    reins_mcp::check_server_name(&args.name).map_err(|e| usage(e.to_string()))?;
    match reins_mcp::auth::logout(&args.name).await {
        Ok(LoggedOut::Revoked) => {
            outln!("Logged out of MCP server {:?}: its tokens were revoked and removed", args.name);
            Ok(0)
        }
        Ok(LoggedOut::NotRevoked(why)) => {
            errln!("reins: warning: the tokens of MCP server {:?} were not revoked: {why}", args.name);
            outln!("Logged out of MCP server {:?}: its tokens were removed", args.name);
            Ok(0)
        }
        Ok(LoggedOut::NoLogin) => {
            errln!("reins: MCP server {:?} had no login", args.name);
            Ok(1)
        }
        Err(e) => Err(CliError::Internal(anyhow::anyhow!("{e}"))),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_hint_names_the_command() {
        assert_eq!(reins_mcp::auth::login_hint("web"), "MCP server \"web\" needs a login: run `reins mcp login web`");
    }
}
