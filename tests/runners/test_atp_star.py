"""AtP* finds a head whose effect goes through a saturated softmax; linearised AtP misses it.

Constructed case: in the linearised tiny Llama (logits affine in the last layer's head
outputs, ``test_attribution_patching.linearised``), one last-layer head's queries are
scaled 200x, so its softmax is saturated (each query row puts nearly all its weight on
one key). `PatternPatch` makes the head attend as on a source text whose last row picks
another key. The exact effect comes from an independent HF attention function that
swaps in the source's probabilities for that head. With the metric linear in the head's
output, AtP* (pattern recomputed) must equal it within rounding; the linearised softmax
sees ``dA/ds = A (1 - A)``, about zero, and misses the head.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.interventions import Patch, PatternPatch, ops
from bindscope.runners.attribution_patching import (
    LogitDifference,
    all_heads,
    head_attribution_patching,
)
from tests.conftest import PROMPTS
from tests.reference import prob_zero
from tests.runners.test_attribution_patching import A, B, linearised
from tests.tolerance import logit_bound, rounding_bound

SCALE = 200.0


@pytest.fixture(scope="module")
def saturated(sp_tokenizer):
    model = linearised("llama", sp_tokenizer)
    layer, head, hd = model.n_layers - 1, 2, model.head_dim
    q_proj = model.hf.model.layers[layer].self_attn.q_proj
    with torch.no_grad():
        q_proj.weight[head * hd : (head + 1) * hd] *= SCALE
    return model, (layer, head)


def _probs(model, ids):
    with torch.no_grad():
        out = model.hf(torch.tensor([ids]), output_attentions=True)
    return out.attentions, out.logits[0, -1]


def _case(model, where):
    """The clean text and a same-length source whose last row picks another key there."""
    layer, head = where
    text = model.tokenize(PROMPTS[2])
    clean = _probs(model, text)[0][layer][0, head, -1]
    for token in range(30, 90):
        source = list(text)
        source[3] = token
        probs = _probs(model, source)[0][layer][0, head]
        if probs[-1].argmax() != clean.argmax():
            return text, source, probs
    raise AssertionError("no source moves the saturated head's last row (construction failed)")


def test_the_planted_head_is_saturated(saturated):
    model, (layer, head) = saturated
    probs = _probs(model, model.tokenize(PROMPTS[2]))[0][layer][0, head]
    assert float(probs[-1].max()) > 1 - 1e-6  # the row the last position's logits read


def test_atp_star_finds_the_saturated_head_and_linear_atp_misses_it(saturated):
    model, where = saturated
    text, source, source_probs = _case(model, where)
    metric = LogitDifference(A, B)
    spec = PatternPatch(all_heads(model), [source])
    star = head_attribution_patching(model, [text], metric, intervene=spec)[0]
    linear = head_attribution_patching(model, [text], metric, intervene=spec, method="atp")[0]
    _, clean_logits = _probs(model, text)
    with prob_zero(model.hf, [], replace={where: source_probs}):
        _, patched_logits = _probs(model, text)
    exact = float((patched_logits[A] - patched_logits[B]) - (clean_logits[A] - clean_logits[B]))
    # rounding of the exact effect (four logits, two passes) and of the estimate's sum
    bound = 4 * logit_bound(model, [PROMPTS[2]]) + rounding_bound(
        magnitude=abs(exact), width=len(text) ** 2, depth=2
    )
    last = star[model.n_layers - 1]
    print(
        f"\nexact {exact:.4f}  AtP* {float(star[where]):.4f}  AtP {float(linear[where]):.3e}  "
        f"bound {bound:.2e}  AtP* rank {int((last.abs() > abs(star[where])).sum())}"
    )
    assert abs(exact) > 100 * bound  # the head matters
    assert abs(float(star[where]) - exact) <= bound  # AtP* gets it
    assert abs(float(linear[where])) < abs(exact) / 100  # linearised AtP misses it
    assert int(last.argmax() if exact > 0 else last.argmin()) == where[1]


def test_a_pattern_patch_runs_exactly_as_a_patch_of_the_pattern(saturated):
    """A spec among the others: ``logits(intervene=PatternPatch(...))`` runs it, as ``Patch``."""
    model, where = saturated
    text, source, source_probs = _case(model, where)
    with model.eager():
        got = model.logits([text], intervene=PatternPatch([where], [source]))[0]
        want = model.logits([text], intervene=Patch([where], [source], site="pattern"))[0]
    assert torch.equal(got, want)  # one edit, one plan: bit-identical
    with prob_zero(model.hf, [], replace={where: source_probs}):
        _, reference = _probs(model, text)
    # the exact run against an independent forward swapping in the source's probabilities
    torch.testing.assert_close(got[-1], reference, rtol=0, atol=logit_bound(model, [PROMPTS[2]]))
    assert (got[-1] - model.logits([text])[0][-1]).abs().max() > 100 * logit_bound(
        model, [PROMPTS[2]]
    )


def test_pattern_estimate_on_a_single_saturated_row():
    """The maths alone: one row, scores 30 apart, metric linear in the pattern."""
    probs = torch.tensor([[[[1.0, 0.0], [1 - 1e-13, 1e-13]]]])  # [b, H, q, k]
    new = torch.tensor([[[[1.0, 0.0], [1e-13, 1 - 1e-13]]]])
    grad = torch.tensor([[[[0.0, 0.0], [0.0, 2.0]]]])  # dm/dA: m = 2 * A[1, 1]
    rows = torch.tensor([[[False, True]]])
    star = ops.pattern_estimate(probs, grad, new, rows, "atp*")
    linear = ops.pattern_estimate(probs, grad, new, rows, "atp")
    assert torch.allclose(star, torch.tensor([[2.0]]))  # 2 * (1 - 2e-13)
    assert float(linear.abs()) < 1e-10
