"""Independent references for Patch and Knockout: plain torch hooks and an HF attention function."""

from __future__ import annotations

import contextlib

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from tests.reference import o_proj_module

EPS = torch.finfo(torch.float32).eps


def logit_atol(reference: torch.Tensor, n_layers: int) -> float:
    """Float32 noise bound for logits of one text computed in two different batch layouts.

    Batching and padding change the reduction order of every matmul, so each of the ~8
    roundings per layer (q/k/v, scores, softmax, mix, o_proj, MLP) can differ by an ulp of
    the values involved; they are of the logits' size or smaller. 16 roundings per layer
    (twice that count) times (layers + embedding/head) times eps times the largest logit.
    """
    return 16 * (n_layers + 1) * EPS * float(reference.abs().max())


def patch_reference(hf_model, family, heads, n_heads, head_dim, source_ids, target_ids):
    """Logits of ``target_ids`` with ``heads`` taken from a clean run on ``source_ids``.

    Two plain forward passes: the first records o_proj's input with forward-pre-hooks, the
    second writes the heads' slices back in; no nnsight.
    """
    grouped: dict[int, list[int]] = {}
    for layer, head in heads:
        grouped.setdefault(layer, []).append(head)
    recorded: dict[int, torch.Tensor] = {}
    handles = []

    def record(module, args, layer):
        recorded[layer] = args[0].detach().clone()

    def write(module, args, layer):
        x = args[0].clone()
        view = x.view(*x.shape[:-1], n_heads, head_dim)
        source = recorded[layer].view(*x.shape[:-1], n_heads, head_dim)
        view[..., grouped[layer], :] = source[..., grouped[layer], :]
        return (x, *args[1:])

    with torch.no_grad():
        for layer in grouped:
            module = o_proj_module(hf_model, family, layer)
            handles.append(
                module.register_forward_pre_hook(lambda m, a, layer=layer: record(m, a, layer))
            )
        hf_model(torch.tensor([source_ids]))
        for h in handles:
            h.remove()
        handles = [
            o_proj_module(hf_model, family, layer).register_forward_pre_hook(
                lambda m, a, layer=layer: write(m, a, layer)
            )
            for layer in grouped
        ]
        try:
            return hf_model(torch.tensor([target_ids])).logits[0].float()
        finally:
            for h in handles:
                h.remove()


KNOCKOUT: dict[int, list[tuple[int, int, int]]] = {}  # layer -> [(head, query, key)]
PATTERNS: dict[int, torch.Tensor] = {}  # layer -> the last run's weights [b, H, q, k]
ROWS: dict[int, list[tuple[int, int, torch.Tensor]]] = {}  # layer -> [(head, query, row)]


def _knockout_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs
):
    """Eager attention with chosen (head, query, key) scores set to minus infinity, its
    weights kept in ``PATTERNS``, and chosen (head, query) rows of them set from ``ROWS``."""
    n_rep = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(n_rep, dim=1)
    value = value.repeat_interleave(n_rep, dim=1)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = (query @ key.transpose(-1, -2)) * scaling  # [b, H, q, k]
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        scores = scores + attention_mask[..., : key.shape[-2]]
    for head, q, k in KNOCKOUT.get(module.layer_idx, []):
        scores[:, head, q, k] = float("-inf")
    weights = scores.softmax(-1, dtype=torch.float32).to(query.dtype)
    PATTERNS[module.layer_idx] = weights.detach().clone()
    for head, q, row in ROWS.get(module.layer_idx, []):
        weights[:, head, q] = row
    out = (weights @ value).transpose(1, 2).contiguous()
    return out, weights


AttentionInterface.register("bindscope_knockout", _knockout_attention)
AttentionMaskInterface.register("bindscope_knockout", eager_mask)


@contextlib.contextmanager
def knockout_reference(hf_model, heads, edges):
    """Run the HF model with ``edges`` removed from the listed heads' scores."""
    KNOCKOUT.clear()
    for layer, head in heads:
        KNOCKOUT.setdefault(layer, []).extend((head, q, k) for q, k in edges)
    previous = hf_model.config._attn_implementation
    hf_model.set_attn_implementation("bindscope_knockout")
    try:
        yield
    finally:
        hf_model.set_attn_implementation(previous)
        KNOCKOUT.clear()


def pattern_patch_reference(hf_model, source_ids, target_ids, cells):
    """Last-position logits of ``target_ids`` with ``(layer, head, query)`` pattern rows
    taken from a run on ``source_ids``; the values stay the target's own."""
    with knockout_reference(hf_model, [], []), torch.no_grad():
        hf_model(torch.tensor([source_ids]))
        for layer, head, q in cells:
            ROWS.setdefault(layer, []).append((head, q, PATTERNS[layer][0, head, q].clone()))
        try:
            return hf_model(torch.tensor([target_ids])).logits[0, -1:].float()
        finally:
            ROWS.clear()
