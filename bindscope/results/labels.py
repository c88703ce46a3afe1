"""How a model is named (``name@revision``) in summaries, figures and settings; revision order."""

from __future__ import annotations

import re
from collections.abc import Iterable

from bindscope.protocols import LanguageModel


def label(model: str, revision: str | None) -> str:
    """``name@revision`` (``main`` when there is none): how summaries and figures key a model."""
    return f"{model}@{revision or 'main'}"


def model_label(model: LanguageModel) -> str:
    """The ``label`` of a loaded ``Model``."""
    return label(model.name, model.revision)


def record_label(record: dict) -> str:
    """The ``label`` of the model a result record belongs to."""
    return label(record["model"], record.get("revision"))


def by_model(records: Iterable[dict], experiment: str | None = None) -> dict[str, list[dict]]:
    """Records grouped by ``record_label``, in first-seen order (only ``experiment``'s if given)."""
    groups: dict[str, list[dict]] = {}
    for record in records:
        if experiment is None or record["experiment"] == experiment:
            groups.setdefault(record_label(record), []).append(record)
    return groups


def checkpoint_order(records: list[dict]) -> list[str]:
    """Every revision present in the records, in training order.

    Names that carry their step (``step15000``, ``step1000-tokens4B``, ``checkpoint-5000``) sort
    by those numbers; otherwise the runs' declared order is kept, resumed runs' revisions after.
    """
    present = {r["revision"] for r in records}
    # the numbers in each name, in order (``step1000-tokens4B`` -> (1000, 4))
    keys = {v: tuple(int(n) for n in re.findall(r"\d+", v or "")) for v in present}
    if all(keys.values()):
        return sorted(present, key=lambda v: (keys[v], v))
    runs = (r["provenance"].get("sweep", {}).get("revisions") or [] for r in records)
    declared = list(dict.fromkeys(v for revisions in runs for v in revisions if v in present))
    return declared + sorted(present - set(declared), key=str)


__all__ = ["by_model", "checkpoint_order", "label", "model_label", "record_label"]
