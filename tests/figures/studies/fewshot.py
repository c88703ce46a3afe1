"""Synthetic ``fewshot`` results for the figure tests (records, and the summary drawn from)."""

from __future__ import annotations

import numpy as np

from bindscope.figures.style import slug
from tests.figures.synthetic import MODELS, TERMS, estimate, hypothesis_test, prompts, record

SHOWN = MODELS[:1]  # the models whose figures are drawn


def synthetic_results() -> tuple[list[dict], dict]:
    """The records and summary this study writes under ``fewshot/``."""
    return fewshot_records(), fewshot_summary()


def expected_figures() -> set[str]:
    """The figures ``make_figures`` draws from them."""
    return {f"fewshot_{slug(m + '@main')}" for m in SHOWN}


def fewshot_records() -> list[dict]:
    rng = np.random.default_rng(2)
    return [
        record(
            "fewshot",
            model,
            term,
            pid,
            condition,
            {"score": float(rng.uniform()), "text": "...", "hits": [], "contradictions": []},
        )
        for model in SHOWN
        for term, pid in prompts()
        for condition in ("zero_shot", "few_shot", "paraphrase")
    ]


def fewshot_summary() -> dict:
    models = {}
    for m, model in enumerate(SHOWN):
        per_term = {}
        for i, term in enumerate(TERMS):
            zero, few, para = 0.3 + 0.1 * i, 0.5 + 0.1 * i - 0.05 * m, 0.32 + 0.1 * i
            per_term[term] = {
                "zero_shot": zero,
                "few_shot": few,
                "paraphrase": para,
                "delta_few_shot": 100 * (few - zero),  # points, as summarize_fewshot writes
                "delta_paraphrase": 100 * (para - zero),
            }
        models[f"{model}@main"] = {
            "conditions": {"zero_shot": 0.4, "few_shot": 0.58, "paraphrase": 0.42},
            "delta_points": {"few_shot": estimate(18.0, 6.0), "paraphrase": estimate(2.0, 4.0)},
            "test": {
                "few_shot": hypothesis_test(0.18, 0.01),
                "paraphrase": hypothesis_test(0.02, 0.6),
            },
            "per_term": per_term,
        }
    return {"experiment": "fewshot", "models": models}
