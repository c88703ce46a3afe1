"""Which heads a condition ablates or patches (per head, per layer), and how many items."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

from bindscope.errors import InputError
from bindscope.protocols import LanguageModel


def as_pairs(heads: Iterable[Sequence[int]]) -> tuple[tuple[int, int], ...]:
    """Head lists as read from JSON, as the ``(layer, head)`` tuples a spec takes."""
    return tuple((int(layer), int(head)) for layer, head in heads)


def conditions_of(model: LanguageModel, unit: str) -> dict[str, list[list[int]]]:
    """Condition name -> heads: ``L3.H5`` per head, or ``L3`` per layer."""
    if unit == "head":
        layers, heads = range(model.n_layers), range(model.n_heads)
        return {f"L{layer}.H{h}": [[layer, h]] for layer in layers for h in heads}
    if unit == "layer":
        return {
            f"L{layer}": [[layer, h] for h in range(model.n_heads)]
            for layer in range(model.n_layers)
        }
    raise InputError(f"unit must be 'head' or 'layer', not {unit!r}")


def check_limit(limit: object) -> None:
    """Refuse a ``limit`` that is neither None nor a positive integer (raises ``InputError``).

    A slice would take ``limit=-1`` as "all but the last" and ``limit=0`` as nothing.
    """
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1:
        raise InputError(
            f"limit={limit!r} is not a positive integer; pass the number of items to take "
            "(e.g. limit=20), or None for all"
        )


__all__ = ["as_pairs", "check_limit", "conditions_of"]
