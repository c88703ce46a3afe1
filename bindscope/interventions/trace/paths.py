"""Path patching (the `PathPatch` spec's trace side): edges patched through scratch rows.

Each receiver of a patched edge reads its own scratch copy of the residual stream, reset
at every layer, so only that receiver sees the senders' change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from bindscope.interventions.trace.sites import (
    attention_call,
    layer_sites,
    site,
    site_module,
    site_tensor,
)

if TYPE_CHECKING:  # never runs, here or on the server
    from bindscope.interventions.trace.records import EdgeGeometry, Receiver
    from bindscope.protocols import TraceTarget


class PathPlan:
    """Path patching of one batch: donor rows, the ``b`` texts, then ``slots`` scratch rows each.

    At each layer a receiver of text ``a`` gets a scratch row holding text ``a``'s residual
    plus the ``corrupted - current`` outputs of its patched senders; its query, key or value
    (or MLP output) is then copied from that row.
    """

    def __init__(
        self,
        geo: EdgeGeometry,
        n_donors: int,
        b: int,
        slots: int,
        donor_row: torch.Tensor,
        mask: torch.Tensor,
        first_head: dict[int, int],
        mlp: dict[int, int],
        at: dict[int, list[Receiver]],
        fills: dict[int, list[torch.Tensor]],
        logits: int,
        means: dict | None = None,
    ) -> None:
        self.geo, self.n_donors, self.b, self.slots = geo, n_donors, b, slots
        self.donor_row = donor_row  # [b] long, each text's donor row
        self.mask = mask  # [b, R', S] 0/1: patched edges over receivers that have any
        self.first_head = first_head  # {layer: sender index of head 0}
        self.mlp = mlp  # {layer: sender index} of MLPs that send
        self.at = at  # {layer: [Receiver]}
        self.fills = fills  # {layer: [[b] long receiver per scratch row]}
        self.logits = logits  # the logits receiver's index in mask, or -1
        self.means = means  # {"embed", ("z", l), ("mlp", l)}: means in place of donor rows
        self.donor_inputs: Any = None  # keyword inputs of the donor and scratch invokes
        self.scratch_inputs: Any = None


def path_patch(model: TraceTarget, path: PathPlan):
    """Apply a `PathPlan` in an empty invoke that sees every row, on the walk over the sites.

    Senders' changes are read from the donor rows and the texts (current, so patched edges
    upstream propagate). Returns nothing: the texts' own invoke reads the result.
    """
    walk = _PathWalk(model, path)
    for layer, name in layer_sites(model):
        if name == "resid_pre":
            walk.fill_scratch(layer, site(model, name, layer))
        elif name == "q":
            walk.receive_attention(layer)
        elif name == "head_out" and layer in path.first_head:
            walk.send_heads(layer)
        elif name == "resid_mid":  # only where the MLP reads it
            walk.receive_mlp_input(layer)
        elif name == "mlp_out":
            walk.receive_mlp_output(layer)
        elif name == "resid_post" and layer == model.n_layers - 1 and path.logits >= 0:
            final = site(model, name, layer)
            final[walk.texts] = final[walk.texts] + walk.received(path.logits)


class _PathWalk:
    """What `path_patch` carries from site to site: the senders' changes and scratch rows."""

    def __init__(self, model: TraceTarget, path: PathPlan) -> None:
        self.model, self.path = model, path
        self.texts = slice(path.n_donors, path.n_donors + path.b)
        self.sent = torch.zeros(0)  # [S, b, s, d] the senders' changes, from layer 0's input
        self.joint: torch.Tensor | None = None  # through a sandwich norm: per receiver [R', ...]
        self.scratch = torch.zeros(0)  # slot 0 of each text, at the current layer

    def received(self, r: int | torch.Tensor):
        """``[b, s, d]``: receiver ``r``'s senders' changes summed (``r`` ``[b]``: one per text)."""
        rows = torch.arange(self.path.b)
        if not isinstance(r, int):
            r = r.to(rows.device)
        weights = self.path.mask[rows, r].to(self.sent.device, self.sent.dtype)  # [b, S]
        total = torch.einsum("bs,sbtd->btd", weights, self.sent)
        if self.joint is None:
            return total
        picked = r if isinstance(r, int) else r.to(self.joint.device)
        return total + self.joint[picked, rows.to(self.joint.device)]

    def fill_scratch(self, layer: int, x: torch.Tensor) -> None:
        """Each scratch row of the layer: its text's residual plus its receiver's changes."""
        path = self.path
        if layer == 0:  # the senders' changes start with the embedding's
            self.sent = x.new_zeros(path.mask.shape[2], *x[self.texts].shape)
            if path.geo.post:  # the heads' changes go through the norm per receiver
                self.joint = x.new_zeros(path.mask.shape[1], *x[self.texts].shape)
            self.sent[0] = _sender_change(path, "embed", x)
        self.scratch = path.n_donors + path.b + torch.arange(path.b, device=x.device) * path.slots
        for slot, receiver in enumerate(path.fills.get(layer, ())):
            x[self.scratch + slot] = x[self.texts] + self.received(receiver)

    def receive_attention(self, layer: int) -> None:
        """Each receiver's query, key or value of the texts from its scratch row.

        In place: a generation's later steps read the patched prompt keys and values from the cache.
        """
        path, texts = self.path, self.texts
        entries = [entry for entry in path.at.get(layer, ()) if entry.kind != "mlp"]
        if not entries:
            return
        args, _ = attention_call(self.model, layer, path.geo.label).inputs
        for entry in entries:
            t = args[path.geo.qkv + "qkv".index(entry.kind)]  # [rows, H|KV, s, hd]
            row = self.scratch + entry.slot.to(self.scratch.device)
            unit = entry.unit
            t[texts, unit] = _from_scratch(path, entry.index, t[row, unit], t[texts, unit])

    def send_heads(self, layer: int) -> None:
        """The change of the layer's heads, as senders."""
        model, path = self.model, self.path
        first, n_heads = path.first_head[layer], model.n_heads
        z = site(model, "head_out", layer)
        dz = _sender_change(path, ("z", layer), z)
        if self.joint is None:  # each head's change alone: they add up
            heads = heads_through(model, path.geo, layer, dz, self.texts)
            self.sent[first : first + n_heads] = heads
        else:  # through the norm: the heads of each receiver's set together
            sets = path.mask[:, :, first : first + n_heads]  # [b, R', H]
            self.joint += heads_through(model, path.geo, layer, dz, self.texts, sets)

    def receive_mlp_input(self, layer: int) -> None:
        """The MLP receiver's input residual from its scratch row."""
        entry = self._mlp_receiver(layer)
        if entry is not None:
            xm = site(self.model, "resid_mid", layer)
            row = self.scratch + entry.slot.to(self.scratch.device)
            xm[row] = xm[self.texts] + self.received(entry.index)

    def receive_mlp_output(self, layer: int) -> None:
        """The texts' MLP output from its receiver's scratch row; its change as a sender."""
        path, texts = self.path, self.texts
        entry = self._mlp_receiver(layer)
        if entry is None and layer not in path.mlp:
            return
        y = site(self.model, "mlp_out", layer)
        if entry is not None:
            row = self.scratch + entry.slot.to(self.scratch.device)
            y[texts] = _from_scratch(path, entry.index, y[row], y[texts])
        if layer in path.mlp:
            self.sent[path.mlp[layer]] = _sender_change(path, ("mlp", layer), y)

    def _mlp_receiver(self, layer: int) -> Receiver | None:
        return next((e for e in self.path.at.get(layer, ()) if e.kind == "mlp"), None)


def _from_scratch(path: PathPlan, r: int, patched: torch.Tensor, own: torch.Tensor):
    """``patched`` in the texts that patch an edge into receiver ``r``, ``own`` elsewhere."""
    reads = path.mask[:, r].to(own.device).sum(-1) > 0  # [b]
    return torch.where(reads.view(-1, *([1] * (own.dim() - 1))), patched, own)


def _sender_change(path: PathPlan, key: object, x: torch.Tensor):
    """``[b, ...]``: a sender's ablated output (donor rows' or mean ``key``) minus the texts'."""
    own = x[path.n_donors : path.n_donors + path.b]
    if path.means is None:
        return x[path.donor_row.to(x.device)] - own
    return path.means[key].to(x.device, x.dtype).expand_as(own) - own


def heads_through(
    model: TraceTarget,
    geo: EdgeGeometry,
    layer: int,
    dz: torch.Tensor,
    rows: slice,
    sets: torch.Tensor | None = None,
):
    """``[G, b, s, d]``: the change of ``attn_out`` when each set's heads move by ``dz``.

    ``dz`` ``[b, s, H*hd]`` is the change of the output projection's input on ``rows``;
    ``sets`` ``[b, G, H]`` 0/1 (None: each head alone). Without a norm after the projection
    the heads' changes add up; with one (OLMo 2, Gemma 2/3) each set's sum goes through it.
    """
    if geo.post:  # the projection's output and attn_out, read before it is called below
        o = site_tensor(model.nnsight, layer, (geo.head_out, "output", 0))[rows]
        a = site(model, "attn_out", layer)[rows]
    # each head's slice alone through the output projection (the bias cancels), run where
    # the weights are: no projection matrix leaves the server
    proj = site_module(model.nnsight, layer, geo.head_out)
    alone = torch.eye(model.n_heads, dtype=dz.dtype, device=dz.device)
    alone = alone.repeat_interleave(model.head_dim, 1)[:, None, None]  # [H, 1, 1, H*hd]
    per_head = proj(dz[None] * alone) - proj(torch.zeros_like(dz[:1, :1]))  # [H, b, s, d]
    joint = per_head
    if sets is not None:
        joint = torch.einsum("bgh,hbsd->gbsd", sets.to(dz.device, dz.dtype), per_head)
    if not geo.post:
        return joint
    norm = site_module(model.nnsight, layer, geo.post)
    return norm(o[None] + joint) - a[None]
