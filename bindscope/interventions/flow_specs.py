"""Specs that add to or rewire the model rather than replace a value.

``Steer`` adds a vector, ``Knockout`` removes attention edges, ``PatternPatch`` copies
attention patterns, ``PathPatch`` patches edges between components.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, get_args

import numpy as np
import torch

from bindscope.errors import InputError, InterventionError
from bindscope.families import attention_windows
from bindscope.interventions.dictionary import Features
from bindscope.interventions.graph import edge_graph, edge_mask
from bindscope.interventions.hook_specs import Hook, Patchscope
from bindscope.interventions.rowops import (
    AddOp,
    KnockoutOp,
    PathOp,
    RowOp,
    Units,
    unit_shape,
)
from bindscope.interventions.specs import (
    Mean,
    Patch,
    Resample,
    RowContext,
    Zero,
    _check_site,
    _check_source_count,
    _equal_length_donor,
    _integer,
    _known_site,
    _layer_list,
    _layers,
    _pairs,
    _positions,
    _units,
    every_unit,
    feature_target,
    short,
    source_texts,
)
from bindscope.prompts.spans import locate
from bindscope.protocols import LanguageModel


@dataclass(frozen=True, eq=False)
class PathPatch:
    """Exact path patching: each edge's receiver reads its sender's output on ``source[i]``.

    ``edges`` are ``(sender, receiver)`` names (``interventions.graph``) or an ``[S, R]`` bool
    mask over ``edge_graph(model)``; only the patched receiver sees the sender's
    ``corrupted - current`` change. ``source``: one text per text (or one for all), of its
    length; or ``means=edge_means(model, reference)`` for mean ablation. Each text brings one
    scratch row per receiver slot (docs/circuits.md); in generation, later tokens read the
    patched prompt keys and values.
    """

    edges: Any
    source: tuple = ()
    means: Any = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", source_texts("PathPatch", self.source))
        if (self.means is None) == (not self.source):
            raise InterventionError(
                "PathPatch: give source= (the corrupted texts whose sender outputs the edges "
                "carry) or means=edge_means(model, reference) (mean ablation), one of them"
            )
        if self.means is not None and not hasattr(self.means, "trace_means"):
            raise InterventionError(
                f"PathPatch: means= takes edge_means(model, reference), not "
                f"{type(self.means).__name__}"
            )
        if not isinstance(self.edges, np.ndarray):
            if isinstance(self.edges, (str, bytes)) or not isinstance(self.edges, Iterable):
                raise InterventionError(
                    f"PathPatch: edges={self.edges!r}: give (sender, receiver) names, e.g. "
                    "[('a0.h1', 'a2.h0<q>')], or an [S, R] bool mask over edge_graph(model)"
                )
            object.__setattr__(self, "edges", tuple(tuple(e) for e in self.edges))

    def describe(self) -> str:
        """A short form for messages."""
        if isinstance(self.edges, np.ndarray):
            return f"PathPatch({int(self.edges.sum())} edges)"
        shown = list(self.edges[:2])
        return f"PathPatch({shown!r}{' ...' if len(self.edges) > 2 else ''})"

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model and text ``i``; its row ops for that text."""
        model = ctx.model
        if self.source:
            _check_source_count(ctx, "PathPatch", self.source)
        if id(self) not in ctx.edge_masks:  # the graph and the mask are checked once per call
            try:
                ctx.edge_masks[id(self)] = edge_mask(edge_graph(model), self.edges)
            except InputError as exc:
                raise InterventionError(f"{model.name}: {self.describe()}: {exc}") from None
        mask = ctx.edge_masks[id(self)]
        if self.means is not None:
            return (PathOp(self.describe(), "resid_pre", (), None, None, mask, self.means),)
        donor = _equal_length_donor(
            ctx, i, "PathPatch", self.source,
            "edges are compared position by position: choose a source of the same length in "
            "tokens",
        )  # fmt: skip
        if not mask.any():
            return ()
        return (PathOp(self.describe(), "resid_pre", (), None, donor, mask),)


@dataclass(frozen=True, eq=False)
class Steer:
    """Add ``scale * vector`` to a site's activations at one layer (or several).

    ``vector`` (1-D, the site's width) is copied and checked when the spec is built.
    ``positions`` restricts it (then the prompt pass only; else every new token too).
    ``Steer(dictionary.features([3]), scale=s)`` adds ``s`` to those latents instead.
    """

    site: Any
    layer: Any = None
    vector: Any = None
    positions: tuple[int, ...] | None = field(default=None, kw_only=True)
    scale: float = field(default=1.0, kw_only=True)

    def __post_init__(self) -> None:
        scale = self.scale
        if (
            isinstance(scale, bool)
            or not isinstance(scale, numbers.Real)
            or not math.isfinite(scale)
        ):
            raise InterventionError(f"Steer: scale={scale!r} is not a finite number")
        if isinstance(self.site, Features):
            self._features_post_init()
            return
        _known_site("Steer", self.site)
        object.__setattr__(self, "vector", _steering_vector(self.vector))
        object.__setattr__(self, "layer", _layer_list(self.layer, "Steer"))
        object.__setattr__(self, "positions", _positions(self.positions))
        # the added tensor, made once: every text's op shares one edit in the plan
        object.__setattr__(self, "_added", self.vector.float() * float(self.scale))

    def _features_post_init(self) -> None:
        """Check a feature steer: no layer or vector of its own."""
        if self.layer is not None or self.vector is not None:
            raise InterventionError(
                f"Steer({self.site!r}): the features' layer and vector are the dictionary's "
                "(its decoder rows); pass only scale= (and positions=)"
            )
        object.__setattr__(self, "positions", _positions(self.positions))
        added = torch.zeros(self.site.dictionary.d_sae, 1)
        added[list(self.site.indices)] = float(self.scale)
        object.__setattr__(self, "_added", added)  # [F, 1]: one edit per spec in the plan

    def describe(self) -> str:
        """A short form for messages."""
        if isinstance(self.site, Features):
            return f"Steer({self.site!r}, scale={self.scale})"
        return f"Steer({self.site!r}, layer={list(self.layer)!r})"

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model and text ``i``; its row ops for that text."""
        model = ctx.model
        if isinstance(self.site, Features):
            site, cells = feature_target(model, self.site)
            ctx.check_positions("Steer", self.positions, i)
            added, weights = self.__dict__["_added"], self.site.dictionary.weights
            return (AddOp(self.describe(), site, cells, self.positions, added, dictionary=weights),)
        _check_site(model, self.site, self.describe())
        cells = every_unit(model, self.site, self.layer)
        units, width = unit_shape(model, self.site)
        if self.vector.numel() != units * width:
            raise InterventionError(
                f"{model.name}: {self.describe()}: the vector has {self.vector.numel()} entries "
                f"but site {self.site!r} is {units * width} wide"
            )
        ctx.check_positions("Steer", self.positions, i)
        vector = self._scaled(units, width)
        return (AddOp(self.describe(), self.site, cells, self.positions, vector),)

    def _scaled(self, units: int, width: int) -> torch.Tensor:
        # one view per spec and shape, so every text's op shares one edit in the plan
        cached = self.__dict__.get("_view")
        if cached is None or cached.shape != (units, width):
            cached = self.__dict__["_added"].view(units, width)
            object.__setattr__(self, "_view", cached)
        return cached


def _steering_vector(vector: object) -> torch.Tensor:
    """A private copy of a steering vector, checked (raises ``InterventionError``)."""
    if not isinstance(vector, torch.Tensor) or vector.dim() != 1:
        raise InterventionError(
            f"Steer: vector must be a 1-D torch tensor of the site's width, not "
            f"{type(vector).__name__}"
            + (f" {tuple(vector.shape)}" if isinstance(vector, torch.Tensor) else "")
        )
    if vector.device.type == "meta":
        raise InterventionError(
            "Steer: the vector is on the meta device (a shape without values); build it on "
            "a real device, e.g. from model.capture(...) or torch.randn(model.d_model)"
        )
    if vector.is_complex() or vector.dtype == torch.bool:
        raise InterventionError(f"Steer: the vector is {vector.dtype}; pass a real float tensor")
    if not bool(torch.isfinite(vector).all()):
        raise InterventionError("Steer: the vector has NaN or infinite entries")
    return vector.detach().clone()


@dataclass(frozen=True)
class Knockout:
    """Attention knockout: remove ``(query_pos, key_pos)`` edges before the softmax.

    Positions of the unpadded text; each query row renormalises over the keys left (the
    mask gets -inf: eager or sdpa, GQA, left padding; the prompt pass in generation).
    ``layers=`` knocks out every head of those layers. ``term=`` takes each text's edges from
    the term's span: inside it (``query=None``, the pairs BSI measures) or from position
    ``query`` (``-1``: the last token) to each of its tokens.
    """

    heads: Any = None
    edges: tuple[tuple[int, int], ...] = ()
    layers: Any = field(default=None, kw_only=True)
    term: str | None = field(default=None, kw_only=True)
    query: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if self.heads is not None:
            object.__setattr__(self, "heads", _pairs(self.heads, "head"))
        object.__setattr__(self, "layers", _layers(self.layers))
        if (self.heads is None) == (self.layers is None):
            raise InterventionError(
                "Knockout: give heads, e.g. Knockout([(2, 8)], edges), or layers= (every "
                "head of those layers), not both"
            )
        object.__setattr__(self, "edges", _pairs(self.edges, "edge"))
        if self.term is not None and (self.edges or not isinstance(self.term, str)):
            raise InterventionError(
                "Knockout: give edges or term= (a string: each text's edges come from its "
                "span), not both"
            )
        if self.query is not None:
            if self.term is None:
                raise InterventionError("Knockout: query= goes with term=")
            object.__setattr__(self, "query", _integer(self.query, "query", self.query))

    def edges_for(self, ctx: RowContext, i: int) -> tuple[tuple[int, int], ...]:
        """The edges of text ``i``: ``edges``, or those of the term's span in it."""
        if self.term is None:
            return self.edges

        text = ctx.texts[i]
        if not isinstance(text, str):
            raise InterventionError(
                f"{ctx.model.name}: Knockout(term={self.term!r}) needs texts as strings to "
                f"find the term in; text #{i} is a token-id list"
            )
        span = locate(ctx.model, text, self.term, prompt_id=f"#{i}").indices
        if self.query is None:
            return tuple((q, k) for q in span for k in span if k < q)
        n = ctx.length(i)
        q = self.query % n if self.query < 0 else self.query
        return tuple((q, k) for k in span if k <= q)

    def describe(self) -> str:
        """A short form for messages."""
        if self.heads is not None:
            return f"Knockout({list(self.heads)!r})"
        return f"Knockout(layers={list(self.layers)!r})"

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model and text ``i``; its row ops for that text."""
        model = ctx.model
        if self.heads is not None:
            heads = _units(model.check_heads(self.heads))
        else:
            heads = every_unit(model, "head_out", self.layers)
        edges = self.edges_for(ctx, i)
        if not heads or not edges:
            return ()
        n = ctx.length(i)
        removed: dict[int, set[int]] = {}
        for q, k in edges:
            if not 0 <= k <= q < n:
                raise InterventionError(
                    f"{model.name}: Knockout edge ({q}, {k}) is not a causal edge of text #{i} "
                    f"{short(ctx.texts[i])} ({n} tokens): need 0 <= key <= query <= {n - 1}"
                )
            removed.setdefault(q, set()).add(k)
        _check_rows_keep_a_key(model, heads, removed, ctx.texts[i], i)
        return (KnockoutOp(self.describe(), "head_out", heads, None, edges),)


def _check_rows_keep_a_key(
    model: LanguageModel, heads: Units, removed: dict, text: object, i: int
) -> None:
    """Refuse a Knockout that leaves a query no key its layer's window lets it see."""
    config = getattr(getattr(model, "hf", None), "config", None)
    windows = attention_windows(config) if config is not None else ()  # no config: all full
    for q, keys in removed.items():
        for layer in sorted({layer for layer, _ in heads}):
            window = windows[layer] if layer < len(windows) else None
            seen = set(range(max(0, q - window + 1) if window else 0, q + 1))
            if seen <= keys:
                where = f" (layer {layer} sees the last {window} keys)" if window else ""
                raise InterventionError(
                    f"{model.name}: Knockout removes every key of query {q}{where} in text "
                    f"#{i} {short(text)}; keep at least one key so the row can renormalise"
                )


@dataclass(frozen=True)
class PatternPatch:
    """The heads attend as on ``source`` (its queries and keys), keeping their own values.

    ``source`` and ``positions`` (query rows) as in ``Patch``: a ``Patch`` of its heads,
    checked the same way, that acts on their pattern.
    """

    heads: tuple
    source: tuple = ()
    positions: tuple[int, ...] | None = None

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model and text ``i``; its row ops for that text."""
        patch = Patch(self.heads, self.source, positions=self.positions)
        return tuple(replace(op, site="pattern") for op in patch.row_ops(ctx, i))


Spec = (
    Zero | Mean | Patch | Resample | Steer | Knockout | PathPatch | PatternPatch | Hook | Patchscope
)
#: Every spec class, read off ``Spec``: ``resolve.as_specs`` recognises these.
SPEC_TYPES = get_args(Spec)
