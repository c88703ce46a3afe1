"""Synthetic ``controls`` results for the figure tests (records, and the summary drawn from)."""

from __future__ import annotations

import numpy as np

from bindscope.figures.style import slug
from tests.figures.synthetic import (
    MODELS,
    binding_metrics,
    estimate,
    hypothesis_test,
    prompts,
    record,
)

SHOWN = MODELS[:1]  # the models whose figures are drawn

GROUPS = {"nonsense": "V2", "cross_language": "V2", "rare_pairs": "V2", "compositional": "V1"}


def synthetic_results() -> tuple[list[dict], dict]:
    """The records and summary this study writes under ``controls/``."""
    return controls_records(), controls_summary()


def expected_figures() -> set[str]:
    """The figures ``make_figures`` draws from them."""
    return {f"controls_{slug(m + '@main')}" for m in SHOWN}


def controls_records() -> list[dict]:
    rng = np.random.default_rng(3)
    out = [
        record("controls", model, term, pid, "clean", binding_metrics(rng))
        for model in SHOWN
        for term, pid in prompts()
    ]
    for model in SHOWN:
        for group in GROUPS:
            for i in range(2):
                out.append(
                    record(
                        "controls",
                        model,
                        f"{group} item",
                        f"p{i}",
                        "clean",
                        binding_metrics(rng, shift=-0.3),
                        control_group=group,
                    )
                )
    return out


def controls_summary() -> dict:
    models = {}
    for model in SHOWN:
        groups = {}
        for i, (group, family) in enumerate(GROUPS.items()):
            d = 2.5 - 0.7 * i
            groups[group] = {
                "family": family,
                "n": 2,
                "n_span_mean": 2.5,
                "eb_star": estimate(0.3 + 0.1 * i),
                "cohens_d": estimate(d, 0.8, 8),
                "test": hypothesis_test(0.4 - 0.1 * i, 0.001 * (i + 1), 8),
                "p_holm": min(1.0, 0.004 * (i + 1)),
                "matched": (
                    {
                        "n": 4,
                        "cohens_d": estimate(d - 0.3, 1.0, 4),
                        "test": hypothesis_test(0.3, 0.02),
                    }
                    | {"p_holm": 0.05}
                    if i < 3
                    else {"n": 0, "cohens_d": None, "test": None, "p_holm": None}
                ),
            }
        models[f"{model}@main"] = {
            "real": {"n": 6, "eb_star": estimate(0.7), "n_span_mean": 2.4},
            "groups": groups,
        }
    return {"experiment": "controls", "models": models}
