//! What an eval found: per case and per agent summaries, the comparison of two agents, and the JUnit form.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::record::{Attempt, EvalMeta};
use crate::run::final_attempts;
use crate::stats;

/// One case of one agent over its epochs.
#[derive(Clone, Debug, Serialize)]
pub struct CaseSummary {
    /// The case id.
    pub id: String,
    /// Scored attempts (infrastructure failures left out).
    pub attempts: u64,
    /// Passed among them.
    pub passes: u64,
    /// Mean score.
    pub mean: f64,
    /// pass@1.
    pub pass_at_1: Option<f64>,
    /// pass@k with k = the epochs scored.
    pub pass_at_k: Option<f64>,
    /// pass^k: every one of k attempts passes (k = the epochs scored).
    pub pass_hat_k: Option<f64>,
    /// Every scored attempt passed (and there was at least one).
    pub passed: bool,
    /// The reasons of the failed checks of the latest failed attempt.
    pub failures: Vec<String>,
    /// Infrastructure failures (final ones) of this case.
    pub infra: Vec<String>,
    /// Mean cost of a scored attempt (unknown costs count 0).
    pub cost_usd: f64,
    /// Mean input plus output tokens.
    pub tokens: f64,
    /// Mean steps.
    pub steps: f64,
    /// Mean duration of the agent's run, ms.
    pub duration_ms: f64,
    /// The sessions of its attempts.
    pub sessions: Vec<String>,
}

/// One agent over the suite.
#[derive(Clone, Debug, Serialize)]
pub struct AgentSummary {
    /// Its label.
    pub label: String,
    /// Its agent file.
    pub path: Option<String>,
    /// The cases, in suite order (a case with no attempt yet is left out).
    pub cases: Vec<CaseSummary>,
    /// Mean score over every scored attempt.
    pub mean: f64,
    /// Its standard error (clustered by case when a case has several attempts).
    pub se: f64,
    /// The 95% confidence interval.
    pub ci95: (f64, f64),
    /// Cases passed (every attempt).
    pub passed: usize,
    /// Cases with a failed attempt.
    pub failed: usize,
    /// Attempts ended by an infrastructure failure (final tries), as `case#epoch: reason`.
    pub infra_failures: Vec<String>,
    /// Total cost, US dollars.
    pub cost_usd: f64,
    /// Total tokens.
    pub tokens: u64,
}

/// A whole eval.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// The eval id.
    pub id: String,
    /// The suite's name.
    pub suite: String,
    /// Epochs.
    pub epochs: u32,
    /// Attempts planned (cases × epochs × agents).
    pub planned: usize,
    /// Final attempts recorded.
    pub done: usize,
    /// Every planned attempt is done.
    pub complete: bool,
    /// Each agent.
    pub agents: Vec<AgentSummary>,
}

impl Summary {
    /// The summary of `meta`'s recorded `attempts`.
    pub fn new(meta: &EvalMeta, attempts: &[Attempt]) -> Summary {
        let finals = final_attempts(attempts);
        let planned = meta.cases.len() * meta.options.epochs as usize * meta.agents.len();
        let agents = meta
            .agents
            .iter()
            .enumerate()
            .map(|(i, a)| agent_summary(meta, i, &a.label, a.path.clone(), &finals))
            .collect();
        Summary {
            id: meta.id.clone(),
            suite: meta.suite_name.clone(),
            epochs: meta.options.epochs,
            planned,
            done: finals.len(),
            complete: finals.len() >= planned,
            agents,
        }
    }

    /// Infrastructure failures over every agent.
    pub fn infra_failures(&self) -> usize {
        self.agents.iter().map(|a| a.infra_failures.len()).sum()
    }

    /// Every case of every agent passed.
    pub fn all_passed(&self) -> bool {
        self.agents.iter().all(|a| a.failed == 0 && a.infra_failures.is_empty())
    }
}

fn agent_summary(meta: &EvalMeta, index: usize, label: &str, path: Option<String>, finals: &[Attempt]) -> AgentSummary {
    let mut by_case: BTreeMap<&str, Vec<&Attempt>> = BTreeMap::new();
    for a in finals.iter().filter(|a| a.agent == index) {
        by_case.entry(a.case.as_str()).or_default().push(a);
    }
    let mut cases = Vec::new();
    let mut clusters = Vec::new();
    let mut infra_failures = Vec::new();
    let (mut cost, mut tokens) = (0.0, 0u64);
    for id in &meta.cases {
        let Some(list) = by_case.get(id.as_str()) else { continue };
        let mut list = list.clone();
        list.sort_by_key(|a| a.epoch);
        let scored: Vec<&&Attempt> = list.iter().filter(|a| a.infra.is_none()).collect();
        let infra: Vec<String> =
            list.iter().filter_map(|a| a.infra.as_ref().map(|w| format!("epoch {}: {w}", a.epoch))).collect();
        infra_failures.extend(infra.iter().map(|w| format!("{id} {w}")));
        let scores: Vec<f64> = scored.iter().map(|a| a.score).collect();
        let n = scores.len() as u64;
        let c = scored.iter().filter(|a| a.passed).count() as u64;
        let obs = |f: &dyn Fn(&crate::check::Observed) -> f64| {
            stats::mean(&scored.iter().map(|a| a.observed.as_ref().map_or(0.0, f)).collect::<Vec<_>>())
        };
        for a in &list {
            if let Some(o) = &a.observed {
                cost += o.cost_usd.unwrap_or(0.0);
                tokens += o.input_tokens + o.output_tokens;
            }
        }
        let failures = scored
            .iter()
            .rev()
            .find(|a| !a.passed)
            .map(|a| a.checks.iter().filter(|c| !c.passed).map(|c| format!("{}: {}", c.kind, c.reason)).collect())
            .unwrap_or_default();
        if !scores.is_empty() {
            clusters.push(scores.clone());
        }
        cases.push(CaseSummary {
            id: id.clone(),
            attempts: n,
            passes: c,
            mean: stats::mean(&scores),
            pass_at_1: stats::pass_at_k(n, c, 1),
            pass_at_k: stats::pass_at_k(n, c, n),
            pass_hat_k: stats::pass_hat_k(n, c, n),
            passed: n > 0 && c == n,
            failures,
            infra,
            cost_usd: obs(&|o| o.cost_usd.unwrap_or(0.0)),
            tokens: obs(&|o| (o.input_tokens + o.output_tokens) as f64),
            steps: obs(&|o| o.steps as f64),
            duration_ms: obs(&|o| o.duration_ms as f64),
            sessions: list.iter().filter_map(|a| a.session_id.clone()).collect(),
        });
    }
    let all: Vec<f64> = clusters.iter().flatten().copied().collect();
    let mean = stats::mean(&all);
    let se = stats::clustered_standard_error(&clusters);
    let passed = cases.iter().filter(|c| c.passed).count();
    let failed = cases.iter().filter(|c| c.attempts > 0 && !c.passed).count();
    AgentSummary {
        label: label.to_owned(),
        path,
        cases,
        mean,
        se,
        ci95: stats::ci95(mean, se),
        passed,
        failed,
        infra_failures,
        cost_usd: cost,
        tokens,
    }
}

/// A case whose verdict differs between the two agents.
#[derive(Clone, Debug, Serialize)]
pub struct Flip {
    /// The case id.
    pub case: String,
    /// Its mean score under A.
    pub a: f64,
    /// Under B.
    pub b: f64,
    /// `fixed` (A failed, B passed) or `broke`.
    pub direction: String,
}

/// The comparison of two agents' results on the cases both ran.
#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    /// A's label.
    pub a: String,
    /// B's label.
    pub b: String,
    /// Cases paired.
    pub cases: usize,
    /// Mean score of A, of B, on the paired cases.
    pub mean_a: f64,
    /// Mean score of B.
    pub mean_b: f64,
    /// B − A, per case (case means), with its normal 95% interval.
    pub difference: stats::PairedDiff,
    /// The paired bootstrap of B − A.
    pub bootstrap: stats::Bootstrap,
    /// Cases A passed and B failed.
    pub only_a_passed: u64,
    /// Cases B passed and A failed.
    pub only_b_passed: u64,
    /// The exact McNemar test's two-sided p-value on pass/fail.
    pub mcnemar_p: f64,
    /// The cases that flipped.
    pub flips: Vec<Flip>,
    /// Mean per-attempt deltas B − A: cost (US dollars), tokens, steps, duration (ms).
    pub delta_cost_usd: f64,
    /// Tokens.
    pub delta_tokens: f64,
    /// Steps.
    pub delta_steps: f64,
    /// Duration, ms.
    pub delta_duration_ms: f64,
    /// Whether the score difference is significant at 5%: the bootstrap interval leaves 0 out.
    pub significant: bool,
    /// The verdict for people.
    pub verdict: String,
}

/// The seed of the paired bootstrap (fixed: the same results always give the same interval).
pub const BOOTSTRAP_SEED: u64 = 0x5eed_2025;
/// Its resamples.
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;

/// Compares `a` with `b` on the cases both have.
pub fn diff(a: &AgentSummary, b: &AgentSummary) -> Diff {
    let bmap: BTreeMap<&str, &CaseSummary> =
        b.cases.iter().filter(|c| c.attempts > 0).map(|c| (c.id.as_str(), c)).collect();
    let pairs: Vec<(&CaseSummary, &CaseSummary)> =
        a.cases.iter().filter(|c| c.attempts > 0).filter_map(|c| bmap.get(c.id.as_str()).map(|d| (c, *d))).collect();
    let sa: Vec<f64> = pairs.iter().map(|(x, _)| x.mean).collect();
    let sb: Vec<f64> = pairs.iter().map(|(_, y)| y.mean).collect();
    let difference = stats::paired_difference(&sa, &sb);
    let bootstrap = stats::paired_bootstrap(&sa, &sb, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED);
    let only_a = pairs.iter().filter(|(x, y)| x.passed && !y.passed).count() as u64;
    let only_b = pairs.iter().filter(|(x, y)| !x.passed && y.passed).count() as u64;
    let flips = pairs
        .iter()
        .filter(|(x, y)| x.passed != y.passed)
        .map(|(x, y)| Flip {
            case: x.id.clone(),
            a: x.mean,
            b: y.mean,
            direction: if y.passed { "fixed".into() } else { "broke".into() },
        })
        .collect();
    let delta =
        |f: &dyn Fn(&CaseSummary) -> f64| stats::mean(&pairs.iter().map(|(x, y)| f(y) - f(x)).collect::<Vec<_>>());
    let significant = !pairs.is_empty() && (bootstrap.ci95.0 > 0.0 || bootstrap.ci95.1 < 0.0);
    let verdict = if !significant {
        "no significant difference".to_owned()
    } else if difference.mean > 0.0 {
        format!("{} is better (significant at 5%)", b.label)
    } else {
        format!("{} is worse (significant at 5%)", b.label)
    };
    Diff {
        a: a.label.clone(),
        b: b.label.clone(),
        cases: pairs.len(),
        mean_a: stats::mean(&sa),
        mean_b: stats::mean(&sb),
        difference,
        bootstrap,
        only_a_passed: only_a,
        only_b_passed: only_b,
        mcnemar_p: stats::mcnemar_exact(only_a, only_b),
        flips,
        delta_cost_usd: delta(&|c| c.cost_usd),
        delta_tokens: delta(&|c| c.tokens),
        delta_steps: delta(&|c| c.steps),
        delta_duration_ms: delta(&|c| c.duration_ms),
        significant,
        verdict,
    }
}

fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: a testsuite per agent, a testcase per case (a failure with the failed checks' reasons, an error
/// for an infrastructure failure).
pub fn junit(summary: &Summary) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let tests: usize = summary.agents.iter().map(|a| a.cases.len()).sum();
    let failures: usize = summary.agents.iter().map(|a| a.failed).sum();
    out.push_str(&format!(
        "<testsuites name=\"{}\" tests=\"{tests}\" failures=\"{failures}\">\n",
        xml(&format!("{} {}", summary.suite, summary.id))
    ));
    for a in &summary.agents {
        let errors = a.cases.iter().filter(|c| !c.infra.is_empty()).count();
        out.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{errors}\">\n",
            xml(&a.label),
            a.cases.len(),
            a.failed
        ));
        for c in &a.cases {
            let time = c.duration_ms / 1000.0;
            out.push_str(&format!(
                "    <testcase classname=\"{}\" name=\"{}\" time=\"{time:.3}\">\n",
                xml(&format!("{}.{}", summary.suite, a.label)),
                xml(&c.id)
            ));
            if c.attempts > 0 && !c.passed {
                out.push_str(&format!(
                    "      <failure message=\"score {:.3}, {}/{} passed\">{}</failure>\n",
                    c.mean,
                    c.passes,
                    c.attempts,
                    xml(&c.failures.join("\n"))
                ));
            }
            if !c.infra.is_empty() {
                out.push_str(&format!(
                    "      <error message=\"infrastructure failure\">{}</error>\n",
                    xml(&c.infra.join("\n"))
                ));
            }
            out.push_str("    </testcase>\n");
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{:.2}", x))
}

/// The terminal table: per agent, a line per case and the suite's mean with its interval.
pub fn table(summary: &Summary) -> String {
    let mut out = String::new();
    let w = summary.agents.iter().flat_map(|a| a.cases.iter().map(|c| c.id.chars().count())).max().unwrap_or(4).max(4);
    for a in &summary.agents {
        out.push_str(&format!("agent {}{}\n", a.label, a.path.as_ref().map(|p| format!(" ({p})")).unwrap_or_default()));
        out.push_str(&format!(
            "  {:<w$}  {:>5}  {:>5}  {:>6}  {:>6}  {:>6}  {:>9}  {:>6}  result\n",
            "case", "score", "pass", "pass@1", "pass@k", "pass^k", "cost", "steps"
        ));
        for c in &a.cases {
            let verdict = if !c.infra.is_empty() && c.attempts == 0 {
                "INFRA".to_owned()
            } else if c.passed {
                "ok".to_owned()
            } else {
                format!("FAIL {}", c.failures.first().map(|f| crate::check::preview(f)).unwrap_or_default())
            };
            out.push_str(&format!(
                "  {:<w$}  {:>5.2}  {:>2}/{:<2}  {:>6}  {:>6}  {:>6}  {:>9.4}  {:>6.1}  {verdict}\n",
                c.id,
                c.mean,
                c.passes,
                c.attempts,
                pct(c.pass_at_1),
                pct(c.pass_at_k),
                pct(c.pass_hat_k),
                c.cost_usd,
                c.steps
            ));
        }
        out.push_str(&format!(
            "  mean {:.3} ± {:.3} (95% CI {:.3}..{:.3}); {} passed, {} failed; cost ${:.4}, {} tokens\n",
            a.mean, a.se, a.ci95.0, a.ci95.1, a.passed, a.failed, a.cost_usd, a.tokens
        ));
        for f in &a.infra_failures {
            out.push_str(&format!("  infrastructure failure (not the agent's): {f}\n"));
        }
    }
    if !summary.complete {
        out.push_str(&format!("incomplete: {} of {} attempts done\n", summary.done, summary.planned));
    }
    out
}

/// The diff for people.
pub fn diff_text(d: &Diff) -> String {
    let mut out = format!("{} (A) vs {} (B) on {} cases\n", d.a, d.b, d.cases);
    out.push_str(&format!(
        "  mean score A {:.3}, B {:.3}; B − A {:+.3} (95% CI {:+.3}..{:+.3}; bootstrap {:+.3}..{:+.3}, p {:.4})\n",
        d.mean_a,
        d.mean_b,
        d.difference.mean,
        d.difference.ci95.0,
        d.difference.ci95.1,
        d.bootstrap.ci95.0,
        d.bootstrap.ci95.1,
        d.bootstrap.p_value
    ));
    out.push_str(&format!(
        "  pass/fail: {} only A passed, {} only B passed; exact McNemar p {:.4}\n",
        d.only_a_passed, d.only_b_passed, d.mcnemar_p
    ));
    out.push_str(&format!(
        "  per attempt B − A: cost {:+.6} USD, tokens {:+.1}, steps {:+.2}, duration {:+.0} ms\n",
        d.delta_cost_usd, d.delta_tokens, d.delta_steps, d.delta_duration_ms
    ));
    for f in &d.flips {
        out.push_str(&format!("  {} {}: {:.2} -> {:.2}\n", f.direction, f.case, f.a, f.b));
    }
    out.push_str(&format!("  {}\n", d.verdict));
    out
}
