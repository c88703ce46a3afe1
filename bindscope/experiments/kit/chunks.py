"""Items in chunks: prompt sets, the record order that fills batches, resumable chunked loops."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from tqdm.auto import tqdm

from bindscope.errors import InputError
from bindscope.prompts.prompt_sets import PromptRecord, PromptSet, load
from bindscope.protocols import LanguageModel
from bindscope.results.records import RecordWriter

Item = TypeVar("Item")


def prompt_set(prompts: str | Path | PromptSet) -> PromptSet:
    """Load a prompt set by name or path (or pass one through)."""
    return prompts if isinstance(prompts, PromptSet) else load(prompts)


def batch_order(model: LanguageModel, records: Iterable[PromptRecord]) -> list[PromptRecord]:
    """Records by task, choice count and token length (then key).

    Chunks of items in this order fill whole batches of one kind (recognition scores
    4-choice and True/False items apart), and each batch carries little padding.
    """
    return sorted(
        records,
        key=lambda r: (r.task, len(r.choices or ()), len(model.tokenize(r.template)), r.key),
    )


def chunk_items(batch_size: int, generation_batch_size: int, about: int) -> int:
    """Items per written chunk: ``about``, rounded up to whole batches of both kinds.

    A multiple of both batch sizes (of the larger where their least common multiple is
    large), so that, with items ordered by task, no chunk ends in a part-filled batch except
    where a task ends.
    """
    whole = math.lcm(batch_size, generation_batch_size)
    if whole > 4 * max(batch_size, generation_batch_size):
        whole = max(batch_size, generation_batch_size)
    return whole * math.ceil(about / whole)


def run_chunks(
    items: Sequence[Item],
    *,
    writer: RecordWriter,
    key: Callable[[Item], str],
    work: Callable[[list[Item]], list[dict]],
    chunk_size: int,
    desc: str,
    progress: bool,
) -> int:
    """Run ``work`` on the pending items in chunks, writing each chunk's records at once.

    Returns the number of items run (those not already finished on disk).
    """
    if chunk_size < 1:  # a negative batch size would otherwise run nothing and say nothing
        raise InputError(
            f"batch_size must be 1 or more (it gave chunks of {chunk_size} items); pass e.g. "
            "batch_size=16 (--batch-size 16)"
        )
    pending = [item for item in items if key(item) not in writer]
    bar = tqdm(
        total=len(items),
        initial=len(items) - len(pending),
        desc=desc,
        unit="item",
        disable=not progress,
    )
    for start in range(0, len(pending), chunk_size):
        chunk = pending[start : start + chunk_size]
        writer.write_many(work(chunk))
        bar.update(len(chunk))
    bar.close()
    return len(pending)


__all__ = ["batch_order", "chunk_items", "prompt_set", "run_chunks"]
