"""The load-time self-check of a remote model: one small request, a few numbers back."""

from __future__ import annotations

import torch

from bindscope.errors import RemoteJobError, SelfCheckError
from bindscope.interventions import ops
from bindscope.protocols import LanguageModel
from bindscope.selfcheck import (
    PROBE_TEXT,
    check_ablation_effect,
    check_causal,
    row_sum_tolerance,
    softmax_dtype,
)


def _run_probe(model: LanguageModel) -> dict:
    ids = model.tokenize(PROBE_TEXT)
    batch = model.encode([ids, ids])
    with torch.no_grad(), model.eager(), model.nnsight.trace(**batch.inputs, **model.trace_options):
        result = ops.probe(model)
    return result


def probe_capture(model: LanguageModel) -> dict:
    """Check capture and ablation remotely with one small request; fall back if needed.

    Without attention weights under eager attention, ``model.capture_fallback`` records why
    and probabilities are recomputed from queries and keys from then on.
    """
    where = f"{model.name} (family {model.family}, remote {model.remote})"
    try:
        result = _run_probe(model)
    except RemoteJobError as exc:
        if "attention implementation" not in str(exc) and "cannot switch" not in str(exc):
            raise
        model.capture_fallback = f"the server could not switch to eager attention: {exc}"
        result = _run_probe(model)
    stats = result["stats"]  # [L, 3]: present, row-sum error, upper triangle
    missing = [layer for layer in range(len(stats)) if float(stats[layer, 0]) == 0.0]
    if missing and not model.capture_fallback:
        model.capture_fallback = (
            f"no attention weights came back under eager attention (layers {missing}); "
            "probabilities are recomputed from queries and keys"
        )
        result = _run_probe(model)
        stats = result["stats"]
    if (stats[:, 0] == 0).any():
        raise SelfCheckError(f"{where}: attention probabilities could not be captured")
    row_error, upper = float(stats[:, 1].max()), float(stats[:, 2].max())
    # NDIF's deployment dtype is not visible from here: bound rows by the coarsest it may use
    weights = torch.bfloat16 if model.remote == "ndif" else model.dtype
    dtype = softmax_dtype(weights, model.capture_method)  # the softmax's own rounding
    bound = row_sum_tolerance(dtype, len(model.tokenize(PROBE_TEXT)))
    if row_error > bound:
        raise SelfCheckError(
            f"{where}: attention rows sum to 1 +- {row_error:.2e}, beyond the {bound:.1e} that "
            f"rounding in {dtype} explains; the captured tensor is not a softmax"
        )
    check_causal(where, upper)
    effect = float(result["effect"])
    check_ablation_effect(where, effect, model)
    return {"row_sum_error": row_error, "upper_triangle": upper, "ablation_effect": effect}
