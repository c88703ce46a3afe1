"""Pure maths on tensors and arrays: BSI, EB*, rubric scores, head ranking, statistics."""

from __future__ import annotations

from bindscope.metrics.attribution import HeadContributions, frozen_norm
from bindscope.metrics.binding import BindingResult, bsi_from_probs, summarize
from bindscope.metrics.patching import logit_diff, token_loss
from bindscope.metrics.ranking import mean_bsi, rank_heads, top_heads

__all__ = [
    "BindingResult",
    "HeadContributions",
    "bsi_from_probs",
    "frozen_norm",
    "logit_diff",
    "mean_bsi",
    "rank_heads",
    "summarize",
    "token_loss",
    "top_heads",
]
