"""What a result line takes from its item (a prompt, a task pair, another item), binding metrics."""

from __future__ import annotations

from dataclasses import dataclass

from bindscope.metrics.binding import PROMPT_FIELDS, BindingResult
from bindscope.prompts.pairs import Pair
from bindscope.prompts.prompt_sets import PromptRecord
from bindscope.prompts.tasks import TaskPair
from bindscope.protocols import LanguageModel

#: The fields a result line takes from its item, in record order (``key`` as ``prompt_key``).
ITEM_FIELDS = PROMPT_FIELDS


@dataclass(frozen=True)
class Item:
    """A record's item that is no prompt of a set (a random sequence, a whole circuit)."""

    key: str
    task: str
    prompt_id: str
    term: str = ""
    control_group: None = None


#: What a result line can be about: each has the ``ITEM_FIELDS``.
RecordFields = PromptRecord | Pair | TaskPair | Item


def binding_metrics(result: BindingResult, model: LanguageModel) -> dict:
    """The binding fields of a record's ``metrics``."""
    data = {k: v for k, v in result.to_dict().items() if k not in ITEM_FIELDS}
    return {**data, "n_layers": model.n_layers, "n_heads": model.n_heads}


__all__ = ["ITEM_FIELDS", "Item", "RecordFields", "binding_metrics"]
