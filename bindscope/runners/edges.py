"""Edges between heads and MLPs: the graph, EAP and EAP-IG scores, exact path patching."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bindscope.batch import check_batch_size, check_texts, token_ids
from bindscope.errors import InputError, whole_number
from bindscope.interventions import ops
from bindscope.interventions.flow_specs import PathPatch
from bindscope.interventions.graph import Edge, EdgeGraph, edge_graph, edge_mask
from bindscope.interventions.means import EdgeMeans
from bindscope.interventions.plan import plan_batch
from bindscope.interventions.resolve import resolve_rows
from bindscope.protocols import LanguageModel
from bindscope.runners.attribution_metrics import Metric, check_metrics, metric_terms
from bindscope.runners.prefix import keeps_logits

__all__ = [
    "METHODS",
    "EdgeGraph",
    "EdgeScores",
    "check_count",
    "edge_attribution",
    "edge_graph",
    "path_patching",
    "path_patching_each",
]

METHODS = ("eap", "eap-ig")
# A metric per pair (one, or a list), or f(logits [b, V] at the last position, rows) -> [b].
EdgeMetric = Metric | Sequence[Metric] | Callable[[torch.Tensor, list[int]], torch.Tensor]


@dataclass(frozen=True)
class EdgeScores:
    """Edge scores of every pair (``steps``: the integration steps, 1 for EAP)."""

    graph: EdgeGraph
    scores: np.ndarray  # [pairs, S, R] float32: the metric's change, the edge alone corrupted
    clean: np.ndarray  # [pairs] the metric on the clean texts
    corrupted: np.ndarray
    method: str
    steps: int

    def mean(self) -> np.ndarray:
        """``[S, R]`` score averaged over pairs."""
        return self.scores.mean(0)

    def top(self, n: int, *, absolute: bool = True) -> list[Edge]:
        """The ``n`` edges of largest mean score (``absolute``: |mean|), all if more."""
        check_count(n, "n", 0, self.graph)
        mean = self.mean()
        key = np.abs(mean) if absolute else -mean
        key = np.where(self.graph.valid, key, -np.inf)
        flat = np.argsort(-key, axis=None, kind="stable")[: min(n, self.graph.n_edges)]
        s, r = np.unravel_index(flat, mean.shape)
        return [(self.graph.senders[i], self.graph.receivers[j]) for i, j in zip(s, r)]


def check_count(n: object, name: str, least: int, graph: EdgeGraph) -> None:
    """Refuse a count of edges (``name``) that is not a whole number >= ``least``."""
    fix = f"pass a number of edges (the graph has {graph.n_edges}; more takes them all)"
    whole_number(n, name, fix, least=least)


def edge_attribution(
    model: LanguageModel,
    clean: Sequence,
    corrupted: Sequence,
    metric: EdgeMetric,
    *,
    method: str = "eap-ig",
    steps: int = 5,
    batch_size: int = 8,
) -> EdgeScores:
    """Score every edge for ``metric`` over equally long clean/corrupted pairs (circuits.md)."""
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    whole_number(steps, "steps", "pass the number of integration steps, e.g. steps=5", least=1)
    steps = 1 if method == "eap" else steps
    pairs = _Pairs(model, clean, corrupted, metric)
    graph = edge_graph(model)
    chunks = list(_chunks(len(pairs), batch_size))
    found = _edge_session(model, _edge_jobs(model, pairs, graph, chunks), steps)

    def joined(parts: list[torch.Tensor]) -> np.ndarray:  # the chunks hold the pairs in order
        return np.concatenate([p.double().cpu().numpy() for p in parts])

    scores = np.where(graph.valid, joined(found.scores), 0.0).astype(np.float32)
    return EdgeScores(graph, scores, joined(found.clean), joined(found.corrupted), method, steps)


def _edge_jobs(
    model: LanguageModel, pairs: _Pairs, graph: EdgeGraph, chunks: list[list[int]]
) -> list[ops.EdgeJob]:
    everything = PathPatch(graph.valid, source=tuple(pairs.corrupted))
    plans = resolve_rows(model, pairs.clean, intervene=everything)
    jobs = []
    for rows in chunks:
        batch, (terms, options) = pairs.clean_batch(rows), pairs.terms(rows)
        path = plan_batch(model, batch, [plans[i] for i in rows]).plan.path
        assert path is not None  # every text patches every edge
        cor_inputs = model.pad(rows, [pairs.corrupted[i] for i in rows]).inputs
        jobs.append(
            ops.EdgeJob(cor_inputs, batch.inputs, batch.attention_mask, terms, path, options)
        )
    return jobs


@dataclass(frozen=True)
class _EdgeSession:
    corrupted: list[torch.Tensor]
    clean: list[torch.Tensor]
    scores: list[torch.Tensor]


def _edge_session(model: LanguageModel, jobs: list[ops.EdgeJob], steps: int) -> _EdgeSession:
    # one request when remote: per batch only the corrupted metric, the first step's (the
    # clean one: alpha = 1) and the last step's scores come back
    env = model.nnsight
    with torch.enable_grad(), env.session(**model.trace_options):
        corrupted, clean, scores = ops.save([]), ops.save([]), ops.save([])
        for job in jobs:
            with env.trace(**job.corrupted_inputs, **job.options):
                cor = ops.edge_sender_outputs(model, {})
                corrupted.append(ops.save(ops.edge_metric(model, job.terms).detach()))
            state = None
            for k in range(steps, 0, -1):  # alpha = 1 first: its pass gives the deltas
                with env.trace(**job.inputs, **job.options):
                    step = ops.edge_attribution_pass(model, job, cor, k / steps, state, k == 1)
                    state = step.state
                    if k == steps:
                        clean.append(ops.save(step.metric))
                    if k == 1:
                        scores.append(ops.save(step.scores))
    return _EdgeSession(corrupted, clean, scores)


def path_patching(
    model: LanguageModel,
    clean: Sequence,
    corrupted: Sequence,
    metric: EdgeMetric,
    edges: Iterable[Edge] | np.ndarray,
    *,
    means: EdgeMeans | None = None,
    batch_size: int = 4,
) -> np.ndarray:
    """The metric ``[pairs]`` with ``edges`` (names or an ``[S, R]`` mask) patched.

    An edge's effect is this minus `EdgeScores.clean`; ``means`` (``edge_means``) patches in
    the senders' mean outputs instead of the corrupted ones.
    """
    pairs = _Pairs(model, clean, corrupted, metric)
    mask = edge_mask(edge_graph(model), edges)
    source = tuple(pairs.corrupted) if means is None else ()
    rows = resolve_rows(model, pairs.clean, intervene=PathPatch(mask, source, means=means))
    return _patched_metric(model, pairs, list(range(len(pairs))), rows, batch_size)


def path_patching_each(
    model: LanguageModel,
    clean: Sequence,
    corrupted: Sequence,
    metric: EdgeMetric,
    edges: Sequence[Edge],
    *,
    batch_size: int = 16,
) -> np.ndarray:
    """``[edges, pairs]``: `path_patching` of each edge alone, the conditions sharing batches."""
    pairs = _Pairs(model, clean, corrupted, metric)
    graph = edge_graph(model)
    masks = [edge_mask(graph, [edge]) for edge in edges]
    owners = [p for p in range(len(pairs)) for _ in masks]
    specs = [PathPatch(m, source=(pairs.corrupted[p],)) for p in range(len(pairs)) for m in masks]
    rows = resolve_rows(model, [pairs.clean[p] for p in owners], per_row=specs)
    out = _patched_metric(model, pairs, owners, rows, batch_size)
    return out.reshape(len(pairs), len(masks)).T


def _patched_metric(
    model: LanguageModel, pairs: _Pairs, owners: list[int], rows: list, batch_size: int
):
    out = np.zeros(len(owners))
    for chunk in _chunks(len(owners), batch_size):
        who = [owners[i] for i in chunk]
        planned = plan_batch(model, pairs.clean_batch(who), [rows[i] for i in chunk])
        terms, options = pairs.terms(who)

        def body(donors: Any, terms: Any = terms):
            return ops.save(ops.edge_metric(model, terms))

        with torch.no_grad():
            found = model.trace_batch(planned, body, **options)
        out[chunk] = found.double().cpu().numpy()
    return out


def _chunks(n: int, size: int):
    check_batch_size(size)
    for start in range(0, n, size):
        yield list(range(start, min(start + size, n)))


class _Pairs:
    """Clean/corrupted pairs checked once: equal lengths, one metric per pair."""

    def __init__(
        self, model: LanguageModel, clean: Sequence, corrupted: Sequence, metric: EdgeMetric
    ) -> None:
        if getattr(model, "remote", False) and callable(metric):  # only our trace code ships
            raise InputError(
                f"{model.name} runs on NDIF, where a metric function of your own cannot run; "
                "pass LogitDifference(correct, wrong) or TargetLogprob(n) (one, or one per pair)"
            )
        self.model = model
        self.clean, self.corrupted = (
            [token_ids(model, t) for t in check_texts(texts, f"{side} text")]
            for side, texts in (("clean", clean), ("corrupted", corrupted))
        )
        if len(self.clean) != len(self.corrupted):
            raise InputError(
                f"{len(self.clean)} clean and {len(self.corrupted)} corrupted texts; give one "
                "corrupted text per clean text"
            )
        for i, (a, c) in enumerate(zip(self.clean, self.corrupted)):
            if len(a) != len(c):
                raise InputError(
                    f"{model.name}: pair #{i} has {len(a)} clean and {len(c)} corrupted tokens; "
                    "edges are compared position by position, so each corrupted text must "
                    "tokenize to its clean text's length"
                )
        self.user = _one_per_row(metric) if callable(metric) else None
        lengths = [len(a) for a in self.clean]
        self.metrics = None if self.user else check_metrics(model, metric, lengths)

    def __len__(self) -> int:
        return len(self.clean)

    def clean_batch(self, rows: list[int]):
        return self.model.pad(rows, [self.clean[i] for i in rows])

    def terms(self, rows: list[int]) -> tuple[dict, dict]:
        """The metric's terms of ``rows`` and the trace options keeping only their logits."""
        terms: dict = {"fn": self.user, "rows": rows, "keep": 1}
        if self.metrics is not None:
            ids = self.clean_batch(rows).input_ids
            found, keep = metric_terms([self.metrics[i] for i in rows], ids)
            terms = {"keep": keep, "terms": found}
        return terms, {"logits_to_keep": terms["keep"]} if keeps_logits(self.model) else {}


def _one_per_row(metric: Callable) -> Callable:
    def checked(logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        out = metric(logits, rows)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (len(rows),):
            shape = (
                f"shape {list(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            )
            name = getattr(metric, "__name__", type(metric).__name__)
            raise InputError(
                f"metric {name} returned {shape} for {len(rows)} rows; return one value per "
                f"row, a tensor of shape [{len(rows)}] (e.g. logits[:, a] - logits[:, b])"
            )
        return out

    return checked
