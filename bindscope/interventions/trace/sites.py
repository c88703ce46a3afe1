"""Where a trace body reads and writes: one accessor per site (`site`), in execution order.

`layer_sites` is the one walk over layers and sites that every engine pass shares.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # never runs, here or on the server
    from collections.abc import Iterable, Sequence

    from bindscope.protocols import TraceTarget


def save(value: Any):
    """Mark a value to come back from the trace (``nnsight.save`` without the import)."""
    return value.save()


def by_layer(heads: Iterable[tuple[int, int]]):
    """Group sorted pairs as ``{layer: [heads]}`` in ascending layer order."""
    grouped: dict = {}
    for layer, head in sorted(heads):
        grouped.setdefault(layer, []).append(head)
    return grouped


def site(model: TraceTarget, name: str, layer: int, call: tuple[str, int] | None = None):
    """The tensor at site ``name`` of decoder layer ``layer``, where the family keeps it.

    A call site (q, k, v, scores) is read at the attention call ``call`` (``(label, mask
    index)``, default ``model.knockout_site``).
    """
    where = model.sites[name]
    if where[1] != "call":
        return site_tensor(model.nnsight, layer, where)
    label, index = call or model.knockout_site
    args, kwargs = attention_call(model, layer, label).inputs
    return call_site(model, name, layer, args, kwargs, index)


def call_site(model: TraceTarget, name: str, layer: int, args: tuple, kwargs: dict, index: int):
    """q, k or v as ``[b, s, U, hd]`` views of the attention call's inputs, or the scores.

    k and v are the new positions only (a decoding step's cache holds the earlier ones).
    """
    if name == "scores":  # the module's own scale (GPT-2's eager method takes none)
        given = {**kwargs, "scaling": model.attention_scaling[layer]}
        scores = attention_scores(args[index - 3], args[index - 2], given)
        mask = args[index] if len(args) > index else kwargs.get("attention_mask")
        return masked_scores(scores, mask, kwargs.get("sliding_window"), infinite=True)
    x = args[index - 3 + model.sites[name][2]]  # [b, U, s_k, hd]
    n_q = args[index - 3].shape[-2]
    return x[:, :, x.shape[2] - n_q :].transpose(1, 2)


def attention_module(model: TraceTarget, layer: int):
    """The attention envoy of one layer: the module whose output holds the pattern."""
    return site_module(model.nnsight, layer, model.sites["pattern"][0])


def attention_call(model: TraceTarget, layer: int, label: str):
    """The attention function's call in one layer's attention forward (``.source`` label)."""
    return getattr(attention_module(model, layer).source, label)


def site_module(envoy: Any, layer: int, module: str):
    """The envoy at dotted path ``module`` under decoder layer ``layer`` (``""``: the layer)."""
    found = envoy.model.layers[layer]
    for part in module.split(".") if module else ():
        found = getattr(found, part)
    return found


def site_tensor(envoy: Any, layer: int, where: tuple[str, str, int]):
    """The tensor at ``where = (module, port, index)`` of one layer (a tuple read at ``index``)."""
    module, port, index = where
    found = site_module(envoy, layer, module)
    value = found.input if port == "input" else found.output
    if isinstance(value, (tuple, list)):
        value = value[index]
    return value


def head_view(x: torch.Tensor, n_heads: int, head_dim: int):
    """View an output-projection input ``[b, s, H*hd]`` as ``[b, s, H, hd]``."""
    return x.view(*x.shape[:-1], n_heads, head_dim)


def unit_view(model: TraceTarget, name: str, x: torch.Tensor):
    """A site's tensor as ``[b, s, U, k]``: U heads of head_dim for head_out, else 1 x d.

    pattern and scores ``[b, H, q, k]`` become ``[b, q, H, k]``; mlp_post is d_mlp units of width 1.
    """
    if name == "head_out":
        return head_view(x, model.n_heads, model.head_dim)
    if name in ("pattern", "scores"):
        return x.transpose(1, 2)
    if name in ("q", "k", "v"):
        return x
    if name == "mlp_post":
        return x.unsqueeze(-1)
    return x.view(*x.shape[:-1], 1, x.shape[-1])


def end_aligned(x: torch.Tensor, keep: Sequence[int], width: int):
    """Rows of ``x`` ``[b, W', ...]`` aligned from the end into ``width`` zero-filled positions."""
    out = torch.zeros(x.shape[0], width, *x.shape[2:], dtype=x.dtype, device=x.device)
    for r in range(len(keep)):
        out[r, width - keep[r] :] = x[r, x.shape[1] - keep[r] :]
    return out


def soft_capped(logits: torch.Tensor, cap: float | None):
    """``cap * tanh(logits / cap)``: the final logit soft-capping (Gemma 2); None: none."""
    if not cap:
        return logits
    return torch.tanh(logits / cap) * cap


def final_logits(model: TraceTarget):
    """The logits the causal-LM forward returns: the LM head's output, then soft-capping."""
    return soft_capped(model.nnsight.lm_head.output, model.logit_softcap)


def keep_outputs(model: TraceTarget, n_layers: int, into: Any):
    """Append the outputs ``[b, n, d]`` of the layers below ``n_layers`` to ``into``."""
    layers = model.nnsight.model.layers
    for i in range(n_layers):
        into.append(layers[i].output)
    return into


def start_at(model: TraceTarget, start: int, residual: torch.Tensor | None):
    """Skip the layers below ``start`` (nnsight ``skip``), giving them ``residual`` ``[b, n, d]``.

    ``residual`` is a clean pass's output of layer ``start - 1``: valid when the pass changes
    nothing below ``start``.
    """
    layers = model.nnsight.model.layers
    for i in range(start):
        layers[i].skip(residual)


def knock_out(attn: Any, removed: torch.Tensor, site: Any):
    """Remove attention edges before the softmax by editing the attention call's mask.

    ``removed`` ``[b, H, W, W]`` is True on removed (query, key) edges; ``site`` is
    ``(label, mask_index)``. Returns the call's ``(args, kwargs)``; a decoding step is left alone.
    """
    call, args, kwargs, mask = _call_mask(attn, site, removed.shape[-2:])
    if call is None:
        return args, kwargs
    removed = removed.to(mask.device)
    shape = (removed.shape[0], removed.shape[1], *mask.shape[-2:])
    if mask.dtype == torch.bool:
        new = mask.expand(shape) & ~removed
    else:
        new = mask.expand(shape).masked_fill(removed, float("-inf"))
    return _set_mask(call, args, kwargs, site[1], new)


def patch_patterns(
    attn: Any, where: torch.Tensor, donor: torch.Tensor, site: Any, scaling: float | None
):
    """Give query rows of some heads another batch row's attention pattern, exactly.

    The mask of each patched row becomes ``log(p_donor) - scores``, so the softmax returns
    ``p_donor`` while the values stay the row's own. ``where`` ``[B, H, W]`` bool marks the
    rows, ``donor`` ``[B, H, W]`` long their donor batch row; ``scaling`` is used when the call
    passes none (GPT-2's eager method).
    """
    call, args, kwargs, mask = _call_mask(attn, site, (where.shape[-1], where.shape[-1]))
    if call is None:
        return args, kwargs
    query = args[site[1] - 3]
    given = dict(kwargs)
    if given.get("scaling") is None:  # GPT-2's own eager method scales by its module's
        given["scaling"] = scaling
    scores = attention_scores(query, args[site[1] - 2], given)  # [B, H, W, W], unmasked
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, device=scores.device).masked_fill(~mask, float("-inf"))
    mask = mask.to(scores.dtype).expand(scores.shape)
    probs = torch.nan_to_num((scores + mask).softmax(-1), nan=0.0)  # pad rows: none
    heads = torch.arange(where.shape[1], device=probs.device)[None, :, None]
    rows = torch.arange(where.shape[2], device=probs.device)[None, None, :]
    forced = probs[donor.to(probs.device), heads, rows].log() - scores
    new = torch.where(where.to(scores.device)[..., None], forced, mask)
    return _set_mask(call, args, kwargs, site[1], new.to(query.dtype))


def _call_mask(attn: Any, site: Any, size: Any):
    """The attention call, its inputs and its mask (None at a decoding step)."""
    label, index = site
    call = getattr(attn.source, label)
    args, kwargs = call.inputs
    query, key = args[index - 3], args[index - 2]
    n_q, n_k = query.shape[-2], key.shape[-2]
    if n_q != size[0] or n_k != size[1]:
        return None, args, kwargs, None
    mask = args[index] if len(args) > index else kwargs.get("attention_mask")
    if mask is None:  # causal fast path: build the causal mask it stands for
        mask = masked_scores(query.new_zeros(n_q, n_k), None, None)
    return call, args, kwargs, mask[..., :n_q, :n_k]


def _set_mask(call: Any, args: tuple, kwargs: dict, index: int, new: torch.Tensor):
    """Hand the attention call ``new`` as its mask; its ``(args, kwargs)``."""
    if len(args) > index:
        args = (*args[:index], new, *args[index + 1 :])
    else:
        kwargs = {**kwargs, "attention_mask": new}
    call.inputs = (args, kwargs)
    return args, kwargs


def attention_scores(q: torch.Tensor, k: torch.Tensor, kwargs: dict):
    """Scores ``[b, H, q, k]`` before the mask (soft-capped where the family caps them)."""
    wide = torch.promote_types(q.dtype, torch.float32)
    scaling = kwargs.get("scaling")
    if scaling is None:
        scaling = 1.0 / math.sqrt(q.shape[-1])
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # GQA, same as repeat_kv
    scores = (q.to(wide) @ k.to(wide).transpose(-1, -2)) * scaling  # [b, H, q, k]
    softcap = kwargs.get("softcap")
    if softcap:  # Gemma 2 caps the logits before the mask
        scores = torch.tanh(scores / softcap) * softcap
    return scores


def recompute_probs(args: tuple, kwargs: dict):
    """Probabilities ``[b, H, q, k]`` from the attention call's ``(module, q, k, v, mask, ...)``.

    For attention implementations that return no weights (sdpa, flash).
    """
    scores = attention_scores(args[1], args[2], kwargs)
    mask = args[4] if len(args) > 4 else kwargs.get("attention_mask")
    probs = masked_scores(scores, mask, kwargs.get("sliding_window")).softmax(-1)
    return torch.nan_to_num(probs, nan=0.0)  # fully masked (pad) query rows


def masked_scores(scores: torch.Tensor, mask: Any, window: Any, infinite: bool = False):
    """Scores under the call's mask (None, bool or additive) and sliding window.

    ``infinite``: a masked score is -inf (an additive mask's large negative is not a score).
    """
    n_q, n_k = scores.shape[-2:]
    if mask is None:
        causal = torch.ones(n_q, n_k, dtype=torch.bool, device=scores.device).tril(n_k - n_q)
        scores = scores.masked_fill(~causal, float("-inf"))
    elif mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask[..., :n_q, :n_k], float("-inf"))
    else:
        mask = mask[..., :n_q, :n_k].to(scores.dtype)
        scores = scores + mask
        if infinite:
            scores = scores.masked_fill(mask <= torch.finfo(mask.dtype).min / 2, float("-inf"))
    if window:
        rows = torch.arange(n_q, device=scores.device)[:, None] + (n_k - n_q)
        cols = torch.arange(n_k, device=scores.device)[None, :]
        scores = scores.masked_fill(rows - cols >= window, float("-inf"))
    return scores


def norm_scale(x: torch.Tensor, centred: bool, eps: float):
    """A norm's normaliser ``[b, s, 1]`` (TransformerLens ``hook_scale``), centred for LayerNorm."""
    x = x.to(torch.promote_types(x.dtype, torch.float32))
    if centred:  # a LayerNorm
        x = x - x.mean(-1, keepdim=True)
    return (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()


def layer_filter(layers: Iterable[int] | None, n_layers: int) -> set[int]:
    """The layers a call acts on (``None``: every layer)."""
    return set(range(n_layers)) if layers is None else {int(x) for x in layers}


def layer_sites(model: TraceTarget, layers: Iterable[int] | None = None):
    """``(layer, site)`` in execution order: the one walk over a model's layers and sites.

    nnsight reads sites only in execution order; ``layers`` limits the walk (None: all).
    """
    allowed = layer_filter(layers, model.n_layers)
    for layer in range(model.n_layers):
        if layer in allowed:
            for name in model.sites:
                yield layer, name
