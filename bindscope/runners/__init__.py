"""Runners: a model over prompt sets under interventions, in batched forward passes.

Each runner composes the trace primitives of ``bindscope.interventions`` with the pure maths
of ``bindscope.metrics``: binding (BSI/EB*), recognition and generation (behaviour), and
per-head direct logit attribution; activation patching over sites x layers x positions
(`patching_sweep`); attribution patching (every head's intervention
effect estimated from one backward pass, AtP*).
"""

from __future__ import annotations

from bindscope.runners.attribution import head_attribution, head_contributions
from bindscope.runners.attribution_patching import head_attribution_patching
from bindscope.runners.behaviour import generation, recognition
from bindscope.runners.binding import binding
from bindscope.runners.patching_sweep import patching_sweep

__all__ = [
    "binding",
    "generation",
    "head_attribution",
    "head_attribution_patching",
    "head_contributions",
    "patching_sweep",
    "recognition",
]
