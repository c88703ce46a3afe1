"""In-trace primitives: ablate or capture inside a trace you opened (thin `run_layers` calls).

Deprecations warn through ``Model.warn_deprecated``: shipped code cannot import ``warnings``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bindscope.interventions.trace.edits import head_plan, run_layers
from bindscope.interventions.trace.sites import layer_filter, save

if TYPE_CHECKING:  # never runs, here or on the server
    from collections.abc import Callable, Iterable, Sequence

    from bindscope.protocols import TraceTarget

    Heads = Sequence[tuple[int, int]] | dict[int, Sequence[int]]


def zero_ablate(
    model: TraceTarget,
    heads: Heads | None = None,
    *,
    per_row: Sequence[Heads] | None = None,
    layers: Iterable[int] | None = None,
):
    """Deprecated: ``run_layers(model, plan=head_plan(model, heads))`` in a trace."""
    _deprecated(
        model,
        "zero_ablate(model, heads)",
        "intervene=Zero(heads) (or ablate=heads) on a model call, or inside your own trace "
        "ops.run_layers(model, plan=ops.head_plan(model, heads), only_layers=layers)",
    )
    run_layers(model, plan=head_plan(model, heads, per_row=per_row), only_layers=layers)


def mean_ablate(
    model: TraceTarget,
    heads: Heads | None = None,
    means: Any = None,
    *,
    per_row: Sequence[Heads] | None = None,
    layers: Iterable[int] | None = None,
):
    """Replace heads' pre-projection outputs by their means from ``head_means``.

    The older ``(model, means, heads)`` order is deprecated.
    """
    if hasattr(heads, "means"):
        _deprecated(model, "mean_ablate(model, means, heads)", "mean_ablate(model, heads, means)")
        heads, means = means, heads
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


def capture_attention(
    model: TraceTarget, layers: Iterable[int] | None = None, *, reduce: Callable | None = None
):
    """Deprecated: `capture_probs`, the same keyed by layer (this is its list form)."""
    _deprecated(
        model, "capture_attention(model, layers)", "capture_probs(model, layers) (keyed by layer)"
    )
    found = capture_probs(model, layers, reduce=reduce)
    return save([found[layer] for layer in sorted(found)])  # the list must outlive the trace


def _deprecated(model: TraceTarget, old: str, new: str) -> None:
    """Warn that ``old`` is deprecated for ``new``, where the model can warn (locally)."""
    warn = getattr(model, "warn_deprecated", None)
    if warn is not None:
        warn(old, new)
