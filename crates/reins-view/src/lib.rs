//! # reins-view — a recorded session to look at
//!
//! One self-contained HTML page of a [`reins_store::Session`]: its runs on a time axis with each model call,
//! tool call and compaction as a bar (parallel tool calls in lanes side by side, failures and open calls in
//! colour, limits, compactions and approvals marked), tokens, cache reads and cost per step as a chart, and
//! the transcript with tool arguments and results in expanders. The page makes no network request and
//! works from `file://`: its style and script are inline under a Content-Security-Policy with a per-page
//! nonce, and the session is embedded as JSON ([`escape::json_for_html`]) that the script reads as data and
//! shows as text only.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use reins::{Agent, ModelResponse, ScriptedModel};
//! let dir = tempfile::tempdir().unwrap();
//! let store = reins_store::Store::open(dir.path().join("sessions.db")).unwrap();
//! let model = ScriptedModel::new(vec![ModelResponse::text("</script><b>hi</b>")]);
//! let agent = Agent::builder(model).journal(store.journal(Default::default())).build().unwrap();
//! let outcome = agent.run("hello", tokio_util::sync::CancellationToken::new()).await;
//! let session = store.load(outcome.session_id.as_deref().unwrap()).unwrap();
//! let html = reins_view::session_html(&reins_view::build(&session)).unwrap();
//! assert!(html.contains("default-src 'none'"));
//! assert!(!html.contains("</script><b>"));
//! # });
//! ```

#![warn(missing_docs)]
// No function over 100 lines (the workspace's clippy.toml; test code may have longer ones).
#![warn(clippy::too_many_lines)]
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod escape;
pub mod model;
pub mod page;
pub mod server;

pub use model::{View, build};
pub use page::{PageKind, csp, page, session_html};

/// Why a page could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    /// The operating system gave no random bytes for the page's nonce.
    #[error("no random bytes for the page's nonce: {0}")]
    Random(String),
    /// The view did not serialize.
    #[error("the view did not serialize: {0}")]
    Serialize(String),
}
