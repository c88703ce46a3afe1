"""Intervention specs: *what* is done where, one vocabulary for every call.

Every call that runs the model (``Model.logits``, ``attention_probs``, ``capture``,
``generate``, ``generate_ids`` and the runners) takes ``intervene=`` (one spec or a list
applied to every text) and ``per_row=`` (one spec, list of specs or ``None`` per text).

``Zero``, ``Mean``, ``Patch`` and ``Resample`` act on heads (the per-head input of the
output projection, ``head_out``) or on any site of some layers (``Zero("mlp_out",
layers=[3])``; ``Zero(layers=[0, 1])`` is every head of those layers). ``Steer`` adds a
vector at a site; ``Knockout`` removes attention edges before the softmax; ``PathPatch``
patches edges between components (a sender's output into one receiver's input only).

Each spec class checks itself and turns into row ops for one text (`Spec.row_ops`);
``resolve.resolve_rows`` does that for every text before any trace runs, and refuses two
specs on the same cell of one text. The trace itself sees only tensors (``plan.py`` ->
``ops``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bindscope.errors import InputError, InterventionError
from bindscope.families import SITE_NAMES, attention_windows
from bindscope.interventions.graph import edge_graph, edge_mask
from bindscope.interventions.ops import by_layer
from bindscope.interventions.rowops import (
    AddOp,
    DonorOp,
    KnockoutOp,
    PathOp,
    ReplaceOp,
    RowOp,
    Units,
)
from bindscope.prompts.spans import locate
from bindscope.protocols import LanguageModel


def _pairs(items, what: str) -> tuple[tuple[int, int], ...]:
    if isinstance(items, dict):
        items = [(a, b) for a, bs in items.items() for b in bs]
    if what == "head":  # checked against the model (HeadSpecError naming it) when used
        return tuple(tuple(x) if isinstance(x, (list, tuple)) else x for x in items)
    out = []
    for item in items:
        if isinstance(item, (str, bytes)) or not hasattr(item, "__len__") or len(item) != 2:
            raise InterventionError(
                f"{what} {item!r} is not a (query, key) pair; pass e.g. [(5, 0), (5, 1)]"
            )
        out.append((_integer(item[0], what, item), _integer(item[1], what, item)))
    return tuple(out)


def _integer(value, what: str, item) -> int:
    """A whole number (a Python or numpy integer), never a bool, float or string."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    raise InterventionError(
        f"{what} {item!r}: {value!r} is a {type(value).__name__}, not an integer; token "
        "positions are whole numbers counted from 0 in the unpadded text"
    )


def _positions(positions) -> tuple[int, ...] | None:
    if positions is None:
        return None
    if isinstance(positions, numbers.Integral) and not isinstance(positions, bool):
        positions = (positions,)
    return tuple(_integer(p, "position", p) for p in positions)


def _layers(layers) -> Any:
    """Layers as given (checked against the model when used); one int is one layer."""
    if layers is None or isinstance(layers, (str, bytes)):
        return layers
    if isinstance(layers, numbers.Integral) and not isinstance(layers, bool):
        return (int(layers),)
    return tuple(layers) if isinstance(layers, Iterable) else layers


class RowContext:
    """What the specs of one call share: the texts, their token counts, drawn donors.

    ``resolve.resolve_rows`` makes one per call and hands it to every spec's ``row_ops``.
    """

    def __init__(self, model: LanguageModel, texts: Sequence) -> None:
        self.model, self.texts = model, list(texts)
        self._lengths: dict[int, int] = {}
        self.drawn: dict[int, tuple[int, ...]] = {}  # id(Resample) -> donors, once per call
        self.edge_masks: dict[int, np.ndarray] = {}  # id(PathPatch) -> its checked mask

    def ids(self, text) -> list[int]:
        """A text's token ids (a token-id list as it is)."""
        return self.model.tokenize(text) if isinstance(text, str) else list(text)

    def length(self, i: int) -> int:
        """Text ``i``'s length in tokens (tokenised once per call)."""
        if i not in self._lengths:
            self._lengths[i] = len(self.ids(self.texts[i]))
        return self._lengths[i]

    def check_positions(self, spec: str, positions, i: int) -> None:
        """Refuse positions outside text ``i`` (raises ``InterventionError``)."""
        n = self.length(i)
        bad = [p for p in positions or () if not 0 <= p < n]
        if bad:
            raise InterventionError(
                f"{self.model.name}: {spec} positions {bad} are outside text #{i} "
                f"{short(self.texts[i])} ({n} tokens, positions 0..{n - 1})"
            )


@dataclass(frozen=True)
class _Targeted:
    """Shared by specs that act on heads or on a site of some layers.

    ``heads`` comes first (a subclass's own fields follow it); ``site``, ``layers`` and
    ``positions`` are keywords. A string in place of ``heads`` is the site:
    ``Zero("resid_post", layers=[2])``.
    """

    heads: Any = None
    site: str | None = field(default=None, kw_only=True)
    layers: Any = field(default=None, kw_only=True)
    positions: tuple[int, ...] | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        heads = self.heads
        if isinstance(heads, str):
            if self.site is not None and self.site != heads:
                raise InterventionError(
                    f"{type(self).__name__}: site given twice ({heads!r} and {self.site!r})"
                )
            object.__setattr__(self, "site", heads)
            heads = None
        object.__setattr__(self, "heads", None if heads is None else _pairs(heads, "head"))
        object.__setattr__(self, "layers", _layers(self.layers))
        if self.heads is not None and self.layers is not None:
            raise InterventionError(
                f"{type(self).__name__}: give heads or layers=, not both (layers= alone is "
                "every head of those layers, or with a site, that site of those layers)"
            )
        if self.heads is None and self.layers is None:
            raise InterventionError(
                f"{type(self).__name__}: say where: heads, e.g. {type(self).__name__}([(2, 8)]"
                f", ...), or a site with layers, e.g. {type(self).__name__}('resid_post', "
                "..., layers=[3])"
            )
        if self.site is not None and self.site not in SITE_NAMES:
            raise InterventionError(
                f"{type(self).__name__}: unknown site {self.site!r}; the sites are "
                f"{', '.join(SITE_NAMES)}"
            )
        if self.heads is not None and self.site not in (None, "head_out"):
            raise InterventionError(
                f"{type(self).__name__}: heads live at site 'head_out', not {self.site!r}; "
                "for a whole site give layers= instead of heads"
            )
        object.__setattr__(self, "positions", _positions(self.positions))

    def describe(self) -> str:
        """A short form for messages, e.g. ``Zero([(1, 0)])``."""
        if self.heads is not None:
            return f"{type(self).__name__}({list(self.heads)!r})"
        return f"{type(self).__name__}({self.site or 'head_out'!r}, layers={list(self.layers)!r})"

    def target(self, model: LanguageModel) -> tuple[str, Units]:
        """The site and the units of each layer, checked against the model."""
        if self.heads is not None:
            return "head_out", _units(model.check_heads(self.heads))
        site = self.site or "head_out"
        _check_site(model, site, self.describe())
        layers = model.check_layers(self.layers)
        units = tuple(range(model.n_heads)) if site == "head_out" else (0,)
        return site, tuple((layer, units) for layer in layers)


def _check_site(model: LanguageModel, site: str, spec: str) -> None:
    if site == "pattern":
        raise InterventionError(
            f"{model.name}: {spec}: the attention probabilities (pattern) can be captured, "
            "not replaced; remove attention edges with Knockout"
        )
    if site not in model.sites:
        raise InterventionError(
            f"{model.name} ({model.family}): {spec}: the family has no site {site!r} (e.g. "
            "a parallel residual has no resid_mid); its sites are "
            f"{', '.join(s for s in model.sites if s != 'pattern')}"
        )


def _units(heads: Sequence[tuple[int, int]]) -> Units:
    """Sorted ``(layer, head)`` pairs as ``((layer, (heads...)), ...)``."""
    return tuple((layer, tuple(hs)) for layer, hs in by_layer(heads).items())


def _width(model: LanguageModel, site: str) -> tuple[int, int]:
    """``(U, k)`` of a site's view: heads x head_dim at head_out, 1 x d_model elsewhere."""
    return (model.n_heads, model.head_dim) if site == "head_out" else (1, model.d_model)


@dataclass(frozen=True)
class Zero(_Targeted):
    """Zero-ablation: the heads' outputs (or a site's activations) are set to zero.

    ``positions`` (token positions of the unpadded text) restricts it; by default every
    position, in generation every step too.
    """

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model and text ``i``; its row ops for that text."""
        site, units = self.target(ctx.model)
        ctx.check_positions(self.describe(), self.positions, i)
        return (ReplaceOp(self.describe(), site, units, self.positions),)


@dataclass(frozen=True, eq=False)
class Mean(_Targeted):
    """Mean-ablation: the heads' outputs (or a site's activations) take reference means.

    Attributes:
        means: For heads, ``HeadMeans`` from ``head_means(model, reference, heads)`` (or a
            plain ``{layer: [H, hd]}`` dict); for a site, ``site_means(model, reference,
            site, layers)`` (or ``{layer: [d_model]}``).
    """

    means: object = None
    # the means are tensors: a Mean equals only itself (as with eq=False before)
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model and text ``i``; its row ops for that text."""
        site, units = self.target(ctx.model)
        ctx.check_positions(self.describe(), self.positions, i)
        values = _check_means(ctx.model, self, site, units)
        return (ReplaceOp(self.describe(), site, units, self.positions, values),)


@dataclass(frozen=True)
class Patch(_Targeted):
    """Activation patching: text ``i`` takes the activations of a clean run on ``source[i]``.

    ``source`` has one text per target text (or a single text used for all of them), each
    tokenizing to the same length as its target. ``positions`` restricts the patch to those
    token positions of the unpadded text. Heads as for ``Zero``, or a site with layers:
    ``Patch("resid_pre", corrupted, layers=[0], positions=[5])``.
    """

    source: tuple = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        source = self.source
        object.__setattr__(self, "source", (source,) if isinstance(source, str) else tuple(source))

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model and text ``i``; its row ops for that text."""
        site, units = self.target(ctx.model)
        _check_source_count(ctx, "Patch", self.source)
        donor = _equal_length_donor(
            ctx, i, "Patch", self.source,
            "choose a source that tokenizes to the same length (or use Resample, aligned from "
            "the end)",
        )  # fmt: skip
        ctx.check_positions("Patch", self.positions, i)
        return (DonorOp(self.describe(), site, units, self.positions, donor),)


@dataclass(frozen=True)
class Resample(_Targeted):
    """Resample-ablation: each text's heads (or site) take a random *other* reference text's.

    The donor of each text is drawn with ``torch.Generator().manual_seed(seed)``, is
    recorded by `donors`, and is position-aligned from the end (positions the donor does
    not have are left alone).
    """

    reference: tuple = ()
    seed: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "reference", tuple(self.reference))
        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise InterventionError(
                f"Resample: seed={seed!r} is a {type(seed).__name__}, not an integer; the "
                "donors are drawn with torch.Generator().manual_seed(seed): pass e.g. seed=0"
            )
        object.__setattr__(self, "seed", int(seed))

    def donors(self, texts: Sequence) -> tuple[int, ...]:
        """Index into ``reference`` of each text's donor (deterministic given ``seed``).

        Raises:
            InterventionError: The reference is empty or holds no text other than one of
                ``texts``.
        """
        if not self.reference:
            raise InterventionError("Resample: the reference list is empty; pass some texts")
        generator = torch.Generator().manual_seed(int(self.seed))
        chosen = []
        for i, text in enumerate(texts):
            candidates = [j for j, ref in enumerate(self.reference) if ref != text]
            if not candidates:
                raise InterventionError(
                    f"Resample: text #{i} {short(text)} has no other text in the reference "
                    "to draw from; add different reference texts"
                )
            pick = int(torch.randint(len(candidates), (1,), generator=generator))
            chosen.append(candidates[pick])
        return tuple(chosen)

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model and text ``i``; its row ops for that text."""
        site, units = self.target(ctx.model)
        ctx.check_positions("Resample", self.positions, i)
        if id(self) not in ctx.drawn:
            ctx.drawn[id(self)] = self.donors(ctx.texts)
        donor = tuple(ctx.ids(self.reference[ctx.drawn[id(self)][i]]))
        return (DonorOp(self.describe(), site, units, self.positions, donor),)


@dataclass(frozen=True, eq=False)
class PathPatch:
    """Exact path patching: each edge's receiver reads its sender's output on ``source[i]``.

    An edge is ``(sender, receiver)`` named as in ``bindscope.interventions.graph``
    (senders ``embed``, ``a3.h5``, ``m3``; receivers ``a3.h5<q>``, ``a3.g1<k>``,
    ``a3.g1<v>``, ``m3``, ``logits``), or ``edges`` is an ``[S, R]`` bool mask over
    ``edge_graph(model)``. The patched receiver reads the residual stream with the sender's
    output replaced by its output on the source text (``corrupted - current`` added: patched
    edges upstream propagate); the sender's other receivers, and every other node, read
    the stream as it is. ``source`` has one text per target text (or one for all), each of
    its target's length in tokens. With ``means=edge_means(model, reference)`` instead,
    each patched edge carries its sender's mean output (mean ablation), and no source is
    given. Each text brings scratch rows to the batch (one per receiver slot its edges
    use), so a call costs that many times more. It runs on the prompt pass; in generation,
    later tokens read the patched prompt keys and values.
    """

    edges: Any
    source: tuple = ()
    means: Any = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        source = self.source
        object.__setattr__(self, "source", (source,) if isinstance(source, str) else tuple(source))
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

    ``vector`` has the site's width (``d_model``; ``n_heads * head_dim`` at head_out). It
    is copied (and checked: 1-D, finite, on a real device) when the spec is built, so
    later edits to the caller's tensor do not reach the spec. ``positions`` (of the
    unpadded text) restricts it; by default it acts on every position, and in ``generate``
    on every new token as well (with ``positions``, on the prompt pass only).
    """

    site: str
    layer: Any
    vector: torch.Tensor
    positions: tuple[int, ...] | None = field(default=None, kw_only=True)
    scale: float = field(default=1.0, kw_only=True)

    def __post_init__(self) -> None:
        if self.site not in SITE_NAMES:
            raise InterventionError(
                f"Steer: unknown site {self.site!r}; the sites are {', '.join(SITE_NAMES)}"
            )
        object.__setattr__(self, "vector", _steering_vector(self.vector))
        scale = self.scale
        if (
            isinstance(scale, bool)
            or not isinstance(scale, numbers.Real)
            or not math.isfinite(scale)
        ):
            raise InterventionError(f"Steer: scale={scale!r} is not a finite number")
        object.__setattr__(self, "layer", _steer_layers(self.layer))
        object.__setattr__(self, "positions", _positions(self.positions))
        # the added tensor, made once: every text's op shares one edit in the plan
        object.__setattr__(self, "_added", self.vector.float() * float(scale))

    def describe(self) -> str:
        """A short form for messages, e.g. ``Zero([(1, 0)])``."""
        return f"Steer({self.site!r}, layer={list(self.layer)!r})"

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model and text ``i``; its row ops for that text."""
        model = ctx.model
        _check_site(model, self.site, self.describe())
        layers = model.check_layers(self.layer)
        units, width = _width(model, self.site)
        if self.vector.numel() != units * width:
            raise InterventionError(
                f"{model.name}: {self.describe()}: the vector has {self.vector.numel()} entries "
                f"but site {self.site!r} is {units * width} wide"
            )
        ctx.check_positions("Steer", self.positions, i)
        vector = self._scaled(units, width)
        cells = tuple((layer, tuple(range(units))) for layer in layers)
        return (AddOp(self.describe(), self.site, cells, self.positions, vector),)

    def _scaled(self, units: int, width: int) -> torch.Tensor:
        # one view per spec and shape, so every text's op shares one edit in the plan
        cached = self.__dict__.get("_view")
        if cached is None or cached.shape != (units, width):
            cached = self.__dict__["_added"].view(units, width)
            object.__setattr__(self, "_view", cached)
        return cached


def _steering_vector(vector) -> torch.Tensor:
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


def _steer_layers(layer) -> tuple[int, ...]:
    """Steer's ``layer``: one integer or a list of them (ranges are checked when used)."""
    layers = _layers(layer)
    whole = isinstance(layers, tuple) and all(
        isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in layers
    )
    if not whole or not layers:
        raise InterventionError(
            f"Steer: layer={layer!r} is not a layer index; pass one integer, e.g. layer=3, "
            "or a list of them, e.g. layer=[2, 3]"
        )
    return tuple(int(x) for x in layers)


@dataclass(frozen=True)
class Knockout:
    """Attention knockout: remove ``(query_pos, key_pos)`` edges before the softmax.

    Positions count tokens of the unpadded text (BOS included when the model adds one);
    each query row renormalises over the keys left. The listed heads' mask at the attention
    call gets minus infinity on those edges, so it works under eager and sdpa attention,
    with GQA and under left padding; during generation it applies to the prompt pass.
    ``layers=`` instead of heads knocks out every head of those layers.

    ``term=`` gives each text its own edges from the term's token span (found with
    ``bindscope.prompts.locate``): with ``query=None`` the edges inside the span (each
    later token of the term to its earlier ones: the pairs BSI measures), with ``query=q``
    the edges from position ``q`` of each text (``-1``: the last token) to every token of
    the span.
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
        """A short form for messages, e.g. ``Zero([(1, 0)])``."""
        if self.heads is not None:
            return f"Knockout({list(self.heads)!r})"
        return f"Knockout(layers={list(self.layers)!r})"

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model and text ``i``; its row ops for that text."""
        model = ctx.model
        if self.heads is not None:
            heads = model.check_heads(self.heads)
        else:
            heads = tuple(
                (layer, h)
                for layer in model.check_layers(self.layers)
                for h in range(model.n_heads)
            )
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
        return (KnockoutOp(self.describe(), "head_out", _units(heads), None, edges),)


def _check_rows_keep_a_key(model: LanguageModel, heads, removed: dict, text, i: int) -> None:
    """Refuse a Knockout that leaves a query no key its layer's window lets it see.

    Such a row would renormalise over masked keys (future ones included): wrong numbers.
    """
    windows = _windows(model)
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


def short(text) -> str:
    """``repr(text)``, cut to 60 characters for an error message."""
    text = repr(text)
    return text if len(text) <= 60 else text[:57] + "...'"


def _check_means(
    model: LanguageModel, spec: Mean, site: str, units: Units
) -> dict[int, torch.Tensor]:
    """Each layer's means as ``[U, k]``, checked for presence, shape and finiteness."""
    means = getattr(spec.means, "means", spec.means)
    helper = (
        "head_means(model, reference, heads)"
        if site == "head_out"
        else f"site_means(model, reference, {site!r}, layers)"
    )
    taken_at = getattr(spec.means, "site", site)  # SiteMeans and HeadMeans say; a dict cannot
    if taken_at != site:
        raise InterventionError(
            f"{model.name}: {spec.describe()} replaces site {site!r} but its means were taken "
            f"at site {taken_at!r}; means of one site are not "
            f"activations of another: build them with {helper}"
        )
    if not isinstance(means, dict):
        raise InterventionError(
            f"{model.name}: {spec.describe()} needs means={helper}, got {type(spec.means).__name__}"
        )
    shape = _width(model, site)
    wanted = list(shape) if site == "head_out" else [shape[1]]
    out = {}
    for layer, unit_list in units:
        if layer not in means:
            where = f"head ({layer}, {unit_list[0]})" if site == "head_out" else site
            raise InterventionError(
                f"{model.name}: no reference means for layer {layer} ({where}); "
                f"include the layer in {helper}"
            )
        value = means[layer]
        if not isinstance(value, torch.Tensor) or list(value.shape) != wanted:
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise InterventionError(
                f"{model.name}: {spec.describe()}: the means of layer {layer} are {got}, not a "
                f"tensor [{', '.join(map(str, wanted))}]; build them with {helper}"
            )
        for unit in unit_list if site == "head_out" else (None,):
            part = value if unit is None else value[unit]
            if not bool(torch.isfinite(part).all()):
                name = f"head ({layer}, {unit})" if unit is not None else site
                raise InterventionError(
                    f"{model.name}: {spec.describe()}: the means of {name} (layer {layer}) are "
                    f"not finite (NaN or infinity); recompute them with {helper} on "
                    "reference texts the model runs cleanly"
                )
        out[layer] = value.view(*shape)
    return out


def _windows(model: LanguageModel) -> tuple[int | None, ...]:
    """Each layer's sliding window (None: full attention; no config: all full)."""
    config = getattr(getattr(model, "hf", None), "config", None)
    return attention_windows(config) if config is not None else ()


Spec = Zero | Mean | Patch | Resample | Steer | Knockout | PathPatch
#: Every spec class: ``resolve.as_specs`` recognises these (a new spec is added here).
SPEC_TYPES = (Zero, Mean, Patch, Resample, Steer, Knockout, PathPatch)


def _check_source_count(ctx: RowContext, spec: str, sources: Sequence[str]) -> None:
    """One source text per text, or a single one for all; else a clear error."""
    if len(sources) not in (1, len(ctx.texts)):
        raise InterventionError(
            f"{ctx.model.name}: {spec} has {len(sources)} source texts for {len(ctx.texts)} "
            "texts; give one source per text (or a single source for all)"
        )


def _equal_length_donor(
    ctx: RowContext, i: int, spec: str, sources: Sequence[str], fix: str
) -> tuple[int, ...]:
    """Text ``i``'s source as token ids; refused, with ``fix``, unless it is as long."""
    source = sources[0] if len(sources) == 1 else sources[i]
    donor, n = tuple(ctx.ids(source)), ctx.length(i)
    if len(donor) != n:
        raise InterventionError(
            f"{ctx.model.name}: {spec} needs equal lengths, but text #{i} {short(ctx.texts[i])} "
            f"has {n} tokens and its source {short(source)} has {len(donor)}; {fix}"
        )
    return donor
