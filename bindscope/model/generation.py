"""Greedy generation under interventions, several batches per nnsight session."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from itertools import takewhile
from typing import Any

import torch

from bindscope.batch import (
    GENERATION_BATCH_SIZE,
    check_batch_size,
    check_texts,
    sessions,
    token_ids,
)
from bindscope.errors import InterventionError, PromptTooLongError, whole_number
from bindscope.interventions import ops
from bindscope.interventions.plan import plan_batches
from bindscope.interventions.resolve import HeadList, Intervention, PerRow, resolve_rows
from bindscope.interventions.rowops import PathOp
from bindscope.interventions.specs import short
from bindscope.protocols import LanguageModel


def generate(model: LanguageModel, texts: Sequence[str], **options: Any) -> list[str]:
    """Greedy continuations (prompt excluded): the decoded `generate_ids`."""
    ids = generate_ids(model, texts, **options)
    return [model.tokenizer.decode(row, skip_special_tokens=True) for row in ids]


@torch.no_grad()
def generate_ids(
    model: LanguageModel,
    texts: Sequence[str] | Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    intervene: Intervention = None,
    per_row: PerRow = None,
    ablate: HeadList | None = None,
    batch_size: int = GENERATION_BATCH_SIZE,
) -> list[list[int]]:
    """Greedy new token ids per text, cut at the first end-of-sequence token.

    ``Patch`` and ``Resample`` need fixed-length texts and are refused; ``Knockout``,
    ``PathPatch`` and ``Patchscope`` act on the prompt pass, the other specs on every token.
    """
    texts = check_texts(texts)
    check_batch_size(batch_size)
    _check_new_tokens(model, max_new_tokens)
    _check_window(model, texts, max_new_tokens)
    rows = resolve_rows(model, texts, intervene=intervene, per_row=per_row, ablate=ablate)
    _refuse_donors(model, rows)
    out: list[list[int] | None] = [None] * len(texts)
    eos = model.hf.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) | {model.tokenizer.eos_token_id}
    kwargs = {
        "max_new_tokens": max_new_tokens,
        "do_sample": False,
        "pad_token_id": model.tokenizer.pad_token_id,
    }
    jobs = list(plan_batches(model, texts, rows, batch_size=batch_size))
    for part in sessions(jobs):
        inputs = [(_ids_and_mask(planned.batch.inputs), planned.plan) for planned in part]
        for planned, result in zip(part, generate_session(model, inputs, kwargs)):
            batch = planned.batch
            new = result[:, batch.input_ids.shape[1] :].tolist()
            for r, index in enumerate(batch.indices):
                out[index] = list(takewhile(lambda token: token not in eos_ids, new[r]))
    return out  # type: ignore[return-value,unused-ignore]


def _check_new_tokens(model: LanguageModel, max_new_tokens: object) -> None:
    fix = "pass how many tokens to generate, e.g. max_new_tokens=20"
    whole_number(max_new_tokens, f"{model.name}: max_new_tokens", fix, least=1)


def _refuse_donors(model: LanguageModel, rows: Sequence[Sequence]) -> None:
    for i, row in enumerate(rows):
        if any(op.donor is not None and not isinstance(op, PathOp) for op in row):
            raise InterventionError(
                f"{model.name}: text #{i}: Patch and Resample act on fixed-length texts, "
                "not on generation; use them with logits() or attention_probs()"
            )


def _check_window(model: LanguageModel, texts: Sequence, max_new_tokens: int) -> None:
    # positions past the window mean nothing, or fail inside the model (GPT-2's IndexError)
    window = model.context_length
    if not window:
        return
    for i, text in enumerate(texts):
        n = len(token_ids(model, text))
        if n + max_new_tokens > window:
            room = f"at most {window - n} new tokens" if n < window else "no new token"
            raise PromptTooLongError(
                f"{model.name}: text #{i} {short(text)} is {n} tokens, and {max_new_tokens} "
                f"new tokens would reach {n + max_new_tokens}, past the model's context "
                f"window of {window}; it has room for {room}: lower max_new_tokens or "
                "shorten the prompt"
            )


def generate_session(
    model: LanguageModel, jobs: Sequence[tuple[dict, ops.TracePlan]], kwargs: dict[str, Any]
) -> list[torch.Tensor]:
    """Generated ids ``[b, n + new]`` of every ``(inputs, plan)`` job, in one session."""
    env = model.nnsight
    extra = [_path_inputs(plan.path) for _, plan in jobs]  # planned outside the shipped body
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*was never reached.*")
        with env.session(**model.trace_options):
            results = [].save()  # type: ignore[attr-defined]  # nnsight gives every object .save
            for (inputs, plan), (donor_inputs, scratch_inputs) in zip(jobs, extra):
                path = plan.path
                with env.generate(**kwargs) as tracer:
                    if donor_inputs is not None:  # a path patch's donor rows come first
                        with tracer.invoke(**donor_inputs):
                            pass
                    with tracer.invoke(**inputs):
                        if plan.edits or plan.knockout:
                            for step in tracer.all():
                                ops.run_layers(model, plan=plan, step=step)
                    if path is not None:
                        if scratch_inputs is not None:
                            with tracer.invoke(**scratch_inputs):
                                pass
                        with tracer.invoke():  # the prompt pass, every row
                            ops.path_patch(model, path)
                    with tracer.invoke():
                        results.append(tracer.result)
    # a path patch's donor and scratch rows generated too: keep the texts' rows
    return [
        result if plan.path is None else result[plan.path.n_donors :][: plan.path.b]
        for (_, plan), result in zip(jobs, results, strict=True)
    ]


def _ids_and_mask(given: dict) -> dict:
    # generation makes the positions
    return {"input_ids": given["input_ids"], "attention_mask": given["attention_mask"]}


def _path_inputs(path: Any) -> tuple[dict | None, dict | None]:
    if path is None:
        return None, None
    donors = None if path.donor_inputs is None else _ids_and_mask(path.donor_inputs)
    return donors, _ids_and_mask(path.scratch_inputs) if path.slots else None
