"""The traced forward passes behind ``Model.attention_probs`` and ``Model.logits``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from bindscope.batch import DEFAULT_BATCH_SIZE, check_texts, widened
from bindscope.errors import InterventionError
from bindscope.interventions import ops, run_layers
from bindscope.interventions.plan import PlannedBatch, plan_batches
from bindscope.interventions.specs import resolve_rows

if TYPE_CHECKING:
    from bindscope.model.wrapper import Model


def trace_batch(model: Model, planned: PlannedBatch, body: Callable[[Any], Any], **options):
    """Run ``body(donors)`` on a planned batch; donors (if any) run first in their own invoke.

    ``body`` applies the plan (and captures); it must return its result saved.
    """
    # plain dicts of tensors only in the body: it ships by value when remote
    env, plan, inputs, donor_inputs = (
        model.nnsight,
        planned.plan,
        planned.batch.inputs,
        planned.donors,
    )
    if donor_inputs is None:
        with env.trace(**inputs, **options, **model.trace_options) as tracer:
            found = body(None)
            tracer.stop()
        return found
    donors: dict = {}  # filled by the first invoke, read by the second
    with env.trace(**options, **model.trace_options) as tracer:
        with tracer.invoke(**donor_inputs):
            ops.donor_outputs(model, plan["donor_layers"], donors)
        with tracer.invoke(**inputs):
            found = body(donors)
            tracer.stop()
        if "knockout_batch" in plan:
            with tracer.invoke():  # the whole batch, donor rows first
                ops.knock_out_batch(model, plan["knockout_batch"], plan["site"])
    return found


@torch.no_grad()
def attention_probs(
    model: Model,
    texts: Sequence[str],
    *,
    layers: Iterable[int] | None = None,
    intervene=None,
    per_row=None,
    ablate=None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[torch.Tensor]:
    """``Model.attention_probs`` (arguments as there)."""
    wanted = model.check_layers(layers)
    texts = check_texts(texts)
    rows = resolve_rows(model, texts, intervene=intervene, per_row=per_row, ablate=ablate)
    out: list[torch.Tensor | None] = [None] * len(texts)
    with model.eager():
        for planned in plan_batches(model, texts, rows, batch_size=batch_size):
            batch = planned.batch
            if "knockout_batch" in planned.plan and model.capture_mode == "recompute":
                raise InterventionError(
                    f"{model.name}: capturing probabilities by recomputation sees the "
                    "mask before a Knockout that shares its batch with a Patch; run "
                    "them in separate calls"
                )

            def body(donors, plan=planned.plan):
                # bound to a name: a remote run returns only saved values the body binds
                found = run_layers(model, capture=wanted, plan=plan, donors=donors)
                return found

            found = trace_batch(model, planned, body)
            stacked = torch.stack([found[layer] for layer in wanted], 1)  # [b, L', H, n, n]
            for row, index in enumerate(batch.indices):
                pad = batch.pad(row)
                out[index] = widened(stacked[row, :, :, pad:, pad:]).contiguous()
    return out  # type: ignore[return-value]


@torch.no_grad()
def logits(
    model: Model,
    texts: Sequence[str],
    *,
    intervene=None,
    per_row=None,
    ablate=None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[torch.Tensor]:
    """``Model.logits`` (arguments as there)."""
    texts = check_texts(texts)
    rows = resolve_rows(model, texts, intervene=intervene, per_row=per_row, ablate=ablate)
    out: list[torch.Tensor | None] = [None] * len(texts)
    for planned in plan_batches(model, texts, rows, batch_size=batch_size):
        batch = planned.batch

        def body(donors, plan=planned.plan):
            if plan:
                run_layers(model, plan=plan, donors=donors)
            logits = model.nnsight.lm_head.output.save()  # [b, n, V]
            return logits

        found = trace_batch(model, planned, body)
        for row, index in enumerate(batch.indices):
            out[index] = widened(found[row, batch.pad(row) :])
    return out  # type: ignore[return-value]
