"""The derived test bounds still catch real mistakes: a wrong head, layer or site misses them by
orders of magnitude on every family, so loosening a bound to rounding size weakens no test."""

from __future__ import annotations

import contextlib

import torch

from tests.conftest import PROMPTS
from tests.reference import hf_eager_attentions, o_proj_module, prob_zero
from tests.tolerance import logit_bound, misses, prob_bound

HEADS = [(0, 1), (1, 0), (1, 3), (2, 2)]
MARGIN = 1000  # three orders of magnitude between rounding noise and a real mistake


@contextlib.contextmanager
def zero_after_projection(hf_model, family, heads, head_dim):
    """The wrong site: zero the same slice of the projection's *output* instead of its input."""
    handles = []
    for layer, head in heads:

        def hook(module, args, output, head=head):
            output = output.clone()
            output[..., head * head_dim : (head + 1) * head_dim] = 0
            return output

        handles.append(o_proj_module(hf_model, family, layer).register_forward_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _logits(tiny, text):
    with torch.no_grad():
        return tiny.hf(torch.tensor([tiny.tokenize(text)])).logits[0]


def test_wrong_head_or_site_misses_the_logit_bound_by_orders_of_magnitude(tiny):
    bound = logit_bound(tiny, PROMPTS)
    wrong_head = [(0, 2), *HEADS[1:]]
    for text in PROMPTS[::2]:
        got = tiny.logits([text], ablate=HEADS)[0]
        with prob_zero(tiny.hf, wrong_head):
            other_head = _logits(tiny, text)
        with zero_after_projection(tiny.hf, tiny.family, HEADS, tiny.head_dim):
            other_site = _logits(tiny, text)
        assert misses(got, other_head, bound) > MARGIN
        assert misses(got, other_site, bound) > MARGIN


def test_wrong_layer_or_head_misses_the_probability_bound_by_orders_of_magnitude(tiny):
    bound = prob_bound(tiny)
    text = PROMPTS[0]
    probs = tiny.attention_probs([text])[0]
    ref = hf_eager_attentions(tiny, tiny.tokenize(text))
    assert misses(probs[0], ref[1], bound) > MARGIN  # layer 0 read as layer 1
    assert misses(probs[:, 0], ref[:, 1], bound) > MARGIN  # head 0 read as head 1
