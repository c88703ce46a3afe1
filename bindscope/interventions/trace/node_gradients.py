"""The node estimator (AtP, AtP*): a plan's edits to first order, ``sum((x' - x) * dm/dx)``.

One clean forward and one backward pass (Nanda 2023; Kramar et al. 2024); whatever a plan
can apply it can estimate.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from bindscope.interventions.trace.features import FeatureEdit, features_key
from bindscope.interventions.trace.reductions import metric_values
from bindscope.interventions.trace.sites import final_logits, layer_sites, save, site, unit_view

if TYPE_CHECKING:  # never runs, here or on the server
    from collections.abc import Iterable

    from bindscope.interventions.trace.edits import TracePlan
    from bindscope.protocols import TraceTarget


# A probability that underflows is read as this much when its log is needed (the
# linearised estimate's score change); log(1e-30) = -69, far past any saturation.
TINY = 1e-30


def knockout_pattern(probs: torch.Tensor, removed: torch.Tensor):
    """The probabilities after removing edges: each query row renormalised over the rest.

    Exactly what a knockout gives: a softmax with -inf on some scores is that of the others.
    """
    kept = probs * (~removed.to(probs.device)).to(probs.dtype)
    total = kept.sum(-1, keepdim=True)
    return kept / torch.where(total > 0, total, torch.ones_like(total))


def pattern_estimate(
    probs: torch.Tensor, grad: torch.Tensor, new: torch.Tensor, rows: torch.Tensor, method: str
):
    """``[b, H]`` estimate of a pattern change ``probs -> new`` on the query ``rows`` ``[b, H, W]``.

    ``atp*``: ``sum((new - probs) * grad)``; ``atp``: the softmax linearised in the scores
    (``ds = log new - log probs``).
    """
    rows = rows.to(probs.device)[..., None]
    p, g, q = probs.float(), grad.float(), new.float()
    if method == "atp*":
        return torch.where(rows, (q - p) * g, 0.0).sum((-1, -2))
    # dm/ds of a softmax row: p * (g - sum_k p g); the row's shift of s cancels in it
    dm_ds = p * (g - (p * g).sum(-1, keepdim=True))
    live = (p > 0) | (q > 0)  # causal, unpadded entries
    ds = torch.log(q.clamp_min(TINY)) - torch.log(p.clamp_min(TINY))
    return torch.where(rows & live, ds * dm_ds, 0.0).sum((-1, -2))


def _site_estimate(
    model: TraceTarget,
    name: str,
    layer: int,
    x: torch.Tensor,
    g: torch.Tensor,
    plan: TracePlan,
    donors: dict | None,
    method: str,
):
    """``{key: [b, U]}``: every edit of one site and layer (``g``: ``dm/dx``) estimated."""
    view, grad = unit_view(model, name, x), unit_view(model, name, g)
    total = torch.zeros(view.shape[0], view.shape[2], device=x.device)
    out = {(name, layer): total}
    if name == "pattern" and layer in plan.knockout:
        removed = plan.knockout[layer].to(x.device)  # [b, H, W, W]
        total += pattern_estimate(x, g, knockout_pattern(x, removed), removed.any(-1), method)
    for edit in plan.edits.get((name, layer), ()):
        if not edit.fits(view):
            continue
        if isinstance(edit, FeatureEdit):
            part = edit.estimate(view, grad, donors)
            key = (features_key(name), layer)
            out[key] = out[key] + part if key in out else part
            continue
        if name != "pattern":
            total += (edit.delta(view, donors).float() * grad.float()).sum((1, 3))
            continue
        # a pattern comes from a donor of the text's length (Patch): the same keys
        mask = edit.mask(view)  # [b, W, H, 1]
        new = torch.where(mask, edit.target(view, donors), view)
        rows = mask[..., 0].transpose(1, 2)  # [b, H, W]
        total += pattern_estimate(x, g, new.transpose(1, 2), rows, method)
    return out


def _estimates(
    model: TraceTarget,
    taps: dict[tuple[str, int], torch.Tensor],
    grads: Iterable,
    plan: TracePlan,
    donors: dict | None,
    method: str,
):
    """``{(site, layer): [b, U]}`` from one set of gradients (``grads``: one per live tap)."""
    out, grads = {}, iter(grads)
    for (name, layer), x in taps.items():
        g: Any = next(grads) if x.requires_grad else math.nan
        x = x.detach()
        if g is None or g is math.nan:  # nothing reaches the metric: 0; a constant: NaN
            units = unit_view(model, name, x).shape[2]
            out[(name, layer)] = torch.full((x.shape[0], units), 0.0 if g is None else g)
            continue
        out.update(_site_estimate(model, name, layer, x, g, plan, donors, method))
    return out


def gradients_of(total: torch.Tensor, wrt: list[torch.Tensor], retain: bool, start: torch.Tensor):
    """``d total / d x`` for each of ``wrt`` (None where it does not reach); ``start`` must be."""
    *found, at_start = torch.autograd.grad(
        total, [*wrt, start], allow_unused=True, retain_graph=retain
    )
    reached_input(at_start)
    return found


def reached_input(grad: torch.Tensor):
    """Refuse a backward pass that never reached layer 0's input.

    Every layer reads it, so None means the graph was cut and every gradient past the cut
    would read zero: ndif 0.1.2's sandbox runs untrusted bodies on copies of the tensors.
    """
    if grad is None:
        raise RuntimeError(
            "the metric's gradient did not reach layer 0's input: the autograd graph is cut "
            "(on NDIF: the request ran untrusted, in the server's sandbox), so every gradient "
            "would read zero; run it locally or on a server that runs your requests trusted"
        )


def attribution_pass(
    model: TraceTarget,
    terms: dict,
    plan: TracePlan,
    donors: dict | None = None,
    method: str = "atp*",
    grad_drop: bool = False,
):
    """One clean forward pass with gradients: the metric and every planned edit's estimate.

    Reads each site the plan edits (and, for a knockout, the pattern) on the walk, applying
    nothing. Returns ``{"metric": [b], "estimate": {(site, layer): [b, U]}}`` float32, saved
    (with ``grad_drop``, GradDrop scores (Kramar et al. 2024) as ``"grad_drop"``).
    """
    stream = site(model, "resid_pre", 0)  # [b, W, d]
    if not stream.requires_grad:  # NDIF serves frozen weights: track gradients from here
        stream.requires_grad_(True)
    taps, blocks, inputs = _attribution_taps(model, plan, stream, grad_drop)
    donors = {**(donors or {}), "inputs": inputs}  # what transcoder edits encode
    metric = metric_values(final_logits(model), terms)
    wrt = [x for x in taps.values() if x.requires_grad]
    total = metric.sum()
    grads = gradients_of(total, wrt, grad_drop, start=stream)
    estimate = _estimates(model, taps, grads, plan, donors, method)
    found = {"metric": metric.detach(), "estimate": {k: v.detach() for k, v in estimate.items()}}
    if grad_drop:
        found["grad_drop"] = _grad_drop(model, taps, blocks, total, stream, plan, donors, method)
    return save(found)


def _attribution_taps(model: TraceTarget, plan: TracePlan, stream: torch.Tensor, grad_drop: bool):
    """The sites the plan edits (and knocked-out patterns), in execution order, read only."""
    taps, blocks, inputs, reads = {}, [], {}, plan.reads()
    for layer, name in layer_sites(model):
        key = (name, layer)
        if key in plan.edits or (name == "pattern" and layer in plan.knockout):
            first = key == ("resid_pre", 0)  # read once: a second read would wait
            taps[key] = stream if first else site(model, name, layer)
        if key in reads:
            inputs[key] = taps[key] if key in taps else site(model, name, layer)
        if grad_drop and name in ("attn_out", "mlp_out"):
            blocks.append(site(model, name, layer))
    return taps, blocks, inputs


def _grad_drop(
    model: TraceTarget,
    taps: dict[tuple[str, int], torch.Tensor],
    blocks: list[torch.Tensor],
    total: torch.Tensor,
    stream: torch.Tensor,
    plan: TracePlan,
    donors: dict | None,
    method: str,
) -> dict[tuple[str, int], torch.Tensor]:
    """GradDrop scores (Kramar et al. 2024), ``{(site, layer): [b, U]}``."""
    wrt = [x for x in taps.values() if x.requires_grad]
    score: dict = {}  # {(site, layer): summed |estimate|}
    for layer in range(model.n_layers):
        # a hook returning zeros stops the gradient through the dropped layer's blocks
        hooks = [b.register_hook(torch.zeros_like) for b in blocks[2 * layer : 2 * layer + 2]]
        dropped = gradients_of(total, wrt, layer < model.n_layers - 1, stream)
        for hook in hooks:
            hook.remove()
        for k, v in _estimates(model, taps, dropped, plan, donors, method).items():
            if k not in score:
                score[k] = torch.zeros_like(v)
            score[k] += v.abs()
    # its own layer stops all of a head's gradient: the mean over the other L - 1
    return {k: (v / max(model.n_layers - 1, 1)).detach() for k, v in score.items()}
