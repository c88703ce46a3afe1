"""Activation patching over sites x layers x positions: the grid, in batched traces."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from bindscope.batch import (
    DEFAULT_BATCH_SIZE,
    absolute_positions,
    check_batch_size,
    check_texts,
    read_positions,
    token_ids,
)
from bindscope.errors import InputError, InterventionError, true_or_false
from bindscope.families import site_names
from bindscope.interventions import ops, run_layers
from bindscope.interventions.plan import plan_batches
from bindscope.interventions.resolve import resolve_rows
from bindscope.interventions.specs import Patch
from bindscope.protocols import LanguageModel

__all__ = ["patching_sweep"]

HEAD_SITES = ("head_out", "pattern")  # sites with a unit per head: by_head patches one


@torch.no_grad()
def patching_sweep(
    model: LanguageModel,
    clean: str | Sequence[int],
    corrupt: str | Sequence[int],
    *,
    sites: str | Sequence[str],
    layers: Iterable[int] | None = None,
    positions: int | Sequence[int] | None = None,
    by_head: bool = False,
    metric: Callable[[torch.Tensor], float],
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool = False,
) -> dict[str, torch.Tensor]:
    """``{site: [layers, positions(, heads)]}``: the metric with each clean cell patched in.

    ``corrupt`` runs, as many tokens long as ``clean``; ``metric`` maps the last position's
    logits ``[1, vocab]`` to a number; ``by_head`` patches one head of a head site at a time.
    """
    check_batch_size(batch_size)  # before the progress bar divides by it
    clean_ids, corrupt_ids = _checked_texts(model, clean, corrupt, metric)
    names = _check_sites(model, sites)
    wanted = model.check_layers(layers)
    where = _positions(model, positions, len(corrupt_ids))
    true_or_false(by_head, "by_head")
    split = [model.n_heads] if by_head else []  # a unit per head: one at a time
    shapes = {s: (len(wanted), len(where), *(split if s in HEAD_SITES else [])) for s in names}
    heads = {s: range(shapes[s][2]) if len(shapes[s]) > 2 else [None] for s in names}
    cells = [(s, layer, p, h) for s in names for layer in wanted for p in where for h in heads[s]]
    values = _patched_cells(model, clean_ids, corrupt_ids, cells, metric, batch_size, progress)
    return _grids(values, shapes)


def _grids(values: torch.Tensor, shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    parts = values.split([math.prod(shape) for shape in shapes.values()])
    return {site: part.view(shapes[site]).clone() for site, part in zip(shapes, parts)}


def _patched_cells(
    model: LanguageModel,
    clean_ids: list[int],
    corrupt_ids: list[int],
    cells: list[tuple[str, int, int, int | None]],
    metric: Callable[[torch.Tensor], float],
    batch_size: int,
    progress: bool,
) -> torch.Tensor:
    source = (clean_ids,)
    specs = [
        Patch(site, source, layers=(layer,), positions=(p,))
        if head is None
        else Patch([(layer, head)], source, site=site, positions=(p,))
        for site, layer, p, head in cells
    ]
    texts = [corrupt_ids] * len(cells)
    rows = resolve_rows(model, texts, per_row=specs)
    values = torch.empty(len(cells))
    planned = plan_batches(model, texts, rows, batch_size=batch_size)
    total = math.ceil(len(cells) / batch_size)
    bar = tqdm(planned, total=total, desc="patching sweep", unit="batch", disable=not progress)
    for item in bar:

        def body(donors: Any, plan: Any = item.plan):
            run_layers(model, plan=plan, donors=donors)
            return ops.save(ops.final_logits(model)[:, -1])  # [b, V]: the metric's row

        last = model.trace_batch(item, body)
        for r, index in enumerate(item.batch.indices):
            values[index] = _number(metric(last[r : r + 1].float()), cells[index])
    return values


def _checked_texts(
    model: LanguageModel,
    clean: str | Sequence[int],
    corrupt: str | Sequence[int],
    metric: Callable[[torch.Tensor], float],
) -> tuple[list[int], list[int]]:
    clean_ids, corrupt_ids = (token_ids(model, t) for t in check_texts([clean, corrupt]))
    n = len(corrupt_ids)
    if len(clean_ids) != n:
        raise InputError(
            f"{model.name}: patching_sweep needs texts of one length, but clean is "
            f"{len(clean_ids)} tokens and corrupt {n}; choose a corrupt text that tokenizes "
            "to the same length (one changed word, as in the IOI pairs)"
        )
    if not callable(metric):
        raise InputError(
            f"metric={metric!r} is not a function; pass e.g. "
            "metric=lambda logits: logit_diff(logits, correct_id, wrong_id)"
        )
    return clean_ids, corrupt_ids


def _positions(model: LanguageModel, positions: int | Sequence[int] | None, n: int) -> list[int]:
    chosen = read_positions(positions)
    if chosen is None:
        return list(range(n))
    return absolute_positions(chosen, n, model_name=model.name, text="the clean and corrupt texts")


def _check_sites(model: LanguageModel, sites: str | Iterable[str]) -> list[str]:
    names = site_names(sites, model.name)
    bad = [s for s in names if s not in model.sites or s == "scores"]
    if not names or bad:
        raise InterventionError(
            f"{model.name} ({model.family}): cannot sweep site(s) {bad or names!r}; the sites "
            f"that can be patched are {', '.join(s for s in model.sites if s != 'scores')}"
        )
    return list(dict.fromkeys(names))


def _number(value: object, cell: tuple[str, int, int, int | None]) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        site, layer, p, head = cell
        which = f"{site} of layer {layer}" if head is None else f"{site} of head {(layer, head)}"
        raise InputError(
            f"the metric returned {value!r} for {which} at position {p}; it "
            "must return one finite number from the last position's logits [1, vocab]"
        )
    return float(value)
