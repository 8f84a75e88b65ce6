//! Looking at a recorded eval again: re-scoring its attempts with the suite's checks as they are now (no model
//! called; a verifier run again on the workspace rebuilt by replaying the attempt's session), and replaying its
//! attempts' sessions against the current build.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::check::{Check, CheckResult, Kind, combine};
use crate::error::EvalError;
use crate::record::{Attempt, EvalDir, EvalMeta, now};
use crate::run::{Eval, completed, copy_dir, final_attempts, new_id, verify};
use crate::suite::{Case, Suite};

/// What a re-score did beyond scoring the recorded attempts again.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Rescored {
    /// Attempts whose workspace was rebuilt by replaying their session (their case has a verifier).
    pub rebuilt: usize,
    /// Verifier runs on those workspaces.
    pub verifier_runs: usize,
    /// Attempts that could not be re-scored for the infrastructure's reasons (the replay diverged, the fixture
    /// could not be copied, the verifier crashed, a judge's verdict was never recorded): kept apart, as in a run.
    pub infra: usize,
}

/// Re-scores the eval `id` under `root` with the checks of `checks` (a suite file whose cases are matched by id;
/// default: the suite file the eval ran, as it is now), from what its attempts recorded, with no model called: the
/// trajectory and answer checks read the recorded run; a judge's recorded verdict is reused; a verifier runs again,
/// its files as they are now, on the attempt's workspace rebuilt — the case's fixture copied fresh and the
/// attempt's session replayed in it from `store` (the recorded model responses, the tools for real). An attempt
/// whose replay diverges is an infrastructure failure of the re-score (its rebuilt workspace is not the one the
/// agent left). The result is a new eval (its `rescored_from` names the old one), which `diff` compares with it.
pub async fn rescore_eval(
    root: &Path,
    store: &reins_store::Store,
    id: &str,
    checks: Option<&Path>,
) -> Result<(EvalDir, EvalMeta, Rescored), EvalError> {
    let (dir, meta) = EvalDir::open(root, id)?;
    let suite = Suite::load(checks.unwrap_or_else(|| Path::new(&meta.suite)))?;
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
    // The fixtures the attempts started from are those of the suite the eval ran (as it is now), whatever suite
    // gives the checks; `checks`' own when that suite cannot be read any more.
    let ran = match checks {
        Some(_) => Suite::load(Path::new(&meta.suite)).ok(),
        None => None,
    };
    let out = EvalDir::create(root, &new)?;
    let mut done = Rescored::default();
    for a in attempts {
        let a = match suite.cases.iter().find(|c| c.id == a.case) {
            Some(case) => {
                let fixture = match &ran {
                    Some(s) => s.cases.iter().find(|c| c.id == a.case).and_then(|c| c.workspace.as_deref()),
                    None => case.workspace.as_deref(),
                };
                rescore_attempt(a, case, fixture, store, &mut done).await
            }
            // A case the suite no longer has: kept as recorded.
            None => a,
        };
        out.append(&a)?;
    }
    Ok((out, new, done))
}

/// `a` scored again by `case`'s checks, a verifier on its workspace rebuilt from `fixture`. An attempt that never
/// ran (nothing observed) is kept as it was.
async fn rescore_attempt(
    mut a: Attempt,
    case: &Case,
    fixture: Option<&Path>,
    store: &reins_store::Store,
    done: &mut Rescored,
) -> Attempt {
    let Some(seen) = a.observed.clone() else { return a };
    a.infra = None;
    let needs_workspace = case.checks.iter().any(|c| matches!(c.kind, Kind::Verifier(_)));
    let rebuilt = if needs_workspace {
        let Some(session) = a.session_id.clone() else {
            return infra(a, "rescore: the workspace could not be rebuilt: no session was recorded".into(), done);
        };
        done.rebuilt += 1;
        match rebuild(store, &session, fixture).await {
            Ok(r) => match &r.divergence {
                None => Some(r),
                Some(d) => {
                    return infra(
                        a,
                        format!(
                            "rescore: the workspace could not be rebuilt: the replay of session {session} diverged ({})",
                            one_line(d)
                        ),
                        done,
                    );
                }
            },
            Err(why) => return infra(a, format!("rescore: the workspace could not be rebuilt: {why}"), done),
        }
    } else {
        None
    };
    let recorded = std::mem::take(&mut a.checks);
    let mut results = Vec::new();
    for (i, check) in case.checks.iter().enumerate() {
        let result = match (&check.kind, &rebuilt) {
            (Kind::Verifier(v), Some(r)) => {
                done.verifier_runs += 1;
                verify(check, v, &r.workspace, r.root.path(), &case.id).await
            }
            (Kind::Judge(_), _) => recorded_verdict(&case.checks, i, &recorded),
            _ => Ok(check.score(&seen)),
        };
        match result {
            Ok(r) => results.push(r),
            Err(why) => {
                a.checks = results;
                return infra(a, why, done);
            }
        }
    }
    if case.checks.is_empty() {
        results.push(completed(&seen));
    }
    let (score, passed) = combine(&results);
    a.checks = results;
    a.score = score;
    a.passed = passed;
    a
}

fn infra(mut a: Attempt, why: String, done: &mut Rescored) -> Attempt {
    done.infra += 1;
    a.infra = Some(why);
    a.score = 0.0;
    a.passed = false;
    a
}

/// A divergence on one line.
fn one_line(d: &reins_store::Divergence) -> String {
    d.to_string().lines().map(str::trim).collect::<Vec<_>>().join("; ")
}

/// The recorded verdict of the judge `checks[i]`: the recorded result of the same kind at the same rank among the
/// checks of that kind (a re-score asks no model).
fn recorded_verdict(checks: &[Check], i: usize, recorded: &[CheckResult]) -> Result<CheckResult, String> {
    let name = &checks[i].name;
    let rank = checks[..i].iter().filter(|c| &c.name == name).count();
    let mut r = recorded
        .iter()
        .filter(|r| &r.kind == name)
        .nth(rank)
        .cloned()
        .ok_or_else(|| format!("rescore: the {name} check has no recorded verdict (a re-score asks no model)"))?;
    r.weight = checks[i].weight;
    Ok(r)
}

/// An attempt's workspace made again.
struct Rebuilt {
    /// The private directory holding `workspace` (and, once a verifier runs, its files and logs); removed on drop.
    root: tempfile::TempDir,
    /// The workspace as the replayed session left it.
    workspace: PathBuf,
    /// Where the replay first differed from the recording (`None`: reproduced exactly).
    divergence: Option<reins_store::Divergence>,
}

/// The case's `fixture` copied fresh into a private directory (as a run does) and the session `session_id`
/// replayed in it: the recorded model responses (no model called), the recorded agent's tools for real.
async fn rebuild(store: &reins_store::Store, session_id: &str, fixture: Option<&Path>) -> Result<Rebuilt, String> {
    let session = store.load(session_id).map_err(|e| e.to_string())?;
    let runs = session.runs().map_err(|e| e.to_string())?;
    let config = runs.first().and_then(|r| r.start.config.clone()).unwrap_or(serde_json::Value::Null);
    let mut def = reins_agent::AgentDef::from_session_config(&config).map_err(|e| e.to_string())?.unwrap_or_default();
    let root = tempfile::Builder::new()
        .prefix("reins-eval-replay-")
        .tempdir()
        .and_then(|r| {
            std::fs::set_permissions(r.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).map(|()| r)
        })
        .map_err(|e| format!("cannot make a directory for the replay: {e}"))?;
    let workspace = root.path().join("workspace");
    match fixture {
        Some(f) => copy_dir(f, &workspace).map_err(|e| format!("cannot copy the fixture {}: {e}", f.display()))?,
        None => std::fs::create_dir(&workspace).map_err(|e| format!("cannot make a workspace: {e}"))?,
    }
    if def.workspace.path.is_some() {
        def.workspace.path = Some(workspace.clone());
    }
    let tools = def.build_tools().map_err(|e| e.to_string())?;
    let registry = reins::Registry::new(tools).map_err(|e| e.to_string())?;
    let context = def.build_context().map_err(|e| e.to_string())?;
    let tools = reins_store::ReplayTools::Live(Arc::new(registry));
    let report =
        reins_store::replay_runs(&session, |_| (tools.clone(), context.clone())).await.map_err(|e| e.to_string())?;
    Ok(Rebuilt { root, workspace, divergence: report.divergence })
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
            let fixture = self.suite().cases.iter().find(|c| c.id == a.case).and_then(|c| c.workspace.as_deref());
            let rebuilt = rebuild(store, session_id, fixture).await.map_err(|m| EvalError::Record {
                id: self.meta.id.clone(),
                message: format!("case {} epoch {}: {m}", a.case, a.epoch),
            })?;
            out.push(Replayed {
                agent: self.meta.agents.get(a.agent).map(|x| x.label.clone()).unwrap_or_default(),
                case: a.case.clone(),
                epoch: a.epoch,
                session_id: session_id.clone(),
                divergence: rebuilt.divergence,
            });
        }
        Ok(out)
    }
}
