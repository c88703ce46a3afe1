"""The small record classes a trace body receives or passes between passes.

Plain classes: they ship by value to NDIF, whose sandbox refuses the ``dataclasses`` module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # never runs, here or on the server
    import torch


class TraceModel:
    """What a trace body sees of a ``Model``: its ``FIELDS`` (never weights or credentials)."""

    nnsight: object
    name: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    capture_mode: str
    attention_call_label: str | None
    sites: dict[str, tuple[str, str, int]]  # {site: (module, port, index)} in execution order
    d_model: int
    logit_softcap: float | None
    knockout_site: tuple[str, int] | None  # the attention call's (label, mask index)
    attention_scaling: tuple[float | None, ...]  # each layer's q.k scale (scores)
    d_mlp: int
    FIELDS = tuple(__annotations__)

    def __init__(self, *values: object) -> None:
        for field, value in zip(self.FIELDS, values, strict=True):
            setattr(self, field, value)

    def check_heads(self, heads: object) -> tuple[tuple[int, int], ...]:
        """Pairs (or ``{layer: [heads]}``) sorted; they were validated before the trace was sent."""
        if isinstance(heads, dict):
            heads = [(layer, head) for layer in heads for head in heads[layer]]
        return tuple(sorted({(int(layer), int(head)) for layer, head in heads or ()}))  # type: ignore[attr-defined]


class TraceMeans:
    """What a shipped trace body sees of ``SiteMeans``: ``{layer: [H, hd]}`` means."""

    def __init__(self, means: dict[int, torch.Tensor], n_positions: int) -> None:
        self.means = means
        self.n_positions = n_positions


class ShippedModule:
    """A shipped module as a body sees it: its functions and classes as attributes.

    A pickled module would carry its import spec and loader, which the sandbox refuses
    (``bindscope.remote.register_shipped``).
    """

    def __init__(self, name: str, members: dict[str, object]) -> None:
        self.name = name
        self.__dict__.update(members)


class EdgeGeometry:
    """What the edge walks need of the model's layout (``graph.edge_geometry`` builds it)."""

    def __init__(self, post: str, head_out: str, label: str, qkv: int, mlp_reads: str) -> None:
        self.post = post  # the sandwich norm whose output is attn_out, or ""
        self.head_out = head_out  # the output projection's module path
        self.label = label  # the attention call's .source label
        self.qkv = qkv  # the index of its query argument (key and value follow)
        self.mlp_reads = mlp_reads  # resid_mid, or resid_pre for a parallel residual


class Receiver:
    """One receiver of a layer in a `PathPlan`."""

    def __init__(self, slot: torch.Tensor, kind: str, unit: int, index: int) -> None:
        self.slot = slot  # [b] long, its scratch row in each text that patches it
        self.kind = kind  # q, k, v or mlp
        self.unit = unit  # the head or key/value group (0 for an MLP)
        self.index = index  # among the plan's receivers (the mask's second axis)


class EdgeState:
    """What the edge passes over one batch keep where they run, from one pass to the next."""

    def __init__(self, deltas: torch.Tensor, gradients: list[torch.Tensor], passes: int) -> None:
        self.deltas = deltas  # [S, b, s, d] senders' corrupted - clean, on real positions
        self.gradients = gradients  # receivers' summed gradients, [R_i, b, s, d] parts
        self.passes = passes


class EdgePass:
    """One edge pass's results."""

    def __init__(self, metric: torch.Tensor, scores: torch.Tensor | None, state: EdgeState) -> None:
        self.metric = metric  # [b] at this step's input
        self.scores = scores  # [b, S, R] on the last step (averaged over steps), else None
        self.state = state  # what the next pass of these texts continues from
