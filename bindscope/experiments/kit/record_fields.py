"""What a result line takes from its item (a prompt or a generated one), and binding metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bindscope.metrics.binding import BindingResult
from bindscope.protocols import LanguageModel


class RecordFields(Protocol):
    """What a result line takes from the prompt it ran (a PromptRecord, or a generated item)."""

    @property
    def key(self) -> str:
        """The prompt's unique key."""

    @property
    def prompt_id(self) -> str:
        """The prompt's id in its set."""

    @property
    def term(self) -> str:
        """The term the prompt is about ("" when none)."""

    @property
    def task(self) -> str:
        """The task the prompt belongs to."""

    @property
    def control_group(self) -> str | None:
        """The control group, if any."""


@dataclass(frozen=True)
class Item:
    """A record's item that is no prompt of a set (a random sequence, a whole circuit)."""

    key: str
    task: str
    prompt_id: str
    term: str = ""
    control_group: None = None


def binding_metrics(result: BindingResult, model: LanguageModel) -> dict:
    """The binding fields of a record's ``metrics``."""
    data = result.to_dict()
    for name in ("key", "prompt_id", "term", "task", "control_group"):
        data.pop(name)
    return {**data, "n_layers": model.n_layers, "n_heads": model.n_heads}


__all__ = ["Item", "RecordFields", "binding_metrics"]
