"""Edges through the real NDIF server equal a local run, on both embedded models.

`edge_attribution` runs in one session (one request); exact path patching and a circuit's
faithfulness travel as the engine's `PathPatch`. Gradients start at layer 0's input on the
server (frozen weights) and at the weights locally: the same derivatives by other backward
kernels, so the scores agree within ``gradient_bound``; the forward-only results are the
same operations in the same order, bit for bit (as tests/remote/live/test_calls.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bindscope.prompts.tasks import answer_ids, task_pairs
from bindscope.runners.attribution_metrics import LogitDifference
from bindscope.runners.circuit import faithfulness, top_mask
from bindscope.runners.edges import edge_attribution, path_patching
from tests.tolerance import assert_within, gradient_bound

pytestmark = pytest.mark.ndif_live


def _pairs(model, n=4):
    pairs = task_pairs("ioi", n, model.tokenizer)
    metric = [LogitDifference(*answer_ids(p, model.tokenizer)) for p in pairs]
    return [p.clean for p in pairs], [p.corrupted for p in pairs], metric


def test_edge_scores_and_circuits_equal_local(twins):
    local, far = twins
    clean, corrupted, metric = _pairs(local)
    got = edge_attribution(far, clean, corrupted, metric, method="eap-ig", steps=2)
    ref = edge_attribution(local, clean, corrupted, metric, method="eap-ig", steps=2)
    scores = torch.from_numpy(ref.scores)
    assert_within(torch.from_numpy(got.scores), scores, gradient_bound(local, scores), "scores")
    assert np.array_equal(got.clean, ref.clean) and np.array_equal(got.corrupted, ref.corrupted)
    edges = ref.top(5)
    assert np.array_equal(
        path_patching(far, clean, corrupted, metric, edges),
        path_patching(local, clean, corrupted, metric, edges),
    )
    keep = top_mask(ref, 20)
    for ablation in ("corrupted", "mean"):
        a = faithfulness(far, clean, corrupted, metric, ref, keep, n_random=0, ablation=ablation)
        b = faithfulness(local, clean, corrupted, metric, ref, keep, n_random=0, ablation=ablation)
        assert np.array_equal(a.patched, b.patched), ablation
