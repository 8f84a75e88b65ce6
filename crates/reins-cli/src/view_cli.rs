//! `reins ui [--listen 127.0.0.1:PORT]` (the store's sessions served on loopback, behind a token); the server is
//! `reins-view`'s (`reins sessions view`, one session's page in a file, is `session_page`'s).

use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::exit::CliError;
use crate::loopback::loopback;
use crate::store_open::{StoreFlag, open_store};

/// `reins ui`.
#[derive(Args, Debug)]
pub struct UiArgs {
    /// The loopback address to listen on, IP:PORT (127.0.0.1:PORT or [::1]:PORT; port 0: any free port).
    /// Any other address is refused.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub listen: String,
    #[command(flatten)]
    pub store: StoreFlag,
}

/// `reins ui`: serves until Ctrl-C / SIGTERM / SIGHUP, then exits 0.
pub async fn ui(args: UiArgs) -> Result<u8, CliError> {
    let addr = loopback(&args.listen, "reins ui")?;
    let cancel = CancellationToken::new();
    crate::signals::cancel_on_signals(cancel.clone(), "reins ui")?;
    let store = open_store(args.store.store.as_deref())?;
    let token = reins_view::server::new_token().map_err(|e| CliError::Internal(e.into()))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::Internal(anyhow::anyhow!("cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr().map_err(|e| CliError::Internal(e.into()))?;
    errln!("reins ui: serving {} read-only on {local}; Ctrl-C stops it", store.path().display());
    outln!("http://{local}/?token={token}");
    crate::output::flush_stdout();
    reins_view::server::serve(listener, store, token, cancel)
        .await
        .map_err(|e| CliError::Internal(anyhow::anyhow!("reins ui: {e}")))?;
    errln!("reins ui: stopped");
    Ok(0)
}
