"""Intervention specs: *what* is done to which heads, one vocabulary for every call.

Every call that runs the model (``Model.logits``, ``attention_probs``, ``generate``,
``generate_ids`` and the runners) takes ``intervene=`` (one spec or a list applied to
every text) and ``per_row=`` (one spec, list of specs or ``None`` per text). All of them
act at the input of the output projection (the per-head outputs), except ``Knockout``,
which removes attention edges before the softmax.

Specs are checked against the model and the texts before any trace runs
(`resolve_rows`); the trace itself sees only plain tensors (``plan.py`` -> ``ops``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from bindscope.errors import InterventionError
from bindscope.families import attention_windows
from bindscope.protocols import LanguageModel

__all__ = ["Knockout", "Mean", "Patch", "Resample", "Spec", "Zero", "as_specs", "resolve_rows"]


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
        out.append((int(item[0]), int(item[1])))
    return tuple(out)


@dataclass(frozen=True)
class Zero:
    """Zero-ablation: the heads' outputs are set to zero at every position."""

    heads: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", _pairs(self.heads, "head"))


@dataclass(frozen=True, eq=False)
class Mean:
    """Mean-ablation: the heads' outputs are replaced by their means over reference texts.

    Attributes:
        means: ``HeadMeans`` from ``head_means(model, reference, heads)`` (or a plain
            ``{layer: [H, hd]}`` dict).
    """

    heads: tuple[tuple[int, int], ...]
    means: object

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", _pairs(self.heads, "head"))


@dataclass(frozen=True)
class Patch:
    """Activation patching: text ``i`` takes the heads' outputs of a clean run on ``source[i]``.

    ``source`` has one text per target text (or a single text used for all of them), each
    tokenizing to the same length as its target. ``positions`` restricts the patch to those
    token positions of the unpadded text.
    """

    heads: tuple[tuple[int, int], ...]
    source: tuple = ()
    positions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", _pairs(self.heads, "head"))
        source = self.source
        object.__setattr__(self, "source", (source,) if isinstance(source, str) else tuple(source))
        if self.positions is not None:
            object.__setattr__(self, "positions", tuple(int(p) for p in self.positions))


@dataclass(frozen=True)
class Resample:
    """Resample-ablation: each text's heads take the outputs of a random *other* reference text.

    The donor of each text is drawn with ``torch.Generator().manual_seed(seed)``, is
    recorded by `donors`, and is position-aligned from the end (positions the donor does
    not have are left alone).
    """

    heads: tuple[tuple[int, int], ...]
    reference: tuple = ()
    seed: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", _pairs(self.heads, "head"))
        object.__setattr__(self, "reference", tuple(self.reference))

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
                    f"Resample: text #{i} {_short(text)} has no other text in the reference "
                    "to draw from; add different reference texts"
                )
            pick = int(torch.randint(len(candidates), (1,), generator=generator))
            chosen.append(candidates[pick])
        return tuple(chosen)


@dataclass(frozen=True)
class Knockout:
    """Attention knockout: remove ``(query_pos, key_pos)`` edges before the softmax.

    Positions count tokens of the unpadded text (BOS included when the model adds one);
    each query row renormalises over the keys left. The listed heads' mask at the attention
    call gets minus infinity on those edges, so it works under eager and sdpa attention,
    with GQA and under left padding; during generation it applies to the prompt pass.
    """

    heads: tuple[tuple[int, int], ...]
    edges: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", _pairs(self.heads, "head"))
        object.__setattr__(self, "edges", _pairs(self.edges, "edge"))


Spec = Zero | Mean | Patch | Resample | Knockout
SPEC_TYPES = (Zero, Mean, Patch, Resample, Knockout)


def _short(text) -> str:
    text = repr(text)
    return text if len(text) <= 60 else text[:57] + "...'"


def as_specs(entry, *, means=None) -> tuple:
    """One ``intervene``/``per_row`` entry as a tuple of specs.

    ``None`` and empty lists mean no intervention; a list of ``(layer, head)`` pairs is the
    old head-list form (zero-ablation, or mean-ablation when ``means`` is given).
    """
    if entry is None:
        return ()
    if isinstance(entry, SPEC_TYPES):
        return (entry,)
    if isinstance(entry, dict):
        entry = [(layer, h) for layer, hs in entry.items() for h in hs]
    items = list(entry)
    if not items:
        return ()
    if all(isinstance(x, SPEC_TYPES) for x in items):
        return tuple(items)
    if any(isinstance(x, SPEC_TYPES) for x in items):
        raise InterventionError(
            "an intervention list mixes specs and (layer, head) pairs; wrap the pairs, "
            "e.g. [Zero([(2, 8)]), Patch(...)]"
        )
    return (Zero(tuple(items)) if means is None else Mean(tuple(items), means),)


@dataclass(frozen=True)
class RowOp:
    """One checked intervention of one text, in the form ``plan.py`` turns into tensors.

    ``kind`` is ``zero``, ``mean``, ``donor`` (Patch and Resample) or ``knockout``.
    """

    kind: str
    heads: tuple[tuple[int, int], ...]
    means: dict | None = None
    donor: tuple[int, ...] | None = None
    positions: tuple[int, ...] | None = None
    edges: tuple[tuple[int, int], ...] = ()


def _ids(model: LanguageModel, text) -> list[int]:
    return model.tokenize(text) if isinstance(text, str) else list(text)


def resolve_rows(
    model: LanguageModel,
    texts: Sequence,
    *,
    intervene=None,
    per_row=None,
    ablate=None,
    means=None,
) -> list[tuple[RowOp, ...]]:
    """Check every spec against the model and the texts; one tuple of ops per text.

    ``ablate`` (zero-ablation shorthand), ``intervene`` and ``per_row[i]`` add up, in that
    order. ``means`` turns ``ablate`` and head-list entries into mean-ablation (the old
    ``generate_ids(means=)`` form).

    Raises:
        HeadSpecError: A head or layer is out of range (names the model and head).
        InterventionError: A spec does not fit a text (names the text and what is wrong).
    """
    texts = list(texts)
    _check_per_row(per_row, len(texts))
    shared = as_specs(ablate, means=means) + as_specs(intervene, means=means)
    rows = [
        shared + (as_specs(per_row[i], means=means) if per_row else ()) for i in range(len(texts))
    ]
    lengths: dict[int, int] = {}

    def length(i: int) -> int:
        if i not in lengths:
            lengths[i] = len(_ids(model, texts[i]))
        return lengths[i]

    donors: dict[int, tuple[int, ...]] = {}  # id(Resample) -> donors, drawn once per call
    out = []
    for i, specs in enumerate(rows):
        ops = []
        for spec in specs:
            heads = model.check_heads(spec.heads)
            if not heads:
                continue
            if isinstance(spec, Zero):
                ops.append(RowOp("zero", heads))
            elif isinstance(spec, Mean):
                ops.append(RowOp("mean", heads, means=_check_means(model, spec, heads)))
            elif isinstance(spec, Patch):
                ops.append(_patch_op(model, texts, i, spec, heads, length(i)))
            elif isinstance(spec, Resample):
                if id(spec) not in donors:
                    donors[id(spec)] = spec.donors(texts)
                ref = spec.reference[donors[id(spec)][i]]
                ops.append(RowOp("donor", heads, donor=tuple(_ids(model, ref))))
            elif isinstance(spec, Knockout) and spec.edges:
                ops.append(_knockout_op(model, texts, i, spec, heads, length(i)))
        out.append(tuple(ops))
    return out


def _check_per_row(per_row, n_texts: int) -> None:
    """``per_row`` must have one entry per text (raises ``InterventionError``)."""
    if per_row is not None and (isinstance(per_row, SPEC_TYPES) or len(per_row) != n_texts):
        count = 1 if isinstance(per_row, SPEC_TYPES) else len(per_row)
        raise InterventionError(
            f"per_row has {count} entries for {n_texts} texts; give one spec, list of "
            "specs or None per text (or use intervene= for the same spec on every text)"
        )


def _check_means(model: LanguageModel, spec: Mean, heads) -> dict:
    means = getattr(spec.means, "means", spec.means)
    if not isinstance(means, dict):
        raise InterventionError(
            f"{model.name}: Mean(heads, means) needs means=head_means(model, reference, heads), "
            f"got {type(spec.means).__name__}"
        )
    for layer, head in heads:
        if layer not in means:
            raise InterventionError(
                f"{model.name}: no reference means for layer {layer} (head ({layer}, {head})); "
                "include the head in head_means(model, reference, heads)"
            )
    return means


def _patch_op(model: LanguageModel, texts, i, spec: Patch, heads, n: int) -> RowOp:
    if len(spec.source) not in (1, len(texts)):
        raise InterventionError(
            f"{model.name}: Patch has {len(spec.source)} source texts for {len(texts)} texts; "
            "give one source per text (or a single source for all)"
        )
    source = spec.source[0] if len(spec.source) == 1 else spec.source[i]
    donor = tuple(_ids(model, source))
    if len(donor) != n:
        raise InterventionError(
            f"{model.name}: Patch needs equal lengths, but text #{i} {_short(texts[i])} has "
            f"{n} tokens and its source {_short(source)} has {len(donor)}; choose a source "
            "that tokenizes to the same length (or use Resample, aligned from the end)"
        )
    if spec.positions is not None:
        bad = [p for p in spec.positions if not 0 <= p < n]
        if bad:
            raise InterventionError(
                f"{model.name}: Patch positions {bad} are outside text #{i} "
                f"{_short(texts[i])} ({n} tokens, positions 0..{n - 1})"
            )
    return RowOp("donor", heads, donor=donor, positions=spec.positions)


def _knockout_op(model: LanguageModel, texts, i, spec: Knockout, heads, n: int) -> RowOp:
    removed: dict[int, set[int]] = {}
    for q, k in spec.edges:
        if not 0 <= k <= q < n:
            raise InterventionError(
                f"{model.name}: Knockout edge ({q}, {k}) is not a causal edge of text #{i} "
                f"{_short(texts[i])} ({n} tokens): need 0 <= key <= query <= {n - 1}"
            )
        removed.setdefault(q, set()).add(k)
    windows = _windows(model)
    for q, keys in removed.items():
        for layer in sorted({layer for layer, _ in heads}):
            window = windows[layer] if layer < len(windows) else None
            seen = set(range(max(0, q - window + 1) if window else 0, q + 1))
            if seen <= keys:
                where = f" (layer {layer} sees the last {window} keys)" if window else ""
                raise InterventionError(
                    f"{model.name}: Knockout removes every key of query {q}{where} in text "
                    f"#{i} {_short(texts[i])}; keep at least one key so the row can renormalise"
                )
    return RowOp("knockout", heads, edges=spec.edges)


def _windows(model: LanguageModel) -> tuple[int | None, ...]:
    """Each layer's sliding window (None: full attention; no config: all full)."""
    config = getattr(getattr(model, "hf", None), "config", None)
    return attention_windows(config) if config is not None else ()


def any_kind(rows: Iterable[tuple[RowOp, ...]], kind: str) -> bool:
    """Whether any text has an op of this kind."""
    return any(op.kind == kind for ops in rows for op in ops)
