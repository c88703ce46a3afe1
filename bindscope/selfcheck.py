"""Cheap load-time checks, in the spirit of nnterp: fail loudly with family and module path."""

from __future__ import annotations

import torch

from bindscope.batch import widened
from bindscope.errors import SelfCheckError
from bindscope.interventions import ops
from bindscope.protocols import LanguageModel

PROBE_TEXT = "The quick brown fox jumps over the lazy dog near the river bank."


def row_sum_tolerance(dtype: torch.dtype, n_keys: int) -> float:
    """How far from 1 a softmax row of ``n_keys`` probabilities may sum in ``dtype``.

    Each probability is rounded (relative error eps/2) and summed in ``dtype``: at worst
    ``n_keys * eps``; a tensor that is not a softmax misses 1 by far more.
    """
    return n_keys * torch.finfo(dtype).eps


def softmax_dtype(dtype: torch.dtype, capture: str = "eager") -> torch.dtype:
    """The dtype whose rounding captured probabilities carry, for weights in ``dtype``.

    Eager attention casts its float32 softmax to the weights' dtype (float32 at the least);
    a recomputed capture runs it in float32, or float64 for float64 weights.
    """
    wider = torch.promote_types(dtype, torch.float32)
    if capture == "recompute":
        return wider
    return dtype if torch.finfo(dtype).eps > torch.finfo(torch.float32).eps else torch.float32


def self_check(model: LanguageModel) -> dict[str, float]:
    """Check shape, row sums, causality and ablation on one short prompt; what was measured."""
    where = f"{model.name} (family {model.family}, {ops.attention_module(model, 0).path})"
    ids = model.tokenize(PROBE_TEXT)
    n = len(ids)
    probs = model.attention_probs([ids])[0].detach()  # [L, H, n, n]
    expected = (model.n_layers, model.n_heads, n, n)
    if tuple(probs.shape) != expected:
        raise SelfCheckError(
            f"{where}: probabilities have shape {tuple(probs.shape)}, expected {expected}"
        )
    row_error = float((probs.sum(-1) - 1).abs().max())
    ran_in = softmax_dtype(model.dtype, model.capture_method)
    if row_error > row_sum_tolerance(ran_in, n):
        raise SelfCheckError(
            f"{where}: attention rows sum to 1 +- {row_error:.2e}, beyond the "
            f"{row_sum_tolerance(ran_in, n):.1e} that rounding in {ran_in} (the softmax of "
            f"{model.dtype} weights) explains; the captured tensor is not a softmax"
        )
    upper = float(probs.triu(1).abs().max())
    check_causal(where, upper)
    batch = model.encode([ids])
    # the plain forward runs where the weights are (--device cuda); calls return CPU tensors
    inputs = {key: value.to(model.hf.device) for key, value in batch.inputs.items()}
    with torch.no_grad():
        plain = widened(model.hf(**inputs).logits[0]).cpu()
    traced = model.logits([ids], ablate=[])[0]
    if not torch.equal(plain, traced):
        raise SelfCheckError(
            f"{where}: logits through nnsight differ from a plain forward by "
            f"{float((plain - traced).abs().max()):.2e} with no ablation"
        )
    ablated = model.logits([ids], ablate=[(0, 0)])[0]
    effect = float((ablated - plain).abs().max())
    check_ablation_effect(where, effect, model)
    return {"row_sum_error": row_error, "upper_triangle": upper, "ablation_effect": effect}


def check_causal(where: str, upper: float) -> None:
    """Raise unless no attention lies above the diagonal (``upper``: the largest there)."""
    if upper > 0:
        raise SelfCheckError(
            f"{where}: {upper:.2e} attention above the diagonal; causal mask broken"
        )


def check_ablation_effect(where: str, effect: float, model: LanguageModel) -> None:
    """Raise if ablating head (0, 0) changed no logit (``effect``: the largest change)."""
    if effect == 0.0:
        module, port, _ = model.sites["head_out"]
        raise SelfCheckError(
            f"{where}: ablating head (0, 0) at the {port} of model.layers[0].{module} (head_out) "
            "left the logits unchanged; the ablation site is wrong for this family"
        )
