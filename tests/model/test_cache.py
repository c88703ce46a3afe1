"""``run_with_cache``'s decompositions (issue 44) as exact identities, on all 13 families.

Plain torch hooks on the native modules give the final norm's input and output, the LM
head's output (before Gemma 2's soft-cap) and each layer's head outputs and attention
output. The parts must sum to the final norm's input; the final norm applied to them must
sum to its output less its bias; their direct logit attributions to the LM head's output
less the final norm's bias through the unembedding (the LM head has no bias in any family).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from bindscope.errors import InputError
from tests.conftest import PROMPTS
from tests.reference import o_proj_module
from tests.reference_sites import hooked
from tests.tolerance import misses, rounding_bound

TEXT = PROMPTS[2]


FINAL_NORM = {"gpt2": "transformer.ln_f", "gpt_neox": "gpt_neox.final_layer_norm"}


def reference_run(tiny) -> dict:
    """The final norm's input and output and the LM head's output, by plain hooks."""
    seen = {}
    norm = tiny.hf.get_submodule(FINAL_NORM.get(tiny.family, "model.norm"))
    lm_head = tiny.hf.get_output_embeddings()
    with contextlib.ExitStack() as stack, torch.no_grad():
        for module, keys in ((norm, ("x", "normed")), (lm_head, (None, "logits"))):
            hook = module.register_forward_hook(
                lambda m, a, out, keys=keys: seen.update(
                    {k: v[0].double() for k, v in zip(keys, (a[0], out)) if k}
                )
            )
            stack.callback(hook.remove)
        tiny.hf(torch.tensor([tiny.tokenize(TEXT)]))
    bias = getattr(norm, "bias", None)
    zeros = torch.zeros(tiny.d_model, dtype=torch.float64)
    seen["norm_bias"] = zeros if bias is None else bias.detach().double()
    return seen


def bound(tiny, magnitude: float, depth: int) -> float:
    """float32 sums of ``depth`` layers' parts against their float64 recomputation."""
    return rounding_bound(magnitude=magnitude, width=tiny.d_model, depth=depth)


@pytest.fixture(scope="module")
def cached(tiny):
    return tiny.run_with_cache([TEXT])[0]


def test_the_parts_sum_to_the_final_residual_stream(tiny, cached):
    seen = reference_run(tiny)
    parts = cached.decompose_resid()
    assert parts.values.shape[0] == len(parts.labels) == 1 + tiny.n_layers * (tiny.n_heads + 2)
    atol = bound(tiny, float(parts.values.abs().max()), tiny.n_layers + 1)
    torch.testing.assert_close(parts.values.sum(0), seen["x"], rtol=0, atol=atol)
    mlp = [parts.labels.index(f"L{i}_mlp") for i in (0, 1)]
    wrong = parts.values.sum(0) - parts.values[mlp[0]] + parts.values[mlp[1]]  # a wrong layer
    assert misses(wrong, seen["x"], atol) > 100
    # accumulated: each layer's resid_pre is the sum of the parts before it
    accumulated = cached.accumulated_resid()
    assert accumulated.labels[-1] == "final_post" and len(accumulated.labels) == tiny.n_layers + 1
    for layer in range(tiny.n_layers + 1):
        torch.testing.assert_close(
            cached.decompose_resid(layer).values.sum(0),
            accumulated.values[layer],
            rtol=0,
            atol=atol,
        )


def test_the_final_norm_of_the_parts_and_their_logit_attribution(tiny, cached):
    seen = reference_run(tiny)
    normed = cached.apply_ln_to_stack(cached.decompose_resid())
    atol = bound(tiny, float(normed.values.abs().max()), tiny.n_layers + 2)
    torch.testing.assert_close(
        normed.values.sum(0) + seen["norm_bias"], seen["normed"], rtol=0, atol=atol
    )
    ids = tiny.tokenize(TEXT)
    tokens = ids[1:] + ids[:1]  # per position, the next token (the last: any id)
    attrs = cached.logit_attrs(cached.decompose_resid(), tokens)  # [parts, n]
    w_u = tiny.W_U.double()
    want = seen["logits"][torch.arange(len(ids)), tokens] - seen["norm_bias"] @ w_u[:, tokens]
    atol = bound(tiny, float(attrs.abs().max()), tiny.n_layers + 2)
    torch.testing.assert_close(attrs.sum(0), want, rtol=0, atol=atol)
    shifted = cached.logit_attrs(cached.decompose_resid(), ids)  # the wrong token per position
    assert misses(shifted.sum(0), want, atol) > 100
    pair = cached.logit_attrs(cached.decompose_resid(), tokens, incorrect=ids)
    torch.testing.assert_close(pair, attrs - shifted, rtol=0, atol=atol)


def test_each_heads_result_is_its_slice_through_the_output_projection(tiny, cached):
    """Per head, independently: o_proj of the head's slice alone, less o_proj of zeros; after
    a norm on the attention output (OLMo 2, Gemma 2/3) times that norm's scale at this run."""
    layer = tiny.n_layers - 1
    z, attn_out = [], []
    with (
        hooked(tiny.hf, tiny.family, "head_out", layer, into=z),
        hooked(tiny.hf, tiny.family, "attn_out", layer, into=attn_out),
        torch.no_grad(),
    ):
        tiny.hf(torch.tensor([tiny.tokenize(TEXT)]))
    o_proj = o_proj_module(tiny.hf, tiny.family, layer)
    z = z[0][0]
    with torch.no_grad():
        full, zero = o_proj(z).double(), o_proj(torch.zeros_like(z)).double()
    scale = _post_norm_scale(tiny, layer, full, attn_out[0][0].double())
    results = cached.stack_head_results().values[layer * tiny.n_heads : (layer + 1) * tiny.n_heads]
    atol = bound(tiny, float(results.abs().max()), 2)
    for head in range(tiny.n_heads):
        alone = torch.zeros_like(z).view(z.shape[0], tiny.n_heads, -1)
        alone[:, head] = z.view(z.shape[0], tiny.n_heads, -1)[:, head]
        with torch.no_grad():
            want = (o_proj(alone.flatten(1)).double() - zero) * scale
        torch.testing.assert_close(results[head], want, rtol=0, atol=atol)
        other = results[(head + 1) % tiny.n_heads]
        assert misses(other, want, atol) > 100


def _post_norm_scale(tiny, layer, pre, post):
    """``post / pre`` where attention's output goes through an RMSNorm (else 1): per position,
    the least-squares factor of ``pre * weight`` onto ``post``."""
    if torch.equal(pre, post):
        return 1.0
    norm = tiny.hf.model.layers[layer].post_attention_layernorm
    weight = norm.weight.detach().double() + (1.0 if "Gemma" in type(norm).__name__ else 0.0)
    direction = pre * weight
    per_position = (direction * post).sum(-1) / (direction * direction).sum(-1)
    return per_position[:, None] * weight


def test_layer_outside_the_model_is_refused(tiny_layout):
    cache = tiny_layout.run_with_cache(["Alt text"])[0]
    with pytest.raises(InputError, match="outside 0"):
        cache.decompose_resid(tiny_layout.n_layers + 1)
    with pytest.raises(InputError, match="tokens for"):
        cache.logit_attrs(cache.decompose_resid(), [1])


def test_head_logit_attributions_at_the_last_position_are_head_attribution(tiny, cached):
    """The per-position attribution, read at the last position, is `head_attribution`."""
    from bindscope.runners import head_attribution

    target = tiny.tokenize(TEXT)[1]
    (want,) = head_attribution(tiny, [TEXT], [target])  # [L, H]
    got = cached.logit_attrs(cached.stack_head_results(), target)[:, -1]
    atol = bound(tiny, float(got.abs().max()), tiny.n_layers + 2)
    torch.testing.assert_close(got.view(tiny.n_layers, tiny.n_heads), want, rtol=0, atol=atol)
    wrong = got.roll(1).view(tiny.n_layers, tiny.n_heads)  # each head read as its neighbour's
    assert misses(wrong, want, atol) > 100
