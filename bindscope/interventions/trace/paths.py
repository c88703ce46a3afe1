"""Path patching: edges patched through scratch rows (the `PathPatch` spec's trace side).

Each receiver of a patched edge reads its own scratch copy of the residual stream, so
only that receiver sees the senders' change; the rows are reset at every layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from bindscope.interventions.trace.sites import attention_module, site, site_module, site_tensor

if TYPE_CHECKING:  # never runs, here or on the server
    from bindscope.interventions.trace.records import EdgeGeometry, Receiver
    from bindscope.protocols import TraceTarget


class PathPlan:
    """Path patching of one batch (``PathPatch``): edges patched through scratch rows.

    The trace's batch is the donor (corrupted) rows, then the ``b`` texts, then ``slots``
    scratch rows per text (copies of it); `path_patch` runs in an empty invoke that sees
    them all. At each layer a receiver of text ``a`` gets a scratch row whose residual is
    text ``a``'s plus the ``corrupted - current`` outputs of the receiver's patched
    senders; the receiver's query, key or value (or MLP output) is then copied from that
    row, so only that receiver sees the change. The rows are reset at every layer.

    Attributes:
        geo: ``graph.edge_geometry`` of the model.
        n_donors: Donor rows before the texts; ``b``: texts; ``slots``: scratch rows per text.
        donor_row: ``[b]`` long, each text's donor row.
        mask: ``[b, R', S]`` 0/1, each text's patched edges over the ``R'`` receivers that
            have any (in the graph's order) and every sender.
        first_head: ``{layer: sender index of head 0}`` of layers whose heads send.
        mlp: ``{layer: sender index}`` of MLPs that send.
        at: ``{layer: [Receiver]}``: each receiver of the layer.
        fills: ``{layer: [[b] long, ...]}``: per scratch row, the receiver whose residual
            each text's row carries (a text's rows are numbered among its own receivers).
        logits: The index of the logits receiver in ``mask``, or -1.
        means: With mean ablation, each sender's mean output (``"embed"`` ``[d]``,
            ``("z", l)`` ``[H*hd]``, ``("mlp", l)`` ``[d]``) in place of the donor rows'.
        donor_inputs: Keyword inputs of the donor invoke; ``scratch_inputs`` of the scratch
            rows' invoke (set by the planner; each text's rows are consecutive).
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
        self.means = means  # {"embed", ("z", l), ("mlp", l)}: senders take means, not donors
        self.geo, self.n_donors, self.b, self.slots = geo, n_donors, b, slots
        self.donor_row, self.mask = donor_row, mask
        self.first_head, self.mlp, self.at, self.logits = first_head, mlp, at, logits
        self.fills = fills
        self.donor_inputs: Any = None  # keyword inputs of the donor and scratch invokes
        self.scratch_inputs: Any = None


def path_patch(model: TraceTarget, path: PathPlan):
    """Apply a `PathPlan` in the current (empty) invoke, layer by layer.

    Reads the sender outputs of the donor rows (corrupted) and of the texts (current, so
    patched edges upstream propagate), fills each layer's scratch rows and copies each
    receiver's input from its row. Returns nothing: the texts' own invoke reads the result.
    """
    b, d, slots = path.b, path.n_donors, path.slots
    n_heads, texts = model.n_heads, slice(d, d + b)
    sent = joint = None
    for layer in range(model.n_layers):
        receivers = path.at.get(layer, [])
        x = site(model, "resid_pre", layer)
        scratch = d + b + torch.arange(b, device=x.device) * slots  # slot 0 of each text
        if sent is None:  # the senders' changes [S, b, s, d]
            sent = x.new_zeros(path.mask.shape[2], *x[texts].shape)
            if path.geo.post:  # through a sandwich norm: the heads' per receiver [R', ...]
                joint = x.new_zeros(path.mask.shape[1], *x[texts].shape)
            sent[0] = _sender_change(path, "embed", x)  # the embedding
        for slot, receiver in enumerate(path.fills.get(layer, ())):
            x[scratch + slot] = x[texts] + _received(path, sent, joint, receiver)
        attention = [entry for entry in receivers if entry.kind != "mlp"]
        if attention:
            _receive_attention(model, path, layer, attention, scratch)
        if layer in path.first_head:
            first = path.first_head[layer]
            z = site(model, "head_out", layer)
            dz = _sender_change(path, ("z", layer), z)
            if joint is None:  # each head's change alone: they add up
                sent[first : first + n_heads] = heads_through(model, path.geo, layer, dz, texts)
            else:  # through the norm: the heads of each receiver's set together
                sets = path.mask[:, :, first : first + n_heads]  # [b, R', H]
                joint += heads_through(model, path.geo, layer, dz, texts, sets)
        mlp = [entry for entry in receivers if entry.kind == "mlp"]
        if mlp or layer in path.mlp:
            _receive_mlp(model, path, layer, mlp[0] if mlp else None, sent, joint, scratch)
    if path.logits >= 0 and sent is not None:
        final = site(model, "resid_post", model.n_layers - 1)
        final[texts] = final[texts] + _received(path, sent, joint, path.logits)


def _receive_mlp(
    model: TraceTarget,
    path: PathPlan,
    layer: int,
    entry: Receiver | None,
    sent: torch.Tensor,
    joint: torch.Tensor | None,
    scratch: torch.Tensor,
):
    """The texts' MLP output from its receiver's scratch row; its change as a sender."""
    d, b = path.n_donors, path.b
    row = None if entry is None else scratch + entry.slot.to(scratch.device)
    if entry is not None and path.geo.mlp_reads == "resid_mid":
        xm = site(model, "resid_mid", layer)
        xm[row] = xm[d : d + b] + _received(path, sent, joint, entry.index)
    y = site(model, "mlp_out", layer)
    if entry is not None:
        y[d : d + b] = _from_scratch(path, entry.index, y[row], y[d : d + b])
    if layer in path.mlp:
        sent[path.mlp[layer]] = _sender_change(path, ("mlp", layer), y)


def _received(
    path: PathPlan, sent: torch.Tensor, joint: torch.Tensor | None, r: int | torch.Tensor
):
    """``[b, s, d]``: the sum of receiver ``r``'s patched senders' changes, per text.

    ``r`` is one receiver, or ``[b]`` long: one per text.
    """
    rows = torch.arange(path.b)
    if not isinstance(r, int):
        r = r.to(rows.device)
    weights = path.mask[rows, r].to(sent.device, sent.dtype)  # [b, S]
    total = torch.einsum("bs,sbtd->btd", weights, sent)
    if joint is None:
        return total
    return total + joint[r if isinstance(r, int) else r.to(joint.device), rows.to(joint.device)]


def _receive_attention(
    model: TraceTarget, path: PathPlan, layer: int, entries: list[Receiver], scratch: torch.Tensor
):
    """Each receiver's query, key or value of the texts taken from its scratch row.

    Edited in place: the key and value the attention call gets are the cache's own
    tensors, so a generation's later steps read the patched prompt keys and values.
    """
    d, b = path.n_donors, path.b
    call = getattr(attention_module(model, layer).source, path.geo.label)
    args, _ = call.inputs
    first = path.geo.qkv
    for entry in entries:
        t = args[first + "qkv".index(entry.kind)]  # [rows, H|KV, s, hd]
        row = scratch + entry.slot.to(scratch.device)
        unit = entry.unit
        t[d : d + b, unit] = _from_scratch(path, entry.index, t[row, unit], t[d : d + b, unit])


def _from_scratch(path: PathPlan, r: int, patched: torch.Tensor, own: torch.Tensor):
    """``patched`` in the texts that patch an edge into receiver ``r``, ``own`` elsewhere.

    A text of the batch without such an edge keeps its own value: it may carry another
    spec, whose edits its scratch rows do not see.
    """
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

    Args:
        model: The model.
        geo: ``graph.edge_geometry`` of the model.
        layer: The heads' layer.
        dz: ``[b, s, H*hd]`` the change of the output projection's input.
        rows: The batch rows ``dz`` belongs to (a slice: the texts, after any donor rows).
        sets: ``[b, G, H]`` 0/1, the heads of each set; None: each head alone (``G = H``).

    Without a norm after the projection the sets' changes add up head by head; with one
    (OLMo 2, Gemma 2/3) each set's sum goes through the norm, so a set of every head gives
    exactly the ablated ``attn_out``.
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
