"""Per-head weights (issue 44) against the model's own computation, with plain torch hooks.

Each layer's attention input ``x`` (a hook on the attention module) times ``W_Q``/``W_K``
must give the query and key the model rotates (recorded at ``apply_rotary_pos_emb``, after
the family's clamp or q/k norm, applied here with the model's own norm modules); GPT-2 has
no rotary, so there the scores must give its probabilities. ``x @ W_V`` mixed by the
probabilities must give each head's output ``z``, and ``z @ W_O + b_O`` the output
projection's output. The attention biases are random during the check, so they count too.
"""

from __future__ import annotations

import contextlib
import importlib

import torch

from tests.conftest import PROMPTS
from tests.reference import o_proj_module
from tests.reference_sites import untouched_copy
from tests.tolerance import misses, rounding_bound

TEXT = PROMPTS[2]


def native_attention(hf, family: str, layer: int):
    """The attention module of one layer, found without nnsight."""
    if family == "gpt2":
        return hf.transformer.h[layer].attn
    if family == "gpt_neox":
        return hf.gpt_neox.layers[layer].attention
    return hf.model.layers[layer].self_attn


@contextlib.contextmanager
def random_biases(hf):
    """Every attention bias random for the duration, restored after."""
    saved = []
    generator = torch.Generator().manual_seed(0)
    for name, param in hf.named_parameters():
        if name.endswith("bias") and ("attn." in name or "attention." in name):
            saved.append((param, param.detach().clone()))
            with torch.no_grad():
                param.copy_(torch.randn(param.shape, generator=generator))
    try:
        yield len(saved)
    finally:
        with torch.no_grad():
            for param, value in saved:
                param.copy_(value)


def record_run(tiny, monkeypatch) -> dict:
    """One forward of ``TEXT``: per layer the attention input, the rotary inputs, z, the
    output projection's output, and the probabilities."""
    seen: dict = {"x": {}, "qk": {}, "z": {}, "o": {}}
    current = [0]
    hf = untouched_copy(tiny.hf)  # the patched rotary must reach it (nnsight's .source)
    modeling = importlib.import_module(type(tiny.hf).__module__)
    rotate = getattr(modeling, "apply_rotary_pos_emb", None)
    if rotate is not None:

        def record(q, k, *args, **kwargs):
            seen["qk"][current[0]] = (q[0].double(), k[0].double())
            return rotate(q, k, *args, **kwargs)

        monkeypatch.setattr(modeling, "apply_rotary_pos_emb", record)
    handles = []
    for layer in range(tiny.n_layers):

        def pre(module, args, kwargs, layer=layer):
            current[0] = layer
            seen["x"][layer] = kwargs.get("hidden_states", args[0] if args else None)[0].double()

        def o_pre(module, args, layer=layer):
            seen["z"][layer] = args[0][0].double()

        def o_out(module, args, out, layer=layer):
            seen["o"][layer] = out[0].double()

        attn = native_attention(hf, tiny.family, layer)
        o_proj = o_proj_module(hf, tiny.family, layer)
        handles.append(attn.register_forward_pre_hook(pre, with_kwargs=True))
        handles += [o_proj.register_forward_pre_hook(o_pre), o_proj.register_forward_hook(o_out)]
    try:
        with torch.no_grad():
            out = hf(torch.tensor([tiny.tokenize(TEXT)]), output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    seen["pattern"] = [a[0].double() for a in out.attentions]  # [H, n, n] per layer
    return seen


def bound(tiny, value: torch.Tensor) -> float:
    """A float32 matmul over the hidden size (and a norm after it) against float64."""
    return rounding_bound(magnitude=float(value.abs().max()), width=tiny.d_model, depth=2)


def projected(tiny, x: torch.Tensor, layer: int, which: str) -> torch.Tensor:
    """``x @ W + b`` per head, ``[H, n, hd]`` (``which`` ``Q``, ``K`` or ``V``)."""
    weight = getattr(tiny, f"W_{which}")[layer].double()
    bias = getattr(tiny, f"b_{which}")[layer].double()
    return torch.einsum("nd,hdk->hnk", x, weight) + bias[:, None]


def kv_rows(tiny, per_query_head: torch.Tensor) -> torch.Tensor:
    """The key/value heads' rows of a per-query-head tensor (each kv head's first reader)."""
    return per_query_head[[tiny.kv_head.index(j) for j in range(tiny.n_kv_heads)]]


def as_the_model_rotates(tiny, layer: int, q: torch.Tensor, k: torch.Tensor):
    """The family's clamp (OLMo) and q/k norm (OLMo 2 over all heads; Qwen 3, Gemma 3 per
    head), applied with the model's own modules."""
    attn = native_attention(tiny.hf, tiny.family, layer)
    clip = getattr(tiny.hf.config, "clip_qkv", None)
    if clip:
        q, k = q.clamp(-clip, clip), k.clamp(-clip, clip)
    if not hasattr(attn, "q_norm"):
        return q, k
    normed = []
    for norm, t in ((attn.q_norm, q), (attn.k_norm, k)):
        if norm.weight.shape[0] == tiny.head_dim:
            normed.append(norm(t.float()).double())
        else:
            flat = t.transpose(0, 1).reshape(t.shape[1], -1).float()  # [n, heads * hd]
            normed.append(norm(flat).double().view(t.shape[1], t.shape[0], -1).transpose(0, 1))
    return normed[0], normed[1]


def test_query_and_key_weights_give_the_models_query_and_key(tiny, monkeypatch):
    with random_biases(tiny.hf):
        seen = record_run(tiny, monkeypatch)
        checked = 0
        for layer in range(tiny.n_layers):
            x = seen["x"][layer]
            q = projected(tiny, x, layer, "Q")
            k = kv_rows(tiny, projected(tiny, x, layer, "K"))
            if tiny.family == "gpt2":  # no rotary: the scores give the probabilities
                _check_gpt2_pattern(tiny, layer, q, k, seen["pattern"][layer])
                checked += 1
                continue
            if layer not in seen["qk"]:  # a NoPE layer (SmolLM3)
                continue
            got_q, got_k = seen["qk"][layer]
            want_q, want_k = as_the_model_rotates(tiny, layer, q, k)
            torch.testing.assert_close(want_q, got_q, rtol=0, atol=bound(tiny, got_q))
            torch.testing.assert_close(want_k, got_k, rtol=0, atol=bound(tiny, got_k))
            wrong_q, _ = as_the_model_rotates(tiny, layer, q.roll(1, 0), k)  # another head's
            assert misses(wrong_q, got_q, bound(tiny, got_q)) > 100
            checked += 1
    assert checked >= 1


def _check_gpt2_pattern(tiny, layer, q, k, pattern):
    attn = native_attention(tiny.hf, tiny.family, layer)
    n = q.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool).tril()

    def probs(q):
        scores = (q @ k.transpose(-1, -2)) * attn.scaling
        return scores.masked_fill(~causal, float("-inf")).softmax(-1)

    # probabilities move by at most a quarter of the scores' rounding
    atol = bound(tiny, q @ k.transpose(-1, -2) * attn.scaling)
    torch.testing.assert_close(probs(q), pattern, rtol=0, atol=atol)
    assert misses(probs(q.roll(1, 0)), pattern, atol) > 100


def test_value_and_output_weights_give_the_heads_outputs(tiny, monkeypatch):
    n_heads, head_dim = tiny.n_heads, tiny.head_dim
    with random_biases(tiny.hf) as n_biases:
        seen = record_run(tiny, monkeypatch)
        for layer in range(tiny.n_layers):
            v = projected(tiny, seen["x"][layer], layer, "V")  # [H, n, hd]
            clip = getattr(tiny.hf.config, "clip_qkv", None)
            v = v.clamp(-clip, clip) if clip else v
            z = seen["z"][layer].view(-1, n_heads, head_dim).transpose(0, 1)  # [H, n, hd]
            mixed = seen["pattern"][layer] @ v
            torch.testing.assert_close(mixed, z, rtol=0, atol=bound(tiny, v))
            if tiny.n_kv_heads > 1:  # a wrong kv head (with one kv head every head reads it)
                wrong_v = v.roll(n_heads // tiny.n_kv_heads, 0)
                assert misses(seen["pattern"][layer] @ wrong_v, z, bound(tiny, v)) > 100
            w_o, b_o = tiny.W_O[layer].double(), tiny.b_O[layer].double()
            out = torch.einsum("hnk,hkd->nd", z, w_o) + b_o
            o = seen["o"][layer]
            torch.testing.assert_close(out, o, rtol=0, atol=bound(tiny, o))
            wrong = torch.einsum("hnk,hkd->nd", z, w_o.roll(1, 0)) + b_o
            assert misses(wrong, o, bound(tiny, o)) > 100
        if n_biases:  # the random biases were read
            assert all(getattr(tiny, f"b_{w}").abs().sum() > 0 for w in "QKV")


def test_circuits_are_the_products_of_one_heads_weights(tiny):
    layer, head = tiny.n_layers - 1, tiny.n_heads - 1
    w_v, w_o = tiny.ov_circuit(layer, head, factored=True)
    assert torch.equal(w_v, tiny.W_V[layer, head]) and torch.equal(w_o, tiny.W_O[layer, head])
    torch.testing.assert_close(tiny.ov_circuit(layer, head), w_v @ w_o)
    w_q, w_k_t = tiny.qk_circuit(layer, head, factored=True)
    assert torch.equal(w_q, tiny.W_Q[layer, head]) and torch.equal(w_k_t, tiny.W_K[layer, head].T)
    torch.testing.assert_close(tiny.qk_circuit(layer, head), w_q @ w_k_t)
