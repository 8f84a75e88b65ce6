//! Looking at a recorded eval again: re-scoring its attempts with the suite's checks as they are now (no model
//! called), and replaying its attempts' sessions against the current build.

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::check::combine;
use crate::error::EvalError;
use crate::record::{EvalDir, EvalMeta, now};
use crate::run::{Eval, completed, copy_dir, final_attempts, new_id, rescore};
use crate::suite::Suite;

/// Re-scores the eval `id` under `root` with the checks of `suite` (default: the suite file it ran, as it is
/// now), from what its attempts recorded: no agent is built and no model called. A verifier is not run again (the
/// attempt's workspace is gone): its recorded result is kept. The result is a new eval (its `rescored_from` names the
/// old one), which `diff` compares with the old one.
pub fn rescore_eval(root: &Path, id: &str, suite: Option<&Path>) -> Result<(EvalDir, EvalMeta), EvalError> {
    let (dir, meta) = EvalDir::open(root, id)?;
    let suite = Suite::load(suite.unwrap_or_else(|| Path::new(&meta.suite)))?;
    let attempts = final_attempts(&dir.attempts()?);
    let new = EvalMeta {
        id: new_id(),
        created_at: now(),
        suite: suite.path.display().to_string(),
        suite_name: suite.name.clone(),
        suite_text: suite.text.clone(),
        rescored_from: Some(meta.id.clone()),
        ..meta.clone()
    };
    let out = EvalDir::create(root, &new)?;
    for mut a in attempts {
        if let (None, Some(seen), Some(case)) = (&a.infra, &a.observed, suite.cases.iter().find(|c| c.id == a.case)) {
            let mut results = rescore(&case.checks, seen, &a.checks);
            if case.checks.is_empty() {
                results.push(completed(seen));
            }
            let (score, passed) = combine(&results);
            a.checks = results;
            a.score = score;
            a.passed = passed;
        }
        out.append(&a)?;
    }
    Ok((out, new))
}

/// One attempt replayed.
#[derive(Clone, Debug, Serialize)]
pub struct Replayed {
    /// The agent's label.
    pub agent: String,
    /// The case.
    pub case: String,
    /// The epoch.
    pub epoch: u32,
    /// The session replayed.
    pub session_id: String,
    /// The first difference from the recording (`None`: reproduced exactly).
    pub divergence: Option<reins_store::Divergence>,
}

impl Eval {
    /// Replays every scored attempt's session against the current build: the recorded model responses, the tools
    /// for real in a fresh copy of the case's fixture. A divergence names the case (a fixture file changed, the
    /// harness behaves otherwise).
    pub async fn replay(&self, store: &reins_store::Store) -> Result<Vec<Replayed>, EvalError> {
        let mut out = Vec::new();
        for a in final_attempts(&self.dir.attempts()?) {
            let (None, Some(session_id)) = (&a.infra, &a.session_id) else { continue };
            let fail = |m: String| EvalError::Record {
                id: self.meta.id.clone(),
                message: format!("case {} epoch {}: {m}", a.case, a.epoch),
            };
            let session = store.load(session_id).map_err(|e| fail(e.to_string()))?;
            let runs = session.runs().map_err(|e| fail(e.to_string()))?;
            let config = runs.first().and_then(|r| r.start.config.clone()).unwrap_or(serde_json::Value::Null);
            let mut def = reins_agent::AgentDef::from_session_config(&config)
                .map_err(|e| fail(e.to_string()))?
                .unwrap_or_default();
            let case = self.suite().cases.iter().find(|c| c.id == a.case);
            let root = tempfile::Builder::new()
                .prefix("reins-eval-replay-")
                .tempdir()
                .and_then(|r| {
                    std::fs::set_permissions(r.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).map(|()| r)
                })
                .map_err(|e| EvalError::Io(format!("cannot make a replay directory: {e}")))?;
            let ws = root.path().join("workspace");
            match case.and_then(|c| c.workspace.as_ref()) {
                Some(fixture) => copy_dir(fixture, &ws)
                    .map_err(|e| EvalError::Io(format!("cannot copy the fixture {}: {e}", fixture.display())))?,
                None => std::fs::create_dir(&ws).map_err(|e| EvalError::Io(format!("cannot make a workspace: {e}")))?,
            }
            if def.workspace.path.is_some() {
                def.workspace.path = Some(ws.clone());
            }
            let tools = def.build_tools().map_err(|e| fail(e.to_string()))?;
            let registry = reins::Registry::new(tools).map_err(|e| fail(e.to_string()))?;
            let context = def.build_context().map_err(|e| fail(e.to_string()))?;
            let tools = reins_store::ReplayTools::Live(Arc::new(registry));
            let report = reins_store::replay_runs(&session, |_| (tools.clone(), context.clone()))
                .await
                .map_err(|e| fail(e.to_string()))?;
            out.push(Replayed {
                agent: self.meta.agents.get(a.agent).map(|x| x.label.clone()).unwrap_or_default(),
                case: a.case.clone(),
                epoch: a.epoch,
                session_id: session_id.clone(),
                divergence: report.divergence,
            });
        }
        Ok(out)
    }
}
