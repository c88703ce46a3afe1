"""Synthetic ``circuit`` results for the figure tests (records, and the summary drawn from)."""

from __future__ import annotations

import numpy as np

from bindscope.experiments.circuit import summary as summarize_circuit
from bindscope.figures.style import slug
from tests.figures.synthetic import MODELS, record

SHOWN = MODELS[:1]  # the models whose figures are drawn


def synthetic_results() -> tuple[list[dict], dict]:
    """The records and summary this study writes under ``circuit/``."""
    records = circuit_records()
    return records, summarize_circuit(records)


def expected_figures() -> set[str]:
    """The figures ``make_figures`` draws from them."""
    return {
        f"{kind}_{slug(m + '@main')}"
        for kind in ("circuit_graph", "circuit_faithfulness")
        for m in SHOWN
    }


def circuit_records(seed: int = 0) -> list[dict]:
    """Circuit records: pairs, the top edges, faithfulness at two sizes, a verification."""
    rng = np.random.default_rng(seed)
    settings = {"task": "ioi", "method": "eap-ig", "steps": 5, "pairs": 4, "edges": [5, 10],
                "selection": "top", "verify": 2, "n_random": 2}  # fmt: skip
    out = []
    for model in SHOWN:
        for i in range(4):
            metrics = {"clean": 2.0 + rng.standard_normal(), "corrupted": 0.1}
            out.append(record("circuit", model, "", f"ioi-{i:04d}", "clean", metrics, task="ioi",
                              circuit=settings))  # fmt: skip
        edges = ["embed->a0.h1<q>", "a0.h1->a2.g0<k>", "m0->m1", "a1.h2->m1", "a2.h3->logits"]
        for rank, edge in enumerate(edges):
            metrics = {"rank": rank, "score": (-1) ** rank / (rank + 1)}
            out.append(record("circuit", model, "", "circuit", f"edge:{edge}", metrics,
                              task="ioi", circuit=settings))  # fmt: skip
        for n, share in ((5, 0.6), (10, 0.8)):
            metrics = {"n_edges": n, "n_total": 60, "share": share, "low": share - 0.1,
                       "high": share + 0.1,
                       "null": [0.0, 0.1], "stability": 0.9}  # fmt: skip
            out.append(record("circuit", model, "", "circuit", f"top:{n}", metrics, task="ioi",
                              circuit=settings))  # fmt: skip
        metrics = {"k": 2, "spearman": 0.8, "recall_at_k": 1.0, "edges": edges[:4],
                   "estimate": [1.0, -0.5, 0.3, -0.2], "exact": [0.9, -0.4, 0.2, -0.3]}  # fmt: skip
        out.append(record("circuit", model, "", "circuit", "verify", metrics, task="ioi",
                          circuit=settings))  # fmt: skip
    return out
