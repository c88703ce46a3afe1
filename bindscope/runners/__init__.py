"""Runners: a model over prompt sets under interventions, in batched forward passes.

Each runner composes the trace primitives of ``bindscope.interventions`` with the pure maths
of ``bindscope.metrics``: binding (BSI/EB*), recognition and generation (behaviour), and
per-head direct logit attribution; activation patching over sites x layers x positions
(`patching_sweep`); attribution patching (every head's intervention
effect estimated from one backward pass, AtP*); edge circuits (EAP/EAP-IG scores, exact path
patching, faithfulness, stability, verification; docs/circuits.md).
"""

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
