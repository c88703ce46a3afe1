"""What the page shows from result folders: a binding prompt, head maps, the circuit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from bindscope.errors import InputError, PromptFileError, RecordFileError
from bindscope.prompts import load
from bindscope.results.records import read_records
from bindscope.results.summaries import layer_rows

__all__ = ["KINDS", "folder_data", "prompt_text"]

KINDS = ("binding", "c5", "scan", "patching", "circuit")


def _experiment_folders(paths: list[Path]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in paths:
        if not path.is_dir():
            raise InputError(f"{path}: not a folder; pass a results folder or one of its {KINDS}")
        if (path / "records.jsonl").exists() and path.name in KINDS:
            found[path.name] = path
            continue
        inside = {kind: path / kind for kind in KINDS if (path / kind / "records.jsonl").exists()}
        if not inside:
            raise InputError(
                f"{path}: holds no records.jsonl of {', '.join(KINDS)}; pass a results folder "
                "(OUT) or one experiment's folder (OUT/binding)"
            )
        found |= inside
    return found


def _records(folder: Path, experiment: str, model: str | None) -> list[dict]:
    # model None: the first model there
    records = [r for r in read_records(folder / "records.jsonl") if r["experiment"] == experiment]
    if model is None and records:
        model = records[0]["model"]
    return [r for r in records if r["model"] == model]


def _summary(folder: Path, model: str | None) -> tuple[dict, dict]:
    path = folder / "summary.json"
    if not path.exists():
        raise RecordFileError(f"{path}: missing; run `bindscope summarize {folder.parent}`")
    summary = json.loads(path.read_text("utf-8"))
    models = summary.get("models", {})
    for label, part in models.items():
        if model is None or part.get("model", label.split("@")[0]) == model:
            return summary, part
    raise RecordFileError(f"{path}: no model {model!r}; it has {sorted(models)}")


def _binding(records: list[dict], prompt: str | None, where: Path) -> dict | None:
    measured = [r for r in records if not r["metrics"].get("skipped") and r["metrics"].get("bsi")]
    if prompt is not None:
        measured = [r for r in measured if r["prompt_key"] == prompt]
        if not measured:
            raise InputError(f"{where}: no measured record of prompt {prompt!r} (term/prompt_id)")
    if not measured:
        return None
    record = measured[0]
    found = {key: record[key] for key in ("prompt_key", "term", "model", "provenance")}
    found |= {key: record["metrics"][key] for key in ("span", "bsi")}
    return found | {"where": str(where)}


def prompt_text(binding: dict, prompts: str | Path | None = None) -> str:
    """The template a binding record measured, from its set or ``prompts`` (sha256 checked)."""
    given = binding["provenance"]
    where, key = binding["where"], binding["prompt_key"]
    source = prompts if prompts is not None else given.get("prompt_set") or "canonical"
    try:
        found = load(source, check_terms=False)
    except PromptFileError as exc:
        raise InputError(
            f"{where}: cannot reload prompt set {source!r} of {key} ({exc}); pass the file the "
            "run used with --prompts (prompts=), or the text with --text"
        ) from None
    if given.get("prompt_sha256") not in (None, found.sha256):
        raise InputError(
            f"{where}: prompt set {str(source)!r} is not the one {key} was measured on (sha256 "
            "differs); pass the file the run used with --prompts, or the text with --text"
        )
    for record in found.records:
        if record.key == key:
            return record.template
    raise InputError(f"{where}: {key} is not in prompt set {str(source)!r}")


def _head_map(
    name: str, title: str, values: Any, marked: Any = (), unit: str = "head"
) -> dict | None:
    # unit: head, layer (one column), position (from the end) or head_position (each head's)
    if values is None:
        return None
    array, marked = layer_rows(values, marked)
    rounded = [[None if np.isnan(v) else round(float(v), 4) for v in row] for row in array]
    found = {"name": name, "title": title, "values": rounded, "marked": marked, "unit": unit}
    shape = np.shape(values)
    if len(shape) == 3:  # each column's head and position from the end
        found["columns"] = [f"H{h}.-{p + 1}" for h in range(shape[1]) for p in range(shape[2])]
    return found


def _c5_map(folder: Path, model: str | None) -> dict | None:
    ranking = _records(folder, "c5-ranking", model)
    maps = [r["metrics"]["bsi"] for r in ranking if r["metrics"].get("bsi")]
    if not maps:
        return None
    mean = np.nanmean(np.array(maps, dtype=float), axis=0)
    has_summary = (folder / "summary.json").exists()
    top = _summary(folder, model)[1].get("top_heads", []) if has_summary else []
    return _head_map("c5", "C5 ranking: mean BSI (outlined: the top set ablated)", mean, top)


# a study's map: (title, the metric its part sits under or None, the exact map's key)
_ABLATION_MAPS = {
    "scan": ("Scan: log-prob drop when the {unit} is ablated", "logprob", "effect"),
    "patching": ("Patching: share of the gap recovered per {unit}", None, "recovery"),
}


def _ablation_map(folder: Path, model: str | None, name: str) -> dict | None:
    title, metric, exact = _ABLATION_MAPS[name]
    summary, part = _summary(folder, model)
    if metric is not None:
        part = part.get("metrics", {}).get(metric, {})
    unit = summary.get("unit", "head")
    title = title.format(unit=unit)
    values = part.get(exact)
    if summary.get("method") == "attribution":
        values, title = part.get("estimate"), f"{title} (attribution estimate)"
    return _head_map(name, title, values, part.get("significant", []), unit)


def _circuit(folder: Path, model: str | None) -> dict | None:
    records = _records(folder, "circuit", model)
    checked: dict[str, tuple[float, float]] = {}
    for m in (r["metrics"] for r in records if r["condition"] == "verify"):
        checked = {e: (a, b) for e, a, b in zip(m["edges"], m["estimate"], m["exact"])}
    edges = []
    for r in sorted(_condition_starts(records, "edge:"), key=lambda r: r["metrics"]["rank"]):
        name = r["condition"].removeprefix("edge:")
        sender, receiver = name.split("->")
        edge = {"s": sender, "r": receiver, "score": r["metrics"]["score"]}
        if name in checked:
            edge["estimate"], edge["exact"] = checked[name]
        edges.append(edge)
    if not edges:
        return None
    keys = ("n_edges", "share", "low", "high")
    sizes = [{k: r["metrics"].get(k) for k in keys} for r in _condition_starts(records, "top:")]
    return {"edges": edges, "sizes": sorted(sizes, key=lambda s: s["n_edges"] or 0)}


def _condition_starts(records: list[dict], prefix: str) -> list[dict]:
    return [r for r in records if r["condition"].startswith(prefix)]


def folder_data(paths: list[Path], *, model: str | None = None, prompt: str | None = None) -> dict:
    """Everything the page reads from result folders (keys absent where no folder has it)."""
    folders = _experiment_folders(paths)
    out: dict[str, Any] = {"maps": []}
    # the C5 ranking records are binding records too: read where no binding folder has one
    for kind, experiment in (("binding", "binding"), ("c5", "c5-ranking")):
        if kind in folders and out.get("binding") is None:
            records = _records(folders[kind], experiment, model)
            out["binding"] = _binding(records, prompt, folders[kind])
    if "c5" in folders:
        out["maps"].append(_c5_map(folders["c5"], model))
    out["maps"] += [_ablation_map(folders[n], model, n) for n in _ABLATION_MAPS if n in folders]
    if "circuit" in folders:
        out["circuit"] = _circuit(folders["circuit"], model)
    out["maps"] = [m for m in out["maps"] if m is not None]
    return out
