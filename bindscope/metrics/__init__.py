"""Pure tensor maths: BSI, EB, EB*, behaviour scores and statistics."""

from __future__ import annotations

from bindscope.metrics.attribution import head_attribution, head_contributions, top_heads
from bindscope.metrics.binding import BindingResult, binding, bsi_from_probs, summarize

__all__ = [
    "BindingResult",
    "binding",
    "bsi_from_probs",
    "head_attribution",
    "head_contributions",
    "summarize",
    "top_heads",
]
