"""Synthetic ``sweep`` results for the figure tests (records, and the summary drawn from)."""

from __future__ import annotations

import numpy as np

from bindscope.figures.style import slug
from bindscope.metrics.stats import wilson_ci
from tests.figures.synthetic import (
    MODELS,
    REVISIONS,
    TERMS,
    binding_metrics,
    estimate,
    hypothesis_test,
    prompts,
    record,
)

SHOWN = MODELS[:1]  # the models whose figures are drawn


def synthetic_results() -> tuple[list[dict], dict]:
    """The records and summary this study writes under ``sweep/``."""
    return sweep_records(), sweep_summary()


def expected_figures() -> set[str]:
    """The figures ``make_figures`` draws from them."""
    return {"sweep_leadlag"} | {f"sweep_emergence_{slug(m)}" for m in SHOWN}


def sweep_records() -> list[dict]:
    rng = np.random.default_rng(1)
    out = []
    for revision in REVISIONS:
        for term, pid in prompts():
            metrics = {**binding_metrics(rng), "behaviour": float(rng.uniform())}
            out.append(record("sweep", MODELS[0], term, pid, "clean", metrics, revision=revision))
    return out


def sweep_summary() -> dict:
    t = len(REVISIONS)
    curve = np.linspace(0.1, 0.6, t)
    models = {}
    for m, model in enumerate(SHOWN):
        per_term = {
            term: {
                "eb_star": (curve + 0.05 * i).tolist(),
                "behaviour": (curve**2 + 0.1 * i).tolist(),
            }
            for i, term in enumerate(TERMS)
        }
        per_term[TERMS[-1]]["behaviour"][0] = None  # NaN written as null
        n_lead = {"pearson": 2 + m % 2, "spearman": 2}
        models[model] = {
            "revisions": list(REVISIONS),
            "eb_star": [estimate(v) for v in curve],
            "behaviour": [estimate(v**2) for v in curve],
            "per_term": per_term,
            "leadlag": {
                "n_terms": len(TERMS),
                "per_term": {
                    term: {
                        k: {"forward": 0.5, "backward": 0.2, "lead_diff": 0.3}
                        for k in ("pearson", "spearman")
                    }
                    for term in TERMS
                },
                "n_lead": n_lead,
                "binomial": {
                    k: hypothesis_test(v / len(TERMS), 0.5, len(TERMS), "binomtest")
                    for k, v in n_lead.items()
                },
                "lead_fraction": {k: wilson_ci(v, len(TERMS)).to_dict() for k, v in n_lead.items()},
            },
            "decoupling": {
                "split": 2,
                "n_terms": len(TERMS),
                "n_strict": 1,
                "n_attenuate": 1,
                "mean_early": 0.4,
                "mean_late": -0.1,
                "per_term": {term: {"early": 0.4, "late": -0.1} for term in TERMS},
            },
        }
    return {"experiment": "sweep", "models": models}
