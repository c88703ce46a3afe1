"""Head taxonomy summaries (``OUT/heads``, of ``heads`` and ``sweep --heads``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from bindscope.experiments.kit import limits
from bindscope.experiments.kit.summary import by_name, skipped_reasons, summarize_folder
from bindscope.metrics import taxonomy
from bindscope.metrics.ranking import top_heads
from bindscope.results import labels

#: The taxonomy's folder and records, of `heads` and `sweep --heads` (neither names the other).
TAXONOMY = "heads"
#: The classification rule (thresholds, top-k) a heads run stores for its summary.
CLASSIFICATION_FILE = "classification.json"


def _array(records: list[dict], name: str) -> np.ndarray:
    return np.array([r["metrics"][name] for r in records], dtype=np.float64)  # None: nan


def _summarize_model(
    group: list[dict], *, thresholds: Mapping[str, float] | None, top_k: int, seed: int
) -> dict:
    clean = [r for r in group if r["condition"] == "clean"]
    repeated = [r for r in group if r["condition"] == "repeated"]
    first = group[0]["metrics"]
    sources = [(name, name, clean) for name in taxonomy.TEXT_SCORES] + [("binding", "bsi", clean)]
    sources += [(name, name, repeated) for name in taxonomy.REPEATED_SCORES]
    scores = {
        name: taxonomy.bootstrap_heads(_array(texts, field), seed=seed)
        for name, field, texts in sources
        if texts
    }
    means = {name: est["value"] for name, est in scores.items()}
    classes = taxonomy.classify(means, thresholds=thresholds)
    entry = {
        "model": group[0]["model"],
        "revision": group[0]["revision"],
        "n_layers": first["n_layers"],
        "n_heads": first["n_heads"],
        "position_0_is_bos": first.get("position_0_is_bos"),
        "n_prompts": len(clean),
        "n_repeated": len(repeated),
        "scores": scores,
        "classes": classes,
        "top_k": top_k,
    }
    if clean:
        # a query at position i sees i + 1 keys; queries 1..n-1 see (n + 2) / 2 on average
        keys = [(r["metrics"]["n_tokens"] + 2) / 2 for r in clean if r["metrics"]["n_tokens"] > 1]
        entry["mean_keys"] = float(np.mean(keys)) if keys else None
        if scores["spread"]["value"] is not None and entry["mean_keys"]:
            entry["spread_fraction"] = taxonomy.spread_fraction(
                scores["spread"]["value"], entry["mean_keys"]
            )
    if means.get("binding") is not None:
        top = [list(head) for head in top_heads(np.asarray(means["binding"], dtype=float), top_k)]
        entry["binding_top"] = top
        entry["binding_top_overlap"] = taxonomy.overlap(top, classes["labels"])
    if repeated:
        entry["repeated"] = {
            "n": len(repeated),
            "length": repeated[0]["metrics"]["length"],
            "seed": repeated[0]["provenance"].get("seed"),
        }
    return entry


def summarize_heads(
    records: list[dict],
    *,
    thresholds: Mapping[str, float] | None = None,
    top_k: int = 4,
    seed: int | None = None,
) -> dict:
    """Per ``model@revision`` summaries, plus ``emergence`` per model with 2+ revisions."""
    groups = labels.by_model(records, TAXONOMY)
    models = {}
    found: list[dict] = []
    for label, group in groups.items():
        used = (group[0]["provenance"].get("seed") or 0) if seed is None else seed
        models[label] = _summarize_model(group, thresholds=thresholds, top_k=top_k, seed=used)
        clean = [r for r in group if r["condition"] == "clean"]
        found += limits.collect(
            limits.excluded(label, skipped_reasons(clean), "the binding score (BSI)"),
            limits.small_group(label, "the prompts", len(clean), "a bootstrap interval"),
            limits.small_group(
                label, "the repeated sequences", models[label]["n_repeated"], "a bootstrap interval"
            ),
        )
    summary: dict = {"experiment": TAXONOMY, "models": models, "emergence": {}, "limits": found}
    for name, group in by_name(records, TAXONOMY).items():
        revisions = labels.checkpoint_order(group)
        if len(revisions) < 2:
            continue
        means = [
            {s: est["value"] for s, est in models[labels.label(name, v)]["scores"].items()}
            for v in revisions
        ]
        summary["emergence"][name] = taxonomy.emergence(
            revisions, means, model=name, thresholds=thresholds, top_k=top_k
        )
    return summary


def summarize(
    folder: str | Path, *, thresholds: Mapping[str, float] | None = None, top_k: int | None = None
) -> dict:
    """Rebuild ``summary.json`` from the records (thresholds default to the run's)."""
    folder = Path(folder)
    path = folder / CLASSIFICATION_FILE
    stored = json.loads(path.read_text("utf-8")) if path.is_file() else {}
    rule = {**stored.get("thresholds", {}), **(thresholds or {})}
    k = top_k if top_k is not None else stored.get("top_k", 4)
    return summarize_folder(
        folder, lambda records: summarize_heads(records, thresholds=rule, top_k=k), name=TAXONOMY
    )


__all__ = ["CLASSIFICATION_FILE", "TAXONOMY", "summarize", "summarize_heads"]
