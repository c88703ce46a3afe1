"""Tail approximation of a permutation p-value: a generalized Pareto fit to the null's tail.

Knijnenburg et al. (2009), Bioinformatics 25(12) i161; Winkler et al. (2016), NeuroImage
141, 502. Used only below ``MIN_EXCEEDANCES`` exceedances; the largest tail (at most 250 and
a quarter of the values, the observed one among them, as Winkler et al. keep it) whose fit
passes the Anderson-Darling check gives ``p = n_tail / (N + 1) * S(observed - threshold)``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps

from bindscope.metrics.stats._checks import _as_1d, _rng

#: Below this many exceedances the exact p is too coarse and the tail is fitted.
MIN_EXCEEDANCES = 10
#: The largest tail fitted, and the step it shrinks by until a fit passes.
MAX_TAIL, TAIL_STEP = 250, 10
#: Choulakian and Stephens (2001), Technometrics 43(4), Table 2 (shape and scale estimated):
#: the Anderson-Darling statistic's 5% critical value by GPD shape xi. Their table runs
#: over k = -0.9 ... 0.5 with F(x) = 1 - (1 - kx/a)^(1/k), so k = -xi: a heavy tail (xi
#: 0.9) has the smallest value. Outside [-0.5, 0.9] the nearest end is used.
AD_SHAPES = (-0.5, -0.4, -0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.5, 0.9)
AD_CRITICAL_5 = (1.321, 1.221, 1.140, 1.074, 1.020, 0.974, 0.935, 0.903, 0.830, 0.771)

#: How a tail p came about.
EXACT, GPD, NO_FIT, TOO_FEW = "exact", "gpd", "no-fit", "too-few-sets"


@dataclass(frozen=True)
class TailP:
    """A permutation p from the tail of the null, beside the exact one.

    Attributes:
        p: The GPD tail p, or None where ``method`` is not ``"gpd"`` (read the exact p).
        method: ``"exact"`` (``exceedances >= MIN_EXCEEDANCES``: no approximation needed),
            ``"gpd"`` (a fit passed), ``"no-fit"`` (no tail size passed the check) or
            ``"too-few-sets"`` (under ``4 * TAIL_STEP`` values with the observed one: no
            tail to fit).
        exceedances: Null values at or above the observed one.
        n_null: Null values.
        n_tail: Values in the fitted tail, of ``n_null + 1`` (0 without a fit).
        threshold: Where the tail starts (None without a fit).
        shape: The GPD shape xi (None without a fit); xi > 0 is a heavy tail.
        scale: The GPD scale (None without a fit).
        ad_statistic: The Anderson-Darling statistic of the fit (None without a fit).
        ad_critical: Its 5% critical value at the fitted shape (None without a fit).
        low: Lower end of the bootstrap interval of ``p`` over the null values (None
            without a fit or without resamples).
        high: Its upper end.
        confidence: The interval's level.
        n_boot: Bootstrap resamples of the null values behind ``low`` and ``high``.
    """

    p: float | None
    method: str
    exceedances: int
    n_null: int
    n_tail: int = 0
    threshold: float | None = None
    shape: float | None = None
    scale: float | None = None
    ad_statistic: float | None = None
    ad_critical: float | None = None
    low: float | None = None
    high: float | None = None
    confidence: float = 0.95
    n_boot: int = 0

    def to_dict(self) -> dict:
        """The fields as plain Python values (None where there is none)."""
        return asdict(self)


def tail_sizes(n_null: int) -> list[int]:
    """The tail sizes tried, largest first: multiples of 10 up to 250 and ``n_null / 4``."""
    return list(range(TAIL_STEP, min(MAX_TAIL, n_null // 4) + 1, TAIL_STEP))[::-1]


@dataclass(frozen=True)
class _Fit:
    threshold: float
    shape: float
    scale: float
    ad: float
    critical: float


def _excess(ordered: NDArray[np.float64], n_tail: int) -> tuple[float, NDArray[np.float64]]:
    """The threshold below the ``n_tail`` largest of ``ordered`` (descending); the excesses.

    Sorted; ties at the threshold carry no tail information and are left out.
    """
    threshold = float(ordered[n_tail - 1] + ordered[n_tail]) / 2
    excess = ordered[:n_tail] - threshold
    return threshold, np.sort(excess[excess > 0])


def _gpd(excess: NDArray[np.float64]) -> tuple[float, float]:
    """The maximum-likelihood GPD shape and scale of ``excess`` (location 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        shape, _, scale = sps.genpareto.fit(excess, floc=0)
    return float(shape), float(scale)


def ad_statistic(excess: NDArray[np.float64], shape: float, scale: float) -> float:
    """The Anderson-Darling statistic of sorted ``excess`` against a GPD (location 0)."""
    cdf = np.clip(sps.genpareto.cdf(excess, shape, scale=scale), 1e-300, 1 - 1e-16)
    n = excess.size
    i = np.arange(1, n + 1)
    return float(-n - np.mean((2 * i - 1) * (np.log(cdf) + np.log1p(-cdf[::-1]))))


def ad_critical(shape: float) -> float:
    """The 5% critical value of `ad_statistic` at a fitted shape xi (interpolated)."""
    return float(np.interp(shape, AD_SHAPES, AD_CRITICAL_5))


def _fit_tail(ordered: NDArray[np.float64], n_tail: int) -> _Fit | None:
    """The GPD fit to the ``n_tail`` largest of ``ordered`` (descending), checked; None if bad."""
    threshold, excess = _excess(ordered, n_tail)
    if excess.size < TAIL_STEP or np.ptp(excess) == 0:
        return None
    shape, scale = _gpd(excess)
    ad = ad_statistic(excess, shape, scale)
    critical = ad_critical(shape)
    if not math.isfinite(ad) or ad > critical:
        return None
    return _Fit(threshold, shape, scale, ad, critical)


def _tail_p(fit: _Fit, observed: float, n_tail: int, n_null: int) -> float:
    return (
        n_tail
        / n_null
        * float(sps.genpareto.sf(observed - fit.threshold, fit.shape, scale=fit.scale))
    )


def _first_fit(observed: float, ordered: NDArray[np.float64]) -> tuple[int, _Fit, float] | None:
    """The largest tail whose fit passes and gives a p above 0 (an upper end beyond it)."""
    for n_tail in tail_sizes(ordered.size):
        fit = _fit_tail(ordered, n_tail)
        if fit is not None:
            p = _tail_p(fit, observed, n_tail, ordered.size)
            if p > 0:  # a fitted upper end below the observed value: no finite null says 0
                return n_tail, fit, p
    return None


def tail_p_value(
    observed: float, null: ArrayLike, *, n_boot: int = 0, confidence: float = 0.95, seed: int = 0
) -> TailP:
    """The GPD tail p of ``observed`` against ``null`` (one-sided, larger is more extreme).

    ``scipy.stats.genpareto`` by maximum likelihood, its location fixed at the threshold
    midway between the ``n_tail``-th largest value and the next; the tail shrinks by 10
    until a fit passes the 5% Anderson-Darling check, and with none the exact p stands.
    The observed value stays in the fit: left out, the tail p rejected 2-3 times too often
    at 0.001 with N = 199 on t3, lognormal and Pareto nulls (``tools/calibrate_tail_p.py``).

    Args:
        observed: The observed statistic.
        null: The null statistics (order does not matter).
        n_boot: Resamples of the null values (with replacement) behind the interval of p;
            each refits the tail of the size chosen on the data. 0: no interval.
        confidence: The interval's level.
        seed: Seeds the bootstrap.

    Returns:
        The tail p and its fit; the method says when there is none and why.
    """
    obs = float(observed)
    if not math.isfinite(obs):
        raise ValueError(f"'observed' must be finite, got {observed!r}")
    values = _as_1d(null, "null", min_len=1)
    hits = int(np.sum(values >= obs))
    if hits >= MIN_EXCEEDANCES:
        return TailP(None, EXACT, hits, values.size)
    # the observed value is one of the permutation distribution's values under the null
    ordered = np.sort(np.append(values, obs))[::-1]
    if not tail_sizes(ordered.size):
        return TailP(None, TOO_FEW, hits, values.size)
    found = _first_fit(obs, ordered)
    if found is None:
        return TailP(None, NO_FIT, hits, values.size)
    n_tail, fit, p = found
    low = high = None
    if n_boot:
        low, high = _bootstrap(obs, ordered, n_tail, n_boot, confidence, seed)
    return TailP(p, GPD, hits, values.size, n_tail, fit.threshold, fit.shape, fit.scale,
                 fit.ad, fit.critical, low, high, confidence, n_boot)  # fmt: skip


def _bootstrap(
    observed: float,
    ordered: NDArray[np.float64],
    n_tail: int,
    n_boot: int,
    confidence: float,
    seed: int,
) -> tuple[float, float]:
    """Percentile interval of the tail p over resampled values (same tail size, refit)."""
    rng = _rng(seed)
    ps = []
    for _ in range(n_boot):
        again = np.sort(rng.choice(ordered, size=ordered.size, replace=True))[::-1]
        threshold, excess = _excess(again, n_tail)
        if observed <= threshold:  # the resampled tail starts above the observed value
            ps.append(n_tail / ordered.size)
        elif excess.size < 2 or np.ptp(excess) == 0:
            ps.append(0.0)  # a tail of one value: nothing above it
        else:
            fit = _Fit(threshold, *_gpd(excess), ad=math.nan, critical=math.nan)
            ps.append(_tail_p(fit, observed, n_tail, ordered.size))
    tail = (1 - confidence) / 2
    low, high = np.quantile(ps, [tail, 1 - tail])
    return float(low), float(high)


__all__ = [
    "EXACT",
    "GPD",
    "MIN_EXCEEDANCES",
    "NO_FIT",
    "TOO_FEW",
    "TailP",
    "ad_critical",
    "ad_statistic",
    "tail_p_value",
]
