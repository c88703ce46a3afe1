"""Interventions: specs for every call, and primitives for your own traces.

**Specs** (`Zero`, `Mean`, `Patch`, `Resample`, `Steer`, `Knockout`, and `PathPatch` for
edges between components) say what is done to which heads or sites (``resid_pre``,
``resid_mid``, ``mlp_in``, ``resid_post``, ``attn_out``, ``mlp_out``, ``head_out``); every call that
runs the model takes them as ``intervene=`` (all texts) or ``per_row=`` (one entry per
text)::

    model.logits(texts, intervene=Patch([(2, 8)], source=corrupted))
    model.logits(texts, intervene=Patch("resid_pre", corrupted, layers=[3], positions=[5]))
    model.generate(texts, max_new_tokens=9, intervene=Steer("resid_post", 4, vector))
    model.logits(texts, intervene=Hook("resid_post", 3, lambda x: x * 0.5))  # run_with_hooks
    model.generate(texts, max_new_tokens=9, intervene=Patchscope(source, 3, -1, target_layer=0))

``ablate=heads`` is the shortcut of ``intervene=Zero(heads)``. A dictionary's latents
(`load_dictionary`, docs/dictionaries.md) are a target too: ``Zero(sae.features([3, 7]))``.

**Primitives** work inside a trace you open, in execution order (a layer's ablation before
that layer's capture); ``layers=`` means act only on these layers. They live in ``ops``
(torch and math only), so the same bodies run locally and, shipped by value, on NDIF::

    with model.eager(), model.nnsight.trace(**batch.inputs):
        for layer in range(model.n_layers):
            run_layers(model, plan=ops.head_plan(model, [(2, 8)]), only_layers=[layer])
            probs.update(capture_probs(model, layers=[layer]))
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from bindscope.batch import sessions
from bindscope.interventions import ops
from bindscope.interventions.dictionary import (
    Dictionary,
    Features,
    capture_features,
    feature_means,
    load_dictionary,
)
from bindscope.interventions.flow_specs import Knockout, PathPatch, PatternPatch, Spec, Steer
from bindscope.interventions.hook_specs import Hook, Patchscope
from bindscope.interventions.means import EdgeMeans, SiteMeans, edge_means, site_means
from bindscope.interventions.ops import (
    capture_attention,
    capture_probs,
    mean_ablate,
    run_layers,
    zero_ablate,
)
from bindscope.interventions.resolve import HeadList, Intervention, PerRow
from bindscope.interventions.specs import Mean, Patch, Resample, Zero
from bindscope.protocols import LanguageModel

__all__ = [
    "Dictionary",
    "EdgeMeans",
    "Features",
    "HeadList",
    "Hook",
    "Intervention",
    "Knockout",
    "Mean",
    "Patch",
    "Patchscope",
    "PathPatch",
    "PatternPatch",
    "PerRow",
    "Resample",
    "SiteMeans",
    "Spec",
    "Steer",
    "Zero",
    "capture_attention",
    "capture_features",
    "capture_probs",
    "edge_means",
    "feature_means",
    "head_means",
    "load_dictionary",
    "mean_ablate",
    "run_layers",
    "site_means",
    "zero_ablate",
]


def __getattr__(name: str) -> type:
    if name == "HeadMeans":  # one means type for head outputs
        warnings.warn(
            "HeadMeans is deprecated: use SiteMeans (head_means returns one, site 'head_out')",
            DeprecationWarning,
            stacklevel=2,
        )
        return SiteMeans
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    HeadMeans = SiteMeans


@torch.no_grad()
def head_means(
    model: LanguageModel, texts: Sequence[str], heads: HeadList, *, batch_size: int = 16
) -> SiteMeans:
    """Average every listed head's pre-projection output over ``texts``: a `SiteMeans`.

    The same as ``site_means(model, texts, "head_out")``, but each forward pass reduces to
    per-head sums ``[H, hd]`` inside the trace, so only those come back; a remote model runs
    up to ``SESSION_BATCHES`` batches per session request.

    Args:
        model: A ``bindscope.Model``.
        texts: Reference texts (padding positions are excluded from the mean).
        heads: ``(layer, head)`` pairs; means are kept for all heads of their layers.
        batch_size: Texts per forward pass.
    """
    spec = model.check_heads(heads)
    layers = sorted({layer for layer, _ in spec})
    sums = {layer: torch.zeros(model.n_heads, model.head_dim) for layer in layers}
    batches = list(model.batches(texts, batch_size=batch_size))
    jobs = [(b.inputs, b.attention_mask.bool()) for b in batches]
    count = sum(int(mask.sum()) for _, mask in jobs)
    for part in sessions(jobs):
        for found in _head_sums_session(model, part, layers):
            for layer in layers:
                sums[layer] += found[layer].float().cpu()
    return SiteMeans("head_out", {layer: s / count for layer, s in sums.items()}, count)


def _head_sums_session(
    model: LanguageModel, jobs: Sequence[tuple[dict, torch.Tensor]], layers: list[int]
) -> list[dict]:
    """One session (one request when remote) of traces, each returning ``{layer: [H, hd]}``."""
    env = model.nnsight
    # ndif 0.1.2's sandbox cannot run a trace after one that stopped (docs/remote.md, Limits)
    stop = not model.remote
    with env.session(**model.trace_options):
        collected = [].save()  # type: ignore[attr-defined]  # nnsight gives every object .save
        for inputs, mask in jobs:
            with env.trace(**inputs) as tracer:
                collected.append(ops.collect_head_sums(model, layers, mask))
                if stop:
                    tracer.stop()
    return collected
