"""The value specs ``Zero``, ``Mean``, ``Patch`` and ``Resample``, at heads or at any site.

A spec checks itself and turns into row ops for one text (`row_ops`); the trace sees only
tensors (``plan.py`` -> ``ops``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bindscope.batch import check_text, token_ids
from bindscope.errors import InterventionError, is_whole, whole_number
from bindscope.families import FINAL_SITES, SITE_NAMES
from bindscope.interventions.dictionary import Features
from bindscope.interventions.head_checks import head_pairs
from bindscope.interventions.means import checked_feature_means, checked_means
from bindscope.interventions.ops import by_layer
from bindscope.interventions.rowops import (
    UNIT_SITES,
    DonorOp,
    ReplaceOp,
    RowOp,
    Units,
    unit_shape,
)
from bindscope.protocols import LanguageModel


def _pairs(items: Any, what: str) -> tuple[tuple[int, int], ...]:
    if isinstance(items, dict):
        items = head_pairs(items)
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        pair = "(layer, head)" if what == "head" else "(query, key)"
        raise InterventionError(
            f"{what}s={items!r} is not a list of {pair} pairs; pass e.g. [(3, 0), (2, 1)]"
        )
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


def _integer(value: object, what: str, item: object) -> int:
    """A whole number (a Python or numpy integer), never a bool, float or string."""
    if is_whole(value):
        return int(value)
    raise InterventionError(
        f"{what} {item!r}: {value!r} is a {type(value).__name__}, not an integer; token "
        "positions are whole numbers counted from 0 in the unpadded text"
    )


def _positions(positions: Any) -> tuple[int, ...] | None:
    if positions is None:
        return None
    if is_whole(positions):
        positions = (positions,)
    listed = isinstance(positions, Iterable) and not isinstance(positions, (str, bytes))
    given, positions = positions, tuple(positions) if listed else ()
    if not positions:  # positions=[] would change nothing
        raise InterventionError(
            f"positions={given!r} is not a token position or a list of them; pass e.g. "
            "positions=[5] (counted from 0 in the unpadded text), or None for every position"
        )
    return tuple(_integer(p, "position", p) for p in positions)


def _layers(layers: object) -> Any:
    """Layers as given (checked against the model when used); one int is one layer."""
    if layers is None or isinstance(layers, (str, bytes)):
        return layers
    if is_whole(layers):
        return (int(layers),)
    if not isinstance(layers, Iterable):
        raise InterventionError(
            f"layers={layers!r} is not a layer index or a list of them; pass e.g. layers=[0, 2]"
        )
    return tuple(layers)


def _layer_list(layer: Any, spec: str) -> tuple[int, ...]:
    """A ``layer`` of ``Steer``/``Hook``: one integer or a list (ranges are checked when used)."""
    listed = isinstance(layer, Iterable) and not isinstance(layer, (str, bytes))
    layers = (layer,) if is_whole(layer) else tuple(layer) if listed else ()
    if not layers or not all(is_whole(x) for x in layers):
        raise InterventionError(
            f"{spec}: layer={layer!r} is not a layer index; pass one integer, e.g. layer=3, "
            "or a list of them, e.g. layer=[2, 3]"
        )
    return tuple(int(x) for x in layers)


def _known_site(spec: str, site: object, also: tuple[str, ...] = ()) -> None:
    """Refuse a site name that is not one of ``SITE_NAMES`` (or ``also``)."""
    if site not in (*SITE_NAMES, *also):
        raise InterventionError(
            f"{spec}: unknown site {site!r}; the sites are {', '.join(SITE_NAMES)}"
        )


class RowContext:
    """What the specs of one call share: the texts, their token counts, drawn donors."""

    def __init__(self, model: LanguageModel, texts: Sequence) -> None:
        self.model, self.texts = model, list(texts)
        self._lengths: dict[int, int] = {}
        self.drawn: dict[int, tuple] = {}  # id(spec) -> donors or source states, once per call
        self.edge_masks: dict[int, np.ndarray] = {}  # id(PathPatch) -> its checked mask

    def ids(self, text: str | Sequence[int]) -> list[int]:
        """A text's token ids (a token-id list as it is)."""
        return token_ids(self.model, text)

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
    """Specs that act on heads or on a site of some layers (a string ``heads`` is the site)."""

    heads: Any = None
    site: str | None = field(default=None, kw_only=True)
    layers: Any = field(default=None, kw_only=True)
    positions: tuple[int, ...] | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        heads = self.heads
        if isinstance(heads, Features):
            _check_features_alone(self)
            object.__setattr__(self, "positions", _positions(self.positions))
            return
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
        if self.site is not None:
            _known_site(type(self).__name__, self.site, FINAL_SITES)
        if self.heads is not None and self.site not in (None, "pattern", *UNIT_SITES):
            raise InterventionError(
                f"{type(self).__name__}: (layer, unit) pairs pick heads at head_out, pattern, q, "
                f"k, v or neurons at mlp_post, not units of {self.site!r}: give layers= instead"
            )
        object.__setattr__(self, "positions", _positions(self.positions))

    def describe(self) -> str:
        """A short form for messages, e.g. ``Zero([(1, 0)])``."""
        if isinstance(self.heads, Features):
            return f"{type(self).__name__}({self.heads!r})"
        if self.heads is not None and self.site in (None, "head_out"):
            return f"{type(self).__name__}({list(self.heads)!r})"
        if self.heads is not None:
            return f"{type(self).__name__}({list(self.heads)!r}, site={self.site!r})"
        return f"{type(self).__name__}({self.site or 'head_out'!r}, layers={list(self.layers)!r})"

    def target(self, model: LanguageModel, *, pattern: bool = False) -> tuple[str, Units]:
        """The site and the units of each layer, checked (``pattern``: ``Patch`` may act on it)."""
        if isinstance(self.heads, Features):
            return feature_target(model, self.heads)
        site = self.site or "head_out"
        _check_site(model, site, self.describe(), pattern=pattern)
        if self.heads is not None and site in ("head_out", "pattern"):
            return site, _units(model.check_heads(self.heads))
        if self.heads is not None:
            return site, _units(_check_units(model, site, self.heads, self.describe()))
        return site, every_unit(model, site, self.layers)

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model and text ``i``; its row ops for that text."""
        site, units = self.target(ctx.model)
        ctx.check_positions(self.describe(), self.positions, i)
        values = self._values(ctx.model, site, units)
        op = ReplaceOp(
            self.describe(), site, units, self.positions, values, dictionary=self.dictionary()
        )
        return (op,)

    def _values(self, model: LanguageModel, site: str, units: Units) -> Any:
        """What `row_ops` replaces the cells by (None: zero)."""
        return None

    def donor_ops(self, site: str, units: Units, donor: tuple[int, ...]) -> tuple[RowOp, ...]:
        """The spec's one row op: copy ``donor``'s activations into its cells."""
        dictionary = self.dictionary()
        op = DonorOp(self.describe(), site, units, self.positions, donor, dictionary=dictionary)
        return (op,)

    def dictionary(self) -> Any:
        """The ``TraceDictionary`` whose features the spec edits, or None (row ops carry it)."""
        return self.heads.dictionary.weights if isinstance(self.heads, Features) else None


def _check_features_alone(spec: _Targeted) -> None:
    """Features say their site and layer: refuse ``site=``/``layers=`` beside them."""
    if spec.site is not None or spec.layers is not None:
        raise InterventionError(
            f"{type(spec).__name__}: {spec.heads!r} are at site {spec.heads.dictionary.site!r} "
            f"of layer {spec.heads.dictionary.layer} (the dictionary's); drop site=/layers="
        )


def feature_target(model: LanguageModel, features: Features) -> tuple[str, Units]:
    """The site of ``features``' dictionary and its latents as units, checked against the model."""
    features.dictionary.check(model)
    return features.dictionary.site, ((features.dictionary.layer, features.indices),)


def _check_site(model: LanguageModel, site: str, spec: str, *, pattern: bool = False) -> None:
    if site == "pattern" and not pattern:
        raise InterventionError(
            f"{model.name}: {spec}: the attention probabilities (pattern) can be captured, not "
            "replaced; copy them from another run with Patch, or remove edges with Knockout"
        )
    if site == "scores":
        raise InterventionError(
            f"{model.name}: {spec}: the attention scores are computed from q and k, not read "
            "back; they can be captured, not replaced: edit q or k, or use Knockout"
        )
    if site in FINAL_SITES:
        raise InterventionError(
            f"{model.name}: {spec}: {site} is the final norm's normaliser, computed from "
            "its input; it can be captured, not replaced: edit resid_post of the last layer"
        )
    if site not in model.sites:
        raise InterventionError(
            f"{model.name} ({model.family}): {spec}: the family has no site {site!r}; its "
            f"sites are {', '.join(s for s in model.sites if s != 'pattern')}"
        )


def _check_units(
    model: LanguageModel, site: str, pairs: Sequence, spec: str
) -> list[tuple[int, int]]:
    """``(layer, unit)`` pairs checked against the site's unit count (heads, kv heads, neurons)."""
    count = unit_shape(model, site)[0]
    what = "neuron" if site == "mlp_post" else "kv head" if site in ("k", "v") else "head"
    checked = []
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise InterventionError(f"{model.name}: {spec}: {pair!r} is not a (layer, {what}) pair")
        layer, unit = pair
        model.check_layers([layer])
        name, fix = f"{model.name}: {spec}: layer {layer} {what}", f"pass a {what} of site {site!r}"
        unit = whole_number(unit, name, fix, least=0, below=count, error=InterventionError)
        checked.append((int(layer), unit))
    return sorted(set(checked))


def every_unit(model: LanguageModel, site: str, layers: Any) -> Units:
    """Every unit of ``site`` at each of ``layers`` (checked against the model)."""
    units = tuple(range(unit_shape(model, site)[0]))
    return tuple((layer, units) for layer in model.check_layers(layers))


def _units(heads: Sequence[tuple[int, int]]) -> Units:
    """Sorted ``(layer, head)`` pairs as ``((layer, (heads...)), ...)``."""
    return tuple((layer, tuple(hs)) for layer, hs in by_layer(heads).items())


@dataclass(frozen=True)
class Zero(_Targeted):
    """Zero-ablation: the heads' outputs (or a site's activations) are set to zero.

    ``positions`` (of the unpadded text) restricts it; by default every position and step.
    """


@dataclass(frozen=True, eq=False)
class Mean(_Targeted):
    """Mean-ablation: the heads' outputs (or a site's activations) take reference means.

    ``means``: ``head_means(model, reference, heads)`` or ``site_means(model, reference,
    site, layers)`` (or plain ``{layer: [H, hd]}`` / ``{layer: [d]}`` dicts).
    """

    means: object = None
    # the means are tensors: a Mean equals only itself
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def _values(self, model: LanguageModel, site: str, units: Units) -> dict[int, torch.Tensor]:
        if isinstance(self.heads, Features):
            return checked_feature_means(model, self, units)
        return checked_means(model, self, site, units)


@dataclass(frozen=True)
class Patch(_Targeted):
    """Activation patching: text ``i`` takes the activations of a clean run on ``source[i]``.

    ``source``: one text per text (or one for all), each of its target's length in tokens;
    ``positions`` restricts it. ``Patch("resid_pre", corrupted, layers=[0], positions=[5])``.
    """

    source: tuple = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "source", source_texts("Patch", self.source))

    def row_ops(self, ctx: RowContext, i: int) -> tuple[RowOp, ...]:
        """Check the spec against the model and text ``i``; its row ops for that text."""
        site, units = self.target(ctx.model, pattern=True)
        _check_source_count(ctx, "Patch", self.source)
        donor = _equal_length_donor(
            ctx, i, "Patch", self.source,
            "choose a source that tokenizes to the same length (or use Resample, aligned from "
            "the end)",
        )  # fmt: skip
        ctx.check_positions("Patch", self.positions, i)
        return self.donor_ops(site, units, donor)


@dataclass(frozen=True)
class Resample(_Targeted):
    """Resample-ablation: each text's heads (or site) take a random *other* reference text's.

    Donors are drawn with ``torch.Generator().manual_seed(seed)`` (`donors`) and aligned from
    the end.
    """

    reference: tuple = ()
    seed: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "reference", source_texts("Resample", self.reference, "reference"))
        seed = self.seed
        fix = "the donors are drawn with torch.Generator().manual_seed(seed): pass e.g. seed=0"
        seed = whole_number(seed, "Resample: seed", fix, error=InterventionError)
        object.__setattr__(self, "seed", seed)

    def donors(self, texts: Sequence) -> tuple[int, ...]:
        """Index into ``reference`` of each text's donor (deterministic given ``seed``)."""
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
        return self.donor_ops(site, units, donor)


def short(text: object) -> str:
    """``repr(text)``, cut to 60 characters for an error message."""
    text = repr(text)
    return text if len(text) <= 60 else text[:57] + "...'"


def source_texts(spec: str, texts: Any, name: str = "source") -> tuple:
    """``source=`` (or ``reference=``) as a tuple of checked texts; one string is one text."""
    if isinstance(texts, str):
        return (texts,)
    try:
        texts = tuple(texts)
    except TypeError:
        raise InterventionError(
            f"{spec}: {name}={short(texts)} is not a text or a list of texts; give a list of "
            "texts (strings or token-id lists), or a single string"
        ) from None
    for k, text in enumerate(texts):
        check_text(text, f"{spec} {name} #{k}")
    return texts


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
