//! The streamable HTTP transport.

use std::collections::BTreeMap;

use rmcp::service::{RoleClient, RunningService};

/// Connects to a streamable HTTP endpoint and completes `initialize`.
pub(crate) async fn connect<H: rmcp::ClientHandler>(
    _handler: H,
    url: &str,
    _headers: &BTreeMap<String, String>,
) -> Result<RunningService<RoleClient, H>, String> {
    Err(format!("streamable HTTP ({url}) is not supported by this build"))
}
