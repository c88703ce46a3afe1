"""In-trace reductions: what a pass keeps of the probabilities and logits (``[b, H]``, ``[b]``).

A remote run returns only what is saved and bound to a name, so these return their
results small and saved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from bindscope.interventions.trace.edits import head_plan, run_layers
from bindscope.interventions.trace.sites import final_logits, head_view, save, site

if TYPE_CHECKING:  # never runs, here or on the server
    from collections.abc import Iterable, Sequence

    from bindscope.protocols import TraceTarget

    Heads = Sequence[tuple[int, int]] | dict[int, Sequence[int]]


def metric_values(logits: torch.Tensor, terms: dict):
    """The metric of every row: weighted log-probabilities plus weighted logits.

    Args:
        logits: ``[b, K, V]`` (the last ``K`` positions' logits).
        terms: ``{"logprob": (index, target, weight), "logit": (index, target, weight)}``
            (either may be missing), each ``[b, T]``: the kept position that predicts,
            the token id, and its weight (0 on padding).

    Returns:
        ``[b]`` float32.
    """
    device = logits.device
    rows = torch.arange(logits.shape[0], device=device)[:, None]
    value = torch.zeros(logits.shape[0], device=device)
    for kind in [kind for kind in ("logprob", "logit") if kind in terms]:
        index, target, weight = terms[kind]
        picked = logits[rows, index.to(device)].float()  # [b, T, V]
        if kind == "logprob":
            picked = picked.log_softmax(-1)
        chosen = picked.gather(-1, target.to(device)[:, :, None]).squeeze(-1)  # [b, T]
        value = value + (chosen * weight.to(device)).sum(-1)
    return value


def span_pair_bsi(
    probs: torch.Tensor,
    query_index: torch.Tensor,
    key_index: torch.Tensor,
    pair_weight: torch.Tensor,
):
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
    device = probs.device
    rows = torch.arange(probs.shape[0], device=device)[:, None]  # [b, 1]
    picked = probs[rows, :, query_index.to(device), key_index.to(device)]  # [b, P, H]
    return (picked.float() * pair_weight.to(device)[:, :, None]).sum(1)  # [b, H]


def participation_ratio(probs: torch.Tensor, query_weight: torch.Tensor):
    """Weighted mean over queries of ``1 / sum_k p^2``, the effective number of attended keys.

    Args:
        probs: ``[b, H, n, n]`` probabilities of one layer.
        query_weight: ``[b, n]`` float, the weight of each query (0 for padding and any
            query left out; each row's weights sum to 1).

    Returns:
        ``[b, H]`` float32.
    """
    p = probs.float()
    weight = query_weight.to(p.device)[:, None, :]  # [b, 1, n]
    squares = (p * p).sum(-1)  # [b, H, n]; 0 (or NaN) on padded queries, weighted 0
    ratio = torch.where(weight > 0, 1.0 / squares.clamp_min(1e-30), torch.zeros_like(squares))
    return (ratio * weight).sum(-1)


def choice_logprob_sums(
    logits: torch.Tensor,
    target_index: torch.Tensor,
    target_ids: torch.Tensor,
    target_weight: torch.Tensor,
):
    """Sum (weighted) log-probabilities of target tokens at given positions.

    Args:
        logits: ``[b, n, V]``.
        target_index: ``[b, T]`` long, the position whose prediction scores each target.
        target_ids: ``[b, T]`` long, the target token ids.
        target_weight: ``[b, T]`` float, 1/|choice| for real targets, 0 for padding.

    Returns:
        ``[b]`` float32 weighted sums (the mean log-prob per choice token when weights are 1/|c|).
    """
    return metric_values(logits, {"logprob": (target_index, target_ids, target_weight)})


def scored_token_sums(
    logits: torch.Tensor,
    owner: torch.Tensor,
    target_ids: torch.Tensor,
    weight: torch.Tensor,
    n_rows: int,
):
    """Weighted log-probabilities of scored tokens, summed per sequence.

    Args:
        logits: ``[T, V]``, one row per scored token.
        owner: ``[T]`` long, the sequence each token belongs to.
        target_ids: ``[T]`` long, the token scored.
        weight: ``[T]`` float, each token's weight (1/|choice| for a mean per choice token).
        n_rows: Number of sequences.

    Returns:
        ``[n_rows]`` float32 sums (0 for a sequence without scored tokens).
    """
    device = logits.device
    logp = logits.float().log_softmax(-1).gather(-1, target_ids.to(device)[:, None])[:, 0]
    out = torch.zeros(n_rows, dtype=torch.float32, device=device)
    return out.index_add(0, owner.to(device), logp * weight.to(device))


def collect_head_sums(model: TraceTarget, layers: Iterable[int], mask: torch.Tensor):
    """Save each listed layer's heads' pre-projection outputs summed over real positions.

    ``mask`` ``[b, s]`` bool is True on real (non-pad) tokens; the result is
    ``{layer: [H, hd]}`` float32.
    """
    found = {}
    for layer in layers:
        view = head_view(site(model, "head_out", layer), model.n_heads, model.head_dim).float()
        found[layer] = save(view[mask.to(view.device)].sum(0))  # [H, hd]
    return save(found)


def last_position_inputs(model: TraceTarget, final_norm: str):
    """Save every layer's output-projection input and the final norm's input at the last column.

    The last column is the last token of every left-padded row; the result is
    ``{layer: [b, H*hd], "final": [b, d]}``.
    """
    found: dict = {}  # a local annotation is never evaluated: nothing to import
    for layer in range(model.n_layers):
        found[layer] = save(site(model, "head_out", layer)[:, -1].clone())
    found["final"] = save(getattr(model.nnsight.model, final_norm).input[:, -1].clone())
    return save(found)


def probe_stats(probs: torch.Tensor):
    """``[3]`` float32 check of one layer's attention weights.

    The three values: present (1 or 0), max row-sum error, largest weight above the diagonal.
    """
    if probs is None:
        return torch.tensor([0.0, float("nan"), float("nan")])
    p = probs.float()
    row_error = (p.sum(-1) - 1).abs().max()
    upper = p.triu(1).abs().max()
    return torch.stack([torch.ones((), device=p.device), row_error, upper]).cpu()


def probe(model: TraceTarget):
    """The remote load-time check on a batch of two copies of one prompt.

    Row 1 has head (0, 0) ablated. Returns ``{"stats": [L, 3], "effect": []}``: per-layer
    ``probe_stats`` and the largest logit change the ablation caused.
    """
    found = run_layers(
        model,
        capture=range(model.n_layers),
        reduce=probe_stats,
        plan=head_plan(model, per_row=[(), ((0, 0),)]),
        allow_missing=True,
    )
    logits = final_logits(model)  # [2, n, V]
    effect = (logits[0].float() - logits[1].float()).abs().max().cpu()
    stats = torch.stack([found[layer] for layer in range(model.n_layers)])
    return save({"stats": stats, "effect": effect})
