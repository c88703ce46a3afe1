"""A gradient method whose backward pass never reaches layer 0's input refuses to score.

NDIF's sandbox (ndif 0.1.2, untrusted requests) runs the trace body in another process on
copies of the model's tensors, so the metric's gradient stops at the copies and every
score would read zero. Here the cut is made locally: a forward pre-hook hands layer 1 a
detached copy of its input, so the graph from layer 0's input to the metric is cut while
the weights still give every later tensor a graph of its own (the case a check on
``requires_grad`` alone would miss).
"""

from __future__ import annotations

import pytest

from bindscope.interventions import Zero
from bindscope.runners.attribution_metrics import LogitDifference, TargetLogprob
from bindscope.runners.attribution_patching import head_attribution_patching
from bindscope.runners.edges import edge_attribution
from tests.reference_edges import random_pairs
from tests.reference_sites import decoder_layers


def _cut_at_layer_one(model):
    layer = decoder_layers(model.hf, model.family)[1]

    def detach(module, args, kwargs):
        return (args[0].detach(), *args[1:]) if args else None, {
            k: v.detach() if k == "hidden_states" else v for k, v in kwargs.items()
        }

    return layer.register_forward_pre_hook(detach, with_kwargs=True)


def test_edge_scores_refuse_a_cut_graph(tiny):
    tiny.hf.requires_grad_(True)
    clean, corrupted = random_pairs(tiny)
    metric = LogitDifference(5, 7)
    before = edge_attribution(tiny, clean, corrupted, metric, method="eap").scores
    assert abs(before).max() > 0  # uncut, the scores are there
    handle = _cut_at_layer_one(tiny)
    try:
        with pytest.raises(Exception, match="did not reach layer 0's input"):
            edge_attribution(tiny, clean, corrupted, metric, method="eap-ig", steps=2)
    finally:
        handle.remove()


def test_attribution_patching_refuses_a_cut_graph(tiny):
    tiny.hf.requires_grad_(True)
    texts = ["abcdefgh", "ijklmnop"]
    heads = [(tiny.n_layers - 1, 0)]
    found = head_attribution_patching(tiny, texts, TargetLogprob(1), intervene=Zero(heads))
    assert len(found) == 2
    handle = _cut_at_layer_one(tiny)
    try:
        with pytest.raises(Exception, match="did not reach layer 0's input"):
            head_attribution_patching(tiny, texts, TargetLogprob(1), intervene=Zero(heads))
    finally:
        handle.remove()
