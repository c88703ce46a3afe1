"""Validate head specifications before any trace runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from bindscope.errors import HeadSpecError, is_whole

Head = tuple[int, int]

__all__ = ["Head", "head_pairs", "normalize_heads"]


def head_pairs(heads: dict, where: str = "") -> list:
    """``{layer: [head, ...]}`` as ``(layer, head)`` pairs (``HeadSpecError`` for a non-list)."""
    for layer, hs in heads.items():
        if isinstance(hs, (str, bytes)) or not isinstance(hs, Iterable):
            raise HeadSpecError(
                f"{where}{layer!r} maps to {hs!r}, not a list; pass e.g. {{3: [0, 5]}}"
            )
    return [(layer, h) for layer, hs in heads.items() for h in hs]


def normalize_heads(
    heads: Iterable[Sequence[int]] | None, *, n_layers: int, n_heads: int, model_name: str
) -> tuple[Head, ...]:
    """Check ``(layer, head)`` pairs (``HeadSpecError`` naming pair, model and ranges); sorted."""
    if heads is None:
        return ()
    if isinstance(heads, dict):
        heads = head_pairs(heads, f"{model_name}: layer ")
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Iterable):
        raise HeadSpecError(
            f"{model_name}: ablate={heads!r} is not a list of (layer, head) pairs; pass e.g. "
            "ablate=[(3, 0), (2, 8)]"
        )
    seen: set[Head] = set()
    for item in heads:
        if isinstance(item, (str, bytes)) or not hasattr(item, "__len__") or len(item) != 2:
            raise HeadSpecError(
                f"{model_name}: head {item!r} is not a (layer, head) pair; pass e.g. "
                "ablate=[(3, 0), (2, 8)]"
            )
        layer, head = (_index(v, item, model_name) for v in item)
        if not 0 <= layer < n_layers:
            raise HeadSpecError(
                f"{model_name}: layer {layer} in head ({layer}, {head}) is out of range; "
                f"the model has layers 0..{n_layers - 1}"
            )
        if not 0 <= head < n_heads:
            raise HeadSpecError(
                f"{model_name}: head {head} in ({layer}, {head}) is out of range; "
                f"layer {layer} has query heads 0..{n_heads - 1}"
            )
        if (layer, head) in seen:
            raise HeadSpecError(
                f"{model_name}: head ({layer}, {head}) is listed twice; list each head once"
            )
        seen.add((layer, head))
    return tuple(sorted(seen))


def _index(value, item, model_name: str) -> int:
    """A layer or head number: a Python or numpy integer, never a bool, float or string."""
    if is_whole(value):
        return int(value)
    raise HeadSpecError(
        f"{model_name}: head {item!r}: {value!r} is a {type(value).__name__}, not an integer; "
        "layers and heads are whole numbers, e.g. ablate=[(3, 0), (2, 8)]"
    )
