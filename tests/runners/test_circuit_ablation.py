"""Mean-ablated circuits: every edge keeps the whole metric, none gives the mean-ablated run.

The reference is independent of the engine: with every edge mean-ablated, every receiver
(the logits included) reads the same residual, ``mean(embed) + sum over layers of
(attention block of the mean head outputs + mean MLP output)`` (each block's bias and, in
a sandwich family, its output norm act on the means), so the metric is the LM head of that
one vector, computed here with plain torch hooks and the native HF modules.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bindscope.errors import InputError
from bindscope.interventions import edge_means
from bindscope.runners.circuit import faithfulness
from bindscope.runners.edges import path_patching
from tests.reference_edges import edge_bound
from tests.reference_sites import _module, decoder_layers, hooked, native_sites
from tests.runners.test_edges import scored  # noqa: F401 (the scored pairs of every family)

CORRECT, WRONG = 5, 7


def _reference_mean_ablated(model, texts) -> float:
    """``logits[CORRECT] - logits[WRONG]`` with every edge mean-ablated (plain torch)."""
    hf, family = model.hf, model.family
    found: dict[str, list] = {"resid_pre": [], "head_out": [], "mlp_out": []}
    with torch.no_grad():
        for ids in texts:
            for site in found:
                per_layer = []
                for layer in range(model.n_layers if site != "resid_pre" else 1):
                    into: list[torch.Tensor] = []
                    with hooked(hf, family, site, layer, into=into):
                        hf(torch.tensor([ids]))
                    per_layer.append(into[0][0])
                found[site].append(per_layer)

        def mean(site: str, layer: int) -> torch.Tensor:
            return torch.cat([text[layer] for text in found[site]]).mean(0)

        layers = decoder_layers(hf, family)
        sites = native_sites(family)
        residual = mean("resid_pre", 0)
        for layer in range(model.n_layers):
            block = _module(layers[layer], sites["head_out"][0])(mean("head_out", layer))
            post = sites["attn_out"][0]
            if post.endswith("layernorm"):  # a sandwich norm on the attention output
                block = _module(layers[layer], post)(block)
            residual = residual + block + mean("mlp_out", layer)
        norm = {"gpt2": "transformer.ln_f", "gpt_neox": "gpt_neox.final_layer_norm"}
        final = _module(hf, norm.get(family, "model.norm"))
        logits = hf.get_output_embeddings()(final(residual[None]))[0]
        cap = getattr(hf.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
    return float(logits[CORRECT] - logits[WRONG])


def test_no_edge_is_the_mean_ablated_run(scored):  # noqa: F811
    model, clean, corrupted, metric, scores = scored
    valid = scores.graph.valid
    means = edge_means(model, corrupted)
    ours = path_patching(model, clean, corrupted, metric, valid, means=means)
    ref = _reference_mean_ablated(model, corrupted)
    bound = edge_bound(abs(ref) + 1, model)
    np.testing.assert_allclose(ours, [ref, ref], atol=bound, rtol=0)
    # the same for every pair (a constant stream), and far from the corrupted metric
    assert np.abs(ours - scores.corrupted).max() > 100 * bound
    empty = faithfulness(
        model, clean, corrupted, metric, scores, np.zeros_like(valid), n_random=1,
        ablation="mean",
    )  # fmt: skip
    np.testing.assert_allclose(empty.ablated, ours, atol=bound, rtol=0)
    gap = abs(float(np.mean(scores.clean)) - ref)
    assert abs(empty.share.value) <= 4 * bound / gap
    np.testing.assert_allclose(empty.null, [0.0], atol=4 * bound / gap)


def test_every_edge_keeps_the_whole_metric(scored):  # noqa: F811
    model, clean, corrupted, metric, scores = scored
    whole = faithfulness(
        model, clean, corrupted, metric, scores, scores.graph.valid, n_random=0, ablation="mean"
    )
    bound = edge_bound(float(np.abs(scores.clean).max()) + 1, model)
    gap = abs(float(np.mean(scores.clean) - np.mean(whole.ablated)))
    assert abs(whole.share.value - 1) <= 4 * bound / gap
    np.testing.assert_allclose(whole.patched, scores.clean, atol=bound, rtol=0)


def test_an_unknown_ablation_is_refused(scored):  # noqa: F811
    model, clean, corrupted, metric, scores = scored
    with pytest.raises(InputError, match="ablation='zero'"):
        faithfulness(model, clean, corrupted, metric, scores, scores.graph.valid, ablation="zero")
