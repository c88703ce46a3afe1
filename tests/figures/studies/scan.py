"""Synthetic ``scan`` results for the figure tests (records, and the summary drawn from)."""

from __future__ import annotations

import numpy as np

from bindscope.experiments.scan import summarize_scan
from bindscope.figures.style import slug
from tests.figures.synthetic import MODELS, N_HEADS, N_LAYERS, binding_metrics, prompts, record

SHOWN = MODELS[:1]  # the models whose figures are drawn


def synthetic_results() -> tuple[list[dict], dict]:
    """The records and summary this study writes under ``scan/``."""
    records = scan_records()
    return records, summarize_scan(records, n_resamples=199)


def expected_figures() -> set[str]:
    """The figures ``make_figures`` draws from them."""
    return {f"scan_{slug(m + '@main')}" for m in SHOWN}


def scan_records(seed: int = 0) -> list[dict]:
    """Scan records (head (1, 2) matters) and the BSI records it is compared with."""
    rng = np.random.default_rng(seed)
    settings = {"ablation": "zero", "unit": "head", "seed": 0, "limit": None}
    out = []
    for model in SHOWN:
        for term, pid in prompts():
            clean = -1.0 + 0.1 * rng.standard_normal()
            conditions = {"clean": ([], clean)}
            for layer in range(N_LAYERS):
                for head in range(N_HEADS):
                    drop = (0.8 if (layer, head) == (1, 2) else 0.0) + 0.05 * rng.standard_normal()
                    conditions[f"L{layer}.H{head}"] = ([[layer, head]], clean - drop)
            for name, (heads, value) in conditions.items():
                metrics = {"logprob": value, "choice_scores": [value, -3.0], "prediction": 0}
                metrics["score"] = int(value > -1.5)
                rec = record("scan", model, term, pid, name, metrics, task="recognition",
                             heads=heads, scan=settings)  # fmt: skip
                rec["provenance"].update(n_layers=N_LAYERS, n_heads=N_HEADS, scan=settings)
                out.append(rec)
            bsi = binding_metrics(rng)
            out.append(record("scan-bsi", model, term, pid, "clean", bsi, task="recognition"))
    return out
