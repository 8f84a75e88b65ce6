//! The statistics against known values: computed once with SciPy 1.x (`scipy.stats.sem`, `norm.ppf`,
//! `binomtest`) and `math.comb`, the inputs and outputs pasted here as fixtures.

use reins_eval::stats::*;

fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-12, "{a} != {b}");
}

#[test]
fn standard_error_and_interval_match_scipy() {
    let xs = [0.2, 0.5, 1.0, 0.0, 0.75, 1.0, 0.3];
    close(mean(&xs), 0.5357142857142857);
    close(standard_error(&xs), 0.1490902114709835);
    let (lo, hi) = ci95(mean(&xs), standard_error(&xs));
    close(lo, 0.2435028407836976);
    close(hi, 0.8279257306448737);
    close(Z_95, 1.959963984540054);
    assert_eq!(standard_error(&[0.5]), 0.0);
}

#[test]
fn clustered_standard_error_is_that_of_case_means_when_balanced() {
    // scipy.stats.sem of the four case means.
    let cl = vec![vec![1.0, 0.0, 1.0], vec![0.5, 0.5, 1.0], vec![0.0, 0.0, 0.0], vec![1.0, 1.0, 1.0]];
    close(clustered_standard_error(&cl), 0.20971762320196524);
    // One attempt per case: the plain standard error.
    let xs = [0.2, 0.5, 1.0, 0.0, 0.75, 1.0, 0.3];
    let single: Vec<Vec<f64>> = xs.iter().map(|x| vec![*x]).collect();
    close(clustered_standard_error(&single), 0.1490902114709835);
    // Unbalanced, against the sandwich formula evaluated with numpy.
    let un = vec![vec![1.0, 0.0, 1.0], vec![0.5, 0.5], vec![0.0, 0.0, 0.0, 1.0], vec![1.0]];
    close(clustered_standard_error(&un), 0.1414213562373095);
}

#[test]
fn pass_at_k_and_pass_hat_k_match_the_combinatorial_formulas() {
    // (n, c, k, pass@k = 1 − C(n−c,k)/C(n,k), pass^k = C(c,k)/C(n,k)).
    let cases = [
        (10, 3, 1, 0.30000000000000004, 0.3),
        (10, 3, 5, 0.9166666666666666, 0.0),
        (5, 0, 2, 0.0, 0.0),
        (5, 5, 5, 1.0, 1.0),
        (20, 7, 4, 0.8524251805985552, 0.007223942208462332),
        (4, 3, 4, 1.0, 0.0),
        (6, 4, 2, 0.9333333333333333, 0.4),
    ];
    for (n, c, k, at, hat) in cases {
        let got_at = pass_at_k(n, c, k).unwrap();
        let got_hat = pass_hat_k(n, c, k).unwrap();
        assert!((got_at - at).abs() < 1e-12, "pass@{k} of {c}/{n}: {got_at} != {at}");
        assert!((got_hat - hat).abs() < 1e-12, "pass^{k} of {c}/{n}: {got_hat} != {hat}");
    }
    assert_eq!(pass_at_k(3, 1, 4), None);
    assert_eq!(pass_hat_k(3, 1, 0), None);
}

#[test]
fn exact_mcnemar_matches_scipy_binomtest() {
    let cases = [
        (0, 30, 1.862645149230957e-09),
        (3, 10, 0.09228515625),
        (5, 5, 1.0),
        (1, 0, 1.0),
        (20, 35, 0.05806414679240905),
        (100, 130, 0.05561357778139238),
    ];
    for (b, c, p) in cases {
        let got = mcnemar_exact(b, c);
        assert!((got - p).abs() < 1e-9 * p.max(1e-9) + 1e-12, "McNemar({b}, {c}): {got} != {p}");
    }
    assert_eq!(mcnemar_exact(0, 0), 1.0);
}

#[test]
fn paired_difference_matches_scipy() {
    let d = [0.5, 0.0, -0.25, 1.0, 0.5, 0.5, 0.0, 0.75];
    let a = vec![0.0; d.len()];
    let p = paired_difference(&a, &d);
    close(p.mean, 0.375);
    close(p.se, 0.1494035761667992);
    assert_eq!(p.n, 8);
}

#[test]
fn paired_bootstrap_is_seeded_and_brackets_the_mean() {
    let a = [0.0, 1.0, 0.5, 0.0, 1.0, 0.0, 0.5, 1.0, 0.0, 0.0];
    let b = [1.0, 1.0, 0.5, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0];
    let one = paired_bootstrap(&a, &b, 5000, 7);
    let two = paired_bootstrap(&a, &b, 5000, 7);
    assert_eq!(one, two, "the same seed gives the same result");
    let m = paired_difference(&a, &b).mean;
    assert!(one.ci95.0 <= m && m <= one.ci95.1, "{one:?} brackets {m}");
    assert!(one.ci95.0 > 0.0 && one.p_value < 0.05, "{one:?}");
    // A constant difference: the interval is that point.
    let c = paired_bootstrap(&[0.0; 30], &[1.0; 30], 1000, 1);
    assert_eq!(c.ci95, (1.0, 1.0));
    assert_eq!(c.p_value, 0.0);
    // No difference: 0 inside, p 1.
    let z = paired_bootstrap(&[0.5; 30], &[0.5; 30], 1000, 1);
    assert_eq!(z.ci95, (0.0, 0.0));
    assert_eq!(z.p_value, 1.0);
}

#[test]
fn paired_bootstrap_matches_the_exact_bootstrap_distribution() {
    // 30 paired cases: B fixed 12, broke 3, the same on 15; the differences are 1, −1 and 0. The bootstrap
    // distribution of their mean is exactly that of (sum of 30 draws of +1 w.p. 0.4, −1 w.p. 0.1, 0 w.p. 0.5)/30,
    // computed once by convolution with exact fractions: P(S ≤ 1) = 0.01739, P(S ≤ 2) = 0.03332, P(S ≤ 15) =
    // 0.97063, P(S ≤ 16) = 0.98589, so its 2.5% and 97.5% percentiles are 2/30 and 16/30; P(S ≤ 0) = 0.0084934
    // and P(S ≥ 0) = 0.99612, so the two-sided p is 0.016987. Every seed's 200,000 resamples land there (the
    // quantiles' margins are over 10 standard errors of the resampled CDF).
    let mut a = vec![0.0; 30];
    let mut b = vec![0.0; 30];
    b[..12].fill(1.0);
    a[12..15].fill(1.0);
    for seed in [1, 7, 42] {
        let r = paired_bootstrap(&a, &b, 200_000, seed);
        assert_eq!(r.ci95, (2.0 / 30.0, 16.0 / 30.0), "seed {seed}");
        assert!((r.p_value - 0.016_986_813_500_327_227).abs() < 0.002, "seed {seed}: {r:?}");
    }
}
