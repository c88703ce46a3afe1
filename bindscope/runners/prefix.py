"""The two passes of shared-prefix recognition, each able to keep or skip the lower layers."""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch

from bindscope.batch import Batch
from bindscope.interventions import ops
from bindscope.interventions.ops import run_layers
from bindscope.interventions.plan import plan_batch
from bindscope.metrics.behaviour import RecognitionResult
from bindscope.prompts.prompt_sets import PromptRecord
from bindscope.protocols import LanguageModel
from bindscope.runners.packing import choice_layout, packed_inputs

__all__ = [
    "cache_name",
    "choice_pass",
    "choice_rows",
    "choice_scores",
    "keeps_logits",
    "kept_layers",
    "prompt_pass",
    "recognition_result",
    "row_plan",
]


def keeps_logits(model: LanguageModel) -> bool:
    """Whether the model's forward takes ``logits_to_keep`` (skip the LM head on the prompt)."""
    return "logits_to_keep" in inspect.signature(model.hf.forward).parameters


def cache_name(model: LanguageModel) -> str:
    """The forward's name for the key/value cache (``cache`` from transformers 5), its output's."""
    params = inspect.signature(model.hf.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def row_plan(
    model: LanguageModel, batch: Batch, rows: Any, *, positions: bool = True
) -> ops.TracePlan:
    """A plan for one batch; ``positions=False`` keeps only what acts on every position."""
    if not positions:
        rows = [tuple(op for op in row if op.every_position) for row in rows]
    return plan_batch(model, batch, rows).plan


@torch.no_grad()
def prompt_pass(
    model: LanguageModel,
    batch: Batch,
    plan: ops.TracePlan | None,
    *,
    keep_layers: int = 0,
    start: int = 0,
    residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any, list]:
    """The prompts with a cache: next-token log-probs ``[b, V]``, the cache, kept outputs."""
    last_only = {"logits_to_keep": 1} if keeps_logits(model) else {}
    with model.nnsight.trace(
        **batch.inputs, use_cache=True, **last_only, **model.trace_options
    ) as tracer:
        outputs: list = ops.keep_outputs(model, keep_layers, ops.save([]))  # [b, n, d] each
        ops.start_at(model, start, residual)
        if plan:
            run_layers(model, plan=plan)
        first = ops.final_logits(model)[:, -1].float().log_softmax(-1).save()  # [b, V]
        cache = getattr(tracer.result, cache_name(model)).save()
    return first, cache, outputs


def _padded_inputs(model: LanguageModel, batch: Batch, flat: list, n_c: int) -> dict:
    # a choice's last token predicts nothing that is scored: it is not run
    n, width = len(flat), max(len(c) for c in flat) - 1
    ids = torch.full((n, width), model.tokenizer.pad_token_id, dtype=torch.long)
    cmask = torch.zeros(n, width, dtype=torch.long)
    for s, c in enumerate(flat):  # right-padded: pad positions are never scored
        ids[s, : len(c) - 1] = torch.tensor(c[:-1], dtype=torch.long)
        cmask[s, : len(c) - 1] = 1
    prompt_mask = batch.attention_mask.repeat_interleave(n_c, 0)
    lengths = torch.tensor(batch.lengths).repeat_interleave(n_c)
    return {
        "input_ids": ids,
        "attention_mask": torch.cat([prompt_mask, cmask], 1),
        "position_ids": lengths[:, None] + torch.arange(width)[None, :],
        "spans": torch.zeros(n, dtype=torch.long),
        "real": cmask,
    }


def choice_rows(model: LanguageModel, rows: torch.Tensor, n_c: int) -> torch.Tensor:
    """The choice pass's rows of prompts ``rows``: one each packed, ``n_c`` each padded."""
    if choice_layout(model) == "packed":
        return rows
    return (rows[:, None] * n_c + torch.arange(n_c)[None, :]).flatten()


@torch.no_grad()
def choice_pass(
    model: LanguageModel,
    batch: Batch,
    flat: list,
    cache: Any,
    rows: list,
    n_c: int,
    *,
    keep_layers: int = 0,
    start: int = 0,
    residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor | None, list]:
    """Each choice's later tokens on its prompt's cache: ``[b*C]`` weighted log-prob sums.

    ``rows`` are the prompts' row ops; ``residual`` a clean pass's output at `choice_rows`.
    One-token choices run nothing (None, no outputs): the prompt pass scored them.
    """
    if max(len(c) for c in flat) == 1:
        return None, []
    inputs, packed, masks = _layout_inputs(model, batch, flat, cache, n_c)
    spans, real = inputs.pop("spans"), inputs.pop("real")
    owner, where, target, weight = _scored_tokens(flat, spans)
    row = owner // n_c if packed else owner
    # choice tokens only: Knockout's edges lie in the prompt, already in the cache
    (b, width), ids, positions = real.shape, inputs["input_ids"], inputs["position_ids"]
    choice_batch = Batch(list(range(b)), ids, real, positions, [width] * b)
    prompt_rows = rows if packed else [rows[s // n_c] for s in range(len(flat))]
    plan = row_plan(model, choice_batch, prompt_rows, positions=False)
    residual = residual[:, :width] if residual is not None else None
    with model.nnsight.trace(
        **model.trace_options, **inputs, **{cache_name(model): cache}, use_cache=True
    ):
        if masks is not None:
            args, kwargs = model.nnsight.model.inputs
            model.nnsight.model.inputs = (args, {**kwargs, "attention_mask": masks})
        outputs: list = ops.keep_outputs(model, keep_layers, ops.save([]))  # [b', W, d] each
        ops.start_at(model, start, residual)
        if plan:
            run_layers(model, plan=plan)
        hidden = model.nnsight.lm_head.input  # [b', W, d]
        # the head on scored tokens only: on Gemma 3's 262k vocabulary, all cost all the layers
        model.nnsight.lm_head.input = hidden[row, where][None]  # [1, scored tokens, d]
        rest = ops.scored_token_sums(ops.final_logits(model)[0], owner, target, weight, len(flat))
        rest = rest.save()
    return rest, outputs


def _layout_inputs(
    model: LanguageModel, batch: Batch, flat: list, cache: Any, n_c: int
) -> tuple[dict, bool, dict | None]:
    # masks: one per layer type where they differ; nnsight batches a tensor mask only, so
    # the mapping goes to the decoder inside the trace and the inputs carry one of them
    if choice_layout(model) == "padded":
        cache.batch_repeat_interleave(n_c)  # a copy of the prompt's cache per choice
        return _padded_inputs(model, batch, flat, n_c), False, None
    inputs = packed_inputs(model, batch.attention_mask, cache, flat, n_c)
    masks = inputs["attention_mask"]
    if not isinstance(masks, dict):
        return inputs, True, None
    return {**inputs, "attention_mask": next(iter(masks.values()))}, True, masks


def _scored_tokens(flat: list, spans: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # per scored token: its choice, the column predicting it, the token, its weight 1/m (the
    # first of a choice's m tokens is the prompt pass's)
    owner = torch.tensor([s for s, c in enumerate(flat) for _ in c[1:]])
    where = torch.tensor([int(spans[s]) + i for s, c in enumerate(flat) for i in range(len(c) - 1)])
    target = torch.tensor([t for c in flat for t in c[1:]])
    weight = torch.tensor([1.0 / len(c) for c in flat for _ in c[1:]])
    return owner, where, target, weight


def choice_scores(first: torch.Tensor, rest: torch.Tensor | None, flat: list, n_c: int) -> list:
    """Mean log-prob per choice token ``[b][C]`` from both passes (``rest``: None, one token)."""
    scored = [
        float(first[s // n_c, c[0]]) / len(c) + (float(rest[s]) if rest is not None else 0.0)
        for s, c in enumerate(flat)
    ]
    return [scored[r * n_c : (r + 1) * n_c] for r in range(len(flat) // n_c)]


def recognition_result(record: PromptRecord, values: list[float]) -> RecognitionResult:
    """A record's result from its choice scores: the best choice (the first of a tie)."""
    prediction = max(range(len(values)), key=lambda i: (values[i], -i))
    return RecognitionResult(
        record.key, tuple(values), prediction, int(prediction == record.answer_idx)
    )


def kept_layers(layers: list, rows: torch.Tensor) -> list:
    """Copies of a cache's layers at batch rows ``rows``, safe from later passes."""
    out = []
    for layer in layers:
        mine = copy.copy(layer)
        mine.batch_select_indices(rows)
        out.append(mine)
    return out
