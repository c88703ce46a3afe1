"""Sites: every captured site equals a plain torch hook on the native HF module, on every family.

Bounds: the capture runs the texts left-padded in one batch, the reference one text alone,
so they differ by rounding in every layer up to the site: `tolerance.rounding_bound` with the
site's largest activation as magnitude, the hidden size as width and the layers passed (plus
one) as depth. A wrong layer or a wrong site misses that bound by orders of magnitude.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import InterventionError, UnsupportedModelError
from bindscope.families import CALL_SITES, SITE_NAMES
from tests.conftest import PROMPTS
from tests.reference_sites import native_sites, site_reference
from tests.tolerance import assert_within, misses, rounding_bound

MARGIN = 100  # rounding noise against what a wrong layer or site changes


def site_bound(model, reference: torch.Tensor, layer: int) -> float:
    return rounding_bound(
        magnitude=float(reference.abs().max()), width=model.d_model, depth=layer + 2
    )


def _worst(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def test_every_site_equals_a_torch_hook_under_left_padding(tiny):
    sites = [s for s in native_sites(tiny.family) if s in tiny.sites]
    # the row and the reference agree (the attention call's sites: test_tl_sites.py)
    assert set(sites) == set(tiny.sites) - {"pattern", *CALL_SITES}
    got = tiny.capture(PROMPTS, sites=sites)
    report = []
    for i, text in enumerate(PROMPTS):
        ids = tiny.tokenize(text)
        for site in sites:
            for layer in range(tiny.n_layers):
                ref = site_reference(tiny, ids, site, layer)
                value = got[i][site][layer]
                assert value.shape == ref.shape
                bound = site_bound(tiny, ref, layer)
                error = _worst(value, ref)
                report.append((site, layer, error, bound))
                assert_within(value, ref, bound, f"{site} layer {layer}")
    worst = max(report, key=lambda r: r[2] / r[3])
    print(f"{tiny.family}: worst {worst[0]} L{worst[1]} {worst[2]:.2e} vs bound {worst[3]:.2e}")


def test_a_wrong_layer_or_site_misses_the_bound_by_orders_of_magnitude(tiny):
    text = PROMPTS[2]
    ids = tiny.tokenize(text)
    residual = [s for s in ("resid_pre", "resid_mid", "resid_post") if s in tiny.sites]
    got = tiny.capture([text], sites=[*residual, "attn_out", "mlp_out"], layers=[1])[0]
    for site in got:
        ref = site_reference(tiny, ids, site, 1)
        bound = site_bound(tiny, ref, 1)
        for layer in (0, 2):  # the same site one layer off
            assert misses(got[site][1], site_reference(tiny, ids, site, layer), bound) > MARGIN
        for other in got:  # another site of the same layer
            if other != site:
                wrong = site_reference(tiny, ids, other, 1)
                assert misses(got[site][1], wrong, bound) > MARGIN, (site, other)


def test_sites_add_up_along_the_residual_stream(tiny):
    """resid_mid = resid_pre + attn_out and resid_post = resid_mid + mlp_out (parallel:
    resid_post = resid_pre + attn_out + mlp_out): the names mean what TransformerLens's do."""
    got = tiny.capture(PROMPTS[:1], sites=[s for s in tiny.sites if s != "pattern"])[0]
    for layer in range(tiny.n_layers):
        pre, attn = got["resid_pre"][layer], got["attn_out"][layer]
        mlp, post = got["mlp_out"][layer], got["resid_post"][layer]
        bound = rounding_bound(magnitude=float(post.abs().max()), width=1, depth=2)
        if "resid_mid" in got:
            mid = got["resid_mid"][layer]
            torch.testing.assert_close(mid, pre + attn, rtol=0, atol=bound)
            torch.testing.assert_close(post, mid + mlp, rtol=0, atol=bound)
        else:
            torch.testing.assert_close(post, pre + attn + mlp, rtol=0, atol=2 * bound)
        if layer + 1 < tiny.n_layers:
            assert torch.equal(got["resid_pre"][layer + 1], post)  # one tensor, two names


def test_pattern_and_head_out_capture_equal_the_older_calls(tiny):
    got = tiny.capture(PROMPTS, sites=["pattern", "head_out"], layers=[0, 2])
    probs = tiny.attention_probs(PROMPTS, layers=[0, 2])
    for found, prob in zip(got, probs):
        assert torch.equal(found["pattern"][0], prob[0])
        assert torch.equal(found["pattern"][2], prob[1])
        assert found["head_out"][2].shape[1:] == (tiny.n_heads, tiny.head_dim)


def test_capture_leaves_the_run_bit_identical(tiny):
    """Capturing reads the sites: the logits saved with them equal a plain run's."""
    clean = tiny.logits(PROMPTS)
    from bindscope.interventions import Patch

    patched = tiny.logits(PROMPTS, intervene=Patch("resid_pre", PROMPTS, layers=[0, 1, 2]))
    assert all(torch.equal(a, b) for a, b in zip(patched, clean))


def test_bad_sites_are_refused(tiny):
    with pytest.raises(InterventionError, match="no site 'resid_middle'"):
        tiny.capture(PROMPTS, sites=["resid_middle"])
    with pytest.raises(InterventionError, match="captures nothing"):
        tiny.capture(PROMPTS, sites=[])
    if "resid_mid" not in tiny.sites:
        with pytest.raises(InterventionError, match="no site 'resid_mid'"):
            tiny.capture(PROMPTS, sites=["resid_mid"])


def test_site_names_are_the_table_order():
    assert SITE_NAMES[0] == "resid_pre" and SITE_NAMES[-1] == "resid_post"
    assert UnsupportedModelError is not None


def test_capture_and_logit_lens_take_sites_and_layers_positionally(tiny):
    by_position = tiny.capture(PROMPTS[:1], ["resid_post"], [1])[0]["resid_post"][1]
    by_name = tiny.capture(PROMPTS[:1], sites=["resid_post"], layers=[1])[0]["resid_post"][1]
    assert torch.equal(by_position, by_name)
    assert torch.equal(
        tiny.logit_lens(PROMPTS[:1], [1])[0], tiny.logit_lens(PROMPTS[:1], layers=[1])[0]
    )
