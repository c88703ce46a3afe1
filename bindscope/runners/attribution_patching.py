"""Attribution patching: every edit's effect estimated from one backward pass."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from bindscope.batch import check_texts, token_ids
from bindscope.errors import InputError, true_or_false
from bindscope.families import CALL_SITES
from bindscope.interventions import ops
from bindscope.interventions.plan import PlannedBatch, plan_batches
from bindscope.interventions.resolve import Intervention, PerRow, resolve_rows
from bindscope.interventions.rowops import HookOp, KnockoutOp, RowOp
from bindscope.interventions.trace.features import features_key
from bindscope.protocols import LanguageModel
from bindscope.runners.attribution_metrics import (
    LogitDifference,
    TargetLogprob,
    check_metrics,
    logit_terms,
)

__all__ = [
    "METHODS",
    "LogitDifference",
    "TargetLogprob",
    "attribution_patching",
    "attribution_scores",
    "head_attribution_patching",
]

METHODS = ("atp*", "atp")
MetricArg = TargetLogprob | LogitDifference | Sequence[TargetLogprob | LogitDifference]


def _estimated_site(op: RowOp) -> str:
    if op.dictionary is not None:
        return features_key(op.site)
    return "pattern" if isinstance(op, KnockoutOp) else op.site


def _edited_units(row: tuple[RowOp, ...]) -> dict[tuple[str, int], list[int]]:
    units: dict[tuple[str, int], list[int]] = {}
    for op in row:
        for layer, us in op.units:
            units.setdefault((_estimated_site(op), layer), []).extend(us)
    return units


def _check_rows(
    model: LanguageModel, texts: list, intervene: Intervention, per_row: PerRow, method: str
) -> tuple[list[tuple[RowOp, ...]], bool]:
    # each text's row ops, and whether the estimate needs eager attention
    rows = resolve_rows(model, texts, intervene=intervene, per_row=per_row)
    if not any(rows):
        raise InputError(
            "attribution patching needs intervene= (or per_row=): the specs to estimate, "
            "e.g. Zero(heads), Mean(heads, means), Steer(site, layer, vector) or PatternPatch"
        )
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    hook = next((op for row in rows for op in row if isinstance(op, HookOp)), None)
    if hook is not None:
        raise InputError(
            f"{hook.spec}: an estimate needs the value an edit writes before the run, which "
            "a function gives only when it runs; measure a Hook exactly with logits()"
        )
    if method == "atp" and any(isinstance(op, KnockoutOp) for row in rows for op in row):
        raise InputError(
            "method='atp' linearises the softmax, but a Knockout moves its scores to minus "
            "infinity; use method='atp*' (the knocked-out pattern is recomputed)"
        )
    remote = getattr(model, "remote", False)
    if not remote and not any(p.requires_grad for p in model.hf.parameters()):
        raise InputError(
            f"{model.name}: no parameter requires grad, so no gradient reaches the edits; "
            "call model.hf.requires_grad_(True) (no parameter gradient is stored)"
        )
    at_call = sorted({op.site for row in rows for op in row if op.site in CALL_SITES})
    if at_call:
        raise InputError(
            f"{model.name}: attribution at {', '.join(at_call)} is not estimated: q, k and v "
            "are read at the attention function's call, which the gradient pass does not "
            "tap; estimate head_out (or mlp_post neurons), or run the spec itself"
        )
    eager = any(_estimated_site(op) == "pattern" for row in rows for op in row)
    if eager and getattr(model, "capture_fallback", None):
        raise InputError(
            f"{model.name}: pattern estimates need eager attention's probabilities, which this "
            f"model cannot return ({model.capture_fallback}); estimate head outputs only"
        )
    return rows, eager


def _estimate(
    model: LanguageModel,
    texts: Sequence,
    metric: MetricArg,
    intervene: Intervention = None,
    per_row: PerRow = None,
    method: str = "atp*",
    batch_size: int = 16,
    grad_drop: bool = False,
) -> tuple:
    # clean metric [S], then per text {(site, layer): [U]} estimates (and GradDrop's)
    texts = check_texts(texts)
    true_or_false(grad_drop, "grad_drop")
    rows, eager = _check_rows(model, texts, intervene, per_row, method)
    lengths = [len(token_ids(model, t)) for t in texts]
    metrics = check_metrics(model, metric, lengths)
    clean = np.zeros(len(texts))
    found_of: dict[str, list[dict]] = {"estimate": [{} for _ in texts]}
    if grad_drop:
        found_of["grad_drop"] = [{} for _ in texts]
    for planned in plan_batches(model, texts, rows, batch_size=batch_size):
        batch, plan = planned.batch, planned.plan
        mine = [metrics[i] for i in batch.indices]
        terms, options = logit_terms(model, mine, batch.input_ids)
        donors = _donor_pass(model, planned, eager)
        context = model.eager() if eager else contextlib.nullcontext()
        with context, torch.enable_grad():  # noqa: SIM117 (nnsight reads the trace's own block)
            with model.nnsight.trace(**batch.inputs, **options, **model.trace_options):
                found = ops.attribution_pass(model, terms, plan, donors, method, grad_drop)
        clean[batch.indices] = found["metric"].double().cpu().numpy()
        for key, into in found_of.items():
            for cell, value in found[key].items():
                value = value.double().cpu()
                for r, i in enumerate(batch.indices):
                    units = _edited_units(rows[i]).get(cell)
                    if units:
                        into[i][cell] = torch.full_like(value[r], float("nan"))
                        into[i][cell][units] = value[r, units]
    return (clean, *found_of.values())


def _donor_pass(model: LanguageModel, planned: PlannedBatch, eager: bool) -> dict | None:
    plan = planned.plan
    if planned.donors is None:
        return None
    if plan.knockout_batch:  # the donor rows run in their own pass here, not beside the texts
        n_donors = planned.donors["input_ids"].shape[0]
        plan.knockout = {layer: r[n_donors:] for layer, r in plan.knockout_batch.items()}
        plan.knockout_batch = {}
    context = model.eager() if eager else contextlib.nullcontext()
    with context, torch.no_grad():  # noqa: SIM117 (nnsight reads the trace's own block)
        with model.nnsight.trace(**planned.donors, **model.trace_options) as tracer:
            found = ops.save(ops.site_outputs(model, plan.donor_keys, {}))
            tracer.stop()
    return found


def _head_table(model: LanguageModel, estimates: dict) -> np.ndarray:
    table = np.full((model.n_layers, model.n_heads), np.nan)
    for (site, layer), value in estimates.items():
        if site not in ("head_out", "pattern"):
            raise InputError(
                f"head_attribution_patching estimates heads, but a spec acts on {site} of "
                f"layer {layer}; estimate sites with attribution_patching(...)"
            )
        got = value.numpy()
        known = ~np.isnan(got)
        table[layer, known] = np.nan_to_num(table[layer, known]) + got[known]
    return table


def attribution_scores(
    model: LanguageModel, texts: Sequence, metric: MetricArg, **options: Any
) -> tuple:
    """Clean metric ``[S]`` and estimated change ``[S, L, H]`` (then GradDrop's, if asked)."""
    clean, *found = _estimate(model, texts, metric, **options)
    tables = [np.stack([_head_table(model, e) for e in per_text]) for per_text in found]
    return (clean, *tables)


def attribution_patching(
    model: LanguageModel,
    texts: Sequence,
    metric: MetricArg,
    *,
    intervene: Intervention = None,
    per_row: PerRow = None,
    method: str = "atp*",
    batch_size: int = 16,
) -> list[dict[tuple[str, int], torch.Tensor]]:
    """Estimated change of each edited cell alone: ``{(site, layer): [U]}`` per text (NaN: not)."""
    found = _estimate(model, texts, metric, intervene, per_row, method, batch_size)
    return found[1]


def head_attribution_patching(
    model: LanguageModel,
    texts: Sequence,
    metric: MetricArg,
    *,
    intervene: Intervention = None,
    per_row: PerRow = None,
    method: str = "atp*",
    batch_size: int = 16,
    grad_drop: bool = False,
) -> list[torch.Tensor]:
    """Estimated metric change ``[L, H]`` per text, each head alone (``grad_drop``: GradDrop's).

    The estimate: ``sum((z' - z) * dm/dz)`` over positions and width; NaN: not intervened.
    """
    found = _estimate(model, texts, metric, intervene, per_row, method, batch_size, grad_drop)
    return [torch.from_numpy(_head_table(model, e)) for e in found[-1]]


def all_heads(model: LanguageModel) -> list[tuple[int, int]]:
    """Every ``(layer, head)`` of the model."""
    return [(layer, h) for layer in range(model.n_layers) for h in range(model.n_heads)]
