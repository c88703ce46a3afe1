"""In-trace reductions: what a pass keeps of the probabilities and logits, small and saved."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from bindscope.interventions.trace.edits import head_plan, run_layers
from bindscope.interventions.trace.sites import final_logits, head_view, layer_sites, save, site

if TYPE_CHECKING:  # never runs, here or on the server
    from collections.abc import Iterable

    from bindscope.protocols import TraceTarget


def metric_values(logits: torch.Tensor, terms: dict):
    """``[b]`` float32: weighted log-probabilities plus weighted logits of ``logits`` ``[b, K, V]``.

    ``terms``: ``{"logprob" | "logit": (index, target, weight)}``, each ``[b, T]``: the kept
    position that predicts, the token id, its weight (0 on padding).
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
    """``[b, H]``: mean attention over each row's within-span (later -> earlier) pairs.

    ``probs`` ``[b, H, n, n]``; the ``[b, P]`` indices pick each pair's later and earlier token,
    ``pair_weight`` is 1/|pairs| (0 on padding pairs: a row without pairs gives 0).
    """
    device = probs.device
    rows = torch.arange(probs.shape[0], device=device)[:, None]  # [b, 1]
    picked = probs[rows, :, query_index.to(device), key_index.to(device)]  # [b, P, H]
    return (picked.float() * pair_weight.to(device)[:, :, None]).sum(1)  # [b, H]


def participation_ratio(probs: torch.Tensor, query_weight: torch.Tensor):
    """``[b, H]``: the ``query_weight``-weighted mean of ``1 / sum_k p^2`` (attended keys)."""
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
    """``[b]``: weighted log-probabilities of ``target_ids`` predicted at ``target_index``."""
    return metric_values(logits, {"logprob": (target_index, target_ids, target_weight)})


def scored_token_sums(
    logits: torch.Tensor,
    owner: torch.Tensor,
    target_ids: torch.Tensor,
    weight: torch.Tensor,
    n_rows: int,
):
    """``[n_rows]``: weighted log-probabilities of scored tokens ``[T, V]``, summed by ``owner``."""
    device = logits.device
    logp = logits.float().log_softmax(-1).gather(-1, target_ids.to(device)[:, None])[:, 0]
    out = torch.zeros(n_rows, dtype=torch.float32, device=device)
    return out.index_add(0, owner.to(device), logp * weight.to(device))


def collect_head_sums(model: TraceTarget, layers: Iterable[int], mask: torch.Tensor):
    """``{layer: [H, hd]}``: each layer's head outputs summed over ``mask``'s real positions."""
    found = {}
    for layer in layers:
        view = head_view(site(model, "head_out", layer), model.n_heads, model.head_dim).float()
        found[layer] = save(view[mask.to(view.device)].sum(0))  # [H, hd]
    return save(found)


def last_position_inputs(model: TraceTarget, final_norm: str):
    """``{layer: [b, H*hd], "final": [b, d]}``: head outputs and final-norm input, last column."""
    found: dict = {}  # a local annotation is never evaluated: nothing to import
    for layer, name in layer_sites(model):
        if name == "head_out":
            found[layer] = save(site(model, name, layer)[:, -1].clone())
    found["final"] = save(getattr(model.nnsight.model, final_norm).input[:, -1].clone())
    return save(found)


def probe_stats(probs: torch.Tensor):
    """``[3]``: present (1 or 0), max row-sum error, largest weight above the diagonal."""
    if probs is None:
        return torch.tensor([0.0, float("nan"), float("nan")])
    p = probs.float()
    row_error = (p.sum(-1) - 1).abs().max()
    upper = p.triu(1).abs().max()
    return torch.stack([torch.ones((), device=p.device), row_error, upper]).cpu()


def probe(model: TraceTarget):
    """The remote load-time check ``{"stats": [L, 3], "effect": []}``; row 1 ablates head (0, 0)."""
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
