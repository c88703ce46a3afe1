"""The choice pass's layout: each prompt's choices packed into one row under a block mask."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

from bindscope.families import attention_windows
from bindscope.protocols import LanguageModel

# the layer types whose masks are causal with an optional window, as transformers builds them
_CAUSAL_TYPES = {"full_attention", "sliding_attention"}


@functools.cache
def _takes_mask_per_type(model_class: Any) -> bool:
    return "attention_mask, dict)" in inspect.getsource(model_class.forward)


__all__ = ["choice_layout", "packed_inputs"]


def choice_layout(model: LanguageModel) -> str:
    """``packed`` or ``padded``: how this model's choice pass lays out the choices."""
    config = model.hf.config
    types = set(getattr(config, "layer_types", None) or ())
    if model.attn_implementation not in ("eager", "sdpa") or not types <= _CAUSAL_TYPES:
        return "padded"
    if getattr(config, "use_bidirectional_attention", False):
        return "padded"
    mixed = len(set(attention_windows(config))) > 1
    base = getattr(model.hf, "model", None)
    if mixed and (base is None or not _takes_mask_per_type(base.__class__)):
        return "padded"
    return "packed"


def packed_inputs(
    model: LanguageModel, prompt_mask: torch.Tensor, cache: Any, flat: list, n_c: int
) -> dict:
    """Inputs of a packed choice pass, and ``spans`` ``[b*C]``: each choice's first column."""
    sizes = torch.tensor([len(c) - 1 for c in flat]).view(-1, n_c)  # [b, C] tokens run
    spans = (sizes.cumsum(1) - sizes).flatten()  # [b*C] each choice's first column
    b, width = sizes.shape[0], max(int(sizes.sum(1).max()), 1)
    ids = torch.full((b, width), model.tokenizer.pad_token_id, dtype=torch.long)
    offset = torch.zeros(b, width, dtype=torch.long)  # position within its choice
    segment = torch.full((b, width), -1, dtype=torch.long)  # its choice; -1 on padding
    for s, c in enumerate(flat):
        r, at, m = s // n_c, int(spans[s]), len(c) - 1
        ids[r, at : at + m] = torch.tensor(c[:-1], dtype=torch.long)
        offset[r, at : at + m] = torch.arange(m)
        segment[r, at : at + m] = s
    lengths = prompt_mask.sum(1)
    kept = [layer.keys.shape[-2] for layer in cache.layers]  # a sliding layer: its last few
    mask = _block_masks(model, prompt_mask.bool(), kept, offset, segment)
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": lengths[:, None] + offset,
        "spans": spans,
        "real": (segment >= 0).long(),
    }


def _block_masks(
    model: LanguageModel,
    prompt: torch.Tensor,
    kept: list[int],
    offset: torch.Tensor,
    segment: torch.Tensor,
) -> Any:
    # kept: each layer's cached prompt length K (its last K columns); a query at offset i
    # stands where the padded layout puts it (column P + i) for a sliding window
    config = model.hf.config
    windows = attention_windows(config)
    types = getattr(config, "layer_types", None) or ["full_attention"] * len(windows)
    shapes = dict(zip(types, zip(windows, kept)))  # one shape per layer type
    n_prompt = prompt.shape[1]
    by_type = {
        t: _block_mask(model, prompt[:, n_prompt - k :], n_prompt, offset, segment, w)
        for t, (w, k) in shapes.items()
    }
    if len(set(shapes.values())) == 1:
        return next(iter(by_type.values()))
    return by_type


def _own_keys(offset: torch.Tensor, segment: torch.Tensor) -> torch.Tensor:
    same = segment[:, :, None] == segment[:, None, :]
    return same & (offset[:, None, :] <= offset[:, :, None])


def _block_mask(
    model: LanguageModel,
    prompt: torch.Tensor,
    n_prompt: int,
    offset: torch.Tensor,
    segment: torch.Tensor,
    window: int | None,
) -> torch.Tensor:
    query = n_prompt + offset[:, :, None]  # [b, W, 1] the query's column, padded layout
    own = _own_keys(offset, segment)
    seen = torch.cat([prompt[:, None, :].expand(-1, offset.shape[1], -1), own], 2)
    if window is not None:
        first = n_prompt - prompt.shape[1]
        key = torch.cat([torch.arange(first, n_prompt).expand_as(prompt), n_prompt + offset], 1)
        seen &= key[:, None, :] > query - window
    dtype = model.hf.dtype
    # float32's minimum in float64 too (bindscope.model.masks): exp of it is 0 in both
    fill = max(torch.finfo(dtype).min, torch.finfo(torch.float32).min)
    zero = torch.zeros((), dtype=dtype)
    return torch.where(seen, zero, torch.tensor(fill, dtype=dtype))[:, None]
