"""Rank, permutation, binomial and sequential p-values; p adjustment; power; correlations."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from bindscope.errors import whole_number
from bindscope.metrics.stats._checks import (
    _against_null,
    _as_1d,
    _check_count,
    _nearly_constant,
    _rng,
    _two_samples,
)
from bindscope.metrics.stats.results import TestResult, _PlainResult

_ALTERNATIVES = ("two-sided", "greater", "less")


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
    a: ArrayLike,
    b: ArrayLike,
    names: tuple[str, str],
    paired: bool,
    alternative: str,
    n_resamples: int,
    seed: int,
) -> TestResult:
    x, y = _two_samples(a, b, names, min_len=2, paired=paired)
    res = sps.permutation_test(
        (x, y),
        _mean_diff_stat,
        permutation_type="samples" if paired else "independent",
        vectorized=True,
        n_resamples=n_resamples,
        alternative=alternative,
        axis=-1,
        rng=_rng(seed),
    )
    n = x.size if paired else x.size + y.size
    label = "permutation-paired" if paired else "permutation-independent"
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
    return _mean_diff_permutation(x, y, ("x", "y"), False, alternative, n_resamples, seed)


def paired_permutation(
    a: ArrayLike,
    b: ArrayLike,
    *,
    alternative: str = "two-sided",
    n_resamples: int = 9999,
    seed: int = 0,
) -> TestResult:
    """Sign-flip permutation test of the mean paired difference ``mean(a - b)`` (scipy's)."""
    return _mean_diff_permutation(a, b, ("a", "b"), True, alternative, n_resamples, seed)


def binomial_leads(
    n_lead: int, n: int, *, p: float = 0.5, alternative: str = "greater"
) -> TestResult:
    """Binomial test of ``n_lead`` leads in ``n`` cases (statistic: ``n_lead / n``)."""
    res = sps.binomtest(n_lead, n, p=float(p), alternative=alternative)
    return TestResult(float(res.statistic), float(res.pvalue), "binomtest", alternative, res.n)


#: Why a sequence stopped.
REACHED, MAXIMUM = "reached", "maximum"


@dataclass(frozen=True)
class SequentialP(_PlainResult):
    """A sequential Monte Carlo p-value; ``n_drawn``: the draws the decision used."""

    p: float
    n_drawn: int
    exceedances: int
    stopped: str
    stop_at: int
    max_draws: int


def sequential_p_value(
    observed: float, null: ArrayLike, *, stop_at: int = 10, max_draws: int = 199
) -> SequentialP | None:
    """The Besag-Clifford p of ``observed`` against ``null`` in drawn order; None until decided."""
    whole_number(stop_at, "stop_at", "pass e.g. stop_at=10", least=1, error=ValueError)
    whole_number(max_draws, "max_draws", "pass e.g. max_draws=199", least=1, error=ValueError)
    obs, draws = _against_null(observed, null, min_len=0)
    draws = draws[:max_draws]
    hits = np.cumsum(draws >= obs)
    reached = np.flatnonzero(hits >= stop_at)
    if reached.size:
        n = int(reached[0]) + 1
        return SequentialP(stop_at / n, n, stop_at, REACHED, stop_at, max_draws)
    if draws.size < max_draws:
        return None
    g = int(hits[-1])
    return SequentialP((g + 1) / (max_draws + 1), max_draws, g, MAXIMUM, stop_at, max_draws)


def detectable_drop(
    random_drops: ArrayLike, item_drops: ArrayLike, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """The smallest top-set drop a one-sided rank test detects with ``power`` (Holm: alpha / m)."""
    drops = _as_1d(random_drops, "random_drops", min_len=2)
    items = _as_1d(item_drops, "item_drops", min_len=2)
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"'alpha' and 'power' must lie in (0, 1), got {alpha!r}, {power!r}")
    error = float(items.std(ddof=1)) / math.sqrt(items.size)
    threshold = drops.mean() + sps.norm.ppf(1 - alpha) * float(drops.std(ddof=1))
    return float(threshold + sps.norm.ppf(power) * error)


def adjust_pvalues(pvalues: ArrayLike, *, method: str = "holm") -> list[float]:
    """Adjusted p-values, in input order, by a ``multipletests`` method (``"fdr_bh"``...)."""
    p = _as_1d(pvalues, "pvalues", min_len=1)
    # multipletests does not check the range; a p-value outside [0, 1] is a caller's bug.
    if np.any((p < 0.0) | (p > 1.0)):
        raise ValueError("'pvalues' must all lie in [0, 1]")
    adjusted = multipletests(p, method=method)[1]
    return [float(v) for v in adjusted]


_CORRELATION_METHODS = ("spearman", "pearson")


def _check_corr_method(method: str) -> None:
    if method not in _CORRELATION_METHODS:
        raise ValueError(f"'method' must be one of {_CORRELATION_METHODS}, got {method!r}")


def correlation(x: ArrayLike, y: ArrayLike, *, method: str) -> TestResult:
    """Spearman or Pearson correlation, two-sided p (a constant series: NaN, ``:constant``)."""
    _check_corr_method(method)
    ax, ay = _two_samples(x, y, ("x", "y"), min_len=3, paired=True)
    n = int(ax.size)
    # Means that are mathematically equal differ in their last bits with the summation order,
    # so "constant" is judged up to rounding relative to the values, never with ==.
    if _nearly_constant(ax) or _nearly_constant(ay):
        return TestResult(math.nan, math.nan, f"{method}:constant", "two-sided", n)
    res = sps.spearmanr(ax, ay) if method == "spearman" else sps.pearsonr(ax, ay)
    return TestResult(float(res.statistic), float(res.pvalue), method, "two-sided", n)


def lagged_correlations(eb: ArrayLike, beh: ArrayLike, *, lag: int = 1) -> dict[str, Any]:
    """Per method, ``corr(eb[:-lag], beh[lag:])``, the reverse and their ``lead_diff``."""
    lag = _check_count(lag, "lag", least=1)
    e, b = _two_samples(eb, beh, ("eb", "beh"), min_len=1, paired=True)
    if e.size < lag + 3:
        raise ValueError(
            f"'eb' and 'beh' need at least lag + 3 = {lag + 3} checkpoints, got {e.size}"
        )
    out: dict[str, Any] = {}
    for method in ("pearson", "spearman"):
        forward = correlation(e[:-lag], b[lag:], method=method)
        backward = correlation(b[:-lag], e[lag:], method=method)
        out[method] = {
            "forward": forward,
            "backward": backward,
            "lead_diff": float(forward.statistic - backward.statistic),
        }
    return out


def windowed_correlation(
    eb: ArrayLike, beh: ArrayLike, *, split: int, method: str
) -> dict[str, TestResult]:
    """``{"early": on [:split], "late": on [split:]}`` correlations (3+ checkpoints each)."""
    _check_corr_method(method)
    split = _check_count(split, "split")
    e, b = _two_samples(eb, beh, ("eb", "beh"), min_len=1, paired=True)
    if split < 3 or e.size - split < 3:
        raise ValueError(
            f"'split'={split} must leave at least 3 checkpoints in each window "
            f"(series length {e.size})"
        )
    return {
        "early": correlation(e[:split], b[:split], method=method),
        "late": correlation(e[split:], b[split:], method=method),
    }


__all__ = [
    "MAXIMUM",
    "REACHED",
    "SequentialP",
    "adjust_pvalues",
    "binomial_leads",
    "correlation",
    "detectable_drop",
    "lagged_correlations",
    "paired_permutation",
    "rank_p_value",
    "sequential_p_value",
    "two_sample_permutation",
    "windowed_correlation",
]
