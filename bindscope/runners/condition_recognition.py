"""Recognition under many ablated head sets, each started at its lowest ablated layer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from bindscope.batch import Batch
from bindscope.errors import InputError
from bindscope.interventions import Mean, SiteMeans, Zero
from bindscope.interventions.head_checks import Head
from bindscope.interventions.resolve import resolve_rows
from bindscope.metrics.behaviour import RecognitionResult
from bindscope.prompts.continuations import continuation_ids
from bindscope.prompts.prompt_sets import PromptRecord
from bindscope.protocols import LanguageModel
from bindscope.runners.behaviour import records_of
from bindscope.runners.prefix import (
    choice_pass,
    choice_rows,
    choice_scores,
    kept_layers,
    prompt_pass,
    recognition_result,
    row_plan,
)

__all__ = ["condition_recognition"]


@torch.no_grad()
def condition_recognition(
    model: LanguageModel,
    records: Sequence[PromptRecord],
    conditions: Sequence[Sequence[tuple[int, int]]],
    *,
    means: SiteMeans | None = None,
    batch_size: int = 16,
) -> tuple[list[RecognitionResult], list[list[RecognitionResult]]]:
    """``(clean [R], ablated [C][R])``: `recognition` of every record under each head set."""
    records, checked = _checked(model, records, conditions)
    specs = [Zero(c) if means is None else Mean(c, means) for c in checked]
    starts = [min(layer for layer, _ in heads) for heads in checked]
    prompts = [model.tokenize(r.template) for r in records]
    choices = [[continuation_ids(model.tokenizer, c) for c in r.choices or ()] for r in records]
    found: list[list] = [[None] * len(records) for _ in range(len(checked) + 1)]  # clean first
    by_count: dict[int, list[int]] = {}  # 4-choice and True/False items run apart
    for i, cs in enumerate(choices):
        by_count.setdefault(len(cs), []).append(i)
    for members in by_count.values():
        for batch in model.batches([prompts[i] for i in members], batch_size=batch_size):
            mine = [members[i] for i in batch.indices]
            batch_choices = [choices[i] for i in mine]
            scored = _score_batch(model, batch, batch_choices, specs, starts, batch_size)
            for row, values in enumerate(scored):
                for r, i in enumerate(mine):
                    found[row][i] = values[r]
    results = [
        [recognition_result(rec, values) for rec, values in zip(records, row)] for row in found
    ]
    return results[0], results[1:]


def _checked(
    model: LanguageModel,
    records: Sequence[PromptRecord],
    conditions: Sequence[Sequence[tuple[int, int]]],
) -> tuple[list[PromptRecord], list[tuple[Head, ...]]]:
    records = records_of(records, "recognition", "condition_recognition")
    checked = [model.check_heads(c) for c in conditions]
    for i, heads in enumerate(checked):
        if not heads:
            raise InputError(f"condition #{i} ablates no head; give at least one (layer, head)")
    return records, checked


@dataclass(frozen=True)
class _CleanRun:
    batch: Batch
    choices: list[list[list[int]]]
    prompt_outputs: list  # [b, n, d] per layer below the highest start
    choice_outputs: list  # the choice pass's, at choice_rows (none: one-token choices)
    cache: list  # the prompt's cache layers, copied before the choices extended them
    scores: list[list[float]]


def _clean_run(
    model: LanguageModel, batch: Batch, choices: list[list[list[int]]], keep: int
) -> _CleanRun:
    b, n_c = len(choices), len(choices[0])
    flat = [c for cs in choices for c in cs]  # row r * n_c + j: choice j of prompt r
    first, cache, prompt_outputs = prompt_pass(model, batch, None, keep_layers=keep)
    kept = kept_layers(cache.layers, torch.arange(b))  # before the choices extend it
    none = [()] * b
    rest, choice_outputs = choice_pass(model, batch, flat, cache, none, n_c, keep_layers=keep)
    scores = choice_scores(first, rest, flat, n_c)
    return _CleanRun(batch, choices, prompt_outputs, choice_outputs, kept, scores)


def _condition_pass(
    model: LanguageModel, clean: _CleanRun, start: int, rows: torch.Tensor, specs: list
) -> list[list[float]]:
    part, n_c = clean.batch.rows(rows), len(clean.choices[0])
    ids = [part.input_ids[i, part.pad(i) :].tolist() for i in range(len(rows))]
    resolved = resolve_rows(model, ids, per_row=specs)
    residual = clean.prompt_outputs[start - 1][rows] if start else None
    plan = row_plan(model, part, resolved)
    first, cache, _ = prompt_pass(model, part, plan, start=start, residual=residual)
    mine = [clean.choices[r][j] for r in rows.tolist() for j in range(n_c)]
    rest = None
    if max(len(c) for c in mine) > 1:
        for i, layer in enumerate(kept_layers(clean.cache[:start], rows)):  # the skipped ones
            cache.layers[i] = layer
        # the clean stream is as wide as the batch's widest row; a row's choices sit where
        # they sit there, so its first columns are what these choices compute
        picked = choice_rows(model, rows, n_c)
        residual = clean.choice_outputs[start - 1][picked] if start else None
        rest, _ = choice_pass(
            model, part, mine, cache, resolved, n_c, start=start, residual=residual
        )
    return choice_scores(first, rest, mine, n_c)


def _score_batch(
    model: LanguageModel,
    batch: Batch,
    choices: list[list[list[int]]],
    specs: list[Zero | Mean],
    starts: list[int],
    rows_per_pass: int,
) -> list[list[list[float]]]:
    # A pass starts at its lowest row's start; a row that starts higher runs the layers
    # between from the same clean stream, which is exact, and the passes stay full.
    clean = _clean_run(model, batch, choices, keep=max(starts, default=0))
    per_condition: list[list] = [[None] * len(choices) for _ in specs]
    pairs = sorted((starts[c], c, r) for c in range(len(specs)) for r in range(len(choices)))
    for lo in range(0, len(pairs), rows_per_pass):
        chunk = pairs[lo : lo + rows_per_pass]
        rows = torch.tensor([r for _, _, r in chunk])
        found = _condition_pass(model, clean, chunk[0][0], rows, [specs[c] for _, c, _ in chunk])
        for (_, c, r), values in zip(chunk, found):
            per_condition[c][r] = values
    return [clean.scores, *per_condition]
