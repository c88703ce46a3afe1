"""Confidence intervals (BCa bootstrap with fallbacks; Wilson) and effect sizes (Cohen's d, d_z)."""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from bindscope.metrics.stats._checks import (
    _as_1d,
    _check_confidence,
    _check_count,
    _check_finite,
    _check_resampling,
    _nearly_constant,
    _same_length,
    _two_samples,
)
from bindscope.metrics.stats.results import (
    METHOD_BCA,
    METHOD_DEGENERATE,
    METHOD_PERCENTILE,
    METHOD_WILSON,
    Estimate,
)


def _accepts_axis(func: Callable[..., Any]) -> bool:
    try:
        return "axis" in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def _bootstrap_samples(
    data: Sequence[ArrayLike], paired: bool
) -> tuple[tuple[NDArray[np.float64], ...], int]:
    if not isinstance(data, tuple | list) or len(data) == 0:
        raise ValueError("'data' must be a non-empty tuple of samples")
    samples = tuple(_as_1d(s, f"data[{i}]", min_len=2) for i, s in enumerate(data))
    if not paired:
        return samples, sum(s.size for s in samples)
    # scipy checks this too, but the statistic runs on the full data before scipy does.
    for i, s in enumerate(samples[1:], start=1):
        _same_length(samples[0], s, "data[0]", f"data[{i}]")
    return samples, samples[0].size


def bootstrap_statistic(
    data: tuple,
    statistic: Callable[..., Any],
    *,
    paired: bool,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
) -> Estimate:
    """Bootstrap CI of ``statistic(*data)`` (BCa, with fallbacks; docs/internals.md).

    A ``statistic`` with an ``axis`` parameter is called vectorized, as in scipy; ``paired``
    resamples the same indices in every sample (``n``: pairs, else the total count).
    """
    confidence, n_resamples, rng = _check_resampling(confidence, n_resamples, seed)
    samples, n = _bootstrap_samples(data, paired)
    vectorized = _accepts_axis(statistic)
    value = float(statistic(*samples, axis=-1) if vectorized else statistic(*samples))
    if not math.isfinite(value):
        raise ValueError(f"statistic is not finite on the data (got {value})")

    settings: dict[str, Any] = {
        "data": samples,
        "statistic": statistic,
        "vectorized": vectorized,
        "paired": paired,
        "axis": -1,
        "confidence_level": confidence,
        "rng": rng,
    }
    res = _scipy_bootstrap(settings, n_resamples=n_resamples, method="BCa")
    low, high, method = _interval(value, res, _finite_distribution(res), settings)
    return Estimate(value, low, high, confidence, method, n)


def _interval(
    value: float, res: Any, dist: NDArray[np.float64], settings: dict[str, Any]
) -> tuple[float, float, str]:
    if _nearly_constant(dist, max(abs(value), float(np.max(np.abs(dist))))):
        return value, value, METHOD_DEGENERATE
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if math.isfinite(low) and math.isfinite(high) and not _ties_estimate(dist, value):
        return low, high, METHOD_BCA
    res = _scipy_bootstrap(settings, n_resamples=0, method="percentile", bootstrap_result=res)
    return (
        float(res.confidence_interval.low),
        float(res.confidence_interval.high),
        METHOD_PERCENTILE,
    )


#: Resamples this close to the estimate (relative) tie with it: float32 rounding stays below.
TIE_TOLERANCE = 1e-4
#: More tied resamples than this share, and BCa's bias correction turns on float noise.
TIED_SHARE = 0.01


def _ties_estimate(dist: NDArray[np.float64], value: float) -> bool:
    # Few distinct values put an atom of the resamples at the estimate: noise of 1e-6 in the
    # data then decides which side each tied resample falls, and BCa's bounds jump a step.
    scale = max(abs(value), float(np.max(np.abs(dist))))
    tied = np.abs(dist - value) <= TIE_TOLERANCE * scale
    return bool(tied.mean() > TIED_SHARE)


def _scipy_bootstrap(settings: dict[str, Any], **how: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sps.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        return sps.bootstrap(**settings, **how)


def _finite_distribution(res: Any) -> NDArray[np.float64]:
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    n_bad = int((~np.isfinite(dist)).sum())
    if n_bad:
        raise ValueError(
            f"statistic was not finite on {n_bad} of {dist.size} bootstrap resamples; "
            "the samples are too small or too discrete for this statistic"
        )
    return dist


def _mean_estimate(
    values: NDArray[np.float64],
    confidence: float,
    n_resamples: int,
    seed: int,
    scale: float | None = None,
) -> Estimate:
    # scale: the magnitude of the inputs the values came from (rounding-level spread is none)
    confidence, n_resamples, _ = _check_resampling(confidence, n_resamples, seed)
    if _nearly_constant(values, scale):
        v = float(np.mean(values))
        return Estimate(v, v, v, confidence, METHOD_DEGENERATE, int(values.size))
    return bootstrap_statistic(
        (values,),
        np.mean,
        paired=False,
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
    )


def mean_ci(
    values: ArrayLike, *, confidence: float = 0.95, n_resamples: int = 9999, seed: int = 0
) -> Estimate:
    """Mean of at least 2 values with a BCa bootstrap confidence interval."""
    arr = _as_1d(values, "values", min_len=2)
    return _mean_estimate(arr, confidence, n_resamples, seed)


def paired_difference(
    a: ArrayLike,
    b: ArrayLike,
    *,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
) -> Estimate:
    """Mean paired difference ``mean(a - b)`` with a BCa bootstrap CI over the pairs."""
    xa, xb = _two_samples(a, b, ("a", "b"), min_len=2, paired=True)
    scale = float(max(np.max(np.abs(xa)), np.max(np.abs(xb))))
    return _mean_estimate(xa - xb, confidence, n_resamples, seed, scale)


def specificity(
    baseline: ArrayLike,
    top: ArrayLike,
    random_sets: ArrayLike,
    *,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
) -> Estimate:
    """Per-prompt drop ``[n]`` from ablating the top heads beyond ``[m, n]`` random sets, BCa CI."""
    base, tp = _two_samples(baseline, top, ("baseline", "top"), min_len=2, paired=True)
    rs = np.asarray(random_sets, dtype=np.float64)
    if rs.ndim != 2:
        raise ValueError(f"'random_sets' must be 2-D [m, n], got shape {rs.shape}")
    _check_finite(rs, "random_sets")
    if rs.shape[0] < 1:
        raise ValueError("'random_sets' needs at least 1 random set (row), got 0")
    if rs.shape[1] != base.size:
        raise ValueError(
            f"'random_sets' must have n={base.size} columns (one per prompt), got shape {rs.shape}"
        )
    per_prompt = rs.mean(axis=0) - tp
    scale = float(max(np.max(np.abs(tp)), np.max(np.abs(rs))))
    return _mean_estimate(per_prompt, confidence, n_resamples, seed, scale)


def wilson_ci(k: int, n: int, *, confidence: float = 0.95) -> Estimate:
    """Proportion ``k / n`` with the Wilson score interval (statsmodels)."""
    k = _check_count(k, "k")
    n = _check_count(n, "n", least=1)
    confidence = _check_confidence(confidence)
    if not 0 <= k <= n:
        raise ValueError(f"'k' must be in [0, n={n}], got {k}")
    low, high = proportion_confint(k, n, alpha=1.0 - confidence, method="wilson")
    return Estimate(k / n, float(low), float(high), confidence, METHOD_WILSON, n)


def _cohens_d_stat(
    x: NDArray[np.float64], y: NDArray[np.float64], axis: int = -1
) -> NDArray[np.float64]:
    nx, ny = x.shape[axis], y.shape[axis]
    vx = np.var(x, axis=axis, ddof=1)
    vy = np.var(y, axis=axis, ddof=1)
    sp = np.sqrt(((nx - 1) * vx + (ny - 1) * vy) / (nx + ny - 2))
    diff = np.mean(x, axis=axis) - np.mean(y, axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sp > 0, diff / np.where(sp > 0, sp, 1.0), np.nan)


def cohens_d(x: ArrayLike, y: ArrayLike) -> float:
    """Cohen's d with the pooled standard deviation (ddof=1); NaN where it is 0."""
    ax, ay = _two_samples(x, y, ("x", "y"), min_len=2, paired=False)
    return float(_cohens_d_stat(ax, ay))


def cohens_d_ci(
    x: ArrayLike,
    y: ArrayLike,
    *,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
) -> Estimate:
    """Cohen's d with a bootstrap CI, the groups resampled independently."""
    ax, ay = _two_samples(x, y, ("x", "y"), min_len=2, paired=False)
    if not math.isfinite(float(_cohens_d_stat(ax, ay))):
        raise ValueError("Cohen's d is undefined: pooled standard deviation of x and y is 0")
    return bootstrap_statistic(
        (ax, ay),
        _cohens_d_stat,
        paired=False,
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
    )


def cohens_dz(a: ArrayLike, b: ArrayLike) -> float:
    """Cohen's d_z for paired data: ``mean(a - b) / sd(a - b, ddof=1)`` (NaN: sd 0)."""
    xa, xb = _two_samples(a, b, ("a", "b"), min_len=2, paired=True)
    d = xa - xb
    sd = float(np.std(d, ddof=1))
    if sd == 0.0:
        return math.nan
    return float(np.mean(d) / sd)
