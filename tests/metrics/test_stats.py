"""Tests for bindscope.metrics.stats."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from bindscope.metrics import stats

N_RES = 2000


def _rng_kw(seed: int) -> dict[str, np.random.Generator]:
    """Generator keyword for scipy resampling calls (``rng`` from scipy 1.15)."""
    return {"rng": np.random.default_rng(seed)}


# --------------------------------------------------------------------------
# Result types
# --------------------------------------------------------------------------


def test_estimate_to_dict_is_plain_json() -> None:
    est = stats.mean_ci(np.arange(10.0), n_resamples=N_RES, seed=3)
    d = est.to_dict()
    assert set(d) == {"value", "low", "high", "confidence", "method", "n"}
    assert type(d["value"]) is float and type(d["low"]) is float
    assert type(d["n"]) is int and type(d["method"]) is str
    assert json.loads(json.dumps(d)) == d
    with pytest.raises(AttributeError):
        est.value = 1.0  # type: ignore[misc]  # frozen


def test_test_result_to_dict_is_plain_json() -> None:
    res = stats.binomial_leads(np.int64(30), 41)
    d = res.to_dict()
    assert set(d) == {"statistic", "p_value", "method", "alternative", "n"}
    assert type(d["statistic"]) is float and type(d["p_value"]) is float
    assert type(d["n"]) is int
    assert json.loads(json.dumps(d)) == d


def test_to_dict_turns_numpy_scalars_into_declared_plain_types() -> None:
    est = stats.Estimate(
        np.float32(0.5), np.float64(0.25), 1, np.float64(0.95), np.str_("m"), np.int64(7)
    )
    res = stats.TestResult(np.float64(2.0), np.float32(0.125), "t", np.str_("less"), np.int32(4))
    want_est = {"value": 0.5, "low": 0.25, "high": 1.0, "confidence": 0.95, "method": "m", "n": 7}
    want_res = {"statistic": 2.0, "p_value": 0.125, "method": "t", "alternative": "less", "n": 4}
    for got, want in ((est.to_dict(), want_est), (res.to_dict(), want_res)):
        assert list(got) == list(want)  # field order
        assert got == want
        assert [type(v) for v in got.values()] == [type(v) for v in want.values()]


# --------------------------------------------------------------------------
# Bootstrap intervals
# --------------------------------------------------------------------------


def test_mean_ci_covers_true_mean_for_large_normal_sample() -> None:
    rng = np.random.default_rng(12345)
    x = rng.normal(loc=1.0, scale=2.0, size=2000)
    est = stats.mean_ci(x, n_resamples=N_RES, seed=0)
    assert est.method == "bootstrap-bca"
    assert est.value == pytest.approx(float(np.mean(x)))
    assert est.low < 1.0 < est.high
    assert est.low < est.value < est.high
    # Width close to the normal-theory width 2 * 1.96 * sd / sqrt(n) ~= 0.175.
    assert est.high - est.low == pytest.approx(2 * 1.96 * 2.0 / math.sqrt(2000), rel=0.15)
    assert est.n == 2000 and est.confidence == 0.95


def test_mean_ci_width_shrinks_with_n() -> None:
    rng = np.random.default_rng(7)
    small = stats.mean_ci(rng.normal(size=50), n_resamples=N_RES, seed=1)
    large = stats.mean_ci(rng.normal(size=800), n_resamples=N_RES, seed=1)
    assert (large.high - large.low) < 0.5 * (small.high - small.low)


def test_mean_ci_higher_confidence_is_wider() -> None:
    x = np.random.default_rng(8).normal(size=60)
    c90 = stats.mean_ci(x, confidence=0.90, n_resamples=N_RES, seed=2)
    c99 = stats.mean_ci(x, confidence=0.99, n_resamples=N_RES, seed=2)
    assert c99.low < c90.low and c99.high > c90.high


def test_mean_ci_deterministic_given_seed() -> None:
    x = np.random.default_rng(9).exponential(size=40)
    a = stats.mean_ci(x, n_resamples=N_RES, seed=11)
    b = stats.mean_ci(x, n_resamples=N_RES, seed=11)
    c = stats.mean_ci(x, n_resamples=N_RES, seed=12)
    assert a == b
    assert (a.low, a.high) != (c.low, c.high)
    assert a.value == c.value


def test_mean_ci_degenerate_all_equal() -> None:
    est = stats.mean_ci([0.25, 0.25, 0.25, 0.25], n_resamples=N_RES)
    assert (est.value, est.low, est.high) == (0.25, 0.25, 0.25)
    assert est.method == "degenerate"
    assert est.n == 4


def test_paired_difference_of_shifted_copy_has_zero_width() -> None:
    rng = np.random.default_rng(21)
    a = rng.uniform(0.2, 1.0, size=30)
    b = a - 0.3  # same prompts, every score lower by 0.3 (rounding aside)
    est = stats.paired_difference(a, b, n_resamples=N_RES)
    assert est.method == "degenerate"
    assert est.value == pytest.approx(0.3)
    assert est.low == est.high == est.value
    assert est.n == 30
    # Without pairing, the between-prompt spread makes the interval wide.
    unpaired = stats.bootstrap_statistic(
        (a, b), lambda x, y: np.mean(x) - np.mean(y), paired=False, n_resamples=N_RES
    )
    assert unpaired.high - unpaired.low > 0.1


def test_paired_difference_matches_mean_ci_of_differences() -> None:
    rng = np.random.default_rng(22)
    a = rng.normal(size=25)
    b = a - 0.5 + rng.normal(scale=0.2, size=25)
    est = stats.paired_difference(a, b, n_resamples=N_RES, seed=5)
    ref = stats.mean_ci(a - b, n_resamples=N_RES, seed=5)
    assert est == ref
    assert est.value == pytest.approx(float(np.mean(a - b)))
    assert est.low > 0.3


def test_bootstrap_statistic_paired_equals_bootstrap_of_differences() -> None:
    rng = np.random.default_rng(23)
    a = rng.normal(size=20)
    b = a + rng.normal(scale=0.5, size=20)
    gen = stats.bootstrap_statistic(
        (a, b), lambda x, y: np.mean(x - y), paired=True, n_resamples=N_RES, seed=4
    )
    ref = sps.bootstrap(
        (a, b),
        lambda x, y: np.mean(x - y),
        paired=True,
        vectorized=False,
        n_resamples=N_RES,
        method="BCa",
        **_rng_kw(4),
    )
    assert gen.method == "bootstrap-bca"
    assert gen.low == pytest.approx(ref.confidence_interval.low)
    assert gen.high == pytest.approx(ref.confidence_interval.high)
    assert gen.n == 20


def test_bootstrap_statistic_falls_back_to_percentile_when_bca_undefined() -> None:
    # With two zeros every jackknife minimum is 0, so the BCa acceleration is
    # 0/0 and scipy's BCa interval is NaN; resamples without a zero still vary.
    x = np.array([0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns that BCa is undefined
        raw = sps.bootstrap((x,), np.min, n_resamples=N_RES, **_rng_kw(0))
    assert math.isnan(raw.confidence_interval.low)
    est = stats.bootstrap_statistic((x,), np.min, paired=False, n_resamples=N_RES, seed=0)
    ref = sps.bootstrap((x,), np.min, n_resamples=N_RES, method="percentile", **_rng_kw(0))
    assert est.method == "bootstrap-percentile"
    assert est.value == 0.0
    assert est.low == pytest.approx(ref.confidence_interval.low)
    assert est.high == pytest.approx(ref.confidence_interval.high)
    assert est.high > est.low


def test_bootstrap_statistic_nonfinite_resamples_raise() -> None:
    # Pooled SD is 0 on resamples that draw one value per group: d undefined.
    with pytest.raises(ValueError, match="not finite on"):
        stats.cohens_d_ci([1.0, 2.0, 2.0], [3.0, 4.5, 4.5], n_resamples=N_RES)


# --------------------------------------------------------------------------
# Specificity
# --------------------------------------------------------------------------


def test_specificity_planted_effect() -> None:
    rng = np.random.default_rng(31)
    n, m = 40, 5
    baseline = rng.uniform(0.5, 1.0, size=n)
    top = baseline - 0.5  # top-k ablation drops every prompt by 0.5
    random_sets = baseline + rng.normal(scale=0.05, size=(m, n))  # random drop ~0
    est = stats.specificity(baseline, top, random_sets, n_resamples=N_RES)
    expected = np.mean(baseline - top) - np.mean(
        [np.mean(baseline - random_sets[s]) for s in range(m)]
    )
    assert est.value == pytest.approx(expected)
    assert est.value == pytest.approx(0.5, abs=0.02)
    assert est.low > 0.0
    assert est.low < est.value < est.high
    assert est.n == n


def test_specificity_null_is_zero() -> None:
    baseline = np.linspace(0.2, 0.9, 12)
    est = stats.specificity(baseline, baseline.copy(), np.tile(baseline, (4, 1)))
    assert est.value == pytest.approx(0.0, abs=1e-12)
    assert est.low == est.high == est.value
    assert est.method == "degenerate"


def test_specificity_random_drop_cancels_top_drop() -> None:
    rng = np.random.default_rng(32)
    baseline = rng.uniform(0.5, 1.0, size=30)
    top = baseline - 0.2 + rng.normal(scale=0.05, size=30)
    random_sets = baseline - 0.2 + rng.normal(scale=0.05, size=(6, 30))
    est = stats.specificity(baseline, top, random_sets, n_resamples=N_RES)
    assert est.low < 0.0 < est.high


def test_specificity_resamples_prompts_jointly() -> None:
    # Paired bootstrap over prompt indices of the full specificity formula
    # (all arrays indexed by the same resampled prompts) gives the same CI.
    rng = np.random.default_rng(33)
    baseline = rng.uniform(0.5, 1.0, size=25)
    top = baseline - 0.3 + rng.normal(scale=0.1, size=25)
    random_sets = baseline - 0.1 + rng.normal(scale=0.1, size=(3, 25))

    def spec(b, t, r0, r1, r2, axis=-1):
        drops = [np.mean(b - r, axis=axis) for r in (r0, r1, r2)]
        return np.mean(b - t, axis=axis) - np.mean(drops, axis=0)

    ref = stats.bootstrap_statistic(
        (baseline, top, *random_sets), spec, paired=True, n_resamples=N_RES, seed=6
    )
    est = stats.specificity(baseline, top, random_sets, n_resamples=N_RES, seed=6)
    assert est.value == pytest.approx(ref.value)
    assert est.low == pytest.approx(ref.low)
    assert est.high == pytest.approx(ref.high)


def test_specificity_shape_errors() -> None:
    b = np.ones(5)
    with pytest.raises(ValueError, match="random_sets"):
        stats.specificity(b, b, np.ones(5))  # 1-D, must be [m, n]
    with pytest.raises(ValueError, match="random_sets"):
        stats.specificity(b, b, np.ones((2, 4)))
    with pytest.raises(ValueError, match="top"):
        stats.specificity(b, np.ones(4), np.ones((2, 5)))


# --------------------------------------------------------------------------
# Permutation tests and rank p-values
# --------------------------------------------------------------------------


def test_rank_p_value_countable() -> None:
    null = [1.0, 2.0, 3.0, 4.0]
    # greater: 1 + #{3,4} = 3 over 5; less: 1 + #{1,2,3} = 4 over 5.
    assert stats.rank_p_value(3.0, null) == pytest.approx(3 / 5)
    assert stats.rank_p_value(3.0, null, alternative="less") == pytest.approx(4 / 5)
    assert stats.rank_p_value(3.0, null, alternative="two-sided") == 1.0
    # observed 5 beats everything: greater 1/5, less 5/5, two-sided 2/5.
    assert stats.rank_p_value(5.0, null) == pytest.approx(1 / 5)
    assert stats.rank_p_value(5.0, null, alternative="less") == 1.0
    assert stats.rank_p_value(5.0, null, alternative="two-sided") == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match="alternative"):
        stats.rank_p_value(5.0, null, alternative="bigger")
    with pytest.raises(ValueError, match="null"):
        stats.rank_p_value(5.0, [1.0, math.nan])


def test_two_sample_permutation_exact_countable() -> None:
    # C(6,3) = 20 splits; only {1,2,3} vs {4,5,6} reaches mean diff <= -3.
    res = stats.two_sample_permutation([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], n_resamples=N_RES)
    assert res.statistic == pytest.approx(-3.0)
    assert res.p_value == pytest.approx(2 / 20)
    assert res.alternative == "two-sided" and res.n == 6
    less = stats.two_sample_permutation(
        [1.0, 2.0, 3.0], [4.0, 5.0, 6.0], alternative="less", n_resamples=N_RES
    )
    assert less.p_value == pytest.approx(1 / 20)
    greater = stats.two_sample_permutation(
        [1.0, 2.0, 3.0], [4.0, 5.0, 6.0], alternative="greater", n_resamples=N_RES
    )
    assert greater.p_value == pytest.approx(1.0)


def test_two_sample_permutation_randomized_deterministic_and_sensitive() -> None:
    rng = np.random.default_rng(41)
    x = rng.normal(0.8, 1.0, size=30)
    y = rng.normal(0.0, 1.0, size=30)
    a = stats.two_sample_permutation(x, y, n_resamples=N_RES, seed=1)
    b = stats.two_sample_permutation(x, y, n_resamples=N_RES, seed=1)
    assert a == b
    assert a.statistic == pytest.approx(np.mean(x) - np.mean(y))
    assert a.p_value < 0.01
    same = stats.two_sample_permutation(x, x + 0.0, n_resamples=N_RES, seed=1)
    assert same.p_value > 0.9


def test_paired_permutation_exact_sign_flips() -> None:
    a = [2.0, 3.0, 4.0, 5.0]
    b = [1.0, 1.0, 1.0, 1.0]  # differences 1, 2, 3, 4; 2**4 = 16 sign patterns
    greater = stats.paired_permutation(a, b, alternative="greater", n_resamples=N_RES)
    assert greater.statistic == pytest.approx(2.5)
    assert greater.p_value == pytest.approx(1 / 16)
    two = stats.paired_permutation(a, b, n_resamples=N_RES)
    assert two.p_value == pytest.approx(2 / 16)
    assert two.n == 4 and two.method == "permutation-paired"


# --------------------------------------------------------------------------
# Effect sizes
# --------------------------------------------------------------------------


def test_cohens_d_by_hand() -> None:
    # x mean 3, var 2.5; y mean 5, var 1; pooled var (4*2.5 + 2*1)/6 = 2.
    # d = (3 - 5) / sqrt(2) = -sqrt(2).
    assert stats.cohens_d([1, 2, 3, 4, 5], [4, 5, 6]) == pytest.approx(-math.sqrt(2))
    assert stats.cohens_d([4, 5, 6], [1, 2, 3, 4, 5]) == pytest.approx(math.sqrt(2))
    assert math.isnan(stats.cohens_d([1.0, 1.0], [1.0, 1.0]))


def test_cohens_dz_by_hand() -> None:
    # a - b = [2, 3, 3, 4]: mean 3, var (1 + 0 + 0 + 1)/3 = 2/3 -> dz = 3/sqrt(2/3).
    dz = stats.cohens_dz([3, 5, 7, 9], [1, 2, 4, 5])
    assert dz == pytest.approx(3 / math.sqrt(2 / 3))
    assert math.isnan(stats.cohens_dz([1.0, 2.0], [0.0, 1.0]))


def test_cohens_d_ci() -> None:
    rng = np.random.default_rng(51)
    x = rng.normal(1.0, 1.0, size=60)
    y = rng.normal(0.0, 1.0, size=50)
    est = stats.cohens_d_ci(x, y, n_resamples=N_RES, seed=2)
    assert est.value == pytest.approx(stats.cohens_d(x, y))
    assert est.method in ("bootstrap-bca", "bootstrap-percentile")
    assert est.low < est.value < est.high
    assert est.low > 0.3
    assert est.n == 110
    assert est == stats.cohens_d_ci(x, y, n_resamples=N_RES, seed=2)
    null = stats.cohens_d_ci(x, x + rng.normal(scale=1e-3, size=60), n_resamples=N_RES)
    assert null.low < 0.0 < null.high


def test_cohens_d_ci_zero_sd_raises() -> None:
    with pytest.raises(ValueError, match="standard deviation"):
        stats.cohens_d_ci([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], n_resamples=N_RES)


# --------------------------------------------------------------------------
# Multiple comparisons, proportions, binomial test
# --------------------------------------------------------------------------


def test_adjust_pvalues_holm_and_bh_by_hand() -> None:
    p = [0.01, 0.04, 0.03, 0.20]
    # Holm: sorted 0.01*4=0.04, 0.03*3=0.09, 0.04*2=0.08 -> 0.09 (monotone), 0.2*1.
    assert stats.adjust_pvalues(p) == pytest.approx([0.04, 0.09, 0.09, 0.20])
    # BH: 0.01*4/1=0.04, 0.03*4/2=0.06 -> min with 0.04*4/3=0.0533, 0.2*4/4.
    bh = stats.adjust_pvalues(p, method="fdr_bh")
    assert bh == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.20])
    assert stats.adjust_pvalues(p, method="bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.80])
    assert all(type(v) is float for v in bh)
    with pytest.raises(ValueError):
        stats.adjust_pvalues(p, method="not-a-method")
    with pytest.raises(ValueError, match="pvalues"):
        stats.adjust_pvalues([0.1, math.nan])


@pytest.mark.parametrize(("k", "n"), [(7, 10), (0, 10), (10, 10), (30, 41)])
def test_wilson_ci_matches_statsmodels(k: int, n: int) -> None:
    est = stats.wilson_ci(k, n)
    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    assert est.value == pytest.approx(k / n)
    assert est.low == pytest.approx(low, abs=1e-12)
    assert est.high == pytest.approx(high, abs=1e-12)
    assert est.method == "wilson" and est.n == n


def test_wilson_ci_by_hand_and_confidence() -> None:
    est = stats.wilson_ci(7, 10)
    # Known Wilson 95% interval for 7/10: (0.3968, 0.8922); the bound is the rounding of these
    # published five-digit values, not float noise.
    assert est.low == pytest.approx(0.39678, abs=1e-5)
    assert est.high == pytest.approx(0.89221, abs=1e-5)
    est90 = stats.wilson_ci(7, 10, confidence=0.90)
    low90, high90 = proportion_confint(7, 10, alpha=0.10, method="wilson")
    assert (est90.low, est90.high) == pytest.approx((low90, high90))
    with pytest.raises(ValueError, match="'k'"):
        stats.wilson_ci(11, 10)


def test_binomial_leads() -> None:
    res = stats.binomial_leads(30, 41)
    assert res.p_value == pytest.approx(0.00216, abs=5e-6)
    assert res.statistic == pytest.approx(30 / 41)
    assert res.alternative == "greater" and res.n == 41
    two = stats.binomial_leads(30, 41, alternative="two-sided")
    assert two.p_value == pytest.approx(sps.binomtest(30, 41).pvalue)
    assert two.p_value > res.p_value


# --------------------------------------------------------------------------
# Correlations
# --------------------------------------------------------------------------


def test_correlation_methods_by_hand_and_not_swapped() -> None:
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    y = [2.0, 1.0, 4.0, 3.0, 10.0]
    # Spearman: rank differences (-1, 1, -1, 1, 0), sum d^2 = 4 -> 1 - 6*4/120 = 0.8.
    sp = stats.correlation(x, y, method="spearman")
    assert sp.statistic == pytest.approx(0.8)
    assert sp.p_value == pytest.approx(sps.spearmanr(x, y).pvalue)
    assert sp.method == "spearman"
    pe = stats.correlation(x, y, method="pearson")
    ref = sps.pearsonr(x, y)
    assert pe.statistic == pytest.approx(ref.statistic)
    assert pe.p_value == pytest.approx(ref.pvalue)
    assert pe.statistic != pytest.approx(0.8)
    assert pe.method == "pearson" and pe.n == 5


def test_correlation_method_is_required_and_checked() -> None:
    with pytest.raises(TypeError):
        stats.correlation([1, 2, 3], [1, 2, 3])  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="method"):
        stats.correlation([1, 2, 3], [1, 2, 3], method="kendall")


def test_correlation_constant_input_is_nan() -> None:
    res = stats.correlation([1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0], method="pearson")
    assert math.isnan(res.statistic) and math.isnan(res.p_value)
    assert res.method == "pearson:constant"
    res = stats.correlation([1.0, 2.0, 3.0], [5.0, 5.0, 5.0], method="spearman")
    assert res.method == "spearman:constant"


def test_lagged_correlations_detects_lead() -> None:
    rng = np.random.default_rng(61)
    eb = rng.normal(size=40)
    beh = np.empty(40)
    beh[0] = 0.0
    beh[1:] = eb[:-1] + rng.normal(scale=0.1, size=39)  # behaviour follows eb by 1
    out = stats.lagged_correlations(eb, beh, lag=1)
    assert set(out) == {"pearson", "spearman"}
    for method in ("pearson", "spearman"):
        fwd, bwd = out[method]["forward"], out[method]["backward"]
        assert fwd.method == method and fwd.n == 39
        assert fwd.statistic > 0.9
        assert fwd.statistic > bwd.statistic
        assert out[method]["lead_diff"] == pytest.approx(fwd.statistic - bwd.statistic)
        assert out[method]["lead_diff"] > 0.5
    ref = sps.pearsonr(eb[:-1], beh[1:]).statistic
    assert out["pearson"]["forward"].statistic == pytest.approx(ref)
    # Swapping the roles reverses the direction.
    rev = stats.lagged_correlations(beh, eb, lag=1)
    assert rev["spearman"]["lead_diff"] < -0.5


def test_lagged_correlations_lag_two_slices() -> None:
    eb = np.array([0.0, 1.0, 3.0, 2.0, 5.0, 4.0, 7.0])
    beh = np.array([1.0, 0.0, 2.0, 5.0, 1.0, 6.0, 3.0])
    out = stats.lagged_correlations(eb, beh, lag=2)
    assert out["pearson"]["forward"].statistic == pytest.approx(
        sps.pearsonr(eb[:-2], beh[2:]).statistic
    )
    assert out["spearman"]["backward"].statistic == pytest.approx(
        sps.spearmanr(beh[:-2], eb[2:]).statistic
    )


def test_lagged_correlations_too_short() -> None:
    with pytest.raises(ValueError, match="lag"):
        stats.lagged_correlations([1.0, 2.0, 3.0], [1.0, 2.0, 4.0], lag=1)
    with pytest.raises(ValueError, match="lag"):
        stats.lagged_correlations(np.arange(5.0), np.arange(5.0), lag=3)
    with pytest.raises(ValueError, match="'beh'"):
        stats.lagged_correlations(np.arange(6.0), np.arange(5.0))


def test_windowed_correlation() -> None:
    eb = np.arange(10.0)
    beh = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 9.0, 8.0, 7.0, 6.0, 5.0])
    out = stats.windowed_correlation(eb, beh, split=5, method="spearman")
    assert out["early"].statistic == pytest.approx(1.0)
    assert out["late"].statistic == pytest.approx(-1.0)
    assert out["early"].n == 5 and out["late"].n == 5
    with pytest.raises(ValueError, match="split"):
        stats.windowed_correlation(eb, beh, split=8, method="pearson")


# --------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: stats.mean_ci([1.0, math.nan, 2.0, math.nan]), "'values' has 2 NaN"),
        (lambda: stats.paired_difference([1.0, 2.0], [1.0, math.nan]), "'b' has 1 NaN"),
        (
            lambda: stats.specificity([1.0, 2.0], [1.0, 2.0], [[1.0, math.nan]]),
            "'random_sets' has 1 NaN",
        ),
        (lambda: stats.cohens_d([math.nan, 1.0], [1.0, 2.0]), "'x' has 1 NaN"),
        (lambda: stats.two_sample_permutation([1.0, 2.0], [math.nan, 1.0]), "'y' has 1 NaN"),
        (lambda: stats.correlation([1.0, 2.0, 3.0], [1.0, math.nan, 2.0], method="pearson"), "'y'"),
        (lambda: stats.lagged_correlations([math.nan] * 6, list(range(6))), "'eb' has 6 NaN"),
    ],
)
def test_nan_input_raises_with_argument_name(call, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: stats.mean_ci([1.0]), "'values'"),
        (lambda: stats.paired_difference([1.0, 2.0], [1.0, 2.0, 3.0]), "'a' and 'b'"),
        (lambda: stats.cohens_d([1.0], [1.0, 2.0]), "'x'"),
        (lambda: stats.paired_permutation([1.0], [2.0]), "'a'"),
        (lambda: stats.correlation([1.0, 2.0], [2.0, 1.0], method="spearman"), "'x'"),
        (lambda: stats.bootstrap_statistic(([1.0, 2.0], [1.0]), np.mean, paired=True), "data"),
    ],
)
def test_too_short_input_raises(call, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        call()


PAIRED_CALLS = {
    "cohens_dz": lambda a, b: stats.cohens_dz(a, b),
    "paired_difference": lambda a, b: stats.paired_difference(a, b, n_resamples=99),
    "paired_permutation": lambda a, b: stats.paired_permutation(a, b, n_resamples=99),
}
INDEPENDENT_CALLS = {
    "cohens_d": lambda x, y: stats.cohens_d(x, y),
    "cohens_d_ci": lambda x, y: stats.cohens_d_ci(x, y, n_resamples=99),
    "two_sample_permutation": lambda x, y: stats.two_sample_permutation(x, y, n_resamples=99),
}


@pytest.mark.parametrize("name", sorted(PAIRED_CALLS))
def test_paired_statistics_reject_unequal_lengths(name: str) -> None:
    with pytest.raises(ValueError, match="'a' and 'b' must have the same length, got 4 and 3"):
        PAIRED_CALLS[name]([1.0, 2.0, 4.0, 3.0], [2.0, 1.0, 5.0])


@pytest.mark.parametrize("name", sorted(INDEPENDENT_CALLS))
def test_independent_statistics_take_unequal_lengths(name: str) -> None:
    INDEPENDENT_CALLS[name]([1.0, 2.0, 4.0, 3.0], [2.0, 1.0, 5.0])  # no length error


def test_seed_must_be_int() -> None:
    with pytest.raises(TypeError, match="seed"):
        stats.mean_ci([1.0, 2.0, 3.0], seed=np.random.default_rng(0))  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# Sequential Monte Carlo p-values (Besag and Clifford 1991)
# --------------------------------------------------------------------------


def test_sequential_p_formula_on_hand_sequences() -> None:
    # h = 2 exceedances (>= counts ties) reached at the 4th draw: p = h / l = 2 / 4
    found = stats.sequential_p_value(0.5, [0.1, 0.5, 0.2, 0.9, 0.7], stop_at=2, max_draws=9)
    assert (found.p, found.n_drawn, found.exceedances, found.stopped) == (0.5, 4, 2, "reached")
    # never reached within max_draws = 5: p = (g + 1) / (max + 1) with g = 1
    found = stats.sequential_p_value(0.8, [0.1, 0.9, 0.2, 0.3, 0.4, 0.95], stop_at=3, max_draws=5)
    assert (found.p, found.n_drawn, found.exceedances, found.stopped) == (2 / 6, 5, 1, "maximum")
    # undecided: too few draws yet, and fewer than h exceedances
    assert stats.sequential_p_value(0.8, [0.1, 0.9], stop_at=3, max_draws=5) is None
    # the far tail reaches the floor 1 / (max + 1)
    assert stats.sequential_p_value(9.0, np.zeros(199)).p == pytest.approx(0.005)
    with pytest.raises(ValueError, match="max_draws"):
        stats.sequential_p_value(0.0, [1.0], stop_at=5, max_draws=0)
    # max below h: never stops early, the fixed-count rank p
    short = stats.sequential_p_value(0.5, [0.9, 0.1, 0.7], stop_at=5, max_draws=3)
    assert short.p == stats.rank_p_value(0.5, [0.9, 0.1, 0.7]) == 0.75


def test_sequential_p_stops_as_the_exact_tail_says() -> None:
    # Null U(0, 1) and observed x: each draw exceeds with the exact tail q = 1 - x. The rule
    # stops on h exceedances within max draws with probability binom.sf(h - 1, max, q), and
    # then after L draws with L - h ~ negative binomial(h, q).
    rng = np.random.default_rng(0)
    h, most, x, n_sim = 5, 60, 0.9, 4000
    q = 1 - x
    found = [
        stats.sequential_p_value(x, rng.random(most), stop_at=h, max_draws=most)
        for _ in range(n_sim)
    ]
    reached = np.array([f.stopped == "reached" for f in found])
    exact = sps.binom.sf(h - 1, most, q)
    # 5 binomial standard errors: a wrong rule (e.g. > instead of >=, or h - 1) moves it by more
    assert abs(reached.mean() - exact) < 5 * math.sqrt(exact * (1 - exact) / n_sim)
    drawn = np.array([f.n_drawn for f in found if f.stopped == "reached"])
    ls = np.arange(h, most + 1)
    pmf = sps.nbinom.pmf(ls - h, h, q)
    mean_l = float((ls * pmf).sum() / pmf.sum())  # E[L | stopped within max]
    sd_l = math.sqrt(float(((ls - mean_l) ** 2 * pmf).sum() / pmf.sum()))
    assert abs(drawn.mean() - mean_l) < 5 * sd_l / math.sqrt(drawn.size)
    # (h - 1) / (L - 1) is unbiased for q (negative binomial); h / L has its median near q
    assert np.median([f.p for f in found]) == pytest.approx(q, rel=0.35)


def test_sequential_p_is_valid_under_the_null() -> None:
    # Observed and null from the same distribution: P(p <= a) = a at each attainable a
    # (Besag and Clifford 1991, section 2), here a = 1 / (max + 1) and h / l values.
    rng = np.random.default_rng(1)
    h, most, n_sim = 4, 39, 20000
    ps = np.array(
        [
            stats.sequential_p_value(rng.random(), rng.random(most), stop_at=h, max_draws=most).p
            for _ in range(n_sim)
        ]
    )
    for level in (1 / (most + 1), h / 20, h / 8):
        rate = float((ps <= level + 1e-12).mean())
        assert abs(rate - level) < 5 * math.sqrt(level * (1 - level) / n_sim), (level, rate)


def test_detectable_drop_formula_and_its_sqrt_n_cost() -> None:
    drops = np.array([0.0, 0.02, -0.01, 0.01, 0.03])
    items = np.random.default_rng(0).normal(0.1, 0.3, 80)
    mdd = stats.detectable_drop(drops, items, alpha=0.05, power=0.8)
    error = items.std(ddof=1) / math.sqrt(80)
    by_hand = drops.mean() + 1.6448536 * drops.std(ddof=1) + 0.8416212 * error
    assert mdd == pytest.approx(by_hand, rel=1e-6)
    # a stricter level (Holm over 3) needs a bigger drop
    assert stats.detectable_drop(drops, items, alpha=0.05 / 3) > mdd
    # the sqrt(N / n) cost of cutting items: 4x the items, half the part above the mean
    # (random drops, themselves means over the items, shrink alike)
    more = stats.detectable_drop(drops / 2, np.tile(items, 4) + 0 * np.arange(320))
    below = stats.detectable_drop(drops, items)
    assert more - (drops / 2).mean() < below - drops.mean()
