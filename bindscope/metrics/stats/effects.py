"""Standardised effect sizes: Cohen's d (with a bootstrap CI) and the paired d_z."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from bindscope.metrics.stats._checks import _two_samples
from bindscope.metrics.stats.estimates import bootstrap_statistic
from bindscope.metrics.stats.results import Estimate


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
