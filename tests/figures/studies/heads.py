"""Synthetic ``heads`` results for the figure tests (records, and the summary drawn from)."""

from __future__ import annotations

import numpy as np

from bindscope.experiments.kit.taxonomy_summary import summarize_heads
from bindscope.figures.style import slug
from tests.figures.synthetic import (
    MODELS,
    N_HEADS,
    N_LAYERS,
    REVISIONS,
    binding_metrics,
    prompts,
    record,
)

HEAD_REVISIONS = REVISIONS[:2]  # two checkpoints: a map each and one emergence figure


def synthetic_results() -> tuple[list[dict], dict]:
    """The records and summary this study writes under ``heads/``."""
    records = heads_records()
    return records, summarize_heads(records)


def expected_figures() -> set[str]:
    """The figures ``make_figures`` draws from them."""
    return {f"heads_map_{slug(MODELS[0] + '@' + r)}" for r in HEAD_REVISIONS} | {
        f"heads_emergence_{slug(MODELS[0])}"
    }


def heads_records(seed: int = 0) -> list[dict]:
    """``bindscope sweep --heads`` records of one model at two checkpoints."""
    rng = np.random.default_rng(seed)
    out = []
    model = MODELS[0]
    shape = {"n_layers": N_LAYERS, "n_heads": N_HEADS, "position_0_is_bos": True}
    for r, revision in enumerate(HEAD_REVISIONS):
        for term, pid in prompts():
            metrics = binding_metrics(rng)
            for name in ("sink", "previous_token"):
                metrics[name] = rng.uniform(0, 0.3 + 0.5 * r, size=(N_LAYERS, N_HEADS)).tolist()
            metrics["spread"] = rng.uniform(1, 4, size=(N_LAYERS, N_HEADS)).tolist()
            metrics.update(shape, n_tokens=8)
            out.append(record("heads", model, term, pid, "clean", metrics, revision=revision))
        for i in range(3):
            metrics = {
                name: rng.uniform(0, 0.6, size=(N_LAYERS, N_HEADS)).tolist()
                for name in ("induction", "duplicate_token")
            }
            metrics.update(shape, tokens=[5, 6, 7], length=3, start=1)
            out.append(
                record("heads", model, "repeated", f"{i:03d}", "repeated", metrics,
                       task="induction", revision=revision)
            )  # fmt: skip
    return out
