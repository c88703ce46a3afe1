"""Power: the smallest effect a rank test against random sets could have detected."""

from __future__ import annotations

import math

from numpy.typing import ArrayLike
from scipy import stats as sps

from bindscope.metrics.stats._checks import _as_1d


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


__all__ = ["detectable_drop"]
