"""Synthetic ``binding`` results for the figure tests (records, and the summary drawn from)."""

from __future__ import annotations

import numpy as np

from bindscope.experiments.binding import summarize_binding
from bindscope.figures.style import slug
from tests.figures.synthetic import MODELS, binding_metrics, prompts, record

SHOWN = MODELS[:1]  # the models whose figures are drawn


def synthetic_results() -> tuple[list[dict], dict]:
    """The records and summary this study writes under ``binding/``."""
    records = binding_records()
    return records, {"experiment": "binding", "models": summarize_binding(records)}


def expected_figures() -> set[str]:
    """The figures ``make_figures`` draws from them."""
    return {f"binding_bsi_{slug(m + '@main')}" for m in SHOWN}


def binding_records(seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        record("binding", model, term, pid, "clean", binding_metrics(rng))
        for model in SHOWN
        for term, pid in prompts()
    ]
