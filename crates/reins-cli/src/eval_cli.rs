//! `reins eval`: flags over `reins-eval` — run a suite, resume it, show it, compare two agents.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use reins_eval::{Eval, EvalError, Options, Summary};
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, usage};

/// Exit code: the eval ran, and a case failed (or the mean score is below `--min-score`).
pub const EXIT_BELOW: u8 = 20;
/// Exit code: the eval could not run to its end (the suite budget was spent, or it was cancelled): resumable.
pub const EXIT_INCOMPLETE: u8 = 21;
/// Exit code: more infrastructure failures than `--max-infra-failures` (never counted as the agent's).
pub const EXIT_INFRA: u8 = 22;

/// The exit codes of `reins eval`, for `--help`.
const EVAL_EXIT_HELP: &str = "\
Exit codes:
  0  every case passed (or the mean score reached --min-score)
  1  internal error
  2  bad input: the suite, a case or an agent file (the file and key named), or a flag
 20  the eval ran and a case failed, or the mean score is below --min-score
 21  the eval did not finish (suite budget spent, cancelled): `reins eval resume ID` continues it
 22  more infrastructure failures (verifier crashed, fixture not copied) than --max-infra-failures";

/// `reins eval`.
#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(subcommand)]
    command: EvalCommand,
}

#[derive(Subcommand, Debug)]
enum EvalCommand {
    /// Runs a suite: every case, --epochs times, by each --agent (interleaved); each attempt recorded as a
    /// session; prints the summary and exits by the result.
    #[command(after_help = EVAL_EXIT_HELP)]
    Run(Box<RunArgs>),
    /// Continues an interrupted eval: attempts already done never run again.
    #[command(after_help = EVAL_EXIT_HELP)]
    Resume(Box<ResumeArgs>),
    /// Shows a recorded eval's summary (no attempt is run), with the exit code of its result.
    #[command(after_help = EVAL_EXIT_HELP)]
    Show(ShowArgs),
    /// Compares two agents case by case: flips, the paired difference with its interval, exact McNemar on
    /// pass/fail, a seeded paired bootstrap on scores, and the deltas in cost, tokens, steps and duration.
    /// RUN is an eval id, or ID@AGENT (a label or a 1-based index) for one agent of an eval of several; one
    /// eval of two agents compares them.
    Diff(DiffArgs),
    /// Re-scores a recorded eval with the suite's checks as they are now (or --checks FILE's) from what its
    /// attempts recorded, with no model called: a judge's recorded verdict is reused, and a verifier runs again
    /// on each attempt's workspace rebuilt by replaying its session (the fixture copied fresh, the recorded model
    /// responses, the tools for real). The result is a new eval (compare it with `reins eval diff OLD NEW`).
    #[command(after_help = EVAL_EXIT_HELP)]
    Rescore(RescoreArgs),
    /// Replays every attempt's session against the current build (recorded model responses, the tools for real
    /// in a fresh copy of the case's fixture). Exit 0 when every one is reproduced, 10 when one diverged (the
    /// case named).
    Replay(ReplayArgs),
}

#[derive(Args, Debug)]
struct RescoreArgs {
    /// The eval's id (or a unique prefix).
    id: String,
    /// A suite file whose checks score (default: the suite file the eval ran, as it is now); cases are matched
    /// by id.
    #[arg(long, visible_alias = "suite", value_name = "FILE")]
    checks: Option<PathBuf>,
    #[command(flatten)]
    report: ReportFlags,
    /// The session store.
    #[arg(long, value_name = "PATH")]
    store: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct ReplayArgs {
    /// The eval's id (or a unique prefix).
    id: String,
    /// Prints one JSON object per attempt.
    #[arg(long)]
    json: bool,
    /// The session store.
    #[arg(long, value_name = "PATH")]
    store: Option<PathBuf>,
}

/// Reports and exit thresholds.
#[derive(Args, Debug, Clone)]
struct ReportFlags {
    /// Prints the summary as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Writes a JUnit XML report (a testcase per case) to this file.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Writes a self-contained HTML report (paged; no network access) to this file.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// With --html: also writes each attempt's session page into `sessions/` beside the report (about 35 KB a
    /// session; a page already there is kept) and links each attempt to it.
    #[arg(long, requires = "html")]
    html_sessions: bool,
    /// Exit 0 when every agent's mean score is at least this (0 to 1), even if some case failed.
    #[arg(long, value_name = "X", value_parser = parse_unit)]
    min_score: Option<f64>,
    /// How many infrastructure failures are tolerated before exit 22 (default 0).
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_infra_failures: usize,
}

/// Dispatch limits shared by `run` and `resume`.
#[derive(Args, Debug, Clone)]
struct DispatchFlags {
    /// Attempts run at once (default 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    jobs: Option<u64>,
    /// No new attempt starts once the eval's attempts cost this many US dollars (those in flight finish); the
    /// eval is left resumable (exit 21).
    #[arg(long, value_name = "USD", value_parser = parse_positive)]
    max_cost_usd: Option<f64>,
    /// No new attempt starts once the eval's attempts used this many tokens (input plus output).
    #[arg(long, value_name = "N")]
    max_tokens: Option<u64>,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The suite file (TOML).
    suite: PathBuf,
    /// An agent file to evaluate (instead of the suite's); give it twice to compare two agents.
    #[arg(long, value_name = "FILE")]
    agent: Vec<PathBuf>,
    /// Runs each case this many times per agent.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    epochs: u32,
    /// Keeps each attempt's workspace (its path is in the record) instead of removing it.
    #[arg(long)]
    keep: bool,
    /// Retries an attempt that failed for the infrastructure's reasons up to N times (each try recorded).
    #[arg(long, value_name = "N", default_value_t = 0)]
    retry_infra: u32,
    #[command(flatten)]
    dispatch: DispatchFlags,
    #[command(flatten)]
    report: ReportFlags,
    /// The session store (default: $REINS_STORE, else ~/.local/share/reins/sessions.db); evals are recorded
    /// in `evals/` beside it.
    #[arg(long, value_name = "PATH")]
    store: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct ResumeArgs {
    /// The eval's id (or a unique prefix).
    id: String,
    #[command(flatten)]
    dispatch: DispatchFlags,
    #[command(flatten)]
    report: ReportFlags,
    /// The session store.
    #[arg(long, value_name = "PATH")]
    store: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct ShowArgs {
    /// The eval's id (or a unique prefix).
    id: String,
    #[command(flatten)]
    report: ReportFlags,
    /// The session store.
    #[arg(long, value_name = "PATH")]
    store: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct DiffArgs {
    /// A: an eval id, or ID@AGENT.
    run_a: String,
    /// B: an eval id, or ID@AGENT (left out: the second agent of A's eval).
    run_b: Option<String>,
    /// Prints the comparison as JSON.
    #[arg(long)]
    json: bool,
    /// The session store.
    #[arg(long, value_name = "PATH")]
    store: Option<PathBuf>,
}

fn parse_unit(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| (0.0..=1.0).contains(x))
        .ok_or_else(|| format!("{s:?} is not a number from 0 to 1"))
}

fn parse_positive(s: &str) -> Result<f64, String> {
    s.trim()
        .trim_start_matches('$')
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0)
        .ok_or_else(|| format!("{s:?} is not a number of US dollars above 0"))
}

fn eval_err(e: EvalError) -> CliError {
    match e {
        EvalError::Io(m) => CliError::Internal(anyhow::anyhow!(m)),
        other => usage(other.to_string()),
    }
}

/// `reins eval`.
pub async fn eval(args: EvalArgs) -> Result<u8, CliError> {
    match args.command {
        EvalCommand::Run(a) => run(*a).await,
        EvalCommand::Resume(a) => resume(*a).await,
        EvalCommand::Show(a) => show(a),
        EvalCommand::Diff(a) => diff(a),
        EvalCommand::Rescore(a) => rescore(a).await,
        EvalCommand::Replay(a) => replay(a).await,
    }
}

fn root(store: &reins_store::Store) -> PathBuf {
    reins_eval::evals_root(store.path())
}

async fn run(args: RunArgs) -> Result<u8, CliError> {
    let store = crate::store_open::open_store(args.store.as_deref())?;
    let options = Options {
        epochs: args.epochs,
        jobs: args.dispatch.jobs.unwrap_or(1) as usize,
        keep: args.keep,
        retry_infra: args.retry_infra,
        max_cost_usd: args.dispatch.max_cost_usd,
        max_tokens: args.dispatch.max_tokens,
    };
    let eval = Eval::create(&root(&store), &args.suite, &args.agent, options).map_err(eval_err)?;
    errln!(
        "reins: eval {} of {} ({} cases × {} epochs × {} agents)",
        eval.meta.id,
        eval.meta.suite_name,
        eval.meta.cases.len(),
        eval.meta.options.epochs,
        eval.meta.agents.len()
    );
    drive(&eval, &store, &args.report).await
}

async fn resume(args: ResumeArgs) -> Result<u8, CliError> {
    let store = crate::store_open::open_store(args.store.as_deref())?;
    let mut eval = Eval::open(&root(&store), &args.id).map_err(eval_err)?;
    if let Some(j) = args.dispatch.jobs {
        eval.meta.options.jobs = j as usize;
    }
    if args.dispatch.max_cost_usd.is_some() {
        eval.meta.options.max_cost_usd = args.dispatch.max_cost_usd;
    }
    if args.dispatch.max_tokens.is_some() {
        eval.meta.options.max_tokens = args.dispatch.max_tokens;
    }
    eval.dir.update(&eval.meta).map_err(eval_err)?;
    errln!("reins: resuming eval {}", eval.meta.id);
    drive(&eval, &store, &args.report).await
}

async fn drive(eval: &Eval, store: &reins_store::Store, report: &ReportFlags) -> Result<u8, CliError> {
    let cancel = CancellationToken::new();
    crate::signals::cancel_on_signals(cancel.clone(), "the eval")?;
    let labels: Vec<String> = eval.meta.agents.iter().map(|a| a.label.clone()).collect();
    let several = labels.len() > 1;
    // On a terminal a bar (done/total, pass rate, cost, ETA) rewritten in place, with a line kept for each failure;
    // otherwise a plain line per attempt.
    let bar = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let started = std::time::Instant::now();
    let mut ran = 0u64;
    let mut progress = |p: &reins_eval::Progress<'_>| {
        let a = p.attempt;
        ran += 1;
        if bar {
            crate::output::stderr_raw("\r\x1b[K");
            if a.infra.is_some() || !a.passed {
                let why = a.infra.clone().unwrap_or_else(|| {
                    a.checks.iter().find(|c| !c.passed).map(|c| format!("{}: {}", c.kind, c.reason)).unwrap_or_default()
                });
                errln!(
                    "{}#{}: {} {why}",
                    a.case,
                    a.epoch,
                    if a.infra.is_some() { "infrastructure failure" } else { "fail" }
                );
            }
            let left = p.total.saturating_sub(p.done) as f64;
            let eta = started.elapsed().as_secs_f64() / ran as f64 * left;
            let rate = if p.done > 0 { 100.0 * p.passed as f64 / p.done as f64 } else { 0.0 };
            crate::output::stderr_raw(&format!(
                "[{}/{}] {rate:.0}% passed, ${:.4}, ETA {}",
                p.done,
                p.total,
                p.cost_usd,
                crate::render::human_ms(eta * 1000.0)
            ));
            if p.done == p.total {
                crate::output::stderr_raw("\n");
            }
            return;
        }
        let who =
            if several { format!(" [{}]", labels.get(a.agent).map_or("?", String::as_str)) } else { String::new() };
        let verdict = match &a.infra {
            Some(why) if p.retrying => format!("infrastructure failure, retrying: {why}"),
            Some(why) => format!("infrastructure failure: {why}"),
            None if a.passed => format!("pass {:.2}", a.score),
            None => format!("fail {:.2}", a.score),
        };
        errln!(
            "[{}/{}] {}#{}{who}: {verdict} (passed {} so far, ${:.4})",
            p.done,
            p.total,
            a.case,
            a.epoch,
            p.passed,
            p.cost_usd
        );
    };
    let end = eval.run(store, &cancel, &mut progress).await.map_err(eval_err)?;
    if bar && end.stopped.is_some() {
        crate::output::stderr_raw("\n");
    }
    if end.skipped > 0 {
        errln!("reins: {} attempts were already done and did not run again", end.skipped);
    }
    if let Some(why) = &end.stopped {
        errln!("reins: eval {} stopped: {why}; continue with: reins eval resume {}", eval.meta.id, eval.meta.id);
    }
    let attempts = eval.dir.attempts().map_err(eval_err)?;
    let summary = Summary::new(&eval.meta, &attempts);
    print_report(store, &summary, report)
}

fn show(args: ShowArgs) -> Result<u8, CliError> {
    let store = crate::store_open::open_store(args.store.as_deref())?;
    let (dir, meta) = reins_eval::EvalDir::open(&root(&store), &args.id).map_err(eval_err)?;
    let attempts = dir.attempts().map_err(eval_err)?;
    print_report(&store, &Summary::new(&meta, &attempts), &args.report)
}

fn print_report(store: &reins_store::Store, summary: &Summary, report: &ReportFlags) -> Result<u8, CliError> {
    if report.json {
        let json = serde_json::to_string(summary).map_err(|e| CliError::Internal(e.into()))?;
        jsonln!("{json}");
    } else {
        out!("{}", reins_eval::table(summary));
        outln!("eval {}", summary.id);
    }
    if let Some(path) = &report.junit {
        crate::output::write_private(path, reins_eval::junit(summary).as_bytes())
            .map_err(|e| CliError::Internal(anyhow::anyhow!("cannot write {}: {e}", path.display())))?;
    }
    if let Some(path) = &report.html {
        let page = if report.html_sessions {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            let pages = reins_eval::write_session_pages(store, summary, dir).map_err(eval_err)?;
            errln!(
                "reins: session pages in {}: {} written, {} kept{}",
                dir.join(reins_eval::SESSIONS_DIR).display(),
                pages.written,
                pages.kept,
                if pages.missing.is_empty() {
                    String::new()
                } else {
                    format!(", {} not in the store (named, not linked)", pages.missing.len())
                }
            );
            reins_eval::html_linked(summary, &pages).map_err(eval_err)?
        } else {
            reins_eval::html(summary).map_err(eval_err)?
        };
        crate::output::write_private(path, page.as_bytes())
            .map_err(|e| CliError::Internal(anyhow::anyhow!("cannot write {}: {e}", path.display())))?;
    }
    Ok(exit_code(summary, report))
}

fn exit_code(summary: &Summary, report: &ReportFlags) -> u8 {
    if !summary.complete {
        return EXIT_INCOMPLETE;
    }
    if summary.infra_failures() > report.max_infra_failures {
        return EXIT_INFRA;
    }
    let passed = match report.min_score {
        Some(min) => summary.agents.iter().all(|a| a.mean >= min),
        None => summary.agents.iter().all(|a| a.failed == 0),
    };
    if passed { 0 } else { EXIT_BELOW }
}

/// The agent summary `spec` names (`ID` or `ID@AGENT`), or with `second` the eval's second agent.
fn agent_of(root: &Path, spec: &str, second: bool) -> Result<reins_eval::AgentSummary, CliError> {
    let (id, agent) = match spec.split_once('@') {
        Some((id, a)) => (id, Some(a)),
        None => (spec, None),
    };
    let (dir, meta) = reins_eval::EvalDir::open(root, id).map_err(eval_err)?;
    let attempts = dir.attempts().map_err(eval_err)?;
    let summary = Summary::new(&meta, &attempts);
    let index = match agent {
        Some(a) => match a.parse::<usize>() {
            Ok(n) if n >= 1 && n <= summary.agents.len() => n - 1,
            _ => summary
                .agents
                .iter()
                .position(|x| x.label == a)
                .ok_or_else(|| usage(format!("eval {} has no agent {a:?}", meta.id)))?,
        },
        None if second => {
            if summary.agents.len() < 2 {
                return Err(usage(format!("eval {} has one agent: give a second RUN to compare with", meta.id)));
            }
            1
        }
        None => 0,
    };
    summary.agents.into_iter().nth(index).ok_or_else(|| usage(format!("eval {} has no agent {}", meta.id, index + 1)))
}

fn diff(args: DiffArgs) -> Result<u8, CliError> {
    let store = crate::store_open::open_store(args.store.as_deref())?;
    let root = root(&store);
    let a = agent_of(&root, &args.run_a, false)?;
    let b = match &args.run_b {
        Some(b) => agent_of(&root, b, false)?,
        None => agent_of(&root, &args.run_a, true)?,
    };
    let d = reins_eval::diff(&a, &b);
    if args.json {
        let json = serde_json::to_string(&d).map_err(|e| CliError::Internal(e.into()))?;
        jsonln!("{json}");
    } else {
        out!("{}", reins_eval::diff_text(&d));
    }
    Ok(0)
}

async fn rescore(args: RescoreArgs) -> Result<u8, CliError> {
    let store = crate::store_open::open_store(args.store.as_deref())?;
    let (dir, meta, done) =
        reins_eval::rescore_eval(&root(&store), &store, &args.id, args.checks.as_deref()).await.map_err(eval_err)?;
    errln!(
        "reins: eval {} re-scored from {} (no model called; {} workspace(s) rebuilt by replay, {} verifier run(s), {} infrastructure failure(s))",
        meta.id,
        args.id,
        done.rebuilt,
        done.verifier_runs,
        done.infra
    );
    let attempts = dir.attempts().map_err(eval_err)?;
    print_report(&store, &Summary::new(&meta, &attempts), &args.report)
}

async fn replay(args: ReplayArgs) -> Result<u8, CliError> {
    let store = crate::store_open::open_store(args.store.as_deref())?;
    let eval = Eval::open(&root(&store), &args.id).map_err(eval_err)?;
    let replayed = eval.replay(&store).await.map_err(eval_err)?;
    let mut diverged = 0;
    for r in &replayed {
        if args.json {
            jsonln!("{}", serde_json::to_string(r).map_err(|e| CliError::Internal(e.into()))?);
        } else {
            match &r.divergence {
                None => outln!("ok {}#{} [{}] session {}", r.case, r.epoch, r.agent, r.session_id),
                Some(d) => outln!("diverged {}#{} [{}] session {}: {d}", r.case, r.epoch, r.agent, r.session_id),
            }
        }
        if r.divergence.is_some() {
            diverged += 1;
        }
    }
    if diverged > 0 {
        errln!("reins: {diverged} of {} attempts diverged from their recording", replayed.len());
        return Ok(10);
    }
    errln!("reins: all {} attempts replayed identically", replayed.len());
    Ok(0)
}
