"""Hypothesis tests: empirical-null rank p-values, permutation tests, the binomial test."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps

from bindscope.metrics.stats._checks import _against_null, _rng, _two_samples
from bindscope.metrics.stats.results import TestResult

_ALTERNATIVES = ("two-sided", "greater", "less")

_PERMUTATION_LABELS = {"independent": "permutation-independent", "samples": "permutation-paired"}


def rank_p_value(observed: float, null: ArrayLike, *, alternative: str = "greater") -> float:
    """``(1 + #{null >= observed}) / (1 + len(null))`` (``"greater"``; ``"less"``: <=).

    ``"two-sided"``: ``min(1, 2 * min(greater, less))``.
    """
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"'alternative' must be one of {_ALTERNATIVES}, got {alternative!r}")
    obs, nul = _against_null(observed, null, min_len=1)
    m = nul.size
    p_greater = (1 + int(np.sum(nul >= obs))) / (1 + m)
    p_less = (1 + int(np.sum(nul <= obs))) / (1 + m)
    two_sided = min(1.0, 2.0 * min(p_greater, p_less))
    return float({"greater": p_greater, "less": p_less, "two-sided": two_sided}[alternative])


def _mean_diff_stat(
    x: NDArray[np.float64], y: NDArray[np.float64], axis: int = -1
) -> NDArray[np.float64]:
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def _mean_diff_permutation(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    permutation_type: str,
    alternative: str,
    n_resamples: int,
    seed: int,
) -> TestResult:
    res = sps.permutation_test(
        (x, y),
        _mean_diff_stat,
        permutation_type=permutation_type,
        vectorized=True,
        n_resamples=n_resamples,
        alternative=alternative,
        axis=-1,
        rng=_rng(seed),
    )
    n = x.size if permutation_type == "samples" else x.size + y.size
    label = _PERMUTATION_LABELS[permutation_type]
    return TestResult(float(res.statistic), float(res.pvalue), label, alternative, int(n))


def two_sample_permutation(
    x: ArrayLike,
    y: ArrayLike,
    *,
    alternative: str = "two-sided",
    n_resamples: int = 9999,
    seed: int = 0,
) -> TestResult:
    """Permutation test of ``mean(x) - mean(y)`` for independent samples (scipy's)."""
    ax, ay = _two_samples(x, y, ("x", "y"), min_len=2, paired=False)
    return _mean_diff_permutation(ax, ay, "independent", alternative, n_resamples, seed)


def paired_permutation(
    a: ArrayLike,
    b: ArrayLike,
    *,
    alternative: str = "two-sided",
    n_resamples: int = 9999,
    seed: int = 0,
) -> TestResult:
    """Sign-flip permutation test of the mean paired difference ``mean(a - b)`` (scipy's)."""
    xa, xb = _two_samples(a, b, ("a", "b"), min_len=2, paired=True)
    return _mean_diff_permutation(xa, xb, "samples", alternative, n_resamples, seed)


def binomial_leads(
    n_lead: int, n: int, *, p: float = 0.5, alternative: str = "greater"
) -> TestResult:
    """Binomial test of ``n_lead`` leads in ``n`` cases (statistic: ``n_lead / n``)."""
    res = sps.binomtest(n_lead, n, p=float(p), alternative=alternative)
    return TestResult(float(res.statistic), float(res.pvalue), "binomtest", alternative, res.n)
