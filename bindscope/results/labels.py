"""How a model is named in summaries, figures and settings: ``name@revision``."""

from __future__ import annotations

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


def by_model(records, experiment: str | None = None) -> dict[str, list[dict]]:
    """Records grouped by ``record_label``, in first-seen order (only ``experiment``'s if given)."""
    groups: dict[str, list[dict]] = {}
    for record in records:
        if experiment is None or record["experiment"] == experiment:
            groups.setdefault(record_label(record), []).append(record)
    return groups


__all__ = ["by_model", "label", "model_label", "record_label"]
