"""Independent reference implementations the tests compare against (plain torch and HF)."""

from __future__ import annotations

import contextlib

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from tests.reference_sites import greedy_reference

PROB_ZERO: dict[int, list[int]] = {}
PROB_SET: dict[tuple[int, int], torch.Tensor] = {}  # (layer, head) -> [n, n] probabilities


def _prob_zero_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs
):
    """Eager attention that zeroes (or sets) chosen heads' probabilities after the softmax."""
    n_rep = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(n_rep, dim=1)
    value = value.repeat_interleave(n_rep, dim=1)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    weights = (query @ key.transpose(-1, -2)) * scaling
    if softcap is not None:  # Gemma 2 caps the scores before the mask
        weights = torch.tanh(weights / softcap) * softcap
    if attention_mask is not None:
        weights = weights + attention_mask[..., : key.shape[-2]]
    weights = weights.softmax(-1, dtype=torch.float32).to(query.dtype)
    heads = PROB_ZERO.get(module.layer_idx, [])
    if heads:
        weights = weights.clone()
        weights[:, heads] = 0
    for (layer, head), probs in PROB_SET.items():
        if layer == module.layer_idx:
            weights = weights.clone()
            weights[:, head] = probs
    out = (weights @ value).transpose(1, 2).contiguous()
    return out, weights


AttentionInterface.register("bindscope_prob_zero", _prob_zero_attention)
AttentionMaskInterface.register("bindscope_prob_zero", eager_mask)


@contextlib.contextmanager
def prob_zero(hf_model, heads, *, replace=None):
    """Run the HF model with the listed heads' probabilities zeroed.

    ``replace`` (``{(layer, head): [n, n]}``) sets those heads' probabilities instead
    (one unpadded text).
    """
    PROB_ZERO.clear()
    PROB_SET.clear()
    PROB_SET.update(replace or {})
    for layer, head in heads:
        PROB_ZERO.setdefault(layer, []).append(head)
    previous = hf_model.config._attn_implementation
    hf_model.set_attn_implementation("bindscope_prob_zero")
    try:
        yield
    finally:
        hf_model.set_attn_implementation(previous)
        PROB_ZERO.clear()
        PROB_SET.clear()


def o_proj_module(hf_model, family: str, layer: int):
    """The native output projection of one layer, found without nnsight."""
    if family == "gpt2":
        return hf_model.transformer.h[layer].attn.c_proj
    if family == "gpt_neox":
        return hf_model.gpt_neox.layers[layer].attention.dense
    return hf_model.model.layers[layer].self_attn.o_proj


@contextlib.contextmanager
def pre_hooks(hf_model, family, heads, n_heads, head_dim, replacement=None):
    """Plain torch forward-pre-hooks that zero (or replace) head slices of o_proj's input."""
    handles = []
    grouped: dict[int, list[int]] = {}
    for layer, head in heads:
        grouped.setdefault(layer, []).append(head)
    for layer, hs in grouped.items():

        def hook(module, args, hs=hs, layer=layer):
            x = args[0].clone()
            view = x.view(*x.shape[:-1], n_heads, head_dim)
            view[..., hs, :] = 0 if replacement is None else replacement[layer][hs]
            return (x, *args[1:])

        handles.append(o_proj_module(hf_model, family, layer).register_forward_pre_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def hf_eager_attentions(model, ids: list[int]) -> torch.Tensor:
    """``output_attentions`` of one unpadded prompt under eager: ``[L, H, n, n]``."""
    with model.eager(), torch.no_grad():
        out = model.hf(torch.tensor([ids]), output_attentions=True)
    found = torch.stack([a[0] for a in out.attentions])
    return found.to(torch.promote_types(found.dtype, torch.float32))  # float64 stays float64


def hf_greedy_under_pre_hooks(model, text: str, heads, max_new_tokens: int) -> list[int]:
    """HF ``generate`` (greedy, one unpadded prompt) with ``heads`` zeroed by pre-hooks.

    Returns the new token ids up to (not including) the first end-of-sequence token.
    """
    hooks = pre_hooks(model.hf, model.family, heads, model.n_heads, model.head_dim)
    return greedy_reference(model, model.tokenize(text), max_new_tokens, hooks)
