"""Items in chunks: prompt sets, and the record order and chunk size that fill batches."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from pathlib import Path

from bindscope.prompts.prompt_sets import PromptRecord, PromptSet, load
from bindscope.protocols import LanguageModel


def prompt_set(prompts: str | Path | PromptSet) -> PromptSet:
    """Load a prompt set by name or path (or pass one through)."""
    return prompts if isinstance(prompts, PromptSet) else load(prompts)


def batch_order(model: LanguageModel, records: Iterable[PromptRecord]) -> list[PromptRecord]:
    """Records by task, choice count and token length (then key)."""
    return sorted(
        records,
        key=lambda r: (r.task, len(r.choices or ()), len(model.tokenize(r.template)), r.key),
    )


def chunk_items(batch_size: int, generation_batch_size: int, about: int) -> int:
    """Items per written chunk: ``about``, rounded up to whole batches of both kinds."""
    whole = math.lcm(batch_size, generation_batch_size)
    if whole > 4 * max(batch_size, generation_batch_size):
        whole = max(batch_size, generation_batch_size)
    return whole * math.ceil(about / whole)


def spread_over_terms(items: list[PromptRecord], n: int | None) -> list[PromptRecord]:
    """``n`` items taken in turn from each term (first of each term, then second, ...)."""
    by_term: dict[str, list] = {}
    for item in items:
        by_term.setdefault(item.term, []).append(item)
    rounds = itertools.zip_longest(*by_term.values())
    return [item for row in rounds for item in row if item is not None][:n]


def first_items(items: list[PromptRecord], limit: int | None, spread: bool) -> list[PromptRecord]:
    """The first ``limit`` items (all with None), or with ``spread`` taken term by term."""
    return spread_over_terms(items, limit) if spread else items[:limit]


__all__ = ["batch_order", "chunk_items", "first_items", "prompt_set", "spread_over_terms"]
