//! A client for the OAuth scenarios (`auth/*`) of the MCP conformance suite (`conformance client --command ...`
//! appends the server URL and names the scenario in `MCP_CONFORMANCE_SCENARIO`). It connects with reins-mcp;
//! when the server wants a login it runs `reins_mcp::auth::login` — the suite's authorization endpoint redirects at
//! once, so this plays the browser by following that one redirect to the loopback — then connects again, lists
//! the tools and calls each. A call refused for want of access (403 `insufficient_scope`) is what
//! `reins mcp login NAME --scope SCOPE` answers: this logs in again for that scope (the login keeps the scopes
//! granted before), connects again and calls again. Token files go beneath `$XDG_DATA_HOME` (give it a scratch directory:
//! `--command "env XDG_DATA_HOME=/tmp/x target/debug/examples/conformance_auth_client"`). Exit 0 when every call
//! was answered.

use reins_mcp::auth::LoginOptions;
use reins_mcp::{McpError, McpServer, ServerConfig};
use tokio_util::sync::CancellationToken;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let Some(url) = std::env::args().next_back() else {
        eprintln!("usage: conformance_auth_client URL");
        return std::process::ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    eprintln!("scenario {scenario:?}, server {url}");
    let Ok(config) = ServerConfig::http("conf", &url) else { return std::process::ExitCode::from(2) };
    // The suite's client ID metadata document (used where the authorization server supports them).
    let mut options = LoginOptions {
        client_metadata_url: Some("https://conformance-test.local/client-metadata.json".to_owned()),
        ..LoginOptions::default()
    };
    // Pre-registration scenarios hand the client's ID and secret over in the context.
    if let Ok(context) = std::env::var("MCP_CONFORMANCE_CONTEXT")
        && let Ok(context) = serde_json::from_str::<serde_json::Value>(&context)
    {
        options.client_id = context["client_id"].as_str().map(str::to_owned);
        options.client_secret = context["client_secret"].as_str().map(str::to_owned);
    }
    for _ in 0..4 {
        let connected = McpServer::connect(config.clone()).await;
        if let Ok(server) = &connected {
            match use_tools(server).await {
                Used::Done(code) => return code,
                Used::NeedsScope(scope) => options.scopes = vec![scope],
                // Its login stopped being accepted (the authorization server changed): log in again.
                Used::NeedsLogin => {}
            }
        }
        match connected {
            Ok(_) => {
                let login = reins_mcp::auth::login(&config, &options, |url| {
                    tokio::spawn(browse(url.to_owned()));
                });
                if let Err(e) = login.await {
                    eprintln!("login again: {e}");
                    return std::process::ExitCode::from(1);
                }
            }
            Err(McpError::LoginRequired { .. }) => {
                let login = reins_mcp::auth::login(&config, &options, |url| {
                    tokio::spawn(browse(url.to_owned()));
                });
                if let Err(e) = login.await {
                    eprintln!("login: {e}");
                    return std::process::ExitCode::from(1);
                }
            }
            Err(e) => {
                eprintln!("{e}");
                return std::process::ExitCode::from(1);
            }
        }
    }
    std::process::ExitCode::from(1)
}

/// What calling the tools came to.
enum Used {
    /// Every call was made: the exit code.
    Done(std::process::ExitCode),
    /// A call was refused for want of this scope.
    NeedsScope(String),
    /// The server no longer takes the login.
    NeedsLogin,
}

/// Lists the tools and calls each with no arguments (`add_numbers` with two).
async fn use_tools(server: &McpServer) -> Used {
    let cancel = CancellationToken::new();
    let tools = match server.list_tools().await {
        Ok(t) => t,
        Err(McpError::LoginRequired { .. }) => {
            server.shutdown().await;
            return Used::NeedsLogin;
        }
        Err(e) => {
            eprintln!("{e}");
            return Used::Done(std::process::ExitCode::from(1));
        }
    };
    let mut ok = true;
    for tool in tools {
        let args = if tool.name == "add_numbers" { serde_json::json!({"a": 5, "b": 3}) } else { serde_json::json!({}) };
        if let Err(e) = server.call(&tool.name, args, &cancel).await {
            eprintln!("{}: {e}", tool.name);
            if let Some(scope) = server.wanted_scope() {
                server.shutdown().await;
                return Used::NeedsScope(scope);
            }
            ok = false;
        }
    }
    server.shutdown().await;
    Used::Done(std::process::ExitCode::from(if ok { 0 } else { 1 }))
}

/// The browser: opens the authorization URL and follows its redirects (the suite's answers at once) until the
/// loopback redirect has been opened.
async fn browse(url: String) {
    let Ok(client) = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build() else { return };
    let mut next = url;
    for _ in 0..5 {
        let Ok(response) = client.get(&next).send().await else { return };
        let Some(location) = response.headers().get(reqwest::header::LOCATION).and_then(|l| l.to_str().ok()) else {
            return;
        };
        let Ok(base) = reqwest::Url::parse(&next) else { return };
        let Ok(target) = base.join(location) else { return };
        next = target.to_string();
    }
}
