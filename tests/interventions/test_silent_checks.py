"""Issue 27, items 4, 5, 6, 9, 10 and 15: inputs that ran with wrong or no numbers, or died in
a raw traceback, are now refused (or kept apart) before any trace.

The silent ones run on every family: a Mean given another site's means, generation past the
context window, and aliased cells (``resid_post`` of layer L is ``resid_pre`` of L+1), whose
additions still compose: two Steers on the alias equal a plain hook adding their sum.
"""

from __future__ import annotations

import pytest
import torch

from bindscope.errors import InputError, InterventionError, PromptTooLongError
from bindscope.interventions import Mean, Steer, Zero, head_means, site_means
from bindscope.runners.attribution_metrics import LogitDifference, check_metrics
from tests.conftest import PROMPTS, build_tiny
from tests.reference_patching import logit_atol
from tests.reference_sites import hooked

MARGIN = 100


# -- item 5: Mean refuses means taken at another site ----------------------------------------


def test_mean_refuses_means_of_another_site_naming_both(tiny):
    mlp = site_means(tiny, PROMPTS[:2], "mlp_out", [2])
    with pytest.raises(InterventionError) as err:
        tiny.logits(PROMPTS[:1], intervene=Mean("resid_post", mlp, layers=[2]))
    message = str(err.value)
    assert "'resid_post'" in message and "'mlp_out'" in message and "site_means" in message
    # head means at a site, site means at the heads: refused the same way
    heads = head_means(tiny, PROMPTS[:2], [(1, 0)])
    with pytest.raises(InterventionError, match="'head_out'"):
        tiny.logits(PROMPTS[:1], intervene=Mean("attn_out", heads, layers=[1]))
    with pytest.raises(InterventionError, match="'resid_pre'"):
        tiny.logits(PROMPTS[:1], intervene=Mean([(1, 0)], site_means(tiny, PROMPTS, "resid_pre")))
    # means of the right site, or of the heads taken as a site, still run
    tiny.logits(PROMPTS[:1], intervene=Mean("mlp_out", mlp, layers=[2]))
    at_heads = site_means(tiny, PROMPTS[:2], "head_out", [1])
    tiny.logits(PROMPTS[:1], intervene=Mean([(1, 0)], at_heads))
    with pytest.raises(InterventionError, match="layer 1"):  # and another layer's means
        tiny.logits(PROMPTS[:1], intervene=Mean("mlp_out", mlp, layers=[1]))


# -- item 6: generation refuses to run past the context window ------------------------------


def test_generation_past_the_context_window_is_refused_before_generating(tiny):
    window = tiny.context_length
    assert window == 256  # the tiny configs' window
    prompt = (tiny.tokenize(PROMPTS[2]) * 40)[: window - 3]
    with pytest.raises(PromptTooLongError) as err:
        tiny.generate_ids([PROMPTS[0], prompt], max_new_tokens=4)
    message = str(err.value)
    assert "text #1" in message and f"{window - 3} tokens" in message
    assert str(window + 1) in message and f"window of {window}" in message
    assert "at most 3 new tokens" in message
    with pytest.raises(PromptTooLongError, match="text #0"):
        tiny.generate([PROMPTS[0]], max_new_tokens=window)
    # exactly filling the window runs, and gives the tokens asked for (or stops at EOS)
    got = tiny.generate_ids([prompt], max_new_tokens=3)[0]
    assert len(got) <= 3


# -- item 9: aliased cells are one cell --------------------------------------------------------


def _alias_conflicts(model):
    means = site_means(model, PROMPTS, "resid_pre", [2])
    vector = torch.ones(model.d_model)
    return [
        [Zero("resid_post", layers=[1]), Mean("resid_pre", means, layers=[2])],
        [Steer("resid_post", 1, vector), Zero("resid_pre", layers=[2])],
    ]


@pytest.mark.parametrize("case", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
def test_resid_post_and_the_next_resid_pre_are_one_cell(tiny, case, reverse):
    specs = _alias_conflicts(tiny)[case]
    specs = specs[::-1] if reverse else specs
    with pytest.raises(InterventionError) as err:
        tiny.logits(PROMPTS[:1], intervene=specs)
    message = str(err.value)
    assert "resid_pre of layer 2" in message and "resid_post of layer 1" in message
    assert "one tensor" in message and "text #0" in message
    # split over intervene= and per_row=, the same conflict
    with pytest.raises(InterventionError, match="one tensor"):
        tiny.logits(PROMPTS[:1], intervene=specs[0], per_row=[specs[1]])
    # not aliased: resid_pre of layer 1 is another tensor (the layer's own input)
    apart = [Zero("resid_post", layers=[1]), Steer("resid_pre", 1, torch.ones(tiny.d_model))]
    tiny.logits(PROMPTS[:1], intervene=apart)


def test_steers_on_aliased_cells_compose_and_equal_a_hook_adding_both(tiny):
    g = torch.Generator().manual_seed(3)
    v, w = torch.randn(tiny.d_model, generator=g), torch.randn(tiny.d_model, generator=g)
    ids = tiny.tokenize(PROMPTS[2])
    got = tiny.logits([ids], intervene=[Steer("resid_post", 1, v), Steer("resid_pre", 2, w)])[0]
    with hooked(tiny.hf, tiny.family, "resid_post", 1, edit=lambda x: x + v + w), torch.no_grad():
        ref = tiny.hf(torch.tensor([ids])).logits[0].float()
    atol = logit_atol(ref, tiny.n_layers)
    torch.testing.assert_close(got, ref, rtol=0, atol=atol)
    # negative control: only one of the two additions misses by orders of magnitude
    with hooked(tiny.hf, tiny.family, "resid_post", 1, edit=lambda x: x + v), torch.no_grad():
        half = tiny.hf(torch.tensor([ids])).logits[0].float()
    assert float((got - half).abs().max()) > MARGIN * atol


# -- item 10: Steer copies its vector --------------------------------------------------------


@pytest.fixture(scope="module")
def model(byte_tokenizer):
    return build_tiny("qwen2", byte_tokenizer)


def test_steer_copies_its_vector_at_construction(model):
    vector = torch.randn(model.d_model, generator=torch.Generator().manual_seed(4))
    kept = vector.clone()
    spec = Steer("resid_post", 1, vector, scale=2.0)
    before = model.logits(PROMPTS[:1], intervene=spec)[0]
    vector.mul_(10.0)  # an edit after construction ...
    vector[0] = float("nan")  # ... and a NaN written later
    after = model.logits(PROMPTS[:1], intervene=spec)[0]
    assert torch.equal(before, after) and torch.equal(spec.vector, kept)
    # the spec's own tensor is a copy too, so editing it does not change what is added
    spec.vector.zero_()
    assert torch.equal(model.logits(PROMPTS[:1], intervene=spec)[0], before)
    fresh = model.logits(PROMPTS[:1], intervene=Steer("resid_post", 1, kept, scale=2.0))[0]
    assert torch.equal(fresh, before)


# -- item 15: clear errors instead of raw tracebacks ---------------------------------------


@pytest.mark.parametrize("layer", [1.0, None, "1", [], [1, 2.0], True])
def test_steer_with_a_layer_that_is_not_an_integer_is_refused(layer):
    with pytest.raises(InterventionError, match="layer="):
        Steer("resid_post", layer, torch.ones(8))


def test_steer_with_a_vector_on_the_meta_device_is_refused():
    with pytest.raises(InterventionError, match="meta device"):
        Steer("resid_post", 1, torch.ones(8, device="meta"))


@pytest.mark.parametrize("token", [704, 10**6, -1, 2.0])
def test_logit_difference_with_an_id_outside_the_vocabulary_is_refused(model, token):
    with pytest.raises(InputError, match="LogitDifference token"):
        check_metrics(model, LogitDifference(token, 5), [4])
    assert check_metrics(model, LogitDifference(703, 5), [4])[0].correct == 703
