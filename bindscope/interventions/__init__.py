"""Tracing-context primitives: capture attention and ablate heads inside one nnsight trace.

Call them inside ``with model.nnsight.trace(**model.encode(texts).inputs):`` (or inside an
``invoke``), in execution order: a layer's ablation before that layer's capture, and
earlier layers before later ones. Each primitive takes ``layers=`` so a loop over layers
can interleave them::

    with model.eager(), model.nnsight.trace(**batch.inputs):
        for layer in range(model.n_layers):
            zero_ablate(model, [(2, 8)], layers=[layer])
            probs += capture_attention(model, [layer])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from bindscope.interventions import ops
from bindscope.interventions.heads import Head, by_layer, row_masks

__all__ = [
    "HeadMeans",
    "capture_attention",
    "head_means",
    "mean_ablate",
    "run_layers",
    "zero_ablate",
]


def _save(value):
    return value.save()


def _layer_filter(layers: Iterable[int] | None, n_layers: int) -> set[int]:
    return set(range(n_layers)) if layers is None else {int(x) for x in layers}


def _per_row(model, per_row: Sequence[Iterable[Sequence[int]]]) -> list[tuple[Head, ...]]:
    return [model.check_heads(row) for row in per_row]


def zero_ablate(model, heads=None, *, per_row=None, layers: Iterable[int] | None = None) -> None:
    """Zero-ablate heads in the current trace or invoke.

    The head's slice of the output projection's *input* is set to zero, so the head
    contributes nothing, exactly as if its attention probabilities were zero.

    Args:
        model: A ``bindscope.Model``.
        heads: ``(layer, head)`` pairs ablated in every row.
        per_row: Instead of ``heads``, one list of pairs per batch row of the invoke.
        layers: Only touch these layers (to interleave with captures).
    """
    run_layers(model, zero=heads, zero_per_row=per_row, only_layers=layers)


def capture_attention(
    model, layers: Iterable[int] | None = None, *, reduce: Callable | None = None
) -> list:
    """Capture post-softmax attention probabilities ``[b, H, n, n]`` per requested layer.

    Under eager attention this is the attention module's own weights output; otherwise the
    probabilities are recomputed from the attention function's inputs. ``reduce`` maps a
    layer's probabilities to something smaller before it is saved (e.g. BSI ``[b, H]``).

    Returns:
        A list with one saved tensor per requested layer, ascending.
    """
    wanted = sorted(_layer_filter(layers, model.n_layers))
    found = run_layers(model, capture=wanted, reduce=reduce, only_layers=wanted)
    return _save([found[layer] for layer in wanted])  # the list itself must outlive the trace


@dataclass(frozen=True)
class HeadMeans:
    """Mean output-projection input per head over a reference set of texts.

    Attributes:
        means: ``{layer: [H, hd]}`` float32 means over all real (non-pad) positions.
        n_positions: Number of token positions averaged.
    """

    means: dict[int, torch.Tensor]
    n_positions: int


@torch.no_grad()
def head_means(model, texts: Sequence[str], heads, *, batch_size: int = 16) -> HeadMeans:
    """Average every listed head's pre-projection output over ``texts``.

    Args:
        model: A ``bindscope.Model``.
        texts: Reference texts (padding positions are excluded from the mean).
        heads: ``(layer, head)`` pairs; means are kept for all heads of their layers.
    """
    spec = model.check_heads(heads)
    layers = sorted({layer for layer, _ in spec})
    sums = {layer: torch.zeros(model.n_heads, model.head_dim) for layer in layers}
    count = 0
    for batch in model.batches(texts, batch_size=batch_size):
        saved: dict[int, torch.Tensor] = {}
        with model.nnsight.trace(**batch.inputs, **model.trace_options) as tracer:
            for layer in layers:
                x = ops.attention_module(model.nnsight, layer).o_proj.input  # [b, s, H*hd]
                saved[layer] = x.detach().clone().save()
            tracer.stop()
        mask = batch.attention_mask.bool()  # [b, s]
        for layer in layers:
            view = ops.head_view(saved[layer], model.n_heads, model.head_dim).float()
            sums[layer] += view[mask].sum(0)
        count += int(mask.sum())
    return HeadMeans({layer: s / count for layer, s in sums.items()}, count)


def mean_ablate(
    model, means: HeadMeans, heads=None, *, per_row=None, layers: Iterable[int] | None = None
) -> None:
    """Replace heads' pre-projection outputs by their means from ``head_means``."""
    run_layers(model, mean=heads, mean_per_row=per_row, means=means, only_layers=layers)


def run_layers(
    model,
    *,
    capture: Iterable[int] = (),
    reduce: Callable | None = None,
    zero=None,
    zero_per_row=None,
    mean=None,
    mean_per_row=None,
    means: HeadMeans | None = None,
    only_layers: Iterable[int] | None = None,
    into: dict | None = None,
) -> dict:
    """Walk the layers once, in execution order, applying ablations and captures.

    This is the single place that orders requests, so captures and ablations of any layers
    compose in one forward pass. Returns ``{layer: saved value}`` for captured layers.
    """
    if zero is not None and zero_per_row is not None:
        raise ValueError("pass either heads= or per_row= to zero_ablate, not both")
    env, n_heads, head_dim = model.nnsight, model.n_heads, model.head_dim
    zero_layers = by_layer(model.check_heads(zero)) if zero is not None else {}
    keep = row_masks(_per_row(model, zero_per_row), n_heads=n_heads) if zero_per_row else {}
    mean_layers = by_layer(model.check_heads(mean)) if mean is not None else {}
    replace = (
        {k: v == 0 for k, v in row_masks(_per_row(model, mean_per_row), n_heads=n_heads).items()}
        if mean_per_row
        else {}
    )
    if (mean_layers or replace) and means is None:
        raise ValueError("mean_ablate needs means=head_means(model, reference_texts, heads)")
    for layer in list(mean_layers) + list(replace):
        if layer not in means.means:
            raise ValueError(f"no reference means for layer {layer}; include it in head_means()")
    capture = set(capture)
    recompute = model.capture_mode == "recompute"
    label = model.attention_call_label if (capture and recompute) else None
    out = {} if into is None else into
    allowed = _layer_filter(only_layers, model.n_layers)
    for layer in range(model.n_layers):
        if layer not in allowed:
            continue
        attn = ops.attention_module(env, layer)
        probs = None
        if layer in capture and recompute:
            args, kwargs = getattr(attn.source, label).inputs
            probs = ops.recompute_probs(args, kwargs)
        if layer in zero_layers:
            ops.zero_heads(env, layer, zero_layers[layer], n_heads, head_dim)
        if layer in keep:
            ops.zero_heads(env, layer, None, n_heads, head_dim, keep=keep[layer])
        if layer in mean_layers:
            ops.mean_heads(env, layer, mean_layers[layer], n_heads, head_dim, means.means[layer])
        if layer in replace:
            ops.mean_heads(
                env, layer, None, n_heads, head_dim, means.means[layer], replace=replace[layer]
            )
        if layer in capture:
            if probs is None:
                probs = attn.output[1]  # [b, H, n, n]
            value = reduce(probs) if reduce is not None else probs.float()
            out[layer] = _save(value)
    return out
