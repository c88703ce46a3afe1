"""Experiments composed from captures and ablations; each writes resumable result records.

Every module has a ``run(...)`` that writes ``OUT/<experiment>/records.jsonl`` as prompts
finish and a ``summarize(folder)`` that rebuilds ``summary.json`` from those records alone.
"""

from __future__ import annotations

from pathlib import Path

from bindscope.errors import InputError

NAMES = ("binding", "c5", "sweep", "fewshot", "controls", "heads", "scan", "patching")


def _module(name: str):
    import importlib

    return importlib.import_module(
        f"bindscope.experiments.{'binding_run' if name == 'binding' else name}"
    )


def summarize(results_dir: str | Path) -> dict[str, dict]:
    """Recompute ``summary.json`` for every experiment found under ``results_dir``.

    Raises:
        InputError: No ``<experiment>/records.jsonl`` under the folder.
        RecordFileError: A records file is corrupt (file and line named).
    """
    found = experiment_folders(results_dir)
    return {name: _module(name).summarize(folder) for name, folder in found.items()}


def experiment_folders(results_dir: str | Path) -> dict[str, Path]:
    """Each experiment with records under ``results_dir`` -> its folder.

    ``summarize``, ``report`` and ``figures`` read these.

    Raises:
        InputError: None (the folder holds no experiment's ``records.jsonl``).
    """
    root = Path(results_dir)
    found = {n: root / n for n in NAMES if (root / n / "records.jsonl").is_file()}
    if not found and (root / "records.jsonl").is_file() and root.name in NAMES:
        found = {root.name: root}
    if not found:
        raise InputError(
            f"{root}: no experiment results here (expected {', '.join(NAMES)} folders with "
            "records.jsonl); pass the --out folder of a run"
        )
    return found


__all__ = ["NAMES", "experiment_folders", "summarize"]
