"""Sequential Monte Carlo p-values (Besag and Clifford 1991), for nulls drawn one by one.

Draw null statistics in a fixed order and stop once ``stop_at`` (h) of them reach the
observed one: the p-value is then ``h / l`` after ``l`` draws. If ``max_draws`` (n - 1)
draws pass with only ``g < h`` reaching it, ``p = (g + 1) / (max_draws + 1)``, the
fixed-count rank p. The test is exact (valid at every level) and a null-looking statistic
stops after about ``h / p`` draws, while one in the far tail goes on to ``max_draws``, so
the smallest p is ``1 / (max_draws + 1)``. Besag, J. and Clifford, P. (1991), "Sequential
Monte Carlo p-values", Biometrika 78(2), 301-304.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from bindscope.metrics.stats._checks import _as_1d
from bindscope.metrics.stats.results import _PlainResult

#: Why a sequence stopped.
REACHED, MAXIMUM = "reached", "maximum"


@dataclass(frozen=True)
class SequentialP(_PlainResult):
    """A sequential Monte Carlo p-value.

    Attributes:
        p: The p-value: ``h / n_drawn`` when stopped on ``h`` exceedances, else
            ``(exceedances + 1) / (n_drawn + 1)``.
        n_drawn: Null draws the decision used (the rest of a longer sequence is ignored).
        exceedances: Draws at or above the observed statistic among them.
        stopped: ``"reached"`` (``stop_at`` exceedances) or ``"maximum"`` (``max_draws``).
        stop_at: The ``h`` of the rule.
        max_draws: The most draws the rule allowed.
    """

    p: float
    n_drawn: int
    exceedances: int
    stopped: str
    stop_at: int
    max_draws: int


def sequential_p_value(
    observed: float, null: ArrayLike, *, stop_at: int = 10, max_draws: int = 199
) -> SequentialP | None:
    """The Besag-Clifford p of ``observed`` against ``null`` read in its order (one-sided, >=).

    Args:
        observed: The observed statistic (larger is more extreme).
        null: Null statistics in the order they were drawn; draws past the stopping point
            are ignored, so a longer evaluated sequence gives the same answer.
        stop_at: h, the exceedances that stop the sequence (1 or more).
        max_draws: The most null draws; p can reach ``1 / (max_draws + 1)``. Below
            ``stop_at`` the rule never stops early: the fixed-count rank p.

    Returns:
        The p-value and where it stopped; None while ``null`` is too short to decide (fewer
        than ``max_draws`` draws and fewer than ``stop_at`` exceedances among them).
    """
    if isinstance(stop_at, bool) or not isinstance(stop_at, int) or stop_at < 1:
        raise ValueError(f"'stop_at' must be an integer of 1 or more, got {stop_at!r}")
    if isinstance(max_draws, bool) or not isinstance(max_draws, int) or max_draws < 1:
        raise ValueError(f"'max_draws' must be an integer of 1 or more, got {max_draws!r}")
    obs = float(observed)
    if not math.isfinite(obs):
        raise ValueError(f"'observed' must be finite, got {observed!r}")
    draws = _as_1d(null, "null", min_len=0)[:max_draws]
    hits = np.cumsum(draws >= obs)
    reached = np.flatnonzero(hits >= stop_at)
    if reached.size:
        n = int(reached[0]) + 1
        return SequentialP(stop_at / n, n, stop_at, REACHED, stop_at, max_draws)
    if draws.size < max_draws:
        return None
    g = int(hits[-1])
    return SequentialP((g + 1) / (max_draws + 1), max_draws, g, MAXIMUM, stop_at, max_draws)


__all__ = ["MAXIMUM", "REACHED", "SequentialP", "sequential_p_value"]
