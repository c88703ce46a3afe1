"""A circuit (a set of edges) and how much of the behaviour it keeps."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import spearmanr

from bindscope.errors import InputError, whole_number
from bindscope.interventions.graph import edge_mask
from bindscope.interventions.means import edge_means
from bindscope.metrics.stats.estimates import Estimate, bootstrap_statistic
from bindscope.protocols import LanguageModel
from bindscope.runners.edges import (
    Edge,
    EdgeMetric,
    EdgeScores,
    check_count,
    path_patching,
    path_patching_each,
)

__all__ = [
    "ABLATIONS",
    "SELECTIONS",
    "Faithfulness",
    "Verification",
    "faithfulness",
    "greedy_mask",
    "stability",
    "top_mask",
    "verify",
]


@dataclass(frozen=True)
class Faithfulness:
    """How much of the metric a circuit keeps (docs/circuits.md)."""

    n_edges: int
    share: Estimate  # (patched - ablated) / (clean - ablated) of the pair means
    patched: np.ndarray  # [pairs] every edge outside the circuit patched
    null: np.ndarray  # the share of each random circuit of the same size
    ablated: np.ndarray  # [pairs] every edge patched: the share's 0
    ablation: str = "corrupted"


ABLATIONS = ("corrupted", "mean")


@dataclass(frozen=True)
class Verification:
    """Estimated against exact edge effects (means over pairs) of the verified edges."""

    edges: list[Edge]
    estimate: np.ndarray  # [edges] the mean score
    exact: np.ndarray  # [edges] the mean patched metric, each edge alone, minus the clean one
    spearman: float  # nan under 3 edges
    recall_at_k: float
    k: int


def _share(
    patched: np.ndarray, clean: np.ndarray, corrupted: np.ndarray, axis: int = -1
) -> np.ndarray:
    gap = np.mean(clean, axis=axis) - np.mean(corrupted, axis=axis)
    return (np.mean(patched, axis=axis) - np.mean(corrupted, axis=axis)) / gap


def top_mask(scores: EdgeScores, n: int) -> np.ndarray:
    """``[S, R]`` bool mask of the ``n`` edges of largest mean |score| (`EdgeScores.top`)."""
    return scores.graph.index(scores.top(n))


def greedy_mask(scores: EdgeScores, n: int) -> np.ndarray:
    """``[S, R]`` mask of ``n`` edges grown back from the logits, as EAP-IG's greedy search."""
    graph = scores.graph
    check_count(n, "n", 0, graph)
    key = np.abs(scores.mean())
    mask = np.zeros_like(graph.valid)
    # one heap entry per open receiver: its best sender not taken yet (a k-way merge of the
    # receivers' senders sorted by |score|, ties by sender index, as one heap of all would)
    heap: list[tuple[float, int, int]] = []
    order: dict[int, tuple[np.ndarray, int]] = {}  # receiver -> (its senders, best next)

    def push(j: int, at: int) -> None:
        senders = order[j][0]
        order[j] = (senders, at)
        if at < len(senders):
            heapq.heappush(heap, (-float(key[senders[at], j]), int(senders[at]), j))

    def open_receiver(j: int) -> None:
        if j not in order:  # a key/value group is the input of several heads
            senders = np.flatnonzero(graph.valid[:, j])
            order[j] = (senders[np.argsort(-key[senders, j], kind="stable")], 0)
            push(j, 0)

    open_receiver(graph.receivers.index("logits"))
    reached: set[int] = set()
    taken = 0
    while heap and taken < n:
        _, i, j = heapq.heappop(heap)
        mask[i, j] = True
        taken += 1
        push(j, order[j][1] + 1)
        if i not in reached:
            reached.add(i)
            for receiver in graph.inputs_of.get(graph.senders[i], ()):
                open_receiver(receiver)
    return mask


def faithfulness(
    model: LanguageModel,
    clean: Sequence,
    corrupted: Sequence,
    metric: EdgeMetric,
    scores: EdgeScores,
    keep: np.ndarray,
    *,
    n_random: int = 3,
    seed: int = 0,
    batch_size: int = 4,
    n_resamples: int = 2000,
    ablation: str = "corrupted",
) -> Faithfulness:
    """The share of the metric ``keep`` (an ``[S, R]`` mask of edges, or edge names) keeps."""
    if ablation not in ABLATIONS:
        raise InputError(f"ablation={ablation!r}: choose one of {', '.join(ABLATIONS)}")
    if len(scores.clean) < 2:
        raise InputError(
            f"{model.name}: faithfulness's interval resamples pairs, and the scores hold "
            f"{len(scores.clean)}; score at least 2 clean/corrupted pairs"
        )
    _check_draws(n_resamples, seed)
    whole_number(n_random, "n_random", "e.g. n_random=3 (0: no random circuits)", least=0)
    graph = scores.graph
    keep = edge_mask(graph, keep)
    valid = graph.valid
    means = edge_means(model, corrupted, batch_size=batch_size) if ablation == "mean" else None

    def run(mask: np.ndarray) -> np.ndarray:
        return path_patching(
            model, clean, corrupted, metric, valid & ~mask, means=means, batch_size=batch_size
        )

    ablated = scores.corrupted if means is None else run(np.zeros_like(valid))
    _check_gap(model, scores.clean, ablated, ablation)
    patched = run(keep)
    share = bootstrap_statistic(
        (patched, scores.clean, ablated), _share, paired=True, n_resamples=n_resamples, seed=seed
    )
    n_edges = int(keep.sum())
    null = [
        float(_share(run(mask), scores.clean, ablated))
        for mask in _random_masks(valid, n_edges, n_random, seed)
    ]
    return Faithfulness(n_edges, share, patched, np.array(null), np.asarray(ablated), ablation)


def _check_draws(n_resamples: int, seed: int) -> None:
    whole_number(n_resamples, "n_resamples", "e.g. n_resamples=200", least=1)
    whole_number(seed, "seed", "e.g. seed=0", least=0)


def _check_gap(model: LanguageModel, clean: np.ndarray, ablated: np.ndarray, ablation: str) -> None:
    gap = float(np.mean(clean) - np.mean(ablated))
    if not abs(gap) > 1e-6 * max(1.0, float(np.abs(clean).max())):
        raise InputError(
            f"{model.name}: the clean and {ablation}-ablated metrics are equal on average "
            f"({gap:.3g} apart), so there is no difference for a circuit to keep; choose "
            "pairs whose corruption changes the metric"
        )


def _random_masks(valid: np.ndarray, n_edges: int, n_random: int, seed: int):
    rng = np.random.default_rng(seed)
    flat = np.flatnonzero(valid)
    for _ in range(n_random):
        mask = np.zeros_like(valid)
        mask.flat[rng.choice(flat, n_edges, replace=False)] = True
        yield mask


#: How a circuit of ``n`` edges is chosen from the scores (``circuit --selection``).
SELECTIONS: dict[str, Callable[[EdgeScores, int], np.ndarray]] = {
    "top": top_mask,
    "greedy": greedy_mask,
}


def stability(
    scores: EdgeScores,
    n: int,
    *,
    select: Callable[[EdgeScores, int], np.ndarray] = top_mask,
    n_resamples: int = 200,
    seed: int = 0,
) -> float:
    """Mean share of ``select(scores, n)``'s edges selected again from resampled pairs."""
    check_count(n, "n", 1, scores.graph)
    _check_draws(n_resamples, seed)
    full = select(scores, n)
    rng = np.random.default_rng(seed)
    pairs = scores.scores.shape[0]
    kept = []
    for _ in range(n_resamples):
        resampled = replace(scores, scores=scores.scores[rng.integers(0, pairs, pairs)])
        kept.append(int((full & select(resampled, n)).sum()) / int(full.sum()))
    return float(np.mean(kept))


def verify(
    model: LanguageModel,
    clean: Sequence,
    corrupted: Sequence,
    metric: EdgeMetric,
    scores: EdgeScores,
    k: int,
    *,
    batch_size: int = 16,
) -> Verification:
    """Patch each of the top ``2k`` edges (by mean |score|) alone; Spearman and recall@k."""
    check_count(k, "k", 1, scores.graph)
    edges = scores.top(2 * k)
    graph = scores.graph
    estimate = np.array(
        [scores.mean()[graph.senders.index(s), graph.receivers.index(r)] for s, r in edges]
    )
    each = path_patching_each(model, clean, corrupted, metric, edges, batch_size=batch_size)
    exact = np.mean(each - scores.clean, axis=1)
    rho = float(spearmanr(estimate, exact).statistic) if len(edges) > 2 else float("nan")
    k = min(k, len(edges))
    by_exact = set(np.argsort(-np.abs(exact), kind="stable")[:k].tolist())
    recall = len(by_exact & set(range(k))) / k if k else float("nan")
    return Verification(edges, estimate, exact, rho, recall, k)
