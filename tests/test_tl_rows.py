"""README's TransformerLens / nnterp rows that no other test checked on all 13 families, each
against the HF model or tokenizer (issue 44): the cache's entries and accumulated stream, the
dimensions, tokenize, to_str_tokens, generate, the OV circuit and capture(sites="all").
"""

from __future__ import annotations

import contextlib

import torch

from bindscope.model.cache import CACHED_SITES
from tests.conftest import PROMPTS
from tests.interventions.test_sites import site_bound
from tests.model.test_head_weights import bound, record_run
from tests.reference import o_proj_module
from tests.reference_sites import decoder_layers, greedy_reference, site_reference
from tests.tolerance import assert_within, misses

MARGIN = 100  # rounding noise against what a wrong layer changes


def _check_site(tiny, got, refs: dict, site: str, layer: int, wrong_layer: int) -> None:
    """``refs[(site, layer)]``: one text's plain-hook reading of that site."""
    ref = refs[site, layer]
    bound = site_bound(tiny, ref, layer)
    assert_within(got.float(), ref, bound, f"{site} layer {layer}")
    assert misses(got.float(), refs[site, wrong_layer], bound) > MARGIN
    if site == "head_out":  # [n, H, hd]: each head read as its neighbour
        assert misses(got.float().roll(1, dims=1), ref, bound) > MARGIN


def test_cache_entries_and_accumulated_resid_are_what_hooks_read(tiny):
    """``cache[site, layer]`` and ``accumulated_resid()`` (each layer's ``resid_pre``, then the
    last ``resid_post``) of a left-padded batch equal one text's plain hooks; one layer off
    misses by orders of magnitude."""
    last = tiny.n_layers - 1
    texts = PROMPTS[:2]  # two lengths: one row is padded
    for text, cache in zip(texts, tiny.run_with_cache(texts)):
        ids = tiny.tokenize(text)
        layers = range(tiny.n_layers)
        refs = {(s, i): site_reference(tiny, ids, s, i) for s in CACHED_SITES for i in layers}
        accumulated = cache.accumulated_resid().values
        for layer in layers:
            wrong = (layer + 1) % tiny.n_layers
            for site in CACHED_SITES:
                _check_site(tiny, cache[site, layer], refs, site, layer, wrong)
            _check_site(tiny, accumulated[layer], refs, "resid_pre", layer, wrong)
        _check_site(tiny, accumulated[-1], refs, "resid_post", last, last - 1)


def test_dimensions_are_the_hf_modules(tiny):
    o_proj = o_proj_module(tiny.hf, tiny.family, 0)
    width = o_proj.weight.shape[0] if tiny.family == "gpt2" else o_proj.in_features  # Conv1D
    assert tiny.n_layers == len(decoder_layers(tiny.hf, tiny.family))
    assert tiny.n_heads == tiny.hf.config.num_attention_heads
    assert tiny.n_heads * tiny.head_dim == width
    assert tiny.d_model == tiny.hf.get_input_embeddings().embedding_dim


def test_tokenize_and_to_str_tokens_are_the_tokenizers(tiny):
    """``tokenize`` is the tokenizer's own ids (its BOS rule included); the first ``i`` pieces
    of ``to_str_tokens`` join to the decoded first ``i`` tokens."""
    for text in PROMPTS:
        ids = tiny.tokenize(text)
        assert ids == tiny.tokenizer(text)["input_ids"]
        pieces = tiny.to_str_tokens(text)
        assert len(pieces) == len(ids) and pieces == tiny.to_str_tokens(ids)
        for end in range(1, len(ids) + 1):
            assert "".join(pieces[:end]) == tiny.tokenizer.decode(ids[:end]), (text, end)


def test_generate_is_hf_greedy_generation_decoded(tiny):
    """Two prompts left-padded together continue as HF's ``generate`` does each alone."""
    texts = PROMPTS[:2]
    got = tiny.generate(texts, max_new_tokens=5)
    for text, continuation in zip(texts, got):
        new = greedy_reference(tiny, tiny.tokenize(text), 5, contextlib.nullcontext())
        assert continuation == tiny.tokenizer.decode(new, skip_special_tokens=True)
        assert new  # something was generated to compare


def _through_ov(tiny, mixed, layer: int, head: int, w_o):
    """The pattern-mixed input through head ``head``'s OV circuit, plus its value bias."""
    return mixed @ tiny.ov_circuit(layer, head).double() + tiny.b_V[layer, head].double() @ w_o


def test_every_heads_ov_circuit_maps_its_mixed_input_to_its_output(tiny, monkeypatch):
    """``pattern[h] @ x @ ov_circuit(l, h)`` plus the value bias through ``W_O`` is head ``h``'s
    output through ``W_O`` as the model computed it (rows of a pattern sum to one); the
    neighbouring head's circuit misses. ``qk_circuit`` is ``W_Q W_K^T`` of the same head."""
    monkeypatch.setattr(tiny.hf.config, "clip_qkv", None, raising=False)  # OLMo's, not linear
    seen = record_run(tiny, monkeypatch)
    for layer in range(tiny.n_layers):
        z = seen["z"][layer].view(-1, tiny.n_heads, tiny.head_dim)
        for head in range(tiny.n_heads):
            w_o = tiny.W_O[layer, head].double()
            got = z[:, head] @ w_o
            mixed = seen["pattern"][layer][head] @ seen["x"][layer]
            want = _through_ov(tiny, mixed, layer, head, w_o)
            assert_within(want, got, bound(tiny, got), f"OV L{layer}H{head}")
            wrong = _through_ov(tiny, mixed, layer, (head + 1) % tiny.n_heads, w_o)
            assert misses(wrong, got, bound(tiny, got)) > MARGIN
            qk = tiny.qk_circuit(layer, head).double()
            want = tiny.W_Q[layer, head].double() @ tiny.W_K[layer, head].double().T
            assert_within(qk, want, bound(tiny, want), f"QK L{layer}H{head}")


def test_capture_all_is_each_site_captured_alone(tiny):
    """``capture(sites="all")``: every site of every layer and ``ln_final_scale``, each equal
    to that site captured alone (which test_sites and test_tl_sites check against hooks)."""
    every = tiny.capture(PROMPTS[:2], sites="all")
    sites = [*tiny.sites, "ln_final_scale"]
    for site in sites:
        alone = tiny.capture(PROMPTS[:2], sites=[site])
        for found, single in zip(every, alone):
            assert list(found) == sites and list(found[site]) == list(single[site])
            assert all(torch.equal(found[site][k], single[site][k]) for k in single[site]), site
