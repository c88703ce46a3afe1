"""Statistics for attention-head experiments.

Confidence intervals, permutation tests, effect sizes, multiple-comparison
adjustment and (lagged) correlations, built on numpy, scipy and statsmodels.

Conventions:
    * Inputs are array-likes of floats. NaN or infinite values raise
      ``ValueError`` naming the argument and the count.
    * Too few values for a method raise ``ValueError``.
    * Randomness comes from ``numpy.random.default_rng(seed)`` with an int
      ``seed`` passed (and stored) by the caller, so results are reproducible.
    * Results are frozen dataclasses whose ``to_dict()`` is JSON-serialisable.

Interval method strings:
    ``"bootstrap-bca"``: scipy's BCa bootstrap interval.
    ``"bootstrap-percentile"``: percentile interval, used when BCa is undefined
    (non-finite) but the bootstrap distribution is not constant.
    ``"degenerate"``: every resample (or every value) gives the same statistic,
    so the interval is ``(value, value)``. "Same" allows a spread of
    1e-12 relative to the magnitude of the inputs (floating-point rounding,
    e.g. the differences ``a - (a - 0.3)``).
    ``"wilson"``: Wilson score interval for a proportion.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

__all__ = [
    "Estimate",
    "TestResult",
    "adjust_pvalues",
    "binomial_leads",
    "bootstrap_statistic",
    "cohens_d",
    "cohens_d_ci",
    "cohens_dz",
    "correlation",
    "is_constant",
    "lagged_correlations",
    "mean_ci",
    "paired_difference",
    "paired_permutation",
    "rank_p_value",
    "specificity",
    "two_sample_permutation",
    "wilson_ci",
    "windowed_correlation",
]

_ALTERNATIVES = ("two-sided", "greater", "less")
_CORRELATION_METHODS = ("spearman", "pearson")

METHOD_BCA = "bootstrap-bca"
METHOD_PERCENTILE = "bootstrap-percentile"
METHOD_DEGENERATE = "degenerate"

# scipy >= 1.15 takes ``rng=``; older releases (the project allows >= 1.11)
# only ``random_state=``. Both accept a ``numpy.random.Generator``.
_RNG_KW = "rng" if "rng" in inspect.signature(sps.bootstrap).parameters else "random_state"


# --------------------------------------------------------------------------
# Result types
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a confidence interval.

    Attributes:
        value: The point estimate computed on the full data.
        low: Lower end of the interval.
        high: Upper end of the interval.
        confidence: Confidence level, e.g. 0.95.
        method: How the interval was obtained (see module docstring).
        n: Number of observations (pairs/prompts for paired data, total
            observations for independent samples, trials for proportions).
    """

    value: float
    low: float
    high: float
    confidence: float
    method: str
    n: int

    def to_dict(self) -> dict[str, float | int | str]:
        """Returns the fields as plain Python floats, ints and strings."""
        return {
            "value": float(self.value),
            "low": float(self.low),
            "high": float(self.high),
            "confidence": float(self.confidence),
            "method": str(self.method),
            "n": int(self.n),
        }


@dataclass(frozen=True)
class TestResult:
    """The outcome of a hypothesis test or a correlation.

    Attributes:
        statistic: The test statistic (mean difference, proportion, r, rho).
        p_value: The p-value (NaN when the statistic is undefined).
        method: Name of the test, e.g. ``"spearman"`` or ``"permutation-paired"``.
        alternative: ``"two-sided"``, ``"greater"`` or ``"less"``.
        n: Number of observations (pairs for paired data, total otherwise).
    """

    __test__: ClassVar[bool] = False  # not a pytest test class

    statistic: float
    p_value: float
    method: str
    alternative: str
    n: int

    def to_dict(self) -> dict[str, float | int | str]:
        """Returns the fields as plain Python floats, ints and strings."""
        return {
            "statistic": float(self.statistic),
            "p_value": float(self.p_value),
            "method": str(self.method),
            "alternative": str(self.alternative),
            "n": int(self.n),
        }


# --------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------


def _check_finite(arr: NDArray[np.float64], name: str) -> None:
    n_nan = int(np.isnan(arr).sum())
    if n_nan:
        raise ValueError(f"{name!r} has {n_nan} NaN value(s) out of {arr.size}")
    n_inf = int(np.isinf(arr).sum())
    if n_inf:
        raise ValueError(f"{name!r} has {n_inf} infinite value(s) out of {arr.size}")


def _as_1d(values: ArrayLike, name: str, *, min_len: int = 1) -> NDArray[np.float64]:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name!r} must be an array-like of floats: {exc}") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name!r} must be one-dimensional, got shape {arr.shape}")
    _check_finite(arr, name)
    if arr.size < min_len:
        raise ValueError(f"{name!r} needs at least {min_len} value(s), got {arr.size}")
    return arr


def _same_length(a: NDArray[np.float64], b: NDArray[np.float64], na: str, nb: str) -> None:
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"{na!r} and {nb!r} must have the same length, got {a.shape[-1]} and {b.shape[-1]}"
        )


def _check_confidence(confidence: float) -> float:
    c = float(confidence)
    if not 0.0 < c < 1.0:
        raise ValueError(f"'confidence' must be in (0, 1), got {confidence!r}")
    return c


def _check_alternative(alternative: str) -> str:
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"'alternative' must be one of {_ALTERNATIVES}, got {alternative!r}")
    return alternative


def _check_n_resamples(n_resamples: int) -> int:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int | np.integer):
        raise TypeError(f"'n_resamples' must be an int, got {type(n_resamples).__name__}")
    if n_resamples < 1:
        raise ValueError(f"'n_resamples' must be >= 1, got {n_resamples}")
    return int(n_resamples)


def _rng(seed: int) -> np.random.Generator:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"'seed' must be an int, got {type(seed).__name__}")
    return np.random.default_rng(int(seed))


# Values whose spread is below this fraction of their magnitude are treated as
# identical: such spread is floating-point rounding (e.g. ``a - (a - 0.3)``).
_REL_TOL = 1e-12


def is_constant(values: ArrayLike) -> bool:
    """True if the values are equal up to floating-point rounding relative to their size."""
    return _nearly_constant(np.asarray(values, dtype=np.float64).ravel())


def _nearly_constant(arr: NDArray[np.float64], scale: float | None = None) -> bool:
    """True if all values are equal up to rounding relative to ``scale``."""
    if arr.size == 0:
        return False
    if scale is None:
        scale = float(np.max(np.abs(arr)))
    return bool(np.ptp(arr) <= _REL_TOL * scale)


def _accepts_axis(func: Callable[..., Any]) -> bool:
    try:
        return "axis" in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------
# Bootstrap
# --------------------------------------------------------------------------


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

    Thin wrapper over ``scipy.stats.bootstrap(method="BCa")``. If the
    statistic is the same on every resample the interval is
    ``(value, value)`` with method ``"degenerate"``; if BCa is undefined
    otherwise, the percentile interval of the same resamples is returned
    with method ``"bootstrap-percentile"``.

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
    confidence = _check_confidence(confidence)
    n_resamples = _check_n_resamples(n_resamples)
    rng = _rng(seed)
    if not isinstance(data, tuple | list) or len(data) == 0:
        raise ValueError("'data' must be a non-empty tuple of samples")
    samples = tuple(_as_1d(s, f"data[{i}]", min_len=2) for i, s in enumerate(data))
    if paired:
        for i, s in enumerate(samples[1:], start=1):
            _same_length(samples[0], s, "data[0]", f"data[{i}]")
        n = samples[0].size
    else:
        n = sum(s.size for s in samples)

    vectorized = _accepts_axis(statistic)
    value = float(statistic(*samples, axis=-1) if vectorized else statistic(*samples))
    if not math.isfinite(value):
        raise ValueError(f"statistic is not finite on the data (got {value})")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sps.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        res = sps.bootstrap(
            samples,
            statistic,
            n_resamples=n_resamples,
            vectorized=vectorized,
            paired=paired,
            axis=-1,
            confidence_level=confidence,
            method="BCa",
            **{_RNG_KW: rng},
        )
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    n_bad = int((~np.isfinite(dist)).sum())
    if n_bad:
        raise ValueError(
            f"statistic was not finite on {n_bad} of {dist.size} bootstrap resamples; "
            "the samples are too small or too discrete for this statistic"
        )
    if _nearly_constant(dist, max(abs(value), float(np.max(np.abs(dist))))):
        return Estimate(value, value, value, confidence, METHOD_DEGENERATE, n)

    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    method = METHOD_BCA
    if not (math.isfinite(low) and math.isfinite(high)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sps.DegenerateDataWarning)
            res = sps.bootstrap(
                samples,
                statistic,
                n_resamples=0,
                vectorized=vectorized,
                paired=paired,
                axis=-1,
                confidence_level=confidence,
                method="percentile",
                bootstrap_result=res,
                **{_RNG_KW: rng},
            )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        method = METHOD_PERCENTILE
    return Estimate(value, low, high, confidence, method, n)


def _mean_stat(x: NDArray[np.float64], axis: int = -1) -> NDArray[np.float64]:
    return np.mean(x, axis=axis)


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
    confidence = _check_confidence(confidence)
    _check_n_resamples(n_resamples)
    _rng(seed)
    if _nearly_constant(values, scale):
        v = float(np.mean(values))
        return Estimate(v, v, v, confidence, METHOD_DEGENERATE, int(values.size))
    return bootstrap_statistic(
        (values,),
        _mean_stat,
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
        values equal ``v`` (up to rounding, see the module docstring).
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
    xa = _as_1d(a, "a", min_len=2)
    xb = _as_1d(b, "b", min_len=2)
    _same_length(xa, xb, "a", "b")
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
    base = _as_1d(baseline, "baseline", min_len=2)
    tp = _as_1d(top, "top", min_len=2)
    _same_length(base, tp, "baseline", "top")
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


def cohens_d(x: ArrayLike, y: ArrayLike) -> float:
    """Cohen's d with the pooled standard deviation.

    ``(mean(x) - mean(y)) / s_pooled`` where
    ``s_pooled**2 = ((nx-1) var(x) + (ny-1) var(y)) / (nx + ny - 2)`` and
    variances use ``ddof=1``.

    Args:
        x: First group (at least 2 values).
        y: Second group (at least 2 values).

    Returns:
        The effect size; NaN if the pooled standard deviation is zero.
    """
    ax = _as_1d(x, "x", min_len=2)
    ay = _as_1d(y, "y", min_len=2)
    return float(_cohens_d_stat(ax, ay))


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


def cohens_d_ci(
    x: ArrayLike,
    y: ArrayLike,
    *,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
) -> Estimate:
    """Cohen's d with a bootstrap CI (groups resampled independently).

    BCa when it is defined, otherwise percentile; ``method`` says which.

    Args:
        x: First group (at least 2 values).
        y: Second group (at least 2 values).
        confidence: Confidence level in (0, 1).
        n_resamples: Number of bootstrap resamples.
        seed: Int seed for ``numpy.random.default_rng``.

    Returns:
        Estimate with ``n = len(x) + len(y)``.

    Raises:
        ValueError: If the pooled SD is zero on the data or on some resample
            (groups too small or too discrete).
    """
    ax = _as_1d(x, "x", min_len=2)
    ay = _as_1d(y, "y", min_len=2)
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
    """Cohen's d_z for paired data: ``mean(a - b) / sd(a - b, ddof=1)``.

    Args:
        a: 1-D scores (at least 2).
        b: 1-D scores for the same items.

    Returns:
        The effect size; NaN if the differences have zero SD.
    """
    xa = _as_1d(a, "a", min_len=2)
    xb = _as_1d(b, "b", min_len=2)
    _same_length(xa, xb, "a", "b")
    d = xa - xb
    sd = float(np.std(d, ddof=1))
    if sd == 0.0:
        return math.nan
    return float(np.mean(d) / sd)


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


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
    _check_alternative(alternative)
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
    _check_alternative(alternative)
    n_resamples = _check_n_resamples(n_resamples)
    rng = _rng(seed)
    ax = _as_1d(x, "x", min_len=2)
    ay = _as_1d(y, "y", min_len=2)
    res = sps.permutation_test(
        (ax, ay),
        _mean_diff_stat,
        permutation_type="independent",
        vectorized=True,
        n_resamples=n_resamples,
        alternative=alternative,
        axis=-1,
        **{_RNG_KW: rng},
    )
    return TestResult(
        float(res.statistic),
        float(res.pvalue),
        "permutation-independent",
        alternative,
        int(ax.size + ay.size),
    )


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
    _check_alternative(alternative)
    n_resamples = _check_n_resamples(n_resamples)
    rng = _rng(seed)
    xa = _as_1d(a, "a", min_len=2)
    xb = _as_1d(b, "b", min_len=2)
    _same_length(xa, xb, "a", "b")
    res = sps.permutation_test(
        (xa, xb),
        _mean_diff_stat,
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        alternative=alternative,
        axis=-1,
        **{_RNG_KW: rng},
    )
    return TestResult(
        float(res.statistic),
        float(res.pvalue),
        "permutation-paired",
        alternative,
        int(xa.size),
    )


def adjust_pvalues(pvalues: ArrayLike, *, method: str = "holm") -> list[float]:
    """Multiple-comparison adjusted p-values.

    Args:
        pvalues: 1-D p-values in [0, 1].
        method: A ``statsmodels.stats.multitest.multipletests`` method name,
            passed through unchanged (e.g. ``"holm"``, ``"fdr_bh"``,
            ``"bonferroni"``).

    Returns:
        Adjusted p-values, in the input order.
    """
    p = _as_1d(pvalues, "pvalues", min_len=1)
    if np.any((p < 0.0) | (p > 1.0)):
        raise ValueError("'pvalues' must all lie in [0, 1]")
    adjusted = multipletests(p, method=method)[1]
    return [float(v) for v in adjusted]


def _check_count(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name!r} must be an int, got {type(value).__name__}")
    return int(value)


def wilson_ci(k: int, n: int, *, confidence: float = 0.95) -> Estimate:
    """Proportion ``k / n`` with the Wilson score interval.

    ``center = (p + z^2 / 2n) / (1 + z^2 / n)`` and
    ``half = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2)``, with
    ``z`` the two-sided normal quantile for ``confidence``.

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
    z = float(sps.norm.ppf(1.0 - (1.0 - confidence) / 2.0))
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2.0 * n)) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    low = max(0.0, center - half)
    high = min(1.0, center + half)
    return Estimate(float(p), float(low), float(high), confidence, "wilson", n)


def binomial_leads(
    n_lead: int, n: int, *, p: float = 0.5, alternative: str = "greater"
) -> TestResult:
    """Binomial test on how often one series leads (``scipy.stats.binomtest``).

    Args:
        n_lead: Number of cases where the effect leads.
        n: Number of cases (at least 1).
        p: Success probability under the null.
        alternative: ``"greater"``, ``"less"`` or ``"two-sided"``.

    Returns:
        TestResult whose statistic is the proportion ``n_lead / n``.
    """
    k = _check_count(n_lead, "n_lead")
    n = _check_count(n, "n")
    _check_alternative(alternative)
    if n < 1:
        raise ValueError(f"'n' must be >= 1, got {n}")
    if not 0 <= k <= n:
        raise ValueError(f"'n_lead' must be in [0, n={n}], got {k}")
    if not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"'p' must be in [0, 1], got {p!r}")
    res = sps.binomtest(k, n, p=float(p), alternative=alternative)
    return TestResult(float(res.statistic), float(res.pvalue), "binomtest", alternative, n)


# --------------------------------------------------------------------------
# Correlations
# --------------------------------------------------------------------------


def _check_corr_method(method: str) -> str:
    if method not in _CORRELATION_METHODS:
        raise ValueError(f"'method' must be one of {_CORRELATION_METHODS}, got {method!r}")
    return method


def correlation(x: ArrayLike, y: ArrayLike, *, method: str) -> TestResult:
    """Spearman or Pearson correlation with its two-sided p-value.

    Args:
        x: 1-D series (at least 3 values).
        y: 1-D series of the same length.
        method: ``"spearman"`` or ``"pearson"`` (required).

    Returns:
        TestResult with the coefficient as statistic. If ``x`` or ``y`` is
        constant, statistic and p-value are NaN and the method gets the
        suffix ``":constant"``.
    """
    _check_corr_method(method)
    ax = _as_1d(x, "x", min_len=3)
    ay = _as_1d(y, "y", min_len=3)
    _same_length(ax, ay, "x", "y")
    n = int(ax.size)
    # Means that are mathematically equal differ in their last bits with the summation order,
    # so "constant" is judged up to rounding relative to the values, never with ==.
    if _nearly_constant(ax) or _nearly_constant(ay):
        return TestResult(math.nan, math.nan, f"{method}:constant", "two-sided", n)
    res = sps.spearmanr(ax, ay) if method == "spearman" else sps.pearsonr(ax, ay)
    return TestResult(float(res.statistic), float(res.pvalue), method, "two-sided", n)


def _check_series(eb: ArrayLike, beh: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    e = _as_1d(eb, "eb")
    b = _as_1d(beh, "beh")
    _same_length(e, b, "eb", "beh")
    return e, b


def lagged_correlations(eb: ArrayLike, beh: ArrayLike, *, lag: int = 1) -> dict[str, Any]:
    """Lead-lag correlations between a binding series and a behaviour series.

    ``forward = corr(eb[:-lag], beh[lag:])`` (binding leads behaviour),
    ``backward = corr(beh[:-lag], eb[lag:])`` (behaviour leads binding),
    ``lead_diff = forward.statistic - backward.statistic``.

    Args:
        eb: Per-checkpoint binding measure, length ``T >= lag + 3``.
        beh: Per-checkpoint behaviour measure, same length.
        lag: Positive int lag in checkpoints.

    Returns:
        ``{"pearson": {"forward": TestResult, "backward": TestResult,
        "lead_diff": float}, "spearman": {...}}``.
    """
    lag = _check_count(lag, "lag")
    if lag < 1:
        raise ValueError(f"'lag' must be >= 1, got {lag}")
    e, b = _check_series(eb, beh)
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
    """Correlation in an early and a late window of the checkpoints.

    Args:
        eb: Per-checkpoint binding measure.
        beh: Per-checkpoint behaviour measure, same length.
        split: Index where the late window starts; each window needs at
            least 3 checkpoints.
        method: ``"spearman"`` or ``"pearson"`` (required).

    Returns:
        ``{"early": TestResult on [:split], "late": TestResult on [split:]}``.
    """
    _check_corr_method(method)
    split = _check_count(split, "split")
    e, b = _check_series(eb, beh)
    if split < 3 or e.size - split < 3:
        raise ValueError(
            f"'split'={split} must leave at least 3 checkpoints in each window "
            f"(series length {e.size})"
        )
    return {
        "early": correlation(e[:split], b[:split], method=method),
        "late": correlation(e[split:], b[split:], method=method),
    }
