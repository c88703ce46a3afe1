"""What a result line holds: the fields every experiment shares, and the binding metrics."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bindscope.metrics.binding import BindingResult
from bindscope.protocols import LanguageModel
from bindscope.results.records import record_key


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


def base_record(
    experiment: str,
    model: LanguageModel,
    record: RecordFields,
    condition: str,
    metrics: dict,
    prov: dict,
    *,
    heads: Iterable[Sequence[int]] = (),
    ablation: str | None = None,
    **extra: Any,
) -> dict:
    """A result line with the fields every experiment shares (see docs/records.md)."""
    heads = [list(h) for h in heads]
    return {
        "experiment": experiment,
        "key": record_key(experiment, model.name, model.revision, record.key, condition),
        "model": model.name,
        "revision": model.revision,
        "family": model.family,
        "prompt_key": record.key,
        "prompt_id": record.prompt_id,
        "term": record.term,
        "task": record.task,
        "control_group": record.control_group,
        "condition": condition,
        "heads": heads,
        "ablation": ablation if heads else None,
        "metrics": metrics,
        "provenance": prov,
        **extra,
    }


def binding_metrics(result: BindingResult, model: LanguageModel) -> dict:
    """The binding fields of a record's ``metrics``."""
    data = result.to_dict()
    for name in ("key", "prompt_id", "term", "task", "control_group"):
        data.pop(name)
    return {**data, "n_layers": model.n_layers, "n_heads": model.n_heads}


__all__ = ["Item", "RecordFields", "base_record", "binding_metrics"]
