"""Edge counts, masks, metrics and batch sizes the circuit calls refuse (issue 40)."""

from __future__ import annotations

import heapq
from dataclasses import replace

import numpy as np
import pytest
import torch

from bindscope.errors import InputError
from bindscope.runners.attribution_metrics import LogitDifference, TargetLogprob
from bindscope.runners.circuit import faithfulness, greedy_mask, stability, verify
from bindscope.runners.edges import EdgeScores, edge_attribution, edge_graph, path_patching
from bindscope.runners.patching_sweep import patching_sweep
from tests.conftest import build_tiny
from tests.reference_edges import random_pairs


@pytest.fixture(scope="module")
def model(byte_tokenizer):
    return build_tiny("qwen2", byte_tokenizer)


@pytest.fixture(scope="module")
def scores(model):
    """Random scores on the model's graph (0 off the edges, as `edge_attribution` writes)."""
    graph = edge_graph(model)
    rng = np.random.default_rng(0)
    values = rng.normal(size=(4, *graph.valid.shape)).astype(np.float32) * graph.valid
    return EdgeScores(graph, values, np.ones(4), np.zeros(4), "eap", 1)


@pytest.mark.parametrize("n", [-1, -2, 1.5, True, "3"])
def test_top_refuses_what_is_no_count_of_edges(scores, n):
    with pytest.raises(InputError, match=rf"n={n!r} is not a whole number >= 0"):
        scores.top(n)


def test_top_counts_only_edges(scores):
    n_edges = scores.graph.n_edges
    assert scores.top(0) == []
    every = scores.top(n_edges + 5)  # more than there are: all of them, each an edge
    assert len(every) == n_edges and scores.graph.index(every).sum() == n_edges


@pytest.mark.parametrize("n", [0, -2, 2.0])
def test_stability_refuses_what_is_no_circuit_size(scores, n):
    with pytest.raises(InputError, match=rf"n={n!r} is not a whole number >= 1"):
        stability(scores, n)


def test_faithfulness_refuses_a_mask_marking_non_edges(model, scores):
    clean, corrupted = random_pairs(model)
    metric = LogitDifference(5, 7)
    everything = np.ones_like(scores.graph.valid)  # every sender x receiver, edges or not
    assert everything.sum() > scores.graph.n_edges
    n_wrong = everything.sum() - scores.graph.n_edges
    with pytest.raises(InputError, match=f"marks {n_wrong} sender x receiver pair.s. that are not"):
        faithfulness(model, clean, corrupted, metric, scores, everything, n_random=0)
    with pytest.raises(InputError, match="bool"):
        faithfulness(model, clean, corrupted, metric, scores, everything[:, :-1], n_random=0)


def test_verify_refuses_k_below_one(model, scores):
    clean, corrupted = random_pairs(model)
    with pytest.raises(InputError, match=r"k=0 is not a whole number >= 1; pass a number of edges"):
        verify(model, clean, corrupted, LogitDifference(5, 7), scores, 0)


@pytest.mark.parametrize(
    ("metric", "said"),
    [
        (lambda logits, rows: logits[:, 5].sum(), "shape \\[\\]"),  # a scalar
        (lambda logits, rows: logits[:, 5:6], "shape \\[2, 1\\]"),
        (lambda logits, rows: [0.0] * len(rows), "list"),
    ],
)
def test_a_user_metric_must_give_one_value_per_row(model, metric, said):
    clean, corrupted = random_pairs(model)  # two pairs, one batch
    for call in (
        lambda: edge_attribution(model, clean, corrupted, metric, method="eap"),
        lambda: path_patching(model, clean, corrupted, metric, []),
    ):
        with pytest.raises(InputError, match=f"returned {said} for 2 rows; return one value"):
            call()


def test_a_user_metric_of_one_value_per_row_runs(model):
    clean, corrupted = random_pairs(model)
    found = path_patching(model, clean, corrupted, lambda logits, rows: logits[:, 5], [])
    assert found.shape == (2,)


@pytest.mark.parametrize("n", [1.5, 0, -1, True])
def test_target_logprob_needs_a_whole_number_of_tokens(n):
    with pytest.raises(InputError, match=rf"n_target={n!r} is not a whole number >= 1"):
        TargetLogprob(n)


@pytest.mark.parametrize(("size", "said"), [(0, "0 is not a whole"), ("4", "'4' is not a whole")])
def test_patching_sweep_checks_the_batch_size_first(model, size, said):
    def metric(logits: torch.Tensor) -> float:
        return float(logits[0, 0])

    text = model.tokenize("hello there")
    with pytest.raises(InputError, match=f"batch_size=.*{said}"):
        patching_sweep(model, text, text, sites="resid_pre", metric=metric, batch_size=size,
                       progress=True)  # fmt: skip


def _reference_greedy(scores: EdgeScores, n: int) -> np.ndarray:
    """Greedy growth with one heap of every open receiver's edges (no lazy merge)."""
    graph, key = scores.graph, np.abs(scores.mean())
    inputs, mask, heap, reached = graph.inputs_of, np.zeros_like(graph.valid), [], set()

    def open_receiver(j):
        for i in np.flatnonzero(graph.valid[:, j]):
            heapq.heappush(heap, (-float(key[i, j]), int(i), j))

    open_receiver(graph.receivers.index("logits"))
    while heap and mask.sum() < n:
        _, i, j = heapq.heappop(heap)
        if not mask[i, j]:
            mask[i, j] = True
            if i not in reached:
                reached.add(i)
                for receiver in inputs.get(graph.senders[i], ()):
                    open_receiver(receiver)
    return mask


@pytest.mark.parametrize("decimals", [None, 0])  # 0: many tied |scores|
def test_greedy_mask_equals_growing_from_one_heap_of_every_edge(scores, decimals):
    """Stability runs greedy_mask once per resample, so it merges each receiver's sorted
    senders lazily; the circuit must be the one a heap of every open edge gives."""
    if decimals is not None:
        scores = replace(scores, scores=np.round(scores.scores, decimals))
    for n in (0, 1, 5, 40, scores.graph.n_edges + 1):
        assert np.array_equal(greedy_mask(scores, n), _reference_greedy(scores, n)), n
