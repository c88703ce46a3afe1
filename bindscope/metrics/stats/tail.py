"""A permutation p's tail approximation: a generalized Pareto fit (docs/internals.md)."""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps

from bindscope.metrics.stats._checks import _against_null, _rng

#: Below this many exceedances the exact p is too coarse and the tail is fitted.
MIN_EXCEEDANCES = 10
#: The largest tail fitted, and the step it shrinks by until a fit passes.
MAX_TAIL, TAIL_STEP = 250, 10
#: Choulakian and Stephens (2001), Table 2: the Anderson-Darling 5% critical value by GPD
#: shape xi (their k = -xi, F(x) = 1 - (1 - kx/a)^(1/k)); outside [-0.5, 0.9], the nearest end.
AD_SHAPES = (-0.5, -0.4, -0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.5, 0.9)
AD_CRITICAL_5 = (1.321, 1.221, 1.140, 1.074, 1.020, 0.974, 0.935, 0.903, 0.830, 0.771)

#: How a tail p came about.
EXACT, GPD, NO_FIT, TOO_FEW = "exact", "gpd", "no-fit", "too-few-sets"


@dataclass(frozen=True)
class TailP:
    """A permutation p from the null's tail (``p``: None unless ``method`` is ``"gpd"``)."""

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
        """The fields as plain Python values."""
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
    # the excesses sorted; ties at the threshold carry no tail information
    threshold = float(ordered[n_tail - 1] + ordered[n_tail]) / 2
    excess = ordered[:n_tail] - threshold
    return threshold, np.sort(excess[excess > 0])


def _gpd(excess: NDArray[np.float64]) -> tuple[float, float]:
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
    survival = float(sps.genpareto.sf(observed - fit.threshold, fit.shape, scale=fit.scale))
    return n_tail / n_null * survival


def _first_fit(observed: float, ordered: NDArray[np.float64]) -> tuple[int, _Fit, float] | None:
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

    ``n_boot`` resamples of the null (each refitting a tail of the chosen size) give the
    interval of p; 0: none.
    """
    obs, values = _against_null(observed, null, min_len=1)
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
