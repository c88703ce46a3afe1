"""Confidence intervals: BCa bootstrap (with fallbacks) for means and drops; Wilson."""

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
    """Validated samples and the ``n`` an Estimate reports for them."""
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
    """Bootstrap confidence interval of any statistic (BCa, with fallbacks).

    ``scipy.stats.bootstrap(method="BCa")``, its interval chosen by `_interval`: degenerate,
    BCa, or the percentile interval where BCa is undefined or turns on float noise.

    Args:
        data: Tuple of 1-D samples. ``statistic(*data)`` is the estimate.
        statistic: Function of the samples returning a scalar. If it has an
            ``axis`` parameter it is treated as vectorized (called with
            ``axis=-1``), as in scipy.
        paired: Resample the same indices in every sample (samples must have
            equal length) instead of resampling each sample independently.
        confidence: Confidence level in (0, 1).
        n_resamples: Number of bootstrap resamples.
        seed: Int seed for ``numpy.random.default_rng``.

    Returns:
        Estimate with ``n`` = number of pairs if paired, else total count.

    Raises:
        ValueError: On NaN input, samples with fewer than 2 values, unequal
            lengths when paired, or a non-finite statistic.
    """
    confidence, n_resamples, rng = _check_resampling(confidence, n_resamples, seed)
    samples, n = _bootstrap_samples(data, paired)
    vectorized = _accepts_axis(statistic)
    value = float(statistic(*samples, axis=-1) if vectorized else statistic(*samples))
    if not math.isfinite(value):
        raise ValueError(f"statistic is not finite on the data (got {value})")

    settings: dict[str, Any] = {
        "vectorized": vectorized,
        "paired": paired,
        "axis": -1,
        "confidence_level": confidence,
        "rng": rng,
    }
    res, dist = _bca(samples, statistic, n_resamples, settings)
    low, high, method = _interval(value, res, dist, samples, statistic, settings)
    return Estimate(value, low, high, confidence, method, n)


def _interval(
    value: float,
    res: Any,
    dist: NDArray[np.float64],
    samples: tuple,
    statistic: Callable[..., Any],
    settings: dict[str, Any],
) -> tuple[float, float, str]:
    """The interval of a BCa bootstrap ``res`` (resampled statistics ``dist``), and its method.

    ``(value, value)``, ``"degenerate"``, where the statistic is the same on every
    resample; the percentile interval of the same resamples, ``"bootstrap-percentile"``,
    where BCa is undefined (a 0/0 acceleration) or more than ``TIED_SHARE`` of the
    resamples tie with the estimate (few distinct values: BCa's bias correction would
    turn on float noise); else BCa's.
    """
    if _nearly_constant(dist, max(abs(value), float(np.max(np.abs(dist))))):
        return value, value, METHOD_DEGENERATE
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if math.isfinite(low) and math.isfinite(high) and not _ties_estimate(dist, value):
        return low, high, METHOD_BCA
    low, high = _percentile_interval(res, samples, statistic, settings)
    return low, high, METHOD_PERCENTILE


#: Resamples closer to the estimate than this, relative to the magnitudes, tie with it:
#: float32 rounding carried through a score (about 1e-7 relative per step) stays below it.
TIE_TOLERANCE = 1e-4
#: More resamples than this share tied with the estimate, and BCa's bias correction
#: (the share of resamples strictly below the estimate) turns on float noise.
TIED_SHARE = 0.01


def _ties_estimate(dist: NDArray[np.float64], value: float) -> bool:
    """Whether more than ``TIED_SHARE`` of the resamples tie with the estimate.

    Few distinct values (0/1 scores, few terms) put an atom of the bootstrap distribution at
    the estimate; noise of 1e-6 in the data then decides which side of it each tied resample
    falls, and BCa's bias correction, so its bounds, jump by a whole step of the atoms.
    """
    scale = max(abs(value), float(np.max(np.abs(dist))))
    tied = np.abs(dist - value) <= TIE_TOLERANCE * scale
    return bool(tied.mean() > TIED_SHARE)


def _percentile_interval(
    res: Any, samples: tuple, statistic: Callable[..., Any], settings: dict[str, Any]
) -> tuple[float, float]:
    """The percentile interval of the resamples already drawn in ``res``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sps.DegenerateDataWarning)
        res = sps.bootstrap(
            samples, statistic, n_resamples=0, method="percentile", bootstrap_result=res, **settings
        )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _bca(
    samples: tuple, statistic: Callable[..., Any], n_resamples: int, settings: dict[str, Any]
) -> tuple[Any, NDArray[np.float64]]:
    """The BCa bootstrap and its distribution; refuses a statistic not finite on some."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sps.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        res = sps.bootstrap(samples, statistic, n_resamples=n_resamples, method="BCa", **settings)
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    n_bad = int((~np.isfinite(dist)).sum())
    if n_bad:
        raise ValueError(
            f"statistic was not finite on {n_bad} of {dist.size} bootstrap resamples; "
            "the samples are too small or too discrete for this statistic"
        )
    return res, dist


def _mean_estimate(
    values: NDArray[np.float64],
    confidence: float,
    n_resamples: int,
    seed: int,
    scale: float | None = None,
) -> Estimate:
    """BCa CI of the mean of validated 1-D values (degenerate if constant).

    ``scale`` is the magnitude of the inputs the values were computed from,
    used to recognise rounding-level spread as constant.
    """
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
    """Mean with a BCa bootstrap confidence interval.

    Args:
        values: 1-D sample (at least 2 values).
        confidence: Confidence level in (0, 1).
        n_resamples: Number of bootstrap resamples.
        seed: Int seed for ``numpy.random.default_rng``.

    Returns:
        Estimate of the mean; ``(v, v)`` with method ``"degenerate"`` if all
        values equal ``v`` (up to rounding, see the package docstring).
    """
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
    """Mean paired difference ``mean(a - b)`` with a BCa bootstrap CI.

    Items are resampled as pairs (equivalently, the per-item differences are
    resampled), e.g. ``a`` = baseline score per prompt and ``b`` = ablated
    score per prompt gives the mean drop.

    Args:
        a: 1-D scores, one per item (at least 2).
        b: 1-D scores for the same items, same length as ``a``.
        confidence: Confidence level in (0, 1).
        n_resamples: Number of bootstrap resamples.
        seed: Int seed for ``numpy.random.default_rng``.

    Returns:
        Estimate of the mean difference with ``n`` = number of pairs.
    """
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
    """Drop from ablating the top heads beyond the drop from random heads.

    ``specificity = mean(baseline - top) - mean_s mean(baseline - random_s)``,
    which equals the mean over prompts of
    ``mean_s random_sets[s, i] - top[i]``. The CI is a BCa bootstrap over
    prompts; resampling that per-prompt quantity is the same as resampling
    prompt indices jointly in all arrays (paired bootstrap).

    Args:
        baseline: ``[n]`` per-prompt scores without ablation.
        top: ``[n]`` per-prompt scores under top-k ablation.
        random_sets: ``[m, n]`` per-prompt scores under ``m`` random k-head
            ablations.
        confidence: Confidence level in (0, 1).
        n_resamples: Number of bootstrap resamples.
        seed: Int seed for ``numpy.random.default_rng``.

    Returns:
        Estimate with ``n`` = number of prompts.
    """
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
    """Proportion ``k / n`` with the Wilson score interval.

    The interval is ``statsmodels.stats.proportion.proportion_confint`` with
    ``method="wilson"``, clipped to [0, 1].

    Args:
        k: Number of successes, ``0 <= k <= n``.
        n: Number of trials (at least 1).
        confidence: Confidence level in (0, 1).

    Returns:
        Estimate with method ``"wilson"``.
    """
    k = _check_count(k, "k")
    n = _check_count(n, "n")
    confidence = _check_confidence(confidence)
    if n < 1:
        raise ValueError(f"'n' must be >= 1, got {n}")
    if not 0 <= k <= n:
        raise ValueError(f"'k' must be in [0, n={n}], got {k}")
    low, high = proportion_confint(k, n, alpha=1.0 - confidence, method="wilson")
    return Estimate(k / n, float(low), float(high), confidence, METHOD_WILSON, n)
