"""bindscope: attention-head interventions on nnsight, with EB* and causal head ablation."""

from __future__ import annotations

__version__ = "0.1.0"

from bindscope.errors import BindscopeError
from bindscope.loading import load_model
from bindscope.model import Model

__all__ = ["BindscopeError", "Model", "__version__", "load_model"]
