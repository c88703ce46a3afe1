"""Synthetic ``patching`` results for the figure tests (records, and the summary drawn from)."""

from __future__ import annotations

import numpy as np

from bindscope.experiments.patching import summarize_patching
from bindscope.figures.style import slug
from tests.figures.synthetic import MODELS, N_HEADS, N_LAYERS, prompts, record

SHOWN = MODELS[:1]  # the models whose figures are drawn


def synthetic_results() -> tuple[list[dict], dict]:
    """The records and summary this study writes under ``patching/``."""
    records = patching_records()
    return records, summarize_patching(records, n_resamples=199)


def expected_figures() -> set[str]:
    """The figures ``make_figures`` draws from them."""
    return {f"patching_{slug(m + '@main')}" for m in SHOWN}


def patching_records(seed: int = 0) -> list[dict]:
    """Patching records: head (2, 1) recovers about 1, the others about 0."""
    rng = np.random.default_rng(seed)
    settings = {"unit": "head", "seed": 0, "limit": None, "pairs": "pairs"}
    out = []
    for model in SHOWN:
        for term, pid in prompts():
            clean, corrupted = -1.0, -3.0
            conditions = {"clean": ([], clean)}
            for layer in range(N_LAYERS):
                for head in range(N_HEADS):
                    share = (1.0 if (layer, head) == (2, 1) else 0.0) + 0.05 * rng.standard_normal()
                    conditions[f"L{layer}.H{head}"] = ([[layer, head]], corrupted + 2.0 * share)
            for name, (heads, value) in conditions.items():
                metrics = {"clean": clean, "corrupted": corrupted, "patched": value}
                rec = record("patching", model, term, pid, name, metrics, task="recognition",
                             heads=heads, patching=settings)  # fmt: skip
                rec["ablation"] = "patch" if heads else None
                rec["provenance"].update(n_layers=N_LAYERS, n_heads=N_HEADS, pairs_skipped=0)
                out.append(rec)
    return out
