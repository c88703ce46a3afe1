"""Correlations of per-checkpoint series: plain, lead-lag and early/late windows."""

from __future__ import annotations

import math
from typing import Any

from numpy.typing import ArrayLike
from scipy import stats as sps

from bindscope.metrics.stats._checks import _check_count, _nearly_constant, _two_samples
from bindscope.metrics.stats.results import TestResult

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
