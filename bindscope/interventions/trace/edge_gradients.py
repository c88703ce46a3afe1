"""The edge estimator (EAP, EAP-IG): the gradient at each receiver's own input.

One forward and backward pass per integration step; the `EdgeState` (senders' changes
and summed gradients) stays where the passes run, so only scores and metrics come back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from bindscope.interventions.trace.edits import site_outputs
from bindscope.interventions.trace.node_gradients import gradients_of
from bindscope.interventions.trace.paths import heads_through
from bindscope.interventions.trace.records import EdgePass, EdgeState
from bindscope.interventions.trace.reductions import metric_values
from bindscope.interventions.trace.sites import attention_module, final_logits, site

if TYPE_CHECKING:  # never runs, here or on the server
    from bindscope.interventions.trace.paths import PathPlan
    from bindscope.interventions.trace.records import EdgeGeometry
    from bindscope.protocols import TraceTarget


class EdgeJob:
    """One batch of an edge-attribution session, planned before the session opens.

    Attributes:
        corrupted_inputs: Keyword inputs of the corrupted texts.
        inputs: Keyword inputs of the clean texts.
        mask: ``[b, s]`` their attention mask.
        terms: The metric's terms (``edge_metric``).
        path: The batch's `PathPlan`.
        options: Extra trace options (``logits_to_keep``).
    """

    def __init__(
        self,
        corrupted_inputs: dict,
        inputs: dict,
        mask: torch.Tensor,
        terms: dict,
        path: PathPlan,
        options: dict,
    ) -> None:
        self.corrupted_inputs = corrupted_inputs
        self.inputs = inputs
        self.mask = mask
        self.terms = terms
        self.path = path
        self.options = options


def edge_metric(model: TraceTarget, terms: dict):
    """The metric of every row from the final logits (soft-capped as the forward returns them).

    ``terms`` is ``{"keep": K, "terms": ...}`` (`metric_values` of the last ``K``
    positions), or ``{"fn": f, "rows": [pair indices]}`` for a user function
    ``f(logits [b, V] at the last position, rows) -> [b]`` (local models only).
    """
    logits = final_logits(model)
    if "terms" not in terms:
        return terms["fn"](logits[:, -1].float(), terms["rows"])
    return metric_values(logits[:, -terms["keep"] :], terms["terms"])


def edge_sender_outputs(model: TraceTarget, into: Any):
    """Fill ``into`` with every edge sender's raw output (the donor pass of EAP).

    ``{("resid_pre", 0), ("head_out", l), ("mlp_out", l)}`` as `site_outputs` reads them.
    """
    sites = ("head_out", "mlp_out")
    keys = [("resid_pre", 0)] + [(name, i) for i in range(model.n_layers) for name in sites]
    return site_outputs(model, keys, into)


def edge_attribution_pass(
    model: TraceTarget,
    terms: dict,
    path: PathPlan,
    donors: dict,
    mask: torch.Tensor,
    alpha: float = 1.0,
    state: EdgeState | None = None,
    last: bool = True,
) -> EdgePass:
    """One forward and backward pass: every edge's gradient at one integration step.

    Walks the layers through `site` like `path_patch` (whose `PathPlan` gives the layout):
    the gradient of the metric at each receiver's query, key, value (per head or group),
    MLP output and the final residual, pulled back through that receiver alone to the
    residual it reads, in one backward pass and one batched vector-Jacobian product per
    layer and kind, times each sender's ``corrupted - clean`` output, over real positions.

    ``donors`` are `edge_sender_outputs` of the corrupted texts; ``mask`` ``[b, s]`` is 1
    on real tokens; layer 0's input moves to ``cor + alpha (clean - cor)`` (EAP-IG). The
    first pass (``state`` None) must be ``alpha = 1``: it computes the senders' changes.
    The ``last`` pass multiplies the gradients summed over the steps by those changes once
    (they do not move between steps), giving scores ``[b, S, R]`` in the graph's order.
    """
    x0, cor = _embedding_input(model, donors, alpha)
    sent = [(cor - x0)[None].detach()] if state is None else None
    taps = _edge_taps(model, path.geo, x0, donors, sent)
    metric = edge_metric(model, terms)
    wrt = [t for triple in taps.qkv for t in triple] + taps.mlp_out + [taps.final]
    grads = gradients_of(metric.sum(), wrt, True, start=x0)  # kept for the pullbacks below
    found = _pullbacks(model, taps, grads)
    if state is None:
        deltas = torch.cat(sent or [])
        state = EdgeState(deltas * mask.to(deltas.device, deltas.dtype)[None, :, :, None], found, 0)
    else:  # this pass's gradients added in place, part by part (no copy)
        for total, part in zip(state.gradients, found):
            total.add_(part)
    state.passes += 1
    scores = None
    if last:
        summed = torch.cat(state.gradients).float()
        scores = torch.einsum("rbsd,tbsd->btr", summed, state.deltas.float()) / state.passes
    return EdgePass(metric.detach(), scores, state)


class _EdgeTaps:
    """What one edge pass reads of every layer (lists indexed by layer)."""

    def __init__(self) -> None:
        self.inputs: list[torch.Tensor] = []  # the residual each attention reads
        self.qkv: list[tuple] = []  # the attention call's query, key, value
        self.mlp_in: list[torch.Tensor] = []
        self.mlp_out: list[torch.Tensor] = []
        self.final = torch.zeros(())  # the last layer's resid_post, read last


def _embedding_input(model: TraceTarget, donors: dict, alpha: float):
    """Layer 0's input moved to ``cor + alpha (clean - cor)``, tracking gradients; and ``cor``."""
    x0 = site(model, "resid_pre", 0)
    cor = _donor_like(donors, ("resid_pre", 0), x0)
    if alpha != 1.0:
        x0.copy_(cor + alpha * (x0 - cor))
    if not x0.requires_grad:  # NDIF serves frozen weights: track gradients from here
        x0.requires_grad_(True)
    return x0, cor


def _edge_taps(
    model: TraceTarget, geo: EdgeGeometry, x0: torch.Tensor, donors: dict, sent: list | None
) -> _EdgeTaps:
    """Read every receiver's input and output, in execution order.

    With ``sent`` (the first pass) each sender's ``corrupted - clean`` output
    ``[U, b, s, d]`` is appended to it on the way.
    """
    taps = _EdgeTaps()
    for layer in range(model.n_layers):
        x = x0 if layer == 0 else site(model, "resid_pre", layer)
        taps.inputs.append(x)
        args, _ = getattr(attention_module(model, layer).source, geo.label).inputs
        taps.qkv.append(tuple(args[geo.qkv : geo.qkv + 3]))
        if sent is not None:
            z = site(model, "head_out", layer)
            dz = _donor_like(donors, ("head_out", layer), z) - z
            sent.append(heads_through(model, geo, layer, dz, slice(None)).detach())
        resid_mid = geo.mlp_reads == "resid_mid"
        taps.mlp_in.append(site(model, "resid_mid", layer) if resid_mid else x)
        y = site(model, "mlp_out", layer)
        taps.mlp_out.append(y)
        if sent is not None:
            sent.append((_donor_like(donors, ("mlp_out", layer), y) - y)[None].detach())
    taps.final = site(model, "resid_post", model.n_layers - 1)
    return taps


def _pullbacks(model: TraceTarget, taps: _EdgeTaps, grads: list) -> list[torch.Tensor]:
    """Each receiver's gradient pulled back alone to the residual it reads, graph order."""
    n_layers, kv = model.n_layers, model.n_kv_heads
    found = []
    for layer in range(n_layers):
        for j, units in ((0, model.n_heads), (1, kv), (2, kv)):
            qkv = taps.qkv[layer][j]
            found.append(_per_unit_vjp(qkv, taps.inputs[layer], grads[3 * layer + j], units))
        y, x = taps.mlp_out[layer], taps.mlp_in[layer]
        found.append(_per_unit_vjp(y, x, grads[3 * n_layers + layer], 1))
    g = grads[-1]
    found.append((torch.zeros_like(taps.final) if g is None else g)[None].detach())
    return found


def _donor_like(donors: dict, key: tuple[str, int], x: torch.Tensor):
    """The donor pass's ``[b, W, U, k]`` activations of ``key`` shaped like ``x``."""
    return donors[key].reshape(x.shape).to(x.device, x.dtype)


def _per_unit_vjp(output: torch.Tensor, wrt: torch.Tensor, grad: torch.Tensor, units: int):
    """``[U, b, s, d]``: ``grad`` of each unit (dim 1 of ``output``) pulled back alone."""
    if grad is None:
        return torch.zeros(units, *wrt.shape, dtype=wrt.dtype, device=wrt.device)
    eye = torch.eye(units, dtype=grad.dtype, device=grad.device)
    masks = eye.view(units, 1, units, *([1] * (grad.dim() - 2)))
    cot = masks * grad[None]
    (found,) = torch.autograd.grad(
        output, wrt, grad_outputs=cot, is_grads_batched=True, retain_graph=True
    )
    return found.detach()
