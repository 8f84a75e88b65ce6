//! # reins-store — sessions that survive crashes
//!
//! An event-sourced session log for [Reins](reins) runs in one SQLite file (WAL mode, versioned schema
//! with migrations). A [`SessionJournal`] plugs into [`reins::AgentBuilder::journal`]: every model
//! response, transcript item and event of a run is queued in memory (bounded; a background writer takes
//! it when the run is quiet) and committed as one row before each model call and each tool batch, so a
//! crash loses at most the step in flight and a proposed call is durable before its side effect. A full or
//! read-only store ends the run `aborted` with the error.
//!
//! A recorded [`Session`] rebuilds its transcript ([`Session::messages`]), is continued with
//! [`Session::resume_state`] (calls cut short by a crash get an "interrupted" error result) and
//! [`Store::resume_journal`], and is replayed offline as a regression test with [`replay()`].
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use reins::{Agent, ModelResponse, ScriptedModel, Status};
//! let dir = std::env::temp_dir().join(format!("reins-store-doc-{}", std::process::id()));
//! let store = reins_store::Store::open(dir.join("sessions.db")).unwrap();
//! let model = ScriptedModel::new(vec![ModelResponse::text("hello")]);
//! let agent = Agent::builder(model).journal(store.journal(Default::default())).build().unwrap();
//! let outcome = agent.run("hi", tokio_util::sync::CancellationToken::new()).await;
//! assert_eq!(outcome.status, Status::Completed);
//! let session = store.load(outcome.session_id.as_deref().unwrap()).unwrap();
//! assert_eq!(session.messages().unwrap(), outcome.messages);
//! # std::fs::remove_dir_all(&dir).ok();
//! # });
//! ```

#![warn(missing_docs)]
// No function over 100 lines (the workspace's clippy.toml; test code may have longer ones).
#![warn(clippy::too_many_lines)]
#![cfg_attr(test, allow(clippy::too_many_lines))]

mod child;
mod chunk;
mod error;
mod images;
mod journal;
mod owner;
pub mod replay;
mod schema;
mod session;
mod store;

pub use error::StoreError;
pub use journal::{Prices, RunLog, SessionJournal, SessionMeta};
pub use owner::{INTERRUPTED_STATUS, Liveness, liveness};
pub use replay::{Divergence, ReplayReport, ReplayTools, replay, replay_runs};

pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use session::{
    ChildRunRecord, ChildRunStartData, Entry, INTERRUPTED, ResponseData, RunRecord, RunStartData, Session, kind,
};
pub use store::{Durability, SessionSummary, Store, StoreOptions, default_path};
