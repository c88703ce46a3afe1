"""Result folders written as the experiments write them (docs/records.md), for the viewer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bindscope.results.records import SCHEMA, record_key

TEXT = "In web accessibility, a screen reader is software that reads the page aloud."
TERM = "screen reader"


def _record(
    experiment: str,
    model: str,
    prompt_key: str,
    condition: str,
    metrics: dict,
    provenance: dict | None = None,
) -> dict:
    return {
        "schema": SCHEMA,
        "experiment": experiment,
        "model": model,
        "revision": None,
        "key": record_key(experiment, model, None, prompt_key, condition),
        "prompt_key": prompt_key,
        "condition": condition,
        "term": prompt_key.split("/")[0],
        "metrics": metrics,
        "provenance": provenance or {},
    }


def _write(folder: Path, records: list[dict], summary: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def write_results(out: Path, model, *, text: str = TEXT) -> dict:
    """binding, scan, patching and circuit folders for ``model``; returns what they hold."""
    rng = np.random.default_rng(0)
    name, L, H = model.name, model.n_layers, model.n_heads
    prompts = out / "prompts.jsonl"
    line = {
        "prompt_id": "gen_01",
        "term": TERM,
        "task": "generation",
        "template": text,
        "max_tokens": 4,
    }
    prompts.write_text(json.dumps(line) + "\n")
    bsi = rng.uniform(-0.2, 0.6, (L, H)).round(6).tolist()
    span = [5, 6]
    _write(out / "binding", [_record(
        "binding", name, f"{TERM}/gen_01", "clean", {"bsi": bsi, "span": span, "skipped": None},
        {"prompt_set": str(prompts)})])  # fmt: skip
    ranking = [rng.uniform(-0.2, 0.6, (L, H)).round(6).tolist() for _ in range(3)]
    _write(
        out / "c5",
        [
            _record(
                "c5-ranking",
                name,
                f"{TERM}/rank_{i}",
                "clean",
                {"bsi": b, "span": span, "skipped": None},
            )
            for i, b in enumerate(ranking)
        ],
        {"models": {f"{name}@main": {"model": name, "top_heads": [[2, 3], [0, 1]]}}},
    )
    effect = rng.normal(0, 0.3, (L, H)).tolist()
    scan = {"models": {f"{name}@main": {"model": name, "metrics": {"logprob": {
        "effect": effect, "significant": [[1, 2]]}}}}}  # fmt: skip
    _write(out / "scan", [_record("scan", name, f"{TERM}/gen_01", "clean", {})], scan)
    recovery = rng.uniform(-0.1, 1, (L, H)).tolist()
    patching = {
        "models": {f"{name}@main": {"model": name, "recovery": recovery, "significant": []}}
    }
    _write(out / "patching", [_record("patching", name, "p/ioi_01", "clean", {})], patching)
    edges = [
        ("embed", f"a1.h{H - 1}<q>"),
        ("a0.h1", "a2.g0<k>"),
        ("a1.h0", "m1"),
        ("m1", "logits"),
        ("a2.h3", "logits"),
        ("a0.h0", "a2.g0<v>"),
        ("m0", "a1.h2<q>"),
    ]
    scores = [0.9, -0.6, 0.5, 0.4, 0.3, -0.2, 0.1]
    records = [
        _record("circuit", name, "ioi-circuit", f"edge:{s}->{r}", {"rank": i, "score": x})
        for i, ((s, r), x) in enumerate(zip(edges, scores))
    ]
    records.append(_record("circuit", name, "ioi-circuit", "verify", {
        "edges": [f"{s}->{r}" for s, r in edges[:2]], "estimate": scores[:2],
        "exact": [0.85, -0.5], "k": 1, "spearman": None, "recall_at_k": 1.0}))  # fmt: skip
    records += [
        _record(
            "circuit",
            name,
            "ioi-circuit",
            f"top:{n}",
            {"n_edges": n, "share": 0.1 * n, "low": 0.05 * n, "high": 0.12 * n},
        )
        for n in (2, 5)
    ]
    _write(out / "circuit", records)
    return {
        "bsi": bsi,
        "span": span,
        "ranking": ranking,
        "effect": effect,
        "recovery": recovery,
        "edges": edges,
        "scores": scores,
    }


@pytest.fixture(scope="session")
def llama_tiny(sp_tokenizer):
    from tests.conftest import _tiny

    return _tiny("llama", None, sp_tokenizer)


def write_unit_maps(out: Path, model) -> dict:
    """A scan by attribution and a patching by position, as their summaries hold them."""
    rng = np.random.default_rng(1)
    name, L, H = model.name, model.n_layers, model.n_heads
    estimate = rng.normal(0, 0.3, (L, H)).tolist()
    effect = [[None] * H for _ in range(L)]
    effect[1][2] = 0.5  # the one verified head
    scan = {"method": "attribution", "unit": "head", "models": {f"{name}@main": {
        "model": name, "metrics": {"logprob": {"effect": effect, "estimate": estimate,
                                               "significant": []}}}}}  # fmt: skip
    _write(out / "scan", [_record("scan", name, f"{TERM}/gen_01", "clean", {})], scan)
    by_position = rng.uniform(0, 1, (L, 5)).tolist()
    patching = {"method": "exact", "unit": "position", "models": {f"{name}@main": {
        "model": name, "recovery": by_position, "significant": []}}}  # fmt: skip
    _write(out / "patching", [_record("patching", name, "p/ioi_01", "clean", {})], patching)
    return {"estimate": estimate, "by_position": by_position}
