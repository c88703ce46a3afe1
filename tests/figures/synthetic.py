"""Small synthetic result folders that follow docs/records.md, for the figure tests.

Each study's records and summary come from its module in ``tests/figures/studies/`` (found
on disk, so a new study edits nothing here); this module holds what they share. Most
summaries come from the real summarisers run on synthetic records, so the figures are tested
against the shapes the experiments write; sweep, few-shot and controls summaries are built
by hand from the documented shapes.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path
from types import ModuleType

import numpy as np

from bindscope.results.records import SCHEMA, record_key, write_summary
from tests.figures import studies

MODELS = ("org/tiny-neox", "tiny-llama")
N_LAYERS, N_HEADS = 3, 4
TERMS = ("screen reader", "alt text", "skip link")
PROMPTS_PER_TERM = 2
REVISIONS = ("step0", "step1000", "step2000", "step4000")
N_RANDOM = 6


def provenance(model: str, revision: str | None = None, **extra) -> dict:
    return {
        "bindscope": "0.1.0",
        "nnsight": "0.8.1",
        "transformers": "5.0.0",
        "torch": "2.13.0",
        "model": model,
        "revision": revision,
        "family": "llama",
        "dtype": "float32",
        "device": "cpu",
        "attn_implementation": "eager",
        "capture": "eager",
        "remote": False,
        "prompt_set": "canonical",
        "prompt_sha256": "0123456789abcdef" * 4,
        "seed": 0,
        "time": "2025-01-01T00:00:00+00:00",
        **extra,
    }


def record(
    experiment: str,
    model: str,
    term: str,
    prompt_id: str,
    condition: str,
    metrics: dict,
    *,
    task: str = "generation",
    revision: str | None = None,
    heads=(),
    control_group: str | None = None,
    **extra,
) -> dict:
    prompt_key = f"{term}/{prompt_id}"
    return {
        "schema": SCHEMA,
        "experiment": experiment,
        "key": record_key(experiment, model, revision, prompt_key, condition),
        "model": model,
        "revision": revision,
        "family": "llama",
        "prompt_key": prompt_key,
        "prompt_id": prompt_id,
        "term": term,
        "task": task,
        "control_group": control_group,
        "condition": condition,
        "heads": [list(h) for h in heads],
        "ablation": "zero" if heads else None,
        "metrics": metrics,
        "provenance": provenance(model, revision),
        **extra,
    }


def binding_metrics(rng: np.random.Generator, shift: float = 0.0) -> dict:
    bsi = rng.uniform(0, 0.3, size=(N_LAYERS, N_HEADS))
    bsi[1, 2] += 0.5 + shift
    eb = bsi.max(1) - bsi.mean(1)
    best = int(eb.argmax())
    return {
        "eb_star": float(eb[best]),
        "eb_star_norm": float(eb[best] / (1 - 1 / N_HEADS)),
        "best_layer": best,
        "entropy": 1.0,
        "n_span": 2,
        "span": [3, 4],
        "span_tokens": ["screen", " reader"],
        "flags": [],
        "skipped": None,
        "eb": eb.tolist(),
        "bsi": bsi.tolist(),
        "n_layers": N_LAYERS,
        "n_heads": N_HEADS,
    }


def prompts():
    for term in TERMS:
        for i in range(PROMPTS_PER_TERM):
            yield term, f"p{i}"


def estimate(value: float, half: float = 0.05, n: int = 6, method: str = "bootstrap-bca") -> dict:
    return {
        "value": value,
        "low": value - half,
        "high": value + half,
        "confidence": 0.95,
        "method": method,
        "n": n,
    }


def hypothesis_test(statistic: float, p: float, n: int = 6, method: str = "permutation") -> dict:
    return {
        "statistic": statistic,
        "p_value": p,
        "method": method,
        "alternative": "greater",
        "n": n,
    }


def write_records(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), "utf-8")


def study(name: str) -> ModuleType:
    """The synthetic-results module of one study (``tests/figures/studies/<name>.py``)."""
    return importlib.import_module(f"{studies.__name__}.{name}")


# every study with a synthetic-results module, found on disk
ALL = tuple(sorted(m.name for m in pkgutil.iter_modules(studies.__path__)))


def write_results(root: Path, experiments=ALL) -> Path:
    """Write records.jsonl and summary.json for each named experiment under ``root``."""
    for name in experiments:
        records, summary = study(name).synthetic_results()
        write_records(root / name / "records.jsonl", records)
        write_summary(root / name / "summary.json", summary)
    return root


def expected_figures() -> set[str]:
    """The figure names ``make_figures`` should draw from ``write_results(root)``."""
    return set().union(*(study(name).expected_figures() for name in ALL))
