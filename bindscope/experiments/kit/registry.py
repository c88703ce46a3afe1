"""Every experiment, found from its ``DEFINITION``: what the command line and summaries read."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path

from bindscope.errors import InputError
from bindscope.experiments.kit.experiment import Experiment
from bindscope.experiments.kit.limits import limit_lines
from bindscope.results import schema
from bindscope.results.records import read_records
from bindscope.results.schema import RecordKind

STUDIES = "bindscope.experiments"


@functools.cache
def definitions() -> dict[str, Experiment]:
    """Every experiment by name (its folder), in name order: the modules of ``STUDIES``."""
    found = {}
    package = importlib.import_module(STUDIES)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.ispkg:
            continue  # the kit, not a study
        module = importlib.import_module(f"{STUDIES}.{info.name}")
        definition = getattr(module, "DEFINITION", None)
        if isinstance(definition, Experiment):
            found[definition.name] = definition
    return found


def record_kinds() -> dict[str, RecordKind]:
    """Every kind of record an experiment writes, by its ``experiment`` field."""
    return {kind.experiment: kind for d in definitions().values() for kind in d.records}


def validate_file(path: str | Path) -> int:
    """``bindscope.results.schema.validate_file`` against every experiment's record kinds."""
    return schema.validate_file(path, record_kinds())


def summary_lines(summary: dict) -> list[str]:
    """Readable terminal lines for any experiment's summary, its limits last."""
    name = str(summary.get("experiment"))
    definition = definitions().get(name)
    lines = definition.text(summary) if definition else [f"(no text view for experiment {name!r})"]
    return lines + limit_lines(summary)


def summarize(results_dir: str | Path) -> dict[str, dict]:
    """Recompute ``summary.json`` for every experiment under ``results_dir`` (``OUT``, or one)."""
    found = experiment_folders(results_dir)
    return {name: definitions()[name].summarize(folder) for name, folder in found.items()}


def check_folders(results_dir: str | Path) -> dict[str, Path]:
    """``experiment_folders``, each folder checked by its experiment's ``check_folder``."""
    found = experiment_folders(results_dir)
    for name, folder in found.items():
        check = definitions()[name].check_folder
        if check is not None:
            check(folder, list(read_records(folder / "records.jsonl")))
    return found


def experiment_folders(results_dir: str | Path) -> dict[str, Path]:
    """Each experiment with records under ``results_dir`` -> its folder."""
    root = Path(results_dir)
    names = definitions()
    found = {n: root / n for n in names if (root / n / "records.jsonl").is_file()}
    if not found and (root / "records.jsonl").is_file() and root.name in names:
        found = {root.name: root}
    if not found:
        raise InputError(
            f"{root}: no experiment results here (expected {', '.join(names)} folders with "
            "records.jsonl); pass the --out folder of a run"
        )
    return found


__all__ = [
    "check_folders",
    "definitions",
    "experiment_folders",
    "record_kinds",
    "summarize",
    "summary_lines",
    "validate_file",
]
