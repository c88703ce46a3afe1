"""Edges between heads and MLPs: the graph, EAP and EAP-IG scores, exact path patching.

`EdgeGraph` lists the nodes: senders (the input embedding ``embed``, each head ``a3.h5``,
each MLP ``m3``) and receivers (each head's query ``a3.h5<q>``, each key/value group's key
and value ``a3.g1<k>`` / ``a3.g1<v>``, each MLP ``m3`` and the ``logits``). On a
grouped-query family the key and value receivers are the groups the model computes, not
copies per query head (no "ungrouping"). An edge runs from a sender to every receiver that
reads the residual stream after the sender wrote to it; where the MLP reads the layer's
input (a parallel residual, ``Sites.resid_mid is None``) the heads of its own layer do
not reach it. All of it is read through the family's site table.

`edge_attribution` scores every edge for a metric over clean/corrupted pairs (EAP, Syed
et al. 2023; EAP-IG, Hanna et al. 2024, inputs variant with ``steps``): the score of
``s -> r`` is ``(corrupted - clean output of s) . dm/d(input of r)`` summed over positions,
the metric's estimated change when that edge alone carries the corrupted value. EAP-IG
averages the gradient over inputs interpolated from the corrupted to the clean embedding
(``k / steps``, ``k = 1..steps``), so one step is EAP.

`path_patching` measures the same exactly: with a set of edges patched, each of their
receivers reads its own copy of the residual stream in which each patched sender's output
is replaced by its corrupted output (``corrupted - current`` added), while every other
node reads the clean stream. It is the ground truth the scores are checked against.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from bindscope.errors import InputError
from bindscope.interventions import ops
from bindscope.nnsight_private import underlying_module
from bindscope.protocols import LanguageModel
from bindscope.runners import edge_ops
from bindscope.runners.attribution_metrics import check_metrics, metric_terms
from bindscope.runners.behaviour import keeps_logits

__all__ = ["METHODS", "EdgeGraph", "EdgeScores", "edge_attribution", "edge_graph", "path_patching"]

METHODS = ("eap", "eap-ig")

Edge = tuple[str, str]


@dataclass(frozen=True)
class EdgeGraph:
    """The nodes and edges of one model.

    Attributes:
        senders: Sender names in execution order (``embed``, ``a{l}.h{h}``, ``m{l}``).
        receivers: Receiver names in execution order (``a{l}.h{h}<q>``, ``a{l}.g{g}<k>``,
            ``a{l}.g{g}<v>``, ``m{l}``, ``logits``).
        valid: ``[S, R]`` bool, True where ``senders[i] -> receivers[j]`` is an edge.
        parallel: Whether the MLP reads the layer's input (no ``resid_mid``).
    """

    senders: tuple[str, ...]
    receivers: tuple[str, ...]
    valid: np.ndarray = field(compare=False)
    parallel: bool = False

    @property
    def n_edges(self) -> int:
        """How many edges the graph has."""
        return int(self.valid.sum())

    def edges(self) -> list[Edge]:
        """Every edge as ``(sender, receiver)``, senders then receivers in order."""
        return [(self.senders[i], self.receivers[j]) for i, j in zip(*np.nonzero(self.valid))]

    def index(self, edges: Iterable[Edge]) -> np.ndarray:
        """``[S, R]`` bool mask of ``edges``.

        Raises:
            InputError: A name is not a node, or the pair is not an edge.
        """
        sender_at = {name: i for i, name in enumerate(self.senders)}
        receiver_at = {name: j for j, name in enumerate(self.receivers)}
        mask = np.zeros_like(self.valid)
        for edge in edges:
            if not (isinstance(edge, (tuple, list)) and len(edge) == 2):
                raise InputError(f"{edge!r} is not an edge; pass (sender, receiver) names")
            sender, receiver = edge
            if sender not in sender_at or receiver not in receiver_at:
                raise InputError(
                    f"edge {edge!r}: senders are embed, a<layer>.h<head>, m<layer>; receivers "
                    "a<layer>.h<head><q>, a<layer>.g<group><k|v>, m<layer>, logits "
                    f"(e.g. ('a0.h1', 'a2.h0<q>')); "
                    f"{sender if sender not in sender_at else receiver!r} is not a node of this "
                    "model"
                )
            i, j = sender_at[sender], receiver_at[receiver]
            if not self.valid[i, j]:
                raise InputError(
                    f"edge {edge!r}: {receiver} does not read what {sender} writes (a receiver "
                    "reads only senders of earlier layers, or its layer's heads for an MLP "
                    "after attention)"
                )
            mask[i, j] = True
        return mask


def edge_graph(model: LanguageModel) -> EdgeGraph:
    """The model's graph, from its geometry and site table."""
    n_layers, n_heads, n_kv = model.n_layers, model.n_heads, model.n_kv_heads
    parallel = "resid_mid" not in model.sites
    senders: list[tuple[str, float]] = [("embed", -1.0)]
    receivers: list[tuple[str, float]] = []
    mlp_reads = 0.0 if parallel else 0.5
    for layer in range(n_layers):
        receivers += [(f"a{layer}.h{h}<q>", layer) for h in range(n_heads)]
        receivers += [(f"a{layer}.g{g}<{kind}>", layer) for kind in "kv" for g in range(n_kv)]
        receivers.append((f"m{layer}", layer + mlp_reads))
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
    )


@dataclass(frozen=True)
class EdgeScores:
    """Edge scores of every pair.

    Attributes:
        graph: The graph the scores index.
        scores: ``[pairs, S, R]`` float32, the estimated metric change when the edge alone
            is corrupted (0 where there is no edge).
        clean: ``[pairs]`` the metric on the clean texts.
        corrupted: ``[pairs]`` the metric on the corrupted texts.
        method: ``eap`` or ``eap-ig``; ``steps`` the integration steps (1 for EAP).
    """

    graph: EdgeGraph
    scores: np.ndarray
    clean: np.ndarray
    corrupted: np.ndarray
    method: str
    steps: int

    def mean(self) -> np.ndarray:
        """``[S, R]`` score averaged over pairs."""
        return self.scores.mean(0)

    def top(self, n: int, *, absolute: bool = True) -> list[Edge]:
        """The ``n`` edges of largest mean score (``absolute``: of largest magnitude)."""
        mean = self.mean()
        key = np.abs(mean) if absolute else -mean
        key = np.where(self.graph.valid, key, -np.inf)
        flat = np.argsort(-key, axis=None, kind="stable")[: min(n, self.graph.n_edges)]
        s, r = np.unravel_index(flat, mean.shape)
        return [(self.graph.senders[i], self.graph.receivers[j]) for i, j in zip(s, r)]


def edge_attribution(
    model: LanguageModel,
    clean: Sequence,
    corrupted: Sequence,
    metric,
    *,
    method: str = "eap-ig",
    steps: int = 5,
    batch_size: int = 8,
) -> EdgeScores:
    """Score every edge of the model for ``metric`` over clean/corrupted pairs.

    Args:
        model: A local ``bindscope.Model`` whose parameters require grad
            (``model.hf.requires_grad_(True)``; no parameter gradient is stored).
        clean: Clean texts (strings or token-id lists).
        corrupted: One corrupted text per clean text, of the same length in tokens.
        metric: ``LogitDifference(correct, wrong)`` or ``TargetLogprob(n)`` (one, or one per
            pair), or a function ``f(logits [b, V] at the last position, pair indices) -> [b]``.
        method: ``eap`` (one gradient, at the clean input) or ``eap-ig`` (``steps``).
        steps: Integration steps of EAP-IG (``eap-ig`` with 1 step is EAP).
        batch_size: Pairs per forward pass.
    """
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(f"steps={steps!r}: give a whole number of integration steps >= 1")
    steps = 1 if method == "eap" else steps
    _check_grad(model)
    pairs = _Pairs(model, clean, corrupted, metric)
    graph, geo = edge_graph(model), _geometry(model)
    scores = np.zeros((len(pairs), len(graph.senders), len(graph.receivers)), np.float32)
    clean_metric, corrupt_metric = np.zeros(len(pairs)), np.zeros(len(pairs))
    for rows in pairs.batches(batch_size):
        cor, corrupt_metric[rows] = _corrupted(model, geo, pairs, rows)
        batch, terms = pairs.clean_batch(rows), pairs.terms(rows)
        total, deltas = None, None
        for k in range(steps, 0, -1):  # alpha = 1 first: its pass gives the deltas
            plan = {"alpha": k / steps, "embed": cor["embed"]}
            if k == steps:
                plan["corrupt"] = cor
            options = {**model.trace_options, **_kept_logits(model, terms)}
            with torch.enable_grad(), model.nnsight.trace(**batch.inputs, **options):
                found = edge_ops.edge_gradients(model, geo, plan, terms)
            if k == steps:
                deltas, clean_metric[rows] = found["deltas"], found["metric"].double().cpu().numpy()
            total = found["grads"] if total is None else total + found["grads"]
        assert total is not None and deltas is not None
        mask = batch.attention_mask[None, :, :, None].to(deltas.dtype)
        got = torch.einsum("rbsd,tbsd->btr", total.float() / steps, (deltas * mask).float())
        scores[rows] = np.where(graph.valid, got.cpu().numpy(), 0.0)
    return EdgeScores(graph, scores, clean_metric, corrupt_metric, method, steps)


def path_patching(
    model: LanguageModel,
    clean: Sequence,
    corrupted: Sequence,
    metric,
    edges: Iterable[Edge] | np.ndarray,
    *,
    batch_size: int = 4,
) -> np.ndarray:
    """The metric of each pair with ``edges`` patched exactly (``[pairs]`` float64).

    Each patched edge's receiver reads the residual stream with the sender's output
    replaced by its output on the corrupted text; the sender's other receivers, and every
    other edge, are left clean. ``edges`` are ``(sender, receiver)`` names
    (`EdgeGraph.edges`) or an ``[S, R]`` bool mask. Arguments otherwise as
    `edge_attribution`.
    """
    pairs = _Pairs(model, clean, corrupted, metric)
    graph, geo = edge_graph(model), _geometry(model)
    mask = _edge_mask(graph, edges)
    out = np.zeros(len(pairs))
    for rows in pairs.batches(batch_size):
        cor, _ = _corrupted(model, geo, pairs, rows)
        plan = _patch_plan(model, graph, geo, mask, cor, len(rows))
        batch = pairs.clean_batch(rows)
        slots = plan["slots"]  # each text, then its scratch rows
        inputs = {k: torch.cat([v, v.repeat_interleave(slots, 0)]) for k, v in batch.inputs.items()}
        terms = pairs.terms(rows)
        options = {**model.trace_options, **_kept_logits(model, terms)}
        with torch.no_grad(), model.nnsight.trace(**inputs, **options):
            found = edge_ops.path_patched(model, geo, plan, terms)
        out[rows] = found["metric"].double().cpu().numpy()
    return out


def _edge_mask(graph: EdgeGraph, edges) -> np.ndarray:
    if isinstance(edges, np.ndarray):
        if edges.shape != graph.valid.shape or edges.dtype != bool:
            raise InputError(
                f"an edge mask must be bool {graph.valid.shape} (senders x receivers), "
                f"not {edges.dtype} {edges.shape}"
            )
        if (edges & ~graph.valid).any():
            raise InputError("the edge mask marks pairs that are not edges (see EdgeGraph.valid)")
        return edges
    return graph.index(edges)


def _patch_plan(model: LanguageModel, graph: EdgeGraph, geo: dict, mask, cor, b: int) -> dict:
    """The masks of `edge_ops.path_patched` for the patched ``mask`` ([S, R] bool)."""
    used = np.nonzero(mask.any(0))[0]  # receivers with a patched edge
    sub = torch.from_numpy(mask[:, used].T.astype(np.float32))  # [R', S]
    sender_at = {name: i for i, name in enumerate(graph.senders)}
    n_heads = model.n_heads
    heads, first_head, mlps = {}, {}, {}
    for layer in range(model.n_layers):
        cols = [sender_at[f"a{layer}.h{h}"] for h in range(n_heads)]
        if sub[:, cols].any():
            heads[layer], first_head[layer] = sub[:, cols], cols[0]
        if sub[:, sender_at[f"m{layer}"]].any():
            mlps[layer] = sender_at[f"m{layer}"]
    # receivers of one layer that read the same patched senders read equal residual copies:
    # they share a scratch row (an MLP after attention reuses row 0, reset at resid_mid)
    at: dict[int, list] = {}
    rows_of: dict[tuple[int, bytes], int] = {}
    logits = -1
    for r, j in enumerate(used):
        name = graph.receivers[j]
        if name == "logits":
            logits = r
            continue
        number, rest = name[1:].split(".", 1) if name[0] == "a" else (name[1:], "")
        layer = int(number)
        if not rest and geo["mlp_reads"] == "resid_mid":
            entry = (0, "mlp", 0, r)
        else:
            same = (layer, mask[:, j].tobytes())
            slot = rows_of.setdefault(same, sum(1 for key in rows_of if key[0] == layer))
            kind, unit = ("mlp", 0) if not rest else (rest[-2], int(rest[1:].split("<")[0]))
            entry = (slot, kind, unit, r)
        at.setdefault(layer, []).append(entry)
    used_slots = max((e[0] + 1 for entries in at.values() for e in entries), default=0)
    return {
        "slots": used_slots,
        "b": b,
        "corrupt": cor,
        "mask": sub,
        "heads": heads,
        "first_head": first_head,
        "mlp": mlps,
        "at": at,
        "logits": logits,
    }


def _geometry(model: LanguageModel) -> dict:
    """What the trace bodies need of the model's layout (see ``edge_ops``)."""
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
    width = model.n_heads * model.head_dim
    w_o = {}
    with torch.no_grad():
        for layer in range(model.n_layers):
            envoy = model.nnsight.model.layers[layer]
            for part in head_module.split("."):
                envoy = getattr(envoy, part)
            proj = underlying_module(envoy)
            dtype = next(proj.parameters()).dtype
            eye = torch.eye(width, dtype=dtype)
            matrix = proj(eye) - proj(torch.zeros(1, width, dtype=dtype))  # bias cancels
            w_o[layer] = matrix.view(model.n_heads, model.head_dim, -1).detach()
    return {
        "w_o": w_o,
        "post": post,
        "head_out": head_module,
        "label": label,
        "qkv": mask_index - 3,  # query, key, value come just before the mask
        "mlp_reads": "resid_pre" if "resid_mid" not in sites else "resid_mid",
    }


def _check_grad(model: LanguageModel) -> None:
    if getattr(model, "remote", False):
        raise InputError(f"{model.name}: edge attribution runs locally only (not on NDIF yet)")
    if not any(p.requires_grad for p in model.hf.parameters()):
        raise InputError(
            f"{model.name}: no parameter requires grad, so no gradient reaches the edges; "
            "call model.hf.requires_grad_(True) (no parameter gradient is stored)"
        )


class _Pairs:
    """Clean/corrupted pairs checked once: equal lengths, one metric per pair."""

    def __init__(self, model: LanguageModel, clean: Sequence, corrupted: Sequence, metric) -> None:
        self.model = model
        self.clean = [self._ids(t) for t in clean]
        self.corrupted = [self._ids(t) for t in corrupted]
        if len(self.clean) != len(self.corrupted) or not self.clean:
            raise InputError(
                f"{len(self.clean)} clean and {len(self.corrupted)} corrupted texts; give one "
                "corrupted text per clean text (and at least one pair)"
            )
        for i, (a, c) in enumerate(zip(self.clean, self.corrupted)):
            if len(a) != len(c):
                raise InputError(
                    f"{model.name}: pair #{i} has {len(a)} clean and {len(c)} corrupted tokens; "
                    "edges are compared position by position, so each corrupted text must "
                    "tokenize to its clean text's length"
                )
        self.user = metric if callable(metric) else None
        lengths = [len(a) for a in self.clean]
        self.metrics = None if self.user else check_metrics(model, metric, lengths)

    def _ids(self, text) -> list[int]:
        return self.model.tokenize(text) if isinstance(text, str) else [int(t) for t in text]

    def __len__(self) -> int:
        return len(self.clean)

    def batches(self, size: int):
        """Pair indices, ``size`` at a time."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InputError(f"batch_size={size!r}: give a whole number >= 1")
        for start in range(0, len(self), size):
            yield list(range(start, min(start + size, len(self))))

    def clean_batch(self, rows: list[int]):
        """The clean texts of ``rows``, left-padded (the corrupted ones pad alike)."""
        return self.model.pad(rows, [self.clean[i] for i in rows])

    def corrupted_batch(self, rows: list[int]):
        """The corrupted texts of ``rows``, left-padded."""
        return self.model.pad(rows, [self.corrupted[i] for i in rows])

    def terms(self, rows: list[int]) -> dict:
        """The metric's terms for `edge_ops.metric_of`."""
        if self.user is not None:
            return {"fn": self.user, "rows": rows}
        assert self.metrics is not None
        ids = self.clean_batch(rows).input_ids
        terms, keep = metric_terms([self.metrics[i] for i in rows], ids)
        return {"fn": ops.metric_values, "keep": keep, "terms": terms}


def _kept_logits(model: LanguageModel, terms: dict) -> dict:
    """``logits_to_keep``: only the positions the metric reads go through the LM head."""
    if not keeps_logits(model):
        return {}
    return {"logits_to_keep": terms.get("keep", 1)}


def _corrupted(model: LanguageModel, geo: dict, pairs: _Pairs, rows: list[int]):
    """The corrupted texts' sender outputs and their metric ``[b]``."""
    batch = pairs.corrupted_batch(rows)
    terms = pairs.terms(rows)
    options = {**model.trace_options, **_kept_logits(model, terms)}
    with torch.no_grad(), model.nnsight.trace(**batch.inputs, **options):
        found = edge_ops.corrupted_activations(model, geo)
        metric = edge_ops.save(edge_ops.metric_of(model, model.nnsight.lm_head.output, terms))
    return found, metric.double().cpu().numpy()
