"""Runners: a model over prompt sets under interventions, in batched forward passes."""

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
