"""Patch, Resample, Knockout, features and the q/k/v sites through simulated NDIF equal local.

Same twins as ``test_simulation.py``: one model runs locally, its same-weights twin sends
every trace through ``SimulatedServer`` (payload unpickled with NDIF's whitelist, body run
on copies, only saved values returned).
"""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import InterventionError
from bindscope.interventions import Hook, Knockout, Patch, Patchscope, Resample, Steer, Zero
from bindscope.runners.binding import binding
from tests.conftest import PROMPTS
from tests.remote.test_simulation import HEADS, RECORDS


def _variants(model, text: str = PROMPTS[2], tokens=(30, 31, 32)):
    """Four texts of one length: ``text`` and three with token 5 swapped (donors)."""
    base = model.tokenize(text)
    out = [base]
    for token in tokens:
        ids = list(base)
        ids[5] = token
        out.append(ids)
    return out


def _knockout(model):
    n = [len(model.tokenize(t)) for t in PROMPTS]
    return [Knockout(HEADS, [(m - 1, 0), (m - 1, 1)]) if m > 3 else None for m in n]


def test_patch_resample_and_knockout_logits_equal_local(twins):
    local, simulated = twins
    texts = _variants(local)
    cases = [
        {"intervene": Patch(HEADS, texts[::-1])},
        {"intervene": Resample(HEADS, texts, seed=1)},
        {"per_row": [Patch(HEADS, [texts[1]]), None, Zero(HEADS), Knockout(HEADS, [(9, 2)])]},
    ]
    for kwargs in cases:
        for got, ref in zip(simulated.logits(texts, **kwargs), local.logits(texts, **kwargs)):
            assert torch.equal(got, ref), kwargs
    per_row = _knockout(local)
    for got, ref in zip(
        simulated.logits(PROMPTS, per_row=per_row), local.logits(PROMPTS, per_row=per_row)
    ):
        assert torch.equal(got, ref)


def test_patch_and_knockout_probabilities_generation_and_binding_equal_local(twins):
    local, simulated = twins
    texts = _variants(local)
    spec = [Patch(HEADS[:1], texts[1:2]), Knockout(HEADS[1:], [(6, 0), (7, 1)])]
    for got, ref in zip(
        simulated.attention_probs(texts[:1], intervene=spec),
        local.attention_probs(texts[:1], intervene=spec),
    ):
        assert torch.equal(got, ref)
    per_row = _knockout(local)
    got = simulated.generate_ids(PROMPTS, max_new_tokens=4, per_row=per_row)
    assert got == local.generate_ids(PROMPTS, max_new_tokens=4, per_row=per_row)
    knock = Knockout(HEADS, [(1, 0)])  # every measured prefix has >= 2 tokens
    for a, b in zip(
        binding(simulated, RECORDS, intervene=knock), binding(local, RECORDS, intervene=knock)
    ):
        assert torch.equal(a.bsi.nan_to_num(-1), b.bsi.nan_to_num(-1))


def test_site_specs_steer_and_capture_equal_local(twins):
    """Sites, Steer vectors and captured activations travel like head outputs."""
    from bindscope.interventions import Mean, Steer
    from bindscope.interventions.means import site_means

    local, simulated = twins
    texts = _variants(local)
    vector = torch.randn(local.d_model, generator=torch.Generator().manual_seed(2))
    means = site_means(local, PROMPTS, "mlp_out", [1])
    cases = [
        {"intervene": Patch("resid_pre", texts[::-1], layers=[1], positions=[5, 6])},
        {"intervene": [Steer("resid_post", 0, vector, scale=2.0), Zero("attn_out", layers=[2])]},
        {"per_row": [Mean("mlp_out", means, layers=[1]), None, Zero(layers=[0]), None]},
    ]
    for kwargs in cases:
        for got, ref in zip(simulated.logits(texts, **kwargs), local.logits(texts, **kwargs)):
            assert torch.equal(got, ref), kwargs
        sites = ["resid_pre", "head_out", "mlp_out", "resid_post"]
        far = simulated.capture(texts, sites=sites, layers=[0, 2], **kwargs)
        near = local.capture(texts, sites=sites, layers=[0, 2], **kwargs)
        for a, b in zip(far, near):
            for site in sites:
                for layer in (0, 2):
                    assert torch.equal(a[site][layer], b[site][layer]), (kwargs, site, layer)
    steer = Steer("resid_post", 1, 3.0 * vector)
    assert simulated.generate_ids(PROMPTS, max_new_tokens=4, intervene=steer) == (
        local.generate_ids(PROMPTS, max_new_tokens=4, intervene=steer)
    )
    for got, ref in zip(simulated.logit_lens(PROMPTS[:2]), local.logit_lens(PROMPTS[:2])):
        assert torch.equal(got, ref)


@pytest.mark.parametrize("kind", ["sae", "transcoder"])
def test_feature_specs_ship_their_dictionary_and_equal_local(twins, kind):
    """A dictionary's weights travel in the request (a plain TraceDictionary in the plan); a
    transcoder's edit reads the MLP's input in the shipped walk."""
    from tests.interventions.test_dictionary import random_dictionary
    from tests.interventions.test_transcoder import random_transcoder

    local, simulated = twins
    texts = _variants(local)
    if kind == "sae":
        sae = random_dictionary(local, "resid_post", "topk")
    else:
        sae = random_transcoder(local, "jumprelu", skip=False)
    features = sae.features([0, 3, 5])
    for spec in (Zero(features), Patch(features, texts[::-1]), Steer(features, scale=2.0)):
        for got, ref in zip(
            simulated.logits(texts, intervene=spec), local.logits(texts, intervene=spec)
        ):
            assert torch.equal(got, ref), spec
    spec = Steer(features, scale=4.0)
    assert simulated.generate(PROMPTS, max_new_tokens=4, intervene=spec) == local.generate(
        PROMPTS, max_new_tokens=4, intervene=spec
    )


def test_a_dictionary_too_large_to_ship_is_refused_remotely_with_the_reason(twins, monkeypatch):
    import bindscope.interventions.dictionary as dictionaries
    from bindscope.errors import DictionaryError
    from tests.interventions.test_dictionary import random_dictionary

    local, simulated = twins
    sae = random_dictionary(local, "resid_post", "relu")
    monkeypatch.setattr(dictionaries, "REMOTE_BYTES", sae.nbytes - 1)
    local.logits(PROMPTS[:1], intervene=Zero(sae.features([0])))  # local: no limit
    with pytest.raises(DictionaryError, match=r"runs on NDIF.*every request"):
        simulated.logits(PROMPTS[:1], intervene=Zero(sae.features([0])))


def test_pattern_patch_and_patchscope_equal_local_and_a_hook_is_refused(twins):
    """Issue 44 through the simulated NDIF path: a Patch of the pattern site (its batch-wide
    invoke ships), a Patchscope (a capture request, then its state as a value), and a Hook
    refused before any request with the reason."""
    local, simulated = twins
    texts = _variants(local)
    pattern = Patch(HEADS, texts[1:2], site="pattern", positions=[9])
    scope = Patchscope(texts[1], 2, 5, target_layer=0, target_position=-1)
    for spec in (pattern, scope):
        for got, ref in zip(simulated.logits(texts[:2], intervene=spec),
                            local.logits(texts[:2], intervene=spec)):  # fmt: skip
            assert torch.equal(got, ref), spec.describe()
    assert simulated.generate_ids(texts[:2], max_new_tokens=3, intervene=scope) == (
        local.generate_ids(texts[:2], max_new_tokens=3, intervene=scope)
    )
    with pytest.raises(InterventionError, match="cannot be shipped"):
        simulated.logits(texts[:1], intervene=Hook("resid_post", 0, lambda x: x))


def test_capture_all_and_edits_at_the_new_sites_equal_local(twins):
    """q, k, v, scores, mlp_post and ln_final_scale ship (torch and math only)."""
    local, simulated = twins
    far, near = simulated.capture(PROMPTS, sites="all"), local.capture(PROMPTS, sites="all")
    for got, ref in zip(far, near):
        assert list(got) == list(ref)
        for site in ref:
            for layer in ref[site]:
                assert torch.equal(got[site][layer], ref[site][layer]), (site, layer)
    texts = _variants(local)
    vector = torch.randn(
        local.n_kv_heads * local.head_dim, generator=torch.Generator().manual_seed(0)
    )
    spec = [
        Zero([(1, 2)], site="q"),
        Patch([(0, 0)], texts[::-1], site="k"),
        Steer("v", 2, vector),
        Zero([(1, 7)], site="mlp_post"),
    ]
    for got, ref in zip(
        simulated.logits(texts, intervene=spec), local.logits(texts, intervene=spec)
    ):
        assert torch.equal(got, ref)
