"""Head attribution as identities (no golden numbers), ``model.bsi`` and ``top_heads``."""

from __future__ import annotations

import math

import pytest
import torch

import bindscope
from bindscope.metrics import taxonomy
from bindscope.metrics.attribution import frozen_norm
from bindscope.metrics.ranking import top_heads
from bindscope.runners.attribution import head_attribution, head_contributions
from bindscope.runners.binding import binding
from tests.conftest import PROMPTS, tiny_config
from tests.metrics.test_binding import RECORDS
from tests.reference import o_proj_module
from tests.reference_patching import EPS, logit_atol


def _final_norm(model):
    return getattr(model.nnsight.model, model.family_row.final_norm)._module


def _bias(module):
    bias = getattr(module, "bias", None)
    return torch.zeros(()) if bias is None else bias.detach().double()


def test_heads_sum_to_the_attention_output(tiny):
    """Each layer's head contributions plus the o_proj bias are what the layer adds."""
    text = PROMPTS[2]
    seen = {}
    handles = []
    for layer in range(tiny.n_layers):
        post = tiny.family_row.attention_post_norm
        layer_module = tiny.nnsight.model.layers[layer]._module
        module = getattr(layer_module, post) if post else o_proj_module(tiny.hf, tiny.family, layer)

        def hook(m, args, out, layer=layer):
            seen[layer] = out[0, -1].double()

        handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            tiny.hf(torch.tensor([tiny.tokenize(text)]))
    finally:
        for h in handles:
            h.remove()
    parts = head_contributions(tiny, [text])[0]
    for layer in range(tiny.n_layers):
        bias = 0 if post else _bias(o_proj_module(tiny.hf, tiny.family, layer))
        got = parts.heads[layer].sum(0) + bias
        # float64 sum of float32 terms vs the model's float32 projection: eps x size x H
        atol = 16 * tiny.n_heads * EPS * float(seen[layer].abs().max())
        torch.testing.assert_close(got, seen[layer], rtol=0, atol=atol)
        wrong = parts.heads[layer].roll(1, dims=-1).sum(0) + bias  # misaligned features
        assert (wrong - seen[layer]).abs().max() > 100 * atol


def test_heads_plus_rest_equal_the_logit_with_frozen_scale(tiny):
    texts = PROMPTS
    targets = [5, (7, 9), 11]
    attribution = head_attribution(tiny, texts, targets)
    parts = head_contributions(tiny, texts)
    # the decomposed logit is the LM head's output: before Gemma 2's final soft-capping
    batch = tiny.encode(texts)
    with torch.no_grad(), tiny.nnsight.trace(**batch.inputs):
        head_out = tiny.nnsight.lm_head.output.save()
    logits = [head_out[r, batch.pad(r) :] for r in range(len(texts))]
    norm = _final_norm(tiny)
    unembed = tiny.nnsight.lm_head._module.weight.detach().double()
    lm_bias = _bias(tiny.nnsight.lm_head._module)
    for target, attr, part, logit in zip(targets, attribution, parts, logits):
        a, b = target if isinstance(target, tuple) else (target, None)
        sign = {a: 1.0} if b is None else {a: 1.0, b: -1.0}
        u = sum(w * unembed[t] for t, w in sign.items())
        # what is not a head: embeddings, MLPs, biases; plus the norm's shift and lm_head bias
        rest = part.final - part.heads.sum((0, 1))
        shift = _bias(norm) @ u if _bias(norm).dim() else 0.0
        head_bias = sum(w * lm_bias[t] for t, w in sign.items()) if lm_bias.dim() else 0.0
        total = attr.sum() + frozen_norm(norm, part.final, rest) @ u + shift + head_bias
        expected = logit[-1, a] - (logit[-1, b] if b is not None else 0)
        atol = logit_atol(logit[-1], tiny.n_layers)
        torch.testing.assert_close(total.float(), expected, rtol=0, atol=atol)
        assert attr.shape == (tiny.n_layers, tiny.n_heads)
        assert float(attr.abs().max()) > 100 * atol  # heads matter at this scale


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_one_layer_ablation_moves_logit_by_its_attribution(family, byte_tokenizer):
    """Attention-only, one layer, final norm frozen: ablating a head = minus its attribution."""
    from transformers import AutoModelForCausalLM

    config = tiny_config(family)
    if family == "gpt2":
        config.n_layer = 1
    else:
        config.num_hidden_layers = 1
    torch.manual_seed(1)
    hf = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        if family == "gpt2":
            hf.transformer.h[0].mlp.c_proj.weight.zero_()
            hf.transformer.h[0].mlp.c_proj.bias.zero_()
        else:
            hf.model.layers[0].mlp.down_proj.weight.zero_()
    model = bindscope.load_model(hf, tokenizer=byte_tokenizer)
    text, target = PROMPTS[0], 17
    attribution = head_attribution(model, [text], [target])[0]
    clean_x = head_contributions(model, [text])[0].final
    norm = _final_norm(model)

    def frozen(module, args, out):
        x = args[0].double()
        return (frozen_norm(module, clean_x, x) + _bias(module)).to(out.dtype)

    handle = norm.register_forward_hook(frozen)
    try:
        clean = model.logits([text])[0][-1, target]
        for head in range(model.n_heads):
            ablated = model.logits([text], ablate=[(0, head)])[0][-1, target]
            atol = 16 * 2 * EPS * float(model.logits([text])[0][-1].abs().max())
            torch.testing.assert_close(
                (clean - ablated).double(), attribution[0, head], rtol=0, atol=atol
            )
            other = attribution[0, (head + 1) % model.n_heads]
            assert abs(float(other - attribution[0, head])) > 100 * atol  # wrong head misses
    finally:
        handle.remove()


def test_model_bsi_equals_binding(tiny):
    record = RECORDS[0]
    got = tiny.bsi([record.template, record.template + " aloud"], record.term)
    expected = binding(tiny, [record])[0].bsi
    # same probabilities, BSI is a mean of values <= 1: a few eps per layer
    for value in got:
        torch.testing.assert_close(value, expected, rtol=0, atol=16 * 4 * EPS)


def test_top_heads_orders_and_skips_nan():
    scores = torch.tensor([[0.1, 0.9, float("nan")], [0.5, 0.9, 0.2]])
    assert top_heads(scores, 3) == [(0, 1), (1, 1), (1, 0)]
    assert top_heads([scores, scores], 1) == [(0, 1)]
    assert len(top_heads(scores, 10)) == 5
    assert not math.isnan(float(scores[1, 2]))


def test_one_top_heads_ranks_the_taxonomy_trajectories_too():
    """issue 42: metrics has one ``top_heads``; the taxonomy ranks with it (same tie rule,
    NaN never ranks), keeping its ``[layer, head]`` lists."""
    assert taxonomy.top_heads is top_heads and "top_heads" not in taxonomy.__all__
    score = [[0.5, float("nan"), 0.9], [0.9, 0.2, 0.5]]
    means = [{name: score if name == "binding" else None for name in taxonomy.SCORES}]
    got = taxonomy.emergence(["main"], means, model="m", top_k=4)["trajectories"]["binding"]
    assert got["heads"] == [list(h) for h in top_heads(torch.tensor(score), 4)]
    assert got["heads"] == [[0, 2], [1, 0], [0, 0], [1, 2]]  # ties by layer, then head
