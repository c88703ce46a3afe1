"""Synthetic ``c5`` results for the figure tests (records, and the summary drawn from)."""

from __future__ import annotations

import numpy as np

from bindscope.experiments.c5 import summarize_c5
from bindscope.figures.style import slug
from tests.figures.synthetic import MODELS, N_RANDOM, binding_metrics, prompts, record

SHOWN = MODELS  # the models whose figures are drawn


def synthetic_results() -> tuple[list[dict], dict]:
    """The records and summary this study writes under ``c5/``."""
    records = c5_records()
    return records, summarize_c5(records, n_resamples=199)


def expected_figures() -> set[str]:
    """The figures ``make_figures`` draws from them."""
    return {"c5_cross_architecture"} | {f"c5_{slug(m + '@main')}" for m in SHOWN}


def c5_records(seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    settings = {
        "k": 2,
        "n_random": N_RANDOM,
        "ablation": "zero",
        "seed": 0,
        "matched_layers": False,
        "ranking_set": "canonical",
        "ranking_sha256": "abc",
    }
    out = []
    for model in SHOWN:
        for term, pid in prompts():
            out.append(
                record("c5-ranking", model, term, pid, "clean", binding_metrics(rng), c5=settings)
            )
        conditions = {"baseline": [], "top": [[1, 2], [0, 0]], "bottom": [[2, 3], [2, 1]]}
        conditions.update({f"random:{i:02d}": [[0, 1], [2, 0]] for i in range(N_RANDOM)})
        for name, heads in conditions.items():
            hurt = {"baseline": 0.0, "top": 0.6, "bottom": 0.1}.get(name, 0.2)
            for term, pid in prompts():
                for task in ("recognition", "generation"):
                    margin = float(rng.normal(0.3 - hurt, 0.3))
                    score = float(margin > 0)
                    # three choices: chance 1/3, drawn as the accuracy panel's line
                    choices = [-1.0, -1.0 - margin, -2.0]
                    metrics = {"score": score, "margin": margin, "choice_scores": choices}
                    if task == "generation":
                        metrics = {"score": float(np.clip(rng.uniform(0.5, 1.0) - hurt, 0, 1))}
                    out.append(
                        record(
                            "c5",
                            model,
                            term,
                            f"{pid}-{task[:3]}",
                            name,
                            metrics,
                            task=task,
                            heads=heads,
                            c5=settings,
                        )
                    )
    return out
