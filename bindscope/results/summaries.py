"""Read stored results for figures and the report: summaries, validated records, provenance."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bindscope.errors import InputError, RecordFileError
from bindscope.results.labels import record_label
from bindscope.results.records import read_records

VERSION_FIELDS = ("bindscope", "nnsight", "transformers", "torch")


class MissingData(LookupError):
    """A summary lacks what a figure or table needs (turned into a skip line, not a crash)."""


@dataclass(frozen=True)
class ExperimentResults:
    """What is stored for one experiment in ``RESULTS_DIR/<name>``.

    ``provenance`` is each model's first record's; ``missing`` says why nothing can be drawn
    (None when usable); ``notes`` warn, e.g. of a summary older than its records.
    """

    name: str
    folder: Path
    summary: dict | None
    n_records: int
    provenance: dict[str, dict]
    versions: frozenset[tuple[str, ...]]
    times: tuple[str, str] | None
    missing: str | None
    notes: tuple[str, ...] = field(default=())

    @property
    def where(self) -> str:
        """The ``summary.json`` path that messages name."""
        return str(self.folder / "summary.json")

    @property
    def models(self) -> dict[str, dict]:
        """The summary's per-model entries (empty when there is no summary)."""
        return (self.summary or {}).get("models") or {}


def load_results(results_dir: str | Path, names: Iterable[str]) -> dict[str, ExperimentResults]:
    """Read the ``names`` experiment folders of ``results_dir`` (missing ones: ``missing``)."""
    root = Path(results_dir)
    if not root.is_dir():
        raise InputError(
            f"{root}: no such results folder; pass the OUT folder the experiments wrote to"
        )
    return {name: load_experiment(root, name) for name in names}


def load_experiment(root: Path, name: str) -> ExperimentResults:
    """Read ``root/name``'s records and summary back as an ``ExperimentResults``."""
    folder = root / name
    records_path, summary_path = folder / "records.jsonl", folder / "summary.json"
    seen = _read_record_heads(records_path)
    summary = _read_summary(summary_path) if summary_path.is_file() else None
    missing = None
    if summary is None and seen.n_records:
        missing = (
            f"{summary_path} is missing but {seen.n_records} records exist; "
            f"run `bindscope summarize {root}`"
        )
    elif summary is None:
        missing = f"no {name} results in {folder} (the experiment has not been run here)"
    elif not summary.get("models"):
        missing = f"{summary_path} lists no models"
    return ExperimentResults(
        name=name,
        folder=folder,
        summary=summary,
        n_records=seen.n_records,
        provenance=seen.provenance,
        versions=frozenset(seen.versions),
        times=(min(seen.times), max(seen.times)) if seen.times else None,
        missing=missing,
        notes=_stale_notes(root, summary, summary_path, records_path, seen),
    )


@dataclass
class _RecordHeads:
    n_records: int = 0
    provenance: dict[str, dict] = field(default_factory=dict)
    versions: set[tuple[str, ...]] = field(default_factory=set)
    times: list[str] = field(default_factory=list)
    keys: set[tuple[str, str, str | None]] = field(default_factory=set)  # (label, model, rev)


def _read_record_heads(records_path: Path) -> _RecordHeads:
    seen = _RecordHeads()
    if not records_path.is_file():
        return seen
    for record in read_records(records_path):
        seen.n_records += 1
        label = record_label(record)
        seen.keys.add((label, record["model"], record.get("revision")))
        prov = record.get("provenance") or {}
        seen.provenance.setdefault(label, {**prov, "family": record.get("family")})
        seen.versions.add(tuple(str(prov.get(f, "?")) for f in VERSION_FIELDS))
        if prov.get("time"):
            seen.times.append(str(prov["time"]))
    return seen


def _stale_notes(
    root: Path, summary: dict | None, summary_path: Path, records_path: Path, seen: _RecordHeads
) -> tuple[str, ...]:
    """Where the summary may not be its records': older than them, or missing a model."""
    notes = []
    if summary is not None and seen.n_records and _older(summary_path, records_path):
        notes.append(
            f"{summary_path} is older than its records ({records_path.name} changed after it "
            f"was written), so its numbers may not be theirs; run `bindscope summarize {root}`"
        )
    if summary is not None and summary.get("models"):
        models = summary["models"]
        stale = sorted(
            label for label, model, rev in seen.keys if not _covers(models, label, model, rev)
        )
        if stale:
            notes.append(
                f"{summary_path} does not cover {', '.join(stale)} found in the records; "
                f"run `bindscope summarize {root}`"
            )
    return tuple(notes)


def _covers(models: dict, label: str, model: str, revision: str | None) -> bool:
    # an entry keyed by the model may cover several revisions by listing them (a sweep's)
    return label in models or revision in ((models.get(model) or {}).get("revisions") or ())


def _older(summary_path: Path, records_path: Path) -> bool:
    return summary_path.stat().st_mtime < records_path.stat().st_mtime


def _read_summary(path: Path) -> dict:
    try:
        summary = json.loads(path.read_text("utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordFileError(
            f"{path}:{exc.lineno}: not valid JSON ({exc.msg}); delete it and run "
            f"`bindscope summarize {path.parent.parent}`"
        ) from None
    if not isinstance(summary, dict):
        raise RecordFileError(f"{path}:1: a summary must be a JSON object")
    return summary


def need(mapping: Any, *path: str | int, where: str = "summary") -> Any:
    """``mapping[p0][p1]...``; raises ``MissingData`` naming the path when absent or null."""
    value = mapping
    for i, key in enumerate(path):
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            value = None
        if value is None:
            joined = ".".join(str(p) for p in path[: i + 1])
            raise MissingData(f"{where} has no {joined}")
    return value


__all__ = ["ExperimentResults", "MissingData", "load_experiment", "load_results", "need"]


def layer_rows(effect: Any, marked: Iterable) -> tuple[Any, list[list[int]]]:
    """A stored map as ``[L, columns]`` floats (None: NaN) and its marked cells.

    A head x position map ``[L, H, P]`` puts each head's positions side by side.
    """
    values = np.array(effect, dtype=float)
    cells = [list(c) for c in marked]
    if values.ndim == 3:
        n_positions = values.shape[2]
        values = values.reshape(values.shape[0], -1)
        cells = [[c[0], c[1] * n_positions + c[2]] for c in cells]
    return values, cells
