"""Zero, Mean, Patch, Resample and Steer at sites equal plain torch hooks doing the same, on
every family; Steer also in every step of generation with the KV cache.

Bounds: `reference_patching.logit_atol` (float32 noise of logits computed in two batch
layouts, with the largest logit as scale); a wrong layer misses it by orders of magnitude.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import BindscopeError, InterventionError
from bindscope.interventions import Mean, Patch, Resample, Steer, Zero
from bindscope.interventions.means import site_means
from tests.conftest import PROMPTS
from tests.interventions.test_specs import CHANGED, variants
from tests.reference_patching import logit_atol
from tests.reference_sites import greedy_reference, hooked, site_reference
from tests.tolerance import misses

MARGIN = 100
SITES = ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post")


def _sites(model):
    return [s for s in SITES if s in model.sites]


def _hf_logits(model, ids, site=None, layer=0, edit=None):
    context = hooked(model.hf, model.family, site, layer, edit=edit) if site else None
    with torch.no_grad():
        if context is None:
            return model.hf(torch.tensor([ids])).logits[0].float()
        with context:
            return model.hf(torch.tensor([ids])).logits[0].float()


def _positions_edit(positions, value):
    """A hook edit that sets the given positions (all when None) to ``value(x)``."""

    def edit(x):
        x = x.clone()
        cols = slice(None) if positions is None else list(positions)
        x[0, cols] = value(x)[0, cols] if callable(value) else value
        return x

    return edit


def _check(model, got, ref, wrong, clean):
    atol = logit_atol(ref, model.n_layers)
    torch.testing.assert_close(got, ref, rtol=0, atol=atol)
    assert misses(got, wrong, atol) > MARGIN  # the same edit one layer off
    assert float((got - clean).abs().max()) > MARGIN * atol  # the edit did something


def test_zero_at_a_site_equals_a_hook(tiny):
    text = tiny.tokenize(PROMPTS[2])
    clean = _hf_logits(tiny, text)
    for site in _sites(tiny):
        # a whole residual stream zeroed leaves nothing to compare (every logit is 0)
        for positions in ([3, 7],) if site.startswith("resid") else (None, [3, 7]):
            got = tiny.logits([text], intervene=Zero(site, layers=[1], positions=positions))[0]
            edit = _positions_edit(positions, 0.0)
            ref = _hf_logits(tiny, text, site, 1, edit)
            _check(tiny, got, ref, _hf_logits(tiny, text, site, 2, edit), clean)


def test_mean_at_a_site_equals_a_hook_and_site_means_is_the_plain_average(tiny):
    text = tiny.tokenize(PROMPTS[2])
    clean = _hf_logits(tiny, text)
    for site in _sites(tiny):
        means = site_means(tiny, PROMPTS, site, layers=[1, 2])
        refs = [site_reference(tiny, tiny.tokenize(t), site, 1) for t in PROMPTS]
        average = torch.cat(refs).mean(0)
        torch.testing.assert_close(
            means.means[1], average, rtol=0, atol=1e-5 * float(average.abs().max()) + 1e-6
        )
        got = tiny.logits([text], intervene=Mean(site, means, layers=[1]))[0]
        edit = _positions_edit(None, means.means[1])
        ref = _hf_logits(tiny, text, site, 1, edit)
        _check(tiny, got, ref, _hf_logits(tiny, text, site, 2, edit), clean)


def test_patch_and_resample_at_a_site_equal_a_hook(tiny):
    target, source = variants(tiny, 2)
    clean = _hf_logits(tiny, target)
    late = [CHANGED, len(target) - 1]  # not every later position: then any layer is the same
    for site in _sites(tiny):
        donor = site_reference(tiny, source, site, 1)[None]
        got = tiny.logits([target], intervene=Patch(site, [source], layers=[1], positions=late))[0]
        edit = _positions_edit(late, lambda x, donor=donor: donor.to(x.dtype))
        ref = _hf_logits(tiny, target, site, 1, edit)
        wrong_donor = site_reference(tiny, source, site, 2)[None]
        wrong = _hf_logits(tiny, target, site, 2, _positions_edit(late, lambda x, d=wrong_donor: d))
        _check(tiny, got, ref, wrong, clean)
        resampled = tiny.logits([target], intervene=Resample(site, [source], layers=[1]))[0]
        patched = tiny.logits([target], intervene=Patch(site, [source], layers=[1]))[0]
        assert torch.equal(resampled, patched)


def test_steer_equals_a_hook_adding_the_vector(tiny):
    text = tiny.tokenize(PROMPTS[2])
    clean = _hf_logits(tiny, text)
    vector = torch.randn(tiny.d_model, generator=torch.Generator().manual_seed(0))
    for site in _sites(tiny):
        for positions in (None, [4]):
            spec = Steer(site, 1, vector, positions=positions, scale=2.0)
            got = tiny.logits([text], intervene=spec)[0]
            edit = _positions_edit(positions, lambda x: x + 2.0 * vector)
            ref = _hf_logits(tiny, text, site, 1, edit)
            _check(tiny, got, ref, _hf_logits(tiny, text, site, 2, edit), clean)


def test_steered_generation_equals_a_hook_token_for_token(tiny):
    vector = 3.0 * torch.randn(tiny.d_model, generator=torch.Generator().manual_seed(1))
    texts = PROMPTS  # left-padded together: the steer must act on every row's new tokens
    steer = Steer("resid_post", 1, vector)
    got = tiny.generate_ids(texts, max_new_tokens=6, intervene=steer)
    plain = tiny.generate_ids(texts, max_new_tokens=6)
    for text, ids in zip(texts, got):
        steering = hooked(tiny.hf, tiny.family, "resid_post", 1, edit=lambda x: x + vector)
        assert ids == greedy_reference(tiny, tiny.tokenize(text), 6, steering)
    assert got != plain  # the steer changed the continuation


def test_residual_self_patch_is_bit_identical_and_layer0_patch_gives_the_corrupt_run(tiny):
    clean = tiny.logits(PROMPTS)
    for site in _sites(tiny):
        every = Patch(site, PROMPTS, layers=range(tiny.n_layers))
        patched = tiny.logits(PROMPTS, intervene=every)
        assert all(torch.equal(a, b) for a, b in zip(patched, clean)), site
    target, corrupt = variants(tiny, 2)
    got = tiny.logits([target], intervene=Patch("resid_pre", [corrupt], layers=[0]))[0]
    ref = tiny.logits([corrupt])[0]
    atol = logit_atol(ref, tiny.n_layers)
    torch.testing.assert_close(got, ref, rtol=0, atol=atol)
    clean_target = tiny.logits([target])[0]
    assert float((got - clean_target).abs().max()) > MARGIN * atol


def test_logit_lens_last_layer_equals_the_logits(tiny):
    lens = tiny.logit_lens(PROMPTS, positions=None)  # every position
    logits = tiny.logits(PROMPTS)
    for found, ref in zip(lens, logits):
        assert found.shape == (tiny.n_layers, *ref.shape)
        atol = logit_atol(ref, tiny.n_layers)
        torch.testing.assert_close(found[-1], ref, rtol=0, atol=atol)
        assert float((found[-2] - ref).abs().max()) > MARGIN * atol  # an earlier layer differs


def test_all_heads_of_some_layers_shorthand_equals_listing_them(tiny):
    listed = [(layer, h) for layer in (0, 1) for h in range(tiny.n_heads)]
    short = tiny.logits(PROMPTS, intervene=Zero(layers=[0, 1]))
    long = tiny.logits(PROMPTS, intervene=Zero(listed))
    head_out = tiny.logits(PROMPTS, intervene=Zero("head_out", layers=[0, 1]))
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(short, long, head_out))


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda m: Zero("pattern", layers=[0]), "captured, not replaced"),
        (lambda m: Zero("resid_pre", layers=[9]), "layer=9 is not a whole number"),
        (lambda m: Steer("resid_pre", 0, torch.zeros(m.d_model + 1)), "entries"),
        (lambda m: Zero("resid_post", layers=[1], positions=[99]), "[99]"),
        (
            lambda m: [Zero("mlp_out", layers=[1]), Steer("mlp_out", 1, torch.ones(m.d_model))],
            "mlp_out of layer 1",
        ),
    ],
)
def test_bad_site_specs_are_refused(tiny, make, words):
    with pytest.raises(BindscopeError) as err:
        tiny.logits(PROMPTS[:1], intervene=make(tiny))
    assert words in str(err.value)


@pytest.mark.parametrize(
    "build",
    [
        lambda: Zero("resid_middle", layers=[0]),
        lambda: Zero("resid_pre"),
        lambda: Zero([(0, 1)], layers=[0]),
        lambda: Zero([(0, 1)], site="mlp_out"),
        lambda: Steer("resid_pre", 0, [1.0, 2.0]),
        lambda: Steer("resid_pre", 0, torch.tensor([float("nan")])),
        lambda: Steer("resid_pre", 0, torch.ones(3), scale=float("inf")),
    ],
)
def test_malformed_specs_are_refused_at_construction(build):
    with pytest.raises(InterventionError):
        build()
