"""In-trace primitives: ablate or capture inside a trace you opened (thin `run_layers` calls)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bindscope.interventions.trace.edits import head_plan, run_layers
from bindscope.interventions.trace.sites import layer_filter

if TYPE_CHECKING:  # never runs, here or on the server
    from collections.abc import Callable, Iterable, Sequence

    from bindscope.protocols import TraceTarget

    Heads = Sequence[tuple[int, int]] | dict[int, Sequence[int]]


def mean_ablate(
    model: TraceTarget,
    heads: Heads | None = None,
    means: Any = None,
    *,
    per_row: Sequence[Heads] | None = None,
    layers: Iterable[int] | None = None,
):
    """Replace heads' pre-projection outputs by their means from ``head_means``."""
    if means is None:
        raise ValueError("mean_ablate needs means=head_means(model, reference_texts, heads)")
    plan = head_plan(model, heads, per_row=per_row, means=means)
    run_layers(model, plan=plan, only_layers=layers)


def capture_probs(
    model: TraceTarget, layers: Iterable[int] | None = None, *, reduce: Callable | None = None
):
    """Capture post-softmax attention probabilities ``{layer: [b, H, n, n]}`` (or ``reduce``'s)."""
    wanted = sorted(layer_filter(layers, model.n_layers))
    return run_layers(model, capture=wanted, reduce=reduce, only_layers=wanted)
