//! Running an eval: every (epoch, case, agent) attempt in a fresh private workspace, recorded as a session,
//! checked, and appended to the eval's record; resumable, concurrent, under a suite budget.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::check::{Check, CheckResult, Judge, Kind, Observed, Verifier, combine};
use crate::error::EvalError;
use crate::record::{AgentRecord, Attempt, EvalDir, EvalMeta, Options, now};
use crate::suite::{Case, Suite, agent_for, load_agent};

/// An eval ready to run (or to continue).
pub struct Eval {
    /// Its record.
    pub dir: EvalDir,
    /// What it is.
    pub meta: EvalMeta,
    suite: Suite,
    /// The definition each (agent, case) runs, by agent index then case index.
    defs: Vec<Vec<reins_agent::AgentDef>>,
}

/// How a call of [`Eval::run`] ended.
#[derive(Clone, Debug, PartialEq)]
pub struct RunEnd {
    /// Attempts made by this call.
    pub ran: usize,
    /// Attempts found already done (a resume).
    pub skipped: usize,
    /// Why dispatch stopped early (the budget, a cancellation): the eval is resumable.
    pub stopped: Option<String>,
}

/// Progress after each attempt.
#[derive(Clone, Debug)]
pub struct Progress<'a> {
    /// The attempt that ended.
    pub attempt: &'a Attempt,
    /// Final attempts done (this eval, resumes included).
    pub done: usize,
    /// Attempts planned.
    pub total: usize,
    /// Passed among them.
    pub passed: usize,
    /// Cost so far.
    pub cost_usd: f64,
    /// Whether it will be retried (an infrastructure failure with retries left).
    pub retrying: bool,
}

fn label_of(path: &Path, taken: &[String]) -> String {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "agent".into());
    let mut label = stem.clone();
    let mut n = 2;
    while taken.contains(&label) {
        label = format!("{stem}-{n}");
        n += 1;
    }
    label
}

fn definitions(suite: &Suite, agents: &[Option<PathBuf>]) -> Result<Vec<Vec<reins_agent::AgentDef>>, EvalError> {
    let mut cache: BTreeMap<PathBuf, reins_agent::AgentDef> = BTreeMap::new();
    let mut load = |p: &Path| -> Result<reins_agent::AgentDef, EvalError> {
        if let Some(d) = cache.get(p) {
            return Ok(d.clone());
        }
        let d = load_agent(p)?;
        cache.insert(p.to_path_buf(), d.clone());
        Ok(d)
    };
    let mut out = Vec::new();
    for agent in agents {
        let mut row = Vec::new();
        for case in &suite.cases {
            let path = case.own_agent.as_ref().or(agent.as_ref()).ok_or_else(|| EvalError::Suite {
                file: case.origin.clone(),
                key: Some("agent".into()),
                message: format!(
                    "case {:?} has no agent: name one in the suite (agent = FILE), the case, or --agent",
                    case.id
                ),
            })?;
            let def = agent_for(&load(path)?, case)?;
            def.validate().map_err(|e| EvalError::Suite {
                file: case.origin.clone(),
                key: e.path.clone(),
                message: format!("the agent of case {:?}: {}", case.id, e.message),
            })?;
            row.push(def);
        }
        out.push(row);
    }
    Ok(out)
}

/// A new eval id: `ev-` and twelve hex digits.
pub(crate) fn new_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("ev-{}", &u[..12])
}

impl Eval {
    /// A new eval of the suite at `suite` with `agents` (none: the suite's default agent), recorded under `root`.
    pub fn create(root: &Path, suite: &Path, agents: &[PathBuf], options: Options) -> Result<Eval, EvalError> {
        let suite = Suite::load(suite)?;
        let paths: Vec<Option<PathBuf>> = if agents.is_empty() {
            vec![suite.agent.clone()]
        } else {
            agents.iter().map(|a| Some(reins_agent::absolute(a))).collect()
        };
        let defs = definitions(&suite, &paths)?;
        let mut records: Vec<AgentRecord> = Vec::new();
        for p in &paths {
            let taken: Vec<String> = records.iter().map(|r| r.label.clone()).collect();
            records.push(AgentRecord {
                label: p.as_deref().map_or_else(|| "cases".into(), |p| label_of(p, &taken)),
                path: p.as_ref().map(|p| p.display().to_string()),
                text: p.as_ref().and_then(|p| std::fs::read_to_string(p).ok()),
            });
        }
        let meta = EvalMeta {
            id: new_id(),
            created_at: now(),
            suite: suite.path.display().to_string(),
            suite_name: suite.name.clone(),
            suite_text: suite.text.clone(),
            cases: suite.cases.iter().map(|c| c.id.clone()).collect(),
            agents: records,
            options,
            reins_version: env!("CARGO_PKG_VERSION").into(),
            rescored_from: None,
        };
        let dir = EvalDir::create(root, &meta)?;
        Ok(Eval { dir, meta, suite, defs })
    }

    /// The recorded eval `id` under `root`, its suite and agent files read again (they must not have changed).
    pub fn open(root: &Path, id: &str) -> Result<Eval, EvalError> {
        let (dir, meta) = EvalDir::open(root, id)?;
        let suite = Suite::load(Path::new(&meta.suite))?;
        if suite.text != meta.suite_text {
            return Err(EvalError::Record {
                id: meta.id.clone(),
                message: format!("the suite {} changed since the eval started: start a new eval", meta.suite),
            });
        }
        for a in &meta.agents {
            if let Some(p) = &a.path {
                if std::fs::read_to_string(p).ok() != a.text {
                    return Err(EvalError::Record {
                        id: meta.id.clone(),
                        message: format!("the agent file {p} changed since the eval started: start a new eval"),
                    });
                }
            }
        }
        let paths: Vec<Option<PathBuf>> = meta.agents.iter().map(|a| a.path.as_ref().map(PathBuf::from)).collect();
        let defs = definitions(&suite, &paths)?;
        Ok(Eval { dir, meta, suite, defs })
    }

    /// The suite.
    pub fn suite(&self) -> &Suite {
        &self.suite
    }

    /// Runs every attempt not yet done, `options.jobs` at once, recording each in `store` and in the eval's
    /// record. Stops dispatching when the budget is spent or `cancel` is cancelled (attempts in flight then end
    /// `aborted` and are not recorded as done: a resume runs them again).
    pub async fn run(
        &self,
        store: &reins_store::Store,
        cancel: &CancellationToken,
        progress: &mut dyn FnMut(&Progress<'_>),
    ) -> Result<RunEnd, EvalError> {
        let _lock = self.dir.lock()?;
        let options = &self.meta.options;
        let previous = self.dir.attempts()?;
        let mut tries: BTreeMap<(usize, String, u32), (u32, bool)> = BTreeMap::new();
        let mut spent = 0.0;
        let mut tokens = 0u64;
        for a in &previous {
            let e = tries.entry((a.agent, a.case.clone(), a.epoch)).or_insert((0, false));
            e.0 = e.0.max(a.try_number);
            e.1 = a.infra.is_none() || a.try_number > options.retry_infra;
            spent += cost_of(a);
            tokens += tokens_of(a);
        }
        let mut plan = self.plan();
        let total = plan.len();
        let skipped = plan.iter().filter(|(a, _, e, id)| tries.get(&(*a, id.clone(), *e)).is_some_and(|t| t.1)).count();
        let mut done = skipped;
        let mut passed = final_attempts(&previous).iter().filter(|a| a.passed && a.infra.is_none()).count();
        plan.retain(|(a, _, e, id)| !tries.get(&(*a, id.clone(), *e)).is_some_and(|t| t.1));
        let mut retries: VecDeque<(usize, usize, u32, String)> = VecDeque::new();
        let models = Models::default();
        let rooms = Rooms::default();
        // Each attempt a task of its own (the runtime's threads share them); their records written in batches
        // off the runtime, one sync each, while the next attempts run.
        let mut inflight = tokio::task::JoinSet::new();
        let mut arrived: Batch = Vec::new();
        let mut writing: Option<tokio::task::JoinHandle<Result<Batch, EvalError>>> = None;
        // The cost of the attempts recorded (`spent` also counts those ended and not yet on disk: the budget's).
        let mut cost_recorded = spent;
        let mut ran = 0;
        let mut stopped = None;
        let jobs = options.jobs.max(1);
        loop {
            while inflight.len() < jobs && stopped.is_none() {
                if cancel.is_cancelled() {
                    stopped = Some("cancelled".to_owned());
                    break;
                }
                if !plan.is_empty() || !retries.is_empty() {
                    if let Some(why) = budget_spent(options, spent, tokens) {
                        stopped = Some(why);
                        break;
                    }
                }
                let Some((agent, ci, epoch, id)) = retries.pop_front().or_else(|| plan.pop_front()) else { break };
                let key = (agent, id.clone(), epoch);
                let try_number = tries.get(&key).map_or(0, |t| t.0) + 1;
                tries.insert(key, (try_number, false));
                let job = self.job((agent, ci, epoch, try_number), &models, &rooms);
                let (store, cancel) = (store.clone(), cancel.clone());
                inflight.spawn(async move { (ci, job.run(&store, &cancel).await) });
            }
            if writing.is_none() && !arrived.is_empty() {
                writing = Some(write_batch(&self.dir, std::mem::take(&mut arrived)));
            }
            let batch = tokio::select! {
                joined = inflight.join_next(), if !inflight.is_empty() => {
                    match joined {
                        Some(Ok((ci, Some(attempt)))) => {
                            // Counted against the budget at once; done once its record is on disk.
                            spent += cost_of(&attempt);
                            tokens += tokens_of(&attempt);
                            arrived.push((ci, attempt));
                        }
                        Some(Ok((_, None))) | None => {}
                        Some(Err(e)) => return Err(EvalError::Io(format!("an attempt's task failed: {e}"))),
                    }
                    continue;
                }
                written = async {
                    match writing.as_mut() {
                        Some(w) => w.await,
                        None => std::future::pending().await,
                    }
                }, if writing.is_some() => written,
                else => break,
            };
            writing = None;
            let batch = batch.map_err(|e| EvalError::Io(format!("writing the eval's record failed: {e}")))??;
            for (ci, attempt) in batch {
                ran += 1;
                cost_recorded += cost_of(&attempt);
                let retrying = attempt.infra.is_some() && attempt.try_number <= options.retry_infra;
                if retrying {
                    retries.push_back((attempt.agent, ci, attempt.epoch, attempt.case.clone()));
                } else {
                    done += 1;
                    if attempt.passed && attempt.infra.is_none() {
                        passed += 1;
                    }
                    if let Some(t) = tries.get_mut(&(attempt.agent, attempt.case.clone(), attempt.epoch)) {
                        t.1 = true;
                    }
                }
                progress(&Progress { attempt: &attempt, done, total, passed, cost_usd: cost_recorded, retrying });
            }
        }
        if stopped.is_none() && cancel.is_cancelled() {
            stopped = Some("cancelled".to_owned());
        }
        Ok(RunEnd { ran, skipped, stopped })
    }

    /// The attempt (agent, case index, epoch, try).
    fn job(
        &self,
        (agent, ci, epoch, try_number): (usize, usize, u32, u32),
        models: &Models,
        rooms: &Rooms,
    ) -> AttemptJob {
        AttemptJob {
            eval: self.meta.id.clone(),
            label: self.meta.agents[agent].label.clone(),
            agent,
            case: self.suite.cases[ci].clone(),
            epoch,
            try_number,
            def: self.defs[agent][ci].clone(),
            keep: self.meta.options.keep,
            models: models.clone(),
            rooms: rooms.clone(),
        }
    }

    /// Every attempt of the eval, in order: each epoch, each case, each agent (agent, case index, epoch, case id).
    fn plan(&self) -> VecDeque<(usize, usize, u32, String)> {
        let mut plan = VecDeque::new();
        for epoch in 1..=self.meta.options.epochs {
            for (ci, case) in self.suite.cases.iter().enumerate() {
                for agent in 0..self.meta.agents.len() {
                    plan.push_back((agent, ci, epoch, case.id.clone()));
                }
            }
        }
        plan
    }
}

/// Attempts that ended, with their case's index.
type Batch = Vec<(usize, Attempt)>;

/// Appends `batch` to the eval's record on a blocking thread: one write, one sync (a group commit).
fn write_batch(dir: &EvalDir, batch: Batch) -> tokio::task::JoinHandle<Result<Batch, EvalError>> {
    let dir = dir.clone();
    tokio::task::spawn_blocking(move || dir.append_all(batch.iter().map(|(_, a)| a)).map(|()| batch))
}

/// Why no new attempt may start: the suite's cost or token budget is spent.
fn budget_spent(options: &Options, spent: f64, tokens: u64) -> Option<String> {
    if let Some(max) = options.max_cost_usd {
        if spent >= max {
            return Some(format!("the suite budget of ${max} is spent (${spent:.4}): no new attempt started"));
        }
    }
    if let Some(max) = options.max_tokens {
        if tokens >= max {
            return Some(format!("the suite budget of {max} tokens is spent ({tokens}): no new attempt started"));
        }
    }
    None
}

fn cost_of(a: &Attempt) -> f64 {
    a.observed.as_ref().and_then(|o| o.cost_usd).unwrap_or(0.0)
}

fn tokens_of(a: &Attempt) -> u64 {
    a.observed.as_ref().map_or(0, |o| o.input_tokens + o.output_tokens)
}

/// The final attempt of each (agent, case, epoch): the last try.
pub fn final_attempts(attempts: &[Attempt]) -> Vec<Attempt> {
    let mut last: BTreeMap<(usize, String, u32), Attempt> = BTreeMap::new();
    for a in attempts {
        let key = (a.agent, a.case.clone(), a.epoch);
        if last.get(&key).is_none_or(|b| b.try_number <= a.try_number) {
            last.insert(key, a.clone());
        }
    }
    last.into_values().collect()
}

/// The models of real providers, shared by every attempt of an eval that names the same model and provider
/// settings: one HTTP client, rate limiter and retry budget for all of them (a script model is never shared: each
/// attempt starts at its first turn).
#[derive(Clone, Default)]
struct Models {
    models: std::sync::Arc<std::sync::Mutex<BTreeMap<String, std::sync::Arc<dyn reins::Model>>>>,
    /// The workspace-independent parts of an agent with a real model (no MCP server, no sub-agent), by its
    /// definition without the workspace path: built once (a provider's HTTP client loads the root certificates,
    /// the costliest part of an attempt), the workspace tools and instructions made again for each attempt.
    templates: std::sync::Arc<std::sync::Mutex<BTreeMap<String, std::sync::Arc<reins_agent::Parts>>>>,
}

impl Models {
    /// The parts of `def` for one attempt.
    async fn parts(&self, def: &reins_agent::AgentDef) -> Result<reins_agent::Parts, reins_agent::BuildError> {
        let real = def.model.as_ref().is_some_and(|m| !matches!(m.kind().0, reins_agent::ModelKind::Script));
        if !real || !def.mcp.is_empty() || !def.agents.is_empty() {
            let mut parts = def.parts().await?;
            parts.model = self.share(def, parts.model.clone());
            return Ok(parts);
        }
        let mut json = def.to_json();
        if let Some(w) = json.get_mut("workspace").and_then(|w| w.as_object_mut()) {
            w.remove("path");
        }
        let key = json.to_string();
        let cached = self.templates.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key).cloned();
        let t = match cached {
            Some(t) => t,
            None => {
                let built = std::sync::Arc::new(def.parts().await?);
                let mut map = self.templates.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                map.entry(key).or_insert(built).clone()
            }
        };
        let w = def.build_workspace()?;
        let (instructions, notes) = def.compose_instructions(&w, t.own_instructions.clone());
        Ok(reins_agent::Parts {
            def: def.clone(),
            model: t.model.clone(),
            pricing: t.pricing.clone(),
            tools: w.tools,
            mcp: None,
            limits: t.limits.clone(),
            context: t.context.clone(),
            compact_model: t.compact_model.clone(),
            instructions,
            own_instructions: t.own_instructions.clone(),
            notes,
            output_schema: t.output_schema.clone(),
            agent_pricing: t.agent_pricing.clone(),
        })
    }

    /// The shared model for `def`, `built` becoming it when there is none yet.
    fn share(
        &self,
        def: &reins_agent::AgentDef,
        built: std::sync::Arc<dyn reins::Model>,
    ) -> std::sync::Arc<dyn reins::Model> {
        let Some(model) = &def.model else { return built };
        if matches!(model.kind().0, reins_agent::ModelKind::Script) {
            return built;
        }
        let json = def.to_json();
        let key = format!("{}\u{0}{}", json["model"], json["provider"]);
        let mut map = self.models.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.entry(key).or_insert(built).clone()
    }
}

struct AttemptJob {
    eval: String,
    label: String,
    agent: usize,
    case: Case,
    epoch: u32,
    try_number: u32,
    def: reins_agent::AgentDef,
    keep: bool,
    models: Models,
    rooms: Rooms,
}

impl AttemptJob {
    fn blank(&self, started_at: String) -> Attempt {
        Attempt {
            agent: self.agent,
            case: self.case.id.clone(),
            epoch: self.epoch,
            try_number: self.try_number,
            session_id: None,
            observed: None,
            checks: Vec::new(),
            score: 0.0,
            passed: false,
            infra: None,
            workspace: None,
            started_at,
            duration_ms: 0,
        }
    }

    /// The attempt's private directory and the workspace in it: readable by its owner only (the fixture's files
    /// and the agent's work in it). An empty one an earlier attempt left as it found it is taken when there is one
    /// (see [`Rooms`]). `Err` is an infrastructure failure.
    fn workspace(&self) -> Result<(tempfile::TempDir, PathBuf), String> {
        let (root, reused) = match self.rooms.take() {
            Some(r) => (r, true),
            None => {
                let private = std::os::unix::fs::PermissionsExt::from_mode(0o700);
                let r = tempfile::Builder::new().prefix("reins-eval-").permissions(private).tempdir();
                (r.map_err(|e| format!("cannot make the attempt's directory: {e}"))?, false)
            }
        };
        let workspace = root.path().join("workspace");
        match &self.case.workspace {
            Some(fixture) => (if reused { std::fs::remove_dir(&workspace) } else { Ok(()) })
                .and_then(|()| copy_dir(fixture, &workspace))
                .map_err(|e| format!("cannot copy the fixture {}: {e}", fixture.display()))?,
            None if reused => {}
            None => std::fs::create_dir(&workspace).map_err(|e| format!("cannot make the workspace: {e}"))?,
        }
        Ok((root, workspace))
    }

    /// Runs the attempt; `None` when it was cancelled (not done).
    async fn run(mut self, store: &reins_store::Store, cancel: &CancellationToken) -> Option<Attempt> {
        let t0 = Instant::now();
        let mut attempt = self.blank(now());
        let infra = |mut a: Attempt, why: String, t0: Instant| {
            a.infra = Some(why);
            a.duration_ms = millis(t0.elapsed());
            Some(a)
        };
        let (root, workspace) = match self.workspace() {
            Ok(made) => made,
            Err(why) => return infra(attempt, why, t0),
        };
        self.def.workspace.path = Some(workspace.clone());
        let parts = match self.models.parts(&self.def).await {
            Ok(p) => p,
            Err(e) => return infra(attempt, format!("cannot build the agent: {e}"), t0),
        };
        let mut meta = parts.session_meta();
        if let Some(config) = meta.config.as_mut().and_then(|c| c.as_object_mut()) {
            config.insert(
                "eval".into(),
                serde_json::json!({"id": self.eval, "agent": self.label, "case": self.case.id, "epoch": self.epoch, "try": self.try_number}),
            );
        }
        let agent = match parts
            .builder()
            .map(|b| b.journal(store.journal(meta)))
            .and_then(|b| b.build().map_err(|e| reins_agent::BuildError::Invalid(e.to_string())))
        {
            Ok(a) => a,
            Err(e) => return infra(attempt, format!("cannot build the agent: {e}"), t0),
        };
        let started = Instant::now();
        let outcome = agent.run(&self.case.prompt, cancel.clone()).await;
        let ran_for = started.elapsed();
        if let Some(mcp) = &parts.mcp {
            mcp.shutdown().await;
        }
        if cancel.is_cancelled() {
            return None;
        }
        let seen = Observed::from_outcome(&outcome, ran_for);
        attempt.session_id = outcome.session_id.clone();
        let mut results = Vec::new();
        for check in &self.case.checks {
            match &check.kind {
                Kind::Verifier(v) => match verify(check, v, &workspace, root.path(), &self.case.id).await {
                    Ok(r) => results.push(r),
                    Err(why) => {
                        attempt.observed = Some(seen);
                        attempt.checks = results;
                        return infra(attempt, why, t0);
                    }
                },
                Kind::Judge(j) => match judge(check, j, &self.case.prompt, &seen, store, cancel).await {
                    Ok(r) => results.push(r),
                    Err(why) => {
                        attempt.observed = Some(seen);
                        attempt.checks = results;
                        return infra(attempt, why, t0);
                    }
                },
                _ => results.push(check.score(&seen)),
            }
        }
        if self.case.checks.is_empty() {
            results.push(completed(&seen));
        }
        let (score, passed) = combine(&results);
        attempt.observed = Some(seen);
        attempt.checks = results;
        attempt.score = score;
        attempt.passed = passed;
        if self.keep {
            attempt.workspace = Some(root.keep().join("workspace").display().to_string());
        } else if self.def.presets.is_empty()
            && self.def.mcp.is_empty()
            && self.def.agents.is_empty()
            && !self.case.checks.iter().any(|c| matches!(c.kind, Kind::Verifier(_)))
        {
            // Nothing of the agent's can outlive it (no command, no MCP server, no verifier): its workspace, if
            // still empty, serves a later attempt.
            self.rooms.give_back(root);
        }
        attempt.duration_ms = millis(t0.elapsed());
        Some(attempt)
    }
}

/// The private directories of attempts that ended leaving their workspace empty, for later attempts of the same
/// eval: an empty directory is as fresh as a new one, and making and removing two directories per attempt was the
/// costliest part of a short attempt (inode allocation). Removed when the eval's run ends.
#[derive(Clone, Default)]
struct Rooms(std::sync::Arc<std::sync::Mutex<Vec<tempfile::TempDir>>>);

impl Rooms {
    fn take(&self) -> Option<tempfile::TempDir> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop()
    }

    /// Keeps `root` if it holds only an empty `workspace` directory (else it is removed).
    fn give_back(&self, root: tempfile::TempDir) {
        let only_workspace = std::fs::read_dir(root.path()).is_ok_and(|mut d| {
            d.next().is_some_and(|e| e.is_ok_and(|e| e.file_name() == "workspace")) && d.next().is_none()
        });
        let workspace = root.path().join("workspace");
        let empty = only_workspace
            && std::fs::symlink_metadata(&workspace).is_ok_and(|m| m.is_dir())
            && std::fs::read_dir(&workspace).is_ok_and(|mut d| d.next().is_none());
        if empty {
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(root);
        }
    }
}

/// The result of a case without checks: it passes when its run completed.
pub fn completed(seen: &Observed) -> CheckResult {
    let ok = seen.status == "completed";
    CheckResult {
        kind: "status".into(),
        score: if ok { 1.0 } else { 0.0 },
        passed: ok,
        reason: format!("ended {} (a case without checks passes when its run completes)", seen.status),
        weight: 1.0,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs the verifier after the agent: its files copied beside (never into) the workspace, its command run in
/// the workspace. `Err` is an infrastructure failure (it could not start, was killed, timed out, or wrote a
/// malformed reward file).
pub(crate) async fn verify(
    check: &Check,
    v: &Verifier,
    workspace: &Path,
    root: &Path,
    case: &str,
) -> Result<CheckResult, String> {
    // Each verifier of a case its own directories beside the workspace (`verifier` and `logs`, then `verifier-2`
    // and `logs-2`, ...): a case may have several.
    let (vdir, logs) = (1..=u32::MAX)
        .map(|n| match n {
            1 => (root.join("verifier"), root.join("logs")),
            n => (root.join(format!("verifier-{n}")), root.join(format!("logs-{n}"))),
        })
        .find(|(v, l)| !v.exists() && !l.exists())
        .ok_or("no name is left for the verifier's directory")?;
    match &v.files {
        Some(files) => {
            copy_dir(files, &vdir).map_err(|e| format!("cannot copy the verifier's files {}: {e}", files.display()))?
        }
        None => std::fs::create_dir(&vdir).map_err(|e| format!("cannot make the verifier's directory: {e}"))?,
    }
    std::fs::create_dir(&logs).map_err(|e| format!("cannot make the verifier's log directory: {e}"))?;
    if v.harbor {
        crate::harbor::rewrite_paths(&vdir, &vdir, &logs, workspace)
            .map_err(|e| format!("cannot prepare the Harbor task's tests: {e}"))?;
    }
    let fill = |s: &str| {
        s.replace("{verifier}", &vdir.display().to_string())
            .replace("{workspace}", &workspace.display().to_string())
            .replace("{logs}", &logs.display().to_string())
    };
    let program = fill(&v.command[0]);
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(v.command[1..].iter().map(|a| fill(a)))
        .current_dir(workspace)
        .env("REINS_EVAL_VERIFIER", &vdir)
        .env("REINS_EVAL_LOGS", &logs)
        .env("REINS_EVAL_WORKSPACE", workspace)
        .env("REINS_EVAL_CASE", case)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().map_err(|e| format!("the verifier {program:?} could not start: {e}"))?;
    let output = match tokio::time::timeout(v.timeout, child.wait_with_output()).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return Err(format!("the verifier failed: {e}")),
        Err(_) => return Err(format!("the verifier ran longer than {}", humantime::format_duration(v.timeout))),
    };
    let Some(code) = output.status.code() else {
        return Err(format!("the verifier crashed ({})", output.status));
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| format!(": {}", crate::check::preview(l.trim())))
        .unwrap_or_default();
    let (score, how) = if let Ok(text) = std::fs::read_to_string(logs.join("reward.txt")) {
        let x: f64 = text.trim().parse().map_err(|_| {
            format!("the verifier's reward.txt is not a number: {:?}", crate::check::preview(text.trim()))
        })?;
        (x, format!("reward {x}"))
    } else if let Ok(text) = std::fs::read_to_string(logs.join("reward.json")) {
        let v: BTreeMap<String, f64> = serde_json::from_str(&text)
            .map_err(|e| format!("the verifier's reward.json is not an object of named numbers: {e}"))?;
        if v.is_empty() {
            return Err("the verifier's reward.json is empty".into());
        }
        let x = v.get("reward").copied().unwrap_or_else(|| v.values().sum::<f64>() / v.len() as f64);
        (x, format!("reward {x} ({})", v.iter().map(|(k, x)| format!("{k}={x}")).collect::<Vec<_>>().join(", ")))
    } else {
        (if code == 0 { 1.0 } else { 0.0 }, format!("exit {code}"))
    };
    if !score.is_finite() {
        return Err(format!("the verifier's reward is not a finite number: {score}"));
    }
    let score = score.clamp(0.0, 1.0);
    let passed = score >= v.threshold;
    Ok(CheckResult {
        kind: check.name.clone(),
        score,
        passed,
        reason: format!("verifier {how}{last}"),
        weight: check.weight,
    })
}

/// Copies the directory `from` to `to` (made, private), files, directories and symbolic links alike.
pub fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new().mode(0o700).create(to)?;
    let mut stack = vec![(from.to_path_buf(), to.to_path_buf())];
    while let Some((src, dst)) = stack.pop() {
        for entry in std::fs::read_dir(&src)? {
            let entry = entry?;
            let ty = entry.file_type()?;
            let target = dst.join(entry.file_name());
            if ty.is_dir() {
                std::fs::create_dir(&target)?;
                stack.push((entry.path(), target));
            } else if ty.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
            } else {
                std::fs::copy(entry.path(), &target)?;
            }
        }
    }
    Ok(())
}

/// What the judge is told before the rubric.
const JUDGE_INSTRUCTIONS: &str = "You grade an AI agent's work by the rubric below. Reply with one JSON object and nothing else: {\"score\": a number from 0 to 1, \"reason\": \"one sentence\"}.\n\nRubric:\n";

/// Asks the judge: a one-step run of its model at temperature 0, recorded as a session (its prompt and verdict
/// kept). `Err` is an infrastructure failure (the judge failed, or its verdict is not the JSON asked for).
async fn judge(
    check: &Check,
    j: &Judge,
    task: &str,
    seen: &Observed,
    store: &reins_store::Store,
    cancel: &CancellationToken,
) -> Result<CheckResult, String> {
    let mut def = reins_agent::AgentDef::new(&j.model).map_err(|e| format!("the judge's model: {e}"))?;
    // Pinned to 0 where the API takes a temperature (a script has none).
    if !j.model.starts_with("script:") {
        def.provider.temperature = reins_agent::Temperature::new(0.0);
    }
    def.limits.max_steps = reins_agent::Positive::new(1);
    def.instructions = Some(format!("{JUDGE_INSTRUCTIONS}{}", j.rubric));
    let built = def
        .build_with(reins_agent::BuildOptions { store: Some((store.clone(), None)) })
        .await
        .map_err(|e| format!("cannot build the judge: {e}"))?;
    let output = seen.output.as_ref().map_or_else(|| "(none)".to_owned(), |o| o.to_string());
    let prompt = format!(
        "## The task\n{task}\n\n## The agent's final answer\n{}\n\n## Its structured output\n{output}\n\n## How its run ended\n{}",
        seen.answer.as_deref().unwrap_or("(none)"),
        seen.status
    );
    let outcome = built.run(&prompt, cancel.clone()).await;
    built.shutdown().await;
    let session = outcome.session_id.clone().unwrap_or_default();
    let Some(text) = outcome.answer.as_deref().filter(|_| outcome.status == reins::Status::Completed) else {
        return Err(format!("the judge did not answer ({:?}: {})", outcome.status, outcome.error.unwrap_or_default()));
    };
    let json = match (text.find('{'), text.rfind('}')) {
        (Some(a), Some(b)) if a < b => &text[a..=b],
        _ => text,
    };
    let verdict: serde_json::Value = serde_json::from_str(json)
        .map_err(|_| format!("the judge's verdict is not JSON: {:?}", crate::check::preview(text)))?;
    let score = verdict["score"]
        .as_f64()
        .filter(|x| (0.0..=1.0).contains(x))
        .ok_or_else(|| format!("the judge's verdict has no score from 0 to 1: {verdict}"))?;
    let reason = verdict["reason"].as_str().unwrap_or("").to_owned();
    Ok(CheckResult {
        kind: check.name.clone(),
        score,
        passed: score >= j.threshold,
        reason: format!("judge {score} (session {session}): {reason}"),
        weight: check.weight,
    })
}
