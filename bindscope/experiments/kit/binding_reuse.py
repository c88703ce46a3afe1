"""Binding results computed once per results folder and reused by later experiments."""

from __future__ import annotations

from pathlib import Path

from bindscope.prompts.prompt_sets import PromptSet
from bindscope.protocols import LanguageModel
from bindscope.results.labels import model_label
from bindscope.results.records import read_records
from bindscope.results.settings import SETTINGS_FILE, model_settings, read_settings, versions

#: The folder and records of the binding study, which C5, the controls and the taxonomy
#: reuse; one name, kept here so that none of them names the study.
BINDING = "binding"

#: Where reused binding results come from, relative to the results folder.
BINDING_FROM = f"{BINDING}/records.jsonl"


def stored_binding(model: LanguageModel, out: str | Path, pset: PromptSet) -> dict[str, dict]:
    """The binding metrics ``OUT/binding`` already holds for ``pset`` on ``model``.

    Binding results are computed once per results folder: they are reused when the binding
    run used the same prompt set (content hash), model, revision and BOS policy and dtype
    (its ``settings.json``), under the same code versions. Returns ``{prompt key: metrics}``,
    empty when nothing matches.
    """
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
    return {
        r["prompt_key"]: r["metrics"]
        for r in read_records(records)
        if r["experiment"] == BINDING
        and r["model"] == model.name
        and r["revision"] == model.revision
    }


__all__ = ["BINDING_FROM", "stored_binding"]
