"""Attribution to a dictionary's features: every latent estimated (AtP), the top K measured."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bindscope.batch import check_texts, token_ids
from bindscope.errors import whole_number
from bindscope.interventions import Spec, Zero
from bindscope.interventions.dictionary import Dictionary, Features
from bindscope.interventions.ops import metric_values
from bindscope.interventions.trace.features import features_key
from bindscope.protocols import LanguageModel
from bindscope.runners.attribution_metrics import Metric, check_metrics, metric_terms
from bindscope.runners.attribution_patching import MetricArg, attribution_patching

__all__ = ["FeatureAttribution", "feature_attribution"]


@dataclass(frozen=True)
class FeatureAttribution:
    """Estimated and exact metric changes of a dictionary's latents, one text per row."""

    clean: np.ndarray  # [S] the metric, no edit
    estimate: np.ndarray  # [S, d_sae]
    verified: tuple[int, ...]  # the K latents measured, largest mean |estimate| first
    exact: np.ndarray  # [S, K] their change, each edited alone


def feature_attribution(
    model: LanguageModel,
    texts: Sequence,
    metric: MetricArg,
    dictionary: Dictionary,
    *,
    edit: Callable[[Features], Spec] = Zero,
    verify: int = 20,
    method: str = "atp*",
    batch_size: int = 16,
) -> FeatureAttribution:
    """Estimate every latent's effect on ``metric`` under ``edit``; measure the top ``verify``."""
    texts = list(texts)
    fix = "pass the number of latents to measure exactly, e.g. verify=20"
    whole_number(verify, "verify", fix, least=1, below=dictionary.d_sae + 1)
    every = dictionary.features(range(dictionary.d_sae))
    found = attribution_patching(
        model, texts, metric, intervene=edit(every), method=method, batch_size=batch_size
    )
    key = (features_key(dictionary.site), dictionary.layer)
    estimate = np.stack([per_text[key].numpy() for per_text in found])  # [S, F]
    order = np.argsort(-np.abs(estimate.mean(0)), kind="stable")[:verify]
    clean = metric_of(model, texts, metric, batch_size=batch_size)

    def change(i: int) -> np.ndarray:  # of latent i edited alone
        edited = edit(dictionary.features(int(i)))
        return metric_of(model, texts, metric, intervene=edited, batch_size=batch_size) - clean

    exact = np.stack([change(i) for i in order], axis=1)  # [S, K]
    return FeatureAttribution(clean, estimate, tuple(int(i) for i in order), exact)


@torch.no_grad()
def metric_of(
    model: LanguageModel,
    texts: list,
    metric: MetricArg,
    *,
    intervene: object = None,
    batch_size: int = 16,
) -> np.ndarray:
    """``[S]`` the metric of each text's logits (``model.logits``) under ``intervene``."""
    ids = [token_ids(model, t) for t in check_texts(texts)]
    metrics: list[Metric] = check_metrics(model, metric, [len(i) for i in ids])
    logits = model.logits(texts, intervene=intervene, batch_size=batch_size)
    out = np.zeros(len(texts))
    for s, (row, m, got) in enumerate(zip(ids, metrics, logits)):
        terms, _ = metric_terms([m], torch.tensor([row]), every_logit=True)
        out[s] = float(metric_values(got[None], terms)[0])
    return out
