"""Capture, ablation and Knockout honour the sliding-window mask (Gemma 3's tiny config).

The tiny Gemma 3 has window 4 in layers 0 and 2 and full attention in layer 1; the test
prompts run to 14 tokens, so most queries have keys outside their window. The equivalence
tests already compare every family with HF; these add what is special about the window:
the zeros sit where the window puts them, a capture that ignored the window would miss
the bound by orders of magnitude, and Knockout composes with the window instead of
replacing it.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from bindscope.errors import InterventionError
from bindscope.families import attention_windows
from bindscope.interventions import Knockout
from tests.conftest import PROMPTS, build_tiny
from tests.reference import hf_eager_attentions
from tests.reference_patching import knockout_reference, logit_atol
from tests.tolerance import assert_within, prob_bound

LONG = PROMPTS[2]  # 14 tokens with the byte tokenizer, window 4


@pytest.fixture(scope="module")
def gemma3(byte_tokenizer):
    return build_tiny("gemma3", byte_tokenizer)


def _outside(n: int, window: int) -> torch.Tensor:
    """``[n, n]`` True where a causal key lies outside the query's window."""
    q = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    return (k <= q) & (q - k >= window)


@contextlib.contextmanager
def _window(hf, size: int):
    previous = hf.config.sliding_window
    hf.config.sliding_window = size
    for layer in hf.model.layers:
        if layer.self_attn.sliding_window is not None:
            layer.self_attn.sliding_window = size
    try:
        yield
    finally:
        hf.config.sliding_window = previous
        for layer in hf.model.layers:
            if layer.self_attn.sliding_window is not None:
                layer.self_attn.sliding_window = previous


def test_attention_windows_reads_the_layer_types(gemma3):
    assert attention_windows(gemma3.hf.config) == (4, None, 4)
    from tests.conftest import tiny_config

    assert attention_windows(tiny_config("llama")) == (None, None, None)
    assert attention_windows(tiny_config("mistral")) == (4096,) * 3  # every layer


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_capture_puts_zeros_where_the_window_does(gemma3, attn):
    previous = gemma3.attn_implementation
    gemma3.hf.set_attn_implementation(attn)  # sdpa: capture recomputes from q and k
    try:
        probs = gemma3.attention_probs(PROMPTS)  # left-padded batch
    finally:
        gemma3.hf.set_attn_implementation(previous)
    windows = attention_windows(gemma3.hf.config)
    bound = prob_bound(gemma3)
    for text, got in zip(PROMPTS, probs):
        ref = hf_eager_attentions(gemma3, gemma3.tokenize(text))
        assert_within(got, ref, bound, f"{attn}: {text}")
        n = got.shape[-1]
        for layer, window in enumerate(windows):
            outside = _outside(n, window or 4)
            mass = got[layer][:, outside]
            if not outside.any():  # a prompt shorter than the window
                continue
            if window:
                assert mass.abs().max() == 0, f"layer {layer} attends outside its window"
            else:  # the full layer does use those keys: the zeros mean something
                assert mass.sum(-1).max() > 100 * bound


def test_a_capture_that_ignored_the_window_would_miss_by_orders_of_magnitude(gemma3):
    ids = gemma3.tokenize(LONG)
    got = gemma3.attention_probs([LONG])[0]
    with _window(gemma3.hf, 10_000):
        unwindowed = hf_eager_attentions(gemma3, ids)
    assert (got[0] - unwindowed[0]).abs().max() > 1000 * prob_bound(gemma3)


def test_knockout_inside_the_window_equals_the_reference_outside_is_a_no_op(gemma3):
    n = len(gemma3.tokenize(LONG))
    heads = [(0, 1), (2, 3)]  # both sliding layers
    inside = [(n - 1, n - 2), (n - 2, n - 4)]
    outside = [(n - 1, 0), (n - 1, n - 5)]
    clean = gemma3.logits([LONG])[0]
    got = gemma3.logits([LONG], intervene=Knockout(heads, inside + outside))[0]
    with knockout_reference(gemma3.hf, heads, inside + outside), torch.no_grad():
        ref = gemma3.hf(torch.tensor([gemma3.tokenize(LONG)])).logits[0]
    atol = logit_atol(ref, gemma3.n_layers)
    torch.testing.assert_close(got, ref, rtol=0, atol=atol)
    assert (got - clean).abs().max() > 100 * atol  # the inside edges did something
    # edges the window already removed: Knockout adds to the window's mask, so nothing moves
    only_outside = gemma3.logits([LONG], intervene=Knockout(heads, outside))[0]
    torch.testing.assert_close(only_outside, clean, rtol=0, atol=atol)
    probs = gemma3.attention_probs([LONG], intervene=Knockout(heads, outside))[0]
    assert probs[0][:, _outside(n, 4)].abs().max() == 0  # no mass leaks back outside


def test_knockout_of_every_key_in_the_window_is_refused_naming_the_layer(gemma3):
    n = len(gemma3.tokenize(LONG))
    q = n - 1
    in_window = [(q, k) for k in range(q - 3, q + 1)]  # 4 keys: all a sliding layer sees
    words = rf"every key of query {q} \(layer 0 sees the last 4"
    with pytest.raises(InterventionError, match=words):
        gemma3.logits([LONG], intervene=Knockout([(0, 1)], in_window))
    # the full layer still has keys 0..q-4 left, so the same edges are fine there
    probs = gemma3.attention_probs([LONG], intervene=Knockout([(1, 0)], in_window))[0]
    assert probs[1, 0, q, : q - 3].sum() == pytest.approx(1.0, abs=1e-6)
    assert probs[1, 0, q, q - 3 :].abs().max() == 0
