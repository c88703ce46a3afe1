"""Numerical bounds for comparing two float computations of the same quantity, derived, not tuned.

Two computations that differ only in the order of their floating-point operations (another matmul
kernel for another batch shape, a custom attention function instead of the built-in one, a
recomputation from q and k) disagree by rounding error, and how much depends on the CPU's kernels.
One rounding costs at most ``eps`` relative to the value rounded; a dot product over ``width``
terms accumulates about ``sqrt(width)`` of them (rounding errors add like a random walk), and every
layer the signal passes adds its own. So two runs of a ``depth``-layer network whose largest
activation is ``magnitude`` agree to about ``eps * magnitude * sqrt(width) * depth``. ``SAFETY``
covers the constant factors the estimate leaves out (several matmuls per layer, the norms, the
softmax's exponent). On the tiny test models these bounds are 3-10x above the differences measured
here, and 10^4x below what a wrong head or a wrong ablation site changes (``test_margins.py``
asserts the latter on every family).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

SAFETY = 8.0
# Set by conftest's `error_report` when BINDSCOPE_ERROR_REPORT names a file: called with
# (kind, error, bound) for each comparison ("within": an equivalence, "miss": a control).
REPORT: Callable[[str, float, float], None] | None = None


def rounding_bound(
    *, magnitude: float, width: int, depth: int, dtype: torch.dtype = torch.float32
) -> float:
    """The largest difference rounding alone explains between two orderings of one computation."""
    return SAFETY * torch.finfo(dtype).eps * magnitude * math.sqrt(width) * depth


def logit_magnitude(model, texts) -> float:
    """The largest absolute logit the model gives on ``texts``."""
    with torch.no_grad():
        return max(
            float(model.hf(torch.tensor([model.tokenize(text)])).logits.abs().max())
            for text in texts
        )


def logit_bound(model, texts, dtype: torch.dtype = torch.float32) -> float:
    """Bound for logits: rounding relative to the largest logit, through every layer and the
    unembedding (depth n_layers + 1), over dot products as wide as the hidden size.

    The logits' own scale, not the residual stream's, is the right magnitude: the final norm
    divides out the residual's scale (real models carry a few massive activations there that say
    nothing about the logits' precision).
    """
    return rounding_bound(
        magnitude=logit_magnitude(model, texts),
        width=model.hf.config.hidden_size,
        depth=model.n_layers + 1,
        dtype=dtype,
    )


def prob_bound(model, dtype: torch.dtype = torch.float32) -> float:
    """Bound for attention probabilities.

    A probability moves by at most a quarter of its score's error (dp/ds = p(1-p) <= 1/4, less the
    row's own shift); scores of peaked attention are O(10), and reach them through the q and k
    projections (width: the hidden size) of every layer below. Magnitude 1 with SAFETY 8 covers
    scores up to about 32.
    """
    return rounding_bound(
        magnitude=1.0, width=model.hf.config.hidden_size, depth=model.n_layers, dtype=dtype
    )


def gradient_bound(model, estimates: torch.Tensor, dtype: torch.dtype = torch.float32) -> float:
    """Bound for attribution estimates (activation differences times gradients).

    NDIF serves frozen weights, so a remote body starts gradient tracking at the first layer's
    input while a local model's graph starts at its weights: the same derivatives, reached by
    other backward kernels, that agree to rounding. The signal passes every layer twice
    (forward, then backward), over dot products as wide as the hidden size, at the estimates'
    own scale.
    """
    return rounding_bound(
        magnitude=float(estimates.abs().max()),
        width=model.hf.config.hidden_size,
        depth=2 * model.n_layers + 1,
        dtype=dtype,
    )


def row_sum_bound(keys: int, dtype: torch.dtype = torch.float32) -> float:
    """Bound for |sum(p) - 1| over a softmax row of ``keys`` probabilities."""
    return rounding_bound(magnitude=1.0, width=keys, depth=1, dtype=dtype)


def assert_within(got: torch.Tensor, ref: torch.Tensor, bound: float, what: str = "") -> None:
    """``torch.testing.assert_close`` with an absolute bound and no relative slack."""
    torch.testing.assert_close(
        got, ref, rtol=0.0, atol=bound, msg=lambda m: f"{what}: {m} (derived bound {bound:.2e})"
    )


def within(got: torch.Tensor, ref: torch.Tensor, bound: float) -> bool:
    """Whether ``got`` is within ``bound`` of ``ref`` everywhere (reported as `assert_close` is)."""
    error = float((got - ref).detach().abs().max())
    if REPORT is not None:
        REPORT("within", error, bound)
    return error <= bound


def misses(got: torch.Tensor, wrong: torch.Tensor, bound: float) -> float:
    """How many ``bound``s a control (a wrong head, site or layer) lies from ``got``."""
    miss = float((got - wrong).detach().abs().max()) / bound
    if REPORT is not None:
        REPORT("miss", miss * bound, bound)
    return miss
