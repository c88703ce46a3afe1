"""Code that runs inside an nnsight trace.

This module imports only ``torch`` and ``math`` so that the same bodies run locally and
on NDIF, whose sandbox allows little else. Everything here takes the nnsight model (the
renamed envoy) and plain numbers or tensors; validation happens before the trace, in
``bindscope.interventions.heads``.
"""

import math

import torch


def attention_module(envoy, layer):
    """The uniform attention envoy of one decoder layer."""
    return envoy.model.layers[layer].self_attn


def head_view(x, n_heads, head_dim):
    """View an output-projection input ``[b, s, H*hd]`` as ``[b, s, H, hd]``."""
    return x.view(*x.shape[:-1], n_heads, head_dim)


def zero_heads(envoy, layer, heads, n_heads, head_dim, keep=None):
    """Zero heads' slices of the output-projection input of ``layer``, in place.

    Args:
        envoy: The renamed nnsight model.
        layer: Decoder layer index.
        heads: Head indices zeroed in every row (ignored when ``keep`` is given).
        n_heads: Query heads per layer.
        head_dim: Width of one head.
        keep: Optional ``[b, H]`` float mask, 0 where a row's head is ablated. Rows whose
            mask is all ones are multiplied by 1.0 and stay bit-identical.
    """
    x = attention_module(envoy, layer).o_proj.input  # [b, s, H*hd]
    view = head_view(x, n_heads, head_dim)  # [b, s, H, hd]
    if keep is None:
        view[..., heads, :] = 0
    else:
        view.mul_(keep.to(view.dtype)[:, None, :, None])


def mean_heads(envoy, layer, heads, n_heads, head_dim, means, replace=None):
    """Replace heads' slices of the output-projection input by their reference means.

    Args:
        means: ``[H, hd]`` mean of every head's slice over a reference set.
        replace: Optional ``[b, H]`` bool mask, True where a row's head is replaced.
    """
    x = attention_module(envoy, layer).o_proj.input  # [b, s, H*hd]
    view = head_view(x, n_heads, head_dim)  # [b, s, H, hd]
    means = means.to(view.dtype)
    if replace is None:
        view[..., heads, :] = means[heads]
    else:
        mixed = torch.where(replace[:, None, :, None], means[None, None], view)
        view.copy_(mixed)


def recompute_probs(args, kwargs):
    """Attention probabilities from the attention function's inputs.

    Used when the attention implementation returns no weights (sdpa, flash). Handles the
    three mask forms transformers passes: None (causal fast path), bool, additive float.

    Args:
        args: Positional inputs of the attention-interface call: (module, q, k, v, mask, ...).
        kwargs: Its keyword inputs (``scaling``, ``attention_mask``, ``sliding_window``).

    Returns:
        ``[b, H, q, k]`` float32 probabilities.
    """
    q, k = args[1], args[2]
    mask = args[4] if len(args) > 4 else kwargs.get("attention_mask")
    scaling = kwargs.get("scaling")
    if scaling is None:
        scaling = 1.0 / math.sqrt(q.shape[-1])
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # GQA, same as repeat_kv
    scores = (q.float() @ k.float().transpose(-1, -2)) * scaling  # [b, H, q, k]
    n_q, n_k = scores.shape[-2:]
    if mask is None:
        causal = torch.ones(n_q, n_k, dtype=torch.bool, device=scores.device).tril(n_k - n_q)
        scores = scores.masked_fill(~causal, float("-inf"))
    elif mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask[..., :n_q, :n_k], float("-inf"))
    else:
        scores = scores + mask[..., :n_q, :n_k].float()
    window = kwargs.get("sliding_window")
    if window:
        rows = torch.arange(n_q, device=scores.device)[:, None] + (n_k - n_q)
        cols = torch.arange(n_k, device=scores.device)[None, :]
        scores = scores.masked_fill(rows - cols >= window, float("-inf"))
    probs = scores.softmax(-1)
    return torch.nan_to_num(probs, nan=0.0)  # fully masked (pad) query rows


def span_pair_bsi(probs, query_index, key_index, pair_weight):
    """Mean attention over each row's within-span (later -> earlier) token pairs.

    Args:
        probs: ``[b, H, n, n]`` probabilities of one layer.
        query_index: ``[b, P]`` long, padded-sequence index of each pair's later token.
        key_index: ``[b, P]`` long, index of each pair's earlier token.
        pair_weight: ``[b, P]`` float, 1/|pairs| for real pairs, 0 for padding pairs.

    Returns:
        ``[b, H]`` float32 BSI per row and head (0 for rows without pairs; the caller
        turns those into NaN outside the trace).
    """
    rows = torch.arange(probs.shape[0], device=probs.device)[:, None]  # [b, 1]
    picked = probs[rows, :, query_index, key_index]  # [b, P, H]
    return (picked.float() * pair_weight[:, :, None].to(picked.device)).sum(1)  # [b, H]


def choice_logprob_sums(logits, target_index, target_ids, target_weight):
    """Sum (weighted) log-probabilities of target tokens at given positions.

    Args:
        logits: ``[b, n, V]``.
        target_index: ``[b, T]`` long, the position whose prediction scores each target.
        target_ids: ``[b, T]`` long, the target token ids.
        target_weight: ``[b, T]`` float, 1/|choice| for real targets, 0 for padding.

    Returns:
        ``[b]`` float32 weighted sums (the mean log-prob per choice token when weights are 1/|c|).
    """
    rows = torch.arange(logits.shape[0], device=logits.device)[:, None]
    picked = logits[rows, target_index].float()  # [b, T, V]
    logp = picked.log_softmax(-1).gather(-1, target_ids[:, :, None]).squeeze(-1)  # [b, T]
    return (logp * target_weight.to(logp.device)).sum(-1)
