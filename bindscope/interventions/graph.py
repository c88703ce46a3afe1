"""The edge graph of a model: senders, receivers, and the layout path patching needs.

Senders: ``embed``, heads ``a3.h5``, MLPs ``m3``; receivers: each head's query ``a3.h5<q>``,
each key/value group's ``a3.g1<k|v>``, each MLP and ``logits``. An edge runs from a sender
to every receiver that reads the residual stream after it wrote.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import torch

from bindscope.errors import InputError
from bindscope.interventions.trace.records import EdgeGeometry, Receiver
from bindscope.protocols import LanguageModel

__all__ = ["Edge", "EdgeGraph", "edge_geometry", "edge_graph", "edge_mask"]

Edge = tuple[str, str]


@dataclass(frozen=True)
class EdgeGraph:
    """The nodes (in execution order) and edges (``valid`` ``[S, R]``) of one model."""

    senders: tuple[str, ...]
    receivers: tuple[str, ...]
    valid: np.ndarray = field(compare=False)
    parallel: bool = False  # the MLP reads the layer's input (no resid_mid)
    # a sender node -> the receivers that are its inputs (a head: its query, key and value)
    inputs_of: dict[str, tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def n_edges(self) -> int:
        """How many edges the graph has."""
        return int(self.valid.sum())

    def edges(self) -> list[Edge]:
        """Every edge as ``(sender, receiver)``, senders then receivers in order."""
        return [(self.senders[i], self.receivers[j]) for i, j in zip(*np.nonzero(self.valid))]

    def index(self, edges: Iterable[Edge]) -> np.ndarray:
        """``[S, R]`` bool mask of ``edges`` (``InputError`` for a non-node or non-edge)."""
        sender_at = {name: i for i, name in enumerate(self.senders)}
        receiver_at = {name: j for j, name in enumerate(self.receivers)}
        mask = np.zeros_like(self.valid)
        for edge in edges:
            if not (isinstance(edge, (tuple, list)) and len(edge) == 2):
                raise InputError(f"{edge!r} is not an edge; pass (sender, receiver) names")
            sender, receiver = edge
            if sender not in sender_at or receiver not in receiver_at:
                missing = sender if sender not in sender_at else receiver
                raise InputError(
                    f"edge {edge!r}: {missing!r} is not a node of this model; senders are embed, "
                    "a<layer>.h<head>, m<layer>; receivers a<layer>.h<head><q>, "
                    "a<layer>.g<group><k|v>, m<layer>, logits (e.g. ('a0.h1', 'a2.h0<q>'))"
                )
            i, j = sender_at[sender], receiver_at[receiver]
            if not self.valid[i, j]:
                raise InputError(
                    f"edge {edge!r}: {receiver} does not read what {sender} writes (only earlier "
                    "layers' senders, or for an MLP after attention its layer's heads)"
                )
            mask[i, j] = True
        return mask

    def sending(self, anywhere: np.ndarray, n_heads: int) -> tuple[dict[int, int], dict[int, int]]:
        """``{layer: sender index of head 0}`` of layers whose heads send, and of MLPs."""
        first_head, mlps = {}, {}
        for i, name in enumerate(self.senders):
            if name.endswith(".h0") and anywhere[i : i + n_heads].any():
                first_head[int(name[1:-3])] = i
            elif name[0] == "m" and anywhere[i].any():
                mlps[int(name[1:])] = i
        return first_head, mlps

    def receiving(
        self, full: np.ndarray, used: np.ndarray
    ) -> tuple[dict[int, list[Receiver]], dict[int, list[list[int]]], int]:
        """Each layer's receivers, the receiver each scratch row carries, the logits' index.

        ``full`` ``[b, S, R]``: each row's patched edges; ``used``: the receivers with one.
        """
        n_rows = full.shape[0]
        at: dict[int, list[Receiver]] = {}
        fills: dict[int, list[list[int]]] = {}  # per layer and row: each row's receiver
        classes: dict[tuple[int, int], dict[bytes, int]] = {}
        logits = -1
        for r, j in enumerate(used):
            name = self.receivers[j]
            if name == "logits":
                logits = r
                continue
            number, rest = name[1:].split(".", 1) if name[0] == "a" else (name[1:], "")
            layer = int(number)
            slot = [0] * n_rows
            if rest or self.parallel:
                for a in np.flatnonzero(full[:, :, j].any(1)):
                    seen = classes.setdefault((layer, int(a)), {})
                    slot[a] = seen.setdefault(full[a, :, j].tobytes(), len(seen))
                    rows = fills.setdefault(layer, [])
                    if slot[a] == len(rows):
                        rows.append([r] * n_rows)
                    rows[slot[a]][a] = r
            kind, unit = ("mlp", 0) if not rest else (rest[-2], int(rest[1:].split("<")[0]))
            at.setdefault(layer, []).append(Receiver(torch.tensor(slot), kind, unit, r))
        return at, fills, logits


def edge_graph(model: LanguageModel) -> EdgeGraph:
    """The model's graph, from its geometry and site table."""
    n_layers, n_heads, n_kv = model.n_layers, model.n_heads, model.n_kv_heads
    parallel = "resid_mid" not in model.sites
    senders: list[tuple[str, float]] = [("embed", -1.0)]
    receivers: list[tuple[str, float]] = []
    mlp_reads = 0.0 if parallel else 0.5
    inputs_of: dict[str, tuple[int, ...]] = {}
    for layer in range(n_layers):
        query = len(receivers)  # of head 0; its key and value follow the layer's queries
        receivers += [(f"a{layer}.h{h}<q>", layer) for h in range(n_heads)]
        receivers += [(f"a{layer}.g{g}<{kind}>", layer) for kind in "kv" for g in range(n_kv)]
        receivers.append((f"m{layer}", layer + mlp_reads))
        for h in range(n_heads):
            key = query + n_heads + h // max(n_heads // n_kv, 1)
            inputs_of[f"a{layer}.h{h}"] = (query + h, key, key + n_kv)
        inputs_of[f"m{layer}"] = (len(receivers) - 1,)
        senders += [(f"a{layer}.h{h}", layer + 0.25) for h in range(n_heads)]
        senders.append((f"m{layer}", layer + 0.75))
    receivers.append(("logits", float(n_layers)))
    writes = np.array([t for _, t in senders])
    reads = np.array([t for _, t in receivers])
    return EdgeGraph(
        tuple(n for n, _ in senders),
        tuple(n for n, _ in receivers),
        writes[:, None] < reads[None, :],
        parallel,
        inputs_of,
    )


def edge_mask(graph: EdgeGraph, edges) -> np.ndarray:
    """``edges`` (``(sender, receiver)`` names, or an ``[S, R]`` bool mask) as a checked mask."""
    if isinstance(edges, np.ndarray):
        if edges.shape != graph.valid.shape or edges.dtype != bool:
            raise InputError(
                f"an edge mask must be bool {graph.valid.shape} (senders x receivers), "
                f"not {edges.dtype} {edges.shape}"
            )
        wrong = np.argwhere(edges & ~graph.valid)
        if len(wrong):
            i, j = wrong[0]
            raise InputError(
                f"the edge mask marks {len(wrong)} sender x receiver pair(s) that are not edges "
                f"({graph.senders[i]} -> {graph.receivers[j]}, ...): use mask & graph.valid"
            )
        return edges
    if isinstance(edges, (str, bytes)):
        raise InputError(
            f"edges={edges!r}: give a list of (sender, receiver) names or an [S, R] bool mask"
        )
    return graph.index(edges)


def edge_geometry(model: LanguageModel) -> EdgeGeometry:
    """What the trace bodies need of the model's layout (``PathPlan.geo``)."""
    sites = model.sites
    head_module = sites["head_out"][0]
    attention = head_module.rsplit(".", 1)[0] if "." in head_module else ""
    attn_module, attn_port, _ = sites["attn_out"]
    post = "" if attn_module == attention else attn_module
    if post and attn_port != "output":
        raise InputError(
            f"{model.name} ({model.family}): attn_out is the input of {attn_module!r}; edges "
            "need it as the attention block's output (a module's output)"
        )
    label, mask_index = model.knockout_site  # the attention call and its mask argument
    return EdgeGeometry(
        post=post,
        head_out=head_module,
        label=label,
        qkv=mask_index - 3,  # query, key, value come just before the mask
        mlp_reads="resid_pre" if "resid_mid" not in sites else "resid_mid",
    )
