"""Interventions: specs for every call (``intervene=``/``per_row=``), primitives for your traces.

``ablate=heads`` is the shortcut of ``intervene=Zero(heads)``; the primitives live in
``ops`` (torch and math only) so the same trace bodies run locally and on NDIF.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    capture_probs,
    mean_ablate,
    run_layers,
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
    "capture_features",
    "capture_probs",
    "edge_means",
    "feature_means",
    "head_means",
    "load_dictionary",
    "mean_ablate",
    "run_layers",
    "site_means",
]


@torch.no_grad()
def head_means(
    model: LanguageModel, texts: Sequence[str], heads: HeadList, *, batch_size: int = 16
) -> SiteMeans:
    """Average every listed head's pre-projection output over ``texts``: a `SiteMeans`.

    ``site_means(model, texts, "head_out")`` reduced in the trace to per-head sums, so only
    ``[H, hd]`` comes back; padding positions are left out, and means are kept for every head
    of the listed heads' layers.
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
