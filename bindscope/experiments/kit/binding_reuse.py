"""Binding results computed once per results folder and reused by later experiments."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from bindscope.experiments.kit.experiment import ModelRun, model_records
from bindscope.experiments.kit.record_fields import binding_metrics
from bindscope.prompts.prompt_sets import PromptRecord, PromptSet
from bindscope.protocols import LanguageModel
from bindscope.results.labels import model_label
from bindscope.results.settings import SETTINGS_FILE, model_settings, read_settings, versions
from bindscope.runners.binding import binding

#: The binding study's folder and records, reused by C5, the controls and the taxonomy.
BINDING = "binding"
BINDING_FROM = f"{BINDING}/records.jsonl"


def stored_binding(model: LanguageModel, out: str | Path, pset: PromptSet) -> dict[str, dict]:
    """The binding metrics ``OUT/binding`` already holds for ``pset`` on ``model``."""
    folder = Path(out) / BINDING
    records, settings = folder / "records.jsonl", folder / SETTINGS_FILE
    if not (records.is_file() and settings.is_file()):
        return {}
    stored = read_settings(settings)
    if stored["settings"].get("prompt_sha256") != pset.sha256:
        return {}
    if stored.get("versions") != versions():  # another code version's numbers
        return {}
    if stored["models"].get(model_label(model)) != model_settings(model):
        return {}
    return {r["prompt_key"]: r["metrics"] for r in model_records(records, BINDING, model)}


def reuse_or_bind(
    run: ModelRun,
    chunk: list[PromptRecord],
    *,
    batch_size: int,
    stored: Mapping[str, dict] | None = None,
    fresh: Callable[[PromptRecord], bool] = lambda record: False,
    on_missing: str = "skip",
) -> list[tuple[PromptRecord, dict, dict | None]]:
    """Each prompt of ``chunk`` with its binding metrics and their provenance."""
    found = stored or {}
    todo = [r for r in chunk if fresh(r) or r.key not in found]
    results = binding(run.model, todo, batch_size=batch_size, on_missing=on_missing)
    computed = {r.key: binding_metrics(res, run.model) for r, res in zip(todo, results)}
    reused = {**run.prov, "binding_from": BINDING_FROM}
    return [
        (r, computed[r.key], None) if r.key in computed else (r, found[r.key], reused)
        for r in chunk
    ]


__all__ = ["BINDING_FROM", "reuse_or_bind", "stored_binding"]
