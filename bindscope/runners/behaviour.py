"""The behaviour runners, in batches, under any intervention."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from tqdm.auto import tqdm

from bindscope.batch import GENERATION_BATCH_SIZE, Batch
from bindscope.errors import InputError, InterventionError
from bindscope.interventions import ops
from bindscope.interventions.flow_specs import PatternPatch
from bindscope.interventions.resolve import HeadList, Intervention, PerRow, as_specs, resolve_rows
from bindscope.interventions.specs import Patch, Resample
from bindscope.metrics.behaviour import (
    GenerationResult,
    RecognitionResult,
    default_rubric,
    rubric_score,
)
from bindscope.prompts.continuations import continuation_ids
from bindscope.prompts.prompt_sets import PromptRecord
from bindscope.protocols import LanguageModel
from bindscope.runners.attribution_metrics import TargetLogprob, logit_terms
from bindscope.runners.prefix import (
    choice_pass,
    choice_scores,
    prompt_pass,
    recognition_result,
    row_plan,
)


def records_of(
    records: Sequence[PromptRecord], task: str, runner: str | None = None
) -> list[PromptRecord]:
    """The records as a list, refusing any not of ``task`` (``runner``: default ``task``)."""
    records = list(records)
    for r in records:
        if r.task != task:
            raise InputError(f"{r.source or r.key}: {runner or task}() got a {r.task} record")
    return records


def _rows_for(
    model: LanguageModel,
    records: Sequence[PromptRecord],
    *,
    ablate: HeadList | None = None,
    intervene: Intervention = None,
    per_row: PerRow = None,
):
    if per_row is not None and len(per_row) != len(records):
        raise InputError(f"per_row has {len(per_row)} entries for {len(records)} records")
    shared = as_specs(ablate, option="ablate") + as_specs(intervene)
    rows = [
        shared + as_specs(per_row[i] if per_row else None, option="per_row")
        for i in range(len(records))
    ]
    for i, row in enumerate(rows):
        for spec in row:
            if isinstance(spec, (Patch, PatternPatch, Resample)):
                raise InterventionError(
                    f"{model.name}: record {records[i].key}: {type(spec).__name__} needs "
                    "texts of fixed length (as Patch, PatternPatch and Resample do); use it "
                    "with model.logits() or attention_probs()"
                )
    return rows


@torch.no_grad()
def recognition(
    model: LanguageModel,
    records: Sequence[PromptRecord],
    *,
    ablate: HeadList | None = None,
    intervene: Intervention = None,
    per_row: PerRow = None,
    batch_size: int = 16,
    strategy: str = "shared_prefix",
    progress: bool = False,
) -> list[RecognitionResult]:
    """Score every recognition record's choices (``strategy="full"``: prompt + choice whole)."""
    records = records_of(records, "recognition")
    specs = _rows_for(model, records, ablate=ablate, intervene=intervene, per_row=per_row)
    prompts = [model.tokenize(r.template) for r in records]
    rows = resolve_rows(model, prompts, per_row=specs)
    choices = [[continuation_ids(model.tokenizer, c) for c in r.choices or ()] for r in records]
    scores: list[list[float]] = [[] for _ in records]  # every batch fills its rows
    if strategy not in ("shared_prefix", "full"):
        raise ValueError("strategy must be 'shared_prefix' or 'full'")
    if getattr(model, "remote", False):
        strategy = "full"  # the prompt's KV cache would cross the network twice
    score_batch = _shared_prefix_batch if strategy == "shared_prefix" else _full_batch
    batches = list(model.batches(prompts, batch_size=batch_size))
    for batch in tqdm(batches, desc="recognition", unit="batch", disable=not progress):
        found = score_batch(
            model, batch, [choices[i] for i in batch.indices], [rows[i] for i in batch.indices]
        )
        for index, values in zip(batch.indices, found):
            scores[index] = values
    return [recognition_result(record, values) for record, values in zip(records, scores)]


def _full_batch(model: LanguageModel, batch: Batch, choices: list, rows: list) -> list:
    owner = [r for r, cs in enumerate(choices) for _ in cs]  # row s: a choice of prompt r
    flat = [c for cs in choices for c in cs]
    prompts = [batch.input_ids[r, batch.pad(r) :].tolist() for r in range(len(choices))]
    full = model.pad(list(range(len(flat))), [prompts[r] + c for r, c in zip(owner, flat)])
    metrics = [TargetLogprob(len(c)) for c in flat]  # every sequence ends with its choice
    terms, last = logit_terms(model, metrics, full.input_ids)
    plan = row_plan(model, full, [rows[r] for r in owner])
    with model.nnsight.trace(**full.inputs, **last, **model.trace_options):
        if plan:
            ops.run_layers(model, plan=plan)
        sums = ops.choice_logprob_sums(ops.final_logits(model), *terms["logprob"]).save()
    scores = iter(sums.tolist())  # in owner's order: each prompt's choices in turn
    return [[next(scores) for _ in cs] for cs in choices]


def _shared_prefix_batch(model: LanguageModel, batch: Batch, choices: list, rows: list) -> list:
    n_choices = {len(c) for c in choices}
    if len(n_choices) != 1:  # mixed 4-choice and True/False: split by choice count
        out: list[list[float] | None] = [None] * len(choices)
        for count in sorted(n_choices):
            sel = [r for r, c in enumerate(choices) if len(c) == count]
            sub = model.pad(sel, [batch.input_ids[r, batch.pad(r) :].tolist() for r in sel])
            found = _shared_prefix_batch(
                model, sub, [choices[r] for r in sel], [rows[r] for r in sel]
            )
            for r, values in zip(sel, found):
                out[r] = values
        return out
    n_c = n_choices.pop()
    first, cache, _ = prompt_pass(model, batch, row_plan(model, batch, rows))
    flat = [c for cs in choices for c in cs]  # row r*n_c + j
    rest, _ = choice_pass(model, batch, flat, cache, rows, n_c)
    return choice_scores(first, rest, flat, n_c)


def generation(
    model: LanguageModel,
    records: Sequence[PromptRecord],
    *,
    ablate: HeadList | None = None,
    intervene: Intervention = None,
    per_row: PerRow = None,
    prefix: dict[str, str] | None = None,
    rubric: dict | None = None,
    batch_size: int = GENERATION_BATCH_SIZE,
    progress: bool = False,
) -> list[GenerationResult]:
    """Greedy continuations scored by the rubric (``prefix``: a text per term before the stem)."""
    records = records_of(records, "generation")
    rubric = _rubric_for(records, rubric)
    rows = _rows_for(model, records, ablate=ablate, intervene=intervene, per_row=per_row)
    texts = [(prefix[r.term] if prefix else "") + r.template for r in records]
    groups: dict[Any, list[int]] = {}  # by max_tokens
    for i, r in enumerate(records):
        groups.setdefault(r.max_tokens, []).append(i)
    out: list[GenerationResult | None] = [None] * len(records)
    bar = tqdm(total=len(records), desc="generation", unit="prompt", disable=not progress)
    for max_tokens, members in sorted(groups.items()):
        for start in range(0, len(members), batch_size):
            chunk = members[start : start + batch_size]
            ids = model.generate_ids(
                [texts[i] for i in chunk],
                max_new_tokens=max_tokens,
                per_row=[rows[i] for i in chunk],
                batch_size=batch_size,
            )
            for i, new in zip(chunk, ids):
                text = model.tokenizer.decode(new, skip_special_tokens=True)
                out[i] = replace(rubric_score(text, records[i].term, rubric), key=records[i].key)
            bar.update(len(chunk))
    bar.close()
    return out  # type: ignore[return-value]


def _rubric_for(records: Sequence[PromptRecord], rubric: dict | None) -> dict:
    rubric = rubric or default_rubric()
    missing = sorted({r.term for r in records} - set(rubric["terms"]))
    if missing:
        raise InputError(f"no rubric entry for terms {missing}; add them to the rubric file")
    return rubric
