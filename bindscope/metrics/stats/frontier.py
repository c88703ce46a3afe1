"""C5's design frontier: the detectable specificity a design buys against its predicted time."""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats as sps


@dataclass(frozen=True)
class Spread:
    """One model's recorded spreads, on the scale of one item (a set's over n: ``/ sqrt(n)``)."""

    item_sd: float
    set_sd: float


def unit_spread(item_sd: float, random_drops_sd: float, n_items: int) -> Spread:
    """The spreads of a run on ``n_items`` items, scaled to one item."""
    if n_items < 2:
        raise ValueError(f"'n_items' must be 2 or more, got {n_items!r}")
    return Spread(item_sd=item_sd, set_sd=random_drops_sd * math.sqrt(n_items))


#: The fewest sets per null at which the GPD tail p is checked calibrated at alpha 0.01 and
#: 0.001 (tests/metrics/test_tail.py; 59 and 79 sets rejected too often: benchmarks/README.md).
TAIL_CALIBRATED_SETS = 99


def p_floor(n_sets: int) -> float:
    """The least exact permutation p of a null with at most ``n_sets`` sets: 1/(N+1)."""
    return 1.0 / (n_sets + 1)


def reaches(level: float, n_sets: int, *, tail: bool = False) -> bool:
    """Whether a null of at most ``n_sets`` sets can state a p at or below ``level``."""
    return p_floor(n_sets) <= level or (tail and n_sets >= TAIL_CALIBRATED_SETS)


def detectable_specificity(
    spread: Spread,
    n_items: int,
    *,
    n_sets: int,
    alpha: float = 0.05,
    n_models: int = 1,
    power: float = 0.8,
) -> float:
    """The top drop above the random sets' mean that a design detects with ``power``."""
    if n_items < 1:
        raise ValueError(f"'n_items' must be 1 or more, got {n_items!r}")
    level = alpha / n_models
    if p_floor(n_sets) > level:
        return math.inf
    spread_sum = sps.norm.ppf(1 - level) * spread.set_sd + sps.norm.ppf(power) * spread.item_sd
    return float(spread_sum / math.sqrt(n_items))


def expected_sets_no_effect(n_sets: int, stop_at: int) -> float:
    """Sets a sequential null draws on average when the top set is like a random one."""
    if stop_at >= n_sets:
        return float(n_sets)
    return stop_at * (1 + math.log(n_sets / stop_at))


def c5_seconds(
    *, n_items: int, n_sets: float, n_nulls: int, item_seconds: float, fixed_seconds: float
) -> float:
    """One model's C5 time: ``fixed + items * (3 + nulls * sets) * item_seconds``."""
    conditions = 3 + n_nulls * n_sets  # baseline, top and bottom, then each null's sets
    return fixed_seconds + n_items * conditions * item_seconds


__all__ = [
    "TAIL_CALIBRATED_SETS",
    "Spread",
    "c5_seconds",
    "detectable_specificity",
    "expected_sets_no_effect",
    "p_floor",
    "reaches",
    "unit_spread",
]
