"""Power: the smallest effect a rank test against random sets could have detected."""

from __future__ import annotations

import math

from numpy.typing import ArrayLike
from scipy import stats as sps

from bindscope.metrics.stats._checks import _as_1d


def detectable_drop(
    random_drops: ArrayLike, item_drops: ArrayLike, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """The smallest top-set drop a one-sided rank test would detect with ``power``.

    The test rejects when the top drop lies above the null's ``1 - alpha`` quantile, which a
    normal approximation puts at ``mean(random) + z(1 - alpha) * sd(random)``; the top drop
    itself varies from item sample to item sample with standard error
    ``sd(item drops) / sqrt(n)``, so it passes with probability ``power`` when its
    expectation is ``z(power)`` standard errors above that quantile:

        mdd = mean(random) + z(1 - alpha) * sd(random) + z(power) * sd(items) / sqrt(n)

    Both spreads shrink as 1/sqrt(n) (each random drop is itself a mean over the n items),
    so cutting the items from N to n raises the part of ``mdd`` above ``mean(random)`` by
    about sqrt(N / n).

    Args:
        random_drops: The random sets' mean drops (at least 2).
        item_drops: The top set's drop per item (baseline - ablated; at least 2); its
            standard deviation (ddof=1) and count give the standard error.
        alpha: One-sided test level (pass ``alpha / m`` for a Holm correction over m).
        power: Wanted power.

    Returns:
        The drop, in the score's units.
    """
    drops = _as_1d(random_drops, "random_drops", min_len=2)
    items = _as_1d(item_drops, "item_drops", min_len=2)
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"'alpha' and 'power' must lie in (0, 1), got {alpha!r}, {power!r}")
    error = float(items.std(ddof=1)) / math.sqrt(items.size)
    threshold = drops.mean() + sps.norm.ppf(1 - alpha) * float(drops.std(ddof=1))
    return float(threshold + sps.norm.ppf(power) * error)


__all__ = ["detectable_drop"]
