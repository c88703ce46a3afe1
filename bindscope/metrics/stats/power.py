"""Power: the smallest effect a rank test against random sets could have detected."""

from __future__ import annotations

import math

from numpy.typing import ArrayLike
from scipy import stats as sps

from bindscope.metrics.stats._checks import _as_1d


def detectable_drop(
    random_drops: ArrayLike,
    paired_sd: float,
    n_items: int,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float:
    """The smallest top-set drop a one-sided rank test would detect with ``power``.

    The test rejects when the top drop lies above the null's ``1 - alpha`` quantile, which a
    normal approximation puts at ``mean(random) + z(1 - alpha) * sd(random)``; the top drop
    itself varies from item sample to item sample with standard error
    ``paired_sd / sqrt(n_items)``, so it passes with probability ``power`` when its
    expectation is ``z(power)`` standard errors above that quantile:

        mdd = mean(random) + z(1 - alpha) * sd(random) + z(power) * paired_sd / sqrt(n)

    Both spreads shrink as 1/sqrt(n) (each random drop is itself a mean over the n items),
    so cutting the items from N to n raises the part of ``mdd`` above ``mean(random)`` by
    about sqrt(N / n).

    Args:
        random_drops: The random sets' mean drops (at least 2).
        paired_sd: Standard deviation of the per-item drops of the top set
            (baseline - ablated, ddof=1).
        n_items: Items each drop is a mean over.
        alpha: One-sided test level (pass ``alpha / m`` for a Holm correction over m).
        power: Wanted power.

    Returns:
        The drop, in the score's units.
    """
    drops = _as_1d(random_drops, "random_drops", min_len=2)
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"'alpha' and 'power' must lie in (0, 1), got {alpha!r}, {power!r}")
    if n_items < 1 or not math.isfinite(paired_sd) or paired_sd < 0:
        raise ValueError(
            f"need n_items >= 1 and a finite paired_sd >= 0, got {n_items}, {paired_sd}"
        )
    spread = float(drops.std(ddof=1))
    return float(
        drops.mean()
        + sps.norm.ppf(1 - alpha) * spread
        + sps.norm.ppf(power) * paired_sd / math.sqrt(n_items)
    )


__all__ = ["detectable_drop"]
