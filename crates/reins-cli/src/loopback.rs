//! The address a server of the CLI listens on (`--listen` of `reins ui` and `reins mcp serve`): loopback only.

use crate::exit::{CliError, usage};

/// The address of `--listen` (of the command `what`): a loopback IP:PORT, anything else refused (what the
/// servers of `reins ui` and `reins mcp serve` show holds prompts, files and command output).
pub fn loopback(listen: &str, what: &str) -> Result<std::net::SocketAddr, CliError> {
    let addr: std::net::SocketAddr = listen.parse().map_err(|_| {
        usage(format!("--listen {listen:?}: expected a loopback IP:PORT such as 127.0.0.1:8080 or [::1]:8080"))
    })?;
    if !addr.ip().is_loopback() {
        return Err(usage(format!(
            "--listen {addr}: not a loopback address; {what} serves 127.0.0.1 or ::1 only (sessions hold prompts, \
             files and command output)"
        )));
    }
    Ok(addr)
}
