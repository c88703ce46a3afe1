"""The ``Model`` wrapper: one nnsight ``TransformersModel`` plus the family's head geometry.

``wrapper`` holds the class; ``calls`` and ``generation`` the traced forward passes its
high-level methods run; ``checks`` the argument checks and error translation.
"""

from __future__ import annotations

from bindscope.model.generation import SESSION_BATCHES
from bindscope.model.wrapper import Model

__all__ = ["SESSION_BATCHES", "Model"]
