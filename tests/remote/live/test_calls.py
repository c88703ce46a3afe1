"""Every model call through the real NDIF server equals its local run, on both embedded models.

Both sides hold the same float32 weights (the server loads the conversion a local run
loads) and run one thread per process, so a trace computes the same operations in the same
order: equality is to the last bit, and ``torch.equal`` is the check. Where a result is
not bit-equal, a bound derived for that case says why (see each test).
"""

from __future__ import annotations

import pytest
import torch

from bindscope.interventions import Knockout, Mean, Patch, Resample, Steer, Zero, head_means
from bindscope.interventions.means import site_means
from tests.remote.test_simulation_specs import _variants as variants

pytestmark = pytest.mark.ndif_live

HEADS = [(0, 1), (1, 0), (2, 2)]  # valid on both models (SmolLM2 9 heads, Gemma 3 4)
TEXTS = [
    "In web accessibility, a screen reader is a program that",
    "Alt text describes an image",
    "The quick brown fox jumps over the lazy dog near the river bank.",
]
SITES = ["resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "head_out", "pattern"]


def _variants(model):
    """Four texts of one length: a base text and three with token 5 swapped (donors)."""
    return variants(model, TEXTS[2], tokens=(300, 301, 302))


def _equal_lists(got, ref, what):
    assert len(got) == len(ref), what
    for g, r in zip(got, ref):
        assert torch.equal(g, r), (what, float((g - r).abs().max()))


def test_probabilities_and_logits_equal_local(twins):
    local, far = twins
    for kwargs in ({}, {"ablate": HEADS}):
        _equal_lists(
            far.attention_probs(TEXTS, **kwargs),
            local.attention_probs(TEXTS, **kwargs),
            ("attention_probs", kwargs),
        )
        _equal_lists(far.logits(TEXTS, **kwargs), local.logits(TEXTS, **kwargs), ("logits", kwargs))
    # negative control: a wrong head changes the logits far beyond equality
    moved = far.logits(TEXTS[:1], ablate=[(0, 0)])[0]
    assert not torch.equal(moved, local.logits(TEXTS[:1], ablate=HEADS[:1])[0])


def test_capture_at_every_site_equals_local(twins):
    local, far = twins
    sites = SITES  # both families have every site, resid_mid included
    got = far.capture(TEXTS[:2], sites=sites, layers=[0, 2])
    ref = local.capture(TEXTS[:2], sites=sites, layers=[0, 2])
    for a, b in zip(got, ref):
        for site in sites:
            for layer in (0, 2):
                assert torch.equal(a[site][layer], b[site][layer]), (site, layer)


def test_every_intervention_spec_equals_local(twins):
    local, far = twins
    texts = _variants(local)
    vector = torch.randn(local.d_model, generator=torch.Generator().manual_seed(2))
    means = head_means(local, TEXTS, HEADS)
    remote_means = head_means(far, TEXTS, HEADS)
    assert all(torch.equal(remote_means.means[k], means.means[k]) for k in means.means)
    mlp_means = site_means(local, TEXTS, "mlp_out", [1])
    n = len(texts[0])
    cases = [
        {"intervene": Zero(HEADS)},
        {"intervene": Mean(HEADS, means)},
        {"intervene": Patch(HEADS, texts[::-1])},
        {"intervene": Resample(HEADS, texts, seed=1)},
        {"intervene": Knockout(HEADS, [(n - 1, 0), (n - 1, 1)])},
        {"intervene": [Steer("resid_post", 0, vector, scale=2.0), Zero("attn_out", layers=[2])]},
        {"intervene": Patch("resid_pre", texts[::-1], layers=[1], positions=[5, 6])},
        {
            "per_row": [
                Mean("mlp_out", mlp_means, layers=[1]),
                None,
                Zero(layers=[0]),
                Knockout(HEADS, [(n - 2, 1)]),
            ]
        },
    ]
    for kwargs in cases:
        _equal_lists(far.logits(texts, **kwargs), local.logits(texts, **kwargs), kwargs)


def test_generation_under_interventions_equals_local(twins):
    local, far = twins
    vector = torch.randn(local.d_model, generator=torch.Generator().manual_seed(3))
    steer = Steer("resid_post", 1, 3.0 * vector)
    for kwargs in (
        {},
        {"ablate": HEADS},
        {"intervene": steer},
        {"per_row": [HEADS[:1], None, Zero(HEADS)]},
    ):
        got = far.generate_ids(TEXTS, max_new_tokens=5, **kwargs)
        assert got == local.generate_ids(TEXTS, max_new_tokens=5, **kwargs), kwargs
    assert far.generate(TEXTS[:1], max_new_tokens=4, ablate=HEADS) == local.generate(
        TEXTS[:1], max_new_tokens=4, ablate=HEADS
    )


def test_records_say_ndif_with_host_and_versions(twins, live):
    from bindscope.results.records import provenance

    _, far = twins
    record = provenance(far)
    assert record["remote"] == "ndif" and record["ndif_host"] == live
    assert record["server_versions"]["nnsight"] == "0.8.1"
    assert record["server_versions"]["torch"].startswith("2.13.0")
