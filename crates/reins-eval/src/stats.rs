//! The statistics of an eval, as pure functions: per case the mean, pass@k and pass^k; per suite the mean, its
//! standard error (clustered by case when a case ran more than once) and a 95% confidence interval; between two
//! agents the paired difference, the exact McNemar test on pass/fail and a seeded paired bootstrap on scores.
//!
//! Confidence intervals are normal (z = 1.959964); the tests compare every function with values computed by
//! SciPy.

use serde::Serialize;

/// The two-sided 97.5% quantile of the standard normal distribution.
pub const Z_95: f64 = 1.959_963_984_540_054;

/// The mean of `xs` (0 for none).
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// The sample standard deviation (n − 1 in the denominator; 0 for fewer than two values).
pub fn sample_sd(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let m = mean(xs);
    let ss: f64 = xs.iter().map(|x| (x - m) * (x - m)).sum();
    (ss / (xs.len() - 1) as f64).sqrt()
}

/// The standard error of the mean of independent values: sd / √n (`scipy.stats.sem`).
pub fn standard_error(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    sample_sd(xs) / (xs.len() as f64).sqrt()
}

/// The standard error of the mean of every attempt's score, clustered by case (`clusters[i]` holds the scores
/// of case i's epochs): the cluster-robust sandwich estimator √(G/(G−1) · Σ_g (Σ_j (x_gj − x̄))²) / N. With one
/// attempt per case it is [`standard_error`]; with as many per case it is the standard error of the case means.
pub fn clustered_standard_error(clusters: &[Vec<f64>]) -> f64 {
    let g = clusters.iter().filter(|c| !c.is_empty()).count();
    if g < 2 {
        return 0.0;
    }
    let all: Vec<f64> = clusters.iter().flatten().copied().collect();
    let n = all.len() as f64;
    let m = mean(&all);
    let sum: f64 = clusters
        .iter()
        .map(|c| {
            let s: f64 = c.iter().map(|x| x - m).sum();
            s * s
        })
        .sum();
    (g as f64 / (g as f64 - 1.0) * sum).sqrt() / n
}

/// A 95% normal confidence interval around `center`.
pub fn ci95(center: f64, se: f64) -> (f64, f64) {
    (center - Z_95 * se, center + Z_95 * se)
}

/// The unbiased estimator of pass@k from `n` attempts of which `c` passed: 1 − C(n−c, k) / C(n, k), the chance
/// that at least one of k attempts drawn without replacement passes. `None` when k is 0 or more than n.
pub fn pass_at_k(n: u64, c: u64, k: u64) -> Option<f64> {
    if k == 0 || k > n || c > n {
        return None;
    }
    if n - c < k {
        return Some(1.0);
    }
    // C(n−c, k) / C(n, k) = Π_{i = n−c+1}^{n} (1 − k / i).
    let mut ratio = 1.0;
    for i in (n - c + 1)..=n {
        ratio *= 1.0 - k as f64 / i as f64;
    }
    Some(1.0 - ratio)
}

/// The unbiased estimator of pass^k from `n` attempts of which `c` passed: C(c, k) / C(n, k), the chance that k
/// attempts drawn without replacement all pass. `None` when k is 0 or more than n.
pub fn pass_hat_k(n: u64, c: u64, k: u64) -> Option<f64> {
    if k == 0 || k > n || c > n {
        return None;
    }
    if c < k {
        return Some(0.0);
    }
    // C(c, k) / C(n, k) = Π_{i = 0}^{k−1} (c − i) / (n − i).
    let mut p = 1.0;
    for i in 0..k {
        p *= (c - i) as f64 / (n - i) as f64;
    }
    Some(p)
}

/// ln C(n, k).
fn ln_choose(n: u64, k: u64) -> f64 {
    let k = k.min(n - k);
    (0..k).map(|i| ((n - i) as f64).ln() - ((i + 1) as f64).ln()).sum()
}

/// The exact (binomial) McNemar test: `b` pairs passed by the first only, `c` by the second only. The two-sided
/// p-value min(1, 2 · P(X ≤ min(b, c))) for X ~ Binomial(b + c, ½) (`scipy.stats.binomtest(b, b+c).pvalue`);
/// 1 when no pair is discordant.
pub fn mcnemar_exact(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let lo = b.min(c);
    let ln_half_n = n as f64 * 0.5f64.ln();
    let tail: f64 = (0..=lo).map(|k| (ln_choose(n, k) + ln_half_n).exp()).sum();
    (2.0 * tail).min(1.0)
}

/// A paired difference: second minus first, per case.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairedDiff {
    /// Cases paired.
    pub n: usize,
    /// Mean difference.
    pub mean: f64,
    /// Its standard error.
    pub se: f64,
    /// The normal 95% interval.
    pub ci95: (f64, f64),
}

/// The paired difference of `b − a` (the slices line up case by case).
pub fn paired_difference(a: &[f64], b: &[f64]) -> PairedDiff {
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| y - x).collect();
    let m = mean(&d);
    let se = standard_error(&d);
    PairedDiff { n: d.len(), mean: m, se, ci95: ci95(m, se) }
}

/// The outcome of a paired bootstrap.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bootstrap {
    /// Resamples drawn.
    pub resamples: usize,
    /// The seed of the generator.
    pub seed: u64,
    /// The 2.5th and 97.5th percentiles of the resampled mean differences.
    pub ci95: (f64, f64),
    /// The two-sided p-value: twice the smaller share of resampled means on either side of 0 (at most 1).
    pub p_value: f64,
}

/// A paired bootstrap of the mean of `b − a`: `resamples` resamples of the cases with replacement, drawn from a
/// generator seeded with `seed` (the same inputs always give the same result).
pub fn paired_bootstrap(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Bootstrap {
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| y - x).collect();
    if d.is_empty() || resamples == 0 {
        return Bootstrap { resamples, seed, ci95: (0.0, 0.0), p_value: 1.0 };
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut means = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        let s: f64 = (0..d.len()).map(|_| d[rng.usize(..d.len())]).sum();
        means.push(s / d.len() as f64);
    }
    means.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = ((q * (resamples - 1) as f64).round() as usize).min(resamples - 1);
        means[i]
    };
    let le = means.iter().filter(|m| **m <= 0.0).count() as f64 / resamples as f64;
    let ge = means.iter().filter(|m| **m >= 0.0).count() as f64 / resamples as f64;
    Bootstrap { resamples, seed, ci95: (at(0.025), at(0.975)), p_value: (2.0 * le.min(ge)).min(1.0) }
}
