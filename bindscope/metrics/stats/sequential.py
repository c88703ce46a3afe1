"""Sequential Monte Carlo p-values (Besag and Clifford 1991; docs/internals.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from bindscope.errors import whole_number
from bindscope.metrics.stats._checks import _against_null
from bindscope.metrics.stats.results import _PlainResult

#: Why a sequence stopped.
REACHED, MAXIMUM = "reached", "maximum"


@dataclass(frozen=True)
class SequentialP(_PlainResult):
    """A sequential Monte Carlo p-value; ``n_drawn``: the draws the decision used."""

    p: float
    n_drawn: int
    exceedances: int
    stopped: str
    stop_at: int
    max_draws: int


def sequential_p_value(
    observed: float, null: ArrayLike, *, stop_at: int = 10, max_draws: int = 199
) -> SequentialP | None:
    """The Besag-Clifford p of ``observed`` against ``null`` in drawn order; None until decided."""
    whole_number(stop_at, "stop_at", "pass e.g. stop_at=10", least=1, error=ValueError)
    whole_number(max_draws, "max_draws", "pass e.g. max_draws=199", least=1, error=ValueError)
    obs, draws = _against_null(observed, null, min_len=0)
    draws = draws[:max_draws]
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
