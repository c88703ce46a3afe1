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
    taps = _Taps(model, plan, donors, method, grad_drop)
    metric = metric_values(final_logits(model), terms)
    total = metric.sum()
    estimate = taps.estimates(gradients_of(total, taps.wrt, grad_drop, start=taps.stream))
    found = {"metric": metric.detach(), "estimate": {k: v.detach() for k, v in estimate.items()}}
    if grad_drop:
        found["grad_drop"] = taps.grad_drop(total)
    return save(found)


class _Taps:
    """One attribution pass's taps (the sites the plan edits, read in order) and their estimates."""

    def __init__(
        self, model: TraceTarget, plan: TracePlan, donors: dict | None, method: str, drop: bool
    ) -> None:
        self.model, self.plan, self.method = model, plan, method
        self.stream = site(model, "resid_pre", 0)  # [b, W, d]
        if not self.stream.requires_grad:  # NDIF serves frozen weights: track gradients from here
            self.stream.requires_grad_(True)
        self.taps: dict[tuple[str, int], torch.Tensor] = {}
        self.blocks: list[torch.Tensor] = []  # each layer's attn_out and mlp_out (GradDrop's)
        inputs, reads = {}, plan.reads()
        for layer, name in layer_sites(model):
            key = (name, layer)
            if key in plan.edits or (name == "pattern" and layer in plan.knockout):
                first = key == ("resid_pre", 0)  # read once: a second read would wait
                self.taps[key] = self.stream if first else site(model, name, layer)
            if key in reads:
                inputs[key] = self.taps[key] if key in self.taps else site(model, name, layer)
            if drop and name in ("attn_out", "mlp_out"):
                self.blocks.append(site(model, name, layer))
        self.donors = {**(donors or {}), "inputs": inputs}  # what transcoder edits encode
        self.wrt = [x for x in self.taps.values() if x.requires_grad]

    def estimates(self, grads: Iterable) -> dict[tuple[str, int], torch.Tensor]:
        """``{(site, layer): [b, U]}`` from one set of gradients (``grads``: one per live tap)."""
        out, grads = {}, iter(grads)
        for (name, layer), x in self.taps.items():
            g: Any = next(grads) if x.requires_grad else math.nan
            x = x.detach()
            if g is None or g is math.nan:  # nothing reaches the metric: 0; a constant: NaN
                units = unit_view(self.model, name, x).shape[2]
                out[(name, layer)] = torch.full((x.shape[0], units), 0.0 if g is None else g)
                continue
            out.update(self._site(name, layer, x, g))
        return out

    def _site(self, name: str, layer: int, x: torch.Tensor, g: torch.Tensor):
        """``{key: [b, U]}``: every edit of one site and layer (``g``: ``dm/dx``) estimated."""
        plan, donors, method = self.plan, self.donors, self.method
        view, grad = unit_view(self.model, name, x), unit_view(self.model, name, g)
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

    def grad_drop(self, total: torch.Tensor) -> dict[tuple[str, int], torch.Tensor]:
        """GradDrop scores (Kramar et al. 2024), ``{(site, layer): [b, U]}``."""
        n_layers = self.model.n_layers
        score: dict = {}  # {(site, layer): summed |estimate|}
        for layer in range(n_layers):
            # a hook returning zeros stops the gradient through the dropped layer's blocks
            blocks = self.blocks[2 * layer : 2 * layer + 2]
            hooks = [b.register_hook(torch.zeros_like) for b in blocks]
            dropped = gradients_of(total, self.wrt, layer < n_layers - 1, self.stream)
            for hook in hooks:
                hook.remove()
            for k, v in self.estimates(dropped).items():
                if k not in score:
                    score[k] = torch.zeros_like(v)
                score[k] += v.abs()
        # its own layer stops all of a head's gradient: the mean over the other L - 1
        return {k: (v / max(n_layers - 1, 1)).detach() for k, v in score.items()}
