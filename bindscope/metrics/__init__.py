"""Pure maths on tensors and arrays: BSI, EB, EB*, rubric scores, head ranking, statistics.

Nothing here runs a model; ``bindscope.runners`` does, and calls these functions.
"""

from __future__ import annotations

from bindscope.metrics.attribution import HeadContributions, frozen_norm, top_heads
from bindscope.metrics.binding import BindingResult, bsi_from_probs, summarize

__all__ = [
    "BindingResult",
    "HeadContributions",
    "bsi_from_probs",
    "frozen_norm",
    "summarize",
    "top_heads",
]
