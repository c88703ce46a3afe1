"""The edge estimator (EAP, EAP-IG): the gradient at each receiver's own input.

The `EdgeState` stays where the passes run: only scores and metrics come back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from bindscope.interventions.trace.edits import site_outputs
from bindscope.interventions.trace.node_gradients import gradients_of
from bindscope.interventions.trace.paths import heads_through
from bindscope.interventions.trace.records import EdgePass, EdgeState
from bindscope.interventions.trace.reductions import metric_values
from bindscope.interventions.trace.sites import attention_call, final_logits, layer_sites, site

if TYPE_CHECKING:  # never runs, here or on the server
    from bindscope.interventions.trace.paths import PathPlan
    from bindscope.interventions.trace.records import EdgeGeometry
    from bindscope.protocols import TraceTarget


class EdgeJob:
    """One batch of an edge-attribution session, planned before the session opens."""

    def __init__(
        self,
        corrupted_inputs: dict,
        inputs: dict,
        mask: torch.Tensor,
        terms: dict,
        path: PathPlan,
        options: dict,
    ) -> None:
        self.corrupted_inputs = corrupted_inputs  # keyword inputs of the corrupted texts
        self.inputs = inputs  # of the clean texts
        self.mask = mask  # [b, s] their attention mask
        self.terms = terms  # the metric's (edge_metric)
        self.path = path
        self.options = options  # extra trace options (logits_to_keep)


def edge_metric(model: TraceTarget, terms: dict):
    """The metric of every row from the final logits (soft-capped as the forward returns them).

    ``terms``: ``{"keep": K, "terms": ...}`` (`metric_values` of the last K positions), or
    ``{"fn": f, "rows": ...}`` for a user's ``f(logits [b, V], rows) -> [b]`` (local only).
    """
    logits = final_logits(model)
    if "terms" not in terms:
        return terms["fn"](logits[:, -1].float(), terms["rows"])
    return metric_values(logits[:, -terms["keep"] :], terms["terms"])


def edge_sender_outputs(model: TraceTarget, into: Any):
    """Fill ``into`` with every edge sender's raw output (the donor pass of EAP)."""
    senders = [(name, i) for i, name in layer_sites(model) if name in ("head_out", "mlp_out")]
    return site_outputs(model, [("resid_pre", 0), *senders], into)


def edge_attribution_pass(
    model: TraceTarget,
    job: EdgeJob,
    donors: dict,
    alpha: float = 1.0,
    state: EdgeState | None = None,
    last: bool = True,
) -> EdgePass:
    """One forward and backward pass of ``job``'s texts: every edge's gradient at one step.

    Each receiver's gradient is pulled back through it alone to the residual it reads, times
    each sender's ``corrupted - clean`` output on real positions (``job.mask``). Layer 0's input
    moves to ``cor + alpha (clean - cor)`` (EAP-IG); the first pass (``state`` None, ``alpha``
    1) computes the senders' changes, the ``last`` gives scores ``[b, S, R]`` in graph order.
    """
    x0, cor = _embedding_input(model, donors, alpha)
    sent = [(cor - x0)[None].detach()] if state is None else None
    taps = _EdgeTaps(model, job.path.geo, x0, donors, sent)
    metric = edge_metric(model, job.terms)
    wrt = [t for triple in taps.qkv for t in triple] + taps.mlp_out + [taps.final]
    grads = gradients_of(metric.sum(), wrt, True, start=x0)  # kept for the pullbacks below
    found = _pullbacks(model, taps, grads)
    if state is None:
        deltas = torch.cat(sent or [])
        real = job.mask.to(deltas.device, deltas.dtype)[None, :, :, None]
        state = EdgeState(deltas * real, found, 0)
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
    """What one edge pass reads of every layer (lists by layer); ``sent`` gets senders' changes."""

    def __init__(
        self,
        model: TraceTarget,
        geo: EdgeGeometry,
        x0: torch.Tensor,
        donors: dict,
        sent: list | None,
    ) -> None:
        self.inputs: list[torch.Tensor] = []  # the residual each attention reads
        self.qkv: list[tuple] = []  # the attention call's query, key, value
        self.mlp_in: list[torch.Tensor] = []
        self.mlp_out: list[torch.Tensor] = []
        self.final = torch.zeros(())  # the last layer's resid_post, read last
        for layer, name in layer_sites(model):
            if name == "resid_pre":
                self.inputs.append(x0 if layer == 0 else site(model, name, layer))
                if geo.mlp_reads == name:  # a parallel residual
                    self.mlp_in.append(self.inputs[layer])
            elif name == "q":  # the attention call: its query, key and value together
                args, _ = attention_call(model, layer, geo.label).inputs
                self.qkv.append(tuple(args[geo.qkv : geo.qkv + 3]))
            elif name == "head_out" and sent is not None:
                z = site(model, name, layer)
                dz = _donor_like(donors, (name, layer), z) - z
                sent.append(heads_through(model, geo, layer, dz, slice(None)).detach())
            elif name == "resid_mid" and geo.mlp_reads == name:
                self.mlp_in.append(site(model, name, layer))
            elif name == "mlp_out":
                y = site(model, name, layer)
                self.mlp_out.append(y)
                if sent is not None:
                    sent.append((_donor_like(donors, (name, layer), y) - y)[None].detach())
            elif name == "resid_post" and layer == model.n_layers - 1:
                self.final = site(model, name, layer)


def _embedding_input(model: TraceTarget, donors: dict, alpha: float):
    """Layer 0's input moved to ``cor + alpha (clean - cor)``, tracking gradients; and ``cor``."""
    x0 = site(model, "resid_pre", 0)
    cor = _donor_like(donors, ("resid_pre", 0), x0)
    if alpha != 1.0:
        x0.copy_(cor + alpha * (x0 - cor))
    if not x0.requires_grad:  # NDIF serves frozen weights: track gradients from here
        x0.requires_grad_(True)
    return x0, cor


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
