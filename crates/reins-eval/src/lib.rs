//! # reins-eval — show that an agent does its job
//!
//! Suites of cases (TOML, [`Suite`]) run against one or more agent files: each attempt in a fresh private copy
//! of the case's workspace fixture, recorded as a session in the store (tagged with the eval, the case and the
//! epoch in its config's `eval` key), then scored by [`Check`]s — on the answer or structured output, on the
//! trajectory, or by a verifier command whose files the agent never saw. [`Eval::run`] is resumable (completed
//! attempts never run again), concurrent, and stops dispatching at a suite budget; [`Summary`] has the per-case
//! reducers (mean, pass@k, pass^k) and the suite's mean with a clustered standard error; [`diff`] compares two
//! agents case by case (paired difference, exact McNemar, seeded paired bootstrap). The statistics are pure
//! functions in [`stats`].

#![warn(missing_docs)]
// No function over 100 lines (the workspace's clippy.toml; test code may have longer ones).
#![warn(clippy::too_many_lines)]
#![cfg_attr(test, allow(clippy::too_many_lines))]

mod again;
mod check;
mod error;
mod harbor;
mod html;
mod record;
mod report;
mod run;
pub mod stats;
mod suite;

pub use again::{Replayed, Rescored, rescore_eval};
pub use check::{Call, Check, CheckDef, CheckResult, Judge, Kind, Observed, On, Verifier, combine, subset};
pub use error::EvalError;
pub use html::{PAGE_SIZE, SESSIONS_DIR, SessionPages, html, html_linked, write_session_pages};
pub use record::{AgentRecord, Attempt, EvalDir, EvalLock, EvalMeta, Options, evals_root};
pub use report::{
    AgentSummary, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CaseSummary, Diff, Flip, Summary, diff, diff_text, junit, table,
};
pub use run::{Eval, Progress, RunEnd, completed, copy_dir, final_attempts};
pub use suite::{Case, CaseFile, MAX_SUITE_BYTES, Suite, SuiteFile, agent_for, load_agent};
