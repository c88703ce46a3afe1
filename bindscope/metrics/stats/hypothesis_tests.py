"""Hypothesis tests: empirical-null rank p-values, permutation tests, the binomial test."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps

from bindscope.metrics.stats._checks import _as_1d, _rng, _two_samples
from bindscope.metrics.stats.results import TestResult

_ALTERNATIVES = ("two-sided", "greater", "less")

# Our labels for scipy's permutation types, as they appear in ``TestResult.method``.
_PERMUTATION_LABELS = {"independent": "permutation-independent", "samples": "permutation-paired"}


def rank_p_value(observed: float, null: ArrayLike, *, alternative: str = "greater") -> float:
    """P-value of an observed statistic against an empirical null sample.

    ``"greater"``: ``(1 + #{null >= observed}) / (1 + len(null))``;
    ``"less"``: ``(1 + #{null <= observed}) / (1 + len(null))``;
    ``"two-sided"``: ``min(1, 2 * min(greater, less))``.

    Args:
        observed: The observed statistic.
        null: 1-D sample of the statistic under the null (at least 1).
        alternative: ``"greater"``, ``"less"`` or ``"two-sided"``.

    Returns:
        The p-value in (0, 1].
    """
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"'alternative' must be one of {_ALTERNATIVES}, got {alternative!r}")
    obs = float(observed)
    if not math.isfinite(obs):
        raise ValueError(f"'observed' must be finite, got {observed!r}")
    nul = _as_1d(null, "null", min_len=1)
    m = nul.size
    p_greater = (1 + int(np.sum(nul >= obs))) / (1 + m)
    p_less = (1 + int(np.sum(nul <= obs))) / (1 + m)
    if alternative == "greater":
        return float(p_greater)
    if alternative == "less":
        return float(p_less)
    return float(min(1.0, 2.0 * min(p_greater, p_less)))


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
    """Permutation test of ``mean(x) - mean(y)`` on validated samples.

    scipy checks ``alternative`` and ``n_resamples``; ``n`` is the number of pairs
    for ``"samples"`` (paired) and the total count for ``"independent"``.
    """
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
    """Permutation test of ``mean(x) - mean(y)`` for independent samples.

    Uses ``scipy.stats.permutation_test(permutation_type="independent")``;
    the test is exact when ``n_resamples`` covers all partitions.

    Args:
        x: First sample (at least 2 values).
        y: Second sample (at least 2 values).
        alternative: ``"two-sided"``, ``"greater"`` (mean(x) > mean(y)) or
            ``"less"``.
        n_resamples: Number of random permutations.
        seed: Int seed for ``numpy.random.default_rng``.

    Returns:
        TestResult with ``n = len(x) + len(y)``.
    """
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
    """Sign-flip permutation test of the mean paired difference ``mean(a - b)``.

    Uses ``scipy.stats.permutation_test(permutation_type="samples")``, which
    swaps ``a[i]`` and ``b[i]`` within pairs (a sign flip of ``a[i] - b[i]``);
    exact when ``n_resamples >= 2**n``.

    Args:
        a: 1-D scores (at least 2).
        b: 1-D scores for the same items.
        alternative: ``"two-sided"``, ``"greater"`` (mean(a - b) > 0) or
            ``"less"``.
        n_resamples: Number of random sign-flip patterns.
        seed: Int seed for ``numpy.random.default_rng``.

    Returns:
        TestResult with ``n`` = number of pairs.
    """
    xa, xb = _two_samples(a, b, ("a", "b"), min_len=2, paired=True)
    return _mean_diff_permutation(xa, xb, "samples", alternative, n_resamples, seed)


def binomial_leads(
    n_lead: int, n: int, *, p: float = 0.5, alternative: str = "greater"
) -> TestResult:
    """Binomial test on how often one series leads (``scipy.stats.binomtest``).

    scipy checks the counts (integers, ``0 <= n_lead <= n``, ``n >= 1``), ``p``
    and ``alternative``.

    Args:
        n_lead: Number of cases where the effect leads.
        n: Number of cases (at least 1).
        p: Success probability under the null.
        alternative: ``"greater"``, ``"less"`` or ``"two-sided"``.

    Returns:
        TestResult whose statistic is the proportion ``n_lead / n``.
    """
    res = sps.binomtest(n_lead, n, p=float(p), alternative=alternative)
    return TestResult(float(res.statistic), float(res.pvalue), "binomtest", alternative, res.n)
