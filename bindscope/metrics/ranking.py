"""Ranking heads by any ``[L, H]`` score: the top (and bottom) ``k``, and mean BSI over records."""

from __future__ import annotations

from typing import Any

import torch


def _order(scores: Any, descending: bool) -> list[tuple[int, int]]:
    scores = torch.as_tensor(scores, dtype=torch.float64)
    n_heads = scores.shape[1]
    flat = scores.flatten()
    keep = ~torch.isnan(flat)
    index = torch.arange(flat.numel())[keep]
    values = flat[keep]
    order = torch.argsort(-values if descending else values, stable=True)
    return [(int(i) // n_heads, int(i) % n_heads) for i in index[order]]


def top_heads(scores: Any, k: int) -> list[tuple[int, int]]:
    """The ``k`` best ``(layer, head)`` of an ``[L, H]`` score, or of a list's NaN-mean."""
    if isinstance(scores, (list, tuple)):
        scores = torch.stack([torch.as_tensor(s, dtype=torch.float64) for s in scores]).nanmean(0)
    return _order(scores, descending=True)[:k]


def rank_heads(scores: Any, k: int) -> tuple[list[list[int]], list[list[int]]]:
    """Top-k and bottom-k heads of an ``[L, H]`` score as ``[layer, head]`` lists.

    The bottom set is the top ranking read backwards (ties: the later head first), as C5's
    published protocol orders it.
    """
    ordered = _order(scores, descending=True)
    top = [[layer, head] for layer, head in ordered[:k]]
    bottom = [[layer, head] for layer, head in ordered[::-1][:k]]
    return top, bottom


def mean_bsi(records: list[dict]) -> torch.Tensor:
    """Mean BSI ``[L, H]`` (float64) over result records with a measured span."""
    return torch.tensor([r["metrics"]["bsi"] for r in records], dtype=torch.float64).mean(0)


__all__ = ["mean_bsi", "rank_heads", "top_heads"]
