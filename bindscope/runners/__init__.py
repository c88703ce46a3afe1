"""Runners: a model over prompt sets under interventions, in batched forward passes."""

from __future__ import annotations

from bindscope.runners.attribution import head_attribution, head_contributions
from bindscope.runners.attribution_metrics import LogitDifference, TargetLogprob
from bindscope.runners.attribution_patching import head_attribution_patching
from bindscope.runners.behaviour import generation, recognition
from bindscope.runners.binding import binding
from bindscope.runners.circuit import faithfulness, greedy_mask, stability, top_mask, verify
from bindscope.runners.edges import EdgeScores, edge_attribution, path_patching, path_patching_each
from bindscope.runners.patching_sweep import patching_sweep
from bindscope.runners.taxonomy_scores import repeated_scores, text_scores

__all__ = [
    "EdgeScores",
    "LogitDifference",
    "TargetLogprob",
    "binding",
    "edge_attribution",
    "faithfulness",
    "generation",
    "greedy_mask",
    "head_attribution",
    "head_attribution_patching",
    "head_contributions",
    "patching_sweep",
    "path_patching",
    "path_patching_each",
    "recognition",
    "repeated_scores",
    "stability",
    "text_scores",
    "top_mask",
    "verify",
]
