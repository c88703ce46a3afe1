"""The ``Model`` wrapper: one nnsight ``TransformersModel`` plus the family's head geometry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bindscope.batch import SESSION_BATCHES
from bindscope.model.wrapper import Model

__all__ = ["SESSION_BATCHES", "Model"]

if TYPE_CHECKING:
    from bindscope.protocols import LanguageModel

    def _conforms(model: Model) -> LanguageModel:
        """Type-check that ``Model`` satisfies the protocol the lower layers use."""
        return model
